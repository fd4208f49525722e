//! The replay front's checks: which inputs go together (a trace or a synthetic workload, its
//! load controller, the length-spread flags, the outputs each input allows).
//!
//! INTERFACE
//! - [`ReplayOptions::check_front`]: frontend.md §1.3, steps 1–9.
//! - [`ReplayOptions::using_synthetic`]: whether any synthetic flag is away from its default.

use super::checks::{flag_error, usage, Choices, TraceDialect, SYNTHETIC_LOAD_CONTROL_API_MESSAGE};
use super::ReplayOptions;
use crate::error::Result;

impl ReplayOptions {
    /// Whether the synthetic generator is asked for (any synthetic flag away from its default).
    pub(super) fn using_synthetic(&self) -> bool {
        self.input_tokens.is_some()
            || self.output_tokens.is_some()
            || self.request_count.is_some()
            || self.turns_per_session != 1
            || self.shared_prefix_ratio != 0.0
            || self.num_prefix_groups != 0
            || self.inter_turn_delay_ms != 0.0
    }

    /// The replay front's checks of which inputs go together (frontend.md §1.3, steps 1–9).
    pub(super) fn check_front(&self, choices: &Choices, using_trace_file: bool) -> Result<()> {
        let using_synthetic = self.using_synthetic();
        let dynamo = choices.trace_format_is(TraceDialect::Dynamo);
        if dynamo && !using_trace_file {
            return Err(
                usage("--trace-format=dynamo requires at least one trace file")
                    .with_api_message("trace_format='dynamo' requires at least one trace file"),
            );
        }
        if !dynamo && self.trace_files.len() > 1 {
            return Err(usage(format!(
                "--trace-format={} requires exactly one trace file",
                self.trace_format
            ))
            .with_api_message(format!(
                "trace_format='{}' requires exactly one trace file, got {}",
                self.trace_format,
                self.trace_files.len()
            )));
        }
        if using_trace_file == using_synthetic {
            return Err(usage(
                "provide either trace_file or all of --input-tokens/--output-tokens/--request-count",
            )
            .with_api_message(
                "provide either trace_files or all of input_tokens/output_tokens/request_count",
            ));
        }
        if using_synthetic {
            if self.input_tokens.is_none()
                || self.output_tokens.is_none()
                || self.request_count.is_none()
            {
                return Err(usage(
                    "synthetic replay requires --input-tokens, --output-tokens, and --request-count",
                )
                .with_api_message(
                    "synthetic replay requires input_tokens, output_tokens, and request_count",
                ));
            }
            let load_controllers = [
                self.replay_concurrency.is_some(),
                self.request_rate.is_some(),
                self.arrival_interval_ms.is_some(),
            ];
            if load_controllers.iter().filter(|&&given| given).count() != 1 {
                return Err(usage(
                    "synthetic replay requires exactly one of --replay-concurrency, \
                     --request-rate, or --arrival-interval-ms",
                )
                .with_api_message(SYNTHETIC_LOAD_CONTROL_API_MESSAGE));
            }
        } else if self.request_rate.is_some() || self.arrival_interval_ms.is_some() {
            return Err(usage(
                "--request-rate and --arrival-interval-ms only apply to synthetic replay",
            ));
        }
        self.check_length_spread_flags(using_synthetic)?;
        if using_trace_file
            && choices.trace_format_is(TraceDialect::AppliedComputeAgentic)
            && self.replay_concurrency.is_none()
        {
            return Err(usage(
                "--trace-format=applied_compute_agentic requires --replay-concurrency because \
                 the source traces do not include first-turn timestamps",
            )
            .with_api_message(
                "trace_format='applied_compute_agentic' requires replay_concurrency because the \
                 source traces do not include first-turn timestamps",
            ));
        }
        // The reference refuses per-request records with a planner only because its planner
        // adapter cannot return them; dynosim gives them (docs/differences.md).
        if self.report_jsonl.is_some() && !using_trace_file {
            return Err(usage(
                "--report-jsonl currently only supports trace-file replay",
            ));
        }
        // The reference takes a time cap only for an offline trace replay without a planner;
        // dynosim caps every run (docs/differences.md).
        if self.max_sim_time_seconds.is_some() && self.max_sim_time_ms.is_some() {
            return Err(usage(
                "--max-sim-time-seconds and max_sim_time_ms cannot both be set; give one cap",
            ));
        }
        Ok(())
    }

    /// Which length-spread flags go together: the stddevs and the range ratio exclude each
    /// other, all need a synthetic workload, and the seed needs one of them.
    pub(super) fn check_length_spread_flags(&self, using_synthetic: bool) -> Result<()> {
        let stddev_flag = if self.input_tokens_stddev.is_some() {
            Some("--input-tokens-stddev")
        } else if self.output_tokens_stddev.is_some() {
            Some("--output-tokens-stddev")
        } else {
            None
        };
        let given: Vec<&str> = [
            stddev_flag,
            self.random_range_ratio.map(|_| "--random-range-ratio"),
            self.length_seed.map(|_| "--length-seed"),
        ]
        .into_iter()
        .flatten()
        .collect();
        let Some(&first) = given.first() else {
            return Ok(());
        };
        if !using_synthetic {
            return Err(flag_error(
                first,
                "length spreads only apply to synthetic replay (--input-tokens)",
            ));
        }
        if let (Some(stddev_flag), Some(_)) = (stddev_flag, self.random_range_ratio) {
            let python = |flag: &str| flag.trim_start_matches("--").replace('-', "_");
            return Err(usage(format!(
                "{stddev_flag} and --random-range-ratio cannot both be set: give AIPerf's \
                 normal spread or vLLM's uniform range, not both"
            ))
            .with_api_message(format!(
                "{} and random_range_ratio cannot both be set: give AIPerf's normal spread or \
                 vLLM's uniform range, not both",
                python(stddev_flag)
            )));
        }
        if stddev_flag.is_none() && self.random_range_ratio.is_none() {
            return Err(flag_error(
                "--length-seed",
                "length_seed needs a length spread: --input-tokens-stddev, \
                 --output-tokens-stddev or --random-range-ratio",
            )
            .with_api_message(
                "length_seed needs a length spread: input_tokens_stddev, output_tokens_stddev \
                 or random_range_ratio",
            ));
        }
        Ok(())
    }
}
