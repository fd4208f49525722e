//! A run's progress on stderr, from the counter the simulation publishes
//! (`dynosim::sim::Progress`; the core keeps no clock, this module's thread reads it on the
//! wall clock): model time, ended requests and their rate.
//!
//! INTERFACE
//! - [`ProgressMode`]: `--progress` — a bar on a terminal, plain lines for a log file or a CI
//!   job (stderr not a terminal), either on request, or nothing.
//! - [`ProgressBar::start`]: the display a mode asks for (`None` for none); it works on a
//!   thread of its own until [`ProgressBar::finish`] (or drop): the bar redraws a few times a
//!   second and is erased at the end; lines come every `--progress-every` (10 s by default),
//!   the first after half of that, so that a short run prints none. `finish` says whether
//!   anything was shown.
//! - [`line_interval`]: `--progress-every` checked, as the time between lines.
//! - [`closing_line`]: the line a display that showed something ends with, once the run is
//!   reported: the simulated duration, and the wall time split into setup, simulation and
//!   writing (the table's `Wall Time` is the simulation alone, as in the reference).
//! - [`SweepBar`]: a sweep's candidates as a bar on stderr when it is a terminal (nothing
//!   otherwise), drawn from what the sweep reports ([`dynosim_sweep::SweepProgress`]).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dynosim::sim::Progress;
use indicatif::{ProgressDrawTarget, ProgressStyle};

/// How often the bar reads the counter.
const REFRESH: Duration = Duration::from_millis(150);
/// The range `--progress-every` takes, in seconds: more often than the display refreshes
/// would only repeat lines, and a day is longer than any run worth watching this way.
const LINE_INTERVAL_SECONDS: std::ops::RangeInclusive<f64> = 0.1..=86_400.0;

/// `--progress-every` as the time between progress lines, or a usage error naming the flag.
pub fn line_interval(seconds: f64) -> dynosim::Result<Duration> {
    if !LINE_INTERVAL_SECONDS.contains(&seconds) {
        return Err(dynosim::Error::usage_about(
            "--progress-every",
            format!("must be from 0.1 to 86400 seconds, got {seconds}"),
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

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
    /// Dropped to stop the thread: its wait ends at once rather than after a refresh interval,
    /// which a short run would otherwise spend idle at exit.
    stop: Option<Sender<()>>,
    /// Set once the bar was drawn or a line printed.
    shown: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ProgressBar {
    /// The display `mode` asks for, of the run publishing into `progress`; lines come every
    /// `line_every`.
    pub fn start(
        mode: ProgressMode,
        progress: Arc<Progress>,
        line_every: Duration,
    ) -> Option<Self> {
        let bar = match mode {
            ProgressMode::Off => return None,
            ProgressMode::Auto => std::io::stderr().is_terminal(),
            ProgressMode::Bar => true,
            ProgressMode::Lines => false,
        };
        let (stop, stopped) = mpsc::channel();
        let shown = Arc::new(AtomicBool::new(false));
        let showing = Arc::clone(&shown);
        let thread = std::thread::Builder::new()
            .name("dynosim-progress".into())
            .spawn(move || {
                if bar {
                    draw_until(&progress, &stopped, &showing);
                } else {
                    print_lines_until(&progress, line_every, &stopped, &showing);
                }
            })
            .ok()?;
        Some(Self {
            stop: Some(stop),
            shown,
            thread: Some(thread),
        })
    }

    /// Stops the thread and erases the bar; returns whether anything was shown (the bar, or
    /// at least one line), which the [`closing_line`] then completes.
    pub fn finish(mut self) -> bool {
        self.stop();
        self.shown.load(Ordering::Relaxed)
    }

    fn stop(&mut self) {
        self.stop.take();
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

/// Prints a progress line half of `every` into the run, then every `every`, until `stop`.
fn print_lines_until(
    progress: &Progress,
    every: Duration,
    stop: &Receiver<()>,
    shown: &AtomicBool,
) {
    let started = Instant::now();
    let mut next = started + every / 2;
    loop {
        let now = Instant::now();
        if now >= next {
            let line = if simulating(progress) {
                progress_line(
                    progress.model_time_ms(),
                    progress.ended_requests(),
                    progress.total_requests(),
                    now.duration_since(started),
                )
            } else {
                setup_line(now.duration_since(started))
            };
            // A stderr that went away loses the line; the run goes on.
            let _ = writeln!(std::io::stderr(), "{line}");
            shown.store(true, Ordering::Relaxed);
            next += every;
        }
        if stopped_within(stop, REFRESH.min(next.saturating_duration_since(now))) {
            return;
        }
    }
}

/// Waits up to `wait` for the owner to stop the display (or to go away); whether it did.
fn stopped_within(stop: &Receiver<()>, wait: Duration) -> bool {
    !matches!(stop.recv_timeout(wait), Err(RecvTimeoutError::Timeout))
}

/// Whether the simulation has published where it is (before that, the run is setting up:
/// building timing tables, reading the workload).
fn simulating(progress: &Progress) -> bool {
    progress.total_requests() > 0 || progress.ended_requests() > 0
}

/// The line while the run sets up: `progress: setting up (timing tables, workload) for 15.0s`.
fn setup_line(elapsed: Duration) -> String {
    format!(
        "progress: setting up (timing tables, workload) for {}",
        model_time(elapsed.as_secs_f64() * 1000.0)
    )
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

/// Where a finished run's wall time went.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WallTimes {
    /// From the start of the run to the end of its outputs.
    pub total: Duration,
    /// Before the simulation: timing tables (AIC) and the workload.
    pub setup: Duration,
    /// The simulation: the report's `wall_time_ms`.
    pub simulation_ms: f64,
}

/// The last line of a progress display: `progress: done, model time 2m 03.4s, 4,000/4,000
/// requests ended; wall time 4.12s (setup 0.80s, simulation 3.30s, writing 0.02s)`, where
/// the model time is the report's `duration_ms`.
pub fn closing_line(duration_ms: f64, ended: usize, total: usize, wall: WallTimes) -> String {
    let setup_ms = wall.setup.as_secs_f64() * 1000.0;
    let total_ms = wall.total.as_secs_f64() * 1000.0;
    let writing_ms = (total_ms - setup_ms - wall.simulation_ms).max(0.0);
    format!(
        "progress: done, model time {}, {}/{} requests ended; wall time {} (setup {}, \
         simulation {}, writing {})",
        model_time(duration_ms),
        thousands(ended as u64),
        thousands(total as u64),
        wall_time(total_ms),
        wall_time(setup_ms),
        wall_time(wall.simulation_ms),
        wall_time(writing_ms)
    )
}

/// Wall time with hundredths of a second below a minute (`0.03s`, `4.12s`), as model time
/// above.
fn wall_time(ms: f64) -> String {
    if ms < 60_000.0 {
        format!("{:.2}s", (ms / 1000.0).max(0.0))
    } else {
        model_time(ms)
    }
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

fn draw_until(progress: &Progress, stop: &Receiver<()>, shown: &AtomicBool) {
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
        if simulating(progress) {
            bar.set_message(model_time(progress.model_time_ms()));
        } else {
            bar.set_message("- (setting up: timing tables, workload)");
        }
        shown.store(true, Ordering::Relaxed);
        if stopped_within(stop, REFRESH) {
            break;
        }
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

/// A sweep's bar: one per batch of candidates the sweep simulates, erased when the batch ends.
#[derive(Default)]
pub struct SweepBar {
    /// The current batch's bar (`None` between batches, or when stderr is not a terminal).
    bar: Mutex<Option<indicatif::ProgressBar>>,
}

impl SweepBar {
    fn current(&self) -> std::sync::MutexGuard<'_, Option<indicatif::ProgressBar>> {
        self.bar
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl dynosim_sweep::SweepProgress for SweepBar {
    fn batch_started(&self, candidates: usize) {
        if !std::io::stderr().is_terminal() {
            return;
        }
        let bar = indicatif::ProgressBar::new(candidates as u64);
        if let Ok(style) = ProgressStyle::with_template(
            "sweep {bar:40} {pos}/{len} candidates, {elapsed} elapsed, eta {eta}",
        ) {
            bar.set_style(style);
        }
        *self.current() = Some(bar);
    }

    fn candidate_finished(&self) {
        if let Some(bar) = self.current().as_ref() {
            bar.inc(1);
        }
    }

    fn batch_finished(&self) {
        if let Some(bar) = self.current().take() {
            bar.finish_and_clear();
        }
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
    fn before_the_simulation_the_line_says_the_run_is_setting_up() {
        let progress = Progress::new();
        assert!(!simulating(&progress));
        assert_eq!(
            setup_line(Duration::from_millis(15_040)),
            "progress: setting up (timing tables, workload) for 15.0s"
        );
    }

    /// The closing line of a run whose wall times were (total, setup, simulation) in ms.
    fn closing_after(model_ms: f64, ended: usize, total: usize, wall_ms: [u64; 3]) -> String {
        let [total_ms, setup_ms, simulation_ms] = wall_ms;
        let wall = WallTimes {
            total: Duration::from_millis(total_ms),
            setup: Duration::from_millis(setup_ms),
            simulation_ms: simulation_ms as f64,
        };
        closing_line(model_ms, ended, total, wall)
    }

    #[test]
    fn the_closing_line_splits_the_wall_time() {
        assert_eq!(
            closing_after(123_400.0, 4000, 4000, [4_120, 800, 3_300]),
            "progress: done, model time 2m 03.4s, 4,000/4,000 requests ended; wall time 4.12s \
             (setup 0.80s, simulation 3.30s, writing 0.02s)"
        );
        assert_eq!(
            closing_after(3_723_400.0, 5, 9, [95_000, 70_000, 25_000]),
            "progress: done, model time 1h 02m 03.4s, 5/9 requests ended; wall time 1m 35.0s \
             (setup 1m 10.0s, simulation 25.00s, writing 0.00s)"
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
