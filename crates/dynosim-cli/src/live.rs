//! Live replay (`--replay-mode online`): the wall clock behind the simulator's clock seam, and
//! Ctrl-C as a request to end the run early.
//!
//! INTERFACE
//! - [`WallClock`]: model time `t` is due `t / speed` after the run started; waits sleep in
//!   short slices so a cancellation is noticed promptly.
//! - [`InterruptGuard`]: while alive, SIGINT (Ctrl-C) does not kill the process but marks the
//!   run as interrupted; dropping it restores the previous handler (the Python front runs the
//!   same code in its own process).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dynosim::sim::Clock;

/// Longest single sleep, so Ctrl-C and cancellation are seen within this much time.
const SLEEP_SLICE: Duration = Duration::from_millis(20);

/// Model time on the wall clock, `speed` times faster than real time.
#[derive(Debug)]
pub struct WallClock {
    started: Instant,
    speed: f64,
}

impl WallClock {
    /// Starts the clock now at model time 0.
    pub fn start(speed: f64) -> Self {
        Self {
            started: Instant::now(),
            speed,
        }
    }
}

impl Clock for WallClock {
    fn wait_until(&mut self, at_ms: f64, cancel: &AtomicBool) {
        let due = self.started + Duration::from_secs_f64((at_ms / self.speed / 1000.0).max(0.0));
        loop {
            if interrupted() {
                cancel.store(true, Ordering::SeqCst);
            }
            if cancel.load(Ordering::SeqCst) {
                return;
            }
            let now = Instant::now();
            if now >= due {
                return;
            }
            std::thread::sleep((due - now).min(SLEEP_SLICE));
        }
    }
}

/// Set by the SIGINT handler. A signal handler can only touch such a global.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

fn interrupted() -> bool {
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

    /// Whether Ctrl-C was pressed while the guard was installed.
    pub fn was_interrupted(&self) -> bool {
        interrupted()
    }
}

impl Drop for InterruptGuard {
    fn drop(&mut self) {
        sigint::restore(self.previous);
    }
}

#[cfg(unix)]
mod sigint {
    use std::sync::atomic::Ordering;

    pub type Handler = libc::sighandler_t;

    extern "C" fn on_sigint(_signal: libc::c_int) {
        super::INTERRUPTED.store(true, Ordering::SeqCst);
    }

    /// Routes SIGINT to [`on_sigint`]; returns the handler it replaces.
    pub fn catch() -> Handler {
        let handler = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(libc::SIGINT, handler) }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_scale_with_the_speed_and_end_early_when_cancelled() {
        let cancel = AtomicBool::new(false);
        let mut clock = WallClock::start(100.0);
        let started = Instant::now();
        // 2 s of model time at 100x: 20 ms of wall time.
        clock.wait_until(2000.0, &cancel);
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(20), "{waited:?}");
        cancel.store(true, Ordering::SeqCst);
        let started = Instant::now();
        clock.wait_until(1e9, &cancel);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
