#!/usr/bin/env python3
"""Compacts a reference per-request JSONL into the TSV the parity tests read.

Keeps the fields that the comparison uses, sorted the way compare-reports.py matches records
(arrival time, input length, requested output, TTFT, E2E); drops random uuids. Empty = null.
"""
import gzip
import json
import sys

FIELDS = ("arrival_time_ms", "input_length", "requested_output_length", "output_length",
          "ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms", "reused_input_tokens", "terminal_status")
# Kept too for disaggregated runs (any record with a prefill worker).
DISAGG_FIELDS = ("first_admit_ms", "prefill_worker_idx", "decode_worker_idx", "prefill_admit_ms",
                 "source_held_ms", "destination_reserved_ms", "destination_activated_ms",
                 "decode_admit_ms", "source_released_ms", "decode_reused_input_tokens",
                 "prefill_route_overlap_tokens", "decode_route_overlap_tokens")


def order(r):
    return (r.get("arrival_time_ms") or 0.0, r.get("input_length") or 0,
            r.get("requested_output_length") or 0, r.get("ttft_ms") or 0.0, r.get("e2e_latency_ms") or 0.0)


def main(src, dst):
    with open(src) as f:
        rows = sorted((json.loads(line) for line in f if line.strip()), key=order)
    fields = FIELDS
    if any(r.get("prefill_worker_idx") is not None for r in rows):
        fields = FIELDS + DISAGG_FIELDS
    with gzip.open(dst, "wt", compresslevel=9) as out:
        out.write("\t".join(fields) + "\n")
        for r in rows:
            out.write("\t".join("" if r.get(k) is None else repr(r[k]) if isinstance(r[k], float) else str(r[k])
                                for k in fields) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
