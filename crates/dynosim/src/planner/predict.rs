//! Traffic forecasts for the SLA planner's throughput loop: one predictor per series (requests
//! per window, mean prompt length, mean output length), fed once per throughput tick.
//!
//! INTERFACE
//! - [`Predictor`]: `constant` (the last value) or `kalman` (a local linear trend filter whose
//!   arithmetic follows filterpy's, so forecasts agree with the reference to rounding). Both
//!   skip the leading run of zeros. `arima` and `prophet` are not native: they are refused
//!   when the config is checked (they run through the Python `scaling_policy` hook).
//! - [`LoadForecast`]: the three series, the idle-window rule (an idle window after traffic
//!   repeats the last observed shape) and the last prefix-hit rate seen.

use crate::config::planner::{LoadPredictor, PlannerSpec};

/// Level-and-trend Kalman filter, state `[level, trend]`, observing the level.
///
/// Operation order is filterpy 2.0's (`KalmanFilter.predict` / `update`): `x = F x`,
/// `P = F P Fᵀ + Q`; then `y = z − H x`, `S = H P Hᵀ + R`, `K = P Hᵀ S⁻¹`, `x = x + K y` and
/// the Joseph-form covariance `P = (I − K H) P (I − K H)ᵀ + K R Kᵀ`.
#[derive(Clone, Debug)]
struct Kalman {
    x: [f64; 2],
    p: [[f64; 2]; 2],
    q: [f64; 2],
    r: f64,
}

type M2 = [[f64; 2]; 2];

fn mul(a: &M2, b: &M2) -> M2 {
    let mut out = [[0.0; 2]; 2];
    for (i, row) in out.iter_mut().enumerate() {
        for (j, cell) in row.iter_mut().enumerate() {
            *cell = a[i][0] * b[0][j] + a[i][1] * b[1][j];
        }
    }
    out
}

fn transpose(a: &M2) -> M2 {
    [[a[0][0], a[1][0]], [a[0][1], a[1][1]]]
}

impl Kalman {
    fn new(z0: f64, q_level: f64, q_trend: f64, r: f64) -> Self {
        Self {
            x: [z0, 0.0],
            p: [[1000.0, 0.0], [0.0, 1000.0]],
            q: [q_level.max(1e-12), q_trend.max(1e-12)],
            r: r.max(1e-9),
        }
    }

    fn predict(&mut self) {
        const F: M2 = [[1.0, 1.0], [0.0, 1.0]];
        self.x = [self.x[0] + self.x[1], self.x[1]];
        let fp = mul(&F, &self.p);
        let fpf = mul(&fp, &transpose(&F));
        self.p = [
            [fpf[0][0] + self.q[0], fpf[0][1]],
            [fpf[1][0], fpf[1][1] + self.q[1]],
        ];
    }

    fn update(&mut self, z: f64) {
        let y = z - self.x[0];
        // P Hᵀ with H = [1, 0]: the first column of P.
        let pht = [self.p[0][0], self.p[1][0]];
        let s = pht[0] + self.r;
        let si = 1.0 / s;
        let k = [pht[0] * si, pht[1] * si];
        self.x = [self.x[0] + k[0] * y, self.x[1] + k[1] * y];
        let i_kh: M2 = [[1.0 - k[0], 0.0], [-k[1], 1.0]];
        let joseph = mul(&mul(&i_kh, &self.p), &transpose(&i_kh));
        let kr = [k[0] * self.r, k[1] * self.r];
        self.p = [
            [joseph[0][0] + kr[0] * k[0], joseph[0][1] + kr[0] * k[1]],
            [joseph[1][0] + kr[1] * k[0], joseph[1][1] + kr[1] * k[1]],
        ];
    }
}

#[derive(Clone, Debug)]
enum Method {
    Constant,
    Kalman {
        settings: (f64, f64, f64),
        filter: Option<Kalman>,
        /// The forecast already made for the coming step (a step is predicted once).
        cached: Option<f64>,
    },
}

/// One series' forecaster.
#[derive(Clone, Debug)]
pub struct Predictor {
    method: Method,
    log1p: bool,
    last: Option<f64>,
    seen_nonzero: bool,
}

impl Predictor {
    /// The predictor a spec names. `arima` and `prophet` never reach here (refused when the
    /// config is checked); they fall back to `constant`.
    pub fn new(spec: &PlannerSpec) -> Self {
        let method = match spec.load_predictor {
            LoadPredictor::Kalman => Method::Kalman {
                settings: (spec.kalman_q_level, spec.kalman_q_trend, spec.kalman_r),
                filter: None,
                cached: None,
            },
            _ => Method::Constant,
        };
        Self {
            method,
            log1p: spec.load_predictor_log1p,
            last: None,
            seen_nonzero: false,
        }
    }

    /// One observation. NaN counts as 0; zeros before the first non-zero value are skipped.
    pub fn observe(&mut self, value: f64) {
        let value = if value.is_nan() { 0.0 } else { value };
        if value == 0.0 && !self.seen_nonzero {
            return;
        }
        if value != 0.0 {
            self.seen_nonzero = true;
        }
        self.last = Some(value);
        let z = if self.log1p {
            value.max(0.0).ln_1p()
        } else {
            value
        };
        if let Method::Kalman {
            settings: (q_level, q_trend, r),
            filter,
            cached,
        } = &mut self.method
        {
            match filter {
                None => *filter = Some(Kalman::new(z, *q_level, *q_trend, *r)),
                Some(kf) => {
                    if cached.is_none() {
                        kf.predict();
                    }
                    kf.update(z);
                }
            }
            *cached = None;
        }
    }

    /// The forecast for the next window (0 before any observation).
    pub fn predict_next(&mut self) -> f64 {
        let last = self.last.unwrap_or(0.0);
        let log1p = self.log1p;
        let level = match &mut self.method {
            Method::Constant => return last,
            Method::Kalman { filter, cached, .. } => {
                let Some(kf) = filter else {
                    return last;
                };
                match cached {
                    Some(level) => *level,
                    None => {
                        kf.predict();
                        *cached = Some(kf.x[0]);
                        kf.x[0]
                    }
                }
            }
        };
        if log1p {
            level.exp_m1().max(0.0)
        } else {
            level
        }
    }
}

/// What the throughput loop observed of one (merged) traffic window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TrafficObservation {
    pub duration_s: f64,
    pub num_req: f64,
    pub isl: f64,
    pub osl: f64,
    pub kv_hit_rate: Option<f64>,
}

/// The next window's predicted traffic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Forecast {
    pub num_req: f64,
    pub isl: f64,
    pub osl: f64,
    pub kv_hit_rate: Option<f64>,
}

/// The three series of the throughput loop.
#[derive(Clone, Debug)]
pub struct LoadForecast {
    num_req: Predictor,
    isl: Predictor,
    osl: Predictor,
    last_isl: Option<f64>,
    last_osl: Option<f64>,
    seen_traffic: bool,
    last_kv_hit_rate: Option<f64>,
}

impl LoadForecast {
    pub fn new(spec: &PlannerSpec) -> Self {
        Self {
            num_req: Predictor::new(spec),
            isl: Predictor::new(spec),
            osl: Predictor::new(spec),
            last_isl: None,
            last_osl: None,
            seen_traffic: false,
            last_kv_hit_rate: None,
        }
    }

    /// Feeds one window, then forecasts the next.
    pub fn observe_and_predict(&mut self, traffic: &TrafficObservation) -> Forecast {
        self.num_req.observe(traffic.num_req);
        if traffic.num_req > 0.0 {
            self.seen_traffic = true;
            if traffic.isl.is_finite() {
                self.last_isl = Some(traffic.isl);
            }
            if traffic.osl.is_finite() {
                self.last_osl = Some(traffic.osl);
            }
        }
        let (mut isl, mut osl) = (traffic.isl, traffic.osl);
        // Mean lengths are undefined in an idle window: carry the last shape forward.
        if traffic.num_req == 0.0 && self.seen_traffic {
            isl = self.last_isl.unwrap_or(0.0);
            osl = self.last_osl.unwrap_or(0.0);
        }
        if isl.is_finite() {
            self.isl.observe(isl);
        }
        if osl.is_finite() {
            self.osl.observe(osl);
        }
        if let Some(hit) = traffic.kv_hit_rate.filter(|h| !h.is_nan()) {
            self.last_kv_hit_rate = Some(hit);
        }
        Forecast {
            num_req: self.num_req.predict_next(),
            isl: self.isl.predict_next(),
            osl: self.osl.predict_next(),
            kv_hit_rate: self.last_kv_hit_rate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(predictor: LoadPredictor, q_level: f64, q_trend: f64, r: f64) -> PlannerSpec {
        let mut spec = PlannerSpec::from_arg(
            r#"{"mode":"agg","optimization_target":"sla","load_predictor":"constant"}"#,
        )
        .unwrap();
        spec.load_predictor = predictor;
        spec.kalman_q_level = q_level;
        spec.kalman_q_trend = q_trend;
        spec.kalman_r = r;
        spec
    }

    fn run(spec: &PlannerSpec, series: &[f64]) -> Vec<f64> {
        let mut predictor = Predictor::new(spec);
        series
            .iter()
            .map(|&z| {
                predictor.observe(z);
                predictor.predict_next()
            })
            .collect()
    }

    fn assert_close(ours: &[f64], reference: &[f64]) {
        assert_eq!(ours.len(), reference.len());
        for (a, b) in ours.iter().zip(reference) {
            assert!(
                (a - b).abs() <= 1e-9 * b.abs().max(1.0),
                "{ours:?} vs {reference:?}"
            );
        }
    }

    const BURST: [f64; 14] = [
        0.0, 0.0, 20.0, 20.0, 120.0, 120.0, 120.0, 120.0, 10.0, 10.0, 10.0, 0.0, 0.0, 5.0,
    ];
    const RAMP: [f64; 6] = [3.5, 7.0, 11.0, 13.5, 20.0, 2.0];

    /// Forecasts of the reference's `KalmanPredictor` (filterpy 2.0, numpy 2.4), observe then
    /// predict at each step, recorded with the planner venv.
    #[test]
    fn kalman_matches_filterpy() {
        let defaults = spec(LoadPredictor::Kalman, 1.0, 0.1, 10.0);
        assert_close(
            &run(&defaults, &BURST),
            &[
                0.0,
                0.0,
                20.0,
                20.0,
                213.26946431584406,
                184.94784589365665,
                168.55006731659813,
                158.07755763403856,
                72.06388029095093,
                29.485604854450546,
                7.492214725021885,
                -9.2135830321253,
                -17.541430760438438,
                -18.298521537294903,
            ],
        );
        assert_close(
            &run(&defaults, &RAMP),
            &[
                3.5,
                8.723023371456986,
                14.864151551975386,
                16.9651802303666,
                23.27179553542117,
                9.774019402398313,
            ],
        );
        let tuned = spec(LoadPredictor::Kalman, 0.5, 0.02, 4.0);
        assert_close(
            &run(&tuned, &BURST),
            &[
                0.0,
                0.0,
                20.0,
                20.0,
                217.1793597267748,
                185.50546608170293,
                168.59687823478353,
                158.10094846676705,
                72.09813974110745,
                30.2965256201472,
                8.969370222980741,
                -7.361248480531851,
                -15.714535319890281,
                -16.987387972695526,
            ],
        );
        assert_close(
            &run(&tuned, &RAMP),
            &[
                3.5,
                8.739087054128213,
                14.943212064264124,
                16.978864461342724,
                23.295386346285554,
                9.71284557000869,
            ],
        );
    }

    #[test]
    fn predicting_twice_does_not_advance_the_filter() {
        let defaults = spec(LoadPredictor::Kalman, 1.0, 0.1, 10.0);
        let mut predictor = Predictor::new(&defaults);
        for z in RAMP {
            predictor.observe(z);
        }
        let first = predictor.predict_next();
        assert_eq!(predictor.predict_next(), first);
    }

    #[test]
    fn constant_repeats_the_last_value_after_leading_zeros() {
        let constant = spec(LoadPredictor::Constant, 1.0, 0.1, 10.0);
        assert_eq!(
            run(&constant, &[0.0, 0.0, 4.0, 0.0, 7.5]),
            vec![0.0, 0.0, 4.0, 0.0, 7.5]
        );
    }

    #[test]
    fn idle_windows_repeat_the_last_shape() {
        let constant = spec(LoadPredictor::Constant, 1.0, 0.1, 10.0);
        let mut forecast = LoadForecast::new(&constant);
        let busy = TrafficObservation {
            duration_s: 10.0,
            num_req: 12.0,
            isl: 2048.0,
            osl: 256.0,
            kv_hit_rate: Some(0.0),
        };
        forecast.observe_and_predict(&busy);
        let idle = TrafficObservation {
            num_req: 0.0,
            isl: 0.0,
            osl: 0.0,
            kv_hit_rate: None,
            ..busy
        };
        let next = forecast.observe_and_predict(&idle);
        assert_eq!((next.num_req, next.isl, next.osl), (0.0, 2048.0, 256.0));
        // Arrivals without completions feed zero lengths.
        let started = TrafficObservation {
            num_req: 3.0,
            ..idle
        };
        let next = forecast.observe_and_predict(&started);
        assert_eq!((next.num_req, next.isl, next.osl), (3.0, 0.0, 0.0));
        assert_eq!(next.kv_hit_rate, Some(0.0));
    }
}
