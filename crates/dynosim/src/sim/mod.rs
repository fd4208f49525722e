//! The virtual-time simulation: arrival driver, event loop, topology.
//!
//! One clock (`now_ms`, f64 milliseconds) and one queue of pass completions. Each worker runs
//! its own back-to-back forward passes; a pass is decided eagerly when it starts and its
//! outcome (tokens, terminal states) is applied when it completes. At one timestamp the loop
//! settles, in this order and until nothing changes: pass completions (in completion-queue
//! order), releases of ready arrivals (each routed before the next), then pass starts on idle
//! workers in ascending worker id. This is the reference's ordering of simultaneous events.

mod aggregated;
mod common;
mod disaggregated;
pub mod driver;

use crate::config::{ArrivalMode, ReplaySpec, TraceFormat, WorkloadSpec};
use crate::error::{Error, Result};
use crate::report::{Collector, LazyRecords, Report, RequestRecord, RunFacts};
use crate::workload::{self, Workload};
use aggregated::Aggregated;
use disaggregated::Disaggregated;
use driver::Driver;

/// Reads or generates the workload named by the spec.
pub fn load_workload(spec: &ReplaySpec) -> Result<Workload> {
    match &spec.workload {
        WorkloadSpec::Trace(trace) => {
            let single_file = || match trace.files.as_slice() {
                [path] => Ok(path.as_path()),
                files => Err(Error::usage(format!(
                    "--trace-format requires exactly one trace file for this format, got {}",
                    files.len()
                ))),
            };
            match trace.format {
                TraceFormat::Mooncake => {
                    workload::mooncake::read_mooncake(single_file()?, trace.block_size)
                }
                TraceFormat::MooncakeDelta => {
                    let mut workload =
                        workload::mooncake::read_mooncake(single_file()?, trace.block_size)?;
                    workload.prompts = workload::PromptMode::Cumulative;
                    Ok(workload)
                }
                TraceFormat::AgenticMooncake {
                    expected_block_size,
                } => workload::agentic::read_agentic(
                    single_file()?,
                    trace.block_size,
                    expected_block_size,
                ),
                TraceFormat::AppliedComputeAgentic {
                    shared_prefix_ratio,
                    num_prefix_groups,
                } => workload::applied_compute::read_applied_compute(
                    single_file()?,
                    trace.block_size,
                    shared_prefix_ratio,
                    num_prefix_groups,
                ),
                TraceFormat::Dynamo {
                    expected_block_size,
                } => {
                    let loaded =
                        workload::dynamo_trace::read_dynamo(&trace.files, expected_block_size)?;
                    if loaded.agentic && spec.disaggregation.is_some() {
                        return Err(Error::usage(
                            "agentic Dynamo request traces are not supported for disaggregated \
                             replay (--prefill-engine-args; the trace's records carry \
                             agent_context)",
                        ));
                    }
                    if loaded.agentic && matches!(spec.arrivals, ArrivalMode::Concurrency { .. }) {
                        return Err(Error::usage(
                            "agentic Dynamo request traces are not supported with replay_concurrency \
                             (--replay-concurrency; the trace's records carry agent_context)",
                        ));
                    }
                    Ok(loaded.workload)
                }
            }
        }
        WorkloadSpec::Synthetic(synthetic) => workload::synthetic::generate(synthetic),
    }
}

/// Runs the whole replay in virtual time.
pub fn simulate(spec: &ReplaySpec, workload: Workload) -> Result<Simulated> {
    let driver = Driver::new(workload, spec.arrivals)?;
    let (collector, facts) = if spec.disaggregation.is_some() {
        let mut sim = Disaggregated::new(spec, driver);
        sim.run()?;
        sim.finish()
    } else {
        let mut sim = Aggregated::new(spec, driver);
        sim.run()?;
        sim.finish()
    };
    Ok(Simulated { collector, facts })
}

/// A finished simulation, waiting for the caller's wall-time measurement to become a report.
#[derive(Debug)]
pub struct Simulated {
    collector: Collector,
    facts: RunFacts,
}

impl Simulated {
    /// The report (with `wall_time_ms` as measured by the caller) and the per-request records
    /// (empty unless the spec asked for them), sorted by arrival time.
    pub fn into_report(self, wall_time_ms: f64) -> (Report, Vec<RequestRecord>) {
        self.collector.finish(RunFacts {
            wall_time_ms,
            ..self.facts
        })
    }

    /// Like [`Simulated::into_report`], with records built one at a time as they are read
    /// (for streaming them to a file without holding them all).
    pub fn into_report_lazily(self, wall_time_ms: f64) -> (Report, LazyRecords) {
        self.collector.finish_lazily(RunFacts {
            wall_time_ms,
            ..self.facts
        })
    }
}
