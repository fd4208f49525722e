//! Passes that only decode: every running request takes exactly one token, with no admission,
//! prefill, preemption or burst possible. They are walked once over `running` instead of the
//! general pass's steps, and runs of *plain* passes (no block to allocate or to complete) are
//! timed without a walk each; both leave exactly what the general pass leaves (a test compares
//! them pass by pass).

use super::super::timing::{DecodeBatch, PassTime};
use super::super::{PassEvent, RequestId};
use super::schedule::{Batch, HeadAdmission, Outcome, Scheduled, Slot};
use super::{Request, VllmScheduler};
use crate::config::WorkerType;

impl VllmScheduler {
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
    pub(super) fn decode_only_pass_applies(&self) -> bool {
        self.running_decode_only()
            // The admission step would not look at the queue.
            && (self.waiting.is_empty() || self.running.len() >= self.max_num_seqs)
    }

    /// Whether the pass's first step schedules every running request one token, with no
    /// prefill, preemption or speculative burst possible, and nothing recorded per scheduled
    /// request: what admissions may follow aside, the pass only decodes.
    fn running_decode_only(&self) -> bool {
        let running = self.running.len();
        self.decode_only_path
            && self.all_decoding
            && running > 0
            && self.speculative.is_none()
            && self.fpm.is_none()
            // The token budget covers one token each.
            && running <= self.max_batched_tokens
            // Each token needs at most one new block: room for all of them means no
            // allocation can fail, so nothing is preempted.
            && self.num_blocks.saturating_sub(self.pool.num_active()) >= running
    }

    /// Whether this pass's running requests decode as in a decode-only pass while its
    /// admission step will look at the waiting queue (and no batch waiting may hold the pass
    /// back): [`VllmScheduler::run_decode_pass_before_queue`] then gives the full pass's
    /// outcome. An overloaded worker spends most of its passes so: its queue's head waits
    /// for KV that the running requests hold.
    pub(super) fn decode_pass_before_queue_applies(&self) -> bool {
        self.running_decode_only()
            && !self.waiting.is_empty()
            && self.running.len() < self.max_num_seqs
            && self.batch_waiting.is_none()
    }

    /// A pass as [`VllmScheduler::decode_pass_before_queue_applies`] describes: schedules
    /// every running request its token ([`VllmScheduler::schedule_decode_tokens`]), then asks
    /// the admission step's first question. When nothing may be admitted, the pass is a
    /// decode-only pass: its tokens, events and finished requests as there. Otherwise the
    /// full pass goes on from its admission step, with the batch its first step would have
    /// made (one [`Scheduled::decode_token`] per running request, in order), the requests
    /// and the pool being as that step leaves them. Returns the pass's time and whether it
    /// only decoded.
    pub(super) fn run_decode_pass_before_queue(
        &mut self,
        events: &mut Vec<PassEvent>,
    ) -> (PassTime, bool) {
        let ready = self.running.len();
        let context_tokens = self.schedule_decode_tokens();
        // Admission reads the waiting requests and the pool, which the token emission below
        // does not change (finished requests release their blocks after the pass's events).
        let head = self.head_admission();
        if let HeadAdmission::Blocked = head {
            let any_finished = self.emit_decode_tokens();
            let time = self.decode_only_time(ready, context_tokens);
            self.close_decode_only_pass(any_finished, events);
            return (time, true);
        }
        let mut batch = Batch {
            scheduled: std::mem::take(&mut self.scheduled_scratch),
            ..Batch::default()
        };
        batch.scheduled.clear();
        let max_model_len = self.max_model_len;
        batch.scheduled.extend(
            self.running
                .iter()
                .map(|request| Scheduled::decode_token(request, max_model_len)),
        );
        let budget = self.max_batched_tokens - ready;
        let time = self.admit_and_emit(false, budget, batch, Some(head), events);
        (time, false)
    }

    /// Schedules every running request its one token, as the full pass's first step would
    /// (which cannot fail here: see [`VllmScheduler::running_decode_only`]), without
    /// emitting it. Returns the requests' context tokens.
    fn schedule_decode_tokens(&mut self) -> usize {
        let bs = self.block_size;
        let caching = self.pool.caching();
        let max_model_len = self.max_model_len;
        let mut context_tokens = 0;
        let mut batch = Batch {
            scheduled: std::mem::take(&mut self.scheduled_scratch),
            ..Batch::default()
        };
        for index in 0..self.running.len() {
            let request = &mut self.running[index];
            debug_assert!(request.decodes_plainly() && !request.finished);
            context_tokens += request.len();
            if !request.take_plain_token(bs, caching, max_model_len) {
                // Its token needs a block or completes one: the general step.
                batch.scheduled.clear();
                let mut budget = 1;
                let outcome = self.schedule(Slot::Running(index), None, &mut budget, &mut batch);
                debug_assert!(matches!(outcome, Outcome::Scheduled { tokens: 1 }));
            }
        }
        batch.scheduled.clear();
        self.scheduled_scratch = batch.scheduled;
        context_tokens
    }

    /// Gives every running request, scheduled by [`VllmScheduler::schedule_decode_tokens`],
    /// its token, marking those that reach their length finished. Whether any did.
    fn emit_decode_tokens(&mut self) -> bool {
        let max_model_len = self.max_model_len;
        let mut any_finished = false;
        for request in &mut self.running {
            if request.emit_plain_token(max_model_len) {
                any_finished = true;
            }
        }
        any_finished
    }

    /// A pass in which every running request decodes one token (see
    /// [`VllmScheduler::decode_only_pass_applies`]): [`VllmScheduler::decode_only_walk`], then
    /// its events, then the finished requests leave, as in the full pass.
    pub(super) fn run_decode_only_pass(&mut self, events: &mut Vec<PassEvent>) -> PassTime {
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
    // Kept out of line: inlined into the event loop's `settle` (as a build of session 15
    // happened to do) it ran about 7 M instructions slower on the 4-worker conversation row.
    #[inline(never)]
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
    pub(super) fn plain_passes_ahead(&mut self) -> (usize, usize) {
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
    pub(super) fn run_plain_passes(
        &mut self,
        passes: usize,
        context_tokens: usize,
        start_ms: &mut f64,
        ends_ahead: &mut impl FnMut(f64) -> bool,
        ends: &mut Vec<f64>,
    ) {
        let ready = self.running.len();
        // A timer that reads only the KV levels gives every one of these passes the same
        // time: it is asked once.
        let same_time = self.timing.decode_reads_only_kv();
        let mut time = self.decode_only_time(ready, context_tokens);
        let mut ran = 0;
        while ran < passes {
            if ran > 0 && !same_time {
                time = self.decode_only_time(ready, context_tokens + ran * ready);
            }
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
    pub(super) fn decode_only_time(&mut self, ready: usize, context_tokens: usize) -> PassTime {
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
    pub(super) fn decode_only_walk(&mut self) -> (PassTime, bool) {
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
            if request.emit_plain_token(max_model_len) {
                any_finished = true;
            }
        }
        batch.scheduled.clear();
        self.scheduled_scratch = batch.scheduled;
        (self.decode_only_time(ready, context_tokens), any_finished)
    }

    /// Ends the decode-only pass just walked: its events (a token for each running request, in
    /// order, each finished one's completion after it), then its finished requests leave.
    pub(super) fn close_decode_only_pass(
        &mut self,
        any_finished: bool,
        events: &mut Vec<PassEvent>,
    ) {
        let token = |request: &Request| PassEvent::Tokens {
            id: request.id,
            count: 1,
        };
        // The tokens go in stretches between completions, each stretch as one `extend` of a
        // known length (no check of the vector's room per event).
        let mut rest = &self.running[..];
        if any_finished {
            while let Some(at) = rest.iter().position(|request| request.finished) {
                events.extend(rest[..=at].iter().map(token));
                events.push(PassEvent::Completed { id: rest[at].id });
                rest = &rest[at + 1..];
            }
        }
        events.extend(rest.iter().map(token));
        if any_finished {
            self.finish_marked();
        }
    }
}
