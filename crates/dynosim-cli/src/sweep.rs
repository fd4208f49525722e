//! `dynosim sweep SPEC.yaml --out DIR`: many runs of one workload over a grid of settings
//! (see the `dynosim-sweep` crate); prints where the tables are and the best candidates.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use dynosim::Result;
use dynosim_sweep::{AnySpec, RunOptions, SweepSpec};
use serde_json::Value;

/// Runs a sweep: every candidate of SPEC (a YAML file with base: and grid:) in parallel, the
/// results stored in DIR as they finish (a rerun skips stored candidates), then results.csv,
/// pareto.csv, best.json (the best candidate per objective, with its dynosim command line) and
/// report.html.
/// SPEC may also be a replay_optimize ReplayOptimizeSpec (engine:, hardware:, workload:,
/// camelCase): it is searched with the reference's coordinate descent and written as
/// evaluated.csv, feasible.csv and result.json.
#[derive(Parser, Debug)]
#[command(
    name = "sweep",
    disable_version_flag = true,
    color = clap::ColorChoice::Never
)]
pub struct SweepCli {
    /// The sweep spec (YAML): base:, grid:, and optionally budget:, sla:, objectives:, search:
    #[arg(value_name = "SPEC")]
    pub spec: PathBuf,
    /// Output directory (created if missing; holds the result store between runs)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Candidates run at once (default: one per core)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
    /// Run the candidates on a Ray cluster: `local` starts one for this sweep, anything else is
    /// a running cluster's address. Needs Python with dynosim and ray (`pip install
    /// 'dynosim[ray]'`): $DYNOSIM_RAY_PYTHON, else python3
    #[arg(long, value_name = "ADDRESS")]
    pub ray: Option<String>,
}

/// `--ray`: the sweep runs in Python (`python -m dynosim._ray`), which drives Ray and this
/// same sweep code; its output passes through. Returns the exit code.
pub fn run_on_ray(cli: &SweepCli, address: &str) -> Result<i32> {
    let python = std::env::var("DYNOSIM_RAY_PYTHON")
        .ok()
        .filter(|python| !python.is_empty())
        .unwrap_or_else(|| "python3".to_owned());
    // A missing package gets one clear message instead of a Python traceback.
    let probe = std::process::Command::new(&python)
        .args(["-c", "import dynosim._ray, ray"])
        .output()
        .map_err(|err| {
            dynosim::Error::runtime(format!(
                "--ray: cannot run {python} (set DYNOSIM_RAY_PYTHON to a Python with dynosim \
                 and ray installed): {err}"
            ))
        })?;
    if !probe.status.success() {
        let stderr = String::from_utf8_lossy(&probe.stderr);
        let reason = stderr.lines().last().unwrap_or("import failed");
        return Err(dynosim::Error::runtime(format!(
            "--ray: {python} cannot import dynosim and ray ({reason}); install them with \
             pip install 'dynosim[ray]', or set DYNOSIM_RAY_PYTHON to a Python that has them"
        )));
    }
    let mut command = std::process::Command::new(&python);
    command
        .args(["-m", "dynosim._ray"])
        .arg(&cli.spec)
        .arg("--out")
        .arg(&cli.out)
        .args(["--ray", address]);
    if let Some(jobs) = cli.jobs {
        command.args(["--jobs", &jobs.to_string()]);
    }
    let status = command.status().map_err(|err| {
        dynosim::Error::runtime(format!(
            "--ray: cannot run {python} (set DYNOSIM_RAY_PYTHON to a Python with dynosim and \
             ray installed): {err}"
        ))
    })?;
    Ok(status.code().unwrap_or(1))
}

/// Runs the sweep and returns the summary to print.
pub fn run(cli: &SweepCli) -> Result<String> {
    let options = RunOptions {
        jobs: cli.jobs.map(usize::from),
        progress: Some(Arc::new(crate::progress::SweepBar::default())),
        cancel: None,
    };
    match AnySpec::from_file(&cli.spec)? {
        AnySpec::Sweep(spec) => run_sweep(&spec, cli, &options),
        AnySpec::Optimize(spec) => {
            let result = dynosim_sweep::optimize::run(&spec, &cli.out, &options)?;
            Ok(optimize_summary(&result, cli))
        }
    }
}

/// The summary of a ReplayOptimizeSpec search: each result's best feasible and infeasible
/// states with their command lines.
fn optimize_summary(result: &Value, cli: &SweepCli) -> String {
    let mut text = String::new();
    let mut describe = |label: &str, result: &Value| {
        let _ = writeln!(
            text,
            "{label}{} states evaluated, {} feasible",
            result["evaluations"], result["feasible"]
        );
        for key in ["best_feasible", "best_infeasible"] {
            match result[key].as_object() {
                Some(record) => {
                    let _ = writeln!(
                        text,
                        "{key}: {} GPUs, {} output tok/s, violation {}\n  {}",
                        record["total_gpus_used"],
                        record["output_throughput_tok_s"],
                        record["violation_penalty"],
                        record["command"].as_str().unwrap_or_default()
                    );
                }
                None => {
                    let _ = writeln!(text, "{key}: none");
                }
            }
        }
    };
    if result.get("agg_result").is_some() {
        describe("agg: ", &result["agg_result"]);
        describe("disagg: ", &result["disagg_result"]);
        let _ = writeln!(text, "chosen mode: {}", result["chosen_mode"]);
    } else {
        describe("", result);
    }
    let _ = writeln!(text, "Wrote {}", cli.out.join("result.json").display());
    text
}

fn run_sweep(spec: &SweepSpec, cli: &SweepCli, options: &RunOptions) -> Result<String> {
    let spec = spec.clone();
    let outcome = dynosim_sweep::run(&spec, &cli.out, options)?;
    let failed = outcome
        .rows
        .iter()
        .filter(|row| !row.error.is_empty())
        .count();
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{} candidates: {} run, {} from the store, {} failed; {} over the GPU budget skipped",
        outcome.rows.len(),
        outcome.evaluated,
        outcome.stored,
        failed,
        outcome.over_budget
    );
    let best = dynosim_sweep::table::best_json(&spec, &outcome.rows, outcome.over_budget);
    if let Some(best) = best["best"].as_object() {
        for (objective, entry) in best {
            match entry.get("command").and_then(|command| command.as_str()) {
                Some(command) => {
                    let _ = writeln!(
                        text,
                        "best {objective}: {} ({})\n  {command}",
                        entry["candidate"].as_str().unwrap_or_default(),
                        entry["value"]
                    );
                }
                None if objective == "goodput"
                    && outcome
                        .rows
                        .iter()
                        .all(|row| row.metric("goodput_output_throughput_tok_s").is_none()) =>
                {
                    // The report has goodput keys only when the run itself has a per-request
                    // SLA; the sweep's `sla:` section only judges the rows afterwards.
                    let _ = writeln!(
                        text,
                        "best goodput: none: no run measured goodput, which needs a per-request \
                         SLA in the runs' settings (sla_ttft_ms, sla_itl_ms or sla_e2e_ms in \
                         base: or grid:); the spec's sla: section only marks rows feasible"
                    );
                }
                None => {
                    let _ = writeln!(text, "best {objective}: no feasible candidate");
                }
            }
        }
    }
    for file in &outcome.files {
        let _ = writeln!(text, "Wrote {}", file.display());
    }
    Ok(text)
}
