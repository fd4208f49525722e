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
//!   make visible at pass start; [`Pool::end_pass`] hands back the pass's events;
//!   [`Pool::apply_pass_end_kv_events`] publishes those engines make visible at pass end.
//! - The topology decides *when* passes start and what their events mean; the pool only
//!   keeps the state.

use super::handoff::Action;
use crate::config::EngineArgs;
use crate::engine::kv::KvEvent;
use crate::engine::{EngineRequest, PassEvent, RankLoad, RankScheduler, RequestId};
use crate::router::Router;

/// Pass state of one worker.
#[derive(Debug, Default)]
struct WorkerState {
    /// A pass is in flight.
    busy: bool,
    /// The last pass did nothing; do not retry until the worker receives a request.
    stalled: bool,
    /// Events of the in-flight pass, applied at its completion.
    pending: Vec<PassEvent>,
    /// Actions waiting for the in-flight pass to end.
    deferred: Vec<(RequestId, Action)>,
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
    pub(super) schedulers: Vec<RankScheduler>,
    workers: Vec<WorkerState>,
    pub(super) router: Router,
    /// The router reads this pool's cache events (the engines record them).
    routes_on_kv_events: bool,
    /// Integral of the worker count over model time (ms).
    worker_ms: f64,
    /// Scratch buffers.
    pass_events: Vec<PassEvent>,
    kv_events: Vec<KvEvent>,
}

impl Pool {
    /// `workers` workers of `dp_size` ranks running `args` behind `router`; with
    /// `routes_on_kv_events` the engines record cache events and the router reads them.
    pub(super) fn new(
        args: &EngineArgs,
        workers: usize,
        dp_size: usize,
        router: Router,
        routes_on_kv_events: bool,
    ) -> Self {
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
            router,
            routes_on_kv_events,
            worker_ms: 0.0,
            pass_events: Vec::new(),
            kv_events: Vec::new(),
        }
    }

    pub(super) fn num_workers(&self) -> usize {
        self.workers.len()
    }

    pub(super) fn routes_on_kv_events(&self) -> bool {
        self.routes_on_kv_events
    }

    /// Provisioned worker time so far, in seconds.
    pub(super) fn worker_seconds(&self) -> f64 {
        self.worker_ms / 1000.0
    }

    /// Every worker is provisioned for another `dt_ms` of model time.
    pub(super) fn accrue(&mut self, dt_ms: f64) {
        self.worker_ms += self.workers.len() as f64 * dt_ms;
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

    /// Idle, not stalled, and some rank has work.
    pub(super) fn is_ready(&self, worker: usize) -> bool {
        let state = &self.workers[worker];
        !state.busy && !state.stalled && self.ranks(worker).any(|s| self.schedulers[s].has_work())
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

    /// Queues `request` on `scheduler`; its worker is worth a new pass.
    pub(super) fn enqueue(&mut self, scheduler: usize, request: EngineRequest) {
        self.schedulers[scheduler].enqueue(request);
        self.workers[scheduler / self.dp_size].stalled = false;
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
        mut on_admit: impl FnMut(RequestId, usize, usize),
    ) -> PassStart {
        let mut pending = std::mem::take(&mut self.workers[worker].pending);
        pending.clear();
        let mut events = std::mem::take(&mut self.pass_events);
        // The group ends with its slowest rank (never before it started).
        let mut start = PassStart {
            end_ms: now_ms,
            scheduled_work: false,
            kv_published: false,
        };
        for scheduler in self.ranks(worker) {
            if !self.schedulers[scheduler].has_work() {
                continue;
            }
            events.clear();
            let time = self.schedulers[scheduler].run_pass_timed(&mut events);
            if self.routes_on_kv_events && self.schedulers[scheduler].kv_events_at_pass_start() {
                self.schedulers[scheduler].drain_kv_events(&mut self.kv_events);
                start.kv_published |= !self.kv_events.is_empty();
                self.router.apply_kv_events(scheduler, &self.kv_events);
            }
            start.end_ms = start.end_ms.max(time.end_ms(now_ms));
            start.scheduled_work |= time.scheduled_requests > 0 || !events.is_empty();
            for &event in &events {
                match event {
                    PassEvent::Admitted { id, reused_tokens } => {
                        on_admit(id, reused_tokens, scheduler)
                    }
                    other => pending.push(other),
                }
            }
        }
        self.pass_events = events;
        self.workers[worker].pending = pending;
        self.workers[worker].busy = start.end_ms > now_ms;
        start
    }

    /// Ends `worker`'s pass: the events it left for its end (give the buffer back with
    /// [`Pool::recycle`]).
    pub(super) fn end_pass(&mut self, worker: usize) -> Vec<PassEvent> {
        let state = &mut self.workers[worker];
        state.busy = false;
        std::mem::take(&mut state.pending)
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
