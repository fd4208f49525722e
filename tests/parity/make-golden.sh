#!/usr/bin/env bash
# Runs cases of cases.tsv through the reference (ai-dynamo 1.4.2) and stores its report and
# per-request records under golden/, with a provenance record NAME.provenance.json beside each.
#
#   tests/parity/make-golden.sh [NAME...]        (all cases when no NAME is given)
#
# REF_VENV names the reference's virtual environment (default ~/.cache/dynosim-reference; created
# by ../shared/tools/reference-setup.sh when absent). It must hold ai-dynamo 1.4.2 whose own files
# provide `dynamo.replay`, and no dynosim: anything else is refused before any case runs.
#
# A case marked `close` (the reference is not deterministic there) is run CLOSE_RUNS times
# (default 5): the first report is the golden, and NAME.spread.json stores each numeric key's
# [min, max] over the runs, which the parity test uses as its tolerance. Its records are not kept.
#
# The reference writes an empty per-request JSONL for agentic traces; such a case keeps no records
# golden (the provenance says so) instead of a file that no run can match.
#
# A case with --planner-config needs the reference's planner packages (REF_VENV pointing at an
# environment set up with reference-setup.sh --with-planner). The reference refuses per-request
# records there, so none are kept; instead NAME.planner.txt stores the planner's lines of its
# stdout (the `Scaling events:` block and `Planner ticks: N`), which must match exactly.
#
# All-or-nothing: outputs go to a staging directory and replace golden/ files only when every
# selected case succeeded. Any failure exits non-zero with golden/ unchanged.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ref=${REF_VENV:-$HOME/.cache/dynosim-reference}
runs=${CLOSE_RUNS:-5}
cases_tsv=$root/tests/parity/cases.tsv
golden=$root/tests/parity/golden

die() { echo "make-golden.sh: $*" >&2; exit 1; }

[[ $runs =~ ^[0-9]+$ && $runs -ge 3 ]] || die "CLOSE_RUNS=$runs: need an integer >= 3"
if [[ ! -x $ref/bin/python ]]; then
  setup=$root/../shared/tools/reference-setup.sh
  [[ -x $setup ]] || die "$ref/bin/python is absent and $setup is not there to install it"
  "$setup" "$ref" >/dev/null
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/make-golden.XXXXXX")
trap 'rm -rf "$stage"' EXIT

# The reference, checked here rather than trusted: ai-dynamo 1.4.2 installed, no dynosim
# distribution, `dynamo.replay` loaded from ai-dynamo's own files with its compiled core, and
# importing it pulls in no dynosim module.
identity=$("$ref/bin/python" - <<'EOF' 2>"$stage/identity.err"
import importlib.metadata as md
import importlib.util
import os
import sys

def fail(why):
    print(why)
    sys.exit(1)

try:
    version = md.version("ai-dynamo")
except md.PackageNotFoundError:
    fail("ai-dynamo is not installed")
if version != "1.4.2":
    fail(f"ai-dynamo {version} is installed, not 1.4.2")
try:
    fail(f"dynosim {md.version('dynosim')} is installed in this environment")
except md.PackageNotFoundError:
    pass
spec = importlib.util.find_spec("dynamo.replay")
if spec is None or spec.origin is None:
    fail("no dynamo.replay module")
ours = {os.path.realpath(f.locate()) for f in (md.files("ai-dynamo") or [])}
origin = os.path.realpath(spec.origin)
if origin not in ours:
    fail(f"dynamo.replay comes from {origin}, which is not a file of ai-dynamo 1.4.2")
# Installed files of dynamo.replay must be the ones ai-dynamo recorded (another wheel may have
# overwritten them in place).
import base64  # noqa: E402
import hashlib  # noqa: E402

for f in md.files("ai-dynamo") or []:
    if f.hash and str(f).startswith("dynamo/replay/") and str(f).endswith(".py"):
        digest = hashlib.new(f.hash.mode, f.read_binary()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
            fail(f"{f.locate()} is not the file ai-dynamo 1.4.2 installed")
if importlib.util.find_spec("dynosim") is not None:
    fail("a dynosim package is importable here")
import dynamo.replay.main  # noqa: E402,F401
import dynamo._core  # noqa: E402,F401  (the reference's compiled Rust core)
loaded = sorted(m for m in sys.modules if m == "dynosim" or m.startswith("dynosim."))
if loaded:
    fail(f"importing dynamo.replay loads {', '.join(loaded)}")
try:
    runtime = md.version("ai-dynamo-runtime")
except md.PackageNotFoundError:
    runtime = "absent"
print(f"ai-dynamo {version}\tai-dynamo-runtime {runtime}\t{origin}\t{sys.version.split()[0]}")
EOF
) || die "$ref is not the reference: ${identity:-$(tail -1 "$stage/identity.err")}"
rm -f "$stage/identity.err"
IFS=$'\t' read -r ref_dynamo ref_runtime ref_module ref_python <<<"$identity"
echo "reference: $ref_dynamo, $ref_runtime ($ref_module)"

# JSON string of $1 (for the provenance record).
json_str() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }

selected=0
failed=()
while IFS=$'\t' read -r name args mark; do
  [[ -z $name || $name == \#* ]] && continue
  if [[ $# -gt 0 ]]; then
    want=0
    for only in "$@"; do [[ $name == "$only" ]] && want=1; done
    [[ $want == 1 ]] || continue
  fi
  selected=$((selected + 1))
  read -ra argv <<<"$args"
  close=0
  [[ $mark == close* ]] && close=1
  trace=0
  [[ ${argv[0]} != --* ]] && trace=1
  planner=0
  for a in "${argv[@]}"; do [[ $a == --planner-config ]] && planner=1; done
  out=$stage/$name
  n=1
  [[ $close == 1 ]] && n=$runs
  ok=1
  for ((i = 1; i <= n; i++)); do
    extra=()
    [[ $trace == 1 && $close == 0 && $planner == 0 ]] && extra=(--report-jsonl "$out.jsonl")
    if ! (cd "$root" && DYN_LOG=warn "$ref/bin/python" -m dynamo.replay "${argv[@]}" \
        --report-json "$out.run$i.json" "${extra[@]}" >"$out.run$i.stdout" 2>"$out.err"); then
      failed+=("$name: $(tail -1 "$out.err")")
      ok=0
      break
    fi
  done
  [[ $ok == 1 ]] || { echo "FAIL $name"; continue; }
  mv "$out.run1.json" "$out.json"
  if [[ $planner == 1 ]]; then
    # The planner's lines: the scaling events block and the tick count. A close case keeps
    # every distinct variant its runs printed (the kv_router's randomness can shift a scaling
    # event), in the order first seen, separated by a line "# or".
    : >"$out.planner.txt"
    for ((i = 1; i <= n; i++)); do
      awk '/^Scaling events:$/ {on = 1; print; next}
           on && /^  t=/ {print; next}
           {on = 0}
           /^Planner ticks: / {print}' "$out.run$i.stdout" >"$out.variant"
      if ! python3 - "$out.planner.txt" "$out.variant" <<'EOF'
import sys
stored, variant = (open(p).read() for p in sys.argv[1:])
variants = stored.split("# or\n") if stored else []
sys.exit(0 if variant in variants else 1)
EOF
      then
        [[ -s $out.planner.txt ]] && echo "# or" >>"$out.planner.txt"
        cat "$out.variant" >>"$out.planner.txt"
      fi
    done
    rm -f "$out.variant"
  fi
  rm -f "$out".run*.stdout
  records='"compared"'
  if [[ $close == 1 ]]; then
    python3 - "$out.spread.json" "$out.json" "$out".run*.json <<'EOF'
import json
import sys

dst, *paths = sys.argv[1:]
reports = [json.load(open(p)) for p in paths]
keys = {}
for key, value in reports[0].items():
    values = [r.get(key) for r in reports]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        keys[key] = [min(values), max(values)]
with open(dst, "w") as f:
    json.dump({"runs": len(reports), "keys": keys}, f, indent=1, sort_keys=True)
    f.write("\n")
EOF
    rm -f "$out".run*.json
    records='"not compared: the reference is not deterministic here"'
  elif [[ $planner == 1 ]]; then
    records='"none: the reference refuses per-request records with a planner"'
  elif [[ $trace == 1 ]]; then
    if [[ -s $out.jsonl ]]; then
      python3 "$root/tests/parity/compact_records.py" "$out.jsonl" "$out.records.tsv.gz"
    else
      records='"none: the reference wrote an empty per-request JSONL"'
    fi
    rm -f "$out.jsonl"
  else
    records='"none: generated workloads have no per-request records file"'
  fi
  rm -f "$out.err"
  cat >"$out.provenance.json" <<EOF
{
 "case": $(json_str "$name"),
 "args": $(json_str "$args"),
 "reference": $(json_str "$ref_dynamo"),
 "runtime": $(json_str "$ref_runtime"),
 "module": $(json_str "$ref_module"),
 "python": $(json_str "$ref_python"),
 "runs": $n,
 "records": $records,
 "generated_utc": $(json_str "$(date -u +%Y-%m-%dT%H:%M:%SZ)")
}
EOF
  echo "ok   $name"
done <"$cases_tsv"

[[ $selected -gt 0 ]] || die "no case of cases.tsv matches: $*"
if [[ ${#failed[@]} -gt 0 ]]; then
  printf 'FAIL %s\n' "${failed[@]}" >&2
  die "${#failed[@]} of $selected case(s) failed; golden/ is unchanged"
fi
# Every case succeeded: replace each regenerated case's files as a whole.
for prov in "$stage"/*.provenance.json; do
  name=$(basename "$prov" .provenance.json)
  rm -f "$golden/$name.json" "$golden/$name.records.tsv.gz" "$golden/$name.spread.json" \
    "$golden/$name.planner.txt" "$golden/$name.provenance.json"
  for f in "$stage/$name".*; do mv "$f" "$golden/"; done
done
echo "stored $selected case(s) in tests/parity/golden/"
