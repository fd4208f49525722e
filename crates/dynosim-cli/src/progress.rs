//! The progress bar of a run: model time, ended requests and their rate, on stderr, drawn by
//! a thread of its own from the counter the simulation publishes (`dynosim::sim::Progress`;
//! the core keeps no clock, this thread reads it on the wall clock).
//!
//! INTERFACE
//! - [`ProgressBar::start`]: `None` unless stderr is a terminal; otherwise a bar that redraws
//!   a few times a second until [`ProgressBar::finish`] (or drop) erases it.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use dynosim::sim::Progress;
use indicatif::{ProgressDrawTarget, ProgressStyle};

/// How often the bar reads the counter.
const REFRESH: Duration = Duration::from_millis(150);

pub struct ProgressBar {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProgressBar {
    /// A bar for the run publishing into `progress`, when stderr is a terminal.
    pub fn start(progress: Arc<Progress>) -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let done = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&done);
        let thread = std::thread::Builder::new()
            .name("dynosim-progress".into())
            .spawn(move || draw_until(&progress, &stop))
            .ok()?;
        Some(Self {
            done,
            thread: Some(thread),
        })
    }

    /// Stops the thread and erases the bar.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        self.stop();
    }
}

fn draw_until(progress: &Progress, done: &AtomicBool) {
    let bar = indicatif::ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{spinner} {elapsed_precise} [{bar:30}] {human_pos}/{human_len} requests \
         ({per_sec}) | model time {msg}",
    )
    .map(|style| style.progress_chars("=> "));
    if let Ok(style) = style {
        bar.set_style(style);
    }
    // Drawn at least once, however short the run.
    loop {
        let total = progress.total_requests();
        if total > 0 {
            bar.set_length(total as u64);
        }
        bar.set_position(progress.ended_requests() as u64);
        bar.set_message(model_time(progress.model_time_ms()));
        if done.load(Ordering::Relaxed) {
            break;
        }
        std::thread::sleep(REFRESH);
    }
    bar.finish_and_clear();
}

/// Model time as `1h 02m 03.4s`, `2m 03.4s` or `3.4s`.
fn model_time(ms: f64) -> String {
    let seconds = (ms / 1000.0).max(0.0);
    let whole = seconds as u64;
    let (hours, minutes) = (whole / 3600, whole / 60 % 60);
    let rest = seconds - (hours * 3600 + minutes * 60) as f64;
    match (hours, minutes) {
        (0, 0) => format!("{rest:.1}s"),
        (0, m) => format!("{m}m {rest:04.1}s"),
        (h, m) => format!("{h}h {m:02}m {rest:04.1}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::model_time;

    #[test]
    fn model_time_reads_in_hours_minutes_and_seconds() {
        assert_eq!(model_time(3_400.0), "3.4s");
        assert_eq!(model_time(123_400.0), "2m 03.4s");
        assert_eq!(model_time(3_723_400.0), "1h 02m 03.4s");
        assert_eq!(model_time(-5.0), "0.0s");
    }
}
