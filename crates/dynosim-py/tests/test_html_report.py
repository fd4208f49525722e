"""The `html_report=` keyword of the two replay functions writes the HTML report."""

import json
import re

import pytest

from dynamo.replay import run_synthetic_trace_replay, run_trace_replay
from replay_inputs import TINY_TRACE as TRACE


def _page_data(page):
    found = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page, re.S)
    assert found, "the page holds its data"
    return json.loads(found.group(1))


def test_trace_replay_writes_the_page_with_its_report(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE)
    report = run_trace_replay(str(trace), num_workers=2, html_report=tmp_path / "run.html")
    page = (tmp_path / "run.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<th>command</th><td>run_trace_replay(...) (Python API)</td>" in page
    data = _page_data(page)
    assert data["report"] == report
    assert sum(data["series"]["output_tokens"]) == report["total_output_tokens"] == 12
    assert len(data["series"]["pools"][0]["workers"]) == 2


def test_synthetic_replay_writes_the_page(tmp_path):
    report = run_synthetic_trace_replay(
        100, 10, 8, replay_concurrency=2, html_report=str(tmp_path / "syn.html")
    )
    data = _page_data((tmp_path / "syn.html").read_text())
    assert sum(data["series"]["completed_requests"]) == report["completed_requests"] == 8


def test_html_report_that_is_a_directory_is_refused_before_the_run(tmp_path):
    with pytest.raises(Exception, match="cannot write the HTML report to .*: it is a directory"):
        run_synthetic_trace_replay(100, 10, 8, replay_concurrency=2, html_report=tmp_path)
    assert list(tmp_path.iterdir()) == []
