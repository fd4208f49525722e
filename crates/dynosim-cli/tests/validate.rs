//! `dynosim validate`, run as a user types it: silicon CSV rows (with AIC timing when
//! aiconfigurator-core is installed), the rows it cannot model, the split and filters, resume
//! from the journal, AIPerf run directories written by dynosim (self-consistency), bad input.

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use tempfile::TempDir;

mod common;
use common::{aic_python_or_skip, aiperf_python_or_skip, dynosim, text, AIC_ROUTER_FLAGS};

const COLUMNS: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,\
mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,\
moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,\
prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,\
decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,\
decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms";

/// One aggregated silicon row: id, source, backend, model, system, isl, osl, concurrency,
/// tp, pp, measured TTFT and TPOT.
#[allow(clippy::too_many_arguments)]
fn row(
    id: &str,
    source: &str,
    backend: &str,
    model: &str,
    (isl, osl, concurrency): (u32, u32, u32),
    (tp, pp): (u32, u32),
    (ttft, tpot): (f64, f64),
) -> String {
    format!(
        "{id},{source},{backend},0.19.0,{model},h200_sxm,bf16,agg,{isl},{osl},,,{concurrency},\
         {tp},{pp},1,,,,,,,,,,,,,,,,,{ttft},{tpot}"
    )
}

fn write_csv(dir: &Path, name: &str, rows: &[String]) {
    let mut body = String::from(COLUMNS);
    body.push('\n');
    for line in rows {
        body.push_str(line);
        body.push('\n');
    }
    fs::write(dir.join(name), body).unwrap();
}

/// rows.csv as maps of column to cell, in order.
fn read_rows(path: &Path) -> Vec<std::collections::BTreeMap<String, String>> {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    reader
        .records()
        .map(|record| {
            header
                .iter()
                .cloned()
                .zip(record.unwrap().iter().map(String::from))
                .collect()
        })
        .collect()
}

fn validate(dir: &Path, args: &[&str], python: Option<&str>) -> std::process::Output {
    let mut command = common::command(dir, &[&["validate"][..], args].concat());
    if let Some(python) = python {
        command.env("DYNOSIM_PYTHON", python);
    }
    command.output().expect("dynosim runs")
}

fn number(cell: &str) -> f64 {
    cell.parse()
        .unwrap_or_else(|_| panic!("{cell:?} is a number"))
}

/// What dynosim predicts (mean TTFT, mean TPOT) for each row of `csv` under `calibration`,
/// written as `NAME.json` and validated into `NAME/`: measurements made under known
/// corrections.
fn predicted_under(
    dir: &Path,
    csv: &str,
    calibration: &Value,
    name: &str,
    python: &str,
) -> Vec<(f64, f64)> {
    fs::write(dir.join(format!("{name}.json")), calibration.to_string()).unwrap();
    let engine = format!(r#"{{"aic_calibration": "{name}.json"}}"#);
    let out = validate(
        dir,
        &["--csv", csv, "--out", name, "--extra-engine-args", &engine],
        Some(python),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    read_rows(&dir.join(name).join("rows.csv"))
        .iter()
        .map(|row| {
            (
                number(&row["predicted_ttft_ms"]),
                number(&row["predicted_tpot_ms"]),
            )
        })
        .collect()
}

/// Runs `dynosim calibrate ARGS --out fitted.json` (AIC timing through `python`): what it
/// printed and the calibration file it wrote.
fn calibrate_into_fitted(dir: &Path, args: &[&str], python: &str) -> (String, Value) {
    let out = common::command(
        dir,
        &[&["calibrate"][..], args, &["--out", "fitted.json"]].concat(),
    )
    .env("DYNOSIM_PYTHON", python)
    .output()
    .expect("dynosim runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let fitted = fs::read_to_string(dir.join("fitted.json")).unwrap();
    (text(&out.stdout), serde_json::from_str(&fitted).unwrap())
}

/// Asserts that a row was simulated and predicts exactly what was measured (a run dynosim
/// itself wrote, rebuilt).
fn assert_rebuilt_exactly(row: &std::collections::BTreeMap<String, String>) {
    assert_eq!(row["status"], "ok", "{row:?}");
    assert!(number(&row["ttft_error_pct"]).abs() < 1e-9, "{row:?}");
    assert!(number(&row["tpot_error_pct"]).abs() < 1e-9, "{row:?}");
}

/// Rows that need no AIC: an unknown backend is listed as unmodelable before any table.
fn unmodelable_rows() -> Vec<String> {
    vec![
        row("row-4", "x", "tgi", "m/a", (128, 8, 2), (1, 1), (10.0, 2.0)),
        row("row-5", "x", "tgi", "m/b", (128, 8, 2), (1, 1), (10.0, 2.0)),
        row(
            "row-8",
            "aic-auto-gap-analysis/y",
            "tgi",
            "m/a",
            (128, 8, 2),
            (1, 1),
            (10.0, 2.0),
        ),
    ]
}

#[test]
fn every_row_is_listed_with_its_split_and_filters_select_rows() {
    let tmp = TempDir::new().unwrap();
    write_csv(tmp.path(), "rows.csv", &unmodelable_rows());
    let out = validate(tmp.path(), &["--csv", "rows.csv", "--out", "all"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = read_rows(&tmp.path().join("all/rows.csv"));
    let listed: Vec<(&str, &str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["id"].as_str(),
                r["split"].as_str(),
                r["family"].as_str(),
                r["status"].as_str(),
            )
        })
        .collect();
    // sha256 prefixes: row-4 06a20948, row-5 5a9dd7f3, row-8 85228170.
    assert_eq!(
        listed,
        [
            ("row-4", "test", "inferencex", "unmodelable"),
            ("row-5", "train", "inferencex", "unmodelable"),
            ("row-8", "test", "aic-gap-analysis", "unmodelable"),
        ]
    );
    assert!(
        rows[0]["reason"].contains("backend \"tgi\""),
        "{:?}",
        rows[0]
    );
    assert_eq!(rows[2]["protocol"], "unknown");
    let summary: Value =
        serde_json::from_str(&fs::read_to_string(tmp.path().join("all/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["status"]["unmodelable"], 3);
    assert_eq!(summary["not_modelled"][0]["rows"], 3);
    assert!(text(&out.stdout).contains("3 rows selected: 0 ok, 3 unmodelable"));

    let ids = |args: &[&str], out_dir: &str| -> Vec<String> {
        let out = validate(
            tmp.path(),
            &[&["--csv", "rows.csv", "--out", out_dir][..], args].concat(),
            None,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        read_rows(&tmp.path().join(out_dir).join("rows.csv"))
            .into_iter()
            .map(|r| r["id"].clone())
            .collect()
    };
    assert_eq!(ids(&["--split", "test"], "test"), ["row-4", "row-8"]);
    assert_eq!(ids(&["--split", "train"], "train"), ["row-5"]);
    assert_eq!(ids(&["--model", "m/a"], "model"), ["row-4", "row-8"]);
    assert_eq!(
        ids(&["--family", "inferencex"], "family"),
        ["row-4", "row-5"]
    );
    assert_eq!(
        ids(&["--family", "inferencex", "--split", "test"], "both"),
        ["row-4"]
    );
    assert!(ids(&["--backend", "vllm"], "backend").is_empty());
    assert!(ids(&["--system", "b200_sxm"], "system").is_empty());
    assert!(ids(&["--mode", "disagg"], "mode").is_empty());
}

/// A silicon CSV line with a precision, a system and a `measured=` date in its source note.
fn dated_row(
    id: &str,
    (backend, model, precision, system): (&str, &str, &str, &str),
    (isl, osl, concurrency, tp): (u32, u32, u32, u32),
    measured: &str,
) -> String {
    format!(
        "{id},db-dump; measured={measured}T00:00:00.000Z,{backend},1.0,{model},{system},\
         {precision},agg,{isl},{osl},{precision},{precision},{concurrency},{tp},1,1,,,,,,,,,,,,,,,,,\
         100.0,10.0"
    )
}

#[test]
fn inferencex_rows_are_rebuilt_with_their_benchmark_scripts_server_settings() {
    let tmp = TempDir::new().unwrap();
    let rows = [
        dated_row(
            "recipe-trt",
            ("trtllm", "meta-llama/Llama-3.1-70B", "fp8", "h200_sxm"),
            (1024, 1024, 16, 2),
            "2025-10-29",
        ),
        dated_row(
            "recipe-sglang",
            ("sglang", "deepseek-ai/DeepSeek-R1", "fp4", "b200_sxm"),
            (8192, 1024, 32, 4),
            "2026-03-25",
        ),
        dated_row(
            "recipe-deepseek-trt",
            ("trtllm", "deepseek-ai/DeepSeek-R1", "fp4", "b200_sxm"),
            (1024, 1024, 8, 8),
            "2025-11-02",
        ),
        // TP8 with EP8 as some CSV sources write it: tp 64, moe_tp 8, moe_ep 8.
        dated_row(
            "recipe-wide-ep",
            ("sglang", "deepseek-ai/DeepSeek-R1", "fp4", "b200_sxm"),
            (1024, 1024, 16, 64),
            "2026-03-25",
        )
        .replacen(",64,1,1,,,", ",64,1,1,8,8,", 1),
        // Attention DP 8 at a client concurrency of 256: batch_size is per rank (32), the
        // source's note has the client's; a sweep of 2026-01-14 ran only MTP configurations.
        dated_row(
            "recipe-mtp-dp",
            ("trtllm", "deepseek-ai/DeepSeek-R1", "fp4", "b200_sxm"),
            (1024, 1024, 32, 1),
            "2026-01-14",
        )
        .replacen(",1,1,1,,,", ",1,1,8,1,8,", 1)
        .replacen("db-dump;", "source_file=x.csv; silicon_concurrency=256;", 1),
    ];
    write_csv(tmp.path(), "rows.csv", &rows);
    // No table is built here (the interpreter does not exist): the rows are listed as
    // unmodelable with the command that would rebuild them.
    let commands = |extra: &[&str], out_dir: &str| -> Vec<String> {
        let out = validate(
            tmp.path(),
            &[&["--csv", "rows.csv", "--out", out_dir][..], extra].concat(),
            Some("/nonexistent/python"),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        read_rows(&tmp.path().join(out_dir).join("rows.csv"))
            .into_iter()
            .map(|row| row["command"].clone())
            .collect()
    };
    let scripts = commands(&[], "scripts");
    for setting in [
        r#""aic_kv_cache_dtype":"fp8""#,
        r#""max_num_batched_tokens":16384"#,
        r#""free_gpu_memory_fraction":0.9"#,
    ] {
        assert!(scripts[0].contains(setting), "{setting}: {}", scripts[0]);
    }
    for setting in [
        r#""aic_kv_cache_dtype":"fp8""#,
        r#""mem_fraction_static":0.85"#,
        r#""max_num_seqs":256"#,
        r#""scheduler_recv_interval":30"#,
    ] {
        assert!(scripts[1].contains(setting), "{setting}: {}", scripts[1]);
    }
    // Before 2026-01-21 the DeepSeek TRT-LLM budget was one prompt plus the batch, in 64s.
    assert!(
        scripts[2].contains(r#""max_num_batched_tokens":1152"#),
        "{}",
        scripts[2]
    );
    // One node's widths: TP8, the experts split eight ways.
    for width in [
        r#""aic_tp_size":8,"#,
        r#""aic_moe_tp_size":1,"#,
        r#""aic_moe_ep_size":8,"#,
    ] {
        assert!(scripts[3].contains(width), "{width}: {}", scripts[3]);
    }
    // The client's concurrency, attention DP over the node, one MTP layer (with attention DP).
    for setting in [
        "--request-count 2560 ",
        "--replay-concurrency 256 ",
        r#""aic_attention_dp_size":8,"#,
        r#""aic_nextn":1"#,
    ] {
        assert!(scripts[4].contains(setting), "{setting}: {}", scripts[4]);
    }
    let defaults = commands(&["--engine-defaults"], "defaults");
    for command in &defaults {
        assert!(!command.contains("aic_kv_cache_dtype"), "{command}");
        assert!(!command.contains("scheduler_recv_interval"), "{command}");
    }
    assert!(
        defaults[3].contains(r#""aic_tp_size":64,"#),
        "{}",
        defaults[3]
    );
    // The user's engine arguments still win over the script's.
    let overridden = commands(
        &[
            "--extra-engine-args",
            r#"{"aic_kv_cache_dtype":"bfloat16"}"#,
        ],
        "overridden",
    );
    assert!(
        overridden[0].contains(r#""aic_kv_cache_dtype":"bfloat16""#),
        "{}",
        overridden[0]
    );
    // A calibration's entries per engine version are picked by the row's version; rows
    // without one are `unrecorded`; without a calibration the version is not passed.
    assert!(scripts
        .iter()
        .all(|command| !command.contains("aic_engine_version")));
    let mut rows = rows.to_vec();
    rows[1] = rows[1].replacen(",sglang,1.0,", ",sglang,,", 1);
    write_csv(tmp.path(), "rows.csv", &rows);
    let calibrated = commands(
        &["--extra-engine-args", r#"{"aic_calibration":"silicon"}"#],
        "calibrated",
    );
    assert!(
        calibrated[0].contains(r#""aic_engine_version":"1.0""#),
        "{}",
        calibrated[0]
    );
    assert!(
        calibrated[1].contains(r#""aic_engine_version":"unrecorded""#),
        "{}",
        calibrated[1]
    );
}

#[test]
fn a_disaggregated_row_runs_its_recorded_workers_and_one_without_them_is_not_modelled() {
    let tmp = TempDir::new().unwrap();
    // Prefill TP8 and decode TP8 with EP8; the worker counts (2 and 3) after each batch size.
    let disagg = |id: &str, prefill_workers: &str, decode_workers: &str| {
        format!(
            "{id},db-dump; silicon_concurrency=64; measured=2026-02-07T00:00:00.000Z,sglang,\
             0.5.8.post1,deepseek-ai/DeepSeek-R1,h200_sxm,fp8,disagg,1024,1024,fp8,fp8_block,,,,,,,\
             8,{prefill_workers},8,1,1,8,1,8,{decode_workers},8,1,1,1,8,500.0,20.0"
        )
    };
    write_csv(
        tmp.path(),
        "rows.csv",
        &[disagg("known", "2", "3"), disagg("unknown", "", "")],
    );
    // No table is built (the interpreter does not exist): a row that can be rebuilt is listed
    // with its command, one that cannot with the reason.
    let out = validate(
        tmp.path(),
        &["--csv", "rows.csv", "--out", "out"],
        Some("/nonexistent/python"),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = read_rows(&tmp.path().join("out/rows.csv"));
    assert_eq!(
        rows[0]["widths"],
        "prefill 2x[tp8 moe_tp8 ep1] decode 3x[tp8 moe_tp1 ep8]"
    );
    for flag in ["--num-prefill-workers 2", "--num-decode-workers 3"] {
        assert!(rows[0]["command"].contains(flag), "{flag}: {:?}", rows[0]);
    }
    assert_eq!(rows[1]["status"], "unmodelable");
    assert!(
        rows[1]["reason"].contains("does not record its pools' worker counts"),
        "{:?}",
        rows[1]
    );
    assert_eq!(rows[1]["command"], "");
    assert_eq!(
        rows[1]["widths"],
        "prefill ?x[tp8 moe_tp8 ep1] decode ?x[tp8 moe_tp1 ep8]"
    );
}
#[test]
fn bad_csv_input_is_a_usage_error_naming_file_line_and_column() {
    let tmp = TempDir::new().unwrap();
    let rows = unmodelable_rows();
    // A missing column.
    let header_without_isl = COLUMNS.replace(",isl,", ",length,");
    fs::write(
        tmp.path().join("missing.csv"),
        format!("{header_without_isl}\n{}\n", rows[0]),
    )
    .unwrap();
    let out = validate(tmp.path(), &["--csv", "missing.csv", "--out", "o"], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("missing.csv:1: missing column `isl`"),
        "{stderr}"
    );
    // A value that is not a number, on the second data line.
    let bad = rows[1].replace(",128,8,", ",12x8,8,");
    write_csv(tmp.path(), "bad.csv", &[rows[0].clone(), bad]);
    let out = validate(tmp.path(), &["--csv", "bad.csv", "--out", "o"], None);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bad.csv:3: column `isl`: \"12x8\" is not a number"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!tmp.path().join("o/rows.csv").exists());
    // Bad flags.
    let out = validate(
        tmp.path(),
        &[
            "--csv",
            "bad.csv",
            "--out",
            "o",
            "--extra-engine-args",
            "[1]",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--extra-engine-args"));
    let out = validate(tmp.path(), &["--out", "o", "--aiperf-dir", "nowhere"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("nowhere"),
        "{}",
        text(&out.stderr)
    );
}

/// A polynomial-timed dynosim run written as an AIPerf directory.
fn simulated_aiperf_dir(dir: &Path, name: &str) {
    let out = dynosim(
        dir,
        &[
            "--input-tokens",
            "300",
            "--output-tokens",
            "40",
            "--request-count",
            "60",
            "--replay-concurrency",
            "8",
            "--extra-engine-args",
            r#"{"num_gpu_blocks": 2000, "max_num_seqs": 6}"#,
            "--aiperf-dir",
            name,
            "--report-json",
            &format!("{name}.json"),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// Scales a measured average in an AIPerf summary.
fn perturb(dir: &Path, tag: &str, factor: f64) {
    let path = dir.join("profile_export_aiperf.json");
    let mut summary: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    let avg = summary[tag]["avg"].as_f64().unwrap();
    summary[tag]["avg"] = Value::from(avg * factor);
    fs::write(&path, serde_json::to_string_pretty(&summary).unwrap()).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn an_aiperf_dir_dynosim_wrote_rebuilds_to_zero_error_and_perturbations_show_exactly() {
    let tmp = TempDir::new().unwrap();
    simulated_aiperf_dir(tmp.path(), "run");
    copy_dir(&tmp.path().join("run"), &tmp.path().join("slower"));
    // Measured TTFT 25% higher and TPOT 20% lower than the simulation.
    perturb(&tmp.path().join("slower"), "time_to_first_token", 1.25);
    perturb(&tmp.path().join("slower"), "inter_token_latency", 0.8);
    let out = validate(
        tmp.path(),
        &[
            "--aiperf-dir",
            "run",
            "--aiperf-dir",
            "slower",
            "--out",
            "v",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = read_rows(&tmp.path().join("v/rows.csv"));
    assert_eq!(rows.len(), 2);
    let report: Value =
        serde_json::from_str(&fs::read_to_string(tmp.path().join("run.json")).unwrap()).unwrap();
    for row in &rows {
        assert_eq!(row["status"], "ok", "{row:?}");
        assert_eq!(row["family"], "aiperf");
        assert_eq!((row["isl"].as_str(), row["osl"].as_str()), ("300", "40"));
        assert_eq!(row["concurrency"], "8");
        // The rebuilt run is the run: its predictions are the report's means.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
        assert!(close(
            number(&row["predicted_ttft_ms"]),
            report["mean_ttft_ms"].as_f64().unwrap()
        ));
        assert!(close(
            number(&row["predicted_tpot_ms"]),
            report["mean_tpot_ms"].as_f64().unwrap()
        ));
    }
    assert_rebuilt_exactly(&rows[0]);
    // predicted / (1.25 measured) - 1 = -20%; predicted / (0.8 measured) - 1 = +25%.
    assert!(
        (number(&rows[1]["ttft_error_pct"]) + 20.0).abs() < 1e-9,
        "{:?}",
        rows[1]
    );
    assert!(
        (number(&rows[1]["tpot_error_pct"]) - 25.0).abs() < 1e-9,
        "{:?}",
        rows[1]
    );

    // A second run takes every row from the journal and writes the same rows.
    let before = fs::read(tmp.path().join("v/rows.csv")).unwrap();
    let again = validate(
        tmp.path(),
        &[
            "--aiperf-dir",
            "run",
            "--aiperf-dir",
            "slower",
            "--out",
            "v",
        ],
        None,
    );
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout)
            .contains("(0 simulated now over 0 engine configurations, 2 from the journal)"),
        "{}",
        text(&again.stdout)
    );
    assert_eq!(fs::read(tmp.path().join("v/rows.csv")).unwrap(), before);
}

#[test]
fn aiperf_dirs_of_runs_with_length_spreads_rebuild_to_zero_error() {
    let tmp = TempDir::new().unwrap();
    let spreads: [(&str, &[&str]); 2] = [
        // AIPerf's own spread: recorded in its input config.
        (
            "normal",
            &["--input-tokens-stddev", "60", "--output-tokens-stddev", "8"],
        ),
        // vLLM's [R·L, L]: AIPerf's config has no spelling for it, dynosim's settings do.
        (
            "uniform",
            &["--random-range-ratio", "0.8", "--length-seed", "7"],
        ),
    ];
    for (name, flags) in spreads {
        let mut args = vec![
            "--input-tokens",
            "300",
            "--output-tokens",
            "40",
            "--request-count",
            "60",
            "--replay-concurrency",
            "8",
            "--aiperf-dir",
            name,
        ];
        args.extend(flags);
        let out = dynosim(tmp.path(), &args);
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let summary: Value = serde_json::from_str(
        &fs::read_to_string(tmp.path().join("normal/profile_export_aiperf.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        summary["input_config"]["datasets"][0]["prompts"]["isl"],
        serde_json::json!({"mean": 300, "stddev": 60.0})
    );
    let out = validate(
        tmp.path(),
        &[
            "--aiperf-dir",
            "normal",
            "--aiperf-dir",
            "uniform",
            "--out",
            "v",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    for row in read_rows(&tmp.path().join("v/rows.csv")) {
        assert_rebuilt_exactly(&row);
    }
}

#[test]
fn an_aiperf_dir_of_a_kv_router_with_aic_prefill_load_rebuilds_to_zero_error() {
    let Some(python) = aic_python_or_skip(
        "an_aiperf_dir_of_a_kv_router_with_aic_prefill_load_rebuilds_to_zero_error",
    ) else {
        return;
    };
    // The router asks AIC for its prefill-load estimate: tables the engines' configuration
    // does not cover, which validate must prepare for the row.
    let tmp = TempDir::new().unwrap();
    let workload = [
        "--input-tokens",
        "600",
        "--output-tokens",
        "20",
        "--request-count",
        "40",
        "--replay-concurrency",
        "8",
        "--num-workers",
        "2",
        "--router-mode",
        "kv_router",
    ];
    let rest = [
        "--extra-engine-args",
        r#"{"num_gpu_blocks": 2000}"#,
        "--aiperf-dir",
        "run",
    ];
    let out = common::command(
        tmp.path(),
        &[&workload[..], &AIC_ROUTER_FLAGS, &rest].concat(),
    )
    .env("DYNOSIM_PYTHON", &python)
    .output()
    .expect("dynosim runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = validate(
        tmp.path(),
        &["--aiperf-dir", "run", "--out", "v"],
        Some(&python),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = read_rows(&tmp.path().join("v/rows.csv"));
    assert_eq!(rows.len(), 1);
    assert_rebuilt_exactly(&rows[0]);
}

#[test]
fn an_aiperf_dir_without_its_deployment_needs_engine_args() {
    let tmp = TempDir::new().unwrap();
    simulated_aiperf_dir(tmp.path(), "run");
    // What AIPerf itself writes: metrics and the input config, nothing about the server.
    let path = tmp.path().join("run/profile_export_aiperf.json");
    let mut summary: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    summary.as_object_mut().unwrap().remove("dynosim");
    fs::write(&path, summary.to_string()).unwrap();
    let out = validate(tmp.path(), &["--aiperf-dir", "run", "--out", "v"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = read_rows(&tmp.path().join("v/rows.csv"));
    assert_eq!(rows[0]["status"], "unmodelable");
    assert!(
        rows[0]["reason"].contains("--extra-engine-args"),
        "{:?}",
        rows[0]
    );
    // Given the engine, the row runs: the same engine gives the same run (0% error).
    let out = validate(
        tmp.path(),
        &[
            "--aiperf-dir",
            "run",
            "--out",
            "w",
            "--extra-engine-args",
            r#"{"num_gpu_blocks": 2000, "max_num_seqs": 6}"#,
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = read_rows(&tmp.path().join("w/rows.csv"));
    assert_eq!(rows[0]["status"], "ok", "{:?}", rows[0]);
    assert!(number(&rows[0]["ttft_error_pct"]).abs() < 1e-9);
}

#[test]
fn aiperf_accepts_the_input_config_dynosim_records() {
    let Some(python) = aiperf_python_or_skip("aiperf_accepts_the_input_config_dynosim_records")
    else {
        return;
    };
    let tmp = TempDir::new().unwrap();
    simulated_aiperf_dir(tmp.path(), "run");
    let script = r#"
import json, sys
from aiperf.config.config import BenchmarkConfig
summary = json.load(open(sys.argv[1]))
config = BenchmarkConfig.model_validate(summary["input_config"])
phase = config.phases[-1]
print(json.dumps({"type": str(phase.type.value), "concurrency": phase.concurrency,
                  "requests": phase.requests, "entries": config.datasets[0].entries}))
"#;
    let out = Command::new(python)
        .args(["-c", script, "run/profile_export_aiperf.json"])
        .current_dir(tmp.path())
        .output()
        .expect("the aiperf Python runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let parsed: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    assert_eq!(
        parsed,
        serde_json::json!({"type": "concurrency", "concurrency": 8, "requests": 60, "entries": 60})
    );
}

#[test]
fn silicon_rows_run_with_aic_timing_and_resume_from_the_journal() {
    let Some(python) =
        aic_python_or_skip("silicon_rows_run_with_aic_timing_and_resume_from_the_journal")
    else {
        return;
    };
    let tmp = TempDir::new().unwrap();
    let qwen = "Qwen/Qwen3-32B";
    write_csv(
        tmp.path(),
        "small.csv",
        &[
            row(
                "row-4",
                "x",
                "vllm",
                qwen,
                (256, 16, 2),
                (1, 1),
                (40.0, 20.0),
            ),
            row(
                "row-5",
                "x",
                "vllm",
                qwen,
                (512, 24, 4),
                (1, 1),
                (80.0, 22.0),
            ),
            row(
                "row-6",
                "x",
                "vllm",
                "nobody/none",
                (256, 16, 2),
                (1, 1),
                (40.0, 20.0),
            ),
            row(
                "row-7",
                "x",
                "vllm",
                qwen,
                (256, 16, 2),
                (1, 2),
                (40.0, 20.0),
            ),
        ],
    );
    let out = validate(
        tmp.path(),
        &["--csv", "small.csv", "--out", "v", "--jobs", "2"],
        Some(&python),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows = read_rows(&tmp.path().join("v/rows.csv"));
    let status: Vec<&str> = rows.iter().map(|r| r["status"].as_str()).collect();
    assert_eq!(status, ["ok", "ok", "unmodelable", "unmodelable"]);
    assert!(rows[2]["reason"].contains("nobody/none"), "{:?}", rows[2]);
    assert!(
        rows[3]["reason"].contains("pipeline parallelism (pp 2)"),
        "{:?}",
        rows[3]
    );
    for row in &rows[..2] {
        assert_eq!(row["backend_version"], "0.19.0");
        assert!(!row["aic_version"].is_empty(), "{row:?}");
        let predicted = number(&row["predicted_ttft_ms"]);
        let measured = number(&row["measured_ttft_ms"]);
        assert!(predicted > 0.0 && predicted.is_finite());
        let error = number(&row["ttft_error_pct"]);
        assert!((error - (predicted - measured) / measured * 100.0).abs() < 1e-9);
        assert!(number(&row["predicted_tpot_ms"]) > 0.0);
        // The command line reruns the row: 10 x C prompts under concurrency C.
        assert!(row["command"].contains("--replay-concurrency"), "{row:?}");
    }
    assert!(
        rows[1]["command"].contains("--request-count 40"),
        "{:?}",
        rows[1]
    );
    // The client's lengths, uniform in [0.8·L, L].
    assert!(
        rows[1]["command"].contains("--random-range-ratio 0.8"),
        "{:?}",
        rows[1]
    );
    // The failed table build is remembered under its configuration.
    let journal = fs::read_to_string(tmp.path().join("v/journal.jsonl")).unwrap();
    assert_eq!(journal.matches(r#""key":"tables-"#).count(), 1, "{journal}");
    let html = fs::read_to_string(tmp.path().join("v/report.html")).unwrap();
    assert!(html.contains("logarithmic") && html.contains("row-5"));

    // A second run simulates nothing and builds no table.
    let again = validate(
        tmp.path(),
        &["--csv", "small.csv", "--out", "v"],
        Some(&python),
    );
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout)
            .contains("(0 simulated now over 0 engine configurations, 3 from the journal)"),
        "{}",
        text(&again.stdout)
    );
    // Engine args given to every row change the rows, so they run again.
    let calibrated = validate(
        tmp.path(),
        &[
            "--csv",
            "small.csv",
            "--out",
            "v",
            "--model",
            qwen,
            "--split",
            "test",
            "--extra-engine-args",
            r#"{"speedup_ratio": 2.0}"#,
        ],
        Some(&python),
    );
    assert!(calibrated.status.success(), "{}", text(&calibrated.stderr));
    let faster = read_rows(&tmp.path().join("v/rows.csv"));
    assert_eq!(faster.len(), 1);
    // New settings for the unknown model: its failed build is not run again.
    let relisted = validate(
        tmp.path(),
        &[
            "--csv",
            "small.csv",
            "--out",
            "v",
            "--model",
            "nobody/none",
            "--fixed-lengths",
        ],
        Some(&python),
    );
    assert!(relisted.status.success(), "{}", text(&relisted.stderr));
    let relisted = read_rows(&tmp.path().join("v/rows.csv"));
    assert_eq!(relisted[0]["status"], "unmodelable");
    assert!(relisted[0]["reason"].contains("nobody/none"));
    let journal = fs::read_to_string(tmp.path().join("v/journal.jsonl")).unwrap();
    assert_eq!(journal.matches(r#""key":"tables-"#).count(), 1, "{journal}");
    assert!(number(&faster[0]["predicted_tpot_ms"]) < number(&rows[0]["predicted_tpot_ms"]));
}

/// Measurements made by dynosim itself under known corrections (`truth`) are fitted back by
/// `dynosim calibrate` from TRAIN rows only: validate with the fitted file reports (near) zero
/// error where the uncorrected simulator is far off, and a TEST row never enters the fit.
#[test]
fn calibrate_fits_back_known_corrections_from_train_rows() {
    let Some(python) = aic_python_or_skip("calibrate_fits_back_known_corrections_from_train_rows")
    else {
        return;
    };
    let tmp = TempDir::new().unwrap();
    let qwen = "Qwen/Qwen3-32B";
    // cal-0..cal-5 are TRAIN rows, cal-6 is a TEST row (sha256 of the id).
    let shapes = [
        ("cal-0", (256, 16, 2)),
        ("cal-1", (512, 24, 4)),
        ("cal-2", (1024, 16, 4)),
        ("cal-3", (256, 32, 8)),
        ("cal-4", (768, 24, 2)),
        ("cal-5", (512, 16, 8)),
        ("cal-6", (256, 16, 4)),
    ];
    let placeholder: Vec<String> = shapes
        .iter()
        .map(|(id, shape)| row(id, "x", "vllm", qwen, *shape, (1, 1), (1.0, 1.0)))
        .collect();
    write_csv(tmp.path(), "shapes.csv", &placeholder);
    let truth = serde_json::json!({
        "format": "dynosim-aic-calibration/1",
        "entries": [{"backend": "vllm", "system": "h200_sxm", "corrections": {
            "prefill_scale": 1.0, "decode_scale": 1.3, "prefill_pass_ms": 0.0,
            "prefill_token_us": 20.0, "decode_pass_ms": 0.0, "kv_capacity_scale": 1.0,
            "request_overhead_ms": 60.0}}],
    });
    let with = |file: &str| format!(r#"{{"aic_calibration": "{file}"}}"#);
    // The "measured" runs: what dynosim predicts under the known corrections; the TEST row
    // gets an absurd measurement that would pull any fit it entered.
    let measured: Vec<String> = predicted_under(tmp.path(), "shapes.csv", &truth, "truth", &python)
        .into_iter()
        .zip(&shapes)
        .map(|(predicted, (id, shape))| {
            let measured = if *id == "cal-6" {
                (100_000.0, 1_000.0)
            } else {
                predicted
            };
            row(id, "x", "vllm", qwen, *shape, (1, 1), measured)
        })
        .collect();
    write_csv(tmp.path(), "measured.csv", &measured);

    let (printed, fitted) = calibrate_into_fitted(
        tmp.path(),
        &["--csv", "measured.csv", "--max-evaluations", "100"],
        &python,
    );
    assert!(printed.contains("Wrote fitted.json"), "{printed}");
    let entries = fitted["entries"].as_array().unwrap();
    assert!(!entries.is_empty(), "{fitted}");
    assert_eq!(fitted["fitted_on"]["filters"]["split"], "train");
    // Six TRAIN rows are the fit's; the TEST row is not among them.
    let model_entry = entries
        .iter()
        .find(|entry| entry["model"].is_string())
        .unwrap_or(&entries[0]);
    assert_eq!(model_entry["fit"]["rows"], 6, "{fitted}");

    let errors = |dir: &str, extra: Option<&str>| -> Vec<(f64, f64)> {
        let mut args = vec!["--csv", "measured.csv", "--split", "train", "--out", dir];
        let engine;
        if let Some(file) = extra {
            engine = with(file);
            args.extend(["--extra-engine-args", engine.as_str()]);
        }
        let out = validate(tmp.path(), &args, Some(&python));
        assert!(out.status.success(), "{}", text(&out.stderr));
        read_rows(&tmp.path().join(dir).join("rows.csv"))
            .iter()
            .map(|row| {
                (
                    number(&row["ttft_error_pct"]).abs(),
                    number(&row["tpot_error_pct"]).abs(),
                )
            })
            .collect()
    };
    let before = errors("before", None);
    let after = errors("after", Some("fitted.json"));
    assert_eq!(after.len(), 6);
    let worst = |errors: &[(f64, f64)]| {
        errors.iter().fold((0.0f64, 0.0f64), |(t, p), (et, ep)| {
            (t.max(*et), p.max(*ep))
        })
    };
    let (before_ttft, before_tpot) = worst(&before);
    let (after_ttft, after_tpot) = worst(&after);
    assert!(before_ttft > 20.0 && before_tpot > 20.0, "{before:?}");
    assert!(after_ttft < 5.0 && after_tpot < 5.0, "{after:?}");
}

#[test]
fn calibrate_fits_an_entry_per_engine_version_where_versions_differ() {
    let Some(python) =
        aic_python_or_skip("calibrate_fits_an_entry_per_engine_version_where_versions_differ")
    else {
        return;
    };
    let tmp = TempDir::new().unwrap();
    let qwen = "Qwen/Qwen3-32B";
    // Eight TRAIN rows of one configuration (sha256 of the ids), half of them measured by
    // engine version 0.20.0, whose serving front is 300 ms slower per request.
    let shapes = [
        ("ver-0", (256, 16, 2)),
        ("ver-1", (512, 24, 4)),
        ("ver-3", (1024, 16, 4)),
        ("ver-4", (256, 32, 8)),
        ("ver-5", (768, 24, 2)),
        ("ver-6", (512, 16, 8)),
        ("ver-7", (256, 24, 4)),
        ("ver-8", (1024, 32, 2)),
    ];
    let slow = |id: &str| ["ver-1", "ver-4", "ver-6", "ver-8"].contains(&id);
    let line = |id: &str, shape, measured| {
        let line = row(id, "x", "vllm", qwen, shape, (1, 1), measured);
        if slow(id) {
            line.replacen(",vllm,0.19.0,", ",vllm,0.20.0,", 1)
        } else {
            line
        }
    };
    let placeholder: Vec<String> = shapes
        .iter()
        .map(|(id, shape)| line(id, *shape, (1.0, 1.0)))
        .collect();
    write_csv(tmp.path(), "shapes.csv", &placeholder);
    let predicted = |overhead_ms: f64| {
        let truth = serde_json::json!({
            "format": "dynosim-aic-calibration/1",
            "entries": [{"backend": "vllm", "system": "h200_sxm", "corrections": {
                "prefill_scale": 1.0, "decode_scale": 1.0, "prefill_pass_ms": 0.0,
                "decode_pass_ms": 0.0, "kv_capacity_scale": 1.0,
                "request_overhead_ms": overhead_ms}}],
        });
        let name = format!("truth-{overhead_ms}");
        predicted_under(tmp.path(), "shapes.csv", &truth, &name, &python)
    };
    let (fast_runs, slow_runs) = (predicted(0.0), predicted(300.0));
    let measured: Vec<String> = shapes
        .iter()
        .enumerate()
        .map(|(index, (id, shape))| {
            let runs = if slow(id) { &slow_runs } else { &fast_runs };
            line(id, *shape, runs[index])
        })
        .collect();
    write_csv(tmp.path(), "measured.csv", &measured);

    let (printed, fitted) = calibrate_into_fitted(tmp.path(), &["--csv", "measured.csv"], &python);
    assert!(printed.contains("engine version 0.20.0"), "{printed}");
    let overhead_of = |version: &str| {
        fitted["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["engine_version"] == version)
            .map(|entry| {
                entry["corrections"]["request_overhead_ms"]
                    .as_f64()
                    .unwrap()
            })
    };
    let slow_overhead = overhead_of("0.20.0").expect("an entry for 0.20.0");
    // The slower version's entry carries most of its 300 ms; the other version's (if it has
    // one) far less.
    assert!(slow_overhead > 200.0, "{fitted}");
    if let Some(fast_overhead) = overhead_of("0.19.0") {
        assert!(fast_overhead < slow_overhead - 150.0, "{fitted}");
    }
    // validate passes each row's version: every row is then within 10% of its measured TTFT.
    let out = validate(
        tmp.path(),
        &[
            "--csv",
            "measured.csv",
            "--out",
            "after",
            "--extra-engine-args",
            r#"{"aic_calibration": "fitted.json"}"#,
        ],
        Some(&python),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let worst = read_rows(&tmp.path().join("after/rows.csv"))
        .iter()
        .map(|row| number(&row["ttft_error_pct"]).abs())
        .fold(0.0f64, f64::max);
    assert!(worst < 10.0, "worst TTFT error {worst}%");
}
