"""Drop-in ``dynamo.replay`` API backed by dynosim.

``dynamo`` is a namespace package (no ``dynamo/__init__.py``), so this module can sit
beside other ``dynamo.*`` packages.
"""

from dynosim import run_synthetic_trace_replay, run_trace_replay

__all__ = ["run_trace_replay", "run_synthetic_trace_replay"]
