"""aiconfigurator's own static estimate for the rows `dynosim validate` modelled: the baseline
that docs/fidelity.md compares dynosim against.

Usage: python bench/aiconfigurator_estimate.py VALIDATE_DIR [VALIDATE_DIR ...]

For each row of VALIDATE_DIR/rows.csv with status ok, asks aiconfigurator's CLI API
(`aiconfigurator.cli.api.cli_estimate`, mode agg) for mean TTFT and TPOT with the engine
configuration dynosim used for that row (read from the row's command: model, system, backend,
TP/attention-DP/MoE widths, GEMM and MoE quantisation), at the row's ISL, OSL and per-rank
batch (concurrency / attention-DP size). Writes VALIDATE_DIR/aiconfigurator.csv (id, the
estimates, their % errors against the measurements, or the error aiconfigurator raised) and
prints median absolute errors of aiconfigurator and of dynosim over the rows both modelled,
overall and by backend and system.

Needs the `aiconfigurator` package (its CLI, not only aiconfigurator-core), e.g. in a venv:
`python -m venv ~/.cache/aiconfigurator-venv && ~/.cache/aiconfigurator-venv/bin/pip install
aiconfigurator==0.12.0`. It is a benchmark, not part of dynosim.
"""

import csv
import json
import logging
import shlex
import statistics
import sys
import warnings
from collections import defaultdict
from pathlib import Path


def engine_args(command):
    words = shlex.split(command)
    return json.loads(words[words.index("--extra-engine-args") + 1])


def estimate(row):
    from aiconfigurator.cli.api import cli_estimate

    engine = engine_args(row["command"])
    dp = int(engine.get("aic_attention_dp_size") or 1)
    kwargs = dict(
        mode="agg",
        backend_name=engine["aic_backend"],
        isl=int(row["isl"]),
        osl=int(row["osl"]),
        batch_size=max(1, int(row["concurrency"]) // dp),
        tp_size=int(engine.get("aic_tp_size") or 1),
        attention_dp_size=dp,
    )
    for key, name in [("aic_moe_tp_size", "moe_tp_size"), ("aic_moe_ep_size", "moe_ep_size")]:
        if engine.get(key):
            kwargs[name] = int(engine[key])
    for key, name in [("aic_gemm_dtype", "gemm_quant_mode"), ("aic_moe_dtype", "moe_quant_mode")]:
        if engine.get(key):
            kwargs[name] = engine[key]
    result = cli_estimate(engine["aic_model_path"], engine["aic_system"], **kwargs)
    return result.ttft, result.tpot


def pct(predicted, measured):
    return (predicted - measured) / measured * 100.0


def main(directories):
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    for directory in directories:
        directory = Path(directory)
        rows = [r for r in csv.DictReader(open(directory / "rows.csv")) if r["status"] == "ok"]
        out_rows = []
        for row in rows:
            record = {"id": row["id"], "backend": row["backend"], "system": row["system"]}
            try:
                ttft, tpot = estimate(row)
                record.update(
                    aic_ttft_ms=ttft,
                    aic_tpot_ms=tpot,
                    aic_ttft_error_pct=pct(ttft, float(row["measured_ttft_ms"])),
                    aic_tpot_error_pct=pct(tpot, float(row["measured_tpot_ms"])),
                    dynosim_ttft_error_pct=float(row["ttft_error_pct"]),
                    dynosim_tpot_error_pct=float(row["tpot_error_pct"]),
                    error="",
                )
            except Exception as error:  # aiconfigurator raises many kinds; each row names its own
                record["error"] = f"{type(error).__name__}: {error}"[:300]
            out_rows.append(record)
        fields = [
            "id", "backend", "system", "aic_ttft_ms", "aic_tpot_ms", "aic_ttft_error_pct",
            "aic_tpot_error_pct", "dynosim_ttft_error_pct", "dynosim_tpot_error_pct", "error",
        ]
        with open(directory / "aiconfigurator.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(out_rows)
        both = [r for r in out_rows if not r["error"]]
        groups = defaultdict(list)
        for r in both:
            groups["all"].append(r)
            groups[f"backend={r['backend']}"].append(r)
            groups[f"system={r['system']}"].append(r)
        print(f"{directory}: {len(both)} of {len(out_rows)} rows estimated by aiconfigurator")
        print(f"{'group':<20} {'rows':>5}  TTFT aic / dynosim   TPOT aic / dynosim  (median abs. %)")
        for name, members in sorted(groups.items()):
            med = lambda key: statistics.median(abs(r[key]) for r in members)
            print(
                f"{name:<20} {len(members):>5}  {med('aic_ttft_error_pct'):6.1f} / "
                f"{med('dynosim_ttft_error_pct'):6.1f}     {med('aic_tpot_error_pct'):6.1f} / "
                f"{med('dynosim_tpot_error_pct'):6.1f}"
            )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
