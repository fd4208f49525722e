//! The SLA planner's engine performance model: pass durations learned from the forward-pass
//! metrics the loop records, and the estimates the SLA decisions ask of it.
//!
//! INTERFACE
//! - [`PerfModel`]: one per pool kind ([`WorkerKind`]). [`PerfModel::tune`] takes a tick's
//!   metrics (the latest per worker and rank); [`PerfModel::is_ready`] once enough passes
//!   with a duration were seen; [`PerfModel::queued_prefill_s`] (time to drain a worker's
//!   queued prompts plus one average new request: the TTFT a new request would see) and
//!   [`PerfModel::decode_itl_s`] (one decode pass with the worker's decode load plus one
//!   average request) for the load loop; [`PerfModel::capacity`] (requests per second one
//!   engine sustains within the SLAs, searched over batch sizes) for the throughput loop.
//! - [`Capacity`]: the chosen operating point.
//!
//! The regression (ours; the reference uses aiconfigurator-core's bucketed one, whose numbers
//! we do not reproduce — see docs/differences.md): a pass with `P` prompt tokens computed and
//! `D` decode KV tokens scheduled takes
//! `a·[P>0] + b·P + c·P² + d·[D>0] + e·D + f·D²` seconds, every coefficient non-negative
//! (non-negative least squares, solved exactly by trying every subset of the six terms). That
//! family contains the engine's default polynomial prefill cost and the increasing part of
//! its decode cost, and fits profile or AIC tables closely over the range the run visits.
//! Idle (zero) metrics and zero-duration handoff passes carry no timing and are not fitted.

use std::collections::VecDeque;

use super::ForwardPassMetrics;

/// Which pool a model describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerKind {
    Prefill,
    Decode,
    Aggregated,
}

/// The engine limits the estimates respect (the reference's defaults when the engine
/// arguments leave one unset).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub max_batched_tokens: usize,
    pub max_num_seqs: usize,
    pub max_kv_tokens: u64,
}

impl Limits {
    pub fn new(
        max_batched_tokens: Option<usize>,
        max_num_seqs: Option<usize>,
        max_kv_tokens: Option<u64>,
    ) -> Self {
        Self {
            max_batched_tokens: max_batched_tokens.filter(|&v| v > 0).unwrap_or(8192),
            max_num_seqs: max_num_seqs.filter(|&v| v > 0).unwrap_or(512),
            max_kv_tokens: max_kv_tokens.filter(|&v| v > 0).unwrap_or(2_000_000),
        }
    }
}

/// Settings from the planner config.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// Passes kept for fitting, and the window of the request-shape averages.
    pub max_samples: usize,
    /// Passes needed before estimates are given.
    pub min_observations: usize,
}

/// One pass as fitted: prompt tokens computed, decode KV tokens, duration (s).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sample {
    prefill: f64,
    decode: f64,
    wall_s: f64,
}

const TERMS: usize = 6;

fn features(prefill: f64, decode: f64) -> [f64; TERMS] {
    [
        if prefill > 0.0 { 1.0 } else { 0.0 },
        prefill,
        prefill * prefill,
        if decode > 0.0 { 1.0 } else { 0.0 },
        decode,
        decode * decode,
    ]
}

/// Fitted coefficients, and which parts of the model the data could determine.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Fit {
    coef: [f64; TERMS],
    knows_prefill: bool,
    knows_decode: bool,
}

impl Fit {
    fn pass_s(&self, prefill: f64, decode: f64) -> f64 {
        let f = features(prefill, decode);
        f.iter()
            .zip(&self.coef)
            .map(|(x, c)| x * c)
            .sum::<f64>()
            .max(0.0)
    }
}

/// A mean over the last `len` values, starting at the first positive one.
#[derive(Clone, Debug)]
struct MovingAverage {
    len: usize,
    values: VecDeque<f64>,
    seen_positive: bool,
}

impl MovingAverage {
    fn new(len: usize) -> Self {
        Self {
            len: len.max(1),
            values: VecDeque::new(),
            seen_positive: false,
        }
    }

    fn add(&mut self, value: f64) {
        if value > 0.0 {
            self.seen_positive = true;
        }
        if !self.seen_positive {
            return;
        }
        self.values.push_back(value.max(0.0));
        if self.values.len() > self.len {
            self.values.pop_front();
        }
    }

    fn value(&self) -> f64 {
        if self.values.is_empty() {
            0.0
        } else {
            self.values.iter().sum::<f64>() / self.values.len() as f64
        }
    }
}

/// The operating point [`PerfModel::capacity`] chose.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capacity {
    /// Requests per second one engine sustains.
    pub rps: f64,
    pub batch: usize,
    pub ttft_ms: Option<f64>,
    pub itl_ms: Option<f64>,
    /// Whether the point meets the SLAs (otherwise the best point that exists is returned).
    pub eligible: bool,
}

/// What a capacity query asks about.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CapacityQuery {
    pub isl: f64,
    pub osl: f64,
    pub ttft_sla_ms: f64,
    pub itl_sla_ms: f64,
    pub kv_hit_rate: Option<f64>,
    pub accept_length: f64,
}

/// How a synthetic request load is built from one worker's metrics (see the estimates).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scales {
    /// Factor on the queued prompt tokens (0: only the new request's own prefill).
    pub queue: f64,
    /// Factor on the decode load (consolidation: N/(N−1)).
    pub decode: f64,
    /// Count preempted (queued) decodes as decode load.
    pub queued_decode: bool,
    /// Count queued prompts as decode KV (an aggregated worker's prompts become decodes).
    pub queued_prefill_as_kv: bool,
}

impl Default for Scales {
    fn default() -> Self {
        Self {
            queue: 1.0,
            decode: 1.0,
            queued_decode: false,
            queued_prefill_as_kv: false,
        }
    }
}

/// The largest prefix-hit discount applied to queued prompts.
const MAX_KV_HIT_DISCOUNT: f64 = 0.95;

/// A prefix-hit rate as a discount: 0 when unknown, at most 0.95.
pub fn hit_discount(kv_hit_rate: Option<f64>) -> f64 {
    match kv_hit_rate {
        Some(h) if !h.is_nan() => h.clamp(0.0, MAX_KV_HIT_DISCOUNT),
        _ => 0.0,
    }
}

/// Learned pass durations of one pool.
#[derive(Clone, Debug)]
pub struct PerfModel {
    kind: WorkerKind,
    limits: Limits,
    settings: Settings,
    samples: VecDeque<Sample>,
    fit: Option<Fit>,
    avg_isl: MovingAverage,
    avg_decode_len: MovingAverage,
}

impl PerfModel {
    pub fn new(kind: WorkerKind, limits: Limits, settings: Settings) -> Self {
        Self {
            kind,
            limits,
            settings,
            samples: VecDeque::new(),
            fit: None,
            avg_isl: MovingAverage::new(settings.max_samples),
            avg_decode_len: MovingAverage::new(settings.max_samples),
        }
    }

    /// Takes in a tick's metrics (one per worker and rank, in key order).
    pub fn tune<'a>(&mut self, metrics: impl IntoIterator<Item = &'a ForwardPassMetrics>) {
        for fpm in metrics {
            self.observe_shape(fpm);
            if fpm.wall_time_s > 0.0 && fpm.wall_time_s.is_finite() {
                self.push(Sample {
                    prefill: fpm.sum_prefill_tokens as f64,
                    decode: fpm.sum_decode_kv_tokens as f64,
                    wall_s: fpm.wall_time_s,
                });
            }
        }
    }

    /// Seeds the model with passes timed by the engine's own timing model (prompt tokens,
    /// decode KV tokens, seconds): the analogue of the reference's AIC bootstrap.
    pub fn bootstrap(&mut self, passes: impl IntoIterator<Item = (f64, f64, f64)>) {
        for (prefill, decode, wall_s) in passes {
            if wall_s > 0.0 && wall_s.is_finite() {
                self.push(Sample {
                    prefill,
                    decode,
                    wall_s,
                });
            }
        }
    }

    fn push(&mut self, sample: Sample) {
        self.samples.push_back(sample);
        if self.samples.len() > self.settings.max_samples.max(1) {
            self.samples.pop_front();
        }
        self.fit = None;
    }

    /// The request shapes a new request is assumed to have: the mean prompt tokens per
    /// scheduled prefill and the mean sequence length per scheduled decode.
    fn observe_shape(&mut self, fpm: &ForwardPassMetrics) {
        if fpm.num_prefill_requests > 0 {
            self.avg_isl
                .add(fpm.sum_prefill_tokens as f64 / f64::from(fpm.num_prefill_requests));
        } else {
            self.avg_isl.add(0.0);
        }
        if fpm.num_decode_requests > 0 {
            self.avg_decode_len
                .add(fpm.sum_decode_kv_tokens as f64 / f64::from(fpm.num_decode_requests));
        }
    }

    pub fn avg_isl(&self) -> f64 {
        self.avg_isl.value()
    }

    pub fn observations(&self) -> usize {
        self.samples.len()
    }

    pub fn is_ready(&self) -> bool {
        self.samples.len() >= self.settings.min_observations.max(1)
    }

    fn fitted(&mut self) -> Option<Fit> {
        if !self.is_ready() {
            return None;
        }
        if self.fit.is_none() {
            self.fit = fit(&self.samples);
        }
        self.fit
    }

    /// Seconds to drain `tokens` prompt tokens in chunks of the batch limit, beside
    /// `decode_kv` decode KV tokens.
    fn drain_s(&self, fit: &Fit, tokens: f64, decode_kv: f64, chunk: f64) -> f64 {
        if tokens <= 0.0 {
            return 0.0;
        }
        let chunk = chunk.max(1.0);
        let full = (tokens / chunk).floor();
        let rest = tokens - full * chunk;
        let mut total = full * fit.pass_s(chunk, decode_kv);
        if rest > 0.0 {
            total += fit.pass_s(rest, decode_kv);
        }
        total
    }

    /// The time to first token a new request would see on this worker (seconds): its queued
    /// prompt tokens × `scales.queue` plus one average prompt, discounted by the prefix-hit
    /// rate, prefilled in chunks of the batch limit beside the worker's decode load (aggregated
    /// workers). `None` until the model has seen enough passes with prompt work.
    pub fn queued_prefill_s(
        &mut self,
        fpm: &ForwardPassMetrics,
        scales: Scales,
        kv_hit_rate: Option<f64>,
    ) -> Option<f64> {
        let fit = self.fitted()?;
        let mut queued = fpm.sum_queued_prefill_tokens as f64 * scales.queue;
        let avg_isl = self.avg_isl();
        if avg_isl > 0.0 {
            queued += avg_isl;
        }
        let queued = (queued * (1.0 - hit_discount(kv_hit_rate))).ceil().max(0.0);
        if queued == 0.0 {
            return Some(0.0);
        }
        if !fit.knows_prefill {
            return None;
        }
        let decode_kv = if self.kind == WorkerKind::Aggregated {
            let mut kv = fpm.sum_decode_kv_tokens as f64;
            if scales.queued_decode {
                kv += fpm.sum_queued_decode_kv_tokens as f64;
            }
            (kv * scales.decode).ceil().max(0.0)
        } else {
            0.0
        };
        Some(self.drain_s(
            &fit,
            queued,
            decode_kv,
            self.limits.max_batched_tokens as f64,
        ))
    }

    /// One decode pass on this worker with its decode load (scaled, plus one average
    /// request), in seconds. `None` until the model has seen enough passes with decodes.
    pub fn decode_itl_s(&mut self, fpm: &ForwardPassMetrics, scales: Scales) -> Option<f64> {
        let fit = self.fitted()?;
        if !fit.knows_decode {
            return None;
        }
        let mut kv = fpm.sum_decode_kv_tokens as f64;
        if scales.queued_decode {
            kv += fpm.sum_queued_decode_kv_tokens as f64;
        }
        if scales.queued_prefill_as_kv {
            kv += fpm.sum_queued_prefill_tokens as f64;
        }
        kv *= scales.decode;
        let avg_len = self.avg_decode_len.value();
        if avg_len > 0.0 {
            kv += avg_len;
        }
        let prefill = if self.kind == WorkerKind::Aggregated {
            0.0
        } else {
            fpm.sum_prefill_tokens as f64
        };
        Some(fit.pass_s(prefill, kv.ceil().max(0.0)))
    }

    /// Requests per second one engine sustains for requests of `query.isl` prompt and
    /// `query.osl` output tokens, searched over concurrent batch sizes (up to 128 evenly
    /// spaced sizes up to what the limits allow); the fastest point within the SLAs, else
    /// the lowest-latency one marked not eligible. `None` when the model cannot estimate.
    pub fn capacity(&mut self, query: &CapacityQuery) -> Option<Capacity> {
        let fit = self.fitted()?;
        if query.isl <= 0.0 || (self.kind != WorkerKind::Prefill && query.osl <= 0.0) {
            return None;
        }
        let isl = query.isl.ceil();
        let osl = query.osl.ceil().max(1.0);
        let accept = query.accept_length.max(1.0);
        let new_tokens = (isl * (1.0 - hit_discount(query.kv_hit_rate))).ceil();
        let limits = self.limits;
        let chunk = limits.max_batched_tokens as f64;
        let context = isl + osl / 2.0;
        let by_kv = (limits.max_kv_tokens as f64 / context).floor() as usize;
        let max_batch = match self.kind {
            WorkerKind::Prefill => {
                if !fit.knows_prefill {
                    return None;
                }
                limits
                    .max_num_seqs
                    .min((chunk / isl).floor() as usize)
                    .max(1)
            }
            WorkerKind::Decode => {
                if !fit.knows_decode {
                    return None;
                }
                limits.max_num_seqs.min(by_kv).max(1)
            }
            WorkerKind::Aggregated => {
                if !fit.knows_prefill || !fit.knows_decode {
                    return None;
                }
                limits
                    .max_num_seqs
                    .min(by_kv)
                    .min(limits.max_batched_tokens.saturating_sub(1))
                    .max(1)
            }
        };
        let steps = osl / accept;
        let mut best: Option<Capacity> = None;
        let mut fallback: Option<Capacity> = None;
        for b in batch_sizes(max_batch) {
            let bf = b as f64;
            let point = match self.kind {
                WorkerKind::Prefill => {
                    let ttft = self.drain_s(&fit, bf * new_tokens, 0.0, chunk);
                    (ttft > 0.0).then(|| Capacity {
                        rps: bf / ttft,
                        batch: b,
                        ttft_ms: Some(ttft * 1000.0),
                        itl_ms: None,
                        eligible: ttft * 1000.0 <= query.ttft_sla_ms,
                    })
                }
                WorkerKind::Decode => {
                    let itl = fit.pass_s(0.0, bf * context) / accept;
                    (itl > 0.0).then(|| Capacity {
                        rps: bf / (osl * itl),
                        batch: b,
                        ttft_ms: None,
                        itl_ms: Some(itl * 1000.0),
                        eligible: itl * 1000.0 <= query.itl_sla_ms,
                    })
                }
                WorkerKind::Aggregated => {
                    // Steady state with `b` requests in flight: every pass decodes them all
                    // and prefills the requests that replace the finished ones.
                    let decode_kv = bf * context;
                    let prefill_per_pass = bf * new_tokens / steps;
                    let balanced = prefill_per_pass + bf <= chunk;
                    let pass = fit.pass_s(prefill_per_pass.ceil(), decode_kv);
                    let itl = pass / accept;
                    let ttft = self.drain_s(&fit, new_tokens, decode_kv, (chunk - bf).max(1.0));
                    (pass > 0.0).then(|| Capacity {
                        rps: bf / (steps * pass),
                        batch: b,
                        ttft_ms: Some(ttft * 1000.0),
                        itl_ms: Some(itl * 1000.0),
                        eligible: balanced
                            && itl * 1000.0 <= query.itl_sla_ms
                            && ttft * 1000.0 <= query.ttft_sla_ms,
                    })
                }
            };
            let Some(point) = point else { continue };
            if fallback.is_none() {
                fallback = Some(point);
            }
            if point.eligible && best.is_none_or(|b| point.rps > b.rps) {
                best = Some(point);
            }
        }
        best.or(fallback)
    }
}

/// Up to 128 batch sizes from 1 to `max`, evenly spaced.
fn batch_sizes(max: usize) -> Vec<usize> {
    const POINTS: usize = 128;
    if max <= POINTS {
        return (1..=max).collect();
    }
    let mut sizes: Vec<usize> = (0..POINTS)
        .map(|k| 1 + ((max - 1) as f64 * k as f64 / (POINTS - 1) as f64).round() as usize)
        .collect();
    sizes.dedup();
    sizes
}

/// Non-negative least squares over the six terms: the best unconstrained fit of every subset
/// of terms whose coefficients all come out non-negative (the NNLS optimum is one of them).
fn fit(samples: &VecDeque<Sample>) -> Option<Fit> {
    if samples.is_empty() {
        return None;
    }
    let rows: Vec<[f64; TERMS]> = samples
        .iter()
        .map(|s| features(s.prefill, s.decode))
        .collect();
    let y: Vec<f64> = samples.iter().map(|s| s.wall_s).collect();
    // Columns scaled to at most 1, for a well-conditioned solve.
    let mut scale = [0.0f64; TERMS];
    for row in &rows {
        for (s, x) in scale.iter_mut().zip(row) {
            *s = s.max(x.abs());
        }
    }
    let present: Vec<usize> = (0..TERMS).filter(|&j| scale[j] > 0.0).collect();
    let mut best: Option<([f64; TERMS], f64)> = None;
    for mask in 1u32..(1 << present.len()) {
        let cols: Vec<usize> = present
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, &j)| j)
            .collect();
        let Some(solution) = least_squares(&rows, &y, &cols, &scale) else {
            continue;
        };
        if solution.iter().any(|&c| c < 0.0) {
            continue;
        }
        let mut coef = [0.0; TERMS];
        for (&j, &c) in cols.iter().zip(&solution) {
            coef[j] = c / scale[j];
        }
        let residual: f64 = rows
            .iter()
            .zip(&y)
            .map(|(row, &t)| {
                let predicted: f64 = row.iter().zip(&coef).map(|(x, c)| x * c).sum();
                (predicted - t).powi(2)
            })
            .sum();
        // Ties keep the earlier (smaller) subset.
        if best.is_none_or(|(_, r)| residual < r * (1.0 - 1e-12)) {
            best = Some((coef, residual));
        }
    }
    let (coef, _) = best?;
    Some(Fit {
        coef,
        knows_prefill: samples.iter().any(|s| s.prefill > 0.0),
        knows_decode: samples.iter().any(|s| s.decode > 0.0),
    })
}

/// Least squares on the scaled columns `cols` (normal equations, Gaussian elimination with
/// partial pivoting); `None` when they are (nearly) dependent.
fn least_squares(
    rows: &[[f64; TERMS]],
    y: &[f64],
    cols: &[usize],
    scale: &[f64; TERMS],
) -> Option<Vec<f64>> {
    let n = cols.len();
    let mut a = vec![vec![0.0; n + 1]; n];
    for (row, &t) in rows.iter().zip(y) {
        let x: Vec<f64> = cols.iter().map(|&j| row[j] / scale[j]).collect();
        for i in 0..n {
            for k in 0..n {
                a[i][k] += x[i] * x[k];
            }
            a[i][n] += x[i] * t;
        }
    }
    let norm = a
        .iter()
        .map(|r| r[..n].iter().map(|v| v.abs()).sum::<f64>())
        .fold(0.0, f64::max);
    for col in 0..n {
        let pivot = (col..n).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        if a[pivot][col].abs() <= 1e-10 * norm.max(f64::MIN_POSITIVE) {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r == col {
                continue;
            }
            let factor = row[col] / pivot_row[col];
            if factor != 0.0 {
                for (cell, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                    *cell -= factor * p;
                }
            }
        }
    }
    Some((0..n).map(|i| a[i][n] / a[i][i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::timing::{polynomial_decode_ms, polynomial_prefill_ms};

    const SETTINGS: Settings = Settings {
        max_samples: 64,
        min_observations: 5,
    };

    fn fpm(prefill: u64, decodes: u32, decode_kv: u64, wall_s: f64) -> ForwardPassMetrics {
        ForwardPassMetrics {
            wall_time_s: wall_s,
            num_prefill_requests: u32::from(prefill > 0),
            sum_prefill_tokens: prefill,
            num_decode_requests: decodes,
            sum_decode_kv_tokens: decode_kv,
            ..Default::default()
        }
    }

    /// Prefill passes timed by the engine's default polynomial.
    fn prefill_model() -> PerfModel {
        let mut model = PerfModel::new(
            WorkerKind::Prefill,
            Limits::new(Some(8192), None, None),
            SETTINGS,
        );
        let passes: Vec<ForwardPassMetrics> = [512u64, 1024, 2048, 4096, 6000, 8192]
            .iter()
            .map(|&p| fpm(p, 0, 0, polynomial_prefill_ms(1, p as usize, 0) / 1000.0))
            .collect();
        model.tune(&passes);
        model
    }

    #[test]
    fn the_regression_recovers_the_default_prefill_polynomial() {
        let mut model = prefill_model();
        assert!(model.is_ready());
        let queued = ForwardPassMetrics {
            sum_queued_prefill_tokens: 3000,
            ..Default::default()
        };
        // 3000 queued tokens plus one average prompt (the mean of the fitted ones).
        let avg = (512.0 + 1024.0 + 2048.0 + 4096.0 + 6000.0 + 8192.0) / 6.0;
        let tokens = (3000.0f64 + avg).ceil();
        let expected = polynomial_prefill_ms(1, tokens as usize, 0) / 1000.0;
        let estimate = model
            .queued_prefill_s(&queued, Scales::default(), None)
            .unwrap();
        assert!(
            (estimate - expected).abs() < 1e-7,
            "{estimate} vs {expected}"
        );
        // Beyond one batch the queue drains in chunks of the batch limit.
        let long = ForwardPassMetrics {
            sum_queued_prefill_tokens: 20000,
            ..Default::default()
        };
        let tokens = (20000.0f64 + avg).ceil() as usize;
        let expected = (2.0 * polynomial_prefill_ms(1, 8192, 0)
            + polynomial_prefill_ms(1, tokens - 16384, 0))
            / 1000.0;
        let estimate = model
            .queued_prefill_s(&long, Scales::default(), None)
            .unwrap();
        assert!((estimate - expected).abs() < 1e-7);
        // A prefix-hit rate discounts the queue (at most 95 %).
        let discounted = model
            .queued_prefill_s(&long, Scales::default(), Some(0.5))
            .unwrap();
        assert!(discounted < estimate);
        // A prefill pool never learns decode times.
        assert_eq!(model.decode_itl_s(&long, Scales::default()), None);
    }

    #[test]
    fn not_ready_until_enough_timed_passes() {
        let mut model = PerfModel::new(WorkerKind::Decode, Limits::new(None, None, None), SETTINGS);
        let idle = ForwardPassMetrics::default();
        model.tune(&[idle; 10]);
        assert!(!model.is_ready());
        for kv in 1..=4u64 {
            model.tune(&[fpm(0, 4, kv * 1000, 0.01 + kv as f64 * 1e-3)]);
        }
        assert!(!model.is_ready());
        assert_eq!(model.decode_itl_s(&idle, Scales::default()), None);
        model.tune(&[fpm(0, 4, 5000, 0.015)]);
        assert!(model.is_ready());
        // ITL grows with the decode load and with consolidation.
        let load = fpm(0, 4, 4000, 0.0);
        let now = model.decode_itl_s(&load, Scales::default()).unwrap();
        let merged = model
            .decode_itl_s(
                &load,
                Scales {
                    decode: 2.0,
                    ..Scales::default()
                },
            )
            .unwrap();
        assert!(merged > now && now > 0.0);
    }

    #[test]
    fn the_fit_never_uses_negative_terms() {
        // Decode times from the default polynomial (its square term is negative): the fit
        // keeps every coefficient at least zero and still tracks the data.
        let mut model = PerfModel::new(
            WorkerKind::Decode,
            Limits::new(None, None, Some(65536)),
            SETTINGS,
        );
        let passes: Vec<ForwardPassMetrics> = (1..=16u64)
            .map(|k| {
                let kv = k * 4096;
                fpm(0, 8, kv, polynomial_decode_ms(kv as usize, 65536) / 1000.0)
            })
            .collect();
        model.tune(&passes);
        let fit = model.fitted().unwrap();
        assert!(fit.coef.iter().all(|&c| c >= 0.0));
        for pass in &passes {
            let predicted = fit.pass_s(0.0, pass.sum_decode_kv_tokens as f64);
            assert!(
                (predicted - pass.wall_time_s).abs() < 0.004,
                "{predicted} vs {}",
                pass.wall_time_s
            );
        }
    }

    #[test]
    fn capacity_is_the_fastest_point_within_the_sla() {
        let mut model = PerfModel::new(
            WorkerKind::Decode,
            Limits::new(None, Some(256), Some(1_000_000)),
            SETTINGS,
        );
        // ITL = 5 ms + 1 µs per KV token.
        let passes: Vec<ForwardPassMetrics> = (1..=8u64)
            .map(|k| fpm(0, 4, k * 5000, 0.005 + k as f64 * 5000.0 * 1e-6))
            .collect();
        model.tune(&passes);
        let query = CapacityQuery {
            isl: 1000.0,
            osl: 200.0,
            ttft_sla_ms: 1000.0,
            itl_sla_ms: 40.0,
            kv_hit_rate: None,
            accept_length: 1.0,
        };
        let capacity = model.capacity(&query).unwrap();
        // Context 1100 tokens: ITL(b) = 5 + 1.1·b ms ≤ 40 ms up to b = 31.
        assert!(capacity.eligible);
        assert_eq!(capacity.batch, 31);
        let itl = 0.005 + 31.0 * 1100.0 * 1e-6;
        assert!((capacity.rps - 31.0 / (200.0 * itl)).abs() < 1e-6);
        // An SLA nothing meets: the smallest batch, not eligible.
        let strict = model
            .capacity(&CapacityQuery {
                itl_sla_ms: 1.0,
                ..query
            })
            .unwrap();
        assert!(!strict.eligible);
        assert_eq!(strict.batch, 1);
        // A prefill-only question cannot be answered by a decode pool without osl.
        assert_eq!(model.capacity(&CapacityQuery { osl: 0.0, ..query }), None);
    }

    #[test]
    fn prefill_capacity_searches_batches_that_fit_one_pass() {
        let mut model = prefill_model();
        let capacity = model
            .capacity(&CapacityQuery {
                isl: 2048.0,
                osl: 256.0,
                ttft_sla_ms: 2000.0,
                itl_sla_ms: 40.0,
                kv_hit_rate: None,
                accept_length: 1.0,
            })
            .unwrap();
        // Up to 4 prompts of 2048 tokens fit a batch of 8192; with the quadratic cost, 3
        // together give the most requests per second.
        let rps = |b: usize| b as f64 * 1000.0 / polynomial_prefill_ms(1, 2048 * b, 0);
        assert!(rps(3) > rps(4) && rps(3) > rps(2));
        assert!(capacity.eligible);
        assert_eq!(capacity.batch, 3);
        assert!((capacity.rps - rps(3)).abs() < 1e-6);
    }

    #[test]
    fn batch_sizes_are_at_most_128_evenly_spaced() {
        assert_eq!(batch_sizes(3), vec![1, 2, 3]);
        let sizes = batch_sizes(1000);
        assert_eq!(sizes.len(), 128);
        assert_eq!((sizes[0], sizes[127]), (1, 1000));
    }
}
