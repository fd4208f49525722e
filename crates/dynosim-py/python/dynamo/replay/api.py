"""``dynamo.replay.api``: the two replay entry points (see ``dynosim`` for their arguments)."""

from dynosim import run_synthetic_trace_replay, run_trace_replay

__all__ = ["run_trace_replay", "run_synthetic_trace_replay"]
