//! The `--aic-*` flags: which go together, their ranges, giving an [`AicConfig`].
//!
//! INTERFACE
//! - [`ReplayOptions::aic_config`]: the checked settings, `None` when none is set (also the
//!   Python front's `AicPerfConfig` check).

use super::checks::{flag_error, usage};
use super::ReplayOptions;
use crate::aic::{normalize_dtype, AicConfig};
use crate::error::Result;

/// Python's `value.strip().lower() in {"auto", "none", "null", ""}`: an AIC dtype that means
/// "the model default" does not count as an AIC setting.
pub(super) fn meaningful_dtype(value: &Option<String>) -> bool {
    value.as_deref().is_some_and(|dtype| {
        let dtype = dtype.trim();
        !(dtype.is_empty() || ["auto", "none", "null"].contains(&dtype.to_lowercase().as_str()))
    })
}

impl ReplayOptions {
    /// The AIC performance-model settings, checked (step 11): `None` when none is set. The
    /// Python front's `AicPerfConfig` checks its values here when it is built.
    pub fn aic_config(&self) -> Result<Option<AicConfig>> {
        self.check_aic_flags()
    }

    /// The AIC flags: any one set requires the three that select a model (step 11); then they
    /// become the AIC model of the KV router's prefill-load estimate.
    pub(super) fn check_aic_flags(&self) -> Result<Option<AicConfig>> {
        let any_set = self.aic_backend.is_some()
            || self.aic_system.is_some()
            || self.aic_model_path.is_some()
            || self.aic_backend_version.is_some()
            || self.aic_tp_size.is_some()
            || self.aic_moe_tp_size.is_some()
            || self.aic_moe_ep_size.is_some()
            || self.aic_attention_dp_size.is_some()
            || meaningful_dtype(&self.aic_gemm_dtype)
            || meaningful_dtype(&self.aic_moe_dtype)
            || meaningful_dtype(&self.aic_fmha_dtype)
            || meaningful_dtype(&self.aic_kv_cache_dtype)
            || meaningful_dtype(&self.aic_comm_dtype)
            || self.aic_nextn.is_some()
            || self.aic_nextn_accept_rates.is_some();
        if !any_set {
            return Ok(None);
        }
        let missing = [
            ("--aic-backend", &self.aic_backend),
            ("--aic-system", &self.aic_system),
            ("--aic-model-path", &self.aic_model_path),
        ]
        .iter()
        .filter(|(_, value)| value.is_none())
        .map(|(flag, _)| *flag)
        .collect::<Vec<_>>();
        if !missing.is_empty() {
            let api_names = missing
                .iter()
                .filter_map(|flag| crate::config::spelling::python_argument(flag))
                .collect::<Vec<_>>();
            return Err(usage(format!(
                "AIC replay modeling requires {}",
                missing.join(", ")
            ))
            .with_api_message(format!(
                "AIC replay modeling requires {}",
                api_names.join(", ")
            )));
        }
        let backend = self.aic_backend.clone().unwrap_or_default();
        if !crate::aic::BACKENDS.contains(&backend.as_str()) {
            return Err(flag_error(
                "--aic-backend",
                format!(
                    "unknown backend '{backend}'; aiconfigurator-core models: {}",
                    crate::aic::BACKENDS.join(", ")
                ),
            ));
        }
        let positive = |flag: &str, value: Option<i64>| -> Result<Option<usize>> {
            match value {
                None => Ok(None),
                Some(value) if value >= 1 => Ok(Some(value as usize)),
                Some(value) => Err(flag_error(flag, format!("must be at least 1, got {value}"))),
            }
        };
        let tp_size = positive("--aic-tp-size", self.aic_tp_size)?.unwrap_or(1);
        let moe_tp_size = positive("--aic-moe-tp-size", self.aic_moe_tp_size)?;
        let moe_ep_size = positive("--aic-moe-ep-size", self.aic_moe_ep_size)?;
        let attention_dp_size =
            positive("--aic-attention-dp-size", self.aic_attention_dp_size)?.unwrap_or(1);
        let nextn = positive("--aic-nextn", self.aic_nextn)?.unwrap_or(0);
        if nextn > 5 {
            return Err(flag_error(
                "--aic-nextn",
                format!("must be between 1 and 5, got {nextn}"),
            ));
        }
        if let Some(rates) = &self.aic_nextn_accept_rates {
            for rate in rates
                .split(',')
                .map(str::trim)
                .filter(|rate| !rate.is_empty())
            {
                match rate.parse::<f64>() {
                    Ok(value) if value.is_finite() && (0.0..=1.0).contains(&value) => {}
                    _ => {
                        return Err(flag_error(
                            "--aic-nextn-accept-rates",
                            format!("each rate must be a number in [0, 1], got '{rate}'"),
                        ))
                    }
                }
            }
        }
        let non_empty = |value: &Option<String>, flag: &str| -> Result<String> {
            match value.as_deref().map(str::trim) {
                Some(text) if !text.is_empty() => Ok(text.to_string()),
                _ => Err(flag_error(flag, "must not be empty")),
            }
        };
        Ok(Some(AicConfig {
            backend,
            system: non_empty(&self.aic_system, "--aic-system")?,
            backend_version: self
                .aic_backend_version
                .as_deref()
                .map(str::trim)
                .filter(|version| !version.is_empty())
                .map(str::to_string),
            model_path: non_empty(&self.aic_model_path, "--aic-model-path")?,
            tp_size,
            moe_tp_size,
            moe_ep_size,
            attention_dp_size,
            gemm_dtype: normalize_dtype(self.aic_gemm_dtype.as_deref()),
            moe_dtype: normalize_dtype(self.aic_moe_dtype.as_deref()),
            fmha_dtype: normalize_dtype(self.aic_fmha_dtype.as_deref()),
            kv_cache_dtype: normalize_dtype(self.aic_kv_cache_dtype.as_deref()),
            comm_dtype: normalize_dtype(self.aic_comm_dtype.as_deref()),
            nextn,
            calibration: None,
            tables: None,
        }))
    }
}
