//! The reference planner's offline decision path, natively: its replay adapter (forward-pass
//! metric cache, worker counts and scaling-in-progress bookkeeping, events), the tick cadence
//! and plugin due rules, and the easy-mode load decisions (`throughput`, `latency`, `load`)
//! with their budget clamps.
//!
//! Per tick: the adapter's worker counts (ready = active; expected = the last target not yet
//! reached); the metric cache updated and pruned to active workers; when the load loop is due,
//! its decision (a target per component, or none); no change against the *ready* counts means
//! no action; otherwise the final budget clamp, and an event for every component whose target
//! differs from its *non-draining* count.

use std::collections::BTreeMap;

use super::budget::{clamp_pair, clamp_single};
use super::perf::{Limits, PerfModel, Settings, WorkerKind};
use super::predict::{LoadForecast, TrafficObservation};
use super::{
    Capabilities, ForwardPassMetrics, PlannerOutcome, ScalingDecision, ScalingEvent, ScalingPolicy,
    ScalingSnapshot,
};
use crate::config::planner::{OptimizationTarget, PlannerMode, PlannerSpec};
use crate::error::Result;

/// Traffic windows merged between two consuming ticks, weighted by their sample counts.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct MergedTraffic {
    duration_s: f64,
    num_req: usize,
    isl_sum: f64,
    osl_sum: f64,
    shapes: usize,
    hit_sum: f64,
    hits: usize,
}

impl MergedTraffic {
    pub(super) fn add(&mut self, traffic: &super::TrafficStats) {
        self.duration_s += traffic.duration_s;
        self.num_req += traffic.num_req;
        self.isl_sum += traffic.avg_isl * traffic.shape_count as f64;
        self.osl_sum += traffic.avg_osl * traffic.shape_count as f64;
        self.shapes += traffic.shape_count;
        self.hit_sum += traffic.avg_kv_hit_rate * traffic.hit_rate_count as f64;
        self.hits += traffic.hit_rate_count;
    }

    /// The merged observation (none for an empty span), and a fresh start.
    pub(super) fn take(&mut self) -> Option<TrafficObservation> {
        let merged = std::mem::take(self);
        if merged.duration_s <= 0.0 {
            return None;
        }
        let mean = |sum: f64, n: usize| if n > 0 { sum / n as f64 } else { 0.0 };
        Some(TrafficObservation {
            duration_s: merged.duration_s,
            num_req: merged.num_req as f64,
            isl: mean(merged.isl_sum, merged.shapes),
            osl: mean(merged.osl_sum, merged.shapes),
            kv_hit_rate: (merged.hits > 0).then(|| merged.hit_sum / merged.hits as f64),
        })
    }
}

/// Metrics per (worker, rank), as last seen.
pub(super) type FpmCache = BTreeMap<(usize, u32), ForwardPassMetrics>;

/// Easy-mode thresholds: prefill on queued tokens ÷ context length, decode (and aggregated)
/// on KV utilization (scheduled + queued, ÷ the worker's KV capacity).
const PREFILL_THROUGHPUT: (f64, f64) = (1.0, 0.1);
const PREFILL_LATENCY: (f64, f64) = (0.1, 0.0);
const DECODE_THROUGHPUT: (f64, f64) = (1.0, 0.6);
const DECODE_LATENCY: (f64, f64) = (0.4, 0.1);

/// What the planner knows of worker counts at a tick.
#[derive(Clone, Copy, Debug)]
struct Counts {
    ready_p: usize,
    ready_d: usize,
    expected_p: usize,
    expected_d: usize,
    in_progress_p: bool,
    in_progress_d: bool,
}

/// The reference planner, natively.
#[derive(Debug)]
pub struct NativePlanner {
    pub(super) spec: PlannerSpec,
    pub(super) prefill_caps: Option<Capabilities>,
    pub(super) decode_caps: Capabilities,
    /// The tick being waited for (seconds).
    pending_at_s: f64,
    /// When the load loop last ran (0 before its first run: it first runs one interval in).
    load_anchor_s: f64,
    /// When the throughput loop last ran (same rule).
    throughput_anchor_s: f64,
    pub(super) prefill_cache: FpmCache,
    pub(super) decode_cache: FpmCache,
    /// The last target asked for and not yet reached, per component.
    target_prefill: Option<usize>,
    target_decode: Option<usize>,
    outcome: PlannerOutcome,
    // SLA mode only below.
    /// Learned pass times: the prefill pool's (disaggregated), and the decode pool's or the
    /// aggregated workers'.
    pub(super) perf_prefill: Option<PerfModel>,
    pub(super) perf_decode: PerfModel,
    /// The throughput loop's traffic forecasters (when that loop is on).
    pub(super) forecast: Option<LoadForecast>,
    /// Traffic since the last tick that consumed it.
    traffic: MergedTraffic,
    /// The throughput loop's floors under the load loop's targets.
    pub(super) lower_bound_p: usize,
    pub(super) lower_bound_d: usize,
    pub(super) last_kv_hit_rate: Option<f64>,
    pub(super) last_accept_length: f64,
}

impl NativePlanner {
    pub fn new(
        spec: PlannerSpec,
        prefill_caps: Option<Capabilities>,
        decode_caps: Capabilities,
    ) -> Self {
        let settings = Settings {
            max_samples: spec.max_num_fpm_samples,
            min_observations: spec.load_min_observations,
        };
        let limits = |caps: &Capabilities| {
            Limits::new(
                caps.max_num_batched_tokens,
                caps.max_num_seqs,
                caps.max_kv_tokens,
            )
        };
        let disagg = spec.mode == PlannerMode::Disagg;
        let perf_prefill = if disagg {
            let caps = prefill_caps.unwrap_or(decode_caps);
            Some(PerfModel::new(WorkerKind::Prefill, limits(&caps), settings))
        } else {
            None
        };
        let decode_kind = if disagg {
            WorkerKind::Decode
        } else {
            WorkerKind::Aggregated
        };
        let perf_decode = PerfModel::new(decode_kind, limits(&decode_caps), settings);
        let forecast = (spec.target == OptimizationTarget::Sla && spec.enable_throughput_scaling)
            .then(|| LoadForecast::new(&spec));
        Self {
            spec,
            prefill_caps,
            decode_caps,
            pending_at_s: 0.0,
            load_anchor_s: 0.0,
            throughput_anchor_s: 0.0,
            prefill_cache: FpmCache::new(),
            decode_cache: FpmCache::new(),
            target_prefill: None,
            target_decode: None,
            outcome: PlannerOutcome::default(),
            perf_prefill,
            perf_decode,
            forecast,
            traffic: MergedTraffic::default(),
            lower_bound_p: 1,
            lower_bound_d: 1,
            last_kv_hit_rate: None,
            last_accept_length: 1.0,
        }
    }

    /// Seeds the SLA perf models with passes timed by the engines' own timing models
    /// (`(prompt tokens, decode KV tokens, seconds)` per pass), as the reference seeds its
    /// model from AIC when AIC is configured.
    pub fn bootstrap_perf(
        &mut self,
        prefill: impl IntoIterator<Item = (f64, f64, f64)>,
        decode: impl IntoIterator<Item = (f64, f64, f64)>,
    ) {
        if let Some(model) = self.perf_prefill.as_mut() {
            model.bootstrap(prefill);
        }
        self.perf_decode.bootstrap(decode);
    }

    /// The scaling events and the tick count so far.
    pub fn outcome(&self) -> &PlannerOutcome {
        &self.outcome
    }

    pub fn into_outcome(self) -> PlannerOutcome {
        self.outcome
    }

    fn is_disagg(&self) -> bool {
        self.spec.mode == PlannerMode::Disagg
    }

    /// The load loop's decision: `Some((prefill, decode))` targets, `None` for no opinion.
    fn load_decision(&mut self, counts: &Counts) -> Option<(Option<usize>, Option<usize>)> {
        if !self.spec.enable_load_scaling {
            return None;
        }
        if self.is_disagg() {
            self.disagg_decision(counts)
                .map(|(p, d)| (Some(p), Some(d)))
        } else if self.spec.target.is_easy() {
            self.agg_decision(counts).map(|d| (None, Some(d)))
        } else {
            self.sla_agg_decision(counts.ready_d, counts.in_progress_d, counts.expected_d)
                .map(|d| (None, Some(d)))
        }
    }

    fn agg_decision(&self, counts: &Counts) -> Option<usize> {
        let stats = &self.decode_cache;
        let n = counts.ready_d;
        if stats.is_empty() || counts.in_progress_d || counts.expected_d != n {
            return None;
        }
        if !reconciles(stats, n) {
            return None;
        }
        let desired = self.kv_decision(stats, n, true)?;
        let desired = desired.max(self.spec.min_endpoint);
        Some(self.single_budget(desired, self.decode_caps.num_gpu))
    }

    fn disagg_decision(&mut self, counts: &Counts) -> Option<(usize, usize)> {
        let (p_stats, d_stats) = (&self.prefill_cache, &self.decode_cache);
        if p_stats.is_empty() && d_stats.is_empty() {
            return None;
        }
        let in_progress_p = counts.in_progress_p || counts.expected_p != counts.ready_p;
        let in_progress_d = counts.in_progress_d || counts.expected_d != counts.ready_d;
        if in_progress_p || in_progress_d {
            return None;
        }
        if !p_stats.is_empty() && !reconciles(p_stats, counts.ready_p) {
            return None;
        }
        if !d_stats.is_empty() && !reconciles(d_stats, counts.ready_d) {
            return None;
        }
        let (has_p, has_d) = (!p_stats.is_empty(), !d_stats.is_empty());
        let easy = self.spec.target.is_easy();
        let p_desired = match (has_p, easy) {
            (false, _) => None,
            (true, true) => self.prefill_decision(&self.prefill_cache, counts.ready_p),
            (true, false) => self.sla_prefill_target(counts.ready_p),
        };
        let d_desired = match (has_d, easy) {
            (false, _) => None,
            (true, true) => self.kv_decision(&self.decode_cache, counts.ready_d, false),
            (true, false) => self.sla_decode_target(counts.ready_d),
        };
        let mut final_p = p_desired.unwrap_or(counts.ready_p);
        let mut final_d = d_desired.unwrap_or(counts.ready_d);
        if self.spec.enable_throughput_scaling {
            final_p = final_p.max(self.lower_bound_p);
            final_d = final_d.max(self.lower_bound_d);
        }
        let min_endpoint = self.spec.min_endpoint;
        let final_p = final_p.max(min_endpoint);
        let final_d = final_d.max(min_endpoint);
        let (final_p, final_d) = self.pair_budget(final_p, final_d);
        if final_p == counts.ready_p && final_d == counts.ready_d {
            return None;
        }
        Some((final_p, final_d))
    }

    /// Decode or aggregated workers on KV utilization (`with_queued_prefill`: aggregated
    /// workers also count the prompts waiting to be prefilled).
    fn kv_decision(&self, stats: &FpmCache, n: usize, with_queued_prefill: bool) -> Option<usize> {
        let max_kv = self.decode_caps.max_kv_tokens? as f64;
        if n == 0 {
            return None;
        }
        let target = self.spec.target;
        let (up, down) = match target {
            OptimizationTarget::Load => (
                self.spec.decode_scale_up_kv_rate? / 100.0,
                self.spec.decode_scale_down_kv_rate? / 100.0,
            ),
            OptimizationTarget::Latency => DECODE_LATENCY,
            _ => DECODE_THROUGHPUT,
        };
        let is_load = target == OptimizationTarget::Load;
        let utils: Vec<f64> = stats
            .values()
            .map(|fpm| {
                let mut kv = fpm.sum_decode_kv_tokens + fpm.sum_queued_decode_kv_tokens;
                if with_queued_prefill {
                    kv += fpm.sum_queued_prefill_tokens;
                }
                kv as f64 / max_kv
            })
            .collect();
        if utils
            .iter()
            .any(|&u| if is_load { u >= up } else { u > up })
        {
            return Some(n + 1);
        }
        let all_low = utils
            .iter()
            .all(|&u| if is_load { u <= down } else { u < down });
        if n > 1 && all_low {
            return Some((n - 1).max(self.spec.min_endpoint));
        }
        None
    }

    /// Prefill workers on queued prompt tokens (per context length, except in load mode).
    fn prefill_decision(&self, stats: &FpmCache, n: usize) -> Option<usize> {
        if n == 0 {
            return None;
        }
        let target = self.spec.target;
        let values: Vec<f64>;
        let (up, down) = if target == OptimizationTarget::Load {
            let up = self.spec.prefill_scale_up_queue_tokens? as f64;
            let down = self.spec.prefill_scale_down_queue_tokens? as f64;
            values = stats
                .values()
                .map(|fpm| fpm.sum_queued_prefill_tokens as f64)
                .collect();
            (up, down)
        } else {
            let context = self.prefill_caps.and_then(|caps| caps.context_length)?;
            if context == 0 {
                return None;
            }
            values = stats
                .values()
                .map(|fpm| fpm.sum_queued_prefill_tokens as f64 / context as f64)
                .collect();
            if target == OptimizationTarget::Latency {
                PREFILL_LATENCY
            } else {
                PREFILL_THROUGHPUT
            }
        };
        if values.iter().any(|&v| v >= up) {
            return Some(n + 1);
        }
        if n > 1 {
            let all_low = match target {
                OptimizationTarget::Throughput => values.iter().all(|&v| v < down),
                _ => values.iter().all(|&v| v <= down),
            };
            if all_low {
                return Some((n - 1).max(self.spec.min_endpoint));
            }
        }
        None
    }

    pub(super) fn single_budget(&self, desired: usize, gpus: usize) -> usize {
        clamp_single(
            desired.max(self.spec.min_endpoint),
            gpus,
            self.spec.min_gpu_budget,
            self.spec.max_gpu_budget,
            self.spec.min_endpoint,
        )
    }

    pub(super) fn pair_budget(&self, p: usize, d: usize) -> (usize, usize) {
        let p_gpu = self.prefill_caps.map_or(1, |caps| caps.num_gpu);
        clamp_pair(
            (p, d),
            (p_gpu, self.decode_caps.num_gpu),
            self.spec.min_gpu_budget,
            self.spec.max_gpu_budget,
            self.spec.min_endpoint,
        )
    }

    /// The orchestrator's projection: targets equal to the ready counts mean no action;
    /// otherwise the final budget clamp.
    fn project(
        &self,
        proposal: (Option<usize>, Option<usize>),
        counts: &Counts,
    ) -> Option<(Option<usize>, Option<usize>)> {
        let (num_p, num_d) = proposal;
        let unchanged = |(p, d): (Option<usize>, Option<usize>)| {
            let p_same = !self.is_disagg() || p.is_none_or(|p| p == counts.ready_p);
            let d_same = d.is_none_or(|d| d == counts.ready_d);
            p_same && d_same
        };
        if unchanged((num_p, num_d)) {
            return None;
        }
        let min_endpoint = self.spec.min_endpoint;
        let clamped = if self.is_disagg() {
            let base_p = num_p.unwrap_or(counts.ready_p).max(min_endpoint);
            let base_d = num_d.unwrap_or(counts.ready_d).max(min_endpoint);
            let (p, d) = self.pair_budget(base_p, base_d);
            (num_p.map(|_| p), num_d.map(|_| d))
        } else {
            (
                num_p,
                num_d.map(|d| self.single_budget(d, self.decode_caps.num_gpu)),
            )
        };
        if unchanged(clamped) {
            return None;
        }
        Some(clamped)
    }
}

/// The metrics cover every ready worker, each with the same number of ranks.
pub(super) fn reconciles(stats: &FpmCache, workers: usize) -> bool {
    let mut ranks_per_worker: BTreeMap<usize, usize> = BTreeMap::new();
    for &(worker, _) in stats.keys() {
        *ranks_per_worker.entry(worker).or_default() += 1;
    }
    if ranks_per_worker.len() != workers {
        return false;
    }
    let mut sizes = ranks_per_worker.values();
    let first = sizes.next().copied().unwrap_or(1);
    if sizes.any(|&s| s != first) {
        return false;
    }
    stats.len() == workers * first
}

/// Takes in new metrics and forgets workers that are no longer active.
fn update_cache(
    cache: &mut FpmCache,
    fresh: &[(usize, u32, ForwardPassMetrics)],
    active: &[usize],
) {
    for &(worker, rank, fpm) in fresh {
        cache.insert((worker, rank), fpm);
    }
    cache.retain(|(worker, _), _| active.binary_search(worker).is_ok());
}

impl ScalingPolicy for NativePlanner {
    fn initial_tick_ms(&mut self) -> Result<f64> {
        self.pending_at_s = self.spec.scale_interval_s;
        Ok(self.pending_at_s * 1000.0)
    }

    fn on_tick(&mut self, snapshot: &ScalingSnapshot) -> Result<ScalingDecision> {
        let now_s = self.pending_at_s;
        let disagg = self.is_disagg();
        let current_p = snapshot.prefill.non_draining();
        let current_d = snapshot.decode.non_draining();
        let counts = Counts {
            ready_p: snapshot.prefill.active.len(),
            ready_d: snapshot.decode.active.len(),
            expected_p: self.target_prefill.unwrap_or(current_p),
            expected_d: self.target_decode.unwrap_or(current_d),
            in_progress_p: disagg && self.target_prefill.is_some_and(|t| t != current_p),
            in_progress_d: self.target_decode.is_some_and(|t| t != current_d),
        };
        update_cache(
            &mut self.prefill_cache,
            &snapshot.prefill_fpm,
            &snapshot.prefill.active,
        );
        update_cache(
            &mut self.decode_cache,
            &snapshot.decode_fpm,
            &snapshot.decode.active,
        );

        let sla = self.spec.target == OptimizationTarget::Sla;
        let load_due = self.spec.enable_load_scaling
            && now_s - self.load_anchor_s >= self.spec.load_interval_s;
        let throughput_due = sla
            && self.spec.enable_throughput_scaling
            && now_s - self.throughput_anchor_s >= self.spec.throughput_interval_s - 1e-9;
        // Traffic accumulates until a tick that consumes it: a throughput tick, or (load
        // loop only) a load tick, which keeps the prefix-hit rate fresh.
        self.traffic.add(&snapshot.traffic);
        let consumes_traffic =
            throughput_due || (sla && load_due && !self.spec.enable_throughput_scaling);
        let traffic = if consumes_traffic {
            self.traffic.take()
        } else {
            None
        };
        if sla && load_due {
            if let Some(hit) = traffic.and_then(|t| t.kv_hit_rate) {
                self.last_kv_hit_rate = Some(hit);
            }
            self.tune_perf_models();
        }
        // The throughput loop runs first: its floors apply to this tick's load decision, and
        // a load-loop target wins over its own.
        let throughput = if throughput_due {
            self.throughput_anchor_s = now_s;
            self.throughput_decision(traffic)
        } else {
            None
        };
        let load = if load_due {
            self.load_anchor_s = now_s;
            self.load_decision(&counts)
        } else {
            None
        };
        let proposal = load.or(throughput);
        let scale_to = proposal.and_then(|proposal| self.project(proposal, &counts));
        self.outcome.ticks += 1;

        if self.target_prefill == Some(current_p) {
            self.target_prefill = None;
        }
        if self.target_decode == Some(current_d) {
            self.target_decode = None;
        }
        let mut decision = ScalingDecision::default();
        if let Some((num_p, num_d)) = scale_to {
            let target_p = num_p.unwrap_or(current_p);
            let target_d = num_d.unwrap_or(current_d);
            if target_p != current_p || target_d != current_d {
                let event = |component, from, to| ScalingEvent {
                    at_s: now_s,
                    component,
                    from,
                    to,
                };
                if disagg {
                    if num_p.is_some() && target_p != current_p {
                        self.target_prefill = Some(target_p);
                        self.outcome
                            .events
                            .push(event("prefill", current_p, target_p));
                    }
                    if num_d.is_some() && target_d != current_d {
                        self.target_decode = Some(target_d);
                        self.outcome
                            .events
                            .push(event("decode", current_d, target_d));
                    }
                } else {
                    self.target_decode = Some(target_d);
                    self.outcome.events.push(event("agg", current_d, target_d));
                }
                decision.target_prefill = Some(target_p);
                decision.target_decode = Some(target_d);
            }
        }
        self.pending_at_s = now_s + self.spec.scale_interval_s;
        decision.next_tick_ms = Some(self.pending_at_s * 1000.0);
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::TrafficStats;

    #[test]
    fn merged_windows_weight_shapes_by_their_counts() {
        let mut merged = MergedTraffic::default();
        assert_eq!(merged.take(), None);
        merged.add(&TrafficStats {
            duration_s: 5.0,
            num_req: 10,
            avg_isl: 100.0,
            avg_osl: 10.0,
            shape_count: 1,
            ..Default::default()
        });
        merged.add(&TrafficStats {
            duration_s: 5.0,
            num_req: 2,
            avg_isl: 400.0,
            avg_osl: 40.0,
            shape_count: 3,
            avg_kv_hit_rate: 0.5,
            hit_rate_count: 2,
            ..Default::default()
        });
        let observed = merged.take().unwrap();
        assert_eq!(observed.duration_s, 10.0);
        assert_eq!(observed.num_req, 12.0);
        assert_eq!(observed.isl, 325.0);
        assert_eq!(observed.osl, 32.5);
        assert_eq!(observed.kv_hit_rate, Some(0.5));
        // Taken: the next span starts empty.
        assert_eq!(merged.take(), None);
    }
}
