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

fn chromium_binary() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
}

#[test]
fn conversation_trace_report_opens_in_headless_chromium_with_every_plot_drawn() {
    let Some(browser) = chromium_binary() else {
        eprintln!(
            "SKIPPED conversation_trace_report_opens_in_headless_chromium_with_every_plot_drawn: \
             Chromium is not installed (Debian package `chromium`)"
        );
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
    let Some(dom) = chromium(&browser, &profile, &["--dump-dom", &url]) else {
        panic!("headless Chromium did not finish loading the page within 240 s");
    };
    let dom_text = &dom.stdout;
    let console: Vec<&str> = dom
        .stderr
        .lines()
        .filter(|line| line.contains(":CONSOLE"))
        .collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert!(
        dom_text.contains(r#"<p id="render-status">drawn 8 of 8 plots</p>"#),
        "the page did not report every plot drawn: {}",
        dom_text
            .lines()
            .find(|line| line.contains("render-status"))
            .unwrap_or("(no status line)")
    );

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
