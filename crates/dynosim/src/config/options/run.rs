//! How the run goes: the time cap, the SLA bounds, the closed-loop concurrency, the replay
//! mode with its online speed, and the arrival speed-up.
//!
//! INTERFACE
//! - [`ReplayOptions::max_sim_time_ms`], [`ReplayOptions::sla`],
//!   [`ReplayOptions::concurrency_limit`], [`ReplayOptions::replay_mode`],
//!   [`ReplayOptions::check_speedup`]: each option checked into its typed value.

use super::checks::{flag_error, Choices, ModeName};
use super::ReplayOptions;
use crate::config::json_fields::show_f64;
use crate::config::{ReplayMode, Sla};
use crate::error::Result;

impl ReplayOptions {
    /// The cap on simulated time, in ms (both cap checks of the reference).
    pub(super) fn max_sim_time_ms(&self) -> Result<Option<f64>> {
        let (flag, name, given, cap_ms) = match (self.max_sim_time_seconds, self.max_sim_time_ms) {
            (Some(seconds), _) => (
                "--max-sim-time-seconds",
                "max_sim_time_seconds",
                seconds,
                seconds * 1000.0,
            ),
            (None, Some(ms)) => ("max_sim_time_ms", "max_sim_time_ms", ms, ms),
            (None, None) => return Ok(None),
        };
        if !(cap_ms.is_finite() && cap_ms >= 0.0) {
            return Err(flag_error(
                flag,
                format!(
                    "{name} must be a finite, non-negative value, got {}",
                    show_f64(given)
                ),
            ));
        }
        Ok(Some(cap_ms))
    }

    pub(super) fn sla(&self) -> Result<Sla> {
        for (flag, name, bound) in [
            ("--sla-ttft-ms", "sla_ttft_ms", self.sla_ttft_ms),
            ("--sla-itl-ms", "sla_itl_ms", self.sla_itl_ms),
            ("--sla-e2e-ms", "sla_e2e_ms", self.sla_e2e_ms),
        ] {
            if let Some(bound) = bound {
                if !(bound.is_finite() && bound >= 0.0) {
                    return Err(flag_error(
                        flag,
                        format!(
                            "{name} must be a finite, non-negative value, got {}",
                            show_f64(bound)
                        ),
                    ));
                }
            }
        }
        Ok(Sla {
            ttft_ms: self.sla_ttft_ms,
            itl_ms: self.sla_itl_ms,
            e2e_ms: self.sla_e2e_ms,
        })
    }

    /// `--replay-concurrency`, which the reference takes as a signed integer.
    pub(super) fn concurrency_limit(&self) -> Result<Option<usize>> {
        match self.replay_concurrency {
            None => Ok(None),
            Some(limit) if limit >= 1 => Ok(Some(limit as usize)),
            Some(_) => Err(flag_error(
                "--replay-concurrency",
                "replay_concurrency must be at least 1",
            )),
        }
    }

    /// The replay mode, at the point where the reference checks it, with the online speed
    /// (dynosim's own flag, refused offline).
    pub(super) fn replay_mode(&self, choices: &Choices) -> Result<ReplayMode> {
        match (choices.replay_mode.clone()?, self.online_speed) {
            (ModeName::Offline, None) => Ok(ReplayMode::Offline),
            (ModeName::Offline, Some(_)) => Err(flag_error(
                "--online-speed",
                "online_speed only applies to replay_mode='online'",
            )),
            (ModeName::Online, speed) => {
                let speed = speed.unwrap_or(1.0);
                if !(speed.is_finite() && speed > 0.0) {
                    return Err(flag_error(
                        "--online-speed",
                        format!(
                            "online_speed must be a finite positive number, got {}",
                            show_f64(speed)
                        ),
                    ));
                }
                Ok(ReplayMode::Online { speed })
            }
        }
    }

    pub(super) fn check_speedup(&self, name: &str) -> Result<f64> {
        let ratio = self.arrival_speedup_ratio;
        if ratio.is_finite() && ratio > 0.0 {
            Ok(ratio)
        } else {
            Err(flag_error(
                "--arrival-speedup-ratio",
                format!(
                    "{name} must be a finite positive number, got {}",
                    show_f64(ratio)
                ),
            ))
        }
    }
}
