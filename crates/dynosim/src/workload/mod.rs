//! The workload model: sessions of turns, whatever format they were read from.
//!
//! Readers (`mooncake`, `agentic`, `applied_compute`, `dynamo_trace`, the synthetic generator)
//! all produce a [`Workload`]. Times are raw: first-turn timestamps as written in the trace (ms)
//! and inter-turn delays as written. How arrivals are derived from them (normalisation,
//! speed-up, closed-loop concurrency, dependency release) is the simulator driver's job
//! (`sim::driver`), because it depends on the run mode.
//!
//! Prompts stay compact (interned hash ids, not tokens) until a request is dispatched. A loaded
//! trace is kept small because its rows are many: a session's single turn is stored inline
//! ([`Turns`]), every prompt's ids are a range of one arena the trace's prompts share
//! ([`HashIdArena`]), and made-up session names are numbers until shown ([`SessionId`]).

use std::sync::Arc;

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
    pub id: SessionId,
    /// The first turn's `timestamp` in ms as written (not normalised), if present.
    pub first_timestamp_ms: Option<f64>,
    /// Most sessions of a trace have one turn: it is stored inline, without an allocation.
    pub turns: Turns,
}

/// A session's turns (one inline, more on the heap).
pub type Turns = smallvec::SmallVec<[Turn; 1]>;

/// A session's name. The names a reader makes up for rows without one (`request_<line>`), and
/// the synthetic generator's (`session_<index>`), are kept as numbers and spelled out only when
/// shown, so a trace of single-turn rows or a generated session costs no string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SessionId {
    /// `request_<line>`: the 1-based physical line of the row that started the session. With
    /// the top bit set ([`SessionId::synthetic`]), `session_<index>` instead: the synthetic
    /// generator's session `index` (lines never reach that bit).
    Request(u64),
    /// A name as written in the trace (or made up by a reader in another shape). (A second
    /// numbered shape would cost this type 8 more bytes: only one fits beside the pointer.)
    Named(Box<str>),
}

/// The bit of a [`SessionId::Request`] number that makes it a synthetic session's.
const SYNTHETIC_SESSION: u64 = 1 << 63;

impl SessionId {
    /// `session_<index>`, the synthetic generator's name of its session `index`, kept as the
    /// number (a generated session costs no string).
    pub fn synthetic(index: u64) -> Self {
        debug_assert!(index < SYNTHETIC_SESSION);
        SessionId::Request(SYNTHETIC_SESSION | index)
    }

    /// The prefix and number a numbered name is spelled with.
    fn numbered(number: u64) -> (&'static str, u64) {
        if number & SYNTHETIC_SESSION != 0 {
            ("session_", number & !SYNTHETIC_SESSION)
        } else {
            ("request_", number)
        }
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionId::Request(number) => {
                let (prefix, number) = Self::numbered(*number);
                write!(f, "{prefix}{number}")
            }
            SessionId::Named(name) => f.write_str(name),
        }
    }
}

impl From<String> for SessionId {
    fn from(name: String) -> Self {
        SessionId::Named(name.into_boxed_str())
    }
}

impl From<&str> for SessionId {
    fn from(name: &str) -> Self {
        SessionId::Named(name.into())
    }
}

impl PartialEq<str> for SessionId {
    fn eq(&self, other: &str) -> bool {
        match self {
            SessionId::Named(name) => **name == *other,
            SessionId::Request(number) => {
                let (prefix, number) = Self::numbered(*number);
                other
                    .strip_prefix(prefix)
                    .is_some_and(|digits| digits == number.to_string())
            }
        }
    }
}

impl PartialEq<&str> for SessionId {
    fn eq(&self, other: &&str) -> bool {
        self == *other
    }
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
    /// Shared between the rows that name the same class.
    pub policy_class: Option<Arc<str>>,
}

/// How a turn's prompt tokens are synthesised.
#[derive(Clone, Debug)]
pub enum Prompt {
    /// Trace hash ids (interned to dense u32 in first-seen order): id `k` stands for `block_size`
    /// copies of token `k`; the prompt is the first `input_length` of those tokens.
    HashIds(HashIdPrompt),
    /// Content that no other request shares (the synthetic workload without sessions).
    Unique { key: u64 },
}

/// A hash-id prompt: its ids are a range of an arena that every prompt of a trace shares (one
/// allocation per trace instead of one per row), and the tokens each id stands for.
#[derive(Clone)]
pub struct HashIdPrompt {
    arena: Arc<Vec<u32>>,
    start: usize,
    len: u32,
    block_size: u32,
}

impl HashIdPrompt {
    /// The interned hash ids, in prompt order.
    pub fn ids(&self) -> &[u32] {
        &self.arena[self.start..self.start + self.len as usize]
    }

    /// Tokens per hash id.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }
}

impl std::fmt::Debug for HashIdPrompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashIdPrompt")
            .field("ids", &self.ids())
            .field("block_size", &self.block_size)
            .finish()
    }
}

impl Prompt {
    /// A prompt of its own hash ids (its own arena): for generated workloads and tests. Trace
    /// readers share one arena through [`HashIdArena`].
    pub fn hash_ids(ids: Vec<u32>, block_size: u32) -> Self {
        let len = u32::try_from(ids.len()).expect("a prompt's hash ids fit in u32");
        Prompt::HashIds(HashIdPrompt {
            arena: Arc::new(ids),
            start: 0,
            len,
            block_size,
        })
    }

    /// The hash ids of a hash-id prompt.
    pub fn ids(&self) -> Option<&[u32]> {
        match self {
            Prompt::HashIds(prompt) => Some(prompt.ids()),
            Prompt::Unique { .. } => None,
        }
    }

    /// The prompt's `input_length` tokens.
    pub fn tokens(&self, input_length: usize) -> TokenSeq {
        match self {
            Prompt::HashIds(prompt) => {
                let block_size = prompt.block_size as usize;
                // One run per id at most (equal neighbours merge), and one for the tokens
                // the request will generate (which would otherwise regrow all three of the
                // sequence's vectors at its first output token).
                let ids = prompt
                    .ids()
                    .len()
                    .min(input_length.div_ceil(block_size.max(1)));
                let mut seq = TokenSeq::with_capacity(ids + 1);
                let mut remaining = input_length;
                for &id in prompt.ids() {
                    if remaining == 0 {
                        break;
                    }
                    let take = remaining.min(block_size);
                    seq.push_run(u64::from(id), take as u32);
                    remaining -= take;
                }
                debug_assert_eq!(remaining, 0, "prompt capacity is checked by the reader");
                seq
            }
            Prompt::Unique { key } => {
                // The prompt's run and the generated tokens' run.
                let mut seq = TokenSeq::with_capacity(2);
                seq.push_run(unique_prompt_token(*key), input_length as u32);
                seq
            }
        }
    }
}

/// The hash ids of a trace's prompts while it is read: every row's ids go into one growing
/// vector, and [`HashIdArena::share`] hands the finished vector to every prompt made from it.
/// Prompts made by [`HashIdArena::push`] are incomplete until then (they read as empty).
#[derive(Debug)]
pub struct HashIdArena {
    ids: Vec<u32>,
    /// The empty arena incomplete prompts point to (one allocation, shared).
    pending: Arc<Vec<u32>>,
}

impl Default for HashIdArena {
    fn default() -> Self {
        Self {
            ids: Vec::new(),
            pending: Arc::new(Vec::new()),
        }
    }
}

impl HashIdArena {
    /// Appends one prompt's ids; the prompt becomes usable once the arena is shared.
    pub fn push(&mut self, ids: impl IntoIterator<Item = u32>, block_size: u32) -> Prompt {
        let start = self.ids.len();
        self.ids.extend(ids);
        let len = u32::try_from(self.ids.len() - start).expect("a row's hash ids fit in u32");
        Prompt::HashIds(HashIdPrompt {
            arena: Arc::clone(&self.pending),
            start,
            len,
            block_size,
        })
    }

    /// Points every hash-id prompt of `sessions` made by [`HashIdArena::push`] at the
    /// finished arena.
    pub fn share(mut self, sessions: &mut [Session]) {
        self.ids.shrink_to_fit();
        let arena = Arc::new(self.ids);
        for turn in sessions.iter_mut().flat_map(|s| s.turns.iter_mut()) {
            if let Prompt::HashIds(prompt) = &mut turn.prompt {
                if Arc::ptr_eq(&prompt.arena, &self.pending) {
                    prompt.arena = Arc::clone(&arena);
                }
            }
        }
    }
}

/// Maps arbitrary 64-bit trace hash ids to dense u32 ids in first-seen order, so that prompts are
/// compact and ids compare by their full 64-bit value.
///
/// Traces usually number their blocks 0, 1, 2, ...: raw ids below a bound that grows with the
/// ids seen (so that the table stays a small multiple of them) are looked up in a table indexed
/// by the raw id, the others in a hash map. Which of the two holds an id changes nothing of
/// the ids given out.
#[derive(Debug, Default)]
pub struct HashIdInterner {
    /// `direct[raw]` is the id of raw id `raw`, or [`UNSEEN`].
    direct: Vec<u32>,
    /// Ids of raw ids at or above `direct.len()`.
    others: std::collections::HashMap<u64, u32, BuildIdHasher>,
    len: usize,
}

/// A raw id not seen yet, in [`HashIdInterner`]'s direct table (the id `u32::MAX` itself, the
/// last one there is, is kept in the map).
const UNSEEN: u32 = u32::MAX;
/// The direct table covers raw ids below about twice the ids seen, plus this.
const DIRECT_SLACK: usize = 1 << 12;

impl HashIdInterner {
    #[inline]
    pub fn intern(&mut self, raw: u64) -> Option<u32> {
        if let Some(slot) = usize::try_from(raw)
            .ok()
            .and_then(|i| self.direct.get_mut(i))
        {
            if *slot != UNSEEN {
                return Some(*slot);
            }
            // New and inside the table (no id below the table's end is in the map): the next
            // id, unless that would be UNSEEN itself, which only the map can hold.
            if let Ok(id) = u32::try_from(self.len) {
                if id != UNSEEN {
                    *slot = id;
                    self.len += 1;
                    return Some(id);
                }
            }
        }
        self.intern_new_or_other(raw)
    }

    /// A raw id outside the direct table, or not seen yet.
    fn intern_new_or_other(&mut self, raw: u64) -> Option<u32> {
        use std::collections::hash_map::Entry;
        let index = usize::try_from(raw).ok();
        if let Some(index) = index {
            let bound = 2 * self.len + DIRECT_SLACK;
            if index >= self.direct.len() && index < bound {
                self.grow_direct(bound);
                // It may have been in the map.
                if self.direct[index] != UNSEEN {
                    return Some(self.direct[index]);
                }
            }
        }
        let next = u32::try_from(self.len).ok();
        match (index, next) {
            (Some(index), Some(id)) if index < self.direct.len() && id != UNSEEN => {
                // Not seen yet: a seen id in the table returned in `intern`.
                self.direct[index] = id;
                self.len += 1;
                Some(id)
            }
            _ => match self.others.entry(raw) {
                Entry::Occupied(entry) => Some(*entry.get()),
                Entry::Vacant(entry) => {
                    let id = next?;
                    entry.insert(id);
                    self.len += 1;
                    Some(id)
                }
            },
        }
    }

    /// Grows the direct table to `len` raw ids, moving the map's ids below it into the table.
    #[cold]
    fn grow_direct(&mut self, len: usize) {
        self.direct.resize(len, UNSEEN);
        let direct = &mut self.direct;
        self.others.retain(|&raw, &mut id| {
            let index = raw as usize;
            let moved = id != UNSEEN && index < direct.len();
            if moved {
                direct[index] = id;
            }
            !moved
        });
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
        let p = Prompt::hash_ids(vec![0, 1, 2], 512);
        let t = p.tokens(600);
        assert_eq!(t.len(), 600);
        assert_eq!(t.runs().len(), 2);
        assert_eq!(t.runs()[1].len, 88);
    }

    /// A loaded trace costs its sessions (a one-turn session holds its turn inline) plus 4
    /// bytes per hash id; these sizes are what bench/memory.sh's trace figure rests on.
    #[test]
    fn a_one_turn_session_is_compact() {
        use std::mem::size_of;
        assert_eq!(size_of::<SessionId>(), 16);
        assert_eq!(size_of::<Prompt>(), 24);
        assert_eq!(size_of::<Turn>(), 72);
        assert_eq!(size_of::<Session>(), 112);
    }

    #[test]
    fn session_ids_read_as_their_names() {
        assert_eq!(SessionId::Request(12).to_string(), "request_12");
        assert_eq!(SessionId::from("x").to_string(), "x");
        assert_eq!(SessionId::Request(12), "request_12");
        assert_ne!(SessionId::Request(12), "request_012");
        assert_eq!(SessionId::synthetic(7).to_string(), "session_7");
        assert_eq!(SessionId::synthetic(7), "session_7");
        assert_ne!(SessionId::synthetic(7), "request_7");
        assert_ne!(SessionId::synthetic(7), SessionId::Request(7));
        assert_ne!(
            SessionId::Named("request_12".into()),
            SessionId::Request(12)
        );
    }

    #[test]
    fn arena_prompts_read_their_own_ids_once_shared() {
        let mut arena = HashIdArena::default();
        let mut sessions: Vec<Session> = [vec![3, 4], vec![], vec![5]]
            .into_iter()
            .enumerate()
            .map(|(line, ids)| Session {
                id: SessionId::Request(line as u64 + 1),
                first_timestamp_ms: None,
                turns: [Turn {
                    input_length: 1,
                    max_output_tokens: 1,
                    delay_ms: 0.0,
                    prompt: arena.push(ids, 16),
                    priority: 0,
                    strict_priority: 0,
                    policy_class: None,
                }]
                .into(),
            })
            .collect();
        arena.share(&mut sessions);
        let ids: Vec<&[u32]> = sessions
            .iter()
            .map(|s| s.turns[0].prompt.ids().unwrap())
            .collect();
        assert_eq!(ids, [&[3, 4][..], &[], &[5]]);
    }

    #[test]
    fn interner_is_first_seen_dense() {
        let mut i = HashIdInterner::default();
        assert_eq!(i.intern(4294967297), Some(0));
        assert_eq!(i.intern(1), Some(1));
        assert_eq!(i.intern(4294967297), Some(0));
    }

    proptest::proptest! {
        /// Small and large raw ids, in any order (small ones seen in the map before the direct
        /// table grows over them), get the ids of a plain first-seen numbering.
        #[test]
        fn interner_numbers_ids_in_first_seen_order(
            raws in proptest::collection::vec(
                proptest::prop_oneof![
                    0u64..64,
                    0u64..20_000,
                    proptest::num::u64::ANY,
                ],
                0..3000,
            )
        ) {
            let mut interner = HashIdInterner::default();
            let mut expected = std::collections::HashMap::new();
            for raw in raws {
                let next = expected.len() as u32;
                let want = *expected.entry(raw).or_insert(next);
                proptest::prop_assert_eq!(interner.intern(raw), Some(want), "raw {}", raw);
            }
        }
    }
}
