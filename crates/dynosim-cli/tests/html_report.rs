//! `--html-report` and `--quiet`, run as a user types them; the page of the conversation trace
//! on 4 workers opened in headless Chromium (skipped, saying so, where Chromium or
//! `../shared` is absent).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::{dynosim, text, with_args};

const SYNTHETIC: [&str; 10] = [
    "--input-tokens",
    "600",
    "--output-tokens",
    "20",
    "--request-count",
    "60",
    "--request-rate",
    "20",
    "--num-workers",
    "3",
];

/// The JSON the page script reads.
fn page_data(page: &str) -> Value {
    let marker = r#"<script type="application/json" id="run-data">"#;
    let start = page.find(marker).expect("the page holds its data") + marker.len();
    let end = start + page[start..].find("</script>").unwrap();
    serde_json::from_str(&page[start..end]).expect("the data is JSON")
}

/// The page outside the vendored library references nothing to fetch.
fn assert_self_contained(page: &str) {
    let own = page.replace(dynosim::report::html::CHART_JS, "");
    for reference in ["src=", "href=", "http://", "https://", "@import", "url("] {
        assert!(!own.contains(reference), "the page references {reference}");
    }
}

#[test]
fn quiet_prints_nothing_and_writes_the_outputs() {
    let dir = TempDir::new().unwrap();
    let out = dynosim(
        dir.path(),
        &with_args(&SYNTHETIC, &["--report-json", "r.json", "--quiet"]),
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "stdout: {}", text(&out.stdout));
    // Not a terminal: no progress bar either.
    assert!(out.stderr.is_empty(), "stderr: {}", text(&out.stderr));
    assert!(dir.path().join("r.json").is_file());
}

#[test]
fn html_report_holds_the_run_its_configuration_and_nothing_to_fetch() {
    let dir = TempDir::new().unwrap();
    let out = dynosim(
        dir.path(),
        &with_args(
            &SYNTHETIC,
            &["--report-json", "r.json", "--html-report", "out/run.html"],
        ),
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    // The table is still printed without --quiet; stderr (not a terminal) stays empty.
    assert!(text(&out.stdout).contains("Saved full report to: r.json"));
    assert!(out.stderr.is_empty(), "stderr: {}", text(&out.stderr));

    let page = fs::read_to_string(dir.path().join("out/run.html")).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_self_contained(&page);
    assert!(page.contains("<th>command</th><td>dynosim --input-tokens 600"));
    assert!(page.contains("<th>num_workers</th><td>3</td>"));
    let data = page_data(&page);
    let report: Value =
        serde_json::from_str(&fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    // The page's report is the run's report (wall time aside: the same value, read twice).
    for (key, value) in report.as_object().unwrap() {
        assert_eq!(&data["report"][key], value, "{key}");
    }
    let series = &data["series"];
    let tokens: u64 = series["output_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(tokens, 60 * 20);
    assert_eq!(series["pools"][0]["workers"].as_array().unwrap().len(), 3);
}

#[test]
fn an_unwritable_html_report_fails_before_the_run_and_leaves_no_file() {
    let dir = TempDir::new().unwrap();
    fs::create_dir(dir.path().join("taken")).unwrap();
    let out = dynosim(
        dir.path(),
        &with_args(
            &SYNTHETIC,
            &["--report-json", "r.json", "--html-report", "taken"],
        ),
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("cannot write the HTML report to taken: it is a directory"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("r.json").exists(),
        "no half-written outputs"
    );
    let left: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "only the directory that was there");
}

/// What Chromium printed.
struct Printed {
    stdout: String,
    stderr: String,
    success: bool,
}

/// Runs `chromium` with `args` under a deadline; `None` when it did not finish in time. Its
/// output goes to files (a full pipe nobody reads would stall it).
fn chromium(binary: &Path, profile: &Path, args: &[&str]) -> Option<Printed> {
    let stdout_path = profile.with_extension("stdout");
    let stderr_path = profile.with_extension("stderr");
    let mut child = Command::new(binary)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            // Offline: no host resolves, so the page must not need one.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--enable-logging=stderr",
            "--v=0",
            // The page draws synchronously; virtual time lets it finish however loaded the
            // machine is.
            "--virtual-time-budget=20000",
            "--window-size=1300,2800",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(fs::File::create(&stdout_path).unwrap())
        .stderr(fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("chromium starts");
    // Generous: a loaded 2-core machine with other builds running.
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(status) = child.try_wait().expect("chromium can be waited for") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    Some(Printed {
        stdout: text(&fs::read(&stdout_path).unwrap()),
        stderr: text(&fs::read(&stderr_path).unwrap()),
        success: status.success(),
    })
}

/// The installed Chromium, or `None` after a `SKIPPED <test>: …` line (the CI script counts
/// the test as skipped).
fn chromium_or_skip(test: &str) -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file());
    if found.is_none() {
        eprintln!("SKIPPED {test}: Chromium is not installed (Debian package `chromium`)");
    }
    found
}

/// The DOM of the page at `url` once headless Chromium has loaded it, after checking that the
/// page printed nothing to the console and reported all `plots` of its plots drawn.
fn page_dom_with_every_plot_drawn(
    browser: &Path,
    profile: &Path,
    url: &str,
    plots: usize,
) -> String {
    let Some(dom) = chromium(browser, profile, &["--dump-dom", url]) else {
        panic!("headless Chromium did not finish loading the page within 240 s");
    };
    let console: Vec<&str> = dom
        .stderr
        .lines()
        .filter(|line| line.contains(":CONSOLE"))
        .collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    let status = format!(r#"<p id="render-status">drawn {plots} of {plots} plots</p>"#);
    assert!(
        dom.stdout.contains(&status),
        "the page did not report every plot drawn: {}",
        dom.stdout
            .lines()
            .find(|line| line.contains("render-status"))
            .unwrap_or("(no status line)")
    );
    dom.stdout
}

#[test]
fn conversation_trace_report_opens_in_headless_chromium_with_every_plot_drawn() {
    let Some(browser) = chromium_or_skip(
        "conversation_trace_report_opens_in_headless_chromium_with_every_plot_drawn",
    ) else {
        return;
    };
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/conversation_trace.jsonl");
    if !trace.is_file() {
        eprintln!("SKIPPED {}: {} is absent", module_path!(), trace.display());
        return;
    }
    let dir = TempDir::new().unwrap();
    let trace = trace.to_str().unwrap();
    let out = dynosim(
        dir.path(),
        &[
            trace,
            "--num-workers",
            "4",
            "--report-json",
            "r.json",
            "--html-report",
            "run.html",
            "--quiet",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let page_path = dir.path().join("run.html");
    let size = fs::metadata(&page_path).unwrap().len();
    assert!(size < 3_000_000, "the page is {size} bytes");
    let page = fs::read_to_string(&page_path).unwrap();
    assert_self_contained(&page);
    assert_eq!(
        page_data(&page)["series"]["pools"][0]["workers"]
            .as_array()
            .unwrap()
            .len(),
        4
    );

    let url = format!("file://{}", page_path.display());
    let profile = dir.path().join("chromium-profile");
    page_dom_with_every_plot_drawn(&browser, &profile, &url, 8);

    // A screenshot of the page: far from blank (a blank page of this size is a few KB).
    let shot = dir.path().join("shot.png");
    let screenshot = format!("--screenshot={}", shot.display());
    let Some(done) = chromium(&browser, &profile, &[&screenshot, &url]) else {
        panic!("headless Chromium did not finish the screenshot within 240 s");
    };
    assert!(done.success, "{}", done.stderr);
    let png = fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    assert!(png.len() > 100_000, "the screenshot is {} bytes", png.len());
}

/// The planner example (aggregated, load mode) on the burst trace of the parity cases.
const PLANNER_RUN: [&str; 5] = [
    "--planner-config",
    r#"{"mode":"agg","optimization_target":"load","decode_scale_up_kv_rate":60,
        "decode_scale_down_kv_rate":20,"report_interval_hours":null,"live_dashboard_port":0}"#,
    "--extra-engine-args",
    r#"{"num_gpu_blocks":1024,"block_size":64,"startup_time":5}"#,
    "--quiet",
];

fn planner_trace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/parity/traces/planner_burst.jsonl")
}

/// Replays the planner trace ([`PLANNER_RUN`]) in `dir` with `--html-report run.html`.
fn run_planner_with_html_report(dir: &Path) {
    let trace = planner_trace();
    let mut args = vec![trace.to_str().unwrap(), "--html-report", "run.html"];
    args.extend(PLANNER_RUN);
    let out = dynosim(dir, &args);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
}

#[test]
fn a_planner_run_puts_its_scaling_events_in_the_html_report() {
    let dir = TempDir::new().unwrap();
    run_planner_with_html_report(dir.path());
    let page = fs::read_to_string(dir.path().join("run.html")).unwrap();
    assert_self_contained(&page);
    assert!(page.contains(r#"<canvas id="plot-workers">"#));
    let scaling = &page_data(&page)["scaling"];
    // The reference's events on this run (parity case planner_agg_load): one more worker every
    // 10 s from 25 s to 85 s, then two fewer.
    assert_eq!(scaling["ticks"], 24);
    assert_eq!(scaling["initial"]["agg"], 1);
    let events = scaling["events"].as_array().unwrap();
    assert_eq!(events.len(), 9);
    assert_eq!(events[0]["at_s"], 25.0);
    assert_eq!(
        (events[0]["from"].as_u64(), events[0]["to"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(events[6]["to"], 8);
    assert_eq!(events[8]["reason"], "scale_down");
    assert_eq!(events[8]["to"], 6);
    // Without a planner: no scaling section.
    let trace = planner_trace();
    let plain = dynosim(
        dir.path(),
        &[
            trace.to_str().unwrap(),
            "--html-report",
            "plain.html",
            "--quiet",
        ],
    );
    assert_eq!(
        plain.status.code(),
        Some(0),
        "stderr: {}",
        text(&plain.stderr)
    );
    let page = fs::read_to_string(dir.path().join("plain.html")).unwrap();
    assert!(!page.contains(r#"<canvas id="plot-workers">"#));
    assert!(page_data(&page).get("scaling").is_none());
}

#[test]
fn a_planner_report_opens_in_headless_chromium_with_its_scaling_drawn() {
    let Some(browser) =
        chromium_or_skip("a_planner_report_opens_in_headless_chromium_with_its_scaling_drawn")
    else {
        return;
    };
    let dir = TempDir::new().unwrap();
    run_planner_with_html_report(dir.path());
    let page_path = dir.path().join("run.html");
    let url = format!("file://{}", page_path.display());
    let profile = dir.path().join("chromium-profile");
    // The eight plots of every run and the workers plot.
    let dom = page_dom_with_every_plot_drawn(&browser, &profile, &url, 9);
    assert!(
        dom.contains("9 scaling events over 24 planner ticks."),
        "no scaling summary"
    );
    // The events table: a header row and one row per event.
    let table = dom
        .split(r#"<table id="scaling-events">"#)
        .nth(1)
        .and_then(|rest| rest.split("</table>").next())
        .expect("the events table");
    assert_eq!(table.matches("<tr>").count(), 10, "{table}");
    assert!(table.contains(r#"<td class="up">scale_up</td>"#));
    assert!(table.contains(r#"<td class="down">scale_down</td>"#));
}
