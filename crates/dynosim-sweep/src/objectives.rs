//! SLAs, objectives and the Pareto front over the rows of a sweep.
//!
//! INTERFACE
//! - [`SlaBound`]: one bound of the spec's `sla:`; [`feasible`] checks a row against all.
//! - [`Objective`]: what "best" means; [`best_row`] picks the best feasible row.
//! - [`violation`]: how far a row is from its SLAs (what ranks infeasible rows).
//! - [`pareto_front`]: the rows not dominated in (output tokens/s per GPU, tokens/s per user).

use std::cmp::Ordering;

use crate::row::Row;

/// Latency statistics an SLA may bound from above.
const SLA_STATS: &[&str] = &["mean", "median", "p75", "p90", "p95", "p99", "max"];
const SLA_METRICS: &[&str] = &["ttft", "ttst", "tpot", "itl", "e2e_latency"];
/// The goodput SLA: the share of completed requests that met the per-request SLAs
/// (`sla_ttft_ms`, `sla_itl_ms`, `sla_e2e_ms` in the run's settings), bounded from below.
pub const GOODPUT_RATIO: &str = "goodput_ratio";

/// One SLA bound: a report key (or `goodput_ratio`) and its limit.
#[derive(Clone, Debug, PartialEq)]
pub struct SlaBound {
    pub metric: String,
    pub limit: f64,
}

impl SlaBound {
    pub fn parse(metric: &str, limit: &serde_json::Value) -> Result<Self, String> {
        let known = metric == GOODPUT_RATIO
            || metric.strip_suffix("_ms").is_some_and(|stat_metric| {
                SLA_STATS.iter().any(|stat| {
                    stat_metric
                        .strip_prefix(stat)
                        .and_then(|rest| rest.strip_prefix('_'))
                        .is_some_and(|name| SLA_METRICS.contains(&name))
                })
            });
        if !known {
            return Err(format!(
                "unknown SLA metric; expected <stat>_<metric>_ms with stat one of {} and metric \
                 one of {} (e.g. p95_ttft_ms), or {GOODPUT_RATIO}",
                SLA_STATS.join(", "),
                SLA_METRICS.join(", ")
            ));
        }
        let limit = limit
            .as_f64()
            .filter(|limit| limit.is_finite() && *limit > 0.0)
            .ok_or_else(|| format!("expected a positive number, got {limit}"))?;
        if metric == GOODPUT_RATIO && limit > 1.0 {
            return Err(format!("expected a share in (0, 1], got {limit}"));
        }
        Ok(SlaBound {
            metric: metric.to_owned(),
            limit,
        })
    }

    /// Whether the row meets this bound (a missing metric does not).
    pub fn holds(&self, row: &Row) -> bool {
        if self.metric == GOODPUT_RATIO {
            return goodput_ratio(row).is_some_and(|ratio| ratio >= self.limit);
        }
        row.metric(&self.metric)
            .is_some_and(|value| value <= self.limit)
    }
}

fn goodput_ratio(row: &Row) -> Option<f64> {
    let good = row.metric("goodput_completed_requests")?;
    let completed = row.metric("completed_requests")?;
    (completed > 0.0).then(|| good / completed)
}

/// How far a row is from meeting the SLAs: the sum over bounds of the relative excess
/// (`value / limit - 1` for an upper bound, `limit / ratio - 1` for the goodput ratio), 0 when
/// feasible; infinite for a failed row or a missing metric.
pub fn violation(row: &Row, sla: &[SlaBound]) -> f64 {
    if !row.error.is_empty() {
        return f64::INFINITY;
    }
    sla.iter()
        .map(|bound| {
            let excess = if bound.metric == GOODPUT_RATIO {
                goodput_ratio(row).map(|ratio| bound.limit / ratio - 1.0)
            } else {
                row.metric(&bound.metric)
                    .map(|value| value / bound.limit - 1.0)
            };
            excess.map_or(f64::INFINITY, |excess| excess.max(0.0))
        })
        .sum()
}

/// Whether a row ran and meets every bound.
pub fn feasible(row: &Row, sla: &[SlaBound]) -> bool {
    row.error.is_empty() && sla.iter().all(|bound| bound.holds(row))
}

/// What the best row maximises (or, for `fewest_gpus`, minimises).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Objective {
    /// `output_throughput_tok_s`.
    Throughput,
    /// `output_throughput_tok_s / gpus`.
    ThroughputPerGpu,
    /// `mean_output_token_throughput_per_user`.
    ThroughputPerUser,
    /// `goodput_output_throughput_tok_s` (needs a per-request SLA in the settings).
    Goodput,
    /// Fewest GPUs; among those, the highest throughput.
    FewestGpus,
}

impl Objective {
    pub const ALL: [Objective; 5] = [
        Objective::Throughput,
        Objective::ThroughputPerGpu,
        Objective::ThroughputPerUser,
        Objective::Goodput,
        Objective::FewestGpus,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Objective::Throughput => "throughput",
            Objective::ThroughputPerGpu => "throughput_per_gpu",
            Objective::ThroughputPerUser => "throughput_per_user",
            Objective::Goodput => "goodput",
            Objective::FewestGpus => "fewest_gpus",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|objective| objective.name() == name)
    }

    /// The objective's value of a row, if it has one (the value shown in best.json).
    pub fn value(self, row: &Row) -> Option<f64> {
        let value = match self {
            Objective::Throughput => row.metric("output_throughput_tok_s")?,
            Objective::ThroughputPerGpu => throughput_per_gpu(row)?,
            Objective::ThroughputPerUser => row.metric("mean_output_token_throughput_per_user")?,
            Objective::Goodput => row.metric("goodput_output_throughput_tok_s")?,
            Objective::FewestGpus => row.gpus? as f64,
        };
        value.is_finite().then_some(value)
    }

    /// Orders two rows: `Greater` when `a` is better.
    pub fn compare(self, a: &Row, b: &Row) -> Ordering {
        let primary = match (self.value(a), self.value(b)) {
            (Some(x), Some(y)) if self == Objective::FewestGpus => y.total_cmp(&x),
            (Some(x), Some(y)) => x.total_cmp(&y),
            (Some(_), None) => Ordering::Greater,
            (None, Some(_)) => Ordering::Less,
            (None, None) => Ordering::Equal,
        };
        primary.then_with(|| {
            let throughput = |row: &Row| row.metric("output_throughput_tok_s").unwrap_or(f64::MIN);
            throughput(a).total_cmp(&throughput(b))
        })
    }
}

/// `output_throughput_tok_s / gpus`.
pub fn throughput_per_gpu(row: &Row) -> Option<f64> {
    let gpus = row.gpus.filter(|&gpus| gpus > 0)? as f64;
    Some(row.metric("output_throughput_tok_s")? / gpus)
}

/// The best feasible row for an objective (ties go to the earlier row), or `None` when no
/// feasible row has a value for it.
pub fn best_row<'a>(rows: &'a [Row], sla: &[SlaBound], objective: Objective) -> Option<&'a Row> {
    let mut best: Option<&Row> = None;
    for row in rows {
        if !feasible(row, sla) || objective.value(row).is_none() {
            continue;
        }
        if best.is_none_or(|current| objective.compare(row, current) == Ordering::Greater) {
            best = Some(row);
        }
    }
    best
}

/// The point of a row in the Pareto plane: (output tokens/s per GPU, tokens/s per user).
pub fn pareto_point(row: &Row) -> Option<(f64, f64)> {
    if !row.error.is_empty() {
        return None;
    }
    let x = throughput_per_gpu(row)?;
    let y = row.metric("mean_output_token_throughput_per_user")?;
    (x.is_finite() && y.is_finite()).then_some((x, y))
}

/// Indices (into `rows`, in order) of the rows on the Pareto front: every row with a point
/// that no other point dominates (at least as good on both axes and better on one). Rows with
/// equal points are all on the front or all off it.
pub fn pareto_front(rows: &[Row]) -> Vec<usize> {
    let points: Vec<Option<(f64, f64)>> = rows.iter().map(pareto_point).collect();
    // Sorted by x descending, then y descending: a point is dominated exactly when an earlier
    // point in this order has a greater y, or an equal y with a greater x.
    let mut order: Vec<usize> = (0..rows.len()).filter(|&i| points[i].is_some()).collect();
    order.sort_by(|&i, &j| {
        let (a, b) = (points[i].unwrap_or_default(), points[j].unwrap_or_default());
        b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1))
    });
    let mut front = Vec::new();
    // The best y among points with a strictly greater x, and the point that holds the best y
    // seen so far (to tell equal points from dominating ones).
    let mut best: Option<(f64, f64)> = None;
    for &index in &order {
        let (x, y) = points[index].unwrap_or_default();
        let dominated =
            best.is_some_and(|(best_x, best_y)| best_y > y || (best_y == y && best_x > x));
        if !dominated {
            front.push(index);
        }
        if best.is_none_or(|(best_x, best_y)| y > best_y || (y == best_y && x > best_x)) {
            best = Some((x, y));
        }
    }
    front.sort_unstable();
    front
}
