//! Reading or generating the workload a validated spec names: the one place that maps a
//! trace format to its reader.

use super::{agentic, applied_compute, dynamo_trace, mooncake, synthetic, PromptMode, Workload};
use crate::config::{ArrivalMode, ReplaySpec, TraceFormat, WorkloadSpec};
use crate::error::{Error, Result};

/// Reads or generates the workload named by the spec.
pub fn load(spec: &ReplaySpec) -> Result<Workload> {
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
                TraceFormat::Mooncake => mooncake::read_mooncake(single_file()?, trace.block_size),
                TraceFormat::MooncakeDelta => {
                    let mut workload = mooncake::read_mooncake(single_file()?, trace.block_size)?;
                    workload.prompts = PromptMode::Cumulative;
                    Ok(workload)
                }
                TraceFormat::AgenticMooncake {
                    expected_block_size,
                } => agentic::read_agentic(single_file()?, trace.block_size, expected_block_size),
                TraceFormat::AppliedComputeAgentic {
                    shared_prefix_ratio,
                    num_prefix_groups,
                } => applied_compute::read_applied_compute(
                    single_file()?,
                    trace.block_size,
                    shared_prefix_ratio,
                    num_prefix_groups,
                ),
                TraceFormat::Dynamo {
                    expected_block_size,
                } => {
                    let loaded = dynamo_trace::read_dynamo(&trace.files, expected_block_size)?;
                    if loaded.agentic && spec.deployment.is_disaggregated() {
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
        WorkloadSpec::Synthetic(synthetic) => synthetic::generate(synthetic),
    }
}
