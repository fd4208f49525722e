//! The report: what the deployment's users would see.
//!
//! INTERFACE used by the simulator: the simulator feeds a [`Collector`] with request lifecycle
//! events in virtual time, then calls [`Collector::finish`] with the run facts only it knows
//! (worker seconds, GPUs, wall time) to get the [`Report`] and the per-request records.
//! Definitions: `shared/spec/frontend.md` §3.

pub mod collector;

pub use collector::{Collector, RequestRecord, RunFacts};

/// The report: every key of frontend.md §3.1, in the reference's (Rust dict) key order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// (key, value) in the reference's dict order.
    pub entries: Vec<(&'static str, Value)>,
}

/// A report value: the reference emits ints for counts and floats for the rest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
}

impl Report {
    pub fn get(&self, key: &str) -> Option<Value> {
        self.entries.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}
