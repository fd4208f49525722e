//! The SGLang flavour's KV model: a pool of fixed-size pages and a radix tree over page
//! identities (the prefix cache).
//!
//! A page is `page_size` tokens. Its identity stands for every token up to its end (see
//! [`crate::tokens`]), so two pages are interchangeable exactly when the sequences through them
//! are equal: at a given depth, two pages are equal exactly when their runs' bases are. Every tree
//! edge stores the pages it covers as runs of pages sharing a base ([`BlockRun`]), so an edge
//! costs one entry per token run, not one per page (at page size 1 a trace block of 512 equal
//! tokens is one entry); a node owns the edge's pages. A node's `lock_ref` counts the running requests whose prefix runs through it: locked
//! nodes are protected, unlocked ones are evictable, and eviction takes unlocked **leaves**,
//! least recently used first (an unlocked parent becomes a leaf, and so evictable, once its last
//! child is gone).
//!
//! Pages are counted, not named: the pool knows how many pages are free, the tree how many it
//! holds, and a request how many it owns privately (pages not, or not yet, in the tree). Handing
//! a request's pages to the tree keeps the pages the tree lacks and frees the duplicates of pages
//! it already holds.
//!
//! "Recently used" is a logical clock: every operation that would read a wall clock in a real
//! radix cache takes the next tick instead, so the eviction order is the order of operations and
//! runs are reproducible. Using a path marks every node from its end up to the root; that mark is
//! kept lazily, on the deepest node only, and handed to the parent when a node is evicted. A
//! node's last use only matters once it is a leaf, and by then it has received the marks of every
//! descendant, so the order is the same as with eager marking, without an O(depth) walk per
//! decoded token or per prefix match (a match marks the deepest node whose whole edge it
//! matched; a split copies the stamps of the node it cuts, so nothing is lost there either).
//!
//! Matching walks an edge run by run: O(runs compared), whatever the page count.
//!
//! For a KV-aware router the tree can record [`KvEvent`]s: `StoredRun` when pages enter the tree,
//! `RemovedRun` when they are evicted, one event per run of pages sharing a base. A page identity
//! names one position of one sequence, so the tree holds each identity at most once and replaying
//! the events in order rebuilds exactly the set of identities in the tree. Evictions are reported
//! newest page first, so that after every single event the tree a router rebuilds is still
//! prefix-closed. (The reference advertises a page when it is
//! allocated and withdraws it when its last copy is freed; every full page a request computes
//! enters the tree within the same pass, and a page retracted before that is withdrawn within the
//! pass too, so at the pass end, when SGLang's events become visible, both sets agree.)

use std::collections::{BTreeMap, BTreeSet};

use super::KvEvent;
use crate::tokens::{BlockRun, BlockRunIter, Blocks};

/// Index of a node inside a [`RadixCache`].
pub type NodeId = u32;

const ROOT: NodeId = 0;
const NO_PARENT: NodeId = NodeId::MAX;

#[derive(Debug, Default)]
struct Node {
    parent: NodeId,
    /// Children keyed by the base of the first page on their edge (all at the same depth).
    children: BTreeMap<u64, NodeId>,
    /// The pages on the edge from the parent to this node, as runs sharing a base.
    key: Vec<BlockRun>,
    /// Pages on the edge.
    key_len: usize,
    /// Depth (page index in the sequence) of the edge's first page.
    start: usize,
    lock_ref: u32,
    /// When the node was created (a mark that does not reach its ancestors); a split node keeps
    /// the stamps of the node it was cut from.
    created: u64,
    /// Last use of a path through this node or through an evicted descendant.
    used: u64,
    /// Whether the node is in `evictable_leaves` (then under `(last_use, id)`).
    evictable: bool,
}

/// The outcome of handing pages to the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inserted {
    /// The node at which the inserted sequence ends.
    pub node: NodeId,
    /// Pages the tree kept (it lacked them); the rest were duplicates and went back to the pool.
    pub adopted_pages: usize,
}

/// One change of the tree contents: a chain of pages entered or left the tree; `depth` and
/// `base` name its first page. Pages are chained, so the change can only alter the prefix match
/// of a sequence whose page at `depth` has that base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentChange {
    pub depth: usize,
    pub base: u64,
    pub removed: bool,
}

/// A walk's position in the pages it looks up: the run of pages holding the next one (with
/// the pages of it not yet matched) and the runs after it. A walk down the tree reads each run
/// of the query once, in order, rather than finding the run holding each edge's first page
/// anew (a path of a multi-turn conversation has about a hundred edges).
struct QueryCursor<'a> {
    current: Option<BlockRun>,
    rest: BlockRunIter<'a>,
}

impl<'a> QueryCursor<'a> {
    fn new(pages: Blocks<'a>) -> Self {
        let mut rest = pages.runs();
        Self {
            current: rest.next(),
            rest,
        }
    }

    /// The base of the next page (`None` when every page has been matched).
    #[inline]
    fn next_base(&self) -> Option<u64> {
        self.current.map(|run| run.base)
    }

    /// Moves past the pages the query has in common with `key` (an edge starting at the next
    /// page) and returns how many: pages at one depth are equal exactly when their bases are.
    #[inline]
    fn advance_along(&mut self, key: &[BlockRun]) -> usize {
        let mut common = 0;
        for key_run in key {
            let mut left = key_run.count;
            while left > 0 {
                let Some(query_run) = &mut self.current else {
                    return common;
                };
                if query_run.base != key_run.base {
                    return common;
                }
                let step = left.min(query_run.count);
                common += step as usize;
                left -= step;
                query_run.count -= step;
                if query_run.count == 0 {
                    self.current = self.rest.next();
                }
            }
        }
        common
    }
}

/// Page pool plus radix tree of one rank.
#[derive(Debug)]
pub struct RadixCache {
    nodes: Vec<Node>,
    vacant: Vec<NodeId>,
    page_size: usize,
    total_pages: usize,
    free_pages: usize,
    /// Pages in unlocked nodes (leaves or not).
    evictable_pages: usize,
    /// Pages in locked nodes.
    protected_pages: usize,
    evictable_leaves: BTreeSet<(u64, NodeId)>,
    clock: u64,
    /// Bumped whenever pages enter or leave the tree (splits and access marks do not count):
    /// while it is unchanged, every prefix match length is unchanged too.
    contents_generation: u64,
    /// When tracking: the changes that took the generation from `changes_start` to
    /// `contents_generation`, one per bump, in order.
    changes: Option<Vec<ContentChange>>,
    changes_start: u64,
    /// Recorded changes of the set of page identities in the tree (`None`: not recording).
    events: Option<Vec<KvEvent>>,
}

impl RadixCache {
    /// A pool of `total_tokens / page_size` pages with an empty tree.
    pub fn new(total_tokens: usize, page_size: usize) -> Self {
        assert!(page_size >= 1, "page size must be positive");
        let total_pages = total_tokens / page_size;
        let root = Node {
            parent: NO_PARENT,
            ..Node::default()
        };
        let mut cache = Self {
            nodes: vec![root],
            vacant: Vec::new(),
            page_size,
            total_pages,
            free_pages: total_pages,
            evictable_pages: 0,
            protected_pages: 0,
            evictable_leaves: BTreeSet::new(),
            clock: 0,
            contents_generation: 0,
            changes: None,
            changes_start: 0,
            events: None,
        };
        cache.nodes[ROOT as usize].created = cache.tick();
        cache
    }

    pub fn root(&self) -> NodeId {
        ROOT
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Tokens in free pages.
    pub fn available_tokens(&self) -> usize {
        self.free_pages * self.page_size
    }

    /// Tokens in unlocked tree nodes (all of them can be evicted, leaves first).
    pub fn evictable_tokens(&self) -> usize {
        self.evictable_pages * self.page_size
    }

    /// Tokens in locked tree nodes.
    pub fn protected_tokens(&self) -> usize {
        self.protected_pages * self.page_size
    }

    pub fn total_tokens(&self) -> usize {
        self.total_pages * self.page_size
    }

    /// Pages held by the tree.
    pub fn tree_pages(&self) -> usize {
        self.evictable_pages + self.protected_pages
    }

    /// Live nodes, the root included.
    pub fn num_nodes(&self) -> usize {
        self.nodes.len() - self.vacant.len()
    }

    /// Changes whenever the set of pages in the tree changes, so a caller can keep
    /// [`RadixCache::prefix_match_len`] results until it moves.
    pub fn contents_generation(&self) -> u64 {
        self.contents_generation
    }

    /// Starts keeping a log of [`ContentChange`]s (see [`RadixCache::changes_since`]).
    pub fn track_changes(&mut self) {
        if self.changes.is_none() {
            self.changes = Some(Vec::new());
            self.changes_start = self.contents_generation;
        }
    }

    /// The changes since the contents generation `generation`, oldest first; `None` when they
    /// are not all logged (not tracking, or forgotten).
    pub fn changes_since(&self, generation: u64) -> Option<&[ContentChange]> {
        let changes = self.changes.as_ref()?;
        let skip = usize::try_from(generation.checked_sub(self.changes_start)?).ok()?;
        changes.get(skip..)
    }

    /// Drops the logged changes (later [`RadixCache::changes_since`] calls for earlier
    /// generations return `None`).
    pub fn forget_changes(&mut self) {
        if let Some(changes) = &mut self.changes {
            changes.clear();
            self.changes_start = self.contents_generation;
        }
    }

    fn log_change(&mut self, depth: usize, base: u64, removed: bool) {
        self.contents_generation += 1;
        if let Some(changes) = &mut self.changes {
            changes.push(ContentChange {
                depth,
                base,
                removed,
            });
        }
    }

    /// Starts recording [`KvEvent`]s for the pages entering and leaving the tree.
    pub fn record_events(&mut self) {
        if self.events.is_none() {
            self.events = Some(Vec::new());
        }
    }

    /// Replaces the contents of `out` with the events recorded since the last call.
    pub fn drain_events_into(&mut self, out: &mut Vec<KvEvent>) {
        out.clear();
        if let Some(events) = &mut self.events {
            // The two buffers trade places (no copy); each keeps its capacity for reuse.
            std::mem::swap(events, out);
        }
    }

    #[inline]
    fn record_stored(&mut self, pages: Blocks<'_>) {
        if let Some(events) = &mut self.events {
            let mut first = pages.start();
            for run in pages.runs() {
                let count = run.count as usize;
                events.push(KvEvent::StoredRun {
                    base: run.base,
                    first,
                    count,
                });
                first += count;
            }
        }
    }

    /// Records the removal of the pages `runs`, whose first page is at depth `start`, newest
    /// first.
    fn record_removed(events: &mut Option<Vec<KvEvent>>, runs: &[BlockRun], start: usize) {
        if let Some(events) = events {
            let mut end = start + runs.iter().map(|run| run.count as usize).sum::<usize>();
            for run in runs.iter().rev() {
                let count = run.count as usize;
                end -= count;
                events.push(KvEvent::RemovedRun {
                    base: run.base,
                    first: end,
                    count,
                });
            }
        }
    }

    /// Takes `count` free pages for a request; false (nothing taken) if there are not enough.
    pub fn allocate_pages(&mut self, count: usize) -> bool {
        if count > self.free_pages {
            return false;
        }
        self.free_pages -= count;
        true
    }

    /// Returns `count` request-owned pages to the pool.
    pub fn free_pages(&mut self, count: usize) {
        self.free_pages += count;
        debug_assert!(self.free_pages + self.tree_pages() <= self.total_pages);
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize]
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id as usize]
    }

    /// Pages on the edge into `id`.
    pub fn edge_pages(&self, id: NodeId) -> usize {
        self.node(id).key_len
    }

    pub fn lock_ref(&self, id: NodeId) -> u32 {
        self.node(id).lock_ref
    }

    pub fn parent(&self, id: NodeId) -> Option<NodeId> {
        let parent = self.node(id).parent;
        (parent != NO_PARENT).then_some(parent)
    }

    pub fn is_leaf(&self, id: NodeId) -> bool {
        self.node(id).children.is_empty()
    }

    /// When a leaf was last used (its eviction rank).
    fn last_use(node: &Node) -> u64 {
        node.created.max(node.used)
    }

    /// Marks `id` and, implicitly, its ancestors as used at `stamp`.
    fn set_access(&mut self, id: NodeId, stamp: u64) {
        let node = &mut self.nodes[id as usize];
        let old = Self::last_use(node);
        node.used = node.used.max(stamp);
        let new = Self::last_use(node);
        if node.evictable && old != new {
            self.evictable_leaves.remove(&(old, id));
            self.evictable_leaves.insert((new, id));
        }
    }

    fn mark_evictable(&mut self, id: NodeId) {
        let node = &mut self.nodes[id as usize];
        if !node.evictable {
            node.evictable = true;
            self.evictable_leaves.insert((Self::last_use(node), id));
        }
    }

    fn unmark_evictable(&mut self, id: NodeId) {
        let node = &mut self.nodes[id as usize];
        if node.evictable {
            node.evictable = false;
            self.evictable_leaves.remove(&(Self::last_use(node), id));
        }
    }

    fn new_node(&mut self, node: Node) -> NodeId {
        match self.vacant.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                NodeId::try_from(self.nodes.len() - 1).expect("radix tree node count fits u32")
            }
        }
    }

    /// Pages `key` and `query` (both starting at the same depth) have in common from their
    /// start: pages at one depth are equal exactly when their bases are.
    fn common_pages(key: &[BlockRun], query: Blocks<'_>) -> usize {
        let mut common = 0;
        let mut key_runs = key.iter().copied();
        let mut query_runs = query.runs();
        let mut k = key_runs.next();
        let mut q = query_runs.next();
        while let (Some(mut kr), Some(mut qr)) = (k, q) {
            if kr.base != qr.base {
                break;
            }
            let step = kr.count.min(qr.count);
            common += step as usize;
            kr.count -= step;
            qr.count -= step;
            k = if kr.count == 0 {
                key_runs.next()
            } else {
                Some(kr)
            };
            q = if qr.count == 0 {
                query_runs.next()
            } else {
                Some(qr)
            };
        }
        common
    }

    /// Appends `pages` (the first of which has base `first_base`) to `key`, merging runs of
    /// the same base.
    #[inline(always)]
    fn append_runs(key: &mut Vec<BlockRun>, pages: Blocks<'_>, first_base: u64) {
        if pages.len() == 1 {
            // A decoding request adds one page a token at page size 1: no run iterator.
            match key.last_mut() {
                Some(last) if last.base == first_base => last.count += 1,
                _ => key.push(BlockRun {
                    base: first_base,
                    count: 1,
                }),
            }
            return;
        }
        for run in pages.runs() {
            match key.last_mut() {
                Some(last) if last.base == run.base => last.count += run.count,
                _ => key.push(run),
            }
        }
    }

    /// Longest cached prefix of `pages` (page identities from the sequence start): returns the
    /// number of matched pages and the node where the match ends, splitting an edge matched only
    /// partly so that the match ends on a node. Marks the matched path as used.
    pub fn match_prefix(&mut self, pages: Blocks<'_>) -> (usize, NodeId) {
        let now = self.tick();
        self.set_access(ROOT, now);
        let mut current = ROOT;
        // The deepest node whose whole edge matched: the path's mark goes there only (see the
        // module docs: an inner node's mark is observed only once it is a leaf, and by then
        // this node, or what it was cut into, has handed it up). A path of a long conversation
        // has about a hundred nodes, and a match walks it once per admitted request.
        let mut deepest_whole = ROOT;
        let mut matched = 0;
        let mut query = QueryCursor::new(pages);
        while let Some(base) = query.next_base() {
            let Some(&child) = self.node(current).children.get(&base) else {
                break;
            };
            let child_len = self.node(child).key_len;
            let common = query.advance_along(&self.node(child).key);
            if common < child_len {
                if common > 0 {
                    current = self.split(child, common);
                }
                matched += common;
                break;
            }
            matched += common;
            current = child;
            deepest_whole = child;
        }
        self.set_access(deepest_whole, now);
        (matched, current)
    }

    /// Like [`RadixCache::match_prefix`] but read-only: no split, no access mark.
    pub fn prefix_match_len(&self, pages: Blocks<'_>) -> usize {
        let mut current = ROOT;
        let mut matched = 0;
        let mut query = QueryCursor::new(pages);
        while let Some(base) = query.next_base() {
            let Some(&child) = self.node(current).children.get(&base) else {
                break;
            };
            let node = self.node(child);
            let common = query.advance_along(&node.key);
            matched += common;
            if common < node.key_len {
                break;
            }
            current = child;
        }
        matched
    }

    /// Inserts a whole sequence of page identities from the root, handing over one
    /// request-owned page per identity.
    pub fn insert(&mut self, pages: Blocks<'_>) -> Inserted {
        self.insert_below(ROOT, pages, false)
    }

    /// Inserts the pages that follow the sequence ending at `start` (a node a request holds a
    /// lock on), handing over one request-owned page per identity. The request's own unshared
    /// tail leaf grows in place.
    #[inline]
    pub fn insert_from_node(&mut self, start: NodeId, pages: Blocks<'_>) -> Inserted {
        // The common case, a running request's own tail leaf growing by the pages it just
        // computed (a page a token while it decodes at page size 1), skips the general walk:
        // it is the walk's first step, done alike.
        if !pages.is_empty() && self.grows_in_place(start, true, start) {
            let now = self.tick();
            self.set_access(start, now);
            self.extend_leaf(start, pages, now);
            return Inserted {
                node: start,
                adopted_pages: pages.len(),
            };
        }
        self.insert_below(start, pages, true)
    }

    /// The decode step's insertion: `count` pages from depth `first` on, all sharing `base`
    /// (they end in one token run), follow the sequence ending at `id`, a leaf other than the
    /// root that one request alone holds. They extend its edge, with the same tick, access
    /// mark, change log, event and page counts as [`RadixCache::insert_from_node`] gives them.
    /// False (nothing done) when `id` is not such a leaf; the general insertion applies then.
    #[inline]
    pub fn grow_own_leaf(&mut self, id: NodeId, first: usize, base: u64, count: usize) -> bool {
        // One look-up of the node for the whole step (the fields below are disjoint from it):
        // this runs once per running request and token.
        let node = &mut self.nodes[id as usize];
        if id == ROOT || !node.children.is_empty() || node.lock_ref != 1 || count == 0 {
            return false;
        }
        // `tick` and `log_change`, spelled out to keep `node`.
        self.clock += 1;
        let now = self.clock;
        self.contents_generation += 1;
        if let Some(changes) = &mut self.changes {
            changes.push(ContentChange {
                depth: first,
                base,
                removed: false,
            });
        }
        if let Some(events) = &mut self.events {
            events.push(KvEvent::StoredRun { base, first, count });
        }
        debug_assert_eq!(node.start + node.key_len, first);
        // Locked, so not among the evictable leaves: marking its use is setting `used`.
        debug_assert!(!node.evictable);
        node.used = node.used.max(now);
        let pages = u32::try_from(count).expect("run lengths fit u32");
        match node.key.last_mut() {
            Some(last) if last.base == base => last.count += pages,
            _ => node.key.push(BlockRun { base, count: pages }),
        }
        node.key_len += count;
        self.protected_pages += count;
        true
    }

    /// Whether pages inserted at node `id` extend its edge in place rather than hang below it:
    /// it is a leaf other than the root that no request holds, or, when the inserting request
    /// may extend its own tail (`extend_own_tail`, from node `start`), that it alone holds.
    #[inline(always)]
    fn grows_in_place(&self, id: NodeId, extend_own_tail: bool, start: NodeId) -> bool {
        let node = self.node(id);
        id != ROOT
            && node.children.is_empty()
            && (node.lock_ref == 0 || (extend_own_tail && id == start && node.lock_ref == 1))
    }

    fn insert_below(
        &mut self,
        start: NodeId,
        pages: Blocks<'_>,
        extend_own_tail: bool,
    ) -> Inserted {
        if pages.is_empty() {
            return Inserted {
                node: start,
                adopted_pages: 0,
            };
        }
        let now = self.tick();
        self.set_access(start, now);

        let mut current = start;
        let mut offset = 0;
        let result = loop {
            if offset == pages.len() {
                break Inserted {
                    node: current,
                    adopted_pages: 0,
                };
            }
            if self.grows_in_place(current, extend_own_tail, start) {
                let adopted = pages.len() - offset;
                self.extend_leaf(current, pages.skip(offset), now);
                break Inserted {
                    node: current,
                    adopted_pages: adopted,
                };
            }
            let Some(&child) = self.node(current).children.get(&pages.base(offset)) else {
                let adopted = pages.len() - offset;
                let node = self.create_child(current, pages.skip(offset));
                break Inserted {
                    node,
                    adopted_pages: adopted,
                };
            };
            let child_len = self.node(child).key_len;
            let common = Self::common_pages(&self.node(child).key, pages.skip(offset));
            if common == child_len {
                offset += common;
                current = child;
                self.set_access(current, now);
                continue;
            }
            // The first page always matches (it is the child's key), so `common > 0` here.
            let intermediate = self.split(child, common);
            offset += common;
            if offset < pages.len() {
                let adopted = pages.len() - offset;
                let node = self.create_child(intermediate, pages.skip(offset));
                break Inserted {
                    node,
                    adopted_pages: adopted,
                };
            }
            break Inserted {
                node: intermediate,
                adopted_pages: 0,
            };
        };
        // The tree already held the other pages: the request's copies go back to the pool.
        self.free_pages += pages.len() - result.adopted_pages;
        result
    }

    #[inline]
    fn extend_leaf(&mut self, id: NodeId, pages: Blocks<'_>, now: u64) {
        let first_base = pages.base(0);
        self.log_change(pages.start(), first_base, false);
        self.record_stored(pages);
        let node = self.node_mut(id);
        debug_assert_eq!(node.start + node.key_len, pages.start());
        Self::append_runs(&mut node.key, pages, first_base);
        node.key_len += pages.len();
        let locked = node.lock_ref > 0;
        self.set_access(id, now);
        if locked {
            self.protected_pages += pages.len();
        } else {
            self.evictable_pages += pages.len();
        }
    }

    /// Splits the edge into `child` after `at` pages: a new intermediate node takes the first
    /// `at` pages (and the child's lock count and access time) and becomes the child's parent.
    fn split(&mut self, child: NodeId, at: usize) -> NodeId {
        let (parent, prefix, start, lock_ref, created, used, first_old, first_new) = {
            let node = self.node_mut(child);
            debug_assert!(0 < at && at < node.key_len);
            // Find the run holding page `at`; a run cut in two keeps its base on both sides.
            let mut piece = 0;
            let mut before = 0;
            while before + node.key[piece].count as usize <= at {
                before += node.key[piece].count as usize;
                piece += 1;
            }
            let cut = u32::try_from(at - before).expect("run lengths fit u32");
            let mut suffix = node.key.split_off(piece);
            let mut prefix = std::mem::take(&mut node.key);
            if cut > 0 {
                prefix.push(BlockRun {
                    base: suffix[0].base,
                    count: cut,
                });
                suffix[0].count -= cut;
            }
            node.key = suffix;
            let first_old = prefix[0].base;
            let start = node.start;
            node.start += at;
            node.key_len -= at;
            (
                node.parent,
                prefix,
                start,
                node.lock_ref,
                node.created,
                node.used,
                first_old,
                node.key[0].base,
            )
        };
        let mut children = BTreeMap::new();
        children.insert(first_new, child);
        let intermediate = self.new_node(Node {
            parent,
            children,
            key: prefix,
            key_len: at,
            start,
            lock_ref,
            created,
            used,
            evictable: false,
        });
        self.node_mut(child).parent = intermediate;
        self.node_mut(parent)
            .children
            .insert(first_old, intermediate);
        intermediate
    }

    fn create_child(&mut self, parent: NodeId, pages: Blocks<'_>) -> NodeId {
        self.log_change(pages.start(), pages.base(0), false);
        self.record_stored(pages);
        let stamp = self.tick();
        let key: Vec<BlockRun> = pages.runs().collect();
        let first_base = key[0].base;
        let child = self.new_node(Node {
            parent,
            children: BTreeMap::new(),
            key,
            key_len: pages.len(),
            start: pages.start(),
            lock_ref: 0,
            created: stamp,
            used: 0,
            evictable: false,
        });
        self.unmark_evictable(parent);
        self.node_mut(parent).children.insert(first_base, child);
        self.mark_evictable(child);
        self.evictable_pages += pages.len();
        child
    }

    /// Protects the path from `id` up to the root.
    pub fn inc_lock_ref(&mut self, id: NodeId) {
        self.lock_up_to(id, ROOT);
    }

    /// Moves one protection from `ancestor` (a node the caller holds a lock on, or the root) to
    /// `id`, a node below it or itself: the same as [`RadixCache::inc_lock_ref`] on `id` then
    /// [`RadixCache::dec_lock_ref`] on `ancestor`, without walking the shared path above
    /// `ancestor` twice (its counts go up and back down without reaching 0 there).
    pub fn move_lock_down(&mut self, ancestor: NodeId, id: NodeId) {
        debug_assert!(ancestor == ROOT || self.node(ancestor).lock_ref > 0);
        self.lock_up_to(id, ancestor);
    }

    /// Adds a protection to the nodes from `id` up to, not including, `stop` (an ancestor of
    /// `id`, or `id` itself).
    fn lock_up_to(&mut self, id: NodeId, stop: NodeId) {
        let mut current = id;
        while current != stop {
            debug_assert!(current != ROOT, "the walk passed the root: not an ancestor");
            let node = self.node_mut(current);
            node.lock_ref += 1;
            let pages = node.key_len;
            let parent = node.parent;
            if node.lock_ref == 1 {
                self.unmark_evictable(current);
                self.evictable_pages -= pages;
                self.protected_pages += pages;
            }
            current = parent;
        }
    }

    /// Releases one protection of the path from `id` up to the root.
    pub fn dec_lock_ref(&mut self, id: NodeId) {
        let mut current = id;
        while current != ROOT {
            let node = self.node_mut(current);
            if node.lock_ref == 0 {
                debug_assert!(false, "unlocking an unlocked radix node");
                break;
            }
            node.lock_ref -= 1;
            let pages = node.key_len;
            let parent = node.parent;
            if node.lock_ref == 0 {
                self.protected_pages -= pages;
                self.evictable_pages += pages;
                if self.is_leaf(current) {
                    self.mark_evictable(current);
                }
            }
            current = parent;
        }
    }

    /// Evicts at least `tokens` tokens (whole pages) from unlocked leaves, least recently used
    /// first; a leaf longer than needed loses only its newest pages. Returns the tokens evicted
    /// (less than asked when nothing evictable is left).
    pub fn evict(&mut self, tokens: usize) -> usize {
        let ps = self.page_size;
        let mut evicted = 0;
        while evicted < tokens {
            let Some(&(_, victim)) = self.evictable_leaves.first() else {
                break;
            };
            let victim_pages = self.node(victim).key_len;
            let wanted = (tokens - evicted).div_ceil(ps).min(victim_pages);
            if wanted < victim_pages {
                let kept = victim_pages - wanted;
                let node = &mut self.nodes[victim as usize];
                let first_removed = node.start + kept;
                let first_base = Self::truncate_runs(
                    &mut node.key,
                    wanted,
                    node.start + victim_pages,
                    &mut self.events,
                );
                node.key_len = kept;
                self.log_change(first_removed, first_base, true);
                self.free_pages += wanted;
                self.evictable_pages -= wanted;
                evicted += wanted * ps;
                continue;
            }
            self.unmark_evictable(victim);
            let node = std::mem::take(self.node_mut(victim));
            Self::record_removed(&mut self.events, &node.key, node.start);
            self.log_change(node.start, node.key[0].base, true);
            self.vacant.push(victim);
            self.free_pages += victim_pages;
            self.evictable_pages -= victim_pages;
            evicted += victim_pages * ps;
            let parent = node.parent;
            // The parent was used whenever this node was (creation aside).
            self.set_access(parent, node.used);
            let parent_node = self.node_mut(parent);
            parent_node.children.remove(&node.key[0].base);
            if parent != ROOT && parent_node.children.is_empty() && parent_node.lock_ref == 0 {
                self.mark_evictable(parent);
            }
        }
        evicted
    }

    /// Cuts the last `pages` pages off `key`, whose pages end at depth `end`, recording their
    /// removal newest first (as [`RadixCache::record_removed`] does), and returns the base of
    /// the first page cut. Nothing is collected on the way: a decoding rank with a full pool
    /// trims a leaf like this about once a pass.
    fn truncate_runs(
        key: &mut Vec<BlockRun>,
        pages: usize,
        end: usize,
        events: &mut Option<Vec<KvEvent>>,
    ) -> u64 {
        let mut left = pages;
        let mut end = end;
        let mut first_base = 0;
        while left > 0 {
            let last = key.last_mut().expect("truncating within the key");
            let take = left.min(last.count as usize);
            end -= take;
            if let Some(events) = events {
                events.push(KvEvent::RemovedRun {
                    base: last.base,
                    first: end,
                    count: take,
                });
            }
            first_base = last.base;
            last.count -= u32::try_from(take).expect("run lengths fit u32");
            if last.count == 0 {
                key.pop();
            }
            left -= take;
        }
        first_base
    }

    /// Every page identity held by the tree, as [`crate::tokens::block_key`]s, sorted (tests).
    #[cfg(test)]
    pub fn page_ids_in_tree(&self) -> Vec<u64> {
        use crate::tokens::block_key;
        let mut ids: Vec<u64> = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(index, _)| {
                *index != ROOT as usize && !self.vacant.contains(&(*index as NodeId))
            })
            .flat_map(|(_, node)| {
                let mut index = node.start;
                node.key.iter().flat_map(move |run| {
                    let first = index;
                    index += run.count as usize;
                    (first..index).map(move |i| block_key(run.base, i))
                })
            })
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Checks the page and size bookkeeping against a full walk (tests and debug builds).
    #[cfg(test)]
    pub fn check_invariants(&self, private_pages: usize) {
        let mut evictable = 0;
        let mut protected = 0;
        let mut leaves = 0;
        for (index, node) in self.nodes.iter().enumerate() {
            if index == ROOT as usize || self.vacant.contains(&(index as NodeId)) {
                continue;
            }
            assert_eq!(
                node.key.iter().map(|run| run.count as usize).sum::<usize>(),
                node.key_len
            );
            assert!(node.key.iter().all(|run| run.count > 0));
            if node.lock_ref == 0 {
                evictable += node.key_len;
            } else {
                protected += node.key_len;
            }
            let should_be_evictable = node.lock_ref == 0 && node.children.is_empty();
            assert_eq!(node.evictable, should_be_evictable, "node {index}");
            if node.evictable {
                leaves += 1;
                assert!(self
                    .evictable_leaves
                    .contains(&(Self::last_use(node), index as NodeId)));
            }
            let parent = &self.nodes[node.parent as usize];
            assert_eq!(node.start, parent.start + parent.key_len);
            assert_eq!(
                parent.children.get(&node.key[0].base),
                Some(&(index as NodeId))
            );
            assert!(parent.lock_ref >= node.lock_ref || node.parent == ROOT);
        }
        assert_eq!(leaves, self.evictable_leaves.len());
        assert_eq!(evictable, self.evictable_pages);
        assert_eq!(protected, self.protected_pages);
        assert_eq!(
            self.free_pages + evictable + protected + private_pages,
            self.total_pages,
            "page conservation"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::{block_key, TokenSeq};

    fn seq(tokens: &[u64]) -> TokenSeq {
        let mut s = TokenSeq::new();
        for &t in tokens {
            s.push(t);
        }
        s
    }

    /// Inserts `tokens` from the root as a finished request would: allocate its pages, hand
    /// them over.
    fn insert(cache: &mut RadixCache, tokens: &[u64]) -> Inserted {
        let s = seq(tokens);
        let p = s.blocks(cache.page_size());
        assert!(cache.allocate_pages(p.len()));
        cache.insert(p)
    }

    fn matched(cache: &mut RadixCache, tokens: &[u64]) -> usize {
        let ps = cache.page_size();
        cache.match_prefix(seq(tokens).blocks(ps)).0 * ps
    }

    fn prefix_len(cache: &RadixCache, tokens: &[u64]) -> usize {
        cache.prefix_match_len(seq(tokens).blocks(cache.page_size()))
    }

    /// The events as (stored?, page key) per page, in order.
    fn per_page(events: &[KvEvent]) -> Vec<(bool, u64)> {
        let mut out = Vec::new();
        for event in events {
            let (stored, base, first, count) = match *event {
                KvEvent::StoredRun { base, first, count } => (true, base, first, count),
                KvEvent::RemovedRun { base, first, count } => (false, base, first, count),
                other => panic!("unexpected event {other:?}"),
            };
            out.extend((first..first + count).map(|i| (stored, block_key(base, i))));
        }
        out
    }

    #[test]
    fn match_and_split() {
        let mut cache = RadixCache::new(100, 1);
        assert_eq!(cache.match_prefix(seq(&[1, 2, 3]).blocks(1)), (0, ROOT));
        insert(&mut cache, &[1, 2, 3, 4, 5]);
        assert_eq!(matched(&mut cache, &[1, 2, 3, 4, 5]), 5);
        let second = insert(&mut cache, &[1, 2, 3, 4, 5, 6, 7]);
        // The shared five pages were duplicates; only two were adopted.
        assert_eq!(second.adopted_pages, 2);
        let (len, node) = cache.match_prefix(seq(&[1, 2, 3, 4, 5, 9, 9]).blocks(1));
        assert_eq!(len, 5);
        assert_eq!(cache.edge_pages(node), 5);
        cache.check_invariants(0);
        // A match ending inside an edge splits it.
        let before = cache.num_nodes();
        let (len, node) = cache.match_prefix(seq(&[1, 2, 9]).blocks(1));
        assert_eq!(len, 2);
        assert_eq!(cache.num_nodes(), before + 1);
        assert_eq!(cache.edge_pages(node), 2);
        assert_eq!(prefix_len(&cache, &[1, 2, 3, 4, 5, 6, 7, 8]), 7);
        cache.check_invariants(0);
    }

    #[test]
    fn shared_prefixes_branch() {
        let mut cache = RadixCache::new(100, 1);
        insert(&mut cache, &[1, 2, 3, 4, 5]);
        insert(&mut cache, &[1, 2, 3, 6, 7]);
        assert_eq!(matched(&mut cache, &[1, 2, 3, 4, 5]), 5);
        assert_eq!(matched(&mut cache, &[1, 2, 3, 6, 7]), 5);
        assert_eq!(matched(&mut cache, &[1, 2, 3, 9]), 3);
        // 3 shared + 2 + 2 pages in the tree; the duplicate 3 went back to the pool.
        assert_eq!(cache.tree_pages(), 7);
        assert_eq!(cache.available_tokens(), 93);
        // Duplicate insert is idempotent.
        insert(&mut cache, &[1, 2, 3]);
        assert_eq!(cache.tree_pages(), 7);
        cache.check_invariants(0);
    }

    #[test]
    fn pages_group_tokens() {
        let mut cache = RadixCache::new(100, 4);
        insert(&mut cache, &[1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(matched(&mut cache, &[1, 2, 3, 4]), 4);
        // Only complete pages are cached.
        assert_eq!(matched(&mut cache, &[1, 2, 3, 4, 5, 6, 7, 8]), 4);
        insert(&mut cache, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(matched(&mut cache, &[1, 2, 3, 4, 5, 6, 7, 8]), 8);
        // A difference anywhere inside a page breaks the match at that page.
        assert_eq!(matched(&mut cache, &[1, 2, 3, 5]), 0);
        assert_eq!(matched(&mut cache, &[1, 2, 3, 4, 5, 6, 7, 9]), 4);
        cache.check_invariants(0);
    }

    #[test]
    fn growing_an_own_leaf_equals_the_general_insertion() {
        // A request holds the path of its prompt, then decodes tokens one and three at a time.
        let mut prompt = seq(&[1, 1, 2, 3]);
        let mut general = RadixCache::new(100, 1);
        general.record_events();
        general.track_changes();
        insert(&mut general, &[7, 7]);
        assert!(general.allocate_pages(prompt.len()));
        let tail = general.insert(prompt.blocks(1)).node;
        general.inc_lock_ref(tail);
        let mut fast = RadixCache::new(100, 1);
        fast.record_events();
        fast.track_changes();
        insert(&mut fast, &[7, 7]);
        assert!(fast.allocate_pages(prompt.len()));
        assert_eq!(fast.insert(prompt.blocks(1)).node, tail);
        fast.inc_lock_ref(tail);
        let mut first_index = 0;
        for count in [1, 3, 1] {
            let before = prompt.len();
            prompt.push_generated(9, first_index, count);
            first_index += count as u64;
            let pages = prompt.blocks(1).skip(before);
            assert!(general.allocate_pages(count) && fast.allocate_pages(count));
            let inserted = general.insert_from_node(tail, pages);
            assert_eq!(inserted.node, tail);
            let base = pages
                .base_if_in_last_run()
                .expect("generated pages end in one run");
            assert!(fast.grow_own_leaf(tail, pages.start(), base, pages.len()));
            // Every field alike: pages, runs, stamps, clock, change log and events.
            assert_eq!(format!("{fast:?}"), format!("{general:?}"));
        }
        fast.check_invariants(0);
        // A shared tail (two holders) or an inner node is refused and left as it was.
        fast.inc_lock_ref(tail);
        let unchanged = format!("{fast:?}");
        assert!(!fast.grow_own_leaf(tail, prompt.len(), 5, 1));
        assert!(!fast.grow_own_leaf(ROOT, 0, 5, 1));
        assert_eq!(format!("{fast:?}"), unchanged);
    }

    #[test]
    fn locked_tail_grows_in_place_only_when_unshared() {
        let mut cache = RadixCache::new(100, 4);
        let head_seq = seq(&[1, 2, 3, 4, 5, 6, 7, 8]);
        let head = head_seq.blocks(4);
        insert(&mut cache, &[1, 2, 3, 4]);
        let (_, tail) = cache.match_prefix(head.range(0, 1));
        cache.inc_lock_ref(tail);
        let nodes = cache.num_nodes();
        assert!(cache.allocate_pages(1));
        let grown = cache.insert_from_node(tail, head.skip(1));
        assert_eq!(grown.node, tail);
        assert_eq!(cache.num_nodes(), nodes);
        assert_eq!(cache.protected_tokens(), 8);
        cache.dec_lock_ref(tail);

        let mut cache = RadixCache::new(100, 4);
        insert(&mut cache, &[1, 2, 3, 4]);
        let (_, tail) = cache.match_prefix(head.range(0, 1));
        cache.inc_lock_ref(tail);
        cache.inc_lock_ref(tail);
        assert!(cache.allocate_pages(1));
        let grown = cache.insert_from_node(tail, head.skip(1));
        assert_ne!(grown.node, tail);
        assert_eq!(cache.num_nodes(), 3);
        assert_eq!(cache.edge_pages(tail), 1);
        assert_eq!(cache.edge_pages(grown.node), 1);
        cache.check_invariants(0);
    }

    #[test]
    fn change_log_names_the_first_page_of_each_change() {
        let mut cache = RadixCache::new(100, 1);
        insert(&mut cache, &[1, 2]);
        cache.track_changes();
        let start = cache.contents_generation();
        assert_eq!(cache.changes_since(start), Some(&[][..]));
        // A split and an access mark change nothing.
        insert(&mut cache, &[1]);
        matched(&mut cache, &[1, 2]);
        assert_eq!(cache.contents_generation(), start);
        insert(&mut cache, &[1, 5, 6]);
        assert_eq!(cache.evict(1), 1);
        let base = |tokens: &[u64], i: usize| seq(tokens).blocks(1).base(i);
        let expected = [
            ContentChange {
                depth: 1,
                base: base(&[1, 5, 6], 1),
                removed: false,
            },
            ContentChange {
                depth: 1,
                base: base(&[1, 2], 1),
                removed: true,
            },
        ];
        assert_eq!(cache.changes_since(start), Some(&expected[..]));
        assert_eq!(cache.changes_since(start + 1), Some(&expected[1..]));
        cache.forget_changes();
        assert_eq!(cache.changes_since(start), None);
        assert_eq!(cache.changes_since(start + 2), Some(&[][..]));
    }

    #[test]
    fn eviction_takes_least_recently_used_leaves() {
        let mut cache = RadixCache::new(100, 1);
        insert(&mut cache, &[1, 2, 3]);
        insert(&mut cache, &[4, 5, 6]);
        insert(&mut cache, &[7, 8, 9]);
        // Touch [1,2,3]: now [4,5,6] is the oldest.
        assert_eq!(matched(&mut cache, &[1, 2, 3]), 3);
        assert_eq!(cache.evict(3), 3);
        assert_eq!(prefix_len(&cache, &[4, 5, 6]), 0);
        assert_eq!(prefix_len(&cache, &[1, 2, 3]), 3);
        assert_eq!(prefix_len(&cache, &[7, 8, 9]), 3);
        // Asking for less than a leaf trims its newest pages only.
        assert_eq!(cache.evict(1), 1);
        assert_eq!(prefix_len(&cache, &[7, 8, 9]), 2);
        cache.check_invariants(0);
    }

    #[test]
    fn moving_a_lock_down_equals_locking_the_new_end_and_unlocking_the_old() {
        // Two caches alike: a request holds [1, 2] (shared with the finished [1, 2, 3]) and
        // publishes its pages [4, 5], ending on the node below it (grown in place).
        let build = || {
            let mut cache = RadixCache::new(100, 1);
            insert(&mut cache, &[1, 2, 3]);
            insert(&mut cache, &[1, 2, 4]);
            let (_, held) = cache.match_prefix(seq(&[1, 2]).blocks(1));
            cache.inc_lock_ref(held);
            assert!(cache.allocate_pages(2));
            let tokens = seq(&[1, 2, 4, 5]);
            let end = cache.insert_from_node(held, tokens.blocks(1).skip(2)).node;
            (cache, held, end)
        };
        let (mut moved, held, end) = build();
        let (mut general, _, _) = build();
        assert_ne!(end, held);
        moved.move_lock_down(held, end);
        general.inc_lock_ref(end);
        general.dec_lock_ref(held);
        // Lock counts, page counts and the evictable leaves alike.
        assert_eq!(format!("{moved:?}"), format!("{general:?}"));
        assert_eq!(moved.lock_ref(end), 1);
        assert_eq!(moved.lock_ref(held), 1);
        assert_eq!(moved.protected_tokens(), 4);
        moved.check_invariants(0);
        // Only [3] is evictable now.
        assert_eq!(moved.evict(100), 1);
    }

    #[test]
    fn a_match_marks_the_inner_nodes_it_passes() {
        let mut cache = RadixCache::new(100, 1);
        // [1, 2] becomes an inner node with the leaves [3] and [4].
        insert(&mut cache, &[1, 2, 3]);
        insert(&mut cache, &[1, 2, 4]);
        insert(&mut cache, &[7, 8]);
        // [7, 8] is used (and kept from eviction), then the path through [1, 2] to [3].
        let (_, held) = cache.match_prefix(seq(&[7, 8]).blocks(1));
        cache.inc_lock_ref(held);
        assert_eq!(matched(&mut cache, &[1, 2, 3]), 3);
        // The leaves [4] and [3] go; [1, 2] is a leaf now.
        assert_eq!(cache.evict(2), 2);
        assert_eq!(prefix_len(&cache, &[1, 2, 3]), 2);
        assert_eq!(prefix_len(&cache, &[1, 2, 4]), 2);
        cache.dec_lock_ref(held);
        // [1, 2] was used after [7, 8] (by the match that passed it), so [7, 8] goes first.
        assert_eq!(cache.evict(2), 2);
        assert_eq!(prefix_len(&cache, &[7, 8]), 0);
        assert_eq!(prefix_len(&cache, &[1, 2]), 2);
        cache.check_invariants(0);
    }

    #[test]
    fn locked_paths_survive_eviction_and_parents_become_leaves() {
        let mut cache = RadixCache::new(100, 1);
        insert(&mut cache, &[1, 2, 3, 4, 5]);
        insert(&mut cache, &[1, 2, 3, 6, 7]);
        insert(&mut cache, &[9, 9]);
        let (_, locked) = cache.match_prefix(seq(&[9, 9]).blocks(1));
        cache.inc_lock_ref(locked);
        assert_eq!(cache.evictable_tokens(), 7);
        assert_eq!(cache.protected_tokens(), 2);
        // Both branches go, then their shared parent (now an unlocked leaf).
        assert_eq!(cache.evict(100), 7);
        assert_eq!(prefix_len(&cache, &[1]), 0);
        assert_eq!(prefix_len(&cache, &[9, 9]), 2);
        assert_eq!(cache.available_tokens(), 98);
        cache.dec_lock_ref(locked);
        assert_eq!(cache.evictable_tokens(), 2);
        cache.check_invariants(0);
    }

    #[test]
    fn shared_prefix_lock_counts() {
        let mut cache = RadixCache::new(100, 1);
        insert(&mut cache, &[1, 2, 3, 4, 5]);
        insert(&mut cache, &[1, 2, 3, 6, 7]);
        let (_, a) = cache.match_prefix(seq(&[1, 2, 3, 4, 5]).blocks(1));
        let (_, b) = cache.match_prefix(seq(&[1, 2, 3, 6, 7]).blocks(1));
        cache.inc_lock_ref(a);
        cache.inc_lock_ref(b);
        assert_eq!(cache.protected_tokens(), 7);
        cache.dec_lock_ref(a);
        assert_eq!(cache.protected_tokens(), 5);
        assert_eq!(cache.evict(100), 2);
        cache.dec_lock_ref(b);
        assert_eq!(cache.protected_tokens(), 0);
        cache.check_invariants(0);
    }

    /// Applies `events` to `mirror` strictly: a stored identity must be new, a removed one known.
    fn replay(mirror: &mut std::collections::HashSet<u64>, events: &[KvEvent]) {
        for (stored, hash) in per_page(events) {
            if stored {
                assert!(mirror.insert(hash), "stored twice: {hash}");
            } else {
                assert!(mirror.remove(&hash), "unknown: {hash}");
            }
        }
    }

    /// Replays the recorded events into `mirror`, checks it against the tree, and returns how
    /// many pages were removed.
    fn assert_mirrors(
        cache: &mut RadixCache,
        mirror: &mut std::collections::HashSet<u64>,
    ) -> usize {
        let mut events = Vec::new();
        cache.drain_events_into(&mut events);
        replay(mirror, &events);
        let mut replayed: Vec<u64> = mirror.iter().copied().collect();
        replayed.sort_unstable();
        assert_eq!(replayed, cache.page_ids_in_tree());
        per_page(&events)
            .iter()
            .filter(|(stored, _)| !stored)
            .count()
    }

    #[test]
    fn events_follow_inserts_and_evictions() {
        let mut cache = RadixCache::new(100, 2);
        cache.record_events();
        let mut mirror = std::collections::HashSet::new();
        let a = seq(&[1, 2, 3, 4, 5, 6]).block_keys(2);
        insert(&mut cache, &[1, 2, 3, 4, 5, 6]);
        let mut events = Vec::new();
        cache.drain_events_into(&mut events);
        let stored: Vec<(bool, u64)> = a.iter().map(|&hash| (true, hash)).collect();
        assert_eq!(per_page(&events), stored);
        replay(&mut mirror, &events);
        // A duplicate insert and a split change nothing.
        insert(&mut cache, &[1, 2, 3, 4]);
        cache.match_prefix(seq(&[1, 2, 9, 9]).blocks(2));
        cache.drain_events_into(&mut events);
        assert!(events.is_empty());
        // A branch stores only its new pages; trimming a leaf removes its newest pages.
        insert(&mut cache, &[1, 2, 3, 4, 7, 7, 8, 8]);
        let b = seq(&[1, 2, 3, 4, 7, 7, 8, 8]).block_keys(2);
        cache.drain_events_into(&mut events);
        assert_eq!(per_page(&events), vec![(true, b[2]), (true, b[3])]);
        replay(&mut mirror, &events);
        assert_eq!(cache.evict(2), 2);
        cache.drain_events_into(&mut events);
        assert_eq!(per_page(&events), vec![(false, a[2])]);
        replay(&mut mirror, &events);
        assert_mirrors(&mut cache, &mut mirror);
        assert_eq!(cache.evict(100), 8);
        assert_mirrors(&mut cache, &mut mirror);
        assert!(mirror.is_empty());
    }

    #[test]
    fn nothing_is_recorded_unless_asked() {
        let mut cache = RadixCache::new(100, 1);
        insert(&mut cache, &[1, 2, 3]);
        cache.evict(100);
        let mut events = vec![KvEvent::Stored { hash: 7 }];
        cache.drain_events_into(&mut events);
        assert!(events.is_empty());
        assert!(cache.events.is_none());
    }

    #[test]
    fn replayed_events_equal_the_tree_after_random_operations() {
        let mut state = 0x9E37_79B9_u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        for page_size in [1, 2, 4] {
            let mut cache = RadixCache::new(60 * page_size, page_size);
            cache.record_events();
            let mut mirror = std::collections::HashSet::new();
            // Requests holding a locked path: (node, private pages, tokens, cached pages).
            let mut held: Vec<(NodeId, usize, TokenSeq, usize)> = Vec::new();
            let mut removed = 0;
            let mut largest = 0;
            for _ in 0..2000 {
                let tokens: Vec<u64> = (0..1 + next(12) * page_size as u64)
                    .map(|i| if i < next(10) { 1 } else { next(3) })
                    .collect();
                let ids = seq(&tokens);
                let blocks = ids.blocks(page_size);
                match next(6) {
                    // A finished request hands over its pages.
                    0 => {
                        let free = cache.available_tokens() / page_size;
                        if blocks.len() > free {
                            cache.evict((blocks.len() - free) * page_size);
                        }
                        if cache.allocate_pages(blocks.len()) {
                            cache.insert(blocks);
                        }
                    }
                    // A request locks its cached prefix and takes pages for the rest.
                    1 | 2 => {
                        let (matched, node) = cache.match_prefix(blocks);
                        cache.inc_lock_ref(node);
                        let fresh = blocks.len() - matched;
                        let free = cache.available_tokens() / page_size;
                        if fresh > free {
                            cache.evict((fresh - free) * page_size);
                        }
                        if cache.allocate_pages(fresh) {
                            held.push((node, fresh, ids.clone(), matched));
                        } else {
                            cache.dec_lock_ref(node);
                        }
                    }
                    // A held request publishes some of its pages (moving its lock).
                    3 if !held.is_empty() => {
                        let index = next(held.len() as u64) as usize;
                        let (node, private, ids, cached) = &mut held[index];
                        let upto = *cached + next(*private as u64 + 1) as usize;
                        let inserted = cache
                            .insert_from_node(*node, ids.blocks(page_size).range(*cached, upto));
                        if inserted.node != *node {
                            cache.inc_lock_ref(inserted.node);
                            cache.dec_lock_ref(*node);
                        }
                        *node = inserted.node;
                        *private -= upto - *cached;
                        *cached = upto;
                    }
                    // A held request finishes (publishing everything) or is retracted.
                    4 if !held.is_empty() => {
                        let index = next(held.len() as u64) as usize;
                        let (node, private, ids, cached) = held.swap_remove(index);
                        if next(2) == 0 {
                            cache.insert_from_node(node, ids.blocks(page_size).skip(cached));
                        } else {
                            cache.free_pages(private);
                        }
                        cache.dec_lock_ref(node);
                    }
                    _ => {
                        cache.evict(next(20) as usize * page_size);
                    }
                }
                let private: usize = held.iter().map(|h| h.1).sum();
                cache.check_invariants(private);
                removed += assert_mirrors(&mut cache, &mut mirror);
                largest = largest.max(mirror.len());
            }
            // The pool was under pressure: the tree filled up and was evicted from many times.
            assert!(removed > 200, "removed {removed}");
            assert!(largest > 20, "largest {largest}");
        }
    }

    #[test]
    fn evictable_size_counts_unlocked_inner_nodes() {
        let mut cache = RadixCache::new(16, 4);
        insert(&mut cache, &[1; 8]);
        insert(&mut cache, &[1, 1, 1, 1, 2, 2, 2, 2]);
        assert_eq!(cache.evictable_tokens(), 12);
        assert_eq!(cache.evict(12), 12);
        assert_eq!(cache.available_tokens(), 16);
        cache.check_invariants(0);
    }
}
