#!/usr/bin/env bash
# Runs every case of cases.tsv through the reference (ai-dynamo 1.4.2, installed by
# ../shared/tools/reference-setup.sh) and stores its report and per-request records under
# golden/. Run from anywhere; needs ../shared beside the repository.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ref=${REF_VENV:-$HOME/.cache/dynosim-reference}
"$root/../shared/tools/reference-setup.sh" "$ref" >/dev/null
mkdir -p "$root/tests/parity/golden"
cd "$root"
only=${1:-}
while IFS=$'\t' read -r name args _close; do
  [[ -z $name || $name == \#* ]] && continue
  [[ -n $only && $name != "$only" ]] && continue
  read -ra argv <<<"$args"
  out=tests/parity/golden/$name
  extra=()
  [[ -f ${argv[0]} ]] && extra=(--report-jsonl "$out.jsonl")
  if DYN_LOG=warn "$ref/bin/python" -m dynamo.replay "${argv[@]}" --report-json "$out.json" \
      "${extra[@]}" >/dev/null 2>"/tmp/golden-$name.err"; then
    if [[ -f $out.jsonl ]]; then
      python3 tests/parity/compact_records.py "$out.jsonl" "$out.records.tsv.gz" && rm "$out.jsonl"
    fi
    echo "ok   $name"
  else
    echo "FAIL $name: $(tail -1 "/tmp/golden-$name.err")"
  fi
done < tests/parity/cases.tsv
