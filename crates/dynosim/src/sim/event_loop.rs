//! The one event loop both topologies run, and its two seams: the [`Clock`] that decides when
//! model time may advance (at once offline, on the wall clock live) and the [`RunControl`]
//! flag that ends a run early.
//!
//! INTERFACE
//! - [`Topology`]: what a deployment (aggregated workers, or prefill and decode pools) offers
//!   the loop — settle everything due now, the time of its next event, whether it is done.
//! - [`run`]: settle at time 0 (and seed a planner's first scaling tick); then, until the
//!   topology is done, the run is cancelled or the time cap is passed: find the next event,
//!   wait for it on the clock, advance, settle.
//! - [`Clock`], [`VirtualClock`]: the time seam. The core has no real clock; a caller that
//!   wants real time supplies one (the CLI's live replay does).
//! - The cancellation seam: an `AtomicBool` the caller owns ([`RunControl`] holds one to share
//!   across threads) and may set from another thread (or a signal handler's watcher); the loop
//!   reads it between event batches. A cancelled run stops where it is and its report covers
//!   what finished.
//! - The progress seam: a [`Progress`] the caller shares with a watcher thread; the loop
//!   publishes model time and ended requests into it after each batch of events (plain
//!   atomic stores; the core reads no clock: the watcher decides when to look).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

/// When model time may advance.
pub trait Clock {
    /// Returns once model time `at_ms` is due, or earlier if `cancel` is set meanwhile (a
    /// clock that notices an interruption itself sets it).
    fn wait_until(&mut self, at_ms: f64, cancel: &AtomicBool);
}

/// Virtual time: every moment is due at once.
#[derive(Clone, Copy, Debug, Default)]
pub struct VirtualClock;

impl Clock for VirtualClock {
    fn wait_until(&mut self, _at_ms: f64, _cancel: &AtomicBool) {}
}

/// The caller's handle on a run: cancel it from anywhere, the loop notices between event
/// batches. Clones share the flag.
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    cancelled: Arc<AtomicBool>,
}

impl RunControl {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the run to stop; it ends after the batch of events in progress.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// The flag itself, as the loop and the clock take it.
    pub fn flag(&self) -> &AtomicBool {
        &self.cancelled
    }
}

/// Where a run is, as the loop last published it: for a progress display on another thread.
/// Share it in an `Arc`; reads are independent atomic loads (each value is current, the three
/// together may straddle one batch of events).
#[derive(Debug, Default)]
pub struct Progress {
    model_time_ms_bits: AtomicU64,
    ended_requests: AtomicUsize,
    total_requests: AtomicUsize,
}

impl Progress {
    pub fn new() -> Self {
        Self::default()
    }

    /// Model time reached, in ms.
    pub fn model_time_ms(&self) -> f64 {
        f64::from_bits(self.model_time_ms_bits.load(Ordering::Relaxed))
    }

    /// Requests that ended (completed, rejected or failed).
    pub fn ended_requests(&self) -> usize {
        self.ended_requests.load(Ordering::Relaxed)
    }

    /// Requests the workload holds (0 until the run starts).
    pub fn total_requests(&self) -> usize {
        self.total_requests.load(Ordering::Relaxed)
    }

    fn publish(&self, point: ProgressPoint) {
        self.model_time_ms_bits
            .store(point.model_time_ms.to_bits(), Ordering::Relaxed);
        self.ended_requests
            .store(point.ended_requests, Ordering::Relaxed);
        self.total_requests
            .store(point.total_requests, Ordering::Relaxed);
    }
}

/// A topology's progress at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct ProgressPoint {
    pub(super) model_time_ms: f64,
    pub(super) ended_requests: usize,
    pub(super) total_requests: usize,
}

fn is_set(cancel: &AtomicBool) -> bool {
    cancel.load(Ordering::SeqCst)
}

/// A deployment as the loop sees it.
pub(super) trait Topology {
    /// Processes everything that happens at the current time until nothing changes.
    fn settle(&mut self) -> Result<()>;
    /// The time of the next thing that can happen, if anything can.
    fn next_event_ms(&self) -> Option<f64>;
    /// Every request has ended and nothing is left to do.
    fn is_done(&self) -> bool;
    /// Moves the current time forward to `t_ms`.
    fn advance_to(&mut self, t_ms: f64);
    /// Model time and ended requests now.
    fn progress(&self) -> ProgressPoint;
    /// The error when work remains but nothing can happen any more.
    fn dead_end(&self) -> Error;
    /// A released turn, recorded as a request, on its way to the deployment.
    type Arrival;
    /// The next turn ready now, taken from the driver and recorded as a request.
    fn take_arrival(&mut self) -> Option<Self::Arrival>;
    /// Hands a released request to the deployment: routes it (aggregated) or starts its
    /// handoff (disaggregated).
    fn admit(&mut self, arrival: Self::Arrival);
    /// Releases every turn ready now, each admitted before the next is taken (admitting one
    /// can end it at once and free a concurrency slot for the next). Whether any was.
    fn release_arrivals(&mut self) -> bool {
        let mut released = false;
        while let Some(arrival) = self.take_arrival() {
            self.admit(arrival);
            released = true;
        }
        released
    }
    /// Once time 0 has settled: seeds the first scaling tick of a planner. Whether there is
    /// one (then time 0 settles again, in case the tick is due at once).
    fn start_ticks(&mut self) -> Result<bool> {
        Ok(false)
    }
    /// With a cap on model time, the last timestamp still processed given that the next one
    /// is `next_ms`: by default the cap itself.
    fn last_ms_within_cap(&mut self, cap_ms: f64, _next_ms: f64) -> f64 {
        cap_ms
    }
}

/// Runs `topology` to the end (or to the cap, or until cancelled). Whether the run was
/// cancelled before its end.
pub(super) fn run<T: Topology>(
    topology: &mut T,
    max_sim_time_ms: Option<f64>,
    clock: &mut dyn Clock,
    cancel: &AtomicBool,
    progress: Option<&Progress>,
) -> Result<bool> {
    let publish = |topology: &T| {
        if let Some(progress) = progress {
            progress.publish(topology.progress());
        }
    };
    topology.settle()?;
    if topology.start_ticks()? {
        topology.settle()?;
    }
    publish(topology);
    while !topology.is_done() && !is_set(cancel) {
        let Some(next_ms) = topology.next_event_ms() else {
            return Err(topology.dead_end());
        };
        if let Some(cap_ms) = max_sim_time_ms {
            if next_ms > topology.last_ms_within_cap(cap_ms, next_ms) {
                break;
            }
        }
        clock.wait_until(next_ms, cancel);
        if is_set(cancel) {
            break;
        }
        topology.advance_to(next_ms);
        topology.settle()?;
        publish(topology);
    }
    Ok(is_set(cancel) && !topology.is_done())
}
