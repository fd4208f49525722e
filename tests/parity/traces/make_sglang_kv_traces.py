#!/usr/bin/env python3
"""Writes kv_sglang.jsonl, the hand-made trace of the sglang + kv_router parity cases
(deterministic; rerun to regenerate). Run with 4 workers, engine_type sglang,
chunked_prefill_size 1024 and overlap_score_credit 1.5 (see cases.tsv).

SGLang makes a pass's KV events visible to the router at the pass end. Every routing decision
below is forced (one target strictly cheapest) or a tie among targets whose outcome is the same,
so the report does not depend on how ties are broken. Costs use router.md §2.4 with block size 1
(SGLang's default page size), credit c = 1.5; "idle" is a worker with nothing running and no
cached prefix of the request.

Phase 1 (t=0): A (2048 tokens) starts alone; B = A's 4 blocks + 2 own arrives 10 ms later,
  during A's first chunk pass: nothing is visible yet, so B avoids A's busy worker
  (8192 vs 6144).
Phase 2 (t=3 s): C = B's 6 blocks + 1 own must follow B's cache (3584 on B's worker, 4096 on
  A's, 7168 idle).
Phase 3 (t=6 s): D (4096) starts; E = D's 8 blocks + 1 arrives 500 ms later while D decodes:
  only D's published pages make D's worker cheaper (4608 vs 9216; a tie without them).
Phase 4 (t=9 s): H (4096) is prefilled in 1024-token chunks of 32.49 ms each; I1 = H's 8 blocks
  + 4 own arrives at 80 ms, after two chunk passes ended: H's worker costs 16384 - 1.5 * 2048 =
  13312 > 12288 idle, so I1 goes elsewhere (with pass-start visibility it would see three
  chunks and follow).
Phase 5 (t=12 s): the same with I2 at 120 ms, after three chunk passes: 11776 < 12288, I2
  follows H'.
"""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))


def ids(first, count):
    return list(range(first, first + count))


def row(t, blocks, output):
    return {"timestamp": t, "input_length": 512 * len(blocks), "output_length": output,
            "hash_ids": blocks}


rows = [
    row(0, ids(100, 4), 30),
    row(10, ids(100, 4) + ids(200, 2), 10),
    row(3000, ids(100, 4) + ids(200, 2) + [300], 12),
    row(6000, ids(400, 8), 40),
    row(6500, ids(400, 8) + [500], 8),
    row(9000, ids(600, 8), 20),
    row(9080, ids(600, 8) + ids(700, 4), 10),
    row(12000, ids(800, 8), 20),
    row(12120, ids(800, 8) + ids(900, 4), 10),
]
with open(os.path.join(here, "kv_sglang.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps(r, separators=(",", ":")) + "\n")
