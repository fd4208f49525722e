//! The load measurement of `dynosim serve` (run by `bench/serve-load.sh`): starts the server
//! given, holds many streaming connections on it for a while, then stops it and prints what
//! the load saw: requests, tokens and errors; the server's delay per token
//! (`dynosim:token_delay_seconds`) and its pacing part (`dynosim:event_wake_delay_seconds`);
//! what it added to the first and last token of each request,
//! measured by the client against the simulated times of the served run's records; and the
//! server's resident memory over the run.
//!
//! serve_load DYNOSIM [--connections N] [--seconds S] [--max-tokens N] [--prompt-words N]
//!            [--speed X] [-- SERVER FLAGS...]

#[path = "../tests/load_client/mod.rs"]
mod load_client;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use load_client::{LoadPlan, Outcome};

const DEADLINE: Duration = Duration::from_secs(120);

/// Resident and peak resident memory, in MB, when it could be read.
type Memory = Option<(f64, f64)>;

struct Args {
    dynosim: String,
    connections: usize,
    seconds: f64,
    max_tokens: usize,
    prompt_words: usize,
    speed: f64,
    server_flags: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut parsed = Args {
        dynosim: String::new(),
        connections: 500,
        seconds: 60.0,
        max_tokens: 200,
        prompt_words: 100,
        speed: 1.0,
        server_flags: Vec::new(),
    };
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--connections" => parsed.connections = number(&value(&arg)?, &arg)?,
            "--seconds" => parsed.seconds = number(&value(&arg)?, &arg)?,
            "--max-tokens" => parsed.max_tokens = number(&value(&arg)?, &arg)?,
            "--prompt-words" => parsed.prompt_words = number(&value(&arg)?, &arg)?,
            "--speed" => parsed.speed = number(&value(&arg)?, &arg)?,
            "--" => {
                parsed.server_flags = args.by_ref().collect();
            }
            other if parsed.dynosim.is_empty() && !other.starts_with('-') => {
                parsed.dynosim = other.to_string()
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if parsed.dynosim.is_empty() {
        return Err("give the dynosim binary to start".into());
    }
    Ok(parsed)
}

fn number<T: std::str::FromStr>(text: &str, flag: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{flag}: not a number: {text}"))
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("serve_load: {err}");
            std::process::exit(2);
        }
    };
    if let Err(err) = measure(&args) {
        eprintln!("serve_load: {err}");
        std::process::exit(1);
    }
}

fn measure(args: &Args) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("dynosim-serve-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|err| err.to_string())?;
    let records = dir.join("served.jsonl");
    let mut server = Command::new(&args.dynosim)
        .args(["serve", "--port", "0", "--model", "load", "--quiet"])
        .args(["--speed", &args.speed.to_string()])
        .arg("--report-jsonl")
        .arg(&records)
        .arg("--report-json")
        .arg(dir.join("served.json"))
        .args(&args.server_flags)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("cannot start {}: {err}", args.dynosim))?;
    let pid = server.id();
    let (lines, received) = mpsc::channel();
    let stderr = server.stderr.take().expect("piped stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let address = loop {
        let line = received
            .recv_timeout(DEADLINE)
            .map_err(|_| "the server did not say where it listens".to_string())?;
        if let Some(rest) = line.split("http://").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
        }
    };
    let plan = LoadPlan {
        url: format!("http://{address}"),
        model: "load".into(),
        connections: args.connections,
        duration: Duration::from_secs_f64(args.seconds),
        ramp: Duration::from_secs(2),
        max_tokens: args.max_tokens,
        prompt_words: args.prompt_words,
        request_timeout: DEADLINE,
    };
    // The server's memory, every second while the load runs.
    let sampling = Arc::new(AtomicBool::new(true));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (sampling, samples) = (Arc::clone(&sampling), Arc::clone(&samples));
        std::thread::spawn(move || {
            let started = Instant::now();
            while sampling.load(Ordering::SeqCst) {
                if let Some(memory) = load_client::memory_mb(pid) {
                    samples
                        .lock()
                        .unwrap()
                        .push((started.elapsed().as_secs_f64(), memory));
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let idle_memory = load_client::memory_mb(pid);
    let cpu_before = (
        load_client::cpu_seconds(pid),
        load_client::cpu_seconds(std::process::id()),
    );
    // The client on one thread: the other core is the server's.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| err.to_string())?;
    let (result, metrics) = runtime.block_on(async {
        let result = load_client::run(&plan).await;
        let metrics = reqwest::get(format!("{}/metrics", plan.url))
            .await
            .map_err(|err| err.to_string())?
            .text()
            .await
            .map_err(|err| err.to_string())?;
        Ok::<_, String>((result, metrics))
    })?;
    let after_memory = load_client::memory_mb(pid);
    let cpu = |before: Option<f64>, pid: u32| Some(load_client::cpu_seconds(pid)? - before?);
    let cpu_used = (
        cpu(cpu_before.0, pid),
        cpu(cpu_before.1, std::process::id()),
    );
    sampling.store(false, Ordering::SeqCst);
    let _ = sampler.join();
    // Drain: the server writes the served run's records.
    // SAFETY: kill on the pid of our own child.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    let stopping = Instant::now();
    loop {
        if server.try_wait().map_err(|err| err.to_string())?.is_some() {
            break;
        }
        if stopping.elapsed() > DEADLINE {
            let _ = server.kill();
            return Err("the server did not drain in time".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&records)
        .map_err(|err| format!("cannot read {}: {err}", records.display()))?;
    let records: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    report(
        args,
        &result,
        &metrics,
        &records,
        (idle_memory, after_memory),
        &samples.lock().unwrap(),
    );
    if let (Some(server), Some(client)) = cpu_used {
        println!(
            "CPU used over {:.0} s: server {server:.1} s ({:.1} us per token), client {client:.1} s",
            result.elapsed.as_secs_f64(),
            server * 1e6 / result.tokens().max(1) as f64
        );
    }
    Ok(())
}

fn report(
    args: &Args,
    result: &load_client::LoadResult,
    metrics: &str,
    records: &[serde_json::Value],
    (idle, after): (Memory, Memory),
    samples: &[(f64, (f64, f64))],
) {
    let errors = result.errors();
    let completed = result
        .outcomes
        .iter()
        .filter(|outcome: &&Outcome| outcome.error.is_none())
        .count();
    println!(
        "load: {} connections for {:.0} s (speed {}): {} requests completed, {} tokens received, {} errors{}",
        args.connections,
        args.seconds,
        args.speed,
        completed,
        result.tokens(),
        errors.len(),
        errors
            .first()
            .map(|first| format!(" (first: {first})"))
            .unwrap_or_default()
    );
    let (buckets, count) = load_client::histogram(metrics, "dynosim:token_delay_seconds");
    let bound = |q| load_client::histogram_quantile_bound(&buckets, count, q) * 1000.0;
    println!(
        "server delay per token (dynosim:token_delay_seconds, {count} tokens): p50 <= {} ms, p99 <= {} ms, p99.9 <= {} ms",
        bound(0.5),
        bound(0.99),
        bound(0.999)
    );
    let (buckets, count) = load_client::histogram(metrics, "dynosim:event_wake_delay_seconds");
    let bound = |q| load_client::histogram_quantile_bound(&buckets, count, q) * 1000.0;
    println!(
        "of which pacing, the simulating thread's wake after each due event \
         (dynosim:event_wake_delay_seconds, {count} events): p50 <= {} ms, p99 <= {} ms, p99.9 <= {} ms",
        bound(0.5),
        bound(0.99),
        bound(0.999)
    );
    let simulated = load_client::simulated_times(records);
    let (added, unmatched) =
        load_client::added_latency_ms(&result.outcomes, &simulated, args.speed);
    println!(
        "added latency seen by the client, first and last token of each request vs the simulated times ({} tokens{}): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        added.len(),
        if unmatched > 0 {
            format!(", {unmatched} requests unmatched")
        } else {
            String::new()
        },
        load_client::quantile(&added, 0.5),
        load_client::quantile(&added, 0.99),
        load_client::quantile(&added, 1.0)
    );
    let at = |seconds: f64| {
        samples
            .iter()
            .find(|(t, _)| *t >= seconds)
            .map_or("-".to_string(), |(_, (rss, _))| format!("{rss:.0}"))
    };
    println!(
        "server memory (MB resident): idle {} | at 10 s {} | 30 s {} | 60 s {} | after the load {} | peak {}",
        idle.map_or("-".into(), |(rss, _)| format!("{rss:.0}")),
        at(10.0),
        at(30.0),
        at(60.0),
        after.map_or("-".into(), |(rss, _)| format!("{rss:.0}")),
        after.map_or("-".into(), |(_, peak)| format!("{peak:.0}"))
    );
}
