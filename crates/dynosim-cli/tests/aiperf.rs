//! `--aiperf-dir` and `dynosim compare`, run as a user types them.
//!
//! The tests that read the directory with AIPerf itself need the `aiperf` package (0.13): set
//! DYNOSIM_AIPERF_PYTHON to a Python that imports it (`.ci/run` installs one under
//! $HOME/.cache); without it they say they are skipped and pass.

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::dynosim;

/// A small Mooncake trace: 6 requests, some sharing prefix blocks, one with a single token.
const TRACE: &str = concat!(
    "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 40, \"hash_ids\": [0, 1]}\n",
    "{\"timestamp\": 10, \"input_length\": 700, \"output_length\": 30, \"hash_ids\": [0, 2]}\n",
    "{\"timestamp\": 25, \"input_length\": 300, \"output_length\": 1, \"hash_ids\": [3]}\n",
    "{\"timestamp\": 40, \"input_length\": 512, \"output_length\": 20, \"hash_ids\": [4]}\n",
    "{\"timestamp\": 45, \"input_length\": 1024, \"output_length\": 64, \"hash_ids\": [4, 5]}\n",
    "{\"timestamp\": 90, \"input_length\": 900, \"output_length\": 12, \"hash_ids\": [0, 6]}\n",
);

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).expect("file exists")).expect("valid JSON")
}

/// Replays the trace on `workers` workers into `report.json` and (if asked) `aiperf_dir`.
fn replay(dir: &Path, workers: &str, report: &str, aiperf_dir: Option<&str>) -> Value {
    fs::write(dir.join("trace.jsonl"), TRACE).unwrap();
    let mut args = vec![
        "trace.jsonl",
        "--num-workers",
        workers,
        "--report-json",
        report,
    ];
    if let Some(aiperf_dir) = aiperf_dir {
        args.extend(["--aiperf-dir", aiperf_dir]);
    }
    let out = dynosim(dir, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    read_json(&dir.join(report))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

fn number(value: &Value, key: &str) -> f64 {
    value[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is a number in {value}"))
}

#[test]
fn aiperf_dir_holds_the_three_files_with_the_reports_numbers() {
    let tmp = TempDir::new().unwrap();
    let report = replay(tmp.path(), "2", "report.json", Some("runs/sim"));
    let run = tmp.path().join("runs/sim");
    let summary = read_json(&run.join("profile_export_aiperf.json"));
    for (tag, key) in [
        ("time_to_first_token", "ttft_ms"),
        ("time_to_second_token", "ttst_ms"),
        ("request_latency", "e2e_latency_ms"),
        // AIPerf's ITL is per request: the report's TPOT.
        ("inter_token_latency", "tpot_ms"),
    ] {
        for (stat, prefix) in [("avg", "mean"), ("min", "min"), ("max", "max")] {
            let ours = number(&summary[tag], stat);
            let reported = number(&report, &format!("{prefix}_{key}"));
            assert!(close(ours, reported), "{tag}.{stat} {ours} vs {reported}");
        }
        assert_eq!(summary[tag]["unit"], "ms");
    }
    for (tag, key) in [
        ("request_throughput", "request_throughput_rps"),
        ("output_token_throughput", "output_throughput_tok_s"),
        ("total_token_throughput", "total_throughput_tok_s"),
    ] {
        assert_eq!(number(&summary[tag], "avg"), number(&report, key), "{tag}");
    }
    assert_eq!(
        summary["request_count"]["avg"],
        report["completed_requests"]
    );
    // ITL counts only the requests with two or more tokens.
    assert_eq!(summary["inter_token_latency"]["count"], 5);
    assert_eq!(summary["time_to_first_token"]["count"], 6);

    let lines: Vec<Value> = fs::read_to_string(run.join("profile_export.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 6);
    let ttft_sum: f64 = lines
        .iter()
        .map(|l| number(&l["metrics"]["time_to_first_token"], "value"))
        .sum();
    assert!(close(
        ttft_sum,
        number(&summary["time_to_first_token"], "sum")
    ));
    let csv = fs::read_to_string(run.join("profile_export_aiperf.csv")).unwrap();
    assert!(csv.starts_with("Metric,avg,min,max,sum,p1,p5,p10,p25,p50,p75,p90,p95,p99,std\r\n"));
    assert!(csv.contains("\r\n\r\nMetric,Value\r\n"));
    assert!(csv.contains("Request Count,6.00\r\n"));

    // Same inputs, same files.
    replay(tmp.path(), "2", "report2.json", Some("runs/again"));
    for file in [
        "profile_export_aiperf.json",
        "profile_export_aiperf.csv",
        "profile_export.jsonl",
    ] {
        assert_eq!(
            fs::read(run.join(file)).unwrap(),
            fs::read(tmp.path().join("runs/again").join(file)).unwrap(),
            "{file}"
        );
    }
}

#[test]
fn aiperf_dir_that_is_a_file_is_a_usage_error_before_the_run() {
    let tmp = TempDir::new().unwrap();
    fs::write(tmp.path().join("trace.jsonl"), TRACE).unwrap();
    fs::write(tmp.path().join("taken"), "x").unwrap();
    let out = dynosim(
        tmp.path(),
        &[
            "trace.jsonl",
            "--aiperf-dir",
            "taken",
            "--report-json",
            "r.json",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--aiperf-dir: taken exists and is not a directory"),
        "{stderr}"
    );
    assert!(!tmp.path().join("r.json").exists());
}

#[test]
fn compare_two_reports_prints_relative_differences() {
    let tmp = TempDir::new().unwrap();
    let one = replay(tmp.path(), "1", "one.json", None);
    let two = replay(tmp.path(), "3", "three.json", None);
    let out = dynosim(tmp.path(), &["compare", "one.json", "three.json", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let compared: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(compared["a"]["kind"], "dynosim report");
    let metrics = compared["metrics"].as_array().unwrap();
    assert_eq!(metrics.len(), 19);
    let ttft_p90 = &metrics[2];
    assert_eq!(
        (ttft_p90["metric"].as_str(), ttft_p90["stat"].as_str()),
        (Some("TTFT"), Some("p90"))
    );
    let (a, b) = (number(&one, "p90_ttft_ms"), number(&two, "p90_ttft_ms"));
    assert_eq!(number(ttft_p90, "a"), a);
    assert_eq!(number(ttft_p90, "b"), b);
    assert!(close(number(ttft_p90, "relative_difference"), (b - a) / a));

    let table = dynosim(tmp.path(), &["compare", "one.json", "three.json"]);
    assert!(table.status.success());
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.starts_with("A: one.json (dynosim report)\nB: three.json (dynosim report)\n"));
    for label in [
        "TTFT mean (ms)",
        "TTST p99 (ms)",
        "ITL p50 (ms)",
        "E2E p90 (ms)",
        "Request throughput (requests/sec)",
        "Output token throughput (tokens/sec)",
    ] {
        assert!(text.contains(label), "{label} in\n{text}");
    }
}

#[test]
fn compare_report_against_aiperf_dir_of_the_same_run_agrees() {
    let tmp = TempDir::new().unwrap();
    let report = replay(tmp.path(), "2", "report.json", Some("sim"));
    let out = dynosim(tmp.path(), &["compare", "report.json", "sim", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let compared: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(compared["b"]["kind"], "AIPerf run directory");
    for row in compared["metrics"].as_array().unwrap() {
        // Means and throughputs are the same numbers; percentiles differ only by method.
        if row["stat"] == "mean" || row["stat"] == "value" {
            assert!(close(number(row, "a"), number(row, "b")), "{row}");
        }
    }
    assert_eq!(
        number(&compared["metrics"][0], "a"),
        number(&report, "mean_ttft_ms")
    );
}

#[test]
fn compare_bad_inputs_are_usage_errors_naming_file_and_field() {
    let tmp = TempDir::new().unwrap();
    fs::write(tmp.path().join("partial.json"), r#"{"mean_ttft_ms": 1.0}"#).unwrap();
    fs::write(tmp.path().join("broken.json"), "{").unwrap();
    fs::create_dir(tmp.path().join("empty")).unwrap();
    for (args, expected) in [
        (
            vec!["compare", "partial.json", "partial.json"],
            "partial.json: field \"median_ttft_ms\" is missing",
        ),
        (
            vec!["compare", "broken.json", "partial.json"],
            "broken.json is not valid JSON",
        ),
        (
            vec!["compare", "empty", "partial.json"],
            "empty is a directory without profile_export_aiperf.json",
        ),
        (
            vec!["compare", "missing.json", "partial.json"],
            "cannot read missing.json",
        ),
        (vec!["compare", "partial.json"], "required"),
    ] {
        let out = dynosim(tmp.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn aiperf_loader_reads_the_directory_with_the_reports_metrics() {
    let Some(python) = common::aiperf_python_or_skip("aiperf_loader_reads_the_directory") else {
        return;
    };
    let tmp = TempDir::new().unwrap();
    let report = replay(tmp.path(), "2", "report.json", Some("sim"));
    let script = r#"
import json, sys
from pathlib import Path
from aiperf.plot.core.data_loader import DataLoader
run = DataLoader().load_run(Path(sys.argv[1]))
out = {"requests": len(run.requests)}
for tag in ["time_to_first_token", "time_to_second_token", "inter_token_latency",
            "request_latency", "request_throughput", "output_token_throughput",
            "total_token_throughput", "request_count"]:
    m = run.get_metric(tag)
    m = m if isinstance(m, dict) else m.model_dump()
    out[tag] = {k: m.get(k) for k in ["unit", "avg", "min", "max"]}
print(json.dumps(out))
"#;
    let out = Command::new(&python)
        .args(["-c", script, "sim"])
        .current_dir(tmp.path())
        .env("HOME", tmp.path())
        .output()
        .expect("the aiperf Python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let loaded: Value = serde_json::from_slice(
        out.stdout
            .split(|b| *b == b'\n')
            .rfind(|l| !l.is_empty())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(loaded["requests"], 6);
    for (tag, key) in [
        ("time_to_first_token", "ttft_ms"),
        ("time_to_second_token", "ttst_ms"),
        ("inter_token_latency", "tpot_ms"),
        ("request_latency", "e2e_latency_ms"),
    ] {
        assert_eq!(loaded[tag]["unit"], "ms");
        for (stat, prefix) in [("avg", "mean"), ("min", "min"), ("max", "max")] {
            let (theirs, ours) = (
                number(&loaded[tag], stat),
                number(&report, &format!("{prefix}_{key}")),
            );
            assert!(close(theirs, ours), "{tag}.{stat}: {theirs} vs {ours}");
        }
    }
    for (tag, key) in [
        ("request_throughput", "request_throughput_rps"),
        ("output_token_throughput", "output_throughput_tok_s"),
        ("total_token_throughput", "total_throughput_tok_s"),
        ("request_count", "completed_requests"),
    ] {
        assert!(
            close(number(&loaded[tag], "avg"), number(&report, key)),
            "{tag}"
        );
    }
}

#[test]
fn aiperf_plot_draws_the_directory() {
    let Some(python) = common::aiperf_python_or_skip("aiperf_plot_draws_the_directory") else {
        return;
    };
    let tmp = TempDir::new().unwrap();
    replay(tmp.path(), "2", "report.json", Some("sim"));
    let out = Command::new(&python)
        .args(["-m", "aiperf", "plot", "sim", "--output", "plots"])
        .current_dir(tmp.path())
        // `aiperf plot` writes its default configuration under $HOME.
        .env("HOME", tmp.path())
        .output()
        .expect("aiperf plot runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = fs::read_to_string(tmp.path().join("plots/aiperf_plot.log")).unwrap_or_default();
    assert!(
        !log.contains("DataLoadError") && !log.contains("Failed to load"),
        "{log}"
    );
    let pngs = fs::read_dir(tmp.path().join("plots"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "png")
        })
        .count();
    if log.contains("Kaleido requires Google Chrome") {
        // PNG rendering needs Chrome; every other failure above is ours.
        let failures: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
        eprintln!(
            "aiperf plot loaded the run; PNGs not drawn without Chrome ({} plots failed to render)",
            failures.len()
        );
    } else {
        // A single run without timeslices or GPU telemetry gets AIPerf's two TTFT plots
        // (ttft_over_time, ttft_timeline); the others say their data source is absent.
        assert!(!log.contains(" ERROR "), "{log}");
        assert!(pngs >= 2, "aiperf plot drew {pngs} PNGs:\n{stdout}\n{log}");
    }
}
