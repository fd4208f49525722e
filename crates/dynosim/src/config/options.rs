//! Raw replay options, one field per `dynamo.replay` flag, and their validation into a spec.
//!
//! [`ReplayOptions::into_spec`] applies the reference's checks in the reference's order, so an
//! input with several faults reports the same fault first:
//! 1. the replay front's checks (which inputs go together), then the JSON options
//!    (`--extra-engine-args`, `--prefill-engine-args`, `--decode-engine-args`, `--router-config`),
//!    the AIC flags and the planner flags;
//! 2. integer flags that the reference takes as unsigned must not be negative;
//! 3. the replay core's checks, whose order differs between trace and synthetic replay.
//!
//! Choices given by name (replay mode, trace format, router mode) are parsed once into enums;
//! the trace and synthetic builders share their topology, arrival and router steps.
//!
//! Features dynosim does not have yet are usage errors saying so, raised where the reference
//! would start using them, so every check that the reference runs before that point still
//! applies.

use std::path::PathBuf;

use super::json_fields::show_f64;
use super::planner::{PlannerMode, PlannerSpec};
use super::{
    compact_f64, ArrivalMode, ArrivalProcess, Deployment, EngineArgs, EngineType, LengthSpread,
    PoolSpec, ReplayMode, ReplaySpec, RouterConfig, RouterMode, Sla, SyntheticSpec, TraceFormat,
    TraceSpec, WorkerType, WorkloadSpec, MAX_VIRTUAL_TIME_MS,
};
use crate::aic::{normalize_dtype, AicConfig};
use crate::error::{Error, Result};

/// Tokens per trace `hash_id` when `--trace-block-size` is not given.
const DEFAULT_TRACE_BLOCK_SIZE: u32 = 512;

/// Seed of the synthetic length draws when `--length-seed` is not given: fixed, so that a
/// run with a length spread is as deterministic as one without (the same default as
/// `--arrival-seed`, though the two streams are independent).
pub const DEFAULT_LENGTH_SEED: u64 = 42;

/// One field per flag of `python -m dynamo.replay`, holding the raw value. Defaults equal the
/// flag defaults. Filled by the CLI (clap) and by the Python API (kwargs).
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

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            trace_files: Vec::new(),
            extra_engine_args: None,
            prefill_engine_args: None,
            decode_engine_args: None,
            router_config: None,
            router_policy_config: None,
            router_policy_config_from_env: false,
            model_name: None,
            router_seed: 0,
            aic_backend: None,
            aic_system: None,
            aic_model_path: None,
            aic_backend_version: None,
            aic_tp_size: None,
            aic_moe_tp_size: None,
            aic_moe_ep_size: None,
            aic_attention_dp_size: None,
            aic_gemm_dtype: None,
            aic_moe_dtype: None,
            aic_fmha_dtype: None,
            aic_kv_cache_dtype: None,
            aic_comm_dtype: None,
            aic_nextn: None,
            aic_nextn_accept_rates: None,
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
            input_tokens_stddev: None,
            output_tokens_stddev: None,
            random_range_ratio: None,
            length_seed: None,
            num_workers: 1,
            num_prefill_workers: 1,
            num_decode_workers: 1,
            replay_concurrency: None,
            replay_mode: "offline".into(),
            online_speed: None,
            router_mode: "round_robin".into(),
            arrival_speedup_ratio: 1.0,
            trace_format: "mooncake".into(),
            trace_block_size: None,
            trace_shared_prefix_ratio: 0.0,
            trace_num_prefix_groups: 0,
            report_jsonl: None,
            planner_config: None,
            benchmark_granularity: 8,
            max_sim_time_seconds: None,
            max_sim_time_ms: None,
            sla_ttft_ms: None,
            sla_itl_ms: None,
            sla_e2e_ms: None,
        }
    }
}

/// The most engine ranks (workers × dp_size) one pool may have. Each rank is a scheduler with
/// its own queues and KV cache (about 0.5 KB idle, more once it caches): a count beyond real
/// deployments is a typo, and allocating it up front would exhaust memory.
pub const MAX_ENGINE_RANKS: usize = 100_000;

/// A usage error about one flag: `--flag: message` (the Python API names the argument
/// instead, see `config::spelling`).
fn flag_error(flag: &str, message: impl AsRef<str>) -> Error {
    Error::usage_about(flag, message.as_ref())
}

/// The Python API's wording of the one-load-controller rule (the reference's API says this).
const SYNTHETIC_LOAD_CONTROL_API_MESSAGE: &str =
    "synthetic replay requires exactly one of replay_concurrency, request_rate, or \
     arrival_interval_ms";

/// A usage error whose message already names the flags involved.
fn usage(message: impl Into<String>) -> Error {
    Error::usage(message)
}

/// The trace dialects of the reference (`--trace-format`), aliases resolved; the settings a
/// dialect takes are added when the spec's [`TraceFormat`] is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TraceDialect {
    Mooncake,
    MooncakeDelta,
    AgenticMooncake,
    AppliedComputeAgentic,
    Dynamo,
}

fn parse_trace_format(text: &str) -> Result<TraceDialect> {
    match text {
        "mooncake" => Ok(TraceDialect::Mooncake),
        "mooncake-delta" | "mooncake_delta" => Ok(TraceDialect::MooncakeDelta),
        "agentic_mooncake" | "agentic-mooncake" => Ok(TraceDialect::AgenticMooncake),
        "applied_compute_agentic" => Ok(TraceDialect::AppliedComputeAgentic),
        "dynamo" => Ok(TraceDialect::Dynamo),
        other => Err(flag_error(
            "--trace-format",
            format!(
                "trace_format must be 'mooncake', 'mooncake-delta', \
                 'agentic_mooncake'/'agentic-mooncake', 'applied_compute_agentic', or 'dynamo', \
                 got '{other}'"
            ),
        )),
    }
}

fn parse_router_mode(text: &str) -> Result<RouterMode> {
    match text {
        "round_robin" => Ok(RouterMode::RoundRobin),
        "kv_router" => Ok(RouterMode::KvRouter),
        other => Err(flag_error(
            "--router-mode",
            format!("router_mode must be either 'round_robin' or 'kv_router', got '{other}'"),
        )),
    }
}

/// `--replay-mode`, before the online speed is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ModeName {
    Offline,
    Online,
}

fn parse_replay_mode(text: &str) -> Result<ModeName> {
    match text {
        "offline" => Ok(ModeName::Offline),
        "online" => Ok(ModeName::Online),
        other => Err(flag_error(
            "--replay-mode",
            format!("replay_mode must be either 'offline' or 'online', got '{other}'"),
        )),
    }
}

/// How the reference names a replay in its worker checks.
fn replay_kind(closed_loop: bool) -> &'static str {
    if closed_loop {
        "concurrency replay"
    } else {
        "trace replay"
    }
}

/// Closed-loop concurrency, or open-loop timestamps sped up by `speedup` (asked only then).
fn arrival_mode(
    concurrency: Option<usize>,
    speedup: impl FnOnce() -> Result<f64>,
) -> Result<ArrivalMode> {
    Ok(match concurrency {
        Some(limit) => ArrivalMode::Concurrency { limit },
        None => ArrivalMode::Timestamps {
            speedup: speedup()?,
        },
    })
}

/// The reference takes these integers as unsigned: a negative value is refused before any of
/// its checks run.
fn non_negative(flag: &str, value: i64) -> Result<usize> {
    usize::try_from(value)
        .map_err(|_| flag_error(flag, format!("must be a non-negative integer, got {value}")))
}

/// Python's `value.strip().lower() in {"auto", "none", "null", ""}`: an AIC dtype that means
/// "the model default" does not count as an AIC setting.
fn meaningful_dtype(value: &Option<String>) -> bool {
    value.as_deref().is_some_and(|dtype| {
        let dtype = dtype.trim();
        !(dtype.is_empty() || ["auto", "none", "null"].contains(&dtype.to_lowercase().as_str()))
    })
}

/// The `--aic-*` model goes to the KV router's `aic` prefill-load estimate, and only there.
/// A GPU budget whose ceiling cannot hold even the smallest deployment would make the planner
/// ask for zero workers (the reference then panics in its router); refused before the run.
fn check_planner_budget(spec: &ReplaySpec, planner: &PlannerSpec) -> Result<()> {
    if planner.max_gpu_budget < 0 {
        return Ok(());
    }
    let min_workers = planner.min_endpoint.max(1) as i64;
    let generating = spec.deployment.generating().engine.gpus_per_worker() as i64;
    let (gpus, what) = match (&spec.deployment, planner.mode) {
        (Deployment::Disaggregated { prefill, .. }, PlannerMode::Disagg) => (
            generating + prefill.engine.gpus_per_worker() as i64,
            "one prefill and one decode worker",
        ),
        _ => (generating, "one worker"),
    };
    if planner.max_gpu_budget < min_workers * gpus {
        return Err(flag_error(
            "--planner-config",
            format!(
                "max_gpu_budget {} cannot hold {} of min_endpoint {} ({} GPUs for {what}): the \
                 planner would scale to zero workers",
                planner.max_gpu_budget,
                if min_workers == 1 {
                    "a deployment"
                } else {
                    "the workers"
                },
                planner.min_endpoint,
                gpus,
            ),
        ));
    }
    Ok(())
}

fn attach_router_aic(spec: &mut ReplaySpec, aic: Option<AicConfig>) -> Result<()> {
    use crate::config::router_config::PrefillLoadModel;
    let aic_load_model = spec
        .router_config
        .as_ref()
        .is_some_and(|config| config.router_prefill_load_model == PrefillLoadModel::Aic);
    let Some(aic) = aic else {
        if aic_load_model && spec.router_mode == RouterMode::KvRouter {
            return Err(flag_error(
                "--router-config",
                "router_prefill_load_model='aic' requires aic_perf_config",
            ));
        }
        return Ok(());
    };
    if spec.router_mode != RouterMode::KvRouter {
        return Err(usage("aic_perf_config requires router_mode='kv_router'"));
    }
    if !aic_load_model {
        return Err(usage(
            "aic_perf_config requires router_prefill_load_model='aic' in --router-config",
        )
        .with_api_message(
            "aic_perf_config requires router_prefill_load_model='aic' in router_config",
        ));
    }
    if let Some(config) = spec.router_config.as_mut() {
        config.aic = Some(aic);
    }
    Ok(())
}

/// The named choices among the options, each parsed once. A bad name is an error raised at
/// the point where the reference checks that option; checks that run earlier only ask whether
/// the choice is a given valid one.
struct Choices {
    replay_mode: Result<ModeName>,
    trace_format: Result<TraceDialect>,
    router_mode: Result<RouterMode>,
}

impl Choices {
    fn of(options: &ReplayOptions) -> Self {
        Self {
            replay_mode: parse_replay_mode(&options.replay_mode),
            trace_format: parse_trace_format(&options.trace_format),
            router_mode: parse_router_mode(&options.router_mode),
        }
    }

    fn is_online(&self) -> bool {
        self.replay_mode == Ok(ModeName::Online)
    }

    fn trace_format_is(&self, dialect: TraceDialect) -> bool {
        self.trace_format == Ok(dialect)
    }
}

/// The engine arguments given to the replay, parsed (step 10 of the front).
struct ParsedEngines {
    aggregated: Option<EngineArgs>,
    prefill: Option<EngineArgs>,
    decode: Option<EngineArgs>,
}

impl ReplayOptions {
    /// Validates every option (frontend.md §1.3–§1.5, workload.md §7.1) and builds the spec.
    /// Every failure is a usage error whose message names the flag.
    pub fn into_spec(self) -> Result<ReplaySpec> {
        let using_trace_file = !self.trace_files.is_empty();
        let choices = Choices::of(&self);
        self.check_front(&choices, using_trace_file)?;
        let engines = self.parse_engines()?;
        let router_config = self.parse_router_config()?;
        let router_aic = self.check_aic_flags()?;
        let planner = self.check_planner(&choices, using_trace_file, &engines)?;
        let mut spec = if using_trace_file {
            self.into_trace_spec(&choices, engines, router_config)?
        } else {
            self.into_synthetic_spec(&choices, engines, router_config)?
        };
        attach_router_aic(&mut spec, router_aic)?;
        if let Some(planner) = planner {
            check_planner_budget(&spec, &planner)?;
            spec.planner = Some(planner);
        }
        Ok(spec)
    }

    /// Whether the synthetic generator is asked for (any synthetic flag away from its default).
    fn using_synthetic(&self) -> bool {
        self.input_tokens.is_some()
            || self.output_tokens.is_some()
            || self.request_count.is_some()
            || self.turns_per_session != 1
            || self.shared_prefix_ratio != 0.0
            || self.num_prefix_groups != 0
            || self.inter_turn_delay_ms != 0.0
    }

    /// The replay front's checks of which inputs go together (frontend.md §1.3, steps 1–9).
    fn check_front(&self, choices: &Choices, using_trace_file: bool) -> Result<()> {
        let using_synthetic = self.using_synthetic();
        let dynamo = choices.trace_format_is(TraceDialect::Dynamo);
        if dynamo && !using_trace_file {
            return Err(
                usage("--trace-format=dynamo requires at least one trace file")
                    .with_api_message("trace_format='dynamo' requires at least one trace file"),
            );
        }
        if !dynamo && self.trace_files.len() > 1 {
            return Err(usage(format!(
                "--trace-format={} requires exactly one trace file",
                self.trace_format
            ))
            .with_api_message(format!(
                "trace_format='{}' requires exactly one trace file, got {}",
                self.trace_format,
                self.trace_files.len()
            )));
        }
        if using_trace_file == using_synthetic {
            return Err(usage(
                "provide either trace_file or all of --input-tokens/--output-tokens/--request-count",
            )
            .with_api_message(
                "provide either trace_files or all of input_tokens/output_tokens/request_count",
            ));
        }
        if using_synthetic {
            if self.input_tokens.is_none()
                || self.output_tokens.is_none()
                || self.request_count.is_none()
            {
                return Err(usage(
                    "synthetic replay requires --input-tokens, --output-tokens, and --request-count",
                )
                .with_api_message(
                    "synthetic replay requires input_tokens, output_tokens, and request_count",
                ));
            }
            let load_controllers = [
                self.replay_concurrency.is_some(),
                self.request_rate.is_some(),
                self.arrival_interval_ms.is_some(),
            ];
            if load_controllers.iter().filter(|&&given| given).count() != 1 {
                return Err(usage(
                    "synthetic replay requires exactly one of --replay-concurrency, \
                     --request-rate, or --arrival-interval-ms",
                )
                .with_api_message(SYNTHETIC_LOAD_CONTROL_API_MESSAGE));
            }
        } else if self.request_rate.is_some() || self.arrival_interval_ms.is_some() {
            return Err(usage(
                "--request-rate and --arrival-interval-ms only apply to synthetic replay",
            ));
        }
        self.check_length_spread_flags(using_synthetic)?;
        if using_trace_file
            && choices.trace_format_is(TraceDialect::AppliedComputeAgentic)
            && self.replay_concurrency.is_none()
        {
            return Err(usage(
                "--trace-format=applied_compute_agentic requires --replay-concurrency because \
                 the source traces do not include first-turn timestamps",
            )
            .with_api_message(
                "trace_format='applied_compute_agentic' requires replay_concurrency because the \
                 source traces do not include first-turn timestamps",
            ));
        }
        // The reference refuses per-request records with a planner only because its planner
        // adapter cannot return them; dynosim gives them (docs/differences.md).
        if self.report_jsonl.is_some() && !using_trace_file {
            return Err(usage(
                "--report-jsonl currently only supports trace-file replay",
            ));
        }
        // The reference takes a time cap only for an offline trace replay without a planner;
        // dynosim caps every run (docs/differences.md).
        if self.max_sim_time_seconds.is_some() && self.max_sim_time_ms.is_some() {
            return Err(usage(
                "--max-sim-time-seconds and max_sim_time_ms cannot both be set; give one cap",
            ));
        }
        Ok(())
    }

    /// Which length-spread flags go together: the stddevs and the range ratio exclude each
    /// other, all need a synthetic workload, and the seed needs one of them.
    fn check_length_spread_flags(&self, using_synthetic: bool) -> Result<()> {
        let stddev_flag = if self.input_tokens_stddev.is_some() {
            Some("--input-tokens-stddev")
        } else if self.output_tokens_stddev.is_some() {
            Some("--output-tokens-stddev")
        } else {
            None
        };
        let given: Vec<&str> = [
            stddev_flag,
            self.random_range_ratio.map(|_| "--random-range-ratio"),
            self.length_seed.map(|_| "--length-seed"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let Some(&first) = given.first() else {
            return Ok(());
        };
        if !using_synthetic {
            return Err(flag_error(
                first,
                "length spreads only apply to synthetic replay (--input-tokens)",
            ));
        }
        if let (Some(stddev_flag), Some(_)) = (stddev_flag, self.random_range_ratio) {
            let python = |flag: &str| flag.trim_start_matches("--").replace('-', "_");
            return Err(usage(format!(
                "{stddev_flag} and --random-range-ratio cannot both be set: give AIPerf's \
                 normal spread or vLLM's uniform range, not both"
            ))
            .with_api_message(format!(
                "{} and random_range_ratio cannot both be set: give AIPerf's normal spread or \
                 vLLM's uniform range, not both",
                python(stddev_flag)
            )));
        }
        if stddev_flag.is_none() && self.random_range_ratio.is_none() {
            return Err(flag_error(
                "--length-seed",
                "length_seed needs a length spread: --input-tokens-stddev, \
                 --output-tokens-stddev or --random-range-ratio",
            )
            .with_api_message(
                "length_seed needs a length spread: input_tokens_stddev, output_tokens_stddev \
                 or random_range_ratio",
            ));
        }
        Ok(())
    }

    fn parse_engines(&self) -> Result<ParsedEngines> {
        let parse = |flag: &str, text: &Option<String>| {
            text.as_deref()
                .map(|text| EngineArgs::from_json_or_file(flag, text))
                .transpose()
        };
        Ok(ParsedEngines {
            aggregated: parse("--extra-engine-args", &self.extra_engine_args)?,
            prefill: parse("--prefill-engine-args", &self.prefill_engine_args)?,
            decode: parse("--decode-engine-args", &self.decode_engine_args)?,
        })
    }

    fn parse_router_config(&self) -> Result<Option<RouterConfig>> {
        if let Some(policy_path) = &self.router_policy_config {
            // The front injects the policy path into the router config, which must then be an
            // object; the path replaces any `router_policy_config` the object names.
            let mut object = match &self.router_config {
                Some(value) => {
                    let (text, file) = super::json_fields::inline_or_file(value)
                        .map_err(|message| flag_error("--router-config", message))?;
                    let value: serde_json::Value =
                        serde_json::from_str(&text).map_err(|error| {
                            let message = format!("invalid JSON: {error}");
                            let message = super::json_fields::about_source(value, file, message);
                            flag_error("--router-config", message)
                        })?;
                    match value {
                        serde_json::Value::Object(object) => object,
                        _ => return Err(usage("--router-config must contain a JSON object")),
                    }
                }
                None => serde_json::Map::new(),
            };
            object.remove("router_policy_config");
            let text = serde_json::Value::Object(object).to_string();
            let mut config = RouterConfig::from_json("--router-config", &text)?;
            let source = if self.router_policy_config_from_env {
                "DYN_ROUTER_POLICY_CONFIG"
            } else {
                "--router-policy-config"
            };
            if policy_path.is_empty() {
                return Err(flag_error(source, "the path is empty"));
            }
            let file = super::router_policy::RouterPolicyConfig::from_path(policy_path)
                .map_err(|message| flag_error(source, message))?;
            config.policy_file = Some(file);
            config.raw.insert(
                "router_policy_config".into(),
                serde_json::Value::String(policy_path.clone()),
            );
            return Ok(Some(config));
        }
        self.router_config
            .as_deref()
            .map(|text| RouterConfig::from_json_or_file("--router-config", text))
            .transpose()
    }

    /// The AIC flags: any one set requires the three that select a model (step 11); then they
    /// become the AIC model of the KV router's prefill-load estimate.
    /// The AIC performance-model settings, checked (step 11): `None` when none is set. The
    /// Python front's `AicPerfConfig` checks its values here when it is built.
    pub fn aic_config(&self) -> Result<Option<AicConfig>> {
        self.check_aic_flags()
    }

    fn check_aic_flags(&self) -> Result<Option<AicConfig>> {
        let any_set = self.aic_backend.is_some()
            || self.aic_system.is_some()
            || self.aic_model_path.is_some()
            || self.aic_backend_version.is_some()
            || self.aic_tp_size.is_some()
            || self.aic_moe_tp_size.is_some()
            || self.aic_moe_ep_size.is_some()
            || self.aic_attention_dp_size.is_some()
            || meaningful_dtype(&self.aic_gemm_dtype)
            || meaningful_dtype(&self.aic_moe_dtype)
            || meaningful_dtype(&self.aic_fmha_dtype)
            || meaningful_dtype(&self.aic_kv_cache_dtype)
            || meaningful_dtype(&self.aic_comm_dtype)
            || self.aic_nextn.is_some()
            || self.aic_nextn_accept_rates.is_some();
        if !any_set {
            return Ok(None);
        }
        let missing = [
            ("--aic-backend", &self.aic_backend),
            ("--aic-system", &self.aic_system),
            ("--aic-model-path", &self.aic_model_path),
        ]
        .iter()
        .filter(|(_, value)| value.is_none())
        .map(|(flag, _)| *flag)
        .collect::<Vec<_>>();
        if !missing.is_empty() {
            let api_names = missing
                .iter()
                .filter_map(|flag| super::spelling::python_argument(flag))
                .collect::<Vec<_>>();
            return Err(usage(format!(
                "AIC replay modeling requires {}",
                missing.join(", ")
            ))
            .with_api_message(format!(
                "AIC replay modeling requires {}",
                api_names.join(", ")
            )));
        }
        let backend = self.aic_backend.clone().unwrap_or_default();
        if !crate::aic::BACKENDS.contains(&backend.as_str()) {
            return Err(flag_error(
                "--aic-backend",
                format!(
                    "unknown backend '{backend}'; aiconfigurator-core models: {}",
                    crate::aic::BACKENDS.join(", ")
                ),
            ));
        }
        let positive = |flag: &str, value: Option<i64>| -> Result<Option<usize>> {
            match value {
                None => Ok(None),
                Some(value) if value >= 1 => Ok(Some(value as usize)),
                Some(value) => Err(flag_error(flag, format!("must be at least 1, got {value}"))),
            }
        };
        let tp_size = positive("--aic-tp-size", self.aic_tp_size)?.unwrap_or(1);
        let moe_tp_size = positive("--aic-moe-tp-size", self.aic_moe_tp_size)?;
        let moe_ep_size = positive("--aic-moe-ep-size", self.aic_moe_ep_size)?;
        let attention_dp_size =
            positive("--aic-attention-dp-size", self.aic_attention_dp_size)?.unwrap_or(1);
        let nextn = positive("--aic-nextn", self.aic_nextn)?.unwrap_or(0);
        if nextn > 5 {
            return Err(flag_error(
                "--aic-nextn",
                format!("must be between 1 and 5, got {nextn}"),
            ));
        }
        if let Some(rates) = &self.aic_nextn_accept_rates {
            for rate in rates
                .split(',')
                .map(str::trim)
                .filter(|rate| !rate.is_empty())
            {
                match rate.parse::<f64>() {
                    Ok(value) if value.is_finite() && (0.0..=1.0).contains(&value) => {}
                    _ => {
                        return Err(flag_error(
                            "--aic-nextn-accept-rates",
                            format!("each rate must be a number in [0, 1], got '{rate}'"),
                        ))
                    }
                }
            }
        }
        let non_empty = |value: &Option<String>, flag: &str| -> Result<String> {
            match value.as_deref().map(str::trim) {
                Some(text) if !text.is_empty() => Ok(text.to_string()),
                _ => Err(flag_error(flag, "must not be empty")),
            }
        };
        Ok(Some(AicConfig {
            backend,
            system: non_empty(&self.aic_system, "--aic-system")?,
            backend_version: self
                .aic_backend_version
                .as_deref()
                .map(str::trim)
                .filter(|version| !version.is_empty())
                .map(str::to_string),
            model_path: non_empty(&self.aic_model_path, "--aic-model-path")?,
            tp_size,
            moe_tp_size,
            moe_ep_size,
            attention_dp_size,
            gemm_dtype: normalize_dtype(self.aic_gemm_dtype.as_deref()),
            moe_dtype: normalize_dtype(self.aic_moe_dtype.as_deref()),
            fmha_dtype: normalize_dtype(self.aic_fmha_dtype.as_deref()),
            kv_cache_dtype: normalize_dtype(self.aic_kv_cache_dtype.as_deref()),
            comm_dtype: normalize_dtype(self.aic_comm_dtype.as_deref()),
            nextn,
            calibration: None,
            tables: None,
        }))
    }

    /// Planner-in-the-loop (step 12): the front's constraints, then the config itself, then
    /// the engine arguments its mode needs.
    fn check_planner(
        &self,
        choices: &Choices,
        using_trace_file: bool,
        engines: &ParsedEngines,
    ) -> Result<Option<PlannerSpec>> {
        let Some(config) = &self.planner_config else {
            return Ok(None);
        };
        if choices.replay_mode != Ok(ModeName::Offline) {
            return Err(
                usage("--planner-config only supports --replay-mode=offline")
                    .with_api_message("planner_config replay only supports replay_mode='offline'"),
            );
        }
        if using_trace_file
            && !matches!(
                choices.trace_format,
                Ok(TraceDialect::Mooncake | TraceDialect::Dynamo)
            )
        {
            return Err(
                usage("--planner-config only supports --trace-format=mooncake or dynamo")
                    .with_api_message(
                        "planner_config replay only supports trace_format='mooncake' or 'dynamo'",
                    ),
            );
        }
        let planner = PlannerSpec::from_arg(config)?;
        planner.check_native_predictor()?;
        let engine_types = [&engines.aggregated, &engines.prefill, &engines.decode];
        if engine_types.iter().any(|args| {
            args.as_ref()
                .is_some_and(|a| a.engine_type == EngineType::Sglang)
        }) {
            return Err(flag_error(
                "--planner-config",
                "the planner does not support SGLang engines yet (use vllm or trtllm)",
            ));
        }
        if planner.mode == PlannerMode::Disagg
            && (engines.prefill.is_none() || engines.decode.is_none())
        {
            return Err(flag_error(
                "--planner-config",
                "disagg planner replay requires --prefill-engine-args and --decode-engine-args \
                 (the planner's mode defaults to disagg; set mode: agg for aggregated workers)",
            ));
        }
        Ok(Some(planner))
    }

    /// Which workers the engine arguments describe: true for disaggregated prefill/decode
    /// pools, after the reference's pairing rules.
    fn check_worker_topology(&self, choices: &Choices, engines: &ParsedEngines) -> Result<bool> {
        let has_disagg_args = engines.prefill.is_some() || engines.decode.is_some();
        if engines.aggregated.is_some() && has_disagg_args {
            return Err(flag_error(
                "--extra-engine-args",
                "extra_engine_args cannot be combined with prefill_engine_args/decode_engine_args",
            ));
        }
        match (&engines.prefill, &engines.decode) {
            (None, None) => {
                if self.num_prefill_workers != 1 || self.num_decode_workers != 1 {
                    let flag = if self.num_prefill_workers != 1 {
                        "--num-prefill-workers"
                    } else {
                        "--num-decode-workers"
                    };
                    return Err(flag_error(
                        flag,
                        "num_prefill_workers and num_decode_workers are only used for disagg \
                         replay; use num_workers for aggregated replay",
                    ));
                }
                Ok(false)
            }
            (Some(_), Some(_)) => {
                if self.num_workers != 1 {
                    return Err(flag_error(
                        "--num-workers",
                        "num_workers is only used for aggregated replay; use \
                         num_prefill_workers and num_decode_workers for disagg replay",
                    ));
                }
                if choices.is_online() {
                    return Err(flag_error(
                        "--replay-mode",
                        "disagg replay only supports replay_mode='offline'",
                    ));
                }
                Ok(true)
            }
            _ => Err(flag_error(
                if engines.prefill.is_some() {
                    "--prefill-engine-args"
                } else {
                    "--decode-engine-args"
                },
                "prefill_engine_args and decode_engine_args must be provided together",
            )),
        }
    }

    /// The cap on simulated time, in ms (both cap checks of the reference).
    fn max_sim_time_ms(&self) -> Result<Option<f64>> {
        let (flag, name, given, cap_ms) = match (self.max_sim_time_seconds, self.max_sim_time_ms) {
            (Some(seconds), _) => (
                "--max-sim-time-seconds",
                "max_sim_time_seconds",
                seconds,
                seconds * 1000.0,
            ),
            (None, Some(ms)) => ("max_sim_time_ms", "max_sim_time_ms", ms, ms),
            (None, None) => return Ok(None),
        };
        if !(cap_ms.is_finite() && cap_ms >= 0.0) {
            return Err(flag_error(
                flag,
                format!(
                    "{name} must be a finite, non-negative value, got {}",
                    show_f64(given)
                ),
            ));
        }
        Ok(Some(cap_ms))
    }

    fn sla(&self) -> Result<Sla> {
        for (flag, name, bound) in [
            ("--sla-ttft-ms", "sla_ttft_ms", self.sla_ttft_ms),
            ("--sla-itl-ms", "sla_itl_ms", self.sla_itl_ms),
            ("--sla-e2e-ms", "sla_e2e_ms", self.sla_e2e_ms),
        ] {
            if let Some(bound) = bound {
                if !(bound.is_finite() && bound >= 0.0) {
                    return Err(flag_error(
                        flag,
                        format!(
                            "{name} must be a finite, non-negative value, got {}",
                            show_f64(bound)
                        ),
                    ));
                }
            }
        }
        Ok(Sla {
            ttft_ms: self.sla_ttft_ms,
            itl_ms: self.sla_itl_ms,
            e2e_ms: self.sla_e2e_ms,
        })
    }

    /// `--replay-concurrency`, which the reference takes as a signed integer.
    fn concurrency_limit(&self) -> Result<Option<usize>> {
        match self.replay_concurrency {
            None => Ok(None),
            Some(limit) if limit >= 1 => Ok(Some(limit as usize)),
            Some(_) => Err(flag_error(
                "--replay-concurrency",
                "replay_concurrency must be at least 1",
            )),
        }
    }

    /// The checks on the aggregated workers: the KV router needs two targets, then the worker
    /// count, then the worker role.
    fn check_aggregated_workers(
        &self,
        router_mode: RouterMode,
        num_workers: usize,
        engine: &EngineArgs,
        closed_loop: bool,
        single_target_kv_refused: bool,
    ) -> Result<()> {
        if single_target_kv_refused
            && router_mode == RouterMode::KvRouter
            && num_workers.saturating_mul(engine.dp_size) <= 1
        {
            return Err(flag_error(
                "--router-mode",
                "offline replay only supports router_mode=kv_router with more than one \
                 worker/DP-rank target",
            ));
        }
        let mode = replay_kind(closed_loop);
        if num_workers == 0 {
            return Err(flag_error(
                "--num-workers",
                format!("{mode} requires num_workers >= 1"),
            ));
        }
        if engine.worker_type != WorkerType::Aggregated {
            return Err(flag_error(
                "--extra-engine-args",
                format!(
                    "{mode} only supports aggregated workers, got {:?}",
                    engine.worker_type
                ),
            ));
        }
        if engine.dp_size > MAX_ENGINE_RANKS {
            return Err(flag_error(
                "--extra-engine-args",
                format!(
                    "dp_size: {} is more than the {MAX_ENGINE_RANKS} engine ranks dynosim \
                     simulates",
                    engine.dp_size
                ),
            ));
        }
        let ranks = num_workers.saturating_mul(engine.dp_size);
        if ranks > MAX_ENGINE_RANKS {
            let detail = if engine.dp_size == 1 {
                format!("{num_workers} workers")
            } else {
                format!(
                    "{num_workers} workers of dp_size {} are {ranks} engine ranks,",
                    engine.dp_size
                )
            };
            return Err(flag_error(
                "--num-workers",
                format!("{detail} more than the {MAX_ENGINE_RANKS} engine ranks dynosim simulates"),
            ));
        }
        Ok(())
    }

    /// The checks on disaggregated pools (the reference's order), giving the two pools.
    fn check_disaggregated_workers(
        &self,
        engines: ParsedEngines,
        closed_loop: bool,
    ) -> Result<Deployment> {
        let mode = replay_kind(closed_loop);
        let (Some(prefill), Some(decode)) = (engines.prefill, engines.decode) else {
            unreachable!("the topology check pairs the two")
        };
        let num_prefill_workers = non_negative("--num-prefill-workers", self.num_prefill_workers)?;
        let num_decode_workers = non_negative("--num-decode-workers", self.num_decode_workers)?;
        if prefill.engine_type == EngineType::Trtllm || decode.engine_type == EngineType::Trtllm {
            return Err(flag_error(
                "--prefill-engine-args",
                format!("{mode} disaggregation does not support TRT-LLM"),
            ));
        }
        if prefill.engine_type != decode.engine_type {
            return Err(flag_error(
                "--decode-engine-args",
                format!(
                    "{mode} disaggregation requires matching prefill/decode engine_type, got \
                     {:?} and {:?}",
                    prefill.engine_type, decode.engine_type
                ),
            ));
        }
        if num_prefill_workers == 0 {
            return Err(flag_error(
                "--num-prefill-workers",
                format!("{mode} requires num_prefill_workers >= 1"),
            ));
        }
        if num_decode_workers == 0 {
            return Err(flag_error(
                "--num-decode-workers",
                format!("{mode} requires num_decode_workers >= 1"),
            ));
        }
        for (flag, count) in [
            ("--num-prefill-workers", num_prefill_workers),
            ("--num-decode-workers", num_decode_workers),
        ] {
            if count > MAX_ENGINE_RANKS {
                return Err(flag_error(
                    flag,
                    format!(
                        "{count} workers, more than the {MAX_ENGINE_RANKS} engine ranks dynosim \
                         simulates per pool"
                    ),
                ));
            }
        }
        if prefill.worker_type != WorkerType::Prefill {
            return Err(flag_error(
                "--prefill-engine-args",
                format!(
                    "{mode} requires prefill_engine_args.worker_type=prefill, got {:?}",
                    prefill.worker_type
                ),
            ));
        }
        if decode.worker_type != WorkerType::Decode {
            return Err(flag_error(
                "--decode-engine-args",
                format!(
                    "{mode} requires decode_engine_args.worker_type=decode, got {:?}",
                    decode.worker_type
                ),
            ));
        }
        if prefill.dp_size != 1 || decode.dp_size != 1 {
            return Err(flag_error(
                if prefill.dp_size != 1 {
                    "--prefill-engine-args"
                } else {
                    "--decode-engine-args"
                },
                format!(
                    "offline disaggregated replay does not support attention DP; prefill/decode \
                     dp_size must both be 1 (got prefill_dp_size={}, decode_dp_size={})",
                    prefill.dp_size, decode.dp_size
                ),
            ));
        }
        if prefill.block_size != decode.block_size {
            return Err(flag_error(
                "--decode-engine-args",
                format!(
                    "{mode} requires matching prefill/decode block_size, got {} and {}",
                    prefill.block_size, decode.block_size
                ),
            ));
        }
        // The reference fails at the first handoff; the transfer time would be infinite.
        if prefill.kv_transfer_bandwidth == Some(0.0) {
            return Err(flag_error(
                "--prefill-engine-args",
                "invalid handoff transfer bandwidth 0 (kv_transfer_bandwidth must be positive)",
            ));
        }
        Ok(Deployment::Disaggregated {
            prefill: PoolSpec {
                engine: prefill,
                workers: num_prefill_workers,
            },
            decode: PoolSpec {
                engine: decode,
                workers: num_decode_workers,
            },
        })
    }

    /// The workers both builders share: disaggregated pools after their checks, or the
    /// aggregated workers after theirs.
    fn deployment(
        &self,
        choices: &Choices,
        engines: ParsedEngines,
        disaggregated: bool,
        router_mode: RouterMode,
        num_workers: usize,
        closed_loop: bool,
    ) -> Result<Deployment> {
        if disaggregated {
            return self.check_disaggregated_workers(engines, closed_loop);
        }
        let engine = engines.aggregated.unwrap_or_default();
        // Online, the reference's live KV router also serves a single target; so does the
        // multi-worker loop a planner always runs (its workers come and go).
        let single_target_kv_refused = !choices.is_online() && self.planner_config.is_none();
        self.check_aggregated_workers(
            router_mode,
            num_workers,
            &engine,
            closed_loop,
            single_target_kv_refused,
        )?;
        Ok(Deployment::Aggregated(PoolSpec {
            engine,
            workers: num_workers,
        }))
    }

    /// The replay mode, at the point where the reference checks it, with the online speed
    /// (dynosim's own flag, refused offline).
    fn replay_mode(&self, choices: &Choices) -> Result<ReplayMode> {
        match (choices.replay_mode.clone()?, self.online_speed) {
            (ModeName::Offline, None) => Ok(ReplayMode::Offline),
            (ModeName::Offline, Some(_)) => Err(flag_error(
                "--online-speed",
                "online_speed only applies to replay_mode='online'",
            )),
            (ModeName::Online, speed) => {
                let speed = speed.unwrap_or(1.0);
                if !(speed.is_finite() && speed > 0.0) {
                    return Err(flag_error(
                        "--online-speed",
                        format!(
                            "online_speed must be a finite positive number, got {}",
                            show_f64(speed)
                        ),
                    ));
                }
                Ok(ReplayMode::Online { speed })
            }
        }
    }

    /// The reference's limits of online replay that the mode check itself does not cover
    /// (disaggregation and the time cap are refused where those options are checked).
    fn check_online(&self, mode: ReplayMode, engine: &EngineArgs) -> Result<()> {
        if !matches!(mode, ReplayMode::Online { .. }) {
            return Ok(());
        }
        if engine.dp_size != 1 {
            return Err(flag_error(
                "--extra-engine-args",
                format!(
                    "online replay only supports data_parallel_size=1, got {}",
                    engine.dp_size
                ),
            ));
        }
        Ok(())
    }

    fn check_speedup(&self, name: &str) -> Result<f64> {
        let ratio = self.arrival_speedup_ratio;
        if ratio.is_finite() && ratio > 0.0 {
            Ok(ratio)
        } else {
            Err(flag_error(
                "--arrival-speedup-ratio",
                format!(
                    "{name} must be a finite positive number, got {}",
                    show_f64(ratio)
                ),
            ))
        }
    }

    fn into_trace_spec(
        self,
        choices: &Choices,
        engines: ParsedEngines,
        router_config: Option<RouterConfig>,
    ) -> Result<ReplaySpec> {
        let num_workers = non_negative("--num-workers", self.num_workers)?;
        non_negative("--num-prefill-workers", self.num_prefill_workers)?;
        non_negative("--num-decode-workers", self.num_decode_workers)?;
        let trace_block_size = self
            .trace_block_size
            .map(|size| non_negative("--trace-block-size", size))
            .transpose()?;
        non_negative("--trace-num-prefix-groups", self.trace_num_prefix_groups)?;

        let disaggregated = self.check_worker_topology(choices, &engines)?;
        let router_mode = choices.router_mode.clone()?;
        let dialect = choices.trace_format.clone()?;
        if dialect != TraceDialect::Dynamo && self.trace_files.len() != 1 {
            return Err(flag_error(
                "--trace-format",
                format!(
                    "trace_format='{}' requires exactly one trace file, got {}",
                    self.trace_format,
                    self.trace_files.len()
                ),
            ));
        }
        let max_sim_time_ms = self.max_sim_time_ms()?;
        let sla = self.sla()?;
        let concurrency = self.concurrency_limit()?;
        let replay_mode = self.replay_mode(choices)?;
        let deployment = self.deployment(
            choices,
            engines,
            disaggregated,
            router_mode,
            num_workers,
            concurrency.is_some(),
        )?;
        self.check_online(replay_mode, &deployment.generating().engine)?;
        if dialect == TraceDialect::MooncakeDelta && replay_mode != ReplayMode::Offline {
            return Err(flag_error(
                "--trace-format",
                "mooncake-delta trace format is not supported for online replay",
            ));
        }
        if deployment.is_disaggregated() {
            let unsupported = match dialect {
                TraceDialect::AgenticMooncake => Some("agentic_mooncake"),
                TraceDialect::MooncakeDelta => Some("mooncake-delta"),
                _ => None,
            };
            if let Some(name) = unsupported {
                return Err(flag_error(
                    "--trace-format",
                    format!("{name} trace format is not supported for disaggregated replay"),
                ));
            }
        }

        let block_size = match trace_block_size {
            None => DEFAULT_TRACE_BLOCK_SIZE,
            Some(0) => {
                return Err(flag_error(
                    "--trace-block-size",
                    "trace_block_size must be greater than 0",
                ))
            }
            Some(size) => u32::try_from(size).map_err(|_| {
                flag_error(
                    "--trace-block-size",
                    format!("trace_block_size is too large, got {size}"),
                )
            })?,
        };
        if dialect == TraceDialect::AgenticMooncake && concurrency.is_some() {
            return Err(flag_error(
                "--replay-concurrency",
                "agentic_mooncake trace format is not supported with replay_concurrency",
            ));
        }
        let trace_num_prefix_groups =
            non_negative("--trace-num-prefix-groups", self.trace_num_prefix_groups)?;
        let format = match dialect {
            TraceDialect::Mooncake => TraceFormat::Mooncake,
            TraceDialect::MooncakeDelta => TraceFormat::MooncakeDelta,
            TraceDialect::AgenticMooncake => TraceFormat::AgenticMooncake {
                expected_block_size: trace_block_size.map(|_| block_size),
            },
            TraceDialect::AppliedComputeAgentic => {
                // Only this format uses the two flags; the others ignore them, as the
                // reference does (even an out-of-range ratio).
                if !(0.0..=1.0).contains(&self.trace_shared_prefix_ratio) {
                    return Err(flag_error(
                        "--trace-shared-prefix-ratio",
                        format!(
                            "shared_prefix_ratio must be between 0.0 and 1.0, got {}",
                            show_f64(self.trace_shared_prefix_ratio)
                        ),
                    ));
                }
                TraceFormat::AppliedComputeAgentic {
                    shared_prefix_ratio: self.trace_shared_prefix_ratio,
                    num_prefix_groups: trace_num_prefix_groups,
                }
            }
            TraceDialect::Dynamo => TraceFormat::Dynamo {
                expected_block_size: trace_block_size.map(|_| block_size),
            },
        };
        // The reference checks the speed-up ratio only when it uses it: open-loop arrivals.
        // (It does so after reading the trace, so a broken trace file is reported first there.)
        let arrivals = arrival_mode(concurrency, || self.check_speedup("ratio"))?;
        let router_config = self.finish_router_config(router_mode, router_config)?;
        let capture_requests = self.report_jsonl.is_some();
        let workload = WorkloadSpec::Trace(TraceSpec {
            files: self.trace_files,
            format,
            block_size,
        });
        Ok(ReplaySpec {
            workload,
            deployment,
            router_mode,
            router_config,
            arrivals,
            replay_mode,
            max_sim_time_ms,
            sla,
            capture_requests,
            planner: None,
        })
    }

    fn into_synthetic_spec(
        self,
        choices: &Choices,
        engines: ParsedEngines,
        router_config: Option<RouterConfig>,
    ) -> Result<ReplaySpec> {
        // The front guarantees all three are present.
        let input_tokens = non_negative("--input-tokens", self.input_tokens.unwrap_or(0))?;
        let output_tokens = non_negative("--output-tokens", self.output_tokens.unwrap_or(0))?;
        let request_count = non_negative("--request-count", self.request_count.unwrap_or(0))?;
        let num_workers = non_negative("--num-workers", self.num_workers)?;
        non_negative("--num-prefill-workers", self.num_prefill_workers)?;
        non_negative("--num-decode-workers", self.num_decode_workers)?;
        let arrival_seed = non_negative("--arrival-seed", self.arrival_seed)? as u64;
        let turns_per_session = non_negative("--turns-per-session", self.turns_per_session)?;
        let num_prefix_groups = non_negative("--num-prefix-groups", self.num_prefix_groups)?;

        let sla = self.sla()?;
        let disaggregated = self.check_worker_topology(choices, &engines)?;
        let router_mode = choices.router_mode.clone()?;
        let concurrency = self.concurrency_limit()?;
        let arrival_process = match (concurrency, self.request_rate, self.arrival_interval_ms) {
            (Some(_), _, _) => None,
            (None, Some(rate), _) => {
                if !(rate.is_finite() && rate > 0.0) {
                    return Err(flag_error(
                        "--request-rate",
                        format!(
                            "request_rate must be a finite positive number, got {}",
                            show_f64(rate)
                        ),
                    ));
                }
                if 1000.0 / rate > MAX_VIRTUAL_TIME_MS {
                    return Err(flag_error(
                        "--request-rate",
                        format!(
                            "request_rate {} means {} ms between arrivals on average, beyond \
                             the simulator's horizon of {MAX_VIRTUAL_TIME_MS:e} ms (about 31.7 \
                             years)",
                            compact_f64(rate),
                            compact_f64(1000.0 / rate)
                        ),
                    ));
                }
                Some(ArrivalProcess::Poisson {
                    rate,
                    seed: arrival_seed,
                })
            }
            (None, None, Some(interval_ms)) => {
                if !(interval_ms.is_finite() && interval_ms >= 0.0) {
                    return Err(flag_error(
                        "--arrival-interval-ms",
                        format!(
                            "arrival_interval_ms must be a finite non-negative number, got {}",
                            show_f64(interval_ms)
                        ),
                    ));
                }
                if interval_ms > MAX_VIRTUAL_TIME_MS {
                    return Err(flag_error(
                        "--arrival-interval-ms",
                        format!(
                            "arrival_interval_ms {} is beyond the simulator's horizon of \
                             {MAX_VIRTUAL_TIME_MS:e} ms (about 31.7 years)",
                            compact_f64(interval_ms)
                        ),
                    ));
                }
                Some(ArrivalProcess::Interval { interval_ms })
            }
            // The front requires exactly one load controller.
            (None, None, None) => {
                return Err(usage(
                    "synthetic replay requires exactly one of --replay-concurrency, \
                     --request-rate, or --arrival-interval-ms",
                )
                .with_api_message(SYNTHETIC_LOAD_CONTROL_API_MESSAGE))
            }
        };
        for (flag, name, value) in [
            ("--input-tokens", "input_tokens", input_tokens),
            ("--output-tokens", "output_tokens", output_tokens),
            ("--request-count", "request_count", request_count),
        ] {
            if value == 0 {
                return Err(flag_error(flag, format!("{name} must be at least 1")));
            }
        }

        // Sessions, shared prefixes or think time select the session generator, which checks
        // its own settings (and applies the speed-up while building arrivals); otherwise the
        // simple generator ignores them (`--turns-per-session 0` then means 1).
        let uses_sessions = turns_per_session > 1
            || self.shared_prefix_ratio > 0.0
            || num_prefix_groups > 0
            || self.inter_turn_delay_ms > 0.0;
        let mut speedup = None;
        if uses_sessions {
            if turns_per_session == 0 {
                return Err(flag_error(
                    "--turns-per-session",
                    "turns_per_session must be at least 1",
                ));
            }
            if !(self.inter_turn_delay_ms.is_finite() && self.inter_turn_delay_ms >= 0.0) {
                return Err(flag_error(
                    "--inter-turn-delay-ms",
                    format!(
                        "inter_turn_delay_ms must be a finite non-negative number, got {}",
                        show_f64(self.inter_turn_delay_ms)
                    ),
                ));
            }
            if !(0.0..=1.0).contains(&self.shared_prefix_ratio) {
                return Err(flag_error(
                    "--shared-prefix-ratio",
                    format!(
                        "shared_prefix_ratio must be between 0.0 and 1.0, got {}",
                        show_f64(self.shared_prefix_ratio)
                    ),
                ));
            }
            if concurrency.is_none() {
                speedup = Some(self.check_speedup("ratio")?);
            }
        }

        let replay_mode = self.replay_mode(choices)?;
        let deployment = self.deployment(
            choices,
            engines,
            disaggregated,
            router_mode,
            num_workers,
            concurrency.is_some(),
        )?;
        self.check_online(replay_mode, &deployment.generating().engine)?;
        let arrivals = arrival_mode(concurrency, || match speedup {
            Some(speedup) => Ok(speedup),
            None => self.check_speedup("arrival_speedup_ratio"),
        })?;
        let generating = &deployment.generating().engine;
        let engine_block_size = u32::try_from(generating.block_size).map_err(|_| {
            flag_error(
                "--extra-engine-args",
                format!("block_size is too large, got {}", generating.block_size),
            )
        })?;
        // Every synthetic prompt has the same length: one that no engine can ever hold would
        // have every request rejected (or, on SGLang, block the queue forever), after building
        // prompts of that size. Refused before they exist.
        let first_engine = &deployment.entry().engine;
        let kv_tokens = first_engine
            .num_gpu_blocks
            .saturating_mul(first_engine.block_size);
        if input_tokens > kv_tokens {
            return Err(flag_error(
                "--input-tokens",
                format!(
                    "input_tokens {input_tokens} can never be admitted: the KV cache holds \
                     {kv_tokens} tokens (num_gpu_blocks {} x block_size {})",
                    first_engine.num_gpu_blocks, first_engine.block_size
                ),
            ));
        }
        let lengths = self.length_spread(kv_tokens)?;
        let router_config = self.finish_router_config(router_mode, router_config)?;

        let (shared_prefix_ratio, inter_turn_delay_ms) = if uses_sessions {
            (self.shared_prefix_ratio, self.inter_turn_delay_ms)
        } else {
            // The simple generator ignores these (they may be negative or NaN here).
            (0.0, 0.0)
        };
        Ok(ReplaySpec {
            workload: WorkloadSpec::Synthetic(SyntheticSpec {
                input_tokens,
                output_tokens,
                request_count,
                arrival_process,
                turns_per_session: turns_per_session.max(1),
                shared_prefix_ratio,
                num_prefix_groups,
                inter_turn_delay_ms,
                engine_block_size,
                lengths,
            }),
            deployment,
            router_mode,
            router_config,
            arrivals,
            replay_mode,
            max_sim_time_ms: self.max_sim_time_ms()?,
            sla,
            capture_requests: false,
            planner: None,
        })
    }
}

impl ReplayOptions {
    /// The synthetic length distribution (the front has checked which flags go together).
    /// `kv_tokens` is the first engine's KV cache in tokens: the most a drawn prompt may be.
    fn length_spread(&self, kv_tokens: usize) -> Result<LengthSpread> {
        let seed = match self.length_seed {
            Some(seed) => non_negative("--length-seed", seed)? as u64,
            None => DEFAULT_LENGTH_SEED,
        };
        if let Some(range_ratio) = self.random_range_ratio {
            if !(0.0..=1.0).contains(&range_ratio) {
                return Err(flag_error(
                    "--random-range-ratio",
                    format!(
                        "random_range_ratio must be between 0.0 and 1.0, got {}",
                        show_f64(range_ratio)
                    ),
                ));
            }
            return Ok(LengthSpread::Uniform { range_ratio, seed });
        }
        if self.input_tokens_stddev.is_none() && self.output_tokens_stddev.is_none() {
            return Ok(LengthSpread::Fixed);
        }
        let stddev = |flag: &str, name: &str, value: Option<f64>| {
            let value = value.unwrap_or(0.0);
            if value.is_finite() && value >= 0.0 {
                Ok(value)
            } else {
                Err(flag_error(
                    flag,
                    format!(
                        "{name} must be a finite non-negative number, got {}",
                        show_f64(value)
                    ),
                ))
            }
        };
        let stddevs = [
            stddev(
                "--input-tokens-stddev",
                "input_tokens_stddev",
                self.input_tokens_stddev,
            )?,
            stddev(
                "--output-tokens-stddev",
                "output_tokens_stddev",
                self.output_tokens_stddev,
            )?,
        ];
        // Draws outside [0, KV cache] are drawn again: with a spread wider than the cache most
        // draws would be, and the spread asked for could not be what the run gets.
        if stddevs[0] > kv_tokens as f64 {
            return Err(flag_error(
                "--input-tokens-stddev",
                format!(
                    "input_tokens_stddev {} is wider than the KV cache ({kv_tokens} tokens): \
                     most prompts drawn could never be admitted",
                    show_f64(stddevs[0])
                ),
            ));
        }
        Ok(LengthSpread::Normal {
            input_stddev: stddevs[0],
            output_stddev: stddevs[1],
            max_input_tokens: kv_tokens,
            seed,
        })
    }

    /// The last router checks: the model name, the router seed, and for the KV router a
    /// config (defaults when none was given) carrying the seed and the model name.
    fn finish_router_config(
        &self,
        router_mode: RouterMode,
        router_config: Option<RouterConfig>,
    ) -> Result<Option<RouterConfig>> {
        if self.model_name.as_deref() == Some("") {
            return Err(flag_error("--model-name", "model_name must be non-empty"));
        }
        let seed = non_negative("--router-seed", self.router_seed)? as u64;
        if router_mode != RouterMode::KvRouter {
            return Ok(router_config);
        }
        let mut config = router_config.unwrap_or_default();
        config.router_seed = seed;
        config.policy_model_name = self.model_name.clone();
        Ok(Some(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid one-file trace replay.
    fn trace() -> ReplayOptions {
        ReplayOptions {
            trace_files: vec![PathBuf::from("t.jsonl")],
            ..ReplayOptions::default()
        }
    }

    /// A valid synthetic replay at a fixed interval.
    fn synthetic() -> ReplayOptions {
        ReplayOptions {
            input_tokens: Some(100),
            output_tokens: Some(10),
            request_count: Some(5),
            arrival_interval_ms: Some(2.0),
            ..ReplayOptions::default()
        }
    }

    fn spec(options: ReplayOptions) -> ReplaySpec {
        options.into_spec().unwrap_or_else(|e| panic!("{e}"))
    }

    fn assert_error(options: ReplayOptions, expected: &str) {
        let error = options.clone().into_spec().expect_err(expected);
        assert_eq!(error.kind(), crate::error::ErrorKind::Usage);
        assert_eq!(error.message(), expected, "options: {options:?}");
    }

    fn two_files() -> Vec<PathBuf> {
        vec![PathBuf::from("a.jsonl"), PathBuf::from("b.jsonl")]
    }

    // ---- front checks (frontend.md §1.3), in order ----

    #[test]
    fn dynamo_format_needs_a_file() {
        assert_error(
            ReplayOptions {
                trace_format: "dynamo".into(),
                ..synthetic()
            },
            "--trace-format=dynamo requires at least one trace file",
        );
    }

    #[test]
    fn other_formats_take_one_file() {
        assert_error(
            ReplayOptions {
                trace_files: two_files(),
                ..trace()
            },
            "--trace-format=mooncake requires exactly one trace file",
        );
    }

    #[test]
    fn trace_or_synthetic_but_not_both() {
        let expected =
            "provide either trace_file or all of --input-tokens/--output-tokens/--request-count";
        assert_error(ReplayOptions::default(), expected);
        assert_error(
            ReplayOptions {
                turns_per_session: 2,
                ..trace()
            },
            expected,
        );
        assert_error(
            ReplayOptions {
                input_tokens: Some(5),
                ..trace()
            },
            expected,
        );
        assert_error(
            ReplayOptions {
                inter_turn_delay_ms: -1.0,
                ..trace()
            },
            expected,
        );
    }

    #[test]
    fn synthetic_needs_all_three_sizes() {
        assert_error(
            ReplayOptions {
                request_count: None,
                ..synthetic()
            },
            "synthetic replay requires --input-tokens, --output-tokens, and --request-count",
        );
        assert_error(
            ReplayOptions {
                shared_prefix_ratio: 0.5,
                ..ReplayOptions::default()
            },
            "synthetic replay requires --input-tokens, --output-tokens, and --request-count",
        );
    }

    #[test]
    fn synthetic_needs_exactly_one_load_controller() {
        let expected = "synthetic replay requires exactly one of --replay-concurrency, \
                        --request-rate, or --arrival-interval-ms";
        assert_error(
            ReplayOptions {
                arrival_interval_ms: None,
                ..synthetic()
            },
            expected,
        );
        assert_error(
            ReplayOptions {
                request_rate: Some(1.0),
                ..synthetic()
            },
            expected,
        );
        assert_error(
            ReplayOptions {
                replay_concurrency: Some(0),
                ..synthetic()
            },
            expected,
        );
    }

    #[test]
    fn rate_and_interval_are_synthetic_only() {
        let expected = "--request-rate and --arrival-interval-ms only apply to synthetic replay";
        assert_error(
            ReplayOptions {
                request_rate: Some(1.0),
                ..trace()
            },
            expected,
        );
        assert_error(
            ReplayOptions {
                arrival_interval_ms: Some(1.0),
                ..trace()
            },
            expected,
        );
    }

    #[test]
    fn applied_compute_agentic_needs_concurrency() {
        assert_error(
            ReplayOptions {
                trace_format: "applied_compute_agentic".into(),
                ..trace()
            },
            "--trace-format=applied_compute_agentic requires --replay-concurrency because the \
             source traces do not include first-turn timestamps",
        );
    }

    #[test]
    fn report_jsonl_rules() {
        // Unlike the reference, records are given with a planner.
        let planned = spec(ReplayOptions {
            report_jsonl: Some("r.jsonl".into()),
            planner_config: Some(AGG_LOAD.into()),
            ..trace()
        });
        assert!(planned.capture_requests && planned.planner.is_some());
        assert_error(
            ReplayOptions {
                report_jsonl: Some("r.jsonl".into()),
                ..synthetic()
            },
            "--report-jsonl currently only supports trace-file replay",
        );
    }

    #[test]
    fn max_sim_time_rules() {
        // A time cap goes with every kind of run: a planner, a synthetic workload, online.
        let planner = r#"{"mode":"agg","optimization_target":"load","decode_scale_up_kv_rate":60,"decode_scale_down_kv_rate":20}"#;
        for options in [
            ReplayOptions {
                planner_config: Some(planner.into()),
                ..trace()
            },
            synthetic(),
            ReplayOptions {
                replay_mode: "online".into(),
                ..trace()
            },
        ] {
            let capped = spec(ReplayOptions {
                max_sim_time_seconds: Some(1.0),
                ..options.clone()
            });
            assert_eq!(capped.max_sim_time_ms, Some(1000.0));
            let capped = spec(ReplayOptions {
                max_sim_time_ms: Some(3.0),
                ..options
            });
            assert_eq!(capped.max_sim_time_ms, Some(3.0));
        }
        assert_error(
            ReplayOptions {
                max_sim_time_seconds: Some(1.0),
                max_sim_time_ms: Some(5.0),
                ..trace()
            },
            "--max-sim-time-seconds and max_sim_time_ms cannot both be set; give one cap",
        );
        assert_error(
            ReplayOptions {
                max_sim_time_seconds: Some(-1.0),
                ..trace()
            },
            "--max-sim-time-seconds: max_sim_time_seconds must be a finite, non-negative value, \
             got -1",
        );
        assert_error(
            ReplayOptions {
                max_sim_time_seconds: Some(f64::NAN),
                ..trace()
            },
            "--max-sim-time-seconds: max_sim_time_seconds must be a finite, non-negative value, \
             got NaN",
        );
        assert_error(
            ReplayOptions {
                max_sim_time_ms: Some(f64::INFINITY),
                ..trace()
            },
            "max_sim_time_ms: max_sim_time_ms must be a finite, non-negative value, got inf",
        );
        assert_eq!(
            spec(ReplayOptions {
                max_sim_time_seconds: Some(2.5),
                ..trace()
            })
            .max_sim_time_ms,
            Some(2500.0)
        );
        assert_eq!(
            spec(ReplayOptions {
                max_sim_time_ms: Some(7.0),
                ..trace()
            })
            .max_sim_time_ms,
            Some(7.0)
        );
        assert_eq!(
            spec(ReplayOptions {
                max_sim_time_seconds: Some(0.0),
                ..trace()
            })
            .max_sim_time_ms,
            Some(0.0)
        );
    }

    #[test]
    fn json_options_are_parsed_with_their_flag() {
        assert_error(
            ReplayOptions {
                extra_engine_args: Some(r#"{"dp_size":0}"#.into()),
                ..trace()
            },
            "--extra-engine-args: dp_size: must be at least 1, got 0",
        );
        assert_error(
            ReplayOptions {
                decode_engine_args: Some("[]".into()),
                ..trace()
            },
            "--decode-engine-args: engine-args must be a JSON object",
        );
        assert_error(
            ReplayOptions {
                router_config: Some(r#"{"router_temperature":-1}"#.into()),
                ..trace()
            },
            "--router-config: router_temperature must be greater than or equal to 0, got -1",
        );
        // JSON options are read before the worker checks that follow.
        assert_error(
            ReplayOptions {
                extra_engine_args: Some(r#"{"engine_type":"bogus"}"#.into()),
                num_workers: 0,
                ..trace()
            },
            "--extra-engine-args: Invalid engine_type 'bogus'. Must be 'vllm', 'sglang', or 'trtllm'.",
        );
        // Round robin accepts and keeps a router config.
        let spec = spec(ReplayOptions {
            router_config: Some(r#"{"router_temperature":0.5}"#.into()),
            ..trace()
        });
        assert_eq!(spec.router_config.unwrap().router_temperature, 0.5);
    }

    #[test]
    fn router_policy_files_are_read_at_parse_time() {
        assert_error(
            ReplayOptions {
                router_policy_config: Some("p.yaml".into()),
                router_config: Some("[1]".into()),
                ..trace()
            },
            "--router-config must contain a JSON object",
        );
        assert_error(
            ReplayOptions {
                router_policy_config: Some("p.yaml".into()),
                ..trace()
            },
            "--router-policy-config: failed to read router policy config p.yaml: No such file \
             or directory (os error 2)",
        );
        let path = std::env::temp_dir().join(format!("dynosim-opts-{}.yaml", std::process::id()));
        std::fs::write(
            &path,
            "models:\n  m:\n    default_policy_family: f\n    uncached_isl_buckets: \
             [{min_tokens: 0, bucket: b}]\n    policy_classes: [{name: c, policy_family: f, \
             cache_bucket: b, quantum: 1, prefill_busy_threshold: 5}]\n",
        )
        .unwrap();
        let with_file = |router_config: Option<&str>| ReplayOptions {
            router_policy_config: Some(path.to_str().unwrap().into()),
            router_config: router_config.map(Into::into),
            router_mode: "kv_router".into(),
            model_name: Some("m".into()),
            router_seed: 9,
            num_workers: 2,
            ..trace()
        };
        // The flag's path replaces one named inside the JSON (which is never read).
        let spec = spec(with_file(Some(
            r#"{"router_policy_config":"/nonexistent.yaml","router_temperature":0.5}"#,
        )));
        let config = spec.router_config.unwrap();
        assert_eq!(config.router_temperature, 0.5);
        assert_eq!(config.router_seed, 9);
        let profile = config.policy_profile();
        assert_eq!(profile.class(0).prefill_busy_threshold, Some(5));
        assert_error(
            with_file(Some(r#"{"router_temperature":-1}"#)),
            "--router-config: router_temperature must be greater than or equal to 0, got -1",
        );
        std::fs::write(&path, "models: {}\n").unwrap();
        assert_error(
            with_file(None),
            "--router-policy-config: invalid router policy config: router policy config must \
             define a root profile or at least one model profile",
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn aic_flags() {
        assert_error(
            ReplayOptions {
                aic_backend: Some("vllm".into()),
                ..trace()
            },
            "AIC replay modeling requires --aic-system, --aic-model-path",
        );
        assert_error(
            ReplayOptions {
                aic_tp_size: Some(2),
                ..trace()
            },
            "AIC replay modeling requires --aic-backend, --aic-system, --aic-model-path",
        );
        // A dtype meaning "model default" is not an AIC setting.
        spec(ReplayOptions {
            aic_gemm_dtype: Some(" Auto ".into()),
            aic_comm_dtype: Some("none".into()),
            ..trace()
        });
        let aic = || ReplayOptions {
            aic_backend: Some("vllm".into()),
            aic_system: Some("h200_sxm".into()),
            aic_model_path: Some("Qwen/Qwen3-32B".into()),
            ..trace()
        };
        assert_error(aic(), "aic_perf_config requires router_mode='kv_router'");
        let kv = |options: ReplayOptions| ReplayOptions {
            router_mode: "kv_router".into(),
            num_workers: 2,
            ..options
        };
        assert_error(
            kv(aic()),
            "aic_perf_config requires router_prefill_load_model='aic' in --router-config",
        );
        let with_model = |options: ReplayOptions| ReplayOptions {
            router_config: Some(r#"{"router_prefill_load_model":"aic"}"#.into()),
            ..kv(options)
        };
        let config = spec(with_model(ReplayOptions {
            aic_tp_size: Some(2),
            aic_kv_cache_dtype: Some("fp8".into()),
            aic_gemm_dtype: Some("auto".into()),
            ..aic()
        }))
        .router_config
        .unwrap()
        .aic
        .unwrap();
        assert_eq!(config.backend, "vllm");
        assert_eq!(config.model_path, "Qwen/Qwen3-32B");
        assert_eq!(config.tp_size, 2);
        assert_eq!(config.kv_cache_dtype.as_deref(), Some("fp8"));
        assert_eq!(config.gemm_dtype, None);
        for (options, expected) in [
            (
                ReplayOptions {
                    aic_backend: Some("tensorrt".into()),
                    ..aic()
                },
                "--aic-backend: unknown backend 'tensorrt'; aiconfigurator-core models: vllm, \
                 sglang, trtllm",
            ),
            (
                ReplayOptions {
                    aic_tp_size: Some(0),
                    ..aic()
                },
                "--aic-tp-size: must be at least 1, got 0",
            ),
            (
                ReplayOptions {
                    aic_nextn: Some(6),
                    ..aic()
                },
                "--aic-nextn: must be between 1 and 5, got 6",
            ),
            (
                ReplayOptions {
                    aic_nextn_accept_rates: Some("0.5,x".into()),
                    ..aic()
                },
                "--aic-nextn-accept-rates: each rate must be a number in [0, 1], got 'x'",
            ),
            (
                ReplayOptions {
                    aic_model_path: Some(" ".into()),
                    ..aic()
                },
                "--aic-model-path: must not be empty",
            ),
        ] {
            assert_error(with_model(options), expected);
        }
    }

    #[test]
    fn planner_flags() {
        assert_error(
            ReplayOptions {
                planner_config: Some("{}".into()),
                replay_mode: "online".into(),
                ..trace()
            },
            "--planner-config only supports --replay-mode=offline",
        );
        assert_error(
            ReplayOptions {
                planner_config: Some("{}".into()),
                trace_format: "mooncake-delta".into(),
                ..trace()
            },
            "--planner-config only supports --trace-format=mooncake or dynamo",
        );
        // The default mode is disagg, which needs both pools' engine arguments.
        assert_error(
            ReplayOptions {
                planner_config: Some("{}".into()),
                ..synthetic()
            },
            "--planner-config: disagg planner replay requires --prefill-engine-args and \
             --decode-engine-args (the planner's mode defaults to disagg; set mode: agg for \
             aggregated workers)",
        );
        let planned = spec(ReplayOptions {
            planner_config: Some(AGG_LOAD.into()),
            ..synthetic()
        });
        assert_eq!(planned.planner.unwrap().scale_interval_s, 5.0);
        // The KV router learns of joining and leaving workers.
        let planned = spec(ReplayOptions {
            planner_config: Some(AGG_LOAD.into()),
            router_mode: "kv_router".into(),
            ..synthetic()
        });
        assert!(planned.planner.is_some());
        // A ceiling below one worker's GPUs would scale to zero workers.
        assert_error(
            ReplayOptions {
                planner_config: Some(
                    r#"{"mode":"agg","optimization_target":"load","decode_scale_up_kv_rate":60,
                        "decode_scale_down_kv_rate":20,"max_gpu_budget":1}"#
                        .into(),
                ),
                extra_engine_args: Some(r#"{"aic_tp_size":2}"#.into()),
                ..synthetic()
            },
            "--planner-config: max_gpu_budget 1 cannot hold a deployment of min_endpoint 1 (2 \
             GPUs for one worker): the planner would scale to zero workers",
        );
    }

    const AGG_LOAD: &str = r#"{"mode":"agg","optimization_target":"load",
        "decode_scale_up_kv_rate":60,"decode_scale_down_kv_rate":20}"#;

    // ---- unsigned integers ----

    #[test]
    fn negative_integers_are_refused() {
        let cases = [
            (
                ReplayOptions {
                    num_workers: -1,
                    ..trace()
                },
                "--num-workers: must be a non-negative integer, got -1",
            ),
            (
                ReplayOptions {
                    num_prefill_workers: -2,
                    ..trace()
                },
                "--num-prefill-workers: must be a non-negative integer, got -2",
            ),
            (
                ReplayOptions {
                    trace_block_size: Some(-1),
                    ..trace()
                },
                "--trace-block-size: must be a non-negative integer, got -1",
            ),
            (
                ReplayOptions {
                    trace_num_prefix_groups: -1,
                    ..trace()
                },
                "--trace-num-prefix-groups: must be a non-negative integer, got -1",
            ),
            (
                ReplayOptions {
                    request_count: Some(-1),
                    ..synthetic()
                },
                "--request-count: must be a non-negative integer, got -1",
            ),
            (
                ReplayOptions {
                    input_tokens: Some(-3),
                    ..synthetic()
                },
                "--input-tokens: must be a non-negative integer, got -3",
            ),
            (
                ReplayOptions {
                    arrival_seed: -1,
                    ..synthetic()
                },
                "--arrival-seed: must be a non-negative integer, got -1",
            ),
            (
                ReplayOptions {
                    turns_per_session: -1,
                    ..synthetic()
                },
                "--turns-per-session: must be a non-negative integer, got -1",
            ),
            (
                ReplayOptions {
                    num_prefix_groups: -1,
                    ..synthetic()
                },
                "--num-prefix-groups: must be a non-negative integer, got -1",
            ),
            // Refused before the replay core's own checks.
            (
                ReplayOptions {
                    num_workers: -1,
                    sla_ttft_ms: Some(-1.0),
                    ..trace()
                },
                "--num-workers: must be a non-negative integer, got -1",
            ),
        ];
        for (options, expected) in cases {
            assert_error(options, expected);
        }
        // Synthetic-only integers are not passed on (nor checked) in trace replay.
        spec(ReplayOptions {
            arrival_seed: -1,
            ..trace()
        });
        // replay_concurrency is signed in the reference: -1 is a range error.
        assert_error(
            ReplayOptions {
                replay_concurrency: Some(-1),
                num_workers: 0,
                ..trace()
            },
            "--replay-concurrency: replay_concurrency must be at least 1",
        );
    }

    // ---- replay core, trace mode ----

    #[test]
    fn worker_topology_rules() {
        assert_error(
            ReplayOptions {
                extra_engine_args: Some("{}".into()),
                prefill_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
                ..trace()
            },
            "--extra-engine-args: extra_engine_args cannot be combined with \
             prefill_engine_args/decode_engine_args",
        );
        assert_error(
            ReplayOptions { prefill_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()), ..trace() },
            "--prefill-engine-args: prefill_engine_args and decode_engine_args must be provided together",
        );
        let disagg = ReplayOptions {
            prefill_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
            decode_engine_args: Some(r#"{"worker_type":"decode"}"#.into()),
            ..trace()
        };
        assert_error(
            ReplayOptions {
                num_workers: 7,
                ..disagg.clone()
            },
            "--num-workers: num_workers is only used for aggregated replay; use \
             num_prefill_workers and num_decode_workers for disagg replay",
        );
        let spec = disagg
            .clone()
            .into_spec()
            .expect("a valid disaggregated replay");
        let Deployment::Disaggregated { prefill, decode } = spec.deployment else {
            panic!("disaggregated")
        };
        assert_eq!(prefill.engine.worker_type, WorkerType::Prefill);
        assert_eq!(decode.engine.worker_type, WorkerType::Decode);
        assert_eq!((prefill.workers, decode.workers), (1, 1));
        let with = |prefill: &str, decode: &str| ReplayOptions {
            prefill_engine_args: Some(prefill.into()),
            decode_engine_args: Some(decode.into()),
            ..trace()
        };
        for (options, message) in [
            (
                with(r#"{"worker_type":"prefill","engine_type":"trtllm"}"#, r#"{"worker_type":"decode","engine_type":"sglang"}"#),
                "--prefill-engine-args: trace replay disaggregation does not support TRT-LLM",
            ),
            (
                with(r#"{"worker_type":"prefill","engine_type":"sglang"}"#, r#"{"worker_type":"decode"}"#),
                "--decode-engine-args: trace replay disaggregation requires matching prefill/decode \
                 engine_type, got Sglang and Vllm",
            ),
            (
                ReplayOptions { num_prefill_workers: 0, ..disagg.clone() },
                "--num-prefill-workers: trace replay requires num_prefill_workers >= 1",
            ),
            (
                ReplayOptions { num_decode_workers: 0, ..disagg.clone() },
                "--num-decode-workers: trace replay requires num_decode_workers >= 1",
            ),
            (
                with("{}", r#"{"worker_type":"decode"}"#),
                "--prefill-engine-args: trace replay requires prefill_engine_args.worker_type=prefill, \
                 got Aggregated",
            ),
            (
                with(r#"{"worker_type":"decode"}"#, r#"{"worker_type":"prefill"}"#),
                "--prefill-engine-args: trace replay requires prefill_engine_args.worker_type=prefill, \
                 got Decode",
            ),
            (
                ReplayOptions {
                    replay_concurrency: Some(2),
                    ..with(r#"{"worker_type":"prefill"}"#, r#"{"worker_type":"prefill"}"#)
                },
                "--decode-engine-args: concurrency replay requires decode_engine_args.worker_type=decode, \
                 got Prefill",
            ),
            (
                with(r#"{"worker_type":"prefill","dp_size":2}"#, r#"{"worker_type":"decode"}"#),
                "--prefill-engine-args: offline disaggregated replay does not support attention DP; \
                 prefill/decode dp_size must both be 1 (got prefill_dp_size=2, decode_dp_size=1)",
            ),
            (
                with(r#"{"worker_type":"prefill","block_size":16}"#, r#"{"worker_type":"decode","block_size":32}"#),
                "--decode-engine-args: trace replay requires matching prefill/decode block_size, got 16 \
                 and 32",
            ),
            (
                with(r#"{"worker_type":"prefill","kv_transfer_bandwidth":0}"#, r#"{"worker_type":"decode"}"#),
                "--prefill-engine-args: invalid handoff transfer bandwidth 0 (kv_transfer_bandwidth \
                 must be positive)",
            ),
            (
                ReplayOptions { trace_format: "mooncake-delta".into(), ..disagg.clone() },
                "--trace-format: mooncake-delta trace format is not supported for disaggregated replay",
            ),
            (
                ReplayOptions { trace_format: "agentic_mooncake".into(), ..disagg.clone() },
                "--trace-format: agentic_mooncake trace format is not supported for disaggregated \
                 replay",
            ),
            (
                ReplayOptions { replay_mode: "online".into(), ..disagg.clone() },
                "--replay-mode: disagg replay only supports replay_mode='offline'",
            ),
        ] {
            assert_error(options, message);
        }
        // Synthetic workloads run disaggregated too; the decode pool may hold one worker.
        let generated = ReplayOptions {
            trace_files: Vec::new(),
            input_tokens: Some(100),
            output_tokens: Some(10),
            request_count: Some(5),
            request_rate: Some(1.0),
            num_prefill_workers: 3,
            router_mode: "kv_router".into(),
            ..disagg.clone()
        };
        let spec = generated
            .into_spec()
            .expect("a valid synthetic disaggregated replay");
        match spec.deployment {
            Deployment::Disaggregated { prefill, .. } => assert_eq!(prefill.workers, 3),
            other => panic!("{other:?}"),
        }
        assert_error(
            ReplayOptions {
                num_prefill_workers: 3,
                num_decode_workers: 3,
                sla_ttft_ms: Some(-1.0),
                ..trace()
            },
            "--num-prefill-workers: num_prefill_workers and num_decode_workers are only used for \
             disagg replay; use num_workers for aggregated replay",
        );
        assert_error(
            ReplayOptions {
                num_decode_workers: 2,
                ..synthetic()
            },
            "--num-decode-workers: num_prefill_workers and num_decode_workers are only used for \
             disagg replay; use num_workers for aggregated replay",
        );
    }

    #[test]
    fn mode_names() {
        assert_error(
            ReplayOptions {
                router_mode: "bogus".into(),
                num_workers: 0,
                ..trace()
            },
            "--router-mode: router_mode must be either 'round_robin' or 'kv_router', got 'bogus'",
        );
        assert_error(
            ReplayOptions {
                replay_mode: "bogus".into(),
                num_workers: 0,
                ..trace()
            },
            "--replay-mode: replay_mode must be either 'offline' or 'online', got 'bogus'",
        );
        assert_eq!(spec(trace()).replay_mode, ReplayMode::Offline);
    }

    #[test]
    fn online_rules() {
        let online = || ReplayOptions {
            replay_mode: "online".into(),
            ..trace()
        };
        assert_eq!(
            spec(online()).replay_mode,
            ReplayMode::Online { speed: 1.0 }
        );
        assert_eq!(
            spec(ReplayOptions {
                online_speed: Some(10.0),
                ..online()
            })
            .replay_mode,
            ReplayMode::Online { speed: 10.0 }
        );
        // The live KV router also serves one worker.
        assert_eq!(
            spec(ReplayOptions {
                router_mode: "kv_router".into(),
                ..online()
            })
            .router_mode,
            RouterMode::KvRouter
        );
        for speed in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let options = ReplayOptions {
                online_speed: Some(speed),
                ..online()
            };
            let message = options.into_spec().unwrap_err().message().to_string();
            assert!(
                message.starts_with("--online-speed: online_speed must be a finite positive"),
                "{message}"
            );
        }
        let offline_speed = ReplayOptions {
            online_speed: Some(2.0),
            ..trace()
        };
        let refused = [
            (
                offline_speed,
                "--online-speed: online_speed only applies to replay_mode='online'",
            ),
            (
                ReplayOptions {
                    extra_engine_args: Some(r#"{"dp_size":2}"#.into()),
                    ..online()
                },
                "--extra-engine-args: online replay only supports data_parallel_size=1, got 2",
            ),
            (
                ReplayOptions {
                    trace_format: "mooncake-delta".into(),
                    ..online()
                },
                "--trace-format: mooncake-delta trace format is not supported for online replay",
            ),
            (
                ReplayOptions {
                    prefill_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
                    decode_engine_args: Some(r#"{"worker_type":"decode"}"#.into()),
                    ..online()
                },
                "--replay-mode: disagg replay only supports replay_mode='offline'",
            ),
        ];
        for (options, message) in refused {
            assert_error(options, message);
        }
        assert_eq!(
            synthetic_online_mode(),
            ReplayMode::Online { speed: 1.0 },
            "synthetic workloads replay live too"
        );
    }

    fn synthetic_online_mode() -> ReplayMode {
        spec(ReplayOptions {
            replay_mode: "online".into(),
            ..synthetic()
        })
        .replay_mode
    }

    #[test]
    fn replay_mode_is_read_after_the_concurrency_check() {
        // The replay core reads the mode after the SLA and concurrency checks.
        assert_error(
            ReplayOptions {
                replay_mode: "bogus".into(),
                replay_concurrency: Some(0),
                ..trace()
            },
            "--replay-concurrency: replay_concurrency must be at least 1",
        );
    }

    #[test]
    fn trace_formats() {
        assert_error(
            ReplayOptions { trace_format: "bogus".into(), num_workers: 0, ..trace() },
            "--trace-format: trace_format must be 'mooncake', 'mooncake-delta', \
             'agentic_mooncake'/'agentic-mooncake', 'applied_compute_agentic', or 'dynamo', got 'bogus'",
        );
        let format_of = |options: ReplayOptions| match options.into_spec().unwrap().workload {
            WorkloadSpec::Trace(trace) => trace.format,
            WorkloadSpec::Synthetic(_) => panic!("a trace replay"),
        };
        for (name, format) in [
            ("mooncake-delta", TraceFormat::MooncakeDelta),
            ("mooncake_delta", TraceFormat::MooncakeDelta),
            (
                "agentic_mooncake",
                TraceFormat::AgenticMooncake {
                    expected_block_size: None,
                },
            ),
            (
                "agentic-mooncake",
                TraceFormat::AgenticMooncake {
                    expected_block_size: None,
                },
            ),
            (
                "dynamo",
                TraceFormat::Dynamo {
                    expected_block_size: None,
                },
            ),
        ] {
            let options = ReplayOptions {
                trace_format: name.into(),
                // Ignored by every format but applied_compute_agentic, even out of range.
                trace_shared_prefix_ratio: 5.0,
                ..trace()
            };
            assert_eq!(format_of(options), format, "{name}");
        }
        assert_eq!(
            format_of(ReplayOptions {
                trace_format: "dynamo".into(),
                trace_block_size: Some(16),
                ..trace()
            }),
            TraceFormat::Dynamo {
                expected_block_size: Some(16)
            }
        );
        assert_eq!(
            format_of(ReplayOptions {
                trace_format: "applied_compute_agentic".into(),
                replay_concurrency: Some(2),
                trace_shared_prefix_ratio: 0.25,
                trace_num_prefix_groups: 3,
                ..trace()
            }),
            TraceFormat::AppliedComputeAgentic {
                shared_prefix_ratio: 0.25,
                num_prefix_groups: 3
            }
        );
        assert_error(
            ReplayOptions {
                trace_format: "applied_compute_agentic".into(),
                replay_concurrency: Some(2),
                trace_shared_prefix_ratio: 1.5,
                ..trace()
            },
            "--trace-shared-prefix-ratio: shared_prefix_ratio must be between 0.0 and 1.0, got 1.5",
        );
        assert_error(
            ReplayOptions {
                trace_format: "applied_compute_agentic".into(),
                ..trace()
            },
            "--trace-format=applied_compute_agentic requires --replay-concurrency because \
             the source traces do not include first-turn timestamps",
        );
        assert_error(
            ReplayOptions {
                trace_format: "agentic_mooncake".into(),
                replay_concurrency: Some(2),
                ..trace()
            },
            "--replay-concurrency: agentic_mooncake trace format is not supported with replay_concurrency",
        );
    }

    #[test]
    fn sla_bounds() {
        assert_error(
            ReplayOptions {
                sla_e2e_ms: Some(-5.0),
                ..trace()
            },
            "--sla-e2e-ms: sla_e2e_ms must be a finite, non-negative value, got -5",
        );
        assert_error(
            ReplayOptions {
                sla_ttft_ms: Some(f64::NAN),
                ..trace()
            },
            "--sla-ttft-ms: sla_ttft_ms must be a finite, non-negative value, got NaN",
        );
        assert_error(
            ReplayOptions {
                sla_itl_ms: Some(f64::INFINITY),
                sla_e2e_ms: Some(-1.0),
                ..trace()
            },
            "--sla-itl-ms: sla_itl_ms must be a finite, non-negative value, got inf",
        );
        // The cap on simulated time is checked first.
        assert_error(
            ReplayOptions {
                sla_ttft_ms: Some(-1.0),
                max_sim_time_seconds: Some(-1.0),
                ..trace()
            },
            "--max-sim-time-seconds: max_sim_time_seconds must be a finite, non-negative value, \
             got -1",
        );
        let sla = spec(ReplayOptions {
            sla_ttft_ms: Some(0.0),
            sla_itl_ms: Some(5.0),
            sla_e2e_ms: Some(9.0),
            ..trace()
        })
        .sla;
        assert_eq!(
            sla,
            Sla {
                ttft_ms: Some(0.0),
                itl_ms: Some(5.0),
                e2e_ms: Some(9.0)
            }
        );
    }

    #[test]
    fn concurrency_must_be_positive() {
        assert_error(
            ReplayOptions {
                replay_concurrency: Some(0),
                num_workers: 0,
                ..trace()
            },
            "--replay-concurrency: replay_concurrency must be at least 1",
        );
        assert_error(
            ReplayOptions {
                replay_concurrency: Some(0),
                router_mode: "kv_router".into(),
                ..trace()
            },
            "--replay-concurrency: replay_concurrency must be at least 1",
        );
    }

    #[test]
    fn kv_router() {
        assert_error(
            ReplayOptions {
                router_mode: "kv_router".into(),
                num_workers: 0,
                ..trace()
            },
            "--router-mode: offline replay only supports router_mode=kv_router with more than one \
             worker/DP-rank target",
        );
        assert_error(
            ReplayOptions {
                router_mode: "kv_router".into(),
                extra_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
                ..trace()
            },
            "--router-mode: offline replay only supports router_mode=kv_router with more than one \
             worker/DP-rank target",
        );
        // Two workers, or two ranks of one worker, are enough; the router gets a default
        // config carrying the seed.
        let config = spec(ReplayOptions {
            router_mode: "kv_router".into(),
            num_workers: 2,
            router_seed: 5,
            ..trace()
        })
        .router_config
        .unwrap();
        assert_eq!(
            config,
            RouterConfig {
                router_seed: 5,
                ..RouterConfig::default()
            }
        );
        spec(ReplayOptions {
            router_mode: "kv_router".into(),
            extra_engine_args: Some(r#"{"dp_size":2}"#.into()),
            ..trace()
        });
        assert_error(
            ReplayOptions {
                router_mode: "kv_router".into(),
                num_workers: 2,
                router_seed: -1,
                ..trace()
            },
            "--router-seed: must be a non-negative integer, got -1",
        );
        assert_error(
            ReplayOptions {
                router_mode: "kv_router".into(),
                num_workers: 2,
                router_config: Some(r#"{"router_prefill_load_model":"aic"}"#.into()),
                ..trace()
            },
            "--router-config: router_prefill_load_model='aic' requires aic_perf_config",
        );
        // An empty model name is refused in every mode.
        assert_error(
            ReplayOptions {
                model_name: Some(String::new()),
                ..trace()
            },
            "--model-name: model_name must be non-empty",
        );
        // Checks that follow the target rule still come first.
        assert_error(
            ReplayOptions {
                router_mode: "kv_router".into(),
                num_workers: 2,
                trace_block_size: Some(0),
                ..trace()
            },
            "--trace-block-size: trace_block_size must be greater than 0",
        );
    }

    #[test]
    fn worker_count_and_role() {
        assert_error(
            ReplayOptions {
                num_workers: 0,
                arrival_speedup_ratio: 0.0,
                ..trace()
            },
            "--num-workers: trace replay requires num_workers >= 1",
        );
        assert_error(
            ReplayOptions {
                num_workers: 0,
                replay_concurrency: Some(2),
                ..trace()
            },
            "--num-workers: concurrency replay requires num_workers >= 1",
        );
        assert_error(
            ReplayOptions {
                extra_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
                trace_block_size: Some(0),
                ..trace()
            },
            "--extra-engine-args: trace replay only supports aggregated workers, got Prefill",
        );
        assert_error(
            ReplayOptions {
                extra_engine_args: Some(r#"{"is_decode":true}"#.into()),
                replay_concurrency: Some(1),
                ..trace()
            },
            "--extra-engine-args: concurrency replay only supports aggregated workers, got Decode",
        );
    }

    #[test]
    fn trace_block_size_must_be_positive() {
        assert_error(
            ReplayOptions {
                trace_block_size: Some(0),
                arrival_speedup_ratio: 0.0,
                ..trace()
            },
            "--trace-block-size: trace_block_size must be greater than 0",
        );
        assert_error(
            ReplayOptions {
                trace_block_size: Some(1 << 40),
                ..trace()
            },
            "--trace-block-size: trace_block_size is too large, got 1099511627776",
        );
    }

    #[test]
    fn speedup_ratio_for_open_loop_traces() {
        for (ratio, shown) in [
            (0.0, "0"),
            (-1.0, "-1"),
            (f64::INFINITY, "inf"),
            (f64::NAN, "NaN"),
            (-0.0, "-0"),
        ] {
            assert_error(
                ReplayOptions {
                    arrival_speedup_ratio: ratio,
                    ..trace()
                },
                &format!(
                    "--arrival-speedup-ratio: ratio must be a finite positive number, got {shown}"
                ),
            );
            // Closed-loop replay neither uses nor checks it (as in the reference).
            let spec = spec(ReplayOptions {
                arrival_speedup_ratio: ratio,
                replay_concurrency: Some(2),
                ..trace()
            });
            assert_eq!(spec.arrivals, ArrivalMode::Concurrency { limit: 2 });
        }
    }

    #[test]
    fn trace_spec() {
        let spec = spec(ReplayOptions {
            num_workers: 3,
            arrival_speedup_ratio: 2.0,
            report_jsonl: Some("out.jsonl".into()),
            extra_engine_args: Some(r#"{"engine_type":"trtllm"}"#.into()),
            model_name: Some("m".into()),
            trace_shared_prefix_ratio: 1.5,
            ..trace()
        });
        match &spec.workload {
            WorkloadSpec::Trace(trace) => {
                assert_eq!(trace.files, vec![PathBuf::from("t.jsonl")]);
                assert_eq!(trace.format, TraceFormat::Mooncake);
                assert_eq!(trace.block_size, 512);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(spec.deployment.generating().workers, 3);
        assert_eq!(spec.deployment.generating().engine.block_size, 32);
        assert!(!spec.deployment.is_disaggregated());
        assert_eq!(spec.router_mode, RouterMode::RoundRobin);
        assert!(spec.router_config.is_none());
        assert_eq!(spec.arrivals, ArrivalMode::Timestamps { speedup: 2.0 });
        assert_eq!(spec.max_sim_time_ms, None);
        assert!(!spec.sla.is_set());
        assert!(spec.capture_requests);

        let spec = spec_with_block_size(Some(64));
        match spec.workload {
            WorkloadSpec::Trace(trace) => assert_eq!(trace.block_size, 64),
            other => panic!("{other:?}"),
        }
        assert_eq!(spec.deployment.generating().engine, EngineArgs::default());
        assert!(!spec.capture_requests);
    }

    fn spec_with_block_size(size: Option<i64>) -> ReplaySpec {
        spec(ReplayOptions {
            trace_block_size: size,
            ..trace()
        })
    }

    // ---- replay core, synthetic mode ----

    #[test]
    fn synthetic_sizes_must_be_positive() {
        for (options, expected) in [
            (
                ReplayOptions {
                    input_tokens: Some(0),
                    ..synthetic()
                },
                "--input-tokens: input_tokens must be at least 1",
            ),
            (
                ReplayOptions {
                    output_tokens: Some(0),
                    ..synthetic()
                },
                "--output-tokens: output_tokens must be at least 1",
            ),
            (
                ReplayOptions {
                    request_count: Some(0),
                    ..synthetic()
                },
                "--request-count: request_count must be at least 1",
            ),
            (
                ReplayOptions {
                    input_tokens: Some(0),
                    output_tokens: Some(0),
                    ..synthetic()
                },
                "--input-tokens: input_tokens must be at least 1",
            ),
        ] {
            assert_error(options, expected);
        }
    }

    #[test]
    fn synthetic_arrival_processes() {
        let poisson = |rate| ReplayOptions {
            arrival_interval_ms: None,
            request_rate: Some(rate),
            ..synthetic()
        };
        for (rate, shown) in [
            (0.0, "0"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "inf"),
            (-2.0, "-2"),
        ] {
            assert_error(
                poisson(rate),
                &format!(
                    "--request-rate: request_rate must be a finite positive number, got {shown}"
                ),
            );
        }
        // The arrival process is checked before the request sizes.
        assert_error(
            ReplayOptions {
                input_tokens: Some(0),
                ..poisson(0.0)
            },
            "--request-rate: request_rate must be a finite positive number, got 0",
        );
        for (interval, shown) in [(-1.0, "-1"), (f64::INFINITY, "inf")] {
            assert_error(
                ReplayOptions { arrival_interval_ms: Some(interval), num_workers: 0, ..synthetic() },
                &format!(
                    "--arrival-interval-ms: arrival_interval_ms must be a finite non-negative number, got {shown}"
                ),
            );
        }
        let spec = spec(ReplayOptions {
            arrival_seed: 7,
            ..poisson(10.0)
        });
        let WorkloadSpec::Synthetic(generated) = spec.workload else {
            panic!()
        };
        assert_eq!(
            generated.arrival_process,
            Some(ArrivalProcess::Poisson {
                rate: 10.0,
                seed: 7
            })
        );
        let spec = spec_of(ReplayOptions {
            arrival_interval_ms: Some(0.0),
            ..synthetic()
        });
        assert_eq!(
            spec.arrival_process,
            Some(ArrivalProcess::Interval { interval_ms: 0.0 })
        );
    }

    #[test]
    fn length_spreads_reach_the_spec() {
        assert_eq!(spec_of(synthetic()).lengths, LengthSpread::Fixed);
        assert_eq!(
            spec_of(ReplayOptions {
                random_range_ratio: Some(0.8),
                ..synthetic()
            })
            .lengths,
            LengthSpread::Uniform {
                range_ratio: 0.8,
                seed: DEFAULT_LENGTH_SEED
            }
        );
        // The KV cache bounds drawn prompts: 16384 blocks of 64 tokens by default.
        assert_eq!(
            spec_of(ReplayOptions {
                output_tokens_stddev: Some(3.0),
                length_seed: Some(9),
                ..synthetic()
            })
            .lengths,
            LengthSpread::Normal {
                input_stddev: 0.0,
                output_stddev: 3.0,
                max_input_tokens: 16384 * 64,
                seed: 9
            }
        );
    }

    #[test]
    fn length_spread_flags_are_checked() {
        let both = ReplayOptions {
            output_tokens_stddev: Some(3.0),
            random_range_ratio: Some(0.8),
            ..synthetic()
        };
        assert_error(
            both.clone(),
            "--output-tokens-stddev and --random-range-ratio cannot both be set: give AIPerf's \
             normal spread or vLLM's uniform range, not both",
        );
        assert_eq!(
            crate::config::spelling::python_message(&both.into_spec().unwrap_err()),
            "output_tokens_stddev and random_range_ratio cannot both be set: give AIPerf's \
             normal spread or vLLM's uniform range, not both"
        );
        assert_error(
            ReplayOptions {
                random_range_ratio: Some(0.8),
                ..trace()
            },
            "--random-range-ratio: length spreads only apply to synthetic replay (--input-tokens)",
        );
        assert_error(
            ReplayOptions {
                input_tokens_stddev: Some(1.0),
                ..trace()
            },
            "--input-tokens-stddev: length spreads only apply to synthetic replay \
             (--input-tokens)",
        );
        let seed_alone = ReplayOptions {
            length_seed: Some(1),
            ..synthetic()
        };
        assert_error(
            seed_alone.clone(),
            "--length-seed: length_seed needs a length spread: --input-tokens-stddev, \
             --output-tokens-stddev or --random-range-ratio",
        );
        assert_eq!(
            crate::config::spelling::python_message(&seed_alone.into_spec().unwrap_err()),
            "length_seed needs a length spread: input_tokens_stddev, output_tokens_stddev or \
             random_range_ratio"
        );
        for (ratio, shown) in [(1.5, "1.5"), (-0.1, "-0.1"), (f64::NAN, "NaN")] {
            assert_error(
                ReplayOptions {
                    random_range_ratio: Some(ratio),
                    ..synthetic()
                },
                &format!(
                    "--random-range-ratio: random_range_ratio must be between 0.0 and 1.0, got \
                     {shown}"
                ),
            );
        }
        for (stddev, shown) in [(-1.0, "-1"), (f64::INFINITY, "inf"), (f64::NAN, "NaN")] {
            assert_error(
                ReplayOptions {
                    input_tokens_stddev: Some(stddev),
                    ..synthetic()
                },
                &format!(
                    "--input-tokens-stddev: input_tokens_stddev must be a finite non-negative \
                     number, got {shown}"
                ),
            );
            assert_error(
                ReplayOptions {
                    output_tokens_stddev: Some(stddev),
                    ..synthetic()
                },
                &format!(
                    "--output-tokens-stddev: output_tokens_stddev must be a finite \
                     non-negative number, got {shown}"
                ),
            );
        }
        assert_error(
            ReplayOptions {
                input_tokens_stddev: Some(100.0),
                extra_engine_args: Some(r#"{"num_gpu_blocks":4,"block_size":16}"#.into()),
                input_tokens: Some(20),
                ..synthetic()
            },
            "--input-tokens-stddev: input_tokens_stddev 100 is wider than the KV cache (64 \
             tokens): most prompts drawn could never be admitted",
        );
        assert_error(
            ReplayOptions {
                random_range_ratio: Some(0.5),
                length_seed: Some(-1),
                ..synthetic()
            },
            "--length-seed: must be a non-negative integer, got -1",
        );
    }

    fn spec_of(options: ReplayOptions) -> SyntheticSpec {
        match spec(options).workload {
            WorkloadSpec::Synthetic(synthetic) => synthetic,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn synthetic_session_settings() {
        // Checked only when they select the session generator (any of them above its default).
        assert_error(
            ReplayOptions {
                shared_prefix_ratio: 1.5,
                ..synthetic()
            },
            "--shared-prefix-ratio: shared_prefix_ratio must be between 0.0 and 1.0, got 1.5",
        );
        assert_error(
            ReplayOptions {
                turns_per_session: 3,
                shared_prefix_ratio: f64::NAN,
                ..synthetic()
            },
            "--shared-prefix-ratio: shared_prefix_ratio must be between 0.0 and 1.0, got NaN",
        );
        assert_error(
            ReplayOptions { turns_per_session: 2, inter_turn_delay_ms: -1.0, shared_prefix_ratio: 1.5, ..synthetic() },
            "--inter-turn-delay-ms: inter_turn_delay_ms must be a finite non-negative number, got -1",
        );
        assert_error(
            ReplayOptions { inter_turn_delay_ms: f64::INFINITY, ..synthetic() },
            "--inter-turn-delay-ms: inter_turn_delay_ms must be a finite non-negative number, got inf",
        );
        assert_error(
            ReplayOptions {
                turns_per_session: 0,
                inter_turn_delay_ms: 1.0,
                shared_prefix_ratio: 2.0,
                ..synthetic()
            },
            "--turns-per-session: turns_per_session must be at least 1",
        );
        // The simple generator ignores them: negative ratio and delay, zero turns.
        let simple = spec_of(ReplayOptions {
            shared_prefix_ratio: -0.1,
            inter_turn_delay_ms: -5.0,
            turns_per_session: 0,
            ..synthetic()
        });
        assert_eq!(
            (
                simple.turns_per_session,
                simple.shared_prefix_ratio,
                simple.inter_turn_delay_ms
            ),
            (1, 0.0, 0.0)
        );
    }

    #[test]
    fn synthetic_speedup_ratio() {
        // Simple generator: checked after the worker checks, with the replay core's own name.
        assert_error(
            ReplayOptions { arrival_speedup_ratio: 0.0, ..synthetic() },
            "--arrival-speedup-ratio: arrival_speedup_ratio must be a finite positive number, got 0",
        );
        assert_error(
            ReplayOptions {
                arrival_speedup_ratio: 0.0,
                num_workers: 0,
                ..synthetic()
            },
            "--num-workers: trace replay requires num_workers >= 1",
        );
        // Session generator: checked while building sessions, before the worker checks.
        assert_error(
            ReplayOptions {
                arrival_speedup_ratio: 0.0,
                num_workers: 0,
                turns_per_session: 2,
                ..synthetic()
            },
            "--arrival-speedup-ratio: ratio must be a finite positive number, got 0",
        );
        // Closed loop: not used, not checked.
        let closed = ReplayOptions {
            arrival_interval_ms: None,
            replay_concurrency: Some(3),
            arrival_speedup_ratio: 0.0,
            ..synthetic()
        };
        let spec = spec(ReplayOptions {
            turns_per_session: 2,
            ..closed.clone()
        });
        assert_eq!(spec.arrivals, ArrivalMode::Concurrency { limit: 3 });
        spec_of(closed);
    }

    #[test]
    fn synthetic_check_order() {
        // SLA bounds come before the mode names and the load controller.
        assert_error(
            ReplayOptions {
                sla_ttft_ms: Some(-1.0),
                router_mode: "bogus".into(),
                ..synthetic()
            },
            "--sla-ttft-ms: sla_ttft_ms must be a finite, non-negative value, got -1",
        );
        assert_error(
            ReplayOptions {
                router_mode: "bogus".into(),
                replay_concurrency: Some(0),
                arrival_interval_ms: None,
                ..synthetic()
            },
            "--router-mode: router_mode must be either 'round_robin' or 'kv_router', got 'bogus'",
        );
        assert_error(
            ReplayOptions {
                replay_concurrency: Some(0),
                arrival_interval_ms: None,
                input_tokens: Some(0),
                ..synthetic()
            },
            "--replay-concurrency: replay_concurrency must be at least 1",
        );
        assert_error(
            ReplayOptions {
                input_tokens: Some(0),
                replay_mode: "bogus".into(),
                ..synthetic()
            },
            "--input-tokens: input_tokens must be at least 1",
        );
        assert_error(
            ReplayOptions {
                replay_mode: "bogus".into(),
                num_workers: 0,
                ..synthetic()
            },
            "--replay-mode: replay_mode must be either 'offline' or 'online', got 'bogus'",
        );
        assert_error(
            ReplayOptions {
                router_mode: "kv_router".into(),
                ..synthetic()
            },
            "--router-mode: offline replay only supports router_mode=kv_router with more than one \
             worker/DP-rank target",
        );
        assert_error(
            ReplayOptions {
                num_workers: 0,
                replay_concurrency: Some(2),
                arrival_interval_ms: None,
                ..synthetic()
            },
            "--num-workers: concurrency replay requires num_workers >= 1",
        );
        assert_error(
            ReplayOptions {
                extra_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
                ..synthetic()
            },
            "--extra-engine-args: trace replay only supports aggregated workers, got Prefill",
        );
    }

    #[test]
    fn synthetic_spec() {
        let spec = spec(ReplayOptions {
            turns_per_session: 2,
            shared_prefix_ratio: 0.5,
            num_prefix_groups: 3,
            inter_turn_delay_ms: 10.0,
            arrival_speedup_ratio: 4.0,
            extra_engine_args: Some(r#"{"block_size":16}"#.into()),
            num_workers: 2,
            ..synthetic()
        });
        let WorkloadSpec::Synthetic(generated) = spec.workload.clone() else {
            panic!()
        };
        assert_eq!(
            generated,
            SyntheticSpec {
                input_tokens: 100,
                output_tokens: 10,
                request_count: 5,
                arrival_process: Some(ArrivalProcess::Interval { interval_ms: 2.0 }),
                turns_per_session: 2,
                shared_prefix_ratio: 0.5,
                num_prefix_groups: 3,
                inter_turn_delay_ms: 10.0,
                engine_block_size: 16,
                lengths: Default::default(),
            }
        );
        assert_eq!(spec.arrivals, ArrivalMode::Timestamps { speedup: 4.0 });
        assert_eq!(spec.deployment.generating().workers, 2);
        assert_eq!(spec.max_sim_time_ms, None);
        assert!(!spec.capture_requests);
        assert_eq!(spec_of(synthetic()).engine_block_size, 64);
    }
}
