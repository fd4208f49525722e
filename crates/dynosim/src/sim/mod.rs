//! The virtual-time simulation: arrival driver, event loop, topology.
//!
//! One clock (`now_ms`, f64 milliseconds) and one queue of pass completions. Each worker runs
//! its own back-to-back forward passes; a pass is decided eagerly when it starts and its
//! outcome (tokens, terminal states) is applied when it completes. At one timestamp the loop
//! settles, in this order and until nothing changes: pass completions (in completion-queue
//! order), releases of ready arrivals (each routed before the next), then pass starts on idle
//! workers in ascending worker id. This is the reference's ordering of simultaneous events.
//!
//! INTERFACE
//! - [`Simulation`]: the one way to run a replay. Built from a spec and its workload, given
//!   what the caller brings (a clock, a cancel flag, observers, a record sink, the collector's
//!   thread, a scaling policy), then driven with [`Simulation::run`] to its end. Every run is
//!   checked there the same way: a spec whose AIC tables were not built is refused, and the
//!   spec's planner runs natively unless the caller brought a policy.
//! - [`Simulated`]: the finished run, waiting for the caller's wall-time measurement to become
//!   a report (and its records, time series and planner outcome).
//! - [`Observers`], [`CollectorThread`]: what a caller watches, and where the collector works;
//!   neither changes the outcome.
//! - [`Clock`], [`VirtualClock`], [`RunControl`], [`Progress`]: the seams of the event loop
//!   (see [`event_loop`]).
//! - [`external`]: runs fed by a server while they go on (`dynosim serve`).

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

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::config::{needs_prepare, Deployment, ReplaySpec};
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

/// What a caller watches besides the report: neither changes the run's outcome.
#[derive(Clone, Debug, Default)]
pub struct Observers {
    /// Record the time series of the HTML report ([`Simulated::take_timeseries`]).
    pub timeseries: bool,
    /// Publish model time and ended requests here after each batch of events.
    pub progress: Option<Arc<Progress>>,
}

/// One replay of `spec` over its workload: built with what the caller brings, then run.
///
/// Left unset, a run goes in virtual time, cannot be cancelled, observes nothing, keeps its
/// per-request records to the end, collects on the simulating thread and, when the spec has a
/// planner, is scaled by the native planner. Of these choices only a cancellation and the
/// policy change what the run outputs: a clock decides when model time is due, not what
/// happens then.
pub struct Simulation<'a> {
    spec: &'a ReplaySpec,
    workload: Workload,
    clock: Option<&'a mut dyn Clock>,
    cancel: Option<&'a AtomicBool>,
    observers: Observers,
    records: Option<Box<dyn RecordSink>>,
    collector_thread: CollectorThread,
    policy: Option<&'a mut dyn ScalingPolicy>,
}

impl<'a> Simulation<'a> {
    /// A run of `spec` (validated, and prepared when its timing needs AIC tables: see
    /// `dynosim_aic_tables::prepare`) over `workload` (what `dynosim::load_workload` reads for it).
    pub fn new(spec: &'a ReplaySpec, workload: Workload) -> Self {
        Self {
            spec,
            workload,
            clock: None,
            cancel: None,
            observers: Observers::default(),
            records: None,
            collector_thread: CollectorThread::SameThread,
            policy: None,
        }
    }

    /// Model time advances when `clock` says so (a live replay's wall clock) instead of at
    /// once.
    pub fn clock(mut self, clock: &'a mut dyn Clock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The run stops once another thread sets `cancel` (read between batches of events); the
    /// finished run then covers what ended and says it was interrupted.
    pub fn cancel(mut self, cancel: &'a AtomicBool) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Records or publishes what `observers` ask for.
    pub fn observers(mut self, observers: Observers) -> Self {
        self.observers = observers;
        self
    }

    /// Hands captured per-request records to `sink` as the run settles them (in record
    /// order) instead of keeping them to the end: the finished run then has none left to give.
    pub fn records(mut self, sink: Box<dyn RecordSink>) -> Self {
        self.records = Some(sink);
        self
    }

    /// Where the collector works (the outcome is the same either way).
    pub fn collector_thread(mut self, thread: CollectorThread) -> Self {
        self.collector_thread = thread;
        self
    }

    /// Scales the workers by `policy` at its ticks (a planner the caller brings) instead of
    /// by the spec's planner.
    pub fn policy(mut self, policy: &'a mut dyn ScalingPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Runs to the end: every request ended, the spec's time cap passed, or the cancel flag
    /// set. A spec whose timing needs AIC tables it was not given is refused (a runtime
    /// error): its passes would otherwise be timed by another model without a word.
    pub fn run(self) -> Result<Simulated> {
        refuse_unprepared(self.spec)?;
        let Simulation {
            spec,
            workload,
            clock,
            cancel,
            observers,
            records,
            collector_thread,
            policy,
        } = self;
        let mut virtual_clock = VirtualClock;
        let clock = clock.unwrap_or(&mut virtual_clock);
        let never_cancelled = AtomicBool::new(false);
        let cancel = cancel.unwrap_or(&never_cancelled);
        let driver = Driver::new(workload, spec.arrivals)?;
        let collector = collector_for(spec, observers.timeseries, records);
        let collector = CollectorFront::start(collector, spec.capture_requests, collector_thread);
        // The caller's policy, else the spec's planner (natively), else none.
        let mut native = None;
        let policy: Option<&mut dyn ScalingPolicy> = match (policy, &spec.planner) {
            (Some(policy), _) => Some(policy),
            (None, Some(planner)) => Some(native.insert(planner::native_for(spec, planner))),
            (None, None) => None,
        };
        let progress = observers.progress.as_deref();
        let simulated = drive(spec, driver, collector, policy, clock, cancel, progress)?;
        if let Some(native) = &native {
            debug_assert_eq!(simulated.planner.as_ref(), Some(native.outcome()));
        }
        Ok(simulated)
    }
}

/// The collector of a run of `spec`: recording the time series of its pools when
/// `timeseries`, handing its records to `records` as they settle when there is a sink.
fn collector_for(
    spec: &ReplaySpec,
    timeseries: bool,
    records: Option<Box<dyn RecordSink>>,
) -> Collector {
    let mut collector = Collector::new(spec.sla, spec.capture_requests);
    if timeseries {
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
    collector
}

/// The check every run makes before it starts (a replay here, a served run in
/// [`external::serve`]): a spec whose AIC tables were not built is a runtime error.
fn refuse_unprepared(spec: &ReplaySpec) -> Result<()> {
    if needs_prepare(spec) {
        return Err(Error::runtime(
            "AIC timing tables are not built: call dynosim_aic_tables::prepare on the spec first",
        ));
    }
    Ok(())
}

/// Runs the spec's topology over `driver`'s arrivals through the event loop, scaled by
/// `policy` when there is one.
fn drive<'s>(
    spec: &'s ReplaySpec,
    driver: Driver,
    collector: CollectorFront,
    policy: Option<&'s mut dyn ScalingPolicy>,
    clock: &mut dyn Clock,
    cancel: &AtomicBool,
    progress: Option<&Progress>,
) -> Result<Simulated> {
    let cap = spec.max_sim_time_ms;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ReplayOptions;
    use crate::engine::RankLoad;
    use crate::error::ErrorKind;
    use crate::report::record::TerminalStatus;

    /// A small synthetic run whose one worker is timed by AIC when `aic` (its tables not built).
    fn spec(aic: bool) -> ReplaySpec {
        let engine = if aic {
            r#"{"aic_backend":"vllm","aic_system":"h200_sxm","aic_model_path":"Qwen/Qwen3-32B",
                "num_gpu_blocks":4096}"#
        } else {
            r#"{"num_gpu_blocks":4096}"#
        };
        ReplayOptions {
            extra_engine_args: Some(engine.into()),
            input_tokens: Some(200),
            output_tokens: Some(8),
            request_count: Some(4),
            request_rate: Some(10.0),
            ..ReplayOptions::default()
        }
        .into_spec()
        .expect("a valid spec")
    }

    fn assert_refused(outcome: Result<Simulated>) {
        let error = outcome.expect_err("an unprepared AIC spec is refused");
        assert_eq!(error.kind(), ErrorKind::Runtime);
        assert!(
            error
                .to_string()
                .contains("AIC timing tables are not built"),
            "{error}"
        );
    }

    struct NoRecords;
    impl RecordSink for NoRecords {
        fn accept(&mut self, _record: RequestRecord) {}
    }

    /// A scaling policy that never ticks.
    struct Idle;
    impl ScalingPolicy for Idle {
        fn initial_tick_ms(&mut self) -> Result<f64> {
            Ok(f64::INFINITY)
        }
        fn on_tick(&mut self, _: &planner::ScalingSnapshot) -> Result<planner::ScalingDecision> {
            Ok(planner::ScalingDecision::default())
        }
    }

    #[test]
    fn every_way_to_run_refuses_an_unprepared_aic_spec() {
        let plain = spec(false);
        let (report, _) = Simulation::new(&plain, crate::workload::load(&plain).unwrap())
            .run()
            .expect("without AIC the same run goes")
            .into_report(0.0);
        assert_eq!(report.get("completed_requests").unwrap().as_f64(), 4.0);

        let spec = spec(true);
        assert!(needs_prepare(&spec));
        let workload = || crate::workload::load(&spec).unwrap();
        assert_refused(Simulation::new(&spec, workload()).run());
        let cancel = AtomicBool::new(false);
        let mut clock = VirtualClock;
        assert_refused(
            Simulation::new(&spec, workload())
                .clock(&mut clock)
                .cancel(&cancel)
                .run(),
        );
        let observers = Observers {
            timeseries: true,
            progress: Some(Arc::new(Progress::new())),
        };
        assert_refused(
            Simulation::new(&spec, workload())
                .observers(observers)
                .records(Box::new(NoRecords))
                .collector_thread(CollectorThread::OwnThread)
                .run(),
        );
        let mut policy = Idle;
        assert_refused(Simulation::new(&spec, workload()).policy(&mut policy).run());
    }

    /// A feed that is closed from the start.
    struct Closed;
    impl external::RequestFeed for Closed {
        fn wait(&mut self, next_ms: Option<f64>, _cancel: &AtomicBool) -> f64 {
            next_ms.unwrap_or(0.0)
        }
        fn take(&mut self, _into: &mut Vec<external::FeedEvent>) {}
        fn is_closed(&self) -> bool {
            true
        }
        fn on_settled(&mut self, _at_ms: f64, _load: RankLoad) {}
    }

    struct Deaf;
    impl crate::report::RequestObserver for Deaf {
        fn on_admit(&mut self, _id: crate::engine::RequestId, _at_ms: f64, _reused: usize) {}
        fn on_tokens(&mut self, _id: crate::engine::RequestId, _at_ms: f64, _count: usize) {}
        fn on_terminal(&mut self, _id: crate::engine::RequestId, _at: f64, _: TerminalStatus) {}
    }

    #[test]
    fn a_served_run_refuses_an_unprepared_aic_spec_too() {
        let serve = |spec: &ReplaySpec| {
            let outputs = external::ServeOutputs::default();
            external::serve(
                spec,
                &mut Closed,
                Box::new(Deaf),
                &AtomicBool::new(false),
                outputs,
            )
        };
        serve(&spec(false)).expect("without AIC a closed feed ends at once");
        assert_refused(serve(&spec(true)));
    }
}
