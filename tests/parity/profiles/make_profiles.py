#!/usr/bin/env python3
"""Writes the small planner-profile NPZ tables used by the parity cases and tests.

Run from anywhere with a Python that has numpy (the reference environment has one):
    python3 tests/parity/profiles/make_profiles.py
The tables are made up (smooth, non-linear, deliberately coarse) so that interpolation between
grid points and extrapolation beyond them both show in the replays.
"""
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def write(name, prefill_isl, prefill_ttft_ms, active, context, itl, compressed=False):
    save = np.savez_compressed if compressed else np.savez
    save(
        HERE / name,
        prefill_isl=np.asarray(prefill_isl, dtype=np.float64),
        prefill_ttft_ms=np.asarray(prefill_ttft_ms, dtype=np.float64),
        decode_active_kv_tokens=np.asarray(active, dtype=np.float64),
        decode_context_length=np.asarray(context, dtype=np.float64),
        decode_itl=np.asarray(itl, dtype=np.float64),
    )


def main():
    # A mid-size dense model: prefill grows super-linearly; prompts of a full 8192-token chunk
    # lie beyond the last point (extrapolated).
    isl = [64, 256, 1024, 2048, 4096]
    ttft = [9.5 + 0.011 * x + 6.0e-7 * x * x for x in isl]
    active = [0, 16384, 65536, 262144, 1048576]
    context = [128, 1024, 4096, 16384]
    itl = [[4.2 + 2.1e-5 * a + 1.3e-4 * c + 1.0e-10 * a * c for c in context] for a in active]
    write("dense.npz", isl, ttft, active, context, itl)

    # A small, fast engine with a coarse grid: used with SGLang's small token pool and with
    # disaggregated pools; stored compressed to exercise the deflate path.
    isl = [128, 1024, 8192]
    ttft = [3.0, 11.0, 70.0]
    active = [0, 4096, 16384]
    context = [64, 2048]
    itl = [[2.0, 2.6], [2.5, 3.4], [4.0, 5.5]]
    write("small.npz", isl, ttft, active, context, itl, compressed=True)

    # Faulty tables for the error tests: each breaks one rule.
    good = dict(
        prefill_isl=[128.0, 1024.0],
        prefill_ttft_ms=[3.0, 11.0],
        decode_active_kv_tokens=[0.0, 4096.0],
        decode_context_length=[64.0, 2048.0],
        decode_itl=[[2.0, 2.6], [2.5, 3.4]],
    )
    faults = {
        "bad_missing_key.npz": {"decode_itl": None},
        "bad_shape.npz": {"decode_itl": [[2.0, 2.6, 3.0], [2.5, 3.4, 4.0]]},
        "bad_unsorted.npz": {"prefill_isl": [1024.0, 128.0]},
        "bad_nan.npz": {"decode_context_length": [64.0, float("nan")]},
        "bad_short_axis.npz": {"decode_active_kv_tokens": [0.0], "decode_itl": [[2.0, 2.6]]},
        "bad_length.npz": {"prefill_ttft_ms": [3.0, 11.0, 20.0]},
    }
    for name, changes in faults.items():
        arrays = {**good, **changes}
        np.savez(HERE / name, **{k: np.asarray(v) for k, v in arrays.items() if v is not None})
    (HERE / "bad_not_npz.npz").write_text("not a zip archive\n")


if __name__ == "__main__":
    main()
