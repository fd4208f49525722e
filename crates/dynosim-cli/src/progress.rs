//! A run's progress on stderr, from the counter the simulation publishes
//! (`dynosim::sim::Progress`; the core keeps no clock, this module's thread reads it on the
//! wall clock): model time, ended requests and their rate.
//!
//! INTERFACE
//! - [`ProgressMode`]: `--progress` — a bar on a terminal, plain lines for a log file or a CI
//!   job (stderr not a terminal), either on request, or nothing.
//! - [`ProgressBar::start`]: the display a mode asks for (`None` for none); it works on a
//!   thread of its own until [`ProgressBar::finish`] (or drop): the bar redraws a few times a
//!   second and is erased at the end; lines come [`FIRST_LINE_AFTER`] into the run and then
//!   every [`LINE_EVERY`], so that a short run prints none.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dynosim::sim::Progress;
use indicatif::{ProgressDrawTarget, ProgressStyle};

/// How often the bar reads the counter.
const REFRESH: Duration = Duration::from_millis(150);
/// When the first progress line comes, and then how often.
pub const FIRST_LINE_AFTER: Duration = Duration::from_secs(5);
pub const LINE_EVERY: Duration = Duration::from_secs(10);

/// How a run shows its progress (`--progress`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, lines otherwise.
    #[default]
    Auto,
    Bar,
    Lines,
    Off,
}

pub struct ProgressBar {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProgressBar {
    /// The display `mode` asks for, of the run publishing into `progress`.
    pub fn start(mode: ProgressMode, progress: Arc<Progress>) -> Option<Self> {
        let bar = match mode {
            ProgressMode::Off => return None,
            ProgressMode::Auto => std::io::stderr().is_terminal(),
            ProgressMode::Bar => true,
            ProgressMode::Lines => false,
        };
        let done = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&done);
        let thread = std::thread::Builder::new()
            .name("dynosim-progress".into())
            .spawn(move || {
                if bar {
                    draw_until(&progress, &stop);
                } else {
                    print_lines_until(&progress, &stop);
                }
            })
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

/// Prints a progress line [`FIRST_LINE_AFTER`] into the run, then every [`LINE_EVERY`],
/// until `done`.
fn print_lines_until(progress: &Progress, done: &AtomicBool) {
    let started = Instant::now();
    let mut next = started + FIRST_LINE_AFTER;
    while !done.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= next {
            let line = progress_line(
                progress.model_time_ms(),
                progress.ended_requests(),
                progress.total_requests(),
                now.duration_since(started),
            );
            // A stderr that went away loses the line; the run goes on.
            let _ = writeln!(std::io::stderr(), "{line}");
            next += LINE_EVERY;
        }
        std::thread::sleep(REFRESH.min(next.saturating_duration_since(now)));
    }
}

/// One progress line: `progress: model time 2m 03.4s, 1,234/36,093 requests ended (3,324/s)`.
fn progress_line(model_time_ms: f64, ended: usize, total: usize, elapsed: Duration) -> String {
    let rate = ended as f64 / elapsed.as_secs_f64().max(1e-9);
    format!(
        "progress: model time {}, {}/{} requests ended ({}/s)",
        model_time(model_time_ms),
        thousands(ended as u64),
        thousands(total as u64),
        rate_text(rate)
    )
}

/// `1234567` as `1,234,567`.
fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A rate with three significant digits, at least in whole units: `3,324`, `12.5`, `0.412`.
fn rate_text(per_s: f64) -> String {
    if !per_s.is_finite() || per_s <= 0.0 {
        return "0".to_string();
    }
    if per_s >= 100.0 {
        return thousands(per_s.round() as u64);
    }
    let decimals = if per_s >= 10.0 {
        1
    } else if per_s >= 1.0 {
        2
    } else {
        3
    };
    format!("{per_s:.decimals$}")
}

fn draw_until(progress: &Progress, done: &AtomicBool) {
    let bar = indicatif::ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{spinner} {elapsed_precise} [{bar:30}] {human_pos}/{human_len} requests \
         ({rate}/s) | model time {msg}",
    )
    .map(|style| {
        style.progress_chars("=> ").with_key(
            "rate",
            |state: &indicatif::ProgressState, out: &mut dyn std::fmt::Write| {
                let _ = write!(out, "{}", rate_text(state.per_sec()));
            },
        )
    });
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
    use super::*;

    #[test]
    fn rates_read_with_three_significant_digits() {
        assert_eq!(rate_text(3323.8324), "3,324");
        assert_eq!(rate_text(123.45), "123");
        assert_eq!(rate_text(12.345), "12.3");
        assert_eq!(rate_text(1.2345), "1.23");
        assert_eq!(rate_text(0.41234), "0.412");
        assert_eq!(rate_text(0.0), "0");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn a_progress_line_says_where_the_run_is() {
        assert_eq!(
            progress_line(123_400.0, 1234, 36_093, Duration::from_secs(2)),
            "progress: model time 2m 03.4s, 1,234/36,093 requests ended (617/s)"
        );
    }

    #[test]
    fn model_time_reads_in_hours_minutes_and_seconds() {
        assert_eq!(model_time(3_400.0), "3.4s");
        assert_eq!(model_time(123_400.0), "2m 03.4s");
        assert_eq!(model_time(3_723_400.0), "1h 02m 03.4s");
        assert_eq!(model_time(-5.0), "0.0s");
    }
}
