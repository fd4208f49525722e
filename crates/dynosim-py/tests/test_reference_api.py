"""A script written for the reference's Python API runs unchanged and gives its numbers.

``reference_api_script.py`` uses only the reference's public API (``MockEngineArgs``,
``SglangArgs``, ``KvRouterConfig``, ``run_trace_replay``, ``run_synthetic_trace_replay`` and the
``reporting`` helpers). ``golden/reference_api.json`` is that script's output on the reference
(ai-dynamo 1.4.2); here the same scenarios run on dynosim and every report key must agree to a
relative 1e-6, the report table byte for byte.
"""

import importlib.util
import json
import math
import pathlib

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
REPO_ROOT = TESTS.parents[2]
SHARED_TRACES = REPO_ROOT.parent / "shared" / "traces"
GOLDEN = json.loads((TESTS / "golden" / "reference_api.json").read_text(encoding="utf-8"))

# Keys that measure the simulator itself, not the simulated deployment.
CLOCK_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
# Scenarios reading ../shared/traces (skipped, and said so, where that directory is absent).
NEEDS_SHARED = {"disaggregated_round_robin"}


def load_script():
    spec = importlib.util.spec_from_file_location(
        "reference_api_script", TESTS / "reference_api_script.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCRIPT = load_script()
SCENARIOS = dict(SCRIPT.scenarios(REPO_ROOT))


def assert_reports_agree(name, ours, expected):
    # The golden file stores keys sorted; the order of the API's dict is tested elsewhere.
    assert sorted(ours) == sorted(expected), f"{name}: report keys differ"
    for key, want in expected.items():
        if key in CLOCK_KEYS:
            continue
        got = ours[key]
        assert type(got) is type(want), f"{name}.{key}: {type(got)} vs {type(want)}"
        assert math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9), (
            f"{name}.{key}: dynosim {got!r}, reference {want!r}"
        )


def test_every_scenario_has_a_reference_report():
    assert sorted(SCENARIOS) == sorted(GOLDEN["reports"])


@pytest.mark.parametrize("name", sorted(GOLDEN["reports"]))
def test_scenario_gives_the_reference_report(name):
    if name in NEEDS_SHARED and not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} is absent")
    assert_reports_agree(name, SCENARIOS[name](), GOLDEN["reports"][name])


def test_scenarios_differ_from_each_other():
    # Guards the golden file itself: each object setting must have changed the outcome.
    reports = GOLDEN["reports"]
    fingerprints = {
        (r["mean_ttft_ms"], r["mean_e2e_latency_ms"], r["duration_ms"]) for r in reports.values()
    }
    assert len(fingerprints) == len(reports)


def test_table_matches_the_reference_byte_for_byte():
    report = SCENARIOS["aggregated_round_robin"]()
    assert SCRIPT.table_with_fixed_wall_time(report) == GOLDEN["table"]


def test_the_whole_script_runs_unchanged(tmp_path, capsys):
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"{SHARED_TRACES} is absent")
    SCRIPT.main(str(REPO_ROOT))
    output = json.loads(capsys.readouterr().out)
    assert output["table"] == GOLDEN["table"]
    assert output["saved_matches_report"] is True
    assert output["saved_ends_with_newline"] is True
    for name, expected in GOLDEN["reports"].items():
        assert_reports_agree(name, output["reports"][name], expected)
