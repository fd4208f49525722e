//! The progress bar, with stderr on a pseudo-terminal as a user's would be: it is drawn, the
//! run ends (the bar's thread never waits on a lock the main thread holds), and `--quiet`
//! draws nothing. (Without a terminal there is no bar: `html_report.rs` checks stderr stays
//! empty.) Without a terminal, a run long enough prints progress lines, and the display ends
//! with a line giving the simulated duration and where the wall time went.
#![cfg(unix)]

mod common;

use std::fs::File;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs dynosim with stderr on a new pseudo-terminal; returns (exit code, what the terminal
/// received). Panics if it has not ended within a generous deadline (a hang).
fn run_on_terminal(args: &[&str]) -> (Option<i32>, String) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the given integers; null name/termios/size.
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0, "openpty failed");
    // SAFETY: both descriptors were just opened and are owned here alone.
    let (mut master, slave) = unsafe { (File::from_raw_fd(master), File::from_raw_fd(slave)) };
    let dir = tempfile::TempDir::new().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dynosim"))
        .args(args)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut received = Vec::new();
        // Ends with EIO once the child (the last holder of the terminal) exits.
        let mut buffer = [0u8; 4096];
        while let Ok(n) = master.read(&mut buffer) {
            if n == 0 {
                break;
            }
            received.extend_from_slice(&buffer[..n]);
        }
        received
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dynosim did not end with stderr on a terminal (a hang)");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let received = reader.join().unwrap();
    (
        status.code(),
        String::from_utf8_lossy(&received).into_owned(),
    )
}

/// Long enough (debug build) for the bar to draw more than once.
const WORKLOAD: [&str; 12] = [
    "--input-tokens",
    "1000",
    "--output-tokens",
    "200",
    "--request-count",
    "4000",
    "--replay-concurrency",
    "64",
    "--num-workers",
    "2",
    "--report-json",
    "r.json",
];

#[test]
fn the_bar_is_drawn_on_a_terminal_and_the_run_ends() {
    let (code, terminal) = run_on_terminal(&WORKLOAD);
    assert_eq!(code, Some(0), "terminal: {terminal}");
    assert!(
        terminal.contains("/4,000 requests") && terminal.contains("model time"),
        "no progress bar on the terminal: {terminal:?}"
    );
    // The erased bar leaves its closing line.
    assert!(
        terminal.contains("progress: done, model time ")
            && terminal.contains("4,000/4,000 requests ended; wall time "),
        "no closing line on the terminal: {terminal:?}"
    );
}

/// A CI job's run: stdout and stderr are pipes. A run that lasts more than the first line's
/// delay (a live run whose arrivals span 6 s of model time at speed 1, so at least 6 s on any
/// machine) prints progress lines, then a closing line with the report's simulated duration
/// and its simulation wall time; stdout is the table as the reference prints it.
#[test]
fn a_run_without_a_terminal_prints_progress_lines_and_a_closing_line() {
    let dir = tempfile::TempDir::new().unwrap();
    let out = common::dynosim(
        dir.path(),
        &[
            "--input-tokens",
            "100",
            "--output-tokens",
            "10",
            "--request-count",
            "13",
            "--arrival-interval-ms",
            "500",
            "--replay-mode",
            "online",
            "--report-json",
            "r.json",
        ],
    );
    let stderr = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines.len() >= 2, "{stderr}");
    assert!(lines[0].starts_with("progress: model time "), "{stderr}");
    let report = common::read_json_object(&dir.path().join("r.json"));
    let seconds = |key: &str| report[key].as_f64().unwrap() / 1000.0;
    assert!(seconds("duration_ms") >= 6.0, "{report:?}");
    let closing = lines[lines.len() - 1];
    let expected = format!(
        "progress: done, model time {:.1}s, 13/13 requests ended; wall time ",
        seconds("duration_ms")
    );
    assert!(closing.starts_with(&expected), "{closing} / {expected}");
    let simulation = format!("simulation {:.2}s, writing ", seconds("wall_time_ms"));
    assert!(closing.contains(&simulation), "{closing} / {simulation}");
    let stdout = common::text(&out.stdout);
    assert!(
        stdout.starts_with("NVIDIA AIPerf | LLM Metrics\n"),
        "{stdout}"
    );
    assert!(
        stdout.ends_with("\nSaved full report to: r.json\n"),
        "{stdout}"
    );
}

#[test]
fn quiet_draws_no_bar_on_a_terminal() {
    let mut args = WORKLOAD.to_vec();
    args.push("--quiet");
    let (code, terminal) = run_on_terminal(&args);
    assert_eq!(code, Some(0));
    assert!(terminal.is_empty(), "terminal: {terminal:?}");
}

/// `--progress-every` sets the time between progress lines: a live run spanning 3 s of model
/// time (so at least 3 s of wall time) prints a line half a second in and then every second,
/// where the default (10 s) would print none.
#[test]
fn progress_every_sets_the_time_between_lines() {
    let dir = tempfile::TempDir::new().unwrap();
    let args = "--input-tokens 100 --output-tokens 10 --request-count 7 --arrival-interval-ms 500 \
                --replay-mode online --progress lines --progress-every 1 --report-json r.json";
    let args: Vec<&str> = args.split_whitespace().collect();
    let out = common::dynosim(dir.path(), &args);
    let stderr = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let progress_lines = stderr
        .lines()
        .filter(|line| line.starts_with("progress: model time "))
        .count();
    assert!(progress_lines >= 2, "{stderr}");
    assert!(
        stderr.lines().last().unwrap().starts_with("progress: done"),
        "{stderr}"
    );
}

#[test]
fn progress_every_out_of_range_is_a_usage_error() {
    let dir = tempfile::TempDir::new().unwrap();
    let run = "--input-tokens 10 --output-tokens 2 --request-count 1 --replay-concurrency 1";
    for value in ["0", "-1", "1e9", "nan"] {
        let mut args: Vec<&str> = run.split_whitespace().collect();
        args.extend(["--progress-every", value]);
        let out = common::dynosim(dir.path(), &args);
        let stderr = common::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(
            stderr.contains("--progress-every: must be from 0.1 to 86400 seconds, got "),
            "{value}: {stderr}"
        );
        // Refused before the run: no report written.
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "{value}"
        );
    }
    let out = common::dynosim(dir.path(), &["--progress-every", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(common::text(&out.stderr)
        .contains("invalid value 'soon' for '--progress-every <SECONDS>': invalid float value"));
}
