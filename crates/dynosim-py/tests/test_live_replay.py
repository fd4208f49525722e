"""Live replay from Python: `replay_mode="online"` runs the offline replay on the wall clock."""

import json
import time

import pytest

from dynamo.replay import run_trace_replay

# Keys that measure the host's clock, not the simulation.
CLOCK_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}

# One request every 100 ms for 1 s of model time.
TRACE = "".join(
    json.dumps({"timestamp": 100 * i, "input_length": 512, "output_length": 8, "hash_ids": [i]})
    + "\n"
    for i in range(11)
)


def test_online_replay_takes_real_time_and_reports_the_offline_numbers(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE)
    offline = run_trace_replay(str(trace), num_workers=2)
    started = time.monotonic()
    online = run_trace_replay(str(trace), num_workers=2, replay_mode="online")
    elapsed = time.monotonic() - started
    assert elapsed >= 0.9 * offline["duration_ms"] / 1000.0
    assert list(online) == list(offline)
    for key, value in offline.items():
        if key not in CLOCK_KEYS:
            assert online[key] == value, key


def test_online_replay_limits_raise_value_error(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE)
    with pytest.raises(ValueError, match="online replay only supports data_parallel_size=1"):
        run_trace_replay(
            str(trace), replay_mode="online", extra_engine_args={"dp_size": 2}
        )
