//! Forward-pass metrics (FPM): what one rank's pass scheduled and what it left queued, as the
//! planner observes it.
//!
//! INTERFACE
//! - [`ForwardPassMetrics`]: one rank's pass — scheduled prefill (requests, tokens computed this
//!   pass, prefix tokens already computed, prompt-length variance), scheduled decodes (sequence
//!   lengths), queued prefill (prompt lengths of waiting requests) and queued decodes (KV of
//!   preempted requests), plus the pass duration. All-zero for an idle rank.
//! - [`FpmBuilder`]: accumulates one pass's requests (population variances, Welford's method).

/// One rank's forward pass as the planner sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ForwardPassMetrics {
    /// Pass duration, seconds.
    pub wall_time_s: f64,
    pub num_prefill_requests: u32,
    /// Prompt tokens computed this pass.
    pub sum_prefill_tokens: u64,
    pub var_prefill_length: f64,
    /// Prompt tokens of the scheduled prefills already computed (or cached) before this pass.
    pub sum_prefill_kv_tokens: u64,
    pub num_decode_requests: u32,
    pub sum_decode_kv_tokens: u64,
    pub var_decode_kv_tokens: f64,
    pub num_queued_prefill: u32,
    pub sum_queued_prefill_tokens: u64,
    pub var_queued_prefill_length: f64,
    pub num_queued_decode: u32,
    pub sum_queued_decode_kv_tokens: u64,
    pub var_queued_decode_kv_tokens: f64,
}

/// Count, sum and population variance of a stream of values (Welford).
#[derive(Clone, Copy, Debug, Default)]
struct Moments {
    count: u32,
    sum: f64,
    mean: f64,
    m2: f64,
}

impl Moments {
    fn add(&mut self, value: f64) {
        self.count += 1;
        self.sum += value;
        let delta = value - self.mean;
        self.mean += delta / f64::from(self.count);
        self.m2 += delta * (value - self.mean);
    }

    fn variance(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.m2 / f64::from(self.count)
        }
    }
}

/// Builds the metrics of one pass from its requests.
#[derive(Clone, Debug, Default)]
pub struct FpmBuilder {
    prefill: Moments,
    prefill_tokens: u64,
    prefill_kv_tokens: u64,
    decode: Moments,
    queued_prefill: Moments,
    queued_decode: Moments,
}

impl FpmBuilder {
    /// A request that computed `computed` prompt tokens this pass, of a `prompt_len`-token
    /// prompt whose first `prefix` tokens were already in KV.
    pub fn scheduled_prefill(&mut self, prompt_len: usize, prefix: usize, computed: usize) {
        self.prefill_tokens += computed as u64;
        self.prefill_kv_tokens += prefix as u64;
        self.prefill.add(prompt_len as f64);
    }

    /// A decoding request with `sequence_len` tokens (prompt and output so far).
    pub fn scheduled_decode(&mut self, sequence_len: usize) {
        self.decode.add(sequence_len as f64);
    }

    /// A waiting request that has not started.
    pub fn queued_prefill(&mut self, prompt_len: usize) {
        self.queued_prefill.add(prompt_len as f64);
    }

    /// A waiting request that holds or held decode KV (preempted, or a handoff destination).
    pub fn queued_decode(&mut self, kv_tokens: usize) {
        self.queued_decode.add(kv_tokens as f64);
    }

    pub fn finish(&self, wall_time_s: f64) -> ForwardPassMetrics {
        ForwardPassMetrics {
            wall_time_s,
            num_prefill_requests: self.prefill.count,
            sum_prefill_tokens: self.prefill_tokens,
            var_prefill_length: self.prefill.variance(),
            sum_prefill_kv_tokens: self.prefill_kv_tokens,
            num_decode_requests: self.decode.count,
            sum_decode_kv_tokens: self.decode.sum as u64,
            var_decode_kv_tokens: self.decode.variance(),
            num_queued_prefill: self.queued_prefill.count,
            sum_queued_prefill_tokens: self.queued_prefill.sum as u64,
            var_queued_prefill_length: self.queued_prefill.variance(),
            num_queued_decode: self.queued_decode.count,
            sum_queued_decode_kv_tokens: self.queued_decode.sum as u64,
            var_queued_decode_kv_tokens: self.queued_decode.variance(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn population_variance_and_sums() {
        let mut builder = FpmBuilder::default();
        for len in [100, 200, 300] {
            builder.queued_prefill(len);
        }
        builder.scheduled_prefill(2048, 512, 1024);
        builder.scheduled_decode(10);
        builder.scheduled_decode(30);
        let fpm = builder.finish(0.5);
        assert_eq!(fpm.num_queued_prefill, 3);
        assert_eq!(fpm.sum_queued_prefill_tokens, 600);
        assert!((fpm.var_queued_prefill_length - 20000.0 / 3.0).abs() < 1e-9);
        assert_eq!(
            (fpm.sum_prefill_tokens, fpm.sum_prefill_kv_tokens),
            (1024, 512)
        );
        assert_eq!((fpm.num_decode_requests, fpm.sum_decode_kv_tokens), (2, 40));
        assert_eq!(fpm.var_decode_kv_tokens, 100.0);
        assert_eq!(fpm.wall_time_s, 0.5);
    }
}
