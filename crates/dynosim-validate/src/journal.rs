//! The validation journal: `journal.jsonl` in the output directory, one line per simulated
//! row (or row whose tables could not be built), appended as rows finish and keyed by the hash
//! of the row's settings, and one per engine configuration whose tables could not be built
//! (keyed `tables-<hash>` of the configuration and the package's and dynosim's versions). A
//! rerun reads it and simulates only the rows it lacks, and runs no failing build again.
//!
//! INTERFACE
//! - [`Journal::open`]: reads the stored entries (a last line cut short by an interrupted run is
//!   dropped) and opens the file for appending; [`Journal::stored`], [`Journal::append`].
//! - [`Entry`]: what is stored for a row (status, reason, predicted means, AIC version);
//!   [`Entry::apply`] fills a row's result from it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dynosim::{Error, Result};
use serde_json::{json, Value};

use crate::RowResult;

pub const JOURNAL_FILE: &str = "journal.jsonl";

/// A row's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Simulated: predictions and errors are known.
    Ok,
    /// Not modelled: the reason says why (unknown model, system or version, a shape AIC
    /// timing lacks, a table build error, a row without lengths or measurements).
    Unmodelable,
    /// Modelled but the simulation failed (the reason is its error).
    Error,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Unmodelable => "unmodelable",
            Status::Error => "error",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "ok" => Some(Status::Ok),
            "unmodelable" => Some(Status::Unmodelable),
            "error" => Some(Status::Error),
            _ => None,
        }
    }
}

/// What is stored for one row.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub status: Status,
    pub reason: String,
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub aic_version: String,
}

impl Entry {
    pub fn ok(ttft_ms: Option<f64>, tpot_ms: Option<f64>) -> Self {
        Entry {
            status: Status::Ok,
            reason: String::new(),
            ttft_ms,
            tpot_ms,
            aic_version: String::new(),
        }
    }

    pub fn unmodelable(reason: String) -> Self {
        Entry {
            status: Status::Unmodelable,
            reason,
            ttft_ms: None,
            tpot_ms: None,
            aic_version: String::new(),
        }
    }

    pub fn error(reason: String) -> Self {
        Entry {
            status: Status::Error,
            ..Entry::unmodelable(reason)
        }
    }

    /// Fills a row's result with this outcome.
    pub fn apply(&self, row: &mut RowResult) {
        row.status = self.status;
        row.reason = self.reason.clone();
        row.predicted_ttft_ms = self.ttft_ms;
        row.predicted_tpot_ms = self.tpot_ms;
        row.aic_version = self.aic_version.clone();
    }
}

pub struct Journal {
    path: PathBuf,
    stored: HashMap<String, Entry>,
    file: Mutex<File>,
}

impl Journal {
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join(JOURNAL_FILE);
        let fail =
            |err: std::io::Error| Error::runtime(format!("cannot open {}: {err}", path.display()));
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(fail)?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .map_err(|err| Error::runtime(format!("cannot read {}: {err}", path.display())))?;
        // A line without its newline was cut short: drop it before appending.
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        if complete < text.len() {
            file.set_len(complete as u64).map_err(fail)?;
            file.seek(SeekFrom::End(0)).map_err(fail)?;
        }
        let mut stored = HashMap::new();
        for (number, line) in text[..complete].lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (key, entry) = parse_line(line).ok_or_else(|| {
                Error::runtime(format!(
                    "{}:{}: not a validation journal line; remove the file to start afresh",
                    path.display(),
                    number + 1
                ))
            })?;
            stored.insert(key, entry);
        }
        Ok(Journal {
            path,
            stored,
            file: Mutex::new(file),
        })
    }

    pub fn stored(&self, key: &str) -> Option<&Entry> {
        self.stored.get(key)
    }

    /// Appends one entry as one line (one write, so lines never interleave).
    pub fn append(&self, key: &str, entry: &Entry) -> Result<()> {
        let line = json!({
            "key": key,
            "status": entry.status.name(),
            "reason": entry.reason,
            "ttft_ms": entry.ttft_ms,
            "tpot_ms": entry.tpot_ms,
            "aic_version": entry.aic_version,
        });
        let mut text = line.to_string();
        text.push('\n');
        let mut file = self
            .file
            .lock()
            .map_err(|_| Error::runtime("the validation journal's lock was poisoned"))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|err| Error::runtime(format!("cannot write {}: {err}", self.path.display())))
    }
}

fn parse_line(line: &str) -> Option<(String, Entry)> {
    let value: Value = serde_json::from_str(line).ok()?;
    let number = |key: &str| -> Option<Option<f64>> {
        match value.get(key)? {
            Value::Null => Some(None),
            other => Some(Some(other.as_f64()?)),
        }
    };
    Some((
        value.get("key")?.as_str()?.to_owned(),
        Entry {
            status: Status::parse(value.get("status")?.as_str()?)?,
            reason: value.get("reason")?.as_str()?.to_owned(),
            ttft_ms: number("ttft_ms")?,
            tpot_ms: number("tpot_ms")?,
            aic_version: value.get("aic_version")?.as_str()?.to_owned(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_line_is_dropped_and_entries_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut entry = Entry::ok(Some(12.5), Some(3.25));
        entry.aic_version = "0.24.0".into();
        {
            let journal = Journal::open(dir.path()).unwrap();
            journal.append("a", &entry).unwrap();
            journal
                .append("b", &Entry::unmodelable("no tables".into()))
                .unwrap();
        }
        let path = dir.path().join(JOURNAL_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(r#"{"key": "c"#);
        std::fs::write(&path, text).unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        assert_eq!(journal.stored("a"), Some(&entry));
        assert_eq!(journal.stored("b").unwrap().status, Status::Unmodelable);
        assert!(journal.stored("c").is_none());
    }
}
