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
            progress: true,
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
