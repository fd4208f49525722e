//! The reference's search (`replay_optimize`, sweeps.md §2): a block-coordinate descent over
//! tensor parallelism, worker counts and router settings, at most three rounds, under a GPU
//! budget. Pure: states go out to an evaluation callback in stage batches and scored records
//! come back, so the same descent runs on simulated candidates or on recorded numbers.
//!
//! INTERFACE
//! - [`Space`]: topology, GPU budget, TP sizes, router states (in the reference's order).
//! - [`descend`]: the states visited, in evaluation order, each with its [`Scored`] record
//!   (the reference's cache, whose best is the result).
//! - [`descend_guessing`]: the same, each batch handed with a [`Guess`] of the next batch
//!   from its records so far, so that an evaluator can start on the next stage while a stage's
//!   last states finish (the reference waits for every stage).
//! - [`pick_best`]: the reference's `_pick_best_record` (best feasible, else least violation).

use std::cmp::Ordering;

use dynosim::{Error, Result};

/// The number of rounds the reference runs at most (not configurable there).
pub const SEARCH_ROUNDS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RouterMode {
    RoundRobin,
    KvRouter,
}

impl RouterMode {
    pub fn name(self) -> &'static str {
        match self {
            RouterMode::RoundRobin => "round_robin",
            RouterMode::KvRouter => "kv_router",
        }
    }
}

/// A router setting: mode, overlap-score credit and prefill-load scale.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouterState {
    pub mode: RouterMode,
    pub credit: f64,
    pub scale: f64,
}

/// One candidate deployment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum State {
    Aggregated {
        tp: u64,
        workers: u64,
        router: RouterState,
    },
    Disaggregated {
        prefill_tp: u64,
        decode_tp: u64,
        prefill_workers: u64,
        decode_workers: u64,
        router: RouterState,
    },
}

impl State {
    pub fn router(&self) -> RouterState {
        match *self {
            State::Aggregated { router, .. } | State::Disaggregated { router, .. } => router,
        }
    }

    fn with_router(self, router: RouterState) -> State {
        match self {
            State::Aggregated { tp, workers, .. } => State::Aggregated {
                tp,
                workers,
                router,
            },
            State::Disaggregated {
                prefill_tp,
                decode_tp,
                prefill_workers,
                decode_workers,
                ..
            } => State::Disaggregated {
                prefill_tp,
                decode_tp,
                prefill_workers,
                decode_workers,
                router,
            },
        }
    }

    /// GPUs used: tp × workers, summed over pools.
    pub fn gpus(&self) -> u64 {
        match *self {
            State::Aggregated { tp, workers, .. } => tp * workers,
            State::Disaggregated {
                prefill_tp,
                decode_tp,
                prefill_workers,
                decode_workers,
                ..
            } => prefill_tp * prefill_workers + decode_tp * decode_workers,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Topology {
    Aggregated,
    Disaggregated,
}

/// What the descent searches.
#[derive(Clone, Debug, PartialEq)]
pub struct Space {
    pub topology: Topology,
    /// The GPU budget (`totalGpus`).
    pub budget: u64,
    /// TP sizes, ascending (the same list for prefill and decode).
    pub tps: Vec<u64>,
    /// Router states; the first seeds round one, and the order breaks ties.
    pub routers: Vec<RouterState>,
}

/// One evaluated state's numbers, as the reference's record keeps them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    pub score: f64,
    pub throughput: f64,
    pub mean_e2e_latency_ms: Option<f64>,
    pub gpus: u64,
    pub feasible: bool,
    pub violation_penalty: f64,
}

/// The reference's choice among records: the feasible record with the highest (score,
/// throughput, −mean E2E, −GPUs), else the record with the lowest (violation, −throughput,
/// mean E2E); the first wins a tie.
pub fn pick_best<T>(records: &[(T, Scored)]) -> Option<usize> {
    let mut best: Option<usize> = None;
    if records.iter().any(|(_, record)| record.feasible) {
        let key_order = |a: &Scored, b: &Scored| {
            a.score
                .total_cmp(&b.score)
                .then(a.throughput.total_cmp(&b.throughput))
                .then(
                    b.mean_e2e_latency_ms
                        .unwrap_or(f64::INFINITY)
                        .total_cmp(&a.mean_e2e_latency_ms.unwrap_or(f64::INFINITY)),
                )
                .then(b.gpus.cmp(&a.gpus))
        };
        for (index, (_, record)) in records.iter().enumerate() {
            if record.feasible
                && best.is_none_or(|current| {
                    key_order(record, &records[current].1) == Ordering::Greater
                })
            {
                best = Some(index);
            }
        }
    } else {
        let key_order = |a: &Scored, b: &Scored| {
            a.violation_penalty
                .total_cmp(&b.violation_penalty)
                .then(b.throughput.total_cmp(&a.throughput))
                .then(
                    a.mean_e2e_latency_ms
                        .unwrap_or(f64::INFINITY)
                        .total_cmp(&b.mean_e2e_latency_ms.unwrap_or(f64::INFINITY)),
                )
        };
        for (index, (_, record)) in records.iter().enumerate() {
            if best.is_none_or(|current| key_order(record, &records[current].1) == Ordering::Less) {
                best = Some(index);
            }
        }
    }
    best
}

/// A guess of the next stage's new states from the records of the current batch so far
/// (`None`: not evaluated yet): the stage the descent would take next if the best record so
/// far stays the best. With every record in, it is exactly the next stage's new states.
pub type Guess<'a> = dyn Fn(&[Option<Scored>]) -> Vec<State> + Sync + 'a;

/// Evaluates a batch of states, given a [`Guess`] of the batch after it (to start on while the
/// batch's last states finish); returns their records in order.
pub type GuessingEvaluate<'a> = dyn FnMut(&[State], &Guess) -> Result<Vec<Scored>> + 'a;

/// The descent's memory: every evaluated state with its record, in evaluation order.
struct Cache<'a, 'b> {
    visited: Vec<(State, Scored)>,
    evaluate: &'a mut GuessingEvaluate<'b>,
}

fn seen(visited: &[(State, Scored)], state: &State) -> Option<Scored> {
    visited
        .iter()
        .find(|(known, _)| known == state)
        .map(|&(_, scored)| scored)
}

impl Cache<'_, '_> {
    /// Evaluates a stage's states not seen before (as one batch), then returns the best of
    /// the stage (`None` for an empty stage). `next` is the stage that follows a winner.
    fn best_of(
        &mut self,
        stage: &[State],
        next: &(dyn Fn(State) -> Vec<State> + Sync),
    ) -> Result<Option<State>> {
        let mut fresh: Vec<State> = Vec::new();
        for state in stage {
            if seen(&self.visited, state).is_none() && !fresh.contains(state) {
                fresh.push(*state);
            }
        }
        if !fresh.is_empty() {
            let Cache { visited, evaluate } = self;
            let visited: &[(State, Scored)] = visited;
            let fresh_states: &[State] = &fresh;
            let guess = move |partial: &[Option<Scored>]| -> Vec<State> {
                let records: Vec<(State, Scored)> = stage
                    .iter()
                    .filter_map(|state| {
                        let scored = seen(visited, state).or_else(|| {
                            let position = fresh_states.iter().position(|f| f == state)?;
                            partial.get(position).copied().flatten()
                        })?;
                        Some((*state, scored))
                    })
                    .collect();
                let Some(best) = pick_best(&records) else {
                    return Vec::new();
                };
                let mut states: Vec<State> = Vec::new();
                for state in next(records[best].0) {
                    if seen(visited, &state).is_none()
                        && !fresh_states.contains(&state)
                        && !states.contains(&state)
                    {
                        states.push(state);
                    }
                }
                states
            };
            let scored = (evaluate)(&fresh, &guess)?;
            if scored.len() != fresh.len() {
                return Err(Error::runtime(format!(
                    "the descent asked for {} evaluations and got {}",
                    fresh.len(),
                    scored.len()
                )));
            }
            self.visited.extend(fresh.into_iter().zip(scored));
        }
        let records: Vec<(State, Scored)> = stage
            .iter()
            .map(|state| {
                let scored = seen(&self.visited, state).expect("every stage state was evaluated");
                (*state, scored)
            })
            .collect();
        Ok(pick_best(&records).map(|index| records[index].0))
    }
}

/// Runs the descent; returns every visited state with its record, in evaluation order.
/// `evaluate` gets each stage's new states as one batch and returns their records in order.
pub fn descend(
    space: &Space,
    evaluate: &mut dyn FnMut(&[State]) -> Result<Vec<Scored>>,
) -> Result<Vec<(State, Scored)>> {
    descend_guessing(space, &mut |states: &[State], _: &Guess| evaluate(states))
}

/// [`descend`], handing each batch's evaluation a [`Guess`] of the next batch.
pub fn descend_guessing(
    space: &Space,
    evaluate: &mut GuessingEvaluate,
) -> Result<Vec<(State, Scored)>> {
    if space.tps.is_empty() {
        return Err(Error::usage("no TP sizes to search"));
    }
    let Some(&first_router) = space.routers.first() else {
        return Err(Error::usage("no router states to search"));
    };
    let mut cache = Cache {
        visited: Vec::new(),
        evaluate,
    };
    let budget = space.budget;
    match space.topology {
        Topology::Aggregated => {
            // A KV router over a single worker is never generated (the replay rejects it).
            let fits = |workers: u64, router: RouterState| {
                router.mode == RouterMode::RoundRobin || workers > 1
            };
            // Each TP size with as many workers as fit.
            let tp_stage = |router: RouterState| -> Vec<State> {
                space
                    .tps
                    .iter()
                    .filter(|&&tp| budget / tp >= 1 && fits(budget / tp, router))
                    .map(|&tp| State::Aggregated {
                        tp,
                        workers: budget / tp,
                        router,
                    })
                    .collect()
            };
            // Every worker count of the incumbent's TP.
            let worker_stage = |incumbent: State| -> Vec<State> {
                let State::Aggregated { tp, router, .. } = incumbent else {
                    unreachable!("aggregated search holds aggregated states");
                };
                (1..=budget / tp)
                    .filter(|&workers| fits(workers, router))
                    .map(|workers| State::Aggregated {
                        tp,
                        workers,
                        router,
                    })
                    .collect()
            };
            // Every router state of the incumbent's deployment.
            let router_stage = |incumbent: State| -> Vec<State> {
                let State::Aggregated { workers, .. } = incumbent else {
                    unreachable!("aggregated search holds aggregated states");
                };
                space
                    .routers
                    .iter()
                    .filter(|router| fits(workers, **router))
                    .map(|&router| incumbent.with_router(router))
                    .collect()
            };
            let next_round = |incumbent: State| tp_stage(incumbent.router());
            let Some(mut incumbent) = tp_stage(first_router).first().copied() else {
                return Err(Error::usage(format!(
                    "no TP candidates fit within max_total_gpus={budget} for aggregated replay"
                )));
            };
            for _ in 0..SEARCH_ROUNDS {
                let start = incumbent;
                if let Some(best) = cache.best_of(&tp_stage(incumbent.router()), &worker_stage)? {
                    incumbent = best;
                }
                if let Some(best) = cache.best_of(&worker_stage(incumbent), &router_stage)? {
                    incumbent = best;
                }
                if let Some(best) = cache.best_of(&router_stage(incumbent), &next_round)? {
                    incumbent = best;
                }
                if incumbent == start {
                    break;
                }
            }
        }
        Topology::Disaggregated => {
            // Equal prefill and decode worker counts, as many as fit, for every TP pair.
            let tp_stage = |router: RouterState| -> Vec<State> {
                let mut stage = Vec::new();
                for &prefill_tp in &space.tps {
                    for &decode_tp in &space.tps {
                        let workers = budget / (prefill_tp + decode_tp);
                        if workers >= 1 {
                            stage.push(State::Disaggregated {
                                prefill_tp,
                                decode_tp,
                                prefill_workers: workers,
                                decode_workers: workers,
                                router,
                            });
                        }
                    }
                }
                stage
            };
            // The budget's edge: worker splits of the incumbent's TP pair using the most GPUs
            // that fit.
            let edge_stage = |incumbent: State| -> Vec<State> {
                let State::Disaggregated {
                    prefill_tp,
                    decode_tp,
                    router,
                    ..
                } = incumbent
                else {
                    unreachable!("disaggregated search holds disaggregated states");
                };
                let mut splits = Vec::new();
                for prefill_workers in 1..=budget / prefill_tp {
                    for decode_workers in 1..=budget / decode_tp {
                        let used = prefill_tp * prefill_workers + decode_tp * decode_workers;
                        if used <= budget {
                            splits.push((used, prefill_workers, decode_workers));
                        }
                    }
                }
                let most = splits.iter().map(|&(used, _, _)| used).max().unwrap_or(0);
                splits
                    .into_iter()
                    .filter(|&(used, _, _)| used == most)
                    .map(
                        |(_, prefill_workers, decode_workers)| State::Disaggregated {
                            prefill_tp,
                            decode_tp,
                            prefill_workers,
                            decode_workers,
                            router,
                        },
                    )
                    .collect()
            };
            let router_stage = |incumbent: State| -> Vec<State> {
                space
                    .routers
                    .iter()
                    .map(|&router| incumbent.with_router(router))
                    .collect()
            };
            let next_round = |incumbent: State| tp_stage(incumbent.router());
            let Some(mut incumbent) = tp_stage(first_router).first().copied() else {
                return Err(Error::usage(format!(
                    "no TP candidates fit within max_total_gpus={budget} with equal prefill and \
                     decode workers"
                )));
            };
            for _ in 0..SEARCH_ROUNDS {
                let start = incumbent;
                if let Some(best) = cache.best_of(&tp_stage(incumbent.router()), &edge_stage)? {
                    incumbent = best;
                }
                if let Some(best) = cache.best_of(&edge_stage(incumbent), &router_stage)? {
                    incumbent = best;
                }
                if let Some(best) = cache.best_of(&router_stage(incumbent), &next_round)? {
                    incumbent = best;
                }
                if incumbent == start {
                    break;
                }
            }
        }
    }
    Ok(cache.visited)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RR: RouterState = RouterState {
        mode: RouterMode::RoundRobin,
        credit: 0.0,
        scale: 1.0,
    };

    fn kv(credit: f64, scale: f64) -> RouterState {
        RouterState {
            mode: RouterMode::KvRouter,
            credit,
            scale,
        }
    }

    fn scored(throughput: f64, feasible: bool) -> Scored {
        Scored {
            score: throughput,
            throughput,
            mean_e2e_latency_ms: None,
            gpus: 0,
            feasible,
            violation_penalty: if feasible { 0.0 } else { 1.0 },
        }
    }

    #[test]
    fn evaluation_counts_match_the_recorded_runs() {
        // sweeps.md §2, "Measured counts", with a constant metric (the counts do not depend
        // on the numbers when every state ties: ties keep the first, so the path is fixed).
        let count = |topology, budget, routers: Vec<RouterState>| {
            let space = Space {
                topology,
                budget,
                tps: vec![1, 2, 4, 8],
                routers,
            };
            let mut constant =
                |states: &[State]| Ok(states.iter().map(|_| scored(1.0, true)).collect());
            descend(&space, &mut constant).unwrap().len()
        };
        let scales = [0.0, 0.25, 0.5, 1.0, 2.0, 4.0];
        let example: Vec<RouterState> = scales.iter().map(|&scale| kv(1.0, scale)).collect();
        // With ties the router stage keeps the incumbent, so only the first round's stages
        // count: 16 TP pairs + 14 edge splits + 5 other router states.
        assert_eq!(count(Topology::Disaggregated, 16, example), 35);
        assert_eq!(count(Topology::Disaggregated, 8, vec![RR]), 15);
    }

    #[test]
    fn single_worker_kv_states_are_never_generated() {
        let space = Space {
            topology: Topology::Aggregated,
            budget: 4,
            tps: vec![4],
            routers: vec![kv(1.0, 1.0)],
        };
        let mut never = |_: &[State]| -> Result<Vec<Scored>> { panic!("no replay may run") };
        let err = descend(&space, &mut never).unwrap_err();
        assert_eq!(
            err.message(),
            "no TP candidates fit within max_total_gpus=4 for aggregated replay"
        );
    }

    #[test]
    fn the_best_prefers_feasible_then_least_violation() {
        let records = vec![
            ((), scored(5.0, false)),
            ((), scored(3.0, true)),
            ((), scored(3.0, true)),
        ];
        assert_eq!(pick_best(&records), Some(1));
        let mut infeasible = vec![((), scored(5.0, false)), ((), scored(6.0, false))];
        assert_eq!(pick_best(&infeasible), Some(1));
        infeasible[0].1.violation_penalty = 0.5;
        assert_eq!(pick_best(&infeasible), Some(0));
    }
}
