//! A synthetic replay's spec: sizes, the arrival process, sessions and shared prefixes, the
//! length spread, and the synthetic checks in the reference's order around the shared groups.
//!
//! INTERFACE
//! - [`ReplayOptions::into_synthetic_spec`]: the spec of a generated workload.

use super::checks::SYNTHETIC_LOAD_CONTROL_API_MESSAGE;
use super::checks::{arrival_mode, flag_error, non_negative, usage, Choices};
use super::deployment::ParsedEngines;
use super::{ReplayOptions, DEFAULT_LENGTH_SEED};
use crate::config::json_fields::show_f64;
use crate::config::{
    compact_f64, ArrivalProcess, LengthSpread, ReplaySpec, RouterConfig, SyntheticSpec,
    WorkloadSpec, MAX_VIRTUAL_TIME_MS,
};
use crate::error::Result;

impl ReplayOptions {
    pub(super) fn into_synthetic_spec(
        self,
        choices: &Choices,
        engines: ParsedEngines,
        router_config: Option<RouterConfig>,
    ) -> Result<ReplaySpec> {
        // The front guarantees all three are present.
        let input_tokens = non_negative("--input-tokens", self.input_tokens.unwrap_or(0))?;
        let output_tokens = non_negative("--output-tokens", self.output_tokens.unwrap_or(0))?;
        let request_count = non_negative("--request-count", self.request_count.unwrap_or(0))?;
        let num_workers = self.aggregated_worker_count()?;
        let arrival_seed = non_negative("--arrival-seed", self.arrival_seed)? as u64;
        let turns_per_session = non_negative("--turns-per-session", self.turns_per_session)?;
        let num_prefix_groups = non_negative("--num-prefix-groups", self.num_prefix_groups)?;

        let sla = self.sla()?;
        let workers = self.workers(choices, engines, num_workers)?;
        let router_mode = workers.router_mode;
        let concurrency = self.concurrency_limit()?;
        let arrival_process = match (concurrency, self.request_rate, self.arrival_interval_ms) {
            (Some(_), _, _) => None,
            (None, Some(rate), _) => {
                if !(rate.is_finite() && rate > 0.0) {
                    return Err(flag_error(
                        "--request-rate",
                        format!(
                            "request_rate must be a finite positive number, got {}",
                            show_f64(rate)
                        ),
                    ));
                }
                if 1000.0 / rate > MAX_VIRTUAL_TIME_MS {
                    return Err(flag_error(
                        "--request-rate",
                        format!(
                            "request_rate {} means {} ms between arrivals on average, beyond \
                             the simulator's horizon of {MAX_VIRTUAL_TIME_MS:e} ms (about 31.7 \
                             years)",
                            compact_f64(rate),
                            compact_f64(1000.0 / rate)
                        ),
                    ));
                }
                Some(ArrivalProcess::Poisson {
                    rate,
                    seed: arrival_seed,
                })
            }
            (None, None, Some(interval_ms)) => {
                if !(interval_ms.is_finite() && interval_ms >= 0.0) {
                    return Err(flag_error(
                        "--arrival-interval-ms",
                        format!(
                            "arrival_interval_ms must be a finite non-negative number, got {}",
                            show_f64(interval_ms)
                        ),
                    ));
                }
                if interval_ms > MAX_VIRTUAL_TIME_MS {
                    return Err(flag_error(
                        "--arrival-interval-ms",
                        format!(
                            "arrival_interval_ms {} is beyond the simulator's horizon of \
                             {MAX_VIRTUAL_TIME_MS:e} ms (about 31.7 years)",
                            compact_f64(interval_ms)
                        ),
                    ));
                }
                Some(ArrivalProcess::Interval { interval_ms })
            }
            // The front requires exactly one load controller.
            (None, None, None) => {
                return Err(usage(
                    "synthetic replay requires exactly one of --replay-concurrency, \
                     --request-rate, or --arrival-interval-ms",
                )
                .with_api_message(SYNTHETIC_LOAD_CONTROL_API_MESSAGE))
            }
        };
        for (flag, name, value) in [
            ("--input-tokens", "input_tokens", input_tokens),
            ("--output-tokens", "output_tokens", output_tokens),
            ("--request-count", "request_count", request_count),
        ] {
            if value == 0 {
                return Err(flag_error(flag, format!("{name} must be at least 1")));
            }
        }

        // Sessions, shared prefixes or think time select the session generator, which checks
        // its own settings (and applies the speed-up while building arrivals); otherwise the
        // simple generator ignores them (`--turns-per-session 0` then means 1).
        let uses_sessions = turns_per_session > 1
            || self.shared_prefix_ratio > 0.0
            || num_prefix_groups > 0
            || self.inter_turn_delay_ms > 0.0;
        let mut speedup = None;
        if uses_sessions {
            if turns_per_session == 0 {
                return Err(flag_error(
                    "--turns-per-session",
                    "turns_per_session must be at least 1",
                ));
            }
            if !(self.inter_turn_delay_ms.is_finite() && self.inter_turn_delay_ms >= 0.0) {
                return Err(flag_error(
                    "--inter-turn-delay-ms",
                    format!(
                        "inter_turn_delay_ms must be a finite non-negative number, got {}",
                        show_f64(self.inter_turn_delay_ms)
                    ),
                ));
            }
            if !(0.0..=1.0).contains(&self.shared_prefix_ratio) {
                return Err(flag_error(
                    "--shared-prefix-ratio",
                    format!(
                        "shared_prefix_ratio must be between 0.0 and 1.0, got {}",
                        show_f64(self.shared_prefix_ratio)
                    ),
                ));
            }
            if concurrency.is_none() {
                speedup = Some(self.check_speedup("ratio")?);
            }
        }

        let (replay_mode, deployment) =
            self.mode_and_deployment(choices, workers, concurrency.is_some())?;
        let arrivals = arrival_mode(concurrency, || match speedup {
            Some(speedup) => Ok(speedup),
            None => self.check_speedup("arrival_speedup_ratio"),
        })?;
        let generating = &deployment.generating().engine;
        let engine_block_size = u32::try_from(generating.block_size).map_err(|_| {
            flag_error(
                "--extra-engine-args",
                format!("block_size is too large, got {}", generating.block_size),
            )
        })?;
        // Every synthetic prompt has the same length: one that no engine can ever hold would
        // have every request rejected (or, on SGLang, block the queue forever), after building
        // prompts of that size. Refused before they exist.
        let first_engine = &deployment.entry().engine;
        let kv_tokens = first_engine
            .num_gpu_blocks
            .saturating_mul(first_engine.block_size);
        if input_tokens > kv_tokens {
            return Err(flag_error(
                "--input-tokens",
                format!(
                    "input_tokens {input_tokens} can never be admitted: the KV cache holds \
                     {kv_tokens} tokens (num_gpu_blocks {} x block_size {})",
                    first_engine.num_gpu_blocks, first_engine.block_size
                ),
            ));
        }
        let lengths = self.length_spread(kv_tokens)?;
        let router_config = self.finish_router_config(router_mode, router_config)?;

        let (shared_prefix_ratio, inter_turn_delay_ms) = if uses_sessions {
            (self.shared_prefix_ratio, self.inter_turn_delay_ms)
        } else {
            // The simple generator ignores these (they may be negative or NaN here).
            (0.0, 0.0)
        };
        Ok(ReplaySpec {
            workload: WorkloadSpec::Synthetic(SyntheticSpec {
                input_tokens,
                output_tokens,
                request_count,
                arrival_process,
                turns_per_session: turns_per_session.max(1),
                shared_prefix_ratio,
                num_prefix_groups,
                inter_turn_delay_ms,
                engine_block_size,
                lengths,
            }),
            deployment,
            router_mode,
            router_config,
            arrivals,
            replay_mode,
            max_sim_time_ms: self.max_sim_time_ms()?,
            sla,
            capture_requests: false,
            planner: None,
        })
    }

    /// The synthetic length distribution (the front has checked which flags go together).
    /// `kv_tokens` is the first engine's KV cache in tokens: the most a drawn prompt may be.
    pub(super) fn length_spread(&self, kv_tokens: usize) -> Result<LengthSpread> {
        let seed = match self.length_seed {
            Some(seed) => non_negative("--length-seed", seed)? as u64,
            None => DEFAULT_LENGTH_SEED,
        };
        if let Some(range_ratio) = self.random_range_ratio {
            if !(0.0..=1.0).contains(&range_ratio) {
                return Err(flag_error(
                    "--random-range-ratio",
                    format!(
                        "random_range_ratio must be between 0.0 and 1.0, got {}",
                        show_f64(range_ratio)
                    ),
                ));
            }
            return Ok(LengthSpread::Uniform { range_ratio, seed });
        }
        if self.input_tokens_stddev.is_none() && self.output_tokens_stddev.is_none() {
            return Ok(LengthSpread::Fixed);
        }
        let stddev = |flag: &str, name: &str, value: Option<f64>| {
            let value = value.unwrap_or(0.0);
            if value.is_finite() && value >= 0.0 {
                Ok(value)
            } else {
                Err(flag_error(
                    flag,
                    format!(
                        "{name} must be a finite non-negative number, got {}",
                        show_f64(value)
                    ),
                ))
            }
        };
        let stddevs = [
            stddev(
                "--input-tokens-stddev",
                "input_tokens_stddev",
                self.input_tokens_stddev,
            )?,
            stddev(
                "--output-tokens-stddev",
                "output_tokens_stddev",
                self.output_tokens_stddev,
            )?,
        ];
        // Draws outside [0, KV cache] are drawn again: with a spread wider than the cache most
        // draws would be, and the spread asked for could not be what the run gets.
        if stddevs[0] > kv_tokens as f64 {
            return Err(flag_error(
                "--input-tokens-stddev",
                format!(
                    "input_tokens_stddev {} is wider than the KV cache ({kv_tokens} tokens): \
                     most prompts drawn could never be admitted",
                    show_f64(stddevs[0])
                ),
            ));
        }
        Ok(LengthSpread::Normal {
            input_stddev: stddevs[0],
            output_stddev: stddevs[1],
            max_input_tokens: kv_tokens,
            seed,
        })
    }
}
