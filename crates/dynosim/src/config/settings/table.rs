//! The definitions: one entry per setting, in the order `dynosim --help` lists the flags.
//! `option!` defines a setting held by a `ReplayOptions` field of the same name; `front!` one
//! a front reads itself. Help texts are the CLI's; the reference's flags keep its names,
//! types and defaults, and a setting dynosim added says "dynosim only".

use super::{
    Access, Choice, Cli, Fallback, FieldValue, Group, JsonObject, Kind, PythonArg, Setting, Target,
};

/// A setting stored in the `ReplayOptions` field named like it.
macro_rules! option {
    ($field:ident { $($key:ident: $value:expr),* $(,)? }) => {
        Setting {
            name: stringify!($field),
            target: Target::Options(Access {
                read: |options| FieldValue::to_setting(&options.$field),
                store: |options, value| {
                    options.$field = FieldValue::from_setting(value)?;
                    Ok(())
                },
            }),
            $($key: $value,)*
            ..Setting::BASE
        }
    };
}

/// A setting of a front's own (an output, the display, a Python object).
macro_rules! front {
    ($name:ident { $($key:ident: $value:expr),* $(,)? }) => {
        Setting {
            name: stringify!($name),
            target: Target::Front,
            $($key: $value,)*
            ..Setting::BASE
        }
    };
}

use Fallback::{Float as DefaultFloat, Int as DefaultInt, Text as DefaultText};
use Group::{Aic, Deployment, Goals, Outputs, Router, Run, Workload};
use PythonArg::{FieldOf, Keyword};

/// Where the AIC settings sit in the Python API.
const AIC: PythonArg = FieldOf("aic_perf_config");

/// Every setting.
pub static SETTINGS: &[Setting] = &[
    option!(trace_files {
        cli: Cli::Positional,
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Paths,
        value_name: "TRACE_FILES",
        doc: "Trace file to replay (one file; one or more shards with --trace-format dynamo); \
              omit it for a synthetic workload",
    }),
    option!(extra_engine_args {
        cli: Cli::Flag("extra-engine-args"),
        python: Keyword,
        sweep: true,
        group: Deployment,
        kind: Kind::Json(JsonObject::EngineArgs),
        value_name: "JSON",
        doc: "Engine arguments of the workers as an inline JSON object, e.g. \
              '{\"num_gpu_blocks\": 4096, \"block_size\": 64}', or the path of a JSON file \
              holding one (default: the vLLM mock engine's defaults)",
    }),
    option!(prefill_engine_args {
        cli: Cli::Flag("prefill-engine-args"),
        python: Keyword,
        sweep: true,
        group: Deployment,
        disaggregated_only: true,
        kind: Kind::Json(JsonObject::EngineArgs),
        value_name: "JSON",
        doc: "Disaggregated replay: engine arguments of the prefill workers, an inline JSON \
              object (or a JSON file) with \"worker_type\": \"prefill\" (given together with \
              --decode-engine-args)",
    }),
    option!(decode_engine_args {
        cli: Cli::Flag("decode-engine-args"),
        python: Keyword,
        sweep: true,
        group: Deployment,
        disaggregated_only: true,
        kind: Kind::Json(JsonObject::EngineArgs),
        value_name: "JSON",
        doc: "Disaggregated replay: engine arguments of the decode workers, an inline JSON \
              object (or a JSON file) with \"worker_type\": \"decode\" (given together with \
              --prefill-engine-args)",
    }),
    option!(router_config {
        cli: Cli::Flag("router-config"),
        python: Keyword,
        sweep: true,
        group: Router,
        kind: Kind::Json(JsonObject::RouterConfig),
        value_name: "JSON",
        doc: "KV-router configuration as an inline JSON object or the path of a JSON file \
              (default: none; ignored by round_robin)",
    }),
    option!(router_policy_config {
        cli: Cli::Flag("router-policy-config"),
        python: FieldOf("router_config"),
        group: Router,
        value_name: "PATH",
        doc: "Router policy-class YAML (policy families, cache buckets, queue classes); \
              overrides router_policy_config inside --router-config (default: \
              $DYN_ROUTER_POLICY_CONFIG)",
    }),
    option!(model_name {
        cli: Cli::Flag("model-name"),
        python: Keyword,
        sweep: true,
        group: Router,
        value_name: "NAME",
        doc: "Model profile to select from --router-policy-config",
    }),
    option!(router_seed {
        cli: Cli::Flag("router-seed"),
        python: Keyword,
        sweep: true,
        group: Router,
        kind: Kind::Int,
        default: DefaultInt(0),
        value_name: "INT",
        doc: "Seed of the KV router's tie-breaking and temperature sampling; the same seed \
              gives the same run (dynosim only; the reference draws these unseeded)",
    }),
    option!(aic_backend {
        cli: Cli::Flag("aic-backend"),
        python: AIC,
        sweep: true,
        group: Aic,
        value_name: "NAME",
        doc: "AIC backend of the KV router's prefill-load model (vllm, sglang, trtllm; needs \
              router_prefill_load_model \"aic\" in --router-config)",
    }),
    option!(aic_system {
        cli: Cli::Flag("aic-system"),
        python: AIC,
        sweep: true,
        group: Aic,
        value_name: "NAME",
        doc: "AIC system (perf database), e.g. h200_sxm",
    }),
    option!(aic_model_path {
        cli: Cli::Flag("aic-model-path"),
        python: AIC,
        sweep: true,
        group: Aic,
        value_name: "PATH",
        doc: "AIC model: a model bundled with aiconfigurator-core or a local directory with \
              config.json",
    }),
    option!(aic_backend_version {
        cli: Cli::Flag("aic-backend-version"),
        python: AIC,
        sweep: true,
        group: Aic,
        value_name: "VERSION",
        doc: "AIC perf-database version (default: the package's current one)",
    }),
    option!(aic_tp_size {
        cli: Cli::Flag("aic-tp-size"),
        python: AIC,
        sweep: true,
        group: Aic,
        kind: Kind::Int,
        value_name: "INT",
        doc: "AIC tensor-parallel size (default 1)",
    }),
    option!(aic_moe_tp_size {
        cli: Cli::Flag("aic-moe-tp-size"),
        python: AIC,
        sweep: true,
        group: Aic,
        kind: Kind::Int,
        value_name: "INT",
        doc: "AIC MoE tensor-parallel size",
    }),
    option!(aic_moe_ep_size {
        cli: Cli::Flag("aic-moe-ep-size"),
        python: AIC,
        sweep: true,
        group: Aic,
        kind: Kind::Int,
        value_name: "INT",
        doc: "AIC MoE expert-parallel size",
    }),
    option!(aic_attention_dp_size {
        cli: Cli::Flag("aic-attention-dp-size"),
        python: AIC,
        sweep: true,
        group: Aic,
        kind: Kind::Int,
        value_name: "INT",
        doc: "AIC attention data-parallel size",
    }),
    option!(aic_gemm_dtype {
        cli: Cli::Flag("aic-gemm-dtype"),
        python: AIC,
        sweep: true,
        group: Aic,
        value_name: "DTYPE",
        doc: "AIC GEMM quantisation (auto = the model's)",
    }),
    option!(aic_moe_dtype {
        cli: Cli::Flag("aic-moe-dtype"),
        python: AIC,
        sweep: true,
        group: Aic,
        value_name: "DTYPE",
        doc: "AIC MoE quantisation (auto = the model's)",
    }),
    option!(aic_fmha_dtype {
        cli: Cli::Flag("aic-fmha-dtype"),
        python: AIC,
        sweep: true,
        group: Aic,
        value_name: "DTYPE",
        doc: "AIC attention (FMHA) quantisation (auto = the model's)",
    }),
    option!(aic_kv_cache_dtype {
        cli: Cli::Flag("aic-kv-cache-dtype"),
        python: AIC,
        sweep: true,
        group: Aic,
        value_name: "DTYPE",
        doc: "AIC KV-cache quantisation (auto = the model's)",
    }),
    option!(aic_comm_dtype {
        cli: Cli::Flag("aic-comm-dtype"),
        python: AIC,
        sweep: true,
        group: Aic,
        value_name: "DTYPE",
        doc: "AIC communication quantisation (auto = the model's)",
    }),
    option!(aic_nextn {
        cli: Cli::Flag("aic-nextn"),
        python: AIC,
        sweep: true,
        group: Aic,
        kind: Kind::Int,
        value_name: "INT",
        doc: "AIC speculative draft tokens (1-5)",
    }),
    option!(aic_nextn_accept_rates {
        cli: Cli::Flag("aic-nextn-accept-rates"),
        python: AIC,
        sweep: true,
        group: Aic,
        value_name: "RATES",
        doc: "AIC speculative acceptance rates, comma-separated",
    }),
    option!(input_tokens {
        cli: Cli::Flag("input-tokens"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Int,
        value_name: "INT",
        doc: "Synthetic workload: prompt length of every request in tokens (default: none)",
    }),
    option!(output_tokens {
        cli: Cli::Flag("output-tokens"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Int,
        value_name: "INT",
        doc: "Synthetic workload: output length of every request in tokens (default: none)",
    }),
    option!(request_count {
        cli: Cli::Flag("request-count"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Int,
        value_name: "INT",
        doc: "Number of synthetic requests; when --turns-per-session > 1, this is the number \
              of sessions (default: none)",
    }),
    option!(request_rate {
        cli: Cli::Flag("request-rate"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Float,
        value_name: "FLOAT",
        doc: "Poisson open-loop request rate in requests per second (synthetic only; \
              default: none)",
    }),
    option!(arrival_interval_ms {
        cli: Cli::Flag("arrival-interval-ms"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Float,
        value_name: "FLOAT",
        doc: "Fixed open-loop interval between synthetic requests in milliseconds; 0 sends \
              them all at once (default: none)",
    }),
    option!(arrival_seed {
        cli: Cli::Flag("arrival-seed"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Int,
        default: DefaultInt(42),
        value_name: "INT",
        doc: "Seed for synthetic open-loop arrival timestamps",
    }),
    option!(turns_per_session {
        cli: Cli::Flag("turns-per-session"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Int,
        default: DefaultInt(1),
        value_name: "INT",
        doc: "Synthetic workload: turns per session",
    }),
    option!(shared_prefix_ratio {
        cli: Cli::Flag("shared-prefix-ratio"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Float,
        default: DefaultFloat(0.0),
        value_name: "FLOAT",
        doc: "Synthetic workload: fraction of each prompt shared within its prefix group, in \
              [0, 1]",
    }),
    option!(num_prefix_groups {
        cli: Cli::Flag("num-prefix-groups"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Int,
        default: DefaultInt(0),
        value_name: "INT",
        doc: "Synthetic workload: number of shared-prefix groups",
    }),
    option!(inter_turn_delay_ms {
        cli: Cli::Flag("inter-turn-delay-ms"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Float,
        default: DefaultFloat(0.0),
        value_name: "FLOAT",
        doc: "Synthetic workload: delay between a turn's completion and the next turn's \
              arrival (ms)",
    }),
    option!(input_tokens_stddev {
        cli: Cli::Flag("input-tokens-stddev"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Float,
        value_name: "FLOAT",
        doc: "Synthetic workload: spread input lengths around --input-tokens as AIPerf does \
              (normal, drawn again while negative, rounded up, at least 1; dynosim only; \
              default: none)",
    }),
    option!(output_tokens_stddev {
        cli: Cli::Flag("output-tokens-stddev"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Float,
        value_name: "FLOAT",
        doc: "Synthetic workload: spread output lengths around --output-tokens as AIPerf does \
              (dynosim only; default: none)",
    }),
    option!(random_range_ratio {
        cli: Cli::Flag("random-range-ratio"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Float,
        value_name: "R",
        doc: "Synthetic workload: input and output lengths uniform in [floor(R x L), L], as \
              vLLM's benchmark client draws them (R in [0, 1]; not with the stddevs; dynosim \
              only; default: none)",
    }),
    option!(length_seed {
        cli: Cli::Flag("length-seed"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Int,
        value_name: "INT",
        doc: "Seed of the synthetic length draws (with a spread above; dynosim only; \
              default: 42)",
    }),
    option!(num_workers {
        cli: Cli::Flag("num-workers"),
        python: Keyword,
        sweep: true,
        group: Deployment,
        kind: Kind::Int,
        default: DefaultInt(1),
        value_name: "INT",
        doc: "Number of aggregated workers",
    }),
    option!(num_prefill_workers {
        cli: Cli::Flag("num-prefill-workers"),
        python: Keyword,
        sweep: true,
        group: Deployment,
        disaggregated_only: true,
        kind: Kind::Int,
        default: DefaultInt(1),
        value_name: "INT",
        doc: "Number of prefill workers (disaggregated replay)",
    }),
    option!(num_decode_workers {
        cli: Cli::Flag("num-decode-workers"),
        python: Keyword,
        sweep: true,
        group: Deployment,
        disaggregated_only: true,
        kind: Kind::Int,
        default: DefaultInt(1),
        value_name: "INT",
        doc: "Number of decode workers (disaggregated replay)",
    }),
    option!(replay_concurrency {
        cli: Cli::Flag("replay-concurrency"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Int,
        value_name: "INT",
        doc: "Closed loop: at most this many requests (sessions) in flight; replaces trace \
              timestamps (default: none, open loop)",
    }),
    option!(replay_mode {
        cli: Cli::Flag("replay-mode"),
        python: Keyword,
        group: Run,
        default: DefaultText("offline"),
        value_name: "MODE",
        choices: &[Choice::named("offline"), Choice::named("online")],
        doc: "offline: virtual time, as fast as the machine goes; online: live, on the wall \
              clock (aggregated workers only; Ctrl-C ends the run and writes the report of \
              what finished)",
    }),
    option!(online_speed {
        cli: Cli::Flag("online-speed"),
        group: Run,
        kind: Kind::Float,
        value_name: "FLOAT",
        doc: "Online replay runs this many times faster than real time (dynosim only; \
              default 1)",
    }),
    option!(router_mode {
        cli: Cli::Flag("router-mode"),
        python: Keyword,
        sweep: true,
        group: Router,
        default: DefaultText("round_robin"),
        value_name: "MODE",
        choices: &[Choice::named("round_robin"), Choice::named("kv_router")],
        doc: "How requests are spread over the workers",
    }),
    option!(arrival_speedup_ratio {
        cli: Cli::Flag("arrival-speedup-ratio"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Float,
        default: DefaultFloat(1.0),
        value_name: "FLOAT",
        doc: "Divides trace and Poisson arrival offsets (2.0 replays twice as fast)",
    }),
    option!(trace_format {
        cli: Cli::Flag("trace-format"),
        python: Keyword,
        sweep: true,
        group: Workload,
        default: DefaultText("mooncake"),
        value_name: "FORMAT",
        choices: &[
            Choice::named("mooncake"),
            Choice::named("mooncake-delta"),
            Choice::named("agentic_mooncake"),
            Choice::named("applied_compute_agentic"),
            Choice::named("dynamo"),
        ],
        doc: "Format of the trace file",
    }),
    option!(trace_block_size {
        cli: Cli::Flag("trace-block-size"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Int,
        value_name: "INT",
        doc: "Tokens represented by each trace hash_id (default: 512)",
    }),
    option!(trace_shared_prefix_ratio {
        cli: Cli::Flag("trace-shared-prefix-ratio"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Float,
        default: DefaultFloat(0.0),
        value_name: "FLOAT",
        doc: "applied_compute_agentic traces: fraction of each session's first prompt shared \
              with the other sessions of its prefix group, in [0, 1] (other formats ignore it)",
    }),
    option!(trace_num_prefix_groups {
        cli: Cli::Flag("trace-num-prefix-groups"),
        python: Keyword,
        sweep: true,
        group: Workload,
        kind: Kind::Int,
        default: DefaultInt(0),
        value_name: "INT",
        doc: "applied_compute_agentic traces: number of prefix groups sessions are dealt into \
              by line (other formats ignore it)",
    }),
    front!(report_json {
        cli: Cli::Flag("report-json"),
        group: Outputs,
        kind: Kind::Path,
        value_name: "PATH",
        doc: "Path of the full report JSON; an existing directory gets a timestamped file \
              inside it (default: dynamo_replay_report_<YYYYmmdd_HHMMSS>.json in the current \
              directory, with _2, _3, ... after the time when that name is taken)",
    }),
    option!(report_jsonl {
        cli: Cli::Flag("report-jsonl"),
        python: PythonArg::Renamed("report_jsonl_path"),
        group: Outputs,
        kind: Kind::Path,
        value_name: "PATH",
        doc: "Write one JSON object per finished request to this path (trace-file replay \
              only; default: none)",
    }),
    option!(planner_config {
        cli: Cli::Flag("planner-config"),
        python: Keyword,
        group: Run,
        kind: Kind::Json(JsonObject::PlannerConfig),
        value_name: "PATH|JSON",
        doc: "Planner in the loop: a planner config (YAML or JSON file, or inline JSON) whose \
              planner adds and removes workers at scaling ticks (offline replay of mooncake \
              or dynamo traces and synthetic workloads; default: none)",
    }),
    option!(benchmark_granularity {
        python: Keyword,
        group: Run,
        kind: Kind::Int,
        default: DefaultInt(8),
        doc: "Planner benchmark sweep points (used only with a planner)",
    }),
    front!(scaling_policy {
        python: Keyword,
        group: Run,
        kind: Kind::PythonObject,
        doc: "A Python scaling policy the run calls at scaling ticks instead of dynosim's \
              planner",
    }),
    front!(aiperf_dir {
        cli: Cli::Flag("aiperf-dir"),
        python: Keyword,
        group: Outputs,
        kind: Kind::Path,
        value_name: "DIR",
        doc: "Also write the run as an AIPerf run directory: profile_export_aiperf.json, \
              profile_export_aiperf.csv and profile_export.jsonl, readable by AIPerf's tools \
              such as `aiperf plot` (created if missing; dynosim only; default: none)",
    }),
    front!(html_report {
        cli: Cli::Flag("html-report"),
        python: Keyword,
        group: Outputs,
        kind: Kind::Path,
        value_name: "PATH",
        doc: "Also write an HTML report: latency distributions, throughput, queue depth, \
              per-worker load and KV-cache use over model time, prefix reuse and the \
              configuration, in one file that opens with no network (dynosim only; default: \
              none)",
    }),
    front!(quiet {
        cli: Cli::Flag("quiet"),
        group: Outputs,
        kind: Kind::Switch,
        default: Fallback::Off,
        doc: "Print neither the progress bar (shown on stderr when it is a terminal) nor the \
              summary table; errors and warnings are still printed (dynosim only)",
    }),
    front!(progress {
        cli: Cli::Flag("progress"),
        group: Outputs,
        default: DefaultText("auto"),
        value_name: "PROGRESS",
        choices: &[
            Choice {
                name: "auto",
                doc: "A bar when stderr is a terminal, lines otherwise"
            },
            Choice::named("bar"),
            Choice::named("lines"),
            Choice::named("off"),
        ],
        doc: "How a run shows its progress on stderr: auto (a bar on a terminal, otherwise a \
              line after 5 s and then every 10 s), bar, lines or off (dynosim only; default: \
              auto)",
    }),
    front!(progress_every {
        cli: Cli::Flag("progress-every"),
        group: Outputs,
        kind: Kind::Float,
        default: DefaultFloat(10.0),
        value_name: "SECONDS",
        doc: "Seconds between progress lines (--progress lines, or auto when stderr is not a \
              terminal), from 0.1 to 86400; the first line comes after half of it (dynosim \
              only)",
    }),
    option!(max_sim_time_seconds {
        cli: Cli::Flag("max-sim-time-seconds"),
        group: Run,
        kind: Kind::Float,
        value_name: "FLOAT",
        doc: "Stop the replay once the simulated clock would pass this many seconds, leaving \
              in-flight requests incomplete (any run: planner, synthetic, online; default: no \
              cap)",
    }),
    option!(max_sim_time_ms {
        python: Keyword,
        group: Run,
        kind: Kind::Float,
        doc: "The Python API's cap on simulated time, in milliseconds (not with \
              max_sim_time_seconds)",
    }),
    option!(sla_ttft_ms {
        cli: Cli::Flag("sla-ttft-ms"),
        python: Keyword,
        sweep: true,
        group: Goals,
        kind: Kind::Float,
        value_name: "FLOAT",
        doc: "Goodput SLA: max time to first token (ms); any SLA adds goodput_* keys to the \
              report (default: none)",
    }),
    option!(sla_itl_ms {
        cli: Cli::Flag("sla-itl-ms"),
        python: Keyword,
        sweep: true,
        group: Goals,
        kind: Kind::Float,
        value_name: "FLOAT",
        doc: "Goodput SLA: max mean inter-token latency of a request, (e2e - ttft)/(osl - 1) \
              (ms) (default: none)",
    }),
    option!(sla_e2e_ms {
        cli: Cli::Flag("sla-e2e-ms"),
        python: Keyword,
        sweep: true,
        group: Goals,
        kind: Kind::Float,
        value_name: "FLOAT",
        doc: "Goodput SLA: max end-to-end latency (ms) (default: none)",
    }),
    front!(aic_perf_config {
        python: Keyword,
        group: Aic,
        kind: Kind::PythonObject,
        doc: "The AIC settings as an AicPerfConfig or a dict of its fields",
    }),
];

/// The replay functions of the Python API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayFunction {
    /// `run_trace_replay(trace_files, *, ...)`.
    Trace,
    /// `run_synthetic_trace_replay(input_tokens, output_tokens, request_count, *, ...)`.
    Synthetic,
}

impl ReplayFunction {
    /// The function's Python name.
    pub fn name(self) -> &'static str {
        match self {
            ReplayFunction::Trace => "run_trace_replay",
            ReplayFunction::Synthetic => "run_synthetic_trace_replay",
        }
    }

    /// Its keyword-only parameters, in the reference's order: the deployment and arrival
    /// keywords both take, the function's own, then the goals, planner and outputs both take.
    pub fn keywords(self) -> Vec<&'static str> {
        let own = match self {
            ReplayFunction::Trace => TRACE_KEYWORDS,
            ReplayFunction::Synthetic => SYNTHETIC_KEYWORDS,
        };
        [SHARED_FIRST_KEYWORDS, own, SHARED_LAST_KEYWORDS].concat()
    }
}

/// The keywords both replay functions start with.
const SHARED_FIRST_KEYWORDS: &[&str] = &[
    "extra_engine_args",
    "prefill_engine_args",
    "decode_engine_args",
    "router_config",
    "aic_perf_config",
    "num_workers",
    "num_prefill_workers",
    "num_decode_workers",
    "replay_concurrency",
    "replay_mode",
    "router_mode",
    "arrival_speedup_ratio",
];

/// `run_trace_replay`'s own keywords.
const TRACE_KEYWORDS: &[&str] = &[
    "trace_block_size",
    "trace_format",
    "trace_shared_prefix_ratio",
    "trace_num_prefix_groups",
    "report_jsonl_path",
    "max_sim_time_ms",
];

/// `run_synthetic_trace_replay`'s own keywords.
const SYNTHETIC_KEYWORDS: &[&str] = &[
    "request_rate",
    "arrival_interval_ms",
    "arrival_seed",
    "turns_per_session",
    "shared_prefix_ratio",
    "num_prefix_groups",
    "inter_turn_delay_ms",
    "input_tokens_stddev",
    "output_tokens_stddev",
    "random_range_ratio",
    "length_seed",
];

/// The keywords both replay functions end with.
const SHARED_LAST_KEYWORDS: &[&str] = &[
    "model_name",
    "sla_ttft_ms",
    "sla_itl_ms",
    "sla_e2e_ms",
    "planner_config",
    "benchmark_granularity",
    "router_seed",
    "aiperf_dir",
    "html_report",
    "scaling_policy",
];
