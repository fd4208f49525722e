//! Pieces shared by the topologies: the timed event queue (with the reference's tie-break),
//! the requests of a run (released by the driver, where each came from, how many are in
//! flight), and building a KV router for a pool.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::collector_front::CollectorFront;
use super::driver::{Driver, Terminal};
use super::event_loop::ProgressPoint;
use super::pool::Pool;
use super::scaling::Traffic;
use crate::config::{ArrivalMode, EngineArgs, PoolSpec, ReplaySpec, RouterConfig, RouterMode};
use crate::engine::kv::FastMap;
use crate::engine::RequestId;
use crate::error::Error;
use crate::router::kv::{KvRouter, Targets};
use crate::router::round_robin::RoundRobin;
use crate::router::{RouteInput, Router};
use crate::tokens::TokenSeq;
use crate::workload::Turn;

/// Something scheduled to happen at `at_ms`; equal times keep scheduling order.
#[derive(Clone, Copy, Debug)]
struct Timed<T> {
    at_ms: f64,
    seq: u64,
    what: T,
}

impl<T> PartialEq for Timed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T> Eq for Timed<T> {}
impl<T> PartialOrd for Timed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Timed<T> {
    /// Reversed for a min-heap: earliest time first, then scheduling order.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at_ms
            .total_cmp(&self.at_ms)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// Future events in time order, ties in the order they were scheduled.
#[derive(Debug)]
pub(super) struct EventQueue<T> {
    heap: BinaryHeap<Timed<T>>,
    next_seq: u64,
}

impl<T: Copy> EventQueue<T> {
    pub(super) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }

    pub(super) fn push(&mut self, at_ms: f64, what: T) {
        self.heap.push(Timed {
            at_ms,
            seq: self.next_seq,
            what,
        });
        self.next_seq += 1;
    }

    /// The next event: its time and what it is.
    pub(super) fn peek(&self) -> Option<(f64, T)> {
        self.heap.peek().map(|timed| (timed.at_ms, timed.what))
    }

    /// Pops the next event if it happens at or before `now_ms` and `accept` takes it.
    pub(super) fn pop_due_if(&mut self, now_ms: f64, accept: impl Fn(&T) -> bool) -> Option<T> {
        let next = self.heap.peek()?;
        if next.at_ms > now_ms || !accept(&next.what) {
            return None;
        }
        self.heap.pop().map(|timed| timed.what)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// At most one future event per slot (a worker's pass completion), in time order, ties in
/// the order they were scheduled. A handful of workers beat a heap when scanned: a push is one
/// store (and one comparison with the earliest), a pop one scan of integer keys.
///
/// Unlike an [`EventQueue`], the caller says where each event was scheduled — the model
/// time it was scheduled at and its rank among the events scheduled at that time — rather
/// than the queue counting pushes: an event scheduled ahead of the loop (a pass started by
/// running ahead) then still sorts where the loop would have scheduled it. Pushed in
/// nondecreasing (time, rank) order, the queue pops exactly as an [`EventQueue`] does.
#[derive(Debug, Default)]
pub(super) struct SlotQueue {
    /// Per slot: its event's position in the order, [`ordered_bits`] of its time and of the
    /// time it was scheduled at, then its rank ((`u128::MAX`, _): no event).
    keys: Vec<(u128, u64)>,
    /// Per slot: when its event happens.
    times: Vec<f64>,
    /// The slot with the earliest event.
    earliest: Option<usize>,
}

const NO_EVENT: (u128, u64) = (u128::MAX, u64::MAX);

/// A time's bits mapped so that unsigned order is `f64::total_cmp`'s.
fn ordered_bits(at_ms: f64) -> u64 {
    let bits = at_ms.to_bits();
    // Negative times: flip every bit; others: set the sign bit.
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

impl SlotQueue {
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// Schedules `slot`'s event at `at_ms`, as the `rank`-th event scheduled at model time
    /// `scheduled_ms`; the slot must have none.
    pub(super) fn push(&mut self, at_ms: f64, scheduled_ms: f64, rank: u64, slot: usize) {
        if slot >= self.keys.len() {
            self.keys.resize(slot + 1, NO_EVENT);
            self.times.resize(slot + 1, 0.0);
        }
        debug_assert_eq!(self.keys[slot], NO_EVENT, "one event per slot");
        let key = (
            u128::from(ordered_bits(at_ms)) << 64 | u128::from(ordered_bits(scheduled_ms)),
            rank,
        );
        self.keys[slot] = key;
        self.times[slot] = at_ms;
        if self
            .earliest
            .is_none_or(|earliest| key < self.keys[earliest])
        {
            self.earliest = Some(slot);
        }
    }

    /// The next event: its time and slot.
    pub(super) fn peek(&self) -> Option<(f64, usize)> {
        self.earliest.map(|slot| (self.times[slot], slot))
    }

    /// Pops the next event if it happens at or before `now_ms`.
    #[inline]
    pub(super) fn pop_due(&mut self, now_ms: f64) -> Option<usize> {
        let (at_ms, slot) = self.peek()?;
        if at_ms > now_ms {
            return None;
        }
        self.keys[slot] = NO_EVENT;
        let mut earliest = None;
        let mut earliest_key = NO_EVENT;
        for (slot, &key) in self.keys.iter().enumerate() {
            if key < earliest_key {
                earliest_key = key;
                earliest = Some(slot);
            }
        }
        self.earliest = earliest;
        Some(slot)
    }
}

/// The earlier of two optional times (`f64::min` of those present, in this order).
pub(super) fn earliest(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

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

    pub(super) fn new(driver: Driver) -> Self {
        Self {
            origins: FastMap::default(),
            driver,
            next_id: 0,
            ended: 0,
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

    /// Takes the next turn ready by `now_ms` from the driver and records it as the next request:
    /// its arrival in the collector (at the release time in closed loop, at its scheduled time
    /// in open loop), its origin, one more request in flight, and, when a planner runs, the
    /// arrival in its traffic window.
    pub(super) fn release(
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

/// The router of `pool`, whose workers have `ranks` schedulers each: round robin, or a KV
/// router over all its schedulers (see [`kv_router`], `adjust` included) as the spec's router
/// mode says.
pub(super) fn pool_router(
    spec: &ReplaySpec,
    pool: &PoolSpec,
    ranks: usize,
    adjust: impl FnOnce(&mut RouterConfig),
) -> Router {
    match spec.router_mode {
        RouterMode::RoundRobin => Router::RoundRobin(RoundRobin::new(pool.workers, ranks)),
        RouterMode::KvRouter => Router::Kv(Box::new(kv_router(
            spec.router_config.as_ref(),
            &pool.engine,
            pool.workers * ranks,
            adjust,
        ))),
    }
}

/// A KV router over `targets` schedulers running `engine`, configured from the user's router
/// config (defaults when none) with the engine's queue-policy override, then `adjust`.
fn kv_router(
    user_config: Option<&RouterConfig>,
    engine: &EngineArgs,
    targets: usize,
    adjust: impl FnOnce(&mut RouterConfig),
) -> KvRouter {
    let mut config = kv_router_config(user_config, engine);
    adjust(&mut config);
    let profile = config.policy_profile();
    let seed = config.router_seed;
    let targets = Targets {
        count: targets,
        block_size: engine.block_size.max(1),
        max_batched_tokens: engine
            .max_num_batched_tokens
            .map_or(10_000_000, |tokens| tokens as u64),
    };
    KvRouter::new(config, profile, targets, seed)
}

/// The user's router config (defaults when none) with the engine's queue-policy override.
fn kv_router_config(user_config: Option<&RouterConfig>, engine: &EngineArgs) -> RouterConfig {
    let mut config = user_config.cloned().unwrap_or_default();
    if let Some(policy) = engine.router_queue_policy {
        config.router_queue_policy = policy;
    }
    config
}

/// Whether the KV router [`kv_router`] builds from these settings (with no `adjust`) may hold
/// requests in its queue: some class has a busy threshold. Only then can a request's first
/// token or end place a queued request (with all targets eligible, as without a planner).
pub(super) fn kv_router_may_queue(user_config: Option<&RouterConfig>, engine: &EngineArgs) -> bool {
    kv_router_config(user_config, engine)
        .policy_profile()
        .classes()
        .iter()
        .any(|class| class.queues())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordered_bits_sort_times_as_total_cmp_does() {
        let times = [
            f64::NEG_INFINITY,
            -1.5,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            1.0 + f64::EPSILON,
            1e300,
            f64::INFINITY,
        ];
        for &a in &times {
            for &b in &times {
                for (sa, sb) in [(0, 1), (1, 0), (5, 5)] {
                    // Earlier time first, then lower sequence: the order the heap pops.
                    let pop_order = a.total_cmp(&b).then(sa.cmp(&sb));
                    assert_eq!(
                        (ordered_bits(a), sa).cmp(&(ordered_bits(b), sb)),
                        pop_order,
                        "{a} {b}"
                    );
                }
            }
        }
    }

    proptest! {
        /// The slot queue pops in exactly the heap's order, ties by scheduling order
        /// included, whatever the pushes (few distinct times, so that ties are common).
        #[test]
        fn slot_queue_pops_in_event_queue_order(
            steps in proptest::collection::vec((0usize..6, 0u8..4, any::<bool>()), 1..200),
        ) {
            let mut slots = SlotQueue::new();
            let mut heap = EventQueue::new();
            let mut busy = [false; 6];
            let mut now_ms = 0.0;
            let mut rank = 0;
            for (slot, delay, advance) in steps {
                if !busy[slot] {
                    let at_ms = now_ms + f64::from(delay);
                    slots.push(at_ms, now_ms, rank, slot);
                    rank += 1;
                    heap.push(at_ms, slot);
                    busy[slot] = true;
                }
                prop_assert_eq!(slots.peek(), heap.peek());
                if advance {
                    now_ms += 1.0;
                    rank = 0;
                    loop {
                        let popped = slots.pop_due(now_ms);
                        prop_assert_eq!(popped, heap.pop_due_if(now_ms, |_| true));
                        let Some(slot) = popped else { break };
                        busy[slot] = false;
                    }
                }
            }
        }
    }
}
