//! Timing models: how long a forward pass takes.
//!
//! INTERFACE. A scheduler describes each pass once, in two parts, and asks its rank's
//! [`TimingModel`] for the clock increments:
//! - [`PrefillBatch`]: the requests that got prompt tokens this pass, with the prompt tokens each
//!   had covered before the pass (cached prefix or earlier chunks) and after it, summed;
//! - [`DecodeBatch`]: the requests ready to emit a token, the KV tokens active on the rank and
//!   its capacity, and the summed context length of the ready requests.
//!
//! A [`PassTimer`] turns a description into raw milliseconds; [`TimingModel`] adds what every
//! model shares (nothing to do costs nothing, the speed-up ratios, nanosecond rounding). The
//! timers are the default [`Polynomial`], the measured [`ProfileTable`]
//! (`planner_profile_data`, loaded and checked when the engine arguments are parsed) and the
//! AIC tables ([`crate::aic::AicTables`], built by `dynosim_aic_tables::prepare` before the
//! run; [`aic`]). One timer instance serves every rank built from one [`EngineArgs`]: the ranks
//! share it through an `Arc`, and a timer never changes after it is built, so nothing is read
//! or built during a run.
//!
//! The reference keeps pass durations as `std::time::Duration` (nanosecond resolution): each
//! raw millisecond figure is converted to a `Duration`, divided by its speed-up ratio through
//! another `Duration`, and converted back to milliseconds when it is added to the clock. The
//! helpers here reproduce that arithmetic so that virtual times agree bit for bit.

pub mod aic;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{EngineArgs, ProfileTable, TimingSource};

/// The prefill work of one pass: `requests` requests were given prompt tokens; together they
/// had covered `covered_before` prompt tokens before the pass and cover `covered_after` after
/// it. Requests whose chunk was undone (preempted in the same pass) are removed again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefillBatch {
    pub requests: usize,
    pub covered_before: usize,
    pub covered_after: usize,
}

impl PrefillBatch {
    /// Adds a request whose prompt coverage went from `before` to `after` tokens.
    pub fn add(&mut self, before: usize, after: usize) {
        self.requests += 1;
        self.covered_before += before;
        self.covered_after += after;
    }

    /// Takes back a request added with [`PrefillBatch::add`].
    pub fn remove(&mut self, before: usize, after: usize) {
        self.requests = self.requests.saturating_sub(1);
        self.covered_before = self.covered_before.saturating_sub(before);
        self.covered_after = self.covered_after.saturating_sub(after);
    }

    /// The mean prefix per request, `⌊covered_before / requests⌋` (0 for an empty batch).
    pub fn mean_prefix(&self) -> usize {
        self.covered_before.checked_div(self.requests).unwrap_or(0)
    }

    /// The mean new prompt tokens per request: `⌊after / n⌋ − ⌊before / n⌋`. The reference
    /// reduces the batch to these two integer means, and the rounding is observable.
    pub fn mean_new_tokens(&self) -> usize {
        let after = self.covered_after.checked_div(self.requests).unwrap_or(0);
        after.saturating_sub(self.mean_prefix())
    }

    /// New prompt tokens of the batch as the models see them: `requests × mean_new_tokens`.
    pub fn new_tokens(&self) -> usize {
        self.requests * self.mean_new_tokens()
    }
}

/// The decode work of one pass: `ready` requests emit a token (or a speculative burst).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeBatch {
    pub ready: usize,
    /// KV tokens in use on the rank as the engine counts them (vLLM / TRT-LLM: active blocks
    /// × block size; SGLang: the running sequences' lengths, capped at the capacity).
    pub active_kv_tokens: usize,
    /// The rank's KV capacity in tokens.
    pub total_kv_tokens: usize,
    /// Sum of the ready requests' sequence lengths (prompt + generated, before this pass's
    /// tokens).
    pub context_tokens: usize,
}

impl DecodeBatch {
    /// The mean context length of the ready requests, `⌊context_tokens / ready⌋`.
    pub fn mean_context(&self) -> usize {
        self.context_tokens.checked_div(self.ready).unwrap_or(0)
    }
}

/// A timing model: raw pass durations in milliseconds, before speed-up ratios. Called only for
/// non-empty batches (at least one request). Implementations are immutable after construction
/// and shared by every rank of an engine configuration.
pub trait PassTimer: Debug + Send + Sync {
    /// Raw prefill duration of `batch` (at least one request).
    fn prefill_ms(&self, batch: &PrefillBatch) -> f64;
    /// Raw decode duration of `batch` (at least one ready request).
    fn decode_ms(&self, batch: &DecodeBatch) -> f64;
    /// The part of a batch that [`PassTimer::decode_ms`] reads: batches with equal inputs take
    /// the same time, which lets a rank remember durations instead of recomputing them every
    /// pass. The default is the whole batch.
    fn decode_inputs(&self) -> DecodeInputs {
        DecodeInputs::Whole
    }
    /// A lower bound of [`PassTimer::decode_ms`] over every batch (0 unless the timer floors
    /// its decode durations): with a positive bound every decode step takes time, which lets
    /// the simulator commit runs of decode passes ahead of the event loop.
    fn decode_floor_ms(&self) -> f64 {
        0.0
    }
}

/// Which parts of a [`DecodeBatch`] a timer's decode duration depends on. A rank asks its
/// timer once, when it is built, and then reduces every batch itself, without a call through
/// the shared timer each pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeInputs {
    /// Every field.
    Whole,
    /// The KV tokens in use and the capacity (the polynomial).
    KvUtilisation,
    /// The KV tokens in use and the mean context (profile tables).
    KvAndMeanContext,
    /// The ready requests and the mean context (AIC).
    ReadyAndMeanContext,
}

impl DecodeInputs {
    /// `batch` reduced to these inputs (the other fields zeroed; `ready` is kept at 1 where it
    /// is not read, so that a reduced batch is never empty).
    pub fn of(self, batch: &DecodeBatch) -> DecodeBatch {
        match self {
            DecodeInputs::Whole => *batch,
            DecodeInputs::KvUtilisation => DecodeBatch {
                ready: 1,
                active_kv_tokens: batch.active_kv_tokens,
                total_kv_tokens: batch.total_kv_tokens,
                context_tokens: 0,
            },
            DecodeInputs::KvAndMeanContext => DecodeBatch {
                ready: 1,
                active_kv_tokens: batch.active_kv_tokens,
                total_kv_tokens: 0,
                context_tokens: batch.mean_context(),
            },
            DecodeInputs::ReadyAndMeanContext => DecodeBatch {
                ready: batch.ready,
                active_kv_tokens: 0,
                total_kv_tokens: 0,
                context_tokens: batch.mean_context(),
            },
        }
    }
}

/// The reference's default polynomials (engine.md §2.2, §2.3). They describe no real model:
/// prefill depends on the new tokens only, decode on the KV utilisation only.
#[derive(Clone, Copy, Debug, Default)]
pub struct Polynomial;

impl PassTimer for Polynomial {
    fn prefill_ms(&self, batch: &PrefillBatch) -> f64 {
        polynomial_prefill_ms(batch.requests, batch.covered_after, batch.covered_before)
    }

    fn decode_ms(&self, batch: &DecodeBatch) -> f64 {
        polynomial_decode_ms(batch.active_kv_tokens, batch.total_kv_tokens)
    }

    fn decode_inputs(&self) -> DecodeInputs {
        DecodeInputs::KvUtilisation
    }

    fn decode_floor_ms(&self) -> f64 {
        1.0
    }
}

/// Measured tables (engine.md §2.5): prefill interpolated over the batch's new tokens, decode
/// over (active KV tokens, mean context), floored at 1 ms.
impl PassTimer for ProfileTable {
    fn prefill_ms(&self, batch: &PrefillBatch) -> f64 {
        let tokens = batch.new_tokens();
        if tokens == 0 {
            return 0.0;
        }
        self.prefill_ms_at(tokens as f64).max(0.0)
    }

    fn decode_ms(&self, batch: &DecodeBatch) -> f64 {
        self.decode_ms_at(batch.active_kv_tokens as f64, batch.mean_context() as f64)
            .max(1.0)
    }

    fn decode_inputs(&self) -> DecodeInputs {
        DecodeInputs::KvAndMeanContext
    }

    fn decode_floor_ms(&self) -> f64 {
        1.0
    }
}

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

/// Decode clock increments a rank computed recently, by their timer inputs
/// ([`PassTimer::decode_inputs`]): direct-mapped, a few KB. A rank decoding steadily sees the
/// same few KV levels pass after pass, and the timer and the nanosecond rounding cost more
/// than a probe here. The last result is checked first: consecutive passes often see the same
/// inputs (no block allocated or freed in between). Only ever holds exact earlier results, so
/// it changes no duration.
#[derive(Clone, Debug)]
struct DecodeMemo {
    last: Option<(DecodeBatch, f64)>,
    entries: Vec<Option<(DecodeBatch, f64)>>,
}

impl DecodeMemo {
    const ENTRIES: usize = 64;

    fn new() -> Self {
        Self {
            last: None,
            entries: vec![None; Self::ENTRIES],
        }
    }

    fn index(inputs: &DecodeBatch) -> usize {
        let mut h = (inputs.active_kv_tokens as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(inputs.context_tokens as u64)
            .wrapping_mul(0xBF58_476D_1CE4_E5B9)
            .wrapping_add((inputs.ready as u64) ^ (inputs.total_kv_tokens as u64));
        h ^= h >> 29;
        (h as usize) % Self::ENTRIES
    }

    fn get_or_insert(&mut self, inputs: DecodeBatch, compute: impl FnOnce() -> f64) -> f64 {
        if let Some((key, ms)) = self.last {
            if key == inputs {
                return ms;
            }
        }
        let entry = &mut self.entries[Self::index(&inputs)];
        let ms = match entry {
            Some((key, ms)) if *key == inputs => *ms,
            _ => {
                let ms = compute();
                *entry = Some((inputs, ms));
                ms
            }
        };
        self.last = Some((inputs, ms));
        ms
    }
}

/// A rank's timing model: a shared [`PassTimer`] and the speed-up ratios.
#[derive(Clone, Debug)]
pub struct TimingModel {
    timer: Arc<dyn PassTimer>,
    prefill_ratio: f64,
    decode_ratio: f64,
    /// What the timer's decode duration reads (asked once).
    decode_inputs: DecodeInputs,
    decode_memo: DecodeMemo,
}

impl TimingModel {
    /// The model the engine arguments select. Ranks built from the same arguments share the
    /// timer instance.
    pub fn new(args: &EngineArgs) -> Self {
        let aic = args.aic.as_ref();
        let aic_tables = aic.and_then(|aic| aic.tables.as_ref());
        let calibration = aic.and_then(|aic| aic.calibration.as_ref());
        let timer: Arc<dyn PassTimer> = match (aic_tables, &args.timing) {
            (Some(tables), _) => match calibration {
                Some(calibration) => Arc::new(aic::CalibratedAic {
                    tables: Arc::clone(tables),
                    calibration: calibration.clone(),
                }),
                None => Arc::clone(tables) as Arc<dyn PassTimer>,
            },
            (None, TimingSource::Polynomial) => Arc::new(Polynomial),
            (None, TimingSource::ProfileTable(table)) => Arc::clone(table) as Arc<dyn PassTimer>,
        };
        Self::with_timer(timer, args)
    }

    /// A model with an explicit timer and the ratios of `args`.
    pub fn with_timer(timer: Arc<dyn PassTimer>, args: &EngineArgs) -> Self {
        Self {
            decode_inputs: timer.decode_inputs(),
            timer,
            prefill_ratio: args.speedup_ratio,
            decode_ratio: args.speedup_ratio * args.decode_speedup_ratio,
            decode_memo: DecodeMemo::new(),
        }
    }

    /// The raw timer (shared).
    pub fn timer(&self) -> &Arc<dyn PassTimer> {
        &self.timer
    }

    /// Clock increment for the prefill part of a pass (0 when nothing was prefilled).
    pub fn prefill_clock_ms(&self, batch: &PrefillBatch) -> f64 {
        if batch.requests == 0 {
            return 0.0;
        }
        scaled_clock_ms(self.timer.prefill_ms(batch), self.prefill_ratio)
    }

    /// Whether the decode duration depends on the KV tokens in use and the capacity alone (not
    /// on the batch or its context): then passes that allocate and free nothing all take the
    /// same time.
    pub fn decode_reads_only_kv(&self) -> bool {
        self.decode_inputs == DecodeInputs::KvUtilisation
    }

    /// Every decode step with a ready request takes time: the timer's floor survives the
    /// nanosecond rounding and the speed-up ratio (both are monotone in the raw duration).
    pub fn decode_always_takes_time(&self) -> bool {
        scaled_clock_ms(self.timer.decode_floor_ms(), self.decode_ratio) > 0.0
    }

    /// Clock increment for the decode part of a pass (0 when no request is ready).
    ///
    /// Inlined up to the memo's last result (the common case: no block allocated or freed
    /// since the previous pass), so that a steady decode pays no call.
    #[inline]
    pub fn decode_clock_ms(&mut self, batch: &DecodeBatch) -> f64 {
        if batch.ready == 0 {
            return 0.0;
        }
        let inputs = self.decode_inputs.of(batch);
        match self.decode_memo.last {
            Some((key, ms)) if key == inputs => ms,
            _ => self.decode_clock_ms_recalled(batch, inputs),
        }
    }

    /// [`TimingModel::decode_clock_ms`] past the memo's last result.
    #[inline(never)]
    fn decode_clock_ms_recalled(&mut self, batch: &DecodeBatch, inputs: DecodeBatch) -> f64 {
        let (timer, ratio) = (&self.timer, self.decode_ratio);
        self.decode_memo
            .get_or_insert(inputs, || scaled_clock_ms(timer.decode_ms(batch), ratio))
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
    fn prefill_batch_reduces_to_integer_means() {
        let mut batch = PrefillBatch::default();
        batch.add(0, 1000);
        batch.add(960, 1000);
        assert_eq!(batch.mean_prefix(), 480);
        assert_eq!(batch.mean_new_tokens(), 520);
        assert_eq!(batch.new_tokens(), 1040);
        batch.add(0, 7);
        batch.remove(0, 7);
        assert_eq!(
            batch,
            PrefillBatch {
                requests: 2,
                covered_before: 960,
                covered_after: 2000
            }
        );
        assert_eq!(PrefillBatch::default().new_tokens(), 0);
        let decode = DecodeBatch {
            ready: 3,
            context_tokens: 3001,
            ..DecodeBatch::default()
        };
        assert_eq!(decode.mean_context(), 1000);
    }

    #[test]
    fn timing_model_scales_and_skips_empty_parts() {
        let args = EngineArgs {
            speedup_ratio: 2.0,
            decode_speedup_ratio: 2.0,
            ..EngineArgs::default()
        };
        let mut model = TimingModel::new(&args);
        let mut prefill = PrefillBatch::default();
        assert_eq!(model.prefill_clock_ms(&prefill), 0.0);
        prefill.add(0, 1000);
        let raw = polynomial_prefill_ms(1, 1000, 0);
        assert!((model.prefill_clock_ms(&prefill) - raw / 2.0).abs() < 1e-6);
        let decode = DecodeBatch {
            ready: 1,
            active_kv_tokens: 0,
            total_kv_tokens: 100,
            context_tokens: 10,
        };
        assert!((model.decode_clock_ms(&decode) - 5.74 / 4.0).abs() < 1e-6);
        assert_eq!(
            model.decode_clock_ms(&DecodeBatch { ready: 0, ..decode }),
            0.0
        );
    }

    #[test]
    fn remembered_decode_durations_equal_computed_ones() {
        // Colliding and repeated inputs, through the memo and straight from the timer.
        let args = EngineArgs {
            speedup_ratio: 1.7,
            ..EngineArgs::default()
        };
        let mut model = TimingModel::new(&args);
        let ratio = model.decode_ratio;
        for step in 0..2000usize {
            let batch = DecodeBatch {
                ready: 1 + step % 7,
                active_kv_tokens: (step * 37 % 301) * 16,
                total_kv_tokens: 16 * 1000,
                context_tokens: step * 13,
            };
            let direct = scaled_clock_ms(model.timer().decode_ms(&batch), ratio);
            assert_eq!(model.decode_clock_ms(&batch).to_bits(), direct.to_bits());
        }
    }

    #[test]
    fn decode_is_floored_and_bounded() {
        assert!(close(polynomial_decode_ms(0, 100), 5.74));
        assert!(close(polynomial_decode_ms(100, 100), 34.01));
    }
}
