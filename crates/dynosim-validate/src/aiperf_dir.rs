//! AIPerf run directories as measured runs: `profile_export_aiperf.json` holds the measured
//! means (`time_to_first_token.avg`, `inter_token_latency.avg`, AIPerf's per-request
//! `(e2e - ttft)/(osl - 1)`, which is dynosim's TPOT) and the input config AIPerf 0.13 records
//! (`input_config`: the dataset and the phases), from which the load is rebuilt.
//!
//! INTERFACE: [`read`] turns one directory into a [`crate::MeasuredRun`]. A directory without
//! the file, or with a file that is not AIPerf's summary, is a usage error naming the file and
//! field; a load the simulator cannot rebuild makes the run unmodelable, with the reason.
//!
//! The load: a `synthetic` dataset's `prompts.isl.mean` / `prompts.osl.mean` and the profiling
//! phase's `requests`, or a `file` dataset in `mooncake_trace` format; the profiling phase's
//! type says how requests were sent: `concurrency` (closed loop), `poisson` and `constant`
//! (open loop at `rate`), `fixed_schedule` (the trace's timestamps).
//!
//! The deployment: AIPerf does not record what served the run. A directory written by dynosim
//! (`--aiperf-dir`) carries the run's own settings under `dynosim.settings`; its deployment
//! is taken from there. For any other directory, `--extra-engine-args` describes the engine
//! (one aggregated worker); without it the run is listed as unmodelable.

use std::path::Path;

use dynosim::report::aiperf::SUMMARY_JSON_FILE;
use dynosim::{Error, Result};
use dynosim_sweep::Settings;
use serde_json::{json, Map, Value};

use crate::{Family, MeasuredRun, Mode};

/// Settings that describe the load; in a dynosim-written directory they are rebuilt from the
/// input config, the rest (the deployment) is taken as recorded.
const LOAD_SETTINGS: [&str; 15] = [
    "trace_files",
    "trace_format",
    "arrival_speedup_ratio",
    "input_tokens",
    "output_tokens",
    "input_tokens_stddev",
    "output_tokens_stddev",
    "random_range_ratio",
    "request_count",
    "request_rate",
    "arrival_interval_ms",
    "turns_per_session",
    "shared_prefix_ratio",
    "num_prefix_groups",
    "replay_concurrency",
];

/// The engine-args settings the user's `--extra-engine-args` is merged over.
const ENGINE_SETTINGS: [&str; 3] = [
    "extra_engine_args",
    "prefill_engine_args",
    "decode_engine_args",
];

fn text_at<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

/// Reads one AIPerf run directory; `extra` is the `--extra-engine-args` object.
pub fn read(dir: &Path, extra: &Map<String, Value>) -> Result<MeasuredRun> {
    let path = dir.join(SUMMARY_JSON_FILE);
    let file = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|err| {
        Error::usage(format!(
            "--aiperf-dir {}: cannot read {file}: {err} (an AIPerf run directory holds \
             {SUMMARY_JSON_FILE})",
            dir.display()
        ))
    })?;
    let summary: Value = serde_json::from_str(&text)
        .map_err(|err| Error::usage(format!("{file}: not JSON: {err}")))?;
    let measured = |tag: &str| -> Result<f64> {
        summary
            .get(tag)
            .and_then(|block| block.get("avg"))
            .and_then(Value::as_f64)
            .filter(|value| value.is_finite())
            .ok_or_else(|| {
                Error::usage(format!(
                    "{file}: field `{tag}.avg` is missing or not a number (is this AIPerf's \
                     summary of a streaming run?)"
                ))
            })
    };
    let measured_ttft_ms = measured("time_to_first_token")?;
    let measured_tpot_ms = measured("inter_token_latency")?;

    let recorded = summary
        .pointer("/dynosim/settings")
        .and_then(Value::as_object)
        .cloned();
    let config = summary.get("input_config");
    let model = config
        .and_then(|config| text_at(config, "/models/items/0/name"))
        .unwrap_or_default()
        .to_owned();
    let mut run = MeasuredRun {
        id: dir.display().to_string(),
        origin: file.clone(),
        family: Family::Aiperf,
        protocol_known: config.is_some(),
        backend: String::new(),
        backend_version: String::new(),
        system: String::new(),
        model,
        mode: None,
        isl: None,
        osl: None,
        concurrency: None,
        widths: String::new(),
        measured_ttft_ms: Some(measured_ttft_ms),
        measured_tpot_ms: Some(measured_tpot_ms),
        plan: Err(String::new()),
    };
    run.plan = match (config, recorded) {
        (Some(config), recorded) => plan(dir, config, recorded, extra, &mut run),
        // A dynosim run whose load AIPerf's config cannot express: its own settings.
        (None, Some(recorded)) => Ok(as_recorded(recorded, extra, &mut run)),
        (None, None) => Err(format!(
            "{file} records no input_config (AIPerf 0.13 writes one): the load cannot be rebuilt"
        )),
    };
    Ok(run)
}

/// A dynosim run's recorded settings as they are, with the user's engine args merged in.
fn as_recorded(
    recorded: Map<String, Value>,
    extra: &Map<String, Value>,
    run: &mut MeasuredRun,
) -> Settings {
    let mut settings = Settings { values: recorded };
    merge_engine_args(&mut settings, extra);
    describe_deployment(&settings, run);
    let count = |key: &str| settings.get(key).and_then(Value::as_u64);
    run.isl = count("input_tokens");
    run.osl = count("output_tokens");
    run.concurrency = count("replay_concurrency");
    settings
}

fn merge_engine_args(settings: &mut Settings, extra: &Map<String, Value>) {
    for key in ENGINE_SETTINGS {
        if let Some(Value::Object(args)) = settings.values.get_mut(key) {
            for (name, value) in extra {
                args.insert(name.clone(), value.clone());
            }
        }
    }
}

/// The settings that rebuild the run (filling the run's descriptive fields on the way).
fn plan(
    dir: &Path,
    config: &Value,
    recorded: Option<Map<String, Value>>,
    extra: &Map<String, Value>,
    run: &mut MeasuredRun,
) -> std::result::Result<Settings, String> {
    let mut settings = Settings { values: Map::new() };
    // The deployment.
    match recorded {
        Some(recorded) => {
            for (key, value) in recorded {
                if !LOAD_SETTINGS.contains(&key.as_str()) {
                    settings.values.insert(key, value);
                }
            }
        }
        None if !extra.is_empty() => {
            settings.set("extra_engine_args", Value::Object(Map::new()));
        }
        None => {
            return Err(
                "AIPerf does not record what served the run: describe the engine with \
                        --extra-engine-args"
                    .into(),
            )
        }
    }
    merge_engine_args(&mut settings, extra);
    describe_deployment(&settings, run);

    // The load.
    let datasets = config.get("datasets").and_then(Value::as_array);
    let dataset = datasets
        .and_then(|datasets| datasets.first())
        .ok_or("input_config has no dataset")?;
    if datasets.is_some_and(|datasets| datasets.len() > 1) {
        return Err("input_config has more than one dataset".into());
    }
    let phases = config
        .get("phases")
        .and_then(Value::as_array)
        .ok_or("input_config has no phases")?;
    let phase = phases
        .iter()
        .find(|phase| {
            text_at(phase, "/kind") == Some("profiling")
                || text_at(phase, "/name") == Some("profiling")
        })
        .or_else(|| phases.last())
        .ok_or("input_config has no phases")?;
    let requests = phase.get("requests").and_then(Value::as_u64);
    match text_at(dataset, "/type") {
        Some("synthetic") => {
            let mean = |which: &str| {
                dataset
                    .pointer(&format!("/prompts/{which}/mean"))
                    .and_then(Value::as_f64)
                    .filter(|mean| *mean >= 1.0)
                    .map(|mean| mean.round() as u64)
            };
            let spread = |which: &str| {
                dataset
                    .pointer(&format!("/prompts/{which}/stddev"))
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
            };
            let isl = mean("isl").ok_or("the synthetic dataset has no prompts.isl.mean")?;
            let osl = mean("osl").ok_or(
                "the synthetic dataset has no prompts.osl.mean (the server chose output lengths)",
            )?;
            if dataset.pointer("/prompts/random_range_ratio").is_some() {
                return Err(
                    "prompts.random_range_ratio (AIPerf's range, symmetric around the \
                            mean) is not modelled; dynosim's --random-range-ratio is vLLM's \
                            older [R·L, L]"
                        .into(),
                );
            }
            if dataset.pointer("/prompts/sequence_distribution").is_some() {
                return Err("prompts.sequence_distribution is not modelled".into());
            }
            // AIPerf's normal spreads are the synthetic run's own.
            if spread("isl") > 0.0 {
                settings.set("input_tokens_stddev", json!(spread("isl")));
            }
            if spread("osl") > 0.0 {
                settings.set("output_tokens_stddev", json!(spread("osl")));
            }
            let count = requests
                .or_else(|| dataset.get("entries").and_then(Value::as_u64))
                .ok_or("neither the profiling phase's requests nor the dataset's entries is set")?;
            settings.set("input_tokens", json!(isl));
            settings.set("output_tokens", json!(osl));
            settings.set("request_count", json!(count));
            run.isl = Some(isl);
            run.osl = Some(osl);
        }
        Some("file") => {
            let format = text_at(dataset, "/format").unwrap_or_default();
            if format != "mooncake_trace" {
                return Err(format!(
                    "file dataset format {format:?}: only mooncake_trace files are rebuilt"
                ));
            }
            let given = text_at(dataset, "/path").ok_or("the file dataset has no path")?;
            let mut path = std::path::PathBuf::from(given);
            if path.is_relative() && !path.exists() {
                path = dir.join(given);
            }
            if !path.is_file() {
                return Err(format!("the dataset file {given} is not there"));
            }
            settings.set("trace_files", json!([path.display().to_string()]));
            settings.set("trace_format", json!("mooncake"));
        }
        other => {
            return Err(format!(
                "dataset type {:?} is not rebuilt (synthetic and mooncake_trace files are)",
                other.unwrap_or("(none)")
            ))
        }
    }
    let rate = phase
        .get("rate")
        .and_then(Value::as_f64)
        .filter(|rate| *rate > 0.0);
    match text_at(phase, "/type") {
        Some("concurrency") => {
            let concurrency = phase
                .get("concurrency")
                .and_then(Value::as_u64)
                .filter(|c| *c >= 1)
                .unwrap_or(1);
            settings.set("replay_concurrency", json!(concurrency));
            run.concurrency = Some(concurrency);
        }
        Some("poisson") => {
            settings.set(
                "request_rate",
                json!(rate.ok_or("the poisson phase has no rate")?),
            );
        }
        Some("constant") => {
            let rate = rate.ok_or("the constant-rate phase has no rate")?;
            settings.set("arrival_interval_ms", json!(1000.0 / rate));
        }
        Some("fixed_schedule") if settings.get("trace_files").is_some() => {}
        other => {
            return Err(format!(
                "phase type {:?} is not rebuilt (concurrency, poisson, constant and a trace's \
                 fixed_schedule are)",
                other.unwrap_or("(none)")
            ))
        }
    }
    Ok(settings)
}

/// Backend, system, model (when the config named none), mode and widths from the engine args.
fn describe_deployment(settings: &Settings, run: &mut MeasuredRun) {
    let disaggregated = settings.get("prefill_engine_args").is_some();
    run.mode = Some(if disaggregated {
        Mode::Disagg
    } else {
        Mode::Agg
    });
    let engine = settings
        .get(if disaggregated {
            "decode_engine_args"
        } else {
            "extra_engine_args"
        })
        .cloned()
        .unwrap_or(Value::Null);
    let text = |key: &str| engine.get(key).and_then(Value::as_str).map(str::to_owned);
    run.backend = text("aic_backend")
        .or_else(|| text("engine_type"))
        .unwrap_or_else(|| "vllm".into());
    run.system = text("aic_system").unwrap_or_default();
    if let Some(model) = text("aic_model_path") {
        run.model = model;
    }
    let tp = engine
        .get("aic_tp_size")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let workers = |key: &str| settings.get(key).and_then(Value::as_u64).unwrap_or(1);
    run.widths = if disaggregated {
        format!(
            "prefill {}x decode {}x",
            workers("num_prefill_workers"),
            workers("num_decode_workers")
        )
    } else {
        format!("{}x tp{tp}", workers("num_workers"))
    };
}
