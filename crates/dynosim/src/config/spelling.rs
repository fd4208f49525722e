//! How each front names the options in its messages.
//!
//! Validation reports the option at fault as a flag (`--replay-concurrency`, see
//! [`Error::usage_about`]); the command line prints that, while the Python API renders the same
//! error with its argument names (`replay_concurrency`), or with its own sentence where the
//! reference's API words a check differently ([`Error::with_api_message`]).
//!
//! INTERFACE
//! - [`python_argument`]: the Python argument a flag corresponds to, if the API has one.
//! - [`python_message`]: an error as the Python API words it.

use crate::config::settings;
use crate::error::Error;

/// The Python argument for `flag`, as the settings table names it (`--num-workers` →
/// `num_workers`, `--report-jsonl` → `report_jsonl_path`, the `--aic-*` flags are fields of
/// `aic_perf_config`), or `None` when the API has no such argument. Names that are not flags
/// (already Python names, e.g. `max_sim_time_ms`) are returned as they are, and a flag of
/// another command (not a replay setting) with `_` for `-`.
pub fn python_argument(flag: &str) -> Option<String> {
    let Some(name) = flag.strip_prefix("--") else {
        return Some(flag.to_owned());
    };
    match settings::by_flag(flag) {
        Some(setting) => setting.python_name(),
        None => Some(name.replace('-', "_")),
    }
}

/// `error` as the Python API words it: its own sentence if it has one, else the message with
/// the subject named as a Python argument.
pub fn python_message(error: &Error) -> String {
    if let Some(message) = error.api_message() {
        return message.to_owned();
    }
    match error.subject().and_then(python_argument) {
        Some(argument) => format!("{argument}: {}", error.detail()),
        None => error.message().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_become_python_arguments() {
        assert_eq!(
            python_argument("--num-workers").as_deref(),
            Some("num_workers")
        );
        assert_eq!(
            python_argument("--extra-engine-args").as_deref(),
            Some("extra_engine_args")
        );
        assert_eq!(
            python_argument("--report-jsonl").as_deref(),
            Some("report_jsonl_path")
        );
        assert_eq!(
            python_argument("--aic-backend").as_deref(),
            Some("aic_perf_config.aic_backend")
        );
        assert_eq!(
            python_argument("max_sim_time_ms").as_deref(),
            Some("max_sim_time_ms")
        );
        assert_eq!(python_argument("--report-json"), None);
    }

    #[test]
    fn messages_name_the_python_argument() {
        let error = Error::usage_about(
            "--replay-concurrency",
            "replay_concurrency must be at least 1",
        );
        assert_eq!(
            error.message(),
            "--replay-concurrency: replay_concurrency must be at least 1"
        );
        assert_eq!(
            python_message(&error),
            "replay_concurrency: replay_concurrency must be at least 1"
        );
        let cli_only = Error::usage_about("--report-json", "is a directory");
        assert_eq!(python_message(&cli_only), "--report-json: is a directory");
        let worded = Error::usage("--trace-format=dynamo requires at least one trace file")
            .with_api_message("trace_format='dynamo' requires at least one trace file");
        assert_eq!(
            python_message(&worded),
            "trace_format='dynamo' requires at least one trace file"
        );
        let plain = Error::runtime("offline replay reached a dead end");
        assert_eq!(python_message(&plain), "offline replay reached a dead end");
    }
}
