"""The command line from Python: ``python -m dynosim``, ``python -m dynamo.replay`` and
``dynosim.main`` all run the ``dynosim`` binary that the ``dynosim-bin`` package installs (the
``dynosim`` command is that binary itself). The extension module links no command-line code.

- ``exec_command`` (the two modules) replaces the Python process with the binary: its exit
  code, its Ctrl-C handling (130 after the report of what happened) and its silence on a closed
  standard output (exit 1) are the process's own, with nothing of Python's in between.
- ``run_captured`` (``dynosim.main``) runs the binary as a child and passes what it prints on
  to ``sys.stdout`` and ``sys.stderr`` as it comes (so redirection inside Python sees it);
  returns its exit code. Ctrl-C ends the child and raises ``KeyboardInterrupt``.

Either way the binary is told, through ``DYNOSIM_PROG``, the name its usage and error lines
show (``python -m dynamo.replay: error: ...``).
"""

import importlib.metadata
import io
import os
import subprocess
import sys
import threading

# Exit code of a runtime error, as the binary uses.
EXIT_RUNTIME_ERROR = 1
# The variable the binary reads its program name from (crates/dynosim-cli/src/main.rs).
PROG_VARIABLE = "DYNOSIM_PROG"
BINARY_DISTRIBUTION = "dynosim-bin"
BINARY_NAMES = ("dynosim", "dynosim.exe")


class BinaryMissing(Exception):
    """The ``dynosim`` binary is not installed where its package says (or at all)."""


def find_binary():
    """The path of the ``dynosim`` binary, from the installed ``dynosim-bin`` package's file
    list (wherever pip put its scripts: a venv, ``--user``, a prefix)."""
    hint = (
        "install it from dynosim's source tree with "
        "pip install --force-reinstall --no-deps ./crates/dynosim-cli"
    )
    try:
        distribution = importlib.metadata.distribution(BINARY_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise BinaryMissing(
            f"the dynosim binary is not installed (no {BINARY_DISTRIBUTION} package): {hint}"
        ) from None
    ours = importlib.metadata.version("dynosim")
    if distribution.version != ours:
        raise BinaryMissing(
            f"{BINARY_DISTRIBUTION} {distribution.version} does not match dynosim {ours}: {hint}"
        )
    for file in distribution.files or ():
        if file.name in BINARY_NAMES:
            path = os.path.abspath(str(distribution.locate_file(file)))
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    raise BinaryMissing(
        f"the {BINARY_DISTRIBUTION} package is installed but its dynosim binary is missing: "
        f"{hint}"
    )


def binary_environment(prog):
    return dict(os.environ, **{PROG_VARIABLE: prog})


def exec_command(prog, argv=None):
    """Replace this process with the binary run as ``prog`` on ``argv`` (default
    ``sys.argv[1:]``). Returns an exit code only when that cannot happen."""
    argv = sys.argv[1:] if argv is None else [str(arg) for arg in argv]
    try:
        binary = find_binary()
    except BinaryMissing as missing:
        print(f"{prog}: error: {missing}", file=sys.stderr)
        return EXIT_RUNTIME_ERROR
    # Whatever Python buffered must come out before the binary writes.
    sys.stdout.flush()
    sys.stderr.flush()
    if os.name == "posix":
        os.execve(binary, [binary, *argv], binary_environment(prog))
    # No exec that keeps the process elsewhere: the child's code becomes ours.
    try:
        return subprocess.call([binary, *argv], env=binary_environment(prog))
    except KeyboardInterrupt:
        return 130


def relay(pipe, stream_name):
    """Copies a child's output pipe to ``sys.<stream_name>`` line by line, as it comes."""
    # newline="": lines split at \\n but nothing is translated (the bytes stay the binary's).
    with io.TextIOWrapper(pipe, encoding="utf-8", errors="replace", newline="") as text:
        for line in text:
            stream = getattr(sys, stream_name)
            stream.write(line)
            stream.flush()


def run_captured(prog, argv):
    """Run the binary as ``prog`` on ``argv`` in a child process whose output goes through
    ``sys.stdout``/``sys.stderr``; return its exit code."""
    argv = [str(arg) for arg in argv]
    try:
        binary = find_binary()
    except BinaryMissing as missing:
        sys.stderr.write(f"{prog}: error: {missing}\n")
        sys.stderr.flush()
        return EXIT_RUNTIME_ERROR
    child = subprocess.Popen(
        [binary, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=binary_environment(prog),
    )
    relays = [
        threading.Thread(target=relay, args=(child.stdout, "stdout"), daemon=True),
        threading.Thread(target=relay, args=(child.stderr, "stderr"), daemon=True),
    ]
    for thread in relays:
        thread.start()
    try:
        code = child.wait()
    except KeyboardInterrupt:
        # SIGTERM: the binary removes the outputs it had not published, then ends.
        child.terminate()
        child.wait()
        raise
    finally:
        for thread in relays:
            thread.join()
    return code
