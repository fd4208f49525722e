//! The validation journal: `journal.jsonl` in the output directory, one line per simulated
//! row (or row whose tables could not be built), appended as rows finish and keyed by the hash
//! of the row's settings, and one per engine configuration whose tables could not be built
//! (keyed `tables-<hash>` of the configuration and the package's and dynosim's versions). A
//! rerun reads it and simulates only the rows it lacks, and runs no failing build again.
//!
//! INTERFACE
//! - [`Journal`]: the sweep's journal (`dynosim_sweep::store`) with these entries: `open`
//!   reads the stored ones (a last line cut short by an interrupted run is dropped),
//!   `stored` and `append` (of [`Entry::line`]).
//! - [`Entry`]: what is stored for a row (status, reason, predicted means, AIC version);
//!   [`Entry::apply`] fills a row's result from it.

use dynosim_sweep::store::JournalEntry;
use serde_json::{json, Value};

use crate::RowResult;

/// The validation journal: `journal.jsonl` of [`Entry`] lines.
pub type Journal = dynosim_sweep::store::Journal<Entry>;

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

impl Entry {
    /// The journal line of this entry under `key`.
    pub fn line(&self, key: &str) -> Value {
        json!({
            "key": key,
            "status": self.status.name(),
            "reason": self.reason,
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "aic_version": self.aic_version,
        })
    }
}

impl JournalEntry for Entry {
    const NAME: &'static str = "validation journal";

    fn parse(value: &Value) -> Option<(String, Self)> {
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
            journal.append(&entry.line("a")).unwrap();
            journal
                .append(&Entry::unmodelable("no tables".into()).line("b"))
                .unwrap();
        }
        let path = dir.path().join(dynosim_sweep::store::JOURNAL_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(r#"{"key": "c"#);
        std::fs::write(&path, text).unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        assert_eq!(journal.stored("a"), Some(&entry));
        assert_eq!(journal.stored("b").unwrap().status, Status::Unmodelable);
        assert!(journal.stored("c").is_none());
    }
}
