"""``dynamo.replay.reporting``: print and save a replay report as the reference does.

The report is the dict the replay functions return (any dict of the same shape works):

- ``format_report_table(report)`` renders the AIPerf-style table plus the wall-time and
  prefix-reuse lines, joined by ``"\\n"`` with no trailing newline; the ``dynosim`` command prints
  the same text (its Rust renderer is held to this one by the tests).
- ``write_report_json(report, path)`` writes ``json.dumps(report, indent=2, sort_keys=True)``
  and a newline, as UTF-8, and returns the path it wrote. ``None`` means
  ``default_report_path()``; an existing directory gets a timestamped file inside it; missing
  parent directories are created.
- ``default_report_path()`` is ``<cwd>/dynamo_replay_report_<YYYYmmdd_HHMMSS>.json``.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
import os
from typing import Mapping, Sequence, Union

__all__ = ["default_report_path", "format_report_table", "write_report_json"]

TITLE = "NVIDIA AIPerf | LLM Metrics"
STAT_COLUMNS = ("avg", "min", "max", "p99", "p90", "p75", "std")

# (row label, report key suffix): rows with a full distribution, shown when mean_<suffix> exists.
_DISTRIBUTION_ROWS = (
    ("Time to First Token (ms)", "ttft_ms"),
    ("Time to Second Token (ms)", "ttst_ms"),
    ("Request Latency (ms)", "e2e_latency_ms"),
    ("Inter Token Latency (ms)", "itl_ms"),
    ("Output Token Throughput Per User (tokens/sec/user)", "output_token_throughput_per_user"),
)
# The report-key prefix of each statistic column, in column order.
_STAT_PREFIXES = ("mean", "min", "max", "p99", "p90", "p75", "std")
# Lines under the table: (label, key), each shown when its value is a number.
_FOOTER_LINES = (
    ("Wall Time (ms)", "wall_time_ms"),
    ("Prefix Cache Reused Ratio", "prefix_cache_reused_ratio"),
    ("First Admission Prefix Cache Reused Ratio", "first_admission_prefix_cache_reused_ratio"),
)

_TIMESTAMP_FORMAT = "%Y%m%d_%H%M%S"


def _timestamped_name() -> str:
    return f"dynamo_replay_report_{datetime.now().strftime(_TIMESTAMP_FORMAT)}.json"


def default_report_path() -> Path:
    """``<cwd>/dynamo_replay_report_<YYYYmmdd_HHMMSS>.json`` (local time)."""
    return Path.cwd() / _timestamped_name()


def write_report_json(
    report: Mapping[str, object], output_path: Union[str, "os.PathLike[str]", None]
) -> Path:
    """Write ``report`` as indented JSON with sorted keys; return the path written."""
    path = default_report_path() if output_path is None else Path(output_path)
    if path.is_dir():
        path = path / _timestamped_name()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2, sort_keys=True) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def format_report_table(report: Mapping[str, object]) -> str:
    """The AIPerf-style table and the three summary lines, without a trailing newline."""
    lines = [TITLE, _render_table(_table_rows(report))]
    for label, key in _FOOTER_LINES:
        value = report.get(key)
        if _is_number(value):
            lines.append(f"{label}: {_cell(value)}")
    return "\n".join(lines)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float))


def _cell(value: object) -> str:
    if value is None:
        return "N/A"
    if _is_number(value):
        return f"{value:,.2f}"
    return str(value)


def _table_rows(report: Mapping[str, object]) -> list:
    rows = []
    for label, suffix in _DISTRIBUTION_ROWS:
        if f"mean_{suffix}" in report:
            rows.append([label] + [_cell(report.get(f"{p}_{suffix}")) for p in _STAT_PREFIXES])
    not_applicable = ["N/A"] * (len(STAT_COLUMNS) - 1)
    request_count = report.get("completed_requests", report.get("num_requests"))
    for label, value in (
        ("Output Token Throughput (tokens/sec)", report.get("output_throughput_tok_s")),
        ("Request Throughput (requests/sec)", report.get("request_throughput_rps")),
        ("Request Count (requests)", request_count),
    ):
        rows.append([label, _cell(value)] + not_applicable)
    return rows


def _render_table(rows: Sequence[Sequence[str]]) -> str:
    header = ["Metric", *STAT_COLUMNS]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]

    def rule(left: str, middle: str, right: str) -> str:
        return left + middle.join("━" * (width + 2) for width in widths) + right

    def line(cells: Sequence[str]) -> str:
        padded = [
            f" {cell.ljust(width) if column == 0 else cell.rjust(width)} "
            for column, (cell, width) in enumerate(zip(cells, widths))
        ]
        return "┃" + "┃".join(padded) + "┃"

    return "\n".join(
        [rule("┏", "┳", "┓"), line(header), rule("┡", "╇", "┩")]
        + [line(row) for row in rows]
        + [rule("└", "┴", "┘")]
    )
