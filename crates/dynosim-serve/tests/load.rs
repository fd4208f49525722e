//! A CI-sized version of the load measurement (`bench/serve-load.sh`): many streaming
//! connections at once for a few seconds. Asserts what must hold however loaded the machine
//! is: no errors, every answer whole, the metrics and the report agree with what the clients
//! received, nothing left of the requests once they ended, and no token left the server
//! before its simulated time. The delays are printed, not asserted.

mod load_client;
mod serving;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dynosim::report::{RecordSink, RequestRecord};
use dynosim::sim::external::ServeOutputs;
use dynosim_serve::ServeConfig;
use load_client::LoadPlan;
use serving::metric;

const DEADLINE: Duration = Duration::from_secs(120);

/// The served run's records, kept where the test can read them.
#[derive(Clone, Default)]
struct Records(Arc<Mutex<Vec<RequestRecord>>>);

impl RecordSink for Records {
    fn accept(&mut self, record: RequestRecord) {
        self.0.lock().unwrap().push(record);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_streams_at_once_all_complete_and_leave_nothing_behind() {
    let mut spec = serving::synthetic_deployment(
        r#"{"num_gpu_blocks": 8192, "block_size": 16, "max_num_seqs": 256}"#,
    )
    .into_spec()
    .expect("a valid deployment");
    // The per-request records, for the simulated times of each request.
    spec.capture_requests = true;
    let records = Records::default();
    let config = ServeConfig {
        host: "127.0.0.1".into(),
        port: 0,
        model: "load".into(),
        speed: 1.0,
        max_body_bytes: 1 << 20,
        max_connections: 256,
        default_max_tokens: 8,
    };
    let outputs = ServeOutputs {
        records: Some(Box::new(records.clone())),
        timeseries: false,
    };
    let server = serving::start(spec, config, None, outputs, DEADLINE);
    let address = server.address;
    let plan = LoadPlan {
        url: format!("http://{address}"),
        model: "load".into(),
        connections: 100,
        duration: Duration::from_secs(4),
        ramp: Duration::from_secs(1),
        max_tokens: 30,
        prompt_words: 60,
        request_timeout: DEADLINE,
    };
    let result = tokio::time::timeout(DEADLINE, load_client::run(&plan))
        .await
        .expect("the load ends");
    assert_eq!(result.errors(), Vec::<&str>::new());
    assert!(result.outcomes.len() >= plan.connections);
    for outcome in &result.outcomes {
        assert!(outcome.done, "{outcome:?}");
        assert_eq!(outcome.tokens, plan.max_tokens, "{outcome:?}");
        assert_eq!(
            outcome.completion_tokens,
            Some(plan.max_tokens),
            "{outcome:?}"
        );
    }
    let requests = result.outcomes.len() as f64;
    let tokens = result.tokens() as f64;

    let text = reqwest::get(format!("{}/metrics", plan.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(metric(&text, "dynosim:requests_finished_total"), requests);
    assert_eq!(metric(&text, "vllm:generation_tokens_total"), tokens);
    // Nothing of the ended requests is held: no request running or waiting, no KV in use.
    assert_eq!(metric(&text, "vllm:num_requests_running"), 0.0, "{text}");
    assert_eq!(metric(&text, "vllm:num_requests_waiting"), 0.0, "{text}");
    assert_eq!(metric(&text, "vllm:kv_cache_usage_perc"), 0.0, "{text}");
    let (buckets, delayed) = load_client::histogram(&text, "dynosim:token_delay_seconds");
    assert_eq!(delayed, tokens);
    // The run's pass ends came due on their own (no arrival woke the run for them) and the
    // pacing histogram counted them.
    let (wake_buckets, wakes) = load_client::histogram(&text, "dynosim:event_wake_delay_seconds");
    assert!(wakes > 0.0, "{text}");

    let served = server.stop(1);
    let (report, _) = served.simulated.into_report(served.wall_time_ms);
    assert_eq!(
        report.get("completed_requests").map(|v| v.as_f64()),
        Some(requests)
    );
    assert_eq!(
        report.get("total_output_tokens").map(|v| v.as_f64()),
        Some(tokens)
    );

    // Every request the client saw is one of the run's, and no token reached the client
    // before its simulated time (the client's clock starts before the server's arrival).
    let records: Vec<serde_json::Value> = records
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|record| serde_json::to_value(record).unwrap())
        .collect();
    let simulated = load_client::simulated_times(&records);
    let (added, unmatched) = load_client::added_latency_ms(&result.outcomes, &simulated, 1.0);
    assert_eq!(unmatched, 0);
    assert_eq!(added.len(), 2 * result.outcomes.len());
    let earliest = load_client::quantile(&added, 0.0);
    assert!(
        earliest > -1e-3,
        "a token reached the client {earliest} ms before its simulated time"
    );
    eprintln!(
        "load test: {requests} requests, {tokens} tokens; server delay per token p99 <= {} ms \
         (the simulating thread's wake p99 <= {} ms); client-seen added latency p50 {:.2} ms, \
         p99 {:.2} ms, max {:.2} ms",
        load_client::histogram_quantile_bound(&buckets, delayed, 0.99) * 1000.0,
        load_client::histogram_quantile_bound(&wake_buckets, wakes, 0.99) * 1000.0,
        load_client::quantile(&added, 0.5),
        load_client::quantile(&added, 0.99),
        load_client::quantile(&added, 1.0),
    );
}
