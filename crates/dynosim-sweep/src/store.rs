//! The result store: `journal.jsonl` in the output directory, one line per finished candidate,
//! appended as candidates finish, keyed by the candidate's hash. A restarted or extended sweep
//! reads it and runs only the candidates it lacks.
//!
//! INTERFACE
//! - [`Journal::open`]: reads the stored outcomes (a last line cut short by an interrupted run
//!   is dropped) and opens the file for appending.
//! - [`Journal::stored`]: the outcome of a hash, if stored; [`Journal::append`]: stores one.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dynosim::{Error, Result};
use serde_json::{json, Map, Value};

/// What is stored for one candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub gpus: Option<u64>,
    pub error: String,
    pub report: Map<String, Value>,
}

pub struct Journal {
    path: PathBuf,
    stored: HashMap<String, Stored>,
    file: Mutex<File>,
}

pub const JOURNAL_FILE: &str = "journal.jsonl";

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
            let (hash, outcome) = parse_line(line).ok_or_else(|| {
                Error::runtime(format!(
                    "{}:{}: not a sweep journal line; remove the file to start afresh",
                    path.display(),
                    number + 1
                ))
            })?;
            stored.insert(hash, outcome);
        }
        Ok(Journal {
            path,
            stored,
            file: Mutex::new(file),
        })
    }

    pub fn stored(&self, hash: &str) -> Option<&Stored> {
        self.stored.get(hash)
    }

    /// Appends one outcome as one line (one write, so lines never interleave).
    pub fn append(
        &self,
        hash: &str,
        settings: &Map<String, Value>,
        outcome: &Stored,
    ) -> Result<()> {
        let line = json!({
            "candidate": hash,
            "gpus": outcome.gpus,
            "error": outcome.error,
            "settings": settings,
            "report": outcome.report,
        });
        let mut text = line.to_string();
        text.push('\n');
        let mut file = self
            .file
            .lock()
            .map_err(|_| Error::runtime("the sweep journal's lock was poisoned"))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|err| Error::runtime(format!("cannot write {}: {err}", self.path.display())))
    }
}

fn parse_line(line: &str) -> Option<(String, Stored)> {
    let value: Value = serde_json::from_str(line).ok()?;
    let hash = value.get("candidate")?.as_str()?.to_owned();
    let gpus = match value.get("gpus")? {
        Value::Null => None,
        gpus => Some(gpus.as_u64()?),
    };
    let error = value.get("error")?.as_str()?.to_owned();
    let report = value.get("report")?.as_object()?.clone();
    Some((
        hash,
        Stored {
            gpus,
            error,
            report,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_line_is_dropped_and_appends_continue() {
        let dir = tempfile::tempdir().unwrap();
        let outcome = Stored {
            gpus: Some(2),
            error: String::new(),
            report: serde_json::from_str(r#"{"duration_ms": 1.5}"#).unwrap(),
        };
        {
            let journal = Journal::open(dir.path()).unwrap();
            journal.append("aaa", &Map::new(), &outcome).unwrap();
        }
        let path = dir.path().join(JOURNAL_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(r#"{"candidate": "bb"#);
        std::fs::write(&path, text).unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        assert_eq!(journal.stored("aaa"), Some(&outcome));
        journal.append("ccc", &Map::new(), &outcome).unwrap();
        drop(journal);
        let journal = Journal::open(dir.path()).unwrap();
        assert!(journal.stored("ccc").is_some());
        assert!(journal.stored("bb").is_none());
    }
}
