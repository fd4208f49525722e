"""``python -m dynamo.replay``: the dynosim command line under the reference's name."""

from dynamo.replay.main import main

if __name__ == "__main__":
    raise SystemExit(main())
