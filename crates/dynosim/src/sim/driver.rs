//! The arrival driver: decides when each turn of each session is released to the router.
//!
//! Session workloads have two modes (`ArrivalMode`):
//! - open loop: a session's first turn is released at its normalised, sped-up timestamp;
//! - closed loop: at most `limit` sessions are active; a finished session frees its slot for the
//!   next one in workload order, whose first turn is released at that instant.
//!
//! In both, turn k+1 of a session is released `delay` after turn k reaches a terminal state
//! (completed or rejected).
//!
//! Agentic workloads (a `DependencyGraph` over one-turn sessions, open loop only) release a
//! request once all its dependencies have fired: a `Completion` dependency when its source
//! reaches a terminal state, a `Dispatch` dependency when its source is released. The request
//! is ready at the latest of its floor time and every dependency's trigger time plus delay.
//!
//! Ready turns are released in (ready time, session index, turn index) order.
//!
//! With cumulative (`mooncake-delta`) prompts, the driver keeps each multi-turn session's
//! history: a released turn's prompt is the history plus the turn's own tokens, and a turn that
//! completes appends the tokens it generated before the next turn is released. Generated tokens
//! are [`generated_token`](crate::tokens::generated_token)`(request id, i)`, exactly what the
//! engine put in the request's KV blocks, so the next turn reuses them like the reference reuses
//! its planned output tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::config::{compact_f64, ArrivalMode, MAX_VIRTUAL_TIME_MS};
use crate::engine::kv::FastMap;
use crate::error::{Error, Result};
use crate::tokens::TokenSeq;
use crate::workload::synthetic::SyntheticSessions;
use crate::workload::{
    DependencyGraph, GraphTiming, PromptMode, Session, SessionId, Trigger, Turn, Turns, Workload,
};

/// A turn released to the router.
#[derive(Debug)]
pub struct Release<'w> {
    /// The time the turn became ready (open loop: its scheduled arrival).
    pub ready_at_ms: f64,
    pub session_index: usize,
    pub session_id: &'w SessionId,
    pub turn_index: usize,
    pub turn: &'w Turn,
    /// The prompt to send (for cumulative prompts, longer than `turn.input_length`).
    pub prompt: TokenSeq,
}

/// How a released request ended, as the driver needs to know it.
#[derive(Clone, Copy, Debug)]
pub struct Terminal {
    /// The request id the turn was released under (its release index).
    pub request_id: usize,
    /// Tokens the request generated (counted only where [`Driver::reads_output_counts`]).
    pub output_tokens: usize,
    /// Completed (true) or rejected (false).
    pub completed: bool,
}

/// Refuses a virtual time (an arrival, a floor, a delay) that is not finite or lies beyond
/// [`MAX_VIRTUAL_TIME_MS`]; `what` names its source.
fn check_horizon(at_ms: f64, what: impl FnOnce() -> String) -> Result<f64> {
    if at_ms.is_finite() && at_ms <= MAX_VIRTUAL_TIME_MS {
        Ok(at_ms)
    } else {
        Err(Error::usage(format!(
            "{} is {} ms of virtual time, beyond the simulator's horizon of \
             {MAX_VIRTUAL_TIME_MS:e} ms (about 31.7 years)",
            what(),
            compact_f64(at_ms)
        )))
    }
}

/// Names the speed-up in a horizon message when it is not 1.
fn speedup_note(speedup: f64) -> String {
    if speedup == 1.0 {
        String::new()
    } else {
        format!(" at --arrival-speedup-ratio {}", compact_f64(speedup))
    }
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

/// Dependency release state of an agentic workload.
#[derive(Debug)]
struct GraphState {
    /// Reverse edges: `dependents[offsets[s]..offsets[s + 1]]` wait for session `s`.
    offsets: Vec<u32>,
    dependents: Vec<Dependent>,
    /// Dependencies not yet fired, per session.
    remaining: Vec<u32>,
    /// The earliest release time so far, per session (floor, then max of trigger + delay).
    ready_after_ms: Vec<f64>,
}

#[derive(Clone, Copy, Debug)]
struct Dependent {
    target: u32,
    trigger: Trigger,
    /// Already divided by the speed-up.
    delay_ms: f64,
}

impl GraphState {
    /// Builds the release state and returns it with the roots' ready times.
    fn new(
        graph: &DependencyGraph,
        sessions: &[Session],
        speedup: f64,
    ) -> Result<(Self, Vec<ReadyTurn>)> {
        let n = graph.len();
        let shift = match graph.timing {
            GraphTiming::Timestamps => sessions
                .iter()
                .filter_map(|s| s.first_timestamp_ms)
                .min_by(|a, b| a.total_cmp(b))
                .unwrap_or(0.0),
            GraphTiming::NotBefore => 0.0,
        };
        let mut counts = vec![0u32; n + 1];
        let mut remaining = vec![0u32; n];
        for (target, remaining) in remaining.iter_mut().enumerate() {
            for dep in graph.dependencies(target) {
                counts[dep.source as usize + 1] += 1;
            }
            *remaining = graph.dependencies(target).len() as u32;
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let offsets = counts.clone();
        let mut fill = counts;
        let mut dependents = vec![
            Dependent {
                target: 0,
                trigger: Trigger::Completion,
                delay_ms: 0.0
            };
            graph.edges.len()
        ];
        for (target, target_session) in sessions.iter().enumerate().take(n) {
            let target_id = &target_session.id;
            for dep in graph.dependencies(target) {
                let slot = &mut fill[dep.source as usize];
                let delay_ms = check_horizon(dep.delay_ms / speedup, || {
                    format!(
                        "the dependency delay_ms {} of session {target_id}{}",
                        compact_f64(dep.delay_ms),
                        speedup_note(speedup)
                    )
                })?;
                dependents[*slot as usize] = Dependent {
                    target: target as u32,
                    trigger: dep.trigger,
                    delay_ms,
                };
                *slot += 1;
            }
        }
        let mut ready_after_ms = Vec::with_capacity(n);
        let mut roots = Vec::new();
        for session in 0..n {
            let floor = match graph.floor_ms[session] {
                Some(ms) => (ms - shift) / speedup,
                None => 0.0,
            };
            if !floor.is_finite() {
                return Err(Error::usage(format!(
                    "session {} has invalid first_arrival_timestamp_ms {floor}",
                    sessions[session].id
                )));
            }
            let floor = check_horizon(floor, || {
                format!(
                    "the arrival of session {}{}",
                    sessions[session].id,
                    speedup_note(speedup)
                )
            })?;
            ready_after_ms.push(floor);
            if remaining[session] == 0 {
                roots.push(ReadyTurn {
                    at_ms: floor,
                    session,
                    turn: 0,
                });
            }
        }
        Ok((
            Self {
                offsets,
                dependents,
                remaining,
                ready_after_ms,
            },
            roots,
        ))
    }

    /// Fires the `trigger` dependencies on `source` at `now_ms`, pushing requests that become
    /// ready.
    fn fire(
        &mut self,
        source: usize,
        trigger: Trigger,
        now_ms: f64,
        ready: &mut BinaryHeap<ReadyTurn>,
    ) {
        let range = self.offsets[source] as usize..self.offsets[source + 1] as usize;
        for dependent in &self.dependents[range] {
            if dependent.trigger != trigger {
                continue;
            }
            let target = dependent.target as usize;
            self.remaining[target] -= 1;
            let after = &mut self.ready_after_ms[target];
            *after = after.max(now_ms + dependent.delay_ms);
            if self.remaining[target] == 0 {
                ready.push(ReadyTurn {
                    at_ms: *after,
                    session: target,
                    turn: 0,
                });
            }
        }
    }
}

/// Checks that a session's turns, released `delay` after one another from `first_ms`, stay
/// within the horizon (service times come on top; they are bounded by the simulation itself).
fn check_session_delays(session: &Session, first_ms: f64, divisor: f64) -> Result<()> {
    let delays = session.turns.iter().skip(1).map(|turn| turn.delay_ms);
    check_turn_delays(|| session.id.to_string(), delays, first_ms, divisor)
}

/// [`check_session_delays`] over the delays of turns 1.. of the session `id` names.
fn check_turn_delays(
    id: impl Fn() -> String,
    delays: impl Iterator<Item = f64>,
    first_ms: f64,
    divisor: f64,
) -> Result<()> {
    let mut at_ms = first_ms;
    for (index, delay_ms) in delays.enumerate() {
        at_ms += delay_ms / divisor;
        check_horizon(at_ms, || {
            format!(
                "turn {} of session {} (its delays add up to it{})",
                index + 1,
                id(),
                speedup_note(divisor)
            )
        })?;
    }
    Ok(())
}

/// The sessions of a run. Listed sessions (traces) are all in memory from the start and give
/// back their turns once finished; generated sessions (synthetic workloads) exist only from
/// the moment the driver schedules their first turn until their last turn ends.
#[derive(Debug)]
enum SessionStore {
    Listed(Vec<Session>),
    Generated {
        source: Box<SyntheticSessions>,
        /// Keyed by dense session index, hashed by multiplication rather than SipHash.
        live: FastMap<usize, Session>,
    },
    /// Sessions that arrive while the run goes on (a server's requests, see
    /// `sim::external`): one turn each, kept from their arrival until their turn ends.
    External {
        live: FastMap<usize, Session>,
        /// Sessions pushed so far (the next one's index).
        pushed: usize,
    },
}

impl SessionStore {
    fn len(&self) -> usize {
        match self {
            Self::Listed(sessions) => sessions.len(),
            Self::Generated { source, .. } => source.len(),
            Self::External { pushed, .. } => *pushed,
        }
    }

    /// A session that is listed, or generated and not finished.
    fn get(&self, index: usize) -> &Session {
        match self {
            Self::Listed(sessions) => &sessions[index],
            Self::Generated { live, .. } | Self::External { live, .. } => &live[&index],
        }
    }

    /// Generated sessions: makes session `index` (the next one of the generator) live and
    /// returns its first turn's timestamp. Listed: the timestamp as listed.
    fn schedule(&mut self, index: usize) -> Option<f64> {
        match self {
            Self::Listed(sessions) => sessions[index].first_timestamp_ms,
            Self::Generated { source, live } => {
                debug_assert_eq!(source.next_index(), index, "generated in index order");
                let session = source.next_session().expect("the index is below len()");
                let first = session.first_timestamp_ms;
                live.insert(index, session);
                first
            }
            Self::External { live, .. } => live[&index].first_timestamp_ms,
        }
    }

    /// Session `index` released its last turn and that turn ended: its turns are not needed
    /// any more (its id stays readable for listed sessions).
    fn finish(&mut self, index: usize) {
        match self {
            Self::Listed(sessions) => sessions[index].turns = Turns::new(),
            Self::Generated { live, .. } | Self::External { live, .. } => {
                live.remove(&index);
            }
        }
    }
}

#[derive(Debug)]
pub struct Driver {
    sessions: SessionStore,
    /// Open loop over generated sessions: the next session to schedule once the previous
    /// one's first turn is released (arrivals are in index order, so one scheduled ahead is
    /// enough to keep the release order).
    next_generated: Option<usize>,
    /// Open loop over generated sessions: the first timestamp, which arrivals count from.
    arrival_start_ms: f64,
    ready: BinaryHeap<ReadyTurn>,
    /// Scale applied to inter-turn delays (1/speedup in open loop, 1 in closed loop).
    delay_divisor: f64,
    /// Closed loop: index of the next session to activate.
    next_session: usize,
    /// Sessions not yet finished (all turns terminal).
    unfinished_sessions: usize,
    closed_loop: bool,
    graph: Option<GraphState>,
    prompts: PromptMode,
    /// Cumulative prompts: each multi-turn session's history so far (empty otherwise).
    histories: Vec<TokenSeq>,
    /// Turns in the whole workload (requests to release), for progress displays.
    total_turns: usize,
    /// A request's end can make a turn ready: closed loop, a dependency graph, or a session
    /// of more than one turn.
    terminals_release_turns: bool,
}

impl Driver {
    /// Builds the driver and checks the timestamps the mode needs. Errors are usage errors.
    pub fn new(workload: Workload, mode: ArrivalMode) -> Result<Self> {
        let total_turns = workload.total_turns();
        let mut driver = Self::build(workload, mode)?;
        driver.total_turns = total_turns;
        Ok(driver)
    }

    fn build(workload: Workload, mode: ArrivalMode) -> Result<Self> {
        if let Some(source) = workload.synthetic {
            return Self::generated(source, mode);
        }
        let Workload {
            sessions,
            prompts,
            graph,
            synthetic: _,
        } = workload;
        let mut ready = BinaryHeap::with_capacity(sessions.len());
        let histories = match prompts {
            PromptMode::Cumulative => vec![TokenSeq::new(); sessions.len()],
            PromptMode::Full => Vec::new(),
        };
        if let Some(graph) = graph {
            let ArrivalMode::Timestamps { speedup } = mode else {
                return Err(Error::usage(
                    "agentic traces (request dependencies) are not supported with replay_concurrency",
                ));
            };
            let (state, roots) = GraphState::new(&graph, &sessions, speedup)?;
            ready.extend(roots);
            let unfinished_sessions = sessions.len();
            return Ok(Self {
                next_session: sessions.len(),
                sessions: SessionStore::Listed(sessions),
                next_generated: None,
                arrival_start_ms: 0.0,
                ready,
                delay_divisor: speedup,
                unfinished_sessions,
                closed_loop: false,
                graph: Some(state),
                prompts,
                histories,
                total_turns: 0,
                terminals_release_turns: true,
            });
        }
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
                    let at_ms = check_horizon((ts - start) / speedup, || {
                        format!(
                            "the arrival of session {} (timestamp {}, the first is {}){}",
                            session.id,
                            compact_f64(ts),
                            compact_f64(start),
                            speedup_note(speedup)
                        )
                    })?;
                    check_session_delays(session, at_ms, speedup)?;
                    ready.push(ReadyTurn {
                        at_ms,
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
                for session in &sessions {
                    check_session_delays(session, 0.0, 1.0)?;
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
        let terminals_release_turns =
            closed_loop || sessions.iter().any(|session| session.turns.len() > 1);
        Ok(Self {
            terminals_release_turns,
            sessions: SessionStore::Listed(sessions),
            next_generated: None,
            arrival_start_ms: 0.0,
            ready,
            delay_divisor,
            next_session,
            unfinished_sessions,
            closed_loop,
            graph: None,
            prompts,
            histories,
            total_turns: 0,
        })
    }

    /// The driver of a synthetic workload: its sessions are generated as they are scheduled.
    /// Arrival times and turn delays are checked here, before the run, without keeping any
    /// session (the generator's arrival stream is replayed once on its own).
    fn generated(source: SyntheticSessions, mode: ArrivalMode) -> Result<Self> {
        let count = source.len();
        let turn_delays = |session: &Session| -> Vec<f64> {
            session.turns.iter().skip(1).map(|t| t.delay_ms).collect()
        };
        // Every session has the same turn delays: read them off the first one.
        let delays = turn_delays(&source.clone().next_session().expect("request_count >= 1"));
        let mut sessions = SessionStore::Generated {
            source: Box::new(source),
            live: FastMap::default(),
        };
        let mut ready = BinaryHeap::new();
        let mut arrival_start_ms = 0.0;
        let (delay_divisor, closed_loop, next_session, next_generated) = match mode {
            ArrivalMode::Timestamps { speedup } => {
                let SessionStore::Generated { source, .. } = &sessions else {
                    unreachable!("built above")
                };
                // Arrivals never decrease, so the first is the earliest.
                let mut start = None;
                for (index, ts) in source.remaining_arrivals().enumerate() {
                    let Some(ts) = ts else {
                        return Err(Error::usage(format!(
                            "trace mode requires first_arrival_timestamp_ms for session \
                             session_{index}"
                        )));
                    };
                    let start = *start.get_or_insert(ts);
                    let at_ms = check_horizon((ts - start) / speedup, || {
                        format!(
                            "the arrival of session session_{index} (timestamp {}, the first \
                             is {}){}",
                            compact_f64(ts),
                            compact_f64(start),
                            speedup_note(speedup)
                        )
                    })?;
                    let id = || format!("session_{index}");
                    check_turn_delays(id, delays.iter().copied(), at_ms, speedup)?;
                }
                let start = start.unwrap_or(0.0);
                arrival_start_ms = start;
                let first = sessions.schedule(0).unwrap_or(start);
                ready.push(ReadyTurn {
                    at_ms: (first - start) / speedup,
                    session: 0,
                    turn: 0,
                });
                (speedup, false, count, (count > 1).then_some(1))
            }
            ArrivalMode::Concurrency { limit } => {
                check_turn_delays(|| "session_0".to_string(), delays.iter().copied(), 0.0, 1.0)?;
                let active = limit.min(count);
                for index in 0..active {
                    sessions.schedule(index);
                    ready.push(ReadyTurn {
                        at_ms: 0.0,
                        session: index,
                        turn: 0,
                    });
                }
                (1.0, true, active, None)
            }
        };
        Ok(Self {
            sessions,
            next_generated,
            ready,
            delay_divisor,
            next_session,
            unfinished_sessions: count,
            closed_loop,
            graph: None,
            prompts: PromptMode::Full,
            histories: Vec::new(),
            arrival_start_ms,
            total_turns: 0,
            terminals_release_turns: closed_loop || !delays.is_empty(),
        })
    }

    /// The driver of a run whose requests arrive while it goes on ([`Driver::push_external`]),
    /// each a session of one turn released when it arrives. A request's end may be followed
    /// by another arrival at any time, so nothing is known ahead (no run-ahead).
    pub fn external() -> Self {
        Self {
            sessions: SessionStore::External {
                live: FastMap::default(),
                pushed: 0,
            },
            next_generated: None,
            arrival_start_ms: 0.0,
            ready: BinaryHeap::new(),
            delay_divisor: 1.0,
            next_session: 0,
            unfinished_sessions: 0,
            closed_loop: false,
            graph: None,
            prompts: PromptMode::Full,
            histories: Vec::new(),
            total_turns: 0,
            terminals_release_turns: true,
        }
    }

    /// An external driver: `session` (of one turn) arrived at `at_ms` (not before any earlier
    /// arrival); it is released at `at_ms`. Returns its session index: sessions pushed so far,
    /// so arrivals released at one time keep their push order. None for another driver.
    pub fn push_external(&mut self, at_ms: f64, session: Session) -> Option<usize> {
        let SessionStore::External { live, pushed } = &mut self.sessions else {
            return None;
        };
        debug_assert_eq!(session.turns.len(), 1, "an external session has one turn");
        let index = *pushed;
        *pushed += 1;
        live.insert(index, session);
        self.unfinished_sessions += 1;
        self.total_turns += 1;
        self.ready.push(ReadyTurn {
            at_ms,
            session: index,
            turn: 0,
        });
        Some(index)
    }

    /// The id of session `index` (as written in the trace, or generated).
    pub fn session_id(&self, index: usize) -> &SessionId {
        &self.sessions.get(index).id
    }

    /// The earliest time a not-yet-released turn becomes ready, if any is scheduled.
    pub fn next_ready_ms(&self) -> Option<f64> {
        self.ready.peek().map(|r| r.at_ms)
    }

    /// Whether [`Driver::on_terminal`] reads [`Terminal::output_tokens`]: cumulative prompts
    /// append a completed turn's output to the session's history. Otherwise a caller need
    /// not count the tokens requests generate.
    pub fn reads_output_counts(&self) -> bool {
        self.prompts == PromptMode::Cumulative
    }

    /// Whether a request's end can make a turn ready ([`Driver::on_terminal`] schedules one:
    /// closed loop, dependency graphs, sessions of several turns). Otherwise every turn's
    /// ready time is fixed before the run and [`Driver::next_ready_ms`] is the earliest time
    /// any turn can be released.
    pub fn terminals_release_turns(&self) -> bool {
        self.terminals_release_turns
    }

    /// Turns in the whole workload: the requests the run will release.
    pub fn total_turns(&self) -> usize {
        self.total_turns
    }

    /// True when every session has finished.
    pub fn is_drained(&self) -> bool {
        self.unfinished_sessions == 0
    }

    /// Some turn is ready at or before `now_ms` ([`Driver::pop_ready`] would give one).
    pub fn has_ready(&self, now_ms: f64) -> bool {
        self.ready.peek().is_some_and(|next| next.at_ms <= now_ms)
    }

    /// Pops the next turn ready at or before `now_ms`. Its release fires the `Dispatch`
    /// dependencies on it (which may make more requests ready at `now_ms`).
    pub fn pop_ready(&mut self, now_ms: f64) -> Option<Release<'_>> {
        if !self.has_ready(now_ms) {
            return None;
        }
        let next = self.ready.pop().expect("a turn is ready");
        if let Some(graph) = self.graph.as_mut() {
            graph.fire(next.session, Trigger::Dispatch, now_ms, &mut self.ready);
        }
        if next.turn == 0 && self.next_generated == Some(next.session + 1) {
            self.schedule_next_generated();
        }
        let session = self.sessions.get(next.session);
        let turn = &session.turns[next.turn];
        let own = turn.prompt.tokens(turn.input_length);
        let prompt = match self.prompts {
            PromptMode::Full => own,
            PromptMode::Cumulative if session.turns.len() == 1 => own,
            PromptMode::Cumulative => {
                let history = &mut self.histories[next.session];
                history.extend_from(&own);
                history.clone()
            }
        };
        Some(Release {
            ready_at_ms: next.at_ms,
            session_index: next.session,
            session_id: &session.id,
            turn_index: next.turn,
            turn,
            prompt,
        })
    }

    /// Open loop over generated sessions: generates the next session and schedules its first
    /// turn at its normalised, sped-up timestamp (checked against the horizon in `generated`).
    fn schedule_next_generated(&mut self) {
        let Some(index) = self.next_generated else {
            return;
        };
        let ts = self
            .sessions
            .schedule(index)
            .unwrap_or(self.arrival_start_ms);
        self.ready.push(ReadyTurn {
            at_ms: (ts - self.arrival_start_ms) / self.delay_divisor,
            session: index,
            turn: 0,
        });
        self.next_generated = (index + 1 < self.sessions.len()).then_some(index + 1);
    }

    /// A released turn reached a terminal state at `now_ms`: schedule the session's next turn
    /// (or, for agentic workloads, the requests waiting for this one), or finish the session
    /// (and, in closed loop, activate the next one).
    pub fn on_terminal(&mut self, session: usize, turn: usize, now_ms: f64, how: Terminal) {
        if let Some(graph) = self.graph.as_mut() {
            // A rejected request releases its dependents too, as in the reference.
            graph.fire(session, Trigger::Completion, now_ms, &mut self.ready);
            self.unfinished_sessions -= 1;
            return;
        }
        let turns = &self.sessions.get(session).turns;
        if let Some(next) = turns.get(turn + 1) {
            if self.prompts == PromptMode::Cumulative && how.completed {
                self.histories[session].push_generated(how.request_id as u64, 0, how.output_tokens);
            }
            let at_ms = now_ms + next.delay_ms / self.delay_divisor;
            self.ready.push(ReadyTurn {
                at_ms,
                session,
                turn: turn + 1,
            });
            return;
        }
        if self.prompts == PromptMode::Cumulative {
            self.histories[session] = TokenSeq::new();
        }
        self.sessions.finish(session);
        self.unfinished_sessions -= 1;
        if self.closed_loop && self.next_session < self.sessions.len() {
            self.sessions.schedule(self.next_session);
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
    use crate::tokens::generated_token;
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

    fn done() -> Terminal {
        Terminal {
            request_id: 0,
            output_tokens: 1,
            completed: true,
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
            ..Default::default()
        };
        let mut d = Driver::new(w, ArrivalMode::Timestamps { speedup: 2.0 }).unwrap();
        let r = d.pop_ready(0.0).unwrap();
        assert_eq!((r.session_index, r.turn_index, r.ready_at_ms), (0, 0, 0.0));
        assert!(d.pop_ready(99.0).is_none());
        assert_eq!(d.next_ready_ms(), Some(100.0));
        d.on_terminal(0, 0, 50.0, done());
        // Next turn of a: 50 + 100/2 = 100, ties with b at 100 -> lower session first.
        let r = d.pop_ready(100.0).unwrap();
        assert_eq!((r.session_index, r.turn_index), (0, 1));
        let r = d.pop_ready(100.0).unwrap();
        assert_eq!((r.session_index, r.turn_index), (1, 0));
        d.on_terminal(0, 1, 120.0, done());
        d.on_terminal(1, 0, 130.0, done());
        assert!(d.is_drained());
    }

    #[test]
    fn open_loop_requires_first_timestamps() {
        let w = Workload {
            sessions: vec![session("request_1", None, &[0.0])],
            ..Default::default()
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
            ..Default::default()
        };
        let mut d = Driver::new(w, ArrivalMode::Concurrency { limit: 2 }).unwrap();
        assert_eq!(d.pop_ready(0.0).unwrap().session_index, 0);
        assert_eq!(d.pop_ready(0.0).unwrap().session_index, 1);
        assert!(d.pop_ready(0.0).is_none());
        d.on_terminal(0, 0, 10.0, done()); // a's second turn at 40, a still holds its slot
        d.on_terminal(1, 0, 12.0, done()); // b done: c activates at 12
        let r = d.pop_ready(12.0).unwrap();
        assert_eq!((r.session_index, r.ready_at_ms), (2, 12.0));
        assert_eq!(d.next_ready_ms(), Some(40.0));
    }

    #[test]
    fn closed_loop_rejects_negative_first_timestamps() {
        let w = Workload {
            sessions: vec![session("request_1", Some(-10.0), &[0.0])],
            ..Default::default()
        };
        let err = Driver::new(w, ArrivalMode::Concurrency { limit: 1 }).unwrap_err();
        assert_eq!(
            err.message(),
            "session request_1 has invalid first_arrival_timestamp_ms -10"
        );
    }

    fn graph_workload(
        floors: &[Option<f64>],
        timestamps: &[Option<f64>],
        deps: &[&[(u32, Trigger, f64)]],
        timing: GraphTiming,
    ) -> Workload {
        let mut offsets = vec![0u32];
        let mut edges = Vec::new();
        for list in deps {
            for &(source, trigger, delay_ms) in *list {
                edges.push(crate::workload::Dependency {
                    source,
                    trigger,
                    delay_ms,
                });
            }
            offsets.push(edges.len() as u32);
        }
        Workload {
            sessions: timestamps
                .iter()
                .enumerate()
                .map(|(i, &ts)| session(&format!("n{i}"), ts, &[0.0]))
                .collect(),
            graph: Some(DependencyGraph {
                offsets,
                edges,
                floor_ms: floors.to_vec(),
                timing,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn graph_releases_after_the_slowest_dependency() {
        use Trigger::*;
        // n0 root at 1000 (shifted by the dependent n2's timestamp 400), n1 root without a
        // timestamp (0), n2 waits for both (+10 ms), n3 for n0's dispatch (+5 ms).
        let w = graph_workload(
            &[Some(1000.0), None, None, None],
            &[Some(1000.0), None, Some(400.0), None],
            &[
                &[],
                &[],
                &[(0, Completion, 10.0), (1, Completion, 10.0)],
                &[(0, Dispatch, 5.0)],
            ],
            GraphTiming::Timestamps,
        );
        let mut d = Driver::new(w, ArrivalMode::Timestamps { speedup: 2.0 }).unwrap();
        let r = d.pop_ready(0.0).unwrap();
        assert_eq!((r.session_index, r.ready_at_ms), (1, 0.0));
        assert_eq!(d.next_ready_ms(), Some(300.0));
        let r = d.pop_ready(300.0).unwrap();
        assert_eq!(r.session_index, 0);
        // The dispatch dependency fired: n3 at 300 + 5/2.
        assert_eq!(d.next_ready_ms(), Some(302.5));
        assert_eq!(d.pop_ready(302.5).unwrap().session_index, 3);
        d.on_terminal(1, 0, 350.0, done());
        assert!(d.next_ready_ms().is_none());
        d.on_terminal(0, 0, 320.0, done());
        // max(350, 320) + 10/2
        assert_eq!(d.next_ready_ms(), Some(355.0));
        assert_eq!(d.pop_ready(355.0).unwrap().session_index, 2);
        d.on_terminal(3, 0, 400.0, done());
        assert!(!d.is_drained());
        d.on_terminal(2, 0, 400.0, done());
        assert!(d.is_drained());
    }

    #[test]
    fn graph_workloads_refuse_closed_loop() {
        let w = graph_workload(&[None], &[None], &[&[]], GraphTiming::NotBefore);
        let e = Driver::new(w, ArrivalMode::Concurrency { limit: 1 }).unwrap_err();
        assert!(e
            .message()
            .contains("not supported with replay_concurrency"));
    }

    #[test]
    fn cumulative_prompts_carry_history_and_generated_tokens() {
        use crate::workload::Prompt;
        let mut w = Workload {
            sessions: vec![session("a", Some(0.0), &[0.0, 7.0, 0.0])],
            prompts: PromptMode::Cumulative,
            ..Default::default()
        };
        for (k, t) in w.sessions[0].turns.iter_mut().enumerate() {
            t.prompt = Prompt::hash_ids(vec![k as u32], 8);
            t.input_length = 8;
        }
        let mut d = Driver::new(w, ArrivalMode::Timestamps { speedup: 1.0 }).unwrap();
        assert_eq!(d.pop_ready(0.0).unwrap().prompt.len(), 8);
        d.on_terminal(
            0,
            0,
            1.0,
            Terminal {
                request_id: 4,
                output_tokens: 3,
                completed: true,
            },
        );
        let r = d.pop_ready(8.0).unwrap();
        // 8 (turn 0) + 3 generated + 8 (turn 1)
        assert_eq!(r.prompt.len(), 19);
        assert_eq!(r.prompt.runs()[1].token, generated_token(4, 0));
        // A rejected turn adds no output.
        d.on_terminal(
            0,
            1,
            9.0,
            Terminal {
                request_id: 5,
                output_tokens: 0,
                completed: false,
            },
        );
        assert_eq!(d.pop_ready(9.0).unwrap().prompt.len(), 27);
    }

    /// The version 2 agentic fixture through the whole simulation: the child is released 5 ms
    /// after the root's dispatch, the join 1 ms after the later of root and child completes.
    #[test]
    fn agentic_version_2_fixture_end_to_end() {
        let Some(path) = crate::shared_file("traces/fixtures/agentic-mooncake.jsonl") else {
            return;
        };
        let spec = crate::config::ReplayOptions {
            trace_files: vec![path],
            trace_format: "agentic_mooncake".into(),
            report_jsonl: Some("unused.jsonl".into()),
            ..Default::default()
        }
        .into_spec()
        .unwrap();
        let workload = crate::workload::load(&spec).unwrap();
        let (report, records) = crate::sim::Simulation::new(&spec, workload)
            .run()
            .unwrap()
            .into_report(0.0);
        let arrivals: Vec<f64> = records.iter().map(|r| r.arrival_time_ms).collect();
        let ends: Vec<f64> = records.iter().map(|r| r.terminal_time_ms).collect();
        assert_eq!(arrivals[..2], [0.0, 5.0]);
        assert_eq!(arrivals[2], ends[0].max(ends[1]) + 1.0);
        assert_eq!(records.len(), 3);
        assert_eq!(
            report.get("num_requests"),
            Some(crate::report::Value::Int(3))
        );
        assert_eq!(
            report.get("completed_requests"),
            Some(crate::report::Value::Int(3))
        );
    }

    /// Releases every turn, ending each `service_ms` after its release, and lists what was
    /// released: (session, turn, ready time, release time, prompt).
    fn replay_all(mut d: Driver, service_ms: f64) -> Vec<(usize, usize, f64, f64, TokenSeq)> {
        let mut out = Vec::new();
        let mut ends: Vec<(f64, usize, usize)> = Vec::new();
        let mut now = 0.0;
        let mut id = 0;
        loop {
            while let Some(r) = d.pop_ready(now) {
                out.push((
                    r.session_index,
                    r.turn_index,
                    r.ready_at_ms,
                    now,
                    r.prompt.clone(),
                ));
                ends.push((now + service_ms, r.session_index, r.turn_index));
            }
            ends.sort_by(|a, b| b.0.total_cmp(&a.0));
            let next_end = ends.last().map(|e| e.0);
            let next = match (next_end, d.next_ready_ms()) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => break,
                },
            };
            now = next;
            while ends.last().is_some_and(|e| e.0 <= now) {
                let (_, session, turn) = ends.pop().unwrap();
                let how = Terminal {
                    request_id: id,
                    output_tokens: 1,
                    completed: true,
                };
                id += 1;
                d.on_terminal(session, turn, now, how);
            }
        }
        assert!(d.is_drained());
        out
    }

    #[test]
    fn generated_sessions_release_exactly_like_the_listed_workload() {
        use crate::config::{ArrivalProcess, SyntheticSpec};
        for (arrival_process, turns, mode) in [
            (
                Some(ArrivalProcess::Poisson {
                    rate: 50.0,
                    seed: 3,
                }),
                3,
                ArrivalMode::Timestamps { speedup: 2.0 },
            ),
            (
                Some(ArrivalProcess::Interval { interval_ms: 0.0 }),
                1,
                ArrivalMode::Timestamps { speedup: 1.0 },
            ),
            (None, 2, ArrivalMode::Concurrency { limit: 4 }),
            (None, 1, ArrivalMode::Concurrency { limit: 3 }),
        ] {
            let spec = SyntheticSpec {
                input_tokens: 100,
                output_tokens: 10,
                request_count: 25,
                arrival_process,
                turns_per_session: turns,
                shared_prefix_ratio: if turns > 1 { 0.5 } else { 0.0 },
                num_prefix_groups: if turns > 1 { 3 } else { 0 },
                inter_turn_delay_ms: if turns > 1 { 7.0 } else { 0.0 },
                engine_block_size: 16,
                lengths: Default::default(),
            };
            let lazy = crate::workload::synthetic::generate(&spec).unwrap();
            let mut source = lazy.synthetic.clone().unwrap();
            let listed = Workload {
                sessions: std::iter::from_fn(|| source.next_session()).collect(),
                ..Workload::default()
            };
            assert_eq!(listed.sessions.len(), 25);
            let a = replay_all(Driver::new(lazy, mode).unwrap(), 30.0);
            let b = replay_all(Driver::new(listed, mode).unwrap(), 30.0);
            assert_eq!(a.len(), 25 * turns);
            assert_eq!(a, b, "{mode:?}");
        }
    }

    #[test]
    fn generated_arrivals_beyond_the_horizon_are_refused_before_the_run() {
        use crate::config::{ArrivalProcess, SyntheticSpec};
        let spec = SyntheticSpec {
            input_tokens: 10,
            output_tokens: 1,
            request_count: 5,
            arrival_process: Some(ArrivalProcess::Interval { interval_ms: 4e11 }),
            turns_per_session: 1,
            shared_prefix_ratio: 0.0,
            num_prefix_groups: 0,
            inter_turn_delay_ms: 0.0,
            engine_block_size: 16,
            lengths: Default::default(),
        };
        let w = crate::workload::synthetic::generate(&spec).unwrap();
        let e = Driver::new(w, ArrivalMode::Timestamps { speedup: 1.0 }).unwrap_err();
        assert_eq!(
            e.message(),
            "the arrival of session session_3 (timestamp 1200000000000, the first is 0) is \
             1200000000000 ms of virtual time, beyond the simulator's horizon of 1e12 ms (about \
             31.7 years)"
        );
    }
}
