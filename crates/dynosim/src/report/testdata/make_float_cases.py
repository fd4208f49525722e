#!/usr/bin/env python3
"""Writes float_cases.txt: one line `<f64 bits hex> <repr(v)> <f"{v:,.2f}">` per value, which the
report formatters' test compares with python_float_repr and format_thousands_2f.

Deterministic (fixed seed); rerun to regenerate. Values: edge cases (zeros, subnormals, powers
of ten around the repr switch to exponents, halfway cents, infinities, NaN), random bit
patterns, and random values at the magnitudes reports hold (latencies, throughputs, ratios).
"""
import math
import os
import random
import struct

rng = random.Random(20261130)
values = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
          math.inf, -math.inf, math.nan, 0.1, 0.2, 0.3, 1 / 3, 2 / 3, 0.005, 0.015, 0.025, 0.125,
          0.375, 1.005, 2.675, 1234.5, 999.995, 999999.995, 1e15, 9999999999999998.0, 1e16,
          1.2345678901234567e16, 1e22, 1e23, 1e-4, 1e-5, 0.0001234, 0.00001234, 123456789.125]
for e in range(-8, 24):
    for m in (1.0, 1.5, 9.999999999999998, 5.0):
        values.append(m * 10.0 ** e)
for _ in range(300):
    bits = rng.getrandbits(64)
    v = struct.unpack("<d", struct.pack("<Q", bits))[0]
    values.append(v)
for _ in range(900):
    scale = 10.0 ** rng.uniform(-6, 9)
    v = rng.random() * scale
    if rng.random() < 0.5:
        v = round(v, rng.randrange(0, 6))
    values.append(v if rng.random() < 0.8 else -v)
for _ in range(300):
    # Exact halfway cents: ties in the .2f rounding.
    values.append(rng.randrange(0, 10**9) / 1000 + 0.005)

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "float_cases.txt"), "w") as out:
    for v in values:
        bits = struct.unpack("<Q", struct.pack("<d", v))[0]
        out.write(f"{bits:016x} {v!r} {v:,.2f}\n")
