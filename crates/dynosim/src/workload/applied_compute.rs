//! The `applied_compute_agentic` trace reader (the workload format of Applied Compute's TRIE).
//!
//! One JSON object per line is one sequential agent session without timestamps (hence replayed
//! under `--replay-concurrency` only). A session of `num_turns` tool-calling turns becomes
//! `num_turns + 1` requests: each turn's prompt is the previous prompt plus the assistant's
//! response and the tool's output, and the next turn follows the tool's latency after the
//! previous one completes. Prompts grow as prefix extensions (hash ids are appended, never
//! replaced), so each turn can reuse the previous turn's prompt blocks. With
//! `--trace-shared-prefix-ratio r` and `--trace-num-prefix-groups G` (both > 0), the first
//! `round(ceil(initial prompt / block) * r)` blocks are shared by every session of the same
//! group (`line index % G`).

use std::path::Path;

use serde::Deserialize;

use super::lines::{describe_json_error, format_hint, TraceLines};
use super::{HashIdArena, HashIdInterner, Session, Turn, Turns, Workload};
use crate::error::{Error, Result};

/// Top bits of the hash ids shared within a prefix group.
const SHARED_PREFIX_TAG: u64 = 0xA63E << 48;

/// One session line. All fields are required; unknown fields are ignored.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object (one applied_compute_agentic session)")]
struct SessionRow {
    num_turns: usize,
    input_prompt_length: usize,
    assistant_response_length: Vec<usize>,
    tool_call_output_length: Vec<usize>,
    /// Seconds.
    tool_call_latency: Vec<f64>,
    final_assistant_response_length: usize,
}

/// Reads an Applied Compute agentic trace.
pub fn read_applied_compute(
    path: &Path,
    trace_block_size: u32,
    shared_prefix_ratio: f64,
    num_prefix_groups: usize,
) -> Result<Workload> {
    if trace_block_size == 0 {
        return Err(Error::usage("trace_block_size must be greater than 0"));
    }
    if !(0.0..=1.0).contains(&shared_prefix_ratio) {
        return Err(Error::usage(format!(
            "--trace-shared-prefix-ratio: shared_prefix_ratio must be between 0.0 and 1.0, got {shared_prefix_ratio}"
        )));
    }
    let shown = path.display().to_string();
    let mut lines = TraceLines::open(path, false)
        .map_err(|e| Error::usage(format!("failed to open trace file {shown}: {e}")))?;
    let block = trace_block_size as usize;
    let mut interner = HashIdInterner::default();
    let mut arena = HashIdArena::default();
    let mut next_unique: u64 = 1;
    let mut sessions = Vec::new();
    loop {
        let (line_no, text) = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(failure) => {
                return Err(Error::usage(format!(
                    "failed to read line {} from {shown}: {}",
                    failure.line_no, failure.reason
                )))
            }
        };
        let row: SessionRow = serde_json::from_str(text).map_err(|e| {
            Error::usage(format!(
                "failed to parse line {line_no} from {shown} as JSON: {}{}",
                describe_json_error::<SessionRow>(text, &e),
                format_hint(line_no, text)
            ))
        })?;
        for (name, len) in [
            (
                "assistant_response_length",
                row.assistant_response_length.len(),
            ),
            ("tool_call_output_length", row.tool_call_output_length.len()),
            ("tool_call_latency", row.tool_call_latency.len()),
        ] {
            if len != row.num_turns {
                return Err(Error::usage(format!(
                    "trace line {line_no} field {name} length {len} does not match num_turns {} (in {shown})",
                    row.num_turns
                )));
            }
        }
        if row.input_prompt_length == 0 {
            return Err(Error::usage(format!(
                "trace line {line_no} input_prompt_length must be positive (in {shown})"
            )));
        }
        let group = (shared_prefix_ratio > 0.0 && num_prefix_groups > 0)
            .then(|| (line_no - 1) % num_prefix_groups);
        let shared_blocks = ((row.input_prompt_length.div_ceil(block) as f64) * shared_prefix_ratio)
            .round() as usize;
        let overflow = || {
            Error::usage(format!(
                "trace line {line_no} cumulative input length overflow (in {shown})"
            ))
        };

        let mut raw_ids: Vec<u64> = Vec::new();
        let mut ids: Vec<u32> = Vec::new();
        let mut input_length = row.input_prompt_length;
        let mut grow = |raw_ids: &mut Vec<u64>, ids: &mut Vec<u32>, length: usize| -> Result<()> {
            let target = length.div_ceil(block);
            while raw_ids.len() < target {
                let index = raw_ids.len();
                let raw = match group {
                    Some(group) if index < shared_blocks => {
                        SHARED_PREFIX_TAG | ((group as u64) << 32) | index as u64
                    }
                    _ => {
                        let id = next_unique;
                        next_unique = next_unique.checked_add(1).ok_or_else(|| {
                            Error::usage(format!(
                                "synthetic hash id overflow (line {line_no} of {shown})"
                            ))
                        })?;
                        id
                    }
                };
                raw_ids.push(raw);
                ids.push(interner.intern(raw).ok_or_else(|| {
                    Error::usage(format!(
                        "trace contains more unique hash IDs than u32 can represent (at line {line_no} of {shown})"
                    ))
                })?);
            }
            Ok(())
        };
        grow(&mut raw_ids, &mut ids, input_length)?;
        let mut turns = Turns::with_capacity(row.num_turns + 1);
        let mut delay_ms = 0.0;
        for turn in 0..row.num_turns {
            let latency_s = row.tool_call_latency[turn];
            if !latency_s.is_finite() || latency_s < 0.0 {
                return Err(Error::usage(format!(
                    "trace line {line_no} tool_call_latency[{turn}] must be a finite non-negative number (in {shown}; got {latency_s})"
                )));
            }
            turns.push(Turn {
                input_length,
                max_output_tokens: row.assistant_response_length[turn],
                delay_ms,
                prompt: arena.push(ids.iter().copied(), trace_block_size),
                priority: 0,
                strict_priority: 0,
                policy_class: None,
            });
            input_length = input_length
                .checked_add(row.assistant_response_length[turn])
                .and_then(|l| l.checked_add(row.tool_call_output_length[turn]))
                .ok_or_else(overflow)?;
            grow(&mut raw_ids, &mut ids, input_length)?;
            delay_ms = latency_s * 1000.0;
        }
        turns.push(Turn {
            input_length,
            max_output_tokens: row.final_assistant_response_length,
            delay_ms,
            prompt: arena.push(ids, trace_block_size),
            priority: 0,
            strict_priority: 0,
            policy_class: None,
        });
        sessions.push(Session {
            id: format!("applied_compute_agentic_session_{line_no}").into(),
            first_timestamp_ms: None,
            turns,
        });
    }
    if sessions.is_empty() {
        return Err(Error::usage(format!(
            "trace file {shown} did not contain any requests"
        )));
    }
    arena.share(&mut sessions);
    Ok(Workload {
        sessions,
        ..Workload::default()
    })
}

#[cfg(test)]
mod tests {
    use super::super::lines::testing::{mutate, TempTrace};
    use super::*;

    fn load(text: &str, block: u32, ratio: f64, groups: usize) -> Result<Workload> {
        let file = TempTrace::new(".jsonl", text.as_bytes());
        read_applied_compute(&file.0, block, ratio, groups)
    }

    const ROW: &str = "{\"num_turns\":2,\"input_prompt_length\":16,\"assistant_response_length\":[4,4],\"tool_call_output_length\":[8,8],\"tool_call_latency\":[0.01,0.02],\"final_assistant_response_length\":4}";

    #[test]
    fn sessions_expand_into_growing_turns() {
        let w = load(ROW, 4, 0.0, 0).unwrap();
        let s = &w.sessions[0];
        assert_eq!(s.id, "applied_compute_agentic_session_1");
        assert_eq!(
            s.turns.iter().map(|t| t.input_length).collect::<Vec<_>>(),
            [16, 28, 40]
        );
        assert_eq!(
            s.turns.iter().map(|t| t.delay_ms).collect::<Vec<_>>(),
            [0.0, 10.0, 20.0]
        );
        let ids = |t: &Turn| t.prompt.ids().unwrap().to_vec();
        // Each prompt extends the previous one.
        assert_eq!(ids(&s.turns[0]), [0, 1, 2, 3]);
        assert_eq!(ids(&s.turns[2])[..7], ids(&s.turns[1])[..]);
    }

    #[test]
    fn prefix_groups_share_the_first_blocks() {
        let text = format!("{ROW}\n{ROW}\n{ROW}\n");
        let w = load(&text, 4, 0.5, 2).unwrap();
        let first = |s: usize| w.sessions[s].turns[0].prompt.ids().unwrap().to_vec();
        // round(4 blocks * 0.5) = 2 shared blocks; lines 1 and 3 share group 0.
        assert_eq!(first(0)[..2], first(2)[..2]);
        assert_ne!(first(0)[..2], first(1)[..2]);
        assert_ne!(first(0)[2], first(2)[2]);
        // Ratio alone shares nothing.
        let w = load(&text, 4, 0.5, 0).unwrap();
        assert_ne!(
            format!("{:?}", w.sessions[0].turns[0].prompt),
            format!("{:?}", w.sessions[2].turns[0].prompt)
        );
    }

    #[test]
    fn errors_name_line_and_file() {
        let e = load("{\"num_turns\":1,\"input_prompt_length\":16,\"assistant_response_length\":[],\"tool_call_output_length\":[1],\"tool_call_latency\":[1],\"final_assistant_response_length\":4}", 4, 0.0, 0).unwrap_err().to_string();
        assert!(e.starts_with("trace line 1 field assistant_response_length length 0 does not match num_turns 1 (in "), "{e}");
        let e = load("{\"num_turns\":0,\"input_prompt_length\":0,\"assistant_response_length\":[],\"tool_call_output_length\":[],\"tool_call_latency\":[],\"final_assistant_response_length\":4}", 4, 0.0, 0).unwrap_err().to_string();
        assert!(
            e.starts_with("trace line 1 input_prompt_length must be positive"),
            "{e}"
        );
        let e = load("{\"num_turns\":1,\"input_prompt_length\":3,\"assistant_response_length\":[1],\"tool_call_output_length\":[1],\"tool_call_latency\":[-1],\"final_assistant_response_length\":4}", 4, 0.0, 0).unwrap_err().to_string();
        assert!(
            e.starts_with("trace line 1 tool_call_latency[0] must be a finite non-negative number"),
            "{e}"
        );
        let e = load("\n{\"num_turns\":\"2\"}", 4, 0.0, 0)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("failed to parse line 2 from ") && e.contains("(field num_turns)"),
            "{e}"
        );
        let e = load("", 4, 0.0, 0).unwrap_err().to_string();
        assert!(e.contains("did not contain any requests"), "{e}");
    }

    mod never_panics {
        use super::*;
        use proptest::prelude::*;

        fn check(bytes: &[u8], ratio: f64, groups: usize) {
            let file = TempTrace::new(".jsonl", bytes);
            if let Err(e) = read_applied_compute(&file.0, 4, ratio, groups) {
                assert!(e.to_string().contains(&file.shown()), "{e}");
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]
            #[test]
            fn on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
                check(&bytes, 0.5, 3);
            }

            #[test]
            fn on_mutated_valid_rows(op in any::<u8>(), at in any::<usize>(), byte in any::<u8>(), groups in 0usize..4) {
                check(&mutate(&format!("{ROW}\n{ROW}\n"), op, at, byte), 0.5, groups);
            }
        }
    }
}
