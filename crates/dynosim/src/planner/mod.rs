//! The planner in the loop: at scaling ticks the simulation shows a [`ScalingPolicy`] what its
//! workers did (a [`ScalingSnapshot`]) and applies the worker counts it asks for.
//!
//! INTERFACE
//! - [`ScalingPolicy`]: the reference's two calls — the first tick time, then one decision per
//!   tick (absolute non-draining worker targets, `None` = unchanged, and the next tick time,
//!   `None` = no more ticks). The simulation calls it; the native planner and the Python
//!   front's `scaling_policy` objects implement it.
//! - [`ScalingSnapshot`]: the settled state at a tick — the latest forward-pass metrics per
//!   (worker, rank) since the previous tick, the traffic of the window since then, and which
//!   workers are active, starting or draining (ids ascending).
//! - [`NativePlanner`]: the reference planner (ai-dynamo 1.4.2) in Rust, built from a
//!   [`PlannerSpec`] and the engines' [`Capabilities`]; it records [`ScalingEvent`]s and counts
//!   ticks ([`PlannerOutcome`]).
//!
//! The planner reads only what the snapshot carries: it knows nothing of the simulation.

mod budget;
mod native;
pub mod perf;
pub mod predict;
mod sla;

pub use native::NativePlanner;

use crate::config::planner::PlannerSpec;
use crate::config::EngineArgs;
pub use crate::engine::fpm::ForwardPassMetrics;
use crate::error::Result;

/// Traffic over one tick window `(previous tick, now]` (the first window starts at 0).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TrafficStats {
    pub duration_s: f64,
    /// Requests released in the window.
    pub num_req: usize,
    /// Means over requests completed (not rejected) in the window, with their count.
    pub avg_isl: f64,
    pub avg_osl: f64,
    pub shape_count: usize,
    /// Mean time to first token over those with a positive one.
    pub avg_ttft_ms: f64,
    pub ttft_count: usize,
    /// Mean of per-request inter-token latencies over those with more than one output token.
    pub avg_itl_ms: f64,
    pub itl_count: usize,
    /// Mean prefix-cache hit ratio over router admissions with a non-empty prompt (KV router
    /// only; 0 with round robin).
    pub avg_kv_hit_rate: f64,
    pub hit_rate_count: usize,
    /// Visible output tokens per decode request-forward, `None` without any forward.
    pub avg_accept_length: Option<f64>,
    pub accept_length_forward_count: usize,
}

/// Which workers of one pool are in which state, ids ascending.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolWorkers {
    pub active: Vec<usize>,
    pub starting: Vec<usize>,
    pub draining: Vec<usize>,
}

impl PoolWorkers {
    /// Workers that count towards a target: active and starting.
    pub fn non_draining(&self) -> usize {
        self.active.len() + self.starting.len()
    }
}

/// What a policy sees at one tick.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScalingSnapshot {
    pub now_ms: f64,
    /// Latest metrics per (worker, rank) since the previous tick, ordered by (worker, rank);
    /// empty for an aggregated deployment, which reports everything as decode.
    pub prefill_fpm: Vec<(usize, u32, ForwardPassMetrics)>,
    pub decode_fpm: Vec<(usize, u32, ForwardPassMetrics)>,
    pub traffic: TrafficStats,
    /// Empty for an aggregated deployment.
    pub prefill: PoolWorkers,
    /// The aggregated workers, or the decode pool.
    pub decode: PoolWorkers,
}

/// A policy's answer at one tick.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScalingDecision {
    /// Non-draining prefill workers wanted (ignored for an aggregated deployment).
    pub target_prefill: Option<usize>,
    /// Non-draining decode (or aggregated) workers wanted.
    pub target_decode: Option<usize>,
    /// When to tick next (ms of model time); `None` or not finite: no more ticks.
    pub next_tick_ms: Option<f64>,
}

/// Decides worker counts at scaling ticks.
pub trait ScalingPolicy {
    /// The first tick (ms); not finite: no ticks at all.
    fn initial_tick_ms(&mut self) -> Result<f64>;
    /// One tick's decision.
    fn on_tick(&mut self, snapshot: &ScalingSnapshot) -> Result<ScalingDecision>;
}

/// A change of worker count the planner asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalingEvent {
    pub at_s: f64,
    /// `agg`, `prefill` or `decode`.
    pub component: &'static str,
    pub from: usize,
    pub to: usize,
}

impl ScalingEvent {
    pub fn reason(&self) -> &'static str {
        if self.to > self.from {
            "scale_up"
        } else {
            "scale_down"
        }
    }

    /// The reference's stdout line (without indentation).
    pub fn describe(&self) -> String {
        format!(
            "t={:.1}s [{}]: {} -> {} workers ({})",
            self.at_s,
            self.component,
            self.from,
            self.to,
            self.reason()
        )
    }
}

/// What the planner did over a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlannerOutcome {
    pub events: Vec<ScalingEvent>,
    /// Ticks the policy was called for.
    pub ticks: u64,
}

/// What the planner knows of one pool's engines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Capabilities {
    pub num_gpu: usize,
    pub max_num_batched_tokens: Option<usize>,
    pub max_num_seqs: Option<usize>,
    /// The engine's `max_model_len`.
    pub context_length: Option<usize>,
    /// KV tokens of a whole worker (all its ranks); `None` when 0.
    pub max_kv_tokens: Option<u64>,
}

impl Capabilities {
    pub fn of(args: &EngineArgs) -> Self {
        let dp = args.dp_size.max(1) as u64;
        let max_kv = args.num_gpu_blocks as u64 * args.block_size as u64 * dp;
        Self {
            num_gpu: args.gpus_per_worker(),
            max_num_batched_tokens: args.max_num_batched_tokens,
            max_num_seqs: args.max_num_seqs,
            context_length: args.max_model_len,
            max_kv_tokens: (max_kv > 0).then_some(max_kv),
        }
    }
}

/// The native planner for a spec's deployment (decode capabilities from the aggregated or
/// decode engine arguments, prefill ones from the prefill pool when disaggregated). In SLA
/// mode, engines timed by a measured profile or AIC tables seed the planner's perf models
/// with benchmark passes from that timing model ([`benchmark_passes`]).
pub fn native_for(spec: &crate::config::ReplaySpec, planner: &PlannerSpec) -> NativePlanner {
    let generating = &spec.deployment.generating().engine;
    let decode = Capabilities::of(generating);
    let prefill_args = match &spec.deployment {
        crate::config::Deployment::Disaggregated { prefill, .. } => Some(&prefill.engine),
        crate::config::Deployment::Aggregated(_) => None,
    };
    let prefill = prefill_args.map(Capabilities::of);
    let mut native = NativePlanner::new(planner.clone(), prefill, decode);
    if planner.target == crate::config::planner::OptimizationTarget::Sla {
        let (p_prefill, _) = prefill_args.map(benchmark_passes).unwrap_or_default();
        let (d_prefill, d_decode) = benchmark_passes(generating);
        if prefill_args.is_some() {
            native.bootstrap_perf(p_prefill, d_decode);
        } else {
            native.bootstrap_perf(Vec::new(), d_prefill.into_iter().chain(d_decode));
        }
    }
    native
}

/// One timed pass: `(prompt tokens, decode KV tokens, seconds)`.
pub type TimedPass = (f64, f64, f64);

/// Passes timed by an engine's own timing model, as [`TimedPass`]es: prefills of 8 prompt lengths up to the batch limit, and decodes of batch sizes
/// 1, 2, 4, … (within `max_num_seqs` and the KV cache) at contexts of 500, 2000, 4000 and 8000
/// tokens — the shape of the reference's AIC bootstrap. Only engines timed by a measured
/// profile (`planner_profile_data`) or AIC tables give any: the default polynomial is the
/// mocker's stand-in, which the reference's planner does not know either, so there the perf
/// model learns from the run alone, as the reference's does without AIC.
pub fn benchmark_passes(args: &EngineArgs) -> (Vec<TimedPass>, Vec<TimedPass>) {
    use crate::config::TimingSource;
    use crate::engine::timing::{DecodeBatch, PrefillBatch, TimingModel};
    let measured = args.aic.as_ref().is_some_and(|aic| aic.tables.is_some())
        || matches!(args.timing, TimingSource::ProfileTable(_));
    if !measured {
        return (Vec::new(), Vec::new());
    }
    let mut timing = TimingModel::new(args);
    let batch_limit = args.max_num_batched_tokens.unwrap_or(8192).max(8);
    let prefill = (1..=8)
        .map(|k| {
            let tokens = batch_limit * k / 8;
            let batch = PrefillBatch {
                requests: 1,
                covered_before: 0,
                covered_after: tokens,
            };
            (tokens as f64, 0.0, timing.prefill_clock_ms(&batch) / 1000.0)
        })
        .collect();
    let block = args.block_size.max(1);
    let capacity = args.num_gpu_blocks * block;
    let max_seqs = args.max_num_seqs.unwrap_or(256).max(1);
    let mut decode = Vec::new();
    for context in [500usize, 2000, 4000, 8000] {
        let blocks_each = context.div_ceil(block);
        let mut batch = 1usize;
        while batch <= max_seqs && batch * blocks_each * block <= capacity {
            let pass = DecodeBatch {
                ready: batch,
                active_kv_tokens: batch * blocks_each * block,
                total_kv_tokens: capacity,
                context_tokens: batch * context,
            };
            let seconds = timing.decode_clock_ms(&pass) / 1000.0;
            decode.push((0.0, (batch * context) as f64, seconds));
            batch *= 2;
        }
    }
    (prefill, decode)
}
