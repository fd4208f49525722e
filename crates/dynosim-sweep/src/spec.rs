//! The sweep spec: a YAML (or JSON) document with `base:` (one run's settings), `grid:` (values
//! per key), and optionally `budget:`, `sla:`, `objectives:` and `search:`.
//!
//! INTERFACE
//! - [`SweepSpec::from_file`] / [`SweepSpec::from_value`]: read and check a spec. Every
//!   problem (unknown key, wrong type, empty grid) is a usage error naming the spec (its file,
//!   or `spec` for a value) and the key, before any candidate runs.
//!
//! ```yaml
//! base:                       # one run, named like the Python API's keyword arguments
//!   input_tokens: 512
//!   output_tokens: 64
//!   request_count: 64
//!   replay_concurrency: 16
//!   extra_engine_args: {num_gpu_blocks: 160, block_size: 64}
//! grid:                       # a mapping, or a list of mappings (their union, in order)
//!   num_workers: [1, 2, 4]
//!   router_mode: [round_robin, kv_router]
//!   extra_engine_args.max_num_seqs: [8, 24]
//! budget: {gpus: 8}           # candidates using more GPUs are skipped
//! sla: {p95_ttft_ms: 300, mean_tpot_ms: 20, goodput_ratio: 0.9}
//! objectives: [throughput, throughput_per_gpu]     # default: all of them
//! search: {strategy: random, samples: 20, seed: 7} # default: the whole grid
//! # or: search: {strategy: descent, objective: throughput, rounds: 3}
//! ```

use std::path::{Path, PathBuf};

use dynosim::{Error, Result};
use serde_json::{Map, Value};

use crate::objectives::{Objective, SlaBound};
use crate::settings::{check_value, Settings};

/// How candidates are drawn from the grid.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// Every candidate of the grid.
    Grid,
    /// `samples` distinct candidates drawn with `seed`, kept in grid order.
    Random { samples: usize, seed: u64 },
    /// Coordinate descent over the grid's axes (the idea of the reference's `replay_optimize`
    /// search, on any keys): from the first value of every axis, each axis in turn is swept
    /// with the others held, and the best point (SLA-feasible, best by `objective`; else the
    /// least SLA violation) kept; at most `rounds` rounds, stopping after a round that moved
    /// nothing. Candidates over the budget are skipped.
    Descent { rounds: usize, objective: Objective },
}

/// Rounds of `strategy: descent` unless the spec says (the reference's fixed number).
pub const DESCENT_ROUNDS: usize = 3;

/// One mapping of the grid: keys in spec order, each with its values.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    pub axes: Vec<(String, Vec<Value>)>,
}

/// A checked sweep spec.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepSpec {
    /// What messages call the spec: its file, or `spec`.
    pub name: String,
    pub base: Settings,
    pub grids: Vec<Grid>,
    /// The most GPUs a candidate may use (`None`: no limit).
    pub gpu_budget: Option<u64>,
    pub sla: Vec<SlaBound>,
    pub objectives: Vec<Objective>,
    pub strategy: Strategy,
}

const TOP_LEVEL_KEYS: &[&str] = &["base", "grid", "budget", "sla", "objectives", "search"];

impl SweepSpec {
    /// Reads a spec file (YAML; JSON is YAML too). Relative trace paths are taken from the
    /// spec's directory.
    pub fn from_file(path: &Path) -> Result<Self> {
        match crate::AnySpec::from_file(path)? {
            crate::AnySpec::Sweep(spec) => Ok(spec),
            crate::AnySpec::Optimize(_) => Err(Error::usage(format!(
                "{}: a ReplayOptimizeSpec, not a sweep spec (base:, grid:)",
                path.display()
            ))),
        }
    }

    /// Checks a spec given as a value (the Python front's dict); `name` is used in messages.
    pub fn from_value(name: &str, value: &Value) -> Result<Self> {
        let fail = |key: &str, message: String| Error::usage(format!("{name}: {key}: {message}"));
        let Value::Object(top) = value else {
            return Err(Error::usage(format!(
                "{name}: a sweep spec is a mapping with base: and grid:"
            )));
        };
        for key in top.keys() {
            if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
                return Err(fail(
                    key,
                    format!(
                        "unknown key; expected one of: {}",
                        TOP_LEVEL_KEYS.join(", ")
                    ),
                ));
            }
        }

        let base_value = top
            .get("base")
            .ok_or_else(|| fail("base", "missing: give one run's settings".into()))?;
        let Value::Object(base_map) = base_value else {
            return Err(fail("base", "expected a mapping of settings".into()));
        };
        let mut base = Settings { values: Map::new() };
        for (key, value) in base_map {
            check_value(key, value).map_err(|message| fail(&format!("base.{key}"), message))?;
            base.set(key, value.clone());
        }

        let grid_value = top
            .get("grid")
            .ok_or_else(|| fail("grid", "missing: give the values to sweep".into()))?;
        let grids = match grid_value {
            Value::Object(map) => vec![read_grid(name, "grid", map)?],
            Value::Array(items) if !items.is_empty() => items
                .iter()
                .enumerate()
                .map(|(index, item)| {
                    let key = format!("grid[{index}]");
                    match item {
                        Value::Object(map) => read_grid(name, &key, map),
                        _ => Err(fail(&key, "expected a mapping of key: [values]".into())),
                    }
                })
                .collect::<Result<_>>()?,
            _ => {
                return Err(fail(
                    "grid",
                    "expected a mapping of key: [values], or a non-empty list of them".into(),
                ))
            }
        };

        let gpu_budget = match top.get("budget") {
            None | Some(Value::Null) => None,
            Some(Value::Object(budget)) => {
                for key in budget.keys() {
                    if key != "gpus" {
                        return Err(fail(
                            &format!("budget.{key}"),
                            "unknown key; expected gpus".into(),
                        ));
                    }
                }
                match budget.get("gpus") {
                    Some(gpus) => {
                        Some(gpus.as_u64().filter(|&gpus| gpus >= 1).ok_or_else(|| {
                            fail(
                                "budget.gpus",
                                format!("expected a positive integer, got {gpus}"),
                            )
                        })?)
                    }
                    None => None,
                }
            }
            Some(other) => {
                return Err(fail(
                    "budget",
                    format!("expected a mapping like {{gpus: 8}}, got {other}"),
                ))
            }
        };

        let sla = match top.get("sla") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(bounds)) => bounds
                .iter()
                .map(|(key, bound)| {
                    SlaBound::parse(key, bound)
                        .map_err(|message| fail(&format!("sla.{key}"), message))
                })
                .collect::<Result<_>>()?,
            Some(other) => {
                return Err(fail(
                    "sla",
                    format!("expected a mapping of metric: bound, got {other}"),
                ))
            }
        };

        let objectives = match top.get("objectives") {
            None | Some(Value::Null) => Objective::ALL.to_vec(),
            Some(Value::Array(items)) if !items.is_empty() => {
                let mut objectives = Vec::new();
                for (index, item) in items.iter().enumerate() {
                    let objective =
                        item.as_str()
                            .and_then(Objective::from_name)
                            .ok_or_else(|| {
                                fail(
                                    &format!("objectives[{index}]"),
                                    format!(
                                        "unknown objective {item}; expected one of: {}",
                                        Objective::ALL
                                            .iter()
                                            .map(|objective| objective.name())
                                            .collect::<Vec<_>>()
                                            .join(", ")
                                    ),
                                )
                            })?;
                    if !objectives.contains(&objective) {
                        objectives.push(objective);
                    }
                }
                objectives
            }
            Some(other) => {
                return Err(fail(
                    "objectives",
                    format!("expected a non-empty list of objective names, got {other}"),
                ))
            }
        };

        let strategy = match top.get("search") {
            None | Some(Value::Null) => Strategy::Grid,
            Some(Value::Object(search)) => read_strategy(search, &objectives)
                .map_err(|(key, message)| fail(&format!("search.{key}"), message))?,
            Some(other) => {
                return Err(fail(
                    "search",
                    format!(
                        "expected a mapping like {{strategy: random, samples: 20}}, got {other}"
                    ),
                ))
            }
        };

        if matches!(strategy, Strategy::Descent { .. }) && grids.len() != 1 {
            return Err(fail(
                "search.strategy",
                "descent walks the axes of one grid; give grid: as one mapping, not a list".into(),
            ));
        }

        Ok(SweepSpec {
            name: name.to_owned(),
            base,
            grids,
            gpu_budget,
            sla,
            objectives,
            strategy,
        })
    }

    /// The swept keys, in first-appearance order over the grids (the table's columns).
    pub fn swept_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for grid in &self.grids {
            for (key, _) in &grid.axes {
                if !keys.contains(key) {
                    keys.push(key.clone());
                }
            }
        }
        keys
    }

    /// Makes relative trace paths (in the base and the grid) relative to `dir`.
    pub(crate) fn resolve_trace_paths(&mut self, dir: &Path) {
        let resolve = |value: &mut Value| match value {
            Value::String(path) => *path = join_relative(dir, path),
            Value::Array(items) => {
                for item in items {
                    if let Value::String(path) = item {
                        *path = join_relative(dir, path);
                    }
                }
            }
            _ => {}
        };
        for name in ["trace_file", "trace_files"] {
            if let Some(value) = self.base.values.get_mut(name) {
                resolve(value);
            }
            for grid in &mut self.grids {
                for (key, values) in &mut grid.axes {
                    if key == name {
                        values.iter_mut().for_each(resolve);
                    }
                }
            }
        }
    }
}

pub(crate) fn join_relative(dir: &Path, path: &str) -> String {
    let path = PathBuf::from(path);
    if path.is_absolute() || dir.as_os_str().is_empty() {
        return path.display().to_string();
    }
    dir.join(path).display().to_string()
}

fn read_grid(name: &str, key: &str, map: &Map<String, Value>) -> Result<Grid> {
    let fail = |sub: &str, message: String| Error::usage(format!("{name}: {key}.{sub}: {message}"));
    if map.is_empty() {
        return Err(Error::usage(format!(
            "{name}: {key}: empty grid; give at least one key with a list of values"
        )));
    }
    let mut axes = Vec::new();
    for (axis, values) in map {
        let Value::Array(values) = values else {
            return Err(fail(
                axis,
                format!("expected a list of values, got {values}"),
            ));
        };
        if values.is_empty() {
            return Err(fail(axis, "empty list of values".into()));
        }
        for value in values {
            check_value(axis, value).map_err(|message| fail(axis, message))?;
        }
        axes.push((axis.clone(), values.clone()));
    }
    Ok(Grid { axes })
}

fn read_strategy(
    search: &Map<String, Value>,
    objectives: &[Objective],
) -> std::result::Result<Strategy, (String, String)> {
    const KEYS: [&str; 5] = ["strategy", "samples", "seed", "rounds", "objective"];
    for key in search.keys() {
        if !KEYS.contains(&key.as_str()) {
            return Err((
                key.clone(),
                format!("unknown key; expected one of: {}", KEYS.join(", ")),
            ));
        }
    }
    let strategy = match search.get("strategy") {
        None => "grid",
        Some(value) => value.as_str().ok_or_else(|| {
            (
                "strategy".to_owned(),
                format!("expected grid, random or descent, got {value}"),
            )
        })?,
    };
    let used_by = |keys: &[&str], strategy: &str| -> std::result::Result<(), (String, String)> {
        match keys.iter().find(|key| search.contains_key(**key)) {
            Some(key) => Err((
                (*key).to_owned(),
                format!("only used by strategy: {strategy}"),
            )),
            None => Ok(()),
        }
    };
    let positive = |key: &str| -> std::result::Result<Option<u64>, (String, String)> {
        search
            .get(key)
            .map(|value| {
                value.as_u64().filter(|&count| count >= 1).ok_or_else(|| {
                    (
                        key.to_owned(),
                        format!("expected a positive integer, got {value}"),
                    )
                })
            })
            .transpose()
    };
    match strategy {
        "grid" => {
            used_by(&["samples", "seed"], "random")?;
            used_by(&["rounds", "objective"], "descent")?;
            Ok(Strategy::Grid)
        }
        "random" => {
            used_by(&["rounds", "objective"], "descent")?;
            let samples = positive("samples")?.ok_or_else(|| {
                (
                    "samples".to_owned(),
                    "missing: how many candidates to draw".into(),
                )
            })?;
            let seed = match search.get("seed") {
                None => 0,
                Some(seed) => seed.as_u64().ok_or_else(|| {
                    (
                        "seed".to_owned(),
                        format!("expected a non-negative integer, got {seed}"),
                    )
                })?,
            };
            Ok(Strategy::Random {
                samples: usize::try_from(samples).unwrap_or(usize::MAX),
                seed,
            })
        }
        "descent" => {
            used_by(&["samples", "seed"], "random")?;
            let rounds = positive("rounds")?.map_or(DESCENT_ROUNDS, |rounds| {
                usize::try_from(rounds).unwrap_or(usize::MAX)
            });
            let objective = match search.get("objective") {
                None => objectives[0],
                Some(value) => value
                    .as_str()
                    .and_then(Objective::from_name)
                    .ok_or_else(|| {
                        (
                            "objective".to_owned(),
                            format!(
                                "unknown objective {value}; expected one of: {}",
                                Objective::ALL
                                    .iter()
                                    .map(|objective| objective.name())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                    })?,
            };
            Ok(Strategy::Descent { rounds, objective })
        }
        other => Err((
            "strategy".into(),
            format!("unknown strategy '{other}'; expected grid, random or descent"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn error_of(value: Value) -> String {
        SweepSpec::from_value("s.yaml", &value)
            .unwrap_err()
            .message()
            .to_owned()
    }

    #[test]
    fn reads_a_full_spec() {
        let spec = SweepSpec::from_value(
            "s.yaml",
            &json!({
                "base": {"input_tokens": 10, "extra_engine_args": {"block_size": 16}},
                "grid": {"num_workers": [1, 2], "extra_engine_args.max_num_seqs": [4]},
                "budget": {"gpus": 4},
                "sla": {"p95_ttft_ms": 100},
                "objectives": ["throughput", "fewest_gpus"],
                "search": {"strategy": "random", "samples": 3, "seed": 5},
            }),
        )
        .unwrap();
        assert_eq!(
            spec.swept_keys(),
            ["num_workers", "extra_engine_args.max_num_seqs"]
        );
        assert_eq!(spec.gpu_budget, Some(4));
        assert_eq!(
            spec.objectives,
            [Objective::Throughput, Objective::FewestGpus]
        );
        assert_eq!(
            spec.strategy,
            Strategy::Random {
                samples: 3,
                seed: 5
            }
        );
    }

    #[test]
    fn descent_takes_the_first_objective_unless_told() {
        let read = |search: Value| {
            SweepSpec::from_value(
                "s.yaml",
                &json!({"base": {}, "grid": {"num_workers": [1, 2]},
                        "objectives": ["throughput_per_gpu", "throughput"], "search": search}),
            )
            .unwrap()
            .strategy
        };
        assert_eq!(
            read(json!({"strategy": "descent"})),
            Strategy::Descent {
                rounds: DESCENT_ROUNDS,
                objective: Objective::ThroughputPerGpu
            }
        );
        assert_eq!(
            read(json!({"strategy": "descent", "objective": "fewest_gpus", "rounds": 5})),
            Strategy::Descent {
                rounds: 5,
                objective: Objective::FewestGpus
            }
        );
    }

    #[test]
    fn bad_specs_name_the_file_and_key() {
        assert_eq!(
            error_of(json!({"base": {}, "grid": {"num_workers": []}})),
            "s.yaml: grid.num_workers: empty list of values"
        );
        assert_eq!(
            error_of(json!({"base": {}, "grid": {}})),
            "s.yaml: grid: empty grid; give at least one key with a list of values"
        );
        assert_eq!(
            error_of(json!({"base": {"num_workers": "x"}, "grid": {"num_workers": [1]}})),
            "s.yaml: base.num_workers: expected an integer, got \"x\""
        );
        assert_eq!(
            error_of(json!({"base": {}, "grid": {"num_workers": 2}})),
            "s.yaml: grid.num_workers: expected a list of values, got 2"
        );
        assert!(
            error_of(json!({"base": {}, "grid": {"num_workers": [1]}, "extra": 1}))
                .starts_with("s.yaml: extra: unknown key")
        );
        assert!(error_of(json!({"base": {}, "grid": {"num_wrkers": [1]}}))
            .starts_with("s.yaml: grid.num_wrkers: unknown setting 'num_wrkers'"));
        assert!(error_of(
            json!({"base": {}, "grid": {"num_workers": [1]}, "sla": {"p95_ttft": 1}})
        )
        .starts_with("s.yaml: sla.p95_ttft: unknown SLA metric"));
        assert!(error_of(
            json!({"base": {}, "grid": {"num_workers": [1]}, "objectives": ["speed"]})
        )
        .starts_with("s.yaml: objectives[0]: unknown objective \"speed\""));
        assert_eq!(
            error_of(json!({"base": {}, "grid": {"num_workers": [1]}, "budget": {"gpus": 0}})),
            "s.yaml: budget.gpus: expected a positive integer, got 0"
        );
        assert_eq!(
            error_of(
                json!({"base": {}, "grid": {"num_workers": [1]}, "search": {"strategy": "random"}})
            ),
            "s.yaml: search.samples: missing: how many candidates to draw"
        );
        assert_eq!(
            error_of(
                json!({"base": {}, "grid": [{"num_workers": [1]}, {"num_workers": [2]}],
                            "search": {"strategy": "descent"}})
            ),
            "s.yaml: search.strategy: descent walks the axes of one grid; give grid: as one \
             mapping, not a list"
        );
        assert_eq!(
            error_of(json!({"base": {}, "grid": {"num_workers": [1]},
                            "search": {"strategy": "descent", "seed": 1}})),
            "s.yaml: search.seed: only used by strategy: random"
        );
        assert_eq!(
            error_of(json!({"base": {}, "grid": {"num_workers": [1]},
                            "search": {"rounds": 2}})),
            "s.yaml: search.rounds: only used by strategy: descent"
        );
        assert!(error_of(json!({"base": {}, "grid": {"num_workers": [1]},
                                "search": {"strategy": "descent", "objective": "pareto"}}))
        .starts_with("s.yaml: search.objective: unknown objective \"pareto\""));
    }
}
