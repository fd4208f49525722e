//! Collects request lifecycle events and turns them into the report and per-request records.
//!
//! What counts (frontend.md §3.2): every arrival counts in `num_requests`; only requests that
//! were admitted and then completed feed the totals, the duration, the reuse ratios and the
//! distributions. Token gaps (ITL, OTPU) are folded into the streaming statistics when a
//! request completes, in completion order, as the reference does; gaps of requests that never
//! complete are dropped. Until then a request keeps its gaps as runs of equal gaps
//! (`GapRuns`); at its end the Welford moments take every sample in order, and the sketches,
//! whose bucket counts do not depend on order, take each run through a memo of recent gaps
//! that holds their counts back (`GapMemo`). So the results depend on each request's own
//! calls and on the order in which requests end, not on how the token calls of different
//! requests interleave.
//!
//! Memory follows the requests in flight, not the length of the run: a request's state lives
//! from its arrival to its end (in a dense table of plain states whose slots are reused, found
//! through a window of request ids: no allocation per request), when it is folded into the
//! totals and into the exact distributions (`exact::ExactValues`, a compressed multiset; their
//! means and deviations are compensated sums in value order, so the report does not depend on
//! completion order). When records are captured, an ended request's state waits only until
//! every request that sorts before it (by arrival time, then id) has ended, then its record
//! goes to the caller's [`RecordSink`] — unless no sink was given, or the run is disaggregated
//! (whose handoff may finish after the request ended): then records wait for the end of the
//! run.

use std::collections::{BTreeSet, VecDeque};

use super::accounting;
use super::exact::ExactValues;
use super::record::{RecordSink, TerminalStatus};
use super::stats::{DistributionStats, SketchBucket, StreamingDistribution};
use super::timeseries::{CompletedRequest, TimeSeries};
use super::{Report, Value, DISTRIBUTION_KEYS, GOODPUT_KEYS, LEADING_KEYS, SPEED_AND_REUSE_KEYS};
use crate::config::Sla;
use crate::engine::RequestId;

pub use super::record::RequestRecord;

/// Facts about the run that only the simulator knows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunFacts {
    pub prefill_worker_seconds: f64,
    pub decode_worker_seconds: f64,
    pub prefill_gpus_per_worker: u64,
    pub decode_gpus_per_worker: u64,
    /// Real elapsed ms of the simulation (measured by the caller, outside the core).
    pub wall_time_ms: f64,
    /// Requests the workload holds, arrived or not (0: not known).
    pub workload_requests: usize,
    /// The caller stopped the run (Ctrl-C) before it ended.
    pub interrupted: bool,
}

/// What is known about one output-token timeline: what every token updates (the first and
/// second tokens' times are in the request's state, off its first cache line).
#[derive(Clone, Copy, Debug, Default)]
struct TokenSummary {
    count: usize,
    last_ms: f64,
}

/// One request's state, in the collector's dense table. The fields a token touches come first,
/// in the state's first cache line.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct RequestState {
    tokens: TokenSummary,
    /// The gaps between consecutive tokens, not yet folded into the gap statistics.
    gaps: GapBuffer,
    /// The first token's time, once `tokens.count >= 1`, and the second's, once it is 2.
    first_token_ms: f64,
    second_token_ms: f64,
    arrival_ms: f64,
    input_length: usize,
    requested_output_length: usize,
    first_admit_ms: Option<f64>,
    /// Max reuse over all admissions.
    reused_tokens: usize,
    first_admission_reused_tokens: usize,
    decode_worker_idx: Option<usize>,
    terminal: Option<(f64, TerminalStatus)>,
    /// Kept only when records are captured.
    session: Option<Box<(String, usize)>>,
    /// Disaggregated lifecycle, kept only when records are captured.
    handoff: Option<Box<HandoffDetail>>,
}

/// What a disaggregated request went through, for its record (first occurrence of each).
#[derive(Clone, Copy, Debug, Default)]
struct HandoffDetail {
    prefill_worker_idx: Option<usize>,
    prefill_admit_ms: Option<f64>,
    source_held_ms: Option<f64>,
    destination_reserved_ms: Option<f64>,
    destination_activated_ms: Option<f64>,
    decode_admit_ms: Option<f64>,
    source_released_ms: Option<f64>,
    /// Most prompt tokens reused at a prefill admission: the record's `reused_input_tokens`
    /// (decode re-admissions count only in the report's ratio and in
    /// `decode_reused_input_tokens`).
    prefill_reused_input_tokens: usize,
    decode_reused_input_tokens: Option<usize>,
    prefill_route_overlap_tokens: Option<usize>,
    decode_route_overlap_tokens: Option<usize>,
}

/// A point of the disaggregated handoff lifecycle (frontend.md §3.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandoffStage {
    /// The prefill worker finished and keeps the prompt's KV.
    SourceHeld,
    /// The decode worker reserved KV for the prompt.
    DestinationReserved,
    /// The KV transfer completed; the request waits on the decode worker.
    DestinationActivated,
    /// The prefill worker freed the prompt's KV.
    SourceReleased,
}

impl RequestState {
    fn admit(&mut self, at_ms: f64, reused_tokens: usize) {
        if self.first_admit_ms.is_none() {
            self.first_admit_ms = Some(at_ms);
            self.first_admission_reused_tokens = reused_tokens;
        }
        self.reused_tokens = self.reused_tokens.max(reused_tokens);
    }

    fn is_completed(&self) -> bool {
        self.first_admit_ms.is_some()
            && matches!(self.terminal, Some((_, TerminalStatus::Completed)))
    }

    fn ttft_ms(&self) -> Option<f64> {
        (self.tokens.count > 0).then(|| (self.first_token_ms - self.arrival_ms).max(0.0))
    }

    fn e2e_ms(&self) -> Option<f64> {
        (self.tokens.count > 0).then(|| (self.tokens.last_ms - self.arrival_ms).max(0.0))
    }

    fn ttst_ms(&self) -> Option<f64> {
        (self.tokens.count >= 2).then(|| (self.second_token_ms - self.first_token_ms).max(0.0))
    }

    /// Mean time per output token after the first.
    fn tpot_ms(&self) -> Option<f64> {
        let gaps = self.tokens.count.checked_sub(1).filter(|g| *g > 0)?;
        Some((self.tokens.last_ms - self.first_token_ms).max(0.0) / gaps as f64)
    }
}

/// What the collector knows of one request id, as an entry of its window: the index of the
/// request's state in the dense table while it is in flight; that index with [`ENDED`] set
/// once it ended while its state is kept for its record; [`ABSENT`] before it arrives and
/// [`GONE`] once nothing of it is kept.
type Slot = u32;
const ABSENT: Slot = u32::MAX;
const GONE: Slot = u32::MAX - 1;
const ENDED: Slot = 1 << 31;

/// A slot's state index, if the request is in flight.
#[inline]
fn live_index(slot: Slot) -> Option<usize> {
    (slot < ENDED).then_some(slot as usize)
}

/// A slot's state index, if the request arrived and its state is kept (in flight or ended).
#[inline]
fn kept_index(slot: Slot) -> Option<usize> {
    (slot < GONE).then_some((slot & !ENDED) as usize)
}

/// Sums over completed requests, folded in as each completes.
#[derive(Debug, Default)]
struct Totals {
    completed: usize,
    input_tokens: usize,
    output_tokens: usize,
    reused_tokens: usize,
    first_admission_reused_tokens: usize,
    good_requests: usize,
    good_output_tokens: usize,
}

/// The caller's record sink (a box, so that `Collector` stays `Debug`).
struct Sink(Box<dyn RecordSink>);

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordSink")
    }
}

#[derive(Debug)]
pub struct Collector {
    sla: Sla,
    capture_records: bool,
    /// Request `base + i` is `window[i]`; ended requests leave from the front.
    window: VecDeque<Slot>,
    base: RequestId,
    /// The states of requests in flight (and of ended ones kept for their record), reused:
    /// a freed state's index goes to `free_states` for the next arrival.
    states: Vec<RequestState>,
    free_states: Vec<u32>,
    arrivals: usize,
    totals: Totals,
    /// Requests that ended, and how many of them without completing, by status.
    ends: accounting::Ends,
    ttft: ExactValues,
    ttst: ExactValues,
    tpot: ExactValues,
    e2e: ExactValues,
    /// Records captured: (arrival key, id) of requests in flight, and of ended requests whose
    /// record is not given out yet.
    live_order: BTreeSet<(u64, RequestId)>,
    ended_order: BTreeSet<(u64, RequestId)>,
    sink: Option<Sink>,
    /// A disaggregated run: records wait for the end of the run (see the module doc).
    hold_records: bool,
    /// Pooled token gaps of completed requests.
    itl: StreamingDistribution,
    /// `1000 / gap` for every positive pooled gap.
    output_token_throughput_per_user: StreamingDistribution,
    /// Latest terminal time among completed requests.
    duration_ms: f64,
    /// Recorded only when the caller asked for the time series (the HTML report).
    timeseries: Option<Box<TimeSeries>>,
    /// Recent positive gaps with their buckets and throughputs (see [`GapMemo`]).
    gap_memo: GapMemo,
    /// Emptied gap buffers of ended requests, reused by later requests at their first token
    /// (growing a fresh one token by token was a good part of the run's allocations), and
    /// the bytes they hold.
    spare_gap_buffers: Vec<Vec<u64>>,
    spare_gap_buffer_bytes: usize,
    /// Who watches requests as they progress (a server streaming their tokens), if anyone.
    observer: Option<Observer>,
}

/// Watches requests as the collector hears of them, on the simulating thread: a server
/// answering clients at simulated times (`dynosim-serve`) learns here when each request was
/// admitted, emitted tokens and ended. Calls come for requests in flight only, in the run's
/// order; an observer must be quick (it runs inside the event loop).
pub trait RequestObserver: Send {
    /// Request `id` was admitted at `at_ms`, `reused_tokens` of its prompt found in the prefix
    /// cache (again after a preemption).
    fn on_admit(&mut self, id: RequestId, at_ms: f64, reused_tokens: usize);
    /// Request `id` emitted `count` tokens at `at_ms`.
    fn on_tokens(&mut self, id: RequestId, at_ms: f64, count: usize);
    /// Request `id` ended at `at_ms` with `status`.
    fn on_terminal(&mut self, id: RequestId, at_ms: f64, status: TerminalStatus);
}

struct Observer(Box<dyn RequestObserver>);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// TTFT and TTST values from which the report's finish uses a second thread (see
/// `Collector::report`): a couple of milliseconds of sorting and merging by then, against tens
/// of microseconds to start a thread.
const PARALLEL_FINISH_VALUES: usize = 16_384;
/// Spare gap buffers hold at most this many bytes together, and one of more than
/// [`SPARE_GAP_BUFFER_CAPACITY`] entries is not kept. Only requests emitting tokens hold a
/// buffer, so the spares needed are about the decoding batch's.
const SPARE_GAP_BUFFER_BYTES: usize = 4 << 20;
const SPARE_GAP_BUFFER_CAPACITY: usize = 4096;
const GAP_ENTRY_BYTES: usize = std::mem::size_of::<u64>();

/// The key that sorts records: arrival time (in `f64::total_cmp` order), then id.
fn record_key(arrival_ms: f64, id: RequestId) -> (u64, RequestId) {
    let bits = arrival_ms.to_bits();
    let key = if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    };
    (key, id)
}

impl Collector {
    pub fn new(sla: Sla, capture_records: bool) -> Self {
        Collector {
            sla,
            capture_records,
            window: VecDeque::new(),
            base: 0,
            states: Vec::new(),
            free_states: Vec::new(),
            arrivals: 0,
            totals: Totals::default(),
            ends: accounting::Ends::default(),
            ttft: ExactValues::new(),
            ttst: ExactValues::new(),
            tpot: ExactValues::new(),
            e2e: ExactValues::new(),
            live_order: BTreeSet::new(),
            ended_order: BTreeSet::new(),
            sink: None,
            hold_records: false,
            itl: StreamingDistribution::new(),
            output_token_throughput_per_user: StreamingDistribution::new(),
            duration_ms: 0.0,
            timeseries: None,
            gap_memo: GapMemo::new(),
            spare_gap_buffers: Vec::new(),
            spare_gap_buffer_bytes: 0,
            observer: None,
        }
    }

    /// Tells `observer` of every request's admissions, tokens and end as they are collected.
    pub fn observe_with(&mut self, observer: Box<dyn RequestObserver>) {
        self.observer = Some(Observer(observer));
    }

    /// Gives captured records to `sink` as soon as their place in the record order is
    /// settled, instead of keeping them to the end of the run. Records come in the order of
    /// [`LazyRecords::iter`]: arrival time, then request id.
    pub fn stream_records_to(&mut self, sink: Box<dyn RecordSink>) {
        self.sink = Some(Sink(sink));
    }

    /// Starts recording `series` (the collector feeds it completions; the simulator, pass
    /// ends through [`Collector::timeseries_mut`]).
    pub fn record_timeseries(&mut self, series: TimeSeries) {
        self.timeseries = Some(Box::new(series));
    }

    /// The time series being recorded, if any.
    pub fn timeseries_mut(&mut self) -> Option<&mut TimeSeries> {
        self.timeseries.as_deref_mut()
    }

    /// Takes the recorded time series out (before [`Collector::finish`]).
    pub fn take_timeseries(&mut self) -> Option<TimeSeries> {
        self.timeseries.take().map(|series| *series)
    }

    /// A request arrived (was released to the router) at `at_ms`.
    pub fn on_arrival(
        &mut self,
        id: RequestId,
        at_ms: f64,
        input_length: usize,
        requested_output_length: usize,
        session: Option<(&dyn std::fmt::Display, usize)>,
    ) {
        if id < self.base {
            return;
        }
        let offset = id - self.base;
        if offset >= self.window.len() {
            self.window.resize(offset + 1, ABSENT);
        }
        if self.window[offset] != ABSENT {
            return;
        }
        let index = match self.free_states.pop() {
            Some(index) => index,
            None => {
                let index = u32::try_from(self.states.len())
                    .ok()
                    .filter(|index| *index < ENDED)
                    .expect("fewer than 2^31 requests in flight");
                self.states.push(RequestState::default());
                index
            }
        };
        self.window[offset] = index;
        let state = &mut self.states[index as usize];
        state.arrival_ms = at_ms;
        state.input_length = input_length;
        state.requested_output_length = requested_output_length;
        if self.capture_records {
            state.session = session.map(|(name, turn)| Box::new((name.to_string(), turn)));
            self.live_order.insert(record_key(at_ms, id));
        }
        self.arrivals += 1;
    }

    /// Admitted on scheduler `worker_idx` (worker * dp + rank), reusing `reused_tokens`.
    pub fn on_admit(&mut self, id: RequestId, at_ms: f64, reused_tokens: usize, worker_idx: usize) {
        let Some(state) = self.live_request(id) else {
            return;
        };
        state.admit(at_ms, reused_tokens);
        state.decode_worker_idx.get_or_insert(worker_idx);
        if let Some(Observer(observer)) = &mut self.observer {
            observer.on_admit(id, at_ms, reused_tokens);
        }
    }

    /// Disaggregated: admitted on a prefill worker, reusing `reused_tokens` of its cache.
    pub fn on_prefill_admit(&mut self, id: RequestId, at_ms: f64, reused_tokens: usize) {
        let Some(state) = self.arrived_request(id) else {
            return;
        };
        state.admit(at_ms, reused_tokens);
        if let Some(detail) = state.handoff.as_deref_mut() {
            detail.prefill_admit_ms.get_or_insert(at_ms);
            detail.prefill_reused_input_tokens =
                detail.prefill_reused_input_tokens.max(reused_tokens);
        }
    }

    /// Disaggregated: admitted on its decode worker.
    pub fn on_decode_admit(&mut self, id: RequestId, at_ms: f64, reused_tokens: usize) {
        let Some(state) = self.arrived_request(id) else {
            return;
        };
        state.admit(at_ms, reused_tokens);
        if let Some(detail) = state.handoff.as_deref_mut() {
            detail.decode_admit_ms.get_or_insert(at_ms);
            let reused = detail.decode_reused_input_tokens.unwrap_or(0);
            detail.decode_reused_input_tokens = Some(reused.max(reused_tokens));
        }
    }

    /// Disaggregated: sent to prefill worker `worker_idx`, which had `overlap_tokens` of the
    /// prompt cached as far as the router knew.
    pub fn on_prefill_assigned(&mut self, id: RequestId, worker_idx: usize, overlap_tokens: usize) {
        if let Some(detail) = self.handoff_detail(id) {
            detail.prefill_worker_idx.get_or_insert(worker_idx);
            detail
                .prefill_route_overlap_tokens
                .get_or_insert(overlap_tokens);
        }
    }

    /// Disaggregated: its decode worker accepted the handoff.
    pub fn on_decode_assigned(&mut self, id: RequestId, worker_idx: usize, overlap_tokens: usize) {
        if let Some(state) = self.arrived_request(id) {
            state.decode_worker_idx.get_or_insert(worker_idx);
        }
        if let Some(detail) = self.handoff_detail(id) {
            detail
                .decode_route_overlap_tokens
                .get_or_insert(overlap_tokens);
        }
    }

    /// Disaggregated: the handoff reached `stage` at `at_ms`.
    pub fn on_handoff(&mut self, id: RequestId, stage: HandoffStage, at_ms: f64) {
        let Some(detail) = self.handoff_detail(id) else {
            return;
        };
        let field = match stage {
            HandoffStage::SourceHeld => &mut detail.source_held_ms,
            HandoffStage::DestinationReserved => &mut detail.destination_reserved_ms,
            HandoffStage::DestinationActivated => &mut detail.destination_activated_ms,
            HandoffStage::SourceReleased => &mut detail.source_released_ms,
        };
        field.get_or_insert(at_ms);
    }

    /// The lifecycle detail of a request of a disaggregated run, when records are captured
    /// (also after it ended: the handoff may finish after the decode worker did).
    fn handoff_detail(&mut self, id: RequestId) -> Option<&mut HandoffDetail> {
        if !self.capture_records {
            return None;
        }
        self.hold_records = true;
        let state = self.arrived_request(id)?;
        Some(state.handoff.get_or_insert_with(Box::default))
    }

    /// `count` tokens emitted at `at_ms`.
    #[inline]
    pub fn on_tokens(&mut self, id: RequestId, at_ms: f64, count: usize) {
        let Some(index) = self.live_index(id) else {
            return;
        };
        if count == 0 {
            return;
        }
        self.tokens_of_state(index, at_ms, count);
        if let Some(Observer(observer)) = &mut self.observer {
            observer.on_tokens(id, at_ms, count);
        }
    }

    /// One token for each request of `ids`, in that order, all emitted at `at_ms`: what
    /// `on_tokens(id, at_ms, 1)` for each would do.
    pub fn on_one_token_each(&mut self, at_ms: f64, ids: &[u32]) {
        for &id in ids {
            self.on_one_token(id as RequestId, at_ms);
        }
    }

    /// One token of request `id` at `at_ms`: what `on_tokens(id, at_ms, 1)` does, for callers
    /// that walk a pass's tokens themselves (the count known, the call inlined into the walk).
    #[inline(always)]
    pub fn on_one_token(&mut self, id: RequestId, at_ms: f64) {
        if let Some(index) = self.live_index(id) {
            self.tokens_of_state(index, at_ms, 1);
            if let Some(Observer(observer)) = &mut self.observer {
                observer.on_tokens(id, at_ms, 1);
            }
        }
    }

    /// `count` (at least one) tokens at `at_ms` for the live request whose state is `index`.
    #[inline(always)]
    fn tokens_of_state(&mut self, index: usize, at_ms: f64, count: usize) {
        let state = &mut self.states[index];
        let tokens = &mut state.tokens;
        let mut zeros = count - 1;
        match tokens.count {
            0 => {
                state.first_token_ms = at_ms;
                if count >= 2 {
                    state.second_token_ms = at_ms;
                }
                if let Some(spare) = self.spare_gap_buffers.pop() {
                    self.spare_gap_buffer_bytes -= spare.capacity() * GAP_ENTRY_BYTES;
                    state.gaps.entries = spare;
                }
            }
            previous => {
                if previous == 1 {
                    state.second_token_ms = at_ms;
                }
                // Tokens stamped at the time of the one before follow it with no gap.
                if tokens.last_ms == at_ms {
                    zeros += 1;
                } else {
                    state.gaps.push((at_ms - tokens.last_ms).max(0.0), 1);
                }
            }
        }
        if zeros > 0 {
            state.gaps.push(0.0, zeros as u64);
        }
        tokens.last_ms = at_ms;
        tokens.count += count;
    }

    pub fn on_completed(&mut self, id: RequestId, at_ms: f64) {
        self.on_terminal(id, at_ms, TerminalStatus::Completed);
    }

    pub fn on_rejected(&mut self, id: RequestId, at_ms: f64) {
        self.on_terminal(id, at_ms, TerminalStatus::Rejected);
    }

    /// The request ended with `status` at `at_ms`; later events for it are ignored.
    pub fn on_terminal(&mut self, id: RequestId, at_ms: f64, status: TerminalStatus) {
        let Some(offset) = id.checked_sub(self.base) else {
            return;
        };
        let Some(index) = self.window.get(offset).copied().and_then(live_index) else {
            // Not arrived, or already ended.
            return;
        };
        if let Some(Observer(observer)) = &mut self.observer {
            observer.on_terminal(id, at_ms, status);
        }
        let mut state = std::mem::take(&mut self.states[index]);
        state.terminal = Some((at_ms, status));
        self.ends.count(status);
        let mut gaps = std::mem::take(&mut state.gaps).into_entries();
        if state.is_completed() {
            let completed = CompletedRequest {
                ttft_ms: state.ttft_ms(),
                e2e_ms: state.e2e_ms(),
                prompt_tokens: state.input_length,
                reused_prompt_tokens: state.reused_tokens,
            };
            self.duration_ms = self.duration_ms.max(at_ms);
            let runs = GapRuns(&gaps);
            fold_token_gaps(
                runs,
                &mut self.gap_memo,
                &mut self.itl,
                &mut self.output_token_throughput_per_user,
            );
            if let Some(series) = self.timeseries.as_deref_mut() {
                series.on_completed(at_ms, &completed, runs.iter());
            }
            self.fold_completed(&state);
        }
        let spare_bytes = gaps.capacity() * GAP_ENTRY_BYTES;
        if spare_bytes > 0
            && gaps.capacity() <= SPARE_GAP_BUFFER_CAPACITY
            && self.spare_gap_buffer_bytes + spare_bytes <= SPARE_GAP_BUFFER_BYTES
        {
            gaps.clear();
            self.spare_gap_buffers.push(gaps);
            self.spare_gap_buffer_bytes += spare_bytes;
        }
        if self.capture_records {
            let key = record_key(state.arrival_ms, id);
            self.live_order.remove(&key);
            self.ended_order.insert(key);
            self.states[index] = state;
            self.window[offset] = index as Slot | ENDED;
        } else {
            self.free_state(offset, index);
        }
        self.give_out_settled_records();
        while self.window.front() == Some(&GONE) {
            self.window.pop_front();
            self.base += 1;
        }
    }

    /// Frees the state at `index` of the request at window `offset`: nothing of it is kept.
    fn free_state(&mut self, offset: usize, index: usize) {
        self.window[offset] = GONE;
        self.free_states.push(index as u32);
    }

    /// Adds a completed request to the totals and the exact distributions.
    fn fold_completed(&mut self, state: &RequestState) {
        let totals = &mut self.totals;
        totals.completed += 1;
        totals.input_tokens += state.input_length;
        totals.output_tokens += state.tokens.count;
        totals.reused_tokens += state.reused_tokens;
        totals.first_admission_reused_tokens += state.first_admission_reused_tokens;
        let sla = &self.sla;
        let (Some(ttft), Some(e2e)) = (state.ttft_ms(), state.e2e_ms()) else {
            // No tokens: only an e2e-only SLA can call it good, with e2e up to the end.
            let terminal_ms = state.terminal.map_or(state.arrival_ms, |(t, _)| t);
            let e2e = (terminal_ms - state.arrival_ms).max(0.0);
            if is_good_without_tokens(sla, e2e) {
                totals.good_requests += 1;
            }
            return;
        };
        self.ttft.add(ttft);
        self.e2e.add(e2e);
        if sla.is_set() && is_good(sla, ttft, e2e, state.tokens.count) {
            totals.good_requests += 1;
            totals.good_output_tokens += state.tokens.count;
        }
        if let Some(ttst) = state.ttst_ms() {
            self.ttst.add(ttst);
        }
        if let Some(tpot) = state.tpot_ms() {
            self.tpot.add(tpot);
        }
    }

    /// Gives the sink every ended request's record that no request still in flight (nor any
    /// to come: arrivals are released in time order) can sort before.
    fn give_out_settled_records(&mut self) {
        if self.sink.is_none() || self.hold_records {
            return;
        }
        while let Some(&first) = self.ended_order.first() {
            if self.live_order.first().is_some_and(|live| *live < first) {
                return;
            }
            self.ended_order.pop_first();
            self.give_out(first.1);
        }
    }

    /// Builds the record of ended request `id`, drops its state and hands the record over.
    fn give_out(&mut self, id: RequestId) {
        let Some(state) = self.take_ended(id) else {
            return;
        };
        if let (Some(record), Some(sink)) = (record_of(id, &state), self.sink.as_mut()) {
            sink.0.accept(record);
        }
    }

    /// The state of ended request `id`, if kept; the collector keeps nothing of it after.
    fn take_ended(&mut self, id: RequestId) -> Option<RequestState> {
        let offset = id.checked_sub(self.base)?;
        let slot = *self.window.get(offset)?;
        if !(ENDED..GONE).contains(&slot) {
            return None;
        }
        let index = (slot & !ENDED) as usize;
        let state = std::mem::take(&mut self.states[index]);
        self.free_state(offset, index);
        Some(state)
    }

    /// Arrivals seen so far.
    pub fn num_requests(&self) -> usize {
        self.arrivals
    }

    /// The report's `duration_s` so far: the latest completion in seconds, floored at 1e-9.
    /// The single-worker topology reports `1 × duration_s` decode worker seconds.
    pub fn duration_s(&self) -> f64 {
        (self.duration_ms / 1000.0).max(1e-9)
    }

    /// A request the collector saw arrive, terminal or not (terminal ones only while their
    /// state is kept for their record).
    fn arrived_request(&mut self, id: RequestId) -> Option<&mut RequestState> {
        let index = kept_index(*self.window.get(id.checked_sub(self.base)?)?)?;
        Some(&mut self.states[index])
    }

    /// The state index of a request that arrived and has not ended.
    #[inline]
    fn live_index(&self, id: RequestId) -> Option<usize> {
        live_index(*self.window.get(id.checked_sub(self.base)?)?)
    }

    /// A request that arrived and has not ended.
    fn live_request(&mut self, id: RequestId) -> Option<&mut RequestState> {
        let index = self.live_index(id)?;
        Some(&mut self.states[index])
    }

    /// The report, and the records not given to a sink yet (empty unless captured), to be
    /// built as they are read. With a sink, every remaining record goes to it first, in
    /// order, and the returned records are empty.
    pub fn finish_lazily(mut self, facts: RunFacts) -> (Report, LazyRecords) {
        let ended = std::mem::take(&mut self.ended_order);
        let mut states = Vec::with_capacity(if self.sink.is_some() { 0 } else { ended.len() });
        for (_, id) in ended {
            if self.sink.is_some() {
                self.give_out(id);
            } else if let Some(state) = self.take_ended(id) {
                states.push((id, state));
            }
        }
        let report = self.report(facts);
        (report, LazyRecords { states })
    }

    pub fn finish(self, facts: RunFacts) -> (Report, Vec<RequestRecord>) {
        let (report, records) = self.finish_lazily(facts);
        (report, records.iter().collect())
    }

    /// Bins the gap samples the memo holds back (before the gap statistics are read).
    fn bin_gaps(&mut self) {
        self.gap_memo
            .bin_all(&mut self.itl, &mut self.output_token_throughput_per_user);
    }

    fn report(mut self, facts: RunFacts) -> Report {
        self.bin_gaps();
        let sla = self.sla;
        let Totals {
            completed,
            input_tokens,
            output_tokens,
            reused_tokens,
            first_admission_reused_tokens,
            good_requests,
            good_output_tokens,
        } = self.totals;

        let duration_s = self.duration_s();
        let per_s = |count: usize| count as f64 / duration_s;
        let gpu_hours = (facts.prefill_worker_seconds * facts.prefill_gpus_per_worker as f64
            + facts.decode_worker_seconds * facts.decode_gpus_per_worker as f64)
            / 3600.0;
        let processed_tokens = input_tokens + output_tokens;
        let per_wall_s = |count: usize| {
            if facts.wall_time_ms <= 0.0 {
                0.0
            } else {
                count as f64 / facts.wall_time_ms * 1000.0
            }
        };
        let ratio = |reused: usize| {
            if input_tokens == 0 {
                0.0
            } else {
                reused as f64 / input_tokens as f64
            }
        };

        let int = |v: usize| Value::Int(i64::try_from(v).unwrap_or(i64::MAX));
        let int64 = |v: u64| Value::Int(i64::try_from(v).unwrap_or(i64::MAX));
        let leading = [
            int(self.arrivals),
            int(completed),
            int(input_tokens),
            int(output_tokens),
            Value::Float(self.duration_ms),
            Value::Float(facts.wall_time_ms),
            Value::Float(per_s(completed)),
            Value::Float(per_s(input_tokens)),
            Value::Float(per_s(output_tokens)),
            Value::Float(per_s(processed_tokens)),
            Value::Float(facts.prefill_worker_seconds),
            Value::Float(facts.decode_worker_seconds),
            int64(facts.prefill_gpus_per_worker),
            int64(facts.decode_gpus_per_worker),
            Value::Float(gpu_hours),
        ];
        let mut entries: Vec<(&'static str, Value)> =
            LEADING_KEYS.into_iter().zip(leading).collect();
        if sla.is_set() {
            let goodput = [
                int(good_requests),
                Value::Float(per_s(good_requests)),
                Value::Float(per_s(good_output_tokens)),
            ];
            entries.extend(GOODPUT_KEYS.into_iter().zip(goodput));
        }
        let speed_and_reuse = [
            int(processed_tokens),
            Value::Float(per_wall_s(processed_tokens)),
            Value::Float(per_wall_s(output_tokens)),
            Value::Float(ratio(reused_tokens)),
            Value::Float(ratio(first_admission_reused_tokens)),
        ];
        entries.extend(SPEED_AND_REUSE_KEYS.into_iter().zip(speed_and_reuse));

        let (ttft, ttst) = (self.ttft, self.ttst);
        let finish_rest = || {
            (
                self.tpot.finish(),
                self.itl.finish(),
                self.e2e.finish(),
                self.output_token_throughput_per_user.finish(),
            )
        };
        // The exact distributions' finish sorts its values and reads them twice: from
        // `PARALLEL_FINISH_VALUES` on, TTFT and TTST finish on a second core (each figure is
        // a function of its own values, whichever thread computes it).
        let ((ttft, ttst), (tpot, itl, e2e, per_user)) =
            if ttft.len() + ttst.len() >= PARALLEL_FINISH_VALUES {
                std::thread::scope(|scope| {
                    let firsts = scope.spawn(|| (ttft.finish(), ttst.finish()));
                    let rest = finish_rest();
                    (
                        firsts
                            .join()
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                        rest,
                    )
                })
            } else {
                ((ttft.finish(), ttst.finish()), finish_rest())
            };
        let distributions: [DistributionStats; 6] = [ttft, ttst, tpot, itl, e2e, per_user];
        for (keys, stats) in DISTRIBUTION_KEYS.iter().zip(distributions) {
            entries.extend(
                keys.iter()
                    .copied()
                    .zip(stats.in_key_order().map(Value::Float)),
            );
        }
        entries.extend(accounting::entries(
            self.arrivals,
            completed,
            &self.ends,
            facts.workload_requests,
            facts.interrupted,
        ));
        Report { entries }
    }
}

/// The record of request `index`, if it ended.
fn record_of(index: RequestId, state: &RequestState) -> Option<RequestRecord> {
    let (terminal_ms, status) = state.terminal?;
    let has_tokens = state.tokens.count > 0;
    let handoff = state.handoff.as_deref().copied();
    // In disaggregated records the reuse is the prefill pool's (frontend.md §3.8).
    let reused_input_tokens =
        handoff.map_or(state.reused_tokens, |h| h.prefill_reused_input_tokens);
    let handoff = handoff.unwrap_or_default();
    Some(RequestRecord {
        session_id: state.session.as_ref().map(|s| s.0.clone()),
        turn_index: state.session.as_ref().map(|s| s.1),
        uuid: RequestRecord::uuid_for_index(index),
        arrival_time_ms: state.arrival_ms,
        first_admit_ms: state.first_admit_ms,
        terminal_time_ms: terminal_ms,
        first_token_ms: has_tokens.then_some(state.first_token_ms),
        last_token_ms: has_tokens.then_some(state.tokens.last_ms),
        ttft_ms: state.ttft_ms(),
        ttst_ms: state.ttst_ms(),
        e2e_latency_ms: state.e2e_ms(),
        itl_ms: state.tpot_ms(),
        input_length: state.input_length,
        requested_output_length: state.requested_output_length,
        output_length: state.tokens.count,
        reused_input_tokens,
        prefill_worker_idx: handoff.prefill_worker_idx,
        decode_worker_idx: state.decode_worker_idx,
        prefill_admit_ms: handoff.prefill_admit_ms,
        source_held_ms: handoff.source_held_ms,
        destination_reserved_ms: handoff.destination_reserved_ms,
        destination_activated_ms: handoff.destination_activated_ms,
        decode_admit_ms: handoff.decode_admit_ms,
        source_released_ms: handoff.source_released_ms,
        decode_reused_input_tokens: handoff.decode_reused_input_tokens,
        prefill_route_overlap_tokens: handoff.prefill_route_overlap_tokens,
        decode_route_overlap_tokens: handoff.decode_route_overlap_tokens,
        terminal_status: status,
    })
}

/// The per-request records of a finished run not given to a sink, built one at a time as they
/// are read, so that writing them needs no second copy of every request
/// (`Collector::finish_lazily`).
#[derive(Debug)]
pub struct LazyRecords {
    /// Ended requests by arrival time then id.
    states: Vec<(RequestId, RequestState)>,
}

impl LazyRecords {
    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The records by arrival time then request id, each built when reached.
    pub fn iter(&self) -> impl Iterator<Item = RequestRecord> + '_ {
        self.states
            .iter()
            .filter_map(|(index, state)| record_of(*index, state))
    }
}

/// A request's token gaps, in order, run-length encoded in 8-byte entries: the bits of a gap
/// (finite, not negative), then, if the gap repeats, an entry [`GapRuns::REPEAT`]` | n` for its
/// `n` further samples (a NaN bit pattern, which no gap has; more such entries add up).
/// Equal consecutive gaps are common: a request's decode passes often take the same time,
/// and tokens stamped at one time are zero gaps.
#[derive(Clone, Copy)]
struct GapRuns<'a>(&'a [u64]);

impl<'a> GapRuns<'a> {
    /// Sign, exponent and the quiet bit set: a NaN, never a gap's bits.
    const REPEAT: u64 = 0xFFF8 << 48;
    /// The most repeats one entry holds.
    const MAX_REPEATS: u64 = (1 << 51) - 1;

    fn is_repeat(entry: u64) -> bool {
        entry & Self::REPEAT == Self::REPEAT
    }

    /// (gap, samples) of each run of equal gaps, in order.
    fn iter(self) -> impl Iterator<Item = (f64, u64)> + 'a {
        let entries = self.0;
        let mut at = 0;
        std::iter::from_fn(move || {
            let gap = f64::from_bits(*entries.get(at)?);
            at += 1;
            let mut samples = 1;
            while let Some(&entry) = entries.get(at).filter(|e| Self::is_repeat(**e)) {
                samples += entry & Self::MAX_REPEATS;
                at += 1;
            }
            Some((gap, samples))
        })
    }
}

/// A request's gaps being written: [`GapRuns`] entries, and the run of the latest gap still
/// open (its bits and its repeats not yet written), so that a repeated gap touches only the
/// request's state and not the end of its buffer.
#[derive(Debug, Default)]
struct GapBuffer {
    entries: Vec<u64>,
    /// The latest gap's bits (meaningless while `entries` is empty), and its samples beyond
    /// the entry holding them.
    last_bits: u64,
    repeats: u64,
}

impl GapBuffer {
    /// Appends `samples` (at least one) of `gap`.
    #[inline(always)]
    fn push(&mut self, gap: f64, samples: u64) {
        let bits = gap.to_bits();
        if self.last_bits == bits && !self.entries.is_empty() {
            self.repeats += samples;
            return;
        }
        self.close_run();
        self.entries.push(bits);
        self.last_bits = bits;
        self.repeats = samples - 1;
    }

    /// Writes the open run's repeats.
    fn close_run(&mut self) {
        while self.repeats > 0 {
            let entry = self.repeats.min(GapRuns::MAX_REPEATS);
            self.entries.push(GapRuns::REPEAT | entry);
            self.repeats -= entry;
        }
    }

    /// Every gap pushed, as [`GapRuns`] entries.
    fn into_entries(mut self) -> Vec<u64> {
        self.close_run();
        self.entries
    }
}

/// A finite positive gap with its bucket in the ITL sketch, its throughput sample
/// `1000 / gap` and that one's bucket in the throughput sketch, and its samples not yet
/// binned.
#[derive(Clone, Copy, Debug)]
struct GapSlot {
    gap_bits: u64,
    throughput: f64,
    gap_bucket: SketchBucket,
    throughput_bucket: SketchBucket,
    unbinned: u64,
}

/// The sketch side of the gap statistics, for the gaps of completed requests: a direct-mapped
/// memo of recent gaps ([`GapSlot`]), whose samples are binned into the two sketches (and
/// their extremes) when the slot is taken by another gap or at the end. Bucket counts and
/// extremes do not depend on the order samples come in, so binning them late and together
/// gives the very sketches binning each sample at once gives; the Welford moments, which do
/// depend on it, are updated at once, in order. Every request of a pass sees the same gap,
/// so a division and two logarithms become one lookup, and a run of equal gaps one count.
#[derive(Debug)]
struct GapMemo {
    slots: Box<[GapSlot]>,
    /// Zero gaps not yet binned.
    unbinned_zeros: u64,
}

/// 4096 slots (160 KiB): gaps are folded when a request completes, long after the passes
/// that made them, so the memo must span many passes' gaps.
const GAP_MEMO_BITS: u32 = 12;

impl GapMemo {
    fn new() -> Self {
        // Bit pattern 0 is the gap 0.0, which is never looked up.
        let empty = GapSlot {
            gap_bits: 0,
            throughput: 0.0,
            gap_bucket: SketchBucket::Zero,
            throughput_bucket: SketchBucket::Zero,
            unbinned: 0,
        };
        Self {
            slots: vec![empty; 1 << GAP_MEMO_BITS].into_boxed_slice(),
            unbinned_zeros: 0,
        }
    }

    /// Counts `samples` of finite positive `gap` for the sketches; returns its throughput.
    #[inline(always)]
    fn count(
        &mut self,
        gap: f64,
        samples: u64,
        itl: &mut StreamingDistribution,
        throughput: &mut StreamingDistribution,
    ) -> f64 {
        let bits = gap.to_bits();
        let index = (bits.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - GAP_MEMO_BITS)) as usize;
        let slot = &mut self.slots[index];
        if slot.gap_bits != bits {
            Self::take_slot(slot, gap, itl, throughput);
        }
        slot.unbinned += samples;
        slot.throughput
    }

    /// Bins the samples of the gap in `slot` and gives the slot to `gap`.
    #[cold]
    #[inline(never)]
    fn take_slot(
        slot: &mut GapSlot,
        gap: f64,
        itl: &mut StreamingDistribution,
        throughput: &mut StreamingDistribution,
    ) {
        Self::bin(slot, itl, throughput);
        let per_user = 1000.0 / gap;
        *slot = GapSlot {
            gap_bits: gap.to_bits(),
            throughput: per_user,
            gap_bucket: itl.bucket_of(gap),
            throughput_bucket: throughput.bucket_of(per_user),
            unbinned: 0,
        };
    }

    fn bin(
        slot: &mut GapSlot,
        itl: &mut StreamingDistribution,
        throughput: &mut StreamingDistribution,
    ) {
        if slot.unbinned == 0 {
            return;
        }
        let gap = f64::from_bits(slot.gap_bits);
        itl.add_to_bucket(gap, slot.gap_bucket, slot.unbinned);
        if slot.throughput.is_finite() {
            throughput.add_to_bucket(slot.throughput, slot.throughput_bucket, slot.unbinned);
        }
        slot.unbinned = 0;
    }

    /// Bins every sample counted so far.
    fn bin_all(&mut self, itl: &mut StreamingDistribution, throughput: &mut StreamingDistribution) {
        for slot in self.slots.iter_mut() {
            Self::bin(slot, itl, throughput);
        }
        if self.unbinned_zeros > 0 {
            itl.add_to_bucket(0.0, SketchBucket::Zero, self.unbinned_zeros);
            self.unbinned_zeros = 0;
        }
    }
}

/// Feeds every consecutive token gap of one request into the pooled statistics.
///
/// Each statistic sees exactly the samples, in the order, of one `add` per gap (ITL: every
/// gap, zeros included; OTPU: `1000 / gap` of each positive gap): the Welford chains take
/// them one at a time (in registers), the sketches through the memo (binned later, see
/// [`GapMemo`]).
fn fold_token_gaps(
    runs: GapRuns<'_>,
    memo: &mut GapMemo,
    itl: &mut StreamingDistribution,
    output_token_throughput_per_user: &mut StreamingDistribution,
) {
    let mut itl_moments = itl.moments();
    let mut throughput_moments = output_token_throughput_per_user.moments();
    for (gap, samples) in runs.iter() {
        if gap == 0.0 {
            // No throughput sample.
            itl_moments.add_repeated(0.0, samples);
            memo.unbinned_zeros += samples;
            continue;
        }
        if !gap.is_finite() {
            // Not a gap a run makes (times are finite); only its throughput counts.
            let per_user = 1000.0 / gap;
            if per_user.is_finite() {
                throughput_moments.add_repeated(per_user, samples);
                let bucket = output_token_throughput_per_user.bucket_of(per_user);
                output_token_throughput_per_user.add_to_bucket(per_user, bucket, samples);
            }
            continue;
        }
        let per_user = memo.count(gap, samples, itl, output_token_throughput_per_user);
        if per_user.is_finite() {
            itl_moments.add_repeated_beside(gap, &mut throughput_moments, per_user, samples);
        } else {
            itl_moments.add_repeated(gap, samples);
        }
    }
    itl.set_moments(itl_moments);
    output_token_throughput_per_user.set_moments(throughput_moments);
}

/// Goodput rule for a completed request with tokens: every set bound must hold (inclusive);
/// the ITL bound applies to `(e2e − ttft)/(n − 1)` and only when `n > 1`.
fn is_good(sla: &Sla, ttft_ms: f64, e2e_ms: f64, output_length: usize) -> bool {
    if sla.e2e_ms.is_some_and(|bound| e2e_ms > bound) {
        return false;
    }
    if sla.ttft_ms.is_some_and(|bound| ttft_ms > bound) {
        return false;
    }
    if let Some(bound) = sla.itl_ms {
        if output_length > 1 {
            let mean_itl_ms = (e2e_ms - ttft_ms) / (output_length as f64 - 1.0);
            if mean_itl_ms > bound {
                return false;
            }
        }
    }
    true
}

/// Goodput rule for a completed request that emitted no token: only an e2e-only SLA can hold.
fn is_good_without_tokens(sla: &Sla, e2e_ms: f64) -> bool {
    sla.ttft_ms.is_none() && sla.itl_ms.is_none() && sla.e2e_ms.is_some_and(|b| e2e_ms <= b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::key_order;

    fn float(report: &Report, key: &str) -> f64 {
        match report.get(key) {
            Some(Value::Float(v)) => v,
            other => panic!("{key}: {other:?}"),
        }
    }

    fn int(report: &Report, key: &str) -> i64 {
        match report.get(key) {
            Some(Value::Int(v)) => v,
            other => panic!("{key}: {other:?}"),
        }
    }

    /// Arrives at `arrival`, admitted then, one token at each of `times`, completes at the last.
    fn complete(c: &mut Collector, id: usize, arrival: f64, times: &[f64]) {
        c.on_arrival(id, arrival, 100, times.len(), None);
        c.on_admit(id, arrival, 0, 0);
        for &t in times {
            c.on_tokens(id, t, 1);
        }
        c.on_completed(id, times.last().copied().unwrap_or(arrival));
    }

    #[test]
    fn counts_latencies_and_gaps_of_completed_requests_only() {
        let mut c = Collector::new(Sla::default(), true);
        c.on_arrival(0, 0.0, 100, 3, Some((&"s1", 2)));
        c.on_admit(0, 1.0, 10, 3);
        c.on_tokens(0, 10.0, 1);
        c.on_tokens(0, 12.0, 1);
        c.on_tokens(0, 15.0, 1);
        c.on_completed(0, 15.0);
        c.on_arrival(1, 2.0, 50, 4, None);
        c.on_rejected(1, 2.0);
        // In flight at the end: its gap (100 ms) must not reach the ITL statistics.
        c.on_arrival(2, 3.0, 70, 5, None);
        c.on_admit(2, 3.0, 0, 1);
        c.on_tokens(2, 4.0, 1);
        c.on_tokens(2, 104.0, 1);
        let facts = RunFacts {
            decode_worker_seconds: 0.015,
            decode_gpus_per_worker: 1,
            wall_time_ms: 2.0,
            ..RunFacts::default()
        };
        let (report, records) = c.finish(facts);

        // The reference's keys, then (one request rejected, one in flight) the accounting.
        let keys: Vec<&str> = report.entries.iter().map(|e| e.0).collect();
        let mut expected = key_order(false);
        expected.extend(accounting::ACCOUNTING_KEYS);
        assert_eq!(keys, expected);
        assert_eq!(int(&report, "num_requests"), 3);
        assert_eq!(int(&report, "completed_requests"), 1);
        assert_eq!(int(&report, "rejected_requests"), 1);
        assert_eq!(int(&report, "unfinished_requests"), 1);
        assert_eq!(int(&report, "unarrived_requests"), 0);
        assert_eq!(int(&report, "interrupted"), 0);
        assert_eq!(int(&report, "total_input_tokens"), 100);
        assert_eq!(int(&report, "total_output_tokens"), 3);
        assert_eq!(float(&report, "duration_ms"), 15.0);
        assert_eq!(float(&report, "request_throughput_rps"), 1.0 / 0.015);
        assert_eq!(float(&report, "output_throughput_tok_s"), 3.0 / 0.015);
        assert_eq!(float(&report, "total_throughput_tok_s"), 103.0 / 0.015);
        assert_eq!(int(&report, "processed_tokens"), 103);
        assert_eq!(
            float(&report, "processed_tokens_per_s"),
            103.0 / 2.0 * 1000.0
        );
        assert_eq!(float(&report, "processed_output_tokens_per_s"), 1500.0);
        assert_eq!(float(&report, "gpu_hours"), 0.015 / 3600.0);
        assert_eq!(float(&report, "prefix_cache_reused_ratio"), 0.1);
        assert_eq!(float(&report, "mean_ttft_ms"), 10.0);
        assert_eq!(float(&report, "mean_ttst_ms"), 2.0);
        assert_eq!(float(&report, "mean_tpot_ms"), 2.5);
        assert_eq!(float(&report, "mean_e2e_latency_ms"), 15.0);
        assert_eq!(float(&report, "std_e2e_latency_ms"), 0.0);
        // ITL pools the gaps 2 and 3; OTPU pools 1000/2 and 1000/3.
        assert_eq!(float(&report, "mean_itl_ms"), 2.5);
        assert_eq!(float(&report, "min_itl_ms"), 2.0);
        assert_eq!(float(&report, "max_itl_ms"), 3.0);
        assert_eq!(float(&report, "std_itl_ms"), 0.5);
        assert_eq!(
            float(&report, "min_output_token_throughput_per_user"),
            1000.0 / 3.0
        );
        assert_eq!(
            float(&report, "max_output_token_throughput_per_user"),
            500.0
        );

        assert_eq!(records.len(), 2, "the in-flight request has no record");
        assert_eq!(
            records[0].to_json_line(),
            concat!(
                r#"{"session_id":"s1","turn_index":2,"uuid":"00000000-0000-4000-8000-000000000000","#,
                r#""arrival_time_ms":0.0,"first_admit_ms":1.0,"terminal_time_ms":15.0,"#,
                r#""first_token_ms":10.0,"last_token_ms":15.0,"ttft_ms":10.0,"ttst_ms":2.0,"#,
                r#""e2e_latency_ms":15.0,"itl_ms":2.5,"input_length":100,"#,
                r#""requested_output_length":3,"output_length":3,"reused_input_tokens":10,"#,
                r#""prefill_worker_idx":null,"decode_worker_idx":3,"prefill_admit_ms":null,"#,
                r#""source_held_ms":null,"destination_reserved_ms":null,"#,
                r#""destination_activated_ms":null,"decode_admit_ms":null,"#,
                r#""source_released_ms":null,"decode_reused_input_tokens":null,"#,
                r#""prefill_route_overlap_tokens":null,"decode_route_overlap_tokens":null,"#,
                r#""terminal_status":"completed"}"#
            )
        );
        assert_eq!(
            records[1].to_json_line(),
            concat!(
                r#"{"session_id":null,"turn_index":null,"uuid":"00000000-0000-4000-8000-000000000001","#,
                r#""arrival_time_ms":2.0,"first_admit_ms":null,"terminal_time_ms":2.0,"#,
                r#""first_token_ms":null,"last_token_ms":null,"ttft_ms":null,"ttst_ms":null,"#,
                r#""e2e_latency_ms":null,"itl_ms":null,"input_length":50,"#,
                r#""requested_output_length":4,"output_length":0,"reused_input_tokens":0,"#,
                r#""prefill_worker_idx":null,"decode_worker_idx":null,"prefill_admit_ms":null,"#,
                r#""source_held_ms":null,"destination_reserved_ms":null,"#,
                r#""destination_activated_ms":null,"decode_admit_ms":null,"#,
                r#""source_released_ms":null,"decode_reused_input_tokens":null,"#,
                r#""prefill_route_overlap_tokens":null,"decode_route_overlap_tokens":null,"#,
                r#""terminal_status":"rejected"}"#
            )
        );
    }

    #[test]
    fn tokens_of_one_pass_give_zero_gaps() {
        let mut c = Collector::new(Sla::default(), false);
        c.on_arrival(0, 0.0, 10, 4, None);
        c.on_admit(0, 0.0, 0, 0);
        c.on_tokens(0, 10.0, 1);
        c.on_tokens(0, 20.0, 3);
        c.on_completed(0, 20.0);
        // Two tokens in the first pass: the second token shares the first one's time.
        c.on_arrival(1, 0.0, 10, 2, None);
        c.on_admit(1, 0.0, 0, 0);
        c.on_tokens(1, 5.0, 2);
        c.on_completed(1, 5.0);
        let (report, _) = c.finish(RunFacts::default());
        // Gaps: 10, 0, 0 (request 0) then 0 (request 1).
        assert_eq!(float(&report, "mean_itl_ms"), 2.5);
        assert_eq!(float(&report, "min_itl_ms"), 0.0);
        assert_eq!(float(&report, "median_itl_ms"), 0.0);
        // Only the positive gap gives an OTPU sample.
        assert_eq!(
            float(&report, "mean_output_token_throughput_per_user"),
            100.0
        );
        // TTST: 10 (request 0) and 0 (request 1); TPOT: 10/3 and 0.
        assert_eq!(float(&report, "mean_ttst_ms"), 5.0);
        assert_eq!(float(&report, "max_tpot_ms"), 10.0 / 3.0);
        assert_eq!(float(&report, "min_tpot_ms"), 0.0);
        assert_eq!(int(&report, "total_output_tokens"), 6);
    }

    #[test]
    fn reuse_ratios_use_max_and_first_admission() {
        let mut c = Collector::new(Sla::default(), false);
        c.on_arrival(0, 0.0, 100, 1, None);
        c.on_admit(0, 1.0, 0, 0);
        c.on_admit(0, 2.0, 80, 0); // re-admission after preemption
        c.on_admit(0, 3.0, 40, 0);
        c.on_tokens(0, 4.0, 1);
        c.on_completed(0, 4.0);
        let (report, _) = c.finish(RunFacts::default());
        assert_eq!(float(&report, "prefix_cache_reused_ratio"), 0.8);
        assert_eq!(
            float(&report, "first_admission_prefix_cache_reused_ratio"),
            0.0
        );
    }

    #[test]
    fn disaggregated_records_keep_the_prefill_reuse_apart_from_the_decode_reuse() {
        let mut c = Collector::new(Sla::default(), true);
        c.on_arrival(0, 0.0, 100, 1, None);
        c.on_prefill_assigned(0, 0, 0);
        c.on_prefill_admit(0, 1.0, 16);
        c.on_decode_admit(0, 2.0, 0);
        c.on_decode_admit(0, 3.0, 96); // re-admission after a decode preemption
        c.on_tokens(0, 4.0, 1);
        c.on_terminal(0, 4.0, TerminalStatus::Completed);
        let (report, records) = c.finish(RunFacts::default());
        assert_eq!(records[0].reused_input_tokens, 16);
        assert_eq!(records[0].decode_reused_input_tokens, Some(96));
        // The report's ratio still takes the most reuse over every admission of both pools.
        assert_eq!(float(&report, "prefix_cache_reused_ratio"), 0.96);
    }

    #[test]
    fn goodput_follows_the_sla_rules() {
        let sla = Sla {
            ttft_ms: Some(150.0),
            itl_ms: Some(30.0),
            e2e_ms: None,
        };
        let mut c = Collector::new(sla, false);
        complete(&mut c, 0, 0.0, &[100.0, 150.0, 200.0]); // mean ITL 50 > 30: bad
        complete(&mut c, 1, 0.0, &[100.0, 120.0, 140.0]); // mean ITL 20: good
        complete(&mut c, 2, 0.0, &[100.0]); // one token: ITL not checked, good
        complete(&mut c, 3, 0.0, &[151.0, 152.0]); // TTFT 151 > 150: bad
        let (report, _) = c.finish(RunFacts::default());
        assert_eq!(report.entries.len(), 77);
        assert_eq!(int(&report, "goodput_completed_requests"), 2);
        // duration 200 ms; good output tokens 3 + 1.
        assert_eq!(float(&report, "goodput_request_throughput_rps"), 2.0 / 0.2);
        assert_eq!(float(&report, "goodput_output_throughput_tok_s"), 4.0 / 0.2);

        // Bounds are inclusive.
        let mut c = Collector::new(
            Sla {
                itl_ms: Some(50.0),
                ..Sla::default()
            },
            false,
        );
        complete(&mut c, 0, 0.0, &[100.0, 150.0, 200.0]);
        let (report, _) = c.finish(RunFacts::default());
        assert_eq!(int(&report, "goodput_completed_requests"), 1);
    }

    #[test]
    fn zero_token_completions_are_good_only_under_an_e2e_only_sla() {
        for (sla, good) in [
            (
                Sla {
                    e2e_ms: Some(10.0),
                    ..Sla::default()
                },
                1,
            ),
            (
                Sla {
                    e2e_ms: Some(10.0),
                    ttft_ms: Some(10.0),
                    ..Sla::default()
                },
                0,
            ),
            (
                Sla {
                    e2e_ms: Some(4.0),
                    ..Sla::default()
                },
                0,
            ),
        ] {
            let mut c = Collector::new(sla, false);
            c.on_arrival(0, 1.0, 10, 0, None);
            c.on_admit(0, 2.0, 0, 0);
            c.on_completed(0, 6.0);
            let (report, _) = c.finish(RunFacts::default());
            assert_eq!(int(&report, "goodput_completed_requests"), good, "{sla:?}");
            assert_eq!(int(&report, "completed_requests"), 1);
            assert_eq!(float(&report, "duration_ms"), 6.0);
            assert_eq!(float(&report, "mean_ttft_ms"), 0.0);
            assert_eq!(float(&report, "goodput_output_throughput_tok_s"), 0.0);
        }
    }

    #[test]
    fn nothing_completed_gives_zero_stats_and_the_duration_floor() {
        let mut c = Collector::new(Sla::default(), false);
        c.on_arrival(0, 0.0, 10, 2, None);
        assert_eq!(c.duration_s(), 1e-9);
        let facts = RunFacts {
            decode_worker_seconds: c.duration_s(),
            decode_gpus_per_worker: 8,
            ..RunFacts::default()
        };
        let (report, records) = c.finish(facts);
        assert!(records.is_empty());
        assert_eq!(int(&report, "num_requests"), 1);
        assert_eq!(int(&report, "completed_requests"), 0);
        assert_eq!(float(&report, "duration_ms"), 0.0);
        assert_eq!(float(&report, "request_throughput_rps"), 0.0);
        assert_eq!(float(&report, "decode_worker_seconds"), 1e-9);
        assert_eq!(float(&report, "gpu_hours"), 8e-9 / 3600.0);
        assert_eq!(float(&report, "processed_tokens_per_s"), 0.0);
        // The request in flight is counted apart from the reference's keys.
        assert_eq!(int(&report, "unfinished_requests"), 1);
        for (key, value) in report.entries.iter().skip(20) {
            if key.contains("ratio") || accounting::ACCOUNTING_KEYS.contains(key) {
                continue;
            }
            assert_eq!(value.as_f64(), 0.0, "{key}");
        }
        assert!(report
            .to_json_file_string()
            .contains("\"decode_worker_seconds\": 1e-09,\n"));
    }

    #[test]
    fn records_sort_by_arrival_then_id_and_events_after_the_end_are_ignored() {
        let mut c = Collector::new(Sla::default(), true);
        complete(&mut c, 0, 30.0, &[35.0]);
        complete(&mut c, 1, 0.0, &[5.0]);
        complete(&mut c, 2, 0.0, &[6.0]);
        c.on_tokens(1, 50.0, 4);
        c.on_completed(1, 60.0);
        c.on_rejected(2, 61.0);
        c.on_tokens(9, 1.0, 1); // never arrived
        let (report, records) = c.finish(RunFacts::default());
        let order: Vec<&str> = records.iter().map(|r| &r.uuid[24..]).collect();
        assert_eq!(order, ["000000000001", "000000000002", "000000000000"]);
        assert_eq!(records[0].output_length, 1);
        assert_eq!(records[0].terminal_time_ms, 5.0);
        assert_eq!(records[1].terminal_status, TerminalStatus::Completed);
        assert_eq!(float(&report, "duration_ms"), 35.0);
        assert_eq!(int(&report, "num_requests"), 3);
    }

    #[test]
    fn records_are_not_captured_unless_asked() {
        let mut c = Collector::new(Sla::default(), false);
        complete(&mut c, 0, 0.0, &[1.0]);
        assert!(c.finish(RunFacts::default()).1.is_empty());
    }

    #[derive(Clone, Default)]
    struct SharedSink(std::sync::Arc<std::sync::Mutex<Vec<RequestRecord>>>);

    impl RecordSink for SharedSink {
        fn accept(&mut self, record: RequestRecord) {
            self.0.lock().unwrap().push(record);
        }
    }

    fn uuids(records: &[RequestRecord]) -> Vec<&str> {
        records.iter().map(|r| &r.uuid[33..]).collect()
    }

    #[test]
    fn records_reach_the_sink_once_nothing_before_them_is_in_flight() {
        let sink = SharedSink::default();
        let mut c = Collector::new(Sla::default(), true);
        c.stream_records_to(Box::new(sink.clone()));
        c.on_arrival(0, 0.0, 10, 1, None);
        c.on_admit(0, 0.0, 0, 0);
        complete(&mut c, 1, 1.0, &[2.0]);
        // Request 0 arrived first and is in flight: request 1's record waits.
        assert!(sink.0.lock().unwrap().is_empty());
        c.on_tokens(0, 3.0, 1);
        c.on_completed(0, 3.0);
        assert_eq!(uuids(&sink.0.lock().unwrap()), ["000", "001"]);
        complete(&mut c, 2, 4.0, &[5.0]);
        assert_eq!(sink.0.lock().unwrap().len(), 3);
        // In flight at the end: no record; a later request's record still comes out.
        c.on_arrival(3, 6.0, 10, 1, None);
        complete(&mut c, 4, 7.0, &[8.0]);
        assert_eq!(sink.0.lock().unwrap().len(), 3);
        let (report, rest) = c.finish(RunFacts::default());
        assert!(rest.is_empty());
        assert_eq!(uuids(&sink.0.lock().unwrap()), ["000", "001", "002", "004"]);
        assert_eq!(int(&report, "completed_requests"), 4);
        // Nothing of the ended requests is kept.
        assert_eq!(int(&report, "num_requests"), 5);
    }

    #[test]
    fn ended_requests_leave_nothing_behind_without_records() {
        let mut c = Collector::new(Sla::default(), false);
        for id in 0..1000 {
            complete(&mut c, id, id as f64, &[id as f64 + 1.0, id as f64 + 2.0]);
        }
        assert!(c.window.is_empty());
        assert_eq!(c.base, 1000);
        let (report, _) = c.finish(RunFacts::default());
        assert_eq!(float(&report, "mean_ttft_ms"), 1.0);
        assert_eq!(float(&report, "p99_tpot_ms"), 1.0);
    }

    /// The gaps fed one `add` at a time, as the fold is defined.
    fn fold_naively(
        runs: &[(f64, usize)],
        itl: &mut StreamingDistribution,
        throughput: &mut StreamingDistribution,
    ) {
        let mut previous: Option<f64> = None;
        for &(time, count) in runs {
            if let Some(prev) = previous {
                let gap = (time - prev).max(0.0);
                itl.add(gap);
                if gap > 0.0 {
                    throughput.add(1000.0 / gap);
                }
            }
            itl.add_repeated(0.0, count.saturating_sub(1) as u64);
            previous = Some(time);
        }
    }

    fn stat_bits(dist: &StreamingDistribution) -> (u64, [u64; 9]) {
        (dist.count(), dist.finish().in_key_order().map(f64::to_bits))
    }

    #[test]
    fn gap_runs_read_back_what_was_pushed() {
        let mut buffer = GapBuffer::default();
        for (gap, samples) in [(2.5, 1), (2.5, 3), (0.0, 2), (7.0, 1), (0.0, 1), (0.0, 4)] {
            buffer.push(gap, samples);
        }
        let gaps = buffer.into_entries();
        let runs: Vec<(f64, u64)> = GapRuns(&gaps).iter().collect();
        assert_eq!(runs, [(2.5, 4), (0.0, 2), (7.0, 1), (0.0, 5)]);
        assert_eq!(gaps.len(), 7, "a repeat entry after each repeated gap");
        // Repeat entries that follow each other add up.
        let split = [
            3.0f64.to_bits(),
            GapRuns::REPEAT | 2,
            GapRuns::REPEAT | 5,
            1.0f64.to_bits(),
        ];
        let runs: Vec<(f64, u64)> = GapRuns(&split).iter().collect();
        assert_eq!(runs, [(3.0, 8), (1.0, 1)]);
    }

    #[test]
    fn one_token_each_is_one_token_call_each() {
        let feed = |grouped: bool| {
            let mut c = Collector::new(Sla::default(), true);
            for id in 0..6 {
                c.on_arrival(id, 0.0, 10, 5, None);
                c.on_admit(id, 0.0, 0, 0);
            }
            for step in 0..5 {
                let at = 10.0 + 2.5 * f64::from(step);
                let ids: Vec<u32> = (0..6).filter(|id| (id + step) % 3 != 0).collect();
                if grouped {
                    c.on_one_token_each(at, &ids);
                } else {
                    for &id in &ids {
                        c.on_tokens(id as RequestId, at, 1);
                    }
                }
            }
            // 9 never arrived; 5 ended: both are ignored.
            c.on_completed(5, 20.0);
            c.on_one_token_each(22.0, &[9, 5, 0]);
            for id in 0..5 {
                c.on_completed(id, 30.0);
            }
            let (report, records) = c.finish(RunFacts::default());
            (format!("{report:?}"), records)
        };
        assert_eq!(feed(true), feed(false));
    }

    #[test]
    fn token_calls_of_different_requests_commute() {
        // Requests 0..8 decode together; their token calls come pass by pass, or request by
        // request (each request's own calls in order), with the completions in one order.
        let timeline = |id: usize| -> Vec<(f64, usize)> {
            (0..20 + id)
                .map(|step| {
                    (
                        5.0 + step as f64 * (2.0 + (id % 3) as f64 * 0.25),
                        1 + usize::from(step % 7 == 3),
                    )
                })
                .collect()
        };
        let feed = |request_major: bool| {
            let mut c = Collector::new(Sla::default(), true);
            for id in 0..8 {
                c.on_arrival(id, id as f64 * 0.5, 10, 40, None);
                c.on_admit(id, 4.0, 0, 0);
            }
            if request_major {
                for id in (0..8).rev() {
                    for (at, count) in timeline(id) {
                        c.on_tokens(id, at, count);
                    }
                }
            } else {
                for step in 0..28 {
                    for id in 0..8 {
                        if let Some(&(at, count)) = timeline(id).get(step) {
                            c.on_tokens(id, at, count);
                        }
                    }
                }
            }
            for id in [3, 0, 7, 1, 6, 2, 5, 4] {
                c.on_completed(id, 100.0);
            }
            let (report, records) = c.finish(RunFacts::default());
            (format!("{report:?}"), records)
        };
        assert_eq!(feed(true), feed(false));
    }

    #[test]
    fn gaps_binned_late_give_the_sketch_of_each_gap_binned_at_once() {
        // More distinct gaps than the memo has slots, recurring: slots change hands often.
        let mut c = Collector::new(Sla::default(), false);
        let (mut naive_itl, mut naive_throughput) =
            (StreamingDistribution::new(), StreamingDistribution::new());
        for id in 0..300 {
            let mut now = 0.0;
            let runs: Vec<(f64, usize)> = (0..60)
                .map(|step| {
                    now += 1.0 + f64::from((id * 7 + step * 13) % 9000) / 64.0;
                    (now, 1 + usize::from(step % 17 == 0))
                })
                .collect();
            c.on_arrival(id as usize, 0.0, 10, 1, None);
            c.on_admit(id as usize, 0.0, 0, 0);
            for &(time, count) in &runs {
                c.on_tokens(id as usize, time, count);
            }
            c.on_completed(id as usize, now);
            fold_naively(&runs, &mut naive_itl, &mut naive_throughput);
        }
        c.bin_gaps();
        assert_eq!(stat_bits(&c.itl), stat_bits(&naive_itl));
        assert_eq!(
            stat_bits(&c.output_token_throughput_per_user),
            stat_bits(&naive_throughput)
        );
    }

    proptest::proptest! {
        #[test]
        fn folding_gaps_gives_the_bits_of_one_add_per_gap(
            requests in proptest::collection::vec(
                proptest::collection::vec(
                    (
                        proptest::prop_oneof![
                            proptest::prelude::Just(0.0f64),
                            proptest::prelude::Just(12.5),
                            proptest::prelude::Just(1.0 / 3.0 + 10.0),
                            10.0f64..50.0,
                        ],
                        1usize..4,
                    ),
                    0..40,
                ),
                1..12,
            )
        ) {
            let mut c = Collector::new(Sla::default(), false);
            let (mut naive_itl, mut naive_throughput) =
                (StreamingDistribution::new(), StreamingDistribution::new());
            for (id, steps) in requests.iter().enumerate() {
                // Non-decreasing stamps from random steps, some of them equal, some steps
                // repeated (equal gaps, or nearly: rounding).
                let mut now = 1000.0;
                let runs: Vec<(f64, usize)> = steps
                    .iter()
                    .map(|&(step, count)| {
                        now += step;
                        (now, count)
                    })
                    .collect();
                c.on_arrival(id, 0.0, 10, 1, None);
                c.on_admit(id, 0.0, 0, 0);
                for &(time, count) in &runs {
                    c.on_tokens(id, time, count);
                }
                c.on_completed(id, now);
                fold_naively(&runs, &mut naive_itl, &mut naive_throughput);
            }
            c.bin_gaps();
            proptest::prop_assert_eq!(stat_bits(&c.itl), stat_bits(&naive_itl));
            proptest::prop_assert_eq!(
                stat_bits(&c.output_token_throughput_per_user),
                stat_bits(&naive_throughput)
            );
        }
    }
}
