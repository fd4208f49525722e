//! KV cache models.
//!
//! [`BlockPool`] is the physical block pool of the vLLM / TRT-LLM flavours: a fixed number of
//! block slots, each either free, private to one request, or cached under a chained block hash.
//! Several physical copies may hold the same hash (two requests that computed the same block
//! independently); prefix lookups always consult the oldest resident copy. Cached copies that no
//! request references sit in an LRU list and are evicted oldest first when fresh blocks are
//! needed. Every operation is O(1) apart from evictions (O(1) each) and the per-block work of an
//! allocation.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub mod radix;

/// Hasher for keys that are already well-mixed 64-bit hashes: passes them through unchanged.
#[derive(Default, Clone, Copy)]
pub struct PassThroughHasher(u64);

impl Hasher for PassThroughHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only used for non-u64 keys; fold bytes FNV-style so it stays correct.
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
    fn write_usize(&mut self, value: usize) {
        // Dense indices are not mixed; spread them so the table's low bits vary.
        self.0 = (value as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// `HashMap` keyed by pre-mixed hashes (or dense ids).
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<PassThroughHasher>>;

/// Index of a physical block copy inside a [`BlockPool`].
pub type CopyId = u32;

const NIL: CopyId = CopyId::MAX;

/// A change of the set of cache-visible blocks, for a KV-aware router.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// The first resident copy of the block keyed `hash` became cache-visible.
    Stored { hash: u64 },
    /// The last resident copy of the block keyed `hash` was evicted.
    Removed { hash: u64 },
    /// Blocks `first..first + count` of the run of `base` (see [`crate::tokens`]) entered a
    /// prefix tree (SGLang). A tree holds the whole prefix of every block it holds, so the
    /// blocks of one base it holds are always a leading range of that base's blocks.
    StoredRun {
        base: u64,
        first: usize,
        count: usize,
    },
    /// Blocks `first..first + count` of the run of `base` left a prefix tree (the last ones of
    /// that base it held).
    RemovedRun {
        base: u64,
        first: usize,
        count: usize,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CopyState {
    /// Slot not in use.
    Free,
    /// Owned by one request and never reusable (partial blocks, or caching disabled).
    Private,
    /// A full block owned by one request, reusable once its computation is scheduled.
    Pending { hash: u64 },
    /// Cache-visible under `hash`; in the LRU list iff `refs == 0 && pins == 0`.
    Cached { hash: u64, refs: u32, pins: u32 },
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    state: CopyState,
    lru_prev: CopyId,
    lru_next: CopyId,
    /// Links in the per-hash list of copies, oldest first.
    same_prev: CopyId,
    same_next: CopyId,
}

/// What [`BlockPool::finalize`] found in a request-owned slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finalized {
    /// A pending full block that is now cache-visible.
    NowCached,
    /// Already cache-visible (a reused prefix block or finalized earlier).
    AlreadyCached,
    /// A private (partial) block: nothing after it can be finalized.
    Private,
}

/// The result of a prefix lookup over a request's leading full-block hashes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixMatch {
    /// Leading blocks with a resident copy (active or inactive).
    pub blocks: usize,
    /// Of those, blocks whose oldest copy is referenced or pinned.
    pub active_blocks: usize,
}

/// Physical KV block pool with prefix caching and an inactive LRU.
#[derive(Debug)]
pub struct BlockPool {
    capacity: usize,
    slots: Vec<Slot>,
    free_slots: Vec<CopyId>,
    /// Slots not `Free`.
    occupied: usize,
    /// Hash -> (oldest copy, newest copy).
    by_hash: FastMap<u64, (CopyId, CopyId)>,
    lru_head: CopyId,
    lru_tail: CopyId,
    inactive: usize,
    caching: bool,
    events: Option<Vec<KvEvent>>,
    /// Scratch for prefix copies during an allocation.
    scratch: Vec<CopyId>,
}

impl BlockPool {
    /// A pool of `capacity` blocks. With `caching` off, nothing is ever cache-visible.
    pub fn new(capacity: usize, caching: bool) -> Self {
        Self {
            capacity,
            slots: Vec::new(),
            free_slots: Vec::new(),
            occupied: 0,
            by_hash: FastMap::default(),
            lru_head: NIL,
            lru_tail: NIL,
            inactive: 0,
            caching,
            events: None,
            scratch: Vec::new(),
        }
    }

    /// Starts recording [`KvEvent`]s (drained with [`BlockPool::drain_events`]).
    pub fn record_events(&mut self) {
        if self.events.is_none() {
            self.events = Some(Vec::new());
        }
    }

    pub fn drain_events(&mut self) -> Vec<KvEvent> {
        self.events.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Replaces the contents of `out` with the recorded events (keeping both allocations).
    pub fn drain_events_into(&mut self, out: &mut Vec<KvEvent>) {
        out.clear();
        if let Some(events) = &mut self.events {
            out.append(events);
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn caching(&self) -> bool {
        self.caching
    }

    /// Blocks that are resident and not inactive-cached (what the decode model calls "active").
    pub fn num_active(&self) -> usize {
        self.occupied - self.inactive
    }

    pub fn num_inactive(&self) -> usize {
        self.inactive
    }

    /// Slots that hold nothing at all.
    pub fn num_free(&self) -> usize {
        self.capacity - self.occupied
    }

    /// Whether `hash` has a resident copy, and if so whether its oldest copy is in use.
    pub fn lookup(&self, hash: u64) -> Option<bool> {
        let &(first, _) = self.by_hash.get(&hash)?;
        match self.slots[first as usize].state {
            CopyState::Cached { refs, pins, .. } => Some(refs > 0 || pins > 0),
            _ => unreachable!("hash index points at an uncached slot"),
        }
    }

    /// Walks `hashes` from the start while each has a resident copy.
    pub fn match_prefix(&self, hashes: &[u64]) -> PrefixMatch {
        let mut found = PrefixMatch::default();
        if !self.caching {
            return found;
        }
        for hash in hashes {
            match self.lookup(*hash) {
                Some(active) => {
                    found.blocks += 1;
                    found.active_blocks += usize::from(active);
                }
                None => break,
            }
        }
        found
    }

    /// Atomically takes a reference on the oldest copy of each `prefix` hash (all must be
    /// resident) and allocates `fresh` new copies, evicting inactive blocks as needed. Fresh copy
    /// `i` is pending under `pending_hash(i)` when that is `Some` and caching is on, private
    /// otherwise. The copies are appended to `out` in order (prefix first). Returns false, with
    /// nothing changed, when the pool cannot supply the fresh blocks.
    pub fn allocate(
        &mut self,
        prefix: &[u64],
        fresh: usize,
        mut pending_hash: impl FnMut(usize) -> Option<u64>,
        out: &mut Vec<CopyId>,
    ) -> bool {
        let mut prefix_ids = std::mem::take(&mut self.scratch);
        prefix_ids.clear();
        for hash in prefix {
            let &(first, _) = self
                .by_hash
                .get(hash)
                .expect("a prefix hash vouched for by a lookup is resident");
            prefix_ids.push(first);
        }
        let needed_evictions = fresh.saturating_sub(self.num_free());
        if needed_evictions > 0 {
            let inactive_hits = prefix_ids
                .iter()
                .filter(|&&id| self.is_inactive(id))
                .count();
            if needed_evictions > self.inactive - inactive_hits {
                self.scratch = prefix_ids;
                return false;
            }
        }
        // Pin the prefix first so that the evictions below cannot take it.
        for &id in &prefix_ids {
            if self.is_inactive(id) {
                self.unlink_lru(id);
            }
            if let CopyState::Cached { pins, .. } = &mut self.slots[id as usize].state {
                *pins += 1;
            }
        }
        for _ in 0..needed_evictions {
            self.evict_oldest();
        }
        for &id in &prefix_ids {
            if let CopyState::Cached { refs, pins, .. } = &mut self.slots[id as usize].state {
                *pins -= 1;
                *refs += 1;
            }
            out.push(id);
        }
        for i in 0..fresh {
            let state = match pending_hash(i) {
                Some(hash) if self.caching => CopyState::Pending { hash },
                _ => CopyState::Private,
            };
            let id = self.take_slot(state);
            out.push(id);
        }
        self.scratch = prefix_ids;
        true
    }

    /// Makes a pending full block cache-visible (the scheduling decision that computes it has
    /// been made).
    pub fn finalize(&mut self, id: CopyId) -> Finalized {
        match self.slots[id as usize].state {
            CopyState::Pending { hash } => {
                self.cache(id, hash);
                Finalized::NowCached
            }
            CopyState::Cached { .. } => Finalized::AlreadyCached,
            CopyState::Private => Finalized::Private,
            CopyState::Free => unreachable!("finalizing a free slot"),
        }
    }

    /// Makes a private block that just became full and computed cache-visible under `hash`.
    /// No-op with caching off.
    pub fn promote(&mut self, id: CopyId, hash: u64) {
        if !self.caching {
            return;
        }
        debug_assert_eq!(self.slots[id as usize].state, CopyState::Private);
        self.cache(id, hash);
    }

    /// Drops one request reference. Private and pending copies are freed at once; cached
    /// copies join the LRU tail when nothing references them any more.
    pub fn release(&mut self, id: CopyId) {
        match &mut self.slots[id as usize].state {
            CopyState::Private | CopyState::Pending { .. } => self.free_slot(id),
            CopyState::Cached { refs, pins, .. } => {
                debug_assert!(*refs > 0, "cached copy released more often than referenced");
                *refs -= 1;
                if *refs == 0 && *pins == 0 {
                    self.push_lru(id);
                }
            }
            CopyState::Free => unreachable!("releasing a free slot"),
        }
    }

    fn cache(&mut self, id: CopyId, hash: u64) {
        self.slots[id as usize].state = CopyState::Cached {
            hash,
            refs: 1,
            pins: 0,
        };
        // One probe of the index (an entry), not a lookup and then an insert.
        match self.by_hash.entry(hash) {
            Entry::Occupied(mut entry) => {
                let (_, last) = entry.get_mut();
                let prev = *last;
                *last = id;
                self.slots[prev as usize].same_next = id;
                let slot = &mut self.slots[id as usize];
                slot.same_prev = prev;
                slot.same_next = NIL;
            }
            Entry::Vacant(entry) => {
                entry.insert((id, id));
                let slot = &mut self.slots[id as usize];
                slot.same_prev = NIL;
                slot.same_next = NIL;
                if let Some(events) = &mut self.events {
                    events.push(KvEvent::Stored { hash });
                }
            }
        }
    }

    fn is_inactive(&self, id: CopyId) -> bool {
        matches!(
            self.slots[id as usize].state,
            CopyState::Cached {
                refs: 0,
                pins: 0,
                ..
            }
        )
    }

    fn take_slot(&mut self, state: CopyState) -> CopyId {
        debug_assert!(self.occupied < self.capacity, "pool over-allocated");
        self.occupied += 1;
        let slot = Slot {
            state,
            lru_prev: NIL,
            lru_next: NIL,
            same_prev: NIL,
            same_next: NIL,
        };
        match self.free_slots.pop() {
            Some(id) => {
                self.slots[id as usize] = slot;
                id
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as CopyId
            }
        }
    }

    fn free_slot(&mut self, id: CopyId) {
        self.slots[id as usize].state = CopyState::Free;
        self.occupied -= 1;
        self.free_slots.push(id);
    }

    fn push_lru(&mut self, id: CopyId) {
        let tail = self.lru_tail;
        {
            let slot = &mut self.slots[id as usize];
            slot.lru_prev = tail;
            slot.lru_next = NIL;
        }
        if tail == NIL {
            self.lru_head = id;
        } else {
            self.slots[tail as usize].lru_next = id;
        }
        self.lru_tail = id;
        self.inactive += 1;
    }

    fn unlink_lru(&mut self, id: CopyId) {
        let (prev, next) = {
            let slot = &mut self.slots[id as usize];
            let links = (slot.lru_prev, slot.lru_next);
            slot.lru_prev = NIL;
            slot.lru_next = NIL;
            links
        };
        if prev == NIL {
            self.lru_head = next;
        } else {
            self.slots[prev as usize].lru_next = next;
        }
        if next == NIL {
            self.lru_tail = prev;
        } else {
            self.slots[next as usize].lru_prev = prev;
        }
        self.inactive -= 1;
    }

    fn evict_oldest(&mut self) {
        let id = self.lru_head;
        debug_assert!(id != NIL, "eviction from an empty LRU");
        self.unlink_lru(id);
        let CopyState::Cached { hash, .. } = self.slots[id as usize].state else {
            unreachable!("LRU holds an uncached slot")
        };
        let (same_prev, same_next) = {
            let slot = &self.slots[id as usize];
            (slot.same_prev, slot.same_next)
        };
        if same_prev != NIL {
            self.slots[same_prev as usize].same_next = same_next;
        }
        if same_next != NIL {
            self.slots[same_next as usize].same_prev = same_prev;
        }
        let Entry::Occupied(mut entry) = self.by_hash.entry(hash) else {
            unreachable!("cached hash is indexed")
        };
        let copies = entry.get_mut();
        if copies.0 == id && copies.1 == id {
            entry.remove();
            if let Some(events) = &mut self.events {
                events.push(KvEvent::Removed { hash });
            }
        } else {
            if copies.0 == id {
                copies.0 = same_next;
            }
            if copies.1 == id {
                copies.1 = same_prev;
            }
        }
        self.free_slot(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(pool: &mut BlockPool, prefix: &[u64], fresh: &[Option<u64>]) -> Option<Vec<CopyId>> {
        let mut out = Vec::new();
        pool.allocate(prefix, fresh.len(), |i| fresh[i], &mut out)
            .then_some(out)
    }

    #[test]
    fn pending_blocks_become_visible_only_when_finalized() {
        let mut pool = BlockPool::new(4, true);
        let ids = alloc(&mut pool, &[], &[Some(10), Some(11), None]).unwrap();
        assert_eq!(pool.lookup(10), None);
        assert_eq!(pool.finalize(ids[0]), Finalized::NowCached);
        assert_eq!(pool.finalize(ids[0]), Finalized::AlreadyCached);
        assert_eq!(pool.finalize(ids[2]), Finalized::Private);
        assert_eq!(pool.lookup(10), Some(true));
        assert_eq!(pool.num_active(), 3);
        // Release tail first: the private and pending copies free at once, the cached one idles.
        for &id in ids.iter().rev() {
            pool.release(id);
        }
        assert_eq!(pool.num_active(), 0);
        assert_eq!(pool.num_inactive(), 1);
        assert_eq!(pool.lookup(10), Some(false));
        assert_eq!(pool.lookup(11), None);
    }

    #[test]
    fn eviction_is_lru_and_spares_the_pinned_prefix() {
        let mut pool = BlockPool::new(3, true);
        pool.record_events();
        let ids = alloc(&mut pool, &[], &[Some(1), Some(2), Some(3)]).unwrap();
        for &id in &ids {
            pool.finalize(id);
        }
        for &id in ids.iter().rev() {
            pool.release(id);
        }
        // LRU order: 3, 2, 1. Reusing 1 and needing 2 fresh evicts 3 then 2.
        let got = alloc(&mut pool, &[1], &[None, None]).unwrap();
        assert_eq!(got[0], ids[0]);
        assert_eq!(pool.lookup(3), None);
        assert_eq!(pool.lookup(2), None);
        assert_eq!(pool.lookup(1), Some(true));
        assert_eq!(pool.num_active(), 3);
        assert!(alloc(&mut pool, &[], &[None]).is_none());
        let events = pool.drain_events();
        assert_eq!(
            events[3..],
            [KvEvent::Removed { hash: 3 }, KvEvent::Removed { hash: 2 }]
        );
    }

    #[test]
    fn inactive_prefix_hits_do_not_count_as_evictable() {
        let mut pool = BlockPool::new(2, true);
        let ids = alloc(&mut pool, &[], &[Some(1), Some(2)]).unwrap();
        pool.finalize(ids[0]);
        pool.finalize(ids[1]);
        pool.release(ids[1]);
        pool.release(ids[0]);
        // Both inactive; reusing both leaves nothing to evict for one fresh block.
        assert!(alloc(&mut pool, &[1, 2], &[None]).is_none());
        assert_eq!(pool.num_inactive(), 2);
        assert!(alloc(&mut pool, &[1], &[None]).is_some());
        assert_eq!(pool.lookup(2), None);
    }

    #[test]
    fn duplicate_copies_lookup_uses_the_oldest() {
        let mut pool = BlockPool::new(4, true);
        let a = alloc(&mut pool, &[], &[Some(7)]).unwrap();
        let b = alloc(&mut pool, &[], &[Some(7)]).unwrap();
        pool.finalize(a[0]);
        pool.finalize(b[0]);
        pool.release(a[0]);
        // The oldest copy is idle even though another copy is in use.
        assert_eq!(pool.lookup(7), Some(false));
        let c = alloc(&mut pool, &[7], &[]).unwrap();
        assert_eq!(c[0], a[0]);
        assert_eq!(pool.lookup(7), Some(true));
        pool.release(c[0]);
        // Evicting the oldest copy leaves the second one indexed.
        assert!(alloc(&mut pool, &[], &[None, None, None]).is_some());
        assert_eq!(pool.lookup(7), Some(true));
    }

    #[test]
    fn caching_off_keeps_everything_private() {
        let mut pool = BlockPool::new(2, false);
        let ids = alloc(&mut pool, &[], &[Some(1)]).unwrap();
        assert_eq!(pool.finalize(ids[0]), Finalized::Private);
        pool.release(ids[0]);
        assert_eq!(pool.num_free(), 2);
        assert_eq!(pool.match_prefix(&[1]), PrefixMatch::default());
    }
}
