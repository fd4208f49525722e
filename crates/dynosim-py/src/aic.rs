//! `dynamo.llm.AicPerfConfig`: the AIC performance-model settings of a replay (the CLI's
//! `--aic-*` flags).
//!
//! INTERFACE
//! - [`AicPerfConfig`]: the settings given, checked when built by
//!   [`dynosim::config::ReplayOptions::aic_config`], the check the replay itself runs.
//! - [`apply`]: copies an `AicPerfConfig` (or a dict of its fields) onto the replay options.

use dynosim::config::settings::{Kind, PythonArg, Setting, SettingValue, SETTINGS};
use dynosim::config::spelling::python_message;
use dynosim::config::ReplayOptions;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::convert::{bind_arguments, opt_int_arg, opt_str_arg};

const OWNER: &str = "AicPerfConfig";

/// The constructor's parameters in the stub's order; the first three are required.
const PARAMETERS: &[&str] = &[
    "aic_backend",
    "aic_system",
    "aic_model_path",
    "aic_tp_size",
    "aic_backend_version",
    "aic_moe_tp_size",
    "aic_moe_ep_size",
    "aic_attention_dp_size",
    "aic_nextn",
    "aic_nextn_accept_rates",
    "aic_gemm_dtype",
    "aic_moe_dtype",
    "aic_fmha_dtype",
    "aic_kv_cache_dtype",
    "aic_comm_dtype",
];
const REQUIRED: usize = 3;

/// The AIC performance-model settings (`dynamo.llm.AicPerfConfig`).
#[pyclass(module = "dynamo.llm", name = "AicPerfConfig")]
#[derive(Clone)]
pub struct AicPerfConfig {
    /// The options holding only these settings (the replay copies them over).
    options: ReplayOptions,
}

/// The AIC settings of the settings table (the fields of `aic_perf_config`).
fn aic_settings() -> impl Iterator<Item = &'static Setting> {
    SETTINGS
        .iter()
        .filter(|setting| setting.python == PythonArg::FieldOf("aic_perf_config"))
}

/// Sets one AIC field of `options` from a Python value, naming `aic_perf_config.<field>` in
/// type errors; unknown fields are a `ValueError`.
fn set_field(options: &mut ReplayOptions, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let Some(setting) = aic_settings().find(|setting| setting.name == key) else {
        return Err(PyValueError::new_err(format!(
            "aic_perf_config: unknown field '{key}'"
        )));
    };
    let name = format!("aic_perf_config.{key}");
    let given = match setting.kind {
        Kind::Int => opt_int_arg(&name, Some(value))?.map(SettingValue::Int),
        _ => opt_str_arg(&name, Some(value))?.map(SettingValue::Text),
    };
    setting
        .apply(options, given.unwrap_or(SettingValue::Unset))
        .map_err(|message| PyTypeError::new_err(format!("argument '{name}': {message}")))
}

/// Copies the AIC settings given to the replay API (an `AicPerfConfig` or a dict of its
/// fields) onto `options`, whose validation decides what is valid.
pub fn apply(options: &mut ReplayOptions, config: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
    let Some(config) = config.filter(|config| !config.is_none()) else {
        return Ok(());
    };
    if let Ok(object) = config.cast::<AicPerfConfig>() {
        let given = &object.borrow().options;
        for setting in aic_settings() {
            if let Some(value) = setting.read(given) {
                setting
                    .apply(options, value)
                    .map_err(PyTypeError::new_err)?;
            }
        }
        return Ok(());
    }
    let dict = config.cast::<PyDict>().map_err(|_| {
        let type_name = config
            .get_type()
            .name()
            .map(|name| name.to_string())
            .unwrap_or_default();
        PyTypeError::new_err(format!(
            "argument 'aic_perf_config': expected AicPerfConfig or a dict of its fields, got \
             '{type_name}'"
        ))
    })?;
    for (key, value) in dict.iter() {
        let key: String = key
            .extract()
            .map_err(|_| PyTypeError::new_err("argument 'aic_perf_config': keys must be str"))?;
        set_field(options, &key, &value)?;
    }
    Ok(())
}

#[pymethods]
impl AicPerfConfig {
    /// Builds the settings from the reference's arguments (`aic_backend`, `aic_system` and
    /// `aic_model_path` are required); values the replay would reject raise `ValueError` now.
    #[new]
    #[pyo3(signature = (*args, **kwargs))]
    fn new(args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let given = bind_arguments(OWNER, PARAMETERS, PARAMETERS.len(), args, kwargs)?;
        if let Some(missing) = PARAMETERS[..REQUIRED]
            .iter()
            .find(|name| !given.iter().any(|(given, _)| given == *name))
        {
            return Err(PyTypeError::new_err(format!(
                "{OWNER}() missing required argument '{missing}'"
            )));
        }
        let mut options = ReplayOptions::default();
        for (key, value) in &given {
            set_field(&mut options, key, value)?;
        }
        options
            .aic_config()
            .map_err(|err| PyValueError::new_err(python_message(&err)))?;
        Ok(Self { options })
    }

    /// Pickles as the constructor call that rebuilds it.
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let this = slf.borrow();
        let options = &this.options;
        let mut values = Vec::with_capacity(PARAMETERS.len());
        for name in PARAMETERS {
            let value = aic_settings()
                .find(|setting| setting.name == *name)
                .and_then(|setting| setting.read(options));
            values.push(match value {
                Some(SettingValue::Int(int)) => int.into_pyobject(py)?.into_any(),
                Some(SettingValue::Text(text)) => text.into_pyobject(py)?.into_any(),
                _ => py.None().into_bound(py),
            });
        }
        Ok((slf.get_type().into_any(), PyTuple::new(py, values)?))
    }

    fn __repr__(&self) -> String {
        let options = &self.options;
        let mut parts = Vec::new();
        let texts = [
            ("aic_backend", &options.aic_backend),
            ("aic_system", &options.aic_system),
            ("aic_model_path", &options.aic_model_path),
            ("aic_backend_version", &options.aic_backend_version),
            ("aic_nextn_accept_rates", &options.aic_nextn_accept_rates),
            ("aic_gemm_dtype", &options.aic_gemm_dtype),
            ("aic_moe_dtype", &options.aic_moe_dtype),
            ("aic_fmha_dtype", &options.aic_fmha_dtype),
            ("aic_kv_cache_dtype", &options.aic_kv_cache_dtype),
            ("aic_comm_dtype", &options.aic_comm_dtype),
        ];
        for (key, value) in texts {
            if let Some(value) = value {
                parts.push(format!("{key}={value:?}"));
            }
        }
        let ints = [
            ("aic_tp_size", options.aic_tp_size),
            ("aic_moe_tp_size", options.aic_moe_tp_size),
            ("aic_moe_ep_size", options.aic_moe_ep_size),
            ("aic_attention_dp_size", options.aic_attention_dp_size),
            ("aic_nextn", options.aic_nextn),
        ];
        for (key, value) in ints {
            if let Some(value) = value {
                parts.push(format!("{key}={value}"));
            }
        }
        format!("{OWNER}({})", parts.join(", "))
    }
}
