//! `dynamo.llm.KvRouterConfig` with the reference's constructor keywords.
//!
//! INTERFACE
//! - [`KvRouterConfig`]: holds the router-config JSON object a user would give
//!   `--router-config` (only the keys set) plus its parse by
//!   [`dynosim::config::RouterConfig::from_json`], the CLI's parser (which also reads and checks
//!   a `router_policy_config` YAML file). Setters and `with_overrides` re-run the parser on a
//!   changed copy, so a rejected value leaves the object as it was.
//! - [`object_json_text`]: the JSON of a `KvRouterConfig` given to the replay API.

use dynosim::config::router_config::ACCEPTED_KEY_TYPES;
use dynosim::config::RouterConfig;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use serde_json::{Map, Value};

use crate::convert::{self, bind_arguments, Kind};

const OWNER: &str = "KvRouterConfig";

/// The constructor's keywords in the stub's order; the first five may be positional.
const CONSTRUCTOR_KEYWORDS: &[&str] = &[
    "overlap_score_weight",
    "host_cache_hit_weight",
    "disk_cache_hit_weight",
    "router_temperature",
    "use_kv_events",
    "router_replica_sync",
    "router_track_active_blocks",
    "router_track_output_blocks",
    "router_assume_kv_reuse",
    "router_track_prefill_tokens",
    "router_prefill_load_model",
    "router_ttl_secs",
    "router_queue_threshold",
    "router_event_threads",
    "router_queue_policy",
    "use_remote_indexer",
    "serve_indexer",
    "shared_cache_multiplier",
    "shared_cache_type",
    "router_predicted_ttl_secs",
    "overlap_score_credit",
    "overlap_score_credit_decay",
    "prefill_load_scale",
    "decode_active_request_weight",
    "router_policy_config",
    "router_tracking_hash",
    "router_tracking_key_file",
    "router_tracking_key_id",
];
const CONSTRUCTOR_POSITIONAL: usize = 5;

/// `with_overrides` keywords; the first may be positional.
const OVERRIDE_KEYWORDS: &[&str] = &[
    "overlap_score_weight",
    "overlap_score_credit",
    "overlap_score_credit_decay",
    "prefill_load_scale",
    "decode_active_request_weight",
];

fn kind(key: &str) -> Kind {
    Kind::of_key(ACCEPTED_KEY_TYPES, key)
}

/// Whether `None` means "not set" for `key` (the parser reads it as an optional value).
fn none_means_unset(key: &str) -> bool {
    ACCEPTED_KEY_TYPES
        .iter()
        .any(|(name, rust_type)| *name == key && rust_type.trim_start().starts_with("Option"))
}

/// Settings of the KV-aware router (`dynamo.llm.KvRouterConfig`).
#[pyclass(module = "dynamo.llm", name = "KvRouterConfig")]
#[derive(Clone)]
pub struct KvRouterConfig {
    /// The keys set, as `--router-config` JSON.
    object: Map<String, Value>,
    /// Its parse (always succeeds: objects are validated when built or changed).
    config: RouterConfig,
}

impl KvRouterConfig {
    /// Validates `object` with the CLI's parser; `context` prefixes the message.
    fn parse(context: &str, mut object: Map<String, Value>) -> PyResult<Self> {
        let text = Value::Object(object.clone()).to_string();
        let config = RouterConfig::from_json(context, &text)
            .map_err(|err| PyValueError::new_err(err.message().to_owned()))?;
        // The deprecated alias is resolved by the parser; keeping its result (not the alias)
        // lets a later change of `prefill_load_scale` take effect.
        if object.shift_remove("overlap_score_weight").is_some() {
            object.insert(
                "overlap_score_credit".into(),
                Value::from(config.overlap_score_credit),
            );
            object.insert(
                "prefill_load_scale".into(),
                Value::from(config.prefill_load_scale),
            );
        }
        Ok(Self { object, config })
    }

    pub fn json_text(&self) -> String {
        Value::Object(self.object.clone()).to_string()
    }

    fn with_fields(&self, fields: Vec<(&str, Value)>) -> PyResult<Self> {
        let mut object = self.object.clone();
        for (key, value) in fields {
            object.insert(key.to_owned(), value);
        }
        Self::parse(OWNER, object)
    }

    fn set(&mut self, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let json = convert::to_json(key, kind(key), value)?;
        *self = self.with_fields(vec![(key, json)])?;
        Ok(())
    }
}

#[pymethods]
impl KvRouterConfig {
    /// Builds a router configuration from the reference's keywords; a value the router-config
    /// parser rejects raises `ValueError` naming the field.
    #[new]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let given = bind_arguments(
            OWNER,
            CONSTRUCTOR_KEYWORDS,
            CONSTRUCTOR_POSITIONAL,
            args,
            kwargs,
        )?;
        let mut object = Map::new();
        for (key, value) in given {
            let json = convert::to_json(key, kind(key), &value)?;
            if json.is_null() && none_means_unset(key) {
                continue;
            }
            object.insert(key.to_owned(), json);
        }
        Self::parse(OWNER, object)
    }

    /// Parses router-config JSON exactly as `--router-config` does (a `router_policy_config`
    /// path is read and checked now).
    #[staticmethod]
    fn from_json(config_json: &Bound<'_, PyAny>) -> PyResult<Self> {
        let text = convert::str_arg("config_json", config_json)?;
        // The parser words every fault of the text (syntax, repeated keys, not an object).
        RouterConfig::from_json("KvRouterConfig.from_json", &text)
            .map_err(|err| PyValueError::new_err(err.message().to_owned()))?;
        let object = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(object)) => object,
            _ => Map::new(),
        };
        Self::parse("KvRouterConfig.from_json", object)
    }

    fn copy(&self) -> Self {
        self.clone()
    }

    fn __copy__(&self) -> Self {
        self.clone()
    }

    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> Self {
        self.clone()
    }

    /// Pickles as its JSON, rebuilt by `from_json`.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (String,))> {
        let rebuild = slf.get_type().getattr("from_json")?;
        Ok((rebuild, (slf.borrow().json_text(),)))
    }

    /// A copy with the given weights replaced (`None` keeps a value as it is).
    #[pyo3(signature = (*args, **kwargs))]
    fn with_overrides(
        &self,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let given = bind_arguments(
            "KvRouterConfig.with_overrides",
            OVERRIDE_KEYWORDS,
            1,
            args,
            kwargs,
        )?;
        let mut fields = Vec::new();
        for (key, value) in given {
            let json = convert::to_json(key, kind(key), &value)?;
            if !json.is_null() {
                fields.push((key, json));
            }
        }
        self.with_fields(fields)
    }

    #[getter]
    fn overlap_score_credit(&self) -> f64 {
        self.config.overlap_score_credit
    }

    #[setter]
    fn set_overlap_score_credit(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set("overlap_score_credit", value)
    }

    #[getter]
    fn overlap_score_credit_decay(&self) -> f64 {
        self.config.overlap_score_credit_decay
    }

    #[setter]
    fn set_overlap_score_credit_decay(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set("overlap_score_credit_decay", value)
    }

    /// Deprecated alias of `prefill_load_scale` (setting 0 also zeroes the overlap credit).
    #[getter]
    fn overlap_score_weight(&self) -> f64 {
        self.config.prefill_load_scale
    }

    #[setter]
    fn set_overlap_score_weight(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set("overlap_score_weight", value)
    }

    #[getter]
    fn prefill_load_scale(&self) -> f64 {
        self.config.prefill_load_scale
    }

    #[setter]
    fn set_prefill_load_scale(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set("prefill_load_scale", value)
    }

    #[getter]
    fn decode_active_request_weight(&self) -> f64 {
        self.config.decode_active_request_weight
    }

    #[setter]
    fn set_decode_active_request_weight(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set("decode_active_request_weight", value)
    }

    #[getter]
    fn router_temperature(&self) -> f64 {
        self.config.router_temperature
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let mut parts = Vec::with_capacity(self.object.len());
        for (key, value) in &self.object {
            parts.push(format!("{key}={}", convert::from_json(py, value)?.repr()?));
        }
        Ok(format!("{OWNER}({})", parts.join(", ")))
    }
}

/// The JSON text of a router configuration given to the replay API as an object.
pub fn object_json_text(value: &Bound<'_, PyAny>) -> Option<String> {
    value
        .cast::<KvRouterConfig>()
        .ok()
        .map(|object| object.borrow().json_text())
}
