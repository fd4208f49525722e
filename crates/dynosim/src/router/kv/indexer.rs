//! What the router knows of each target's prefix cache, fed only by the engines' KV events.
//!
//! The reference keeps a radix tree over per-block content hashes; dynosim's block identity
//! already covers the block's whole prefix (see [`crate::tokens`]), so a set of visible blocks per
//! target answers the same question: how many leading blocks of a prompt the target has cached.
//! The walk stops at the first miss.
//!
//! Two event shapes feed it. A vLLM block pool reports single blocks by key and evicts any of
//! them, so those targets keep a set of keys. An SGLang radix tree reports runs of blocks sharing
//! a base, and always holds the whole prefix of what it holds: of each base it holds a leading
//! range of blocks, so those targets keep one range per base and answer a prompt run by run.
//!
//! A vLLM block pool already indexes its cached blocks by key, and its events are exactly the
//! changes of that index. So a router over such engines need not mirror them: after
//! [`CacheIndex::answer_keys_from_engines`], each target's per-block questions go to its engine
//! through [`PublishedKeys`], which answers as of the events published to the router so far
//! (the same set the mirror would hold, without a second table to update millions of times).
//! A target the router forgets ([`CacheIndex::clear`]) is mirrored again from then on, empty.

use std::collections::hash_map::Entry;

use super::keys::KeyTable;
use crate::engine::kv::{FastMap, KvEvent};
use crate::tokens::{block_key, BlockHashes, BlockRun};

/// How many keys ahead a walk over a prompt prefetches their buckets.
const PREFETCH_AHEAD: usize = 4;

/// How many events ahead [`CacheIndex::apply`] prefetches their buckets.
const EVENT_PREFETCH_AHEAD: usize = 16;

/// The key a per-block event names.
fn event_key(event: &KvEvent) -> Option<u64> {
    match *event {
        KvEvent::Stored { hash } | KvEvent::Removed { hash } => Some(hash),
        KvEvent::StoredRun { .. } | KvEvent::RemovedRun { .. } => None,
    }
}

/// The targets' engines' own answer to "was this block cached, as far as the events published
/// so far say?" (for targets whose cache the router does not mirror).
pub trait PublishedKeys {
    /// Whether block `key` was cache-visible on `target` as of its last published events.
    fn contains(&self, target: usize, key: u64) -> bool;
    /// Starts loading what [`PublishedKeys::contains`] will read for `key`. Changes nothing.
    fn prefetch(&self, target: usize, key: u64);
}

/// No engine answers: every target is mirrored (the router's own tests).
#[cfg(test)]
pub struct MirrorOnly;

#[cfg(test)]
impl PublishedKeys for MirrorOnly {
    fn contains(&self, _target: usize, _key: u64) -> bool {
        unreachable!("no target's engine answers")
    }
    fn prefetch(&self, _target: usize, _key: u64) {}
}

#[derive(Debug, Default)]
struct TargetCache {
    /// The engine answers per-block questions ([`PublishedKeys`]); per-block events are not
    /// mirrored.
    engine_answers: bool,
    /// Keys of cached blocks, from per-block events (a table whose buckets can be prefetched
    /// while the events before are applied).
    keys: KeyTable,
    /// Per base, the cached blocks `first..end` (from run events).
    ranges: FastMap<u64, (usize, usize)>,
    /// Blocks in `ranges`.
    range_blocks: usize,
}

/// The keys of a prompt's blocks, computed only as far as a walk asks for them: a prompt's
/// overlap with any target is usually a small part of it, and a key costs a hash.
struct PromptKeys<'a> {
    runs: &'a [BlockRun],
    /// The run holding the next block to key, and that block's index.
    run: usize,
    next: usize,
    /// The block index where `run` ends.
    run_end: usize,
    /// Keys of blocks `0..keys.len()`.
    keys: &'a mut Vec<u64>,
}

impl<'a> PromptKeys<'a> {
    fn new(hashes: &'a BlockHashes, keys: &'a mut Vec<u64>) -> Self {
        keys.clear();
        Self {
            runs: hashes.runs(),
            run: 0,
            next: 0,
            run_end: hashes.runs().first().map_or(0, |run| run.count as usize),
            keys,
        }
    }

    /// The key of block `i`, or `None` past the prompt's last block.
    #[inline]
    fn get(&mut self, i: usize) -> Option<u64> {
        while self.keys.len() <= i {
            while self.next == self.run_end {
                self.run += 1;
                self.run_end += self.runs.get(self.run)?.count as usize;
            }
            self.keys
                .push(block_key(self.runs[self.run].base, self.next));
            self.next += 1;
        }
        Some(self.keys[i])
    }
}

/// Leading blocks of the prompt of `keys` that `contains`, prefetching a few keys ahead.
#[inline(always)]
fn leading_hits(
    keys: &mut PromptKeys<'_>,
    contains: impl Fn(u64) -> bool,
    prefetch: impl Fn(u64),
) -> usize {
    let mut overlap = 0;
    loop {
        if let Some(ahead) = keys.get(overlap + PREFETCH_AHEAD) {
            prefetch(ahead);
        }
        match keys.get(overlap) {
            Some(key) if contains(key) => overlap += 1,
            _ => return overlap,
        }
    }
}

impl TargetCache {
    fn overlap_by_keys(&self, keys: &mut PromptKeys<'_>) -> usize {
        leading_hits(
            keys,
            |key| self.keys.contains(key),
            |key| self.keys.prefetch(key),
        )
    }

    fn overlap_by_ranges(&self, hashes: &BlockHashes) -> usize {
        let mut overlap = 0;
        for run in hashes.runs() {
            let count = run.count as usize;
            let cached = match self.ranges.get(&run.base) {
                // The prompt's blocks of this base start where the cached ones do.
                Some(&(first, end)) if first == overlap => end - first,
                _ => 0,
            };
            overlap += cached.min(count);
            if cached < count {
                break;
            }
        }
        overlap
    }
}

/// Cache-visible blocks per (worker, rank) target.
#[derive(Debug)]
pub struct CacheIndex {
    targets: Vec<TargetCache>,
    /// Targets added from now on are answered by their engines.
    engines_answer: bool,
    /// Scratch: the keys of the prompt being measured, as far as they were needed.
    keys: Vec<u64>,
}

impl CacheIndex {
    pub fn new(targets: usize) -> Self {
        Self {
            targets: (0..targets).map(|_| TargetCache::default()).collect(),
            engines_answer: false,
            keys: Vec::new(),
        }
    }

    /// Every target's engine (and every later target's) answers per-block questions itself
    /// through the [`PublishedKeys`] given to [`CacheIndex::overlaps`]; its per-block events
    /// are not mirrored. For engines that publish per-block events only.
    pub fn answer_keys_from_engines(&mut self) {
        self.engines_answer = true;
        for cached in &mut self.targets {
            cached.engine_answers = true;
        }
    }

    pub fn apply(&mut self, target: usize, events: &[KvEvent]) {
        let cached = &mut self.targets[target];
        if cached.engine_answers {
            debug_assert!(
                events.iter().all(|event| event_key(event).is_some()),
                "an engine that answers per-block questions publishes per-block events only"
            );
            return;
        }
        for (i, event) in events.iter().enumerate() {
            if let Some(ahead) = events.get(i + EVENT_PREFETCH_AHEAD).and_then(event_key) {
                cached.keys.prefetch(ahead);
            }
            match *event {
                KvEvent::Stored { hash } => {
                    cached.keys.insert(hash);
                }
                KvEvent::Removed { hash } => {
                    cached.keys.remove(hash);
                }
                KvEvent::StoredRun { base, first, count } => {
                    let range = cached.ranges.entry(base).or_insert((first, first));
                    debug_assert_eq!(range.1, first, "a prefix tree extends a base's range");
                    range.1 = first + count;
                    cached.range_blocks += count;
                }
                KvEvent::RemovedRun { base, first, count } => {
                    // One probe finds the range and, once it is empty, removes it.
                    let Entry::Occupied(mut entry) = cached.ranges.entry(base) else {
                        debug_assert!(false, "removing unknown blocks");
                        continue;
                    };
                    let range = entry.get_mut();
                    debug_assert_eq!(range.1, first + count, "a prefix tree trims a base's range");
                    range.1 = first;
                    cached.range_blocks -= count;
                    if range.1 <= range.0 {
                        entry.remove();
                    }
                }
            }
        }
    }

    /// Leading blocks of `hashes` cached on `target` (a mirrored one).
    pub fn overlap(&self, target: usize, hashes: &BlockHashes) -> usize {
        let cached = &self.targets[target];
        debug_assert!(!cached.engine_answers, "the engine answers for this target");
        if cached.keys.is_empty() {
            cached.overlap_by_ranges(hashes)
        } else {
            cached.overlap_by_keys(&mut PromptKeys::new(hashes, &mut Vec::new()))
        }
    }

    /// [`CacheIndex::overlap`] for every target, `engines` answering for the targets whose
    /// engines do.
    pub fn overlaps(&mut self, hashes: &BlockHashes, engines: &impl PublishedKeys) -> Vec<u32> {
        let mut keys = PromptKeys::new(hashes, &mut self.keys);
        self.targets
            .iter()
            .enumerate()
            .map(|(target, cached)| {
                let overlap = if cached.engine_answers {
                    leading_hits(
                        &mut keys,
                        |key| engines.contains(target, key),
                        |key| engines.prefetch(target, key),
                    )
                } else if cached.keys.is_empty() {
                    cached.overlap_by_ranges(hashes)
                } else {
                    cached.overlap_by_keys(&mut keys)
                };
                overlap as u32
            })
            .collect()
    }

    /// Targets up to `count` exist (new ones cache nothing yet).
    pub fn grow(&mut self, count: usize) {
        let engine_answers = self.engines_answer;
        if count > self.targets.len() {
            self.targets.resize_with(count, || TargetCache {
                engine_answers,
                ..TargetCache::default()
            });
        }
    }

    /// `target` is gone: it caches nothing any more (as far as the router knows: what its
    /// engine publishes from now on is mirrored, from empty).
    pub fn clear(&mut self, target: usize) {
        self.targets[target] = TargetCache::default();
    }

    pub fn cached_blocks(&self, target: usize) -> usize {
        let cached = &self.targets[target];
        cached.keys.len() + cached.range_blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::TokenSeq;

    fn prompt(tokens: &[u64]) -> TokenSeq {
        let mut seq = TokenSeq::new();
        for &t in tokens {
            seq.push_run(t, 4);
        }
        seq
    }

    #[test]
    fn overlap_is_the_leading_chain() {
        let mut index = CacheIndex::new(2);
        let keys = prompt(&[1, 2, 3, 4]).block_keys(4);
        index.apply(
            0,
            &[
                KvEvent::Stored { hash: keys[0] },
                KvEvent::Stored { hash: keys[1] },
                KvEvent::Stored { hash: keys[3] },
            ],
        );
        let hashes = prompt(&[1, 2, 3, 4]).block_hashes(4);
        assert_eq!(index.overlaps(&hashes, &MirrorOnly), [2, 0]);
        index.apply(0, &[KvEvent::Removed { hash: keys[0] }]);
        assert_eq!(index.overlaps(&hashes, &MirrorOnly), [0, 0]);
        assert_eq!(index.cached_blocks(0), 2);
    }

    #[test]
    fn prompt_keys_are_the_block_keys_in_order() {
        for tokens in [&[][..], &[5], &[1, 1, 2, 3, 3, 3, 1]] {
            let hashes = prompt(tokens).block_hashes(4);
            let expected: Vec<u64> = hashes.keys().collect();
            let mut scratch = vec![7];
            let mut keys = PromptKeys::new(&hashes, &mut scratch);
            // Asked ahead first, as a prefetching walk does, then past the end.
            assert_eq!(keys.get(2), expected.get(2).copied());
            for (i, &key) in expected.iter().enumerate() {
                assert_eq!(keys.get(i), Some(key));
            }
            assert_eq!(keys.get(expected.len()), None);
            assert_eq!(keys.get(expected.len() + 3), None);
        }
    }

    #[test]
    fn runs_are_ranges_per_base() {
        let mut index = CacheIndex::new(2);
        // Three runs: token 1 (blocks 0..3), token 2 (block 3), token 1 again (blocks 4..6).
        let cached = prompt(&[1, 1, 1, 2, 1, 1]).block_hashes(4);
        let runs = cached.runs();
        assert_eq!(runs.len(), 3);
        let stored = |run: usize, first: usize, count: usize| KvEvent::StoredRun {
            base: runs[run].base,
            first,
            count,
        };
        index.apply(
            1,
            &[
                stored(0, 0, 2),
                stored(0, 2, 1),
                stored(1, 3, 1),
                stored(2, 4, 1),
            ],
        );
        assert_eq!(index.cached_blocks(1), 5);
        assert_eq!(index.overlaps(&cached, &MirrorOnly), [0, 5]);
        assert_eq!(
            index.overlaps(&prompt(&[1, 1]).block_hashes(4), &MirrorOnly),
            [0, 2]
        );
        assert_eq!(
            index.overlaps(&prompt(&[1, 1, 1, 1]).block_hashes(4), &MirrorOnly),
            [0, 3]
        );
        assert_eq!(
            index.overlaps(&prompt(&[1, 1, 1, 2, 2]).block_hashes(4), &MirrorOnly),
            [0, 4]
        );
        index.apply(
            1,
            &[
                KvEvent::RemovedRun {
                    base: runs[2].base,
                    first: 4,
                    count: 1,
                },
                KvEvent::RemovedRun {
                    base: runs[1].base,
                    first: 3,
                    count: 1,
                },
                KvEvent::RemovedRun {
                    base: runs[0].base,
                    first: 1,
                    count: 2,
                },
            ],
        );
        assert_eq!(index.cached_blocks(1), 1);
        assert_eq!(index.overlaps(&cached, &MirrorOnly), [0, 1]);
    }
}
