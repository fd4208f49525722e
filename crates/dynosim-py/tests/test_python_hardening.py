"""The Python front under abuse (issue 15's Python items): argument errors that name the
argument, integers too big for any field, numpy scalars, Ctrl-C during a run, and a closed
standard output under ``python -m dynamo.replay``."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dynamo.replay import run_synthetic_trace_replay, run_trace_replay

CLOCK_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
# Long enough (tens of seconds even on an idle machine) that an interrupted run cannot have
# finished on its own by the time the test looks.
# About a minute of simulation uninterrupted (150,000 requests ended within the first progress
# line's 5 s once decode passes got cheaper): the Ctrl-C test interrupts it at that line.
LONG_RUN = ["--input-tokens", "4000", "--output-tokens", "1000", "--request-count", "1500000",
            "--replay-concurrency", "256"]
SHORT_RUN = ["--input-tokens", "1000", "--output-tokens", "100", "--request-count", "50",
             "--replay-concurrency", "8"]


def default_sigint():
    """Gives a child SIGINT's default action: a shell running the tests as a background job
    starts them with SIGINT ignored, which children inherit (Python then installs no
    KeyboardInterrupt handler, and a test's Ctrl-C would do nothing)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def communicate_within(process, timeout=120):
    """The child's output; a child still running after `timeout` s is killed and the test
    fails (a hang)."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail(f"the child was still running after {timeout} s")


def without_clock(report):
    return {key: value for key, value in report.items() if key not in CLOCK_KEYS}


def synthetic(**kwargs):
    arguments = {"input_tokens": 100, "output_tokens": 10, "request_count": 5,
                 "replay_concurrency": 1}
    arguments.update(kwargs)
    return run_synthetic_trace_replay(**arguments)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"request_count": "100"}, TypeError,
         "argument 'request_count': 'str' object cannot be interpreted as an integer"),
        ({"request_count": 2.5}, TypeError,
         "argument 'request_count': 'float' object cannot be interpreted as an integer"),
        ({"replay_concurrency": "8"}, TypeError, "argument 'replay_concurrency'"),
        ({"arrival_speedup_ratio": "x"}, TypeError,
         "argument 'arrival_speedup_ratio': must be real number, not str"),
        ({"router_mode": 3}, TypeError, "argument 'router_mode': expected str, got 'int'"),
        ({"request_count": 2**64}, OverflowError,
         "argument 'request_count': 18446744073709551616 does not fit in a 64-bit integer"),
        ({"num_workers": 2**63}, OverflowError, "argument 'num_workers'"),
        ({"extra_engine_args": {"num_gpu_blocks": 2**64}}, OverflowError,
         "argument 'extra_engine_args.num_gpu_blocks': integer 18446744073709551616 is out of range"),
        ({"extra_engine_args": {"speedup_ratio": float("inf")}}, ValueError,
         "argument 'extra_engine_args.speedup_ratio': must be a finite number"),
        ({"extra_engine_args": {"sglang": {"page_size": object()}}}, TypeError,
         "argument 'extra_engine_args.sglang.page_size': 'object' object is not a JSON value"),
        ({"extra_engine_args": [1]}, TypeError,
         "argument 'extra_engine_args': expected MockEngineArgs, a dict or a JSON string, got 'list'"),
    ],
)
def test_argument_errors_name_the_argument(kwargs, error, message):
    with pytest.raises(error) as caught:
        synthetic(**kwargs)
    assert type(caught.value) is error
    assert message in str(caught.value)


def test_trace_api_argument_errors_name_the_argument(tmp_path):
    with pytest.raises(TypeError, match="argument 'num_workers'"):
        run_trace_replay(tmp_path / "t.jsonl", num_workers="2")
    with pytest.raises(OverflowError, match="argument 'trace_block_size'"):
        run_trace_replay(tmp_path / "t.jsonl", trace_block_size=-(2**70))


def test_numpy_scalars_are_accepted_as_arguments_and_inside_dicts():
    numpy = pytest.importorskip("numpy", reason="numpy is not installed")
    plain = synthetic(request_count=20, replay_concurrency=4,
                      extra_engine_args={"num_gpu_blocks": 64, "speedup_ratio": 2.0})
    with_numpy = synthetic(
        request_count=numpy.int64(20),
        replay_concurrency=numpy.uint8(4),
        extra_engine_args={"num_gpu_blocks": numpy.int32(64), "speedup_ratio": numpy.float64(2.0)},
    )
    assert without_clock(with_numpy) == without_clock(plain)


def run_module_in_background(module, args, cwd):
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )


def test_ctrl_c_interrupts_an_api_call_at_once(tmp_path):
    code = (
        "import sys\n"
        "from dynamo.replay import run_synthetic_trace_replay\n"
        "print('started', flush=True)\n"
        "try:\n"
        "    run_synthetic_trace_replay(4000, 1000, 150000, replay_concurrency=256)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(0)\n"
        "print('finished', flush=True)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
    )
    assert process.stdout.readline() == "started\n"
    time.sleep(0.5)  # let the run get going
    process.send_signal(signal.SIGINT)
    out, err = communicate_within(process)
    assert process.returncode == 0, err
    assert out == "interrupted\n", (out, err)


# A child that calls one replay function with html_report= (and the arguments given), catches
# its KeyboardInterrupt and prints what it saw as JSON: the RuntimeWarnings, the directory's
# files.
PARTIAL_OUTPUTS_CHILD = """
import json, os, sys, warnings
import dynamo.replay as api
function, arguments = sys.argv[1], json.loads(sys.argv[2])
print("started", flush=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        getattr(api, function)(**arguments, html_report="run.html")
        outcome = "finished"
    except KeyboardInterrupt:
        outcome = "interrupted"
print(json.dumps({"outcome": outcome, "warnings": [str(w.message) for w in caught],
                  "files": sorted(os.listdir("."))}), flush=True)
"""


@pytest.mark.parametrize("function", ["run_trace_replay", "run_synthetic_trace_replay"])
def test_ctrl_c_in_an_api_call_writes_the_partial_outputs_then_raises(function, tmp_path):
    # As the command line does: the simulation stops, the files asked for are written with what
    # happened (the report marked interrupted), then the KeyboardInterrupt reaches the caller.
    if function == "run_trace_replay":
        # Live: arrivals spread over 10 minutes of wall time, so the run is still going when
        # the signal comes, however loaded the machine.
        with open(tmp_path / "trace.jsonl", "w") as trace:
            for index in range(2400):
                trace.write(json.dumps({"timestamp": index * 250, "input_length": 200,
                                        "output_length": 20, "hash_ids": [index]}) + "\n")
        arguments = {"trace_files": "trace.jsonl", "replay_mode": "online",
                     "report_jsonl_path": "records.jsonl"}
        written = ["records.jsonl", "run.html", "trace.jsonl"]
    else:
        arguments = {"input_tokens": 4000, "output_tokens": 1000, "request_count": 150000,
                     "replay_concurrency": 256, "aiperf_dir": "aiperf"}
        written = ["aiperf", "run.html"]
    process = subprocess.Popen(
        [sys.executable, "-c", PARTIAL_OUTPUTS_CHILD, function, json.dumps(arguments)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint,
    )
    assert process.stdout.readline() == "started\n"
    time.sleep(3)  # the run's setup is milliseconds: it is simulating by then
    process.send_signal(signal.SIGINT)
    out, err = communicate_within(process)
    assert process.returncode == 0, err
    seen = json.loads(out)
    assert seen["outcome"] == "interrupted", seen
    assert len(seen["warnings"]) == 1, seen
    assert seen["warnings"][0].endswith("(the run was interrupted)"), seen
    # Exactly the outputs asked for (and the trace): no temporary file is left.
    assert seen["files"] == written, seen
    if function == "run_trace_replay":
        records = (tmp_path / "records.jsonl").read_text().splitlines()
    else:
        assert len(os.listdir(tmp_path / "aiperf")) == 3
        records = (tmp_path / "aiperf" / "profile_export.jsonl").read_text().splitlines()
    for line in records:
        json.loads(line)  # whole lines
    html = (tmp_path / "run.html").read_text()
    assert html.rstrip().endswith("</html>")
    assert '"interrupted":1' in html  # the page's report, marked


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_ctrl_c_stops_the_simulation_itself(tmp_path):
    # The interrupted run's thread must end, not keep simulating in the background: a million
    # requests would keep it busy for minutes.
    code = (
        "import os, signal, threading, time\n"
        "from dynamo.replay import run_synthetic_trace_replay\n"
        "def replay_threads():\n"
        "    names = []\n"
        "    for task in os.listdir('/proc/self/task'):\n"
        "        try:\n"
        "            with open(f'/proc/self/task/{task}/comm') as comm:\n"
        "                names.append(comm.read().strip())\n"
        "        except OSError:\n"
        "            pass\n"
        "    return names.count('dynosim-replay')\n"
        "threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        "try:\n"
        "    run_synthetic_trace_replay(4000, 1000, 10**6, replay_concurrency=256)\n"
        "except KeyboardInterrupt:\n"
        "    pass\n"
        "deadline = time.monotonic() + 30\n"
        "while replay_threads() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
        "print('replay threads left:', replay_threads(), flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        preexec_fn=default_sigint,
    )
    assert result.stdout == "replay threads left: 0\n", result.stderr[-500:]


@pytest.mark.parametrize("module", ["dynamo.replay", "dynosim"])
def test_ctrl_c_ends_the_command_with_the_report_of_what_happened(module, tmp_path):
    process = run_module_in_background(
        module, [*LONG_RUN, "--report-json", "out.json", "--progress", "lines"], tmp_path
    )
    # The first progress line of the simulation (5 s into the run, later on a loaded machine,
    # where generating the workload can outlast the interval: those lines say "setting up")
    # says the simulation is under way.
    first = process.stderr.readline()
    while first.startswith("progress: setting up"):
        first = process.stderr.readline()
    assert first.startswith("progress: model time"), first
    process.send_signal(signal.SIGINT)
    out, err = communicate_within(process)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert "\nInterrupted: the report covers the run until Ctrl-C\n" in out, out
    assert "interrupted: the report covers the requests that finished before Ctrl-C" in err
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["interrupted"] == 1
    assert report["num_requests"] == report["completed_requests"] + report["unfinished_requests"]


@pytest.mark.parametrize("module", ["dynamo.replay", "dynosim"])
def test_closed_stdout_ends_the_command_without_a_traceback(module, tmp_path):
    process = run_module_in_background(module, [*SHORT_RUN, "--report-json", "out.json"], tmp_path)
    process.stdout.close()  # like `| true`: nobody reads the table
    _, err = communicate_within(process)
    assert err == ""
    assert process.returncode == 1
    assert (tmp_path / "out.json").is_file()  # the report was saved before printing


def limit_memory():
    """Keeps a runaway allocation in the child from taking the machine's memory."""
    import resource

    limit = 4 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_absurd_worker_count_is_a_clear_error_not_a_crash(tmp_path):
    code = (
        "from dynamo.replay import run_synthetic_trace_replay\n"
        "try:\n"
        "    run_synthetic_trace_replay(10, 1, 1, replay_concurrency=1, num_workers=10**9)\n"
        "except ValueError as error:\n"
        "    print('ValueError', error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        preexec_fn=limit_memory,
    )
    assert result.returncode == 0, result.stderr[-500:]
    assert result.stdout.startswith("ValueError") and "num_workers" in result.stdout


def test_the_dynosim_command_is_dynosim(tmp_path):
    command = os.path.join(os.path.dirname(sys.executable), "dynosim")
    if not os.path.exists(command):
        pytest.skip(f"no dynosim command beside {sys.executable} (package not installed there)")
    result = subprocess.run(
        [command, *SHORT_RUN, "--report-json", "out.json"], cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("NVIDIA AIPerf | LLM Metrics\n")
    usage = subprocess.run([command, "--bogus"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2
    assert usage.stderr.startswith("dynosim: error: ")


# (API call, message): errors through the Python API name Python arguments; the reference's
# API wording where it has its own sentence (frontend.md §2).
PYTHON_SPELLING_CASES = [
    (lambda: run_synthetic_trace_replay(10, 1, 1),
     "synthetic replay requires exactly one of replay_concurrency, request_rate, or "
     "arrival_interval_ms"),
    (lambda: run_synthetic_trace_replay(10, 1, 1, replay_concurrency=0),
     "replay_concurrency: replay_concurrency must be at least 1"),
    (lambda: run_synthetic_trace_replay(10, 1, 1, replay_concurrency=1, num_workers=-1),
     "num_workers: must be a non-negative integer, got -1"),
    (lambda: run_synthetic_trace_replay(10, 1, 1, replay_concurrency=1,
                                        extra_engine_args={"num_gpu_blocks": 0}),
     "extra_engine_args: num_gpu_blocks: must be at least 1, got 0"),
    (lambda: run_trace_replay(["a.jsonl", "b.jsonl"]),
     "trace_format='mooncake' requires exactly one trace file, got 2"),
    (lambda: run_trace_replay([], trace_format="dynamo"),
     "trace_format='dynamo' requires at least one trace file"),
    (lambda: run_trace_replay("a.jsonl", trace_format="applied_compute_agentic"),
     "trace_format='applied_compute_agentic' requires replay_concurrency because the source "
     "traces do not include first-turn timestamps"),
    (lambda: run_trace_replay("a.jsonl", router_mode="bogus"),
     "router_mode: router_mode must be either 'round_robin' or 'kv_router', got 'bogus'"),
    (lambda: run_trace_replay("a.jsonl", aic_perf_config={"aic_backend": "vllm"}),
     "AIC replay modeling requires aic_perf_config.aic_system, aic_perf_config.aic_model_path"),
]


@pytest.mark.parametrize("call, message", PYTHON_SPELLING_CASES,
                         ids=[message[:40] for _, message in PYTHON_SPELLING_CASES])
def test_api_errors_use_python_spelling(call, message):
    with pytest.raises(ValueError) as caught:
        call()
    assert str(caught.value) == message
    assert "--" not in str(caught.value)


def test_cli_keeps_flag_spelling(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "dynamo.replay", "--input-tokens", "10", "--output-tokens", "1",
         "--request-count", "1", "--replay-concurrency", "0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == (
        "python -m dynamo.replay: error: --replay-concurrency: replay_concurrency must be at "
        "least 1"
    )
