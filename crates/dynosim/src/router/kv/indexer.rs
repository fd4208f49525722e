//! What the router knows of each target's prefix cache, fed only by the engines' KV events.
//!
//! The reference keeps a radix tree over per-block content hashes; dynosim's block identity is
//! already a chained hash (a block's hash covers its whole prefix), so a set of visible hashes
//! per target answers the same question: how many leading blocks of a prompt form a chain the
//! target has cached. The walk stops at the first miss.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use crate::engine::kv::{KvEvent, PassThroughHasher};

type HashSetFast = HashSet<u64, BuildHasherDefault<PassThroughHasher>>;

/// Cache-visible block hashes per (worker, rank) target.
#[derive(Debug)]
pub struct CacheIndex {
    targets: Vec<HashSetFast>,
}

impl CacheIndex {
    pub fn new(targets: usize) -> Self {
        Self {
            targets: (0..targets).map(|_| HashSetFast::default()).collect(),
        }
    }

    pub fn apply(&mut self, target: usize, events: &[KvEvent]) {
        let cached = &mut self.targets[target];
        for event in events {
            match *event {
                KvEvent::Stored { hash } => {
                    cached.insert(hash);
                }
                KvEvent::Removed { hash } => {
                    cached.remove(&hash);
                }
            }
        }
    }

    /// Leading blocks of `hashes` cached on `target`.
    pub fn overlap(&self, target: usize, hashes: &[u64]) -> usize {
        let cached = &self.targets[target];
        hashes.iter().take_while(|h| cached.contains(h)).count()
    }

    /// [`CacheIndex::overlap`] for every target.
    pub fn overlaps(&self, hashes: &[u64]) -> Vec<u32> {
        (0..self.targets.len())
            .map(|target| self.overlap(target, hashes) as u32)
            .collect()
    }

    pub fn cached_blocks(&self, target: usize) -> usize {
        self.targets[target].len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_is_the_leading_chain() {
        let mut index = CacheIndex::new(2);
        index.apply(
            0,
            &[
                KvEvent::Stored { hash: 1 },
                KvEvent::Stored { hash: 2 },
                KvEvent::Stored { hash: 4 },
            ],
        );
        assert_eq!(index.overlaps(&[1, 2, 3, 4]), [2, 0]);
        index.apply(0, &[KvEvent::Removed { hash: 1 }]);
        assert_eq!(index.overlaps(&[1, 2, 3, 4]), [0, 0]);
        assert_eq!(index.cached_blocks(0), 2);
    }
}
