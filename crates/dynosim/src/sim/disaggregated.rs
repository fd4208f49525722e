//! Disaggregated workers: a prefill pool and a decode pool behind one router each, and the
//! KV handoff between them (engine.md §7, router.md §5).
//!
//! Every request is first prefilled on a prefill worker, whose passes are hidden (only
//! admissions are recorded), then handed off to a decode worker, whose tokens are the ones
//! the user sees. A handoff is a small state machine driven by *actions* (executed in FIFO
//! order, each at most once) and *facts* (what the engines report):
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
//! did something). This is the reference's order.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;

use super::common::{kv_router, record_arrival, EventQueue, RequestOrigin, RouteHints};
use super::driver::{Driver, Terminal};
use crate::config::router_config::PrefillLoadModel;
use crate::config::{
    ArrivalMode, EngineArgs, EngineType, KvTransferTimingMode, ReplaySpec, RouterMode, WorkloadSpec,
};
use crate::engine::kv::KvEvent;
use crate::engine::{
    DestinationRefused, DestinationReserved, EngineRequest, PassEvent, RankScheduler, RequestId,
};
use crate::error::{Error, Result};
use crate::report::record::TerminalStatus;
use crate::report::{Collector, HandoffStage, RunFacts};
use crate::router::kv::{Arrival, KvRouter, Placement, RouteRequest};
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

/// A step of one request's handoff.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Action {
    SubmitPrefill,
    ReserveDestination,
    StartTransfer { delay_ms: f64 },
    ActivateDestination,
    ReleaseSource,
    CancelSource,
    CancelDestination,
    Complete,
}

/// How a step went, fed back into the handoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Done,
    Failed,
}

/// Which side of the handoff goes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// Prefill, then reserve the destination (vLLM).
    SourceFirst,
    /// Reserve the destination, then prefill (SGLang).
    DestinationFirst,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Active,
    CleaningUp,
    Complete { success: bool },
}

/// One request's handoff state machine (what has been issued, what has happened).
#[derive(Debug)]
struct Handoff {
    mode: Mode,
    /// The prompt and output the decode side serves (taken when the destination reserves).
    prompt: Option<TokenSeq>,
    max_output_tokens: usize,
    hints: Option<RouteHints>,
    prefill_worker: Option<usize>,
    decode_worker: Option<usize>,
    prefill_routed: bool,
    decode_routed: bool,
    submit_issued: bool,
    submitted: bool,
    held: bool,
    reserve_issued: bool,
    accepted: bool,
    /// Prompt tokens the destination must receive (`destination_missing` mode).
    transferable_tokens: Option<usize>,
    transfer_issued: bool,
    transfer_completed: bool,
    activation_issued: bool,
    activation_applied: bool,
    release_issued: bool,
    source_cancel_issued: bool,
    source_cleanup_done: bool,
    destination_cancel_issued: bool,
    destination_cleanup_done: bool,
    /// Still counted in flight (its decode has not ended).
    counted: bool,
}

impl Handoff {
    fn new(prompt: TokenSeq, max_output_tokens: usize, hints: RouteHints) -> Self {
        Self {
            mode: Mode::Active,
            prompt: Some(prompt),
            max_output_tokens,
            hints: Some(hints),
            prefill_worker: None,
            decode_worker: None,
            prefill_routed: false,
            decode_routed: false,
            submit_issued: false,
            submitted: false,
            held: false,
            reserve_issued: false,
            accepted: false,
            transferable_tokens: None,
            transfer_issued: false,
            transfer_completed: false,
            activation_issued: false,
            activation_applied: false,
            release_issued: false,
            source_cancel_issued: false,
            source_cleanup_done: false,
            destination_cancel_issued: false,
            destination_cleanup_done: false,
            counted: true,
        }
    }
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

/// The router of one pool.
enum PoolRouter {
    /// A flat cursor over the pool's workers.
    RoundRobin {
        next: usize,
    },
    Kv(Box<KvRouter>),
}

/// One pool of single-rank workers.
struct Pool {
    args: EngineArgs,
    schedulers: Vec<RankScheduler>,
    busy: Vec<bool>,
    /// Events of each worker's in-flight pass, applied at its completion.
    pending: Vec<Vec<PassEvent>>,
    /// Actions waiting for each worker's in-flight pass to end.
    deferred: Vec<Vec<(RequestId, Action)>>,
    router: PoolRouter,
    worker_ms: f64,
}

impl Pool {
    fn new(args: &EngineArgs, workers: usize, router: PoolRouter) -> Self {
        Self {
            args: args.clone(),
            schedulers: (0..workers)
                .map(|index| RankScheduler::new(args, index))
                .collect(),
            busy: vec![false; workers],
            pending: (0..workers).map(|_| Vec::new()).collect(),
            deferred: (0..workers).map(|_| Vec::new()).collect(),
            router,
            worker_ms: 0.0,
        }
    }

    fn kv_router(&mut self) -> Option<&mut KvRouter> {
        match &mut self.router {
            PoolRouter::Kv(router) => Some(router),
            PoolRouter::RoundRobin { .. } => None,
        }
    }
}

/// Where a routing decision left a request.
enum Routed {
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
    driver: Driver,
    collector: Collector,
    origins: Vec<RequestOrigin>,
    handoffs: Vec<Handoff>,
    in_flight: usize,
    /// Scratch buffers.
    pass_events: Vec<PassEvent>,
    kv_events: Vec<KvEvent>,
    placements: Vec<Placement>,
}

impl<'s> Disaggregated<'s> {
    pub(super) fn new(spec: &'s ReplaySpec, driver: Driver) -> Self {
        let pools = spec.disaggregation.as_ref().expect("a disaggregated spec");
        let prefill_args = &pools.prefill;
        let decode_args = &spec.engine;
        let order = match prefill_args.engine_type {
            EngineType::Sglang => Order::DestinationFirst,
            _ => Order::SourceFirst,
        };
        let (prefill_router, decode_router) = match spec.router_mode {
            RouterMode::RoundRobin => (
                PoolRouter::RoundRobin { next: 0 },
                PoolRouter::RoundRobin { next: 0 },
            ),
            RouterMode::KvRouter => (
                // Prefill placement follows cached prefixes; its own block tracking is off.
                PoolRouter::Kv(Box::new(kv_router(
                    spec.router_config.as_ref(),
                    prefill_args,
                    pools.num_prefill_workers,
                    |config| config.router_track_active_blocks = false,
                ))),
                // Decode placement balances active blocks; it never sees cache events.
                PoolRouter::Kv(Box::new(kv_router(
                    spec.router_config.as_ref(),
                    decode_args,
                    spec.num_workers,
                    |config| {
                        config.overlap_score_credit = 0.0;
                        config.router_assume_kv_reuse = false;
                        config.router_track_prefill_tokens = false;
                        config.router_prefill_load_model = PrefillLoadModel::None;
                    },
                ))),
            ),
        };
        let mut prefill = Pool::new(prefill_args, pools.num_prefill_workers, prefill_router);
        if spec.router_mode == RouterMode::KvRouter {
            prefill
                .schedulers
                .iter_mut()
                .for_each(RankScheduler::record_kv_events);
        }
        let decode = Pool::new(decode_args, spec.num_workers, decode_router);
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
            collector: Collector::new(spec.sla, spec.capture_requests),
            origins: Vec::with_capacity(driver.total_turns()),
            handoffs: Vec::with_capacity(driver.total_turns()),
            driver,
            in_flight: 0,
            pass_events: Vec::new(),
            kv_events: Vec::new(),
            placements: Vec::new(),
        }
    }

    pub(super) fn run(&mut self, cancel: &AtomicBool) -> Result<()> {
        self.settle()?;
        while !self.is_done() {
            super::check_cancelled(cancel)?;
            let next_ms = match (
                self.events.peek().map(|(at_ms, _)| at_ms),
                self.driver.next_ready_ms(),
            ) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(next) => next,
                    None => {
                        return Err(Error::runtime(format!(
                            "offline disagg replay reached a dead end with {} in-flight \
                             requests remaining",
                            self.in_flight
                        )))
                    }
                },
            };
            // Past the cap the run stops at once; passes in flight are not finished.
            if self.spec.max_sim_time_ms.is_some_and(|cap| next_ms > cap) {
                break;
            }
            self.advance_to(next_ms);
            self.settle()?;
        }
        Ok(())
    }

    fn is_done(&self) -> bool {
        self.driver.is_drained()
            && self.events.is_empty()
            && self.actions.is_empty()
            && self
                .handoffs
                .iter()
                .all(|h| matches!(h.mode, Mode::Complete { .. }))
    }

    pub(super) fn finish(self) -> (Collector, RunFacts) {
        let facts = RunFacts {
            prefill_worker_seconds: self.prefill.worker_ms / 1000.0,
            decode_worker_seconds: self.decode.worker_ms / 1000.0,
            prefill_gpus_per_worker: self.prefill.args.gpus_per_worker() as u64,
            decode_gpus_per_worker: self.decode.args.gpus_per_worker() as u64,
            wall_time_ms: 0.0,
        };
        (self.collector, facts)
    }

    fn advance_to(&mut self, t_ms: f64) {
        let dt = t_ms - self.now_ms;
        if dt > 0.0 {
            self.prefill.worker_ms += self.prefill.schedulers.len() as f64 * dt;
            self.decode.worker_ms += self.decode.schedulers.len() as f64 * dt;
        }
        self.now_ms = t_ms;
    }

    fn pool(&mut self, stage: Stage) -> &mut Pool {
        match stage {
            Stage::Prefill => &mut self.prefill,
            Stage::Decode => &mut self.decode,
        }
    }

    /// Processes everything that happens at `now_ms` until the state stops changing.
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
            changed |= self.release_arrivals();
            changed |= self.drive_actions();
            changed |= self.drive_pool(Stage::Prefill);
            changed |= self.drive_pool(Stage::Decode);
            if !changed {
                return Ok(());
            }
        }
    }

    // ---- arrivals and routing ----

    fn release_arrivals(&mut self) -> bool {
        let closed_loop = matches!(self.spec.arrivals, ArrivalMode::Concurrency { .. });
        let mut released = false;
        while let Some(release) = self.driver.pop_ready(self.now_ms) {
            let arrival = record_arrival(
                release,
                self.now_ms,
                closed_loop,
                &mut self.collector,
                &mut self.origins,
            );
            let id = arrival.id;
            self.handoffs.push(Handoff::new(
                arrival.prompt,
                arrival.max_output_tokens,
                arrival.hints,
            ));
            self.in_flight += 1;
            let first = match self.order {
                Order::SourceFirst => {
                    self.handoffs[id].submit_issued = true;
                    Action::SubmitPrefill
                }
                Order::DestinationFirst => {
                    self.handoffs[id].reserve_issued = true;
                    Action::ReserveDestination
                }
            };
            self.actions.push_back((id, first));
            released = true;
        }
        released
    }

    /// Asks the router of `stage` where request `id` goes.
    fn route(&mut self, stage: Stage, id: RequestId) -> Routed {
        let handoff = &self.handoffs[id];
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
        let workers = pool.schedulers.len();
        match &mut pool.router {
            PoolRouter::RoundRobin { next } => {
                let worker = *next;
                *next = (worker + 1) % workers;
                Routed::Placed {
                    worker,
                    overlap_tokens: 0,
                }
            }
            PoolRouter::Kv(router) => {
                let arrival = router.on_arrival(RouteRequest {
                    id,
                    block_hashes: prompt.block_hashes(block_size),
                    isl,
                    arrival_ms: hints.arrival_ms,
                    priority: hints.priority,
                    strict_priority: hints.strict_priority,
                    policy_class: hints.policy_class.as_deref(),
                });
                match arrival {
                    Arrival::Placed(worker) => Routed::Placed {
                        worker,
                        overlap_tokens: (router.last_overlap_blocks() as usize * block_size)
                            .min(isl),
                    },
                    Arrival::Queued => Routed::Queued,
                    Arrival::Rejected(_) => Routed::Rejected,
                }
            }
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
            Action::SubmitPrefill => {
                self.handoffs[id].prefill_routed = true;
                match self.route(Stage::Prefill, id) {
                    Routed::Placed {
                        worker,
                        overlap_tokens,
                    } => self.submit_prefill(id, worker, overlap_tokens),
                    Routed::Queued => {}
                    Routed::Rejected => {
                        self.handoffs[id].prefill_routed = false;
                        self.collector
                            .on_terminal(id, self.now_ms, TerminalStatus::Rejected);
                        self.on_outcome(id, action, Outcome::Failed);
                    }
                }
            }
            Action::ReserveDestination => {
                self.handoffs[id].decode_routed = true;
                match self.route(Stage::Decode, id) {
                    Routed::Placed {
                        worker,
                        overlap_tokens,
                    } => self.reserve_destination(id, worker, overlap_tokens),
                    Routed::Queued | Routed::Rejected => {
                        // The decode router never holds requests back (no prefill load).
                        self.handoffs[id].decode_routed = false;
                        self.collector
                            .on_terminal(id, self.now_ms, TerminalStatus::Rejected);
                        self.on_outcome(id, action, Outcome::Failed);
                    }
                }
            }
            Action::StartTransfer { delay_ms } => {
                self.on_outcome(id, action, Outcome::Done);
                if delay_ms > 0.0 {
                    self.events
                        .push(self.now_ms + delay_ms, Event::TransferDone { id });
                } else {
                    self.on_transfer_done(id);
                }
            }
            Action::ActivateDestination => {
                let worker = self.handoffs[id]
                    .decode_worker
                    .expect("an activated destination has a decode worker");
                if self.decode.busy[worker] {
                    self.decode.deferred[worker].push((id, action));
                    return false;
                }
                match self.decode.schedulers[worker].activate_destination(id) {
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
                let Some(worker) = self.handoffs[id].prefill_worker else {
                    // Never reached a prefill worker: only its route is withdrawn.
                    self.free_prefill_route(id);
                    self.on_outcome(id, action, Outcome::Done);
                    return true;
                };
                if self.prefill.busy[worker] {
                    self.prefill.deferred[worker].push((id, action));
                    return false;
                }
                self.prefill.schedulers[worker].release_source(id);
                // Pages a released source leaves in the cache become visible to routing now.
                if let PoolRouter::Kv(router) = &mut self.prefill.router {
                    self.prefill.schedulers[worker].drain_kv_events(&mut self.kv_events);
                    router.apply_kv_events(worker, &self.kv_events);
                }
                if action == Action::ReleaseSource {
                    self.collector
                        .on_handoff(id, HandoffStage::SourceReleased, self.now_ms);
                }
                self.on_outcome(id, action, Outcome::Done);
            }
            Action::CancelDestination => {
                let Some(worker) = self.handoffs[id].decode_worker else {
                    self.free_decode_route(id);
                    self.on_outcome(id, action, Outcome::Done);
                    return true;
                };
                if self.decode.busy[worker] {
                    self.decode.deferred[worker].push((id, action));
                    return false;
                }
                self.decode.schedulers[worker].cancel_destination(id);
                if let Some(reserved) = self.decode.schedulers[worker].retry_destinations() {
                    self.on_destination_reserved(reserved);
                }
                self.on_outcome(id, action, Outcome::Done);
            }
            Action::Complete => self.complete(id),
        }
        true
    }

    /// Sends the prefill of request `id` to prefill `worker`.
    fn submit_prefill(&mut self, id: RequestId, worker: usize, overlap_tokens: usize) {
        let handoff = &mut self.handoffs[id];
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
        self.prefill.schedulers[worker].enqueue(EngineRequest {
            id,
            prompt,
            max_output_tokens,
        });
        self.collector
            .on_prefill_assigned(id, worker, overlap_tokens);
        self.on_outcome(id, Action::SubmitPrefill, Outcome::Done);
    }

    /// Asks decode `worker` to reserve KV for request `id`.
    fn reserve_destination(&mut self, id: RequestId, worker: usize, overlap_tokens: usize) {
        let handoff = &mut self.handoffs[id];
        let prompt = match self.order {
            Order::SourceFirst => handoff.prompt.take().expect("prompt kept until reserved"),
            Order::DestinationFirst => handoff.prompt.clone().expect("prompt kept until prefill"),
        };
        let request = EngineRequest {
            id,
            prompt,
            max_output_tokens: handoff.max_output_tokens,
        };
        let try_now = !self.decode.busy[worker];
        match self.decode.schedulers[worker].reserve_destination(request, try_now) {
            Ok(reserved) => {
                self.handoffs[id].decode_worker = Some(worker);
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
        let handoff = &mut self.handoffs[id];
        if handoff.mode != Mode::Active || handoff.held {
            return;
        }
        handoff.held = true;
        self.advance(id);
    }

    fn on_destination_reserved(&mut self, reserved: DestinationReserved) {
        let id = reserved.id;
        self.collector
            .on_handoff(id, HandoffStage::DestinationReserved, self.now_ms);
        let handoff = &mut self.handoffs[id];
        if handoff.mode != Mode::Active || handoff.transferable_tokens.is_some() {
            return;
        }
        handoff.transferable_tokens = Some(reserved.transferable_tokens);
        self.advance(id);
    }

    fn on_transfer_done(&mut self, id: RequestId) {
        let handoff = &mut self.handoffs[id];
        if handoff.mode != Mode::Active || handoff.transfer_completed {
            return;
        }
        handoff.transfer_completed = true;
        self.advance(id);
    }

    /// The handoff failed (a refused prefill, a destination that can never fit): clean up.
    fn on_failed(&mut self, id: RequestId) {
        if matches!(self.handoffs[id].mode, Mode::Complete { .. }) {
            return;
        }
        self.handoffs[id].mode = Mode::CleaningUp;
        self.advance_cleanup(id);
    }

    /// Feeds the outcome of an executed action back into the handoff.
    fn on_outcome(&mut self, id: RequestId, action: Action, outcome: Outcome) {
        let handoff = &mut self.handoffs[id];
        if matches!(handoff.mode, Mode::Complete { .. }) {
            return;
        }
        if outcome == Outcome::Failed {
            self.on_failed(id);
            return;
        }
        match action {
            Action::SubmitPrefill => handoff.submitted = true,
            Action::ReserveDestination => handoff.accepted = true,
            Action::StartTransfer { .. } => {}
            Action::ActivateDestination => handoff.activation_applied = true,
            Action::ReleaseSource | Action::CancelSource => handoff.source_cleanup_done = true,
            Action::CancelDestination => handoff.destination_cleanup_done = true,
            Action::Complete => return,
        }
        match handoff.mode {
            Mode::Active => self.advance(id),
            Mode::CleaningUp => self.advance_cleanup(id),
            Mode::Complete { .. } => {}
        }
    }

    /// Issues the next step of an active handoff, if one is due (at most one at a time).
    fn advance(&mut self, id: RequestId) {
        let handoff = &mut self.handoffs[id];
        let action = if self.order == Order::SourceFirst && handoff.held && !handoff.reserve_issued
        {
            handoff.reserve_issued = true;
            Action::ReserveDestination
        } else if self.order == Order::DestinationFirst
            && handoff.transferable_tokens.is_some()
            && !handoff.submit_issued
        {
            handoff.submit_issued = true;
            Action::SubmitPrefill
        } else if handoff.held && handoff.transferable_tokens.is_some() && !handoff.transfer_issued
        {
            handoff.transfer_issued = true;
            let prompt_tokens = self.origins[id].input_length;
            let missing = handoff.transferable_tokens.unwrap_or(0);
            Action::StartTransfer {
                delay_ms: self.transfer.delay_ms(prompt_tokens, missing),
            }
        } else if handoff.transfer_completed && !handoff.activation_issued {
            handoff.activation_issued = true;
            Action::ActivateDestination
        } else if handoff.activation_applied && !handoff.release_issued {
            handoff.release_issued = true;
            Action::ReleaseSource
        } else if handoff.source_cleanup_done {
            handoff.mode = Mode::Complete { success: true };
            Action::Complete
        } else {
            return;
        };
        self.actions.push_back((id, action));
    }

    /// Issues the clean-up steps of a failed handoff.
    fn advance_cleanup(&mut self, id: RequestId) {
        let handoff = &mut self.handoffs[id];
        let mut issued = false;
        if handoff.submit_issued && !handoff.source_cancel_issued && !handoff.source_cleanup_done {
            handoff.source_cancel_issued = true;
            self.actions.push_back((id, Action::CancelSource));
            issued = true;
        }
        if handoff.reserve_issued
            && !handoff.destination_cancel_issued
            && !handoff.destination_cleanup_done
        {
            handoff.destination_cancel_issued = true;
            self.actions.push_back((id, Action::CancelDestination));
            issued = true;
        }
        if !issued
            && (!handoff.submit_issued || handoff.source_cleanup_done)
            && (!handoff.reserve_issued || handoff.destination_cleanup_done)
        {
            handoff.mode = Mode::Complete { success: false };
            self.actions.push_back((id, Action::Complete));
        }
    }

    /// The handoff is over: a successful one frees its prefill route; a failed one ends the
    /// request.
    fn complete(&mut self, id: RequestId) {
        match self.handoffs[id].mode {
            Mode::Complete { success: true } => self.free_prefill_route(id),
            Mode::Complete { success: false } => {
                self.collector
                    .on_terminal(id, self.now_ms, TerminalStatus::Canceled);
                self.free_prefill_route(id);
                self.free_decode_route(id);
                self.finish_request(id, false);
            }
            _ => unreachable!("completed handoffs are marked complete"),
        }
    }

    fn free_prefill_route(&mut self, id: RequestId) {
        if !std::mem::take(&mut self.handoffs[id].prefill_routed) {
            return;
        }
        let mut placements = std::mem::take(&mut self.placements);
        if let Some(router) = self.prefill.kv_router() {
            router.on_terminal(id, &mut placements);
        }
        self.dispatch_prefill_placements(&mut placements);
        self.placements = placements;
    }

    fn free_decode_route(&mut self, id: RequestId) {
        if !std::mem::take(&mut self.handoffs[id].decode_routed) {
            return;
        }
        let mut placements = std::mem::take(&mut self.placements);
        if let Some(router) = self.decode.kv_router() {
            router.on_terminal(id, &mut placements);
        }
        // The decode router never queues, so nothing waits for this.
        debug_assert!(placements.is_empty());
        placements.clear();
        self.placements = placements;
    }

    /// Submits the prefills the prefill router took out of its queue.
    fn dispatch_prefill_placements(&mut self, placements: &mut Vec<Placement>) {
        let block_size = self.prefill.args.block_size.max(1);
        for placement in placements.drain(..) {
            let isl = self.origins[placement.id].input_length;
            let overlap_tokens = (placement.overlap_blocks as usize * block_size).min(isl);
            self.submit_prefill(placement.id, placement.target, overlap_tokens);
        }
    }

    /// The decode of request `id` ended (or it was dropped): the session moves on.
    fn finish_request(&mut self, id: RequestId, completed: bool) {
        let handoff = &mut self.handoffs[id];
        if !std::mem::take(&mut handoff.counted) {
            return;
        }
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

    // ---- passes ----

    /// Starts passes on the idle workers of `stage`, lowest id first, starting over after every
    /// pass that did something (a pass that takes no time completes at once and may leave its
    /// worker ready again).
    fn drive_pool(&mut self, stage: Stage) -> bool {
        let mut changed = false;
        'restart: loop {
            let workers = self.pool(stage).schedulers.len();
            for worker in 0..workers {
                let pool = self.pool(stage);
                if pool.busy[worker] || !pool.schedulers[worker].has_work() {
                    continue;
                }
                if self.start_pass(stage, worker) {
                    changed = true;
                    continue 'restart;
                }
            }
            return changed;
        }
    }

    /// Runs one pass on an idle worker; false when the pass could do nothing.
    fn start_pass(&mut self, stage: Stage, worker: usize) -> bool {
        let now = self.now_ms;
        let mut events = std::mem::take(&mut self.pass_events);
        events.clear();
        let pool = match stage {
            Stage::Prefill => &mut self.prefill,
            Stage::Decode => &mut self.decode,
        };
        let time = pool.schedulers[worker].run_pass_timed(&mut events);
        let mut kv_published = false;
        if let PoolRouter::Kv(router) = &mut pool.router {
            if stage == Stage::Prefill && pool.schedulers[worker].kv_events_at_pass_start() {
                pool.schedulers[worker].drain_kv_events(&mut self.kv_events);
                kv_published = !self.kv_events.is_empty();
                router.apply_kv_events(worker, &self.kv_events);
            }
        }
        let end_ms = time.end_ms(now);
        let progressed =
            end_ms > now || time.scheduled_requests > 0 || !events.is_empty() || kv_published;
        if !progressed {
            self.pass_events = events;
            return false;
        }
        let mut pending = std::mem::take(&mut self.pool(stage).pending[worker]);
        pending.clear();
        for &event in &events {
            match event {
                PassEvent::Admitted { id, reused_tokens } => match stage {
                    Stage::Prefill => self.collector.on_prefill_admit(id, now, reused_tokens),
                    Stage::Decode => self.collector.on_decode_admit(id, now, reused_tokens),
                },
                other => pending.push(other),
            }
        }
        self.pass_events = events;
        if end_ms > now {
            let pool = self.pool(stage);
            pool.pending[worker] = pending;
            pool.busy[worker] = true;
            self.events.push(end_ms, Event::PassEnd { stage, worker });
        } else {
            self.pool(stage).pending[worker] = pending;
            self.on_pass_end(stage, worker, false);
        }
        true
    }

    /// Applies the end of a pass of `worker` at `now_ms`. `scheduled`: it was a timed pass
    /// (actions waiting for the worker are woken).
    fn on_pass_end(&mut self, stage: Stage, worker: usize, scheduled: bool) {
        let pool = self.pool(stage);
        pool.busy[worker] = false;
        let events = std::mem::take(&mut pool.pending[worker]);
        // Capacity freed by the pass may admit a waiting destination.
        let reserved = match stage {
            Stage::Decode => pool.schedulers[worker].retry_destinations(),
            Stage::Prefill => None,
        };
        if scheduled {
            let woken = std::mem::take(&mut pool.deferred[worker]);
            self.actions.extend(woken);
        }
        if stage == Stage::Prefill {
            self.apply_pass_end_kv_events(worker);
        }
        match stage {
            Stage::Prefill => self.apply_prefill_pass(&events),
            Stage::Decode => self.apply_decode_pass(&events),
        }
        if let Some(reserved) = reserved {
            self.on_destination_reserved(reserved);
        }
        let mut events = events;
        events.clear();
        let pool = self.pool(stage);
        if pool.pending[worker].is_empty() {
            pool.pending[worker] = events;
        }
    }

    /// KV events of engines that make them visible when a pass completes (SGLang).
    fn apply_pass_end_kv_events(&mut self, worker: usize) {
        let pool = &mut self.prefill;
        let PoolRouter::Kv(router) = &mut pool.router else {
            return;
        };
        if !pool.schedulers[worker].kv_events_at_pass_start() {
            pool.schedulers[worker].drain_kv_events(&mut self.kv_events);
            router.apply_kv_events(worker, &self.kv_events);
        }
    }

    /// A prefill pass ended: finished prefills release their router load, then their sources
    /// are held for the handoff. Its tokens are not the user's.
    fn apply_prefill_pass(&mut self, events: &[PassEvent]) {
        for &event in events {
            match event {
                PassEvent::Completed { id } => {
                    let mut placements = std::mem::take(&mut self.placements);
                    if let Some(router) = self.prefill.kv_router() {
                        router.on_first_token(id, &mut placements);
                    }
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
                    self.origins[id].generated += count;
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
