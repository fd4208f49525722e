//! AIC (aiconfigurator-core) timing: what an engine configuration asks of the package, and the
//! tables built from the package's answers that pass times are looked up in.
//!
//! INTERFACE
//! - [`AicConfig`]: the validated `aic_*` settings of one engine configuration (or of the
//!   router's `--aic-*` flags), plus, once `dynosim_aic_tables::prepare` has run, its
//!   [`AicTables`].
//! - [`AicTables::prefill_ms`] / [`AicTables::decode_ms`]: the package's
//!   `predict_prefill_latency(n, e + p, p)` and `predict_decode_latency(b, c, 2)`, in raw ms,
//!   from the tables (no floors, no speed-up ratios: the timing model applies those).
//! - [`BlockEstimate`]: the inputs of the package's KV-capacity estimate.
//! - [`calibration`]: corrections fitted against measured runs (`aic_calibration`).
//!
//! This module is data and lookups only, below `config`. Building the tables (running the
//! Python builder, caching its output) is I/O, so it lives outside this crate, in the crate
//! `dynosim-aic-tables`; it runs before the simulation, never inside it. What stays here is the
//! check that a spec still needs it ([`crate::config::needs_prepare`]).
//!
//! How the tables are laid out and why is explained in `docs/timing.md` (AIC section) and in the
//! builder, `crates/dynosim-py/python/dynosim/aic_tables.py`.

use std::sync::Arc;

use serde::Deserialize;

pub mod calibration;

pub use calibration::AicCalibration;

/// The backends aiconfigurator-core models.
pub const BACKENDS: [&str; 3] = ["vllm", "sglang", "trtllm"];

/// The system used when `aic_system` is not given.
pub const DEFAULT_SYSTEM: &str = "h200_sxm";

/// Everything an AIC engine configuration depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct AicConfig {
    pub backend: String,
    pub system: String,
    /// `None` = the package's `current` version for the system and backend.
    pub backend_version: Option<String>,
    pub model_path: String,
    pub tp_size: usize,
    pub moe_tp_size: Option<usize>,
    pub moe_ep_size: Option<usize>,
    pub attention_dp_size: usize,
    /// Quantisation overrides, normalised (`auto`/`none` removed, `int4` → `int4_wo`).
    pub gemm_dtype: Option<String>,
    pub moe_dtype: Option<String>,
    pub fmha_dtype: Option<String>,
    pub kv_cache_dtype: Option<String>,
    pub comm_dtype: Option<String>,
    /// Draft tokens per verification round (0 = none).
    pub nextn: usize,
    /// Corrections fitted against measured runs (`aic_calibration`); `None` = the package's
    /// estimates as they are. Not part of what the tables depend on.
    pub calibration: Option<AicCalibration>,
    /// Loaded by `dynosim_aic_tables::prepare` before the simulation starts.
    pub tables: Option<Arc<AicTables>>,
}

/// The reference's normalisation of an `aic_*_dtype` value: empty, `auto`, `none` and `null`
/// mean the model's default; `int4` is `int4_wo`.
pub fn normalize_dtype(value: Option<&str>) -> Option<String> {
    let value = value?.trim();
    if value.is_empty() || ["auto", "none", "null"].contains(&value.to_ascii_lowercase().as_str()) {
        return None;
    }
    Some(if value == "int4" { "int4_wo" } else { value }.to_string())
}

/// The inputs of `estimate_num_gpu_blocks` (asked for when `num_gpu_blocks` is absent).
#[derive(Clone, Debug, PartialEq)]
pub struct BlockEstimate {
    pub block_size: usize,
    pub max_num_batched_tokens: Option<usize>,
    pub gpu_memory_utilization: Option<f64>,
    pub mem_fraction_static: Option<f64>,
    pub free_gpu_memory_fraction: Option<f64>,
}

/// The builder's output: the package's answers, tabulated.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct AicTables {
    pub format: u32,
    pub package_version: String,
    /// The perf-database version the tables come from (aliases resolved).
    pub version: String,
    /// `estimate_num_gpu_blocks` per rank, when it was asked for.
    pub num_gpu_blocks: Option<usize>,
    pub prefill: PrefillTables,
    pub decode: DecodeTables,
}

/// `prefill(n, e, p) = tokens_ms[n·e − 1] + batch_ms[n − 1] + rest(n, e, p)`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct PrefillTables {
    /// Operations that depend only on the batch's new tokens T, for T = 1, 2, …
    pub tokens_ms: Vec<f64>,
    /// Operations that depend only on the batch size n, for n = 1, 2, …
    pub batch_ms: Vec<f64>,
    /// Everything else (attention-like), on a grid: in ms, or, with `rest_unprefixed`, as a
    /// ratio to it.
    pub rest: Grid3,
    /// The rest over a whole prompt of `s` tokens without a cached prefix, `rest(n, s, 0)`.
    /// The package's attention estimate jumps and bends at fixed prompt lengths `s = e + p`,
    /// which a grid over `(e, p)` cannot follow; when this is present, `rest(n, e, p)` is
    /// `rest_unprefixed(n, e + p)` times the grid's smooth ratio.
    pub rest_unprefixed: Option<SequenceRows>,
}

/// One row per batch size n = 1, 2, … over prompt lengths, interpolated linearly in
/// (ln s, ln value); beyond the last row, proportional to the batch size.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct SequenceRows {
    pub sequence: Vec<f64>,
    /// Row-major `[n − 1][sequence]`, every value positive.
    pub ms: Vec<f64>,
}

impl SequenceRows {
    fn at(&self, n: usize, s: usize) -> f64 {
        let width = self.sequence.len();
        let rows = self.ms.len().checked_div(width).unwrap_or(0);
        if n == 0 || rows == 0 {
            return 0.0;
        }
        let row = n.min(rows) - 1;
        let value = |k: usize| self.ms[row * width + k.min(width - 1)];
        let ms = if width < 2 {
            value(0)
        } else {
            let (k, w) = segment(&self.sequence, s.max(1) as f64, f64::ln);
            (value(k).ln() * (1.0 - w) + value(k + 1).ln() * w).exp()
        };
        // Attention work grows with the batch; past the table, in proportion to it.
        ms * n.max(rows) as f64 / rows as f64
    }
}

/// A grid over batch size `n`, new tokens per request `e` and cached prefix `p`, interpolated
/// linearly in (ln n, ln e, ln(1 + p)), of ln(value) when every value is positive.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Grid3 {
    pub n: Vec<f64>,
    pub e: Vec<f64>,
    pub p: Vec<f64>,
    /// Row-major `[n][e][p]`.
    pub ms: Vec<f64>,
    pub log: bool,
}

/// `decode(b, c)`: one exact row per batch size b = 1, 2, …, linear in the context c between
/// grid points.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct DecodeTables {
    pub context: Vec<f64>,
    /// Row-major `[b − 1][context]`.
    pub ms: Vec<f64>,
}

/// The segment of a sorted axis to interpolate `x` in and its weight (outside the axis: the end
/// segment, extrapolated).
fn segment(axis: &[f64], x: f64, map: fn(f64) -> f64) -> (usize, f64) {
    if axis.len() < 2 {
        return (0, 0.0);
    }
    let upper = axis.partition_point(|&a| a <= x);
    let i = upper.saturating_sub(1).min(axis.len() - 2);
    let (a, b) = (map(axis[i]), map(axis[i + 1]));
    (i, (map(x) - a) / (b - a))
}

/// An exact table at 1, 2, …, extended past its end along the line through its last point and
/// the point half way (never downwards).
fn exact_or_linear(table: &[f64], index: usize) -> f64 {
    let len = table.len();
    if index == 0 || len == 0 {
        return table.first().copied().unwrap_or(0.0);
    }
    if index <= len {
        return table[index - 1];
    }
    let mid = (len / 2).max(1);
    if mid == len {
        return table[len - 1];
    }
    // Latency does not fall with more work: a table ending on a downward step extends flat.
    let slope = ((table[len - 1] - table[mid - 1]) / (len - mid) as f64).max(0.0);
    table[len - 1] + slope * (index - len) as f64
}

impl Grid3 {
    fn at(&self, n: f64, e: f64, p: f64) -> f64 {
        if self.ms.is_empty() {
            return 0.0;
        }
        let single = |axis: &[f64], x: f64, map: fn(f64) -> f64| {
            if axis.len() < 2 {
                (0, 0.0)
            } else {
                segment(axis, x, map)
            }
        };
        let (i, u) = single(&self.n, n, f64::ln);
        let (j, v) = single(&self.e, e, f64::ln);
        let (k, w) = single(&self.p, p, f64::ln_1p);
        let (ne, np) = (self.e.len(), self.p.len());
        let value = |di: usize, dj: usize, dk: usize| {
            let index = ((i + di).min(self.n.len() - 1) * ne + (j + dj).min(ne - 1)) * np
                + (k + dk).min(np - 1);
            let ms = self.ms[index];
            if self.log {
                ms.ln()
            } else {
                ms
            }
        };
        let mut total = 0.0;
        for (di, wi) in [(0, 1.0 - u), (1, u)] {
            for (dj, wj) in [(0, 1.0 - v), (1, v)] {
                for (dk, wk) in [(0, 1.0 - w), (1, w)] {
                    let weight = wi * wj * wk;
                    if weight != 0.0 {
                        total += weight * value(di, dj, dk);
                    }
                }
            }
        }
        if self.log {
            total.exp()
        } else {
            total
        }
    }
}

impl AicTables {
    /// The package's prefill latency of `n` requests, each with `e` new tokens after a cached
    /// prefix of `p` (its `predict_prefill_latency(n, e + p, p)`), in raw ms.
    pub fn prefill_ms(&self, n: usize, e: usize, p: usize) -> f64 {
        if n == 0 || e == 0 {
            return 0.0;
        }
        let tables = &self.prefill;
        let rest = tables.rest.at(n as f64, e as f64, p as f64);
        let rest = match &tables.rest_unprefixed {
            Some(unprefixed) => rest * unprefixed.at(n, e + p),
            None => rest,
        };
        exact_or_linear(&tables.tokens_ms, n * e) + exact_or_linear(&tables.batch_ms, n) + rest
    }

    /// The package's decode latency of one step of `b` requests at context `c` (its
    /// `predict_decode_latency(b, c, 2)`), in raw ms.
    pub fn decode_ms(&self, b: usize, c: usize) -> f64 {
        let tables = &self.decode;
        let width = tables.context.len();
        let rows = tables.ms.len().checked_div(width).unwrap_or(0);
        if b == 0 || rows == 0 {
            return 0.0;
        }
        let (k, w) = segment(&tables.context, c.max(1) as f64, |x| x);
        let row = |b: usize| {
            let start = (b - 1) * width;
            let at = |k: usize| tables.ms[start + k.min(width - 1)];
            if width < 2 {
                at(0)
            } else {
                at(k) * (1.0 - w) + at(k + 1) * w
            }
        };
        if b <= rows {
            return row(b);
        }
        let mid = (rows / 2).max(1);
        if mid == rows {
            return row(rows);
        }
        let slope = ((row(rows) - row(mid)) / (rows - mid) as f64).max(0.0);
        row(rows) + slope * (b - rows) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(log: bool) -> Grid3 {
        // rest = 2 · n · e · (1 + p): exactly log-linear, so log interpolation is exact.
        let n = vec![1.0, 4.0, 16.0];
        let e = vec![1.0, 32.0, 1024.0];
        let p = vec![0.0, 15.0, 255.0];
        let mut ms = Vec::new();
        for &a in &n {
            for &b in &e {
                for &c in &p {
                    ms.push(2.0 * a * b * (1.0 + c));
                }
            }
        }
        Grid3 { n, e, p, ms, log }
    }

    fn tables() -> AicTables {
        AicTables {
            format: 1,
            package_version: "0".into(),
            version: "0".into(),
            num_gpu_blocks: None,
            prefill: PrefillTables {
                tokens_ms: (1..=100).map(|t| 10.0 + t as f64).collect(),
                batch_ms: (1..=8).map(|n| n as f64 / 10.0).collect(),
                rest: grid(true),
                rest_unprefixed: None,
            },
            decode: DecodeTables {
                context: vec![1.0, 100.0, 1000.0],
                // Row b: 5 + b + c / 100.
                ms: (1..=4)
                    .flat_map(|b| [1.0, 100.0, 1000.0].map(|c| 5.0 + b as f64 + c / 100.0))
                    .collect(),
            },
        }
    }

    #[test]
    fn log_grid_reproduces_power_laws_between_and_beyond_points() {
        let log = grid(true);
        for (n, e, p) in [
            (2.0, 7.0, 3.0),
            (16.0, 1024.0, 255.0),
            (32.0, 2048.0, 511.0),
        ] {
            let want = 2.0 * n * e * (1.0 + p);
            let got = log.at(n, e, p);
            assert!(
                (got / want - 1.0).abs() < 1e-9,
                "{n} {e} {p}: {got} vs {want}"
            );
        }
        // Linear interpolation of the same values is only exact on grid points.
        let linear = grid(false);
        assert!((linear.at(4.0, 32.0, 15.0) - 2.0 * 4.0 * 32.0 * 16.0).abs() < 1e-9);
        assert!(linear.at(2.0, 7.0, 3.0) > 2.0 * 2.0 * 7.0 * 4.0);
    }

    #[test]
    fn prefill_adds_the_three_parts_and_skips_empty_passes() {
        let t = tables();
        let want = (10.0 + 12.0) + 0.3 + 2.0 * 3.0 * 4.0 * 6.0;
        assert!((t.prefill_ms(3, 4, 5) - want).abs() < 1e-9);
        assert_eq!(t.prefill_ms(0, 4, 5), 0.0);
        assert_eq!(t.prefill_ms(3, 0, 5), 0.0);
        // Beyond the token table: the line through T = 50 and T = 100.
        let beyond = t.prefill_ms(1, 150, 0) - 0.1 - 2.0 * 150.0;
        assert!((beyond - 160.0).abs() < 1e-9, "{beyond}");
    }

    #[test]
    fn factored_rest_jumps_where_the_prompt_length_does_however_it_splits() {
        // Rows n = 1, 2: U = n · s below 6144 and n · s / 2 from 6144 on (a jump as the
        // package's attention estimate has), on an axis holding both sides of the jump.
        let sequence = vec![1.0, 1024.0, 6143.0, 6144.0, 32768.0];
        let row = |n: f64| {
            sequence
                .iter()
                .map(move |&s| if s < 6144.0 { n * s } else { n * s / 2.0 })
        };
        let mut t = tables();
        t.prefill.rest = Grid3 {
            n: vec![1.0, 2.0],
            e: vec![1.0, 8192.0],
            p: vec![0.0, 32768.0],
            ms: vec![0.25; 8],
            log: true,
        };
        t.prefill.rest_unprefixed = Some(SequenceRows {
            ms: row(1.0).chain(row(2.0)).collect(),
            sequence,
        });
        let rest = |n: usize, e: usize, p: usize| {
            t.prefill_ms(n, e, p)
                - exact_or_linear(&t.prefill.tokens_ms, n * e)
                - exact_or_linear(&t.prefill.batch_ms, n)
        };
        for (e, p) in [(6143, 0), (100, 6043), (4000, 2143)] {
            assert!(
                (rest(2, e, p) - 0.25 * 2.0 * 6143.0).abs() < 1e-6,
                "{e} {p}"
            );
        }
        for (e, p) in [(6144, 0), (101, 6043), (4000, 2144)] {
            assert!((rest(2, e, p) - 0.25 * 6144.0).abs() < 1e-6, "{e} {p}");
        }
        // Power laws between the axis points are exact in log space.
        assert!((rest(1, 50, 450) - 0.25 * 500.0).abs() < 1e-9);
        // Past the last row, in proportion to the batch size.
        assert!((rest(6, 50, 450) - 0.25 * 3.0 * 2.0 * 500.0).abs() < 1e-6);
    }

    #[test]
    fn decode_is_exact_per_batch_and_linear_in_context() {
        let t = tables();
        assert!((t.decode_ms(2, 100) - 8.0).abs() < 1e-12);
        assert!((t.decode_ms(3, 550) - (8.0 + 5.5)).abs() < 1e-12);
        // Past the context axis and past the last row, the end segments extend.
        assert!((t.decode_ms(1, 2000) - (6.0 + 20.0)).abs() < 1e-9);
        assert!((t.decode_ms(6, 100) - 12.0).abs() < 1e-9);
        assert_eq!(t.decode_ms(0, 100), 0.0);
    }

    #[test]
    fn dtype_normalisation_follows_the_reference() {
        assert_eq!(normalize_dtype(Some(" auto ")), None);
        assert_eq!(normalize_dtype(Some("None")), None);
        assert_eq!(normalize_dtype(Some("")), None);
        assert_eq!(normalize_dtype(Some("int4")), Some("int4_wo".into()));
        assert_eq!(normalize_dtype(Some("fp8")), Some("fp8".into()));
        assert_eq!(normalize_dtype(None), None);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        /// Tables with positive random values on small axes.
        fn tables_strategy() -> impl Strategy<Value = AicTables> {
            (
                proptest::collection::vec(0.01f64..100.0, 64),
                proptest::collection::vec(0.0f64..5.0, 8),
                proptest::collection::vec(0.01f64..50.0, 3 * 4 * 3),
                proptest::collection::vec(1.0f64..80.0, 8 * 5),
            )
                .prop_map(|(tokens_ms, batch_ms, rest, decode)| AicTables {
                    format: 1,
                    package_version: "p".into(),
                    version: "p".into(),
                    num_gpu_blocks: None,
                    prefill: PrefillTables {
                        tokens_ms,
                        batch_ms,
                        rest: Grid3 {
                            n: vec![1.0, 2.0, 8.0],
                            e: vec![1.0, 4.0, 16.0, 64.0],
                            p: vec![0.0, 10.0, 1000.0],
                            ms: rest,
                            log: true,
                        },
                        rest_unprefixed: None,
                    },
                    decode: DecodeTables {
                        context: vec![1.0, 10.0, 100.0, 1000.0, 10000.0],
                        ms: decode,
                    },
                })
        }

        proptest! {
            #[test]
            fn lookups_are_exact_on_grid_points_and_bounded_between_them(
                tables in tables_strategy(),
                ni in 0usize..3, ei in 0usize..4, pi in 0usize..3,
                b in 1usize..=8, c in 1usize..=10000,
            ) {
                let rest = &tables.prefill.rest;
                let (n, e, p) = (rest.n[ni] as usize, rest.e[ei] as usize, rest.p[pi] as usize);
                prop_assume!(n * e <= 64);
                let exact = tables.prefill.tokens_ms[n * e - 1]
                    + tables.prefill.batch_ms[n - 1]
                    + rest.ms[(ni * 4 + ei) * 3 + pi];
                let got = tables.prefill_ms(n, e, p);
                prop_assert!((got - exact).abs() <= 1e-9 * exact.max(1.0), "{got} vs {exact}");

                // Inside the context axis, decode lies between the row's neighbouring values.
                let width = tables.decode.context.len();
                let row = &tables.decode.ms[(b - 1) * width..b * width];
                let k = tables.decode.context.partition_point(|&x| x <= c as f64).clamp(1, width - 1);
                let (lo, hi) = (row[k - 1].min(row[k]), row[k - 1].max(row[k]));
                let d = tables.decode_ms(b, c);
                prop_assert!(d >= lo - 1e-9 && d <= hi + 1e-9, "{d} not in [{lo}, {hi}]");
            }

            #[test]
            fn prefill_is_finite_and_positive_everywhere(
                tables in tables_strategy(),
                n in 1usize..200, e in 1usize..5000, p in 0usize..100_000,
            ) {
                let ms = tables.prefill_ms(n, e, p);
                prop_assert!(ms.is_finite());
                prop_assert!(ms > 0.0 || tables.prefill.tokens_ms.iter().all(|&v| v == 0.0));
            }
        }
    }
}
