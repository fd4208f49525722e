//! Byte-exact checks of the report file and table against outputs captured from the reference
//! (`python -m dynamo.replay`, ai-dynamo 1.4.2) in `testdata/`:
//! - `syn`: `--input-tokens 1000 --output-tokens 100 --request-count 50 --replay-concurrency 8`;
//! - `tiny2sla`: `mooncake_tiny.jsonl --num-workers 2 --sla-ttft-ms 2000 --sla-itl-ms 20`;
//! - `synth1`: `synthetic_trace.jsonl` (large values with thousands separators);
//! - `short`: 3,000 conversation-trace requests with output lengths 1-2, `--num-workers 2`.

use super::{key_order, Report, Value, INT_KEYS};

const CASES: [(&str, &str, &str); 4] = [
    (
        "syn",
        include_str!("testdata/syn.json"),
        include_str!("testdata/syn.table.txt"),
    ),
    (
        "tiny2sla",
        include_str!("testdata/tiny2sla.json"),
        include_str!("testdata/tiny2sla.table.txt"),
    ),
    (
        "synth1",
        include_str!("testdata/synth1.json"),
        include_str!("testdata/synth1.table.txt"),
    ),
    (
        "short",
        include_str!("testdata/short.json"),
        include_str!("testdata/short.table.txt"),
    ),
];

/// Parses the flat report file line by line: serde_json without its `float_roundtrip` feature
/// can land one ulp off on some decimal strings, while `str::parse::<f64>` is exact.
fn parse(file: &str) -> Report {
    let mut object = serde_json::Map::new();
    for line in file.lines() {
        let Some((key, number)) = line.trim().trim_end_matches(',').split_once(": ") else {
            continue;
        };
        let key = key.trim_matches('"').to_string();
        let value = if let Ok(int) = number.parse::<i64>() {
            serde_json::Value::from(int)
        } else {
            serde_json::Value::from(number.parse::<f64>().unwrap())
        };
        object.insert(key, value);
    }
    Report::from_json_value(&serde_json::Value::Object(object)).unwrap()
}

#[test]
fn json_file_round_trips_byte_for_byte() {
    for (name, file, _) in CASES {
        assert_eq!(parse(file).to_json_file_string(), file, "case {name}");
    }
}

#[test]
fn table_matches_reference_stdout_byte_for_byte() {
    for (name, file, table) in CASES {
        assert_eq!(parse(file).render_table(), table, "case {name}");
    }
}

#[test]
fn reference_key_sets_and_types() {
    for (name, file, _) in CASES {
        let report = parse(file);
        let with_goodput = name == "tiny2sla";
        let keys: Vec<&str> = report.entries.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, key_order(with_goodput), "case {name}");
        for (key, value) in &report.entries {
            let is_int = matches!(value, Value::Int(_));
            assert_eq!(is_int, INT_KEYS.contains(key), "case {name} key {key}");
        }
    }
}
