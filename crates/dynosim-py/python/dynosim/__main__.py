"""``python -m dynosim``: the dynosim command line."""

import sys

from dynosim import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], prog="python -m dynosim"))
