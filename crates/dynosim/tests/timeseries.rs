//! The HTML report's time series, recorded during real runs: they change nothing in the
//! report, and their totals agree with it (output tokens, completed requests, prefix reuse,
//! histogram counts) in both topologies. The conversation trace is read from `../shared`
//! where present; the synthetic workloads always run.

mod common;

use std::sync::Arc;

use dynosim::config::ReplayOptions;
use dynosim::sim::{Observers, Progress};
use dynosim::{ReplaySpec, Report};
use serde_json::Value as Json;

fn run(spec: &ReplaySpec, observers: &Observers) -> (Report, Option<Json>) {
    let workload = dynosim::load_workload(spec).expect("workload");
    let mut simulated = dynosim::Simulation::new(spec, workload)
        .observers(observers.clone())
        .run()
        .expect("run");
    let series = simulated.take_timeseries().map(|s| s.to_json(64));
    (simulated.into_report(0.0).0, series)
}

fn int(report: &Report, key: &str) -> u64 {
    report.get(key).unwrap().as_f64() as u64
}

fn sum(series: &Json, key: &str) -> u64 {
    series[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum()
}

fn histogram_total(series: &Json, name: &str) -> u64 {
    sum(&series["histograms"][name], "counts")
}

/// Recording changes nothing, and the series add up to the report.
fn check(spec: &ReplaySpec, pools: &[&str], workers: usize) {
    let progress = Arc::new(Progress::new());
    let (plain, none) = run(spec, &Observers::default());
    assert!(none.is_none(), "nothing recorded unless asked");
    let observers = Observers {
        timeseries: true,
        progress: Some(Arc::clone(&progress)),
    };
    let (report, series) = run(spec, &observers);
    let series = series.expect("recorded");
    assert_eq!(plain, report, "recording the series changed the report");

    let completed = int(&report, "completed_requests");
    assert!(completed > 0);
    assert_eq!(
        sum(&series, "output_tokens"),
        int(&report, "total_output_tokens")
    );
    assert_eq!(sum(&series, "completed_requests"), completed);
    assert_eq!(
        sum(&series, "prompt_tokens"),
        int(&report, "total_input_tokens")
    );
    let reuse = sum(&series, "reused_prompt_tokens") as f64 / sum(&series, "prompt_tokens") as f64;
    let reported = report.get("prefix_cache_reused_ratio").unwrap().as_f64();
    assert!((reuse - reported).abs() < 1e-9, "{reuse} vs {reported}");
    assert_eq!(histogram_total(&series, "ttft_ms"), completed);
    assert_eq!(histogram_total(&series, "e2e_ms"), completed);
    // One gap per output token after the first, for each completed request.
    assert_eq!(
        histogram_total(&series, "itl_ms"),
        int(&report, "total_output_tokens") - completed
    );
    // The series cover the run: the last bucket holds the last completion.
    let width = series["bucket_ms"].as_f64().unwrap();
    let buckets = series["output_tokens"].as_array().unwrap().len();
    let duration_ms = report.get("duration_ms").unwrap().as_f64();
    assert_eq!(buckets, (duration_ms / width) as usize + 1);
    assert!(buckets <= dynosim::report::timeseries::MAX_BUCKETS);

    let names: Vec<&str> = series["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, pools);
    let last = series["pools"].as_array().unwrap().last().unwrap();
    let rows = last["workers"].as_array().unwrap();
    assert_eq!(rows.len(), workers);
    for row in rows {
        for key in ["waiting", "running", "kv_used"] {
            let values = row[key].as_array().unwrap();
            assert_eq!(values.len(), buckets);
            assert!(values.iter().any(|v| v.as_f64().is_some_and(|x| x > 0.0)) || key == "waiting");
        }
        let kv = row["kv_used"].as_array().unwrap();
        assert!(kv
            .iter()
            .filter_map(Json::as_f64)
            .all(|x| (0.0..=1.0).contains(&x)));
    }

    // The progress seam saw the end of the run.
    assert_eq!(
        progress.ended_requests(),
        int(&report, "num_requests") as usize
    );
    assert_eq!(
        progress.total_requests(),
        int(&report, "num_requests") as usize
    );
    assert!(progress.model_time_ms() >= duration_ms);
}

fn synthetic(workers: i64) -> ReplayOptions {
    common::synthetic(workers, 300)
}

#[test]
fn aggregated_synthetic_series_add_up_to_the_report() {
    let spec = synthetic(3).into_spec().unwrap();
    check(&spec, &["worker"], 3);
}

#[test]
fn aggregated_kv_router_series_add_up_to_the_report() {
    let spec = ReplayOptions {
        router_mode: "kv_router".into(),
        ..synthetic(2)
    }
    .into_spec()
    .unwrap();
    check(&spec, &["worker"], 2);
}

#[test]
fn disaggregated_series_count_decode_tokens_only() {
    let engine = |role: &str| Some(format!(r#"{{"worker_type": "{role}"}}"#));
    let spec = ReplayOptions {
        prefill_engine_args: engine("prefill"),
        decode_engine_args: engine("decode"),
        num_prefill_workers: 2,
        num_decode_workers: 2,
        ..synthetic(1)
    }
    .into_spec()
    .unwrap();
    check(&spec, &["prefill", "decode"], 2);
}

#[test]
fn conversation_trace_on_four_workers_adds_up_to_the_report() {
    let Some(trace) = common::conversation_trace(module_path!()) else {
        return;
    };
    let spec = ReplayOptions {
        trace_files: vec![trace],
        num_workers: 4,
        ..ReplayOptions::default()
    }
    .into_spec()
    .unwrap();
    check(&spec, &["worker"], 4);
}
