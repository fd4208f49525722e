//! The engine-args JSON object (`--extra-engine-args`), parsed once into typed, validated,
//! defaults-materialised [`EngineArgs`].
//!
//! INTERFACE (fixed; the parser below fills it): see `shared/spec/engine.md` §1 for every key,
//! default, null rule and validation message.

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineType {
    Vllm,
    Sglang,
    Trtllm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerType {
    Aggregated,
    Prefill,
    Decode,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreemptionMode {
    /// Preempt the most recently admitted running request (vLLM default).
    Lifo,
    /// Preempt the oldest running request.
    Fifo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvTransferTimingMode {
    FullPrompt,
    DestinationMissing,
}

/// Validated engine arguments with engine defaults applied (`block_size` is never 0 here).
#[derive(Clone, Debug, PartialEq)]
pub struct EngineArgs {
    pub engine_type: EngineType,
    /// KV capacity per DP rank, in blocks.
    pub num_gpu_blocks: usize,
    /// KV block (page) size in tokens, engine default applied (vllm 64, sglang 1, trtllm 32).
    pub block_size: usize,
    pub max_model_len: Option<usize>,
    /// `None` = unlimited.
    pub max_num_seqs: Option<usize>,
    /// `None` = unlimited.
    pub max_num_batched_tokens: Option<usize>,
    pub enable_prefix_caching: bool,
    pub enable_chunked_prefill: bool,
    pub speedup_ratio: f64,
    pub decode_speedup_ratio: f64,
    pub dp_size: usize,
    pub preemption_mode: PreemptionMode,
    pub worker_type: WorkerType,
    /// Used only for GPU counting (`gpus_per_worker = aic_tp_size * dp_size`); default 1.
    pub aic_tp_size: usize,
    pub kv_bytes_per_token: Option<u64>,
    /// GB/s.
    pub kv_transfer_bandwidth: Option<f64>,
    pub kv_transfer_timing_mode: KvTransferTimingMode,
}

impl Default for EngineArgs {
    fn default() -> Self {
        Self {
            engine_type: EngineType::Vllm,
            num_gpu_blocks: 16384,
            block_size: 64,
            max_model_len: None,
            max_num_seqs: Some(256),
            max_num_batched_tokens: Some(8192),
            enable_prefix_caching: true,
            enable_chunked_prefill: true,
            speedup_ratio: 1.0,
            decode_speedup_ratio: 1.0,
            dp_size: 1,
            preemption_mode: PreemptionMode::Lifo,
            worker_type: WorkerType::Aggregated,
            aic_tp_size: 1,
            kv_bytes_per_token: None,
            kv_transfer_bandwidth: None,
            kv_transfer_timing_mode: KvTransferTimingMode::FullPrompt,
        }
    }
}

impl EngineArgs {
    /// Parses the engine-args JSON text given to `flag` (e.g. `--extra-engine-args`), applying the
    /// replay front's `worker_type` handling, serde-style strictness (unknown keys rejected) and
    /// every validation rule. Errors are usage errors naming the flag and the field.
    pub fn from_json(flag: &str, text: &str) -> Result<Self> {
        let _ = (flag, text);
        Err(Error::usage("engine-args parsing is not implemented yet"))
    }
}
