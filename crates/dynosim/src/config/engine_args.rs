//! The engine-args JSON object (`--extra-engine-args`), parsed once into typed, validated,
//! defaults-materialised [`EngineArgs`].
//!
//! Parsing follows the reference in stages, so that an input with several faults reports the
//! same fault first:
//! 1. the replay front's preprocessing of the raw object (`worker_type` → `is_prefill` /
//!    `is_decode`, `planner_profile_data: null` dropped, the AIC attention-DP rule);
//! 2. typing of every key in document order (unknown keys and wrong types are reported here);
//! 3. null rules and enum parsing, in the reference's field order;
//! 4. engine defaults (`block_size` 0 → 64 / 1 / 32 or `sglang.page_size`), then per-field
//!    ranges, then cross-field rules, then the speculative-decoding rates;
//! 5. the profile table named by `planner_profile_data` is read and checked.
//!
//! `startup_time` is kept for the planner (a worker it adds serves after that many seconds).
//!
//! Keys that are accepted, type-checked and range-checked, but have no effect on an offline
//! replay (so they are not kept): `g1_backend`, the `aic_*` keys other than
//! `aic_tp_size` when `aic_backend` is unset, and the three memory fractions when
//! `aic_backend` is unset or `num_gpu_blocks` is given,
//! `enable_local_indexer`, `bootstrap_port`, `handoff_session_timeout_ms`, `num_g2_blocks`,
//! `num_g3_blocks`, `enable_g4_storage`, `offload_batch_size`, the six `bandwidth_*_gbps` keys,
//! `reasoning`, `response_replay_trace_path`, `zmq_kv_events_port`, `zmq_replay_port`, the
//! `trtllm` sub-object's unknown keys, and `has_perf_model`. `router_queue_policy` and `sglang` are kept for the KV router and the
//! SGLang engine. The reference derives `kv_bytes_per_token` from a Hugging Face model config
//! when G2/G3/G4 offload and `aic_model_path` are both set; dynosim cannot read model configs and
//! leaves it unset (it only matters for disaggregated transfers).
//!
//! `planner_profile_data` names an NPZ of measured timing tables; it is read and checked at
//! the end of parsing (a bad file is a usage error naming the file and key) and becomes
//! [`TimingSource::ProfileTable`].
//!
//! `aic_nextn`, `aic_nextn_accept_rates` and `aic_mtp_seed` become [`SpeculativeArgs`].
//!
//! `trtllm.batch_wait_timeout_iters` and `trtllm.batch_wait_max_tokens_ratio` (TRT-LLM's batch
//! waiting, a dynosim extension the reference ignores) become [`BatchWait`]; they are
//! TRT-LLM-only.
//!
//! With `aic_backend` set, the `aic_*` keys become an [`AicConfig`] (AIC timing; its tables are
//! built later, by `dynosim_aic_tables::prepare`, before the simulation) and, when `num_gpu_blocks` is
//! absent, a [`BlockEstimate`] asking the package for the KV capacity.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::json_fields::{
    parse_inline_or_file, read_object, show_f64, unknown_field_message, ObjectError, Slot,
};
use super::profile_table::ProfileTable;
use super::router_policy::RouterQueuePolicy;
use crate::aic::BlockEstimate;
use crate::aic::{normalize_dtype, AicConfig, BACKENDS, DEFAULT_SYSTEM};
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

/// Speculative decoding (MTP / Eagle draft tokens, `aic_nextn`): each decode step of a ready
/// request emits a burst of up to `nextn + 1` tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeculativeArgs {
    /// Draft tokens per step (1..=5).
    pub nextn: usize,
    /// Conditional acceptance rate of each draft token, exactly `nextn` entries in [0, 1].
    pub accept_rates: Vec<f64>,
    /// Burst RNG seed; each scheduler adds its offset (wrapping).
    pub seed: u64,
}

/// Where pass durations come from (the engine's timing model is built from this).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum TimingSource {
    /// The reference's default polynomials.
    #[default]
    Polynomial,
    /// Measured tables from `planner_profile_data`, read when the arguments were parsed and
    /// shared by every rank built from these arguments.
    ProfileTable(Arc<ProfileTable>),
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
    /// Replay-only override of the KV router's queue policy.
    pub router_queue_policy: Option<RouterQueuePolicy>,
    /// SGLang scheduler settings (read by the SGLang engine only).
    pub sglang: Option<SglangArgs>,
    /// The pass timing model.
    pub timing: TimingSource,
    /// Speculative decoding, when `aic_nextn` is set.
    pub speculative: Option<SpeculativeArgs>,
    /// AIC timing (`aic_backend` set); `None` = the default polynomial.
    pub aic: Option<AicConfig>,
    /// With AIC timing and no `num_gpu_blocks`: the KV-capacity estimate to ask for.
    pub aic_block_estimate: Option<BlockEstimate>,
    /// Seconds a worker added by the planner takes before it serves (0 = at once).
    pub startup_time: f64,
    /// TRT-LLM's batch waiting (read by the TRT-LLM engine only; off by default).
    pub batch_wait: BatchWait,
}

/// TRT-LLM's batch waiting: while decodes run, a pass may hold back its context requests
/// until enough tokens are scheduled or it has held them this many passes in a row (see the
/// TRT-LLM section of the vLLM-flavour engine's module doc). It holds only when both are set.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchWait {
    /// `batch_wait_timeout_iters`: passes in a row a context batch may be held (0 = off).
    pub timeout_iters: usize,
    /// `batch_wait_max_tokens_ratio`: the share of `max_num_batched_tokens` a pass's tokens
    /// must reach for context to run at once (0 = off).
    pub max_tokens_ratio: f64,
}

impl BatchWait {
    /// Whether a pass can ever hold its context requests.
    pub fn enabled(&self) -> bool {
        self.timeout_iters > 0 && self.max_tokens_ratio > 0.0
    }
}

/// The `sglang` sub-object: SGLang scheduler settings (`None` = the engine's default).
/// Unknown keys inside it are ignored, as in the reference.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct SglangArgs {
    /// "fifo"/"fcfs" or "lpm" (default fifo).
    pub schedule_policy: Option<String>,
    /// Radix-cache page size in tokens (default 1).
    pub page_size: Option<usize>,
    /// Prefill token budget per batch (default 16384).
    pub max_prefill_tokens: Option<usize>,
    /// Maximum tokens per prefill chunk (default 8192).
    pub chunked_prefill_size: Option<usize>,
    /// Output-length clip used in the admission budget (default 4096).
    pub clip_max_new_tokens: Option<usize>,
    /// Admission conservativeness factor (default 1.0).
    pub schedule_conservativeness: Option<f64>,
    /// SGLang's `--scheduler-recv-interval`: while the rank only decodes, requests that
    /// arrived are taken in every this many passes (default 1: every pass). A dynosim
    /// extension; the reference ignores the key.
    pub scheduler_recv_interval: Option<usize>,
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
            router_queue_policy: None,
            sglang: None,
            timing: TimingSource::Polynomial,
            speculative: None,
            aic: None,
            aic_block_estimate: None,
            startup_time: 0.0,
            batch_wait: BatchWait::default(),
        }
    }
}

impl EngineArgs {
    /// Parses the engine-args JSON text given to `flag` (e.g. `--extra-engine-args`), applying the
    /// replay front's `worker_type` handling, serde-style strictness (unknown keys rejected) and
    /// every validation rule. Errors are usage errors naming the flag and the field.
    pub fn from_json(flag: &str, text: &str) -> Result<Self> {
        parse_engine_args(text).map_err(|message| Error::usage_about(flag, message))
    }

    /// [`EngineArgs::from_json`] for a flag's value: one that is not JSON but names an existing
    /// file is read as a JSON file (as the reference's mocker reads `--extra-engine-args`), and
    /// messages then name the file. Inline JSON is read exactly as by `from_json`.
    pub fn from_json_or_file(flag: &str, value: &str) -> Result<Self> {
        parse_inline_or_file(flag, value, parse_engine_args)
    }

    /// Milliseconds a request takes from its arrival to these engines: the calibrated serving
    /// front's latency (`aic_calibration`'s `request_overhead_ms`), 0 without a calibration.
    pub fn front_delay_ms(&self) -> f64 {
        self.aic
            .as_ref()
            .and_then(|aic| aic.calibration.as_ref())
            .map_or(0.0, |calibration| calibration.request_overhead_ms)
    }

    /// What multiplies each draft token's acceptance rate under speculative decoding: the
    /// calibration's `acceptance_scale`, 1 without a calibration.
    pub fn draft_acceptance_scale(&self) -> f64 {
        self.aic
            .as_ref()
            .and_then(|aic| aic.calibration.as_ref())
            .map_or(1.0, |calibration| calibration.acceptance_scale)
    }

    /// GPUs one worker occupies (`aic_tp_size × dp_size`), for the GPU-hours figures.
    pub fn gpus_per_worker(&self) -> usize {
        // Saturating: both are validated only from below, and a count is no reason to panic.
        self.aic_tp_size.saturating_mul(self.dp_size)
    }
}

/// Declares the accepted keys (in the reference's order, which the unknown-key message lists)
/// together with the JSON type each one must have.
macro_rules! engine_arg_keys {
    ($($key:ident: $ty:ty,)*) => {
        /// Every key `--extra-engine-args` accepts, in the reference's order.
        pub const ACCEPTED_KEYS: &[&str] = &[$(stringify!($key)),*];

        /// Each accepted key with the Rust type its JSON value is read as (`"usize"`, `"f64"`,
        /// `"SglangArgs"`, ...): lets another front (Python) check argument types up front.
        pub const ACCEPTED_KEY_TYPES: &[(&str, &str)] = &[$((stringify!($key), stringify!($ty))),*];

        /// The object after typing, before any rule is applied.
        #[derive(Default)]
        struct RawEngineArgs {
            $($key: Slot<$ty>,)*
        }

        impl RawEngineArgs {
            /// Types each key in document order; the first unknown key or wrong type fails.
            fn from_object(object: Map<String, Value>) -> Result<Self, String> {
                let mut raw = Self::default();
                for (key, value) in object {
                    match key.as_str() {
                        $(stringify!($key) => raw.$key = Slot::parse(&key, value)?,)*
                        _ => return Err(unknown_field_message(&key, ACCEPTED_KEYS)),
                    }
                }
                Ok(raw)
            }
        }
    };
}

engine_arg_keys! {
    engine_type: String,
    num_gpu_blocks: usize,
    block_size: usize,
    max_model_len: usize,
    max_num_seqs: usize,
    max_num_batched_tokens: usize,
    enable_prefix_caching: bool,
    g1_backend: G1Backend,
    enable_chunked_prefill: bool,
    speedup_ratio: f64,
    decode_speedup_ratio: f64,
    dp_size: u32,
    startup_time: f64,
    worker_type: String,
    is_prefill: bool,
    is_decode: bool,
    planner_profile_data: PathBuf,
    aic_backend: String,
    aic_system: String,
    aic_backend_version: String,
    aic_tp_size: usize,
    aic_model_path: String,
    aic_moe_tp_size: usize,
    aic_moe_ep_size: usize,
    aic_attention_dp_size: usize,
    aic_gemm_dtype: String,
    aic_moe_dtype: String,
    aic_fmha_dtype: String,
    aic_kv_cache_dtype: String,
    aic_comm_dtype: String,
    aic_nextn: usize,
    aic_nextn_accept_rates: String,
    aic_mtp_seed: u64,
    aic_calibration: String,
    aic_engine_version: String,
    gpu_memory_utilization: f64,
    mem_fraction_static: f64,
    free_gpu_memory_fraction: f64,
    enable_local_indexer: bool,
    bootstrap_port: u16,
    handoff_session_timeout_ms: u64,
    kv_bytes_per_token: u64,
    kv_transfer_bandwidth: f64,
    kv_transfer_timing_mode: String,
    num_g2_blocks: usize,
    num_g3_blocks: usize,
    enable_g4_storage: bool,
    offload_batch_size: usize,
    bandwidth_g1_to_g2_gbps: f64,
    bandwidth_g2_to_g1_gbps: f64,
    bandwidth_g2_to_g3_gbps: f64,
    bandwidth_g3_to_g2_gbps: f64,
    bandwidth_g2_to_g4_gbps: f64,
    bandwidth_g4_to_g2_gbps: f64,
    reasoning: ReasoningArgs,
    response_replay_trace_path: PathBuf,
    zmq_kv_events_port: u16,
    zmq_replay_port: u16,
    preemption_mode: String,
    router_queue_policy: String,
    sglang: SglangArgs,
    trtllm: TrtllmArgs,
    has_perf_model: Value,
}

/// G1 block-manager implementation (no timing effect offline). Exact lower-case names, unlike
/// the other enums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum G1Backend {
    Kvbm,
    Native,
}

/// The `reasoning` sub-object (thinking-token ids; no timing effect). Its three keys are
/// required; other keys are ignored.
#[derive(Deserialize)]
#[allow(dead_code)] // typed only to validate the input
struct ReasoningArgs {
    start_thinking_token_id: u32,
    end_thinking_token_id: u32,
    thinking_ratio: f64,
}

/// The `trtllm` sub-object: the capacity policy, and the two batch-waiting keys (checked by
/// [`parse_batch_wait`]). Other keys are ignored, as in the reference.
#[derive(Default, Deserialize)]
#[serde(default)]
struct TrtllmArgs {
    capacity_scheduler_policy: Option<String>,
    batch_wait_timeout_iters: Option<Value>,
    batch_wait_max_tokens_ratio: Option<Value>,
}

/// The batch-waiting keys of the `trtllm` sub-object, checked: a non-negative integer, and a
/// number in [0, 1]. `null` leaves the default.
fn parse_batch_wait(trtllm: &TrtllmArgs) -> Result<BatchWait, String> {
    let mut wait = BatchWait::default();
    if let Some(value) = trtllm
        .batch_wait_timeout_iters
        .as_ref()
        .filter(|v| !v.is_null())
    {
        wait.timeout_iters = value
            .as_u64()
            .and_then(|iters| usize::try_from(iters).ok())
            .ok_or_else(|| {
                format!(
                    "trtllm.batch_wait_timeout_iters: must be a non-negative integer, got {value}"
                )
            })?;
    }
    if let Some(value) = trtllm
        .batch_wait_max_tokens_ratio
        .as_ref()
        .filter(|v| !v.is_null())
    {
        wait.max_tokens_ratio = value
            .as_f64()
            .filter(|ratio| (0.0..=1.0).contains(ratio))
            .ok_or_else(|| {
                format!(
                    "trtllm.batch_wait_max_tokens_ratio: must be a number between 0 and 1, \
                     got {value}"
                )
            })?;
    }
    Ok(wait)
}

const DEFAULT_VLLM_BLOCK_SIZE: usize = 64;
const DEFAULT_SGLANG_BLOCK_SIZE: usize = 1;
const DEFAULT_TRTLLM_BLOCK_SIZE: usize = 32;

/// Conditional acceptance rates used when `aic_nextn` is set without rates.
const DEFAULT_ACCEPT_RATES: [f64; 5] = [0.85, 0.3, 0.0, 0.0, 0.0];

/// Burst RNG seed used when `aic_mtp_seed` is omitted.
const DEFAULT_MTP_SEED: u64 = 42;

fn parse_engine_args(text: &str) -> Result<EngineArgs, String> {
    // The replay front reads the text with Python's json module: a repeated key keeps its last
    // value rather than failing.
    let mut object = read_object(text, false).map_err(|error| match error {
        ObjectError::Syntax(message) => format!("invalid JSON: {message}"),
        ObjectError::NotObject => "engine-args must be a JSON object".to_string(),
    })?;
    apply_replay_front_rules(&mut object)?;
    let raw = RawEngineArgs::from_object(object)?;
    let mut parsed = convert(raw)?;
    materialize_defaults(&mut parsed);
    check_ranges(&parsed)?;
    check_cross_field_rules(&parsed)?;
    if let Some(nextn) = parsed.aic_nextn {
        let accept_rates = normalize_accept_rates(nextn, parsed.aic_nextn_accept_rates.as_deref())?;
        parsed.args.speculative = Some(SpeculativeArgs {
            nextn,
            accept_rates,
            seed: parsed.aic_mtp_seed,
        });
    }
    attach_aic(&mut parsed)?;
    parsed.args.startup_time = parsed.startup_time.unwrap_or(0.0);
    let mut args = parsed.args;
    if let Some(path) = &parsed.planner_profile_data {
        if args.aic.is_some() {
            return Err(
                "planner_profile_data and aic_backend each select a timing model; give one".into(),
            );
        }
        // Read once here, before any simulation; every rank built from these arguments shares
        // the table. The reference logs a failure and falls back to the polynomial instead.
        let table = ProfileTable::load(path)
            .map_err(|message| format!("planner_profile_data: {message}"))?;
        args.timing = TimingSource::ProfileTable(Arc::new(table));
    }
    Ok(args)
}

/// What the replay front (`dynamo.replay`) does to the raw object before the engine parser sees
/// it.
fn apply_replay_front_rules(object: &mut Map<String, Value>) -> Result<(), String> {
    // `worker_type` is popped and turned into the `is_prefill` / `is_decode` flags; it must be
    // one of three exact strings here (the engine parser itself would ignore case).
    if let Some(worker_type) = object.shift_remove("worker_type") {
        if !worker_type.is_null() {
            if object.contains_key("is_prefill") || object.contains_key("is_decode") {
                return Err("worker_type cannot be combined with is_prefill or is_decode".into());
            }
            match worker_type.as_str() {
                Some("prefill") => {
                    object.insert("is_prefill".into(), Value::Bool(true));
                }
                Some("decode") => {
                    object.insert("is_decode".into(), Value::Bool(true));
                }
                Some("aggregated") => {}
                _ => {
                    return Err(
                        "worker_type must be one of 'aggregated', 'prefill', or 'decode'".into(),
                    )
                }
            }
        }
    }

    if object.get("planner_profile_data") == Some(&Value::Null) {
        object.shift_remove("planner_profile_data");
    }

    // AIC attention-DP describes the rank topology: when it is above 1 it becomes `dp_size`, and
    // an explicit, different `dp_size` above 1 is a contradiction. Python truthiness: 0 and
    // null both count as 1.
    let attention_dp = object
        .get("aic_attention_dp_size")
        .filter(|value| !value.is_null());
    let aic_backend_set = object
        .get("aic_backend")
        .is_some_and(|value| !value.is_null());
    let dp = attention_dp
        .and_then(Value::as_u64)
        .filter(|&dp| dp != 0)
        .unwrap_or(1);
    if attention_dp.filter(|value| !value.is_u64()).is_none() {
        let configured_dp = object
            .get("dp_size")
            .and_then(Value::as_u64)
            .filter(|&dp| dp != 0)
            .unwrap_or(1);
        if (aic_backend_set || attention_dp.is_some()) && configured_dp > 1 && configured_dp != dp {
            return Err(format!(
                "dp_size must match aic_attention_dp_size for AIC-backed replay \
                 (got dp_size={configured_dp}, aic_attention_dp_size={dp})"
            ));
        }
        if attention_dp.is_some() && dp > 1 {
            object.insert("dp_size".into(), Value::from(dp));
        }
    }

    if aic_backend_set {
        let blocks_given = object
            .get("num_gpu_blocks")
            .is_some_and(|value| !value.is_null());
        let model_path_given = object.get("aic_model_path").is_some_and(is_truthy);
        if !blocks_given && !model_path_given {
            return Err(
                "AIC KV cache capacity estimation requires aic_model_path in engine args".into(),
            );
        }
    }
    Ok(())
}

/// Python truthiness of a JSON value (used where the front tests `if not value`).
fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::Number(number) => number.as_f64() != Some(0.0),
        Value::String(text) => !text.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(map) => !map.is_empty(),
    }
}

/// The typed arguments plus the values that are validated but not kept in [`EngineArgs`].
struct ParsedEngineArgs {
    args: EngineArgs,
    planner_profile_data: Option<PathBuf>,
    g1_backend: Option<G1Backend>,
    startup_time: Option<f64>,
    aic_nextn: Option<usize>,
    aic_nextn_accept_rates: Option<String>,
    aic_mtp_seed: u64,
    gpu_memory_utilization: Option<f64>,
    mem_fraction_static: Option<f64>,
    free_gpu_memory_fraction: Option<f64>,
    handoff_session_timeout_ms: u64,
    num_g2_blocks: Option<usize>,
    num_g3_blocks: Option<usize>,
    enable_g4_storage: bool,
    offload_batch_size: Option<usize>,
    bandwidths: [(&'static str, Option<f64>); 6],
    trtllm_capacity_policy: Option<String>,
    aic: Option<RawAic>,
}

/// The `aic_*` keys as given (read when `aic_backend` is set).
struct RawAic {
    backend: String,
    system: Option<String>,
    backend_version: Option<String>,
    model_path: Option<String>,
    moe_tp_size: Option<usize>,
    moe_ep_size: Option<usize>,
    attention_dp_size: Option<usize>,
    dtypes: [(&'static str, Option<String>); 5],
    /// `aic_calibration`: a shipped calibration's name or a calibration file's path.
    calibration: Option<String>,
    /// `aic_engine_version`: the serving engine's version, which picks a calibration's
    /// entries fitted on runs of that version.
    engine_version: Option<String>,
    num_gpu_blocks_given: bool,
}

/// Null rules and enum parsing, in the order the reference applies them.
fn convert(raw: RawEngineArgs) -> Result<ParsedEngineArgs, String> {
    let mut args = EngineArgs {
        block_size: 0,
        ..EngineArgs::default()
    };

    if let Some(engine_type) = raw.engine_type.non_null("engine_type")? {
        args.engine_type = parse_engine_type(&engine_type)?;
    }
    let num_gpu_blocks = raw.num_gpu_blocks.value();
    let num_gpu_blocks_given = num_gpu_blocks.is_some();
    if let Some(num_gpu_blocks) = num_gpu_blocks {
        args.num_gpu_blocks = num_gpu_blocks;
    }
    if let Some(block_size) = raw.block_size.non_null("block_size")? {
        args.block_size = block_size;
    }
    if let Some(max_model_len) = raw.max_model_len.nullable() {
        args.max_model_len = max_model_len;
    }
    if let Some(max_num_seqs) = raw.max_num_seqs.nullable() {
        args.max_num_seqs = max_num_seqs;
    }
    if let Some(max_num_batched_tokens) = raw.max_num_batched_tokens.nullable() {
        args.max_num_batched_tokens = max_num_batched_tokens;
    }
    if let Some(enabled) = raw
        .enable_prefix_caching
        .non_null("enable_prefix_caching")?
    {
        args.enable_prefix_caching = enabled;
    }
    let g1_backend = raw.g1_backend.non_null("g1_backend")?;
    if let Some(enabled) = raw
        .enable_chunked_prefill
        .non_null("enable_chunked_prefill")?
    {
        args.enable_chunked_prefill = enabled;
    }
    if let Some(ratio) = raw.speedup_ratio.non_null("speedup_ratio")? {
        args.speedup_ratio = ratio;
    }
    if let Some(ratio) = raw.decode_speedup_ratio.non_null("decode_speedup_ratio")? {
        args.decode_speedup_ratio = ratio;
    }
    let dp_size = raw.dp_size.non_null("dp_size")?;
    let startup_time = raw.startup_time.value();
    let planner_profile_data = raw.planner_profile_data.value();

    // The front has already turned `worker_type` into the two flags.
    let is_prefill = raw.is_prefill.non_null("is_prefill")?.unwrap_or(false);
    let is_decode = raw.is_decode.non_null("is_decode")?.unwrap_or(false);
    args.worker_type = match (is_prefill, is_decode) {
        (false, false) => WorkerType::Aggregated,
        (true, false) => WorkerType::Prefill,
        (false, true) => WorkerType::Decode,
        (true, true) => {
            return Err(
                "Invalid worker configuration: is_prefill and is_decode cannot both be true."
                    .into(),
            )
        }
    };

    if let Some(tp) = raw.aic_tp_size.value() {
        args.aic_tp_size = tp;
    }
    let calibration = raw.aic_calibration.value();
    let aic_backend = raw.aic_backend.value();
    if calibration.is_some() && aic_backend.is_none() {
        return Err(
            "aic_calibration corrects AIC timing and needs aic_backend (with aic_model_path)"
                .into(),
        );
    }
    let engine_version = raw.aic_engine_version.value();
    if engine_version.is_some() && calibration.is_none() {
        return Err(
            "aic_engine_version picks entries of a calibration and needs aic_calibration".into(),
        );
    }
    let aic = aic_backend.map(|backend| RawAic {
        backend,
        system: raw.aic_system.value(),
        backend_version: raw.aic_backend_version.value(),
        model_path: raw.aic_model_path.value(),
        moe_tp_size: raw.aic_moe_tp_size.value(),
        moe_ep_size: raw.aic_moe_ep_size.value(),
        attention_dp_size: raw.aic_attention_dp_size.value(),
        dtypes: [
            ("aic_gemm_dtype", raw.aic_gemm_dtype.value()),
            ("aic_moe_dtype", raw.aic_moe_dtype.value()),
            ("aic_fmha_dtype", raw.aic_fmha_dtype.value()),
            ("aic_kv_cache_dtype", raw.aic_kv_cache_dtype.value()),
            ("aic_comm_dtype", raw.aic_comm_dtype.value()),
        ],
        calibration,
        engine_version,
        num_gpu_blocks_given,
    });
    let aic_nextn = raw.aic_nextn.value();
    let aic_nextn_accept_rates = raw.aic_nextn_accept_rates.value();
    let aic_mtp_seed = raw
        .aic_mtp_seed
        .non_null("aic_mtp_seed")?
        .unwrap_or(DEFAULT_MTP_SEED);
    let gpu_memory_utilization = raw.gpu_memory_utilization.value();
    let mem_fraction_static = raw.mem_fraction_static.value();
    let free_gpu_memory_fraction = raw.free_gpu_memory_fraction.value();
    raw.enable_local_indexer.non_null("enable_local_indexer")?;
    let handoff_session_timeout_ms = raw
        .handoff_session_timeout_ms
        .non_null("handoff_session_timeout_ms")?
        .unwrap_or(300_000);
    args.kv_bytes_per_token = raw.kv_bytes_per_token.value();
    args.kv_transfer_bandwidth = raw.kv_transfer_bandwidth.value();
    if let Some(mode) = raw
        .kv_transfer_timing_mode
        .non_null("kv_transfer_timing_mode")?
    {
        args.kv_transfer_timing_mode = parse_kv_transfer_timing_mode(&mode)?;
    }
    let num_g2_blocks = raw.num_g2_blocks.value();
    let num_g3_blocks = raw.num_g3_blocks.value();
    let enable_g4_storage = raw
        .enable_g4_storage
        .non_null("enable_g4_storage")?
        .unwrap_or(false);
    let offload_batch_size = raw.offload_batch_size.value();
    let bandwidths = [
        (
            "bandwidth_g1_to_g2_gbps",
            raw.bandwidth_g1_to_g2_gbps.value(),
        ),
        (
            "bandwidth_g2_to_g1_gbps",
            raw.bandwidth_g2_to_g1_gbps.value(),
        ),
        (
            "bandwidth_g2_to_g3_gbps",
            raw.bandwidth_g2_to_g3_gbps.value(),
        ),
        (
            "bandwidth_g3_to_g2_gbps",
            raw.bandwidth_g3_to_g2_gbps.value(),
        ),
        (
            "bandwidth_g2_to_g4_gbps",
            raw.bandwidth_g2_to_g4_gbps.value(),
        ),
        (
            "bandwidth_g4_to_g2_gbps",
            raw.bandwidth_g4_to_g2_gbps.value(),
        ),
    ];
    if let Some(mode) = raw.preemption_mode.non_null("preemption_mode")? {
        args.preemption_mode = parse_preemption_mode(&mode)?;
    }
    if let Some(policy) = raw.router_queue_policy.value() {
        args.router_queue_policy = Some(RouterQueuePolicy::from_engine_arg(&policy)?);
    }
    args.sglang = raw.sglang.value();
    let trtllm = raw.trtllm.value().unwrap_or_default();
    args.batch_wait = parse_batch_wait(&trtllm)?;
    let trtllm_capacity_policy = trtllm.capacity_scheduler_policy;

    // dp_size is a u32 in the reference; it is kept as usize here.
    if let Some(dp_size) = dp_size {
        args.dp_size = dp_size as usize;
    }

    Ok(ParsedEngineArgs {
        args,
        planner_profile_data,
        g1_backend,
        startup_time,
        aic_nextn,
        aic_nextn_accept_rates,
        aic_mtp_seed,
        gpu_memory_utilization,
        mem_fraction_static,
        free_gpu_memory_fraction,
        handoff_session_timeout_ms,
        num_g2_blocks,
        num_g3_blocks,
        enable_g4_storage,
        offload_batch_size,
        bandwidths,
        trtllm_capacity_policy,
        aic,
    })
}

fn parse_engine_type(text: &str) -> Result<EngineType, String> {
    match text.to_ascii_lowercase().as_str() {
        "vllm" => Ok(EngineType::Vllm),
        "sglang" => Ok(EngineType::Sglang),
        "trtllm" => Ok(EngineType::Trtllm),
        _ => Err(format!(
            "Invalid engine_type '{text}'. Must be 'vllm', 'sglang', or 'trtllm'."
        )),
    }
}

fn parse_preemption_mode(text: &str) -> Result<PreemptionMode, String> {
    match text.to_ascii_lowercase().as_str() {
        "lifo" => Ok(PreemptionMode::Lifo),
        "fifo" => Ok(PreemptionMode::Fifo),
        _ => Err(format!(
            "Invalid preemption_mode: '{text}'. Must be 'lifo' or 'fifo'."
        )),
    }
}

fn parse_kv_transfer_timing_mode(text: &str) -> Result<KvTransferTimingMode, String> {
    match text.to_ascii_lowercase().as_str() {
        "full_prompt" => Ok(KvTransferTimingMode::FullPrompt),
        "destination_missing" => Ok(KvTransferTimingMode::DestinationMissing),
        _ => Err(format!(
            "Invalid kv_transfer_timing_mode '{text}'. Must be 'full_prompt' or \
             'destination_missing'."
        )),
    }
}

/// Engine defaults that depend on other fields; zero offload sizes mean "unset".
fn materialize_defaults(parsed: &mut ParsedEngineArgs) {
    let args = &mut parsed.args;
    if args.block_size == 0 {
        args.block_size = match args.engine_type {
            EngineType::Vllm => DEFAULT_VLLM_BLOCK_SIZE,
            EngineType::Trtllm => DEFAULT_TRTLLM_BLOCK_SIZE,
            EngineType::Sglang => args
                .sglang
                .as_ref()
                .and_then(|sglang| sglang.page_size)
                .unwrap_or(DEFAULT_SGLANG_BLOCK_SIZE),
        };
    }
    for size in [
        &mut parsed.num_g2_blocks,
        &mut parsed.num_g3_blocks,
        &mut parsed.offload_batch_size,
    ] {
        if *size == Some(0) {
            *size = None;
        }
    }
}

fn at_least_usize(key: &str, value: Option<usize>, min: usize) -> Result<(), String> {
    match value {
        Some(value) if value < min => Err(format!("{key}: must be at least {min}, got {value}")),
        _ => Ok(()),
    }
}

fn at_least_f64(key: &str, value: Option<f64>, min: f64) -> Result<(), String> {
    match value {
        Some(value) if value < min => Err(format!(
            "{key}: must be at least {}, got {}",
            show_f64(min),
            show_f64(value)
        )),
        _ => Ok(()),
    }
}

fn within_f64(key: &str, value: Option<f64>, min: f64, max: f64) -> Result<(), String> {
    match value {
        Some(value) if value < min || value > max => Err(format!(
            "{key}: must be between {} and {}, got {}",
            show_f64(min),
            show_f64(max),
            show_f64(value)
        )),
        _ => Ok(()),
    }
}

/// Per-field ranges, in the reference's field order (it reports every failing field; the first
/// one is reported here).
fn check_ranges(parsed: &ParsedEngineArgs) -> Result<(), String> {
    let args = &parsed.args;
    at_least_usize("num_gpu_blocks", Some(args.num_gpu_blocks), 1)?;
    at_least_usize("max_model_len", args.max_model_len, 1)?;
    at_least_usize("max_num_seqs", args.max_num_seqs, 1)?;
    at_least_usize("max_num_batched_tokens", args.max_num_batched_tokens, 1)?;
    at_least_f64("speedup_ratio", Some(args.speedup_ratio), 0.0)?;
    at_least_f64("decode_speedup_ratio", Some(args.decode_speedup_ratio), 0.0)?;
    at_least_usize("dp_size", Some(args.dp_size), 1)?;
    at_least_f64("startup_time", parsed.startup_time, 0.0)?;
    if let Some(nextn) = parsed.aic_nextn {
        if !(1..=5).contains(&nextn) {
            return Err(format!("aic_nextn: must be between 1 and 5, got {nextn}"));
        }
    }
    within_f64(
        "gpu_memory_utilization",
        parsed.gpu_memory_utilization,
        0.0,
        1.0,
    )?;
    within_f64("mem_fraction_static", parsed.mem_fraction_static, 0.0, 1.0)?;
    within_f64(
        "free_gpu_memory_fraction",
        parsed.free_gpu_memory_fraction,
        0.0,
        1.0,
    )?;
    if parsed.handoff_session_timeout_ms < 1 {
        return Err(format!(
            "handoff_session_timeout_ms: must be at least 1, got {}",
            parsed.handoff_session_timeout_ms
        ));
    }
    at_least_f64("kv_transfer_bandwidth", args.kv_transfer_bandwidth, 0.0)?;
    for (key, bandwidth) in parsed.bandwidths {
        at_least_f64(key, bandwidth, 0.0)?;
    }
    Ok(())
}

/// Rules across fields, in the reference's order; the messages keep its wording.
fn check_cross_field_rules(parsed: &ParsedEngineArgs) -> Result<(), String> {
    let args = &parsed.args;
    if let Some(sglang) = &args.sglang {
        check_sglang_fields(sglang)?;
    }
    if args.block_size == 0 {
        // Only reachable through `sglang.page_size: 0`.
        return Err("block_size must be greater than 0".into());
    }
    let uses_g1_pool = matches!(args.engine_type, EngineType::Vllm | EngineType::Trtllm);
    let offload_requested = parsed.num_g2_blocks.is_some()
        || parsed.num_g3_blocks.is_some()
        || parsed.enable_g4_storage;
    if parsed.g1_backend == Some(G1Backend::Native) && uses_g1_pool && offload_requested {
        return Err(
            "g1_backend=native cannot be combined with KVBM G2/G3/G4 offload; omit \
                    g1_backend to select KVBM automatically or set g1_backend=kvbm explicitly"
                .into(),
        );
    }
    if parsed.num_g3_blocks.is_some() && parsed.num_g2_blocks.is_none() {
        return Err(
            "num_g3_blocks requires num_g2_blocks because mocker stages G3 through G2".into(),
        );
    }
    if args.batch_wait != BatchWait::default() && args.engine_type != EngineType::Trtllm {
        return Err(format!(
            "trtllm.batch_wait_timeout_iters and trtllm.batch_wait_max_tokens_ratio are \
             supported only for engine_type=trtllm, got engine_type={:?}",
            args.engine_type
        ));
    }
    if args.max_model_len.is_some() && args.engine_type != EngineType::Vllm {
        return Err(format!(
            "max_model_len is supported only for engine_type=vllm, got engine_type={:?}",
            args.engine_type
        ));
    }
    if parsed.enable_g4_storage && parsed.num_g2_blocks.is_none() {
        return Err(
            "enable_g4_storage requires num_g2_blocks because mocker stages G4 through G2".into(),
        );
    }
    if parsed.aic_nextn.is_some() && args.decode_speedup_ratio != 1.0 {
        return Err(format!(
            "aic_nextn requires decode_speedup_ratio=1.0 because MTP output acceleration is \
             modeled by burst sampling, got {}",
            show_f64(args.decode_speedup_ratio)
        ));
    }
    if parsed.aic_nextn.is_none() && parsed.aic_nextn_accept_rates.is_some() {
        return Err("aic_nextn_accept_rates requires aic_nextn".into());
    }
    if let Some(policy) = &parsed.trtllm_capacity_policy {
        if policy != "guaranteed_no_evict" {
            return Err(format!(
                "engine_type=trtllm v1 supports only \
                 capacity_scheduler_policy='guaranteed_no_evict', got '{policy}'"
            ));
        }
    }
    if args.engine_type == EngineType::Sglang {
        let sglang = args.sglang.clone().unwrap_or_default();
        if let Some(page_size) = sglang.page_size {
            if args.block_size != page_size {
                return Err(format!(
                    "engine_type=sglang requires block_size and sglang.page_size to match when \
                     both are set, got block_size={} and sglang.page_size={page_size}",
                    args.block_size
                ));
            }
        }
        if let Some(chunk) = sglang.chunked_prefill_size {
            if chunk % args.block_size != 0 {
                return Err(format!(
                    "engine_type=sglang requires sglang.chunked_prefill_size to be divisible by \
                     block_size, got chunked_prefill_size={chunk} and block_size={}",
                    args.block_size
                ));
            }
        }
    }
    Ok(())
}

/// SGLang sizes that must be positive and the scheduling policies simulated (the reference
/// fails later, or silently schedules an unknown policy as FIFO; docs/differences.md).
fn check_sglang_fields(sglang: &SglangArgs) -> Result<(), String> {
    for (field, value) in [
        ("page_size", sglang.page_size),
        ("max_prefill_tokens", sglang.max_prefill_tokens),
        ("chunked_prefill_size", sglang.chunked_prefill_size),
        ("scheduler_recv_interval", sglang.scheduler_recv_interval),
    ] {
        if value == Some(0) {
            return Err(format!("sglang.{field}: must be at least 1, got 0"));
        }
    }
    match sglang.schedule_policy.as_deref() {
        None | Some("fifo" | "fcfs" | "lpm") => Ok(()),
        Some(other) => Err(format!(
            "sglang.schedule_policy: unknown policy '{other}'; dynosim simulates 'fifo' (alias \
             'fcfs') and 'lpm'"
        )),
    }
}

/// The speculative-decoding acceptance rates: comma-separated conditional probabilities,
/// each finite and in [0, 1], padded with zeros or truncated to `nextn` entries.
fn normalize_accept_rates(nextn: usize, rates: Option<&str>) -> Result<Vec<f64>, String> {
    let mut parsed = match rates.map(str::trim).filter(|rates| !rates.is_empty()) {
        Some(rates) => rates
            .split(',')
            .map(|rate| {
                rate.trim().parse::<f64>().map_err(|error| {
                    format!("invalid aic_nextn_accept_rates value {rate:?}: {error}")
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => DEFAULT_ACCEPT_RATES.to_vec(),
    };
    for (index, rate) in parsed.iter().enumerate() {
        if !(rate.is_finite() && (0.0..=1.0).contains(rate)) {
            return Err(format!(
                "aic_nextn_accept_rates[{index}] must be finite and in [0, 1], got {}",
                show_f64(*rate)
            ));
        }
    }
    parsed.resize(nextn, 0.0);
    Ok(parsed)
}

/// Turns the `aic_*` keys into the AIC timing configuration (when `aic_backend` is set).
fn attach_aic(parsed: &mut ParsedEngineArgs) -> Result<(), String> {
    let Some(raw) = parsed.aic.take() else {
        return Ok(());
    };
    if !BACKENDS.contains(&raw.backend.as_str()) {
        return Err(format!(
            "aic_backend: unknown backend '{}'; aiconfigurator-core models: {}",
            raw.backend,
            BACKENDS.join(", ")
        ));
    }
    let model_path = raw
        .model_path
        .filter(|path| !path.trim().is_empty())
        .ok_or(
            "aic_backend requires aic_model_path (a bundled model id or a local directory \
                holding config.json)",
        )?;
    let args = &mut parsed.args;
    if args.aic_tp_size == 0 {
        return Err("aic_tp_size: must be at least 1, got 0".into());
    }
    for (key, value) in [
        ("aic_moe_tp_size", raw.moe_tp_size),
        ("aic_moe_ep_size", raw.moe_ep_size),
    ] {
        at_least_usize(key, value, 1)?;
    }
    let [gemm, moe, fmha, kv_cache, comm] = raw.dtypes;
    let non_empty = |value: Option<String>| value.filter(|text| !text.trim().is_empty());
    args.aic = Some(AicConfig {
        backend: raw.backend,
        system: non_empty(raw.system).unwrap_or_else(|| DEFAULT_SYSTEM.to_string()),
        backend_version: non_empty(raw.backend_version),
        model_path,
        tp_size: args.aic_tp_size,
        moe_tp_size: raw.moe_tp_size,
        moe_ep_size: raw.moe_ep_size,
        attention_dp_size: raw.attention_dp_size.filter(|&dp| dp > 0).unwrap_or(1),
        gemm_dtype: normalize_dtype(gemm.1.as_deref()),
        moe_dtype: normalize_dtype(moe.1.as_deref()),
        fmha_dtype: normalize_dtype(fmha.1.as_deref()),
        kv_cache_dtype: normalize_dtype(kv_cache.1.as_deref()),
        comm_dtype: normalize_dtype(comm.1.as_deref()),
        nextn: parsed.aic_nextn.unwrap_or(0),
        calibration: None,
        tables: None,
    });
    if let Some(value) = raw.calibration.filter(|value| !value.trim().is_empty()) {
        let config = args.aic.as_mut().expect("set above");
        config.calibration = Some(
            crate::aic::calibration::resolve(&value, config, raw.engine_version.as_deref())
                .map_err(|message| format!("aic_calibration: {message}"))?,
        );
    }
    if !raw.num_gpu_blocks_given {
        args.aic_block_estimate = Some(BlockEstimate {
            block_size: args.block_size,
            max_num_batched_tokens: args.max_num_batched_tokens,
            gpu_memory_utilization: parsed.gpu_memory_utilization,
            mem_fraction_static: parsed.mem_fraction_static,
            free_gpu_memory_fraction: parsed.free_gpu_memory_fraction,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FLAG: &str = "--extra-engine-args";

    fn parse(json: &str) -> EngineArgs {
        EngineArgs::from_json(FLAG, json).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    /// The message of the usage error `json` must produce.
    fn error(json: &str) -> String {
        let error = EngineArgs::from_json(FLAG, json).expect_err(json);
        assert_eq!(error.kind(), crate::error::ErrorKind::Usage);
        error.message().to_string()
    }

    fn assert_error(json: &str, expected: &str) {
        assert_eq!(error(json), format!("{FLAG}: {expected}"), "input: {json}");
    }

    #[test]
    fn empty_object_gives_the_defaults() {
        let args = parse("{}");
        assert_eq!(args, EngineArgs::default());
        assert_eq!(args.block_size, 64);
        assert_eq!(args.num_gpu_blocks, 16384);
        assert_eq!(args.max_num_seqs, Some(256));
        assert_eq!(args.max_num_batched_tokens, Some(8192));
        assert_eq!(args.gpus_per_worker(), 1);
    }

    #[test]
    fn block_size_zero_takes_the_engine_default() {
        assert_eq!(parse(r#"{"engine_type":"trtllm"}"#).block_size, 32);
        assert_eq!(
            parse(r#"{"engine_type":"trtllm","block_size":0}"#).block_size,
            32
        );
        assert_eq!(parse(r#"{"block_size":0}"#).block_size, 64);
        assert_eq!(parse(r#"{"block_size":7}"#).block_size, 7);
    }

    #[test]
    fn values_are_kept() {
        let args = parse(
            r#"{"num_gpu_blocks":100,"block_size":16,"max_model_len":4096,"max_num_seqs":8,
                "max_num_batched_tokens":512,"enable_prefix_caching":false,
                "enable_chunked_prefill":false,"speedup_ratio":2.5,"decode_speedup_ratio":0.5,
                "dp_size":2,"preemption_mode":"fifo","aic_tp_size":4,"kv_bytes_per_token":128,
                "kv_transfer_bandwidth":64,"kv_transfer_timing_mode":"destination_missing",
                "router_queue_policy":"wspt","sglang":{"page_size":4,"bogus":1}}"#,
        );
        let expected = EngineArgs {
            engine_type: EngineType::Vllm,
            num_gpu_blocks: 100,
            block_size: 16,
            max_model_len: Some(4096),
            max_num_seqs: Some(8),
            max_num_batched_tokens: Some(512),
            enable_prefix_caching: false,
            enable_chunked_prefill: false,
            speedup_ratio: 2.5,
            decode_speedup_ratio: 0.5,
            dp_size: 2,
            preemption_mode: PreemptionMode::Fifo,
            worker_type: WorkerType::Aggregated,
            aic_tp_size: 4,
            kv_bytes_per_token: Some(128),
            kv_transfer_bandwidth: Some(64.0),
            kv_transfer_timing_mode: KvTransferTimingMode::DestinationMissing,
            router_queue_policy: Some(RouterQueuePolicy::Wspt),
            sglang: Some(SglangArgs {
                page_size: Some(4),
                ..SglangArgs::default()
            }),
            timing: TimingSource::Polynomial,
            speculative: None,
            aic: None,
            aic_block_estimate: None,
            startup_time: 0.0,
            batch_wait: BatchWait::default(),
        };
        assert_eq!(args, expected);
        assert_eq!(args.gpus_per_worker(), 8);
    }

    #[test]
    fn trtllm_batch_waiting_is_kept() {
        let args = parse(
            r#"{"engine_type":"trtllm","trtllm":{"batch_wait_timeout_iters":20,
                "batch_wait_max_tokens_ratio":0.9,"other":1}}"#,
        );
        assert_eq!(
            args.batch_wait,
            BatchWait {
                timeout_iters: 20,
                max_tokens_ratio: 0.9
            }
        );
        assert!(args.batch_wait.enabled());
        let one_limit =
            parse(r#"{"engine_type":"trtllm","trtllm":{"batch_wait_timeout_iters":5}}"#);
        assert!(!one_limit.batch_wait.enabled());
    }

    #[test]
    fn nullable_fields_accept_null() {
        let args = parse(
            r#"{"num_gpu_blocks":null,"max_model_len":null,"max_num_seqs":null,
                "max_num_batched_tokens":null,"startup_time":null,"aic_tp_size":null,
                "kv_bytes_per_token":null,"kv_transfer_bandwidth":null,"num_g2_blocks":null,
                "bootstrap_port":null,"reasoning":null,"sglang":null,"trtllm":null,
                "router_queue_policy":null,"planner_profile_data":null,"aic_backend":null,
                "aic_nextn":null,"worker_type":null,"has_perf_model":null}"#,
        );
        assert_eq!(args.num_gpu_blocks, 16384, "null means the default");
        assert_eq!(args.max_num_seqs, None, "null means unlimited");
        assert_eq!(args.max_num_batched_tokens, None, "null means unlimited");
        assert_eq!(args.max_model_len, None);
        assert_eq!(args.aic_tp_size, 1);
    }

    #[test]
    fn null_is_an_error_for_required_fields() {
        for key in [
            "engine_type",
            "block_size",
            "enable_prefix_caching",
            "g1_backend",
            "enable_chunked_prefill",
            "speedup_ratio",
            "decode_speedup_ratio",
            "dp_size",
            "is_prefill",
            "is_decode",
            "aic_mtp_seed",
            "enable_local_indexer",
            "handoff_session_timeout_ms",
            "kv_transfer_timing_mode",
            "enable_g4_storage",
            "preemption_mode",
        ] {
            assert_error(
                &format!(r#"{{"{key}":null}}"#),
                &format!("{key} must not be null"),
            );
        }
    }

    #[test]
    fn enum_names_ignore_case() {
        assert_eq!(
            parse(r#"{"engine_type":"TRTLLM"}"#).engine_type,
            EngineType::Trtllm
        );
        assert_eq!(
            parse(r#"{"engine_type":"Vllm"}"#).engine_type,
            EngineType::Vllm
        );
        assert_eq!(
            parse(r#"{"preemption_mode":"FIFO"}"#).preemption_mode,
            PreemptionMode::Fifo
        );
        assert_eq!(
            parse(r#"{"kv_transfer_timing_mode":"Destination_Missing"}"#).kv_transfer_timing_mode,
            KvTransferTimingMode::DestinationMissing
        );
    }

    #[test]
    fn bad_enum_names_keep_the_reference_wording() {
        assert_error(
            r#"{"engine_type":"bogus"}"#,
            "Invalid engine_type 'bogus'. Must be 'vllm', 'sglang', or 'trtllm'.",
        );
        assert_error(
            r#"{"preemption_mode":"x"}"#,
            "Invalid preemption_mode: 'x'. Must be 'lifo' or 'fifo'.",
        );
        assert_error(
            r#"{"kv_transfer_timing_mode":"x"}"#,
            "Invalid kv_transfer_timing_mode 'x'. Must be 'full_prompt' or 'destination_missing'.",
        );
        // These two are exact (lower-case) names in the reference.
        assert_error(
            r#"{"router_queue_policy":"LCFS"}"#,
            r#"unknown queue policy: "LCFS", expected 'fcfs', 'lcfs', or 'wspt'"#,
        );
        assert_error(
            r#"{"g1_backend":"KVBM"}"#,
            "g1_backend: unknown variant `KVBM`, expected `kvbm` or `native`",
        );
        parse(r#"{"g1_backend":"kvbm"}"#);
    }

    #[test]
    fn unknown_key_lists_the_accepted_keys() {
        let message = error(r#"{"foo":1}"#);
        assert!(message.starts_with(
            "--extra-engine-args: unknown field `foo`, expected one of `engine_type`, \
             `num_gpu_blocks`, `block_size`, `max_model_len`,"
        ));
        assert!(
            message.ends_with("`sglang`, `trtllm`, `has_perf_model`"),
            "{message}"
        );
        // The reference's 61 keys and dynosim's `aic_calibration` and `aic_engine_version`.
        assert_eq!(ACCEPTED_KEYS.len(), 63);
        // Keys of older mocker versions are rejected too.
        for key in ["watermark", "aic_systems_path", "eviction_backend"] {
            assert!(error(&format!(r#"{{"{key}":1}}"#)).contains(&format!("unknown field `{key}`")));
        }
    }

    #[test]
    fn first_fault_in_document_order_wins() {
        assert!(error(r#"{"foo":1,"engine_type":"bogus"}"#).contains("unknown field `foo`"));
        assert!(error(r#"{"engine_type":"bogus","foo":1}"#).contains("unknown field `foo`"));
        assert!(error(r#"{"num_gpu_blocks":-1,"foo":1}"#).contains("num_gpu_blocks: invalid value"));
        // Typing comes before the enum and range rules.
        assert!(
            error(r#"{"num_gpu_blocks":0,"engine_type":"bogus"}"#).contains("Invalid engine_type")
        );
    }

    #[test]
    fn wrong_types_name_the_field() {
        assert_error(
            r#"{"num_gpu_blocks":-1}"#,
            "num_gpu_blocks: invalid value: integer `-1`, expected usize",
        );
        assert_error(
            r#"{"num_gpu_blocks":"5"}"#,
            r#"num_gpu_blocks: invalid type: string "5", expected usize"#,
        );
        assert_error(
            r#"{"enable_prefix_caching":1}"#,
            "enable_prefix_caching: invalid type: integer `1`, expected a boolean",
        );
        assert_error(
            r#"{"speedup_ratio":"x"}"#,
            r#"speedup_ratio: invalid type: string "x", expected f64"#,
        );
        assert_error(
            r#"{"dp_size":4294967296}"#,
            "dp_size: invalid value: integer `4294967296`, expected u32",
        );
        assert_error(
            r#"{"bootstrap_port":70000}"#,
            "bootstrap_port: invalid value: integer `70000`, expected u16",
        );
        assert_error(
            r#"{"reasoning":{"start_thinking_token_id":1}}"#,
            "reasoning: missing field `end_thinking_token_id`",
        );
        assert!(error(r#"{"num_gpu_blocks":1.5}"#)
            .contains("num_gpu_blocks: invalid type: floating point"));
        // Integers are fine where floats are expected; sub-objects ignore unknown keys.
        parse(r#"{"speedup_ratio":2,"trtllm":{"foo":1},"has_perf_model":[1,2]}"#);
        parse(
            r#"{"reasoning":{"start_thinking_token_id":1,"end_thinking_token_id":2,"thinking_ratio":2}}"#,
        );
    }

    #[test]
    fn not_an_object_or_not_json() {
        assert_error("[1]", "engine-args must be a JSON object");
        assert_error("5", "engine-args must be a JSON object");
        assert!(
            error("{'a':1}").starts_with("--extra-engine-args: invalid JSON: key must be a string")
        );
        assert!(error(r#"{"engine_type":"vllm"} x"#).contains("invalid JSON: trailing characters"));
        assert!(error("").contains("invalid JSON"));
    }

    #[test]
    fn repeated_key_keeps_the_last_value() {
        // The replay front reads the JSON with Python, where the last value wins.
        assert_eq!(parse(r#"{"block_size":1,"block_size":2}"#).block_size, 2);
    }

    #[test]
    fn worker_type_follows_the_replay_front() {
        assert_eq!(
            parse(r#"{"worker_type":"prefill"}"#).worker_type,
            WorkerType::Prefill
        );
        assert_eq!(
            parse(r#"{"worker_type":"decode"}"#).worker_type,
            WorkerType::Decode
        );
        assert_eq!(
            parse(r#"{"worker_type":"aggregated"}"#).worker_type,
            WorkerType::Aggregated
        );
        assert_eq!(
            parse(r#"{"is_prefill":true}"#).worker_type,
            WorkerType::Prefill
        );
        assert_eq!(
            parse(r#"{"is_decode":true}"#).worker_type,
            WorkerType::Decode
        );
        for bad in [r#""Decode""#, r#""bogus""#, "1"] {
            assert_error(
                &format!(r#"{{"worker_type":{bad}}}"#),
                "worker_type must be one of 'aggregated', 'prefill', or 'decode'",
            );
        }
        assert_error(
            r#"{"worker_type":"prefill","is_decode":false}"#,
            "worker_type cannot be combined with is_prefill or is_decode",
        );
        assert_error(
            r#"{"is_prefill":true,"is_decode":true}"#,
            "Invalid worker configuration: is_prefill and is_decode cannot both be true.",
        );
    }

    #[test]
    fn range_rules() {
        let cases = [
            (
                r#"{"num_gpu_blocks":0}"#,
                "num_gpu_blocks: must be at least 1, got 0",
            ),
            (
                r#"{"max_model_len":0}"#,
                "max_model_len: must be at least 1, got 0",
            ),
            (
                r#"{"max_num_seqs":0}"#,
                "max_num_seqs: must be at least 1, got 0",
            ),
            (
                r#"{"max_num_batched_tokens":0}"#,
                "max_num_batched_tokens: must be at least 1, got 0",
            ),
            (
                r#"{"speedup_ratio":-1}"#,
                "speedup_ratio: must be at least 0, got -1",
            ),
            (
                r#"{"decode_speedup_ratio":-0.5}"#,
                "decode_speedup_ratio: must be at least 0, got -0.5",
            ),
            (r#"{"dp_size":0}"#, "dp_size: must be at least 1, got 0"),
            (
                r#"{"startup_time":-1}"#,
                "startup_time: must be at least 0, got -1",
            ),
            (
                r#"{"aic_nextn":0}"#,
                "aic_nextn: must be between 1 and 5, got 0",
            ),
            (
                r#"{"aic_nextn":6}"#,
                "aic_nextn: must be between 1 and 5, got 6",
            ),
            (
                r#"{"gpu_memory_utilization":1.5}"#,
                "gpu_memory_utilization: must be between 0 and 1, got 1.5",
            ),
            (
                r#"{"mem_fraction_static":-0.1}"#,
                "mem_fraction_static: must be between 0 and 1, got -0.1",
            ),
            (
                r#"{"free_gpu_memory_fraction":2}"#,
                "free_gpu_memory_fraction: must be between 0 and 1, got 2",
            ),
            (
                r#"{"handoff_session_timeout_ms":0}"#,
                "handoff_session_timeout_ms: must be at least 1, got 0",
            ),
            (
                r#"{"kv_transfer_bandwidth":-1}"#,
                "kv_transfer_bandwidth: must be at least 0, got -1",
            ),
            (
                r#"{"bandwidth_g1_to_g2_gbps":-1}"#,
                "bandwidth_g1_to_g2_gbps: must be at least 0, got -1",
            ),
            (
                r#"{"bandwidth_g4_to_g2_gbps":-2}"#,
                "bandwidth_g4_to_g2_gbps: must be at least 0, got -2",
            ),
        ];
        for (json, expected) in cases {
            assert_error(json, expected);
        }
        // Zero is accepted where the bound is 0 (speed-up 0 means "no scaling").
        parse(r#"{"speedup_ratio":0,"decode_speedup_ratio":0,"kv_transfer_bandwidth":0}"#);
        // Zero offload sizes mean "unset" and are not range errors.
        parse(r#"{"num_g2_blocks":0,"num_g3_blocks":0,"offload_batch_size":0}"#);
        // The first failing field in the reference's field order is reported.
        assert_error(
            r#"{"dp_size":0,"num_gpu_blocks":0}"#,
            "num_gpu_blocks: must be at least 1, got 0",
        );
    }

    #[test]
    fn cross_field_rules() {
        let cases = [
            (
                r#"{"max_model_len":10,"engine_type":"trtllm"}"#,
                "max_model_len is supported only for engine_type=vllm, got engine_type=Trtllm",
            ),
            (
                r#"{"num_g3_blocks":5}"#,
                "num_g3_blocks requires num_g2_blocks because mocker stages G3 through G2",
            ),
            (
                r#"{"num_g3_blocks":5,"num_g2_blocks":0}"#,
                "num_g3_blocks requires num_g2_blocks because mocker stages G3 through G2",
            ),
            (
                r#"{"enable_g4_storage":true}"#,
                "enable_g4_storage requires num_g2_blocks because mocker stages G4 through G2",
            ),
            (
                r#"{"num_g2_blocks":4,"g1_backend":"native"}"#,
                "g1_backend=native cannot be combined with KVBM G2/G3/G4 offload; omit g1_backend \
                 to select KVBM automatically or set g1_backend=kvbm explicitly",
            ),
            (
                r#"{"aic_nextn":2,"decode_speedup_ratio":2}"#,
                "aic_nextn requires decode_speedup_ratio=1.0 because MTP output acceleration is \
                 modeled by burst sampling, got 2",
            ),
            (
                r#"{"aic_nextn_accept_rates":"0.5"}"#,
                "aic_nextn_accept_rates requires aic_nextn",
            ),
            (
                r#"{"trtllm":{"capacity_scheduler_policy":"max_utilization"}}"#,
                "engine_type=trtllm v1 supports only \
                 capacity_scheduler_policy='guaranteed_no_evict', got 'max_utilization'",
            ),
            (
                r#"{"engine_type":"sglang","block_size":4,"sglang":{"page_size":8}}"#,
                "engine_type=sglang requires block_size and sglang.page_size to match when both \
                 are set, got block_size=4 and sglang.page_size=8",
            ),
            (
                r#"{"engine_type":"sglang","block_size":3,"sglang":{"chunked_prefill_size":8}}"#,
                "engine_type=sglang requires sglang.chunked_prefill_size to be divisible by \
                 block_size, got chunked_prefill_size=8 and block_size=3",
            ),
            (
                r#"{"engine_type":"sglang","sglang":{"page_size":0}}"#,
                "sglang.page_size: must be at least 1, got 0",
            ),
            (
                r#"{"aic_nextn":2,"aic_nextn_accept_rates":"1.5"}"#,
                "aic_nextn_accept_rates[0] must be finite and in [0, 1], got 1.5",
            ),
            (
                r#"{"aic_nextn":2,"aic_nextn_accept_rates":"x"}"#,
                r#"invalid aic_nextn_accept_rates value "x": invalid float literal"#,
            ),
        ];
        for (json, expected) in cases {
            assert_error(json, expected);
        }
        parse(r#"{"num_g2_blocks":4,"num_g3_blocks":2,"enable_g4_storage":true}"#);
        parse(r#"{"trtllm":{"capacity_scheduler_policy":"guaranteed_no_evict"}}"#);
        // The SGLang block rules apply to the SGLang engine only.
        parse(r#"{"block_size":4,"sglang":{"page_size":8,"chunked_prefill_size":3}}"#);
    }

    #[test]
    fn accept_rates_are_padded_or_truncated() {
        assert_eq!(normalize_accept_rates(2, None).unwrap(), vec![0.85, 0.3]);
        assert_eq!(
            normalize_accept_rates(3, Some(" 1, 0.5 ")).unwrap(),
            vec![1.0, 0.5, 0.0]
        );
        assert_eq!(normalize_accept_rates(1, Some("")).unwrap(), vec![0.85]);
    }

    #[test]
    fn attention_dp_sets_dp_size() {
        assert_eq!(parse(r#"{"aic_attention_dp_size":2}"#).dp_size, 2);
        assert_eq!(
            parse(r#"{"aic_attention_dp_size":2,"dp_size":2}"#).dp_size,
            2
        );
        assert_eq!(parse(r#"{"aic_attention_dp_size":0}"#).dp_size, 1);
        assert_eq!(
            parse(r#"{"aic_attention_dp_size":null,"dp_size":3}"#).dp_size,
            3
        );
        // Any attention-DP setting makes a different dp_size above 1 a contradiction (0 = 1).
        assert_error(
            r#"{"aic_attention_dp_size":0,"dp_size":3}"#,
            "dp_size must match aic_attention_dp_size for AIC-backed replay (got dp_size=3, \
             aic_attention_dp_size=1)",
        );
        assert_error(
            r#"{"aic_attention_dp_size":2,"dp_size":4}"#,
            "dp_size must match aic_attention_dp_size for AIC-backed replay (got dp_size=4, \
             aic_attention_dp_size=2)",
        );
    }

    #[test]
    fn settings_without_an_offline_effect_are_accepted() {
        parse(
            r#"{"startup_time":5,"g1_backend":"kvbm","aic_system":"h200_sxm","aic_model_path":"m",
                "aic_gemm_dtype":"fp8","aic_mtp_seed":7,"gpu_memory_utilization":0.9,
                "mem_fraction_static":0.8,"free_gpu_memory_fraction":0.9,
                "enable_local_indexer":true,"bootstrap_port":1234,"handoff_session_timeout_ms":5,
                "num_g2_blocks":10,"offload_batch_size":4,"bandwidth_g2_to_g1_gbps":3,
                "response_replay_trace_path":"/tmp/x","zmq_kv_events_port":1,"zmq_replay_port":2,
                "has_perf_model":true}"#,
        );
    }

    #[test]
    fn speculative_settings_are_normalised() {
        assert_eq!(parse("{}").speculative, None);
        let args = parse(r#"{"aic_nextn":3}"#);
        assert_eq!(
            args.speculative,
            Some(SpeculativeArgs {
                nextn: 3,
                accept_rates: vec![0.85, 0.3, 0.0],
                seed: 42,
            })
        );
        let args = parse(
            r#"{"aic_nextn":2,"aic_nextn_accept_rates":" 1, 0.25 ,0.5","aic_mtp_seed":18446744073709551615}"#,
        );
        assert_eq!(
            args.speculative,
            Some(SpeculativeArgs {
                nextn: 2,
                accept_rates: vec![1.0, 0.25],
                seed: u64::MAX,
            })
        );
        let args = parse(r#"{"aic_nextn":4,"aic_nextn_accept_rates":"0.5"}"#);
        assert_eq!(
            args.speculative.unwrap().accept_rates,
            vec![0.5, 0.0, 0.0, 0.0]
        );
        assert_error(
            r#"{"aic_nextn":1,"aic_mtp_seed":null}"#,
            "aic_mtp_seed must not be null",
        );
        assert!(error(r#"{"aic_nextn":1,"aic_mtp_seed":-1}"#).contains("aic_mtp_seed"));
        assert_error(
            r#"{"aic_nextn":2,"aic_nextn_accept_rates":"0.5,nan"}"#,
            "aic_nextn_accept_rates[1] must be finite and in [0, 1], got NaN",
        );
    }

    #[test]
    fn a_profile_table_is_read_when_the_arguments_are_parsed() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/parity/profiles");
        if !dir.join("small.npz").exists() {
            eprintln!("skipped: tests/parity/profiles is not beside the crate");
            return;
        }
        let json = serde_json::json!({ "planner_profile_data": dir.join("small.npz") }).to_string();
        let args = parse(&json);
        let TimingSource::ProfileTable(table) = &args.timing else {
            panic!("expected a profile table, got {:?}", args.timing);
        };
        // small.npz: prefill 3 ms at 128 tokens, 11 ms at 1024.
        assert_eq!(table.prefill_ms_at(128.0), 3.0);
        assert_eq!(table.prefill_ms_at(576.0), 7.0);
        // A clone of the arguments (one per rank) shares the table.
        let copy = args.clone();
        let TimingSource::ProfileTable(shared) = &copy.timing else {
            unreachable!()
        };
        assert!(Arc::ptr_eq(table, shared));
        let json =
            serde_json::json!({ "planner_profile_data": dir.join("bad_unsorted.npz") }).to_string();
        let message = error(&json);
        assert!(
            message.starts_with(&format!("{FLAG}: planner_profile_data: ")),
            "{message}"
        );
        assert!(
            message.contains("bad_unsorted.npz: key 'prefill_isl' must be strictly increasing"),
            "{message}"
        );
    }

    #[test]
    fn sglang_is_accepted_with_its_page_size() {
        let args = parse(r#"{"engine_type":"SGLang"}"#);
        assert_eq!(args.engine_type, EngineType::Sglang);
        assert_eq!(args.block_size, 1);
        let args = parse(r#"{"engine_type":"sglang","sglang":{"page_size":16}}"#);
        assert_eq!(args.block_size, 16);
    }

    #[test]
    fn features_not_built_yet_are_usage_errors() {
        assert_error(
            r#"{"aic_backend":"vllm"}"#,
            "AIC KV cache capacity estimation requires aic_model_path in engine args",
        );
    }

    #[test]
    fn aic_keys_become_the_aic_configuration() {
        let args = parse(
            r#"{"aic_backend":"sglang","aic_model_path":"Qwen/Qwen3-32B","aic_tp_size":2,
                "aic_gemm_dtype":"auto","aic_moe_dtype":"int4","aic_kv_cache_dtype":"fp8",
                "aic_moe_ep_size":2,"num_gpu_blocks":100,"mem_fraction_static":0.5}"#,
        );
        let aic = args.aic.expect("aic configured");
        assert_eq!(aic.backend, "sglang");
        assert_eq!(aic.system, "h200_sxm");
        assert_eq!(aic.backend_version, None);
        assert_eq!(aic.tp_size, 2);
        assert_eq!(aic.moe_ep_size, Some(2));
        assert_eq!(aic.moe_tp_size, None);
        assert_eq!(aic.attention_dp_size, 1);
        assert_eq!(aic.gemm_dtype, None);
        assert_eq!(aic.moe_dtype.as_deref(), Some("int4_wo"));
        assert_eq!(aic.kv_cache_dtype.as_deref(), Some("fp8"));
        assert!(aic.tables.is_none());
        // num_gpu_blocks given: no estimate.
        assert_eq!(args.num_gpu_blocks, 100);
        assert_eq!(args.aic_block_estimate, None);

        let args = parse(
            r#"{"aic_backend":"trtllm","aic_model_path":"m","aic_system":"b200_sxm",
                "aic_backend_version":"1.3.0rc20","aic_attention_dp_size":2,
                "engine_type":"trtllm","free_gpu_memory_fraction":0.7,"max_num_batched_tokens":null}"#,
        );
        let aic = args.aic.as_ref().expect("aic configured");
        assert_eq!(aic.system, "b200_sxm");
        assert_eq!(aic.backend_version.as_deref(), Some("1.3.0rc20"));
        assert_eq!(aic.attention_dp_size, 2);
        assert_eq!(args.dp_size, 2);
        let estimate = args.aic_block_estimate.expect("estimate asked for");
        assert_eq!(estimate.block_size, 32);
        assert_eq!(estimate.max_num_batched_tokens, None);
        assert_eq!(estimate.free_gpu_memory_fraction, Some(0.7));

        // Without aic_backend the aic_* keys configure nothing.
        assert_eq!(
            parse(r#"{"aic_model_path":"m","aic_system":"x"}"#).aic,
            None
        );
    }

    #[test]
    fn bad_aic_settings_are_usage_errors() {
        for (json, expected) in [
            (
                r#"{"aic_backend":"vllm"}"#,
                "AIC KV cache capacity estimation requires aic_model_path in engine args",
            ),
            (
                r#"{"aic_backend":"vllm","num_gpu_blocks":100}"#,
                "aic_backend requires aic_model_path (a bundled model id or a local directory \
                 holding config.json)",
            ),
            (
                r#"{"aic_backend":"tensorrt","aic_model_path":"m"}"#,
                "aic_backend: unknown backend 'tensorrt'; aiconfigurator-core models: vllm, \
                 sglang, trtllm",
            ),
            (
                r#"{"aic_backend":"vllm","aic_model_path":"m","aic_tp_size":0}"#,
                "aic_tp_size: must be at least 1, got 0",
            ),
            (
                r#"{"aic_backend":"vllm","aic_model_path":"m","aic_moe_ep_size":0}"#,
                "aic_moe_ep_size: must be at least 1, got 0",
            ),
            (
                r#"{"aic_backend":"vllm","aic_model_path":"m","aic_tp_size":"2"}"#,
                "aic_tp_size: invalid type: string \"2\", expected usize",
            ),
            (
                r#"{"aic_backend":"vllm","aic_model_path":"m","aic_engine_version":"0.5.9"}"#,
                "aic_engine_version picks entries of a calibration and needs aic_calibration",
            ),
        ] {
            let message = error(json);
            assert!(
                message.starts_with(&format!("{FLAG}: {expected}")),
                "{json}: {message}"
            );
        }
    }

    #[test]
    fn aic_engine_version_picks_a_calibration_entry_of_that_version() {
        let key = "tp1 dp1 moe_tp- ep- gemm=- moe=- kv=-";
        let entry = |extra: &str, scale: f64| {
            format!(
                r#"{{"backend":"vllm","system":"h200_sxm","model":"m"{extra},"corrections":
                {{"prefill_scale":{scale},"decode_scale":1,"prefill_pass_ms":0,
                "decode_pass_ms":0,"kv_capacity_scale":1}}}}"#
            )
        };
        let text = format!(
            r#"{{"format":"dynosim-aic-calibration/1","entries":[{},{}]}}"#,
            entry(&format!(r#","configuration":"{key}""#), 2.0),
            entry(
                &format!(r#","configuration":"{key}","engine_version":"0.5.9""#),
                3.0
            ),
        );
        let path = std::env::temp_dir().join(format!("dynosim-ev-{}.json", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let scale = |version: &str| {
            let json = format!(
                r#"{{"aic_backend":"vllm","aic_model_path":"m","num_gpu_blocks":100,
                "aic_calibration":{:?}{version}}}"#,
                path.to_str().unwrap()
            );
            parse(&json).aic.unwrap().calibration.unwrap().prefill_scale
        };
        let picked = [
            scale(r#","aic_engine_version":"0.5.9""#),
            scale(r#","aic_engine_version":"0.6.0""#),
            scale(""),
        ];
        std::fs::remove_file(&path).unwrap();
        assert_eq!(picked, [3.0, 2.0, 2.0]);
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(text in ".{0,200}") {
            let _ = EngineArgs::from_json(FLAG, &text);
        }

        #[test]
        fn never_panics_on_arbitrary_objects(
            entries in proptest::collection::vec(
                (proptest::sample::select(ACCEPTED_KEYS),
                 prop_oneof![
                     Just("null".to_string()), Just("true".to_string()), Just("0".to_string()),
                     Just("-1".to_string()), Just("1.5".to_string()), Just("\"vllm\"".to_string()),
                     Just("\"sglang\"".to_string()), Just("\"prefill\"".to_string()),
                     Just("{}".to_string()), Just("[]".to_string()),
                     Just("{\"page_size\":0}".to_string()), (0u64..100000).prop_map(|n| n.to_string()),
                 ]),
                0..8,
            )
        ) {
            let body = entries
                .iter()
                .map(|(key, value)| format!("\"{key}\":{value}"))
                .collect::<Vec<_>>()
                .join(",");
            let _ = EngineArgs::from_json(FLAG, &format!("{{{body}}}"));
        }
    }
}
