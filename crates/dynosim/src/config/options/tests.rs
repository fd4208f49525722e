use super::*;
use crate::config::{
    ArrivalMode, ArrivalProcess, Deployment, EngineArgs, LengthSpread, ReplayMode, ReplaySpec,
    RouterConfig, RouterMode, Sla, SyntheticSpec, TraceFormat, WorkerType, WorkloadSpec,
};

/// A valid one-file trace replay.
fn trace() -> ReplayOptions {
    ReplayOptions {
        trace_files: vec![PathBuf::from("t.jsonl")],
        ..ReplayOptions::default()
    }
}

/// A valid synthetic replay at a fixed interval.
fn synthetic() -> ReplayOptions {
    ReplayOptions {
        input_tokens: Some(100),
        output_tokens: Some(10),
        request_count: Some(5),
        arrival_interval_ms: Some(2.0),
        ..ReplayOptions::default()
    }
}

fn spec(options: ReplayOptions) -> ReplaySpec {
    options.into_spec().unwrap_or_else(|e| panic!("{e}"))
}

fn assert_error(options: ReplayOptions, expected: &str) {
    let error = options.clone().into_spec().expect_err(expected);
    assert_eq!(error.kind(), crate::error::ErrorKind::Usage);
    assert_eq!(error.message(), expected, "options: {options:?}");
}

fn two_files() -> Vec<PathBuf> {
    vec![PathBuf::from("a.jsonl"), PathBuf::from("b.jsonl")]
}

// ---- front checks (frontend.md §1.3), in order ----

#[test]
fn dynamo_format_needs_a_file() {
    assert_error(
        ReplayOptions {
            trace_format: "dynamo".into(),
            ..synthetic()
        },
        "--trace-format=dynamo requires at least one trace file",
    );
}

#[test]
fn other_formats_take_one_file() {
    assert_error(
        ReplayOptions {
            trace_files: two_files(),
            ..trace()
        },
        "--trace-format=mooncake requires exactly one trace file",
    );
}

#[test]
fn trace_or_synthetic_but_not_both() {
    let expected =
        "provide either trace_file or all of --input-tokens/--output-tokens/--request-count";
    assert_error(ReplayOptions::default(), expected);
    assert_error(
        ReplayOptions {
            turns_per_session: 2,
            ..trace()
        },
        expected,
    );
    assert_error(
        ReplayOptions {
            input_tokens: Some(5),
            ..trace()
        },
        expected,
    );
    assert_error(
        ReplayOptions {
            inter_turn_delay_ms: -1.0,
            ..trace()
        },
        expected,
    );
}

#[test]
fn synthetic_needs_all_three_sizes() {
    assert_error(
        ReplayOptions {
            request_count: None,
            ..synthetic()
        },
        "synthetic replay requires --input-tokens, --output-tokens, and --request-count",
    );
    assert_error(
        ReplayOptions {
            shared_prefix_ratio: 0.5,
            ..ReplayOptions::default()
        },
        "synthetic replay requires --input-tokens, --output-tokens, and --request-count",
    );
}

#[test]
fn synthetic_needs_exactly_one_load_controller() {
    let expected = "synthetic replay requires exactly one of --replay-concurrency, \
                    --request-rate, or --arrival-interval-ms";
    assert_error(
        ReplayOptions {
            arrival_interval_ms: None,
            ..synthetic()
        },
        expected,
    );
    assert_error(
        ReplayOptions {
            request_rate: Some(1.0),
            ..synthetic()
        },
        expected,
    );
    assert_error(
        ReplayOptions {
            replay_concurrency: Some(0),
            ..synthetic()
        },
        expected,
    );
}

#[test]
fn rate_and_interval_are_synthetic_only() {
    let expected = "--request-rate and --arrival-interval-ms only apply to synthetic replay";
    assert_error(
        ReplayOptions {
            request_rate: Some(1.0),
            ..trace()
        },
        expected,
    );
    assert_error(
        ReplayOptions {
            arrival_interval_ms: Some(1.0),
            ..trace()
        },
        expected,
    );
}

#[test]
fn applied_compute_agentic_needs_concurrency() {
    assert_error(
        ReplayOptions {
            trace_format: "applied_compute_agentic".into(),
            ..trace()
        },
        "--trace-format=applied_compute_agentic requires --replay-concurrency because the \
         source traces do not include first-turn timestamps",
    );
}

#[test]
fn report_jsonl_rules() {
    // Unlike the reference, records are given with a planner.
    let planned = spec(ReplayOptions {
        report_jsonl: Some("r.jsonl".into()),
        planner_config: Some(AGG_LOAD.into()),
        ..trace()
    });
    assert!(planned.capture_requests && planned.planner.is_some());
    assert_error(
        ReplayOptions {
            report_jsonl: Some("r.jsonl".into()),
            ..synthetic()
        },
        "--report-jsonl currently only supports trace-file replay",
    );
}

#[test]
fn max_sim_time_rules() {
    // A time cap goes with every kind of run: a planner, a synthetic workload, online.
    let planner = r#"{"mode":"agg","optimization_target":"load","decode_scale_up_kv_rate":60,"decode_scale_down_kv_rate":20}"#;
    for options in [
        ReplayOptions {
            planner_config: Some(planner.into()),
            ..trace()
        },
        synthetic(),
        ReplayOptions {
            replay_mode: "online".into(),
            ..trace()
        },
    ] {
        let capped = spec(ReplayOptions {
            max_sim_time_seconds: Some(1.0),
            ..options.clone()
        });
        assert_eq!(capped.max_sim_time_ms, Some(1000.0));
        let capped = spec(ReplayOptions {
            max_sim_time_ms: Some(3.0),
            ..options
        });
        assert_eq!(capped.max_sim_time_ms, Some(3.0));
    }
    assert_error(
        ReplayOptions {
            max_sim_time_seconds: Some(1.0),
            max_sim_time_ms: Some(5.0),
            ..trace()
        },
        "--max-sim-time-seconds and max_sim_time_ms cannot both be set; give one cap",
    );
    assert_error(
        ReplayOptions {
            max_sim_time_seconds: Some(-1.0),
            ..trace()
        },
        "--max-sim-time-seconds: max_sim_time_seconds must be a finite, non-negative value, \
         got -1",
    );
    assert_error(
        ReplayOptions {
            max_sim_time_seconds: Some(f64::NAN),
            ..trace()
        },
        "--max-sim-time-seconds: max_sim_time_seconds must be a finite, non-negative value, \
         got NaN",
    );
    assert_error(
        ReplayOptions {
            max_sim_time_ms: Some(f64::INFINITY),
            ..trace()
        },
        "max_sim_time_ms: max_sim_time_ms must be a finite, non-negative value, got inf",
    );
    assert_eq!(
        spec(ReplayOptions {
            max_sim_time_seconds: Some(2.5),
            ..trace()
        })
        .max_sim_time_ms,
        Some(2500.0)
    );
    assert_eq!(
        spec(ReplayOptions {
            max_sim_time_ms: Some(7.0),
            ..trace()
        })
        .max_sim_time_ms,
        Some(7.0)
    );
    assert_eq!(
        spec(ReplayOptions {
            max_sim_time_seconds: Some(0.0),
            ..trace()
        })
        .max_sim_time_ms,
        Some(0.0)
    );
}

#[test]
fn json_options_are_parsed_with_their_flag() {
    assert_error(
        ReplayOptions {
            extra_engine_args: Some(r#"{"dp_size":0}"#.into()),
            ..trace()
        },
        "--extra-engine-args: dp_size: must be at least 1, got 0",
    );
    assert_error(
        ReplayOptions {
            decode_engine_args: Some("[]".into()),
            ..trace()
        },
        "--decode-engine-args: engine-args must be a JSON object",
    );
    assert_error(
        ReplayOptions {
            router_config: Some(r#"{"router_temperature":-1}"#.into()),
            ..trace()
        },
        "--router-config: router_temperature must be greater than or equal to 0, got -1",
    );
    // JSON options are read before the worker checks that follow.
    assert_error(
        ReplayOptions {
            extra_engine_args: Some(r#"{"engine_type":"bogus"}"#.into()),
            num_workers: 0,
            ..trace()
        },
        "--extra-engine-args: Invalid engine_type 'bogus'. Must be 'vllm', 'sglang', or 'trtllm'.",
    );
    // Round robin accepts and keeps a router config.
    let spec = spec(ReplayOptions {
        router_config: Some(r#"{"router_temperature":0.5}"#.into()),
        ..trace()
    });
    assert_eq!(spec.router_config.unwrap().router_temperature, 0.5);
}

#[test]
fn router_policy_files_are_read_at_parse_time() {
    assert_error(
        ReplayOptions {
            router_policy_config: Some("p.yaml".into()),
            router_config: Some("[1]".into()),
            ..trace()
        },
        "--router-config must contain a JSON object",
    );
    assert_error(
        ReplayOptions {
            router_policy_config: Some("p.yaml".into()),
            ..trace()
        },
        "--router-policy-config: failed to read router policy config p.yaml: No such file \
         or directory (os error 2)",
    );
    let path = std::env::temp_dir().join(format!("dynosim-opts-{}.yaml", std::process::id()));
    std::fs::write(
        &path,
        "models:\n  m:\n    default_policy_family: f\n    uncached_isl_buckets: \
         [{min_tokens: 0, bucket: b}]\n    policy_classes: [{name: c, policy_family: f, \
         cache_bucket: b, quantum: 1, prefill_busy_threshold: 5}]\n",
    )
    .unwrap();
    let with_file = |router_config: Option<&str>| ReplayOptions {
        router_policy_config: Some(path.to_str().unwrap().into()),
        router_config: router_config.map(Into::into),
        router_mode: "kv_router".into(),
        model_name: Some("m".into()),
        router_seed: 9,
        num_workers: 2,
        ..trace()
    };
    // The flag's path replaces one named inside the JSON (which is never read).
    let spec = spec(with_file(Some(
        r#"{"router_policy_config":"/nonexistent.yaml","router_temperature":0.5}"#,
    )));
    let config = spec.router_config.unwrap();
    assert_eq!(config.router_temperature, 0.5);
    assert_eq!(config.router_seed, 9);
    let profile = config.policy_profile();
    assert_eq!(profile.class(0).prefill_busy_threshold, Some(5));
    assert_error(
        with_file(Some(r#"{"router_temperature":-1}"#)),
        "--router-config: router_temperature must be greater than or equal to 0, got -1",
    );
    std::fs::write(&path, "models: {}\n").unwrap();
    assert_error(
        with_file(None),
        "--router-policy-config: invalid router policy config: router policy config must \
         define a root profile or at least one model profile",
    );
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn aic_flags() {
    assert_error(
        ReplayOptions {
            aic_backend: Some("vllm".into()),
            ..trace()
        },
        "AIC replay modeling requires --aic-system, --aic-model-path",
    );
    assert_error(
        ReplayOptions {
            aic_tp_size: Some(2),
            ..trace()
        },
        "AIC replay modeling requires --aic-backend, --aic-system, --aic-model-path",
    );
    // A dtype meaning "model default" is not an AIC setting.
    spec(ReplayOptions {
        aic_gemm_dtype: Some(" Auto ".into()),
        aic_comm_dtype: Some("none".into()),
        ..trace()
    });
    let aic = || ReplayOptions {
        aic_backend: Some("vllm".into()),
        aic_system: Some("h200_sxm".into()),
        aic_model_path: Some("Qwen/Qwen3-32B".into()),
        ..trace()
    };
    assert_error(aic(), "aic_perf_config requires router_mode='kv_router'");
    let kv = |options: ReplayOptions| ReplayOptions {
        router_mode: "kv_router".into(),
        num_workers: 2,
        ..options
    };
    assert_error(
        kv(aic()),
        "aic_perf_config requires router_prefill_load_model='aic' in --router-config",
    );
    let with_model = |options: ReplayOptions| ReplayOptions {
        router_config: Some(r#"{"router_prefill_load_model":"aic"}"#.into()),
        ..kv(options)
    };
    let config = spec(with_model(ReplayOptions {
        aic_tp_size: Some(2),
        aic_kv_cache_dtype: Some("fp8".into()),
        aic_gemm_dtype: Some("auto".into()),
        ..aic()
    }))
    .router_config
    .unwrap()
    .aic
    .unwrap();
    assert_eq!(config.backend, "vllm");
    assert_eq!(config.model_path, "Qwen/Qwen3-32B");
    assert_eq!(config.tp_size, 2);
    assert_eq!(config.kv_cache_dtype.as_deref(), Some("fp8"));
    assert_eq!(config.gemm_dtype, None);
    for (options, expected) in [
        (
            ReplayOptions {
                aic_backend: Some("tensorrt".into()),
                ..aic()
            },
            "--aic-backend: unknown backend 'tensorrt'; aiconfigurator-core models: vllm, \
             sglang, trtllm",
        ),
        (
            ReplayOptions {
                aic_tp_size: Some(0),
                ..aic()
            },
            "--aic-tp-size: must be at least 1, got 0",
        ),
        (
            ReplayOptions {
                aic_nextn: Some(6),
                ..aic()
            },
            "--aic-nextn: must be between 1 and 5, got 6",
        ),
        (
            ReplayOptions {
                aic_nextn_accept_rates: Some("0.5,x".into()),
                ..aic()
            },
            "--aic-nextn-accept-rates: each rate must be a number in [0, 1], got 'x'",
        ),
        (
            ReplayOptions {
                aic_model_path: Some(" ".into()),
                ..aic()
            },
            "--aic-model-path: must not be empty",
        ),
    ] {
        assert_error(with_model(options), expected);
    }
}

#[test]
fn planner_flags() {
    assert_error(
        ReplayOptions {
            planner_config: Some("{}".into()),
            replay_mode: "online".into(),
            ..trace()
        },
        "--planner-config only supports --replay-mode=offline",
    );
    assert_error(
        ReplayOptions {
            planner_config: Some("{}".into()),
            trace_format: "mooncake-delta".into(),
            ..trace()
        },
        "--planner-config only supports --trace-format=mooncake or dynamo",
    );
    // The default mode is disagg, which needs both pools' engine arguments.
    assert_error(
        ReplayOptions {
            planner_config: Some("{}".into()),
            ..synthetic()
        },
        "--planner-config: disagg planner replay requires --prefill-engine-args and \
         --decode-engine-args (the planner's mode defaults to disagg; set mode: agg for \
         aggregated workers)",
    );
    let planned = spec(ReplayOptions {
        planner_config: Some(AGG_LOAD.into()),
        ..synthetic()
    });
    assert_eq!(planned.planner.unwrap().scale_interval_s, 5.0);
    // The KV router learns of joining and leaving workers.
    let planned = spec(ReplayOptions {
        planner_config: Some(AGG_LOAD.into()),
        router_mode: "kv_router".into(),
        ..synthetic()
    });
    assert!(planned.planner.is_some());
    // A ceiling below one worker's GPUs would scale to zero workers.
    assert_error(
        ReplayOptions {
            planner_config: Some(
                r#"{"mode":"agg","optimization_target":"load","decode_scale_up_kv_rate":60,
                    "decode_scale_down_kv_rate":20,"max_gpu_budget":1}"#
                    .into(),
            ),
            extra_engine_args: Some(r#"{"aic_tp_size":2}"#.into()),
            ..synthetic()
        },
        "--planner-config: max_gpu_budget 1 cannot hold a deployment of min_endpoint 1 (2 \
         GPUs for one worker): the planner would scale to zero workers",
    );
}

const AGG_LOAD: &str = r#"{"mode":"agg","optimization_target":"load",
    "decode_scale_up_kv_rate":60,"decode_scale_down_kv_rate":20}"#;

// ---- unsigned integers ----

#[test]
fn negative_integers_are_refused() {
    let cases = [
        (
            ReplayOptions {
                num_workers: -1,
                ..trace()
            },
            "--num-workers: must be a non-negative integer, got -1",
        ),
        (
            ReplayOptions {
                num_prefill_workers: -2,
                ..trace()
            },
            "--num-prefill-workers: must be a non-negative integer, got -2",
        ),
        (
            ReplayOptions {
                trace_block_size: Some(-1),
                ..trace()
            },
            "--trace-block-size: must be a non-negative integer, got -1",
        ),
        (
            ReplayOptions {
                trace_num_prefix_groups: -1,
                ..trace()
            },
            "--trace-num-prefix-groups: must be a non-negative integer, got -1",
        ),
        (
            ReplayOptions {
                request_count: Some(-1),
                ..synthetic()
            },
            "--request-count: must be a non-negative integer, got -1",
        ),
        (
            ReplayOptions {
                input_tokens: Some(-3),
                ..synthetic()
            },
            "--input-tokens: must be a non-negative integer, got -3",
        ),
        (
            ReplayOptions {
                arrival_seed: -1,
                ..synthetic()
            },
            "--arrival-seed: must be a non-negative integer, got -1",
        ),
        (
            ReplayOptions {
                turns_per_session: -1,
                ..synthetic()
            },
            "--turns-per-session: must be a non-negative integer, got -1",
        ),
        (
            ReplayOptions {
                num_prefix_groups: -1,
                ..synthetic()
            },
            "--num-prefix-groups: must be a non-negative integer, got -1",
        ),
        // Refused before the replay core's own checks.
        (
            ReplayOptions {
                num_workers: -1,
                sla_ttft_ms: Some(-1.0),
                ..trace()
            },
            "--num-workers: must be a non-negative integer, got -1",
        ),
    ];
    for (options, expected) in cases {
        assert_error(options, expected);
    }
    // Synthetic-only integers are not passed on (nor checked) in trace replay.
    spec(ReplayOptions {
        arrival_seed: -1,
        ..trace()
    });
    // replay_concurrency is signed in the reference: -1 is a range error.
    assert_error(
        ReplayOptions {
            replay_concurrency: Some(-1),
            num_workers: 0,
            ..trace()
        },
        "--replay-concurrency: replay_concurrency must be at least 1",
    );
}

// ---- replay core, trace mode ----

#[test]
fn worker_topology_rules() {
    assert_error(
        ReplayOptions {
            extra_engine_args: Some("{}".into()),
            prefill_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
            ..trace()
        },
        "--extra-engine-args: extra_engine_args cannot be combined with \
         prefill_engine_args/decode_engine_args",
    );
    assert_error(
        ReplayOptions { prefill_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()), ..trace() },
        "--prefill-engine-args: prefill_engine_args and decode_engine_args must be provided together",
    );
    let disagg = ReplayOptions {
        prefill_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
        decode_engine_args: Some(r#"{"worker_type":"decode"}"#.into()),
        ..trace()
    };
    assert_error(
        ReplayOptions {
            num_workers: 7,
            ..disagg.clone()
        },
        "--num-workers: num_workers is only used for aggregated replay; use \
         num_prefill_workers and num_decode_workers for disagg replay",
    );
    let spec = disagg
        .clone()
        .into_spec()
        .expect("a valid disaggregated replay");
    let Deployment::Disaggregated { prefill, decode } = spec.deployment else {
        panic!("disaggregated")
    };
    assert_eq!(prefill.engine.worker_type, WorkerType::Prefill);
    assert_eq!(decode.engine.worker_type, WorkerType::Decode);
    assert_eq!((prefill.workers, decode.workers), (1, 1));
    let with = |prefill: &str, decode: &str| ReplayOptions {
        prefill_engine_args: Some(prefill.into()),
        decode_engine_args: Some(decode.into()),
        ..trace()
    };
    for (options, message) in [
        (
            with(r#"{"worker_type":"prefill","engine_type":"trtllm"}"#, r#"{"worker_type":"decode","engine_type":"sglang"}"#),
            "--prefill-engine-args: trace replay disaggregation does not support TRT-LLM",
        ),
        (
            with(r#"{"worker_type":"prefill","engine_type":"sglang"}"#, r#"{"worker_type":"decode"}"#),
            "--decode-engine-args: trace replay disaggregation requires matching prefill/decode \
             engine_type, got Sglang and Vllm",
        ),
        (
            ReplayOptions { num_prefill_workers: 0, ..disagg.clone() },
            "--num-prefill-workers: trace replay requires num_prefill_workers >= 1",
        ),
        (
            ReplayOptions { num_decode_workers: 0, ..disagg.clone() },
            "--num-decode-workers: trace replay requires num_decode_workers >= 1",
        ),
        (
            with("{}", r#"{"worker_type":"decode"}"#),
            "--prefill-engine-args: trace replay requires prefill_engine_args.worker_type=prefill, \
             got Aggregated",
        ),
        (
            with(r#"{"worker_type":"decode"}"#, r#"{"worker_type":"prefill"}"#),
            "--prefill-engine-args: trace replay requires prefill_engine_args.worker_type=prefill, \
             got Decode",
        ),
        (
            ReplayOptions {
                replay_concurrency: Some(2),
                ..with(r#"{"worker_type":"prefill"}"#, r#"{"worker_type":"prefill"}"#)
            },
            "--decode-engine-args: concurrency replay requires decode_engine_args.worker_type=decode, \
             got Prefill",
        ),
        (
            with(r#"{"worker_type":"prefill","dp_size":2}"#, r#"{"worker_type":"decode"}"#),
            "--prefill-engine-args: offline disaggregated replay does not support attention DP; \
             prefill/decode dp_size must both be 1 (got prefill_dp_size=2, decode_dp_size=1)",
        ),
        (
            with(r#"{"worker_type":"prefill","block_size":16}"#, r#"{"worker_type":"decode","block_size":32}"#),
            "--decode-engine-args: trace replay requires matching prefill/decode block_size, got 16 \
             and 32",
        ),
        (
            with(r#"{"worker_type":"prefill","kv_transfer_bandwidth":0}"#, r#"{"worker_type":"decode"}"#),
            "--prefill-engine-args: invalid handoff transfer bandwidth 0 (kv_transfer_bandwidth \
             must be positive)",
        ),
        (
            ReplayOptions { trace_format: "mooncake-delta".into(), ..disagg.clone() },
            "--trace-format: mooncake-delta trace format is not supported for disaggregated replay",
        ),
        (
            ReplayOptions { trace_format: "agentic_mooncake".into(), ..disagg.clone() },
            "--trace-format: agentic_mooncake trace format is not supported for disaggregated \
             replay",
        ),
        (
            ReplayOptions { replay_mode: "online".into(), ..disagg.clone() },
            "--replay-mode: disagg replay only supports replay_mode='offline'",
        ),
    ] {
        assert_error(options, message);
    }
    // Synthetic workloads run disaggregated too; the decode pool may hold one worker.
    let generated = ReplayOptions {
        trace_files: Vec::new(),
        input_tokens: Some(100),
        output_tokens: Some(10),
        request_count: Some(5),
        request_rate: Some(1.0),
        num_prefill_workers: 3,
        router_mode: "kv_router".into(),
        ..disagg.clone()
    };
    let spec = generated
        .into_spec()
        .expect("a valid synthetic disaggregated replay");
    match spec.deployment {
        Deployment::Disaggregated { prefill, .. } => assert_eq!(prefill.workers, 3),
        other => panic!("{other:?}"),
    }
    assert_error(
        ReplayOptions {
            num_prefill_workers: 3,
            num_decode_workers: 3,
            sla_ttft_ms: Some(-1.0),
            ..trace()
        },
        "--num-prefill-workers: num_prefill_workers and num_decode_workers are only used for \
         disagg replay; use num_workers for aggregated replay",
    );
    assert_error(
        ReplayOptions {
            num_decode_workers: 2,
            ..synthetic()
        },
        "--num-decode-workers: num_prefill_workers and num_decode_workers are only used for \
         disagg replay; use num_workers for aggregated replay",
    );
}

#[test]
fn mode_names() {
    assert_error(
        ReplayOptions {
            router_mode: "bogus".into(),
            num_workers: 0,
            ..trace()
        },
        "--router-mode: router_mode must be either 'round_robin' or 'kv_router', got 'bogus'",
    );
    assert_error(
        ReplayOptions {
            replay_mode: "bogus".into(),
            num_workers: 0,
            ..trace()
        },
        "--replay-mode: replay_mode must be either 'offline' or 'online', got 'bogus'",
    );
    assert_eq!(spec(trace()).replay_mode, ReplayMode::Offline);
}

#[test]
fn online_rules() {
    let online = || ReplayOptions {
        replay_mode: "online".into(),
        ..trace()
    };
    assert_eq!(
        spec(online()).replay_mode,
        ReplayMode::Online { speed: 1.0 }
    );
    assert_eq!(
        spec(ReplayOptions {
            online_speed: Some(10.0),
            ..online()
        })
        .replay_mode,
        ReplayMode::Online { speed: 10.0 }
    );
    // The live KV router also serves one worker.
    assert_eq!(
        spec(ReplayOptions {
            router_mode: "kv_router".into(),
            ..online()
        })
        .router_mode,
        RouterMode::KvRouter
    );
    for speed in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let options = ReplayOptions {
            online_speed: Some(speed),
            ..online()
        };
        let message = options.into_spec().unwrap_err().message().to_string();
        assert!(
            message.starts_with("--online-speed: online_speed must be a finite positive"),
            "{message}"
        );
    }
    let offline_speed = ReplayOptions {
        online_speed: Some(2.0),
        ..trace()
    };
    let refused = [
        (
            offline_speed,
            "--online-speed: online_speed only applies to replay_mode='online'",
        ),
        (
            ReplayOptions {
                extra_engine_args: Some(r#"{"dp_size":2}"#.into()),
                ..online()
            },
            "--extra-engine-args: online replay only supports data_parallel_size=1, got 2",
        ),
        (
            ReplayOptions {
                trace_format: "mooncake-delta".into(),
                ..online()
            },
            "--trace-format: mooncake-delta trace format is not supported for online replay",
        ),
        (
            ReplayOptions {
                prefill_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
                decode_engine_args: Some(r#"{"worker_type":"decode"}"#.into()),
                ..online()
            },
            "--replay-mode: disagg replay only supports replay_mode='offline'",
        ),
    ];
    for (options, message) in refused {
        assert_error(options, message);
    }
    assert_eq!(
        synthetic_online_mode(),
        ReplayMode::Online { speed: 1.0 },
        "synthetic workloads replay live too"
    );
}

fn synthetic_online_mode() -> ReplayMode {
    spec(ReplayOptions {
        replay_mode: "online".into(),
        ..synthetic()
    })
    .replay_mode
}

#[test]
fn replay_mode_is_read_after_the_concurrency_check() {
    // The replay core reads the mode after the SLA and concurrency checks.
    assert_error(
        ReplayOptions {
            replay_mode: "bogus".into(),
            replay_concurrency: Some(0),
            ..trace()
        },
        "--replay-concurrency: replay_concurrency must be at least 1",
    );
}

#[test]
fn trace_formats() {
    assert_error(
        ReplayOptions { trace_format: "bogus".into(), num_workers: 0, ..trace() },
        "--trace-format: trace_format must be 'mooncake', 'mooncake-delta', \
         'agentic_mooncake'/'agentic-mooncake', 'applied_compute_agentic', or 'dynamo', got 'bogus'",
    );
    let format_of = |options: ReplayOptions| match options.into_spec().unwrap().workload {
        WorkloadSpec::Trace(trace) => trace.format,
        WorkloadSpec::Synthetic(_) => panic!("a trace replay"),
    };
    for (name, format) in [
        ("mooncake-delta", TraceFormat::MooncakeDelta),
        ("mooncake_delta", TraceFormat::MooncakeDelta),
        (
            "agentic_mooncake",
            TraceFormat::AgenticMooncake {
                expected_block_size: None,
            },
        ),
        (
            "agentic-mooncake",
            TraceFormat::AgenticMooncake {
                expected_block_size: None,
            },
        ),
        (
            "dynamo",
            TraceFormat::Dynamo {
                expected_block_size: None,
            },
        ),
    ] {
        let options = ReplayOptions {
            trace_format: name.into(),
            // Ignored by every format but applied_compute_agentic, even out of range.
            trace_shared_prefix_ratio: 5.0,
            ..trace()
        };
        assert_eq!(format_of(options), format, "{name}");
    }
    assert_eq!(
        format_of(ReplayOptions {
            trace_format: "dynamo".into(),
            trace_block_size: Some(16),
            ..trace()
        }),
        TraceFormat::Dynamo {
            expected_block_size: Some(16)
        }
    );
    assert_eq!(
        format_of(ReplayOptions {
            trace_format: "applied_compute_agentic".into(),
            replay_concurrency: Some(2),
            trace_shared_prefix_ratio: 0.25,
            trace_num_prefix_groups: 3,
            ..trace()
        }),
        TraceFormat::AppliedComputeAgentic {
            shared_prefix_ratio: 0.25,
            num_prefix_groups: 3
        }
    );
    assert_error(
        ReplayOptions {
            trace_format: "applied_compute_agentic".into(),
            replay_concurrency: Some(2),
            trace_shared_prefix_ratio: 1.5,
            ..trace()
        },
        "--trace-shared-prefix-ratio: shared_prefix_ratio must be between 0.0 and 1.0, got 1.5",
    );
    assert_error(
        ReplayOptions {
            trace_format: "applied_compute_agentic".into(),
            ..trace()
        },
        "--trace-format=applied_compute_agentic requires --replay-concurrency because \
         the source traces do not include first-turn timestamps",
    );
    assert_error(
        ReplayOptions {
            trace_format: "agentic_mooncake".into(),
            replay_concurrency: Some(2),
            ..trace()
        },
        "--replay-concurrency: agentic_mooncake trace format is not supported with replay_concurrency",
    );
}

#[test]
fn sla_bounds() {
    assert_error(
        ReplayOptions {
            sla_e2e_ms: Some(-5.0),
            ..trace()
        },
        "--sla-e2e-ms: sla_e2e_ms must be a finite, non-negative value, got -5",
    );
    assert_error(
        ReplayOptions {
            sla_ttft_ms: Some(f64::NAN),
            ..trace()
        },
        "--sla-ttft-ms: sla_ttft_ms must be a finite, non-negative value, got NaN",
    );
    assert_error(
        ReplayOptions {
            sla_itl_ms: Some(f64::INFINITY),
            sla_e2e_ms: Some(-1.0),
            ..trace()
        },
        "--sla-itl-ms: sla_itl_ms must be a finite, non-negative value, got inf",
    );
    // The cap on simulated time is checked first.
    assert_error(
        ReplayOptions {
            sla_ttft_ms: Some(-1.0),
            max_sim_time_seconds: Some(-1.0),
            ..trace()
        },
        "--max-sim-time-seconds: max_sim_time_seconds must be a finite, non-negative value, \
         got -1",
    );
    let sla = spec(ReplayOptions {
        sla_ttft_ms: Some(0.0),
        sla_itl_ms: Some(5.0),
        sla_e2e_ms: Some(9.0),
        ..trace()
    })
    .sla;
    assert_eq!(
        sla,
        Sla {
            ttft_ms: Some(0.0),
            itl_ms: Some(5.0),
            e2e_ms: Some(9.0)
        }
    );
}

#[test]
fn concurrency_must_be_positive() {
    assert_error(
        ReplayOptions {
            replay_concurrency: Some(0),
            num_workers: 0,
            ..trace()
        },
        "--replay-concurrency: replay_concurrency must be at least 1",
    );
    assert_error(
        ReplayOptions {
            replay_concurrency: Some(0),
            router_mode: "kv_router".into(),
            ..trace()
        },
        "--replay-concurrency: replay_concurrency must be at least 1",
    );
}

#[test]
fn kv_router() {
    assert_error(
        ReplayOptions {
            router_mode: "kv_router".into(),
            num_workers: 0,
            ..trace()
        },
        "--router-mode: offline replay only supports router_mode=kv_router with more than one \
         worker/DP-rank target",
    );
    assert_error(
        ReplayOptions {
            router_mode: "kv_router".into(),
            extra_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
            ..trace()
        },
        "--router-mode: offline replay only supports router_mode=kv_router with more than one \
         worker/DP-rank target",
    );
    // Two workers, or two ranks of one worker, are enough; the router gets a default
    // config carrying the seed.
    let config = spec(ReplayOptions {
        router_mode: "kv_router".into(),
        num_workers: 2,
        router_seed: 5,
        ..trace()
    })
    .router_config
    .unwrap();
    assert_eq!(
        config,
        RouterConfig {
            router_seed: 5,
            ..RouterConfig::default()
        }
    );
    spec(ReplayOptions {
        router_mode: "kv_router".into(),
        extra_engine_args: Some(r#"{"dp_size":2}"#.into()),
        ..trace()
    });
    assert_error(
        ReplayOptions {
            router_mode: "kv_router".into(),
            num_workers: 2,
            router_seed: -1,
            ..trace()
        },
        "--router-seed: must be a non-negative integer, got -1",
    );
    assert_error(
        ReplayOptions {
            router_mode: "kv_router".into(),
            num_workers: 2,
            router_config: Some(r#"{"router_prefill_load_model":"aic"}"#.into()),
            ..trace()
        },
        "--router-config: router_prefill_load_model='aic' requires aic_perf_config",
    );
    // An empty model name is refused in every mode.
    assert_error(
        ReplayOptions {
            model_name: Some(String::new()),
            ..trace()
        },
        "--model-name: model_name must be non-empty",
    );
    // Checks that follow the target rule still come first.
    assert_error(
        ReplayOptions {
            router_mode: "kv_router".into(),
            num_workers: 2,
            trace_block_size: Some(0),
            ..trace()
        },
        "--trace-block-size: trace_block_size must be greater than 0",
    );
}

#[test]
fn worker_count_and_role() {
    assert_error(
        ReplayOptions {
            num_workers: 0,
            arrival_speedup_ratio: 0.0,
            ..trace()
        },
        "--num-workers: trace replay requires num_workers >= 1",
    );
    assert_error(
        ReplayOptions {
            num_workers: 0,
            replay_concurrency: Some(2),
            ..trace()
        },
        "--num-workers: concurrency replay requires num_workers >= 1",
    );
    assert_error(
        ReplayOptions {
            extra_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
            trace_block_size: Some(0),
            ..trace()
        },
        "--extra-engine-args: trace replay only supports aggregated workers, got Prefill",
    );
    assert_error(
        ReplayOptions {
            extra_engine_args: Some(r#"{"is_decode":true}"#.into()),
            replay_concurrency: Some(1),
            ..trace()
        },
        "--extra-engine-args: concurrency replay only supports aggregated workers, got Decode",
    );
}

#[test]
fn trace_block_size_must_be_positive() {
    assert_error(
        ReplayOptions {
            trace_block_size: Some(0),
            arrival_speedup_ratio: 0.0,
            ..trace()
        },
        "--trace-block-size: trace_block_size must be greater than 0",
    );
    assert_error(
        ReplayOptions {
            trace_block_size: Some(1 << 40),
            ..trace()
        },
        "--trace-block-size: trace_block_size is too large, got 1099511627776",
    );
}

#[test]
fn speedup_ratio_for_open_loop_traces() {
    for (ratio, shown) in [
        (0.0, "0"),
        (-1.0, "-1"),
        (f64::INFINITY, "inf"),
        (f64::NAN, "NaN"),
        (-0.0, "-0"),
    ] {
        assert_error(
            ReplayOptions {
                arrival_speedup_ratio: ratio,
                ..trace()
            },
            &format!(
                "--arrival-speedup-ratio: ratio must be a finite positive number, got {shown}"
            ),
        );
        // Closed-loop replay neither uses nor checks it (as in the reference).
        let spec = spec(ReplayOptions {
            arrival_speedup_ratio: ratio,
            replay_concurrency: Some(2),
            ..trace()
        });
        assert_eq!(spec.arrivals, ArrivalMode::Concurrency { limit: 2 });
    }
}

#[test]
fn trace_spec() {
    let spec = spec(ReplayOptions {
        num_workers: 3,
        arrival_speedup_ratio: 2.0,
        report_jsonl: Some("out.jsonl".into()),
        extra_engine_args: Some(r#"{"engine_type":"trtllm"}"#.into()),
        model_name: Some("m".into()),
        trace_shared_prefix_ratio: 1.5,
        ..trace()
    });
    match &spec.workload {
        WorkloadSpec::Trace(trace) => {
            assert_eq!(trace.files, vec![PathBuf::from("t.jsonl")]);
            assert_eq!(trace.format, TraceFormat::Mooncake);
            assert_eq!(trace.block_size, 512);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(spec.deployment.generating().workers, 3);
    assert_eq!(spec.deployment.generating().engine.block_size, 32);
    assert!(!spec.deployment.is_disaggregated());
    assert_eq!(spec.router_mode, RouterMode::RoundRobin);
    assert!(spec.router_config.is_none());
    assert_eq!(spec.arrivals, ArrivalMode::Timestamps { speedup: 2.0 });
    assert_eq!(spec.max_sim_time_ms, None);
    assert!(!spec.sla.is_set());
    assert!(spec.capture_requests);

    let spec = spec_with_block_size(Some(64));
    match spec.workload {
        WorkloadSpec::Trace(trace) => assert_eq!(trace.block_size, 64),
        other => panic!("{other:?}"),
    }
    assert_eq!(spec.deployment.generating().engine, EngineArgs::default());
    assert!(!spec.capture_requests);
}

fn spec_with_block_size(size: Option<i64>) -> ReplaySpec {
    spec(ReplayOptions {
        trace_block_size: size,
        ..trace()
    })
}

// ---- replay core, synthetic mode ----

#[test]
fn synthetic_sizes_must_be_positive() {
    for (options, expected) in [
        (
            ReplayOptions {
                input_tokens: Some(0),
                ..synthetic()
            },
            "--input-tokens: input_tokens must be at least 1",
        ),
        (
            ReplayOptions {
                output_tokens: Some(0),
                ..synthetic()
            },
            "--output-tokens: output_tokens must be at least 1",
        ),
        (
            ReplayOptions {
                request_count: Some(0),
                ..synthetic()
            },
            "--request-count: request_count must be at least 1",
        ),
        (
            ReplayOptions {
                input_tokens: Some(0),
                output_tokens: Some(0),
                ..synthetic()
            },
            "--input-tokens: input_tokens must be at least 1",
        ),
    ] {
        assert_error(options, expected);
    }
}

#[test]
fn synthetic_arrival_processes() {
    let poisson = |rate| ReplayOptions {
        arrival_interval_ms: None,
        request_rate: Some(rate),
        ..synthetic()
    };
    for (rate, shown) in [
        (0.0, "0"),
        (f64::NAN, "NaN"),
        (f64::INFINITY, "inf"),
        (-2.0, "-2"),
    ] {
        assert_error(
            poisson(rate),
            &format!("--request-rate: request_rate must be a finite positive number, got {shown}"),
        );
    }
    // The arrival process is checked before the request sizes.
    assert_error(
        ReplayOptions {
            input_tokens: Some(0),
            ..poisson(0.0)
        },
        "--request-rate: request_rate must be a finite positive number, got 0",
    );
    for (interval, shown) in [(-1.0, "-1"), (f64::INFINITY, "inf")] {
        assert_error(
            ReplayOptions { arrival_interval_ms: Some(interval), num_workers: 0, ..synthetic() },
            &format!(
                "--arrival-interval-ms: arrival_interval_ms must be a finite non-negative number, got {shown}"
            ),
        );
    }
    let spec = spec(ReplayOptions {
        arrival_seed: 7,
        ..poisson(10.0)
    });
    let WorkloadSpec::Synthetic(generated) = spec.workload else {
        panic!()
    };
    assert_eq!(
        generated.arrival_process,
        Some(ArrivalProcess::Poisson {
            rate: 10.0,
            seed: 7
        })
    );
    let spec = spec_of(ReplayOptions {
        arrival_interval_ms: Some(0.0),
        ..synthetic()
    });
    assert_eq!(
        spec.arrival_process,
        Some(ArrivalProcess::Interval { interval_ms: 0.0 })
    );
}

#[test]
fn length_spreads_reach_the_spec() {
    assert_eq!(spec_of(synthetic()).lengths, LengthSpread::Fixed);
    assert_eq!(
        spec_of(ReplayOptions {
            random_range_ratio: Some(0.8),
            ..synthetic()
        })
        .lengths,
        LengthSpread::Uniform {
            range_ratio: 0.8,
            seed: DEFAULT_LENGTH_SEED
        }
    );
    // The KV cache bounds drawn prompts: 16384 blocks of 64 tokens by default.
    assert_eq!(
        spec_of(ReplayOptions {
            output_tokens_stddev: Some(3.0),
            length_seed: Some(9),
            ..synthetic()
        })
        .lengths,
        LengthSpread::Normal {
            input_stddev: 0.0,
            output_stddev: 3.0,
            max_input_tokens: 16384 * 64,
            seed: 9
        }
    );
}

#[test]
fn length_spread_flags_are_checked() {
    let both = ReplayOptions {
        output_tokens_stddev: Some(3.0),
        random_range_ratio: Some(0.8),
        ..synthetic()
    };
    assert_error(
        both.clone(),
        "--output-tokens-stddev and --random-range-ratio cannot both be set: give AIPerf's \
         normal spread or vLLM's uniform range, not both",
    );
    assert_eq!(
        crate::config::spelling::python_message(&both.into_spec().unwrap_err()),
        "output_tokens_stddev and random_range_ratio cannot both be set: give AIPerf's \
         normal spread or vLLM's uniform range, not both"
    );
    assert_error(
        ReplayOptions {
            random_range_ratio: Some(0.8),
            ..trace()
        },
        "--random-range-ratio: length spreads only apply to synthetic replay (--input-tokens)",
    );
    assert_error(
        ReplayOptions {
            input_tokens_stddev: Some(1.0),
            ..trace()
        },
        "--input-tokens-stddev: length spreads only apply to synthetic replay \
         (--input-tokens)",
    );
    let seed_alone = ReplayOptions {
        length_seed: Some(1),
        ..synthetic()
    };
    assert_error(
        seed_alone.clone(),
        "--length-seed: length_seed needs a length spread: --input-tokens-stddev, \
         --output-tokens-stddev or --random-range-ratio",
    );
    assert_eq!(
        crate::config::spelling::python_message(&seed_alone.into_spec().unwrap_err()),
        "length_seed needs a length spread: input_tokens_stddev, output_tokens_stddev or \
         random_range_ratio"
    );
    for (ratio, shown) in [(1.5, "1.5"), (-0.1, "-0.1"), (f64::NAN, "NaN")] {
        assert_error(
            ReplayOptions {
                random_range_ratio: Some(ratio),
                ..synthetic()
            },
            &format!(
                "--random-range-ratio: random_range_ratio must be between 0.0 and 1.0, got \
                 {shown}"
            ),
        );
    }
    for (stddev, shown) in [(-1.0, "-1"), (f64::INFINITY, "inf"), (f64::NAN, "NaN")] {
        assert_error(
            ReplayOptions {
                input_tokens_stddev: Some(stddev),
                ..synthetic()
            },
            &format!(
                "--input-tokens-stddev: input_tokens_stddev must be a finite non-negative \
                 number, got {shown}"
            ),
        );
        assert_error(
            ReplayOptions {
                output_tokens_stddev: Some(stddev),
                ..synthetic()
            },
            &format!(
                "--output-tokens-stddev: output_tokens_stddev must be a finite \
                 non-negative number, got {shown}"
            ),
        );
    }
    assert_error(
        ReplayOptions {
            input_tokens_stddev: Some(100.0),
            extra_engine_args: Some(r#"{"num_gpu_blocks":4,"block_size":16}"#.into()),
            input_tokens: Some(20),
            ..synthetic()
        },
        "--input-tokens-stddev: input_tokens_stddev 100 is wider than the KV cache (64 \
         tokens): most prompts drawn could never be admitted",
    );
    assert_error(
        ReplayOptions {
            random_range_ratio: Some(0.5),
            length_seed: Some(-1),
            ..synthetic()
        },
        "--length-seed: must be a non-negative integer, got -1",
    );
}

fn spec_of(options: ReplayOptions) -> SyntheticSpec {
    match spec(options).workload {
        WorkloadSpec::Synthetic(synthetic) => synthetic,
        other => panic!("{other:?}"),
    }
}

#[test]
fn synthetic_session_settings() {
    // Checked only when they select the session generator (any of them above its default).
    assert_error(
        ReplayOptions {
            shared_prefix_ratio: 1.5,
            ..synthetic()
        },
        "--shared-prefix-ratio: shared_prefix_ratio must be between 0.0 and 1.0, got 1.5",
    );
    assert_error(
        ReplayOptions {
            turns_per_session: 3,
            shared_prefix_ratio: f64::NAN,
            ..synthetic()
        },
        "--shared-prefix-ratio: shared_prefix_ratio must be between 0.0 and 1.0, got NaN",
    );
    assert_error(
        ReplayOptions {
            turns_per_session: 2,
            inter_turn_delay_ms: -1.0,
            shared_prefix_ratio: 1.5,
            ..synthetic()
        },
        "--inter-turn-delay-ms: inter_turn_delay_ms must be a finite non-negative number, got -1",
    );
    assert_error(
        ReplayOptions {
            inter_turn_delay_ms: f64::INFINITY,
            ..synthetic()
        },
        "--inter-turn-delay-ms: inter_turn_delay_ms must be a finite non-negative number, got inf",
    );
    assert_error(
        ReplayOptions {
            turns_per_session: 0,
            inter_turn_delay_ms: 1.0,
            shared_prefix_ratio: 2.0,
            ..synthetic()
        },
        "--turns-per-session: turns_per_session must be at least 1",
    );
    // The simple generator ignores them: negative ratio and delay, zero turns.
    let simple = spec_of(ReplayOptions {
        shared_prefix_ratio: -0.1,
        inter_turn_delay_ms: -5.0,
        turns_per_session: 0,
        ..synthetic()
    });
    assert_eq!(
        (
            simple.turns_per_session,
            simple.shared_prefix_ratio,
            simple.inter_turn_delay_ms
        ),
        (1, 0.0, 0.0)
    );
}

#[test]
fn synthetic_speedup_ratio() {
    // Simple generator: checked after the worker checks, with the replay core's own name.
    assert_error(
        ReplayOptions {
            arrival_speedup_ratio: 0.0,
            ..synthetic()
        },
        "--arrival-speedup-ratio: arrival_speedup_ratio must be a finite positive number, got 0",
    );
    assert_error(
        ReplayOptions {
            arrival_speedup_ratio: 0.0,
            num_workers: 0,
            ..synthetic()
        },
        "--num-workers: trace replay requires num_workers >= 1",
    );
    // Session generator: checked while building sessions, before the worker checks.
    assert_error(
        ReplayOptions {
            arrival_speedup_ratio: 0.0,
            num_workers: 0,
            turns_per_session: 2,
            ..synthetic()
        },
        "--arrival-speedup-ratio: ratio must be a finite positive number, got 0",
    );
    // Closed loop: not used, not checked.
    let closed = ReplayOptions {
        arrival_interval_ms: None,
        replay_concurrency: Some(3),
        arrival_speedup_ratio: 0.0,
        ..synthetic()
    };
    let spec = spec(ReplayOptions {
        turns_per_session: 2,
        ..closed.clone()
    });
    assert_eq!(spec.arrivals, ArrivalMode::Concurrency { limit: 3 });
    spec_of(closed);
}

#[test]
fn synthetic_check_order() {
    // SLA bounds come before the mode names and the load controller.
    assert_error(
        ReplayOptions {
            sla_ttft_ms: Some(-1.0),
            router_mode: "bogus".into(),
            ..synthetic()
        },
        "--sla-ttft-ms: sla_ttft_ms must be a finite, non-negative value, got -1",
    );
    assert_error(
        ReplayOptions {
            router_mode: "bogus".into(),
            replay_concurrency: Some(0),
            arrival_interval_ms: None,
            ..synthetic()
        },
        "--router-mode: router_mode must be either 'round_robin' or 'kv_router', got 'bogus'",
    );
    assert_error(
        ReplayOptions {
            replay_concurrency: Some(0),
            arrival_interval_ms: None,
            input_tokens: Some(0),
            ..synthetic()
        },
        "--replay-concurrency: replay_concurrency must be at least 1",
    );
    assert_error(
        ReplayOptions {
            input_tokens: Some(0),
            replay_mode: "bogus".into(),
            ..synthetic()
        },
        "--input-tokens: input_tokens must be at least 1",
    );
    assert_error(
        ReplayOptions {
            replay_mode: "bogus".into(),
            num_workers: 0,
            ..synthetic()
        },
        "--replay-mode: replay_mode must be either 'offline' or 'online', got 'bogus'",
    );
    assert_error(
        ReplayOptions {
            router_mode: "kv_router".into(),
            ..synthetic()
        },
        "--router-mode: offline replay only supports router_mode=kv_router with more than one \
         worker/DP-rank target",
    );
    assert_error(
        ReplayOptions {
            num_workers: 0,
            replay_concurrency: Some(2),
            arrival_interval_ms: None,
            ..synthetic()
        },
        "--num-workers: concurrency replay requires num_workers >= 1",
    );
    assert_error(
        ReplayOptions {
            extra_engine_args: Some(r#"{"worker_type":"prefill"}"#.into()),
            ..synthetic()
        },
        "--extra-engine-args: trace replay only supports aggregated workers, got Prefill",
    );
}

#[test]
fn synthetic_spec() {
    let spec = spec(ReplayOptions {
        turns_per_session: 2,
        shared_prefix_ratio: 0.5,
        num_prefix_groups: 3,
        inter_turn_delay_ms: 10.0,
        arrival_speedup_ratio: 4.0,
        extra_engine_args: Some(r#"{"block_size":16}"#.into()),
        num_workers: 2,
        ..synthetic()
    });
    let WorkloadSpec::Synthetic(generated) = spec.workload.clone() else {
        panic!()
    };
    assert_eq!(
        generated,
        SyntheticSpec {
            input_tokens: 100,
            output_tokens: 10,
            request_count: 5,
            arrival_process: Some(ArrivalProcess::Interval { interval_ms: 2.0 }),
            turns_per_session: 2,
            shared_prefix_ratio: 0.5,
            num_prefix_groups: 3,
            inter_turn_delay_ms: 10.0,
            engine_block_size: 16,
            lengths: Default::default(),
        }
    );
    assert_eq!(spec.arrivals, ArrivalMode::Timestamps { speedup: 4.0 });
    assert_eq!(spec.deployment.generating().workers, 2);
    assert_eq!(spec.max_sim_time_ms, None);
    assert!(!spec.capture_requests);
    assert_eq!(spec_of(synthetic()).engine_block_size, 64);
}
