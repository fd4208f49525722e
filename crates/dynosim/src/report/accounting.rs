//! Requests that did not complete, counted by how they ended: every request of the workload is
//! either completed or in one of these counts.
//!
//! INTERFACE
//! - [`Ends`]: the collector's counts of requests that ended without completing, by terminal
//!   status.
//! - [`entries`]: the report keys ([`ACCOUNTING_KEYS`]). They are present only when some request
//!   of the workload did not complete or the run was interrupted, so that a run where every
//!   request completes keeps exactly the reference's keys; when present, all of them are.
//! - [`Shortfall`]: read back from a report (a report file's keys included): the table's line
//!   and the one-line warning both fronts print.

use super::record::TerminalStatus;
use super::{Report, Value};

/// The accounting keys, in the order the report lists them.
pub const ACCOUNTING_KEYS: [&str; 6] = [
    // Refused: over an engine's admission limit (a prompt over max_model_len or the KV cache)
    // or a router queue's limit.
    "rejected_requests",
    // Disaggregated handoffs that could not finish.
    "canceled_requests",
    "failed_requests",
    // Arrived, and still in flight when the run stopped (the time cap, Ctrl-C).
    "unfinished_requests",
    // In the workload, never released: arrivals past the time cap or Ctrl-C.
    "unarrived_requests",
    // 1 when Ctrl-C stopped the run (the report covers what happened until then), else 0.
    "interrupted",
];

/// Requests that ended without completing, by terminal status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Ends {
    rejected: usize,
    canceled: usize,
    failed: usize,
    /// Every request that ended, completed or not.
    ended: usize,
}

impl Ends {
    pub(super) fn count(&mut self, status: TerminalStatus) {
        self.ended += 1;
        match status {
            TerminalStatus::Completed => {}
            TerminalStatus::Rejected => self.rejected += 1,
            TerminalStatus::Canceled => self.canceled += 1,
            TerminalStatus::Failed => self.failed += 1,
        }
    }
}

/// The accounting keys of a run with `arrivals` arrivals of which `completed` completed,
/// `workload_requests` requests in its workload (0: unknown) and `interrupted` by Ctrl-C;
/// none when every request completed and the run was not interrupted.
pub(super) fn entries(
    arrivals: usize,
    completed: usize,
    ends: &Ends,
    workload_requests: usize,
    interrupted: bool,
) -> Vec<(&'static str, Value)> {
    let unfinished = arrivals.saturating_sub(ends.ended);
    let unarrived = workload_requests.saturating_sub(arrivals);
    if completed == arrivals && unarrived == 0 && !interrupted {
        return Vec::new();
    }
    let int = |count: usize| Value::Int(i64::try_from(count).unwrap_or(i64::MAX));
    let values = [
        int(ends.rejected),
        int(ends.canceled),
        int(ends.failed),
        int(unfinished),
        int(unarrived),
        int(usize::from(interrupted)),
    ];
    ACCOUNTING_KEYS.into_iter().zip(values).collect()
}

/// What a report says of its requests that did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// Requests in the workload (arrived or not).
    pub workload: u64,
    pub completed: u64,
    pub rejected: u64,
    pub canceled: u64,
    pub failed: u64,
    pub unfinished: u64,
    pub unarrived: u64,
    pub interrupted: bool,
}

impl Shortfall {
    /// Read from `report`'s keys; `None` when it has no accounting keys (every request
    /// completed).
    pub fn of(report: &Report) -> Option<Self> {
        let count = |key: &str| match report.get(key) {
            Some(Value::Int(count)) => Some(u64::try_from(count).unwrap_or(0)),
            Some(Value::Float(count)) => Some(count.max(0.0) as u64),
            None => None,
        };
        let unarrived = count("unarrived_requests")?;
        Some(Self {
            workload: count("num_requests")? + unarrived,
            completed: count("completed_requests")?,
            rejected: count("rejected_requests")?,
            canceled: count("canceled_requests")?,
            failed: count("failed_requests")?,
            unfinished: count("unfinished_requests")?,
            unarrived,
            interrupted: count("interrupted")? != 0,
        })
    }

    /// Requests of the workload that did not complete.
    pub fn missing(&self) -> u64 {
        self.workload.saturating_sub(self.completed)
    }

    /// How many did not complete and why: `2 rejected by an admission or queue limit, 1 in
    /// flight at the time cap`.
    pub fn reasons(&self) -> String {
        let stopped = if self.interrupted {
            "when interrupted"
        } else {
            "at the time cap"
        };
        let parts = [
            (
                self.rejected,
                "rejected by an admission or queue limit".to_string(),
            ),
            (self.canceled, "canceled in the KV handoff".to_string()),
            (self.failed, "failed in the KV handoff".to_string()),
            (self.unfinished, format!("in flight {stopped}")),
            (
                self.unarrived,
                if self.interrupted {
                    "not arrived when interrupted".to_string()
                } else {
                    "not arrived by the time cap".to_string()
                },
            ),
        ];
        let listed: Vec<String> = parts
            .into_iter()
            .filter(|(count, _)| *count > 0)
            .map(|(count, why)| format!("{count} {why}"))
            .collect();
        listed.join(", ")
    }

    /// The table's line: `Requests Not Completed: 3 of 40 (2 rejected ..., 1 in flight ...)`,
    /// and a second line for an interrupted run.
    pub fn table_lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "Requests Not Completed: {} of {} ({})",
            self.missing(),
            self.workload,
            self.reasons()
        )];
        if self.interrupted {
            lines.push("Interrupted: the report covers the run until Ctrl-C".to_string());
        }
        lines
    }

    /// The one-line warning: `3 of 40 requests did not complete: 2 rejected ..., 1 in flight
    /// ... (the report's rejected_requests, unfinished_requests and unarrived_requests)`.
    pub fn warning(&self) -> String {
        let mut line = format!(
            "{} of {} requests did not complete: {}",
            self.missing(),
            self.workload,
            self.reasons()
        );
        if self.interrupted {
            line.push_str(" (the run was interrupted)");
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(entries: Vec<(&'static str, Value)>) -> Report {
        let mut all = vec![
            ("num_requests", Value::Int(10)),
            ("completed_requests", Value::Int(6)),
        ];
        all.extend(entries);
        Report { entries: all }
    }

    #[test]
    fn keys_only_when_something_did_not_complete() {
        let mut ends = Ends::default();
        for _ in 0..4 {
            ends.count(TerminalStatus::Completed);
        }
        assert!(entries(4, 4, &ends, 4, false).is_empty());
        assert!(entries(4, 4, &ends, 0, false).is_empty());
        // Nothing missing, but interrupted.
        assert_eq!(entries(4, 4, &ends, 4, true).len(), 6);
        ends.count(TerminalStatus::Rejected);
        ends.count(TerminalStatus::Failed);
        // 8 arrived, 6 ended (4 completed), 2 in flight; 12 in the workload.
        let keys = entries(8, 4, &ends, 12, false);
        let values: Vec<i64> = keys
            .iter()
            .map(|(_, value)| match value {
                Value::Int(v) => *v,
                Value::Float(_) => panic!("counts are ints"),
            })
            .collect();
        assert_eq!(values, [1, 0, 1, 2, 4, 0]);
    }

    #[test]
    fn the_shortfall_reads_back_and_words_its_reasons() {
        assert_eq!(Shortfall::of(&report(Vec::new())), None);
        let values = [2, 0, 1, 1, 2, 0].map(Value::Int);
        let shortfall =
            Shortfall::of(&report(ACCOUNTING_KEYS.into_iter().zip(values).collect())).unwrap();
        assert_eq!((shortfall.workload, shortfall.missing()), (12, 6));
        assert_eq!(
            shortfall.warning(),
            "6 of 12 requests did not complete: 2 rejected by an admission or queue limit, \
             1 failed in the KV handoff, 1 in flight at the time cap, 2 not arrived by the time cap"
        );
        assert_eq!(
            shortfall.table_lines(),
            [
                "Requests Not Completed: 6 of 12 (2 rejected by an admission or queue limit, \
              1 failed in the KV handoff, 1 in flight at the time cap, 2 not arrived by the time \
              cap)"
            ]
        );
        let values = [1, 0, 0, 3, 1, 1].map(Value::Int);
        let interrupted =
            Shortfall::of(&report(ACCOUNTING_KEYS.into_iter().zip(values).collect())).unwrap();
        assert_eq!(
            interrupted.warning(),
            "5 of 11 requests did not complete: 1 rejected by an admission or queue limit, \
             3 in flight when interrupted, 1 not arrived when interrupted (the run was \
             interrupted)"
        );
        assert_eq!(interrupted.table_lines().len(), 2);
    }
}
