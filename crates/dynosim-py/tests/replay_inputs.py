"""Inputs the Python front's tests share: a small synthetic workload as command-line flags and
a small Mooncake trace. Not a test module (pytest collects only test_*.py)."""

import json


def cli_flags(**settings):
    """The command-line flags for `settings`, in the order given (`input_tokens=5` is
    `--input-tokens 5`)."""
    flags = []
    for name, value in settings.items():
        flags += ["--" + name.replace("_", "-"), str(value)]
    return flags


# Fifty requests of 1000 prompt and 100 output tokens, eight at a time.
SYNTHETIC_ARGS = cli_flags(
    input_tokens=1000, output_tokens=100, request_count=50, replay_concurrency=8
)

# Three requests, the first two sharing their first hash id.
TINY_TRACE = "".join(
    json.dumps({"timestamp": at, "input_length": isl, "output_length": osl, "hash_ids": ids})
    + "\n"
    for at, isl, osl, ids in [(0, 600, 5, [0, 1]), (10, 700, 3, [0, 2]), (25, 300, 4, [3])]
)
