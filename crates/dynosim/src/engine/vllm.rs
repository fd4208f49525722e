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

use std::collections::VecDeque;

use super::fpm::{ForwardPassMetrics, FpmBuilder};
use super::kv::{BlockPool, CopyId, FastMap, KvEvent};
use super::speculative::BurstSampler;
use super::timing::{DecodeBatch, PassTime, PrefillBatch, TimingModel};
use super::{DestinationReserved, EngineRequest, NotReserved, PassEvent, RequestId};
use crate::config::{EngineArgs, EngineType, PreemptionMode, WorkerType};
use crate::tokens::{block_key, ChainTail};

/// Which admission/preemption policy the shared core follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    /// Admit on the current footprint; preempt on KV exhaustion; recompute a fully cached tail.
    Vllm,
    /// Reserve the whole request up front; never preempt.
    TrtllmNoEvict,
}

/// A request held by the rank.
#[derive(Debug)]
struct Request {
    id: RequestId,
    prompt_len: usize,
    /// Output tokens to generate (already clamped for TRT-LLM).
    max_output: usize,
    generated: usize,
    /// Block keys ([`crate::tokens::block_key`]) of the leading blocks that are complete and
    /// hashable: the prompt's full
    /// blocks, then each later block once it has been filled and computed.
    hashes: Vec<u64>,
    /// The hash chain through the prompt and the generated tokens hashed so far, kept only
    /// with prefix caching on (to hash generated blocks by content, as a later prompt
    /// containing them would be hashed). Generated tokens are folded in when a block they end
    /// is hashed, not as they are emitted.
    chain: ChainTail,
    /// Physical copies held, one per block, from the first block on.
    blocks: Vec<CopyId>,
    /// Tokens the held blocks were allocated for.
    allocated_tokens: usize,
    num_computed: usize,
    /// Never admitted yet (a preempted request is not fresh).
    fresh: bool,
    /// Finished in the current pass (removed from `running` at its end).
    finished: bool,
    /// While its length is below this, the request [`Request::decodes_plainly`] and its last
    /// token [`Request::plain_token_fits`]; 0 when unknown. Set by
    /// [`Request::count_plain_tokens`]; plain tokens and their emission keep it true; anything
    /// else that changes the request's blocks, computed tokens or generated count in a way
    /// that could make it false (releasing its blocks, a speculative burst) resets it.
    plain_until: usize,
    /// Valid while `plain_until` is not 0: the `generated` count at which nothing is left to
    /// generate ([`Request::remaining_generation`] reaches 0).
    generation_end: usize,
}

impl Request {
    fn len(&self) -> usize {
        self.prompt_len + self.generated
    }

    /// An activated handoff destination: its prompt KV arrived already computed.
    fn prompt_is_prebuilt(&self) -> bool {
        self.num_computed >= self.prompt_len && self.allocated_tokens >= self.prompt_len
    }

    /// Extends `hashes` with the keys of the blocks up to `blocks` (exclusive) that end in
    /// generated tokens, folding those tokens into the chain.
    fn hash_blocks_through(&mut self, blocks: usize, block_size: usize) {
        debug_assert!(blocks * block_size <= self.len());
        if self.hashes.capacity() < blocks {
            // The prompt's keys were allocated at their size: make room once for the full
            // blocks of the whole generation (at most twice as many as now, for a request
            // that asks for a huge output), not at every doubling.
            let planned = (self.prompt_len + self.max_output) / block_size;
            let room = planned.min(2 * blocks + 64).max(blocks);
            self.hashes.reserve_exact(room - self.hashes.len());
        }
        while self.hashes.len() < blocks {
            let index = self.hashes.len();
            let end = (index + 1) * block_size;
            if self.chain.len() < end {
                let generated = self.chain.len() - self.prompt_len;
                self.chain
                    .push_generated(self.id as u64, generated as u64, end - self.chain.len());
            }
            let base = self.chain.last_base().expect("a hashed block holds tokens");
            self.hashes.push(block_key(base, index));
        }
    }

    /// Running with its prompt computed and exactly its last generated token left to compute:
    /// a pass schedules it one token.
    fn decodes_plainly(&self) -> bool {
        self.num_computed > 0
            && self.num_computed >= self.prompt_len
            && self.num_computed + 1 == self.len()
    }

    /// Whether the last token of a request that [`Request::decodes_plainly`] neither needs a
    /// new block nor completes one (with caching on): nothing to allocate, nothing to make
    /// cache-visible.
    fn plain_token_fits(&self, block_size: usize, caching: bool) -> bool {
        let len = self.len();
        // `allocate`'s no-op case: the held blocks already cover the token.
        let known_blocks = len.div_ceil(block_size);
        let have = self.allocated_tokens.div_ceil(block_size).min(known_blocks);
        if len > self.allocated_tokens && known_blocks > have {
            return false;
        }
        // `finalize_computed`'s no-op case: the token does not end a block.
        !(caching && len.is_multiple_of(block_size))
    }

    /// Schedules the last token when the request [`Request::decodes_plainly`] and the token
    /// [`Request::plain_token_fits`], as its countdown tells (recounted once it runs out).
    /// Returns false, having changed nothing but the countdown, otherwise.
    fn take_plain_token(
        &mut self,
        block_size: usize,
        caching: bool,
        max_model_len: Option<usize>,
    ) -> bool {
        let len = self.len();
        if len >= self.plain_until {
            if !self.decodes_plainly() {
                return false;
            }
            self.count_plain_tokens(block_size, caching, max_model_len);
            if len >= self.plain_until {
                return false;
            }
        }
        debug_assert!(self.decodes_plainly() && self.plain_token_fits(block_size, caching));
        self.allocated_tokens = self.allocated_tokens.max(len);
        self.num_computed = len;
        true
    }

    /// Sets `plain_until` and `generation_end` from the current state of a request that
    /// [`Request::decodes_plainly`]. A plain token leaves its blocks as they are and makes
    /// `allocated_tokens` its length, so every later token fits plainly while it stays within
    /// the blocks held (`held` tokens) and, with caching, does not end a block.
    fn count_plain_tokens(
        &mut self,
        block_size: usize,
        caching: bool,
        max_model_len: Option<usize>,
    ) {
        let len = self.len();
        let held = self.allocated_tokens.div_ceil(block_size) * block_size;
        self.plain_until = if len > held {
            len
        } else if caching {
            len.div_ceil(block_size) * block_size
        } else {
            held + 1
        };
        // Each token lowers what is left by one until it is 0.
        self.generation_end = self.generated + self.remaining_generation(max_model_len);
    }

    /// Whether nothing is left to generate (`remaining_generation` is 0), from the counted
    /// generation end when known.
    fn nothing_left(&self, max_model_len: Option<usize>) -> bool {
        if self.plain_until == 0 {
            return self.remaining_generation(max_model_len) == 0;
        }
        debug_assert_eq!(
            self.generated >= self.generation_end,
            self.remaining_generation(max_model_len) == 0
        );
        self.generated >= self.generation_end
    }

    /// Tokens it may still generate before its output length or the model length limit.
    fn remaining_generation(&self, max_model_len: Option<usize>) -> usize {
        let requested = self.max_output.saturating_sub(self.generated);
        match max_model_len {
            Some(limit) => requested.min(limit.saturating_sub(self.len())),
            None => requested,
        }
    }
}

/// Prefix-cache reuse available to a request about to be admitted.
#[derive(Clone, Copy, Debug)]
struct PrefixCost {
    cached_tokens: usize,
    active_cached_tokens: usize,
}

/// What one request contributed to the current pass (so a preemption can undo it).
#[derive(Clone, Copy, Debug)]
struct Scheduled {
    id: RequestId,
    tokens: usize,
    prompt_before: usize,
    prompt_after: usize,
    /// Nothing left to generate once scheduled (e.g. an output length of 0).
    terminal: bool,
    /// Prompt and sequence length when scheduled (for the forward-pass metrics).
    prompt_len: usize,
    sequence_len: usize,
}

enum Outcome {
    Scheduled { tokens: usize },
    Blocked,
    CurrentPreempted,
}

/// Which queue the request being scheduled currently lives in.
#[derive(Clone, Copy)]
enum Slot {
    Running(usize),
    /// Being admitted from the waiting queue at this position (victims preempted meanwhile
    /// are put in front of it).
    Waiting(usize),
}

/// Prefill batch accumulators of one pass.
#[derive(Default)]
struct Batch {
    prefill: PrefillBatch,
    scheduled: Vec<Scheduled>,
    preempted_any: bool,
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
}

/// A handoff destination waiting for KV capacity on a decode worker.
#[derive(Debug)]
struct PendingDestination {
    request: Request,
    last_attempt_generation: Option<u64>,
}

/// A destination reservation that can never succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestinationTooLarge;

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
            speculative: args
                .speculative
                .as_ref()
                .map(|speculative| BurstSampler::new(speculative, rank_index as u64)),
            pool: BlockPool::new(num_blocks, args.enable_prefix_caching),
            waiting: VecDeque::new(),
            running: Vec::new(),
            source_holds: FastMap::default(),
            pending_destinations: VecDeque::new(),
            reserved_destinations: FastMap::default(),
            capacity_generation: 0,
            fpm: None,
            scheduled_scratch: Vec::new(),
            all_decoding: false,
            decode_only_path: true,
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

    /// What the pass just scheduled and what it left waiting.
    fn pass_metrics(&self, batch: &Batch) -> ForwardPassMetrics {
        let mut builder = FpmBuilder::default();
        for scheduled in &batch.scheduled {
            if scheduled.prompt_after > scheduled.prompt_before {
                builder.scheduled_prefill(
                    scheduled.prompt_len,
                    scheduled.prompt_before,
                    scheduled.tokens,
                );
            } else {
                builder.scheduled_decode(scheduled.sequence_len);
            }
        }
        // On a decode worker every request is a handoff destination: it counts as queued
        // decode work of its prompt's size until it runs, whether activated, reserved or still
        // waiting for KV.
        let destinations = self.worker_type == WorkerType::Decode;
        for request in &self.waiting {
            if destinations {
                builder.queued_decode(request.prompt_len);
            } else if request.fresh {
                builder.queued_prefill(request.prompt_len);
            } else {
                builder.queued_decode(request.len());
            }
        }
        for pending in &self.pending_destinations {
            builder.queued_decode(pending.request.prompt_len);
        }
        for reserved in self.reserved_destinations.values() {
            builder.queued_decode(reserved.prompt_len);
        }
        builder.finish(0.0)
    }

    pub fn enqueue(&mut self, request: EngineRequest) {
        let request = self.new_request(request);
        self.waiting.push_back(request);
    }

    fn new_request(&self, request: EngineRequest) -> Request {
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
            (
                request.prompt.block_keys(self.block_size),
                request.prompt.tail(),
            )
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

    /// Prefill role: frees the KV blocks held for the handoff of `id`. False when nothing was
    /// held.
    pub fn release_source(&mut self, id: RequestId) -> bool {
        let Some(blocks) = self.source_holds.remove(&id) else {
            return false;
        };
        for &copy in blocks.iter().rev() {
            self.pool.release(copy);
        }
        self.capacity_generation += 1;
        true
    }

    /// Decode role: queues a KV reservation for the prompt of `request` (FIFO). With
    /// `try_now` (the worker is between passes) the oldest pending reservation is attempted at
    /// once; what it reserved, if anything, is returned (not necessarily this request).
    pub fn reserve_destination(
        &mut self,
        request: EngineRequest,
        try_now: bool,
    ) -> Result<Option<DestinationReserved>, DestinationTooLarge> {
        let request = self.new_request(request);
        if request.prompt_len.div_ceil(self.block_size) > self.num_blocks {
            return Err(DestinationTooLarge);
        }
        self.pending_destinations.push_back(PendingDestination {
            request,
            last_attempt_generation: None,
        });
        Ok(if try_now {
            self.retry_destinations()
        } else {
            None
        })
    }

    /// Decode role: attempts the oldest pending reservation unless it already failed with the
    /// current capacity. Reserves at most one.
    pub fn retry_destinations(&mut self) -> Option<DestinationReserved> {
        let generation = self.capacity_generation;
        let front = self.pending_destinations.front_mut()?;
        if self.running.len() >= self.max_num_seqs {
            front.last_attempt_generation = Some(generation);
            return None;
        }
        if front.last_attempt_generation == Some(generation) {
            return None;
        }
        front.last_attempt_generation = Some(generation);
        let request = &mut front.request;
        let total_blocks = request.prompt_len.div_ceil(self.block_size);
        // Leading full blocks with any resident copy are shared; the rest arrive fresh.
        let resident = self
            .pool
            .match_prefix(&request.hashes)
            .blocks
            .min(total_blocks);
        let fresh = total_blocks - resident;
        let hashes = &request.hashes;
        if !self.pool.allocate(
            &hashes[..resident],
            fresh,
            |i| hashes.get(resident + i).copied(),
            &mut request.blocks,
        ) {
            return None;
        }
        let mut reserved = self
            .pending_destinations
            .pop_front()
            .expect("attempted destination is pending")
            .request;
        reserved.allocated_tokens = reserved.prompt_len;
        let id = reserved.id;
        self.reserved_destinations.insert(id, reserved);
        Some(DestinationReserved {
            id,
            transferable_tokens: fresh * self.block_size,
        })
    }

    /// Decode role: the KV of reserved handoff `id` has arrived. Its full blocks become
    /// cache-visible, and the request waits for admission with its prompt computed. Returns
    /// a reservation this made possible, if any.
    pub fn activate_destination(
        &mut self,
        id: RequestId,
    ) -> Result<Option<DestinationReserved>, NotReserved> {
        let mut request = self.reserved_destinations.remove(&id).ok_or(NotReserved)?;
        if self.pool.caching() {
            let full = request.prompt_len / self.block_size;
            for &copy in request.blocks.iter().take(full) {
                self.pool.finalize(copy);
            }
        }
        request.num_computed = request.prompt_len;
        request.allocated_tokens = request.prompt_len;
        request.fresh = false;
        self.waiting.push_back(request);
        Ok(self.retry_destinations())
    }

    /// Decode role: drops a handoff destination wherever it is (pending, reserved or active).
    pub fn cancel_destination(&mut self, id: RequestId) -> bool {
        if let Some(pos) = self
            .pending_destinations
            .iter()
            .position(|p| p.request.id == id)
        {
            self.pending_destinations.remove(pos);
            self.capacity_generation += 1;
            return true;
        }
        if let Some(mut request) = self.reserved_destinations.remove(&id) {
            Self::release_blocks(&mut self.pool, &mut request);
            self.capacity_generation += 1;
            return true;
        }
        false
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

    /// Runs one pass; see [`super::RankScheduler::run_pass_timed`].
    pub fn run_pass_timed(&mut self, events: &mut Vec<PassEvent>) -> PassTime {
        if self.decode_only_pass_applies() {
            let time = self.run_decode_only_pass(events);
            // Every request left has exactly its new token to compute: it decodes plainly.
            debug_assert!(self.running.iter().all(Request::decodes_plainly));
            self.all_decoding = true;
            return time;
        }
        let time = self.run_full_pass(events);
        // Newest first: a request still in its prefill is most likely among the last admitted.
        self.all_decoding = self.running.iter().rev().all(Request::decodes_plainly);
        time
    }

    /// Whether the next pass only decodes ([`VllmScheduler::decode_only_pass_applies`]) and
    /// takes time: it admits, rejects and preempts nothing, emits one token for every running
    /// request (completing those that reach their length), and ends after it starts.
    pub fn next_pass_decodes_only(&self) -> bool {
        self.decode_takes_time && self.decode_only_pass_applies()
    }

    /// Whether this pass only decodes, every running request one token, with no admission,
    /// prefill, preemption or speculative burst possible, and nothing recorded per scheduled
    /// request (forward-pass metrics): [`VllmScheduler::run_decode_only_pass`] then gives the
    /// full pass's outcome.
    fn decode_only_pass_applies(&self) -> bool {
        let running = self.running.len();
        self.decode_only_path
            && self.all_decoding
            && running > 0
            && self.speculative.is_none()
            && self.fpm.is_none()
            // The admission step would not look at the queue.
            && (self.waiting.is_empty() || running >= self.max_num_seqs)
            // The token budget covers one token each.
            && running <= self.max_batched_tokens
            // Each token needs at most one new block: room for all of them means no
            // allocation can fail, so nothing is preempted.
            && self.num_blocks.saturating_sub(self.pool.num_active()) >= running
    }

    /// A pass in which every running request decodes one token (see
    /// [`VllmScheduler::decode_only_pass_applies`]): [`VllmScheduler::decode_only_walk`], then
    /// its events, then the finished requests leave, as in the full pass.
    fn run_decode_only_pass(&mut self, events: &mut Vec<PassEvent>) -> PassTime {
        let (time, any_finished) = self.decode_only_walk();
        self.close_decode_only_pass(any_finished, events);
        time
    }

    /// Runs decode-only passes back to back, the first starting at `start_ms`, for as long as
    /// each pass ends where `ends_ahead(end_ms)` allows, completes no request, and leaves the
    /// next pass decode-only ([`VllmScheduler::next_pass_decodes_only`], which must hold on
    /// entry). Those passes' ends go to `ends`; each gave one token to every request of `ids`
    /// (the running requests, in order, which such passes do not change). The last pass run
    /// stays in flight: its events are appended to `events` and its end is returned. What is
    /// left is exactly what running the passes one at a time leaves.
    pub fn run_decode_passes(
        &mut self,
        mut start_ms: f64,
        mut ends_ahead: impl FnMut(f64) -> bool,
        ends: &mut Vec<f64>,
        ids: &mut Vec<RequestId>,
        events: &mut Vec<PassEvent>,
    ) -> f64 {
        debug_assert!(self.next_pass_decodes_only());
        ids.clear();
        ids.extend(self.running.iter().map(|request| request.id));
        loop {
            let (plain, context_tokens) = self.plain_passes_ahead();
            if plain > 0 {
                // A pass the run stopped before (it ends past `ends_ahead`) is walked below,
                // to the same end, and stays in flight.
                self.run_plain_passes(plain, context_tokens, &mut start_ms, &mut ends_ahead, ends);
            }
            let (time, any_finished) = self.decode_only_walk();
            let end_ms = time.end_ms(start_ms);
            if !any_finished && ends_ahead(end_ms) && self.decode_only_pass_applies() {
                ends.push(end_ms);
                start_ms = end_ms;
                continue;
            }
            self.close_decode_only_pass(any_finished, events);
            self.all_decoding = true;
            return end_ms;
        }
    }

    /// How many of the next decode-only passes are *plain*: every running request's token
    /// [`Request::take_plain_token`]s (no block to allocate or to complete) and none of them
    /// reaches its length. Such a pass changes nothing but each request's counts, and leaves
    /// the next pass decode-only, so [`VllmScheduler::run_plain_passes`] can run them without
    /// a walk each. Also returns the context tokens of the first of them. Countdowns that ran
    /// out are recounted, as the walk would recount them in the same state.
    fn plain_passes_ahead(&mut self) -> (usize, usize) {
        let bs = self.block_size;
        let caching = self.pool.caching();
        let max_model_len = self.max_model_len;
        let mut passes = usize::MAX;
        let mut context_tokens = 0;
        for request in &mut self.running {
            debug_assert!(request.decodes_plainly() && !request.finished);
            let len = request.len();
            if len >= request.plain_until {
                request.count_plain_tokens(bs, caching, max_model_len);
            }
            // The request's tokens stay plain while its length is below `plain_until`, and
            // the pass whose token brings `generated` to `generation_end` finishes it.
            let plain = request.plain_until.saturating_sub(len);
            let unfinished = request.generation_end.saturating_sub(request.generated + 1);
            passes = passes.min(plain).min(unfinished);
            if passes == 0 {
                return (0, 0);
            }
            context_tokens += len;
        }
        (passes, context_tokens)
    }

    /// Runs up to `passes` plain passes ([`VllmScheduler::plain_passes_ahead`], whose context
    /// tokens at the first are `context_tokens`) back to back from `start_ms`, as long as each
    /// ends where `ends_ahead` allows, pushing their ends to `ends` and moving `start_ms` to
    /// the last. A pass whose end `ends_ahead` refuses is not run. Leaves every request as
    /// walking those passes one at a time would: the allocation and the KV usage do not change,
    /// so each pass's time follows from its context tokens alone (each pass adds one token per
    /// request).
    fn run_plain_passes(
        &mut self,
        passes: usize,
        context_tokens: usize,
        start_ms: &mut f64,
        ends_ahead: &mut impl FnMut(f64) -> bool,
        ends: &mut Vec<f64>,
    ) {
        let ready = self.running.len();
        let mut ran = 0;
        while ran < passes {
            let time = self.decode_only_time(ready, context_tokens + ran * ready);
            let end_ms = time.end_ms(*start_ms);
            if !ends_ahead(end_ms) {
                break;
            }
            ends.push(end_ms);
            *start_ms = end_ms;
            ran += 1;
        }
        if ran > 0 {
            for request in &mut self.running {
                // What `take_plain_token` left at the last pass's scheduling, then its token.
                let last_len = request.len() + ran - 1;
                request.allocated_tokens = request.allocated_tokens.max(last_len);
                request.num_computed = last_len;
                request.generated += ran;
            }
        }
    }

    /// The time of a decode-only pass of `ready` requests holding `context_tokens`, with the
    /// pool as it is now.
    fn decode_only_time(&mut self, ready: usize, context_tokens: usize) -> PassTime {
        let bs = self.block_size;
        let decode_ms = if self.worker_type == WorkerType::Prefill {
            0.0
        } else {
            self.timing.decode_clock_ms(&DecodeBatch {
                ready,
                active_kv_tokens: self.pool.num_active() * bs,
                total_kv_tokens: self.num_blocks * bs,
                context_tokens,
            })
        };
        PassTime {
            prefill_ms: 0.0,
            decode_ms,
            scheduled_requests: ready,
        }
    }

    /// Schedules and generates one token for every running request (see
    /// [`VllmScheduler::decode_only_pass_applies`]), in one walk over `running` instead of the
    /// full pass's four, marking those that reach their length finished. Scheduling a request
    /// touches only that request and the pool, and generating a token only that request
    /// (finished requests release their blocks after the walk and its events, as in the full
    /// pass), so doing both for each request in turn leaves the pool and the requests exactly
    /// as scheduling all and then generating for all does. The decode time reads the pool
    /// after every allocation and before any release, as there. Returns the pass's time and
    /// whether a request finished.
    fn decode_only_walk(&mut self) -> (PassTime, bool) {
        let bs = self.block_size;
        let caching = self.pool.caching();
        let max_model_len = self.max_model_len;
        let ready = self.running.len();
        let mut context_tokens = 0;
        let mut any_finished = false;
        let mut batch = Batch {
            scheduled: std::mem::take(&mut self.scheduled_scratch),
            ..Batch::default()
        };
        for index in 0..ready {
            let request = &mut self.running[index];
            debug_assert!(request.decodes_plainly() && !request.finished);
            let len = request.len();
            if !request.take_plain_token(bs, caching, max_model_len) {
                // Its token needs a block or completes one: the general step, which cannot
                // fail here.
                batch.scheduled.clear();
                let mut budget = 1;
                let outcome = self.schedule(Slot::Running(index), None, &mut budget, &mut batch);
                debug_assert!(matches!(outcome, Outcome::Scheduled { tokens: 1 }));
            }
            let request = &mut self.running[index];
            context_tokens += len;
            request.generated += 1;
            debug_assert_eq!(
                request.generated >= request.generation_end,
                request.remaining_generation(max_model_len) == 0
            );
            if request.generated >= request.generation_end {
                request.finished = true;
                any_finished = true;
            }
        }
        batch.scheduled.clear();
        self.scheduled_scratch = batch.scheduled;
        (self.decode_only_time(ready, context_tokens), any_finished)
    }

    /// Ends the decode-only pass just walked: its events (a token for each running request, in
    /// order, each finished one's completion after it), then its finished requests leave.
    fn close_decode_only_pass(&mut self, any_finished: bool, events: &mut Vec<PassEvent>) {
        events.reserve(self.running.len());
        for request in &self.running {
            events.push(PassEvent::Tokens {
                id: request.id,
                count: 1,
            });
            if request.finished {
                events.push(PassEvent::Completed { id: request.id });
            }
        }
        if any_finished {
            self.finish_marked();
        }
    }

    /// Runs one pass by the general rules: schedule running requests, admit, emit tokens.
    fn run_full_pass(&mut self, events: &mut Vec<PassEvent>) -> PassTime {
        let mut budget = self.max_batched_tokens;
        // The pass's accumulators reuse the previous pass's allocation.
        let mut batch = Batch {
            scheduled: std::mem::take(&mut self.scheduled_scratch),
            ..Batch::default()
        };
        batch.scheduled.clear();

        // (a) Running requests first, in admission order.
        let mut index = 0;
        while index < self.running.len() && budget > 0 {
            if self.schedule_plain_decode(index, &mut budget, &mut batch) {
                index += 1;
                continue;
            }
            match self.schedule(Slot::Running(index), None, &mut budget, &mut batch) {
                Outcome::Scheduled { .. } => index += 1,
                Outcome::Blocked => break,
                // The request left `running`; the next one slid into `index`.
                Outcome::CurrentPreempted => {}
            }
        }

        // (b) Admissions from the head of the waiting queue. While a handoff destination
        // waits for KV on this worker, only activated destinations (whose KV is already in
        // place) are admitted, in queue order.
        let destination_pending = !self.pending_destinations.is_empty();
        while !batch.preempted_any && self.running.len() < self.max_num_seqs {
            let position = if destination_pending {
                self.waiting.iter().position(Request::prompt_is_prebuilt)
            } else {
                (!self.waiting.is_empty()).then_some(0)
            };
            let Some(position) = position else {
                break;
            };
            let head = &self.waiting[position];
            if self.rejects_outright(head) {
                let id = head.id;
                self.waiting.remove(position);
                events.push(PassEvent::Rejected { id });
                continue;
            }
            let cost = if head.prompt_is_prebuilt() {
                // Admitted as is: its blocks are allocated and nothing is recomputed.
                PrefixCost {
                    cached_tokens: 0,
                    active_cached_tokens: 0,
                }
            } else {
                let Some(cost) = self.admission_cost(head) else {
                    break;
                };
                cost
            };
            match self.schedule(Slot::Waiting(position), Some(cost), &mut budget, &mut batch) {
                Outcome::Scheduled { tokens } => {
                    let admitted = self.running.last().expect("admitted request runs");
                    events.push(PassEvent::Admitted {
                        id: admitted.id,
                        reused_tokens: cost.cached_tokens,
                    });
                    if tokens == 0 && budget == 0 {
                        break;
                    }
                }
                Outcome::Blocked | Outcome::CurrentPreempted => break,
            }
        }

        if self.fpm.is_some() {
            self.fpm = Some(self.pass_metrics(&batch));
        }
        let prefill_ms = if self.worker_type == WorkerType::Decode {
            0.0
        } else {
            self.timing.prefill_clock_ms(&batch.prefill)
        };
        let scheduled_requests = batch
            .scheduled
            .iter()
            .filter(|s| s.prompt_after > s.prompt_before || !s.terminal)
            .count();
        self.scheduled_scratch = batch.scheduled;
        let decode_ms = self.emit_tokens(events);
        PassTime {
            prefill_ms,
            decode_ms,
            scheduled_requests,
        }
    }

    /// Requests that can never be served: prompt at or over `max_model_len` (vLLM), or a fresh
    /// request whose footprint exceeds the whole pool.
    fn rejects_outright(&self, request: &Request) -> bool {
        if let Some(limit) = self.max_model_len {
            if request.prompt_len >= limit {
                return true;
            }
        }
        if !request.fresh {
            return false;
        }
        let blocks = match self.policy {
            Policy::Vllm => request.len().div_ceil(self.block_size),
            Policy::TrtllmNoEvict => self.completion_blocks(request),
        };
        blocks > self.num_blocks
    }

    fn completion_blocks(&self, request: &Request) -> usize {
        (request.prompt_len + request.max_output).div_ceil(self.block_size)
    }

    /// Prefix-cache reuse for `request` if it were allocated from scratch now, after the
    /// policy's recompute rule. `logits_needed` is false only for a request with nothing left
    /// to generate.
    fn prefix_cost(&self, request: &Request, logits_needed: bool) -> PrefixCost {
        let len = request.len();
        let found = self.pool.match_prefix(&request.hashes);
        let mut cost = PrefixCost {
            cached_tokens: (found.blocks * self.block_size).min(len),
            active_cached_tokens: (found.active_blocks * self.block_size).min(len),
        };
        if logits_needed && self.policy == Policy::Vllm {
            // The last known token must be computed to produce logits, so a fully cached
            // sequence recomputes its final (block-aligned) block.
            let limit = (len.saturating_sub(1) / self.block_size) * self.block_size;
            if cost.cached_tokens > limit {
                cost.cached_tokens = limit;
                cost.active_cached_tokens = cost.active_cached_tokens.min(limit);
            }
        }
        if self.speculative.is_some()
            && self.policy == Policy::Vllm
            && cost.cached_tokens >= self.block_size
        {
            // With draft tokens vLLM recomputes one more cached block (TRT-LLM does not).
            cost.cached_tokens -= self.block_size;
            cost.active_cached_tokens = cost.active_cached_tokens.min(cost.cached_tokens);
        }
        cost
    }

    /// The head-of-line admission check: `Some(cost)` when the waiting head may be admitted.
    fn admission_cost(&self, request: &Request) -> Option<PrefixCost> {
        // The reference asks "nothing left to generate?" here without the model-length cap.
        let logits_needed = request.generated < request.max_output;
        let cost = self.prefix_cost(request, logits_needed);
        let (needed, available) = match self.policy {
            Policy::Vllm => (
                request.len().div_ceil(self.block_size)
                    - cost.active_cached_tokens / self.block_size,
                self.num_blocks.saturating_sub(self.pool.num_active()),
            ),
            Policy::TrtllmNoEvict => {
                let needed = self
                    .completion_blocks(request)
                    .saturating_sub(cost.active_cached_tokens / self.block_size);
                let reserved: usize = self.running.iter().map(|r| self.blocks_to_finish(r)).sum();
                let free = self.num_blocks.saturating_sub(self.pool.num_active());
                (needed, free.saturating_sub(reserved))
            }
        };
        (needed <= available).then_some(cost)
    }

    /// TRT-LLM: blocks a running request still has to allocate to run to completion.
    fn blocks_to_finish(&self, request: &Request) -> usize {
        let total = self.completion_blocks(request);
        if request.allocated_tokens == 0 {
            let cost = self.prefix_cost(request, true);
            total.saturating_sub(cost.active_cached_tokens / self.block_size)
        } else {
            total.saturating_sub(request.allocated_tokens.div_ceil(self.block_size))
        }
    }

    fn request(&self, slot: Slot) -> &Request {
        match slot {
            Slot::Running(i) => &self.running[i],
            Slot::Waiting(i) => &self.waiting[i],
        }
    }

    /// Schedules the next chunk of one request (a running one, or the waiting head being
    /// admitted with `admission`).
    fn schedule(
        &mut self,
        slot: Slot,
        admission: Option<PrefixCost>,
        budget: &mut usize,
        batch: &mut Batch,
    ) -> Outcome {
        let bs = self.block_size;
        let request = self.request(slot);
        let cached = if request.num_computed == 0 {
            match admission {
                Some(cost) => cost.cached_tokens,
                None => {
                    let logits_needed = request.remaining_generation(self.max_model_len) > 0;
                    self.prefix_cost(request, logits_needed).cached_tokens
                }
            }
        } else {
            0
        };
        let id = request.id;
        let len = request.len();
        let prompt_len = request.prompt_len;
        let before = request.num_computed + cached;
        let prompt_before = before.min(prompt_len);
        let remaining = len.saturating_sub(before);
        let prompt_remaining = prompt_len - prompt_before;
        if prompt_remaining > 0 && !self.chunked_prefill && prompt_remaining > *budget {
            return Outcome::Blocked;
        }
        let take = remaining.min(*budget);
        if take == 0 && remaining > 0 {
            return Outcome::Blocked;
        }
        let target = before + take;
        let mut after = target;

        // Allocate blocks through `target`, preempting on exhaustion.
        let mut slot = slot;
        loop {
            if self.allocate(slot, target, cached / bs) {
                break;
            }
            let Some(victim) = self.pick_victim() else {
                after = before;
                break;
            };
            let victim_id = self.running[victim].id;
            self.preempt(victim, batch, budget);
            if victim_id == id {
                return Outcome::CurrentPreempted;
            }
            slot = match slot {
                Slot::Running(i) if victim < i => Slot::Running(i - 1),
                Slot::Waiting(i) => Slot::Waiting(i + 1),
                unchanged => unchanged,
            };
        }

        let tokens = after - before;
        if tokens == 0 && after < len {
            return Outcome::Blocked;
        }
        self.finalize_computed(slot, before, after);

        let prompt_after = after.min(prompt_len);
        let terminal = self.request(slot).remaining_generation(self.max_model_len) == 0;
        batch.scheduled.push(Scheduled {
            id,
            tokens,
            prompt_before,
            prompt_after,
            terminal,
            prompt_len,
            sequence_len: len,
        });
        if prompt_after > prompt_before && self.worker_type != WorkerType::Decode {
            batch.prefill.add(prompt_before, prompt_after);
        }
        if let Slot::Waiting(i) = slot {
            let mut admitted = self.waiting.remove(i).expect("admitted request is waiting");
            admitted.fresh = false;
            self.running.push(admitted);
        }
        *budget = budget.saturating_sub(tokens);
        Outcome::Scheduled { tokens }
    }

    /// The common case of [`VllmScheduler::schedule`], for a running request that only has
    /// its last generated token to compute and whose token neither needs a new block nor
    /// completes one: nothing to allocate, nothing to make cache-visible. Schedules it exactly
    /// as `schedule` would and returns true, or returns false having changed nothing. (`budget`
    /// is positive.)
    fn schedule_plain_decode(
        &mut self,
        index: usize,
        budget: &mut usize,
        batch: &mut Batch,
    ) -> bool {
        let bs = self.block_size;
        let caching = self.pool.caching();
        let max_model_len = self.max_model_len;
        let request = &mut self.running[index];
        if !request.take_plain_token(bs, caching, max_model_len) {
            return false;
        }
        let prompt_len = request.prompt_len;
        batch.scheduled.push(Scheduled {
            id: request.id,
            tokens: 1,
            prompt_before: prompt_len,
            prompt_after: prompt_len,
            terminal: request.nothing_left(max_model_len),
            prompt_len,
            sequence_len: request.len(),
        });
        *budget -= 1;
        true
    }

    /// Grows the request's block table to cover `target` tokens. The first allocation reuses
    /// `reusable_blocks` cached prefix blocks. Returns false (nothing changed) when the pool
    /// cannot supply the fresh blocks.
    fn allocate(&mut self, slot: Slot, target: usize, reusable_blocks: usize) -> bool {
        let bs = self.block_size;
        let request = match slot {
            Slot::Running(i) => &mut self.running[i],
            Slot::Waiting(i) => &mut self.waiting[i],
        };
        let known_blocks = request.len().div_ceil(bs);
        let have = request.allocated_tokens.div_ceil(bs).min(known_blocks);
        let want = target.div_ceil(bs).min(known_blocks);
        if target <= request.allocated_tokens || want <= have {
            if target > request.allocated_tokens {
                request.allocated_tokens = target;
            }
            request.num_computed = target;
            return true;
        }
        debug_assert!(reusable_blocks == 0 || request.blocks.is_empty());
        let reuse = if request.blocks.is_empty() {
            reusable_blocks.min(want)
        } else {
            0
        };
        let fresh_start = have + reuse;
        let fresh = want - fresh_start;
        if request.blocks.capacity() == 0 {
            // Room for the blocks of the whole generation at once (within the pool), so that
            // decoding never regrows the table.
            let planned = (request.prompt_len + request.max_output).div_ceil(bs);
            request
                .blocks
                .reserve_exact(planned.min(self.num_blocks).max(want));
        }
        let hashes = &request.hashes;
        let ok = self.pool.allocate(
            if reuse == 0 {
                &[]
            } else {
                &hashes[have..have + reuse]
            },
            fresh,
            |i| hashes.get(fresh_start + i).copied(),
            &mut request.blocks,
        );
        if ok {
            request.allocated_tokens = target;
            request.num_computed = target;
        }
        ok
    }

    /// Makes the blocks completed by this scheduling decision reusable, including a tail block
    /// that generation filled.
    fn finalize_computed(&mut self, slot: Slot, before: usize, after: usize) {
        let bs = self.block_size;
        let caching = self.pool.caching();
        let request = match slot {
            Slot::Running(i) => &mut self.running[i],
            Slot::Waiting(i) => &mut self.waiting[i],
        };
        if caching {
            let first = before / bs;
            let last = (after / bs).min(request.blocks.len());
            if first < last {
                self.pool.finalize_run(
                    &request.blocks[first..last],
                    request.hashes.get(first..).unwrap_or(&[]),
                );
            }
        }
        // A tail block filled by generated tokens becomes hashable once fully computed.
        if caching
            && after > 0
            && after == request.len()
            && after.is_multiple_of(bs)
            && request.hashes.len() < after / bs
        {
            let index = after / bs - 1;
            request.hash_blocks_through(index + 1, bs);
            if let (Some(&hash), Some(&copy)) =
                (request.hashes.get(index), request.blocks.get(index))
            {
                self.pool.promote(copy, hash);
            }
        }
    }

    /// The running request to preempt, if the policy preempts at all.
    fn pick_victim(&self) -> Option<usize> {
        if self.policy != Policy::Vllm || self.running.is_empty() {
            return None;
        }
        Some(match self.preemption {
            PreemptionMode::Lifo => self.running.len() - 1,
            PreemptionMode::Fifo => 0,
        })
    }

    /// Preempts `running[victim]`: frees its blocks, undoes its contribution to this pass, and
    /// puts it at the front of the waiting queue with its generated tokens kept.
    fn preempt(&mut self, victim: usize, batch: &mut Batch, budget: &mut usize) {
        self.capacity_generation += 1;
        let mut request = self.running.remove(victim);
        Self::release_blocks(&mut self.pool, &mut request);
        request.num_computed = 0;
        batch.preempted_any = true;
        if let Some(pos) = batch.scheduled.iter().position(|s| s.id == request.id) {
            let undone = batch.scheduled.swap_remove(pos);
            *budget = budget.saturating_add(undone.tokens);
            if undone.prompt_after > undone.prompt_before && self.worker_type != WorkerType::Decode
            {
                batch
                    .prefill
                    .remove(undone.prompt_before, undone.prompt_after);
            }
        }
        self.waiting.push_front(request);
    }

    /// A request finished: its blocks are released, or held for the handoff on a prefill
    /// worker. Either way a running slot was freed.
    fn finish_request(&mut self, request: &mut Request) {
        finish_request(
            &mut self.pool,
            &mut self.source_holds,
            &mut self.capacity_generation,
            self.worker_type,
            request,
        );
    }

    /// Finishes the running requests marked `finished` during the pass's token emission, in
    /// running order, and drops them from `running`.
    fn finish_marked(&mut self) {
        self.running.retain_mut(|request| {
            if request.finished {
                finish_request(
                    &mut self.pool,
                    &mut self.source_holds,
                    &mut self.capacity_generation,
                    self.worker_type,
                    request,
                );
            }
            !request.finished
        });
    }

    /// Releases every block of `request`, tail first, so that its suffix blocks are evicted
    /// before its prefix blocks.
    fn release_blocks(pool: &mut BlockPool, request: &mut Request) {
        pool.release_all(&request.blocks);
        request.blocks.clear();
        request.allocated_tokens = 0;
        request.plain_until = 0;
    }

    /// Completes requests with nothing left to generate, then lets every ready request emit one
    /// token. Returns the decode part of the pass duration.
    fn emit_tokens(&mut self, events: &mut Vec<PassEvent>) -> f64 {
        let max_model_len = self.max_model_len;
        // Requests already complete after their prefill leave without a token, before the
        // decode time is measured.
        let mut ready = 0usize;
        let mut context_tokens = 0usize;
        let mut i = 0;
        while i < self.running.len() {
            let request = &self.running[i];
            if request.num_computed < request.len() {
                i += 1;
                continue;
            }
            if request.nothing_left(max_model_len) {
                let mut done = self.running.remove(i);
                self.finish_request(&mut done);
                events.push(PassEvent::Completed { id: done.id });
                continue;
            }
            ready += 1;
            context_tokens += request.len();
            i += 1;
        }
        if ready == 0 {
            return 0.0;
        }
        if self.speculative.is_some() {
            return self.emit_bursts(events);
        }
        let decode_ms = if self.worker_type == WorkerType::Prefill {
            0.0
        } else {
            self.timing.decode_clock_ms(&DecodeBatch {
                ready,
                active_kv_tokens: self.pool.num_active() * self.block_size,
                total_kv_tokens: self.num_blocks * self.block_size,
                context_tokens,
            })
        };
        // The new token is not computed yet: it gets its KV when it is next scheduled.
        let mut any_finished = false;
        for request in &mut self.running {
            if request.num_computed < request.len() {
                continue;
            }
            request.generated += 1;
            events.push(PassEvent::Tokens {
                id: request.id,
                count: 1,
            });
            if request.nothing_left(max_model_len) {
                // Released after the loop, in this order: nothing in between touches the pool.
                request.finished = true;
                any_finished = true;
                events.push(PassEvent::Completed { id: request.id });
            }
        }
        if any_finished {
            self.finish_marked();
        }
        decode_ms
    }

    /// Speculative decoding: every ready request emits a sampled burst of tokens. KV for the
    /// largest possible bursts is reserved first, preempting while the pool cannot hold it;
    /// the decode time counts the KV in use without that reservation. The burst's tokens but
    /// the last are computed in this step (the last one gets its KV when next scheduled, as
    /// in a plain decode step); unused reserved blocks are returned at the end.
    fn emit_bursts(&mut self, events: &mut Vec<PassEvent>) -> f64 {
        let bs = self.block_size;
        let max_model_len = self.max_model_len;
        let max_burst = match (&self.speculative, self.worker_type) {
            (_, WorkerType::Prefill) => 1,
            (Some(sampler), _) => sampler.max_burst(),
            (None, _) => 1,
        };
        let is_ready = |request: &Request| request.num_computed >= request.len();
        let mut reserved = Vec::new();
        loop {
            let required: usize = self
                .running
                .iter()
                .filter(|request| is_ready(request))
                .map(|request| {
                    let burst = max_burst.min(request.remaining_generation(max_model_len));
                    (request.len() + burst).div_ceil(bs) - request.len().div_ceil(bs)
                })
                .sum();
            if self.pool.allocate(&[], required, |_| None, &mut reserved) {
                break;
            }
            let Some(victim) = self.pick_victim() else {
                return 0.0;
            };
            let (mut undo, mut budget) = (Batch::default(), 0);
            self.preempt(victim, &mut undo, &mut budget);
            if !self.running.iter().any(is_ready) {
                return 0.0;
            }
        }

        let mut ready = 0;
        let mut context_tokens = 0;
        for request in self.running.iter().filter(|request| is_ready(request)) {
            ready += 1;
            context_tokens += request.len();
        }
        let decode_ms = if self.worker_type == WorkerType::Prefill {
            0.0
        } else {
            self.timing.decode_clock_ms(&DecodeBatch {
                ready,
                active_kv_tokens: (self.pool.num_active() - reserved.len()) * bs,
                total_kv_tokens: self.num_blocks * bs,
                context_tokens,
            })
        };

        let sampler = self.speculative.as_mut().expect("bursts need a sampler");
        let bursts: Vec<usize> = self
            .running
            .iter()
            .filter(|request| is_ready(request))
            .map(|request| {
                let remaining = request.remaining_generation(max_model_len);
                if self.worker_type == WorkerType::Prefill {
                    remaining.min(1)
                } else {
                    sampler.burst(remaining)
                }
            })
            .collect();

        let caching = self.pool.caching();
        let mut spare = reserved.into_iter();
        let mut bursts = bursts.into_iter();
        let mut any_finished = false;
        for request in &mut self.running {
            if !is_ready(request) {
                continue;
            }
            let burst = bursts.next().expect("one burst per ready request");
            request.generated += burst;
            request.plain_until = 0;
            events.push(PassEvent::Tokens {
                id: request.id,
                count: burst,
            });
            // The burst's tokens but the last one are computed now.
            let computed = request.len() - 1;
            let have = request.allocated_tokens.div_ceil(bs);
            for _ in have..computed.div_ceil(bs) {
                request
                    .blocks
                    .push(spare.next().expect("the reservation covers the burst"));
            }
            request.allocated_tokens = request.allocated_tokens.max(computed);
            request.num_computed = computed;
            if caching {
                Self::promote_full_blocks(&mut self.pool, request, bs);
            }
            if request.remaining_generation(max_model_len) == 0 {
                // Released after the loop, in this order: the promotions of later requests in
                // between neither take slots nor depend on idle copies, so the pool ends the
                // same as if released here.
                request.finished = true;
                any_finished = true;
                events.push(PassEvent::Completed { id: request.id });
            }
        }
        if any_finished {
            self.finish_marked();
        }
        for copy in spare {
            self.pool.release(copy);
        }
        decode_ms
    }

    /// Makes every full block of `request`'s computed tokens that is not yet hashed
    /// cache-visible (blocks filled by generated tokens).
    fn promote_full_blocks(pool: &mut BlockPool, request: &mut Request, bs: usize) {
        let full = request.num_computed / bs;
        let first = request.hashes.len();
        if first >= full {
            return;
        }
        request.hash_blocks_through(full, bs);
        for index in first..full {
            if let (Some(&hash), Some(&copy)) =
                (request.hashes.get(index), request.blocks.get(index))
            {
                pool.promote(copy, hash);
            }
        }
    }
}

/// A request finished: its blocks are released, or held for the handoff on a prefill worker.
/// Either way a running slot was freed. (A free function over the scheduler's parts, so that it
/// can run while `running` is borrowed.)
fn finish_request(
    pool: &mut BlockPool,
    source_holds: &mut FastMap<RequestId, Vec<CopyId>>,
    capacity_generation: &mut u64,
    worker_type: WorkerType,
    request: &mut Request,
) {
    if worker_type == WorkerType::Prefill {
        source_holds.insert(request.id, std::mem::take(&mut request.blocks));
        request.allocated_tokens = 0;
    } else {
        VllmScheduler::release_blocks(pool, request);
    }
    *capacity_generation += 1;
}

#[cfg(test)]
mod tests;
