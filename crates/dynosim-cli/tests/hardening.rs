//! Black-box tests of the hardening promises (issue 15): outputs are resolved and checked
//! before the run and written through or replaced as what they name requires, failures leave
//! nothing behind, and every message names what is wrong. Each test is one repro of the issue.

use std::fs;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::{Command, Stdio};

use tempfile::TempDir;

mod common;
use common::{command, dynosim, listing, text};

/// A small Mooncake trace: 4 requests, two sharing a prefix block.
const TINY_TRACE: &str = concat!(
    "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n",
    "{\"timestamp\": 10, \"input_length\": 700, \"output_length\": 3, \"hash_ids\": [0, 2]}\n",
    "{\"timestamp\": 25, \"input_length\": 300, \"output_length\": 4, \"hash_ids\": [3]}\n",
    "{\"timestamp\": 40, \"input_length\": 512, \"output_length\": 2, \"hash_ids\": [4]}\n",
);

/// A directory holding `trace.jsonl`.
fn with_trace() -> TempDir {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("trace.jsonl"), TINY_TRACE).unwrap();
    dir
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `mknod name c major minor` in `dir`; false (the caller skips, saying so) where device nodes
/// cannot be made (not root, or a container without the capability).
fn make_device(dir: &Path, name: &str, major: &str, minor: &str) -> bool {
    Command::new("mknod")
        .args([name, "c", major, minor])
        .current_dir(dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn is_char_device(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_char_device())
}

#[test]
fn a_null_device_is_written_through_not_replaced() {
    let dir = with_trace();
    if !make_device(dir.path(), "n", "1", "3") {
        eprintln!("SKIPPED a_null_device_is_written_through_not_replaced: mknod needs root");
        return;
    }
    for flag in ["--report-json", "--report-jsonl"] {
        let out = dynosim(
            dir.path(),
            &["trace.jsonl", flag, "n", "--report-json", "r.json"],
        );
        assert_eq!(out.status.code(), Some(0), "{flag}: {}", text(&out.stderr));
        assert!(
            is_char_device(&dir.path().join("n")),
            "{flag} replaced the device"
        );
    }
    assert_eq!(listing(dir.path()), ["n", "r.json", "trace.jsonl"]);
}

#[test]
fn the_real_dev_null_works_for_a_user_who_cannot_replace_it() {
    // As root a regression would replace the machine's /dev/null, so root uses the copy above.
    if is_root() {
        eprintln!(
            "SKIPPED the_real_dev_null_works_for_a_user_who_cannot_replace_it: running as root"
        );
        return;
    }
    let dir = with_trace();
    let out = dynosim(dir.path(), &["trace.jsonl", "--report-json", "/dev/null"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(is_char_device(Path::new("/dev/null")));
}

#[test]
fn a_full_device_is_a_write_error_naming_it_and_leaves_no_other_output() {
    let dir = with_trace();
    if !make_device(dir.path(), "full", "1", "7") {
        eprintln!("SKIPPED a_full_device_is_a_write_error_naming_it: mknod needs root");
        return;
    }
    let out = dynosim(
        dir.path(),
        &[
            "trace.jsonl",
            "--report-jsonl",
            "records.jsonl",
            "--report-json",
            "full",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "dynosim: error: cannot write the report JSON to full: No space left on device"
    );
    assert!(out.stdout.is_empty());
    assert!(is_char_device(&dir.path().join("full")));
    assert_eq!(
        listing(dir.path()),
        ["full", "trace.jsonl"],
        "the JSONL is not left behind"
    );
}

#[test]
fn a_fifo_output_is_written_through() {
    let dir = with_trace();
    let fifo = dir.path().join("pipe");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            fs::File::open(fifo)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            text
        })
    };
    let out = dynosim(dir.path(), &["trace.jsonl", "--report-json", "pipe"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let received = reader.join().unwrap();
    let report: serde_json::Value = serde_json::from_str(&received).expect("the FIFO got the JSON");
    assert_eq!(report["num_requests"], 4);
    let meta = fs::symlink_metadata(&fifo).unwrap();
    assert!(meta.file_type().is_fifo(), "the FIFO is still a FIFO");
}

#[test]
fn dev_stdout_as_an_output_writes_to_standard_output() {
    let dir = with_trace();
    for flag in ["--report-json", "--report-jsonl"] {
        let out = dynosim(
            dir.path(),
            &[
                "trace.jsonl",
                flag,
                "/dev/stdout",
                "--report-json",
                "/dev/stdout",
            ],
        );
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{flag}: {}", text(&out.stderr));
        assert!(stdout.contains("\"num_requests\": 4"), "{flag}: {stdout}");
        assert!(
            stdout.ends_with("Saved full report to: /dev/stdout\n"),
            "{stdout}"
        );
    }
}

#[test]
fn a_symlink_output_updates_its_target() {
    let dir = with_trace();
    fs::create_dir(dir.path().join("real")).unwrap();
    fs::write(dir.path().join("real/report.json"), "old").unwrap();
    std::os::unix::fs::symlink("real/report.json", dir.path().join("link.json")).unwrap();
    // A dangling link: the file it names is created.
    std::os::unix::fs::symlink("real/records.jsonl", dir.path().join("link.jsonl")).unwrap();
    let out = dynosim(
        dir.path(),
        &[
            "trace.jsonl",
            "--report-json",
            "link.json",
            "--report-jsonl",
            "link.jsonl",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for (link, target) in [
        ("link.json", "real/report.json"),
        ("link.jsonl", "real/records.jsonl"),
    ] {
        let meta = fs::symlink_metadata(dir.path().join(link)).unwrap();
        assert!(meta.file_type().is_symlink(), "{link} is still a symlink");
        let written = fs::read_to_string(dir.path().join(target)).unwrap();
        assert!(
            written.contains("input_length") || written.contains("num_requests"),
            "{target}"
        );
    }
    assert_eq!(
        listing(&dir.path().join("real")),
        ["records.jsonl", "report.json"]
    );
    assert!(text(&out.stdout).ends_with("Saved full report to: link.json\n"));
}

#[test]
fn an_unwritable_report_is_found_before_simulating_and_no_output_is_left() {
    // The trace dead-ends (a prompt SGLang can never admit): a simulation would fail with that
    // message, so the output error proves the outputs were checked first.
    let dir = TempDir::new().unwrap();
    let ids: Vec<String> = (0..40).map(|id| id.to_string()).collect();
    let trace = format!(
        "{{\"timestamp\": 0, \"input_length\": 20000, \"output_length\": 5, \"hash_ids\": [{}]}}\n",
        ids.join(", ")
    );
    fs::write(dir.path().join("trace.jsonl"), trace).unwrap();
    let out = dynosim(
        dir.path(),
        &[
            "trace.jsonl",
            "--extra-engine-args",
            "{\"engine_type\":\"sglang\"}",
            "--report-jsonl",
            "new/records.jsonl",
            "--report-json",
            "/proc/nope/out.json",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "dynosim: error: cannot write the report JSON to /proc/nope/out.json: cannot create \
         directory /proc/nope: No such file or directory"
    );
    assert_eq!(
        listing(dir.path()),
        ["trace.jsonl"],
        "the created directory is removed too"
    );
}

#[test]
fn a_parent_that_is_not_a_directory_is_named() {
    let dir = with_trace();
    fs::write(dir.path().join("blocker"), "a file").unwrap();
    for (path, culprit) in [
        ("/proc/version/out.json", "/proc/version"),
        ("blocker/out.json", "blocker"),
        ("blocker/deeper/out.json", "blocker"),
    ] {
        let out = dynosim(dir.path(), &["trace.jsonl", "--report-json", path]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(
            stderr.trim_end(),
            format!(
                "dynosim: error: cannot write the report JSON to {path}: {culprit} is not a directory"
            )
        );
    }
    assert_eq!(listing(dir.path()), ["blocker", "trace.jsonl"]);
}

#[test]
fn a_full_standard_output_is_reported() {
    let dir = with_trace();
    let Ok(full) = fs::OpenOptions::new().write(true).open("/dev/full") else {
        eprintln!("SKIPPED a_full_standard_output_is_reported: no /dev/full");
        return;
    };
    let out = command(dir.path(), &["trace.jsonl", "--report-json", "r.json"])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "dynosim: error: cannot write the summary to standard output: No space left on device \
         (the report was saved to r.json)"
    );
}

#[test]
fn an_interrupt_removes_temporary_files_and_created_directories() {
    // The report goes to a FIFO nobody reads: after writing the JSONL to its temporary file
    // the process blocks opening the FIFO, a point where the temporary file surely exists.
    let dir = with_trace();
    assert!(Command::new("mkfifo")
        .arg(dir.path().join("pipe"))
        .status()
        .unwrap()
        .success());
    let mut child = command(
        dir.path(),
        &[
            "trace.jsonl",
            "--report-jsonl",
            "out/records.jsonl",
            "--report-json",
            "pipe",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let out_dir = dir.path().join("out");
    let stat = format!("/proc/{}/stat", child.id());
    let mut sleeping_polls = 0;
    while sleeping_polls < 3 {
        let has_temp = fs::read_dir(&out_dir).is_ok_and(|mut entries| entries.next().is_some());
        // The state letter follows the parenthesised command name.
        let sleeping = fs::read_to_string(&stat).is_ok_and(|line| {
            line.rsplit(") ")
                .next()
                .is_some_and(|rest| rest.starts_with('S'))
        });
        sleeping_polls = if has_temp && sleeping {
            sleeping_polls + 1
        } else {
            0
        };
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before blocking"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let status = common::wait_with_deadline(child, common::RUN_DEADLINE).status;
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    assert_eq!(listing(dir.path()), ["pipe", "trace.jsonl"]);
}

/// Runs in a fresh directory holding `trace.jsonl` with `trace`; returns (exit code, stderr).
fn run_trace(trace: &str, args: &[&str]) -> (Option<i32>, String, TempDir) {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("trace.jsonl"), trace).unwrap();
    let mut all = vec!["trace.jsonl"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--report-json", "r.json"]);
    let out = dynosim(dir.path(), &all);
    (out.status.code(), text(&out.stderr), dir)
}

#[test]
fn arrival_times_beyond_the_horizon_are_refused_naming_their_source() {
    let two_rows = |second: &str| {
        format!(
            "{{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}}\n\
             {{\"timestamp\": {second}, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [2]}}\n"
        )
    };
    let (code, stderr, dir) = run_trace(&two_rows("1e10"), &["--arrival-speedup-ratio", "1e-300"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with(
            "dynosim: error: the arrival of session request_2 (timestamp 10000000000, the first \
             is 0) at --arrival-speedup-ratio 1e-300 is inf"
        ) || stderr.contains("is inf ms of virtual time"),
        "{stderr}"
    );
    assert!(
        stderr.contains("beyond the simulator's horizon of 1e12 ms"),
        "{stderr}"
    );
    assert!(!dir.path().join("r.json").exists());

    let (code, stderr, _dir) = run_trace(&two_rows("1e308"), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("the arrival of session request_2 (timestamp 1e308, the first is 0)"),
        "{stderr}"
    );
}

#[test]
fn synthetic_arrival_gaps_beyond_the_horizon_are_refused_naming_the_flag() {
    let dir = TempDir::new().unwrap();
    let base = [
        "--input-tokens",
        "10",
        "--output-tokens",
        "2",
        "--request-count",
        "3",
    ];
    for (flag, value, expected) in [
        (
            "--arrival-interval-ms",
            "1e30",
            "dynosim: error: --arrival-interval-ms: arrival_interval_ms 1e30 is beyond the \
             simulator's horizon of 1e12 ms (about 31.7 years)",
        ),
        (
            "--request-rate",
            "1e-300",
            "dynosim: error: --request-rate: request_rate 1e-300 means 1e303 ms between \
             arrivals on average, beyond the simulator's horizon of 1e12 ms (about 31.7 years)",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend_from_slice(&[flag, value]);
        let out = dynosim(dir.path(), &args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().next().unwrap(), expected);
    }
}

#[test]
fn agentic_delays_beyond_the_horizon_are_refused() {
    let trace = concat!(
        "{\"schema\":\"dynamo.agentic_mooncake\",\"version\":2,\"block_size\":4}\n",
        "{\"request_id\":\"a\",\"input_length\":4,\"output_length\":2,\"hash_ids\":[1],\"not_before_ms\":0,\"dependencies\":[]}\n",
        "{\"request_id\":\"b\",\"input_length\":4,\"output_length\":2,\"hash_ids\":[2],\"not_before_ms\":0,\"dependencies\":[{\"request_id\":\"a\",\"trigger\":\"completion\",\"delay_ms\":1e308}]}\n",
        "{\"request_id\":\"c\",\"input_length\":4,\"output_length\":2,\"hash_ids\":[3],\"not_before_ms\":0,\"dependencies\":[{\"request_id\":\"b\",\"trigger\":\"completion\",\"delay_ms\":1e308}]}\n",
    );
    let (code, stderr, _dir) = run_trace(trace, &["--trace-format", "agentic_mooncake"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("the dependency delay_ms 1e308 of session"),
        "{stderr}"
    );
    assert!(
        stderr.contains("beyond the simulator's horizon"),
        "{stderr}"
    );
}

#[test]
fn a_sane_large_speedup_still_runs_and_reports_finite_numbers() {
    let trace = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n\
                 {\"timestamp\": 1e10, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [2]}\n";
    let (code, stderr, dir) = run_trace(trace, &["--arrival-speedup-ratio", "0.1"]);
    assert_eq!(code, Some(0), "{stderr}");
    let report = fs::read_to_string(dir.path().join("r.json")).unwrap();
    assert!(
        !report.contains("Infinity") && !report.contains("NaN"),
        "{report}"
    );
    let parsed: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(
        parsed["duration_ms"].as_f64().unwrap(),
        1e11 + parsed["mean_e2e_latency_ms"].as_f64().unwrap()
    );
}

/// Runs in an empty directory; returns (exit code, first stderr line).
fn first_error_line(args: &[&str]) -> (Option<i32>, String) {
    let dir = TempDir::new().unwrap();
    let mut all = args.to_vec();
    all.extend_from_slice(&["--report-json", "r.json"]);
    let out = dynosim(dir.path(), &all);
    assert!(!dir.path().join("r.json").exists());
    let stderr = text(&out.stderr);
    (
        out.status.code(),
        stderr.lines().next().unwrap_or("").to_string(),
    )
}

const SMALL_SYNTHETIC: [&str; 8] = [
    "--input-tokens",
    "10",
    "--output-tokens",
    "1",
    "--request-count",
    "4",
    "--replay-concurrency",
    "2",
];

#[test]
fn absurd_sizes_are_usage_errors_not_aborts() {
    let with = |extra: &[&'static str]| {
        let mut args = SMALL_SYNTHETIC.to_vec();
        args.extend_from_slice(extra);
        first_error_line(&args)
    };
    let cases: [(&[&str], &str); 5] = [
        (
            &["--num-workers", "1000000000"],
            "dynosim: error: --num-workers: 1000000000 workers more than the 100000 engine ranks \
             dynosim simulates",
        ),
        (
            &["--extra-engine-args", "{\"dp_size\":1000000000}"],
            "dynosim: error: --extra-engine-args: dp_size: 1000000000 is more than the 100000 \
             engine ranks dynosim simulates",
        ),
        (
            &[
                "--num-workers",
                "1000",
                "--extra-engine-args",
                "{\"dp_size\":1000}",
            ],
            "dynosim: error: --num-workers: 1000 workers of dp_size 1000 are 1000000 engine \
             ranks, more than the 100000 engine ranks dynosim simulates",
        ),
        (
            &[
                "--num-decode-workers",
                "1000000000",
                "--prefill-engine-args",
                "{\"worker_type\":\"prefill\"}",
                "--decode-engine-args",
                "{\"worker_type\":\"decode\"}",
            ],
            "dynosim: error: --num-decode-workers: 1000000000 workers, more than the 100000 \
             engine ranks dynosim simulates per pool",
        ),
        (
            &["--input-tokens", "1000000000"],
            "dynosim: error: --input-tokens: input_tokens 1000000000 can never be admitted: the \
             KV cache holds 1048576 tokens (num_gpu_blocks 16384 x block_size 64)",
        ),
    ];
    for (extra, expected) in cases {
        let (code, line) = with(extra);
        assert_eq!(code, Some(2), "{extra:?}: {line}");
        assert_eq!(line, expected, "{extra:?}");
    }
}

#[test]
fn a_billion_requests_is_a_usage_error_not_an_abort() {
    let (code, line) = first_error_line(&[
        "--input-tokens",
        "10",
        "--output-tokens",
        "1",
        "--request-count",
        "1000000000000",
        "--replay-concurrency",
        "64",
    ]);
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.starts_with(
            "dynosim: error: request_count 1000000000000: 1000000000000 requests, more than the \
             4294967296 one synthetic run can hold"
        ),
        "{line}"
    );
}

#[test]
fn trace_reader_messages_say_what_is_wrong() {
    let gzipped = {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(TINY_TRACE.as_bytes()).unwrap();
        encoder.finish().unwrap()
    };
    let mut bom = "\u{feff}".as_bytes().to_vec();
    bom.extend_from_slice(TINY_TRACE.as_bytes());
    let cases: [(Vec<u8>, &str); 3] = [
        (
            bom,
            "the file starts with a UTF-8 byte order mark (BOM); save it as UTF-8 \
             without a BOM",
        ),
        (
            gzipped,
            "the file is gzip-compressed; this trace format reads plain JSONL \
             (decompress it first; only --trace-format dynamo reads .gz shards)",
        ),
        (
            b"[1,2,3]\n".to_vec(),
            "expected a JSON object (one trace row), got an array",
        ),
    ];
    for (bytes, expected) in cases {
        let dir = TempDir::new().unwrap();
        fs::write(dir.path().join("trace.jsonl"), bytes).unwrap();
        let out = dynosim(dir.path(), &["trace.jsonl", "--report-json", "r.json"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.lines().next().unwrap().contains("trace.jsonl"),
            "{stderr}"
        );
        assert!(
            stderr.lines().next().unwrap().ends_with(expected),
            "{stderr}"
        );
    }
}

#[test]
fn an_endless_line_is_refused_without_growing_memory() {
    if !Path::new("/dev/zero").exists() {
        eprintln!("SKIPPED an_endless_line_is_refused_without_growing_memory: no /dev/zero");
        return;
    }
    let (code, line) = first_error_line(&["/dev/zero"]);
    assert_eq!(code, Some(2), "{line}");
    assert!(line.contains("/dev/zero"), "{line}");
    assert!(
        line.ends_with(
            "line 1 from /dev/zero: the line is longer than 64 MiB without a line break; a trace is one JSON \
             object per line"
        ),
        "{line}"
    );
}

#[test]
fn sglang_fields_are_checked_by_name() {
    let sglang = |fields: &str| format!("{{\"engine_type\":\"sglang\",\"sglang\":{{{fields}}}}}");
    for (fields, expected) in [
        (
            "\"page_size\":0",
            "sglang.page_size: must be at least 1, got 0",
        ),
        (
            "\"chunked_prefill_size\":0",
            "sglang.chunked_prefill_size: must be at least 1, got 0",
        ),
        (
            "\"max_prefill_tokens\":0",
            "sglang.max_prefill_tokens: must be at least 1, got 0",
        ),
        (
            "\"schedule_policy\":\"lpn\"",
            "sglang.schedule_policy: unknown policy 'lpn'; dynosim simulates 'fifo' (alias \
             'fcfs') and 'lpm'",
        ),
    ] {
        let engine = sglang(fields);
        let mut args = SMALL_SYNTHETIC.to_vec();
        args.extend_from_slice(&["--extra-engine-args", &engine]);
        let (code, line) = first_error_line(&args);
        assert_eq!(code, Some(2), "{line}");
        assert_eq!(
            line,
            format!("dynosim: error: --extra-engine-args: {expected}")
        );
    }
}

#[test]
fn the_policy_config_environment_variable_is_named_and_empty_means_unset() {
    let dir = TempDir::new().unwrap();
    let run = |value: &str| {
        let mut args = SMALL_SYNTHETIC.to_vec();
        args.extend_from_slice(&["--num-workers", "2", "--router-mode", "kv_router"]);
        args.extend_from_slice(&["--report-json", "r.json"]);
        command(dir.path(), &args)
            .env("DYN_ROUTER_POLICY_CONFIG", value)
            .output()
            .unwrap()
    };
    let out = run("/nonexistent/policy.yaml");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("dynosim: error: DYN_ROUTER_POLICY_CONFIG: failed to read router policy config /nonexistent/policy.yaml"),
        "{stderr}"
    );
    let out = run("");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_dead_end_from_a_long_output_does_not_blame_the_prompt_alone() {
    // 100 prompt tokens fit easily; 1e8 output tokens outgrow the default 1M-token KV cache.
    let trace = "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 100000000, \"hash_ids\": [1]}\n";
    let (code, stderr, dir) = run_trace(
        trace,
        &[
            "--extra-engine-args",
            "{\"num_gpu_blocks\":4,\"block_size\":64}",
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("a request's prompt plus the output it has generated so far may have outgrown the KV cache (a long output_length)"),
        "{stderr}"
    );
    assert!(!dir.path().join("r.json").exists());
}

#[test]
fn dev_zero_as_the_policy_config_is_refused_without_growing_memory() {
    if !Path::new("/dev/zero").exists() {
        eprintln!("SKIPPED dev_zero_as_the_policy_config_is_refused: no /dev/zero");
        return;
    }
    let mut args = SMALL_SYNTHETIC.to_vec();
    args.extend_from_slice(&[
        "--num-workers",
        "2",
        "--router-mode",
        "kv_router",
        "--router-policy-config",
        "/dev/zero",
    ]);
    let (code, line) = first_error_line(&args);
    assert_eq!(code, Some(2), "{line}");
    assert!(
        line.starts_with("dynosim: error: --router-policy-config: failed to read router policy config /dev/zero:"),
        "{line}"
    );
}

#[test]
fn a_csv_trace_is_refused_saying_which_formats_are_read() {
    let dir = TempDir::new().unwrap();
    std::fs::write(
        dir.path().join("trace.csv"),
        "timestamp,input_length,output_length\n0,100,10\n",
    )
    .unwrap();
    let output = dynosim(dir.path(), &["trace.csv"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("failed to parse line 1 from trace.csv as JSON: "),
        "{stderr}"
    );
    assert!(
        stderr.contains("a trace is JSON Lines, one JSON object per line"),
        "{stderr}"
    );
    assert!(
        stderr.contains("CSV and other tabular files are not read"),
        "{stderr}"
    );
    // A JSON trace with a bad later line gets no such hint: it is in the right format.
    std::fs::write(
        dir.path().join("bad.jsonl"),
        "{\"timestamp\":0,\"input_length\":10,\"output_length\":1,\"hash_ids\":[1]}\nnot json\n",
    )
    .unwrap();
    let output = dynosim(dir.path(), &["bad.jsonl"]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("failed to parse line 2 from bad.jsonl"),
        "{stderr}"
    );
    assert!(!stderr.contains("JSON Lines"), "{stderr}");
}
