//! The GPU budget band: a ceiling (`max_gpu_budget`) and an optional floor (`min_gpu_budget`,
//! loosened by one worker's GPUs when both are set) on the GPUs a deployment may use.
//! A negative bound is disabled.

/// Total `total` GPUs within the band.
fn in_band(total: i64, min_gpus: i64, max_gpus: i64, tolerance: i64) -> bool {
    if max_gpus >= 0 && total > max_gpus {
        return false;
    }
    !(min_gpus >= 0 && total < min_gpus - tolerance)
}

/// One pool's worker count clamped into the band (`gpus` per worker).
pub(super) fn clamp_single(
    desired: usize,
    gpus: usize,
    min_gpus: i64,
    max_gpus: i64,
    min_endpoint: usize,
) -> usize {
    if (min_gpus < 0 && max_gpus < 0) || gpus == 0 {
        return desired;
    }
    let g = gpus as i64;
    let total = desired as i64 * g;
    let tolerance = if min_gpus >= 0 && max_gpus >= 0 { g } else { 0 };
    if in_band(total, min_gpus, max_gpus, tolerance) {
        return desired;
    }
    if max_gpus >= 0 && total > max_gpus {
        if max_gpus < min_endpoint as i64 * g {
            return 0;
        }
        return min_endpoint.max((max_gpus / g) as usize);
    }
    min_endpoint.max(((min_gpus as f64) / (g as f64)).ceil() as usize)
}

/// Prefill and decode counts clamped into the band together, shrinking or growing both in
/// proportion.
pub(super) fn clamp_pair(
    (num_p, num_d): (usize, usize),
    (p_gpu, d_gpu): (usize, usize),
    min_gpus: i64,
    max_gpus: i64,
    min_endpoint: usize,
) -> (usize, usize) {
    if (min_gpus < 0 && max_gpus < 0) || p_gpu == 0 || d_gpu == 0 {
        return (num_p, num_d);
    }
    let (pg, dg) = (p_gpu as i64, d_gpu as i64);
    let min_ep = min_endpoint as i64;
    let total = num_p as i64 * pg + num_d as i64 * dg;
    let tolerance = if min_gpus >= 0 && max_gpus >= 0 {
        pg.max(dg)
    } else {
        0
    };
    if in_band(total, min_gpus, max_gpus, tolerance) {
        return (num_p, num_d);
    }
    if max_gpus >= 0 && total > max_gpus {
        if max_gpus < min_ep * pg + min_ep * dg {
            return (0, 0);
        }
        let target = max_gpus;
        let scale = target as f64 / total as f64;
        let max_p = ((target - min_ep * dg) as f64 / pg as f64).floor() as i64;
        let new_p = min_ep.max(max_p.min((num_p as f64 * scale).floor() as i64));
        let remaining = target - new_p * pg;
        let new_d = min_ep.max((remaining as f64 / dg as f64).floor() as i64);
        return (new_p as usize, new_d as usize);
    }
    let floor = min_gpus;
    let new_p = if total <= 0 {
        min_ep.max((floor as f64 / 2.0 / pg as f64).ceil() as i64)
    } else {
        let scale = floor as f64 / total as f64;
        min_ep.max((num_p as f64 * scale).ceil() as i64)
    };
    let remaining = 0.max(floor - new_p * pg);
    let new_d = min_ep.max((remaining as f64 / dg as f64).ceil() as i64);
    if max_gpus >= 0 && new_p * pg + new_d * dg > max_gpus {
        return (num_p, num_d);
    }
    (new_p as usize, new_d as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_pool_band() {
        // Ceiling 8 GPUs, one per worker: 9 becomes 8.
        assert_eq!(clamp_single(9, 1, -1, 8, 1), 8);
        assert_eq!(clamp_single(5, 1, -1, 8, 1), 5);
        // Two GPUs per worker under a ceiling of 1: not even one worker fits.
        assert_eq!(clamp_single(1, 2, -1, 1, 1), 0);
        // A floor of 6 GPUs with 2 per worker and both bounds: within tolerance at 2 workers.
        assert_eq!(clamp_single(2, 2, 6, 10, 1), 2);
        assert_eq!(clamp_single(1, 2, 6, 10, 1), 3);
        assert_eq!(clamp_single(3, 1, -1, -1, 1), 3);
    }

    #[test]
    fn pair_band() {
        assert_eq!(clamp_pair((3, 7), (1, 1), -1, 8, 1), (2, 6));
        assert_eq!(clamp_pair((1, 1), (1, 1), -1, 8, 1), (1, 1));
        assert_eq!(clamp_pair((1, 1), (2, 2), -1, 3, 1), (0, 0));
        assert_eq!(clamp_pair((1, 1), (1, 1), 6, -1, 1), (3, 3));
    }
}
