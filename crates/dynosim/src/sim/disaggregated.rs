//! Disaggregated workers: a prefill pool and a decode pool behind one router each, and the
//! KV handoff between them (engine.md §7, router.md §5).
//!
//! Every request is first prefilled on a prefill worker, whose passes are hidden (only
//! admissions are recorded), then handed off to a decode worker, whose tokens are the ones
//! the user sees. Each request's handoff is the state machine of [`super::handoff`]: this
//! topology executes the *actions* it issues (FIFO, each at most once) and feeds back *facts*
//! (what the engines report) and how each action went:
//!
//! - vLLM, source first: submit the prefill; when the prefill worker finishes, it keeps the
//!   prompt's KV (source held) and the decode pool is asked for a destination; the decode
//!   worker reserves KV for the prompt (FIFO; it may reuse resident prefix blocks and waits
//!   when it lacks capacity); then the KV transfer takes its time; then the destination is
//!   activated (the request waits on the decode worker with its prompt computed) and the
//!   source released.
//! - SGLang, destination first: the decode KV is reserved at arrival, then the prefill runs.
//!
//! Actions that touch a worker in the middle of a pass (activating a destination, releasing or
//! cancelling a source) wait for that pass to end. At one timestamp the loop settles, in this
//! order and until nothing changes: pass completions (while they are next in the event queue),
//! transfer completions (likewise), arrivals, pending actions, then passes on idle prefill
//! workers and on idle decode workers (lowest worker id first, restarting after each pass that
//! did something). This is the reference's order. With a planner, workers whose startup
//! ended come up after the transfers, draining workers that hold nothing retire after the
//! passes, and a due scaling tick runs once all of that has settled.

use std::collections::VecDeque;

use super::collector_front::CollectorFront;
use super::driver::Driver;
use super::event_loop::{ProgressPoint, Topology};
use super::event_queue::{earliest, EventQueue};
use super::handoff::{Action, Event as HandoffEvent, Handoff, Order, Outcome};
use super::pool::Pool;
use super::pool_router::pool_router;
use super::requests::{ReleasedRequest, Requests, RouteHints};
use super::scaling::{Scaling, NO_WORKER_JOINED};
use crate::config::router_config::PrefillLoadModel;
use crate::config::{
    EngineArgs, EngineType, KvTransferTimingMode, PoolSpec, ReplaySpec, WorkloadSpec,
};
use crate::engine::{DestinationRefused, DestinationReserved, EngineRequest, PassEvent, RequestId};
use crate::error::{Error, Result};
use crate::planner::{PlannerOutcome, ScalingPolicy, ScalingSnapshot};
use crate::report::record::TerminalStatus;
use crate::report::{Collector, HandoffStage, RunFacts};
use crate::router::kv::Placement;
use crate::router::Routed;
use crate::tokens::TokenSeq;

/// Which pool a worker belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Prefill,
    Decode,
}

/// A scheduled event.
#[derive(Clone, Copy, Debug)]
enum Event {
    PassEnd { stage: Stage, worker: usize },
    TransferDone { id: RequestId },
}

/// A disaggregated request: its handoff and what the topology keeps for it.
#[derive(Debug)]
struct DisaggRequest {
    handoff: Handoff,
    /// The prompt and output the decode side serves (taken when the destination reserves).
    prompt: Option<TokenSeq>,
    max_output_tokens: usize,
    hints: Option<RouteHints>,
    prefill_worker: Option<usize>,
    decode_worker: Option<usize>,
    /// Its prefill (decode) router counts it.
    prefill_routed: bool,
    decode_routed: bool,
    /// Still counted in flight (its decode has not ended).
    counted: bool,
}

/// How long the KV of a prompt takes to move, from the prefill workers' settings.
#[derive(Clone, Copy, Debug)]
struct TransferTiming {
    mode: KvTransferTimingMode,
    bytes_per_token: Option<u64>,
    bandwidth_gb_s: Option<f64>,
}

impl TransferTiming {
    fn of(prefill: &EngineArgs) -> Self {
        Self {
            mode: prefill.kv_transfer_timing_mode,
            bytes_per_token: prefill.kv_bytes_per_token,
            bandwidth_gb_s: prefill.kv_transfer_bandwidth,
        }
    }

    /// Milliseconds to move the prompt (`prompt_tokens` in full, or `missing_tokens` the
    /// destination lacks); 0 unless both the size and the bandwidth are known.
    fn delay_ms(&self, prompt_tokens: usize, missing_tokens: usize) -> f64 {
        let tokens = match self.mode {
            KvTransferTimingMode::FullPrompt => prompt_tokens,
            KvTransferTimingMode::DestinationMissing => missing_tokens,
        };
        match (self.bytes_per_token, self.bandwidth_gb_s) {
            (Some(bytes), Some(bandwidth)) if bandwidth > 0.0 => {
                tokens as f64 * bytes as f64 / (bandwidth * 1e9) * 1000.0
            }
            _ => 0.0,
        }
    }
}

/// Where a routing decision left a request.
enum Routing {
    /// On this worker, with this many prompt tokens cached there as far as the router knew.
    Placed {
        worker: usize,
        overlap_tokens: usize,
    },
    Queued,
    Rejected,
}

/// Prefill and decode pools joined by KV handoffs.
pub(super) struct Disaggregated<'s> {
    spec: &'s ReplaySpec,
    now_ms: f64,
    order: Order,
    /// The prefill pass generates the whole output (the reference's vLLM prefill workers do
    /// when the workload plans its output tokens) rather than stopping at the first token.
    prefill_full_output: bool,
    transfer: TransferTiming,
    prefill: Pool,
    decode: Pool,
    events: EventQueue<Event>,
    actions: VecDeque<(RequestId, Action)>,
    released: Requests,
    collector: CollectorFront,
    requests: Vec<DisaggRequest>,
    /// Scratch: queued prefills the prefill router placed.
    placements: Vec<Placement>,
    /// The planner in the loop, if any.
    scaling: Option<Scaling<'s>>,
}

impl<'s> Disaggregated<'s> {
    pub(super) fn new(
        spec: &'s ReplaySpec,
        prefill_pool: &'s PoolSpec,
        decode_pool: &'s PoolSpec,
        driver: Driver,
        policy: Option<&'s mut dyn ScalingPolicy>,
        collector: CollectorFront,
    ) -> Self {
        let prefill_args = &prefill_pool.engine;
        let order = match prefill_args.engine_type {
            EngineType::Sglang => Order::DestinationFirst,
            _ => Order::SourceFirst,
        };
        // Prefill placement follows cached prefixes; its own block tracking is off.
        let prefill_router = pool_router(spec, prefill_pool, 1, |config| {
            config.router_track_active_blocks = false
        });
        // Decode placement balances active blocks; it never sees cache events.
        let decode_router = pool_router(spec, decode_pool, 1, |config| {
            config.overlap_score_credit = 0.0;
            config.router_assume_kv_reuse = false;
            config.router_track_prefill_tokens = false;
            config.router_prefill_load_model = PrefillLoadModel::None;
        });
        // Only the prefill pool's KV router reads cache events.
        let prefill_routes_on_kv_events = prefill_router.reads_kv_events();
        let prefill = Pool::new(
            prefill_args,
            prefill_pool.workers,
            1,
            prefill_router,
            prefill_routes_on_kv_events,
        );
        let mut decode = Pool::new(
            &decode_pool.engine,
            decode_pool.workers,
            1,
            decode_router,
            false,
        );
        let mut prefill = prefill;
        if policy.is_some() {
            prefill.record_fpm(0.0);
            decode.record_fpm(0.0);
        }
        // Only the independent synthetic requests come without planned output tokens.
        let planned_outputs = match &spec.workload {
            WorkloadSpec::Synthetic(synthetic) => {
                crate::workload::synthetic::uses_session_workload(synthetic)
            }
            WorkloadSpec::Trace(_) => true,
        };
        Self {
            spec,
            now_ms: 0.0,
            order,
            prefill_full_output: order == Order::SourceFirst && planned_outputs,
            transfer: TransferTiming::of(prefill_args),
            prefill,
            decode,
            events: EventQueue::new(),
            actions: VecDeque::new(),
            collector,
            requests: Vec::new(),
            released: Requests::new(driver, prefill_args.front_delay_ms()),
            placements: Vec::new(),
            scaling: policy.map(|policy| Scaling::new(policy, true)),
        }
    }

    /// Scaling ticks the policy was called for, and the changes it asked for.
    pub(super) fn planner_outcome(&mut self) -> Option<PlannerOutcome> {
        self.scaling.as_mut().map(Scaling::take_outcome)
    }

    /// Runs the scaling tick due now, if any and the workload is not done. Whether one ran.
    fn tick(&mut self) -> Result<bool> {
        let done = self.is_done();
        // Nothing else scheduled: the tick is there for requests waiting for a worker.
        let idle_before = self.next_event_but_ticks_ms().is_none();
        let queued_before = self.queued();
        let Some(scaling) = &mut self.scaling else {
            return Ok(false);
        };
        if done || !scaling.due(self.now_ms) {
            return Ok(false);
        }
        let snapshot = ScalingSnapshot {
            now_ms: self.now_ms,
            prefill_fpm: self.prefill.take_fpm(self.now_ms),
            decode_fpm: self.decode.take_fpm(self.now_ms),
            prefill: self.prefill.workers_by_phase(),
            decode: self.decode.workers_by_phase(),
            ..ScalingSnapshot::default()
        };
        let decision = scaling.decide(snapshot)?;
        if let Some(target) = decision.target_prefill {
            let startup_ms = self.prefill.args.startup_time * 1000.0;
            self.prefill.scale_to(target, self.now_ms, startup_ms)?;
        }
        if let Some(target) = decision.target_decode {
            let startup_ms = self.decode.args.startup_time * 1000.0;
            self.decode.scale_to(target, self.now_ms, startup_ms)?;
        }
        self.send_joined_placements();
        if idle_before && self.next_event_but_ticks_ms().is_none() && self.queued() == queued_before
        {
            if let Some(scaling) = &mut self.scaling {
                scaling.stop();
            }
        }
        Ok(true)
    }

    /// The next pass or transfer end, arrival or worker startup.
    fn next_event_but_ticks_ms(&self) -> Option<f64> {
        let next = earliest(
            self.events.peek().map(|(at_ms, _)| at_ms),
            self.released.next_ready_ms(),
        );
        earliest(
            earliest(next, self.prefill.next_ready_ms()),
            self.decode.next_ready_ms(),
        )
    }

    /// Requests held in the routers' queues (only the prefill router queues).
    fn queued(&self) -> usize {
        self.prefill.router.queued() + self.decode.router.queued()
    }

    pub(super) fn finish(self) -> Result<(Collector, RunFacts)> {
        let facts = RunFacts {
            prefill_worker_seconds: self.prefill.worker_seconds(),
            decode_worker_seconds: self.decode.worker_seconds(),
            prefill_gpus_per_worker: self.prefill.args.gpus_per_worker() as u64,
            decode_gpus_per_worker: self.decode.args.gpus_per_worker() as u64,
            wall_time_ms: 0.0,
            workload_requests: self.released.driver().total_turns(),
            interrupted: false,
        };
        Ok((self.collector.finish()?, facts))
    }

    fn pool(&mut self, stage: Stage) -> &mut Pool {
        match stage {
            Stage::Prefill => &mut self.prefill,
            Stage::Decode => &mut self.decode,
        }
    }
}

/// Past the time cap the run stops at once (the default): passes in flight are not finished.
impl Topology for Disaggregated<'_> {
    type Arrival = ReleasedRequest;

    fn progress(&self) -> ProgressPoint {
        self.released.progress(self.now_ms)
    }

    fn take_arrival(&mut self) -> Option<ReleasedRequest> {
        self.released.release(
            self.now_ms,
            self.spec.arrivals,
            &mut self.collector,
            self.scaling.as_mut().map(|scaling| &mut scaling.traffic),
        )
    }

    fn start_ticks(&mut self) -> Result<bool> {
        match &mut self.scaling {
            Some(scaling) => scaling.start(self.now_ms).map(|()| true),
            None => Ok(false),
        }
    }

    /// Starts the request's handoff; its first action waits in the action queue.
    fn admit(&mut self, arrival: ReleasedRequest) {
        let (handoff, first) = Handoff::start(self.order);
        self.requests.push(DisaggRequest {
            handoff,
            prompt: Some(arrival.prompt),
            max_output_tokens: arrival.max_output_tokens,
            hints: Some(arrival.hints),
            prefill_worker: None,
            decode_worker: None,
            prefill_routed: false,
            decode_routed: false,
            counted: true,
        });
        self.actions.push_back((arrival.id, first));
    }

    fn next_event_ms(&self) -> Option<f64> {
        let others = self.next_event_but_ticks_ms();
        match &self.scaling {
            Some(scaling) => {
                scaling.next_event_ms(others, self.released.in_flight(), self.queued())
            }
            None => others,
        }
    }

    fn dead_end(&self) -> Error {
        let queued = self.queued();
        let hint = (queued > 0 && queued == self.released.in_flight()).then_some(NO_WORKER_JOINED);
        self.released.dead_end(
            "offline disagg replay",
            &[
                ("prefill worker", &self.prefill),
                ("decode worker", &self.decode),
            ],
            hint,
        )
    }

    fn is_done(&self) -> bool {
        self.released.driver().is_drained()
            && self.events.is_empty()
            && self.actions.is_empty()
            && self
                .requests
                .iter()
                .all(|request| request.handoff.result().is_some())
    }

    fn advance_to(&mut self, t_ms: f64) {
        let dt = t_ms - self.now_ms;
        if dt > 0.0 {
            self.prefill.accrue(dt);
            self.decode.accrue(dt);
        }
        self.now_ms = t_ms;
    }

    /// Pass completions, transfer completions, arrivals, pending actions, then passes on idle
    /// prefill and decode workers, until the state stops changing.
    fn settle(&mut self) -> Result<()> {
        loop {
            let mut changed = false;
            let now = self.now_ms;
            while let Some(event) = self
                .events
                .pop_due_if(now, |event| matches!(event, Event::PassEnd { .. }))
            {
                let Event::PassEnd { stage, worker } = event else {
                    unreachable!("only pass ends are popped here")
                };
                self.on_pass_end(stage, worker, true);
                changed = true;
            }
            while let Some(event) = self
                .events
                .pop_due_if(now, |event| matches!(event, Event::TransferDone { .. }))
            {
                let Event::TransferDone { id } = event else {
                    unreachable!("only transfers are popped here")
                };
                self.on_transfer_done(id);
                changed = true;
            }
            // Steps that cannot do anything now are skipped without a call.
            if self.prefill.has_starting() {
                changed |= self.prefill.activate_due(now);
            }
            if self.decode.has_starting() {
                changed |= self.decode.activate_due(now);
            }
            if self.prefill.has_placements() || self.decode.has_placements() {
                self.send_joined_placements();
            }
            if self.released.has_ready(now) {
                changed |= self.release_arrivals();
            }
            changed |= self.drive_actions();
            changed |= self.drive_pool(Stage::Prefill);
            changed |= self.drive_pool(Stage::Decode);
            if self.prefill.has_draining() {
                changed |= self.prefill.retire_drained();
            }
            if self.decode.has_draining() {
                changed |= self.decode.retire_drained();
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

impl Disaggregated<'_> {
    // ---- arrivals and routing ----

    /// Asks the router of `stage` where request `id` goes.
    fn route(&mut self, stage: Stage, id: RequestId) -> Routing {
        let handoff = &self.requests[id];
        let prompt = handoff
            .prompt
            .as_ref()
            .expect("routed before the prompt is handed on");
        let isl = prompt.len();
        let default_hints = RouteHints {
            arrival_ms: self.now_ms,
            priority: 0,
            strict_priority: 0,
            policy_class: None,
        };
        let hints = match stage {
            Stage::Prefill => handoff.hints.clone().unwrap_or(default_hints),
            Stage::Decode => default_hints,
        };
        let pool = match stage {
            Stage::Prefill => &mut self.prefill,
            Stage::Decode => &mut self.decode,
        };
        let block_size = pool.args.block_size.max(1);
        let routed = pool.route(hints.route_input(id, prompt, block_size, self.now_ms));
        match routed {
            Routed::Placed {
                target,
                overlap_blocks,
            } => {
                if stage == Stage::Prefill {
                    self.note_prefill_placement(overlap_blocks, isl);
                }
                Routing::Placed {
                    worker: target,
                    overlap_tokens: (overlap_blocks as usize * block_size).min(isl),
                }
            }
            Routed::Queued => Routing::Queued,
            Routed::Rejected => Routing::Rejected,
        }
    }

    // ---- actions ----

    /// Executes pending actions until none is left (actions may queue more). Actions that
    /// must wait for a worker's pass to end are parked with that worker.
    fn drive_actions(&mut self) -> bool {
        let mut changed = false;
        while let Some((id, action)) = self.actions.pop_front() {
            if self.execute(id, action) {
                changed = true;
            }
        }
        changed
    }

    /// Runs one action; false when it had to wait for a busy worker.
    fn execute(&mut self, id: RequestId, action: Action) -> bool {
        match action {
            Action::SubmitPrefill | Action::ReserveDestination => {
                let stage = match action {
                    Action::SubmitPrefill => Stage::Prefill,
                    _ => Stage::Decode,
                };
                *self.routed(stage, id) = true;
                match self.route(stage, id) {
                    Routing::Placed {
                        worker,
                        overlap_tokens,
                    } => match stage {
                        Stage::Prefill => self.submit_prefill(id, worker, overlap_tokens),
                        Stage::Decode => self.reserve_destination(id, worker, overlap_tokens),
                    },
                    // The prefill router's queue places it later; the decode router never
                    // holds requests back (it tracks no prefill load).
                    Routing::Queued if stage == Stage::Prefill => {}
                    Routing::Queued | Routing::Rejected => {
                        *self.routed(stage, id) = false;
                        self.collector
                            .on_terminal(id, self.now_ms, TerminalStatus::Rejected);
                        self.on_outcome(id, action, Outcome::Failed);
                    }
                }
            }
            Action::StartTransfer { missing_tokens } => {
                let delay_ms = self
                    .transfer
                    .delay_ms(self.released.origin(id).input_length, missing_tokens);
                self.on_outcome(id, action, Outcome::Done);
                if delay_ms > 0.0 {
                    self.events
                        .push(self.now_ms + delay_ms, Event::TransferDone { id });
                } else {
                    self.on_transfer_done(id);
                }
            }
            Action::ActivateDestination => {
                let worker = self.requests[id]
                    .decode_worker
                    .expect("an activated destination has a decode worker");
                if self.decode.is_busy(worker) {
                    self.decode.defer(worker, id, action);
                    return false;
                }
                match self.decode.scheduler_mut(worker).activate_destination(id) {
                    Ok(reserved) => {
                        self.collector.on_handoff(
                            id,
                            HandoffStage::DestinationActivated,
                            self.now_ms,
                        );
                        self.on_outcome(id, action, Outcome::Done);
                        if let Some(reserved) = reserved {
                            self.on_destination_reserved(reserved);
                        }
                    }
                    Err(_not_reserved) => {
                        self.collector
                            .on_terminal(id, self.now_ms, TerminalStatus::Failed);
                        self.on_outcome(id, action, Outcome::Failed);
                    }
                }
            }
            Action::ReleaseSource | Action::CancelSource => {
                let worker = match self.idle_worker_for(Stage::Prefill, id, action) {
                    Ok(worker) => worker,
                    Err(ran) => return ran,
                };
                self.prefill.scheduler_mut(worker).release_source(id);
                // Pages a released source leaves in the cache become visible to routing now.
                self.prefill.publish_kv_events(worker);
                if action == Action::ReleaseSource {
                    self.collector
                        .on_handoff(id, HandoffStage::SourceReleased, self.now_ms);
                }
                self.on_outcome(id, action, Outcome::Done);
            }
            Action::CancelDestination => {
                let worker = match self.idle_worker_for(Stage::Decode, id, action) {
                    Ok(worker) => worker,
                    Err(ran) => return ran,
                };
                self.decode.scheduler_mut(worker).cancel_destination(id);
                if let Some(reserved) = self.decode.scheduler_mut(worker).retry_destinations() {
                    self.on_destination_reserved(reserved);
                }
                self.on_outcome(id, action, Outcome::Done);
            }
            Action::Complete => self.complete(id),
        }
        true
    }

    /// Whether the router of `stage` counts request `id`.
    fn routed(&mut self, stage: Stage, id: RequestId) -> &mut bool {
        let request = &mut self.requests[id];
        match stage {
            Stage::Prefill => &mut request.prefill_routed,
            Stage::Decode => &mut request.decode_routed,
        }
    }

    /// The worker of `stage` that holds request `id`, idle, for a clean-up `action`. Otherwise
    /// `Err(ran)`: the request never reached a worker of `stage` (its route is withdrawn and
    /// the action done, `ran` true), or the worker is mid-pass (the action waits for the pass
    /// end, `ran` false).
    fn idle_worker_for(
        &mut self,
        stage: Stage,
        id: RequestId,
        action: Action,
    ) -> Result<usize, bool> {
        let request = &self.requests[id];
        let worker = match stage {
            Stage::Prefill => request.prefill_worker,
            Stage::Decode => request.decode_worker,
        };
        let Some(worker) = worker else {
            match stage {
                Stage::Prefill => self.free_prefill_route(id),
                Stage::Decode => self.free_decode_route(id),
            }
            self.on_outcome(id, action, Outcome::Done);
            return Err(true);
        };
        let pool = self.pool(stage);
        if pool.is_busy(worker) {
            pool.defer(worker, id, action);
            return Err(false);
        }
        Ok(worker)
    }

    /// Sends the prefill of request `id` to prefill `worker`.
    fn submit_prefill(&mut self, id: RequestId, worker: usize, overlap_tokens: usize) {
        let handoff = &mut self.requests[id];
        handoff.prefill_worker = Some(worker);
        handoff.hints = None;
        let prompt = match self.order {
            // The decode side still needs the prompt.
            Order::SourceFirst => handoff.prompt.clone().expect("prompt kept until reserved"),
            Order::DestinationFirst => handoff.prompt.take().expect("prompt kept until prefill"),
        };
        let max_output_tokens = if self.prefill_full_output {
            handoff.max_output_tokens
        } else {
            handoff.max_output_tokens.min(1)
        };
        self.prefill.enqueue(
            worker,
            EngineRequest {
                id,
                prompt,
                max_output_tokens,
            },
        );
        self.collector
            .on_prefill_assigned(id, worker, overlap_tokens);
        self.on_outcome(id, Action::SubmitPrefill, Outcome::Done);
    }

    /// Asks decode `worker` to reserve KV for request `id`.
    fn reserve_destination(&mut self, id: RequestId, worker: usize, overlap_tokens: usize) {
        let handoff = &mut self.requests[id];
        let prompt = match self.order {
            Order::SourceFirst => handoff.prompt.take().expect("prompt kept until reserved"),
            Order::DestinationFirst => handoff.prompt.clone().expect("prompt kept until prefill"),
        };
        let request = EngineRequest {
            id,
            prompt,
            max_output_tokens: handoff.max_output_tokens,
        };
        let try_now = !self.decode.is_busy(worker);
        match self
            .decode
            .scheduler_mut(worker)
            .reserve_destination(request, try_now)
        {
            Ok(reserved) => {
                self.requests[id].decode_worker = Some(worker);
                self.collector
                    .on_decode_assigned(id, worker, overlap_tokens);
                self.on_outcome(id, Action::ReserveDestination, Outcome::Done);
                if let Some(reserved) = reserved {
                    self.on_destination_reserved(reserved);
                }
            }
            Err(DestinationRefused::TooLarge) => {
                self.collector
                    .on_terminal(id, self.now_ms, TerminalStatus::Failed);
                self.on_outcome(id, Action::ReserveDestination, Outcome::Failed);
            }
        }
    }

    // ---- facts and the handoff state machine ----

    fn on_source_held(&mut self, id: RequestId) {
        self.collector
            .on_handoff(id, HandoffStage::SourceHeld, self.now_ms);
        self.feed(id, HandoffEvent::SourceHeld);
    }

    fn on_destination_reserved(&mut self, reserved: DestinationReserved) {
        let id = reserved.id;
        self.collector
            .on_handoff(id, HandoffStage::DestinationReserved, self.now_ms);
        let transferable_tokens = reserved.transferable_tokens;
        self.feed(
            id,
            HandoffEvent::DestinationReserved {
                transferable_tokens,
            },
        );
    }

    fn on_transfer_done(&mut self, id: RequestId) {
        self.feed(id, HandoffEvent::TransferDone);
    }

    /// The handoff failed (a refused prefill, a destination that can never fit): clean up.
    fn on_failed(&mut self, id: RequestId) {
        self.feed(id, HandoffEvent::Failed);
    }

    /// Feeds the outcome of an executed action back into the handoff.
    fn on_outcome(&mut self, id: RequestId, action: Action, outcome: Outcome) {
        self.feed(id, HandoffEvent::Stepped { action, outcome });
    }

    /// Queues the steps the handoff of request `id` takes on `event`.
    fn feed(&mut self, id: RequestId, event: HandoffEvent) {
        for action in self.requests[id].handoff.on(event) {
            self.actions.push_back((id, action));
        }
    }

    /// The handoff is over: a successful one frees its prefill route; a failed one ends the
    /// request.
    fn complete(&mut self, id: RequestId) {
        match self.requests[id].handoff.result() {
            Some(true) => self.free_prefill_route(id),
            Some(false) => {
                self.collector
                    .on_terminal(id, self.now_ms, TerminalStatus::Canceled);
                self.free_prefill_route(id);
                self.free_decode_route(id);
                self.finish_request(id, false);
            }
            None => unreachable!("only a finished handoff issues Complete"),
        }
    }

    fn free_prefill_route(&mut self, id: RequestId) {
        if !std::mem::take(&mut self.requests[id].prefill_routed) {
            return;
        }
        let mut placements = std::mem::take(&mut self.placements);
        self.prefill
            .router
            .on_terminal(id, self.now_ms, &mut placements);
        self.dispatch_prefill_placements(&mut placements);
        self.placements = placements;
    }

    fn free_decode_route(&mut self, id: RequestId) {
        if !std::mem::take(&mut self.requests[id].decode_routed) {
            return;
        }
        let mut placements = std::mem::take(&mut self.placements);
        self.decode
            .router
            .on_terminal(id, self.now_ms, &mut placements);
        // The decode router never queues, so nothing waits for this.
        debug_assert!(placements.is_empty());
        placements.clear();
        self.placements = placements;
    }

    /// Submits the prefills the prefill router took out of its queue.
    fn dispatch_prefill_placements(&mut self, placements: &mut Vec<Placement>) {
        let block_size = self.prefill.args.block_size.max(1);
        for placement in placements.drain(..) {
            let isl = self.released.origin(placement.id).input_length;
            self.note_prefill_placement(placement.overlap_blocks, isl);
            let overlap_tokens = (placement.overlap_blocks as usize * block_size).min(isl);
            self.submit_prefill(placement.id, placement.target, overlap_tokens);
        }
    }

    /// Sends the queued prefills the prefill router placed when prefill workers joined (the
    /// decode router holds nothing back).
    fn send_joined_placements(&mut self) {
        let mut placements = std::mem::take(&mut self.placements);
        self.decode.take_placements(&mut placements);
        debug_assert!(placements.is_empty(), "the decode router never queues");
        self.prefill.take_placements(&mut placements);
        self.dispatch_prefill_placements(&mut placements);
        self.placements = placements;
    }

    /// The planner's traffic window counts the prefill KV router's cache hits.
    fn note_prefill_placement(&mut self, overlap_blocks: u32, isl: usize) {
        if let (Some(scaling), true) = (&mut self.scaling, self.prefill.routes_on_kv_events()) {
            let isl_blocks = isl.div_ceil(self.prefill.args.block_size.max(1));
            scaling.traffic.on_placement(overlap_blocks, isl_blocks);
        }
    }

    /// The decode of request `id` ended (or it was dropped): the session moves on.
    fn finish_request(&mut self, id: RequestId, completed: bool) {
        let handoff = &mut self.requests[id];
        if !std::mem::take(&mut handoff.counted) {
            return;
        }
        if let Some(scaling) = &mut self.scaling {
            scaling.traffic.on_end(id, completed);
        }
        self.released.on_ended(id, self.now_ms, completed);
    }

    // ---- passes ----

    /// Starts passes on the idle workers of `stage`, lowest id first, starting over after every
    /// pass that did something (a pass that takes no time completes at once and may leave its
    /// worker ready again).
    fn drive_pool(&mut self, stage: Stage) -> bool {
        let mut changed = false;
        // Only woken workers can be ready; they are asked in ascending id as their turn comes.
        let mut from = 0;
        while let Some(worker) = self.pool(stage).next_woken(from) {
            from = worker + 1;
            if self.pool(stage).take_ready(worker) && self.start_pass(stage, worker) {
                changed = true;
                from = 0;
            }
        }
        changed
    }

    /// Runs one pass on an idle worker; false when the pass could do nothing.
    fn start_pass(&mut self, stage: Stage, worker: usize) -> bool {
        let now = self.now_ms;
        let collector = &mut self.collector;
        let pool = match stage {
            Stage::Prefill => &mut self.prefill,
            Stage::Decode => &mut self.decode,
        };
        let start = pool.start_pass(worker, now, |id, reused_tokens, _| match stage {
            Stage::Prefill => collector.on_prefill_admit(id, now, reused_tokens),
            Stage::Decode => collector.on_decode_admit(id, now, reused_tokens),
        });
        if start.end_ms > now {
            self.events
                .push(start.end_ms, Event::PassEnd { stage, worker });
            return true;
        }
        // A pass that takes no time ends at once, if it did anything.
        let progressed = start.scheduled_work || start.kv_published;
        if progressed {
            self.on_pass_end(stage, worker, false);
        }
        progressed
    }

    /// Applies the end of a pass of `worker` at `now_ms`. `scheduled`: it was a timed pass
    /// (actions waiting for the worker are woken).
    fn on_pass_end(&mut self, stage: Stage, worker: usize, scheduled: bool) {
        let now_ms = self.now_ms;
        let pool = self.pool(stage);
        let events = pool.end_pass(worker, now_ms);
        // Capacity freed by the pass may admit a waiting destination.
        let reserved = match stage {
            Stage::Decode => pool.scheduler_mut(worker).retry_destinations(),
            Stage::Prefill => None,
        };
        if scheduled {
            let woken = pool.take_deferred(worker);
            self.actions.extend(woken);
        }
        self.pool(stage).apply_pass_end_kv_events(worker);
        if let (Stage::Decode, Some(scaling)) = (stage, &mut self.scaling) {
            scaling.traffic.on_pass_end(&events, now_ms);
        }
        match stage {
            Stage::Prefill => self.apply_prefill_pass(&events),
            Stage::Decode => self.apply_decode_pass(&events),
        }
        if self.collector.records_timeseries() {
            self.record_pass_end(stage, worker, &events);
        }
        if let Some(reserved) = reserved {
            self.on_destination_reserved(reserved);
        }
        self.pool(stage).recycle(worker, events);
    }

    /// Feeds the time series (pool 0 prefill, 1 decode): only decode tokens reach users.
    fn record_pass_end(&mut self, stage: Stage, worker: usize, events: &[PassEvent]) {
        let load = self.pool(stage).worker_load(worker);
        let now_ms = self.now_ms;
        let (pool, reach_users) = match stage {
            Stage::Prefill => (0, false),
            Stage::Decode => (1, true),
        };
        self.collector
            .timeseries_pass_end(now_ms, pool, worker, load, events, reach_users);
    }

    /// A prefill pass ended: finished prefills release their router load, then their sources
    /// are held for the handoff. Its tokens are not the user's.
    fn apply_prefill_pass(&mut self, events: &[PassEvent]) {
        for &event in events {
            match event {
                PassEvent::Completed { id } => {
                    let mut placements = std::mem::take(&mut self.placements);
                    self.prefill
                        .router
                        .on_first_token(id, self.now_ms, &mut placements);
                    self.dispatch_prefill_placements(&mut placements);
                    self.placements = placements;
                }
                PassEvent::Rejected { id } => {
                    self.collector
                        .on_terminal(id, self.now_ms, TerminalStatus::Rejected);
                    self.on_failed(id);
                }
                PassEvent::Tokens { .. } => {}
                PassEvent::Admitted { .. } => unreachable!("admissions are applied at pass start"),
            }
        }
        for &event in events {
            if let PassEvent::Completed { id } = event {
                self.on_source_held(id);
            }
        }
    }

    /// A decode pass ended: its tokens reach the user, finished requests end.
    fn apply_decode_pass(&mut self, events: &[PassEvent]) {
        for &event in events {
            match event {
                PassEvent::Tokens { id, count } => {
                    if self.released.counts_tokens(false) {
                        self.released.on_tokens(id, count);
                    }
                    self.collector.on_tokens(id, self.now_ms, count);
                }
                PassEvent::Completed { id } | PassEvent::Rejected { id } => {
                    self.free_decode_route(id);
                    let completed = matches!(event, PassEvent::Completed { .. });
                    let status = if completed {
                        TerminalStatus::Completed
                    } else {
                        TerminalStatus::Rejected
                    };
                    self.collector.on_terminal(id, self.now_ms, status);
                    self.finish_request(id, completed);
                }
                PassEvent::Admitted { .. } => unreachable!("admissions are applied at pass start"),
            }
        }
    }
}

#[cfg(test)]
mod tests;
