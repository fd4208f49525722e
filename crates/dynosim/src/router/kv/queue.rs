//! The router queue: requests held back while every worker is busy for their class.
//!
//! Each class keeps a priority heap ordered by (`strict_priority` desc, policy score desc,
//! enqueue order asc). Classes share the dispatch slots by deficit round robin: a visit adds
//! the class's quantum to its deficit and serves the head when its cost (uncached prompt
//! tokens, at least 1) fits. A class left with a positive deficit after a serve is tried first
//! on the next pop; that carry is dropped by any pop that serves nothing, as in the reference,
//! so in practice classes alternate per drain rather than get quantum-sized bursts.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::config::router_policy::{PolicyClass, PolicyProfile};
use crate::config::RouterQueuePolicy;

/// The prompt's size as the queue sees it: raw, cached (best registered worker) and uncached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueSnapshot {
    pub raw_isl_tokens: usize,
    pub cached_tokens: usize,
    pub uncached_tokens: usize,
    /// What serving the request costs in the round robin: uncached tokens, at least 1.
    pub cost: usize,
}

impl QueueSnapshot {
    pub fn new(raw_isl_tokens: usize, cached_tokens: usize) -> Self {
        let cached_tokens = cached_tokens.min(raw_isl_tokens);
        let uncached_tokens = raw_isl_tokens - cached_tokens;
        Self {
            raw_isl_tokens,
            cached_tokens,
            uncached_tokens,
            cost: uncached_tokens.max(1),
        }
    }
}

/// A class's queue limit was reached; the request is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRejection {
    pub class: String,
    /// `requests`, `raw_isl_tokens` or `cached_tokens`.
    pub limit_kind: &'static str,
    pub current: usize,
    pub limit: usize,
}

impl std::fmt::Display for QueueRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "router policy class {:?} queue {} limit reached (current={}, limit={})",
            self.class, self.limit_kind, self.current, self.limit
        )
    }
}

/// How a request is ranked within its class.
#[derive(Clone, Copy, Debug)]
pub struct QueueRank {
    /// Seconds since the start of the replay at enqueue.
    pub arrival_s: f64,
    /// Trace `priority` (negative values count as 0).
    pub priority: i32,
    pub strict_priority: u32,
}

/// The policy score: larger is served first.
fn policy_score(policy: RouterQueuePolicy, snapshot: QueueSnapshot, rank: QueueRank) -> f64 {
    let jump = f64::from(rank.priority.max(0));
    let t = rank.arrival_s.max(0.0);
    match policy {
        // Priority is a head start in seconds.
        RouterQueuePolicy::Fcfs => jump - t,
        RouterQueuePolicy::Lcfs => jump + t,
        RouterQueuePolicy::Wspt => (1.0 + jump) / snapshot.cost as f64,
    }
}

struct Entry<T> {
    strict_priority: u32,
    score: f64,
    seq: u64,
    snapshot: QueueSnapshot,
    payload: T,
}

impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.strict_priority
            .cmp(&other.strict_priority)
            // Scores are never NaN; equal values (including +0 and -0) tie.
            .then_with(|| {
                self.score
                    .partial_cmp(&other.score)
                    .unwrap_or(Ordering::Equal)
            })
            .then_with(|| other.seq.cmp(&self.seq))
    }
}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T> Eq for Entry<T> {}

#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    requests: usize,
    raw_isl_tokens: usize,
    cached_tokens: usize,
}

struct ClassQueue<T> {
    config: PolicyClass,
    heap: BinaryHeap<Entry<T>>,
    totals: Totals,
    deficit: usize,
}

impl<T> ClassQueue<T> {
    fn rejection(&self, targets: usize) -> Option<QueueRejection> {
        let checks = [
            (
                "requests",
                self.totals.requests,
                self.config.request_queue_limit_per_worker,
            ),
            (
                "raw_isl_tokens",
                self.totals.raw_isl_tokens,
                self.config.raw_isl_token_queue_limit_per_worker,
            ),
            (
                "cached_tokens",
                self.totals.cached_tokens,
                self.config.cached_token_queue_limit_per_worker,
            ),
        ];
        checks.into_iter().find_map(|(kind, current, per_worker)| {
            let limit = per_worker?.saturating_mul(targets);
            (current >= limit).then(|| QueueRejection {
                class: self.config.name.clone(),
                limit_kind: kind,
                current,
                limit,
            })
        })
    }
}

/// Pending requests of every class of one profile.
pub struct PolicyQueue<T> {
    classes: Vec<ClassQueue<T>>,
    cursor: usize,
    carry: Option<usize>,
    next_seq: u64,
    len: usize,
    /// Per class, the cost of its dispatchable head during one pop.
    candidates: Vec<Option<usize>>,
}

impl<T> PolicyQueue<T> {
    pub fn new(profile: &PolicyProfile) -> Self {
        Self {
            classes: profile
                .classes()
                .iter()
                .map(|config| ClassQueue {
                    config: config.clone(),
                    heap: BinaryHeap::new(),
                    totals: Totals::default(),
                    deficit: 0,
                })
                .collect(),
            cursor: 0,
            carry: None,
            next_seq: 0,
            len: 0,
            candidates: vec![None; profile.classes().len()],
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when `class` holds requests (a new arrival of that class may not overtake them).
    pub fn has_backlog(&self, class: usize) -> bool {
        !self.classes[class].heap.is_empty()
    }

    /// Queues `payload` in `class`, unless one of the class's limits (per target, times
    /// `targets`) is already reached.
    pub fn enqueue(
        &mut self,
        class: usize,
        targets: usize,
        snapshot: QueueSnapshot,
        rank: QueueRank,
        payload: T,
    ) -> Result<(), QueueRejection> {
        let queue = &mut self.classes[class];
        if let Some(rejection) = queue.rejection(targets) {
            return Err(rejection);
        }
        queue.heap.push(Entry {
            strict_priority: rank.strict_priority,
            score: policy_score(queue.config.queue_policy, snapshot, rank),
            seq: self.next_seq,
            snapshot,
            payload,
        });
        self.next_seq += 1;
        queue.totals.requests += 1;
        queue.totals.raw_isl_tokens += snapshot.raw_isl_tokens;
        queue.totals.cached_tokens += snapshot.cached_tokens;
        self.len += 1;
        Ok(())
    }

    /// The head's cost if the class has a head and `dispatchable` allows the class.
    fn candidate(
        &self,
        class: usize,
        dispatchable: &mut impl FnMut(&PolicyClass) -> bool,
    ) -> Option<usize> {
        let queue = &self.classes[class];
        let head = queue.heap.peek()?;
        dispatchable(&queue.config).then_some(head.snapshot.cost)
    }

    fn reset_if_empty(&mut self, class: usize) {
        let queue = &mut self.classes[class];
        if queue.heap.is_empty() {
            queue.deficit = 0;
        }
    }

    /// The next request to dispatch, by deficit round robin over the classes whose head
    /// `dispatchable` allows; `None` when no class may dispatch.
    pub fn pop_next(&mut self, mut dispatchable: impl FnMut(&PolicyClass) -> bool) -> Option<T> {
        if self.len == 0 {
            self.carry = None;
            return None;
        }
        let n = self.classes.len();
        self.candidates.iter_mut().for_each(|c| *c = None);
        let carried = self.carry.take();
        if let Some(class) = carried {
            let candidate = self.candidate(class, &mut dispatchable);
            if let Some(cost) = candidate {
                if cost <= self.classes[class].deficit {
                    return Some(self.serve(class));
                }
            }
            self.candidates[class] = candidate;
            self.reset_if_empty(class);
        }
        for offset in 0..n {
            let class = (self.cursor + offset) % n;
            let candidate = if carried == Some(class) {
                self.candidates[class]
            } else {
                self.candidate(class, &mut dispatchable)
            };
            let Some(cost) = candidate else {
                self.reset_if_empty(class);
                continue;
            };
            self.candidates[class] = Some(cost);
            let queue = &mut self.classes[class];
            if cost <= queue.deficit {
                return Some(self.serve(class));
            }
            queue.deficit = queue.deficit.saturating_add(queue.config.quantum);
            if cost <= queue.deficit {
                return Some(self.serve(class));
            }
        }
        // Nobody could afford its head: add the fewest whole rounds that make one affordable.
        let rounds = self
            .candidates
            .iter()
            .enumerate()
            .filter_map(|(class, cost)| {
                let queue = &self.classes[class];
                Some(
                    cost.as_ref()?
                        .saturating_sub(queue.deficit)
                        .div_ceil(queue.config.quantum),
                )
            })
            .min()?;
        for (class, cost) in self.candidates.iter().enumerate() {
            if cost.is_some() {
                let queue = &mut self.classes[class];
                queue.deficit = queue
                    .deficit
                    .saturating_add(queue.config.quantum.saturating_mul(rounds));
            }
        }
        for offset in 0..n {
            let class = (self.cursor + offset) % n;
            if self.candidates[class].is_some_and(|cost| cost <= self.classes[class].deficit) {
                return Some(self.serve(class));
            }
        }
        None
    }

    fn serve(&mut self, class: usize) -> T {
        self.cursor = (class + 1) % self.classes.len();
        let queue = &mut self.classes[class];
        let entry = queue.heap.pop().expect("served class has a head");
        queue.deficit = queue.deficit.saturating_sub(entry.snapshot.cost);
        queue.totals.requests -= 1;
        queue.totals.raw_isl_tokens -= entry.snapshot.raw_isl_tokens;
        queue.totals.cached_tokens -= entry.snapshot.cached_tokens;
        self.len -= 1;
        if queue.heap.is_empty() {
            queue.deficit = 0;
        } else {
            self.carry = (queue.deficit > 0).then_some(class);
        }
        entry.payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(arrival_s: f64, priority: i32, strict_priority: u32) -> QueueRank {
        QueueRank {
            arrival_s,
            priority,
            strict_priority,
        }
    }

    fn single(policy: RouterQueuePolicy) -> PolicyQueue<u32> {
        PolicyQueue::new(&PolicyProfile::synthetic(Some(0.0), policy))
    }

    fn drain(queue: &mut PolicyQueue<u32>) -> Vec<u32> {
        std::iter::from_fn(|| queue.pop_next(|_| true)).collect()
    }

    #[test]
    fn orders_by_each_policy_and_priority() {
        // (id, arrival s, uncached tokens, priority, strict)
        let requests = [
            (1, 0.0, 4096, 0, 0),
            (2, 1.0, 1024, 0, 0),
            (3, 2.0, 2048, 0, 0),
        ];
        let order = |policy, extra: &[(u32, f64, usize, i32, u32)]| {
            let mut queue = single(policy);
            for &(id, t, tokens, p, s) in requests.iter().chain(extra) {
                queue
                    .enqueue(0, 4, QueueSnapshot::new(tokens, 0), rank(t, p, s), id)
                    .unwrap();
            }
            drain(&mut queue)
        };
        assert_eq!(order(RouterQueuePolicy::Fcfs, &[]), [1, 2, 3]);
        assert_eq!(order(RouterQueuePolicy::Lcfs, &[]), [3, 2, 1]);
        assert_eq!(order(RouterQueuePolicy::Wspt, &[]), [2, 3, 1]);
        // fcfs: priority 5 is a 5 s head start; strict priority beats any score.
        let late = [(4, 3.0, 512, 5, 0), (5, 9.0, 512, 0, 1)];
        assert_eq!(order(RouterQueuePolicy::Fcfs, &late), [5, 4, 1, 2, 3]);
        // wspt: (1 + priority) / cost: 3/8192 beats 1/4096 but not 1/2048.
        let weighted = [(4, 3.0, 8192, 2, 0)];
        assert_eq!(order(RouterQueuePolicy::Wspt, &weighted), [2, 3, 4, 1]);
        // Negative priorities count as 0; equal scores keep enqueue order.
        let same = [(4, 0.0, 4096, -3, 0)];
        assert_eq!(order(RouterQueuePolicy::Fcfs, &same), [1, 4, 2, 3]);
    }

    #[test]
    fn limits_reject_at_the_per_target_bound() {
        let profile_class = PolicyProfile::synthetic(Some(0.0), RouterQueuePolicy::Fcfs);
        let mut queue: PolicyQueue<u32> = PolicyQueue::new(&profile_class);
        queue.classes[0].config.request_queue_limit_per_worker = Some(1);
        let snapshot = QueueSnapshot::new(100, 0);
        queue.enqueue(0, 2, snapshot, rank(0.0, 0, 0), 1).unwrap();
        queue.enqueue(0, 2, snapshot, rank(0.0, 0, 0), 2).unwrap();
        let rejection = queue
            .enqueue(0, 2, snapshot, rank(0.0, 0, 0), 3)
            .unwrap_err();
        assert_eq!(
            rejection.to_string(),
            "router policy class \"default\" queue requests limit reached (current=2, limit=2)"
        );
        assert_eq!(queue.pop_next(|_| false), None);
        assert_eq!(drain(&mut queue), [1, 2]);
    }

    /// Two classes with quanta 6144 and 12288 and 4608-token heads: every drain admits one
    /// request and then fails (the worker is busy again), dropping the carry, so the classes
    /// alternate: 2, 6, 3, 7, ... as the reference does.
    #[test]
    fn deficit_round_robin_alternates_when_the_carry_is_dropped() {
        let mut profile = PolicyProfile::synthetic(Some(0.0), RouterQueuePolicy::Fcfs);
        let mut b = profile.classes[0].clone();
        profile.classes[0].quantum = 6144;
        b.name = "b".into();
        b.quantum = 12288;
        profile.classes.push(b);
        // Requests 2-5 in class a, 6-9 in class b, each arriving at its id in seconds.
        let filled = || {
            let mut queue: PolicyQueue<u32> = PolicyQueue::new(&profile);
            for id in 2..10 {
                let class = usize::from(id >= 6);
                let t = f64::from(id);
                queue
                    .enqueue(class, 1, QueueSnapshot::new(4608, 0), rank(t, 0, 0), id)
                    .unwrap();
            }
            queue
        };
        let mut queue = filled();
        let mut order = Vec::new();
        while let Some(id) = queue.pop_next(|_| true) {
            order.push(id);
            assert_eq!(queue.pop_next(|_| false), None);
        }
        assert_eq!(order, [2, 6, 3, 7, 4, 8, 5, 9]);
        // Without the failing pops, the carry gives quantum-sized bursts.
        assert_eq!(drain(&mut filled()), [2, 6, 7, 3, 8, 9, 4, 5]);
    }
}
