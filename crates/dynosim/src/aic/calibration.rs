//! Calibration of AIC timing against measured runs: a few interpretable corrections per
//! (backend, system), fitted by `dynosim calibrate` on measured benchmark rows and applied on
//! top of aiconfigurator-core's estimates.
//!
//! INTERFACE
//! - [`AicCalibration`]: the corrections of one engine configuration. Prefill and decode
//!   parts of a pass are scaled, a fixed per-pass cost is added to each part that ran and a
//!   cost per token to the prefill part, the KV capacity the package estimates is scaled (the
//!   share of that memory the engine really gets for its cache), each request reaches the
//!   engines a fixed time after it arrives (the serving front's latency; applied by the
//!   simulation's request ledger), and under speculative decoding the drafts' acceptance
//!   rates are scaled.
//! - [`CalibrationFile`]: the file `dynosim calibrate` writes, one entry per (backend,
//!   system) and optionally more specific ones per (backend, system, model) and per (backend,
//!   system, model, engine configuration[, engine version]); [`CalibrationFile::parse`]
//!   checks it, [`CalibrationFile::entry`] picks the most specific entry that applies: the
//!   model's engine configuration's for the run's engine version, else the configuration's,
//!   else the model's, else the (backend, system) entry.
//! - [`configuration_key`]: the engine configuration an entry names (parallel widths and
//!   quantisation), as text.
//! - [`resolve`]: the engine-args value `aic_calibration` (a shipped name or a file path) to
//!   the corrections of one AIC engine configuration.
//!
//! Without `aic_calibration` nothing here runs and AIC timing is exactly the package's.

use serde::{Deserialize, Serialize};

use super::AicConfig;

/// The `format` value of a calibration file.
pub const FORMAT: &str = "dynosim-aic-calibration/1";

/// Calibrations shipped with dynosim, by the name `aic_calibration` accepts, both fitted by
/// `dynosim calibrate` on the TRAIN rows of aiconfigurator-core 0.12's silicon_sample.csv
/// (InferenceX family, aggregated, H100/H200/B200; docs/fidelity.md has the commands and their
/// errors). `silicon`: the rows rebuilt with their benchmark's deployment (the scripts' server
/// settings, widths and speculative decoding), validate's default. `silicon-engine-defaults`:
/// the rows rebuilt with dynosim's engine defaults (`--engine-defaults`), the first fit.
const SHIPPED: &[(&str, &str)] = &[
    ("silicon", include_str!("calibrations/silicon.json")),
    (
        "silicon-engine-defaults",
        include_str!("calibrations/silicon-engine-defaults.json"),
    ),
];

/// The corrections applied to one engine configuration's AIC pass times and KV capacity.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AicCalibration {
    /// Multiplies the package's prefill time of a pass.
    pub prefill_scale: f64,
    /// Multiplies the package's decode time of a pass.
    pub decode_scale: f64,
    /// Milliseconds added to a pass that prefilled something (scheduling, input preparation).
    pub prefill_pass_ms: f64,
    /// Microseconds added per prompt token a pass prefills: the part of the prefill cost that
    /// grows with the tokens of a pass beyond the package's (its large-batch prefill
    /// throughput measured optimistic against its small-batch latency).
    #[serde(default)]
    pub prefill_token_us: f64,
    /// Milliseconds added to a pass that decoded something (sampling, output handling).
    pub decode_pass_ms: f64,
    /// Multiplies the KV capacity the package estimates (used only when `num_gpu_blocks` is
    /// not given).
    pub kv_capacity_scale: f64,
    /// Multiplies each draft token's acceptance rate under speculative decoding (`aic_nextn`;
    /// capped at 1): how much more or less of the drafts the measured engine accepted than the
    /// rates the run assumes.
    #[serde(default = "one")]
    pub acceptance_scale: f64,
    /// Milliseconds from a request's arrival until it reaches the router and the engines (the
    /// serving front: HTTP, tokenization, queues between processes). Counts in TTFT and
    /// latency without occupying an engine.
    #[serde(default)]
    pub request_overhead_ms: f64,
}

impl AicCalibration {
    /// No correction: the package's estimates as they are.
    pub const IDENTITY: AicCalibration = AicCalibration {
        prefill_scale: 1.0,
        decode_scale: 1.0,
        prefill_pass_ms: 0.0,
        prefill_token_us: 0.0,
        decode_pass_ms: 0.0,
        kv_capacity_scale: 1.0,
        acceptance_scale: 1.0,
        request_overhead_ms: 0.0,
    };

    /// The first field that is out of range, as a message.
    fn check(&self) -> Result<(), String> {
        let fields = [
            ("prefill_scale", self.prefill_scale, false),
            ("decode_scale", self.decode_scale, false),
            ("prefill_pass_ms", self.prefill_pass_ms, true),
            ("prefill_token_us", self.prefill_token_us, true),
            ("decode_pass_ms", self.decode_pass_ms, true),
            ("kv_capacity_scale", self.kv_capacity_scale, false),
            ("acceptance_scale", self.acceptance_scale, false),
            ("request_overhead_ms", self.request_overhead_ms, true),
        ];
        for (name, value, zero_allowed) in fields {
            let ok = value.is_finite()
                && if zero_allowed {
                    value >= 0.0
                } else {
                    value > 0.0
                };
            if !ok {
                let bound = if zero_allowed {
                    "at least 0"
                } else {
                    "positive"
                };
                return Err(format!(
                    "{name} must be a finite number {bound}, got {value}"
                ));
            }
        }
        Ok(())
    }

    /// The prefill part of a pass that prefilled `new_tokens` prompt tokens, corrected
    /// (`raw_ms` 0 means nothing was prefilled).
    pub fn prefill_ms(&self, raw_ms: f64, new_tokens: usize) -> f64 {
        if raw_ms > 0.0 {
            raw_ms * self.prefill_scale
                + self.prefill_pass_ms
                + new_tokens as f64 * self.prefill_token_us / 1000.0
        } else {
            raw_ms
        }
    }

    /// The decode part of a pass that decoded something, corrected.
    pub fn decode_ms(&self, raw_ms: f64) -> f64 {
        raw_ms * self.decode_scale + self.decode_pass_ms
    }

    /// The KV capacity per rank, corrected, from the package's estimate (at least one block).
    pub fn kv_blocks(&self, estimated: usize) -> usize {
        ((estimated as f64 * self.kv_capacity_scale).floor() as usize).max(1)
    }
}

fn one() -> f64 {
    1.0
}

/// The corrections on one line, as `dynosim calibrate` reports them.
impl std::fmt::Display for AicCalibration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "+{:.0} ms/request, prefill x{:.3} +{:.1} ms +{:.1} us/token, decode x{:.3} +{:.2} ms, \
             KV x{:.3}, drafts accepted x{:.3}",
            self.request_overhead_ms,
            self.prefill_scale,
            self.prefill_pass_ms,
            self.prefill_token_us,
            self.decode_scale,
            self.decode_pass_ms,
            self.kv_capacity_scale,
            self.acceptance_scale
        )
    }
}

/// One entry of a calibration file: a (backend, system), or with `model` one model there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationEntry {
    pub backend: String,
    pub system: String,
    /// The AIC model (`aic_model_path` as given) this entry is for; `None`: every model of
    /// the (backend, system) without an entry of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The engine configuration of `model` this entry is for ([`configuration_key`]);
    /// `None`: every configuration of the model without an entry of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<String>,
    /// The serving engine's version this configuration entry was fitted on
    /// (`aic_engine_version`); `None`: every version without an entry of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_version: Option<String>,
    pub corrections: AicCalibration,
    /// What the fit saw (rows, errors before and after); informational, not read back.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub fit: serde_json::Value,
}

/// A calibration file: corrections per (backend, system[, model]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalibrationFile {
    pub format: String,
    /// How the entries were fitted (data set, split, command); informational.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub fitted_on: serde_json::Value,
    pub entries: Vec<CalibrationEntry>,
}

impl CalibrationFile {
    /// Parses and checks a calibration file's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: CalibrationFile =
            serde_json::from_str(text).map_err(|error| format!("invalid calibration: {error}"))?;
        if file.format != FORMAT {
            return Err(format!("format is '{}', expected '{FORMAT}'", file.format));
        }
        for (index, entry) in file.entries.iter().enumerate() {
            entry
                .corrections
                .check()
                .map_err(|message| format!("entries[{index}] ({}): {message}", entry.describe()))?;
            if entry.configuration.is_some() && entry.model.is_none() {
                return Err(format!(
                    "entries[{index}] ({}): an entry for a configuration names its model",
                    entry.describe()
                ));
            }
            if entry.engine_version.is_some() && entry.configuration.is_none() {
                return Err(format!(
                    "entries[{index}] ({}): an entry for an engine version names its \
                     configuration",
                    entry.describe()
                ));
            }
            if file.entries[..index].iter().any(|other| {
                other.backend == entry.backend
                    && other.system == entry.system
                    && other.model == entry.model
                    && other.configuration == entry.configuration
                    && other.engine_version == entry.engine_version
            }) {
                return Err(format!(
                    "entries[{index}]: a second entry for {}",
                    entry.describe()
                ));
            }
        }
        Ok(file)
    }

    /// The corrections of `model` in engine configuration `configuration` on `backend` and
    /// `system`, run by engine version `engine_version` when known: that configuration's
    /// entry for that version, else the configuration's own, else the model's, else the
    /// (backend, system) entry; or a message listing the entries there are.
    pub fn entry(
        &self,
        backend: &str,
        system: &str,
        model: &str,
        configuration: &str,
        engine_version: Option<&str>,
    ) -> Result<&AicCalibration, String> {
        let here = |entry: &&CalibrationEntry| entry.backend == backend && entry.system == system;
        let find = |model: Option<&str>, configuration: Option<&str>, version: Option<&str>| {
            self.entries.iter().filter(here).find(|entry| {
                entry.model.as_deref() == model
                    && entry.configuration.as_deref() == configuration
                    && entry.engine_version.as_deref() == version
            })
        };
        engine_version
            .and_then(|version| find(Some(model), Some(configuration), Some(version)))
            .or_else(|| find(Some(model), Some(configuration), None))
            .or_else(|| find(Some(model), None, None))
            .or_else(|| find(None, None, None))
            .map(|entry| &entry.corrections)
            .ok_or_else(|| {
                let have: Vec<String> = self
                    .entries
                    .iter()
                    .map(CalibrationEntry::describe)
                    .collect();
                format!(
                    "no entry for backend '{backend}' on system '{system}' (it has: {})",
                    if have.is_empty() {
                        "none".to_string()
                    } else {
                        have.join(", ")
                    }
                )
            })
    }
}

impl CalibrationEntry {
    /// `backend on system`, with the model when the entry has one.
    pub fn describe(&self) -> String {
        match (&self.model, &self.configuration) {
            (Some(model), Some(configuration)) => format!(
                "{} on {} for {model} ({configuration}{})",
                self.backend,
                self.system,
                self.engine_version
                    .as_deref()
                    .map(|version| format!(", engine version {version}"))
                    .unwrap_or_default()
            ),
            (Some(model), None) => format!("{} on {} for {model}", self.backend, self.system),
            _ => format!("{} on {}", self.backend, self.system),
        }
    }
}

/// The engine configuration an entry is keyed by: parallel widths and quantisation, e.g.
/// `tp8 dp1 moe_tp8 ep1 gemm=fp8 moe=fp8 kv=fp8` (`-` where the package's default applies).
pub fn configuration_key(config: &AicConfig) -> String {
    let width = |value: Option<usize>| value.map_or("-".to_string(), |value| value.to_string());
    let dtype = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".to_string());
    format!(
        "tp{} dp{} moe_tp{} ep{} gemm={} moe={} kv={}",
        config.tp_size,
        config.attention_dp_size,
        width(config.moe_tp_size),
        width(config.moe_ep_size),
        dtype(&config.gemm_dtype),
        dtype(&config.moe_dtype),
        dtype(&config.kv_cache_dtype),
    )
}

/// The names of the calibrations shipped with dynosim.
pub fn shipped_names() -> Vec<&'static str> {
    SHIPPED.iter().map(|(name, _)| *name).collect()
}

/// The corrections `value` (a shipped calibration's name or a calibration file's path) gives
/// the engine configuration `config` run by `engine_version` (`aic_engine_version`, when
/// given). Reads the file: call it while the engine arguments are parsed, before any
/// simulation.
pub fn resolve(
    value: &str,
    config: &AicConfig,
    engine_version: Option<&str>,
) -> Result<AicCalibration, String> {
    let (origin, text) = match SHIPPED.iter().find(|(name, _)| *name == value) {
        Some((name, text)) => (format!("shipped calibration '{name}'"), text.to_string()),
        None => {
            let text = std::fs::read_to_string(value).map_err(|error| {
                let shipped = shipped_names();
                let hint = if shipped.is_empty() {
                    String::new()
                } else {
                    format!(" (shipped calibrations: {})", shipped.join(", "))
                };
                format!("cannot read calibration file '{value}': {error}{hint}")
            })?;
            (format!("calibration file '{value}'"), text)
        }
    };
    let file = CalibrationFile::parse(&text).map_err(|message| format!("{origin}: {message}"))?;
    file.entry(
        &config.backend,
        &config.system,
        &config.model_path,
        &configuration_key(config),
        engine_version,
    )
    .cloned()
    .map_err(|message| format!("{origin}: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(backend: &str, system: &str, model: &str) -> AicConfig {
        AicConfig {
            backend: backend.into(),
            system: system.into(),
            backend_version: None,
            model_path: model.into(),
            tp_size: 8,
            moe_tp_size: Some(8),
            moe_ep_size: None,
            attention_dp_size: 1,
            gemm_dtype: Some("fp8".into()),
            moe_dtype: None,
            fmha_dtype: None,
            kv_cache_dtype: Some("fp8".into()),
            comm_dtype: None,
            nextn: 0,
            calibration: None,
            tables: None,
        }
    }

    fn file(entries: &str) -> String {
        format!(r#"{{"format":"{FORMAT}","entries":[{entries}]}}"#)
    }

    const VLLM_H200: &str = r#"{"backend":"vllm","system":"h200_sxm","corrections":{
        "prefill_scale":1.5,"decode_scale":0.8,"prefill_pass_ms":2,"decode_pass_ms":0.5,
        "kv_capacity_scale":0.75}}"#;

    #[test]
    fn an_entry_is_picked_by_backend_and_system() {
        let parsed = CalibrationFile::parse(&file(VLLM_H200)).unwrap();
        let entry = parsed
            .entry("vllm", "h200_sxm", "Qwen/Qwen3-32B", "tp1", None)
            .unwrap();
        // A file written before the per-token cost existed reads as none.
        assert_eq!(entry.prefill_token_us, 0.0);
        assert_eq!(entry.prefill_ms(10.0, 4000), 17.0);
        assert_eq!(entry.prefill_ms(0.0, 0), 0.0);
        assert_eq!(entry.decode_ms(10.0), 8.5);
        assert_eq!(entry.kv_blocks(1000), 750);
        assert_eq!(entry.kv_blocks(1), 1);
        let missing = parsed
            .entry("sglang", "h200_sxm", "Qwen/Qwen3-32B", "tp1", None)
            .unwrap_err();
        assert!(
            missing.contains("'sglang'") && missing.contains("vllm on h200_sxm"),
            "{missing}"
        );
    }

    #[test]
    fn a_per_token_cost_grows_with_the_tokens_a_pass_prefills() {
        let with_tokens = VLLM_H200.replace(
            "\"prefill_pass_ms\":2,",
            "\"prefill_pass_ms\":2,\"prefill_token_us\":10,",
        );
        let parsed = CalibrationFile::parse(&file(&with_tokens)).unwrap();
        let entry = parsed
            .entry("vllm", "h200_sxm", "Qwen/Qwen3-32B", "tp1", None)
            .unwrap();
        // 10 ms x 1.5 + 2 ms + 1000 tokens x 10 us.
        assert_eq!(entry.prefill_ms(10.0, 1000), 27.0);
        assert_eq!(entry.prefill_ms(10.0, 8000), 97.0);
        assert_eq!(entry.prefill_ms(0.0, 0), 0.0);
        let negative = with_tokens.replace("\"prefill_token_us\":10", "\"prefill_token_us\":-1");
        let message = CalibrationFile::parse(&file(&negative)).unwrap_err();
        assert!(
            message.contains("prefill_token_us must be a finite number at least 0"),
            "{message}"
        );
    }

    #[test]
    fn a_model_entry_wins_over_its_backend_and_system_entry() {
        let for_model = VLLM_H200
            .replace(
                "\"system\":\"h200_sxm\",",
                "\"system\":\"h200_sxm\",\"model\":\"m1\",",
            )
            .replace("\"prefill_scale\":1.5", "\"prefill_scale\":3");
        let parsed = CalibrationFile::parse(&file(&format!("{VLLM_H200},{for_model}"))).unwrap();
        assert_eq!(
            parsed
                .entry("vllm", "h200_sxm", "m1", "tp1", None)
                .unwrap()
                .prefill_scale,
            3.0
        );
        assert_eq!(
            parsed
                .entry("vllm", "h200_sxm", "m2", "tp1", None)
                .unwrap()
                .prefill_scale,
            1.5
        );
        let only_model = CalibrationFile::parse(&file(&for_model)).unwrap();
        let message = only_model
            .entry("vllm", "h200_sxm", "m2", "tp1", None)
            .unwrap_err();
        assert!(message.contains("vllm on h200_sxm for m1"), "{message}");
        let twice = file(&format!("{for_model},{for_model}"));
        let message = CalibrationFile::parse(&twice).unwrap_err();
        assert!(
            message.contains("a second entry for vllm on h200_sxm for m1"),
            "{message}"
        );
    }

    #[test]
    fn a_configuration_entry_wins_over_its_model_entry() {
        let key = configuration_key(&config("vllm", "h200_sxm", "m1"));
        assert_eq!(key, "tp8 dp1 moe_tp8 ep- gemm=fp8 moe=- kv=fp8");
        let for_model = VLLM_H200
            .replace(
                "\"system\":\"h200_sxm\",",
                "\"system\":\"h200_sxm\",\"model\":\"m1\",",
            )
            .replace("\"prefill_scale\":1.5", "\"prefill_scale\":3");
        let for_configuration = for_model
            .replace(
                "\"model\":\"m1\",",
                &format!("\"model\":\"m1\",\"configuration\":\"{key}\","),
            )
            .replace("\"prefill_scale\":3", "\"prefill_scale\":4");
        let text = file(&format!("{VLLM_H200},{for_model},{for_configuration}"));
        let parsed = CalibrationFile::parse(&text).unwrap();
        let scale = |model: &str, configuration: &str| {
            parsed
                .entry("vllm", "h200_sxm", model, configuration, None)
                .unwrap()
                .prefill_scale
        };
        assert_eq!(scale("m1", &key), 4.0);
        assert_eq!(scale("m1", "tp1"), 3.0);
        assert_eq!(scale("m2", &key), 1.5);
        let path = std::env::temp_dir().join(format!("dynosim-cal-{}.json", std::process::id()));
        std::fs::write(&path, &text).unwrap();
        let resolved = resolve(
            path.to_str().unwrap(),
            &config("vllm", "h200_sxm", "m1"),
            None,
        );
        std::fs::remove_file(&path).unwrap();
        assert_eq!(resolved.unwrap().prefill_scale, 4.0);
        let without_model = for_configuration.replace("\"model\":\"m1\",", "");
        let message = CalibrationFile::parse(&file(&without_model)).unwrap_err();
        assert!(message.contains("names its model"), "{message}");

        // An engine version's entry serves that version only; other versions, and runs that
        // do not say theirs, take the configuration's.
        let for_version = for_configuration
            .replace(
                "\"model\":\"m1\",",
                "\"model\":\"m1\",\"engine_version\":\"0.5.9\",",
            )
            .replace("\"prefill_scale\":4", "\"prefill_scale\":5");
        let text = file(&format!("{for_model},{for_configuration},{for_version}"));
        let parsed = CalibrationFile::parse(&text).unwrap();
        let scale = |version: Option<&str>| {
            parsed
                .entry("vllm", "h200_sxm", "m1", &key, version)
                .unwrap()
                .prefill_scale
        };
        assert_eq!(scale(Some("0.5.9")), 5.0);
        assert_eq!(scale(Some("0.6.0")), 4.0);
        assert_eq!(scale(None), 4.0);
        let without_configuration =
            for_version.replace(&format!("\"configuration\":\"{key}\","), "");
        let message = CalibrationFile::parse(&file(&without_configuration)).unwrap_err();
        assert!(message.contains("names its configuration"), "{message}");
        let twice = file(&format!("{for_version},{for_version}"));
        let message = CalibrationFile::parse(&twice).unwrap_err();
        assert!(message.contains("engine version 0.5.9"), "{message}");
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let bad_scale = VLLM_H200.replace("\"decode_scale\":0.8", "\"decode_scale\":0");
        let message = CalibrationFile::parse(&file(&bad_scale)).unwrap_err();
        assert!(
            message.contains("decode_scale must be a finite number positive"),
            "{message}"
        );
        let twice = file(&format!("{VLLM_H200},{VLLM_H200}"));
        assert!(CalibrationFile::parse(&twice)
            .unwrap_err()
            .contains("a second entry"));
        let unknown = VLLM_H200.replace("\"prefill_scale\"", "\"prefil_scale\"");
        assert!(CalibrationFile::parse(&file(&unknown))
            .unwrap_err()
            .contains("prefil_scale"));
        let wrong_format = file(VLLM_H200).replace(FORMAT, "other/1");
        assert!(CalibrationFile::parse(&wrong_format)
            .unwrap_err()
            .contains("other/1"));
    }

    #[test]
    fn a_missing_file_is_named() {
        let message = resolve(
            "/nonexistent/cal.json",
            &config("vllm", "h200_sxm", "m"),
            None,
        )
        .unwrap_err();
        assert!(message.contains("/nonexistent/cal.json"), "{message}");
    }

    #[test]
    fn every_shipped_calibration_parses_and_has_entries() {
        for (name, text) in SHIPPED {
            let file =
                CalibrationFile::parse(text).unwrap_or_else(|message| panic!("{name}: {message}"));
            assert!(!file.entries.is_empty(), "{name}");
            assert!(
                file.entries.iter().any(|entry| entry.model.is_none()),
                "{name}: no (backend, system) entry"
            );
        }
        let vllm = resolve("silicon", &config("vllm", "h200_sxm", "any/model"), None).unwrap();
        assert_ne!(vllm, AicCalibration::IDENTITY);
    }

    #[test]
    fn identity_changes_nothing() {
        let identity = AicCalibration::IDENTITY;
        for raw in [0.0, 1.0, 12.345] {
            assert_eq!(identity.prefill_ms(raw, 2048), raw);
            assert_eq!(identity.decode_ms(raw), raw);
        }
        assert_eq!(identity.kv_blocks(4096), 4096);
    }
}
