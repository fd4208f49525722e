//! `dynosim._dynosim`: the Python face of dynosim.
//!
//! The two API functions take the reference's `dynamo.replay` signatures and fill the same
//! [`ReplayOptions`] the CLI fills, so validation (and every message) is shared with the CLI.
//! `main` runs the CLI itself, parser included. The GIL is released while a replay runs, and
//! the calling thread keeps answering signals meanwhile, so Ctrl-C raises `KeyboardInterrupt`
//! at once.
//!
//! Engine arguments and router configs are accepted as the reference's objects
//! (`MockEngineArgs`, `KvRouterConfig`, defined in [`engine_args`] and [`router_config`]), as
//! dicts, or as JSON text; all three reach the same parsers as the CLI's JSON flags.

mod aic;
mod convert;
mod engine_args;
mod planner;
mod router_config;
mod sweep;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use dynosim::config::spelling::python_message;
use dynosim::config::ReplayOptions;
use dynosim::error::ErrorKind;
use dynosim::report::Value;
use dynosim::Report;
use dynosim_cli::replay;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use convert::{float_arg, int_arg, opt_float_arg, opt_int_arg, opt_str_arg, str_arg};

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
        let type_name = what
            .get_type()
            .name()
            .map(|name| name.to_string())
            .unwrap_or_else(|_| "?".to_owned());
        PyTypeError::new_err(format!(
            "argument 'trace_files': expected a path or an iterable of paths, got '{type_name}'"
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

/// Which config object an argument takes besides a dict or JSON text.
#[derive(Clone, Copy)]
enum ConfigArg {
    EngineArgs,
    RouterConfig,
    /// A dict, inline JSON or a file path.
    Planner,
}

/// Engine arguments, router and planner configs as JSON text: the reference's object
/// (`MockEngineArgs`, `KvRouterConfig`), a dict (plain values, numpy scalars included) or text
/// (inline JSON; for the planner also a file path).
fn config_text(
    name: &str,
    what: ConfigArg,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<String>> {
    let Some(value) = value.filter(|value| !value.is_none()) else {
        return Ok(None);
    };
    if value.is_instance_of::<PyString>() {
        return Ok(Some(value.extract::<String>()?));
    }
    let object_text = match what {
        ConfigArg::EngineArgs => engine_args::object_json_text(value),
        ConfigArg::RouterConfig => router_config::object_json_text(value),
        ConfigArg::Planner => None,
    };
    if let Some(text) = object_text {
        return Ok(Some(text));
    }
    if value.is_instance_of::<PyDict>() {
        return Ok(Some(convert::any_to_json(name, value)?.to_string()));
    }
    let expected = match what {
        ConfigArg::EngineArgs => "MockEngineArgs, a dict or a JSON string",
        ConfigArg::RouterConfig => "KvRouterConfig, a dict or a JSON string",
        ConfigArg::Planner => "a dict, a JSON string or a file path",
    };
    let type_name = value.get_type().name()?.to_string();
    Err(PyTypeError::new_err(format!(
        "argument '{name}': expected {expected}, got '{type_name}'"
    )))
}

/// An integer argument with a default: omitted or `None` gives the default (the signature
/// takes `None` so that an argument's type is checked here, where the message can name it).
fn int_or(name: &str, value: Option<&Bound<'_, PyAny>>, default: i64) -> PyResult<i64> {
    match value {
        Some(value) => int_arg(name, value),
        None => Ok(default),
    }
}

fn float_or(name: &str, value: Option<&Bound<'_, PyAny>>, default: f64) -> PyResult<f64> {
    match value {
        Some(value) => float_arg(name, value),
        None => Ok(default),
    }
}

fn str_or(name: &str, value: Option<&Bound<'_, PyAny>>, default: &str) -> PyResult<String> {
    match value {
        Some(value) => str_arg(name, value),
        None => Ok(default.to_owned()),
    }
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
        },
        format!("{}(...) (Python API)", outputs.function),
    )
    .map_err(to_py_err)?;
    let mut policy = scaling_policy
        .map(planner::PyScalingPolicy::new)
        .transpose()?;
    let policy_object = policy.as_ref().map(|p| p.object().clone_ref(py));
    let (result, policy) = run_interruptibly(py, move |cancelled| {
        let scaling = policy
            .as_mut()
            .map(|policy| policy as &mut dyn dynosim::planner::ScalingPolicy);
        let replayed = replay::replay(
            &spec,
            prepared,
            (cancelled, replay::OnCancel::WriteNothing),
            None,
            scaling,
        );
        (replayed, policy)
    })?;
    // The policy's own exception, unchanged.
    if let Some(err) = policy.and_then(|mut policy| policy.error.take()) {
        return Err(err);
    }
    let replay::Replayed { report, planner } = result.map_err(to_py_err)?;
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
    loop {
        // The receiver travels into the GIL-free closure and back (it cannot be shared).
        let (returned, received) = py.detach(move || {
            let received = receiver.recv_timeout(SIGNAL_POLL_INTERVAL);
            (receiver, received)
        });
        receiver = returned;
        match received {
            Ok(result) => return Ok(result),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Err(err) = py.check_signals() {
                    cancelled.store(true, Ordering::Relaxed);
                    return Err(err);
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

/// Replays one or more trace files and returns the report dict.
#[pyfunction]
#[pyo3(signature = (
    trace_files,
    *,
    extra_engine_args=None,
    prefill_engine_args=None,
    decode_engine_args=None,
    router_config=None,
    aic_perf_config=None,
    num_workers=None,
    num_prefill_workers=None,
    num_decode_workers=None,
    replay_concurrency=None,
    replay_mode=None,
    router_mode=None,
    arrival_speedup_ratio=None,
    trace_block_size=None,
    trace_format=None,
    trace_shared_prefix_ratio=None,
    trace_num_prefix_groups=None,
    report_jsonl_path=None,
    max_sim_time_ms=None,
    model_name=None,
    sla_ttft_ms=None,
    sla_itl_ms=None,
    sla_e2e_ms=None,
    planner_config=None,
    benchmark_granularity=None,
    router_seed=None,
    aiperf_dir=None,
    html_report=None,
    scaling_policy=None,
))]
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
#[allow(clippy::too_many_arguments)]
fn run_trace_replay<'py>(
    py: Python<'py>,
    trace_files: &Bound<'py, PyAny>,
    extra_engine_args: Option<&Bound<'py, PyAny>>,
    prefill_engine_args: Option<&Bound<'py, PyAny>>,
    decode_engine_args: Option<&Bound<'py, PyAny>>,
    router_config: Option<&Bound<'py, PyAny>>,
    aic_perf_config: Option<&Bound<'py, PyAny>>,
    num_workers: Option<&Bound<'py, PyAny>>,
    num_prefill_workers: Option<&Bound<'py, PyAny>>,
    num_decode_workers: Option<&Bound<'py, PyAny>>,
    replay_concurrency: Option<&Bound<'py, PyAny>>,
    replay_mode: Option<&Bound<'py, PyAny>>,
    router_mode: Option<&Bound<'py, PyAny>>,
    arrival_speedup_ratio: Option<&Bound<'py, PyAny>>,
    trace_block_size: Option<&Bound<'py, PyAny>>,
    trace_format: Option<&Bound<'py, PyAny>>,
    trace_shared_prefix_ratio: Option<&Bound<'py, PyAny>>,
    trace_num_prefix_groups: Option<&Bound<'py, PyAny>>,
    report_jsonl_path: Option<PathBuf>,
    max_sim_time_ms: Option<&Bound<'py, PyAny>>,
    model_name: Option<&Bound<'py, PyAny>>,
    sla_ttft_ms: Option<&Bound<'py, PyAny>>,
    sla_itl_ms: Option<&Bound<'py, PyAny>>,
    sla_e2e_ms: Option<&Bound<'py, PyAny>>,
    planner_config: Option<&Bound<'py, PyAny>>,
    benchmark_granularity: Option<&Bound<'py, PyAny>>,
    router_seed: Option<&Bound<'py, PyAny>>,
    aiperf_dir: Option<PathBuf>,
    html_report: Option<PathBuf>,
    scaling_policy: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut options = ReplayOptions {
        trace_files: trace_file_list(trace_files)?,
        extra_engine_args: config_text(
            "extra_engine_args",
            ConfigArg::EngineArgs,
            extra_engine_args,
        )?,
        prefill_engine_args: config_text(
            "prefill_engine_args",
            ConfigArg::EngineArgs,
            prefill_engine_args,
        )?,
        decode_engine_args: config_text(
            "decode_engine_args",
            ConfigArg::EngineArgs,
            decode_engine_args,
        )?,
        router_config: config_text("router_config", ConfigArg::RouterConfig, router_config)?,
        model_name: opt_str_arg("model_name", model_name)?,
        num_workers: int_or("num_workers", num_workers, 1)?,
        num_prefill_workers: int_or("num_prefill_workers", num_prefill_workers, 1)?,
        num_decode_workers: int_or("num_decode_workers", num_decode_workers, 1)?,
        replay_concurrency: opt_int_arg("replay_concurrency", replay_concurrency)?,
        replay_mode: str_or("replay_mode", replay_mode, "offline")?,
        router_mode: str_or("router_mode", router_mode, "round_robin")?,
        arrival_speedup_ratio: float_or("arrival_speedup_ratio", arrival_speedup_ratio, 1.0)?,
        trace_format: str_or("trace_format", trace_format, "mooncake")?,
        trace_block_size: opt_int_arg("trace_block_size", trace_block_size)?,
        trace_shared_prefix_ratio: float_or(
            "trace_shared_prefix_ratio",
            trace_shared_prefix_ratio,
            0.0,
        )?,
        trace_num_prefix_groups: int_or("trace_num_prefix_groups", trace_num_prefix_groups, 0)?,
        report_jsonl: report_jsonl_path,
        planner_config: config_text("planner_config", ConfigArg::Planner, planner_config)?,
        benchmark_granularity: int_or("benchmark_granularity", benchmark_granularity, 8)?,
        router_seed: int_or("router_seed", router_seed, 0)?,
        max_sim_time_ms: opt_float_arg("max_sim_time_ms", max_sim_time_ms)?,
        sla_ttft_ms: opt_float_arg("sla_ttft_ms", sla_ttft_ms)?,
        sla_itl_ms: opt_float_arg("sla_itl_ms", sla_itl_ms)?,
        sla_e2e_ms: opt_float_arg("sla_e2e_ms", sla_e2e_ms)?,
        ..ReplayOptions::default()
    };
    aic::apply(&mut options, aic_perf_config)?;
    replay_to_dict(
        py,
        options,
        ExtraOutputs {
            function: "run_trace_replay",
            aiperf_dir,
            html_report,
        },
        scaling_policy,
    )
}

/// Replays a generated workload of identical requests and returns the report dict.
#[pyfunction]
#[pyo3(signature = (
    input_tokens,
    output_tokens,
    request_count,
    *,
    extra_engine_args=None,
    prefill_engine_args=None,
    decode_engine_args=None,
    router_config=None,
    aic_perf_config=None,
    num_workers=None,
    num_prefill_workers=None,
    num_decode_workers=None,
    replay_concurrency=None,
    replay_mode=None,
    router_mode=None,
    arrival_speedup_ratio=None,
    request_rate=None,
    arrival_interval_ms=None,
    arrival_seed=None,
    turns_per_session=None,
    shared_prefix_ratio=None,
    num_prefix_groups=None,
    inter_turn_delay_ms=None,
    model_name=None,
    sla_ttft_ms=None,
    sla_itl_ms=None,
    sla_e2e_ms=None,
    planner_config=None,
    benchmark_granularity=None,
    router_seed=None,
    aiperf_dir=None,
    html_report=None,
    scaling_policy=None,
))]
#[pyo3(text_signature = "(input_tokens, output_tokens, request_count, *, \
    extra_engine_args=None, prefill_engine_args=None, decode_engine_args=None, \
    router_config=None, aic_perf_config=None, num_workers=1, num_prefill_workers=1, \
    num_decode_workers=1, replay_concurrency=None, replay_mode='offline', \
    router_mode='round_robin', arrival_speedup_ratio=1.0, request_rate=None, \
    arrival_interval_ms=None, arrival_seed=42, turns_per_session=1, shared_prefix_ratio=0.0, \
    num_prefix_groups=0, inter_turn_delay_ms=0.0, model_name=None, sla_ttft_ms=None, \
    sla_itl_ms=None, sla_e2e_ms=None, planner_config=None, benchmark_granularity=8, router_seed=0, aiperf_dir=None, html_report=None, scaling_policy=None)")]
#[allow(clippy::too_many_arguments)]
fn run_synthetic_trace_replay<'py>(
    py: Python<'py>,
    input_tokens: &Bound<'py, PyAny>,
    output_tokens: &Bound<'py, PyAny>,
    request_count: &Bound<'py, PyAny>,
    extra_engine_args: Option<&Bound<'py, PyAny>>,
    prefill_engine_args: Option<&Bound<'py, PyAny>>,
    decode_engine_args: Option<&Bound<'py, PyAny>>,
    router_config: Option<&Bound<'py, PyAny>>,
    aic_perf_config: Option<&Bound<'py, PyAny>>,
    num_workers: Option<&Bound<'py, PyAny>>,
    num_prefill_workers: Option<&Bound<'py, PyAny>>,
    num_decode_workers: Option<&Bound<'py, PyAny>>,
    replay_concurrency: Option<&Bound<'py, PyAny>>,
    replay_mode: Option<&Bound<'py, PyAny>>,
    router_mode: Option<&Bound<'py, PyAny>>,
    arrival_speedup_ratio: Option<&Bound<'py, PyAny>>,
    request_rate: Option<&Bound<'py, PyAny>>,
    arrival_interval_ms: Option<&Bound<'py, PyAny>>,
    arrival_seed: Option<&Bound<'py, PyAny>>,
    turns_per_session: Option<&Bound<'py, PyAny>>,
    shared_prefix_ratio: Option<&Bound<'py, PyAny>>,
    num_prefix_groups: Option<&Bound<'py, PyAny>>,
    inter_turn_delay_ms: Option<&Bound<'py, PyAny>>,
    model_name: Option<&Bound<'py, PyAny>>,
    sla_ttft_ms: Option<&Bound<'py, PyAny>>,
    sla_itl_ms: Option<&Bound<'py, PyAny>>,
    sla_e2e_ms: Option<&Bound<'py, PyAny>>,
    planner_config: Option<&Bound<'py, PyAny>>,
    benchmark_granularity: Option<&Bound<'py, PyAny>>,
    router_seed: Option<&Bound<'py, PyAny>>,
    aiperf_dir: Option<PathBuf>,
    html_report: Option<PathBuf>,
    scaling_policy: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut options = ReplayOptions {
        extra_engine_args: config_text(
            "extra_engine_args",
            ConfigArg::EngineArgs,
            extra_engine_args,
        )?,
        prefill_engine_args: config_text(
            "prefill_engine_args",
            ConfigArg::EngineArgs,
            prefill_engine_args,
        )?,
        decode_engine_args: config_text(
            "decode_engine_args",
            ConfigArg::EngineArgs,
            decode_engine_args,
        )?,
        router_config: config_text("router_config", ConfigArg::RouterConfig, router_config)?,
        model_name: opt_str_arg("model_name", model_name)?,
        input_tokens: Some(int_arg("input_tokens", input_tokens)?),
        output_tokens: Some(int_arg("output_tokens", output_tokens)?),
        request_count: Some(int_arg("request_count", request_count)?),
        request_rate: opt_float_arg("request_rate", request_rate)?,
        arrival_interval_ms: opt_float_arg("arrival_interval_ms", arrival_interval_ms)?,
        arrival_seed: int_or("arrival_seed", arrival_seed, 42)?,
        turns_per_session: int_or("turns_per_session", turns_per_session, 1)?,
        shared_prefix_ratio: float_or("shared_prefix_ratio", shared_prefix_ratio, 0.0)?,
        num_prefix_groups: int_or("num_prefix_groups", num_prefix_groups, 0)?,
        inter_turn_delay_ms: float_or("inter_turn_delay_ms", inter_turn_delay_ms, 0.0)?,
        num_workers: int_or("num_workers", num_workers, 1)?,
        num_prefill_workers: int_or("num_prefill_workers", num_prefill_workers, 1)?,
        num_decode_workers: int_or("num_decode_workers", num_decode_workers, 1)?,
        replay_concurrency: opt_int_arg("replay_concurrency", replay_concurrency)?,
        replay_mode: str_or("replay_mode", replay_mode, "offline")?,
        router_mode: str_or("router_mode", router_mode, "round_robin")?,
        arrival_speedup_ratio: float_or("arrival_speedup_ratio", arrival_speedup_ratio, 1.0)?,
        planner_config: config_text("planner_config", ConfigArg::Planner, planner_config)?,
        benchmark_granularity: int_or("benchmark_granularity", benchmark_granularity, 8)?,
        router_seed: int_or("router_seed", router_seed, 0)?,
        sla_ttft_ms: opt_float_arg("sla_ttft_ms", sla_ttft_ms)?,
        sla_itl_ms: opt_float_arg("sla_itl_ms", sla_itl_ms)?,
        sla_e2e_ms: opt_float_arg("sla_e2e_ms", sla_e2e_ms)?,
        ..ReplayOptions::default()
    };
    aic::apply(&mut options, aic_perf_config)?;
    replay_to_dict(
        py,
        options,
        ExtraOutputs {
            function: "run_synthetic_trace_replay",
            aiperf_dir,
            html_report,
        },
        scaling_policy,
    )
}

/// Runs the command line: `argv` excludes the program name (default: `sys.argv[1:]`),
/// `prog` is the name shown in usage and error lines. Returns the exit code.
#[pyfunction]
#[pyo3(signature = (argv=None, prog="dynosim".to_owned()), text_signature = "(argv=None, prog='dynosim')")]
fn main(py: Python<'_>, argv: Option<Vec<OsString>>, prog: String) -> PyResult<i32> {
    let argv = match argv {
        Some(argv) => argv,
        None => {
            let sys_argv: Vec<OsString> = py.import("sys")?.getattr("argv")?.extract()?;
            sys_argv.into_iter().skip(1).collect()
        }
    };
    let (code, out, err) = run_interruptibly(py, move |_| {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let code = dynosim_cli::run(&prog, argv, &mut out, &mut err);
        (code, out, err)
    })?;
    // Through sys.stdout/sys.stderr so Python-level redirection (pytest, contextlib) works.
    let sys = py.import("sys")?;
    for (stream, bytes) in [("stdout", out), ("stderr", err)] {
        if !bytes.is_empty() {
            let stream = sys.getattr(stream)?;
            stream.call_method1("write", (String::from_utf8_lossy(&bytes).into_owned(),))?;
            stream.call_method0("flush")?;
        }
    }
    Ok(code)
}

#[pymodule]
fn _dynosim(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(run_trace_replay, module)?)?;
    module.add_function(wrap_pyfunction!(run_synthetic_trace_replay, module)?)?;
    module.add_function(wrap_pyfunction!(main, module)?)?;
    module.add_function(wrap_pyfunction!(sweep::sweep, module)?)?;
    module.add_function(wrap_pyfunction!(sweep::_sweep_unstored, module)?)?;
    module.add_function(wrap_pyfunction!(sweep::_sweep_evaluate, module)?)?;
    module.add_function(wrap_pyfunction!(sweep::_sweep_store, module)?)?;
    module.add_class::<engine_args::MockEngineArgs>()?;
    module.add_class::<engine_args::SglangArgs>()?;
    module.add_class::<engine_args::TrtllmArgs>()?;
    module.add_class::<engine_args::ReasoningConfig>()?;
    module.add_class::<router_config::KvRouterConfig>()?;
    module.add_class::<aic::AicPerfConfig>()?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
