//! Live replay (`--replay-mode online`): the wall clock behind the simulator's clock seam.
//!
//! INTERFACE
//! - [`WallClock`]: model time `t` is due `t / speed` after the run started; waits sleep in
//!   short slices so a cancellation, or a Ctrl-C caught by [`crate::interrupt`], is noticed
//!   promptly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dynosim::sim::Clock;

use crate::interrupt::interrupted;

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
