//! The requests of a run, as both topologies hold them: released from the driver, each
//! request's origin while it is in flight, its tokens counted, its end reported back to the
//! driver, and the dead-end error that names a request no engine can ever schedule.
//!
//! INTERFACE
//! - [`Requests`]: release ([`Requests::release`], through the serving front's delay when a
//!   calibration gives one), token counts, ends, progress, dead ends.
//! - [`ReleasedRequest`]: a released turn recorded as an arrival, with its [`RouteHints`].
//! - [`RouteHints`]: what a router needs of a request beyond its prompt.

use std::collections::VecDeque;
use std::sync::Arc;

use super::collector_front::CollectorFront;
use super::driver::{Driver, Terminal};
use super::event_loop::ProgressPoint;
use super::pool::Pool;
use super::scaling::Traffic;
use crate::config::ArrivalMode;
use crate::engine::kv::FastMap;
use crate::engine::RequestId;
use crate::error::Error;
use crate::router::RouteInput;
use crate::tokens::TokenSeq;
use crate::workload::Turn;

/// Where a request came from, to report its terminal state back to the driver.
#[derive(Clone, Copy, Debug)]
pub(super) struct RequestOrigin {
    pub(super) session: usize,
    pub(super) turn: usize,
    /// Tokens generated so far (cumulative prompts append them to the session's history).
    pub(super) generated: usize,
    pub(super) input_length: usize,
}

/// A released turn once recorded as an arrival: what a topology needs to route it.
pub(super) struct ReleasedRequest {
    pub(super) id: RequestId,
    /// When the request arrived (its latencies count from here).
    pub(super) arrival_ms: f64,
    pub(super) prompt: TokenSeq,
    pub(super) max_output_tokens: usize,
    pub(super) hints: RouteHints,
}

/// The requests of a run: the driver that releases them, where each request in flight came
/// from, and how many have not ended yet. Request ids are release order. Nothing is kept of a
/// request once it ended, so memory follows the requests in flight, not the run's length.
pub(super) struct Requests {
    driver: Driver,
    /// The origin of every request in flight (looked up for every pass's tokens: dense ids,
    /// hashed by multiplication rather than SipHash).
    origins: FastMap<RequestId, RequestOrigin>,
    /// The id the next released request takes.
    next_id: RequestId,
    /// Requests that ended (completed or not).
    ended: usize,
    /// The serving front's latency: a released request is routed this many milliseconds after
    /// its arrival (0: at once, as the reference does).
    front_delay_ms: f64,
    /// Requests released (their arrival recorded) and not routed yet, with the time they are
    /// due; arrivals never go back in time and the delay is one constant, so due times ascend.
    front: VecDeque<(f64, ReleasedRequest)>,
}

impl Requests {
    /// The error for a run where nothing can happen any more: `run` names the replay
    /// ("offline replay", "offline disagg replay"), `pools` the pools to ask, each with the
    /// word that names its workers ("worker", "prefill worker", ...). Names the request that
    /// can never be scheduled when an engine can tell; otherwise adds `hint`, if any.
    pub(super) fn dead_end(&self, run: &str, pools: &[(&str, &Pool)], hint: Option<&str>) -> Error {
        let mut message = format!(
            "{run} reached a dead end with {} in-flight requests remaining",
            self.origins.len()
        );
        let blocked = pools.iter().find_map(|(workers, pool)| {
            pool.blocked_request()
                .map(|(worker, rank, id)| (*workers, worker, rank, id))
        });
        match (blocked, hint) {
            (Some((workers, worker, rank, id)), _) => {
                let origin = self.origin(id);
                message.push_str(&format!(
                    ": the request of session {} turn {} ({} prompt tokens) can never be \
                     scheduled on {workers} {worker} (dp rank {rank}); its prompt and output \
                     reservation do not fit the KV cache",
                    self.driver.session_id(origin.session),
                    origin.turn,
                    origin.input_length,
                ));
            }
            (None, Some(hint)) => {
                message.push(' ');
                message.push_str(hint);
            }
            (None, None) => {}
        }
        Error::runtime(message)
    }

    pub(super) fn new(driver: Driver, front_delay_ms: f64) -> Self {
        Self {
            origins: FastMap::default(),
            driver,
            next_id: 0,
            ended: 0,
            front_delay_ms,
            front: VecDeque::new(),
        }
    }

    /// Some request can be released at or before `now_ms` (a turn the driver has ready, or a
    /// request through the serving front).
    pub(super) fn has_ready(&self, now_ms: f64) -> bool {
        self.driver.has_ready(now_ms) || self.front.front().is_some_and(|(due, _)| *due <= now_ms)
    }

    /// When the next request can be released, if any is waiting.
    pub(super) fn next_ready_ms(&self) -> Option<f64> {
        let front = self.front.front().map(|(due, _)| *due);
        match (self.driver.next_ready_ms(), front) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Where the run is at `now_ms`, for a progress display.
    pub(super) fn progress(&self, now_ms: f64) -> ProgressPoint {
        ProgressPoint {
            model_time_ms: now_ms,
            ended_requests: self.ended,
            total_requests: self.driver.total_turns(),
        }
    }

    pub(super) fn driver(&self) -> &Driver {
        &self.driver
    }

    /// Requests released and not ended yet.
    pub(super) fn in_flight(&self) -> usize {
        self.origins.len()
    }

    pub(super) fn driver_mut(&mut self) -> &mut Driver {
        &mut self.driver
    }

    /// Request `id` was released and has not ended.
    pub(super) fn is_in_flight(&self, id: RequestId) -> bool {
        self.origins.contains_key(&id)
    }

    /// Where request `id`, in flight, came from.
    pub(super) fn origin(&self, id: RequestId) -> RequestOrigin {
        self.origins[&id]
    }

    /// The next request to route at `now_ms`: without a front delay, the next turn ready (see
    /// [`Requests::record`]); with one, every ready turn is recorded now and waits in the
    /// front, and the first request whose delay has passed since its arrival, if any, is given.
    pub(super) fn release(
        &mut self,
        now_ms: f64,
        arrivals: ArrivalMode,
        collector: &mut CollectorFront,
        mut traffic: Option<&mut Traffic>,
    ) -> Option<ReleasedRequest> {
        if self.front_delay_ms <= 0.0 {
            return self.record(now_ms, arrivals, collector, traffic);
        }
        while let Some(request) = self.record(now_ms, arrivals, collector, traffic.as_deref_mut()) {
            let due_ms = request.arrival_ms + self.front_delay_ms;
            self.front.push_back((due_ms, request));
        }
        if self.front.front().is_some_and(|(due, _)| *due <= now_ms) {
            self.front.pop_front().map(|(_, request)| request)
        } else {
            None
        }
    }

    /// Takes the next turn ready by `now_ms` from the driver and records it as the next request:
    /// its arrival in the collector (at the release time in closed loop, at its scheduled time
    /// in open loop), its origin, one more request in flight, and, when a planner runs, the
    /// arrival in its traffic window.
    fn record(
        &mut self,
        now_ms: f64,
        arrivals: ArrivalMode,
        collector: &mut CollectorFront,
        traffic: Option<&mut Traffic>,
    ) -> Option<ReleasedRequest> {
        let release = self.driver.pop_ready(now_ms)?;
        let closed_loop = matches!(arrivals, ArrivalMode::Concurrency { .. });
        let id: RequestId = self.next_id;
        self.next_id += 1;
        let max_output_tokens = release.turn.max_output_tokens;
        let arrival_ms = if closed_loop {
            now_ms
        } else {
            release.ready_at_ms
        };
        collector.on_arrival(
            id,
            arrival_ms,
            release.prompt.len(),
            max_output_tokens,
            Some((release.session_id, release.turn_index)),
        );
        self.origins.insert(
            id,
            RequestOrigin {
                session: release.session_index,
                turn: release.turn_index,
                generated: 0,
                input_length: release.prompt.len(),
            },
        );
        if let Some(traffic) = traffic {
            traffic.on_release(id, arrival_ms, release.prompt.len());
        }
        Some(ReleasedRequest {
            id,
            arrival_ms,
            hints: RouteHints::of(release.turn, arrival_ms),
            prompt: release.prompt,
            max_output_tokens,
        })
    }

    /// Whether a caller must report every request's tokens with [`Requests::on_tokens`]
    /// (`first_tokens`: it wants to know which are a request's first; the driver may want the
    /// counts too).
    pub(super) fn counts_tokens(&self, first_tokens: bool) -> bool {
        first_tokens || self.driver.reads_output_counts()
    }

    /// Request `id` produced `count` more tokens. Whether it had produced none before (or is
    /// not in flight): only then can these be its first tokens. (Needed only where
    /// [`Requests::counts_tokens`].)
    pub(super) fn on_tokens(&mut self, id: RequestId, count: usize) -> bool {
        match self.origins.get_mut(&id) {
            Some(origin) => {
                let first = origin.generated == 0;
                origin.generated += count;
                first
            }
            None => true,
        }
    }

    /// Request `id` is in flight and has produced tokens (reported with
    /// [`Requests::on_tokens`]).
    pub(super) fn has_generated(&self, id: RequestId) -> bool {
        self.origins
            .get(&id)
            .is_some_and(|origin| origin.generated > 0)
    }

    /// Request `id` ended at `now_ms`: its session moves on.
    pub(super) fn on_ended(&mut self, id: RequestId, now_ms: f64, completed: bool) {
        let origin = self
            .origins
            .remove(&id)
            .expect("a request ends once, while in flight");
        self.ended += 1;
        let how = Terminal {
            request_id: id,
            output_tokens: origin.generated,
            completed,
        };
        self.driver
            .on_terminal(origin.session, origin.turn, now_ms, how);
    }
}

/// What the KV router needs of a released turn beyond the engine request.
#[derive(Clone, Debug)]
pub(super) struct RouteHints {
    pub(super) arrival_ms: f64,
    pub(super) priority: i32,
    pub(super) strict_priority: u32,
    pub(super) policy_class: Option<Arc<str>>,
}

impl RouteHints {
    /// What a router sees of request `id` with these hints, deciding at `now_ms` for a pool of
    /// `block_size`-token blocks.
    pub(super) fn route_input<'a>(
        &'a self,
        id: RequestId,
        prompt: &'a TokenSeq,
        block_size: usize,
        now_ms: f64,
    ) -> RouteInput<'a> {
        RouteInput {
            id,
            prompt,
            block_size,
            arrival_ms: self.arrival_ms,
            now_ms,
            priority: self.priority,
            strict_priority: self.strict_priority,
            policy_class: self.policy_class.as_deref(),
        }
    }

    pub(super) fn of(turn: &Turn, arrival_ms: f64) -> Self {
        Self {
            arrival_ms,
            priority: turn.priority,
            strict_priority: turn.strict_priority,
            policy_class: turn.policy_class.clone(),
        }
    }
}
