//! A pool of workers: one engine configuration behind one router. Both topologies model their
//! workers with it (the aggregated deployment is one pool; the disaggregated one is a prefill
//! pool and a decode pool).
//!
//! INTERFACE
//! - [`Pool`]: `workers × dp_size` rank schedulers (scheduler `worker * dp_size + rank`), the
//!   router in front of them, and each worker's pass state: whether a pass is in flight, the
//!   events of that pass (applied when it ends), actions waiting for it to end, and whether
//!   the worker is stalled (its last pass could do nothing; it is not retried until it
//!   receives a request).
//! - [`Pool::start_pass`] runs one pass on all the ranks of a worker that have work (they pass
//!   together and the group ends with its slowest rank), publishing the KV events engines
//!   make visible at pass start ([`Pool::start_decode_pass`]: the same for a pass known to
//!   admit nothing); [`Pool::end_pass`] hands back the pass's events
//!   ([`Pool::end_pass_in_place`] leaves them in [`Pool::pending`]);
//!   [`Pool::apply_pass_end_kv_events`] publishes those engines make visible at pass end.
//! - The topology decides *when* passes start and what their events mean; the pool only
//!   keeps the state. [`Pool::take_ready`] answers "can this worker start a pass?" from a
//!   flag for workers nothing happened to since they were last found not ready (a pass end,
//!   a request, an activation, or a direct scheduler change through [`Pool::scheduler_mut`]
//!   sets it); [`Pool::next_woken`] walks the flagged workers in ascending id, so a
//!   per-timestamp round where nothing happened to any worker costs one bitset word.
//! - With a planner, workers come and go: each has a [`WorkerPhase`] (starting, active,
//!   draining, retired); ids grow and are never reused. [`Pool::scale_to`] applies a target
//!   (new workers start, or serve at once without a startup time; a smaller target cancels
//!   starting workers, then drains the highest active ids), [`Pool::activate_due`] brings up
//!   the workers whose startup ended, [`Pool::retire_drained`] retires draining workers with
//!   nothing left. The router hears of every change; queued requests a KV router places when
//!   a worker joins wait in [`Pool::take_placements`]. With metrics on, the pool keeps the
//!   latest forward-pass metrics per (worker, rank) ([`super::scaling::FpmBuffer`]).

use super::event_queue::EventQueue;
use super::handoff::Action;
use super::scaling::FpmBuffer;
use crate::config::EngineArgs;
use crate::engine::fpm::ForwardPassMetrics;
use crate::engine::kv::KvEvent;
use crate::engine::{EngineRequest, PassEvent, RankLoad, RankScheduler, RequestId};
use crate::error::{Error, Result};
use crate::planner::PoolWorkers;
use crate::router::kv::{Placement, PublishedKeys};
use crate::router::{RouteInput, Routed, Router};

/// Where a worker is in its life. Only active workers receive new requests; draining ones
/// finish what they hold; starting and draining ones are paid for like active ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum WorkerPhase {
    /// Added by the planner, not serving until its startup time has passed.
    Starting,
    #[default]
    Active,
    /// Leaving: out of routing, serving its queues until they are empty.
    Draining,
    /// Gone (drained, or cancelled while starting).
    Retired,
}

/// Pass state of one worker.
#[derive(Debug, Default)]
struct WorkerState {
    phase: WorkerPhase,
    /// A pass is in flight.
    busy: bool,
    /// The last pass did nothing; do not retry until the worker receives a request.
    stalled: bool,
    /// Events of the in-flight pass, applied at its completion.
    pending: Vec<PassEvent>,
    /// Actions waiting for the in-flight pass to end.
    deferred: Vec<(RequestId, Action)>,
    /// With metrics on: each rank's metrics of the pass in flight, published at its end.
    pass_fpm: Vec<(u32, ForwardPassMetrics)>,
}

/// What starting a pass did.
#[derive(Clone, Copy, Debug)]
pub(super) struct PassStart {
    /// When the pass ends (the start time for a pass that takes no time).
    pub(super) end_ms: f64,
    /// Some rank scheduled a request or produced an event.
    pub(super) scheduled_work: bool,
    /// The router received cache events at pass start.
    pub(super) kv_published: bool,
}

/// Workers running one engine configuration behind one router.
pub(super) struct Pool {
    pub(super) args: EngineArgs,
    dp_size: usize,
    schedulers: Vec<RankScheduler>,
    workers: Vec<WorkerState>,
    /// One bit per worker: something that can let it start a pass happened since it was last
    /// found not ready (a pass ended, it received a request, it became active). Never clear
    /// while the worker is ready, so a topology need only ask [`Pool::take_ready`] of the
    /// workers [`Pool::next_woken`] gives.
    woken: Vec<u64>,
    pub(super) router: Router,
    /// The router reads this pool's cache events (the engines record them).
    routes_on_kv_events: bool,
    /// Integral of the worker count over model time (ms).
    worker_ms: f64,
    /// Workers draining, and workers retired (kept so that the per-timestamp steps need not
    /// scan every worker).
    draining: usize,
    retired: usize,
    /// With a planner: the latest forward-pass metrics per (worker, rank).
    fpm: Option<FpmBuffer>,
    /// Workers still starting, by the time they become ready.
    starting: EventQueue<usize>,
    /// Queued requests the KV router placed when workers joined, for the topology to send.
    placements: Vec<Placement>,
    /// Scratch buffer.
    kv_events: Vec<KvEvent>,
}

impl Pool {
    /// `workers` workers of `dp_size` ranks running `args` behind `router`; with
    /// `routes_on_kv_events` the engines record cache events and the router reads them.
    pub(super) fn new(
        args: &EngineArgs,
        workers: usize,
        dp_size: usize,
        mut router: Router,
        routes_on_kv_events: bool,
    ) -> Self {
        // Block pools index their cached blocks themselves: a router fed their events asks
        // them rather than mirroring every event.
        if routes_on_kv_events && RankScheduler::keeps_block_pool(args) {
            if let Some(router) = router.kv() {
                router.answer_keys_from_engines();
            }
        }
        let mut schedulers: Vec<RankScheduler> = (0..workers * dp_size)
            .map(|index| RankScheduler::new(args, index))
            .collect();
        if routes_on_kv_events {
            schedulers
                .iter_mut()
                .for_each(RankScheduler::record_kv_events);
        }
        Self {
            args: args.clone(),
            dp_size,
            schedulers,
            workers: (0..workers).map(|_| WorkerState::default()).collect(),
            woken: vec![0; workers.div_ceil(64)],
            router,
            routes_on_kv_events,
            worker_ms: 0.0,
            draining: 0,
            retired: 0,
            fpm: None,
            starting: EventQueue::new(),
            placements: Vec::new(),
            kv_events: Vec::new(),
        }
    }

    /// Records forward-pass metrics from now on (for a planner); the initial workers count as
    /// activated at `now_ms`.
    pub(super) fn record_fpm(&mut self, now_ms: f64) {
        self.schedulers
            .iter_mut()
            .for_each(RankScheduler::record_fpm);
        let mut buffer = FpmBuffer::default();
        for worker in 0..self.workers.len() {
            buffer.activate(worker, self.dp_size, now_ms);
        }
        self.fpm = Some(buffer);
    }

    /// Workers by phase, ids ascending.
    pub(super) fn workers_by_phase(&self) -> PoolWorkers {
        let mut out = PoolWorkers::default();
        for (id, state) in self.workers.iter().enumerate() {
            match state.phase {
                WorkerPhase::Active => out.active.push(id),
                WorkerPhase::Starting => out.starting.push(id),
                WorkerPhase::Draining => out.draining.push(id),
                WorkerPhase::Retired => {}
            }
        }
        out
    }

    fn count(&self, phase: WorkerPhase) -> usize {
        self.workers.iter().filter(|w| w.phase == phase).count()
    }

    /// Applies a planner target of non-draining (active + starting) workers at `now_ms`:
    /// adds workers (ready after `startup_ms`, or at once), or cancels starting workers
    /// (highest id first) and then drains active ones (highest id first).
    ///
    /// A target of 0 is refused for a round-robin pool: it would have no worker to send the
    /// next request to (the KV router holds requests until a worker joins).
    pub(super) fn scale_to(&mut self, target: usize, now_ms: f64, startup_ms: f64) -> Result<()> {
        if target == 0 && matches!(self.router, Router::RoundRobin(_)) {
            return Err(Error::runtime(
                "the scaling policy asked for 0 workers, but round-robin routing needs at least \
                 one (the KV router can hold requests until a worker joins)",
            ));
        }
        self.scale_workers(target, now_ms, startup_ms);
        Ok(())
    }

    fn scale_workers(&mut self, target: usize, now_ms: f64, startup_ms: f64) {
        let current = self.count(WorkerPhase::Active) + self.count(WorkerPhase::Starting);
        if target > current {
            for _ in current..target {
                self.add_worker(now_ms, startup_ms);
            }
            return;
        }
        let mut excess = current - target;
        for worker in (0..self.workers.len()).rev() {
            if excess == 0 {
                return;
            }
            if self.workers[worker].phase == WorkerPhase::Starting {
                // Its pending ready event becomes stale.
                self.workers[worker].phase = WorkerPhase::Retired;
                self.retired += 1;
                excess -= 1;
            }
        }
        for worker in (0..self.workers.len()).rev() {
            if excess == 0 {
                return;
            }
            if self.workers[worker].phase == WorkerPhase::Active {
                self.workers[worker].phase = WorkerPhase::Draining;
                self.draining += 1;
                self.router.worker_draining(worker, self.dp_size);
                excess -= 1;
            }
        }
    }

    fn add_worker(&mut self, now_ms: f64, startup_ms: f64) {
        let worker = self.workers.len();
        for rank in 0..self.dp_size {
            let mut scheduler = RankScheduler::new(&self.args, worker * self.dp_size + rank);
            if self.routes_on_kv_events {
                scheduler.record_kv_events();
            }
            if self.fpm.is_some() {
                scheduler.record_fpm();
            }
            self.schedulers.push(scheduler);
        }
        self.workers.push(WorkerState {
            phase: WorkerPhase::Starting,
            ..WorkerState::default()
        });
        self.woken.resize(self.workers.len().div_ceil(64), 0);
        if startup_ms > 0.0 {
            self.starting.push(now_ms + startup_ms, worker);
        } else {
            self.activate(worker, now_ms);
        }
    }

    fn activate(&mut self, worker: usize, now_ms: f64) {
        self.workers[worker].phase = WorkerPhase::Active;
        self.wake(worker);
        if let Some(buffer) = &mut self.fpm {
            buffer.activate(worker, self.dp_size, now_ms);
        }
        self.router
            .worker_ready(worker, self.dp_size, now_ms, &mut self.placements);
    }

    /// Routes `request` (the KV router asks the schedulers' block pools which blocks they had
    /// published).
    pub(super) fn route(&mut self, request: RouteInput<'_>) -> Routed {
        self.router
            .route(request, &PublishedBlocks(&self.schedulers))
    }

    /// The queued requests the KV router placed as workers joined since the last call (the
    /// topology sends them on; `out` is cleared first).
    pub(super) fn take_placements(&mut self, out: &mut Vec<Placement>) {
        out.clear();
        out.append(&mut self.placements);
    }

    /// Queued requests placed as workers joined wait to be sent.
    pub(super) fn has_placements(&self) -> bool {
        !self.placements.is_empty()
    }

    /// Some worker is draining (it may have emptied).
    pub(super) fn has_draining(&self) -> bool {
        self.draining > 0
    }

    /// Some worker is still starting (its ready time may be due).
    pub(super) fn has_starting(&self) -> bool {
        !self.starting.is_empty()
    }

    /// When the next starting worker becomes ready, if any.
    pub(super) fn next_ready_ms(&self) -> Option<f64> {
        self.starting.peek().map(|(at_ms, _)| at_ms)
    }

    /// Activates the workers whose startup ended by `now_ms` (a cancelled one stays retired).
    /// Whether any was.
    pub(super) fn activate_due(&mut self, now_ms: f64) -> bool {
        let mut any = false;
        while let Some(worker) = self.starting.pop_due_if(now_ms, |_| true) {
            if self.workers[worker].phase == WorkerPhase::Starting {
                self.activate(worker, now_ms);
                any = true;
            }
        }
        any
    }

    /// Retires draining workers that hold nothing and have no pass in flight. Whether any was.
    pub(super) fn retire_drained(&mut self) -> bool {
        let mut any = false;
        if self.draining == 0 {
            return false;
        }
        for worker in 0..self.workers.len() {
            let state = &self.workers[worker];
            if state.phase != WorkerPhase::Draining || state.busy || !state.deferred.is_empty() {
                continue;
            }
            if !self.ranks(worker).all(|s| self.schedulers[s].is_drained()) {
                continue;
            }
            self.workers[worker].phase = WorkerPhase::Retired;
            self.draining -= 1;
            self.retired += 1;
            self.router.worker_removed(worker, self.dp_size);
            any = true;
        }
        any
    }

    /// The metrics since the last call, after idle zeros for active ranks silent for a second
    /// (empty without metrics).
    pub(super) fn take_fpm(&mut self, now_ms: f64) -> Vec<(usize, u32, ForwardPassMetrics)> {
        let active = self.workers_by_phase().active;
        let dp_size = self.dp_size;
        match &mut self.fpm {
            Some(buffer) => {
                buffer.emit_idle_due(&active, dp_size, now_ms);
                buffer.take()
            }
            None => Vec::new(),
        }
    }

    pub(super) fn routes_on_kv_events(&self) -> bool {
        self.routes_on_kv_events
    }

    /// Provisioned worker time so far, in seconds.
    pub(super) fn worker_seconds(&self) -> f64 {
        self.worker_ms / 1000.0
    }

    /// Every live worker (starting, active or draining) is provisioned for another `dt_ms`
    /// of model time.
    pub(super) fn accrue(&mut self, dt_ms: f64) {
        let live = self.workers.len() - self.retired;
        debug_assert_eq!(
            live,
            self.workers
                .iter()
                .filter(|w| w.phase != WorkerPhase::Retired)
                .count()
        );
        self.worker_ms += live as f64 * dt_ms;
    }

    pub(super) fn is_busy(&self, worker: usize) -> bool {
        self.workers[worker].busy
    }

    /// What `worker`'s ranks hold together (for the report's time series).
    pub(super) fn worker_load(&self, worker: usize) -> RankLoad {
        self.ranks(worker).map(|s| self.schedulers[s].load()).fold(
            RankLoad::default(),
            |sum, rank| RankLoad {
                waiting: sum.waiting + rank.waiting,
                running: sum.running + rank.running,
                kv_used_tokens: sum.kv_used_tokens + rank.kv_used_tokens,
                kv_capacity_tokens: sum.kv_capacity_tokens + rank.kv_capacity_tokens,
            },
        )
    }

    /// Serving (active or draining), idle, not stalled, and some rank has work.
    pub(super) fn is_ready(&self, worker: usize) -> bool {
        let state = &self.workers[worker];
        matches!(state.phase, WorkerPhase::Active | WorkerPhase::Draining)
            && !state.busy
            && !state.stalled
            && self.ranks(worker).any(|s| self.schedulers[s].has_work())
    }

    /// Every rank of `worker` that has work would only decode in its next pass (admitting,
    /// rejecting and preempting nothing, and taking time), and one has work.
    pub(super) fn next_pass_decodes_only(&self, worker: usize) -> bool {
        if self.dp_size == 1 {
            let scheduler = &self.schedulers[worker];
            return scheduler.has_work() && scheduler.next_pass_decodes_only();
        }
        let mut any = false;
        for s in self.ranks(worker) {
            let scheduler = &self.schedulers[s];
            if scheduler.has_work() {
                if !scheduler.next_pass_decodes_only() {
                    return false;
                }
                any = true;
            }
        }
        any
    }

    /// The events `worker`'s pass in flight left for its end.
    pub(super) fn pending(&self, worker: usize) -> &[PassEvent] {
        &self.workers[worker].pending
    }

    /// [`Pool::is_ready`], answered without looking at the ranks when nothing happened to
    /// `worker` since it was last found not ready (a topology changes a scheduler's state
    /// only through the pool: enqueue, passes, activation, [`Pool::scheduler_mut`]).
    pub(super) fn take_ready(&mut self, worker: usize) -> bool {
        let (word, bit) = (worker / 64, 1u64 << (worker % 64));
        if self.woken[word] & bit == 0 {
            return false;
        }
        let ready = self.is_ready(worker);
        if !ready {
            self.woken[word] &= !bit;
        }
        ready
    }

    /// The lowest woken worker at or above `from`, if any.
    pub(super) fn next_woken(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        let mut bits = *self.woken.get(word)? & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            bits = *self.woken.get(word)?;
        }
    }

    fn wake(&mut self, worker: usize) {
        self.woken[worker / 64] |= 1 << (worker % 64);
    }

    fn ranks(&self, worker: usize) -> std::ops::Range<usize> {
        worker * self.dp_size..(worker + 1) * self.dp_size
    }

    /// The request some rank cannot ever schedule, as (worker, rank, request), if an engine
    /// can tell.
    pub(super) fn blocked_request(&self) -> Option<(usize, usize, RequestId)> {
        self.schedulers
            .iter()
            .enumerate()
            .find_map(|(scheduler, s)| {
                s.blocked_request()
                    .map(|id| (scheduler / self.dp_size, scheduler % self.dp_size, id))
            })
    }

    /// Scheduler `scheduler`, to change it directly (a handoff's source or destination): its
    /// worker is worth asking again whether it is ready.
    pub(super) fn scheduler_mut(&mut self, scheduler: usize) -> &mut RankScheduler {
        self.wake(scheduler / self.dp_size);
        &mut self.schedulers[scheduler]
    }

    /// Queues `request` on `scheduler`; its worker is worth a new pass.
    pub(super) fn enqueue(&mut self, scheduler: usize, request: EngineRequest) {
        self.schedulers[scheduler].enqueue(request);
        self.workers[scheduler / self.dp_size].stalled = false;
        self.wake(scheduler / self.dp_size);
    }

    /// Between `scheduler`'s passes: request `id` leaves it and its KV is released (published
    /// to a KV router at once); its worker is worth a new pass (room was freed). False when
    /// the scheduler does not hold it.
    pub(super) fn abort(&mut self, scheduler: usize, id: RequestId) -> bool {
        if !self.schedulers[scheduler].abort(id) {
            return false;
        }
        if self.routes_on_kv_events {
            self.publish_kv_events(scheduler);
        }
        self.workers[scheduler / self.dp_size].stalled = false;
        self.wake(scheduler / self.dp_size);
        true
    }

    /// What every rank holds together.
    pub(super) fn total_load(&self) -> RankLoad {
        (0..self.workers.len())
            .map(|worker| self.worker_load(worker))
            .fold(RankLoad::default(), |sum, load| RankLoad {
                waiting: sum.waiting + load.waiting,
                running: sum.running + load.running,
                kv_used_tokens: sum.kv_used_tokens + load.kv_used_tokens,
                kv_capacity_tokens: sum.kv_capacity_tokens + load.kv_capacity_tokens,
            })
    }

    /// Requests of the passes in flight that finish at their end: the engines let them go
    /// when the pass starts, but they are in its batch until it ends.
    pub(super) fn finishing_in_flight(&self) -> usize {
        self.workers
            .iter()
            .filter(|worker| worker.busy)
            .map(|worker| {
                worker
                    .pending
                    .iter()
                    .filter(|event| matches!(event, PassEvent::Completed { .. }))
                    .count()
            })
            .sum()
    }

    /// The worker's last pass could do nothing: skip it until it receives a request.
    pub(super) fn stall(&mut self, worker: usize) {
        self.workers[worker].stalled = true;
    }

    /// Parks `action` on request `id` until `worker`'s pass in flight ends.
    pub(super) fn defer(&mut self, worker: usize, id: RequestId, action: Action) {
        self.workers[worker].deferred.push((id, action));
    }

    /// The actions that waited for `worker`'s pass to end.
    pub(super) fn take_deferred(&mut self, worker: usize) -> Vec<(RequestId, Action)> {
        std::mem::take(&mut self.workers[worker].deferred)
    }

    /// Runs one pass, at `now_ms`, on every rank of idle `worker` that has work; admissions go
    /// to `on_admit(id, reused_tokens, scheduler)` at once, every other event waits for
    /// [`Pool::end_pass`]. A pass that takes time leaves the worker busy until then.
    pub(super) fn start_pass(
        &mut self,
        worker: usize,
        now_ms: f64,
        on_admit: impl FnMut(RequestId, usize, usize),
    ) -> PassStart {
        self.run_pass(worker, now_ms, true, on_admit)
    }

    /// [`Pool::start_pass`] for a pass known to admit nothing
    /// ([`Pool::next_pass_decodes_only`]): the events are not searched for admissions.
    pub(super) fn start_decode_pass(&mut self, worker: usize, now_ms: f64) -> PassStart {
        self.run_pass(worker, now_ms, false, |_, _, _| {
            unreachable!("a decode-only pass admits nothing")
        })
    }

    /// Runs decode-only passes of `worker` back to back, the first starting at `start_ms`, its
    /// pass ending then being applied already, for as long as each may end ahead of the loop
    /// ([`RankScheduler::run_decode_passes`]; [`Pool::next_pass_decodes_only`] must hold).
    /// The ends of the passes that did go to `ends`, each a token for every request of `ids`;
    /// the last pass stays in flight, its events pending, as [`Pool::start_decode_pass`]
    /// leaves one, and its end is returned. `None`, having run nothing, where the worker
    /// cannot (more than one rank, SGLang).
    pub(super) fn run_decode_passes(
        &mut self,
        worker: usize,
        start_ms: f64,
        ends_ahead: impl FnMut(f64) -> bool,
        ends: &mut Vec<f64>,
        ids: &mut Vec<RequestId>,
    ) -> Option<f64> {
        if self.dp_size != 1 || self.fpm.is_some() {
            return None;
        }
        let pending = &mut self.workers[worker].pending;
        pending.clear();
        let scheduler = &mut self.schedulers[worker];
        let end_ms = scheduler.run_decode_passes(start_ms, ends_ahead, ends, ids, pending)?;
        debug_assert!(end_ms > start_ms, "a decode-only pass takes time");
        // vLLM's KV events are visible from the start of the pass that made them: every pass
        // run here has started.
        if scheduler.kv_events_at_pass_start() {
            self.publish_kv_events(worker);
        }
        self.set_busy(worker);
        Some(end_ms)
    }

    #[inline(always)]
    fn run_pass(
        &mut self,
        worker: usize,
        now_ms: f64,
        may_admit: bool,
        mut on_admit: impl FnMut(RequestId, usize, usize),
    ) -> PassStart {
        let dp_size = self.dp_size;
        let records_fpm = self.fpm.is_some();
        let state = &mut self.workers[worker];
        state.pending.clear();
        if records_fpm {
            state.pass_fpm.clear();
        }
        // The group ends with its slowest rank (never before it started).
        let mut start = PassStart {
            end_ms: now_ms,
            scheduled_work: false,
            kv_published: false,
        };
        let first_scheduler = worker * dp_size;
        let ranks = &mut self.schedulers[first_scheduler..first_scheduler + dp_size];
        for (rank, rank_scheduler) in ranks.iter_mut().enumerate() {
            if !rank_scheduler.has_work() {
                continue;
            }
            let scheduler = first_scheduler + rank;
            // The ranks append their events to the worker's; admissions are taken out below.
            let before = state.pending.len();
            let time = rank_scheduler.run_pass_timed(&mut state.pending);
            if self.routes_on_kv_events && rank_scheduler.kv_events_at_pass_start() {
                rank_scheduler.drain_kv_events(&mut self.kv_events);
                start.kv_published |= !self.kv_events.is_empty();
                self.router.apply_kv_events(scheduler, &self.kv_events);
            }
            let end_ms = time.end_ms(now_ms);
            if records_fpm {
                if let Some(fpm) = rank_scheduler.last_fpm() {
                    let wall_time_s = (end_ms - now_ms) / 1000.0;
                    state
                        .pass_fpm
                        .push((rank as u32, ForwardPassMetrics { wall_time_s, ..fpm }));
                }
            }
            start.end_ms = start.end_ms.max(end_ms);
            start.scheduled_work |= time.scheduled_requests > 0 || state.pending.len() > before;
            // (A vLLM decode pass admits nothing: its many token events are not searched.)
            if may_admit && rank_scheduler.last_pass_may_admit() {
                take_admissions(&mut state.pending, before, |id, reused_tokens| {
                    on_admit(id, reused_tokens, scheduler)
                });
            } else {
                debug_assert!(!state.pending[before..]
                    .iter()
                    .any(|event| matches!(event, PassEvent::Admitted { .. })));
            }
        }
        if start.end_ms > now_ms {
            self.set_busy(worker);
        } else {
            state.busy = false;
        }
        start
    }

    /// `worker` started a pass that takes time: busy, and not ready until its end wakes it.
    fn set_busy(&mut self, worker: usize) {
        self.workers[worker].busy = true;
        self.woken[worker / 64] &= !(1 << (worker % 64));
    }

    /// Ends `worker`'s pass at `now_ms`: publishes its metrics (with metrics on) and hands
    /// back the events it left for its end (give the buffer back with [`Pool::recycle`]).
    pub(super) fn end_pass(&mut self, worker: usize, now_ms: f64) -> Vec<PassEvent> {
        self.end_pass_in_place(worker, now_ms);
        std::mem::take(&mut self.workers[worker].pending)
    }

    /// [`Pool::end_pass`], leaving the events in [`Pool::pending`] (until the worker's next
    /// pass starts).
    #[inline]
    pub(super) fn end_pass_in_place(&mut self, worker: usize, now_ms: f64) {
        self.wake(worker);
        let state = &mut self.workers[worker];
        state.busy = false;
        if let Some(buffer) = &mut self.fpm {
            for &(rank, fpm) in &state.pass_fpm {
                buffer.insert(worker, rank, fpm, now_ms);
            }
        }
    }

    /// Returns an event buffer taken by [`Pool::end_pass`] for reuse.
    pub(super) fn recycle(&mut self, worker: usize, mut events: Vec<PassEvent>) {
        events.clear();
        let pending = &mut self.workers[worker].pending;
        if pending.is_empty() {
            *pending = events;
        }
    }

    /// Publishes to the router the KV events of `worker`'s engines that make them visible
    /// when a pass completes (SGLang).
    #[inline]
    pub(super) fn apply_pass_end_kv_events(&mut self, worker: usize) {
        if !self.routes_on_kv_events {
            return;
        }
        for scheduler in self.ranks(worker) {
            if !self.schedulers[scheduler].kv_events_at_pass_start() {
                self.publish_kv_events(scheduler);
            }
        }
    }

    /// Publishes to the router whatever cache events `scheduler` recorded so far.
    pub(super) fn publish_kv_events(&mut self, scheduler: usize) {
        if !self.routes_on_kv_events {
            return;
        }
        self.schedulers[scheduler].drain_kv_events(&mut self.kv_events);
        self.router.apply_kv_events(scheduler, &self.kv_events);
    }
}

/// A pool's schedulers answering the KV router's per-block questions from their block pools,
/// as of the events drained so far (every drain is applied to the router at once).
struct PublishedBlocks<'a>(&'a [RankScheduler]);

impl PublishedKeys for PublishedBlocks<'_> {
    #[inline]
    fn contains(&self, target: usize, key: u64) -> bool {
        self.0[target]
            .block_pool()
            .is_some_and(|pool| pool.visible_as_drained(key))
    }

    #[inline]
    fn prefetch(&self, target: usize, key: u64) {
        if let Some(pool) = self.0[target].block_pool() {
            pool.prefetch_hash(key);
        }
    }
}

/// Hands the admissions among `events[from..]` to `on_admit` in order and removes them,
/// keeping the order of the other events (most passes admit nothing: then nothing moves).
fn take_admissions(
    events: &mut Vec<PassEvent>,
    from: usize,
    mut on_admit: impl FnMut(RequestId, usize),
) {
    let Some(first) = events[from..]
        .iter()
        .position(|event| matches!(event, PassEvent::Admitted { .. }))
    else {
        return;
    };
    let mut kept = from + first;
    for read in from + first..events.len() {
        match events[read] {
            PassEvent::Admitted { id, reused_tokens } => on_admit(id, reused_tokens),
            other => {
                events[kept] = other;
                kept += 1;
            }
        }
    }
    events.truncate(kept);
}
