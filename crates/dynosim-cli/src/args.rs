//! The command-line flags, named, typed and defaulted exactly like `python -m dynamo.replay`.
//!
//! Only syntax and types are checked here (an int flag gets an int, a choice flag one of its
//! choices). Every semantic rule lives in [`ReplayOptions::into_spec`], shared with the Python
//! API, so both fronts accept and reject the same inputs with the same messages.

use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::Parser;
use dynosim::config::ReplayOptions;

/// Replays an LLM-serving workload (a trace file or a synthetic workload) through a simulated
/// deployment in virtual time and reports the latency and throughput its users would see.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "dynosim",
    args_override_self = true,
    allow_negative_numbers = true,
    infer_long_args = true,
    version,
    color = clap::ColorChoice::Never,
    after_help = "Compare two runs: dynosim compare A B [--json] (each a report JSON or an AIPerf \
                  run directory; see dynosim compare --help). Sweep many runs: dynosim sweep SPEC.yaml \
                  --out DIR (see dynosim sweep --help). Serve an OpenAI-compatible API at the \
                  simulated speed: dynosim serve (see dynosim serve --help). A trace file named \
                  `compare`, `sweep` or `serve` is passed as ./compare, ./sweep or ./serve."
)]
pub struct Cli {
    /// Trace file to replay (one file; one or more shards with --trace-format dynamo); omit it for a
    /// synthetic workload
    #[arg(value_name = "TRACE_FILES")]
    pub trace_files: Vec<PathBuf>,

    /// Engine arguments of the workers as an inline JSON object, e.g.
    /// '{"num_gpu_blocks": 4096, "block_size": 64}', or the path of a JSON file holding one
    /// (default: the vLLM mock engine's defaults)
    #[arg(long, value_name = "JSON")]
    pub extra_engine_args: Option<String>,

    /// Disaggregated replay: engine arguments of the prefill workers, an inline JSON object
    /// (or a JSON file) with "worker_type": "prefill" (given together with --decode-engine-args)
    #[arg(long, value_name = "JSON")]
    pub prefill_engine_args: Option<String>,

    /// Disaggregated replay: engine arguments of the decode workers, an inline JSON object
    /// (or a JSON file) with "worker_type": "decode" (given together with --prefill-engine-args)
    #[arg(long, value_name = "JSON")]
    pub decode_engine_args: Option<String>,

    /// KV-router configuration as an inline JSON object or the path of a JSON file (default:
    /// none; ignored by round_robin)
    #[arg(long, value_name = "JSON")]
    pub router_config: Option<String>,

    /// Router policy-class YAML (policy families, cache buckets, queue classes); overrides
    /// router_policy_config inside --router-config (default: $DYN_ROUTER_POLICY_CONFIG)
    #[arg(long, value_name = "PATH")]
    pub router_policy_config: Option<String>,

    /// Model profile to select from --router-policy-config
    #[arg(long, value_name = "NAME")]
    pub model_name: Option<String>,

    /// Seed of the KV router's tie-breaking and temperature sampling; the same seed gives the
    /// same run (dynosim only; the reference draws these unseeded)
    #[arg(long, value_name = "INT", value_parser = parse_int, default_value = "0")]
    pub router_seed: i64,

    /// AIC backend of the KV router's prefill-load model (vllm, sglang, trtllm; needs
    /// router_prefill_load_model "aic" in --router-config)
    #[arg(long, value_name = "NAME")]
    pub aic_backend: Option<String>,

    /// AIC system (perf database), e.g. h200_sxm
    #[arg(long, value_name = "NAME")]
    pub aic_system: Option<String>,

    /// AIC model: a model bundled with aiconfigurator-core or a local directory with config.json
    #[arg(long, value_name = "PATH")]
    pub aic_model_path: Option<String>,

    /// AIC perf-database version (default: the package's current one)
    #[arg(long, value_name = "VERSION")]
    pub aic_backend_version: Option<String>,

    /// AIC tensor-parallel size (default 1)
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub aic_tp_size: Option<i64>,

    /// AIC MoE tensor-parallel size
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub aic_moe_tp_size: Option<i64>,

    /// AIC MoE expert-parallel size
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub aic_moe_ep_size: Option<i64>,

    /// AIC attention data-parallel size
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub aic_attention_dp_size: Option<i64>,

    /// AIC GEMM quantisation (auto = the model's)
    #[arg(long, value_name = "DTYPE")]
    pub aic_gemm_dtype: Option<String>,

    /// AIC MoE quantisation (auto = the model's)
    #[arg(long, value_name = "DTYPE")]
    pub aic_moe_dtype: Option<String>,

    /// AIC attention (FMHA) quantisation (auto = the model's)
    #[arg(long, value_name = "DTYPE")]
    pub aic_fmha_dtype: Option<String>,

    /// AIC KV-cache quantisation (auto = the model's)
    #[arg(long, value_name = "DTYPE")]
    pub aic_kv_cache_dtype: Option<String>,

    /// AIC communication quantisation (auto = the model's)
    #[arg(long, value_name = "DTYPE")]
    pub aic_comm_dtype: Option<String>,

    /// AIC speculative draft tokens (1-5)
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub aic_nextn: Option<i64>,

    /// AIC speculative acceptance rates, comma-separated
    #[arg(long, value_name = "RATES")]
    pub aic_nextn_accept_rates: Option<String>,

    /// Synthetic workload: prompt length of every request in tokens (default: none)
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub input_tokens: Option<i64>,

    /// Synthetic workload: output length of every request in tokens (default: none)
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub output_tokens: Option<i64>,

    /// Number of synthetic requests; when --turns-per-session > 1, this is the number of
    /// sessions (default: none)
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub request_count: Option<i64>,

    /// Poisson open-loop request rate in requests per second (synthetic only; default: none)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float)]
    pub request_rate: Option<f64>,

    /// Fixed open-loop interval between synthetic requests in milliseconds; 0 sends them all
    /// at once (default: none)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float)]
    pub arrival_interval_ms: Option<f64>,

    /// Seed for synthetic open-loop arrival timestamps
    #[arg(long, value_name = "INT", value_parser = parse_int, default_value = "42")]
    pub arrival_seed: i64,

    /// Synthetic workload: turns per session
    #[arg(long, value_name = "INT", value_parser = parse_int, default_value = "1")]
    pub turns_per_session: i64,

    /// Synthetic workload: fraction of each prompt shared within its prefix group, in [0, 1]
    #[arg(long, value_name = "FLOAT", value_parser = parse_float, default_value = "0.0")]
    pub shared_prefix_ratio: f64,

    /// Synthetic workload: number of shared-prefix groups
    #[arg(long, value_name = "INT", value_parser = parse_int, default_value = "0")]
    pub num_prefix_groups: i64,

    /// Synthetic workload: delay between a turn's completion and the next turn's arrival (ms)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float, default_value = "0.0")]
    pub inter_turn_delay_ms: f64,

    /// Synthetic workload: spread input lengths around --input-tokens as AIPerf does (normal,
    /// drawn again while negative, rounded up, at least 1; dynosim only; default: none)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float)]
    pub input_tokens_stddev: Option<f64>,

    /// Synthetic workload: spread output lengths around --output-tokens as AIPerf does (dynosim
    /// only; default: none)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float)]
    pub output_tokens_stddev: Option<f64>,

    /// Synthetic workload: input and output lengths uniform in [floor(R x L), L], as vLLM's
    /// benchmark client draws them (R in [0, 1]; not with the stddevs; dynosim only; default:
    /// none)
    #[arg(long, value_name = "R", value_parser = parse_float)]
    pub random_range_ratio: Option<f64>,

    /// Seed of the synthetic length draws (with a spread above; dynosim only; default: 42)
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub length_seed: Option<i64>,

    /// Number of aggregated workers
    #[arg(long, value_name = "INT", value_parser = parse_int, default_value = "1")]
    pub num_workers: i64,

    /// Number of prefill workers (disaggregated replay)
    #[arg(long, value_name = "INT", value_parser = parse_int, default_value = "1")]
    pub num_prefill_workers: i64,

    /// Number of decode workers (disaggregated replay)
    #[arg(long, value_name = "INT", value_parser = parse_int, default_value = "1")]
    pub num_decode_workers: i64,

    /// Closed loop: at most this many requests (sessions) in flight; replaces trace timestamps
    /// (default: none, open loop)
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub replay_concurrency: Option<i64>,

    /// offline: virtual time, as fast as the machine goes; online: live, on the wall clock
    /// (aggregated workers only; Ctrl-C ends the run and writes the report of what finished)
    #[arg(long, value_name = "MODE", default_value = "offline",
          value_parser = PossibleValuesParser::new(["offline", "online"]))]
    pub replay_mode: String,

    /// Online replay runs this many times faster than real time (dynosim only; default 1)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float)]
    pub online_speed: Option<f64>,

    /// How requests are spread over the workers
    #[arg(long, value_name = "MODE", default_value = "round_robin",
          value_parser = PossibleValuesParser::new(["round_robin", "kv_router"]))]
    pub router_mode: String,

    /// Divides trace and Poisson arrival offsets (2.0 replays twice as fast)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float, default_value = "1.0")]
    pub arrival_speedup_ratio: f64,

    /// Format of the trace file
    #[arg(long, value_name = "FORMAT", default_value = "mooncake",
          value_parser = PossibleValuesParser::new([
              "mooncake",
              "mooncake-delta",
              "agentic_mooncake",
              "applied_compute_agentic",
              "dynamo",
          ]))]
    pub trace_format: String,

    /// Tokens represented by each trace hash_id (default: 512)
    #[arg(long, value_name = "INT", value_parser = parse_int)]
    pub trace_block_size: Option<i64>,

    /// applied_compute_agentic traces: fraction of each session's first prompt shared with the
    /// other sessions of its prefix group, in [0, 1] (other formats ignore it)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float, default_value = "0.0")]
    pub trace_shared_prefix_ratio: f64,

    /// applied_compute_agentic traces: number of prefix groups sessions are dealt into by line
    /// (other formats ignore it)
    #[arg(long, value_name = "INT", value_parser = parse_int, default_value = "0")]
    pub trace_num_prefix_groups: i64,

    /// Path of the full report JSON; an existing directory gets a timestamped file inside it
    /// (default: dynamo_replay_report_<YYYYmmdd_HHMMSS>.json in the current directory,
    /// with _2, _3, ... after the time when that name is taken)
    #[arg(long, value_name = "PATH")]
    pub report_json: Option<PathBuf>,

    /// Write one JSON object per finished request to this path (trace-file replay only;
    /// default: none)
    #[arg(long, value_name = "PATH")]
    pub report_jsonl: Option<PathBuf>,

    /// Planner in the loop: a planner config (YAML or JSON file, or inline JSON) whose planner
    /// adds and removes workers at scaling ticks (offline replay of mooncake or dynamo traces
    /// and synthetic workloads; default: none)
    #[arg(long, value_name = "PATH|JSON")]
    pub planner_config: Option<String>,

    /// Also write the run as an AIPerf run directory: profile_export_aiperf.json,
    /// profile_export_aiperf.csv and profile_export.jsonl, readable by AIPerf's tools such as
    /// `aiperf plot` (created if missing; dynosim only; default: none)
    #[arg(long, value_name = "DIR")]
    pub aiperf_dir: Option<PathBuf>,

    /// Also write an HTML report: latency distributions, throughput, queue depth, per-worker
    /// load and KV-cache use over model time, prefix reuse and the configuration, in one file
    /// that opens with no network (dynosim only; default: none)
    #[arg(long, value_name = "PATH")]
    pub html_report: Option<PathBuf>,

    /// Print neither the progress bar (shown on stderr when it is a terminal) nor the summary
    /// table; errors and warnings are still printed (dynosim only)
    #[arg(long)]
    pub quiet: bool,

    /// How a run shows its progress on stderr: auto (a bar on a terminal, otherwise a line
    /// after 5 s and then every 10 s), bar, lines or off (dynosim only; default: auto)
    #[arg(long, value_enum, default_value_t = crate::progress::ProgressMode::Auto)]
    pub progress: crate::progress::ProgressMode,

    /// Stop the replay once the simulated clock would pass this many seconds, leaving
    /// in-flight requests incomplete (any run: planner, synthetic, online; default: no cap)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float)]
    pub max_sim_time_seconds: Option<f64>,

    /// Goodput SLA: max time to first token (ms); any SLA adds goodput_* keys to the report
    /// (default: none)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float)]
    pub sla_ttft_ms: Option<f64>,

    /// Goodput SLA: max mean inter-token latency of a request, (e2e - ttft)/(osl - 1) (ms)
    /// (default: none)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float)]
    pub sla_itl_ms: Option<f64>,

    /// Goodput SLA: max end-to-end latency (ms) (default: none)
    #[arg(long, value_name = "FLOAT", value_parser = parse_float)]
    pub sla_e2e_ms: Option<f64>,
}

impl Cli {
    /// The raw options the library validates. `report_json` stays with the CLI: it names an
    /// output file of the front end, not an input of the replay.
    pub fn to_options(&self) -> ReplayOptions {
        ReplayOptions {
            trace_files: self.trace_files.clone(),
            extra_engine_args: self.extra_engine_args.clone(),
            prefill_engine_args: self.prefill_engine_args.clone(),
            decode_engine_args: self.decode_engine_args.clone(),
            router_config: self.router_config.clone(),
            router_policy_config: self
                .router_policy_config
                .clone()
                .or_else(policy_config_from_env),
            router_policy_config_from_env: self.router_policy_config.is_none()
                && policy_config_from_env().is_some(),
            model_name: self.model_name.clone(),
            router_seed: self.router_seed,
            aic_backend: self.aic_backend.clone(),
            aic_system: self.aic_system.clone(),
            aic_model_path: self.aic_model_path.clone(),
            aic_backend_version: self.aic_backend_version.clone(),
            aic_tp_size: self.aic_tp_size,
            aic_moe_tp_size: self.aic_moe_tp_size,
            aic_moe_ep_size: self.aic_moe_ep_size,
            aic_attention_dp_size: self.aic_attention_dp_size,
            aic_gemm_dtype: self.aic_gemm_dtype.clone(),
            aic_moe_dtype: self.aic_moe_dtype.clone(),
            aic_fmha_dtype: self.aic_fmha_dtype.clone(),
            aic_kv_cache_dtype: self.aic_kv_cache_dtype.clone(),
            aic_comm_dtype: self.aic_comm_dtype.clone(),
            aic_nextn: self.aic_nextn,
            aic_nextn_accept_rates: self.aic_nextn_accept_rates.clone(),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            request_count: self.request_count,
            request_rate: self.request_rate,
            arrival_interval_ms: self.arrival_interval_ms,
            arrival_seed: self.arrival_seed,
            turns_per_session: self.turns_per_session,
            shared_prefix_ratio: self.shared_prefix_ratio,
            num_prefix_groups: self.num_prefix_groups,
            inter_turn_delay_ms: self.inter_turn_delay_ms,
            input_tokens_stddev: self.input_tokens_stddev,
            output_tokens_stddev: self.output_tokens_stddev,
            random_range_ratio: self.random_range_ratio,
            length_seed: self.length_seed,
            num_workers: self.num_workers,
            num_prefill_workers: self.num_prefill_workers,
            num_decode_workers: self.num_decode_workers,
            replay_concurrency: self.replay_concurrency,
            replay_mode: self.replay_mode.clone(),
            online_speed: self.online_speed,
            router_mode: self.router_mode.clone(),
            arrival_speedup_ratio: self.arrival_speedup_ratio,
            trace_format: self.trace_format.clone(),
            trace_block_size: self.trace_block_size,
            trace_shared_prefix_ratio: self.trace_shared_prefix_ratio,
            trace_num_prefix_groups: self.trace_num_prefix_groups,
            report_jsonl: self.report_jsonl.clone(),
            planner_config: self.planner_config.clone(),
            max_sim_time_seconds: self.max_sim_time_seconds,
            sla_ttft_ms: self.sla_ttft_ms,
            sla_itl_ms: self.sla_itl_ms,
            sla_e2e_ms: self.sla_e2e_ms,
            ..ReplayOptions::default()
        }
    }
}

/// Python's `int(text)` for decimal text: surrounding whitespace, a sign and single
/// underscores between digits are allowed, as argparse's `type=int` allows them.
pub fn parse_int(text: &str) -> Result<i64, String> {
    let invalid = || format!("invalid int value: '{text}'");
    let digits = strip_python_underscores(text.trim()).ok_or_else(invalid)?;
    let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(&digits);
    if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    digits
        .parse::<i64>()
        .map_err(|_| format!("int value out of range: '{text}'"))
}

/// Python's `float(text)`: decimal or exponent notation, `inf`/`infinity`/`nan` in any case,
/// surrounding whitespace, and single underscores between digits.
pub fn parse_float(text: &str) -> Result<f64, String> {
    let invalid = || format!("invalid float value: '{text}'");
    let cleaned = strip_python_underscores(text.trim()).ok_or_else(invalid)?;
    cleaned.parse::<f64>().map_err(|_| invalid())
}

/// Removes underscores that sit between two ASCII digits; `None` if any other underscore
/// is present (Python rejects `_1`, `1_`, `1__0`).
fn strip_python_underscores(text: &str) -> Option<String> {
    if !text.contains('_') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'_' {
            let before = i > 0 && bytes[i - 1].is_ascii_digit();
            let after = bytes.get(i + 1).is_some_and(|c| c.is_ascii_digit());
            if !(before && after) {
                return None;
            }
        } else {
            out.push(b as char);
        }
    }
    Some(out)
}

/// `DYN_ROUTER_POLICY_CONFIG`, when set to a non-empty value (empty means unset, as for most
/// path variables).
fn policy_config_from_env() -> Option<String> {
    std::env::var("DYN_ROUTER_POLICY_CONFIG")
        .ok()
        .filter(|value| !value.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn ints_parse_like_python() {
        assert_eq!(parse_int("42"), Ok(42));
        assert_eq!(parse_int(" -3 "), Ok(-3));
        assert_eq!(parse_int("+7"), Ok(7));
        assert_eq!(parse_int("1_000"), Ok(1000));
        assert!(parse_int("two").is_err());
        assert!(parse_int("1.5").is_err());
        assert!(parse_int("_1").is_err());
        assert!(parse_int("1__0").is_err());
        assert!(parse_int("").is_err());
        assert!(parse_int("-").is_err());
        assert_eq!(parse_int("two").unwrap_err(), "invalid int value: 'two'");
    }

    #[test]
    fn floats_parse_like_python() {
        assert_eq!(parse_float("1.5"), Ok(1.5));
        assert_eq!(parse_float(".5"), Ok(0.5));
        assert_eq!(parse_float("1e3"), Ok(1000.0));
        assert_eq!(parse_float("-2"), Ok(-2.0));
        assert_eq!(parse_float("1_0.5"), Ok(10.5));
        assert!(parse_float("nan").unwrap().is_nan());
        assert!(parse_float("NaN").unwrap().is_nan());
        assert_eq!(parse_float("inf"), Ok(f64::INFINITY));
        assert_eq!(parse_float("-Infinity"), Ok(f64::NEG_INFINITY));
        assert_eq!(parse_float("x").unwrap_err(), "invalid float value: 'x'");
    }

    #[test]
    fn defaults_equal_the_library_defaults() {
        let cli = Cli::try_parse_from(["dynosim"]).unwrap();
        let parsed = cli.to_options();
        let expected = ReplayOptions::default();
        assert_eq!(format!("{parsed:?}"), format!("{expected:?}"));
    }

    #[test]
    fn last_occurrence_wins_and_negatives_are_values() {
        let cli = Cli::try_parse_from([
            "dynosim",
            "--num-workers",
            "2",
            "--num-workers",
            "-3",
            "--sla-ttft-ms",
            "-1.5",
        ])
        .unwrap();
        assert_eq!(cli.num_workers, -3);
        assert_eq!(cli.sla_ttft_ms, Some(-1.5));
    }
}
