//! Invariants of every run, checked over random small workloads and deployments.
//!
//! Whatever the workload and configuration: every released request completes (no time cap, no
//! length limit, pools that fit every request), latencies are non-negative with TTFT <= E2E, no
//! request emits more tokens than it asked for, the report's totals equal the sums over the
//! records, timestamps within a record are ordered, and the same spec gives the same report twice.
//!
//! The time cap (`--max-sim-time-seconds`), in both topologies: a capped run is the uncapped run
//! cut short. Every request the capped run completes has the very record the uncapped run gives
//! it (less lifecycle stamps past the cap, such as a prefill source released after the request
//! completed); every request the uncapped run finishes by the cap is completed; past the cap nothing
//! happens (except that a single aggregated worker finishes the step in flight, as the reference's
//! one-worker loop does); and a cap past the end changes nothing.

use dynosim::config::{
    ArrivalMode, Deployment, EngineArgs, EngineType, PoolSpec, PreemptionMode, ReplaySpec,
    RouterMode, Sla,
};
use dynosim::report::record::TerminalStatus;
use dynosim::report::Value;
use dynosim::workload::{Prompt, Session, Turn, Workload};
use dynosim::{Report, RequestRecord};
use proptest::prelude::*;

fn arb_turn(first: bool) -> impl Strategy<Value = Turn> {
    (
        prop::collection::vec(0u32..12, 1..6),
        1usize..3000,
        0usize..40,
        if first {
            Just(0.0).boxed()
        } else {
            (0.0f64..50.0).boxed()
        },
    )
        .prop_map(|(ids, input, output, delay_ms)| {
            let block_size = 256;
            let input_length = input.min(ids.len() * block_size as usize);
            Turn {
                input_length,
                max_output_tokens: output,
                delay_ms,
                prompt: Prompt::hash_ids(ids, block_size),
                priority: 0,
                strict_priority: 0,
                policy_class: None,
            }
        })
}

fn arb_session() -> impl Strategy<Value = Session> {
    (
        0.0f64..500.0,
        arb_turn(true),
        prop::collection::vec(arb_turn(false), 0..3),
    )
        .prop_map(|(ts, first, rest)| {
            let mut turns = vec![first];
            turns.extend(rest);
            Session {
                id: "".into(),
                first_timestamp_ms: Some(ts),
                turns: turns.into(),
            }
        })
}

fn arb_workload() -> impl Strategy<Value = Workload> {
    prop::collection::vec(arb_session(), 1..14).prop_map(|mut sessions| {
        for (i, s) in sessions.iter_mut().enumerate() {
            s.id = format!("s{i}").into();
        }
        Workload {
            sessions,
            ..Workload::default()
        }
    })
}

fn arb_engine() -> impl Strategy<Value = EngineArgs> {
    (
        prop_oneof![
            Just(EngineType::Vllm),
            Just(EngineType::Trtllm),
            Just(EngineType::Sglang)
        ],
        prop_oneof![Just(4usize), Just(16), Just(32), Just(64)],
        // Enough blocks for the largest prompt (3072 tokens) plus its output.
        200usize..600,
        prop_oneof![Just(None), Just(Some(2usize)), Just(Some(8))],
        prop_oneof![Just(None), Just(Some(4096usize)), Just(Some(8192))],
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(PreemptionMode::Lifo), Just(PreemptionMode::Fifo)],
        1usize..3,
    )
        .prop_map(
            |(engine_type, block_size, blocks, seqs, batched, caching, chunked, preemption, dp)| {
                EngineArgs {
                    engine_type,
                    num_gpu_blocks: blocks.max(3200 / block_size + 2),
                    block_size,
                    max_num_seqs: seqs,
                    max_num_batched_tokens: batched,
                    enable_prefix_caching: caching,
                    // Without chunking, a prompt larger than the token budget can never run.
                    enable_chunked_prefill: chunked || batched.is_some_and(|b| b < 3072),
                    preemption_mode: preemption,
                    dp_size: dp,
                    ..EngineArgs::default()
                }
            },
        )
}

fn arb_spec() -> impl Strategy<Value = ReplaySpec> {
    (
        arb_engine(),
        1usize..4,
        prop_oneof![
            (0.5f64..4.0).prop_map(|speedup| ArrivalMode::Timestamps { speedup }),
            (1usize..5).prop_map(|limit| ArrivalMode::Concurrency { limit }),
        ],
        any::<bool>(),
    )
        .prop_map(|(engine, num_workers, arrivals, kv)| ReplaySpec {
            // The KV router needs at least two (worker, rank) targets.
            router_mode: if kv && num_workers * engine.dp_size > 1 {
                RouterMode::KvRouter
            } else {
                RouterMode::RoundRobin
            },
            workload: dynosim::config::WorkloadSpec::Trace(dynosim::config::TraceSpec {
                files: Vec::new(),
                format: dynosim::config::TraceFormat::Mooncake,
                block_size: 256,
            }),
            deployment: Deployment::Aggregated(PoolSpec {
                engine,
                workers: num_workers,
            }),
            router_config: None,
            arrivals,
            replay_mode: dynosim::config::ReplayMode::Offline,
            max_sim_time_ms: None,
            sla: Sla::default(),
            capture_requests: true,
            planner: None,
        })
}

fn run(spec: &ReplaySpec, workload: Workload) -> (Report, Vec<RequestRecord>) {
    dynosim::Simulation::new(spec, workload)
        .run()
        .expect("simulation runs")
        .into_report(0.0)
}

fn int(report: &Report, key: &str) -> i64 {
    match report.get(key) {
        Some(Value::Int(v)) => v,
        other => panic!("{key}: {other:?}"),
    }
}

/// Runs `spec` over `workload` and checks what every run here must show, whatever its
/// topology: every request arrives and ends once (in the report and the records), every one
/// completes (no time cap, no `max_model_len` and pools larger than any request), the report's
/// token totals are the completed records' sums, and a second run gives the same outputs.
fn run_to_completion(
    spec: &ReplaySpec,
    workload: Workload,
) -> Result<(Report, Vec<RequestRecord>), TestCaseError> {
    let turns: usize = workload.sessions.iter().map(|s| s.turns.len()).sum();
    let (report, records) = run(spec, workload.clone());
    prop_assert_eq!(int(&report, "num_requests") as usize, turns);
    prop_assert_eq!(records.len(), turns);
    let completed: Vec<_> = records
        .iter()
        .filter(|r| r.terminal_status == TerminalStatus::Completed)
        .collect();
    prop_assert_eq!(completed.len(), turns, "every request completes");
    prop_assert_eq!(int(&report, "completed_requests") as usize, turns);
    let out: usize = completed.iter().map(|r| r.output_length).sum();
    let inp: usize = completed.iter().map(|r| r.input_length).sum();
    prop_assert_eq!(int(&report, "total_output_tokens") as usize, out);
    prop_assert_eq!(int(&report, "total_input_tokens") as usize, inp);
    // Same inputs, same outputs.
    let (again, again_records) = run(spec, workload);
    prop_assert_eq!(&report, &again);
    prop_assert_eq!(&records, &again_records);
    Ok((report, records))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_run_satisfies_the_invariants(spec in arb_spec(), workload in arb_workload()) {
        let (_, records) = run_to_completion(&spec, workload)?;
        let mut last_arrival = 0.0;
        for r in &records {
            prop_assert!(r.arrival_time_ms >= 0.0);
            prop_assert!(r.arrival_time_ms >= last_arrival, "records sorted by arrival");
            last_arrival = r.arrival_time_ms;
            prop_assert!(r.terminal_time_ms >= r.arrival_time_ms);
            prop_assert!(r.output_length <= r.requested_output_length);
            if let Some(admit) = r.first_admit_ms {
                prop_assert!(admit >= r.arrival_time_ms);
            }
            if let (Some(ttft), Some(e2e)) = (r.ttft_ms, r.e2e_latency_ms) {
                prop_assert!(ttft >= 0.0 && ttft <= e2e, "ttft {} e2e {}", ttft, e2e);
            }
            if let (Some(first), Some(last)) = (r.first_token_ms, r.last_token_ms) {
                prop_assert!(first <= last && last <= r.terminal_time_ms);
            }
            if let Some(ttst) = r.ttst_ms {
                prop_assert!(ttst >= 0.0);
            }
            // No max_model_len and pools larger than any request: outputs are never cut.
            prop_assert_eq!(r.output_length, r.requested_output_length);
        }
    }
}

/// Disaggregated pools (vLLM or SGLang): prefill and decode engines that differ in everything
/// but the engine type and block size, round robin or KV routing.
fn arb_disaggregated_spec() -> impl Strategy<Value = ReplaySpec> {
    (
        (
            arb_engine(),
            prop_oneof![Just(EngineType::Vllm), Just(EngineType::Sglang)],
        ),
        arb_engine(),
        1usize..4,
        1usize..4,
        prop_oneof![
            (0.5f64..4.0).prop_map(|speedup| ArrivalMode::Timestamps { speedup }),
            (1usize..5).prop_map(|limit| ArrivalMode::Concurrency { limit }),
        ],
        any::<bool>(),
        prop_oneof![Just(None), Just(Some((100_000u64, 50.0f64)))],
        any::<bool>(),
    )
        .prop_map(
            |(
                (prefill, engine_type),
                decode,
                prefill_workers,
                decode_workers,
                arrivals,
                kv,
                transfer,
                missing,
            )| {
                let mut prefill = EngineArgs {
                    engine_type,
                    worker_type: dynosim::config::WorkerType::Prefill,
                    dp_size: 1,
                    ..prefill
                };
                if let Some((bytes, bandwidth)) = transfer {
                    prefill.kv_bytes_per_token = Some(bytes);
                    prefill.kv_transfer_bandwidth = Some(bandwidth);
                }
                if missing {
                    prefill.kv_transfer_timing_mode =
                        dynosim::config::KvTransferTimingMode::DestinationMissing;
                }
                let decode = EngineArgs {
                    engine_type,
                    worker_type: dynosim::config::WorkerType::Decode,
                    dp_size: 1,
                    block_size: prefill.block_size,
                    // Room for every request at once: under KV pressure the reference's decode
                    // workers can dead-end (a pending destination blocks the re-admission of a
                    // preempted request), and dynosim does the same.
                    num_gpu_blocks: 160_000 / prefill.block_size,
                    ..decode
                };
                ReplaySpec {
                    router_mode: if kv {
                        RouterMode::KvRouter
                    } else {
                        RouterMode::RoundRobin
                    },
                    workload: dynosim::config::WorkloadSpec::Trace(dynosim::config::TraceSpec {
                        files: Vec::new(),
                        format: dynosim::config::TraceFormat::Mooncake,
                        block_size: 256,
                    }),
                    deployment: Deployment::Disaggregated {
                        prefill: PoolSpec {
                            engine: prefill,
                            workers: prefill_workers,
                        },
                        decode: PoolSpec {
                            engine: decode,
                            workers: decode_workers,
                        },
                    },
                    router_config: None,
                    arrivals,
                    replay_mode: dynosim::config::ReplayMode::Offline,
                    max_sim_time_ms: None,
                    sla: Sla::default(),
                    capture_requests: true,
                    planner: None,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn every_disaggregated_run_follows_the_handoff_order(
        spec in arb_disaggregated_spec(),
        workload in arb_workload(),
    ) {
        let (_, records) = run_to_completion(&spec, workload)?;
        let Deployment::Disaggregated { prefill, decode } = &spec.deployment else {
            panic!("disaggregated")
        };
        for r in &records {
            prop_assert_eq!(r.output_length, r.requested_output_length);
            prop_assert!(r.prefill_worker_idx.is_some_and(|w| w < prefill.workers));
            prop_assert!(r.decode_worker_idx.is_some_and(|w| w < decode.workers));
            // vLLM: arrival <= prefill admit <= source held <= reserved <= activated <=
            // released; SGLang reserves first: arrival <= reserved <= prefill admit <= held...
            // Then activated <= decode admit <= first token <= last token <= end.
            let chain = if decode.engine.engine_type == EngineType::Sglang {
                [
                    Some(r.arrival_time_ms),
                    r.destination_reserved_ms,
                    r.prefill_admit_ms,
                    r.source_held_ms,
                    r.destination_activated_ms,
                    r.source_released_ms,
                ]
            } else {
                [
                    Some(r.arrival_time_ms),
                    r.prefill_admit_ms,
                    r.source_held_ms,
                    r.destination_reserved_ms,
                    r.destination_activated_ms,
                    r.source_released_ms,
                ]
            };
            for pair in chain.windows(2) {
                let (Some(a), Some(b)) = (pair[0], pair[1]) else {
                    return Err(TestCaseError::fail(format!("missing lifecycle time in {r:?}")));
                };
                prop_assert!(a <= b, "lifecycle out of order in {:?}", r);
            }
            prop_assert_eq!(r.first_admit_ms, r.prefill_admit_ms);
            let activated = r.destination_activated_ms.unwrap();
            let decode_admit = r.decode_admit_ms.unwrap();
            prop_assert!(activated <= decode_admit);
            if let (Some(first), Some(last)) = (r.first_token_ms, r.last_token_ms) {
                prop_assert!(decode_admit <= first && first <= last && last <= r.terminal_time_ms);
            }
            prop_assert_eq!(r.decode_reused_input_tokens, Some(0));
        }
    }
}

/// Checks the capped run against the uncapped one; see the module documentation.
fn check_time_cap(
    spec: &ReplaySpec,
    workload: Workload,
    cap_fraction: f64,
) -> Result<(), TestCaseError> {
    let (full_report, full) = run(spec, workload.clone());
    let end_ms = full
        .iter()
        .map(|r| r.terminal_time_ms)
        .fold(0.0f64, f64::max);
    let cap_ms = (cap_fraction * end_ms).floor();
    let capped_spec = ReplaySpec {
        max_sim_time_ms: Some(cap_ms),
        ..spec.clone()
    };
    let (report, records) = run(&capped_spec, workload);
    let by_uuid: std::collections::BTreeMap<&str, &RequestRecord> =
        full.iter().map(|r| (r.uuid.as_str(), r)).collect();
    let completed: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.terminal_status == TerminalStatus::Completed)
        .collect();
    prop_assert_eq!(int(&report, "completed_requests") as usize, completed.len());
    for r in &completed {
        let Some(uncapped) = by_uuid.get(r.uuid.as_str()) else {
            return Err(TestCaseError::fail(format!(
                "{} is not in the uncapped run",
                r.uuid
            )));
        };
        // A disaggregated request can complete before its prefill source is released: stamps
        // past the cap never happen in the capped run.
        let mut expected = (*uncapped).clone();
        for stamp in [
            &mut expected.prefill_admit_ms,
            &mut expected.source_held_ms,
            &mut expected.destination_reserved_ms,
            &mut expected.destination_activated_ms,
            &mut expected.decode_admit_ms,
            &mut expected.source_released_ms,
        ] {
            if stamp.is_some_and(|t| t > cap_ms) {
                *stamp = None;
            }
        }
        prop_assert_eq!(
            *r,
            &expected,
            "a capped run's completed record is the uncapped one"
        );
    }
    let single_aggregated_worker =
        matches!(&spec.deployment, Deployment::Aggregated(pool) if pool.workers == 1);
    if !single_aggregated_worker {
        for r in &records {
            prop_assert!(
                r.terminal_time_ms <= cap_ms,
                "{} ends at {} past the cap {}",
                r.uuid,
                r.terminal_time_ms,
                cap_ms
            );
        }
    }
    let done: std::collections::BTreeSet<&str> =
        completed.iter().map(|r| r.uuid.as_str()).collect();
    for r in full.iter().filter(|r| r.terminal_time_ms <= cap_ms) {
        prop_assert!(
            done.contains(r.uuid.as_str()),
            "{} ends at {} in the uncapped run but is not completed under the cap {}",
            r.uuid,
            r.terminal_time_ms,
            cap_ms
        );
    }
    if cap_ms >= end_ms {
        prop_assert_eq!(&report, &full_report, "a cap past the end changes nothing");
        prop_assert_eq!(&records, &full);
    } else if cap_ms < end_ms && !single_aggregated_worker {
        prop_assert!(
            completed.len() < full.len(),
            "a cap before the end cuts the run short"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn an_aggregated_capped_run_is_the_uncapped_run_cut_short(
        spec in arb_spec(),
        workload in arb_workload(),
        cap_fraction in prop_oneof![0.0f64..1.0, Just(0.0), Just(2.0)],
    ) {
        check_time_cap(&spec, workload, cap_fraction)?;
    }

    #[test]
    fn a_disaggregated_capped_run_is_the_uncapped_run_cut_short(
        spec in arb_disaggregated_spec(),
        workload in arb_workload(),
        cap_fraction in prop_oneof![0.0f64..1.0, Just(0.0), Just(2.0)],
    ) {
        check_time_cap(&spec, workload, cap_fraction)?;
    }
}

/// A record sink the test keeps a handle on.
#[derive(Clone, Default)]
struct SharedSink(std::sync::Arc<std::sync::Mutex<Vec<RequestRecord>>>);

impl dynosim::report::RecordSink for SharedSink {
    fn accept(&mut self, record: RequestRecord) {
        self.0.lock().unwrap().push(record);
    }
}

/// The run of `spec` with its records handed to a sink as they settle, by a collector on its
/// own thread: the report, the streamed records, and the records left for the end (none).
fn run_streaming(
    spec: &ReplaySpec,
    workload: Workload,
) -> (Report, Vec<RequestRecord>, Vec<RequestRecord>) {
    let sink = SharedSink::default();
    let (report, rest) = dynosim::Simulation::new(spec, workload)
        .records(Box::new(sink.clone()))
        .collector_thread(dynosim::sim::CollectorThread::OwnThread)
        .run()
        .expect("simulation runs")
        .into_report(0.0);
    let streamed = std::mem::take(&mut *sink.0.lock().unwrap());
    (report, streamed, rest)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Streaming records (from a collector on its own thread) changes neither them, nor their
    /// order, nor the report.
    #[test]
    fn streamed_records_are_the_records_of_the_finished_run(
        spec in prop_oneof![arb_spec(), arb_disaggregated_spec()],
        workload in arb_workload(),
    ) {
        let (report, records) = run(&spec, workload.clone());
        let (streamed_report, streamed, rest) = run_streaming(&spec, workload);
        prop_assert!(rest.is_empty());
        prop_assert_eq!(streamed, records);
        prop_assert_eq!(streamed_report, report);
    }
}

// ---- Every planner run ends ----------------------------------------------------------------
//
// With a planner in the loop, scaling ticks alone never keep a run alive: a run whose every
// request fits a worker completes (aggregated; a disaggregated one may dead-end under decode KV
// pressure, as without a planner), and one holding a request that can never fit a worker ends
// with the dead-end error instead of ticking on forever. Each run has a wall-clock deadline:
// a watchdog cancels it, and a cancelled run fails the test.

/// A request whose prompt nearly fills one rank's KV cache of `engine` and whose output
/// outgrows it: no worker can ever finish it, however many the planner adds.
fn oversize_session(engine: &EngineArgs) -> Session {
    let capacity = engine.num_gpu_blocks * engine.block_size;
    let block_size = 256;
    let ids = (0..(capacity / block_size as usize + 1) as u32)
        .map(|i| 1000 + i)
        .collect();
    Session {
        id: "oversize".into(),
        first_timestamp_ms: Some(0.0),
        turns: vec![Turn {
            input_length: capacity - engine.block_size,
            max_output_tokens: capacity,
            delay_ms: 0.0,
            prompt: Prompt::hash_ids(ids, block_size),
            priority: 0,
            strict_priority: 0,
            policy_class: None,
        }]
        .into(),
    }
}

/// `spec` with the native load-threshold planner (1 s ticks) and workers that take
/// `startup_s` to start.
fn with_planner(mut spec: ReplaySpec, startup_s: f64) -> ReplaySpec {
    let config = match spec.deployment {
        Deployment::Disaggregated { .. } => {
            r#"{"mode":"disagg","optimization_target":"load","decode_scale_up_kv_rate":60,
               "decode_scale_down_kv_rate":20,"prefill_scale_up_queue_tokens":4096,
               "prefill_scale_down_queue_tokens":512,"load_adjustment_interval_seconds":1}"#
        }
        Deployment::Aggregated(_) => {
            r#"{"mode":"agg","optimization_target":"load","decode_scale_up_kv_rate":60,
               "decode_scale_down_kv_rate":20,"load_adjustment_interval_seconds":1}"#
        }
    };
    spec.planner = Some(dynosim::config::planner::PlannerSpec::from_arg(config).expect("valid"));
    // The planner reads forward-pass metrics, which only the vLLM flavours record.
    let vllm = |engine: &mut EngineArgs| {
        if engine.engine_type == EngineType::Sglang {
            engine.engine_type = EngineType::Vllm;
        }
        engine.startup_time = startup_s;
    };
    for (_, pool) in spec.deployment.pools_mut() {
        vllm(&mut pool.engine);
    }
    spec
}

/// Runs `spec` with a planner under a wall-clock deadline; a run still going at the deadline
/// is cancelled and fails the test.
fn run_with_deadline(
    spec: &ReplaySpec,
    workload: Workload,
) -> Result<dynosim::Result<Report>, TestCaseError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let cancel = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (cancel, finished) = (cancel.clone(), finished.clone());
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while !finished.load(Ordering::SeqCst) {
                if std::time::Instant::now() >= deadline {
                    cancel.store(true, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let outcome = dynosim::Simulation::new(spec, workload)
        .cancel(&cancel)
        .run();
    finished.store(true, Ordering::SeqCst);
    watchdog.join().expect("the watchdog ends");
    prop_assert!(
        !cancel.load(Ordering::SeqCst),
        "a planner run was still going after 60 s"
    );
    Ok(outcome.map(|simulated| simulated.into_report(0.0).0))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn an_aggregated_planner_run_ends(
        spec in arb_spec(),
        workload in arb_workload(),
        startup_s in prop_oneof![Just(0.0f64), Just(0.5), Just(3.0)],
        oversize in any::<bool>(),
    ) {
        let mut spec = with_planner(spec, startup_s);
        let mut workload = workload;
        if oversize {
            // (The TRT-LLM flavour lets a lone request's output outgrow the cache.)
            let Deployment::Aggregated(pool) = &mut spec.deployment else {
                panic!("aggregated")
            };
            pool.engine.engine_type = EngineType::Vllm;
            workload.sessions.push(oversize_session(&pool.engine));
        }
        match run_with_deadline(&spec, workload)? {
            // An engine may refuse the request that can never fit (a rejection ends it).
            Ok(report) => prop_assert_eq!(
                int(&report, "completed_requests"),
                int(&report, "num_requests") - i64::from(oversize)
            ),
            Err(error) => {
                prop_assert!(oversize, "{}", error.message());
                prop_assert!(error.message().contains("reached a dead end"), "{}", error.message());
            }
        }
    }

    #[test]
    fn a_disaggregated_planner_run_ends(
        spec in arb_disaggregated_spec(),
        workload in arb_workload(),
        startup_s in prop_oneof![Just(0.0f64), Just(0.5), Just(3.0)],
        oversize in any::<bool>(),
    ) {
        let spec = with_planner(spec, startup_s);
        let mut workload = workload;
        if oversize {
            workload.sessions.push(oversize_session(&spec.deployment.entry().engine));
        }
        match run_with_deadline(&spec, workload)? {
            Ok(report) => prop_assert!(
                int(&report, "completed_requests") <= int(&report, "num_requests") - i64::from(oversize)
            ),
            Err(error) => {
                prop_assert!(error.message().contains("reached a dead end"), "{}", error.message());
            }
        }
    }
}
