//! The end of a general pass: requests with nothing left complete, every ready request emits
//! a token (or, with speculative decoding, a sampled burst), and the decode time is measured
//! from the batch before the tokens are added.

use super::super::timing::DecodeBatch;
use super::super::PassEvent;
use super::schedule::Batch;
use super::{Request, VllmScheduler};
use crate::config::WorkerType;

impl VllmScheduler {
    /// Completes requests with nothing left to generate, and lets every other ready request
    /// emit one token. Returns the decode part of the pass duration.
    ///
    /// One walk over the running requests: the decode time needs the batch as it was before
    /// the tokens (its size and context), which the walk counts as it goes, and the KV in use
    /// after the requests that leave without a token released theirs, which the walk does
    /// where it meets them; those that finish with their token are released after the time is
    /// taken, as before. (Two walks, one to count and one to emit, cost the single-worker
    /// conversation row a walk over up to `max_num_seqs` requests per pass.)
    pub(super) fn emit_tokens(&mut self, events: &mut Vec<PassEvent>) -> f64 {
        if self.speculative.is_some() {
            return match self.complete_finished_and_count(events) {
                0 => 0.0,
                _ => self.emit_bursts(events),
            };
        }
        let max_model_len = self.max_model_len;
        let mut ready = 0usize;
        let mut context_tokens = 0usize;
        let mut any_finished = false;
        // The requests that leave without a token (rare: an output length of 0). Their
        // completions go before every token of the pass, in running order, as a first walk
        // would have made them: the order of a pass's events reaches the KV router's queue.
        let mut leaving = Vec::new();
        let first_event = events.len();
        let mut i = 0;
        while i < self.running.len() {
            let request = &mut self.running[i];
            if request.num_computed < request.len() {
                i += 1;
                continue;
            }
            if request.nothing_left(max_model_len) {
                leaving.push(self.leave_without_token(i));
                continue;
            }
            ready += 1;
            context_tokens += request.len();
            // The new token is not computed yet: it gets its KV when it is next scheduled.
            request.generated += 1;
            events.push(PassEvent::Tokens {
                id: request.id,
                count: 1,
            });
            if request.nothing_left(max_model_len) {
                // Released after the decode time is taken, in this order: nothing in between
                // touches the pool.
                request.finished = true;
                any_finished = true;
                events.push(PassEvent::Completed { id: request.id });
            }
            i += 1;
        }
        if !leaving.is_empty() {
            events.splice(first_event..first_event, leaving);
        }
        if ready == 0 {
            return 0.0;
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
        if any_finished {
            self.finish_marked();
        }
        decode_ms
    }

    /// Completes the ready requests with nothing left to generate (they leave without a
    /// token); returns how many ready requests are left.
    fn complete_finished_and_count(&mut self, events: &mut Vec<PassEvent>) -> usize {
        let max_model_len = self.max_model_len;
        let mut ready = 0usize;
        let mut i = 0;
        while i < self.running.len() {
            let request = &self.running[i];
            if request.num_computed < request.len() {
                i += 1;
                continue;
            }
            if request.nothing_left(max_model_len) {
                events.push(self.leave_without_token(i));
                continue;
            }
            ready += 1;
            i += 1;
        }
        ready
    }

    /// Running request `i`, ready with nothing left to generate, leaves without a token: its
    /// KV is released now, before the pass's decode time reads the pool. Returns its completion.
    /// (Rare: kept out of the walks, whose loops stay small.)
    #[cold]
    #[inline(never)]
    fn leave_without_token(&mut self, i: usize) -> PassEvent {
        let mut done = self.running.remove(i);
        self.finish_request(&mut done);
        PassEvent::Completed { id: done.id }
    }

    /// Speculative decoding: every ready request emits a sampled burst of tokens. KV for the
    /// largest possible bursts is reserved first, preempting while the pool cannot hold it;
    /// the decode time counts the KV in use without that reservation. The burst's tokens but
    /// the last are computed in this step (the last one gets its KV when next scheduled, as
    /// in a plain decode step); unused reserved blocks are returned at the end.
    pub(super) fn emit_bursts(&mut self, events: &mut Vec<PassEvent>) -> f64 {
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
            if self.pool.allocate(&[], required, &[], &mut reserved) {
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
}
