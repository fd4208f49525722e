//! The collector on a thread of its own gives exactly what the inline collector gives: the
//! report, the per-request records (kept to the end or streamed to a sink), the HTML report's
//! time series and the planner's outcome, over workloads of both topologies. And a collector
//! thread that dies ends the run with an error instead of hanging it. The conversation trace
//! is read from `../shared` where present (its runs cross many batch boundaries; the unit
//! tests of `sim::collector_front` cross them with small batches); the synthetic workloads
//! always run.

mod common;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use dynosim::config::ReplayOptions;
use dynosim::report::RecordSink;
use dynosim::sim::{CollectorThread, Observers};
use dynosim::{ReplaySpec, Report, RequestRecord, Simulation};
use serde_json::Value as Json;

#[derive(Clone, Default)]
struct SharedSink(Arc<Mutex<Vec<RequestRecord>>>);

impl RecordSink for SharedSink {
    fn accept(&mut self, record: RequestRecord) {
        self.0.lock().unwrap().push(record);
    }
}

/// Everything a run gives out.
#[derive(Debug, PartialEq)]
struct Outputs {
    report: Report,
    records: Vec<RequestRecord>,
    streamed: Vec<RequestRecord>,
    series: Option<Json>,
    planner: Option<String>,
}

fn run(spec: &ReplaySpec, thread: CollectorThread, stream: bool, cancelled: bool) -> Outputs {
    let workload = dynosim::load_workload(spec).expect("workload");
    let sink = SharedSink::default();
    let records: Option<Box<dyn RecordSink>> = stream.then(|| Box::new(sink.clone()) as _);
    let observers = Observers {
        timeseries: true,
        progress: None,
    };
    let cancel = AtomicBool::new(cancelled);
    let mut simulation = Simulation::new(spec, workload)
        .cancel(&cancel)
        .observers(observers)
        .collector_thread(thread);
    if let Some(sink) = records {
        simulation = simulation.records(sink);
    }
    let mut simulated = simulation.run().expect("run");
    let planner = simulated.take_planner().map(|p| format!("{p:?}"));
    let series = simulated.take_timeseries().map(|s| s.to_json(64));
    let (report, records) = simulated.into_report(0.0);
    let streamed = std::mem::take(&mut *sink.0.lock().unwrap());
    Outputs {
        report,
        records,
        streamed,
        series,
        planner,
    }
}

/// Both threads, records kept and streamed, and a run cancelled before it began: the same.
fn check_both_ways(spec: ReplaySpec) {
    let mut spec = spec;
    spec.capture_requests = true;
    for stream in [false, true] {
        let inline = run(&spec, CollectorThread::SameThread, stream, false);
        let threaded = run(&spec, CollectorThread::OwnThread, stream, false);
        let completed = inline.report.get("completed_requests").unwrap().as_f64();
        assert!(completed > 0.0, "the workload completes requests");
        assert!(inline.series.is_some());
        let kept = if stream {
            &inline.streamed
        } else {
            &inline.records
        };
        assert!(kept.len() >= completed as usize, "records are captured");
        assert_eq!(
            inline, threaded,
            "the collector's thread changed the outputs"
        );
    }
    let inline = run(&spec, CollectorThread::SameThread, true, true);
    let threaded = run(&spec, CollectorThread::OwnThread, true, true);
    assert_eq!(inline, threaded, "a cancelled run differs by thread");
}

fn synthetic(workers: i64) -> ReplayOptions {
    common::synthetic(workers, 400)
}

fn disaggregated(router_mode: &str) -> ReplayOptions {
    let engine = |role: &str| Some(format!(r#"{{"worker_type": "{role}"}}"#));
    ReplayOptions {
        prefill_engine_args: engine("prefill"),
        decode_engine_args: engine("decode"),
        num_prefill_workers: 2,
        num_decode_workers: 2,
        router_mode: router_mode.into(),
        ..synthetic(1)
    }
}

#[test]
fn aggregated_single_worker_is_the_same_on_either_thread() {
    check_both_ways(synthetic(1).into_spec().unwrap());
}

#[test]
fn aggregated_closed_loop_kv_router_is_the_same_on_either_thread() {
    let spec = ReplayOptions {
        router_mode: "kv_router".into(),
        request_rate: None,
        replay_concurrency: Some(16),
        ..synthetic(3)
    };
    check_both_ways(spec.into_spec().unwrap());
}

#[test]
fn aggregated_time_capped_run_is_the_same_on_either_thread() {
    // The flag takes trace files only; the cap itself works on any workload.
    let mut spec = synthetic(2).into_spec().unwrap();
    spec.max_sim_time_ms = Some(4000.0);
    check_both_ways(spec);
}

#[test]
fn aggregated_planned_run_is_the_same_on_either_thread() {
    let spec = ReplayOptions {
        planner_config: Some(
            r#"{"mode":"agg","optimization_target":"load",
                "decode_scale_up_kv_rate":60,"decode_scale_down_kv_rate":20}"#
                .into(),
        ),
        ..synthetic(2)
    };
    check_both_ways(spec.into_spec().unwrap());
}

#[test]
fn disaggregated_round_robin_is_the_same_on_either_thread() {
    check_both_ways(disaggregated("round_robin").into_spec().unwrap());
}

#[test]
fn disaggregated_kv_router_is_the_same_on_either_thread() {
    check_both_ways(disaggregated("kv_router").into_spec().unwrap());
}

#[test]
fn conversation_trace_is_the_same_on_either_thread() {
    let Some(trace) = common::conversation_trace(module_path!()) else {
        return;
    };
    for options in [
        ReplayOptions {
            num_workers: 2,
            router_mode: "kv_router".into(),
            ..ReplayOptions::default()
        },
        ReplayOptions {
            num_prefill_workers: 2,
            num_decode_workers: 2,
            prefill_engine_args: Some(r#"{"worker_type": "prefill"}"#.into()),
            decode_engine_args: Some(r#"{"worker_type": "decode"}"#.into()),
            ..ReplayOptions::default()
        },
    ] {
        let spec = ReplayOptions {
            trace_files: vec![trace.clone()],
            ..options
        };
        check_both_ways(spec.into_spec().unwrap());
    }
}

/// A sink that fails: the collector's thread stops with it.
struct FailingSink;

impl RecordSink for FailingSink {
    fn accept(&mut self, _record: RequestRecord) {
        panic!("the sink failed");
    }
}

#[test]
fn a_collector_thread_that_dies_ends_the_run_with_an_error() {
    let mut spec = synthetic(2).into_spec().unwrap();
    spec.capture_requests = true;
    let workload = dynosim::load_workload(&spec).expect("workload");
    let result = Simulation::new(&spec, workload)
        .collector_thread(CollectorThread::OwnThread)
        .records(Box::new(FailingSink))
        .run();
    let error = result.expect_err("the run reports the dead collector");
    assert_eq!(error.kind(), dynosim::error::ErrorKind::Runtime);
    assert!(
        error.to_string().contains("the sink failed"),
        "the error says why: {error}"
    );
}
