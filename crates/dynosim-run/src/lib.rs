//! One run's outputs, the same for every front (the `dynosim` command, `dynosim serve`, the
//! Python package): one run request -> one result -> one output step.
//!
//! The output step has three parts: every file a run asks for is checked and opened before the
//! simulation (a bad path costs no simulation); per-request records are streamed into their
//! file while the run goes on; at the end every file is written and all are published together,
//! or none is. The clocks a run is driven by live here too (virtual time that notices Ctrl-C,
//! the wall clock of a live replay), with the SIGINT handling that lets Ctrl-C stop a
//! simulation and still write what happened. No argument parsing and no progress display: those
//! belong to the fronts.
//!
//! INTERFACE
//! - [`replay`]: [`replay::OutputPaths`] -> [`replay::Outputs::prepare`] ->
//!   [`replay::replay`] (timing tables, workload, simulation, publication) ->
//!   [`replay::Replayed`]; `Outputs::publish` for a front that simulates by itself (serve).
//! - [`output`]: one file resolved, checked, written and published atomically
//!   ([`output::PreparedOutput`], [`output::commit`], [`output::write_atomically`]), the report
//!   path's default name, and the binary's cleanup of unpublished files at a signal.
//! - [`aiperf`]: `--aiperf-dir`'s check and its three files.
//! - [`html`]: `--html-report`'s page.
//! - [`interrupt`]: the Ctrl-C guard and the virtual clock that notices it; [`live`]: the wall
//!   clock of `--replay-mode online`.

pub mod aiperf;
pub mod html;
pub mod interrupt;
pub mod live;
pub mod output;
pub mod replay;

pub use html::render_html_report;
