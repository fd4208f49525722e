//! Python values to and from the JSON values the Rust config parsers read.
//!
//! INTERFACE
//! - [`Kind`]: the Python type an argument must have, derived from the Rust type a parser reads
//!   the key as ([`Kind::of_rust_type`]), so the two fronts cannot drift apart.
//! - [`to_json`]: one argument to JSON, or a `TypeError` / `OverflowError` / `ValueError` naming
//!   the argument. Only types are checked here; values are the parsers' business.
//! - [`any_to_json`]: any plain Python value (dicts, lists, numbers incl. numpy scalars, paths)
//!   to JSON, naming the key path of anything that does not fit.
//! - [`from_json`]: a JSON value back to Python.
//! - [`bind_arguments`]: Python's argument binding for `*args, **kwargs` signatures, with
//!   Python's own `TypeError` wording.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

use crate::sub_objects::{self, SubObject};

/// The Python type an argument must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A non-negative integer (anything with `__index__`, so numpy integers too) up to `max`.
    UInt {
        max: u64,
    },
    /// A real number (`int`, `float`, numpy scalars); JSON cannot hold NaN or infinities.
    Float,
    Bool,
    Str,
    /// `str` or `os.PathLike`.
    Path,
    /// One of the engine-args sub-objects (`sglang`, `trtllm`, `reasoning`).
    SubObject(SubObject),
    /// Any JSON-like value.
    Any,
}

impl Kind {
    /// The kind for a key a Rust parser reads as `rust_type` (as spelled in its key table, e.g.
    /// `usize`, `Option<f64>`, `SglangArgs`). Unknown types accept any JSON value and leave the
    /// check to the parser.
    pub fn of_rust_type(rust_type: &str) -> Kind {
        let compact: String = rust_type.chars().filter(|c| !c.is_whitespace()).collect();
        let inner = compact
            .strip_prefix("Option<")
            .and_then(|rest| rest.strip_suffix('>'))
            .unwrap_or(&compact);
        match inner {
            "usize" | "u64" => Kind::UInt { max: u64::MAX },
            "u32" => Kind::UInt {
                max: u64::from(u32::MAX),
            },
            "u16" => Kind::UInt {
                max: u64::from(u16::MAX),
            },
            "f64" => Kind::Float,
            "bool" => Kind::Bool,
            "String"
            | "G1Backend"
            | "TrackingHash"
            | "PrefillLoadModel"
            | "RouterQueuePolicy"
            | "SharedCacheType"
            | "ConditionalDisaggPolicy" => Kind::Str,
            "PathBuf" => Kind::Path,
            "SglangArgs" => Kind::SubObject(SubObject::Sglang),
            "TrtllmArgs" => Kind::SubObject(SubObject::Trtllm),
            "ReasoningArgs" => Kind::SubObject(SubObject::Reasoning),
            _ => Kind::Any,
        }
    }

    /// The kind of `key` in a parser's `(key, rust type)` table.
    pub fn of_key(table: &[(&str, &str)], key: &str) -> Kind {
        table
            .iter()
            .find(|(name, _)| *name == key)
            .map_or(Kind::Any, |(_, rust_type)| Kind::of_rust_type(rust_type))
    }
}

pub fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// Re-raises `err` (a failed conversion of argument `name`) with the argument named, keeping
/// its type: `TypeError` and `OverflowError` stay what they are.
fn named(py: Python<'_>, name: &str, err: PyErr) -> PyErr {
    let message = format!("argument '{name}': {}", err.value(py));
    if err.is_instance_of::<PyOverflowError>(py) {
        PyOverflowError::new_err(message)
    } else if err.is_instance_of::<PyValueError>(py) {
        PyValueError::new_err(message)
    } else {
        PyTypeError::new_err(message)
    }
}

/// A Python integer (or `__index__` object) as a signed 64-bit value, for top-level arguments.
pub fn int_arg(name: &str, value: &Bound<'_, PyAny>) -> PyResult<i64> {
    if value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "argument '{name}': '{}' object cannot be interpreted as an integer",
            type_name(value)
        )));
    }
    value.extract::<i64>().map_err(|err| {
        let py = value.py();
        if err.is_instance_of::<PyOverflowError>(py) {
            PyOverflowError::new_err(format!(
                "argument '{name}': {} does not fit in a 64-bit integer",
                value.str().map(|s| s.to_string()).unwrap_or_default()
            ))
        } else {
            named(py, name, err)
        }
    })
}

/// An optional integer argument (`None` stays `None`).
pub fn opt_int_arg(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i64>> {
    match value {
        Some(value) if !value.is_none() => int_arg(name, value).map(Some),
        _ => Ok(None),
    }
}

/// A real-number argument: `int`, `float` or anything with `__float__` (not `str`).
pub fn float_arg(name: &str, value: &Bound<'_, PyAny>) -> PyResult<f64> {
    if value.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "argument '{name}': must be real number, not {}",
            type_name(value)
        )));
    }
    value
        .extract::<f64>()
        .map_err(|err| named(value.py(), name, err))
}

/// An optional real-number argument (`None` stays `None`).
pub fn opt_float_arg(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<f64>> {
    match value {
        Some(value) if !value.is_none() => float_arg(name, value).map(Some),
        _ => Ok(None),
    }
}

/// A text argument.
pub fn str_arg(name: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    value.extract::<String>().map_err(|_| {
        PyTypeError::new_err(format!(
            "argument '{name}': expected str, got '{}'",
            type_name(value)
        ))
    })
}

/// An optional text argument (`None` stays `None`).
pub fn opt_str_arg(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match value {
        Some(value) if !value.is_none() => str_arg(name, value).map(Some),
        _ => Ok(None),
    }
}

/// A finite float as a JSON number, or a `ValueError` naming `name`.
fn finite_number(name: &str, value: f64) -> PyResult<Value> {
    Number::from_f64(value).map(Value::Number).ok_or_else(|| {
        PyValueError::new_err(format!(
            "argument '{name}': must be a finite number, got {value}"
        ))
    })
}

/// Converts argument `name` of the given kind to JSON (`None` becomes `null`).
pub fn to_json(name: &str, kind: Kind, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if value.is_none() {
        return Ok(Value::Null);
    }
    let py = value.py();
    match kind {
        Kind::UInt { max } => {
            if value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(format!(
                    "argument '{name}': '{}' object cannot be interpreted as an integer",
                    type_name(value)
                )));
            }
            let int = value.extract::<u64>().map_err(|err| {
                if err.is_instance_of::<PyOverflowError>(py) {
                    let negative = value.lt(0).unwrap_or(false);
                    PyOverflowError::new_err(if negative {
                        format!("argument '{name}': can't convert negative int to unsigned")
                    } else {
                        format!("argument '{name}': int too big to convert (at most {max})")
                    })
                } else {
                    named(py, name, err)
                }
            })?;
            if int > max {
                return Err(PyOverflowError::new_err(format!(
                    "argument '{name}': {int} is out of range (at most {max})"
                )));
            }
            Ok(Value::from(int))
        }
        Kind::Float => finite_number(name, float_arg(name, value)?),
        Kind::Bool => value.extract::<bool>().map(Value::Bool).map_err(|_| {
            PyTypeError::new_err(format!(
                "argument '{name}': expected bool, got '{}'",
                type_name(value)
            ))
        }),
        Kind::Str => str_arg(name, value).map(Value::String),
        Kind::Path => path_text(name, value).map(Value::String),
        Kind::SubObject(sub) => sub_object_json(name, sub, value),
        Kind::Any => any_to_json(name, value),
    }
}

/// `str` or `os.PathLike` as UTF-8 text.
fn path_text(name: &str, value: &Bound<'_, PyAny>) -> PyResult<String> {
    let path = value.extract::<std::path::PathBuf>().map_err(|_| {
        PyTypeError::new_err(format!(
            "argument '{name}': expected str or os.PathLike, got '{}'",
            type_name(value)
        ))
    })?;
    path.into_os_string().into_string().map_err(|_| {
        PyValueError::new_err(format!("argument '{name}': the path is not valid UTF-8"))
    })
}

/// A sub-object argument: its class (`SglangArgs`, ...) or a plain dict.
fn sub_object_json(name: &str, sub: SubObject, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if let Some(object) = sub_objects::sub_object_fields(sub, value) {
        return Ok(Value::Object(object));
    }
    if value.is_instance_of::<PyDict>() {
        return any_to_json(name, value);
    }
    Err(PyTypeError::new_err(format!(
        "argument '{name}': expected {} or a dict, got '{}'",
        sub_objects::sub_object_class_name(sub),
        type_name(value)
    )))
}

/// Any plain Python value to JSON. `path` names the value in messages (`extra_engine_args`,
/// `extra_engine_args.sglang.page_size`, ...).
pub fn any_to_json(path: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    let py = value.py();
    if value.is_none() {
        return Ok(Value::Null);
    }
    if value.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(value.extract::<bool>()?));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(Value::String(value.extract::<String>()?));
    }
    if value.is_instance_of::<PyFloat>() {
        return finite_number(path, value.extract::<f64>()?);
    }
    // Integers, numpy integers and anything else with `__index__`.
    if value.is_instance_of::<PyInt>() || value.hasattr("__index__")? {
        if let Ok(int) = value.extract::<i64>() {
            return Ok(Value::from(int));
        }
        if let Ok(int) = value.extract::<u64>() {
            return Ok(Value::from(int));
        }
        return Err(PyOverflowError::new_err(format!(
            "argument '{path}': integer {} is out of range",
            value.str()?
        )));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut object = Map::new();
        for (key, item) in dict.iter() {
            let key: String = key.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "argument '{path}': keys must be str, got '{}'",
                    type_name(&key)
                ))
            })?;
            let item = any_to_json(&format!("{path}.{key}"), &item)?;
            object.insert(key, item);
        }
        return Ok(Value::Object(object));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for (index, item) in value.try_iter()?.enumerate() {
            items.push(any_to_json(&format!("{path}[{index}]"), &item?)?);
        }
        return Ok(Value::Array(items));
    }
    if value.hasattr("__fspath__")? {
        return path_text(path, value).map(Value::String);
    }
    if let Some(object) = sub_objects::any_sub_object_fields(value) {
        return Ok(Value::Object(object));
    }
    // numpy floating scalars and other real numbers.
    if value.hasattr("__float__")? {
        return finite_number(path, value.extract::<f64>()?);
    }
    let _ = py;
    Err(PyTypeError::new_err(format!(
        "argument '{path}': '{}' object is not a JSON value",
        type_name(value)
    )))
}

/// A JSON value as the Python value `json.loads` would give.
pub fn from_json<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Number(number) => {
            if let Some(int) = number.as_i64() {
                int.into_pyobject(py)?.into_any()
            } else if let Some(int) = number.as_u64() {
                int.into_pyobject(py)?.into_any()
            } else {
                number
                    .as_f64()
                    .unwrap_or(f64::NAN)
                    .into_pyobject(py)?
                    .into_any()
            }
        }
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(from_json(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(object) => {
            let dict = PyDict::new(py);
            for (key, item) in object {
                dict.set_item(key, from_json(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// Binds `args` and `kwargs` to `params` as Python would for
/// `def owner(p0, ..., p{positional-1}, *, the rest)`, every parameter optional. Returns the
/// given arguments in parameter order.
pub fn bind_arguments<'py>(
    owner: &str,
    params: &[&'static str],
    positional: usize,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Vec<(&'static str, Bound<'py, PyAny>)>> {
    if args.len() > positional {
        return Err(PyTypeError::new_err(format!(
            "{owner}() takes from 0 to {positional} positional arguments but {} were given",
            args.len()
        )));
    }
    let mut slots: Vec<Option<Bound<'py, PyAny>>> = vec![None; params.len()];
    for (slot, arg) in slots.iter_mut().zip(args.iter()) {
        *slot = Some(arg);
    }
    if let Some(kwargs) = kwargs {
        for (key, value) in kwargs.iter() {
            let key: String = key.extract()?;
            let Some(index) = params.iter().position(|param| *param == key) else {
                return Err(PyTypeError::new_err(format!(
                    "{owner}() got an unexpected keyword argument '{key}'"
                )));
            };
            if slots[index].is_some() {
                return Err(PyTypeError::new_err(format!(
                    "{owner}() got multiple values for argument '{key}'"
                )));
            }
            slots[index] = Some(value);
        }
    }
    Ok(params
        .iter()
        .zip(slots)
        .filter_map(|(param, slot)| slot.map(|value| (*param, value)))
        .collect())
}
