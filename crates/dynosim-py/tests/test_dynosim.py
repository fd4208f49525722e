"""Tests of the installed Python package: the API, and the CLI under both module names."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import dynosim
from dynamo.replay import run_synthetic_trace_replay, run_trace_replay
from replay_inputs import SYNTHETIC_ARGS, TINY_TRACE


# Keys that measure the host's clock, not the simulation.
CLOCK_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}

INT_KEYS = {
    "num_requests",
    "completed_requests",
    "total_input_tokens",
    "total_output_tokens",
    "prefill_gpus_per_worker",
    "decode_gpus_per_worker",
    "processed_tokens",
}


def run_module(module, args, cwd):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def without_clock(report):
    return {key: value for key, value in report.items() if key not in CLOCK_KEYS}


def synthetic(**kwargs):
    kwargs.setdefault("replay_concurrency", 8)
    return run_synthetic_trace_replay(1000, 100, 50, **kwargs)


def test_package_exports():
    import dynamo.replay

    assert dynamo.replay.__all__ == ["run_trace_replay", "run_synthetic_trace_replay"]
    assert callable(dynosim.main)
    assert dynosim.run_trace_replay is run_trace_replay
    assert not (pathlib.Path(dynamo.replay.__file__).parent.parent / "__init__.py").exists()


@pytest.mark.parametrize("module", ["dynamo.replay", "dynosim"])
def test_cli_module_prints_the_table_and_writes_the_report(module, tmp_path):
    result = run_module(module, [*SYNTHETIC_ARGS, "--report-json", "out.json"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "NVIDIA AIPerf | LLM Metrics"
    assert lines[-1] == "Saved full report to: out.json"
    assert any(line.startswith("┃ Request Count (requests)") for line in lines)
    assert result.stdout.endswith("\n")
    raw = (tmp_path / "out.json").read_text(encoding="utf-8")
    report = json.loads(raw)
    assert len(report) == 74
    assert list(report) == sorted(report)
    assert raw == json.dumps(report, indent=2, sort_keys=True) + "\n"


def test_cli_errors_name_the_program_and_exit_2(tmp_path):
    result = run_module("dynamo.replay", ["--num-workers", "two"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("python -m dynamo.replay: error: ")
    assert "--num-workers" in result.stderr
    assert result.stdout == ""
    result = run_module("dynamo.replay", [], tmp_path)
    assert result.returncode == 2
    assert "Usage: python -m dynamo.replay [OPTIONS] [TRACE_FILES]..." in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module", ["dynosim", "dynamo.replay"])
def test_version_names_dynosim_and_its_version(tmp_path, module):
    # The reference's `python -m dynamo.replay` has no --version; ours says which one answers.
    result = run_module(module, ["--version"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"dynosim {dynosim.__version__}\n"
    assert list(tmp_path.iterdir()) == []


def test_cli_help_exits_0(tmp_path):
    result = run_module("dynosim", ["--help"], tmp_path)
    assert result.returncode == 0
    assert "--report-json" in result.stdout


def test_main_returns_the_exit_code_and_writes_through_sys_stdout(tmp_path, capsys):
    code = dynosim.main([*SYNTHETIC_ARGS, "--report-json", str(tmp_path / "r.json")])
    assert code == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("NVIDIA AIPerf | LLM Metrics\n")
    assert dynosim.main(["--bogus"]) == 2
    assert capsys.readouterr().err.startswith("dynosim: error: ")


def test_synthetic_api_returns_the_report_dict_in_order():
    report = synthetic()
    assert isinstance(report, dict)
    assert len(report) == 74
    assert list(report)[:4] == [
        "num_requests",
        "completed_requests",
        "total_input_tokens",
        "total_output_tokens",
    ]
    for key, value in report.items():
        expected = int if key in INT_KEYS else float
        assert type(value) is expected, key
    assert report["completed_requests"] == 50
    assert report["total_output_tokens"] == 5000


def test_api_and_cli_give_the_same_report(tmp_path):
    result = run_module("dynosim", [*SYNTHETIC_ARGS, "--report-json", "r.json"], tmp_path)
    assert result.returncode == 0, result.stderr
    from_cli = json.loads((tmp_path / "r.json").read_text())
    assert without_clock(from_cli) == without_clock(synthetic())


def test_engine_args_as_dict_or_json_string_agree():
    engine = {"num_gpu_blocks": 2048, "max_num_seqs": 4, "block_size": 32}
    from_dict = synthetic(extra_engine_args=engine)
    from_text = synthetic(extra_engine_args=json.dumps(engine))
    assert without_clock(from_dict) == without_clock(from_text)
    assert without_clock(from_dict) != without_clock(synthetic())


def test_an_sla_adds_goodput_keys():
    report = synthetic(sla_e2e_ms=1e9)
    assert len(report) == 77
    assert report["goodput_completed_requests"] == 50


@pytest.mark.parametrize("sla_key, record_key", [("sla_e2e_ms", "e2e_latency_ms"),
                                                 ("sla_ttft_ms", "ttft_ms")])
def test_a_binding_sla_counts_only_the_requests_within_it(tmp_path, sla_key, record_key):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TINY_TRACE)
    jsonl = tmp_path / "records.jsonl"
    run_trace_replay(trace, report_jsonl_path=jsonl)
    values = sorted(json.loads(line)[record_key] for line in jsonl.read_text().splitlines())
    assert len(values) == 3 and values[0] < values[1]
    # Between the fastest request and the next: exactly one request meets the SLA.
    report = run_trace_replay(trace, **{sla_key: (values[0] + values[1]) / 2})
    assert report["goodput_completed_requests"] == 1
    assert report["goodput_request_throughput_rps"] == pytest.approx(
        1 / (report["duration_ms"] / 1000), rel=1e-12)
    assert run_trace_replay(trace, **{sla_key: values[2]})["goodput_completed_requests"] == 3


def test_bad_values_raise_value_error_with_the_cli_message_in_python_spelling(tmp_path):
    # One check, one message; each front names the option its own way.
    with pytest.raises(ValueError) as raised:
        run_synthetic_trace_replay(0, 100, 5, replay_concurrency=1)
    assert str(raised.value) == "input_tokens: input_tokens must be at least 1"
    result = run_module(
        "dynamo.replay",
        ["--input-tokens", "0", "--output-tokens", "100", "--request-count", "5",
         "--replay-concurrency", "1"],
        tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        "python -m dynamo.replay: error: --input-tokens: input_tokens must be at least 1"
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"replay_concurrency": 0}, "replay_concurrency must be at least 1"),
        ({"replay_concurrency": 1, "request_rate": 5.0},
         "requires exactly one of replay_concurrency, request_rate"),
        ({"replay_concurrency": 1, "num_workers": 0}, "num_workers >= 1"),
        ({"replay_concurrency": 1, "extra_engine_args": "{bad"},
         "extra_engine_args: invalid JSON"),
        ({"replay_concurrency": 1, "extra_engine_args": {"no_such_field": 1}},
         "unknown field `no_such_field`"),
        ({"replay_concurrency": 1, "router_mode": "bogus"},
         "router_mode must be either 'round_robin' or 'kv_router', got 'bogus'"),
        ({"replay_concurrency": 1, "sla_ttft_ms": float("nan")},
         "sla_ttft_ms must be a finite, non-negative value"),
        ({"replay_concurrency": 1, "num_prefill_workers": 2},
         "num_prefill_workers and num_decode_workers are only used for disagg replay"),
    ],
)
def test_invalid_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        run_synthetic_trace_replay(100, 10, 5, **kwargs)


def test_wrong_python_types_raise_type_error():
    with pytest.raises(TypeError, match="input_tokens|'list'"):
        run_synthetic_trace_replay([100], 10, 5, replay_concurrency=1)
    with pytest.raises(TypeError, match="extra_engine_args"):
        run_synthetic_trace_replay(100, 10, 5, replay_concurrency=1, extra_engine_args=[1])
    with pytest.raises(TypeError, match="request_rate"):
        run_trace_replay("t.jsonl", request_rate=1.0)
    with pytest.raises(TypeError, match="positional"):
        run_synthetic_trace_replay(100, 10, 5, 1)  # the rest is keyword-only


def test_trace_api_accepts_str_pathlike_and_lists_and_writes_jsonl(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TINY_TRACE)
    jsonl = tmp_path / "nested" / "requests.jsonl"
    by_path = run_trace_replay(trace, report_jsonl_path=jsonl)
    by_str = run_trace_replay(str(trace))
    by_list = run_trace_replay([os.fspath(trace)])
    assert by_path["num_requests"] == 3
    assert without_clock(by_path) == without_clock(by_str) == without_clock(by_list)
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(records) == 3
    assert all(len(record) == 28 for record in records)
    assert [record["arrival_time_ms"] for record in records] == [0.0, 10.0, 25.0]


def test_trace_api_errors():
    with pytest.raises(ValueError, match="nonexistent"):
        run_trace_replay("/nonexistent/trace.jsonl")
    with pytest.raises(TypeError, match="trace_files"):
        run_trace_replay(42)


def test_requests_that_did_not_complete_give_a_warning_and_counts(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 5000, "output_length": 10, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}\n'
        '{"timestamp": 10, "input_length": 600, "output_length": 10, "hash_ids": [11, 12]}\n'
    )
    with pytest.warns(RuntimeWarning) as warned:
        report = run_trace_replay(str(trace), extra_engine_args={"max_model_len": 4096})
    assert [str(w.message) for w in warned] == [
        "1 of 2 requests did not complete: 1 rejected by an admission or queue limit"
    ]
    assert (report["num_requests"], report["completed_requests"]) == (2, 1)
    assert report["rejected_requests"] == 1 and report["interrupted"] == 0


def test_length_spreads_as_keywords(tmp_path):
    # The keywords spell the CLI's flags; the same seed gives the same report, R = 1 is the
    # fixed-length run, and R = 0.8 draws each length from [800, 1000] and [80, 100].
    fixed = without_clock(run_synthetic_trace_replay(1000, 100, 50, replay_concurrency=8))
    assert without_clock(
        run_synthetic_trace_replay(1000, 100, 50, replay_concurrency=8, random_range_ratio=1.0)
    ) == fixed
    ranged = without_clock(run_synthetic_trace_replay(
        1000, 100, 50, replay_concurrency=8, random_range_ratio=0.8, length_seed=5))
    again = without_clock(run_synthetic_trace_replay(
        1000, 100, 50, replay_concurrency=8, random_range_ratio=0.8, length_seed=5))
    assert ranged == again
    assert 40_000 <= ranged["total_input_tokens"] < 50_000
    assert 4_000 <= ranged["total_output_tokens"] < 5_000
    # The CLI with the same flags writes the same report.
    code = dynosim.main([*SYNTHETIC_ARGS, "--random-range-ratio", "0.8", "--length-seed", "5",
                         "--quiet", "--report-json", str(tmp_path / "r.json")])
    assert code == 0
    assert without_clock(json.loads((tmp_path / "r.json").read_text())) == ranged
    normal = run_synthetic_trace_replay(
        1000, 100, 50, replay_concurrency=8, input_tokens_stddev=50.0, output_tokens_stddev=5)
    assert normal["total_input_tokens"] != 50_000


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"input_tokens_stddev": 10.0, "random_range_ratio": 0.8},
         "input_tokens_stddev and random_range_ratio cannot both be set"),
        ({"random_range_ratio": 2.0},
         "random_range_ratio: random_range_ratio must be between 0.0 and 1.0, got 2"),
        ({"output_tokens_stddev": -1.0},
         "output_tokens_stddev: output_tokens_stddev must be a finite non-negative number"),
        ({"length_seed": 3}, "length_seed needs a length spread: input_tokens_stddev"),
        ({"random_range_ratio": 0.5, "length_seed": -3},
         "length_seed: must be a non-negative integer, got -3"),
    ],
)
def test_length_spread_keywords_are_checked(kwargs, message):
    with pytest.raises(ValueError) as raised:
        run_synthetic_trace_replay(1000, 100, 50, replay_concurrency=8, **kwargs)
    assert message in str(raised.value)
    with pytest.raises(TypeError):
        run_synthetic_trace_replay(1000, 100, 50, replay_concurrency=8, random_range_ratio="0.8")
