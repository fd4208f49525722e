//! The workers: engine arguments parsed, the topology they describe, and the checks of the
//! aggregated pool or of the prefill and decode pools, giving a typed [`Deployment`].
//!
//! INTERFACE
//! - [`ParsedEngines`], [`ReplayOptions::parse_engines`]: the three engine-args flags, parsed.
//! - [`ReplayOptions::aggregated_worker_count`]: the three worker counts' signs, checked
//!   first; the aggregated count.
//! - [`Workers`], [`ReplayOptions::workers`]: which flags go together, whether disaggregated,
//!   and the router mode.
//! - [`ReplayOptions::mode_and_deployment`]: the replay mode, then the pools after their
//!   checks in the reference's order, then online replay's limits on the workers.

use super::checks::{flag_error, non_negative, replay_kind, Choices};
use super::{ReplayOptions, MAX_ENGINE_RANKS};
use crate::config::{
    Deployment, EngineArgs, EngineType, PoolSpec, ReplayMode, RouterMode, WorkerType,
};
use crate::error::Result;

/// The engine arguments given to the replay, parsed (step 10 of the front).
pub(super) struct ParsedEngines {
    pub(super) aggregated: Option<EngineArgs>,
    pub(super) prefill: Option<EngineArgs>,
    pub(super) decode: Option<EngineArgs>,
}

/// The workers as a spec builder has them before its workload's checks: the engine
/// arguments, whether they make prefill and decode pools, the router mode and the aggregated
/// worker count.
pub(super) struct Workers {
    pub(super) engines: ParsedEngines,
    pub(super) disaggregated: bool,
    pub(super) router_mode: RouterMode,
    pub(super) num_workers: usize,
}

impl ReplayOptions {
    /// The worker counts must not be negative (checked before anything else); the aggregated
    /// count.
    pub(super) fn aggregated_worker_count(&self) -> Result<usize> {
        let num_workers = non_negative("--num-workers", self.num_workers)?;
        non_negative("--num-prefill-workers", self.num_prefill_workers)?;
        non_negative("--num-decode-workers", self.num_decode_workers)?;
        Ok(num_workers)
    }

    /// The worker topology's checks, then the router mode's.
    pub(super) fn workers(
        &self,
        choices: &Choices,
        engines: ParsedEngines,
        num_workers: usize,
    ) -> Result<Workers> {
        let disaggregated = self.check_worker_topology(choices, &engines)?;
        Ok(Workers {
            engines,
            disaggregated,
            router_mode: choices.router_mode.clone()?,
            num_workers,
        })
    }

    pub(super) fn parse_engines(&self) -> Result<ParsedEngines> {
        let parse = |flag: &str, text: &Option<String>| {
            text.as_deref()
                .map(|text| EngineArgs::from_json_or_file(flag, text))
                .transpose()
        };
        Ok(ParsedEngines {
            aggregated: parse("--extra-engine-args", &self.extra_engine_args)?,
            prefill: parse("--prefill-engine-args", &self.prefill_engine_args)?,
            decode: parse("--decode-engine-args", &self.decode_engine_args)?,
        })
    }

    /// Which workers the engine arguments describe: true for disaggregated prefill/decode
    /// pools, after the reference's pairing rules.
    fn check_worker_topology(&self, choices: &Choices, engines: &ParsedEngines) -> Result<bool> {
        let has_disagg_args = engines.prefill.is_some() || engines.decode.is_some();
        if engines.aggregated.is_some() && has_disagg_args {
            return Err(flag_error(
                "--extra-engine-args",
                "extra_engine_args cannot be combined with prefill_engine_args/decode_engine_args",
            ));
        }
        match (&engines.prefill, &engines.decode) {
            (None, None) => {
                if self.num_prefill_workers != 1 || self.num_decode_workers != 1 {
                    let flag = if self.num_prefill_workers != 1 {
                        "--num-prefill-workers"
                    } else {
                        "--num-decode-workers"
                    };
                    return Err(flag_error(
                        flag,
                        "num_prefill_workers and num_decode_workers are only used for disagg \
                         replay; use num_workers for aggregated replay",
                    ));
                }
                Ok(false)
            }
            (Some(_), Some(_)) => {
                if self.num_workers != 1 {
                    return Err(flag_error(
                        "--num-workers",
                        "num_workers is only used for aggregated replay; use \
                         num_prefill_workers and num_decode_workers for disagg replay",
                    ));
                }
                if choices.is_online() {
                    return Err(flag_error(
                        "--replay-mode",
                        "disagg replay only supports replay_mode='offline'",
                    ));
                }
                Ok(true)
            }
            _ => Err(flag_error(
                if engines.prefill.is_some() {
                    "--prefill-engine-args"
                } else {
                    "--decode-engine-args"
                },
                "prefill_engine_args and decode_engine_args must be provided together",
            )),
        }
    }

    /// The replay mode and the workers, as both builders check them: the mode, then the
    /// workers' checks, then online replay's limits on the workers.
    pub(super) fn mode_and_deployment(
        &self,
        choices: &Choices,
        workers: Workers,
        closed_loop: bool,
    ) -> Result<(ReplayMode, Deployment)> {
        let replay_mode = self.replay_mode(choices)?;
        let deployment = self.deployment(choices, workers, closed_loop)?;
        self.check_online(replay_mode, &deployment.generating().engine)?;
        Ok((replay_mode, deployment))
    }

    /// The workers: disaggregated pools after their checks, or the aggregated workers after
    /// theirs.
    fn deployment(
        &self,
        choices: &Choices,
        workers: Workers,
        closed_loop: bool,
    ) -> Result<Deployment> {
        let Workers {
            engines,
            disaggregated,
            router_mode,
            num_workers,
        } = workers;
        if disaggregated {
            return self.check_disaggregated_workers(engines, closed_loop);
        }
        let engine = engines.aggregated.unwrap_or_default();
        // Online, the reference's live KV router also serves a single target; so does the
        // multi-worker loop a planner always runs (its workers come and go).
        let single_target_kv_refused = !choices.is_online() && self.planner_config.is_none();
        self.check_aggregated_workers(
            router_mode,
            num_workers,
            &engine,
            closed_loop,
            single_target_kv_refused,
        )?;
        Ok(Deployment::Aggregated(PoolSpec {
            engine,
            workers: num_workers,
        }))
    }

    /// The checks on the aggregated workers: the KV router needs two targets, then the worker
    /// count, then the worker role.
    pub(super) fn check_aggregated_workers(
        &self,
        router_mode: RouterMode,
        num_workers: usize,
        engine: &EngineArgs,
        closed_loop: bool,
        single_target_kv_refused: bool,
    ) -> Result<()> {
        if single_target_kv_refused
            && router_mode == RouterMode::KvRouter
            && num_workers.saturating_mul(engine.dp_size) <= 1
        {
            return Err(flag_error(
                "--router-mode",
                "offline replay only supports router_mode=kv_router with more than one \
                 worker/DP-rank target",
            ));
        }
        let mode = replay_kind(closed_loop);
        if num_workers == 0 {
            return Err(flag_error(
                "--num-workers",
                format!("{mode} requires num_workers >= 1"),
            ));
        }
        if engine.worker_type != WorkerType::Aggregated {
            return Err(flag_error(
                "--extra-engine-args",
                format!(
                    "{mode} only supports aggregated workers, got {:?}",
                    engine.worker_type
                ),
            ));
        }
        if engine.dp_size > MAX_ENGINE_RANKS {
            return Err(flag_error(
                "--extra-engine-args",
                format!(
                    "dp_size: {} is more than the {MAX_ENGINE_RANKS} engine ranks dynosim \
                     simulates",
                    engine.dp_size
                ),
            ));
        }
        let ranks = num_workers.saturating_mul(engine.dp_size);
        if ranks > MAX_ENGINE_RANKS {
            let detail = if engine.dp_size == 1 {
                format!("{num_workers} workers")
            } else {
                format!(
                    "{num_workers} workers of dp_size {} are {ranks} engine ranks,",
                    engine.dp_size
                )
            };
            return Err(flag_error(
                "--num-workers",
                format!("{detail} more than the {MAX_ENGINE_RANKS} engine ranks dynosim simulates"),
            ));
        }
        Ok(())
    }

    /// The checks on disaggregated pools (the reference's order), giving the two pools.
    pub(super) fn check_disaggregated_workers(
        &self,
        engines: ParsedEngines,
        closed_loop: bool,
    ) -> Result<Deployment> {
        let mode = replay_kind(closed_loop);
        let (Some(prefill), Some(decode)) = (engines.prefill, engines.decode) else {
            unreachable!("the topology check pairs the two")
        };
        let num_prefill_workers = non_negative("--num-prefill-workers", self.num_prefill_workers)?;
        let num_decode_workers = non_negative("--num-decode-workers", self.num_decode_workers)?;
        if prefill.engine_type == EngineType::Trtllm || decode.engine_type == EngineType::Trtllm {
            return Err(flag_error(
                "--prefill-engine-args",
                format!("{mode} disaggregation does not support TRT-LLM"),
            ));
        }
        if prefill.engine_type != decode.engine_type {
            return Err(flag_error(
                "--decode-engine-args",
                format!(
                    "{mode} disaggregation requires matching prefill/decode engine_type, got \
                     {:?} and {:?}",
                    prefill.engine_type, decode.engine_type
                ),
            ));
        }
        if num_prefill_workers == 0 {
            return Err(flag_error(
                "--num-prefill-workers",
                format!("{mode} requires num_prefill_workers >= 1"),
            ));
        }
        if num_decode_workers == 0 {
            return Err(flag_error(
                "--num-decode-workers",
                format!("{mode} requires num_decode_workers >= 1"),
            ));
        }
        for (flag, count) in [
            ("--num-prefill-workers", num_prefill_workers),
            ("--num-decode-workers", num_decode_workers),
        ] {
            if count > MAX_ENGINE_RANKS {
                return Err(flag_error(
                    flag,
                    format!(
                        "{count} workers, more than the {MAX_ENGINE_RANKS} engine ranks dynosim \
                         simulates per pool"
                    ),
                ));
            }
        }
        if prefill.worker_type != WorkerType::Prefill {
            return Err(flag_error(
                "--prefill-engine-args",
                format!(
                    "{mode} requires prefill_engine_args.worker_type=prefill, got {:?}",
                    prefill.worker_type
                ),
            ));
        }
        if decode.worker_type != WorkerType::Decode {
            return Err(flag_error(
                "--decode-engine-args",
                format!(
                    "{mode} requires decode_engine_args.worker_type=decode, got {:?}",
                    decode.worker_type
                ),
            ));
        }
        if prefill.dp_size != 1 || decode.dp_size != 1 {
            return Err(flag_error(
                if prefill.dp_size != 1 {
                    "--prefill-engine-args"
                } else {
                    "--decode-engine-args"
                },
                format!(
                    "offline disaggregated replay does not support attention DP; prefill/decode \
                     dp_size must both be 1 (got prefill_dp_size={}, decode_dp_size={})",
                    prefill.dp_size, decode.dp_size
                ),
            ));
        }
        if prefill.block_size != decode.block_size {
            return Err(flag_error(
                "--decode-engine-args",
                format!(
                    "{mode} requires matching prefill/decode block_size, got {} and {}",
                    prefill.block_size, decode.block_size
                ),
            ));
        }
        // The reference fails at the first handoff; the transfer time would be infinite.
        if prefill.kv_transfer_bandwidth == Some(0.0) {
            return Err(flag_error(
                "--prefill-engine-args",
                "invalid handoff transfer bandwidth 0 (kv_transfer_bandwidth must be positive)",
            ));
        }
        Ok(Deployment::Disaggregated {
            prefill: PoolSpec {
                engine: prefill,
                workers: num_prefill_workers,
            },
            decode: PoolSpec {
                engine: decode,
                workers: num_decode_workers,
            },
        })
    }

    /// The reference's limits of online replay that the mode check itself does not cover
    /// (disaggregation and the time cap are refused where those options are checked).
    fn check_online(&self, mode: ReplayMode, engine: &EngineArgs) -> Result<()> {
        if !matches!(mode, ReplayMode::Online { .. }) {
            return Ok(());
        }
        if engine.dp_size != 1 {
            return Err(flag_error(
                "--extra-engine-args",
                format!(
                    "online replay only supports data_parallel_size=1, got {}",
                    engine.dp_size
                ),
            ));
        }
        Ok(())
    }
}
