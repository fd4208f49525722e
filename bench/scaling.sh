#!/usr/bin/env bash
# How dynosim's whole-process time and peak memory grow with the request count: synthetic
# requests of 1000 prompt and 100 output tokens, concurrency 256, 4 workers, at 10k, 100k and
# 1M requests. Prints the medians of RUNS runs, the time per request relative to the smallest
# count, and the time per request relative to the row before (1.00 is linear growth; the fixed
# cost of a run, a few milliseconds, weighs most at 10k). The reference is not run (a million
# requests take it minutes).
#
#   bench/scaling.sh [RUNS]        (default 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench: RUNS must be a positive integer, got '$runs'" >&2; exit 2; }
cargo build --release -q -p dynosim-cli --manifest-path "$root/Cargo.toml"
ours=$root/target/release/dynosim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source "$root/bench/timing.sh"

printf '%-10s %8s %8s %8s %14s %14s\n' requests "s" "cpu s" "MB" "s per req (x)" "vs row before"
base="" prev=""
for count in 10000 100000 1000000; do
  : >"$tmp/runs"
  for _ in $(seq "$runs"); do
    timed_run "$tmp/runs" "$ours" --input-tokens 1000 --output-tokens 100 --request-count "$count" \
      --replay-concurrency 256 --num-workers 4 --report-json "$tmp/r.json" \
      || { echo "bench: run of $count requests failed" >&2; tail -3 "$tmp/err" >&2; exit 1; }
  done
  s=$(median "$tmp/runs" 1) u=$(median "$tmp/runs" 2) kb=$(median "$tmp/runs" 3)
  per=$(awk -v s="$s" -v n="$count" 'BEGIN{print s / n}')
  [[ -n $base ]] || base=$per
  [[ -n $prev ]] || prev=$per
  awk -v c="$count" -v s="$s" -v u="$u" -v kb="$kb" -v per="$per" -v base="$base" -v prev="$prev" \
    'BEGIN{printf "%-10d %8.3f %8.2f %8d %14.2f %14.2f\n", c, s, u, kb / 1024, per / base, per / prev}'
  prev=$per
done
