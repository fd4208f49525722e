//! The `dynosim` command line, as a library so the Python package runs the very same parser.
//!
//! Flow: flags -> [`ReplayOptions`] -> validated spec -> [`replay`] (outputs checked, workload
//! loaded, timed simulation, every output written and published together) -> the table and
//! `Saved full report to: <path>` on stdout. The run and its files are `dynosim-run`'s
//! [`replay`], which the Python front calls too.

pub mod args;
pub mod calibrate;
pub mod compare;
pub mod progress;
pub mod serve;
pub mod sweep;
pub mod validate;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use clap::{CommandFactory, FromArgMatches};
use dynosim::config::ReplayOptions;
use dynosim::planner::PlannerOutcome;
use dynosim::report::accounting::Shortfall;
use dynosim::sim::Progress;
use dynosim_run::interrupt::InterruptGuard;
use dynosim_run::{output, replay};
use serde_json::{Map, Value};

pub use args::Cli;

/// Exit code of a usage error (bad flags, values, files or JSON), as `dynosim::Error` uses.
const USAGE_EXIT_CODE: i32 = 2;
/// Exit code of a run ended by Ctrl-C (after its report was written), as shells use.
const INTERRUPTED_EXIT_CODE: i32 = 130;

/// Runs the command: `args` are the arguments after the program name, `prog` is the name
/// shown in usage and error lines (`dynosim`, `python -m dynamo.replay`). Returns the exit
/// code: 0 on success (and for `--help`), 2 for usage errors, 1 for runtime errors.
pub fn run<I, T>(prog: &str, args: I, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let subcommand_args = args.get(1..).unwrap_or_default();
    if args.first().is_some_and(|first| first == "compare") {
        // `<prog> compare A B [--json]`: prints the comparison; bad inputs are usage errors.
        return run_text_subcommand(
            prog,
            "compare",
            subcommand_args,
            stdout,
            stderr,
            compare::run,
        );
    }
    if args.first().is_some_and(|first| first == "sweep") {
        return run_sweep(prog, subcommand_args, stdout, stderr);
    }
    if args.first().is_some_and(|first| first == "validate") {
        // `<prog> validate --out DIR [...]`: validates against measured runs, prints the table.
        return run_text_subcommand(
            prog,
            "validate",
            subcommand_args,
            stdout,
            stderr,
            validate::run,
        );
    }
    if args.first().is_some_and(|first| first == "calibrate") {
        // `<prog> calibrate --out FILE [...]`: fits AIC corrections on TRAIN rows, writes them.
        return run_text_subcommand(
            prog,
            "calibrate",
            subcommand_args,
            stdout,
            stderr,
            calibrate::run,
        );
    }
    if args.first().is_some_and(|first| first == "serve") {
        return run_serve(prog, &args, stdout, stderr);
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
            shortfall,
            closing,
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
            // After the table, so that a terminal shows it below the erased bar.
            if let Some(closing) = closing {
                let _ = writeln!(stderr, "{closing}");
            }
            // Printed even with --quiet: a report that leaves requests out says so.
            if let Some(shortfall) = shortfall {
                let _ = writeln!(stderr, "{prog}: warning: {}", shortfall.warning());
            }
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

/// Runs a subcommand whose outcome is text for standard output (`compare`, `validate`,
/// `calibrate`): `args` (those after its name) parsed by `C`'s own clap parser, named
/// `<prog> <name>` in usage and errors, then `run`. Returns the exit code.
fn run_text_subcommand<C: CommandFactory + FromArgMatches>(
    prog: &str,
    name: &str,
    args: &[OsString],
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
    run: impl FnOnce(&C) -> dynosim::Result<String>,
) -> i32 {
    let (mut command, parsed) = parse_subcommand::<C>(prog, name, args);
    let cli = match parsed {
        Ok(cli) => cli,
        Err(err) => return report_clap_error(prog, &err, stdout, stderr),
    };
    match run(&cli) {
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

/// `<prog> serve [deployment flags] [--host H] [--port P] ...`: serves until SIGINT/SIGTERM,
/// then prints the report of what was served.
fn run_serve(prog: &str, args: &[OsString], stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32 {
    let mut command = serve::command()
        .bin_name(format!("{prog} serve"))
        .no_binary_name(true);
    let parsed = command
        .try_get_matches_from_mut(&args[1..])
        .and_then(|matches| serve::ServeCli::from_arg_matches(&matches).map(|cli| (cli, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(err) => return report_clap_error(prog, &err, stdout, stderr),
    };
    if let Err(err) = serve::refuse_replay_only(&matches) {
        return report_error(prog, &err, &mut command, stderr);
    }
    if let Some(dir) = &cli.export_tokenizer {
        return match serve::export_tokenizer(dir) {
            Ok(text) => print_text(&text, stdout),
            Err(err) => report_error(prog, &err, &mut command, stderr),
        };
    }
    match serve::run(&cli, &invocation(prog, args)) {
        Ok(served) => {
            let text = if cli.replay.quiet {
                String::new()
            } else {
                format!(
                    "{}\nSaved full report to: {}\n",
                    served.table,
                    served.report_path.display()
                )
            };
            print_text(&text, stdout)
        }
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
    /// The requests that did not complete, when some did not.
    shortfall: Option<Shortfall>,
    /// The progress display's last line, when it showed anything.
    closing: Option<String>,
}

/// Validates, checks the outputs, replays and writes them. Every output is resolved and
/// opened before the simulation, and none is published unless all of them are complete.
fn run_parsed(cli: &Cli, invocation: &str) -> dynosim::Result<Finished> {
    let options: ReplayOptions = cli.to_options();
    let line_every = progress::line_interval(cli.progress_every)?;
    let jsonl_path = options.report_jsonl.clone();
    let settings = cli
        .aiperf_dir
        .is_some()
        .then(|| recorded_settings(&options));
    let mut spec = options.into_spec()?;
    let report_path = output::resolve_report_path(cli.report_json.as_deref())?;
    let outputs = replay::Outputs::prepare(
        &mut spec,
        replay::OutputPaths {
            report_json: Some(&report_path),
            jsonl: jsonl_path.as_deref(),
            aiperf_dir: cli.aiperf_dir.as_deref(),
            html: cli.html_report.as_deref(),
            aiperf_settings: settings.as_ref(),
        },
        invocation.to_string(),
    )?;
    // Ctrl-C while the simulation runs (offline or live) means "stop and report what
    // happened"; at any other moment it ends the process, removing unpublished files.
    let interrupts = InterruptGuard::install();
    let progress = Arc::new(Progress::new());
    let bar = if cli.quiet {
        None
    } else {
        progress::ProgressBar::start(cli.progress, Arc::clone(&progress), line_every)
    };
    // The run's clock sets the flag at Ctrl-C.
    let cancel = AtomicBool::new(false);
    let began = Instant::now();
    let replayed = replay::replay(&spec, outputs, &cancel, Some(Arc::clone(&progress)), None);
    let shown = bar.is_some_and(progress::ProgressBar::finish);
    let replay::Replayed {
        report,
        planner,
        setup,
    } = replayed?;
    let interrupted = interrupts.was_interrupted();
    let closing = shown.then(|| {
        let wall = progress::WallTimes {
            total: began.elapsed(),
            setup,
            simulation_ms: report.get("wall_time_ms").map_or(0.0, |v| v.as_f64()),
        };
        let duration_ms = report.get("duration_ms").map_or(0.0, |v| v.as_f64());
        progress::closing_line(
            duration_ms,
            progress.ended_requests(),
            progress.total_requests(),
            wall,
        )
    });
    Ok(Finished {
        table: report.render_table(),
        report_path,
        interrupted,
        planner,
        shortfall: Shortfall::of(&report),
        closing,
    })
}

/// The settings of a run as the AIPerf directory records them: every option that differs
/// from its default, trace paths made absolute (the directory may be read from elsewhere).
fn recorded_settings(options: &ReplayOptions) -> Map<String, Value> {
    let mut options = options.clone();
    options.trace_files = options
        .trace_files
        .iter()
        .map(|path| std::path::absolute(path).unwrap_or_else(|_| path.clone()))
        .collect();
    // Where the run's own files went is not part of the run.
    options.report_jsonl = None;
    dynosim_sweep::Settings::from_options(&options).values
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
