//! `dynosim serve`: an OpenAI-compatible HTTP front on one simulated deployment, answering at
//! simulated speed.
//!
//! The simulation runs on a thread of its own, driven by the wall clock × `speed` through the
//! core's fed-run seam (`dynosim::sim::external`); the HTTP server (axum on a tokio runtime)
//! tokenizes each request, names its blocks like a trace's hash ids, hands it to the run and
//! streams its tokens back as the run emits them. A client that goes away cancels its
//! request in the simulation (its KV is released). Stopping (the caller's stop counter: once
//! to drain, twice to stop at once) closes the listener, lets the requests in flight finish,
//! and returns the run for the replay's report.
//!
//! INTERFACE
//! - [`ServeConfig`]: address, model name, speed, limits, default output length.
//! - [`serve`]: binds, serves until stopped, returns the [`Served`] run (or a usage error for
//!   a deployment the fed run does not support, a runtime error for an address in use).
//! - [`tokens`]: the tokenizer and block naming; [`api`]: request checking and errors.

pub mod api;
mod feed;
mod metrics;
pub mod tokens;

use std::io::Write;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use dynosim::config::ReplaySpec;
use dynosim::report::TerminalStatus;
use dynosim::sim::external::{ExternalRequest, ServeOutputs};
use dynosim::sim::Simulated;
use dynosim::{Error, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use api::{ApiError, Endpoint, Generation};
use feed::{Progress, ProgressObserver, Shared, WallFeed};
use tokens::{filler_token, BlockNamer, Tokenizer};

/// The header that names a request's session (multi-turn chats), for the recorded trace.
pub const SESSION_HEADER: &str = "x-session-id";

/// How the server listens and answers.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub host: String,
    pub port: u16,
    /// The one model name `/v1/models` lists and requests must name.
    pub model: String,
    /// Model time per wall time (2: twice as fast as the simulated deployment).
    pub speed: f64,
    /// Largest request body, in bytes (larger ones get 413).
    pub max_body_bytes: usize,
    /// Open connections at most; more wait in the listen backlog.
    pub max_connections: usize,
    /// Output tokens of a request that sets no max_tokens.
    pub default_max_tokens: usize,
}

/// What a stopped server hands back.
pub struct Served {
    pub simulated: Simulated,
    /// Wall time from the start of serving to the end of the run, in ms.
    pub wall_time_ms: f64,
}

/// Where the server's side outputs go.
pub struct ServeHooks {
    /// The recorded trace (`--record-trace`): Mooncake rows, written as requests arrive.
    pub record_trace: Option<Box<dyn Write + Send>>,
    /// The run's per-request records and time series (the replay's outputs).
    pub outputs: ServeOutputs,
    /// Stop requests so far (a signal handler's count of SIGINT/SIGTERM): 1 drains, 2 stops
    /// at once.
    pub stop: &'static AtomicUsize,
    /// Called once the server listens, with its address.
    pub on_listening: Box<dyn FnOnce(SocketAddr) + Send>,
}

/// The handlers' state.
struct App {
    shared: Arc<Shared>,
    tokenizer: Tokenizer,
    namer: std::sync::Mutex<BlockNamer>,
    config: ServeConfig,
    max_model_len: Option<usize>,
    /// Tokens the whole KV cache of one rank holds (a prompt beyond it can never run).
    kv_capacity_tokens: usize,
}

/// Serves `spec`'s deployment until `hooks.stop` says so (see the module doc).
pub fn serve(spec: &ReplaySpec, config: ServeConfig, hooks: ServeHooks) -> Result<Served> {
    dynosim::sim::external::check_servable(spec)?;
    if !(config.speed.is_finite() && config.speed > 0.0) {
        return Err(Error::usage(format!(
            "--speed must be a positive number, got {}",
            config.speed
        )));
    }
    let address = format!("{}:{}", config.host, config.port);
    let listener = listen(&address, config.max_connections)
        .map_err(|err| Error::runtime(format!("cannot listen on {address}: {err}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|err| Error::runtime(format!("cannot listen on {address}: {err}")))?;
    let local = listener
        .local_addr()
        .map_err(|err| Error::runtime(format!("cannot listen on {address}: {err}")))?;
    let tokenizer = Tokenizer::new().map_err(Error::runtime)?;
    let ServeHooks {
        record_trace,
        outputs,
        stop,
        on_listening,
    } = hooks;
    let shared = Arc::new(Shared::new(
        metrics::Metrics::new(&config.model),
        config.speed,
        record_trace,
    ));
    let engine = &spec.deployment.generating().engine;
    let app = Arc::new(App {
        shared: Arc::clone(&shared),
        tokenizer,
        namer: std::sync::Mutex::new(BlockNamer::new(engine.block_size)),
        max_model_len: engine.max_model_len,
        kv_capacity_tokens: engine.num_gpu_blocks.saturating_mul(engine.block_size),
        config: config.clone(),
    });
    let cancel = AtomicBool::new(false);
    let sim_ended = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|err| Error::runtime(format!("cannot start the server's runtime: {err}")))?;
    let (simulated, served) = std::thread::scope(|scope| {
        let simulation = scope.spawn(|| {
            let mut feed = WallFeed::new(&shared);
            let observer = Box::new(ProgressObserver::new(Arc::clone(&shared)));
            let result = dynosim::sim::external::serve(spec, &mut feed, observer, &cancel, outputs);
            sim_ended.store(true, Ordering::SeqCst);
            result
        });
        let served = runtime.block_on(async {
            let listener = TcpListener::from_std(listener)
                .map_err(|err| Error::runtime(format!("cannot listen on {address}: {err}")))?;
            let listener = CappedListener {
                inner: listener,
                permits: Arc::new(Semaphore::new(config.max_connections.max(1))),
            };
            on_listening(local);
            let router = routes(Arc::clone(&app), config.max_body_bytes);
            let shutdown = {
                let sim_ended = Arc::clone(&sim_ended);
                async move {
                    while stop.load(Ordering::SeqCst) == 0 && !sim_ended.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            };
            // A second stop (or a run that ended) stops the simulation at once.
            let watcher = {
                let shared = Arc::clone(&shared);
                let cancel = &cancel;
                async move {
                    loop {
                        let stops = stop.load(Ordering::SeqCst);
                        if stops >= 1 {
                            shared.close();
                        }
                        if stops >= 2 {
                            cancel.store(true, Ordering::SeqCst);
                            return;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            };
            let server = axum::serve(listener, router).with_graceful_shutdown(shutdown);
            tokio::select! {
                result = server => result.map_err(|err| Error::runtime(format!("the server failed: {err}"))),
                () = watcher => Ok(()),
            }
        });
        // Whatever ended the server, no request comes any more.
        shared.close();
        if served.is_err() {
            cancel.store(true, Ordering::SeqCst);
        }
        let simulated = simulation
            .join()
            .unwrap_or_else(|_| Err(Error::runtime("the simulation thread panicked")));
        (simulated, served)
    });
    // Connections still open (a second stop) are dropped with the runtime.
    runtime.shutdown_timeout(Duration::from_millis(200));
    served?;
    let simulated = simulated?;
    shared
        .finish_recording()
        .map_err(|err| Error::runtime(format!("cannot write the recorded trace: {err}")))?;
    Ok(Served {
        simulated,
        wall_time_ms: started.elapsed().as_secs_f64() * 1000.0,
    })
}

/// Binds `address` (the first of its resolutions that binds) with a listen backlog for
/// `max_connections` clients connecting at once (the standard library's 128 made hundreds of
/// clients connecting together wait a second for a retried handshake).
fn listen(address: &str, max_connections: usize) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    use std::net::ToSocketAddrs;
    let backlog = i32::try_from(max_connections.max(128)).unwrap_or(i32::MAX);
    let mut last_error = None;
    for resolved in address.to_socket_addrs()? {
        let bound = Socket::new(
            Domain::for_address(resolved),
            Type::STREAM,
            Some(Protocol::TCP),
        )
        .and_then(|socket| {
            // As the standard library's listener does: a restarted server can bind at once.
            #[cfg(unix)]
            socket.set_reuse_address(true)?;
            socket.bind(&resolved.into())?;
            socket.listen(backlog)?;
            Ok(socket)
        });
        match bound {
            Ok(socket) => return Ok(socket.into()),
            Err(err) => last_error = Some(err),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    }))
}

fn routes(app: Arc<App>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics_text))
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .fallback(|| async {
            ApiError {
                status: StatusCode::NOT_FOUND,
                message: "no such endpoint".into(),
                kind: "invalid_request_error",
                param: None,
                code: None,
            }
        })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(app)
}

async fn models(State(app): State<Arc<App>>) -> Response {
    let mut model = json!({
        "id": app.config.model,
        "object": "model",
        "created": unix_seconds(),
        "owned_by": "dynosim",
        "tokenizer": tokens::VOCABULARY,
    });
    if let Some(len) = app.max_model_len {
        model["max_model_len"] = len.into();
    }
    axum::Json(json!({ "object": "list", "data": [model] })).into_response()
}

async fn metrics_text(State(app): State<Arc<App>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.shared.metrics.render(),
    )
        .into_response()
}

async fn completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Response {
    generate(app, headers, body, Endpoint::Completions).await
}

async fn chat_completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Response {
    generate(app, headers, body, Endpoint::Chat).await
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// Cancels its request in the simulation when dropped before the request ended (the client
/// went away: the handler's future or the response stream was dropped).
struct CancelOnDrop {
    shared: Arc<Shared>,
    id: usize,
    ended: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.ended {
            self.shared.cancel(self.id);
        }
    }
}

/// The shape of one answer: ids, object names, text placement.
#[derive(Clone)]
struct Answer {
    endpoint: Endpoint,
    id: String,
    model: String,
    created: u64,
    prompt_tokens: usize,
    finish_reason: &'static str,
}

impl Answer {
    fn usage(&self, completion_tokens: usize) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": self.prompt_tokens + completion_tokens,
        })
    }

    fn whole(&self, text: &str, completion_tokens: usize) -> Value {
        let choice = match self.endpoint {
            Endpoint::Completions => json!({
                "index": 0, "text": text, "logprobs": null, "finish_reason": self.finish_reason,
            }),
            Endpoint::Chat => json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": null,
                "finish_reason": self.finish_reason,
            }),
        };
        json!({
            "id": self.id,
            "object": self.object(false),
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(completion_tokens),
        })
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Completions, _) => "text_completion",
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
        }
    }

    /// A streamed chunk with `text` (or the role, for a chat's first chunk) and a finish
    /// reason when it is the last.
    fn chunk(&self, text: Option<&str>, finish: bool) -> Value {
        let finish_reason = if finish {
            Value::from(self.finish_reason)
        } else {
            Value::Null
        };
        let choice = match self.endpoint {
            Endpoint::Completions => json!({
                "index": 0, "text": text.unwrap_or(""), "logprobs": null,
                "finish_reason": finish_reason,
            }),
            Endpoint::Chat => {
                let delta = match text {
                    Some(text) => json!({ "content": text }),
                    None if finish => json!({}),
                    None => json!({ "role": "assistant", "content": "" }),
                };
                json!({ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason })
            }
        };
        json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        })
    }

    fn usage_chunk(&self, completion_tokens: usize) -> Value {
        json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": self.usage(completion_tokens),
        })
    }
}

fn filler(from: usize, count: usize) -> String {
    (from..from + count).map(filler_token).collect()
}

fn shutting_down() -> ApiError {
    ApiError {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: "the server is shutting down".into(),
        kind: "server_error",
        param: None,
        code: None,
    }
}

fn rejected() -> ApiError {
    ApiError {
        status: StatusCode::TOO_MANY_REQUESTS,
        message: "the deployment rejected the request (a router queue limit)".into(),
        kind: "rate_limit_exceeded",
        param: None,
        code: None,
    }
}

async fn generate(
    app: Arc<App>,
    headers: HeaderMap,
    body: std::result::Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Response {
    // The request's arrival, for the simulation: when it reached the server, before the
    // parsing and tokenizing that a client's latency includes but the simulated engine's
    // does not.
    let received = Instant::now();
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: format!(
                    "the request body is larger than the server's limit of {} bytes",
                    app.config.max_body_bytes
                ),
                kind: "invalid_request_error",
                param: None,
                code: None,
            }
            .into_response()
        }
        Err(rejection) => {
            return ApiError::bad_request(format!("cannot read the body: {rejection}"), None)
                .into_response()
        }
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(value) => value,
        Err(err) => {
            return ApiError::bad_request(format!("the body is not valid JSON: {err}"), None)
                .into_response()
        }
    };
    // Tokenizing a large prompt takes a while: off the runtime's threads.
    let parsing = Arc::clone(&app);
    let parsed = tokio::task::spawn_blocking(move || {
        api::parse(
            &value,
            endpoint,
            &parsing.config.model,
            &parsing.tokenizer,
            parsing.config.default_max_tokens,
        )
    })
    .await;
    let generation = match parsed {
        Ok(Ok(generation)) => generation,
        Ok(Err(err)) => return err.into_response(),
        Err(_) => return shutting_down().into_response(),
    };
    let session = headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    match submit(&app, generation, session, endpoint, received).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

async fn submit(
    app: &Arc<App>,
    generation: Generation,
    session: Option<String>,
    endpoint: Endpoint,
    received: Instant,
) -> std::result::Result<Response, ApiError> {
    let prompt_tokens = generation.prompt_tokens.len();
    let output_tokens = generation.output_tokens;
    if let Some(max_model_len) = app.max_model_len {
        if prompt_tokens.saturating_add(output_tokens) > max_model_len {
            return Err(ApiError::bad_request(
                format!(
                    "This model's maximum context length is {max_model_len} tokens; the \
                     request has {prompt_tokens} prompt tokens and asks for {output_tokens} \
                     output tokens"
                ),
                None,
            ));
        }
    }
    if prompt_tokens.saturating_add(output_tokens) > app.kv_capacity_tokens {
        return Err(ApiError::bad_request(
            format!(
                "the request's {prompt_tokens} prompt and {output_tokens} output tokens do not \
                 fit the simulated KV cache of {} tokens",
                app.kv_capacity_tokens
            ),
            None,
        ));
    }
    let (hash_ids, block_size) = {
        let mut namer = app.namer.lock().unwrap_or_else(|p| p.into_inner());
        (namer.name(&generation.prompt_tokens), namer.block_size())
    };
    let session_id = match &session {
        Some(name) => dynosim::workload::SessionId::from(name.as_str()),
        None => dynosim::workload::SessionId::Request(0),
    };
    let request = ExternalRequest {
        session: session_id,
        hash_ids,
        block_size: u32::try_from(block_size).unwrap_or(u32::MAX),
        input_length: prompt_tokens,
        max_output_tokens: output_tokens,
    };
    let Some((id, mut progress)) = app.shared.submit(request, session, received) else {
        return Err(shutting_down());
    };
    let mut guard = CancelOnDrop {
        shared: Arc::clone(&app.shared),
        id,
        ended: false,
    };
    let answer = Answer {
        endpoint,
        id: match endpoint {
            Endpoint::Completions => format!("cmpl-{id}"),
            Endpoint::Chat => format!("chatcmpl-{id}"),
        },
        model: app.config.model.clone(),
        created: unix_seconds(),
        prompt_tokens,
        finish_reason: if generation.length_given {
            "length"
        } else {
            "stop"
        },
    };
    // The first event says whether the request runs at all.
    let first = progress.recv().await;
    match first {
        None => {
            guard.ended = true;
            Err(shutting_down())
        }
        Some(Progress::End { status, .. }) if status != TerminalStatus::Completed => {
            guard.ended = true;
            Err(rejected())
        }
        Some(first) if generation.stream => Ok(stream_response(
            answer,
            received,
            first,
            progress,
            guard,
            generation.include_usage,
        )),
        Some(first) => {
            let mut generated = 0;
            let mut event = Some(first);
            loop {
                match event {
                    None => {
                        guard.ended = true;
                        return Err(shutting_down());
                    }
                    Some(Progress::Tokens { count, .. }) => generated += count,
                    Some(Progress::End { status, .. }) => {
                        guard.ended = true;
                        if status != TerminalStatus::Completed {
                            return Err(rejected());
                        }
                        break;
                    }
                }
                event = progress.recv().await;
            }
            Ok(axum::Json(answer.whole(&filler(0, generated), generated)).into_response())
        }
    }
}

/// What a streamed answer still has to send.
struct StreamState {
    answer: Answer,
    progress: UnboundedReceiver<Progress>,
    guard: CancelOnDrop,
    include_usage: bool,
    /// The first event, received before the headers were sent.
    pending: Option<Progress>,
    generated: usize,
    /// The chat's role chunk was sent.
    opened: bool,
    done: bool,
    /// A token chunk's SSE bytes before and after its text (the same for every token of the
    /// answer: built once, not per token).
    token_head: Vec<u8>,
    token_tail: Vec<u8>,
    /// When the request reached the server, and when its first and last tokens were handed
    /// to the connection: the latencies its client sees, as the server measures them.
    received: Instant,
    first_sent: Option<Instant>,
    last_sent: Option<Instant>,
}

impl StreamState {
    /// The chunk of `count` tokens emitted at model time `at_ms` (its delay measured now).
    fn token_chunk(&mut self, count: usize, at_ms: f64, out: &mut Vec<u8>) {
        self.observe_delay(at_ms);
        out.extend_from_slice(&self.token_head);
        // Filler words need no JSON escaping.
        for index in self.generated..self.generated + count {
            out.extend_from_slice(filler_token(index).as_bytes());
        }
        out.extend_from_slice(&self.token_tail);
        self.generated += count;
    }

    /// How late the token emitted at model time `at_ms` leaves (now).
    fn observe_delay(&mut self, at_ms: f64) {
        let now = Instant::now();
        let shared = &self.guard.shared;
        shared
            .metrics
            .token_delay
            .observe(shared.wall_delay_s(at_ms, now));
        self.first_sent.get_or_insert(now);
        self.last_sent = Some(now);
    }

    /// The wall-clock TTFT and ITL of a completed answer.
    fn observe_latencies(&self) {
        let (Some(first), Some(last)) = (self.first_sent, self.last_sent) else {
            return;
        };
        let metrics = &self.guard.shared.metrics;
        metrics
            .wall_ttft
            .observe(first.duration_since(self.received).as_secs_f64());
        if self.generated >= 2 {
            metrics
                .wall_itl
                .observe(last.duration_since(first).as_secs_f64() / (self.generated - 1) as f64);
        }
    }
}

/// Stands for a token's text in the chunk template (plain characters: serialized as is).
const TEXT_MARK: &str = "TOKEN-TEXT-GOES-HERE";

/// A token chunk's SSE bytes before and after its text.
fn token_template(answer: &Answer) -> (Vec<u8>, Vec<u8>) {
    let whole = sse(&answer.chunk(Some(TEXT_MARK), false));
    let whole = std::str::from_utf8(&whole).unwrap_or_default();
    match whole.split_once(TEXT_MARK) {
        Some((head, tail)) => (head.as_bytes().to_vec(), tail.as_bytes().to_vec()),
        // Unreachable: the mark is a plain string inside the chunk.
        None => (Vec::new(), whole.as_bytes().to_vec()),
    }
}

fn sse(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

fn stream_response(
    answer: Answer,
    received: Instant,
    first: Progress,
    progress: UnboundedReceiver<Progress>,
    guard: CancelOnDrop,
    include_usage: bool,
) -> Response {
    let (token_head, token_tail) = token_template(&answer);
    let state = StreamState {
        token_head,
        token_tail,
        received,
        first_sent: None,
        last_sent: None,
        opened: answer.endpoint == Endpoint::Completions,
        answer,
        progress,
        guard,
        include_usage,
        pending: Some(first),
        generated: 0,
        done: false,
    };
    let stream = futures_util::stream::unfold(state, |mut state| async move {
        if state.done {
            return None;
        }
        let event = match state.pending.take() {
            Some(event) => Some(event),
            None => state.progress.recv().await,
        };
        let bytes = match event {
            Some(Progress::Tokens { count, at_ms }) => {
                let mut out = Vec::with_capacity(state.token_head.len() + 64);
                // A chat opens with the role, in the first token's write.
                if !state.opened {
                    state.opened = true;
                    out.extend_from_slice(&sse(&state.answer.chunk(None, false)));
                }
                // Tokens already due go out in one write, a chunk each (also for a reader
                // that fell behind: a client that times tokens sees them as the engine
                // emitted them); an end waits for the next turn.
                state.token_chunk(count, at_ms, &mut out);
                while let Ok(next) = state.progress.try_recv() {
                    match next {
                        Progress::Tokens { count, at_ms } => {
                            state.token_chunk(count, at_ms, &mut out)
                        }
                        end => {
                            state.pending = Some(end);
                            break;
                        }
                    }
                }
                Bytes::from(out)
            }
            Some(Progress::End { status, .. }) => {
                state.guard.ended = true;
                state.done = true;
                let mut out = Vec::new();
                if status == TerminalStatus::Completed {
                    state.observe_latencies();
                    out.extend_from_slice(&sse(&state.answer.chunk(None, true)));
                    if state.include_usage {
                        out.extend_from_slice(&sse(&state.answer.usage_chunk(state.generated)));
                    }
                } else {
                    out.extend_from_slice(&sse(&rejected().body()));
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
                Bytes::from(out)
            }
            None => {
                state.guard.ended = true;
                state.done = true;
                let mut out = sse(&shutting_down().body()).to_vec();
                out.extend_from_slice(b"data: [DONE]\n\n");
                Bytes::from(out)
            }
        };
        Some((Ok::<Bytes, std::convert::Infallible>(bytes), state))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// A listener that holds at most a fixed number of connections open.
struct CappedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
}

/// A connection holding one of its listener's permits.
struct CappedStream {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl axum::serve::Listener for CappedListener {
    type Io = CappedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok(permit) = Arc::clone(&self.permits).acquire_owned().await else {
                // The semaphore is never closed; wait as if full.
                std::future::pending::<()>().await;
                continue;
            };
            match self.inner.accept().await {
                Ok((stream, address)) => {
                    // Tokens leave one small write at a time: no Nagle delay.
                    let _ = stream.set_nodelay(true);
                    return (
                        CappedStream {
                            stream,
                            _permit: permit,
                        },
                        address,
                    );
                }
                // Out of file descriptors and the like: wait a little and try again.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

impl AsyncRead for CappedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CappedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
