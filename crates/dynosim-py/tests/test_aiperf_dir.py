"""The `aiperf_dir=` keyword of the two replay functions writes an AIPerf run directory."""

import json

import pytest

from dynamo.replay import run_synthetic_trace_replay, run_trace_replay
from replay_inputs import TINY_TRACE as TRACE


def _summary(directory):
    return json.loads((directory / "profile_export_aiperf.json").read_text())


def test_trace_replay_writes_the_aiperf_files(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE)
    report = run_trace_replay(str(trace), num_workers=2, aiperf_dir=tmp_path / "run")
    summary = _summary(tmp_path / "run")
    assert summary["time_to_first_token"]["avg"] == pytest.approx(report["mean_ttft_ms"])
    assert summary["request_throughput"]["avg"] == report["request_throughput_rps"]
    lines = (tmp_path / "run" / "profile_export.jsonl").read_text().splitlines()
    assert len(lines) == 3
    assert (tmp_path / "run" / "profile_export_aiperf.csv").read_text().startswith("Metric,avg")


def test_synthetic_replay_writes_the_aiperf_files(tmp_path):
    report = run_synthetic_trace_replay(
        100, 10, 8, replay_concurrency=2, aiperf_dir=str(tmp_path / "syn")
    )
    summary = _summary(tmp_path / "syn")
    assert summary["request_count"]["avg"] == report["completed_requests"] == 8
    assert summary["inter_token_latency"]["avg"] == pytest.approx(report["mean_tpot_ms"])


def test_aiperf_dir_that_is_a_file_is_rejected_before_the_run(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("x")
    with pytest.raises(ValueError, match="aiperf_dir: .* exists and is not a directory"):
        run_synthetic_trace_replay(100, 10, 8, replay_concurrency=2, aiperf_dir=taken)
