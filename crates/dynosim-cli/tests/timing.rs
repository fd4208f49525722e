//! Timing models as a user meets them: profile tables (`planner_profile_data`) given in the
//! engine-args JSON, their validation errors, and speculative-decoding settings. Exact agreement
//! with the reference is checked by the parity cases; these tests check behaviour that holds
//! whatever the numbers.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::{dynosim, text, ONE_REQUEST};

fn profiles() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/parity/profiles")
}

/// Runs a small synthetic replay with `engine_args` and returns the report.
fn report(engine_args: &str) -> serde_json::Map<String, Value> {
    let dir = TempDir::new().unwrap();
    let out = dir.path().join("r.json");
    let output = dynosim(
        dir.path(),
        &[
            "--input-tokens",
            "3000",
            "--output-tokens",
            "40",
            "--request-count",
            "12",
            "--replay-concurrency",
            "4",
            "--extra-engine-args",
            engine_args,
            "--report-json",
            out.to_str().unwrap(),
        ],
    );
    assert!(
        output.status.success(),
        "dynosim failed: {}",
        text(&output.stderr)
    );
    match serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap() {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn number(report: &serde_json::Map<String, Value>, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing"))
}

fn profile_args(name: &str) -> String {
    let path = profiles().join(name);
    serde_json::json!({ "planner_profile_data": path }).to_string()
}

#[test]
fn a_profile_table_replaces_the_polynomial() {
    let polynomial = report("{}");
    let table = report(&profile_args("dense.npz"));
    // dense.npz decodes in about 4.9 ms at these contexts; the polynomial never below 5.74 ms.
    // (Means mix in the prefill chunks of other requests; medians are plain decode steps.)
    assert!(number(&table, "median_itl_ms") < 5.0, "{table:?}");
    assert!(number(&polynomial, "median_itl_ms") > 5.7, "{polynomial:?}");
    assert!(number(&table, "mean_ttft_ms") < number(&polynomial, "mean_ttft_ms"));
    assert_eq!(
        number(&table, "completed_requests"),
        number(&polynomial, "completed_requests")
    );
}

#[test]
fn a_relative_path_is_read_from_the_working_directory() {
    let dir = TempDir::new().unwrap();
    std::fs::copy(profiles().join("small.npz"), dir.path().join("p.npz")).unwrap();
    let output = dynosim(
        dir.path(),
        &[
            &ONE_REQUEST[..],
            &[
                "--extra-engine-args",
                r#"{"planner_profile_data":"p.npz"}"#,
                "--report-json",
                "r.json",
            ],
        ]
        .concat(),
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn faulty_tables_are_usage_errors_naming_file_and_key() {
    let cases = [
        ("bad_missing_key.npz", "missing key 'decode_itl'"),
        (
            "bad_shape.npz",
            "key 'decode_itl' has shape [2, 3], expected [2, 2]",
        ),
        (
            "bad_unsorted.npz",
            "key 'prefill_isl' must be strictly increasing",
        ),
        (
            "bad_nan.npz",
            "key 'decode_context_length' holds a non-finite value",
        ),
        (
            "bad_short_axis.npz",
            "key 'decode_active_kv_tokens' needs at least 2 points",
        ),
        (
            "bad_length.npz",
            "key 'prefill_ttft_ms' has 3 values but 'prefill_isl' has 2",
        ),
        ("bad_not_npz.npz", "not a readable NPZ (zip) archive"),
        ("no_such_file.npz", "cannot open"),
    ];
    let dir = TempDir::new().unwrap();
    for (name, expected) in cases {
        let args = profile_args(name);
        let output = dynosim(
            dir.path(),
            &[&ONE_REQUEST[..], &["--extra-engine-args", &args]].concat(),
        );
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains("--extra-engine-args: planner_profile_data: "),
            "{stderr}"
        );
        assert!(stderr.contains(name), "{name}: {stderr}");
        assert!(stderr.contains(expected), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing is written on a usage error"
    );
}

fn profile_run(dir: &Path, profile: &Path) -> std::process::Output {
    let args = serde_json::json!({ "planner_profile_data": profile }).to_string();
    dynosim(
        dir,
        &[
            "--input-tokens",
            "3000",
            "--output-tokens",
            "40",
            "--request-count",
            "12",
            "--replay-concurrency",
            "1",
            "--extra-engine-args",
            &args,
            "--report-json",
            "r.json",
        ],
    )
}

#[test]
fn a_directory_that_is_not_a_profilers_is_refused_naming_the_expected_files() {
    let dir = TempDir::new().unwrap();
    let output = profile_run(dir.path(), dir.path());
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is a directory but not a profiler results directory"),
        "{stderr}"
    );
    assert!(
        stderr.contains("selected_prefill_interpolation/raw_data.npz"),
        "{stderr}"
    );
    assert!(!dir.path().join("r.json").exists());
}

/// The directory the reference's profiler writes (here its JSON form): prefill TTFT 20 ms +
/// 0.01 ms per token, decode ITL 8 ms + 4 ms per unit of KV use, at two context lengths.
fn write_profiler_results(dir: &Path, prefill_ms_per_token: f64) {
    let isl = [256.0, 1024.0, 2048.0, 4096.0, 8192.0];
    let ttft: Vec<f64> = isl
        .iter()
        .map(|x| 20.0 + prefill_ms_per_token * x)
        .collect();
    std::fs::write(
        dir.join("prefill_raw_data.json"),
        serde_json::json!({"prefill_isl": isl, "prefill_ttft": ttft,
                           "prefill_thpt_per_gpu": [1.0, 1.0, 1.0, 1.0, 1.0]})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.join("decode_raw_data.json"),
        serde_json::json!({"x_kv_usage": [0.05, 0.5, 1.0, 0.05, 0.5, 1.0],
                           "y_context_length": [1000, 1000, 1000, 8000, 8000, 8000],
                           "z_itl": [8.2, 10.0, 12.0, 8.2, 10.0, 12.0],
                           "z_thpt_per_gpu": [1, 1, 1, 1, 1, 1],
                           "max_kv_tokens": 200000})
        .to_string(),
    )
    .unwrap();
}

#[test]
fn a_profiler_results_directory_drives_the_timing() {
    let dir = TempDir::new().unwrap();
    let slow = dir.path().join("slow");
    let fast = dir.path().join("fast");
    std::fs::create_dir_all(&slow).unwrap();
    std::fs::create_dir_all(&fast).unwrap();
    write_profiler_results(&slow, 0.02);
    write_profiler_results(&fast, 0.01);
    let mut ttft = Vec::new();
    for profile in [&fast, &slow] {
        let output = profile_run(dir.path(), profile);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let report: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap())
                .unwrap();
        ttft.push(report["min_ttft_ms"].as_f64().unwrap());
        // Decode steps come from the table (8..12 ms), not the polynomial's.
        let itl = report["mean_itl_ms"].as_f64().unwrap();
        assert!((8.0..=12.5).contains(&itl), "mean ITL {itl}");
    }
    // One 3000-token prompt at a time: its prefill pass takes 20 + 0.01 * 3000 = 50 ms, or
    // 80 ms with the slow profile (plus the same decode share in both).
    assert!((ttft[1] - ttft[0] - 30.0).abs() < 0.5, "{ttft:?}");
    assert!((50.0..60.0).contains(&ttft[0]), "{ttft:?}");
}
