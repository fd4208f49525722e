//! The general pass: running requests are scheduled first, in admission order, against the
//! token budget, then waiting requests are admitted from the head of the queue while they fit
//! (vLLM: the blocks of their current length; TRT-LLM: the blocks to finish, after the running
//! requests' own reservations). Each request is scheduled its next chunk; the prefill batch and
//! what was scheduled are kept so that a preemption can undo a request's share.

use super::super::fpm::{ForwardPassMetrics, FpmBuilder};
use super::super::timing::{PassTime, PrefillBatch};
use super::super::{PassEvent, RequestId};
use super::{Policy, Request, VllmScheduler};
use crate::config::WorkerType;

/// Prefix-cache reuse available to a request about to be admitted.
#[derive(Clone, Copy, Debug)]
pub(super) struct PrefixCost {
    pub(super) cached_tokens: usize,
    pub(super) active_cached_tokens: usize,
}

/// What one request contributed to the current pass (so a preemption can undo it).
#[derive(Clone, Copy, Debug)]
pub(super) struct Scheduled {
    pub(super) id: RequestId,
    pub(super) tokens: usize,
    pub(super) prompt_before: usize,
    pub(super) prompt_after: usize,
    /// Nothing left to generate once scheduled (e.g. an output length of 0).
    pub(super) terminal: bool,
    /// Prompt and sequence length when scheduled (for the forward-pass metrics).
    pub(super) prompt_len: usize,
    pub(super) sequence_len: usize,
}

pub(super) enum Outcome {
    Scheduled { tokens: usize },
    Blocked,
    CurrentPreempted,
}

/// Which queue the request being scheduled currently lives in.
#[derive(Clone, Copy)]
pub(super) enum Slot {
    Running(usize),
    /// Being admitted from the waiting queue at this position (victims preempted meanwhile
    /// are put in front of it).
    Waiting(usize),
}

/// Prefill batch accumulators of one pass.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) prefill: PrefillBatch,
    pub(super) scheduled: Vec<Scheduled>,
    pub(super) preempted_any: bool,
}

/// What the admission step does next with the waiting queue.
#[derive(Clone, Copy, Debug)]
pub(super) enum HeadAdmission {
    /// Nothing: no request may be admitted now (the head does not fit, or no activated
    /// destination waits while a handoff waits for KV). The step ends.
    Blocked,
    /// The request at this position can never be served: it is rejected.
    Reject(usize),
    /// The request at this position is admitted at this prefix-cache cost, if it can be
    /// scheduled.
    Admit(usize, PrefixCost),
}

impl VllmScheduler {
    /// Runs one pass by the general rules: schedule running requests, admit, emit tokens.
    pub(super) fn run_full_pass(&mut self, events: &mut Vec<PassEvent>) -> PassTime {
        let mut budget = self.max_batched_tokens;
        // The pass's accumulators reuse the previous pass's allocation.
        let mut batch = Batch {
            scheduled: std::mem::take(&mut self.scheduled_scratch),
            ..Batch::default()
        };
        batch.scheduled.clear();
        // TRT-LLM's batch waiting may keep this pass to decodes.
        let hold_context = self.holds_context();
        self.schedule_running(hold_context, &mut budget, &mut batch);
        self.admit_and_emit(hold_context, budget, batch, None, events)
    }

    /// The pass's first step: running requests, in admission order, while the budget lasts.
    fn schedule_running(&mut self, hold_context: bool, budget: &mut usize, batch: &mut Batch) {
        let mut index = 0;
        while index < self.running.len() && *budget > 0 {
            if self.schedule_plain_decode(index, budget, batch) {
                index += 1;
                continue;
            }
            if hold_context && self.running[index].num_computed < self.running[index].prompt_len {
                index += 1;
                continue;
            }
            match self.schedule(Slot::Running(index), None, budget, batch) {
                Outcome::Scheduled { .. } => index += 1,
                Outcome::Blocked => break,
                // The request left `running`; the next one slid into `index`.
                Outcome::CurrentPreempted => {}
            }
        }
    }

    /// The rest of a pass whose running requests are scheduled (`budget` and `batch` as that
    /// left them): admissions from the head of the waiting queue, then the token emission.
    /// `head`, when given, is [`VllmScheduler::head_admission`] as of now (to spare asking it
    /// twice).
    pub(super) fn admit_and_emit(
        &mut self,
        hold_context: bool,
        mut budget: usize,
        mut batch: Batch,
        mut head: Option<HeadAdmission>,
        events: &mut Vec<PassEvent>,
    ) -> PassTime {
        self.admission_step_ran = true;
        // (b) Admissions from the head of the waiting queue.
        while !hold_context && !batch.preempted_any && self.running.len() < self.max_num_seqs {
            match head.take().unwrap_or_else(|| self.head_admission()) {
                HeadAdmission::Blocked => break,
                HeadAdmission::Reject(position) => {
                    let id = self.waiting[position].id;
                    self.waiting.remove(position);
                    events.push(PassEvent::Rejected { id });
                }
                HeadAdmission::Admit(position, cost) => {
                    match self.schedule(
                        Slot::Waiting(position),
                        Some(cost),
                        &mut budget,
                        &mut batch,
                    ) {
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

    /// What the admission step does next: while a handoff destination waits for KV on this
    /// worker, only activated destinations (whose KV is already in place) are admitted, in
    /// queue order; otherwise the head of the queue.
    pub(super) fn head_admission(&self) -> HeadAdmission {
        let position = if self.pending_destinations.is_empty() {
            (!self.waiting.is_empty()).then_some(0)
        } else {
            self.waiting.iter().position(Request::prompt_is_prebuilt)
        };
        let Some(position) = position else {
            return HeadAdmission::Blocked;
        };
        let head = &self.waiting[position];
        if self.rejects_outright(head) {
            return HeadAdmission::Reject(position);
        }
        if head.prompt_is_prebuilt() {
            // Admitted as is: its blocks are allocated and nothing is recomputed.
            let cost = PrefixCost {
                cached_tokens: 0,
                active_cached_tokens: 0,
            };
            return HeadAdmission::Admit(position, cost);
        }
        match self.admission_cost(head) {
            Some(cost) => HeadAdmission::Admit(position, cost),
            None => HeadAdmission::Blocked,
        }
    }

    /// What the pass just scheduled and what it left waiting.
    pub(super) fn pass_metrics(&self, batch: &Batch) -> ForwardPassMetrics {
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

    /// Requests that can never be served: prompt at or over `max_model_len` (vLLM), or a fresh
    /// request whose footprint exceeds the whole pool.
    pub(super) fn rejects_outright(&self, request: &Request) -> bool {
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

    pub(super) fn completion_blocks(&self, request: &Request) -> usize {
        (request.prompt_len + request.max_output).div_ceil(self.block_size)
    }

    /// Prefix-cache reuse for `request` if it were allocated from scratch now, after the
    /// policy's recompute rule. `logits_needed` is false only for a request with nothing left
    /// to generate.
    pub(super) fn prefix_cost(&self, request: &Request, logits_needed: bool) -> PrefixCost {
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
    pub(super) fn admission_cost(&self, request: &Request) -> Option<PrefixCost> {
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
    pub(super) fn blocks_to_finish(&self, request: &Request) -> usize {
        let total = self.completion_blocks(request);
        if request.allocated_tokens == 0 {
            let cost = self.prefix_cost(request, true);
            total.saturating_sub(cost.active_cached_tokens / self.block_size)
        } else {
            total.saturating_sub(request.allocated_tokens.div_ceil(self.block_size))
        }
    }

    pub(super) fn request(&self, slot: Slot) -> &Request {
        match slot {
            Slot::Running(i) => &self.running[i],
            Slot::Waiting(i) => &self.waiting[i],
        }
    }

    /// Schedules the next chunk of one request (a running one, or the waiting head being
    /// admitted with `admission`).
    pub(super) fn schedule(
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
    pub(super) fn schedule_plain_decode(
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
        batch
            .scheduled
            .push(Scheduled::decode_token(request, max_model_len));
        *budget -= 1;
        true
    }
}

impl Scheduled {
    /// What scheduling the last token of a request that [`Request::decodes_plainly`] adds to
    /// the pass (by [`VllmScheduler::schedule_plain_decode`] or, when the token needs a block
    /// or completes one, by [`VllmScheduler::schedule`], which gives the same), once it is
    /// scheduled.
    pub(super) fn decode_token(request: &Request, max_model_len: Option<usize>) -> Scheduled {
        Scheduled {
            id: request.id,
            tokens: 1,
            prompt_before: request.prompt_len,
            prompt_after: request.prompt_len,
            terminal: request.nothing_left(max_model_len),
            prompt_len: request.prompt_len,
            sequence_len: request.len(),
        }
    }
}
