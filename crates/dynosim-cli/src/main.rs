//! `dynosim`: see the library crate for the flow; this only binds it to the process.
//!
//! The Python package's `python -m dynosim` and `python -m dynamo.replay` replace their process
//! with this binary; they set [`PROG_VARIABLE`] to their own name, which usage and error lines
//! then show (`python -m dynamo.replay: error: ...`). The variable is removed at once so that
//! the processes this one starts (a `--ray` sweep's Python, AIC table builds) do not inherit it.

/// The environment variable naming the program in usage and error lines (default `dynosim`).
const PROG_VARIABLE: &str = "DYNOSIM_PROG";

fn main() {
    let prog = std::env::var(PROG_VARIABLE)
        .ok()
        .filter(|prog| !prog.is_empty())
        .unwrap_or_else(|| "dynosim".to_owned());
    // Still one thread: nothing else reads the environment meanwhile.
    std::env::remove_var(PROG_VARIABLE);
    dynosim_run::output::install_interrupt_cleanup();
    let stdout = std::io::stdout();
    // Not locked for the whole run: the progress bar's thread writes to stderr meanwhile.
    let code = dynosim_cli::run(
        &prog,
        std::env::args_os().skip(1),
        &mut stdout.lock(),
        &mut std::io::stderr(),
    );
    std::process::exit(code);
}
