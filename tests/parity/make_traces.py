#!/usr/bin/env python3
"""Writes the small hand-made traces used by the parity cases (deterministic; rerun to regenerate).

sessions.jsonl: 30 multi-turn sessions (2-4 turns) interleaved with 40 single requests. Turns of a
session extend its previous prompt's hash ids, sessions share one of three system prompts, and
follow-up delays come from `delay`, `delay_ms` or timestamp deltas.
pressure.jsonl: 60 requests in bursts with shared prefixes and long outputs, meant to run against
a small KV pool so that requests are preempted.
"""
import json
import os
import random

here = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(20261130)


def write(name, rows):
    with open(os.path.join(here, "traces", name), "w") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


next_id = 1000
system = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
queues = []
for s in range(30):
    ts = rng.randrange(0, 20000)
    prefix = list(system[s % 3])
    turns = []
    for t in range(rng.randrange(2, 5)):
        blocks = rng.randrange(1, 4)
        ids = prefix + list(range(next_id, next_id + blocks))
        next_id += blocks
        row = {"session_id": f"s{s}", "input_length": len(ids) * 512 - rng.randrange(0, 400),
               "output_length": rng.randrange(1, 120), "hash_ids": ids}
        if t == 0:
            row["timestamp"] = ts
        elif t % 3 == 0:
            ts += rng.randrange(0, 3000)
            row["timestamp"] = ts
        elif t % 3 == 1:
            row["delay"] = rng.randrange(0, 2000)
        else:
            row["delay_ms"] = rng.randrange(0, 2000)
        turns.append(row)
        prefix = ids
    queues.append(turns)
for r in range(40):
    ids = system[r % 3] + list(range(next_id, next_id + 2))
    next_id += 2
    queues.append([{"timestamp": rng.randrange(0, 20000), "input_length": len(ids) * 512,
                    "output_length": rng.randrange(1, 200), "hash_ids": ids}])
# Interleave: repeatedly take the next row of a random non-empty queue (keeps each session's order).
rows = []
while any(queues):
    q = rng.choice([q for q in queues if q])
    rows.append(q.pop(0))
write("sessions.jsonl", rows)

rows = []
for r in range(60):
    shared = [1, 2] if r % 2 else [3]
    ids = shared + list(range(next_id, next_id + 3))
    next_id += 3
    rows.append({"timestamp": (r // 10) * 400, "input_length": len(ids) * 512 - 100,
                 "output_length": rng.randrange(200, 800), "hash_ids": ids})
write("pressure.jsonl", rows)
