//! The planner's side of the loop: scaling ticks, the metrics and traffic the policy sees, and
//! the worker-count accounting both topologies share.
//!
//! INTERFACE
//! - [`FpmBuffer`]: the latest forward-pass metrics per (worker, rank) since the last tick;
//!   an active rank silent for a second gets an all-zero entry (its publish clock moves on in
//!   whole seconds); activation starts a worker's clock, so a fresh worker has no entry for
//!   its first second; entries of workers no longer active are dropped at each tick.
//! - [`Traffic`]: the traffic of the window since the last tick (released requests, shapes and
//!   latencies of completed ones, accepted tokens per decode forward).
//! - [`Scaling`]: the policy and its tick: [`Scaling::start`] seeds the first tick after the
//!   loop settled time 0; the topology calls [`Scaling::due`] once everything else at the
//!   current time has settled, builds the snapshot, and [`Scaling::decide`] calls the policy
//!   and re-arms the tick (only to a finite time later than now); [`Scaling::take_outcome`]
//!   gives what the policy did at the end of the run.
//!
//! - [`Scaling::next_event_ms`]: the tick as an event of the loop. Ticks alone never keep a
//!   run alive: once nothing else is scheduled (no pass, transfer, arrival or starting
//!   worker), a tick is an event only while every request in flight waits in a router queue
//!   for a worker to join, the one thing a planner can bring; [`Scaling::stop`] ends the ticks
//!   when one brought none.
//!
//! Ticks sort after every other event of their time; a tick that finds the workload done is
//! dropped without a call (the loop ends).

use std::collections::{BTreeMap, HashMap};

use crate::engine::fpm::ForwardPassMetrics;
use crate::engine::{PassEvent, RequestId};
use crate::error::Result;
use crate::planner::{
    PlannerOutcome, ScalingDecision, ScalingEvent, ScalingPolicy, ScalingSnapshot, TrafficStats,
};

/// The dead end's explanation when every request in flight waits in a router queue for a
/// worker and the planner's last tick brought none.
pub(super) const NO_WORKER_JOINED: &str = "(every request left waits in the router queue for a \
     worker to join, and the planner's last scaling tick added none)";

/// Idle ranks publish an all-zero metric once per this many ms.
const IDLE_FPM_INTERVAL_MS: f64 = 1000.0;

/// The latest metrics per (worker, rank) since the last tick.
#[derive(Debug, Default)]
pub(super) struct FpmBuffer {
    latest: BTreeMap<(usize, u32), ForwardPassMetrics>,
    last_publish_ms: BTreeMap<(usize, u32), f64>,
}

impl FpmBuffer {
    /// `worker` starts serving at `now_ms`: its ranks' publish clocks start (if not running).
    pub(super) fn activate(&mut self, worker: usize, dp_size: usize, now_ms: f64) {
        for rank in 0..dp_size.max(1) as u32 {
            self.last_publish_ms.entry((worker, rank)).or_insert(now_ms);
        }
    }

    pub(super) fn insert(
        &mut self,
        worker: usize,
        rank: u32,
        fpm: ForwardPassMetrics,
        now_ms: f64,
    ) {
        self.latest.insert((worker, rank), fpm);
        self.last_publish_ms.insert((worker, rank), now_ms);
    }

    /// Drops workers not in `active` (ascending), then gives every active rank silent for a
    /// second an all-zero metric.
    pub(super) fn emit_idle_due(&mut self, active: &[usize], dp_size: usize, now_ms: f64) {
        let dp_size = dp_size.max(1) as u32;
        let keep =
            |(worker, rank): &(usize, u32)| *rank < dp_size && active.binary_search(worker).is_ok();
        self.latest.retain(|key, _| keep(key));
        self.last_publish_ms.retain(|key, _| keep(key));
        for &worker in active {
            for rank in 0..dp_size {
                let last = self.last_publish_ms.entry((worker, rank)).or_insert(now_ms);
                let elapsed = now_ms - *last;
                if elapsed >= IDLE_FPM_INTERVAL_MS {
                    *last += (elapsed / IDLE_FPM_INTERVAL_MS).floor() * IDLE_FPM_INTERVAL_MS;
                    self.latest
                        .insert((worker, rank), ForwardPassMetrics::default());
                }
            }
        }
    }

    /// The buffered metrics, by (worker, rank); the buffer is left empty.
    pub(super) fn take(&mut self) -> Vec<(usize, u32, ForwardPassMetrics)> {
        std::mem::take(&mut self.latest)
            .into_iter()
            .map(|((worker, rank), fpm)| (worker, rank, fpm))
            .collect()
    }
}

/// A released request's progress, for its latencies.
#[derive(Clone, Copy, Debug)]
struct Progress {
    arrival_ms: f64,
    input_tokens: usize,
    first_token_ms: Option<f64>,
    last_token_ms: f64,
    output_tokens: usize,
}

/// Traffic of the current window.
#[derive(Debug, Default)]
pub(super) struct Traffic {
    window_start_ms: f64,
    released: usize,
    total_isl: usize,
    total_osl: usize,
    shape_count: usize,
    total_ttft_ms: f64,
    ttft_count: usize,
    total_itl_ms: f64,
    itl_count: usize,
    accepted_tokens: usize,
    decode_forwards: usize,
    /// Sum of overlap / prompt blocks over the KV router's placements, and their count.
    total_hit_rate: f64,
    hit_rate_count: usize,
    in_flight: HashMap<RequestId, Progress>,
}

impl Traffic {
    pub(super) fn on_release(&mut self, id: RequestId, arrival_ms: f64, input_tokens: usize) {
        self.released += 1;
        self.in_flight.insert(
            id,
            Progress {
                arrival_ms,
                input_tokens,
                first_token_ms: None,
                last_token_ms: arrival_ms,
                output_tokens: 0,
            },
        );
    }

    /// The KV router placed a request with `overlap_blocks` of its `isl_blocks` prompt blocks
    /// (rounded up) cached on its target (in disagg only the prefill router's placements
    /// count; a request's decode placement would count it twice).
    pub(super) fn on_placement(&mut self, overlap_blocks: u32, isl_blocks: usize) {
        if isl_blocks == 0 {
            return;
        }
        self.total_hit_rate += f64::from(overlap_blocks) / isl_blocks as f64;
        self.hit_rate_count += 1;
    }

    /// The end-of-pass events of one decode (or aggregated) pass at `now_ms`.
    pub(super) fn on_pass_end(&mut self, events: &[PassEvent], now_ms: f64) {
        let (mut tokens, mut forwards) = (0, 0);
        for event in events {
            if let PassEvent::Tokens { id, count } = *event {
                tokens += count;
                forwards += 1;
                if let Some(progress) = self.in_flight.get_mut(&id) {
                    progress.first_token_ms.get_or_insert(now_ms);
                    progress.last_token_ms = now_ms;
                    progress.output_tokens += count;
                }
            }
        }
        if tokens > 0 && forwards > 0 {
            self.accepted_tokens += tokens;
            self.decode_forwards += forwards;
        }
    }

    /// Request `id` ended; a completed one adds its shape and latencies to the window.
    pub(super) fn on_end(&mut self, id: RequestId, completed: bool) {
        let Some(progress) = self.in_flight.remove(&id) else {
            return;
        };
        if !completed {
            return;
        }
        self.total_isl += progress.input_tokens;
        self.total_osl += progress.output_tokens;
        self.shape_count += 1;
        if let Some(first) = progress.first_token_ms {
            let ttft = first - progress.arrival_ms;
            if ttft > 0.0 {
                self.total_ttft_ms += ttft;
                self.ttft_count += 1;
            }
            if progress.output_tokens > 1 {
                let itl = (progress.last_token_ms - first) / (progress.output_tokens - 1) as f64;
                if itl.is_finite() && itl >= 0.0 {
                    self.total_itl_ms += itl;
                    self.itl_count += 1;
                }
            }
        }
    }

    /// The window's statistics; a new window starts at `now_ms`.
    fn drain(&mut self, now_ms: f64) -> TrafficStats {
        let mean = |total: f64, count: usize| {
            if count > 0 {
                total / count as f64
            } else {
                0.0
            }
        };
        let stats = TrafficStats {
            duration_s: (now_ms - self.window_start_ms) / 1000.0,
            num_req: self.released,
            avg_isl: mean(self.total_isl as f64, self.shape_count),
            avg_osl: mean(self.total_osl as f64, self.shape_count),
            shape_count: self.shape_count,
            avg_ttft_ms: mean(self.total_ttft_ms, self.ttft_count),
            ttft_count: self.ttft_count,
            avg_itl_ms: mean(self.total_itl_ms, self.itl_count),
            itl_count: self.itl_count,
            // Round robin places nothing through the KV router: 0.0 over 0 placements.
            avg_kv_hit_rate: mean(self.total_hit_rate, self.hit_rate_count),
            hit_rate_count: self.hit_rate_count,
            avg_accept_length: (self.decode_forwards > 0)
                .then(|| self.accepted_tokens as f64 / self.decode_forwards as f64),
            accept_length_forward_count: self.decode_forwards,
        };
        let in_flight = std::mem::take(&mut self.in_flight);
        *self = Traffic {
            window_start_ms: now_ms,
            in_flight,
            ..Traffic::default()
        };
        stats
    }
}

/// The policy driving a run and its tick.
pub(super) struct Scaling<'p> {
    policy: &'p mut dyn ScalingPolicy,
    /// Prefill and decode pools (else one pool of aggregated workers).
    disaggregated: bool,
    next_tick_ms: Option<f64>,
    pub(super) traffic: Traffic,
    ticks: u64,
    /// Every change of a pool's non-draining worker count the policy asked for.
    events: Vec<ScalingEvent>,
}

impl<'p> Scaling<'p> {
    pub(super) fn new(policy: &'p mut dyn ScalingPolicy, disaggregated: bool) -> Self {
        Self {
            policy,
            disaggregated,
            next_tick_ms: None,
            traffic: Traffic::default(),
            ticks: 0,
            events: Vec::new(),
        }
    }

    /// What the policy did: the changes it asked for, as scaling events, and its tick count.
    pub(super) fn take_outcome(&mut self) -> PlannerOutcome {
        PlannerOutcome {
            events: std::mem::take(&mut self.events),
            ticks: self.ticks,
        }
    }

    /// Seeds the first tick, once time 0 has settled.
    pub(super) fn start(&mut self, now_ms: f64) -> Result<()> {
        let first = self.policy.initial_tick_ms()?;
        self.next_tick_ms = first.is_finite().then_some(first.max(now_ms));
        Ok(())
    }

    /// The next event of the loop given the earliest of every other (`others`), with
    /// `in_flight` requests released and not ended, `queued` of them held in router queues.
    ///
    /// Once nothing else is scheduled, a request a worker holds can never end: the worker is
    /// stalled (it would otherwise have a pass in flight), nothing will reach it but requests
    /// the planner cannot create, and the planner moves no queued work; the run is at a dead
    /// end, whatever the ticks would decide. Only requests waiting in a router queue for a
    /// worker to join (a pool with no eligible worker) can still be served, by a worker the
    /// planner adds; nothing in flight at all means the driver waits for what cannot come.
    pub(super) fn next_event_ms(
        &self,
        others: Option<f64>,
        in_flight: usize,
        queued: usize,
    ) -> Option<f64> {
        match others {
            Some(_) => super::event_queue::earliest(others, self.next_tick_ms),
            None if in_flight > 0 && queued == in_flight => self.next_tick_ms,
            None => None,
        }
    }

    /// No more ticks: a tick taken with nothing else scheduled and requests waiting for a
    /// worker left it so (the policy brought no worker that could take them).
    pub(super) fn stop(&mut self) {
        self.next_tick_ms = None;
    }

    /// A tick is due at `now_ms`.
    pub(super) fn due(&self, now_ms: f64) -> bool {
        self.next_tick_ms.is_some_and(|at| at <= now_ms)
    }

    /// Calls the policy with `snapshot` (its traffic filled in here) and re-arms the tick.
    pub(super) fn decide(&mut self, mut snapshot: ScalingSnapshot) -> Result<ScalingDecision> {
        let now_ms = snapshot.now_ms;
        snapshot.traffic = self.traffic.drain(now_ms);
        self.next_tick_ms = None;
        let decision = self.policy.on_tick(&snapshot)?;
        self.ticks += 1;
        let at_s = now_ms / 1000.0;
        let mut record = |component, target: Option<usize>, current: usize| {
            if let Some(to) = target.filter(|&to| to != current) {
                self.events.push(ScalingEvent {
                    at_s,
                    component,
                    from: current,
                    to,
                });
            }
        };
        if self.disaggregated {
            record(
                "prefill",
                decision.target_prefill,
                snapshot.prefill.non_draining(),
            );
            record(
                "decode",
                decision.target_decode,
                snapshot.decode.non_draining(),
            );
        } else {
            record(
                "agg",
                decision.target_decode,
                snapshot.decode.non_draining(),
            );
        }
        self.next_tick_ms = decision
            .next_tick_ms
            .filter(|at| at.is_finite() && *at > now_ms);
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(wall_time_s: f64) -> ForwardPassMetrics {
        ForwardPassMetrics {
            wall_time_s,
            ..ForwardPassMetrics::default()
        }
    }

    #[test]
    fn latest_metric_per_rank_and_idle_zeros() {
        let mut buffer = FpmBuffer::default();
        buffer.activate(4, 2, 100.0);
        // Less than a second since activation: nothing.
        buffer.emit_idle_due(&[4], 2, 1099.0);
        assert!(buffer.take().is_empty());
        // A second: both ranks get zeros.
        buffer.emit_idle_due(&[4], 2, 1100.0);
        let taken = buffer.take();
        assert_eq!(taken.len(), 2);
        assert!(taken
            .iter()
            .all(|(w, _, f)| *w == 4 && f.wall_time_s == 0.0));
        // Rank 1 publishes; rank 0 stays silent.
        buffer.insert(4, 1, busy(0.25), 1500.0);
        buffer.insert(4, 1, busy(0.5), 1600.0);
        buffer.emit_idle_due(&[4], 2, 2100.0);
        let taken = buffer.take();
        assert_eq!(taken.len(), 2);
        assert_eq!((taken[0].1, taken[0].2.wall_time_s), (0, 0.0));
        assert_eq!((taken[1].1, taken[1].2.wall_time_s), (1, 0.5));
        // The publish clock moves in whole seconds: 2400 is only 0.3 s after 2100.
        buffer.emit_idle_due(&[4], 2, 2400.0);
        assert!(buffer.take().is_empty());
        // A worker no longer active is forgotten.
        buffer.insert(4, 0, busy(0.1), 3000.0);
        buffer.emit_idle_due(&[], 2, 3500.0);
        assert!(buffer.take().is_empty());
    }

    #[test]
    fn traffic_window_means_and_counts() {
        let mut traffic = Traffic::default();
        traffic.on_release(0, 0.0, 100);
        traffic.on_release(1, 10.0, 300);
        let tokens = |id, count| PassEvent::Tokens { id, count };
        traffic.on_pass_end(&[tokens(0, 1), tokens(1, 1)], 50.0);
        traffic.on_pass_end(&[tokens(0, 2)], 70.0);
        traffic.on_end(0, true);
        traffic.on_end(1, false);
        let stats = traffic.drain(1000.0);
        assert_eq!(stats.duration_s, 1.0);
        assert_eq!(stats.num_req, 2);
        // Only the completed request has a shape: 3 tokens, TTFT 50, ITL (70-50)/2.
        assert_eq!(
            (stats.shape_count, stats.avg_isl, stats.avg_osl),
            (1, 100.0, 3.0)
        );
        assert_eq!((stats.ttft_count, stats.avg_ttft_ms), (1, 50.0));
        assert_eq!((stats.itl_count, stats.avg_itl_ms), (1, 10.0));
        assert_eq!(stats.avg_accept_length, Some(4.0 / 3.0));
        assert_eq!(stats.accept_length_forward_count, 3);
        let next = traffic.drain(3000.0);
        assert_eq!((next.duration_s, next.num_req), (2.0, 0));
        assert_eq!(next.avg_accept_length, None);
    }
}
