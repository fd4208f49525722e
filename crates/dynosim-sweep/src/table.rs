//! The sweep's table as text (the cells of `results.csv` and `pareto.csv`, and of the report
//! page's table) and `best.json`; [`crate::outputs`] writes them.
//!
//! INTERFACE
//! - [`table`]: header and cells of the table for a spec's rows.
//! - [`best_json`]: the best feasible row per objective and the Pareto front's candidates.
//!
//! Columns: `candidate`, one per swept key (named as in the spec), `gpus`, `feasible` (the
//! spec's SLAs; empty for a failed row), `error` (empty when it ran), then every report key in
//! the report's order. Rows are in candidate order (the grid's order), so the same spec gives
//! byte-identical tables, `wall_time_ms` (the simulator's own speed) apart.

use serde_json::{json, Map, Value};

use crate::objectives::{best_row, feasible, pareto_front};
use crate::row::{cell, Row};
use crate::spec::SweepSpec;

/// Header and cells of the table for `rows` (the columns of [`crate::columnar::columns`], each
/// cell as [`cell`] writes it).
pub fn table(spec: &SweepSpec, rows: &[Row]) -> (Vec<String>, Vec<Vec<String>>) {
    text_table(&crate::columnar::columns(spec, rows), rows.len())
}

/// The header and cells of already built columns (the files' writer builds them once, for the
/// CSV and the Parquet file alike).
pub(crate) fn text_table(
    columns: &[crate::columnar::Column],
    rows: usize,
) -> (Vec<String>, Vec<Vec<String>>) {
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
