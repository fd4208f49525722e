#!/usr/bin/env bash
# Whether two dynosim binaries give the same results: every parity case of
# tests/parity/cases.tsv and every benchmark row of compare.sh, run with both, comparing the
# report JSON (the keys that measure the simulator itself removed) and, for trace replays, the
# per-request JSONL records byte for byte, and the exit codes. For performance work, which must
# not change a single result: build the old binary, keep a copy, build the new one, run this.
#
#   bench/equivalence.sh OLD_BINARY NEW_BINARY [REGEX]    (REGEX picks workloads by name)
#
# Prints one line per workload ("same NAME" or "DIFFERENT NAME: what") and a summary; exits 1
# if any differs. Needs ../shared beside the repository (most cases read its traces).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[[ $# -ge 2 ]] || { echo "usage: bench/equivalence.sh OLD_BINARY NEW_BINARY [REGEX]" >&2; exit 2; }
old=$(realpath "$1") new=$(realpath "$2") only=${3:-}
for bin in "$old" "$new"; do
  [[ -x $bin ]] || { echo "bench: $bin is not an executable" >&2; exit 2; }
done
[[ -d $root/../shared/traces ]] || { echo "bench: $root/../shared/traces is absent" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
same=0 different=0

# The report without the keys that measure the simulator itself, keys sorted.
strip() {
  python3 -c 'import json, sys
speed = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
report = json.load(open(sys.argv[1]))
print(json.dumps({k: v for k, v in report.items() if k not in speed}, sort_keys=True))' "$1" 2>&1
}

compare() {
  local name=$1; shift
  [[ -z $only || $name =~ $only ]] || return 0
  local records=1 arg
  for arg in "$@"; do [[ $arg == --input-tokens ]] && records=0; done
  local which bin
  for which in old new; do
    bin=$old; [[ $which == new ]] && bin=$new
    local extra=()
    ((records)) && extra=(--report-jsonl "$tmp/$which.jsonl")
    : >"$tmp/$which.jsonl"
    (cd "$root" && "$bin" "$@" --report-json "$tmp/$which.json" "${extra[@]}" >/dev/null 2>"$tmp/$which.err")
    echo $? >"$tmp/$which.rc"
  done
  local what=""
  cmp -s "$tmp/old.rc" "$tmp/new.rc" || what="exit codes $(cat "$tmp/old.rc") and $(cat "$tmp/new.rc")"
  [[ -n $what ]] || cmp -s "$tmp/old.jsonl" "$tmp/new.jsonl" || what="records"
  [[ -n $what || $(strip "$tmp/old.json") == "$(strip "$tmp/new.json")" ]] || what="report"
  if [[ -z $what ]]; then
    echo "same $name"; same=$((same + 1))
  else
    echo "DIFFERENT $name: $what"; different=$((different + 1))
  fi
  rm -f "$tmp"/old.* "$tmp"/new.*
}

while IFS=$'\t' read -r name args _; do
  [[ -z $name || $name == \#* ]] && continue
  read -ra argv <<<"$args"
  compare "$name" "${argv[@]}"
done <"$root/tests/parity/cases.tsv"
conv=../shared/traces/conversation_trace.jsonl
sglang='{"engine_type":"sglang","num_gpu_blocks":300000}'
compare bench-conversation-1w "$conv"
compare bench-conversation-4w "$conv" --num-workers 4
compare bench-conversation-4w-kv "$conv" --num-workers 4 --router-mode kv_router
compare bench-synthetic-5000x500 --input-tokens 5000 --output-tokens 500 --request-count 2000 \
  --replay-concurrency 64
compare bench-synthetic-100k --input-tokens 1000 --output-tokens 100 --request-count 100000 \
  --replay-concurrency 256 --num-workers 4
compare bench-sglang-c24 "$conv" --replay-concurrency 24 --extra-engine-args "$sglang"
compare bench-sglang-4w-kv-c24 "$conv" --num-workers 4 --router-mode kv_router \
  --replay-concurrency 24 --extra-engine-args "$sglang"
echo "summary: $same same, $different different"
((different == 0))
