//! The vLLM scheduler flavour (and TRT-LLM's guaranteed-no-evict variant).
//!
//! One pass: running requests are scheduled first (in admission order) against the token
//! budget, then waiting requests are admitted from the head of the queue until one does not fit.
//! KV blocks come from a [`BlockPool`] with prefix caching; when it runs dry while scheduling, a
//! running request is preempted (vLLM) and re-queued at the front. Prefill time follows the
//! prompt tokens scheduled this pass, decode time the KV utilisation, and every ready request
//! then emits one token. See `shared/spec/engine.md` §3 and §4.
//!
//! Disaggregated roles (engine.md §7): a prefill worker keeps the KV blocks of a finished
//! request as a *source hold* until the handoff releases them; a decode worker *reserves* KV
//! for an incoming prompt (FIFO, retried whenever its capacity may have grown), then
//! *activates* it: the request joins the waiting queue with its prompt already computed and is
//! admitted without a capacity check.
//!
//! One concern per file, each adding methods to [`VllmScheduler`]:
//! - [`request`]: a request's state on the rank, and the countdown of its plain decode tokens;
//! - [`schedule`]: the general pass (running requests, then admissions), the admission checks,
//!   and the forward-pass metrics of what it scheduled;
//! - [`blocks`]: growing a request's block table and making computed blocks cache-visible;
//! - [`release`]: preemption, and what becomes of a finished request's blocks;
//! - [`emit`]: token emission after the scheduling step (plain, or speculative bursts) and the
//!   decode time it measures;
//! - [`decode_only`]: the shortcut for passes that only decode, one at a time or run back to
//!   back, giving exactly the general pass's outcome;
//! - [`disagg`]: the decode worker's handoff destinations and the prefill worker's source holds;
//! - [`batch_wait`]: TRT-LLM's batch waiting, which may hold a pass's prefill back while
//!   decodes run.
//!
//! INTERFACE
//! - [`VllmScheduler::new`] from the engine args of one rank; [`VllmScheduler::enqueue`],
//!   [`VllmScheduler::abort`] between passes.
//! - [`VllmScheduler::run_pass_timed`] runs one pass, appending its [`PassEvent`]s
//!   ([`VllmScheduler::last_pass_may_admit`]: false when they hold no admission);
//!   [`VllmScheduler::next_pass_decodes_only`] and [`VllmScheduler::run_decode_passes`] let the
//!   simulation loop run decode-only passes in a batch.
//! - Disaggregated roles: [`VllmScheduler::release_source`],
//!   [`VllmScheduler::reserve_destination`], [`VllmScheduler::retry_destinations`],
//!   [`VllmScheduler::activate_destination`], [`VllmScheduler::cancel_destination`].
//! - Observers: [`VllmScheduler::load`], [`VllmScheduler::has_work`],
//!   [`VllmScheduler::is_drained`], KV events ([`VllmScheduler::record_kv_events`],
//!   [`VllmScheduler::drain_kv_events`]), forward-pass metrics ([`VllmScheduler::record_fpm`]).

mod batch_wait;
mod blocks;
mod decode_only;
mod disagg;
mod emit;
mod release;
mod request;
mod schedule;

use std::collections::VecDeque;

use super::fpm::ForwardPassMetrics;
use super::kv::{BlockPool, CopyId, FastMap, KvEvent};
use super::speculative::BurstSampler;
use super::timing::{PassTime, TimingModel};
use super::{EngineRequest, PassEvent, RequestId};
use crate::config::{EngineArgs, EngineType, PreemptionMode, WorkerType};
use crate::tokens::ChainTail;
use batch_wait::BatchWaiting;
pub use disagg::DestinationTooLarge;
use disagg::PendingDestination;
use request::Request;
use schedule::Scheduled;

/// The most emptied block tables a rank keeps for reuse.
const SPARE_BLOCK_TABLES: usize = 64;

/// Which admission/preemption policy the shared core follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    /// Admit on the current footprint; preempt on KV exhaustion; recompute a fully cached tail.
    Vllm,
    /// Reserve the whole request up front; never preempt.
    TrtllmNoEvict,
}

#[derive(Debug)]
pub struct VllmScheduler {
    policy: Policy,
    block_size: usize,
    num_blocks: usize,
    max_num_seqs: usize,
    max_batched_tokens: usize,
    max_model_len: Option<usize>,
    chunked_prefill: bool,
    preemption: PreemptionMode,
    worker_type: WorkerType,
    timing: TimingModel,
    /// Speculative decoding: ready requests emit bursts of tokens.
    speculative: Option<BurstSampler>,
    pool: BlockPool,
    waiting: VecDeque<Request>,
    running: Vec<Request>,
    /// Prefill role: blocks of finished requests kept until their handoff releases them.
    source_holds: FastMap<RequestId, Vec<CopyId>>,
    /// Decode role: handoffs waiting for KV capacity, oldest first.
    pending_destinations: VecDeque<PendingDestination>,
    /// Decode role: reserved handoffs waiting for their transfer to complete.
    reserved_destinations: FastMap<RequestId, Request>,
    /// Bumped whenever KV capacity or a running slot may have been freed; a pending
    /// destination is retried at most once per value.
    capacity_generation: u64,
    /// With a planner: the forward-pass metrics of the last pass (duration left at 0).
    fpm: Option<ForwardPassMetrics>,
    /// The last pass's scheduled requests, kept for the allocation.
    scheduled_scratch: Vec<Scheduled>,
    /// The block tables of finished requests, emptied, for the next requests' first
    /// allocations (at most [`SPARE_BLOCK_TABLES`]): an allocation and a free fewer per
    /// request. Taken at a request's first allocation, not at its arrival, so that a waiting
    /// request holds no block table.
    spare_block_tables: Vec<Vec<CopyId>>,
    /// Every running request is decoding plainly: it has exactly its last generated token to
    /// compute ([`Request::decodes_plainly`]). Set at the end of every pass; nothing changes
    /// `running` between passes.
    all_decoding: bool,
    /// Whether decode-only passes take their one-walk path (always, but for the tests that
    /// compare it with the full pass).
    decode_only_path: bool,
    /// Every pass with a token to emit takes time (the timer's decode floor survives the
    /// speed-up ratios, and this is no prefill worker, whose decode steps cost nothing).
    decode_takes_time: bool,
    /// TRT-LLM's batch waiting, where it can hold a pass.
    batch_waiting: Option<BatchWaiting>,
    /// The last pass reached the admission step of the full pass, the only one that admits:
    /// otherwise its events hold no admission.
    admission_step_ran: bool,
}

impl VllmScheduler {
    pub fn new(args: &EngineArgs, rank_index: usize) -> Self {
        let policy = match args.engine_type {
            EngineType::Trtllm => Policy::TrtllmNoEvict,
            _ => Policy::Vllm,
        };
        let block_size = args.block_size.max(1);
        let num_blocks = args.num_gpu_blocks.max(1);
        let timing = TimingModel::new(args);
        Self {
            decode_takes_time: args.worker_type != WorkerType::Prefill
                && timing.decode_always_takes_time(),
            policy,
            block_size,
            num_blocks,
            max_num_seqs: args.max_num_seqs.unwrap_or(usize::MAX),
            max_batched_tokens: args.max_num_batched_tokens.unwrap_or(usize::MAX),
            max_model_len: match policy {
                Policy::Vllm => args.max_model_len,
                Policy::TrtllmNoEvict => None,
            },
            chunked_prefill: args.enable_chunked_prefill,
            preemption: args.preemption_mode,
            worker_type: args.worker_type,
            timing,
            speculative: args.speculative.as_ref().map(|speculative| {
                BurstSampler::new(
                    speculative,
                    args.draft_acceptance_scale(),
                    rank_index as u64,
                )
            }),
            pool: BlockPool::new(num_blocks, args.enable_prefix_caching),
            waiting: VecDeque::new(),
            running: Vec::new(),
            source_holds: FastMap::default(),
            pending_destinations: VecDeque::new(),
            reserved_destinations: FastMap::default(),
            capacity_generation: 0,
            fpm: None,
            scheduled_scratch: Vec::new(),
            spare_block_tables: Vec::new(),
            all_decoding: false,
            decode_only_path: true,
            batch_waiting: BatchWaiting::for_rank(args, policy),
            admission_step_ran: false,
        }
    }

    /// Records the forward-pass metrics of every pass from now on (for a planner).
    pub fn record_fpm(&mut self) {
        self.fpm.get_or_insert_with(ForwardPassMetrics::default);
    }

    /// The forward-pass metrics of the last pass, if recorded (its duration is the caller's).
    pub fn last_fpm(&self) -> Option<ForwardPassMetrics> {
        self.fpm
    }

    pub fn enqueue(&mut self, request: EngineRequest) {
        let request = self.new_request(request);
        self.waiting.push_back(request);
    }

    fn new_request(&mut self, request: EngineRequest) -> Request {
        let prompt_len = request.prompt.len();
        let mut max_output = request.max_output_tokens;
        if self.policy == Policy::TrtllmNoEvict {
            // A no-evict request may reserve at most the whole pool. A prompt that alone fills
            // it keeps its output and is rejected at admission.
            let capacity = self.num_blocks.saturating_mul(self.block_size);
            if prompt_len < capacity {
                max_output = max_output.min(capacity - prompt_len);
            }
        }
        let (hashes, chain) = if self.pool.caching() {
            // Room for the keys of the blocks its generation will fill too, within the bound
            // `Request::hash_blocks_through` would grow them to: growing them there copied
            // every prompt key once more.
            let prompt_blocks = prompt_len / self.block_size;
            let planned = prompt_len.saturating_add(max_output) / self.block_size;
            let mut hashes = Vec::with_capacity(planned.min(2 * prompt_blocks + 64));
            request
                .prompt
                .extend_block_hashes(self.block_size, &mut hashes);
            (hashes, request.prompt.tail())
        } else {
            (Vec::new(), ChainTail::default())
        };
        Request {
            id: request.id,
            prompt_len,
            max_output,
            generated: 0,
            hashes,
            chain,
            blocks: Vec::new(),
            allocated_tokens: 0,
            num_computed: 0,
            fresh: true,
            finished: false,
            plain_until: 0,
            generation_end: 0,
        }
    }

    /// Between passes: request `id` leaves the rank (its client went away), waiting or
    /// running, and the blocks it holds are released (into the prefix cache, like a finished
    /// request's). False when the rank does not hold it.
    pub fn abort(&mut self, id: RequestId) -> bool {
        let mut request = if let Some(at) = self.waiting.iter().position(|r| r.id == id) {
            self.waiting.remove(at).expect("found above")
        } else if let Some(at) = self.running.iter().position(|r| r.id == id) {
            // The others keep their state: `all_decoding` still holds for them.
            self.running.remove(at)
        } else {
            return false;
        };
        Self::release_blocks(&mut self.pool, &mut request);
        self.capacity_generation += 1;
        true
    }

    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    pub fn num_requests(&self) -> usize {
        self.waiting.len() + self.running.len()
    }

    /// Holds nothing at all: no request, no source kept for a handoff, no destination
    /// pending or reserved.
    pub fn is_drained(&self) -> bool {
        self.num_requests() == 0
            && self.source_holds.is_empty()
            && self.pending_destinations.is_empty()
            && self.reserved_destinations.is_empty()
    }

    /// Starts recording the prefix cache's KV events (for a KV-aware router).
    pub fn record_kv_events(&mut self) {
        self.pool.record_events();
    }

    /// Moves the KV events recorded since the last call into `out` (replacing its contents).
    pub fn drain_kv_events(&mut self, out: &mut Vec<KvEvent>) {
        self.pool.drain_events_into(out);
    }

    /// The prefix cache, to read which blocks it had published as of the last drain.
    pub fn block_pool(&self) -> &BlockPool {
        &self.pool
    }

    /// KV blocks in use (resident and not idle in the prefix cache).
    pub fn active_blocks(&self) -> usize {
        self.pool.num_active()
    }

    pub fn load(&self) -> super::RankLoad {
        super::RankLoad {
            waiting: self.waiting.len(),
            running: self.running.len(),
            kv_used_tokens: self.pool.num_active() * self.block_size,
            kv_capacity_tokens: self.pool.capacity() * self.block_size,
        }
    }

    pub fn run_pass(&mut self, events: &mut Vec<PassEvent>) -> f64 {
        self.run_pass_timed(events).total_ms()
    }

    /// Whether the last pass's events may hold admissions (false: they hold none, and a
    /// caller need not look for them).
    pub fn last_pass_may_admit(&self) -> bool {
        self.admission_step_ran
    }

    /// Runs one pass; see [`super::RankScheduler::run_pass_timed`].
    pub fn run_pass_timed(&mut self, events: &mut Vec<PassEvent>) -> PassTime {
        self.admission_step_ran = false;
        if self.decode_only_pass_applies() {
            let time = self.run_decode_only_pass(events);
            // Every request left has exactly its new token to compute: it decodes plainly.
            debug_assert!(self.running.iter().all(Request::decodes_plainly));
            self.all_decoding = true;
            return time;
        }
        if self.decode_pass_before_queue_applies() {
            let (time, decoded_only) = self.run_decode_pass_before_queue(events);
            if decoded_only {
                debug_assert!(self.running.iter().all(Request::decodes_plainly));
                self.all_decoding = true;
                return time;
            }
            self.all_decoding = self.running.iter().rev().all(Request::decodes_plainly);
            return time;
        }
        let time = self.run_full_pass(events);
        // Newest first: a request still in its prefill is most likely among the last admitted.
        self.all_decoding = self.running.iter().rev().all(Request::decodes_plainly);
        time
    }
}

#[cfg(test)]
mod tests;
