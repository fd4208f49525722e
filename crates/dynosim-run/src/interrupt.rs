//! Ctrl-C during a run, offline or live: the first SIGINT while the simulation runs asks it to
//! stop (its report then covers what happened until then, marked as interrupted); a SIGINT at
//! any other moment — before the simulation, while the outputs are written, or a second one —
//! goes to the handler that was in place before (the binary's cleanup, which removes
//! unpublished temporary files and ends the process by the signal).
//!
//! INTERFACE
//! - [`InterruptGuard`]: while alive, SIGINT is handled as above; dropping it restores the
//!   previous handler. The command line's run installs it (the Python package's command line
//!   runs the `dynosim` binary, so it is the same code in a process of its own).
//! - [`Simulating`]: held while a simulation runs (the only time a SIGINT means "stop").
//! - [`InterruptibleVirtualClock`]: virtual time (every moment due at once) that turns a caught
//!   SIGINT into the run's cancellation; the live clock does the same with [`interrupted`].

use std::sync::atomic::{AtomicBool, Ordering};

use dynosim::sim::Clock;

/// Set by the SIGINT handler when it stops a run. A signal handler can only touch globals.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// A simulation is running: a SIGINT stops it instead of ending the process.
static SIMULATING: AtomicBool = AtomicBool::new(false);

/// Whether a SIGINT asked the running simulation to stop.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Catches Ctrl-C for the lifetime of the guard.
pub struct InterruptGuard {
    previous: sigint::Handler,
}

impl InterruptGuard {
    pub fn install() -> Self {
        INTERRUPTED.store(false, Ordering::SeqCst);
        Self {
            previous: sigint::catch(),
        }
    }

    /// Whether Ctrl-C stopped the run while the guard was installed.
    pub fn was_interrupted(&self) -> bool {
        interrupted()
    }
}

impl Drop for InterruptGuard {
    fn drop(&mut self) {
        sigint::restore(self.previous);
    }
}

/// Marks the simulation as running until dropped.
pub struct Simulating(());

impl Simulating {
    pub fn enter() -> Self {
        SIMULATING.store(true, Ordering::SeqCst);
        Self(())
    }
}

impl Drop for Simulating {
    fn drop(&mut self) {
        SIMULATING.store(false, Ordering::SeqCst);
    }
}

/// Virtual time whose waits notice a caught Ctrl-C: the run is cancelled between two batches
/// of events (one atomic load per batch).
#[derive(Clone, Copy, Debug, Default)]
pub struct InterruptibleVirtualClock;

impl Clock for InterruptibleVirtualClock {
    fn wait_until(&mut self, _at_ms: f64, cancel: &AtomicBool) {
        if interrupted() {
            cancel.store(true, Ordering::SeqCst);
        }
    }
}

#[cfg(unix)]
mod sigint {
    use std::sync::atomic::{AtomicUsize, Ordering};

    pub type Handler = libc::sighandler_t;

    /// The handler the guard replaced, for the SIGINTs that are not "stop the run".
    static PREVIOUS: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);

    extern "C" fn on_sigint(signal: libc::c_int) {
        if super::SIMULATING.load(Ordering::SeqCst)
            && !super::INTERRUPTED.swap(true, Ordering::SeqCst)
        {
            return;
        }
        // SAFETY: signal(2) and raise(3) are async-signal-safe; the re-raised SIGINT is
        // delivered to the previous handler once this one returns.
        unsafe {
            libc::signal(
                signal,
                PREVIOUS.load(Ordering::SeqCst) as libc::sighandler_t,
            );
            libc::raise(signal);
        }
    }

    /// Routes SIGINT to [`on_sigint`]; returns the handler it replaces. A SIGINT ignored by
    /// whoever started the process stays ignored.
    pub fn catch() -> Handler {
        let handler = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only touches atomics and calls async-signal-safe functions.
        let previous = unsafe { libc::signal(libc::SIGINT, handler) };
        if previous == libc::SIG_IGN {
            // SAFETY: puts back the disposition that was there.
            unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
        }
        PREVIOUS.store(previous as usize, Ordering::SeqCst);
        previous
    }

    pub fn restore(previous: Handler) {
        // SAFETY: reinstalls the handler that was in place before `catch`.
        unsafe {
            libc::signal(libc::SIGINT, previous);
        }
    }
}

/// Elsewhere Ctrl-C keeps its default effect.
#[cfg(not(unix))]
mod sigint {
    pub type Handler = ();
    pub fn catch() -> Handler {}
    pub fn restore(_previous: Handler) {}
}
