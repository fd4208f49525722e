//! Disaggregated roles (engine.md §7). A decode worker reserves KV for an incoming prompt
//! (FIFO, retried at most once per change of capacity), then activates the reservation when
//! the transfer completes; a prefill worker keeps a finished request's blocks until the
//! handoff releases them.

use super::super::{DestinationReserved, EngineRequest, NotReserved, RequestId};
use super::{Request, VllmScheduler};

/// A handoff destination waiting for KV capacity on a decode worker.
#[derive(Debug)]
pub(super) struct PendingDestination {
    pub(super) request: Request,
    pub(super) last_attempt_generation: Option<u64>,
}

/// A destination reservation that can never succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestinationTooLarge;

impl VllmScheduler {
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
            hashes.get(resident..).unwrap_or(&[]),
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
}
