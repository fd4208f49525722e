//! `dynosim validate`: measured benchmark runs rebuilt as their client ran them, simulated, and
//! the simulator's errors against the measurements.
//!
//! Lives above the pure core, like the sweep: it reads files, runs Python once per engine
//! configuration (through `dynosim_aic_tables::prepare`), simulates rows on a thread pool (rayon) and
//! keeps a journal to resume from. The CLI (`dynosim validate`) writes the outputs.
//!
//! INTERFACE
//! - [`MeasuredRun`]: one measured run with the settings that rebuild it (or why it cannot be
//!   modelled); read by [`silicon::read_csv`] (the silicon CSV) and [`aiperf_dir::read`]
//!   (AIPerf run directories).
//! - [`Split`], [`split_of`]: the fixed TRAIN/TEST split by the hash of a row's id.
//! - [`Filters`]: which rows a run covers.
//! - [`run`]: simulates every selected, modelable row not already in `DIR/journal.jsonl` and
//!   returns one [`RowResult`] per selected row (status ok, unmodelable or error, with the
//!   reason), in input order.
//! - [`stats`]: error statistics; [`outputs`]: `rows.csv`, `summary.json`, the printed table
//!   and `report.html`, as bytes for the caller to publish.
//!
//! Flow: rows -> filters -> split -> settings -> `ReplayOptions::into_spec` -> the AIC tables
//! of each distinct engine configuration prepared once (in parallel) -> every row simulated on
//! its configuration's tables (in parallel, journalled as it finishes) -> results.

pub mod aiperf_dir;
pub mod calibrate;
pub mod inferencex;
pub mod journal;
pub mod outputs;
pub mod silicon;
pub mod stats;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use dynosim::config::spelling::python_message;
use dynosim::config::ReplaySpec;
use dynosim::{Error, Result};
use dynosim_sweep::Settings;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use journal::{Entry, Journal, Status};

/// Where a measured run comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    /// Silicon CSV rows from the InferenceX nightly benchmarks (their client is known).
    InferenceX,
    /// Silicon CSV rows of aiconfigurator's gap analysis (`aic-auto-gap-analysis`): the CSV
    /// does not say how their client ran.
    GapAnalysis,
    /// An AIPerf run directory.
    Aiperf,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::InferenceX => "inferencex",
            Family::GapAnalysis => "aic-gap-analysis",
            Family::Aiperf => "aiperf",
        }
    }
}

/// Aggregated or disaggregated serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Agg,
    Disagg,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Agg => "agg",
            Mode::Disagg => "disagg",
        }
    }
}

/// One measured run.
#[derive(Clone, Debug)]
pub struct MeasuredRun {
    pub id: String,
    /// Where it was read: `file:line`, or the run directory.
    pub origin: String,
    pub family: Family,
    /// Whether the client's protocol (and so the rebuilt load) is known.
    pub protocol_known: bool,
    pub backend: String,
    /// The engine version the run measured (AIC has one per backend: see the result's
    /// `aic_version`).
    pub backend_version: String,
    pub system: String,
    pub model: String,
    pub mode: Option<Mode>,
    pub isl: Option<u64>,
    pub osl: Option<u64>,
    pub concurrency: Option<u64>,
    /// The parallel shape, as text (`tp4 ep4`, `prefill 1x[tp2] decode 4x[tp8]`).
    pub widths: String,
    pub measured_ttft_ms: Option<f64>,
    pub measured_tpot_ms: Option<f64>,
    /// The settings of the run that rebuilds it (named like the Python API's arguments), or
    /// why it cannot be modelled.
    pub plan: std::result::Result<Settings, String>,
}

/// The fixed split of measured runs: TEST rows are for reporting only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    Train,
    Test,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "test",
        }
    }
}

/// TEST when the first 8 hex digits of the SHA-256 of `id` are 0 modulo 4, TRAIN otherwise.
pub fn split_of(id: &str) -> Split {
    let digest = Sha256::digest(id.as_bytes());
    let head = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    if head % 4 == 0 {
        Split::Test
    } else {
        Split::Train
    }
}

/// Which rows a run covers: each list empty means all; values compare exactly
/// (case-insensitively).
#[derive(Clone, Debug, Default)]
pub struct Filters {
    pub split: Option<Split>,
    pub systems: Vec<String>,
    pub backends: Vec<String>,
    pub models: Vec<String>,
    pub mode: Option<Mode>,
    pub families: Vec<Family>,
}

impl Filters {
    pub fn accepts(&self, run: &MeasuredRun) -> bool {
        let listed = |list: &[String], value: &str| {
            list.is_empty() || list.iter().any(|item| item.eq_ignore_ascii_case(value))
        };
        self.split.is_none_or(|split| split_of(&run.id) == split)
            && listed(&self.systems, &run.system)
            && listed(&self.backends, &run.backend)
            && listed(&self.models, &run.model)
            && self.mode.is_none_or(|mode| run.mode == Some(mode))
            && (self.families.is_empty() || self.families.contains(&run.family))
    }
}

/// One selected row's outcome.
#[derive(Clone, Debug)]
pub struct RowResult {
    pub run: MeasuredRun,
    pub split: Split,
    pub status: Status,
    /// Why the row is unmodelable or failed; empty when it ran.
    pub reason: String,
    pub predicted_ttft_ms: Option<f64>,
    pub predicted_tpot_ms: Option<f64>,
    /// The perf-database version AIC timed it with (empty without AIC timing).
    pub aic_version: String,
    /// The `dynosim` command line that reruns the row alone (empty when unmodelable before
    /// any settings existed).
    pub command: String,
}

impl RowResult {
    /// Signed % error of a prediction against its measurement.
    pub fn error_pct(predicted: Option<f64>, measured: Option<f64>) -> Option<f64> {
        let (predicted, measured) = (predicted?, measured?);
        (measured > 0.0).then(|| (predicted - measured) / measured * 100.0)
    }

    pub fn ttft_error_pct(&self) -> Option<f64> {
        Self::error_pct(self.predicted_ttft_ms, self.run.measured_ttft_ms)
    }

    pub fn tpot_error_pct(&self) -> Option<f64> {
        Self::error_pct(self.predicted_tpot_ms, self.run.measured_tpot_ms)
    }
}

/// How to run.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Threads (default: one per core).
    pub jobs: Option<usize>,
    /// Draw progress bars on stderr (only when stderr is a terminal): engine configurations
    /// prepared, then rows simulated.
    pub progress: bool,
}

fn progress_bar(wanted: bool, total: usize, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !wanted || total == 0 || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    let template = format!("validate {{bar:40}} {{pos}}/{{len}} {what}, {{elapsed}} elapsed");
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

/// What a run did.
#[derive(Debug)]
pub struct Outcome {
    /// One per selected row, in input order.
    pub rows: Vec<RowResult>,
    /// Rows simulated (or found unmodelable by a table build) in this call.
    pub simulated: usize,
    /// Rows whose outcome came from the journal.
    pub from_journal: usize,
    /// Engine configurations whose tables were prepared in this call.
    pub configurations: usize,
}

/// The journal key of a row's settings: the simulator's version and the settings, canonical.
fn key_of(settings: &Settings) -> String {
    dynosim_sweep::candidate_hash(settings)
}

/// A row waiting for its simulation.
struct Pending {
    index: usize,
    key: String,
    spec: ReplaySpec,
    configuration: usize,
}

/// The engine version that measured `run`, as calibration entries are keyed: the CSV's
/// `backend_version`, or [`UNRECORDED_VERSION`] where the row has none.
pub(crate) fn engine_version_of(run: &MeasuredRun) -> &str {
    if run.backend_version.trim().is_empty() {
        UNRECORDED_VERSION
    } else {
        run.backend_version.trim()
    }
}

/// The engine version of a measured run whose version was not recorded (in aiconfigurator's
/// silicon CSV, the runs of 2025-11): such runs are fitted and looked up as one version.
pub const UNRECORDED_VERSION: &str = "unrecorded";

/// The engine configuration of a spec: what its AIC tables depend on (the engine-args
/// objects), as canonical text.
pub(crate) fn configuration_of(settings: &Settings) -> String {
    [
        "extra_engine_args",
        "prefill_engine_args",
        "decode_engine_args",
    ]
    .iter()
    .map(|key| {
        settings
            .get(key)
            .map(|value| value.to_string())
            .unwrap_or_default()
    })
    .collect::<Vec<_>>()
    .join("|")
}

/// Runs the selected rows of `runs` into `out` (created if missing; its journal is read
/// first, and rows stored there are not simulated again).
pub fn run(
    runs: Vec<MeasuredRun>,
    filters: &Filters,
    out: &Path,
    options: &RunOptions,
) -> Result<Outcome> {
    std::fs::create_dir_all(out).map_err(|err| {
        Error::runtime(format!(
            "cannot create the output directory {}: {err}",
            out.display()
        ))
    })?;
    let journal = Journal::open(out)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.jobs.unwrap_or(0))
        .build()
        .map_err(|err| Error::runtime(format!("cannot start the validation threads: {err}")))?;

    let selected: Vec<MeasuredRun> = runs
        .into_iter()
        .filter(|run| filters.accepts(run))
        .collect();
    let mut results: Vec<RowResult> = Vec::with_capacity(selected.len());
    let mut pending: Vec<Pending> = Vec::new();
    let mut configurations: Vec<String> = Vec::new();
    let mut representatives: Vec<ReplaySpec> = Vec::new();
    let mut from_journal = 0;
    for (index, run) in selected.into_iter().enumerate() {
        let split = split_of(&run.id);
        let mut result = RowResult {
            split,
            status: Status::Unmodelable,
            reason: String::new(),
            predicted_ttft_ms: None,
            predicted_tpot_ms: None,
            aic_version: String::new(),
            command: String::new(),
            run,
        };
        let settings = match &result.run.plan {
            Err(reason) => {
                result.reason = reason.clone();
                results.push(result);
                continue;
            }
            Ok(settings) => settings.clone(),
        };
        result.command = settings.command_line();
        let key = key_of(&settings);
        if let Some(entry) = journal.stored(&key) {
            entry.apply(&mut result);
            from_journal += 1;
            results.push(result);
            continue;
        }
        let spec = settings
            .to_options()
            .and_then(|options| options.into_spec().map_err(|err| python_message(&err)));
        match spec {
            Err(reason) => {
                result.reason = format!("the rebuilt run is invalid: {reason}");
                results.push(result);
            }
            Ok(spec) => {
                let configuration_key = configuration_of(&settings);
                let configuration = match configurations
                    .iter()
                    .position(|known| *known == configuration_key)
                {
                    Some(position) => position,
                    None => {
                        configurations.push(configuration_key);
                        representatives.push(spec.clone());
                        configurations.len() - 1
                    }
                };
                pending.push(Pending {
                    index,
                    key,
                    spec,
                    configuration,
                });
                results.push(result);
            }
        }
    }

    // The tables of each engine configuration, once (the first build of one takes seconds).
    let bar = progress_bar(
        options.progress,
        representatives.len(),
        "engine configurations prepared (AIC tables)",
    );
    // A configuration whose tables cannot be built fails the same way every time for one
    // aiconfigurator-core: the journal keeps the failure under the configuration, the
    // package's version and dynosim's, so a rerun does not run the builder again to see it.
    let package = representatives
        .iter()
        .any(dynosim::config::needs_prepare)
        .then(|| dynosim_aic_tables::package_version(&dynosim_aic_tables::python()).ok())
        .flatten();
    let failure_key = |configuration: &str| {
        package.as_ref().map(|package| {
            let text = format!("{configuration}\0{package}\0{}", env!("CARGO_PKG_VERSION"));
            let digest = Sha256::digest(text.as_bytes());
            let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("tables-{hex}")
        })
    };
    let prepared: Vec<std::result::Result<Arc<ReplaySpec>, String>> = pool.install(|| {
        representatives
            .par_iter()
            .zip(&configurations)
            .with_max_len(1)
            .map(|(spec, configuration)| {
                let memo = failure_key(configuration);
                if let Some(entry) = memo.as_deref().and_then(|key| journal.stored(key)) {
                    bar.inc(1);
                    return Err(entry.reason.clone());
                }
                let prepared =
                    match catch_unwind(AssertUnwindSafe(|| dynosim_aic_tables::prepare(spec))) {
                        Ok(Ok(prepared)) => Ok(Arc::new(prepared.into_owned())),
                        Ok(Err(err)) => Err(python_message(&err)),
                        Err(_) => Err("internal error while preparing the AIC tables".to_owned()),
                    };
                if let (Err(reason), Some(key)) = (&prepared, &memo) {
                    // Losing the memo only costs a rebuild later.
                    let _ = journal.append(&Entry::unmodelable(reason.clone()).line(key));
                }
                bar.inc(1);
                prepared
            })
            .collect()
    });
    bar.finish_and_clear();
    let bar = progress_bar(options.progress, pending.len(), "rows simulated");

    let finished: Vec<(usize, Entry)> = pool.install(|| {
        pending
            .par_iter()
            .with_max_len(1)
            .map(|job| {
                let entry = match &prepared[job.configuration] {
                    Err(reason) => Entry::unmodelable(format!("AIC tables: {reason}")),
                    Ok(tables) => simulate(&job.spec, tables),
                };
                bar.inc(1);
                journal
                    .append(&entry.line(&job.key))
                    .map(|()| (job.index, entry))
            })
            .collect::<Result<Vec<_>>>()
    })?;
    bar.finish_and_clear();
    let simulated = finished.len();
    for (index, entry) in finished {
        entry.apply(&mut results[index]);
    }
    Ok(Outcome {
        rows: results,
        simulated,
        from_journal,
        configurations: representatives.len(),
    })
}

/// Simulates one row on its configuration's prepared tables (the row's engine arguments are
/// the configuration's, so its engines are taken from the prepared spec).
pub(crate) fn simulate(spec: &ReplaySpec, prepared: &ReplaySpec) -> Entry {
    let mut spec = spec.clone();
    for ((_, row), (_, tables)) in spec
        .deployment
        .pools_mut()
        .into_iter()
        .zip(prepared.deployment.pools())
    {
        row.engine = tables.engine.clone();
    }
    // The engine configuration's tables are shared; what else the row asks AIC for (the KV
    // router's prefill-load model, whose settings are not part of the configuration) is
    // prepared for the row itself, from the cache after the first time.
    let spec = if dynosim::config::needs_prepare(&spec) {
        match dynosim_aic_tables::prepare(&spec) {
            Ok(ready) => ready.into_owned(),
            Err(err) => return Entry::unmodelable(format!("AIC tables: {}", python_message(&err))),
        }
    } else {
        spec
    };
    let aic_version = spec
        .deployment
        .generating()
        .engine
        .aic
        .as_ref()
        .and_then(|aic| aic.tables.as_ref())
        .map(|tables| tables.version.clone())
        .unwrap_or_default();
    let ran = catch_unwind(AssertUnwindSafe(|| -> Result<dynosim::Report> {
        let workload = dynosim::load_workload(&spec)?;
        let simulated = dynosim::Simulation::new(&spec, workload).run()?;
        Ok(simulated.into_report(0.0).0)
    }));
    let mut entry = match ran {
        Ok(Ok(report)) => {
            let number = |key: &str| report.get(key).map(|value| value.as_f64());
            let completed = number("completed_requests").unwrap_or(0.0);
            if completed < 1.0 {
                Entry::error("no request completed in the simulation".to_owned())
            } else {
                Entry::ok(number("mean_ttft_ms"), number("mean_tpot_ms"))
            }
        }
        Ok(Err(err)) => Entry::error(python_message(&err)),
        Err(_) => Entry::error("internal error while simulating this row".to_owned()),
    };
    entry.aic_version = aic_version;
    entry
}

/// Counts of rows by status.
pub fn counts(rows: &[RowResult]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for row in rows {
        *counts.entry(row.status.name()).or_insert(0) += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_of_known_ids_is_pinned() {
        // sha256 hex digests' first 8 digits, computed independently (Python hashlib).
        let cases = [
            (
                "minimaxm2_5_b300_vllm_fp8_agg_8192x1024_c128_cfg733",
                Split::Train,
            ), // a34894da
            (
                "minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c128_cfg733",
                Split::Test,
            ), // 3a05dc50
            (
                "minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c4_cfg733",
                Split::Test,
            ), // 09e96b2c
            (
                "kimik2_5_gb200_trtllm_fp4_disagg_1024x1024_c4_cfg759",
                Split::Train,
            ), // ac066813
            ("row-4", Split::Test),  // 06a20948
            ("row-5", Split::Train), // 5a9dd7f3
            ("row-8", Split::Test),  // 85228170
        ];
        for (id, split) in cases {
            assert_eq!(split_of(id), split, "{id}");
        }
    }
}
