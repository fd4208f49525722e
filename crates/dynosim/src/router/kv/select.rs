//! The cost of sending one request to each target, and the choice among targets.
//!
//! ```text
//! raw_prefill  = track_prefill ? (P + (isl - min(cached, isl)) + cached) / bs : 0   (blocks)
//! decay        = 1 / (1 + d * (max(0, P - min P) / bs) / ceil(isl / bs))   when track_prefill, d > 0
//! credit       = overlap_score_credit * decay * overlap_blocks
//! logit        = prefill_load_scale * max(0, raw_prefill - credit)
//!              + (active_blocks + new_blocks) + decode_active_request_weight * active_requests
//! ```
//! The lowest logit wins; exact ties are broken uniformly at random (reservoir sampling over
//! targets in index order). Above temperature 0 the target is sampled with probability
//! proportional to `exp(-(logit - min) / ((max - min) * T))`. The randomness is a seeded RNG.

use rand::rngs::StdRng;
use rand::Rng;

use super::load::Projection;
use crate::config::RouterConfig;

/// The cost terms of one request, independent of the target.
#[derive(Clone, Copy, Debug)]
pub struct RequestShape {
    pub isl: usize,
    pub block_size: usize,
}

/// Cost of each target for one request; `overlaps[t]` are cached leading blocks on target t.
pub fn logits(
    config: &RouterConfig,
    shape: RequestShape,
    overlaps: &[u32],
    loads: &[Projection],
    out: &mut Vec<f64>,
) {
    out.clear();
    let bs = shape.block_size as f64;
    let track_prefill = config.router_track_prefill_tokens;
    let decay_on = track_prefill && config.overlap_score_credit_decay > 0.0;
    let min_prefill = if decay_on {
        loads.iter().map(|l| l.prefill_tokens).min().unwrap_or(0)
    } else {
        0
    };
    let request_blocks = shape.isl.div_ceil(shape.block_size) as f64;
    for (load, &overlap) in loads.iter().zip(overlaps) {
        let overlap_blocks = f64::from(overlap);
        let cached = overlap as usize * shape.block_size;
        let raw_prefill_tokens = if track_prefill {
            let uncached = shape.isl - cached.min(shape.isl);
            (load.prefill_tokens + uncached).saturating_add(cached)
        } else {
            0
        };
        let raw_prefill_blocks = raw_prefill_tokens as f64 / bs;
        let decay = if decay_on {
            let excess = load.prefill_tokens.saturating_sub(min_prefill) as f64 / bs;
            1.0 / (1.0 + config.overlap_score_credit_decay * (excess / request_blocks))
        } else {
            1.0
        };
        let credit = config.overlap_score_credit * decay * overlap_blocks;
        let prefill_cost = config.prefill_load_scale * (raw_prefill_blocks - credit).max(0.0);
        let decode_cost = (load.active_blocks + load.new_blocks) as f64;
        let request_cost = config.decode_active_request_weight * load.requests as f64;
        out.push(prefill_cost + decode_cost + request_cost);
    }
}

/// The chosen target for `logits` at `temperature`.
pub fn choose(logits: &[f64], temperature: f64, rng: &mut StdRng) -> usize {
    assert!(!logits.is_empty(), "at least one target");
    if temperature == 0.0 {
        let mut best = 0;
        let mut best_logit = f64::INFINITY;
        let mut ties = 0usize;
        for (target, &logit) in logits.iter().enumerate() {
            if logit < best_logit {
                best = target;
                best_logit = logit;
                ties = 1;
            } else if logit == best_logit {
                ties += 1;
                if rng.random_range(0..ties) == 0 {
                    best = target;
                }
            }
        }
        return best;
    }
    let (min, max) = logits
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let weights: Vec<f64> = if min == max {
        vec![1.0 / logits.len() as f64; logits.len()]
    } else {
        let scale = -1.0 / ((max - min) * temperature);
        let shift = min * scale;
        logits.iter().map(|&v| (v * scale - shift).exp()).collect()
    };
    let sum: f64 = weights.iter().sum();
    let sample: f64 = rng.random();
    let mut cumulative = 0.0;
    for (target, weight) in weights.iter().enumerate() {
        cumulative += weight / sum;
        if sample <= cumulative {
            return target;
        }
    }
    logits.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn load(
        prefill_tokens: usize,
        active_blocks: usize,
        requests: usize,
        new_blocks: usize,
    ) -> Projection {
        Projection {
            prefill_tokens,
            active_blocks,
            requests,
            new_blocks,
        }
    }

    /// Worked example of the reference (4 workers, bs 64): a 64-block prefix cached on worker
    /// 0, then a burst of 72-block requests sharing it: worker 0 costs 80, 96, 112, 128, 144
    /// for the k-th request; a fresh worker costs 144.
    #[test]
    fn cached_prefix_burst_costs() {
        let config = RouterConfig::default();
        let shape = RequestShape {
            isl: 72 * 64,
            block_size: 64,
        };
        let mut out = Vec::new();
        let mut costs = Vec::new();
        for k in 0..5usize {
            // After k placements on worker 0: k * 8 uncached blocks of prefill, 64 + 8k blocks.
            let loads = [
                load(
                    k * 8 * 64,
                    if k == 0 { 0 } else { 64 + 8 * k },
                    k,
                    if k == 0 { 72 } else { 8 },
                ),
                load(0, 0, 0, 72),
            ];
            logits(&config, shape, &[64, 0], &loads, &mut out);
            costs.push(out[0]);
            assert_eq!(out[1], 144.0);
        }
        assert_eq!(costs, [80.0, 96.0, 112.0, 128.0, 144.0]);
    }

    /// While a 4096-token request is in prefill, its worker costs 256 for another distinct
    /// 4096-token request; after its first token 192.
    #[test]
    fn release_points_change_the_cost() {
        let config = RouterConfig::default();
        let shape = RequestShape {
            isl: 4096,
            block_size: 64,
        };
        let mut out = Vec::new();
        logits(&config, shape, &[0], &[load(4096, 64, 1, 64)], &mut out);
        assert_eq!(out, [256.0]);
        logits(&config, shape, &[0], &[load(0, 64, 1, 64)], &mut out);
        assert_eq!(out, [192.0]);
    }

    #[test]
    fn weights_decay_and_clamp() {
        let mut config = RouterConfig {
            overlap_score_credit: 2.0,
            decode_active_request_weight: 10.0,
            ..RouterConfig::default()
        };
        let shape = RequestShape {
            isl: 640,
            block_size: 64,
        };
        let mut out = Vec::new();
        // Credit 2 x 10 cached blocks > 10 prefill blocks: the prefill term clamps at 0.
        logits(
            &config,
            shape,
            &[10, 0],
            &[load(0, 0, 2, 0), load(0, 0, 0, 10)],
            &mut out,
        );
        assert_eq!(out, [20.0, 20.0]);
        // Decay: worker 0 has 640 excess prefill tokens = 1 request size, so its credit halves.
        config.overlap_score_credit = 1.0;
        config.overlap_score_credit_decay = 1.0;
        config.decode_active_request_weight = 0.0;
        logits(
            &config,
            shape,
            &[10, 0],
            &[load(640, 0, 0, 0), load(0, 0, 0, 10)],
            &mut out,
        );
        assert_eq!(out, [20.0 - 5.0, 20.0]);
        // Without prefill tracking, overlap has no effect.
        config.router_track_prefill_tokens = false;
        logits(
            &config,
            shape,
            &[10, 0],
            &[load(640, 3, 0, 0), load(0, 0, 0, 10)],
            &mut out,
        );
        assert_eq!(out, [3.0, 10.0]);
    }

    #[test]
    fn ties_are_uniform_and_seeded() {
        let mut rng = StdRng::seed_from_u64(0);
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            counts[choose(&[5.0, 3.0, 3.0, 3.0], 0.0, &mut rng)] += 1;
        }
        assert_eq!(counts[0], 0);
        for &c in &counts[1..] {
            assert!((1150..1520).contains(&c), "{counts:?}");
        }
        let run = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..32)
                .map(|_| choose(&[1.0, 1.0, 1.0], 0.0, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(choose(&[2.0, 1.0], 0.0, &mut rng), 1);
    }

    /// Two targets at 80 and 144: P(cheaper) = 1 / (1 + exp(-1/T)): 0.881 at T=0.5, 0.731 at 1.
    #[test]
    fn temperature_sampling_matches_the_softmax() {
        for (temperature, expected) in [(0.5, 0.8808), (1.0, 0.7311)] {
            let mut rng = StdRng::seed_from_u64(3);
            let n = 20_000;
            let hits = (0..n)
                .filter(|_| choose(&[80.0, 144.0], temperature, &mut rng) == 0)
                .count();
            let p = hits as f64 / n as f64;
            assert!((p - expected).abs() < 0.01, "T={temperature}: {p}");
        }
    }
}
