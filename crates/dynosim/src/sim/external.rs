//! Runs fed from outside while they go on: a server's requests enter the event loop when its
//! clients send them, leave it when their clients go away, and each token goes back out as
//! the loop emits it.
//!
//! The core still holds no clock and does no I/O: the caller's [`RequestFeed`] decides when
//! model time is due (a server maps it to the wall clock), hands over what arrived meanwhile,
//! and a [`RequestObserver`] it gives the collector hears of each request's admissions,
//! tokens and end on the simulating thread.
//!
//! INTERFACE
//! - [`ExternalRequest`]: one request as a server received it: its prompt as a trace's hash
//!   ids (one per block of `block_size` tokens, the last block possibly partial), its output
//!   length, its session name.
//! - [`FeedEvent`]: a request, or the cancellation of one in flight (its client went away:
//!   the request leaves its engine and its KV is released, at the first moment its worker is
//!   between passes).
//! - [`RequestFeed`]: the caller's side: `wait` (until a model time is due or something
//!   arrives), `take` (what arrived, in order: the n-th request taken, from 0, becomes request
//!   id n), `is_closed` (no more requests: the run ends once every request ended), and
//!   `on_settled` (what the deployment holds after each batch of events, for a server's
//!   gauges).
//! - [`serve`]: runs the spec's aggregated deployment (round robin or KV router; no planner)
//!   fed by a feed, until it is closed and drained or `cancel` is set; returns the
//!   [`Simulated`] run for the same report a replay writes.

use std::sync::atomic::{AtomicBool, Ordering};

use super::aggregated::Aggregated;
use super::collector_front::{CollectorFront, CollectorThread};
use super::driver::Driver;
use super::event_loop::Topology;
use super::Simulated;
use crate::config::{ArrivalMode, Deployment, PoolSpec, ReplaySpec};
use crate::engine::{RankLoad, RequestId};
use crate::error::{Error, Result};
use crate::report::{RecordSink, RequestObserver};
use crate::workload::{Prompt, Session, SessionId, Turn};

/// One request as a server received it.
#[derive(Clone, Debug)]
pub struct ExternalRequest {
    /// The client's session name, or a number for requests without one.
    pub session: SessionId,
    /// The prompt's blocks as a trace's hash ids: `input_length.div_ceil(block_size)` of
    /// them, equal ids for equal prefixes through a block's end.
    pub hash_ids: Vec<u32>,
    pub block_size: u32,
    /// Prompt tokens (at least 1, at most `hash_ids.len() * block_size`).
    pub input_length: usize,
    /// Output tokens the engine generates.
    pub max_output_tokens: usize,
}

/// What a feed hands to the run.
#[derive(Clone, Debug)]
pub enum FeedEvent {
    Request(ExternalRequest),
    /// The client of request `id` went away.
    Cancel(RequestId),
}

/// The caller's side of a run fed from outside (see the module doc).
pub trait RequestFeed {
    /// Returns once model time `next_ms` is due (`None`: nothing is scheduled, wait for an
    /// arrival), something arrived, the feed closed, or `cancel` was set; gives the model time
    /// now (`next_ms` itself when it is the reason).
    fn wait(&mut self, next_ms: Option<f64>, cancel: &AtomicBool) -> f64;
    /// Moves what arrived since the last call into `into`, in arrival order.
    fn take(&mut self, into: &mut Vec<FeedEvent>);
    /// No request will arrive any more.
    fn is_closed(&self) -> bool;
    /// The deployment after the events at `at_ms`: what its ranks hold together (a pass's
    /// requests count as running until it ends, those finishing with it included).
    fn on_settled(&mut self, at_ms: f64, load: RankLoad);
}

/// What a fed run records besides what the observer hears.
#[derive(Default)]
pub struct ServeOutputs {
    /// Per-request records, handed over as they settle.
    pub records: Option<Box<dyn RecordSink>>,
    /// Record the HTML report's time series.
    pub timeseries: bool,
}

/// Runs `spec`'s aggregated deployment on requests from `feed`, telling `observer` of every
/// request's progress; ends when the feed is closed and every request ended, or when `cancel`
/// is set (the report then covers what ended). Disaggregated deployments and planners are
/// refused (usage errors), and so is a spec whose AIC tables were not built (a runtime error,
/// as for every run).
pub fn serve(
    spec: &ReplaySpec,
    feed: &mut dyn RequestFeed,
    observer: Box<dyn RequestObserver>,
    cancel: &AtomicBool,
    outputs: ServeOutputs,
) -> Result<Simulated> {
    // Requests arrive when they arrive: an open loop, whatever arrival mode the spec was
    // built with (a spec always carries one).
    let open_loop;
    let spec = if matches!(spec.arrivals, ArrivalMode::Timestamps { speedup } if speedup == 1.0) {
        spec
    } else {
        let mut copy = spec.clone();
        copy.arrivals = ArrivalMode::Timestamps { speedup: 1.0 };
        open_loop = copy;
        &open_loop
    };
    let pool = check_servable(spec)?;
    super::refuse_unprepared(spec)?;
    let mut collector = super::collector_for(spec, outputs.timeseries, outputs.records);
    collector.observe_with(observer);
    // The observer is called where the collector runs: on this thread.
    let collector = CollectorFront::start(
        collector,
        spec.capture_requests,
        CollectorThread::SameThread,
    );
    let mut sim = Aggregated::new(spec, pool, Driver::external(), None, collector);
    sim.feed_externally();
    let mut arrived = Vec::new();
    sim.settle()?;
    loop {
        let now_ms = sim.progress().model_time_ms;
        feed.on_settled(now_ms, sim.load());
        if cancel.load(Ordering::SeqCst) || (feed.is_closed() && sim.is_done()) {
            break;
        }
        let next_ms = sim.next_event_ms();
        let due_ms = feed.wait(next_ms, cancel).max(now_ms);
        sim.advance_to(due_ms);
        feed.take(&mut arrived);
        for event in arrived.drain(..) {
            match event {
                FeedEvent::Request(request) => {
                    sim.push_external(session_of(request));
                }
                FeedEvent::Cancel(id) => sim.cancel(id),
            }
        }
        sim.settle()?;
    }
    let planner = sim.planner_outcome();
    let (collector, facts) = sim.finish()?;
    Ok(Simulated {
        collector,
        facts,
        planner,
    })
}

/// A received request as a session of one turn.
fn session_of(request: ExternalRequest) -> Session {
    let capacity = request.hash_ids.len() * request.block_size as usize;
    let turn = Turn {
        input_length: request.input_length.clamp(1, capacity.max(1)),
        max_output_tokens: request.max_output_tokens,
        delay_ms: 0.0,
        prompt: Prompt::hash_ids(request.hash_ids, request.block_size),
        priority: 0,
        strict_priority: 0,
        policy_class: None,
    };
    Session {
        id: request.session,
        first_timestamp_ms: None,
        turns: vec![turn].into(),
    }
}

/// Whether `spec`'s deployment can be served: aggregated workers without a planner; gives
/// their pool. Callers that set up more (a server binding its port) check it first; the run
/// checks it again.
pub fn check_servable(spec: &ReplaySpec) -> Result<&PoolSpec> {
    let Deployment::Aggregated(pool) = &spec.deployment else {
        return Err(Error::usage(
            "serving a disaggregated deployment is not supported: give aggregated workers \
             (--extra-engine-args, --num-workers)",
        ));
    };
    if spec.planner.is_some() {
        return Err(Error::usage(
            "serving with a planner is not supported: leave out --planner-config",
        ));
    }
    Ok(pool)
}
