//! Self-contained HTML pages with plots.
//!
//! INTERFACE
//! - [`CHART_JS`]: the vendored plotting library (Chart.js 3.9.1, MIT; provenance in
//!   `crates/dynosim/assets/README.md`), to inline in a `<script>` element so that a page opens
//!   with no network. Any page dynosim renders (the run report, a sweep's report) uses this one
//!   copy.
//! - [`render_run_report`]: the `--html-report` page of one run: its report, its time series
//!   and its configuration, as one file with the library, the data and the page script inlined.
//!   [`spec_configuration`] lists what a spec says about the deployment, for that page. With a
//!   planner's scaling (see [`scaling_json`]) the page also marks the events on the time plots,
//!   lists them in a table, and plots the workers the planner asked for over time.
//! - [`json_for_script`]: JSON made safe to inline in a `<script>` element.
//!
//! The page reports on itself: once every plot is drawn, the element `#render-status` says
//! `drawn N of N plots` (a plot counts as drawn when its canvas holds non-blank pixels), and
//! any script error is listed there instead. The browser test reads it.

use serde_json::{json, Value as Json};

use super::timeseries::TimeSeries;
use super::{Report, Value};
use crate::config::{ArrivalMode, Deployment, ReplaySpec, RouterMode};

/// Chart.js 3.9.1, minified UMD build; defines the global `Chart`.
pub const CHART_JS: &str = include_str!("../../assets/chart.min.js");

/// The page script of the run report (reads the `#run-data` JSON, draws with Chart.js).
const RUN_REPORT_SCRIPT: &str = include_str!("html_run_report.js");

/// Workers drawn one line each; pools with more are drawn as their mean and max.
pub const MAX_WORKER_LINES: usize = 16;

/// `value` as JSON text that cannot end a `<script>` element or open an HTML comment.
pub fn json_for_script(value: &Json) -> String {
    value
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// Text escaped for HTML element content and attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// What the spec says about the deployment, as (setting, value) rows for the page.
pub fn spec_configuration(spec: &ReplaySpec) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let mut row = |name: &str, value: String| rows.push((name.to_string(), value));
    let engine =
        |row: &mut dyn FnMut(&str, String), prefix: &str, args: &crate::config::EngineArgs| {
            row(
                &format!("{prefix}engine"),
                format!("{:?}", args.engine_type).to_lowercase(),
            );
            row(
                &format!("{prefix}num_gpu_blocks"),
                args.num_gpu_blocks.to_string(),
            );
            row(&format!("{prefix}block_size"), args.block_size.to_string());
            if let Some(seqs) = args.max_num_seqs {
                row(&format!("{prefix}max_num_seqs"), seqs.to_string());
            }
            if let Some(tokens) = args.max_num_batched_tokens {
                row(
                    &format!("{prefix}max_num_batched_tokens"),
                    tokens.to_string(),
                );
            }
            row(
                &format!("{prefix}enable_prefix_caching"),
                args.enable_prefix_caching.to_string(),
            );
            row(
                &format!("{prefix}enable_chunked_prefill"),
                args.enable_chunked_prefill.to_string(),
            );
            row(&format!("{prefix}dp_size"), args.dp_size.to_string());
            row(
                &format!("{prefix}speedup_ratio"),
                args.speedup_ratio.to_string(),
            );
        };
    match &spec.deployment {
        Deployment::Disaggregated { prefill, decode } => {
            row("topology", "disaggregated".into());
            row("num_prefill_workers", prefill.workers.to_string());
            row("num_decode_workers", decode.workers.to_string());
            engine(&mut row, "prefill ", &prefill.engine);
            engine(&mut row, "decode ", &decode.engine);
        }
        Deployment::Aggregated(pool) => {
            row("topology", "aggregated".into());
            row("num_workers", pool.workers.to_string());
            engine(&mut row, "", &pool.engine);
        }
    }
    let router = match spec.router_mode {
        RouterMode::RoundRobin => "round_robin",
        RouterMode::KvRouter => "kv_router",
    };
    row("router_mode", router.into());
    match spec.arrivals {
        ArrivalMode::Timestamps { speedup } => {
            row("arrivals", format!("trace timestamps, speed-up {speedup}"))
        }
        ArrivalMode::Concurrency { limit } => {
            row("arrivals", format!("closed loop, concurrency {limit}"))
        }
    }
    if let Some(cap) = spec.max_sim_time_ms {
        row("max_sim_time_ms", cap.to_string());
    }
    rows
}

/// One scaling event of a planner, for the page.
#[derive(Clone, Copy, Debug)]
pub struct ScalingMark<'a> {
    pub at_s: f64,
    /// `agg`, `prefill` or `decode`.
    pub component: &'a str,
    pub from: usize,
    pub to: usize,
}

/// A planner's scaling as the page reads it: the worker count each component started with,
/// the events (in order) and the number of ticks.
pub fn scaling_json(initial: &[(&str, usize)], events: &[ScalingMark<'_>], ticks: u64) -> Json {
    let initial: serde_json::Map<String, Json> = initial
        .iter()
        .map(|&(component, count)| (component.to_string(), json!(count)))
        .collect();
    let events: Vec<Json> = events
        .iter()
        .map(|e| {
            json!({
                "at_s": e.at_s,
                "component": e.component,
                "from": e.from,
                "to": e.to,
                "reason": if e.to > e.from { "scale_up" } else { "scale_down" },
            })
        })
        .collect();
    json!({ "initial": initial, "events": events, "ticks": ticks })
}

/// The HTML report of one run: `configuration` rows (the command and the deployment), the
/// report, the time series recorded during it, and, for a run a planner scaled, `scaling` (from
/// [`scaling_json`]). The page needs no network.
pub fn render_run_report(
    title: &str,
    configuration: &[(String, String)],
    report: &Report,
    series: &TimeSeries,
    scaling: Option<&Json>,
) -> String {
    let report_json: serde_json::Map<String, Json> = report
        .entries
        .iter()
        .map(|(key, value)| {
            let value = match *value {
                Value::Int(v) => json!(v),
                Value::Float(v) if v.is_finite() => json!(v),
                Value::Float(_) => Json::Null,
            };
            ((*key).to_string(), value)
        })
        .collect();
    let mut data = json!({
        "report": report_json,
        "series": series.to_json(MAX_WORKER_LINES),
    });
    let scaling_section = match scaling {
        Some(scaling) => {
            data["scaling"] = scaling.clone();
            SCALING_SECTION
        }
        None => "",
    };
    let mut config_rows = String::new();
    for (name, value) in configuration {
        config_rows.push_str(&format!(
            "<tr><th>{}</th><td>{}</td></tr>\n",
            escape_html(name),
            escape_html(value)
        ));
    }
    let title = escape_html(title);
    format!(
        r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="dynosim {version}">
<title>{title}</title>
<script>
// Collected before anything else runs, so that the page can say whether it rendered cleanly.
window.dynosimErrors = [];
window.addEventListener("error", function (e) {{ window.dynosimErrors.push(String(e.message)); }});
</script>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }}
h1 {{ font-size: 1.5em; }} h2 {{ font-size: 1.15em; margin-top: 1.6em; }}
.grid {{ display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 1.2em; }}
.plot {{ border: 1px solid #ddd; border-radius: 6px; padding: 0.6em; }}
.plot h3 {{ font-size: 0.95em; margin: 0 0 0.4em 0; }}
.plot p {{ font-size: 0.8em; color: #555; margin: 0.3em 0 0 0; }}
.canvas-box {{ position: relative; height: 280px; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ text-align: left; padding: 0.15em 0.8em 0.15em 0; border-bottom: 1px solid #eee; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
td.up {{ color: #1e8449; }} td.down {{ color: #b03a2e; }}
#render-status {{ font-size: 0.8em; color: #777; margin-top: 2em; }}
</style>
</head>
<body>
<h1>{title}</h1>
<h2>Summary</h2>
<table id="summary"></table>
<h2>Latency distributions</h2>
<div class="grid">
<div class="plot"><h3>Time to first token</h3><div class="canvas-box"><canvas id="plot-ttft"></canvas></div><p>Completed requests per bin (log-spaced bins, ms).</p></div>
<div class="plot"><h3>Inter-token latency</h3><div class="canvas-box"><canvas id="plot-itl"></canvas></div><p>Token gaps of completed requests (tokens of one burst are 0 ms apart; they fall in the first bin).</p></div>
<div class="plot"><h3>End-to-end latency</h3><div class="canvas-box"><canvas id="plot-e2e"></canvas></div><p>Completed requests per bin (log-spaced bins, ms).</p></div>
</div>
<h2>Over model time</h2>
<div class="grid">
<div class="plot"><h3>Throughput</h3><div class="canvas-box"><canvas id="plot-throughput"></canvas></div><p>Output tokens per second, and completed requests per second.</p></div>
<div class="plot"><h3>Queue depth</h3><div class="canvas-box"><canvas id="plot-queue"></canvas></div><p>Requests waiting in the engines' queues (sum over workers of each worker's mean at its pass ends).</p></div>
<div class="plot"><h3>Running requests per worker</h3><div class="canvas-box"><canvas id="plot-running"></canvas></div><p>Mean batch size at the worker's pass ends; a gap where the worker ended no pass.</p></div>
<div class="plot"><h3>KV-cache use per worker</h3><div class="canvas-box"><canvas id="plot-kv"></canvas></div><p>Share of the KV cache held by requests (idle cached prefixes excluded).</p></div>
<div class="plot"><h3>Prefix-cache reuse</h3><div class="canvas-box"><canvas id="plot-reuse"></canvas></div><p>Prompt tokens served from the prefix cache, of requests completed in each interval, and cumulatively (the report's prefix_cache_reused_ratio at the end).</p></div>
</div>
{scaling_section}<h2>Configuration</h2>
<table id="configuration">
{config_rows}</table>
<details><summary>All report keys</summary><table id="report-keys"></table></details>
<p id="render-status">rendering...</p>
<script type="application/json" id="run-data">{data}</script>
<script>
{chart_js}
</script>
<script>
{page_script}
</script>
</body>
</html>
"##,
        version = env!("CARGO_PKG_VERSION"),
        data = json_for_script(&data),
        chart_js = CHART_JS,
        page_script = RUN_REPORT_SCRIPT,
    )
}

/// The scaling section of a planner run's page (the script fills it from the data).
const SCALING_SECTION: &str = r#"<h2>Scaling</h2>
<p id="scaling-summary"></p>
<div class="grid">
<div class="plot"><h3>Workers</h3><div class="canvas-box"><canvas id="plot-workers"></canvas></div><p>Workers the planner asked for (starting and active; draining ones excluded), per pool. The time plots above mark its scaling events: green up, red down.</p></div>
</div>
<table id="scaling-events"><tr><th>time (s)</th><th>pool</th><th>from</th><th>to</th><th>reason</th></tr></table>
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{PassEvent, RankLoad};

    #[test]
    fn the_vendored_library_is_the_recorded_version_and_closes_no_script_element() {
        assert!(CHART_JS.starts_with("/*!\n * Chart.js v3.9.1"));
        // Inlined in <script>, a "</script" in the text would end the element early.
        assert!(!CHART_JS.to_ascii_lowercase().contains("</script"));
        assert!(!RUN_REPORT_SCRIPT.to_ascii_lowercase().contains("</script"));
    }

    #[test]
    fn script_json_cannot_close_the_element_and_reads_back_the_same() {
        let value = json!({"a": "</script><!-- & >"});
        let text = json_for_script(&value);
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('&'));
        assert_eq!(serde_json::from_str::<Json>(&text).unwrap(), value);
    }

    #[test]
    fn the_page_inlines_everything_and_escapes_the_configuration() {
        let mut series = TimeSeries::new(&["worker"]);
        let load = RankLoad {
            waiting: 1,
            running: 2,
            kv_used_tokens: 3,
            kv_capacity_tokens: 4,
        };
        series.on_pass_end(
            5.0,
            0,
            0,
            load,
            &[PassEvent::Tokens { id: 0, count: 1 }],
            true,
        );
        let report = Report {
            entries: vec![
                ("num_requests", Value::Int(1)),
                ("duration_ms", Value::Float(5.0)),
            ],
        };
        let configuration = vec![("command".to_string(), "dynosim <trace> & more".to_string())];
        let page = render_run_report("dynosim run <1>", &configuration, &report, &series, None);
        // Without a planner the page has no scaling section.
        assert!(!page.contains(r#"<canvas id="plot-workers">"#));
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("<title>dynosim run &lt;1&gt;</title>"));
        assert!(page.contains("<td>dynosim &lt;trace&gt; &amp; more</td>"));
        assert!(page.contains(CHART_JS));
        // No external resource: nothing to fetch.
        for reference in ["src=", "href=", "http://", "https://", "@import"] {
            let outside_library = page.replace(CHART_JS, "");
            assert!(!outside_library.contains(reference), "{reference}");
        }
        let start = page.find(r#"id="run-data">"#).unwrap() + r#"id="run-data">"#.len();
        let end = start + page[start..].find("</script>").unwrap();
        let data: Json = serde_json::from_str(&page[start..end]).unwrap();
        assert_eq!(data["report"]["num_requests"], 1);
        assert_eq!(data["series"]["output_tokens"], json!([1]));
    }

    #[test]
    fn a_planner_run_adds_its_scaling_section_and_data() {
        let series = TimeSeries::new(&["worker"]);
        let report = Report { entries: vec![] };
        let events = [
            ScalingMark {
                at_s: 25.0,
                component: "agg",
                from: 1,
                to: 2,
            },
            ScalingMark {
                at_s: 115.0,
                component: "agg",
                from: 2,
                to: 1,
            },
        ];
        let scaling = scaling_json(&[("agg", 1)], &events, 24);
        let page = render_run_report("run", &[], &report, &series, Some(&scaling));
        assert!(page.contains(r#"<canvas id="plot-workers">"#));
        assert!(page.contains(r#"<table id="scaling-events">"#));
        let start = page.find(r#"id="run-data">"#).unwrap() + r#"id="run-data">"#.len();
        let end = start + page[start..].find("</script>").unwrap();
        let data: Json = serde_json::from_str(&page[start..end]).unwrap();
        assert_eq!(data["scaling"]["ticks"], 24);
        assert_eq!(data["scaling"]["initial"]["agg"], 1);
        assert_eq!(data["scaling"]["events"][0]["reason"], "scale_up");
        assert_eq!(data["scaling"]["events"][1]["reason"], "scale_down");
        assert_eq!(data["scaling"]["events"][1]["at_s"], 115.0);
    }
}
