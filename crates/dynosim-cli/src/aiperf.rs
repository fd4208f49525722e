//! `--aiperf-dir DIR`: checks the directory before the run and writes the AIPerf files after
//! it (their contents come from `dynosim::report::aiperf`).

use std::path::Path;

use dynosim::report::aiperf::{
    AiperfExport, RECORDS_JSONL_FILE, SUMMARY_CSV_FILE, SUMMARY_JSON_FILE,
};
use dynosim::{Error, Report, RequestRecord, Result};

use crate::output;

/// Rejects a directory that can never be written (an existing file) before any simulation.
pub fn check_dir(flag: &str, dir: &Path) -> Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(Error::usage_about(
            flag,
            format!("{} exists and is not a directory", dir.display()),
        ));
    }
    Ok(())
}

/// Writes the three files into `dir` (created if missing), each atomically.
pub fn write_dir(dir: &Path, report: &Report, records: &[RequestRecord]) -> Result<()> {
    let export = AiperfExport::new(report, records);
    output::write_atomically(
        &dir.join(RECORDS_JSONL_FILE),
        export.records_jsonl().as_bytes(),
        "AIPerf per-request records",
    )?;
    output::write_atomically(
        &dir.join(SUMMARY_CSV_FILE),
        export.summary_csv().as_bytes(),
        "AIPerf summary CSV",
    )?;
    output::write_atomically(
        &dir.join(SUMMARY_JSON_FILE),
        export.summary_json().as_bytes(),
        "AIPerf summary JSON",
    )
}
