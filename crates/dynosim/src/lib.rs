//! dynosim: replays one LLM-serving workload through one simulated serving deployment in
//! virtual time and reports what that deployment's users would see.
//!
//! The crate is pure: a validated [`ReplaySpec`] goes in, a [`Report`] (and optionally
//! per-request records) comes out. No printing, no wall clock inside the simulation, no globals.
//! See `docs/ARCHITECTURE.md` for the code map and invariants.

pub mod config;
pub mod engine;
pub mod error;
pub mod report;
pub mod router;
pub mod sim;
pub mod tokens;
pub mod workload;

pub use error::{Error, Result};
