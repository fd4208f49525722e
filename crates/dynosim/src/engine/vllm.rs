//! The vLLM scheduler flavour (and TRT-LLM's guaranteed-no-evict variant).

use super::{EngineRequest, PassEvent};
use crate::config::EngineArgs;

#[derive(Debug)]
pub struct VllmScheduler {}

impl VllmScheduler {
    pub fn new(args: &EngineArgs, rank_index: usize) -> Self {
        let _ = (args, rank_index);
        todo!("vLLM scheduler")
    }
    pub fn enqueue(&mut self, request: EngineRequest) {
        let _ = request;
        todo!()
    }
    pub fn has_work(&self) -> bool {
        todo!()
    }
    pub fn num_requests(&self) -> usize {
        todo!()
    }
    pub fn run_pass(&mut self, events: &mut Vec<PassEvent>) -> f64 {
        let _ = events;
        todo!()
    }
}
