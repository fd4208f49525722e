//! Fuzzing of the command line over trace bytes and over argument combinations.
//!
//! Every generated run goes through `dynosim_cli::run` exactly as the binary does, and must
//! keep the promises of the CLI whatever the input: no panic; exit 0, 1 or 2; a non-zero exit
//! comes with one `dynosim: error:` message and leaves no output file; a zero exit leaves a
//! report that is valid JSON with finite numbers only and no temporary file behind.
//!
//! `cargo test` runs a fixed number of cases from a fixed seed (a regression test). For a
//! fuzzing session, `DYNOSIM_FUZZ_SECONDS=N` runs random cases for N seconds instead
//! (`.ci/run` does this for a bounded time); a failure prints the shrunk input.

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use tempfile::TempDir;

mod common;
use common::listing;

/// Cases per target under plain `cargo test`.
const REGRESSION_CASES: u32 = 48;

/// Runs that ended with exit code 0, 1 and 2, to show in a fuzzing session that the inputs
/// reach the simulation and not only the validation.
static EXIT_CODES: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

/// Runs `test` on values of `strategy`: a fixed-seed batch, or random ones for the time
/// budget in `DYNOSIM_FUZZ_SECONDS`.
fn fuzz<S: Strategy>(name: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let budget = std::env::var("DYNOSIM_FUZZ_SECONDS")
        .ok()
        .and_then(|text| text.parse::<u64>().ok());
    let config = Config {
        cases: REGRESSION_CASES,
        failure_persistence: None,
        ..Config::default()
    };
    match budget {
        None => {
            let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
            let mut runner = TestRunner::new_with_rng(config, rng);
            if let Err(failure) = runner.run(&strategy, &test) {
                panic!("{name}: {failure}");
            }
        }
        Some(seconds) => {
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let mut batches = 0u64;
            while Instant::now() < deadline {
                let mut runner = TestRunner::new(Config {
                    cases: 16,
                    ..config.clone()
                });
                if let Err(failure) = runner.run(&strategy, &test) {
                    panic!("{name}: {failure}");
                }
                batches += 1;
            }
            let counts: Vec<usize> = EXIT_CODES
                .iter()
                .map(|count| count.swap(0, Ordering::Relaxed))
                .collect();
            eprintln!(
                "{name}: {} random cases in {seconds} s; runs by exit code 0/1/2 (shrinking \
                 included): {counts:?}",
                batches * 16
            );
        }
    }
}

/// Runs the CLI in `dir` and checks the promises that hold for every input.
fn check_run(dir: &Path, args: &[String]) -> Result<(), TestCaseError> {
    let before: Vec<_> = listing(dir);
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        dynosim_cli::run("dynosim", args.iter().cloned(), &mut stdout, &mut stderr)
    }))
    .map_err(|_| TestCaseError::fail(format!("panicked on {args:?}")))?;
    let stderr = String::from_utf8_lossy(&stderr).into_owned();
    prop_assert!(matches!(code, 0..=2), "exit {code} for {args:?}");
    EXIT_CODES[code as usize].fetch_add(1, Ordering::Relaxed);
    let after = listing(dir);
    for name in &after {
        prop_assert!(
            !name.ends_with(".tmp"),
            "temporary file {name} left by {args:?}"
        );
    }
    if code == 0 {
        prop_assert!(stderr.is_empty(), "{args:?}: {stderr}");
        let report = fs::read_to_string(dir.join("r.json"))
            .map_err(|err| TestCaseError::fail(format!("{args:?}: no report: {err}")))?;
        let value: serde_json::Value = serde_json::from_str(&report)
            .map_err(|err| TestCaseError::fail(format!("{args:?}: report is not JSON: {err}")))?;
        for (key, entry) in value.as_object().expect("an object") {
            let number = entry.as_f64();
            prop_assert!(
                number.is_some_and(f64::is_finite),
                "{key} = {entry} for {args:?}"
            );
        }
        if let Ok(records) = fs::read_to_string(dir.join("r.jsonl")) {
            for line in records.lines() {
                prop_assert!(
                    serde_json::from_str::<serde_json::Value>(line).is_ok(),
                    "record is not JSON for {args:?}: {line}"
                );
            }
        }
    } else {
        prop_assert!(stderr.starts_with("dynosim: error: "), "{args:?}: {stderr}");
        prop_assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        prop_assert_eq!(&before, &after, "a failed run left files: {:?}", args);
    }
    for name in after.iter().filter(|name| !before.contains(name)) {
        let _ = fs::remove_file(dir.join(name));
    }
    Ok(())
}

/// A JSON number or other value for a numeric field: mostly ordinary (so that most traces
/// reach the simulation), sometimes a boundary or hostile one.
fn field_value(ordinary: std::ops::Range<u32>) -> impl Strategy<Value = String> {
    prop_oneof![
        120 => ordinary.prop_map(|n| n.to_string()),
        1 => Just("0".to_string()),
        1 => Just("-1".to_string()),
        1 => Just("1e308".to_string()),
        1 => Just("1e10".to_string()),
        1 => Just("4294967296".to_string()),
        1 => Just("1000000000".to_string()),
        1 => Just("0.5".to_string()),
        1 => Just("\"12\"".to_string()),
        1 => Just("null".to_string()),
    ]
}

fn hash_ids() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![20 => 0u64..40, 1 => Just(u64::MAX), 1 => Just(1u64 << 40)],
        // Mostly 1 to 5 ids; empty now and then.
        0usize..6,
    )
    .prop_map(|ids| {
        let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
        format!("[{}]", ids.join(","))
    })
}

/// The fuzzed values of a Mooncake-style row: timestamp, input, output, hash ids, session,
/// delay.
type RowValues = (String, String, String, String, Option<u8>, String);

fn mooncake_row() -> impl Strategy<Value = RowValues> {
    (
        field_value(0..100_000),
        field_value(1..500),
        field_value(0..50),
        hash_ids(),
        prop::option::of(0u8..3),
        field_value(0..100),
    )
}

/// Rows as trace text (also read as mooncake-delta): a session's first row carries the
/// timestamp, its later rows a delay, as the format wants.
fn mooncake_text(rows: Vec<RowValues>) -> String {
    let mut seen = Vec::new();
    let mut text = String::new();
    for (timestamp, input, output, ids, session, delay) in rows {
        let timing = match session {
            Some(s) if seen.contains(&s) => format!("\"session_id\":\"s{s}\",\"delay\":{delay}"),
            Some(s) => {
                seen.push(s);
                format!("\"session_id\":\"s{s}\",\"timestamp\":{timestamp}")
            }
            None => format!("\"timestamp\":{timestamp}"),
        };
        text.push_str(&format!(
            "{{{timing},\"input_length\":{input},\"output_length\":{output},\"hash_ids\":{ids}}}\n"
        ));
    }
    text
}

/// At most one byte-level mutation of a text: flip, insert or delete one byte, cut the text,
/// or (half the time) leave it intact.
fn mutate(text: String) -> impl Strategy<Value = Vec<u8>> {
    let len = text.len().max(1);
    (0u8..8, 0..len, any::<u8>()).prop_map(move |(op, at, byte)| {
        let mut bytes = text.clone().into_bytes();
        if bytes.is_empty() {
            return bytes;
        }
        match op {
            0 => bytes[at] = byte,
            1 => bytes.insert(at, byte),
            2 => {
                bytes.remove(at);
            }
            3 => bytes.truncate(at),
            _ => {}
        }
        bytes
    })
}

/// Traces of every format: fuzzed rows, then possibly one byte mutation.
fn trace_case() -> impl Strategy<Value = (&'static str, Vec<u8>, bool)> {
    let mooncake = prop::collection::vec(mooncake_row(), 1..6).prop_map(mooncake_text);
    let format = prop::sample::select(vec!["mooncake", "mooncake-delta"]);
    (format, mooncake, any::<bool>())
        .prop_flat_map(|(format, text, jsonl)| (Just(format), mutate(text), Just(jsonl)))
}

#[test]
fn fuzz_trace_bytes() {
    fuzz("trace bytes", trace_case(), |(format, bytes, jsonl)| {
        let dir = TempDir::new().unwrap();
        fs::write(dir.path().join("t.jsonl"), &bytes).unwrap();
        let mut args: Vec<String> = ["t.jsonl", "--trace-format", format, "--report-json"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.push(dir.path().join("r.json").display().to_string());
        if jsonl {
            args.push("--report-jsonl".into());
            args.push(dir.path().join("r.jsonl").display().to_string());
        }
        // The trace path is relative to the directory: run from there via an absolute path.
        args[0] = dir.path().join("t.jsonl").display().to_string();
        check_run(dir.path(), &args)
    });
}

#[test]
fn fuzz_shared_fixtures_mutated() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/fixtures");
    let Ok(entries) = fs::read_dir(&fixtures) else {
        eprintln!(
            "SKIPPED fuzz_shared_fixtures_mutated: {} is absent",
            fixtures.display()
        );
        return;
    };
    let mut cases: Vec<(String, String)> = Vec::new();
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let format = match name.as_str() {
            "mooncake.jsonl" | "mooncake_tiny.jsonl" => "mooncake",
            "mooncake-delta.jsonl" => "mooncake-delta",
            "agentic-mooncake.jsonl" => "agentic_mooncake",
            "applied-compute-agentic.jsonl" => "applied_compute_agentic",
            "dynamo-standard.jsonl" | "dynamo-agentic.jsonl" => "dynamo",
            _ => continue,
        };
        cases.push((format.to_string(), fs::read_to_string(&path).unwrap()));
    }
    cases.sort();
    let strategy =
        prop::sample::select(cases).prop_flat_map(|(format, text)| (Just(format), mutate(text)));
    fuzz("fixture bytes", strategy, |(format, bytes)| {
        let dir = TempDir::new().unwrap();
        let trace = dir.path().join("t.jsonl");
        fs::write(&trace, &bytes).unwrap();
        let mut args = vec![trace.display().to_string(), "--trace-format".into(), format];
        if args[2] == "applied_compute_agentic" {
            args.extend(["--replay-concurrency".into(), "2".into()]);
        }
        args.extend([
            "--report-json".into(),
            dir.path().join("r.json").display().to_string(),
        ]);
        check_run(dir.path(), &args)
    });
}

/// One flag with a value drawn from ordinary, boundary and hostile ones.
fn flag() -> impl Strategy<Value = Vec<String>> {
    let count = prop_oneof![
        20 => (1i64..64).prop_map(|n| n.to_string()),
        1 => Just("0".to_string()),
        1 => Just("-1".to_string()),
        1 => Just("1000000000".to_string()),
        1 => Just("1000000000000".to_string()),
        1 => Just("18446744073709551616".to_string()),
        1 => Just("abc".to_string()),
    ];
    let float = prop_oneof![
        20 => (1u32..1000).prop_map(|n| (f64::from(n) / 10.0).to_string()),
        1 => Just("0".to_string()),
        1 => Just("-1".to_string()),
        1 => Just("1e-300".to_string()),
        1 => Just("1e308".to_string()),
        1 => Just("1e30".to_string()),
        1 => Just("nan".to_string()),
        1 => Just("inf".to_string()),
    ];
    let engine = prop_oneof![
        Just("{}".to_string()),
        Just("{\"engine_type\":\"sglang\"}".to_string()),
        Just("{\"engine_type\":\"sglang\",\"sglang\":{\"page_size\":0}}".to_string()),
        Just("{\"engine_type\":\"sglang\",\"sglang\":{\"schedule_policy\":\"lpm\"}}".to_string()),
        Just("{\"dp_size\":2}".to_string()),
        Just("{\"dp_size\":1000000000}".to_string()),
        Just("{\"num_gpu_blocks\":8,\"block_size\":4}".to_string()),
        Just("{\"engine_type\":\"trtllm\"}".to_string()),
        Just("{\"max_num_seqs\":0}".to_string()),
        Just("[1,2,3]".to_string()),
    ];
    let count_flags = prop::sample::select(vec![
        "--num-workers",
        "--replay-concurrency",
        "--turns-per-session",
        "--num-prefix-groups",
        "--arrival-seed",
        "--router-seed",
        "--length-seed",
    ]);
    let float_flags = prop::sample::select(vec![
        "--request-rate",
        "--arrival-interval-ms",
        "--arrival-speedup-ratio",
        "--shared-prefix-ratio",
        "--inter-turn-delay-ms",
        "--sla-ttft-ms",
        "--max-sim-time-ms",
        // (Not --output-tokens-stddev: like a huge --output-tokens, a huge spread is a valid
        // run that takes long to simulate.)
        "--input-tokens-stddev",
        "--random-range-ratio",
    ]);
    prop_oneof![
        (count_flags, count).prop_map(|(flag, value)| vec![flag.to_string(), value]),
        (float_flags, float).prop_map(|(flag, value)| vec![flag.to_string(), value]),
        engine.prop_map(|value| vec!["--extra-engine-args".to_string(), value]),
        prop::sample::select(vec!["round_robin", "kv_router", "random"])
            .prop_map(|mode| vec!["--router-mode".to_string(), mode.to_string()]),
    ]
}

/// A synthetic run: small sizes (so accepted runs stay quick) plus fuzzed flags.
fn synthetic_args() -> impl Strategy<Value = Vec<String>> {
    let size = prop_oneof![
        30 => (1u32..400).prop_map(|n| n.to_string()),
        1 => Just("0".to_string()),
        1 => Just("-3".to_string()),
        1 => Just("1000000000".to_string()),
    ];
    // Synthetic runs need exactly one load controller; extra flags may add a conflicting one.
    let load = prop::sample::select(vec![
        ["--replay-concurrency", "4"],
        ["--request-rate", "50"],
        ["--arrival-interval-ms", "5"],
    ]);
    (
        size.clone(),
        size,
        (1u32..40).prop_map(|n| n.to_string()),
        load,
        prop::collection::vec(flag(), 0..4),
    )
        .prop_map(|(input, output, count, load, flags)| {
            let mut args: Vec<String> = vec![
                "--input-tokens".into(),
                input,
                "--output-tokens".into(),
                output,
                "--request-count".into(),
                count,
            ];
            args.extend(load.iter().map(|s| s.to_string()));
            for flag in flags {
                args.extend(flag);
            }
            args
        })
}

#[test]
fn fuzz_argument_combinations() {
    fuzz("arguments", synthetic_args(), |mut args| {
        // Sizes that pass validation but take long to simulate are out of scope here.
        let too_big = args.windows(2).any(|pair| {
            pair[0] == "--output-tokens" && pair[1].parse::<u64>().is_ok_and(|n| n > 100_000)
        });
        prop_assume!(!too_big);
        let dir = TempDir::new().unwrap();
        args.extend([
            "--report-json".into(),
            dir.path().join("r.json").display().to_string(),
        ]);
        check_run(dir.path(), &args)
    });
}
