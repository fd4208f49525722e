#!/usr/bin/env bash
# Whole-process speed and peak memory of dynosim against the reference (`python -m dynamo.replay`,
# ai-dynamo 1.4.2) on the same arguments. Prints one line per workload with both figures and the
# ratios; the figures in docs/benchmarks.md ("Speed against the reference") come from this script.
#
#   bench/compare.sh [RUNS]        (default 3; RUNS runs each, ours and the reference alternating;
#                                   elapsed time, user CPU time and peak RSS are each the median)
#
# Runs unattended. Needs ../shared beside the repository (the conversation trace). The reference
# is taken from REF_VENV (default ~/.cache/dynosim-reference); when it is absent, its columns
# read "-" and a message says so. BENCH_ONLY=REGEX runs only the workloads whose label matches.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench: RUNS must be a positive integer, got '$runs'" >&2; exit 2; }
ref=${REF_VENV:-$HOME/.cache/dynosim-reference}
traces=$root/../shared/traces
[[ -f $traces/conversation_trace.jsonl ]] || { echo "bench: $traces/conversation_trace.jsonl is absent" >&2; exit 2; }
if [[ -x $ref/bin/python ]] && "$ref/bin/python" -c 'import dynamo.replay' 2>/dev/null; then
  have_ref=1
else
  have_ref=0
  echo "bench: the reference is not installed at $ref (set REF_VENV); its columns are skipped" >&2
fi
cargo build --release -q -p dynosim-cli --manifest-path "$root/Cargo.toml"
ours=$root/target/release/dynosim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source "$root/bench/timing.sh"

# One run: appends "elapsed_s user_s rss_kb" to the file named by $1.
run_once() {
  local into=$1; shift
  timed_run "$into" "$@" --report-json "$tmp/r.json" \
    || { echo "bench: command failed: $*" >&2; tail -3 "$tmp/err" >&2; exit 1; }
}

printf '%-36s %8s %8s %8s %8s %8s %8s %8s %8s\n' workload "ref s" "ours s" speedup "ref cpu" "ours cpu" \
  "ref MB" "ours MB" "mem x"
bench() {
  local label=$1; shift
  [[ -z ${BENCH_ONLY:-} || $label =~ $BENCH_ONLY ]] || return 0
  : >"$tmp/ref" && : >"$tmp/ours"
  for _ in $(seq "$runs"); do
    if ((have_ref)); then DYN_LOG=warn run_once "$tmp/ref" "$ref/bin/python" -m dynamo.replay "$@"; fi
    run_once "$tmp/ours" "$ours" "$@"
  done
  local rs=- ru=- rm=- os ou om
  if ((have_ref)); then rs=$(median "$tmp/ref" 1) ru=$(median "$tmp/ref" 2) rm=$(median "$tmp/ref" 3); fi
  os=$(median "$tmp/ours" 1) ou=$(median "$tmp/ours" 2) om=$(median "$tmp/ours" 3)
  awk -v l="$label" -v rs="$rs" -v os="$os" -v ru="$ru" -v ou="$ou" -v rm="$rm" -v om="$om" 'BEGIN{
    omb = om / 1024
    if (rs == "-") {
      printf "%-36s %8s %8.3f %8s %8s %8.2f %8s %8d %8s\n", l, "-", os, "-", "-", ou, "-", omb, "-"
    } else {
      rmb = rm / 1024
      printf "%-36s %8.2f %8.3f %7.1fx %8.2f %8.2f %8d %8d %7.1fx\n", l, rs, os, rs / (os > 0 ? os : 0.01),
        ru, ou, rmb, omb, rmb / (omb > 0 ? omb : 1)
    }}'
}
conv=$traces/conversation_trace.jsonl
bench "conversation, 1 worker" "$conv"
bench "conversation, 4 workers" "$conv" --num-workers 4
bench "conversation, 4 workers, kv_router" "$conv" --num-workers 4 --router-mode kv_router
bench "synthetic 5000/500 x2000 c64" --input-tokens 5000 --output-tokens 500 --request-count 2000 \
  --replay-concurrency 64
bench "synthetic 1000/100 x100k c256 4w" --input-tokens 1000 --output-tokens 100 --request-count 100000 \
  --replay-concurrency 256 --num-workers 4
bench "conversation, sglang, c24" "$conv" --replay-concurrency 24 \
  --extra-engine-args '{"engine_type":"sglang","num_gpu_blocks":300000}'
bench "conversation, sglang, 4w kv_router, c24" "$conv" --num-workers 4 --router-mode kv_router \
  --replay-concurrency 24 --extra-engine-args '{"engine_type":"sglang","num_gpu_blocks":300000}'
