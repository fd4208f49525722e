//! A trace replay's spec: the trace format with the settings only it takes, the block size,
//! and the trace checks in the reference's order around the shared groups.
//!
//! INTERFACE
//! - [`ReplayOptions::into_trace_spec`]: the spec of a replay of trace files.

use super::checks::{arrival_mode, flag_error, non_negative, Choices, TraceDialect};
use super::deployment::ParsedEngines;
use super::ReplayOptions;
use crate::config::json_fields::show_f64;
use crate::config::{ReplayMode, ReplaySpec, RouterConfig, TraceFormat, TraceSpec, WorkloadSpec};
use crate::error::Result;

/// Tokens per trace `hash_id` when `--trace-block-size` is not given.
pub(super) const DEFAULT_TRACE_BLOCK_SIZE: u32 = 512;

impl ReplayOptions {
    pub(super) fn into_trace_spec(
        self,
        choices: &Choices,
        engines: ParsedEngines,
        router_config: Option<RouterConfig>,
    ) -> Result<ReplaySpec> {
        let num_workers = self.aggregated_worker_count()?;
        let trace_block_size = self
            .trace_block_size
            .map(|size| non_negative("--trace-block-size", size))
            .transpose()?;
        non_negative("--trace-num-prefix-groups", self.trace_num_prefix_groups)?;

        let workers = self.workers(choices, engines, num_workers)?;
        let router_mode = workers.router_mode;
        let dialect = choices.trace_format.clone()?;
        if dialect != TraceDialect::Dynamo && self.trace_files.len() != 1 {
            return Err(flag_error(
                "--trace-format",
                format!(
                    "trace_format='{}' requires exactly one trace file, got {}",
                    self.trace_format,
                    self.trace_files.len()
                ),
            ));
        }
        let max_sim_time_ms = self.max_sim_time_ms()?;
        let sla = self.sla()?;
        let concurrency = self.concurrency_limit()?;
        let (replay_mode, deployment) =
            self.mode_and_deployment(choices, workers, concurrency.is_some())?;
        if dialect == TraceDialect::MooncakeDelta && replay_mode != ReplayMode::Offline {
            return Err(flag_error(
                "--trace-format",
                "mooncake-delta trace format is not supported for online replay",
            ));
        }
        if deployment.is_disaggregated() {
            let unsupported = match dialect {
                TraceDialect::AgenticMooncake => Some("agentic_mooncake"),
                TraceDialect::MooncakeDelta => Some("mooncake-delta"),
                _ => None,
            };
            if let Some(name) = unsupported {
                return Err(flag_error(
                    "--trace-format",
                    format!("{name} trace format is not supported for disaggregated replay"),
                ));
            }
        }

        let block_size = match trace_block_size {
            None => DEFAULT_TRACE_BLOCK_SIZE,
            Some(0) => {
                return Err(flag_error(
                    "--trace-block-size",
                    "trace_block_size must be greater than 0",
                ))
            }
            Some(size) => u32::try_from(size).map_err(|_| {
                flag_error(
                    "--trace-block-size",
                    format!("trace_block_size is too large, got {size}"),
                )
            })?,
        };
        if dialect == TraceDialect::AgenticMooncake && concurrency.is_some() {
            return Err(flag_error(
                "--replay-concurrency",
                "agentic_mooncake trace format is not supported with replay_concurrency",
            ));
        }
        let trace_num_prefix_groups =
            non_negative("--trace-num-prefix-groups", self.trace_num_prefix_groups)?;
        let format = match dialect {
            TraceDialect::Mooncake => TraceFormat::Mooncake,
            TraceDialect::MooncakeDelta => TraceFormat::MooncakeDelta,
            TraceDialect::AgenticMooncake => TraceFormat::AgenticMooncake {
                expected_block_size: trace_block_size.map(|_| block_size),
            },
            TraceDialect::AppliedComputeAgentic => {
                // Only this format uses the two flags; the others ignore them, as the
                // reference does (even an out-of-range ratio).
                if !(0.0..=1.0).contains(&self.trace_shared_prefix_ratio) {
                    return Err(flag_error(
                        "--trace-shared-prefix-ratio",
                        format!(
                            "shared_prefix_ratio must be between 0.0 and 1.0, got {}",
                            show_f64(self.trace_shared_prefix_ratio)
                        ),
                    ));
                }
                TraceFormat::AppliedComputeAgentic {
                    shared_prefix_ratio: self.trace_shared_prefix_ratio,
                    num_prefix_groups: trace_num_prefix_groups,
                }
            }
            TraceDialect::Dynamo => TraceFormat::Dynamo {
                expected_block_size: trace_block_size.map(|_| block_size),
            },
        };
        // The reference checks the speed-up ratio only when it uses it: open-loop arrivals.
        // (It does so after reading the trace, so a broken trace file is reported first there.)
        let arrivals = arrival_mode(concurrency, || self.check_speedup("ratio"))?;
        let router_config = self.finish_router_config(router_mode, router_config)?;
        let capture_requests = self.report_jsonl.is_some();
        let workload = WorkloadSpec::Trace(TraceSpec {
            files: self.trace_files,
            format,
            block_size,
        });
        Ok(ReplaySpec {
            workload,
            deployment,
            router_mode,
            router_config,
            arrivals,
            replay_mode,
            max_sim_time_ms,
            sla,
            capture_requests,
            planner: None,
        })
    }
}
