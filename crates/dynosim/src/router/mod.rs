//! Routers: which (worker, rank) target of a pool receives each request.
//!
//! INTERFACE
//! - [`Router`]: the one router type every pool uses — round robin or the KV router. It routes
//!   an arriving request ([`Routed`]), hears of first tokens and terminal states (which may
//!   release queued requests as [`kv::Placement`]s), and reads the engines' KV events (or,
//!   for engines that index their own blocks, asks them: [`kv::PublishedKeys`]).
//!   With a planner, it hears of workers joining, draining and leaving.

pub mod kv;
pub mod round_robin;

use crate::engine::kv::KvEvent;
use crate::engine::RequestId;
use crate::tokens::TokenSeq;
use kv::{Arrival, KvRouter, Placement, PublishedKeys, RouteRequest};
use round_robin::RoundRobin;

/// The router in front of one pool of workers.
pub enum Router {
    RoundRobin(RoundRobin),
    Kv(Box<KvRouter>),
}

/// A request about to be routed.
#[derive(Clone, Copy, Debug)]
pub struct RouteInput<'a> {
    pub id: RequestId,
    pub prompt: &'a TokenSeq,
    /// Engine block size of the pool (tokens).
    pub block_size: usize,
    pub arrival_ms: f64,
    /// The virtual time of the decision (the KV router's `aic` load model decays with it).
    pub now_ms: f64,
    pub priority: i32,
    pub strict_priority: u32,
    pub policy_class: Option<&'a str>,
}

/// Where a routing decision left a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routed {
    /// On this target, which had this many of the prompt's blocks cached as far as the router
    /// knew (always 0 for round robin).
    Placed { target: usize, overlap_blocks: u32 },
    /// Held in the KV router's queue; it comes out later as a [`Placement`].
    Queued,
    /// Refused by a router queue limit.
    Rejected,
}

impl Router {
    pub fn kv(&mut self) -> Option<&mut KvRouter> {
        match self {
            Router::Kv(router) => Some(router),
            Router::RoundRobin(_) => None,
        }
    }

    /// Requests held in the router's queue (round robin holds none).
    pub fn queued(&self) -> usize {
        match self {
            Router::Kv(router) => router.queued(),
            Router::RoundRobin(_) => 0,
        }
    }

    /// Only the KV router reads the engines' cache events.
    pub fn reads_kv_events(&self) -> bool {
        matches!(self, Router::Kv(_))
    }

    /// Routes `request`; `engines` answers the KV router's per-block questions for targets
    /// whose engines index their own blocks.
    pub fn route(&mut self, request: RouteInput<'_>, engines: &impl PublishedKeys) -> Routed {
        match self {
            Router::RoundRobin(router) => Routed::Placed {
                target: router.next_scheduler(),
                overlap_blocks: 0,
            },
            Router::Kv(router) => {
                let arrival = router.on_arrival_with(
                    RouteRequest {
                        id: request.id,
                        block_hashes: request.prompt.block_hashes(request.block_size.max(1)),
                        isl: request.prompt.len(),
                        arrival_ms: request.arrival_ms,
                        now_ms: request.now_ms,
                        priority: request.priority,
                        strict_priority: request.strict_priority,
                        policy_class: request.policy_class,
                    },
                    engines,
                );
                match arrival {
                    Arrival::Placed(target) => Routed::Placed {
                        target,
                        overlap_blocks: router.last_overlap_blocks(),
                    },
                    Arrival::Queued => Routed::Queued,
                    Arrival::Rejected(_) => Routed::Rejected,
                }
            }
        }
    }

    /// Request `id` emitted its first (non-final) token at `now_ms`; queued requests this
    /// releases are appended to `placed`.
    pub fn on_first_token(&mut self, id: RequestId, now_ms: f64, placed: &mut Vec<Placement>) {
        if let Router::Kv(router) = self {
            router.on_first_token(id, now_ms, placed);
        }
    }

    /// Request `id` ended (or left this pool) at `now_ms`; queued requests this releases are
    /// appended to `placed`.
    pub fn on_terminal(&mut self, id: RequestId, now_ms: f64, placed: &mut Vec<Placement>) {
        if let Router::Kv(router) = self {
            router.on_terminal(id, now_ms, placed);
        }
    }

    /// Worker `worker` (of `dp_size` ranks) starts receiving requests at `now_ms`; queued
    /// requests the KV router now lets through are appended to `placed`.
    pub fn worker_ready(
        &mut self,
        worker: usize,
        dp_size: usize,
        now_ms: f64,
        placed: &mut Vec<Placement>,
    ) {
        match self {
            Router::RoundRobin(router) => router.worker_ready(worker),
            Router::Kv(router) => router.add_targets(ranks(worker, dp_size), now_ms, placed),
        }
    }

    /// Worker `worker` stops receiving requests (it drains what it holds).
    pub fn worker_draining(&mut self, worker: usize, dp_size: usize) {
        match self {
            Router::RoundRobin(router) => router.worker_leaving(worker),
            Router::Kv(router) => router.leave_targets(ranks(worker, dp_size)),
        }
    }

    /// Worker `worker` is gone.
    pub fn worker_removed(&mut self, worker: usize, dp_size: usize) {
        match self {
            Router::RoundRobin(router) => router.worker_leaving(worker),
            Router::Kv(router) => router.forget_targets(ranks(worker, dp_size)),
        }
    }

    #[inline]
    pub fn apply_kv_events(&mut self, target: usize, events: &[KvEvent]) {
        if let Router::Kv(router) = self {
            router.apply_kv_events(target, events);
        }
    }
}

/// The (worker, rank) targets of `worker`.
fn ranks(worker: usize, dp_size: usize) -> std::ops::Range<usize> {
    worker * dp_size..(worker + 1) * dp_size
}
