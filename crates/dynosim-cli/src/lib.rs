//! The `dynosim` command line, as a library so the Python package runs the very same parser.
//!
//! Flow: flags -> [`ReplayOptions`] -> validated spec -> workload -> timed simulation ->
//! report; the per-request JSONL and the report JSON are written before anything is printed,
//! then the table and `Saved full report to: <path>` go to stdout.

pub mod aiperf;
pub mod args;
pub mod compare;
pub mod live;
pub mod output;
pub mod progress;
pub mod sweep;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use clap::{CommandFactory, FromArgMatches};
use dynosim::config::{ReplayMode, ReplayOptions, ReplaySpec};
use dynosim::planner::PlannerOutcome;
use dynosim::report::timeseries::TimeSeries;
use dynosim::report::RecordSink;
use dynosim::sim::{CollectorThread, Observers, Progress, Simulated, VirtualClock};
use dynosim::{LazyRecords, Report, RequestRecord};
use live::{InterruptGuard, WallClock};
use output::{PreparedOutput, RecordStream};

pub use args::Cli;

/// Exit code of a usage error (bad flags, values, files or JSON), as `dynosim::Error` uses.
const USAGE_EXIT_CODE: i32 = 2;
/// Exit code of a live run ended by Ctrl-C (after its report was written), as shells use.
const INTERRUPTED_EXIT_CODE: i32 = 130;

/// Loads and simulates, with the collector on the thread `collector_thread` says; returns the
/// run and its wall time in ms (the simulation only, not workload loading, as the reference
/// measures it).
fn simulate_timed(
    spec: &ReplaySpec,
    cancel: &AtomicBool,
    observers: &Observers,
    records: Option<Box<dyn RecordSink>>,
    collector_thread: CollectorThread,
) -> dynosim::Result<(Simulated, f64)> {
    // Timing tables (AIC) are built before the workload is read and the clock starts.
    let prepared = dynosim::prepare(spec)?;
    let spec = prepared.as_ref();
    let workload = dynosim::load_workload(spec)?;
    let started = Instant::now();
    let simulated = match spec.replay_mode {
        ReplayMode::Offline => dynosim::simulate_streaming(
            spec,
            workload,
            &mut VirtualClock,
            cancel,
            observers,
            records,
            collector_thread,
        )?,
        ReplayMode::Online { speed } => dynosim::simulate_streaming(
            spec,
            workload,
            &mut WallClock::start(speed),
            cancel,
            observers,
            records,
            collector_thread,
        )?,
    };
    Ok((simulated, started.elapsed().as_secs_f64() * 1000.0))
}

/// Replays offline with the workers scaled by `policy` (a planner the caller brings: the
/// Python front's `scaling_policy`), stopping with a runtime error once `cancel` is set.
/// Returns the report, the records (when the spec asks for them), what the policy did, and the
/// time series when `observers` asked for them. The collector runs on the thread
/// `collector_thread` says.
pub fn replay_scaled_observed(
    spec: &ReplaySpec,
    cancel: &AtomicBool,
    observers: &Observers,
    collector_thread: CollectorThread,
    policy: &mut dyn dynosim::planner::ScalingPolicy,
) -> dynosim::Result<(
    Report,
    Vec<RequestRecord>,
    PlannerOutcome,
    Option<TimeSeries>,
)> {
    spec.check_scaling("scaling_policy")?;
    let prepared = dynosim::prepare(spec)?;
    let spec = prepared.as_ref();
    let workload = dynosim::load_workload(spec)?;
    let started = Instant::now();
    let mut simulated = dynosim::sim::simulate_scaled(
        spec,
        workload,
        &mut VirtualClock,
        cancel,
        observers,
        dynosim::sim::Collecting {
            thread: collector_thread,
            records: None,
        },
        Some(policy),
    )?;
    if cancel.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(dynosim::Error::runtime("replay interrupted"));
    }
    let outcome = simulated.take_planner().unwrap_or_default();
    let series = simulated.take_timeseries();
    let (report, records) = simulated.into_report(started.elapsed().as_secs_f64() * 1000.0);
    Ok((report, records, outcome, series))
}

/// A planned run: the report, the records (when the spec asks for them), what the planner did
/// (when the spec has one) and the time series (when the observers asked for them).
pub type PlannedRun = (
    Report,
    Vec<RequestRecord>,
    Option<PlannerOutcome>,
    Option<TimeSeries>,
);

/// Replays with what the planner did when the spec has one, stopping with a runtime error once
/// another thread sets `cancel`. The collector runs on the thread `collector_thread` says.
pub fn replay_planned_observed(
    spec: &ReplaySpec,
    cancel: &AtomicBool,
    observers: &Observers,
    collector_thread: CollectorThread,
) -> dynosim::Result<PlannedRun> {
    let (mut simulated, wall_time_ms) =
        simulate_timed(spec, cancel, observers, None, collector_thread)?;
    if cancel.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(dynosim::Error::runtime("replay interrupted"));
    }
    let planner = simulated.take_planner();
    let series = simulated.take_timeseries();
    let (report, records) = simulated.into_report(wall_time_ms);
    Ok((report, records, planner, series))
}

/// Replays, handing the per-request records to `records` while the run goes on (see
/// [`dynosim::simulate_streaming`]; the returned records are then empty), recording what
/// `observers` ask for; returns the report, the records, the time series and what the planner
/// did (when the spec has one). Offline runs in virtual time, online runs on the wall clock at
/// the spec's speed; a cancelled run reports what finished. The collector runs on the thread
/// `collector_thread` says.
pub fn replay_streaming(
    spec: &ReplaySpec,
    cancel: &AtomicBool,
    observers: &Observers,
    records: Option<Box<dyn RecordSink>>,
    collector_thread: CollectorThread,
) -> dynosim::Result<(
    Report,
    LazyRecords,
    Option<TimeSeries>,
    Option<PlannerOutcome>,
)> {
    let (mut simulated, wall_time_ms) =
        simulate_timed(spec, cancel, observers, records, collector_thread)?;
    let series = simulated.take_timeseries();
    let planner = simulated.take_planner();
    let (report, records) = simulated.into_report_lazily(wall_time_ms);
    Ok((report, records, series, planner))
}

/// The HTML report of a run: `invocation` is the command as the user typed it (shown first
/// in the page's configuration table); a planner's scaling events and worker counts join the
/// page when the run had one.
pub fn render_html_report(
    invocation: &str,
    spec: &ReplaySpec,
    report: &Report,
    series: &TimeSeries,
    planner: Option<&PlannerOutcome>,
) -> String {
    use dynosim::report::html::{render_run_report, scaling_json, ScalingMark};
    let mut configuration = vec![("command".to_string(), invocation.to_string())];
    configuration.extend(dynosim::report::html::spec_configuration(spec));
    let scaling = planner.map(|outcome| {
        let initial = match &spec.disaggregation {
            Some(pools) => vec![
                ("prefill", pools.num_prefill_workers),
                ("decode", spec.num_workers),
            ],
            None => vec![("agg", spec.num_workers)],
        };
        let marks: Vec<ScalingMark<'_>> = outcome
            .events
            .iter()
            .map(|e| ScalingMark {
                at_s: e.at_s,
                component: e.component,
                from: e.from,
                to: e.to,
            })
            .collect();
        scaling_json(&initial, &marks, outcome.ticks)
    });
    render_run_report(
        "dynosim run report",
        &configuration,
        report,
        series,
        scaling.as_ref(),
    )
}

/// Runs the command: `args` are the arguments after the program name, `prog` is the name
/// shown in usage and error lines (`dynosim`, `python -m dynamo.replay`). Returns the exit
/// code: 0 on success (and for `--help`), 2 for usage errors, 1 for runtime errors.
pub fn run<I, T>(prog: &str, args: I, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if args.first().is_some_and(|first| first == "compare") {
        return run_compare(prog, &args[1..], stdout, stderr);
    }
    if args.first().is_some_and(|first| first == "sweep") {
        return run_sweep(prog, &args[1..], stdout, stderr);
    }
    let mut command = Cli::command().bin_name(prog).no_binary_name(true);
    let parsed = command
        .try_get_matches_from_mut(args.clone())
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => return report_clap_error(prog, &err, stdout, stderr),
    };

    let invocation = invocation(prog, &args);
    match run_parsed(&cli, &invocation) {
        Ok(Finished {
            table,
            report_path,
            interrupted,
            planner,
        }) => {
            let printed = if cli.quiet {
                Ok(())
            } else {
                let (before, after) = planner_lines(planner.as_ref());
                write!(
                    stdout,
                    "{before}{table}\nSaved full report to: {}\n{after}",
                    report_path.display()
                )
                .and_then(|()| stdout.flush())
            };
            if interrupted {
                let _ = writeln!(
                    stderr,
                    "{prog}: interrupted: the report covers the requests that finished before \
                     Ctrl-C"
                );
                return INTERRUPTED_EXIT_CODE;
            }
            match printed {
                Ok(()) => 0,
                // A reader that went away (`| head`) wants no more output and no message.
                Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => 1,
                Err(err) => {
                    let _ = writeln!(
                        stderr,
                        "{prog}: error: cannot write the summary to standard output: {} \
                         (the report was saved to {})",
                        output::describe(&err),
                        report_path.display()
                    );
                    let _ = stderr.flush();
                    1
                }
            }
        }
        Err(err) => report_error(prog, &err, &mut command, stderr),
    }
}

/// What a planner run prints around the table, as the reference does: its scaling events
/// before, its tick count after.
fn planner_lines(planner: Option<&PlannerOutcome>) -> (String, String) {
    let Some(planner) = planner else {
        return (String::new(), String::new());
    };
    let mut before = String::new();
    if !planner.events.is_empty() {
        before.push_str("\nScaling events:\n");
        for event in &planner.events {
            before.push_str(&format!("  {}\n", event.describe()));
        }
    }
    (before, format!("Planner ticks: {}\n", planner.ticks))
}

/// Prints a failed command's error (with the usage line for a usage error) and returns its
/// exit code.
fn report_error(
    prog: &str,
    err: &dynosim::Error,
    command: &mut clap::Command,
    stderr: &mut dyn Write,
) -> i32 {
    let _ = writeln!(stderr, "{prog}: error: {}", err.message());
    if err.exit_code() == USAGE_EXIT_CODE {
        let usage = command.render_usage().to_string();
        let _ = write!(stderr, "\n{usage}\n\nFor more information, try '--help'.\n");
    }
    let _ = stderr.flush();
    err.exit_code()
}

/// `<prog> compare A B [--json]`: prints the comparison; bad inputs are usage errors.
fn run_compare(
    prog: &str,
    args: &[OsString],
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    let (mut command, parsed) = parse_subcommand::<compare::CompareCli>(prog, "compare", args);
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => return report_clap_error(prog, &err, stdout, stderr),
    };
    match compare::run(&cli) {
        Ok(text) => print_text(&text, stdout),
        Err(err) => report_error(prog, &err, &mut command, stderr),
    }
}

/// Parses a subcommand's arguments (those after its name) with its own clap parser, named
/// `<prog> <name>` in usage and errors; gives the parser back for error reports.
fn parse_subcommand<C: CommandFactory + FromArgMatches>(
    prog: &str,
    name: &str,
    args: &[OsString],
) -> (clap::Command, Result<C, clap::Error>) {
    let mut command = C::command()
        .bin_name(format!("{prog} {name}"))
        .no_binary_name(true);
    let parsed = command
        .try_get_matches_from_mut(args)
        .and_then(|matches| C::from_arg_matches(&matches));
    (command, parsed)
}

/// Writes a subcommand's output: exit code 0, or 1 when stdout cannot take it.
fn print_text(text: &str, stdout: &mut dyn Write) -> i32 {
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// `<prog> sweep SPEC --out DIR [--jobs N]`: runs the sweep and prints its summary.
fn run_sweep(prog: &str, args: &[OsString], stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32 {
    let (mut command, parsed) = parse_subcommand::<sweep::SweepCli>(prog, "sweep", args);
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => return report_clap_error(prog, &err, stdout, stderr),
    };
    if let Some(address) = &cli.ray {
        return match sweep::run_on_ray(&cli, address) {
            Ok(code) => code,
            Err(err) => report_error(prog, &err, &mut command, stderr),
        };
    }
    match sweep::run(&cli) {
        Ok(text) => print_text(&text, stdout),
        Err(err) => report_error(prog, &err, &mut command, stderr),
    }
}

/// What a finished command prints.
struct Finished {
    table: String,
    report_path: PathBuf,
    /// A live run ended by Ctrl-C; its report covers what finished.
    interrupted: bool,
    /// What the planner did, when there was one.
    planner: Option<PlannerOutcome>,
}

/// Validates, checks the outputs, replays and writes them. Every output is resolved and
/// opened before the simulation, and none is published unless all of them are complete.
fn run_parsed(cli: &Cli, invocation: &str) -> dynosim::Result<Finished> {
    let options: ReplayOptions = cli.to_options();
    let jsonl_path = options.report_jsonl.clone();
    let mut spec = options.into_spec()?;
    output::check_jsonl_path("--report-jsonl", jsonl_path.as_deref())?;
    if let Some(dir) = &cli.aiperf_dir {
        aiperf::check_dir("--aiperf-dir", dir)?;
        // AIPerf's per-request file needs the per-request records.
        spec.capture_requests = true;
    }
    let report_path = output::resolve_report_path(cli.report_json.as_deref())?;
    let jsonl = jsonl_path
        .as_deref()
        .map(|path| PreparedOutput::prepare("per-request JSONL", path))
        .transpose()?;
    let mut report_file = PreparedOutput::prepare("report JSON", &report_path)?;
    // Records go to the JSONL file while the run goes on, unless AIPerf's files need them
    // all at the end (its summary statistics read every record).
    let (stream, mut jsonl) = match jsonl {
        Some(output) if cli.aiperf_dir.is_none() => (Some(RecordStream::new(output)), None),
        other => (None, other),
    };
    let mut html = cli
        .html_report
        .as_deref()
        .map(|path| PreparedOutput::prepare("HTML report", path))
        .transpose()?;
    // Only a live run, which takes real time, treats Ctrl-C as "stop and report".
    let interrupts =
        matches!(spec.replay_mode, ReplayMode::Online { .. }).then(InterruptGuard::install);
    let progress = Arc::new(Progress::new());
    let observers = Observers {
        timeseries: html.is_some(),
        progress: Some(Arc::clone(&progress)),
    };
    let bar = if cli.quiet {
        None
    } else {
        progress::ProgressBar::start(progress)
    };
    let sink = stream.as_ref().map(RecordStream::sink);
    // A single run: the collector gets the second core.
    let replayed = replay_streaming(
        &spec,
        &AtomicBool::new(false),
        &observers,
        sink,
        CollectorThread::OwnThread,
    );
    if let Some(bar) = bar {
        bar.finish();
    }
    let (report, records, series, planner) = replayed?;
    // The guard stays until the outputs are written, so a second Ctrl-C cannot cut them.
    let interrupted = interrupts
        .as_ref()
        .is_some_and(InterruptGuard::was_interrupted);
    if let Some(stream) = stream {
        jsonl = Some(stream.finish()?);
    } else if let Some(jsonl) = &mut jsonl {
        output::write_records(jsonl, records.iter())?;
    }
    if let Some(dir) = &cli.aiperf_dir {
        // AIPerf's summary needs the records twice (statistics, then lines): built once here.
        let built: Vec<_> = records.iter().collect();
        aiperf::write_dir(dir, &report, &built)?;
    }
    drop(records);
    if let (Some(html), Some(series)) = (&mut html, &series) {
        let page = render_html_report(invocation, &spec, &report, series, planner.as_ref());
        html.write_all(page.as_bytes())?;
    }
    report_file.write_all(report.to_json_file_string().as_bytes())?;
    output::commit(jsonl.into_iter().chain(html).chain([report_file]).collect())?;
    Ok(Finished {
        table: report.render_table(),
        report_path,
        interrupted,
        planner,
    })
}

/// The command line as typed, for the HTML report: arguments that need it are quoted.
fn invocation(prog: &str, args: &[OsString]) -> String {
    let mut words = vec![prog.to_string()];
    for arg in args {
        let arg = arg.to_string_lossy();
        let plain = !arg.is_empty()
            && arg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_=./:,@+%".contains(c));
        words.push(if plain {
            arg.into_owned()
        } else {
            format!("'{}'", arg.replace('\'', r"'\''"))
        });
    }
    words.join(" ")
}

/// Prints a clap outcome: help goes to stdout with exit 0; errors go to stderr as
/// `<prog>: error: ...` (like the library's usage errors) with exit 2.
fn report_clap_error(
    prog: &str,
    err: &clap::Error,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> i32 {
    let rendered = err.render().to_string();
    if err.use_stderr() {
        let text = match rendered.strip_prefix("error: ") {
            Some(rest) => format!("{prog}: error: {rest}"),
            None => rendered,
        };
        let _ = stderr.write_all(text.as_bytes());
        let _ = stderr.flush();
        // Every clap failure is a usage error.
        USAGE_EXIT_CODE
    } else {
        let _ = stdout.write_all(rendered.as_bytes());
        let _ = stdout.flush();
        0
    }
}
