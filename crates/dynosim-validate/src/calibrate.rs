//! `dynosim calibrate`: fits AIC timing corrections ([`AicCalibration`]) per (backend, system)
//! on the TRAIN rows of measured runs, by simulating them under candidate corrections.
//!
//! INTERFACE
//! - [`CalibrateOptions`]: threads, rows per group, the evaluation budget, per-model entries.
//! - [`calibrate`]: TRAIN rows only (a row of the TEST split is never simulated here), grouped
//!   by (backend, system) and, with `per_model`, by model: each model with enough rows gets
//!   its own corrections, fitted by a coordinate search, and the (backend, system) entry that
//!   serves the other models takes each parameter's median over them (a fit of all the
//!   group's rows where no model has enough); each engine configuration of a fitted model
//!   with enough rows is then refined from the model's corrections (per-request delay,
//!   prefill and decode scales only) and gets its own entry where that lowers its rows' score, and
//!   where a configuration's rows were measured by several engine versions, each version
//!   with enough rows is refined the same way from the configuration's corrections (an
//!   entry keyed by `engine_version`: releases of one engine differ in their serving front
//!   and kernels); returns the calibration file and what each fit saw.
//!
//! The fit. A group's rows are simulated under corrections θ and scored by
//! `mean min(|ln(predicted / measured)|, 1)` of mean TTFT plus that of mean TPOT (log errors
//! weigh an overestimate and an underestimate of the same factor alike; absolute values,
//! capped, keep an outlier from steering the whole group). A row that fails under θ (its
//! prompt no longer fits a smaller KV cache) scores `FAILED_ROW_LOSS` for both. The search starts at the
//! identity, tries first guesses from the rows' medians (the missing TTFT as a per-request
//! delay, or as a delay plus a cost per prompt token where it grows with the prompt; the TPOT
//! ratio as the decode scale), then moves one parameter at a time by its step
//! (a factor for the scales, an amount for the costs), keeps a move that lowers the score
//! (lengthening that axis's step, trying its direction first next time) and halves the step
//! of an axis where neither direction helps, and after each sweep over the axes tries the
//! sweep's net move once more (a pattern move), until the steps are small or the budget is
//! spent.
//! Simulations are deterministic, so the fit is too. A group is sampled to at most
//! `rows_per_group` rows, spread over its lengths and concurrencies: the strata (ISL, OSL,
//! concurrency band, speculative decoding) taken in turn, each in the SHA-256 order of its
//! rows' ids.

use std::collections::BTreeMap;
use std::sync::Arc;

use dynosim::aic::calibration::{configuration_key, CalibrationEntry, CalibrationFile, FORMAT};
use dynosim::aic::AicCalibration;
use dynosim::config::spelling::python_message;
use dynosim::config::{EngineArgs, ReplaySpec};
use dynosim::{Error, Result};
use rayon::prelude::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::journal::Status;
use crate::{configuration_of, engine_version_of, simulate, split_of, Filters, MeasuredRun, Split};

/// A prediction off by more than a factor e (2.7x) scores as if off by e: such a row shows a
/// gap the corrections cannot close (a configuration that behaves unlike its group), and
/// letting it weigh more would trade the group's typical rows for it.
const CAPPED_ROW_LOSS: f64 = 1.0;

/// The score of a row that cannot run under a candidate: worse than any row that runs.
const FAILED_ROW_LOSS: f64 = 3.0;

/// How to fit.
#[derive(Clone, Debug)]
pub struct CalibrateOptions {
    /// Threads (default: one per core).
    pub jobs: Option<usize>,
    /// At most this many rows per (backend, system).
    pub rows_per_group: usize,
    /// At most this many evaluations (each a simulation of the group's rows) per group.
    pub max_evaluations: usize,
    /// Groups (and models) with fewer usable rows get no entry of their own.
    pub min_rows: usize,
    /// Fit an entry per model of a (backend, system) that has `min_rows` rows.
    pub per_model: bool,
    /// With `per_model`: refine each engine configuration of a fitted model that has
    /// `min_rows` rows, starting from the model's corrections and moving only the decode
    /// scale and the per-request delay, with at most this many evaluations (0: no
    /// configuration entries).
    pub configuration_evaluations: usize,
}

/// The defaults are the budget the shipped `silicon` calibration was fitted and chosen with.
impl Default for CalibrateOptions {
    fn default() -> Self {
        Self {
            jobs: None,
            rows_per_group: 12,
            max_evaluations: 30,
            min_rows: 4,
            per_model: true,
            configuration_evaluations: 10,
        }
    }
}

/// A TRAIN row whose run builds and whose configuration's tables were prepared.
struct ReadyRow {
    id: String,
    backend: String,
    system: String,
    /// The AIC model it runs (`aic_model_path`), which per-model entries are keyed by.
    model: String,
    /// Its engine configuration ([`configuration_key`]), which configuration entries are
    /// keyed by.
    configuration: String,
    /// The engine version that measured it ([`engine_version_of`]), which engine-version
    /// entries within a configuration are keyed by.
    engine_version: String,
    /// Its load: ISL, OSL and the client's concurrency band (`⌊log₄ concurrency⌋`), the
    /// strata a group's sample is spread over.
    load: (u64, u64, u32),
    /// Whether it decodes speculatively (drafts), which its sample stratum keeps apart too.
    speculative: bool,
    spec: ReplaySpec,
    /// Its engine configuration's prepared spec (tables loaded), shared by its rows.
    prepared: Arc<ReplaySpec>,
    measured_ttft_ms: f64,
    measured_tpot_ms: f64,
}

/// One row ready to simulate: its spec, its configuration's prepared spec, what was measured.
struct Case {
    spec: ReplaySpec,
    isl: u64,
    configuration: usize,
    measured_ttft_ms: f64,
    measured_tpot_ms: f64,
}

/// One group's fit.
#[derive(Clone, Debug)]
pub struct GroupFit {
    pub backend: String,
    pub system: String,
    /// `Some` for a model's own entry within its (backend, system).
    pub model: Option<String>,
    /// `Some` for an engine configuration's entry within its model.
    pub configuration: Option<String>,
    /// `Some` for an engine version's entry within its configuration.
    pub engine_version: Option<String>,
    /// Rows in the group (TRAIN, modelable, both measurements), and how many the fit used.
    pub rows: usize,
    pub rows_used: usize,
    pub evaluations: usize,
    pub before: Score,
    pub after: Score,
    /// `None` when the group had fewer than `min_rows` usable rows.
    pub corrections: Option<AicCalibration>,
    /// For a (backend, system) entry taken from its models' entries: those models.
    pub median_of: Vec<String>,
}

impl GroupFit {
    /// A group of `rows` rows, `rows_used` of them sampled, before any fit.
    fn unfitted(
        (backend, system): (&str, &str),
        model: Option<&str>,
        configuration: Option<&str>,
        (rows, rows_used): (usize, usize),
    ) -> Self {
        GroupFit {
            backend: backend.to_owned(),
            system: system.to_owned(),
            model: model.map(str::to_owned),
            configuration: configuration.map(str::to_owned),
            engine_version: None,
            rows,
            rows_used,
            evaluations: 0,
            before: Score::default(),
            after: Score::default(),
            corrections: None,
            median_of: Vec::new(),
        }
    }
}

/// A group's errors under one candidate.
#[derive(Clone, Copy, Debug, Default)]
pub struct Score {
    /// The fit's objective.
    pub loss: f64,
    /// Median absolute % error of mean TTFT and of mean TPOT over the rows that ran.
    pub ttft_median_pct: f64,
    pub tpot_median_pct: f64,
    pub failed: usize,
    /// Medians over the rows that ran of measured − predicted mean TTFT (ms) and of measured /
    /// predicted mean TPOT: where the search starts its per-request and decode corrections.
    pub ttft_gap_ms: f64,
    pub tpot_ratio: f64,
    /// The TTFT gap as a line over the prompt length: at no prompt (ms) and per prompt token
    /// (ms), through the median gaps of the shortest and the longest ISL (NaN with one ISL).
    pub ttft_gap_line: (f64, f64),
}

impl Score {
    fn to_json(self) -> Value {
        json!({
            "loss": round(self.loss, 4),
            "ttft_median_abs_error_pct": round(self.ttft_median_pct, 2),
            "tpot_median_abs_error_pct": round(self.tpot_median_pct, 2),
            "rows_failed": self.failed,
        })
    }
}

fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// What [`calibrate`] produced.
pub struct Calibration {
    pub file: CalibrationFile,
    pub groups: Vec<GroupFit>,
    /// Rows skipped before fitting, by reason (test split, unmodelable, no measurement).
    pub skipped: BTreeMap<String, usize>,
}

/// The parameter the search moves, and how.
#[derive(Clone, Copy)]
enum Axis {
    /// A positive scale, moved by a factor `e^step`.
    Scale(fn(&mut AicCalibration) -> &mut f64),
    /// A cost at least 0 (milliseconds, or microseconds per token), moved by `step`.
    Cost(fn(&mut AicCalibration) -> &mut f64),
}

const AXES: [(Axis, f64); 8] = [
    (Axis::Cost(|c| &mut c.request_overhead_ms), 40.0),
    (Axis::Scale(|c| &mut c.prefill_scale), 0.3),
    (Axis::Scale(|c| &mut c.kv_capacity_scale), 0.3),
    (Axis::Scale(|c| &mut c.decode_scale), 0.15),
    (Axis::Cost(|c| &mut c.prefill_pass_ms), 20.0),
    (Axis::Cost(|c| &mut c.decode_pass_ms), 1.0),
    (Axis::Cost(|c| &mut c.prefill_token_us), 5.0),
    (Axis::Scale(|c| &mut c.acceptance_scale), 0.15),
];

/// Every axis, for a fit from the identity (the drafts' acceptance only where a row decodes
/// speculatively: elsewhere it changes nothing).
const ALL_AXES: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// The index in [`AXES`] of the drafts' acceptance.
const ACCEPTANCE_AXIS: usize = 7;

/// The axes a configuration's (and an engine version's) refinement moves: the per-request
/// delay, the prefill scale and the decode scale.
const CONFIGURATION_AXES: [usize; 3] = [0, 1, 3];

/// The search ends when every axis's step has shrunk below its first step over this (for the
/// scales, e^(0.3/16), about 2%).
const SMALLEST_STEP_FRACTION: f64 = 16.0;

/// Fits corrections per (backend, system, model) on the TRAIN rows of `runs` that `filters`
/// select (a filter asking for TEST rows is refused). `progress` is told what each fit starts
/// from and ends with.
pub fn calibrate(
    runs: Vec<MeasuredRun>,
    filters: &Filters,
    options: &CalibrateOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Calibration> {
    if filters.split == Some(Split::Test) {
        return Err(Error::usage(
            "calibration fits on TRAIN rows only; TEST rows are for `dynosim validate`",
        ));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.jobs.unwrap_or(0))
        .build()
        .map_err(|err| Error::runtime(format!("cannot start the calibration threads: {err}")))?;

    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    let mut skip = |reason: &str| *skipped.entry(reason.to_owned()).or_insert(0) += 1;
    let mut selected = Vec::new();
    for run in runs.into_iter().filter(|run| filters.accepts(run)) {
        if split_of(&run.id) == Split::Test {
            skip("test split (never fitted on)");
            continue;
        }
        if run.plan.is_err() {
            skip("cannot be modelled");
            continue;
        }
        match (run.measured_ttft_ms, run.measured_tpot_ms) {
            (Some(ttft), Some(tpot)) if ttft > 0.0 && tpot > 0.0 => selected.push(run),
            _ => skip("no measured mean TTFT and TPOT"),
        }
    }
    let (ready, unready) = pool.install(|| prepare_rows(selected, progress));
    for reason in unready {
        skip(&reason);
    }
    let mut groups: BTreeMap<(String, String), Vec<ReadyRow>> = BTreeMap::new();
    for row in ready {
        groups
            .entry((row.backend.clone(), row.system.clone()))
            .or_default()
            .push(row);
    }

    let mut fits = Vec::new();
    for ((backend, system), rows) in groups {
        let rows = sample_order(rows, |row| {
            (&row.id, (row.model.clone(), row.load, row.speculative))
        });
        let mut models: BTreeMap<String, usize> = BTreeMap::new();
        for row in &rows {
            *models.entry(row.model.clone()).or_insert(0) += 1;
        }
        let min_rows = options.min_rows.max(1);
        let fitted_models: Vec<String> = if options.per_model {
            models
                .iter()
                .filter(|(_, count)| **count >= min_rows)
                .map(|(model, _)| model.clone())
                .collect()
        } else {
            Vec::new()
        };
        let mut model_fits = Vec::new();
        let mut configuration_fits = Vec::new();
        for model in &fitted_models {
            let fit = fit_group(
                &pool,
                &rows,
                (&backend, &system, Some(model.as_str())),
                options,
                progress,
            );
            if let Some(corrections) = &fit.corrections {
                configuration_fits.extend(fit_configurations(
                    &pool,
                    &rows,
                    (&backend, &system, model),
                    corrections,
                    options,
                    progress,
                ));
            }
            model_fits.push(fit);
        }
        let fitted: Vec<&AicCalibration> = model_fits
            .iter()
            .filter_map(|fit| fit.corrections.as_ref())
            .collect();
        // The (backend, system) entry serves the models without one of their own: the
        // per-parameter median of its models' fits, or, with none, a fit of all its rows.
        let shared = if fitted.is_empty() {
            fit_group(&pool, &rows, (&backend, &system, None), options, progress)
        } else {
            GroupFit {
                corrections: Some(median_corrections(&fitted)),
                median_of: model_fits
                    .iter()
                    .filter(|fit| fit.corrections.is_some())
                    .filter_map(|fit| fit.model.clone())
                    .collect(),
                ..GroupFit::unfitted((&backend, &system), None, None, (rows.len(), 0))
            }
        };
        fits.push(shared);
        fits.extend(model_fits);
        fits.extend(configuration_fits);
    }

    let entries = fits
        .iter()
        .filter_map(|fit| {
            let corrections = fit.corrections.clone()?;
            Some(CalibrationEntry {
                backend: fit.backend.clone(),
                system: fit.system.clone(),
                model: fit.model.clone(),
                configuration: fit.configuration.clone(),
                engine_version: fit.engine_version.clone(),
                corrections,
                fit: if !fit.median_of.is_empty() {
                    json!({"median_of_models": fit.median_of})
                } else {
                    json!({
                    "rows": fit.rows,
                    "rows_used": fit.rows_used,
                    "evaluations": fit.evaluations,
                    "before": fit.before.to_json(),
                    "after": fit.after.to_json(),
                    })
                },
            })
        })
        .collect();
    Ok(Calibration {
        file: CalibrationFile {
            format: FORMAT.to_owned(),
            fitted_on: Value::Null,
            entries,
        },
        groups: fits,
        skipped,
    })
}

/// Fits the rows of `group` (a backend, a system and, when given, one model) from the
/// identity.
fn fit_group(
    pool: &rayon::ThreadPool,
    rows: &[ReadyRow],
    (backend, system, model): (&str, &str, Option<&str>),
    options: &CalibrateOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> GroupFit {
    let in_group = |row: &ReadyRow| model.is_none_or(|model| row.model == model);
    let total = rows.iter().filter(|row| in_group(row)).count();
    progress(&format!(
        "{backend} on {system}{}: {total} rows",
        model.map(|model| format!(", {model}")).unwrap_or_default()
    ));
    let (cases, prepared) = cases_of(rows, in_group, options.rows_per_group);
    let mut fit = GroupFit::unfitted((backend, system), model, None, (total, cases.len()));
    if cases.len() < options.min_rows.max(1) {
        progress(&format!(
            "  {} usable rows: fewer than {}, no entry",
            cases.len(),
            options.min_rows
        ));
        return fit;
    }
    let speculative = prepared
        .iter()
        .flatten()
        .any(|spec| spec.deployment.entry().engine.speculative.is_some());
    let axes: Vec<usize> = ALL_AXES
        .into_iter()
        .filter(|&axis| speculative || axis != ACCEPTANCE_AXIS)
        .collect();
    pool.install(|| {
        search(
            &cases,
            &prepared,
            &AicCalibration::IDENTITY,
            (&axes, options.max_evaluations),
            &mut fit,
            progress,
        )
    });
    fit
}

/// Refines `start` (a model's corrections) for each engine configuration of the model with
/// at least `min_rows` rows: only the per-request delay and the prefill and decode scales
/// move. A configuration whose rows the refinement does not improve gets no entry. Where the
/// configuration's rows were measured by more than one engine version, each version with
/// `min_rows` rows is then refined the same way from the configuration's corrections.
fn fit_configurations(
    pool: &rayon::ThreadPool,
    rows: &[ReadyRow],
    (backend, system, model): (&str, &str, &str),
    start: &AicCalibration,
    options: &CalibrateOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> Vec<GroupFit> {
    if options.configuration_evaluations == 0 {
        return Vec::new();
    }
    let count_by = |key: fn(&ReadyRow) -> &str, select: &dyn Fn(&ReadyRow) -> bool| {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for row in rows.iter().filter(|row| select(row)) {
            *counts.entry(key(row)).or_insert(0) += 1;
        }
        counts
    };
    let refine = |subgroup: Subgroup<'_>, from: &AicCalibration, fits: &mut Vec<GroupFit>| {
        let fit = refine_subgroup(
            pool,
            rows,
            (backend, system, model),
            subgroup,
            from,
            options,
            progress,
        );
        let corrections = fit.corrections.clone().unwrap_or_else(|| from.clone());
        if &corrections != from {
            fits.push(fit);
        }
        corrections
    };
    let mut fits = Vec::new();
    let configurations = count_by(|row| &row.configuration, &|row| row.model == model);
    for (configuration, count) in configurations {
        if count < options.min_rows.max(1) {
            continue;
        }
        let subgroup = Subgroup {
            configuration,
            engine_version: None,
            rows: count,
        };
        let configuration_corrections = refine(subgroup, start, &mut fits);
        let versions = count_by(|row| &row.engine_version, &|row| {
            row.model == model && row.configuration == configuration
        });
        if versions.len() < 2 {
            continue;
        }
        for (version, count) in versions {
            if count >= options.min_rows.max(1) {
                let subgroup = Subgroup {
                    configuration,
                    engine_version: Some(version),
                    rows: count,
                };
                refine(subgroup, &configuration_corrections, &mut fits);
            }
        }
    }
    fits
}

/// The rows of one model that a refinement fits: one engine configuration, or one engine
/// version's rows within it.
#[derive(Clone, Copy)]
struct Subgroup<'a> {
    configuration: &'a str,
    engine_version: Option<&'a str>,
    /// How many of the model's rows it holds.
    rows: usize,
}

/// Refines `start` on `subgroup`'s rows, moving only [`CONFIGURATION_AXES`].
fn refine_subgroup(
    pool: &rayon::ThreadPool,
    rows: &[ReadyRow],
    (backend, system, model): (&str, &str, &str),
    subgroup: Subgroup<'_>,
    start: &AicCalibration,
    options: &CalibrateOptions,
    progress: &(dyn Fn(&str) + Sync),
) -> GroupFit {
    let Subgroup {
        configuration,
        engine_version,
        rows: count,
    } = subgroup;
    progress(&format!(
        "{backend} on {system}, {model}, {configuration}{}: {count} rows",
        engine_version
            .map(|version| format!(", engine version {version}"))
            .unwrap_or_default()
    ));
    let (cases, prepared) = cases_of(
        rows,
        |row| {
            row.model == model
                && row.configuration == configuration
                && engine_version.is_none_or(|version| row.engine_version == version)
        },
        options.rows_per_group,
    );
    let mut fit = GroupFit {
        engine_version: engine_version.map(str::to_owned),
        ..GroupFit::unfitted(
            (backend, system),
            Some(model),
            Some(configuration),
            (count, cases.len()),
        )
    };
    pool.install(|| {
        search(
            &cases,
            &prepared,
            start,
            (&CONFIGURATION_AXES, options.configuration_evaluations),
            &mut fit,
            progress,
        )
    });
    fit
}

/// `to` moved again by the move from `from` to `to`: a factor for the scales, an amount for
/// the costs (at least 0).
fn extrapolated(from: &AicCalibration, to: &AicCalibration) -> AicCalibration {
    let mut next = to.clone();
    for (axis, _) in &AXES {
        let (field, is_scale) = match axis {
            Axis::Scale(field) => (field, true),
            Axis::Cost(field) => (field, false),
        };
        let before = *field(&mut from.clone());
        let after = *field(&mut to.clone());
        *field(&mut next) = if is_scale {
            after * (after / before)
        } else {
            (2.0 * after - before).max(0.0)
        };
    }
    next
}

/// Orders a group's rows so that the first `n` of any model are a spread sample: by the
/// SHA-256 of their ids within each stratum (model, load, speculative decoding), and the
/// strata taken in turn (every stratum's first row, then every stratum's second, ...), so a
/// sample covers the model's lengths and concurrencies instead of whichever the hash favours.
fn sample_order<T>(rows: Vec<T>, id_and_stratum: impl Fn(&T) -> (&str, Stratum)) -> Vec<T> {
    let mut hashed: Vec<(Vec<u8>, T)> = rows
        .into_iter()
        .map(|row| {
            (
                Sha256::digest(id_and_stratum(&row).0.as_bytes()).to_vec(),
                row,
            )
        })
        .collect();
    hashed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen: BTreeMap<Stratum, usize> = BTreeMap::new();
    let mut turns: Vec<(usize, T)> = hashed
        .into_iter()
        .map(|(_, row)| {
            let turn = seen.entry(id_and_stratum(&row).1).or_insert(0);
            *turn += 1;
            (*turn, row)
        })
        .collect();
    // Stable: within a turn, the hash order stays.
    turns.sort_by_key(|(turn, _)| *turn);
    turns.into_iter().map(|(_, row)| row).collect()
}

/// A row's stratum in a group's sample: its model, its load (see [`ReadyRow::load`]) and
/// whether it decodes speculatively.
type Stratum = (String, (u64, u64, u32), bool);

/// Each parameter's median over `fits` (the upper middle one of an even count).
fn median_corrections(fits: &[&AicCalibration]) -> AicCalibration {
    let median = |field: fn(&AicCalibration) -> f64| {
        let mut values: Vec<f64> = fits.iter().map(|fit| field(fit)).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    AicCalibration {
        prefill_scale: median(|c| c.prefill_scale),
        decode_scale: median(|c| c.decode_scale),
        prefill_pass_ms: median(|c| c.prefill_pass_ms),
        prefill_token_us: median(|c| c.prefill_token_us),
        decode_pass_ms: median(|c| c.decode_pass_ms),
        kv_capacity_scale: median(|c| c.kv_capacity_scale),
        acceptance_scale: median(|c| c.acceptance_scale),
        request_overhead_ms: median(|c| c.request_overhead_ms),
    }
}

/// The AIC model a row's rebuilt run uses (`aic_model_path` of its engine arguments).
fn model_of(run: &MeasuredRun) -> Option<String> {
    let settings = run.plan.as_ref().ok()?;
    let engine = settings.get("extra_engine_args")?;
    let engine: Value = match engine {
        Value::String(text) => serde_json::from_str(text).ok()?,
        other => other.clone(),
    };
    engine.get("aic_model_path")?.as_str().map(str::to_owned)
}

/// Builds every row's run and prepares each engine configuration's tables once (in
/// parallel): the rows ready to simulate, and the reasons of those that are not.
fn prepare_rows(
    runs: Vec<MeasuredRun>,
    progress: &(dyn Fn(&str) + Sync),
) -> (Vec<ReadyRow>, Vec<String>) {
    let mut unready = Vec::new();
    let mut built = Vec::new();
    let mut configurations: Vec<String> = Vec::new();
    let mut representatives: Vec<ReplaySpec> = Vec::new();
    for run in runs {
        let Ok(settings) = &run.plan else { continue };
        let spec = match settings
            .to_options()
            .and_then(|options| options.into_spec().map_err(|err| python_message(&err)))
        {
            Ok(spec) => spec,
            Err(_) => {
                unready.push("the rebuilt run is invalid".to_owned());
                continue;
            }
        };
        let key = configuration_of(settings);
        let configuration = match configurations.iter().position(|known| *known == key) {
            Some(position) => position,
            None => {
                configurations.push(key);
                representatives.push(spec.clone());
                configurations.len() - 1
            }
        };
        built.push((run, spec, configuration));
    }
    progress(&format!(
        "{} rows over {} engine configurations: preparing their AIC tables",
        built.len(),
        representatives.len()
    ));
    let prepared: Vec<Option<Arc<ReplaySpec>>> = representatives
        .par_iter()
        .with_max_len(1)
        .map(|spec| {
            dynosim_aic_tables::prepare(spec)
                .ok()
                .map(|ready| Arc::new(ready.into_owned()))
        })
        .collect();
    let mut ready = Vec::new();
    for (run, spec, configuration) in built {
        let Some(tables) = &prepared[configuration] else {
            unready.push("AIC tables cannot be built".to_owned());
            continue;
        };
        let model = model_of(&run).unwrap_or_default();
        let configuration = tables
            .deployment
            .entry()
            .engine
            .aic
            .as_ref()
            .map(configuration_key)
            .unwrap_or_default();
        let load = (
            run.isl.unwrap_or(0),
            run.osl.unwrap_or(0),
            run.concurrency.unwrap_or(1).max(1).ilog2() / 2,
        );
        ready.push(ReadyRow {
            engine_version: engine_version_of(&run).to_owned(),
            id: run.id,
            load,
            speculative: spec.deployment.entry().engine.speculative.is_some(),
            backend: run.backend,
            system: run.system,
            model,
            configuration,
            spec,
            prepared: Arc::clone(tables),
            measured_ttft_ms: run.measured_ttft_ms.unwrap_or(0.0),
            measured_tpot_ms: run.measured_tpot_ms.unwrap_or(0.0),
        });
    }
    (ready, unready)
}

/// The first `limit` rows that `select` accepts as cases, with the prepared specs of their
/// configurations (each once).
fn cases_of(
    rows: &[ReadyRow],
    select: impl Fn(&ReadyRow) -> bool,
    limit: usize,
) -> (Vec<Case>, Vec<Option<Arc<ReplaySpec>>>) {
    let mut cases = Vec::new();
    let mut prepared: Vec<Option<Arc<ReplaySpec>>> = Vec::new();
    for row in rows.iter().filter(|row| select(row)).take(limit) {
        let configuration = match prepared.iter().position(|known| {
            known
                .as_ref()
                .is_some_and(|known| Arc::ptr_eq(known, &row.prepared))
        }) {
            Some(position) => position,
            None => {
                prepared.push(Some(Arc::clone(&row.prepared)));
                prepared.len() - 1
            }
        };
        cases.push(Case {
            spec: row.spec.clone(),
            isl: row.load.0,
            configuration,
            measured_ttft_ms: row.measured_ttft_ms,
            measured_tpot_ms: row.measured_tpot_ms,
        });
    }
    (cases, prepared)
}

/// `engine` with `corrections`: its AIC timing corrected and, where its KV capacity came from
/// the package's estimate, that estimate scaled.
fn corrected(engine: &mut EngineArgs, corrections: &AicCalibration) {
    let estimated = engine.aic_block_estimate.is_some();
    if let Some(aic) = engine.aic.as_mut() {
        aic.calibration = Some(corrections.clone());
        if let Some(blocks) = aic.tables.as_ref().and_then(|tables| tables.num_gpu_blocks) {
            if estimated {
                engine.num_gpu_blocks = corrections.kv_blocks(blocks);
            }
        }
    }
}

/// The group's score under `corrections`.
fn evaluate(
    cases: &[Case],
    prepared: &[Option<Arc<ReplaySpec>>],
    corrections: &AicCalibration,
) -> Score {
    let configurations: Vec<Option<ReplaySpec>> = prepared
        .iter()
        .map(|spec| {
            let mut spec = (**spec.as_ref()?).clone();
            for (_, pool) in spec.deployment.pools_mut() {
                corrected(&mut pool.engine, corrections);
            }
            Some(spec)
        })
        .collect();
    let outcomes: Vec<Option<(f64, f64)>> = cases
        .par_iter()
        .with_max_len(1)
        .map(|case| {
            let configuration = configurations[case.configuration].as_ref()?;
            let entry = simulate(&case.spec, configuration);
            match (entry.status, entry.ttft_ms, entry.tpot_ms) {
                (Status::Ok, Some(ttft), Some(tpot)) if ttft > 0.0 && tpot > 0.0 => {
                    Some((ttft, tpot))
                }
                _ => None,
            }
        })
        .collect();
    let mut loss = 0.0;
    let mut failed = 0;
    let (mut ttft_errors, mut tpot_errors) = (Vec::new(), Vec::new());
    let (mut ttft_gaps, mut tpot_ratios) = (Vec::new(), Vec::new());
    let mut gaps_by_isl: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (case, outcome) in cases.iter().zip(&outcomes) {
        match outcome {
            Some((ttft, tpot)) => {
                ttft_gaps.push(case.measured_ttft_ms - ttft);
                gaps_by_isl
                    .entry(case.isl)
                    .or_default()
                    .push(case.measured_ttft_ms - ttft);
                tpot_ratios.push(case.measured_tpot_ms / tpot);
                loss += (ttft / case.measured_ttft_ms)
                    .ln()
                    .abs()
                    .min(CAPPED_ROW_LOSS)
                    + (tpot / case.measured_tpot_ms)
                        .ln()
                        .abs()
                        .min(CAPPED_ROW_LOSS);
                ttft_errors.push((ttft / case.measured_ttft_ms - 1.0).abs() * 100.0);
                tpot_errors.push((tpot / case.measured_tpot_ms - 1.0).abs() * 100.0);
            }
            None => {
                loss += 2.0 * FAILED_ROW_LOSS;
                failed += 1;
            }
        }
    }
    let ttft_gap_line = match (gaps_by_isl.first_key_value(), gaps_by_isl.last_key_value()) {
        (Some((&short, _)), Some((&long, _))) if long > short => {
            let short_gap = median(gaps_by_isl.get_mut(&short).expect("a key"));
            let long_gap = median(gaps_by_isl.get_mut(&long).expect("a key"));
            let per_token = (long_gap - short_gap) / (long - short) as f64;
            (short_gap - per_token * short as f64, per_token)
        }
        _ => (f64::NAN, f64::NAN),
    };
    Score {
        ttft_gap_line,
        loss: loss / cases.len().max(1) as f64,
        ttft_median_pct: median(&mut ttft_errors),
        tpot_median_pct: median(&mut tpot_errors),
        failed,
        ttft_gap_ms: median(&mut ttft_gaps),
        tpot_ratio: median(&mut tpot_ratios),
    }
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        (values[middle - 1] + values[middle]) / 2.0
    }
}

/// The coordinate search of one group (see the module docs).
fn search(
    cases: &[Case],
    prepared: &[Option<Arc<ReplaySpec>>],
    start: &AicCalibration,
    (axes, budget): (&[usize], usize),
    fit: &mut GroupFit,
    progress: &(dyn Fn(&str) + Sync),
) {
    let mut best = start.clone();
    let mut best_score = evaluate(cases, prepared, &best);
    fit.before = best_score;
    fit.evaluations = 1;
    progress(&format!(
        "  at the start, on {} rows: TTFT {:.1}%, TPOT {:.1}% median abs. error",
        cases.len(),
        best_score.ttft_median_pct,
        best_score.tpot_median_pct
    ));
    // First guesses from the rows' medians, each kept only if it scores better: the TTFT
    // the start misses as a per-request delay; or, where the gap grows with the prompt, as a
    // delay plus a cost per prefilled token (the line through the shortest and the longest
    // prompts' median gaps); both with the decode scale that centres TPOT.
    let start_score = best_score;
    let mut guesses = Vec::new();
    if start_score.ttft_gap_ms.is_finite() && start_score.tpot_ratio.is_finite() {
        let mut guess = best.clone();
        guess.request_overhead_ms = (guess.request_overhead_ms + start_score.ttft_gap_ms).max(0.0);
        guess.decode_scale *= start_score.tpot_ratio.clamp(0.2, 5.0);
        guesses.push(guess.clone());
        let (at_zero, per_token) = start_score.ttft_gap_line;
        if at_zero.is_finite() && per_token > 0.0 {
            guess.request_overhead_ms = (best.request_overhead_ms + at_zero).max(0.0);
            guess.prefill_token_us += per_token * 1000.0;
            guesses.push(guess);
        }
    }
    for guess in guesses {
        if guess == best || fit.evaluations >= budget {
            continue;
        }
        let score = evaluate(cases, prepared, &guess);
        fit.evaluations += 1;
        if score.loss < best_score.loss - 1e-6 {
            best = guess;
            best_score = score;
        }
    }
    let mut steps: Vec<f64> = AXES.iter().map(|(_, step)| *step).collect();
    // An adaptive coordinate search: an axis whose move helped tries the same direction
    // first next time with a longer step; one where neither direction helped halves its step.
    let mut directions = [1.0f64; AXES.len()];
    'search: while fit.evaluations < budget {
        let sweep_start = best.clone();
        for &axis_index in axes {
            let (axis, first_step) = &AXES[axis_index];
            let step = steps[axis_index];
            if step < first_step / SMALLEST_STEP_FRACTION {
                continue;
            }
            let mut improved = false;
            for direction in [directions[axis_index], -directions[axis_index]] {
                let mut candidate = best.clone();
                match axis {
                    Axis::Scale(field) => *field(&mut candidate) *= (direction * step).exp(),
                    Axis::Cost(field) => {
                        let value = field(&mut candidate);
                        *value = (*value + direction * step).max(0.0);
                    }
                }
                if candidate == best {
                    continue;
                }
                if fit.evaluations >= budget {
                    break 'search;
                }
                let score = evaluate(cases, prepared, &candidate);
                fit.evaluations += 1;
                if score.loss < best_score.loss - 1e-6 {
                    best = candidate;
                    best_score = score;
                    directions[axis_index] = direction;
                    improved = true;
                    break;
                }
            }
            steps[axis_index] = if improved {
                (step * 1.5).min(first_step * 4.0)
            } else {
                step / 2.0
            };
        }
        // A pattern move (Hooke and Jeeves): the sweep's net move repeated once. Parameters
        // that trade against each other (a per-request delay against a per-token cost) move
        // together along their valley this way, where single-axis steps crawl.
        if best != sweep_start && fit.evaluations < budget {
            let candidate = extrapolated(&sweep_start, &best);
            if candidate != best {
                let score = evaluate(cases, prepared, &candidate);
                fit.evaluations += 1;
                if score.loss < best_score.loss - 1e-6 {
                    best = candidate;
                    best_score = score;
                }
            }
        }
        let converged = axes
            .iter()
            .all(|&axis| steps[axis] < AXES[axis].1 / SMALLEST_STEP_FRACTION);
        if converged {
            break;
        }
    }
    progress(&format!(
        "  fitted after {} evaluations: TTFT {:.1}%, TPOT {:.1}% ({best})",
        fit.evaluations, best_score.ttft_median_pct, best_score.tpot_median_pct,
    ));
    fit.after = best_score;
    fit.corrections = Some(best);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_takes_every_stratum_in_turn() {
        let mut rows: Vec<(String, u64)> = (0..10).map(|i| (format!("long-{i}"), 8192)).collect();
        rows.extend((0..2).map(|i| (format!("mid-{i}"), 4096)));
        rows.push(("short".to_owned(), 1024));
        let ordered = sample_order(rows.clone(), |(id, isl)| {
            (id, ("m".to_owned(), (*isl, 1024, 1), false))
        });
        // The first three rows are one of each stratum; the rest of the short and middle
        // strata come before the long one's third row.
        let mut first: Vec<u64> = ordered[..3].iter().map(|(_, isl)| *isl).collect();
        first.sort();
        assert_eq!(first, [1024, 4096, 8192]);
        let isls: Vec<u64> = ordered[3..5].iter().map(|(_, isl)| *isl).collect();
        assert!(isls.contains(&4096) && isls.contains(&8192), "{isls:?}");
        assert!(ordered[5..].iter().all(|(_, isl)| *isl == 8192));
        // Within a stratum, the ids' hash order; and the order does not depend on the input's.
        let mut reversed = rows.clone();
        reversed.reverse();
        let again = sample_order(reversed, |(id, isl)| {
            (id, ("m".to_owned(), (*isl, 1024, 1), false))
        });
        assert_eq!(ordered, again);
        let hash = |id: &str| Sha256::digest(id.as_bytes()).to_vec();
        let long: Vec<&String> = ordered
            .iter()
            .filter(|(_, isl)| *isl == 8192)
            .map(|(id, _)| id)
            .collect();
        assert!(long.windows(2).all(|pair| hash(pair[0]) < hash(pair[1])));
    }

    #[test]
    fn a_pattern_move_repeats_the_sweeps_move() {
        let from = AicCalibration {
            request_overhead_ms: 10.0,
            prefill_token_us: 3.0,
            ..AicCalibration::IDENTITY
        };
        let to = AicCalibration {
            request_overhead_ms: 4.0,
            prefill_token_us: 5.0,
            prefill_scale: 2.0,
            ..AicCalibration::IDENTITY
        };
        let next = extrapolated(&from, &to);
        // Scales by the same factor again, costs by the same amount, floored at 0.
        assert_eq!(next.prefill_scale, 4.0);
        assert_eq!(next.prefill_token_us, 7.0);
        assert_eq!(next.request_overhead_ms, 0.0);
        assert_eq!(next.decode_scale, 1.0);
        assert_eq!(extrapolated(&to, &to), to);
    }
}
