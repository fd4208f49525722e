//! What every group of checks shares: the usage errors that name a flag, the named choices
//! (replay mode, trace format, router mode) parsed once, and small conversions.
//!
//! INTERFACE
//! - [`flag_error`], [`usage`]: a usage error about one flag, or one whose message names them.
//! - [`Choices`]: the named choices, each parsed once; a bad name is an error raised where the
//!   reference checks that option.
//! - [`non_negative`], [`arrival_mode`], [`replay_kind`]: shared conversions and wording.

use super::ReplayOptions;
use crate::config::{ArrivalMode, RouterMode};
use crate::error::{Error, Result};

/// A usage error about one flag: `--flag: message` (the Python API names the argument
/// instead, see `config::spelling`).
pub(super) fn flag_error(flag: &str, message: impl AsRef<str>) -> Error {
    Error::usage_about(flag, message.as_ref())
}

/// A usage error whose message already names the flags involved.
pub(super) fn usage(message: impl Into<String>) -> Error {
    Error::usage(message)
}

/// The Python API's wording of the one-load-controller rule (the reference's API says this).
pub(super) const SYNTHETIC_LOAD_CONTROL_API_MESSAGE: &str =
    "synthetic replay requires exactly one of replay_concurrency, request_rate, or \
     arrival_interval_ms";

/// The reference takes these integers as unsigned: a negative value is refused before any of
/// its checks run.
pub(super) fn non_negative(flag: &str, value: i64) -> Result<usize> {
    usize::try_from(value)
        .map_err(|_| flag_error(flag, format!("must be a non-negative integer, got {value}")))
}

/// How the reference names a replay in its worker checks.
pub(super) fn replay_kind(closed_loop: bool) -> &'static str {
    if closed_loop {
        "concurrency replay"
    } else {
        "trace replay"
    }
}

/// Closed-loop concurrency, or open-loop timestamps sped up by `speedup` (asked only then).
pub(super) fn arrival_mode(
    concurrency: Option<usize>,
    speedup: impl FnOnce() -> Result<f64>,
) -> Result<ArrivalMode> {
    Ok(match concurrency {
        Some(limit) => ArrivalMode::Concurrency { limit },
        None => ArrivalMode::Timestamps {
            speedup: speedup()?,
        },
    })
}

/// The trace dialects of the reference (`--trace-format`), aliases resolved; the settings a
/// dialect takes are added when the spec's [`TraceFormat`] is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TraceDialect {
    Mooncake,
    MooncakeDelta,
    AgenticMooncake,
    AppliedComputeAgentic,
    Dynamo,
}

pub(super) fn parse_trace_format(text: &str) -> Result<TraceDialect> {
    match text {
        "mooncake" => Ok(TraceDialect::Mooncake),
        "mooncake-delta" | "mooncake_delta" => Ok(TraceDialect::MooncakeDelta),
        "agentic_mooncake" | "agentic-mooncake" => Ok(TraceDialect::AgenticMooncake),
        "applied_compute_agentic" => Ok(TraceDialect::AppliedComputeAgentic),
        "dynamo" => Ok(TraceDialect::Dynamo),
        other => Err(flag_error(
            "--trace-format",
            format!(
                "trace_format must be 'mooncake', 'mooncake-delta', \
                 'agentic_mooncake'/'agentic-mooncake', 'applied_compute_agentic', or 'dynamo', \
                 got '{other}'"
            ),
        )),
    }
}

/// `--replay-mode`, before the online speed is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ModeName {
    Offline,
    Online,
}

pub(super) fn parse_replay_mode(text: &str) -> Result<ModeName> {
    match text {
        "offline" => Ok(ModeName::Offline),
        "online" => Ok(ModeName::Online),
        other => Err(flag_error(
            "--replay-mode",
            format!("replay_mode must be either 'offline' or 'online', got '{other}'"),
        )),
    }
}

pub(super) fn parse_router_mode(text: &str) -> Result<RouterMode> {
    match text {
        "round_robin" => Ok(RouterMode::RoundRobin),
        "kv_router" => Ok(RouterMode::KvRouter),
        other => Err(flag_error(
            "--router-mode",
            format!("router_mode must be either 'round_robin' or 'kv_router', got '{other}'"),
        )),
    }
}

/// The named choices among the options, each parsed once. A bad name is an error raised at
/// the point where the reference checks that option; checks that run earlier only ask whether
/// the choice is a given valid one.
pub(super) struct Choices {
    pub(super) replay_mode: Result<ModeName>,
    pub(super) trace_format: Result<TraceDialect>,
    pub(super) router_mode: Result<RouterMode>,
}

impl Choices {
    pub(super) fn of(options: &ReplayOptions) -> Self {
        Self {
            replay_mode: parse_replay_mode(&options.replay_mode),
            trace_format: parse_trace_format(&options.trace_format),
            router_mode: parse_router_mode(&options.router_mode),
        }
    }

    pub(super) fn is_online(&self) -> bool {
        self.replay_mode == Ok(ModeName::Online)
    }

    pub(super) fn trace_format_is(&self, dialect: TraceDialect) -> bool {
        self.trace_format == Ok(dialect)
    }
}
