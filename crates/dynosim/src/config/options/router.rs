//! The router's settings: `--router-config` (with a policy file), the model name and seed
//! the KV router carries, and the AIC model of its prefill-load estimate.
//!
//! INTERFACE
//! - [`ReplayOptions::parse_router_config`]: the JSON option, parsed (step 10).
//! - [`ReplayOptions::finish_router_config`]: the last router checks, giving the config.
//! - [`attach_router_aic`]: the `--aic-*` model joins the KV router's config.

use super::checks::{flag_error, non_negative, usage};
use super::ReplayOptions;
use crate::aic::AicConfig;
use crate::config::{ReplaySpec, RouterConfig, RouterMode};
use crate::error::Result;

/// The `--aic-*` model goes to the KV router's `aic` prefill-load estimate, and only there.
pub(super) fn attach_router_aic(spec: &mut ReplaySpec, aic: Option<AicConfig>) -> Result<()> {
    use crate::config::router_config::PrefillLoadModel;
    let aic_load_model = spec
        .router_config
        .as_ref()
        .is_some_and(|config| config.router_prefill_load_model == PrefillLoadModel::Aic);
    let Some(aic) = aic else {
        if aic_load_model && spec.router_mode == RouterMode::KvRouter {
            return Err(flag_error(
                "--router-config",
                "router_prefill_load_model='aic' requires aic_perf_config",
            ));
        }
        return Ok(());
    };
    if spec.router_mode != RouterMode::KvRouter {
        return Err(usage("aic_perf_config requires router_mode='kv_router'"));
    }
    if !aic_load_model {
        return Err(usage(
            "aic_perf_config requires router_prefill_load_model='aic' in --router-config",
        )
        .with_api_message(
            "aic_perf_config requires router_prefill_load_model='aic' in router_config",
        ));
    }
    if let Some(config) = spec.router_config.as_mut() {
        config.aic = Some(aic);
    }
    Ok(())
}

impl ReplayOptions {
    pub(super) fn parse_router_config(&self) -> Result<Option<RouterConfig>> {
        if let Some(policy_path) = &self.router_policy_config {
            // The front injects the policy path into the router config, which must then be an
            // object; the path replaces any `router_policy_config` the object names.
            let mut object = match &self.router_config {
                Some(value) => {
                    let (text, file) = crate::config::json_fields::inline_or_file(value)
                        .map_err(|message| flag_error("--router-config", message))?;
                    let value: serde_json::Value =
                        serde_json::from_str(&text).map_err(|error| {
                            let message = format!("invalid JSON: {error}");
                            let message =
                                crate::config::json_fields::about_source(value, file, message);
                            flag_error("--router-config", message)
                        })?;
                    match value {
                        serde_json::Value::Object(object) => object,
                        _ => return Err(usage("--router-config must contain a JSON object")),
                    }
                }
                None => serde_json::Map::new(),
            };
            object.remove("router_policy_config");
            let text = serde_json::Value::Object(object).to_string();
            let mut config = RouterConfig::from_json("--router-config", &text)?;
            let source = if self.router_policy_config_from_env {
                "DYN_ROUTER_POLICY_CONFIG"
            } else {
                "--router-policy-config"
            };
            if policy_path.is_empty() {
                return Err(flag_error(source, "the path is empty"));
            }
            let file = crate::config::router_policy::RouterPolicyConfig::from_path(policy_path)
                .map_err(|message| flag_error(source, message))?;
            config.policy_file = Some(file);
            config.raw.insert(
                "router_policy_config".into(),
                serde_json::Value::String(policy_path.clone()),
            );
            return Ok(Some(config));
        }
        self.router_config
            .as_deref()
            .map(|text| RouterConfig::from_json_or_file("--router-config", text))
            .transpose()
    }

    /// The last router checks: the model name, the router seed, and for the KV router a
    /// config (defaults when none was given) carrying the seed and the model name.
    pub(super) fn finish_router_config(
        &self,
        router_mode: RouterMode,
        router_config: Option<RouterConfig>,
    ) -> Result<Option<RouterConfig>> {
        if self.model_name.as_deref() == Some("") {
            return Err(flag_error("--model-name", "model_name must be non-empty"));
        }
        let seed = non_negative("--router-seed", self.router_seed)? as u64;
        if router_mode != RouterMode::KvRouter {
            return Ok(router_config);
        }
        let mut config = router_config.unwrap_or_default();
        config.router_seed = seed;
        config.policy_model_name = self.model_name.clone();
        Ok(Some(config))
    }
}
