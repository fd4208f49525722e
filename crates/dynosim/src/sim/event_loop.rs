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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::common::ReleasedRequest;
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
    /// The error when work remains but nothing can happen any more.
    fn dead_end(&self) -> Error;
    /// The next turn ready now, taken from the driver and recorded as a request.
    fn take_arrival(&mut self) -> Option<ReleasedRequest>;
    /// Hands a released request to the deployment: routes it (aggregated) or starts its
    /// handoff (disaggregated).
    fn admit(&mut self, arrival: ReleasedRequest);
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

/// Runs `topology` to the end (or to the cap, or until cancelled).
pub(super) fn run(
    topology: &mut impl Topology,
    max_sim_time_ms: Option<f64>,
    clock: &mut dyn Clock,
    cancel: &AtomicBool,
) -> Result<()> {
    topology.settle()?;
    if topology.start_ticks()? {
        topology.settle()?;
    }
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
    }
    Ok(())
}
