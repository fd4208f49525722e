//! The router's own account of the work it has placed on each target (no engine feedback apart
//! from first-token and terminal signals): active prefill tokens, active prompt blocks and
//! active requests.
//!
//! A request adds its uncached prompt tokens (as estimated at placement) until its first token,
//! and its prompt blocks until it terminates. Blocks are counted once per target however many
//! active requests share them (refcounted by chained hash); with `router_assume_kv_reuse` off
//! every request's blocks are private.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::engine::kv::PassThroughHasher;
use crate::engine::RequestId;

type RefCounts = HashMap<u64, u32, BuildHasherDefault<PassThroughHasher>>;

/// The blocks a request occupies in the router's accounting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrackedBlocks {
    /// Not tracked (`router_track_active_blocks` off).
    None,
    /// Shared by identity: the chained hashes of the prompt's full blocks.
    Shared(Vec<u64>),
    /// This many blocks that no other request shares (`router_assume_kv_reuse` off).
    Private(usize),
}

impl TrackedBlocks {
    /// Blocks the request brings (the `q` of the cost formula).
    pub fn len(&self) -> usize {
        match self {
            TrackedBlocks::None => 0,
            TrackedBlocks::Shared(hashes) => hashes.len(),
            TrackedBlocks::Private(count) => *count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Default)]
struct TargetLoad {
    prefill_tokens: usize,
    requests: usize,
    shared: RefCounts,
    private_blocks: usize,
}

#[derive(Debug)]
struct ActiveRequest {
    target: usize,
    /// Uncached prompt tokens still counted as prefill load (0 once the first token is out).
    prefill_tokens: usize,
    first_token_seen: bool,
    blocks: TrackedBlocks,
}

/// A target's load as seen by one incoming request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Projection {
    pub prefill_tokens: usize,
    pub active_blocks: usize,
    pub requests: usize,
    /// The request's blocks not already active on the target.
    pub new_blocks: usize,
}

/// Active load per target.
#[derive(Debug)]
pub struct ActiveLoad {
    targets: Vec<TargetLoad>,
    requests: Vec<Option<ActiveRequest>>,
}

impl ActiveLoad {
    pub fn new(targets: usize) -> Self {
        Self {
            targets: (0..targets).map(|_| TargetLoad::default()).collect(),
            requests: Vec::new(),
        }
    }

    pub fn prefill_tokens(&self, target: usize) -> usize {
        self.targets[target].prefill_tokens
    }

    pub fn active_blocks(&self, target: usize) -> usize {
        let load = &self.targets[target];
        load.shared.len() + load.private_blocks
    }

    pub fn active_requests(&self, target: usize) -> usize {
        self.targets[target].requests
    }

    /// Every target's load, with the blocks of `blocks` that would be new there.
    pub fn project(&self, blocks: &TrackedBlocks, out: &mut Vec<Projection>) {
        out.clear();
        for (target, load) in self.targets.iter().enumerate() {
            let new_blocks = match blocks {
                TrackedBlocks::None => 0,
                TrackedBlocks::Private(count) => *count,
                TrackedBlocks::Shared(hashes) => {
                    let shared = hashes
                        .iter()
                        .take_while(|h| load.shared.contains_key(h))
                        .count();
                    hashes.len() - shared
                }
            };
            out.push(Projection {
                prefill_tokens: load.prefill_tokens,
                active_blocks: self.active_blocks(target),
                requests: load.requests,
                new_blocks,
            });
        }
    }

    /// Places request `id` on `target` with `prefill_tokens` of prefill load (0 = none).
    pub fn add(
        &mut self,
        id: RequestId,
        target: usize,
        prefill_tokens: usize,
        blocks: TrackedBlocks,
    ) {
        let load = &mut self.targets[target];
        load.prefill_tokens += prefill_tokens;
        load.requests += 1;
        match &blocks {
            TrackedBlocks::None => {}
            TrackedBlocks::Private(count) => load.private_blocks += count,
            TrackedBlocks::Shared(hashes) => {
                for &hash in hashes {
                    *load.shared.entry(hash).or_insert(0) += 1;
                }
            }
        }
        if id >= self.requests.len() {
            self.requests.resize_with(id + 1, || None);
        }
        debug_assert!(self.requests[id].is_none(), "request placed twice");
        self.requests[id] = Some(ActiveRequest {
            target,
            prefill_tokens,
            first_token_seen: false,
            blocks,
        });
    }

    /// The request's first token is out: its prefill no longer loads the target. Returns
    /// false when that was already known (or the request is not active).
    pub fn prefill_done(&mut self, id: RequestId) -> bool {
        let Some(Some(request)) = self.requests.get_mut(id) else {
            return false;
        };
        if request.first_token_seen {
            return false;
        }
        request.first_token_seen = true;
        self.targets[request.target].prefill_tokens -= request.prefill_tokens;
        request.prefill_tokens = 0;
        true
    }

    /// The request terminated: everything it held is released. Unknown ids are ignored.
    pub fn free(&mut self, id: RequestId) {
        let Some(request) = self.requests.get_mut(id).and_then(Option::take) else {
            return;
        };
        let load = &mut self.targets[request.target];
        load.prefill_tokens -= request.prefill_tokens;
        load.requests -= 1;
        match request.blocks {
            TrackedBlocks::None => {}
            TrackedBlocks::Private(count) => load.private_blocks -= count,
            TrackedBlocks::Shared(hashes) => {
                for hash in hashes {
                    let count = load.shared.get_mut(&hash).expect("tracked block");
                    *count -= 1;
                    if *count == 0 {
                        load.shared.remove(&hash);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_blocks_count_once_and_release_in_two_steps() {
        let mut load = ActiveLoad::new(2);
        load.add(0, 0, 4096, TrackedBlocks::Shared(vec![1, 2, 3]));
        load.add(1, 0, 1024, TrackedBlocks::Shared(vec![1, 2, 5, 6]));
        assert_eq!(load.active_blocks(0), 5);
        assert_eq!(load.prefill_tokens(0), 5120);
        let mut out = Vec::new();
        load.project(&TrackedBlocks::Shared(vec![1, 2, 3, 9]), &mut out);
        assert_eq!(
            out[0],
            Projection {
                prefill_tokens: 5120,
                active_blocks: 5,
                requests: 2,
                new_blocks: 1
            }
        );
        assert_eq!(out[1].new_blocks, 4);
        assert!(load.prefill_done(0));
        assert!(!load.prefill_done(0));
        assert_eq!(load.prefill_tokens(0), 1024);
        load.free(0);
        assert_eq!(
            (
                load.prefill_tokens(0),
                load.active_blocks(0),
                load.active_requests(0)
            ),
            (1024, 4, 1)
        );
        load.free(1);
        load.free(7);
        assert_eq!(load.active_blocks(0), 0);
        load.add(2, 1, 0, TrackedBlocks::Private(3));
        load.add(3, 1, 0, TrackedBlocks::Private(3));
        assert_eq!(load.active_blocks(1), 6);
    }
}
