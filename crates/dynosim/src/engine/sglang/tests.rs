//! Tests of the SGLang flavour. Expected times are the reference's (ai-dynamo 1.4.2) for the
//! same workloads, run as one-worker mooncake traces.

use super::*;
use crate::config::{EngineArgs, SglangArgs};
use crate::engine::timing::{polynomial_decode_ms, polynomial_prefill_ms};
use crate::tokens::block_key;

/// What happened to one request, as the simulator would stamp it.
#[derive(Clone, Debug, Default)]
struct Life {
    first_admit_ms: Option<f64>,
    admissions: Vec<usize>,
    first_token_ms: Option<f64>,
    tokens: usize,
    completed_ms: Option<f64>,
}

/// Drives one scheduler like a one-worker replay: requests arrive at their times (taken at the
/// next pass start), tokens are stamped at pass end. Checks the KV bookkeeping after every pass.
struct Harness {
    scheduler: SglangScheduler,
    lives: Vec<Life>,
    now_ms: f64,
    passes: usize,
    /// When recording KV events: the page identities a router has seen, replayed from them.
    router_view: Option<HashSet<u64>>,
    kv_events: Vec<KvEvent>,
}

fn args(json: &str) -> EngineArgs {
    EngineArgs::from_json("--extra-engine-args", json).expect("valid engine args")
}

fn prompt(runs: &[(u64, u32)]) -> TokenSeq {
    let mut seq = TokenSeq::new();
    for &(token, len) in runs {
        seq.push_run(token, len);
    }
    seq
}

impl Harness {
    fn new(args: &EngineArgs) -> Self {
        Self {
            scheduler: SglangScheduler::new(args, 0),
            lives: Vec::new(),
            now_ms: 0.0,
            passes: 0,
            router_view: None,
            kv_events: Vec::new(),
        }
    }

    /// Records the rank's KV events; every pass then checks that they describe the tree.
    fn record_kv_events(&mut self) {
        self.scheduler.record_kv_events();
        self.router_view = Some(HashSet::new());
    }

    /// Applies the pass's events as the router does at the pass end, strictly (a stored
    /// identity must be new, a removed one known), and compares the result with the tree.
    fn check_router_view(&mut self) {
        let Some(view) = &mut self.router_view else {
            return;
        };
        self.scheduler.drain_kv_events(&mut self.kv_events);
        for event in &self.kv_events {
            match *event {
                KvEvent::StoredRun { base, first, count } => {
                    for i in first..first + count {
                        assert!(view.insert(block_key(base, i)), "stored twice");
                    }
                }
                KvEvent::RemovedRun { base, first, count } => {
                    for i in first..first + count {
                        assert!(view.remove(&block_key(base, i)), "removed unknown");
                    }
                }
                other => panic!("a radix tree reports runs: {other:?}"),
            }
        }
        let mut seen: Vec<u64> = view.iter().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, self.scheduler.cache.page_ids_in_tree());
    }

    fn add(&mut self, prompt: TokenSeq, max_output_tokens: usize) -> RequestId {
        let id = self.lives.len();
        self.lives.push(Life::default());
        self.scheduler.enqueue(EngineRequest {
            id,
            prompt,
            max_output_tokens,
        });
        id
    }

    /// Runs one pass; returns false when it did nothing.
    fn pass(&mut self) -> bool {
        let mut events = Vec::new();
        let time = self.scheduler.run_pass_timed(&mut events);
        self.scheduler.check_invariants();
        self.check_router_view();
        self.passes += 1;
        let end = time.end_ms(self.now_ms);
        for event in &events {
            match *event {
                PassEvent::Admitted { id, reused_tokens } => {
                    let life = &mut self.lives[id];
                    life.first_admit_ms.get_or_insert(self.now_ms);
                    life.admissions.push(reused_tokens);
                }
                PassEvent::Tokens { id, count } => {
                    let life = &mut self.lives[id];
                    life.first_token_ms.get_or_insert(end);
                    life.tokens += count;
                }
                PassEvent::Completed { id } => self.lives[id].completed_ms = Some(end),
                PassEvent::Rejected { .. } => panic!("SGLang never rejects"),
            }
        }
        self.now_ms = end;
        time.scheduled_requests > 0 || !events.is_empty()
    }

    /// Runs passes until the rank is idle; false if it got stuck.
    fn run(&mut self) -> bool {
        while self.scheduler.has_work() {
            if !self.pass() {
                return false;
            }
        }
        true
    }

    fn reused(&self, id: RequestId) -> usize {
        self.lives[id].admissions.iter().copied().max().unwrap_or(0)
    }

    fn ttft(&self, id: RequestId) -> f64 {
        self.lives[id].first_token_ms.expect("a first token")
    }

    fn e2e(&self, id: RequestId) -> f64 {
        self.lives[id].completed_ms.expect("completed")
    }
}

fn assert_close(got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-6 * want.abs().max(1.0),
        "got {got}, want {want}"
    );
}

fn dec(active_tokens: usize, total_tokens: usize) -> f64 {
    polynomial_decode_ms(active_tokens, total_tokens)
}

#[test]
fn single_request_ttft() {
    // engine.md §2.4: TTFT(1000) = pre(1000) + dec(1000/16384) = 41.046479.
    let mut h = Harness::new(&args(r#"{"engine_type":"sglang"}"#));
    let id = h.add(prompt(&[(1, 1000)]), 2);
    assert!(h.run());
    assert_close(h.ttft(id), 41.046479);
    assert_close(
        h.ttft(id),
        polynomial_prefill_ms(1, 1000, 0) + dec(1000, 16384),
    );
    assert_close(h.e2e(id) - h.ttft(id), dec(1001, 16384));
    assert_eq!(h.reused(id), 0);
}

#[test]
fn a_fully_cached_prompt_costs_one_decode_step() {
    // No "recompute the last token" rule: the repeat reuses all 1024 tokens.
    let mut h = Harness::new(&args(r#"{"engine_type":"sglang"}"#));
    let first = h.add(prompt(&[(1, 512), (2, 512)]), 1);
    assert!(h.run());
    let start = h.now_ms;
    let repeat = h.add(prompt(&[(1, 512), (2, 512)]), 1);
    assert!(h.run());
    assert_eq!(h.reused(first), 0);
    assert_eq!(h.reused(repeat), 1024);
    assert_close(h.ttft(repeat) - start, dec(1024, 16384));
    assert_close(dec(1024, 16384), 9.015078125);
}

#[test]
fn reuse_is_page_aligned() {
    // With 16-token pages, ISL 1000 after ISL 1024 (same content) reuses 992 tokens.
    let mut h = Harness::new(&args(r#"{"engine_type":"sglang","block_size":16}"#));
    h.add(prompt(&[(1, 512), (2, 512)]), 1);
    assert!(h.run());
    let second = h.add(prompt(&[(1, 512), (2, 488)]), 1);
    assert!(h.run());
    assert_eq!(h.reused(second), 992);
}

#[test]
fn requests_admitted_together_do_not_share() {
    let mut h = Harness::new(&args(r#"{"engine_type":"sglang"}"#));
    let a = h.add(prompt(&[(1, 1000)]), 2);
    let b = h.add(prompt(&[(1, 1000)]), 2);
    assert!(h.pass());
    assert_eq!(h.lives[a].admissions, vec![0]);
    assert_eq!(h.lives[b].admissions, vec![0]);
    // One prefill of both prompts, then one decode step over 2000 tokens.
    assert_close(
        h.ttft(a),
        polynomial_prefill_ms(2, 2000, 0) + dec(2000, 16384),
    );
}

#[test]
fn long_prompts_are_chunked_and_short_ones_wait_for_a_fresh_budget() {
    let mut h = Harness::new(&args(r#"{"engine_type":"sglang","num_gpu_blocks":100000}"#));
    let long = h.add(prompt(&[(1, 9000)]), 1);
    let short_a = h.add(prompt(&[(2, 5000)]), 1);
    let short_b = h.add(prompt(&[(3, 5000)]), 1);
    assert!(h.pass());
    // 8192 tokens of the long prompt; it goes back to the front of the queue.
    assert_eq!(h.lives[long].admissions, vec![0]);
    assert_eq!(h.lives[short_a].admissions, Vec::<usize>::new());
    assert!(h.pass());
    // The continuation is an admission too, reporting the computed part as reused; the first
    // 5000-token prompt fills the rest of the chunk budget, the second does not fit beside it.
    assert_eq!(h.lives[long].admissions, vec![0, 8192]);
    assert_eq!(h.lives[short_a].admissions, vec![0]);
    assert_eq!(h.lives[short_b].admissions, Vec::<usize>::new());
    assert!(h.run());
    assert_eq!(h.reused(long), 8192);
    assert_close(
        h.ttft(long),
        polynomial_prefill_ms(1, 8192, 0)
            + polynomial_prefill_ms(2, 9000 + 5000, 8192)
            + dec(14000, 100000),
    );
}

#[test]
fn max_num_seqs_caps_running_requests() {
    let mut h = Harness::new(&args(
        r#"{"engine_type":"sglang","max_num_seqs":1,"num_gpu_blocks":100000}"#,
    ));
    let a = h.add(prompt(&[(1, 100)]), 3);
    let b = h.add(prompt(&[(2, 100)]), 3);
    assert!(h.run());
    assert_eq!(h.lives[b].first_admit_ms, h.lives[a].completed_ms);
}

/// Four requests of 800 prompt + 600 output tokens in a 2600-token pool, admitted with a
/// 50-token output clip: decode runs out of pages and retracts. Reference:
/// (first admit, TTFT, E2E, reused) per request.
#[test]
fn retraction_matches_the_reference() {
    let mut h = Harness::new(&args(
        r#"{"engine_type":"sglang","num_gpu_blocks":2600,"sglang":{"clip_max_new_tokens":50}}"#,
    ));
    for i in 0..4 {
        h.add(prompt(&[(100 + i, 512), (200 + i, 288)]), 600);
    }
    assert!(h.run());
    let want = [
        (0.0, 89.029707, 36625.259007, 0),
        (0.0, 89.029707, 22489.69316099997, 1200),
        (0.0, 89.029707, 19133.730686999967, 0),
        (
            22489.69316099997,
            22549.16076299997,
            41470.67768900001,
            1200,
        ),
    ];
    for (id, &(admit, ttft, e2e, reused)) in want.iter().enumerate() {
        assert_close(h.lives[id].first_admit_ms.unwrap(), admit);
        assert_close(h.ttft(id), ttft);
        assert_close(h.e2e(id), e2e);
        assert_eq!(h.reused(id), reused, "request {id}");
        assert_eq!(h.lives[id].tokens, 600);
    }
}

#[test]
fn retraction_takes_the_fewest_outputs_and_requeues_at_the_front() {
    let mut h = Harness::new(&args(
        r#"{"engine_type":"sglang","num_gpu_blocks":2600,"sglang":{"clip_max_new_tokens":50}}"#,
    ));
    for i in 0..4 {
        h.add(prompt(&[(100 + i, 512), (200 + i, 288)]), 600);
    }
    // Until the first retraction, three requests run with equal outputs.
    let mut retracted = None;
    while retracted.is_none() {
        assert!(h.pass());
        let s = &h.scheduler;
        if s.running.len() < 3 {
            retracted = s
                .waiting
                .front()
                .map(|r| (r.id, r.output_len(), r.materialized));
        }
    }
    let (id, output_len, materialized) = retracted.unwrap();
    // Ties go to the earliest running request; it keeps its tokens but no KV.
    assert_eq!(id, 0);
    assert!(output_len > 0);
    assert_eq!(materialized, 0);
    assert_eq!(h.scheduler.waiting[1].id, 3);
    assert_eq!(
        h.scheduler.new_token_ratio,
        h.scheduler.init_new_token_ratio - h.scheduler.new_token_ratio_step
    );
}

#[test]
fn a_prompt_that_never_fits_blocks_the_queue() {
    // 16384 tokens do not fit the default 16384-token pool beside their output reservation:
    // the first chunk runs, the last one never does.
    let mut h = Harness::new(&args(r#"{"engine_type":"sglang"}"#));
    let big = h.add(prompt(&[(1, 16384)]), 10);
    h.add(prompt(&[(2, 10)]), 10);
    assert!(h.pass());
    assert_eq!(h.lives[big].admissions, vec![0]);
    assert_eq!(h.scheduler.blocked_request(), None);
    assert!(!h.pass());
    assert_eq!(h.scheduler.blocked_request(), Some(big));
    assert_eq!(h.scheduler.num_requests(), 2);
    // A new arrival clears the verdict until the next pass.
    h.add(prompt(&[(3, 10)]), 10);
    assert_eq!(h.scheduler.blocked_request(), None);
    assert!(!h.pass());
    assert_eq!(h.scheduler.blocked_request(), Some(big));
}

#[test]
fn output_length_zero_completes_without_a_token() {
    let mut h = Harness::new(&args(r#"{"engine_type":"sglang"}"#));
    let id = h.add(prompt(&[(1, 1000)]), 0);
    assert!(h.run());
    assert_eq!(h.lives[id].tokens, 0);
    assert_close(h.e2e(id), polynomial_prefill_ms(1, 1000, 0));
}

#[test]
fn lpm_runs_the_longest_cached_prefix_first() {
    let engine = r#"{"engine_type":"sglang","max_num_seqs":1,"num_gpu_blocks":100000,
                     "sglang":{"schedule_policy":"lpm"}}"#;
    let mut h = Harness::new(&args(engine));
    h.add(prompt(&[(1, 500), (2, 500)]), 1);
    assert!(h.run());
    let cold = h.add(prompt(&[(7, 1000)]), 1);
    let half = h.add(prompt(&[(1, 500), (8, 500)]), 1);
    let full = h.add(prompt(&[(1, 500), (2, 500), (9, 10)]), 1);
    assert!(h.run());
    let admit = |id: RequestId| h.lives[id].first_admit_ms.unwrap();
    assert!(admit(full) < admit(half));
    assert!(admit(half) < admit(cold));
    assert_eq!(h.reused(full), 1000);
    assert_eq!(h.reused(half), 500);
}

#[test]
fn lpm_puts_uncached_twins_behind() {
    let engine = r#"{"engine_type":"sglang","max_num_seqs":1,"num_gpu_blocks":100000,
                     "sglang":{"schedule_policy":"lpm"}}"#;
    let mut h = Harness::new(&args(engine));
    let a = h.add(prompt(&[(1, 100), (2, 100)]), 1);
    let twin = h.add(prompt(&[(1, 100), (3, 100)]), 1);
    let other = h.add(prompt(&[(4, 200)]), 1);
    assert!(h.pass());
    // Nothing is cached: `twin` opens like `a`, so it goes behind `other`.
    assert_eq!(h.lives[a].admissions, vec![0]);
    let order: Vec<RequestId> = h.scheduler.waiting.iter().map(|r| r.id).collect();
    assert_eq!(order, vec![other, twin]);
    assert!(h.run());
    // By its turn, `a` is cached and it reuses the shared opening.
    assert_eq!(h.reused(twin), 100);
}

#[test]
fn random_workloads_keep_the_books_balanced() {
    // Small pools, several page sizes and both policies: every pass checks page conservation,
    // lock counts and the evictable-leaf set.
    let mut state = 0x1234_5678_u64;
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for case in 0..12 {
        let page_size = [1, 4, 16][case % 3];
        let policy = if case % 2 == 0 { "fifo" } else { "lpm" };
        let blocks = 3000 / page_size;
        let engine = format!(
            r#"{{"engine_type":"sglang","num_gpu_blocks":{blocks},"block_size":{page_size},
                "sglang":{{"schedule_policy":"{policy}","chunked_prefill_size":{},
                "clip_max_new_tokens":40}}}}"#,
            256 * page_size
        );
        let mut h = Harness::new(&args(&engine));
        if case % 4 != 3 {
            h.record_kv_events();
        }
        for _ in 0..25 {
            let shared = next(4);
            let mut runs = vec![(shared, 1 + next(300) as u32)];
            if next(2) == 0 {
                runs.push((10 + next(3), 1 + next(400) as u32));
            }
            h.add(prompt(&runs), next(200) as usize);
        }
        assert!(h.run(), "case {case} got stuck");
        for life in &h.lives {
            assert!(life.completed_ms.is_some());
        }
        let s = &h.scheduler;
        assert_eq!(
            s.cache.available_tokens() + s.cache.evictable_tokens(),
            s.cache.total_tokens()
        );
    }
}

#[test]
fn kv_events_publish_the_pages_a_router_hashes() {
    // The router hashes a prompt in engine blocks (= SGLang pages); the identities the rank
    // publishes must be the same, so the router's overlap equals what the rank then reuses.
    use crate::router::kv::indexer::CacheIndex;
    let page_size = 4;
    let mut h = Harness::new(&args(
        r#"{"engine_type":"sglang","block_size":4,"num_gpu_blocks":1000}"#,
    ));
    h.record_kv_events();
    let mut index = CacheIndex::new(1);
    let first = prompt(&[(1, 30), (2, 7)]);
    h.add(first.clone(), 5);
    let mut events = Vec::new();
    while h.scheduler.has_work() {
        assert!(h.pass());
        // The harness checked the events against the tree; replay them into the router too.
        events.extend_from_slice(&h.kv_events);
    }
    index.apply(0, &events);
    // 37 prompt tokens + 5 outputs (the last one never computed) = 41 computed: 10 full pages.
    assert_eq!(index.cached_blocks(0), 10);
    assert_eq!(index.overlap(0, &first.block_hashes(page_size)), 9);

    let follow_up = prompt(&[(1, 30), (2, 7), (3, 20)]);
    let hashes = follow_up.block_hashes(page_size);
    let overlap = index.overlap(0, &hashes);
    assert_eq!(overlap, 9);
    let id = h.add(follow_up, 1);
    assert!(h.run());
    assert_eq!(h.reused(id), overlap * page_size);
    assert_eq!(
        index.overlap(0, &prompt(&[(1, 30)]).block_hashes(page_size)),
        7
    );
    assert_eq!(
        index.overlap(0, &prompt(&[(2, 30)]).block_hashes(page_size)),
        0
    );
}

#[test]
fn an_admitted_request_is_visible_after_its_first_pass() {
    // SGLang's events are applied at the pass end: after the pass that prefills a prompt, its
    // full pages are in the tree (even while the request keeps running, and for a prompt cut
    // into chunks, the chunks computed so far).
    let mut h = Harness::new(&args(
        r#"{"engine_type":"sglang","sglang":{"chunked_prefill_size":64}}"#,
    ));
    h.record_kv_events();
    let long = prompt(&[(5, 150)]);
    h.add(long.clone(), 10);
    let stored_pages = |h: &Harness| {
        h.kv_events
            .iter()
            .map(|event| match *event {
                KvEvent::StoredRun { count, .. } => count,
                _ => 0,
            })
            .sum::<usize>()
    };
    assert!(h.pass());
    assert_eq!(stored_pages(&h), 64);
    // One token run: one event.
    assert_eq!(h.kv_events.len(), 1);
    assert!(h.pass());
    assert_eq!(stored_pages(&h), 64);
    assert!(h.pass());
    // The last 22 prompt tokens, then the first generated token.
    assert_eq!(stored_pages(&h), 23);
    assert_eq!(h.kv_events.len(), 2);
    let hashes = long.block_keys(1);
    let view = h.router_view.as_ref().expect("recording");
    assert!(hashes.iter().all(|hash| view.contains(hash)));
}

#[test]
fn recording_kv_events_changes_nothing() {
    let engine = args(
        r#"{"engine_type":"sglang","num_gpu_blocks":800,"block_size":2,
            "sglang":{"chunked_prefill_size":128,"clip_max_new_tokens":40}}"#,
    );
    let run = |record: bool| {
        let mut h = Harness::new(&engine);
        if record {
            h.record_kv_events();
        }
        for k in 0..30u64 {
            h.add(
                prompt(&[(k % 3, 100 + 7 * k as u32), (k, 50)]),
                20 + k as usize * 3,
            );
        }
        assert!(h.run());
        h.lives
            .iter()
            .map(|life| {
                (
                    life.admissions.clone(),
                    life.first_token_ms,
                    life.completed_ms,
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn unknown_policy_names_fall_back_to_fifo() {
    let mut args = args(r#"{"engine_type":"sglang"}"#);
    args.sglang = Some(SglangArgs {
        schedule_policy: Some("weird".into()),
        ..SglangArgs::default()
    });
    assert_eq!(SglangScheduler::new(&args, 0).policy, SchedulePolicy::Fifo);
}

#[test]
fn with_a_recv_interval_arrivals_wait_for_the_poll_while_the_rank_decodes() {
    let engine = |interval: usize| {
        args(&format!(
            r#"{{"engine_type":"sglang","num_gpu_blocks":100000,
                "sglang":{{"scheduler_recv_interval":{interval}}}}}"#
        ))
    };
    // Interval 1 is every pass, as without the key.
    for interval in [1, 5] {
        let mut h = Harness::new(&engine(interval));
        // An idle rank takes an arrival in at once.
        let first = h.add(prompt(&[(1, 100)]), 50);
        assert!(h.pass());
        assert_eq!(h.lives[first].admissions, vec![0], "interval {interval}");
        // The prefill pass counts as a poll due at the next pass: a request that arrives now
        // is taken in at the next pass.
        let second = h.add(prompt(&[(2, 100)]), 50);
        assert!(h.pass());
        assert_eq!(h.lives[second].admissions, vec![0], "interval {interval}");
        // After a decode-only pass, the next arrival waits until `interval` decode passes
        // have run since the last poll.
        assert!(h.pass());
        let third = h.add(prompt(&[(3, 100)]), 50);
        let arrived_after = h.passes;
        while h.lives[third].admissions.is_empty() {
            assert!(h.pass());
        }
        let admitted_at = h.passes - 1;
        // Decode passes 4..=interval+2 run first (none when polling every pass).
        assert_eq!(
            admitted_at - arrived_after,
            interval - 1,
            "interval {interval}"
        );
        assert!(h.run());
        assert_eq!(h.lives[third].tokens, 50);
    }
}

#[test]
fn an_aborted_request_still_in_the_inbox_leaves_nothing_behind() {
    let mut h = Harness::new(&args(
        r#"{"engine_type":"sglang","sglang":{"scheduler_recv_interval":30}}"#,
    ));
    let running = h.add(prompt(&[(1, 100)]), 40);
    assert!(h.pass());
    assert!(h.pass());
    let waiting = h.add(prompt(&[(2, 100)]), 5);
    assert_eq!(h.scheduler.load().waiting, 1);
    assert!(h.scheduler.abort(waiting));
    assert!(!h.scheduler.abort(waiting));
    assert_eq!(h.scheduler.num_requests(), 1);
    assert!(h.run());
    assert_eq!(h.lives[running].tokens, 40);
    assert!(h.scheduler.is_drained());
}
