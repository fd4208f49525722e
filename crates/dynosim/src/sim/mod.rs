//! The virtual-time simulation: arrival driver, event loop, topology.
//!
//! One clock (`now_ms`, f64 milliseconds) and one queue of pass completions. Each worker runs
//! its own back-to-back forward passes; a pass is decided eagerly when it starts and its
//! outcome (tokens, terminal states) is applied when it completes. At one timestamp the loop
//! settles, in this order and until nothing changes: pass completions (in completion-queue
//! order), releases of ready arrivals (each routed before the next), then pass starts on idle
//! workers in ascending worker id. This is the reference's ordering of simultaneous events.

mod aggregated;
mod collector_front;
mod disaggregated;
pub mod driver;
pub mod event_loop;
mod event_queue;
pub mod external;
mod handoff;
mod pool;
mod pool_router;
mod requests;
mod scaling;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::config::{Deployment, ReplaySpec};
use crate::error::{Error, Result};
use crate::planner::{self, PlannerOutcome, ScalingPolicy};
use crate::report::timeseries::TimeSeries;
use crate::report::{Collector, LazyRecords, RecordSink, Report, RequestRecord, RunFacts};
use crate::workload::Workload;
use aggregated::Aggregated;
use collector_front::CollectorFront;
pub use collector_front::CollectorThread;
use disaggregated::Disaggregated;
use driver::Driver;
pub use event_loop::{Clock, Progress, RunControl, VirtualClock};

/// Runs the whole replay in virtual time.
pub fn simulate(spec: &ReplaySpec, workload: Workload) -> Result<Simulated> {
    simulate_with(spec, workload, &mut VirtualClock, &AtomicBool::new(false))
}

/// Runs the replay with time from `clock`, until it ends or another thread sets `cancel`
/// (then the result covers what finished). A spec with a planner runs the native planner.
pub fn simulate_with(
    spec: &ReplaySpec,
    workload: Workload,
    clock: &mut dyn Clock,
    cancel: &AtomicBool,
) -> Result<Simulated> {
    simulate_observed(spec, workload, clock, cancel, &Observers::default())
}

/// What a caller watches besides the report: neither changes the run's outcome.
#[derive(Clone, Debug, Default)]
pub struct Observers {
    /// Record the time series of the HTML report ([`Simulated::take_timeseries`]).
    pub timeseries: bool,
    /// Publish model time and ended requests here after each batch of events.
    pub progress: Option<Arc<Progress>>,
}

/// [`simulate_with`], with `observers` recording or publishing what they ask for. A spec with
/// a planner runs the native planner.
pub fn simulate_observed(
    spec: &ReplaySpec,
    workload: Workload,
    clock: &mut dyn Clock,
    cancel: &AtomicBool,
    observers: &Observers,
) -> Result<Simulated> {
    simulate_streaming(
        spec,
        workload,
        clock,
        cancel,
        observers,
        None,
        CollectorThread::SameThread,
    )
}

/// [`simulate_observed`], handing captured per-request records to `records` as the run
/// settles them (in record order) instead of keeping them to the end; the finished run then
/// has none left to give (see `report::collector`), with the collector on the thread
/// `collector_thread` says (the outcome is the same). A spec with a planner runs the native
/// planner.
pub fn simulate_streaming(
    spec: &ReplaySpec,
    workload: Workload,
    clock: &mut dyn Clock,
    cancel: &AtomicBool,
    observers: &Observers,
    records: Option<Box<dyn RecordSink>>,
    collector_thread: CollectorThread,
) -> Result<Simulated> {
    match &spec.planner {
        Some(planner) => {
            let mut native = planner::native_for(spec, planner);
            let policy: &mut dyn ScalingPolicy = &mut native;
            let collecting = Collecting {
                thread: collector_thread,
                records,
            };
            let simulated = simulate_scaled(
                spec,
                workload,
                clock,
                cancel,
                observers,
                collecting,
                Some(policy),
            )?;
            debug_assert_eq!(simulated.planner.as_ref(), Some(native.outcome()));
            Ok(simulated)
        }
        None => {
            let collecting = Collecting {
                thread: collector_thread,
                records,
            };
            simulate_scaled(spec, workload, clock, cancel, observers, collecting, None)
        }
    }
}

/// Where a run's collector works, and where its per-request records go as they settle (none:
/// they are kept to the end of the run).
#[derive(Default)]
pub struct Collecting {
    pub thread: CollectorThread,
    pub records: Option<Box<dyn RecordSink>>,
}

/// [`simulate_streaming`] with the workers scaled by `policy` at its ticks (any planner: the
/// native one, or one the caller brings). The outcome counts the policy's ticks and lists
/// every change of a worker count it asked for.
pub fn simulate_scaled<'a>(
    spec: &'a ReplaySpec,
    workload: Workload,
    clock: &mut dyn Clock,
    cancel: &AtomicBool,
    observers: &Observers,
    collecting: Collecting,
    policy: Option<&'a mut dyn ScalingPolicy>,
) -> Result<Simulated> {
    let Collecting {
        thread: collector_thread,
        records,
    } = collecting;
    let driver = Driver::new(workload, spec.arrivals)?;
    let cap = spec.max_sim_time_ms;
    let progress = observers.progress.as_deref();
    let mut collector = Collector::new(spec.sla, spec.capture_requests);
    if observers.timeseries {
        let pools: &[&'static str] = if spec.deployment.is_disaggregated() {
            &["prefill", "decode"]
        } else {
            &["worker"]
        };
        collector.record_timeseries(TimeSeries::new(pools));
    }
    if let Some(sink) = records {
        collector.stream_records_to(sink);
    }
    let collector = CollectorFront::start(collector, spec.capture_requests, collector_thread);
    let (collector, mut facts, planner, interrupted) = match &spec.deployment {
        Deployment::Disaggregated { prefill, decode } => {
            let mut sim = Disaggregated::new(spec, prefill, decode, driver, policy, collector);
            let interrupted = event_loop::run(&mut sim, cap, clock, cancel, progress)?;
            let planner = sim.planner_outcome();
            let (collector, facts) = sim.finish()?;
            (collector, facts, planner, interrupted)
        }
        Deployment::Aggregated(workers) => {
            let mut sim = Aggregated::new(spec, workers, driver, policy, collector);
            let interrupted = event_loop::run(&mut sim, cap, clock, cancel, progress)?;
            let planner = sim.planner_outcome();
            let (collector, facts) = sim.finish()?;
            (collector, facts, planner, interrupted)
        }
    };
    facts.interrupted = interrupted;
    Ok(Simulated {
        collector,
        facts,
        planner,
    })
}

/// [`simulate`], stopping early when another thread sets `cancel` (a front whose user pressed
/// Ctrl-C); such a run ends with a runtime error and no report (the Python front's choice;
/// [`simulate_with`] keeps the report of what finished).
pub fn simulate_cancellable(
    spec: &ReplaySpec,
    workload: Workload,
    cancel: &AtomicBool,
) -> Result<Simulated> {
    let simulated = simulate_with(spec, workload, &mut VirtualClock, cancel)?;
    if cancel.load(Ordering::Relaxed) {
        return Err(Error::runtime("replay interrupted"));
    }
    Ok(simulated)
}

/// A finished simulation, waiting for the caller's wall-time measurement to become a report.
#[derive(Debug)]
pub struct Simulated {
    collector: Collector,
    facts: RunFacts,
    /// With a planner: its scaling events and ticks.
    planner: Option<PlannerOutcome>,
}

impl Simulated {
    /// The planner's scaling events and tick count, when a planner ran.
    pub fn planner(&self) -> Option<&PlannerOutcome> {
        self.planner.as_ref()
    }

    /// Takes the planner's outcome out (see [`Simulated::planner`]).
    pub fn take_planner(&mut self) -> Option<PlannerOutcome> {
        self.planner.take()
    }

    /// The time series, when [`Observers::timeseries`] asked for them (once).
    pub fn take_timeseries(&mut self) -> Option<TimeSeries> {
        self.collector.take_timeseries()
    }

    /// The report (with `wall_time_ms` as measured by the caller) and the per-request records
    /// (empty unless the spec asked for them), sorted by arrival time.
    pub fn into_report(self, wall_time_ms: f64) -> (Report, Vec<RequestRecord>) {
        self.collector.finish(RunFacts {
            wall_time_ms,
            ..self.facts
        })
    }

    /// Like [`Simulated::into_report`], with records built one at a time as they are read
    /// (for streaming them to a file without holding them all).
    pub fn into_report_lazily(self, wall_time_ms: f64) -> (Report, LazyRecords) {
        self.collector.finish_lazily(RunFacts {
            wall_time_ms,
            ..self.facts
        })
    }
}
