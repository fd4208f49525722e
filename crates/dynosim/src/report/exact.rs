//! Exact statistics of per-request values (TTFT, TTST, TPOT, E2E) in bounded-size form.
//!
//! INTERFACE: [`ExactValues::add`] one value per completed request, in any order;
//! [`ExactValues::finish`] gives the nine statistics, exactly as over the full list of values:
//! min, max and the percentiles are values of the list (rank `(n-1)·p/100` rounded half away
//! from zero, as `stats::rounded_rank`), the mean and the population standard deviation are
//! computed from every value.
//!
//! Why this shape: a run of ten million requests would hold 320 MB as four `f64` per request.
//! Percentiles are properties of the multiset, not of any order, so values are kept sorted in
//! compressed blocks: a block of up to [`BLOCK_VALUES`] values is sorted, and each distinct
//! value is stored as the difference of its order-preserving 64-bit key from the previous one
//! (LEB128), followed by how many more times it repeats. Simulated latencies cluster (one pass
//! duration, read off different absolute times, differs only in its last bits), so the
//! differences are short; a value that repeats costs one byte.
//!
//! The mean and the standard deviation are summed in ascending value order with compensated
//! (Shewchuk) partial sums, so they do not depend on the order in which requests completed and
//! are at least as accurate as a plain sum in request order (what the collector did before it
//! stopped keeping every request; the low bits may differ from that, see docs/differences.md).

use super::stats::{rounded_rank, DistributionStats};

/// Values gathered before a block is sorted and compressed.
pub const BLOCK_VALUES: usize = 1 << 18;

/// The exact multiset of one distribution's values.
#[derive(Debug, Default)]
pub struct ExactValues {
    /// Values not yet in a block.
    pending: Vec<f64>,
    blocks: Vec<Block>,
    count: usize,
}

/// A sorted run of values: `(key delta, extra repeats)` pairs, LEB128-encoded.
#[derive(Debug)]
struct Block {
    bytes: Box<[u8]>,
    len: usize,
}

impl ExactValues {
    pub fn new() -> Self {
        Self::default()
    }

    /// Values added so far.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes held (compressed blocks and the pending buffer), for the memory benchmarks.
    pub fn held_bytes(&self) -> usize {
        self.pending.capacity() * 8 + self.blocks.iter().map(|b| b.bytes.len()).sum::<usize>()
    }

    pub fn add(&mut self, value: f64) {
        self.pending.push(value);
        self.count += 1;
        if self.pending.len() >= BLOCK_VALUES {
            self.seal();
        }
    }

    /// Sorts and compresses the pending values into a block.
    fn seal(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let mut keys: Vec<u64> = self.pending.iter().map(|v| order_key(*v)).collect();
        keys.sort_unstable();
        let mut bytes = Vec::with_capacity(keys.len() * 2);
        let mut previous = 0u64;
        let mut at = 0;
        while at < keys.len() {
            let key = keys[at];
            let repeats = keys[at..].iter().take_while(|k| **k == key).count();
            write_varint(&mut bytes, key - previous);
            write_varint(&mut bytes, (repeats - 1) as u64);
            previous = key;
            at += repeats;
        }
        self.blocks.push(Block {
            bytes: bytes.into_boxed_slice(),
            len: keys.len(),
        });
        self.pending = Vec::new();
    }

    /// Calls `f` with every distinct value in ascending order (total order: -0.0 before 0.0)
    /// and how many times it occurs in a row (a value held by several runs comes once per
    /// run, in no particular order among its copies: copies are the same bits), given the
    /// pending values' keys sorted.
    fn for_each_ascending(&self, pending: &[u64], mut f: impl FnMut(f64, u64)) {
        if self.blocks.is_empty() {
            // One sorted run: no merge.
            let mut at = 0;
            while at < pending.len() {
                let key = pending[at];
                let repeats = pending[at..].iter().take_while(|k| **k == key).count();
                f(from_order_key(key), repeats as u64);
                at += repeats;
            }
            return;
        }
        let mut cursors: Vec<Cursor<'_>> = self.blocks.iter().map(Cursor::new).collect();
        cursors.push(Cursor::from_sorted(pending));
        merge_runs(cursors, |key, count| f(from_order_key(key), count));
    }

    /// The nine statistics; all zeros when empty. Two passes over the values in ascending
    /// order: the sum, the extremes and the ranks, then the squared deviations from the mean.
    pub fn finish(self) -> DistributionStats {
        if self.count == 0 {
            return DistributionStats::default();
        }
        let n = self.count;
        let mut pending: Vec<u64> = self.pending.iter().map(|v| order_key(*v)).collect();
        pending.sort_unstable();
        let ranks = [50.0, 75.0, 90.0, 95.0, 99.0].map(|p| rounded_rank(n, p));
        let mut at_rank = [0.0; 5];
        let mut sum = CompensatedSum::default();
        let (mut min, mut max) = (0.0, 0.0);
        // Values before the current run of copies.
        let mut index = 0;
        self.for_each_ascending(&pending, |v, count| {
            let next = index + count as usize;
            if index == 0 {
                min = v;
            }
            if next == n {
                max = v;
            }
            for (slot, rank) in at_rank.iter_mut().zip(ranks) {
                if (index..next).contains(&rank) {
                    *slot = v;
                }
            }
            // Every copy is added: the partial sums must see what a value-by-value walk sees.
            for _ in 0..count {
                sum.add(v);
            }
            index = next;
        });
        let mean = sum.total() / n as f64;
        let mut squares = CompensatedSum::default();
        self.for_each_ascending(&pending, |v, count| {
            let centered = v - mean;
            for _ in 0..count {
                squares.add(centered * centered);
            }
        });
        let [median, p75, p90, p95, p99] = at_rank;
        DistributionStats {
            mean,
            min,
            max,
            median,
            p75,
            p90,
            p95,
            p99,
            std: (squares.total() / n as f64).sqrt(),
        }
    }
}

/// A 64-bit key whose unsigned order is `f64::total_cmp`'s order.
fn order_key(value: f64) -> u64 {
    let bits = value.to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

fn from_order_key(key: u64) -> f64 {
    if key >> 63 == 1 {
        f64::from_bits(key & !(1 << 63))
    } else {
        f64::from_bits(!key)
    }
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn read_varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0u64;
    let mut shift = 0;
    loop {
        let byte = bytes[*at];
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return value;
        }
        shift += 7;
    }
}

/// Reads one sorted run: a compressed block, or the sorted pending keys.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    key: u64,
    sorted: &'a [u64],
    sorted_at: usize,
}

impl<'a> Cursor<'a> {
    fn new(block: &'a Block) -> Self {
        debug_assert!(block.len > 0);
        Self {
            bytes: &block.bytes,
            at: 0,
            key: 0,
            sorted: &[],
            sorted_at: 0,
        }
    }

    fn from_sorted(sorted: &'a [u64]) -> Self {
        Self {
            bytes: &[],
            at: 0,
            key: 0,
            sorted,
            sorted_at: 0,
        }
    }

    /// The next distinct key of the run and how many times it occurs.
    fn next_run(&mut self) -> Option<(u64, u64)> {
        if self.at < self.bytes.len() {
            self.key += read_varint(self.bytes, &mut self.at);
            let repeats = read_varint(self.bytes, &mut self.at);
            return Some((self.key, repeats + 1));
        }
        let rest = &self.sorted[self.sorted_at..];
        let key = *rest.first()?;
        let count = rest.iter().take_while(|k| **k == key).count();
        self.sorted_at += count;
        Some((key, count as u64))
    }
}

/// Merges sorted runs into one ascending sequence of (key, copies) and calls `f` with each.
/// The runs are few (one per sealed block and the pending values: a block holds a quarter
/// of a million values), so the smallest head is found by a scan of their keys, which costs
/// less than a heap's sifting; copies of a value come as one call per run that holds them.
fn merge_runs(mut cursors: Vec<Cursor<'_>>, mut f: impl FnMut(u64, u64)) {
    let mut heads: Vec<(u64, u64)> = Vec::with_capacity(cursors.len());
    cursors.retain_mut(|cursor| match cursor.next_run() {
        Some(head) => {
            heads.push(head);
            true
        }
        None => false,
    });
    while !heads.is_empty() {
        let mut smallest = 0;
        for (index, head) in heads.iter().enumerate().skip(1) {
            if head.0 < heads[smallest].0 {
                smallest = index;
            }
        }
        let (key, count) = heads[smallest];
        f(key, count);
        match cursors[smallest].next_run() {
            Some(head) => heads[smallest] = head,
            None => {
                heads.swap_remove(smallest);
                cursors.swap_remove(smallest);
            }
        }
    }
}

/// Shewchuk's exact partial sums (as in Python's `math.fsum`, without its final rounding
/// correction): the running sum is kept as non-overlapping partials, so adding loses nothing.
#[derive(Debug, Default)]
struct CompensatedSum {
    partials: Vec<f64>,
}

impl CompensatedSum {
    fn add(&mut self, mut x: f64) {
        let mut kept = 0;
        for index in 0..self.partials.len() {
            let mut y = self.partials[index];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let high = x + y;
            let low = y - (high - x);
            if low != 0.0 {
                self.partials[kept] = low;
                kept += 1;
            }
            x = high;
        }
        self.partials.truncate(kept);
        self.partials.push(x);
    }

    /// The sum of the partials, largest last, added from the largest down.
    fn total(&self) -> f64 {
        self.partials.iter().rev().fold(0.0, |sum, p| sum + p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::stats::exact_distribution;
    use proptest::prelude::*;

    fn stats_of(values: &[f64]) -> DistributionStats {
        let mut exact = ExactValues::new();
        for v in values {
            exact.add(*v);
        }
        exact.finish()
    }

    #[test]
    fn empty_gives_zeros() {
        assert_eq!(ExactValues::new().finish(), DistributionStats::default());
    }

    #[test]
    fn order_keys_sort_like_total_cmp() {
        let mut values = vec![3.5, -0.0, 0.0, 1e-300, -2.0, 1e300, 7.25, f64::MIN_POSITIVE];
        let mut by_key = values.clone();
        by_key.sort_by_key(|v| order_key(*v));
        values.sort_by(f64::total_cmp);
        assert_eq!(
            by_key.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            values.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        for v in values {
            assert_eq!(from_order_key(order_key(v)).to_bits(), v.to_bits());
        }
    }

    #[test]
    fn many_blocks_give_the_statistics_of_the_whole_list() {
        // Three sealed blocks and a pending remainder, with repeats and clustered values.
        let values: Vec<f64> = (0..BLOCK_VALUES * 3 + 1234)
            .map(|i| 100.0 + ((i * 7919) % 5003) as f64 * 0.25 + (i % 3) as f64 * 1e-12)
            .collect();
        let mut exact = ExactValues::new();
        for v in &values {
            exact.add(*v);
        }
        assert_eq!(exact.blocks.len(), 3);
        // Clustered values compress well below 8 bytes each.
        assert!(
            exact.held_bytes() < values.len() * 4,
            "{}",
            exact.held_bytes()
        );
        let ours = exact.finish();
        let plain = exact_distribution(values);
        assert_eq!(
            (
                ours.min,
                ours.max,
                ours.median,
                ours.p75,
                ours.p90,
                ours.p95,
                ours.p99
            ),
            (
                plain.min,
                plain.max,
                plain.median,
                plain.p75,
                plain.p90,
                plain.p95,
                plain.p99
            )
        );
        assert!((ours.mean - plain.mean).abs() <= plain.mean * 1e-14);
        assert!((ours.std - plain.std).abs() <= plain.std * 1e-12);
    }

    /// The statistics as a walk over the whole sorted list, one value at a time.
    fn walked(mut values: Vec<f64>) -> DistributionStats {
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let mut sum = CompensatedSum::default();
        values.iter().for_each(|v| sum.add(*v));
        let mean = sum.total() / n as f64;
        let mut squares = CompensatedSum::default();
        values
            .iter()
            .for_each(|v| squares.add((v - mean) * (v - mean)));
        let at = |p: f64| values[rounded_rank(n, p)];
        DistributionStats {
            mean,
            min: values[0],
            max: values[n - 1],
            median: at(50.0),
            p75: at(75.0),
            p90: at(90.0),
            p95: at(95.0),
            p99: at(99.0),
            std: (squares.total() / n as f64).sqrt(),
        }
    }

    #[test]
    fn merged_blocks_give_the_bits_of_a_walk_over_the_sorted_list() {
        // Two sealed blocks and a pending remainder sharing values (copies across runs and
        // within them), so the merge meets equal keys in several runs at once.
        let values: Vec<f64> = (0..BLOCK_VALUES * 2 + 777)
            .map(|i| 50.0 + ((i * 104_729) % 9973) as f64 * 0.125 + (i % 5) as f64 * 1e-11)
            .collect();
        let mut exact = ExactValues::new();
        for v in &values {
            exact.add(*v);
        }
        assert_eq!(exact.blocks.len(), 2);
        let bits = |s: DistributionStats| {
            [
                s.mean, s.min, s.max, s.median, s.p75, s.p90, s.p95, s.p99, s.std,
            ]
            .map(f64::to_bits)
        };
        assert_eq!(bits(exact.finish()), bits(walked(values.clone())));
        // Without blocks: the pending values alone.
        let few = values[..5000].to_vec();
        assert_eq!(bits(stats_of(&few)), bits(walked(few)));
    }

    #[test]
    fn the_order_of_the_values_does_not_matter() {
        let values: Vec<f64> = (0..5000).map(|i| (i as f64 * 0.37).sin() * 1e3).collect();
        let mut reversed = values.clone();
        reversed.reverse();
        assert_eq!(stats_of(&values), stats_of(&reversed));
    }

    #[test]
    fn identical_values_have_zero_spread() {
        let s = stats_of(&[0.1; 7]);
        assert_eq!((s.mean, s.std, s.min, s.p99), (0.1, 0.0, 0.1, 0.1));
    }

    proptest! {
        #[test]
        fn agrees_with_the_plain_list(values in proptest::collection::vec(0.0f64..1e6, 1..300)) {
            let ours = stats_of(&values);
            let plain = exact_distribution(values);
            prop_assert_eq!(ours.min, plain.min);
            prop_assert_eq!(ours.max, plain.max);
            prop_assert_eq!(ours.median, plain.median);
            prop_assert_eq!(ours.p99, plain.p99);
            prop_assert!((ours.mean - plain.mean).abs() <= plain.mean * 1e-12);
            prop_assert!((ours.std - plain.std).abs() <= 1e-9 * (1.0 + plain.std));
        }
    }
}
