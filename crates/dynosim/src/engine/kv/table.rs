//! Open-addressed tables keyed by block keys, for the block pool's index. (The KV router keeps
//! its own key sets, in `router::kv`.)
//!
//! It is probed once per block on the hottest paths of a run (an eviction, a block becoming
//! cache-visible), and each probe is a cache miss on a table larger than the L1/L2
//! share a worker gets. Its callers know which keys they will probe next (the next LRU victim,
//! the next block of a prompt), so the table lets them prefetch a key's
//! bucket ahead of time: [`CopyIndex::prefetch`]. A key's bucket follows
//! from the key alone (`hashbrown`'s tables expose no bucket address to prefetch), and an entry
//! is one 8-byte word with its tag beside the value, so a probe touches one line, not a control
//! group and a separate data slot.
//!
//! Linear probing, at most a quarter full (probe runs and backward shifts stay short: the
//! table costs 32 to 64 bytes a key), deletion by backward shift (no tombstones, so a long run
//! of inserts and removes never degrades probing). Block keys are already well-mixed 64-bit
//! hashes: bits 32.. pick the bucket. Nothing iterates these tables, so their layout is never
//! observable.

/// Hints the CPU to bring the cache line holding `ptr` into L1. Changes nothing else.
#[inline(always)]
pub(crate) fn prefetch<T>(ptr: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults and reads nothing architecturally,
    // whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(ptr.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// The bucket bits of a key: its upper half (the lower half keeps the whole key apart from its
/// neighbours' when a [`CopyIndex`] compares tags).
#[inline(always)]
fn upper(key: u64) -> u32 {
    (key >> 32) as u32
}

/// The table holds at most one entry per this many buckets.
const SPREAD: usize = 4;

/// The smallest table holding `len` entries at most a quarter full.
fn buckets_for(len: usize) -> usize {
    (len.max(4) * SPREAD).next_power_of_two()
}

/// Moves the entries after the emptied bucket `hole` back over it where their probe sequence
/// allows, so that every entry stays reachable from its home bucket without tombstones.
fn close_gap<E: Copy + PartialEq>(
    entries: &mut [E],
    mut hole: usize,
    empty: E,
    home: impl Fn(E) -> usize,
) {
    let mask = entries.len() - 1;
    let mut next = (hole + 1) & mask;
    loop {
        let entry = entries[next];
        if entry == empty {
            break;
        }
        // The entry may fill the hole if the hole lies on its probe path: no farther from its
        // home bucket than the entry itself is.
        let home = home(entry);
        if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
            entries[hole] = entry;
            hole = next;
        }
        next = (next + 1) & mask;
    }
    entries[hole] = empty;
}

/// Copy id of the block pool; `u32::MAX` marks an empty bucket.
type Id = u32;
const NO_ID: Id = Id::MAX;
const EMPTY_ENTRY: u64 = u64::MAX;

/// How many buckets past a key's home bucket [`CopyIndex::prefetch_tag`] also covers.
const PROBE_LOOKAHEAD: usize = 3;

/// Maps a block key to one copy id (the pool's oldest copy of that key). An entry holds the
/// key's upper half as a tag beside the id; the key itself lives with the copy, so a tag match
/// is confirmed by the caller (`is_key`), and finding an entry by its id reads no copy at all.
#[derive(Debug, Default)]
pub(crate) struct CopyIndex {
    /// `(upper(key) << 32) | id`, or [`EMPTY_ENTRY`]. Empty (no allocation) or a power of two.
    entries: Vec<u64>,
    len: usize,
}

/// Where a key's entry is, for [`CopyIndex::set_at`] and [`CopyIndex::remove_at`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Position(usize);

impl CopyIndex {
    #[inline(always)]
    fn mask(&self) -> usize {
        self.entries.len().wrapping_sub(1)
    }

    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        upper(key) as usize & self.mask()
    }

    #[inline(always)]
    fn entry(key: u64, id: Id) -> u64 {
        (u64::from(upper(key)) << 32) | u64::from(id)
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Starts loading the bucket where `key` is looked for.
    #[inline(always)]
    pub fn prefetch(&self, key: u64) {
        self.prefetch_tag(upper(key));
    }

    /// Starts loading the bucket where a key whose upper half is `tag` is looked for, and the
    /// line after it when the bucket is among the last [`PROBE_LOOKAHEAD`] of its line: a
    /// probe, an insert or a removal's backward shift usually reads a few buckets past the
    /// home one.
    #[inline(always)]
    pub fn prefetch_tag(&self, tag: u32) {
        if !self.entries.is_empty() {
            let home = self
                .entries
                .as_ptr()
                .wrapping_add(tag as usize & self.mask());
            prefetch(home);
            // Within the home line (a second hint to the same line costs next to nothing) or
            // the first bucket of the next one.
            prefetch(home.wrapping_add(PROBE_LOOKAHEAD));
        }
    }

    /// The id indexed under `key`; `is_key(id)` tells whether copy `id` holds `key`.
    #[inline]
    pub fn find(&self, key: u64, is_key: impl Fn(Id) -> bool) -> Option<Id> {
        if self.entries.is_empty() {
            return None;
        }
        let mask = self.mask();
        let tag = upper(key);
        let mut at = self.home(key);
        loop {
            let entry = self.entries[at];
            if entry == EMPTY_ENTRY {
                return None;
            }
            let id = entry as Id;
            if (entry >> 32) as u32 == tag && is_key(id) {
                return Some(id);
            }
            at = (at + 1) & mask;
        }
    }

    /// The id indexed under `key` if there is one (`Err`), or indexes `id` under it (`Ok`):
    /// one probe sequence for both.
    #[inline]
    pub fn find_or_insert(
        &mut self,
        key: u64,
        id: Id,
        is_key: impl Fn(Id) -> bool,
    ) -> Result<(), Id> {
        debug_assert_ne!(id, NO_ID);
        if (self.len + 1) * SPREAD > self.entries.len() {
            self.grow();
        }
        let mask = self.mask();
        let tag = upper(key);
        let mut at = self.home(key);
        loop {
            let entry = self.entries[at];
            if entry == EMPTY_ENTRY {
                self.entries[at] = Self::entry(key, id);
                self.len += 1;
                return Ok(());
            }
            let found = entry as Id;
            if (entry >> 32) as u32 == tag && is_key(found) {
                return Err(found);
            }
            at = (at + 1) & mask;
        }
    }

    /// Where copy `id`, indexed under `key`, is. Reads no copy.
    #[inline]
    pub fn position(&self, key: u64, id: Id) -> Position {
        let mask = self.mask();
        let mut at = self.home(key);
        loop {
            let entry = self.entries[at];
            debug_assert_ne!(entry, EMPTY_ENTRY, "copy {id} is not indexed");
            if entry as Id == id {
                return Position(at);
            }
            at = (at + 1) & mask;
        }
    }

    /// Indexes `id` instead of the entry at `position` (under the same key).
    #[inline]
    pub fn set_at(&mut self, position: Position, id: Id) {
        let entry = &mut self.entries[position.0];
        *entry = (*entry & !u64::from(NO_ID)) | u64::from(id);
    }

    /// Removes the entry at `position`.
    #[inline]
    pub fn remove_at(&mut self, position: Position) {
        let mask = self.mask();
        close_gap(&mut self.entries, position.0, EMPTY_ENTRY, |entry| {
            (entry >> 32) as usize & mask
        });
        self.len -= 1;
    }

    fn grow(&mut self) {
        let old = std::mem::replace(
            &mut self.entries,
            vec![EMPTY_ENTRY; buckets_for(self.len + 1)],
        );
        let mask = self.mask();
        for entry in old.into_iter().filter(|&e| e != EMPTY_ENTRY) {
            let mut at = (entry >> 32) as usize & mask;
            while self.entries[at] != EMPTY_ENTRY {
                at = (at + 1) & mask;
            }
            self.entries[at] = entry;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Keys drawn from a small pool so that inserts and removes hit each other, with upper
    /// halves crowded into few buckets so that probe runs wrap and shift.
    fn key() -> impl Strategy<Value = u64> {
        (0u64..6, 0u64..40).prop_map(|(high, low)| (high << 32) | (low * 0x9E37) | (high & 1))
    }

    proptest! {
        #[test]
        fn copy_index_behaves_as_a_map(ops in prop::collection::vec((0u8..3, key()), 0..600)) {
            // The model: key -> id; ids are handed out fresh, and "copies" remember their key.
            let mut index = CopyIndex::default();
            let mut model: HashMap<u64, Id> = HashMap::new();
            let mut key_of: Vec<u64> = Vec::new();
            for (op, key) in ops {
                match op {
                    0 => {
                        let id = key_of.len() as Id;
                        key_of.push(key);
                        let got = index.find_or_insert(key, id, |id| key_of[id as usize] == key);
                        match model.get(&key) {
                            Some(&old) => prop_assert_eq!(got, Err(old)),
                            None => {
                                prop_assert_eq!(got, Ok(()));
                                model.insert(key, id);
                            }
                        }
                    }
                    1 => {
                        if let Some(&old) = model.get(&key) {
                            let id = key_of.len() as Id;
                            key_of.push(key);
                            let at = index.position(key, old);
                            index.set_at(at, id);
                            model.insert(key, id);
                        }
                    }
                    _ => {
                        if let Some(old) = model.remove(&key) {
                            let at = index.position(key, old);
                            index.remove_at(at);
                        }
                    }
                }
                prop_assert_eq!(index.len(), model.len());
            }
            for (&key, &id) in &model {
                prop_assert_eq!(index.find(key, |id| key_of[id as usize] == key), Some(id));
            }
            prop_assert_eq!(index.find(u64::MAX - 1, |_| true), None);
        }
    }
}
