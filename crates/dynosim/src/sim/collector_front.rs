//! The collector as the topologies see it: on the simulating thread, or one step behind on a
//! thread of its own.
//!
//! During a run the topologies only ever write to the collector (lifecycle calls, the time
//! series' pass ends, records to the caller's sink); nothing they decide depends on what it
//! holds. So its work can run on a second core: the front records each call as a small
//! message, in call order, into a batch; full batches go over a bounded channel to a thread
//! that applies them to the real [`Collector`], in the same order, and sends the emptied
//! batches back for reuse (no allocation once the run is under way). The collector therefore
//! sees exactly the calls it would have seen inline, and the report and records are
//! byte-identical whichever thread ran it: nothing depends on scheduling. A pass gives one
//! token to each of many requests at one time: consecutive such token calls travel as one
//! message with the requests' ids beside it (4 bytes a token instead of a 40-byte message),
//! and the collector applies them one by one, in order. A run of passes of one worker that
//! gave a token to the same requests each (decode passes applied ahead of the loop) travels
//! as one message with the ids once and the pass ends beside them.
//!
//! INTERFACE
//! - [`CollectorThread`]: the run option choosing the thread (beside `sim::Observers`).
//! - [`CollectorFront::start`] takes a configured collector (time series, record sink);
//!   its methods are the collector's lifecycle calls, plus
//!   [`CollectorFront::timeseries_pass_end`] in place of `Collector::timeseries_mut`, and
//!   [`CollectorFront::on_single_tokens`], which takes a pass's leading run of one-token
//!   events at once.
//! - [`CollectorFront::finish`] hands the collector back once every call is applied; it is
//!   an error if the collector's thread died. Dropping a front without finishing (a failed
//!   run) disconnects and joins the thread: neither side can wait for the other forever.

use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::engine::{PassEvent, RankLoad, RequestId};
use crate::error::{Error, Result};
use crate::report::timeseries::TimeSeries;
use crate::report::{Collector, HandoffStage, TerminalStatus};
use crate::workload::SessionId;

/// Which thread runs a simulation's collector. Both give identical reports and records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CollectorThread {
    /// The simulating thread (for callers whose other cores are busy already, like a sweep's
    /// candidates running on every core, and for tests of the plain path).
    #[default]
    SameThread,
    /// A thread of its own, fed batches of the simulation's calls.
    OwnThread,
}

/// Calls per batch (40 bytes each, 160 KiB a batch). The simulation's end waits for the
/// collector to apply the last batch or two, so smaller batches end a run sooner; what kept
/// batches large before (32768 calls) was the system call that wakes a thread blocked on the
/// channel, paid by the simulating thread per batch (with 2048 calls a batch, the synthetic
/// 100k run switched threads 6,500 times and took 20% more CPU than inline). The collector's
/// thread now never blocks on the channel: it polls it, sleeping between empty looks (see
/// [`IDLE_POLL_FIRST`]), so sending a batch wakes nobody.
const BATCH_CALLS: usize = 4096;
/// Request ids of grouped tokens per batch, per call of [`BATCH_CALLS`] (4 bytes each: 64 KiB
/// a batch): a batch ends when either fills.
const IDS_PER_CALL: usize = 4;
/// How long the collector's thread sleeps when it finds no batch waiting: first short against
/// a batch's worth of simulation (a few hundred microseconds), so that the collector stays
/// about one batch behind, then twice as long after each further empty look, up to
/// [`IDLE_POLL_LONGEST`], so that a collector left idle (a live replay waiting for its
/// arrivals) costs its core next to nothing. A run's end waits at most that long for it.
const IDLE_POLL_FIRST: Duration = Duration::from_micros(50);
const IDLE_POLL_LONGEST: Duration = Duration::from_millis(1);
/// Full batches waiting for the collector at most; beyond this the simulation waits for it,
/// so memory stays bounded (about 11 batches in all, 2.5 MB) when the collector is the slower
/// side. Several, so that a stretch where the collector has more to do per call (many requests
/// ending) does not stall the simulation.
const BATCHES_IN_FLIGHT: usize = 8;

/// One collector call, as a message. The rare bulky arguments (a session name, a pass's load)
/// travel beside the calls in their batch, so that the common ones stay small.
#[derive(Clone, Copy, Debug)]
enum Call {
    Arrival {
        id: RequestId,
        at_ms: f64,
        input_length: usize,
        requested_output_length: usize,
    },
    /// An arrival whose session and turn are the batch's next entry in `sessions`.
    ArrivalInSession {
        id: RequestId,
        at_ms: f64,
        input_length: usize,
        requested_output_length: usize,
    },
    Admit {
        id: RequestId,
        at_ms: f64,
        reused_tokens: usize,
        worker_idx: usize,
    },
    PrefillAdmit {
        id: RequestId,
        at_ms: f64,
        reused_tokens: usize,
    },
    DecodeAdmit {
        id: RequestId,
        at_ms: f64,
        reused_tokens: usize,
    },
    PrefillAssigned {
        id: RequestId,
        worker_idx: usize,
        overlap_tokens: usize,
    },
    DecodeAssigned {
        id: RequestId,
        worker_idx: usize,
        overlap_tokens: usize,
    },
    Handoff {
        id: RequestId,
        stage: HandoffStage,
        at_ms: f64,
    },
    Tokens {
        id: RequestId,
        at_ms: f64,
        count: usize,
    },
    /// One token at `at_ms` for each of the batch's next `requests` entries in `ids`.
    OneTokenEach { at_ms: f64, requests: usize },
    /// Passes that ended at the batch's next `passes` entries of `pass_end_times`, each a token
    /// for each of the next `requests` ids, in order: a [`Call::OneTokenEach`] per pass,
    /// sharing the ids.
    OneTokenEachPass { passes: usize, requests: usize },
    Terminal {
        id: RequestId,
        at_ms: f64,
        status: TerminalStatus,
    },
    /// A pass end for the time series: the batch's next entry in `pass_ends`.
    PassEnd,
}

/// A pass end as the time series takes it.
#[derive(Clone, Copy, Debug)]
struct PassEnd {
    at_ms: f64,
    pool: usize,
    worker: usize,
    load: RankLoad,
    user_tokens: usize,
}

/// Calls in order, with their bulky arguments beside them.
#[derive(Debug, Default)]
struct Batch {
    calls: Vec<Call>,
    sessions: Vec<(SessionId, usize)>,
    pass_ends: Vec<PassEnd>,
    /// The requests of the [`Call::OneTokenEach`] and [`Call::OneTokenEachPass`] calls, in
    /// order.
    ids: Vec<u32>,
    /// The pass ends of the [`Call::OneTokenEachPass`] calls, in order.
    pass_end_times: Vec<f64>,
}

impl Batch {
    fn new(calls: usize, ids: usize) -> Self {
        Self {
            // One more: a batch full of calls still takes the call of its open token group.
            calls: Vec::with_capacity(calls + 1),
            ids: Vec::with_capacity(ids),
            ..Self::default()
        }
    }

    fn clear(&mut self) {
        self.calls.clear();
        self.sessions.clear();
        self.pass_ends.clear();
        self.ids.clear();
        self.pass_end_times.clear();
    }

    /// Applies every call to `collector`, in order.
    fn apply(&self, collector: &mut Collector) {
        let mut sessions = self.sessions.iter();
        let mut pass_ends = self.pass_ends.iter();
        let mut ids = &self.ids[..];
        let mut pass_end_times = &self.pass_end_times[..];
        for &call in &self.calls {
            match call {
                Call::Arrival {
                    id,
                    at_ms,
                    input_length,
                    requested_output_length,
                } => collector.on_arrival(id, at_ms, input_length, requested_output_length, None),
                Call::ArrivalInSession {
                    id,
                    at_ms,
                    input_length,
                    requested_output_length,
                } => {
                    let (session, turn) = sessions.next().expect("one session per such arrival");
                    collector.on_arrival(
                        id,
                        at_ms,
                        input_length,
                        requested_output_length,
                        Some((session, *turn)),
                    );
                }
                Call::Admit {
                    id,
                    at_ms,
                    reused_tokens,
                    worker_idx,
                } => collector.on_admit(id, at_ms, reused_tokens, worker_idx),
                Call::PrefillAdmit {
                    id,
                    at_ms,
                    reused_tokens,
                } => collector.on_prefill_admit(id, at_ms, reused_tokens),
                Call::DecodeAdmit {
                    id,
                    at_ms,
                    reused_tokens,
                } => collector.on_decode_admit(id, at_ms, reused_tokens),
                Call::PrefillAssigned {
                    id,
                    worker_idx,
                    overlap_tokens,
                } => collector.on_prefill_assigned(id, worker_idx, overlap_tokens),
                Call::DecodeAssigned {
                    id,
                    worker_idx,
                    overlap_tokens,
                } => collector.on_decode_assigned(id, worker_idx, overlap_tokens),
                Call::Handoff { id, stage, at_ms } => collector.on_handoff(id, stage, at_ms),
                Call::Tokens { id, at_ms, count } => collector.on_tokens(id, at_ms, count),
                Call::OneTokenEach { at_ms, requests } => {
                    let (these, rest) = ids.split_at(requests);
                    collector.on_one_token_each(at_ms, these);
                    ids = rest;
                }
                Call::OneTokenEachPass { passes, requests } => {
                    let (these, rest) = ids.split_at(requests);
                    let (ends, later) = pass_end_times.split_at(passes);
                    for &at_ms in ends {
                        collector.on_one_token_each(at_ms, these);
                    }
                    (ids, pass_end_times) = (rest, later);
                }
                Call::Terminal { id, at_ms, status } => collector.on_terminal(id, at_ms, status),
                Call::PassEnd => {
                    let pass = pass_ends.next().expect("one pass end per such call");
                    if let Some(series) = collector.timeseries_mut() {
                        series.on_pass_end_counted(
                            pass.at_ms,
                            pass.pool,
                            pass.worker,
                            pass.load,
                            pass.user_tokens,
                        );
                    }
                }
            }
        }
    }
}

/// The collector on a thread of its own, and the batch being filled for it.
#[derive(Debug)]
pub(super) struct Threaded {
    batch: Batch,
    /// Full batches to the collector's thread; `None` once that thread is gone.
    full: Option<SyncSender<Batch>>,
    /// Emptied batches back from it.
    empty: Receiver<Batch>,
    thread: Option<JoinHandle<Collector>>,
    /// Records are captured: arrivals carry their session.
    capture_records: bool,
    /// The time series are recorded: pass ends are sent.
    records_timeseries: bool,
    /// Calls per batch ([`BATCH_CALLS`]; fewer in tests, to cross many batch boundaries),
    /// and grouped tokens' ids per batch.
    batch_calls: usize,
    batch_ids: usize,
    /// The group of one-token calls being filled, if any: their time (all equal, bit for
    /// bit), and where their ids start in the batch's `ids`. Its [`Call::OneTokenEach`] is
    /// written when the group closes: at the next other call, or when the batch is sent.
    group: Option<(u64, usize)>,
}

impl Threaded {
    fn start(mut collector: Collector, capture_records: bool, batch_calls: usize) -> Self {
        let records_timeseries = collector.timeseries_mut().is_some();
        let (full, full_rx) = mpsc::sync_channel::<Batch>(BATCHES_IN_FLIGHT);
        let (empty_tx, empty) = mpsc::channel::<Batch>();
        let thread = std::thread::Builder::new()
            .name("dynosim-collector".into())
            .spawn(move || {
                // Ends when the front hangs up (finished, or dropped by a failed run) and
                // every batch it sent is applied. Polled, never blocked on: see BATCH_CALLS.
                let mut idle = IDLE_POLL_FIRST;
                loop {
                    match full_rx.try_recv() {
                        Ok(mut batch) => {
                            batch.apply(&mut collector);
                            batch.clear();
                            // The front may be gone already; the batch is then simply dropped.
                            let _ = empty_tx.send(batch);
                            idle = IDLE_POLL_FIRST;
                        }
                        Err(TryRecvError::Empty) => {
                            std::thread::sleep(idle);
                            idle = (idle * 2).min(IDLE_POLL_LONGEST);
                        }
                        Err(TryRecvError::Disconnected) => break,
                    }
                }
                collector
            });
        let (full, thread) = match thread {
            Ok(thread) => (Some(full), Some(thread)),
            // No thread to be had: `finish` reports it.
            Err(_) => (None, None),
        };
        let batch_ids = batch_calls * IDS_PER_CALL;
        Self {
            batch: Batch::new(batch_calls, batch_ids),
            full,
            empty,
            thread,
            capture_records,
            records_timeseries,
            batch_calls,
            batch_ids,
            group: None,
        }
    }

    #[inline]
    fn push(&mut self, call: Call) {
        self.close_group();
        self.batch.calls.push(call);
        if self.batch.calls.len() >= self.batch_calls {
            self.send();
        }
    }

    /// One token of request `id` at `at_ms`: joins the open group of such calls at that time,
    /// or opens one.
    #[inline(always)]
    fn push_one_token(&mut self, id: u32, at_ms: f64) {
        let bits = at_ms.to_bits();
        if !matches!(self.group, Some((open, _)) if open == bits) {
            self.open_group(bits);
        }
        self.batch.ids.push(id);
        if self.batch.ids.len() >= self.batch_ids {
            self.send();
        }
    }

    /// The leading events of `events` that are one token each (of requests within `u32`), all
    /// at `at_ms`, as [`Threaded::push_one_token`] would take them one by one; returns how many
    /// it took. One check of the group and of the batch's room per run instead of per token.
    fn push_single_tokens(&mut self, events: &[PassEvent], at_ms: f64) -> usize {
        let single = |event: &PassEvent| matches!(*event, PassEvent::Tokens { id, count: 1 } if id <= u32::MAX as RequestId);
        let len = events
            .iter()
            .position(|e| !single(e))
            .unwrap_or(events.len());
        let bits = at_ms.to_bits();
        let mut taken = 0;
        while taken < len {
            if !matches!(self.group, Some((open, _)) if open == bits) {
                self.open_group(bits);
            }
            // A batch is sent as soon as its ids reach `batch_ids`, so there is room.
            let room = self.batch_ids.saturating_sub(self.batch.ids.len()).max(1);
            let end = len.min(taken + room);
            self.batch
                .ids
                .extend(events[taken..end].iter().map(|event| match *event {
                    PassEvent::Tokens { id, .. } => id as u32,
                    _ => unreachable!("a run of token events"),
                }));
            taken = end;
            if self.batch.ids.len() >= self.batch_ids {
                self.send();
            }
        }
        len
    }

    /// Passes that ended at `ends_ms`, each a token for each request of `ids` (all within
    /// `u32`), as one call.
    fn push_one_token_each_pass(&mut self, ends_ms: &[f64], ids: &[RequestId]) {
        // The call and its ids and pass ends go into the same batch: sending between them
        // (when the call fills the batch's calls) would leave the call without its data.
        self.close_group();
        self.batch.calls.push(Call::OneTokenEachPass {
            passes: ends_ms.len(),
            requests: ids.len(),
        });
        self.batch.ids.extend(ids.iter().map(|&id| id as u32));
        self.batch.pass_end_times.extend_from_slice(ends_ms);
        if self.batch.calls.len() >= self.batch_calls
            || self.batch.ids.len() >= self.batch_ids
            || self.batch.pass_end_times.len() >= self.batch_ids
        {
            self.send();
        }
    }

    /// Closes the open token group, if any, and opens one at the time whose bits are `bits`.
    #[inline(never)]
    fn open_group(&mut self, bits: u64) {
        self.close_group();
        if self.batch.calls.len() >= self.batch_calls {
            self.send();
        }
        self.group = Some((bits, self.batch.ids.len()));
    }

    /// Writes the call of the open token group, if any (into the room a batch keeps for it).
    #[inline]
    fn close_group(&mut self) {
        if let Some((bits, start)) = self.group.take() {
            self.batch.calls.push(Call::OneTokenEach {
                at_ms: f64::from_bits(bits),
                requests: self.batch.ids.len() - start,
            });
        }
    }

    /// Sends the batch being filled and takes an emptied one (or, while the run is young, a
    /// new one) in its place.
    fn send(&mut self) {
        self.close_group();
        let Some(full) = &self.full else {
            // The collector's thread is gone; `finish` reports it.
            self.batch.clear();
            return;
        };
        let (batch_calls, batch_ids) = (self.batch_calls, self.batch_ids);
        let next = self
            .empty
            .try_recv()
            .unwrap_or_else(|_| Batch::new(batch_calls, batch_ids));
        let batch = std::mem::replace(&mut self.batch, next);
        if full.send(batch).is_err() {
            self.full = None;
        }
    }

    fn finish(mut self) -> Result<Collector> {
        self.close_group();
        if !self.batch.calls.is_empty() {
            self.send();
        }
        // Hanging up ends the thread's loop once it has applied everything sent.
        self.full = None;
        let joined = self.thread.take().map(JoinHandle::join);
        match joined {
            Some(Ok(collector)) => Ok(collector),
            Some(Err(panic)) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no reason given".to_string());
                Err(Error::runtime(format!(
                    "internal error: the collector's thread stopped ({why}); no report"
                )))
            }
            None => Err(Error::runtime(
                "could not start the collector's thread; no report",
            )),
        }
    }
}

/// One token of request `id` at `at_ms` on the simulating thread's collector.
#[inline(never)]
fn one_token_inline(collector: &mut Collector, id: RequestId, at_ms: f64) {
    collector.on_one_token(id, at_ms);
}

impl Drop for Threaded {
    /// A run that failed drops its front unfinished: hang up and wait for the thread, so that
    /// nothing reaches the caller's record sink after the run returned.
    fn drop(&mut self) {
        self.full = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The run's collector, inline or on its own thread (see the module doc). Method names are
/// the collector's.
// One front per run: its size does not matter, and the threaded variant's batch is written on
// every token, so it stays inline rather than behind a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum CollectorFront {
    Inline(Box<Collector>),
    Threaded(Threaded),
}

impl CollectorFront {
    /// Runs `collector` (configured: time series, record sink) on the thread `thread` says.
    /// `capture_records` as the collector was built with.
    pub(super) fn start(
        collector: Collector,
        capture_records: bool,
        thread: CollectorThread,
    ) -> Self {
        match thread {
            CollectorThread::SameThread => Self::Inline(Box::new(collector)),
            CollectorThread::OwnThread => {
                Self::Threaded(Threaded::start(collector, capture_records, BATCH_CALLS))
            }
        }
    }

    /// The collector, every call applied.
    pub(super) fn finish(self) -> Result<Collector> {
        match self {
            Self::Inline(collector) => Ok(*collector),
            Self::Threaded(sender) => sender.finish(),
        }
    }

    pub(super) fn on_arrival(
        &mut self,
        id: RequestId,
        at_ms: f64,
        input_length: usize,
        requested_output_length: usize,
        session: Option<(&SessionId, usize)>,
    ) {
        match self {
            Self::Inline(collector) => collector.on_arrival(
                id,
                at_ms,
                input_length,
                requested_output_length,
                session.map(|(name, turn)| (name as &dyn std::fmt::Display, turn)),
            ),
            Self::Threaded(sender) => {
                // Without records the collector has no use for the session.
                let call = match session {
                    Some((name, turn)) if sender.capture_records => {
                        sender.batch.sessions.push((name.clone(), turn));
                        Call::ArrivalInSession {
                            id,
                            at_ms,
                            input_length,
                            requested_output_length,
                        }
                    }
                    _ => Call::Arrival {
                        id,
                        at_ms,
                        input_length,
                        requested_output_length,
                    },
                };
                sender.push(call);
            }
        }
    }

    #[inline]
    fn call(&mut self, call: Call, inline: impl FnOnce(&mut Collector)) {
        match self {
            Self::Inline(collector) => inline(collector),
            Self::Threaded(sender) => sender.push(call),
        }
    }

    pub(super) fn on_admit(
        &mut self,
        id: RequestId,
        at_ms: f64,
        reused_tokens: usize,
        worker_idx: usize,
    ) {
        let call = Call::Admit {
            id,
            at_ms,
            reused_tokens,
            worker_idx,
        };
        self.call(call, |c| c.on_admit(id, at_ms, reused_tokens, worker_idx));
    }

    pub(super) fn on_prefill_admit(&mut self, id: RequestId, at_ms: f64, reused_tokens: usize) {
        let call = Call::PrefillAdmit {
            id,
            at_ms,
            reused_tokens,
        };
        self.call(call, |c| c.on_prefill_admit(id, at_ms, reused_tokens));
    }

    pub(super) fn on_decode_admit(&mut self, id: RequestId, at_ms: f64, reused_tokens: usize) {
        let call = Call::DecodeAdmit {
            id,
            at_ms,
            reused_tokens,
        };
        self.call(call, |c| c.on_decode_admit(id, at_ms, reused_tokens));
    }

    pub(super) fn on_prefill_assigned(
        &mut self,
        id: RequestId,
        worker_idx: usize,
        overlap_tokens: usize,
    ) {
        let call = Call::PrefillAssigned {
            id,
            worker_idx,
            overlap_tokens,
        };
        self.call(call, |c| {
            c.on_prefill_assigned(id, worker_idx, overlap_tokens)
        });
    }

    pub(super) fn on_decode_assigned(
        &mut self,
        id: RequestId,
        worker_idx: usize,
        overlap_tokens: usize,
    ) {
        let call = Call::DecodeAssigned {
            id,
            worker_idx,
            overlap_tokens,
        };
        self.call(call, |c| {
            c.on_decode_assigned(id, worker_idx, overlap_tokens)
        });
    }

    pub(super) fn on_handoff(&mut self, id: RequestId, stage: HandoffStage, at_ms: f64) {
        let call = Call::Handoff { id, stage, at_ms };
        self.call(call, |c| c.on_handoff(id, stage, at_ms));
    }

    /// Inlined into the topologies' pass ends, the hottest call site: the threaded path's
    /// common case is a few instructions, everything else a call (the inline path's one token
    /// a call of its own: inlining the collector's work there cost the threaded path's loop
    /// its registers, +2.6% instructions on a 4-worker KV-router run's simulating thread).
    #[inline(always)]
    pub(super) fn on_tokens(&mut self, id: RequestId, at_ms: f64, count: usize) {
        match self {
            Self::Threaded(sender) if count == 1 && id <= u32::MAX as RequestId => {
                sender.push_one_token(id as u32, at_ms)
            }
            Self::Inline(collector) if count == 1 => one_token_inline(collector, id, at_ms),
            _ => self.on_tokens_otherwise(id, at_ms, count),
        }
    }

    /// The leading events of `events` that are one token each, at `at_ms`: what `on_tokens`
    /// for each would do, in one go (one walk inline, a run of ids for the collector's own
    /// thread). Returns how many it took.
    #[inline]
    pub(super) fn on_single_tokens(&mut self, events: &[PassEvent], at_ms: f64) -> usize {
        match self {
            Self::Threaded(sender) => sender.push_single_tokens(events, at_ms),
            Self::Inline(collector) => {
                let mut taken = 0;
                for event in events {
                    let PassEvent::Tokens { id, count: 1 } = *event else {
                        break;
                    };
                    collector.on_one_token(id, at_ms);
                    taken += 1;
                }
                taken
            }
        }
    }

    /// Passes that ended at `ends_ms`, in order, each a token for each request of `ids`, in
    /// order: what `on_tokens(id, end_ms, 1)` for each pass end and each request would do.
    pub(super) fn on_one_token_each_pass(&mut self, ends_ms: &[f64], ids: &[RequestId]) {
        if ends_ms.is_empty() || ids.is_empty() {
            return;
        }
        match self {
            Self::Threaded(sender)
                if ids.len() < sender.batch_ids
                    && ids.iter().all(|&id| id <= u32::MAX as RequestId) =>
            {
                sender.push_one_token_each_pass(ends_ms, ids)
            }
            Self::Inline(collector) => {
                for &end_ms in ends_ms {
                    for &id in ids {
                        collector.on_one_token(id, end_ms);
                    }
                }
            }
            _ => {
                for &end_ms in ends_ms {
                    for &id in ids {
                        self.on_tokens(id, end_ms, 1);
                    }
                }
            }
        }
    }

    #[inline(never)]
    fn on_tokens_otherwise(&mut self, id: RequestId, at_ms: f64, count: usize) {
        let call = Call::Tokens { id, at_ms, count };
        self.call(call, |c| c.on_tokens(id, at_ms, count));
    }

    pub(super) fn on_completed(&mut self, id: RequestId, at_ms: f64) {
        self.on_terminal(id, at_ms, TerminalStatus::Completed);
    }

    pub(super) fn on_rejected(&mut self, id: RequestId, at_ms: f64) {
        self.on_terminal(id, at_ms, TerminalStatus::Rejected);
    }

    pub(super) fn on_terminal(&mut self, id: RequestId, at_ms: f64, status: TerminalStatus) {
        let call = Call::Terminal { id, at_ms, status };
        self.call(call, |c| c.on_terminal(id, at_ms, status));
    }

    /// Whether the time series are recorded (then the topologies report pass ends).
    pub(super) fn records_timeseries(&mut self) -> bool {
        match self {
            Self::Inline(collector) => collector.timeseries_mut().is_some(),
            Self::Threaded(sender) => sender.records_timeseries,
        }
    }

    /// Worker `worker` of pool `pool` ended a pass at `at_ms` holding `load`
    /// ([`TimeSeries::on_pass_end`]); nothing when the time series are not recorded.
    pub(super) fn timeseries_pass_end(
        &mut self,
        at_ms: f64,
        pool: usize,
        worker: usize,
        load: RankLoad,
        events: &[PassEvent],
        tokens_reach_users: bool,
    ) {
        match self {
            Self::Inline(collector) => {
                if let Some(series) = collector.timeseries_mut() {
                    series.on_pass_end(at_ms, pool, worker, load, events, tokens_reach_users);
                }
            }
            Self::Threaded(sender) => {
                if !sender.records_timeseries {
                    return;
                }
                let user_tokens = if tokens_reach_users {
                    TimeSeries::tokens_of(events)
                } else {
                    0
                };
                sender.batch.pass_ends.push(PassEnd {
                    at_ms,
                    pool,
                    worker,
                    load,
                    user_tokens,
                });
                sender.push(Call::PassEnd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Sla;
    use crate::report::{RecordSink, RequestRecord, RunFacts};
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<RequestRecord>>>);

    impl RecordSink for Shared {
        fn accept(&mut self, record: RequestRecord) {
            self.0.lock().unwrap().push(record);
        }
    }

    /// A run's worth of calls of every kind, sessions and pass ends among them.
    fn feed(front: &mut CollectorFront) {
        let names: Vec<SessionId> = (0..5).map(|i| SessionId::from(format!("s{i}"))).collect();
        let events = [PassEvent::Tokens { id: 0, count: 3 }];
        for id in 0..60 {
            let at = id as f64 * 2.5;
            front.on_arrival(id, at, 100 + id, 8, Some((&names[id % 5], id / 5)));
            front.on_prefill_assigned(id, id % 3, 16);
            front.on_prefill_admit(id, at + 1.0, 32);
            front.on_handoff(id, HandoffStage::SourceHeld, at + 2.0);
            front.on_decode_assigned(id, id % 2, 0);
            front.on_decode_admit(id, at + 3.0, 64);
            front.on_admit(id, at + 3.0, 64, id % 2);
            let load = RankLoad {
                waiting: id % 4,
                running: 3,
                kv_used_tokens: 10 * id,
                kv_capacity_tokens: 4096,
            };
            front.timeseries_pass_end(at + 3.0, 1, id % 2, load, &events, id % 3 != 0);
            for step in 0..(id % 9) {
                front.on_tokens(id, at + 4.0 + step as f64, 1 + step % 2);
            }
            match id % 7 {
                0 => front.on_rejected(id, at + 20.0),
                1 => front.on_terminal(id, at + 20.0, TerminalStatus::Failed),
                _ => front.on_completed(id, at + 20.0),
            }
            front.on_handoff(id, HandoffStage::SourceReleased, at + 21.0);
        }
        // Passes giving one token to each of many requests at one time (grouped), broken by
        // a two-token call, a completion and a pass end.
        for id in 60..90 {
            front.on_arrival(id, 200.0, 10, 20, None);
            front.on_admit(id, 200.0, 0, id % 2);
        }
        for pass in 0..12 {
            let at = 210.0 + 7.5 * pass as f64;
            for id in 60..90 {
                if id == 70 && pass % 4 == 1 {
                    front.on_tokens(id, at, 2);
                } else if (id + pass) % 5 != 0 {
                    front.on_tokens(id, at, 1);
                }
                if id == 80 && pass == 6 {
                    front.on_completed(id, at);
                }
                if id == 85 && pass % 3 == 0 {
                    front.timeseries_pass_end(at, 0, 1, RankLoad::default(), &events, true);
                }
            }
        }
        // Pass ends as the topologies apply them: runs of single tokens in one call, a
        // two-token event between them.
        for pass in 0..6 {
            let at = 320.0 + 5.0 * pass as f64;
            let events: Vec<PassEvent> = (60..90)
                .filter(|id| (id + pass) % 4 != 0)
                .map(|id| PassEvent::Tokens {
                    id,
                    count: if id == 75 && pass % 2 == 0 { 2 } else { 1 },
                })
                .collect();
            let mut index = 0;
            while index < events.len() {
                index += front.on_single_tokens(&events[index..], at);
                if let Some(&PassEvent::Tokens { id, count }) = events.get(index) {
                    front.on_tokens(id, at, count);
                    index += 1;
                }
            }
        }
        // Decode passes run ahead of the loop: several pass ends, one token each for the same
        // requests, as one call, between other calls (so that, whatever the batch size, some
        // such call fills a batch's calls).
        for round in 0..9 {
            let at = 360.0 + 4.0 * round as f64;
            // From 1 request (within even the smallest batch's room) to 20.
            let ids: Vec<RequestId> = (60..61 + [0, 2, 19][round % 3]).collect();
            let ends: Vec<f64> = (0..1 + round % 3).map(|k| at + k as f64).collect();
            front.on_one_token_each_pass(&ends, &ids);
            front.on_tokens(61, at + 3.5, 1 + round % 2);
        }
        for id in 60..90 {
            front.on_completed(id, 400.0);
        }
    }

    fn outputs(thread: CollectorThread, batch_calls: usize) -> (String, Vec<RequestRecord>) {
        let mut collector = Collector::new(Sla::default(), true);
        collector.record_timeseries(TimeSeries::new(&["prefill", "decode"]));
        let sink = Shared::default();
        collector.stream_records_to(Box::new(sink.clone()));
        let mut front = match thread {
            CollectorThread::SameThread => CollectorFront::start(collector, true, thread),
            CollectorThread::OwnThread => {
                CollectorFront::Threaded(Threaded::start(collector, true, batch_calls))
            }
        };
        feed(&mut front);
        let mut collector = front.finish().expect("the collector finished");
        let series = collector.take_timeseries().expect("recorded").to_json(64);
        let (report, records) = collector.finish(RunFacts::default());
        assert!(records.is_empty(), "records went to the sink");
        let records = std::mem::take(&mut *sink.0.lock().unwrap());
        (format!("{report:?} {series}"), records)
    }

    #[test]
    fn batches_of_any_size_give_what_the_inline_collector_gives() {
        let inline = outputs(CollectorThread::SameThread, 0);
        assert_eq!(inline.1.len(), 90);
        assert!(inline.1.iter().any(|r| r.source_released_ms.is_some()));
        for batch_calls in [1, 2, 3, 5, 7, 64, BATCH_CALLS] {
            assert_eq!(
                outputs(CollectorThread::OwnThread, batch_calls),
                inline,
                "batches of {batch_calls} calls"
            );
        }
    }

    #[test]
    fn messages_stay_small() {
        assert!(std::mem::size_of::<Call>() <= 40);
    }
}
