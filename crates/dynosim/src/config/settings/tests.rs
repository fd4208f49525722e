use super::*;
use std::collections::BTreeSet;

#[test]
fn names_flags_and_keywords_are_unique() {
    let mut names = BTreeSet::new();
    let mut flags = BTreeSet::new();
    let mut keywords = BTreeSet::new();
    for setting in SETTINGS {
        assert!(names.insert(setting.name), "{} defined twice", setting.name);
        if let Some(long) = setting.long() {
            assert!(flags.insert(long), "--{long} defined twice");
            assert_eq!(long, setting.name.replace('_', "-"), "{}", setting.name);
        }
        if let Some(keyword) = setting.python_keyword() {
            assert!(keywords.insert(keyword), "keyword {keyword} defined twice");
        }
    }
}

#[test]
fn every_signature_keyword_is_a_setting() {
    let trace = ReplayFunction::Trace.keywords();
    let synthetic = ReplayFunction::Synthetic.keywords();
    for keyword in trace.iter().chain(&synthetic) {
        assert!(
            SETTINGS
                .iter()
                .any(|setting| setting.python_keyword() == Some(*keyword)),
            "{keyword}"
        );
    }
    // Every keyword setting is taken by at least one function (or is a positional one).
    let positional = [
        "trace_files",
        "input_tokens",
        "output_tokens",
        "request_count",
    ];
    for setting in SETTINGS {
        if let Some(keyword) = setting.python_keyword() {
            assert!(
                positional.contains(&keyword)
                    || trace.contains(&keyword)
                    || synthetic.contains(&keyword),
                "{keyword} is taken by no replay function"
            );
        }
    }
}

#[test]
fn defaults_round_trip_through_the_fields() {
    let options = ReplayOptions::default();
    for setting in SETTINGS {
        let Some(value) = setting.read(&options) else {
            continue;
        };
        assert_eq!(value, setting.default.value(), "{}", setting.name);
    }
    assert_eq!(options.num_workers, 1);
    assert_eq!(options.arrival_seed, 42);
    assert_eq!(options.replay_mode, "offline");
    assert_eq!(options.benchmark_granularity, 8);
    assert!(!options.router_policy_config_from_env);
}

#[test]
fn apply_stores_typed_values_and_unset_restores_the_default() {
    let mut options = ReplayOptions::default();
    let workers = setting("num_workers").unwrap();
    workers.apply(&mut options, SettingValue::Int(4)).unwrap();
    assert_eq!(options.num_workers, 4);
    workers.apply(&mut options, SettingValue::Unset).unwrap();
    assert_eq!(options.num_workers, 1);
    assert!(workers
        .apply(&mut options, SettingValue::Text("4".into()))
        .is_err());
    let rate = setting("request_rate").unwrap();
    rate.apply(&mut options, SettingValue::Float(2.5)).unwrap();
    assert_eq!(options.request_rate, Some(2.5));
    rate.apply(&mut options, SettingValue::Unset).unwrap();
    assert_eq!(options.request_rate, None);
    assert!(setting("quiet")
        .unwrap()
        .apply(&mut options, SettingValue::Switch(true))
        .is_err());
}

#[test]
fn choices_include_the_default() {
    for setting in SETTINGS
        .iter()
        .filter(|setting| !setting.choices.is_empty())
    {
        let Fallback::Text(default) = setting.default else {
            panic!("{} has choices but no text default", setting.name);
        };
        assert!(
            setting.choices.iter().any(|choice| choice.name == default),
            "{}",
            setting.name
        );
    }
}

#[test]
fn python_signatures_write_the_defaults() {
    assert_eq!(
        python_signature(&[
            "num_workers",
            "replay_mode",
            "arrival_speedup_ratio",
            "model_name"
        ]),
        "num_workers=1, replay_mode='offline', arrival_speedup_ratio=1.0, model_name=None"
    );
}

#[test]
fn flags_and_names_are_looked_up() {
    assert_eq!(by_flag("--num-workers").unwrap().name, "num_workers");
    assert!(by_flag("num-workers").is_none());
    assert!(by_flag("--no-such-flag").is_none());
    assert_eq!(
        by_flag("--report-jsonl").unwrap().python_name().as_deref(),
        Some("report_jsonl_path")
    );
    assert_eq!(
        by_flag("--aic-tp-size").unwrap().python_name().as_deref(),
        Some("aic_perf_config.aic_tp_size")
    );
    assert_eq!(by_flag("--online-speed").unwrap().python_name(), None);
}
