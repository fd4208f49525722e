//! The planner from Python: a `scaling_policy` object the loop calls at scaling ticks, and the
//! planner report (`dynosim.planner.ReplayPlannerReport`) a planner run returns.
//!
//! A policy has the reference's two methods: `initial_tick_ms()` (a number; not finite: no
//! ticks) and `on_tick(snapshot)` with the reference's snapshot dict, returning a dict with
//! `target_prefill`, `target_decode` (absolute non-draining worker counts, or `None`) and
//! `next_tick_ms` (`None`: no more ticks). The replay runs without the GIL; it is taken only
//! for these calls. An exception raised by the policy ends the run and reaches the caller
//! unchanged.

use dynosim::planner::{
    ForwardPassMetrics, PlannerOutcome, PoolWorkers, ScalingDecision, ScalingPolicy,
    ScalingSnapshot, TrafficStats,
};
use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// A Python object driving the scaling ticks.
pub struct PyScalingPolicy {
    object: Py<PyAny>,
    /// The exception that ended the run, raised again to the caller afterwards.
    pub error: Option<PyErr>,
}

impl PyScalingPolicy {
    /// Checks that `object` has the two methods.
    pub fn new(object: &Bound<'_, PyAny>) -> PyResult<Self> {
        for method in ["initial_tick_ms", "on_tick"] {
            if !object.hasattr(method)? {
                let type_name = object.get_type().name()?.to_string();
                return Err(PyTypeError::new_err(format!(
                    "argument 'scaling_policy': expected an object with initial_tick_ms() and \
                     on_tick(snapshot), got '{type_name}' without {method}()"
                )));
            }
        }
        Ok(Self {
            object: object.clone().unbind(),
            error: None,
        })
    }

    pub fn object(&self) -> &Py<PyAny> {
        &self.object
    }

    /// Keeps `err` for the caller and turns it into the run's error.
    fn fail(&mut self, err: PyErr) -> dynosim::Error {
        let message = format!("scaling_policy raised: {err}");
        self.error = Some(err);
        dynosim::Error::runtime(message)
    }
}

impl ScalingPolicy for PyScalingPolicy {
    fn initial_tick_ms(&mut self) -> dynosim::Result<f64> {
        let result = Python::attach(|py| -> PyResult<f64> {
            self.object
                .bind(py)
                .call_method0("initial_tick_ms")?
                .extract::<f64>()
        });
        result.map_err(|err| self.fail(err))
    }

    fn on_tick(&mut self, snapshot: &ScalingSnapshot) -> dynosim::Result<ScalingDecision> {
        let result = Python::attach(|py| -> PyResult<ScalingDecision> {
            let dict = snapshot_dict(py, snapshot)?;
            let answer = self.object.bind(py).call_method1("on_tick", (dict,))?;
            decision_of(&answer)
        });
        result.map_err(|err| self.fail(err))
    }
}

/// A decision dict: every key must be there (`None` allowed).
fn decision_of(answer: &Bound<'_, PyAny>) -> PyResult<ScalingDecision> {
    let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
        answer
            .get_item(key)
            .map_err(|_| PyKeyError::new_err(key.to_owned()))
    };
    let count = |key: &str| -> PyResult<Option<usize>> {
        let value = get(key)?;
        if value.is_none() {
            return Ok(None);
        }
        value.extract::<usize>().map(Some).map_err(|_| {
            PyTypeError::new_err(format!(
                "scaling_policy.on_tick() returned {key}={value}: expected a non-negative int \
                 or None"
            ))
        })
    };
    let target_prefill = count("target_prefill")?;
    let target_decode = count("target_decode")?;
    let next = get("next_tick_ms")?;
    let next_tick_ms = if next.is_none() {
        None
    } else {
        Some(next.extract::<f64>().map_err(|_| {
            PyTypeError::new_err(format!(
                "scaling_policy.on_tick() returned next_tick_ms={next}: expected a number or \
                 None"
            ))
        })?)
    };
    Ok(ScalingDecision {
        target_prefill,
        target_decode,
        next_tick_ms,
    })
}

/// The reference's snapshot dict.
fn snapshot_dict<'py>(py: Python<'py>, snapshot: &ScalingSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("now_ms", snapshot.now_ms)?;
    dict.set_item(
        "prefill_fpm_snapshots",
        fpm_list(py, &snapshot.prefill_fpm)?,
    )?;
    dict.set_item("decode_fpm_snapshots", fpm_list(py, &snapshot.decode_fpm)?)?;
    for (pool, workers) in [("prefill", &snapshot.prefill), ("decode", &snapshot.decode)] {
        pool_entries(&dict, pool, workers)?;
    }
    dict.set_item("traffic", traffic_dict(py, &snapshot.traffic)?)?;
    Ok(dict)
}

fn pool_entries(dict: &Bound<'_, PyDict>, pool: &str, workers: &PoolWorkers) -> PyResult<()> {
    for (state, ids) in [
        ("active", &workers.active),
        ("starting", &workers.starting),
        ("draining", &workers.draining),
    ] {
        dict.set_item(format!("{state}_{pool}_ids"), ids.clone())?;
        dict.set_item(format!("{state}_{pool}_count"), ids.len())?;
    }
    dict.set_item(format!("non_draining_{pool}_count"), workers.non_draining())?;
    dict.set_item(
        format!("total_{pool}_count"),
        workers.non_draining() + workers.draining.len(),
    )?;
    Ok(())
}

fn fpm_list<'py>(
    py: Python<'py>,
    metrics: &[(usize, u32, ForwardPassMetrics)],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for &(worker, rank, fpm) in metrics {
        let d = PyDict::new(py);
        d.set_item("worker_id", worker)?;
        d.set_item("dp_rank", rank)?;
        d.set_item("wall_time", fpm.wall_time_s)?;
        d.set_item("num_prefill_requests", fpm.num_prefill_requests)?;
        d.set_item("sum_prefill_tokens", fpm.sum_prefill_tokens)?;
        d.set_item("var_prefill_length", fpm.var_prefill_length)?;
        d.set_item("sum_prefill_kv_tokens", fpm.sum_prefill_kv_tokens)?;
        d.set_item("num_decode_requests", fpm.num_decode_requests)?;
        d.set_item("sum_decode_kv_tokens", fpm.sum_decode_kv_tokens)?;
        d.set_item("var_decode_kv_tokens", fpm.var_decode_kv_tokens)?;
        d.set_item("num_queued_prefill", fpm.num_queued_prefill)?;
        d.set_item("sum_queued_prefill_tokens", fpm.sum_queued_prefill_tokens)?;
        d.set_item("var_queued_prefill_length", fpm.var_queued_prefill_length)?;
        d.set_item("num_queued_decode", fpm.num_queued_decode)?;
        d.set_item(
            "sum_queued_decode_kv_tokens",
            fpm.sum_queued_decode_kv_tokens,
        )?;
        d.set_item(
            "var_queued_decode_kv_tokens",
            fpm.var_queued_decode_kv_tokens,
        )?;
        list.append(d)?;
    }
    Ok(list)
}

fn traffic_dict<'py>(py: Python<'py>, traffic: &TrafficStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("duration_s", traffic.duration_s)?;
    d.set_item("num_req", traffic.num_req)?;
    d.set_item("avg_isl", traffic.avg_isl)?;
    d.set_item("avg_osl", traffic.avg_osl)?;
    d.set_item("avg_ttft_ms", traffic.avg_ttft_ms)?;
    d.set_item("avg_itl_ms", traffic.avg_itl_ms)?;
    d.set_item("shape_count", traffic.shape_count)?;
    d.set_item("ttft_count", traffic.ttft_count)?;
    d.set_item("itl_count", traffic.itl_count)?;
    d.set_item("avg_accept_length", traffic.avg_accept_length)?;
    d.set_item("avg_kv_hit_rate", traffic.avg_kv_hit_rate)?;
    d.set_item("hit_rate_count", traffic.hit_rate_count)?;
    d.set_item(
        "accept_length_forward_count",
        traffic.accept_length_forward_count,
    )?;
    Ok(d)
}

/// The planner report of a run: the policy's own (`finalize(trace_report)`, as the
/// reference's adapter has), else `dynosim.planner.ReplayPlannerReport` from what the loop saw.
pub fn planner_report<'py>(
    py: Python<'py>,
    trace_report: Bound<'py, PyDict>,
    outcome: &PlannerOutcome,
    policy: Option<&Py<PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(policy) = policy {
        let policy = policy.bind(py);
        if policy.hasattr("finalize")? {
            return policy.call_method1("finalize", (trace_report,));
        }
    }
    let module = py.import("dynosim.planner")?;
    let event_class = module.getattr("ScalingEvent")?;
    let events = PyList::empty(py);
    for event in &outcome.events {
        events.append(event_class.call1((
            event.at_s,
            event.component,
            event.from,
            event.to,
            event.reason(),
        ))?)?;
    }
    module.getattr("ReplayPlannerReport")?.call1((
        trace_report,
        events,
        PyList::empty(py),
        outcome.ticks,
        py.None(),
    ))
}
