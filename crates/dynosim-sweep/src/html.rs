//! `report.html`: one self-contained page per sweep: the Pareto plot of output tokens/s per
//! GPU against tokens/s per user (SLA-feasible points marked, the front drawn), the best row
//! per objective with its command line, and the whole table, sortable by any column.
//!
//! INTERFACE
//! - [`report_html`]: the page for a spec and its rows. The plotting library is the project's
//!   one vendored copy (`dynosim::report::html::CHART_JS`), inlined, so the page opens offline.
//! - [`script_json`], [`escape`]: data and text made safe to inline, for this page and
//!   `dynosim validate`'s.

use serde_json::{json, Value};

use crate::objectives::{feasible, pareto_front, pareto_point};
use crate::row::{cell, Row};
use crate::spec::SweepSpec;
use crate::table::{best_json, table};

/// JSON text safe inside a `<script>` element (no `</` can end it early).
pub fn script_json(value: &Value) -> String {
    value.to_string().replace("</", "<\\/")
}

/// Text escaped for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The page for `rows` of `spec` (`over_budget`: candidates skipped for the GPU budget).
pub fn report_html(spec: &SweepSpec, rows: &[Row], over_budget: usize) -> String {
    let (header, cells) = table(spec, rows);
    let front = pareto_front(rows);
    let swept = spec.swept_keys();
    let points: Vec<Value> = rows
        .iter()
        .enumerate()
        .filter_map(|(index, row)| {
            let (x, y) = pareto_point(row)?;
            let label: Vec<String> = swept
                .iter()
                .map(|key| format!("{key}={}", cell(row.settings.get(key))))
                .collect();
            Some(json!({
                "x": x,
                "y": y,
                "feasible": feasible(row, &spec.sla),
                "front": front.contains(&index),
                "label": format!("{} {}", row.candidate, label.join(" ")),
            }))
        })
        .collect();
    let best = best_json(spec, rows, over_budget);
    let data = json!({
        "header": header,
        "rows": cells,
        "points": points,
    });
    let mut best_items = String::new();
    if let Some(entries) = best["best"].as_object() {
        for (objective, entry) in entries {
            let text = match entry["command"].as_str() {
                Some(command) => format!(
                    "<b>{}</b>: {} (value {})<br><code>{}</code>",
                    escape(objective),
                    escape(entry["candidate"].as_str().unwrap_or_default()),
                    escape(&entry["value"].to_string()),
                    escape(command)
                ),
                None => format!("<b>{}</b>: no feasible candidate", escape(objective)),
            };
            best_items.push_str(&format!("<li>{text}</li>\n"));
        }
    }
    let sla: Vec<String> = spec
        .sla
        .iter()
        .map(|bound| format!("{} {}", bound.metric, bound.limit))
        .collect();
    let summary = format!(
        "{} candidates ({} failed, {} SLA-feasible); {} over the GPU budget{} skipped; SLA: {}",
        rows.len(),
        best["failed"],
        best["feasible"],
        over_budget,
        spec.gpu_budget
            .map(|gpus| format!(" of {gpus}"))
            .unwrap_or_default(),
        if sla.is_empty() {
            "none".to_owned()
        } else {
            escape(&sla.join(", "))
        }
    );
    format!(
        r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>dynosim sweep: {title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
#plot {{ max-width: 900px; }}
table {{ border-collapse: collapse; font-size: 12px; }}
th, td {{ border: 1px solid #ccc; padding: 2px 6px; white-space: nowrap; }}
th {{ cursor: pointer; background: #f0f0f0; position: sticky; top: 0; }}
tr.front td {{ background: #eef6ff; }}
.scroll {{ overflow: auto; max-height: 70vh; }}
code {{ font-size: 11px; word-break: break-all; }}
</style>
</head>
<body>
<h1>dynosim sweep: {title}</h1>
<p>{summary}</p>
<h2>Pareto front</h2>
<p>Output tokens/s per GPU against tokens/s per user; filled points meet the SLAs, the line joins
the front.</p>
<div id="plot"><canvas id="chart"></canvas></div>
<h2>Best per objective</h2>
<ul>
{best_items}</ul>
<h2>All candidates</h2>
<p>Click a column to sort; rows on the Pareto front are shaded.</p>
<div class="scroll"><table id="table"></table></div>
<script>{chart_js}</script>
<script id="data" type="application/json">{data}</script>
<script>
const data = JSON.parse(document.getElementById("data").textContent);
const points = data.points;
const front = points.filter(p => p.front).sort((a, b) => a.x - b.x);
new Chart(document.getElementById("chart"), {{
  type: "scatter",
  data: {{ datasets: [
    {{ label: "SLA-feasible", data: points.filter(p => p.feasible), backgroundColor: "#1f77b4", pointRadius: 5 }},
    {{ label: "not feasible", data: points.filter(p => !p.feasible), borderColor: "#d62728",
       backgroundColor: "rgba(0,0,0,0)", pointRadius: 5 }},
    {{ label: "Pareto front", data: front, showLine: true, borderColor: "#2ca02c", pointRadius: 0, fill: false }},
  ] }},
  options: {{
    animation: false,
    scales: {{
      x: {{ title: {{ display: true, text: "output tokens/s per GPU" }} }},
      y: {{ title: {{ display: true, text: "tokens/s per user (mean)" }} }},
    }},
    plugins: {{ tooltip: {{ callbacks: {{ label: c => c.raw.label + " (" + c.raw.x.toFixed(1) + ", " + c.raw.y.toFixed(1) + ")" }} }} }},
  }},
}});
const frontIds = new Set(front.map(p => p.label.split(" ")[0]));
const tableEl = document.getElementById("table");
let order = data.rows.map((_, i) => i), sortColumn = -1, ascending = true;
function render() {{
  const head = "<tr>" + data.header.map((h, i) =>
    "<th data-i=\"" + i + "\">" + h + (i === sortColumn ? (ascending ? " ▲" : " ▼") : "") + "</th>").join("") + "</tr>";
  const body = order.map(i => {{
    const row = data.rows[i];
    const cls = frontIds.has(row[0]) ? " class=\"front\"" : "";
    return "<tr" + cls + ">" + row.map(c => "<td>" + c.replace(/&/g, "&amp;").replace(/</g, "&lt;") + "</td>").join("") + "</tr>";
  }}).join("");
  tableEl.innerHTML = head + body;
  tableEl.querySelectorAll("th").forEach(th => th.onclick = () => sortBy(Number(th.dataset.i)));
}}
function sortBy(column) {{
  ascending = column === sortColumn ? !ascending : true;
  sortColumn = column;
  const key = v => (v !== "" && !isNaN(Number(v))) ? Number(v) : v;
  order.sort((a, b) => {{
    const x = key(data.rows[a][column]), y = key(data.rows[b][column]);
    const cmp = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
    return (ascending ? cmp : -cmp) || a - b;
  }});
  render();
}}
render();
</script>
</body>
</html>
"##,
        title = escape(&spec.name),
        chart_js = dynosim::report::html::CHART_JS,
        data = script_json(&data),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;
    use serde_json::Map;

    #[test]
    fn the_page_is_self_contained_and_holds_every_row() {
        let spec = SweepSpec::from_value(
            "s</script>.yaml",
            &json!({"base": {}, "grid": {"num_workers": [1, 2]}, "sla": {"mean_ttft_ms": 5}}),
        )
        .unwrap();
        let row = |index: usize, error: &str| {
            let mut report = Map::new();
            report.insert(
                "output_throughput_tok_s".into(),
                json!(100.0 * (index + 1) as f64),
            );
            report.insert("mean_output_token_throughput_per_user".into(), json!(10.0));
            report.insert("mean_ttft_ms".into(), json!(4.0));
            Row {
                index,
                candidate: format!("hash{index}"),
                settings: Settings {
                    values: json!({"num_workers": index + 1})
                        .as_object()
                        .unwrap()
                        .clone(),
                },
                gpus: Some(index as u64 + 1),
                error: error.into(),
                report,
            }
        };
        let page = report_html(&spec, &[row(0, ""), row(1, "bad </script> input")], 3);
        assert!(page.contains(dynosim::report::html::CHART_JS));
        assert!(!page.contains("<script src") && !page.contains("<link"));
        assert!(page.contains("hash0") && page.contains("hash1"));
        // Text that would end a script element early is escaped everywhere.
        assert_eq!(page.matches("</script>").count(), 3);
        assert!(
            page.contains("2 candidates (1 failed, 1 SLA-feasible); 3 over the GPU budget skipped")
        );
    }
}
