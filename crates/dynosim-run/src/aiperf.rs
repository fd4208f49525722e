//! `--aiperf-dir DIR`: checks the directory before the run and writes the AIPerf files after
//! it (their contents come from `dynosim::report::aiperf`).
//!
//! Besides AIPerf's metrics, `profile_export_aiperf.json` records the run as AIPerf 0.13 records
//! a measured one, in `input_config` (its schema: the model, the endpoint, the dataset and the
//! profiling phase), when the load is one AIPerf can express (a single-turn synthetic load
//! without shared prefixes, or one mooncake trace; closed loop, Poisson, constant rate or the
//! trace's timestamps; fixed lengths or AIPerf's normal spread); and, under `dynosim.settings`,
//! the run's own settings, named like the Python API's arguments (given by the front: the
//! command line records every option that differs from its default). `dynosim validate
//! --aiperf-dir` rebuilds the load from the first and the deployment from the second, or the
//! whole run from the second when AIPerf's config cannot express the load.

use std::path::Path;

use dynosim::config::{
    ArrivalMode, ArrivalProcess, LengthSpread, ReplaySpec, TraceFormat, WorkloadSpec,
};
use dynosim::report::aiperf::{
    AiperfExport, RECORDS_JSONL_FILE, SUMMARY_CSV_FILE, SUMMARY_JSON_FILE,
};
use dynosim::{Error, Report, RequestRecord, Result};
use serde_json::{json, Map, Value};

use crate::output;

/// The endpoint AIPerf's input config must name: AIPerf's own default URL (a simulated run
/// served no endpoint).
const RECORDED_URL: &str = "http://localhost:8000";

/// Rejects a directory that can never be written (an existing file) before any simulation.
pub fn check_dir(flag: &str, dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::usage_about(
            flag,
            format!("{} exists and is not a directory", dir.display()),
        ));
    }
    Ok(())
}

/// AIPerf's `input_config` for the run's load, when AIPerf can express it.
fn input_config(spec: &ReplaySpec) -> Option<Value> {
    let model = spec
        .deployment
        .generating()
        .engine
        .aic
        .as_ref()
        .map_or("dynosim-simulated-model", |aic| aic.model_path.as_str());
    let concurrency_phase = |requests: Option<usize>, limit: usize| {
        let mut phase = json!({"name": "profiling", "kind": "profiling", "type": "concurrency",
                               "concurrency": limit});
        if let Some(requests) = requests {
            phase["requests"] = json!(requests);
        }
        phase
    };
    let (dataset, phase) = match &spec.workload {
        WorkloadSpec::Synthetic(synthetic) => {
            if synthetic.turns_per_session != 1 || synthetic.shared_prefix_ratio != 0.0 {
                return None;
            }
            let requests = synthetic.request_count;
            let mut isl = json!({"mean": synthetic.input_tokens});
            let mut osl = json!({"mean": synthetic.output_tokens});
            match synthetic.lengths {
                LengthSpread::Fixed => {}
                // AIPerf draws its normal spread as dynosim does.
                LengthSpread::Normal {
                    input_stddev,
                    output_stddev,
                    ..
                } => {
                    if input_stddev > 0.0 {
                        isl["stddev"] = json!(input_stddev);
                    }
                    if output_stddev > 0.0 {
                        osl["stddev"] = json!(output_stddev);
                    }
                }
                // AIPerf's range ratio is symmetric around the mean; vLLM's older [R·L, L]
                // has no exact spelling in its config.
                LengthSpread::Uniform { .. } => return None,
            }
            let dataset = json!({
                "name": "main",
                "type": "synthetic",
                "entries": requests,
                "prompts": {"isl": isl, "osl": osl},
            });
            let phase = match (spec.arrivals, synthetic.arrival_process) {
                (ArrivalMode::Concurrency { limit }, _) => concurrency_phase(Some(requests), limit),
                (_, Some(ArrivalProcess::Poisson { rate, .. })) => json!({
                    "name": "profiling", "kind": "profiling", "type": "poisson",
                    "requests": requests, "rate": rate,
                }),
                (_, Some(ArrivalProcess::Interval { interval_ms })) if interval_ms > 0.0 => {
                    json!({
                        "name": "profiling", "kind": "profiling", "type": "constant",
                        "requests": requests, "rate": 1000.0 / interval_ms,
                    })
                }
                // Every request at once: a closed loop as wide as the run.
                _ => concurrency_phase(Some(requests), requests.max(1)),
            };
            (dataset, phase)
        }
        WorkloadSpec::Trace(trace) => {
            if trace.files.len() != 1 || trace.format != TraceFormat::Mooncake {
                return None;
            }
            let path = std::path::absolute(&trace.files[0]).ok()?;
            let dataset = json!({
                "name": "main",
                "type": "file",
                "path": path.display().to_string(),
                "format": "mooncake_trace",
            });
            let phase = match spec.arrivals {
                ArrivalMode::Concurrency { limit } => concurrency_phase(None, limit),
                ArrivalMode::Timestamps { speedup: 1.0 } => json!({
                    "name": "profiling", "kind": "profiling", "type": "fixed_schedule",
                }),
                ArrivalMode::Timestamps { .. } => return None,
            };
            (dataset, phase)
        }
    };
    Some(json!({
        "models": {"items": [{"name": model}]},
        "endpoint": {"urls": [RECORDED_URL], "type": "chat", "streaming": true},
        "datasets": [dataset],
        "phases": [phase],
    }))
}

/// What `profile_export_aiperf.json` records of the run besides its metrics.
pub fn run_record(spec: &ReplaySpec, settings: Option<&Map<String, Value>>) -> Map<String, Value> {
    let mut record = Map::new();
    if let Some(config) = input_config(spec) {
        record.insert("input_config".into(), config);
    }
    if let Some(settings) = settings {
        record.insert(
            "dynosim".into(),
            json!({"version": env!("CARGO_PKG_VERSION"), "settings": settings}),
        );
    }
    record
}

/// Writes the three files into `dir` (created if missing), each atomically; `run` (from
/// [`run_record`]) joins the summary JSON.
pub fn write_dir(
    dir: &Path,
    report: &Report,
    records: &[RequestRecord],
    run: &Map<String, Value>,
) -> Result<()> {
    let export = AiperfExport::new(report, records);
    let mut summary = export.summary_json();
    if !run.is_empty() {
        let mut value: Value = serde_json::from_str(&summary)
            .map_err(|err| Error::runtime(format!("cannot format the AIPerf summary: {err}")))?;
        if let Some(top) = value.as_object_mut() {
            top.extend(run.clone());
        }
        summary = serde_json::to_string_pretty(&value)
            .map_err(|err| Error::runtime(format!("cannot format the AIPerf summary: {err}")))?;
        summary.push('\n');
    }
    output::write_atomically(
        &dir.join(RECORDS_JSONL_FILE),
        export.records_jsonl().as_bytes(),
        "AIPerf per-request records",
    )?;
    output::write_atomically(
        &dir.join(SUMMARY_CSV_FILE),
        export.summary_csv().as_bytes(),
        "AIPerf summary CSV",
    )?;
    output::write_atomically(
        &dir.join(SUMMARY_JSON_FILE),
        summary.as_bytes(),
        "AIPerf summary JSON",
    )
}
