#!/usr/bin/env python3
"""Writes traces/planner_burst.jsonl, the load burst the planner parity cases scale against
(deterministic; rerun to regenerate).

560 requests of 2048 prompt tokens (4 fresh hash ids each) and 256 output tokens: one per second
for 20 s, twelve per second for the next 40 s, then one per second for 60 s.
"""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
rates = [(0, 20, 1), (20, 60, 12), (60, 120, 1)]  # (start s, end s, requests per second)

rows = []
for start_s, end_s, per_s in rates:
    for k in range((end_s - start_s) * per_s):
        rows.append({
            "timestamp": round(start_s * 1000 + k * 1000 / per_s),
            "input_length": 2048,
            "output_length": 256,
            "hash_ids": [4 * len(rows) + i for i in range(4)],
        })
with open(os.path.join(here, "traces", "planner_burst.jsonl"), "w") as f:
    for row in rows:
        f.write(json.dumps(row) + "\n")
