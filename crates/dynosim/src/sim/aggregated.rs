//! Aggregated workers: one pool of `num_workers` workers of `dp_size` ranks each behind one
//! router, and the steps of one timestamp that `event_loop::run` drives (see the module doc of
//! `sim` for the ordering rules).
//!
//! With a planner: at one timestamp, pass completions, then workers whose startup ended, then
//! arrivals, then pass starts, then retiring drained workers, until nothing changes; then the
//! scaling tick, if one is due and the workload is not done (and everything again).

use super::collector_front::CollectorFront;
use super::common::{earliest, kv_router, ReleasedRequest, Requests, RouteHints, SlotQueue};
use super::driver::Driver;
use super::event_loop::{ProgressPoint, Topology};
use super::pool::Pool;
use super::scaling::Scaling;
use crate::config::RouterMode;
use crate::config::{ArrivalMode, ReplaySpec};
use crate::engine::{EngineRequest, PassEvent, RequestId};
use crate::error::{Error, Result};
use crate::planner::{PlannerOutcome, ScalingPolicy, ScalingSnapshot};
use crate::report::{Collector, RunFacts};
use crate::router::kv::Placement;
use crate::router::round_robin::RoundRobin;
use crate::router::{Routed, Router};

/// Aggregated workers: `num_workers` workers of `dp_size` ranks each, behind one router.
pub(super) struct Aggregated<'s> {
    spec: &'s ReplaySpec,
    now_ms: f64,
    /// The workers and their router.
    pool: Pool,
    /// Pass completions, by worker (one per busy worker).
    completions: SlotQueue,
    requests: Requests,
    /// Requests held in the KV router's queue, by id, until it places them.
    parked: Vec<Option<EngineRequest>>,
    /// Scratch: queued requests the KV router placed.
    placements: Vec<Placement>,
    collector: CollectorFront,
    /// Pass ends report tokens to `requests` (for the KV router's first tokens, or the
    /// driver's output counts).
    counts_tokens: bool,
    /// The reference's single-worker path releases closed-loop arrivals only between passes.
    release_between_passes_only: bool,
    single_worker: bool,
    /// Once past the time cap: the last timestamp still processed.
    past_cap_stop_ms: Option<f64>,
    /// The planner in the loop, if any.
    scaling: Option<Scaling<'s>>,
}

impl<'s> Aggregated<'s> {
    pub(super) fn new(
        spec: &'s ReplaySpec,
        driver: Driver,
        policy: Option<&'s mut dyn ScalingPolicy>,
        collector: CollectorFront,
    ) -> Self {
        let dp_size = spec.engine.dp_size;
        let router = match spec.router_mode {
            RouterMode::RoundRobin => {
                Router::RoundRobin(RoundRobin::new(spec.num_workers, dp_size))
            }
            RouterMode::KvRouter => Router::Kv(Box::new(kv_router(
                spec.router_config.as_ref(),
                &spec.engine,
                spec.num_workers * dp_size,
                |_| {},
            ))),
        };
        // Only the KV router reads the engines' cache events.
        let routes_on_kv_events = router.reads_kv_events();
        // A planner always runs the multi-worker loop.
        let single_worker = spec.num_workers == 1 && dp_size == 1 && policy.is_none();
        let closed_loop = matches!(spec.arrivals, ArrivalMode::Concurrency { .. });
        let mut pool = Pool::new(
            &spec.engine,
            spec.num_workers,
            dp_size,
            router,
            routes_on_kv_events,
        );
        if policy.is_some() {
            pool.record_fpm(0.0);
        }
        let requests = Requests::new(driver);
        Self {
            spec,
            now_ms: 0.0,
            counts_tokens: requests.counts_tokens(routes_on_kv_events),
            pool,
            completions: SlotQueue::new(),
            parked: Vec::new(),
            placements: Vec::new(),
            collector,
            requests,
            release_between_passes_only: single_worker && closed_loop,
            single_worker,
            past_cap_stop_ms: None,
            scaling: policy.map(|policy| Scaling::new(policy, false)),
        }
    }

    /// Scaling ticks the policy was called for, and the changes it asked for.
    pub(super) fn planner_outcome(&mut self) -> Option<PlannerOutcome> {
        self.scaling.as_mut().map(Scaling::take_outcome)
    }

    pub(super) fn finish(self) -> Result<(Collector, RunFacts)> {
        let collector = self.collector.finish()?;
        let decode_worker_seconds = if self.single_worker {
            // The reference's single-worker path charges one worker for the report duration.
            collector.duration_s()
        } else {
            self.pool.worker_seconds()
        };
        let gpus = self.spec.engine.gpus_per_worker() as u64;
        let facts = RunFacts {
            prefill_worker_seconds: 0.0,
            decode_worker_seconds,
            prefill_gpus_per_worker: 0,
            decode_gpus_per_worker: gpus,
            wall_time_ms: 0.0,
        };
        Ok((collector, facts))
    }
}

impl Topology for Aggregated<'_> {
    fn start_ticks(&mut self) -> Result<bool> {
        match &mut self.scaling {
            Some(scaling) => scaling.start(self.now_ms).map(|()| true),
            None => Ok(false),
        }
    }

    fn progress(&self) -> ProgressPoint {
        self.requests.progress(self.now_ms)
    }

    fn take_arrival(&mut self) -> Option<ReleasedRequest> {
        self.requests.release(
            self.now_ms,
            self.spec.arrivals,
            &mut self.collector,
            self.scaling.as_mut().map(|scaling| &mut scaling.traffic),
        )
    }

    /// Routes the request (routing one request before the next is taken).
    fn admit(&mut self, arrival: ReleasedRequest) {
        let request = EngineRequest {
            id: arrival.id,
            prompt: arrival.prompt,
            max_output_tokens: arrival.max_output_tokens,
        };
        self.route(request, arrival.hints);
    }

    fn is_done(&self) -> bool {
        self.requests.driver().is_drained()
    }

    /// The error for a run where nothing can happen any more, naming the blocking request when
    /// an engine can tell which one it is.
    fn dead_end(&self) -> Error {
        self.requests.dead_end(
            "offline replay",
            &[("worker", &self.pool)],
            Some(
                "(no request can be scheduled: a request's prompt plus the output it has \
                 generated so far may have outgrown the KV cache (a long output_length), or a \
                 prompt may exceed max_num_batched_tokens with chunked prefill off)",
            ),
        )
    }

    /// Past the cap, the multi-worker loop stops at once; the reference's single-worker loop
    /// checks the cap only between its steps, so it still finishes the pass in flight (and
    /// takes the arrivals up to its end), or, when idle, takes the next batch of arrivals.
    fn last_ms_within_cap(&mut self, cap_ms: f64, next_ms: f64) -> f64 {
        if let Some(stop) = self.past_cap_stop_ms {
            return stop;
        }
        if next_ms <= cap_ms {
            return cap_ms;
        }
        let stop = match (self.single_worker, self.completions.peek()) {
            (false, _) => cap_ms,
            (true, Some((in_flight_end_ms, _))) => in_flight_end_ms,
            (true, None) => next_ms,
        };
        self.past_cap_stop_ms = Some(stop);
        stop
    }

    fn next_event_ms(&self) -> Option<f64> {
        let next_completion = self.completions.peek().map(|(at_ms, _)| at_ms);
        let arrivals_blocked = self.release_between_passes_only && self.pool.is_busy(0);
        let next_arrival = if arrivals_blocked {
            None
        } else {
            self.requests.driver().next_ready_ms()
        };
        let next_ready = self.pool.next_ready_ms();
        let next_tick = self.scaling.as_ref().and_then(Scaling::next_tick_ms);
        earliest(
            earliest(earliest(next_completion, next_arrival), next_ready),
            next_tick,
        )
    }

    fn advance_to(&mut self, t_ms: f64) {
        let dt = t_ms - self.now_ms;
        if dt > 0.0 {
            self.pool.accrue(dt);
        }
        self.now_ms = t_ms;
    }

    /// Pass completions, then ready workers, then arrivals, then pass starts, then retired
    /// workers, until the state stops changing; then a due scaling tick (and again).
    ///
    /// Each step is skipped, without a call, where it could not do anything: no worker
    /// starting, no placement waiting, no turn ready yet, a worker nothing happened to since
    /// it was last found not ready, no worker draining.
    fn settle(&mut self) -> Result<()> {
        loop {
            let mut changed = false;
            while let Some(worker) = self.completions.pop_due(self.now_ms) {
                self.end_pass(worker);
                changed = true;
            }
            if self.pool.has_starting() {
                changed |= self.pool.activate_due(self.now_ms);
            }
            if self.pool.has_placements() {
                self.send_joined_placements();
            }
            if self.arrival_due() {
                changed |= self.release_arrivals();
            }
            // Ascending ids, each asked as its turn comes (a pass may wake higher ones).
            let mut from = 0;
            while let Some(worker) = self.pool.next_woken(from) {
                if self.pool.take_ready(worker) {
                    changed |= self.start_pass(worker);
                }
                from = worker + 1;
            }
            if self.pool.has_draining() {
                changed |= self.pool.retire_drained();
            }
            if changed {
                continue;
            }
            if !self.tick()? {
                return Ok(());
            }
        }
    }
}

impl Aggregated<'_> {
    /// A turn is ready now and may be released (the single-worker closed loop releases only
    /// between passes).
    fn arrival_due(&self) -> bool {
        self.requests.driver().has_ready(self.now_ms)
            && !(self.release_between_passes_only && self.pool.is_busy(0))
    }

    /// Runs the scaling tick due now, if any and the workload is not done. Whether one ran.
    fn tick(&mut self) -> Result<bool> {
        let done = self.requests.driver().is_drained();
        let Some(scaling) = &mut self.scaling else {
            return Ok(false);
        };
        if done || !scaling.due(self.now_ms) {
            return Ok(false);
        }
        let snapshot = ScalingSnapshot {
            now_ms: self.now_ms,
            decode_fpm: self.pool.take_fpm(self.now_ms),
            decode: self.pool.workers_by_phase(),
            ..ScalingSnapshot::default()
        };
        let decision = scaling.decide(snapshot)?;
        if let Some(target) = decision.target_decode {
            let startup_ms = self.spec.engine.startup_time * 1000.0;
            self.pool.scale_to(target, self.now_ms, startup_ms);
            self.send_joined_placements();
        }
        Ok(true)
    }

    /// Sends a released request to the scheduler the router picks, or parks it in the KV
    /// router's queue, or rejects it (a router queue limit) as an engine rejection would.
    fn route(&mut self, request: EngineRequest, hints: RouteHints) {
        let routed = self.pool.router.route(hints.route_input(
            request.id,
            &request.prompt,
            self.spec.engine.block_size,
            self.now_ms,
        ));
        match routed {
            Routed::Placed {
                target,
                overlap_blocks,
            } => {
                self.note_placement(overlap_blocks, request.prompt.len());
                self.pool.enqueue(target, request);
            }
            Routed::Queued => {
                let id = request.id;
                if id >= self.parked.len() {
                    self.parked.resize_with(id + 1, || None);
                }
                self.parked[id] = Some(request);
            }
            Routed::Rejected => {
                self.collector.on_rejected(request.id, self.now_ms);
                self.on_terminal(request.id, false);
            }
        }
    }

    /// Tells the KV router that request `id` emitted its first token (`terminal` false) or
    /// ended, then dispatches the queued requests it places in response.
    fn release_router_load(&mut self, id: RequestId, terminal: bool) {
        if !self.pool.routes_on_kv_events() {
            return;
        }
        let mut placements = std::mem::take(&mut self.placements);
        if terminal {
            self.pool
                .router
                .on_terminal(id, self.now_ms, &mut placements);
        } else {
            self.pool
                .router
                .on_first_token(id, self.now_ms, &mut placements);
        }
        self.send_placements(&mut placements);
        self.placements = placements;
    }

    /// Sends the queued requests the KV router placed when workers joined.
    fn send_joined_placements(&mut self) {
        let mut placements = std::mem::take(&mut self.placements);
        self.pool.take_placements(&mut placements);
        self.send_placements(&mut placements);
        self.placements = placements;
    }

    /// Sends parked requests the KV router took out of its queue to their schedulers.
    fn send_placements(&mut self, placements: &mut Vec<Placement>) {
        for placement in placements.drain(..) {
            let request = self.parked[placement.id]
                .take()
                .expect("the router places only parked requests");
            self.note_placement(placement.overlap_blocks, request.prompt.len());
            self.pool.enqueue(placement.target, request);
        }
    }

    /// The planner's traffic window counts the KV router's cache hits.
    fn note_placement(&mut self, overlap_blocks: u32, isl: usize) {
        if let (Some(scaling), true) = (&mut self.scaling, self.pool.routes_on_kv_events()) {
            let isl_blocks = isl.div_ceil(self.spec.engine.block_size.max(1));
            scaling.traffic.on_placement(overlap_blocks, isl_blocks);
        }
    }

    /// Starts a pass on ready `worker` (all of a worker's DP ranks pass together). Returns
    /// whether anything happened.
    fn start_pass(&mut self, worker: usize) -> bool {
        let now_ms = self.now_ms;
        let collector = &mut self.collector;
        let start = self
            .pool
            .start_pass(worker, now_ms, |id, reused_tokens, scheduler| {
                collector.on_admit(id, now_ms, reused_tokens, scheduler)
            });
        if start.end_ms > now_ms {
            self.completions.push(start.end_ms, worker);
            return true;
        }
        // A pass that takes no time completes at once, KV events included.
        self.end_pass(worker);
        if !start.scheduled_work {
            // Nothing could run (e.g. the head request does not fit the KV cache); retrying
            // before the worker receives a new request would change nothing.
            self.pool.stall(worker);
        }
        start.scheduled_work
    }

    /// Ends `worker`'s pass at `now_ms`: its KV events, then its tokens and terminal states.
    fn end_pass(&mut self, worker: usize) {
        let events = self.pool.end_pass(worker, self.now_ms);
        if let Some(scaling) = &mut self.scaling {
            scaling.traffic.on_pass_end(&events, self.now_ms);
        }
        self.pool.apply_pass_end_kv_events(worker);
        self.apply_pass_end(&events);
        if self.collector.records_timeseries() {
            let load = self.pool.worker_load(worker);
            self.collector
                .timeseries_pass_end(self.now_ms, 0, worker, load, &events, true);
        }
        self.pool.recycle(worker, events);
    }

    /// Applies the end-of-pass events of one pass at `now_ms`.
    fn apply_pass_end(&mut self, events: &[PassEvent]) {
        for (index, &event) in events.iter().enumerate() {
            match event {
                PassEvent::Tokens { id, count } => {
                    let first_tokens = self.counts_tokens && self.requests.on_tokens(id, count);
                    self.collector.on_tokens(id, self.now_ms, count);
                    // A token followed by the request's completion is its final token: the
                    // router then releases everything at once, at the completion. Later tokens
                    // release nothing (the router frees a prefill once), so they skip it.
                    let final_token = events.get(index + 1) == Some(&PassEvent::Completed { id });
                    if first_tokens && !final_token {
                        self.release_router_load(id, false);
                    }
                }
                PassEvent::Completed { id } => {
                    self.collector.on_completed(id, self.now_ms);
                    self.release_router_load(id, true);
                    self.on_terminal(id, true);
                }
                PassEvent::Rejected { id } => {
                    self.collector.on_rejected(id, self.now_ms);
                    self.release_router_load(id, true);
                    self.on_terminal(id, false);
                }
                PassEvent::Admitted { .. } => unreachable!("admissions are applied at pass start"),
            }
        }
    }

    fn on_terminal(&mut self, id: RequestId, completed: bool) {
        if let Some(scaling) = &mut self.scaling {
            scaling.traffic.on_end(id, completed);
        }
        self.requests.on_ended(id, self.now_ms, completed);
    }
}
