//! The sub-objects of `MockEngineArgs` (`SglangArgs`, `TrtllmArgs`, `ReasoningConfig`) as
//! data: each holds its fields as given, as JSON. Their Python constructors, `repr` and
//! pickling are in [`crate::engine_args`]; here is only what a conversion needs to recognise
//! them, so that [`crate::convert`] and the engine arguments both build on this module.
//!
//! INTERFACE
//! - [`SubObject`]: which of the three classes.
//! - [`SglangArgs`], [`TrtllmArgs`], [`ReasoningConfig`]: the classes.
//! - [`sub_object_fields`], [`any_sub_object_fields`], [`sub_object_class_name`]: a value's
//!   fields if it is (one of) the classes; a class's Python name.

use pyo3::prelude::*;
use serde_json::{Map, Value};

/// One of the engine-args sub-object classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubObject {
    Sglang,
    Trtllm,
    Reasoning,
}

/// SGLang scheduler settings (`MockEngineArgs(sglang=SglangArgs(...))`).
#[pyclass(module = "dynamo.mocker")]
#[derive(Clone)]
pub struct SglangArgs {
    pub(crate) fields: Map<String, Value>,
}

/// TRT-LLM scheduler settings (`MockEngineArgs(trtllm=TrtllmArgs(...))`).
#[pyclass(module = "dynamo.mocker")]
#[derive(Clone)]
pub struct TrtllmArgs {
    pub(crate) fields: Map<String, Value>,
}

/// Thinking-token settings (`MockEngineArgs(reasoning=ReasoningConfig(...))`); no effect on
/// an offline replay.
#[pyclass(module = "dynamo.mocker")]
#[derive(Clone)]
pub struct ReasoningConfig {
    pub(crate) fields: Map<String, Value>,
}

/// The fields of `value` if it is the sub-object class `sub` stands for.
pub fn sub_object_fields(sub: SubObject, value: &Bound<'_, PyAny>) -> Option<Map<String, Value>> {
    match sub {
        SubObject::Sglang => value
            .cast::<SglangArgs>()
            .ok()
            .map(|object| object.borrow().fields.clone()),
        SubObject::Trtllm => value
            .cast::<TrtllmArgs>()
            .ok()
            .map(|object| object.borrow().fields.clone()),
        SubObject::Reasoning => value
            .cast::<ReasoningConfig>()
            .ok()
            .map(|object| object.borrow().fields.clone()),
    }
}

/// The fields of `value` if it is any of the sub-object classes (inside a dict of engine args).
pub fn any_sub_object_fields(value: &Bound<'_, PyAny>) -> Option<Map<String, Value>> {
    [SubObject::Sglang, SubObject::Trtllm, SubObject::Reasoning]
        .into_iter()
        .find_map(|sub| sub_object_fields(sub, value))
}

pub fn sub_object_class_name(sub: SubObject) -> &'static str {
    match sub {
        SubObject::Sglang => "SglangArgs",
        SubObject::Trtllm => "TrtllmArgs",
        SubObject::Reasoning => "ReasoningConfig",
    }
}
