//! Timing models: how long a forward pass takes. One narrow interface so that more models
//! (profile tables, AIC) can be added later.
//!
//! The reference keeps pass durations as `std::time::Duration` (nanosecond resolution): each
//! raw millisecond figure is converted to a `Duration`, divided by its speed-up ratio through
//! another `Duration`, and converted back to milliseconds when it is added to the clock. The
//! helpers here reproduce that arithmetic so that virtual times agree bit for bit.

pub mod aic;

use std::sync::Arc;
use std::time::Duration;

use crate::config::EngineArgs;
use aic::AicTiming;

/// The two parts of one pass, in milliseconds, each already rounded to whole nanoseconds and
/// scaled. A pass that starts at `t` ends at `t + prefill_ms + decode_ms`, evaluated left to
/// right (see [`PassTime::end_ms`]): the reference adds the parts to the clock one at a time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PassTime {
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// Requests given work in the pass (a prompt chunk, or a token to compute for a request
    /// that will decode), not counting work undone by a preemption. The reference's multi-worker
    /// loop treats a pass with such work as progress even when it took no time and changed no
    /// request's visible state.
    pub scheduled_requests: usize,
}

impl PassTime {
    /// When a pass that starts at `start_ms` ends (the timestamp of its tokens).
    pub fn end_ms(&self, start_ms: f64) -> f64 {
        start_ms + self.prefill_ms + self.decode_ms
    }

    /// Both parts together (for reporting; use [`PassTime::end_ms`] to advance a clock).
    pub fn total_ms(&self) -> f64 {
        self.prefill_ms + self.decode_ms
    }
}

/// Converts a raw duration in ms to the clock increment the reference uses: rounded to
/// nanoseconds, then divided by `ratio` through a second rounding unless `ratio <= 0`.
pub fn scaled_clock_ms(raw_ms: f64, ratio: f64) -> f64 {
    let raw = to_duration(raw_ms / 1000.0);
    let scaled = if ratio <= 0.0 || raw.is_zero() {
        raw
    } else {
        to_duration(raw.as_secs_f64() / ratio)
    };
    scaled.as_secs_f64() * 1000.0
}

fn to_duration(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
}

/// The default polynomial prefill cost, in raw ms, of a batch of `batch_size` requests whose
/// prompt coverage summed to `total_after` tokens after this pass and `total_before` before
/// it. The two per-request means are integer divisions, as in the reference.
pub fn polynomial_prefill_ms(batch_size: usize, total_after: usize, total_before: usize) -> f64 {
    if batch_size == 0 {
        return 0.0;
    }
    let per_request = (total_after / batch_size).saturating_sub(total_before / batch_size);
    if per_request == 0 {
        return 0.0;
    }
    let tokens = (batch_size * per_request) as f64;
    let ms = 4.209989e-07 * tokens.powi(2) + 1.518344e-02 * tokens + 1.650142e+01;
    ms.max(0.0)
}

/// The default polynomial decode cost, in raw ms, from the KV utilisation
/// `active_kv_tokens / total_kv_tokens`. Floored at 1 ms.
pub fn polynomial_decode_ms(active_kv_tokens: usize, total_kv_tokens: usize) -> f64 {
    let utilisation = if total_kv_tokens > 0 {
        active_kv_tokens as f64 / total_kv_tokens as f64
    } else {
        1.0
    };
    let ms = -25.74 * utilisation.powi(2) + 54.01 * utilisation + 5.74;
    ms.max(1.0)
}

/// A rank's timing model with its speed-up ratios: the default polynomial, or AIC tables when
/// the engine args configure them (built before the run; shared by every rank).
#[derive(Clone, Debug)]
pub struct TimingModel {
    prefill_ratio: f64,
    decode_ratio: f64,
    aic: Option<AicTiming>,
}

impl TimingModel {
    pub fn new(args: &EngineArgs) -> Self {
        Self {
            prefill_ratio: args.speedup_ratio,
            decode_ratio: args.speedup_ratio * args.decode_speedup_ratio,
            aic: args
                .aic
                .as_ref()
                .and_then(|aic| aic.tables.as_ref())
                .map(|tables| AicTiming::new(Arc::clone(tables))),
        }
    }

    /// Clock increment for the prefill part of a pass (0 when nothing was prefilled).
    pub fn prefill_clock_ms(
        &self,
        batch_size: usize,
        total_after: usize,
        total_before: usize,
    ) -> f64 {
        if batch_size == 0 {
            return 0.0;
        }
        let raw = match &self.aic {
            Some(aic) => aic.prefill_ms(batch_size, total_after, total_before),
            None => polynomial_prefill_ms(batch_size, total_after, total_before),
        };
        scaled_clock_ms(raw, self.prefill_ratio)
    }

    /// Clock increment for the decode part of a pass in which `ready` requests, whose contexts
    /// sum to `ready_context_tokens`, emit a token.
    pub fn decode_clock_ms(
        &self,
        ready: usize,
        active_kv_tokens: usize,
        total_kv_tokens: usize,
        ready_context_tokens: usize,
    ) -> f64 {
        if ready == 0 {
            return 0.0;
        }
        let raw = match &self.aic {
            Some(aic) => aic.decode_ms(ready, ready_context_tokens),
            None => polynomial_decode_ms(active_kv_tokens, total_kv_tokens),
        };
        scaled_clock_ms(raw, self.decode_ratio)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-6
    }

    fn dec_blocks(blocks: usize) -> f64 {
        polynomial_decode_ms(blocks * 64, 16384 * 64)
    }

    #[test]
    fn single_request_ttft_matches_reference() {
        // engine.md §2.4 (vllm defaults, bs 64, C 16384).
        let cases = [
            (polynomial_prefill_ms(1, 128, 0) + dec_blocks(2), 24.198391),
            (
                polynomial_prefill_ms(1, 1000, 0) + dec_blocks(16),
                37.898579,
            ),
            (
                polynomial_prefill_ms(1, 1024, 0) + dec_blocks(16),
                38.283432,
            ),
            (
                polynomial_prefill_ms(1, 4096, 0) + dec_blocks(64),
                91.706564,
            ),
            (
                2.0 * polynomial_prefill_ms(1, 8192, 0) + dec_blocks(256),
                344.851458,
            ),
        ];
        for (got, want) in cases {
            assert!(close(got, want), "{got} vs {want}");
        }
        let ttst = [
            (3, 5.749889),
            (16, 5.792720),
            (17, 5.796013),
            (65, 5.953868),
            (257, 6.580869),
        ];
        for (blocks, want) in ttst {
            assert!(
                close(dec_blocks(blocks), want),
                "{blocks}: {} vs {want}",
                dec_blocks(blocks)
            );
        }
    }

    #[test]
    fn integer_divisions_are_observable() {
        // ISL 1000 + ISL 1000 with a 960-token hit: T = 2 * (1000 - 480) = 1040.
        let got = polynomial_prefill_ms(2, 2000, 960) + dec_blocks(17);
        assert!(close(got, 38.543563), "{got}");
        assert_eq!(polynomial_prefill_ms(2, 1, 1), 0.0);
    }

    #[test]
    fn ratios_at_or_below_zero_do_not_scale() {
        let raw = 37.5;
        assert_eq!(scaled_clock_ms(raw, 0.0), scaled_clock_ms(raw, 1.0));
        assert!((scaled_clock_ms(raw, 2.0) - 18.75).abs() < 1e-9);
        // Nanosecond rounding.
        assert_eq!(scaled_clock_ms(1.0000004, 1.0), 1.0);
        assert_eq!(scaled_clock_ms(0.0, 2.0), 0.0);
    }

    #[test]
    fn decode_is_floored_and_bounded() {
        assert!(close(polynomial_decode_ms(0, 100), 5.74));
        assert!(close(polynomial_decode_ms(100, 100), 34.01));
    }
}
