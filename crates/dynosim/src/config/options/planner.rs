//! The planner's flags: `--planner-config` against the replay it joins, and its GPU budget
//! against the deployment.
//!
//! INTERFACE
//! - [`ReplayOptions::check_planner`]: step 12, giving the checked [`PlannerSpec`].
//! - [`check_planner_budget`]: the budget holds the smallest deployment.

use super::checks::{flag_error, usage, Choices, ModeName, TraceDialect};
use super::deployment::ParsedEngines;
use super::ReplayOptions;
use crate::config::planner::{PlannerMode, PlannerSpec};
use crate::config::{Deployment, EngineType, ReplaySpec};
use crate::error::Result;

/// A GPU budget whose ceiling cannot hold even the smallest deployment would make the planner
/// ask for zero workers (the reference then panics in its router); refused before the run.
pub(super) fn check_planner_budget(spec: &ReplaySpec, planner: &PlannerSpec) -> Result<()> {
    if planner.max_gpu_budget < 0 {
        return Ok(());
    }
    let min_workers = planner.min_endpoint.max(1) as i64;
    let generating = spec.deployment.generating().engine.gpus_per_worker() as i64;
    let (gpus, what) = match (&spec.deployment, planner.mode) {
        (Deployment::Disaggregated { prefill, .. }, PlannerMode::Disagg) => (
            generating + prefill.engine.gpus_per_worker() as i64,
            "one prefill and one decode worker",
        ),
        _ => (generating, "one worker"),
    };
    if planner.max_gpu_budget < min_workers * gpus {
        return Err(flag_error(
            "--planner-config",
            format!(
                "max_gpu_budget {} cannot hold {} of min_endpoint {} ({} GPUs for {what}): the \
                 planner would scale to zero workers",
                planner.max_gpu_budget,
                if min_workers == 1 {
                    "a deployment"
                } else {
                    "the workers"
                },
                planner.min_endpoint,
                gpus,
            ),
        ));
    }
    Ok(())
}

impl ReplayOptions {
    /// Planner-in-the-loop (step 12): the front's constraints, then the config itself, then
    /// the engine arguments its mode needs.
    pub(super) fn check_planner(
        &self,
        choices: &Choices,
        using_trace_file: bool,
        engines: &ParsedEngines,
    ) -> Result<Option<PlannerSpec>> {
        let Some(config) = &self.planner_config else {
            return Ok(None);
        };
        if choices.replay_mode != Ok(ModeName::Offline) {
            return Err(
                usage("--planner-config only supports --replay-mode=offline")
                    .with_api_message("planner_config replay only supports replay_mode='offline'"),
            );
        }
        if using_trace_file
            && !matches!(
                choices.trace_format,
                Ok(TraceDialect::Mooncake | TraceDialect::Dynamo)
            )
        {
            return Err(
                usage("--planner-config only supports --trace-format=mooncake or dynamo")
                    .with_api_message(
                        "planner_config replay only supports trace_format='mooncake' or 'dynamo'",
                    ),
            );
        }
        let planner = PlannerSpec::from_arg(config)?;
        planner.check_native_predictor()?;
        let engine_types = [&engines.aggregated, &engines.prefill, &engines.decode];
        if engine_types.iter().any(|args| {
            args.as_ref()
                .is_some_and(|a| a.engine_type == EngineType::Sglang)
        }) {
            return Err(flag_error(
                "--planner-config",
                "the planner does not support SGLang engines yet (use vllm or trtllm)",
            ));
        }
        if planner.mode == PlannerMode::Disagg
            && (engines.prefill.is_none() || engines.decode.is_none())
        {
            return Err(flag_error(
                "--planner-config",
                "disagg planner replay requires --prefill-engine-args and --decode-engine-args \
                 (the planner's mode defaults to disagg; set mode: agg for aggregated workers)",
            ));
        }
        Ok(Some(planner))
    }
}
