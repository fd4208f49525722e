//! Live replay (`--replay-mode online`) run as a user would type it: model time follows the
//! wall clock (`--online-speed` times faster), the report has the offline report's keys and
//! agrees with the offline run of the same input, the reference's online limits are usage
//! errors, and Ctrl-C ends a run early with the report of what finished.
//!
//! Each test takes under 10 s of wall time (arrivals span 8.5 s at speed 1, 15 s at speed 10);
//! timing checks are tolerances (15%) on the simulation's own wall time, which holds on a
//! loaded machine because a live run spends almost all of it sleeping.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tempfile::TempDir;

mod common;
use common::read_json_object as read_json;

/// A Mooncake trace of `count` requests, one every `interval_ms`, three shared prefixes.
fn write_trace(dir: &Path, count: usize, interval_ms: usize) -> PathBuf {
    let mut text = String::new();
    for i in 0..count {
        let own: Vec<String> = (0..1 + i % 3)
            .map(|k| (1000 + 10 * i + k).to_string())
            .collect();
        text.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \
             \"hash_ids\": [{}, {}]}}\n",
            i * interval_ms,
            512 * (1 + own.len()),
            20 + (i * 7) % 50,
            i % 3,
            own.join(", ")
        ));
    }
    let path = dir.join(format!("trace_{count}x{interval_ms}.jsonl"));
    fs::write(&path, text).unwrap();
    path
}

/// The dynosim binary, to run in `dir`.
fn command(dir: &Path) -> Command {
    common::command(dir, &[])
}

fn dynosim(dir: &Path, args: &[&str]) -> Output {
    common::dynosim(dir, args)
}

fn report(dir: &Path, trace: &Path, name: &str, extra: &[&str]) -> Map<String, Value> {
    let path = dir.join(format!("{name}.json"));
    let mut args = vec![
        trace.to_str().unwrap(),
        "--report-json",
        path.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = dynosim(dir, &args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    read_json(&path)
}

fn float(report: &Map<String, Value>, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key}: {:?}", report.get(key)))
}

/// The live run's simulation took `duration_ms / speed` of wall time, within 15%.
fn assert_paced(report: &Map<String, Value>, speed: f64) {
    let expected_ms = float(report, "duration_ms") / speed;
    let wall_ms = float(report, "wall_time_ms");
    assert!(
        (wall_ms / expected_ms - 1.0).abs() < 0.15,
        "wall {wall_ms:.0} ms, expected about {expected_ms:.0} ms at speed {speed}"
    );
}

/// The live report has the offline report's keys and agrees with it.
fn assert_agrees_with_offline(live: &Map<String, Value>, offline: &Map<String, Value>) {
    let keys = |r: &Map<String, Value>| r.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(live), keys(offline));
    assert_eq!(live["completed_requests"], offline["completed_requests"]);
    for (key, tolerance) in [("mean_e2e_latency_ms", 0.05), ("mean_ttft_ms", 0.10)] {
        let (a, b) = (float(live, key), float(offline, key));
        assert!(
            (a / b - 1.0).abs() < tolerance,
            "{key}: live {a}, offline {b}"
        );
    }
}

/// Replays `trace` on two workers behind `router`, offline and then live at `speed`; checks
/// the live run's pace and its agreement with the offline run; returns the live report.
fn replay_live(dir: &Path, trace: &Path, router: &str, speed: &str) -> Map<String, Value> {
    let base = ["--num-workers", "2", "--router-mode", router];
    let offline = report(dir, trace, &format!("offline_{router}"), &base);
    let live_args = [
        &base[..],
        &["--replay-mode", "online", "--online-speed", speed],
    ]
    .concat();
    let live = report(dir, trace, &format!("live_{router}_{speed}"), &live_args);
    assert_paced(&live, speed.parse().unwrap());
    assert_agrees_with_offline(&live, &offline);
    live
}

#[test]
fn speed_one_takes_the_model_time_on_the_wall_clock() {
    let dir = TempDir::new().unwrap();
    // Arrivals over 8.5 s: as long as a speed-1 run can be while the test stays under 10 s.
    let trace = write_trace(dir.path(), 35, 250);
    let started = Instant::now();
    let live = replay_live(dir.path(), &trace, "round_robin", "1");
    assert!(float(&live, "duration_ms") > 8_500.0);
    assert!(started.elapsed() >= Duration::from_millis(8_500));
}

#[test]
fn online_speed_ten_takes_a_tenth_with_round_robin_and_the_kv_router() {
    let dir = TempDir::new().unwrap();
    // Arrivals over 15 s of model time: about 1.5 s at speed 10.
    let trace = write_trace(dir.path(), 61, 250);
    for router in ["round_robin", "kv_router"] {
        let live = replay_live(dir.path(), &trace, router, "10");
        assert!(float(&live, "duration_ms") > 15_000.0);
    }
}

#[test]
fn the_references_online_limits_are_usage_errors() {
    let dir = TempDir::new().unwrap();
    let trace = write_trace(dir.path(), 3, 10);
    let trace = trace.to_str().unwrap();
    let online = |extra: &[&str]| {
        let mut args = vec![trace, "--replay-mode", "online"];
        args.extend_from_slice(extra);
        dynosim(dir.path(), &args)
    };
    for (extra, message) in [
        (
            &["--extra-engine-args", r#"{"dp_size":2}"#][..],
            "online replay only supports data_parallel_size=1, got 2",
        ),
        (
            &[
                "--prefill-engine-args",
                r#"{"worker_type":"prefill"}"#,
                "--decode-engine-args",
                r#"{"worker_type":"decode"}"#,
            ][..],
            "disagg replay only supports replay_mode='offline'",
        ),
        (
            &["--trace-format", "mooncake-delta"][..],
            "mooncake-delta trace format is not supported for online replay",
        ),
        (
            &["--online-speed", "0"][..],
            "online_speed must be a finite positive number, got 0",
        ),
    ] {
        let out = online(extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(message), "{extra:?}: {stderr}");
    }
    let out = dynosim(dir.path(), &[trace, "--online-speed", "2"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--online-speed: online_speed only applies to replay_mode='online'"));
}

#[cfg(unix)]
#[test]
fn ctrl_c_ends_a_live_run_with_the_report_of_what_finished() {
    let dir = TempDir::new().unwrap();
    // A minute of arrivals; interrupted after about 2 s.
    let trace = write_trace(dir.path(), 240, 250);
    let report_path = dir.path().join("report.json");
    let records_path = dir.path().join("records.jsonl");
    let child = command(dir.path())
        .args([
            trace.to_str().unwrap(),
            "--replay-mode",
            "online",
            "--report-json",
            report_path.to_str().unwrap(),
            "--report-jsonl",
            records_path.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: sends SIGINT to the child this test spawned.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let started = Instant::now();
    let out = common::wait_with_deadline(child, Duration::from_secs(60));
    assert!(started.elapsed() < Duration::from_secs(5), "ends promptly");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let report = read_json(&report_path);
    let completed = report["completed_requests"].as_u64().unwrap();
    assert!(completed > 0 && completed < 240, "completed {completed}");
    assert!(float(&report, "duration_ms") < 10_000.0);
    // Every record line is whole JSON; one per request that arrived.
    let records = fs::read_to_string(&records_path).unwrap();
    let lines: Vec<Value> = records
        .lines()
        .map(|line| serde_json::from_str(line).expect("a whole record"))
        .collect();
    assert!(lines.len() as u64 >= completed && lines.len() < 240);
    // Nothing half-written is left behind.
    let leftovers: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.contains(".tmp") || name.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
