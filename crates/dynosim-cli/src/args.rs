//! The command-line flags, named, typed and defaulted exactly like `python -m dynamo.replay`,
//! built from the settings table (`dynosim::config::settings`): each setting with a flag there
//! is an argument here, with its help, value name, default and choices.
//!
//! Only syntax and types are checked here (an int flag gets an int, a choice flag one of its
//! choices). Every semantic rule lives in [`ReplayOptions::into_spec`], shared with the Python
//! API, so both fronts accept and reject the same inputs with the same messages.
//!
//! INTERFACE
//! - [`Cli`]: the parsed command line (clap's `Parser`, also flattened into `dynosim serve`):
//!   the replay options (read as its own fields), and the front's own settings (outputs,
//!   display). [`Cli::to_options`] adds the environment's router policy file.
//! - [`parse_int`], [`parse_float`]: Python's number syntax, as argparse reads numbers.

use std::ops::Deref;
use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::{Arg, ArgAction, ArgMatches, Command, FromArgMatches, ValueEnum};
use dynosim::config::settings::{self, Kind, Setting, SettingValue, Target, SETTINGS};
use dynosim::config::ReplayOptions;

use crate::progress::ProgressMode;

/// The replay's description at the top of `--help`.
const ABOUT: &str = "Replays an LLM-serving workload (a trace file or a synthetic workload) \
                     through a simulated deployment in virtual time and reports the latency \
                     and throughput its users would see";

/// The other commands, at the end of `--help`.
const AFTER_HELP: &str = "Compare two runs: dynosim compare A B [--json] (each a report JSON or \
                          an AIPerf run directory; see dynosim compare --help). Sweep many \
                          runs: dynosim sweep SPEC.yaml --out DIR (see dynosim sweep --help). \
                          Serve an OpenAI-compatible API at the simulated speed: dynosim serve \
                          (see dynosim serve --help). A trace file named `compare`, `sweep` or \
                          `serve` is passed as ./compare, ./sweep or ./serve.";

/// The parsed replay command line.
#[derive(Debug, Clone)]
pub struct Cli {
    /// Every replay option the flags set (the others at their defaults).
    options: ReplayOptions,
    /// `--report-json`: it names an output file of the front, not an input of the replay.
    pub report_json: Option<PathBuf>,
    pub aiperf_dir: Option<PathBuf>,
    pub html_report: Option<PathBuf>,
    pub quiet: bool,
    pub progress: ProgressMode,
    /// `--progress-every`, in seconds (checked by `progress::line_interval`).
    pub progress_every: f64,
}

/// The options read as the command line's own fields (`cli.num_workers`).
impl Deref for Cli {
    type Target = ReplayOptions;

    fn deref(&self) -> &ReplayOptions {
        &self.options
    }
}

impl Cli {
    /// The raw options the library validates: the flags' values, and the router policy file
    /// from `DYN_ROUTER_POLICY_CONFIG` when the flag is not given.
    pub fn to_options(&self) -> ReplayOptions {
        let mut options = self.options.clone();
        let from_env = policy_config_from_env();
        options.router_policy_config_from_env =
            options.router_policy_config.is_none() && from_env.is_some();
        if options.router_policy_config.is_none() {
            options.router_policy_config = from_env;
        }
        options
    }
}

/// The parser argument of a setting the command line takes.
fn argument(setting: &Setting) -> Option<Arg> {
    let mut arg = Arg::new(setting.name).help(setting.doc);
    match setting.cli {
        settings::Cli::No => return None,
        settings::Cli::Flag(long) => arg = arg.long(long),
        settings::Cli::Positional => {}
    }
    if !setting.value_name.is_empty() {
        arg = arg.value_name(setting.value_name);
    }
    arg = match setting.kind {
        Kind::Int => arg.value_parser(parse_int),
        Kind::Float => arg.value_parser(parse_float),
        Kind::Text | Kind::Json(_) if !setting.choices.is_empty() => arg.value_parser(
            PossibleValuesParser::new(setting.choices.iter().map(|choice| {
                let value = PossibleValue::new(choice.name);
                if choice.doc.is_empty() {
                    value
                } else {
                    value.help(choice.doc)
                }
            })),
        ),
        Kind::Text | Kind::Json(_) => arg.value_parser(clap::value_parser!(String)),
        Kind::Path => arg.value_parser(clap::value_parser!(PathBuf)),
        Kind::Paths => arg
            .value_parser(clap::value_parser!(PathBuf))
            .action(ArgAction::Append),
        Kind::Switch => arg.action(ArgAction::SetTrue),
        Kind::PythonObject => return None,
    };
    if let Some(default) = setting.default.cli_text() {
        arg = arg.default_value(default);
    }
    Some(arg)
}

/// The value the command line gave a setting (its default when not given).
fn given(matches: &ArgMatches, setting: &Setting) -> SettingValue {
    let id = setting.name;
    let value = match setting.kind {
        Kind::Int => matches.get_one::<i64>(id).copied().map(SettingValue::Int),
        Kind::Float => matches.get_one::<f64>(id).copied().map(SettingValue::Float),
        Kind::Text | Kind::Json(_) => matches
            .get_one::<String>(id)
            .cloned()
            .map(SettingValue::Text),
        Kind::Path => matches
            .get_one::<PathBuf>(id)
            .cloned()
            .map(SettingValue::Path),
        Kind::Paths => matches
            .get_many::<PathBuf>(id)
            .map(|paths| SettingValue::Paths(paths.cloned().collect())),
        Kind::Switch => Some(SettingValue::Switch(matches.get_flag(id))),
        Kind::PythonObject => None,
    };
    value.unwrap_or(SettingValue::Unset)
}

impl clap::Args for Cli {
    fn augment_args(command: Command) -> Command {
        command
            .about(ABOUT)
            .long_about(None)
            .version(env!("CARGO_PKG_VERSION"))
            .args_override_self(true)
            .allow_negative_numbers(true)
            .infer_long_args(true)
            .color(clap::ColorChoice::Never)
            .after_help(AFTER_HELP)
            .args(SETTINGS.iter().filter_map(argument))
    }

    fn augment_args_for_update(command: Command) -> Command {
        Self::augment_args(command)
    }
}

impl FromArgMatches for Cli {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let invalid =
            |message: String| clap::Error::raw(clap::error::ErrorKind::InvalidValue, message);
        let mut options = ReplayOptions::default();
        for setting in SETTINGS
            .iter()
            .filter(|setting| setting.cli != settings::Cli::No)
        {
            if let Target::Options(_) = setting.target {
                setting
                    .apply(&mut options, given(matches, setting))
                    .map_err(|message| invalid(format!("{}: {message}", setting.name)))?;
            }
        }
        let progress = matches
            .get_one::<String>("progress")
            .map_or(Ok(ProgressMode::default()), |name| {
                ProgressMode::from_str(name, false)
            })
            .map_err(invalid)?;
        Ok(Cli {
            options,
            report_json: matches.get_one::<PathBuf>("report_json").cloned(),
            aiperf_dir: matches.get_one::<PathBuf>("aiperf_dir").cloned(),
            html_report: matches.get_one::<PathBuf>("html_report").cloned(),
            quiet: matches.get_flag("quiet"),
            progress,
            progress_every: matches
                .get_one::<f64>("progress_every")
                .copied()
                .ok_or_else(|| invalid("--progress-every has no value".to_owned()))?,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::CommandFactory for Cli {
    fn command() -> Command {
        <Self as clap::Args>::augment_args(Command::new("dynosim"))
    }

    fn command_for_update() -> Command {
        Self::command()
    }
}

impl clap::Parser for Cli {}

/// Python's `int(text)` for decimal text: surrounding whitespace, a sign and single
/// underscores between digits are allowed, as argparse's `type=int` allows them.
pub fn parse_int(text: &str) -> Result<i64, String> {
    let invalid = || format!("invalid int value: '{text}'");
    let digits = strip_python_underscores(text.trim()).ok_or_else(invalid)?;
    let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(&digits);
    if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    digits
        .parse::<i64>()
        .map_err(|_| format!("int value out of range: '{text}'"))
}

/// Python's `float(text)`: decimal or exponent notation, `inf`/`infinity`/`nan` in any case,
/// surrounding whitespace, and single underscores between digits.
pub fn parse_float(text: &str) -> Result<f64, String> {
    let invalid = || format!("invalid float value: '{text}'");
    let cleaned = strip_python_underscores(text.trim()).ok_or_else(invalid)?;
    cleaned.parse::<f64>().map_err(|_| invalid())
}

/// Removes underscores that sit between two ASCII digits; `None` if any other underscore
/// is present (Python rejects `_1`, `1_`, `1__0`).
fn strip_python_underscores(text: &str) -> Option<String> {
    if !text.contains('_') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            let before = i > 0 && bytes[i - 1].is_ascii_digit();
            let after = bytes.get(i + 1).is_some_and(|c| c.is_ascii_digit());
            if !(before && after) {
                return None;
            }
        } else {
            out.push(b as char);
        }
    }
    Some(out)
}

/// `DYN_ROUTER_POLICY_CONFIG`, when set to a non-empty value (empty means unset, as for most
/// path variables).
fn policy_config_from_env() -> Option<String> {
    std::env::var("DYN_ROUTER_POLICY_CONFIG")
        .ok()
        .filter(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn ints_parse_like_python() {
        assert_eq!(parse_int("42"), Ok(42));
        assert_eq!(parse_int(" -3 "), Ok(-3));
        assert_eq!(parse_int("+7"), Ok(7));
        assert_eq!(parse_int("1_000"), Ok(1000));
        assert!(parse_int("two").is_err());
        assert!(parse_int("1.5").is_err());
        assert!(parse_int("_1").is_err());
        assert!(parse_int("1__0").is_err());
        assert!(parse_int("").is_err());
        assert!(parse_int("-").is_err());
        assert_eq!(parse_int("two").unwrap_err(), "invalid int value: 'two'");
    }

    #[test]
    fn floats_parse_like_python() {
        assert_eq!(parse_float("1.5"), Ok(1.5));
        assert_eq!(parse_float(".5"), Ok(0.5));
        assert_eq!(parse_float("1e3"), Ok(1000.0));
        assert_eq!(parse_float("-2"), Ok(-2.0));
        assert_eq!(parse_float("1_0.5"), Ok(10.5));
        assert!(parse_float("nan").unwrap().is_nan());
        assert!(parse_float("NaN").unwrap().is_nan());
        assert_eq!(parse_float("inf"), Ok(f64::INFINITY));
        assert_eq!(parse_float("-Infinity"), Ok(f64::NEG_INFINITY));
        assert_eq!(parse_float("x").unwrap_err(), "invalid float value: 'x'");
    }

    #[test]
    fn defaults_equal_the_library_defaults() {
        let cli = Cli::try_parse_from(["dynosim"]).unwrap();
        let parsed = cli.to_options();
        let expected = ReplayOptions::default();
        assert_eq!(format!("{parsed:?}"), format!("{expected:?}"));
    }

    #[test]
    fn last_occurrence_wins_and_negatives_are_values() {
        let cli = Cli::try_parse_from([
            "dynosim",
            "--num-workers",
            "2",
            "--num-workers",
            "-3",
            "--sla-ttft-ms",
            "-1.5",
        ])
        .unwrap();
        assert_eq!(cli.num_workers, -3);
        assert_eq!(cli.sla_ttft_ms, Some(-1.5));
    }

    #[test]
    fn the_progress_choices_are_the_display_modes() {
        let table: Vec<&str> = settings::setting("progress")
            .unwrap()
            .choices
            .iter()
            .map(|choice| choice.name)
            .collect();
        let modes: Vec<String> = ProgressMode::value_variants()
            .iter()
            .filter_map(|mode| mode.to_possible_value())
            .map(|value| value.get_name().to_owned())
            .collect();
        assert_eq!(table, modes);
    }

    #[test]
    fn front_settings_are_read_from_the_command_line() {
        let cli = Cli::try_parse_from([
            "dynosim",
            "--report-json",
            "r.json",
            "--quiet",
            "--progress",
            "lines",
            "a.jsonl",
            "b.jsonl",
        ])
        .unwrap();
        assert_eq!(cli.report_json, Some(PathBuf::from("r.json")));
        assert!(cli.quiet);
        assert_eq!(cli.progress, ProgressMode::Lines);
        assert_eq!(
            cli.trace_files,
            vec![PathBuf::from("a.jsonl"), PathBuf::from("b.jsonl")]
        );
    }
}
