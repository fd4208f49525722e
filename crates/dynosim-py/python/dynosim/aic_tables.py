"""Builds dynosim's AIC (aiconfigurator-core) timing tables for one engine configuration.

dynosim never calls aiconfigurator-core during a simulation. Before a run it starts this module
once per engine configuration (``python -m dynosim.aic_tables`` or the same source fed to
``python -``), reads the JSON it prints, and caches it on disk. The tables reproduce the
package's two calls the engines make:

* ``predict_prefill_latency(n, e + p, p)`` as ``G[n*e] + L[n] + A(n, e, p)``, where the package's
  per-operation breakdown shows which operations depend only on the batch's new tokens
  ``T = n*e`` (GEMMs, norms, MoE, all-reduce: tabulated exactly for every T), which only on the
  batch size ``n`` (the logits GEMM: exact for every n), and the rest (attention-like operations).
  The operations are classified by evaluating them, not by name, so MoE and MLA models split too.
  The rest is not smooth in the prompt length ``s = e + p``: the package's attention estimate
  jumps by up to 10% where it leaves the sequence lengths its database measured (at 3072, 6144
  or 16384 depending on the batch size) and bends elsewhere. Those features sit at fixed ``s``,
  which no grid over ``(e, p)`` can follow, so the rest is factored as
  ``A(n, e, p) = U(n, e + p) * R(n, e, p)``: ``U(n, s) = A(n, s, 0)`` is tabulated for every
  ``n`` over a dense ``s`` axis holding both sides of each measured length, and the ratio ``R``,
  smooth, on a grid over ``n``, ``e`` and ``p``; both are interpolated in log space.
* ``predict_decode_latency(b, c, 2)`` as an exact row for every batch size ``b`` and a grid of
  context lengths ``c``, interpolated linearly in ``c``.

It also returns ``estimate_num_gpu_blocks`` per rank when asked, with the reference's arguments.

Protocol: one JSON request on stdin, one JSON document on stdout. Failures print one line on
stderr and exit with 3 (the request names something the package does not have: a usage error),
4 (aiconfigurator-core is not installed) or 1 (anything else). ``--version`` prints the installed
package version without importing it.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import os
import sys

FORMAT = 2
PACKAGE = "aiconfigurator-core"
EXIT_USAGE = 3
EXIT_MISSING = 4

QUANT_FIELDS = (
    ("gemm_dtype", "gemm_quant_mode", "GEMMQuantMode"),
    ("moe_dtype", "moe_quant_mode", "MoEQuantMode"),
    ("fmha_dtype", "fmha_quant_mode", "FMHAQuantMode"),
    ("kv_cache_dtype", "kvcache_quant_mode", "KVCacheQuantMode"),
    ("comm_dtype", "comm_quant_mode", "CommQuantMode"),
)

# Memory-fraction knob per backend for the KV-capacity estimate, with the reference's defaults.
MEMORY_FRACTION = {
    "vllm": ("of_total", "gpu_memory_utilization", 0.9),
    "sglang": ("of_total", "mem_fraction_static", 0.88),
    "trtllm": ("of_free", "free_gpu_memory_fraction", 0.9),
}


class UsageError(Exception):
    pass


def package_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def log_grid(lo: int, hi: int, count: int) -> list[int]:
    """About ``count`` distinct integers from lo to hi inclusive, evenly spaced in log."""
    if hi <= lo:
        return [lo]
    values = {lo, hi}
    for i in range(count):
        values.add(int(round(math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * i / (count - 1)))))
    return sorted(values)


def log1p_grid(hi: int, count: int) -> list[int]:
    """Integers from 0 to hi inclusive, evenly spaced in log(1 + x)."""
    values = {0, hi}
    for i in range(count):
        values.add(int(round(math.expm1(math.log1p(hi) * i / (count - 1)))))
    return sorted(values)


# Sequence lengths the perf database measures attention at; its estimate can jump between one
# of them and the next integer, so the prompt-length axis holds each with both neighbours.
ATTENTION_LENGTHS = (16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 10240,
                     12288, 16384, 20480, 24576, 32768, 49152, 65536, 98304, 131072)


def sequence_grid(hi: int, count: int) -> list[int]:
    """Prompt lengths 1..hi: ``count`` log-spaced, plus each measured length with its neighbours."""
    values = set(log_grid(1, hi, count))
    values |= {x for length in ATTENTION_LENGTHS for x in (length - 1, length, length + 1) if 1 <= x < hi}
    return sorted(values)


def interpolate_log(axis, values, x):
    """Linear in (ln x, ln value) between the axis points around x, the end segments extended:
    exactly what dynosim's lookup computes."""
    i = min(max(bisect.bisect_right(axis, x) - 1, 0), len(axis) - 2)
    a, b = math.log(axis[i]), math.log(axis[i + 1])
    w = (math.log(x) - a) / (b - a)
    return math.exp(math.log(values[i]) * (1.0 - w) + math.log(values[i + 1]) * w)


def batch_grid(hi: int) -> list[int]:
    """Every batch size to 16, then steps widening with the size."""
    values = set(range(1, min(hi, 16) + 1))
    n = 16
    while n < hi:
        n += 2 if n < 64 else (8 if n < 128 else (16 if n < 256 else 64))
        values.add(min(n, hi))
    values.add(hi)
    return sorted(values)


def normalize_quant(value):
    if value is None:
        return None
    value = value.strip()
    if not value or value.lower() in {"auto", "none", "null"}:
        return None
    return "int4_wo" if value == "int4" else value


def check_request(request, common, perf_database):
    system = request["system"]
    backend = request["backend"]
    supported = perf_database.get_supported_databases()
    if system not in supported:
        raise UsageError(f"aic_system {system!r} is not in {PACKAGE}; it has: {', '.join(sorted(supported))}")
    backends = supported[system]
    if backend not in backends:
        raise UsageError(
            f"aic_backend {backend!r} has no data for {system} in {PACKAGE}; it has: {', '.join(sorted(backends))}"
        )
    versions = sorted(backends[backend])
    slots = perf_database.get_version_slots(system, backend) or {}
    requested = request.get("version") or "current"
    try:
        version = perf_database.resolve_query_version(system, backend, requested)
    except ValueError:
        version = None
    if version is None or version not in versions:
        listed = ", ".join(versions + [f"{alias} (= {v})" for alias, v in sorted(slots.items())])
        raise UsageError(
            f"aic_backend_version {requested!r} is not in {PACKAGE} for {backend} on {system}; it has: {listed}"
        )
    model = request["model"]
    if os.path.isdir(model):
        if not os.path.isfile(os.path.join(model, "config.json")):
            raise UsageError(f"aic_model_path {model!r} is a directory without config.json")
    elif model not in common.DefaultHFModels:
        raise UsageError(
            f"aic_model_path {model!r} is neither a model bundled with {PACKAGE} nor a local directory "
            f"holding config.json (dynosim does not download model configs); bundled models: "
            + ", ".join(sorted(common.DefaultHFModels))
        )
    quant = {}
    for field, kwarg, enum_name in QUANT_FIELDS:
        value = normalize_quant(request.get(field))
        if value is None:
            continue
        enum_cls = getattr(common, enum_name)
        if value not in enum_cls.__members__:
            raise UsageError(f"aic_{field} {request.get(field)!r} is not one of: {', '.join(enum_cls.__members__)}")
        quant[kwarg] = value
    return version, quant


def resolve_context_fmha(request, quant, version, perf_database):
    """The attention (FMHA) mode of the context phase, chosen as aiconfigurator's CLI chooses it
    before building a model: when the checkpoint implies fp8 attention but the perf database has
    no fp8 context-attention data for this system, backend and version (DeepSeek-R1's MLA on
    h200/b200 with SGLang or TRT-LLM), it uses the bfloat16 data; an explicit ``fmha_dtype``
    stays, and fp8 without data is a usage error. Updates ``quant`` in place."""
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import resolve_context_fmha_by_data

    shape = shape_kwargs(request)
    model_config = build_model_config(
        tp_size=shape["tp_size"],
        pp_size=1,
        attention_dp_size=shape["attention_dp_size"],
        moe_tp_size=shape["moe_tp_size"] if shape["moe_tp_size"] is not None else 1,
        moe_ep_size=shape["moe_ep_size"] if shape["moe_ep_size"] is not None else 1,
        **quant,
    )
    database = perf_database.get_database(request["system"], request["backend"], version)
    if database is None:
        return
    try:
        resolve_context_fmha_by_data(
            model_config, request["model"], database, request["backend"], is_context_role=True
        )
    except ValueError:
        raise UsageError(
            f"aic_fmha_dtype {request.get('fmha_dtype')!r}: {PACKAGE} has no fp8 context-attention "
            f"data for {request['backend']} {version} on {request['system']}; give bfloat16, or "
            "leave aic_fmha_dtype unset to use the data it has"
        ) from None
    if model_config.fmha_quant_mode is not None:
        quant["fmha_quant_mode"] = model_config.fmha_quant_mode.name


def shape_kwargs(request):
    return dict(
        tp_size=int(request.get("tp_size") or 1),
        attention_dp_size=int(request.get("attention_dp_size") or 1),
        moe_tp_size=request.get("moe_tp_size"),
        moe_ep_size=request.get("moe_ep_size"),
    )


def classify_ops(engine, probes):
    """Names of the prefill operations that depend only on T = n*e, and only on n."""

    def per_op(n, e, p):
        ctx, _ = engine.run_static_per_op(batch_size=n, isl=e + p, osl=2, prefix=p, mode="static_ctx")
        return {name: ms for name, ms, *_ in ctx}

    def same(a, b):
        return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))

    token_only, batch_only = None, None
    for (n1, e1, p1), (n2, e2, p2) in probes["same_tokens"]:
        a, b = per_op(n1, e1, p1), per_op(n2, e2, p2)
        names = {k for k in a if same(a[k], b[k])}
        token_only = names if token_only is None else token_only & names
    for (n1, e1, p1), (n2, e2, p2) in probes["same_batch"]:
        a, b = per_op(n1, e1, p1), per_op(n2, e2, p2)
        names = {k for k in a if same(a[k], b[k])}
        batch_only = names if batch_only is None else batch_only & names
    # An operation constant everywhere (zero all-reduce at TP 1) counts as a token operation.
    batch_only = batch_only - token_only
    return per_op, token_only, batch_only


def build(request):
    logging.disable(logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from aiconfigurator_core.sdk import common, perf_database
        from aiconfigurator_core.sdk.engine import EngineHandle, compile_engine
        from aiconfigurator_core.sdk.memory import estimate_num_gpu_blocks
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("aiconfigurator_core"):
            print(f"{PACKAGE} is not installed for {sys.executable}", file=sys.stderr)
            sys.exit(EXIT_MISSING)
        raise

    version, quant = check_request(request, common, perf_database)
    resolve_context_fmha(request, quant, version, perf_database)
    model, system, backend = request["model"], request["system"], request["backend"]
    shape = shape_kwargs(request)
    nextn = int(request.get("nextn") or 0)

    result = {
        "format": FORMAT,
        "package_version": package_version(),
        "model": model,
        "system": system,
        "backend": backend,
        "version": version,
        "num_gpu_blocks": None,
    }

    estimate = request.get("estimate_blocks")
    if estimate is not None:
        kind, knob, default = MEMORY_FRACTION[backend]
        value = estimate.get(knob)
        result["num_gpu_blocks"] = int(
            estimate_num_gpu_blocks(
                model,
                system,
                backend,
                backend_version=version,
                scheduler_block_size=int(estimate["block_size"]),
                max_num_tokens=int(estimate["max_num_batched_tokens"]),
                max_batch_size=1,
                memory_fraction_kind=kind,
                memory_fraction_value=float(default if value is None else value),
                **shape,
                **quant,
            )
        )

    spec = compile_engine(model, system, backend, version, nextn=nextn, **shape, **quant)
    engine = EngineHandle(spec)

    max_batch = int(request["max_batch"])
    max_tokens = int(request["max_tokens"])
    max_context = int(request["max_context"])

    # Prefill: classify the operations, then tabulate each class.
    probes = {
        "same_tokens": [((1, 960, 0), (4, 240, 700)), ((2, 512, 0), (8, 128, 3000)), ((3, 100, 0), (1, 300, 50))],
        "same_batch": [((2, 64, 0), (2, 3000, 900)), ((5, 10, 0), (5, 700, 20000))],
    }
    per_op, token_only, batch_only = classify_ops(engine, probes)

    def part(ops, names):
        return math.fsum(ms for name, ms in ops.items() if name in names)

    def rest_of(n, e, p):
        ops = per_op(n, e, p)
        return math.fsum(ms for name, ms in ops.items() if name not in token_only and name not in batch_only)

    tokens = [part(per_op(1, t, 0), token_only) for t in range(1, max_tokens + 1)]
    batch = [part(per_op(n, 1, 0), batch_only) for n in range(1, max_batch + 1)]
    a_n = batch_grid(max_batch)
    a_e = log_grid(1, max_tokens, 56)
    a_p = log1p_grid(max_context, 40)
    # U(n, s) = A(n, s, 0) for every batch size over prompt lengths to the largest grid point.
    u_s = sequence_grid(max_tokens + max_context, 192)
    unprefixed = [[rest_of(n, s, 0) for s in u_s] for n in range(1, max_batch + 1)]
    rest = [rest_of(n, e, p) for n in a_n for e in a_e for p in a_p]
    factored = all(v > 0 for row in unprefixed for v in row) and all(v > 0 for v in rest)
    if factored:
        # The grid holds R = A / U, U interpolated as the lookup will: exact on grid points.
        rest = [
            rest[(i * len(a_e) + j) * len(a_p) + k] / interpolate_log(u_s, unprefixed[n - 1], e + p)
            for i, n in enumerate(a_n) for j, e in enumerate(a_e) for k, p in enumerate(a_p)
        ]
    rest_positive = all(v > 0 for v in rest)

    # Decode: an exact row per batch size over a context grid.
    d_c = log_grid(1, max_context, 96)
    decode = [engine.predict_decode_latency(b, c, 2) for b in range(1, max_batch + 1) for c in d_c]

    result["prefill"] = {
        "tokens_ms": tokens,
        "batch_ms": batch,
        "rest": {"n": a_n, "e": a_e, "p": a_p, "ms": rest, "log": rest_positive},
        "rest_unprefixed": {"sequence": u_s, "ms": [v for row in unprefixed for v in row]} if factored else None,
    }
    result["decode"] = {"context": d_c, "ms": decode}
    return result


def sample(request):
    """The package's direct answers at given points (``prefill_points`` as [n, e, p],
    ``decode_points`` as [b, c]) or at ``points`` random ones, to check the tables against."""
    import random

    logging.disable(logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from aiconfigurator_core.sdk import common, perf_database
    from aiconfigurator_core.sdk.engine import EngineHandle, compile_engine

    version, quant = check_request(request, common, perf_database)
    resolve_context_fmha(request, quant, version, perf_database)
    spec = compile_engine(
        request["model"], request["system"], request["backend"], version,
        nextn=int(request.get("nextn") or 0), **shape_kwargs(request), **quant,
    )
    engine = EngineHandle(spec)
    if "prefill_points" in request or "decode_points" in request:
        return {
            "prefill": [[n, e, p, engine.predict_prefill_latency(n, e + p, p)] for n, e, p in request.get("prefill_points", [])],
            "decode": [[b, c, engine.predict_decode_latency(b, c, 2)] for b, c in request.get("decode_points", [])],
        }
    rng = random.Random(int(request.get("seed", 0)))
    count = int(request["points"])
    max_batch, max_tokens, max_context = int(request["max_batch"]), int(request["max_tokens"]), int(request["max_context"])
    prefill, decode = [], []
    while len(prefill) < count:
        n = rng.randint(1, min(max_batch, 64))
        e = rng.randint(1, max_tokens // n)
        p = 0 if rng.random() < 0.4 else rng.randint(0, max_context - e)
        prefill.append([n, e, p, engine.predict_prefill_latency(n, e + p, p)])
    while len(decode) < count:
        b = rng.randint(1, max_batch)
        c = rng.randint(1, max_context)
        decode.append([b, c, engine.predict_decode_latency(b, c, 2)])
    return {"prefill": prefill, "decode": decode}


def main(argv):
    if argv[1:] == ["--version"]:
        version = package_version()
        if version is None:
            print(f"{PACKAGE} is not installed for {sys.executable}", file=sys.stderr)
            return EXIT_MISSING
        print(version)
        return 0
    try:
        request = json.load(sys.stdin)
        output = sample(request) if argv[1:] == ["--sample"] else build(request)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # one line, never a traceback: the caller reports it
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
        print(message, file=sys.stderr)
        return 1
    json.dump(output, sys.stdout, separators=(",", ":"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
