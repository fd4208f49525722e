"""The command-line entry points (``dynosim``, ``python -m dynosim``, ``python -m dynamo.replay``):
``dynosim.main`` plus the process behaviour of the Rust binary.

- Ctrl-C stops the run at once and exits with 130 (128 + SIGINT), without a traceback.
- A closed standard output (``... | head``, ``... | true``) exits with 1, without a traceback and
  without Python's "Exception ignored" complaint when it flushes at exit; the report file has
  been written by then.
"""

import os
import sys

from dynosim import main

EXIT_INTERRUPTED = 130
EXIT_CLOSED_OUTPUT = 1


def run_command(prog, argv=None):
    """Run the command line as ``prog``; return the process exit code."""
    try:
        return main(sys.argv[1:] if argv is None else argv, prog=prog)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Later writes (and the flush at exit) go nowhere instead of failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_CLOSED_OUTPUT


def console_main():
    """Entry point of the ``dynosim`` command."""
    return run_command("dynosim")
