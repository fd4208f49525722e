//! Parity with the reference (ai-dynamo 1.4.2).
//!
//! Each case of `tests/parity/cases.tsv` is one test, named after the case, that runs the
//! `dynosim` binary exactly as a user would type it and compares its report and per-request
//! records with the reference's (stored in `tests/parity/golden/` by `make-golden.sh`).
//!
//! - Deterministic cases: every report key except those measuring the simulator itself
//!   (`SIMULATOR_SPEED_KEYS`) must agree within relative 1e-6 (absolute 1e-12 only around zero,
//!   so that small values such as `gpu_hours` are held to the relative bound too); every field
//!   stored in the golden records file (`terminal_status`, `arrival_time_ms`, the lengths, the
//!   latencies, reuse, and the lifecycle stamps of disaggregated runs) must agree likewise, record
//!   by record.
//! - A case with a third column `close` is not deterministic in the reference (kv_router
//!   tie-breaks, wall-clock-ordered caches). `make-golden.sh` ran the reference several times on
//!   it and stored each key's observed range in `golden/NAME.spread.json`; every numeric key
//!   must fall within that range widened by `CLOSE_MARGIN` times its width (so a key that never
//!   varied must match exactly, up to 1e-6). Records are not compared for these cases.
//!   `close:unchecked=KEY,KEY` leaves named keys of a close case unchecked: known divergences
//!   still to be fixed, printed at the start of every run.
//!
//! - A planner case (`--planner-config`) also stores the planner's lines of the reference's
//!   stdout (`golden/NAME.planner.txt`: the `Scaling events:` block and `Planner ticks: N`;
//!   for a close case, every variant its runs printed, separated by lines `# or`);
//!   ours must be identical.
//!
//! - dynosim's accounting keys (`dynosim::report::accounting::ACCOUNTING_KEYS`: requests that
//!   did not complete, by reason) are not in the reference's report; they are checked against
//!   our own counts instead: present whenever fewer requests completed than arrived, and adding
//!   up to the difference.
//!
//! Cases whose inputs live in `../shared/` are reported as ignored (with the reason printed
//! first) when it is absent, so the closing line counts them; `.ci/run` fails under `CI=true`
//! when `../shared` is missing. `DYNOSIM_PARITY_CASE=NAME` runs one case; the usual test-name
//! filter arguments work too.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;

const RTOL: f64 = 1e-6;
/// Only for values around zero (sums of float terms that cancel); never loosens a real value.
const ATOL: f64 = 1e-12;
const SIMULATOR_SPEED_KEYS: [&str; 3] = [
    "wall_time_ms",
    "processed_tokens_per_s",
    "processed_output_tokens_per_s",
];
use dynosim::report::accounting::ACCOUNTING_KEYS;

/// Our accounting keys, which the reference does not have, agree with our own counts: all of
/// them or none; present when fewer requests completed than arrived; the ended-early and
/// in-flight counts add up to the difference. (They are then left out of the comparison.)
fn check_accounting(ours: &BTreeMap<String, Value>, problems: &mut Vec<String>) {
    let int = |key: &str| ours.get(key).and_then(Value::as_i64);
    let present = ACCOUNTING_KEYS
        .iter()
        .filter(|key| ours.contains_key(**key))
        .count();
    if present != 0 && present != ACCOUNTING_KEYS.len() {
        problems.push(format!("only {present} of the accounting keys are present"));
        return;
    }
    let missing = int("num_requests").unwrap_or(0) - int("completed_requests").unwrap_or(0);
    if present == 0 {
        if missing != 0 {
            problems.push(format!(
                "{missing} requests did not complete, no accounting keys"
            ));
        }
        return;
    }
    let counted: i64 = [
        "rejected_requests",
        "canceled_requests",
        "failed_requests",
        "unfinished_requests",
    ]
    .iter()
    .map(|key| int(key).unwrap_or(-1))
    .sum();
    if counted != missing {
        problems.push(format!(
            "the accounting keys count {counted} requests that did not complete, not {missing}"
        ));
    }
}

/// How far outside the reference's own observed range a close case may fall, in widths of
/// that range (the range of a handful of runs underestimates the true spread).
const CLOSE_MARGIN: f64 = 3.0;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

struct Case {
    name: String,
    args: Vec<String>,
    close: bool,
    /// Keys of a close case left unchecked: known divergences, listed in cases.tsv and printed.
    unchecked: Vec<String>,
}

fn cases() -> Result<Vec<Case>, String> {
    let path = repo_root().join("tests/parity/cases.tsv");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut cases = Vec::new();
    let mut names = BTreeSet::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let at = format!("cases.tsv line {}", number + 1);
        let mut columns = line.split('\t');
        let name = columns.next().unwrap_or_default().to_string();
        let args = columns
            .next()
            .ok_or_else(|| format!("{at}: expected NAME<TAB>ARGS"))?;
        let args = args.split_whitespace().map(String::from).collect();
        // `close` marks a statistical case; `close:unchecked=KEY,KEY` also names keys it does
        // not compare. The older `close:RTOL` is still read: the tolerance now comes from the
        // reference's measured spread, so a stated RTOL is ignored.
        let (close, unchecked) = match columns.next().map(str::trim) {
            None | Some("") => (false, Vec::new()),
            Some("close") => (true, Vec::new()),
            Some(c) => match c.strip_prefix("close:") {
                Some(rest) if rest.parse::<f64>().is_ok() => (true, Vec::new()),
                Some(rest) => match rest.strip_prefix("unchecked=") {
                    Some(keys) => (true, keys.split(',').map(String::from).collect()),
                    None => return Err(format!("{at}: unknown third column {c:?}")),
                },
                None => return Err(format!("{at}: unknown third column {c:?}")),
            },
        };
        if !names.insert(name.clone()) {
            return Err(format!("{at}: case {name} is listed twice"));
        }
        cases.push(Case {
            name,
            args,
            close,
            unchecked,
        });
    }
    Ok(cases)
}

/// Input files the case names that are not there (only `../shared` ones may be absent).
fn missing_inputs(case: &Case, root: &Path) -> Vec<String> {
    case.args
        .iter()
        .filter(|a| a.starts_with("../shared/"))
        .filter(|a| !root.join(a).exists())
        .cloned()
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a == b {
        return true; // equal infinities too
    }
    let diff = (a - b).abs();
    diff <= ATOL || diff <= RTOL * a.abs().max(b.abs())
}

fn values_agree(ours: &Value, reference: &Value) -> bool {
    match (ours.as_f64(), reference.as_f64()) {
        (Some(a), Some(b)) => close(a, b),
        _ => ours == reference,
    }
}

/// Records as rows of strings keyed by field, with the header's field names.
fn read_golden_records(path: &Path) -> (Vec<String>, Vec<BTreeMap<String, String>>) {
    let file = std::fs::File::open(path).unwrap();
    let mut lines = BufReader::new(flate2::read::GzDecoder::new(file)).lines();
    let header: Vec<String> = lines
        .next()
        .expect("golden records have a header")
        .unwrap()
        .split('\t')
        .map(String::from)
        .collect();
    let rows = lines
        .map(|l| {
            let l = l.unwrap();
            let row: BTreeMap<String, String> = header
                .iter()
                .cloned()
                .zip(l.split('\t').map(String::from))
                .collect();
            assert_eq!(row.len(), header.len(), "golden record row {l:?}");
            row
        })
        .collect();
    (header, rows)
}

fn field(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn sort_key(r: &BTreeMap<String, String>) -> (f64, f64, f64, f64, f64) {
    let f = |k: &str| r.get(k).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    (
        f("arrival_time_ms"),
        f("input_length"),
        f("requested_output_length"),
        f("ttft_ms"),
        f("e2e_latency_ms"),
    )
}

fn compare_records(ours_jsonl: &Path, golden: &Path, problems: &mut Vec<String>) {
    let mut ours: Vec<BTreeMap<String, String>> = std::fs::read_to_string(ours_jsonl)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v.as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), field(v)))
                .collect()
        })
        .collect();
    let cmp = |a: &BTreeMap<String, String>, b: &BTreeMap<String, String>| {
        sort_key(a).partial_cmp(&sort_key(b)).unwrap()
    };
    ours.sort_by(cmp);
    let (fields, mut reference) = read_golden_records(golden);
    reference.sort_by(cmp);
    if ours.len() != reference.len() {
        problems.push(format!(
            "records: ours {} reference {}",
            ours.len(),
            reference.len()
        ));
        return;
    }
    let mut bad = 0;
    for (i, (a, b)) in ours.iter().zip(&reference).enumerate() {
        for key in &fields {
            let (va, vb) = (a.get(key), &b[key]);
            let agree = match va {
                None => false,
                Some(va) => match (va.parse::<f64>(), vb.parse::<f64>()) {
                    (Ok(x), Ok(y)) => close(x, y),
                    _ => va == vb,
                },
            };
            if !agree {
                bad += 1;
                if bad <= 10 {
                    problems.push(format!(
                        "record {i} (arrival {}): {key} ours {va:?} reference {vb:?}",
                        b["arrival_time_ms"]
                    ));
                }
            }
        }
    }
    if bad > 10 {
        problems.push(format!("... {bad} record mismatches in all"));
    }
}

/// The reference's observed range of each numeric key over several runs of a close case.
fn read_spread(path: &Path) -> Result<BTreeMap<String, (f64, f64)>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "{}: {e} (a close case needs the reference's spread: make-golden.sh NAME)",
            path.display()
        )
    })?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let keys = v
        .get("keys")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("{}: no \"keys\" object", path.display()))?;
    let runs = v.get("runs").and_then(Value::as_u64).unwrap_or(0);
    if runs < 3 {
        return Err(format!(
            "{}: {runs} reference runs; a spread needs at least 3",
            path.display()
        ));
    }
    keys.iter()
        .map(|(k, range)| {
            let pair = range.as_array().and_then(|a| match a.as_slice() {
                [lo, hi] => Some((lo.as_f64()?, hi.as_f64()?)),
                _ => None,
            });
            pair.map(|p| (k.clone(), p))
                .ok_or_else(|| format!("{}: key {k}: expected [min, max]", path.display()))
        })
        .collect()
}

/// Whether `value` lies within the reference's range `[lo, hi]` widened by `CLOSE_MARGIN`
/// times its width (and by relative 1e-6, so that a key that never varied must match).
fn within_spread(value: f64, (lo, hi): (f64, f64)) -> bool {
    let slack = CLOSE_MARGIN * (hi - lo) + RTOL * lo.abs().max(hi.abs()) + ATOL;
    value >= lo - slack && value <= hi + slack
}

fn compare_close(
    ours: &BTreeMap<String, Value>,
    reference: &BTreeMap<String, Value>,
    spread: &BTreeMap<String, (f64, f64)>,
    unchecked: &[String],
    problems: &mut Vec<String>,
) {
    for key in unchecked {
        if !reference.contains_key(key) {
            problems.push(format!("{key}: listed as unchecked but not a report key"));
        }
    }
    for (key, golden) in reference {
        if SIMULATOR_SPEED_KEYS.contains(&key.as_str()) || unchecked.contains(key) {
            continue;
        }
        let Some(value) = ours.get(key) else {
            problems.push(format!("{key}: missing in ours"));
            continue;
        };
        match (value.as_f64(), golden.as_f64()) {
            (Some(a), Some(_)) => match spread.get(key) {
                Some(range) if within_spread(a, *range) => {}
                Some((lo, hi)) => problems.push(format!(
                    "{key}: ours {a}, the reference ranged over [{lo}, {hi}]"
                )),
                None => problems.push(format!("{key}: no measured spread for this key")),
            },
            _ if value == golden => {}
            _ => problems.push(format!("{key}: ours {value} reference {golden}")),
        }
    }
    check_accounting(ours, problems);
    for key in ours
        .keys()
        .filter(|k| !reference.contains_key(*k) && !ACCOUNTING_KEYS.contains(&k.as_str()))
    {
        problems.push(format!("{key}: missing in the reference"));
    }
}

/// The planner's lines of a run's stdout: the scaling events block and the tick count.
fn planner_lines(stdout: &str) -> String {
    let mut lines = Vec::new();
    let mut in_events = false;
    for line in stdout.lines() {
        if line == "Scaling events:" {
            in_events = true;
            lines.push(line);
            continue;
        }
        if in_events && line.starts_with("  t=") {
            lines.push(line);
            continue;
        }
        in_events = false;
        if line.starts_with("Planner ticks: ") {
            lines.push(line);
        }
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn read_report(path: &Path) -> Result<BTreeMap<String, Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn run_case(case: &Case) -> Result<(), String> {
    let root = repo_root();
    let golden = root.join("tests/parity/golden");
    let out_dir = tempfile::TempDir::new().map_err(|e| e.to_string())?;
    let report = out_dir.path().join(format!("{}.json", case.name));
    let records = out_dir.path().join(format!("{}.jsonl", case.name));
    let golden_records = golden.join(format!("{}.records.tsv.gz", case.name));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dynosim"));
    cmd.current_dir(&root)
        .args(&case.args)
        .arg("--report-json")
        .arg(&report);
    if golden_records.exists() {
        cmd.arg("--report-jsonl").arg(&records);
    }
    let output = cmd.output().map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(format!(
            "dynosim failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let ours = read_report(&report)?;
    let reference = read_report(&golden.join(format!("{}.json", case.name)))?;
    let mut problems = Vec::new();
    if case.close {
        let spread = read_spread(&golden.join(format!("{}.spread.json", case.name)))?;
        compare_close(&ours, &reference, &spread, &case.unchecked, &mut problems);
    } else {
        check_accounting(&ours, &mut problems);
        let keys: BTreeSet<&String> = ours.keys().chain(reference.keys()).collect();
        for key in keys {
            if SIMULATOR_SPEED_KEYS.contains(&key.as_str())
                || ACCOUNTING_KEYS.contains(&key.as_str())
            {
                continue;
            }
            match (ours.get(key), reference.get(key)) {
                (Some(a), Some(b)) if values_agree(a, b) => {}
                (Some(a), Some(b)) => problems.push(format!("{key}: ours {a} reference {b}")),
                (None, _) => problems.push(format!("{key}: missing in ours")),
                (_, None) => problems.push(format!("{key}: missing in the reference")),
            }
        }
        if golden_records.exists() {
            compare_records(&records, &golden_records, &mut problems);
        }
    }
    let golden_planner = golden.join(format!("{}.planner.txt", case.name));
    if golden_planner.exists() {
        let expected = std::fs::read_to_string(&golden_planner)
            .map_err(|e| format!("{}: {e}", golden_planner.display()))?;
        let ours = planner_lines(&String::from_utf8_lossy(&output.stdout));
        // A close case stores every variant the reference printed, separated by "# or".
        if !expected.split("# or\n").any(|variant| variant == ours) {
            problems.push(format!(
                "planner output differs:\n--- ours\n{ours}--- reference\n{expected}"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        let how = if case.close {
            "statistical, against the reference's measured spread"
        } else {
            "exact within relative 1e-6"
        };
        Err(format!("differs ({how}):\n  {}", problems.join("\n  ")))
    }
}

fn main() {
    let mut args = Arguments::from_args();
    let root = repo_root();
    let cases = match cases() {
        Ok(cases) => cases,
        Err(e) => {
            eprintln!("parity: {e}");
            std::process::exit(101);
        }
    };
    let only = std::env::var("DYNOSIM_PARITY_CASE").ok();
    if let Some(only) = &only {
        if !cases.iter().any(|c| &c.name == only) {
            eprintln!("parity: DYNOSIM_PARITY_CASE={only} names no case of cases.tsv");
            std::process::exit(101);
        }
    }
    let mut trials = Vec::new();
    let mut skipped = Vec::new();
    for case in cases {
        if only.as_deref().is_some_and(|o| o != case.name) {
            continue;
        }
        if !case.unchecked.is_empty() {
            println!(
                "parity: {}: known divergence, not compared: {}",
                case.name,
                case.unchecked.join(", ")
            );
        }
        let missing = missing_inputs(&case, &root);
        let name = case.name.clone();
        let trial = Trial::test(name.clone(), move || run_case(&case).map_err(Failed::from));
        if missing.is_empty() {
            trials.push(trial);
        } else {
            skipped.push(format!("{name} ({} absent)", missing.join(", ")));
            trials.push(trial.with_ignored_flag(true));
        }
    }
    if !skipped.is_empty() && !args.ignored && !args.include_ignored {
        println!(
            "parity: {} case(s) skipped (shown as ignored) because their inputs are absent:",
            skipped.len()
        );
        for s in &skipped {
            println!("  {s}");
        }
    }
    // Cases run the binary as a child process; the harness's threads only wait for them.
    if args.test_threads.is_none() {
        args.test_threads = std::thread::available_parallelism().ok().map(usize::from);
    }
    libtest_mimic::run(&args, trials).exit();
}
