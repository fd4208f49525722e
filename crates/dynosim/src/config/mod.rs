//! Configuration: raw options in, one validated [`ReplaySpec`] out.
//!
//! [`ReplayOptions`] mirrors the `dynamo.replay` flags one to one (the CLI fills it from clap, the
//! Python API from keyword arguments). [`ReplayOptions::into_spec`] is the only place where
//! options are validated and combined, in the reference's order, so the CLI and the Python API
//! accept and reject exactly the same inputs with the same messages.

pub mod engine_args;
mod json_fields;
pub mod options;
pub mod planner;
pub mod profile_table;
mod profiler_results;
pub mod router_config;
pub mod router_policy;
pub mod settings;
pub mod spelling;

pub use engine_args::{
    BatchWait, EngineArgs, EngineType, KvTransferTimingMode, PreemptionMode, SglangArgs,
    SpeculativeArgs, TimingSource, WorkerType,
};
pub use options::ReplayOptions;
pub use profile_table::ProfileTable;
pub use router_config::RouterConfig;
pub use router_policy::RouterQueuePolicy;

use std::path::PathBuf;

/// The latest virtual time (ms) an arrival or delay may reach: 1e12 ms, about 31.7 years.
/// Beyond it an f64 millisecond clock loses the resolution pass durations need (at 1e308 ms
/// adding a 10 ms pass changes nothing, so every latency reads 0) and sums overflow to
/// infinity, so inputs that reach it are refused.
pub const MAX_VIRTUAL_TIME_MS: f64 = 1e12;

/// A number for a message: positional when short, scientific (`1e30`, `1e-300`) otherwise, so
/// that a huge or tiny input does not print as hundreds of digits.
pub(crate) fn compact_f64(value: f64) -> String {
    let magnitude = value.abs();
    if value.is_finite() && magnitude != 0.0 && !(1e-4..1e16).contains(&magnitude) {
        format!("{value:e}")
    } else {
        format!("{value}")
    }
}

/// A fully validated replay: everything needed to load the workload and run the simulation.
#[derive(Clone, Debug)]
pub struct ReplaySpec {
    pub workload: WorkloadSpec,
    /// The workers: one aggregated pool, or a prefill pool and a decode pool.
    pub deployment: Deployment,
    pub router_mode: RouterMode,
    /// Router configuration (accepted and validated; round robin ignores it).
    pub router_config: Option<RouterConfig>,
    pub arrivals: ArrivalMode,
    /// `--replay-mode`: virtual time (offline) or the wall clock (online).
    pub replay_mode: ReplayMode,
    /// Stop before the first event later than this virtual time (ms).
    pub max_sim_time_ms: Option<f64>,
    pub sla: Sla,
    /// Collect per-request records (for `--report-jsonl`).
    pub capture_requests: bool,
    /// Planner in the loop (`--planner-config`): workers are added and removed at scaling ticks.
    pub planner: Option<planner::PlannerSpec>,
}

/// Whether a spec names AIC timing (an engine's or the KV router's) whose tables are not loaded
/// yet. Loading them is I/O (a Python builder and a cache on disk), so it happens outside this
/// crate (`dynosim_aic_tables::prepare`); a run refuses a spec for which this is still true.
pub fn needs_prepare(spec: &ReplaySpec) -> bool {
    let unprepared =
        |aic: Option<&crate::aic::AicConfig>| aic.is_some_and(|aic| aic.tables.is_none());
    spec.deployment
        .pools()
        .into_iter()
        .any(|(_, pool)| unprepared(pool.engine.aic.as_ref()))
        || spec
            .router_config
            .as_ref()
            .is_some_and(|config| unprepared(config.aic.as_ref()))
}

/// One pool of workers at its start: `workers` copies of one engine configuration (engine
/// arguments with their defaults materialised, validated).
#[derive(Clone, Debug)]
pub struct PoolSpec {
    pub engine: EngineArgs,
    pub workers: usize,
}

impl PoolSpec {
    /// GPUs of the whole pool, as the report counts them (`aic_tp_size × dp_size` a worker).
    pub fn gpus(&self) -> u64 {
        (self.workers as u64).saturating_mul(self.engine.gpus_per_worker() as u64)
    }
}

/// The workers a replay runs, by topology. Validated: aggregated workers have worker type
/// aggregated; disaggregated pools have the same engine type (vLLM or SGLang) and block size,
/// one DP rank per worker, worker types prefill and decode.
// One per run, held by its spec and never in a collection: boxing the larger variant would
// buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Deployment {
    /// One pool (`--extra-engine-args`, `--num-workers`).
    Aggregated(PoolSpec),
    /// A prefill pool handing its requests' KV over to a decode pool
    /// (`--prefill-engine-args`/`--num-prefill-workers`,
    /// `--decode-engine-args`/`--num-decode-workers`).
    Disaggregated { prefill: PoolSpec, decode: PoolSpec },
}

/// What a pool does in its deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolRole {
    Aggregated,
    Prefill,
    Decode,
}

impl PoolRole {
    /// The flag that gives this pool's engine arguments.
    pub fn engine_args_flag(self) -> &'static str {
        match self {
            PoolRole::Aggregated => "--extra-engine-args",
            PoolRole::Prefill => "--prefill-engine-args",
            PoolRole::Decode => "--decode-engine-args",
        }
    }

    /// The planner's and the HTML report's name of the pool's component.
    pub fn component(self) -> &'static str {
        match self {
            PoolRole::Aggregated => "agg",
            PoolRole::Prefill => "prefill",
            PoolRole::Decode => "decode",
        }
    }
}

impl Deployment {
    pub fn is_disaggregated(&self) -> bool {
        matches!(self, Deployment::Disaggregated { .. })
    }

    /// The pool every request enters first: the aggregated one, or the prefill pool (whose
    /// KV cache bounds the prompts a run can admit).
    pub fn entry(&self) -> &PoolSpec {
        match self {
            Deployment::Aggregated(pool) => pool,
            Deployment::Disaggregated { prefill, .. } => prefill,
        }
    }

    /// The pool that generates the output tokens: the aggregated one, or the decode pool.
    pub fn generating(&self) -> &PoolSpec {
        match self {
            Deployment::Aggregated(pool) => pool,
            Deployment::Disaggregated { decode, .. } => decode,
        }
    }

    /// The pools with their roles, prefill before decode.
    pub fn pools(&self) -> Vec<(PoolRole, &PoolSpec)> {
        match self {
            Deployment::Aggregated(pool) => vec![(PoolRole::Aggregated, pool)],
            Deployment::Disaggregated { prefill, decode } => {
                vec![(PoolRole::Prefill, prefill), (PoolRole::Decode, decode)]
            }
        }
    }

    /// [`Deployment::pools`], mutable (to replace an engine's timing tables).
    pub fn pools_mut(&mut self) -> Vec<(PoolRole, &mut PoolSpec)> {
        match self {
            Deployment::Aggregated(pool) => vec![(PoolRole::Aggregated, pool)],
            Deployment::Disaggregated { prefill, decode } => {
                vec![(PoolRole::Prefill, prefill), (PoolRole::Decode, decode)]
            }
        }
    }

    /// GPUs of every pool at the start, as the report counts them.
    pub fn gpus(&self) -> u64 {
        self.pools()
            .into_iter()
            .fold(0u64, |sum, (_, pool)| sum.saturating_add(pool.gpus()))
    }
}

/// Where the requests come from.
#[derive(Clone, Debug)]
pub enum WorkloadSpec {
    Trace(TraceSpec),
    Synthetic(SyntheticSpec),
}

#[derive(Clone, Debug)]
pub struct TraceSpec {
    pub files: Vec<PathBuf>,
    pub format: TraceFormat,
    /// Tokens per trace hash id (`--trace-block-size`, default 512). Dynamo traces and
    /// version 2 agentic traces declare their own (see the format's `expected_block_size`).
    pub block_size: u32,
}

/// `--trace-format`, with the settings only one format uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TraceFormat {
    Mooncake,
    /// Mooncake rows whose later turns carry only the new input (cumulative prompts).
    MooncakeDelta,
    /// Requests with dependencies; `expected_block_size` is `--trace-block-size` when given
    /// (a version 2 file's header must match it).
    AgenticMooncake {
        expected_block_size: Option<u32>,
    },
    /// Applied Compute sessions, with optional cross-session prefix sharing.
    AppliedComputeAgentic {
        shared_prefix_ratio: f64,
        num_prefix_groups: usize,
    },
    /// Dynamo request traces; `expected_block_size` is `--trace-block-size` when given (it
    /// must equal the embedded size).
    Dynamo {
        expected_block_size: Option<u32>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticSpec {
    pub input_tokens: usize,
    pub output_tokens: usize,
    /// Number of sessions (= requests when `turns_per_session` is 1).
    pub request_count: usize,
    /// First-turn arrival process (`None` under closed-loop concurrency).
    pub arrival_process: Option<ArrivalProcess>,
    pub turns_per_session: usize,
    pub shared_prefix_ratio: f64,
    pub num_prefix_groups: usize,
    pub inter_turn_delay_ms: f64,
    /// Engine block size, used as the hash-id block size on the multi-turn/shared-prefix path.
    pub engine_block_size: u32,
    /// How each request's input and output lengths spread around `input_tokens` and
    /// `output_tokens` (`Fixed`: every request has exactly those).
    pub lengths: LengthSpread,
}

/// The length distribution of synthetic requests. Each request's lengths are drawn from
/// `seed` and the request's index alone (see `workload::synthetic`), so a run is
/// deterministic and no table of lengths is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum LengthSpread {
    /// Every request asks for exactly `input_tokens` and `output_tokens`.
    #[default]
    Fixed,
    /// AIPerf's synthetic lengths (`--input-tokens-stddev`, `--output-tokens-stddev`): a
    /// normal around the length, drawn again while negative, rounded up, at least 1; a
    /// stddev of 0 keeps the length fixed. Input draws above `max_input_tokens` (the KV
    /// cache's size, a prompt no engine could hold) are drawn again too.
    Normal {
        input_stddev: f64,
        output_stddev: f64,
        max_input_tokens: usize,
        seed: u64,
    },
    /// vLLM's benchmark client's random dataset as InferenceX runs it (`--random-range-ratio
    /// R`): input and output lengths each uniform over the integers in
    /// `[max(1, floor(R * L)), L]`.
    Uniform { range_ratio: f64, seed: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArrivalProcess {
    /// Poisson arrivals at `rate` requests per second, seeded.
    Poisson { rate: f64, seed: u64 },
    /// One arrival every `interval_ms` (0 = a burst at t=0).
    Interval { interval_ms: f64 },
}

/// How arrival times are derived from the workload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArrivalMode {
    /// Open loop: first-turn timestamps normalised to start at 0, then timestamps and
    /// inter-turn delays divided by `speedup`.
    Timestamps { speedup: f64 },
    /// Closed loop: at most `limit` sessions active at once; timestamps ignored, no speed-up.
    Concurrency { limit: usize },
}

/// Whether the replay runs in virtual time or on the wall clock.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReplayMode {
    Offline,
    /// Live: model time follows the wall clock, `speed` times faster than real time.
    Online {
        speed: f64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouterMode {
    RoundRobin,
    KvRouter,
}

/// Goodput service-level bounds (ms); a completed request is good when every set bound holds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sla {
    pub ttft_ms: Option<f64>,
    pub itl_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl Sla {
    pub fn is_set(&self) -> bool {
        self.ttft_ms.is_some() || self.itl_ms.is_some() || self.e2e_ms.is_some()
    }
}
