//! The reference's coordinate descent against the runs recorded in sweeps.md §6 (round robin
//! and KV router, polynomial timing): the same states visited in the same order, the same
//! best; once driven by the recorded numbers themselves, once by our own simulated runs.

use dynosim_sweep::descent::{
    descend, descend_guessing, pick_best, Guess, RouterMode, RouterState, Scored, Space, State,
    Topology,
};
use dynosim_sweep::optimize::{self, OptimizeSpec};
use dynosim_sweep::RunOptions;
use serde_json::{json, Value};

fn router(mode: &str, credit: f64) -> RouterState {
    match mode {
        "rr" => RouterState {
            mode: RouterMode::RoundRobin,
            credit: 0.0,
            scale: 1.0,
        },
        _ => RouterState {
            mode: RouterMode::KvRouter,
            credit,
            scale: 1.0,
        },
    }
}

fn agg(tp: u64, workers: u64, mode: &str, credit: f64) -> State {
    State::Aggregated {
        tp,
        workers,
        router: router(mode, credit),
    }
}

/// sweeps.md §6, agg, B=4, router `both`, credits [0, 1], scales [1], SLA ttft 300 / itl 20:
/// (state, output tok/s, mean TPOT ms, feasible), in the recorded evaluation order. TPOT is
/// given for some rows only; rows of the same shape as a given one (TP has no timing effect
/// on polynomial timing: 1,1 = 4,1 and 1,2 = 2,2 for round robin) take its TPOT.
fn recorded_agg_rows() -> Vec<(State, f64, Option<f64>, bool)> {
    vec![
        (agg(1, 4, "rr", 0.0), 941.1, Some(15.84), true),
        (agg(2, 2, "rr", 0.0), 710.2, Some(21.67), false),
        (agg(4, 1, "rr", 0.0), 524.3, Some(29.44), false),
        (agg(1, 1, "rr", 0.0), 524.3, Some(29.44), false),
        (agg(1, 2, "rr", 0.0), 710.2, Some(21.67), false),
        (agg(1, 3, "rr", 0.0), 812.4, None, true),
        (agg(1, 4, "kv", 0.0), 994.1, None, true),
        (agg(1, 4, "kv", 1.0), 994.7, None, true),
        // The recorded best infeasible, with its recorded penalty 0.0687.
        (agg(2, 2, "kv", 1.0), 718.6, Some(20.0 * 1.0687), false),
        // No TPOT recorded; the recorded best infeasible says its penalty was larger.
        (agg(1, 2, "kv", 1.0), 699.7, Some(20.0 * 1.1), false),
        (agg(1, 3, "kv", 1.0), 839.5, None, true),
    ]
}

#[test]
fn the_recorded_numbers_drive_the_recorded_agg_path() {
    let rows = recorded_agg_rows();
    let space = Space {
        topology: Topology::Aggregated,
        budget: 4,
        tps: vec![1, 2, 4, 8],
        routers: vec![router("rr", 0.0), router("kv", 0.0), router("kv", 1.0)],
    };
    let mut recorded = |states: &[State]| {
        Ok(states
            .iter()
            .map(|state| {
                let &(_, throughput, tpot, feasible) = rows
                    .iter()
                    .find(|(recorded, ..)| recorded == state)
                    .unwrap_or_else(|| panic!("{state:?} was not evaluated by the reference"));
                Scored {
                    score: throughput,
                    throughput,
                    mean_e2e_latency_ms: None,
                    gpus: state.gpus(),
                    feasible,
                    violation_penalty: tpot.map_or(0.0, |tpot| (tpot / 20.0 - 1.0).max(0.0)),
                }
            })
            .collect())
    };
    let visited = descend(&space, &mut recorded).unwrap();
    let order: Vec<State> = visited.iter().map(|(state, _)| *state).collect();
    let expected: Vec<State> = rows.iter().map(|(state, ..)| *state).collect();
    assert_eq!(order, expected);
    let best = pick_best(&visited).unwrap();
    assert_eq!(visited[best].0, agg(1, 4, "kv", 1.0));
    let infeasible: Vec<(State, Scored)> = visited
        .iter()
        .copied()
        .filter(|(_, s)| !s.feasible)
        .collect();
    let worst_best = pick_best(&infeasible).unwrap();
    assert_eq!(infeasible[worst_best].0, agg(2, 2, "kv", 1.0));
}

fn section6_spec(engine: Value, total_gpus: u64, router: Value) -> OptimizeSpec {
    OptimizeSpec::from_value(
        "spec",
        &json!({
            "engine": engine,
            "hardware": {"gpuSku": "h200_sxm", "totalGpus": total_gpus},
            "workload": {"isl": 512, "osl": 64, "requestCount": 64, "concurrency": 16,
                         "sharedPrefixRatio": 0.5, "numPrefixGroups": 4},
            "sla": {"ttft": 300, "itl": 20},
            "router": router,
        }),
    )
    .unwrap()
}

fn engine_args() -> Value {
    json!({"num_gpu_blocks": 160, "block_size": 64, "max_num_seqs": 24})
}

/// Runs `spec` on `jobs` threads with its store and tables in `dir`; the search's result.
fn run_optimize(spec: &OptimizeSpec, dir: &std::path::Path, jobs: usize) -> Value {
    let options = RunOptions {
        jobs: Some(jobs),
        progress: None,
        cancel: None,
    };
    optimize::run(spec, dir, &options).unwrap()
}

fn number(record: &Value, key: &str) -> f64 {
    record[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key}: {}", record[key]))
}

#[test]
fn simulated_agg_runs_visit_the_recorded_states_and_pick_the_recorded_best() {
    let spec = section6_spec(
        json!({"model": "Qwen/Qwen3-32B", "backend": "vllm", "timing": "polynomial",
               "baseEngineArgs": engine_args()}),
        4,
        json!({"mode": "both", "overlapCredits": [0, 1], "prefillLoadScales": [1]}),
    );
    let dir = tempfile::tempdir().unwrap();
    let result = run_optimize(&spec, dir.path(), 2);
    assert_eq!(result["evaluations"], 11);
    let mut table = csv::Reader::from_path(dir.path().join("evaluated.csv")).unwrap();
    let header: Vec<String> = table.headers().unwrap().iter().map(String::from).collect();
    let column = |name: &str| header.iter().position(|key| key == name).unwrap();
    let visited: Vec<(u64, u64, String, f64, f64)> = table
        .records()
        .map(|record| {
            let record = record.unwrap();
            (
                record[column("tp")].parse().unwrap(),
                record[column("workers")].parse().unwrap(),
                record[column("router_mode")].to_owned(),
                record[column("overlap_score_credit")].parse().unwrap(),
                record[column("output_throughput_tok_s")].parse().unwrap(),
            )
        })
        .collect();
    let rows = recorded_agg_rows();
    assert_eq!(visited.len(), rows.len());
    for ((tp, workers, mode, credit, throughput), (state, recorded, ..)) in
        visited.iter().zip(&rows)
    {
        let State::Aggregated {
            tp: rtp,
            workers: rworkers,
            router,
        } = *state
        else {
            unreachable!()
        };
        assert_eq!(
            (*tp, *workers, mode.as_str(), *credit),
            (rtp, rworkers, router.mode.name(), router.credit)
        );
        // Round robin is deterministic in both: our runs equal the reference's replay of the
        // same call (checked with parity.sh), within 1% of the numbers recorded in §6.
        if router.mode == RouterMode::RoundRobin {
            assert!(
                (throughput / recorded - 1.0).abs() < 0.01,
                "{state:?}: {throughput} vs {recorded}"
            );
        }
    }
    // The reference's first columns: the 74 report keys, then the state's fields.
    assert_eq!(header[0], "num_requests");
    let tail: Vec<&str> = header[74..].iter().map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            "tp",
            "workers",
            "router_mode",
            "overlap_score_credit",
            "prefill_load_scale",
            "total_gpus_used",
            "score",
            "objective",
            "feasible",
            "violation_penalty",
            "error",
            "candidate",
            "command"
        ]
    );
    let best = &result["best_feasible"];
    assert_eq!(
        (best["tp"].as_u64(), best["workers"].as_u64()),
        (Some(1), Some(4))
    );
    assert_eq!(
        (
            best["router_mode"].as_str(),
            number(best, "overlap_score_credit")
        ),
        (Some("kv_router"), 1.0)
    );
    let infeasible = &result["best_infeasible"];
    assert_eq!(
        (infeasible["tp"].as_u64(), infeasible["workers"].as_u64()),
        (Some(2), Some(2))
    );
    assert_eq!(infeasible["router_mode"], "kv_router");
    // feasible.csv is sorted best first.
    let mut feasible = csv::Reader::from_path(dir.path().join("feasible.csv")).unwrap();
    let scores: Vec<f64> = feasible
        .records()
        .map(|record| record.unwrap()[column("score")].parse().unwrap())
        .collect();
    assert_eq!(scores.len(), 5);
    assert!(
        scores.windows(2).all(|pair| pair[0] >= pair[1]),
        "{scores:?}"
    );
}

#[test]
fn simulated_disagg_round_robin_takes_the_recorded_15_evaluations_to_the_recorded_best() {
    let spec = section6_spec(
        json!({"model": "Qwen/Qwen3-32B", "backend": "vllm", "timing": "polynomial",
               "basePrefillEngineArgs": engine_args(), "baseDecodeEngineArgs": engine_args()}),
        8,
        json!({"mode": "round_robin"}),
    );
    let dir = tempfile::tempdir().unwrap();
    let result = run_optimize(&spec, dir.path(), 2);
    assert_eq!(result["evaluations"], 15);
    let best = &result["best_feasible"];
    let shape: Vec<u64> = [
        "prefill_tp",
        "decode_tp",
        "prefill_workers",
        "decode_workers",
    ]
    .iter()
    .map(|key| best[*key].as_u64().unwrap())
    .collect();
    assert_eq!(shape, [1, 1, 1, 7]);
    // Recorded: 1138.5 tok/s (our run equals the reference's replay of this call).
    assert!((number(best, "output_throughput_tok_s") / 1138.5 - 1.0).abs() < 0.01);
    // A rerun finds every state in the store and gives the same result.
    let again = run_optimize(&spec, dir.path(), 2);
    assert_eq!(again["best_feasible"]["candidate"], best["candidate"]);
}

#[test]
fn optimize_specs_are_checked_like_the_reference() {
    let error = |value: Value| {
        OptimizeSpec::from_value("o.yaml", &value)
            .unwrap_err()
            .message()
            .to_owned()
    };
    let base = json!({
        "engine": {"model": "m", "backend": "vllm", "baseEngineArgs": {}},
        "hardware": {"gpuSku": "h200_sxm", "totalGpus": 4},
        "workload": {"isl": 10, "osl": 5, "requestCount": 3, "concurrency": 2},
    });
    let with = |pointer: &str, value: Value| {
        let mut spec = base.clone();
        *spec.pointer_mut(pointer).unwrap() = value;
        spec
    };
    assert!(OptimizeSpec::from_value("o.yaml", &base).is_ok());
    assert_eq!(
        error(with("/engine/backend", json!("trtllm"))),
        "o.yaml: engine.backend: backend must be one of ['sglang', 'vllm']"
    );
    assert_eq!(
        error(with("/hardware/totalGpus", json!(0))),
        "o.yaml: hardware.totalGpus: must be greater than 0"
    );
    assert_eq!(
        error(with("/workload/concurrency", json!(0.5))),
        "o.yaml: workload.concurrency: expected a whole number of requests >= 1, got 0.5"
    );
    assert!(error(with(
        "/hardware",
        json!({"gpuSku": "x", "totalGpus": 4, "gpus": 1})
    ))
    .starts_with("o.yaml: hardware.gpus: unknown key"));
    let mut spec = base.clone();
    spec["router"] = json!({"prefillLoadScales": [f64::MAX, "inf"]});
    assert!(
        error(spec).starts_with("o.yaml: router.prefillLoadScales: expected finite numbers >= 0")
    );
}

/// Each batch's guess, given the batch's full records, is exactly the next batch the descent
/// asks for (so a parallel evaluator that starts on it never runs a state for nothing, except
/// after the last stage).
#[test]
fn a_finished_batch_guesses_exactly_the_next_batch() {
    let scales = [0.0, 0.25, 0.5, 1.0, 2.0, 4.0];
    let routers: Vec<RouterState> = std::iter::once(router("rr", 0.0))
        .chain(scales.iter().map(|&scale| RouterState {
            mode: RouterMode::KvRouter,
            credit: 1.0,
            scale,
        }))
        .collect();
    for (topology, budget) in [(Topology::Disaggregated, 16), (Topology::Aggregated, 8)] {
        let space = Space {
            topology,
            budget,
            tps: vec![1, 2, 4, 8],
            routers: routers.clone(),
        };
        // A made-up metric with a unique best away from the first states: the path crosses
        // every kind of stage and more than one round.
        let metric = |state: &State| -> Scored {
            let (workers, tp_penalty) = match *state {
                State::Aggregated { tp, workers, .. } => (workers as f64, tp as f64),
                State::Disaggregated {
                    prefill_tp,
                    decode_tp,
                    prefill_workers,
                    decode_workers,
                    ..
                } => (
                    (prefill_workers * 3 + decode_workers) as f64
                        - (prefill_workers as f64 - 11.0).powi(2),
                    (prefill_tp + decode_tp) as f64,
                ),
            };
            let router = state.router();
            let throughput = workers * 10.0 - tp_penalty + router.scale * (4.0 - router.scale);
            Scored {
                score: throughput,
                throughput,
                mean_e2e_latency_ms: None,
                gpus: state.gpus(),
                feasible: true,
                violation_penalty: 0.0,
            }
        };
        let mut batches: Vec<Vec<State>> = Vec::new();
        let mut guesses: Vec<Vec<State>> = Vec::new();
        let mut evaluate = |states: &[State], guess: &Guess| {
            let scored: Vec<Scored> = states.iter().map(metric).collect();
            let full: Vec<Option<Scored>> = scored.iter().copied().map(Some).collect();
            batches.push(states.to_vec());
            guesses.push(guess(&full));
            Ok(scored)
        };
        let visited = descend_guessing(&space, &mut evaluate).unwrap();
        assert!(
            batches.len() >= 4,
            "{topology:?}: {} batches",
            batches.len()
        );
        for (index, next) in batches.iter().enumerate().skip(1) {
            assert_eq!(&guesses[index - 1], next, "{topology:?}: batch {index}");
        }
        // The same states as the plain descent.
        let plain = descend(&space, &mut |states: &[State]| {
            Ok(states.iter().map(metric).collect())
        })
        .unwrap();
        assert_eq!(visited, plain);
    }
}

/// A ReplayOptimizeSpec search gives the same evaluated table on one thread and on two (where
/// idle threads run guessed next-stage states ahead).
#[test]
fn the_search_table_does_not_depend_on_the_thread_count() {
    let spec = section6_spec(
        json!({"model": "Qwen/Qwen3-32B", "backend": "vllm", "timing": "polynomial",
               "basePrefillEngineArgs": engine_args(), "baseDecodeEngineArgs": engine_args()}),
        6,
        json!({"mode": "both", "overlapCredits": [0.0, 1.0], "prefillLoadScales": [1.0]}),
    );
    let table = |jobs: usize| {
        let dir = tempfile::tempdir().unwrap();
        let result = run_optimize(&spec, dir.path(), jobs);
        let mut reader = csv::Reader::from_path(dir.path().join("evaluated.csv")).unwrap();
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        let rows: Vec<Vec<String>> = reader
            .records()
            .map(|record| {
                header
                    .iter()
                    .zip(record.unwrap().iter())
                    .filter(|(column, _)| {
                        !dynosim_sweep::SIMULATOR_SPEED_KEYS.contains(&column.as_str())
                    })
                    .map(|(_, cell)| cell.to_owned())
                    .collect()
            })
            .collect();
        (result["evaluations"].clone(), rows)
    };
    let (serial, parallel) = (table(1), table(2));
    assert!(serial.1.len() > 10, "{} rows", serial.1.len());
    assert_eq!(serial, parallel);
}
