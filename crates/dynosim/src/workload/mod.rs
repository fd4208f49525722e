//! The workload model: sessions of turns, whatever format they were read from.
//!
//! Readers (`mooncake`, `agentic`, `applied_compute`, `dynamo_trace`, the synthetic generator)
//! all produce a [`Workload`]. Times are raw: first-turn timestamps as written in the trace (ms)
//! and inter-turn delays as written. How arrivals are derived from them (normalisation,
//! speed-up, closed-loop concurrency, dependency release) is the simulator driver's job
//! (`sim::driver`), because it depends on the run mode.
//!
//! Prompts stay compact (interned hash ids, not tokens) until a request is dispatched.

use crate::tokens::{unique_prompt_token, TokenSeq};

pub mod agentic;
pub mod applied_compute;
pub mod dynamo_trace;
mod lines;
mod load;
pub mod mooncake;
pub mod synthetic;

pub use load::load;

impl Workload {
    /// Sessions in the workload, listed or still to be generated.
    pub fn session_count(&self) -> usize {
        self.synthetic
            .as_ref()
            .map_or(self.sessions.len(), |generated| generated.len())
    }

    /// Turns in the workload: one request each.
    pub fn total_turns(&self) -> usize {
        match &self.synthetic {
            Some(generated) => generated
                .len()
                .saturating_mul(generated.turns_per_session()),
            None => self.sessions.iter().map(|s| s.turns.len()).sum(),
        }
    }
}

/// Everything a replay needs to know about the requests to send.
#[derive(Clone, Debug, Default)]
pub struct Workload {
    /// Sessions in order of first appearance (file order for traces, index order for synthetic).
    pub sessions: Vec<Session>,
    /// How a turn's prompt relates to its session's earlier turns.
    pub prompts: PromptMode,
    /// Request-level dependencies (agentic traces). When set, every session has exactly one
    /// turn, and turns are released by the graph instead of by session order.
    pub graph: Option<DependencyGraph>,
    /// A synthetic workload's sessions, generated as the driver releases them; `sessions` is
    /// then empty.
    pub synthetic: Option<synthetic::SyntheticSessions>,
}

/// How the prompt sent for a turn is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PromptMode {
    /// Each turn's prompt is complete on its own (`mooncake`, and every other format).
    #[default]
    Full,
    /// Each turn carries only its new input (`mooncake-delta`): the prompt sent is the
    /// session's history (earlier turns' inputs and the outputs they actually generated)
    /// followed by this turn's input.
    Cumulative,
}

/// When a dependent request may be released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// When the source request is released to the router.
    Dispatch,
    /// When the source request reaches a terminal state (completed or rejected).
    Completion,
}

/// One edge of a [`DependencyGraph`]: the target waits for `source`, then `delay_ms` more.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dependency {
    /// Session (= request) index of the source.
    pub source: u32,
    pub trigger: Trigger,
    /// Wait after the trigger, in ms as written (scaled by the speed-up in open loop).
    pub delay_ms: f64,
}

/// Request-level dependencies of an agentic workload, over sessions of one turn each.
///
/// A request with no dependency is a root, released at its floor time. A dependent request is
/// released once every dependency has fired, at the latest of its floor and, over its
/// dependencies, trigger time + delay. The graph is acyclic and every source exists (checked by
/// the readers).
#[derive(Clone, Debug, Default)]
pub struct DependencyGraph {
    /// `edges[offsets[i]..offsets[i + 1]]` are the dependencies of session `i`.
    pub offsets: Vec<u32>,
    pub edges: Vec<Dependency>,
    /// The floor time of session `i` in ms as written, if any (`first_timestamp_ms` of the
    /// session holds the raw timestamp used for normalisation).
    pub floor_ms: Vec<Option<f64>>,
    /// How written times become virtual times.
    pub timing: GraphTiming,
}

/// The two timing conventions of agentic traces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GraphTiming {
    /// `agentic_mooncake` rows of ai-dynamo 1.4.2 (and lowered Dynamo agentic traces): every
    /// timestamp, dependent rows' included, is shifted so the earliest is 0; roots are released
    /// at their timestamp (0 without one); dependent rows' timestamps are otherwise ignored.
    #[default]
    Timestamps,
    /// `dynamo.agentic_mooncake` version 2: `not_before_ms` is already an offset from the
    /// start of the replay and floors every request, root or dependent.
    NotBefore,
}

impl DependencyGraph {
    /// The dependencies of session `index`.
    pub fn dependencies(&self, index: usize) -> &[Dependency] {
        &self.edges[self.offsets[index] as usize..self.offsets[index + 1] as usize]
    }

    pub fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An ordered list of turns; turn k+1 is sent `delay_ms` after turn k reaches a terminal state.
#[derive(Clone, Debug)]
pub struct Session {
    /// `session_id` from the trace, or `request_<line>` (1-based physical line) when absent.
    pub id: String,
    /// The first turn's `timestamp` in ms as written (not normalised), if present.
    pub first_timestamp_ms: Option<f64>,
    pub turns: Vec<Turn>,
}

/// One request of a session.
#[derive(Clone, Debug)]
pub struct Turn {
    /// Prompt length in tokens (already clamped to what the prompt can synthesise). Always >= 1.
    pub input_length: usize,
    /// Requested output tokens (`output_length`). May be 0 for traces.
    pub max_output_tokens: usize,
    /// Delay after the previous turn's terminal time, in ms as written. 0 for the first turn.
    pub delay_ms: f64,
    pub prompt: Prompt,
    /// Router hints carried from the trace row (defaults 0, 0, None).
    pub priority: i32,
    pub strict_priority: u32,
    pub policy_class: Option<String>,
}

/// How a turn's prompt tokens are synthesised.
#[derive(Clone, Debug)]
pub enum Prompt {
    /// Trace hash ids (interned to dense u32 in first-seen order): id `k` stands for `block_size`
    /// copies of token `k`; the prompt is the first `input_length` of those tokens.
    HashIds { ids: Vec<u32>, block_size: u32 },
    /// Content that no other request shares (the synthetic workload without sessions).
    Unique { key: u64 },
}

impl Prompt {
    /// The prompt's `input_length` tokens.
    pub fn tokens(&self, input_length: usize) -> TokenSeq {
        let mut seq = TokenSeq::new();
        match self {
            Prompt::HashIds { ids, block_size } => {
                let mut remaining = input_length;
                for &id in ids {
                    if remaining == 0 {
                        break;
                    }
                    let take = remaining.min(*block_size as usize);
                    seq.push_run(u64::from(id), take as u32);
                    remaining -= take;
                }
                debug_assert_eq!(remaining, 0, "prompt capacity is checked by the reader");
            }
            Prompt::Unique { key } => {
                seq.push_run(unique_prompt_token(*key), input_length as u32);
            }
        }
        seq
    }
}

/// Maps arbitrary 64-bit trace hash ids to dense u32 ids in first-seen order, so that prompts are
/// compact and ids compare by their full 64-bit value.
#[derive(Debug, Default)]
pub struct HashIdInterner {
    ids: std::collections::HashMap<u64, u32, BuildIdHasher>,
}

impl HashIdInterner {
    pub fn intern(&mut self, raw: u64) -> Option<u32> {
        use std::collections::hash_map::Entry;
        let next = self.ids.len();
        match self.ids.entry(raw) {
            Entry::Occupied(entry) => Some(*entry.get()),
            Entry::Vacant(entry) => Some(*entry.insert(u32::try_from(next).ok()?)),
        }
    }
}

/// A fast hasher for integer keys read from workload files (hash ids, line numbers). Loading is
/// dominated by hashing, and SipHash's flooding resistance buys nothing for a local file: a
/// hostile trace could at worst make its own load slower.
#[derive(Clone, Copy, Debug, Default)]
struct BuildIdHasher;

impl std::hash::BuildHasher for BuildIdHasher {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

/// Multiply-rotate combining (FxHash style) of the written words, then a full avalanche
/// (MurmurHash3's finaliser) so that the bucket bits depend on every input bit: ids that differ
/// only in their high bits (e.g. `k << 32`) must not share buckets.
#[derive(Clone, Copy, Debug)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_id_prompt_clips_the_last_block() {
        let p = Prompt::HashIds {
            ids: vec![0, 1, 2],
            block_size: 512,
        };
        let t = p.tokens(600);
        assert_eq!(t.len(), 600);
        assert_eq!(t.runs().len(), 2);
        assert_eq!(t.runs()[1].len, 88);
    }

    #[test]
    fn interner_is_first_seen_dense() {
        let mut i = HashIdInterner::default();
        assert_eq!(i.intern(4294967297), Some(0));
        assert_eq!(i.intern(1), Some(1));
        assert_eq!(i.intern(4294967297), Some(0));
    }
}
