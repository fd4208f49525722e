//! One candidate's row of the sweep, and the text of a cell: what the objectives, the tables
//! and the report page all read.
//!
//! INTERFACE
//! - [`Row`]: one candidate's outcome (hash, settings, GPUs, error, report keys).
//! - [`cell`]: a value as a table cell shows it.

use serde_json::{Map, Value};

use crate::settings::Settings;

/// One candidate's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Position in the sweep's candidate list (the table's order).
    pub index: usize,
    /// Hash of the candidate's resolved settings (see [`crate::candidate_hash`]).
    pub candidate: String,
    pub settings: Settings,
    /// GPUs the deployment uses (workers × `aic_tp_size` × `dp_size`, summed over pools);
    /// `None` when its settings were rejected.
    pub gpus: Option<u64>,
    /// Empty when it ran; otherwise why it did not.
    pub error: String,
    /// The report's keys and values (empty for a failed row).
    pub report: Map<String, Value>,
}

impl Row {
    /// A report key's value as a float.
    pub fn metric(&self, key: &str) -> Option<f64> {
        self.report.get(key)?.as_f64()
    }
}

/// The text of one cell: strings bare, numbers in their shortest exact form, objects as JSON.
pub fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => match number.as_i64() {
            Some(int) => int.to_string(),
            None => number.as_f64().unwrap_or(f64::NAN).to_string(),
        },
        Some(other) => other.to_string(),
    }
}
