//! A request's block table: growing it to cover the tokens scheduled (reusing cached prefix
//! blocks on the first allocation), making computed blocks cache-visible, and giving every
//! block back.

use super::super::kv::BlockPool;
use super::schedule::Slot;
use super::{Request, VllmScheduler};

impl VllmScheduler {
    /// Grows the request's block table to cover `target` tokens. The first allocation reuses
    /// `reusable_blocks` cached prefix blocks. Returns false (nothing changed) when the pool
    /// cannot supply the fresh blocks.
    pub(super) fn allocate(&mut self, slot: Slot, target: usize, reusable_blocks: usize) -> bool {
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
        if request.blocks.is_empty() {
            if request.blocks.capacity() == 0 {
                if let Some(spare) = self.spare_block_tables.pop() {
                    request.blocks = spare;
                }
            }
            // Room for the blocks of the whole generation at once (within the pool), so that
            // decoding never regrows the table (a reused table may have it already).
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
            hashes.get(fresh_start..).unwrap_or(&[]),
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
    pub(super) fn finalize_computed(&mut self, slot: Slot, before: usize, after: usize) {
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

    /// Makes every full block of `request`'s computed tokens that is not yet hashed
    /// cache-visible (blocks filled by generated tokens).
    pub(super) fn promote_full_blocks(pool: &mut BlockPool, request: &mut Request, bs: usize) {
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

    /// Releases every block of `request`, tail first, so that its suffix blocks are evicted
    /// before its prefix blocks.
    pub(super) fn release_blocks(pool: &mut BlockPool, request: &mut Request) {
        pool.release_all(&request.blocks);
        request.blocks.clear();
        request.allocated_tokens = 0;
        request.plain_until = 0;
    }
}
