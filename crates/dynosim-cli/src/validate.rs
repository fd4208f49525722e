//! `dynosim validate --out DIR`: measured runs (the silicon CSV aiconfigurator-core ships, any
//! CSV with its columns, AIPerf run directories) rebuilt, simulated and compared (see the
//! `dynosim-validate` crate); writes `rows.csv`, `summary.json` and `report.html` into DIR
//! together, and prints the error table.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Parser, ValueEnum};
use dynosim::{Error, Result};
use dynosim_validate::{Family, Filters, MeasuredRun, Mode, Split};
use serde_json::{json, Map, Value};

use dynosim_run::output::{commit, PreparedOutput};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SplitArg {
    Train,
    Test,
    All,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    Agg,
    Disagg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FamilyArg {
    /// Silicon rows from the InferenceX benchmarks (client protocol known)
    Inferencex,
    /// Silicon rows from aiconfigurator's gap analysis (client protocol unknown)
    #[value(name = "aic-gap-analysis")]
    GapAnalysis,
    /// AIPerf run directories
    Aiperf,
    All,
}

/// Validates dynosim against measured runs: each run is rebuilt as its benchmark client ran
/// it, simulated with AIC timing, and its predicted mean TTFT and TPOT compared with the
/// measured ones. Without --csv or --aiperf-dir, the measured runs are aiconfigurator-core's
/// systems/silicon_sample.csv (found through $DYNOSIM_PYTHON, else python3). Rows run in
/// parallel; DIR keeps a journal, so a rerun simulates only what it lacks.
#[derive(Parser, Debug)]
#[command(
    name = "validate",
    disable_version_flag = true,
    color = clap::ColorChoice::Never
)]
pub struct ValidateCli {
    /// Output directory: rows.csv, summary.json, report.html and the journal (created if
    /// missing)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Rows of the fixed split: TEST when int(sha256(id)[:8], 16) % 4 == 0, TRAIN otherwise
    #[arg(long, value_enum, default_value = "all")]
    pub split: SplitArg,
    #[command(flatten)]
    pub runs: MeasuredRunsArgs,
}

/// Which measured runs to read and select, and how to rebuild them: shared by `validate` and
/// `calibrate`.
#[derive(Args, Debug)]
pub struct MeasuredRunsArgs {
    /// A CSV with the columns of aiconfigurator-core's silicon_sample.csv (instead of the
    /// packaged one)
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// An AIPerf run directory (profile_export_aiperf.json with its input_config); repeatable
    #[arg(long = "aiperf-dir", value_name = "DIR")]
    pub aiperf_dirs: Vec<PathBuf>,
    /// Only rows of this system (repeatable, e.g. h200_sxm)
    #[arg(long = "system", value_name = "SYSTEM")]
    pub systems: Vec<String>,
    /// Only rows of this backend (repeatable: vllm, sglang, trtllm)
    #[arg(long = "backend", value_name = "BACKEND")]
    pub backends: Vec<String>,
    /// Only rows of this model, as the CSV names it (repeatable)
    #[arg(long = "model", value_name = "MODEL")]
    pub models: Vec<String>,
    /// Only aggregated or disaggregated rows
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Only rows of this family
    #[arg(long, value_enum, default_value = "all")]
    pub family: FamilyArg,
    /// Engine arguments (JSON object) merged over every row's own, in every pool (e.g. an
    /// aic_calibration); for an AIPerf directory not written by dynosim, the engine itself
    #[arg(long, value_name = "JSON")]
    pub extra_engine_args: Option<String>,
    /// Rebuild every prompt with exactly the row's ISL and OSL instead of the client's
    /// lengths (uniform in [0.8·L, L] for InferenceX rows): an ablation
    #[arg(long)]
    pub fixed_lengths: bool,
    /// Rebuild InferenceX rows with dynosim's engine defaults and the CSV's widths as written,
    /// instead of their benchmark's deployment (the scripts' server settings: KV-cache dtype,
    /// KV memory share, token budget, running cap, SGLang's polling interval, TRT-LLM's batch
    /// waiting; and single-node widths where the CSV multiplies expert-parallel ones): an
    /// ablation, and what the `silicon-engine-defaults` calibration was fitted with
    #[arg(long)]
    pub engine_defaults: bool,
    /// Rows simulated at once (default: one per core)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
}

impl MeasuredRunsArgs {
    fn extra_object(&self) -> Result<Map<String, Value>> {
        let Some(text) = &self.extra_engine_args else {
            return Ok(Map::new());
        };
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(other) => Err(Error::usage_about(
                "--extra-engine-args",
                format!("expected a JSON object, got {other}"),
            )),
            Err(err) => Err(Error::usage_about(
                "--extra-engine-args",
                format!("invalid JSON: {err}"),
            )),
        }
    }

    /// The measured runs of every input (the packaged CSV when none is named), with the
    /// inputs' names.
    pub fn read(&self) -> Result<(Vec<MeasuredRun>, Vec<String>)> {
        let extra = self.extra_object()?;
        let mut runs = Vec::new();
        let mut inputs = Vec::new();
        let csv = match &self.csv {
            Some(path) => Some(path.clone()),
            None if self.aiperf_dirs.is_empty() => Some(dynosim_validate::silicon::packaged_csv(
                &dynosim_aic_tables::python(),
            )?),
            None => None,
        };
        if let Some(csv) = &csv {
            let rebuild = dynosim_validate::silicon::Rebuild {
                lengths: if self.fixed_lengths {
                    dynosim_validate::silicon::Lengths::Fixed
                } else {
                    dynosim_validate::silicon::Lengths::Client
                },
                server_settings: !self.engine_defaults,
            };
            runs.extend(dynosim_validate::silicon::read_csv(csv, &extra, rebuild)?);
            inputs.push(csv.display().to_string());
        }
        for dir in &self.aiperf_dirs {
            runs.push(dynosim_validate::aiperf_dir::read(dir, &extra)?);
            inputs.push(dir.display().to_string());
        }
        Ok((runs, inputs))
    }

    /// The row filters, with `split`.
    pub fn filters(&self, split: Option<Split>) -> Filters {
        Filters {
            split,
            systems: self.systems.clone(),
            backends: self.backends.clone(),
            models: self.models.clone(),
            mode: self.mode.map(|mode| match mode {
                ModeArg::Agg => Mode::Agg,
                ModeArg::Disagg => Mode::Disagg,
            }),
            families: match self.family {
                FamilyArg::Inferencex => vec![Family::InferenceX],
                FamilyArg::GapAnalysis => vec![Family::GapAnalysis],
                FamilyArg::Aiperf => vec![Family::Aiperf],
                FamilyArg::All => Vec::new(),
            },
        }
    }

    /// The selection and settings, for the outputs' context.
    pub fn describe(&self, split: &str) -> Result<Value> {
        Ok(json!({
            "split": split,
            "system": self.systems,
            "backend": self.backends,
            "model": self.models,
            "mode": self.mode.map(|mode| format!("{mode:?}").to_lowercase()),
            "family": format!("{:?}", self.family).to_lowercase(),
            "extra_engine_args": self.extra_object()?,
            "fixed_lengths": self.fixed_lengths,
            "server_settings": !self.engine_defaults,
        }))
    }
}

/// Runs the validation, publishes its files and returns the text to print.
pub fn run(cli: &ValidateCli) -> Result<String> {
    let started = Instant::now();
    let (runs, inputs) = cli.runs.read()?;
    let filters = cli.runs.filters(match cli.split {
        SplitArg::Train => Some(Split::Train),
        SplitArg::Test => Some(Split::Test),
        SplitArg::All => None,
    });
    // Every output is checked writable before any simulation.
    std::fs::create_dir_all(&cli.out).map_err(|err| {
        Error::runtime(format!(
            "cannot create the output directory {}: {err}",
            cli.out.display()
        ))
    })?;
    let files = ["rows.csv", "summary.json", "report.html"];
    let mut prepared = files
        .iter()
        .zip([
            "validation rows CSV",
            "validation summary",
            "validation HTML report",
        ])
        .map(|(name, what)| PreparedOutput::prepare(what, &cli.out.join(name)))
        .collect::<Result<Vec<_>>>()?;

    let outcome = dynosim_validate::run(
        runs,
        &filters,
        &cli.out,
        &dynosim_validate::RunOptions {
            jobs: cli.runs.jobs.map(usize::from),
            progress: true,
        },
    )?;
    let mut context = Map::new();
    context.insert("inputs".into(), json!(inputs));
    context.insert(
        "filters".into(),
        cli.runs
            .describe(&format!("{:?}", cli.split).to_lowercase())?,
    );
    context.insert("wall_time_s".into(), json!(started.elapsed().as_secs_f64()));
    let summary = dynosim_validate::outputs::summary(&outcome.rows, context);
    let mut summary_text = serde_json::to_string_pretty(&summary)
        .map_err(|err| Error::runtime(format!("cannot format summary.json: {err}")))?;
    summary_text.push('\n');
    let contents = [
        dynosim_validate::outputs::rows_csv(&outcome.rows)?,
        summary_text.into_bytes(),
        dynosim_validate::outputs::report_html(&outcome.rows, &summary).into_bytes(),
    ];
    for (output, bytes) in prepared.iter_mut().zip(&contents) {
        output.write_all(bytes)?;
    }
    commit(prepared)?;

    let mut text = String::new();
    let counts = dynosim_validate::counts(&outcome.rows);
    let _ = writeln!(
        text,
        "{} rows selected: {} ok, {} unmodelable, {} error ({} simulated now over {} engine \
         configurations, {} from the journal) in {:.1} s",
        outcome.rows.len(),
        counts.get("ok").unwrap_or(&0),
        counts.get("unmodelable").unwrap_or(&0),
        counts.get("error").unwrap_or(&0),
        outcome.simulated,
        outcome.configurations,
        outcome.from_journal,
        started.elapsed().as_secs_f64()
    );
    text.push_str(&dynosim_validate::outputs::summary_table(&summary));
    for name in files {
        let _ = writeln!(text, "Wrote {}", cli.out.join(name).display());
    }
    Ok(text)
}
