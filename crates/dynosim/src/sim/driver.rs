//! The arrival driver: decides when each turn of each session is released to the router.
//!
//! Two modes (`ArrivalMode`):
//! - open loop: a session's first turn is released at its normalised, sped-up timestamp;
//! - closed loop: at most `limit` sessions are active; a finished session frees its slot for the
//!   next one in workload order, whose first turn is released at that instant.
//! In both, turn k+1 of a session is released `delay` after turn k reaches a terminal state
//! (completed or rejected). Ready turns are released in (ready time, session index, turn index)
//! order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::config::ArrivalMode;
use crate::error::{Error, Result};
use crate::workload::{Session, Turn, Workload};

/// A turn released to the router.
#[derive(Debug)]
pub struct Release<'w> {
    /// The time the turn became ready (open loop: its scheduled arrival).
    pub ready_at_ms: f64,
    pub session_index: usize,
    pub session_id: &'w str,
    pub turn_index: usize,
    pub turn: &'w Turn,
}

#[derive(Clone, Copy, Debug)]
struct ReadyTurn {
    at_ms: f64,
    session: usize,
    turn: usize,
}

impl PartialEq for ReadyTurn {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for ReadyTurn {}
impl PartialOrd for ReadyTurn {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ReadyTurn {
    /// Reversed, so that `BinaryHeap` pops the earliest (time, session, turn) first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at_ms
            .total_cmp(&self.at_ms)
            .then_with(|| other.session.cmp(&self.session))
            .then_with(|| other.turn.cmp(&self.turn))
    }
}

#[derive(Debug)]
pub struct Driver {
    sessions: Vec<Session>,
    ready: BinaryHeap<ReadyTurn>,
    /// Scale applied to inter-turn delays (1/speedup in open loop, 1 in closed loop).
    delay_divisor: f64,
    /// Closed loop: index of the next session to activate.
    next_session: usize,
    /// Sessions not yet finished (all turns terminal).
    unfinished_sessions: usize,
    closed_loop: bool,
}

impl Driver {
    /// Builds the driver and checks the timestamps the mode needs. Errors are usage errors.
    pub fn new(workload: Workload, mode: ArrivalMode) -> Result<Self> {
        let sessions = workload.sessions;
        let mut ready = BinaryHeap::with_capacity(sessions.len());
        let (delay_divisor, closed_loop, next_session) = match mode {
            ArrivalMode::Timestamps { speedup } => {
                let mut start = f64::INFINITY;
                for session in &sessions {
                    match session.first_timestamp_ms {
                        Some(ts) if ts.is_finite() => start = start.min(ts),
                        Some(ts) => {
                            return Err(Error::usage(format!(
                                "session {} has invalid first_arrival_timestamp_ms {ts}",
                                session.id
                            )))
                        }
                        None => {
                            return Err(Error::usage(format!(
                                "trace mode requires first_arrival_timestamp_ms for session {}",
                                session.id
                            )))
                        }
                    }
                }
                for (index, session) in sessions.iter().enumerate() {
                    let ts = session.first_timestamp_ms.expect("checked above");
                    ready.push(ReadyTurn {
                        at_ms: (ts - start) / speedup,
                        session: index,
                        turn: 0,
                    });
                }
                (speedup, false, sessions.len())
            }
            ArrivalMode::Concurrency { limit } => {
                for session in &sessions {
                    if let Some(ts) = session.first_timestamp_ms {
                        if !ts.is_finite() || ts < 0.0 {
                            return Err(Error::usage(format!(
                                "session {} has invalid first_arrival_timestamp_ms {ts}",
                                session.id
                            )));
                        }
                    }
                }
                let active = limit.min(sessions.len());
                for index in 0..active {
                    ready.push(ReadyTurn {
                        at_ms: 0.0,
                        session: index,
                        turn: 0,
                    });
                }
                (1.0, true, active)
            }
        };
        let unfinished_sessions = sessions.len();
        Ok(Self {
            sessions,
            ready,
            delay_divisor,
            next_session,
            unfinished_sessions,
            closed_loop,
        })
    }

    /// Total number of turns in the workload.
    pub fn total_turns(&self) -> usize {
        self.sessions.iter().map(|s| s.turns.len()).sum()
    }

    /// The earliest time a not-yet-released turn becomes ready, if any is scheduled.
    pub fn next_ready_ms(&self) -> Option<f64> {
        self.ready.peek().map(|r| r.at_ms)
    }

    /// True when every session has finished.
    pub fn is_drained(&self) -> bool {
        self.unfinished_sessions == 0
    }

    /// Pops the next turn ready at or before `now_ms`.
    pub fn pop_ready(&mut self, now_ms: f64) -> Option<Release<'_>> {
        if self.ready.peek()?.at_ms > now_ms {
            return None;
        }
        let next = self.ready.pop().expect("peeked");
        let session = &self.sessions[next.session];
        Some(Release {
            ready_at_ms: next.at_ms,
            session_index: next.session,
            session_id: &session.id,
            turn_index: next.turn,
            turn: &session.turns[next.turn],
        })
    }

    /// A released turn reached a terminal state at `now_ms`: schedule the session's next turn,
    /// or finish the session (and, in closed loop, activate the next one).
    pub fn on_terminal(&mut self, session: usize, turn: usize, now_ms: f64) {
        let turns = &self.sessions[session].turns;
        if let Some(next) = turns.get(turn + 1) {
            let at_ms = now_ms + next.delay_ms / self.delay_divisor;
            self.ready.push(ReadyTurn {
                at_ms,
                session,
                turn: turn + 1,
            });
            return;
        }
        self.unfinished_sessions -= 1;
        if self.closed_loop && self.next_session < self.sessions.len() {
            self.ready.push(ReadyTurn {
                at_ms: now_ms,
                session: self.next_session,
                turn: 0,
            });
            self.next_session += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Prompt;

    fn turn(delay_ms: f64) -> Turn {
        Turn {
            input_length: 10,
            max_output_tokens: 1,
            delay_ms,
            prompt: Prompt::Unique { key: 0 },
            priority: 0,
            strict_priority: 0,
            policy_class: None,
        }
    }

    fn session(id: &str, ts: Option<f64>, delays: &[f64]) -> Session {
        Session {
            id: id.into(),
            first_timestamp_ms: ts,
            turns: delays.iter().map(|&d| turn(d)).collect(),
        }
    }

    #[test]
    fn open_loop_normalises_and_speeds_up() {
        let w = Workload {
            sessions: vec![
                session("a", Some(1000.0), &[0.0, 100.0]),
                session("b", Some(1200.0), &[0.0]),
            ],
        };
        let mut d = Driver::new(w, ArrivalMode::Timestamps { speedup: 2.0 }).unwrap();
        let r = d.pop_ready(0.0).unwrap();
        assert_eq!((r.session_index, r.turn_index, r.ready_at_ms), (0, 0, 0.0));
        assert!(d.pop_ready(99.0).is_none());
        assert_eq!(d.next_ready_ms(), Some(100.0));
        d.on_terminal(0, 0, 50.0);
        // Next turn of a: 50 + 100/2 = 100, ties with b at 100 -> lower session first.
        let r = d.pop_ready(100.0).unwrap();
        assert_eq!((r.session_index, r.turn_index), (0, 1));
        let r = d.pop_ready(100.0).unwrap();
        assert_eq!((r.session_index, r.turn_index), (1, 0));
        d.on_terminal(0, 1, 120.0);
        d.on_terminal(1, 0, 130.0);
        assert!(d.is_drained());
    }

    #[test]
    fn open_loop_requires_first_timestamps() {
        let w = Workload {
            sessions: vec![session("request_1", None, &[0.0])],
        };
        let err = Driver::new(w, ArrivalMode::Timestamps { speedup: 1.0 }).unwrap_err();
        assert_eq!(
            err.message(),
            "trace mode requires first_arrival_timestamp_ms for session request_1"
        );
    }

    #[test]
    fn closed_loop_activates_sessions_in_order_and_keeps_delays() {
        let w = Workload {
            sessions: vec![
                session("a", None, &[0.0, 30.0]),
                session("b", Some(5.0), &[0.0]),
                session("c", None, &[0.0]),
            ],
        };
        let mut d = Driver::new(w, ArrivalMode::Concurrency { limit: 2 }).unwrap();
        assert_eq!(d.pop_ready(0.0).unwrap().session_index, 0);
        assert_eq!(d.pop_ready(0.0).unwrap().session_index, 1);
        assert!(d.pop_ready(0.0).is_none());
        d.on_terminal(0, 0, 10.0); // a's second turn at 40, a still holds its slot
        d.on_terminal(1, 0, 12.0); // b done: c activates at 12
        let r = d.pop_ready(12.0).unwrap();
        assert_eq!((r.session_index, r.ready_at_ms), (2, 12.0));
        assert_eq!(d.next_ready_ms(), Some(40.0));
    }

    #[test]
    fn closed_loop_rejects_negative_first_timestamps() {
        let w = Workload {
            sessions: vec![session("request_1", Some(-10.0), &[0.0])],
        };
        let err = Driver::new(w, ArrivalMode::Concurrency { limit: 1 }).unwrap_err();
        assert_eq!(
            err.message(),
            "session request_1 has invalid first_arrival_timestamp_ms -10"
        );
    }
}
