//! The settings table: every setting of a replay defined once — its name, its command-line
//! flag, how the Python API takes it, whether a sweep may vary it, its type, default, choices
//! and help text, and where its value goes — so that the fronts (the CLI's parser, the Python
//! keywords, the sweep's settings, the flag↔keyword spelling of messages) are driven by the
//! table instead of each restating the settings.
//!
//! INTERFACE
//! - [`SETTINGS`] (in `table.rs`): the definitions, in the order `dynosim --help` lists them.
//! - [`Setting`]: one definition. [`Setting::apply`] stores a value into [`ReplayOptions`]
//!   ([`SettingValue::Unset`] restores the default); [`Setting::read`] reads it back.
//! - [`setting`], [`by_flag`]: look a setting up by name or by flag.
//! - [`Kind`], [`SettingValue`], [`Fallback`], [`Choice`], [`PythonArg`], [`Group`],
//!   [`Target`]: the parts of a definition.
//! - [`ReplayFunction`]: the Python API's replay functions and their keyword-only parameters
//!   ([`ReplayFunction::keywords`], the reference's order); [`python_signature`] writes them as
//!   Python does (`num_workers=1`).
//!
//! A front adds what is its own (clap's parser, PyO3 conversions, JSON reading) and keeps no
//! list of settings: adding a setting is one definition here plus the rule that uses its value
//! (a check in `config::options`, or, for a front's own setting, the code that reads it).

mod table;

use std::path::PathBuf;

pub use table::{ReplayFunction, SETTINGS};

use crate::config::ReplayOptions;

/// What a setting's value is, as every front reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A whole number (Python's `int`).
    Int,
    /// A number (Python's `float`).
    Float,
    /// A string (a named choice when the setting has [`Setting::choices`]).
    Text,
    /// A JSON object, given as inline JSON or the path of a file holding one (the Python API
    /// also takes the object or a dict).
    Json(JsonObject),
    /// One path.
    Path,
    /// A list of paths (the trace files).
    Paths,
    /// On when given (a flag without a value).
    Switch,
    /// A Python object only the Python front understands (its scaling policy, its AIC config
    /// object); never on the command line.
    PythonObject,
}

/// The JSON objects settings hold, named for the parser that reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonObject {
    EngineArgs,
    RouterConfig,
    PlannerConfig,
}

/// A setting's default.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fallback {
    /// No value: the setting is optional.
    Unset,
    Int(i64),
    Float(f64),
    Text(&'static str),
    /// A switch's default (off).
    Off,
}

impl Fallback {
    pub fn value(self) -> SettingValue {
        match self {
            Fallback::Unset => SettingValue::Unset,
            Fallback::Int(int) => SettingValue::Int(int),
            Fallback::Float(float) => SettingValue::Float(float),
            Fallback::Text(text) => SettingValue::Text(text.to_owned()),
            Fallback::Off => SettingValue::Switch(false),
        }
    }

    /// The default as the command line writes it (`1`, `0.0`, `offline`), if there is one.
    pub fn cli_text(self) -> Option<String> {
        match self {
            Fallback::Unset | Fallback::Off => None,
            Fallback::Int(int) => Some(int.to_string()),
            Fallback::Float(float) => Some(format!("{float:?}")),
            Fallback::Text(text) => Some(text.to_owned()),
        }
    }

    /// The default as a Python signature writes it (`1`, `0.0`, `'offline'`, `None`).
    pub fn python_text(self) -> String {
        match self {
            Fallback::Unset => "None".to_owned(),
            Fallback::Int(int) => int.to_string(),
            Fallback::Float(float) => format!("{float:?}"),
            Fallback::Text(text) => format!("'{text}'"),
            Fallback::Off => "False".to_owned(),
        }
    }
}

/// One value of a setting, whatever front it came from.
#[derive(Clone, Debug, PartialEq)]
pub enum SettingValue {
    /// Not given (or Python's `None`): the setting's default.
    Unset,
    Int(i64),
    Float(f64),
    Text(String),
    Path(PathBuf),
    Paths(Vec<PathBuf>),
    Switch(bool),
}

/// One named choice of a setting, with its help line if it has one.
#[derive(Clone, Copy, Debug)]
pub struct Choice {
    pub name: &'static str,
    pub doc: &'static str,
}

impl Choice {
    pub const fn named(name: &'static str) -> Self {
        Self { name, doc: "" }
    }
}

/// How the Python API takes a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PythonArg {
    /// It has no argument for it (the command line alone sets it).
    No,
    /// A keyword argument of the setting's own name.
    Keyword,
    /// A keyword argument of another name (`report_jsonl` is `report_jsonl_path`).
    Renamed(&'static str),
    /// A field of another argument, named `<argument>.<setting>` in messages
    /// (`aic_perf_config.aic_backend`).
    FieldOf(&'static str),
}

/// What part of a run a setting describes (the order in which a sweep's command line lists
/// them, the table's order within a group).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// The requests: a trace or a synthetic workload, and when they arrive.
    Workload,
    /// The engines and how many workers run them.
    Deployment,
    /// How requests are routed.
    Router,
    /// The goodput SLAs.
    Goals,
    /// The KV router's AIC prefill-load model.
    Aic,
    /// How the run is driven: replay mode, planner, time cap.
    Run,
    /// What the run writes and shows.
    Outputs,
}

/// Where a setting's value goes.
#[derive(Clone, Copy)]
pub enum Target {
    /// A field of [`ReplayOptions`].
    Options(Access),
    /// A front's own setting (an output file, the progress display): the front reads it.
    Front,
}

/// Reads and stores one [`ReplayOptions`] field.
#[derive(Clone, Copy)]
pub struct Access {
    pub read: fn(&ReplayOptions) -> SettingValue,
    pub store: fn(&mut ReplayOptions, SettingValue) -> Result<(), String>,
}

/// One setting.
#[derive(Clone, Copy)]
pub struct Setting {
    /// The `ReplayOptions` field, the sweep's setting and the parser's argument id.
    pub name: &'static str,
    /// The command-line flag (`--num-workers`), the positional argument's value name
    /// (`TRACE_FILES`), or none.
    pub cli: Cli,
    pub python: PythonArg,
    /// Whether a sweep may set it.
    pub sweep: bool,
    pub group: Group,
    /// Whether it describes the prefill or the decode pool of a disaggregated deployment
    /// (and nothing else).
    pub disaggregated_only: bool,
    pub kind: Kind,
    pub default: Fallback,
    pub choices: &'static [Choice],
    /// The value's name in `--help` (`INT`, `PATH`).
    pub value_name: &'static str,
    /// The `--help` text: one paragraph, no final full stop.
    pub doc: &'static str,
    pub target: Target,
}

/// How the command line takes a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cli {
    No,
    /// A long flag (without its dashes).
    Flag(&'static str),
    /// The positional arguments.
    Positional,
}

impl Setting {
    /// The fields every definition starts from.
    pub(crate) const BASE: Setting = Setting {
        name: "",
        cli: Cli::No,
        python: PythonArg::No,
        sweep: false,
        group: Group::Run,
        disaggregated_only: false,
        kind: Kind::Text,
        default: Fallback::Unset,
        choices: &[],
        value_name: "",
        doc: "",
        target: Target::Front,
    };

    /// The long flag without its dashes, if the command line has one.
    pub fn long(&self) -> Option<&'static str> {
        match self.cli {
            Cli::Flag(long) => Some(long),
            _ => None,
        }
    }

    /// `--<long>`, if the command line has a flag for it.
    pub fn flag(&self) -> Option<String> {
        self.long().map(|long| format!("--{long}"))
    }

    /// The name the Python API gives it in arguments and messages, if it has one.
    pub fn python_name(&self) -> Option<String> {
        match self.python {
            PythonArg::No => None,
            PythonArg::Keyword => Some(self.name.to_owned()),
            PythonArg::Renamed(name) => Some(name.to_owned()),
            PythonArg::FieldOf(argument) => Some(format!("{argument}.{}", self.name)),
        }
    }

    /// The keyword argument of the replay functions, if it is one (not a field of another).
    pub fn python_keyword(&self) -> Option<&'static str> {
        match self.python {
            PythonArg::Keyword => Some(self.name),
            PythonArg::Renamed(name) => Some(name),
            PythonArg::No | PythonArg::FieldOf(_) => None,
        }
    }

    /// Stores `value` into its option field ([`SettingValue::Unset`] restores the default).
    /// Front settings have no field: storing one is an error.
    pub fn apply(&self, options: &mut ReplayOptions, value: SettingValue) -> Result<(), String> {
        let Target::Options(access) = self.target else {
            return Err(format!("{} is not a replay option", self.name));
        };
        let value = match value {
            SettingValue::Unset => self.default.value(),
            given => given,
        };
        (access.store)(options, value)
    }

    /// The value of its option field (`None` for a front setting).
    pub fn read(&self, options: &ReplayOptions) -> Option<SettingValue> {
        match self.target {
            Target::Options(access) => Some((access.read)(options)),
            Target::Front => None,
        }
    }

    /// The keyword's default as a Python signature writes it.
    fn python_default_text(&self) -> String {
        self.default.python_text()
    }
}

impl Default for ReplayOptions {
    /// Every setting's default, as the table defines it.
    fn default() -> Self {
        let mut options = Self::blank();
        for setting in SETTINGS {
            if setting.read(&options).is_some() {
                setting
                    .apply(&mut options, SettingValue::Unset)
                    .expect("a setting's default has its field's type");
            }
        }
        options
    }
}

/// The setting named `name`.
pub fn setting(name: &str) -> Option<&'static Setting> {
    SETTINGS.iter().find(|setting| setting.name == name)
}

/// The setting whose flag is `flag` (`--num-workers`).
pub fn by_flag(flag: &str) -> Option<&'static Setting> {
    let long = flag.strip_prefix("--")?;
    SETTINGS.iter().find(|setting| setting.long() == Some(long))
}

/// The keyword-only part of a replay function's Python signature, `name=default, ...`, for
/// the keywords listed (each a setting's Python keyword).
pub fn python_signature(keywords: &[&str]) -> String {
    keywords
        .iter()
        .map(|keyword| {
            let default = SETTINGS
                .iter()
                .find(|setting| setting.python_keyword() == Some(*keyword))
                .map_or_else(|| "None".to_owned(), Setting::python_default_text);
            format!("{keyword}={default}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A field's Rust type as a setting's value.
pub(crate) trait FieldValue: Sized {
    fn to_setting(&self) -> SettingValue;
    fn from_setting(value: SettingValue) -> Result<Self, String>;
}

fn mismatch(value: &SettingValue, expected: &str) -> String {
    format!("expected {expected}, got {value:?}")
}

/// `FieldValue` for a type held by one [`SettingValue`] variant.
macro_rules! scalar_field {
    ($ty:ty, $variant:ident, $expected:literal) => {
        impl FieldValue for $ty {
            fn to_setting(&self) -> SettingValue {
                SettingValue::$variant(self.clone())
            }
            fn from_setting(value: SettingValue) -> Result<Self, String> {
                match value {
                    SettingValue::$variant(held) => Ok(held),
                    other => Err(mismatch(&other, $expected)),
                }
            }
        }
    };
}

scalar_field!(i64, Int, "an integer");
scalar_field!(f64, Float, "a number");
scalar_field!(String, Text, "a string");

impl FieldValue for PathBuf {
    fn to_setting(&self) -> SettingValue {
        SettingValue::Path(self.clone())
    }
    fn from_setting(value: SettingValue) -> Result<Self, String> {
        match value {
            SettingValue::Path(path) => Ok(path),
            SettingValue::Text(text) => Ok(PathBuf::from(text)),
            other => Err(mismatch(&other, "a path")),
        }
    }
}

/// No paths is the unset list.
impl FieldValue for Vec<PathBuf> {
    fn to_setting(&self) -> SettingValue {
        if self.is_empty() {
            SettingValue::Unset
        } else {
            SettingValue::Paths(self.clone())
        }
    }
    fn from_setting(value: SettingValue) -> Result<Self, String> {
        match value {
            SettingValue::Unset => Ok(Vec::new()),
            SettingValue::Paths(paths) => Ok(paths),
            SettingValue::Path(path) => Ok(vec![path]),
            other => Err(mismatch(&other, "a list of paths")),
        }
    }
}

impl<T: FieldValue> FieldValue for Option<T> {
    fn to_setting(&self) -> SettingValue {
        self.as_ref().map_or(SettingValue::Unset, T::to_setting)
    }
    fn from_setting(value: SettingValue) -> Result<Self, String> {
        match value {
            SettingValue::Unset => Ok(None),
            given => T::from_setting(given).map(Some),
        }
    }
}

#[cfg(test)]
mod tests;
