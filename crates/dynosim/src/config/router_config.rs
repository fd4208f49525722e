//! The `--router-config` JSON object (KvRouterConfig). Round robin accepts and ignores it; the
//! KV router (a later issue) reads its fields.
//!
//! The object is checked like the reference checks it: the accepted key set (unknown and
//! repeated keys rejected), each key's JSON type (`null` only where the field is optional),
//! enum names (exact, lower case), ranges, then the cross-field rules. A JSON array, which the
//! reference takes as a positional struct, is rejected here.
//!
//! Accepted but without effect on an offline replay: `use_kv_events`, `durable_kv_events`
//! (`true` is an error), `router_replica_sync`, `router_track_output_blocks`,
//! `router_tracking_*`, `router_snapshot_threshold`, `router_reset_states`, `router_ttl_secs`,
//! `router_event_threads`, `skip_initial_worker_wait`, `use_remote_indexer`, `serve_indexer`,
//! `host_cache_hit_weight`, `disk_cache_hit_weight`, `shared_cache_*`,
//! `router_predicted_ttl_secs` and the `conditional_disagg_*` keys.
//! `router_policy_config` names a policy YAML file, read and validated here
//! (see `router::kv::policy`).

use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::json_fields::{
    parse_inline_or_file, read_object, show_f64, unknown_field_message, ObjectError,
};
use super::router_policy::{PolicyProfile, RouterPolicyConfig, RouterQueuePolicy};
use crate::error::{Error, Result};

/// How the router estimates the prefill load of active requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrefillLoadModel {
    /// Prompt tokens count fully until the request's first token.
    #[default]
    None,
    /// Decays the oldest active prefill over its AIC-predicted duration.
    Aic,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum TrackingHash {
    #[default]
    PublicXxh3V1,
    KeyedXxh3V1,
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum SharedCacheType {
    None,
    Hicache,
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ConditionalDisaggPolicy {
    IslBounding,
    PrefillLoad,
    IslOrLoad,
}

/// Validated router configuration: the settings that shape KV routing, defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct RouterConfig {
    /// The JSON object as given (validated key set).
    pub raw: Map<String, Value>,
    /// Multiplier on cached prefix blocks credited against a worker's prefill load.
    pub overlap_score_credit: f64,
    /// Shrinks that credit when the worker has excess active prefill.
    pub overlap_score_credit_decay: f64,
    /// Scale on the adjusted prefill blocks.
    pub prefill_load_scale: f64,
    /// Block-equivalent cost of each active request.
    pub decode_active_request_weight: f64,
    /// 0 = pick the cheapest worker; above 0 = softmax sampling at this temperature.
    pub router_temperature: f64,
    pub router_track_active_blocks: bool,
    pub router_assume_kv_reuse: bool,
    pub router_track_prefill_tokens: bool,
    pub router_prefill_load_model: PrefillLoadModel,
    /// Enables the router queue: a worker is busy above this fraction of its token budget.
    pub router_queue_threshold: Option<f64>,
    pub router_queue_policy: RouterQueuePolicy,
    /// The policy file named by `router_policy_config` (or `--router-policy-config`).
    pub policy_file: Option<RouterPolicyConfig>,
    /// Selects a `models:` profile of the policy file (`--model-name`; not a JSON key).
    pub policy_model_name: Option<String>,
    /// Seed of the router's tie-breaking and sampling RNG (`--router-seed`; not a JSON key).
    pub router_seed: u64,
    /// The AIC model of the `aic` prefill-load model (the `--aic-*` flags; not a JSON key).
    pub aic: Option<crate::aic::AicConfig>,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            raw: Map::new(),
            overlap_score_credit: 1.0,
            overlap_score_credit_decay: 0.0,
            prefill_load_scale: 1.0,
            decode_active_request_weight: 0.0,
            router_temperature: 0.0,
            router_track_active_blocks: true,
            router_assume_kv_reuse: true,
            router_track_prefill_tokens: true,
            router_prefill_load_model: PrefillLoadModel::None,
            router_queue_threshold: None,
            router_queue_policy: RouterQueuePolicy::Fcfs,
            policy_file: None,
            policy_model_name: None,
            router_seed: 0,
            aic: None,
        }
    }
}

impl RouterConfig {
    /// Parses and validates the router-config JSON text given to `flag` (e.g.
    /// `--router-config`). Errors are usage errors naming the flag and the field.
    pub fn from_json(flag: &str, text: &str) -> Result<Self> {
        parse_router_config(text).map_err(|message| Error::usage_about(flag, message))
    }

    /// [`RouterConfig::from_json`] for a flag's value: one that is not JSON but names an existing
    /// file is read as a JSON file (as the reference's mocker reads `--extra-engine-args`), and
    /// messages then name the file. Inline JSON is read exactly as by `from_json`.
    pub fn from_json_or_file(flag: &str, value: &str) -> Result<Self> {
        parse_inline_or_file(flag, value, parse_router_config)
    }

    /// The router queue's classes: the policy file's profile for the model name, else the
    /// single class from `router_queue_threshold` and `router_queue_policy`.
    pub fn policy_profile(&self) -> PolicyProfile {
        match &self.policy_file {
            Some(file) => file.resolve_profile(
                self.policy_model_name.as_deref(),
                self.router_queue_threshold,
                self.router_queue_policy,
            ),
            None => PolicyProfile::synthetic(self.router_queue_threshold, self.router_queue_policy),
        }
    }
}

/// Declares the accepted keys (in the reference's order) and each key's type; `Option<T>`
/// types accept `null`, the others do not.
macro_rules! router_config_keys {
    ($($key:ident: $ty:ty,)*) => {
        /// Every key `--router-config` accepts, in the reference's order.
        pub const ACCEPTED_KEYS: &[&str] = &[$(stringify!($key)),*];

        /// Each accepted key with the Rust type its JSON value is read as (`"f64"`,
        /// `"Option<u32>"`, ...): lets another front (Python) check argument types up front.
        pub const ACCEPTED_KEY_TYPES: &[(&str, &str)] = &[$((stringify!($key), stringify!($ty))),*];

        // Some keys are only type-checked: they have no effect offline.
        #[derive(Default)]
        #[allow(dead_code)]
        struct RawRouterConfig {
            $($key: Option<$ty>,)*
        }

        impl RawRouterConfig {
            fn from_object(object: &Map<String, Value>) -> std::result::Result<Self, String> {
                let mut raw = Self::default();
                for (key, value) in object {
                    match key.as_str() {
                        $(stringify!($key) => raw.$key = Some(typed(key, value)?),)*
                        _ => return Err(unknown_field_message(key, ACCEPTED_KEYS)),
                    }
                }
                Ok(raw)
            }
        }
    };
}

router_config_keys! {
    overlap_score_credit: f64,
    overlap_score_credit_decay: f64,
    prefill_load_scale: f64,
    decode_active_request_weight: f64,
    overlap_score_weight: Option<f64>,
    host_cache_hit_weight: f64,
    disk_cache_hit_weight: f64,
    router_temperature: f64,
    use_kv_events: bool,
    durable_kv_events: bool,
    router_replica_sync: bool,
    router_track_active_blocks: bool,
    router_track_output_blocks: bool,
    router_assume_kv_reuse: bool,
    router_track_prefill_tokens: bool,
    router_tracking_hash: TrackingHash,
    router_tracking_key_file: Option<PathBuf>,
    router_tracking_key_id: Option<String>,
    router_prefill_load_model: PrefillLoadModel,
    router_snapshot_threshold: Option<u32>,
    router_reset_states: bool,
    router_ttl_secs: f64,
    router_queue_threshold: Option<f64>,
    router_policy_config: Option<String>,
    router_event_threads: u32,
    skip_initial_worker_wait: bool,
    router_queue_policy: RouterQueuePolicy,
    use_remote_indexer: bool,
    serve_indexer: bool,
    shared_cache_multiplier: f64,
    shared_cache_type: SharedCacheType,
    router_predicted_ttl_secs: Option<f64>,
    conditional_disagg_enabled: bool,
    conditional_disagg_policy: ConditionalDisaggPolicy,
    conditional_disagg_eff_isl_threshold: usize,
    conditional_disagg_eff_isl_ratio_threshold: f64,
    conditional_disagg_prefill_busy_threshold: Option<f64>,
    conditional_disagg_decode_busy_threshold: Option<f64>,
}

fn typed<T: DeserializeOwned>(key: &str, value: &Value) -> std::result::Result<T, String> {
    T::deserialize(value).map_err(|error| format!("{key}: {error}"))
}

fn at_least(key: &str, value: f64, min: f64) -> std::result::Result<(), String> {
    if value >= min {
        Ok(())
    } else {
        Err(format!(
            "{key} must be greater than or equal to {}, got {}",
            show_f64(min),
            show_f64(value)
        ))
    }
}

fn between(key: &str, value: f64, min: f64, max: f64) -> std::result::Result<(), String> {
    if value >= min && value <= max {
        Ok(())
    } else {
        Err(format!(
            "{key} must be between {} and {}, got {}",
            show_f64(min),
            show_f64(max),
            show_f64(value)
        ))
    }
}

fn parse_router_config(text: &str) -> std::result::Result<RouterConfig, String> {
    let object = read_object(text, true).map_err(|error| match error {
        ObjectError::Syntax(message) => format!("invalid JSON: {message}"),
        ObjectError::NotObject => "router config must be a JSON object".to_string(),
    })?;
    let raw = RawRouterConfig::from_object(&object)?;

    if raw.durable_kv_events == Some(true) {
        return Err("durable_kv_events=true is not supported by this runtime".into());
    }

    let defaults = RouterConfig::default();
    let mut overlap_score_credit = raw
        .overlap_score_credit
        .unwrap_or(defaults.overlap_score_credit);
    let mut prefill_load_scale = raw
        .prefill_load_scale
        .unwrap_or(defaults.prefill_load_scale);
    // Deprecated alias: sets the prefill scale, and 0 also switches the overlap credit off.
    if let Some(Some(weight)) = raw.overlap_score_weight {
        prefill_load_scale = weight;
        if weight == 0.0 {
            overlap_score_credit = 0.0;
        }
    }
    let config = RouterConfig {
        raw: Map::new(),
        overlap_score_credit,
        overlap_score_credit_decay: raw
            .overlap_score_credit_decay
            .unwrap_or(defaults.overlap_score_credit_decay),
        prefill_load_scale,
        decode_active_request_weight: raw
            .decode_active_request_weight
            .unwrap_or(defaults.decode_active_request_weight),
        router_temperature: raw
            .router_temperature
            .unwrap_or(defaults.router_temperature),
        router_track_active_blocks: raw
            .router_track_active_blocks
            .unwrap_or(defaults.router_track_active_blocks),
        router_assume_kv_reuse: raw
            .router_assume_kv_reuse
            .unwrap_or(defaults.router_assume_kv_reuse),
        router_track_prefill_tokens: raw
            .router_track_prefill_tokens
            .unwrap_or(defaults.router_track_prefill_tokens),
        router_prefill_load_model: raw.router_prefill_load_model.unwrap_or_default(),
        router_queue_threshold: raw.router_queue_threshold.flatten(),
        router_queue_policy: raw.router_queue_policy.unwrap_or_default(),
        ..RouterConfig::default()
    };

    // Ranges, in the reference's order.
    if !(config.overlap_score_credit.is_finite() && config.overlap_score_credit >= 0.0) {
        return Err(format!(
            "overlap_score_credit must be a finite, non-negative number, got {}",
            show_f64(config.overlap_score_credit)
        ));
    }
    at_least(
        "overlap_score_credit_decay",
        config.overlap_score_credit_decay,
        0.0,
    )?;
    at_least("prefill_load_scale", config.prefill_load_scale, 0.0)?;
    between(
        "decode_active_request_weight",
        config.decode_active_request_weight,
        0.0,
        f64::MAX,
    )?;
    between(
        "host_cache_hit_weight",
        raw.host_cache_hit_weight.unwrap_or(0.75),
        0.0,
        1.0,
    )?;
    between(
        "disk_cache_hit_weight",
        raw.disk_cache_hit_weight.unwrap_or(0.25),
        0.0,
        1.0,
    )?;
    at_least("router_temperature", config.router_temperature, 0.0)?;
    at_least("router_ttl_secs", raw.router_ttl_secs.unwrap_or(120.0), 0.0)?;
    if let Some(threshold) = config.router_queue_threshold {
        at_least("router_queue_threshold", threshold, 0.0)?;
    }
    if raw.router_event_threads == Some(0) {
        return Err("router_event_threads must be at least 1".into());
    }
    between(
        "shared_cache_multiplier",
        raw.shared_cache_multiplier.unwrap_or(0.0),
        0.0,
        1.0,
    )?;
    let predicted_ttl = raw.router_predicted_ttl_secs.flatten();
    if let Some(ttl) = predicted_ttl {
        at_least("router_predicted_ttl_secs", ttl, 0.0)?;
    }
    between(
        "conditional_disagg_eff_isl_ratio_threshold",
        raw.conditional_disagg_eff_isl_ratio_threshold
            .unwrap_or(0.7),
        0.0,
        1.0,
    )?;
    if let Some(Some(threshold)) = raw.conditional_disagg_prefill_busy_threshold {
        at_least("conditional_disagg_prefill_busy_threshold", threshold, 0.0)?;
    }
    if let Some(Some(threshold)) = raw.conditional_disagg_decode_busy_threshold {
        at_least("conditional_disagg_decode_busy_threshold", threshold, 0.0)?;
    }

    // Rules across fields, in the reference's order.
    let has_key_file = matches!(raw.router_tracking_key_file, Some(Some(_)));
    let key_id = raw.router_tracking_key_id.clone().flatten();
    match raw.router_tracking_hash.unwrap_or_default() {
        TrackingHash::PublicXxh3V1 if has_key_file || key_id.is_some() => {
            return Err(
                "router tracking key options require router_tracking_hash=keyed-xxh3-v1".into(),
            );
        }
        TrackingHash::KeyedXxh3V1 if !has_key_file => {
            return Err("keyed-xxh3-v1 requires router_tracking_key_file".into());
        }
        TrackingHash::KeyedXxh3V1
            if !key_id
                .as_deref()
                .is_some_and(|id| !id.is_empty() && id.trim() == id) =>
        {
            return Err("keyed-xxh3-v1 requires a nonempty router_tracking_key_id".into());
        }
        _ => {}
    }
    if raw.router_track_output_blocks == Some(true) && !config.router_track_active_blocks {
        return Err("router_track_output_blocks requires router_track_active_blocks=true".into());
    }
    if config.router_prefill_load_model != PrefillLoadModel::None
        && !config.router_track_prefill_tokens
    {
        return Err("router_prefill_load_model requires router_track_prefill_tokens=true".into());
    }
    let use_remote_indexer = raw.use_remote_indexer.unwrap_or(false);
    let serve_indexer = raw.serve_indexer.unwrap_or(false);
    if use_remote_indexer && serve_indexer {
        return Err("use_remote_indexer and serve_indexer are mutually exclusive".into());
    }
    if serve_indexer && config.overlap_score_credit == 0.0 {
        return Err("serve_indexer requires overlap_score_credit > 0".into());
    }
    if predicted_ttl.is_some() && !raw.use_kv_events.unwrap_or(true) {
        return Err("router_predicted_ttl_secs requires use_kv_events=true".into());
    }
    let policy_file = match &raw.router_policy_config {
        Some(Some(path)) => Some(
            RouterPolicyConfig::from_path(path)
                .map_err(|message| format!("router_policy_config: {message}"))?,
        ),
        _ => None,
    };

    Ok(RouterConfig {
        raw: object,
        policy_file,
        ..config
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FLAG: &str = "--router-config";

    fn parse(json: &str) -> RouterConfig {
        RouterConfig::from_json(FLAG, json).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    fn assert_error(json: &str, expected: &str) {
        let error = RouterConfig::from_json(FLAG, json).expect_err(json);
        assert_eq!(error.kind(), crate::error::ErrorKind::Usage);
        assert_eq!(
            error.message(),
            format!("{FLAG}: {expected}"),
            "input: {json}"
        );
    }

    #[test]
    fn empty_object_gives_the_defaults() {
        assert_eq!(parse("{}"), RouterConfig::default());
    }

    #[test]
    fn values_are_kept() {
        let config = parse(
            r#"{"overlap_score_credit":0.5,"prefill_load_scale":2,"router_temperature":0.1,
                "router_queue_threshold":1.5,"router_queue_policy":"lcfs",
                "router_prefill_load_model":"aic","router_track_active_blocks":false,
                "use_kv_events":false,"router_snapshot_threshold":3}"#,
        );
        assert_eq!(config.overlap_score_credit, 0.5);
        assert_eq!(config.prefill_load_scale, 2.0);
        assert_eq!(config.router_temperature, 0.1);
        assert_eq!(config.router_queue_threshold, Some(1.5));
        assert_eq!(config.router_queue_policy, RouterQueuePolicy::Lcfs);
        assert_eq!(config.router_prefill_load_model, PrefillLoadModel::Aic);
        assert!(!config.router_track_active_blocks);
        assert_eq!(config.raw.len(), 9);
    }

    #[test]
    fn deprecated_overlap_score_weight_sets_the_scale() {
        let zero = parse(r#"{"overlap_score_weight":0}"#);
        assert_eq!(
            (zero.overlap_score_credit, zero.prefill_load_scale),
            (0.0, 0.0)
        );
        let two = parse(r#"{"overlap_score_weight":2,"prefill_load_scale":5}"#);
        assert_eq!(
            (two.overlap_score_credit, two.prefill_load_scale),
            (1.0, 2.0)
        );
        assert_eq!(
            parse(r#"{"overlap_score_weight":null}"#),
            RouterConfig {
                raw: parse(r#"{"overlap_score_weight":null}"#).raw,
                ..RouterConfig::default()
            }
        );
        assert_error(
            r#"{"overlap_score_weight":-1}"#,
            "prefill_load_scale must be greater than or equal to 0, got -1",
        );
    }

    #[test]
    fn unknown_key_lists_the_accepted_keys() {
        let error = RouterConfig::from_json(FLAG, r#"{"foo":1}"#).unwrap_err();
        assert!(error.message().starts_with(
            "--router-config: unknown field `foo`, expected one of `overlap_score_credit`, \
             `overlap_score_credit_decay`, `prefill_load_scale`,"
        ));
        assert!(error
            .message()
            .ends_with("`conditional_disagg_decode_busy_threshold`"));
        assert_eq!(ACCEPTED_KEYS.len(), 38);
        // The frontend's busy thresholds are not router-config keys.
        assert!(
            RouterConfig::from_json(FLAG, r#"{"active_decode_blocks_threshold":1}"#)
                .unwrap_err()
                .message()
                .contains("unknown field `active_decode_blocks_threshold`")
        );
    }

    #[test]
    fn only_an_object_is_accepted() {
        for text in ["[1]", "[]", "5", "null"] {
            assert_error(text, "router config must be a JSON object");
        }
        let error = RouterConfig::from_json(FLAG, "{'a':1}").unwrap_err();
        assert!(error
            .message()
            .starts_with("--router-config: invalid JSON: key must be a string"));
        let error =
            RouterConfig::from_json(FLAG, r#"{"router_temperature":1,"router_temperature":2}"#)
                .unwrap_err();
        assert!(
            error
                .message()
                .contains("duplicate field `router_temperature`"),
            "{error}"
        );
    }

    #[test]
    fn types_are_checked() {
        assert_error(
            r#"{"router_temperature":null}"#,
            "router_temperature: invalid type: null, expected f64",
        );
        assert_error(
            r#"{"router_temperature":"x"}"#,
            r#"router_temperature: invalid type: string "x", expected f64"#,
        );
        assert_error(
            r#"{"use_kv_events":null}"#,
            "use_kv_events: invalid type: null, expected a boolean",
        );
        assert_error(
            r#"{"router_event_threads":-1}"#,
            "router_event_threads: invalid value: integer `-1`, expected u32",
        );
        assert_error(
            r#"{"router_queue_policy":"LCFS"}"#,
            "router_queue_policy: unknown variant `LCFS`, expected one of `fcfs`, `lcfs`, `wspt`",
        );
        assert_error(
            r#"{"shared_cache_type":"x"}"#,
            "shared_cache_type: unknown variant `x`, expected `none` or `hicache`",
        );
        assert_error(
            r#"{"conditional_disagg_policy":"PREFILL_LOAD"}"#,
            "conditional_disagg_policy: unknown variant `PREFILL_LOAD`, expected one of \
             `isl_bounding`, `prefill_load`, `isl_or_load`",
        );
        assert_error(
            r#"{"router_tracking_hash":"x"}"#,
            "router_tracking_hash: unknown variant `x`, expected `public-xxh3-v1` or `keyed-xxh3-v1`",
        );
        // Optional fields accept null.
        parse(
            r#"{"router_queue_threshold":null,"router_policy_config":null,"router_snapshot_threshold":null}"#,
        );
    }

    #[test]
    fn range_rules() {
        let cases = [
            (r#"{"overlap_score_credit":-1}"#, "overlap_score_credit must be a finite, non-negative number, got -1"),
            (r#"{"overlap_score_credit_decay":-1}"#, "overlap_score_credit_decay must be greater than or equal to 0, got -1"),
            (r#"{"prefill_load_scale":-1}"#, "prefill_load_scale must be greater than or equal to 0, got -1"),
            (r#"{"host_cache_hit_weight":2}"#, "host_cache_hit_weight must be between 0 and 1, got 2"),
            (r#"{"disk_cache_hit_weight":-0.5}"#, "disk_cache_hit_weight must be between 0 and 1, got -0.5"),
            (r#"{"router_temperature":-1}"#, "router_temperature must be greater than or equal to 0, got -1"),
            (r#"{"router_ttl_secs":-1}"#, "router_ttl_secs must be greater than or equal to 0, got -1"),
            (r#"{"router_queue_threshold":-1}"#, "router_queue_threshold must be greater than or equal to 0, got -1"),
            (r#"{"router_event_threads":0}"#, "router_event_threads must be at least 1"),
            (r#"{"shared_cache_multiplier":2}"#, "shared_cache_multiplier must be between 0 and 1, got 2"),
            (r#"{"router_predicted_ttl_secs":-1}"#, "router_predicted_ttl_secs must be greater than or equal to 0, got -1"),
            (
                r#"{"conditional_disagg_eff_isl_ratio_threshold":2}"#,
                "conditional_disagg_eff_isl_ratio_threshold must be between 0 and 1, got 2",
            ),
            (
                r#"{"conditional_disagg_prefill_busy_threshold":-1}"#,
                "conditional_disagg_prefill_busy_threshold must be greater than or equal to 0, got -1",
            ),
            (
                r#"{"conditional_disagg_decode_busy_threshold":-1}"#,
                "conditional_disagg_decode_busy_threshold must be greater than or equal to 0, got -1",
            ),
            // The reference's order: the credit is checked before the TTL.
            (r#"{"router_ttl_secs":-1,"overlap_score_credit":-1}"#, "overlap_score_credit must be a finite, non-negative number, got -1"),
        ];
        for (json, expected) in cases {
            assert_error(json, expected);
        }
        let error =
            RouterConfig::from_json(FLAG, r#"{"decode_active_request_weight":-1}"#).unwrap_err();
        assert!(error.message().starts_with(
            "--router-config: decode_active_request_weight must be between 0 and 1797693134862315"
        ));
    }

    #[test]
    fn cross_field_rules() {
        let cases = [
            (
                r#"{"durable_kv_events":true}"#,
                "durable_kv_events=true is not supported by this runtime",
            ),
            (
                r#"{"router_tracking_hash":"keyed-xxh3-v1"}"#,
                "keyed-xxh3-v1 requires router_tracking_key_file",
            ),
            (
                r#"{"router_tracking_hash":"keyed-xxh3-v1","router_tracking_key_file":"/x","router_tracking_key_id":" a"}"#,
                "keyed-xxh3-v1 requires a nonempty router_tracking_key_id",
            ),
            (
                r#"{"router_tracking_key_id":"a"}"#,
                "router tracking key options require router_tracking_hash=keyed-xxh3-v1",
            ),
            (
                r#"{"router_track_output_blocks":true,"router_track_active_blocks":false}"#,
                "router_track_output_blocks requires router_track_active_blocks=true",
            ),
            (
                r#"{"router_prefill_load_model":"aic","router_track_prefill_tokens":false}"#,
                "router_prefill_load_model requires router_track_prefill_tokens=true",
            ),
            (
                r#"{"use_remote_indexer":true,"serve_indexer":true}"#,
                "use_remote_indexer and serve_indexer are mutually exclusive",
            ),
            (
                r#"{"serve_indexer":true,"overlap_score_credit":0}"#,
                "serve_indexer requires overlap_score_credit > 0",
            ),
            (
                r#"{"router_predicted_ttl_secs":1,"use_kv_events":false}"#,
                "router_predicted_ttl_secs requires use_kv_events=true",
            ),
            (
                r#"{"router_policy_config":"/nonexistent/p.yaml"}"#,
                "router_policy_config: failed to read router policy config /nonexistent/p.yaml: \
                 No such file or directory (os error 2)",
            ),
        ];
        for (json, expected) in cases {
            assert_error(json, expected);
        }
        parse(r#"{"durable_kv_events":false,"router_reset_states":true}"#);
        parse(
            r#"{"router_tracking_hash":"keyed-xxh3-v1","router_tracking_key_file":"/x","router_tracking_key_id":"a"}"#,
        );
    }

    #[test]
    fn engine_override_uses_its_own_wording() {
        assert_eq!(
            RouterQueuePolicy::from_engine_arg("wspt"),
            Ok(RouterQueuePolicy::Wspt)
        );
        assert_eq!(
            RouterQueuePolicy::from_engine_arg("sjf"),
            Err(r#"unknown queue policy: "sjf", expected 'fcfs', 'lcfs', or 'wspt'"#.to_string())
        );
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(text in ".{0,200}") {
            let _ = RouterConfig::from_json(FLAG, &text);
        }
    }
}
