"""The planner in the loop from Python: ``planner_config`` (dynosim's native planner) and
``scaling_policy`` (any object with ``initial_tick_ms()`` and ``on_tick(snapshot)``), and the
planner report both return.

The native planner's numbers are the reference's (``tests/parity/golden/planner_agg_load.*``).
The last test drives dynosim with the reference's own ``ReplayPlannerAdapter`` (SLA mode, ARIMA
forecasts); it needs the reference with its planner packages and is skipped, saying so, where
they are absent.
"""

import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

import dynosim
from dynosim.planner import ReplayPlannerReport, ScalingEvent

TESTS = pathlib.Path(__file__).resolve().parent
REPO_ROOT = TESTS.parents[2]
TRACE = REPO_ROOT / "tests" / "parity" / "traces" / "planner_burst.jsonl"
PARITY = REPO_ROOT / "tests" / "parity" / "golden"
ENGINE = {"num_gpu_blocks": 1024, "block_size": 64, "startup_time": 5}
AGG_LOAD = {
    "mode": "agg",
    "optimization_target": "load",
    "decode_scale_up_kv_rate": 60,
    "decode_scale_down_kv_rate": 20,
    "load_adjustment_interval_seconds": 5,
}
CLOCK_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}


def golden_events(name):
    """(at_s, component, from, to, reason) of a parity golden's `Scaling events:` block."""
    events = []
    for line in (PARITY / f"{name}.planner.txt").read_text().splitlines():
        if not line.startswith("  t="):
            continue
        at, rest = line.strip()[2:].split("s [", 1)
        component, rest = rest.split("]: ", 1)
        counts, reason = rest.split(" workers (")
        before, after = counts.split(" -> ")
        events.append((float(at), component, int(before), int(after), reason.rstrip(")")))
    return events


def as_tuples(events):
    return [(e.at_s, e.component, e.from_count, e.to_count, e.reason) for e in events]


def test_native_planner_gives_the_reference_run():
    report = dynosim.run_trace_replay(TRACE, planner_config=AGG_LOAD, extra_engine_args=ENGINE)
    assert isinstance(report, ReplayPlannerReport)
    assert as_tuples(report.scaling_events) == golden_events("planner_agg_load")
    assert report.total_ticks == 24
    assert report.diagnostics_log == [] and report.html_report_path is None
    expected = json.loads((PARITY / "planner_agg_load.json").read_text())
    assert sorted(report.trace_report) == sorted(expected)
    for key, want in expected.items():
        if key not in CLOCK_KEYS:
            assert math.isclose(report.trace_report[key], want, rel_tol=1e-6), key


def test_native_planner_gives_per_request_records(tmp_path):
    records = tmp_path / "records.jsonl"
    report = dynosim.run_trace_replay(
        TRACE, planner_config=json.dumps(AGG_LOAD), extra_engine_args=ENGINE,
        report_jsonl_path=records,
    )
    lines = records.read_text().splitlines()
    assert len(lines) == report.trace_report["completed_requests"] == 560


class Schedule:
    """Sets the aggregated worker count at given tick times; records every snapshot."""

    def __init__(self, targets, first_ms=10000.0, every_ms=10000.0):
        self.targets, self.first_ms, self.every_ms = targets, first_ms, every_ms
        self.snapshots = []

    def initial_tick_ms(self):
        return self.first_ms

    def on_tick(self, snapshot):
        self.snapshots.append(snapshot)
        now = snapshot["now_ms"]
        return {
            "target_prefill": None,
            "target_decode": self.targets.get(now),
            "next_tick_ms": now + self.every_ms,
        }


def test_scaling_policy_drives_the_workers():
    policy = Schedule({10000.0: 3, 60000.0: 1})
    report = dynosim.run_trace_replay(TRACE, extra_engine_args=ENGINE, scaling_policy=policy)
    assert as_tuples(report.scaling_events) == [
        (10.0, "agg", 1, 3, "scale_up"),
        (60.0, "agg", 3, 1, "scale_down"),
    ]
    assert report.total_ticks == len(policy.snapshots) == 12
    first, second = policy.snapshots[0], policy.snapshots[1]
    # The reference's snapshot keys; aggregated workers are reported as decode.
    for pool in ("prefill", "decode"):
        for key in ("active_{}_ids", "starting_{}_ids", "draining_{}_ids", "active_{}_count",
                    "starting_{}_count", "draining_{}_count", "non_draining_{}_count",
                    "total_{}_count", "{}_fpm_snapshots"):
            assert key.format(pool) in first
    assert first["active_decode_ids"] == [0] and first["prefill_fpm_snapshots"] == []
    # Workers 1 and 2 started at 10 s and were ready 5 s later.
    assert second["active_decode_ids"] == [0, 1, 2]
    # The first window is [0, 10 s]: the arrivals at 0, 1, ..., 10 s.
    assert first["traffic"]["num_req"] == 11 and first["traffic"]["duration_s"] == 10.0
    # Worker-seconds: 1 worker for 10 s, 3 from 10 s to 60 s, then 1 (drained ones until idle).
    assert report.trace_report["decode_worker_seconds"] > 10 + 3 * 50
    # Deterministic.
    again = dynosim.run_trace_replay(
        TRACE, extra_engine_args=ENGINE, scaling_policy=Schedule({10000.0: 3, 60000.0: 1})
    )
    assert again.trace_report["decode_worker_seconds"] == report.trace_report["decode_worker_seconds"]


def test_a_policy_with_finalize_makes_the_report():
    class Finalizing(Schedule):
        def finalize(self, trace_report):
            return ("finalized", trace_report["completed_requests"])

    result = dynosim.run_trace_replay(
        TRACE, extra_engine_args=ENGINE, scaling_policy=Finalizing({})
    )
    assert result == ("finalized", 560)


def test_policy_errors_reach_the_caller_unchanged():
    class Raises(Schedule):
        def on_tick(self, snapshot):
            raise ZeroDivisionError("policy failed")

    with pytest.raises(ZeroDivisionError, match="policy failed"):
        dynosim.run_trace_replay(TRACE, scaling_policy=Raises({}))

    class MissingKey(Schedule):
        def on_tick(self, snapshot):
            return {"target_decode": 2, "next_tick_ms": None}

    with pytest.raises(KeyError, match="target_prefill"):
        dynosim.run_trace_replay(TRACE, scaling_policy=MissingKey({}))

    with pytest.raises(TypeError, match="initial_tick_ms"):
        dynosim.run_trace_replay(TRACE, scaling_policy=object())
    with pytest.raises(ValueError, match="not both"):
        dynosim.run_trace_replay(TRACE, scaling_policy=Schedule({}), planner_config=AGG_LOAD)
    with pytest.raises(ValueError, match="kv_router"):
        dynosim.run_trace_replay(TRACE, scaling_policy=Schedule({}), router_mode="kv_router")


def test_bad_planner_configs_are_value_errors():
    with pytest.raises(ValueError, match="decode_scale_up_kv_rate"):
        dynosim.run_trace_replay(TRACE, planner_config={"mode": "agg", "optimization_target": "load"})
    with pytest.raises(ValueError, match="scale to zero workers"):
        dynosim.run_trace_replay(
            TRACE, planner_config=dict(AGG_LOAD, max_gpu_budget=1),
            extra_engine_args={"aic_tp_size": 2},
        )


REFERENCE_PLANNER = pathlib.Path(
    os.environ.get(
        "DYNOSIM_REFERENCE_PLANNER", pathlib.Path.home() / ".cache" / "dynosim-reference-planner"
    )
)

DRIVER = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import dynosim
from dynamo.mocker import MockEngineArgs
from dynamo.replay.main import _planner_replay_adapter
golden = json.load(open(sys.argv[3]))
prefill, decode = golden["prefill_engine_args"], golden["decode_engine_args"]
config = json.dumps(golden["planner_config"])
with _planner_replay_adapter(None, MockEngineArgs(**prefill), MockEngineArgs(**decode), config) as adapter:
    report = dynosim.run_trace_replay(
        sys.argv[2], prefill_engine_args=prefill, decode_engine_args=decode, scaling_policy=adapter
    )
print(json.dumps({
    "scaling_events": [[e.at_s, e.component, e.from_count, e.to_count, e.reason]
                       for e in report.scaling_events],
    "total_ticks": report.total_ticks,
    "prefill_worker_seconds": report.trace_report["prefill_worker_seconds"],
    "decode_worker_seconds": report.trace_report["decode_worker_seconds"],
}))
"""


def test_the_reference_adapter_with_arima_drives_dynosim_to_its_scaling_events():
    python = REFERENCE_PLANNER / "bin" / "python"
    probe = [str(python), "-c", "import dynamo.planner.offline.replay_adapter, pmdarima"]
    if not python.exists() or subprocess.run(probe, capture_output=True).returncode != 0:
        pytest.skip(
            f"the reference with its planner packages is absent ({REFERENCE_PLANNER}; "
            "shared/tools/reference-setup.sh --with-planner installs it)"
        )
    golden = TESTS / "golden" / "planner_sla_arima.json"
    with tempfile.TemporaryDirectory() as only_dynosim:
        # Only the dynosim package: the reference's own `dynamo` package stays in charge.
        os.symlink(pathlib.Path(dynosim.__file__).parent, pathlib.Path(only_dynosim) / "dynosim")
        run = subprocess.run(
            [str(python), "-c", DRIVER, only_dynosim, str(TRACE), str(golden)],
            capture_output=True, text=True, env=dict(os.environ, DYN_LOG="warn"), timeout=600,
        )
    assert run.returncode == 0, run.stderr[-2000:]
    ours = json.loads(run.stdout.strip().splitlines()[-1])
    expected = json.loads(golden.read_text())
    assert ours["scaling_events"] == expected["scaling_events"]
    assert ours["total_ticks"] == expected["total_ticks"]
    for key in ("prefill_worker_seconds", "decode_worker_seconds"):
        assert math.isclose(ours[key], expected[key], rel_tol=1e-6), key


def _page_data(path):
    import re

    found = re.search(
        r'<script type="application/json" id="run-data">(.*?)</script>', path.read_text(), re.S
    )
    assert found, "the page holds its data"
    return json.loads(found.group(1))


def test_html_report_shows_the_native_planners_scaling(tmp_path):
    report = dynosim.run_trace_replay(
        TRACE, planner_config=AGG_LOAD, extra_engine_args=ENGINE, html_report=tmp_path / "run.html"
    )
    scaling = _page_data(tmp_path / "run.html")["scaling"]
    assert scaling["ticks"] == report.total_ticks == 24
    assert scaling["initial"] == {"agg": 1}
    assert [
        (e["at_s"], e["component"], e["from"], e["to"], e["reason"]) for e in scaling["events"]
    ] == golden_events("planner_agg_load")


def test_html_report_shows_a_policys_scaling(tmp_path):
    report = dynosim.run_trace_replay(
        TRACE,
        extra_engine_args=ENGINE,
        scaling_policy=Schedule({10000.0: 3, 60000.0: 1}),
        html_report=str(tmp_path / "run.html"),
    )
    data = _page_data(tmp_path / "run.html")
    assert [(e["at_s"], e["to"]) for e in data["scaling"]["events"]] == [(10.0, 3), (60.0, 1)]
    assert data["report"]["completed_requests"] == report.trace_report["completed_requests"]


def test_the_kv_router_follows_the_workers_and_reports_its_cache_hits():
    policy = Schedule({10000.0: 3, 60000.0: 1})
    report = dynosim.run_trace_replay(
        TRACE,
        num_workers=2,
        router_mode="kv_router",
        extra_engine_args=ENGINE,
        scaling_policy=policy,
    )
    assert as_tuples(report.scaling_events) == [
        (10.0, "agg", 2, 3, "scale_up"),
        (60.0, "agg", 3, 1, "scale_down"),
    ]
    assert report.trace_report["completed_requests"] == 560
    # The KV router's placements feed the traffic window's hit rate (round robin: count 0).
    counts = [s["traffic"]["hit_rate_count"] for s in policy.snapshots]
    assert sum(counts) == 560
    assert all(0.0 <= s["traffic"]["avg_kv_hit_rate"] <= 1.0 for s in policy.snapshots)


def test_a_policy_cannot_leave_requests_without_a_worker_for_ever():
    # Round robin has nowhere to send the next request: refused when asked.
    with pytest.raises(RuntimeError, match="asked for 0 workers"):
        dynosim.run_trace_replay(TRACE, extra_engine_args=ENGINE, scaling_policy=Schedule({10000.0: 0}))
    # The KV router holds requests until a worker joins; a tick that brings none once nothing
    # else can happen ends the run at the dead end instead of ticking on for ever.
    with pytest.raises(RuntimeError, match="waits in the router queue for a worker to join"):
        dynosim.run_trace_replay(
            TRACE, extra_engine_args=ENGINE, num_workers=2, router_mode="kv_router",
            scaling_policy=Schedule({10000.0: 0}),
        )
