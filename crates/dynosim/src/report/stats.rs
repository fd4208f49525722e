//! The two estimators of the report's distributions (frontend.md §3.4): exact statistics over
//! per-request values, and streaming statistics (Welford + DDSketch) over per-gap values.

/// Relative accuracy of the streaming percentiles (0.1%), as in the reference.
const SKETCH_RELATIVE_ACCURACY: f64 = 0.001;
/// Bin cap of each sketch store, as in the reference.
const SKETCH_MAX_BINS: usize = 32_768;

/// The nine statistics every distribution reports, in the report's key order.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DistributionStats {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub median: f64,
    pub p75: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub std: f64,
}

impl DistributionStats {
    /// The values in the report's order: mean, min, max, median, p75, p90, p95, p99, std.
    pub fn in_key_order(&self) -> [f64; 9] {
        [
            self.mean,
            self.min,
            self.max,
            self.median,
            self.p75,
            self.p90,
            self.p95,
            self.p99,
            self.std,
        ]
    }
}

/// The report's percentile rank over `len` sorted values: `(len-1)·p/100` rounded half away
/// from zero (not banker's rounding, not nearest-rank `ceil`), clamped to the last index.
pub fn rounded_rank(len: usize, percentile: f64) -> usize {
    if len == 0 {
        return 0;
    }
    let rank = ((len - 1) as f64 * percentile / 100.0).round() as usize;
    rank.min(len - 1)
}

/// Exact statistics of `values`. The mean and std sum in the order given, so the caller fixes
/// the order (request id) to make the result reproducible. Empty input gives all zeros.
pub fn exact_distribution(mut values: Vec<f64>) -> DistributionStats {
    if values.is_empty() {
        return DistributionStats::default();
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    // Population variance, two-pass around the mean.
    let variance = values
        .iter()
        .map(|v| {
            let centered = v - mean;
            centered * centered
        })
        .sum::<f64>()
        / n;
    values.sort_by(f64::total_cmp);
    let at = |p: f64| values[rounded_rank(values.len(), p)];
    DistributionStats {
        mean,
        min: values[0],
        max: values[values.len() - 1],
        median: at(50.0),
        p75: at(75.0),
        p90: at(90.0),
        p95: at(95.0),
        p99: at(99.0),
        std: variance.sqrt(),
    }
}

/// Streaming statistics: Welford mean and M2, exact min/max, and a DDSketch for the
/// percentiles, which are therefore bucket representatives (p99 can exceed the max).
///
/// Values may come with a count ([`StreamingDistribution::add_repeated`]): every request of a
/// decode pass sees the same gap, so the sketch bins the value once and adds the count, and
/// Welford runs its ordinary update `count` times (a closed-form merge would change low bits).
#[derive(Debug)]
pub struct StreamingDistribution {
    sketch: LogSketch,
    count: u64,
    mean: f64,
    sum_squared_deviations: f64,
    min: f64,
    max: f64,
}

impl Default for StreamingDistribution {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamingDistribution {
    pub fn new() -> Self {
        Self {
            sketch: LogSketch::new(SKETCH_RELATIVE_ACCURACY, SKETCH_MAX_BINS),
            count: 0,
            mean: 0.0,
            sum_squared_deviations: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    /// Adds one sample; non-finite samples are dropped.
    pub fn add(&mut self, value: f64) {
        self.add_repeated(value, 1);
    }

    /// Adds `count` samples equal to `value`; exactly what `count` calls of
    /// [`StreamingDistribution::add`] would do. Non-finite samples are dropped.
    #[inline]
    pub fn add_repeated(&mut self, value: f64, count: u64) {
        if !value.is_finite() || count == 0 {
            return;
        }
        self.sketch.add(value, count);
        let mut moments = self.moments();
        for _ in 0..count {
            moments.add(value);
        }
        self.set_moments(moments);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    /// The Welford state, to be updated outside (in registers) and put back with
    /// [`StreamingDistribution::set_moments`].
    #[inline]
    pub(crate) fn moments(&self) -> Moments {
        Moments {
            count: self.count,
            mean: self.mean,
            sum_squared_deviations: self.sum_squared_deviations,
        }
    }

    #[inline]
    pub(crate) fn set_moments(&mut self, moments: Moments) {
        self.count = moments.count;
        self.mean = moments.mean;
        self.sum_squared_deviations = moments.sum_squared_deviations;
    }

    /// The sketch bucket of finite `value`, for [`StreamingDistribution::add_to_bucket`]:
    /// found once (a logarithm) by a caller that adds the same value many times.
    pub(crate) fn bucket_of(&self, value: f64) -> SketchBucket {
        self.sketch.bucket_of(value)
    }

    /// Bins `count` samples equal to finite `value`, whose bucket is `bucket` (from
    /// [`StreamingDistribution::bucket_of`] of this distribution), and updates min and max,
    /// leaving the Welford state to the caller (who adds the same samples through
    /// [`Moments::add`]).
    #[inline]
    pub(crate) fn add_to_bucket(&mut self, value: f64, bucket: SketchBucket, count: u64) {
        debug_assert!(value.is_finite() && count > 0);
        debug_assert_eq!(bucket, self.bucket_of(value));
        self.sketch.add_to_bucket(bucket, count);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn finish(&self) -> DistributionStats {
        if self.count == 0 {
            return DistributionStats::default();
        }
        DistributionStats {
            mean: self.mean,
            min: self.min,
            max: self.max,
            median: self.percentile(50.0),
            p75: self.percentile(75.0),
            p90: self.percentile(90.0),
            p95: self.percentile(95.0),
            p99: self.percentile(99.0),
            std: (self.sum_squared_deviations / self.count as f64).sqrt(),
        }
    }

    /// The report's rounded rank, turned into a quantile that lands in the middle of that
    /// rank so the sketch's floored rank selects exactly it.
    fn percentile(&self, percentile: f64) -> f64 {
        let span = self.count.saturating_sub(1);
        let rank = (span as f64 * percentile / 100.0).round() as u64;
        let quantile = if span == 0 || rank >= span {
            1.0
        } else {
            (rank as f64 + 0.5) / span as f64
        };
        if self.count == 1 {
            // A single sample is returned exactly, not as its bucket's representative.
            return self.min;
        }
        self.sketch.quantile(quantile)
    }
}

/// The Welford state of a [`StreamingDistribution`]: sample count, mean and the sum of squared
/// deviations from it, updated one sample at a time (always the same operations in the same
/// order, so that every way of feeding samples gives the same bits).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Moments {
    count: u64,
    mean: f64,
    sum_squared_deviations: f64,
}

impl Moments {
    #[inline(always)]
    pub(crate) fn add(&mut self, value: f64) {
        self.count += 1;
        let delta = value - self.mean;
        // Through `i64`: one instruction instead of the several of `u64 -> f64`, and the same
        // value for every count below 2^63.
        self.mean += delta / self.count as i64 as f64;
        self.sum_squared_deviations += delta * (value - self.mean);
    }

    /// `count` calls of [`Moments::add`].
    #[inline(always)]
    pub(crate) fn add_repeated(&mut self, value: f64, count: u64) {
        for _ in 0..count {
            self.add(value);
        }
    }

    /// `count` calls of [`Moments::add`] with `value` on `self` and with `other_value` on
    /// `other`, interleaved. Each update waits for the division of the one before it in its
    /// own state; two states updated in one loop wait side by side, in about the time of one
    /// (each state still sees the same operations in the same order).
    #[inline(always)]
    pub(crate) fn add_repeated_beside(
        &mut self,
        value: f64,
        other: &mut Moments,
        other_value: f64,
        count: u64,
    ) {
        for _ in 0..count {
            self.add(value);
            other.add(other_value);
        }
    }
}

/// Where a value counts in a sketch: a bucket of positive or of negative magnitudes, or the
/// zeros (magnitudes too small to index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SketchBucket {
    Positive(i32),
    Negative(i32),
    Zero,
}

/// A DDSketch (logarithmic buckets of relative width `alpha`, collapsing its lowest buckets
/// beyond a bin cap) whose buckets take counts. It maps values to buckets and buckets back to
/// representatives with the same floating-point formulas as `ddsketchy` 0.1.7, the sketch the
/// reports were made with (a test holds the two equal); that crate adds one value at a time,
/// with a logarithm each.
#[derive(Debug)]
struct LogSketch {
    /// `1 / ln(gamma)`, gamma = 1 + 2 alpha / (1 - alpha).
    inv_ln_gamma: f64,
    /// The representative of bucket `k` is `exp(k * ln_gamma) * representative_scale`.
    ln_gamma: f64,
    representative_scale: f64,
    /// Magnitudes below this count as zeros.
    min_indexable: f64,
    positive: KeyCounts,
    negative: KeyCounts,
    zeros: u64,
    /// Direct-mapped memo of recent `value -> bucket` mappings: the same gap recurs for every
    /// request of a pass, and a logarithm costs more than the lookup.
    memo: Box<[(u64, i32); MEMO_SLOTS]>,
}

/// 4096 slots (64 KiB): gaps are folded when a request completes, long after the passes that
/// made them, and 1024 slots missed often enough on the conversation trace that `ln` showed.
const MEMO_BITS: u32 = 12;
const MEMO_SLOTS: usize = 1 << MEMO_BITS;

impl LogSketch {
    fn new(alpha: f64, max_bins: usize) -> Self {
        let gamma = 1.0 + (2.0 * alpha) / (1.0 - alpha);
        let inv_ln_gamma = 1.0 / ((2.0 * alpha) / (1.0 - alpha)).ln_1p();
        let from_key_range = (f64::from(i32::MIN) / inv_ln_gamma + 1.0).exp();
        Self {
            inv_ln_gamma,
            ln_gamma: inv_ln_gamma.recip(),
            representative_scale: 2.0 / (1.0 + gamma),
            min_indexable: from_key_range.max(f64::MIN_POSITIVE * gamma),
            positive: KeyCounts::new(max_bins),
            negative: KeyCounts::new(max_bins),
            zeros: 0,
            // Bit pattern 0 is the value 0.0, which never reaches the memo.
            memo: Box::new([(0, 0); MEMO_SLOTS]),
        }
    }

    fn count(&self) -> u64 {
        self.positive.count + self.negative.count + self.zeros
    }

    /// The bucket of a magnitude at or above `min_indexable`.
    #[inline]
    fn key(&mut self, magnitude: f64) -> i32 {
        let bits = magnitude.to_bits();
        let slot = (bits.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - MEMO_BITS)) as usize;
        let (memo_bits, memo_key) = self.memo[slot];
        if memo_bits == bits {
            return memo_key;
        }
        let key = self.computed_key(magnitude);
        self.memo[slot] = (bits, key);
        key
    }

    /// The bucket of a magnitude at or above `min_indexable`, computed (no memo).
    #[inline]
    fn computed_key(&self, magnitude: f64) -> i32 {
        (magnitude.ln() * self.inv_ln_gamma).ceil() as i32
    }

    /// Where [`LogSketch::add`] counts `value`.
    fn bucket_of(&self, value: f64) -> SketchBucket {
        if value >= self.min_indexable {
            SketchBucket::Positive(self.computed_key(value))
        } else if value <= -self.min_indexable {
            SketchBucket::Negative(self.computed_key(-value))
        } else {
            SketchBucket::Zero
        }
    }

    /// [`LogSketch::add`] of a value in `bucket`.
    #[inline]
    fn add_to_bucket(&mut self, bucket: SketchBucket, count: u64) {
        match bucket {
            SketchBucket::Positive(key) => self.positive.add(key, count),
            SketchBucket::Negative(key) => self.negative.add(key, count),
            SketchBucket::Zero => self.zeros += count,
        }
    }

    #[inline]
    fn add(&mut self, value: f64, count: u64) {
        if value >= self.min_indexable {
            let key = self.key(value);
            self.positive.add(key, count);
        } else if value <= -self.min_indexable {
            let key = self.key(-value);
            self.negative.add(key, count);
        } else {
            self.zeros += count;
        }
    }

    fn representative(&self, key: i32) -> f64 {
        (f64::from(key) * self.ln_gamma).exp() * self.representative_scale
    }

    /// The value at rank `floor(q * (count - 1))` (`q` in [0, 1], at least two samples).
    fn quantile(&self, q: f64) -> f64 {
        let total = self.count();
        if total == 0 {
            return 0.0;
        }
        let rank = (q * (total as f64 - 1.0)) as u64;
        let negatives = self.negative.count;
        if rank < negatives {
            -self.representative(self.negative.key_at_rank(negatives - 1 - rank))
        } else if rank < negatives + self.zeros {
            0.0
        } else {
            self.representative(self.positive.key_at_rank(rank - negatives - self.zeros))
        }
    }
}

/// Counts per bucket key over a contiguous key range of at most `max_bins` keys; a key more
/// than `max_bins - 1` below the highest key seen counts in the lowest bucket kept.
#[derive(Debug)]
struct KeyCounts {
    /// `bins[i]` counts key `offset + i`; the last bin (the highest key seen) is never empty.
    bins: Vec<u64>,
    offset: i32,
    count: u64,
    max_bins: usize,
}

impl KeyCounts {
    fn new(max_bins: usize) -> Self {
        Self {
            bins: Vec::new(),
            offset: 0,
            count: 0,
            max_bins: max_bins.max(1),
        }
    }

    #[inline]
    fn add(&mut self, key: i32, count: u64) {
        // The common case, a key within the bins held: one compare (a key below the offset
        // wraps to a huge index).
        let index = (i64::from(key) - i64::from(self.offset)) as u64;
        if index < self.bins.len() as u64 {
            self.bins[index as usize] += count;
            self.count += count;
            return;
        }
        self.add_outside(key, count);
    }

    /// A key outside the bins held (or the first key): grows the bins, collapsing the lowest
    /// beyond the cap.
    #[cold]
    #[inline(never)]
    fn add_outside(&mut self, key: i32, count: u64) {
        self.count += count;
        if self.bins.is_empty() {
            self.offset = key;
            self.bins.push(count);
            return;
        }
        let len = self.bins.len() as i64;
        let index = i64::from(key) - i64::from(self.offset);
        if index < 0 {
            let highest = i64::from(self.offset) + len - 1;
            let lowest_kept = highest - self.max_bins as i64 + 1;
            let key = i64::from(key).max(lowest_kept);
            if key < i64::from(self.offset) {
                // Grow downwards with a margin (empty bins below the lowest key change no
                // rank), so that keys arriving in descending order cost amortised O(1).
                let margin = (len / 2).max(16);
                let new_offset = (key - margin).max(lowest_kept);
                let grow = (i64::from(self.offset) - new_offset) as usize;
                self.bins.splice(0..0, std::iter::repeat_n(0, grow));
                self.offset = new_offset as i32;
            }
            self.bins[(key - i64::from(self.offset)) as usize] += count;
        } else if index >= len {
            self.bins.resize(index as usize + 1, 0);
            *self.bins.last_mut().expect("just grown") += count;
            let excess = self.bins.len().saturating_sub(self.max_bins);
            if excess > 0 {
                let folded: u64 = self.bins[..excess].iter().sum();
                self.bins.drain(..excess);
                self.bins[0] += folded;
                self.offset += excess as i32;
            }
        } else {
            self.bins[index as usize] += count;
        }
    }

    /// The key holding the sample of 0-based `rank` in key order (`rank < count`).
    fn key_at_rank(&self, rank: u64) -> i32 {
        let mut seen = 0u64;
        for (i, &bin) in self.bins.iter().enumerate() {
            seen += bin;
            if seen > rank {
                return self.offset + i as i32;
            }
        }
        self.offset + self.bins.len() as i32 - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::Just;
    use proptest::strategy::Strategy;

    #[test]
    fn rounded_rank_rounds_half_away_from_zero() {
        // p95 over 12,031 values: 12030 * 0.95 = 11428.5 -> 11429 (banker's would give 11428).
        assert_eq!(rounded_rank(12_031, 95.0), 11_429);
        // p50 over 16 values: 7.5 -> 8; p75: 11.25 -> 11; p90: 13.5 -> 14; p99: 14.85 -> 15.
        assert_eq!(rounded_rank(16, 50.0), 8);
        assert_eq!(rounded_rank(16, 75.0), 11);
        assert_eq!(rounded_rank(16, 90.0), 14);
        assert_eq!(rounded_rank(16, 99.0), 15);
        assert_eq!(rounded_rank(1, 99.0), 0);
        // p50 over 2 values: 0.5 -> 1 (the larger value).
        assert_eq!(rounded_rank(2, 50.0), 1);
    }

    #[test]
    fn exact_distribution_hand_computed() {
        let values = vec![4.0, 1.0, 3.0, 2.0];
        let stats = exact_distribution(values);
        assert_eq!(stats.mean, 2.5);
        assert_eq!(stats.min, 1.0);
        assert_eq!(stats.max, 4.0);
        // ranks: p50 1.5->2 (3.0), p75 2.25->2 (3.0), p90 2.7->3, p95 2.85->3, p99 2.97->3.
        assert_eq!(stats.median, 3.0);
        assert_eq!(stats.p75, 3.0);
        assert_eq!(stats.p90, 4.0);
        assert_eq!(stats.p95, 4.0);
        assert_eq!(stats.p99, 4.0);
        // Population variance: (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25.
        assert_eq!(stats.std, 1.25f64.sqrt());
    }

    #[test]
    fn exact_distribution_of_nothing_is_zero() {
        assert_eq!(exact_distribution(Vec::new()), DistributionStats::default());
    }

    #[test]
    fn exact_percentiles_pick_rounded_rank_values() {
        let values: Vec<f64> = (0..12_031).rev().map(|v| v as f64).collect();
        let stats = exact_distribution(values);
        assert_eq!(stats.p95, 11_429.0);
        assert_eq!(stats.median, 6_015.0);
        assert_eq!(stats.p99, 11_910.0); // 12030 * 0.99 = 11909.7 -> 11910
    }

    #[test]
    fn streaming_welford_matches_hand_computation() {
        let mut dist = StreamingDistribution::new();
        for v in [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0] {
            dist.add(v);
        }
        dist.add(f64::NAN);
        dist.add(f64::INFINITY);
        let stats = dist.finish();
        assert_eq!(dist.count(), 8);
        assert_eq!(stats.mean, 5.0);
        assert_eq!(stats.std, 2.0);
        assert_eq!(stats.min, 2.0);
        assert_eq!(stats.max, 9.0);
    }

    #[test]
    fn streaming_percentiles_are_bucket_representatives() {
        // gamma = 1 + 2a/(1-a); a value v lands in key ceil(ln v / ln gamma) and comes back as
        // gamma^key * 2/(1+gamma), within 0.1% of v and possibly above the maximum.
        let mut dist = StreamingDistribution::new();
        for _ in 0..100 {
            dist.add(6.2127);
        }
        let stats = dist.finish();
        assert_eq!(stats.max, 6.2127);
        assert!(
            stats.p99 > stats.max,
            "p99 {} vs max {}",
            stats.p99,
            stats.max
        );
        assert!((stats.p99 - 6.2127).abs() / 6.2127 <= 0.001);
        assert_eq!(stats.median, stats.p99);
        let alpha: f64 = 0.001;
        let gamma = 1.0 + 2.0 * alpha / (1.0 - alpha);
        let key = (6.2127f64.ln() / gamma.ln()).ceil();
        let representative = (key * gamma.ln()).exp() * 2.0 / (1.0 + gamma);
        assert!((stats.p99 - representative).abs() <= 1e-12 * representative);
    }

    #[test]
    fn streaming_single_sample_returns_it_exactly() {
        let mut dist = StreamingDistribution::new();
        dist.add(6.2127);
        let stats = dist.finish();
        assert_eq!(stats.median, 6.2127);
        assert_eq!(stats.p99, 6.2127);
        assert_eq!(stats.std, 0.0);
    }

    #[test]
    fn streaming_zero_gaps_count_in_the_zero_bucket() {
        let mut dist = StreamingDistribution::new();
        for v in [0.0, 0.0, 0.0, 10.0] {
            dist.add(v);
        }
        let stats = dist.finish();
        assert_eq!(stats.median, 0.0); // rank round(1.5) = 2 -> still a zero
        assert!((stats.p99 - 10.0).abs() <= 0.01);
        assert_eq!(stats.mean, 2.5);
    }

    #[test]
    fn a_value_added_through_its_bucket_counts_as_added() {
        let values = [0.0, 6.25, 6.25, 1e-320, -3.5, 1000.0 / 6.25, 0.0, 1e-3];
        let mut added = StreamingDistribution::new();
        let mut bucketed = StreamingDistribution::new();
        for (i, &value) in values.iter().enumerate() {
            let count = 1 + i as u64 % 3;
            added.add_repeated(value, count);
            let mut moments = bucketed.moments();
            moments.add_repeated(value, count);
            bucketed.set_moments(moments);
            let bucket = bucketed.bucket_of(value);
            bucketed.add_to_bucket(value, bucket, count);
        }
        assert_eq!(bucketed.bucket_of(0.0), SketchBucket::Zero);
        let bits = |d: &StreamingDistribution| d.finish().in_key_order().map(f64::to_bits);
        assert_eq!(bits(&bucketed), bits(&added));
        assert_eq!(bucketed.count(), added.count());
    }

    /// The sketch the reports were defined with, fed one value at a time.
    fn reference_sketch(values: &[f64]) -> ddsketchy::DDSketch {
        let mut sketch =
            ddsketchy::DDSketch::with_max_bins(SKETCH_RELATIVE_ACCURACY, SKETCH_MAX_BINS).unwrap();
        for &v in values {
            sketch.add(v);
        }
        sketch
    }

    fn assert_same_quantiles(values: &[f64]) {
        let reference = reference_sketch(values);
        let mut ours = StreamingDistribution::new();
        // Feed runs of equal values with a count, as the collector does.
        let mut i = 0;
        while i < values.len() {
            let run = values[i..].iter().take_while(|v| **v == values[i]).count();
            ours.add_repeated(values[i], run as u64);
            i += run;
        }
        assert_eq!(ours.sketch.count(), reference.count());
        if reference.count() < 2 {
            return;
        }
        for step in 0..=200 {
            let q = f64::from(step) / 200.0;
            let expected = reference.quantile(q).unwrap();
            let got = ours.sketch.quantile(q);
            assert_eq!(
                got.to_bits(),
                expected.to_bits(),
                "q {q}: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn sketch_matches_ddsketchy_on_typical_gaps() {
        let mut values = Vec::new();
        for i in 0..5_000u32 {
            let x = f64::from(i);
            values.push(if i % 7 == 0 {
                0.0
            } else {
                5.0 + (x * 0.37).sin() * 4.0
            });
            if i % 11 == 0 {
                values.extend(std::iter::repeat_n(12.5 + x / 1e3, (i % 5) as usize));
            }
        }
        assert_same_quantiles(&values);
    }

    #[test]
    fn sketch_matches_ddsketchy_when_it_collapses_low_buckets() {
        // A range wider than the bin cap (gamma^32768 ~ 3e28) folds the lowest keys, whether
        // the low values come first or last.
        let wide = [1e-25, 3e-20, 1.0, 2.0, 1e10, 5e12, 1e-30, 7e-22, 4.0];
        assert_same_quantiles(&wide);
        let mut rising: Vec<f64> = (0..60).map(|e| 10f64.powi(e - 30)).collect();
        assert_same_quantiles(&rising);
        rising.reverse();
        assert_same_quantiles(&rising);
        assert_same_quantiles(&[-3.0, -3.0, -1e-3, 0.0, 2.0, -7.5, 1e-310, 4.0]);
    }

    #[test]
    fn sketch_matches_ddsketchy_on_descending_values() {
        // Each value a bucket below the last: the store grows downwards one key at a time.
        let values: Vec<f64> = (0..40_000).map(|i| 1e6 * 0.998f64.powi(i)).collect();
        assert_same_quantiles(&values);
    }

    proptest::proptest! {
        #[test]
        fn sketch_matches_ddsketchy(
            values in proptest::collection::vec(
                proptest::prop_oneof![
                    Just(0.0),
                    0.0f64..1e4,
                    1e-12f64..1e-3,
                    (-40i32..40).prop_map(|e| 10f64.powi(e)),
                ],
                0..400,
            )
        ) {
            assert_same_quantiles(&values);
        }
    }
}
