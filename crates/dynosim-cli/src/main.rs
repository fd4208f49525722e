//! `dynosim`: see the library crate for the flow; this only binds it to the process.

fn main() {
    dynosim_run::output::install_interrupt_cleanup();
    let stdout = std::io::stdout();
    // Not locked for the whole run: the progress bar's thread writes to stderr meanwhile.
    let code = dynosim_cli::run(
        "dynosim",
        std::env::args_os().skip(1),
        &mut stdout.lock(),
        &mut std::io::stderr(),
    );
    std::process::exit(code);
}
