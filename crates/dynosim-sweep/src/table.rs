//! The sweep's rows and the files written from them: `results.csv`, `results.parquet` (the
//! same table, typed; [`crate::columnar`]), `pareto.csv`, `best.json` (and `report.html`, from
//! [`crate::html`]).
//!
//! INTERFACE
//! - [`Row`]: one candidate's outcome (hash, settings, GPUs, error, report keys).
//! - [`write_outputs`]: writes the five files into the output directory, each replaced
//!   atomically (temporary file, then rename), so a reader never sees half a table.
//!
//! Columns: `candidate`, one per swept key (named as in the spec), `gpus`, `feasible` (the
//! spec's SLAs; empty for a failed row), `error` (empty when it ran), then every report key in
//! the report's order. Rows are in candidate order (the grid's order), so the same spec gives
//! byte-identical tables, `wall_time_ms` (the simulator's own speed) apart.

use std::io::Write;
use std::path::{Path, PathBuf};

use dynosim::{Error, Result};
use serde_json::{json, Map, Value};

use crate::objectives::{best_row, feasible, pareto_front};
use crate::settings::Settings;
use crate::spec::SweepSpec;

/// One candidate's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Position in the sweep's candidate list (the table's order).
    pub index: usize,
    /// Hash of the candidate's resolved settings (see [`crate::candidate_hash`]).
    pub candidate: String,
    pub settings: Settings,
    /// GPUs the deployment uses (workers × `aic_tp_size` × `dp_size`, summed over pools);
    /// `None` when its settings were rejected.
    pub gpus: Option<u64>,
    /// Empty when it ran; otherwise why it did not.
    pub error: String,
    /// The report's keys and values (empty for a failed row).
    pub report: Map<String, Value>,
}

impl Row {
    /// A report key's value as a float.
    pub fn metric(&self, key: &str) -> Option<f64> {
        self.report.get(key)?.as_f64()
    }
}

/// The text of one cell: strings bare, numbers in their shortest exact form, objects as JSON.
pub fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => match number.as_i64() {
            Some(int) => int.to_string(),
            None => number.as_f64().unwrap_or(f64::NAN).to_string(),
        },
        Some(other) => other.to_string(),
    }
}

/// Header and cells of the table for `rows` (the columns of [`crate::columnar::columns`], each
/// cell as [`cell`] writes it).
pub fn table(spec: &SweepSpec, rows: &[Row]) -> (Vec<String>, Vec<Vec<String>>) {
    text_table(&crate::columnar::columns(spec, rows), rows.len())
}

fn text_table(columns: &[crate::columnar::Column], rows: usize) -> (Vec<String>, Vec<Vec<String>>) {
    let header = columns.iter().map(|column| column.name.clone()).collect();
    let cells = (0..rows)
        .map(|index| {
            columns
                .iter()
                .map(|column| cell(column.cells[index].as_ref()))
                .collect()
        })
        .collect();
    (header, cells)
}

fn csv_text(header: &[String], cells: &[Vec<String>]) -> Result<Vec<u8>> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let fail = |err: csv::Error| Error::runtime(format!("cannot format the table: {err}"));
    writer.write_record(header).map_err(fail)?;
    for line in cells {
        writer.write_record(line).map_err(fail)?;
    }
    writer
        .into_inner()
        .map_err(|err| Error::runtime(format!("cannot format the table: {err}")))
}

/// `best.json`: the spec's SLAs, counts, the best feasible row per objective (with the
/// `dynosim` command line that reproduces it), and the Pareto front's candidates.
pub fn best_json(spec: &SweepSpec, rows: &[Row], over_budget: usize) -> Value {
    let mut best = Map::new();
    for &objective in &spec.objectives {
        let entry = match best_row(rows, &spec.sla, objective) {
            Some(row) => {
                let swept: Map<String, Value> = spec
                    .swept_keys()
                    .into_iter()
                    .map(|key| {
                        let value = row.settings.get(&key).cloned().unwrap_or(Value::Null);
                        (key, value)
                    })
                    .collect();
                json!({
                    "candidate": row.candidate,
                    "value": objective.value(row),
                    "gpus": row.gpus,
                    "swept": swept,
                    "command": row.settings.command_line(),
                    "settings": row.settings.values,
                    "report": row.report,
                })
            }
            None => Value::Null,
        };
        best.insert(objective.name().to_owned(), entry);
    }
    let sla: Map<String, Value> = spec
        .sla
        .iter()
        .map(|bound| (bound.metric.clone(), json!(bound.limit)))
        .collect();
    json!({
        "spec": spec.name,
        "candidates": rows.len(),
        "over_budget_skipped": over_budget,
        "gpu_budget": spec.gpu_budget,
        "failed": rows.iter().filter(|row| !row.error.is_empty()).count(),
        "feasible": rows.iter().filter(|row| feasible(row, &spec.sla)).count(),
        "sla": sla,
        "best": best,
        "pareto": pareto_front(rows)
            .into_iter()
            .map(|index| rows[index].candidate.clone())
            .collect::<Vec<_>>(),
    })
}

/// Writes `results.csv`, `results.parquet`, `pareto.csv`, `best.json` and `report.html` into
/// `dir`; returns their paths.
pub fn write_outputs(
    spec: &SweepSpec,
    rows: &[Row],
    over_budget: usize,
    dir: &Path,
) -> Result<Vec<PathBuf>> {
    let columns = crate::columnar::columns(spec, rows);
    let parquet = crate::columnar::parquet_bytes(&columns)?;
    let (header, cells) = text_table(&columns, rows.len());
    let front: Vec<Vec<String>> = pareto_front(rows)
        .into_iter()
        .map(|index| cells[index].clone())
        .collect();
    let mut best = serde_json::to_string_pretty(&best_json(spec, rows, over_budget))
        .map_err(|err| Error::runtime(format!("cannot format best.json: {err}")))?;
    best.push('\n');
    let files = [
        ("results.csv", csv_text(&header, &cells)?),
        ("results.parquet", parquet),
        ("pareto.csv", csv_text(&header, &front)?),
        ("best.json", best.into_bytes()),
        (
            "report.html",
            crate::html::report_html(spec, rows, over_budget).into_bytes(),
        ),
    ];
    // One thread per file: each waits for its own fsync, and the waits overlap.
    let written: Vec<PathBuf> = files.iter().map(|(name, _)| dir.join(name)).collect();
    std::thread::scope(|scope| {
        let writers: Vec<_> = files
            .iter()
            .zip(&written)
            .map(|((_, bytes), path)| scope.spawn(move || write_atomically(path, bytes)))
            .collect();
        writers
            .into_iter()
            .map(|writer| {
                writer
                    .join()
                    .unwrap_or_else(|_| Err(Error::runtime("a table writer failed")))
            })
            .collect::<Result<Vec<()>>>()
    })?;
    Ok(written)
}

/// Writes a file through a temporary file beside it and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.tmp"));
    let fail =
        |err: std::io::Error| Error::runtime(format!("cannot write {}: {err}", path.display()));
    let result = std::fs::File::create(&temporary)
        .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_all()))
        .and_then(|()| std::fs::rename(&temporary, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result.map_err(fail)
}
