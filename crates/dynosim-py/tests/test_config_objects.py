"""The reference's config objects: ``dynamo.mocker.MockEngineArgs`` (and its sub-objects) and
``dynamo.llm.KvRouterConfig``: constructors, defaults, properties, setters, ``from_json``,
``copy``, ``with_overrides``, and validation that names the field.

Where the reference rejects a value, the expected outcome here keeps its exception class
(``TypeError`` and ``OverflowError`` as the reference raises them; its bare ``Exception`` for a
rejected value is a ``ValueError`` here, a subclass, so ``except Exception`` still works) and
the message names the field and the value. The reference's own message is kept beside each case
for comparison (dynosim's wording is documented in docs/differences.md).
"""

import ast
import copy
import inspect
import json
import pathlib

import pytest

import dynosim
from dynamo.llm import AicPerfConfig, KvRouterConfig
from dynamo.mocker import MockEngineArgs, ReasoningConfig, SglangArgs, TrtllmArgs
from dynamo.replay import run_synthetic_trace_replay, run_trace_replay

CLOCK_KEYS = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}

# The constructor keywords of the reference's stub (dynamo/_core.pyi, ai-dynamo 1.4.2), in order.
REFERENCE_ENGINE_KEYWORDS = (
    "engine_type num_gpu_blocks block_size max_num_seqs max_num_batched_tokens "
    "enable_prefix_caching enable_chunked_prefill speedup_ratio decode_speedup_ratio dp_size "
    "startup_time worker_type planner_profile_data aic_backend aic_system aic_backend_version "
    "aic_tp_size aic_model_path aic_moe_tp_size aic_moe_ep_size aic_attention_dp_size aic_nextn "
    "aic_nextn_accept_rates aic_mtp_seed aic_gemm_dtype aic_moe_dtype aic_fmha_dtype "
    "aic_kv_cache_dtype aic_comm_dtype gpu_memory_utilization mem_fraction_static "
    "free_gpu_memory_fraction enable_local_indexer bootstrap_port handoff_session_timeout_ms "
    "kv_bytes_per_token kv_transfer_bandwidth kv_transfer_timing_mode reasoning "
    "response_replay_trace_path zmq_kv_events_port zmq_replay_port preemption_mode "
    "router_queue_policy sglang trtllm num_g2_blocks num_g3_blocks offload_batch_size "
    "bandwidth_g1_to_g2_gbps bandwidth_g2_to_g1_gbps bandwidth_g2_to_g3_gbps "
    "bandwidth_g3_to_g2_gbps enable_g4_storage bandwidth_g2_to_g4_gbps bandwidth_g4_to_g2_gbps "
    "max_model_len g1_backend"
).split()


def stub_keywords_with_value_defaults():
    """The constructor's keywords whose default in the stub (the reference's defaults) is a
    value, not None: for these None is a value, not "unset"."""
    stub = pathlib.Path(dynosim.__file__).with_name("_dynosim.pyi")
    for node in ast.parse(stub.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == "MockEngineArgs":
            init = next(
                item for item in node.body
                if isinstance(item, ast.FunctionDef) and item.name == "__init__"
            )
            parameters = init.args.args[1:]  # after self
            defaults = init.args.defaults[-len(parameters):]
            return {
                parameter.arg
                for parameter, default in zip(parameters, defaults)
                if not (isinstance(default, ast.Constant) and default.value is None)
            }
    raise AssertionError(f"MockEngineArgs is not in {stub}")


ENGINE_KEYWORDS_WITH_VALUE_DEFAULTS = stub_keywords_with_value_defaults()

# Valid example values for keywords that are accepted and kept without modelling a feature.
ENGINE_KEYWORD_EXAMPLES = {
    "startup_time": 2.5,
    "aic_system": "h200_sxm",
    "aic_backend_version": "0.20.0",
    "aic_tp_size": 2,
    "aic_model_path": "Qwen/Qwen3-32B",
    "aic_moe_tp_size": 1,
    "aic_moe_ep_size": 1,
    "aic_mtp_seed": 7,
    "aic_gemm_dtype": "fp8",
    "gpu_memory_utilization": 0.9,
    "mem_fraction_static": 0.8,
    "free_gpu_memory_fraction": 0.5,
    "enable_local_indexer": True,
    "bootstrap_port": 8998,
    "handoff_session_timeout_ms": 1000,
    "zmq_kv_events_port": 5557,
    "zmq_replay_port": 5558,
    "response_replay_trace_path": pathlib.Path("/tmp/replay.jsonl"),
}


def without_clock(report):
    return {key: value for key, value in report.items() if key not in CLOCK_KEYS}


def synthetic(**kwargs):
    kwargs.setdefault("replay_concurrency", 32)
    return run_synthetic_trace_replay(3000, 400, 100, **kwargs)


# --- MockEngineArgs: construction and properties ------------------------------------------


def test_defaults_read_as_the_reference_reports_them():
    args = MockEngineArgs()
    assert args.engine_type == "vllm"
    assert args.block_size == 64
    assert args.num_gpu_blocks == 16384
    assert args.max_num_seqs == 256
    assert args.max_num_batched_tokens == 8192
    assert args.max_model_len is None
    assert args.enable_prefix_caching is True
    assert args.dp_size == 1
    assert args.worker_type == "aggregated"
    assert args.g1_backend == "native"
    assert args.kv_transfer_timing_mode == "full_prompt"
    assert args.handoff_session_timeout_ms == 300000
    assert args.aic_mtp_seed == 42
    assert args.aic_backend is None
    assert args.bootstrap_port is None
    assert not args.is_prefill() and not args.is_decode()


@pytest.mark.parametrize(
    "kwargs, block_size",
    [
        ({"engine_type": "vllm"}, 64),
        ({"engine_type": "sglang"}, 1),
        ({"engine_type": "trtllm"}, 32),
        ({"engine_type": "sglang", "sglang": SglangArgs(page_size=16)}, 16),
        ({"block_size": 16}, 16),
    ],
)
def test_block_size_zero_means_the_engine_default(kwargs, block_size):
    assert MockEngineArgs(**kwargs).block_size == block_size


def test_positional_arguments_follow_the_reference_order():
    args = MockEngineArgs("trtllm", 100)
    assert (args.engine_type, args.num_gpu_blocks, args.block_size) == ("trtllm", 100, 32)


def test_every_reference_keyword_is_accepted():
    for keyword in REFERENCE_ENGINE_KEYWORDS:
        if keyword in ENGINE_KEYWORD_EXAMPLES:
            value = ENGINE_KEYWORD_EXAMPLES[keyword]
            args = MockEngineArgs(**{keyword: value})
            expected = str(value) if isinstance(value, pathlib.Path) else value
            assert getattr(args, keyword) == expected, keyword
        elif keyword not in ENGINE_KEYWORDS_WITH_VALUE_DEFAULTS:
            MockEngineArgs(**{keyword: None})  # None means "not set"


def test_none_for_a_limit_means_unlimited():
    args = MockEngineArgs(max_num_seqs=None, max_num_batched_tokens=None)
    assert args.max_num_seqs is None and args.max_num_batched_tokens is None


def test_sub_objects_are_accepted_and_read_back():
    args = MockEngineArgs(
        engine_type="sglang",
        sglang=SglangArgs(schedule_policy="lpm", page_size=16, chunked_prefill_size=1024),
    )
    assert repr(args.sglang) == "SglangArgs(schedule_policy='lpm', page_size=16, chunked_prefill_size=1024)"
    args = MockEngineArgs(
        engine_type="trtllm", trtllm=TrtllmArgs(capacity_scheduler_policy="guaranteed_no_evict")
    )
    assert isinstance(args.trtllm, TrtllmArgs)
    MockEngineArgs(reasoning=ReasoningConfig(1, 2, 0.5))
    with pytest.raises(TypeError, match="missing required argument 'thinking_ratio'"):
        ReasoningConfig(1, 2)


def test_worker_type_sets_the_role():
    assert MockEngineArgs(worker_type="prefill").is_prefill()
    assert MockEngineArgs(worker_type="decode").is_decode()
    args = MockEngineArgs.from_json('{"is_decode": true}')
    assert args.worker_type == "decode" and args.is_decode()


# --- MockEngineArgs: validation --------------------------------------------------------------

# (keyword arguments, exception class, fragments our message must contain, reference message)
ENGINE_ARG_ERRORS = [
    (
        {"num_gpu_blocks": 0},
        ValueError,
        ["num_gpu_blocks", "at least 1", "got 0"],
        "Failed to normalize MockEngineArgs: Failed to validate MockEngineArgs: num_gpu_blocks: "
        'Validation error: range [{"min": Number(1), "value": Number(0)}]',
    ),
    (
        {"dp_size": 0},
        ValueError,
        ["dp_size", "at least 1", "got 0"],
        "Failed to normalize MockEngineArgs: Failed to validate MockEngineArgs: dp_size: "
        "Validation error: range [...]",
    ),
    (
        {"max_num_seqs": 0},
        ValueError,
        ["max_num_seqs", "got 0"],
        "... max_num_seqs: Validation error: range [...]",
    ),
    (
        {"gpu_memory_utilization": 2.0},
        ValueError,
        ["gpu_memory_utilization", "between 0 and 1", "got 2"],
        "... gpu_memory_utilization: Validation error: range [...]",
    ),
    (
        {"speedup_ratio": -1},
        ValueError,
        ["speedup_ratio", "got -1"],
        "... speedup_ratio: Validation error: range [...]",
    ),
    (
        {"engine_type": "bogus"},
        ValueError,
        ["engine_type", "'bogus'"],
        "engine_type must be one of 'vllm', 'sglang', or 'trtllm', got 'bogus'",
    ),
    (
        {"worker_type": "bogus"},
        ValueError,
        ["worker_type must be one of 'aggregated', 'prefill', or 'decode'"],
        "worker_type must be one of 'aggregated', 'prefill', or 'decode', got 'bogus'",
    ),
    (
        {"preemption_mode": "x"},
        ValueError,
        ["preemption_mode", "'x'", "'lifo' or 'fifo'"],
        "preemption_mode must be either 'lifo' or 'fifo', got 'x'",
    ),
    (
        {"kv_transfer_timing_mode": "x"},
        ValueError,
        ["Invalid kv_transfer_timing_mode 'x'. Must be 'full_prompt' or 'destination_missing'."],
        "Invalid kv_transfer_timing_mode 'x'. Must be 'full_prompt' or 'destination_missing'.",
    ),
    (
        {"g1_backend": "x"},
        ValueError,
        ["g1_backend", "`x`"],
        "g1_backend must be either 'kvbm' or 'native', got 'x'",
    ),
    (
        {"router_queue_policy": "x"},
        ValueError,
        ['"x"', "'fcfs', 'lcfs', or 'wspt'"],
        "invalid router_queue_policy \"x\": unknown queue policy: \"x\", expected 'fcfs', "
        "'lcfs', or 'wspt'",
    ),
    (
        {"max_model_len": 10, "engine_type": "sglang"},
        ValueError,
        ["max_model_len is supported only for engine_type=vllm, got engine_type=Sglang"],
        "... __all__: max_model_len is supported only for engine_type=vllm, got "
        "engine_type=Sglang",
    ),
    (
        {"num_g3_blocks": 10},
        ValueError,
        ["num_g3_blocks requires num_g2_blocks because mocker stages G3 through G2"],
        "... __all__: num_g3_blocks requires num_g2_blocks because mocker stages G3 through G2",
    ),
    (
        {"engine_type": "trtllm", "trtllm": TrtllmArgs("x")},
        ValueError,
        ["capacity_scheduler_policy='guaranteed_no_evict', got 'x'"],
        "... engine_type=trtllm v1 supports only capacity_scheduler_policy="
        "'guaranteed_no_evict', got 'x'",
    ),
    (
        {"engine_type": "sglang", "sglang": SglangArgs(page_size=0)},
        ValueError,
        ["sglang.page_size: must be at least 1, got 0"],
        "... __all__: sglang.page_size: must be at least 1, got 0",
    ),
    (
        {"block_size": "x"},
        TypeError,
        ["argument 'block_size'", "'str' object cannot be interpreted as an integer"],
        "argument 'block_size': 'str' object cannot be interpreted as an integer",
    ),
    (
        {"enable_prefix_caching": 1},
        TypeError,
        ["argument 'enable_prefix_caching'", "bool", "'int'"],
        "argument 'enable_prefix_caching': 'int' object cannot be converted to 'PyBool'",
    ),
    (
        {"speedup_ratio": "x"},
        TypeError,
        ["argument 'speedup_ratio': must be real number, not str"],
        "argument 'speedup_ratio': must be real number, not str",
    ),
    (
        {"engine_type": 3},
        TypeError,
        ["argument 'engine_type'", "'int'"],
        "argument 'engine_type': 'int' object cannot be converted to 'PyString'",
    ),
    (
        {"reasoning": 5},
        TypeError,
        ["argument 'reasoning'", "ReasoningConfig", "'int'"],
        "argument 'reasoning': 'int' object cannot be converted to 'ReasoningConfig'",
    ),
    (
        {"foo": 1},
        TypeError,
        ["MockEngineArgs() got an unexpected keyword argument 'foo'"],
        "MockEngineArgs.__new__() got an unexpected keyword argument 'foo'",
    ),
    (
        {"block_size": -1},
        OverflowError,
        ["argument 'block_size': can't convert negative int to unsigned"],
        "can't convert negative int to unsigned",
    ),
    (
        {"num_gpu_blocks": 2**64},
        OverflowError,
        ["argument 'num_gpu_blocks'", "too big"],
        "int too big to convert",
    ),
    (
        {"bootstrap_port": 70000},
        OverflowError,
        ["argument 'bootstrap_port'", "70000", "65535"],
        "out of range integral type conversion attempted",
    ),
    (
        {"dp_size": 2**33},
        OverflowError,
        ["argument 'dp_size'", "8589934592"],
        "out of range integral type conversion attempted",
    ),
]


@pytest.mark.parametrize(
    "kwargs, error, fragments, reference_message",
    ENGINE_ARG_ERRORS,
    ids=[json.dumps(case[0], default=repr) for case in ENGINE_ARG_ERRORS],
)
def test_engine_args_validation_names_the_field(kwargs, error, fragments, reference_message):
    with pytest.raises(error) as caught:
        MockEngineArgs(**kwargs)
    assert type(caught.value) is error
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, (message, reference_message)


def test_too_many_positional_arguments():
    with pytest.raises(TypeError, match=r"takes from 0 to 58 positional arguments but 62"):
        MockEngineArgs(*range(62))


def test_non_finite_floats_are_rejected():
    # The reference accepts NaN silently; JSON (and a simulation) cannot use it.
    with pytest.raises(ValueError, match="argument 'speedup_ratio': must be a finite number"):
        MockEngineArgs(speedup_ratio=float("nan"))


def test_settings_read_from_files_are_checked_when_the_object_is_built(tmp_path):
    missing = tmp_path / "h100.npz"
    with pytest.raises(ValueError, match=f"planner_profile_data: {missing}"):
        MockEngineArgs(planner_profile_data=missing)
    aic = MockEngineArgs(aic_backend="vllm", aic_model_path="Qwen/Qwen3-32B")
    assert (aic.aic_backend, aic.aic_model_path) == ("vllm", "Qwen/Qwen3-32B")
    assert MockEngineArgs(aic_nextn=3, aic_nextn_accept_rates="0.8,0.5").aic_nextn == 3


# --- MockEngineArgs: setters, copy, with_overrides, from_json --------------------------------


def test_setters_validate_and_keep_the_old_value_on_error():
    args = MockEngineArgs(num_gpu_blocks=100)
    args.num_gpu_blocks = 50
    assert args.num_gpu_blocks == 50
    with pytest.raises(ValueError, match="num_gpu_blocks: must be at least 1, got 0"):
        args.num_gpu_blocks = 0
    assert args.num_gpu_blocks == 50
    with pytest.raises(TypeError, match="argument 'num_gpu_blocks'"):
        args.num_gpu_blocks = "many"
    assert args.num_gpu_blocks == 50
    with pytest.raises(ValueError, match="gpu_memory_utilization: must be between 0 and 1"):
        args.gpu_memory_utilization = 2.0
    assert args.gpu_memory_utilization is None
    args.gpu_memory_utilization = 0.5
    assert args.gpu_memory_utilization == 0.5
    args.worker_type = "decode"
    assert args.is_decode()
    with pytest.raises(ValueError, match="worker_type must be one of"):
        args.worker_type = "x"
    assert args.worker_type == "decode"
    args.enable_prefix_caching = False
    assert args.enable_prefix_caching is False


def test_read_only_properties_cannot_be_set():
    args = MockEngineArgs()
    with pytest.raises(AttributeError):
        args.block_size = 16
    assert args.block_size == 64


def test_copy_is_independent():
    original = MockEngineArgs(num_gpu_blocks=100)
    for duplicate in (original.copy(), copy.copy(original), copy.deepcopy(original)):
        duplicate.num_gpu_blocks = 5
        assert original.num_gpu_blocks == 100


def test_with_overrides_returns_a_changed_copy():
    original = MockEngineArgs(num_gpu_blocks=100, block_size=16)
    changed = original.with_overrides(num_gpu_blocks=200, worker_type="prefill")
    assert (changed.num_gpu_blocks, changed.block_size, changed.worker_type) == (
        200,
        16,
        "prefill",
    )
    assert (original.num_gpu_blocks, original.worker_type) == (100, "aggregated")
    assert original.with_overrides(num_gpu_blocks=None).num_gpu_blocks == 100
    with pytest.raises(ValueError, match="num_gpu_blocks: must be at least 1, got 0"):
        original.with_overrides(num_gpu_blocks=0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'block_size'"):
        original.with_overrides(block_size=32)
    prefill = MockEngineArgs.from_json('{"is_prefill": true}')
    assert prefill.with_overrides(worker_type="decode").is_decode()


def test_from_json_uses_the_engine_args_parser():
    args = MockEngineArgs.from_json('{"block_size": 16, "worker_type": "decode"}')
    assert (args.block_size, args.worker_type) == (16, "decode")
    with pytest.raises(ValueError, match=r"unknown field `foo`, expected one of `engine_type`"):
        MockEngineArgs.from_json('{"foo": 1}')
    with pytest.raises(ValueError, match="must be a JSON object"):
        MockEngineArgs.from_json("[1]")
    with pytest.raises(ValueError, match="invalid JSON"):
        MockEngineArgs.from_json("{")
    with pytest.raises(TypeError, match="argument 'config_json'"):
        MockEngineArgs.from_json(5)


def test_numpy_integers_are_accepted():
    numpy = pytest.importorskip("numpy", reason="numpy is not installed")
    assert MockEngineArgs(num_gpu_blocks=numpy.int64(600)).num_gpu_blocks == 600
    assert MockEngineArgs(speedup_ratio=numpy.float32(2.0)).speedup_ratio == 2.0


# --- KvRouterConfig ------------------------------------------------------------------------------


def test_router_config_defaults_and_alias():
    config = KvRouterConfig()
    assert (config.overlap_score_credit, config.prefill_load_scale) == (1.0, 1.0)
    assert (config.overlap_score_credit_decay, config.decode_active_request_weight) == (0.0, 0.0)
    assert config.overlap_score_weight == 1.0
    # The deprecated alias sets the prefill scale; 0 also switches the overlap credit off.
    zero = KvRouterConfig(overlap_score_weight=0)
    assert (zero.overlap_score_credit, zero.prefill_load_scale) == (0.0, 0.0)
    half = KvRouterConfig(0.5)
    assert (half.overlap_score_credit, half.prefill_load_scale) == (1.0, 0.5)
    half.prefill_load_scale = 2.0
    assert half.prefill_load_scale == half.overlap_score_weight == 2.0


ROUTER_ERRORS = [
    ({"router_temperature": -1}, ValueError, ["router_temperature", "greater than or equal to 0"]),
    ({"overlap_score_credit": -1}, ValueError, ["overlap_score_credit", "non-negative"]),
    ({"router_queue_policy": "x"}, ValueError, ["router_queue_policy", "`x`"]),
    ({"router_prefill_load_model": "x"}, ValueError, ["router_prefill_load_model", "`x`"]),
    ({"router_ttl_secs": "x"}, TypeError, ["argument 'router_ttl_secs': must be real number"]),
    ({"use_kv_events": 1}, TypeError, ["argument 'use_kv_events'"]),
    ({"router_event_threads": -1}, OverflowError, ["argument 'router_event_threads'"]),
    ({"foo": 1}, TypeError, ["KvRouterConfig() got an unexpected keyword argument 'foo'"]),
    (
        {"router_policy_config": "/nonexistent.yaml"},
        ValueError,
        ["router_policy_config: failed to read router policy config /nonexistent.yaml"],
    ),
]


@pytest.mark.parametrize("kwargs, error, fragments", ROUTER_ERRORS)
def test_router_config_validation_names_the_field(kwargs, error, fragments):
    with pytest.raises(error) as caught:
        KvRouterConfig(**kwargs)
    assert type(caught.value) is error
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_router_config_positional_limit():
    with pytest.raises(TypeError, match="takes from 0 to 5 positional arguments but 6"):
        KvRouterConfig(1.0, 0.5, 0.5, 0.0, True, False)


def test_router_config_setters_and_overrides():
    config = KvRouterConfig()
    with pytest.raises(ValueError, match="prefill_load_scale must be greater than or equal to 0"):
        config.prefill_load_scale = -1
    assert config.prefill_load_scale == 1.0
    with pytest.raises(TypeError, match="argument 'overlap_score_credit'"):
        config.overlap_score_credit = "x"
    config.decode_active_request_weight = 2.0
    assert config.decode_active_request_weight == 2.0
    changed = config.with_overrides(0.5, overlap_score_credit=2.0)
    assert (changed.prefill_load_scale, changed.overlap_score_credit) == (0.5, 2.0)
    assert (config.prefill_load_scale, config.overlap_score_credit) == (1.0, 1.0)
    assert config.copy().decode_active_request_weight == 2.0
    with pytest.raises(ValueError, match="prefill_load_scale must be greater than or equal to 0"):
        config.with_overrides(prefill_load_scale=-1)


def test_router_config_from_json_and_policy_yaml(tmp_path):
    assert KvRouterConfig.from_json('{"overlap_score_credit": 2.0}').overlap_score_credit == 2.0
    with pytest.raises(ValueError, match=r"unknown field `foo`, expected one of"):
        KvRouterConfig.from_json('{"foo": 1}')
    with pytest.raises(ValueError, match="router_temperature must be greater than or equal to 0"):
        KvRouterConfig.from_json('{"router_temperature": -1}')
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ValueError, match="failed to read router policy config"):
        KvRouterConfig.from_json(json.dumps({"router_policy_config": str(missing)}))
    broken = tmp_path / "broken.yaml"
    broken.write_text("policy_classes: [\n")
    with pytest.raises(ValueError, match="router_policy_config"):
        KvRouterConfig(router_policy_config=str(broken))


# --- The API takes objects, dicts and JSON text alike ------------------------------------------


def test_engine_args_object_dict_and_text_agree():
    engine = {"num_gpu_blocks": 600, "preemption_mode": "fifo"}
    by_object = synthetic(extra_engine_args=MockEngineArgs(**engine))
    by_dict = synthetic(extra_engine_args=engine)
    by_text = synthetic(extra_engine_args=json.dumps(engine))
    assert without_clock(by_object) == without_clock(by_dict) == without_clock(by_text)
    assert without_clock(by_object) != without_clock(synthetic())


def test_router_config_object_dict_and_text_agree():
    trace = pathlib.Path(__file__).resolve().parents[3] / "tests" / "parity" / "traces"
    router = {"router_queue_threshold": 0.1, "router_queue_policy": "wspt"}
    common = {"router_mode": "kv_router", "num_workers": 2}
    trace_file = trace / "kv_queue.jsonl"
    by_object = run_trace_replay(trace_file, router_config=KvRouterConfig(**router), **common)
    by_dict = run_trace_replay(trace_file, router_config=router, **common)
    by_text = run_trace_replay(trace_file, router_config=json.dumps(router), **common)
    assert without_clock(by_object) == without_clock(by_dict) == without_clock(by_text)
    assert without_clock(by_object) != without_clock(
        run_trace_replay(trace_file, router_config=KvRouterConfig(), **common)
    )


def test_objects_of_the_wrong_class_are_type_errors():
    with pytest.raises(TypeError, match="argument 'extra_engine_args': expected MockEngineArgs"):
        synthetic(extra_engine_args=KvRouterConfig())
    with pytest.raises(TypeError, match="argument 'router_config': expected KvRouterConfig"):
        synthetic(router_config=MockEngineArgs())


def test_numpy_values_inside_an_engine_args_dict():
    numpy = pytest.importorskip("numpy", reason="numpy is not installed")
    by_numpy = synthetic(extra_engine_args={"num_gpu_blocks": numpy.int64(600)})
    assert without_clock(by_numpy) == without_clock(synthetic(extra_engine_args={"num_gpu_blocks": 600}))
    by_numpy_args = synthetic(replay_concurrency=numpy.int32(32))
    assert without_clock(by_numpy_args) == without_clock(synthetic())


def test_classes_are_documented():
    for cls in (MockEngineArgs, KvRouterConfig, AicPerfConfig, SglangArgs, TrtllmArgs,
                ReasoningConfig):
        assert inspect.getdoc(cls), cls
    assert MockEngineArgs.__module__ == "dynamo.mocker"
    assert KvRouterConfig.__module__ == "dynamo.llm"


def test_older_mocker_entry_point_takes_positional_arguments():
    from dynamo.mocker import run_mocker_trace_replay

    trace = pathlib.Path(__file__).resolve().parents[3] / "tests" / "parity" / "traces"
    engine = MockEngineArgs(num_gpu_blocks=300, block_size=32)
    positional = run_mocker_trace_replay(str(trace / "pressure.jsonl"), engine, None, 2)
    keywords = run_trace_replay(trace / "pressure.jsonl", extra_engine_args=engine, num_workers=2)
    assert without_clock(positional) == without_clock(keywords)


def _replay_in_worker(engine, router):
    # Runs in a worker process: the objects arrive pickled.
    return without_clock(
        run_synthetic_trace_replay(
            2000, 100, 40, extra_engine_args=engine, router_config=router,
            router_mode="kv_router", num_workers=2, replay_concurrency=8,
        )
    )


def test_objects_pickle_for_worker_processes():
    import concurrent.futures
    import multiprocessing
    import pickle

    engine = MockEngineArgs(
        num_gpu_blocks=500, block_size=16, worker_type="aggregated",
        reasoning=ReasoningConfig(1, 2, 0.5),
    )
    router = KvRouterConfig(0.0, router_queue_threshold=0.5)
    sglang = SglangArgs(page_size=16, schedule_policy="lpm")
    assert repr(pickle.loads(pickle.dumps(engine))) == repr(engine)
    assert repr(pickle.loads(pickle.dumps(router))) == repr(router)
    assert repr(pickle.loads(pickle.dumps(sglang))) == repr(sglang)
    assert pickle.loads(pickle.dumps(router)).overlap_score_credit == 0.0
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        remote = pool.submit(_replay_in_worker, engine, router).result(timeout=300)
    assert remote == _replay_in_worker(engine, router)


# --- AicPerfConfig -----------------------------------------------------------------------------

AIC_MODEL = ("vllm", "h200_sxm", "Qwen/Qwen3-32B")


@pytest.mark.parametrize(
    "args, kwargs, error, message",
    [
        (("bogus", "x", "y"), {}, ValueError,
         "aic_perf_config.aic_backend: unknown backend 'bogus'; aiconfigurator-core models: "
         "vllm, sglang, trtllm"),
        (AIC_MODEL, {"aic_tp_size": 0}, ValueError,
         "aic_perf_config.aic_tp_size: must be at least 1, got 0"),
        (AIC_MODEL, {"aic_nextn": 9}, ValueError,
         "aic_perf_config.aic_nextn: must be between 1 and 5, got 9"),
        (AIC_MODEL, {"aic_nextn": 2, "aic_nextn_accept_rates": "0.8,2"}, ValueError,
         "aic_perf_config.aic_nextn_accept_rates: each rate must be a number in [0, 1], got '2'"),
        (AIC_MODEL[:2], {}, TypeError, "AicPerfConfig() missing required argument 'aic_model_path'"),
        (AIC_MODEL, {"aic_tp_size": "2"}, TypeError,
         "argument 'aic_perf_config.aic_tp_size': 'str' object cannot be interpreted as an integer"),
        (AIC_MODEL, {"foo": 1}, TypeError,
         "AicPerfConfig() got an unexpected keyword argument 'foo'"),
    ],
)
def test_aic_perf_config_is_checked_when_built(args, kwargs, error, message):
    with pytest.raises(error) as caught:
        AicPerfConfig(*args, **kwargs)
    assert type(caught.value) is error
    assert str(caught.value) == message


def test_aic_perf_config_object_and_dict_reach_the_same_checks():
    trace = pathlib.Path(__file__).resolve().parents[3] / "tests" / "parity" / "traces"
    as_dict = dict(zip(("aic_backend", "aic_system", "aic_model_path"), AIC_MODEL))
    config = AicPerfConfig(*AIC_MODEL, aic_tp_size=2)
    assert repr(config) == (
        'AicPerfConfig(aic_backend="vllm", aic_system="h200_sxm", '
        'aic_model_path="Qwen/Qwen3-32B", aic_tp_size=2)'
    )
    for given in (config, as_dict):
        with pytest.raises(ValueError, match=r"^aic_perf_config requires router_mode='kv_router'$"):
            run_trace_replay(trace / "kv_queue.jsonl", aic_perf_config=given)
        with pytest.raises(
            ValueError,
            match=r"^aic_perf_config requires router_prefill_load_model='aic' in router_config$",
        ):
            run_trace_replay(trace / "kv_queue.jsonl", aic_perf_config=given,
                             router_mode="kv_router", num_workers=2)
    with pytest.raises(TypeError, match="argument 'aic_perf_config': expected AicPerfConfig"):
        run_trace_replay(trace / "kv_queue.jsonl", aic_perf_config=["vllm"])


def test_aic_perf_config_pickles():
    import pickle

    config = AicPerfConfig(*AIC_MODEL, aic_tp_size=2, aic_gemm_dtype="fp8")
    assert repr(pickle.loads(pickle.dumps(config))) == repr(config)
