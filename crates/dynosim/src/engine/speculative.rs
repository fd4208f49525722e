//! Speculative decoding (MTP / Eagle, `aic_nextn`; engine.md §9): how many tokens a ready
//! request emits in one decode step.
//!
//! A burst starts at one token; each conditional acceptance rate in turn is a Bernoulli trial
//! that adds a token on success and ends the burst on the first failure; the burst is capped at
//! the request's remaining output. Draws come from rand 0.9's `StdRng` seeded with
//! `aic_mtp_seed` plus the scheduler's offset (wrapping), one stream per scheduler, consumed in
//! the order the scheduler visits its ready requests: the same generator and Bernoulli rule as
//! the reference, so bursts agree draw for draw.
//!
//! INTERFACE: [`BurstSampler::new`] for a rank with `aic_nextn` set; [`BurstSampler::burst`]
//! per ready request; [`BurstSampler::max_burst`] bounds the KV a decode step reserves.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::SpeculativeArgs;

/// One scheduler's burst sampler.
#[derive(Debug)]
pub struct BurstSampler {
    accept_rates: Vec<f64>,
    rng: StdRng,
}

impl BurstSampler {
    /// A sampler for the scheduler whose seed offset is `seed_offset`, each acceptance rate
    /// multiplied by `acceptance_scale` (a calibration's correction; 1 without one) and capped
    /// at 1.
    pub fn new(args: &SpeculativeArgs, acceptance_scale: f64, seed_offset: u64) -> Self {
        Self {
            accept_rates: args
                .accept_rates
                .iter()
                .map(|rate| (rate * acceptance_scale).min(1.0))
                .collect(),
            rng: StdRng::seed_from_u64(args.seed.wrapping_add(seed_offset)),
        }
    }

    /// The most tokens one step can emit: the draft tokens plus the verified one.
    pub fn max_burst(&self) -> usize {
        self.accept_rates.len() + 1
    }

    /// Tokens a request with `remaining` output tokens left emits this step (0 if none left).
    pub fn burst(&mut self, remaining: usize) -> usize {
        if remaining == 0 {
            return 0;
        }
        let mut tokens = 1;
        for &rate in &self.accept_rates {
            if !self.rng.random_bool(rate) {
                break;
            }
            tokens += 1;
        }
        tokens.min(remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(rates: &[f64], seed: u64) -> BurstSampler {
        scaled_sampler(rates, 1.0, seed)
    }

    fn scaled_sampler(rates: &[f64], scale: f64, seed: u64) -> BurstSampler {
        BurstSampler::new(
            &SpeculativeArgs {
                nextn: rates.len(),
                accept_rates: rates.to_vec(),
                seed,
            },
            scale,
            0,
        )
    }

    #[test]
    fn a_calibrated_acceptance_scales_each_rate_up_to_one() {
        let mut never = scaled_sampler(&[1.0, 1.0], 0.0, 7);
        assert!((0..100).all(|_| never.burst(10) == 1));
        let mut always = scaled_sampler(&[0.5, 0.6], 2.0, 7);
        assert!((0..100).all(|_| always.burst(10) == 3));
        // Halved rates: fewer tokens per step on average than the rates as given.
        let (mut full, mut half) = (sampler(&[0.8, 0.8], 3), scaled_sampler(&[0.8, 0.8], 0.5, 3));
        let full_tokens: usize = (0..2000).map(|_| full.burst(10)).sum();
        let half_tokens: usize = (0..2000).map(|_| half.burst(10)).sum();
        // Expected 1 + 0.8 + 0.64 = 2.44 and 1 + 0.4 + 0.16 = 1.56 tokens per step.
        assert!(
            (full_tokens as f64 / 2000.0 - 2.44).abs() < 0.1,
            "{full_tokens}"
        );
        assert!(
            (half_tokens as f64 / 2000.0 - 1.56).abs() < 0.1,
            "{half_tokens}"
        );
    }

    #[test]
    fn certain_rates_give_fixed_bursts() {
        assert_eq!(sampler(&[1.0, 1.0, 1.0, 1.0], 5).burst(100), 5);
        assert_eq!(sampler(&[0.0, 1.0, 1.0], 5).burst(100), 1);
        assert_eq!(sampler(&[1.0, 1.0, 0.0, 1.0], 5).burst(100), 3);
        assert_eq!(sampler(&[1.0, 1.0, 1.0], 5).burst(3), 3);
        assert_eq!(sampler(&[1.0], 5).burst(0), 0);
    }

    #[test]
    fn same_seed_same_stream_and_offsets_differ() {
        let draw = |seed| {
            let mut s = sampler(&[0.8, 0.6, 0.4], seed);
            (0..200).map(|_| s.burst(10)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn mean_burst_matches_the_conditional_expectation() {
        let mut s = sampler(&[0.9, 0.4, 0.25, 0.5], 11);
        let n = 100_000;
        let mean = (0..n).map(|_| s.burst(100) as f64).sum::<f64>() / n as f64;
        let expected = 1.0 + 0.9 + 0.9 * 0.4 + 0.9 * 0.4 * 0.25 + 0.9 * 0.4 * 0.25 * 0.5;
        assert!((mean - expected).abs() < 0.01, "{mean} vs {expected}");
    }
}
