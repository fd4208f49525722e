//! Sweeps: many dynosim replays of one workload over a grid of settings, with a GPU budget,
//! SLAs, objectives and the Pareto front of output tokens/s per GPU against tokens/s per user.
//!
//! Lives above the pure core: it reads files, runs candidates on a thread pool (rayon) and
//! writes the result store and tables. The CLI (`dynosim sweep SPEC --out DIR`) and the Python
//! front (`dynosim.sweep(spec, out=...)`) both call [`run`].
//!
//! INTERFACE
//! - [`SweepSpec`] (`spec.rs`): the checked spec; bad specs are usage errors naming the spec
//!   and key.
//! - [`candidates`]: the spec's candidates (grid order; seeded sampling), each with its hash.
//!   With `search: {strategy: descent}`, [`run`] walks the grid's axes instead (coordinate
//!   descent, each stage's new candidates in parallel, idle threads on the guessed next stage).
//! - [`run`]: evaluates every candidate not already stored in `DIR/journal.jsonl` and writes
//!   `results.csv`, `pareto.csv`, `best.json` and `report.html`; returns the rows and counts.
//! - [`settings::Settings`]: the one mapping from a candidate's settings to `ReplayOptions`
//!   and to the `dynosim` command line.
//! - [`SweepProgress`]: told as candidates finish ([`RunOptions::progress`]); the sweep draws
//!   nothing itself (the command line draws a bar from it).
//!
//! Flow per candidate: settings -> `ReplayOptions` -> `into_spec` (a usage error becomes the
//! row's `error`) -> GPUs (over the budget: skipped, not run) -> the workload, read once per
//! distinct workload and shared -> `prepare` -> `Simulation::run` -> the report's keys.

pub mod columnar;
pub mod descent;
pub mod html;
pub mod objectives;
pub mod optimize;
pub mod outputs;
pub mod row;
pub mod settings;
pub mod spec;
pub mod store;
pub mod table;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use dynosim::config::spelling::python_message;
use dynosim::config::{ArrivalMode, ReplaySpec};
use dynosim::report::Value as ReportValue;
use dynosim::sim::CollectorThread;
use dynosim::{Error, Report, Result, Workload};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rayon::prelude::*;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use row::Row;
pub use settings::Settings;
pub use spec::{Strategy, SweepSpec};

use store::Journal;
pub use store::Stored;

/// A spec of either kind: the sweep's own (`base:`/`grid:`) or the reference's
/// `ReplayOptimizeSpec` (`engine:`/`hardware:`/`workload:`, camelCase).
#[derive(Clone, Debug, PartialEq)]
pub enum AnySpec {
    Sweep(SweepSpec),
    Optimize(Box<optimize::OptimizeSpec>),
}

impl AnySpec {
    /// Reads a spec file (YAML or JSON); relative trace paths are taken from its directory.
    pub fn from_file(path: &Path) -> Result<Self> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|err| Error::usage(format!("cannot read sweep spec {name}: {err}")))?;
        let mut value: Value = serde_yaml_ng::from_str(&text)
            .map_err(|err| Error::usage(format!("{name}: invalid YAML: {err}")))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        if optimize::OptimizeSpec::detect(&value) {
            if let Some(Value::String(trace)) = value.pointer_mut("/workload/traceFile") {
                *trace = spec::join_relative(dir, trace);
            }
        }
        let mut spec = Self::from_value(&name, &value)?;
        if let AnySpec::Sweep(sweep) = &mut spec {
            sweep.resolve_trace_paths(dir);
        }
        Ok(spec)
    }

    /// Checks a spec given as a value; `name` is used in messages.
    pub fn from_value(name: &str, value: &Value) -> Result<Self> {
        if optimize::OptimizeSpec::detect(value) {
            optimize::OptimizeSpec::from_value(name, value)
                .map(|spec| AnySpec::Optimize(Box::new(spec)))
        } else {
            SweepSpec::from_value(name, value).map(AnySpec::Sweep)
        }
    }
}

/// Report keys that measure the simulator itself (its wall time and speed): the only cells
/// that differ between two sweeps of the same spec.
pub const SIMULATOR_SPEED_KEYS: [&str; 3] = [
    "wall_time_ms",
    "processed_tokens_per_s",
    "processed_output_tokens_per_s",
];

/// A candidate to evaluate: its resolved settings and their hash.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub hash: String,
    pub settings: Settings,
}

/// The hash that keys a candidate in the store: the resolved settings (object keys sorted, so
/// their order in the spec does not matter) and the simulator's version.
pub fn candidate_hash(settings: &Settings) -> String {
    let canonical = serde_json::json!({
        "dynosim": env!("CARGO_PKG_VERSION"),
        "settings": canonical(&Value::Object(settings.values.clone())),
    });
    let digest = Sha256::digest(canonical.to_string().as_bytes());
    digest[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, Value> = map
                .iter()
                .map(|(key, value)| (key, canonical(value)))
                .collect();
            Value::Object(
                sorted
                    .into_iter()
                    .map(|(key, value)| (key.clone(), value))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// The candidate at one point of a grid (a value index per axis).
fn grid_candidate(spec: &SweepSpec, grid: &spec::Grid, point: &[usize]) -> Candidate {
    let mut settings = spec.base.clone();
    // Whole values first, then dotted keys into them, whatever their order in the spec.
    for pass_dotted in [false, true] {
        for ((key, values), &digit) in grid.axes.iter().zip(point) {
            if key.contains('.') == pass_dotted {
                settings.set(key, values[digit].clone());
            }
        }
    }
    let hash = candidate_hash(&settings);
    Candidate { hash, settings }
}

/// The spec's candidates in table order: each grid's cartesian product (first key outermost),
/// grids one after another, repeats (same hash) dropped; then, for `strategy: random`, a
/// seeded sample kept in that order. For `strategy: descent`, the whole grid (the space the
/// descent walks; [`run`] visits only its path).
pub fn candidates(spec: &SweepSpec) -> Vec<Candidate> {
    let mut all = Vec::new();
    let mut seen = HashSet::new();
    for grid in &spec.grids {
        let sizes: Vec<usize> = grid.axes.iter().map(|(_, values)| values.len()).collect();
        let mut digits = vec![0usize; sizes.len()];
        loop {
            let candidate = grid_candidate(spec, grid, &digits);
            if seen.insert(candidate.hash.clone()) {
                all.push(candidate);
            }
            // Next combination, the last key fastest.
            let mut position = sizes.len();
            loop {
                if position == 0 {
                    break;
                }
                position -= 1;
                digits[position] += 1;
                if digits[position] < sizes[position] {
                    break;
                }
                digits[position] = 0;
            }
            if digits.iter().all(|&digit| digit == 0) {
                break;
            }
        }
    }
    match spec.strategy {
        Strategy::Grid | Strategy::Descent { .. } => all,
        Strategy::Random { samples, seed } => {
            if samples >= all.len() {
                return all;
            }
            let mut rng = StdRng::seed_from_u64(seed);
            let mut picked = rand::seq::index::sample(&mut rng, all.len(), samples).into_vec();
            picked.sort_unstable();
            picked.into_iter().map(|index| all[index].clone()).collect()
        }
    }
}

/// How to run a sweep.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// Threads running candidates (default: one per core).
    pub jobs: Option<usize>,
    /// Told how the candidates advance (none: nobody watches).
    pub progress: Option<Arc<dyn SweepProgress>>,
    /// Once set (by another thread), candidates not yet started are not run and the call
    /// fails with "sweep interrupted"; the ones finished are stored.
    pub cancel: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("jobs", &self.jobs)
            .field("progress", &self.progress.is_some())
            .field("cancel", &self.cancel)
            .finish()
    }
}

/// What a display of a sweep's progress is told. The candidates to simulate come in batches
/// (all of a grid at once, a stage at a time in a descent): each batch is one `batch_started`
/// with its count, a `candidate_finished` per candidate as it is stored (from the sweep's
/// threads, in any order), then `batch_finished`. Candidates taken from the store are not
/// counted.
pub trait SweepProgress: Send + Sync {
    fn batch_started(&self, candidates: usize);
    fn candidate_finished(&self);
    fn batch_finished(&self);
}

/// A batch's progress reports, if anybody watches; `batch_finished` when dropped, so that an
/// early return (an interrupted sweep) ends the display too.
struct BatchProgress<'a>(Option<&'a dyn SweepProgress>);

impl<'a> BatchProgress<'a> {
    fn start(progress: Option<&'a dyn SweepProgress>, candidates: usize) -> Self {
        if let Some(progress) = progress {
            progress.batch_started(candidates);
        }
        Self(progress)
    }

    fn candidate_finished(&self) {
        if let Some(progress) = self.0 {
            progress.candidate_finished();
        }
    }
}

impl Drop for BatchProgress<'_> {
    fn drop(&mut self) {
        if let Some(progress) = self.0 {
            progress.batch_finished();
        }
    }
}

/// What a sweep did.
#[derive(Debug)]
pub struct Outcome {
    /// One per candidate within the budget, in candidate order.
    pub rows: Vec<Row>,
    /// Candidates simulated (or rejected) in this call.
    pub evaluated: usize,
    /// Candidates whose outcome came from the store.
    pub stored: usize,
    /// Candidates skipped because they use more GPUs than the budget.
    pub over_budget: usize,
    /// The files written.
    pub files: Vec<PathBuf>,
}

/// A candidate that passed validation and the budget, waiting for its run.
struct Pending {
    index: usize,
    spec: ReplaySpec,
    gpus: u64,
    workload: usize,
}

/// GPUs of a deployment, as the report counts them (`aic_tp_size × dp_size` per worker).
pub fn gpus_of(spec: &ReplaySpec) -> u64 {
    spec.deployment.gpus()
}

/// What decides the workload a spec loads (runs that agree on it share one read).
fn workload_key(spec: &ReplaySpec) -> String {
    format!(
        "{:?}|{}|{}",
        spec.workload,
        spec.deployment.is_disaggregated(),
        matches!(spec.arrivals, ArrivalMode::Concurrency { .. })
    )
}

fn report_map(report: &Report) -> Map<String, Value> {
    report
        .entries
        .iter()
        .map(|(key, value)| {
            let json = match *value {
                ReportValue::Int(int) => Value::from(int),
                ReportValue::Float(float) => serde_json::Number::from_f64(float)
                    .map(Value::Number)
                    .unwrap_or(Value::Null),
            };
            ((*key).to_owned(), json)
        })
        .collect()
}

/// Runs one validated candidate on a shared workload, its collector on the thread
/// `collector_thread` says; errors (and panics) become its error. Setting `cancel` ends the
/// run early (its outcome is then to be dropped).
fn simulate_one(
    spec: &ReplaySpec,
    workload: &Workload,
    cancel: &AtomicBool,
    collector_thread: CollectorThread,
) -> std::result::Result<Map<String, Value>, String> {
    let ran = catch_unwind(AssertUnwindSafe(|| -> Result<Report> {
        let prepared = dynosim_aic_tables::prepare(spec)?;
        let started = Instant::now();
        let simulated = dynosim::Simulation::new(prepared.as_ref(), workload.clone())
            .cancel(cancel)
            .collector_thread(collector_thread)
            .run()?;
        let (report, _) = simulated.into_report(started.elapsed().as_secs_f64() * 1000.0);
        Ok(report)
    }));
    match ran {
        Ok(Ok(report)) => Ok(report_map(&report)),
        Ok(Err(err)) => Err(python_message(&err)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(format!(
                "internal error while simulating this candidate: {what}"
            ))
        }
    }
}

/// Evaluates the spec's candidates into `out` (created if missing): stored candidates are
/// taken from the journal, the others run on `options.jobs` threads and are stored as they
/// finish; then the tables are written.
pub fn run(spec: &SweepSpec, out: &Path, options: &RunOptions) -> Result<Outcome> {
    let mut evaluator = Evaluator::open(out, options, spec.gpu_budget)?;
    let rows: Vec<Row> = match spec.strategy {
        Strategy::Descent { rounds, objective } => {
            descend_grid(spec, &mut evaluator, rounds, objective)?
        }
        Strategy::Grid | Strategy::Random { .. } => evaluator
            .evaluate(&candidates(spec))?
            .into_iter()
            .enumerate()
            .filter_map(|(index, row)| row.map(|row| Row { index, ..row }))
            .collect(),
    };
    let files = outputs::write_outputs(spec, &rows, evaluator.over_budget, out)?;
    Ok(Outcome {
        rows,
        evaluated: evaluator.evaluated,
        stored: evaluator.stored,
        over_budget: evaluator.over_budget,
        files,
    })
}

/// The best of a stage's rows (ties: the first): the SLA-feasible row best by `objective`,
/// else, when none is feasible, the row nearest its SLAs, then with the higher throughput.
fn descent_pick(
    rows: &[&Row],
    sla: &[objectives::SlaBound],
    objective: objectives::Objective,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    let feasible: Vec<bool> = rows
        .iter()
        .map(|row| objectives::feasible(row, sla) && objective.value(row).is_some())
        .collect();
    let any_feasible = feasible.iter().any(|&ok| ok);
    for (index, row) in rows.iter().enumerate() {
        let better = match best {
            None => !any_feasible || feasible[index],
            Some(current) if any_feasible => {
                feasible[index]
                    && objective.compare(row, rows[current]) == std::cmp::Ordering::Greater
            }
            Some(current) => {
                let throughput =
                    |row: &Row| row.metric("output_throughput_tok_s").unwrap_or(f64::MIN);
                objectives::violation(row, sla)
                    .total_cmp(&objectives::violation(rows[current], sla))
                    .then(throughput(rows[current]).total_cmp(&throughput(row)))
                    == std::cmp::Ordering::Less
            }
        };
        if better {
            best = Some(index);
        }
    }
    best
}

/// `strategy: descent`: coordinate descent over the grid's axes (see [`Strategy::Descent`]);
/// the visited rows in visiting order.
fn descend_grid(
    spec: &SweepSpec,
    evaluator: &mut Evaluator,
    rounds: usize,
    objective: objectives::Objective,
) -> Result<Vec<Row>> {
    let grid = &spec.grids[0];
    let axes = grid.axes.len();
    // The stage of `axis` through `point`: every value of that axis, the others held.
    let stage_of = |point: &[usize], axis: usize| -> Vec<(Vec<usize>, Candidate)> {
        (0..grid.axes[axis].1.len())
            .map(|value| {
                let mut varied = point.to_vec();
                varied[axis] = value;
                let candidate = grid_candidate(spec, grid, &varied);
                (varied, candidate)
            })
            .collect()
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut over_budget: HashSet<String> = HashSet::new();
    let mut point = vec![0usize; axes];
    for round in 0..rounds {
        let start = point.clone();
        for axis in 0..axes {
            let stage = stage_of(&point, axis);
            let known = |hash: &str, rows: &[Row]| {
                over_budget.contains(hash) || rows.iter().any(|row| row.candidate == hash)
            };
            let mut fresh: Vec<Candidate> = Vec::new();
            for (_, candidate) in &stage {
                if !known(&candidate.hash, &rows)
                    && !fresh.iter().any(|other| other.hash == candidate.hash)
                {
                    fresh.push(candidate.clone());
                }
            }
            if !fresh.is_empty() {
                let visited: &[Row] = &rows;
                let fresh_list: &[Candidate] = &fresh;
                let stage_list: &[(Vec<usize>, Candidate)] = &stage;
                let known_list = &over_budget;
                // The next stage from the best point so far (the next axis, or the next
                // round's first), for idle threads to start on.
                let guess = move |partial: &[Option<Row>]| -> Vec<Candidate> {
                    let mut points: Vec<&Vec<usize>> = Vec::new();
                    let mut stage_rows: Vec<&Row> = Vec::new();
                    for (varied, candidate) in stage_list {
                        let row = visited
                            .iter()
                            .find(|row| row.candidate == candidate.hash)
                            .or_else(|| {
                                let position =
                                    fresh_list.iter().position(|f| f.hash == candidate.hash)?;
                                partial.get(position)?.as_ref()
                            });
                        if let Some(row) = row {
                            points.push(varied);
                            stage_rows.push(row);
                        }
                    }
                    let Some(best) = descent_pick(&stage_rows, &spec.sla, objective) else {
                        return Vec::new();
                    };
                    let next_axis = (axis + 1) % axes;
                    if next_axis == 0 && round + 1 == rounds {
                        return Vec::new();
                    }
                    stage_of(points[best], next_axis)
                        .into_iter()
                        .map(|(_, candidate)| candidate)
                        .filter(|candidate| {
                            !known_list.contains(&candidate.hash)
                                && !visited.iter().any(|row| row.candidate == candidate.hash)
                                && !fresh_list.iter().any(|f| f.hash == candidate.hash)
                        })
                        .collect()
                };
                let outcomes = evaluator.evaluate_guessing(&fresh, &guess)?;
                for (candidate, row) in fresh.iter().zip(outcomes) {
                    match row {
                        Some(row) => rows.push(Row {
                            index: rows.len(),
                            ..row
                        }),
                        None => {
                            over_budget.insert(candidate.hash.clone());
                        }
                    }
                }
            }
            let mut points: Vec<&Vec<usize>> = Vec::new();
            let mut stage_rows: Vec<&Row> = Vec::new();
            for (varied, candidate) in &stage {
                if let Some(row) = rows.iter().find(|row| row.candidate == candidate.hash) {
                    points.push(varied);
                    stage_rows.push(row);
                }
            }
            if let Some(best) = descent_pick(&stage_rows, &spec.sla, objective) {
                point = points[best].clone();
            }
        }
        if point == start {
            break;
        }
    }
    Ok(rows)
}

/// Evaluates candidates against one output directory's store: each candidate is validated,
/// checked against the GPU budget, taken from the store or run (in parallel), and stored.
/// Workloads are read once per distinct workload and shared by every later call.
pub struct Evaluator {
    /// `None` for a detached evaluator (a remote task's), which stores nothing.
    journal: Option<Journal<Stored>>,
    pool: rayon::ThreadPool,
    /// Where each candidate's collector runs: on a thread of its own when the sweep's threads
    /// leave a core each for that (as a candidate run alone in its own process has it),
    /// otherwise inline.
    collector_thread: CollectorThread,
    budget: Option<u64>,
    progress: Option<Arc<dyn SweepProgress>>,
    cancel: Option<Arc<AtomicBool>>,
    workload_keys: Vec<String>,
    workloads: Vec<std::result::Result<Arc<Workload>, String>>,
    /// Outcomes simulated ahead of being asked for (guessed by [`Evaluator::evaluate_guessing`]),
    /// by hash; they count as evaluated when asked for.
    ahead: HashMap<String, Stored>,
    /// Candidates simulated (or rejected) so far.
    pub evaluated: usize,
    /// Candidates taken from the store so far.
    pub stored: usize,
    /// Candidates skipped for the budget so far.
    pub over_budget: usize,
}

impl Evaluator {
    /// Opens (creating) `out` and its store.
    pub fn open(out: &Path, options: &RunOptions, budget: Option<u64>) -> Result<Self> {
        if out.exists() && !out.is_dir() {
            return Err(Error::usage(format!(
                "--out: {} exists and is not a directory",
                out.display()
            )));
        }
        std::fs::create_dir_all(out)
            .map_err(|err| Error::runtime(format!("cannot create {}: {err}", out.display())))?;
        let journal = Some(Journal::open(out)?);
        Self::with_journal(journal, options, budget)
    }

    /// An evaluator that stores nothing (for candidates evaluated on behalf of another
    /// process, which stores the outcomes).
    pub fn detached(options: &RunOptions) -> Result<Self> {
        Self::with_journal(None, options, None)
    }

    fn with_journal(
        journal: Option<Journal<Stored>>,
        options: &RunOptions,
        budget: Option<u64>,
    ) -> Result<Self> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(options.jobs.unwrap_or(0))
            .build()
            .map_err(|err| Error::runtime(format!("cannot start the sweep's threads: {err}")))?;
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        let collector_thread = if pool.current_num_threads() * 2 <= cores {
            CollectorThread::OwnThread
        } else {
            CollectorThread::SameThread
        };
        Ok(Evaluator {
            journal,
            pool,
            collector_thread,
            budget,
            progress: options.progress.clone(),
            cancel: options.cancel.clone(),
            workload_keys: Vec::new(),
            workloads: Vec::new(),
            ahead: HashMap::new(),
            evaluated: 0,
            stored: 0,
            over_budget: 0,
        })
    }

    /// The workload of a spec, read on first use.
    fn workload_of(&mut self, spec: &ReplaySpec) -> usize {
        let key = workload_key(spec);
        if let Some(position) = self.workload_keys.iter().position(|known| *known == key) {
            return position;
        }
        self.workload_keys.push(key);
        self.workloads.push(
            dynosim::load_workload(spec)
                .map(Arc::new)
                .map_err(|err| python_message(&err)),
        );
        self.workloads.len() - 1
    }

    /// Stores one candidate's outcome (computed elsewhere, e.g. by a Ray task).
    pub fn store(&self, candidate: &Candidate, outcome: &Stored) -> Result<()> {
        match &self.journal {
            Some(journal) => {
                journal.append(&outcome.line(&candidate.hash, &candidate.settings.values))
            }
            None => Ok(()),
        }
    }

    /// The candidates that still need a simulation: within the budget, valid (rejected ones
    /// are stored with their error on the way) and not stored.
    pub fn unstored(&mut self, candidates: &[Candidate]) -> Result<Vec<Candidate>> {
        let (_, pending) = self.prepare(candidates)?;
        Ok(pending
            .iter()
            .map(|job| candidates[job.index].clone())
            .collect())
    }

    /// One row per candidate, in order (`index` is the position in `candidates`); `None` for
    /// a candidate over the GPU budget.
    pub fn evaluate(&mut self, candidates: &[Candidate]) -> Result<Vec<Option<Row>>> {
        let (rows, pending) = self.prepare(candidates)?;
        self.execute(candidates, rows, pending)
    }

    /// Settles what needs no simulation (over budget, stored, rejected) and lists the rest.
    fn prepare(&mut self, candidates: &[Candidate]) -> Result<(Vec<Option<Row>>, Vec<Pending>)> {
        let mut rows: Vec<Option<Row>> = vec![None; candidates.len()];
        let mut pending = Vec::new();
        for (index, candidate) in candidates.iter().enumerate() {
            let row = |stored: &Stored| Row {
                index,
                candidate: candidate.hash.clone(),
                settings: candidate.settings.clone(),
                gpus: stored.gpus,
                error: stored.error.clone(),
                report: stored.report.clone(),
            };
            let validated = candidate
                .settings
                .to_options()
                .and_then(|options| options.into_spec().map_err(|err| python_message(&err)));
            let gpus = validated.as_ref().ok().map(gpus_of);
            if let (Some(gpus), Some(budget)) = (gpus, self.budget) {
                if gpus > budget {
                    self.over_budget += 1;
                    continue;
                }
            }
            if let Some(outcome) = self.ahead.remove(&candidate.hash) {
                self.evaluated += 1;
                rows[index] = Some(row(&outcome));
                continue;
            }
            if let Some(stored) = self
                .journal
                .as_ref()
                .and_then(|journal| journal.stored(&candidate.hash))
            {
                self.stored += 1;
                rows[index] = Some(row(stored));
                continue;
            }
            match validated {
                Err(error) => {
                    let outcome = Stored {
                        gpus: None,
                        error,
                        report: Map::new(),
                    };
                    self.store(candidate, &outcome)?;
                    self.evaluated += 1;
                    rows[index] = Some(row(&outcome));
                }
                Ok(replay_spec) => {
                    let workload = self.workload_of(&replay_spec);
                    pending.push(Pending {
                        index,
                        spec: replay_spec,
                        gpus: gpus.unwrap_or(0),
                        workload,
                    });
                }
            }
        }

        Ok((rows, pending))
    }

    /// Simulates one validated candidate on its shared workload (`cancel` ends it early).
    fn simulate_pending(
        &self,
        job: &Pending,
        cancel: &AtomicBool,
        collector_thread: CollectorThread,
    ) -> Stored {
        let result = match &self.workloads[job.workload] {
            Ok(workload) => simulate_one(&job.spec, workload, cancel, collector_thread),
            Err(error) => Err(error.clone()),
        };
        let (report, error) = match result {
            Ok(report) => (report, String::new()),
            Err(error) => (Map::new(), error),
        };
        Stored {
            gpus: Some(job.gpus),
            error,
            report,
        }
    }

    /// Where the collector of a candidate runs that leaves `left` candidates of its batch
    /// still to start, on `threads` threads. The batch's last candidates finish while other
    /// threads have nothing left to start, so their cores fall idle: the collector of each of
    /// the last `threads - 1` to start gets a thread of its own, which those cores take up.
    /// (Reports and records are the same whichever thread applies a collector.)
    fn tail_collector_thread(&self, left: usize, threads: usize) -> CollectorThread {
        if left + 1 < threads {
            CollectorThread::OwnThread
        } else {
            self.collector_thread
        }
    }

    fn interrupted(&self) -> bool {
        self.cancel
            .as_deref()
            .is_some_and(|cancel| cancel.load(Ordering::Relaxed))
    }

    /// Simulates the pending candidates in parallel, storing each as it finishes.
    fn execute(
        &mut self,
        candidates: &[Candidate],
        mut rows: Vec<Option<Row>>,
        pending: Vec<Pending>,
    ) -> Result<Vec<Option<Row>>> {
        let progress = BatchProgress::start(self.progress.as_deref(), pending.len());
        let this = &*self;
        let threads = self.pool.current_num_threads();
        let unstarted = AtomicUsize::new(pending.len());
        let finished: Vec<(usize, Stored)> = self.pool.install(|| {
            pending
                .par_iter()
                // One candidate at a time per thread: candidates are long and unequal.
                .with_max_len(1)
                .map(|job| {
                    if this.interrupted() {
                        return Err(Error::runtime("sweep interrupted"));
                    }
                    let left = unstarted.fetch_sub(1, Ordering::Relaxed) - 1;
                    let collector_thread = this.tail_collector_thread(left, threads);
                    let outcome =
                        this.simulate_pending(job, &AtomicBool::new(false), collector_thread);
                    let appended = this.store(&candidates[job.index], &outcome);
                    progress.candidate_finished();
                    appended.map(|()| (job.index, outcome))
                })
                .collect::<Result<Vec<_>>>()
        })?;
        drop(progress);
        self.evaluated += finished.len();
        for (index, outcome) in finished {
            rows[index] = Some(row_of(index, &candidates[index], outcome));
        }
        Ok(rows)
    }

    /// [`Evaluator::evaluate`], and while the batch's last candidates run (threads would
    /// otherwise wait for them), runs the candidates that `guess` expects to be asked for
    /// next, from the rows so far (`None`: not finished), most likely first. Their outcomes
    /// are stored as usual and kept for the next call; once the batch is done, guessed runs
    /// that the finished batch no longer points to are cancelled and dropped.
    pub fn evaluate_guessing(
        &mut self,
        candidates: &[Candidate],
        guess: &(dyn Fn(&[Option<Row>]) -> Vec<Candidate> + Sync),
    ) -> Result<Vec<Option<Row>>> {
        let threads = self.pool.current_num_threads();
        let (rows, pending) = self.prepare(candidates)?;
        if threads <= 1 || pending.is_empty() {
            return self.execute(candidates, rows, pending);
        }
        let progress = BatchProgress::start(self.progress.as_deref(), pending.len());
        let batch: HashSet<&str> = candidates.iter().map(|c| c.hash.as_str()).collect();
        let shared = Mutex::new(Schedule {
            next: 0,
            left: pending.len(),
            rows,
            guessed: Vec::new(),
            ahead: Vec::new(),
            declined: Vec::new(),
            failure: None,
        });
        let changed = Condvar::new();
        let this = &*self;
        let worker = || {
            let lock = || {
                shared
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
            };
            let mut schedule = lock();
            loop {
                if schedule.failure.is_some() {
                    return;
                }
                if schedule.next < pending.len() {
                    if this.interrupted() {
                        schedule.failure = Some(Error::runtime("sweep interrupted"));
                        changed.notify_all();
                        return;
                    }
                    let job = &pending[schedule.next];
                    schedule.next += 1;
                    drop(schedule);
                    // Threads that would idle run guesses instead, so every core stays busy.
                    let outcome =
                        this.simulate_pending(job, &AtomicBool::new(false), this.collector_thread);
                    let stored = this.store(&candidates[job.index], &outcome);
                    progress.candidate_finished();
                    schedule = lock();
                    if let Err(err) = stored {
                        schedule.failure = Some(err);
                    }
                    schedule.rows[job.index] =
                        Some(row_of(job.index, &candidates[job.index], outcome));
                    schedule.left -= 1;
                    if schedule.left == 0 {
                        // The batch is complete: its guess is now what the caller asks next.
                        let next: HashSet<String> =
                            guess(&schedule.rows).into_iter().map(|c| c.hash).collect();
                        for (hash, cancel) in &schedule.guessed {
                            if !next.contains(hash) {
                                cancel.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                    changed.notify_all();
                    continue;
                }
                if schedule.left == 0 {
                    return;
                }
                // The batch's last candidates are running: start on a guessed one.
                let known = |hash: &str| {
                    batch.contains(hash)
                        || this.ahead.contains_key(hash)
                        || this
                            .journal
                            .as_ref()
                            .is_some_and(|journal| journal.stored(hash).is_some())
                };
                let pick = guess(&schedule.rows).into_iter().find(|candidate| {
                    let hash = &candidate.hash;
                    !known(hash)
                        && !schedule.guessed.iter().any(|(other, _)| other == hash)
                        && !schedule.ahead.iter().any(|(other, _)| other == hash)
                        && !schedule.declined.contains(hash)
                });
                let Some(candidate) = pick else {
                    schedule = changed
                        .wait(schedule)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    continue;
                };
                let cancel = Arc::new(AtomicBool::new(false));
                schedule
                    .guessed
                    .push((candidate.hash.clone(), Arc::clone(&cancel)));
                drop(schedule);
                let outcome = this
                    .pending_of(&candidate)
                    .map(|job| this.simulate_pending(&job, &cancel, this.collector_thread));
                schedule = lock();
                schedule.guessed.retain(|(hash, _)| *hash != candidate.hash);
                if outcome.is_none() {
                    schedule.declined.push(candidate.hash.clone());
                }
                if let Some(outcome) = outcome {
                    if !cancel.load(Ordering::Relaxed) {
                        if let Err(err) = this.store(&candidate, &outcome) {
                            schedule.failure = Some(err);
                        }
                        schedule.ahead.push((candidate.hash, outcome));
                    }
                }
                changed.notify_all();
            }
        };
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(worker);
            }
        });
        drop(progress);
        let schedule = shared
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(err) = schedule.failure {
            return Err(err);
        }
        self.evaluated += pending.len();
        self.ahead.extend(schedule.ahead);
        Ok(schedule.rows)
    }

    /// A guessed candidate ready to run: valid, within the budget, and of a workload already
    /// read (`None` otherwise: it is left for when it is asked for).
    fn pending_of(&self, candidate: &Candidate) -> Option<Pending> {
        let spec = candidate.settings.to_options().ok()?.into_spec().ok()?;
        let gpus = gpus_of(&spec);
        if self.budget.is_some_and(|budget| gpus > budget) {
            return None;
        }
        let key = workload_key(&spec);
        let workload = self.workload_keys.iter().position(|known| *known == key)?;
        Some(Pending {
            index: 0,
            spec,
            gpus,
            workload,
        })
    }
}

/// What the threads of [`Evaluator::evaluate_guessing`] share.
struct Schedule {
    /// The next pending candidate to start.
    next: usize,
    /// Pending candidates not finished.
    left: usize,
    /// The batch's rows so far.
    rows: Vec<Option<Row>>,
    /// Guessed candidates running, with their cancel flags.
    guessed: Vec<(String, Arc<AtomicBool>)>,
    /// Guessed candidates finished (and stored).
    ahead: Vec<(String, Stored)>,
    /// Guessed candidates not run ahead (rejected, over the budget, or of a workload not
    /// read yet): they run when asked for.
    declined: Vec<String>,
    failure: Option<Error>,
}

fn row_of(index: usize, candidate: &Candidate, outcome: Stored) -> Row {
    Row {
        index,
        candidate: candidate.hash.clone(),
        settings: candidate.settings.clone(),
        gpus: outcome.gpus,
        error: outcome.error,
        report: outcome.report,
    }
}
