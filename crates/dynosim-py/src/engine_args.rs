//! `dynamo.mocker.MockEngineArgs` and its sub-objects (`SglangArgs`, `TrtllmArgs`,
//! `ReasoningConfig`), with the reference's constructor keywords.
//!
//! INTERFACE
//! - [`MockEngineArgs`]: holds the engine-args JSON object a user would give
//!   `--extra-engine-args` (only the keys set) plus its parse by
//!   [`dynosim::config::EngineArgs::from_json`], the CLI's parser: every value check is that
//!   parser's, and an object that exists is always valid. Setters and `with_overrides` re-run
//!   the parser on a changed copy, so a rejected value leaves the object as it was.
//! - [`MockEngineArgs::json_text`]: the object's JSON, for the replay options.
//! - The sub-objects' constructors, `repr` and pickling (the classes are
//!   [`crate::sub_objects`]'s).

use dynosim::config::engine_args::ACCEPTED_KEY_TYPES;
use dynosim::config::{EngineArgs, EngineType, KvTransferTimingMode, PreemptionMode, WorkerType};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use serde_json::{Map, Value};

use crate::convert::{self, bind_arguments, Kind};
use crate::sub_objects::{ReasoningConfig, SglangArgs, SubObject, TrtllmArgs};

const OWNER: &str = "MockEngineArgs";

/// The AIC timing and GPU memory keywords, which the constructor and `with_overrides` both
/// take, in the stub's order.
const TIMING_KEYWORDS: &[&str] = &[
    "aic_backend",
    "aic_system",
    "aic_backend_version",
    "aic_tp_size",
    "aic_model_path",
    "aic_moe_tp_size",
    "aic_moe_ep_size",
    "aic_attention_dp_size",
    "aic_nextn",
    "aic_nextn_accept_rates",
    "aic_mtp_seed",
    "aic_gemm_dtype",
    "aic_moe_dtype",
    "aic_fmha_dtype",
    "aic_kv_cache_dtype",
    "aic_comm_dtype",
    "gpu_memory_utilization",
    "mem_fraction_static",
    "free_gpu_memory_fraction",
];

/// The constructor's keywords, in the order of the reference's stub (all may be positional):
/// these, [`TIMING_KEYWORDS`], then [`CONSTRUCTOR_LAST_KEYWORDS`].
const CONSTRUCTOR_FIRST_KEYWORDS: &[&str] = &[
    "engine_type",
    "num_gpu_blocks",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "speedup_ratio",
    "decode_speedup_ratio",
    "dp_size",
    "startup_time",
    "worker_type",
    "planner_profile_data",
];

const CONSTRUCTOR_LAST_KEYWORDS: &[&str] = &[
    "enable_local_indexer",
    "bootstrap_port",
    "handoff_session_timeout_ms",
    "kv_bytes_per_token",
    "kv_transfer_bandwidth",
    "kv_transfer_timing_mode",
    "reasoning",
    "response_replay_trace_path",
    "zmq_kv_events_port",
    "zmq_replay_port",
    "preemption_mode",
    "router_queue_policy",
    "sglang",
    "trtllm",
    "num_g2_blocks",
    "num_g3_blocks",
    "offload_batch_size",
    "bandwidth_g1_to_g2_gbps",
    "bandwidth_g2_to_g1_gbps",
    "bandwidth_g2_to_g3_gbps",
    "bandwidth_g3_to_g2_gbps",
    "enable_g4_storage",
    "bandwidth_g2_to_g4_gbps",
    "bandwidth_g4_to_g2_gbps",
    "max_model_len",
    "g1_backend",
];

/// `with_overrides` keywords, in the stub's order (all may be positional): these,
/// [`TIMING_KEYWORDS`], then [`OVERRIDE_LAST_KEYWORDS`].
const OVERRIDE_FIRST_KEYWORDS: &[&str] = &[
    "bootstrap_port",
    "zmq_kv_events_port",
    "zmq_replay_port",
    "kv_bytes_per_token",
    "num_gpu_blocks",
];

const OVERRIDE_LAST_KEYWORDS: &[&str] = &["enable_prefix_caching", "worker_type"];

/// What a property reads when its key is not set (the stub's defaults; keys the parser keeps
/// are read from the parse instead, see [`MockEngineArgs::field`]).
fn unset_value(key: &str) -> Value {
    match key {
        "aic_mtp_seed" => Value::from(42),
        "handoff_session_timeout_ms" => Value::from(300_000),
        "enable_local_indexer" | "enable_g4_storage" => Value::Bool(false),
        "g1_backend" => Value::from("native"),
        _ => Value::Null,
    }
}

/// Keywords whose stub default is a value rather than `None`: for these `None` is passed on to
/// the parser as `null` (for `max_num_seqs` and `max_num_batched_tokens` it means "unlimited";
/// for the others the parser rejects it), while for every other keyword `None` means "not set".
const KEYWORDS_WITH_VALUE_DEFAULTS: &[&str] = &[
    "engine_type",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "speedup_ratio",
    "decode_speedup_ratio",
    "dp_size",
    "worker_type",
    "aic_mtp_seed",
    "enable_local_indexer",
    "handoff_session_timeout_ms",
    "kv_transfer_timing_mode",
    "preemption_mode",
    "enable_g4_storage",
];

fn none_means_unset(key: &str) -> bool {
    !KEYWORDS_WITH_VALUE_DEFAULTS.contains(&key)
}

fn kind(key: &str) -> Kind {
    Kind::of_key(ACCEPTED_KEY_TYPES, key)
}

/// Engine arguments of one simulated worker pool (`dynamo.mocker.MockEngineArgs`).
#[pyclass(module = "dynamo.mocker", name = "MockEngineArgs")]
#[derive(Clone)]
pub struct MockEngineArgs {
    /// The keys set, as `--extra-engine-args` JSON.
    object: Map<String, Value>,
    /// Its parse (always succeeds: objects are validated when built or changed).
    args: EngineArgs,
}

impl MockEngineArgs {
    /// Validates `object` with the CLI's parser; `context` prefixes the message.
    fn parse(context: &str, object: Map<String, Value>) -> PyResult<Self> {
        let text = Value::Object(object.clone()).to_string();
        let args = EngineArgs::from_json(context, &text)
            .map_err(|err| PyValueError::new_err(err.message().to_owned()))?;
        Ok(Self { object, args })
    }

    /// The JSON text of the keys set (what `--extra-engine-args` would be given).
    pub fn json_text(&self) -> String {
        Value::Object(self.object.clone()).to_string()
    }

    /// A copy with `key` set to `value` (`null` unsets it), validated.
    fn with_field(&self, key: &str, value: Value) -> PyResult<Self> {
        let mut object = self.object.clone();
        if key == "worker_type" {
            // The role is one setting: the flags it is stored as give way to the new value.
            object.shift_remove("is_prefill");
            object.shift_remove("is_decode");
        }
        if value.is_null() && none_means_unset(key) {
            object.shift_remove(key);
        } else {
            object.insert(key.to_owned(), value);
        }
        Self::parse(OWNER, object)
    }

    /// The value a property reads.
    fn field(&self, key: &str) -> Value {
        let args = &self.args;
        match key {
            "engine_type" => Value::from(match args.engine_type {
                EngineType::Vllm => "vllm",
                EngineType::Sglang => "sglang",
                EngineType::Trtllm => "trtllm",
            }),
            "num_gpu_blocks" => Value::from(args.num_gpu_blocks),
            "block_size" => Value::from(args.block_size),
            "max_model_len" => args.max_model_len.map_or(Value::Null, Value::from),
            "max_num_seqs" => args.max_num_seqs.map_or(Value::Null, Value::from),
            "max_num_batched_tokens" => {
                args.max_num_batched_tokens.map_or(Value::Null, Value::from)
            }
            "enable_prefix_caching" => Value::Bool(args.enable_prefix_caching),
            "enable_chunked_prefill" => Value::Bool(args.enable_chunked_prefill),
            "speedup_ratio" => Value::from(args.speedup_ratio),
            "decode_speedup_ratio" => Value::from(args.decode_speedup_ratio),
            "dp_size" => Value::from(args.dp_size),
            "worker_type" => Value::from(match args.worker_type {
                WorkerType::Aggregated => "aggregated",
                WorkerType::Prefill => "prefill",
                WorkerType::Decode => "decode",
            }),
            "preemption_mode" => Value::from(match args.preemption_mode {
                PreemptionMode::Lifo => "lifo",
                PreemptionMode::Fifo => "fifo",
            }),
            "kv_transfer_timing_mode" => Value::from(match args.kv_transfer_timing_mode {
                KvTransferTimingMode::FullPrompt => "full_prompt",
                KvTransferTimingMode::DestinationMissing => "destination_missing",
            }),
            "kv_bytes_per_token" => args.kv_bytes_per_token.map_or(Value::Null, Value::from),
            "kv_transfer_bandwidth" => args.kv_transfer_bandwidth.map_or(Value::Null, Value::from),
            _ => match self.object.get(key) {
                Some(value) if !value.is_null() => value.clone(),
                _ => unset_value(key),
            },
        }
    }

    fn get(&self, py: Python<'_>, key: &str) -> PyResult<Py<PyAny>> {
        let value = self.field(key);
        let sub = match kind(key) {
            Kind::SubObject(sub) if !value.is_null() => sub,
            _ => return Ok(convert::from_json(py, &value)?.unbind()),
        };
        let Value::Object(fields) = value else {
            return Ok(convert::from_json(py, &value)?.unbind());
        };
        Ok(match sub {
            SubObject::Sglang => Py::new(py, SglangArgs { fields })?.into_any(),
            SubObject::Trtllm => Py::new(py, TrtllmArgs { fields })?.into_any(),
            SubObject::Reasoning => Py::new(py, ReasoningConfig { fields })?.into_any(),
        })
    }

    fn set(&mut self, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let json = convert::to_json(key, kind(key), value)?;
        *self = self.with_field(key, json)?;
        Ok(())
    }
}

/// Declares the class's Python methods plus one property per key: `readonly` keys get a
/// getter, `writable` keys a getter and a validating setter (`key => setter_fn_name`).
macro_rules! mock_engine_args_methods {
    (
        readonly: [$($ro:ident),* $(,)?],
        writable: [$($rw:ident => $setter:ident),* $(,)?],
        $($methods:tt)*
    ) => {
        #[pymethods]
        impl MockEngineArgs {
            $(
                #[getter]
                fn $ro(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                    self.get(py, stringify!($ro))
                }
            )*
            $(
                #[getter]
                fn $rw(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                    self.get(py, stringify!($rw))
                }

                #[setter]
                fn $setter(&mut self, value: &Bound<'_, PyAny>) -> PyResult<()> {
                    self.set(stringify!($rw), value)
                }
            )*
            $($methods)*
        }
    };
}

mock_engine_args_methods! {
    readonly: [
        engine_type, block_size, max_num_seqs, max_num_batched_tokens, enable_chunked_prefill,
        speedup_ratio, decode_speedup_ratio, dp_size, startup_time, planner_profile_data,
        enable_local_indexer, bootstrap_port, handoff_session_timeout_ms, kv_bytes_per_token,
        kv_transfer_bandwidth, kv_transfer_timing_mode, reasoning, response_replay_trace_path,
        zmq_kv_events_port, zmq_replay_port, preemption_mode, router_queue_policy, sglang,
        trtllm, num_g2_blocks, num_g3_blocks, offload_batch_size, bandwidth_g1_to_g2_gbps,
        bandwidth_g2_to_g1_gbps, bandwidth_g2_to_g3_gbps, bandwidth_g3_to_g2_gbps,
        enable_g4_storage, bandwidth_g2_to_g4_gbps, bandwidth_g4_to_g2_gbps, max_model_len,
        g1_backend,
    ],
    writable: [
        num_gpu_blocks => set_num_gpu_blocks,
        enable_prefix_caching => set_enable_prefix_caching,
        worker_type => set_worker_type,
        aic_backend => set_aic_backend,
        aic_system => set_aic_system,
        aic_backend_version => set_aic_backend_version,
        aic_tp_size => set_aic_tp_size,
        aic_model_path => set_aic_model_path,
        aic_moe_tp_size => set_aic_moe_tp_size,
        aic_moe_ep_size => set_aic_moe_ep_size,
        aic_attention_dp_size => set_aic_attention_dp_size,
        aic_nextn => set_aic_nextn,
        aic_nextn_accept_rates => set_aic_nextn_accept_rates,
        aic_mtp_seed => set_aic_mtp_seed,
        aic_gemm_dtype => set_aic_gemm_dtype,
        aic_moe_dtype => set_aic_moe_dtype,
        aic_fmha_dtype => set_aic_fmha_dtype,
        aic_kv_cache_dtype => set_aic_kv_cache_dtype,
        aic_comm_dtype => set_aic_comm_dtype,
        gpu_memory_utilization => set_gpu_memory_utilization,
        mem_fraction_static => set_mem_fraction_static,
        free_gpu_memory_fraction => set_free_gpu_memory_fraction,
    ],

    /// Builds engine arguments from the reference's keywords; a value the engine-args parser
    /// rejects raises `ValueError` naming the field.
    #[new]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let keywords = [
            CONSTRUCTOR_FIRST_KEYWORDS,
            TIMING_KEYWORDS,
            CONSTRUCTOR_LAST_KEYWORDS,
        ]
        .concat();
        let given = bind_arguments(OWNER, &keywords, keywords.len(), args, kwargs)?;
        let mut object = Map::new();
        for (key, value) in given {
            let json = convert::to_json(key, kind(key), &value)?;
            if !(json.is_null() && none_means_unset(key)) {
                object.insert(key.to_owned(), json);
            }
        }
        Self::parse(OWNER, object)
    }

    /// Parses engine-args JSON exactly as `--extra-engine-args` does.
    #[staticmethod]
    fn from_json(config_json: &Bound<'_, PyAny>) -> PyResult<Self> {
        let text = convert::str_arg("config_json", config_json)?;
        let args = EngineArgs::from_json("MockEngineArgs.from_json", &text)
            .map_err(|err| PyValueError::new_err(err.message().to_owned()))?;
        let object = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(object)) => object,
            _ => Map::new(),
        };
        Ok(Self { object, args })
    }

    /// An independent copy.
    fn copy(&self) -> Self {
        self.clone()
    }

    fn __copy__(&self) -> Self {
        self.clone()
    }

    fn __deepcopy__(&self, _memo: &Bound<'_, PyAny>) -> Self {
        self.clone()
    }

    /// Pickles as its JSON, rebuilt by `from_json` (so engine arguments can be sent to worker
    /// processes of a sweep).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, (String,))> {
        let rebuild = slf.get_type().getattr("from_json")?;
        Ok((rebuild, (slf.borrow().json_text(),)))
    }

    /// A copy with the given fields replaced (`None` keeps a field as it is).
    #[pyo3(signature = (*args, **kwargs))]
    fn with_overrides(
        &self,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let keywords = [OVERRIDE_FIRST_KEYWORDS, TIMING_KEYWORDS, OVERRIDE_LAST_KEYWORDS].concat();
        let given = bind_arguments(
            "MockEngineArgs.with_overrides",
            &keywords,
            keywords.len(),
            args,
            kwargs,
        )?;
        let mut object = self.object.clone();
        for (key, value) in given {
            let json = convert::to_json(key, kind(key), &value)?;
            if json.is_null() {
                continue;
            }
            if key == "worker_type" {
                object.shift_remove("is_prefill");
                object.shift_remove("is_decode");
            }
            object.insert(key.to_owned(), json);
        }
        Self::parse(OWNER, object)
    }

    fn is_prefill(&self) -> bool {
        self.args.worker_type == WorkerType::Prefill
    }

    fn is_decode(&self) -> bool {
        self.args.worker_type == WorkerType::Decode
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        fields_repr(py, OWNER, &self.object)
    }
}

/// `Name(key=value, ...)` with Python reprs of the values.
fn fields_repr(py: Python<'_>, name: &str, fields: &Map<String, Value>) -> PyResult<String> {
    let mut parts = Vec::with_capacity(fields.len());
    for (key, value) in fields {
        let value = convert::from_json(py, value)?;
        parts.push(format!("{key}={}", value.repr()?));
    }
    Ok(format!("{name}({})", parts.join(", ")))
}

/// Builds a sub-object's fields from `*args, **kwargs`.
fn sub_object_from_arguments(
    owner: &str,
    params: &[(&'static str, Kind)],
    required: bool,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Map<String, Value>> {
    let names: Vec<&'static str> = params.iter().map(|(name, _)| *name).collect();
    let given = bind_arguments(owner, &names, names.len(), args, kwargs)?;
    if required {
        if let Some(missing) = names
            .iter()
            .find(|name| !given.iter().any(|(given, _)| given == *name))
        {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "{owner}() missing required argument '{missing}'"
            )));
        }
    }
    let mut fields = Map::new();
    for (key, value) in given {
        let kind = params
            .iter()
            .find(|(name, _)| *name == key)
            .map_or(Kind::Any, |(_, kind)| *kind);
        let json = convert::to_json(key, kind, &value)?;
        if !json.is_null() {
            fields.insert(key.to_owned(), json);
        }
    }
    Ok(fields)
}

const SGLANG_PARAMS: &[(&str, Kind)] = &[
    ("schedule_policy", Kind::Str),
    ("page_size", Kind::UInt { max: u64::MAX }),
    ("max_prefill_tokens", Kind::UInt { max: u64::MAX }),
    ("chunked_prefill_size", Kind::UInt { max: u64::MAX }),
    ("clip_max_new_tokens", Kind::UInt { max: u64::MAX }),
    ("schedule_conservativeness", Kind::Float),
];

const TRTLLM_PARAMS: &[(&str, Kind)] = &[("capacity_scheduler_policy", Kind::Str)];

const REASONING_PARAMS: &[(&str, Kind)] = &[
    (
        "start_thinking_token_id",
        Kind::UInt {
            max: u32::MAX as u64,
        },
    ),
    (
        "end_thinking_token_id",
        Kind::UInt {
            max: u32::MAX as u64,
        },
    ),
    ("thinking_ratio", Kind::Float),
];

/// The Python methods of one sub-object class of `MockEngineArgs` (defined in
/// [`crate::sub_objects`]): its fields as given, checked when the engine arguments holding it
/// are built; `repr` and pickling as its constructor call.
macro_rules! sub_object_methods {
    ($name:ident, $params:expr, required = $required:expr) => {
        #[pymethods]
        impl $name {
            #[new]
            #[pyo3(signature = (*args, **kwargs))]
            fn new(
                args: &Bound<'_, PyTuple>,
                kwargs: Option<&Bound<'_, PyDict>>,
            ) -> PyResult<Self> {
                let fields =
                    sub_object_from_arguments(stringify!($name), $params, $required, args, kwargs)?;
                Ok(Self { fields })
            }

            fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
                fields_repr(py, stringify!($name), &self.fields)
            }

            /// Pickles as the constructor call that rebuilds it.
            fn __reduce__<'py>(
                slf: &Bound<'py, Self>,
            ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
                let arguments = positional_values(slf.py(), $params, &slf.borrow().fields)?;
                Ok((slf.get_type().into_any(), arguments))
            }
        }
    };
}

sub_object_methods!(SglangArgs, SGLANG_PARAMS, required = false);
sub_object_methods!(TrtllmArgs, TRTLLM_PARAMS, required = false);
sub_object_methods!(ReasoningConfig, REASONING_PARAMS, required = true);

/// A sub-object's fields as its constructor's positional arguments (`None` where unset).
fn positional_values<'py>(
    py: Python<'py>,
    params: &[(&str, Kind)],
    fields: &Map<String, Value>,
) -> PyResult<Bound<'py, PyTuple>> {
    let values = params
        .iter()
        .map(|(name, _)| convert::from_json(py, fields.get(*name).unwrap_or(&Value::Null)))
        .collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, values)
}

/// The JSON text of engine arguments given to the replay API as an object.
pub fn object_json_text(value: &Bound<'_, PyAny>) -> Option<String> {
    value
        .cast::<MockEngineArgs>()
        .ok()
        .map(|object| object.borrow().json_text())
}
