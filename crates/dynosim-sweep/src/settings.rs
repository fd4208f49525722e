//! One run's settings, named like the Python API's keyword arguments, and the one mapping from
//! them to [`ReplayOptions`] (what the candidate runs) and to `dynosim` flags (the command line
//! that reproduces it).
//!
//! INTERFACE
//! - [`Settings`]: a resolved candidate, setting name -> JSON value (objects for the engine
//!   arguments and router config). [`Settings::to_options`] fills `ReplayOptions`;
//!   [`Settings::command_line`] gives the `dynosim` command line of the same run.
//! - [`check_value`] types one value of a setting (a top-level name or a dotted
//!   `extra_engine_args.*` / `prefill_engine_args.*` / `decode_engine_args.*` /
//!   `router_config.*` key) as the spec is read, so a bad spec fails before any run.
//!
//! Which settings a sweep takes, their types, defaults and flags come from the settings table
//! (`dynosim::config::settings`, the settings marked for sweeps); this module only reads and
//! writes their JSON values. The aggregated and disaggregated engine arguments and the router
//! config are JSON objects handed to the same parsers the CLI's JSON flags use; the AIC
//! settings use the flat `aic_*` names of the CLI (the Python API groups them in
//! `aic_perf_config`).

use std::path::PathBuf;

use dynosim::config::settings::{Fallback, JsonObject, Kind, Setting, SettingValue, SETTINGS};
use dynosim::config::{engine_args, router_config, ReplayOptions};
use serde_json::{Map, Value};

/// Every setting a sweep accepts, grouped as a run is described (workload, deployment, router,
/// goals, AIC), in the table's order within a group: the order of its command line.
fn sweep_settings() -> Vec<&'static Setting> {
    let mut settings: Vec<&'static Setting> =
        SETTINGS.iter().filter(|setting| setting.sweep).collect();
    settings.sort_by_key(|setting| setting.group);
    settings
}

/// The sweep setting named `name` (`trace_file` is another name of `trace_files`).
fn sweep_setting(name: &str) -> Option<&'static Setting> {
    let name = if name == "trace_file" {
        "trace_files"
    } else {
        name
    };
    SETTINGS
        .iter()
        .find(|setting| setting.sweep && setting.name == name)
}

/// Assigns one setting to its option field, reading its JSON value as the setting's type.
fn assign(options: &mut ReplayOptions, name: &str, value: &Value) -> Result<(), String> {
    let setting = sweep_setting(name).ok_or_else(|| unknown_setting_message(name))?;
    let value = read(setting, value)?;
    setting.apply(options, value)
}

/// The settings of `options` that differ from their defaults (the inverse of
/// [`Settings::to_options`]).
fn written(options: &ReplayOptions) -> Map<String, Value> {
    let defaults = ReplayOptions::default();
    let mut values = Map::new();
    for setting in sweep_settings() {
        let (Some(value), Some(default)) = (setting.read(options), setting.read(&defaults)) else {
            continue;
        };
        let (value, default) = (write(setting, value), write(setting, default));
        if value != default {
            values.insert(setting.name.to_owned(), value);
        }
    }
    values
}

/// The settings holding JSON objects, with the key types their parser accepts.
fn object_settings() -> Vec<(&'static str, &'static [(&'static str, &'static str)])> {
    sweep_settings()
        .into_iter()
        .filter_map(|setting| match setting.kind {
            Kind::Json(JsonObject::EngineArgs) => {
                Some((setting.name, engine_args::ACCEPTED_KEY_TYPES))
            }
            Kind::Json(JsonObject::RouterConfig) => {
                Some((setting.name, router_config::ACCEPTED_KEY_TYPES))
            }
            _ => None,
        })
        .collect()
}

/// The object settings as a sentence lists them: `a, b, c or d`.
fn object_setting_names() -> String {
    let names: Vec<&str> = object_settings().iter().map(|(name, _)| *name).collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

fn unknown_setting_message(name: &str) -> String {
    let names: Vec<&str> = std::iter::once("trace_file")
        .chain(sweep_settings().iter().map(|setting| setting.name))
        .collect();
    format!(
        "unknown setting '{name}'; expected one of: {}, or a dotted key into {}",
        names.join(", "),
        object_setting_names()
    )
}

/// A setting's value from its JSON value; `null` unsets an optional setting.
fn read(setting: &Setting, value: &Value) -> Result<SettingValue, String> {
    let optional = setting.default == Fallback::Unset;
    match (setting.kind, value) {
        (Kind::Json(_) | Kind::Paths, Value::Null) => return Ok(SettingValue::Unset),
        (_, Value::Null) if optional => return Ok(SettingValue::Unset),
        _ => {}
    }
    match setting.kind {
        Kind::Int => value
            .as_i64()
            .map(SettingValue::Int)
            .ok_or_else(|| format!("expected an integer, got {value}")),
        Kind::Float => value
            .as_f64()
            .map(SettingValue::Float)
            .ok_or_else(|| format!("expected a number, got {value}")),
        Kind::Json(_) => match value {
            Value::Object(_) => Ok(SettingValue::Text(value.to_string())),
            _ => Err(format!("expected a mapping, got {value}")),
        },
        Kind::Paths => read_paths(value).map(SettingValue::Paths),
        Kind::Text | Kind::Path | Kind::Switch | Kind::PythonObject => value
            .as_str()
            .map(|text| SettingValue::Text(text.to_owned()))
            .ok_or_else(|| format!("expected a string, got {value}")),
    }
}

/// Trace file(s): a path, or a list of paths.
fn read_paths(value: &Value) -> Result<Vec<PathBuf>, String> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::String(path) => Ok(vec![PathBuf::from(path)]),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(PathBuf::from)
                    .ok_or_else(|| format!("expected a path, got {item}"))
            })
            .collect(),
        _ => Err(format!("expected a path or a list of paths, got {value}")),
    }
}

/// A setting's value as JSON (the inverse of [`read`]): an object setting's JSON text as the
/// object (text that is not JSON stays text, and fails where the settings are read, as it
/// would have as an option).
fn write(setting: &Setting, value: SettingValue) -> Value {
    match value {
        SettingValue::Unset => Value::Null,
        SettingValue::Int(int) => Value::from(int),
        SettingValue::Float(float) => Value::from(float),
        SettingValue::Switch(on) => Value::from(on),
        SettingValue::Text(text) => match setting.kind {
            Kind::Json(_) => serde_json::from_str(&text).unwrap_or(Value::from(text)),
            _ => Value::from(text),
        },
        SettingValue::Path(path) => Value::from(path.display().to_string()),
        SettingValue::Paths(paths) => Value::Array(
            paths
                .iter()
                .map(|path| Value::from(path.display().to_string()))
                .collect(),
        ),
    }
}

/// Checks that `key` names a setting (or a key of an object setting) and that `value` has its
/// type. Messages name what is wrong, not where: the caller prefixes the spec file and key.
pub fn check_value(key: &str, value: &Value) -> Result<(), String> {
    if let Some((object, field)) = key.split_once('.') {
        let objects = object_settings();
        let Some(&(_, key_types)) = objects.iter().find(|(name, _)| *name == object) else {
            return Err(format!(
                "'{object}' holds no nested settings; dotted keys go into {}",
                object_setting_names()
            ));
        };
        let Some(&(_, type_name)) = key_types.iter().find(|(name, _)| *name == field) else {
            let names: Vec<&str> = key_types.iter().map(|(name, _)| *name).collect();
            return Err(format!(
                "unknown {object} key '{field}'; expected one of: {}",
                names.join(", ")
            ));
        };
        return check_json_type(type_name, value);
    }
    let setting = sweep_setting(key).ok_or_else(|| unknown_setting_message(key))?;
    let mut scratch = ReplayOptions::default();
    assign(&mut scratch, key, value)?;
    if let Kind::Json(_) = setting.kind {
        if let Value::Object(object) = value {
            for (field, field_value) in object {
                check_value(&format!("{key}.{field}"), field_value)
                    .map_err(|message| format!("{field}: {message}"))?;
            }
        }
    }
    Ok(())
}

/// Checks a nested value against the Rust type its parser reads it as (as named in the
/// parsers' key tables); types this cannot judge (enums, nested objects) are left to the
/// parser, whose message then becomes the candidate's error.
fn check_json_type(type_name: &str, value: &Value) -> Result<(), String> {
    if let Some(inner) = type_name
        .strip_prefix("Option<")
        .and_then(|rest| rest.strip_suffix('>'))
    {
        return if value.is_null() {
            Ok(())
        } else {
            check_json_type(inner, value)
        };
    }
    let fits = match type_name {
        "usize" | "u64" | "u32" | "u16" => value.as_u64().is_some(),
        "f64" => value.is_number(),
        "bool" => value.is_boolean(),
        "String" | "PathBuf" => value.is_string(),
        _ => true,
    };
    if fits {
        Ok(())
    } else {
        let expected = match type_name {
            "usize" | "u64" | "u32" | "u16" => "a non-negative integer",
            "f64" => "a number",
            "bool" => "true or false",
            _ => "a string",
        };
        Err(format!("expected {expected}, got {value}"))
    }
}

/// A candidate's resolved settings: the base with the candidate's values applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub values: Map<String, Value>,
}

impl Settings {
    /// Applies one value: a dotted key sets a key of its object setting (created if unset).
    pub fn set(&mut self, key: &str, value: Value) {
        match key.split_once('.') {
            Some((object, field)) => {
                let slot = self
                    .values
                    .entry(object.to_owned())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(map) = slot {
                    map.insert(field.to_owned(), value);
                }
            }
            None => {
                self.values.insert(key.to_owned(), value);
            }
        }
    }

    /// The value of a key (dotted keys look into their object), if set.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match key.split_once('.') {
            Some((object, field)) => self.values.get(object)?.get(field),
            None => self.values.get(key),
        }
    }

    /// The settings of a run given as options: every option that differs from its default.
    pub fn from_options(options: &ReplayOptions) -> Settings {
        Settings {
            values: written(options),
        }
    }

    /// The replay options of this candidate (validated later by `ReplayOptions::into_spec`).
    pub fn to_options(&self) -> Result<ReplayOptions, String> {
        let mut options = ReplayOptions::default();
        for (name, value) in &self.values {
            assign(&mut options, name, value).map_err(|message| format!("{name}: {message}"))?;
        }
        Ok(options)
    }

    /// The `dynosim` command line that runs this candidate alone (shell-quoted), in the
    /// settings' table order; unset optional settings are left out.
    pub fn command_line(&self) -> String {
        let mut words: Vec<String> = vec!["dynosim".into()];
        for path in self.trace_paths() {
            words.push(path);
        }
        for setting in sweep_settings() {
            let Some(flag) = setting.flag() else {
                continue;
            };
            let Some(value) = self.values.get(setting.name) else {
                continue;
            };
            let text = match value {
                Value::Null => continue,
                Value::String(text) => text.clone(),
                Value::Number(number) => match number.as_i64() {
                    Some(int) => int.to_string(),
                    // Rust's shortest round-trip form, which the CLI's float parser reads back
                    // to the same value.
                    None => number.as_f64().unwrap_or(f64::NAN).to_string(),
                },
                other => other.to_string(),
            };
            words.push(flag);
            words.push(text);
        }
        shell_words::join(words)
    }

    fn trace_paths(&self) -> Vec<String> {
        let mut paths = Vec::new();
        for name in ["trace_file", "trace_files"] {
            if let Some(Ok(files)) = self.values.get(name).map(read_paths) {
                paths.extend(files.iter().map(|path| path.display().to_string()));
            }
        }
        paths
    }
}

/// Every flag the command lines may use (for tests that check them against the CLI).
pub fn flag_names() -> Vec<String> {
    sweep_settings()
        .iter()
        .filter_map(|setting| setting.flag())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(value: Value) -> Settings {
        Settings {
            values: value.as_object().unwrap().clone(),
        }
    }

    #[test]
    fn every_setting_fills_its_option() {
        let candidate = settings(json!({
            "trace_file": "t.jsonl",
            "num_workers": 3,
            "arrival_speedup_ratio": 2,
            "router_mode": "kv_router",
            "extra_engine_args": {"block_size": 16},
            "aic_tp_size": 2,
            "request_rate": null,
        }));
        let options = candidate.to_options().unwrap();
        assert_eq!(options.trace_files, vec![PathBuf::from("t.jsonl")]);
        assert_eq!(options.num_workers, 3);
        assert_eq!(options.arrival_speedup_ratio, 2.0);
        assert_eq!(options.router_mode, "kv_router");
        assert_eq!(
            options.extra_engine_args.as_deref(),
            Some(r#"{"block_size":16}"#)
        );
        assert_eq!(options.aic_tp_size, Some(2));
        assert_eq!(options.request_rate, None);
    }

    #[test]
    fn dotted_keys_set_object_fields() {
        let mut candidate = settings(json!({"extra_engine_args": {"block_size": 16}}));
        candidate.set("extra_engine_args.max_num_seqs", json!(8));
        candidate.set("router_config.overlap_score_credit", json!(0.5));
        assert_eq!(
            candidate.values["extra_engine_args"],
            json!({"block_size": 16, "max_num_seqs": 8})
        );
        assert_eq!(
            candidate.get("router_config.overlap_score_credit"),
            Some(&json!(0.5))
        );
    }

    #[test]
    fn command_line_quotes_and_orders_flags() {
        let candidate = settings(json!({
            "num_workers": 2,
            "extra_engine_args": {"block_size": 16},
            "trace_file": "my trace.jsonl",
            "shared_prefix_ratio": 0.1,
            "model_name": null,
        }));
        assert_eq!(
            candidate.command_line(),
            "dynosim 'my trace.jsonl' --shared-prefix-ratio 0.1 --extra-engine-args \
             '{\"block_size\":16}' --num-workers 2"
        );
    }

    #[test]
    fn bad_values_and_keys_are_named() {
        assert_eq!(
            check_value("num_workers", &json!("two")).unwrap_err(),
            "expected an integer, got \"two\""
        );
        assert!(check_value("num_wrokers", &json!(1))
            .unwrap_err()
            .starts_with("unknown setting 'num_wrokers'"));
        assert!(check_value("extra_engine_args.max_num_sqs", &json!(1))
            .unwrap_err()
            .starts_with("unknown extra_engine_args key 'max_num_sqs'"));
        assert_eq!(
            check_value("extra_engine_args.max_num_seqs", &json!(-1)).unwrap_err(),
            "expected a non-negative integer, got -1"
        );
        assert_eq!(
            check_value("extra_engine_args", &json!({"block_size": "x"})).unwrap_err(),
            "block_size: expected a non-negative integer, got \"x\""
        );
        assert!(check_value("router_config.overlap_score_credit", &json!(1)).is_ok());
        assert!(check_value("router_config.overlap_score_weight", &json!(null)).is_ok());
    }

    #[test]
    fn from_options_is_the_inverse_of_to_options() {
        let values = json!({
            "trace_files": ["a.jsonl"],
            "input_tokens": 300,
            "request_rate": 2.5,
            "random_range_ratio": 0.8,
            "replay_concurrency": 8,
            "router_mode": "kv_router",
            "extra_engine_args": {"block_size": 16, "aic_backend": "vllm"},
            "num_workers": 3,
            "aic_system": "h200_sxm",
        });
        let settings = Settings {
            values: values.as_object().unwrap().clone(),
        };
        let round_trip = Settings::from_options(&settings.to_options().unwrap());
        // Defaults are left out; everything set comes back with its value.
        assert_eq!(round_trip.values, settings.values);
        assert!(Settings::from_options(&ReplayOptions::default())
            .values
            .is_empty());
    }
}
