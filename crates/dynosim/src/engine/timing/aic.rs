//! AIC pass times: the reference's calls into aiconfigurator-core, answered from the tables
//! built before the run ([`crate::aic`]).
//!
//! INTERFACE
//! - [`AicTiming::prefill_ms`]: raw ms of a prefill pass from the batch size and the prompt
//!   coverage summed over the batch before and after it: the package's
//!   `prefill(n, eff + prefix, prefix)` with `prefix = ⌊before/n⌋` and
//!   `eff = ⌊after/n⌋ − prefix`; 0 when nothing new is covered, floored at 0.
//! - [`AicTiming::decode_ms`]: raw ms of a decode pass of `ready` requests whose contexts sum
//!   to `context_tokens`: `decode(ready, ⌊context_tokens/ready⌋, 2)`, floored at 1 ms.
//!
//! Each rank of dynosim schedules its own batch, so the batch passed is already per rank (the
//! reference divides an aggregate batch by the attention-DP size; see docs/differences.md).

use std::sync::Arc;

use crate::aic::AicTables;

#[derive(Clone, Debug)]
pub struct AicTiming {
    tables: Arc<AicTables>,
}

/// A latency the package returned that is not a finite non-negative number becomes the floor.
fn floored(ms: f64, floor: f64) -> f64 {
    if ms.is_finite() && ms >= 0.0 {
        ms.max(floor)
    } else {
        floor
    }
}

impl AicTiming {
    pub fn new(tables: Arc<AicTables>) -> Self {
        Self { tables }
    }

    pub fn prefill_ms(&self, batch_size: usize, total_after: usize, total_before: usize) -> f64 {
        if batch_size == 0 {
            return 0.0;
        }
        let prefix = total_before / batch_size;
        let effective = (total_after / batch_size).saturating_sub(prefix);
        if effective == 0 {
            return 0.0;
        }
        floored(self.tables.prefill_ms(batch_size, effective, prefix), 0.0)
    }

    pub fn decode_ms(&self, ready: usize, context_tokens: usize) -> f64 {
        if ready == 0 {
            return 0.0;
        }
        floored(self.tables.decode_ms(ready, context_tokens / ready), 1.0)
    }
}
