//! The loops' event queues, both ordered as the reference orders events: by time, ties in the
//! order they were scheduled.
//!
//! INTERFACE
//! - [`EventQueue`]: a heap of timed events of any kind (the disaggregated loop's events, a
//!   pool's KV-event publications).
//! - [`SlotQueue`]: at most one event per slot (the aggregated pass completions), scanned
//!   rather than heaped, its order given by where each event was scheduled.
//! - [`earliest`]: the earlier of two optional times.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Something scheduled to happen at `at_ms`; equal times keep scheduling order.
#[derive(Clone, Copy, Debug)]
struct Timed<T> {
    at_ms: f64,
    seq: u64,
    what: T,
}

impl<T> PartialEq for Timed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T> Eq for Timed<T> {}
impl<T> PartialOrd for Timed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Timed<T> {
    /// Reversed for a min-heap: earliest time first, then scheduling order.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at_ms
            .total_cmp(&self.at_ms)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// Future events in time order, ties in the order they were scheduled.
#[derive(Debug)]
pub(super) struct EventQueue<T> {
    heap: BinaryHeap<Timed<T>>,
    next_seq: u64,
}

impl<T: Copy> EventQueue<T> {
    pub(super) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            next_seq: 0,
        }
    }

    pub(super) fn push(&mut self, at_ms: f64, what: T) {
        self.heap.push(Timed {
            at_ms,
            seq: self.next_seq,
            what,
        });
        self.next_seq += 1;
    }

    /// The next event: its time and what it is.
    pub(super) fn peek(&self) -> Option<(f64, T)> {
        self.heap.peek().map(|timed| (timed.at_ms, timed.what))
    }

    /// Pops the next event if it happens at or before `now_ms` and `accept` takes it.
    pub(super) fn pop_due_if(&mut self, now_ms: f64, accept: impl Fn(&T) -> bool) -> Option<T> {
        let next = self.heap.peek()?;
        if next.at_ms > now_ms || !accept(&next.what) {
            return None;
        }
        self.heap.pop().map(|timed| timed.what)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// At most one future event per slot (a worker's pass completion), in time order, ties in
/// the order they were scheduled. A handful of workers beat a heap when scanned: a push is one
/// store (and one comparison with the earliest), a pop one scan of integer keys.
///
/// Unlike an [`EventQueue`], the caller says where each event was scheduled — the model
/// time it was scheduled at and its rank among the events scheduled at that time — rather
/// than the queue counting pushes: an event scheduled ahead of the loop (a pass started by
/// running ahead) then still sorts where the loop would have scheduled it. Pushed in
/// nondecreasing (time, rank) order, the queue pops exactly as an [`EventQueue`] does.
#[derive(Debug, Default)]
pub(super) struct SlotQueue {
    /// Per slot: its event's position in the order, [`ordered_bits`] of its time and of the
    /// time it was scheduled at, then its rank ((`u128::MAX`, _): no event).
    keys: Vec<(u128, u64)>,
    /// Per slot: when its event happens.
    times: Vec<f64>,
    /// The slot with the earliest event.
    earliest: Option<usize>,
}

const NO_EVENT: (u128, u64) = (u128::MAX, u64::MAX);

/// A time's bits mapped so that unsigned order is `f64::total_cmp`'s.
fn ordered_bits(at_ms: f64) -> u64 {
    let bits = at_ms.to_bits();
    // Negative times: flip every bit; others: set the sign bit.
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

impl SlotQueue {
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// Schedules `slot`'s event at `at_ms`, as the `rank`-th event scheduled at model time
    /// `scheduled_ms`; the slot must have none.
    pub(super) fn push(&mut self, at_ms: f64, scheduled_ms: f64, rank: u64, slot: usize) {
        if slot >= self.keys.len() {
            self.keys.resize(slot + 1, NO_EVENT);
            self.times.resize(slot + 1, 0.0);
        }
        debug_assert_eq!(self.keys[slot], NO_EVENT, "one event per slot");
        let key = (
            u128::from(ordered_bits(at_ms)) << 64 | u128::from(ordered_bits(scheduled_ms)),
            rank,
        );
        self.keys[slot] = key;
        self.times[slot] = at_ms;
        if self
            .earliest
            .is_none_or(|earliest| key < self.keys[earliest])
        {
            self.earliest = Some(slot);
        }
    }

    /// The next event: its time and slot.
    pub(super) fn peek(&self) -> Option<(f64, usize)> {
        self.earliest.map(|slot| (self.times[slot], slot))
    }

    /// Pops the next event if it happens at or before `now_ms`.
    #[inline]
    pub(super) fn pop_due(&mut self, now_ms: f64) -> Option<usize> {
        let (at_ms, slot) = self.peek()?;
        if at_ms > now_ms {
            return None;
        }
        self.keys[slot] = NO_EVENT;
        let mut earliest = None;
        let mut earliest_key = NO_EVENT;
        for (slot, &key) in self.keys.iter().enumerate() {
            if key < earliest_key {
                earliest_key = key;
                earliest = Some(slot);
            }
        }
        self.earliest = earliest;
        Some(slot)
    }
}

/// The earlier of two optional times (`f64::min` of those present, in this order).
pub(super) fn earliest(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordered_bits_sort_times_as_total_cmp_does() {
        let times = [
            f64::NEG_INFINITY,
            -1.5,
            -0.0,
            0.0,
            f64::MIN_POSITIVE,
            1.0,
            1.0 + f64::EPSILON,
            1e300,
            f64::INFINITY,
        ];
        for &a in &times {
            for &b in &times {
                for (sa, sb) in [(0, 1), (1, 0), (5, 5)] {
                    // Earlier time first, then lower sequence: the order the heap pops.
                    let pop_order = a.total_cmp(&b).then(sa.cmp(&sb));
                    assert_eq!(
                        (ordered_bits(a), sa).cmp(&(ordered_bits(b), sb)),
                        pop_order,
                        "{a} {b}"
                    );
                }
            }
        }
    }

    proptest! {
        /// The slot queue pops in exactly the heap's order, ties by scheduling order
        /// included, whatever the pushes (few distinct times, so that ties are common).
        #[test]
        fn slot_queue_pops_in_event_queue_order(
            steps in proptest::collection::vec((0usize..6, 0u8..4, any::<bool>()), 1..200),
        ) {
            let mut slots = SlotQueue::new();
            let mut heap = EventQueue::new();
            let mut busy = [false; 6];
            let mut now_ms = 0.0;
            let mut rank = 0;
            for (slot, delay, advance) in steps {
                if !busy[slot] {
                    let at_ms = now_ms + f64::from(delay);
                    slots.push(at_ms, now_ms, rank, slot);
                    rank += 1;
                    heap.push(at_ms, slot);
                    busy[slot] = true;
                }
                prop_assert_eq!(slots.peek(), heap.peek());
                if advance {
                    now_ms += 1.0;
                    rank = 0;
                    loop {
                        let popped = slots.pop_due(now_ms);
                        prop_assert_eq!(popped, heap.pop_due_if(now_ms, |_| true));
                        let Some(slot) = popped else { break };
                        busy[slot] = false;
                    }
                }
            }
        }
    }
}
