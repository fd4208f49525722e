//! The files a sweep writes from its rows: `results.csv`, `results.parquet` (the same table,
//! typed; [`crate::columnar`]), `pareto.csv`, `best.json` (both from [`crate::table`]) and
//! `report.html` ([`crate::html`]).
//!
//! INTERFACE
//! - [`write_outputs`]: writes the five files into the output directory, each replaced
//!   atomically (temporary file, then rename), so a reader never sees half a table.
//! - [`write_atomically`]: one file written that way.

use std::io::Write;
use std::path::{Path, PathBuf};

use dynosim::{Error, Result};

use crate::objectives::pareto_front;
use crate::row::Row;
use crate::spec::SweepSpec;
use crate::table::{best_json, text_table};

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
