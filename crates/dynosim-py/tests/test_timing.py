"""Timing models through the Python API: profile tables and speculative decoding settings are
engine-args keys, so they reach the engines exactly as on the command line."""

import json
import pathlib
import subprocess
import sys

import pytest

from dynamo.replay import run_synthetic_trace_replay, run_trace_replay

PROFILES = pathlib.Path(__file__).resolve().parents[3] / "tests" / "parity" / "profiles"
CLOCK_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}

pytestmark = pytest.mark.skipif(
    not (PROFILES / "dense.npz").exists(),
    reason="the repository's tests/parity/profiles fixtures are not beside this test",
)


def without_clock(report):
    return {key: value for key, value in report.items() if key not in CLOCK_KEYS}


def engine():
    return {
        "planner_profile_data": str(PROFILES / "dense.npz"),
        "aic_nextn": 2,
        "aic_nextn_accept_rates": "0.8,0.4",
        "aic_mtp_seed": 5,
    }


def test_profile_and_mtp_keys_match_the_cli(tmp_path):
    report = run_synthetic_trace_replay(2000, 50, 20, replay_concurrency=4, extra_engine_args=engine())
    out = tmp_path / "cli.json"
    result = subprocess.run(
        [
            sys.executable, "-m", "dynamo.replay",
            "--input-tokens", "2000", "--output-tokens", "50", "--request-count", "20",
            "--replay-concurrency", "4", "--extra-engine-args", json.dumps(engine()),
            "--report-json", str(out),
        ],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert without_clock(report) == without_clock(json.loads(out.read_text()))
    plain = run_synthetic_trace_replay(2000, 50, 20, replay_concurrency=4)
    assert report["mean_itl_ms"] != plain["mean_itl_ms"]


def test_trace_replay_takes_the_keys_for_both_pools(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": 5 * i, "input_length": 700, "output_length": 30, "hash_ids": [0, i + 1]}) + "\n"
            for i in range(6)
        )
    )
    report = run_trace_replay(
        [str(trace)],
        prefill_engine_args={"worker_type": "prefill", **engine()},
        decode_engine_args={"worker_type": "decode", **engine()},
    )
    assert report["completed_requests"] == 6


def test_a_faulty_table_raises_value_error_naming_file_and_key():
    with pytest.raises(ValueError) as raised:
        run_synthetic_trace_replay(
            100, 2, 1, replay_concurrency=1,
            extra_engine_args={"planner_profile_data": str(PROFILES / "bad_shape.npz")},
        )
    message = str(raised.value)
    assert "bad_shape.npz" in message and "decode_itl" in message


def test_bad_speculative_settings_raise_value_error():
    for args, text in [
        ({"aic_nextn": 6}, "aic_nextn"),
        ({"aic_nextn": 2, "aic_nextn_accept_rates": "0.5,2"}, "aic_nextn_accept_rates[1]"),
        ({"aic_nextn_accept_rates": "0.5"}, "requires aic_nextn"),
        ({"aic_nextn": 1, "aic_mtp_seed": -1}, "aic_mtp_seed"),
    ]:
        with pytest.raises(ValueError) as raised:
            run_synthetic_trace_replay(100, 2, 1, replay_concurrency=1, extra_engine_args=args)
        assert text in str(raised.value), (args, str(raised.value))
