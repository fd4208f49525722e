#!/usr/bin/env bash
# Whole-process speed and peak memory of dynosim against the reference (`python -m dynamo.replay`,
# ai-dynamo 1.4.2) on the same arguments. Prints one line per workload with both figures and the
# ratios; the figures in docs/benchmarks.md come from this script.
#
#   bench/compare.sh [RUNS]        (default 3 runs each; the best elapsed time and its RSS count)
#
# Needs ../shared beside the repository (the Mooncake traces) and installs the reference with
# ../shared/tools/reference-setup.sh on first use (REF_VENV overrides where).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
ref=${REF_VENV:-$HOME/.cache/dynosim-reference}
traces=$root/../shared/traces
[[ -f $traces/conversation_trace.jsonl ]] || { echo "bench: $traces/conversation_trace.jsonl is absent" >&2; exit 2; }
"$root/../shared/tools/reference-setup.sh" "$ref" >/dev/null
cargo build --release -q -p dynosim-cli --manifest-path "$root/Cargo.toml"
ours=$root/target/release/dynosim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Best-of-N elapsed seconds and the peak RSS (MB) of that run, for one command.
measure() {
  local best_s="" best_rss=""
  for _ in $(seq "$runs"); do
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$@" --report-json "$tmp/r.json" >/dev/null 2>"$tmp/err" \
      || { echo "bench: command failed: $*" >&2; tail -3 "$tmp/err" >&2; exit 1; }
    read -r s kb <"$tmp/time"
    if [[ -z $best_s ]] || awk "BEGIN{exit !($s < $best_s)}"; then best_s=$s best_rss=$((kb / 1024)); fi
  done
  echo "$best_s $best_rss"
}

printf '%-38s %10s %10s %8s %10s %10s %8s\n' workload "ref s" "ours s" speedup "ref MB" "ours MB" "mem x"
bench() {
  local label=$1; shift
  read -r rs rm < <(DYN_LOG=warn measure "$ref/bin/python" -m dynamo.replay "$@")
  read -r os om < <(measure "$ours" "$@")
  awk -v l="$label" -v rs="$rs" -v os="$os" -v rm="$rm" -v om="$om" \
    'BEGIN{printf "%-38s %10.2f %10.2f %7.1fx %10d %10d %7.1fx\n", l, rs, os, rs/(os>0?os:0.01), rm, om, rm/(om>0?om:1)}'
}
bench "conversation, 1 worker" "$traces/conversation_trace.jsonl"
bench "conversation, 4 workers" "$traces/conversation_trace.jsonl" --num-workers 4
bench "conversation, 4 workers, kv_router" "$traces/conversation_trace.jsonl" --num-workers 4 --router-mode kv_router
bench "conversation, sglang, c24" "$traces/conversation_trace.jsonl" --replay-concurrency 24 \
  --extra-engine-args '{"engine_type":"sglang","num_gpu_blocks":300000}'
bench "conversation, sglang, 4w kv_router, c24" "$traces/conversation_trace.jsonl" --num-workers 4 \
  --router-mode kv_router --replay-concurrency 24 --extra-engine-args '{"engine_type":"sglang","num_gpu_blocks":300000}'
bench "synthetic 5000/500 x2000 c64" --input-tokens 5000 --output-tokens 500 --request-count 2000 --replay-concurrency 64
