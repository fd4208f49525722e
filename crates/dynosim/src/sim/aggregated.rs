//! Aggregated workers: one pool of `num_workers` workers of `dp_size` ranks each behind one
//! router, and the steps of one timestamp that `event_loop::run` drives (see the module doc of
//! `sim` for the ordering rules).
//!
//! With a planner: at one timestamp, pass completions, then workers whose startup ended, then
//! arrivals, then pass starts, then retiring drained workers, until nothing changes; then the
//! scaling tick, if one is due and the workload is not done (and everything again).
//!
//! Run-ahead: when only the driver's scheduled arrivals can reach a worker (open loop, one
//! turn per session, no planner, no KV router queue, no time series), a worker that starts a
//! pass applies its end and starts the next one at once, without the loop, while the pass
//! ends before the next arrival (and within the cap), holds only tokens, and is followed by a
//! decode-only pass that takes time (see [`Aggregated::run_ahead`] for why that changes no
//! output). Completions, rejections and first tokens the KV router hears of stay events of
//! the loop; the last pass started is queued where the loop would have queued it, and the
//! worker time accrues through every pass end the loop did not stop at. Where the pool can
//! (one rank, vLLM or TRT-LLM), the decode-only passes after the first are one call,
//! [`Pool::run_decode_passes`]: the engine runs them back to back under the same conditions
//! and hands back their ends and the requests they gave a token to.

use super::collector_front::CollectorFront;
use super::driver::Driver;
use super::event_loop::{ProgressPoint, Topology};
use super::event_queue::{earliest, SlotQueue};
use super::pool::Pool;
use super::pool_router::{kv_router_may_queue, pool_router};
use super::requests::{ReleasedRequest, Requests, RouteHints};
use super::scaling::{Scaling, NO_WORKER_JOINED};
use crate::config::{ArrivalMode, EngineArgs, PoolSpec, ReplaySpec};
use crate::engine::kv::FastMap;
use crate::engine::{EngineRequest, PassEvent, RankLoad, RequestId};
use crate::error::{Error, Result};
use crate::planner::{PlannerOutcome, ScalingPolicy, ScalingSnapshot};
use crate::report::{Collector, RunFacts, TerminalStatus};
use crate::router::kv::Placement;
use crate::router::Routed;
use crate::workload::Session;

/// Aggregated workers: `num_workers` workers of `dp_size` ranks each, behind one router.
pub(super) struct Aggregated<'s> {
    spec: &'s ReplaySpec,
    /// The workers' engine arguments.
    engine: &'s EngineArgs,
    now_ms: f64,
    /// The workers and their router.
    pool: Pool,
    /// Pass completions, by worker (one per busy worker).
    completions: SlotQueue,
    requests: Requests,
    /// Requests held in the KV router's queue, by id, until it places them.
    parked: FastMap<RequestId, EngineRequest>,
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
    /// The settle round at `now_ms` (counted from 0 at each new time): with the worker id, a
    /// pass start's place among the starts at one time, which orders pass completions that
    /// tie.
    round: u64,
    /// Workers run ahead of the loop (see [`Aggregated::run_ahead`]): nothing but the
    /// driver's scheduled arrivals can reach a worker.
    run_ahead: bool,
    /// Pass ends applied ahead of the loop.
    passes_run_ahead: u64,
    /// Provisioned worker time is accrued up to here (`now_ms`, but for pass ends applied
    /// ahead of the loop that it has not reached yet).
    accrued_ms: f64,
    /// The pass ends applied ahead of the loop and not yet accrued through. The loop would
    /// have stopped at each of them, and the worker time is the sum of its steps, which
    /// floating point makes depend on where the steps are: it is accrued through each of them
    /// in turn.
    run_ahead_ends: RunAheadEnds,
    /// Scratch for [`Pool::run_decode_passes`]: the ends of the passes run ahead, and the
    /// requests each gave a token.
    ahead_ends: Vec<f64>,
    ahead_ids: Vec<RequestId>,
    /// A run fed from outside (`sim::external`): where its requests are and which to cancel.
    external: Option<ExternalState>,
}

/// What a run fed from outside keeps to cancel requests.
#[derive(Debug, Default)]
struct ExternalState {
    /// The scheduler each request in flight was sent to (absent while the KV router's queue
    /// holds it).
    placed: FastMap<RequestId, usize>,
    /// Cancellations not yet applied: their request's worker was in a pass, or the request
    /// was queued in the router.
    cancels: Vec<RequestId>,
}

/// Accrues `pool`'s provisioned worker time from `accrued_ms` to `t_ms` (if later).
fn accrue_to(pool: &mut Pool, accrued_ms: &mut f64, t_ms: f64) {
    let dt = t_ms - *accrued_ms;
    if dt > 0.0 {
        pool.accrue(dt);
        *accrued_ms = t_ms;
    }
}

/// Per worker, the times of its pass ends applied ahead of the loop, in time order (a worker
/// runs ahead only from a pass the loop ended, so each new end is later than its others),
/// merged into one ascending sequence as they are taken.
#[derive(Debug)]
struct RunAheadEnds {
    /// Per worker: its ends; those before `read[worker]` were taken.
    ends: Vec<Vec<f64>>,
    read: Vec<usize>,
    /// Per worker: its first end not taken, or infinity (workers with nothing due are skipped
    /// without touching their lists).
    heads: Vec<f64>,
    /// Scratch: the ends being taken, as ascending runs starting at `run_starts`, merged
    /// pairwise (through `merged`) until one run is left.
    runs: Vec<f64>,
    merged: Vec<f64>,
    run_starts: Vec<usize>,
}

impl RunAheadEnds {
    fn new(workers: usize) -> Self {
        Self {
            ends: vec![Vec::new(); workers],
            read: vec![0; workers],
            heads: vec![f64::INFINITY; workers],
            runs: Vec::new(),
            merged: Vec::new(),
            run_starts: Vec::new(),
        }
    }

    /// `worker` ran ahead through a pass end at `at_ms` (later than its other ends).
    fn push(&mut self, worker: usize, at_ms: f64) {
        let ends = &mut self.ends[worker];
        if ends.len() == self.read[worker] {
            // Everything taken: start over at the front (the memory stays bounded by the
            // longest run).
            ends.clear();
            self.read[worker] = 0;
            self.heads[worker] = at_ms;
        }
        ends.push(at_ms);
    }

    /// Hands every end at or before `t_ms` to `step`, ascending (ends that tie in time come
    /// in any order among themselves).
    fn take_through(&mut self, t_ms: f64, step: impl FnMut(f64)) {
        self.runs.clear();
        self.run_starts.clear();
        for (worker, head_ms) in self.heads.iter_mut().enumerate() {
            if *head_ms > t_ms {
                continue;
            }
            let ends = &self.ends[worker];
            let from = self.read[worker];
            let to = from + ends[from..].partition_point(|&at_ms| at_ms <= t_ms);
            self.run_starts.push(self.runs.len());
            self.runs.extend_from_slice(&ends[from..to]);
            self.read[worker] = to;
            *head_ms = ends.get(to).copied().unwrap_or(f64::INFINITY);
        }
        // Each pairwise round halves the runs: every end is copied log2(workers due) times,
        // instead of a scan over every worker per end.
        while self.run_starts.len() > 2 {
            self.merged.clear();
            let (count, len) = (self.run_starts.len(), self.runs.len());
            let starts = &mut self.run_starts;
            let mut merged_runs = 0;
            for run in (0..count).step_by(2) {
                let bound = |run: usize| starts.get(run).copied().unwrap_or(len);
                let (start, middle, end) = (bound(run), bound(run + 1), bound(run + 2));
                // (Written after this pair's bounds are read, below those of later pairs.)
                starts[merged_runs] = self.merged.len();
                merged_runs += 1;
                merge_ascending(
                    &self.runs[start..middle],
                    &self.runs[middle..end],
                    &mut self.merged,
                );
            }
            self.run_starts.truncate(merged_runs);
            std::mem::swap(&mut self.runs, &mut self.merged);
        }
        // The last pair is merged as it is handed out.
        let (first, second) = match self.run_starts[..] {
            [_, middle] => self.runs.split_at(middle),
            _ => (&self.runs[..], &[][..]),
        };
        merge_ascending_into(first, second, step);
    }
}

/// Hands the ascending merge of ascending `a` and `b` to `step`.
fn merge_ascending_into(mut a: &[f64], mut b: &[f64], mut step: impl FnMut(f64)) {
    while let (Some(&x), Some(&y)) = (a.first(), b.first()) {
        if y < x {
            step(y);
            b = &b[1..];
        } else {
            step(x);
            a = &a[1..];
        }
    }
    for &at_ms in a.iter().chain(b) {
        step(at_ms);
    }
}

/// Appends the ascending merge of ascending `a` and `b` to `out`.
fn merge_ascending(a: &[f64], b: &[f64], out: &mut Vec<f64>) {
    out.reserve(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if b[j] < a[i] {
            out.push(b[j]);
            j += 1;
        } else {
            out.push(a[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
}

impl<'s> Aggregated<'s> {
    pub(super) fn new(
        spec: &'s ReplaySpec,
        workers: &'s PoolSpec,
        driver: Driver,
        policy: Option<&'s mut dyn ScalingPolicy>,
        mut collector: CollectorFront,
    ) -> Self {
        let engine = &workers.engine;
        let num_workers = workers.workers;
        let dp_size = engine.dp_size;
        let router = pool_router(spec, workers, dp_size, |_| {});
        // Only the KV router reads the engines' cache events.
        let routes_on_kv_events = router.reads_kv_events();
        // A planner always runs the multi-worker loop.
        let single_worker = num_workers == 1 && dp_size == 1 && policy.is_none();
        let closed_loop = matches!(spec.arrivals, ArrivalMode::Concurrency { .. });
        let mut pool = Pool::new(engine, num_workers, dp_size, router, routes_on_kv_events);
        if policy.is_some() {
            pool.record_fpm(0.0);
        }
        let requests = Requests::new(driver, engine.front_delay_ms());
        // Run-ahead needs every input a worker can receive to be known in advance: no planner
        // (ticks, joining workers), no request whose end releases a turn, no KV router queue
        // that a first token or an end can place from; and nothing that records pass ends in
        // time order (the HTML report's series).
        let router_may_queue =
            routes_on_kv_events && kv_router_may_queue(spec.router_config.as_ref(), engine);
        let run_ahead = policy.is_none()
            && !requests.driver().terminals_release_turns()
            && !router_may_queue
            && !collector.records_timeseries();
        Self {
            spec,
            engine,
            now_ms: 0.0,
            counts_tokens: requests.counts_tokens(routes_on_kv_events),
            pool,
            completions: SlotQueue::new(),
            parked: FastMap::default(),
            placements: Vec::new(),
            collector,
            requests,
            release_between_passes_only: single_worker && closed_loop,
            single_worker,
            past_cap_stop_ms: None,
            scaling: policy.map(|policy| Scaling::new(policy, false)),
            round: 0,
            run_ahead,
            passes_run_ahead: 0,
            accrued_ms: 0.0,
            run_ahead_ends: RunAheadEnds::new(num_workers),
            ahead_ends: Vec::new(),
            ahead_ids: Vec::new(),
            external: None,
        }
    }

    /// Makes this a run fed from outside: requests pushed with [`Aggregated::push_external`]
    /// and cancelled with [`Aggregated::cancel`]. (Its driver is [`Driver::external`], which
    /// rules out running ahead.)
    pub(super) fn feed_externally(&mut self) {
        debug_assert!(
            !self.run_ahead,
            "an external driver rules out running ahead"
        );
        self.external = Some(ExternalState::default());
    }

    /// A request arrived now: released at the next settle. Its session index, which is also
    /// its request id.
    pub(super) fn push_external(&mut self, session: Session) -> Option<usize> {
        let now_ms = self.now_ms;
        self.requests.driver_mut().push_external(now_ms, session)
    }

    /// Request `id`'s client went away: the request leaves its engine (releasing its KV) at
    /// the next settle at which its worker is between passes.
    pub(super) fn cancel(&mut self, id: RequestId) {
        if let Some(external) = &mut self.external {
            external.cancels.push(id);
        }
    }

    /// What every rank holds now, the requests of the passes in flight counted as running
    /// until those passes end (also those that finish then, which their engine has let go).
    pub(super) fn load(&self) -> RankLoad {
        let mut load = self.pool.total_load();
        load.running += self.pool.finishing_in_flight();
        load
    }

    /// Applies the cancellations whose request's worker is between passes: the request leaves
    /// its scheduler, the collector records it canceled, the router forgets it. Whether any
    /// was applied.
    fn apply_cancels(&mut self) -> bool {
        let Some(external) = &mut self.external else {
            return false;
        };
        let mut cancels = std::mem::take(&mut external.cancels);
        let mut applied = false;
        cancels.retain(|&id| {
            if !self.requests.is_in_flight(id) {
                return false;
            }
            let Some(external) = &self.external else {
                return false;
            };
            let Some(&scheduler) = external.placed.get(&id) else {
                // Queued in the router: cancelled once it is placed.
                return true;
            };
            if self.pool.is_busy(scheduler / self.engine.dp_size.max(1)) {
                return true;
            }
            if self.pool.abort(scheduler, id) {
                self.collector
                    .on_terminal(id, self.now_ms, TerminalStatus::Canceled);
                self.release_router_load(id, true);
                self.on_terminal(id, false);
                applied = true;
            }
            false
        });
        if let Some(external) = &mut self.external {
            cancels.append(&mut external.cancels);
            external.cancels = cancels;
        }
        applied
    }

    /// Request `id` went to `scheduler` (remembered when fed from outside).
    fn note_sent(&mut self, id: RequestId, scheduler: usize) {
        if let Some(external) = &mut self.external {
            external.placed.insert(id, scheduler);
        }
    }

    /// Scaling ticks the policy was called for, and the changes it asked for.
    pub(super) fn planner_outcome(&mut self) -> Option<PlannerOutcome> {
        self.scaling.as_mut().map(Scaling::take_outcome)
    }

    pub(super) fn finish(mut self) -> Result<(Collector, RunFacts)> {
        if let Some(stop_ms) = self.past_cap_stop_ms {
            // The loop stopped at the cap: it would have stopped at every pass end up to it.
            self.accrue_run_ahead_ends_through(stop_ms);
        }
        let collector = self.collector.finish()?;
        let decode_worker_seconds = if self.single_worker {
            // The reference's single-worker path charges one worker for the report duration.
            collector.duration_s()
        } else {
            self.pool.worker_seconds()
        };
        let gpus = self.engine.gpus_per_worker() as u64;
        let facts = RunFacts {
            prefill_worker_seconds: 0.0,
            decode_worker_seconds,
            prefill_gpus_per_worker: 0,
            decode_gpus_per_worker: gpus,
            wall_time_ms: 0.0,
            workload_requests: self.requests.driver().total_turns(),
            interrupted: false,
        };
        Ok((collector, facts))
    }
}

impl Topology for Aggregated<'_> {
    type Arrival = ReleasedRequest;

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
        let queued = self.pool.router.queued();
        let hint = if queued > 0 && queued == self.requests.in_flight() {
            NO_WORKER_JOINED
        } else {
            "(no request can be scheduled: a request's prompt plus the output it has \
             generated so far may have outgrown the KV cache (a long output_length), or a \
             prompt may exceed max_num_batched_tokens with chunked prefill off)"
        };
        self.requests
            .dead_end("offline replay", &[("worker", &self.pool)], Some(hint))
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
        let others = self.next_event_but_ticks_ms();
        match &self.scaling {
            Some(scaling) => {
                scaling.next_event_ms(others, self.requests.in_flight(), self.pool.router.queued())
            }
            None => others,
        }
    }

    fn advance_to(&mut self, t_ms: f64) {
        self.accrue_run_ahead_ends_through(t_ms);
        self.accrue_to(t_ms);
        if t_ms != self.now_ms {
            self.round = 0;
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
            if self
                .external
                .as_ref()
                .is_some_and(|external| !external.cancels.is_empty())
            {
                changed |= self.apply_cancels();
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
            self.round += 1;
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
    /// Accrues provisioned worker time step by step through the pass ends applied ahead of
    /// the loop up to `t_ms`, as the loop would have stopped at each.
    fn accrue_run_ahead_ends_through(&mut self, t_ms: f64) {
        if !self.run_ahead || self.single_worker {
            return;
        }
        let (pool, accrued_ms) = (&mut self.pool, &mut self.accrued_ms);
        self.run_ahead_ends
            .take_through(t_ms, |at_ms| accrue_to(pool, accrued_ms, at_ms));
    }

    fn accrue_to(&mut self, t_ms: f64) {
        accrue_to(&mut self.pool, &mut self.accrued_ms, t_ms);
    }

    /// A turn is ready now and may be released (the single-worker closed loop releases only
    /// between passes).
    fn arrival_due(&self) -> bool {
        self.requests.has_ready(self.now_ms)
            && !(self.release_between_passes_only && self.pool.is_busy(0))
    }

    /// Runs the scaling tick due now, if any and the workload is not done. Whether one ran.
    fn tick(&mut self) -> Result<bool> {
        let done = self.requests.driver().is_drained();
        // Nothing else scheduled: the tick is there for requests waiting for a worker.
        let idle_before = self.next_event_but_ticks_ms().is_none();
        let queued_before = self.pool.router.queued();
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
            let startup_ms = self.engine.startup_time * 1000.0;
            self.pool.scale_to(target, self.now_ms, startup_ms)?;
            self.send_joined_placements();
        }
        if idle_before
            && self.next_event_but_ticks_ms().is_none()
            && self.pool.router.queued() == queued_before
        {
            if let Some(scaling) = &mut self.scaling {
                scaling.stop();
            }
        }
        Ok(true)
    }

    /// The next pass completion, arrival or worker startup.
    fn next_event_but_ticks_ms(&self) -> Option<f64> {
        let next_completion = self.completions.peek().map(|(at_ms, _)| at_ms);
        let arrivals_blocked = self.release_between_passes_only && self.pool.is_busy(0);
        let next_arrival = if arrivals_blocked {
            None
        } else {
            self.requests.next_ready_ms()
        };
        earliest(
            earliest(next_completion, next_arrival),
            self.pool.next_ready_ms(),
        )
    }

    /// Sends a released request to the scheduler the router picks, or parks it in the KV
    /// router's queue, or rejects it (a router queue limit) as an engine rejection would.
    fn route(&mut self, request: EngineRequest, hints: RouteHints) {
        let routed = self.pool.route(hints.route_input(
            request.id,
            &request.prompt,
            self.engine.block_size,
            self.now_ms,
        ));
        match routed {
            Routed::Placed {
                target,
                overlap_blocks,
            } => {
                self.note_placement(overlap_blocks, request.prompt.len());
                self.note_sent(request.id, target);
                self.pool.enqueue(target, request);
            }
            Routed::Queued => {
                self.parked.insert(request.id, request);
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
            let request = self
                .parked
                .remove(&placement.id)
                .expect("the router places only parked requests");
            self.note_placement(placement.overlap_blocks, request.prompt.len());
            self.note_sent(request.id, placement.target);
            self.pool.enqueue(placement.target, request);
        }
    }

    /// The planner's traffic window counts the KV router's cache hits.
    fn note_placement(&mut self, overlap_blocks: u32, isl: usize) {
        if let (Some(scaling), true) = (&mut self.scaling, self.pool.routes_on_kv_events()) {
            let isl_blocks = isl.div_ceil(self.engine.block_size.max(1));
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
            let rank = self.round << 32 | worker as u64;
            if self.run_ahead {
                self.run_ahead(worker, now_ms, start.end_ms, rank);
            } else {
                self.completions.push(start.end_ms, now_ms, rank, worker);
            }
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

    /// `worker` started a pass at `start_ms` (the `rank`-th start then) that ends at `end_ms`:
    /// applies its end and runs the next pass at once, as long as nothing but this worker's own
    /// tokens can happen before that next pass starts; then leaves the last pass started to
    /// end in the loop.
    ///
    /// A pass end may be applied ahead of the loop when
    /// - it comes before the horizon: strictly before the next scheduled arrival (an arrival
    ///   at the end itself would be routed before the next pass starts), and within the time
    ///   cap; only arrivals reach a worker (see `run_ahead` in [`Aggregated::new`]), so the
    ///   next pass starts with the very state it would in the loop;
    /// - it holds only tokens (no completion or rejection: those stay events of the loop, in
    ///   its order), none of them a first token the KV router hears of;
    /// - the next pass only decodes and takes time ([`Pool::next_pass_decodes_only`]): it
    ///   admits nothing and ends after it starts, as the one the loop would start at the end.
    ///
    /// What that changes is only the order of calls of different workers that the loop
    /// would interleave: tokens to the collector and `Requests` (per request; a request runs
    /// on one worker), and KV events to the router (per target; read only when routing, at or
    /// after the horizon). The pass left to the loop is queued where the loop would have
    /// queued it: as the start at `end_ms` in its first round (`rank` = the worker id).
    fn run_ahead(&mut self, worker: usize, mut start_ms: f64, mut end_ms: f64, mut rank: u64) {
        let horizon = self.requests.next_ready_ms().unwrap_or(f64::INFINITY);
        let cap_ms = self.spec.max_sim_time_ms.unwrap_or(f64::INFINITY);
        let may_end_ahead = move |end_ms: f64| end_ms < horizon && end_ms <= cap_ms;
        let mut first = true;
        while may_end_ahead(end_ms)
            && self.pool.next_pass_decodes_only(worker)
            && self.pass_end_is_plain(worker, first)
        {
            // The events stay in the pool until the next pass starts.
            self.pool.end_pass_in_place(worker, end_ms);
            self.pool.apply_pass_end_kv_events(worker);
            self.apply_tokens(worker, end_ms);
            if !self.single_worker {
                // (One worker reports the run's duration as its worker time.)
                self.run_ahead_ends.push(worker, end_ms);
            }
            self.passes_run_ahead += 1;
            let (mut ends, mut ids) = (
                std::mem::take(&mut self.ahead_ends),
                std::mem::take(&mut self.ahead_ids),
            );
            ends.clear();
            let next_start_ms = end_ms;
            let next_end_ms = match self.pool.run_decode_passes(
                worker,
                next_start_ms,
                may_end_ahead,
                &mut ends,
                &mut ids,
            ) {
                Some(last_end_ms) => {
                    // Every pass but the last ended ahead, each a token for every request.
                    self.apply_decode_pass_ends(worker, &ends, &ids);
                    last_end_ms
                }
                None => self.pool.start_decode_pass(worker, next_start_ms).end_ms,
            };
            debug_assert!(next_end_ms > next_start_ms, "a decode-only pass takes time");
            start_ms = ends.last().copied().unwrap_or(next_start_ms);
            (end_ms, rank) = (next_end_ms, worker as u64);
            (self.ahead_ends, self.ahead_ids) = (ends, ids);
            first = false;
        }
        self.completions.push(end_ms, start_ms, rank, worker);
    }

    /// Applies ahead of the loop the ends `ends_ms` of decode-only passes of `worker` that ran
    /// back to back, each a token for every request of `ids`.
    fn apply_decode_pass_ends(&mut self, worker: usize, ends_ms: &[f64], ids: &[RequestId]) {
        if ends_ms.is_empty() {
            return;
        }
        if !self.single_worker {
            for &end_ms in ends_ms {
                self.run_ahead_ends.push(worker, end_ms);
            }
        }
        self.passes_run_ahead += ends_ms.len() as u64;
        if self.counts_tokens {
            for &id in ids {
                self.requests.on_tokens(id, ends_ms.len());
            }
        }
        self.collector.on_one_token_each_pass(ends_ms, ids);
    }

    /// The events of `worker`'s pass in flight are tokens only, and (for the `first` pass of a
    /// run-ahead, which may have prefilled) none is a first token the KV router hears of (a
    /// decode-only pass emits none).
    fn pass_end_is_plain(&self, worker: usize, first: bool) -> bool {
        let first_tokens_matter = first && self.counts_tokens && self.pool.routes_on_kv_events();
        self.pool.pending(worker).iter().all(|event| match *event {
            PassEvent::Tokens { id, .. } => !first_tokens_matter || self.requests.has_generated(id),
            _ => false,
        })
    }

    /// Applies the tokens of `worker`'s pass that ended at `at_ms` ahead of the loop (tokens
    /// only, none a first token the KV router hears of).
    fn apply_tokens(&mut self, worker: usize, at_ms: f64) {
        for &event in self.pool.pending(worker) {
            let PassEvent::Tokens { id, count } = event else {
                unreachable!("a pass applied ahead holds only tokens")
            };
            if self.counts_tokens {
                self.requests.on_tokens(id, count);
            }
            self.collector.on_tokens(id, at_ms, count);
        }
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
        let mut index = 0;
        while index < events.len() {
            if !self.counts_tokens {
                // Tokens then go to the collector alone: a run of single ones in one call.
                index += self
                    .collector
                    .on_single_tokens(&events[index..], self.now_ms);
                if index == events.len() {
                    break;
                }
            }
            let event = events[index];
            index += 1;
            match event {
                PassEvent::Tokens { id, count } => {
                    let first_tokens = self.counts_tokens && self.requests.on_tokens(id, count);
                    self.collector.on_tokens(id, self.now_ms, count);
                    // A token followed by the request's completion is its final token: the
                    // router then releases everything at once, at the completion. Later tokens
                    // release nothing (the router frees a prefill once), so they skip it.
                    let final_token = events.get(index) == Some(&PassEvent::Completed { id });
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
        if let Some(external) = &mut self.external {
            external.placed.remove(&id);
        }
        if let Some(scaling) = &mut self.scaling {
            scaling.traffic.on_end(id, completed);
        }
        self.requests.on_ended(id, self.now_ms, completed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use proptest::prelude::*;

    use super::*;
    use crate::config::{
        Deployment, EngineArgs, EngineType, PreemptionMode, ReplayMode, RouterMode, Sla,
        TraceFormat, TraceSpec, WorkloadSpec,
    };
    use crate::report::{Report, RequestRecord};
    use crate::sim::collector_front::CollectorThread;
    use crate::sim::event_loop::{self, VirtualClock};
    use crate::workload::{Prompt, Session, Turn, Workload};

    /// Runs `workload` through aggregated workers, with run-ahead as the spec allows it or
    /// turned off; also returns the pass ends applied ahead of the loop.
    fn run(
        spec: &ReplaySpec,
        workload: Workload,
        run_ahead: bool,
    ) -> (Report, Vec<RequestRecord>, u64) {
        let driver = Driver::new(workload, spec.arrivals).expect("valid workload");
        let collector = Collector::new(spec.sla, spec.capture_requests);
        let collector = CollectorFront::start(
            collector,
            spec.capture_requests,
            CollectorThread::SameThread,
        );
        let Deployment::Aggregated(workers) = &spec.deployment else {
            panic!("an aggregated spec")
        };
        let mut sim = Aggregated::new(spec, workers, driver, None, collector);
        sim.run_ahead &= run_ahead;
        let cancel = AtomicBool::new(false);
        event_loop::run(
            &mut sim,
            spec.max_sim_time_ms,
            &mut VirtualClock,
            &cancel,
            None,
        )
        .expect("the run ends");
        let passes_run_ahead = sim.passes_run_ahead;
        let (collector, facts) = sim.finish().expect("the collector finishes");
        let (report, records) = collector.finish(facts);
        (report, records, passes_run_ahead)
    }

    fn arb_session() -> impl Strategy<Value = Session> {
        (
            0.0f64..3000.0,
            prop::collection::vec(0u32..10, 1..8),
            1usize..3000,
            0usize..300,
        )
            .prop_map(|(ts, ids, input, output)| {
                let block_size = 256;
                Session {
                    id: "".into(),
                    first_timestamp_ms: Some(ts),
                    turns: vec![Turn {
                        input_length: input.min(ids.len() * block_size as usize),
                        max_output_tokens: output,
                        delay_ms: 0.0,
                        prompt: Prompt::hash_ids(ids, block_size),
                        priority: 0,
                        strict_priority: 0,
                        policy_class: None,
                    }]
                    .into(),
                }
            })
    }

    fn arb_workload() -> impl Strategy<Value = Workload> {
        prop::collection::vec(arb_session(), 1..24).prop_map(|mut sessions| {
            for (i, session) in sessions.iter_mut().enumerate() {
                session.id = format!("s{i}").into();
            }
            Workload {
                sessions,
                ..Workload::default()
            }
        })
    }

    fn arb_spec() -> impl Strategy<Value = ReplaySpec> {
        (
            (
                prop_oneof![Just(EngineType::Vllm), Just(EngineType::Trtllm)],
                prop_oneof![Just(16usize), Just(64)],
                60usize..600,
                prop_oneof![Just(None), Just(Some(2usize)), Just(Some(8))],
                any::<bool>(),
                prop_oneof![Just(PreemptionMode::Lifo), Just(PreemptionMode::Fifo)],
                1usize..3,
                prop_oneof![Just(None), Just(Some(1000usize))],
            ),
            1usize..5,
            any::<bool>(),
            prop_oneof![Just(None), (100.0f64..20_000.0).prop_map(Some)],
            0.5f64..3.0,
        )
            .prop_map(
                |(
                    (engine_type, block_size, blocks, seqs, caching, preemption, dp, max_len),
                    num_workers,
                    kv,
                    cap_ms,
                    speedup,
                )| {
                    let engine = EngineArgs {
                        engine_type,
                        num_gpu_blocks: blocks.max(2600 / block_size + 2),
                        block_size,
                        max_num_seqs: seqs,
                        enable_prefix_caching: caching,
                        preemption_mode: preemption,
                        dp_size: dp,
                        max_model_len: max_len,
                        ..EngineArgs::default()
                    };
                    ReplaySpec {
                        router_mode: if kv && num_workers * dp > 1 {
                            RouterMode::KvRouter
                        } else {
                            RouterMode::RoundRobin
                        },
                        workload: WorkloadSpec::Trace(TraceSpec {
                            files: Vec::new(),
                            format: TraceFormat::Mooncake,
                            block_size: 256,
                        }),
                        deployment: Deployment::Aggregated(PoolSpec {
                            engine,
                            workers: num_workers,
                        }),
                        router_config: None,
                        arrivals: ArrivalMode::Timestamps { speedup },
                        replay_mode: ReplayMode::Offline,
                        max_sim_time_ms: cap_ms,
                        sla: Sla::default(),
                        capture_requests: true,
                        planner: None,
                    }
                },
            )
    }

    proptest! {
        /// Pass ends come out in time order across workers, each exactly once and only once
        /// due, whatever the number of workers with ends due (pairwise merges, the last one
        /// as the ends are handed out) and however they tie.
        #[test]
        fn run_ahead_ends_are_taken_in_time_order(
            workers in 1usize..11,
            ops in prop::collection::vec((0usize..10, 0u32..40, any::<bool>()), 0..300),
        ) {
            let mut ends = RunAheadEnds::new(workers);
            let mut latest = vec![0.0; workers];
            let mut pending: Vec<f64> = Vec::new();
            let mut now_ms = 0.0;
            for (worker, quarters, take) in ops {
                if take {
                    now_ms += f64::from(quarters) / 4.0;
                    let mut taken = Vec::new();
                    ends.take_through(now_ms, |at_ms| taken.push(at_ms));
                    let mut due: Vec<f64> =
                        pending.iter().copied().filter(|&at_ms| at_ms <= now_ms).collect();
                    due.sort_by(f64::total_cmp);
                    pending.retain(|&at_ms| at_ms > now_ms);
                    prop_assert_eq!(taken, due);
                } else {
                    // Each worker's ends are later than its earlier ones; workers tie often.
                    let worker = worker % workers;
                    latest[worker] += f64::from(quarters + 1) / 4.0;
                    ends.push(worker, latest[worker]);
                    pending.push(latest[worker]);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Running workers ahead of the loop changes nothing: the report (worker seconds
        /// included) and every record are those of the run that steps through every pass end.
        #[test]
        fn running_ahead_changes_nothing(spec in arb_spec(), workload in arb_workload()) {
            let (report, records, _) = run(&spec, workload.clone(), true);
            let (stepped_report, stepped_records, none) = run(&spec, workload, false);
            prop_assert_eq!(none, 0);
            prop_assert_eq!(report, stepped_report);
            prop_assert_eq!(records, stepped_records);
        }
    }

    #[test]
    fn open_loop_decode_runs_are_run_ahead() {
        let sessions = (0..8)
            .map(|i| Session {
                id: format!("s{i}").into(),
                first_timestamp_ms: Some(i as f64 * 500.0),
                turns: vec![Turn {
                    input_length: 1000,
                    max_output_tokens: 200,
                    delay_ms: 0.0,
                    prompt: Prompt::hash_ids(vec![i, i + 1, i + 2, i + 3], 256),
                    priority: 0,
                    strict_priority: 0,
                    policy_class: None,
                }]
                .into(),
            })
            .collect();
        let workload = Workload {
            sessions,
            ..Workload::default()
        };
        let mut spec = ReplaySpec {
            deployment: Deployment::Aggregated(PoolSpec {
                engine: EngineArgs::default(),
                workers: 2,
            }),
            ..base_spec()
        };
        let (report, records, ahead) = run(&spec, workload.clone(), true);
        assert!(ahead > 1000, "{ahead} pass ends run ahead");
        assert_eq!((report, records), {
            let (r, rec, _) = run(&spec, workload.clone(), false);
            (r, rec)
        });
        // Closed loop: an end releases the next turn, so nothing runs ahead.
        spec.arrivals = ArrivalMode::Concurrency { limit: 2 };
        assert_eq!(run(&spec, workload, true).2, 0);
    }

    fn base_spec() -> ReplaySpec {
        ReplaySpec {
            router_mode: RouterMode::RoundRobin,
            workload: WorkloadSpec::Trace(TraceSpec {
                files: Vec::new(),
                format: TraceFormat::Mooncake,
                block_size: 256,
            }),
            deployment: Deployment::Aggregated(PoolSpec {
                engine: EngineArgs::default(),
                workers: 1,
            }),
            router_config: None,
            arrivals: ArrivalMode::Timestamps { speedup: 1.0 },
            replay_mode: ReplayMode::Offline,
            max_sim_time_ms: None,
            sla: Sla::default(),
            capture_requests: true,
            planner: None,
        }
    }
}
