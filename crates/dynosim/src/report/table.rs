//! The AIPerf-style terminal table the reference prints (frontend.md §3.6), byte for byte; a run
//! where some request did not complete adds lines after it (`accounting::Shortfall`).

use super::accounting::Shortfall;
use super::{Report, Value};

const TITLE: &str = "NVIDIA AIPerf | LLM Metrics";
const HEADERS: [&str; 8] = ["Metric", "avg", "min", "max", "p99", "p90", "p75", "std"];
/// (label, key suffix) of the distribution rows, in display order.
const STAT_ROWS: [(&str, &str); 5] = [
    ("Time to First Token (ms)", "ttft_ms"),
    ("Time to Second Token (ms)", "ttst_ms"),
    ("Request Latency (ms)", "e2e_latency_ms"),
    ("Inter Token Latency (ms)", "itl_ms"),
    (
        "Output Token Throughput Per User (tokens/sec/user)",
        "output_token_throughput_per_user",
    ),
];
/// Statistic prefixes of the stat columns after `Metric`, in column order.
const STAT_PREFIXES: [&str; 7] = ["mean", "min", "max", "p99", "p90", "p75", "std"];

impl Report {
    /// The title, the table and the three trailing lines, joined by `\n`, without a trailing
    /// newline (the CLI adds it).
    pub fn render_table(&self) -> String {
        let rows = self.table_rows();
        let mut lines = vec![TITLE.to_string(), render_grid(&rows)];
        let trailing = [
            ("Wall Time (ms)", "wall_time_ms"),
            ("Prefix Cache Reused Ratio", "prefix_cache_reused_ratio"),
            (
                "First Admission Prefix Cache Reused Ratio",
                "first_admission_prefix_cache_reused_ratio",
            ),
        ];
        for (label, key) in trailing {
            if let Some(value) = self.get(key) {
                lines.push(format!("{label}: {}", format_value(Some(value))));
            }
        }
        // Only when some request did not complete (the reference's table has no such line).
        if let Some(shortfall) = Shortfall::of(self) {
            lines.extend(shortfall.table_lines());
        }
        lines.join("\n")
    }

    fn table_rows(&self) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        for (label, suffix) in STAT_ROWS {
            if self.get(&format!("mean_{suffix}")).is_none() {
                continue;
            }
            let mut row = vec![label.to_string()];
            for prefix in STAT_PREFIXES {
                row.push(format_value(self.get(&format!("{prefix}_{suffix}"))));
            }
            rows.push(row);
        }
        let count = self
            .get("completed_requests")
            .or_else(|| self.get("num_requests"));
        let scalars = [
            (
                "Output Token Throughput (tokens/sec)",
                self.get("output_throughput_tok_s"),
            ),
            (
                "Request Throughput (requests/sec)",
                self.get("request_throughput_rps"),
            ),
            ("Request Count (requests)", count),
        ];
        for (label, value) in scalars {
            let mut row = vec![label.to_string(), format_value(value)];
            row.extend((1..STAT_PREFIXES.len()).map(|_| "N/A".to_string()));
            rows.push(row);
        }
        rows
    }
}

fn render_grid(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let separator = |left: &str, mid: &str, right: &str| {
        let rules: Vec<String> = widths.iter().map(|w| "━".repeat(w + 2)).collect();
        format!("{left}{}{right}", rules.join(mid))
    };
    let render_row = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(index, (cell, &width))| {
                if index == 0 {
                    format!(" {cell:<width$} ")
                } else {
                    format!(" {cell:>width$} ")
                }
            })
            .collect();
        format!("┃{}┃", padded.join("┃"))
    };
    let headers: Vec<String> = HEADERS.iter().map(|h| h.to_string()).collect();
    let mut lines = vec![
        separator("┏", "┳", "┓"),
        render_row(&headers),
        separator("┡", "╇", "┩"),
    ];
    lines.extend(rows.iter().map(|row| render_row(row)));
    lines.push(separator("└", "┴", "┘"));
    lines.join("\n")
}

fn format_value(value: Option<Value>) -> String {
    match value {
        None => "N/A".to_string(),
        // Python's `f"{int:,.2f}"` converts the int to float first.
        Some(Value::Int(v)) => format_thousands_2f(v as f64),
        Some(Value::Float(v)) => format_thousands_2f(v),
    }
}

/// Python's `f"{value:,.2f}"`: two decimals rounded from the exact binary value (ties to
/// even), comma thousands separators, and a `-` on negative values including `-0.0`.
pub fn format_thousands_2f(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_string();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    // Rust's fixed-precision formatting is exact and rounds ties to even, like Python's.
    let plain = format!("{:.2}", value.abs());
    let (integer, fraction) = plain.split_once('.').expect("`{:.2}` has a decimal point");
    let mut out = String::with_capacity(plain.len() + plain.len() / 3 + 1);
    if value.is_sign_negative() {
        out.push('-');
    }
    let len = integer.len();
    for (i, digit) in integer.chars().enumerate() {
        if i > 0 && (len - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out.push('.');
    out.push_str(fraction);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_format_matches_python() {
        // Expected strings produced by python3 `f"{v:,.2f}"`.
        let cases: &[(f64, &str)] = &[
            (0.0, "0.00"),
            (-0.0, "-0.00"),
            (-0.001, "-0.00"),
            (0.125, "0.12"),
            (0.375, "0.38"),
            (2.675, "2.67"),
            (1.005, "1.00"),
            (999.995, "1,000.00"),
            (999.994, "999.99"),
            (1038433.66, "1,038,433.66"),
            (-1234567.891, "-1,234,567.89"),
            (100.0, "100.00"),
            (123456.0, "123,456.00"),
            (1e22, "10,000,000,000,000,000,000,000.00"),
            (1.5e16, "15,000,000,000,000,000.00"),
            (0.005, "0.01"),
            (0.015, "0.01"),
            (0.025, "0.03"),
            (
                f64::from_bits(0x430e_1c6d_958d_7b72),
                "1,059,438,285,926,254.25",
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(format_thousands_2f(*value), *expected, "value {value:e}");
        }
        assert_eq!(format_thousands_2f(f64::INFINITY), "inf");
        assert_eq!(format_thousands_2f(f64::NAN), "nan");
    }
}
