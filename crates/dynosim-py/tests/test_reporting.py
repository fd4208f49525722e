"""``dynamo.replay.reporting``: the table, the report JSON and the default report path, with
the reference's formatting (frontend.md §3.6-3.7), and agreement with what the command line
prints and saves (the CLI renders them in Rust)."""

import json
import pathlib
import re
import subprocess
import sys
from datetime import datetime

import pytest

from dynamo.replay import run_synthetic_trace_replay
from dynamo.replay.reporting import default_report_path, format_report_table, write_report_json
from replay_inputs import SYNTHETIC_ARGS


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """stdout and the saved report of `python -m dynamo.replay` on a synthetic workload."""
    directory = tmp_path_factory.mktemp("cli")
    result = subprocess.run(
        [sys.executable, "-m", "dynamo.replay", *SYNTHETIC_ARGS, "--report-json", "out.json"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout, (directory / "out.json").read_text(encoding="utf-8")


def test_table_equals_what_the_command_line_prints(cli_run):
    stdout, saved = cli_run
    report = json.loads(saved)
    assert stdout == format_report_table(report) + "\nSaved full report to: out.json\n"


def test_written_json_equals_what_the_command_line_saves(cli_run, tmp_path):
    _, saved = cli_run
    report = json.loads(saved)
    written = write_report_json(report, tmp_path / "again.json")
    assert written.read_text(encoding="utf-8") == saved


def test_table_layout():
    report = run_synthetic_trace_replay(1000, 100, 50, replay_concurrency=8)
    lines = format_report_table(report).split("\n")
    assert lines[0] == "NVIDIA AIPerf | LLM Metrics"
    assert lines[1].startswith("┏━") and lines[1].endswith("━┓")
    assert re.fullmatch(r"┃ Metric +┃ +avg ┃ +min ┃ +max ┃ +p99 ┃ +p90 ┃ +p75 ┃ +std ┃", lines[2])
    assert lines[3].startswith("┡") and "╇" in lines[3]
    assert lines[4].startswith("┃ Time to First Token (ms) ")
    assert lines[-4].startswith("└") and "┴" in lines[-4] and lines[-4].endswith("┘")
    assert lines[-3] == f"Wall Time (ms): {report['wall_time_ms']:,.2f}"
    assert lines[-2].startswith("Prefix Cache Reused Ratio: ")
    assert lines[-1].startswith("First Admission Prefix Cache Reused Ratio: ")
    assert len({len(line) for line in lines[1:-3]}) == 1  # every table line is as wide
    count_row = next(line for line in lines if line.startswith("┃ Request Count"))
    assert "┃  50.00 ┃" in count_row and count_row.count("N/A") == 6


# The reference's output for this partial report (missing and None values, an int count).
PARTIAL_REPORT_TABLE = """\
NVIDIA AIPerf | LLM Metrics
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━┳━━━━━┳━━━━━┳━━━━━┳━━━━━┳━━━━━┳━━━━━┓
┃ Metric                               ┃          avg ┃ min ┃ max ┃ p99 ┃ p90 ┃ p75 ┃ std ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━╇━━━━━╇━━━━━╇━━━━━╇━━━━━╇━━━━━╇━━━━━┩
┃ Time to First Token (ms)             ┃ 1,234,567.89 ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃
┃ Output Token Throughput (tokens/sec) ┃         0.00 ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃
┃ Request Throughput (requests/sec)    ┃          N/A ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃
┃ Request Count (requests)             ┃         3.00 ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃ N/A ┃
└━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┴━━━━━━━━━━━━━━┴━━━━━┴━━━━━┴━━━━━┴━━━━━┴━━━━━┴━━━━━┘"""


def test_table_of_a_partial_report():
    report = {
        "mean_ttft_ms": 1234567.891,
        "min_ttft_ms": None,
        "num_requests": 3,
        "output_throughput_tok_s": 0,
    }
    assert format_report_table(report) == PARTIAL_REPORT_TABLE


def test_write_report_json_format_and_return_value(tmp_path):
    report = {"b": 1, "a": 1e-09, "c": 2.5}
    path = write_report_json(report, str(tmp_path / "new" / "dir" / "r.json"))
    assert isinstance(path, pathlib.Path) and path == tmp_path / "new" / "dir" / "r.json"
    assert path.read_bytes() == b'{\n  "a": 1e-09,\n  "b": 1,\n  "c": 2.5\n}\n'
    # An existing file is overwritten.
    write_report_json({"x": 0}, path)
    assert path.read_text(encoding="utf-8") == '{\n  "x": 0\n}\n'


def test_write_report_json_into_a_directory_and_default(tmp_path, monkeypatch):
    inside = write_report_json({"x": 1}, tmp_path)
    assert inside.parent == tmp_path
    assert re.fullmatch(r"dynamo_replay_report_\d{8}_\d{6}\.json", inside.name)
    monkeypatch.chdir(tmp_path)
    default = write_report_json({"x": 2}, None)
    assert default.is_absolute() and default.parent == tmp_path
    assert json.loads(default.read_text(encoding="utf-8")) == {"x": 2}


def test_default_report_path():
    before = datetime.now().replace(microsecond=0)
    path = default_report_path()
    after = datetime.now()
    assert path.parent == pathlib.Path.cwd()
    stamp = datetime.strptime(path.name, "dynamo_replay_report_%Y%m%d_%H%M%S.json")
    assert before <= stamp <= after
