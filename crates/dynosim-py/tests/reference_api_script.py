"""A user's script written against the reference's public Python API (ai-dynamo 1.4.2).

It uses only what the reference documents: ``MockEngineArgs`` (and ``SglangArgs``) from
``dynamo.mocker``, ``KvRouterConfig`` from ``dynamo.llm``, the two entry points of
``dynamo.replay`` and the helpers of ``dynamo.replay.reporting``. It must run unchanged on the
reference and on dynosim:

    python reference_api_script.py REPO_ROOT > reports.json

prints every scenario's report (and the table of the first one) as JSON. The expected numbers
in ``golden/reference_api.json`` were produced this way by the reference;
``test_reference_api.py`` runs the same scenarios in-process on dynosim and compares.
"""

import json
import sys
import tempfile
from pathlib import Path

from dynamo.llm import KvRouterConfig
from dynamo.mocker import MockEngineArgs, SglangArgs
from dynamo.replay import run_synthetic_trace_replay, run_trace_replay
from dynamo.replay.reporting import format_report_table, write_report_json


def scenarios(root):
    """(name, zero-argument function returning a report) for every scenario."""
    traces = Path(root) / "tests" / "parity" / "traces"
    shared = Path(root).resolve().parent / "shared" / "traces"

    def aggregated_round_robin():
        engine = MockEngineArgs(num_gpu_blocks=300, block_size=32)
        return run_trace_replay(str(traces / "pressure.jsonl"), extra_engine_args=engine)

    def aggregated_round_robin_two_workers():
        engine = MockEngineArgs(block_size=16, num_gpu_blocks=250, preemption_mode="fifo")
        return run_trace_replay(
            [traces / "pressure.jsonl"], extra_engine_args=engine, num_workers=2
        )

    def aggregated_kv_router_queue():
        router = KvRouterConfig(router_queue_threshold=0.1, router_queue_policy="lcfs")
        return run_trace_replay(
            traces / "kv_queue.jsonl",
            extra_engine_args=MockEngineArgs(),
            router_config=router,
            router_mode="kv_router",
            num_workers=2,
        )

    def aggregated_kv_router_from_json():
        router = KvRouterConfig.from_json('{"router_queue_threshold": 0.1}')
        engine = MockEngineArgs.from_json('{"num_gpu_blocks": 16384, "max_num_seqs": 256}')
        return run_trace_replay(
            traces / "kv_queue.jsonl",
            extra_engine_args=engine,
            router_config=router.with_overrides(prefill_load_scale=1.0),
            router_mode="kv_router",
            num_workers=2,
        )

    def aggregated_kv_router_sglang():
        engine = MockEngineArgs(engine_type="sglang", sglang=SglangArgs(chunked_prefill_size=1024))
        return run_trace_replay(
            traces / "kv_sglang.jsonl",
            extra_engine_args=engine,
            router_config=KvRouterConfig(overlap_score_credit=1.5),
            router_mode="kv_router",
            num_workers=4,
        )

    def aggregated_kv_router_policy_file():
        router = KvRouterConfig(router_policy_config=str(traces / "kv_policy.yaml"))
        return run_trace_replay(
            traces / "kv_classes.jsonl",
            router_config=router,
            router_mode="kv_router",
            num_workers=2,
        )

    def disaggregated_round_robin():
        prefill = MockEngineArgs(
            worker_type="prefill", kv_bytes_per_token=131072, kv_transfer_bandwidth=10.0
        )
        decode = MockEngineArgs(worker_type="decode")
        return run_trace_replay(
            shared / "fixtures" / "mooncake_tiny.jsonl",
            prefill_engine_args=prefill,
            decode_engine_args=decode,
            num_prefill_workers=3,
            num_decode_workers=2,
        )

    def disaggregated_kv_router():
        base = MockEngineArgs(num_gpu_blocks=4096)
        prefill = base.with_overrides(worker_type="prefill")
        decode = base.copy()
        decode.worker_type = "decode"
        return run_trace_replay(
            traces / "kv_sparse.jsonl",
            prefill_engine_args=prefill,
            decode_engine_args=decode,
            router_config=KvRouterConfig(),
            router_mode="kv_router",
            num_prefill_workers=2,
            num_decode_workers=2,
        )

    def synthetic_trtllm_overrides():
        engine = MockEngineArgs(engine_type="trtllm").with_overrides(num_gpu_blocks=500)
        return run_synthetic_trace_replay(
            2000, 300, 80, extra_engine_args=engine, replay_concurrency=16
        )

    def synthetic_disaggregated_rate():
        return run_synthetic_trace_replay(
            3000,
            200,
            200,
            prefill_engine_args=MockEngineArgs(worker_type="prefill"),
            decode_engine_args=MockEngineArgs(worker_type="decode"),
            num_prefill_workers=2,
            num_decode_workers=2,
            request_rate=20.0,
        )

    def synthetic_setters():
        engine = MockEngineArgs(num_gpu_blocks=16384)
        engine.num_gpu_blocks = 600
        engine.enable_prefix_caching = False
        return run_synthetic_trace_replay(
            3000, 400, 100, extra_engine_args=engine, replay_concurrency=32
        )

    return [
        ("aggregated_round_robin", aggregated_round_robin),
        ("aggregated_round_robin_two_workers", aggregated_round_robin_two_workers),
        ("aggregated_kv_router_queue", aggregated_kv_router_queue),
        ("aggregated_kv_router_from_json", aggregated_kv_router_from_json),
        ("aggregated_kv_router_sglang", aggregated_kv_router_sglang),
        ("aggregated_kv_router_policy_file", aggregated_kv_router_policy_file),
        ("disaggregated_round_robin", disaggregated_round_robin),
        ("disaggregated_kv_router", disaggregated_kv_router),
        ("synthetic_trtllm_overrides", synthetic_trtllm_overrides),
        ("synthetic_disaggregated_rate", synthetic_disaggregated_rate),
        ("synthetic_setters", synthetic_setters),
    ]


def table_with_fixed_wall_time(report):
    """The report table with ``wall_time_ms`` pinned (it measures the simulator itself)."""
    return format_report_table(dict(report, wall_time_ms=12.5))


def main(root):
    reports = {name: run() for name, run in scenarios(root)}
    first = reports["aggregated_round_robin"]
    with tempfile.TemporaryDirectory() as directory:
        written = write_report_json(first, Path(directory) / "nested" / "report.json")
        saved = written.read_text(encoding="utf-8")
    output = {
        "reports": reports,
        "table": table_with_fixed_wall_time(first),
        "saved_matches_report": json.loads(saved) == first,
        "saved_ends_with_newline": saved.endswith("}\n"),
    }
    json.dump(output, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
