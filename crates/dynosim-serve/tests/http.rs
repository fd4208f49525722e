//! The server as clients see it, on loopback: each endpoint, streaming, the error answers,
//! a full router queue (429), disconnects (the request is cancelled in the simulation and its
//! KV released, seen through /metrics), slow writers and slow readers, and the recorded trace
//! replayed offline.
//!
//! Every wait has a deadline; no assertion depends on how fast the machine is (token times
//! are the simulation's, checked through its own report).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dynosim::config::ReplayOptions;
use dynosim::sim::external::ServeOutputs;
use dynosim_serve::{ServeConfig, Served};
use serde_json::{json, Value};
use serving::metric;

mod serving;

const ENGINE: &str = r#"{"num_gpu_blocks": 1024, "block_size": 16}"#;
const DEADLINE: Duration = Duration::from_secs(60);

fn spec() -> dynosim::config::ReplaySpec {
    serving::synthetic_deployment(ENGINE)
        .into_spec()
        .expect("a valid deployment")
}

/// The deployment every test serves, replaying `trace` (blocks of 16 tokens).
fn trace_deployment(trace: std::path::PathBuf) -> ReplayOptions {
    ReplayOptions {
        extra_engine_args: Some(ENGINE.to_string()),
        trace_files: vec![trace],
        trace_block_size: Some(16),
        ..ReplayOptions::default()
    }
}

/// A trace written into memory.
#[derive(Clone, Default)]
struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

struct Server {
    running: serving::Running,
    trace: SharedBuffer,
}

fn start(max_body_bytes: usize) -> Server {
    start_serving(spec(), max_body_bytes, 1.0)
}

/// Serves `spec` at `speed` (model time per wall time).
fn start_serving(spec: dynosim::config::ReplaySpec, max_body_bytes: usize, speed: f64) -> Server {
    let trace = SharedBuffer::default();
    let config = ServeConfig {
        host: "127.0.0.1".into(),
        port: 0,
        model: "sim-model".into(),
        speed,
        max_body_bytes,
        max_connections: 64,
        default_max_tokens: 8,
    };
    let running = serving::start(
        spec,
        config,
        Some(Box::new(trace.clone())),
        ServeOutputs::default(),
        DEADLINE,
    );
    Server { running, trace }
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.address)
    }

    /// Drains and returns the run.
    fn finish(self) -> (Served, String) {
        let served = self.running.stop(1);
        let trace = String::from_utf8(self.trace.0.lock().unwrap().clone()).unwrap();
        (served, trace)
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(DEADLINE)
        .build()
        .unwrap()
}

async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let response = client()
        .post(server.url(path))
        .json(&body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

async fn post_raw(server: &Server, path: &str, body: &str) -> (u16, Value) {
    let response = client()
        .post(server.url(path))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

async fn metrics(server: &Server) -> String {
    client()
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The `data:` payloads of an SSE body.
fn events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_answer_like_an_openai_server() {
    let server = start(1 << 20);
    let health = client().get(server.url("/health")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let models: Value = client()
        .get(server.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "sim-model");

    // Non-streaming completion: the output length asked for, usage from the real tokenizer.
    let (status, body) = post(
        &server,
        "/v1/completions",
        json!({"model": "sim-model", "prompt": "Hello there, simulated world", "max_tokens": 7}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["usage"]["completion_tokens"], 7);
    assert_eq!(body["usage"]["prompt_tokens"], 5);
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    let text = body["choices"][0]["text"].as_str().unwrap();
    assert_eq!(text.split_whitespace().count(), 7);

    // Token ids as the prompt are taken as they are.
    let (status, body) = post(
        &server,
        "/v1/completions",
        json!({"model": "sim-model", "prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["prompt_tokens"], 10);

    // Non-streaming chat, max_completion_tokens over max_tokens; without either, the default.
    let (status, body) = post(
        &server,
        "/v1/chat/completions",
        json!({"model": "sim-model", "messages": [{"role": "user", "content": "hi"}],
               "max_tokens": 50, "max_completion_tokens": 3}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["usage"]["completion_tokens"], 3);
    let (_, body) = post(
        &server,
        "/v1/chat/completions",
        json!({"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(body["usage"]["completion_tokens"], 8);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");

    // Streaming chat with usage: a role chunk, one chunk per token, the finish, usage, [DONE].
    let body = client()
        .post(server.url("/v1/chat/completions"))
        .json(&json!({"model": "sim-model", "stream": true, "max_tokens": 5,
                      "stream_options": {"include_usage": true}, "min_tokens": 5,
                      "ignore_eos": true,
                      "messages": [{"role": "user", "content": [{"type": "text", "text": "hey"}]}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(body.status().as_u16(), 200);
    assert!(body.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let data = events(&body.text().await.unwrap());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|chunk| serde_json::from_str(chunk).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: Vec<&str> = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .filter(|text| !text.is_empty())
        .collect();
    assert_eq!(content.len(), 5);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        "length"
    );

    // Streaming completion without usage: no usage chunk.
    let body = client()
        .post(server.url("/v1/completions"))
        .json(&json!({"model": "sim-model", "stream": true, "max_tokens": 3, "prompt": "x y z"}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let data = events(&body);
    assert_eq!(data.len(), 3 + 1 + 1, "{body}");
    assert!(data.iter().all(|chunk| !chunk.contains("\"usage\"")));

    // The client can read a stream's end before the simulating thread has recorded the
    // request as finished: the gauges settle right after.
    let text = wait_for_metrics(&server, |text| {
        metric(text, "vllm:num_requests_running") == 0.0
            && metric(text, "dynosim:requests_finished_total") == 6.0
    })
    .await;
    assert!(
        text.contains("# TYPE vllm:time_to_first_token_seconds histogram"),
        "{text}"
    );
    assert!(
        text.contains("vllm:inter_token_latency_seconds_bucket"),
        "{text}"
    );
    assert!(
        text.contains("vllm:e2e_request_latency_seconds_count"),
        "{text}"
    );
    assert_eq!(
        metric(&text, "vllm:generation_tokens_total"),
        7.0 + 2.0 + 3.0 + 8.0 + 5.0 + 3.0
    );
    assert_eq!(metric(&text, "dynosim:requests_finished_total"), 6.0);
    assert_eq!(metric(&text, "vllm:num_requests_running"), 0.0);
    let (served, _) = server.finish();
    let (report, _) = served.simulated.into_report(served.wall_time_ms);
    assert_eq!(report.get("num_requests").map(|v| v.as_f64()), Some(6.0));
    assert_eq!(
        report.get("total_output_tokens").map(|v| v.as_f64()),
        Some(28.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_openai_errors() {
    let server = start(64 << 10);
    let cases: Vec<(&str, &str, u16, &str)> = vec![
        ("/v1/completions", "{not json", 400, "not valid JSON"),
        ("/v1/completions", "[1, 2]", 400, "JSON object"),
        (
            "/v1/completions",
            r#"{"prompt": "a"}"#,
            400,
            "'model' is a required",
        ),
        (
            "/v1/completions",
            r#"{"model": 5, "prompt": "a"}"#,
            400,
            "'model' must be a string",
        ),
        (
            "/v1/completions",
            r#"{"model": "other", "prompt": "a"}"#,
            404,
            "does not exist",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model"}"#,
            400,
            "'prompt' is a required",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": 7}"#,
            400,
            "'prompt' must be",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": ""}"#,
            400,
            "empty",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": "a", "max_tokens": "9"}"#,
            400,
            "'max_tokens' must be",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": "a", "max_tokens": -1}"#,
            400,
            "'max_tokens' must be",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": "a", "max_tokens": 0}"#,
            400,
            "at least 1",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": "a", "n": 2}"#,
            400,
            "n=1",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": "a", "stream": "yes"}"#,
            400,
            "'stream' must be",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": "a", "stream_options": {"include_usage": true}}"#,
            400,
            "only allowed",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": "a", "max_tokens": 2, "min_tokens": 3}"#,
            400,
            "min_tokens",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": "a", "max_tokens": 100000}"#,
            400,
            "KV cache",
        ),
        (
            "/v1/completions",
            r#"{"model": "sim-model", "prompt": ["a", "b"]}"#,
            400,
            "one prompt",
        ),
        (
            "/v1/chat/completions",
            r#"{"model": "sim-model", "messages": []}"#,
            400,
            "non-empty",
        ),
        (
            "/v1/chat/completions",
            r#"{"model": "sim-model", "messages": [{"content": "x"}]}"#,
            400,
            "role",
        ),
        (
            "/v1/chat/completions",
            r#"{"model": "sim-model", "messages": [{"role": "user", "content": 3}]}"#,
            400,
            "content",
        ),
        (
            "/v1/chat/completions",
            r#"{"model": "sim-model", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
            400,
            "text parts",
        ),
    ];
    for (path, body, status, words) in cases {
        let (got, answer) = post_raw(&server, path, body).await;
        assert_eq!(got, status, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(words), "{body}: {answer}");
        assert!(answer["error"]["type"].is_string(), "{answer}");
    }
    // A body over the limit: 413 (the writer may find the connection closed early).
    let mut stream = TcpStream::connect(server.running.address).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let body = format!(
        r#"{{"model": "sim-model", "prompt": "{}"}}"#,
        "a ".repeat(128 << 10)
    );
    let sending = std::thread::spawn(move || {
        let _ = write!(
            writer,
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
    });
    let mut answer = Vec::new();
    let mut buffer = [0; 4096];
    while !String::from_utf8_lossy(&answer).contains("}}") {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => answer.extend_from_slice(&buffer[..read]),
        }
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("larger than the server's limit"),
        "{answer}"
    );
    drop(stream);
    let _ = sending.join();
    // Unknown paths are 404 with an error object.
    let missing = client()
        .get(server.url("/v2/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    // Nothing above reached the simulation.
    let (served, trace) = server.finish();
    assert_eq!(trace, "");
    let (report, _) = served.simulated.into_report(served.wall_time_ms);
    assert_eq!(report.get("num_requests").map(|v| v.as_f64()), Some(0.0));
}

/// Polls /metrics until `done` holds of it (or the deadline passes).
async fn wait_for_metrics(server: &Server, done: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    loop {
        let text = metrics(server).await;
        if done(&text) || started.elapsed() > DEADLINE {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until one request runs, holding KV.
async fn wait_for_one_running_with_kv(server: &Server) {
    let running = wait_for_metrics(server, |text| {
        metric(text, "vllm:num_requests_running") == 1.0
    })
    .await;
    let running_requests = metric(&running, "vllm:num_requests_running");
    assert_eq!(running_requests, 1.0, "{running}");
    assert!(
        metric(&running, "vllm:kv_cache_usage_perc") > 0.0,
        "{running}"
    );
}

/// Waits until one request was canceled and no KV is in use; the metrics then.
async fn wait_for_one_canceled_without_kv(server: &Server) -> String {
    let after = wait_for_metrics(server, |text| {
        metric(text, "dynosim:requests_canceled_total") == 1.0
            && metric(text, "vllm:kv_cache_usage_perc") == 0.0
    })
    .await;
    let canceled = metric(&after, "dynosim:requests_canceled_total");
    assert_eq!(canceled, 1.0, "{after}");
    assert_eq!(metric(&after, "vllm:kv_cache_usage_perc"), 0.0, "{after}");
    assert_eq!(metric(&after, "vllm:num_requests_running"), 0.0, "{after}");
    after
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_stream_cancels_its_request_and_frees_its_kv() {
    let server = start(1 << 20);
    // A long answer (about 10 s of simulated decoding): the client leaves after two chunks.
    let prompt: Vec<u32> = (0..400).collect();
    let mut response = client()
        .post(server.url("/v1/completions"))
        .json(&json!({"model": "sim-model", "stream": true, "max_tokens": 2000, "prompt": prompt}))
        .send()
        .await
        .unwrap();
    let mut seen = String::new();
    while events(&seen).len() < 2 {
        let chunk = response.chunk().await.unwrap().expect("the stream goes on");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    wait_for_one_running_with_kv(&server).await;
    drop(response);
    wait_for_one_canceled_without_kv(&server).await;
    // The prompt's blocks stay in the prefix cache: the same prompt again hits it.
    let (status, _) = post(
        &server,
        "/v1/completions",
        json!({"model": "sim-model", "max_tokens": 1, "prompt": prompt}),
    )
    .await;
    assert_eq!(status, 200);
    let text = metrics(&server).await;
    assert!(
        metric(&text, "vllm:prefix_cache_hits_total") >= 384.0,
        "{text}"
    );
    let (served, _) = server.finish();
    let (report, _) = served.simulated.into_report(served.wall_time_ms);
    assert_eq!(report.get("num_requests").map(|v| v.as_f64()), Some(2.0));
    assert_eq!(
        report.get("completed_requests").map(|v| v.as_f64()),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_before_its_whole_answer_cancels_it_too() {
    let server = start(1 << 20);
    // A non-streamed request of about 10 s of simulated decoding, whose client leaves before
    // the answer.
    let prompt: Vec<u32> = (1000..1400).collect();
    let url = server.url("/v1/completions");
    let whole = tokio::spawn(async move {
        client()
            .post(url)
            .json(&json!({"model": "sim-model", "max_tokens": 2000, "prompt": prompt}))
            .send()
            .await
    });
    wait_for_one_running_with_kv(&server).await;
    whole.abort();
    let after = wait_for_one_canceled_without_kv(&server).await;
    assert_eq!(metric(&after, "dynosim:requests_finished_total"), 0.0);
    let (served, _) = server.finish();
    let (report, _) = served.simulated.into_report(served.wall_time_ms);
    assert_eq!(
        report.get("canceled_requests").map(|v| v.as_f64()),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_token_request_counts_as_running_during_its_only_pass() {
    // A hundredth of real speed: the one pass of a long prompt (its prefill, which also
    // emits its only token and finishes it) lasts seconds of wall time.
    let server = start_serving(spec(), 1 << 20, 0.01);
    let prompt: Vec<u32> = (0..4000).collect();
    let url = server.url("/v1/completions");
    let request = tokio::spawn(async move {
        client()
            .post(url)
            .json(&json!({"model": "sim-model", "max_tokens": 1, "prompt": prompt}))
            .send()
            .await
    });
    let running = wait_for_metrics(&server, |text| {
        metric(text, "vllm:num_requests_running") == 1.0
    })
    .await;
    assert_eq!(
        metric(&running, "vllm:num_requests_running"),
        1.0,
        "{running}"
    );
    assert_eq!(
        metric(&running, "vllm:num_requests_waiting"),
        0.0,
        "{running}"
    );
    assert_eq!(
        metric(&running, "vllm:generation_tokens_total"),
        0.0,
        "{running}"
    );
    // Stop at once rather than wait out the pass.
    request.abort();
    let served = server.running.stop(2);
    let (report, _) = served.simulated.into_report(served.wall_time_ms);
    assert_eq!(report.get("num_requests").map(|v| v.as_f64()), Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_holds_only_its_own_connection() {
    let server = start(1 << 20);
    // Headers and half a body, then nothing for a while.
    let mut slow = TcpStream::connect(server.running.address).unwrap();
    let body = r#"{"model": "sim-model", "prompt": "slow", "max_tokens": 2}"#;
    write!(
        slow,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{}",
        body.len(),
        &body[..10]
    )
    .unwrap();
    let (status, answer) = post(
        &server,
        "/v1/completions",
        json!({"model": "sim-model", "prompt": "quick", "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    // The slow client finishes its body and gets its answer.
    slow.write_all(&body.as_bytes()[10..]).unwrap();
    slow.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut answer = vec![0; 4096];
    let read = slow.read(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(slow);
    server.finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_trace_replays_offline_to_the_same_counts_and_times() {
    let server = start(1 << 20);
    let system = "You are a careful assistant. ".repeat(20);
    let mut handles = Vec::new();
    for user in 0..6 {
        let body = json!({"model": "sim-model", "max_tokens": 10 + user,
                          "messages": [{"role": "system", "content": system},
                                       {"role": "user", "content": format!("question {user}")}]});
        let url = server.url("/v1/chat/completions");
        handles.push(tokio::spawn(async move {
            client()
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    for handle in handles {
        assert_eq!(handle.await.unwrap(), 200);
    }
    // A two-turn session: the second turn repeats the first and its answer.
    for turn in 0..2 {
        let mut messages = vec![json!({"role": "user", "content": system})];
        if turn == 1 {
            messages.push(json!({"role": "assistant", "content": "the quick brown fox"}));
            messages.push(json!({"role": "user", "content": "and then?"}));
        }
        let status = client()
            .post(server.url("/v1/chat/completions"))
            .header("x-session-id", "chat-1")
            .json(&json!({"model": "sim-model", "max_tokens": 4, "messages": messages}))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status.as_u16(), 200);
    }
    let text = metrics(&server).await;
    assert!(
        metric(&text, "vllm:prefix_cache_hits_total") > 0.0,
        "{text}"
    );
    let (served, trace) = server.finish();
    let (live, _) = served.simulated.into_report(served.wall_time_ms);
    assert_eq!(trace.lines().count(), 8);
    assert!(trace.contains(r#""session_id":"chat-1""#), "{trace}");
    assert!(trace.contains(r#""delay":"#), "{trace}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("served.jsonl");
    std::fs::write(&path, &trace).unwrap();
    let spec = trace_deployment(path).into_spec().expect("a valid replay");
    let workload = dynosim::load_workload(&spec).expect("the trace reads");
    let (offline, _) = dynosim::Simulation::new(&spec, workload)
        .run()
        .expect("the replay runs")
        .into_report(0.0);
    for key in [
        "num_requests",
        "completed_requests",
        "total_input_tokens",
        "total_output_tokens",
    ] {
        assert_eq!(live.get(key), offline.get(key), "{key}");
    }
    // The same prompts meet the same cache.
    assert_eq!(
        live.get("prefix_cache_reused_ratio"),
        offline.get("prefix_cache_reused_ratio")
    );
}

/// A KV-router deployment of two workers whose one queue class holds back every request
/// while both have prefill work (`prefill_busy_threshold: 0`) and holds at most one request
/// per worker.
fn queue_limited_spec(dir: &std::path::Path) -> dynosim::config::ReplaySpec {
    let policy = dir.join("policy.yaml");
    std::fs::write(
        &policy,
        "default_policy_family: standard\n\
         uncached_isl_buckets:\n  - min_tokens: 0\n    bucket: all\n\
         policy_classes:\n  - name: standard_all\n    policy_family: standard\n    \
         cache_bucket: all\n    quantum: 1\n    prefill_busy_threshold: 0\n    \
         request_queue_limit_per_worker: 1\n",
    )
    .unwrap();
    let mut options = serving::synthetic_deployment(ENGINE);
    options.num_workers = 2;
    options.router_mode = "kv_router".into();
    options.router_policy_config = Some(policy.to_str().unwrap().to_string());
    options.into_spec().expect("a valid deployment")
}

/// Sends a streaming completion of `max_tokens`; resolves to its status once the headers
/// arrive (a request waiting in the router queue has none yet).
async fn streaming_status(url: String, prompt: Value, max_tokens: u32) -> (u16, reqwest::Response) {
    let response = client()
        .post(url)
        .json(
            &json!({"model": "sim-model", "stream": true, "max_tokens": max_tokens,
                      "prompt": prompt}),
        )
        .send()
        .await
        .expect("the server answers");
    (response.status().as_u16(), response)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_router_queue_answers_429_with_an_openai_error() {
    let dir = tempfile::TempDir::new().unwrap();
    // A hundredth of real speed: two long prefills keep both workers busy for many seconds of
    // wall time while the next requests arrive (two tokens each, so that they count as
    // running during their prefill pass).
    let server = start_serving(queue_limited_spec(dir.path()), 1 << 20, 0.01);
    let url = server.url("/v1/completions");
    let long = |from: u32| json!((from..from + 4000).collect::<Vec<u32>>());
    let busy: Vec<_> = [0, 50_000]
        .into_iter()
        .map(|from| tokio::spawn(streaming_status(url.clone(), long(from), 2)))
        .collect();
    let running = wait_for_metrics(&server, |text| {
        metric(text, "vllm:num_requests_running") == 2.0
    })
    .await;
    assert_eq!(
        metric(&running, "vllm:num_requests_running"),
        2.0,
        "{running}"
    );
    // Of the next three, two wait in the queue (one per worker) and one is refused at once.
    let next: Vec<_> = ["third", "fourth", "fifth"]
        .into_iter()
        .map(|prompt| tokio::spawn(streaming_status(url.clone(), json!(prompt), 1)))
        .collect();
    let (answered, _, waiting) =
        tokio::time::timeout(DEADLINE, futures_util::future::select_all(next))
            .await
            .expect("one of them is answered at once");
    let (status, response) = answered.unwrap();
    assert_eq!(status, 429);
    let body: Value = response.json().await.expect("a JSON answer");
    assert_eq!(body["error"]["type"], "rate_limit_exceeded", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("queue limit")),
        "{body}"
    );
    assert!(body["error"].get("param").is_some(), "{body}");
    assert!(body["error"].get("code").is_some(), "{body}");
    // The two that waited run once the long requests are gone.
    for request in busy {
        request.abort();
    }
    for request in waiting {
        let (status, response) = tokio::time::timeout(DEADLINE, request)
            .await
            .expect("a queued request is admitted")
            .unwrap();
        assert_eq!(status, 200);
        drop(response);
    }
    let (served, _) = server.finish();
    let (report, _) = served.simulated.into_report(served.wall_time_ms);
    assert_eq!(report.get("num_requests").map(|v| v.as_f64()), Some(5.0));
    assert_eq!(
        report.get("rejected_requests").map(|v| v.as_f64()),
        Some(1.0)
    );
}

/// Shrinks a socket's receive buffer, so that an unread stream pushes back on the server at
/// once (a few kB) instead of filling the kernel's buffers.
#[cfg(unix)]
fn small_receive_buffer(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 4096;
    // SAFETY: setsockopt on an open socket with a pointer to a c_int and its size.
    let set = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0, "setsockopt SO_RCVBUF");
}

#[cfg(not(unix))]
fn small_receive_buffer(_stream: &TcpStream) {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_does_not_stall_other_clients() {
    // 50 times real speed: the long stream's tokens are due within seconds.
    let server = start_serving(spec(), 1 << 20, 50.0);
    // A stream of 6,000 tokens (about 1 MB of SSE) that nobody reads for now.
    let mut slow = TcpStream::connect(server.running.address).unwrap();
    small_receive_buffer(&slow);
    let body = json!({"model": "sim-model", "prompt": "read me slowly", "max_tokens": 6000,
                      "stream": true, "stream_options": {"include_usage": true}})
    .to_string();
    write!(
        slow,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let running = wait_for_metrics(&server, |text| {
        metric(text, "vllm:num_requests_running") >= 1.0
    })
    .await;
    assert!(
        metric(&running, "vllm:num_requests_running") >= 1.0,
        "{running}"
    );
    // Meanwhile other clients stream whole answers.
    let others: Vec<_> = (0..4)
        .map(|index| {
            let url = server.url("/v1/completions");
            tokio::spawn(async move {
                let body = client()
                    .post(url)
                    .json(
                        &json!({"model": "sim-model", "prompt": format!("client {index}"),
                                  "max_tokens": 20, "stream": true,
                                  "stream_options": {"include_usage": true}}),
                    )
                    .send()
                    .await
                    .expect("the server answers")
                    .text()
                    .await
                    .expect("the whole stream");
                events(&body)
            })
        })
        .collect();
    for other in others {
        let events = tokio::time::timeout(DEADLINE, other)
            .await
            .expect("another client is not held up by the slow reader")
            .unwrap();
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
        let usage: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
        assert_eq!(usage["usage"]["completion_tokens"], 20, "{usage}");
    }
    // The slow reader now reads its stream, a little at a time at first, and gets all of it.
    let received = tokio::task::spawn_blocking(move || {
        slow.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut received = Vec::new();
        let mut buffer = [0u8; 1024];
        loop {
            let read = slow.read(&mut buffer).expect("the stream goes on");
            if read == 0 {
                break received;
            }
            received.extend_from_slice(&buffer[..read]);
            // Slowly at first; the rest at once.
            if received.len() < 64 << 10 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    })
    .await
    .unwrap();
    // Far more than the socket buffers between the two ends hold: the server had to wait for
    // this reader while the others were served.
    assert!(received.len() > 256 << 10, "{} bytes", received.len());
    let received = String::from_utf8_lossy(&received).into_owned();
    assert!(received.starts_with("HTTP/1.1 200"), "{}", &received[..200]);
    assert!(
        received.contains("\"completion_tokens\":6000"),
        "{}",
        &received[received.len().saturating_sub(500)..]
    );
    assert!(received.contains("data: [DONE]\n\n"), "no [DONE]");
    server.finish();
}
