//! Small helpers shared by the JSON-object options (`--extra-engine-args`, `--router-config`):
//! a tri-state field slot that keeps "omitted" apart from an explicit `null`, serde-style
//! messages for unknown and duplicate keys, a top-level object reader, and a flag's value read
//! as inline JSON or as the JSON file it names.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeOwned, Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::Error;

/// One field of a JSON object as given: omitted, explicit `null`, or a typed value.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum Slot<T> {
    #[default]
    Missing,
    Null,
    Set(T),
}

impl<T: DeserializeOwned> Slot<T> {
    /// Types `value` as `T`; `null` is kept as [`Slot::Null`] for the caller to judge. The error
    /// names the key, followed by serde's own description (e.g. `invalid type: string "5",
    /// expected usize`).
    pub(crate) fn parse(key: &str, value: Value) -> Result<Self, String> {
        if value.is_null() {
            return Ok(Slot::Null);
        }
        T::deserialize(value)
            .map(Slot::Set)
            .map_err(|error| format!("{key}: {error}"))
    }
}

impl<T> Slot<T> {
    /// For fields where `null` means "none": `None` when omitted, `Some(None)` for `null`.
    pub(crate) fn nullable(self) -> Option<Option<T>> {
        match self {
            Slot::Missing => None,
            Slot::Null => Some(None),
            Slot::Set(value) => Some(Some(value)),
        }
    }

    /// For fields where `null` is an error (the reference's "X must not be null").
    pub(crate) fn non_null(self, key: &str) -> Result<Option<T>, String> {
        match self {
            Slot::Missing => Ok(None),
            Slot::Null => Err(format!("{key} must not be null")),
            Slot::Set(value) => Ok(Some(value)),
        }
    }

    /// The value if one was given (`null` and omitted both give `None`).
    pub(crate) fn value(self) -> Option<T> {
        match self {
            Slot::Set(value) => Some(value),
            Slot::Missing | Slot::Null => None,
        }
    }
}

/// serde's wording for a key outside the accepted set.
pub(crate) fn unknown_field_message(key: &str, accepted: &[&str]) -> String {
    let expected = accepted
        .iter()
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>();
    match expected.len() {
        0 => format!("unknown field `{key}`, there are no fields"),
        1 => format!("unknown field `{key}`, expected {}", expected[0]),
        2 => format!(
            "unknown field `{key}`, expected {} or {}",
            expected[0], expected[1]
        ),
        _ => format!(
            "unknown field `{key}`, expected one of {}",
            expected.join(", ")
        ),
    }
}

/// Why a text could not be read as a JSON object.
#[derive(Debug)]
pub(crate) enum ObjectError {
    /// Not JSON at all, or a repeated key (serde's message, with line and column).
    Syntax(String),
    /// Valid JSON of another type.
    NotObject,
}

/// Reads `text` as one JSON object whose keys keep the document order. When
/// `reject_duplicates` is set, a repeated key is an error (as with a serde struct); otherwise the
/// last value wins (as with Python's `json.loads`).
pub(crate) fn read_object(
    text: &str,
    reject_duplicates: bool,
) -> Result<Map<String, Value>, ObjectError> {
    let value: Value =
        serde_json::from_str(text).map_err(|error| ObjectError::Syntax(error.to_string()))?;
    let Value::Object(object) = value else {
        return Err(ObjectError::NotObject);
    };
    if reject_duplicates {
        serde_json::from_str::<DuplicateKeyCheck>(text)
            .map_err(|error| ObjectError::Syntax(error.to_string()))?;
    }
    Ok(object)
}

/// Walks a top-level object only to fail on a repeated key.
struct DuplicateKeyCheck;

impl<'de> Deserialize<'de> for DuplicateKeyCheck {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(DuplicateKeyVisitor)
    }
}

struct DuplicateKeyVisitor;

impl<'de> Visitor<'de> for DuplicateKeyVisitor {
    type Value = DuplicateKeyCheck;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(A::Error::custom(format!("duplicate field `{key}`")));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(DuplicateKeyCheck)
    }
}

/// Formats a float the way the reference's messages do (Rust `Display`: `0`, `-1`, `1.5`,
/// `inf`, `NaN`).
pub(crate) fn show_f64(value: f64) -> String {
    format!("{value}")
}

/// The JSON text a JSON flag's value stands for: the value itself when it parses as JSON
/// (inline JSON behaves exactly as before), else the contents of the file it names when one
/// exists (the reference's mocker takes `--extra-engine-args` as a file path). Returns the text
/// and the file it came from.
pub(crate) fn inline_or_file(value: &str) -> Result<(Cow<'_, str>, Option<&str>), String> {
    if serde_json::from_str::<IgnoredAny>(value).is_ok() {
        return Ok((Cow::Borrowed(value), None));
    }
    let path = std::path::Path::new(value);
    if !value.is_empty() && path.is_file() {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("{value}: cannot read the file: {error}"))?;
        return Ok((Cow::Owned(text), Some(value)));
    }
    Ok((Cow::Borrowed(value), None))
}

/// A JSON flag's value (inline JSON, or a JSON file it names: [`inline_or_file`]) read with
/// `parse`. Errors are usage errors naming the flag, and the file when one was read.
pub(crate) fn parse_inline_or_file<T>(
    flag: &str,
    value: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> crate::error::Result<T> {
    let (json, file) =
        inline_or_file(value).map_err(|message| Error::usage_about(flag, message))?;
    parse(&json).map_err(|message| Error::usage_about(flag, about_source(value, file, message)))
}

/// A message about JSON read by [`inline_or_file`]: prefixed with the file's name when it came
/// from one; for a value that is neither JSON nor a file, says that both were tried.
pub(crate) fn about_source(value: &str, file: Option<&str>, message: String) -> String {
    match file {
        Some(file) => format!("{file}: {message}"),
        None if message.starts_with("invalid JSON")
            && !value.trim_start().starts_with(['{', '[', '"']) =>
        {
            format!(
                "{message} (the value is neither inline JSON nor the path of an existing JSON \
                 file)"
            )
        }
        None => message,
    }
}
