#!/usr/bin/env python3
"""Writes the hand-made traces of the non-mooncake formats used by the parity cases
(deterministic; rerun to regenerate).

delta.jsonl (mooncake-delta, --trace-block-size 64): 24 sessions of 2-5 turns whose later turns
  carry only the new input, long enough outputs that generated tokens fill KV blocks, plus 10
  single requests; sessions share one of three system prompts on their first turn.
agentic.jsonl (agentic_mooncake, 1.4.2 rows): 12 plays of a root, 2-4 children waiting for it
  (delay / tool_wait_ms / tool_events), and a join waiting for every child; dependent rows have
  timestamps too (ignored except for the shift, one below every root).
applied.jsonl (applied_compute_agentic): 14 sessions of 0-5 tool turns.
dynamo-a.jsonl + dynamo-b.jsonl.gz (dynamo, standard): 40 requests in two shards with chained
  sequence hashes (shared prefixes), request payloads, an envelope-wrapped record, and records
  without total_time_ms.
dynamo-agentic.jsonl (dynamo, agentic): parent sessions with child sessions, one spawned
  through an explicit Claude tool span, the others placed by time.
"""
import gzip
import json
import os
import random

here = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(20261201)


def dump(row):
    return json.dumps(row, separators=(",", ":")) + "\n"


def write(name, rows):
    with open(os.path.join(here, name), "w") as f:
        f.writelines(dump(r) for r in rows)


# --- mooncake-delta -----------------------------------------------------------------------
next_id = 5000
system = [[1, 2], [3], [4, 5, 6]]
queues = []
for s in range(24):
    ts = rng.randrange(0, 8000)
    turns = []
    for t in range(rng.randrange(2, 6)):
        blocks = rng.randrange(1, 4)
        ids = list(range(next_id, next_id + blocks))
        next_id += blocks
        if t == 0:
            ids = system[s % 3] + ids
        row = {"session_id": f"d{s}", "input_length": len(ids) * 64 - rng.randrange(0, 50),
               "output_length": rng.randrange(10, 300), "hash_ids": ids}
        if t == 0:
            row["timestamp"] = ts
        elif t % 2:
            row["delay"] = rng.randrange(0, 1500)
        else:
            ts += rng.randrange(0, 2500)
            row["timestamp"] = ts
        turns.append(row)
    queues.append(turns)
for r in range(10):
    ids = system[r % 3] + [next_id]
    next_id += 1
    queues.append([{"timestamp": rng.randrange(0, 8000), "input_length": len(ids) * 64,
                    "output_length": rng.randrange(1, 200), "hash_ids": ids}])
rows = []
while any(queues):
    q = rng.choice([q for q in queues if q])
    rows.append(q.pop(0))
write("delta.jsonl", rows)

# --- agentic_mooncake (1.4.2 rows) -----------------------------------------------------------
rows = []
for p in range(12):
    base = [10 + p % 3, 20 + p % 2]
    root = f"p{p}-root"
    rows.append({"request_id": root, "session_id": f"p{p}", "timestamp": 500 + p * 700 + rng.randrange(0, 300),
                 "input_length": 1100 + rng.randrange(0, 400), "output_length": rng.randrange(20, 150),
                 "hash_ids": base + [100 * p + 1, 100 * p + 2]})
    children = []
    for c in range(rng.randrange(2, 5)):
        cid = f"p{p}-c{c}"
        row = {"request_id": cid, "session_id": f"p{p}-child{c}", "wait_for": [root],
               "input_length": 1500 + rng.randrange(0, 500), "output_length": rng.randrange(10, 200),
               "hash_ids": base + [100 * p + 1, 100 * p + 10 + c, 100 * p + 50 + c, 100 * p + 80 + c],
               "timestamp": rng.randrange(0, 9000)}
        kind = c % 3
        if kind == 0:
            row["delay"] = rng.randrange(0, 400)
        elif kind == 1:
            row["tool_wait_ms"] = rng.randrange(0, 600)
            row["tool_events"] = [{"tool_call_id": f"t{p}{c}", "tool_class": "bash",
                                   "started_at_unix_ms": 1, "ended_at_unix_ms": 2,
                                   "duration_ms": 1.0, "status": "succeeded"}]
        else:
            row["delay_ms"] = 50
            row["tool_wait_ms"] = rng.randrange(0, 300)
        children.append(cid)
        rows.append(row)
    rows.append({"request_id": f"p{p}-join", "session_id": f"p{p}", "wait_for": children + [root],
                 "delay": rng.randrange(0, 200), "input_length": 2000, "output_length": rng.randrange(5, 100),
                 "hash_ids": base + [100 * p + 1, 100 * p + 2, 100 * p + 90, 100 * p + 91],
                 "prefix_reset": False, "request_kind": "foreground"})
# A dependent row listed before its dependency, with a timestamp below every root.
rows.insert(0, {"request_id": "late", "wait_for": ["p11-join"], "timestamp": 100, "input_length": 300,
                "output_length": 40, "hash_ids": [10, 20]})
write("agentic.jsonl", rows)

# --- applied_compute_agentic ---------------------------------------------------------------------
rows = []
for s in range(14):
    n = rng.randrange(0, 6)
    rows.append({"num_turns": n, "input_prompt_length": rng.randrange(200, 2500),
                 "assistant_response_length": [rng.randrange(5, 200) for _ in range(n)],
                 "tool_call_output_length": [rng.randrange(0, 800) for _ in range(n)],
                 "tool_call_latency": [round(rng.uniform(0, 1.5), 3) for _ in range(n)],
                 "final_assistant_response_length": rng.randrange(1, 300), "source": "x"})
write("applied.jsonl", rows)

# --- dynamo (standard), two shards -----------------------------------------------------------------
def record(request_id, start, total, hashes, block, output, context=None, event_time=None):
    request = {"request_id": request_id, "output_tokens": output, "request_received_ms": start,
               "input_tokens": len(hashes) * block, "model": "m",
               "replay": {"trace_block_size": block, "input_length": len(hashes) * block - rng.randrange(0, block // 2),
                          "input_sequence_hashes": hashes}}
    if total is not None:
        request["total_time_ms"] = total
    row = {"schema": "dynamo.request.trace.v1", "event_type": "request_end",
           "event_time_unix_ms": event_time if event_time is not None else start + int(total or 0) + 3,
           "request": request}
    if context is not None:
        row["agent_context"] = context
    return row


prefixes = [[9001, 9002], [9101], [9201, 9202, 9203]]
shard_a, shard_b = [], []
t0 = 1_700_000_000_000
for r in range(40):
    chain = list(prefixes[r % 3])
    for b in range(rng.randrange(1, 5)):
        chain.append(rng.randrange(1 << 40, 1 << 60))
    start = t0 + rng.randrange(0, 6000)
    total = rng.choice([None, round(rng.uniform(50, 900), 2)])
    row = record(f"std-{r}", start, total, chain, 128, rng.randrange(1, 200))
    if r % 7 == 3:
        row = {"timestamp": 1, "event": row}
    target = shard_a if r % 2 else shard_b
    target.append({"event_type": "request_payload", "request_id": f"std-{r}"})
    target.append(row)
write("dynamo-a.jsonl", shard_a)
with gzip.open(os.path.join(here, "dynamo-b.jsonl.gz"), "wt") as f:
    # Two gzip members, as log rotation may produce.
    f.writelines(dump(r) for r in shard_b[: len(shard_b) // 2])
with gzip.open(os.path.join(here, "dynamo-b.jsonl.gz"), "at") as f:
    f.writelines(dump(r) for r in shard_b[len(shard_b) // 2:])

# --- dynamo (agentic) ---------------------------------------------------------------------------------
rows = []
t = t0
for p in range(5):
    parent = f"agent{p}"
    t += rng.randrange(0, 400)
    src = record(f"{parent}-a", t, 100, [7000 + p, 7100 + p], 64, rng.randrange(5, 80), {"session_id": parent})
    rows.append(src)
    child = f"{parent}-sub"
    ct = t + 100 + rng.randrange(5, 50)
    kids = []
    for k in range(rng.randrange(1, 4)):
        kids.append(record(f"{child}-{k}", ct, 60, [7000 + p, 7200 + p, 7300 + k], 64, rng.randrange(5, 60),
                           {"session_id": child, "parent_session_id": parent}))
        ct += 60 + rng.randrange(0, 40)
    rows.extend(kids)
    consumer = record(f"{parent}-b", ct + rng.randrange(0, 30), 80, [7000 + p, 7100 + p, 7400 + p], 64,
                      rng.randrange(5, 80), {"session_id": parent})
    rows.append(consumer)
    if p % 2 == 0:
        rows.append({"schema": "dynamo.request.trace.v1", "event_type": "tool_end", "event_time_unix_ms": ct,
                     "agent_context": {"session_id": parent},
                     "tool": {"tool_call_id": f"tool-{p}", "tool_class": "agent", "started_at_unix_ms": t + 100,
                              "ended_at_unix_ms": ct,
                              "claude": {"source_request_id": f"{parent}-a", "consumer_request_id": f"{parent}-b",
                                         "child_session_id": child, "execution_mode": "blocking"}}})
    t += 200
rng.shuffle(rows)
write("dynamo-agentic.jsonl", rows)
