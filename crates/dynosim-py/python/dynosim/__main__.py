"""``python -m dynosim``: the dynosim command line (the ``dynosim`` binary, under this name)."""

from dynosim._cli import exec_command

if __name__ == "__main__":
    raise SystemExit(exec_command("python -m dynosim"))
