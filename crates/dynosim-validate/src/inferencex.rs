//! The deployments of the InferenceX benchmarks, so that a measured row is rebuilt with the
//! engine its numbers came from, not with dynosim's defaults.
//!
//! INTERFACE
//! - [`Recipe`]: what identifies a row's benchmark script (backend, model, precision, system,
//!   lengths, concurrency, parallel widths, the date it was measured, whether it came from the
//!   results database's dump).
//! - [`Recipe::widths`]: the parallel widths the script really ran where the CSV's differ (expert
//!   parallelism a script turned on, or left off, while the CSV says otherwise; the attention DP
//!   the early DeepSeek TRT-LLM scripts chose by concurrency).
//! - [`Recipe::engine_args`]: the engine arguments the script's server flags amount to: the
//!   KV-cache dtype, the memory share the KV cache gets, the token budget per pass, the
//!   running-request cap, SGLang's request polling interval, TRT-LLM's batch waiting, and
//!   speculative decoding (draft tokens per step) for the MTP / EAGLE scripts. Keys the script
//!   leaves at the engine's default are not set.
//!
//! Every value is a fact read from the public InferenceX repository (single-node NVIDIA
//! scripts under `benchmarks/`, the master configuration `.github/configs/nvidia-master.yaml` and
//! `perf-changelog.yaml`, their history from 2025-10 to 2026-04; docs/fidelity.md lists the
//! sources), not fitted to any measurement. Where a script changed during the period, the row's
//! `measured=` date picks the version; a row without a date gets the earlier one. Which rows ran
//! speculative decoding is told by the sweep that measured them: a sweep runs the configurations
//! its changelog entry names, and on some dates only MTP configurations ran.

use serde_json::{json, Map, Value};

/// The model families the InferenceX scripts exist for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    Llama70B,
    /// DeepSeek-R1 and the V3 architecture it shares (the same scripts).
    DeepSeek,
    Qwen35,
    MiniMax,
    Kimi,
    GptOss,
}

impl Family {
    fn of(model: &str) -> Option<Self> {
        let model = model.to_ascii_lowercase();
        if model.contains("llama") && model.contains("70b") {
            Some(Self::Llama70B)
        } else if model.contains("deepseek-r1") || model.contains("deepseek-v3") {
            Some(Self::DeepSeek)
        } else if model.contains("qwen3.5") {
            Some(Self::Qwen35)
        } else if model.contains("minimax") {
            Some(Self::MiniMax)
        } else if model.contains("kimi") {
            Some(Self::Kimi)
        } else if model.contains("gpt-oss") {
            Some(Self::GptOss)
        } else {
            None
        }
    }
}

/// What picks a row's benchmark script and its settings.
#[derive(Clone, Debug)]
pub struct Recipe<'a> {
    pub backend: &'a str,
    /// The CSV's `model_path`.
    pub model: &'a str,
    /// The CSV's `precision` (`fp8`, `fp4`, `bf16`, ...).
    pub precision: &'a str,
    pub system: &'a str,
    pub isl: u64,
    pub osl: u64,
    pub concurrency: u64,
    /// The CSV's widths, brought to one node ([`Recipe::widths`] says what the script ran).
    pub csv_widths: Widths,
    /// `YYYY-MM-DD`, from the row's `measured=` note.
    pub measured: Option<&'a str>,
    /// The row comes from the results database's dump (`db-dump/` notes): its configuration id
    /// names one configuration, and none of those ran speculative decoding.
    pub database: bool,
}

/// A pool's parallel widths, as AIC takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Widths {
    pub tp: u64,
    pub attention_dp: u64,
    /// `None`: a dense model.
    pub moe_tp: Option<u64>,
    pub moe_ep: Option<u64>,
}

impl Widths {
    /// The GPUs of the pool: the script's `TP`.
    fn gpus(&self) -> u64 {
        self.tp * self.attention_dp
    }

    /// Tensor parallelism over every GPU, the experts split the same way.
    fn tensor_parallel(gpus: u64) -> Self {
        Widths {
            tp: gpus,
            attention_dp: 1,
            moe_tp: Some(gpus),
            moe_ep: Some(1),
        }
    }

    /// Expert parallelism over every GPU, attention tensor-parallel.
    fn expert_parallel(gpus: u64) -> Self {
        Widths {
            tp: gpus,
            attention_dp: 1,
            moe_tp: Some(1),
            moe_ep: Some(gpus),
        }
    }

    /// Attention data-parallel over every GPU, experts parallel over them too.
    fn attention_data_parallel(gpus: u64) -> Self {
        Widths {
            tp: 1,
            attention_dp: gpus,
            moe_tp: Some(1),
            moe_ep: Some(gpus),
        }
    }

    fn without_expert_parallelism(&self) -> bool {
        self.moe_ep.is_none_or(|ep| ep == 1)
    }
}

/// The benchmark's sequence-length pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lengths {
    OneKOneK,
    OneKEightK,
    EightKOneK,
    Other,
}

/// The `measured=YYYY-MM-DD` date of a `silicon_data_source` note.
pub fn measured_date(source: &str) -> Option<&str> {
    source
        .split(';')
        .filter_map(|part| part.trim().strip_prefix("measured="))
        .map(|value| value.get(..10).unwrap_or(value))
        .next()
}

/// `value` rounded up to a multiple of 64 (TRT-LLM scripts size their token budget so).
fn round_up_64(value: u64) -> u64 {
    value.div_ceil(64) * 64
}

impl Recipe<'_> {
    /// On or after `date` (a row without a date counts as before every change).
    fn since(&self, date: &str) -> bool {
        self.measured.is_some_and(|measured| measured >= date)
    }

    /// Measured on exactly `date`.
    fn on(&self, date: &str) -> bool {
        self.measured == Some(date)
    }

    fn lengths(&self) -> Lengths {
        match (self.isl, self.osl) {
            (1024, 1024) => Lengths::OneKOneK,
            (1024, 8192) => Lengths::OneKEightK,
            (8192, 1024) => Lengths::EightKOneK,
            _ => Lengths::Other,
        }
    }

    /// The widths the script ran, where they differ from the CSV's (else the CSV's).
    pub fn widths(&self) -> Widths {
        let csv = self.csv_widths;
        let Some(family) = Family::of(self.model) else {
            return csv;
        };
        let (b200, h200) = (self.system == "b200_sxm", self.system == "h200_sxm");
        let gpus = csv.gpus();
        match (self.backend, family, self.precision) {
            // The early DeepSeek TRT-LLM scripts chose expert parallelism and attention DP
            // themselves from the concurrency; the database filled in the defaults (EP 1, no
            // attention DP) for the runs before the search space was written down (2025-11-03).
            ("trtllm", Family::DeepSeek, _)
                if self.measured.is_some_and(|date| date < "2025-11-03")
                    && csv.attention_dp == 1
                    && csv.without_expert_parallelism() =>
            {
                let (ep, dp) = self.early_deepseek_trtllm(b200, h200, gpus);
                if dp {
                    Widths::attention_data_parallel(gpus)
                } else if ep {
                    Widths::expert_parallel(gpus)
                } else {
                    csv
                }
            }
            // SGLang DeepSeek fp4 on B200 always ran EP = TP (`--enable-ep-moe`, then
            // `--ep-size`); the early rows say EP 1.
            ("sglang", Family::DeepSeek, "fp4")
                if b200 && csv.attention_dp == 1 && csv.without_expert_parallelism() =>
            {
                Widths::expert_parallel(gpus)
            }
            // The vLLM MiniMax fp8 scripts enabled expert parallelism whenever EP_SIZE >= 1,
            // that is always: on B200 until 2026-04-03, on H200 from 2026-03-13.
            ("vllm", Family::MiniMax, "fp8")
                if ((b200 && !self.since("2026-04-03")) || (h200 && self.since("2026-03-13")))
                    && csv.attention_dp == 1
                    && csv.without_expert_parallelism() =>
            {
                Widths::expert_parallel(gpus)
            }
            // The Kimi-K2.5 fp4 script has no expert-parallel flag: its "EP 4" runs were TP4.
            ("vllm", Family::Kimi, "fp4") if csv.moe_ep.is_some_and(|ep| ep > 1) => {
                Widths::tensor_parallel(gpus)
            }
            _ => csv,
        }
    }

    /// Expert parallelism and attention DP as the DeepSeek TRT-LLM scripts before 2025-11-03
    /// chose them from the concurrency.
    fn early_deepseek_trtllm(&self, b200: bool, h200: bool, gpus: u64) -> (bool, bool) {
        let c = self.concurrency;
        let lengths = self.lengths();
        let eight_k_in = lengths == Lengths::EightKOneK;
        match self.precision {
            "fp4" if b200 => {
                let ep = match (gpus, lengths) {
                    (4, _) => c > 32,
                    (_, Lengths::OneKOneK) => c > 8,
                    (_, Lengths::OneKEightK) => c > 16,
                    _ => c > 32,
                };
                let dp = if eight_k_in { c > 32 } else { c >= 256 };
                (ep, dp)
            }
            "fp8" if b200 => (
                true,
                if lengths == Lengths::OneKOneK {
                    c > 32
                } else {
                    c > 64
                },
            ),
            "fp8" if h200 => (true, if eight_k_in { c > 32 } else { c > 64 }),
            _ => (false, false),
        }
    }

    /// Draft tokens per decode step when the row's sweep ran a speculative-decoding (MTP or
    /// EAGLE) configuration. A sweep runs the configurations its changelog entry names: the
    /// DeepSeek TRT-LLM sweeps of 2026-01-14 and the B200 ones of 2026-02-05 (fp8) and
    /// 2026-02-06 (fp4) ran only MTP ones (3 MTP layers, 1 with attention DP); the SGLang
    /// DeepSeek fp8 B200 sweep of 2026-03-25 ran both, and only the MTP one (EAGLE, 2 steps) had
    /// concurrency 128 and above, or 8k/1k at TP8 from concurrency 8; Qwen3.5 fp8 on B200 ran
    /// TP4 without EP only with MTP (EAGLE, 3 steps). No configuration of the database's dump
    /// ran speculative decoding.
    fn draft_tokens(&self, family: Family, widths: &Widths) -> Option<u64> {
        if self.database {
            return None;
        }
        let b200 = self.system == "b200_sxm";
        match (self.backend, family, self.precision) {
            ("trtllm", Family::DeepSeek, precision)
                if self.on("2026-01-14")
                    || (b200 && precision == "fp8" && self.on("2026-02-05"))
                    || (b200 && precision == "fp4" && self.on("2026-02-06")) =>
            {
                Some(if widths.attention_dp > 1 { 1 } else { 3 })
            }
            ("sglang", Family::DeepSeek, "fp8")
                if b200
                    && self.on("2026-03-25")
                    && (self.concurrency >= 128
                        || (self.lengths() == Lengths::EightKOneK
                            && widths.gpus() == 8
                            && self.concurrency >= 8)) =>
            {
                Some(2)
            }
            ("sglang", Family::Qwen35, "fp8")
                if b200 && widths.gpus() == 4 && widths.without_expert_parallelism() =>
            {
                Some(3)
            }
            _ => None,
        }
    }

    /// The engine arguments of the row's script (empty for a model no script covers).
    pub fn engine_args(&self) -> Map<String, Value> {
        let mut args = Map::new();
        let Some(family) = Family::of(self.model) else {
            return args;
        };
        let widths = self.widths();
        let draft_tokens = self.draft_tokens(family, &widths);
        let (b200, h200) = (self.system == "b200_sxm", self.system == "h200_sxm");
        let quantized = matches!(self.precision, "fp8" | "fp4");
        let script = Script {
            family,
            b200,
            h200,
            gpus: widths.gpus(),
            attention_dp: widths.attention_dp > 1,
            draft_tokens,
        };
        match self.backend {
            "trtllm" => self.trtllm(&script, &mut args),
            "sglang" => self.sglang(&script, quantized, &mut args),
            "vllm" => self.vllm(&script, &mut args),
            _ => {}
        }
        if let Some(draft_tokens) = draft_tokens {
            args.insert("aic_nextn".into(), json!(draft_tokens));
        }
        args
    }

    fn trtllm(&self, script: &Script, args: &mut Map<String, Value>) {
        let Script {
            family, b200, h200, ..
        } = *script;
        // fp8 KV cache in every script but gpt-oss on H200.
        if !(family == Family::GptOss && h200) {
            args.insert("aic_kv_cache_dtype".into(), json!("fp8"));
        }
        let fp8_b200 = b200 && self.precision == "fp8";
        let memory = match family {
            Family::Llama70B => Some(0.9),
            Family::DeepSeek if h200 => Some(0.75),
            // The fp8 B200 scripts from 2026-01-29 give the KV cache 0.7 at 1k/8k from
            // concurrency 256, as the MTP one does with attention DP.
            Family::DeepSeek
                if fp8_b200
                    && ((script.draft_tokens.is_some() && script.attention_dp)
                        || (self.lengths() == Lengths::OneKEightK
                            && self.concurrency >= 256
                            && self.since("2026-01-29"))) =>
            {
                Some(0.7)
            }
            Family::DeepSeek
                if self.precision == "fp8" && self.isl > self.osl && script.gpus == 4 =>
            {
                Some(0.75)
            }
            Family::DeepSeek => Some(0.8),
            Family::GptOss => Some(0.85),
            _ => None,
        };
        if let Some(memory) = memory {
            args.insert("free_gpu_memory_fraction".into(), json!(memory));
        }
        let budget = match (family, script.draft_tokens) {
            (Family::Llama70B, _) => Some(16384),
            // The MTP scripts size it to one prompt plus each running request's token and
            // draft tokens.
            (Family::DeepSeek, Some(draft_tokens)) => Some(round_up_64(
                (draft_tokens + 1) * self.concurrency + self.isl + 64,
            )),
            (Family::DeepSeek, None) => {
                // Sized to one prompt plus a token per running request; raised to at least
                // 8192 from 2026-01-21.
                let fitted = round_up_64(self.concurrency + self.isl + 64);
                Some(if self.since("2026-01-21") {
                    fitted.max(8192)
                } else {
                    fitted
                })
            }
            (Family::GptOss, _) => Some(20000),
            _ => None,
        };
        if let Some(budget) = budget {
            args.insert("max_num_batched_tokens".into(), json!(budget));
        }
        // Batch waiting (passes held, share of the token budget): the Llama scripts at 1k/1k
        // below TP 8 (every version), the DeepSeek fp8 B200 script at 1k/1k from concurrency 64
        // (from 2026-01-29).
        let one_k = self.lengths() == Lengths::OneKOneK;
        let batch_wait = match family {
            Family::Llama70B if one_k && script.gpus < 8 => Some((20, 0.9)),
            Family::DeepSeek
                if one_k
                    && fp8_b200
                    && script.draft_tokens.is_none()
                    && self.concurrency >= 64
                    && self.since("2026-01-29") =>
            {
                Some((40, 0.8))
            }
            _ => None,
        };
        if let Some((iters, ratio)) = batch_wait {
            args.insert(
                "trtllm".into(),
                json!({"batch_wait_timeout_iters": iters, "batch_wait_max_tokens_ratio": ratio}),
            );
        }
    }

    fn sglang(&self, script: &Script, quantized: bool, args: &mut Map<String, Value>) {
        let Script {
            family, b200, h200, ..
        } = *script;
        let fp8_kv = match family {
            Family::DeepSeek => b200,
            Family::Qwen35 => quantized,
            _ => false,
        };
        if fp8_kv {
            args.insert("aic_kv_cache_dtype".into(), json!("fp8"));
        }
        let tp4 = script.gpus == 4;
        let mtp = script.draft_tokens.is_some();
        // (mem_fraction_static, chunked_prefill_size, max_running_requests)
        let settings: Option<(f64, Option<u64>, u64)> = match family {
            Family::DeepSeek if b200 && mtp => Some((0.82, Some(16384), 512)),
            Family::DeepSeek if b200 && self.precision == "fp4" => Some((0.85, Some(16384), 256)),
            Family::DeepSeek if b200 && tp4 => Some((0.95, Some(8192), 32)),
            Family::DeepSeek if b200 => Some((0.82, Some(32768), 128)),
            Family::DeepSeek if h200 => Some((
                0.82,
                Some(32768),
                if self.lengths() == Lengths::OneKOneK {
                    512
                } else {
                    256
                },
            )),
            Family::Qwen35 if h200 => Some((0.8, Some(16384), 128)),
            // The MTP script caps running requests at the client's concurrency.
            Family::Qwen35 if mtp => Some((0.8, Some(32768), self.concurrency)),
            Family::Qwen35 if self.precision == "fp4" => Some((0.85, Some(32768), 128)),
            Family::Qwen35 => Some((0.82, Some(32768), 128)),
            _ => None,
        };
        let mut sglang = Map::new();
        if let Some((memory, chunk, running)) = settings {
            args.insert("mem_fraction_static".into(), json!(memory));
            args.insert("max_num_seqs".into(), json!(running));
            if let Some(chunk) = chunk {
                sglang.insert("chunked_prefill_size".into(), json!(chunk));
            }
        }
        // The B200 scripts poll for new requests every 30 decode passes from concurrency 16,
        // every 10 below.
        if b200 && matches!(family, Family::DeepSeek | Family::Qwen35) {
            let interval = if self.concurrency >= 16 { 30 } else { 10 };
            sglang.insert("scheduler_recv_interval".into(), json!(interval));
        }
        if !sglang.is_empty() {
            args.insert("sglang".into(), Value::Object(sglang));
        }
    }

    fn vllm(&self, script: &Script, args: &mut Map<String, Value>) {
        let Script {
            family, b200, h200, ..
        } = *script;
        let fp4 = self.precision == "fp4";
        let fp8_kv = match family {
            Family::Llama70B => true,
            Family::MiniMax => b200 && (fp4 || self.since("2026-04-03")),
            Family::Kimi => b200 && fp4 && self.since("2026-04-20"),
            Family::GptOss => b200 && self.since("2025-12-05"),
            _ => false,
        };
        if fp8_kv {
            args.insert("aic_kv_cache_dtype".into(), json!("fp8"));
        }
        let memory = match family {
            Family::MiniMax if h200 => 0.95,
            Family::MiniMax if b200 && !fp4 && !self.since("2026-04-03") => 0.95,
            Family::Kimi if !fp4 => 0.95,
            _ => 0.9,
        };
        args.insert("gpu_memory_utilization".into(), json!(memory));
        let twice_the_prompt = match family {
            Family::MiniMax => b200 && (fp4 || self.since("2026-04-03")),
            Family::Kimi => b200 && fp4 && self.since("2026-04-20"),
            _ => false,
        };
        if twice_the_prompt {
            args.insert("max_num_batched_tokens".into(), json!(2 * self.isl));
        }
    }
}

/// What the settings of a row's script depend on besides the row's own fields.
#[derive(Clone, Copy, Debug)]
struct Script {
    family: Family,
    b200: bool,
    h200: bool,
    /// The script's TP: the GPUs of the run.
    gpus: u64,
    /// Attention data parallelism on.
    attention_dp: bool,
    /// Speculative decoding's draft tokens per step, for the MTP / EAGLE scripts.
    draft_tokens: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipe<'a>(backend: &'a str, model: &'a str, precision: &'a str) -> Recipe<'a> {
        Recipe {
            backend,
            model,
            precision,
            system: "b200_sxm",
            isl: 1024,
            osl: 1024,
            concurrency: 32,
            csv_widths: tp(8),
            measured: Some("2026-03-01"),
            database: false,
        }
    }

    fn tp(gpus: u64) -> Widths {
        Widths::tensor_parallel(gpus)
    }

    #[test]
    fn dates_come_from_the_source_note() {
        assert_eq!(
            measured_date("db-dump/2026-04-27; config_id=636; measured=2026-04-20T00:00:00.000Z"),
            Some("2026-04-20")
        );
        assert_eq!(
            measured_date("source_file=x.csv; silicon_concurrency=4"),
            None
        );
    }

    #[test]
    fn scripts_set_what_they_set_and_dated_changes_apply_from_their_date() {
        let trt = recipe("trtllm", "meta-llama/Llama-3.1-70B", "fp8").engine_args();
        assert_eq!(trt["aic_kv_cache_dtype"], "fp8");
        assert_eq!(trt["max_num_batched_tokens"], 16384);
        // Batch waiting: Llama at 1k/1k below TP 8 only.
        assert!(trt.get("trtllm").is_none(), "TP 8 does not wait: {trt:?}");
        let mut llama = recipe("trtllm", "meta-llama/Llama-3.3-70B-Instruct", "fp4");
        llama.csv_widths = tp(4);
        let waits = llama.engine_args();
        assert_eq!(waits["trtllm"]["batch_wait_timeout_iters"], 20);
        assert_eq!(waits["trtllm"]["batch_wait_max_tokens_ratio"], 0.9);
        llama.osl = 8192;
        assert!(llama.engine_args().get("trtllm").is_none());
        // DeepSeek fp8 on B200 at 1k/1k from concurrency 64, measured from 2026-01-29.
        let mut fp8 = recipe("trtllm", "deepseek-ai/DeepSeek-R1-0528", "fp8");
        fp8.concurrency = 64;
        let waits = fp8.engine_args();
        assert_eq!(waits["trtllm"]["batch_wait_timeout_iters"], 40);
        assert_eq!(waits["trtllm"]["batch_wait_max_tokens_ratio"], 0.8);
        for change in 0..4 {
            let mut other = fp8.clone();
            match change {
                0 => other.concurrency = 32,
                1 => other.measured = Some("2026-01-28"),
                2 => other.precision = "fp4",
                _ => other.system = "h200_sxm",
            }
            assert!(other.engine_args().get("trtllm").is_none(), "{other:?}");
        }

        let mut deepseek = recipe("trtllm", "deepseek-ai/DeepSeek-R1", "fp4");
        deepseek.measured = Some("2025-11-02");
        assert_eq!(deepseek.engine_args()["max_num_batched_tokens"], 1152);
        deepseek.measured = Some("2026-02-03");
        assert_eq!(deepseek.engine_args()["max_num_batched_tokens"], 8192);

        let sglang = recipe("sglang", "deepseek-ai/DeepSeek-V3", "fp4").engine_args();
        assert_eq!(sglang["sglang"]["scheduler_recv_interval"], 30);
        assert_eq!(sglang["max_num_seqs"], 256);
        let mut low = recipe("sglang", "deepseek-ai/DeepSeek-R1", "fp8");
        low.concurrency = 8;
        low.system = "h200_sxm";
        let h200 = low.engine_args();
        assert!(h200.get("aic_kv_cache_dtype").is_none(), "{h200:?}");
        assert!(h200["sglang"].get("scheduler_recv_interval").is_none());

        let mut kimi = recipe("vllm", "moonshotai/Kimi-K2.5", "fp4");
        assert!(kimi.engine_args().get("aic_kv_cache_dtype").is_none());
        kimi.measured = Some("2026-04-20");
        let after = kimi.engine_args();
        assert_eq!(after["aic_kv_cache_dtype"], "fp8");
        assert_eq!(after["max_num_batched_tokens"], 2048);
        kimi.measured = None;
        assert!(kimi.engine_args().get("aic_kv_cache_dtype").is_none());

        assert!(recipe("vllm", "some/other-model", "fp8")
            .engine_args()
            .is_empty());
    }

    #[test]
    fn widths_are_the_scripts_where_the_csv_differs() {
        let ep = |gpus| Widths::expert_parallel(gpus);
        let dp = |gpus| Widths::attention_data_parallel(gpus);
        // SGLang DeepSeek fp4 on B200 always ran EP = TP.
        assert_eq!(
            recipe("sglang", "deepseek-ai/DeepSeek-R1", "fp4").widths(),
            ep(8)
        );
        assert_eq!(
            recipe("sglang", "deepseek-ai/DeepSeek-R1", "fp8").widths(),
            tp(8)
        );
        // MiniMax fp8: EP always on B200 before 2026-04-03 and on H200 from 2026-03-13.
        let mut minimax = recipe("vllm", "MiniMaxAI/MiniMax-M2.5", "fp8");
        minimax.csv_widths = tp(4);
        assert_eq!(minimax.widths(), ep(4));
        minimax.measured = Some("2026-04-03");
        assert_eq!(minimax.widths(), tp(4));
        minimax.system = "h200_sxm";
        assert_eq!(minimax.widths(), ep(4));
        minimax.measured = Some("2026-03-12");
        assert_eq!(minimax.widths(), tp(4));
        // Kimi-K2.5 fp4's "EP 4" was plain TP4.
        let mut kimi = recipe("vllm", "moonshotai/Kimi-K2.5", "fp4");
        kimi.csv_widths = ep(4);
        assert_eq!(kimi.widths(), tp(4));
        // DeepSeek TRT-LLM before 2025-11-03: EP and attention DP by concurrency.
        let mut early = recipe("trtllm", "deepseek-ai/DeepSeek-R1", "fp4");
        early.measured = Some("2025-11-02");
        for (gpus, concurrency, widths) in [
            (4, 32, tp(4)),
            (4, 64, ep(4)),
            (4, 256, dp(4)),
            (8, 8, tp(8)),
            (8, 16, ep(8)),
            (8, 256, dp(8)),
        ] {
            early.csv_widths = tp(gpus);
            early.concurrency = concurrency;
            assert_eq!(early.widths(), widths, "tp{gpus} c{concurrency}");
        }
        early.precision = "fp8";
        early.concurrency = 4;
        assert_eq!(early.widths(), ep(8));
        early.concurrency = 64;
        assert_eq!(early.widths(), dp(8));
        early.measured = Some("2025-11-03");
        assert_eq!(
            early.widths(),
            tp(8),
            "the search space names the widths from then"
        );
        early.measured = None;
        assert_eq!(
            early.widths(),
            tp(8),
            "an undated row keeps the CSV's widths"
        );
    }

    #[test]
    fn speculative_decoding_follows_the_sweeps_that_ran_it() {
        let mut trt = recipe("trtllm", "deepseek-ai/DeepSeek-R1", "fp4");
        assert!(trt.engine_args().get("aic_nextn").is_none());
        trt.measured = Some("2026-01-14");
        trt.concurrency = 64;
        let mtp = trt.engine_args();
        assert_eq!(mtp["aic_nextn"], 3);
        // One prompt plus four tokens (one and three drafts) per running request.
        assert_eq!(mtp["max_num_batched_tokens"], 1344);
        trt.csv_widths = Widths::attention_data_parallel(8);
        assert_eq!(
            trt.engine_args()["aic_nextn"],
            1,
            "attention DP runs one MTP layer"
        );
        trt.database = true;
        assert!(
            trt.engine_args().get("aic_nextn").is_none(),
            "no database configuration did"
        );
        trt.database = false;
        trt.measured = Some("2026-02-05");
        assert!(
            trt.engine_args().get("aic_nextn").is_none(),
            "fp4 ran MTP on 02-06"
        );
        trt.precision = "fp8";
        assert_eq!(trt.engine_args()["aic_nextn"], 1);

        let mut sglang = recipe("sglang", "deepseek-ai/DeepSeek-R1", "fp8");
        sglang.measured = Some("2026-03-25");
        sglang.concurrency = 256;
        let eagle = sglang.engine_args();
        assert_eq!(eagle["aic_nextn"], 2);
        assert_eq!(eagle["max_num_seqs"], 512);
        assert_eq!(eagle["sglang"]["chunked_prefill_size"], 16384);
        sglang.concurrency = 64;
        assert!(sglang.engine_args().get("aic_nextn").is_none());
        sglang.isl = 8192;
        assert_eq!(sglang.engine_args()["aic_nextn"], 2);

        let mut qwen = recipe("sglang", "Qwen/Qwen3.5-397B-A17B", "fp8");
        qwen.csv_widths = tp(4);
        qwen.concurrency = 256;
        let eagle = qwen.engine_args();
        assert_eq!(eagle["aic_nextn"], 3);
        assert_eq!(eagle["max_num_seqs"], 256);
        qwen.csv_widths = Widths::expert_parallel(4);
        assert!(qwen.engine_args().get("aic_nextn").is_none());
    }
}
