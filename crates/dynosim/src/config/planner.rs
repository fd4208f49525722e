//! The planner config (`--planner-config`, the Python API's `planner_config`): read from a
//! file or inline JSON, checked, and turned into a [`PlannerSpec`] before the run.
//!
//! INTERFACE
//! - [`PlannerSpec::from_arg`]: the flag's value (a `.yaml`/`.yml`/`.json` file, another file
//!   read as JSON then YAML, or inline JSON) to a validated spec; every fault is a usage error
//!   naming the flag, the file when there is one, and the field.
//! - [`PlannerSpec`]: mode (`agg` or `disagg`), optimization target, the loops' intervals and
//!   the scale-interval cadence, thresholds, SLA targets, budget and predictor settings.
//!
//! The schema and its defaults are the reference planner's (ai-dynamo 1.4.2). Unknown
//! top-level keys are ignored, as there; `scheduling` rejects unknown keys, as there. Keys the
//! offline replay has no use for (Prometheus, Kubernetes, diagnostics output) are accepted and
//! type-checked loosely; dynosim writes no planner diagnostics files.

use std::path::Path;

use serde_json::{Map, Value};

use super::{EngineType, ReplayMode, ReplaySpec};
use crate::error::{Error, Result};

impl ReplaySpec {
    /// Whether workers of this deployment can be scaled by a planner: offline replay, vLLM or
    /// TRT-LLM engines (either router). `what` names the planner in the message (the flag, or
    /// the Python API's `scaling_policy`).
    pub fn check_scaling(&self, what: &str) -> Result<()> {
        if self.replay_mode != ReplayMode::Offline {
            return Err(Error::usage(format!(
                "{what} only supports replay_mode='offline'"
            )));
        }
        if self
            .deployment
            .pools()
            .into_iter()
            .any(|(_, pool)| pool.engine.engine_type == EngineType::Sglang)
        {
            return Err(Error::usage_about(
                what,
                "the planner does not support SGLang engines yet (use vllm or trtllm)",
            ));
        }
        Ok(())
    }
}

/// Which deployment the planner scales.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlannerMode {
    Agg,
    Disagg,
}

/// What the planner optimizes for. Every target but `Sla` is an "easy mode": reactive
/// thresholds on the latest forward-pass metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizationTarget {
    Throughput,
    Latency,
    Load,
    Sla,
}

impl OptimizationTarget {
    pub fn is_easy(self) -> bool {
        self != OptimizationTarget::Sla
    }
}

/// How the SLA planner forecasts the next interval's traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadPredictor {
    Constant,
    Kalman,
    Arima,
    Prophet,
}

/// A validated planner configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannerSpec {
    pub mode: PlannerMode,
    pub target: OptimizationTarget,
    pub enable_load_scaling: bool,
    pub enable_throughput_scaling: bool,
    /// Seconds between load decisions.
    pub load_interval_s: f64,
    /// Seconds between throughput decisions.
    pub throughput_interval_s: f64,
    /// Seconds between scaling ticks (divides both intervals).
    pub scale_interval_s: f64,
    pub ttft_ms: f64,
    pub itl_ms: f64,
    pub min_endpoint: usize,
    /// Negative: no ceiling.
    pub max_gpu_budget: i64,
    /// Negative: no floor.
    pub min_gpu_budget: i64,
    pub load_predictor: LoadPredictor,
    pub load_predictor_log1p: bool,
    pub kalman_q_level: f64,
    pub kalman_q_trend: f64,
    pub kalman_r: f64,
    pub max_num_fpm_samples: usize,
    pub fpm_sample_bucket_size: usize,
    pub load_min_observations: usize,
    /// Percent.
    pub load_scaling_down_sensitivity: f64,
    pub speculative_nextn: usize,
    pub prefill_scale_up_queue_tokens: Option<u64>,
    pub prefill_scale_down_queue_tokens: Option<u64>,
    /// Percent of the KV cache.
    pub decode_scale_up_kv_rate: Option<f64>,
    pub decode_scale_down_kv_rate: Option<f64>,
}

const FLAG: &str = "--planner-config";

/// Where a config came from, for messages.
struct Source<'a> {
    file: Option<&'a str>,
}

impl Source<'_> {
    fn error(&self, detail: impl AsRef<str>) -> Error {
        let detail = detail.as_ref();
        let message = match self.file {
            Some(file) => format!("{file}: {detail}"),
            None => detail.to_string(),
        };
        Error::usage_about(FLAG, message)
    }
}

impl PlannerSpec {
    /// Reads and validates the flag's value: an existing file, else inline JSON.
    pub fn from_arg(arg: &str) -> Result<Self> {
        let path = Path::new(arg);
        if path.is_file() {
            let source = Source { file: Some(arg) };
            let text = std::fs::read_to_string(path)
                .map_err(|e| source.error(format!("cannot read the file: {e}")))?;
            let suffix = path
                .extension()
                .and_then(|e| e.to_str())
                .map(str::to_ascii_lowercase);
            let value = match suffix.as_deref() {
                Some("yaml" | "yml") => parse_yaml(&text).map_err(|e| source.error(e))?,
                Some("json") => serde_json::from_str(&text)
                    .map_err(|e| source.error(format!("invalid JSON: {e}")))?,
                _ => match serde_json::from_str(&text) {
                    Ok(value) => value,
                    Err(_) => parse_yaml(&text).map_err(|e| source.error(e))?,
                },
            };
            return Self::from_value(&value, &source);
        }
        let source = Source { file: None };
        let value: Value = serde_json::from_str(arg).map_err(|e| {
            source.error(format!(
                "the value is neither an existing file nor valid JSON: {e}"
            ))
        })?;
        Self::from_value(&value, &source)
    }

    /// Validates a config object (the Python API passes a dict as JSON).
    pub fn from_json_value(value: &Value) -> Result<Self> {
        Self::from_value(value, &Source { file: None })
    }

    fn from_value(value: &Value, source: &Source<'_>) -> Result<Self> {
        let Value::Object(object) = value else {
            return Err(source.error("the planner config must be a mapping of fields"));
        };
        let fields = Fields { object, source };
        let mode = match fields.string("mode")?.as_deref().unwrap_or("disagg") {
            "agg" => PlannerMode::Agg,
            "disagg" => PlannerMode::Disagg,
            other @ ("prefill" | "decode") => {
                return Err(source.error(format!(
                    "mode: planner-in-the-loop replay supports mode='agg' or 'disagg', got \
                     '{other}'"
                )))
            }
            other => {
                return Err(source.error(format!(
                    "mode: must be one of 'disagg', 'prefill', 'decode', 'agg', got '{other}'"
                )))
            }
        };
        let target = match fields
            .string("optimization_target")?
            .as_deref()
            .unwrap_or("throughput")
        {
            "throughput" => OptimizationTarget::Throughput,
            "latency" => OptimizationTarget::Latency,
            "load" => OptimizationTarget::Load,
            "sla" => OptimizationTarget::Sla,
            other => {
                return Err(source.error(format!(
                    "optimization_target: must be one of 'throughput', 'latency', 'load', \
                     'sla', got '{other}'"
                )))
            }
        };
        let throughput_interval = fields
            .int_aliased(
                "throughput_adjustment_interval_seconds",
                "throughput_adjustment_interval",
            )?
            .unwrap_or(180);
        let load_interval = fields
            .int_aliased(
                "load_adjustment_interval_seconds",
                "load_adjustment_interval",
            )?
            .unwrap_or(5);
        if load_interval <= 0 {
            return Err(source.error(format!(
                "load_adjustment_interval_seconds: must be greater than 0, got {load_interval}"
            )));
        }
        let ttft_ms = fields.number_aliased("ttft_ms", "ttft")?.unwrap_or(500.0);
        let itl_ms = fields.number_aliased("itl_ms", "itl")?.unwrap_or(50.0);
        let min_endpoint = fields.int("min_endpoint")?.unwrap_or(1);
        if min_endpoint < 0 {
            return Err(source.error(format!(
                "min_endpoint: must be at least 0, got {min_endpoint}"
            )));
        }
        let max_gpu_budget = fields.int("max_gpu_budget")?.unwrap_or(8);
        let min_gpu_budget = fields.int("min_gpu_budget")?.unwrap_or(-1);
        let predictor_name = fields
            .string("load_predictor")?
            .unwrap_or_else(|| "arima".into());
        let load_predictor = match predictor_name.as_str() {
            "constant" => Some(LoadPredictor::Constant),
            "kalman" => Some(LoadPredictor::Kalman),
            "arima" => Some(LoadPredictor::Arima),
            "prophet" => Some(LoadPredictor::Prophet),
            _ => None,
        };
        let fpm_sample_bucket_size = fields.int("fpm_sample_bucket_size")?.unwrap_or(16);
        let root = (fpm_sample_bucket_size.max(0) as f64).sqrt().round() as i64;
        if fpm_sample_bucket_size < 0 || root * root != fpm_sample_bucket_size {
            return Err(source.error(format!(
                "fpm_sample_bucket_size: must be a perfect square, got {fpm_sample_bucket_size}"
            )));
        }
        let non_negative_int = |key: &str, default: i64| -> Result<usize> {
            let value = fields.int(key)?.unwrap_or(default);
            usize::try_from(value)
                .map_err(|_| source.error(format!("{key}: must be at least 0, got {value}")))
        };
        let max_num_fpm_samples = non_negative_int("max_num_fpm_samples", 64)?;
        let load_min_observations = non_negative_int("load_min_observations", 5)?;
        let speculative_nextn = non_negative_int("speculative_nextn", 0)?;
        let load_scaling_down_sensitivity =
            fields.int("load_scaling_down_sensitivity")?.unwrap_or(80) as f64;
        let queue_tokens = |key: &str| -> Result<Option<u64>> {
            match fields.int(key)? {
                None => Ok(None),
                Some(v) if v < 0 => {
                    Err(source.error(format!("{key}: must be at least 0, got {v}")))
                }
                Some(v) => Ok(Some(v as u64)),
            }
        };
        let prefill_up = queue_tokens("prefill_scale_up_queue_tokens")?;
        let prefill_down = queue_tokens("prefill_scale_down_queue_tokens")?;
        let kv_rate = |key: &str| -> Result<Option<f64>> {
            match fields.number(key)? {
                Some(v) if !(0.0..=100.0).contains(&v) => {
                    Err(source.error(format!("{key}: must be between 0 and 100, got {v}")))
                }
                other => Ok(other),
            }
        };
        let decode_up = kv_rate("decode_scale_up_kv_rate")?;
        let decode_down = kv_rate("decode_scale_down_kv_rate")?;
        if let Some(hours) = fields.nullable_number("report_interval_hours")? {
            if !(hours.is_finite() && hours > 0.0) {
                return Err(
                    source.error("report_interval_hours: must be a positive finite number or null")
                );
            }
        }
        let mut enable_throughput_scaling =
            fields.boolean("enable_throughput_scaling")?.unwrap_or(true);
        let mut enable_load_scaling = fields.boolean("enable_load_scaling")?.unwrap_or(false);

        // The scheduling block: its own keys only.
        let explicit_scale_interval = match object.get("scheduling") {
            None | Some(Value::Null) => None,
            Some(Value::Object(scheduling)) => {
                const KNOWN: [&str; 4] = [
                    "scale_interval_seconds",
                    "tick_max_duration_seconds",
                    "external_plugins",
                    "gateway",
                ];
                if let Some(unknown) = scheduling.keys().find(|k| !KNOWN.contains(&k.as_str())) {
                    return Err(source.error(format!(
                        "scheduling.{unknown}: unknown field (extra inputs are not permitted)"
                    )));
                }
                match scheduling.get("scale_interval_seconds") {
                    None => None,
                    Some(value) => Some(as_number(value).ok_or_else(|| {
                        source.error("scheduling.scale_interval_seconds: must be a number")
                    })?),
                }
            }
            Some(_) => return Err(source.error("scheduling: must be a mapping")),
        };
        if let Some(interval) = explicit_scale_interval {
            if !(interval.is_finite() && interval > 0.0) {
                return Err(source.error(format!(
                    "scheduling.scale_interval_seconds: must be greater than 0, got {interval}"
                )));
            }
        }

        if ttft_ms <= 0.0 {
            return Err(source.error(format!("ttft_ms: must be > 0, got {ttft_ms}")));
        }
        if target == OptimizationTarget::Load {
            if mode == PlannerMode::Disagg {
                let (Some(up), Some(down)) = (prefill_up, prefill_down) else {
                    return Err(source.error(
                        "optimization_target='load' requires prefill_scale_up_queue_tokens and \
                         prefill_scale_down_queue_tokens for prefill scaling",
                    ));
                };
                if up <= down {
                    return Err(source.error(
                        "prefill_scale_up_queue_tokens must be greater than \
                         prefill_scale_down_queue_tokens",
                    ));
                }
            }
            let (Some(up), Some(down)) = (decode_up, decode_down) else {
                return Err(source.error(
                    "optimization_target='load' requires decode_scale_up_kv_rate and \
                     decode_scale_down_kv_rate for decode scaling",
                ));
            };
            if up <= down {
                return Err(source.error(
                    "decode_scale_up_kv_rate must be greater than decode_scale_down_kv_rate",
                ));
            }
        }
        if target.is_easy() {
            enable_load_scaling = true;
            enable_throughput_scaling = false;
        }
        if !enable_throughput_scaling && !enable_load_scaling {
            return Err(source.error(
                "at least one scaling mode must be enabled (enable_throughput_scaling or \
                 enable_load_scaling)",
            ));
        }
        if enable_throughput_scaling && throughput_interval <= 0 {
            return Err(source.error(
                "throughput_adjustment_interval_seconds must be > 0 when throughput scaling is \
                 enabled",
            ));
        }
        // The cadence: given, or the gcd (ms resolution) of the intervals in use.
        let mut intervals = vec![load_interval as f64];
        if enable_throughput_scaling {
            intervals.push(throughput_interval as f64);
        }
        let scale_interval_s = match explicit_scale_interval {
            Some(interval) => {
                if !intervals.iter().all(|&i| is_multiple_of(i, interval)) {
                    return Err(source.error(
                        "scheduling.scale_interval_seconds must evenly divide \
                         load_adjustment_interval_seconds and, when throughput scaling is \
                         enabled, throughput_adjustment_interval_seconds",
                    ));
                }
                interval
            }
            None => gcd_seconds(&intervals),
        };
        if enable_load_scaling && enable_throughput_scaling && load_interval >= throughput_interval
        {
            return Err(source.error(format!(
                "load_adjustment_interval_seconds ({load_interval}s) must be shorter than \
                 throughput_adjustment_interval_seconds ({throughput_interval}s)"
            )));
        }
        let load_predictor = match load_predictor {
            Some(predictor) => predictor,
            // The reference fails only when the predictor is built: with throughput scaling.
            None if enable_throughput_scaling => {
                return Err(source.error(format!(
                    "load_predictor: must be one of 'constant', 'arima', 'kalman', 'prophet', \
                     got '{predictor_name}'"
                )))
            }
            None => LoadPredictor::Constant,
        };
        Ok(Self {
            mode,
            target,
            enable_load_scaling,
            enable_throughput_scaling,
            load_interval_s: load_interval as f64,
            throughput_interval_s: throughput_interval as f64,
            scale_interval_s,
            ttft_ms,
            itl_ms,
            min_endpoint: min_endpoint as usize,
            max_gpu_budget,
            min_gpu_budget,
            load_predictor,
            load_predictor_log1p: fields.boolean("load_predictor_log1p")?.unwrap_or(false),
            kalman_q_level: fields.number("kalman_q_level")?.unwrap_or(1.0),
            kalman_q_trend: fields.number("kalman_q_trend")?.unwrap_or(0.1),
            kalman_r: fields.number("kalman_r")?.unwrap_or(10.0),
            max_num_fpm_samples,
            fpm_sample_bucket_size: fpm_sample_bucket_size as usize,
            load_min_observations,
            load_scaling_down_sensitivity,
            speculative_nextn,
            prefill_scale_up_queue_tokens: prefill_up,
            prefill_scale_down_queue_tokens: prefill_down,
            decode_scale_up_kv_rate: decode_up,
            decode_scale_down_kv_rate: decode_down,
        })
    }
}

impl PlannerSpec {
    /// The native planner forecasts with `constant` and `kalman` only; `arima` and `prophet`
    /// (statsmodels and Stan fits) run in Python, through the reference's planner passed as a
    /// `scaling_policy`. Only SLA mode with throughput scaling uses a predictor.
    pub fn check_native_predictor(&self) -> Result<()> {
        if self.target != OptimizationTarget::Sla || !self.enable_throughput_scaling {
            return Ok(());
        }
        let name = match self.load_predictor {
            LoadPredictor::Constant | LoadPredictor::Kalman => return Ok(()),
            LoadPredictor::Arima => "arima",
            LoadPredictor::Prophet => "prophet",
        };
        Err(Error::usage_about(
            FLAG,
            format!(
                "load_predictor: '{name}' is not built into dynosim's native planner (it has \
                 'constant' and 'kalman'); to forecast with {name}, run the reference's planner \
                 from Python: dynosim.run_trace_replay(trace, scaling_policy=ReplayPlannerAdapter(...)) \
                 with the ai-dynamo planner packages installed"
            ),
        ))
    }
}

fn parse_yaml(text: &str) -> std::result::Result<Value, String> {
    serde_yaml_ng::from_str::<Value>(text).map_err(|e| format!("invalid YAML: {e}"))
}

fn as_number(value: &Value) -> Option<f64> {
    value.as_f64()
}

/// `value` is a whole multiple of `step` (to 1e-9).
fn is_multiple_of(value: f64, step: f64) -> bool {
    let ratio = value / step;
    (ratio - ratio.round()).abs() <= 1e-9 * ratio.abs().max(1.0)
}

/// Greatest common divisor of `intervals` (seconds) at millisecond resolution.
fn gcd_seconds(intervals: &[f64]) -> f64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let ms = intervals
        .iter()
        .map(|s| (s * 1000.0).round() as u64)
        .fold(0, gcd);
    ms as f64 / 1000.0
}

/// Typed reads of the config's top-level fields.
struct Fields<'a> {
    object: &'a Map<String, Value>,
    source: &'a Source<'a>,
}

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.object.get(key)
    }

    fn string(&self, key: &str) -> Result<Option<String>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self
                .source
                .error(format!("{key}: must be a string, got {other}"))),
        }
    }

    /// Whole numbers only (an integral float such as 5.0 is accepted, as pydantic does).
    fn int(&self, key: &str) -> Result<Option<i64>> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => {
                if let Some(i) = value.as_i64() {
                    return Ok(Some(i));
                }
                match value.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9e15 => Ok(Some(f as i64)),
                    _ => Err(self
                        .source
                        .error(format!("{key}: must be an integer, got {value}"))),
                }
            }
        }
    }

    fn int_aliased(&self, key: &str, alias: &str) -> Result<Option<i64>> {
        if self.get(key).is_some() {
            self.int(key)
        } else {
            self.int(alias)
        }
    }

    fn number(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => match value.as_f64() {
                Some(f) if f.is_finite() => Ok(Some(f)),
                _ => Err(self
                    .source
                    .error(format!("{key}: must be a finite number, got {value}"))),
            },
        }
    }

    fn nullable_number(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value.as_f64().map(Some).ok_or_else(|| {
                self.source
                    .error(format!("{key}: must be a number or null, got {value}"))
            }),
        }
    }

    fn number_aliased(&self, key: &str, alias: &str) -> Result<Option<f64>> {
        if self.get(key).is_some() {
            self.number(key)
        } else {
            self.number(alias)
        }
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self
                .source
                .error(format!("{key}: must be true or false, got {other}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<PlannerSpec> {
        PlannerSpec::from_arg(json)
    }

    fn message(json: &str) -> String {
        parse(json).unwrap_err().message().to_string()
    }

    #[test]
    fn load_mode_defaults_and_cadence() {
        let spec = parse(
            r#"{"mode":"agg","optimization_target":"load","decode_scale_up_kv_rate":60,
                "decode_scale_down_kv_rate":20,"report_interval_hours":null,"bogus":1}"#,
        )
        .unwrap();
        assert_eq!(spec.mode, PlannerMode::Agg);
        assert!(spec.enable_load_scaling && !spec.enable_throughput_scaling);
        assert_eq!(spec.scale_interval_s, 5.0);
        assert_eq!(spec.max_gpu_budget, 8);
        assert_eq!(spec.min_endpoint, 1);
    }

    #[test]
    fn sla_cadence_is_the_gcd_of_both_loops() {
        let spec = parse(
            r#"{"mode":"agg","optimization_target":"sla","load_predictor":"constant",
                "throughput_adjustment_interval_seconds":20,"load_adjustment_interval_seconds":8,
                "enable_load_scaling":true}"#,
        )
        .unwrap();
        assert_eq!(spec.scale_interval_s, 4.0);
    }

    #[test]
    fn faults_name_the_field() {
        assert_eq!(
            message(r#"{"mode":"prefill"}"#),
            "--planner-config: mode: planner-in-the-loop replay supports mode='agg' or \
             'disagg', got 'prefill'"
        );
        assert!(message(r#"{"mode":"agg","optimization_target":"load"}"#)
            .contains("requires decode_scale_up_kv_rate"));
        assert!(message(r#"{"mode":"disagg","optimization_target":"load","decode_scale_up_kv_rate":60,"decode_scale_down_kv_rate":20}"#)
            .contains("requires prefill_scale_up_queue_tokens"));
        assert!(message(r#"{"fpm_sample_bucket_size":15}"#).contains("perfect square"));
        assert!(message(r#"{"ttft_ms":0}"#).contains("ttft_ms: must be > 0"));
        assert!(message(r#"{"decode_scale_up_kv_rate":120}"#).contains("between 0 and 100"));
        assert!(
            message(r#"{"optimization_target":"sla","load_predictor":"x"}"#)
                .contains("load_predictor: must be one of")
        );
        // Only the throughput loop builds a predictor: an easy mode ignores the name.
        assert!(parse(r#"{"load_predictor":"x"}"#).is_ok());
        assert!(message(r#"{"scheduling":{"nope":1}}"#).contains("scheduling.nope"));
        assert!(message(r#"{"scheduling":{"scale_interval_seconds":7}}"#)
            .contains("must evenly divide"));
        assert!(message("{not json").contains("neither an existing file nor valid JSON"));
        assert!(
            message(r#"{"optimization_target":"sla","enable_throughput_scaling":false}"#)
                .contains("at least one scaling mode")
        );
    }

    #[test]
    fn python_only_predictors_are_refused_natively() {
        let sla = |predictor: &str, throughput: bool| {
            parse(&format!(
                r#"{{"mode":"agg","optimization_target":"sla","load_predictor":"{predictor}",
                    "enable_throughput_scaling":{throughput},"enable_load_scaling":true}}"#
            ))
            .unwrap()
            .check_native_predictor()
        };
        let message = sla("arima", true).unwrap_err().message().to_string();
        assert!(message.starts_with("--planner-config: load_predictor: 'arima' is not built"));
        assert!(message.contains("scaling_policy=ReplayPlannerAdapter"));
        assert!(sla("prophet", true).is_err());
        assert!(sla("kalman", true).is_ok());
        assert!(sla("constant", true).is_ok());
        // Without the throughput loop no predictor runs.
        assert!(sla("arima", false).is_ok());
    }

    #[test]
    fn files_are_named_in_errors() {
        let dir = std::env::temp_dir().join(format!("dynosim-planner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.yaml");
        std::fs::write(&path, "mode: agg\noptimization_target: load\n").unwrap();
        let text = path.to_str().unwrap();
        let error = parse(text).unwrap_err();
        assert!(error
            .message()
            .starts_with(&format!("--planner-config: {text}: ")));
        std::fs::write(&path, "mode: agg\n  bad: [\n").unwrap();
        assert!(parse(text).unwrap_err().message().contains("invalid YAML"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
