//! Raw replay options, one field per `dynamo.replay` flag, and their validation into a spec.
//!
//! [`ReplayOptions::into_spec`] (`into_spec.rs`) is the one entry of validation: it applies
//! the reference's checks in the reference's order, so an input with several faults reports
//! the same fault first:
//! 1. the replay front's checks (which inputs go together), then the JSON options
//!    (`--extra-engine-args`, `--prefill-engine-args`, `--decode-engine-args`, `--router-config`),
//!    the AIC flags and the planner flags;
//! 2. integer flags that the reference takes as unsigned must not be negative;
//! 3. the replay core's checks, whose order differs between trace and synthetic replay.
//!
//! Each group of checks lives in a file of its own and returns its typed part of the spec:
//! `front.rs` (which inputs go together), `deployment.rs` (the engine arguments and workers:
//! a [`Deployment`](crate::config::Deployment)), `router.rs` (the router config, its AIC
//! model), `aic.rs` (the `--aic-*` flags: an `AicConfig`), `planner.rs` (the planner config
//! and its GPU budget), `run.rs` (time cap, SLA, concurrency, replay mode, speed-up), and the
//! two workload builders `trace.rs` and `synthetic.rs`, which call the shared groups in their
//! own orders. `checks.rs` holds what they share: the named choices parsed once into enums, and
//! the errors that name a flag.
//!
//! Features dynosim does not have yet are usage errors saying so, raised where the reference
//! would start using them, so every check that the reference runs before that point still
//! applies.

mod aic;
mod checks;
mod deployment;
mod front;
mod into_spec;
mod planner;
mod router;
mod run;
mod synthetic;
mod trace;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

/// Seed of the synthetic length draws when `--length-seed` is not given: fixed, so that a
/// run with a length spread is as deterministic as one without (the same default as
/// `--arrival-seed`, though the two streams are independent).
pub const DEFAULT_LENGTH_SEED: u64 = 42;

/// Defines the options struct and `blank()`, every field at its type's zero value (the
/// settings table's defaults are applied over it by `Default`, in `config::settings`, which
/// depends on this module and not the other way round).
macro_rules! with_blank {
    ($(#[$meta:meta])* pub struct $name:ident {
        $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
    }) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $name {
            pub(crate) fn blank() -> Self {
                Self { $($field: Default::default(),)* }
            }
        }
    };
}

with_blank! {
/// One field per setting of `config::settings` (a `dynamo.replay` flag or Python argument),
/// holding the raw value. [`Default`] gives each setting's default from the settings table.
/// Filled by the CLI (clap) and by the Python API (kwargs), both driven by that table.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    pub trace_files: Vec<PathBuf>,
    pub extra_engine_args: Option<String>,
    /// Engine arguments of the prefill pool (disaggregated replay, with `decode_engine_args`).
    pub prefill_engine_args: Option<String>,
    /// Engine arguments of the decode pool (disaggregated replay, with `prefill_engine_args`).
    pub decode_engine_args: Option<String>,
    pub router_config: Option<String>,
    /// Path of a router policy YAML; overrides `router_policy_config` inside `router_config`.
    /// The CLI fills it from the flag or from `DYN_ROUTER_POLICY_CONFIG`.
    pub router_policy_config: Option<String>,
    /// Where `router_policy_config` came from, for messages: the flag, or the environment
    /// variable when the CLI took it from there.
    pub router_policy_config_from_env: bool,
    /// Selects a `models:` profile of the router policy file; must not be empty.
    pub model_name: Option<String>,
    /// Seed of the KV router's tie-breaking and temperature sampling (dynosim only).
    pub router_seed: i64,
    /// Live replay runs this many times faster than real time (dynosim only; default 1).
    pub online_speed: Option<f64>,
    /// AIC settings of the KV router's prefill-load model (`--aic-*`; backend, system and model
    /// path are given together or not at all).
    pub aic_backend: Option<String>,
    pub aic_system: Option<String>,
    pub aic_model_path: Option<String>,
    pub aic_backend_version: Option<String>,
    pub aic_tp_size: Option<i64>,
    pub aic_moe_tp_size: Option<i64>,
    pub aic_moe_ep_size: Option<i64>,
    pub aic_attention_dp_size: Option<i64>,
    pub aic_gemm_dtype: Option<String>,
    pub aic_moe_dtype: Option<String>,
    pub aic_fmha_dtype: Option<String>,
    pub aic_kv_cache_dtype: Option<String>,
    pub aic_comm_dtype: Option<String>,
    pub aic_nextn: Option<i64>,
    pub aic_nextn_accept_rates: Option<String>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub request_count: Option<i64>,
    pub request_rate: Option<f64>,
    pub arrival_interval_ms: Option<f64>,
    pub arrival_seed: i64,
    pub turns_per_session: i64,
    pub shared_prefix_ratio: f64,
    pub num_prefix_groups: i64,
    pub inter_turn_delay_ms: f64,
    /// Synthetic workload: AIPerf's normal spread of the input lengths around
    /// `input_tokens` (dynosim only; not with `random_range_ratio`).
    pub input_tokens_stddev: Option<f64>,
    /// Synthetic workload: the same around `output_tokens`.
    pub output_tokens_stddev: Option<f64>,
    /// Synthetic workload: vLLM's benchmark-client range, input and output lengths uniform in
    /// `[floor(R * L), L]` (dynosim only; not with the stddevs).
    pub random_range_ratio: Option<f64>,
    /// Seed of the synthetic length draws (default [`DEFAULT_LENGTH_SEED`]); only with a
    /// spread above.
    pub length_seed: Option<i64>,
    pub num_workers: i64,
    /// Disaggregated pool sizes; must stay 1 for aggregated replay.
    pub num_prefill_workers: i64,
    pub num_decode_workers: i64,
    pub replay_concurrency: Option<i64>,
    /// "offline" or "online".
    pub replay_mode: String,
    /// "round_robin" or "kv_router".
    pub router_mode: String,
    pub arrival_speedup_ratio: f64,
    /// "mooncake", "mooncake-delta", "agentic_mooncake", "applied_compute_agentic", "dynamo"
    /// (and the aliases "mooncake_delta", "agentic-mooncake").
    pub trace_format: String,
    pub trace_block_size: Option<i64>,
    /// Only used by `applied_compute_agentic`; otherwise ignored, as in the reference.
    pub trace_shared_prefix_ratio: f64,
    /// Only used by `applied_compute_agentic`; otherwise ignored (but must not be negative).
    pub trace_num_prefix_groups: i64,
    pub report_jsonl: Option<PathBuf>,
    /// Planner-in-the-loop config, path or inline JSON (`config::planner`).
    pub planner_config: Option<String>,
    /// Planner benchmark sweep points; only used with a planner.
    pub benchmark_granularity: i64,
    /// The CLI's cap on simulated time, in seconds.
    pub max_sim_time_seconds: Option<f64>,
    /// The Python API's cap on simulated time, in milliseconds. Give at most one of the two
    /// caps; both set is a usage error.
    pub max_sim_time_ms: Option<f64>,
    pub sla_ttft_ms: Option<f64>,
    pub sla_itl_ms: Option<f64>,
    pub sla_e2e_ms: Option<f64>,
}
}

/// The most engine ranks (workers × dp_size) one pool may have. Each rank is a scheduler with
/// its own queues and KV cache (about 0.5 KB idle, more once it caches): a count beyond real
/// deployments is a typo, and allocating it up front would exhaust memory.
pub const MAX_ENGINE_RANKS: usize = 100_000;
