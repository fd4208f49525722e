//! `dynosim.sweep(spec, out=..., jobs=None)`: the sweep of `dynosim sweep`, from Python. The
//! spec is a path to a spec file or a dict (a sweep spec, or the reference's
//! `ReplayOptimizeSpec` as a dict of camelCase keys); the result comes back as a dict.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dynosim_sweep::{AnySpec, RunOptions};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use serde_json::{json, Map, Value};

use crate::{convert, run_interruptibly, to_py_err};

/// Reads the spec argument: a path (`str` or `os.PathLike`) or a mapping.
fn read_spec(spec: &Bound<'_, PyAny>) -> PyResult<AnySpec> {
    if spec.is_instance_of::<PyString>() || spec.hasattr("__fspath__")? {
        let path: PathBuf = spec.extract()?;
        return AnySpec::from_file(&path).map_err(to_py_err);
    }
    if spec.is_instance_of::<PyDict>() {
        let value = convert::any_to_json("spec", spec)?;
        return AnySpec::from_value("spec", &value).map_err(to_py_err);
    }
    let type_name = spec.get_type().name()?.to_string();
    Err(PyTypeError::new_err(format!(
        "argument 'spec': expected a path to a spec file or a dict, got '{type_name}'"
    )))
}

/// A sweep's outcome as a dict: counts, one dict per row (the columns of results.csv, typed),
/// the best per objective and the Pareto front (best.json), and the files written.
fn outcome_json(spec: &dynosim_sweep::SweepSpec, outcome: &dynosim_sweep::Outcome) -> Value {
    let best = dynosim_sweep::table::best_json(spec, &outcome.rows, outcome.over_budget);
    let rows: Vec<Value> = outcome
        .rows
        .iter()
        .map(|row| {
            let mut fields = Map::new();
            fields.insert("candidate".into(), json!(row.candidate));
            for key in spec.swept_keys() {
                let value = row.settings.get(&key).cloned().unwrap_or(Value::Null);
                fields.insert(key, value);
            }
            fields.insert("gpus".into(), json!(row.gpus));
            let feasible = row
                .error
                .is_empty()
                .then(|| dynosim_sweep::objectives::feasible(row, &spec.sla));
            fields.insert("feasible".into(), json!(feasible));
            fields.insert("error".into(), json!(row.error));
            fields.extend(row.report.clone());
            fields.insert("command".into(), json!(row.settings.command_line()));
            Value::Object(fields)
        })
        .collect();
    json!({
        "evaluated": outcome.evaluated,
        "stored": outcome.stored,
        "over_budget": outcome.over_budget,
        "rows": rows,
        "best": best["best"],
        "pareto": best["pareto"],
        "files": outcome.files.iter().map(|file| file.display().to_string()).collect::<Vec<_>>(),
    })
}

/// Runs a sweep into `out` and returns its outcome (see the module docs).
#[pyfunction]
#[pyo3(signature = (spec, *, out, jobs=None))]
#[pyo3(text_signature = "(spec, *, out, jobs=None)")]
pub fn sweep<'py>(
    py: Python<'py>,
    spec: &Bound<'py, PyAny>,
    out: PathBuf,
    jobs: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let spec = read_spec(spec)?;
    let jobs = match jobs {
        Some(jobs) if !jobs.is_none() => {
            let count = convert::int_arg("jobs", jobs)?;
            Some(
                usize::try_from(count)
                    .ok()
                    .filter(|&count| count >= 1)
                    .ok_or_else(|| {
                        pyo3::exceptions::PyValueError::new_err(format!(
                            "jobs: expected a positive integer, got {count}"
                        ))
                    })?,
            )
        }
        _ => None,
    };
    let text = run_interruptibly(py, move |cancelled| -> dynosim::Result<String> {
        let cancel = Arc::new(AtomicBool::new(false));
        let options = RunOptions {
            jobs,
            // No display: drawing one is the command line's part (the extension links none).
            progress: None,
            cancel: Some(Arc::clone(&cancel)),
        };
        let done = AtomicBool::new(false);
        // Passes the caller's Ctrl-C on to the sweep, which stops starting candidates.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    if cancelled.load(Ordering::Relaxed) {
                        cancel.store(true, Ordering::Relaxed);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            let result = match &spec {
                AnySpec::Sweep(sweep) => dynosim_sweep::run(sweep, &out, &options)
                    .map(|outcome| outcome_json(sweep, &outcome).to_string()),
                AnySpec::Optimize(optimize) => {
                    dynosim_sweep::optimize::run(optimize, &out, &options)
                        .map(|result| result.to_string())
                }
            };
            done.store(true, Ordering::Relaxed);
            result
        })
    })?
    .map_err(to_py_err)?;
    py.import("json")?.call_method1("loads", (text,))
}

/// The sweep spec behind a Ray sweep (a `ReplayOptimizeSpec`, and `strategy: descent`, search
/// stage by stage and run in-process only).
fn sweep_spec_of(spec: &Bound<'_, PyAny>) -> PyResult<dynosim_sweep::SweepSpec> {
    match read_spec(spec)? {
        AnySpec::Sweep(sweep)
            if matches!(sweep.strategy, dynosim_sweep::Strategy::Descent { .. }) =>
        {
            Err(pyo3::exceptions::PyValueError::new_err(
                "ray: search: {strategy: descent} goes stage by stage in-process; run it \
                 without ray",
            ))
        }
        AnySpec::Sweep(sweep) => Ok(sweep),
        AnySpec::Optimize(_) => Err(pyo3::exceptions::PyValueError::new_err(
            "ray: a ReplayOptimizeSpec is searched stage by stage in-process; run it without ray",
        )),
    }
}

/// For a Ray sweep's driver: the candidates of `spec` that still need a simulation in `out`
/// (rejected ones are stored with their error on the way), as JSON `[{hash, settings}]`.
#[pyfunction]
pub fn _sweep_unstored(py: Python<'_>, spec: &Bound<'_, PyAny>, out: PathBuf) -> PyResult<String> {
    let spec = sweep_spec_of(spec)?;
    py.detach(move || -> dynosim::Result<String> {
        let mut evaluator =
            dynosim_sweep::Evaluator::open(&out, &RunOptions::default(), spec.gpu_budget)?;
        let pending = evaluator.unstored(&dynosim_sweep::candidates(&spec))?;
        let listed: Vec<Value> = pending
            .into_iter()
            .map(|candidate| json!({"hash": candidate.hash, "settings": candidate.settings.values}))
            .collect();
        Ok(Value::Array(listed).to_string())
    })
    .map_err(to_py_err)
}

fn batch_of(text: &str) -> dynosim::Result<Vec<dynosim_sweep::Candidate>> {
    let bad = || dynosim::Error::runtime("a sweep batch is not a list of {hash, settings}");
    let value: Value = serde_json::from_str(text).map_err(|_| bad())?;
    value
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|item| {
            Ok(dynosim_sweep::Candidate {
                hash: item["hash"].as_str().ok_or_else(bad)?.to_owned(),
                settings: dynosim_sweep::Settings {
                    values: item["settings"].as_object().ok_or_else(bad)?.clone(),
                },
            })
        })
        .collect()
}

/// For a Ray task: simulates a batch (JSON `[{hash, settings}]`) on every core of this node
/// and returns the outcomes as JSON `[{hash, settings, gpus, error, report}]`.
#[pyfunction]
pub fn _sweep_evaluate(py: Python<'_>, batch: String) -> PyResult<String> {
    py.detach(move || -> dynosim::Result<String> {
        let candidates = batch_of(&batch)?;
        let mut evaluator = dynosim_sweep::Evaluator::detached(&RunOptions::default())?;
        let rows = evaluator.evaluate(&candidates)?;
        let outcomes: Vec<Value> = candidates
            .iter()
            .zip(rows)
            .filter_map(|(candidate, row)| {
                let row = row?;
                Some(json!({
                    "hash": candidate.hash,
                    "settings": candidate.settings.values,
                    "gpus": row.gpus,
                    "error": row.error,
                    "report": row.report,
                }))
            })
            .collect();
        Ok(Value::Array(outcomes).to_string())
    })
    .map_err(to_py_err)
}

/// For a Ray sweep's driver: stores a batch's outcomes (from [`_sweep_evaluate`]) in `out`.
#[pyfunction]
pub fn _sweep_store(py: Python<'_>, out: PathBuf, outcomes: String) -> PyResult<()> {
    py.detach(move || -> dynosim::Result<()> {
        let bad = || dynosim::Error::runtime("sweep outcomes are not a list of outcomes");
        let value: Value = serde_json::from_str(&outcomes).map_err(|_| bad())?;
        let evaluator = dynosim_sweep::Evaluator::open(&out, &RunOptions::default(), None)?;
        for item in value.as_array().ok_or_else(bad)? {
            let candidate = dynosim_sweep::Candidate {
                hash: item["hash"].as_str().ok_or_else(bad)?.to_owned(),
                settings: dynosim_sweep::Settings {
                    values: item["settings"].as_object().ok_or_else(bad)?.clone(),
                },
            };
            let outcome = dynosim_sweep::Stored {
                gpus: item["gpus"].as_u64(),
                error: item["error"].as_str().ok_or_else(bad)?.to_owned(),
                report: item["report"].as_object().ok_or_else(bad)?.clone(),
            };
            evaluator.store(&candidate, &outcome)?;
        }
        Ok(())
    })
    .map_err(to_py_err)
}
