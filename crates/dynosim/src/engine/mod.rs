//! Simulated engines: one scheduler per data-parallel rank, over a paged KV cache with prefix
//! caching, timed by a timing model.
//!
//! INTERFACE used by the simulator (`sim`): the simulator owns virtual time. It enqueues routed
//! requests into a rank's [`RankScheduler`], asks a rank to run one forward pass when the
//! worker is free, and stamps the returned events: admissions and rejections at the pass start,
//! tokens and completions at the pass end (for DP groups: the end of the slowest rank's pass).
//!
//! Pass durations: each scheduler describes a pass as a prefill batch and a decode batch and
//! asks its [`timing::TimingModel`] (the timer of its engine arguments, shared by all ranks
//! built from them). With speculative decoding (`aic_nextn`) a ready request emits a burst of
//! tokens per step, drawn by the scheduler's own [`speculative::BurstSampler`].

use crate::config::{EngineArgs, EngineType};
use crate::tokens::TokenSeq;

pub mod fpm;
pub mod kv;
pub mod sglang;
pub mod speculative;
pub mod timing;
pub mod vllm;

pub use timing::PassTime;

/// Dense request index assigned by the simulator (unique within a run).
pub type RequestId = usize;

/// A request as an engine sees it.
#[derive(Clone, Debug)]
pub struct EngineRequest {
    pub id: RequestId,
    /// The full prompt.
    pub prompt: TokenSeq,
    /// Requested output tokens (may be 0).
    pub max_output_tokens: usize,
}

/// What happened to one request during one pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassEvent {
    /// Admitted (first admission or re-admission after preemption) at the pass start, reusing
    /// `reused_tokens` prompt tokens from the prefix cache.
    Admitted { id: RequestId, reused_tokens: usize },
    /// Can never be served (e.g. prompt >= max_model_len, or more blocks than the pool); terminal.
    Rejected { id: RequestId },
    /// Emitted `count` output tokens, stamped at the pass end.
    Tokens { id: RequestId, count: usize },
    /// Finished at the pass end (after its last token, if any); terminal.
    Completed { id: RequestId },
}

/// A decode worker reserved KV for the prompt of handoff `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestinationReserved {
    pub id: RequestId,
    /// Prompt tokens the reservation could not find resident (fresh blocks × block size):
    /// what a `destination_missing` transfer moves.
    pub transferable_tokens: usize,
}

/// Activation of a handoff destination that is not reserved on this rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotReserved;

/// Why a handoff destination could not be accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DestinationRefused {
    /// The prompt needs more blocks than the whole KV pool.
    TooLarge,
}

/// What one rank holds at a moment: for the report's time series.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankLoad {
    /// Requests queued and not running (handoffs activated on a decode rank included).
    pub waiting: usize,
    /// Requests in the running batch.
    pub running: usize,
    /// KV capacity held by requests (cached-but-idle prefixes excluded), in tokens.
    pub kv_used_tokens: usize,
    /// The rank's whole KV capacity, in tokens.
    pub kv_capacity_tokens: usize,
}

/// One DP rank's scheduler.
#[derive(Debug)]
pub enum RankScheduler {
    /// vLLM and TRT-LLM flavours.
    Vllm(vllm::VllmScheduler),
    Sglang(sglang::SglangScheduler),
}

impl RankScheduler {
    /// A scheduler for one rank. `rank_index` is the dense scheduler index (worker * dp + rank).
    pub fn new(args: &EngineArgs, rank_index: usize) -> Self {
        match args.engine_type {
            EngineType::Sglang => {
                RankScheduler::Sglang(sglang::SglangScheduler::new(args, rank_index))
            }
            EngineType::Vllm | EngineType::Trtllm => {
                RankScheduler::Vllm(vllm::VllmScheduler::new(args, rank_index))
            }
        }
    }

    /// Whether schedulers of `args` keep a block pool ([`RankScheduler::block_pool`]).
    pub fn keeps_block_pool(args: &EngineArgs) -> bool {
        match args.engine_type {
            EngineType::Sglang => false,
            EngineType::Vllm | EngineType::Trtllm => true,
        }
    }

    /// Queues a request that arrived at this rank; it is considered at the next pass start.
    pub fn enqueue(&mut self, request: EngineRequest) {
        match self {
            RankScheduler::Vllm(s) => s.enqueue(request),
            RankScheduler::Sglang(s) => s.enqueue(request),
        }
    }

    /// Between passes: request `id` leaves the rank and its KV is released. False when the
    /// rank does not hold it.
    pub fn abort(&mut self, id: RequestId) -> bool {
        match self {
            RankScheduler::Vllm(s) => s.abort(id),
            RankScheduler::Sglang(s) => s.abort(id),
        }
    }

    /// True when a pass started now would have something to do (waiting or running requests).
    pub fn has_work(&self) -> bool {
        match self {
            RankScheduler::Vllm(s) => s.has_work(),
            RankScheduler::Sglang(s) => s.has_work(),
        }
    }

    /// Starts recording prefix-cache events for a KV-aware router (off by default: round
    /// robin does not pay for them).
    pub fn record_kv_events(&mut self) {
        match self {
            RankScheduler::Vllm(s) => s.record_kv_events(),
            RankScheduler::Sglang(s) => s.record_kv_events(),
        }
    }

    /// When a pass's KV events become visible to routing: at the pass start (vLLM, TRT-LLM)
    /// or at its end (SGLang). The simulator drains them at that moment.
    pub fn kv_events_at_pass_start(&self) -> bool {
        match self {
            RankScheduler::Vllm(_) => true,
            RankScheduler::Sglang(_) => false,
        }
    }

    /// Moves the KV events recorded since the last call into `out` (replacing its contents).
    /// vLLM's events are visible to routing at the start of the pass that produced them, so
    /// the simulator drains them right after starting a pass. (An engine whose events become
    /// visible at the pass end drains them when the pass completes.)
    pub fn drain_kv_events(&mut self, out: &mut Vec<kv::KvEvent>) {
        match self {
            RankScheduler::Vllm(s) => s.drain_kv_events(out),
            RankScheduler::Sglang(s) => s.drain_kv_events(out),
        }
    }

    /// The block pool of a flavour that keeps one (vLLM, TRT-LLM), whose index of cached
    /// block keys can answer a KV router's per-block questions (see
    /// [`kv::BlockPool::visible_as_drained`]); `None` for SGLang.
    pub fn block_pool(&self) -> Option<&kv::BlockPool> {
        match self {
            RankScheduler::Vllm(s) => Some(s.block_pool()),
            RankScheduler::Sglang(_) => None,
        }
    }

    /// The next pass only decodes: it admits, rejects and preempts nothing, emits one token
    /// for every running request (completing those that reach their length), and takes time.
    /// (vLLM and TRT-LLM can tell; SGLang answers false.)
    pub fn next_pass_decodes_only(&self) -> bool {
        match self {
            RankScheduler::Vllm(s) => s.next_pass_decodes_only(),
            RankScheduler::Sglang(_) => false,
        }
    }

    /// Runs decode-only passes back to back from `start_ms` while each may end ahead of the
    /// loop (see [`vllm::VllmScheduler::run_decode_passes`]), or returns `None`, having run
    /// nothing, for a flavour that cannot (SGLang). [`RankScheduler::next_pass_decodes_only`]
    /// must hold.
    pub fn run_decode_passes(
        &mut self,
        start_ms: f64,
        ends_ahead: impl FnMut(f64) -> bool,
        ends: &mut Vec<f64>,
        ids: &mut Vec<RequestId>,
        events: &mut Vec<PassEvent>,
    ) -> Option<f64> {
        match self {
            RankScheduler::Vllm(s) => {
                Some(s.run_decode_passes(start_ms, ends_ahead, ends, ids, events))
            }
            RankScheduler::Sglang(_) => None,
        }
    }

    /// Holds nothing: no request, and no KV kept or reserved for a handoff.
    pub fn is_drained(&self) -> bool {
        match self {
            RankScheduler::Vllm(s) => s.is_drained(),
            RankScheduler::Sglang(s) => s.is_drained(),
        }
    }

    /// Records each pass's forward-pass metrics from now on (a planner reads them).
    pub fn record_fpm(&mut self) {
        match self {
            RankScheduler::Vllm(s) => s.record_fpm(),
            RankScheduler::Sglang(s) => s.record_fpm(),
        }
    }

    /// The forward-pass metrics of the last pass when recording (duration left to the caller).
    pub fn last_fpm(&self) -> Option<fpm::ForwardPassMetrics> {
        match self {
            RankScheduler::Vllm(s) => s.last_fpm(),
            RankScheduler::Sglang(s) => s.last_fpm(),
        }
    }

    /// Requests held by this rank (waiting + running).
    pub fn num_requests(&self) -> usize {
        match self {
            RankScheduler::Vllm(s) => s.num_requests(),
            RankScheduler::Sglang(s) => s.num_requests(),
        }
    }

    /// Runs one forward pass: commits all scheduling decisions, appends what happened to
    /// `events` (in the order the engine decided it), and returns the pass duration in ms
    /// (prefill time + decode time, speed-up ratios applied). A pass with no work returns 0.
    pub fn run_pass(&mut self, events: &mut Vec<PassEvent>) -> f64 {
        match self {
            RankScheduler::Vllm(s) => s.run_pass(events),
            RankScheduler::Sglang(s) => s.run_pass_timed(events).total_ms(),
        }
    }

    /// Like [`RankScheduler::run_pass`], but returns the pass's prefill and decode parts
    /// separately. The reference advances its clock by each part in turn
    /// (`end = (start + prefill_ms) + decode_ms`), so use [`PassTime::end_ms`] to get
    /// bit-identical timestamps.
    pub fn run_pass_timed(&mut self, events: &mut Vec<PassEvent>) -> PassTime {
        match self {
            RankScheduler::Vllm(s) => s.run_pass_timed(events),
            RankScheduler::Sglang(s) => s.run_pass_timed(events),
        }
    }

    /// Whether the events of the last [`RankScheduler::run_pass_timed`] may hold
    /// [`PassEvent::Admitted`] (false: they hold none; SGLang always answers true).
    pub fn last_pass_may_admit(&self) -> bool {
        match self {
            RankScheduler::Vllm(s) => s.last_pass_may_admit(),
            RankScheduler::Sglang(_) => true,
        }
    }

    /// Prefill role: releases the KV held for the handoff of `id` (false: nothing was held).
    pub fn release_source(&mut self, id: RequestId) -> bool {
        match self {
            RankScheduler::Vllm(s) => s.release_source(id),
            RankScheduler::Sglang(s) => s.release_source(id),
        }
    }

    /// Decode role: queues a KV reservation for `request`'s prompt and, with `try_now` (the
    /// worker is between passes), attempts the oldest pending one. Returns what was reserved.
    pub fn reserve_destination(
        &mut self,
        request: EngineRequest,
        try_now: bool,
    ) -> Result<Option<DestinationReserved>, DestinationRefused> {
        match self {
            RankScheduler::Vllm(s) => s
                .reserve_destination(request, try_now)
                .map_err(|_| DestinationRefused::TooLarge),
            RankScheduler::Sglang(s) => s.reserve_destination(request, try_now),
        }
    }

    /// Decode role: retries the oldest pending reservation if capacity may have grown since
    /// its last attempt (called when a pass completes).
    pub fn retry_destinations(&mut self) -> Option<DestinationReserved> {
        match self {
            RankScheduler::Vllm(s) => s.retry_destinations(),
            RankScheduler::Sglang(s) => s.retry_destinations(),
        }
    }

    /// Decode role: the transfer of handoff `id` completed; it joins the waiting queue with its
    /// prompt computed. Returns a reservation this made possible. `Err` if `id` is not reserved.
    pub fn activate_destination(
        &mut self,
        id: RequestId,
    ) -> Result<Option<DestinationReserved>, NotReserved> {
        match self {
            RankScheduler::Vllm(s) => s.activate_destination(id),
            RankScheduler::Sglang(s) => s.activate_destination(id),
        }
    }

    /// Decode role: drops a pending or reserved handoff destination.
    pub fn cancel_destination(&mut self, id: RequestId) -> bool {
        match self {
            RankScheduler::Vllm(s) => s.cancel_destination(id),
            RankScheduler::Sglang(s) => s.cancel_destination(id),
        }
    }

    /// Queue, batch and KV use right now.
    pub fn load(&self) -> RankLoad {
        match self {
            RankScheduler::Vllm(s) => s.load(),
            RankScheduler::Sglang(s) => s.load(),
        }
    }

    /// After a pass that could do nothing, the request that blocks this rank, if the engine can
    /// tell: an SGLang request that can never fit waits at the head of the queue (SGLang never
    /// rejects). `None` for vLLM/TRT-LLM, which reject what can never fit.
    pub fn blocked_request(&self) -> Option<RequestId> {
        match self {
            RankScheduler::Vllm(_) => None,
            RankScheduler::Sglang(s) => s.blocked_request(),
        }
    }
}
