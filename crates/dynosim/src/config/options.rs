//! Raw replay options, one field per `dynamo.replay` flag, and their validation into a spec.

use std::path::PathBuf;

use super::ReplaySpec;
use crate::error::{Error, Result};

/// One field per flag of `python -m dynamo.replay` (in scope so far), holding the raw value.
/// Defaults equal the flag defaults. Filled by the CLI (clap) and by the Python API (kwargs).
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    pub trace_files: Vec<PathBuf>,
    pub extra_engine_args: Option<String>,
    pub router_config: Option<String>,
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
    pub num_workers: i64,
    pub replay_concurrency: Option<i64>,
    /// "offline" or "online".
    pub replay_mode: String,
    /// "round_robin" or "kv_router".
    pub router_mode: String,
    pub arrival_speedup_ratio: f64,
    /// "mooncake", ...
    pub trace_format: String,
    pub trace_block_size: Option<i64>,
    pub report_jsonl: Option<PathBuf>,
    pub max_sim_time_seconds: Option<f64>,
    pub sla_ttft_ms: Option<f64>,
    pub sla_itl_ms: Option<f64>,
    pub sla_e2e_ms: Option<f64>,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            trace_files: Vec::new(),
            extra_engine_args: None,
            router_config: None,
            input_tokens: None,
            output_tokens: None,
            request_count: None,
            request_rate: None,
            arrival_interval_ms: None,
            arrival_seed: 42,
            turns_per_session: 1,
            shared_prefix_ratio: 0.0,
            num_prefix_groups: 0,
            inter_turn_delay_ms: 0.0,
            num_workers: 1,
            replay_concurrency: None,
            replay_mode: "offline".into(),
            router_mode: "round_robin".into(),
            arrival_speedup_ratio: 1.0,
            trace_format: "mooncake".into(),
            trace_block_size: None,
            report_jsonl: None,
            max_sim_time_seconds: None,
            sla_ttft_ms: None,
            sla_itl_ms: None,
            sla_e2e_ms: None,
        }
    }
}

impl ReplayOptions {
    /// Validates every option (frontend.md §1.3–§1.5, workload.md §7.1) and builds the spec.
    /// Every failure is a usage error whose message names the flag.
    pub fn into_spec(self) -> Result<ReplaySpec> {
        Err(Error::usage("option validation is not implemented yet"))
    }
}
