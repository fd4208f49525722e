//! Hand-made scenarios where the right target is known.

use super::*;
use crate::config::RouterQueuePolicy;
use crate::tokens::TokenSeq;

const BS: usize = 64;

fn router(config: RouterConfig, count: usize) -> KvRouter {
    let profile = config.policy_profile();
    KvRouter::new(
        config,
        profile,
        Targets {
            count,
            block_size: BS,
            max_batched_tokens: 8192,
        },
        0,
    )
}

/// A prompt of `blocks` distinct blocks (one token each, repeated over the block) starting at
/// token `first`.
fn hashes(first: u64, blocks: u64) -> Vec<u64> {
    (first..first + blocks).collect()
}

fn tokens(blocks: &[u64]) -> TokenSeq {
    let mut seq = TokenSeq::new();
    for &token in blocks {
        seq.push_run(token, BS as u32);
    }
    seq
}

fn request(id: RequestId, blocks: Vec<u64>, arrival_ms: f64) -> RouteRequest<'static> {
    let isl = blocks.len() * BS;
    RouteRequest {
        id,
        block_hashes: tokens(&blocks).block_hashes(BS),
        isl,
        arrival_ms,
        now_ms: arrival_ms,
        priority: 0,
        strict_priority: 0,
        policy_class: None,
    }
}

/// Events of an engine caching the blocks of the prompt `blocks`: per-block events as a vLLM
/// pool sends them.
fn store(blocks: &[u64]) -> Vec<KvEvent> {
    tokens(blocks)
        .block_keys(BS)
        .into_iter()
        .map(|hash| KvEvent::Stored { hash })
        .collect()
}

#[test]
fn a_cached_prefix_attracts_the_request() {
    for target in 0..4 {
        let mut kv = router(RouterConfig::default(), 4);
        kv.apply_kv_events(target, &store(&hashes(100, 32)));
        let mut prompt = hashes(100, 32);
        prompt.extend(hashes(900, 8));
        assert_eq!(
            kv.on_arrival(request(0, prompt, 0.0)),
            Arrival::Placed(target)
        );
    }
}

#[test]
fn a_burst_fills_the_cached_worker_then_ties() {
    // The reference's worked example: 64 cached blocks on worker 2, a burst of 72-block
    // requests sharing them: costs 80, 96, 112, 128 on worker 2, then 144 everywhere.
    let mut kv = router(RouterConfig::default(), 4);
    kv.apply_kv_events(2, &store(&hashes(0, 64)));
    let prompt = |k: u64| {
        let mut p = hashes(0, 64);
        p.extend(hashes(1000 + 8 * k, 8));
        p
    };
    for k in 0..4 {
        assert_eq!(
            kv.on_arrival(request(k as usize, prompt(k), 0.0)),
            Arrival::Placed(2)
        );
    }
    // The fifth is a 4-way tie: the seeded RNG picks one; all four are valid.
    let Arrival::Placed(target) = kv.on_arrival(request(4, prompt(4), 0.0)) else {
        panic!("placed")
    };
    assert!(target < 4);
}

#[test]
fn load_imbalance_sends_work_to_the_idle_worker_and_releases_in_two_steps() {
    let mut kv = router(RouterConfig::default(), 2);
    let mut placed = Vec::new();
    // Worker 0 gets a big request (or worker 1: a tie on an idle cluster); the next distinct
    // request of the same size goes to the other one.
    let Arrival::Placed(first) = kv.on_arrival(request(0, hashes(0, 64), 0.0)) else {
        panic!()
    };
    let other = 1 - first;
    assert_eq!(
        kv.on_arrival(request(1, hashes(100, 32), 0.0)),
        Arrival::Placed(other)
    );
    // Worker `first`: 64 prefill + 64 active blocks; `other`: 32 + 32. A 16-block request
    // costs 64+64+16+16 = 160 vs 32+32+16+16 = 96.
    assert_eq!(
        kv.on_arrival(request(2, hashes(200, 16), 0.0)),
        Arrival::Placed(other)
    );
    // After the first token of request 0, `first` costs 0+64 + 16+16 = 96, `other`
    // (48 prefill, 48 blocks) 48+48+32 = 128.
    kv.on_first_token(0, 0.0, &mut placed);
    assert_eq!(
        kv.on_arrival(request(3, hashes(300, 16), 0.0)),
        Arrival::Placed(first)
    );
    // Completions free everything.
    for id in 0..4 {
        kv.on_terminal(id, 0.0, &mut placed);
    }
    assert!(placed.is_empty());
    for target in 0..2 {
        assert_eq!(kv.load.active_blocks(target), 0);
        assert_eq!(kv.load.prefill_tokens(target, 0.0), 0);
    }
}

/// Two workers whose router queues at a threshold of 0.5, both made busy by two 8192-token
/// requests (ids 0 and 1; 8192 > 0.5 x 8192), so that the next arrival waits.
fn queueing(policy: RouterQueuePolicy) -> KvRouter {
    let mut kv = router(
        RouterConfig {
            router_queue_threshold: Some(0.5),
            router_queue_policy: policy,
            ..RouterConfig::default()
        },
        2,
    );
    for (id, first) in [(0, 0), (1, 1000)] {
        assert!(matches!(
            kv.on_arrival(request(id, hashes(first, 128), 0.0)),
            Arrival::Placed(_)
        ));
    }
    kv
}

/// With both workers busy ([`queueing`]), later arrivals wait and come out in the policy's
/// order, one per released worker.
fn queue_order(policy: RouterQueuePolicy, arrivals: &[(usize, u64, i32, u32)]) -> Vec<usize> {
    let mut kv = queueing(policy);
    for (i, &(id, blocks, priority, strict)) in arrivals.iter().enumerate() {
        let mut r = request(
            id,
            hashes(10_000 * (i as u64 + 1), blocks),
            10.0 * (i + 1) as f64,
        );
        r.priority = priority;
        r.strict_priority = strict;
        assert_eq!(kv.on_arrival(r), Arrival::Queued);
    }
    let mut order = Vec::new();
    let mut placed = Vec::new();
    let mut active = vec![0, 1];
    while let Some(id) = active.pop() {
        kv.on_first_token(id, 0.0, &mut placed);
        for p in placed.drain(..) {
            order.push(p.id);
            active.insert(0, p.id);
        }
    }
    order
}

#[test]
fn the_queue_orders_by_each_policy_and_priority() {
    // (id, blocks, priority, strict): 96-, 72- and 80-block requests arriving in that order.
    let arrivals = [(2, 96, 0, 0), (3, 72, 0, 0), (4, 80, 0, 0)];
    assert_eq!(queue_order(RouterQueuePolicy::Fcfs, &arrivals), [2, 3, 4]);
    assert_eq!(queue_order(RouterQueuePolicy::Lcfs, &arrivals), [4, 3, 2]);
    assert_eq!(queue_order(RouterQueuePolicy::Wspt, &arrivals), [3, 4, 2]);
    // fcfs with priority 1 on the last arrival (a 1 s head start) and a strict priority.
    let prioritised = [(2, 96, 0, 0), (3, 72, 0, 0), (4, 80, 1, 0), (5, 80, 0, 1)];
    assert_eq!(
        queue_order(RouterQueuePolicy::Fcfs, &prioritised),
        [5, 4, 2, 3]
    );
}

#[test]
fn a_backlog_is_not_overtaken_and_limits_reject() {
    let mut kv = queueing(RouterQueuePolicy::Fcfs);
    assert_eq!(
        kv.on_arrival(request(2, hashes(2000, 8), 1.0)),
        Arrival::Queued
    );
    // Request 0 finishes its prefill: worker is free, request 2 is placed there.
    let mut placed = Vec::new();
    kv.on_first_token(0, 0.0, &mut placed);
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].id, 2);
    assert_eq!(kv.queued(), 0);

    // Limits: one queued request per target at most.
    let yaml = "default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: all}]\n\
                policy_classes: [{name: f_all, policy_family: f, cache_bucket: all, quantum: 1, \
                prefill_busy_threshold: 0, request_queue_limit_per_worker: 1}]\n";
    let path = std::env::temp_dir().join(format!("dynosim-policy-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).unwrap();
    let file = crate::config::router_policy::RouterPolicyConfig::from_path(path.to_str().unwrap())
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut kv = router(
        RouterConfig {
            policy_file: Some(file),
            ..RouterConfig::default()
        },
        2,
    );
    assert!(matches!(
        kv.on_arrival(request(0, hashes(0, 8), 0.0)),
        Arrival::Placed(_)
    ));
    assert!(matches!(
        kv.on_arrival(request(1, hashes(100, 8), 0.0)),
        Arrival::Placed(_)
    ));
    assert_eq!(
        kv.on_arrival(request(2, hashes(200, 8), 0.0)),
        Arrival::Queued
    );
    assert_eq!(
        kv.on_arrival(request(3, hashes(300, 8), 0.0)),
        Arrival::Queued
    );
    let Arrival::Rejected(rejection) = kv.on_arrival(request(4, hashes(400, 8), 0.0)) else {
        panic!("rejected")
    };
    assert_eq!(
        rejection.to_string(),
        "router policy class \"f_all\" queue requests limit reached (current=2, limit=2)"
    );
}

#[test]
fn the_same_seed_gives_the_same_choices() {
    let run = |seed| {
        let config = RouterConfig {
            router_temperature: 0.5,
            ..RouterConfig::default()
        };
        let profile = config.policy_profile();
        let mut kv = KvRouter::new(
            config,
            profile,
            Targets {
                count: 4,
                block_size: BS,
                max_batched_tokens: 8192,
            },
            seed,
        );
        (0..64)
            .map(
                |id| match kv.on_arrival(request(id, hashes(id as u64 * 100, 4), 0.0)) {
                    Arrival::Placed(t) => t,
                    other => panic!("{other:?}"),
                },
            )
            .collect::<Vec<_>>()
    };
    assert_eq!(run(1), run(1));
    assert_ne!(run(1), run(2));
}

/// AIC tables whose prefill takes 0.01 ms per new token (and nothing else).
fn linear_aic_tables() -> crate::aic::AicTables {
    use crate::aic::{AicTables, DecodeTables, Grid3, PrefillTables};
    AicTables {
        format: 1,
        package_version: "test".into(),
        version: "test".into(),
        num_gpu_blocks: None,
        prefill: PrefillTables {
            tokens_ms: (1..=16384).map(|t| t as f64 * 0.01).collect(),
            batch_ms: vec![0.0],
            rest: Grid3 {
                n: vec![1.0],
                e: vec![1.0],
                p: vec![0.0],
                ms: vec![0.0],
                log: false,
            },
            rest_unprefixed: None,
        },
        decode: DecodeTables {
            context: vec![1.0],
            ms: vec![1.0],
        },
    }
}

#[test]
fn aic_load_model_decays_the_oldest_prefill_over_its_predicted_duration() {
    let aic = crate::aic::AicConfig {
        backend: "vllm".into(),
        system: "h200_sxm".into(),
        backend_version: None,
        model_path: "m".into(),
        tp_size: 1,
        moe_tp_size: None,
        moe_ep_size: None,
        attention_dp_size: 1,
        gemm_dtype: None,
        moe_dtype: None,
        fmha_dtype: None,
        kv_cache_dtype: None,
        comm_dtype: None,
        nextn: 0,
        calibration: None,
        tables: Some(std::sync::Arc::new(linear_aic_tables())),
    };
    let config = RouterConfig {
        router_prefill_load_model: crate::config::router_config::PrefillLoadModel::Aic,
        router_track_active_blocks: false,
        aic: Some(aic),
        ..RouterConfig::default()
    };
    let mut kv = router(config, 2);
    // 64 blocks × 64 tokens: 4096 tokens, predicted 40.96 ms.
    let Arrival::Placed(first) = kv.on_arrival(request(0, hashes(0, 64), 0.0)) else {
        panic!()
    };
    assert_eq!(kv.load.prefill_tokens(first, 0.0), 4096);
    assert_eq!(kv.load.prefill_tokens(first, 20.48), 2048);
    assert_eq!(kv.load.prefill_tokens(first, 100.0), 0);
    // A second request on the same worker waits at full load until the first one's prefill
    // ends; then it is the oldest and decays from that moment.
    let mut second = request(1, hashes(500, 32), 30.0);
    second.now_ms = 30.0;
    let Arrival::Placed(target) = kv.on_arrival(second) else {
        panic!()
    };
    // The idle worker is cheaper than 1024 remaining tokens of the first.
    assert_eq!(target, 1 - first);
    let mut third = request(2, hashes(900, 16), 50.0);
    third.now_ms = 50.0;
    // At 50 ms the first worker's load has decayed to nothing; the other holds 2048 tokens.
    assert_eq!(kv.on_arrival(third), Arrival::Placed(first));
    let mut placed = Vec::new();
    kv.on_first_token(0, 60.0, &mut placed);
    // Request 2 (1024 tokens, 10.24 ms) is now the anchor, from 60 ms.
    assert_eq!(kv.load.prefill_tokens(first, 60.0), 1024);
    assert_eq!(kv.load.prefill_tokens(first, 65.12), 512);
    // The same placements without the model keep the full loads.
    let mut plain = router(
        RouterConfig {
            router_track_active_blocks: false,
            ..RouterConfig::default()
        },
        2,
    );
    let Arrival::Placed(first) = plain.on_arrival(request(0, hashes(0, 64), 0.0)) else {
        panic!()
    };
    assert_eq!(plain.load.prefill_tokens(first, 100.0), 4096);
}

// ---- workers joining and leaving (a planner) ----

#[test]
fn a_leaving_target_is_never_chosen_even_with_the_cached_prefix() {
    let mut kv = router(RouterConfig::default(), 3);
    kv.apply_kv_events(2, &store(&hashes(100, 32)));
    kv.leave_targets(2..3);
    for id in 0..6 {
        match kv.on_arrival(request(id, hashes(100, 32), 0.0)) {
            Arrival::Placed(target) => assert!(target < 2, "placed on leaving target {target}"),
            other => panic!("{other:?}"),
        }
    }
    // Gone, its cache is forgotten: back again, it attracts nothing.
    kv.forget_targets(2..3);
    let mut placed = Vec::new();
    kv.add_targets(2..3, 0.0, &mut placed);
    assert!(placed.is_empty());
    assert_eq!(kv.index.cached_blocks(2), 0);
}

#[test]
fn a_joining_target_takes_the_queued_requests() {
    let config = RouterConfig {
        router_queue_threshold: Some(0.5),
        ..RouterConfig::default()
    };
    let mut kv = router(config, 1);
    // 4096 prefill tokens reach the threshold (0.5 x 8192): the next requests wait.
    assert_eq!(
        kv.on_arrival(request(0, hashes(0, 65), 0.0)),
        Arrival::Placed(0)
    );
    assert_eq!(
        kv.on_arrival(request(1, hashes(200, 8), 1.0)),
        Arrival::Queued
    );
    assert_eq!(
        kv.on_arrival(request(2, hashes(300, 8), 2.0)),
        Arrival::Queued
    );
    let mut placed = Vec::new();
    kv.add_targets(1..2, 3.0, &mut placed);
    // The new target is free: both queued requests go there (measured before it existed,
    // they had nothing cached on it).
    assert_eq!(
        placed,
        vec![
            Placement {
                id: 1,
                target: 1,
                overlap_blocks: 0
            },
            Placement {
                id: 2,
                target: 1,
                overlap_blocks: 0
            }
        ]
    );
    assert_eq!(kv.queued(), 0);
}

#[test]
fn with_no_eligible_target_requests_wait_for_one_to_join() {
    let mut kv = router(RouterConfig::default(), 2);
    kv.leave_targets(0..2);
    assert_eq!(
        kv.on_arrival(request(0, hashes(0, 4), 0.0)),
        Arrival::Queued
    );
    let mut placed = Vec::new();
    kv.add_targets(4..6, 1.0, &mut placed);
    assert_eq!(placed.len(), 1);
    assert!((4..6).contains(&placed[0].target));
}

// ---- engines that answer for their own blocks ----

/// Per target, the block keys its engine had published.
struct Engines(Vec<Vec<u64>>);

impl PublishedKeys for Engines {
    fn contains(&self, target: usize, key: u64) -> bool {
        self.0[target].contains(&key)
    }
    fn prefetch(&self, _target: usize, _key: u64) {}
}

#[test]
fn engines_answer_for_their_targets_until_a_target_is_forgotten() {
    let mut kv = router(RouterConfig::default(), 3);
    kv.answer_keys_from_engines();
    let cached = hashes(100, 32);
    let mut prompt = cached.clone();
    prompt.extend(hashes(900, 8));
    // Per-block events are not mirrored: the engines' answers place the request.
    kv.apply_kv_events(0, &store(&cached));
    let engines = Engines(vec![Vec::new(), tokens(&cached).block_keys(BS), Vec::new()]);
    assert_eq!(
        kv.on_arrival_with(request(0, prompt.clone(), 0.0), &engines),
        Arrival::Placed(1)
    );
    assert_eq!(kv.last_overlap_blocks(), 32);
    let blocks = tokens(&prompt).block_hashes(BS);
    assert_eq!(kv.index.overlaps(&blocks, &engines), [0, 32, 0]);
    // A target that joins later is answered by its engine too.
    let mut placed = Vec::new();
    kv.add_targets(3..4, 0.0, &mut placed);
    let mut engines = engines;
    engines.0.push(tokens(&cached).block_keys(BS)[..5].to_vec());
    assert_eq!(kv.index.overlaps(&blocks, &engines), [0, 32, 0, 5]);
    // A forgotten target is mirrored from then on, from empty, whatever its engine says.
    kv.forget_targets(1..2);
    assert_eq!(kv.index.overlaps(&blocks, &engines), [0, 0, 0, 5]);
    kv.apply_kv_events(1, &store(&cached[..3]));
    assert_eq!(kv.index.overlaps(&blocks, &engines), [0, 3, 0, 5]);
}
