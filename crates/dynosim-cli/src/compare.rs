//! `dynosim compare A B [--json]`: two runs side by side, each a dynosim report JSON or an
//! AIPerf run directory (measured, or written by `--aiperf-dir`).
//!
//! Rows are TTFT, TTST, ITL and E2E (mean, p50, p90, p99) and the request, output-token and
//! total-token throughputs. ITL is per request as AIPerf defines it, `(e2e - ttft)/(osl - 1)`,
//! which is the dynosim report's `*_tpot_ms` (its `*_itl_ms` pools token gaps instead), so
//! both kinds of input measure the same thing. The relative difference is `(B - A) / A`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Parser;
use dynosim::report::aiperf::SUMMARY_JSON_FILE;
use dynosim::{Error, Result};
use serde_json::{json, Value as Json};

/// Compares two runs: each a dynosim report JSON (--report-json) or an AIPerf run directory
/// (from AIPerf, or from dynosim --aiperf-dir). Prints TTFT, TTST, ITL, E2E (mean, p50, p90,
/// p99) and throughputs side by side with the relative difference (B - A) / A.
#[derive(Parser, Debug)]
#[command(
    name = "compare",
    disable_version_flag = true,
    color = clap::ColorChoice::Never
)]
pub struct CompareCli {
    /// First run (the baseline): a dynosim report JSON or an AIPerf run directory
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// Second run: a dynosim report JSON or an AIPerf run directory
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Print the comparison as JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

/// One compared quantity: label, unit, and where each kind of input keeps it.
struct Row {
    metric: &'static str,
    stat: &'static str,
    unit: &'static str,
    /// Key in a dynosim report.
    report_key: &'static str,
    /// (tag, statistic) in AIPerf's summary.
    aiperf: (&'static str, &'static str),
}

const fn latency(
    metric: &'static str,
    stat: &'static str,
    report_key: &'static str,
    tag: &'static str,
    aiperf_stat: &'static str,
) -> Row {
    Row {
        metric,
        stat,
        unit: "ms",
        report_key,
        aiperf: (tag, aiperf_stat),
    }
}

macro_rules! latency_rows {
    ($metric:literal, $report:literal, $tag:literal) => {
        [
            latency($metric, "mean", concat!("mean_", $report), $tag, "avg"),
            latency($metric, "p50", concat!("median_", $report), $tag, "p50"),
            latency($metric, "p90", concat!("p90_", $report), $tag, "p90"),
            latency($metric, "p99", concat!("p99_", $report), $tag, "p99"),
        ]
    };
}

fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    rows.extend(latency_rows!("TTFT", "ttft_ms", "time_to_first_token"));
    rows.extend(latency_rows!("TTST", "ttst_ms", "time_to_second_token"));
    rows.extend(latency_rows!("ITL", "tpot_ms", "inter_token_latency"));
    rows.extend(latency_rows!("E2E", "e2e_latency_ms", "request_latency"));
    for (metric, unit, report_key, tag) in [
        (
            "Request throughput",
            "requests/sec",
            "request_throughput_rps",
            "request_throughput",
        ),
        (
            "Output token throughput",
            "tokens/sec",
            "output_throughput_tok_s",
            "output_token_throughput",
        ),
        (
            "Total token throughput",
            "tokens/sec",
            "total_throughput_tok_s",
            "total_token_throughput",
        ),
    ] {
        rows.push(Row {
            metric,
            stat: "",
            unit,
            report_key,
            aiperf: (tag, "avg"),
        });
    }
    rows
}

/// One side of the comparison, loaded.
struct Side {
    path: PathBuf,
    kind: &'static str,
    values: Vec<Option<f64>>,
}

/// Runs `compare` on already-parsed arguments and returns what it prints.
pub fn run(cli: &CompareCli) -> Result<String> {
    let rows = rows();
    let a = load(&cli.a, &rows)?;
    let b = load(&cli.b, &rows)?;
    Ok(if cli.json {
        render_json(&rows, &a, &b)
    } else {
        render_table(&rows, &a, &b)
    })
}

fn load(path: &Path, rows: &[Row]) -> Result<Side> {
    if path.is_dir() {
        let summary_path = path.join(SUMMARY_JSON_FILE);
        if !summary_path.is_file() {
            return Err(Error::usage(format!(
                "compare: {} is a directory without {SUMMARY_JSON_FILE}; give a dynosim \
                 report JSON or an AIPerf run directory",
                path.display()
            )));
        }
        let summary = read_json(&summary_path)?;
        let values = rows
            .iter()
            .map(|row| aiperf_value(&summary_path, &summary, row))
            .collect::<Result<_>>()?;
        return Ok(Side {
            path: path.to_path_buf(),
            kind: "AIPerf run directory",
            values,
        });
    }
    let report = read_json(path)?;
    let values = rows
        .iter()
        .map(|row| match report.get(row.report_key) {
            Some(value) => value.as_f64().map(Some).ok_or_else(|| {
                Error::usage(format!(
                    "compare: {}: field {:?} is not a number",
                    path.display(),
                    row.report_key
                ))
            }),
            None => Err(Error::usage(format!(
                "compare: {}: field {:?} is missing; give a dynosim report JSON \
                 (--report-json) or an AIPerf run directory",
                path.display(),
                row.report_key
            ))),
        })
        .collect::<Result<_>>()?;
    Ok(Side {
        path: path.to_path_buf(),
        kind: "dynosim report",
        values,
    })
}

fn read_json(path: &Path) -> Result<Json> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| Error::usage(format!("compare: cannot read {}: {err}", path.display())))?;
    let value: Json = serde_json::from_str(&text).map_err(|err| {
        Error::usage(format!(
            "compare: {} is not valid JSON: {err}",
            path.display()
        ))
    })?;
    if !value.is_object() {
        return Err(Error::usage(format!(
            "compare: {}: expected a JSON object",
            path.display()
        )));
    }
    Ok(value)
}

/// A statistic of an AIPerf summary in the row's unit. Metrics a run did not measure (TTST
/// of a non-streaming benchmark) are `None`; a metric present but malformed is an error.
fn aiperf_value(path: &Path, summary: &Json, row: &Row) -> Result<Option<f64>> {
    let (tag, stat) = row.aiperf;
    let Some(block) = summary.get(tag) else {
        return Ok(None);
    };
    let field = |what: &str| {
        Error::usage(format!(
            "compare: {}: field \"{tag}.{what}\" {}",
            path.display(),
            if what == "unit" {
                "is missing or not a string"
            } else {
                "is not a number"
            }
        ))
    };
    let unit = block
        .get("unit")
        .and_then(Json::as_str)
        .ok_or_else(|| field("unit"))?;
    let Some(value) = block.get(stat) else {
        return Ok(None);
    };
    let value = value.as_f64().ok_or_else(|| field(stat))?;
    let scale = match (row.unit, unit) {
        (wanted, got) if wanted == got => 1.0,
        ("ms", "ns") => 1.0e-6,
        ("ms", "us") => 1.0e-3,
        ("ms", "s" | "sec") => 1.0e3,
        (wanted, got) => {
            return Err(Error::usage(format!(
                "compare: {}: field \"{tag}.unit\" is {got:?}; expected {wanted:?}",
                path.display()
            )))
        }
    };
    Ok(Some(value * scale))
}

fn relative_difference(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a != 0.0 => Some((b - a) / a),
        _ => None,
    }
}

fn row_label(row: &Row) -> String {
    if row.stat.is_empty() {
        format!("{} ({})", row.metric, row.unit)
    } else {
        format!("{} {} ({})", row.metric, row.stat, row.unit)
    }
}

fn render_table(rows: &[Row], a: &Side, b: &Side) -> String {
    let number = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
    let mut out = String::new();
    let _ = writeln!(out, "A: {} ({})", a.path.display(), a.kind);
    let _ = writeln!(out, "B: {} ({})", b.path.display(), b.kind);
    let _ = writeln!(out);
    let labels: Vec<String> = rows.iter().map(row_label).collect();
    let width = labels.iter().map(String::len).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "{:<width$}  {:>14}  {:>14}  {:>9}",
        "Metric", "A", "B", "B vs A"
    );
    for (i, label) in labels.iter().enumerate() {
        let diff = relative_difference(a.values[i], b.values[i])
            .map_or_else(|| "-".to_string(), |d| format!("{:+.1}%", d * 100.0));
        let _ = writeln!(
            out,
            "{label:<width$}  {:>14}  {:>14}  {diff:>9}",
            number(a.values[i]),
            number(b.values[i]),
        );
    }
    out
}

fn render_json(rows: &[Row], a: &Side, b: &Side) -> String {
    let metrics: Vec<Json> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| {
            json!({
                "metric": row.metric,
                "stat": if row.stat.is_empty() { "value" } else { row.stat },
                "unit": row.unit,
                "a": a.values[i],
                "b": b.values[i],
                "relative_difference": relative_difference(a.values[i], b.values[i]),
            })
        })
        .collect();
    let document = json!({
        "a": {"path": a.path.display().to_string(), "kind": a.kind},
        "b": {"path": b.path.display().to_string(), "kind": b.kind},
        "metrics": metrics,
    });
    let mut text = serde_json::to_string_pretty(&document).expect("plain JSON always serializes");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_difference_is_against_a() {
        assert_eq!(relative_difference(Some(100.0), Some(110.0)), Some(0.1));
        assert_eq!(relative_difference(Some(0.0), Some(1.0)), None);
        assert_eq!(relative_difference(None, Some(1.0)), None);
    }

    #[test]
    fn every_latency_has_four_statistics_and_three_throughputs_follow() {
        let rows = rows();
        assert_eq!(rows.len(), 19);
        assert_eq!(rows[0].report_key, "mean_ttft_ms");
        assert_eq!(rows[9].report_key, "median_tpot_ms");
        assert_eq!(rows[9].aiperf, ("inter_token_latency", "p50"));
        assert_eq!(rows[18].aiperf, ("total_token_throughput", "avg"));
    }
}
