//! Black-box tests of the `dynosim` binary: exit codes, stdout/stderr and the files it writes
//! (frontend.md §1.1, §3.6–§3.8).

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::{dynosim, read_json_object as read_json, text, with_args};

const SYNTHETIC: [&str; 8] = [
    "--input-tokens",
    "1000",
    "--output-tokens",
    "100",
    "--request-count",
    "50",
    "--replay-concurrency",
    "8",
];

/// A small Mooncake trace: 4 requests, two sharing a prefix block.
const TINY_TRACE: &str = concat!(
    "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n",
    "{\"timestamp\": 10, \"input_length\": 700, \"output_length\": 3, \"hash_ids\": [0, 2]}\n",
    "\n",
    "{\"timestamp\": 25, \"input_length\": 300, \"output_length\": 4, \"hash_ids\": [3]}\n",
    "{\"timestamp\": 40, \"input_length\": 512, \"output_length\": 2, \"hash_ids\": [4]}\n",
);

fn saved_path(stdout: &str) -> PathBuf {
    let line = stdout.lines().last().expect("stdout has lines");
    PathBuf::from(
        line.strip_prefix("Saved full report to: ")
            .expect("last line names the report"),
    )
}

fn report_files(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    found.sort();
    found
}

fn is_timestamped_report_name(name: &str) -> bool {
    let Some(stamp) = name
        .strip_prefix("dynamo_replay_report_")
        .and_then(|rest| rest.strip_suffix(".json"))
    else {
        return false;
    };
    stamp.len() == 15
        && stamp.as_bytes()[8] == b'_'
        && stamp
            .chars()
            .filter(|c| *c != '_')
            .all(|c| c.is_ascii_digit())
}

/// Every flag of `python -m dynamo.replay --help` in ai-dynamo 1.4.2 (the reference's flag set
/// is fixed; ours is a subset of it plus `DYNOSIM_ONLY_FLAGS`).
const REFERENCE_FLAGS: [&str; 51] = [
    "--aic-attention-dp-size",
    "--aic-backend",
    "--aic-backend-version",
    "--aic-comm-dtype",
    "--aic-fmha-dtype",
    "--aic-gemm-dtype",
    "--aic-kv-cache-dtype",
    "--aic-model-path",
    "--aic-moe-dtype",
    "--aic-moe-ep-size",
    "--aic-moe-tp-size",
    "--aic-nextn",
    "--aic-nextn-accept-rates",
    "--aic-system",
    "--aic-tp-size",
    "--arrival-interval-ms",
    "--arrival-seed",
    "--arrival-speedup-ratio",
    "--benchmark-granularity",
    "--decode-engine-args",
    "--extra-engine-args",
    "--help",
    "--input-tokens",
    "--inter-turn-delay-ms",
    "--max-sim-time-seconds",
    "--model-name",
    "--num-decode-workers",
    "--num-prefill-workers",
    "--num-prefix-groups",
    "--num-workers",
    "--output-tokens",
    "--planner-config",
    "--prefill-engine-args",
    "--replay-concurrency",
    "--replay-mode",
    "--report-json",
    "--report-jsonl",
    "--request-count",
    "--request-rate",
    "--router-config",
    "--router-mode",
    "--router-policy-config",
    "--shared-prefix-ratio",
    "--sla-e2e-ms",
    "--sla-itl-ms",
    "--sla-ttft-ms",
    "--trace-block-size",
    "--trace-format",
    "--trace-num-prefix-groups",
    "--trace-shared-prefix-ratio",
    "--turns-per-session",
];

/// Flags the reference does not have; each is described in docs/differences.md.
const DYNOSIM_ONLY_FLAGS: [&str; 12] = [
    "--version",
    "--router-seed",
    "--online-speed",
    "--aiperf-dir",
    "--html-report",
    "--quiet",
    "--progress",
    "--progress-every",
    "--input-tokens-stddev",
    "--output-tokens-stddev",
    "--random-range-ratio",
    "--length-seed",
];

/// The long flags that `--help` lists as options, one per option line, in order.
fn help_flags(help: &str) -> Vec<String> {
    help.lines()
        .filter_map(|line| {
            // Option lines are indented by at most 6 spaces, their descriptions by more.
            let indent = line.len() - line.trim_start().len();
            if indent > 6 {
                return None;
            }
            let line = line.trim_start();
            // "-h, --help" or "--flag <VALUE>": the option's own line, not a description.
            let line = line
                .strip_prefix('-')
                .filter(|rest| rest.starts_with(|c: char| c.is_ascii_alphabetic()))
                .and_then(|rest| rest.split_once(", "))
                .map_or(line, |(_, long)| long);
            let flag = line.strip_prefix("--")?;
            let name: String = flag
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            let rest = &flag[name.len()..];
            (rest.is_empty() || rest.starts_with(' ')).then(|| format!("--{name}"))
        })
        .collect()
}

#[test]
fn help_exits_zero_and_lists_every_flag() {
    use clap::CommandFactory;

    let dir = TempDir::new().unwrap();
    let out = dynosim(dir.path(), &["--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty());
    let help = text(&out.stdout);
    assert!(help.contains("Usage: dynosim [OPTIONS] [TRACE_FILES]..."));

    let listed = help_flags(&help);
    let mut defined: Vec<String> = dynosim_cli::Cli::command()
        .get_arguments()
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect();
    // clap generates these two.
    defined.push("--help".to_string());
    defined.push("--version".to_string());
    let listed_set: std::collections::BTreeSet<&String> = listed.iter().collect();
    let defined_set: std::collections::BTreeSet<&String> = defined.iter().collect();
    assert_eq!(
        listed.len(),
        listed_set.len(),
        "a flag listed twice: {listed:?}"
    );
    assert_eq!(
        listed_set, defined_set,
        "--help lists exactly the flags the parser defines"
    );
    // The flags known to be built, so that a parser regression cannot shrink both sides.
    for flag in [
        "--extra-engine-args",
        "--prefill-engine-args",
        "--decode-engine-args",
        "--router-config",
        "--router-policy-config",
        "--model-name",
        "--input-tokens",
        "--output-tokens",
        "--request-count",
        "--request-rate",
        "--arrival-interval-ms",
        "--arrival-seed",
        "--turns-per-session",
        "--shared-prefix-ratio",
        "--num-prefix-groups",
        "--inter-turn-delay-ms",
        "--num-workers",
        "--num-prefill-workers",
        "--num-decode-workers",
        "--replay-concurrency",
        "--replay-mode",
        "--router-mode",
        "--arrival-speedup-ratio",
        "--trace-format",
        "--trace-block-size",
        "--trace-shared-prefix-ratio",
        "--trace-num-prefix-groups",
        "--report-json",
        "--report-jsonl",
        "--max-sim-time-seconds",
        "--sla-ttft-ms",
        "--sla-itl-ms",
        "--sla-e2e-ms",
        "--router-seed",
        "--html-report",
        "--quiet",
    ] {
        assert!(
            listed_set.contains(&flag.to_string()),
            "--help lists {flag}"
        );
    }
    for flag in &listed {
        assert!(
            REFERENCE_FLAGS.contains(&flag.as_str()) || DYNOSIM_ONLY_FLAGS.contains(&flag.as_str()),
            "{flag} is neither a reference flag nor a listed dynosim-only one"
        );
    }
}

#[test]
fn help_flags_reads_option_lines_only() {
    let help = "Options:\n      --report-json <PATH>\n          like --report-jsonl, see --x\n          --report-jsonl wrapped to the start of a line\n  -h, --help\n      --sla-e2e-ms <MS>\n";
    assert_eq!(
        help_flags(help),
        ["--report-json", "--help", "--sla-e2e-ms"]
    );
}

#[test]
fn synthetic_run_prints_the_table_and_writes_the_report_where_asked() {
    let dir = TempDir::new().unwrap();
    let out = dynosim(
        dir.path(),
        &with_args(&SYNTHETIC, &["--report-json", "syn.json"]),
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    // Title, 12 table lines (3 borders, header, 8 rows), 3 trailer lines, the saved line.
    assert_eq!(lines.len(), 17, "{stdout}");
    assert_eq!(lines[0], "NVIDIA AIPerf | LLM Metrics");
    assert!(lines[1].starts_with("┏━") && lines[1].ends_with("┓"));
    assert!(lines[2].starts_with("┃ Metric"));
    assert!(lines[4].starts_with("┃ Time to First Token (ms)"));
    assert!(lines[11].starts_with("┃ Request Count (requests)"));
    assert!(lines[11].contains(" 50.00 ┃"));
    assert!(lines[12].starts_with("└━") && lines[12].ends_with("┘"));
    assert!(lines[13].starts_with("Wall Time (ms): "));
    assert!(lines[14].starts_with("Prefix Cache Reused Ratio: "));
    assert!(lines[15].starts_with("First Admission Prefix Cache Reused Ratio: "));
    assert_eq!(lines[16], "Saved full report to: syn.json");
    assert!(stdout.ends_with("syn.json\n"));
    assert!(out.stderr.is_empty(), "stderr: {}", text(&out.stderr));

    let raw = fs::read_to_string(dir.path().join("syn.json")).unwrap();
    assert!(raw.ends_with("}\n"));
    let report = read_json(&dir.path().join("syn.json"));
    assert_eq!(report.len(), 74);
    assert_eq!(report["num_requests"], Value::from(50));
    assert_eq!(report["completed_requests"], Value::from(50));
    assert_eq!(report["total_input_tokens"], Value::from(50_000));
    assert_eq!(report["total_output_tokens"], Value::from(5_000));
    // The file's keys are sorted (json.dumps sort_keys=True).
    let key_lines: Vec<&str> = raw
        .lines()
        .filter(|line| line.starts_with("  \""))
        .map(|line| line.trim())
        .collect();
    let mut sorted = key_lines.clone();
    sorted.sort();
    assert_eq!(key_lines, sorted);
}

#[test]
fn default_report_path_is_a_timestamped_file_in_the_working_directory() {
    let dir = TempDir::new().unwrap();
    let out = dynosim(dir.path(), &SYNTHETIC);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let printed = saved_path(&text(&out.stdout));
    assert!(
        printed.is_absolute(),
        "printed as an absolute path: {}",
        printed.display()
    );
    let name = printed.file_name().unwrap().to_str().unwrap();
    assert!(is_timestamped_report_name(name), "{name}");
    let files = report_files(dir.path());
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].file_name(), printed.file_name());
    assert_eq!(read_json(&files[0]).len(), 74);
}

#[test]
fn an_existing_directory_gets_a_timestamped_report_inside() {
    let dir = TempDir::new().unwrap();
    fs::create_dir(dir.path().join("reports")).unwrap();
    let out = dynosim(
        dir.path(),
        &with_args(&SYNTHETIC, &["--report-json", "reports"]),
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let printed = saved_path(&text(&out.stdout));
    assert_eq!(printed.parent(), Some(Path::new("reports")));
    assert!(is_timestamped_report_name(
        printed.file_name().unwrap().to_str().unwrap()
    ));
    assert!(dir.path().join(&printed).is_file());
    let leftovers = fs::read_dir(dir.path().join("reports")).unwrap().count();
    assert_eq!(leftovers, 1, "only the report, no temporary file");
}

#[test]
fn missing_parent_directories_are_created_and_the_path_is_printed_as_given() {
    let dir = TempDir::new().unwrap();
    let out = dynosim(
        dir.path(),
        &with_args(&SYNTHETIC, &["--report-json", "a/b/report"]),
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(saved_path(&text(&out.stdout)), PathBuf::from("a/b/report"));
    assert_eq!(read_json(&dir.path().join("a/b/report")).len(), 74);
}

#[test]
fn the_last_occurrence_of_a_repeated_flag_wins() {
    let dir = TempDir::new().unwrap();
    let args = with_args(
        &SYNTHETIC,
        &[
            "--report-json",
            "first.json",
            "--report-json",
            "second.json",
        ],
    );
    let out = dynosim(dir.path(), &args);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(dir.path().join("second.json").is_file());
    assert!(!dir.path().join("first.json").exists());
}

#[test]
fn an_sla_adds_the_goodput_keys() {
    let dir = TempDir::new().unwrap();
    let args = with_args(
        &SYNTHETIC,
        &["--sla-e2e-ms", "1_000", "--report-json", "r.json"],
    );
    let out = dynosim(dir.path(), &args);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let report = read_json(&dir.path().join("r.json"));
    assert_eq!(report.len(), 77);
    assert!(report.contains_key("goodput_completed_requests"));
}

/// An SLA between two requests' latencies counts exactly the requests within it, per SLA kind.
#[test]
fn a_binding_sla_counts_only_the_requests_within_it() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("t.jsonl"), TINY_TRACE).unwrap();
    let out = dynosim(
        dir.path(),
        &[
            "t.jsonl",
            "--report-json",
            "r.json",
            "--report-jsonl",
            "r.jsonl",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let records: Vec<Value> = fs::read_to_string(dir.path().join("r.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 4);
    for (flag, key) in [
        ("--sla-e2e-ms", "e2e_latency_ms"),
        ("--sla-ttft-ms", "ttft_ms"),
        ("--sla-itl-ms", "itl_ms"),
    ] {
        let mut values: Vec<f64> = records.iter().map(|r| r[key].as_f64().unwrap()).collect();
        values.sort_by(f64::total_cmp);
        values.dedup();
        assert!(values.len() >= 2, "{key}: {values:?}");
        let sla = (values[0] + values[1]) / 2.0;
        let within = records
            .iter()
            .filter(|r| r[key].as_f64().unwrap() <= sla)
            .count();
        assert!(within > 0 && within < records.len(), "{key}: the SLA binds");
        let sla_text = sla.to_string();
        let out = dynosim(
            dir.path(),
            &["t.jsonl", flag, &sla_text, "--report-json", "g.json"],
        );
        assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
        let report = read_json(&dir.path().join("g.json"));
        assert_eq!(
            report["goodput_completed_requests"].as_u64(),
            Some(within as u64),
            "{flag} {sla}"
        );
        let duration_s = report["duration_ms"].as_f64().unwrap() / 1000.0;
        let rps = report["goodput_request_throughput_rps"].as_f64().unwrap();
        assert!(
            (rps - within as f64 / duration_s).abs() <= 1e-12 * rps,
            "{flag}"
        );
    }
}

#[test]
fn synthetic_runs_are_deterministic() {
    let dir = TempDir::new().unwrap();
    let poisson = [
        "--input-tokens",
        "300",
        "--output-tokens",
        "20",
        "--request-count",
        "40",
    ];
    for name in ["one.json", "two.json"] {
        let args = with_args(&poisson, &["--request-rate", "50", "--report-json", name]);
        let out = dynosim(dir.path(), &args);
        assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    }
    let mut one = read_json(&dir.path().join("one.json"));
    let mut two = read_json(&dir.path().join("two.json"));
    for clock_dependent in [
        "wall_time_ms",
        "processed_tokens_per_s",
        "processed_output_tokens_per_s",
    ] {
        one.remove(clock_dependent);
        two.remove(clock_dependent);
    }
    assert_eq!(one, two);
}

/// The report file without the lines of the keys that measure the simulator itself.
fn without_clock_lines(report: &str) -> String {
    report
        .lines()
        .filter(|l| {
            ![
                "\"wall_time_ms\"",
                "\"processed_tokens_per_s\"",
                "\"processed_output_tokens_per_s\"",
            ]
            .iter()
            .any(|k| l.trim_start().starts_with(k))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_same_command_twice_writes_byte_identical_files() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("trace.jsonl"), TINY_TRACE.repeat(3)).unwrap();
    for run in ["a", "b"] {
        let json = format!("{run}.json");
        let jsonl = format!("{run}.jsonl");
        let args = [
            "trace.jsonl",
            "--num-workers",
            "2",
            "--report-json",
            &json,
            "--report-jsonl",
            &jsonl,
        ];
        let out = dynosim(dir.path(), &args);
        assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    }
    let read = |name: &str| fs::read_to_string(dir.path().join(name)).unwrap();
    assert_eq!(read("a.jsonl"), read("b.jsonl"));
    assert_eq!(read("a.jsonl").lines().count(), 12);
    assert_eq!(
        without_clock_lines(&read("a.json")),
        without_clock_lines(&read("b.json"))
    );
    assert_eq!(
        without_clock_lines(&read("a.json")).lines().count() + 3,
        read("a.json").lines().count()
    );
}

#[test]
fn trace_replay_writes_the_per_request_jsonl() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("trace.jsonl"), TINY_TRACE).unwrap();
    let args = [
        "trace.jsonl",
        "--report-json",
        "r.json",
        "--report-jsonl",
        "out/requests.jsonl",
    ];
    let out = dynosim(dir.path(), &args);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        read_json(&dir.path().join("r.json"))["num_requests"],
        Value::from(4)
    );
    let jsonl = fs::read_to_string(dir.path().join("out/requests.jsonl")).unwrap();
    let records: Vec<serde_json::Map<String, Value>> = jsonl
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.len(), 4);
    for record in &records {
        assert_eq!(record.len(), 28);
        assert_eq!(record["terminal_status"], Value::from("completed"));
    }
    let arrivals: Vec<f64> = records
        .iter()
        .map(|r| r["arrival_time_ms"].as_f64().unwrap())
        .collect();
    assert_eq!(arrivals, vec![0.0, 10.0, 25.0, 40.0]);
}

/// Runs `args`, expects exit `code`, no report file, and returns stderr.
fn expect_failure(args: &[&str], code: i32) -> String {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("trace.jsonl"), TINY_TRACE).unwrap();
    let out = dynosim(dir.path(), args);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "args {args:?}; stderr: {stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout: {}",
        text(&out.stdout)
    );
    assert!(
        report_files(dir.path()).is_empty(),
        "no report is written on failure"
    );
    assert!(stderr.starts_with("dynosim: error: "), "{stderr}");
    stderr
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let stderr = expect_failure(&with_args(&SYNTHETIC, &["--num-workers", "two"]), 2);
    assert!(
        stderr.contains("--num-workers") && stderr.contains("two"),
        "{stderr}"
    );
    let stderr = expect_failure(&with_args(&SYNTHETIC, &["--replay-mode", "bogus"]), 2);
    assert!(
        stderr.contains("--replay-mode") && stderr.contains("offline, online"),
        "{stderr}"
    );
    let stderr = expect_failure(&with_args(&SYNTHETIC, &["--sla-ttft-ms", "fast"]), 2);
    assert!(stderr.contains("--sla-ttft-ms"), "{stderr}");
    let stderr = expect_failure(&with_args(&SYNTHETIC, &["--no-such-flag"]), 2);
    assert!(stderr.contains("--no-such-flag"), "{stderr}");
    let stderr = expect_failure(&with_args(&SYNTHETIC, &["--report-json"]), 2);
    assert!(stderr.contains("--report-json"), "{stderr}");
}

#[test]
fn usage_errors_end_with_the_usage_hint() {
    let stderr = expect_failure(&[], 2);
    assert!(
        stderr.contains(
            "provide either trace_file or all of --input-tokens/--output-tokens/--request-count"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("\nUsage: dynosim [OPTIONS] [TRACE_FILES]...\n"),
        "{stderr}"
    );
    assert!(
        stderr.ends_with("For more information, try '--help'.\n"),
        "{stderr}"
    );
}

#[test]
fn bad_values_exit_2_naming_the_flag() {
    let cases: [(&[&str], &str); 5] = [
        (&["--num-workers", "0"], "num_workers"),
        (&["--num-workers", "-1"], "num_workers"),
        (&["--replay-concurrency", "0"], "replay_concurrency"),
        (&["--sla-ttft-ms", "nan"], "sla_ttft_ms"),
        (&["--sla-e2e-ms=-5"], "sla_e2e_ms"),
    ];
    for (extra, named) in cases {
        let stderr = expect_failure(&with_args(&SYNTHETIC, extra), 2);
        let dashed = named.replace('_', "-");
        assert!(
            stderr.contains(named) || stderr.contains(&dashed),
            "{extra:?}: {stderr}"
        );
    }
    let stderr = expect_failure(
        &[
            "--input-tokens",
            "0",
            "--output-tokens",
            "5",
            "--request-count",
            "2",
            "--replay-concurrency",
            "1",
        ],
        2,
    );
    assert!(
        stderr.contains("input_tokens") || stderr.contains("--input-tokens"),
        "{stderr}"
    );
    // The speed-up only matters (and is only checked) for open-loop arrivals.
    let open_loop = [
        "--input-tokens",
        "10",
        "--output-tokens",
        "2",
        "--request-count",
        "3",
    ];
    let args = with_args(
        &open_loop,
        &["--request-rate", "5", "--arrival-speedup-ratio", "-1"],
    );
    let stderr = expect_failure(&args, 2);
    assert!(stderr.contains("arrival_speedup_ratio"), "{stderr}");
    let stderr = expect_failure(&["trace.jsonl", "--request-rate", "5"], 2);
    assert!(
        stderr.contains("--request-rate and --arrival-interval-ms only apply to synthetic replay"),
        "{stderr}"
    );
}

#[test]
fn bad_json_exits_2_naming_the_flag() {
    for json in ["{bad", "[1, 2]", "{\"no_such_field\": 1}"] {
        let stderr = expect_failure(&with_args(&SYNTHETIC, &["--extra-engine-args", json]), 2);
        assert!(stderr.to_lowercase().contains("engine"), "{json}: {stderr}");
    }
    let stderr = expect_failure(&with_args(&SYNTHETIC, &["--router-config", "{bad"]), 2);
    assert!(stderr.to_lowercase().contains("router"), "{stderr}");
}

#[test]
fn a_missing_trace_file_is_an_error_naming_it() {
    let stderr = expect_failure(&["/nonexistent/trace.jsonl"], 2);
    assert!(stderr.contains("/nonexistent/trace.jsonl"), "{stderr}");
}

#[test]
fn an_unwritable_report_path_is_a_runtime_error_naming_it() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("blocker"), "a file, not a directory").unwrap();
    let out = dynosim(
        dir.path(),
        &with_args(&SYNTHETIC, &["--report-json", "blocker/r.json"]),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("dynosim: error: "), "{stderr}");
    assert!(stderr.contains("blocker/r.json"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_directory_as_the_jsonl_path_is_a_usage_error_before_any_work() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("trace.jsonl"), TINY_TRACE).unwrap();
    fs::create_dir(dir.path().join("records")).unwrap();
    let out = dynosim(
        dir.path(),
        &[
            "trace.jsonl",
            "--report-jsonl",
            "records",
            "--report-json",
            "r.json",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--report-jsonl: records is a directory"));
    assert!(!dir.path().join("r.json").exists());
}

#[test]
fn kv_router_runs_are_reproducible_by_seed() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("trace.jsonl"), TINY_TRACE.repeat(4)).unwrap();
    let run = |name: &str, seed: &str| {
        let jsonl = format!("{name}.jsonl");
        let args = [
            "trace.jsonl",
            "--num-workers",
            "3",
            "--router-mode",
            "kv_router",
            "--router-seed",
            seed,
            "--report-json",
            "r.json",
            "--report-jsonl",
            &jsonl,
        ];
        let out = dynosim(dir.path(), &args);
        assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
        fs::read_to_string(dir.path().join(&jsonl)).unwrap()
    };
    let first = run("a", "7");
    assert_eq!(first, run("b", "7"));
    assert_eq!(first.lines().count(), 16);
    // Another seed breaks ties differently: some request lands on another worker.
    let worker = |records: &str| -> Vec<Value> {
        records
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["decode_worker_idx"].clone())
            .collect()
    };
    let others: Vec<_> = ["1", "2", "3", "4"]
        .iter()
        .map(|s| worker(&run("c", s)))
        .collect();
    assert!(others.iter().any(|w| *w != worker(&first)));
}

/// Replays a 20000-token prompt and a small one on the deployment `deployment` flags
/// describe, expecting a dead end: exit code 1, no report written; the error message.
fn dead_end_message(deployment: &[&str]) -> String {
    let dir = TempDir::new().unwrap();
    let trace = "{\"timestamp\": 0, \"input_length\": 20000, \"output_length\": 5, \"hash_ids\": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39]}\n{\"timestamp\": 1, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [99]}\n";
    fs::write(dir.path().join("trace.jsonl"), trace).unwrap();
    let args = [&["trace.jsonl", "--report-json", "r.json"], deployment].concat();
    let out = dynosim(dir.path(), &args);
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.path().join("r.json").exists());
    text(&out.stderr)
}

#[test]
fn a_dead_end_names_the_request_that_can_never_run() {
    // SGLang's default pool holds 16384 tokens; a 20000-token prompt can never be admitted and,
    // since SGLang never rejects, blocks the queue.
    let stderr = dead_end_message(&["--extra-engine-args", "{\"engine_type\":\"sglang\"}"]);
    assert!(
        stderr.contains("dead end with 2 in-flight requests remaining: the request of session request_1 turn 0 (20000 prompt tokens) can never be scheduled"),
        "{stderr}"
    );
}

#[test]
fn a_disaggregated_dead_end_names_the_request_and_its_pool() {
    // The same 20000-token prompt, now on an SGLang prefill pool of the default 16384 tokens.
    let stderr = dead_end_message(&[
        "--prefill-engine-args",
        "{\"worker_type\":\"prefill\",\"engine_type\":\"sglang\"}",
        "--decode-engine-args",
        "{\"worker_type\":\"decode\",\"engine_type\":\"sglang\",\"num_gpu_blocks\":100000}",
    ]);
    assert!(
        stderr.contains("offline disagg replay reached a dead end with 2 in-flight requests remaining: the request of session request_1 turn 0 (20000 prompt tokens) can never be scheduled on prefill worker 0 (dp rank 0)"),
        "{stderr}"
    );
}

/// Runs the synthetic workload with `extra` flags and returns its report file without the
/// clock-dependent lines.
fn synthetic_report(dir: &Path, name: &str, extra: &[&str]) -> String {
    let json = format!("{name}.json");
    let mut args = with_args(&SYNTHETIC, extra);
    args.extend(["--report-json", json.as_str(), "--quiet"]);
    let out = dynosim(dir, &args);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    without_clock_lines(&fs::read_to_string(dir.join(json)).unwrap())
}

#[test]
fn length_spreads_are_seeded_and_vanish_at_their_neutral_values() {
    let dir = TempDir::new().unwrap();
    let fixed = synthetic_report(dir.path(), "fixed", &[]);
    // R = 1 and stddevs of 0 are today's fixed lengths, byte for byte.
    for (name, extra) in [
        ("r1", &["--random-range-ratio", "1"][..]),
        (
            "sd0",
            &[
                "--input-tokens-stddev",
                "0",
                "--output-tokens-stddev",
                "0",
                "--length-seed",
                "3",
            ][..],
        ),
    ] {
        assert_eq!(synthetic_report(dir.path(), name, extra), fixed, "{name}");
    }
    let ranged = |name: &str, seed: &str| {
        synthetic_report(
            dir.path(),
            name,
            &["--random-range-ratio", "0.8", "--length-seed", seed],
        )
    };
    let a = ranged("a", "5");
    assert_eq!(ranged("b", "5"), a, "same seed, same report");
    assert_ne!(ranged("c", "6"), a, "another seed, other lengths");
    // The default seed is fixed too.
    let default_seed = synthetic_report(dir.path(), "d", &["--random-range-ratio", "0.8"]);
    assert_eq!(
        synthetic_report(dir.path(), "e", &["--random-range-ratio", "0.8"]),
        default_seed
    );
    // 50 requests of 1000 input and 100 output tokens, each drawn from [800, 1000] and
    // [80, 100]: the totals land inside those ranges' sums, away from their ends.
    let report = read_json(&dir.path().join("a.json"));
    let total_input = report["total_input_tokens"].as_u64().unwrap();
    let total_output = report["total_output_tokens"].as_u64().unwrap();
    assert!((42_000..48_000).contains(&total_input), "{total_input}");
    assert!((4_200..4_800).contains(&total_output), "{total_output}");
    synthetic_report(
        dir.path(),
        "n",
        &[
            "--input-tokens-stddev",
            "100",
            "--output-tokens-stddev",
            "10",
        ],
    );
    let spread = read_json(&dir.path().join("n.json"));
    let total_input = spread["total_input_tokens"].as_u64().unwrap();
    assert!(
        (48_000..52_000).contains(&total_input) && total_input != 50_000,
        "{total_input}"
    );
}

#[test]
fn version_prints_the_package_version() {
    let dir = TempDir::new().unwrap();
    let output = dynosim(dir.path(), &["--version"]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        text(&output.stdout),
        format!("dynosim {}\n", env!("CARGO_PKG_VERSION"))
    );
    assert!(fs::read_dir(dir.path()).unwrap().next().is_none());
    // Under the reference's name too (`python -m dynamo.replay` runs this same front).
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = dynosim_cli::run(
        "python -m dynamo.replay",
        ["--version"],
        &mut stdout,
        &mut stderr,
    );
    assert_eq!(code, 0);
    assert_eq!(
        text(&stdout),
        format!("dynosim {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn length_spread_usage_errors_name_the_flags() {
    let dir = TempDir::new().unwrap();
    fs::write(dir.path().join("trace.jsonl"), TINY_TRACE).unwrap();
    for (args, expected) in [
        (
            with_args(
                &SYNTHETIC,
                &["--input-tokens-stddev", "10", "--random-range-ratio", "0.8"],
            ),
            "dynosim: error: --input-tokens-stddev and --random-range-ratio cannot both be set",
        ),
        (
            vec!["trace.jsonl", "--random-range-ratio", "0.8"],
            "dynosim: error: --random-range-ratio: length spreads only apply to synthetic \
             replay (--input-tokens)",
        ),
        (
            with_args(&SYNTHETIC, &["--random-range-ratio", "1.2"]),
            "dynosim: error: --random-range-ratio: random_range_ratio must be between 0.0 and \
             1.0, got 1.2",
        ),
        (
            with_args(&SYNTHETIC, &["--output-tokens-stddev", "-3"]),
            "dynosim: error: --output-tokens-stddev: output_tokens_stddev must be a finite \
             non-negative number, got -3",
        ),
        (
            with_args(&SYNTHETIC, &["--length-seed", "4"]),
            "dynosim: error: --length-seed: length_seed needs a length spread",
        ),
        (
            with_args(&SYNTHETIC, &["--input-tokens-stddev", "ten"]),
            "invalid value 'ten' for '--input-tokens-stddev <FLOAT>'",
        ),
    ] {
        let out = dynosim(dir.path(), &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn quick_successive_runs_keep_every_default_report() {
    let dir = TempDir::new().unwrap();
    let args = [
        "--input-tokens",
        "50",
        "--output-tokens",
        "2",
        "--request-count",
        "2",
        "--replay-concurrency",
        "1",
        "--quiet",
    ];
    for _ in 0..3 {
        let output = dynosim(dir.path(), &args);
        assert!(output.status.success(), "{}", text(&output.stderr));
    }
    // Three runs, three reports: a run in the same second as the last gets `_2`, `_3`.
    let names: Vec<String> = report_files(dir.path())
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
    for name in &names {
        let stem = name.strip_suffix(".json").unwrap();
        let base = match stem.rsplit_once('_') {
            Some((base, n)) if n.len() < 3 && n.parse::<u32>().is_ok_and(|n| n >= 2) => {
                format!("{base}.json")
            }
            _ => name.clone(),
        };
        assert!(is_timestamped_report_name(&base), "{name}");
    }
}

fn engine_args_run(dir: &Path, flag: &str, value: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "--input-tokens",
        "500",
        "--output-tokens",
        "8",
        "--request-count",
        "6",
        "--replay-concurrency",
        "3",
        "--report-json",
        "r.json",
        flag,
        value,
    ];
    args.extend_from_slice(extra);
    dynosim(dir, &args)
}

#[test]
fn json_flags_take_a_file_path_like_the_mockers() {
    let dir = TempDir::new().unwrap();
    let engine = r#"{"engine_type": "trtllm", "num_gpu_blocks": 64, "max_num_seqs": 2}"#;
    fs::write(dir.path().join("engine.json"), format!("{engine}\n")).unwrap();
    let inline = engine_args_run(dir.path(), "--extra-engine-args", engine, &[]);
    assert!(inline.status.success(), "{}", text(&inline.stderr));
    let from_inline = fs::read_to_string(dir.path().join("r.json")).unwrap();
    let from_file = engine_args_run(dir.path(), "--extra-engine-args", "engine.json", &[]);
    assert!(from_file.status.success(), "{}", text(&from_file.stderr));
    let strip = |report: &str| {
        let mut map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(report).unwrap();
        for key in [
            "wall_time_ms",
            "processed_tokens_per_s",
            "processed_output_tokens_per_s",
        ] {
            map.remove(key);
        }
        map
    };
    assert_eq!(
        strip(&from_inline),
        strip(&fs::read_to_string(dir.path().join("r.json")).unwrap())
    );

    // A fault in the file names the file and the line.
    fs::write(
        dir.path().join("bad.json"),
        "{\n  \"num_gpu_blocks\": 64,\n  \"max_num_seqs\": ,\n}\n",
    )
    .unwrap();
    let output = engine_args_run(dir.path(), "--extra-engine-args", "bad.json", &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--extra-engine-args: bad.json: invalid JSON: expected value at line 3"),
        "{stderr}"
    );
    fs::write(dir.path().join("unknown.json"), r#"{"num_gpu_blockz": 1}"#).unwrap();
    let output = engine_args_run(dir.path(), "--extra-engine-args", "unknown.json", &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--extra-engine-args: unknown.json: unknown field `num_gpu_blockz`"),
        "{stderr}"
    );
    // Neither JSON nor a file: the message says both were tried.
    let output = engine_args_run(dir.path(), "--extra-engine-args", "missing.json", &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("neither inline JSON nor the path of an existing JSON file"),
        "{stderr}"
    );

    // The router config and the disaggregated pools' engine args take files too.
    fs::write(
        dir.path().join("router.json"),
        r#"{"overlap_score_credit": 2.0}"#,
    )
    .unwrap();
    let output = engine_args_run(
        dir.path(),
        "--router-config",
        "router.json",
        &["--router-mode", "kv_router", "--num-workers", "2"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    fs::write(
        dir.path().join("router.json"),
        r#"{"overlap_score_credit": "x"}"#,
    )
    .unwrap();
    let output = engine_args_run(
        dir.path(),
        "--router-config",
        "router.json",
        &["--router-mode", "kv_router", "--num-workers", "2"],
    );
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--router-config: router.json: "),
        "{stderr}"
    );
    fs::write(
        dir.path().join("prefill.json"),
        r#"{"worker_type": "prefill"}"#,
    )
    .unwrap();
    fs::write(
        dir.path().join("decode.json"),
        r#"{"worker_type": "decode"}"#,
    )
    .unwrap();
    let output = engine_args_run(
        dir.path(),
        "--prefill-engine-args",
        "prefill.json",
        &["--decode-engine-args", "decode.json"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn trtllm_batch_waiting_delays_first_tokens_and_bad_settings_are_usage_errors() {
    let dir = TempDir::new().unwrap();
    let run = |name: &str, engine: &str| {
        let out = dynosim(
            dir.path(),
            &with_args(
                &SYNTHETIC,
                &[
                    "--random-range-ratio",
                    "0.8",
                    "--extra-engine-args",
                    engine,
                    "--report-json",
                    name,
                ],
            ),
        );
        assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
        read_json(&dir.path().join(name))
    };
    let plain = run("plain.json", r#"{"engine_type":"trtllm"}"#);
    let waiting = run(
        "waiting.json",
        r#"{"engine_type":"trtllm",
            "trtllm":{"batch_wait_timeout_iters":20,"batch_wait_max_tokens_ratio":0.9}}"#,
    );
    assert_eq!(waiting["completed_requests"], Value::from(50));
    assert_eq!(waiting["total_output_tokens"], plain["total_output_tokens"]);
    // Closed loop at 8 with spread lengths (so requests do not finish together): a new prompt
    // mostly finds decodes running and far fewer than the 7373 tokens needed, so it waits out
    // the 20 passes (about 20 decode steps) before its prefill.
    let (plain_ttft, waiting_ttft) = (
        plain["mean_ttft_ms"].as_f64().unwrap(),
        waiting["mean_ttft_ms"].as_f64().unwrap(),
    );
    let tpot = plain["mean_itl_ms"].as_f64().unwrap();
    assert!(
        waiting_ttft > plain_ttft + 10.0 * tpot,
        "ttft {plain_ttft} -> {waiting_ttft} (itl {tpot})"
    );

    for (engine, needle) in [
        (
            r#"{"engine_type":"trtllm","trtllm":{"batch_wait_max_tokens_ratio":1.5}}"#,
            "trtllm.batch_wait_max_tokens_ratio: must be a number between 0 and 1, got 1.5",
        ),
        (
            r#"{"engine_type":"trtllm","trtllm":{"batch_wait_timeout_iters":-1}}"#,
            "trtllm.batch_wait_timeout_iters: must be a non-negative integer, got -1",
        ),
        (
            r#"{"engine_type":"trtllm","trtllm":{"batch_wait_timeout_iters":2.5}}"#,
            "trtllm.batch_wait_timeout_iters: must be a non-negative integer, got 2.5",
        ),
        (
            r#"{"trtllm":{"batch_wait_timeout_iters":20,"batch_wait_max_tokens_ratio":0.9}}"#,
            "supported only for engine_type=trtllm, got engine_type=Vllm",
        ),
    ] {
        let stderr = expect_failure(&with_args(&SYNTHETIC, &["--extra-engine-args", engine]), 2);
        assert!(stderr.contains("--extra-engine-args"), "{stderr}");
        assert!(stderr.contains(needle), "{engine}: {stderr}");
    }
}
