//! A request held by a vLLM-flavour rank: its lengths, block table and prefix-cache keys, and
//! the countdown that lets a decoding request take its next token without the general
//! scheduling step.

use super::super::kv::CopyId;
use super::super::RequestId;
use crate::tokens::{block_key, ChainTail};

/// A request held by the rank.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) id: RequestId,
    pub(super) prompt_len: usize,
    /// Output tokens to generate (already clamped for TRT-LLM).
    pub(super) max_output: usize,
    pub(super) generated: usize,
    /// Block keys ([`crate::tokens::block_key`]) of the leading blocks that are complete and
    /// hashable: the prompt's full
    /// blocks, then each later block once it has been filled and computed.
    pub(super) hashes: Vec<u64>,
    /// The hash chain through the prompt and the generated tokens hashed so far, kept only
    /// with prefix caching on (to hash generated blocks by content, as a later prompt
    /// containing them would be hashed). Generated tokens are folded in when a block they end
    /// is hashed, not as they are emitted.
    pub(super) chain: ChainTail,
    /// Physical copies held, one per block, from the first block on.
    pub(super) blocks: Vec<CopyId>,
    /// Tokens the held blocks were allocated for.
    pub(super) allocated_tokens: usize,
    pub(super) num_computed: usize,
    /// Never admitted yet (a preempted request is not fresh).
    pub(super) fresh: bool,
    /// Finished in the current pass (removed from `running` at its end).
    pub(super) finished: bool,
    /// While its length is below this, the request [`Request::decodes_plainly`] and its last
    /// token [`Request::plain_token_fits`]; 0 when unknown. Set by
    /// [`Request::count_plain_tokens`]; plain tokens and their emission keep it true; anything
    /// else that changes the request's blocks, computed tokens or generated count in a way
    /// that could make it false (releasing its blocks, a speculative burst) resets it.
    pub(super) plain_until: usize,
    /// Valid while `plain_until` is not 0: the `generated` count at which nothing is left to
    /// generate ([`Request::remaining_generation`] reaches 0).
    pub(super) generation_end: usize,
}

impl Request {
    pub(super) fn len(&self) -> usize {
        self.prompt_len + self.generated
    }

    /// An activated handoff destination: its prompt KV arrived already computed.
    pub(super) fn prompt_is_prebuilt(&self) -> bool {
        self.num_computed >= self.prompt_len && self.allocated_tokens >= self.prompt_len
    }

    /// Extends `hashes` with the keys of the blocks up to `blocks` (exclusive) that end in
    /// generated tokens, folding those tokens into the chain.
    pub(super) fn hash_blocks_through(&mut self, blocks: usize, block_size: usize) {
        debug_assert!(blocks * block_size <= self.len());
        if self.hashes.capacity() < blocks {
            // The room made at the request's start (see `VllmScheduler::new_request`) ran
            // out: make room once for the full blocks of the whole generation (at most twice
            // as many as now, for a request that asks for a huge output), not at every
            // doubling.
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
    pub(super) fn decodes_plainly(&self) -> bool {
        self.num_computed > 0
            && self.num_computed >= self.prompt_len
            && self.num_computed + 1 == self.len()
    }

    /// Whether the last token of a request that [`Request::decodes_plainly`] neither needs a
    /// new block nor completes one (with caching on): nothing to allocate, nothing to make
    /// cache-visible.
    pub(super) fn plain_token_fits(&self, block_size: usize, caching: bool) -> bool {
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
    pub(super) fn take_plain_token(
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

    /// Counts the token a plainly decoding request just emitted and marks the request finished
    /// when that was its last. Whether it was.
    #[inline(always)]
    pub(super) fn emit_plain_token(&mut self, max_model_len: Option<usize>) -> bool {
        self.generated += 1;
        debug_assert_eq!(
            self.generated >= self.generation_end,
            self.remaining_generation(max_model_len) == 0
        );
        let last = self.generated >= self.generation_end;
        if last {
            self.finished = true;
        }
        last
    }

    /// Sets `plain_until` and `generation_end` from the current state of a request that
    /// [`Request::decodes_plainly`]. A plain token leaves its blocks as they are and makes
    /// `allocated_tokens` its length, so every later token fits plainly while it stays within
    /// the blocks held (`held` tokens) and, with caching, does not end a block.
    pub(super) fn count_plain_tokens(
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
    pub(super) fn nothing_left(&self, max_model_len: Option<usize>) -> bool {
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
    pub(super) fn remaining_generation(&self, max_model_len: Option<usize>) -> usize {
        let requested = self.max_output.saturating_sub(self.generated);
        match max_model_len {
            Some(limit) => requested.min(limit.saturating_sub(self.len())),
            None => requested,
        }
    }
}
