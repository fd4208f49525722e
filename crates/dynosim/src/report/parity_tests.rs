//! Pipeline parity: replays the per-request facts of a reference `--report-jsonl` through the
//! [`Collector`] and compares the resulting report with the reference report file.
//!
//! The JSONL holds arrival, first admission, first/last token, TTST, lengths, reuse and worker
//! of every request, but not every token timestamp: the second token is placed at
//! `first + ttst`, and the tokens between the second and the last at the last token's time.
//! So ITL/OTPU (and their order-dependent Welford sums) are comparable only when every request
//! emitted at most two tokens. Completion order among equal terminal times is unknown; we use
//! arrival order.

use super::{Collector, Report, RunFacts, Value};
use crate::config::Sla;

/// One flat JSON object as (key, raw value text). Numbers are parsed later with
/// `str::parse::<f64>`, which is exact (serde_json's default float parsing is not).
fn flat_fields(line: &str) -> Vec<(String, String)> {
    let body = line.trim().trim_start_matches('{').trim_end_matches('}');
    let mut fields = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let rest_after_quote = rest.trim_start_matches(',').trim_start_matches('"');
        let (key, after_key) = rest_after_quote.split_once("\":").unwrap();
        let (value, remainder) = if let Some(stripped) = after_key.strip_prefix('"') {
            let end = stripped.find('"').unwrap();
            (&stripped[..end], &stripped[end + 1..])
        } else {
            let end = after_key.find(',').unwrap_or(after_key.len());
            (&after_key[..end], &after_key[end..])
        };
        fields.push((key.to_string(), value.to_string()));
        rest = remainder;
    }
    fields
}

struct ReferenceRequest {
    arrival: f64,
    first_admit: f64,
    terminal: f64,
    first_token: Option<f64>,
    ttst: Option<f64>,
    last_token: Option<f64>,
    input_length: usize,
    requested_output_length: usize,
    output_length: usize,
    reused: usize,
    worker: usize,
}

fn parse_records(jsonl: &str) -> Vec<ReferenceRequest> {
    jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let fields = flat_fields(line);
            let get = |k: &str| fields.iter().find(|(key, _)| key == k).unwrap().1.clone();
            let float = |k: &str| get(k).parse::<f64>().ok();
            let int = |k: &str| get(k).parse::<usize>().ok();
            assert_eq!(get("terminal_status"), "completed");
            ReferenceRequest {
                arrival: float("arrival_time_ms").unwrap(),
                first_admit: float("first_admit_ms").unwrap(),
                terminal: float("terminal_time_ms").unwrap(),
                first_token: float("first_token_ms"),
                ttst: float("ttst_ms"),
                last_token: float("last_token_ms"),
                input_length: int("input_length").unwrap(),
                requested_output_length: int("requested_output_length").unwrap(),
                output_length: int("output_length").unwrap(),
                reused: int("reused_input_tokens").unwrap(),
                worker: int("decode_worker_idx").unwrap_or(0),
            }
        })
        .collect()
}

/// Replays the records (already in arrival order) as events in time order.
fn replay(requests: &[ReferenceRequest], sla: Sla, facts: RunFacts) -> Report {
    // (time, phase, id, token count); phases order same-time events of one request.
    let mut events: Vec<(f64, u8, usize, usize)> = Vec::new();
    for (id, r) in requests.iter().enumerate() {
        events.push((r.arrival, 0, id, 0));
        events.push((r.first_admit, 1, id, 0));
        if let Some(first) = r.first_token {
            events.push((first, 2, id, 1));
            if r.output_length >= 2 {
                let second = first + r.ttst.unwrap();
                events.push((second, 2, id, 1));
                if r.output_length > 2 {
                    events.push((r.last_token.unwrap(), 2, id, r.output_length - 2));
                }
            }
        }
        events.push((r.terminal, 3, id, 0));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut collector = Collector::new(sla, false);
    for (time, phase, id, count) in events {
        let r = &requests[id];
        match phase {
            0 => collector.on_arrival(id, time, r.input_length, r.requested_output_length, None),
            1 => collector.on_admit(id, time, r.reused, r.worker),
            2 => collector.on_tokens(id, time, count),
            _ => collector.on_completed(id, time),
        }
    }
    collector.finish(facts).0
}

fn reference_report(json: &str) -> Report {
    let mut object = serde_json::Map::new();
    for line in json.lines() {
        let Some((key, number)) = line.trim().trim_end_matches(',').split_once(": ") else {
            continue;
        };
        let value = match number.parse::<i64>() {
            Ok(int) => serde_json::Value::from(int),
            Err(_) => serde_json::Value::from(number.parse::<f64>().unwrap()),
        };
        object.insert(key.trim_matches('"').to_string(), value);
    }
    Report::from_json_value(&serde_json::Value::Object(object)).unwrap()
}

fn facts_of(reference: &Report) -> RunFacts {
    let float = |k: &str| reference.get(k).unwrap().as_f64();
    let int = |k: &str| match reference.get(k).unwrap() {
        Value::Int(v) => v as u64,
        Value::Float(_) => panic!("{k} is an int"),
    };
    RunFacts {
        prefill_worker_seconds: float("prefill_worker_seconds"),
        decode_worker_seconds: float("decode_worker_seconds"),
        prefill_gpus_per_worker: int("prefill_gpus_per_worker"),
        decode_gpus_per_worker: int("decode_gpus_per_worker"),
        wall_time_ms: float("wall_time_ms"),
        ..RunFacts::default()
    }
}

/// Keys that differ between `ours` and `reference`, ignoring keys that contain any of `skip`.
/// Means and stds may differ by `relative`: the reference sums in hash-map order over random
/// uuids (last-bit jitter between its own runs); everything else must be bit-exact.
fn mismatches(ours: &Report, reference: &Report, relative: f64, skip: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    assert_eq!(
        ours.entries.iter().map(|e| e.0).collect::<Vec<_>>(),
        reference.entries.iter().map(|e| e.0).collect::<Vec<_>>()
    );
    for ((key, a), (_, b)) in ours.entries.iter().zip(&reference.entries) {
        if skip.iter().any(|s| key.contains(s)) {
            continue;
        }
        let same_type = matches!((a, b), (Value::Int(_), Value::Int(_)))
            || matches!((a, b), (Value::Float(_), Value::Float(_)));
        let (x, y) = (a.as_f64(), b.as_f64());
        let tolerance = if key.starts_with("mean_") || key.starts_with("std_") {
            relative
        } else {
            0.0
        };
        let close = x == y || (x - y).abs() <= tolerance * y.abs().max(x.abs());
        if !same_type || !close {
            out.push(format!("{key}: ours {a:?} reference {b:?}"));
        }
    }
    out
}

#[test]
fn tiny_trace_two_workers_with_sla_matches_reference() {
    let requests = parse_records(include_str!("testdata/tiny2sla.jsonl"));
    let reference = reference_report(include_str!("testdata/tiny2sla.json"));
    let sla = Sla {
        ttft_ms: Some(2000.0),
        itl_ms: Some(20.0),
        e2e_ms: None,
    };
    let ours = replay(&requests, sla, facts_of(&reference));
    // Token gaps beyond the second token are not in the JSONL.
    let skip = ["itl_ms", "output_token_throughput_per_user"];
    assert_eq!(
        mismatches(&ours, &reference, 1e-13, &skip),
        Vec::<String>::new()
    );
    assert_eq!(ours.get("goodput_completed_requests"), Some(Value::Int(12)));
}
