"""Type stubs of ``dynosim._dynosim``, the Rust extension behind ``dynosim``,
``dynamo.replay``, ``dynamo.mocker`` and ``dynamo.llm``."""

import os
from typing import Any, Dict, Iterable, Literal, Mapping, Optional, Protocol, Union

__version__: str

_Path = Union[str, "os.PathLike[str]"]
_Report = Dict[str, Union[int, float]]

class SglangArgs:
    """SGLang scheduler settings for ``MockEngineArgs(sglang=...)``."""

    def __init__(
        self,
        schedule_policy: Optional[str] = None,
        page_size: Optional[int] = None,
        max_prefill_tokens: Optional[int] = None,
        chunked_prefill_size: Optional[int] = None,
        clip_max_new_tokens: Optional[int] = None,
        schedule_conservativeness: Optional[float] = None,
    ) -> None: ...

class TrtllmArgs:
    """TRT-LLM scheduler settings for ``MockEngineArgs(trtllm=...)``."""

    def __init__(self, capacity_scheduler_policy: Optional[str] = None) -> None: ...

class ReasoningConfig:
    """Thinking-token settings for ``MockEngineArgs(reasoning=...)`` (no effect offline)."""

    def __init__(
        self,
        start_thinking_token_id: int,
        end_thinking_token_id: int,
        thinking_ratio: float,
    ) -> None: ...

class MockEngineArgs:
    """Engine arguments of one simulated worker pool, checked by the same parser as the
    ``--extra-engine-args`` JSON. Invalid values raise ``ValueError`` (``TypeError`` for a
    wrong Python type, ``OverflowError`` for an integer out of range) naming the field."""

    def __init__(
        self,
        engine_type: str = "vllm",
        num_gpu_blocks: Optional[int] = None,
        block_size: int = 0,
        max_num_seqs: Optional[int] = 256,
        max_num_batched_tokens: Optional[int] = 8192,
        enable_prefix_caching: bool = True,
        enable_chunked_prefill: bool = True,
        speedup_ratio: float = 1.0,
        decode_speedup_ratio: float = 1.0,
        dp_size: int = 1,
        startup_time: Optional[float] = None,
        worker_type: str = "aggregated",
        planner_profile_data: Optional[_Path] = None,
        aic_backend: Optional[str] = None,
        aic_system: Optional[str] = None,
        aic_backend_version: Optional[str] = None,
        aic_tp_size: Optional[int] = None,
        aic_model_path: Optional[str] = None,
        aic_moe_tp_size: Optional[int] = None,
        aic_moe_ep_size: Optional[int] = None,
        aic_attention_dp_size: Optional[int] = None,
        aic_nextn: Optional[int] = None,
        aic_nextn_accept_rates: Optional[str] = None,
        aic_mtp_seed: int = 42,
        aic_gemm_dtype: Optional[str] = None,
        aic_moe_dtype: Optional[str] = None,
        aic_fmha_dtype: Optional[str] = None,
        aic_kv_cache_dtype: Optional[str] = None,
        aic_comm_dtype: Optional[str] = None,
        gpu_memory_utilization: Optional[float] = None,
        mem_fraction_static: Optional[float] = None,
        free_gpu_memory_fraction: Optional[float] = None,
        enable_local_indexer: bool = False,
        bootstrap_port: Optional[int] = None,
        handoff_session_timeout_ms: int = 300000,
        kv_bytes_per_token: Optional[int] = None,
        kv_transfer_bandwidth: Optional[float] = None,
        kv_transfer_timing_mode: str = "full_prompt",
        reasoning: Optional[ReasoningConfig] = None,
        response_replay_trace_path: Optional[_Path] = None,
        zmq_kv_events_port: Optional[int] = None,
        zmq_replay_port: Optional[int] = None,
        preemption_mode: str = "lifo",
        router_queue_policy: Optional[str] = None,
        sglang: Optional[SglangArgs] = None,
        trtllm: Optional[TrtllmArgs] = None,
        num_g2_blocks: Optional[int] = None,
        num_g3_blocks: Optional[int] = None,
        offload_batch_size: Optional[int] = None,
        bandwidth_g1_to_g2_gbps: Optional[float] = None,
        bandwidth_g2_to_g1_gbps: Optional[float] = None,
        bandwidth_g2_to_g3_gbps: Optional[float] = None,
        bandwidth_g3_to_g2_gbps: Optional[float] = None,
        enable_g4_storage: bool = False,
        bandwidth_g2_to_g4_gbps: Optional[float] = None,
        bandwidth_g4_to_g2_gbps: Optional[float] = None,
        max_model_len: Optional[int] = None,
        g1_backend: Optional[str] = None,
    ) -> None: ...
    @staticmethod
    def from_json(config_json: str) -> "MockEngineArgs": ...
    def copy(self) -> "MockEngineArgs": ...
    def __copy__(self) -> "MockEngineArgs": ...
    def __deepcopy__(self, memo: Any) -> "MockEngineArgs": ...
    def with_overrides(
        self,
        bootstrap_port: Optional[int] = None,
        zmq_kv_events_port: Optional[int] = None,
        zmq_replay_port: Optional[int] = None,
        kv_bytes_per_token: Optional[int] = None,
        num_gpu_blocks: Optional[int] = None,
        aic_backend: Optional[str] = None,
        aic_system: Optional[str] = None,
        aic_backend_version: Optional[str] = None,
        aic_tp_size: Optional[int] = None,
        aic_model_path: Optional[str] = None,
        aic_moe_tp_size: Optional[int] = None,
        aic_moe_ep_size: Optional[int] = None,
        aic_attention_dp_size: Optional[int] = None,
        aic_nextn: Optional[int] = None,
        aic_nextn_accept_rates: Optional[str] = None,
        aic_mtp_seed: Optional[int] = None,
        aic_gemm_dtype: Optional[str] = None,
        aic_moe_dtype: Optional[str] = None,
        aic_fmha_dtype: Optional[str] = None,
        aic_kv_cache_dtype: Optional[str] = None,
        aic_comm_dtype: Optional[str] = None,
        gpu_memory_utilization: Optional[float] = None,
        mem_fraction_static: Optional[float] = None,
        free_gpu_memory_fraction: Optional[float] = None,
        enable_prefix_caching: Optional[bool] = None,
        worker_type: Optional[str] = None,
    ) -> "MockEngineArgs": ...
    def is_prefill(self) -> bool: ...
    def is_decode(self) -> bool: ...
    # Read-only properties.
    @property
    def engine_type(self) -> str: ...
    @property
    def block_size(self) -> int: ...
    @property
    def max_num_seqs(self) -> Optional[int]: ...
    @property
    def max_num_batched_tokens(self) -> Optional[int]: ...
    @property
    def max_model_len(self) -> Optional[int]: ...
    @property
    def enable_chunked_prefill(self) -> bool: ...
    @property
    def speedup_ratio(self) -> float: ...
    @property
    def decode_speedup_ratio(self) -> float: ...
    @property
    def dp_size(self) -> int: ...
    @property
    def startup_time(self) -> Optional[float]: ...
    @property
    def planner_profile_data(self) -> Optional[str]: ...
    @property
    def g1_backend(self) -> str: ...
    @property
    def enable_local_indexer(self) -> bool: ...
    @property
    def bootstrap_port(self) -> Optional[int]: ...
    @property
    def handoff_session_timeout_ms(self) -> int: ...
    @property
    def kv_bytes_per_token(self) -> Optional[int]: ...
    @property
    def kv_transfer_bandwidth(self) -> Optional[float]: ...
    @property
    def kv_transfer_timing_mode(self) -> str: ...
    @property
    def reasoning(self) -> Optional[ReasoningConfig]: ...
    @property
    def response_replay_trace_path(self) -> Optional[str]: ...
    @property
    def zmq_kv_events_port(self) -> Optional[int]: ...
    @property
    def zmq_replay_port(self) -> Optional[int]: ...
    @property
    def preemption_mode(self) -> str: ...
    @property
    def router_queue_policy(self) -> Optional[str]: ...
    @property
    def sglang(self) -> Optional[SglangArgs]: ...
    @property
    def trtllm(self) -> Optional[TrtllmArgs]: ...
    @property
    def num_g2_blocks(self) -> Optional[int]: ...
    @property
    def num_g3_blocks(self) -> Optional[int]: ...
    @property
    def offload_batch_size(self) -> Optional[int]: ...
    @property
    def bandwidth_g1_to_g2_gbps(self) -> Optional[float]: ...
    @property
    def bandwidth_g2_to_g1_gbps(self) -> Optional[float]: ...
    @property
    def bandwidth_g2_to_g3_gbps(self) -> Optional[float]: ...
    @property
    def bandwidth_g3_to_g2_gbps(self) -> Optional[float]: ...
    @property
    def enable_g4_storage(self) -> bool: ...
    @property
    def bandwidth_g2_to_g4_gbps(self) -> Optional[float]: ...
    @property
    def bandwidth_g4_to_g2_gbps(self) -> Optional[float]: ...
    # Properties with validating setters.
    @property
    def num_gpu_blocks(self) -> int: ...
    @num_gpu_blocks.setter
    def num_gpu_blocks(self, value: int) -> None: ...
    @property
    def enable_prefix_caching(self) -> bool: ...
    @enable_prefix_caching.setter
    def enable_prefix_caching(self, value: bool) -> None: ...
    @property
    def worker_type(self) -> str: ...
    @worker_type.setter
    def worker_type(self, value: str) -> None: ...
    @property
    def aic_backend(self) -> Optional[str]: ...
    @aic_backend.setter
    def aic_backend(self, value: Optional[str]) -> None: ...
    @property
    def aic_system(self) -> Optional[str]: ...
    @aic_system.setter
    def aic_system(self, value: Optional[str]) -> None: ...
    @property
    def aic_backend_version(self) -> Optional[str]: ...
    @aic_backend_version.setter
    def aic_backend_version(self, value: Optional[str]) -> None: ...
    @property
    def aic_tp_size(self) -> Optional[int]: ...
    @aic_tp_size.setter
    def aic_tp_size(self, value: Optional[int]) -> None: ...
    @property
    def aic_model_path(self) -> Optional[str]: ...
    @aic_model_path.setter
    def aic_model_path(self, value: Optional[str]) -> None: ...
    @property
    def aic_moe_tp_size(self) -> Optional[int]: ...
    @aic_moe_tp_size.setter
    def aic_moe_tp_size(self, value: Optional[int]) -> None: ...
    @property
    def aic_moe_ep_size(self) -> Optional[int]: ...
    @aic_moe_ep_size.setter
    def aic_moe_ep_size(self, value: Optional[int]) -> None: ...
    @property
    def aic_attention_dp_size(self) -> Optional[int]: ...
    @aic_attention_dp_size.setter
    def aic_attention_dp_size(self, value: Optional[int]) -> None: ...
    @property
    def aic_nextn(self) -> Optional[int]: ...
    @aic_nextn.setter
    def aic_nextn(self, value: Optional[int]) -> None: ...
    @property
    def aic_nextn_accept_rates(self) -> Optional[str]: ...
    @aic_nextn_accept_rates.setter
    def aic_nextn_accept_rates(self, value: Optional[str]) -> None: ...
    @property
    def aic_mtp_seed(self) -> int: ...
    @aic_mtp_seed.setter
    def aic_mtp_seed(self, value: int) -> None: ...
    @property
    def aic_gemm_dtype(self) -> Optional[str]: ...
    @aic_gemm_dtype.setter
    def aic_gemm_dtype(self, value: Optional[str]) -> None: ...
    @property
    def aic_moe_dtype(self) -> Optional[str]: ...
    @aic_moe_dtype.setter
    def aic_moe_dtype(self, value: Optional[str]) -> None: ...
    @property
    def aic_fmha_dtype(self) -> Optional[str]: ...
    @aic_fmha_dtype.setter
    def aic_fmha_dtype(self, value: Optional[str]) -> None: ...
    @property
    def aic_kv_cache_dtype(self) -> Optional[str]: ...
    @aic_kv_cache_dtype.setter
    def aic_kv_cache_dtype(self, value: Optional[str]) -> None: ...
    @property
    def aic_comm_dtype(self) -> Optional[str]: ...
    @aic_comm_dtype.setter
    def aic_comm_dtype(self, value: Optional[str]) -> None: ...
    @property
    def gpu_memory_utilization(self) -> Optional[float]: ...
    @gpu_memory_utilization.setter
    def gpu_memory_utilization(self, value: Optional[float]) -> None: ...
    @property
    def mem_fraction_static(self) -> Optional[float]: ...
    @mem_fraction_static.setter
    def mem_fraction_static(self, value: Optional[float]) -> None: ...
    @property
    def free_gpu_memory_fraction(self) -> Optional[float]: ...
    @free_gpu_memory_fraction.setter
    def free_gpu_memory_fraction(self, value: Optional[float]) -> None: ...

class KvRouterConfig:
    """Settings of the KV-aware router, checked by the same parser as the ``--router-config``
    JSON (a ``router_policy_config`` YAML file is read and checked when the object is built)."""

    def __init__(
        self,
        overlap_score_weight: Optional[float] = None,
        host_cache_hit_weight: float = 0.75,
        disk_cache_hit_weight: float = 0.25,
        router_temperature: float = 0.0,
        use_kv_events: bool = True,
        *,
        router_replica_sync: bool = False,
        router_track_active_blocks: bool = True,
        router_track_output_blocks: bool = False,
        router_assume_kv_reuse: bool = True,
        router_track_prefill_tokens: bool = True,
        router_prefill_load_model: str = "none",
        router_ttl_secs: float = 120.0,
        router_queue_threshold: Optional[float] = None,
        router_event_threads: int = 4,
        router_queue_policy: str = "fcfs",
        use_remote_indexer: bool = False,
        serve_indexer: bool = False,
        shared_cache_multiplier: float = 0.0,
        shared_cache_type: str = "none",
        router_predicted_ttl_secs: Optional[float] = None,
        overlap_score_credit: float = 1.0,
        overlap_score_credit_decay: float = 0.0,
        prefill_load_scale: float = 1.0,
        decode_active_request_weight: float = 0.0,
        router_policy_config: Optional[str] = None,
        router_tracking_hash: Literal["public-xxh3-v1", "keyed-xxh3-v1"] = "public-xxh3-v1",
        router_tracking_key_file: Optional[_Path] = None,
        router_tracking_key_id: Optional[str] = None,
    ) -> None: ...
    @staticmethod
    def from_json(config_json: str) -> "KvRouterConfig": ...
    def copy(self) -> "KvRouterConfig": ...
    def __copy__(self) -> "KvRouterConfig": ...
    def __deepcopy__(self, memo: Any) -> "KvRouterConfig": ...
    def with_overrides(
        self,
        overlap_score_weight: Optional[float] = None,
        *,
        overlap_score_credit: Optional[float] = None,
        overlap_score_credit_decay: Optional[float] = None,
        prefill_load_scale: Optional[float] = None,
        decode_active_request_weight: Optional[float] = None,
    ) -> "KvRouterConfig": ...
    @property
    def overlap_score_credit(self) -> float: ...
    @overlap_score_credit.setter
    def overlap_score_credit(self, value: float) -> None: ...
    @property
    def overlap_score_credit_decay(self) -> float: ...
    @overlap_score_credit_decay.setter
    def overlap_score_credit_decay(self, value: float) -> None: ...
    @property
    def overlap_score_weight(self) -> float: ...
    @overlap_score_weight.setter
    def overlap_score_weight(self, value: float) -> None: ...
    @property
    def prefill_load_scale(self) -> float: ...
    @prefill_load_scale.setter
    def prefill_load_scale(self, value: float) -> None: ...
    @property
    def decode_active_request_weight(self) -> float: ...
    @decode_active_request_weight.setter
    def decode_active_request_weight(self, value: float) -> None: ...
    @property
    def router_temperature(self) -> float: ...

class AicPerfConfig:
    """The AIC performance-model settings of a replay (the ``--aic-*`` flags), checked as those
    flags are when built."""

    def __init__(
        self,
        aic_backend: str,
        aic_system: str,
        aic_model_path: str,
        aic_tp_size: int = 1,
        aic_backend_version: Optional[str] = None,
        aic_moe_tp_size: Optional[int] = None,
        aic_moe_ep_size: Optional[int] = None,
        aic_attention_dp_size: Optional[int] = None,
        aic_nextn: Optional[int] = None,
        aic_nextn_accept_rates: Optional[str] = None,
        aic_gemm_dtype: Optional[str] = None,
        aic_moe_dtype: Optional[str] = None,
        aic_fmha_dtype: Optional[str] = None,
        aic_kv_cache_dtype: Optional[str] = None,
        aic_comm_dtype: Optional[str] = None,
    ) -> None: ...

_EngineArgs = Union[MockEngineArgs, Mapping[str, Any], str]
_RouterConfig = Union[KvRouterConfig, Mapping[str, Any], str]
_PlannerConfig = Union[Mapping[str, Any], str]

class _ScalingPolicy(Protocol):
    """A planner the loop calls at scaling ticks (the reference's two methods)."""

    def initial_tick_ms(self) -> float: ...
    def on_tick(self, snapshot: Dict[str, Any]) -> Mapping[str, Any]: ...

# The two replay functions return the report dict, or with ``planner_config`` or a
# ``scaling_policy`` a ``dynosim.planner.ReplayPlannerReport`` (or the policy's own
# ``finalize(trace_report)`` result).
def run_trace_replay(
    trace_files: Union[_Path, Iterable[_Path]],
    *,
    extra_engine_args: Optional[_EngineArgs] = None,
    prefill_engine_args: Optional[_EngineArgs] = None,
    decode_engine_args: Optional[_EngineArgs] = None,
    router_config: Optional[_RouterConfig] = None,
    aic_perf_config: Optional[Union[AicPerfConfig, Mapping[str, Any]]] = None,
    num_workers: int = 1,
    num_prefill_workers: int = 1,
    num_decode_workers: int = 1,
    replay_concurrency: Optional[int] = None,
    replay_mode: str = "offline",
    router_mode: str = "round_robin",
    arrival_speedup_ratio: float = 1.0,
    trace_block_size: Optional[int] = None,
    trace_format: str = "mooncake",
    trace_shared_prefix_ratio: float = 0.0,
    trace_num_prefix_groups: int = 0,
    report_jsonl_path: Optional[_Path] = None,
    max_sim_time_ms: Optional[float] = None,
    model_name: Optional[str] = None,
    sla_ttft_ms: Optional[float] = None,
    sla_itl_ms: Optional[float] = None,
    sla_e2e_ms: Optional[float] = None,
    planner_config: Optional[_PlannerConfig] = None,
    benchmark_granularity: int = 8,
    router_seed: int = 0,
    aiperf_dir: Optional[_Path] = None,
    html_report: Optional[_Path] = None,
    scaling_policy: Optional[_ScalingPolicy] = None,
) -> Any: ...
def run_synthetic_trace_replay(
    input_tokens: int,
    output_tokens: int,
    request_count: int,
    *,
    extra_engine_args: Optional[_EngineArgs] = None,
    prefill_engine_args: Optional[_EngineArgs] = None,
    decode_engine_args: Optional[_EngineArgs] = None,
    router_config: Optional[_RouterConfig] = None,
    aic_perf_config: Optional[Union[AicPerfConfig, Mapping[str, Any]]] = None,
    num_workers: int = 1,
    num_prefill_workers: int = 1,
    num_decode_workers: int = 1,
    replay_concurrency: Optional[int] = None,
    replay_mode: str = "offline",
    router_mode: str = "round_robin",
    arrival_speedup_ratio: float = 1.0,
    request_rate: Optional[float] = None,
    arrival_interval_ms: Optional[float] = None,
    arrival_seed: int = 42,
    turns_per_session: int = 1,
    shared_prefix_ratio: float = 0.0,
    num_prefix_groups: int = 0,
    inter_turn_delay_ms: float = 0.0,
    input_tokens_stddev: Optional[float] = None,
    output_tokens_stddev: Optional[float] = None,
    random_range_ratio: Optional[float] = None,
    length_seed: Optional[int] = None,
    model_name: Optional[str] = None,
    sla_ttft_ms: Optional[float] = None,
    sla_itl_ms: Optional[float] = None,
    sla_e2e_ms: Optional[float] = None,
    planner_config: Optional[_PlannerConfig] = None,
    benchmark_granularity: int = 8,
    router_seed: int = 0,
    aiperf_dir: Optional[_Path] = None,
    html_report: Optional[_Path] = None,
    scaling_policy: Optional[_ScalingPolicy] = None,
) -> Any: ...
def sweep(
    spec: Union[str, os.PathLike[str], Mapping[str, Any]],
    *,
    out: Union[str, os.PathLike[str]],
    jobs: Optional[int] = None,
) -> Dict[str, Any]: ...
