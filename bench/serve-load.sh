#!/usr/bin/env bash
# dynosim serve under load: CONNECTIONS streaming connections (default 500) held for SECONDS
# (default 60), each sending completions (about 110 prompt tokens, 200 output tokens) back to
# back. Prints the requests, tokens and errors; the server's delay per token
# (dynosim:token_delay_seconds) and its pacing part (dynosim:event_wake_delay_seconds); what
# it added to each request's first and last token as the client measured it against the
# simulated times of the served run's records; and the server's resident memory over the run.
# docs/serve.md ("Load, as measured") quotes it.
#
#   bench/serve-load.sh [CONNECTIONS] [SECONDS] [extra dynosim serve flags...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
connections=${1:-500}
seconds=${2:-60}
shift $(($# > 2 ? 2 : $#))
cargo build --release -q -p dynosim-cli --manifest-path "$root/Cargo.toml"
cargo build --release -q -p dynosim-serve --example serve_load --manifest-path "$root/Cargo.toml"
ours=${DYNOSIM_BIN:-$root/target/release/dynosim}
"$root/target/release/examples/serve_load" "$ours" --connections "$connections" --seconds "$seconds" \
  --max-tokens 200 --prompt-words 100 -- \
  --extra-engine-args '{"num_gpu_blocks": 32768, "block_size": 16, "max_num_seqs": 512}' \
  --max-connections 4096 "$@"
