//! dynosim: replays one LLM-serving workload through one simulated serving deployment in
//! virtual time and reports what that deployment's users would see.
//!
//! The crate is pure: a validated [`ReplaySpec`] goes in, a [`Report`] (and optionally
//! per-request records) comes out. No printing, no wall clock inside the simulation, no globals.
//! See `docs/ARCHITECTURE.md` for the code map and invariants.

pub mod aic;
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
pub use sim::{Simulated, Simulation};
pub use workload::Workload;

/// Reads (or generates) the workload a spec names. Kept apart from [`Simulation::run`]
/// because the report's `wall_time_ms` measures the simulation only, not trace loading.
pub fn load_workload(spec: &ReplaySpec) -> Result<Workload> {
    workload::load(spec)
}
