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

/// A trace of three requests: one whose prompt is over `max_model_len` 4096 (rejected), one
/// that completes, one that arrives at 5 s and is in flight at a 5.01 s cap, and one past the
/// cap.
const MIXED: &str = "{\"timestamp\": 0, \"input_length\": 5000, \"output_length\": 10, \"hash_ids\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}
{\"timestamp\": 10, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [11, 12]}
{\"timestamp\": 5000, \"input_length\": 600, \"output_length\": 400, \"hash_ids\": [13, 14]}
{\"timestamp\": 9000, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [15, 16]}
";

#[test]
fn requests_that_did_not_complete_are_counted_by_reason() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("mixed.jsonl"), MIXED).unwrap();
    let out = run(
        dir.path(),
        &[
            "mixed.jsonl",
            "--extra-engine-args",
            r#"{"max_model_len":4096}"#,
            "--max-sim-time-seconds",
            "5.01",
            "--report-json",
            "r.json",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = read_json(&dir.path().join("r.json"));
    let int = |key: &str| {
        report[key]
            .as_i64()
            .unwrap_or_else(|| panic!("{key}: {report:?}"))
    };
    assert_eq!((int("num_requests"), int("completed_requests")), (3, 1));
    assert_eq!(
        [
            int("rejected_requests"),
            int("canceled_requests"),
            int("failed_requests"),
            int("unfinished_requests"),
            int("unarrived_requests"),
            int("interrupted"),
        ],
        [1, 0, 0, 1, 1, 0]
    );
    let expected =
        "3 of 4 requests did not complete: 1 rejected by an admission or queue limit, 1 \
                    in flight at the time cap, 1 not arrived by the time cap";
    assert_eq!(stderr, format!("dynosim: warning: {expected}\n"));
    assert!(
        stdout.contains(
            "\nRequests Not Completed: 3 of 4 (1 rejected by an admission or queue limit, 1 in \
             flight at the time cap, 1 not arrived by the time cap)\nSaved full report to: \
             r.json\n"
        ),
        "{stdout}"
    );
    // The reference's keys are all there, with the accounting after them.
    assert_eq!(report.len(), 74 + 6);
}

#[test]
fn a_run_where_every_request_completes_has_only_the_references_keys() {
    let dir = TempDir::new().unwrap();
    let trace = steady_trace(dir.path(), 20);
    let out = run(dir.path(), &[trace, "--report-json", "r.json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stderr), "");
    assert!(!text(&out.stdout).contains("Not Completed"));
    assert_eq!(read_json(&dir.path().join("r.json")).len(), 74);
}

#[cfg(unix)]
#[test]
fn ctrl_c_ends_an_offline_run_with_a_report_marked_interrupted() {
    let dir = TempDir::new().unwrap();
    // Far more than the test waits for: the run is cut by Ctrl-C.
    let child = common::command(
        dir.path(),
        &[
            "--input-tokens",
            "1000",
            "--output-tokens",
            "500",
            // Five times what a quiet 2-core machine simulates before the first progress line
            // (400,000 finished there, within the first 5 s, once decode passes got cheaper).
            "--request-count",
            "2000000",
            // Slow arrivals: small batches, so each request costs hundreds of passes and the
            // run cannot release every request before the progress line and the Ctrl-C.
            "--request-rate",
            "5",
            "--report-json",
            "r.json",
            "--html-report",
            "r.html",
        ],
    )
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    // A progress line with requests ended (a run prints them on stderr when it is not a
    // terminal) says that the simulation is under way.
    let output = interrupt_once_progressing(child);
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("dynosim: interrupted: "), "{stderr}");
    assert!(stderr.contains("(the run was interrupted)"), "{stderr}");
    assert!(
        stdout.contains("\nInterrupted: the report covers the run until Ctrl-C\n"),
        "{stdout}"
    );
    let report = read_json(&dir.path().join("r.json"));
    assert_eq!(report["interrupted"], 1);
    let completed = report["completed_requests"].as_i64().unwrap();
    assert!(completed > 0, "{report:?}");
    assert!(report["unarrived_requests"].as_i64().unwrap() > 0);
    let html = fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert!(html.contains("</html>"));
}

/// Sends SIGINT to `child` once its stderr shows a progress line of the simulation with at
/// least one request ended (not the setup's line: on a loaded machine generating the workload
/// can outlast the first progress interval), then collects its output, with a deadline.
#[cfg(unix)]
fn interrupt_once_progressing(mut child: std::process::Child) -> std::process::Output {
    use std::io::{BufRead, BufReader};
    let stderr = child.stderr.take().expect("stderr is piped");
    let (sender, receiver) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.starts_with("progress: model time") && !line.contains(", 0/") {
                let _ = sender.send(());
            }
            lines.push(line);
        }
        lines
    });
    let progressing = receiver.recv_timeout(Duration::from_secs(120)).is_ok();
    if !progressing {
        let _ = child.kill();
    }
    assert!(progressing, "no progress line within 120 s");
    // SAFETY: sends SIGINT to the child this test spawned.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let mut output = common::wait_with_deadline(child, Duration::from_secs(120));
    let lines = reader.join().expect("stderr is read");
    output.stderr = lines.join("\n").into_bytes();
    output.stderr.push(b'\n');
    output
}
