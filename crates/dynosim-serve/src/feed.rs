//! The bridge between the HTTP handlers (tokio tasks) and the simulation (its own thread).
//!
//! Handlers [`Shared::submit`] requests and get a channel of the request's progress;
//! [`Shared::cancel`] a request whose client went away. On the simulating thread,
//! [`WallFeed`] is the run's `RequestFeed` (model time = wall time since the first request
//! reached the server × speed; it sleeps on a condition variable until the next event is due
//! or a request comes, and counts how late it took up each due event in
//! `dynosim:event_wake_delay_seconds`; a request arrives in the simulation at the model time
//! it reached the server, before it was parsed and tokenized, as a client's clock sees it)
//! and [`ProgressObserver`] the collector's observer, which sends each request's tokens and
//! end to its handler as the run emits them and keeps the metrics. `--record-trace` rows are
//! written as requests are handed to the run (their arrival times are model times).
//!
//! INTERFACE
//! - [`Shared`]: submit, cancel, close; the wall/model clock ([`Shared::wall_delay_s`]); the
//!   recorded trace ([`Shared::finish_recording`]); the metrics.
//! - [`WallFeed::new`]: the run's feed; [`ProgressObserver::new`]: the collector's observer.
//! - [`Progress`]: what a handler hears of its request.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use dynosim::engine::{RankLoad, RequestId};
use dynosim::report::{RequestObserver, TerminalStatus};
use dynosim::sim::external::{ExternalRequest, FeedEvent, RequestFeed};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::metrics::Metrics;

/// What a handler hears of its request, at model times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Progress {
    Tokens { at_ms: f64, count: usize },
    End { at_ms: f64, status: TerminalStatus },
}

/// A request handed to the run and not ended.
struct LiveRequest {
    progress: UnboundedSender<Progress>,
    /// Model time the run took it in (set by the feed).
    arrival_ms: f64,
    prompt_tokens: usize,
    admitted: bool,
    last_token_ms: Option<f64>,
    /// The client's session, for the recorded trace.
    session: Option<String>,
}

/// An event waiting for the run.
struct Queued {
    event: FeedEvent,
    /// A request's id and when it reached the server (cancels have none: they are due at once).
    request: Option<(RequestId, Instant)>,
}

struct FeedState {
    queue: VecDeque<Queued>,
    next_id: RequestId,
    closed: bool,
    live: HashMap<RequestId, LiveRequest>,
}

/// The recorded trace: Mooncake rows as requests arrive.
struct Recorder {
    out: Box<dyn Write + Send>,
    /// Per session: when its last turn ended (model ms), the base of the next turn's delay.
    session_ends: HashMap<String, Option<f64>>,
    error: Option<std::io::Error>,
}

/// State shared by the handlers, the feed and the observer.
pub struct Shared {
    state: Mutex<FeedState>,
    arrived: Condvar,
    recorder: Mutex<Option<Recorder>>,
    pub metrics: Metrics,
    speed: f64,
    /// When the first request arrived: model time 0 (a replay of the recorded trace starts
    /// its clock at its first arrival too, so that both runs compute the very same times).
    /// Set once, then read for every token without a lock.
    origin: OnceLock<Instant>,
}

impl Shared {
    pub fn new(metrics: Metrics, speed: f64, record: Option<Box<dyn Write + Send>>) -> Self {
        Self {
            state: Mutex::new(FeedState {
                queue: VecDeque::new(),
                next_id: 0,
                closed: false,
                live: HashMap::new(),
            }),
            arrived: Condvar::new(),
            recorder: Mutex::new(record.map(|out| Recorder {
                out,
                session_ends: HashMap::new(),
                error: None,
            })),
            metrics,
            speed,
            origin: OnceLock::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FeedState> {
        // A panicking holder cannot leave the state half-changed in a way that matters here.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Hands `request`, which reached the server at `received`, to the run (it arrives in the
    /// simulation then, or as soon after as the run allows); None once the server is draining.
    pub fn submit(
        &self,
        request: ExternalRequest,
        session: Option<String>,
        received: Instant,
    ) -> Option<(RequestId, UnboundedReceiver<Progress>)> {
        let (sender, receiver) = unbounded_channel();
        let mut state = self.lock();
        if state.closed {
            return None;
        }
        let id = state.next_id;
        state.next_id += 1;
        // Under the state lock: the first request submitted sets model time 0.
        self.origin.get_or_init(|| received);
        let mut request = request;
        if session.is_none() {
            // Named like a trace row without a session: request_<n>, from 1.
            request.session = dynosim::workload::SessionId::Request(id as u64 + 1);
        }
        state.live.insert(
            id,
            LiveRequest {
                progress: sender,
                arrival_ms: 0.0,
                prompt_tokens: request.input_length,
                admitted: false,
                last_token_ms: None,
                session,
            },
        );
        state.queue.push_back(Queued {
            event: FeedEvent::Request(request),
            request: Some((id, received)),
        });
        drop(state);
        self.arrived.notify_one();
        Some((id, receiver))
    }

    /// The client of request `id` went away: the run cancels it if it has not ended.
    pub fn cancel(&self, id: RequestId) {
        let mut state = self.lock();
        if state.live.contains_key(&id) {
            state.queue.push_back(Queued {
                event: FeedEvent::Cancel(id),
                request: None,
            });
            drop(state);
            self.arrived.notify_one();
        }
    }

    /// No more requests: the run ends once those in flight have.
    pub fn close(&self) {
        self.lock().closed = true;
        self.arrived.notify_one();
    }

    /// How late, in wall seconds, something due at model time `at_ms` is at `now`.
    pub fn wall_delay_s(&self, at_ms: f64, now: Instant) -> f64 {
        let elapsed = self.origin.get().map_or(0.0, |origin| {
            now.saturating_duration_since(*origin).as_secs_f64()
        });
        (elapsed - at_ms / 1000.0 / self.speed).max(0.0)
    }

    /// Wall seconds since the first arrival, if there was one.
    fn elapsed_s(&self) -> Option<f64> {
        self.origin
            .get()
            .map(|origin| origin.elapsed().as_secs_f64())
    }

    /// Model time now, from the wall clock.
    fn model_now_ms(&self) -> f64 {
        self.elapsed_s().unwrap_or(0.0) * 1000.0 * self.speed
    }

    /// Model time at `instant` (0 before the first arrival).
    fn model_ms_at(&self, instant: Instant) -> f64 {
        self.origin.get().map_or(0.0, |origin| {
            instant.saturating_duration_since(*origin).as_secs_f64() * 1000.0 * self.speed
        })
    }

    /// The first error writing the recorded trace, and its writer (flushed).
    pub fn finish_recording(&self) -> Result<(), std::io::Error> {
        let mut recorder = self.recorder.lock().unwrap_or_else(|p| p.into_inner());
        match recorder.take() {
            Some(mut recorder) => match recorder.error.take() {
                Some(err) => Err(err),
                None => recorder.out.flush(),
            },
            None => Ok(()),
        }
    }

    fn record_arrival(&self, request: &ExternalRequest, session: Option<&str>, at_ms: f64) {
        let mut guard = self.recorder.lock().unwrap_or_else(|p| p.into_inner());
        let Some(recorder) = guard.as_mut() else {
            return;
        };
        if recorder.error.is_some() {
            return;
        }
        let mut row = serde_json::Map::new();
        match session {
            Some(name) => {
                row.insert("session_id".into(), name.into());
                match recorder.session_ends.get(name) {
                    // A later turn: released its delay after the previous one ended (a turn
                    // sent before the previous ended follows it at once).
                    Some(ended) => {
                        let delay = ended.map_or(0.0, |end| (at_ms - end).max(0.0));
                        row.insert("delay".into(), delay.into());
                    }
                    None => {
                        row.insert("timestamp".into(), at_ms.into());
                    }
                }
                recorder.session_ends.insert(name.to_string(), None);
            }
            None => {
                row.insert("timestamp".into(), at_ms.into());
            }
        }
        row.insert("input_length".into(), request.input_length.into());
        row.insert("output_length".into(), request.max_output_tokens.into());
        row.insert("hash_ids".into(), request.hash_ids.clone().into());
        let mut line = serde_json::Value::Object(row).to_string();
        line.push('\n');
        if let Err(err) = recorder.out.write_all(line.as_bytes()) {
            recorder.error = Some(err);
        }
    }

    fn record_end(&self, session: Option<&str>, at_ms: f64) {
        let Some(name) = session else { return };
        let mut guard = self.recorder.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(recorder) = guard.as_mut() {
            recorder.session_ends.insert(name.to_string(), Some(at_ms));
        }
    }
}

/// The run's feed on the simulating thread.
pub struct WallFeed<'a> {
    shared: &'a Shared,
    /// The model time `wait` last gave: arrivals taken next arrived then.
    now_ms: f64,
    /// `wait` gave a time before (the run has settled at `now_ms`).
    waited: bool,
    /// The closing was reported to the loop once (later waits with nothing scheduled sleep).
    closed_seen: bool,
}

/// Longest sleep between looks at the cancel flag.
const POLL: Duration = Duration::from_millis(50);

impl<'a> WallFeed<'a> {
    pub fn new(shared: &'a Shared) -> Self {
        Self {
            shared,
            now_ms: 0.0,
            waited: false,
            closed_seen: false,
        }
    }
}

impl RequestFeed for WallFeed<'_> {
    fn wait(&mut self, next_ms: Option<f64>, cancel: &AtomicBool) -> f64 {
        let shared = self.shared;
        let mut state = shared.lock();
        let now_ms = loop {
            let now_ms = shared.model_now_ms();
            // The next event waiting is due when it reached the server (a cancel: now),
            // unless the run has something due before.
            if let Some(front) = state.queue.front() {
                let due_ms = front
                    .request
                    .map_or(now_ms, |(_, received)| shared.model_ms_at(received));
                break next_ms.map_or(due_ms, |next_ms| due_ms.min(next_ms));
            }
            if let Some(next_ms) = next_ms {
                if now_ms >= next_ms {
                    shared
                        .metrics
                        .wake_delay
                        .observe((now_ms - next_ms) / 1000.0 / shared.speed);
                    break next_ms;
                }
            }
            let closing = state.closed && !self.closed_seen;
            if closing || cancel.load(Ordering::SeqCst) {
                self.closed_seen |= state.closed;
                break next_ms.map_or(now_ms, |next_ms| now_ms.min(next_ms));
            }
            let sleep = next_ms.map_or(POLL, |next_ms| {
                Duration::from_secs_f64((next_ms - now_ms) / 1000.0 / shared.speed).min(POLL)
            });
            state = shared
                .arrived
                .wait_timeout(state, sleep)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        // Model time never goes back. Something received before the run's last settled
        // time arrives just after it (one step of the float): that moment's events are done
        // (a pass may have started then without it), and the replay of the recorded trace,
        // which settles arrivals with the other events of their moment, must see the same.
        self.now_ms = if !self.waited || now_ms > self.now_ms {
            now_ms
        } else {
            self.now_ms.next_up()
        };
        self.waited = true;
        self.now_ms
    }

    fn take(&mut self, into: &mut Vec<FeedEvent>) {
        let mut state = self.shared.lock();
        let mut recorded = Vec::new();
        // In order, up to the first request received after now.
        while let Some(front) = state.queue.front() {
            if let Some((_, received)) = front.request {
                if self.shared.model_ms_at(received) > self.now_ms {
                    break;
                }
            }
            let Some(queued) = state.queue.pop_front() else {
                break;
            };
            if let Some((id, _)) = queued.request {
                if let Some(live) = state.live.get_mut(&id) {
                    live.arrival_ms = self.now_ms;
                    recorded.push((into.len(), live.session.clone()));
                }
            }
            into.push(queued.event);
        }
        drop(state);
        for (index, session) in recorded {
            if let FeedEvent::Request(request) = &into[index] {
                self.shared
                    .record_arrival(request, session.as_deref(), self.now_ms);
            }
        }
    }

    fn is_closed(&self) -> bool {
        // Requests still queued arrive first.
        let state = self.shared.lock();
        state.closed && state.queue.is_empty()
    }

    fn on_settled(&mut self, _at_ms: f64, load: RankLoad) {
        let metrics = &self.shared.metrics;
        metrics.running.set(load.running as i64);
        metrics.waiting.set(load.waiting as i64);
        let usage = if load.kv_capacity_tokens == 0 {
            0.0
        } else {
            load.kv_used_tokens as f64 / load.kv_capacity_tokens as f64
        };
        metrics.kv_usage.set(usage);
    }
}

/// The collector's observer: each request's progress to its handler, and the metrics.
pub struct ProgressObserver {
    shared: std::sync::Arc<Shared>,
}

impl ProgressObserver {
    pub fn new(shared: std::sync::Arc<Shared>) -> Self {
        Self { shared }
    }
}

impl RequestObserver for ProgressObserver {
    fn on_admit(&mut self, id: RequestId, at_ms: f64, reused_tokens: usize) {
        let mut state = self.shared.lock();
        let Some(live) = state.live.get_mut(&id) else {
            return;
        };
        if live.admitted {
            return;
        }
        live.admitted = true;
        let metrics = &self.shared.metrics;
        metrics
            .queue_time
            .observe((at_ms - live.arrival_ms) / 1000.0);
        metrics.prefix_queries.inc_by(live.prompt_tokens as u64);
        metrics.prefix_hits.inc_by(reused_tokens as u64);
    }

    fn on_tokens(&mut self, id: RequestId, at_ms: f64, count: usize) {
        let mut state = self.shared.lock();
        let Some(live) = state.live.get_mut(&id) else {
            return;
        };
        let metrics = &self.shared.metrics;
        match live.last_token_ms {
            None => {
                metrics.ttft.observe((at_ms - live.arrival_ms) / 1000.0);
                metrics.prompt_tokens.inc_by(live.prompt_tokens as u64);
            }
            Some(last_ms) => metrics.inter_token.observe((at_ms - last_ms) / 1000.0),
        }
        // Tokens of one burst (speculative decoding) leave together.
        for _ in 1..count {
            metrics.inter_token.observe(0.0);
        }
        metrics.generation_tokens.inc_by(count as u64);
        live.last_token_ms = Some(at_ms);
        // A handler that went away has cancelled the request already.
        let _ = live.progress.send(Progress::Tokens { at_ms, count });
    }

    fn on_terminal(&mut self, id: RequestId, at_ms: f64, status: TerminalStatus) {
        let mut state = self.shared.lock();
        let Some(live) = state.live.remove(&id) else {
            return;
        };
        drop(state);
        let metrics = &self.shared.metrics;
        match status {
            TerminalStatus::Completed => {
                metrics.e2e.observe((at_ms - live.arrival_ms) / 1000.0);
                metrics.finished.inc();
            }
            TerminalStatus::Canceled => {
                metrics.canceled.inc();
            }
            TerminalStatus::Rejected | TerminalStatus::Failed => {
                metrics.rejected.inc();
            }
        }
        self.shared.record_end(live.session.as_deref(), at_ms);
        let _ = live.progress.send(Progress::End { at_ms, status });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn request() -> ExternalRequest {
        ExternalRequest {
            session: dynosim::workload::SessionId::Request(0),
            hash_ids: vec![1],
            block_size: 16,
            input_length: 10,
            max_output_tokens: 2,
        }
    }

    /// One sample's value in the exposition text.
    fn sample(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|line| {
                let rest = line.strip_prefix(name)?;
                let value = rest.strip_prefix('{').map_or(rest, |labels| {
                    labels.split_once('}').map_or("", |(_, value)| value)
                });
                value.trim().parse().ok()
            })
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    /// The run's next event comes due with no request arriving: the feed gives it at its
    /// time, by itself, not before the wall clock reached it, and counts how late it woke.
    #[test]
    fn a_due_event_wakes_the_run_at_its_time_without_an_arrival() {
        let shared = Shared::new(Metrics::new("m"), 1.0, None);
        let cancel = AtomicBool::new(false);
        let mut feed = WallFeed::new(&shared);
        shared.submit(request(), None, Instant::now()).unwrap();
        assert_eq!(feed.wait(None, &cancel), 0.0);
        let mut taken = Vec::new();
        feed.take(&mut taken);
        assert_eq!(taken.len(), 1);

        let due_ms = shared.model_now_ms() + 30.0;
        assert_eq!(feed.wait(Some(due_ms), &cancel), due_ms);
        assert!(
            shared.model_now_ms() >= due_ms,
            "woke before the event was due"
        );
        let text = shared.metrics.render();
        assert_eq!(sample(&text, "dynosim:event_wake_delay_seconds_count"), 1.0);
        assert!(sample(&text, "dynosim:event_wake_delay_seconds_sum") >= 0.0);
    }

    /// A token reaches its handler when the run emits it: not held for a later event (the
    /// pass's other tokens, the next pass, the request's end).
    #[test]
    fn each_token_goes_to_its_handler_as_the_run_emits_it() {
        let shared = Arc::new(Shared::new(Metrics::new("m"), 1.0, None));
        let cancel = AtomicBool::new(false);
        let (first, mut first_progress) = shared.submit(request(), None, Instant::now()).unwrap();
        let (second, mut second_progress) = shared.submit(request(), None, Instant::now()).unwrap();
        let mut feed = WallFeed::new(&shared);
        feed.wait(None, &cancel);
        feed.take(&mut Vec::new());
        let mut observer = ProgressObserver::new(Arc::clone(&shared));
        observer.on_admit(first, 0.0, 0);
        observer.on_admit(second, 0.0, 0);

        observer.on_tokens(first, 12.5, 1);
        assert_eq!(
            first_progress.try_recv().ok(),
            Some(Progress::Tokens {
                at_ms: 12.5,
                count: 1
            })
        );
        assert!(second_progress.try_recv().is_err());
        observer.on_tokens(second, 12.5, 1);
        assert_eq!(
            second_progress.try_recv().ok(),
            Some(Progress::Tokens {
                at_ms: 12.5,
                count: 1
            })
        );
        observer.on_tokens(first, 25.0, 1);
        observer.on_terminal(first, 25.0, TerminalStatus::Completed);
        assert_eq!(
            first_progress.try_recv().ok(),
            Some(Progress::Tokens {
                at_ms: 25.0,
                count: 1
            })
        );
        assert_eq!(
            first_progress.try_recv().ok(),
            Some(Progress::End {
                at_ms: 25.0,
                status: TerminalStatus::Completed
            })
        );
    }
}
