//! AIC pass times: the reference's calls into aiconfigurator-core, answered from the tables
//! built before the run ([`crate::aic`]).
//!
//! INTERFACE: [`AicTables`] is a [`PassTimer`]:
//! - prefill: the package's `prefill(n, eff + prefix, prefix)` with the batch's integer means
//!   `prefix = ⌊before/n⌋`, `eff = ⌊after/n⌋ − prefix`; 0 when nothing new is covered, floored
//!   at 0;
//! - decode: `decode(ready, ⌊context/ready⌋, 2)`, floored at 1 ms.
//!
//! A latency that is not a finite non-negative number becomes the floor, as in the reference.
//!
//! [`CalibratedAic`] is the same timer with `aic_calibration`'s corrections applied to each
//! part of a pass after the floors (see [`crate::aic::calibration`]).
//! Each rank of dynosim schedules its own batch, so the batch passed is already per rank (the
//! reference divides an aggregate batch by the attention-DP size; see docs/differences.md).

use std::sync::Arc;

use super::{DecodeBatch, DecodeInputs, PassTimer, PrefillBatch};
use crate::aic::{AicCalibration, AicTables};

fn floored(ms: f64, floor: f64) -> f64 {
    if ms.is_finite() && ms >= 0.0 {
        ms.max(floor)
    } else {
        floor
    }
}

impl PassTimer for AicTables {
    fn prefill_ms(&self, batch: &PrefillBatch) -> f64 {
        let effective = batch.mean_new_tokens();
        if batch.requests == 0 || effective == 0 {
            return 0.0;
        }
        floored(
            AicTables::prefill_ms(self, batch.requests, effective, batch.mean_prefix()),
            0.0,
        )
    }

    fn decode_ms(&self, batch: &DecodeBatch) -> f64 {
        if batch.ready == 0 {
            return 0.0;
        }
        floored(
            AicTables::decode_ms(self, batch.ready, batch.mean_context()),
            1.0,
        )
    }

    fn decode_inputs(&self) -> DecodeInputs {
        DecodeInputs::ReadyAndMeanContext
    }
}

/// AIC pass times with calibrated corrections: each part of a pass that ran is scaled and
/// pays its fixed per-pass cost.
#[derive(Debug)]
pub struct CalibratedAic {
    pub tables: Arc<AicTables>,
    pub calibration: AicCalibration,
}

impl PassTimer for CalibratedAic {
    fn prefill_ms(&self, batch: &PrefillBatch) -> f64 {
        self.calibration.prefill_ms(
            PassTimer::prefill_ms(&*self.tables, batch),
            batch.new_tokens(),
        )
    }

    fn decode_ms(&self, batch: &DecodeBatch) -> f64 {
        if batch.ready == 0 {
            return 0.0;
        }
        self.calibration
            .decode_ms(PassTimer::decode_ms(&*self.tables, batch))
    }

    fn decode_inputs(&self) -> DecodeInputs {
        PassTimer::decode_inputs(&*self.tables)
    }

    fn decode_floor_ms(&self) -> f64 {
        self.calibration
            .decode_ms(PassTimer::decode_floor_ms(&*self.tables))
    }
}
