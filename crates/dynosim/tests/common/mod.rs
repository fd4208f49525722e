//! What the integration tests that run whole simulations share.
//!
//! INTERFACE
//! - [`conversation_trace`]: `../shared/traces/conversation_trace.jsonl` beside the
//!   repository, or `None` after a `SKIPPED <test>: <path> is absent` line on stderr (the CI
//!   script counts a test that prints it as skipped, not passed).
//! - [`synthetic`]: a synthetic workload of two-turn sessions with shared prefixes at 40
//!   requests/s, on a given number of workers.

use std::path::PathBuf;

use dynosim::config::ReplayOptions;

/// The shared conversation trace, or `None` (said on stderr, naming `test`) when it is absent.
pub fn conversation_trace(test: &str) -> Option<PathBuf> {
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces/conversation_trace.jsonl");
    if trace.exists() {
        return Some(trace);
    }
    eprintln!("SKIPPED {test}: {} is absent", trace.display());
    None
}

/// `requests` synthetic requests (600 prompt, 40 output tokens) at 40 per second, in sessions of
/// two turns whose prompts share prefixes in 4 groups, on `workers` workers.
pub fn synthetic(workers: i64, requests: i64) -> ReplayOptions {
    ReplayOptions {
        input_tokens: Some(600),
        output_tokens: Some(40),
        request_count: Some(requests),
        request_rate: Some(40.0),
        turns_per_session: 2,
        shared_prefix_ratio: 0.5,
        num_prefix_groups: 4,
        num_workers: workers,
        ..ReplayOptions::default()
    }
}
