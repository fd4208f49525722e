"""dynosim: a deterministic virtual-time replay of an LLM-serving workload.

``run_trace_replay`` and ``run_synthetic_trace_replay`` take the signatures of
``dynamo.replay``'s functions and return the report as a dict; ``main`` runs the
``dynosim`` command line (the binary of the ``dynosim-bin`` package, as a child process whose
output goes through ``sys.stdout``/``sys.stderr``) and returns its exit code.
``sweep(spec, out=DIR)`` runs a sweep (a spec file or dict, as ``dynosim sweep``) and returns
its outcome as a dict; ``ray="local"`` or ``ray=ADDRESS`` runs its candidates on a Ray cluster
(the ``[ray]`` extra).
"""

import sys

from dynosim._cli import run_captured
from dynosim._dynosim import __version__, run_synthetic_trace_replay, run_trace_replay
from dynosim._dynosim import sweep as _sweep

__all__ = ["run_trace_replay", "run_synthetic_trace_replay", "main", "sweep"]


def main(argv=None, prog="dynosim"):
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit code.
    ``prog`` is the name its usage and error lines show."""
    return run_captured(prog, sys.argv[1:] if argv is None else argv)


def sweep(spec, *, out, jobs=None, ray=None):
    """Run the sweep ``spec`` (a spec file path or a dict: ``base:``/``grid:``, or the
    reference's ``ReplayOptimizeSpec``) into the directory ``out`` and return its outcome.

    ``jobs`` limits the candidates run at once (default: one per core). ``ray`` runs the
    candidates on a Ray cluster instead: ``"local"`` starts one for this call, any other value
    is the address of a running cluster. Candidates already stored in ``out`` are not rerun.
    """
    if ray is None:
        return _sweep(spec, out=out, jobs=jobs)
    from dynosim._ray import sweep_on_ray

    return sweep_on_ray(spec, out, ray, jobs=jobs)

