//! What a run looked like over model time, for the HTML report: throughput, queue depth,
//! per-worker load and KV use, prefix reuse, and latency histograms.
//!
//! Memory is bounded whatever the run's length: the series are [`MAX_BUCKETS`] buckets of
//! model time at most; when the run outlasts them, neighbouring buckets are merged in pairs
//! and the bucket width doubles. Per-worker series cost one bucket row per worker; histograms
//! have fixed, log-spaced bins.
//!
//! INTERFACE
//! - [`TimeSeries::new`] with the names of the deployment's pools (`worker`; or `prefill` and
//!   `decode`). Workers are indexed within their pool and added as they first report.
//! - Fed by the simulator: [`TimeSeries::on_pass_end`] when a worker's pass ends (its queue,
//!   batch and KV use then; the output tokens the pass gave users), or
//!   [`TimeSeries::on_pass_end_counted`] with those tokens already summed. Fed by the collector:
//!   [`TimeSeries::on_completed`] when a request completes (latencies, prompt and reused
//!   tokens, its token gaps for the ITL histogram).
//! - Read with [`TimeSeries::to_json`]: the page script's data (see that function).
//!
//! Definitions. A worker's load in a bucket is the mean over the passes it ended in that
//! bucket (none: no value, drawn as a gap). Queue depth is the sum over workers of those means
//! of waiting requests in the engines' queues (a KV router's own queue is not counted). Prefix
//! reuse in a bucket is the report's `prefix_cache_reused_ratio` restricted to the requests
//! that completed in it. Histograms count completed requests (TTFT, E2E) and the token gaps of
//! completed requests (ITL), as the report's distributions do.

use serde_json::{json, Value as Json};

use crate::engine::{PassEvent, RankLoad};

/// Buckets kept at most (even, so that pairs merge exactly).
pub const MAX_BUCKETS: usize = 240;
/// Width of a bucket before any merging.
const FIRST_BUCKET_MS: f64 = 10.0;

/// Histogram bins per decade, and the decades covered: 0.01 ms to 10^8 ms.
const BINS_PER_DECADE: usize = 10;
const LOWEST_DECADE: i32 = -2;
const DECADES: usize = 10;

/// Totals of one bucket of model time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Bucket {
    output_tokens: u64,
    completed_requests: u64,
    /// Prompt tokens, and those reused from the prefix cache, of requests completed here.
    prompt_tokens: u64,
    reused_prompt_tokens: u64,
}

impl Bucket {
    fn merge(self, other: Self) -> Self {
        Self {
            output_tokens: self.output_tokens + other.output_tokens,
            completed_requests: self.completed_requests + other.completed_requests,
            prompt_tokens: self.prompt_tokens + other.prompt_tokens,
            reused_prompt_tokens: self.reused_prompt_tokens + other.reused_prompt_tokens,
        }
    }
}

/// Sums of one worker's pass-end samples in one bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct LoadSamples {
    passes: u64,
    waiting: f64,
    running: f64,
    kv_used: f64,
}

impl LoadSamples {
    fn merge(self, other: Self) -> Self {
        Self {
            passes: self.passes + other.passes,
            waiting: self.waiting + other.waiting,
            running: self.running + other.running,
            kv_used: self.kv_used + other.kv_used,
        }
    }

    fn mean(&self, sum: f64) -> Option<f64> {
        (self.passes > 0).then(|| sum / self.passes as f64)
    }
}

/// Counts in fixed log-spaced bins; values below the first edge (zero gaps) go to bin 0,
/// values above the last to the last bin.
#[derive(Clone, Debug, PartialEq)]
struct Histogram {
    counts: Vec<u64>,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BINS_PER_DECADE * DECADES],
        }
    }
}

impl Histogram {
    fn add(&mut self, value_ms: f64) {
        self.add_repeated(value_ms, 1);
    }

    fn add_repeated(&mut self, value_ms: f64, count: u64) {
        let bins = self.counts.len();
        let position = (value_ms.log10() - f64::from(LOWEST_DECADE)) * BINS_PER_DECADE as f64;
        // NaN and -inf (a zero value) land in bin 0.
        let bin = if position.is_nan() || position < 0.0 {
            0
        } else {
            (position as usize).min(bins - 1)
        };
        self.counts[bin] += count;
    }

    /// Lower edge of bin `bin`, in ms.
    fn edge(bin: usize) -> f64 {
        10f64.powf(f64::from(LOWEST_DECADE) + bin as f64 / BINS_PER_DECADE as f64)
    }

    /// `{"edges": [...], "counts": [...]}` over the bins from the first to the last that
    /// count anything (`edges` has one more entry than `counts`).
    fn to_json(&self) -> Json {
        let first = self.counts.iter().position(|&c| c > 0);
        let last = self.counts.iter().rposition(|&c| c > 0);
        let (Some(first), Some(last)) = (first, last) else {
            return json!({"edges": [], "counts": []});
        };
        let edges: Vec<Json> = (first..=last + 1)
            .map(|bin| rounded(Self::edge(bin)))
            .collect();
        json!({"edges": edges, "counts": &self.counts[first..=last]})
    }
}

/// One pool's workers: `workers[w][bucket]`.
#[derive(Clone, Debug)]
struct PoolSeries {
    name: &'static str,
    workers: Vec<Vec<LoadSamples>>,
}

/// What a completed request contributes, as the collector knows it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompletedRequest {
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    pub prompt_tokens: usize,
    pub reused_prompt_tokens: usize,
}

/// The run's time series; see the module doc.
#[derive(Clone, Debug)]
pub struct TimeSeries {
    bucket_ms: f64,
    buckets: Vec<Bucket>,
    pools: Vec<PoolSeries>,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
}

impl TimeSeries {
    /// Series for a deployment whose pools are named `pools` (in the order the simulator
    /// numbers them in [`TimeSeries::on_pass_end`]).
    pub fn new(pools: &[&'static str]) -> Self {
        Self {
            bucket_ms: FIRST_BUCKET_MS,
            buckets: Vec::new(),
            pools: pools
                .iter()
                .map(|&name| PoolSeries {
                    name,
                    workers: Vec::new(),
                })
                .collect(),
            ttft: Histogram::default(),
            itl: Histogram::default(),
            e2e: Histogram::default(),
        }
    }

    /// Width of one bucket now, in ms.
    pub fn bucket_ms(&self) -> f64 {
        self.bucket_ms
    }

    /// Buckets recorded so far (up to the last one anything happened in).
    pub fn num_buckets(&self) -> usize {
        self.buckets.len()
    }

    /// The bucket holding `at_ms`, merging buckets until it fits and extending the series to
    /// it.
    fn bucket_index(&mut self, at_ms: f64) -> usize {
        let at_ms = at_ms.max(0.0);
        let mut index = (at_ms / self.bucket_ms) as usize;
        while index >= MAX_BUCKETS {
            self.coarsen();
            index = (at_ms / self.bucket_ms) as usize;
        }
        if self.buckets.len() <= index {
            self.buckets.resize(index + 1, Bucket::default());
        }
        index
    }

    /// Halves the resolution: bucket `i` becomes buckets `2i` and `2i + 1` merged.
    fn coarsen(&mut self) {
        fn merge_pairs<T: Copy + Default>(series: &mut Vec<T>, merge: impl Fn(T, T) -> T) {
            let merged: Vec<T> = series
                .chunks(2)
                .map(|pair| merge(pair[0], pair.get(1).copied().unwrap_or_default()))
                .collect();
            *series = merged;
        }
        merge_pairs(&mut self.buckets, Bucket::merge);
        for pool in &mut self.pools {
            for worker in &mut pool.workers {
                merge_pairs(worker, LoadSamples::merge);
            }
        }
        self.bucket_ms *= 2.0;
    }

    /// Worker `worker` of pool `pool` ended a pass at `at_ms` holding `load`; the pass's
    /// tokens count as output when `tokens_reach_users` (not a disaggregated prefill pass).
    pub fn on_pass_end(
        &mut self,
        at_ms: f64,
        pool: usize,
        worker: usize,
        load: RankLoad,
        events: &[PassEvent],
        tokens_reach_users: bool,
    ) {
        let user_tokens = if tokens_reach_users {
            Self::tokens_of(events)
        } else {
            0
        };
        self.on_pass_end_counted(at_ms, pool, worker, load, user_tokens);
    }

    /// The output tokens a pass's `events` emitted.
    pub fn tokens_of(events: &[PassEvent]) -> usize {
        events
            .iter()
            .map(|event| match *event {
                PassEvent::Tokens { count, .. } => count,
                _ => 0,
            })
            .sum()
    }

    /// [`TimeSeries::on_pass_end`] with the pass's tokens that reached users already counted
    /// (what the collector's own thread receives instead of the pass's events).
    pub fn on_pass_end_counted(
        &mut self,
        at_ms: f64,
        pool: usize,
        worker: usize,
        load: RankLoad,
        user_tokens: usize,
    ) {
        let index = self.bucket_index(at_ms);
        self.buckets[index].output_tokens += user_tokens as u64;
        let Some(pool) = self.pools.get_mut(pool) else {
            return;
        };
        if pool.workers.len() <= worker {
            pool.workers.resize_with(worker + 1, Vec::new);
        }
        let series = &mut pool.workers[worker];
        if series.len() <= index {
            series.resize(index + 1, LoadSamples::default());
        }
        let kv_used = if load.kv_capacity_tokens > 0 {
            load.kv_used_tokens as f64 / load.kv_capacity_tokens as f64
        } else {
            0.0
        };
        let samples = &mut series[index];
        samples.passes += 1;
        samples.waiting += load.waiting as f64;
        samples.running += load.running as f64;
        samples.kv_used += kv_used;
    }

    /// A request completed at `at_ms`; `gap_runs` are the gaps between its consecutive
    /// tokens (zero within a burst stamped at one time) as (gap, samples of it).
    pub fn on_completed(
        &mut self,
        at_ms: f64,
        request: &CompletedRequest,
        gap_runs: impl IntoIterator<Item = (f64, u64)>,
    ) {
        let index = self.bucket_index(at_ms);
        let bucket = &mut self.buckets[index];
        bucket.completed_requests += 1;
        bucket.prompt_tokens += request.prompt_tokens as u64;
        bucket.reused_prompt_tokens += request.reused_prompt_tokens as u64;
        if let Some(ttft) = request.ttft_ms {
            self.ttft.add(ttft);
        }
        if let Some(e2e) = request.e2e_ms {
            self.e2e.add(e2e);
        }
        // The report's pooled gaps.
        for (gap, samples) in gap_runs {
            self.itl.add_repeated(gap, samples);
        }
    }

    /// The series as the page script reads them:
    ///
    /// ```text
    /// { "bucket_ms": w,                      // bucket i covers [i*w, (i+1)*w) ms
    ///   "output_tokens": [..], "completed_requests": [..],
    ///   "prompt_tokens": [..], "reused_prompt_tokens": [..],   // of requests completed there
    ///   "pools": [{"name": "worker", "workers": [
    ///       {"waiting": [..], "running": [..], "kv_used": [..]}]}],  // means; null = no pass
    ///   "histograms": {"ttft_ms" | "itl_ms" | "e2e_ms": {"edges": [..], "counts": [..]}} }
    /// ```
    ///
    /// Every series has one entry per bucket. With more than `max_workers` workers in a pool,
    /// its workers are summarised as two rows, `mean` and `max` over the workers.
    pub fn to_json(&self, max_workers: usize) -> Json {
        let len = self.buckets.len();
        let column = |f: fn(&Bucket) -> u64| -> Vec<u64> { self.buckets.iter().map(f).collect() };
        let pools: Vec<Json> = self
            .pools
            .iter()
            .map(|pool| {
                json!({
                    "name": pool.name,
                    "workers": pool_rows(pool, len, max_workers),
                })
            })
            .collect();
        json!({
            "bucket_ms": self.bucket_ms,
            "output_tokens": column(|b| b.output_tokens),
            "completed_requests": column(|b| b.completed_requests),
            "prompt_tokens": column(|b| b.prompt_tokens),
            "reused_prompt_tokens": column(|b| b.reused_prompt_tokens),
            "pools": pools,
            "histograms": {
                "ttft_ms": self.ttft.to_json(),
                "itl_ms": self.itl.to_json(),
                "e2e_ms": self.e2e.to_json(),
            },
        })
    }
}

/// Rows of per-bucket means (`null` where the worker ended no pass), one per worker, or a
/// `mean` and a `max` row over the workers when there are more than `max_workers`.
fn pool_rows(pool: &PoolSeries, len: usize, max_workers: usize) -> Vec<Json> {
    let sample = |worker: &Vec<LoadSamples>, index: usize| -> LoadSamples {
        worker.get(index).copied().unwrap_or_default()
    };
    type Field = fn(&LoadSamples) -> f64;
    let fields: [(&str, Field); 3] = [
        ("waiting", |s| s.waiting),
        ("running", |s| s.running),
        ("kv_used", |s| s.kv_used),
    ];
    if pool.workers.len() <= max_workers {
        return pool
            .workers
            .iter()
            .enumerate()
            .map(|(index, worker)| {
                let mut row = serde_json::Map::new();
                row.insert("label".into(), json!(format!("{} {index}", pool.name)));
                for (name, field) in fields {
                    let values: Vec<Json> = (0..len)
                        .map(|b| {
                            let s = sample(worker, b);
                            s.mean(field(&s)).map_or(Json::Null, rounded)
                        })
                        .collect();
                    row.insert(name.into(), Json::Array(values));
                }
                Json::Object(row)
            })
            .collect();
    }
    // Summaries: an idle worker (no pass in the bucket) counts as holding nothing.
    let summary = |label: &str, reduce: fn(&[f64]) -> f64| -> Json {
        let mut row = serde_json::Map::new();
        row.insert(
            "label".into(),
            json!(format!("{} ({label} of {})", pool.name, pool.workers.len())),
        );
        for (name, field) in fields {
            let values: Vec<Json> = (0..len)
                .map(|b| {
                    let means: Vec<f64> = pool
                        .workers
                        .iter()
                        .map(|w| {
                            let s = sample(w, b);
                            s.mean(field(&s)).unwrap_or(0.0)
                        })
                        .collect();
                    rounded(reduce(&means))
                })
                .collect();
            row.insert(name.into(), Json::Array(values));
        }
        Json::Object(row)
    };
    vec![
        summary("mean", |v| v.iter().sum::<f64>() / v.len().max(1) as f64),
        summary("max", |v| v.iter().copied().fold(0.0, f64::max)),
    ]
}

/// Four significant digits: the page needs no more, and the file stays small.
fn rounded(value: f64) -> Json {
    if !value.is_finite() || value == 0.0 {
        return json!(0.0);
    }
    let digits = 3 - value.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits);
    json!((value * scale).round() / scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(waiting: usize, running: usize, used: usize) -> RankLoad {
        RankLoad {
            waiting,
            running,
            kv_used_tokens: used,
            kv_capacity_tokens: 100,
        }
    }

    #[test]
    fn tokens_and_loads_land_in_the_bucket_of_their_time() {
        let mut series = TimeSeries::new(&["worker"]);
        let tokens = [
            PassEvent::Tokens { id: 0, count: 3 },
            PassEvent::Completed { id: 0 },
        ];
        series.on_pass_end(5.0, 0, 1, load(2, 4, 50), &tokens, true);
        series.on_pass_end(25.0, 0, 1, load(0, 2, 10), &tokens, true);
        series.on_pass_end(26.0, 0, 1, load(2, 2, 30), &tokens, false);
        let json = series.to_json(8);
        assert_eq!(json["bucket_ms"], 10.0);
        assert_eq!(json["output_tokens"], json!([3, 0, 3]));
        let workers = json["pools"][0]["workers"].as_array().unwrap();
        // Worker 0 never reported: a row of gaps.
        assert_eq!(workers[0]["running"], json!([null, null, null]));
        assert_eq!(workers[1]["running"], json!([4.0, null, 2.0]));
        assert_eq!(workers[1]["waiting"], json!([2.0, null, 1.0]));
        assert_eq!(workers[1]["kv_used"], json!([0.5, null, 0.2]));
    }

    #[test]
    fn a_long_run_merges_buckets_and_keeps_every_total() {
        let mut series = TimeSeries::new(&["worker"]);
        let tokens = [PassEvent::Tokens { id: 0, count: 1 }];
        let mut at_ms = 0.0;
        for _ in 0..100_000 {
            series.on_pass_end(at_ms, 0, 0, load(1, 1, 1), &tokens, true);
            at_ms += 7.0;
        }
        assert!(series.num_buckets() <= MAX_BUCKETS);
        assert!(series.num_buckets() > MAX_BUCKETS / 2);
        assert!(series.bucket_ms() * MAX_BUCKETS as f64 > at_ms - 7.0);
        let json = series.to_json(8);
        let total: u64 = json["output_tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(total, 100_000);
        // Merged means stay means.
        let running = &json["pools"][0]["workers"][0]["running"];
        assert!(running.as_array().unwrap().iter().all(|v| *v == json!(1.0)));
    }

    #[test]
    fn completions_fill_reuse_and_histograms() {
        let mut series = TimeSeries::new(&["worker"]);
        let request = CompletedRequest {
            ttft_ms: Some(100.0),
            e2e_ms: Some(1000.0),
            prompt_tokens: 40,
            reused_prompt_tokens: 10,
        };
        // Tokens at 100, 120 (two) and 150 ms: gaps of 20 ms, 0 (a burst of two), 30 ms.
        series.on_completed(15.0, &request, [(20.0, 1), (0.0, 1), (30.0, 1)]);
        let json = series.to_json(8);
        assert_eq!(json["completed_requests"], json!([0, 1]));
        assert_eq!(json["prompt_tokens"], json!([0, 40]));
        assert_eq!(json["reused_prompt_tokens"], json!([0, 10]));
        let itl = &json["histograms"]["itl_ms"];
        let counts: u64 = itl["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(counts, 3);
        assert_eq!(
            itl["edges"].as_array().unwrap().len(),
            itl["counts"].as_array().unwrap().len() + 1
        );
        let ttft = &json["histograms"]["ttft_ms"];
        assert_eq!(ttft["counts"], json!([1]));
        assert_eq!(ttft["edges"], json!([100.0, 125.9]));
    }

    #[test]
    fn many_workers_are_summarised_as_mean_and_max() {
        let mut series = TimeSeries::new(&["decode"]);
        for worker in 0..10 {
            series.on_pass_end(1.0, 0, worker, load(0, worker, 0), &[], true);
        }
        let json = series.to_json(4);
        let rows = json["pools"][0]["workers"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["label"], "decode (mean of 10)");
        assert_eq!(rows[0]["running"], json!([4.5]));
        assert_eq!(rows[1]["running"], json!([9.0]));
    }
}
