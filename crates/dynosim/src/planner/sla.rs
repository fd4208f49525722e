//! SLA mode (`optimization_target: sla`): the load loop compares per-worker TTFT and ITL
//! estimates from the learned [`PerfModel`]s with `ttft_ms` / `itl_ms`; the throughput loop
//! forecasts the next window's traffic and divides it by one engine's capacity.
//!
//! Load loop, per worker (and rank): scale up when every worker's estimate exceeds the SLA;
//! scale down by one only when every worker passes the consolidation check — its load grown
//! by N/(N−1) still meets the SLA with `load_scaling_down_sensitivity` headroom (prefill: the
//! queue-induced part of TTFT within that share of what the SLA leaves after the request's own
//! prefill; decode: the grown KV fits the cache and the ITL stays under the share of the SLA).
//! Aggregated workers take both views: a prefill scale-up wins, then a decode scale-up; a
//! decode scale-down needs the prefill view to agree or to have no estimate.
//! Throughput loop: replicas = ⌈demand ÷ engine capacity⌉; with the load loop on it only sets
//! a floor under the load loop's targets.

use super::native::{reconciles, FpmCache, NativePlanner};
use super::perf::{CapacityQuery, PerfModel, Scales};
use super::predict::TrafficObservation;
use crate::config::planner::PlannerMode;

/// The outcome of one component's load view.
#[derive(Clone, Copy, Debug, PartialEq)]
enum View {
    /// No estimate for any worker.
    Unknown,
    /// Estimates exist; the target (N+1, N−1, or N when neither applies).
    Target(usize),
}

/// What one load view compares its estimates with.
#[derive(Clone, Copy, Debug)]
struct Targets {
    ttft_ms: f64,
    itl_ms: f64,
    /// The share of the SLA a consolidated worker may use.
    sensitivity: f64,
    kv_hit_rate: Option<f64>,
    accept_length: f64,
    max_kv: Option<u64>,
    aggregated: bool,
}

impl NativePlanner {
    fn targets(&self) -> Targets {
        Targets {
            ttft_ms: self.spec.ttft_ms,
            itl_ms: self.spec.itl_ms,
            sensitivity: self.sensitivity(),
            kv_hit_rate: self.last_kv_hit_rate,
            accept_length: self.accept_length(),
            max_kv: self.decode_caps.max_kv_tokens,
            aggregated: self.spec.mode == PlannerMode::Agg,
        }
    }

    fn sensitivity(&self) -> f64 {
        self.spec.load_scaling_down_sensitivity / 100.0
    }

    fn accept_length(&self) -> f64 {
        let nextn = self.spec.speculative_nextn;
        if nextn == 0 {
            return 1.0;
        }
        self.last_accept_length.clamp(1.0, (nextn + 1) as f64)
    }

    /// Up when every estimate exceeds the SLA; down (to at least `min_endpoint`) when
    /// allowed; otherwise no change.
    fn scale_view(&self, estimates: &[f64], sla: f64, n: usize, can_scale_down: bool) -> View {
        if estimates.is_empty() {
            return View::Unknown;
        }
        if estimates.iter().all(|&t| t > sla) {
            return View::Target(n + 1);
        }
        if n > 1 && can_scale_down {
            return View::Target((n - 1).max(self.spec.min_endpoint));
        }
        View::Target(n)
    }

    /// Prefill view (disaggregated prefill pool, or aggregated workers' prompts).
    fn prefill_view(
        model: &mut PerfModel,
        stats: &FpmCache,
        n: usize,
        targets: Targets,
    ) -> (Vec<f64>, bool) {
        let Targets {
            ttft_ms,
            sensitivity,
            kv_hit_rate: hit,
            aggregated,
            ..
        } = targets;
        let consolidation = consolidation_factor(n);
        let mut estimates = Vec::new();
        let mut can_scale_down = n > 1;
        for fpm in stats.values() {
            if let Some(s) = model.queued_prefill_s(fpm, Scales::default(), hit) {
                estimates.push(s * 1000.0);
            }
            if !can_scale_down {
                continue;
            }
            // After consolidation: the queue (and, aggregated, the decode load) grows by
            // N/(N−1); the request's own prefill is a fixed cost outside the margin.
            let grown = |queue: f64| Scales {
                queue,
                decode: if aggregated { consolidation } else { 1.0 },
                queued_decode: aggregated,
                queued_prefill_as_kv: false,
            };
            let own = model.queued_prefill_s(fpm, grown(0.0), hit);
            let after = model.queued_prefill_s(fpm, grown(consolidation), hit);
            match (own, after) {
                (Some(own), Some(after)) => {
                    let own_ms = own * 1000.0;
                    let budget = (ttft_ms - own_ms) * sensitivity;
                    if budget <= 0.0 || after * 1000.0 - own_ms >= budget {
                        can_scale_down = false;
                    }
                }
                _ => can_scale_down = false,
            }
        }
        (estimates, can_scale_down)
    }

    /// Decode view (disaggregated decode pool, or aggregated workers' decodes).
    fn decode_view(
        model: &mut PerfModel,
        stats: &FpmCache,
        n: usize,
        targets: Targets,
    ) -> (Vec<f64>, bool) {
        let Targets {
            itl_ms,
            sensitivity,
            accept_length: accept,
            max_kv,
            aggregated,
            ..
        } = targets;
        let consolidation = consolidation_factor(n);
        let mut estimates = Vec::new();
        let mut can_scale_down = n > 1;
        let now = Scales {
            queued_decode: true,
            ..Scales::default()
        };
        for fpm in stats.values() {
            if let Some(s) = model.decode_itl_s(fpm, now) {
                estimates.push(s * 1000.0 / accept);
            }
            if !can_scale_down {
                continue;
            }
            let mut kv = fpm.sum_decode_kv_tokens + fpm.sum_queued_decode_kv_tokens;
            if aggregated {
                kv += fpm.sum_queued_prefill_tokens;
            }
            let grown_kv = (kv as f64 * consolidation) as u64;
            if max_kv.is_some_and(|max| grown_kv >= max) {
                can_scale_down = false;
                continue;
            }
            let grown = Scales {
                decode: consolidation,
                queued_decode: true,
                queued_prefill_as_kv: aggregated,
                ..Scales::default()
            };
            match model.decode_itl_s(fpm, grown) {
                Some(s) if s * 1000.0 / accept < itl_ms * sensitivity => {}
                _ => can_scale_down = false,
            }
        }
        (estimates, can_scale_down)
    }

    /// The SLA load loop for aggregated workers: a target, or none.
    pub(super) fn sla_agg_decision(
        &mut self,
        n: usize,
        in_progress: bool,
        expected: usize,
    ) -> Option<usize> {
        let stats = self.decode_cache.clone();
        if stats.is_empty() || in_progress || expected != n || !reconciles(&stats, n) {
            return None;
        }
        let targets = self.targets();
        let (ttft, itl) = (targets.ttft_ms, targets.itl_ms);
        let has_batch_limit = self
            .decode_caps
            .max_num_batched_tokens
            .is_some_and(|t| t > 0);
        let model = &mut self.perf_decode;
        if !model.is_ready() {
            return None;
        }
        let prefill = if has_batch_limit {
            Some(Self::prefill_view(model, &stats, n, targets))
        } else {
            None
        };
        let (d_estimates, d_down) = Self::decode_view(model, &stats, n, targets);
        let p_view = prefill.map(|(e, down)| self.scale_view(&e, ttft, n, down));
        let d_view = self.scale_view(&d_estimates, itl, n, d_down);
        let target = |view: Option<View>| match view {
            Some(View::Target(t)) => Some(t),
            _ => None,
        };
        let (p, d) = (target(p_view), target(Some(d_view)));
        let desired = match (p, d) {
            (Some(p), _) if p > n => p,
            (_, Some(d)) if d > n => d,
            (None, Some(d)) if d < n => d,
            (Some(p), Some(d)) if p < n && d < n => p.max(d),
            _ => n,
        };
        let mut desired = desired.max(self.spec.min_endpoint);
        if self.spec.enable_throughput_scaling {
            desired = desired.max(self.lower_bound_d);
        }
        let desired = self.single_budget(desired, self.decode_caps.num_gpu);
        (desired != n).then_some(desired)
    }

    /// The SLA view of the disaggregated prefill pool.
    pub(super) fn sla_prefill_target(&mut self, n: usize) -> Option<usize> {
        if n == 0 {
            return None;
        }
        let caps = self.prefill_caps?;
        caps.max_num_batched_tokens.filter(|&t| t > 0)?;
        let stats = self.prefill_cache.clone();
        let targets = self.targets();
        let model = self.perf_prefill.as_mut()?;
        if !model.is_ready() {
            return None;
        }
        let (estimates, down) = Self::prefill_view(model, &stats, n, targets);
        match self.scale_view(&estimates, targets.ttft_ms, n, down) {
            View::Target(t) if t != n => Some(t),
            _ => None,
        }
    }

    /// The SLA view of the disaggregated decode pool.
    pub(super) fn sla_decode_target(&mut self, n: usize) -> Option<usize> {
        if n == 0 {
            return None;
        }
        let stats = self.decode_cache.clone();
        let targets = self.targets();
        let model = &mut self.perf_decode;
        if !model.is_ready() {
            return None;
        }
        let (estimates, down) = Self::decode_view(model, &stats, n, targets);
        match self.scale_view(&estimates, targets.itl_ms, n, down) {
            View::Target(t) if t != n => Some(t),
            _ => None,
        }
    }

    /// Feeds the tick's cached metrics to the perf models (the reference re-feeds the cache
    /// at every load tick, so a quiet worker's last pass counts again).
    pub(super) fn tune_perf_models(&mut self) {
        if let Some(model) = self.perf_prefill.as_mut() {
            model.tune(self.prefill_cache.values());
        }
        self.perf_decode.tune(self.decode_cache.values());
    }

    /// The throughput loop at one of its ticks: forecast, then replicas from capacity. With
    /// the load loop on it raises the floors and proposes nothing; otherwise it proposes
    /// `(prefill, decode)` targets.
    pub(super) fn throughput_decision(
        &mut self,
        traffic: Option<TrafficObservation>,
    ) -> Option<(Option<usize>, Option<usize>)> {
        let traffic = traffic?;
        let forecast = self.forecast.as_mut()?.observe_and_predict(&traffic);
        if let Some(hit) = forecast.kv_hit_rate {
            self.last_kv_hit_rate = Some(hit);
        }
        let demand = forecast.num_req / traffic.duration_s;
        let query = CapacityQuery {
            isl: forecast.isl,
            osl: forecast.osl,
            ttft_sla_ms: self.spec.ttft_ms,
            itl_sla_ms: self.spec.itl_ms,
            kv_hit_rate: forecast.kv_hit_rate,
            accept_length: self.accept_length(),
        };
        let min_endpoint = self.spec.min_endpoint;
        let replicas = |rps: f64| -> usize {
            let needed = (demand / rps).ceil();
            let needed = if needed.is_finite() && needed > 0.0 {
                needed as usize
            } else {
                0
            };
            needed.max(min_endpoint)
        };
        let decode_capacity = self.perf_decode.capacity(&query).filter(|c| c.rps > 0.0);
        if self.spec.mode == PlannerMode::Agg {
            if self
                .decode_caps
                .max_num_batched_tokens
                .is_none_or(|t| t == 0)
            {
                return None;
            }
            let desired = replicas(decode_capacity?.rps);
            if self.spec.enable_load_scaling {
                self.lower_bound_d = desired;
                return None;
            }
            let desired = self.single_budget(desired, self.decode_caps.num_gpu);
            return Some((None, Some(desired)));
        }
        let prefill_capacity = self
            .perf_prefill
            .as_mut()
            .and_then(|model| model.capacity(&query))
            .filter(|c| c.rps > 0.0);
        let (p, d) = (
            replicas(prefill_capacity?.rps),
            replicas(decode_capacity?.rps),
        );
        if self.spec.enable_load_scaling {
            self.lower_bound_p = p;
            self.lower_bound_d = d;
            return None;
        }
        let (p, d) = self.pair_budget(p, d);
        Some((Some(p), Some(d)))
    }
}

/// How much each of `n` workers' load grows if one of them is removed: n / (n − 1), or 1 when
/// there is a single worker (nothing to consolidate into).
fn consolidation_factor(n: usize) -> f64 {
    if n > 1 {
        n as f64 / (n - 1) as f64
    } else {
        1.0
    }
}
