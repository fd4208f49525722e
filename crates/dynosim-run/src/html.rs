//! `--html-report` (`html_report=` in Python): the page of one run, from its report, its time
//! series and, when it had one, what its planner did (the page itself is rendered by
//! `dynosim::report::html`).
//!
//! INTERFACE
//! - [`render_html_report`]: the page as one string.

use dynosim::config::ReplaySpec;
use dynosim::planner::PlannerOutcome;
use dynosim::report::html::{render_run_report, scaling_json, spec_configuration, ScalingMark};
use dynosim::report::timeseries::TimeSeries;
use dynosim::Report;

/// The HTML report of a run: `invocation` is the command as the user typed it (shown first
/// in the page's configuration table); a planner's scaling events and worker counts join the
/// page when the run had one.
pub fn render_html_report(
    invocation: &str,
    spec: &ReplaySpec,
    report: &Report,
    series: &TimeSeries,
    planner: Option<&PlannerOutcome>,
) -> String {
    let mut configuration = vec![("command".to_string(), invocation.to_string())];
    configuration.extend(spec_configuration(spec));
    let scaling = planner.map(|outcome| {
        let initial: Vec<(&str, usize)> = spec
            .deployment
            .pools()
            .into_iter()
            .map(|(role, pool)| (role.component(), pool.workers))
            .collect();
        let marks: Vec<ScalingMark<'_>> = outcome
            .events
            .iter()
            .map(|e| ScalingMark {
                at_s: e.at_s,
                component: e.component,
                from: e.from,
                to: e.to,
            })
            .collect();
        scaling_json(&initial, &marks, outcome.ticks)
    });
    render_run_report(
        "dynosim run report",
        &configuration,
        report,
        series,
        scaling.as_ref(),
    )
}
