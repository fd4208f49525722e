//! Accuracy of dynosim's AIC tables against direct calls to aiconfigurator-core: 10,000 random
//! points per configuration for prefill and for decode; prints the table in docs/timing.md and
//! holds every configuration to the targets: median ≤ 0.05%, p99 ≤ 1%, max ≤ 2%.
//!
//! The configurations use the same table extents as `tests/aic.rs` (64 sequences, 8192 batched
//! tokens, contexts to 32768), so both share the cached tables. Skips, saying so, without a
//! Python that has aiconfigurator-core (see `tests/aic.rs`).

use dynosim::config::EngineArgs;
use dynosim_aic_tables::{self as build, TableExtent};
use serde_json::json;

mod common;

const POINTS: usize = 10_000;

/// (median, p99, max) of relative errors, in percent.
fn summary(mut errors: Vec<f64>) -> (f64, f64, f64) {
    errors.sort_by(f64::total_cmp);
    let at = |q: f64| errors[((errors.len() as f64 * q) as usize).min(errors.len() - 1)] * 100.0;
    (at(0.5), at(0.99), errors[errors.len() - 1] * 100.0)
}

#[test]
fn tables_stay_within_the_error_targets() {
    let Some(python) = common::aic_python_or_skip("tables_stay_within_the_error_targets") else {
        return;
    };
    let configurations = [
        json!({"aic_backend": "vllm", "aic_model_path": "Qwen/Qwen3-32B", "aic_tp_size": 1}),
        json!({"aic_backend": "trtllm", "aic_model_path": "meta-llama/Meta-Llama-3.1-8B",
               "aic_tp_size": 1}),
        json!({"aic_backend": "sglang", "aic_model_path": "Qwen/Qwen3-32B", "aic_tp_size": 2}),
        json!({"aic_backend": "vllm", "aic_model_path": "Qwen/Qwen3-30B-A3B", "aic_tp_size": 2,
               "aic_moe_ep_size": 2}),
    ];
    let mut table = String::from(
        "| configuration | prefill median | p99 | max | decode median | p99 | max |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let mut failures = Vec::new();
    for mut engine in configurations {
        engine["num_gpu_blocks"] = json!(20000);
        engine["max_num_seqs"] = json!(64);
        let args = EngineArgs::from_json("--extra-engine-args", &engine.to_string())
            .expect("valid engine args");
        let config = args.aic.clone().expect("aic");
        let extent = TableExtent::for_engine(&args);
        let (tables, _) =
            build::tables(&python, &config, extent, None, &mut |_| {}).expect("tables");
        let sample = build::sample(
            &python,
            &config,
            json!({"points": POINTS, "seed": 7, "max_batch": extent.max_batch,
                   "max_tokens": extent.max_tokens, "max_context": extent.max_context}),
        )
        .expect("samples");
        let rows = |key: &str| -> Vec<Vec<f64>> {
            sample[key]
                .as_array()
                .expect("rows")
                .iter()
                .map(|row| {
                    row.as_array()
                        .expect("row")
                        .iter()
                        .map(|v| v.as_f64().expect("number"))
                        .collect()
                })
                .collect()
        };
        let prefill: Vec<f64> = rows("prefill")
            .iter()
            .map(|r| {
                let got = tables.prefill_ms(r[0] as usize, r[1] as usize, r[2] as usize);
                (got / r[3] - 1.0).abs()
            })
            .collect();
        let decode: Vec<f64> = rows("decode")
            .iter()
            .map(|r| (tables.decode_ms(r[0] as usize, r[1] as usize) / r[2] - 1.0).abs())
            .collect();
        let (pm, p99, pmax) = summary(prefill);
        let (dm, d99, dmax) = summary(decode);
        let name = format!(
            "{} {} tp{}{}",
            config.model_path,
            config.backend,
            config.tp_size,
            config
                .moe_ep_size
                .map(|ep| format!(" ep{ep}"))
                .unwrap_or_default()
        );
        table.push_str(&format!(
            "| {name} | {pm:.4}% | {p99:.3}% | {pmax:.3}% | {dm:.4}% | {d99:.3}% | {dmax:.3}% |\n"
        ));
        for (what, median, p99, max) in [("prefill", pm, p99, pmax), ("decode", dm, d99, dmax)] {
            if median > 0.05 || p99 > 1.0 || max > 2.0 {
                failures.push(format!(
                    "{name} {what}: median {median:.4}%, p99 {p99:.3}%, max {max:.3}%"
                ));
            }
        }
    }
    println!("{POINTS} random points per configuration and phase:\n{table}");
    assert!(
        failures.is_empty(),
        "over the targets: {failures:?}\n{table}"
    );
}
