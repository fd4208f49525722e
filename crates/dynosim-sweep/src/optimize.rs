//! The reference's `ReplayOptimizeSpec` (camelCase; sweeps.md §1): read, searched with the
//! reference's descent ([`crate::descent`]) on simulated candidates, and written in the
//! reference's result shape (best feasible, best infeasible, evaluated and feasible tables).
//!
//! INTERFACE
//! - [`OptimizeSpec::from_value`]: checks a spec (unknown keys, types and the reference's
//!   validation rules are usage errors naming the spec and key).
//! - [`run`]: runs `agg`, `disagg` or both (`compare`, the reference's
//!   `compare_agg_and_disagg_with_replay`) into DIR; returns `result.json`'s value.
//!
//! Each state becomes settings like the reference's `evaluate.py` builds its replay call,
//! then runs through the sweep's evaluator (journal, resume, parallel stages). Differences,
//! each in docs/differences.md: a failing candidate is an infeasible row carrying its error
//! (the reference aborts the search); `router.mode` is honoured in every entry point;
//! `concurrency` must be a whole number (the reference truncates 0.5 to "no limit");
//! `prefillLoadScales` must be finite; `engine.timing: polynomial` (dynosim only) runs
//! without AIC, keeping `aic_tp_size` for GPU counting.

use std::path::Path;

use dynosim::{Error, Result};
use serde_json::{json, Map, Value};

use crate::descent::{self, RouterMode, RouterState, Scored, Space, State, Topology};
use crate::outputs::write_atomically;
use crate::row::cell;
use crate::settings::{check_value, Settings};
use crate::{candidate_hash, Candidate, Evaluator, RunOptions};

/// Which of the reference's entry points to run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    Agg,
    Disagg,
    Compare,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ObjectiveKind {
    Throughput,
    MeanTtft,
    MeanE2eLatency,
}

impl ObjectiveKind {
    fn name(self) -> &'static str {
        match self {
            ObjectiveKind::Throughput => "throughput",
            ObjectiveKind::MeanTtft => "mean_ttft",
            ObjectiveKind::MeanE2eLatency => "mean_e2e_latency",
        }
    }
}

/// The SLA bounds (inactive when absent or not positive) and the report keys they bound.
const SLA_FIELDS: [(&str, &str); 6] = [
    ("ttft", "mean_ttft_ms"),
    ("itl", "mean_tpot_ms"),
    ("e2eLatency", "mean_e2e_latency_ms"),
    ("p95Ttft", "p95_ttft_ms"),
    ("p95Itl", "p95_tpot_ms"),
    ("p95E2eLatency", "p95_e2e_latency_ms"),
];

/// A checked `ReplayOptimizeSpec`.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizeSpec {
    pub mode: Mode,
    pub model: String,
    pub backend: String,
    /// `false` with `engine.timing: polynomial` (dynosim only).
    pub aic_timing: bool,
    pub base_engine_args: Option<Map<String, Value>>,
    pub base_prefill_engine_args: Option<Map<String, Value>>,
    pub base_decode_engine_args: Option<Map<String, Value>>,
    pub gpu_sku: String,
    pub total_gpus: u64,
    /// The workload's settings, named like the sweep's (and the Python API's) arguments.
    pub workload: Map<String, Value>,
    /// (report key, bound) of the active SLA bounds.
    pub sla: Vec<(&'static str, f64)>,
    pub routers: Vec<RouterState>,
    pub base_router_config: Option<Map<String, Value>>,
    pub objective: ObjectiveKind,
    pub max_parallel_evals: Option<usize>,
}

/// Reads one camelCase model: unknown keys are rejected, as the reference's `extra="forbid"`.
struct Fields<'a> {
    spec: &'a str,
    path: String,
    map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    fn new(spec: &'a str, path: &str, value: &'a Value, allowed: &[&str]) -> Result<Self> {
        let Value::Object(map) = value else {
            return Err(Error::usage(format!(
                "{spec}: {path}: expected a mapping, got {value}"
            )));
        };
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                return Err(Error::usage(format!(
                    "{spec}: {}: unknown key; expected one of: {}",
                    join(path, key),
                    allowed.join(", ")
                )));
            }
        }
        Ok(Fields {
            spec,
            path: path.to_owned(),
            map,
        })
    }

    fn fail(&self, key: &str, message: impl std::fmt::Display) -> Error {
        Error::usage(format!(
            "{}: {}: {message}",
            self.spec,
            join(&self.path, key)
        ))
    }

    /// A present, non-null value.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|value| !value.is_null())
    }

    fn required(&self, key: &str) -> Result<&'a Value> {
        self.get(key)
            .ok_or_else(|| self.fail(key, "missing (required)"))
    }

    fn string(&self, key: &str) -> Result<Option<String>> {
        self.get(key)
            .map(|value| {
                value
                    .as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| self.fail(key, format!("expected a string, got {value}")))
            })
            .transpose()
    }

    fn int(&self, key: &str) -> Result<Option<i64>> {
        self.get(key)
            .map(|value| {
                value
                    .as_i64()
                    .ok_or_else(|| self.fail(key, format!("expected an integer, got {value}")))
            })
            .transpose()
    }

    fn float(&self, key: &str) -> Result<Option<f64>> {
        self.get(key)
            .map(|value| {
                value
                    .as_f64()
                    .ok_or_else(|| self.fail(key, format!("expected a number, got {value}")))
            })
            .transpose()
    }

    fn object(&self, key: &str) -> Result<Option<Map<String, Value>>> {
        self.get(key)
            .map(|value| {
                value
                    .as_object()
                    .cloned()
                    .ok_or_else(|| self.fail(key, format!("expected a mapping, got {value}")))
            })
            .transpose()
    }

    fn floats(&self, key: &str) -> Result<Option<Vec<f64>>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let items = value
            .as_array()
            .filter(|items| !items.is_empty())
            .ok_or_else(|| self.fail(key, format!("expected a non-empty list, got {value}")))?;
        items
            .iter()
            .map(|item| {
                item.as_f64()
                    .filter(|number| number.is_finite() && *number >= 0.0)
                    .ok_or_else(|| {
                        self.fail(key, format!("expected finite numbers >= 0, got {item}"))
                    })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// The backends' perf-database versions the reference pins for every candidate.
fn backend_version(backend: &str) -> &'static str {
    if backend == "sglang" {
        "0.5.6.post2"
    } else {
        "0.14.0"
    }
}

/// TP sizes the reference enumerates (through AIC; the same for every SKU but the literal
/// `gb200`/`gb300`).
fn tp_sizes(gpu_sku: &str) -> Vec<u64> {
    if gpu_sku == "gb200" || gpu_sku == "gb300" {
        vec![1, 2, 4, 8, 16]
    } else {
        vec![1, 2, 4, 8]
    }
}

impl OptimizeSpec {
    /// Whether a value looks like a `ReplayOptimizeSpec` (rather than a sweep spec).
    pub fn detect(value: &Value) -> bool {
        value
            .as_object()
            .is_some_and(|map| map.contains_key("engine") && map.contains_key("hardware"))
    }

    pub fn from_value(spec: &str, value: &Value) -> Result<Self> {
        let top = Fields::new(
            spec,
            "",
            value,
            &[
                "engine",
                "hardware",
                "workload",
                "sla",
                "router",
                "objective",
                "maxParallelEvals",
                "mode",
            ],
        )?;
        let engine = Fields::new(
            spec,
            "engine",
            top.required("engine")?,
            &[
                "model",
                "backend",
                "baseEngineArgs",
                "basePrefillEngineArgs",
                "baseDecodeEngineArgs",
                "timing",
            ],
        )?;
        let model = engine
            .string("model")?
            .ok_or_else(|| engine.fail("model", "missing (required)"))?;
        let backend = engine
            .string("backend")?
            .ok_or_else(|| engine.fail("backend", "missing (required)"))?;
        if backend != "vllm" && backend != "sglang" {
            return Err(engine.fail("backend", "backend must be one of ['sglang', 'vllm']"));
        }
        let aic_timing = match engine.string("timing")?.as_deref() {
            None | Some("aic") => true,
            Some("polynomial") => false,
            Some(other) => {
                return Err(engine.fail(
                    "timing",
                    format!("expected aic or polynomial, got '{other}'"),
                ))
            }
        };
        let mut engine_args = Vec::new();
        for key in [
            "baseEngineArgs",
            "basePrefillEngineArgs",
            "baseDecodeEngineArgs",
        ] {
            let args = engine.object(key)?;
            if let Some(args) = &args {
                check_value("extra_engine_args", &Value::Object(args.clone()))
                    .map_err(|message| engine.fail(key, message))?;
            }
            engine_args.push(args);
        }
        let [base_engine_args, base_prefill_engine_args, base_decode_engine_args]: [_; 3] =
            engine_args.try_into().expect("three engine-args keys");

        let hardware = Fields::new(
            spec,
            "hardware",
            top.required("hardware")?,
            &["gpuSku", "totalGpus"],
        )?;
        let gpu_sku = hardware
            .string("gpuSku")?
            .ok_or_else(|| hardware.fail("gpuSku", "missing (required)"))?;
        let total_gpus = hardware
            .int("totalGpus")?
            .ok_or_else(|| hardware.fail("totalGpus", "missing (required)"))?;
        let total_gpus = u64::try_from(total_gpus)
            .ok()
            .filter(|&gpus| gpus > 0)
            .ok_or_else(|| hardware.fail("totalGpus", "must be greater than 0"))?;

        let workload = read_workload(spec, top.required("workload")?)?;

        let mut sla = Vec::new();
        if let Some(value) = top.get("sla") {
            let fields = Fields::new(spec, "sla", value, &SLA_FIELDS.map(|(field, _)| field))?;
            for (field, metric) in SLA_FIELDS {
                if let Some(bound) = fields.float(field)? {
                    if bound > 0.0 {
                        sla.push((metric, bound));
                    }
                }
            }
        }

        let (mut mode, mut credits, mut scales, mut base_router_config) = (
            "kv_router".to_owned(),
            vec![1.0],
            vec![0.0, 0.25, 0.5, 1.0, 2.0, 4.0],
            None,
        );
        if let Some(value) = top.get("router") {
            let fields = Fields::new(
                spec,
                "router",
                value,
                &[
                    "mode",
                    "overlapCredits",
                    "prefillLoadScales",
                    "baseRouterConfig",
                ],
            )?;
            if let Some(given) = fields.string("mode")? {
                mode = given;
            }
            if let Some(given) = fields.floats("overlapCredits")? {
                credits = given;
            }
            if let Some(given) = fields.floats("prefillLoadScales")? {
                scales = given;
            }
            base_router_config = fields.object("baseRouterConfig")?;
            if let Some(config) = &base_router_config {
                check_value("router_config", &Value::Object(config.clone()))
                    .map_err(|message| fields.fail("baseRouterConfig", message))?;
            }
        }
        let round_robin = RouterState {
            mode: RouterMode::RoundRobin,
            credit: 0.0,
            scale: 1.0,
        };
        let kv_states = || {
            credits.iter().flat_map(|&credit| {
                scales.iter().map(move |&scale| RouterState {
                    mode: RouterMode::KvRouter,
                    credit,
                    scale,
                })
            })
        };
        let routers: Vec<RouterState> = match mode.as_str() {
            "round_robin" => vec![round_robin],
            "kv_router" => kv_states().collect(),
            "both" => std::iter::once(round_robin).chain(kv_states()).collect(),
            other => {
                return Err(Error::usage(format!(
                    "{spec}: router.mode: expected kv_router, round_robin or both, got '{other}'"
                )))
            }
        };

        let objective = match top.string("objective")?.as_deref() {
            None | Some("throughput") => ObjectiveKind::Throughput,
            Some("mean_ttft") => ObjectiveKind::MeanTtft,
            Some("mean_e2e_latency") => ObjectiveKind::MeanE2eLatency,
            Some(other) => {
                return Err(top.fail(
                    "objective",
                    format!("expected throughput, mean_ttft or mean_e2e_latency, got '{other}'"),
                ))
            }
        };
        let max_parallel_evals = match top.int("maxParallelEvals")? {
            None => None,
            Some(count) => Some(
                usize::try_from(count)
                    .ok()
                    .filter(|&count| count > 0)
                    .ok_or_else(|| top.fail("maxParallelEvals", "must be greater than 0"))?,
            ),
        };

        let has_disagg = base_prefill_engine_args.is_some() || base_decode_engine_args.is_some();
        let mode = match top.string("mode")?.as_deref() {
            Some("agg") => Mode::Agg,
            Some("disagg") => Mode::Disagg,
            Some("compare") => Mode::Compare,
            Some(other) => {
                return Err(top.fail(
                    "mode",
                    format!("expected agg, disagg or compare, got '{other}'"),
                ))
            }
            None if has_disagg && base_engine_args.is_some() => Mode::Compare,
            None if has_disagg => Mode::Disagg,
            None => Mode::Agg,
        };
        if matches!(mode, Mode::Agg | Mode::Compare) && base_engine_args.is_none() {
            return Err(engine.fail("baseEngineArgs", "required for aggregated replay"));
        }
        if matches!(mode, Mode::Disagg | Mode::Compare)
            && (base_prefill_engine_args.is_none() || base_decode_engine_args.is_none())
        {
            return Err(engine.fail(
                "basePrefillEngineArgs",
                "disaggregated replay needs basePrefillEngineArgs and baseDecodeEngineArgs",
            ));
        }
        if matches!(mode, Mode::Disagg | Mode::Compare) && total_gpus < 2 {
            return Err(hardware.fail("totalGpus", "disaggregated replay needs at least 2"));
        }

        Ok(OptimizeSpec {
            mode,
            model,
            backend,
            aic_timing,
            base_engine_args,
            base_prefill_engine_args,
            base_decode_engine_args,
            gpu_sku,
            total_gpus,
            workload,
            sla,
            routers,
            base_router_config,
            objective,
            max_parallel_evals,
        })
    }

    /// The engine arguments of one pool: the base with the reference's overrides.
    fn engine_args(&self, base: &Map<String, Value>, worker_type: &str, tp: u64) -> Value {
        let mut args = base.clone();
        args.insert("worker_type".into(), json!(worker_type));
        if self.aic_timing {
            args.insert("aic_backend".into(), json!(self.backend));
            args.insert("aic_system".into(), json!(self.gpu_sku));
            args.insert(
                "aic_backend_version".into(),
                json!(backend_version(&self.backend)),
            );
        }
        args.insert("aic_tp_size".into(), json!(tp));
        if self.aic_timing {
            args.insert("aic_model_path".into(), json!(self.model));
        }
        Value::Object(args)
    }

    /// The settings of one state (the reference's replay call for it).
    pub fn settings(&self, state: &State) -> Settings {
        let mut settings = Settings {
            values: self.workload.clone(),
        };
        let router = state.router();
        settings.set("router_mode", json!(router.mode.name()));
        if router.mode == RouterMode::KvRouter {
            let mut config = self.base_router_config.clone().unwrap_or_default();
            config.insert("overlap_score_credit".into(), json!(router.credit));
            config.insert("prefill_load_scale".into(), json!(router.scale));
            settings.set("router_config", Value::Object(config));
        }
        let empty = Map::new();
        match *state {
            State::Aggregated { tp, workers, .. } => {
                let base = self.base_engine_args.as_ref().unwrap_or(&empty);
                settings.set(
                    "extra_engine_args",
                    self.engine_args(base, "aggregated", tp),
                );
                settings.set("num_workers", json!(workers));
            }
            State::Disaggregated {
                prefill_tp,
                decode_tp,
                prefill_workers,
                decode_workers,
                ..
            } => {
                let prefill = self.base_prefill_engine_args.as_ref().unwrap_or(&empty);
                let decode = self.base_decode_engine_args.as_ref().unwrap_or(&empty);
                settings.set(
                    "prefill_engine_args",
                    self.engine_args(prefill, "prefill", prefill_tp),
                );
                settings.set(
                    "decode_engine_args",
                    self.engine_args(decode, "decode", decode_tp),
                );
                settings.set("num_prefill_workers", json!(prefill_workers));
                settings.set("num_decode_workers", json!(decode_workers));
            }
        }
        settings
    }
}

fn read_workload(spec: &str, value: &Value) -> Result<Map<String, Value>> {
    let fields = Fields::new(
        spec,
        "workload",
        value,
        &[
            "isl",
            "osl",
            "requestCount",
            "concurrency",
            "requestRate",
            "arrivalIntervalMs",
            "sharedPrefixRatio",
            "numPrefixGroups",
            "turnsPerSession",
            "interTurnDelayMs",
            "arrivalSeed",
            "traceFile",
            "traceFormat",
            "arrivalSpeedupRatio",
            "traceReplayConcurrency",
            "traceSharedPrefixRatio",
            "traceNumPrefixGroups",
        ],
    )?;
    let mut settings = Map::new();
    let mut put = |name: &str, value: Value| {
        settings.insert(name.to_owned(), value);
    };
    if let Some(trace) = fields.string("traceFile")? {
        for key in [
            "isl",
            "osl",
            "concurrency",
            "requestRate",
            "requestCount",
            "arrivalIntervalMs",
        ] {
            if fields.get(key).is_some() {
                return Err(fields.fail(key, "not used with traceFile; leave it unset"));
            }
        }
        for key in [
            "sharedPrefixRatio",
            "numPrefixGroups",
            "turnsPerSession",
            "interTurnDelayMs",
            "arrivalSeed",
        ] {
            if fields.get(key).is_some() {
                return Err(fields.fail(
                    key,
                    "synthetic workloads only; a trace workload would ignore it",
                ));
            }
        }
        let format = fields
            .string("traceFormat")?
            .unwrap_or_else(|| "mooncake".into());
        if format != "mooncake" && format != "applied_compute_agentic" {
            return Err(fields.fail(
                "traceFormat",
                format!("expected mooncake or applied_compute_agentic, got '{format}'"),
            ));
        }
        let concurrency = fields.int("traceReplayConcurrency")?;
        if concurrency.is_some_and(|limit| limit < 1) {
            return Err(fields.fail("traceReplayConcurrency", "must be at least 1"));
        }
        if format == "applied_compute_agentic" && concurrency.is_none() {
            return Err(fields.fail(
                "traceReplayConcurrency",
                "required for applied_compute_agentic traces",
            ));
        }
        let ratio = fields.float("traceSharedPrefixRatio")?.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&ratio) {
            return Err(fields.fail("traceSharedPrefixRatio", "must be in [0, 1]"));
        }
        let groups = fields.int("traceNumPrefixGroups")?.unwrap_or(0);
        if groups < 0 || (ratio > 0.0 && groups < 1) {
            return Err(fields.fail(
                "traceNumPrefixGroups",
                "must be >= 0, and >= 1 when traceSharedPrefixRatio > 0",
            ));
        }
        put("trace_file", json!(trace));
        put("trace_format", json!(format));
        if let Some(limit) = concurrency {
            put("replay_concurrency", json!(limit));
        }
        put(
            "arrival_speedup_ratio",
            json!(fields.float("arrivalSpeedupRatio")?.unwrap_or(1.0)),
        );
        put("trace_shared_prefix_ratio", json!(ratio));
        put("trace_num_prefix_groups", json!(groups));
        return Ok(settings);
    }
    for key in [
        "traceFormat",
        "arrivalSpeedupRatio",
        "traceReplayConcurrency",
        "traceSharedPrefixRatio",
        "traceNumPrefixGroups",
    ] {
        if fields.get(key).is_some() {
            return Err(fields.fail(key, "trace workloads only (set traceFile)"));
        }
    }
    for (key, name) in [
        ("isl", "input_tokens"),
        ("osl", "output_tokens"),
        ("requestCount", "request_count"),
    ] {
        let value = fields
            .int(key)?
            .ok_or_else(|| fields.fail(key, "required when traceFile is not set"))?;
        put(name, json!(value));
    }
    let arrivals: Vec<&str> = ["concurrency", "requestRate", "arrivalIntervalMs"]
        .into_iter()
        .filter(|key| fields.get(key).is_some())
        .collect();
    if arrivals.len() != 1 {
        return Err(fields.fail(
            "concurrency",
            "a synthetic workload needs exactly one of concurrency, requestRate, \
             arrivalIntervalMs",
        ));
    }
    if let Some(concurrency) = fields.float("concurrency")? {
        if concurrency.fract() != 0.0 || concurrency < 1.0 {
            return Err(fields.fail(
                "concurrency",
                format!("expected a whole number of requests >= 1, got {concurrency}"),
            ));
        }
        put("replay_concurrency", json!(concurrency as i64));
    }
    if let Some(rate) = fields.float("requestRate")? {
        put("request_rate", json!(rate));
    }
    if let Some(interval) = fields.float("arrivalIntervalMs")? {
        put("arrival_interval_ms", json!(interval));
    }
    put(
        "arrival_seed",
        json!(fields.int("arrivalSeed")?.unwrap_or(42)),
    );
    put(
        "turns_per_session",
        json!(fields.int("turnsPerSession")?.unwrap_or(1)),
    );
    put(
        "shared_prefix_ratio",
        json!(fields.float("sharedPrefixRatio")?.unwrap_or(0.0)),
    );
    put(
        "num_prefix_groups",
        json!(fields.int("numPrefixGroups")?.unwrap_or(0)),
    );
    put(
        "inter_turn_delay_ms",
        json!(fields.float("interTurnDelayMs")?.unwrap_or(0.0)),
    );
    Ok(settings)
}

/// One evaluated state as the reference's record: the report's keys, the state's fields,
/// then `total_gpus_used, score, objective, feasible, violation_penalty` (and, dynosim
/// only, `error`, `candidate` and `command`).
#[derive(Clone, Debug)]
pub struct Record {
    pub state: State,
    pub scored: Scored,
    pub fields: Map<String, Value>,
}

fn state_fields(state: &State) -> Vec<(&'static str, Value)> {
    let router = state.router();
    match *state {
        State::Aggregated { tp, workers, .. } => vec![
            ("tp", json!(tp)),
            ("workers", json!(workers)),
            ("router_mode", json!(router.mode.name())),
            ("overlap_score_credit", json!(router.credit)),
            ("prefill_load_scale", json!(router.scale)),
        ],
        State::Disaggregated {
            prefill_tp,
            decode_tp,
            prefill_workers,
            decode_workers,
            ..
        } => vec![
            ("prefill_tp", json!(prefill_tp)),
            ("decode_tp", json!(decode_tp)),
            ("prefill_workers", json!(prefill_workers)),
            ("decode_workers", json!(decode_workers)),
            ("overlap_score_credit", json!(router.credit)),
            ("router_mode", json!(router.mode.name())),
            ("prefill_load_scale", json!(router.scale)),
        ],
    }
}

/// Scores one row as the reference does.
fn score_row(spec: &OptimizeSpec, state: &State, row: &crate::Row) -> Record {
    let metric = |key: &str| row.metric(key);
    let throughput = metric("output_throughput_tok_s");
    let score = match spec.objective {
        ObjectiveKind::Throughput => throughput,
        ObjectiveKind::MeanTtft => metric("mean_ttft_ms").map(|value| -value),
        ObjectiveKind::MeanE2eLatency => metric("mean_e2e_latency_ms").map(|value| -value),
    };
    let violation_penalty: f64 = spec
        .sla
        .iter()
        .map(|&(key, bound)| match metric(key) {
            Some(value) => (value / bound - 1.0).max(0.0),
            None => f64::INFINITY,
        })
        .sum();
    let ran = row.error.is_empty();
    let scored = Scored {
        score: score.unwrap_or(f64::NEG_INFINITY),
        throughput: throughput.unwrap_or(f64::NEG_INFINITY),
        mean_e2e_latency_ms: metric("mean_e2e_latency_ms"),
        gpus: state.gpus(),
        feasible: ran && violation_penalty == 0.0,
        violation_penalty: if ran {
            violation_penalty
        } else {
            f64::INFINITY
        },
    };
    let mut fields = row.report.clone();
    for (key, value) in state_fields(state) {
        fields.insert(key.to_owned(), value);
    }
    let number =
        |value: f64| serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number);
    fields.insert("total_gpus_used".into(), json!(state.gpus()));
    fields.insert(
        "output_throughput_tok_s".into(),
        throughput.map_or(Value::Null, number),
    );
    fields.insert("score".into(), score.map_or(Value::Null, number));
    fields.insert("objective".into(), json!(spec.objective.name()));
    fields.insert("feasible".into(), json!(scored.feasible));
    fields.insert(
        "violation_penalty".into(),
        if scored.violation_penalty.is_finite() {
            number(scored.violation_penalty)
        } else {
            json!("inf")
        },
    );
    fields.insert("error".into(), json!(row.error));
    fields.insert("candidate".into(), json!(row.candidate));
    fields.insert("command".into(), json!(row.settings.command_line()));
    Record {
        state: *state,
        scored,
        fields,
    }
}

/// The reference's result of one entry point.
#[derive(Debug)]
pub struct SearchResult {
    /// Every evaluated state, in evaluation order (`evaluated_df`).
    pub evaluated: Vec<Record>,
    /// The feasible records, best first (`feasible_df`).
    pub feasible: Vec<Record>,
    pub best_feasible: Option<Record>,
    pub best_infeasible: Option<Record>,
}

/// Runs one entry point's descent through the evaluator.
pub fn search(
    spec: &OptimizeSpec,
    topology: Topology,
    evaluator: &mut Evaluator,
) -> Result<SearchResult> {
    let space = Space {
        topology,
        budget: spec.total_gpus,
        tps: tp_sizes(&spec.gpu_sku),
        routers: spec.routers.clone(),
    };
    let mut records: Vec<Record> = Vec::new();
    let candidate_of = |state: &State| {
        let settings = spec.settings(state);
        Candidate {
            hash: candidate_hash(&settings),
            settings,
        }
    };
    let mut evaluate = |states: &[State], next: &descent::Guess| -> Result<Vec<Scored>> {
        let candidates: Vec<Candidate> = states.iter().map(candidate_of).collect();
        // While a stage's last states run, idle threads start on the stage its best so far
        // leads to.
        let guess = |rows: &[Option<crate::Row>]| -> Vec<Candidate> {
            let partial: Vec<Option<Scored>> = states
                .iter()
                .zip(rows)
                .map(|(state, row)| row.as_ref().map(|row| score_row(spec, state, row).scored))
                .collect();
            next(&partial).iter().map(candidate_of).collect()
        };
        let rows = evaluator.evaluate_guessing(&candidates, &guess)?;
        let mut scored = Vec::new();
        for (state, row) in states.iter().zip(rows) {
            let row = row.ok_or_else(|| Error::runtime("a descent state was over the budget"))?;
            let record = score_row(spec, state, &row);
            scored.push(record.scored);
            records.push(record);
        }
        Ok(scored)
    };
    descent::descend_guessing(&space, &mut evaluate)?;
    // The reference's feasible table: feasible records sorted (stably) best first.
    let keyed: Vec<(usize, Scored)> = records
        .iter()
        .enumerate()
        .map(|(index, record)| (index, record.scored))
        .collect();
    let mut feasible_order: Vec<usize> = Vec::new();
    let mut remaining: Vec<(usize, Scored)> = keyed
        .iter()
        .copied()
        .filter(|(_, scored)| scored.feasible)
        .collect();
    while let Some(best) = descent::pick_best(&remaining) {
        feasible_order.push(remaining[best].0);
        remaining.remove(best);
    }
    let infeasible: Vec<(usize, Scored)> = keyed
        .iter()
        .copied()
        .filter(|(_, scored)| !scored.feasible)
        .collect();
    let best_infeasible =
        descent::pick_best(&infeasible).map(|best| records[infeasible[best].0].clone());
    let feasible: Vec<Record> = feasible_order
        .iter()
        .map(|&index| records[index].clone())
        .collect();
    Ok(SearchResult {
        best_feasible: feasible.first().cloned(),
        best_infeasible,
        feasible,
        evaluated: records,
    })
}

fn records_csv(records: &[Record]) -> Result<Vec<u8>> {
    let mut header: Vec<String> = Vec::new();
    for record in records {
        for key in record.fields.keys() {
            if !header.contains(key) {
                header.push(key.clone());
            }
        }
    }
    // Failed rows have no report keys: keep the dynosim-only columns last.
    for tail in ["error", "candidate", "command"] {
        if let Some(position) = header.iter().position(|key| key == tail) {
            let key = header.remove(position);
            header.push(key);
        }
    }
    let mut writer = csv::Writer::from_writer(Vec::new());
    let fail = |err: csv::Error| Error::runtime(format!("cannot format the table: {err}"));
    writer.write_record(&header).map_err(fail)?;
    for record in records {
        let line: Vec<String> = header
            .iter()
            .map(|key| cell(record.fields.get(key)))
            .collect();
        writer.write_record(&line).map_err(fail)?;
    }
    writer
        .into_inner()
        .map_err(|err| Error::runtime(format!("cannot format the table: {err}")))
}

fn result_json(result: &SearchResult) -> Value {
    json!({
        "best_feasible": result.best_feasible.as_ref().map(|record| &record.fields),
        "best_infeasible": result.best_infeasible.as_ref().map(|record| &record.fields),
        "evaluations": result.evaluated.len(),
        "feasible": result.feasible.len(),
    })
}

/// Runs the spec's entry point(s) into `out`: `evaluated.csv` and `feasible.csv` (prefixed
/// `agg_`/`disagg_` for `compare`), `result.json`, and the journal. Returns `result.json`.
pub fn run(spec: &OptimizeSpec, out: &Path, options: &RunOptions) -> Result<Value> {
    let options = RunOptions {
        jobs: options.jobs.or(spec.max_parallel_evals),
        ..options.clone()
    };
    let mut evaluator = Evaluator::open(out, &options, None)?;
    let topologies: &[(Topology, &str)] = match spec.mode {
        Mode::Agg => &[(Topology::Aggregated, "")],
        Mode::Disagg => &[(Topology::Disaggregated, "")],
        Mode::Compare => &[
            (Topology::Aggregated, "agg_"),
            (Topology::Disaggregated, "disagg_"),
        ],
    };
    let mut results = Vec::new();
    for &(topology, prefix) in topologies {
        let result = search(spec, topology, &mut evaluator)?;
        write_atomically(
            &out.join(format!("{prefix}evaluated.csv")),
            &records_csv(&result.evaluated)?,
        )?;
        write_atomically(
            &out.join(format!("{prefix}feasible.csv")),
            &records_csv(&result.feasible)?,
        )?;
        results.push(result);
    }
    let value = match spec.mode {
        Mode::Agg | Mode::Disagg => result_json(&results[0]),
        Mode::Compare => {
            let (agg, disagg) = (&results[0], &results[1]);
            // The reference's choice: the better feasible best, else the better infeasible.
            let pair = |a: &Option<Record>, b: &Option<Record>| -> Vec<(bool, Scored)> {
                [(true, a), (false, b)]
                    .into_iter()
                    .filter_map(|(is_agg, record)| record.as_ref().map(|r| (is_agg, r.scored)))
                    .collect()
            };
            let mut choices = pair(&agg.best_feasible, &disagg.best_feasible);
            let mut feasible = true;
            if choices.is_empty() {
                choices = pair(&agg.best_infeasible, &disagg.best_infeasible);
                feasible = false;
            }
            let chosen = descent::pick_best(&choices).map(|index| choices[index].0);
            let chosen_best = chosen.and_then(|is_agg| {
                let result = if is_agg { agg } else { disagg };
                let record = if feasible {
                    &result.best_feasible
                } else {
                    &result.best_infeasible
                };
                record.as_ref().map(|record| record.fields.clone())
            });
            json!({
                "agg_result": result_json(agg),
                "disagg_result": result_json(disagg),
                "chosen_mode": chosen.map(|is_agg| if is_agg { "agg" } else { "disagg" }),
                "chosen_best": chosen_best,
            })
        }
    };
    let mut text = serde_json::to_string_pretty(&value)
        .map_err(|err| Error::runtime(format!("cannot format result.json: {err}")))?;
    text.push('\n');
    write_atomically(&out.join("result.json"), text.as_bytes())?;
    Ok(value)
}
