//! TRT-LLM's batch waiting (`trtllm.batch_wait_timeout_iters`,
//! `trtllm.batch_wait_max_tokens_ratio`): a pass that would run prefill next to decodes may
//! hold its prefill back, so that prompts arriving over the next passes are prefilled together
//! in one larger batch instead of one by one.
//!
//! The rule, as TRT-LLM's PyTorch executor applies it after its scheduler has picked a pass's
//! context (prefill) and generation (decode) requests (`PyExecutor._schedule` and
//! `_waiting_requests`, the same from the 1.1 release candidates that InferenceX ran through
//! 1.2):
//! 1. It is considered only when the pass has at least one context request *and* at least one
//!    generation request (with no decode running, waiting could only stall), and never with
//!    attention data parallelism.
//! 2. The pass's tokens are counted: each context request's whole prompt plus, per generation
//!    request, one token and its draft tokens.
//! 3. The context requests run (and the counter of held passes returns to 0) when the counter
//!    has reached `batch_wait_timeout_iters` *or* the tokens reach
//!    `batch_wait_max_tokens_ratio` × `max_num_tokens`. Otherwise every context request of the
//!    pass is dropped from it (it stays queued, its KV not allocated), the generation requests
//!    run alone, and the counter goes up by one.
//! 4. A pass that is not considered (rule 1) leaves the counter as it is.
//!
//! Both tests are "at or over", so a limit of 0 always ends the wait: a pass is held only when
//! both keys are above 0 ([`crate::config::BatchWait::enabled`]). The counter counts passes,
//! not time: held passes are decode passes, so the wait lasts up to that many decode steps.
//! Later TRT-LLM versions count only the prompt tokens to compute in the pass (a chunk, less
//! cached tokens) in step 2; with whole prompts and no reuse, as InferenceX runs, the two agree.
//!
//! In dynosim the pass's context requests are the running requests still in their prompt and
//! the waiting requests admission would take this pass. Which ones admission would take is
//! found by a walk over the queue that applies the admission checks (seats, token budget, the
//! no-evict KV reservation) without allocating anything; it counts prefix hits against the
//! cache as it is, not against blocks the same pass would compute first. When the pass holds,
//! it schedules the running requests' decodes only and admits nothing. Aggregated workers only
//! (a decode worker's requests arrive with their prompt computed; a prefill worker has no
//! decodes), and only with `dp_size` 1.

use super::{Policy, VllmScheduler};
use crate::config::{BatchWait, EngineArgs, WorkerType};

/// A rank's batch-waiting state.
#[derive(Debug)]
pub(super) struct BatchWaiting {
    settings: BatchWait,
    /// Passes held in a row so far.
    held: usize,
}

impl BatchWaiting {
    /// The state for a rank of `args`, `None` where no pass is ever held.
    pub(super) fn for_rank(args: &EngineArgs, policy: Policy) -> Option<Self> {
        (policy == Policy::TrtllmNoEvict
            && args.batch_wait.enabled()
            && args.worker_type == WorkerType::Aggregated
            && args.dp_size == 1)
            .then_some(Self {
                settings: args.batch_wait,
                held: 0,
            })
    }
}

/// What the next pass would schedule, as batch waiting counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct PassShape {
    /// Prompt tokens of the context requests (whole prompts).
    pub(super) context_tokens: usize,
    pub(super) context_requests: usize,
    pub(super) generation_requests: usize,
}

impl VllmScheduler {
    /// Decides whether the coming pass holds its context requests, and counts the hold.
    pub(super) fn holds_context(&mut self) -> bool {
        let Some(waiting) = &self.batch_waiting else {
            return false;
        };
        let (limit_iters, ratio) = (
            waiting.settings.timeout_iters,
            waiting.settings.max_tokens_ratio,
        );
        let shape = self.pass_shape_ahead();
        if shape.context_requests == 0 || shape.generation_requests == 0 {
            return false;
        }
        let per_generation = self.speculative.as_ref().map_or(1, |s| s.max_burst());
        let tokens = shape.context_tokens + shape.generation_requests * per_generation;
        let enough_tokens = tokens as f64 >= ratio * self.max_batched_tokens as f64;
        let waiting = self.batch_waiting.as_mut().expect("checked above");
        if waiting.held >= limit_iters || enough_tokens {
            waiting.held = 0;
            false
        } else {
            waiting.held += 1;
            true
        }
    }

    /// The context and generation requests the coming general pass would schedule, without
    /// changing anything (see the module doc for what it approximates).
    pub(super) fn pass_shape_ahead(&self) -> PassShape {
        let mut shape = PassShape::default();
        let mut budget = self.max_batched_tokens;
        for request in &self.running {
            if request.num_computed < request.prompt_len {
                shape.context_requests += 1;
                shape.context_tokens += request.prompt_len;
                budget = budget.saturating_sub(request.prompt_len - request.num_computed);
            } else {
                shape.generation_requests += 1;
                budget = budget.saturating_sub(1);
            }
        }
        if shape.generation_requests == 0 || self.waiting.is_empty() {
            return shape;
        }
        let mut seats = self.max_num_seqs.saturating_sub(self.running.len());
        // The no-evict admission check, with each admission's reservation taken off.
        let reserved: usize = self.running.iter().map(|r| self.blocks_to_finish(r)).sum();
        let free = self.num_blocks.saturating_sub(self.pool.num_active());
        let mut available = free.saturating_sub(reserved);
        for request in &self.waiting {
            if seats == 0 || budget == 0 {
                break;
            }
            if self.rejects_outright(request) {
                continue;
            }
            let cost = self.prefix_cost(request, request.generated < request.max_output);
            let needed = self
                .completion_blocks(request)
                .saturating_sub(cost.active_cached_tokens / self.block_size);
            if needed > available {
                break;
            }
            let remaining = request.len().saturating_sub(cost.cached_tokens);
            if !self.chunked_prefill && remaining > budget {
                break;
            }
            available -= needed;
            budget -= remaining.min(budget);
            seats -= 1;
            shape.context_requests += 1;
            shape.context_tokens += request.prompt_len;
        }
        shape
    }
}
