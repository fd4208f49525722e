//! One replay and the files it writes, the same for the command line and the Python front.
//!
//! Every output a run asks for is checked and opened before the simulation starts (a bad path
//! is a usage error naming its flag, and costs no simulation); the per-request records go into
//! their file while the run goes on; at the end every file is written and all of them are
//! published together, or none is (see [`crate::output::commit`]). A run cancelled while it
//! simulates (Ctrl-C, on either front) writes what happened until then, its report marked
//! interrupted; one cancelled before its simulation starts writes nothing.
//!
//! INTERFACE
//! - [`OutputPaths`]: what a run writes besides its result (report JSON, per-request JSONL,
//!   AIPerf directory, HTML report).
//! - [`Outputs::prepare`]: checks and opens them, and makes the spec capture per-request records
//!   when a file needs them.
//! - [`replay`]: prepares the timing tables, loads the workload, simulates (scaled by a caller's
//!   policy, or by the spec's planner, or not at all), writes and publishes the outputs; returns
//!   the [`Replayed`] report and what the planner did.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dynosim::config::{ReplayMode, ReplaySpec};
use dynosim::planner::{PlannerOutcome, ScalingPolicy};
use dynosim::sim::{Clock, CollectorThread, Observers, Progress, Simulated, Simulation};
use dynosim::{Error, Report, Result};

use crate::aiperf;
use crate::html::render_html_report;
use crate::interrupt::{InterruptibleVirtualClock, Simulating};
use crate::live::WallClock;
use crate::output::{self, PreparedOutput, RecordStream};

/// The files and directory a run writes besides its result; `None` leaves one out.
#[derive(Clone, Copy, Debug, Default)]
pub struct OutputPaths<'a> {
    /// The report JSON (already resolved: the command line's default name is chosen by then).
    pub report_json: Option<&'a Path>,
    /// The per-request records, one JSON object per line (`--report-jsonl`).
    pub jsonl: Option<&'a Path>,
    /// AIPerf's three run-directory files (`--aiperf-dir`).
    pub aiperf_dir: Option<&'a Path>,
    /// The HTML report (`--html-report`).
    pub html: Option<&'a Path>,
    /// The run's own settings (named like the Python API's arguments), recorded in the AIPerf
    /// directory so that `dynosim validate` can rebuild its deployment; `None` records only
    /// AIPerf's input config.
    pub aiperf_settings: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

/// Where the per-request records go.
enum RecordsOutput {
    None,
    /// Written to the file as the run settles them.
    Streamed(RecordStream),
    /// Written at the end, because AIPerf's files read every record after the run.
    AtEnd(PreparedOutput),
}

/// The outputs of one run, checked and opened, not yet published.
pub struct Outputs {
    report_json: Option<PreparedOutput>,
    records: RecordsOutput,
    aiperf_dir: Option<PathBuf>,
    /// What the AIPerf directory records of the run (its input config, the settings).
    aiperf_run: serde_json::Map<String, serde_json::Value>,
    html: Option<PreparedOutput>,
    /// The command as the user gave it, shown first in the HTML report's configuration.
    invocation: String,
}

impl Outputs {
    /// Checks and opens every output of `paths` (errors name the command line's flags; the
    /// Python front words them with its argument names). `invocation` heads the HTML report's
    /// configuration table.
    pub fn prepare(
        spec: &mut ReplaySpec,
        paths: OutputPaths<'_>,
        invocation: String,
    ) -> Result<Self> {
        output::check_jsonl_path("--report-jsonl", paths.jsonl)?;
        if let Some(dir) = paths.aiperf_dir {
            aiperf::check_dir("--aiperf-dir", dir)?;
            // AIPerf's per-request file needs the per-request records.
            spec.capture_requests = true;
        }
        let jsonl = paths
            .jsonl
            .map(|path| PreparedOutput::prepare("per-request JSONL", path))
            .transpose()?;
        let report_json = paths
            .report_json
            .map(|path| PreparedOutput::prepare("report JSON", path))
            .transpose()?;
        let html = paths
            .html
            .map(|path| PreparedOutput::prepare("HTML report", path))
            .transpose()?;
        let records = match jsonl {
            None => RecordsOutput::None,
            Some(file) if paths.aiperf_dir.is_some() => RecordsOutput::AtEnd(file),
            Some(file) => RecordsOutput::Streamed(RecordStream::new(file)),
        };
        Ok(Self {
            report_json,
            records,
            aiperf_dir: paths.aiperf_dir.map(Path::to_path_buf),
            aiperf_run: aiperf::run_record(spec, paths.aiperf_settings),
            html,
            invocation,
        })
    }
}

/// A finished run whose outputs are published.
#[derive(Debug)]
pub struct Replayed {
    pub report: Report,
    /// What the planner did, when the run had one (the spec's or the caller's policy).
    pub planner: Option<PlannerOutcome>,
    /// The wall time before the simulation started (timing tables, the workload); the
    /// report's `wall_time_ms` is the simulation's.
    pub setup: Duration,
}

/// Runs `spec` and publishes its `outputs`. `policy`, when given, scales the workers (the
/// caller's own planner, the Python front's `scaling_policy`; the spec's planner runs
/// otherwise); `progress` is published for a progress bar. Once `cancel` is set the simulation
/// stops and the outputs cover what happened (the report marked interrupted); set before the
/// simulation starts, the run is a runtime error and writes nothing.
pub fn replay(
    spec: &ReplaySpec,
    outputs: Outputs,
    cancel: &AtomicBool,
    progress: Option<Arc<Progress>>,
    policy: Option<&mut dyn ScalingPolicy>,
) -> Result<Replayed> {
    if policy.is_some() {
        // Offline only, and engines the planner supports.
        spec.check_scaling("scaling_policy")?;
    }
    let observers = Observers {
        timeseries: outputs.wants_timeseries(),
        progress,
    };
    let sink = outputs.record_sink();
    let (simulated, wall_time_ms, setup) = simulate_timed(spec, cancel, observers, sink, policy)?;
    let mut replayed = outputs.publish(spec, simulated, wall_time_ms, Vec::new())?;
    replayed.setup = setup;
    Ok(replayed)
}

impl Outputs {
    /// Whether the HTML report's time series must be recorded.
    pub fn wants_timeseries(&self) -> bool {
        self.html.is_some()
    }

    /// Where the run hands its per-request records as they settle (none: kept to the end).
    pub fn record_sink(&self) -> Option<Box<dyn dynosim::report::RecordSink>> {
        match &self.records {
            RecordsOutput::Streamed(stream) => Some(stream.sink()),
            _ => None,
        }
    }

    /// Writes the outputs of the finished run `simulated` (of `spec`, `wall_time_ms` long)
    /// and publishes them together with `also` (a server's recorded trace), or none.
    pub fn publish(
        self,
        spec: &ReplaySpec,
        mut simulated: Simulated,
        wall_time_ms: f64,
        also: Vec<PreparedOutput>,
    ) -> Result<Replayed> {
        let Outputs {
            mut report_json,
            records,
            aiperf_dir,
            aiperf_run,
            mut html,
            invocation,
        } = self;
        let series = simulated.take_timeseries();
        let planner = simulated.take_planner();
        let (report, lazy_records) = simulated.into_report_lazily(wall_time_ms);
        let jsonl = match records {
            RecordsOutput::None => None,
            RecordsOutput::Streamed(stream) => Some(stream.finish()?),
            RecordsOutput::AtEnd(mut file) => {
                output::write_records(&mut file, lazy_records.iter())?;
                Some(file)
            }
        };
        if let Some(dir) = &aiperf_dir {
            // AIPerf's summary reads the records twice (statistics, then lines): built once here.
            let built: Vec<_> = lazy_records.iter().collect();
            aiperf::write_dir(dir, &report, &built, &aiperf_run)?;
        }
        drop(lazy_records);
        if let (Some(html), Some(series)) = (&mut html, &series) {
            let page = render_html_report(&invocation, spec, &report, series, planner.as_ref());
            html.write_all(page.as_bytes())?;
        }
        if let Some(file) = &mut report_json {
            file.write_all(report.to_json_file_string().as_bytes())?;
        }
        output::commit(
            jsonl
                .into_iter()
                .chain(html)
                .chain(report_json)
                .chain(also)
                .collect(),
        )?;
        Ok(Replayed {
            report,
            planner,
            setup: Duration::ZERO,
        })
    }
}

/// Prepares the timing tables, loads and simulates; returns the run, its wall time in ms
/// (the simulation only, not the loading, as the reference measures it) and the setup's
/// (timing tables and loading). Offline runs go in
/// virtual time, online runs on the wall clock at the spec's speed. One run at a time uses
/// one core for the simulation: its collector gets the second ([`CollectorThread::OwnThread`];
/// the outputs are the same either way).
fn simulate_timed(
    spec: &ReplaySpec,
    cancel: &AtomicBool,
    observers: Observers,
    records: Option<Box<dyn dynosim::report::RecordSink>>,
    policy: Option<&mut dyn ScalingPolicy>,
) -> Result<(Simulated, f64, Duration)> {
    let began = Instant::now();
    // Timing tables (AIC) are built before the workload is read and the clock starts; a
    // build (not a cache hit) takes long enough to say so first, on stderr, for both fronts.
    let prepared = dynosim_aic_tables::prepare_announcing(spec, &mut |sentence| {
        let _ = writeln!(std::io::stderr(), "dynosim: note: {sentence}");
    })?;
    let spec = prepared.as_ref();
    let workload = dynosim::load_workload(spec)?;
    // Cancelled before anything was simulated: nothing to report (dropped outputs leave no
    // file).
    if cancel.load(Ordering::Relaxed) {
        return Err(Error::runtime("replay interrupted"));
    }
    let collector_thread = CollectorThread::OwnThread;
    let started = Instant::now();
    let setup = started.duration_since(began);
    // Ctrl-C (caught by the command line's guard) stops the simulation, offline or live.
    let _simulating = Simulating::enter();
    let mut virtual_clock = InterruptibleVirtualClock;
    let mut wall_clock;
    let clock: &mut dyn Clock = match spec.replay_mode {
        ReplayMode::Offline => &mut virtual_clock,
        ReplayMode::Online { speed } => {
            wall_clock = WallClock::start(speed);
            &mut wall_clock
        }
    };
    let mut simulation = Simulation::new(spec, workload)
        .clock(clock)
        .cancel(cancel)
        .observers(observers)
        .collector_thread(collector_thread);
    if let Some(sink) = records {
        simulation = simulation.records(sink);
    }
    if let Some(policy) = policy {
        // `replay` checked that a policy's run is offline.
        simulation = simulation.policy(policy);
    }
    let simulated = simulation.run()?;
    Ok((simulated, started.elapsed().as_secs_f64() * 1000.0, setup))
}
