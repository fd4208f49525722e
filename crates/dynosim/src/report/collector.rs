//! Collects request lifecycle events and turns them into the report and per-request records.

use super::Report;
use crate::config::Sla;
use crate::engine::RequestId;

/// Facts about the run that only the simulator knows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RunFacts {
    pub prefill_worker_seconds: f64,
    pub decode_worker_seconds: f64,
    pub prefill_gpus_per_worker: u64,
    pub decode_gpus_per_worker: u64,
    /// Real elapsed ms of the simulation (measured by the caller, outside the core).
    pub wall_time_ms: f64,
}

/// One per-request record (`--report-jsonl`), 28 keys in the reference's order.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestRecord {}

#[derive(Debug)]
pub struct Collector {}

impl Collector {
    pub fn new(sla: Sla, capture_records: bool) -> Self {
        let _ = (sla, capture_records);
        todo!()
    }
    /// A request arrived (was released to the router) at `at_ms`.
    pub fn on_arrival(
        &mut self,
        id: RequestId,
        at_ms: f64,
        input_length: usize,
        requested_output_length: usize,
        session: Option<(&str, usize)>,
    ) {
        let _ = (id, at_ms, input_length, requested_output_length, session);
        todo!()
    }
    /// Admitted on scheduler `worker_idx` (worker * dp + rank), reusing `reused_tokens`.
    pub fn on_admit(&mut self, id: RequestId, at_ms: f64, reused_tokens: usize, worker_idx: usize) {
        let _ = (id, at_ms, reused_tokens, worker_idx);
        todo!()
    }
    /// `count` tokens emitted at `at_ms`.
    pub fn on_tokens(&mut self, id: RequestId, at_ms: f64, count: usize) {
        let _ = (id, at_ms, count);
        todo!()
    }
    pub fn on_completed(&mut self, id: RequestId, at_ms: f64) {
        let _ = (id, at_ms);
        todo!()
    }
    pub fn on_rejected(&mut self, id: RequestId, at_ms: f64) {
        let _ = (id, at_ms);
        todo!()
    }
    pub fn finish(self, facts: RunFacts) -> (Report, Vec<RequestRecord>) {
        let _ = facts;
        todo!()
    }
}
