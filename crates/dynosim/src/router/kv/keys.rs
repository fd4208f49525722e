//! The set of block keys a vLLM-style target has cached, as the router's index keeps it.
//!
//! Every KV event of such a target inserts or removes one key, and a pool's LRU turns its
//! whole cache over many times in a run, so this table sees millions of inserts and removes
//! for a few queries. It is built for that mix: linear probing kept at most a quarter full, so
//! that probe runs are short and a removal (backward shift, no tombstones) moves few entries;
//! its bucket follows from the key's top bits alone, so a caller walking a batch of events can
//! prefetch the bucket of a key it will touch a few events later. Block keys are well-mixed
//! 64-bit hashes, so their top bits serve as the bucket index as they are.
//!
//! Nothing iterates the table, so its layout is never observable.

/// Hints the CPU to bring the cache line holding `ptr` into L1. Changes nothing else.
#[inline(always)]
fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults and reads nothing architecturally,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// Empty buckets hold 0; key 0 itself is kept aside.
const EMPTY: u64 = 0;

/// The fewest buckets a non-empty table has.
const MIN_BUCKETS: usize = 64;

/// A set of block keys.
#[derive(Debug)]
pub(super) struct KeyTable {
    /// Keys, or [`EMPTY`]. Empty (no allocation) or a power of two of at least
    /// [`MIN_BUCKETS`].
    buckets: Vec<u64>,
    /// Keys in `buckets`.
    len: usize,
    /// `64 - log2(buckets.len())`: a key's home bucket is `key >> shift`.
    shift: u32,
    has_zero: bool,
}

impl Default for KeyTable {
    fn default() -> Self {
        Self {
            buckets: Vec::new(),
            len: 0,
            shift: 64,
            has_zero: false,
        }
    }
}

impl KeyTable {
    pub fn len(&self) -> usize {
        self.len + usize::from(self.has_zero)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline(always)]
    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }

    /// `key`'s home bucket (table not empty).
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        (key >> self.shift) as usize
    }

    /// Starts loading the bucket where `key` is looked for.
    #[inline(always)]
    pub fn prefetch(&self, key: u64) {
        if !self.buckets.is_empty() {
            prefetch(self.buckets.as_ptr().wrapping_add(self.home(key)));
        }
    }

    /// The bucket holding `key`, or the empty bucket ending its probe run. (`key` ≠ 0, table
    /// not empty.)
    #[inline(always)]
    fn probe(&self, key: u64) -> usize {
        let mask = self.mask();
        let mut at = self.home(key);
        loop {
            let entry = self.buckets[at];
            if entry == key || entry == EMPTY {
                return at;
            }
            at = (at + 1) & mask;
        }
    }

    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        if key == EMPTY {
            return self.has_zero;
        }
        !self.buckets.is_empty() && self.buckets[self.probe(key)] == key
    }

    /// Adds `key`; false if it was there already.
    #[inline]
    pub fn insert(&mut self, key: u64) -> bool {
        if key == EMPTY {
            return !std::mem::replace(&mut self.has_zero, true);
        }
        if (self.len + 1) * 4 > self.buckets.len() {
            self.grow();
        }
        let at = self.probe(key);
        if self.buckets[at] == key {
            return false;
        }
        self.buckets[at] = key;
        self.len += 1;
        true
    }

    /// Removes `key`; false if it was not there.
    #[inline]
    pub fn remove(&mut self, key: u64) -> bool {
        if key == EMPTY {
            return std::mem::replace(&mut self.has_zero, false);
        }
        if self.buckets.is_empty() {
            return false;
        }
        let mask = self.mask();
        let mut hole = self.probe(key);
        if self.buckets[hole] != key {
            return false;
        }
        // Move the entries after the hole back over it where their probe runs allow, so that
        // every entry stays reachable from its home bucket.
        let mut next = (hole + 1) & mask;
        loop {
            let entry = self.buckets[next];
            if entry == EMPTY {
                break;
            }
            // The entry may fill the hole if the hole lies on its probe run: no farther from
            // its home bucket than the entry itself is.
            let home = self.home(entry);
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                self.buckets[hole] = entry;
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.buckets[hole] = EMPTY;
        self.len -= 1;
        true
    }

    fn grow(&mut self) {
        let buckets = ((self.len + 1) * 4).next_power_of_two().max(MIN_BUCKETS);
        let old = std::mem::replace(&mut self.buckets, vec![EMPTY; buckets]);
        self.shift = 64 - buckets.trailing_zeros();
        for key in old.into_iter().filter(|&key| key != EMPTY) {
            let at = self.probe(key);
            self.buckets[at] = key;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// Keys drawn from a small pool so that inserts and removes hit each other, with top bits
    /// crowded into few buckets so that probe runs wrap and shift (and key 0 among them).
    fn key() -> impl Strategy<Value = u64> {
        (0u64..6, 0u64..40).prop_map(|(high, low)| {
            let top = [0, 1, 2, u64::MAX >> 58, u64::MAX >> 59, 7][high as usize];
            (top << 58) | (low * 0x9E37)
        })
    }

    proptest! {
        #[test]
        fn key_table_behaves_as_a_set(ops in prop::collection::vec((any::<bool>(), key()), 0..600)) {
            let mut table = KeyTable::default();
            let mut model = HashSet::new();
            for (add, key) in ops {
                if add {
                    prop_assert_eq!(table.insert(key), model.insert(key));
                } else {
                    prop_assert_eq!(table.remove(key), model.remove(&key));
                }
                prop_assert_eq!(table.len(), model.len());
            }
            for high in 0..6u64 {
                for low in 0..40u64 {
                    let top = [0, 1, 2, u64::MAX >> 58, u64::MAX >> 59, 7][high as usize];
                    let key = (top << 58) | (low * 0x9E37);
                    prop_assert_eq!(table.contains(key), model.contains(&key));
                }
            }
        }
    }
}
