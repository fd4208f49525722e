"""``python -m dynosim``: the dynosim command line."""

from dynosim._cli import run_command

if __name__ == "__main__":
    raise SystemExit(run_command("python -m dynosim"))
