//! The virtual-time simulation: event loop, arrival drivers, topologies.

use crate::config::ReplaySpec;
use crate::error::{Error, Result};
use crate::report::{Report, RequestRecord};
use crate::workload::Workload;

/// A finished simulation, waiting for the caller's wall-time measurement to become a report.
#[derive(Debug)]
pub struct Simulated {}

impl Simulated {
    /// The report (with `wall_time_ms` as measured by the caller) and the per-request records
    /// (empty unless the spec asked for them), sorted by arrival time.
    pub fn into_report(self, wall_time_ms: f64) -> (Report, Vec<RequestRecord>) {
        let _ = wall_time_ms;
        todo!()
    }
}

pub fn load_workload(spec: &ReplaySpec) -> Result<Workload> {
    let _ = spec;
    Err(Error::usage("workload loading is not implemented yet"))
}

pub fn simulate(spec: &ReplaySpec, workload: Workload) -> Result<Simulated> {
    let _ = (spec, workload);
    Err(Error::runtime("simulation is not implemented yet"))
}
