#!/usr/bin/env bash
# Memory bounds (issues 11 and 15): peak resident memory (whole process, `/usr/bin/time -f %M`)
# and elapsed time of the release binary on the runs whose memory used to grow with their
# length. Prints one line per run; docs/benchmarks.md ("Memory bounds") quotes it.
#
#   bench/memory.sh            the 1M and 10M synthetic runs and the 1M-row trace with JSONL
#   bench/memory.sh --huge     also 100M synthetic requests (several minutes)
#
# The 1M-row mooncake trace is generated (deterministically, like bench/load.sh's) into a
# temporary directory; its load-only peak (`--max-sim-time-seconds 0`) is printed too. Single runs: the memory figures do not depend on load; the times do.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -q -p dynosim-cli --manifest-path "$root/Cargo.toml"
ours=${DYNOSIM_BIN:-$root/target/release/dynosim}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$tmp" <<'PY'
import json, random, sys
out = sys.argv[1]
rng = random.Random(7)
dump = lambda r: json.dumps(r, separators=(",", ":")) + "\n"
# 1M single-turn rows every 20 ms, 2-4 hash ids with shared prefixes: a load 4 workers keep up
# with, so what is measured is what is kept per request, not a queue that grows without end.
with open(f"{out}/moon1m.jsonl", "w") as f:
    nid = 1_000_000
    for i in range(1_000_000):
        n = rng.randrange(2, 5)
        ids = [i % 97, 1000 + i % 13] + list(range(nid, nid + n - 2)); nid += n - 2
        f.write(dump({"timestamp": i * 20, "input_length": n * 512 - rng.randrange(0, 300),
                      "output_length": rng.randrange(1, 200), "hash_ids": ids}))
PY

# name, then the arguments
measure() {
    local name=$1
    shift
    /usr/bin/time -f "%M %e" -o "$tmp/time" "$ours" "$@" --report-json "$tmp/report.json" \
        >/dev/null
    read -r kb seconds <"$tmp/time"
    printf '%-62s %7d MB %8.1f s\n' "$name" $((kb / 1024)) "$seconds"
}

printf '%-62s %10s %10s\n' run "peak RSS" elapsed
measure "synthetic 1M requests, 1000/100 tokens, concurrency 256, 4 workers" \
    --input-tokens 1000 --output-tokens 100 --request-count 1000000 \
    --replay-concurrency 256 --num-workers 4
measure "synthetic 10M requests, 100/2 tokens, concurrency 64" \
    --input-tokens 100 --output-tokens 2 --request-count 10000000 --replay-concurrency 64
measure "1M-row mooncake trace, 4 workers, --report-jsonl" \
    "$tmp/moon1m.jsonl" --num-workers 4 --report-jsonl "$tmp/records.jsonl"
measure "1M-row mooncake trace, loading only (--max-sim-time-seconds 0)" \
    "$tmp/moon1m.jsonl" --num-workers 4 --max-sim-time-seconds 0
if [[ ${1:-} == --huge ]]; then
    measure "synthetic 100M requests, 100/2 tokens, concurrency 64" \
        --input-tokens 100 --output-tokens 2 --request-count 100000000 --replay-concurrency 64
fi
