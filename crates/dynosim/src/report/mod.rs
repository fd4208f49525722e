//! The report: what the deployment's users would see.
//!
//! INTERFACE used by the simulator: the simulator feeds a [`Collector`] with request lifecycle
//! events in virtual time, then calls [`Collector::finish`] with the run facts only it knows
//! (worker seconds, GPUs, wall time) to get the [`Report`] and the per-request records.
//! Definitions: `shared/spec/frontend.md` §3.
//!
//! Output formats: [`Report::to_json_file_string`] (the `--report-json` file),
//! [`Report::render_table`] (the terminal table) and [`RequestRecord::to_json_line`]
//! (`--report-jsonl`).

pub mod accounting;
pub mod aiperf;
pub mod collector;
pub mod exact;
pub mod html;
pub mod json;
pub mod record;
pub mod stats;
pub mod table;
pub mod timeseries;

pub use collector::{
    Collector, HandoffStage, LazyRecords, RequestObserver, RequestRecord, RunFacts,
};
pub use record::{RecordSink, TerminalStatus};

/// The report: every key of frontend.md §3.1, in the reference's (Rust dict) key order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// (key, value) in the reference's dict order.
    pub entries: Vec<(&'static str, Value)>,
}

/// A report value: the reference emits ints for counts and floats for the rest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
}

impl Value {
    /// The value as a float, whatever its JSON type.
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(v) => v as f64,
            Value::Float(v) => v,
        }
    }
}

/// Keys that precede the optional goodput keys.
pub const LEADING_KEYS: [&str; 15] = [
    "num_requests",
    "completed_requests",
    "total_input_tokens",
    "total_output_tokens",
    "duration_ms",
    "wall_time_ms",
    "request_throughput_rps",
    "input_throughput_tok_s",
    "output_throughput_tok_s",
    "total_throughput_tok_s",
    "prefill_worker_seconds",
    "decode_worker_seconds",
    "prefill_gpus_per_worker",
    "decode_gpus_per_worker",
    "gpu_hours",
];

/// Keys present only when an SLA is set.
pub const GOODPUT_KEYS: [&str; 3] = [
    "goodput_completed_requests",
    "goodput_request_throughput_rps",
    "goodput_output_throughput_tok_s",
];

/// Scalar keys after the goodput keys.
pub const SPEED_AND_REUSE_KEYS: [&str; 5] = [
    "processed_tokens",
    "processed_tokens_per_s",
    "processed_output_tokens_per_s",
    "prefix_cache_reused_ratio",
    "first_admission_prefix_cache_reused_ratio",
];

macro_rules! distribution_keys {
    ($name:literal, $suffix:literal) => {
        [
            concat!("mean_", $name, $suffix),
            concat!("min_", $name, $suffix),
            concat!("max_", $name, $suffix),
            concat!("median_", $name, $suffix),
            concat!("p75_", $name, $suffix),
            concat!("p90_", $name, $suffix),
            concat!("p95_", $name, $suffix),
            concat!("p99_", $name, $suffix),
            concat!("std_", $name, $suffix),
        ]
    };
}

/// The six distributions' keys, each in mean, min, max, median, p75, p90, p95, p99, std order.
pub const DISTRIBUTION_KEYS: [[&str; 9]; 6] = [
    distribution_keys!("ttft", "_ms"),
    distribution_keys!("ttst", "_ms"),
    distribution_keys!("tpot", "_ms"),
    distribution_keys!("itl", "_ms"),
    distribution_keys!("e2e_latency", "_ms"),
    distribution_keys!("output_token_throughput_per_user", ""),
];

/// Keys whose values are ints; every other key holds a float.
pub const INT_KEYS: [&str; 8] = [
    "num_requests",
    "completed_requests",
    "total_input_tokens",
    "total_output_tokens",
    "prefill_gpus_per_worker",
    "decode_gpus_per_worker",
    "goodput_completed_requests",
    "processed_tokens",
];

/// Every key in the reference's dict order (77 with goodput, 74 without).
pub fn key_order(with_goodput: bool) -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = LEADING_KEYS.to_vec();
    if with_goodput {
        keys.extend(GOODPUT_KEYS);
    }
    keys.extend(SPEED_AND_REUSE_KEYS);
    for group in DISTRIBUTION_KEYS {
        keys.extend(group);
    }
    keys
}

impl Report {
    pub fn get(&self, key: &str) -> Option<Value> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// Builds a report from a JSON object holding report keys (such as a reference report
    /// file), in the reference's dict order. Keys it does not know are ignored; ints stay
    /// ints. `None` if `value` is not an object.
    ///
    /// Beware: serde_json without its `float_roundtrip` feature may parse a decimal string one
    /// ulp off (e.g. `2026.7629610000001`), so parse reference files with exact float parsing
    /// when bit-exactness matters.
    pub fn from_json_value(value: &serde_json::Value) -> Option<Report> {
        let object = value.as_object()?;
        let with_goodput = GOODPUT_KEYS.iter().any(|k| object.contains_key(*k));
        let mut entries = Vec::new();
        for key in key_order(with_goodput) {
            let Some(v) = object.get(key) else { continue };
            let parsed = if let Some(i) = v.as_i64() {
                Value::Int(i)
            } else {
                Value::Float(v.as_f64()?)
            };
            entries.push((key, parsed));
        }
        Some(Report { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_counts_match_the_reference() {
        assert_eq!(key_order(false).len(), 74);
        assert_eq!(key_order(true).len(), 77);
        let keys = key_order(true);
        let mut unique = keys.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 77);
        assert_eq!(keys[15], "goodput_completed_requests");
        assert_eq!(keys[23], "mean_ttft_ms");
        assert_eq!(keys[76], "std_output_token_throughput_per_user");
        assert!(INT_KEYS.iter().all(|k| keys.contains(k)));
    }
}

#[cfg(test)]
mod parity_tests;
#[cfg(test)]
mod reference_tests;
