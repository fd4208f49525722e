//! A simulated run as an AIPerf run directory (`--aiperf-dir`): the three files AIPerf 0.13
//! writes for a measured run, so AIPerf's loader and `aiperf plot` read a simulated run like a
//! measured one.
//!
//! INTERFACE: [`AiperfExport::new`] takes the report and the per-request records of one run;
//! [`AiperfExport::summary_json`], [`AiperfExport::summary_csv`] and
//! [`AiperfExport::records_jsonl`] give the contents of `profile_export_aiperf.json`,
//! `profile_export_aiperf.csv` and `profile_export.jsonl`. Pure formatting: the CLI writes them.
//!
//! Metric definitions follow AIPerf, not the dynosim report, where the two differ:
//! - `inter_token_latency` is per request, `(e2e - ttft) / (output - 1)` (dynosim's TPOT,
//!   the records' `itl_ms`), not the report's pooled per-gap ITL;
//! - `output_token_throughput_per_user` is per request, `1000 / inter_token_latency`;
//! - percentiles interpolate linearly between ranks (numpy's default), std is the population
//!   std; the report picks the rounded rank instead, so p50..p99 may differ slightly from
//!   its `median_*`.. keys while avg, min and max are the same numbers.
//!
//! Times are virtual: the run starts at the Unix epoch, so `request_start_ns` is the request's
//! arrival in model time and the files are the same for the same inputs.

use serde_json::{json, Map, Value as Json};

use super::record::TerminalStatus;
use super::{Report, RequestRecord};

/// The export-schema version of AIPerf 0.13's `profile_export_aiperf.json`.
pub const SCHEMA_VERSION: &str = "1.4";
/// The AIPerf release whose file formats these are.
pub const AIPERF_FORMAT_VERSION: &str = "0.13.0";

/// File names inside the run directory, as AIPerf names them.
pub const SUMMARY_JSON_FILE: &str = "profile_export_aiperf.json";
pub const SUMMARY_CSV_FILE: &str = "profile_export_aiperf.csv";
pub const RECORDS_JSONL_FILE: &str = "profile_export.jsonl";

/// Statistic columns of AIPerf's CSV, in its order.
const CSV_STAT_KEYS: [&str; 14] = [
    "avg", "min", "max", "sum", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "std",
];
const PERCENTILES: [(&str, f64); 9] = [
    ("p1", 1.0),
    ("p5", 5.0),
    ("p10", 10.0),
    ("p25", 25.0),
    ("p50", 50.0),
    ("p75", 75.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
];

/// One per-request metric: AIPerf tag, display header, unit, and its value for a record.
struct RecordMetric {
    tag: &'static str,
    header: &'static str,
    unit: &'static str,
    value: fn(&RequestRecord) -> Option<f64>,
}

fn itl_ms(record: &RequestRecord) -> Option<f64> {
    (record.output_length >= 2)
        .then_some(record.itl_ms)
        .flatten()
}

const RECORD_METRICS: [RecordMetric; 7] = [
    RecordMetric {
        tag: "time_to_first_token",
        header: "Time to First Token",
        unit: "ms",
        value: |r| r.ttft_ms,
    },
    RecordMetric {
        tag: "time_to_second_token",
        header: "Time to Second Token",
        unit: "ms",
        value: |r| r.ttst_ms,
    },
    RecordMetric {
        tag: "request_latency",
        header: "Request Latency",
        unit: "ms",
        value: |r| r.e2e_latency_ms,
    },
    RecordMetric {
        tag: "inter_token_latency",
        header: "Inter Token Latency",
        unit: "ms",
        value: itl_ms,
    },
    RecordMetric {
        tag: "output_token_throughput_per_user",
        header: "Output Token Throughput Per User",
        unit: "tokens/sec/user",
        value: |r| itl_ms(r).filter(|itl| *itl > 0.0).map(|itl| 1000.0 / itl),
    },
    RecordMetric {
        tag: "output_sequence_length",
        header: "Output Sequence Length",
        unit: "tokens",
        value: |r| Some(r.output_length as f64),
    },
    RecordMetric {
        tag: "input_sequence_length",
        header: "Input Sequence Length",
        unit: "tokens",
        value: |r| Some(r.input_length as f64),
    },
];

/// The statistics AIPerf reports for a record metric.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordStats {
    pub avg: f64,
    pub min: f64,
    pub max: f64,
    pub sum: f64,
    /// (name, value) for p1, p5, p10, p25, p50, p75, p90, p95, p99.
    pub percentiles: Vec<(&'static str, f64)>,
    pub std: f64,
    pub count: usize,
}

impl RecordStats {
    /// Statistics of `values` (in request order); `None` when there are none.
    pub fn of(values: &[f64]) -> Option<RecordStats> {
        if values.is_empty() {
            return None;
        }
        let count = values.len();
        let sum: f64 = values.iter().sum();
        let avg = sum / count as f64;
        let variance = values.iter().map(|v| (v - avg) * (v - avg)).sum::<f64>() / count as f64;
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let percentiles = PERCENTILES
            .iter()
            .map(|(name, p)| (*name, linear_percentile(&sorted, *p)))
            .collect();
        Some(RecordStats {
            avg,
            min: sorted[0],
            max: sorted[count - 1],
            sum,
            percentiles,
            std: variance.sqrt(),
            count,
        })
    }

    fn get(&self, key: &str) -> Option<f64> {
        match key {
            "avg" => Some(self.avg),
            "min" => Some(self.min),
            "max" => Some(self.max),
            "sum" => Some(self.sum),
            "std" => Some(self.std),
            _ => self
                .percentiles
                .iter()
                .find(|(name, _)| *name == key)
                .map(|(_, v)| *v),
        }
    }
}

/// The `p`-th percentile of sorted values, interpolating linearly between the two nearest
/// ranks (numpy's default method, which AIPerf uses).
pub fn linear_percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (sorted.len() - 1) as f64 * p / 100.0;
    let lower = rank.floor() as usize;
    let upper = rank.ceil() as usize;
    let fraction = rank - lower as f64;
    sorted[lower] + (sorted[upper] - sorted[lower]) * fraction
}

/// One scalar (derived or aggregate) metric of the summary.
struct ScalarMetric {
    tag: &'static str,
    header: &'static str,
    unit: &'static str,
    value: f64,
}

/// A run's AIPerf files, computed once from its report and records.
pub struct AiperfExport<'a> {
    records: &'a [RequestRecord],
    record_stats: Vec<(&'static RecordMetric, RecordStats)>,
    scalars: Vec<ScalarMetric>,
    duration_ms: f64,
}

impl<'a> AiperfExport<'a> {
    /// Statistics over the completed requests (AIPerf's valid records); throughputs, counts
    /// and duration are the report's own numbers.
    pub fn new(report: &Report, records: &'a [RequestRecord]) -> AiperfExport<'a> {
        let completed: Vec<&RequestRecord> = records
            .iter()
            .filter(|r| r.terminal_status == TerminalStatus::Completed)
            .collect();
        let record_stats = RECORD_METRICS
            .iter()
            .filter_map(|metric| {
                let values: Vec<f64> = completed.iter().filter_map(|r| (metric.value)(r)).collect();
                RecordStats::of(&values).map(|stats| (metric, stats))
            })
            .collect();
        let number = |key: &str| report.get(key).map_or(0.0, |v| v.as_f64());
        let duration_ms = number("duration_ms");
        let errors = records.len() - completed.len();
        let total_isl: usize = completed.iter().map(|r| r.input_length).sum();
        let total_osl: usize = completed.iter().map(|r| r.output_length).sum();
        let mut scalars = vec![
            ScalarMetric {
                tag: "request_throughput",
                header: "Request Throughput",
                unit: "requests/sec",
                value: number("request_throughput_rps"),
            },
            ScalarMetric {
                tag: "request_count",
                header: "Request Count",
                unit: "requests",
                value: completed.len() as f64,
            },
            ScalarMetric {
                tag: "output_token_throughput",
                header: "Output Token Throughput",
                unit: "tokens/sec",
                value: number("output_throughput_tok_s"),
            },
            ScalarMetric {
                tag: "total_token_throughput",
                header: "Total Token Throughput",
                unit: "tokens/sec",
                value: number("total_throughput_tok_s"),
            },
            ScalarMetric {
                tag: "benchmark_duration",
                header: "Benchmark Duration",
                unit: "sec",
                value: duration_ms / 1000.0,
            },
            ScalarMetric {
                tag: "total_isl",
                header: "Total Input Sequence Length",
                unit: "tokens",
                value: total_isl as f64,
            },
            ScalarMetric {
                tag: "total_osl",
                header: "Total Output Sequence Length",
                unit: "tokens",
                value: total_osl as f64,
            },
        ];
        if errors > 0 {
            scalars.push(ScalarMetric {
                tag: "error_request_count",
                header: "Error Request Count",
                unit: "requests",
                value: errors as f64,
            });
        }
        if let Some(good) = report.get("goodput_completed_requests") {
            scalars.push(ScalarMetric {
                tag: "good_request_count",
                header: "Good Request Count",
                unit: "requests",
                value: good.as_f64(),
            });
            scalars.push(ScalarMetric {
                tag: "goodput",
                header: "Goodput",
                unit: "requests/sec",
                value: number("goodput_request_throughput_rps"),
            });
        }
        AiperfExport {
            records,
            record_stats,
            scalars,
            duration_ms,
        }
    }

    /// `profile_export_aiperf.json`: one object per metric tag at the top level (record
    /// metrics with every statistic, count and sum; scalars with `unit` and `avg` only).
    pub fn summary_json(&self) -> String {
        let mut top = Map::new();
        top.insert("schema_version".into(), json!(SCHEMA_VERSION));
        top.insert("aiperf_version".into(), json!(AIPERF_FORMAT_VERSION));
        top.insert("benchmark_id".into(), json!("dynosim-simulated-run"));
        for (metric, stats) in &self.record_stats {
            let mut block = Map::new();
            block.insert("unit".into(), json!(metric.unit));
            block.insert("avg".into(), json_number(stats.avg));
            for (name, value) in &stats.percentiles {
                block.insert((*name).into(), json_number(*value));
            }
            block.insert("min".into(), json_number(stats.min));
            block.insert("max".into(), json_number(stats.max));
            block.insert("std".into(), json_number(stats.std));
            block.insert("count".into(), json!(stats.count));
            block.insert("sum".into(), json_number(stats.sum));
            top.insert(metric.tag.into(), Json::Object(block));
        }
        for scalar in &self.scalars {
            top.insert(
                scalar.tag.into(),
                json!({"unit": scalar.unit, "avg": json_number(scalar.value)}),
            );
        }
        top.insert("was_cancelled".into(), json!(false));
        top.insert("start_time".into(), json!(iso_time_from_epoch_ms(0.0)));
        top.insert(
            "end_time".into(),
            json!(iso_time_from_epoch_ms(self.duration_ms)),
        );
        let mut text =
            serde_json::to_string_pretty(&Json::Object(top)).expect("plain JSON always serializes");
        text.push('\n');
        text
    }

    /// `profile_export_aiperf.csv`: the record metrics with every statistic (2 decimals),
    /// a blank line, then the scalars as `Metric,Value`; each section sorted by tag.
    pub fn summary_csv(&self) -> String {
        let mut out = String::new();
        let mut records: Vec<_> = self.record_stats.iter().collect();
        records.sort_by_key(|(metric, _)| metric.tag);
        if !records.is_empty() {
            out.push_str("Metric,");
            out.push_str(&CSV_STAT_KEYS.join(","));
            out.push_str("\r\n");
            for (metric, stats) in records {
                out.push_str(&csv_name(metric.header, metric.unit));
                for key in CSV_STAT_KEYS {
                    out.push(',');
                    if let Some(value) = stats.get(key) {
                        out.push_str(&format!("{value:.2}"));
                    }
                }
                out.push_str("\r\n");
            }
            out.push_str("\r\n");
        }
        let mut scalars: Vec<_> = self.scalars.iter().collect();
        scalars.sort_by_key(|s| s.tag);
        out.push_str("Metric,Value\r\n");
        for scalar in scalars {
            out.push_str(&csv_name(scalar.header, scalar.unit));
            out.push_str(&format!(",{:.2}\r\n", scalar.value));
        }
        out
    }

    /// `profile_export.jsonl`: one line per request, in request order, with AIPerf's metadata
    /// (virtual-time nanoseconds, the serving worker as `worker_id`) and per-request metrics.
    pub fn records_jsonl(&self) -> String {
        let mut out = String::new();
        for (index, record) in self.records.iter().enumerate() {
            out.push_str(&record_line(index, record).to_string());
            out.push('\n');
        }
        out
    }
}

fn record_line(index: usize, record: &RequestRecord) -> Json {
    let worker = record.decode_worker_idx.or(record.prefill_worker_idx);
    let completed = record.terminal_status == TerminalStatus::Completed;
    let mut metadata = Map::new();
    metadata.insert("session_num".into(), json!(index));
    metadata.insert("x_request_id".into(), json!(record.uuid));
    metadata.insert("x_correlation_id".into(), json!(record.uuid));
    metadata.insert("conversation_id".into(), json!(record.session_id));
    metadata.insert("turn_index".into(), json!(record.turn_index.unwrap_or(0)));
    metadata.insert(
        "request_start_ns".into(),
        json!(ms_to_ns(record.arrival_time_ms)),
    );
    if let Some(admit) = record.first_admit_ms {
        metadata.insert("request_ack_ns".into(), json!(ms_to_ns(admit)));
    }
    // The end is the start plus the latency rounded up, so no request's TTFT exceeds its
    // duration by a rounding nanosecond (AIPerf's timeline plots drop such requests).
    let start_ns = ms_to_ns(record.arrival_time_ms);
    let end_ns = match record.e2e_latency_ms {
        Some(e2e) => start_ns + (e2e * 1.0e6).ceil().max(0.0) as u64,
        None => ms_to_ns(record.terminal_time_ms).max(start_ns),
    };
    metadata.insert("request_end_ns".into(), json!(end_ns));
    metadata.insert(
        "worker_id".into(),
        json!(worker.map_or_else(|| "unassigned".to_string(), |w| format!("worker_{w}"))),
    );
    metadata.insert("record_processor_id".into(), json!("dynosim"));
    metadata.insert("benchmark_phase".into(), json!("profiling"));
    metadata.insert(
        "was_cancelled".into(),
        json!(record.terminal_status == TerminalStatus::Canceled),
    );
    let mut metrics = Map::new();
    if completed {
        for metric in &RECORD_METRICS {
            if let Some(value) = (metric.value)(record) {
                metrics.insert(
                    metric.tag.into(),
                    json!({"value": json_number(value), "unit": metric.unit}),
                );
            }
        }
    }
    let error = if completed {
        Json::Null
    } else {
        let status = serde_json::to_value(record.terminal_status)
            .expect("a status always serializes")
            .as_str()
            .unwrap_or("failed")
            .to_string();
        json!({
            "code": null,
            "type": "SimulatedRequestNotCompleted",
            "message": format!("request ended {status} in the simulation"),
        })
    };
    json!({"metadata": metadata, "metrics": metrics, "error": error})
}

/// Whole numbers as JSON ints (token counts), everything else as floats; non-finite values
/// (which AIPerf writes as null) as null.
fn json_number(value: f64) -> Json {
    if !value.is_finite() {
        Json::Null
    } else if value.fract() == 0.0 && value.abs() < 9.0e15 {
        json!(value as i64)
    } else {
        json!(value)
    }
}

fn ms_to_ns(ms: f64) -> u64 {
    (ms * 1.0e6).round().max(0.0) as u64
}

fn csv_name(header: &str, unit: &str) -> String {
    if unit == "requests" || unit == "count" {
        header.to_string()
    } else {
        format!("{header} ({unit})")
    }
}

/// `1970-01-01T00:00:00.000000+00:00` plus `ms` of model time, as Python's `isoformat()`.
fn iso_time_from_epoch_ms(ms: f64) -> String {
    let total_us = (ms * 1000.0).round().max(0.0) as u64;
    let micros = total_us % 1_000_000;
    let total_s = total_us / 1_000_000;
    let days = total_s / 86_400;
    let (hour, minute, second) = (total_s % 86_400 / 3600, total_s % 3600 / 60, total_s % 60);
    let (year, month, day) = civil_from_days(days as i64);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{micros:06}+00:00")
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's civil algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Value;

    fn record(index: usize, ttft: f64, e2e: f64, output: usize) -> RequestRecord {
        let itl = (output >= 2).then(|| (e2e - ttft) / (output as f64 - 1.0));
        RequestRecord {
            session_id: None,
            turn_index: None,
            uuid: RequestRecord::uuid_for_index(index),
            arrival_time_ms: index as f64 * 10.0,
            first_admit_ms: Some(index as f64 * 10.0),
            terminal_time_ms: index as f64 * 10.0 + e2e,
            first_token_ms: Some(index as f64 * 10.0 + ttft),
            last_token_ms: Some(index as f64 * 10.0 + e2e),
            ttft_ms: Some(ttft),
            ttst_ms: (output >= 2).then_some(itl.unwrap_or(0.0)),
            e2e_latency_ms: Some(e2e),
            itl_ms: itl,
            input_length: 100,
            requested_output_length: output,
            output_length: output,
            reused_input_tokens: 0,
            prefill_worker_idx: None,
            decode_worker_idx: Some(index % 2),
            prefill_admit_ms: None,
            source_held_ms: None,
            destination_reserved_ms: None,
            destination_activated_ms: None,
            decode_admit_ms: None,
            source_released_ms: None,
            decode_reused_input_tokens: None,
            prefill_route_overlap_tokens: None,
            decode_route_overlap_tokens: None,
            terminal_status: TerminalStatus::Completed,
        }
    }

    fn report() -> Report {
        Report {
            entries: vec![
                ("duration_ms", Value::Float(2500.0)),
                ("request_throughput_rps", Value::Float(1.6)),
                ("output_throughput_tok_s", Value::Float(12.0)),
                ("total_throughput_tok_s", Value::Float(172.0)),
            ],
        }
    }

    #[test]
    fn linear_percentiles_interpolate_like_numpy() {
        let sorted = [1.0, 2.0, 3.0, 4.0];
        // numpy.percentile([1,2,3,4], [0, 50, 90, 100]) = 1, 2.5, 3.7, 4
        assert_eq!(linear_percentile(&sorted, 0.0), 1.0);
        assert_eq!(linear_percentile(&sorted, 50.0), 2.5);
        assert!((linear_percentile(&sorted, 90.0) - 3.7).abs() < 1e-12);
        assert_eq!(linear_percentile(&sorted, 100.0), 4.0);
    }

    #[test]
    fn summary_json_has_aiperf_blocks() {
        let records = vec![
            record(0, 100.0, 1000.0, 10),
            record(1, 200.0, 2000.0, 10),
            record(2, 300.0, 300.0, 1),
        ];
        let export = AiperfExport::new(&report(), &records);
        let summary: Json = serde_json::from_str(&export.summary_json()).unwrap();
        let ttft = &summary["time_to_first_token"];
        assert_eq!(ttft["unit"], "ms");
        assert_eq!(ttft["avg"], 200);
        assert_eq!(ttft["p50"], 200);
        assert_eq!(ttft["min"], 100);
        assert_eq!(ttft["count"], 3);
        // ITL only for requests with two or more tokens: (1000-100)/9 and (2000-200)/9.
        let itl = &summary["inter_token_latency"];
        assert_eq!(itl["count"], 2);
        assert_eq!(itl["avg"], 150);
        assert_eq!(summary["output_token_throughput_per_user"]["max"], 10);
        // Scalars carry unit and avg only.
        let rps = summary["request_throughput"].as_object().unwrap();
        assert_eq!(rps.len(), 2);
        assert_eq!(rps["unit"], "requests/sec");
        assert_eq!(rps["avg"].as_f64(), Some(1.6));
        assert_eq!(summary["benchmark_duration"]["avg"].as_f64(), Some(2.5));
        assert_eq!(summary["request_count"]["avg"], 3);
        assert_eq!(summary["total_osl"]["avg"], 21);
        assert_eq!(summary["schema_version"], SCHEMA_VERSION);
        assert_eq!(summary["end_time"], "1970-01-01T00:00:02.500000+00:00");
        assert!(summary.get("error_request_count").is_none());
    }

    #[test]
    fn summary_csv_has_two_sections_with_units() {
        let records = vec![record(0, 100.0, 1000.0, 10), record(1, 200.0, 2000.0, 10)];
        let csv = AiperfExport::new(&report(), &records).summary_csv();
        let lines: Vec<&str> = csv.split("\r\n").collect();
        assert_eq!(
            lines[0],
            "Metric,avg,min,max,sum,p1,p5,p10,p25,p50,p75,p90,p95,p99,std"
        );
        assert!(lines.contains(
            &"Time to First Token (ms),150.00,100.00,200.00,300.00,101.00,105.00,110.00,125.00,\
              150.00,175.00,190.00,195.00,199.00,50.00"
        ));
        let blank = lines.iter().position(|l| l.is_empty()).unwrap();
        assert_eq!(lines[blank + 1], "Metric,Value");
        assert!(lines.contains(&"Request Count,2.00"));
        assert!(lines.contains(&"Request Throughput (requests/sec),1.60"));
        assert!(lines.contains(&"Benchmark Duration (sec),2.50"));
    }

    #[test]
    fn jsonl_records_carry_metadata_metrics_and_errors() {
        let mut rejected = record(1, 0.0, 0.0, 5);
        rejected.terminal_status = TerminalStatus::Rejected;
        let records = vec![record(0, 100.0, 1000.0, 10), rejected];
        let export = AiperfExport::new(&report(), &records);
        let text = export.records_jsonl();
        let lines: Vec<Json> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        let first = &lines[0];
        assert_eq!(first["metadata"]["session_num"], 0);
        assert_eq!(first["metadata"]["request_start_ns"], 0);
        assert_eq!(first["metadata"]["request_end_ns"], 1_000_000_000u64);
        assert_eq!(first["metadata"]["worker_id"], "worker_0");
        assert_eq!(first["metadata"]["benchmark_phase"], "profiling");
        assert_eq!(
            first["metrics"]["request_latency"],
            json!({"value": 1000, "unit": "ms"})
        );
        assert!(first["error"].is_null());
        assert_eq!(lines[1]["metrics"], json!({}));
        assert_eq!(lines[1]["error"]["type"], "SimulatedRequestNotCompleted");
        let summary: Json = serde_json::from_str(&export.summary_json()).unwrap();
        assert_eq!(summary["error_request_count"]["avg"], 1);
        assert_eq!(summary["request_count"]["avg"], 1);
    }

    #[test]
    fn iso_times_count_from_the_epoch() {
        assert_eq!(
            iso_time_from_epoch_ms(0.0),
            "1970-01-01T00:00:00.000000+00:00"
        );
        // 2000-03-01 is day 11017.
        assert_eq!(
            iso_time_from_epoch_ms(11_017.0 * 86_400_000.0 + 3_723_004.5),
            "2000-03-01T01:02:03.004500+00:00"
        );
    }
}
