//! Collects request lifecycle events and turns them into the report and per-request records.
//!
//! What counts (frontend.md §3.2): every arrival counts in `num_requests`; only requests that
//! were admitted and then completed feed the totals, the duration, the reuse ratios and the
//! distributions. Token gaps (ITL, OTPU) are folded into the streaming statistics when a
//! request completes, in completion order, as the reference does; gaps of requests that never
//! complete are dropped.
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

use super::exact::ExactValues;
use super::record::{RecordSink, TerminalStatus};
use super::stats::{DistributionStats, StreamingDistribution};
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
}

/// What is known about one output-token timeline.
#[derive(Clone, Copy, Debug, Default)]
struct TokenSummary {
    count: usize,
    first_ms: f64,
    second_ms: Option<f64>,
    last_ms: f64,
}

/// One request's state, in the collector's dense table. The fields a token touches come first,
/// in the state's first cache line.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct RequestState {
    tokens: TokenSummary,
    /// Token timestamps not yet folded into the gap statistics, run-length encoded: the time
    /// of each run of tokens stamped at one time, 8 bytes a run as most runs are one token
    /// (the others are in `multiple_token_runs`). Taken from the spare buffers at the first
    /// token, emptied when the request ends.
    token_run_times: Vec<f64>,
    arrival_ms: f64,
    input_length: usize,
    requested_output_length: usize,
    first_admit_ms: Option<f64>,
    /// Max reuse over all admissions.
    reused_tokens: usize,
    first_admission_reused_tokens: usize,
    decode_worker_idx: Option<usize>,
    /// (index in `token_run_times`, tokens) of the runs of more than one token, in order.
    multiple_token_runs: Vec<(usize, usize)>,
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
        (self.tokens.count > 0).then(|| (self.tokens.first_ms - self.arrival_ms).max(0.0))
    }

    fn e2e_ms(&self) -> Option<f64> {
        (self.tokens.count > 0).then(|| (self.tokens.last_ms - self.arrival_ms).max(0.0))
    }

    fn ttst_ms(&self) -> Option<f64> {
        self.tokens
            .second_ms
            .map(|second| (second - self.tokens.first_ms).max(0.0))
    }

    /// Mean time per output token after the first.
    fn tpot_ms(&self) -> Option<f64> {
        let gaps = self.tokens.count.checked_sub(1).filter(|g| *g > 0)?;
        Some((self.tokens.last_ms - self.tokens.first_ms).max(0.0) / gaps as f64)
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
    /// Emptied token-run buffers of ended requests, reused by later requests at their first
    /// token (growing a fresh one token by token was a good part of the run's allocations),
    /// and the bytes they hold.
    spare_token_runs: Vec<Vec<f64>>,
    spare_token_run_bytes: usize,
}

/// Spare token-run buffers hold at most this many bytes together, and one of more than
/// [`SPARE_TOKEN_RUN_CAPACITY`] runs is not kept. Only requests emitting tokens hold a buffer,
/// so the spares needed are about the decoding batch's.
const SPARE_TOKEN_RUN_BYTES: usize = 4 << 20;
const SPARE_TOKEN_RUN_CAPACITY: usize = 4096;
/// A state slot keeps its emptied list of multiple-token runs up to this capacity.
const SPARE_MULTIPLE_TOKEN_RUNS: usize = 64;
const TOKEN_RUN_BYTES: usize = std::mem::size_of::<f64>();

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
            spare_token_runs: Vec::new(),
            spare_token_run_bytes: 0,
        }
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
    pub fn on_tokens(&mut self, id: RequestId, at_ms: f64, count: usize) {
        let Some(index) = self.live_index(id) else {
            return;
        };
        if count == 0 {
            return;
        }
        let state = &mut self.states[index];
        let tokens = &mut state.tokens;
        // The last run's time is `last_ms`: reading it from the state spares a load from the
        // end of the run buffer, which is seldom in cache.
        let same_stamp = tokens.count > 0 && tokens.last_ms == at_ms;
        match tokens.count {
            0 => {
                tokens.first_ms = at_ms;
                if count >= 2 {
                    tokens.second_ms = Some(at_ms);
                }
                if let Some(spare) = self.spare_token_runs.pop() {
                    self.spare_token_run_bytes -= spare.capacity() * TOKEN_RUN_BYTES;
                    state.token_run_times = spare;
                }
            }
            1 => tokens.second_ms = Some(at_ms),
            _ => {}
        }
        tokens.last_ms = at_ms;
        tokens.count += count;
        let times = &mut state.token_run_times;
        if same_stamp {
            // The last run grows (to more than one token).
            let last = times.len() - 1;
            match state.multiple_token_runs.last_mut() {
                Some((index, run)) if *index == last => *run += count,
                _ => state.multiple_token_runs.push((last, 1 + count)),
            }
        } else {
            times.push(at_ms);
            if count > 1 {
                state.multiple_token_runs.push((times.len() - 1, count));
            }
        }
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
        let mut state = std::mem::take(&mut self.states[index]);
        state.terminal = Some((at_ms, status));
        let mut runs = std::mem::take(&mut state.token_run_times);
        if state.is_completed() {
            let completed = CompletedRequest {
                ttft_ms: state.ttft_ms(),
                e2e_ms: state.e2e_ms(),
                prompt_tokens: state.input_length,
                reused_prompt_tokens: state.reused_tokens,
            };
            self.duration_ms = self.duration_ms.max(at_ms);
            let token_runs = TokenRuns {
                times: &runs,
                multiple: &state.multiple_token_runs,
            };
            fold_token_gaps(
                token_runs,
                &mut self.itl,
                &mut self.output_token_throughput_per_user,
            );
            if let Some(series) = self.timeseries.as_deref_mut() {
                series.on_completed(at_ms, &completed, token_runs.iter());
            }
            self.fold_completed(&state);
        }
        let spare_bytes = runs.capacity() * TOKEN_RUN_BYTES;
        if spare_bytes > 0
            && runs.capacity() <= SPARE_TOKEN_RUN_CAPACITY
            && self.spare_token_run_bytes + spare_bytes <= SPARE_TOKEN_RUN_BYTES
        {
            runs.clear();
            self.spare_token_runs.push(runs);
            self.spare_token_run_bytes += spare_bytes;
        }
        // The (small) list of multiple-token runs stays with the slot for its next request.
        let mut multiple = std::mem::take(&mut state.multiple_token_runs);
        multiple.clear();
        if multiple.capacity() > SPARE_MULTIPLE_TOKEN_RUNS {
            multiple = Vec::new();
        }
        if self.capture_records {
            let key = record_key(state.arrival_ms, id);
            self.live_order.remove(&key);
            self.ended_order.insert(key);
            state.multiple_token_runs = multiple;
            self.states[index] = state;
            self.window[offset] = index as Slot | ENDED;
        } else {
            self.states[index].multiple_token_runs = multiple;
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

    fn report(self, facts: RunFacts) -> Report {
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

        let distributions: [DistributionStats; 6] = [
            self.ttft.finish(),
            self.ttst.finish(),
            self.tpot.finish(),
            self.itl.finish(),
            self.e2e.finish(),
            self.output_token_throughput_per_user.finish(),
        ];
        for (keys, stats) in DISTRIBUTION_KEYS.iter().zip(distributions) {
            entries.extend(
                keys.iter()
                    .copied()
                    .zip(stats.in_key_order().map(Value::Float)),
            );
        }
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
        first_token_ms: has_tokens.then_some(state.tokens.first_ms),
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

/// A request's token runs: the time of each run, and the runs of more than one token.
#[derive(Clone, Copy)]
struct TokenRuns<'a> {
    times: &'a [f64],
    multiple: &'a [(usize, usize)],
}

impl<'a> TokenRuns<'a> {
    /// (time, tokens) of each run, in order.
    fn iter(self) -> impl Iterator<Item = (f64, usize)> + 'a {
        let mut multiple = self.multiple.iter().peekable();
        self.times.iter().enumerate().map(move |(index, &time)| {
            match multiple.next_if(|(at, _)| *at == index) {
                Some(&(_, count)) => (time, count),
                None => (time, 1),
            }
        })
    }
}

/// Feeds every consecutive token gap of one request into the pooled statistics: a run of
/// tokens stamped at one time contributes zero gaps after its first token.
///
/// Each statistic sees exactly the samples, in the order, of one `add` per gap (ITL: the gap,
/// then the run's zeros; OTPU: `1000 / gap` of each positive gap). The two Welford chains are
/// updated together in one tight pass, with their state in registers, so that their divisions
/// overlap; the sketches and extremes, which do not depend on the chains, in a second pass.
fn fold_token_gaps(
    runs: TokenRuns<'_>,
    itl: &mut StreamingDistribution,
    output_token_throughput_per_user: &mut StreamingDistribution,
) {
    let mut itl_moments = itl.moments();
    let mut throughput_moments = output_token_throughput_per_user.moments();
    let mut previous: Option<f64> = None;
    for (time, count) in runs.iter() {
        if let Some(previous) = previous {
            let gap = (time - previous).max(0.0);
            if gap.is_finite() {
                itl_moments.add(gap);
            }
            if gap > 0.0 {
                let throughput = 1000.0 / gap;
                if throughput.is_finite() {
                    throughput_moments.add(throughput);
                }
            }
        }
        // The run's later tokens follow with no gap (and no throughput sample).
        for _ in 1..count {
            itl_moments.add(0.0);
        }
        previous = Some(time);
    }
    itl.set_moments(itl_moments);
    output_token_throughput_per_user.set_moments(throughput_moments);

    let mut previous: Option<f64> = None;
    for (time, count) in runs.iter() {
        if let Some(previous) = previous {
            let gap = (time - previous).max(0.0);
            if gap.is_finite() {
                itl.add_to_sketch(gap, 1);
            }
            if gap > 0.0 {
                let throughput = 1000.0 / gap;
                if throughput.is_finite() {
                    output_token_throughput_per_user.add_to_sketch(throughput, 1);
                }
            }
        }
        if count > 1 {
            itl.add_to_sketch(0.0, count as u64 - 1);
        }
        previous = Some(time);
    }
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

        let keys: Vec<&str> = report.entries.iter().map(|e| e.0).collect();
        assert_eq!(keys, key_order(false));
        assert_eq!(int(&report, "num_requests"), 3);
        assert_eq!(int(&report, "completed_requests"), 1);
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
        for (key, value) in report.entries.iter().skip(20) {
            if key.contains("ratio") {
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

    proptest::proptest! {
        #[test]
        fn folding_gaps_gives_the_bits_of_one_add_per_gap(
            requests in proptest::collection::vec(
                proptest::collection::vec((0.0f64..50.0, 1usize..4), 0..40),
                1..12,
            )
        ) {
            let (mut itl, mut throughput) =
                (StreamingDistribution::new(), StreamingDistribution::new());
            let (mut naive_itl, mut naive_throughput) =
                (StreamingDistribution::new(), StreamingDistribution::new());
            for steps in requests {
                // Non-decreasing stamps from random steps, some of them equal.
                let mut now = 1000.0;
                let runs: Vec<(f64, usize)> = steps
                    .iter()
                    .map(|&(step, count)| {
                        if step > 10.0 {
                            now += step;
                        }
                        (now, count)
                    })
                    .collect();
                let times: Vec<f64> = runs.iter().map(|run| run.0).collect();
                let multiple: Vec<(usize, usize)> = runs
                    .iter()
                    .enumerate()
                    .filter(|(_, run)| run.1 > 1)
                    .map(|(index, run)| (index, run.1))
                    .collect();
                let token_runs = TokenRuns {
                    times: &times,
                    multiple: &multiple,
                };
                assert_eq!(token_runs.iter().collect::<Vec<_>>(), runs);
                fold_token_gaps(token_runs, &mut itl, &mut throughput);
                fold_naively(&runs, &mut naive_itl, &mut naive_throughput);
            }
            proptest::prop_assert_eq!(stat_bits(&itl), stat_bits(&naive_itl));
            proptest::prop_assert_eq!(stat_bits(&throughput), stat_bits(&naive_throughput));
        }
    }
}
