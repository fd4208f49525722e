//! Properties of the timing models and of speculative decoding, over random tables, batches,
//! workloads and settings.
//!
//! - Profile tables reproduce their grid points, stay within their neighbours between them
//!   (monotone data), and the timers keep their floors (prefill >= 0, decode >= 1 ms) however
//!   far a batch lies outside the grid.
//! - Whole runs with a profile table and/or speculative decoding: every request completes with
//!   exactly its output tokens, TTFT <= E2E, and the same spec gives the same report twice.
//! - Bursts of certain acceptance (all rates 1) emit `nextn + 1` tokens per step, so a lone
//!   request needs `ceil((osl - first burst) / (nextn + 1))` decode steps after its prefill.

use std::sync::Arc;

use dynosim::config::{
    ArrivalMode, Deployment, EngineArgs, EngineType, PoolSpec, ProfileTable, ReplaySpec,
    RouterMode, Sla, SpeculativeArgs, TimingSource,
};
use dynosim::engine::timing::{DecodeBatch, PassTimer, PrefillBatch};
use dynosim::report::record::TerminalStatus;
use dynosim::workload::{Prompt, Session, Turn, Workload};
use proptest::prelude::*;

/// A strictly increasing axis of `n` points starting at `start`.
fn arb_axis(n: std::ops::Range<usize>, start: f64) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(1.0f64..5000.0, n).prop_map(move |steps| {
        let mut x = start;
        steps
            .into_iter()
            .map(|step| {
                x += step;
                x
            })
            .collect()
    })
}

/// Non-decreasing positive values, one per point.
fn rising(n: usize, base: f64, slopes: &[f64]) -> Vec<f64> {
    let mut y = base;
    (0..n)
        .map(|i| {
            y += slopes[i % slopes.len()];
            y
        })
        .collect()
}

fn arb_table() -> impl Strategy<Value = ProfileTable> {
    (
        arb_axis(2..6, 0.0),
        arb_axis(2..5, -1.0),
        arb_axis(2..5, 0.0),
        prop::collection::vec(0.0f64..20.0, 1..6),
        0.5f64..20.0,
    )
        .prop_map(|(isl, active, context, slopes, base)| {
            let ttft = rising(isl.len(), base, &slopes);
            let itl = (0..active.len())
                .map(|i| rising(context.len(), base + i as f64 * slopes[0], &slopes))
                .collect();
            ProfileTable::from_arrays(isl, ttft, active, context, itl).expect("valid table")
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn tables_hit_their_grid_and_keep_their_floors(
        table in arb_table(),
        requests in 1usize..64,
        before in 0usize..200_000,
        extra in 0usize..200_000,
        active in 0usize..5_000_000,
        context in 0usize..5_000_000,
    ) {
        let batch = PrefillBatch { requests, covered_before: before, covered_after: before + extra };
        let prefill = PassTimer::prefill_ms(&table, &batch);
        prop_assert!(prefill >= 0.0 && prefill.is_finite());
        if batch.new_tokens() == 0 {
            prop_assert_eq!(prefill, 0.0);
        }
        let decode = PassTimer::decode_ms(&table, &DecodeBatch {
            ready: 1,
            active_kv_tokens: active,
            total_kv_tokens: 1,
            context_tokens: context,
        });
        prop_assert!(decode >= 1.0 && decode.is_finite());
    }

    #[test]
    fn interpolation_stays_between_neighbours(
        ys in prop::collection::vec(0.0f64..100.0, 2..6),
        t in 0.0f64..1.0,
    ) {
        let mut sorted = ys.clone();
        sorted.sort_by(f64::total_cmp);
        let xs: Vec<f64> = (0..sorted.len()).map(|i| 100.0 * i as f64 + 10.0).collect();
        let table = ProfileTable::from_arrays(
            xs.clone(), sorted.clone(), vec![0.0, 1.0], vec![0.0, 1.0],
            vec![vec![2.0, 2.0], vec![2.0, 2.0]],
        ).unwrap();
        for (x, y) in xs.iter().zip(&sorted) {
            prop_assert!((table.prefill_ms_at(*x) - y).abs() <= 1e-9 * y.abs().max(1.0));
        }
        for i in 0..xs.len() - 1 {
            let x = xs[i] + t * (xs[i + 1] - xs[i]);
            let v = table.prefill_ms_at(x);
            prop_assert!(v >= sorted[i] - 1e-9 && v <= sorted[i + 1] + 1e-9);
        }
    }
}

fn workload(requests: &[(usize, usize, f64)]) -> Workload {
    let sessions = requests
        .iter()
        .enumerate()
        .map(|(i, &(input, output, ts))| Session {
            id: format!("s{i}").into(),
            first_timestamp_ms: Some(ts),
            turns: [Turn {
                input_length: input,
                max_output_tokens: output,
                delay_ms: 0.0,
                prompt: Prompt::hash_ids(
                    (0..input.div_ceil(256) as u32)
                        .map(|b| b + (i as u32 % 3) * 100)
                        .collect(),
                    256,
                ),
                priority: 0,
                strict_priority: 0,
                policy_class: None,
            }]
            .into(),
        })
        .collect();
    Workload {
        sessions,
        ..Workload::default()
    }
}

fn spec(engine: EngineArgs, num_workers: usize) -> ReplaySpec {
    ReplaySpec {
        workload: dynosim::config::WorkloadSpec::Trace(dynosim::config::TraceSpec {
            files: Vec::new(),
            format: dynosim::config::TraceFormat::Mooncake,
            block_size: 256,
        }),
        deployment: Deployment::Aggregated(PoolSpec {
            engine,
            workers: num_workers,
        }),
        router_mode: RouterMode::RoundRobin,
        router_config: None,
        arrivals: ArrivalMode::Timestamps { speedup: 1.0 },
        max_sim_time_ms: None,
        sla: Sla::default(),
        capture_requests: true,
        planner: None,
        replay_mode: dynosim::config::ReplayMode::Offline,
    }
}

fn arb_speculative() -> impl Strategy<Value = Option<SpeculativeArgs>> {
    prop_oneof![
        Just(None),
        (
            1usize..6,
            prop::collection::vec(0.0f64..=1.0, 5),
            any::<u64>()
        )
            .prop_map(|(nextn, mut rates, seed)| {
                rates.truncate(nextn);
                Some(SpeculativeArgs {
                    nextn,
                    accept_rates: rates,
                    seed,
                })
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn runs_with_tables_and_bursts_complete_every_request(
        requests in prop::collection::vec((1usize..3000, 1usize..60, 0.0f64..400.0), 1..12),
        engine_type in prop_oneof![Just(EngineType::Vllm), Just(EngineType::Trtllm), Just(EngineType::Sglang)],
        table in prop_oneof![Just(None), arb_table().prop_map(Some)],
        speculative in arb_speculative(),
        block_size in prop_oneof![Just(16usize), Just(64)],
        num_workers in 1usize..3,
        dp_size in 1usize..3,
    ) {
        let engine = EngineArgs {
            engine_type,
            block_size,
            num_gpu_blocks: 40_000 / block_size,
            dp_size,
            timing: match table {
                Some(table) => TimingSource::ProfileTable(Arc::new(table)),
                None => TimingSource::Polynomial,
            },
            speculative,
            ..EngineArgs::default()
        };
        let spec = spec(engine, num_workers);
        let load = workload(&requests);
        let (report, records) = dynosim::Simulation::new(&spec, load.clone()).run().expect("runs").into_report(0.0);
        prop_assert_eq!(records.len(), requests.len());
        for record in &records {
            prop_assert_eq!(record.terminal_status, TerminalStatus::Completed);
            prop_assert_eq!(record.output_length, record.requested_output_length);
            if let (Some(ttft), Some(e2e)) = (record.ttft_ms, record.e2e_latency_ms) {
                prop_assert!(ttft > 0.0 && ttft <= e2e);
            }
        }
        let (again, again_records) = dynosim::Simulation::new(&spec, load).run().expect("runs").into_report(0.0);
        prop_assert_eq!(report, again);
        prop_assert_eq!(records, again_records);
    }

    #[test]
    fn certain_bursts_take_the_expected_number_of_steps(
        input in 1usize..2000,
        output in 1usize..200,
        nextn in 1usize..6,
        engine_type in prop_oneof![Just(EngineType::Vllm), Just(EngineType::Sglang)],
    ) {
        // One request with every draft token accepted: the prefill pass emits nextn + 1 tokens
        // (or all of them), then each decode step nextn + 1 more. With the polynomial, a step
        // at low utilisation costs at least 5.74 ms and at most 34.01 ms.
        let engine = EngineArgs {
            engine_type,
            num_gpu_blocks: if engine_type == EngineType::Sglang { 100_000 } else { 16384 },
            speculative: Some(SpeculativeArgs { nextn, accept_rates: vec![1.0; nextn], seed: 1 }),
            ..EngineArgs::default()
        };
        let (_, records) = dynosim::Simulation::new(&spec(engine, 1), workload(&[(input, output, 0.0)]))
            .run()
            .expect("runs")
            .into_report(0.0);
        let record = &records[0];
        prop_assert_eq!(record.output_length, output);
        let steps = output.saturating_sub(nextn + 1).div_ceil(nextn + 1);
        let decode_ms = record.e2e_latency_ms.unwrap() - record.ttft_ms.unwrap();
        prop_assert!(decode_ms >= 5.74 * steps as f64 - 1e-6, "{} steps, {} ms", steps, decode_ms);
        prop_assert!(decode_ms <= 34.01 * steps as f64 + 1e-6, "{} steps, {} ms", steps, decode_ms);
    }
}
