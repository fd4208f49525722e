//! Sweeps run through the library: resume without recomputing, the same table whatever the
//! thread count, seeded sampling, errors as rows, and the Pareto front's definition.

use std::fs;
use std::path::Path;

use dynosim_sweep::objectives::pareto_front;
use dynosim_sweep::store::JOURNAL_FILE;
use dynosim_sweep::{
    candidates, run, Row, RunOptions, Settings, Strategy, SweepSpec, SIMULATOR_SPEED_KEYS,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn spec(value: Value) -> SweepSpec {
    SweepSpec::from_value("spec", &value).unwrap()
}

fn small_spec() -> SweepSpec {
    spec(json!({
        "base": {
            "input_tokens": 512, "output_tokens": 32, "request_count": 24,
            "replay_concurrency": 8, "shared_prefix_ratio": 0.5, "num_prefix_groups": 3,
            "extra_engine_args": {"num_gpu_blocks": 120, "block_size": 64},
        },
        "grid": {
            "num_workers": [1, 2, 3],
            "router_mode": ["round_robin", "kv_router"],
            "extra_engine_args.max_num_seqs": [4, 16],
        },
    }))
}

fn jobs(count: usize) -> RunOptions {
    RunOptions {
        jobs: Some(count),
        progress: None,
        cancel: None,
    }
}

/// A table with the simulator-speed columns blanked (they measure this machine, not the run).
fn comparable_table(path: &Path) -> String {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let mut lines = vec![header.join(",")];
    for record in reader.records() {
        let record = record.unwrap();
        let cells: Vec<&str> = header
            .iter()
            .zip(record.iter())
            .map(|(column, cell)| {
                if SIMULATOR_SPEED_KEYS.contains(&column.as_str()) {
                    "-"
                } else {
                    cell
                }
            })
            .collect();
        lines.push(cells.join(","));
    }
    lines.join("\n")
}

#[test]
fn the_table_does_not_depend_on_the_thread_count() {
    let spec = small_spec();
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let serial = run(&spec, one.path(), &jobs(1)).unwrap();
    let parallel = run(&spec, two.path(), &jobs(2)).unwrap();
    assert_eq!(serial.rows.len(), 12);
    assert_eq!((serial.evaluated, parallel.evaluated), (12, 12));
    // kv_router with one worker is rejected by the replay: its rows carry the message.
    let failed: Vec<&Row> = serial
        .rows
        .iter()
        .filter(|row| !row.error.is_empty())
        .collect();
    assert_eq!(failed.len(), 2);
    assert!(
        failed[0]
            .error
            .contains("kv_router with more than one worker"),
        "{}",
        failed[0].error
    );
    for name in ["results.csv", "pareto.csv"] {
        assert_eq!(
            comparable_table(&one.path().join(name)),
            comparable_table(&two.path().join(name)),
            "{name}"
        );
    }
    let strip = |dir: &Path| {
        let mut best: Value =
            serde_json::from_str(&fs::read_to_string(dir.join("best.json")).unwrap()).unwrap();
        for entry in best["best"].as_object_mut().unwrap().values_mut() {
            if let Some(report) = entry.get_mut("report").and_then(Value::as_object_mut) {
                for key in SIMULATOR_SPEED_KEYS {
                    report.remove(key);
                }
            }
        }
        best
    };
    assert_eq!(strip(one.path()), strip(two.path()));
}

#[test]
fn a_restarted_sweep_recomputes_no_stored_row() {
    let spec = small_spec();
    let dir = tempfile::tempdir().unwrap();
    let first = run(&spec, dir.path(), &jobs(2)).unwrap();
    let full_table = comparable_table(&dir.path().join("results.csv"));
    // Keep half the journal and cut the next line short, as a run killed mid-write leaves it.
    let journal = dir.path().join(JOURNAL_FILE);
    let text = fs::read_to_string(&journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let kept = lines.len() / 2;
    let mut cut = lines[..kept].join("\n");
    cut.push('\n');
    cut.push_str(&lines[kept][..lines[kept].len() / 2]);
    fs::write(&journal, cut).unwrap();
    fs::remove_file(dir.path().join("results.csv")).unwrap();

    let resumed = run(&spec, dir.path(), &jobs(2)).unwrap();
    assert_eq!(resumed.stored, kept);
    assert_eq!(resumed.evaluated, first.rows.len() - kept);
    assert_eq!(
        comparable_table(&dir.path().join("results.csv")),
        full_table
    );
    // Stored rows are taken as stored: their wall times are the first run's.
    let stored_hashes: Vec<String> = lines[..kept]
        .iter()
        .map(|line| {
            serde_json::from_str::<Value>(line).unwrap()["candidate"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    for row in &resumed.rows {
        if stored_hashes.contains(&row.candidate) {
            let before = first
                .rows
                .iter()
                .find(|old| old.candidate == row.candidate)
                .unwrap();
            assert_eq!(row.report, before.report);
        }
    }
    // A third run finds everything stored.
    let again = run(&spec, dir.path(), &jobs(2)).unwrap();
    assert_eq!((again.stored, again.evaluated), (first.rows.len(), 0));
}

#[test]
fn an_extended_grid_runs_only_the_new_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let mut narrow = small_spec();
    narrow.grids[0].axes[0].1 = vec![json!(2)];
    let first = run(&narrow, dir.path(), &jobs(2)).unwrap();
    assert_eq!(first.evaluated, 4);
    let extended = run(&small_spec(), dir.path(), &jobs(2)).unwrap();
    assert_eq!((extended.stored, extended.evaluated), (4, 8));
}

#[test]
fn the_budget_skips_candidates_and_counts_gpus_like_the_report() {
    let mut spec = small_spec();
    spec.grids[0].axes.push((
        "extra_engine_args.aic_tp_size".into(),
        vec![json!(1), json!(2)],
    ));
    spec.gpu_budget = Some(4);
    let dir = tempfile::tempdir().unwrap();
    let outcome = run(&spec, dir.path(), &jobs(2)).unwrap();
    // 24 candidates; tp 2 with 3 workers (6 GPUs) is over: 4 of them.
    assert_eq!(outcome.over_budget, 4);
    assert_eq!(outcome.rows.len(), 20);
    for row in outcome.rows.iter().filter(|row| row.error.is_empty()) {
        let per_worker = row.metric("decode_gpus_per_worker").unwrap() as u64;
        let workers = row.settings.get("num_workers").unwrap().as_u64().unwrap();
        assert_eq!(row.gpus, Some(per_worker * workers));
        assert!(row.gpus.unwrap() <= 4);
    }
}

#[test]
fn a_missing_trace_fails_its_rows_not_the_sweep() {
    let spec = spec(json!({
        "base": {"trace_file": "/nonexistent/trace.jsonl"},
        "grid": {"num_workers": [1, 2]},
    }));
    let dir = tempfile::tempdir().unwrap();
    let outcome = run(&spec, dir.path(), &jobs(2)).unwrap();
    assert_eq!(outcome.rows.len(), 2);
    for row in &outcome.rows {
        assert!(
            row.error.contains("/nonexistent/trace.jsonl"),
            "{}",
            row.error
        );
    }
}

#[test]
fn random_sampling_is_seeded_and_keeps_grid_order() {
    let mut spec = small_spec();
    let all = candidates(&spec);
    spec.strategy = Strategy::Random {
        samples: 5,
        seed: 11,
    };
    let drawn = candidates(&spec);
    assert_eq!(drawn.len(), 5);
    assert_eq!(drawn, candidates(&spec));
    let positions: Vec<usize> = drawn
        .iter()
        .map(|candidate| all.iter().position(|other| other == candidate).unwrap())
        .collect();
    assert!(
        positions.windows(2).all(|pair| pair[0] < pair[1]),
        "{positions:?}"
    );
    spec.strategy = Strategy::Random {
        samples: 5,
        seed: 12,
    };
    assert_ne!(candidates(&spec), drawn);
}

#[test]
fn hashes_ignore_key_order_but_not_values() {
    let a = Settings {
        values:
            json!({"num_workers": 2, "extra_engine_args": {"block_size": 16, "num_gpu_blocks": 9}})
                .as_object()
                .unwrap()
                .clone(),
    };
    let b = Settings {
        values:
            json!({"extra_engine_args": {"num_gpu_blocks": 9, "block_size": 16}, "num_workers": 2})
                .as_object()
                .unwrap()
                .clone(),
    };
    assert_eq!(
        dynosim_sweep::candidate_hash(&a),
        dynosim_sweep::candidate_hash(&b)
    );
    let mut c = b.clone();
    c.set("extra_engine_args.block_size", json!(32));
    assert_ne!(
        dynosim_sweep::candidate_hash(&a),
        dynosim_sweep::candidate_hash(&c)
    );
}

fn row_at(index: usize, gpus: u64, throughput: f64, per_user: f64, error: bool) -> Row {
    let mut report = Map::new();
    report.insert("output_throughput_tok_s".into(), json!(throughput));
    report.insert(
        "mean_output_token_throughput_per_user".into(),
        json!(per_user),
    );
    Row {
        index,
        candidate: format!("c{index}"),
        settings: Settings { values: Map::new() },
        gpus: Some(gpus),
        error: if error {
            "failed".into()
        } else {
            String::new()
        },
        report,
    }
}

proptest! {
    /// The front holds exactly the rows that ran and that no other such row dominates.
    #[test]
    fn the_pareto_front_is_exactly_the_non_dominated_rows(
        points in prop::collection::vec((1u64..4, 0u32..6, 0u32..6, prop::bool::weighted(0.1)), 0..40)
    ) {
        let rows: Vec<Row> = points
            .iter()
            .enumerate()
            .map(|(index, &(gpus, throughput, per_user, error))| {
                row_at(index, gpus, f64::from(throughput) * gpus as f64, f64::from(per_user), error)
            })
            .collect();
        let point = |row: &Row| {
            (row.metric("output_throughput_tok_s").unwrap() / row.gpus.unwrap() as f64,
             row.metric("mean_output_token_throughput_per_user").unwrap())
        };
        let expected: Vec<usize> = rows
            .iter()
            .enumerate()
            .filter(|(_, row)| row.error.is_empty())
            .filter(|(_, row)| {
                let (x, y) = point(row);
                !rows.iter().filter(|other| other.error.is_empty()).any(|other| {
                    let (ox, oy) = point(other);
                    ox >= x && oy >= y && (ox > x || oy > y)
                })
            })
            .map(|(index, _)| index)
            .collect();
        prop_assert_eq!(pareto_front(&rows), expected);
    }
}

/// Every cell of a Parquet file as results.csv writes it (a null is an empty cell).
fn parquet_as_text(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let reader = SerializedFileReader::new(fs::File::open(path).unwrap()).unwrap();
    let header = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|column| column.name().to_owned())
        .collect();
    let rows = reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            row.unwrap()
                .get_column_iter()
                .map(|(_, field)| match field {
                    Field::Null => String::new(),
                    Field::Bool(value) => value.to_string(),
                    Field::Long(value) => value.to_string(),
                    Field::Double(value) => value.to_string(),
                    Field::Str(value) => value.clone(),
                    other => panic!("unexpected Parquet field {other:?}"),
                })
                .collect()
        })
        .collect();
    (header, rows)
}

fn csv_as_text(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header = reader.headers().unwrap().iter().map(String::from).collect();
    let rows = reader
        .records()
        .map(|record| record.unwrap().iter().map(String::from).collect())
        .collect();
    (header, rows)
}

#[test]
fn results_parquet_holds_the_rows_and_columns_of_results_csv() {
    let spec = spec(json!({
        "base": {
            "input_tokens": 512, "output_tokens": 32, "request_count": 24,
            "replay_concurrency": 8, "extra_engine_args": {"num_gpu_blocks": 120, "block_size": 64},
        },
        "grid": {
            "num_workers": [1, 2],
            "router_mode": ["round_robin", "kv_router"],
            "router_config": [{"overlap_score_credit": 0.5}],
        },
        "sla": {"p95_ttft_ms": 60},
    }));
    let dir = tempfile::tempdir().unwrap();
    let outcome = run(&spec, dir.path(), &jobs(2)).unwrap();
    assert_eq!(outcome.rows.len(), 4);
    let csv = csv_as_text(&dir.path().join("results.csv"));
    let parquet = parquet_as_text(&dir.path().join("results.parquet"));
    assert_eq!(parquet, csv);
    // Failed rows (kv_router over one worker), both feasibility values and a mapping-valued
    // column are all in the compared table.
    let column = |name: &str| csv.0.iter().position(|key| key == name).unwrap();
    let cells =
        |name: &str| -> Vec<&str> { csv.1.iter().map(|row| row[column(name)].as_str()).collect() };
    assert!(cells("error").iter().any(|error| !error.is_empty()));
    assert!(cells("feasible").contains(&""));
    assert_eq!(cells("router_config")[0], r#"{"overlap_score_credit":0.5}"#);

    // Another implementation reads it too: pyarrow, where a Python that has it is given.
    let python = ["DYNOSIM_PYTHON", "DYNOSIM_AIPERF_PYTHON"]
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|python| {
            std::process::Command::new(python)
                .args(["-c", "import pyarrow.parquet"])
                .output()
                .is_ok_and(|output| output.status.success())
        });
    let Some(python) = python else {
        println!(
            "SKIPPED results_parquet_holds_the_rows_and_columns_of_results_csv (pyarrow part): \
             no Python with pyarrow in DYNOSIM_PYTHON or DYNOSIM_AIPERF_PYTHON"
        );
        return;
    };
    let script = r#"
import csv, json, sys
import pyarrow.parquet as pq
table = pq.read_table(sys.argv[1])
with open(sys.argv[2], newline="") as f:
    rows = list(csv.reader(f))
assert table.column_names == rows[0], (table.column_names, rows[0])
assert table.num_rows == len(rows) - 1
def text(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return str(value)
for index, record in enumerate(table.to_pylist()):
    got = [text(record[name]) for name in table.column_names]
    want = rows[index + 1]
    for name, a, b in zip(table.column_names, got, want):
        if a != b and not (a and b and float(a) == float(b)):
            sys.exit(f"row {index} column {name}: parquet {a!r} != csv {b!r}")
print("ok", table.num_rows, table.num_columns)
"#;
    let output = std::process::Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(dir.path().join("results.parquet"))
        .arg(dir.path().join("results.csv"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "pyarrow: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `search: {strategy: descent}` walks the grid's axes: every row it visits equals that
/// candidate's row in the full grid, it visits fewer candidates than the grid has, and (having
/// stopped before its last round) its best is a coordinate-wise optimum of the full grid: no
/// feasible point that differs on one axis is better. The same table on one thread and two.
#[test]
fn descent_walks_the_axes_to_a_coordinate_optimum() {
    let value = json!({
        "base": {
            "input_tokens": 512, "output_tokens": 32, "request_count": 24,
            "replay_concurrency": 8, "extra_engine_args": {"num_gpu_blocks": 120, "block_size": 64},
        },
        "grid": {
            "num_workers": [1, 2, 3, 4, 5],
            "extra_engine_args.max_num_seqs": [2, 4, 8, 16],
            "extra_engine_args.max_num_batched_tokens": [512, 2048],
        },
        "budget": {"gpus": 4},
        "sla": {"p95_ttft_ms": 400},
        "objectives": ["throughput_per_user"],
        "search": {"strategy": "descent", "rounds": 10},
    });
    let descent_spec = spec(value.clone());
    let mut grid_value = value;
    grid_value.as_object_mut().unwrap().remove("search");
    let grid_spec = spec(grid_value);
    let (grid_dir, one, two) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let grid = run(&grid_spec, grid_dir.path(), &jobs(2)).unwrap();
    let walked = run(&descent_spec, one.path(), &jobs(1)).unwrap();
    let walked_parallel = run(&descent_spec, two.path(), &jobs(2)).unwrap();
    assert_eq!(
        comparable_table(&one.path().join("results.csv")),
        comparable_table(&two.path().join("results.csv"))
    );
    assert_eq!(grid.rows.len(), 32); // 40 points, 8 over the budget (5 workers)
    assert!(
        walked.rows.len() < grid.rows.len(),
        "{} rows",
        walked.rows.len()
    );
    assert_eq!(walked_parallel.rows.len(), walked.rows.len());
    let by_hash = |hash: &str| grid.rows.iter().find(|row| row.candidate == hash).unwrap();
    for row in &walked.rows {
        let mut report = row.report.clone();
        let mut expected = by_hash(&row.candidate).report.clone();
        for key in SIMULATOR_SPEED_KEYS {
            report.remove(key);
            expected.remove(key);
        }
        assert_eq!(report, expected, "{}", row.candidate);
    }
    let best: Value =
        serde_json::from_str(&fs::read_to_string(one.path().join("best.json")).unwrap()).unwrap();
    let best_hash = best["best"]["throughput_per_user"]["candidate"]
        .as_str()
        .unwrap()
        .to_owned();
    let best_row = by_hash(&best_hash);
    let keys = descent_spec.swept_keys();
    let per_user = |row: &Row| row.metric("mean_output_token_throughput_per_user").unwrap();
    let feasible = |row: &Row| {
        row.error.is_empty() && row.metric("p95_ttft_ms").is_some_and(|ttft| ttft <= 400.0)
    };
    assert!(feasible(best_row));
    for other in &grid.rows {
        let differing = keys
            .iter()
            .filter(|key| other.settings.get(key) != best_row.settings.get(key))
            .count();
        if differing == 1 && feasible(other) {
            assert!(
                per_user(other) <= per_user(best_row),
                "{} beats the descent's best {best_hash} along one axis",
                other.candidate
            );
        }
    }
    // A rerun finds every visited candidate stored.
    let again = run(&descent_spec, one.path(), &jobs(2)).unwrap();
    assert_eq!((again.evaluated, again.stored), (0, walked.rows.len()));
}

#[test]
fn a_sweep_over_the_length_spread() {
    // The benchmark client's range ratio as a grid axis: R = 1 is the fixed-length run, a
    // smaller R draws shorter requests (the same draws for every worker count), and each
    // row's command line carries the flag and seed that reproduce it.
    let spec = spec(json!({
        "base": {
            "input_tokens": 1000, "output_tokens": 100, "request_count": 40,
            "replay_concurrency": 8, "length_seed": 3,
            "extra_engine_args": {"num_gpu_blocks": 2000, "block_size": 64},
        },
        "grid": {"random_range_ratio": [1.0, 0.8, 0.5], "num_workers": [1, 2]},
    }));
    let dir = tempfile::tempdir().unwrap();
    let outcome = run(&spec, dir.path(), &jobs(2)).unwrap();
    assert_eq!(outcome.rows.len(), 6);
    let total = |row: &Row, key: &str| row.metric(key).unwrap();
    for row in &outcome.rows {
        assert!(row.error.is_empty(), "{}", row.error);
        let ratio = row
            .settings
            .get("random_range_ratio")
            .unwrap()
            .as_f64()
            .unwrap();
        let input = total(row, "total_input_tokens");
        let output = total(row, "total_output_tokens");
        if ratio == 1.0 {
            assert_eq!((input, output), (40_000.0, 4_000.0));
        } else {
            // Means of 1000 (1 + R) / 2 and 100 (1 + R) / 2 per request, within 6 %.
            let expected = 40.0 * 1000.0 * (1.0 + ratio) / 2.0;
            assert!((input / expected - 1.0).abs() < 0.06, "{ratio}: {input}");
            assert!(
                output < 4_000.0 && output >= 40.0 * 100.0 * ratio,
                "{output}"
            );
        }
        let command = row.settings.command_line();
        assert!(
            command.contains(&format!("--random-range-ratio {ratio}"))
                && command.contains("--length-seed 3"),
            "{command}"
        );
    }
    // The lengths do not depend on the deployment: both worker counts see the same requests.
    for pair in outcome.rows.chunks(2) {
        assert_eq!(
            total(&pair[0], "total_input_tokens"),
            total(&pair[1], "total_input_tokens")
        );
    }
}
