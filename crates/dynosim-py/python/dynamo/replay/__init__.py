"""Drop-in ``dynamo.replay`` API backed by dynosim.

``dynamo`` is a namespace package (no ``dynamo/__init__.py``), so this module can sit
beside other ``dynamo.*`` packages. ``dynamo.replay.api`` holds the two entry points and
``dynamo.replay.reporting`` prints and saves their reports.
"""

from dynamo.replay.api import run_synthetic_trace_replay, run_trace_replay

__all__ = ["run_trace_replay", "run_synthetic_trace_replay"]
