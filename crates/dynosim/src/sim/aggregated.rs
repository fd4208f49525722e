//! Aggregated workers: `num_workers` workers of `dp_size` ranks each behind one router, and the
//! event loop that drives them (see the module doc of `sim` for the ordering rules).

use super::common::{kv_router, next_arrival, EventQueue, RequestOrigin, RouteHints, WorkerState};
use super::driver::{Driver, Terminal};
use super::event_loop::Topology;
use crate::config::RouterMode;
use crate::config::{ArrivalMode, ReplaySpec};
use crate::engine::kv::KvEvent;
use crate::engine::{EngineRequest, PassEvent, RankScheduler, RequestId};
use crate::error::{Error, Result};
use crate::report::{Collector, RunFacts};
use crate::router::kv::Placement;
use crate::router::round_robin::RoundRobin;
use crate::router::{RouteInput, Routed, Router};

/// Aggregated workers: `num_workers` workers of `dp_size` ranks each, behind one router.
pub(super) struct Aggregated<'s> {
    spec: &'s ReplaySpec,
    now_ms: f64,
    schedulers: Vec<RankScheduler>,
    workers: Vec<WorkerState>,
    dp_size: usize,
    /// Pass completions, by worker.
    completions: EventQueue<usize>,
    driver: Driver,
    router: Router,
    /// Requests held in the KV router's queue, by id, until it places them.
    parked: Vec<Option<EngineRequest>>,
    /// Scratch: queued requests the KV router placed.
    placements: Vec<Placement>,
    /// Scratch: KV events drained from a rank.
    kv_events: Vec<KvEvent>,
    collector: Collector,
    origins: Vec<RequestOrigin>,
    in_flight: usize,
    /// The reference's single-worker path releases closed-loop arrivals only between passes.
    release_between_passes_only: bool,
    /// Integral of the provisioned worker count over virtual time (ms).
    worker_ms: f64,
    single_worker: bool,
    /// Once past the time cap: the last timestamp still processed.
    past_cap_stop_ms: Option<f64>,
    events: Vec<PassEvent>,
}

impl<'s> Aggregated<'s> {
    pub(super) fn new(spec: &'s ReplaySpec, driver: Driver) -> Self {
        let dp_size = spec.engine.dp_size;
        let mut schedulers: Vec<RankScheduler> = (0..spec.num_workers * dp_size)
            .map(|index| RankScheduler::new(&spec.engine, index))
            .collect();
        let router = match spec.router_mode {
            RouterMode::RoundRobin => {
                Router::RoundRobin(RoundRobin::new(spec.num_workers, dp_size))
            }
            RouterMode::KvRouter => {
                // Only the KV router reads the engines' cache events.
                schedulers
                    .iter_mut()
                    .for_each(RankScheduler::record_kv_events);
                Router::Kv(Box::new(kv_router(
                    spec.router_config.as_ref(),
                    &spec.engine,
                    schedulers.len(),
                    |_| {},
                )))
            }
        };
        let single_worker = spec.num_workers == 1 && dp_size == 1;
        let closed_loop = matches!(spec.arrivals, ArrivalMode::Concurrency { .. });
        Self {
            spec,
            now_ms: 0.0,
            schedulers,
            workers: (0..spec.num_workers)
                .map(|_| WorkerState::default())
                .collect(),
            dp_size,
            completions: EventQueue::new(),
            router,
            parked: Vec::new(),
            placements: Vec::new(),
            kv_events: Vec::new(),
            collector: Collector::new(spec.sla, spec.capture_requests),
            origins: Vec::with_capacity(driver.total_turns()),
            driver,
            in_flight: 0,
            release_between_passes_only: single_worker && closed_loop,
            worker_ms: 0.0,
            single_worker,
            past_cap_stop_ms: None,
            events: Vec::new(),
        }
    }

    pub(super) fn finish(self) -> (Collector, RunFacts) {
        let decode_worker_seconds = if self.single_worker {
            // The reference's single-worker path charges one worker for the report duration.
            self.collector.duration_s()
        } else {
            self.worker_ms / 1000.0
        };
        let gpus = self.spec.engine.gpus_per_worker() as u64;
        let facts = RunFacts {
            prefill_worker_seconds: 0.0,
            decode_worker_seconds,
            prefill_gpus_per_worker: 0,
            decode_gpus_per_worker: gpus,
            wall_time_ms: 0.0,
        };
        (self.collector, facts)
    }
}

impl Topology for Aggregated<'_> {
    fn is_done(&self) -> bool {
        self.driver.is_drained()
    }

    /// The error for a run where nothing can happen any more, naming the blocking request when
    /// an engine can tell which one it is.
    fn dead_end(&self) -> Error {
        let mut message = format!(
            "offline replay reached a dead end with {} in-flight requests remaining",
            self.in_flight
        );
        let blocked = self
            .schedulers
            .iter()
            .enumerate()
            .find_map(|(scheduler, s)| s.blocked_request().map(|id| (scheduler, id)));
        match blocked {
            Some((scheduler, id)) => {
                let origin = self.origins[id];
                message.push_str(&format!(
                    ": the request of session {} turn {} ({} prompt tokens) can never be \
                     scheduled on worker {} (dp rank {}); its prompt and output reservation do \
                     not fit the KV cache",
                    self.driver.session_id(origin.session),
                    origin.turn,
                    origin.input_length,
                    scheduler / self.dp_size,
                    scheduler % self.dp_size,
                ));
            }
            None => message.push_str(
                " (no request can be scheduled: a request's prompt plus the output it has \
                 generated so far may have outgrown the KV cache (a long output_length), or a \
                 prompt may exceed max_num_batched_tokens with chunked prefill off)",
            ),
        }
        Error::runtime(message)
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
        let arrivals_blocked = self.release_between_passes_only && self.workers[0].busy;
        let next_arrival = if arrivals_blocked {
            None
        } else {
            self.driver.next_ready_ms()
        };
        match (next_completion, next_arrival) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn advance_to(&mut self, t_ms: f64) {
        let dt = t_ms - self.now_ms;
        if dt > 0.0 {
            self.worker_ms += self.workers.len() as f64 * dt;
        }
        self.now_ms = t_ms;
    }

    /// Pass completions, then arrivals, then pass starts, until the state stops changing.
    fn settle(&mut self) -> Result<()> {
        loop {
            let mut changed = false;
            while let Some(worker) = self.completions.pop_due_if(self.now_ms, |_| true) {
                self.workers[worker].busy = false;
                self.apply_pass_end_kv_events(worker);
                let events = std::mem::take(&mut self.workers[worker].pending);
                self.apply_pass_end(&events);
                self.workers[worker].pending = events;
                self.workers[worker].pending.clear();
                changed = true;
            }
            if !(self.release_between_passes_only && self.workers[0].busy) {
                changed |= self.release_arrivals();
            }
            for worker in 0..self.workers.len() {
                changed |= self.start_pass(worker);
            }
            if !changed {
                return Ok(());
            }
        }
    }
}

impl Aggregated<'_> {
    /// Releases every turn ready by now, routing each before the next.
    fn release_arrivals(&mut self) -> bool {
        let mut released = false;
        while let Some(arrival) = next_arrival(
            &mut self.driver,
            self.now_ms,
            self.spec.arrivals,
            &mut self.collector,
            &mut self.origins,
        ) {
            let request = EngineRequest {
                id: arrival.id,
                prompt: arrival.prompt,
                max_output_tokens: arrival.max_output_tokens,
            };
            let hints = arrival.hints;
            self.in_flight += 1;
            self.route(request, hints);
            released = true;
        }
        released
    }

    /// Sends a released request to the scheduler the router picks, or parks it in the KV
    /// router's queue, or rejects it (a router queue limit) as an engine rejection would.
    fn route(&mut self, request: EngineRequest, hints: RouteHints) {
        let routed = self.router.route(RouteInput {
            id: request.id,
            prompt: &request.prompt,
            block_size: self.spec.engine.block_size,
            arrival_ms: hints.arrival_ms,
            now_ms: self.now_ms,
            priority: hints.priority,
            strict_priority: hints.strict_priority,
            policy_class: hints.policy_class.as_deref(),
        });
        match routed {
            Routed::Placed { target, .. } => self.dispatch(request, target),
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

    fn dispatch(&mut self, request: EngineRequest, scheduler: usize) {
        self.schedulers[scheduler].enqueue(request);
        self.workers[scheduler / self.dp_size].stalled = false;
    }

    /// Tells the KV router that request `id` emitted its first token (`terminal` false) or
    /// ended, then dispatches the queued requests it places in response.
    fn release_router_load(&mut self, id: RequestId, terminal: bool) {
        if !self.router.reads_kv_events() {
            return;
        }
        let mut placements = std::mem::take(&mut self.placements);
        if terminal {
            self.router.on_terminal(id, self.now_ms, &mut placements);
        } else {
            self.router.on_first_token(id, self.now_ms, &mut placements);
        }
        for placement in placements.drain(..) {
            let request = self.parked[placement.id]
                .take()
                .expect("the router places only parked requests");
            self.dispatch(request, placement.target);
        }
        self.placements = placements;
    }

    /// Starts a pass on `worker` if it is idle and has work. All of a worker's DP ranks pass
    /// together and the group ends with its slowest rank. Returns whether anything happened.
    fn start_pass(&mut self, worker: usize) -> bool {
        let state = &self.workers[worker];
        if state.busy || state.stalled {
            return false;
        }
        let ranks = worker * self.dp_size..(worker + 1) * self.dp_size;
        if !ranks.clone().any(|s| self.schedulers[s].has_work()) {
            return false;
        }
        let mut pending = std::mem::take(&mut self.workers[worker].pending);
        // The group ends with its slowest rank (never before it started).
        let mut end_ms = self.now_ms;
        let mut scheduled_work = false;
        for scheduler in ranks {
            if !self.schedulers[scheduler].has_work() {
                continue;
            }
            self.events.clear();
            let time = self.schedulers[scheduler].run_pass_timed(&mut self.events);
            if self.router.reads_kv_events() && self.schedulers[scheduler].kv_events_at_pass_start()
            {
                self.schedulers[scheduler].drain_kv_events(&mut self.kv_events);
                self.router.apply_kv_events(scheduler, &self.kv_events);
            }
            end_ms = end_ms.max(time.end_ms(self.now_ms));
            scheduled_work |= time.scheduled_requests > 0 || !self.events.is_empty();
            for &event in &self.events {
                match event {
                    PassEvent::Admitted { id, reused_tokens } => {
                        self.collector
                            .on_admit(id, self.now_ms, reused_tokens, scheduler)
                    }
                    other => pending.push(other),
                }
            }
        }
        if end_ms > self.now_ms {
            self.workers[worker].pending = pending;
            self.workers[worker].busy = true;
            self.completions.push(end_ms, worker);
            return true;
        }
        // A pass that takes no time completes at once, KV events included.
        self.apply_pass_end_kv_events(worker);
        self.apply_pass_end(&pending);
        pending.clear();
        self.workers[worker].pending = pending;
        if !scheduled_work {
            // Nothing could run (e.g. the head request does not fit the KV cache); retrying
            // before the worker receives a new request would change nothing.
            self.workers[worker].stalled = true;
        }
        scheduled_work
    }

    /// KV events of engines that make them visible when a pass completes (SGLang).
    fn apply_pass_end_kv_events(&mut self, worker: usize) {
        if !self.router.reads_kv_events() {
            return;
        }
        for scheduler in worker * self.dp_size..(worker + 1) * self.dp_size {
            if !self.schedulers[scheduler].kv_events_at_pass_start() {
                self.schedulers[scheduler].drain_kv_events(&mut self.kv_events);
                self.router.apply_kv_events(scheduler, &self.kv_events);
            }
        }
    }

    /// Applies the end-of-pass events of one pass at `now_ms`.
    fn apply_pass_end(&mut self, events: &[PassEvent]) {
        for (index, &event) in events.iter().enumerate() {
            match event {
                PassEvent::Tokens { id, count } => {
                    self.origins[id].generated += count;
                    self.collector.on_tokens(id, self.now_ms, count);
                    // A token followed by the request's completion is its final token: the
                    // router then releases everything at once, at the completion.
                    let final_token = events.get(index + 1) == Some(&PassEvent::Completed { id });
                    if !final_token {
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
        let origin = self.origins[id];
        self.in_flight -= 1;
        let how = Terminal {
            request_id: id,
            output_tokens: origin.generated,
            completed,
        };
        self.driver
            .on_terminal(origin.session, origin.turn, self.now_ms, how);
    }
}
