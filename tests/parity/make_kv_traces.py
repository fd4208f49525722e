#!/usr/bin/env python3
"""Writes the hand-made traces of the kv_router parity cases (deterministic; rerun to regenerate).

Every routing decision in these traces is either forced (one target is strictly cheapest) or a
tie among targets in identical states, so the reports do not depend on how ties are broken and
must equal the reference's exactly.

kv_sparse.jsonl: bursts of distinct requests on an idle cluster (one per worker), then requests
that extend a cached prefix (they must follow it), then a two-turn session, each phase long
after the previous one has finished.
kv_queue.jsonl: two long prompts make both workers busy; five later requests wait in the router
queue (threshold 0.1) and are released one per first token, in the queue policy's order. Rows
carry priorities so that fcfs, lcfs and wspt give different orders.
"""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))


def write(name, rows):
    with open(os.path.join(here, "traces", name), "w") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def ids(first, count):
    return list(range(first, first + count))


sparse = []
# Phase 1 (t=0): four distinct 2048-token requests, one per worker.
for k in range(4):
    sparse.append({"timestamp": 0, "input_length": 2048, "output_length": 20,
                   "hash_ids": ids(100 * (k + 1), 4)})
# Phase 2 (t=3 s): a request extending request 0's prefix must go where it is cached.
sparse.append({"timestamp": 3000, "input_length": 3072, "output_length": 12,
               "hash_ids": ids(100, 4) + ids(1000, 2)})
# Phase 3 (t=6 s): two requests extending request 1's prefix, at the same time.
sparse.append({"timestamp": 6000, "input_length": 2560, "output_length": 8,
               "hash_ids": ids(200, 4) + [2000]})
sparse.append({"timestamp": 6000, "input_length": 2560, "output_length": 8,
               "hash_ids": ids(200, 4) + [2001]})
# Phase 4 (t=9 s): a two-turn session; the second turn extends the first.
sparse.append({"session_id": "chat", "timestamp": 9000, "input_length": 1536,
               "output_length": 16, "hash_ids": ids(3000, 3)})
sparse.append({"session_id": "chat", "timestamp": 9000, "delay": 500, "input_length": 3072,
               "output_length": 16, "hash_ids": ids(3000, 6)})
write("kv_sparse.jsonl", sparse)

queue = [
    {"timestamp": 0, "input_length": 4096, "output_length": 10, "hash_ids": ids(100, 8)},
    {"timestamp": 0, "input_length": 4096, "output_length": 10, "hash_ids": ids(200, 8)},
]
for k, (tokens, priority) in enumerate([(2048, 0), (1024, 0), (3072, 1), (1536, 0), (2560, 0)]):
    queue.append({"timestamp": 10 + k, "input_length": tokens, "output_length": 6,
                  "priority": priority, "hash_ids": ids(1000 + 100 * k, tokens // 512)})
write("kv_queue.jsonl", queue)

# kv_classes.jsonl + kv_policy.yaml: the queue trace with two policy families (the "batch"
# family named by some rows) and an explicit "vip" class, served by deficit round robin.
classes = [dict(row) for row in queue]
for row, policy_class in zip(classes[2:], ["batch", None, "vip", "batch", None]):
    if policy_class:
        row["policy_class"] = policy_class
for k in range(4):
    classes.append({"timestamp": 20 + k, "input_length": 1024 + 512 * k, "output_length": 4,
                    "policy_class": "batch" if k % 2 else "interactive",
                    "hash_ids": ids(5000 + 100 * k, 2 + k)})
write("kv_classes.jsonl", classes)
with open(os.path.join(here, "traces", "kv_policy.yaml"), "w") as f:
    f.write("""default_policy_family: interactive
uncached_isl_buckets:
  - min_tokens: 0
    bucket: short
  - min_tokens: 2048
    bucket: long
policy_classes:
  - name: interactive_short
    policy_family: interactive
    cache_bucket: short
    quantum: 2048
    prefill_busy_threshold: 800
  - name: interactive_long
    policy_family: interactive
    cache_bucket: long
    queue_policy: wspt
    quantum: 4096
    prefill_busy_threshold_frac: 0.1
  - name: batch_short
    policy_family: batch
    cache_bucket: short
    quantum: 1024
    prefill_busy_threshold: 800
  - name: batch_long
    policy_family: batch
    cache_bucket: long
    quantum: 1024
    prefill_busy_threshold: 800
  - name: vip
    quantum: 8192
    prefill_busy_threshold: 800
models:
  no-queue-model:
    default_policy_family: all
    uncached_isl_buckets:
      - min_tokens: 0
        bucket: any
    policy_classes:
      - name: all_any
        policy_family: all
        cache_bucket: any
        quantum: 1
""")
