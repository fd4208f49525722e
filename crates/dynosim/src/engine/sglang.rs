//! The SGLang scheduler flavour (`engine_type: "sglang"`), aggregated workers.
//!
//! KV lives in a token pool of pages with a radix-tree prefix cache ([`RadixCache`]). One pass:
//! 1. the schedule policy orders the waiting queue (`fifo` keeps it, `lpm` sorts by cached
//!    prefix length);
//! 2. admission takes waiting requests from the front while they fit three budgets: the pool
//!    (free + evictable tokens, less a reservation for the outputs of running requests scaled by
//!    `new_token_ratio`), `max_prefill_tokens`, and `chunked_prefill_size`. A prompt longer than
//!    the chunk size is cut into chunks; a chunked request goes back to the front of the queue
//!    with its computed pages published to the cache;
//! 3. every running request (old and newly prefilled) then decodes one token. When the pool
//!    cannot grow every running request by a page, the requests with the fewest output tokens
//!    are retracted (their KV released, re-queued at the front) until it can.
//!
//! Prefill time follows the admitted chunks (prefix hits cost nothing), decode time the total
//! length of the running sequences. See `shared/spec/engine.md` §5.
//!
//! Disaggregated roles (engine.md §7): a prefill worker keeps a finished request's KV (its
//! radix path stays locked) until the handoff releases it; a decode worker reserves pages for an
//! incoming prompt (reusing its cached prefix; FIFO, retried whenever capacity may have grown)
//! and, once the KV has arrived, publishes the prompt's pages to its tree and runs the request
//! as if just prefilled. While activated requests wait for a running slot, or a reservation
//! waits for pages, no fresh prompt is admitted.

use std::collections::{HashSet, VecDeque};

use super::kv::radix::{ContentChange, NodeId, RadixCache};
use super::kv::{FastMap, KvEvent};
use super::speculative::BurstSampler;
use super::timing::{DecodeBatch, PassTime, PrefillBatch, TimingModel};
use super::{
    DestinationRefused, DestinationReserved, EngineRequest, NotReserved, PassEvent, RequestId,
};
use crate::config::{EngineArgs, WorkerType};
use crate::tokens::{BlockSize, Blocks, TokenSeq};

const DEFAULT_MAX_PREFILL_TOKENS: usize = 16384;
const DEFAULT_CHUNKED_PREFILL_SIZE: usize = 8192;
const DEFAULT_CLIP_MAX_NEW_TOKENS: usize = 4096;
/// `new_token_ratio` starts at this times `schedule_conservativeness`...
const INIT_NEW_TOKEN_RATIO: f64 = 0.7;
/// ...decays to this fraction of its start...
const MIN_NEW_TOKEN_RATIO_FACTOR: f64 = 0.14;
/// ...over this many passes.
const NEW_TOKEN_RATIO_DECAY_STEPS: f64 = 600.0;
/// LPM sorting is skipped when more requests than this wait.
const LPM_MAX_WAITING: usize = 128;
/// A waiting request whose cached prefix is at most this long, and whose first tokens (rounded
/// up to a page) equal those of an earlier waiting request, is put behind the others by LPM:
/// running it after its twin lets it reuse the twin's prefix.
const IN_BATCH_PREFIX_TOKENS: usize = 32;

/// How SGLang's scheduler polls for new requests (`--scheduler-recv-interval`): each loop
/// iteration adds the weight of the batch it last ran to a counter and takes in the requests
/// that arrived once the counter reaches the interval (then starts over). A decode batch
/// weighs 1, a batch that prefilled anything weighs `EXTEND_WEIGHT` (so arrivals are taken
/// in at the next pass); an idle loop spins at no model cost, so a rank with nothing to run
/// takes them in at once.
#[derive(Debug)]
struct RecvSkipper {
    interval: usize,
    counter: usize,
    /// The weight of the last pass.
    last_weight: usize,
    /// Arrived, not yet taken in (FIFO).
    inbox: VecDeque<Request>,
}

/// SGLang's weight of a batch that is not pure decoding: larger than any useful interval.
const EXTEND_WEIGHT: usize = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SchedulePolicy {
    Fifo,
    /// Longest cached prefix first.
    Lpm,
}

/// A request held by the rank.
#[derive(Debug)]
struct Request {
    id: RequestId,
    prompt_len: usize,
    max_output: usize,
    /// Prompt plus generated tokens (its full pages are read in place: [`TokenSeq::blocks`]).
    tokens: TokenSeq,
    /// Tokens whose KV has been computed (and is held).
    materialized: usize,
    /// Tokens the held pages can take (`materialized` rounded up to a page).
    allocated: usize,
    /// Leading tokens held through the radix tree (page-aligned, at most `materialized`); the
    /// pages after them are the request's own.
    cached: usize,
    /// The tree node where the `cached` prefix ends, locked while the request holds KV.
    last_node: Option<NodeId>,
    /// LPM's last prefix match: `(tree contents generation, pages of the sequence, pages
    /// matched)`. Sequences only grow, so the match holds while both of the first two do.
    lpm_match: Option<(u64, usize, usize)>,
}

impl Request {
    fn len(&self) -> usize {
        self.tokens.len()
    }

    fn output_len(&self) -> usize {
        self.len() - self.prompt_len
    }

    fn remaining_output(&self) -> usize {
        self.max_output.saturating_sub(self.output_len())
    }

    /// Tokens still to prefill (a retracted request recomputes its generated tokens too).
    fn extend_input(&self) -> usize {
        self.len() - self.materialized
    }

    /// The full pages of the sequence.
    fn pages(&self, page_size: usize) -> Blocks<'_> {
        self.tokens.blocks(page_size)
    }

    /// Pages the request owns outside the tree.
    fn private_pages(&self, page_size: usize) -> usize {
        (self.materialized - self.cached).div_ceil(page_size)
    }
}

/// Whether a tree change can alter the prefix match of `pages`, which matched `matched` pages
/// before it. Page identities are chained and held at most once, so the match grows only when
/// the page at `matched` enters (as the first page of a stored chain: the earlier ones were
/// there already), and shrinks only when a removed chain starts on one of the matched pages.
fn change_may_alter(change: &ContentChange, pages: Blocks<'_>, matched: usize) -> bool {
    let reaches = if change.removed {
        change.depth < matched
    } else {
        change.depth == matched && matched < pages.len()
    };
    reaches && pages.base(change.depth) == change.base
}

/// What admission produced in one pass.
#[derive(Default)]
struct Admission {
    admitted: Vec<Request>,
    /// Sum over admitted requests of the tokens covered after this pass's chunk.
    total_covered: usize,
    /// Sum over admitted requests of the tokens covered before it (cache hit or earlier chunks).
    total_prefix: usize,
    /// Admitted requests that compute at least one token.
    computing: usize,
    /// An allocation failed.
    out_of_memory: bool,
}

#[derive(Debug)]
pub struct SglangScheduler {
    /// The page size (tokens per page).
    page: BlockSize,
    total_kv_tokens: usize,
    max_running: usize,
    max_prefill_tokens: usize,
    chunked_prefill_size: usize,
    clip_max_new_tokens: usize,
    policy: SchedulePolicy,
    init_new_token_ratio: f64,
    min_new_token_ratio: f64,
    new_token_ratio_step: f64,
    new_token_ratio: f64,
    timing: TimingModel,
    /// Speculative decoding: running requests emit bursts of tokens.
    speculative: Option<BurstSampler>,
    cache: RadixCache,
    waiting: VecDeque<Request>,
    running: Vec<Request>,
    /// The request at the head of the queue when the last pass could do nothing.
    blocked: Option<RequestId>,
    /// `None`: every arrival is taken in at the next pass (interval 1).
    recv: Option<RecvSkipper>,
    worker_type: WorkerType,
    /// Decode role: activated handoffs (KV in place), waiting for a running slot.
    prebuilt_ready: VecDeque<Request>,
    /// Prefill role: finished requests whose KV is kept until their handoff releases it.
    source_holds: FastMap<RequestId, Request>,
    /// Decode role: handoffs waiting for pages, oldest first, with the capacity generation of
    /// their last attempt.
    pending_destinations: VecDeque<(Request, Option<u64>)>,
    /// Decode role: handoffs holding pages (and a locked cached prefix) for their transfer.
    reserved_destinations: FastMap<RequestId, Request>,
    /// Bumped whenever pages may have been freed; a pending destination is retried at most
    /// once per value.
    capacity_generation: u64,
    /// What the next decode step needs of the first running requests, summed by the last one
    /// (see [`DecodeSums`]); `None` once one of them may have changed otherwise.
    decode_sums: Option<DecodeSums>,
}

/// [`SglangScheduler::decode_growth_and_context`]'s sums over the first `covered` running
/// requests, as the decode step left them. The step visits every running request anyway, so it
/// sums them for the next one as it goes: the next pass then walks only the requests that join
/// `running` after them (pushed at its end), not all of them a second time.
#[derive(Clone, Copy, Debug)]
struct DecodeSums {
    covered: usize,
    growth: usize,
    context: usize,
}

impl SglangScheduler {
    pub fn new(args: &EngineArgs, rank_index: usize) -> Self {
        let settings = args.sglang.clone().unwrap_or_default();
        let conservativeness = settings.schedule_conservativeness.unwrap_or(1.0);
        let init = INIT_NEW_TOKEN_RATIO * conservativeness;
        let min = init * MIN_NEW_TOKEN_RATIO_FACTOR;
        let policy = match settings.schedule_policy.as_deref() {
            Some("lpm") => SchedulePolicy::Lpm,
            // The reference warns about other names and falls back to FIFO.
            _ => SchedulePolicy::Fifo,
        };
        let page_size = args.block_size.max(1);
        let total_kv_tokens = args.num_gpu_blocks * page_size;
        let mut cache = RadixCache::new(total_kv_tokens, page_size);
        if policy == SchedulePolicy::Lpm {
            // LPM re-checks cached matches against the tree's changes instead of re-walking it.
            cache.track_changes();
        }
        Self {
            page: BlockSize::new(page_size),
            total_kv_tokens,
            max_running: args.max_num_seqs.unwrap_or(usize::MAX),
            max_prefill_tokens: settings
                .max_prefill_tokens
                .unwrap_or(DEFAULT_MAX_PREFILL_TOKENS),
            chunked_prefill_size: settings
                .chunked_prefill_size
                .unwrap_or(DEFAULT_CHUNKED_PREFILL_SIZE),
            clip_max_new_tokens: settings
                .clip_max_new_tokens
                .unwrap_or(DEFAULT_CLIP_MAX_NEW_TOKENS),
            policy,
            init_new_token_ratio: init,
            min_new_token_ratio: min,
            new_token_ratio_step: (init - min) / NEW_TOKEN_RATIO_DECAY_STEPS,
            new_token_ratio: init,
            timing: TimingModel::new(args),
            speculative: args.speculative.as_ref().map(|speculative| {
                BurstSampler::new(
                    speculative,
                    args.draft_acceptance_scale(),
                    rank_index as u64,
                )
            }),
            cache,
            waiting: VecDeque::new(),
            running: Vec::new(),
            blocked: None,
            recv: settings
                .scheduler_recv_interval
                .filter(|&interval| interval > 1)
                .map(|interval| RecvSkipper {
                    interval,
                    counter: 0,
                    last_weight: EXTEND_WEIGHT,
                    inbox: VecDeque::new(),
                }),
            worker_type: args.worker_type,
            prebuilt_ready: VecDeque::new(),
            source_holds: FastMap::default(),
            pending_destinations: VecDeque::new(),
            reserved_destinations: FastMap::default(),
            capacity_generation: 0,
            decode_sums: None,
        }
    }

    pub fn enqueue(&mut self, request: EngineRequest) {
        let request = Self::new_request(request);
        match &mut self.recv {
            Some(recv) => recv.inbox.push_back(request),
            None => self.waiting.push_back(request),
        }
        self.blocked = None;
    }

    /// Requests that arrived but were not taken in yet.
    fn inbox_len(&self) -> usize {
        self.recv.as_ref().map_or(0, |recv| recv.inbox.len())
    }

    /// The poll at the start of a pass: adds the weight of the last pass and takes the inbox
    /// in when the interval is reached or the rank has nothing else to run.
    fn receive(&mut self) {
        let idle = self.waiting.is_empty() && self.running.is_empty();
        let Some(recv) = &mut self.recv else { return };
        recv.counter = recv.counter.saturating_add(recv.last_weight);
        if recv.counter >= recv.interval || idle {
            recv.counter = 0;
            self.waiting.extend(recv.inbox.drain(..));
        }
    }

    fn new_request(request: EngineRequest) -> Request {
        Request {
            id: request.id,
            prompt_len: request.prompt.len(),
            max_output: request.max_output_tokens,
            tokens: request.prompt,
            materialized: 0,
            allocated: 0,
            cached: 0,
            last_node: None,
            lpm_match: None,
        }
    }

    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty()
            || !self.running.is_empty()
            || !self.prebuilt_ready.is_empty()
            || self.inbox_len() > 0
    }

    pub fn num_requests(&self) -> usize {
        self.waiting.len() + self.running.len() + self.prebuilt_ready.len() + self.inbox_len()
    }

    pub fn load(&self) -> super::RankLoad {
        let total = self.cache.total_tokens();
        // Pages neither free nor evictable are held by requests.
        let idle = self.cache.available_tokens() + self.cache.evictable_tokens();
        super::RankLoad {
            waiting: self.waiting.len() + self.prebuilt_ready.len() + self.inbox_len(),
            running: self.running.len(),
            kv_used_tokens: total.saturating_sub(idle),
            kv_capacity_tokens: total,
        }
    }

    /// Prefill role: frees the KV kept for the handoff of `id` (its full pages stay cached).
    /// False when nothing was held.
    pub fn release_source(&mut self, id: RequestId) -> bool {
        let Some(mut request) = self.source_holds.remove(&id) else {
            return false;
        };
        self.finish(&mut request);
        self.capacity_generation += 1;
        true
    }

    /// Decode role: queues a page reservation for the prompt of `request` (FIFO); with
    /// `try_now` the oldest pending one is attempted at once. Returns what was reserved.
    pub fn reserve_destination(
        &mut self,
        request: EngineRequest,
        try_now: bool,
    ) -> Result<Option<DestinationReserved>, DestinationRefused> {
        if self.page.round_up(request.prompt.len()) > self.total_kv_tokens {
            return Err(DestinationRefused::TooLarge);
        }
        let request = Self::new_request(request);
        self.pending_destinations.push_back((request, None));
        Ok(if try_now {
            self.retry_destinations()
        } else {
            None
        })
    }

    /// Locks the matched prefix ending at `node` and takes `fresh_pages` new pages, evicting
    /// unlocked cache as needed. The lock comes first so that making room cannot evict the
    /// prefix; when the pages cannot be had, nothing is taken and the lock is released.
    fn lock_prefix_and_allocate(&mut self, node: NodeId, fresh_pages: usize) -> bool {
        let fresh_tokens = fresh_pages * self.page.tokens();
        self.cache.inc_lock_ref(node);
        if fresh_tokens > self.cache.available_tokens() + self.cache.evictable_tokens() {
            self.cache.dec_lock_ref(node);
            return false;
        }
        let available = self.cache.available_tokens();
        if fresh_tokens > available {
            self.cache.evict(fresh_tokens - available);
        }
        if !self.cache.allocate_pages(fresh_pages) {
            self.cache.dec_lock_ref(node);
            return false;
        }
        true
    }

    /// Decode role: attempts the oldest pending reservation unless it already failed with the
    /// current capacity. Reserves at most one.
    pub fn retry_destinations(&mut self) -> Option<DestinationReserved> {
        let generation = self.capacity_generation;
        let ps = self.page.tokens();
        let (request, last_attempt) = self.pending_destinations.front_mut()?;
        if *last_attempt == Some(generation) {
            return None;
        }
        *last_attempt = Some(generation);
        let prompt_len = request.prompt_len;
        let full_pages = prompt_len / ps;
        let (matched, node) = self
            .cache
            .match_prefix(request.pages(ps).range(0, full_pages));
        let allocated = self.page.round_up(prompt_len);
        let fresh_pages = (allocated - matched * ps) / ps;
        if !self.lock_prefix_and_allocate(node, fresh_pages) {
            return None;
        }
        let (mut request, _) = self
            .pending_destinations
            .pop_front()
            .expect("attempted destination is pending");
        request.cached = matched * ps;
        request.last_node = Some(node);
        request.allocated = allocated;
        let id = request.id;
        self.reserved_destinations.insert(id, request);
        Some(DestinationReserved {
            id,
            transferable_tokens: fresh_pages * ps,
        })
    }

    /// Decode role: the KV of reserved handoff `id` has arrived. The prompt's full pages enter
    /// the tree and the request waits for a running slot. Returns a reservation this made
    /// possible, if any.
    pub fn activate_destination(
        &mut self,
        id: RequestId,
    ) -> Result<Option<DestinationReserved>, NotReserved> {
        let mut request = self.reserved_destinations.remove(&id).ok_or(NotReserved)?;
        let available_before = self.cache.available_tokens();
        request.materialized = request.prompt_len;
        self.cache_materialized_prefix(&mut request);
        self.prebuilt_ready.push_back(request);
        // Pages the tree already held went back to the pool.
        if self.cache.available_tokens() > available_before {
            self.capacity_generation += 1;
        }
        Ok(self.retry_destinations())
    }

    /// Decode role: drops a pending or reserved handoff destination.
    pub fn cancel_destination(&mut self, id: RequestId) -> bool {
        if let Some(position) = self
            .pending_destinations
            .iter()
            .position(|(request, _)| request.id == id)
        {
            self.pending_destinations.remove(position);
            self.capacity_generation += 1;
            return true;
        }
        let Some(request) = self.reserved_destinations.remove(&id) else {
            return false;
        };
        let reserved_pages = (request.allocated - request.cached) / self.page.tokens();
        self.cache.free_pages(reserved_pages);
        if let Some(node) = request.last_node {
            self.cache.dec_lock_ref(node);
        }
        self.capacity_generation += 1;
        true
    }

    /// Starts recording the radix cache's KV events (for a KV-aware router).
    pub fn record_kv_events(&mut self) {
        self.cache.record_events();
    }

    /// Moves the KV events recorded since the last call into `out` (replacing its contents).
    pub fn drain_kv_events(&mut self, out: &mut Vec<KvEvent>) {
        self.cache.drain_events_into(out);
    }

    /// The request that kept the last pass from doing anything (SGLang never rejects: a request
    /// that can never fit waits at the head of the queue forever, blocking those behind it).
    pub fn blocked_request(&self) -> Option<RequestId> {
        self.blocked
    }

    /// Holds nothing at all: no request, no source kept for a handoff, no destination
    /// pending or reserved.
    pub fn is_drained(&self) -> bool {
        self.num_requests() == 0
            && self.source_holds.is_empty()
            && self.pending_destinations.is_empty()
            && self.reserved_destinations.is_empty()
    }

    /// Forward-pass metrics are not recorded for SGLang yet: the planner refuses SGLang
    /// engines before the run, so this is never asked for.
    pub fn record_fpm(&mut self) {}

    /// See [`SglangScheduler::record_fpm`]: always `None`.
    pub fn last_fpm(&self) -> Option<super::fpm::ForwardPassMetrics> {
        None
    }

    /// Runs one pass; see [`super::RankScheduler::run_pass_timed`].
    pub fn run_pass_timed(&mut self, events: &mut Vec<PassEvent>) -> PassTime {
        let events_before = events.len();
        self.receive();
        // Every request running at the start of a pass has output left to generate (the last
        // decode step let the finished ones go): only those that join below need the check.
        let settled = self.running.len();
        // Activated handoffs join the running batch first, without prefill.
        while self.running.len() < self.max_running {
            let Some(request) = self.prebuilt_ready.pop_front() else {
                break;
            };
            events.push(PassEvent::Admitted {
                id: request.id,
                reused_tokens: 0,
            });
            self.running.push(request);
        }
        if self.policy == SchedulePolicy::Lpm {
            self.sort_longest_prefix_first();
        }
        let handoffs_waiting =
            !self.prebuilt_ready.is_empty() || !self.pending_destinations.is_empty();
        let admission = if handoffs_waiting {
            Admission::default()
        } else {
            self.admit(events)
        };
        if admission.out_of_memory {
            self.new_token_ratio = self.init_new_token_ratio;
        }
        let prefill_ms = if self.worker_type == WorkerType::Decode {
            0.0
        } else {
            self.timing.prefill_clock_ms(&PrefillBatch {
                requests: admission.admitted.len(),
                covered_before: admission.total_prefix,
                covered_after: admission.total_covered,
            })
        };
        let extended = !admission.admitted.is_empty();
        for mut request in admission.admitted {
            if request.materialized < request.len() {
                self.cache_materialized_prefix(&mut request);
                self.waiting.push_front(request);
            } else {
                self.running.push(request);
            }
        }

        let decode = self.decode(events, settled);
        for request in decode.retracted.into_iter().rev() {
            self.waiting.push_front(request);
        }
        if decode.retracted_any {
            self.new_token_ratio = self.init_new_token_ratio;
            self.capacity_generation += 1;
        }
        self.new_token_ratio =
            (self.new_token_ratio - self.new_token_ratio_step).max(self.min_new_token_ratio);

        let scheduled_requests = admission.computing + decode.emitted;
        if let Some(recv) = &mut self.recv {
            recv.last_weight = if extended { EXTEND_WEIGHT } else { 1 };
        }
        self.blocked = if scheduled_requests == 0 && events.len() == events_before {
            self.waiting
                .front()
                .or(self.running.first())
                .map(|request| request.id)
        } else {
            None
        };
        PassTime {
            prefill_ms,
            decode_ms: decode.decode_ms,
            scheduled_requests,
        }
    }

    /// LPM: waiting requests with longer cached prefixes first (stable), except that a request
    /// with almost nothing cached whose opening tokens repeat an earlier waiting request's goes
    /// last. Skipped for long queues.
    fn sort_longest_prefix_first(&mut self) {
        if self.waiting.len() > LPM_MAX_WAITING {
            self.cache.forget_changes();
            return;
        }
        let ps = self.page.tokens();
        let twin_tokens = IN_BATCH_PREFIX_TOKENS.div_ceil(ps) * ps;
        let mut openings = HashSet::new();
        let mut scored: Vec<(bool, usize, Request)> = Vec::with_capacity(self.waiting.len());
        let generation = self.cache.contents_generation();
        for mut request in self.waiting.drain(..) {
            let len = request.len();
            let pages = request.pages(ps);
            let matched = match request.lpm_match {
                Some((g, n, matched))
                    if n == pages.len()
                        && self.cache.changes_since(g).is_some_and(|changes| {
                            !changes
                                .iter()
                                .any(|change| change_may_alter(change, pages, matched))
                        }) =>
                {
                    matched
                }
                _ => self.cache.prefix_match_len(pages),
            };
            debug_assert_eq!(matched, self.cache.prefix_match_len(pages));
            let cached = matched * ps;
            // Pages are chained, so the identity of the page ending at `twin_tokens` stands for
            // all tokens up to there.
            let behind = cached <= IN_BATCH_PREFIX_TOKENS
                && len >= twin_tokens
                && !openings.insert(pages.key(twin_tokens / ps - 1));
            request.lpm_match = Some((generation, pages.len(), matched));
            scored.push((behind, cached, request));
        }
        // Every waiting request's match is now as of `generation`.
        self.cache.forget_changes();
        scored.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)));
        self.waiting
            .extend(scored.into_iter().map(|(_, _, request)| request));
    }

    /// Admits requests (or their next chunk) from the front of the waiting queue.
    fn admit(&mut self, events: &mut Vec<PassEvent>) -> Admission {
        let ps = self.page.tokens();
        let slots = self.max_running.saturating_sub(self.running.len());
        if self.waiting.is_empty() || slots == 0 {
            // Nothing can be admitted: skip the walk over the running requests below (most
            // passes of a decoding rank end here).
            return Admission::default();
        }
        let ratio = self.new_token_ratio;
        let clip = self.clip_max_new_tokens;
        let reserved_output: f64 = self
            .running
            .iter()
            .map(|r| r.remaining_output().min(clip) as f64 * ratio)
            .sum();
        let mut rem_total = (self.cache.available_tokens() + self.cache.evictable_tokens()) as f64
            - reserved_output;
        let mut rem_input = self.max_prefill_tokens as f64;
        let mut rem_chunk = self.chunked_prefill_size as f64;

        let mut admission = Admission::default();
        while admission.admitted.len() < slots {
            // The head is looked at in place and taken only once it fits the budgets (it stays
            // at the head when it does not).
            let Some(request) = self.waiting.front() else {
                break;
            };
            let extend = request.extend_input();
            if extend == 0 {
                break;
            }
            let chunk = if extend <= self.chunked_prefill_size {
                extend
            } else {
                let chunk = (rem_chunk as usize / ps) * ps;
                if chunk == 0 {
                    break;
                }
                chunk.min(extend)
            };
            let charged = self.page.round_up(chunk) as f64;
            let output_reserve = if chunk < extend {
                0
            } else {
                request.remaining_output().min(clip)
            };
            if charged + output_reserve as f64 >= rem_total
                || charged > rem_input
                || charged > rem_chunk
            {
                break;
            }
            let mut request = self
                .waiting
                .pop_front()
                .expect("the head was looked at above");

            let chunk_end = request.materialized + chunk;
            let old_allocated = request.allocated;
            let prefix = if request.materialized > 0 {
                let required = self.page.round_up(chunk_end).saturating_sub(old_allocated);
                let available = self.cache.available_tokens();
                if available < required {
                    self.cache.evict(required - available);
                }
                self.extend_allocation(&mut request, chunk_end)
                    .then_some(request.materialized)
            } else {
                self.allocate(&mut request, chunk_end)
            };
            let Some(prefix) = prefix else {
                self.waiting.push_front(request);
                admission.out_of_memory = true;
                break;
            };
            request.materialized = chunk_end;
            request.allocated = self.page.round_up(chunk_end);

            events.push(PassEvent::Admitted {
                id: request.id,
                reused_tokens: prefix,
            });
            admission.total_covered += chunk_end;
            admission.total_prefix += prefix;
            if chunk_end > prefix {
                admission.computing += 1;
            }
            rem_total -= (request.allocated - old_allocated + output_reserve) as f64;
            rem_input -= charged;
            rem_chunk -= charged;
            admission.admitted.push(request);
            if rem_chunk <= 0.0 {
                break;
            }
        }
        admission
    }

    /// First allocation of a request with no KV: reuse the longest cached prefix of its first
    /// `end` tokens (locking it), evict if needed, and take pages for the rest. Returns the
    /// reused tokens, or `None` (nothing held) when the pool cannot supply the pages.
    fn allocate(&mut self, request: &mut Request, end: usize) -> Option<usize> {
        let ps = self.page.tokens();
        let (matched, node) = self
            .cache
            .match_prefix(request.pages(ps).range(0, end / ps));
        let prefix = matched * ps;
        let fresh_pages = (end - prefix).div_ceil(ps);
        if !self.lock_prefix_and_allocate(node, fresh_pages) {
            return None;
        }
        request.cached = prefix;
        request.last_node = Some(node);
        Some(prefix)
    }

    /// Grows a partly prefilled request's KV to `end` tokens, filling its last page first.
    fn extend_allocation(&mut self, request: &mut Request, end: usize) -> bool {
        let ps = self.page.tokens();
        let held = request.materialized;
        let room_in_last_page = if held == 0 {
            0
        } else {
            ps - 1 - (held - 1) % ps
        };
        let pages = (end - held).saturating_sub(room_in_last_page).div_ceil(ps);
        self.cache.allocate_pages(pages)
    }

    /// Publishes the request's computed full pages to the tree (moving its lock to the new end),
    /// so later requests can reuse them while it still runs.
    #[inline]
    fn cache_materialized_prefix(&mut self, request: &mut Request) {
        let ps = self.page.tokens();
        let aligned = request.materialized / ps * ps;
        if aligned == 0 || aligned <= request.cached {
            return;
        }
        let last = request
            .last_node
            .expect("a request with computed tokens holds a tree path");
        let first = request.cached / ps;
        let pages = request.pages(ps).range(first, aligned / ps);
        let inserted = self.cache.insert_from_node(last, pages);
        if inserted.node != last {
            // The new end lies below `last`, whose lock this request holds.
            self.cache.move_lock_down(last, inserted.node);
        }
        request.last_node = Some(inserted.node);
        request.cached = aligned;
    }

    /// [`SglangScheduler::cache_materialized_prefix`] after a decode step. The pages a step
    /// fills end in the request's run of generated tokens and, but for its first step, extend
    /// the tail leaf it alone holds: [`RadixCache::grow_own_leaf`] does that without the
    /// general insertion's walk (once per running request and token at page size 1). `page`
    /// is the rank's page size, passed in so that the step's loop keeps it in a register.
    #[inline(always)]
    fn publish_decoded(&mut self, request: &mut Request, page: BlockSize) {
        let ps = page.tokens();
        let aligned_pages = page.full(request.materialized);
        let aligned = aligned_pages * ps;
        if aligned <= request.cached {
            return;
        }
        if let Some(last) = request.last_node {
            let pages = request
                .pages(ps)
                .range(page.full(request.cached), aligned_pages);
            if let Some(base) = pages.base_if_in_last_run() {
                if self
                    .cache
                    .grow_own_leaf(last, pages.start(), base, pages.len())
                {
                    request.cached = aligned;
                    return;
                }
            }
        }
        self.cache_materialized_prefix(request);
    }

    /// Between passes: request `id` leaves the rank (its client went away), waiting or
    /// running, and its pages go back as a finished request's do (its computed full pages
    /// into the radix tree). False when the rank does not hold it.
    pub fn abort(&mut self, id: RequestId) -> bool {
        if let Some(recv) = &mut self.recv {
            if let Some(at) = recv.inbox.iter().position(|r| r.id == id) {
                // Never taken in: it holds nothing.
                recv.inbox.remove(at);
                return true;
            }
        }
        let mut request = if let Some(at) = self.waiting.iter().position(|r| r.id == id) {
            self.waiting.remove(at).expect("found above")
        } else if let Some(at) = self.prebuilt_ready.iter().position(|r| r.id == id) {
            self.prebuilt_ready.remove(at).expect("found above")
        } else if let Some(at) = self.running.iter().position(|r| r.id == id) {
            self.decode_sums = None;
            self.running.remove(at)
        } else {
            return false;
        };
        if self.blocked == Some(id) {
            self.blocked = None;
        }
        self.finish(&mut request);
        self.capacity_generation += 1;
        true
    }

    /// A finished request leaves its full pages in the cache (unlocked) and frees its partial
    /// tail page.
    fn finish(&mut self, request: &mut Request) {
        let ps = self.page.tokens();
        let Some(last) = request.last_node.take() else {
            return;
        };
        let complete = request.len().min(request.materialized) / ps * ps;
        debug_assert!(request.cached <= complete);
        self.cache
            .free_pages((request.materialized - complete).div_ceil(ps));
        if complete > 0 {
            let first = request.cached / ps;
            let pages = request.pages(ps).range(first, complete / ps);
            self.cache.insert_from_node(last, pages);
        }
        self.cache.dec_lock_ref(last);
    }

    /// Releases a running request's KV: its own pages are freed, its cached prefix unlocked.
    /// It keeps its generated tokens and recomputes everything on re-admission.
    fn retract(&mut self, request: &mut Request) {
        if let Some(last) = request.last_node.take() {
            self.cache
                .free_pages(request.private_pages(self.page.tokens()));
            self.cache.dec_lock_ref(last);
        }
        request.materialized = 0;
        request.allocated = 0;
        request.cached = 0;
    }

    /// The most tokens one decode step can give a request: 1, or a full speculative burst
    /// (a prefill worker emits only the first token).
    fn max_burst(&self) -> usize {
        match &self.speculative {
            Some(sampler) if self.worker_type != WorkerType::Prefill => sampler.max_burst(),
            _ => 1,
        }
    }

    /// Tokens of fresh pages the running requests need to each take their largest burst.
    /// Also returns the running requests' total length, from the same walk (which starts after
    /// the requests the last decode step summed already).
    fn decode_growth_and_context(&self) -> (usize, usize) {
        let max_burst = self.max_burst();
        let (covered, mut growth, mut context) = match self.decode_sums {
            Some(sums) => (sums.covered, sums.growth, sums.context),
            None => (0, 0, 0),
        };
        debug_assert!(covered <= self.running.len());
        for r in &self.running[covered..] {
            let (request_growth, len) = self.decode_need(r, max_burst);
            growth += request_growth;
            context += len;
        }
        debug_assert_eq!(
            (growth, context),
            self.running
                .iter()
                .map(|r| self.decode_need(r, max_burst))
                .fold((0, 0), |(g, c), (rg, len)| (g + rg, c + len))
        );
        (growth, context)
    }

    /// Tokens of fresh pages `request` needs to take a burst of up to `max_burst`, and its length.
    #[inline(always)]
    fn decode_need(&self, request: &Request, max_burst: usize) -> (usize, usize) {
        let len = request.len();
        let burst = request.remaining_output().min(max_burst);
        let growth = self
            .page
            .round_up(len + burst)
            .saturating_sub(request.allocated);
        (growth, len)
    }

    /// The decode step over every running request; the first `settled` of them are known to
    /// have output left to generate.
    fn decode(&mut self, events: &mut Vec<PassEvent>, settled: usize) -> Decode {
        let mut result = Decode::default();
        if self.running.is_empty() {
            return result;
        }
        debug_assert!(self.running[..settled]
            .iter()
            .all(|request| request.remaining_output() > 0));
        // Requests with nothing left to generate (an output length of 0) leave without a token.
        // Their KV is released with the other completions, after the step.
        let mut completed = Vec::new();
        let mut index = settled;
        while index < self.running.len() {
            if self.running[index].remaining_output() == 0 {
                if self.decode_sums.is_some_and(|sums| index < sums.covered) {
                    self.decode_sums = None;
                }
                let request = self.running.remove(index);
                events.push(PassEvent::Completed { id: request.id });
                completed.push(request);
            } else {
                index += 1;
            }
        }

        if !self.running.is_empty() {
            let (growth, context) = self.retract_for_growth(&mut result);
            self.decode_tokens(events, &mut result, &mut completed, growth, context);
        }
        for mut request in completed {
            if self.worker_type == WorkerType::Prefill {
                // The handoff releases it.
                self.source_holds.insert(request.id, request);
            } else {
                self.finish(&mut request);
                self.capacity_generation += 1;
            }
        }
        result
    }

    /// Retracts running requests, fewest output tokens first, until the pool (free plus
    /// evictable) can give each remaining one a token; keeps at least one. Then evicts what the
    /// growth needs. Returns the growth and the context tokens of the requests left running
    /// (see [`SglangScheduler::decode_growth_and_context`]).
    fn retract_for_growth(&mut self, result: &mut Decode) -> (usize, usize) {
        let (growth, context) = loop {
            let capacity = self.cache.available_tokens() + self.cache.evictable_tokens();
            let (growth, context) = self.decode_growth_and_context();
            if capacity >= growth || self.running.len() <= 1 {
                break (growth, context);
            }
            let mut victim = 0;
            for (index, request) in self.running.iter().enumerate() {
                if request.output_len() < self.running[victim].output_len() {
                    victim = index;
                }
            }
            self.decode_sums = None;
            let mut request = self.running.remove(victim);
            self.retract(&mut request);
            result.retracted.push(request);
            result.retracted_any = true;
        };
        let available = self.cache.available_tokens();
        if available < growth {
            self.cache.evict(growth - available);
        }
        (growth, context)
    }

    /// Decodes every running request, whose growth (tokens of fresh pages) and total length
    /// are `growth` and `context`.
    fn decode_tokens(
        &mut self,
        events: &mut Vec<PassEvent>,
        result: &mut Decode,
        completed: &mut Vec<Request>,
        growth: usize,
        context: usize,
    ) {
        let ps = self.page.tokens();
        let active = context.min(self.total_kv_tokens);
        let decode_ms = self.timing.decode_clock_ms(&DecodeBatch {
            ready: self.running.len(),
            active_kv_tokens: active,
            total_kv_tokens: self.total_kv_tokens,
            context_tokens: context,
        });
        let reserved_pages = self.page.full(growth);
        if !self.cache.allocate_pages(reserved_pages) {
            // Even after evicting everything the pages are not there: no token this pass.
            return;
        }
        result.decode_ms = decode_ms;
        self.decode_sums = None;
        let max_burst = self.max_burst();
        let page = self.page;
        let mut next = DecodeSums {
            covered: 0,
            growth: 0,
            context: 0,
        };
        let mut used_pages = 0;
        let mut running = std::mem::take(&mut self.running);
        let prefill_role = self.worker_type == WorkerType::Prefill;
        let mut finished = 0;
        for request in running.iter_mut() {
            // Read once: pushing the tokens below changes the sequence, so the compiler would
            // read its length again for every use.
            let len = request.len();
            let output = len - request.prompt_len;
            // Positive: the requests with nothing left to generate were let go before the step.
            let remaining = request.max_output.saturating_sub(output);
            // (The sampler is drawn from in request order, as before any token is pushed.)
            let burst = match &mut self.speculative {
                Some(sampler) if !prefill_role => sampler.burst(remaining),
                _ => remaining.min(1),
            };
            // The held pages take the sequence up to `allocated` (a running request's whole
            // length, rounded up to a page); a page is added whenever a token passes it.
            let len = len + burst;
            while len > request.allocated {
                request.allocated += ps;
                used_pages += 1;
            }
            request
                .tokens
                .push_generated(request.id as u64, output as u64, burst);
            request.materialized += burst;
            events.push(PassEvent::Tokens {
                id: request.id,
                count: burst,
            });
            result.emitted += 1;
            // A burst never passes the remaining output (the sampler's is clipped to it).
            if burst >= remaining {
                events.push(PassEvent::Completed { id: request.id });
                finished += 1;
            } else {
                self.publish_decoded(request, page);
                // What the next step needs of it (it stays running unless retracted then).
                let next_burst = (remaining - burst).min(max_burst);
                next.growth += page
                    .round_up(len + next_burst)
                    .saturating_sub(request.allocated);
                next.context += len;
            }
        }
        self.cache.free_pages(reserved_pages - used_pages);
        // The finished leave in order; the others stay, in order, in the same allocation
        // (rebuilding `running` by pushes reallocated it a few times every pass). Most passes
        // finish nobody, and then the walk is skipped.
        if finished > 0 {
            completed.extend(running.extract_if(.., |request| request.remaining_output() == 0));
        }
        debug_assert!(self.running.is_empty());
        next.covered = running.len();
        self.running = running;
        self.decode_sums = Some(next);
    }

    /// Checks the KV bookkeeping of the whole rank (tests).
    #[cfg(test)]
    fn check_invariants(&self) {
        let ps = self.page.tokens();
        let private: usize = self
            .running
            .iter()
            .chain(self.waiting.iter())
            .map(|r| r.private_pages(ps))
            .sum();
        self.cache.check_invariants(private);
        for r in self.running.iter().chain(self.waiting.iter()) {
            assert!(r.cached <= r.materialized);
            assert_eq!(r.cached % ps, 0);
            assert_eq!(r.allocated, self.page.round_up(r.materialized));
            assert_eq!(r.last_node.is_some(), r.materialized > 0);
        }
    }
}

/// What the decode step did.
#[derive(Default)]
struct Decode {
    decode_ms: f64,
    /// Requests that emitted a token.
    emitted: usize,
    retracted: Vec<Request>,
    retracted_any: bool,
}

#[cfg(test)]
mod tests;
