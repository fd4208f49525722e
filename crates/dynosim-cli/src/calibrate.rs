//! `dynosim calibrate --out FILE`: fits AIC timing corrections on the TRAIN rows of measured
//! runs (see `dynosim_validate::calibrate`) and writes the calibration file that the
//! engine-args key `aic_calibration` reads; prints what each group's fit achieved.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use dynosim::{Error, Result};
use dynosim_validate::calibrate::{CalibrateOptions, GroupFit};
use dynosim_validate::Split;
use serde_json::json;

use crate::validate::MeasuredRunsArgs;
use dynosim_run::output::{commit, PreparedOutput};

/// Fits AIC timing corrections per (backend, system), and per model where a model has enough
/// rows, on the TRAIN rows of measured runs (never a TEST row: `int(sha256(id)[:8], 16) % 4 ==
/// 0`), and writes a calibration file for the engine-args key "aic_calibration". Each row is
/// rebuilt and simulated as `dynosim validate` does, under candidate corrections: prefill and
/// decode scales, per-pass and per-token costs, the share of the estimated KV capacity the
/// engine gets and, with speculative decoding, the drafts' acceptance.
#[derive(Parser, Debug)]
#[command(
    name = "calibrate",
    disable_version_flag = true,
    color = clap::ColorChoice::Never
)]
pub struct CalibrateCli {
    /// The calibration file to write (JSON, format dynosim-aic-calibration/1)
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    #[command(flatten)]
    pub runs: MeasuredRunsArgs,
    /// At most this many rows per fitted group (a fixed sample spread over the rows' lengths
    /// and concurrencies)
    #[arg(long, value_name = "N", default_value_t = CalibrateOptions::default().rows_per_group as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub rows_per_group: u32,
    /// At most this many evaluations (simulations of the group's rows) per fitted group
    #[arg(long, value_name = "N", default_value_t = CalibrateOptions::default().max_evaluations as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_evaluations: u32,
    /// Groups (and models) with fewer usable rows get no entry of their own
    #[arg(long, value_name = "N", default_value_t = CalibrateOptions::default().min_rows as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub min_rows: u32,
    /// Fit one entry per (backend, system) only, no per-model entries
    #[arg(long)]
    pub no_per_model: bool,
    /// Refine each engine configuration (widths, quantisation) of a fitted model that has
    /// --min-rows rows, and each engine version such a configuration was measured with, with
    /// at most this many evaluations each, moving only the per-request delay and the prefill
    /// and decode scales (0: no configuration or engine-version entries)
    #[arg(long, value_name = "N",
          default_value_t = CalibrateOptions::default().configuration_evaluations as u32)]
    pub configuration_evaluations: u32,
}

/// Runs the fit, writes the calibration file and returns the text to print.
pub fn run(cli: &CalibrateCli) -> Result<String> {
    let started = Instant::now();
    let (runs, inputs) = cli.runs.read()?;
    let filters = cli.runs.filters(Some(Split::Train));
    let mut output = PreparedOutput::prepare("calibration file", &cli.out)?;
    let options = CalibrateOptions {
        jobs: cli.runs.jobs.map(usize::from),
        rows_per_group: cli.rows_per_group as usize,
        max_evaluations: cli.max_evaluations as usize,
        min_rows: cli.min_rows as usize,
        per_model: !cli.no_per_model,
        configuration_evaluations: cli.configuration_evaluations as usize,
    };
    let progress = |line: &str| eprintln!("{line}");
    let mut calibration =
        dynosim_validate::calibrate::calibrate(runs, &filters, &options, &progress)?;
    if calibration.file.entries.is_empty() {
        return Err(Error::runtime(format!(
            "no group had {} usable TRAIN rows: nothing to calibrate (rows skipped: {})",
            cli.min_rows,
            describe_skipped(&calibration.skipped)
        )));
    }
    calibration.file.fitted_on = json!({
        "inputs": inputs,
        "filters": cli.runs.describe("train")?,
        "rows_per_group": cli.rows_per_group,
        "max_evaluations": cli.max_evaluations,
        "min_rows": cli.min_rows,
        "per_model": !cli.no_per_model,
        "configuration_evaluations": cli.configuration_evaluations,
        "dynosim": env!("CARGO_PKG_VERSION"),
    });
    let mut text = serde_json::to_string_pretty(&calibration.file)
        .map_err(|err| Error::runtime(format!("cannot format the calibration: {err}")))?;
    text.push('\n');
    output.write_all(text.as_bytes())?;
    commit(vec![output])?;

    let mut printed = String::new();
    let _ = writeln!(
        printed,
        "{} entries fitted on TRAIN rows in {:.1} s (rows skipped: {})",
        calibration.file.entries.len(),
        started.elapsed().as_secs_f64(),
        describe_skipped(&calibration.skipped)
    );
    printed.push_str(&fit_table(&calibration.groups));
    let _ = writeln!(printed, "Wrote {}", cli.out.display());
    Ok(printed)
}

fn describe_skipped(skipped: &std::collections::BTreeMap<String, usize>) -> String {
    if skipped.is_empty() {
        return "none".to_owned();
    }
    skipped
        .iter()
        .map(|(reason, count)| format!("{count} {reason}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line per fitted group: median absolute errors before and after, and the corrections.
fn fit_table(groups: &[GroupFit]) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{:<10} {:<10} {:<28} {:>5} {:>15} {:>15}  corrections",
        "backend", "system", "model", "rows", "TTFT before>after", "TPOT before>after"
    );
    for group in groups {
        let model = match (&group.model, &group.configuration) {
            (_, Some(configuration)) => match &group.engine_version {
                Some(version) => format!("    {configuration}, engine version {version}"),
                None => format!("  {configuration}"),
            },
            (Some(model), None) => model.clone(),
            (None, None) => "(all)".to_owned(),
        };
        let corrections = match &group.corrections {
            Some(corrections) => corrections.to_string(),
            None => "no entry (too few rows)".to_owned(),
        };
        if !group.median_of.is_empty() {
            let _ = writeln!(
                text,
                "{:<10} {:<10} {:<28} {:>5} {:>33}  {}",
                group.backend,
                group.system,
                model,
                "",
                format!("median of {} models", group.median_of.len()),
                corrections
            );
            continue;
        }
        let _ = writeln!(
            text,
            "{:<10} {:<10} {:<28} {:>5} {:>6.1}%>{:>6.1}% {:>6.1}%>{:>6.1}%  {}",
            group.backend,
            group.system,
            model,
            group.rows_used,
            group.before.ttft_median_pct,
            group.after.ttft_median_pct,
            group.before.tpot_median_pct,
            group.after.tpot_median_pct,
            corrections
        );
    }
    text
}
