//! Error statistics of predictions against measurements.
//!
//! INTERFACE: [`ErrorStats::of`] summarises paired (predicted, measured) values: median, mean
//! and p90 of the absolute % error, the median signed % error (bias: positive = predicted too
//! high) and Spearman's rank correlation. Percentiles interpolate linearly between ranks
//! (numpy's default); tied values share their average rank.

use serde_json::{json, Value};

#[derive(Clone, Debug, PartialEq)]
pub struct ErrorStats {
    pub count: usize,
    pub median_abs_pct: f64,
    pub mean_abs_pct: f64,
    pub p90_abs_pct: f64,
    pub median_signed_pct: f64,
    /// `None` below two pairs or when either side is constant.
    pub spearman: Option<f64>,
}

/// The `p`-th percentile (0-100) of sorted values, linear between ranks.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (sorted.len() - 1) as f64 * p / 100.0;
    let lower = rank.floor() as usize;
    let upper = rank.ceil() as usize;
    sorted[lower] + (sorted[upper] - sorted[lower]) * (rank - lower as f64)
}

/// Ranks from 1, ties sharing their average rank.
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        let average = (start + end + 1) as f64 / 2.0;
        for &index in &order[start..end] {
            ranks[index] = average;
        }
        start = end;
    }
    ranks
}

/// Spearman's rank correlation: Pearson's correlation of the ranks.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() < 2 || a.len() != b.len() {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let mut covariance = 0.0;
    let (mut va, mut vb) = (0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        covariance += (x - ma) * (y - mb);
        va += (x - ma) * (x - ma);
        vb += (y - mb) * (y - mb);
    }
    (va > 0.0 && vb > 0.0).then(|| covariance / (va * vb).sqrt())
}

impl ErrorStats {
    /// Statistics of (predicted, measured) pairs with a positive measurement; `None` when
    /// there are none.
    pub fn of(pairs: &[(f64, f64)]) -> Option<Self> {
        let pairs: Vec<(f64, f64)> = pairs
            .iter()
            .copied()
            .filter(|(predicted, measured)| *measured > 0.0 && predicted.is_finite())
            .collect();
        if pairs.is_empty() {
            return None;
        }
        let signed: Vec<f64> = pairs
            .iter()
            .map(|(predicted, measured)| (predicted - measured) / measured * 100.0)
            .collect();
        let mut absolute: Vec<f64> = signed.iter().map(|e| e.abs()).collect();
        absolute.sort_by(f64::total_cmp);
        let mut sorted_signed = signed.clone();
        sorted_signed.sort_by(f64::total_cmp);
        let predicted: Vec<f64> = pairs.iter().map(|(p, _)| *p).collect();
        let measured: Vec<f64> = pairs.iter().map(|(_, m)| *m).collect();
        Some(ErrorStats {
            count: pairs.len(),
            median_abs_pct: percentile(&absolute, 50.0),
            mean_abs_pct: absolute.iter().sum::<f64>() / absolute.len() as f64,
            p90_abs_pct: percentile(&absolute, 90.0),
            median_signed_pct: percentile(&sorted_signed, 50.0),
            spearman: spearman(&predicted, &measured),
        })
    }

    pub fn to_json(&self) -> Value {
        json!({
            "count": self.count,
            "median_abs_pct": self.median_abs_pct,
            "mean_abs_pct": self.mean_abs_pct,
            "p90_abs_pct": self.p90_abs_pct,
            "median_signed_pct": self.median_signed_pct,
            "spearman": self.spearman,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_errors_give_known_statistics() {
        // Errors +10%, -20%, +30%, -40%, +50%.
        let pairs = [
            (110.0, 100.0),
            (8.0, 10.0),
            (13.0, 10.0),
            (6.0, 10.0),
            (3.0, 2.0),
        ];
        let stats = ErrorStats::of(&pairs).unwrap();
        assert_eq!(stats.count, 5);
        assert!((stats.median_abs_pct - 30.0).abs() < 1e-9);
        assert!((stats.mean_abs_pct - 30.0).abs() < 1e-9);
        // |errors| sorted 10 20 30 40 50: p90 at rank 3.6 -> 46.
        assert!((stats.p90_abs_pct - 46.0).abs() < 1e-9);
        assert!((stats.median_signed_pct - 10.0).abs() < 1e-9);
    }

    #[test]
    fn spearman_is_one_for_monotone_and_minus_one_for_reversed() {
        let a = [1.0, 2.0, 3.0, 10.0];
        assert!((spearman(&a, &[5.0, 6.0, 70.0, 80.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((spearman(&a, &[4.0, 3.0, 2.0, 1.0]).unwrap() + 1.0).abs() < 1e-12);
        assert_eq!(spearman(&a, &[1.0, 1.0, 1.0, 1.0]), None);
        // Ties share ranks: [1, 2.5, 2.5, 4] against [1, 2, 3, 4].
        let tied = spearman(&[1.0, 2.0, 2.0, 3.0], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!((tied - 0.9486832980505138).abs() < 1e-12);
    }
}
