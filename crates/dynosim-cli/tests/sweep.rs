//! `dynosim sweep` as a user runs it: every row equals the single `dynosim` run of its
//! candidate (run through the shell from the command line the sweep gives), best.json's
//! command lines reproduce their rows, and bad specs are usage errors naming file and key.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use dynosim_sweep::{SweepSpec, SIMULATOR_SPEED_KEYS};
use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::{dynosim, text};

/// Runs a command line as a user would paste it (`dynosim ...`), with `--report-json` added,
/// and returns the report.
fn run_command_line(dir: &Path, command: &str) -> serde_json::Map<String, Value> {
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_dynosim")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let report = dir.join("single.json");
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!("{command} --report-json {}", report.display()))
        .env("PATH", path)
        .current_dir(dir)
        .output()
        .expect("sh runs");
    assert!(
        output.status.success(),
        "{command}\n{}",
        text(&output.stderr)
    );
    let parsed: Value = serde_json::from_str(&fs::read_to_string(&report).unwrap()).unwrap();
    parsed.as_object().unwrap().clone()
}

/// results.csv as maps from column to cell.
fn read_table(path: &Path) -> Vec<HashMap<String, String>> {
    let mut reader = csv::Reader::from_path(path).expect("table exists");
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    reader
        .records()
        .map(|record| {
            let record = record.unwrap();
            header
                .iter()
                .cloned()
                .zip(record.iter().map(String::from))
                .collect()
        })
        .collect()
}

/// Every report key of `single` equals the row's cell (the simulator's own speed apart).
fn assert_row_equals_report(
    row: &HashMap<String, String>,
    single: &serde_json::Map<String, Value>,
) {
    for (key, value) in single {
        if SIMULATOR_SPEED_KEYS.contains(&key.as_str()) {
            continue;
        }
        let cell = row
            .get(key)
            .unwrap_or_else(|| panic!("the table has no column {key}"));
        let expected = value.as_f64().unwrap();
        let got: f64 = cell.parse().unwrap_or_else(|_| panic!("{key}: {cell:?}"));
        assert_eq!(got, expected, "{key} of candidate {}", row["candidate"]);
    }
}

fn write_spec(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("spec.yaml");
    fs::write(&path, yaml).unwrap();
    path
}

/// Runs the sweep and checks every row that ran against its single run.
fn check_rows_equal_single_runs(yaml: &str, least_rows: usize) {
    let dir = TempDir::new().unwrap();
    let spec_path = write_spec(dir.path(), yaml);
    let output = dynosim(
        dir.path(),
        &["sweep", "spec.yaml", "--out", "out", "--jobs", "2"],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let rows = read_table(&dir.path().join("out/results.csv"));
    let spec = SweepSpec::from_file(&spec_path).unwrap();
    let commands: HashMap<String, String> = dynosim_sweep::candidates(&spec)
        .into_iter()
        .map(|candidate| (candidate.hash, candidate.settings.command_line()))
        .collect();
    let ran: Vec<_> = rows.iter().filter(|row| row["error"].is_empty()).collect();
    assert!(ran.len() >= least_rows, "only {} rows ran", ran.len());
    for row in ran {
        let single = run_command_line(dir.path(), &commands[&row["candidate"]]);
        assert_row_equals_report(row, &single);
    }
}

#[test]
fn synthetic_rows_equal_single_runs_kv_router_included() {
    check_rows_equal_single_runs(
        "base:
  input_tokens: 512
  output_tokens: 64
  request_count: 48
  replay_concurrency: 12
  shared_prefix_ratio: 0.5
  num_prefix_groups: 4
  extra_engine_args: {num_gpu_blocks: 160, block_size: 64}
grid:
  num_workers: [2, 3]
  router_mode: [round_robin, kv_router]
  router_config.router_temperature: [0.0, 0.5]
  router_seed: [0, 7]
  extra_engine_args.max_num_seqs: [8, 24]
",
        32,
    );
}

#[test]
fn trace_rows_equal_single_runs_kv_router_included() {
    let trace =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/parity/traces/kv_sparse.jsonl");
    let trace = trace
        .canonicalize()
        .expect("the repository's kv_sparse trace");
    check_rows_equal_single_runs(
        &format!(
            "base:
  trace_file: {}
  router_mode: kv_router
grid:
  num_workers: [2, 4]
  router_config.overlap_score_credit: [0.0, 1.0]
  router_config.router_temperature: [0.0, 1.0]
",
            trace.display()
        ),
        8,
    );
}

#[test]
fn aggregated_and_disaggregated_rows_in_one_sweep_equal_single_runs() {
    // The second grid unsets the base's aggregated engine arguments and gives both pools'.
    check_rows_equal_single_runs(
        "base:
  input_tokens: 512
  output_tokens: 64
  request_count: 64
  replay_concurrency: 16
  extra_engine_args: {num_gpu_blocks: 160, block_size: 64}
grid:
  - num_workers: [2, 4]
  - extra_engine_args: [null]
    prefill_engine_args: [{num_gpu_blocks: 160, block_size: 64, worker_type: prefill}]
    decode_engine_args: [{num_gpu_blocks: 160, block_size: 64, worker_type: decode}]
    num_prefill_workers: [1, 2]
    num_decode_workers: [1, 2]
    router_mode: [round_robin, kv_router]
",
        8,
    );
}

#[test]
fn best_json_command_lines_reproduce_their_rows() {
    let dir = TempDir::new().unwrap();
    write_spec(
        dir.path(),
        "base:
  input_tokens: 512
  output_tokens: 64
  request_count: 64
  replay_concurrency: 16
  shared_prefix_ratio: 0.5
  num_prefix_groups: 4
  sla_ttft_ms: 400
  extra_engine_args: {num_gpu_blocks: 160, block_size: 64, max_num_seqs: 24}
grid:
  - num_workers: [1, 2, 3, 4]
    extra_engine_args.aic_tp_size: [1, 2]
  - num_workers: [2, 4]
    router_mode: [kv_router]
    router_config.overlap_score_credit: [0.0, 1.0]
budget: {gpus: 4}
sla: {mean_ttft_ms: 300, p95_tpot_ms: 25}
",
    );
    let output = dynosim(dir.path(), &["sweep", "spec.yaml", "--out", "out"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    // 8 + 4 candidates; tp 2 with 3 or 4 workers is over the 4-GPU budget.
    assert!(
        stdout.starts_with(
            "10 candidates: 10 run, 0 from the store, 0 failed; 2 over the GPU budget skipped"
        ),
        "{stdout}"
    );
    let best: Value =
        serde_json::from_str(&fs::read_to_string(dir.path().join("out/best.json")).unwrap())
            .unwrap();
    let entries = best["best"].as_object().unwrap();
    assert_eq!(entries.len(), 5);
    for (objective, entry) in entries {
        assert!(!entry.is_null(), "no best {objective}");
        let single = run_command_line(dir.path(), entry["command"].as_str().unwrap());
        let report = entry["report"].as_object().unwrap();
        for (key, value) in &single {
            if !SIMULATOR_SPEED_KEYS.contains(&key.as_str()) {
                assert_eq!(report[key].as_f64(), value.as_f64(), "{objective}: {key}");
            }
        }
        assert!(stdout.contains(entry["command"].as_str().unwrap()));
    }
    let rows = read_table(&dir.path().join("out/results.csv"));
    let fewest_feasible = rows
        .iter()
        .filter(|row| row["feasible"] == "true")
        .map(|row| row["gpus"].parse::<u64>().unwrap())
        .min();
    assert!(rows.iter().any(|row| row["feasible"] == "false"));
    assert_eq!(entries["fewest_gpus"]["gpus"].as_u64(), fewest_feasible);
}

#[test]
fn bad_specs_are_usage_errors_naming_file_and_key() {
    let dir = TempDir::new().unwrap();
    let cases = [
        ("base: {}\ngrid: {num_workers: []}\n", "spec.yaml: grid.num_workers: empty list of values"),
        (
            "base: {num_workers: two}\ngrid: {router_mode: [kv_router]}\n",
            "spec.yaml: base.num_workers: expected an integer, got \"two\"",
        ),
        (
            "base: {}\ngrid: {extra_engine_args.max_num_sqs: [1]}\n",
            "spec.yaml: grid.extra_engine_args.max_num_sqs: unknown extra_engine_args key 'max_num_sqs'",
        ),
        ("base: {}\ngrid: {num_workers: [1]}\nbudgte: {gpus: 2}\n", "spec.yaml: budgte: unknown key"),
        ("base: [\n", "spec.yaml: invalid YAML"),
    ];
    for (yaml, expected) in cases {
        write_spec(dir.path(), yaml);
        let output = dynosim(dir.path(), &["sweep", "spec.yaml", "--out", "out"]);
        assert_eq!(output.status.code(), Some(2), "{yaml}");
        let stderr = text(&output.stderr);
        assert!(
            stderr.contains(&format!("dynosim: error: {expected}")),
            "{stderr}"
        );
        assert!(
            !dir.path().join("out").exists(),
            "a rejected spec wrote nothing"
        );
    }
    let output = dynosim(dir.path(), &["sweep", "missing.yaml", "--out", "out"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("cannot read sweep spec missing.yaml"));
    let output = dynosim(dir.path(), &["sweep", "spec.yaml"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("--out <DIR>"));
}

#[test]
fn every_command_line_flag_exists() {
    use clap::CommandFactory;
    let command = dynosim_cli::Cli::command();
    let longs: Vec<String> = command
        .get_arguments()
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect();
    for flag in dynosim_sweep::settings::flag_names() {
        assert!(longs.contains(&flag), "{flag} is not a dynosim flag");
    }
}

/// `dynosim sweep --ray local` of a one-candidate spec in `dir`, with `python` as the Python
/// that runs Ray.
fn ray_sweep(dir: &Path, python: &Path) -> Command {
    write_spec(dir, "base: {}\ngrid: {num_workers: [1]}\n");
    let mut command = Command::new(env!("CARGO_BIN_EXE_dynosim"));
    command
        .args(["sweep", "spec.yaml", "--out", "out", "--ray", "local"])
        .env("DYNOSIM_RAY_PYTHON", python)
        .current_dir(dir);
    command
}

#[test]
fn ray_without_a_python_that_has_it_is_a_clear_error() {
    let dir = TempDir::new().unwrap();
    let output = ray_sweep(dir.path(), Path::new("/nonexistent/python"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("dynosim: error: --ray: cannot run /nonexistent/python"),
        "{stderr}"
    );
}

/// `DYNOSIM_PROG` (which the Python package's `python -m` entry points set before they exec the
/// binary) names the program in error lines, and the processes the binary starts do not
/// inherit it: the `--ray` probe here is a script whose last stderr line, which the error
/// quotes, is the variable as the script sees it.
#[cfg(unix)]
#[test]
fn dynosim_prog_names_the_program_and_is_not_passed_on() {
    use std::os::unix::fs::PermissionsExt;

    let dir = TempDir::new().unwrap();
    let probe = dir.path().join("probe.sh");
    fs::write(
        &probe,
        "#!/bin/sh\necho \"DYNOSIM_PROG=${DYNOSIM_PROG-unset}\" >&2\nexit 1\n",
    )
    .unwrap();
    fs::set_permissions(&probe, fs::Permissions::from_mode(0o755)).unwrap();
    let output = ray_sweep(dir.path(), &probe)
        .env("DYNOSIM_PROG", "python -m dynamo.replay")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("python -m dynamo.replay: error: --ray: "),
        "{stderr}"
    );
    assert!(stderr.contains("(DYNOSIM_PROG=unset)"), "{stderr}");
}

#[test]
fn a_goodput_objective_without_per_request_slas_says_why_it_has_no_winner() {
    let dir = TempDir::new().unwrap();
    let spec = |base_sla: &str| {
        format!(
            "base: {{input_tokens: 200, output_tokens: 8, request_count: 8, \
             replay_concurrency: 4{base_sla}}}\n\
             grid: {{num_workers: [1, 2]}}\n\
             sla: {{p95_ttft_ms: 100000}}\n\
             objectives: [throughput, goodput]\n"
        )
    };
    fs::write(dir.path().join("no-sla.yaml"), spec("")).unwrap();
    let output = dynosim(dir.path(), &["sweep", "no-sla.yaml", "--out", "a"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(stdout.contains("best throughput: "), "{stdout}");
    assert!(
        stdout
            .contains("best goodput: none: no run measured goodput, which needs a per-request SLA"),
        "{stdout}"
    );
    assert!(!stdout.contains("no feasible candidate"), "{stdout}");

    // With an SLA in base: every run measures goodput, and a best one is named.
    fs::write(dir.path().join("sla.yaml"), spec(", sla_ttft_ms: 100000")).unwrap();
    let output = dynosim(dir.path(), &["sweep", "sla.yaml", "--out", "b"]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let line = stdout
        .lines()
        .find(|line| line.starts_with("best goodput: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(!line.contains("none"), "{line}");
}
