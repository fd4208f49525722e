//! Every run ends, and says how it ended: a planner cannot keep a run alive once no request
//! can progress (the dead-end error, as without a planner), a time cap goes with every feature,
//! and requests that did not complete are counted by reason (report keys, a table line and a
//! one-line warning on stderr).

use std::fs;
use std::path::Path;
use std::time::Duration;

use tempfile::TempDir;

mod common;
use common::{read_json_object as read_json, text};

/// The README's planner: load thresholds in the aggregated mode, a tick every 5 s.
const PLANNER: &str = r#"{"mode":"agg","optimization_target":"load","decode_scale_up_kv_rate":60,"decode_scale_down_kv_rate":20,"load_adjustment_interval_seconds":5}"#;
/// Workers of 1024 blocks (65,536 tokens) that take 5 s to start.
const ENGINE: &str = r#"{"num_gpu_blocks":1024,"startup_time":5}"#;

/// Line 4279 of the shared conversation trace (65,428 prompt + 458 output tokens: more than
/// one worker's KV cache holds), at time 0; synthesized alike when ../shared is absent.
fn oversize_request() -> String {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/conversation_trace.jsonl");
    if let Ok(trace) = fs::read_to_string(&shared) {
        let line = trace.lines().nth(4278).expect("the trace has line 4279");
        let mut row: serde_json::Value = serde_json::from_str(line).expect("a JSON row");
        assert_eq!(
            row["input_length"], 65428,
            "line 4279 is the oversize request"
        );
        row["timestamp"] = 0.into();
        return format!("{row}\n");
    }
    let ids: Vec<String> = (0..128).map(|id| id.to_string()).collect();
    format!(
        "{{\"timestamp\": 0, \"input_length\": 65428, \"output_length\": 458, \"hash_ids\": [{}]}}\n",
        ids.join(", ")
    )
}

fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    let child = common::command(dir, args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    // A run that no longer ends is what this file is about: a short deadline.
    common::wait_with_deadline(child, Duration::from_secs(120))
}

#[test]
fn a_planner_run_whose_request_fits_no_worker_ends_at_the_dead_end() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("one.jsonl"), oversize_request()).unwrap();
    let without = run(
        dir.path(),
        &[
            "one.jsonl",
            "--extra-engine-args",
            ENGINE,
            "--report-json",
            "r.json",
        ],
    );
    let with = run(
        dir.path(),
        &[
            "one.jsonl",
            "--planner-config",
            PLANNER,
            "--extra-engine-args",
            ENGINE,
            "--report-json",
            "r.json",
        ],
    );
    for out in [&without, &with] {
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.starts_with(
                "dynosim: error: offline replay reached a dead end with 1 in-flight requests \
                 remaining"
            ),
            "{stderr}"
        );
    }
    // The same error with and without the planner, and no report.
    assert_eq!(text(&with.stderr), text(&without.stderr));
    assert!(!dir.path().join("r.json").exists());
}

/// A trace of `count` requests of 2,000 prompt tokens, one every 100 ms.
fn steady_trace(dir: &Path, count: usize) -> &'static str {
    let mut text = String::new();
    for i in 0..count {
        text.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": 2000, \"output_length\": 100, \
             \"hash_ids\": [{}, {}, {}, {}]}}\n",
            i * 100,
            4 * i,
            4 * i + 1,
            4 * i + 2,
            4 * i + 3
        ));
    }
    fs::write(dir.join("steady.jsonl"), text).unwrap();
    "steady.jsonl"
}

#[test]
fn a_time_cap_goes_with_a_planner() {
    let dir = TempDir::new().unwrap();
    let trace = steady_trace(dir.path(), 400);
    let out = run(
        dir.path(),
        &[
            trace,
            "--planner-config",
            PLANNER,
            "--extra-engine-args",
            ENGINE,
            "--max-sim-time-seconds",
            "12",
            "--report-json",
            "r.json",
        ],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = read_json(&dir.path().join("r.json"));
    let int = |key: &str| report[key].as_i64().unwrap_or_else(|| panic!("{key}"));
    // Arrivals stop at the cap (one every 100 ms), and nothing ends past it.
    assert!((100..=121).contains(&int("num_requests")), "{report:?}");
    assert!(report["duration_ms"].as_f64().unwrap() <= 12_000.0);
    // Two ticks (5 s and 10 s) fit under the cap.
    assert!(stdout.contains("Planner ticks: 2\n"), "{stdout}");
}
