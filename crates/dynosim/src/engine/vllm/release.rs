//! Where KV goes back: preemption (vLLM only; the victim is re-queued at the front with its
//! generated tokens kept) and finished requests (released, or held as a handoff source on a
//! prefill worker).

use super::super::kv::{BlockPool, CopyId, FastMap};
use super::super::RequestId;
use super::schedule::Batch;
use super::{Policy, Request, VllmScheduler, SPARE_BLOCK_TABLES};
use crate::config::{PreemptionMode, WorkerType};

impl VllmScheduler {
    /// The running request to preempt, if the policy preempts at all.
    pub(super) fn pick_victim(&self) -> Option<usize> {
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
    pub(super) fn preempt(&mut self, victim: usize, batch: &mut Batch, budget: &mut usize) {
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
    pub(super) fn finish_request(&mut self, request: &mut Request) {
        finish_request(
            &mut self.pool,
            &mut self.source_holds,
            &mut self.capacity_generation,
            self.worker_type,
            &mut self.spare_block_tables,
            request,
        );
    }

    /// Finishes the running requests marked `finished` during the pass's token emission, in
    /// running order, and drops them from `running`.
    pub(super) fn finish_marked(&mut self) {
        // The walk stays small enough to inline; a finished request takes a call.
        self.running.retain_mut(|request| {
            if request.finished {
                finish_request(
                    &mut self.pool,
                    &mut self.source_holds,
                    &mut self.capacity_generation,
                    self.worker_type,
                    &mut self.spare_block_tables,
                    request,
                );
            }
            !request.finished
        });
    }
}

/// A request finished: its blocks are released, or held for the handoff on a prefill worker,
/// and its emptied block table kept for a later request ([`keep_block_table`]). Either way a
/// running slot was freed. (A free function over the scheduler's parts, so that it can run
/// while `running` is borrowed; not inlined, so that `finish_marked`'s walk stays small.)
#[inline(never)]
fn finish_request(
    pool: &mut BlockPool,
    source_holds: &mut FastMap<RequestId, Vec<CopyId>>,
    capacity_generation: &mut u64,
    worker_type: WorkerType,
    spare_block_tables: &mut Vec<Vec<CopyId>>,
    request: &mut Request,
) {
    if worker_type == WorkerType::Prefill {
        source_holds.insert(request.id, std::mem::take(&mut request.blocks));
        request.allocated_tokens = 0;
    } else {
        VllmScheduler::release_blocks(pool, request);
    }
    *capacity_generation += 1;
    keep_block_table(spare_block_tables, request);
}

/// Keeps the block table of finished `request` for a later request's first allocation,
/// emptied, while there are fewer than [`SPARE_BLOCK_TABLES`]. (A prefill worker's blocks went
/// to a source hold: its block table is empty and unallocated then, and not worth keeping.)
fn keep_block_table(spare_block_tables: &mut Vec<Vec<CopyId>>, request: &mut Request) {
    if spare_block_tables.len() < SPARE_BLOCK_TABLES && request.blocks.capacity() > 0 {
        let mut blocks = std::mem::take(&mut request.blocks);
        blocks.clear();
        spare_block_tables.push(blocks);
    }
}
