"""``dynamo.replay.main``: the command line under its reference name."""

import sys

from dynosim import main as _dynosim_main

PROG = "python -m dynamo.replay"


def main(argv=None):
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    return _dynosim_main(sys.argv[1:] if argv is None else argv, prog=PROG)
