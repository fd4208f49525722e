//! Single-rank behaviour against numbers from the reference (ai-dynamo 1.4.2 `dynamo.replay`).
//!
//! `testdata/golden.json` holds small traces (mooncake rows; hash ids as runs of consecutive
//! ids) with engine args, each replayed by the reference; the expected per-request admission,
//! first-token and terminal times, reuse and output counts come from its `--report-jsonl`.

use super::*;
use crate::tokens::TokenSeq;

/// One trace row.
struct Row {
    arrival_ms: f64,
    prompt: TokenSeq,
    output: usize,
}

/// What happened to one request in a replay.
#[derive(Clone, Debug, Default)]
struct Seen {
    admit_ms: Option<f64>,
    first_token_ms: Option<f64>,
    terminal_ms: Option<f64>,
    reused: usize,
    output: usize,
    rejected: bool,
    admissions: usize,
}

/// The prompt of a mooncake row: each hash id stands for `trace_block_size` copies of one token.
fn prompt(isl: usize, hash_ids: &[u64], trace_block_size: usize) -> TokenSeq {
    let mut seq = TokenSeq::new();
    let mut left = isl;
    for &h in hash_ids {
        let n = left.min(trace_block_size);
        seq.push_run(h + 1, n as u32);
        left -= n;
    }
    assert_eq!(left, 0, "hash ids cover the prompt");
    seq
}

/// Replays rows through one rank the way the reference's single-worker loop does: a pass
/// starts whenever the rank has work, arrivals at or before the pass start join first, and an
/// idle rank jumps to the next arrival.
fn replay(args: &EngineArgs, rows: &[Row]) -> Vec<Seen> {
    let mut sched = VllmScheduler::new(args, 0);
    let mut seen = vec![Seen::default(); rows.len()];
    let mut now = 0.0f64;
    let mut next = 0;
    let mut events = Vec::new();
    let mut stalled = 0;
    loop {
        while next < rows.len() && rows[next].arrival_ms <= now {
            sched.enqueue(EngineRequest {
                id: next,
                prompt: rows[next].prompt.clone(),
                max_output_tokens: rows[next].output,
            });
            next += 1;
        }
        if !sched.has_work() {
            if next == rows.len() {
                break;
            }
            now = rows[next].arrival_ms;
            continue;
        }
        events.clear();
        let time = sched.run_pass_timed(&mut events);
        let end = time.end_ms(now);
        for event in &events {
            match *event {
                PassEvent::Admitted { id, reused_tokens } => {
                    let s = &mut seen[id];
                    s.admit_ms.get_or_insert(now);
                    s.reused = s.reused.max(reused_tokens);
                    s.admissions += 1;
                }
                PassEvent::Rejected { id } => {
                    seen[id].rejected = true;
                    seen[id].terminal_ms = Some(end);
                }
                PassEvent::Tokens { id, count } => {
                    seen[id].output += count;
                    seen[id].first_token_ms.get_or_insert(end);
                }
                PassEvent::Completed { id } => seen[id].terminal_ms = Some(end),
            }
        }
        if events.is_empty() && end == now {
            stalled += 1;
            assert!(
                stalled < 1024,
                "dead end with {} requests",
                sched.num_requests()
            );
        } else {
            stalled = 0;
        }
        now = end;
    }
    seen
}

fn args_from_json(engine: &serde_json::Value) -> EngineArgs {
    let mut args = EngineArgs::default();
    let opt = |v: &serde_json::Value| v.as_u64().map(|x| x as usize);
    for (key, value) in engine.as_object().expect("engine args object") {
        match key.as_str() {
            "engine_type" => {
                args.engine_type = match value.as_str().unwrap() {
                    "trtllm" => EngineType::Trtllm,
                    "vllm" => EngineType::Vllm,
                    other => panic!("engine {other}"),
                }
            }
            "block_size" => args.block_size = opt(value).unwrap(),
            "num_gpu_blocks" => args.num_gpu_blocks = opt(value).unwrap(),
            "max_model_len" => args.max_model_len = opt(value),
            "max_num_seqs" => args.max_num_seqs = opt(value),
            "max_num_batched_tokens" => args.max_num_batched_tokens = opt(value),
            "enable_chunked_prefill" => args.enable_chunked_prefill = value.as_bool().unwrap(),
            "enable_prefix_caching" => args.enable_prefix_caching = value.as_bool().unwrap(),
            "speedup_ratio" => args.speedup_ratio = value.as_f64().unwrap(),
            "decode_speedup_ratio" => args.decode_speedup_ratio = value.as_f64().unwrap(),
            "preemption_mode" => {
                args.preemption_mode = match value.as_str().unwrap() {
                    "fifo" => PreemptionMode::Fifo,
                    _ => PreemptionMode::Lifo,
                }
            }
            other => panic!("unhandled engine arg {other}"),
        }
    }
    args
}

struct Scenario {
    name: String,
    args: EngineArgs,
    rows: Vec<Row>,
    expected: Vec<serde_json::Value>,
}

fn golden() -> Vec<Scenario> {
    let all: serde_json::Value =
        serde_json::from_str(include_str!("testdata/golden.json")).expect("golden json");
    let mut out = Vec::new();
    for s in all.as_array().unwrap() {
        let tbs = s["tbs"].as_u64().unwrap() as usize;
        let reqs = s["requests"].as_array().unwrap();
        let t0 = reqs
            .iter()
            .map(|r| r["t"].as_f64().unwrap())
            .fold(f64::INFINITY, f64::min);
        let rows = reqs
            .iter()
            .map(|r| {
                // Hash ids are stored as runs of consecutive ids: [first, count].
                let ids: Vec<u64> = r["hash_runs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .flat_map(|run| {
                        let first = run[0].as_u64().unwrap();
                        first..first + run[1].as_u64().unwrap()
                    })
                    .collect();
                Row {
                    arrival_ms: r["t"].as_f64().unwrap() - t0,
                    prompt: prompt(r["isl"].as_u64().unwrap() as usize, &ids, tbs),
                    output: r["osl"].as_u64().unwrap() as usize,
                }
            })
            .collect();
        out.push(Scenario {
            name: s["name"].as_str().unwrap().to_string(),
            args: args_from_json(&s["engine"]),
            rows,
            expected: s["expected"].as_array().unwrap().clone(),
        });
    }
    out
}

/// Expected times are stored as decimal strings (shortest round-trip form) and parsed with the
/// correctly rounded std parser, so they can be compared exactly.
fn expected_time(want: &serde_json::Value) -> Option<f64> {
    want.as_str().map(|text| text.parse().expect("time"))
}

/// The reference's clock arithmetic is reproduced operation for operation: times agree bit
/// for bit.
fn same_time(got: Option<f64>, want: &serde_json::Value) -> bool {
    got == expected_time(want)
}

fn check(scenario: &Scenario) -> (Vec<String>, usize) {
    let seen = replay(&scenario.args, &scenario.rows);
    let mut errors = Vec::new();
    let mut preemptions = 0;
    for (i, (got, want)) in seen.iter().zip(&scenario.expected).enumerate() {
        preemptions += got.admissions.saturating_sub(1);
        let status = if got.rejected {
            "rejected"
        } else {
            "completed"
        };
        let ok = same_time(got.admit_ms, &want["admit"])
            && same_time(got.first_token_ms, &want["first"])
            && same_time(got.terminal_ms, &want["end"])
            && got.reused as u64 == want["reused"].as_u64().unwrap()
            && got.output as u64 == want["out"].as_u64().unwrap()
            && status == want["status"].as_str().unwrap();
        if !ok {
            errors.push(format!("{} #{i}: got {got:?}, want {want}", scenario.name));
        }
    }
    (errors, preemptions)
}

#[test]
fn golden_scenarios_match_the_reference() {
    let mut errors = Vec::new();
    for scenario in golden() {
        let (mut e, _) = check(&scenario);
        e.truncate(3);
        errors.extend(e);
    }
    assert!(
        errors.is_empty(),
        "{} mismatches:\n{}",
        errors.len(),
        errors.join("\n")
    );
}

/// Replays `(arrival_ms, input_length, output_length, hash_ids)` rows with trace block size 512.
fn run(args: &EngineArgs, rows: &[(f64, usize, usize, &[u64])]) -> Vec<Seen> {
    let rows: Vec<Row> = rows
        .iter()
        .map(|&(t, isl, osl, ids)| Row {
            arrival_ms: t,
            prompt: prompt(isl, ids, 512),
            output: osl,
        })
        .collect();
    replay(args, &rows)
}

fn vllm(block_size: usize, num_gpu_blocks: usize) -> EngineArgs {
    EngineArgs {
        block_size,
        num_gpu_blocks,
        ..EngineArgs::default()
    }
}

fn trtllm(num_gpu_blocks: usize) -> EngineArgs {
    EngineArgs {
        engine_type: EngineType::Trtllm,
        block_size: 32,
        num_gpu_blocks,
        ..EngineArgs::default()
    }
}

fn assert_ms(got: Option<f64>, want: f64) {
    let got = got.expect("a time");
    assert!((got - want).abs() < 1e-6, "got {got}, want {want}");
}

#[test]
fn single_request_ttft_and_ttst_follow_the_polynomials() {
    // engine.md §2.4: vllm defaults (bs 64, C 16384), one request at a time.
    let cases = [
        (128, &[1u64][..], 24.198391, 5.749889),
        (1000, &[2, 3][..], 37.898579, 5.792720),
        (1024, &[4, 5][..], 38.283432, 5.796013),
        (4096, &[6, 7, 8, 9, 10, 11, 12, 13][..], 91.706564, 5.953868),
    ];
    for (isl, ids, ttft, ttst) in cases {
        let seen = run(&EngineArgs::default(), &[(0.0, isl, 2, ids)]);
        assert_ms(seen[0].first_token_ms, ttft);
        assert_ms(seen[0].terminal_ms, ttft + ttst);
    }
    // 16384 tokens are prefilled in two 8192-token chunks.
    let ids: Vec<u64> = (100..132).collect();
    let seen = run(&EngineArgs::default(), &[(0.0, 16384, 2, &ids)]);
    assert_ms(seen[0].first_token_ms, 344.851458);
    assert_ms(seen[0].terminal_ms, 344.851458 + 6.580869);
}

#[test]
fn trtllm_single_request_uses_block_size_32() {
    let seen = run(&trtllm(16384), &[(0.0, 1000, 2, &[1, 2])]);
    assert_ms(seen[0].first_token_ms, 37.951249);
}

#[test]
fn vllm_recomputes_the_last_block_of_a_fully_cached_prompt() {
    let seen = run(
        &EngineArgs::default(),
        &[
            (0.0, 1024, 2, &[1, 2]),
            (1000.0, 1024, 2, &[1, 2]),
            (2000.0, 1000, 2, &[5, 6]),
            (3000.0, 1001, 2, &[5, 6]),
        ],
    );
    assert_eq!(
        seen.iter().map(|s| s.reused).collect::<Vec<_>>(),
        [0, 960, 0, 960]
    );
    // TTFT of the repeat = prefill of the 64 recomputed tokens + one decode step.
    assert_ms(seen[1].first_token_ms, 1023.267605);
}

#[test]
fn trtllm_reuses_a_fully_cached_prompt_entirely() {
    let seen = run(
        &trtllm(16384),
        &[(0.0, 1024, 2, &[1, 2]), (20000.0, 1024, 2, &[1, 2])],
    );
    assert_eq!(seen[1].reused, 1024);
    // No prefill at all: TTFT is one decode step.
    assert_ms(seen[1].first_token_ms, 20005.84539);
}

#[test]
fn reuse_stops_at_the_last_shared_full_block() {
    // 600 and 700 tokens over hash ids [1, 2] (512 tokens each): they share 600 tokens, so
    // nine 64-token blocks.
    let seen = run(
        &EngineArgs::default(),
        &[(0.0, 600, 2, &[1, 2]), (1000.0, 700, 2, &[1, 2])],
    );
    assert_eq!(seen[1].reused, 576);
    assert_ms(seen[1].first_token_ms, 1024.16689);
}

#[test]
fn blocks_computed_earlier_in_the_same_pass_are_reusable() {
    let seen = run(
        &EngineArgs::default(),
        &[(0.0, 1024, 2, &[1, 2]), (0.0, 1500, 2, &[1, 2, 3])],
    );
    assert_eq!(seen[1].reused, 1024);
    assert_ms(seen[0].first_token_ms, 46.042889);
    assert_ms(seen[1].first_token_ms, 46.042889);
}

#[test]
fn preemption_order_follows_the_mode() {
    // Three 200-token prompts generating 200 tokens each in a 40-block pool of 16-token blocks.
    let rows: [(f64, usize, usize, &[u64]); 3] = [
        (0.0, 200, 200, &[1]),
        (0.0, 201, 200, &[2]),
        (0.0, 202, 200, &[3]),
    ];
    let lifo = run(&vllm(16, 40), &rows);
    let fifo = run(
        &EngineArgs {
            preemption_mode: PreemptionMode::Fifo,
            ..vllm(16, 40)
        },
        &rows,
    );
    for seen in [&lifo, &fifo] {
        for s in seen.iter() {
            assert_ms(s.first_token_ms, 59.740776);
            assert_eq!(s.output, 200);
        }
    }
    // LIFO evicts the newest request, so they finish in arrival order; FIFO evicts the oldest.
    let ends = |seen: &[Seen]| {
        seen.iter()
            .map(|s| s.terminal_ms.unwrap())
            .collect::<Vec<_>>()
    };
    let lifo_ends = ends(&lifo);
    let fifo_ends = ends(&fifo);
    for (got, want) in
        lifo_ends
            .iter()
            .zip([6225.481903000018, 8793.000219000036, 12671.578015000041])
    {
        assert_ms(Some(*got), want);
    }
    for (got, want) in
        fifo_ends
            .iter()
            .zip([11771.101726000032, 12675.36073400004, 6260.491528000018])
    {
        assert_ms(Some(*got), want);
    }
    // Re-admitted requests reuse their own prompt and generated blocks (more than the prompt).
    assert_eq!(
        lifo.iter().map(|s| s.reused).collect::<Vec<_>>(),
        [0, 240, 240]
    );
    assert_eq!(
        fifo.iter().map(|s| s.reused).collect::<Vec<_>>(),
        [0, 240, 0]
    );
    assert!(lifo.iter().map(|s| s.admissions).sum::<usize>() > 3);
}

#[test]
fn trtllm_reserves_whole_requests_and_never_preempts() {
    // 4 x (500 + 1000 tokens) need 47 blocks each of the 100: exactly two run at a time.
    let seen = run(
        &trtllm(100),
        &[
            (0.0, 500, 1000, &[10]),
            (0.0, 501, 1000, &[11]),
            (0.0, 502, 1000, &[12]),
            (0.0, 503, 1000, &[13]),
        ],
    );
    assert_eq!(
        seen.iter().map(|s| s.admissions).collect::<Vec<_>>(),
        [1, 1, 1, 1]
    );
    assert_ms(seen[0].admit_ms, 0.0);
    assert_ms(seen[1].admit_ms, 0.0);
    assert_ms(seen[2].admit_ms, 28843.182612999975);
    assert_ms(seen[3].admit_ms, 28843.182612999975);
    assert_ms(seen[3].terminal_ms, 57713.18555800001);
}

#[test]
fn trtllm_clamps_output_to_the_pool_and_rejects_oversized_prompts() {
    let seen = run(
        &trtllm(100),
        &[
            (0.0, 500, 5000, &[1]),
            (0.0, 3300, 10, &[2, 3, 4, 5, 6, 7, 8]),
            (10.0, 3200, 0, &[20, 21, 22, 23, 24, 25, 26]),
            (20.0, 100, 5, &[30]),
        ],
    );
    assert_eq!(seen[0].output, 2700);
    assert!(!seen[0].rejected);
    assert_ms(seen[0].terminal_ms, 72781.35744600034);
    // Rejected at the first pass, stamped at that pass's end; later requests still run.
    assert!(seen[1].rejected);
    assert_eq!(seen[1].admit_ms, None);
    assert_ms(seen[1].terminal_ms, 37.921046);
    // A prompt exactly filling the pool with no output is admitted and completes tokenless.
    assert!(!seen[2].rejected);
    assert_eq!(seen[2].first_token_ms, None);
    assert_ms(seen[3].terminal_ms, 72908.07695700033);
}

#[test]
fn vllm_max_model_len_rejects_long_prompts_and_caps_generation() {
    let args = EngineArgs {
        max_model_len: Some(700),
        ..vllm(16, 50)
    };
    let seen = run(
        &args,
        &[
            (0.0, 300, 500, &[1]),
            (0.0, 800, 10, &[2, 3]),
            (0.0, 650, 100, &[4, 5]),
            (5.0, 100, 0, &[6]),
        ],
    );
    assert_eq!(seen[0].output, 400);
    assert!(seen[1].rejected);
    assert_ms(seen[1].terminal_ms, 43.641286);
    assert_eq!(seen[2].output, 50);
    // OSL 0 completes at the end of its prefill pass without a token.
    assert_eq!(seen[3].output, 0);
    assert_ms(seen[3].terminal_ms, 11719.158377999956);
}

#[test]
fn vllm_rejects_a_fresh_prompt_larger_than_the_pool() {
    let seen = run(
        &vllm(16, 50),
        &[(0.0, 801, 10, &[2, 3]), (0.0, 300, 5, &[4])],
    );
    assert!(seen[0].rejected);
    assert!(!seen[1].rejected);
    assert_eq!(seen[1].output, 5);
}

#[test]
fn unchunked_prompt_larger_than_the_budget_never_runs() {
    let args = EngineArgs {
        enable_chunked_prefill: false,
        max_num_batched_tokens: Some(1000),
        ..EngineArgs::default()
    };
    let mut sched = VllmScheduler::new(&args, 0);
    sched.enqueue(EngineRequest {
        id: 0,
        prompt: prompt(1001, &[1, 2], 512),
        max_output_tokens: 3,
    });
    let mut events = Vec::new();
    for _ in 0..3 {
        let time = sched.run_pass_timed(&mut events);
        assert_eq!(time, PassTime::default());
    }
    assert!(events.is_empty());
    assert!(sched.has_work());
}

/// A small deterministic generator for the differential tests.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Runs `passes` passes of two ranks built from `args`, one taking the decode-only path
/// whenever it applies and one always taking the full pass, with the same requests enqueued
/// at the same passes; asserts that every pass gives the same events, KV events and times.
/// Returns how many passes took the decode-only path, and how many the decode pass before a
/// queue ([`VllmScheduler::run_decode_pass_before_queue`]).
fn compare_decode_only_with_full_pass(
    args: &EngineArgs,
    seed: u64,
    passes: usize,
) -> (usize, usize) {
    let mut rng = Lcg(seed);
    let mut fast = VllmScheduler::new(args, 0);
    let mut full = VllmScheduler::new(args, 0);
    full.decode_only_path = false;
    fast.record_kv_events();
    full.record_kv_events();
    let (mut fast_events, mut full_events) = (Vec::new(), Vec::new());
    let (mut fast_kv, mut full_kv) = (Vec::new(), Vec::new());
    let mut next_id = 0;
    let mut decode_only = 0;
    let mut before_queue = 0;
    for pass in 0..passes {
        // Bursts of arrivals now and then; prompts share prefixes of a few shapes.
        if rng.below(6) == 0 {
            for _ in 0..=rng.below(4) {
                let mut prompt = TokenSeq::new();
                for _ in 0..=rng.below(3) {
                    prompt.push_run(1 + rng.below(3), 1 + rng.below(40) as u32);
                }
                let request = EngineRequest {
                    id: next_id,
                    prompt,
                    max_output_tokens: rng.below(90) as usize,
                };
                next_id += 1;
                fast.enqueue(request.clone());
                full.enqueue(request);
            }
        }
        fast_events.clear();
        full_events.clear();
        let took_decode_only = fast.decode_only_pass_applies();
        let took_before_queue = fast.decode_pass_before_queue_applies();
        let fast_time = fast.run_pass_timed(&mut fast_events);
        let full_time = full.run_pass_timed(&mut full_events);
        decode_only += usize::from(took_decode_only);
        before_queue += usize::from(took_before_queue);
        if !fast.last_pass_may_admit() {
            assert!(
                !fast_events
                    .iter()
                    .any(|event| matches!(event, PassEvent::Admitted { .. })),
                "pass {pass} admitted though it said it may not"
            );
        }
        assert_eq!(fast_events, full_events, "pass {pass}");
        assert_eq!(
            fast_time.prefill_ms.to_bits(),
            full_time.prefill_ms.to_bits()
        );
        assert_eq!(fast_time.decode_ms.to_bits(), full_time.decode_ms.to_bits());
        assert_eq!(fast_time.scheduled_requests, full_time.scheduled_requests);
        fast.drain_kv_events(&mut fast_kv);
        full.drain_kv_events(&mut full_kv);
        assert_eq!(fast_kv, full_kv, "pass {pass}");
        assert_eq!(fast.load(), full.load(), "pass {pass}");
    }
    (decode_only, before_queue)
}

#[test]
fn decode_only_passes_equal_full_passes() {
    let mut cases = Vec::new();
    for block_size in [1, 4, 16] {
        for caching in [true, false] {
            // Roomy pool; pool small enough to preempt; limits on batch, sequences and
            // model length; TRT-LLM.
            cases.push(EngineArgs {
                block_size,
                num_gpu_blocks: 4000 / block_size,
                enable_prefix_caching: caching,
                ..EngineArgs::default()
            });
            cases.push(EngineArgs {
                block_size,
                num_gpu_blocks: 300 / block_size,
                enable_prefix_caching: caching,
                ..EngineArgs::default()
            });
            cases.push(EngineArgs {
                block_size,
                num_gpu_blocks: 2000 / block_size,
                enable_prefix_caching: caching,
                max_num_seqs: Some(5),
                max_num_batched_tokens: Some(48),
                max_model_len: Some(120),
                ..EngineArgs::default()
            });
            cases.push(EngineArgs {
                engine_type: EngineType::Trtllm,
                block_size,
                num_gpu_blocks: 1200 / block_size,
                enable_prefix_caching: caching,
                ..EngineArgs::default()
            });
        }
    }
    let mut before_queue_cases = 0;
    for (i, args) in cases.iter().enumerate() {
        let (mut decode_only, mut before_queue) = (0, 0);
        for seed in 0..4 {
            let (only, before) =
                compare_decode_only_with_full_pass(args, seed * 31 + i as u64, 400);
            decode_only += only;
            before_queue += before;
        }
        eprintln!(
            "case {i}: {decode_only} decode-only passes of 1600, {before_queue} decode passes \
             before a queue"
        );
        before_queue_cases += usize::from(before_queue >= 10);
        // Both paths are exercised in every configuration.
        assert!(
            (10..1500).contains(&decode_only),
            "case {i}: {decode_only} decode-only passes of 1600"
        );
    }
    // The decode pass before a queue needs a waiting request that does not fit: the small
    // pools give it.
    assert!(
        before_queue_cases >= 4,
        "{before_queue_cases} configurations took the decode pass before a queue"
    );
}

/// A TRT-LLM rank with batch waiting: a 1000-token budget, `iters` passes, `ratio`.
fn batch_waiting(iters: usize, ratio: f64) -> VllmScheduler {
    let args = EngineArgs {
        max_num_batched_tokens: Some(1000),
        enable_chunked_prefill: false,
        batch_wait: crate::config::BatchWait {
            timeout_iters: iters,
            max_tokens_ratio: ratio,
        },
        ..trtllm(4096)
    };
    VllmScheduler::new(&args, 0)
}

/// A request of `isl` distinct prompt tokens (no prefix shared with another id).
fn distinct_request(id: RequestId, isl: u32, output: usize) -> EngineRequest {
    let mut prompt = TokenSeq::new();
    prompt.push_run(1_000 + id as u64, isl);
    EngineRequest {
        id,
        prompt,
        max_output_tokens: output,
    }
}

/// Runs passes until every request of `ids` has been admitted (at most `limit` passes), and
/// returns each one's pass index of admission and the tokens the decoding request `decoder`
/// emitted in the passes before the first of them.
fn admission_passes(
    sched: &mut VllmScheduler,
    ids: &[RequestId],
    decoder: RequestId,
    limit: usize,
) -> (Vec<Option<usize>>, usize) {
    let mut admitted = vec![None; ids.len()];
    let mut decoded_before = 0;
    let mut events = Vec::new();
    for pass in 0..limit {
        events.clear();
        sched.run_pass_timed(&mut events);
        for event in &events {
            match *event {
                PassEvent::Admitted { id, .. } => {
                    if let Some(at) = ids.iter().position(|&wanted| wanted == id) {
                        admitted[at].get_or_insert(pass);
                    }
                }
                PassEvent::Tokens { id, count } if id == decoder && admitted[0].is_none() => {
                    decoded_before += count;
                }
                _ => {}
            }
        }
        if admitted.iter().all(Option::is_some) {
            break;
        }
    }
    (admitted, decoded_before)
}

/// Starts request 0 (long output) and runs until it decodes.
fn with_a_decode_running(sched: &mut VllmScheduler) {
    sched.enqueue(distinct_request(0, 64, 500));
    let mut events = Vec::new();
    sched.run_pass_timed(&mut events);
    assert!(events.contains(&PassEvent::Admitted {
        id: 0,
        reused_tokens: 0
    }));
}

#[test]
fn batch_waiting_holds_a_prompt_while_decodes_run_until_the_pass_limit() {
    let mut sched = batch_waiting(3, 0.9);
    with_a_decode_running(&mut sched);
    sched.enqueue(distinct_request(1, 64, 4));
    // 64 + 1 tokens stay under 900: held for 3 passes, each a decode pass of request 0, then
    // admitted in the 4th.
    let (admitted, decoded) = admission_passes(&mut sched, &[1], 0, 10);
    assert_eq!(admitted, [Some(3)]);
    assert_eq!(decoded, 3);

    // The counter starts again after a release: the next lone prompt waits 3 passes too.
    sched.enqueue(distinct_request(2, 64, 4));
    let (admitted, _) = admission_passes(&mut sched, &[2], 0, 10);
    assert_eq!(admitted, [Some(3)]);
}

#[test]
fn batch_waiting_releases_prompts_once_the_token_ratio_is_reached() {
    // Two 300-token prompts and a decode (601 tokens) stay under 900 and are held; a third
    // makes 901 and all three run at once.
    let mut sched = batch_waiting(50, 0.9);
    with_a_decode_running(&mut sched);
    sched.enqueue(distinct_request(1, 300, 4));
    sched.enqueue(distinct_request(2, 300, 4));
    let mut events = Vec::new();
    for _ in 0..5 {
        events.clear();
        sched.run_pass_timed(&mut events);
        assert!(
            !events
                .iter()
                .any(|event| matches!(event, PassEvent::Admitted { .. })),
            "{events:?}"
        );
    }
    sched.enqueue(distinct_request(3, 300, 4));
    let (admitted, _) = admission_passes(&mut sched, &[1, 2, 3], 0, 1);
    assert_eq!(admitted, [Some(0), Some(0), Some(0)]);
}

#[test]
fn batch_waiting_needs_a_decode_and_both_limits() {
    // Nothing decoding: the first prompt runs at once.
    let mut sched = batch_waiting(3, 0.9);
    sched.enqueue(distinct_request(0, 64, 500));
    let (admitted, _) = admission_passes(&mut sched, &[0], 0, 1);
    assert_eq!(admitted, [Some(0)]);
    // Either limit at 0 ends every wait at once, as in TRT-LLM.
    for (iters, ratio) in [(0, 0.9), (3, 0.0)] {
        let mut sched = batch_waiting(iters, ratio);
        with_a_decode_running(&mut sched);
        sched.enqueue(distinct_request(1, 64, 4));
        let (admitted, _) = admission_passes(&mut sched, &[1], 0, 10);
        assert_eq!(admitted, [Some(0)], "iters {iters}, ratio {ratio}");
    }
    // vLLM does not batch-wait even when given the settings.
    let args = EngineArgs {
        batch_wait: crate::config::BatchWait {
            timeout_iters: 3,
            max_tokens_ratio: 0.9,
        },
        ..vllm(16, 4096)
    };
    let mut sched = VllmScheduler::new(&args, 0);
    with_a_decode_running(&mut sched);
    sched.enqueue(distinct_request(1, 64, 4));
    let (admitted, _) = admission_passes(&mut sched, &[1], 0, 10);
    assert_eq!(admitted, [Some(0)]);
}

#[test]
fn a_request_leaving_without_a_token_completes_before_the_pass_tokens() {
    // The request with nothing to generate runs after the one that decodes; its completion
    // still comes first in the pass's events (their order reaches the KV router's queue).
    let args = vllm(16, 1024);
    let mut sched = VllmScheduler::new(&args, 0);
    for (id, output) in [(0, 3), (1, 0)] {
        sched.enqueue(EngineRequest {
            id,
            prompt: prompt(100, &[id as u64], 512),
            max_output_tokens: output,
        });
    }
    let mut events = Vec::new();
    for _ in 0..8 {
        events.clear();
        sched.run_pass_timed(&mut events);
        if events.contains(&PassEvent::Completed { id: 1 }) {
            break;
        }
    }
    let completed = events
        .iter()
        .position(|e| *e == PassEvent::Completed { id: 1 });
    let token = events
        .iter()
        .position(|e| matches!(e, PassEvent::Tokens { id: 0, .. }));
    assert!(completed.is_some(), "request 1 completed: {events:?}");
    assert!(
        token.is_some(),
        "request 0 emitted in the same pass: {events:?}"
    );
    assert!(completed < token, "completion first: {events:?}");
}
