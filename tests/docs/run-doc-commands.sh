#!/usr/bin/env bash
# Runs every shell command shown in README.md and docs/*.md, as written, in a fresh clone of
# this repository placed beside ../shared, with the built `dynosim` on PATH.
#
# Commands come from ```sh fences (indented ones too). Lines ending in `\` are joined with the
# next; comment lines and blank lines are dropped; every other line is one command, run by bash
# from the clone's root and expected to exit 0. A fence is marked in the Markdown by an HTML
# comment on the line just above it:
#   <!-- doc-commands: skip REASON -->   not run (a server, a long build, a tool CI lacks);
#                                         counted as skipped and listed with its reason
#   <!-- doc-commands: exit N -->        every command of the fence must exit N
# Commands that need aiconfigurator-core (engine args with `aic_backend`, or `--aic-backend`)
# run when $DYNOSIM_PYTHON (or the CI venv ~/.cache/dynosim-aic-venv) imports it, and are
# counted as skipped otherwise. `python` resolves to the CI venv (target/ci-venv) when present.
#
# Usage: tests/docs/run-doc-commands.sh [DYNOSIM_BINARY]   (default: target/debug/dynosim)
# Ends with the line "N passed, N failed, N skipped"; exits 1 when any command failed.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
binary=${1:-$root/target/debug/dynosim}
if [ ! -x "$binary" ]; then
    echo "error: $binary is not an executable dynosim (build it: cargo build -p dynosim-cli)" >&2
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
binary=$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")
shared=$root/../shared
if [ ! -d "$shared/traces" ]; then
    echo "error: $shared/traces is absent: the documented commands replay ../shared traces" >&2
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
fi
per_command_seconds=${DOC_COMMAND_TIMEOUT:-600}

# The fresh clone: <tmp>/<repo name>, with <tmp>/shared pointing at ../shared.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
clone=$work/$(basename "$root")
git clone --quiet "$root" "$clone" || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
ln -s "$(cd "$shared" && pwd)" "$work/shared"

# `dynosim` on PATH is the built binary (a wrapper, so no other file named dynosim wins).
mkdir -p "$work/bin"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$binary" > "$work/bin/dynosim"
chmod +x "$work/bin/dynosim"
path=$work/bin:$PATH
if [ -x "$root/target/ci-venv/bin/python" ]; then
    path=$work/bin:$root/target/ci-venv/bin:$PATH
fi

aic_python=${DYNOSIM_PYTHON:-}
if [ -z "$aic_python" ] && [ -x "$HOME/.cache/dynosim-aic-venv/bin/python" ]; then
    aic_python=$HOME/.cache/dynosim-aic-venv/bin/python
fi
if [ -n "$aic_python" ] && ! "$aic_python" -c "import aiconfigurator_core" 2>/dev/null; then
    aic_python=
fi

# One record per command: file:line <TAB> mode <TAB> argument <TAB> command, where mode is
# run (argument: the expected exit) or skip (argument: the reason).
extract() {
    local file=$1
    awk -v file="$file" '
        function flush_command() {
            if (pending != "") {
                if (skip != "") printf "%s:%d\tskip\t%s\t%s\n", file, start, skip, pending
                else printf "%s:%d\trun\t%s\t%s\n", file, start, expect, pending
            }
            pending = ""
        }
        {
            line = $0
            if (!in_fence) {
                if (line ~ /^[ \t]*```sh[ \t]*$/) {
                    in_fence = 1
                    skip = marker_skip; expect = marker_exit
                    pending = ""; continuing = 0
                } else if (line ~ /<!-- doc-commands: skip /) {
                    marker_skip = line
                    sub(/.*<!-- doc-commands: skip /, "", marker_skip)
                    sub(/ *-->.*/, "", marker_skip)
                    next
                } else if (line ~ /<!-- doc-commands: exit [0-9]+ -->/) {
                    marker_exit = line
                    sub(/.*<!-- doc-commands: exit /, "", marker_exit)
                    sub(/ *-->.*/, "", marker_exit)
                    next
                }
                marker_skip = ""; marker_exit = 0
                next
            }
            if (line ~ /^[ \t]*```[ \t]*$/) {
                flush_command(); in_fence = 0; marker_skip = ""; marker_exit = 0
                next
            }
            sub(/^[ \t]+/, "", line)
            if (!continuing && (line == "" || line ~ /^#/)) next
            if (!continuing) start = NR
            if (line ~ /\\$/) {
                sub(/\\$/, "", line)
                pending = pending line " "
                continuing = 1
                next
            }
            pending = pending line
            continuing = 0
            flush_command()
        }
        BEGIN { marker_exit = 0 }
    ' "$file"
}

passed=0
failed=0
skipped=0
skipped_list=()
failed_list=()
logs=$work/logs
mkdir -p "$logs"
cd "$clone" || exit 1
while IFS=$'\t' read -r where mode argument command; do
    if [ "$mode" = skip ]; then
        skipped=$((skipped + 1))
        skipped_list+=("$where: $command  [$argument]")
        continue
    fi
    if [[ "$command" == *aic_backend* || "$command" == *--aic-backend* ]] && [ -z "$aic_python" ]; then
        skipped=$((skipped + 1))
        skipped_list+=("$where: $command  [needs aiconfigurator-core: pip install 'dynosim[aic]']")
        continue
    fi
    log=$logs/$((passed + failed + 1)).log
    echo "== $where: $command"
    PATH=$path DYNOSIM_PYTHON=$aic_python timeout "$per_command_seconds" \
        bash -c "$command" </dev/null >"$log" 2>&1
    rc=$?
    if [ "$rc" -eq "$argument" ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failed_list+=("$where: $command  [exit $rc, expected $argument]")
        echo "   FAILED (exit $rc, expected $argument); its output ends:"
        tail -n 15 "$log" | sed 's/^/   | /'
    fi
done < <(for file in "$clone/README.md" "$clone"/docs/*.md; do
             extract "${file#"$clone"/}"
         done)

for entry in "${skipped_list[@]+"${skipped_list[@]}"}"; do
    echo "skipped: $entry"
done
for entry in "${failed_list[@]+"${failed_list[@]}"}"; do
    echo "FAILED: $entry"
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
