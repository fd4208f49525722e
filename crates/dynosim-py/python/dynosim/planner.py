"""What a planner run returns: the report plus the scaling the planner did.

``run_trace_replay`` / ``run_synthetic_trace_replay`` return a :class:`ReplayPlannerReport`
when given ``planner_config`` (dynosim's native planner) or a ``scaling_policy`` without a
``finalize`` method; a policy with ``finalize(trace_report)`` (the reference's
``ReplayPlannerAdapter``) returns its own report instead.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = ["ScalingEvent", "ReplayPlannerReport"]


@dataclass
class ScalingEvent:
    """One change of a pool's non-draining worker count, at ``at_s`` seconds of model time."""

    at_s: float
    #: ``agg``, ``prefill`` or ``decode``
    component: str
    from_count: int
    to_count: int
    #: ``scale_up`` or ``scale_down``
    reason: Optional[str] = None


@dataclass
class ReplayPlannerReport:
    """The replay report (``trace_report``, the same keys as without a planner), the scaling
    events in order, and the number of scaling ticks. dynosim's native planner keeps no
    per-tick diagnostics (``diagnostics_log`` is empty) and writes no HTML report."""

    trace_report: Dict[str, Any]
    scaling_events: List[ScalingEvent] = field(default_factory=list)
    diagnostics_log: List[Any] = field(default_factory=list)
    total_ticks: int = 0
    html_report_path: Optional[str] = None
