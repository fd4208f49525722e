//! A pool's router, built the same way for every pool: round robin, or a KV router configured
//! from the user's router config with the engine's queue-policy override and the pool's own
//! adjustments.
//!
//! INTERFACE
//! - [`pool_router`]: the router of one pool of a deployment.
//! - [`kv_router_may_queue`]: whether such a KV router may hold requests in its queue.

use crate::config::{EngineArgs, PoolSpec, ReplaySpec, RouterConfig, RouterMode};
use crate::router::kv::{KvRouter, Targets};
use crate::router::round_robin::RoundRobin;
use crate::router::Router;

/// The router of `pool`, whose workers have `ranks` schedulers each: round robin, or a KV
/// router over all its schedulers (see [`kv_router`], `adjust` included) as the spec's router
/// mode says.
pub(super) fn pool_router(
    spec: &ReplaySpec,
    pool: &PoolSpec,
    ranks: usize,
    adjust: impl FnOnce(&mut RouterConfig),
) -> Router {
    match spec.router_mode {
        RouterMode::RoundRobin => Router::RoundRobin(RoundRobin::new(pool.workers, ranks)),
        RouterMode::KvRouter => Router::Kv(Box::new(kv_router(
            spec.router_config.as_ref(),
            &pool.engine,
            pool.workers * ranks,
            adjust,
        ))),
    }
}

/// A KV router over `targets` schedulers running `engine`, configured from the user's router
/// config (defaults when none) with the engine's queue-policy override, then `adjust`.
fn kv_router(
    user_config: Option<&RouterConfig>,
    engine: &EngineArgs,
    targets: usize,
    adjust: impl FnOnce(&mut RouterConfig),
) -> KvRouter {
    let mut config = kv_router_config(user_config, engine);
    adjust(&mut config);
    let profile = config.policy_profile();
    let seed = config.router_seed;
    let targets = Targets {
        count: targets,
        block_size: engine.block_size.max(1),
        max_batched_tokens: engine
            .max_num_batched_tokens
            .map_or(10_000_000, |tokens| tokens as u64),
    };
    KvRouter::new(config, profile, targets, seed)
}

/// The user's router config (defaults when none) with the engine's queue-policy override.
fn kv_router_config(user_config: Option<&RouterConfig>, engine: &EngineArgs) -> RouterConfig {
    let mut config = user_config.cloned().unwrap_or_default();
    if let Some(policy) = engine.router_queue_policy {
        config.router_queue_policy = policy;
    }
    config
}

/// Whether the KV router [`kv_router`] builds from these settings (with no `adjust`) may hold
/// requests in its queue: some class has a busy threshold. Only then can a request's first
/// token or end place a queued request (with all targets eligible, as without a planner).
pub(super) fn kv_router_may_queue(user_config: Option<&RouterConfig>, engine: &EngineArgs) -> bool {
    kv_router_config(user_config, engine)
        .policy_profile()
        .classes()
        .iter()
        .any(|class| class.queues())
}
