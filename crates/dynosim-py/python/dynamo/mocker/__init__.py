"""``dynamo.mocker`` as dynosim provides it: the engine-argument classes of the reference and
its older trace-replay entry point.

``MockEngineArgs`` describes one simulated worker pool (engine type, KV capacity, batching
limits, ...); ``SglangArgs``, ``TrtllmArgs`` and ``ReasoningConfig`` are its sub-settings. They
are checked by the same Rust parser as the ``--extra-engine-args`` JSON of the command line.
Only these exist here: dynosim has no live mocker workers.
"""

from dynosim._dynosim import MockEngineArgs, ReasoningConfig, SglangArgs, TrtllmArgs
from dynosim._dynosim import run_trace_replay as _run_trace_replay

__all__ = [
    "MockEngineArgs",
    "ReasoningConfig",
    "SglangArgs",
    "TrtllmArgs",
    "run_mocker_trace_replay",
]


def run_mocker_trace_replay(
    trace_files,
    extra_engine_args=None,
    router_config=None,
    num_workers=1,
    replay_concurrency=None,
    router_mode="round_robin",
    arrival_speedup_ratio=1.0,
    trace_block_size=None,
    trace_format="mooncake",
    trace_shared_prefix_ratio=0.0,
    trace_num_prefix_groups=0,
    model_name=None,
    sla_ttft_ms=None,
    sla_itl_ms=None,
    sla_e2e_ms=None,
):
    """Offline trace replay of aggregated workers (the reference's older entry point, whose
    arguments may be positional); ``dynamo.replay.run_trace_replay`` does the work."""
    return _run_trace_replay(
        trace_files,
        extra_engine_args=extra_engine_args,
        router_config=router_config,
        num_workers=num_workers,
        replay_concurrency=replay_concurrency,
        replay_mode="offline",
        router_mode=router_mode,
        arrival_speedup_ratio=arrival_speedup_ratio,
        trace_block_size=trace_block_size,
        trace_format=trace_format,
        trace_shared_prefix_ratio=trace_shared_prefix_ratio,
        trace_num_prefix_groups=trace_num_prefix_groups,
        model_name=model_name,
        sla_ttft_ms=sla_ttft_ms,
        sla_itl_ms=sla_itl_ms,
        sla_e2e_ms=sla_e2e_ms,
    )
