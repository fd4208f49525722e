//! The result store: `journal.jsonl` in the output directory, one JSON line per finished
//! piece of work, appended as each finishes and keyed by what identifies it. A restarted or
//! extended run reads it and does only the work it lacks. The sweep keeps its candidates'
//! outcomes here ([`Stored`], keyed by the candidate's hash); `dynosim validate` keeps its rows
//! in the same kind of file with entries of its own.
//!
//! INTERFACE
//! - [`JournalEntry`]: what one kind of journal stores, read back from a line.
//! - [`Journal::open`]: reads the stored entries (a last line cut short by an interrupted run
//!   is dropped) and opens the file for appending.
//! - [`Journal::stored`]: the entry of a key, if stored; [`Journal::append`]: stores one line.
//! - [`Stored`]: the sweep's entry; [`Stored::line`] its line.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use dynosim::{Error, Result};
use serde_json::{json, Map, Value};

pub const JOURNAL_FILE: &str = "journal.jsonl";

/// One kind of journal's entries.
pub trait JournalEntry: Sized {
    /// What the journal is called in messages ("sweep journal").
    const NAME: &'static str;
    /// The key and entry a line stores; `None` when it is not a line of this journal.
    fn parse(line: &Value) -> Option<(String, Self)>;
}

/// An append-only journal of entries `E`, by key (a later line replaces an earlier one).
pub struct Journal<E> {
    path: PathBuf,
    stored: HashMap<String, E>,
    file: Mutex<File>,
}

impl<E: JournalEntry> Journal<E> {
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
            let (key, entry) = serde_json::from_str(line)
                .ok()
                .and_then(|value| E::parse(&value))
                .ok_or_else(|| {
                    Error::runtime(format!(
                        "{}:{}: not a {} line; remove the file to start afresh",
                        path.display(),
                        number + 1,
                        E::NAME
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

    pub fn stored(&self, key: &str) -> Option<&E> {
        self.stored.get(key)
    }

    /// Appends one line (one write, so lines never interleave); `line` must be what
    /// [`JournalEntry::parse`] reads back.
    pub fn append(&self, line: &Value) -> Result<()> {
        let mut text = line.to_string();
        text.push('\n');
        let mut file = self
            .file
            .lock()
            .map_err(|_| Error::runtime(format!("the {}'s lock was poisoned", E::NAME)))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|err| Error::runtime(format!("cannot write {}: {err}", self.path.display())))
    }
}

/// What the sweep stores for one candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub gpus: Option<u64>,
    pub error: String,
    pub report: Map<String, Value>,
}

impl Stored {
    /// The journal line of a candidate (its hash and settings) with this outcome.
    pub fn line(&self, hash: &str, settings: &Map<String, Value>) -> Value {
        json!({
            "candidate": hash,
            "gpus": self.gpus,
            "error": self.error,
            "settings": settings,
            "report": self.report,
        })
    }
}

impl JournalEntry for Stored {
    const NAME: &'static str = "sweep journal";

    fn parse(value: &Value) -> Option<(String, Self)> {
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
            let journal = Journal::<Stored>::open(dir.path()).unwrap();
            journal.append(&outcome.line("aaa", &Map::new())).unwrap();
        }
        let path = dir.path().join(JOURNAL_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(r#"{"candidate": "bb"#);
        std::fs::write(&path, text).unwrap();
        let journal = Journal::<Stored>::open(dir.path()).unwrap();
        assert_eq!(journal.stored("aaa"), Some(&outcome));
        journal.append(&outcome.line("ccc", &Map::new())).unwrap();
        drop(journal);
        let journal = Journal::<Stored>::open(dir.path()).unwrap();
        assert!(journal.stored("ccc").is_some());
        assert!(journal.stored("bb").is_none());
    }
}
