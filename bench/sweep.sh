#!/usr/bin/env bash
# Speed of `dynosim sweep`: the same candidates one after another (--jobs 1) and on every core
# (--jobs 2 on the project's machine), wall and CPU seconds of each, and the CPU cost per
# candidate, on the reference replay_optimize example's workload and search (sweeps.md §4, §6:
# B=16 disaggregated, KV router, credit 1 x 6 prefill-load scales, polynomial timing: 35
# evaluations; the reference took 53.9 s wall, 76 s user, about 2.2 CPU-s per candidate).
#
# Then a grid of 36 candidates the same two ways, for the parallel speed-up; then issue 33's
# grid of 12 candidates (2000/200 tokens, 8000 requests, concurrency 48; 1/2/4 workers x
# round_robin/kv_router x max_num_seqs 16/64) as a sweep with --jobs 1 and --jobs 2 against the
# same candidates run one after another as separate `dynosim` processes (the sum of their wall
# times; the two kv_router candidates over one worker are refused by both at once).
#
#   bench/sweep.sh [RUNS]     (default 1 run of each; runs alternate serial and parallel)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-1}
cargo build --release -q -p dynosim-cli --manifest-path "$root/Cargo.toml"
ours=$root/target/release/dynosim
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/example.yaml" <<'SPEC'
engine:
  model: Qwen/Qwen3-32B
  backend: vllm
  timing: polynomial
  basePrefillEngineArgs: {block_size: 512, enable_prefix_caching: true}
  baseDecodeEngineArgs: {block_size: 512, enable_prefix_caching: true}
hardware: {gpuSku: h200_sxm, totalGpus: 16}
workload: {isl: 32768, osl: 256, requestCount: 5000, concurrency: 200, sharedPrefixRatio: 0.5, numPrefixGroups: 50}
sla: {ttft: 50000, itl: 100, e2eLatency: 60000}
router: {mode: kv_router, overlapCredits: [1.0], prefillLoadScales: [0, 0.25, 0.5, 1, 2, 4]}
SPEC
# A grid of 36 candidates (3 of them rejected at once: kv_router over one worker).
cat >"$tmp/grid.yaml" <<'SPEC'
base: {input_tokens: 4096, output_tokens: 256, request_count: 2000, replay_concurrency: 64,
       shared_prefix_ratio: 0.5, num_prefix_groups: 16, extra_engine_args: {num_gpu_blocks: 4096}}
grid:
  num_workers: [1, 2, 3, 4, 5, 6]
  router_mode: [round_robin, kv_router]
  extra_engine_args.max_num_seqs: [32, 64, 128]
SPEC

# One sweep per (spec, jobs), alternating serial and parallel; prints wall and CPU seconds.
measure() {
  local name=$1 spec=$2 table=$3
  for run in $(seq "$runs"); do
    for jobs in 1 2; do
      out=$tmp/out-$name-$jobs-$run
      /usr/bin/time -f "%e %U %S" -o "$tmp/time" "$ours" sweep "$spec" --out "$out" --jobs "$jobs" >"$tmp/stdout-$name"
      read -r wall user sys <"$tmp/time"
      count=$(awk 'NR > 1' "$out/$table" | wc -l)
      awk -v name="$name" -v j="$jobs" -v w="$wall" -v u="$user" -v s="$sys" -v n="$count" \
        'BEGIN { printf "%-8s %5s %8.2f %8.2f %10d %12.3f\n", name, j, w, u + s, n, (u + s) / n }'
    done
  done
}
printf '%-8s %5s %8s %8s %10s %12s\n' spec jobs wall_s cpu_s candidates cpu_s/cand
measure example "$tmp/example.yaml" evaluated.csv
measure grid "$tmp/grid.yaml" results.csv

grep -A1 "best_feasible" "$tmp/stdout-example" | head -2

cat >"$tmp/grid12.yaml" <<'SPEC'
base: {input_tokens: 2000, output_tokens: 200, request_count: 8000, replay_concurrency: 48}
grid:
  num_workers: [1, 2, 4]
  router_mode: [round_robin, kv_router]
  extra_engine_args.max_num_seqs: [16, 64]
SPEC
# The grid's candidates as separate processes, one after another: the summed wall time and
# how many ran (10: kv_router over one worker is refused).
separately() {
  local start end ran=0
  start=$(date +%s.%N)
  for workers in 1 2 4; do
    for router in round_robin kv_router; do
      for seqs in 16 64; do
        "$ours" --input-tokens 2000 --output-tokens 200 --request-count 8000 \
          --replay-concurrency 48 --num-workers "$workers" --router-mode "$router" \
          --extra-engine-args "{\"max_num_seqs\":$seqs}" >/dev/null 2>&1 && ran=$((ran + 1))
      done
    done
  done
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" -v n="$ran" 'BEGIN { printf "%.2f %d\n", e - s, n }'
}
printf '\n%-8s %8s %4s %8s %8s %10s %10s\n' grid12 separate ran jobs_1 jobs_2 "j1/sep" "sep/j2"
for run in $(seq "$runs"); do
  read -r separate ran < <(separately)
  walls=()
  for jobs in 1 2; do
    /usr/bin/time -f "%e" -o "$tmp/time" "$ours" sweep "$tmp/grid12.yaml" --out "$tmp/grid12-$jobs-$run" --jobs "$jobs" >/dev/null
    walls+=("$(cat "$tmp/time")")
  done
  awk -v s="$separate" -v n="$ran" -v a="${walls[0]}" -v b="${walls[1]}" \
    'BEGIN { printf "%-8s %8.2f %4d %8.2f %8.2f %10.2f %10.2f\n", "run", s, n, a, b, a / s, s / b }'
done
