//! The Prometheus metrics of `/metrics`, named as vLLM names them where it has the metric.
//!
//! Latencies are simulated (model) times in seconds: what the deployment's users would see,
//! not the server's own overhead. Every metric carries `model_name`.

use std::borrow::Cow;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    pub ttft: Histogram,
    pub inter_token: Histogram,
    pub e2e: Histogram,
    pub queue_time: Histogram,
    pub token_delay: Histogram,
    pub wake_delay: Histogram,
    pub wall_ttft: Histogram,
    pub wall_itl: Histogram,
    pub running: Gauge<i64>,
    pub waiting: Gauge<i64>,
    pub kv_usage: Gauge<f64, AtomicU64>,
    pub prefix_queries: Counter,
    pub prefix_hits: Counter,
    pub prompt_tokens: Counter,
    pub generation_tokens: Counter,
    pub finished: Counter,
    pub canceled: Counter,
    pub rejected: Counter,
}

/// Latency buckets in seconds (vLLM's TTFT buckets, which also suit end-to-end times).
const LATENCY_BUCKETS: [f64; 20] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0,
];
/// The server's own delay per token, in seconds.
const DELAY_BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0,
];
/// Inter-token buckets in seconds.
const TOKEN_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.5,
];

impl Metrics {
    pub fn new(model: &str) -> Self {
        let labels = [(Cow::Borrowed("model_name"), Cow::Owned(model.to_string()))];
        let mut registry = Registry::with_labels(labels.into_iter());
        let ttft = Histogram::new(LATENCY_BUCKETS);
        let inter_token = Histogram::new(TOKEN_BUCKETS);
        let e2e = Histogram::new(LATENCY_BUCKETS);
        let queue_time = Histogram::new(LATENCY_BUCKETS);
        let token_delay = Histogram::new(DELAY_BUCKETS);
        let wake_delay = Histogram::new(DELAY_BUCKETS);
        let wall_ttft = Histogram::new(LATENCY_BUCKETS);
        let wall_itl = Histogram::new(TOKEN_BUCKETS);
        let running = Gauge::default();
        let waiting = Gauge::default();
        let kv_usage = Gauge::<f64, AtomicU64>::default();
        let counters: [Counter; 7] = Default::default();
        let [prefix_queries, prefix_hits, prompt_tokens, generation_tokens, finished, canceled, rejected] =
            counters;
        registry.register(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds (simulated)",
            ttft.clone(),
        );
        registry.register(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds (simulated)",
            inter_token.clone(),
        );
        registry.register(
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds (simulated)",
            e2e.clone(),
        );
        registry.register(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent waiting before the first admission, in seconds (simulated)",
            queue_time.clone(),
        );
        registry.register(
            "dynosim:token_delay_seconds",
            "How long after its simulated time (at the server's speed) each streamed token \
             was handed to the connection: the server's own added latency",
            token_delay.clone(),
        );
        registry.register(
            "dynosim:event_wake_delay_seconds",
            "How long after its simulated time (at the server's speed) the simulating thread \
             took up each due event of the run (a pass end): the pacing part of the token \
             delay; the rest is handing that moment's tokens to the connections",
            wake_delay.clone(),
        );
        registry.register(
            "dynosim:wall_time_to_first_token_seconds",
            "Wall time from a streamed request's arrival at the server to its first token \
             handed to the connection (completed requests): the TTFT its client sees, but for \
             the network and the client itself",
            wall_ttft.clone(),
        );
        registry.register(
            "dynosim:wall_inter_token_latency_seconds",
            "Wall time between a streamed request's first and last tokens handed to the \
             connection, per token after the first (completed requests of two tokens or more)",
            wall_itl.clone(),
        );
        registry.register(
            "vllm:num_requests_running",
            "Number of requests in model execution batches",
            running.clone(),
        );
        registry.register(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed",
            waiting.clone(),
        );
        registry.register(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage: 1 means 100 percent usage",
            kv_usage.clone(),
        );
        registry.register(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in prompt tokens",
            prefix_queries.clone(),
        );
        registry.register(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in prompt tokens",
            prefix_hits.clone(),
        );
        registry.register(
            "vllm:prompt_tokens",
            "Number of prefill tokens processed",
            prompt_tokens.clone(),
        );
        registry.register(
            "vllm:generation_tokens",
            "Number of generation tokens processed",
            generation_tokens.clone(),
        );
        registry.register(
            "dynosim:requests_finished",
            "Requests that completed",
            finished.clone(),
        );
        registry.register(
            "dynosim:requests_canceled",
            "Requests cancelled because their client went away (their KV was released)",
            canceled.clone(),
        );
        registry.register(
            "dynosim:requests_rejected",
            "Requests the deployment rejected",
            rejected.clone(),
        );
        Self {
            registry,
            ttft,
            inter_token,
            e2e,
            queue_time,
            token_delay,
            wake_delay,
            wall_ttft,
            wall_itl,
            running,
            waiting,
            kv_usage,
            prefix_queries,
            prefix_hits,
            prompt_tokens,
            generation_tokens,
            finished,
            canceled,
            rejected,
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}
