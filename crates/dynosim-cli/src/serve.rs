//! `dynosim serve`: the flags, the signals and the outputs of the OpenAI-compatible server
//! (`dynosim-serve`), which answers at the speed of the deployment a replay's engine, router
//! and timing flags describe.
//!
//! The replay's own flags are reused as they are (the replay's parser flattened into this
//! one, then `ReplayOptions::into_spec`); those that describe a replay's workload or its run
//! (trace files, synthetic workload, arrival and replay modes, planner, disaggregation) are
//! hidden and refused, since a server's workload is its clients. SIGINT and SIGTERM drain
//! (stop accepting, let requests in flight finish), a second one stops at once; then the
//! replay's report of what was served is printed and its files written.
//!
//! INTERFACE
//! - [`ServeCli`]: the flags.
//! - [`run`]: parses nothing (the caller did): validates, serves, reports; the table to print
//!   and the report's path.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use clap::parser::ValueSource;
use clap::{ArgMatches, Parser};
use dynosim::config::settings::{self, Group, Setting, SETTINGS};
use dynosim::{Error, Result};
use dynosim_serve::{ServeConfig, ServeHooks};

use crate::args::Cli;
use dynosim_run::output::{self, PreparedOutput};
use dynosim_run::replay;

/// Serves an OpenAI-compatible API (/v1/completions, /v1/chat/completions, /v1/models,
/// /health, /metrics) whose answers stream at the simulated deployment's speed. The
/// deployment is described by the replay's engine, router and timing flags.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "dynosim serve",
    args_override_self = true,
    allow_negative_numbers = true,
    disable_version_flag = true,
    color = clap::ColorChoice::Never
)]
pub struct ServeCli {
    #[command(flatten)]
    pub replay: Cli,

    /// Address to listen on (loopback unless you choose otherwise)
    #[arg(long, value_name = "HOST", default_value = "127.0.0.1")]
    pub host: String,

    /// Port to listen on (0: any free port; the address is printed on stderr)
    #[arg(long, value_name = "PORT", default_value_t = 8000)]
    pub port: u16,

    /// The model name /v1/models lists and requests must give
    #[arg(long, value_name = "NAME", default_value = "dynosim")]
    pub model: String,

    /// Model time per wall time: 1 answers at the deployment's own speed, 2 twice as fast
    #[arg(long, value_name = "X", value_parser = crate::args::parse_float, default_value = "1")]
    pub speed: f64,

    /// Write what was served as a Mooncake trace (timestamps, lengths, hash_ids, and
    /// session_id for requests with an x-session-id header); replay it with
    /// --trace-block-size equal to the engine's block_size
    #[arg(long, value_name = "FILE")]
    pub record_trace: Option<PathBuf>,

    /// Write the server's tokenizer (cl100k_base, as the server has it built in) into DIR for
    /// clients that count tokens, then exit: DIR/cl100k_base.tiktoken, and the same file
    /// under tiktoken's cache name, so that `TIKTOKEN_CACHE_DIR=DIR` lets tiktoken and
    /// `aiperf profile --tokenizer cl100k_base` load it without a download
    #[arg(long, value_name = "DIR")]
    pub export_tokenizer: Option<PathBuf>,

    /// Output tokens of a request that sets no max_tokens / max_completion_tokens
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub default_max_tokens: usize,

    /// Largest request body in bytes (larger ones are answered 413)
    #[arg(long, value_name = "BYTES", default_value_t = 4 << 20)]
    pub max_body_bytes: usize,

    /// Open connections at most (more wait to be accepted)
    #[arg(long, value_name = "N", default_value_t = 2048)]
    pub max_connections: usize,
}

/// Whether a replay setting describes a replay's workload or run rather than the deployment
/// (the workload and run groups of the settings table, and the pools of a disaggregated
/// deployment, which a server does not simulate): such flags are hidden from
/// `dynosim serve --help` and refused.
fn is_replay_only(setting: &Setting) -> bool {
    setting.cli != settings::Cli::No
        && (matches!(setting.group, Group::Workload | Group::Run) || setting.disaggregated_only)
}

/// The replay-only settings, in the table's order.
pub fn replay_only() -> impl Iterator<Item = &'static Setting> {
    SETTINGS.iter().filter(|setting| is_replay_only(setting))
}

/// The parser, with the replay-only flags hidden.
pub fn command() -> clap::Command {
    let mut command = <ServeCli as clap::CommandFactory>::command();
    for setting in replay_only() {
        command = command.mut_arg(setting.name, |arg| arg.hide(true));
    }
    command
}

/// A usage error for the first replay-only flag given.
pub fn refuse_replay_only(matches: &ArgMatches) -> Result<()> {
    for setting in replay_only() {
        if matches.value_source(setting.name) == Some(ValueSource::CommandLine) {
            let flag = setting.flag().unwrap_or_else(|| "a trace file".to_string());
            return Err(Error::usage(format!(
                "{flag} describes a replay's workload or run; dynosim serve's workload is its \
                 clients (record it with --record-trace)"
            )));
        }
    }
    Ok(())
}

/// Counts SIGINT and SIGTERM while the server runs (a signal handler can only touch such a
/// global).
static STOPS: AtomicUsize = AtomicUsize::new(0);

/// What a finished serve prints.
#[derive(Debug)]
pub struct Served {
    pub table: String,
    pub report_path: PathBuf,
}

/// A recorded trace written into its prepared output (so that it is published with the
/// report, or removed with it).
struct TraceWriter(Arc<Mutex<PreparedOutput>>);

impl std::io::Write for TraceWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut output = self.0.lock().unwrap_or_else(|p| p.into_inner());
        output
            .write_all(bytes)
            .map_err(|err| std::io::Error::other(err.message().to_string()))?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `--export-tokenizer DIR`: writes the vocabulary files; returns the message to print.
pub fn export_tokenizer(dir: &std::path::Path) -> Result<String> {
    use dynosim_serve::tokens::{Tokenizer, TIKTOKEN_CACHE_NAME, VOCABULARY};
    if !dir.is_dir() {
        return Err(Error::usage(format!(
            "--export-tokenizer: {} is not a directory",
            dir.display()
        )));
    }
    let tokenizer = Tokenizer::new().map_err(Error::runtime)?;
    let mut file = Vec::new();
    tokenizer
        .write_vocabulary(&mut file)
        .map_err(|err| Error::runtime(format!("cannot build the vocabulary file: {err}")))?;
    let named = dir.join(format!("{VOCABULARY}.tiktoken"));
    output::write_atomically(&named, &file, "tokenizer vocabulary")?;
    output::write_atomically(
        &dir.join(TIKTOKEN_CACHE_NAME),
        &file,
        "tokenizer vocabulary",
    )?;
    Ok(format!(
        "Wrote the {VOCABULARY} vocabulary to {} (and under tiktoken's cache name beside it); \
         point clients at it with TIKTOKEN_CACHE_DIR={}\n",
        named.display(),
        dir.display()
    ))
}

/// Validates the flags, serves until stopped, and writes the report of what was served.
pub fn run(cli: &ServeCli, invocation: &str) -> Result<Served> {
    let mut options = cli.replay.to_options();
    // The spec's workload is never read (the clients are the workload; the replay-only flags
    // are refused before this), but the spec needs one: the smallest synthetic one.
    options.input_tokens = Some(1);
    options.output_tokens = Some(1);
    options.request_count = Some(1);
    options.replay_concurrency = Some(1);
    // The per-request records are the served requests' (the replay's rule against them
    // without a trace is about its synthetic workload, which serving does not run).
    let jsonl_path = options.report_jsonl.take();
    let mut spec = options.into_spec()?;
    spec.capture_requests |= jsonl_path.is_some();
    // The server's own rule of what it serves, checked before any output is opened or AIC
    // table is built.
    dynosim::sim::external::check_servable(&spec)?;
    let report_path = output::resolve_report_path(cli.replay.report_json.as_deref())?;
    let outputs = replay::Outputs::prepare(
        &mut spec,
        replay::OutputPaths {
            report_json: Some(&report_path),
            jsonl: jsonl_path.as_deref(),
            aiperf_dir: cli.replay.aiperf_dir.as_deref(),
            html: cli.replay.html_report.as_deref(),
            aiperf_settings: None,
        },
        invocation.to_string(),
    )?;
    let trace = cli
        .record_trace
        .as_deref()
        .map(|path| PreparedOutput::prepare("recorded trace", path))
        .transpose()?
        .map(|output| Arc::new(Mutex::new(output)));
    let prepared = dynosim_aic_tables::prepare(&spec)?;
    let spec = prepared.as_ref();
    let config = ServeConfig {
        host: cli.host.clone(),
        port: cli.port,
        model: cli.model.clone(),
        speed: cli.speed,
        max_body_bytes: cli.max_body_bytes,
        max_connections: cli.max_connections,
        default_max_tokens: cli.default_max_tokens,
    };
    let model = cli.model.clone();
    let speed = cli.speed;
    let hooks = ServeHooks {
        record_trace: trace.as_ref().map(|output| {
            Box::new(TraceWriter(Arc::clone(output))) as Box<dyn std::io::Write + Send>
        }),
        outputs: dynosim::sim::external::ServeOutputs {
            records: outputs.record_sink(),
            timeseries: outputs.wants_timeseries(),
        },
        stop: &STOPS,
        on_listening: Box::new(move |address| {
            eprintln!(
                "dynosim serve: listening on http://{address} (model {model}, speed {speed}); \
                 Ctrl-C drains and reports"
            );
        }),
    };
    STOPS.store(0, Ordering::SeqCst);
    let previous = signals::catch();
    let served = dynosim_serve::serve(spec, config, hooks);
    let served = match served {
        Ok(served) => served,
        Err(err) => {
            signals::restore(previous);
            return Err(err);
        }
    };
    let also: Vec<PreparedOutput> = match trace {
        Some(output) => match Arc::try_unwrap(output) {
            Ok(output) => vec![output.into_inner().unwrap_or_else(|p| p.into_inner())],
            Err(_) => {
                signals::restore(previous);
                return Err(Error::runtime("the recorded trace is still in use"));
            }
        },
        None => Vec::new(),
    };
    // The signals stay caught until every file is written.
    let published = outputs.publish(spec, served.simulated, served.wall_time_ms, also);
    signals::restore(previous);
    let replayed = published?;
    Ok(Served {
        table: replayed.report.render_table(),
        report_path,
    })
}

#[cfg(unix)]
mod signals {
    use std::sync::atomic::Ordering;

    pub type Handlers = [libc::sighandler_t; 2];

    extern "C" fn on_stop(_signal: libc::c_int) {
        super::STOPS.fetch_add(1, Ordering::SeqCst);
    }

    /// Routes SIGINT and SIGTERM to [`on_stop`]; returns the handlers it replaces.
    pub fn catch() -> Handlers {
        let handler = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only adds to an atomic, which is async-signal-safe.
        unsafe {
            [
                libc::signal(libc::SIGINT, handler),
                libc::signal(libc::SIGTERM, handler),
            ]
        }
    }

    pub fn restore(previous: Handlers) {
        // SAFETY: reinstalls the handlers in place before `catch`.
        unsafe {
            libc::signal(libc::SIGINT, previous[0]);
            libc::signal(libc::SIGTERM, previous[1]);
        }
    }
}

#[cfg(not(unix))]
mod signals {
    pub type Handlers = ();
    pub fn catch() -> Handlers {}
    pub fn restore(_previous: Handlers) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deployment the server cannot serve is refused with the server's own message before
    /// anything is opened: no report file, no port bound. (The flags that describe one are
    /// refused earlier by `refuse_replay_only`; `run` must not depend on that.)
    #[test]
    fn run_refuses_an_unservable_deployment_before_opening_anything() {
        let dir = tempfile::TempDir::new().unwrap();
        let report = dir.path().join("served.json");
        let report = report.to_str().unwrap();
        let prefill = r#"{"num_gpu_blocks": 2048, "worker_type": "prefill"}"#;
        let decode = r#"{"num_gpu_blocks": 2048, "worker_type": "decode"}"#;
        let cases: [(&[&str], &str); 2] = [
            (
                &[
                    "--prefill-engine-args",
                    prefill,
                    "--decode-engine-args",
                    decode,
                ],
                "serving a disaggregated deployment is not supported",
            ),
            (
                &[
                    "--planner-config",
                    r#"{"mode": "agg", "optimization_target": "load", "decode_scale_up_kv_rate": 60, "decode_scale_down_kv_rate": 20, "load_adjustment_interval_seconds": 5}"#,
                ],
                "serving with a planner is not supported",
            ),
        ];
        for (args, expected) in cases {
            let mut argv = vec!["serve", "--port", "0", "--report-json", report];
            argv.extend_from_slice(args);
            let cli = ServeCli::try_parse_from(argv).unwrap();
            let err = run(&cli, "dynosim serve").unwrap_err();
            assert_eq!(err.kind(), dynosim::error::ErrorKind::Usage, "{args:?}");
            assert!(err.to_string().contains(expected), "{args:?}: {err}");
            assert!(
                std::fs::read_dir(dir.path()).unwrap().next().is_none(),
                "{args:?}: a file was left"
            );
        }
    }
}
