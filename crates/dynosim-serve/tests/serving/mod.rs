//! What the server's tests share: a server run on a thread of the test, on a loopback port
//! the system picks, and the reading of its `/metrics` text.
//!
//! INTERFACE
//! - [`synthetic_deployment`]: replay options for a deployment of `engine` workers (the
//!   one-request synthetic workload is there only because a spec needs a workload).
//! - [`start`]: serves a spec on a thread; [`Running`] holds its address, its stop counter
//!   and the thread; [`Running::stop`] stops it and returns the run.
//! - [`metric`]: one sample's value in a `/metrics` text.

#![allow(dead_code)]

use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use dynosim::config::{ReplayOptions, ReplaySpec};
use dynosim::sim::external::ServeOutputs;
use dynosim_serve::{serve, ServeConfig, ServeHooks, Served};

/// Replay options describing `engine` workers, with a one-request synthetic workload.
pub fn synthetic_deployment(engine: &str) -> ReplayOptions {
    ReplayOptions {
        extra_engine_args: Some(engine.to_string()),
        input_tokens: Some(1),
        output_tokens: Some(1),
        request_count: Some(1),
        replay_concurrency: Some(1),
        ..ReplayOptions::default()
    }
}

/// A server running on a thread of the test.
pub struct Running {
    pub address: SocketAddr,
    /// The stop counter its signal handler would count: 1 drains, 2 stops at once.
    pub stop: &'static AtomicUsize,
    pub handle: JoinHandle<dynosim::Result<Served>>,
}

impl Running {
    /// Stops the server (`stops`: 1 drains, 2 stops at once) and waits for its run.
    pub fn stop(self, stops: usize) -> Served {
        self.stop.store(stops, Ordering::SeqCst);
        self.handle
            .join()
            .expect("the server thread ends")
            .expect("the run ends")
    }
}

/// Serves `spec` with `config` on a new thread and waits (at most `deadline`) until it
/// listens.
pub fn start(
    spec: ReplaySpec,
    config: ServeConfig,
    record_trace: Option<Box<dyn Write + Send>>,
    outputs: ServeOutputs,
    deadline: Duration,
) -> Running {
    let stop: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
    let (listening, address) = mpsc::channel();
    let hooks = ServeHooks {
        record_trace,
        outputs,
        stop,
        on_listening: Box::new(move |address| {
            let _ = listening.send(address);
        }),
    };
    let handle = std::thread::spawn(move || serve(&spec, config, hooks));
    let address = address.recv_timeout(deadline).expect("the server listens");
    Running {
        address,
        stop,
        handle,
    }
}

/// The value of metric `name` (its sample line without labels beyond model_name).
pub fn metric(text: &str, name: &str) -> f64 {
    let prefix = format!("{name}{{");
    text.lines()
        .find(|line| line.starts_with(&prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}
