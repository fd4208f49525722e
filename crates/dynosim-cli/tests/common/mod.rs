//! What the binary's integration tests share: running `dynosim` the way a user types it, reading
//! what it wrote, and finding the optional interpreters some tests need.
//!
//! INTERFACE: `command`/`dynosim` run the built binary in a directory; `text` decodes its output;
//! `with_args` appends flags to a base command line; `read_json_object` reads a report;
//! `aic_python` finds an interpreter with aiconfigurator-core (`None` means the caller skips and
//! says so). Each test binary compiles this module on its own and uses part of it.
#![allow(dead_code)]

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Map, Value};

/// The built `dynosim` binary with `args`, to run in `dir`.
pub fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dynosim"));
    command.args(args).current_dir(dir);
    command
}

/// Runs the binary in `dir` and collects its exit status and output.
pub fn dynosim(dir: &Path, args: &[&str]) -> Output {
    command(dir, args)
        .output()
        .expect("the dynosim binary runs")
}

/// Output bytes as text (lossy: a test about a message must still show a mangled one).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `base` followed by `extra`.
pub fn with_args<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra).copied().collect()
}

/// A JSON file that must hold one object (a report).
pub fn read_json_object(path: &Path) -> Map<String, Value> {
    let body = fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("{} cannot be read: {error}", path.display()));
    match serde_json::from_str(&body) {
        Ok(Value::Object(map)) => map,
        Ok(other) => panic!("{} is not a JSON object: {other}", path.display()),
        Err(error) => panic!("{} is not JSON: {error}", path.display()),
    }
}

/// An interpreter that can import aiconfigurator-core: `DYNOSIM_PYTHON`, then the venv `.ci/run`
/// installs, then `python3`.
pub fn aic_python() -> Option<String> {
    let mut candidates = Vec::new();
    if let Ok(python) = std::env::var("DYNOSIM_PYTHON") {
        candidates.push(python);
    }
    if let Some(home) = std::env::var_os("HOME") {
        let venv = Path::new(&home).join(".cache/dynosim-aic-venv/bin/python");
        candidates.push(venv.display().to_string());
    }
    candidates.push("python3".into());
    candidates.into_iter().find(|python| {
        Command::new(python)
            .args(["-c", "import aiconfigurator_core"])
            .output()
            .is_ok_and(|out| out.status.success())
    })
}
