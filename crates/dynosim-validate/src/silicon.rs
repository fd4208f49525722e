//! The silicon CSV (aiconfigurator-core's `systems/silicon_sample.csv`, or any CSV with its
//! columns): each row one benchmark run measured on real GPUs, rebuilt as the benchmark client
//! ran it.
//!
//! INTERFACE
//! - [`packaged_csv`]: where the installed aiconfigurator-core keeps its CSV (asked of the
//!   interpreter AIC timing uses).
//! - [`read_csv`]: every row of a file as a [`crate::MeasuredRun`]; a missing column or a value
//!   that is not a number is a usage error naming the file, line and column.
//!
//! The load each row is rebuilt with (InferenceX, whose client is vLLM's benchmark script):
//! `10 × C` prompts, C the client's concurrency (the source's `silicon_concurrency=` note, else
//! `batch_size`), lengths uniform in `[0.8·L, L]`, all sent at once under a concurrency cap of
//! C; one worker per pool with AIC timing for the row's backend, system, model, parallel shape
//! (as the benchmark's script ran it, [`crate::inferencex`]) and quantisation. Rows of other
//! families are modelled the same way and marked "protocol unknown": the CSV does not say how
//! their client ran.

use std::path::Path;
use std::process::Command;

use dynosim::{Error, Result};
use dynosim_sweep::Settings;
use serde_json::{json, Map, Value};

use crate::inferencex::Widths;
use crate::{Family, MeasuredRun, Mode};

/// The columns a silicon CSV must have (the packaged file's header).
pub const COLUMNS: [&str; 34] = [
    "id",
    "silicon_data_source",
    "backend",
    "backend_version",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "moe_quant_mode",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "prefill_batch_size",
    "prefill_num_workers",
    "prefill_tp_size",
    "prefill_pp_size",
    "prefill_attention_dp_size",
    "prefill_moe_tp_size",
    "prefill_moe_ep_size",
    "decode_batch_size",
    "decode_num_workers",
    "decode_tp_size",
    "decode_pp_size",
    "decode_attention_dp_size",
    "decode_moe_tp_size",
    "decode_moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
];

/// The marker of the rows that do not come from the InferenceX benchmarks.
const GAP_ANALYSIS_MARKER: &str = "aic-auto-gap-analysis";

/// How the notes of rows read from the InferenceX results database's dump begin.
const DATABASE_DUMP_MARKER: &str = "db-dump/";

/// Prompts the InferenceX client sends per unit of concurrency.
pub const PROMPTS_PER_CONCURRENCY: u64 = 10;

/// The InferenceX client's length range: lengths uniform in `[RANGE_RATIO·L, L]`.
pub const RANGE_RATIO: f64 = 0.8;

/// The prompt lengths a row is rebuilt with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lengths {
    /// As the client drew them: uniform in `[⌊0.8·L⌋, L]` (InferenceX).
    Client,
    /// Exactly `L` and `O` tokens each (an ablation: requests finish in lock step).
    Fixed,
}

/// The engine's own `max_num_seqs` default; raised to the client's concurrency when that is
/// higher, so the engine admits every request the client keeps in flight.
const DEFAULT_MAX_NUM_SEQS: u64 = 256;

/// GPUs of one node of the measured systems (H100, H200 and B200 SXM): an aggregated
/// InferenceX run never spans more.
const GPUS_PER_NODE: u64 = 8;

/// Model ids of the CSV that aiconfigurator-core bundles under another name (the same
/// architecture: a renamed repository or a quantised release of it; the quantisation comes
/// from the row's own columns).
const MODEL_ALIASES: [(&str, &str); 6] = [
    ("meta-llama/Llama-3.1-70B", "meta-llama/Meta-Llama-3.1-70B"),
    (
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Meta-Llama-3.1-8B",
    ),
    (
        "nvidia/Llama-3.1-8B-Instruct-FP8",
        "meta-llama/Meta-Llama-3.1-8B",
    ),
    ("zhipuai/GLM-5", "zai-org/GLM-5"),
    ("nvidia/DeepSeek-R1-NVFP4", "deepseek-ai/DeepSeek-R1"),
    ("nvidia/Qwen3-32B-NVFP4", "Qwen/Qwen3-32B"),
];

/// The model id aiconfigurator-core knows a CSV model by.
pub fn aic_model(model: &str) -> &str {
    MODEL_ALIASES
        .iter()
        .find(|(csv, _)| *csv == model)
        .map_or(model, |(_, bundled)| bundled)
}

/// The packaged CSV of the aiconfigurator-core that `python` imports.
pub fn packaged_csv(python: &str) -> Result<std::path::PathBuf> {
    let script = "import os, aiconfigurator_core as a; \
                  print(os.path.join(os.path.dirname(a.__file__), 'systems', 'silicon_sample.csv'))";
    let output = Command::new(python)
        .args(["-c", script])
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .map_err(|err| {
            Error::runtime(format!(
                "cannot run {python} to find aiconfigurator-core's silicon_sample.csv ({err}); \
                 set DYNOSIM_PYTHON to a Python with aiconfigurator-core, or give --csv FILE"
            ))
        })?;
    if !output.status.success() {
        return Err(Error::runtime(format!(
            "{python} cannot import aiconfigurator_core, which holds the measured runs \
             (systems/silicon_sample.csv); {}, set DYNOSIM_PYTHON, or give --csv FILE",
            dynosim_aic_tables::INSTALL_HINT
        )));
    }
    let path = std::path::PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if !path.is_file() {
        return Err(Error::runtime(format!(
            "the installed aiconfigurator-core has no {} (0.12 ships it); give --csv FILE",
            path.display()
        )));
    }
    Ok(path)
}

/// One CSV row's cells by column name, with the file and line for messages.
struct Cells<'a> {
    file: &'a str,
    line: u64,
    header: &'a [String],
    record: &'a csv::StringRecord,
}

impl Cells<'_> {
    fn text(&self, column: &str) -> &str {
        self.header
            .iter()
            .position(|name| name == column)
            .and_then(|index| self.record.get(index))
            .unwrap_or("")
            .trim()
    }

    fn bad(&self, column: &str, what: &str) -> Error {
        Error::usage(format!(
            "{}:{}: column `{column}`: {:?} is not {what}",
            self.file,
            self.line,
            self.text(column)
        ))
    }

    /// A number, or `None` for an empty cell.
    fn number(&self, column: &str) -> Result<Option<f64>> {
        let text = self.text(column);
        if text.is_empty() {
            return Ok(None);
        }
        match text.parse::<f64>() {
            Ok(value) if value.is_finite() => Ok(Some(value)),
            _ => Err(self.bad(column, "a number")),
        }
    }

    /// A non-negative whole number (written `4` or `4.0`), or `None` for an empty cell.
    fn count(&self, column: &str) -> Result<Option<u64>> {
        match self.number(column)? {
            None => Ok(None),
            Some(value) if value >= 0.0 && value.fract() == 0.0 && value < 1e15 => {
                Ok(Some(value as u64))
            }
            Some(_) => Err(self.bad(column, "a non-negative whole number")),
        }
    }
}

/// The parallel shape of one pool.
#[derive(Clone, Debug, PartialEq)]
struct Shape {
    tp: u64,
    pp: u64,
    attention_dp: u64,
    moe_tp: Option<u64>,
    moe_ep: Option<u64>,
    /// `None`: a disaggregated pool whose worker count the row leaves empty (an aggregated
    /// row's one deployment counts as one worker).
    workers: Option<u64>,
}

impl Shape {
    fn read(cells: &Cells<'_>, prefix: &str) -> Result<Self> {
        let column = |name: &str| format!("{prefix}{name}");
        Ok(Shape {
            tp: cells.count(&column("tp_size"))?.unwrap_or(1).max(1),
            pp: cells.count(&column("pp_size"))?.unwrap_or(1).max(1),
            // 0 and empty both mean no attention data parallelism.
            attention_dp: cells
                .count(&column("attention_dp_size"))?
                .unwrap_or(1)
                .max(1),
            // 0 and empty both mean a dense model.
            moe_tp: cells
                .count(&column("moe_tp_size"))?
                .filter(|size| *size > 0),
            moe_ep: cells
                .count(&column("moe_ep_size"))?
                .filter(|size| *size > 0),
            workers: if prefix.is_empty() {
                Some(1)
            } else {
                cells
                    .count(&column("num_workers"))?
                    .map(|count| count.max(1))
            },
        })
    }

    /// The shape a single-node InferenceX run really had. Some sources of the CSV write an
    /// expert-parallel run with its widths multiplied by the expert-parallel size: TP8 with
    /// EP8 as `tp 64, moe_tp 8, moe_ep 8` (or `attention_dp 64` with attention DP), and a vLLM
    /// TP4 run with EP4 as `tp 4, attention_dp 4, moe_ep 16`; the rows' ids
    /// (`..._tp8_ep8_...`) and the benchmark scripts name the real widths, and a node holds
    /// [`GPUS_PER_NODE`] GPUs. Any other shape is returned as it is.
    fn on_one_node(&self) -> Shape {
        let gpus = self.tp * self.attention_dp;
        let mut real = self.clone();
        match (self.moe_tp, self.moe_ep) {
            // TP (or attention DP) x EP, with the MoE split over both.
            (Some(moe_tp), Some(ep))
                if moe_tp == ep && ep > 1 && moe_tp * ep == gpus && gpus > GPUS_PER_NODE =>
            {
                if self.attention_dp > 1 {
                    real.attention_dp /= ep;
                } else {
                    real.tp /= ep;
                }
                real.moe_tp = Some(1);
            }
            // TP x EP written as attention DP of the same width.
            (None | Some(1), Some(ep))
                if self.tp > 1 && self.attention_dp == self.tp && ep == gpus =>
            {
                real.attention_dp = 1;
                real.moe_ep = Some(self.tp);
            }
            _ => {}
        }
        real
    }

    fn widths(&self) -> Widths {
        Widths {
            tp: self.tp,
            attention_dp: self.attention_dp,
            moe_tp: self.moe_tp,
            moe_ep: self.moe_ep,
        }
    }

    fn set_widths(&mut self, widths: Widths) {
        self.tp = widths.tp;
        self.attention_dp = widths.attention_dp;
        self.moe_tp = widths.moe_tp;
        self.moe_ep = widths.moe_ep;
    }

    /// The worker count as the widths column shows it (`?` where the row leaves it empty).
    fn describe_workers(&self) -> String {
        self.workers
            .map_or_else(|| "?".to_owned(), |count| count.to_string())
    }

    fn describe(&self) -> String {
        let mut text = format!("tp{}", self.tp);
        if self.pp > 1 {
            text.push_str(&format!(" pp{}", self.pp));
        }
        if self.attention_dp > 1 {
            text.push_str(&format!(" dp{}", self.attention_dp));
        }
        if let Some(moe_tp) = self.moe_tp {
            text.push_str(&format!(" moe_tp{moe_tp}"));
        }
        if let Some(moe_ep) = self.moe_ep {
            text.push_str(&format!(" ep{moe_ep}"));
        }
        text
    }
}

/// What a row's engine arguments are made of besides its shape.
struct EngineBase<'a> {
    backend: &'a str,
    system: &'a str,
    model: &'a str,
    gemm_dtype: &'a str,
    moe_dtype: &'a str,
    concurrency: u64,
    /// The engine version that measured the row ([`crate::engine_version_of`]).
    engine_version: &'a str,
    /// The benchmark script's server settings ([`crate::inferencex`]), over the defaults.
    server: Map<String, Value>,
}

/// One pool's engine arguments (`worker_type` for a disaggregated pool's role), with the
/// user's `extra` keys merged over them.
fn engine_args(
    base: &EngineBase<'_>,
    shape: &Shape,
    worker_type: Option<&str>,
    extra: &Map<String, Value>,
) -> Value {
    let mut args = Map::new();
    args.insert("engine_type".into(), json!(base.backend));
    if let Some(worker_type) = worker_type {
        args.insert("worker_type".into(), json!(worker_type));
    }
    args.insert("aic_backend".into(), json!(base.backend));
    args.insert("aic_system".into(), json!(base.system));
    args.insert("aic_model_path".into(), json!(aic_model(base.model)));
    args.insert("aic_tp_size".into(), json!(shape.tp));
    if let Some(moe_tp) = shape.moe_tp {
        args.insert("aic_moe_tp_size".into(), json!(moe_tp));
    }
    if let Some(moe_ep) = shape.moe_ep {
        args.insert("aic_moe_ep_size".into(), json!(moe_ep));
    }
    if shape.attention_dp > 1 {
        args.insert("aic_attention_dp_size".into(), json!(shape.attention_dp));
    }
    if !base.gemm_dtype.is_empty() {
        args.insert("aic_gemm_dtype".into(), json!(base.gemm_dtype));
    }
    if !base.moe_dtype.is_empty() && (shape.moe_tp.is_some() || shape.moe_ep.is_some()) {
        args.insert("aic_moe_dtype".into(), json!(base.moe_dtype));
    }
    args.insert(
        "max_num_seqs".into(),
        json!(base.concurrency.max(DEFAULT_MAX_NUM_SEQS)),
    );
    for (key, value) in base.server.iter().chain(extra) {
        args.insert(key.clone(), value.clone());
    }
    // A calibration may hold entries per engine version: the row's version picks them
    // (unless the user's keys name one).
    if args.contains_key("aic_calibration") && !args.contains_key("aic_engine_version") {
        args.insert("aic_engine_version".into(), json!(base.engine_version));
    }
    Value::Object(args)
}

/// The client's concurrency: the `silicon_concurrency=` the source notes, else `batch_size`.
/// The note comes first: rows with attention data parallelism write `batch_size` per rank (the
/// client's concurrency divided by the attention-DP width).
fn concurrency(cells: &Cells<'_>) -> Result<Option<u64>> {
    let noted = cells
        .text("silicon_data_source")
        .split(';')
        .filter_map(|part| part.trim().strip_prefix("silicon_concurrency="))
        .find_map(|value| value.trim().parse::<u64>().ok());
    match noted {
        Some(noted) => Ok(Some(noted)),
        None => cells.count("batch_size"),
    }
}

/// How rows are rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rebuild {
    pub lengths: Lengths,
    /// InferenceX rows get their benchmark script's server settings
    /// ([`crate::inferencex::Recipe`]); `false`: dynosim's engine defaults.
    pub server_settings: bool,
}

/// Reads every row of a silicon CSV. `extra` (the `--extra-engine-args` object) is merged over
/// each pool's engine arguments; `rebuild` says how prompts and engines are rebuilt.
pub fn read_csv(
    path: &Path,
    extra: &Map<String, Value>,
    rebuild: Rebuild,
) -> Result<Vec<MeasuredRun>> {
    let file = path.display().to_string();
    let mut reader = csv::ReaderBuilder::new()
        .flexible(false)
        .from_path(path)
        .map_err(|err| Error::usage(format!("cannot read {file}: {err}")))?;
    let header: Vec<String> = reader
        .headers()
        .map_err(|err| Error::usage(format!("{file}:1: unreadable header: {err}")))?
        .iter()
        .map(|name| name.trim().to_owned())
        .collect();
    if let Some(missing) = COLUMNS
        .iter()
        .find(|column| !header.iter().any(|h| h == *column))
    {
        return Err(Error::usage(format!(
            "{file}:1: missing column `{missing}` (a silicon CSV has the columns of \
             aiconfigurator-core's systems/silicon_sample.csv)"
        )));
    }
    let mut runs = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|err| {
            let line = err.position().map_or(0, |position| position.line());
            Error::usage(format!("{file}:{line}: {err}"))
        })?;
        let line = record.position().map_or(0, |position| position.line());
        let cells = Cells {
            file: &file,
            line,
            header: &header,
            record: &record,
        };
        runs.push(read_row(&cells, extra, rebuild)?);
    }
    Ok(runs)
}

fn read_row(
    cells: &Cells<'_>,
    extra: &Map<String, Value>,
    rebuild: Rebuild,
) -> Result<MeasuredRun> {
    let id = cells.text("id").to_owned();
    if id.is_empty() {
        return Err(Error::usage(format!(
            "{}:{}: column `id` is empty",
            cells.file, cells.line
        )));
    }
    let source = cells.text("silicon_data_source");
    let family = if source.contains(GAP_ANALYSIS_MARKER) {
        Family::GapAnalysis
    } else {
        Family::InferenceX
    };
    let backend = cells.text("backend").to_owned();
    let system = cells.text("system").to_owned();
    let model = cells.text("model_path").to_owned();
    let mode_text = cells.text("mode");
    let isl = cells.count("isl")?;
    let osl = cells.count("osl")?;
    let concurrency = concurrency(cells)?;
    let measured_ttft_ms = cells.number("silicon_ttft_ms")?;
    let measured_tpot_ms = cells.number("silicon_tpot_ms")?;
    let agg_shape = Shape::read(cells, "")?;
    let prefill_shape = Shape::read(cells, "prefill_")?;
    let decode_shape = Shape::read(cells, "decode_")?;
    let mode = match mode_text {
        "agg" => Some(Mode::Agg),
        "disagg" => Some(Mode::Disagg),
        _ => None,
    };
    let widths = match mode {
        Some(Mode::Disagg) => format!(
            "prefill {}x[{}] decode {}x[{}]",
            prefill_shape.describe_workers(),
            prefill_shape.describe(),
            decode_shape.describe_workers(),
            decode_shape.describe()
        ),
        _ => agg_shape.describe(),
    };
    let mut run = MeasuredRun {
        id,
        origin: format!("{}:{}", cells.file, cells.line),
        family,
        protocol_known: family == Family::InferenceX,
        backend: backend.clone(),
        backend_version: cells.text("backend_version").to_owned(),
        system: system.clone(),
        model: model.clone(),
        mode,
        isl,
        osl,
        concurrency,
        widths,
        measured_ttft_ms,
        measured_tpot_ms,
        plan: Err(String::new()),
    };
    run.plan = plan(
        cells,
        &run,
        [&agg_shape, &prefill_shape, &decode_shape],
        extra,
        rebuild,
    );
    Ok(run)
}

/// The settings that rebuild a row, or why it cannot be modelled.
fn plan(
    cells: &Cells<'_>,
    run: &MeasuredRun,
    [agg, prefill, decode]: [&Shape; 3],
    extra: &Map<String, Value>,
    rebuild: Rebuild,
) -> std::result::Result<Settings, String> {
    if !["vllm", "sglang", "trtllm"].contains(&run.backend.as_str()) {
        return Err(format!(
            "backend {:?} is not one dynosim models (vllm, sglang, trtllm)",
            run.backend
        ));
    }
    let mode = run
        .mode
        .ok_or_else(|| format!("mode {:?} is neither agg nor disagg", cells.text("mode")))?;
    let (Some(isl), Some(osl)) = (run.isl, run.osl) else {
        return Err("the row has no isl or osl".into());
    };
    if isl == 0 || osl == 0 {
        return Err("isl and osl must be at least 1".into());
    }
    let concurrency = run
        .concurrency
        .filter(|c| *c > 0)
        .ok_or("the row names no client concurrency (batch_size or silicon_concurrency)")?;
    if run.measured_ttft_ms.is_none() || run.measured_tpot_ms.is_none() {
        return Err("the row has no measured TTFT or TPOT".into());
    }
    let shapes: Vec<&Shape> = match mode {
        Mode::Agg => vec![agg],
        Mode::Disagg => vec![prefill, decode],
    };
    if let Some(shape) = shapes.iter().find(|shape| shape.pp > 1) {
        return Err(format!(
            "pipeline parallelism (pp {}) is not modelled by AIC timing",
            shape.pp
        ));
    }
    let benchmark_deployment =
        rebuild.server_settings && run.family == Family::InferenceX && mode == Mode::Agg;
    let mut agg = agg.clone();
    let server = if benchmark_deployment {
        let source = cells.text("silicon_data_source");
        let recipe = crate::inferencex::Recipe {
            backend: &run.backend,
            model: &run.model,
            precision: cells.text("precision"),
            system: &run.system,
            isl,
            osl,
            concurrency,
            csv_widths: agg.on_one_node().widths(),
            measured: crate::inferencex::measured_date(source),
            database: source.starts_with(DATABASE_DUMP_MARKER),
        };
        agg.set_widths(recipe.widths());
        recipe.engine_args()
    } else {
        Map::new()
    };
    let agg = &agg;
    let base = EngineBase {
        backend: &run.backend,
        system: &run.system,
        model: &run.model,
        gemm_dtype: cells.text("gemm_quant_mode"),
        moe_dtype: cells.text("moe_quant_mode"),
        concurrency,
        engine_version: crate::engine_version_of(run),
        server,
    };
    let mut settings = Settings { values: Map::new() };
    settings.set("input_tokens", json!(isl));
    settings.set("output_tokens", json!(osl));
    settings.set(
        "request_count",
        json!(PROMPTS_PER_CONCURRENCY.saturating_mul(concurrency)),
    );
    settings.set("replay_concurrency", json!(concurrency));
    // The client's length jitter: uniform in [⌊0.8·L⌋, L], seeded (the default length seed).
    if rebuild.lengths == Lengths::Client {
        settings.set("random_range_ratio", json!(RANGE_RATIO));
    }
    match mode {
        Mode::Agg => {
            settings.set("extra_engine_args", engine_args(&base, agg, None, extra));
        }
        Mode::Disagg => {
            // Most InferenceX disaggregated rows leave both counts empty while their benchmark
            // ran 1-2 prefill and 1-9 decode workers (docs/fidelity.md): one worker each would
            // be another deployment, not this run.
            let (Some(prefill_workers), Some(decode_workers)) = (prefill.workers, decode.workers)
            else {
                return Err("the row does not record its pools' worker counts \
                            (prefill_num_workers, decode_num_workers)"
                    .into());
            };
            settings.set(
                "prefill_engine_args",
                engine_args(&base, prefill, Some("prefill"), extra),
            );
            settings.set(
                "decode_engine_args",
                engine_args(&base, decode, Some("decode"), extra),
            );
            settings.set("num_prefill_workers", json!(prefill_workers));
            settings.set("num_decode_workers", json!(decode_workers));
        }
    }
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::Shape;

    fn shape(tp: u64, attention_dp: u64, moe_tp: Option<u64>, moe_ep: Option<u64>) -> Shape {
        Shape {
            tp,
            pp: 1,
            attention_dp,
            moe_tp,
            moe_ep,
            workers: Some(1),
        }
    }

    #[test]
    fn expert_parallel_widths_written_multiplied_are_brought_back_to_one_node() {
        // TP8 EP8 and TP4 EP4 as some CSV sources write them, with and without attention DP.
        assert_eq!(
            shape(64, 1, Some(8), Some(8)).on_one_node(),
            shape(8, 1, Some(1), Some(8))
        );
        assert_eq!(
            shape(16, 1, Some(4), Some(4)).on_one_node(),
            shape(4, 1, Some(1), Some(4))
        );
        assert_eq!(
            shape(1, 64, Some(8), Some(8)).on_one_node(),
            shape(1, 8, Some(1), Some(8))
        );
        // vLLM TP4 EP4 and TP2 EP2 written as attention DP of the TP width.
        assert_eq!(
            shape(4, 4, Some(1), Some(16)).on_one_node(),
            shape(4, 1, Some(1), Some(4))
        );
        assert_eq!(
            shape(2, 2, None, Some(4)).on_one_node(),
            shape(2, 1, None, Some(2))
        );
    }

    #[test]
    fn shapes_that_fit_one_node_are_kept() {
        for kept in [
            shape(8, 1, Some(1), Some(8)),
            shape(8, 1, Some(8), Some(1)),
            shape(4, 1, Some(4), Some(1)),
            shape(1, 8, Some(1), Some(8)),
            shape(1, 4, Some(1), Some(4)),
            shape(2, 2, Some(2), Some(2)),
            shape(8, 1, None, None),
        ] {
            assert_eq!(kept.on_one_node(), kept);
        }
    }
}
