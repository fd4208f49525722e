//! The server settings of the InferenceX benchmarks, so that a measured row is rebuilt with the
//! engine its numbers came from, not with dynosim's defaults.
//!
//! INTERFACE
//! - [`Recipe`]: what identifies a row's benchmark script (backend, model, precision, system,
//!   lengths, concurrency, parallel shape, the date it was measured).
//! - [`Recipe::engine_args`]: the engine arguments the script's server flags amount to: the
//!   KV-cache dtype, the memory share the KV cache gets, the token budget per pass, the
//!   running-request cap, SGLang's request polling interval, TRT-LLM's batch waiting. Keys the
//!   script leaves at the engine's default are not set.
//!
//! Every value is a fact read from the public InferenceX repository (single-node NVIDIA
//! scripts under `benchmarks/`, their history from 2025-10 to 2026-04; docs/fidelity.md
//! lists the sources), not fitted to any measurement. Where a script changed during the
//! period, the row's `measured=` date picks the version; a row without a date gets the
//! earlier one.

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
    pub tp: u64,
    /// `YYYY-MM-DD`, from the row's `measured=` note.
    pub measured: Option<&'a str>,
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

    /// The engine arguments of the row's script (empty for a model no script covers).
    pub fn engine_args(&self) -> Map<String, Value> {
        let mut args = Map::new();
        let Some(family) = Family::of(self.model) else {
            return args;
        };
        let (b200, h200) = (self.system == "b200_sxm", self.system == "h200_sxm");
        let quantized = matches!(self.precision, "fp8" | "fp4");
        match self.backend {
            "trtllm" => self.trtllm(family, b200, h200, &mut args),
            "sglang" => self.sglang(family, b200, h200, quantized, &mut args),
            "vllm" => self.vllm(family, b200, h200, &mut args),
            _ => {}
        }
        args
    }

    fn trtllm(&self, family: Family, b200: bool, h200: bool, args: &mut Map<String, Value>) {
        // fp8 KV cache in every script but gpt-oss on H200.
        if !(family == Family::GptOss && h200) {
            args.insert("aic_kv_cache_dtype".into(), json!("fp8"));
        }
        let memory = match family {
            Family::Llama70B => Some(0.9),
            Family::DeepSeek if h200 => Some(0.75),
            Family::DeepSeek if self.precision == "fp8" && self.isl > self.osl && self.tp == 4 => {
                Some(0.75)
            }
            Family::DeepSeek => Some(0.8),
            Family::GptOss => Some(0.85),
            _ => None,
        };
        if let Some(memory) = memory {
            args.insert("free_gpu_memory_fraction".into(), json!(memory));
        }
        let budget = match family {
            Family::Llama70B => Some(16384),
            Family::DeepSeek => {
                // Sized to one prompt plus a token per running request; raised to at least
                // 8192 from 2026-01-21.
                let fitted = round_up_64(self.concurrency + self.isl + 64);
                Some(if self.since("2026-01-21") {
                    fitted.max(8192)
                } else {
                    fitted
                })
            }
            Family::GptOss => Some(20000),
            _ => None,
        };
        if let Some(budget) = budget {
            args.insert("max_num_batched_tokens".into(), json!(budget));
        }
        // Batch waiting (passes held, share of the token budget): the Llama scripts at 1k/1k
        // below TP 8 (every version), the DeepSeek fp8 B200 script at 1k/1k from concurrency 64
        // (from 2026-01-29).
        let one_k = self.isl == 1024 && self.osl == 1024;
        let batch_wait = match family {
            Family::Llama70B if one_k && self.tp < 8 => Some((20, 0.9)),
            Family::DeepSeek
                if one_k
                    && b200
                    && self.precision == "fp8"
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

    fn sglang(
        &self,
        family: Family,
        b200: bool,
        h200: bool,
        quantized: bool,
        args: &mut Map<String, Value>,
    ) {
        let fp8_kv = match family {
            Family::DeepSeek => b200,
            Family::Qwen35 => quantized,
            _ => false,
        };
        if fp8_kv {
            args.insert("aic_kv_cache_dtype".into(), json!("fp8"));
        }
        let tp4 = self.tp == 4;
        // (mem_fraction_static, chunked_prefill_size, max_running_requests)
        let settings: Option<(f64, Option<u64>, u64)> = match family {
            Family::DeepSeek if b200 && self.precision == "fp4" => Some((0.85, None, 256)),
            Family::DeepSeek if b200 && tp4 => Some((0.95, Some(8192), 32)),
            Family::DeepSeek if b200 => Some((0.82, Some(32768), 128)),
            Family::DeepSeek if h200 => Some((
                0.82,
                Some(32768),
                if self.isl == 1024 && self.osl == 1024 {
                    512
                } else {
                    256
                },
            )),
            Family::Qwen35 if h200 => Some((0.8, Some(16384), 128)),
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

    fn vllm(&self, family: Family, b200: bool, h200: bool, args: &mut Map<String, Value>) {
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
            tp: 8,
            measured: Some("2026-03-01"),
        }
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
        llama.tp = 4;
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
}
