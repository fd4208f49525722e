//! A streaming load on `dynosim serve`: many connections, each sending streaming completions
//! back to back for a while, timing every token it receives. Shared by the CI-sized load test
//! (`tests/load.rs`) and the full-sized measurement (`examples/serve_load.rs`,
//! `bench/serve-load.sh`).
//!
//! What the server added to each request's latencies is measured against the simulated times
//! the served run reports for it (its `--report-jsonl` records, or the run's own records):
//! the client's time from sending to each of the first and the last token, less the simulated
//! time from arrival to that token. Both clocks start when the request leaves the client or
//! arrives, so no clock is shared between client and server.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// What to send.
#[derive(Clone, Debug)]
pub struct LoadPlan {
    /// The server's base address (`http://host:port`).
    pub url: String,
    pub model: String,
    /// Streams kept open at once (each on its own connection).
    pub connections: usize,
    /// How long new requests are started; those in flight then finish.
    pub duration: Duration,
    /// The connections start spread over this time.
    pub ramp: Duration,
    pub max_tokens: usize,
    /// Filler words after each prompt's unique head (about one token each).
    pub prompt_words: usize,
    /// Longest wait for any one request.
    pub request_timeout: Duration,
}

/// One request as the client saw it.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The server's number for it (`cmpl-<n>`), also its index in the served run's records.
    pub id: Option<usize>,
    pub sent: Instant,
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    /// Token chunks received.
    pub tokens: usize,
    /// The usage chunk's completion tokens.
    pub completion_tokens: Option<usize>,
    pub done: bool,
    pub error: Option<String>,
}

/// Everything the load saw.
pub struct LoadResult {
    pub outcomes: Vec<Outcome>,
    pub elapsed: Duration,
}

impl LoadResult {
    pub fn errors(&self) -> Vec<&str> {
        self.outcomes
            .iter()
            .filter_map(|outcome| outcome.error.as_deref())
            .collect()
    }

    pub fn tokens(&self) -> usize {
        self.outcomes.iter().map(|outcome| outcome.tokens).sum()
    }
}

/// Runs `plan`: `connections` tasks on the caller's runtime, each sending requests one after
/// the other until `duration` has passed.
pub async fn run(plan: &LoadPlan) -> LoadResult {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(plan.connections)
        .tcp_nodelay(true)
        .timeout(plan.request_timeout)
        .build()
        .expect("an HTTP client");
    let started = Instant::now();
    let plan = Arc::new(plan.clone());
    let tasks: Vec<_> = (0..plan.connections)
        .map(|connection| {
            let client = client.clone();
            let plan = Arc::clone(&plan);
            tokio::spawn(async move {
                let offset = plan
                    .ramp
                    .mul_f64(connection as f64 / plan.connections as f64);
                tokio::time::sleep(offset).await;
                // The connection is opened first (and then reused): what the server adds to a
                // request's latency is measured, not the handshake.
                let _ = client.get(format!("{}/health", plan.url)).send().await;
                let mut outcomes = Vec::new();
                let mut turn = 0;
                while started.elapsed() < plan.duration {
                    let outcome = one_request(&client, &plan, connection, turn).await;
                    let failed = outcome.error.is_some();
                    outcomes.push(outcome);
                    turn += 1;
                    if failed {
                        // A failing server is not hammered in a tight loop.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                outcomes
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        match task.await {
            Ok(mut mine) => outcomes.append(&mut mine),
            Err(err) => outcomes.push(Outcome {
                id: None,
                sent: started,
                first_token: None,
                last_token: None,
                tokens: 0,
                completion_tokens: None,
                done: false,
                error: Some(format!("a client task failed: {err}")),
            }),
        }
    }
    LoadResult {
        outcomes,
        elapsed: started.elapsed(),
    }
}

/// The prompt of a connection's `turn`-th request: a unique head, then filler.
fn prompt(plan: &LoadPlan, connection: usize, turn: usize) -> String {
    let mut text = format!("Client {connection} asks question {turn}:");
    for word in 0..plan.prompt_words {
        text.push_str([" time", " and", " again", " we"][word % 4]);
    }
    text
}

async fn one_request(
    client: &reqwest::Client,
    plan: &LoadPlan,
    connection: usize,
    turn: usize,
) -> Outcome {
    let body = json!({
        "model": plan.model, "prompt": prompt(plan, connection, turn),
        "max_tokens": plan.max_tokens, "stream": true,
        "stream_options": {"include_usage": true},
    });
    let mut outcome = Outcome {
        id: None,
        sent: Instant::now(),
        first_token: None,
        last_token: None,
        tokens: 0,
        completion_tokens: None,
        done: false,
        error: None,
    };
    if let Err(err) = stream_into(client, plan, &body, &mut outcome).await {
        outcome.error = Some(err);
    } else if !outcome.done {
        outcome.error = Some("the stream ended without [DONE]".into());
    }
    outcome
}

async fn stream_into(
    client: &reqwest::Client,
    plan: &LoadPlan,
    body: &Value,
    outcome: &mut Outcome,
) -> Result<(), String> {
    let mut response = client
        .post(format!("{}/v1/completions", plan.url))
        .json(body)
        .send()
        .await
        .map_err(|err| format!("sending: {err}"))?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(format!("status {status}: {text}"));
    }
    let mut pending: Vec<u8> = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| format!("reading: {err}"))?
    {
        let received = Instant::now();
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(end) = find(&pending[start..], b"\n\n") {
            let event = &pending[start..start + end];
            start += end + 2;
            take_event(event, received, outcome)?;
        }
        pending.drain(..start);
    }
    Ok(())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// One SSE event: a token chunk, the finish chunk, the usage chunk, an error, or `[DONE]`.
fn take_event(event: &[u8], received: Instant, outcome: &mut Outcome) -> Result<(), String> {
    let Some(data) = event.strip_prefix(b"data: ") else {
        return Err(format!(
            "not an SSE data event: {}",
            String::from_utf8_lossy(event)
        ));
    };
    if data == b"[DONE]" {
        outcome.done = true;
        return Ok(());
    }
    if outcome.id.is_none() {
        outcome.id = id_of(data);
    }
    if find(data, b"\"finish_reason\":null").is_some() {
        outcome.first_token.get_or_insert(received);
        outcome.last_token = Some(received);
        outcome.tokens += 1;
    } else if find(data, b"\"error\"").is_some() {
        return Err(format!("error event: {}", String::from_utf8_lossy(data)));
    } else if find(data, b"\"usage\"").is_some() {
        let value: Value =
            serde_json::from_slice(data).map_err(|err| format!("usage chunk: {err}"))?;
        outcome.completion_tokens = value["usage"]["completion_tokens"]
            .as_u64()
            .map(|n| n as usize);
    }
    Ok(())
}

/// The number of a `cmpl-<n>` id.
fn id_of(data: &[u8]) -> Option<usize> {
    let at = find(data, b"\"id\":\"cmpl-")? + b"\"id\":\"cmpl-".len();
    let digits: String = data[at..]
        .iter()
        .take_while(|byte| byte.is_ascii_digit())
        .map(|&byte| byte as char)
        .collect();
    digits.parse().ok()
}

/// The simulated times of one served request, in model ms.
#[derive(Clone, Copy, Debug)]
pub struct Simulated {
    pub arrival_ms: f64,
    pub first_token_ms: f64,
    pub last_token_ms: f64,
}

/// The simulated times of each completed request of a served run's records (JSON objects of
/// `--report-jsonl`), by request index (from the record's uuid).
pub fn simulated_times(records: &[Value]) -> HashMap<usize, Simulated> {
    records
        .iter()
        .filter_map(|record| {
            let uuid = record["uuid"].as_str()?;
            let index = usize::from_str_radix(uuid.rsplit('-').next()?, 16).ok()?;
            Some((
                index,
                Simulated {
                    arrival_ms: record["arrival_time_ms"].as_f64()?,
                    first_token_ms: record["first_token_ms"].as_f64()?,
                    last_token_ms: record["last_token_ms"].as_f64()?,
                },
            ))
        })
        .collect()
}

/// What the server added, in ms of wall time, to the first and to the last token of each
/// request the client completed (client's time from sending, less the simulated time from
/// arrival at `speed`); and the requests without a simulated record.
pub fn added_latency_ms(
    outcomes: &[Outcome],
    simulated: &HashMap<usize, Simulated>,
    speed: f64,
) -> (Vec<f64>, usize) {
    let mut added = Vec::new();
    let mut unmatched = 0;
    for outcome in outcomes.iter().filter(|outcome| outcome.error.is_none()) {
        let times = outcome.id.and_then(|id| simulated.get(&id));
        let (Some(times), Some(first), Some(last)) =
            (times, outcome.first_token, outcome.last_token)
        else {
            unmatched += 1;
            continue;
        };
        let wall = |at: Instant| at.duration_since(outcome.sent).as_secs_f64() * 1000.0;
        added.push(wall(first) - (times.first_token_ms - times.arrival_ms) / speed);
        added.push(wall(last) - (times.last_token_ms - times.arrival_ms) / speed);
    }
    (added, unmatched)
}

/// The `q` quantile (0 to 1) of `values` (nearest rank), or NaN for none.
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// A Prometheus histogram's buckets (upper bound, cumulative count) and count, from the
/// exposition text.
pub fn histogram(text: &str, name: &str) -> (Vec<(f64, f64)>, f64) {
    let bucket_prefix = format!("{name}_bucket{{");
    let count_prefix = format!("{name}_count{{");
    let mut buckets = Vec::new();
    let mut count = 0.0;
    for line in text.lines() {
        let value = line
            .rsplit(' ')
            .next()
            .and_then(|value| value.parse::<f64>().ok());
        if line.starts_with(&bucket_prefix) {
            let bound = line
                .split("le=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .map(|le| {
                    if le == "+Inf" {
                        f64::INFINITY
                    } else {
                        le.parse().unwrap_or(f64::NAN)
                    }
                });
            if let (Some(bound), Some(value)) = (bound, value) {
                buckets.push((bound, value));
            }
        } else if line.starts_with(&count_prefix) {
            count = value.unwrap_or(0.0);
        }
    }
    (buckets, count)
}

/// The smallest bucket bound under which at least the fraction `q` of a histogram's
/// observations fall (an upper bound on its `q` quantile).
pub fn histogram_quantile_bound(buckets: &[(f64, f64)], count: f64, q: f64) -> f64 {
    buckets
        .iter()
        .find(|(_, cumulative)| *cumulative >= q * count)
        .map_or(f64::INFINITY, |(bound, _)| *bound)
}

/// Resident and peak resident memory of process `pid`, in MB (Linux).
pub fn memory_mb(pid: u32) -> Option<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU seconds (user and system) process `pid` has used (Linux; clock ticks of 1/100 s).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) in parentheses.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) / 100.0)
}
