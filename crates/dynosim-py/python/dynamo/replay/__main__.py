"""``python -m dynamo.replay``: the dynosim command line under the reference's name."""

from dynamo.replay.main import PROG
from dynosim._cli import exec_command

if __name__ == "__main__":
    raise SystemExit(exec_command(PROG))
