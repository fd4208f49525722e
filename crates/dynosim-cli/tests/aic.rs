//! AIC timing against aiconfigurator-core itself: runs the `dynosim` binary as a user would,
//! with `aic_*` engine args, and compares what it reports with the package's own answers.
//!
//! Needs a Python with aiconfigurator-core 0.12: `DYNOSIM_PYTHON`, else
//! `$HOME/.cache/dynosim-aic-venv/bin/python` (where `.ci/run` installs it), else `python3`.
//! Without one every test here says it is skipped and passes.
//!
//! Tables are cached under `$HOME/.cache/dynosim/aic/`, so only the first run pays for building
//! them (several seconds per configuration).

use std::process::Command;

use dynosim::aic::AicConfig;
use dynosim::aic::BlockEstimate;
use dynosim::config::EngineArgs;
use dynosim_aic_tables::{self as build, TableExtent};
use serde_json::{json, Value};

mod common;
use common::{AIC_ROUTER_FLAGS, ONE_REQUEST};

macro_rules! python_or_skip {
    ($test:expr) => {
        match common::aic_python_or_skip($test) {
            Some(python) => python,
            None => return,
        }
    };
}

fn engine_args(json: &Value) -> EngineArgs {
    EngineArgs::from_json("--extra-engine-args", &json.to_string()).expect("valid engine args")
}

/// The KV blocks per rank aiconfigurator-core estimates for `args` (which ask for an
/// estimate: no `num_gpu_blocks`), as the table build reports them.
fn estimated_blocks(python: &str, args: &EngineArgs) -> Option<usize> {
    let estimate: BlockEstimate = args.aic_block_estimate.clone().expect("estimate asked");
    let config = args.aic.clone().expect("aic");
    let (tables, _) = build::tables(
        python,
        &config,
        TableExtent::for_engine(args),
        Some(&estimate),
        &mut |_| {},
    )
    .expect("tables");
    tables.num_gpu_blocks
}

fn aic_config(json: &Value) -> AicConfig {
    engine_args(json).aic.expect("aic configured")
}

/// One synthetic request ([`ONE_REQUEST`]) with `engine` as its engine args, timed by AIC with
/// `python` (and, when given, `cache` as the table cache): the exit code and stderr.
fn one_aic_request(
    python: &str,
    engine: &str,
    cache: Option<&std::path::Path>,
) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dynosim"));
    command.env("DYNOSIM_PYTHON", python);
    if let Some(cache) = cache {
        command.env("DYNOSIM_CACHE_DIR", cache);
    }
    let out = command
        .args(ONE_REQUEST)
        .args(["--extra-engine-args", engine])
        .output()
        .expect("run dynosim");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a synthetic replay; returns the report JSON.
fn replay(python: &str, engine: &Value, isl: usize, osl: usize, requests: usize) -> Value {
    let dir = tempfile::tempdir().expect("temp dir");
    let report = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_dynosim"))
        .env("DYNOSIM_PYTHON", python)
        .args([
            "--input-tokens",
            &isl.to_string(),
            "--output-tokens",
            &osl.to_string(),
            "--request-count",
            &requests.to_string(),
            "--replay-concurrency",
            &requests.to_string(),
            "--extra-engine-args",
            &engine.to_string(),
            "--report-json",
            report.to_str().expect("utf-8 path"),
        ])
        .output()
        .expect("run dynosim");
    assert!(
        out.status.success(),
        "dynosim failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&report).expect("report written"))
        .expect("report JSON")
}

fn number(report: &Value, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing"))
}

fn assert_close(label: &str, got: f64, want: f64, tolerance: f64) {
    let error = (got / want - 1.0).abs();
    assert!(
        error <= tolerance,
        "{label}: dynosim {got} vs aiconfigurator-core {want} ({:.3}% off)",
        error * 100.0
    );
}

/// The package's direct answers at the given points.
fn direct(
    python: &str,
    config: &AicConfig,
    prefill: &[[usize; 3]],
    decode: &[[usize; 2]],
) -> (Vec<f64>, Vec<f64>) {
    let out = build::sample(
        python,
        config,
        json!({"prefill_points": prefill, "decode_points": decode}),
    )
    .expect("package answers");
    let column = |key: &str, index: usize| -> Vec<f64> {
        out[key]
            .as_array()
            .expect("rows")
            .iter()
            .map(|row| row[index].as_f64().expect("ms"))
            .collect()
    };
    (column("prefill", 3), column("decode", 2))
}

/// One engine configuration: a lone request's TTFT is prefill(1, L, 0) + decode(1, L, 2), and
/// B requests decoding in lock step have a mean ITL equal to the package's decode latency
/// averaged over the contexts they pass through, for batches either side of a tile step.
fn check_configuration(python: &str, engine: Value, batches: &[usize]) {
    let config = aic_config(&engine);
    let label = format!(
        "{} {} tp{}",
        config.model_path, config.backend, config.tp_size
    );

    // One call to the package for every point this configuration checks.
    let (lone_isl, isl, osl) = (1000, 128, 24);
    let mut decode_points = vec![[1, lone_isl]];
    for &batch in batches {
        decode_points.extend((1..osl).map(|k| [batch, isl + k]));
    }
    let (prefill, decode) = direct(python, &config, &[[1, lone_isl, 0]], &decode_points);

    let report = replay(python, &engine, lone_isl, 8, 1);
    assert_close(
        &format!("{label}: lone TTFT"),
        number(&report, "mean_ttft_ms"),
        prefill[0] + decode[0].max(1.0),
        0.01,
    );

    for (index, &batch) in batches.iter().enumerate() {
        let report = replay(python, &engine, isl, osl, batch);
        let steps = &decode[1 + index * (osl - 1)..1 + (index + 1) * (osl - 1)];
        let want = steps.iter().map(|ms| ms.max(1.0)).sum::<f64>() / steps.len() as f64;
        assert_close(
            &format!("{label}: lock-step mean ITL at batch {batch}"),
            number(&report, "mean_itl_ms"),
            want,
            0.01,
        );
    }
}

fn engine(backend: &str, model: &str, tp: usize) -> Value {
    json!({
        "engine_type": backend,
        "aic_backend": backend,
        "aic_model_path": model,
        "aic_tp_size": tp,
        "num_gpu_blocks": 20000,
        "max_num_seqs": 64,
    })
}

const QWEN: &str = "Qwen/Qwen3-32B";
const LLAMA: &str = "meta-llama/Meta-Llama-3.1-8B";

#[test]
fn vllm_qwen_tp1_matches_the_package() {
    let python = python_or_skip!("vllm_qwen_tp1_matches_the_package");
    // Qwen3-32B vLLM decode steps up between batch 15 and 16 and between 48 and 49.
    check_configuration(&python, engine("vllm", QWEN, 1), &[15, 16, 48, 49]);
}

#[test]
fn vllm_llama_tp2_matches_the_package() {
    let python = python_or_skip!("vllm_llama_tp2_matches_the_package");
    check_configuration(&python, engine("vllm", LLAMA, 2), &[7, 8, 64]);
}

#[test]
fn sglang_qwen_tp2_matches_the_package() {
    let python = python_or_skip!("sglang_qwen_tp2_matches_the_package");
    // Qwen3-32B SGLang TP2 decode steps between 14, 15 and 16.
    check_configuration(&python, engine("sglang", QWEN, 2), &[14, 15, 16]);
}

#[test]
fn trtllm_llama_tp1_matches_the_package() {
    let python = python_or_skip!("trtllm_llama_tp1_matches_the_package");
    // Llama-3.1-8B TRT-LLM decode steps between 7 and 8.
    check_configuration(&python, engine("trtllm", LLAMA, 1), &[7, 8]);
}

#[test]
fn trtllm_qwen_tp2_and_sglang_llama_tp1_match_the_package() {
    let python = python_or_skip!("trtllm_qwen_tp2_and_sglang_llama_tp1_match_the_package");
    check_configuration(&python, engine("trtllm", QWEN, 2), &[8, 9]);
    check_configuration(&python, engine("sglang", LLAMA, 1), &[5, 6]);
}

#[test]
fn kv_capacity_is_estimated_per_rank_when_num_gpu_blocks_is_absent() {
    let python = python_or_skip!("kv_capacity_is_estimated_per_rank_when_num_gpu_blocks_is_absent");
    // Goldens from aiconfigurator-core 0.12.0's estimate_num_gpu_blocks (Qwen3-32B, block 64,
    // max_num_batched_tokens 8192; ../shared/spec/aic.md §2).
    for (backend, tp, want) in [("vllm", 1, 3904), ("trtllm", 2, 12193)] {
        let json = json!({
            "aic_backend": backend, "aic_model_path": QWEN, "aic_tp_size": tp,
            "block_size": 64, "max_num_seqs": 8,
        });
        let blocks = estimated_blocks(&python, &engine_args(&json));
        assert_eq!(blocks, Some(want), "{backend} tp{tp}");
    }
    // And a run without num_gpu_blocks works end to end.
    let engine = json!({"aic_backend": "vllm", "aic_model_path": QWEN, "max_num_seqs": 8});
    let report = replay(&python, &engine, 512, 4, 4);
    assert_eq!(number(&report, "completed_requests"), 4.0);
}

#[test]
fn unknown_names_are_usage_errors_listing_what_the_package_has() {
    let python = python_or_skip!("unknown_names_are_usage_errors_listing_what_the_package_has");
    for (engine, expected) in [
        (
            json!({"aic_backend": "vllm", "aic_model_path": QWEN, "num_gpu_blocks": 100,
                   "aic_backend_version": "0.19.0"}),
            "aic_backend_version '0.19.0' is not in aiconfigurator-core for vllm on h200_sxm; \
             it has: 0.24.0, 0.27.0",
        ),
        (
            json!({"aic_backend": "vllm", "aic_model_path": QWEN, "num_gpu_blocks": 100,
                   "aic_system": "h900"}),
            "aic_system 'h900' is not in aiconfigurator-core; it has: ",
        ),
        (
            json!({"aic_backend": "vllm", "aic_model_path": "someone/NotAModel",
                   "num_gpu_blocks": 100}),
            "aic_model_path 'someone/NotAModel' is neither a model bundled with \
             aiconfigurator-core nor a local directory holding config.json",
        ),
    ] {
        let (code, stderr) = one_aic_request(&python, &engine.to_string(), None);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("error: --extra-engine-args: {expected}")),
            "{stderr}"
        );
    }
}

#[test]
fn a_missing_package_is_one_line_saying_how_to_install_it() {
    // Needs no package: an interpreter without it (or none at all).
    let dir = tempfile::tempdir().expect("temp dir");
    for python in [
        "/nonexistent/python3".to_string(),
        which_python_without_aic(),
    ] {
        if python.is_empty() {
            continue;
        }
        let (code, stderr) = one_aic_request(
            &python,
            r#"{"aic_backend":"vllm","aic_model_path":"Qwen/Qwen3-32B","num_gpu_blocks":9}"#,
            Some(dir.path()),
        );
        assert_eq!(code, Some(1), "{python}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{python}: {stderr}");
        assert!(
            stderr.contains("pip install 'dynosim[aic]'"),
            "{python}: {stderr}"
        );
    }
}

#[test]
fn a_configuration_the_package_has_no_data_for_fails_again_without_the_builder() {
    let python = python_or_skip!(
        "a_configuration_the_package_has_no_data_for_fails_again_without_the_builder"
    );
    // Hopper has no FP4 tensor cores: the package has no flops for nvfp4 on an H200.
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = dir.path().join("cache");
    // A module in the working directory named like the package's own dependency must not
    // shadow it: the builder does not import from where dynosim runs.
    std::fs::write(
        dir.path().join("yaml.py"),
        "raise RuntimeError('the working directory was imported from')\n",
    )
    .expect("write");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_dynosim"))
            .current_dir(dir.path())
            .env("DYNOSIM_PYTHON", &python)
            .env("DYNOSIM_CACHE_DIR", &cache)
            .args(["--input-tokens", "1024", "--output-tokens", "1024"])
            .args(["--request-count", "2", "--replay-concurrency", "1"])
            .arg("--extra-engine-args")
            .arg(
                json!({"engine_type": "vllm", "aic_backend": "vllm", "aic_system": "h200_sxm",
                       "aic_model_path": "openai/gpt-oss-120b", "aic_tp_size": 4,
                       "aic_moe_tp_size": 4, "aic_moe_ep_size": 1, "aic_gemm_dtype": "nvfp4",
                       "aic_moe_dtype": "nvfp4", "max_num_seqs": 256})
                .to_string(),
            )
            .output()
            .expect("run dynosim")
    };
    let error_line = |stderr: &str| -> String {
        stderr
            .lines()
            .find(|line| line.starts_with("dynosim: error:"))
            .unwrap_or_default()
            .to_owned()
    };
    let first = run();
    let first_err = String::from_utf8_lossy(&first.stderr).into_owned();
    assert_eq!(first.status.code(), Some(1), "{first_err}");
    assert!(
        first_err.contains("building AIC timing tables"),
        "{first_err}"
    );
    assert!(
        error_line(&first_err).contains("MissingSystemFlopsError: missing system flops"),
        "{first_err}"
    );
    let remembered: Vec<_> = std::fs::read_dir(cache.join("aic"))
        .expect("cache written")
        .map(|entry| entry.expect("entry").path())
        .collect();
    assert_eq!(remembered.len(), 1, "{remembered:?}");
    assert_eq!(
        remembered[0].extension().and_then(|ext| ext.to_str()),
        Some("unsupported")
    );
    // Again: the same error, and no build.
    let second = run();
    let second_err = String::from_utf8_lossy(&second.stderr).into_owned();
    assert_eq!(second.status.code(), Some(1), "{second_err}");
    assert!(
        !second_err.contains("building AIC timing tables"),
        "{second_err}"
    );
    assert_eq!(error_line(&second_err), error_line(&first_err));
}

/// `python3` if it lacks aiconfigurator-core, else "" (the case is then covered by the
/// nonexistent interpreter only).
fn which_python_without_aic() -> String {
    let has = Command::new("python3")
        .args(["-c", "import aiconfigurator_core"])
        .output();
    match has {
        Ok(out) if !out.status.success() => "python3".into(),
        _ => String::new(),
    }
}

#[test]
fn the_kv_router_takes_its_prefill_load_estimate_from_the_package() {
    let python = python_or_skip!("the_kv_router_takes_its_prefill_load_estimate_from_the_package");
    let dir = tempfile::tempdir().expect("temp dir");
    let run = |extra: &[&str], report: &str| -> Value {
        let path = dir.path().join(report);
        let out = Command::new(env!("CARGO_BIN_EXE_dynosim"))
            .env("DYNOSIM_PYTHON", &python)
            .args(["--input-tokens", "3000", "--output-tokens", "20"])
            .args([
                "--request-count",
                "60",
                "--request-rate",
                "40",
                "--num-workers",
                "3",
            ])
            .args(["--shared-prefix-ratio", "0.5", "--num-prefix-groups", "3"])
            .args(["--router-mode", "kv_router", "--router-seed", "1"])
            .args(["--extra-engine-args", r#"{"num_gpu_blocks":4000}"#])
            .args(extra)
            .args(["--report-json", path.to_str().expect("utf-8")])
            .output()
            .expect("run dynosim");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(&std::fs::read_to_string(path).expect("report")).expect("json")
    };
    let aic_flags = AIC_ROUTER_FLAGS;
    let with_aic = run(&aic_flags, "aic.json");
    let again = run(&aic_flags, "aic-again.json");
    let without = run(&[], "none.json");
    assert_eq!(number(&with_aic, "completed_requests"), 60.0);
    // Deterministic, and the decaying estimate changes placements under load.
    for key in ["mean_ttft_ms", "p99_ttft_ms", "mean_e2e_latency_ms"] {
        assert_eq!(with_aic[key], again[key], "{key}");
    }
    assert_ne!(with_aic["mean_ttft_ms"], without["mean_ttft_ms"]);

    // Flags the package cannot serve are usage errors naming the flag.
    let out = Command::new(env!("CARGO_BIN_EXE_dynosim"))
        .env("DYNOSIM_PYTHON", &python)
        .args([
            "--input-tokens",
            "100",
            "--output-tokens",
            "2",
            "--request-count",
            "2",
        ])
        .args(["--replay-concurrency", "1", "--num-workers", "2"])
        .args(["--router-mode", "kv_router"])
        .args(aic_flags.iter().take(4))
        .args(["--aic-model-path", "Qwen/Qwen3-32B", "--aic-system", "h900"])
        .output()
        .expect("run dynosim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error: --aic-system: 'h900' is not in aiconfigurator-core"),
        "{stderr}"
    );
}

#[test]
fn deepseek_r1_context_attention_falls_back_to_bf16_as_aiconfigurators_cli_does() {
    let python = python_or_skip!(
        "deepseek_r1_context_attention_falls_back_to_bf16_as_aiconfigurators_cli_does"
    );
    // DeepSeek-R1's checkpoint implies fp8 attention, but aiconfigurator-core 0.12 has no fp8
    // context-MLA data for SGLang and TRT-LLM on H200; its CLI then times the context phase
    // with the bfloat16 data, and so does dynosim: the run equals one that asks for bfloat16.
    let deepseek = |backend: &str, fmha: Option<&str>| {
        let mut engine = json!({
            "engine_type": backend, "aic_backend": backend, "aic_system": "h200_sxm",
            "aic_model_path": "deepseek-ai/DeepSeek-R1", "aic_tp_size": 8,
            "aic_moe_tp_size": 1, "aic_moe_ep_size": 8, "num_gpu_blocks": 4000,
            "block_size": 64, "max_num_seqs": 4, "max_num_batched_tokens": 512,
        });
        if let Some(fmha) = fmha {
            engine["aic_fmha_dtype"] = json!(fmha);
        }
        engine
    };
    let timed = |report: &Value| {
        ["mean_ttft_ms", "mean_tpot_ms", "duration_ms"].map(|key| number(report, key))
    };
    for backend in ["sglang", "trtllm"] {
        let inferred = replay(&python, &deepseek(backend, None), 400, 8, 4);
        let bf16 = replay(&python, &deepseek(backend, Some("bfloat16")), 400, 8, 4);
        assert_eq!(number(&inferred, "completed_requests"), 4.0, "{backend}");
        assert_eq!(timed(&inferred), timed(&bf16), "{backend}");
    }
    // Asking for fp8 attention where there is no data is a usage error naming the setting.
    let (code, stderr) =
        one_aic_request(&python, &deepseek("sglang", Some("fp8")).to_string(), None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "error: --extra-engine-args: aic_fmha_dtype 'fp8': aiconfigurator-core has no fp8 \
             context-attention data for sglang 0.5.14 on h200_sxm"
        ),
        "{stderr}"
    );
}

#[test]
fn an_fp8_kv_cache_halves_the_bytes_per_token_of_the_kv_estimate() {
    let python = python_or_skip!("an_fp8_kv_cache_halves_the_bytes_per_token_of_the_kv_estimate");
    // Qwen3-32B's checkpoint keeps its KV cache in bfloat16; aic_kv_cache_dtype fp8 stores it
    // in half the bytes, so the same memory holds twice the blocks (the estimate floors, so
    // within one block), and the decode tables are the package's fp8-KV ones.
    let blocks = |kv: Option<&str>| {
        let mut json = json!({
            "aic_backend": "vllm", "aic_model_path": QWEN, "aic_tp_size": 1,
            "block_size": 64, "max_num_seqs": 8,
        });
        if let Some(kv) = kv {
            json["aic_kv_cache_dtype"] = json!(kv);
        }
        estimated_blocks(&python, &engine_args(&json)).expect("an estimate")
    };
    let (bf16, fp8) = (blocks(None), blocks(Some("fp8")));
    assert_eq!(
        bf16, 3904,
        "the golden of kv_capacity_is_estimated_per_rank..."
    );
    assert!(fp8.abs_diff(2 * bf16) <= 1, "bf16 {bf16}, fp8 {fp8}");
}

/// Writes a calibration file whose entry for `backend` on h200_sxm and the model QWEN has
/// `corrections`; the (backend, system) entry beside it, for the other models, must not be
/// picked for QWEN (its scales are absurd).
fn calibration_file(dir: &std::path::Path, backend: &str, corrections: Value) -> String {
    let path = dir.join("calibration.json");
    let other_models = json!({"prefill_scale": 100.0, "decode_scale": 100.0,
                              "prefill_pass_ms": 0.0, "decode_pass_ms": 0.0,
                              "kv_capacity_scale": 1.0});
    let file = json!({
        "format": dynosim::aic::calibration::FORMAT,
        "entries": [
            {"backend": backend, "system": "h200_sxm", "corrections": other_models},
            {"backend": backend, "system": "h200_sxm", "model": QWEN, "corrections": corrections},
        ],
    });
    std::fs::write(&path, file.to_string()).expect("write calibration");
    path.to_str().expect("utf-8 path").to_string()
}

#[test]
fn a_calibration_scales_and_offsets_each_part_of_a_pass_and_the_kv_estimate() {
    let python =
        python_or_skip!("a_calibration_scales_and_offsets_each_part_of_a_pass_and_the_kv_estimate");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = calibration_file(
        dir.path(),
        "vllm",
        json!({"prefill_scale": 2.0, "decode_scale": 3.0, "prefill_pass_ms": 5.0,
               "decode_pass_ms": 1.0, "kv_capacity_scale": 0.5, "request_overhead_ms": 7.0}),
    );
    let plain = engine("vllm", QWEN, 1);
    let mut calibrated = plain.clone();
    calibrated["aic_calibration"] = json!(file);

    // A lone request: it reaches the engine 7 ms after it arrives, then one prefill pass,
    // then decode passes of one request.
    let lone_isl = 1000;
    let config = aic_config(&plain);
    let (prefill, decode) = direct(&python, &config, &[[1, lone_isl, 0]], &[[1, lone_isl]]);
    let report = replay(&python, &calibrated, lone_isl, 8, 1);
    let uncalibrated = replay(&python, &plain, lone_isl, 8, 1);
    assert_close(
        "calibrated lone TTFT",
        number(&report, "mean_ttft_ms"),
        7.0 + 2.0 * prefill[0] + 5.0 + 3.0 * decode[0].max(1.0) + 1.0,
        0.01,
    );
    // The front's delay adds to TTFT and latency but takes no engine time: the decode steps
    // after the first token are only scaled and offset.
    let decode_steps = 7.0;
    assert_close(
        "calibrated lone latency minus TTFT",
        number(&report, "mean_e2e_latency_ms") - number(&report, "mean_ttft_ms"),
        (number(&uncalibrated, "mean_e2e_latency_ms") - number(&uncalibrated, "mean_ttft_ms"))
            * 3.0
            + decode_steps * 1.0,
        0.02,
    );

    // The KV capacity the package estimates (3904 blocks here) is scaled, floored.
    let mut args = engine_args(&json!({
        "aic_backend": "vllm", "aic_model_path": QWEN, "aic_tp_size": 1,
        "block_size": 64, "max_num_seqs": 8, "aic_calibration": file,
    }));
    std::env::set_var("DYNOSIM_PYTHON", &python);
    build::prepare_engine(&mut args, "--extra-engine-args", &mut |_| {}).expect("tables");
    assert_eq!(args.num_gpu_blocks, 1952);
}

#[test]
fn a_calibration_without_an_entry_for_the_configuration_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = calibration_file(
        dir.path(),
        "sglang",
        json!({"prefill_scale": 1.0, "decode_scale": 1.0, "prefill_pass_ms": 0.0,
               "decode_pass_ms": 0.0, "kv_capacity_scale": 1.0}),
    );
    let engine = json!({"aic_backend": "vllm", "aic_model_path": QWEN, "num_gpu_blocks": 100,
                        "aic_calibration": file});
    let out = Command::new(env!("CARGO_BIN_EXE_dynosim"))
        .args([
            "--input-tokens",
            "100",
            "--output-tokens",
            "4",
            "--request-count",
            "1",
        ])
        .args(["--replay-concurrency", "1"])
        .args(["--extra-engine-args", &engine.to_string()])
        .output()
        .expect("run dynosim");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("aic_calibration")
            && stderr.contains("no entry for backend 'vllm' on system 'h200_sxm'")
            && stderr.contains("sglang on h200_sxm"),
        "{stderr}"
    );
    // Without aic_backend the key has nothing to correct.
    let out = Command::new(env!("CARGO_BIN_EXE_dynosim"))
        .args([
            "--input-tokens",
            "100",
            "--output-tokens",
            "4",
            "--request-count",
            "1",
        ])
        .args(["--replay-concurrency", "1"])
        .args([
            "--extra-engine-args",
            &json!({"aic_calibration": file}).to_string(),
        ])
        .output()
        .expect("run dynosim");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs aic_backend"));
}
