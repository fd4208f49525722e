//! KV cache models.
//!
//! [`BlockPool`] is the physical block pool of the vLLM / TRT-LLM flavours: a fixed number of
//! block slots, each either free, private to one request, or cached under a chained block hash.
//! Several physical copies may hold the same hash (two requests that computed the same block
//! independently); prefix lookups always consult the oldest resident copy. Cached copies that no
//! request references sit in an LRU list and are evicted oldest first when fresh blocks are
//! needed. Every operation is O(1) apart from evictions (O(1) each) and the per-block work of an
//! allocation.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub mod radix;
mod table;

use table::{prefetch, CopyIndex};

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

/// How many blocks ahead a walk over keys or LRU victims prefetches.
const PREFETCH_AHEAD: usize = 4;

/// How many LRU entries ahead an eviction prefetches a victim's slot and its index bucket
/// (the entry carries the bucket's tag, so neither waits for the other).
const EVICT_PREFETCH_AHEAD: usize = 8;

/// Stale LRU entries tolerated beyond as many as there are current ones.
const LRU_SLACK: usize = 1024;

/// Whether the LRU entry numbered `seq` is current for `slot`.
fn is_current(slot: &Slot, seq: u32) -> bool {
    slot.lru_seq == seq && slot.is_inactive()
}

/// An LRU entry: the copy, and the upper half of its key (what picks its index bucket, so an
/// eviction can prefetch the bucket before it has read the slot).
#[derive(Clone, Copy, Debug)]
struct LruEntry {
    id: CopyId,
    tag: u32,
}

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

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// Slot not in use.
    Free,
    /// Owned by one request and never reusable (partial blocks, or caching disabled).
    Private,
    /// A full block owned by one request, reusable once its computation is scheduled; `hash`
    /// is its key.
    Pending,
    /// Cache-visible under `hash`; inactive (evictable) iff no request references it.
    Cached,
}

/// [`Slot::state`]: the kind in the low two bits.
const KIND_MASK: u32 = 0b11;
/// [`Slot::state`]: the copy's links to other copies of its hash are in [`BlockPool::links`].
const LINKED: u32 = 0b100;
/// [`Slot::state`]: one request reference (the count is in the bits above [`LINKED`]).
const ONE_REF: u32 = 0b1000;

/// One physical block copy. 16 bytes, four to a cache line: evictions, releases and prefix
/// walks touch slots in no particular order, so their size is what the pool's cache misses
/// cost. What only copies sharing a hash need (their list) lives beside, in
/// [`BlockPool::links`].
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The block key while `Pending` or `Cached`.
    hash: u64,
    /// The number of the copy's latest LRU entry (see [`BlockPool::lru_base`]): an entry is
    /// current only while it has this number and the copy is still inactive. Meaningless
    /// until the copy first becomes inactive, which sets it.
    lru_seq: u32,
    /// `refs * ONE_REF | LINKED? | kind`. References count only while `Cached` (a private or
    /// pending copy has its one owner); a copy taken as a prefix inside
    /// [`BlockPool::allocate`] holds its new reference before the evictions, which is what
    /// keeps them off it.
    state: u32,
}

impl Slot {
    fn new(kind: Kind, hash: u64) -> Slot {
        Slot {
            hash,
            lru_seq: 0,
            state: kind as u32,
        }
    }

    fn kind(&self) -> Kind {
        match self.state & KIND_MASK {
            0 => Kind::Free,
            1 => Kind::Private,
            2 => Kind::Pending,
            _ => Kind::Cached,
        }
    }

    fn refs(&self) -> u32 {
        self.state / ONE_REF
    }

    fn is_linked(&self) -> bool {
        self.state & LINKED != 0
    }

    fn is_inactive(&self) -> bool {
        self.state & !LINKED == Kind::Cached as u32
    }

    fn add_ref(&mut self) {
        self.state = self
            .state
            .checked_add(ONE_REF)
            .expect("block reference count overflow");
    }
}

/// A copy's neighbours in the list of its hash's copies, oldest first: `next` runs towards
/// newer copies (NIL after the newest), and the oldest copy's `prev` names the newest (itself
/// when alone), so appending needs no second index entry. A slot without [`LINKED`] is alone:
/// `prev` itself, `next` NIL.
#[derive(Clone, Copy, Debug)]
struct Links {
    prev: CopyId,
    next: CopyId,
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
    /// The [`Links`] of slots marked [`LINKED`] (other entries mean nothing); grown only when
    /// a hash gets a second copy.
    links: Vec<Links>,
    free_slots: Vec<CopyId>,
    /// Slots not `Free`.
    occupied: usize,
    /// The oldest cached copy of every cache-visible hash, keyed by that hash (held by the
    /// slot; the index keeps half of it as a tag beside the id, 8 bytes an entry). An eviction
    /// finds its own entry by id without reading any slot, and walks that need the index
    /// next prefetch its bucket.
    by_hash: CopyIndex,
    /// Inactive copies, oldest first, from [`BlockPool::lru_front`] on (the entries before it
    /// are spent: evictions only advance the front, and [`BlockPool::make_lru_room`] drops the
    /// spent entries once they are at least half the vector). The entry at position `p` is
    /// numbered `lru_base + p` (the number is the position, never stored in the entry). A copy
    /// that becomes active again leaves its entry behind, stale (see [`Slot::lru_seq`]);
    /// evictions skip stale entries and [`BlockPool::push_lru`] compacts them away. A queue
    /// rather than a linked list: reusing an inactive copy touches no neighbour, and the next
    /// victims are known ahead, so their slots and buckets can be prefetched.
    lru: Vec<LruEntry>,
    /// Where the oldest queued entry is in `lru`.
    lru_front: usize,
    /// The number of `lru`'s first entry (wrapping; numbers are compared only for equality,
    /// and the queue is far shorter than 2^32).
    lru_base: u32,
    /// Current entries in `lru`.
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
            links: Vec::new(),
            free_slots: Vec::new(),
            occupied: 0,
            by_hash: CopyIndex::default(),
            lru: Vec::new(),
            lru_front: 0,
            lru_base: 0,
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
            // The two buffers trade places (no copy); each keeps its capacity for reuse.
            std::mem::swap(events, out);
        }
    }

    /// Whether `hash` was cache-visible as of the last drain of the recorded events: what a
    /// router fed by exactly the drained events holds. The index answers for every hash the
    /// undrained events do not name; for one they do, the first of them tells the state before
    /// it (a hash's events alternate, each changing its visibility). Events are usually
    /// drained as soon as they are made, so the scan is of an empty list.
    #[inline]
    pub fn visible_as_drained(&self, hash: u64) -> bool {
        if let Some(events) = self.events.as_ref().filter(|events| !events.is_empty()) {
            let first = events.iter().find(|event| match **event {
                KvEvent::Stored { hash: named } | KvEvent::Removed { hash: named } => named == hash,
                KvEvent::StoredRun { .. } | KvEvent::RemovedRun { .. } => false,
            });
            if let Some(first) = first {
                return matches!(first, KvEvent::Removed { .. });
            }
        }
        self.oldest_copy(hash).is_some()
    }

    /// Starts loading the index bucket where `hash` is looked for.
    #[inline(always)]
    pub fn prefetch_hash(&self, hash: u64) {
        self.by_hash.prefetch(hash);
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

    /// The oldest resident copy of `hash`.
    fn oldest_copy(&self, hash: u64) -> Option<CopyId> {
        let slots = &self.slots;
        self.by_hash
            .find(hash, |id| slots[id as usize].hash == hash)
    }

    /// Whether `hash` has a resident copy, and if so whether its oldest copy is in use.
    pub fn lookup(&self, hash: u64) -> Option<bool> {
        let first = self.oldest_copy(hash)?;
        let slot = &self.slots[first as usize];
        debug_assert_eq!(
            slot.kind(),
            Kind::Cached,
            "hash index points at an uncached slot"
        );
        Some(slot.refs() > 0)
    }

    /// Walks `hashes` from the start while each has a resident copy.
    pub fn match_prefix(&self, hashes: &[u64]) -> PrefixMatch {
        let mut found = PrefixMatch::default();
        if !self.caching {
            return found;
        }
        for (i, hash) in hashes.iter().enumerate() {
            if let Some(&ahead) = hashes.get(i + PREFETCH_AHEAD) {
                self.by_hash.prefetch(ahead);
            }
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
    /// `i` is pending under `pending[i]` when there is one and caching is on, private otherwise
    /// (a request's blocks past its known keys). The copies are appended to `out` in order
    /// (prefix first). Returns false, with nothing changed, when the pool cannot supply the
    /// fresh blocks.
    pub fn allocate(
        &mut self,
        prefix: &[u64],
        fresh: usize,
        pending: &[u64],
        out: &mut Vec<CopyId>,
    ) -> bool {
        let needed_evictions = fresh.saturating_sub(self.num_free());
        // The first victims' loads overlap the prefix walk.
        self.prefetch_victims(needed_evictions.min(EVICT_PREFETCH_AHEAD));
        let mut prefix_ids = std::mem::take(&mut self.scratch);
        prefix_ids.clear();
        for (i, hash) in prefix.iter().enumerate() {
            if let Some(&ahead) = prefix.get(i + PREFETCH_AHEAD) {
                self.by_hash.prefetch(ahead);
            }
            let first = self
                .oldest_copy(*hash)
                .expect("a prefix hash vouched for by a lookup is resident");
            prefix_ids.push(first);
        }
        if needed_evictions > 0 {
            let inactive_hits = prefix_ids
                .iter()
                .filter(|&&id| self.slots[id as usize].is_inactive())
                .count();
            if needed_evictions > self.inactive - inactive_hits {
                self.scratch = prefix_ids;
                return false;
            }
        }
        // Reference the prefix first so that the evictions below cannot take it.
        for &id in &prefix_ids {
            if self.slots[id as usize].is_inactive() {
                self.unlink_lru(id);
            }
            self.slots[id as usize].add_ref();
        }
        self.evict_oldest(needed_evictions);
        out.extend_from_slice(&prefix_ids);
        self.scratch = prefix_ids;
        let pending = if self.caching {
            &pending[..pending.len().min(fresh)]
        } else {
            &[]
        };
        self.take_slots(fresh, pending, out);
        true
    }

    /// Fills `fresh` slots, the first `pending.len()` pending under those keys and the rest
    /// private, and appends their ids to `out`: free slots first, the most recently freed
    /// first, then new ones. (One pass over each part rather than a call per slot: a prefill
    /// takes hundreds of blocks at once.)
    fn take_slots(&mut self, fresh: usize, pending: &[u64], out: &mut Vec<CopyId>) {
        debug_assert!(
            self.occupied + fresh <= self.capacity,
            "pool over-allocated"
        );
        debug_assert!(pending.len() <= fresh);
        self.occupied += fresh;
        let slot_for = |i: usize| match pending.get(i) {
            Some(&hash) => Slot::new(Kind::Pending, hash),
            None => Slot::new(Kind::Private, 0),
        };
        let reused = fresh.min(self.free_slots.len());
        let kept = self.free_slots.len() - reused;
        let first = out.len();
        out.extend(self.free_slots[kept..].iter().rev());
        self.free_slots.truncate(kept);
        let slots = &mut self.slots;
        for (i, &id) in out[first..].iter().enumerate() {
            slots[id as usize] = slot_for(i);
        }
        let next = slots.len();
        slots.extend((reused..fresh).map(slot_for));
        out.extend((next..slots.len()).map(|id| id as CopyId));
    }

    /// Makes a pending full block cache-visible (the scheduling decision that computes it has
    /// been made).
    #[inline(always)]
    pub fn finalize(&mut self, id: CopyId) -> Finalized {
        let slot = &self.slots[id as usize];
        match slot.kind() {
            Kind::Pending => {
                self.cache(id, slot.hash);
                Finalized::NowCached
            }
            Kind::Cached => Finalized::AlreadyCached,
            Kind::Private => Finalized::Private,
            Kind::Free => unreachable!("finalizing a free slot"),
        }
    }

    /// Finalizes `copies` in order (as [`BlockPool::finalize`] on each) up to and including the
    /// first private one. `keys` are the block keys of `copies` as far as the caller knows
    /// them, used only to prefetch the index buckets a few copies ahead (a wrong or missing key
    /// costs time, never a result).
    pub fn finalize_run(&mut self, copies: &[CopyId], keys: &[u64]) {
        for (i, &id) in copies.iter().enumerate() {
            if let Some(&ahead) = keys.get(i + PREFETCH_AHEAD) {
                self.by_hash.prefetch(ahead);
            }
            if self.finalize(id) == Finalized::Private {
                break;
            }
        }
    }

    /// Makes a private block that just became full and computed cache-visible under `hash`.
    /// No-op with caching off.
    pub fn promote(&mut self, id: CopyId, hash: u64) {
        if !self.caching {
            return;
        }
        debug_assert_eq!(self.slots[id as usize].kind(), Kind::Private);
        self.cache(id, hash);
    }

    /// Drops one request reference. Private and pending copies are freed at once; cached
    /// copies join the LRU tail when nothing references them any more.
    #[inline(always)]
    pub fn release(&mut self, id: CopyId) {
        if self.drop_reference(id) {
            self.push_lru(id);
        }
    }

    /// Drops one request reference of copy `id`, freeing a private or pending copy. Whether a
    /// cached copy became inactive (its LRU entry is then due: [`BlockPool::release`] makes
    /// room for it, [`BlockPool::release_all`] has made it for the whole run).
    #[inline(always)]
    fn drop_reference(&mut self, id: CopyId) -> bool {
        let slot = &mut self.slots[id as usize];
        match slot.kind() {
            Kind::Private | Kind::Pending => {
                self.free_slot(id);
                false
            }
            Kind::Cached => {
                debug_assert!(
                    slot.refs() > 0,
                    "cached copy released more often than referenced"
                );
                slot.state -= ONE_REF;
                slot.is_inactive()
            }
            Kind::Free => unreachable!("releasing a free slot"),
        }
    }

    /// Releases `copies` tail first (as [`BlockPool::release`] on each, last copy first),
    /// prefetching their slots a few ahead. The LRU's room for an entry per copy is made
    /// once, and its stale entries are counted once, after the run: appending current entries
    /// only lowers their share, so no compaction is due in between.
    pub fn release_all(&mut self, copies: &[CopyId]) {
        if self.lru.capacity() - self.lru.len() < copies.len() {
            self.make_lru_room(copies.len());
        }
        for (i, &id) in copies.iter().enumerate().rev() {
            // Near the head this prefetches the first copy again, which costs nothing.
            let ahead = copies[i.saturating_sub(PREFETCH_AHEAD)];
            prefetch(self.slots.as_ptr().wrapping_add(ahead as usize));
            if self.drop_reference(id) {
                self.append_lru(id);
            }
        }
        self.compact_lru_if_stale();
    }

    #[inline(always)]
    fn cache(&mut self, id: CopyId, hash: u64) {
        {
            let slot = &mut self.slots[id as usize];
            slot.hash = hash;
            slot.state = ONE_REF | Kind::Cached as u32;
        }
        // One probe of the index finds the oldest copy or makes this one the oldest.
        let slots = &self.slots;
        match self
            .by_hash
            .find_or_insert(hash, id, |copy| slots[copy as usize].hash == hash)
        {
            Err(first) => self.append_copy(first, id),
            Ok(()) => {
                if let Some(events) = &mut self.events {
                    events.push(KvEvent::Stored { hash });
                }
            }
        }
    }

    /// Links copy `id` after the newest copy of the hash whose oldest copy is `first`.
    #[inline(never)]
    fn append_copy(&mut self, first: CopyId, id: CopyId) {
        // The oldest copy names the newest.
        let newest = self.links_of(first).prev;
        self.links_mut(newest).next = id;
        *self.links_mut(id) = Links {
            prev: newest,
            next: NIL,
        };
        self.links_mut(first).prev = id;
    }

    /// The links of copy `id` (alone unless marked [`LINKED`]).
    fn links_of(&self, id: CopyId) -> Links {
        if self.slots[id as usize].is_linked() {
            self.links[id as usize]
        } else {
            Links {
                prev: id,
                next: NIL,
            }
        }
    }

    /// The links of copy `id`, to change: marks it [`LINKED`] first, filling in the links of
    /// a lone copy.
    fn links_mut(&mut self, id: CopyId) -> &mut Links {
        let slot = &mut self.slots[id as usize];
        if !slot.is_linked() {
            slot.state |= LINKED;
            if self.links.len() <= id as usize {
                self.links.resize(
                    self.slots.len(),
                    Links {
                        prev: NIL,
                        next: NIL,
                    },
                );
            }
            self.links[id as usize] = Links {
                prev: id,
                next: NIL,
            };
        }
        &mut self.links[id as usize]
    }

    fn free_slot(&mut self, id: CopyId) {
        self.slots[id as usize].state = Kind::Free as u32;
        self.occupied -= 1;
        self.free_slots.push(id);
    }

    /// Copy `id` becomes inactive: its entry joins the LRU tail.
    #[inline(always)]
    fn push_lru(&mut self, id: CopyId) {
        if self.lru.len() == self.lru.capacity() {
            self.make_lru_room(1);
        }
        self.append_lru(id);
        self.compact_lru_if_stale();
    }

    /// Appends the entry of copy `id`, which just became inactive, to the LRU (which has
    /// room for it).
    #[inline(always)]
    fn append_lru(&mut self, id: CopyId) {
        debug_assert!(self.lru.len() < self.lru.capacity());
        let slot = &mut self.slots[id as usize];
        slot.lru_seq = self.lru_base.wrapping_add(self.lru.len() as u32);
        self.lru.push(LruEntry {
            id,
            tag: (slot.hash >> 32) as u32,
        });
        self.inactive += 1;
    }

    /// Compacts the LRU once its stale entries outnumber its current ones (and the slack).
    #[inline(always)]
    fn compact_lru_if_stale(&mut self) {
        if self.lru.len() - self.lru_front > 2 * self.inactive + LRU_SLACK {
            self.compact_lru();
        }
    }

    /// Makes room for `count` more LRU entries: drops the spent entries when they are at
    /// least half of the vector (so that each move of a queued entry pays for as many
    /// evictions), and grows it if that is not enough.
    #[cold]
    #[inline(never)]
    fn make_lru_room(&mut self, count: usize) {
        let front = self.lru_front;
        if front > 0 && 2 * front >= self.lru.len() {
            self.lru.drain(..front);
            self.lru_front = 0;
            self.lru_base = self.lru_base.wrapping_add(front as u32);
        }
        if self.lru.capacity() - self.lru.len() < count {
            self.lru.reserve(count.max(self.lru.len().max(64)));
        }
    }

    /// Keeps the current LRU entries only (and drops the spent ones), renumbering their copies
    /// to their new positions.
    #[cold]
    #[inline(never)]
    fn compact_lru(&mut self) {
        let slots = &mut self.slots;
        let mut seq = self.lru_base.wrapping_add(self.lru_front as u32);
        let mut kept = self.lru_base;
        let mut write = 0;
        for read in self.lru_front..self.lru.len() {
            let entry = self.lru[read];
            let slot = &mut slots[entry.id as usize];
            if is_current(slot, seq) {
                slot.lru_seq = kept;
                kept = kept.wrapping_add(1);
                self.lru[write] = entry;
                write += 1;
            }
            seq = seq.wrapping_add(1);
        }
        self.lru.truncate(write);
        self.lru_front = 0;
    }

    /// Entries queued in the LRU, current or stale.
    #[cfg(test)]
    fn lru_queued(&self) -> usize {
        self.lru.len() - self.lru_front
    }

    /// Copy `id` stops being inactive (its LRU entry goes stale).
    fn unlink_lru(&mut self, id: CopyId) {
        debug_assert!(self.slots[id as usize].is_inactive());
        self.inactive -= 1;
    }

    /// Starts loading the slots and index buckets of the `count` oldest LRU entries.
    fn prefetch_victims(&self, count: usize) {
        for entry in self.lru[self.lru_front..].iter().take(count) {
            prefetch(&self.slots[entry.id as usize]);
            self.by_hash.prefetch_tag(entry.tag);
        }
    }

    /// Evicts the `count` oldest inactive copies, oldest first, while prefetching the slots
    /// and index buckets of the victims [`EVICT_PREFETCH_AHEAD`] entries ahead.
    fn evict_oldest(&mut self, count: usize) {
        if count == 0 {
            return;
        }
        // The counts change once for the whole run, and the free list has room for every
        // victim, so that the loop keeps its state in registers.
        self.inactive -= count;
        self.occupied -= count;
        self.free_slots.reserve(count);
        let mut at = self.lru_front;
        for _ in 0..count {
            let victim = loop {
                let entry = *self.lru.get(at).expect("eviction from an empty LRU");
                if let Some(ahead) = self.lru.get(at + EVICT_PREFETCH_AHEAD) {
                    prefetch(&self.slots[ahead.id as usize]);
                    self.by_hash.prefetch_tag(ahead.tag);
                }
                let seq = self.lru_base.wrapping_add(at as u32);
                at += 1;
                if is_current(&self.slots[entry.id as usize], seq) {
                    break entry.id;
                }
            };
            self.evict(victim);
        }
        self.lru_front = at;
    }

    /// Evicts inactive copy `id`, whose LRU entry is gone, into the free list (the caller
    /// counts it out of `inactive` and `occupied`).
    #[inline(always)]
    fn evict(&mut self, id: CopyId) {
        let slot = self.slots[id as usize];
        let hash = slot.hash;
        debug_assert_eq!(slot.kind(), Kind::Cached, "LRU holds an uncached slot");
        if !slot.is_linked() {
            // A lone copy: only its index entry goes.
            let entry = self.by_hash.position(hash, id);
            self.by_hash.remove_at(entry);
            if let Some(events) = &mut self.events {
                events.push(KvEvent::Removed { hash });
            }
            self.free_evicted(id);
        } else {
            self.evict_linked(id, hash);
        }
    }

    /// [`BlockPool::evict`] of a copy that shares its hash with other copies (rare).
    #[inline(never)]
    fn evict_linked(&mut self, id: CopyId, hash: u64) {
        let Links {
            prev: same_prev,
            next: same_next,
        } = self.links[id as usize];
        // The oldest copy is the one whose `prev` does not link back to it (a lone copy names
        // itself).
        let oldest = same_prev == id || self.links_of(same_prev).next != id;
        if oldest {
            let entry = self.by_hash.position(hash, id);
            if same_next == NIL {
                self.by_hash.remove_at(entry);
                if let Some(events) = &mut self.events {
                    events.push(KvEvent::Removed { hash });
                }
            } else {
                // The next copy becomes the oldest and names the newest.
                self.by_hash.set_at(entry, same_next);
                self.links_mut(same_next).prev = same_prev;
            }
        } else {
            self.links_mut(same_prev).next = same_next;
            if same_next == NIL {
                // The newest copy left: the oldest must name its predecessor instead.
                let oldest = self
                    .oldest_copy(hash)
                    .expect("a duplicated hash is indexed");
                self.links_mut(oldest).prev = same_prev;
            } else {
                self.links_mut(same_next).prev = same_prev;
            }
        }
        self.free_evicted(id);
    }

    /// Frees slot `id` (an evicted copy, already counted out of `occupied`).
    #[inline(always)]
    fn free_evicted(&mut self, id: CopyId) {
        self.slots[id as usize].state = Kind::Free as u32;
        self.free_slots.push(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocates a copy per entry of `fresh`: pending under its key, or private where `None`
    /// (only after the keyed ones, as a request's blocks come).
    fn alloc(pool: &mut BlockPool, prefix: &[u64], fresh: &[Option<u64>]) -> Option<Vec<CopyId>> {
        let keys: Vec<u64> = fresh.iter().map_while(|key| *key).collect();
        assert!(fresh[keys.len()..].iter().all(Option::is_none));
        let mut out = Vec::new();
        pool.allocate(prefix, fresh.len(), &keys, &mut out)
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
    fn duplicate_copies_leave_in_any_order() {
        let mut pool = BlockPool::new(4, true);
        pool.record_events();
        let copies: Vec<CopyId> = (0..3)
            .map(|_| alloc(&mut pool, &[], &[Some(7)]).unwrap()[0])
            .collect();
        for &id in &copies {
            assert_eq!(pool.finalize(id), Finalized::NowCached);
        }
        let [a, b, c] = copies[..] else {
            unreachable!()
        };
        // The middle copy goes first, then the newest; the oldest stays indexed and in use.
        pool.release(b);
        let filler = alloc(&mut pool, &[], &[None, None]).unwrap();
        assert_eq!(pool.num_inactive(), 0);
        assert_eq!(pool.lookup(7), Some(true));
        pool.release(filler[0]);
        pool.release(c);
        alloc(&mut pool, &[], &[None, None]).unwrap();
        assert_eq!(pool.lookup(7), Some(true));
        // A new copy is appended after the lone survivor; evicting the oldest promotes it.
        pool.release(filler[1]);
        let d = alloc(&mut pool, &[], &[Some(7)]).unwrap()[0];
        pool.finalize(d);
        pool.release(a);
        assert_eq!(pool.lookup(7), Some(false));
        let reused = alloc(&mut pool, &[7], &[]).unwrap();
        assert_eq!(reused, [a]);
        pool.release(a);
        while pool.num_free() > 0 {
            alloc(&mut pool, &[], &[None]).unwrap();
        }
        alloc(&mut pool, &[], &[None]).unwrap();
        assert_eq!(
            pool.lookup(7),
            Some(true),
            "the newer copy d is now the indexed one"
        );
        pool.release(d);
        assert_eq!(pool.lookup(7), Some(false));
        alloc(&mut pool, &[], &[None]).unwrap();
        assert_eq!(pool.lookup(7), None);
        assert_eq!(
            pool.drain_events(),
            [KvEvent::Stored { hash: 7 }, KvEvent::Removed { hash: 7 }]
        );
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

    /// The pool as plainly as it can be written: the LRU a vector in release order, every
    /// hash's copies a vector oldest first. Same free-slot reuse order, same events.
    #[derive(Default)]
    struct PlainPool {
        capacity: usize,
        kinds: Vec<(Kind, u64, u32)>,
        free: Vec<CopyId>,
        lru: Vec<CopyId>,
        copies: HashMap<u64, Vec<CopyId>>,
        events: Vec<KvEvent>,
    }

    impl PlainPool {
        fn lookup(&self, hash: u64) -> Option<bool> {
            let oldest = *self.copies.get(&hash)?.first()?;
            Some(self.kinds[oldest as usize].2 > 0)
        }

        fn allocate(&mut self, prefix: &[u64], fresh: &[Option<u64>]) -> Option<Vec<CopyId>> {
            let ids: Vec<CopyId> = prefix.iter().map(|h| self.copies[h][0]).collect();
            let free = self.capacity - (self.kinds.len() - self.free.len());
            let needed = fresh.len().saturating_sub(free);
            let hits = ids.iter().filter(|id| self.lru.contains(id)).count();
            if needed > self.lru.len() - hits {
                return None;
            }
            self.lru.retain(|id| !ids.contains(id));
            for _ in 0..needed {
                let id = self.lru.remove(0);
                let hash = self.kinds[id as usize].1;
                let list = self.copies.get_mut(&hash).unwrap();
                list.retain(|&copy| copy != id);
                if list.is_empty() {
                    self.copies.remove(&hash);
                    self.events.push(KvEvent::Removed { hash });
                }
                self.kinds[id as usize].0 = Kind::Free;
                self.free.push(id);
            }
            let mut out = ids.clone();
            for id in ids {
                self.kinds[id as usize].2 += 1;
            }
            for hash in fresh {
                let slot = match hash {
                    Some(h) => (Kind::Pending, *h, 0),
                    None => (Kind::Private, 0, 0),
                };
                let id = match self.free.pop() {
                    Some(id) => {
                        self.kinds[id as usize] = slot;
                        id
                    }
                    None => {
                        self.kinds.push(slot);
                        (self.kinds.len() - 1) as CopyId
                    }
                };
                out.push(id);
            }
            Some(out)
        }

        fn finalize(&mut self, id: CopyId) -> Finalized {
            let (kind, hash, _) = self.kinds[id as usize];
            match kind {
                Kind::Pending => {
                    self.kinds[id as usize] = (Kind::Cached, hash, 1);
                    let list = self.copies.entry(hash).or_default();
                    list.push(id);
                    if list.len() == 1 {
                        self.events.push(KvEvent::Stored { hash });
                    }
                    Finalized::NowCached
                }
                Kind::Cached => Finalized::AlreadyCached,
                _ => Finalized::Private,
            }
        }

        fn release(&mut self, id: CopyId) {
            let slot = &mut self.kinds[id as usize];
            if slot.0 == Kind::Cached {
                slot.2 -= 1;
                if slot.2 == 0 {
                    self.lru.push(id);
                }
            } else {
                slot.0 = Kind::Free;
                self.free.push(id);
            }
        }
    }

    /// One step of a random workload: start a request on a prompt (document, blocks, whether a
    /// partial block follows), finalize or release the request at some index (block by block,
    /// or as one run).
    #[derive(Clone, Debug)]
    enum Step {
        Start(u64, usize, bool),
        Finalize(usize, bool),
        Release(usize, bool),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0u64..6, 1usize..7, any::<bool>()).prop_map(|(d, n, p)| Step::Start(d, n, p)),
            (0usize..8, any::<bool>()).prop_map(|(i, run)| Step::Finalize(i, run)),
            (0usize..8, any::<bool>()).prop_map(|(i, run)| Step::Release(i, run)),
        ]
    }

    proptest::proptest! {
        /// Eviction order, copy ids, lookups and events equal the plain pool's under random
        /// allocation, finalization and release, including through many LRU compactions.
        #[test]
        fn pool_matches_the_plain_pool(
            capacity in 1usize..24,
            steps in proptest::collection::vec(step(), 1..300),
        ) {
            let mut pool = BlockPool::new(capacity, true);
            pool.record_events();
            let mut plain = PlainPool { capacity, ..PlainPool::default() };
            let mut requests: Vec<Vec<CopyId>> = Vec::new();
            for step in steps {
                match step {
                    Step::Start(doc, blocks, partial) => {
                        let keys: Vec<u64> = (0..blocks as u64).map(|i| doc * 100 + i + 1).collect();
                        let found = pool.match_prefix(&keys);
                        let plain_found = keys.iter().take_while(|&&k| plain.lookup(k).is_some()).count();
                        proptest::prop_assert_eq!(found.blocks, plain_found);
                        let mut fresh: Vec<Option<u64>> =
                            keys[found.blocks..].iter().map(|&k| Some(k)).collect();
                        if partial {
                            fresh.push(None);
                        }
                        let got = alloc(&mut pool, &keys[..found.blocks], &fresh);
                        let want = plain.allocate(&keys[..found.blocks], &fresh);
                        proptest::prop_assert_eq!(&got, &want);
                        requests.extend(got);
                    }
                    Step::Finalize(i, run) => {
                        if let Some(ids) = requests.get(i) {
                            if run {
                                // Prefetch hints need not be the keys.
                                let hints: Vec<u64> =
                                    ids.iter().map(|&id| u64::from(id) << 32).collect();
                                pool.finalize_run(ids, &hints);
                            }
                            for &id in ids {
                                let want = plain.finalize(id);
                                if !run {
                                    proptest::prop_assert_eq!(pool.finalize(id), want);
                                }
                                if want == Finalized::Private {
                                    break;
                                }
                            }
                        }
                    }
                    Step::Release(i, run) => {
                        if i < requests.len() {
                            let ids = requests.remove(i);
                            if run {
                                pool.release_all(&ids);
                            }
                            for &id in ids.iter().rev() {
                                if !run {
                                    pool.release(id);
                                }
                                plain.release(id);
                            }
                        }
                    }
                }
                proptest::prop_assert_eq!(pool.num_inactive(), plain.lru.len());
                proptest::prop_assert_eq!(pool.num_free(), capacity - (plain.kinds.len() - plain.free.len()));
                for key in (0..6u64).flat_map(|d| (1..7).map(move |i| d * 100 + i)) {
                    proptest::prop_assert_eq!(pool.lookup(key), plain.lookup(key));
                }
                proptest::prop_assert_eq!(pool.drain_events(), std::mem::take(&mut plain.events));
            }
        }
    }

    proptest::proptest! {
        /// A router fed exactly the drained events holds what the pool answers as visible as
        /// of the last drain, however many events wait undrained (drains at random steps).
        #[test]
        fn visible_as_drained_is_what_the_drained_events_say(
            capacity in 1usize..24,
            steps in proptest::collection::vec((step(), proptest::bool::ANY), 1..300),
        ) {
            let mut pool = BlockPool::new(capacity, true);
            pool.record_events();
            let mut mirror = std::collections::HashSet::new();
            let mut requests: Vec<Vec<CopyId>> = Vec::new();
            for (step, drain) in steps {
                match step {
                    Step::Start(doc, blocks, partial) => {
                        let keys: Vec<u64> = (0..blocks as u64).map(|i| doc * 100 + i + 1).collect();
                        let found = pool.match_prefix(&keys).blocks;
                        let mut fresh: Vec<Option<u64>> =
                            keys[found..].iter().map(|&k| Some(k)).collect();
                        if partial {
                            fresh.push(None);
                        }
                        requests.extend(alloc(&mut pool, &keys[..found], &fresh));
                    }
                    Step::Finalize(i, _) => {
                        if let Some(ids) = requests.get(i) {
                            pool.finalize_run(ids, &[]);
                        }
                    }
                    Step::Release(i, _) => {
                        if i < requests.len() {
                            pool.release_all(&requests.remove(i));
                        }
                    }
                }
                if drain {
                    for event in pool.drain_events() {
                        match event {
                            KvEvent::Stored { hash } => proptest::prop_assert!(mirror.insert(hash)),
                            KvEvent::Removed { hash } => proptest::prop_assert!(mirror.remove(&hash)),
                            other => proptest::prop_assert!(false, "a block pool sent {:?}", other),
                        }
                    }
                }
                for key in (0..6u64).flat_map(|d| (1..7).map(move |i| d * 100 + i)) {
                    proptest::prop_assert_eq!(pool.visible_as_drained(key), mirror.contains(&key));
                }
            }
        }
    }

    #[test]
    fn stale_lru_entries_are_compacted_and_skipped() {
        // One block reused and released many times leaves a stale entry each time.
        let mut pool = BlockPool::new(3, true);
        let keep = alloc(&mut pool, &[], &[Some(1)]).unwrap();
        pool.finalize(keep[0]);
        pool.release(keep[0]);
        let other = alloc(&mut pool, &[], &[Some(2)]).unwrap();
        pool.finalize(other[0]);
        pool.release(other[0]);
        for _ in 0..5 * LRU_SLACK {
            let again = alloc(&mut pool, &[1], &[]).unwrap();
            pool.release(again[0]);
        }
        assert!(pool.lru_queued() <= 2 * pool.num_inactive() + LRU_SLACK + 1);
        // Block 2 is now the oldest inactive copy, block 1 the newest.
        assert!(alloc(&mut pool, &[], &[None, None]).is_some());
        assert_eq!(pool.lookup(2), None);
        assert_eq!(pool.lookup(1), Some(false));
    }

    #[test]
    fn compaction_keeps_the_eviction_order() {
        // Eight idle blocks; two of them reused in turn often enough to compact several times.
        let mut pool = BlockPool::new(8, true);
        let keys: Vec<Option<u64>> = (1..=8).map(Some).collect();
        let ids = alloc(&mut pool, &[], &keys).unwrap();
        for &id in &ids {
            pool.finalize(id);
            pool.release(id);
        }
        for round in 0..3 * LRU_SLACK {
            let key = [3, 6][round % 2];
            let again = alloc(&mut pool, &[key], &[]).unwrap();
            pool.release(again[0]);
        }
        assert!(pool.lru_queued() <= 2 * pool.num_inactive() + LRU_SLACK + 1);
        // Oldest first: the untouched blocks in release order, then 3 and 6 as last released.
        let order = [1, 2, 4, 5, 7, 8, 3, 6];
        for (evicted, &key) in order.iter().enumerate() {
            assert_eq!(pool.lookup(key), Some(false));
            alloc(&mut pool, &[], &[None]).unwrap();
            assert_eq!(
                pool.lookup(key),
                None,
                "eviction {evicted} takes block {key}"
            );
        }
    }
}
