//! The planner's SLA mode run as a user types it: the planner example's burst trace (1 req/s,
//! then 12 req/s from 20 s to 60 s, then 1 req/s to 120 s), aggregated workers on a measured
//! profile so the perf model is seeded from the start.

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs dynosim from the repository root, its report in a fresh directory.
fn dynosim(args: &[&str]) -> Output {
    let dir = tempfile::TempDir::new().unwrap();
    let report = dir.path().join("report.json");
    Command::new(env!("CARGO_BIN_EXE_dynosim"))
        .args(args)
        .arg("--report-json")
        .arg(&report)
        .current_dir(repo())
        .output()
        .expect("the dynosim binary runs")
}

const TRACE: &str = "tests/parity/traces/planner_burst.jsonl";
const PROFILED: &str = r#"{"num_gpu_blocks":1024,"block_size":64,"startup_time":5,"planner_profile_data":"tests/parity/profiles/dense.npz"}"#;

fn throughput_only(predictor: &str) -> String {
    format!(
        r#"{{"mode":"agg","optimization_target":"sla","ttft_ms":2000,"itl_ms":40,
            "load_predictor":"{predictor}","throughput_adjustment_interval_seconds":10,
            "enable_throughput_scaling":true,"enable_load_scaling":false}}"#
    )
}

/// `(at_s, from, to)` of the `Scaling events:` block.
fn events(stdout: &str) -> Vec<(f64, usize, usize)> {
    stdout
        .lines()
        .filter_map(|line| {
            let line = line.trim().strip_prefix("t=")?;
            let (at, rest) = line.split_once("s [agg]: ")?;
            let (from, rest) = rest.split_once(" -> ")?;
            let to = rest.split_whitespace().next()?;
            Some((at.parse().ok()?, from.parse().ok()?, to.parse().ok()?))
        })
        .collect()
}

#[test]
fn the_throughput_loop_follows_the_burst_and_back() {
    for predictor in ["constant", "kalman"] {
        let config = throughput_only(predictor);
        let out = dynosim(&[
            TRACE,
            "--planner-config",
            &config,
            "--extra-engine-args",
            PROFILED,
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{predictor}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("Planner ticks: 24"), "{stdout}");
        let events = events(&stdout);
        // Up once the burst's first window is seen (the burst starts at 20 s and the loop
        // runs every 10 s), above one worker during it, back to one after it.
        let (first_at, first_from, first_to) = events[0];
        assert_eq!(first_from, 1, "{predictor}: {events:?}");
        assert!(
            first_to > 1 && (20.0..=40.0).contains(&first_at),
            "{predictor}: {events:?}"
        );
        let last = events.last().unwrap();
        assert_eq!(last.2, 1, "{predictor}: {events:?}");
        assert!(last.0 > 60.0, "{predictor}: {events:?}");
    }
}

#[test]
fn sla_runs_are_deterministic() {
    let config = throughput_only("kalman");
    let run = || {
        dynosim(&[
            TRACE,
            "--planner-config",
            &config,
            "--extra-engine-args",
            PROFILED,
        ])
    };
    let (a, b) = (run(), run());
    let planner_lines = |out: &Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.trim_start().starts_with("t=") || l.starts_with("Planner ticks"))
            .map(str::to_string)
            .collect()
    };
    assert!(!planner_lines(&a).is_empty());
    assert_eq!(planner_lines(&a), planner_lines(&b));
}

#[test]
fn python_only_predictors_are_usage_errors_pointing_to_the_python_api() {
    let config = throughput_only("arima");
    let out = dynosim(&[TRACE, "--planner-config", &config]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--planner-config: load_predictor: 'arima' is not built into"),
        "{stderr}"
    );
    assert!(
        stderr.contains("scaling_policy=ReplayPlannerAdapter"),
        "{stderr}"
    );
}
