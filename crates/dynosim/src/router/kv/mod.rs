//! The KV-aware router (`--router-mode kv_router`) of an offline replay.
//!
//! State: what each (worker, rank) target has cached ([`indexer`], fed by the engines' KV
//! events, or answered by engines that index their own blocks: [`PublishedKeys`]), the load the router itself placed there ([`load`]), and a queue of held-back
//! requests ([`queue`], classes from [`crate::config::router_policy`]). A request's overlap with every target is
//! measured once, at arrival, and kept if it waits in the queue. Placement picks the cheapest
//! target ([`select`]); ties and temperature sampling draw from a seeded RNG
//! (`--router-seed`), so a run is reproducible, where the reference draws unseeded.
//!
//! Load is released in two steps: prefill tokens at the request's first (non-final) token,
//! blocks and the request count at its terminal state. Each release drains the queue.
//!
//! With a planner, targets come and go ([`KvRouter::add_targets`], [`KvRouter::leave_targets`],
//! [`KvRouter::forget_targets`]): only eligible targets are chosen or counted as busy, a
//! joining target drains the queue, and queued requests were measured against the targets of
//! their arrival (a target that joined later had nothing cached for them). Without a planner
//! every target is eligible and nothing of this runs.
//!
//! With `router_prefill_load_model: "aic"` (and the `--aic-*` flags), every placement predicts
//! the request's prefill duration from the AIC tables (`prefill(1, uncached, cached)`) and the
//! load decays each target's oldest prefill over it ([`load`]); the events carry the virtual
//! time for that.

pub mod indexer;
mod keys;
pub mod load;
pub mod queue;
pub mod select;

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::config::router_config::PrefillLoadModel;
use crate::config::router_policy::{PolicyClass, PolicyProfile};
use crate::config::RouterConfig;
use crate::engine::kv::KvEvent;
use crate::engine::RequestId;
use crate::tokens::BlockHashes;
use indexer::CacheIndex;
pub use indexer::PublishedKeys;
use load::{ActiveLoad, Projection, TrackedBlocks};
use queue::{PolicyQueue, QueueRank, QueueRejection, QueueSnapshot};
use select::RequestShape;

/// The deployment the router places requests on.
#[derive(Clone, Copy, Debug)]
pub struct Targets {
    /// Number of (worker, rank) targets: workers x dp_size.
    pub count: usize,
    /// Engine block size (tokens).
    pub block_size: usize,
    /// The engine's `max_num_batched_tokens` (busy thresholds are fractions of it).
    pub max_batched_tokens: u64,
}

/// A request as the router sees it at arrival.
#[derive(Clone, Debug)]
pub struct RouteRequest<'a> {
    pub id: RequestId,
    /// Identities of the prompt's full engine blocks.
    pub block_hashes: BlockHashes,
    /// Prompt tokens.
    pub isl: usize,
    pub arrival_ms: f64,
    /// The virtual time of the routing decision.
    pub now_ms: f64,
    pub priority: i32,
    pub strict_priority: u32,
    pub policy_class: Option<&'a str>,
}

/// What became of an arriving request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Sent to this target now.
    Placed(usize),
    /// Held in the router queue; it comes out later as a [`Placement`].
    Queued,
    /// Refused: its class's queue limit is reached.
    Rejected(QueueRejection),
}

/// A queued request sent to a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub id: RequestId,
    pub target: usize,
    /// Cached prompt blocks the request had on `target` (measured at its arrival).
    pub overlap_blocks: u32,
}

/// A request waiting in the queue, with what was measured at its arrival.
#[derive(Debug)]
struct Pending {
    id: RequestId,
    isl: usize,
    overlaps: Vec<u32>,
    blocks: TrackedBlocks,
}

pub struct KvRouter {
    config: RouterConfig,
    targets: Targets,
    index: CacheIndex,
    load: ActiveLoad,
    profile: PolicyProfile,
    queue: PolicyQueue<Pending>,
    rng: StdRng,
    /// Scratch buffers reused across placements.
    projections: Vec<Projection>,
    logits: Vec<f64>,
    /// Cached prompt blocks the last placed request had on its chosen target.
    last_overlap_blocks: u32,
    /// Which targets receive new requests (all of them without a planner).
    eligible: Vec<bool>,
    /// How many targets are not eligible; 0 keeps the placement on its direct path.
    ineligible: usize,
    /// Scratch: the eligible targets of one placement, ascending.
    candidates: Vec<usize>,
    candidate_overlaps: Vec<u32>,
}

impl KvRouter {
    /// A router with the given (validated) config; `profile` is the resolved queue profile.
    pub fn new(config: RouterConfig, profile: PolicyProfile, targets: Targets, seed: u64) -> Self {
        let load = if config.router_prefill_load_model == PrefillLoadModel::Aic {
            ActiveLoad::with_prefill_decay(targets.count)
        } else {
            ActiveLoad::new(targets.count)
        };
        Self {
            queue: PolicyQueue::new(&profile),
            profile,
            config,
            targets,
            index: CacheIndex::new(targets.count),
            load,
            rng: StdRng::seed_from_u64(seed),
            projections: Vec::with_capacity(targets.count),
            logits: Vec::with_capacity(targets.count),
            last_overlap_blocks: 0,
            eligible: vec![true; targets.count],
            ineligible: 0,
            candidates: Vec::new(),
            candidate_overlaps: Vec::new(),
        }
    }

    /// The targets' engines answer which blocks they had published ([`PublishedKeys`], given
    /// with each arrival): their per-block events are not mirrored. For engines that publish
    /// per-block events only (vLLM, TRT-LLM).
    pub fn answer_keys_from_engines(&mut self) {
        self.index.answer_keys_from_engines();
    }

    /// Targets `targets` (new ones, or ones that were away) receive requests from `now_ms`;
    /// queued requests this lets through are appended to `placed`.
    pub fn add_targets(
        &mut self,
        targets: std::ops::Range<usize>,
        now_ms: f64,
        placed: &mut Vec<Placement>,
    ) {
        if targets.end > self.targets.count {
            let added = targets.end - self.targets.count;
            self.targets.count = targets.end;
            self.index.grow(targets.end);
            self.load.grow(targets.end);
            self.eligible.resize(targets.end, false);
            self.ineligible += added;
        }
        for target in targets {
            if !self.eligible[target] {
                self.eligible[target] = true;
                self.ineligible -= 1;
            }
        }
        self.drain(now_ms, placed);
    }

    /// Targets `targets` receive no new requests (they keep serving what they hold, and their
    /// cache events still arrive).
    pub fn leave_targets(&mut self, targets: std::ops::Range<usize>) {
        for target in targets {
            if self.eligible[target] {
                self.eligible[target] = false;
                self.ineligible += 1;
            }
        }
    }

    /// Targets `targets` are gone: what the router knew of their caches is dropped.
    pub fn forget_targets(&mut self, targets: std::ops::Range<usize>) {
        self.leave_targets(targets.clone());
        for target in targets {
            self.index.clear(target);
        }
    }

    /// No target is eligible (a planner scaled the pool to nothing).
    fn none_eligible(&self) -> bool {
        self.ineligible == self.targets.count
    }

    /// Cached prompt blocks the most recently placed request (by [`KvRouter::on_arrival`] or
    /// a queue drain) had on the target it was sent to.
    pub fn last_overlap_blocks(&self) -> u32 {
        self.last_overlap_blocks
    }

    /// Requests waiting in the router queue.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// KV events of `target` become visible to routing.
    #[inline]
    pub fn apply_kv_events(&mut self, target: usize, events: &[KvEvent]) {
        // Most passes change no cache-visible block: no call for them.
        if !events.is_empty() {
            self.index.apply(target, events);
        }
    }

    /// [`KvRouter::on_arrival_with`] where every target is mirrored.
    #[cfg(test)]
    pub fn on_arrival(&mut self, request: RouteRequest<'_>) -> Arrival {
        self.on_arrival_with(request, &indexer::MirrorOnly)
    }

    /// Routes an arriving request: placed now, queued, or rejected by a queue limit. `engines`
    /// answers for the targets whose engines index their own blocks.
    pub fn on_arrival_with(
        &mut self,
        request: RouteRequest<'_>,
        engines: &impl PublishedKeys,
    ) -> Arrival {
        let overlaps = self.index.overlaps(&request.block_hashes, engines);
        let blocks = if !self.config.router_track_active_blocks {
            TrackedBlocks::None
        } else if self.config.router_assume_kv_reuse {
            TrackedBlocks::Shared(request.block_hashes)
        } else {
            TrackedBlocks::Private(request.isl / self.targets.block_size)
        };
        let pending = Pending {
            id: request.id,
            isl: request.isl,
            overlaps,
            blocks,
        };
        let snapshot = || {
            let best = pending.overlaps.iter().copied().max().unwrap_or(0) as usize;
            QueueSnapshot::new(pending.isl, best * self.targets.block_size)
        };
        let class = match self.profile.direct_class(request.policy_class) {
            Some(class) => class,
            None => self
                .profile
                .classify(request.policy_class, snapshot().uncached_tokens),
        };
        let class_config = self.profile.class(class);
        let now_ms = request.now_ms;
        // With no eligible target a request can only wait for one to join.
        let hold = self.none_eligible()
            || (class_config.queues()
                && (self.queue.has_backlog(class) || self.all_busy(class_config, now_ms)));
        if hold {
            let snapshot = snapshot();
            let rank = QueueRank {
                arrival_s: request.arrival_ms.max(0.0) / 1000.0,
                priority: request.priority,
                strict_priority: request.strict_priority,
            };
            return match self.queue.enqueue(
                class,
                self.targets.count - self.ineligible,
                snapshot,
                rank,
                pending,
            ) {
                Ok(()) => Arrival::Queued,
                Err(rejection) => Arrival::Rejected(rejection),
            };
        }
        Arrival::Placed(self.place(pending, now_ms))
    }

    /// The request's first non-final token is out at `now_ms`: its prefill load is released,
    /// and queued requests may be placed (appended to `placed`).
    pub fn on_first_token(&mut self, id: RequestId, now_ms: f64, placed: &mut Vec<Placement>) {
        if self.load.prefill_done(id, now_ms) {
            self.drain(now_ms, placed);
        }
    }

    /// The request terminated at `now_ms`: all its load is released, and queued requests may
    /// be placed.
    pub fn on_terminal(&mut self, id: RequestId, now_ms: f64, placed: &mut Vec<Placement>) {
        self.load.free(id, now_ms);
        self.drain(now_ms, placed);
    }

    fn all_busy(&self, class: &PolicyClass, now_ms: f64) -> bool {
        (0..self.targets.count).all(|target| {
            !self.eligible[target]
                || class.is_busy(
                    self.load.prefill_tokens(target, now_ms),
                    self.targets.max_batched_tokens,
                )
        })
    }

    fn drain(&mut self, now_ms: f64, placed: &mut Vec<Placement>) {
        if self.none_eligible() {
            return;
        }
        loop {
            let load = &self.load;
            let targets = self.targets;
            let eligible = &self.eligible;
            let popped = self.queue.pop_next(|class| {
                !(0..targets.count).all(|target| {
                    !eligible[target]
                        || class.is_busy(
                            load.prefill_tokens(target, now_ms),
                            targets.max_batched_tokens,
                        )
                })
            });
            let Some(pending) = popped else {
                return;
            };
            let id = pending.id;
            let target = self.place(pending, now_ms);
            placed.push(Placement {
                id,
                target,
                overlap_blocks: self.last_overlap_blocks,
            });
        }
    }

    /// Chooses a target with the loads at `now_ms` and records the request's load there.
    fn place(&mut self, mut pending: Pending, now_ms: f64) -> usize {
        // Targets that joined after the request was measured had nothing cached for it.
        pending.overlaps.resize(self.targets.count, 0);
        self.load
            .project(&pending.blocks, now_ms, &mut self.projections);
        let shape = RequestShape {
            isl: pending.isl,
            block_size: self.targets.block_size,
        };
        let target = if self.ineligible == 0 {
            select::logits(
                &self.config,
                shape,
                &pending.overlaps,
                &self.projections,
                &mut self.logits,
            );
            select::choose(&self.logits, self.config.router_temperature, &mut self.rng)
        } else {
            // Only eligible targets compete (their relative loads, their minimum prefill).
            self.candidates.clear();
            self.candidates
                .extend((0..self.targets.count).filter(|&t| self.eligible[t]));
            self.candidate_overlaps.clear();
            self.candidate_overlaps
                .extend(self.candidates.iter().map(|&t| pending.overlaps[t]));
            let mut position = 0;
            let eligible = &self.eligible;
            self.projections.retain(|_| {
                position += 1;
                eligible[position - 1]
            });
            select::logits(
                &self.config,
                shape,
                &self.candidate_overlaps,
                &self.projections,
                &mut self.logits,
            );
            let chosen =
                select::choose(&self.logits, self.config.router_temperature, &mut self.rng);
            self.candidates[chosen]
        };
        self.last_overlap_blocks = pending.overlaps[target];
        let cached = (pending.overlaps[target] as usize * self.targets.block_size).min(pending.isl);
        let prefill_tokens = if self.config.router_track_prefill_tokens {
            pending.isl - cached
        } else {
            0
        };
        let expected_prefill_ms = self
            .config
            .aic
            .as_ref()
            .and_then(|aic| aic.tables.as_ref())
            .map(|tables| {
                let ms = tables.prefill_ms(1, prefill_tokens, cached);
                if ms.is_finite() {
                    ms.max(0.0)
                } else {
                    0.0
                }
            });
        self.load.add(
            pending.id,
            target,
            prefill_tokens,
            expected_prefill_ms,
            now_ms,
            pending.blocks,
        );
        target
    }
}

#[cfg(test)]
mod tests;
