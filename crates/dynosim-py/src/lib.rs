//! `dynosim._dynosim`: the Python face of dynosim.
//!
//! The two API functions take the reference's `dynamo.replay` signatures and fill the same
//! [`ReplayOptions`] the CLI fills, so validation (and every message) is shared with the CLI.
//! Their keyword arguments are taken by name from `**kwargs` (`Kwargs`): each function reads its
//! keyword-only parameters (the settings table's `ReplayFunction::keywords`), each replay option read as its setting's kind and stored
//! through the table, so no argument is spelled here; the `text_signature`s and `_dynosim.pyi`
//! state the signatures (tests hold them to the runtime and to the table).
//! The command line is not linked here: `dynosim.main` and `python -m dynosim` run the `dynosim`
//! binary of the `dynosim-bin` wheel (`python/dynosim/_cli.py`). The GIL is released while a
//! replay runs, and the calling thread keeps answering signals meanwhile. Ctrl-C during a replay function's
//! simulation stops it as the command line's does: the files asked for (`report_jsonl_path`,
//! `html_report`, `aiperf_dir`) are written with what happened until then, the report marked
//! interrupted, and then the `KeyboardInterrupt` is raised (before the simulation, or at a
//! second Ctrl-C, it is raised at once and nothing is written).
//!
//! Engine arguments and router configs are accepted as the reference's objects
//! (`MockEngineArgs`, `KvRouterConfig`, defined in [`engine_args`] and [`router_config`]), as
//! dicts, or as JSON text; all three reach the same parsers as the CLI's JSON flags.

mod aic;
mod convert;
mod engine_args;
mod planner;
mod router_config;
mod sub_objects;
mod sweep;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use dynosim::config::settings::{
    JsonObject, Kind, ReplayFunction, Setting, SettingValue, Target, SETTINGS,
};
use dynosim::config::spelling::python_message;
use dynosim::config::ReplayOptions;
use dynosim::error::ErrorKind;
use dynosim::report::accounting::Shortfall;
use dynosim::report::Value;
use dynosim::Report;
use dynosim_run::replay;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use convert::{int_arg, opt_float_arg, opt_int_arg, opt_str_arg, type_name};

/// Usage errors (bad arguments) become `ValueError`, run failures `RuntimeError`; messages
/// name Python arguments (`replay_concurrency`), not flags.
fn to_py_err(err: dynosim::Error) -> PyErr {
    let message = python_message(&err);
    match err.kind() {
        ErrorKind::Usage => PyValueError::new_err(message),
        ErrorKind::Runtime => PyRuntimeError::new_err(message),
    }
}

/// `trace_files` may be one path (`str` or `os.PathLike`) or an iterable of paths.
fn trace_file_list(trace_files: &Bound<'_, PyAny>) -> PyResult<Vec<PathBuf>> {
    let wrong_type = |what: &Bound<'_, PyAny>| {
        PyTypeError::new_err(format!(
            "argument 'trace_files': expected a path or an iterable of paths, got '{}'",
            type_name(what)
        ))
    };
    if trace_files.is_instance_of::<PyString>() || trace_files.hasattr("__fspath__")? {
        return trace_files
            .extract::<PathBuf>()
            .map(|path| vec![path])
            .map_err(|_| wrong_type(trace_files));
    }
    let items = trace_files
        .try_iter()
        .map_err(|_| wrong_type(trace_files))?;
    let mut files = Vec::new();
    for item in items {
        let item = item?;
        files.push(item.extract::<PathBuf>().map_err(|_| wrong_type(&item))?);
    }
    Ok(files)
}

/// Engine arguments, router and planner configs as JSON text: the reference's object
/// (`MockEngineArgs`, `KvRouterConfig`), a dict (plain values, numpy scalars included) or text
/// (inline JSON; for the planner also a file path).
fn config_text(
    name: &str,
    what: JsonObject,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<String>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    if value.is_instance_of::<PyString>() {
        return Ok(Some(value.extract::<String>()?));
    }
    let object_text = match what {
        JsonObject::EngineArgs => engine_args::object_json_text(value),
        JsonObject::RouterConfig => router_config::object_json_text(value),
        JsonObject::PlannerConfig => None,
    };
    if let Some(text) = object_text {
        return Ok(Some(text));
    }
    if value.is_instance_of::<PyDict>() {
        return Ok(Some(convert::any_to_json(name, value)?.to_string()));
    }
    let expected = match what {
        JsonObject::EngineArgs => "MockEngineArgs, a dict or a JSON string",
        JsonObject::RouterConfig => "KvRouterConfig, a dict or a JSON string",
        JsonObject::PlannerConfig => "a dict, a JSON string or a file path",
    };
    let type_name = value.get_type().name()?.to_string();
    Err(PyTypeError::new_err(format!(
        "argument '{name}': expected {expected}, got '{type_name}'"
    )))
}

/// One replay from the Python API: validates, checks and opens the outputs, replays without
/// the GIL (scaled by `scaling_policy` or the native planner when given), publishes the outputs,
/// and returns the report dict (with a planner, the planner report around it).
fn replay_to_dict<'py>(
    py: Python<'py>,
    options: ReplayOptions,
    outputs: ExtraOutputs,
    scaling_policy: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let scaling_policy = scaling_policy.filter(|policy| !policy.is_none());
    if scaling_policy.is_some() && options.planner_config.is_some() {
        return Err(PyValueError::new_err(
            "give planner_config (dynosim's planner) or scaling_policy (your own), not both",
        ));
    }
    let planned = scaling_policy.is_some() || options.planner_config.is_some();
    let jsonl_path = options.report_jsonl.clone();
    let mut spec = options.into_spec().map_err(to_py_err)?;
    let prepared = replay::Outputs::prepare(
        &mut spec,
        replay::OutputPaths {
            report_json: None,
            jsonl: jsonl_path.as_deref(),
            aiperf_dir: outputs.aiperf_dir.as_deref(),
            html: outputs.html_report.as_deref(),
            aiperf_settings: None,
        },
        format!("{}(...) (Python API)", outputs.function),
    )
    .map_err(to_py_err)?;
    let mut policy = scaling_policy
        .map(planner::PyScalingPolicy::new)
        .transpose()?;
    let policy_object = policy.as_ref().map(|p| p.object().clone_ref(py));
    let ((result, policy), interrupt) = run_stopping_at_interrupt(py, move |cancelled| {
        let scaling = policy
            .as_mut()
            .map(|policy| policy as &mut dyn dynosim::planner::ScalingPolicy);
        let replayed = replay::replay(&spec, prepared, cancelled, None, scaling);
        (replayed, policy)
    })?;
    if let Some(interrupt) = interrupt {
        // The outputs of what happened are written (or the run was stopped before its
        // simulation and wrote nothing); the warning says how much is missing.
        if let Ok(replayed) = &result {
            let _ = warn_of_shortfall(py, &replayed.report);
        }
        return Err(interrupt);
    }
    // The policy's own exception, unchanged.
    if let Some(err) = policy.and_then(|mut policy| policy.error.take()) {
        return Err(err);
    }
    let replay::Replayed {
        report, planner, ..
    } = result.map_err(to_py_err)?;
    warn_of_shortfall(py, &report)?;
    let trace_report = report_to_dict(py, &report)?;
    if !planned {
        return Ok(trace_report.into_any());
    }
    planner::planner_report(
        py,
        trace_report,
        &planner.unwrap_or_default(),
        policy_object.as_ref(),
    )
}

/// A `RuntimeWarning` when some request of the run did not complete (the report dict has
/// the counts by reason), as the command line prints a warning line.
fn warn_of_shortfall(py: Python<'_>, report: &Report) -> PyResult<()> {
    let Some(shortfall) = Shortfall::of(report) else {
        return Ok(());
    };
    let message = std::ffi::CString::new(shortfall.warning())
        .map_err(|err| PyRuntimeError::new_err(err.to_string()))?;
    let category = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
    PyErr::warn(py, &category, &message, 2)
}

/// The optional outputs of a replay function: `aiperf_dir=` and `html_report=`, with the name
/// of the function for the HTML report's configuration table.
struct ExtraOutputs {
    function: &'static str,
    aiperf_dir: Option<PathBuf>,
    html_report: Option<PathBuf>,
}

/// How often a waiting caller checks for signals (Ctrl-C) while a run is in progress.
const SIGNAL_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Runs `work` on its own thread, without the GIL, while this thread keeps running Python's
/// signal handlers: a `KeyboardInterrupt` (or any exception a handler raises) is returned at
/// once. `work` is then told through its flag that nobody waits for it; it must not write
/// anything after seeing the flag set.
fn run_interruptibly<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send + 'static,
    F: FnOnce(&AtomicBool) -> T + Send + 'static,
{
    run_waiting(py, work, false).map(|(result, _)| result)
}

/// Like [`run_interruptibly`], except that the first exception a signal handler raises
/// (Ctrl-C's `KeyboardInterrupt`) sets `work`'s flag and waits for `work` to finish (a
/// replay stops its simulation and writes what happened): its result comes back with that
/// exception, for the caller to raise. A second one is returned at once.
fn run_stopping_at_interrupt<T, F>(py: Python<'_>, work: F) -> PyResult<(T, Option<PyErr>)>
where
    T: Send + 'static,
    F: FnOnce(&AtomicBool) -> T + Send + 'static,
{
    run_waiting(py, work, true)
}

/// Runs `work` on its own thread, answering signals meanwhile; with `wait_after_interrupt`
/// the first handler's exception is kept until `work` returns (see the two callers).
fn run_waiting<T, F>(
    py: Python<'_>,
    work: F,
    wait_after_interrupt: bool,
) -> PyResult<(T, Option<PyErr>)>
where
    T: Send + 'static,
    F: FnOnce(&AtomicBool) -> T + Send + 'static,
{
    let cancelled = Arc::new(AtomicBool::new(false));
    let (sender, receiver) = mpsc::channel();
    let flag = Arc::clone(&cancelled);
    std::thread::Builder::new()
        .name("dynosim-replay".into())
        .spawn(move || {
            // The receiver is gone only if the caller stopped waiting.
            let _ = sender.send(work(&flag));
        })
        .map_err(|err| PyRuntimeError::new_err(format!("cannot start the replay thread: {err}")))?;
    let mut receiver = receiver;
    let mut interrupt: Option<PyErr> = None;
    loop {
        // The receiver travels into the GIL-free closure and back (it cannot be shared).
        let (returned, received) = py.detach(move || {
            let received = receiver.recv_timeout(SIGNAL_POLL_INTERVAL);
            (receiver, received)
        });
        receiver = returned;
        match received {
            Ok(result) => return Ok((result, interrupt)),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(err) = py.check_signals() {
                    cancelled.store(true, Ordering::Relaxed);
                    if !wait_after_interrupt || interrupt.is_some() {
                        return Err(err);
                    }
                    interrupt = Some(err);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(PyRuntimeError::new_err("the replay thread failed"))
            }
        }
    }
}

/// The report as a dict in the reference's key order, with Python ints and floats.
fn report_to_dict<'py>(py: Python<'py>, report: &Report) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in &report.entries {
        match *value {
            Value::Int(int) => dict.set_item(*key, int)?,
            Value::Float(float) => dict.set_item(*key, float)?,
        }
    }
    Ok(dict)
}

/// A path argument: `str` or `os.PathLike` (`None` stays `None`).
fn path_arg(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<PathBuf>> {
    value
        .filter(|value| !value.is_none())
        .map(|value| {
            value.extract::<PathBuf>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "argument '{name}': expected str or os.PathLike, got '{}'",
                    type_name(value)
                ))
            })
        })
        .transpose()
}

/// The keyword arguments of a replay function, taken one by one by name from a copy of the
/// caller's dict. Omitted and `None` are the same (the argument's default); whatever no one took
/// is an unexpected argument, reported as Python reports one.
struct Kwargs<'py> {
    function: &'static str,
    dict: Bound<'py, PyDict>,
}

impl<'py> Kwargs<'py> {
    fn new(
        py: Python<'py>,
        function: &'static str,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Self> {
        let dict = match kwargs {
            Some(kwargs) => kwargs.copy()?,
            None => PyDict::new(py),
        };
        Ok(Self { function, dict })
    }

    fn take(&self, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        let value = self.dict.get_item(name)?;
        if value.is_some() {
            self.dict.del_item(name)?;
        }
        Ok(value.filter(|value| !value.is_none()))
    }

    /// A path argument: `str` or `os.PathLike`.
    fn take_path(&self, name: &str) -> PyResult<Option<PathBuf>> {
        path_arg(name, self.take(name)?.as_ref())
    }

    /// The value of one setting's keyword, read as the setting's kind (omitted and `None`
    /// are [`SettingValue::Unset`]: the setting's default). Types are checked here, where the
    /// message can name the argument.
    fn setting_value(&self, setting: &Setting, keyword: &str) -> PyResult<SettingValue> {
        let value = self.take(keyword)?;
        let value = value.as_ref();
        let given = match setting.kind {
            Kind::Int => opt_int_arg(keyword, value)?.map(SettingValue::Int),
            Kind::Float => opt_float_arg(keyword, value)?.map(SettingValue::Float),
            Kind::Text => opt_str_arg(keyword, value)?.map(SettingValue::Text),
            Kind::Json(object) => config_text(keyword, object, value)?.map(SettingValue::Text),
            Kind::Path => path_arg(keyword, value)?.map(SettingValue::Path),
            Kind::Paths | Kind::Switch | Kind::PythonObject => {
                return Err(PyTypeError::new_err(format!(
                    "argument '{keyword}' is not read as a keyword"
                )))
            }
        };
        Ok(given.unwrap_or(SettingValue::Unset))
    }

    /// Fills `options` from the replay options among `keywords` (a function's keyword-only
    /// parameters, in their order); the front's own keywords are left for the caller.
    fn fill(&self, options: &mut ReplayOptions, keywords: &[&str]) -> PyResult<()> {
        for keyword in keywords {
            let Some(setting) = SETTINGS
                .iter()
                .find(|setting| setting.python_keyword() == Some(*keyword))
            else {
                continue;
            };
            if let Target::Front = setting.target {
                continue;
            }
            let value = self.setting_value(setting, keyword)?;
            setting.apply(options, value).map_err(|message| {
                PyTypeError::new_err(format!("argument '{keyword}': {message}"))
            })?;
        }
        Ok(())
    }

    /// Fails on the first argument no one took.
    fn finish(self) -> PyResult<()> {
        match self.dict.keys().iter().next() {
            None => Ok(()),
            Some(name) => Err(PyTypeError::new_err(format!(
                "{}() got an unexpected keyword argument {}",
                self.function,
                name.repr()?
            ))),
        }
    }
}

/// The rest of a replay function's call: its keywords (in its signature's order),
/// the replay options among them driven by the settings table and the front's own (AIC config,
/// extra outputs, scaling policy) read here, then the replay itself. `options` holds what the
/// function filled from its positional arguments.
fn replay_with_kwargs<'py>(
    py: Python<'py>,
    mut options: ReplayOptions,
    function: ReplayFunction,
    kwargs: Kwargs<'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let kw = &kwargs;
    kw.fill(&mut options, &function.keywords())?;
    aic::apply(&mut options, kw.take("aic_perf_config")?.as_ref())?;
    let outputs = ExtraOutputs {
        function: kw.function,
        aiperf_dir: kw.take_path("aiperf_dir")?,
        html_report: kw.take_path("html_report")?,
    };
    let scaling_policy = kw.take("scaling_policy")?;
    kwargs.finish()?;
    replay_to_dict(py, options, outputs, scaling_policy.as_ref())
}

/// Replays one or more trace files and returns the report dict.
#[pyfunction]
#[pyo3(signature = (trace_files, **kwargs))]
#[pyo3(
    text_signature = "(trace_files, *, extra_engine_args=None, prefill_engine_args=None, \
    decode_engine_args=None, router_config=None, aic_perf_config=None, num_workers=1, \
    num_prefill_workers=1, num_decode_workers=1, replay_concurrency=None, \
    replay_mode='offline', router_mode='round_robin', arrival_speedup_ratio=1.0, \
    trace_block_size=None, trace_format='mooncake', trace_shared_prefix_ratio=0.0, \
    trace_num_prefix_groups=0, report_jsonl_path=None, max_sim_time_ms=None, model_name=None, \
    sla_ttft_ms=None, sla_itl_ms=None, sla_e2e_ms=None, planner_config=None, \
    benchmark_granularity=8, router_seed=0, aiperf_dir=None, html_report=None, scaling_policy=None)"
)]
fn run_trace_replay<'py>(
    py: Python<'py>,
    trace_files: &Bound<'py, PyAny>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let kw = Kwargs::new(py, ReplayFunction::Trace.name(), kwargs)?;
    let options = ReplayOptions {
        trace_files: trace_file_list(trace_files)?,
        ..ReplayOptions::default()
    };
    replay_with_kwargs(py, options, ReplayFunction::Trace, kw)
}

/// Replays a generated workload (identical requests, or lengths drawn from a spread) and
/// returns the report dict.
#[pyfunction]
#[pyo3(signature = (input_tokens, output_tokens, request_count, **kwargs))]
#[pyo3(text_signature = "(input_tokens, output_tokens, request_count, *, \
    extra_engine_args=None, prefill_engine_args=None, decode_engine_args=None, \
    router_config=None, aic_perf_config=None, num_workers=1, num_prefill_workers=1, \
    num_decode_workers=1, replay_concurrency=None, replay_mode='offline', \
    router_mode='round_robin', arrival_speedup_ratio=1.0, request_rate=None, \
    arrival_interval_ms=None, arrival_seed=42, turns_per_session=1, shared_prefix_ratio=0.0, \
    num_prefix_groups=0, inter_turn_delay_ms=0.0, input_tokens_stddev=None, \
    output_tokens_stddev=None, random_range_ratio=None, length_seed=None, model_name=None, \
    sla_ttft_ms=None, \
    sla_itl_ms=None, sla_e2e_ms=None, planner_config=None, benchmark_granularity=8, router_seed=0, aiperf_dir=None, html_report=None, scaling_policy=None)")]
fn run_synthetic_trace_replay<'py>(
    py: Python<'py>,
    input_tokens: &Bound<'py, PyAny>,
    output_tokens: &Bound<'py, PyAny>,
    request_count: &Bound<'py, PyAny>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let kw = Kwargs::new(py, ReplayFunction::Synthetic.name(), kwargs)?;
    let options = ReplayOptions {
        input_tokens: Some(int_arg("input_tokens", input_tokens)?),
        output_tokens: Some(int_arg("output_tokens", output_tokens)?),
        request_count: Some(int_arg("request_count", request_count)?),
        ..ReplayOptions::default()
    };
    replay_with_kwargs(py, options, ReplayFunction::Synthetic, kw)
}

/// The keyword-only parameters of a replay function as the settings table defines them,
/// `name=default, ...` (for the test that holds the `text_signature`s and the stub to the
/// table).
#[pyfunction]
fn _replay_keywords(function: &str) -> PyResult<String> {
    let function = [ReplayFunction::Trace, ReplayFunction::Synthetic]
        .into_iter()
        .find(|known| known.name() == function)
        .ok_or_else(|| PyValueError::new_err(format!("no replay function named '{function}'")))?;
    Ok(dynosim::config::settings::python_signature(
        &function.keywords(),
    ))
}

#[pymodule]
fn _dynosim(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(run_trace_replay, module)?)?;
    module.add_function(wrap_pyfunction!(run_synthetic_trace_replay, module)?)?;
    module.add_function(wrap_pyfunction!(_replay_keywords, module)?)?;
    module.add_function(wrap_pyfunction!(sweep::sweep, module)?)?;
    module.add_function(wrap_pyfunction!(sweep::_sweep_unstored, module)?)?;
    module.add_function(wrap_pyfunction!(sweep::_sweep_evaluate, module)?)?;
    module.add_function(wrap_pyfunction!(sweep::_sweep_store, module)?)?;
    module.add_class::<engine_args::MockEngineArgs>()?;
    module.add_class::<sub_objects::SglangArgs>()?;
    module.add_class::<sub_objects::TrtllmArgs>()?;
    module.add_class::<sub_objects::ReasoningConfig>()?;
    module.add_class::<router_config::KvRouterConfig>()?;
    module.add_class::<aic::AicPerfConfig>()?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
