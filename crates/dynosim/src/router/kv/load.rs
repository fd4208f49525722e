//! The router's own account of the work it has placed on each target (no engine feedback apart
//! from first-token and terminal signals): active prefill tokens, active prompt blocks and
//! active requests.
//!
//! A request adds its uncached prompt tokens (as estimated at placement) until its first token,
//! and its prompt blocks until it terminates. Blocks are counted once per target however many
//! active requests share them; with `router_assume_kv_reuse` off every request's blocks are
//! private.
//!
//! With the AIC prefill-load model (`router_prefill_load_model: "aic"`), each target's oldest
//! active prefill (the anchor) decays linearly over its predicted duration, counted from when
//! it became the oldest: the target's prefill load is then the other prefills in full plus
//! `⌈tokens × (1 − elapsed / expected)⌉` of the anchor (clamped to [0, tokens]; all of it when
//! no duration was predicted). When the anchor's prefill ends, the next oldest becomes the
//! anchor at that moment.
//!
//! Shared blocks are counted per run of blocks sharing a base (see [`crate::tokens`]), not per
//! block. Every request brings all full blocks of its prompt from the start, so of each base it
//! brings a leading range of that base's blocks: the blocks of a base active on a target are
//! the longest such range among the requests there, and one count per request and base is
//! enough to keep that up to date.

use std::collections::VecDeque;

use crate::engine::kv::FastMap;
use crate::engine::RequestId;
use crate::tokens::BlockHashes;

/// The active requests' block counts of one base on one target, as a multiset of counts. A
/// base is often held by many requests with the same count (a prefix every prompt shares), so
/// it keeps each distinct count once, with how many requests hold it: adding or releasing a
/// holder of the largest count is then constant time, however many requests share the base.
#[derive(Debug, Default)]
struct BaseLoad {
    /// The largest count held: the distinct blocks of this base that are active.
    active: u32,
    /// Requests holding exactly `active` blocks (0: none holds any, the entry is unused).
    at_active: u32,
    /// The smaller counts held, each with how many requests hold it (unordered, no zeros).
    smaller: Vec<(u32, u32)>,
}

impl BaseLoad {
    /// One more request holds `count` blocks.
    fn add(&mut self, count: u32) {
        if self.at_active == 0 {
            self.active = count;
            self.at_active = 1;
        } else if count == self.active {
            self.at_active += 1;
        } else if count > self.active {
            self.smaller.push((self.active, self.at_active));
            self.active = count;
            self.at_active = 1;
        } else {
            match self.smaller.iter_mut().find(|(held, _)| *held == count) {
                Some((_, holders)) => *holders += 1,
                None => self.smaller.push((count, 1)),
            }
        }
    }

    /// A request holding `count` blocks releases them; false once no request holds any.
    fn remove(&mut self, count: u32) -> bool {
        if count == self.active {
            debug_assert!(self.at_active > 0, "tracked count");
            self.at_active -= 1;
            if self.at_active == 0 {
                let Some(largest) = (0..self.smaller.len()).max_by_key(|&i| self.smaller[i].0)
                else {
                    self.active = 0;
                    return false;
                };
                (self.active, self.at_active) = self.smaller.swap_remove(largest);
            }
        } else {
            let at = self
                .smaller
                .iter()
                .position(|&(held, _)| held == count)
                .expect("tracked count");
            self.smaller[at].1 -= 1;
            if self.smaller[at].1 == 0 {
                self.smaller.swap_remove(at);
            }
        }
        true
    }
}

/// The blocks a request occupies in the router's accounting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrackedBlocks {
    /// Not tracked (`router_track_active_blocks` off).
    None,
    /// Shared by identity: the prompt's full blocks.
    Shared(BlockHashes),
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
    shared: FastMap<u64, BaseLoad>,
    /// Distinct active blocks in `shared`.
    shared_blocks: usize,
    private_blocks: usize,
    /// Active prefills in placement order (AIC decay only).
    prefills: VecDeque<ActivePrefill>,
    /// When the front of `prefills` became the anchor (virtual ms).
    anchored_since_ms: f64,
}

/// One active prefill of the AIC decay model.
#[derive(Clone, Copy, Debug)]
struct ActivePrefill {
    id: RequestId,
    tokens: usize,
    /// Predicted prefill duration (ms); `None` = not predicted, no decay.
    expected_ms: Option<f64>,
}

impl TargetLoad {
    /// Prefill tokens at `now_ms` under the AIC decay model.
    fn decayed_prefill_tokens(&self, now_ms: f64) -> usize {
        let Some(anchor) = self.prefills.front() else {
            return self.prefill_tokens;
        };
        let remaining = match anchor.expected_ms {
            None => anchor.tokens,
            Some(expected) if expected <= 0.0 => 0,
            Some(expected) => {
                let elapsed = (now_ms - self.anchored_since_ms).max(0.0);
                let fraction = (1.0 - elapsed / expected).clamp(0.0, 1.0);
                (anchor.tokens as f64 * fraction).ceil() as usize
            }
        };
        self.prefill_tokens - anchor.tokens + remaining
    }

    /// Ends request `id`'s prefill in the decay order; a new anchor starts at `now_ms`.
    fn end_prefill(&mut self, id: RequestId, now_ms: f64) {
        let Some(position) = self.prefills.iter().position(|prefill| prefill.id == id) else {
            return;
        };
        self.prefills.remove(position);
        if position == 0 {
            self.anchored_since_ms = now_ms;
        }
    }

    /// Leading blocks of `hashes` already active here.
    fn active_prefix(&self, hashes: &BlockHashes) -> usize {
        let mut active = 0;
        for run in hashes.runs() {
            let here = self.shared.get(&run.base).map_or(0, |load| load.active);
            active += here.min(run.count) as usize;
            if here < run.count {
                break;
            }
        }
        active
    }

    fn add_shared(&mut self, hashes: &BlockHashes) {
        for run in hashes.runs() {
            let load = self.shared.entry(run.base).or_default();
            let before = load.active;
            load.add(run.count);
            self.shared_blocks += (load.active - before) as usize;
        }
    }

    fn remove_shared(&mut self, hashes: &BlockHashes) {
        for run in hashes.runs() {
            let load = self.shared.get_mut(&run.base).expect("tracked blocks");
            let before = load.active;
            let held = load.remove(run.count);
            self.shared_blocks -= (before - load.active) as usize;
            if !held {
                self.shared.remove(&run.base);
            }
        }
    }
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
    /// The active requests by id (only those: a run's length does not grow it).
    requests: FastMap<RequestId, ActiveRequest>,
    /// The AIC prefill-load model: the oldest prefill of each target decays.
    decay: bool,
}

impl ActiveLoad {
    pub fn new(targets: usize) -> Self {
        Self {
            targets: (0..targets).map(|_| TargetLoad::default()).collect(),
            requests: FastMap::default(),
            decay: false,
        }
    }

    /// A load whose oldest prefill per target decays over its predicted duration (the
    /// `aic` prefill-load model).
    pub fn with_prefill_decay(targets: usize) -> Self {
        Self {
            decay: true,
            ..Self::new(targets)
        }
    }

    /// Targets up to `count` exist (new ones carry no load).
    pub fn grow(&mut self, count: usize) {
        if count > self.targets.len() {
            self.targets.resize_with(count, TargetLoad::default);
        }
    }

    /// The target's prefill tokens at `now_ms` (the full sum without the decay model).
    pub fn prefill_tokens(&self, target: usize, now_ms: f64) -> usize {
        let load = &self.targets[target];
        if self.decay {
            load.decayed_prefill_tokens(now_ms)
        } else {
            load.prefill_tokens
        }
    }

    pub fn active_blocks(&self, target: usize) -> usize {
        let load = &self.targets[target];
        load.shared_blocks + load.private_blocks
    }

    pub fn active_requests(&self, target: usize) -> usize {
        self.targets[target].requests
    }

    /// Every target's load at `now_ms`, with the blocks of `blocks` that would be new there.
    pub fn project(&self, blocks: &TrackedBlocks, now_ms: f64, out: &mut Vec<Projection>) {
        out.clear();
        for (target, load) in self.targets.iter().enumerate() {
            let new_blocks = match blocks {
                TrackedBlocks::None => 0,
                TrackedBlocks::Private(count) => *count,
                TrackedBlocks::Shared(hashes) => hashes.len() - load.active_prefix(hashes),
            };
            out.push(Projection {
                prefill_tokens: self.prefill_tokens(target, now_ms),
                active_blocks: self.active_blocks(target),
                requests: load.requests,
                new_blocks,
            });
        }
    }

    /// Places request `id` on `target` at `now_ms` with `prefill_tokens` of prefill load
    /// (0 = none), whose prefill is predicted to take `expected_prefill_ms` (decay model only).
    pub fn add(
        &mut self,
        id: RequestId,
        target: usize,
        prefill_tokens: usize,
        expected_prefill_ms: Option<f64>,
        now_ms: f64,
        blocks: TrackedBlocks,
    ) {
        let load = &mut self.targets[target];
        load.prefill_tokens += prefill_tokens;
        if self.decay && prefill_tokens > 0 {
            if load.prefills.is_empty() {
                load.anchored_since_ms = now_ms;
            }
            load.prefills.push_back(ActivePrefill {
                id,
                tokens: prefill_tokens,
                expected_ms: expected_prefill_ms,
            });
        }
        load.requests += 1;
        match &blocks {
            TrackedBlocks::None => {}
            TrackedBlocks::Private(count) => load.private_blocks += count,
            TrackedBlocks::Shared(hashes) => load.add_shared(hashes),
        }
        let placed_before = self.requests.insert(
            id,
            ActiveRequest {
                target,
                prefill_tokens,
                first_token_seen: false,
                blocks,
            },
        );
        debug_assert!(placed_before.is_none(), "request placed twice");
    }

    /// The request's first token is out: its prefill no longer loads the target. Returns
    /// false when that was already known (or the request is not active).
    pub fn prefill_done(&mut self, id: RequestId, now_ms: f64) -> bool {
        let Some(request) = self.requests.get_mut(&id) else {
            return false;
        };
        if request.first_token_seen {
            return false;
        }
        request.first_token_seen = true;
        let load = &mut self.targets[request.target];
        load.prefill_tokens -= request.prefill_tokens;
        if self.decay && request.prefill_tokens > 0 {
            load.end_prefill(id, now_ms);
        }
        request.prefill_tokens = 0;
        true
    }

    /// The request terminated: everything it held is released. Unknown ids are ignored.
    pub fn free(&mut self, id: RequestId, now_ms: f64) {
        let Some(request) = self.requests.remove(&id) else {
            return;
        };
        let load = &mut self.targets[request.target];
        load.prefill_tokens -= request.prefill_tokens;
        if self.decay && request.prefill_tokens > 0 {
            load.end_prefill(id, now_ms);
        }
        load.requests -= 1;
        match request.blocks {
            TrackedBlocks::None => {}
            TrackedBlocks::Private(count) => load.private_blocks -= count,
            TrackedBlocks::Shared(hashes) => load.remove_shared(&hashes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::TokenSeq;

    /// The blocks of a prompt of one-token blocks (4 tokens each).
    fn blocks(tokens: &[u64]) -> BlockHashes {
        let mut seq = TokenSeq::new();
        for &t in tokens {
            seq.push_run(t, 4);
        }
        seq.block_hashes(4)
    }

    fn shared(tokens: &[u64]) -> TrackedBlocks {
        TrackedBlocks::Shared(blocks(tokens))
    }

    #[test]
    fn only_active_requests_are_kept_however_long_the_run() {
        // A run of many requests, at most three active at once: what the load holds follows
        // the active requests, not the highest id seen.
        let mut load = ActiveLoad::new(2);
        for id in 0..10_000 {
            load.add(id, id % 2, 16, None, 0.0, TrackedBlocks::Private(1));
            if id >= 2 {
                load.free(id - 2, 0.0);
            }
            assert!(load.requests.len() <= 3);
        }
        assert_eq!(load.active_requests(0) + load.active_requests(1), 2);
        assert_eq!(load.requests.len(), 2);
    }

    #[test]
    fn shared_blocks_count_once_and_release_in_two_steps() {
        let mut load = ActiveLoad::new(2);
        load.add(0, 0, 4096, None, 0.0, shared(&[1, 2, 3]));
        load.add(1, 0, 1024, None, 0.0, shared(&[1, 2, 5, 6]));
        assert_eq!(load.active_blocks(0), 5);
        assert_eq!(load.prefill_tokens(0, 0.0), 5120);
        let mut out = Vec::new();
        load.project(&shared(&[1, 2, 3, 9]), 0.0, &mut out);
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
        assert!(load.prefill_done(0, 0.0));
        assert!(!load.prefill_done(0, 0.0));
        assert_eq!(load.prefill_tokens(0, 0.0), 1024);
        load.free(0, 0.0);
        assert_eq!(
            (
                load.prefill_tokens(0, 0.0),
                load.active_blocks(0),
                load.active_requests(0)
            ),
            (1024, 4, 1)
        );
        load.free(1, 0.0);
        load.free(7, 0.0);
        assert_eq!(load.active_blocks(0), 0);
        load.add(2, 1, 0, None, 0.0, TrackedBlocks::Private(3));
        load.add(3, 1, 0, None, 0.0, TrackedBlocks::Private(3));
        assert_eq!(load.active_blocks(1), 6);
    }

    #[test]
    fn blocks_of_one_run_count_by_the_longest_holder() {
        let mut load = ActiveLoad::new(1);
        // Token 7 over 5 blocks, then over 3, 8 blocks (the same run, longer or shorter).
        load.add(0, 0, 0, None, 0.0, shared(&[7, 7, 7, 7, 7]));
        load.add(1, 0, 0, None, 0.0, shared(&[7, 7, 7, 8]));
        load.add(2, 0, 0, None, 0.0, shared(&[7, 7, 7, 7, 7, 7, 7, 7]));
        assert_eq!(load.active_blocks(0), 9);
        let mut out = Vec::new();
        load.project(&shared(&[7, 7, 7, 7, 7, 7, 7, 7, 7, 8]), 0.0, &mut out);
        assert_eq!(out[0].new_blocks, 2);
        load.project(&shared(&[7, 7, 7, 8, 9]), 0.0, &mut out);
        assert_eq!(out[0].new_blocks, 1);
        load.free(2, 0.0);
        assert_eq!(load.active_blocks(0), 6);
        load.free(0, 0.0);
        assert_eq!(load.active_blocks(0), 4);
        load.free(1, 0.0);
        assert_eq!(load.active_blocks(0), 0);
        assert!(load.targets[0].shared.is_empty());
    }
    #[test]
    fn aic_model_decays_the_oldest_prefill_from_when_it_became_oldest() {
        let mut load = ActiveLoad::with_prefill_decay(1);
        load.add(0, 0, 1000, Some(100.0), 10.0, TrackedBlocks::None);
        load.add(1, 0, 600, Some(50.0), 30.0, TrackedBlocks::None);
        load.add(2, 0, 0, Some(5.0), 30.0, TrackedBlocks::None); // no prefill: not tracked
        assert_eq!(load.prefill_tokens(0, 10.0), 1600);
        // 25 of 100 ms elapsed since request 0 was placed: 750 of its tokens remain.
        assert_eq!(load.prefill_tokens(0, 35.0), 1350);
        // Past its predicted duration it counts nothing; the others stay in full.
        assert_eq!(load.prefill_tokens(0, 500.0), 600);
        // Request 0's first token at 120 ms: request 1 is the anchor from then on.
        assert!(load.prefill_done(0, 120.0));
        assert_eq!(load.prefill_tokens(0, 120.0), 600);
        assert_eq!(load.prefill_tokens(0, 145.0), 300);
        // Partial tokens round up: 600 × (1 − 0.499 / 50) = 594.012.
        assert_eq!(load.prefill_tokens(0, 120.499), 595);
        load.free(1, 150.0);
        assert_eq!(load.prefill_tokens(0, 150.0), 0);
        // An unpredicted prefill does not decay, and neither do those behind it.
        load.add(3, 0, 80, None, 200.0, TrackedBlocks::None);
        load.add(4, 0, 20, Some(1.0), 200.0, TrackedBlocks::None);
        assert_eq!(load.prefill_tokens(0, 1e9), 100);
        // Freeing a non-anchor keeps the anchor and its start.
        load.free(4, 300.0);
        assert_eq!(load.prefill_tokens(0, 1e9), 80);
    }

    #[test]
    fn without_the_aic_model_prefill_load_is_static() {
        let mut load = ActiveLoad::new(1);
        load.add(0, 0, 1000, Some(1.0), 0.0, TrackedBlocks::None);
        assert_eq!(load.prefill_tokens(0, 1e6), 1000);
    }

    proptest::proptest! {
        /// A base's load is the multiset of its holders' counts: its active blocks are their
        /// largest, and it is empty once every holder released.
        #[test]
        fn base_load_is_a_multiset_of_counts(
            ops in proptest::collection::vec((proptest::prelude::any::<bool>(), 0u32..6), 0..200),
        ) {
            let mut base = BaseLoad::default();
            let mut model: Vec<u32> = Vec::new();
            for (add, count) in ops {
                if add || model.is_empty() {
                    base.add(count);
                    model.push(count);
                } else {
                    // Release a count some holder has.
                    let count = model.swap_remove(count as usize % model.len());
                    proptest::prop_assert_eq!(base.remove(count), !model.is_empty());
                }
                if !model.is_empty() {
                    proptest::prop_assert_eq!(base.active, model.iter().copied().max().unwrap());
                }
            }
        }

        /// Under the AIC model a target's prefill load never grows as time passes without
        /// events, never exceeds the static sum, and reaches the static sum minus the anchor
        /// once the anchor's predicted duration has elapsed.
        #[test]
        fn decayed_load_is_monotone_and_bounded(
            prefills in proptest::collection::vec((1usize..5000, 0.0f64..200.0), 1..6),
            times in proptest::collection::vec(0.0f64..500.0, 1..8),
        ) {
            let mut load = ActiveLoad::with_prefill_decay(1);
            let mut plain = ActiveLoad::new(1);
            for (id, &(tokens, expected)) in prefills.iter().enumerate() {
                load.add(id, 0, tokens, Some(expected), 0.0, TrackedBlocks::None);
                plain.add(id, 0, tokens, Some(expected), 0.0, TrackedBlocks::None);
            }
            let full = plain.prefill_tokens(0, 0.0);
            let mut times = times;
            times.sort_by(f64::total_cmp);
            let mut last = full;
            for t in times {
                let now = load.prefill_tokens(0, t);
                proptest::prop_assert!(now <= last && now <= full);
                last = now;
            }
            let (anchor_tokens, anchor_ms) = prefills[0];
            proptest::prop_assert_eq!(load.prefill_tokens(0, anchor_ms + 1.0), full - anchor_tokens);
        }
    }
}
