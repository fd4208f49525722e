//! Self-contained HTML pages with plots.
//!
//! INTERFACE
//! - [`CHART_JS`]: the vendored plotting library (Chart.js 3.9.1, MIT; provenance in
//!   `crates/dynosim/assets/README.md`), to inline in a `<script>` element so that a page opens
//!   with no network. Any page dynosim renders (the run report, a sweep's report) uses this one
//!   copy.

/// Chart.js 3.9.1, minified UMD build; defines the global `Chart`.
pub const CHART_JS: &str = include_str!("../../assets/chart.min.js");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendored_library_is_the_recorded_version_and_closes_no_script_element() {
        assert!(CHART_JS.starts_with("/*!\n * Chart.js v3.9.1"));
        // Inlined in <script>, a "</script" in the text would end the element early.
        assert!(!CHART_JS.to_ascii_lowercase().contains("</script"));
    }
}
