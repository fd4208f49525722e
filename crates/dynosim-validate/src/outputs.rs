//! What a validation writes: `rows.csv` (one line per selected row), `summary.json` (error
//! statistics overall and by group, status counts, why rows were not modelled), the printed
//! table, and `report.html` (predicted-vs-measured scatter plots and the tables). Pure
//! formatting: the caller publishes the bytes.
//!
//! INTERFACE: [`rows_csv`], [`summary`], [`summary_table`], [`report_html`].
//!
//! Groups: overall, then by backend, system, model, ISL/OSL band (each length rounded up to a
//! power of two, in k: `1k/8k`), family and mode; each over the rows that ran.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use dynosim::{Error, Result};
use dynosim_sweep::html::{escape, script_json};
use serde_json::{json, Map, Value};

use crate::journal::Status;
use crate::stats::ErrorStats;
use crate::RowResult;

/// The columns of `rows.csv`.
pub const ROW_COLUMNS: [&str; 24] = [
    "id",
    "split",
    "family",
    "protocol",
    "backend",
    "backend_version",
    "aic_version",
    "system",
    "model",
    "mode",
    "isl",
    "osl",
    "concurrency",
    "widths",
    "measured_ttft_ms",
    "predicted_ttft_ms",
    "ttft_error_pct",
    "measured_tpot_ms",
    "predicted_tpot_ms",
    "tpot_error_pct",
    "status",
    "reason",
    "origin",
    "command",
];

fn number(value: Option<f64>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

fn count(value: Option<u64>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

fn row_cells(row: &RowResult) -> Vec<String> {
    let run = &row.run;
    vec![
        run.id.clone(),
        row.split.name().into(),
        run.family.name().into(),
        if run.protocol_known {
            "known"
        } else {
            "unknown"
        }
        .into(),
        run.backend.clone(),
        run.backend_version.clone(),
        row.aic_version.clone(),
        run.system.clone(),
        run.model.clone(),
        run.mode.map(|mode| mode.name()).unwrap_or_default().into(),
        count(run.isl),
        count(run.osl),
        count(run.concurrency),
        run.widths.clone(),
        number(run.measured_ttft_ms),
        number(row.predicted_ttft_ms),
        number(row.ttft_error_pct()),
        number(run.measured_tpot_ms),
        number(row.predicted_tpot_ms),
        number(row.tpot_error_pct()),
        row.status.name().into(),
        row.reason.clone(),
        run.origin.clone(),
        row.command.clone(),
    ]
}

/// `rows.csv`: one line per selected row, in input order.
pub fn rows_csv(rows: &[RowResult]) -> Result<Vec<u8>> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let fail = |err: csv::Error| Error::runtime(format!("cannot format rows.csv: {err}"));
    writer.write_record(ROW_COLUMNS).map_err(fail)?;
    for row in rows {
        writer.write_record(row_cells(row)).map_err(fail)?;
    }
    writer
        .into_inner()
        .map_err(|err| Error::runtime(format!("cannot format rows.csv: {err}")))
}

/// A length's band: rounded up to a power of two, in k (`1k`, `8k`), or tokens below 1k.
fn band(length: Option<u64>) -> String {
    match length {
        None => "?".into(),
        Some(0..=1024) => "1k".into(),
        Some(tokens) => format!("{}k", tokens.next_power_of_two() / 1024),
    }
}

/// The ISL/OSL band of a row (`8k/1k`).
pub fn length_band(row: &RowResult) -> String {
    format!("{}/{}", band(row.run.isl), band(row.run.osl))
}

/// The grouping dimensions, in order, and each row's value in them.
const DIMENSIONS: [&str; 6] = ["backend", "system", "model", "isl_osl", "family", "mode"];

fn dimension_value(row: &RowResult, dimension: &str) -> String {
    match dimension {
        "backend" => row.run.backend.clone(),
        "system" => row.run.system.clone(),
        "model" => row.run.model.clone(),
        "isl_osl" => length_band(row),
        "family" => row.run.family.name().into(),
        _ => row.run.mode.map(|mode| mode.name()).unwrap_or("?").into(),
    }
}

/// The error statistics of a group of rows that ran.
fn group_json(rows: &[&RowResult]) -> Value {
    let pairs = |predicted: fn(&RowResult) -> Option<f64>,
                 measured: fn(&RowResult) -> Option<f64>| {
        rows.iter()
            .filter_map(|row| Some((predicted(row)?, measured(row)?)))
            .collect::<Vec<_>>()
    };
    let ttft = ErrorStats::of(&pairs(|r| r.predicted_ttft_ms, |r| r.run.measured_ttft_ms));
    let tpot = ErrorStats::of(&pairs(|r| r.predicted_tpot_ms, |r| r.run.measured_tpot_ms));
    json!({
        "rows": rows.len(),
        "ttft": ttft.map(|s| s.to_json()),
        "tpot": tpot.map(|s| s.to_json()),
    })
}

/// `summary.json`'s value: status counts, statistics overall and by group, the reasons rows
/// were not modelled (with counts), and the engine versions measured against the ones AIC
/// used. `context` (filters, inputs, wall time) is copied in first.
pub fn summary(rows: &[RowResult], context: Map<String, Value>) -> Value {
    let ran: Vec<&RowResult> = rows.iter().filter(|r| r.status == Status::Ok).collect();
    let mut top = context;
    top.insert("selected_rows".into(), json!(rows.len()));
    top.insert("status".into(), json!(crate::counts(rows)));
    top.insert("overall".into(), group_json(&ran));
    for dimension in DIMENSIONS {
        let mut groups: BTreeMap<String, Vec<&RowResult>> = BTreeMap::new();
        for row in &ran {
            groups
                .entry(dimension_value(row, dimension))
                .or_default()
                .push(row);
        }
        let by: Map<String, Value> = groups
            .into_iter()
            .map(|(name, rows)| (name, group_json(&rows)))
            .collect();
        top.insert(format!("by_{dimension}"), Value::Object(by));
    }
    let mut reasons: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.status != Status::Ok) {
        *reasons
            .entry((row.status.name(), row.reason.as_str()))
            .or_default() += 1;
    }
    let mut reasons: Vec<((&str, &str), usize)> = reasons.into_iter().collect();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.insert(
        "not_modelled".into(),
        Value::Array(
            reasons
                .into_iter()
                .map(|((status, reason), rows)| {
                    json!({"status": status, "reason": reason, "rows": rows})
                })
                .collect(),
        ),
    );
    let mut versions: BTreeMap<(String, String), BTreeMap<String, usize>> = BTreeMap::new();
    for row in &ran {
        let measured = if row.run.backend_version.is_empty() {
            "(unrecorded)".to_owned()
        } else {
            row.run.backend_version.clone()
        };
        *versions
            .entry((row.run.backend.clone(), row.aic_version.clone()))
            .or_default()
            .entry(measured)
            .or_default() += 1;
    }
    top.insert(
        "engine_versions".into(),
        Value::Array(
            versions
                .into_iter()
                .map(|((backend, aic), measured)| {
                    json!({"backend": backend, "aic_version": aic, "measured_versions": measured})
                })
                .collect(),
        ),
    );
    Value::Object(top)
}

fn stat_cells(stats: &Value) -> String {
    if stats.is_null() {
        return format!("{:>7} {:>7} {:>7} {:>7} {:>6}", "-", "-", "-", "-", "-");
    }
    let pct = |key: &str| format!("{:.1}%", stats[key].as_f64().unwrap_or(f64::NAN));
    let rho = stats["spearman"]
        .as_f64()
        .map_or_else(|| "-".to_owned(), |rho| format!("{rho:.2}"));
    format!(
        "{:>7} {:>7} {:>7} {:>7} {:>6}",
        pct("median_abs_pct"),
        pct("mean_abs_pct"),
        pct("p90_abs_pct"),
        pct("median_signed_pct"),
        rho
    )
}

/// The printed table: one line per group (rows, then TTFT and TPOT: median / mean / p90
/// absolute error, median signed error, Spearman), and the commonest reasons rows were not
/// modelled.
pub fn summary_table(summary: &Value) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{:<34} {:>5} | {:>7} {:>7} {:>7} {:>7} {:>6} | {:>7} {:>7} {:>7} {:>7} {:>6}",
        "group", "rows", "TTFT", "mean", "p90", "bias", "rho", "TPOT", "mean", "p90", "bias", "rho"
    );
    let mut line = |name: &str, group: &Value| {
        let _ = writeln!(
            text,
            "{:<34} {:>5} | {} | {}",
            name,
            group["rows"].as_u64().unwrap_or(0),
            stat_cells(&group["ttft"]),
            stat_cells(&group["tpot"])
        );
    };
    line("all", &summary["overall"]);
    for dimension in DIMENSIONS {
        if let Some(groups) = summary[format!("by_{dimension}")].as_object() {
            for (name, group) in groups {
                let mut label = format!("{dimension}={name}");
                if label.len() > 34 {
                    label.truncate(33);
                    label.push('~');
                }
                line(&label, group);
            }
        }
    }
    let _ = writeln!(
        text,
        "(TTFT, TPOT: median absolute % error; mean, p90: absolute; bias: median signed; rho: \
         Spearman rank correlation)"
    );
    if let Some(reasons) = summary["not_modelled"].as_array() {
        if !reasons.is_empty() {
            let _ = writeln!(text, "Rows not modelled (rows.csv names each):");
            for reason in reasons.iter().take(12) {
                let mut why = reason["reason"].as_str().unwrap_or_default().to_owned();
                if why.chars().count() > 150 {
                    why = why.chars().take(149).collect::<String>() + "~";
                }
                let _ = writeln!(
                    text,
                    "  {:>5} {}: {why}",
                    reason["rows"],
                    reason["status"].as_str().unwrap_or_default()
                );
            }
            if reasons.len() > 12 {
                let _ = writeln!(text, "  ... and {} more reasons", reasons.len() - 12);
            }
        }
    }
    text
}

/// `report.html`: predicted against measured TTFT and TPOT (log axes, one colour per backend,
/// the diagonal is a perfect prediction), the error table by group, and every row.
pub fn report_html(rows: &[RowResult], summary: &Value) -> String {
    let mut by_backend: BTreeMap<&str, (Vec<Value>, Vec<Value>)> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.status == Status::Ok) {
        let entry = by_backend.entry(row.run.backend.as_str()).or_default();
        let label = format!("{} ({})", row.run.id, row.run.widths);
        if let (Some(p), Some(m)) = (row.predicted_ttft_ms, row.run.measured_ttft_ms) {
            entry.0.push(json!({"x": m, "y": p, "label": label}));
        }
        if let (Some(p), Some(m)) = (row.predicted_tpot_ms, row.run.measured_tpot_ms) {
            entry.1.push(json!({"x": m, "y": p, "label": label}));
        }
    }
    let series: Vec<Value> = by_backend
        .into_iter()
        .map(|(backend, (ttft, tpot))| json!({"name": backend, "ttft": ttft, "tpot": tpot}))
        .collect();
    let table_rows: Vec<Vec<String>> = rows.iter().map(row_cells).collect();
    let data = json!({"series": series, "header": ROW_COLUMNS, "rows": table_rows});
    let groups = escape(&summary_table(summary));
    format!(
        r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dynosim validate</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
.plots {{ display: flex; flex-wrap: wrap; gap: 2em; }}
.plot {{ width: 560px; height: 460px; }}
pre {{ font-size: 12px; background: #f6f6f6; padding: 0.8em; overflow-x: auto; }}
table {{ border-collapse: collapse; font-size: 12px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 5px; white-space: nowrap; }}
th {{ cursor: pointer; background: #eee; position: sticky; top: 0; }}
</style></head><body>
<h1>dynosim validate</h1>
<p>{selected} rows selected: {status}. Each point is one measured run; the line is a perfect
prediction.</p>
<div class="plots"><div class="plot"><canvas id="ttft"></canvas></div>
<div class="plot"><canvas id="tpot"></canvas></div></div>
<h2>Errors by group</h2>
<pre>{groups}</pre>
<h2>Rows</h2>
<table id="rows"></table>
<script>{chart_js}</script>
<script>
const data = {data};
const colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
function plot(id, metric, title) {{
  const points = data.series.flatMap(s => s[metric]);
  const values = points.flatMap(p => [p.x, p.y]).filter(v => v > 0);
  const lo = Math.min(...values), hi = Math.max(...values);
  const datasets = data.series.map((s, i) => ({{
    label: s.name, data: s[metric], backgroundColor: colours[i % colours.length], pointRadius: 3,
  }}));
  datasets.push({{ label: "perfect", type: "line", data: [{{x: lo, y: lo}}, {{x: hi, y: hi}}],
    borderColor: "#888", borderDash: [4, 4], pointRadius: 0, fill: false }});
  new Chart(document.getElementById(id), {{
    type: "scatter", data: {{ datasets }},
    options: {{ maintainAspectRatio: false, plugins: {{ title: {{ display: true, text: title }},
      tooltip: {{ callbacks: {{ label: c => (c.raw.label || "") + ": measured " + c.raw.x.toFixed(2) + " ms, predicted " + c.raw.y.toFixed(2) + " ms" }} }} }},
      scales: {{ x: {{ type: "logarithmic", title: {{ display: true, text: "measured (ms)" }} }},
                 y: {{ type: "logarithmic", title: {{ display: true, text: "predicted (ms)" }} }} }} }}
  }});
}}
plot("ttft", "ttft", "Mean TTFT");
plot("tpot", "tpot", "Mean TPOT");
const table = document.getElementById("rows");
function render(rows) {{
  table.innerHTML = "";
  const head = table.insertRow();
  data.header.forEach((name, i) => {{
    const th = document.createElement("th"); th.textContent = name;
    th.onclick = () => sortBy(i); head.appendChild(th);
  }});
  rows.forEach(r => {{ const tr = table.insertRow(); r.forEach(c => {{ tr.insertCell().textContent = c; }}); }});
}}
let ascending = true;
function sortBy(i) {{
  const key = c => (c === "" || isNaN(Number(c))) ? c : Number(c);
  data.rows.sort((a, b) => {{ const x = key(a[i]), y = key(b[i]);
    return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1); }});
  ascending = !ascending; render(data.rows);
}}
render(data.rows);
</script></body></html>
"##,
        selected = rows.len(),
        status = escape(&summary["status"].to_string()),
        chart_js = dynosim::report::html::CHART_JS,
        data = script_json(&data),
    )
}
