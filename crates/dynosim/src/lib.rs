//! dynosim: replays one LLM-serving workload through one simulated serving deployment in
//! virtual time and reports what that deployment's users would see.
//!
//! The crate is pure: a validated [`ReplaySpec`] goes in, a [`Report`] (and optionally
//! per-request records) comes out. No printing, no wall clock inside the simulation, no globals.
//! See `docs/ARCHITECTURE.md` for the code map and invariants.

pub mod aic;
pub mod aic_build;
pub mod config;
pub mod engine;
pub mod error;
pub mod planner;
pub mod report;
pub mod router;
pub mod sim;
pub mod tokens;
pub mod workload;

pub use error::{Error, Result};

/// Test helper: a file of the shared folder beside the repository (`../shared/RELATIVE`), or
/// `None`, with a note on stderr, when it is absent. Under `CI=true` an absent file fails the
/// test instead: CI always has `../shared`, so there its absence means nothing was checked.
#[cfg(test)]
pub(crate) fn shared_file(relative: &str) -> Option<std::path::PathBuf> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared")
        .join(relative);
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{} is absent; CI=true needs ../shared beside the repository",
        path.display()
    );
    eprintln!("skipping: {} is absent", path.display());
    None
}

pub use config::ReplaySpec;
pub use report::{LazyRecords, Report, RequestRecord};
pub use workload::Workload;

/// Reads (or generates) the workload a spec names. Kept apart from [`simulate`] because the
/// report's `wall_time_ms` measures the simulation only, not trace loading.
pub fn load_workload(spec: &ReplaySpec) -> Result<Workload> {
    workload::load(spec)
}

/// Builds what the spec's timing models need before the run (AIC tables, from the cache or by
/// running the Python builder once per engine configuration). This is I/O and may take seconds
/// on a first run; [`simulate`] refuses a spec that needed it and did not get it.
pub fn prepare(spec: &ReplaySpec) -> Result<std::borrow::Cow<'_, ReplaySpec>> {
    prepare_announcing(spec, &mut |_| {})
}

/// [`prepare`], telling `announce` (one sentence) before each table build that the cache
/// does not answer, so that a front can say why the run has not started yet.
pub fn prepare_announcing<'s>(
    spec: &'s ReplaySpec,
    announce: &mut dyn FnMut(&str),
) -> Result<std::borrow::Cow<'s, ReplaySpec>> {
    if !aic_build::needs_prepare(spec) {
        return Ok(std::borrow::Cow::Borrowed(spec));
    }
    let mut prepared = spec.clone();
    aic_build::prepare(&mut prepared, announce)?;
    Ok(std::borrow::Cow::Owned(prepared))
}

/// Runs the replay in virtual time. Pure: no I/O, no clocks.
pub fn simulate(spec: &ReplaySpec, workload: Workload) -> Result<sim::Simulated> {
    if aic_build::needs_prepare(spec) {
        return Err(Error::runtime(
            "AIC timing tables are not built: call dynosim::prepare on the spec first",
        ));
    }
    sim::simulate(spec, workload)
}

/// Runs the replay with time from the caller's clock (e.g. the wall clock of a live replay)
/// until it ends or `cancel` is set; a cancelled run reports what finished.
pub fn simulate_with(
    spec: &ReplaySpec,
    workload: Workload,
    clock: &mut dyn sim::Clock,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<sim::Simulated> {
    sim::simulate_with(spec, workload, clock, cancel)
}

/// [`simulate_with`], recording or publishing what `observers` ask for (the HTML report's
/// time series, a progress counter).
pub fn simulate_observed(
    spec: &ReplaySpec,
    workload: Workload,
    clock: &mut dyn sim::Clock,
    cancel: &std::sync::atomic::AtomicBool,
    observers: &sim::Observers,
) -> Result<sim::Simulated> {
    sim::simulate_observed(spec, workload, clock, cancel, observers)
}

/// [`simulate_observed`], handing captured per-request records to `records` as the run
/// settles them (arrival order), so that a caller can write them while the run goes on, with
/// the collector on the thread `collector_thread` says (the outcome is the same).
pub fn simulate_streaming(
    spec: &ReplaySpec,
    workload: Workload,
    clock: &mut dyn sim::Clock,
    cancel: &std::sync::atomic::AtomicBool,
    observers: &sim::Observers,
    records: Option<Box<dyn report::RecordSink>>,
    collector_thread: sim::CollectorThread,
) -> Result<sim::Simulated> {
    sim::simulate_streaming(
        spec,
        workload,
        clock,
        cancel,
        observers,
        records,
        collector_thread,
    )
}

/// [`simulate`], stopping with a runtime error once another thread sets `cancel`.
pub fn simulate_cancellable(
    spec: &ReplaySpec,
    workload: Workload,
    cancel: &std::sync::atomic::AtomicBool,
) -> Result<sim::Simulated> {
    sim::simulate_cancellable(spec, workload, cancel)
}
