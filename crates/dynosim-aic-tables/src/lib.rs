//! dynosim-aic-tables: the I/O step of AIC timing. Runs aiconfigurator-core's table builder (a
//! Python program) once per engine configuration, caches what it prints, and loads the tables
//! into a spec before the simulation. The core crate `dynosim` only reads the tables (and
//! refuses a spec that needs them and has none, [`dynosim::config::needs_prepare`]); everything
//! here that starts a process, reads the environment or writes a file is kept out of it.
//!
//! The interpreter is `DYNOSIM_PYTHON`, else `python3` on `PATH`. The builder's source is
//! compiled in (it is also shipped as `dynosim.aic_tables`), so the interpreter only needs
//! aiconfigurator-core, not dynosim. Tables are cached under `$DYNOSIM_CACHE_DIR/aic/` (default
//! `$HOME/.cache/dynosim/aic/`) in a file named by the SHA-256 of everything they depend on: the
//! builder's source, the package version, the request (model, system, backend, version,
//! parallel shape, dtypes, nextn, table extents, the KV-capacity inputs) and, for a local model
//! directory, its `config.json`. A cached run starts one short interpreter to read the package
//! version and nothing else. A configuration the package has no data for is cached too
//! (`<key>.unsupported`, its one-line error), so it fails again at once with the same message.
//!
//! INTERFACE
//! - [`prepare`] / [`prepare_announcing`]: a validated spec with every AIC table it needs
//!   loaded (borrowed unchanged when it needs none). Run it after validation and before
//!   `dynosim::Simulation`; `announce` hears one sentence before each build the cache does not
//!   answer.
//! - [`prepare_engine`]: the same for one engine's arguments (`flag` names them in errors).
//! - [`tables`], [`sample`], [`package_version`], [`python`]: the builder itself, for tests,
//!   accuracy measurements and the fidelity runs; [`TableExtent`] is what a table covers.
//! - [`INSTALL_HINT`]: how to install what AIC timing needs, for other messages.
//!
//! Errors are `dynosim::Error`s: usage (exit 2) for a request the builder refuses (named by
//! its flag), runtime (exit 1) for a missing interpreter or package, a failed build or
//! unreadable tables.

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use dynosim::aic::{AicConfig, AicTables, BlockEstimate};
use dynosim::config::{needs_prepare, EngineArgs, LengthSpread, ReplaySpec, WorkloadSpec};
use dynosim::error::{Error, ErrorKind, Result};

/// The builder, as shipped in the Python package.
pub const BUILDER_SOURCE: &str = include_str!("../../dynosim-py/python/dynosim/aic_tables.py");

/// The table format this code reads (the builder's `FORMAT`).
const FORMAT: u32 = 2;

/// The builder's exit codes.
const EXIT_USAGE: i32 = 3;
const EXIT_MISSING: i32 = 4;

/// The errors aiconfigurator-core raises when its database has no data for a configuration
/// (the builder prints `ClassName: message`). They repeat identically for the same package
/// version and request, so they are cached like tables: a configuration the package cannot
/// model costs one interpreter run, not one per run.
const UNSUPPORTED_ERRORS: [&str; 2] = ["PerfDataNotAvailableError:", "MissingSystemFlopsError:"];

/// How to install what AIC timing needs.
pub const INSTALL_HINT: &str = "pip install 'dynosim[aic]'";

/// The largest table extents built when the engine leaves a limit unset; beyond them the tables
/// extend linearly (docs/timing.md).
const UNLIMITED_BATCH: usize = 512;
const UNLIMITED_TOKENS: usize = 16384;
const DEFAULT_CONTEXT: usize = 32768;
const MAX_TABLE_TOKENS: usize = 65536;
/// `max_num_batched_tokens` the reference assumes for the KV-capacity estimate when unset.
const ESTIMATE_DEFAULT_TOKENS: usize = 8192;

/// What the tables must cover, from the engine's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableExtent {
    pub max_batch: usize,
    pub max_tokens: usize,
    pub max_context: usize,
}

impl TableExtent {
    pub fn for_engine(args: &EngineArgs) -> Self {
        Self {
            max_batch: args.max_num_seqs.unwrap_or(UNLIMITED_BATCH).clamp(1, 4096),
            max_tokens: args
                .max_num_batched_tokens
                .unwrap_or(UNLIMITED_TOKENS)
                .clamp(1, MAX_TABLE_TOKENS),
            max_context: args.max_model_len.unwrap_or(DEFAULT_CONTEXT).max(2),
        }
    }
}

/// The interpreter AIC timing runs.
pub fn python() -> String {
    std::env::var("DYNOSIM_PYTHON")
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| "python3".to_string())
}

fn cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DYNOSIM_CACHE_DIR").filter(|dir| !dir.is_empty()) {
        return Some(PathBuf::from(dir).join("aic"));
    }
    let home = std::env::var_os("HOME").filter(|home| !home.is_empty())?;
    Some(PathBuf::from(home).join(".cache/dynosim/aic"))
}

/// What a builder run that failed said.
enum BuildFailure {
    /// The package has no data for the configuration (its message, one line).
    Unsupported(String),
    Other(Error),
}

/// Runs the builder with `args`, feeding `stdin`; returns stdout, or the error its exit code
/// and stderr describe.
fn run_builder(python: &str, args: &[&str], stdin: &[u8]) -> Result<Vec<u8>> {
    run_builder_checked(python, args, stdin).map_err(|failure| match failure {
        BuildFailure::Unsupported(message) => builder_failed(python, &message),
        BuildFailure::Other(error) => error,
    })
}

fn builder_failed(python: &str, message: &str) -> Error {
    Error::runtime(format!("AIC table builder (`{python}`) failed: {message}"))
}

/// [`run_builder`], telling a configuration the package cannot model from other failures.
fn run_builder_checked(
    python: &str,
    args: &[&str],
    stdin: &[u8],
) -> std::result::Result<Vec<u8>, BuildFailure> {
    let mut child = Command::new(python)
        .arg("-c")
        .arg(BUILDER_SOURCE)
        .args(args)
        .env("HF_HUB_OFFLINE", "1")
        // `python -c` puts the working directory first on the module path, where any file or
        // directory named like a module the package imports would shadow it (Python 3.11+
        // honours this; older ones ignore it).
        .env("PYTHONSAFEPATH", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| {
            BuildFailure::Other(Error::runtime(format!(
                "AIC timing needs Python with aiconfigurator-core, but `{python}` could not be \
                 started ({error}); set DYNOSIM_PYTHON or {INSTALL_HINT}"
            )))
        })?;
    if let Some(mut pipe) = child.stdin.take() {
        // A builder that exits early closes its stdin; its exit status says why.
        let _ = pipe.write_all(stdin);
    }
    let output = child
        .wait_with_output()
        .map_err(|error| BuildFailure::Other(builder_failed(python, &error.to_string())))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last_line = stderr
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string();
    match output.status.code() {
        Some(0) => Ok(output.stdout),
        Some(EXIT_MISSING) => Err(BuildFailure::Other(Error::runtime(format!(
            "AIC timing needs aiconfigurator-core, which `{python}` does not have: {INSTALL_HINT} \
             (or point DYNOSIM_PYTHON at an interpreter that has it)"
        )))),
        Some(EXIT_USAGE) => Err(BuildFailure::Other(Error::usage(last_line))),
        Some(1)
            if UNSUPPORTED_ERRORS
                .iter()
                .any(|class| last_line.starts_with(class)) =>
        {
            Err(BuildFailure::Unsupported(last_line))
        }
        _ => Err(BuildFailure::Other(builder_failed(
            python,
            &if last_line.is_empty() {
                format!("exit status {}", output.status)
            } else {
                last_line
            },
        ))),
    }
}

/// The installed aiconfigurator-core version (one short interpreter run, no package import).
pub fn package_version(python: &str) -> Result<String> {
    let out = run_builder(python, &["--version"], b"")?;
    Ok(String::from_utf8_lossy(&out).trim().to_string())
}

/// The builder's request for a configuration.
pub fn request(config: &AicConfig, extent: TableExtent, estimate: Option<&BlockEstimate>) -> Value {
    let estimate = estimate.map(|estimate| {
        json!({
            "block_size": estimate.block_size,
            "max_num_batched_tokens":
                estimate.max_num_batched_tokens.unwrap_or(ESTIMATE_DEFAULT_TOKENS),
            "gpu_memory_utilization": estimate.gpu_memory_utilization,
            "mem_fraction_static": estimate.mem_fraction_static,
            "free_gpu_memory_fraction": estimate.free_gpu_memory_fraction,
        })
    });
    json!({
        "model": config.model_path,
        "system": config.system,
        "backend": config.backend,
        "version": config.backend_version,
        "tp_size": config.tp_size,
        "moe_tp_size": config.moe_tp_size,
        "moe_ep_size": config.moe_ep_size,
        "attention_dp_size": config.attention_dp_size,
        "gemm_dtype": config.gemm_dtype,
        "moe_dtype": config.moe_dtype,
        "fmha_dtype": config.fmha_dtype,
        "kv_cache_dtype": config.kv_cache_dtype,
        "comm_dtype": config.comm_dtype,
        "nextn": config.nextn,
        "max_batch": extent.max_batch,
        "max_tokens": extent.max_tokens,
        "max_context": extent.max_context,
        "estimate_blocks": estimate,
    })
}

/// The cache key: SHA-256 over everything the tables depend on.
fn cache_key(package_version: &str, request: &Value, model_path: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(FORMAT.to_le_bytes());
    hasher.update(BUILDER_SOURCE.as_bytes());
    hasher.update(b"\0");
    hasher.update(package_version.as_bytes());
    hasher.update(b"\0");
    hasher.update(request.to_string().as_bytes());
    let config_json = Path::new(model_path).join("config.json");
    if let Ok(bytes) = std::fs::read(config_json) {
        hasher.update(b"\0config.json\0");
        hasher.update(&bytes);
    }
    hasher
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn parse_tables(bytes: &[u8], origin: &str) -> Result<AicTables> {
    let tables: AicTables = serde_json::from_slice(bytes).map_err(|error| {
        Error::runtime(format!("AIC tables from {origin} are unreadable: {error}"))
    })?;
    if tables.format != FORMAT {
        return Err(Error::runtime(format!(
            "AIC tables from {origin} have format {}, expected {FORMAT}",
            tables.format
        )));
    }
    Ok(tables)
}

/// Writes `bytes` to `path` through a temporary file and a rename, so that a concurrent or
/// interrupted run never sees half a file.
fn write_cache(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Whether a table came from the cache (for start-up measurements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Cache,
    Built,
}

/// The tables of a configuration, from the cache or freshly built (and then cached; a cache
/// that cannot be written is skipped silently, the run does not need it).
pub fn tables(
    python: &str,
    config: &AicConfig,
    extent: TableExtent,
    estimate: Option<&BlockEstimate>,
    announce: &mut dyn FnMut(&str),
) -> Result<(AicTables, Source)> {
    let version = package_version(python)?;
    let request = request(config, extent, estimate);
    let key = cache_key(&version, &request, &config.model_path);
    let cached = cache_dir().map(|dir| dir.join(format!("{key}.json")));
    let unsupported = cache_dir().map(|dir| dir.join(format!("{key}.unsupported")));
    if let Some(path) = &cached {
        if let Ok(bytes) = std::fs::read(path) {
            if let Ok(tables) = parse_tables(&bytes, &path.display().to_string()) {
                return Ok((tables, Source::Cache));
            }
        }
    }
    if let Some(message) = unsupported
        .as_ref()
        .and_then(|path| std::fs::read_to_string(path).ok())
    {
        return Err(builder_failed(python, message.trim()));
    }
    announce(&format!(
        "building AIC timing tables for {} on {} ({}) with aiconfigurator-core: the first run \
         of a configuration takes about 25 s; they are cached under {}",
        config.model_path,
        config.system,
        config.backend,
        cached.as_deref().and_then(Path::parent).map_or_else(
            || "nowhere (no cache directory)".to_string(),
            |dir| dir.display().to_string()
        )
    ));
    let bytes = match run_builder_checked(python, &[], request.to_string().as_bytes()) {
        Ok(bytes) => bytes,
        Err(BuildFailure::Unsupported(message)) => {
            if let Some(path) = &unsupported {
                let _ = write_cache(path, message.as_bytes());
            }
            return Err(builder_failed(python, &message));
        }
        Err(BuildFailure::Other(error)) => return Err(error),
    };
    let tables = parse_tables(&bytes, "the AIC table builder")?;
    if let Some(path) = &cached {
        let _ = write_cache(path, &bytes);
    }
    Ok((tables, Source::Built))
}

/// Builds (or loads) the tables of one engine configuration and, when `num_gpu_blocks` was
/// absent, takes the package's per-rank estimate as the KV capacity. `flag` names the option
/// the engine args came from, for error messages.
pub fn prepare_engine(
    args: &mut EngineArgs,
    flag: &str,
    announce: &mut dyn FnMut(&str),
) -> Result<()> {
    let Some(config) = args.aic.as_ref() else {
        return Ok(());
    };
    if config.tables.is_some() {
        return Ok(());
    }
    let extent = TableExtent::for_engine(args);
    let (tables, _) = tables(
        &python(),
        config,
        extent,
        args.aic_block_estimate.as_ref(),
        announce,
    )
    .map_err(|error| match error.kind() {
        ErrorKind::Usage => Error::usage(format!("{flag}: {}", error.message())),
        ErrorKind::Runtime => error,
    })?;
    if args.aic_block_estimate.is_some() {
        match tables.num_gpu_blocks {
            Some(blocks) if blocks >= 1 => {
                args.num_gpu_blocks = match &config.calibration {
                    Some(calibration) => calibration.kv_blocks(blocks),
                    None => blocks,
                }
            }
            other => {
                return Err(Error::usage(format!(
                    "{flag}: aiconfigurator-core estimates {} KV blocks per rank for this \
                     configuration (the model does not fit); set num_gpu_blocks",
                    other.unwrap_or(0)
                )))
            }
        }
    }
    if let Some(config) = args.aic.as_mut() {
        config.tables = Some(Arc::new(tables));
    }
    Ok(())
}

/// The tables the KV router's `aic` prefill-load model asks of: single requests of any
/// prompt length (longer ones extend linearly).
const ROUTER_EXTENT: TableExtent = TableExtent {
    max_batch: 1,
    max_tokens: 32768,
    max_context: 131072,
};

/// The builder names engine-args keys first (`aic_system 'x' is not …`); for the router's model
/// the flag is named instead (`--aic-system: 'x' is not …`).
fn as_flag(message: &str) -> String {
    match message.split_once(' ') {
        Some((key, rest)) if key.starts_with("aic_") => {
            format!("--{}: {rest}", key.replace('_', "-"))
        }
        _ => message.to_string(),
    }
}

/// The spec with every AIC table it needs built or loaded (borrowed unchanged when it needs
/// none). This is I/O and may take seconds on a first run; `dynosim::Simulation` refuses a spec
/// that needed it and did not get it.
pub fn prepare(spec: &ReplaySpec) -> Result<Cow<'_, ReplaySpec>> {
    prepare_announcing(spec, &mut |_| {})
}

/// [`prepare`], telling `announce` (one sentence) before each table build that the cache
/// does not answer, so that a front can say why the run has not started yet.
pub fn prepare_announcing<'s>(
    spec: &'s ReplaySpec,
    announce: &mut dyn FnMut(&str),
) -> Result<Cow<'s, ReplaySpec>> {
    if !needs_prepare(spec) {
        return Ok(Cow::Borrowed(spec));
    }
    let mut prepared = spec.clone();
    load_tables(&mut prepared, announce)?;
    Ok(Cow::Owned(prepared))
}

/// Builds every AIC table a spec needs, in place.
fn load_tables(spec: &mut ReplaySpec, announce: &mut dyn FnMut(&str)) -> Result<()> {
    for (role, pool) in spec.deployment.pools_mut() {
        prepare_engine(&mut pool.engine, role.engine_args_flag(), announce)?;
    }
    if let Some(aic) = spec
        .router_config
        .as_mut()
        .and_then(|config| config.aic.as_mut())
        .filter(|aic| aic.tables.is_none())
    {
        let (built, _) =
            tables(&python(), aic, ROUTER_EXTENT, None, announce).map_err(|error| {
                match error.kind() {
                    ErrorKind::Usage => Error::usage(as_flag(error.message())),
                    ErrorKind::Runtime => error,
                }
            })?;
        aic.tables = Some(Arc::new(built));
    }
    cap_drawn_prompts(spec);
    Ok(())
}

/// A normal spread of synthetic prompt lengths is drawn again above the KV cache, whose size
/// `into_spec` took before the package estimated it: bring the bound to the estimate.
fn cap_drawn_prompts(spec: &mut ReplaySpec) {
    let first_engine = &spec.deployment.entry().engine;
    let kv_tokens = first_engine
        .num_gpu_blocks
        .saturating_mul(first_engine.block_size);
    if let WorkloadSpec::Synthetic(synthetic) = &mut spec.workload {
        if let LengthSpread::Normal {
            max_input_tokens, ..
        } = &mut synthetic.lengths
        {
            // A cache smaller than the mean length itself is the fixed-length run's problem
            // (its prompts could not be admitted either); the bound stays where it was then.
            if kv_tokens >= synthetic.input_tokens {
                *max_input_tokens = kv_tokens;
            }
        }
    }
}

/// The package's direct answers for a configuration (no tables): `points` is the builder's
/// `--sample` request part, either `{"prefill_points": [[n, e, p], …], "decode_points":
/// [[b, c], …]}` or `{"points": N, "seed": S, "max_batch": …, "max_tokens": …,
/// "max_context": …}` for random ones. For tests and accuracy measurements.
pub fn sample(python: &str, config: &AicConfig, points: Value) -> Result<Value> {
    let mut request = request(
        config,
        TableExtent {
            max_batch: 1,
            max_tokens: 1,
            max_context: 2,
        },
        None,
    );
    if let (Some(request), Value::Object(points)) = (request.as_object_mut(), points) {
        request.extend(points);
    }
    let out = run_builder(python, &["--sample"], request.to_string().as_bytes())?;
    serde_json::from_slice(&out)
        .map_err(|error| Error::runtime(format!("AIC sample output is unreadable: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use dynosim::config::ReplayOptions;

    #[test]
    fn drawn_prompts_are_bounded_by_the_kv_cache_the_run_gets() {
        let mut spec = ReplayOptions {
            input_tokens: Some(100),
            output_tokens: Some(10),
            request_count: Some(5),
            replay_concurrency: Some(1),
            input_tokens_stddev: Some(50.0),
            ..ReplayOptions::default()
        }
        .into_spec()
        .unwrap();
        let max_input = |spec: &ReplaySpec| match &spec.workload {
            WorkloadSpec::Synthetic(synthetic) => match synthetic.lengths {
                LengthSpread::Normal {
                    max_input_tokens, ..
                } => max_input_tokens,
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        };
        assert_eq!(max_input(&spec), 16384 * 64);
        // As when the package's estimate replaced the default capacity (no AIC here, so
        // `load_tables` runs no Python).
        fn entry(spec: &mut ReplaySpec) -> &mut dynosim::config::EngineArgs {
            match &mut spec.deployment {
                dynosim::config::Deployment::Aggregated(pool) => &mut pool.engine,
                other => panic!("{other:?}"),
            }
        }
        entry(&mut spec).num_gpu_blocks = 3;
        load_tables(&mut spec, &mut |_| {}).unwrap();
        assert_eq!(max_input(&spec), 3 * 64);
        entry(&mut spec).num_gpu_blocks = 1;
        load_tables(&mut spec, &mut |_| {}).unwrap();
        assert_eq!(
            max_input(&spec),
            3 * 64,
            "a cache below the mean leaves the bound"
        );
    }
}
