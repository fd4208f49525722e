#!/usr/bin/env bash
# Trace loading: elapsed time and peak memory of dynosim against the reference when the run is
# capped at 0 simulated seconds (`--max-sim-time-seconds 0`), so that reading the trace and
# building the workload dominate. Prints one line per trace; docs/benchmarks.md ("Trace loading")
# quotes it.
#
#   bench/load.sh [RUNS]        (default 3 runs each; the best elapsed time and its RSS count)
#
# The million-row traces are generated (deterministically) into a temporary directory:
# - mooncake, 1M single-turn rows of 2-8 hash ids with shared prefixes;
# - mooncake-delta, 200k sessions of 5 turns (the reference materialises every prompt token);
# - agentic_mooncake, 1M rows in chains and fans (dynosim only: the reference ignores the time
#   cap on agentic traces and would simulate the whole trace);
# - dynamo, 1M request_end records in two gzip shards (dynosim only, same reason when agentic;
#   standard Dynamo traces are lowered to mooncake rows by both).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-3}
ref=${REF_VENV:-$HOME/.cache/dynosim-reference}
traces=$root/../shared/traces
"$root/../shared/tools/reference-setup.sh" "$ref" >/dev/null
cargo build --release -q -p dynosim-cli --manifest-path "$root/Cargo.toml"
ours=${DYNOSIM_BIN:-$root/target/release/dynosim}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$tmp" <<'EOF'
import gzip, json, random, sys
out = sys.argv[1]
rng = random.Random(7)
dump = lambda r: json.dumps(r, separators=(",", ":")) + "\n"
with open(f"{out}/moon1m.jsonl", "w") as f:
    nid = 1_000_000
    for i in range(1_000_000):
        n = rng.randrange(2, 9)
        ids = [i % 97, 1000 + i % 13] + list(range(nid, nid + n - 2)); nid += n - 2
        f.write(dump({"timestamp": i * 3, "input_length": n * 512 - rng.randrange(0, 300),
                      "output_length": rng.randrange(1, 500), "hash_ids": ids}))
with open(f"{out}/delta200k.jsonl", "w") as f:
    nid = 1
    for s in range(200_000):
        for t in range(5):
            row = {"session_id": f"s{s}", "input_length": 300, "output_length": 50, "hash_ids": [nid]}
            nid += 1
            if t == 0: row["timestamp"] = s * 10
            else: row["delay"] = 100
            f.write(dump(row))
with open(f"{out}/agentic1m.jsonl", "w") as f:
    for i in range(1_000_000):
        row = {"request_id": f"r{i}", "hash_ids": [i % 50, i], "input_length": 900, "output_length": 20}
        if i % 10 == 0: row["timestamp"] = i
        else: row["wait_for"] = [f"r{i - 1 - (i % 3 == 0)}"]; row["delay"] = 5
        f.write(dump(row))
for shard in range(2):
    with gzip.open(f"{out}/dyn{shard}.jsonl.gz", "wt") as f:
        for i in range(shard, 1_000_000, 2):
            h = [i % 89, rng.randrange(1 << 62), rng.randrange(1 << 62)]
            f.write(dump({"schema": "dynamo.request.trace.v1", "event_type": "request_end",
                          "event_time_unix_ms": 10 * i + 50,
                          "request": {"request_id": f"q{i}", "output_tokens": 30, "request_received_ms": 10 * i,
                                      "total_time_ms": 50.0,
                                      "replay": {"trace_block_size": 64, "input_length": 180,
                                                 "input_sequence_hashes": h}}}))
EOF

measure() {
  local best_s="" best_rss=""
  for _ in $(seq "$runs"); do
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$@" --max-sim-time-seconds 0 --report-json "$tmp/r.json" \
      >/dev/null 2>"$tmp/err" || { echo "bench: command failed: $*" >&2; tail -3 "$tmp/err" >&2; exit 1; }
    read -r s kb <"$tmp/time"
    if [[ -z $best_s ]] || awk "BEGIN{exit !($s < $best_s)}"; then best_s=$s best_rss=$((kb / 1024)); fi
  done
  echo "$best_s $best_rss"
}

printf '%-36s %10s %10s %8s %10s %10s %8s\n' trace "ref s" "ours s" speedup "ref MB" "ours MB" "mem x"
bench() {
  local label=$1 with_ref=$2; shift 2
  local rs=- rm=-
  if [[ $with_ref == yes ]]; then read -r rs rm < <(DYN_LOG=warn measure "$ref/bin/python" -m dynamo.replay "$@"); fi
  read -r os om < <(measure "$ours" "$@")
  awk -v l="$label" -v rs="$rs" -v os="$os" -v rm="$rm" -v om="$om" 'BEGIN{
    if (rs == "-") printf "%-36s %10s %10.2f %8s %10s %10d %8s\n", l, "-", os, "-", "-", om, "-";
    else printf "%-36s %10.2f %10.2f %7.1fx %10d %10d %7.1fx\n", l, rs, os, rs/(os>0?os:0.01), rm, om, rm/(om>0?om:1)}'
}
bench "conversation (12k rows)" yes "$traces/conversation_trace.jsonl"
bench "mooncake, 1M rows" yes "$tmp/moon1m.jsonl"
bench "mooncake-delta, 200k x 5 turns" yes "$tmp/delta200k.jsonl" --trace-format mooncake-delta
bench "dynamo standard, 1M rows, 2 gz shards" yes "$tmp/dyn0.jsonl.gz" "$tmp/dyn1.jsonl.gz" --trace-format dynamo
bench "agentic_mooncake, 1M rows" no "$tmp/agentic1m.jsonl" --trace-format agentic_mooncake
