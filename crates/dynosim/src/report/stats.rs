//! The two estimators of the report's distributions (frontend.md §3.4): exact statistics over
//! per-request values, and streaming statistics (Welford + DDSketch) over per-gap values.

use ddsketchy::DDSketch;

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
#[derive(Debug)]
pub struct StreamingDistribution {
    sketch: DDSketch,
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
        let sketch = DDSketch::with_max_bins(SKETCH_RELATIVE_ACCURACY, SKETCH_MAX_BINS)
            .expect("the constant sketch configuration is valid");
        Self {
            sketch,
            count: 0,
            mean: 0.0,
            sum_squared_deviations: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }

    /// Adds one sample; non-finite samples are dropped.
    pub fn add(&mut self, value: f64) {
        if !value.is_finite() {
            return;
        }
        self.sketch.add(value);
        self.count += 1;
        let delta = value - self.mean;
        self.mean += delta / self.count as f64;
        self.sum_squared_deviations += delta * (value - self.mean);
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
        // The quantile is always within [0, 1], the only error the sketch reports.
        self.sketch.quantile(quantile).unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
