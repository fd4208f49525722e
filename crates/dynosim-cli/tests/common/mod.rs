//! What the binary's integration tests share: running `dynosim` the way a user types it, reading
//! what it wrote, and finding the optional interpreters some tests need.
//!
//! INTERFACE: `command`/`dynosim` run the built binary in a directory; `text` decodes its output;
//! `with_args` appends flags to a base command line; `read_json_object` reads a report;
//! `aic_python` finds an interpreter with aiconfigurator-core (`None` means the caller skips and
//! says so); `wait_with_deadline` waits for a spawned child for a bounded time (a hang kills it
//! and fails the test); `default_sigint` gives a child SIGINT's default action (every `command`
//! has it). Each test binary compiles this module on its own and uses part of it.
#![allow(dead_code)]

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

/// The built `dynosim` binary with `args`, to run in `dir`.
pub fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dynosim"));
    command.args(args).current_dir(dir);
    default_sigint(&mut command);
    command
}

/// How long a test waits for one run of the binary before calling it a hang.
pub const RUN_DEADLINE: Duration = Duration::from_secs(300);

/// The smallest synthetic workload: one request of 100 prompt and 2 output tokens.
pub const ONE_REQUEST: [&str; 8] = [
    "--input-tokens",
    "100",
    "--output-tokens",
    "2",
    "--request-count",
    "1",
    "--replay-concurrency",
    "1",
];

/// The KV router's AIC prefill-load model for Qwen3-32B served by vLLM on an H200 (the
/// `--router-config` and `--aic-*` flags of the tests that run it).
pub const AIC_ROUTER_FLAGS: [&str; 8] = [
    "--router-config",
    r#"{"router_prefill_load_model":"aic"}"#,
    "--aic-backend",
    "vllm",
    "--aic-system",
    "h200_sxm",
    "--aic-model-path",
    "Qwen/Qwen3-32B",
];

/// Runs the binary in `dir` and collects its exit status and output (a run still going after
/// [`RUN_DEADLINE`] is killed and fails the test).
pub fn dynosim(dir: &Path, args: &[&str]) -> Output {
    let child = command(dir, args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the dynosim binary runs");
    wait_with_deadline(child, RUN_DEADLINE)
}

/// Starts the child with SIGINT at its default action. A shell running the tests as a
/// background job starts its children with SIGINT ignored, and an ignored disposition is
/// inherited across exec: a test that interrupts its child would then wait for nothing.
pub fn default_sigint(command: &mut Command) -> &mut Command {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: between fork and exec the closure calls only signal(2), which is
        // async-signal-safe, and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
    }
    command
}

/// Waits for `child`, reading its piped stdout and stderr meanwhile, for at most `limit`;
/// a child still running then is killed and the test fails (a hang).
pub fn wait_with_deadline(mut child: Child, limit: Duration) -> Output {
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child process was still running after {limit:?} (a hang)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: stdout.join().expect("stdout is read"),
        stderr: stderr.join().expect("stderr is read"),
    }
}

/// Output bytes as text (lossy: a test about a message must still show a mangled one).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `base` followed by `extra`.
pub fn with_args<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra).copied().collect()
}

/// The names in `dir`, sorted (hidden temporary files included).
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
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

/// [`aic_python`], or `None` after a `SKIPPED <test>: …` line on stderr (the CI script counts
/// a test that prints it as skipped).
pub fn aic_python_or_skip(test: &str) -> Option<String> {
    let python = aic_python();
    if python.is_none() {
        eprintln!(
            "SKIPPED {test}: no Python with aiconfigurator-core (set DYNOSIM_PYTHON or pip \
             install 'dynosim[aic]')"
        );
    }
    python
}

/// `DYNOSIM_AIPERF_PYTHON`, a Python with aiperf 0.13 (`.ci/run` installs one), or `None`
/// after a `SKIPPED <test>: …` line on stderr.
pub fn aiperf_python_or_skip(test: &str) -> Option<String> {
    let python = std::env::var("DYNOSIM_AIPERF_PYTHON").ok();
    if python.is_none() {
        eprintln!("SKIPPED {test}: set DYNOSIM_AIPERF_PYTHON to a Python with aiperf 0.13");
    }
    python
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
