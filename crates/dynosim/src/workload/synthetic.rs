//! The synthetic workload generator.
//!
//! Two shapes, chosen like the reference does:
//! * the simple path (one turn, no prefix sharing, no think time): `request_count` single-turn
//!   sessions whose prompts share nothing with any other request;
//! * the workload path (more turns, a shared-prefix ratio, prefix groups or an inter-turn delay):
//!   `request_count` sessions of `turns_per_session` turns whose prompts are hash ids at the
//!   engine block size, optionally opening with the prefix of a randomly drawn group.
//!
//! First-turn arrival times come from the arrival process (seeded Poisson or a fixed interval);
//! under closed-loop concurrency there is none and sessions carry no timestamp.
//! The random streams are rand 0.9 `StdRng`s seeded exactly as the reference seeds them, so
//! arrival times and group choices are bit-identical to it.
//!
//! Request lengths (dynosim only) are `input_tokens` and `output_tokens`, or, with a
//! [`LengthSpread`], drawn per request: request `r` (session index x turns per session + turn
//! index) draws its input and its output length each from a generator keyed by the length
//! seed, `r` and which length it is, so lengths need no table, do not depend on the order
//! sessions are generated in, and leave the arrival and group streams untouched. A drawn input
//! length is the whole prompt: a group's shared prefix keeps the length the ratio gives
//! `input_tokens`, and a prompt drawn shorter than it is that much of the prefix.
//!
//! INTERFACE
//! - [`generate`]: the workload of a spec, its sessions generated lazily ([`SyntheticSessions`]).
//! - [`request_lengths`]: the input and output length of request `r` under a spec.

use std::collections::HashMap;

use rand::rngs::{SmallRng, StdRng};
use rand::{Rng, SeedableRng};

use super::{HashIdArena, Prompt, Session, SessionId, Turn, Turns, Workload};
use crate::config::{ArrivalProcess, LengthSpread, SyntheticSpec};
use crate::error::{Error, Result};

/// The fixed seed of the reference's structure RNG (group choice), independent of the arrival seed.
const STRUCTURE_SEED: u64 = 42;
/// The most requests (sessions x turns) one synthetic workload may hold: beyond it the run's
/// request ids and the report's per-request latencies outgrow what one process should keep.
pub const MAX_SYNTHETIC_REQUESTS: usize = 1 << 32;
/// The most prompt blocks (turns x blocks per turn) one synthetic session may hold. A session's
/// turns are generated together when it is scheduled, so this bounds what one session takes
/// (4 bytes a block) instead of letting a huge `turns_per_session` abort on allocation.
pub const MAX_SESSION_BLOCKS: usize = 1 << 26;
/// The most turns one synthetic session may hold (each turn's record takes ~100 bytes).
pub const MAX_TURNS_PER_SESSION: usize = 1 << 20;
/// Tag of group-prefix hash ids: `(tag << 48) | (group << 32) | block index`.
const GROUP_PREFIX_TAG: u64 = 0xD00D;

/// Builds the workload a synthetic spec describes. Its sessions are not generated here: the
/// workload carries a [`SyntheticSessions`] that the driver draws from as it releases them, so
/// memory does not grow with `request_count`.
pub fn generate(spec: &SyntheticSpec) -> Result<Workload> {
    Ok(Workload {
        synthetic: Some(SyntheticSessions::new(spec)?),
        ..Workload::default()
    })
}

/// Whether the multi-turn/shared-prefix path is taken. Like the reference this looks only at
/// positive values, so a negative or NaN ratio or delay silently means the simple path.
pub fn uses_session_workload(spec: &SyntheticSpec) -> bool {
    spec.turns_per_session > 1
        || spec.shared_prefix_ratio > 0.0
        || spec.num_prefix_groups > 0
        || spec.inter_turn_delay_ms > 0.0
}

fn check_common(spec: &SyntheticSpec) -> Result<()> {
    if spec.input_tokens == 0 {
        return Err(Error::usage("input_tokens must be at least 1"));
    }
    if spec.output_tokens == 0 {
        return Err(Error::usage("output_tokens must be at least 1"));
    }
    if spec.request_count == 0 {
        return Err(Error::usage("request_count must be at least 1"));
    }
    Ok(())
}

/// The synthetic sessions, generated one at a time in index order from the same random
/// streams, in the same order of draws, as generating them all at once: session `i` is the
/// same whether it is the first or the millionth drawn. Cloning gives a generator that will
/// produce the same sessions again (used to check arrival times before a run).
#[derive(Clone, Debug)]
pub struct SyntheticSessions {
    arrivals: ArrivalClock,
    count: usize,
    next_index: usize,
    lengths: RequestLengths,
    shape: Shape,
}

/// The two shapes of synthetic sessions (see the module documentation).
#[derive(Clone, Debug)]
enum Shape {
    /// One turn whose prompt shares nothing.
    Independent,
    /// `turns` turns of hash-id prompts, optionally opening with a group prefix.
    Sessions {
        turns: usize,
        inter_turn_delay_ms: f64,
        block_size: u32,
        /// Blocks of a group's shared prefix (a prompt drawn shorter holds fewer).
        prefix_blocks: usize,
        /// `Some(groups)` when sessions draw a prefix group.
        groups: Option<usize>,
        structure_rng: Box<StdRng>,
        ids: DenseIds,
    },
}

impl SyntheticSessions {
    /// Checks the spec and prepares the generator; no session exists yet.
    pub fn new(spec: &SyntheticSpec) -> Result<Self> {
        let arrivals = ArrivalClock::new(spec.arrival_process)?;
        check_common(spec)?;
        let requests = spec
            .request_count
            .saturating_mul(spec.turns_per_session.max(1));
        if requests > MAX_SYNTHETIC_REQUESTS {
            return Err(Error::usage(format!(
                "request_count {}: {requests} requests, more than the {MAX_SYNTHETIC_REQUESTS} \
                 one synthetic run can hold (request_count x turns_per_session)",
                spec.request_count
            )));
        }
        let shape = if uses_session_workload(spec) {
            session_shape(spec)?
        } else {
            Shape::Independent
        };
        Ok(Self {
            arrivals,
            count: spec.request_count,
            next_index: 0,
            lengths: RequestLengths::of(spec),
            shape,
        })
    }

    /// Sessions in the workload (generated or not).
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Turns of every session.
    pub fn turns_per_session(&self) -> usize {
        match &self.shape {
            Shape::Independent => 1,
            Shape::Sessions { turns, .. } => *turns,
        }
    }

    /// Index of the next session [`Self::next_session`] returns.
    pub fn next_index(&self) -> usize {
        self.next_index
    }

    /// The first-turn arrival times of the sessions not generated yet, in index order (an
    /// independent stream: the generator itself is not advanced). `None` for each under
    /// closed-loop concurrency.
    pub fn remaining_arrivals(&self) -> impl Iterator<Item = Option<f64>> {
        let mut clock = self.arrivals.clone();
        (self.next_index..self.count).map(move |_| clock.next_arrival_ms())
    }

    /// The next session, or `None` once all `len()` have been generated.
    pub fn next_session(&mut self) -> Option<Session> {
        if self.next_index >= self.count {
            return None;
        }
        let index = self.next_index;
        self.next_index += 1;
        let first_timestamp_ms = self.arrivals.next_arrival_ms();
        // One allocation for the ids of all the session's prompts (none without ids).
        let mut arena = None;
        let lengths = &self.lengths;
        let turns: Turns = match &mut self.shape {
            Shape::Independent => {
                let (input_length, max_output_tokens) = lengths.request(index as u64);
                smallvec::smallvec![Turn {
                    input_length,
                    max_output_tokens,
                    delay_ms: 0.0,
                    prompt: Prompt::Unique { key: index as u64 },
                    priority: 0,
                    strict_priority: 0,
                    policy_class: None,
                }]
            }
            Shape::Sessions {
                turns,
                inter_turn_delay_ms,
                block_size,
                prefix_blocks,
                groups,
                structure_rng,
                ids,
            } => {
                let group = groups.map(|groups| structure_rng.random_range(0..groups) as u64);
                let arena = arena.insert(HashIdArena::default());
                let first_request = index as u64 * *turns as u64;
                (0..*turns)
                    .map(|turn_idx| {
                        let (input_length, max_output_tokens) =
                            lengths.request(first_request + turn_idx as u64);
                        let num_blocks = input_length.div_ceil(*block_size as usize);
                        // Every turn is a fresh prompt: it shares the group prefix, nothing
                        // with its session's earlier turns.
                        let mut prompt_ids = Vec::with_capacity(num_blocks);
                        if let Some(group) = group {
                            for block_idx in 0..(*prefix_blocks).min(num_blocks) {
                                let raw =
                                    (GROUP_PREFIX_TAG << 48) | (group << 32) | block_idx as u64;
                                prompt_ids.push(ids.group_block(raw));
                            }
                        }
                        while prompt_ids.len() < num_blocks {
                            prompt_ids.push(ids.fresh());
                        }
                        Turn {
                            input_length,
                            max_output_tokens,
                            delay_ms: if turn_idx == 0 {
                                0.0
                            } else {
                                *inter_turn_delay_ms
                            },
                            prompt: arena.push(prompt_ids, *block_size),
                            priority: 0,
                            strict_priority: 0,
                            policy_class: None,
                        }
                    })
                    .collect()
            }
        };
        let mut session = Session {
            id: SessionId::synthetic(index as u64),
            first_timestamp_ms,
            turns,
        };
        if let Some(arena) = arena {
            arena.share(std::slice::from_mut(&mut session));
        }
        Some(session)
    }
}

fn session_shape(spec: &SyntheticSpec) -> Result<Shape> {
    if spec.turns_per_session == 0 {
        return Err(Error::usage("turns_per_session must be at least 1"));
    }
    if !spec.inter_turn_delay_ms.is_finite() || spec.inter_turn_delay_ms < 0.0 {
        return Err(Error::usage(
            "inter_turn_delay_ms must be a finite non-negative number",
        ));
    }
    if !(0.0..=1.0).contains(&spec.shared_prefix_ratio) {
        return Err(Error::usage(format!(
            "shared_prefix_ratio must be between 0.0 and 1.0, got {}",
            spec.shared_prefix_ratio
        )));
    }

    // The reference never lets the hash block size drop to 0 here.
    let block_size = spec.engine_block_size.max(1);
    let num_blocks = spec.input_tokens.div_ceil(block_size as usize);
    let prefix_blocks =
        ((num_blocks as f64 * spec.shared_prefix_ratio).round() as usize).min(num_blocks);
    // The bounds below hold for the longest prompt a length spread can draw.
    let num_blocks = RequestLengths::of(spec)
        .longest_input()
        .div_ceil(block_size as usize);
    if spec.turns_per_session > MAX_TURNS_PER_SESSION {
        return Err(Error::usage(format!(
            "turns_per_session {}: more than the {MAX_TURNS_PER_SESSION} turns one synthetic \
             session can hold",
            spec.turns_per_session
        )));
    }
    let session_blocks = spec.turns_per_session.saturating_mul(num_blocks.max(1));
    if session_blocks > MAX_SESSION_BLOCKS {
        return Err(Error::usage(format!(
            "turns_per_session {} x {num_blocks} prompt blocks per turn: one synthetic session \
             would hold {session_blocks} prompt blocks, more than the {MAX_SESSION_BLOCKS} it \
             can hold (fewer turns or input tokens, or a larger block size)",
            spec.turns_per_session
        )));
    }
    let grouped = spec.num_prefix_groups > 0 && spec.shared_prefix_ratio > 0.0;
    let groups = grouped.then_some(spec.num_prefix_groups);

    // Every block outside a group prefix takes a new dense id, and each group's prefix takes
    // its ids on first use: checking the most ids the workload can take now means generation
    // itself cannot run out of them midway.
    let fresh_per_turn = num_blocks - if grouped { prefix_blocks } else { 0 };
    let group_ids = groups.map_or(0, |g| {
        g.min(spec.request_count).saturating_mul(prefix_blocks)
    });
    let most_ids = spec
        .request_count
        .saturating_mul(spec.turns_per_session)
        .saturating_mul(fresh_per_turn)
        .saturating_add(group_ids);
    if most_ids > u32::MAX as usize + 1 {
        return Err(Error::usage(format!(
            "request_count {}: the synthetic prompts would need {most_ids} distinct hash ids, \
             more than the {} a workload can hold (fewer requests, turns or input tokens, or a \
             larger block size)",
            spec.request_count,
            u32::MAX as u64 + 1
        )));
    }
    Ok(Shape::Sessions {
        turns: spec.turns_per_session,
        inter_turn_delay_ms: spec.inter_turn_delay_ms,
        block_size,
        prefix_blocks,
        groups,
        structure_rng: Box::new(StdRng::seed_from_u64(STRUCTURE_SEED)),
        ids: DenseIds::default(),
    })
}

/// The input and output length of request `request` (session index x turns per session +
/// turn index) of a synthetic spec.
pub fn request_lengths(spec: &SyntheticSpec, request: u64) -> (usize, usize) {
    RequestLengths::of(spec).request(request)
}

/// Draws of a normal length made before giving up on the truncation bounds; with the
/// stddevs `into_spec` accepts, a draw lands inside them with probability above 1/3, so
/// this many misses in a row do not happen in practice.
const MAX_NORMAL_DRAWS: usize = 1000;
/// Which of a request's two lengths a generator is keyed for.
const INPUT_LENGTH_STREAM: u64 = 0;
const OUTPUT_LENGTH_STREAM: u64 = 1;

/// The length of each request, fixed or drawn from a [`LengthSpread`].
#[derive(Clone, Copy, Debug)]
struct RequestLengths {
    input_tokens: usize,
    output_tokens: usize,
    spread: LengthSpread,
}

impl RequestLengths {
    fn of(spec: &SyntheticSpec) -> Self {
        Self {
            input_tokens: spec.input_tokens,
            output_tokens: spec.output_tokens,
            spread: spec.lengths,
        }
    }

    /// The longest prompt any request can have.
    fn longest_input(&self) -> usize {
        match self.spread {
            LengthSpread::Normal {
                input_stddev,
                max_input_tokens,
                ..
            } if input_stddev > 0.0 => max_input_tokens.max(self.input_tokens),
            _ => self.input_tokens,
        }
    }

    /// (input length, output length) of request `request`.
    fn request(&self, request: u64) -> (usize, usize) {
        match self.spread {
            LengthSpread::Fixed => (self.input_tokens, self.output_tokens),
            LengthSpread::Normal {
                input_stddev,
                output_stddev,
                max_input_tokens,
                seed,
            } => (
                normal_length(
                    self.input_tokens,
                    input_stddev,
                    max_input_tokens as f64,
                    || length_rng(seed, request, INPUT_LENGTH_STREAM),
                ),
                normal_length(self.output_tokens, output_stddev, f64::INFINITY, || {
                    length_rng(seed, request, OUTPUT_LENGTH_STREAM)
                }),
            ),
            LengthSpread::Uniform { range_ratio, seed } => (
                uniform_length(
                    self.input_tokens,
                    range_ratio,
                    &mut length_rng(seed, request, INPUT_LENGTH_STREAM),
                ),
                uniform_length(
                    self.output_tokens,
                    range_ratio,
                    &mut length_rng(seed, request, OUTPUT_LENGTH_STREAM),
                ),
            ),
        }
    }
}

/// The generator of one length of one request. SplitMix64's finalizer spreads the seed and the
/// request index over the key, so neighbouring seeds or requests give unrelated streams; the
/// generator is rand's small one (xoshiro256++ on 64-bit targets), cheap to key per request.
fn length_rng(seed: u64, request: u64, stream: u64) -> SmallRng {
    let key = splitmix64(splitmix64(seed) ^ request.wrapping_mul(2).wrapping_add(stream));
    SmallRng::seed_from_u64(key)
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// AIPerf's positive normal integer: with no spread the length itself; otherwise a normal
/// draw around it, drawn again while outside `[0, max]`, rounded up, at least 1 (after
/// [`MAX_NORMAL_DRAWS`] misses, the length clamped into the bounds, as AIPerf falls back).
fn normal_length(mean: usize, stddev: f64, max: f64, rng: impl FnOnce() -> SmallRng) -> usize {
    if stddev <= 0.0 {
        return mean.max(1);
    }
    let mut rng = rng();
    let mean = mean as f64;
    for _ in 0..MAX_NORMAL_DRAWS {
        let draw = mean + stddev * standard_normal(&mut rng);
        if (0.0..=max).contains(&draw) {
            // `as` saturates: an output drawn past usize::MAX (a huge stddev) is the most there is.
            return (draw.ceil() as usize).max(1);
        }
    }
    (mean.clamp(0.0, max).ceil() as usize).max(1)
}

/// One standard normal draw (Box-Muller; the uniform in (0, 1] keeps the logarithm finite).
fn standard_normal(rng: &mut SmallRng) -> f64 {
    let radius_uniform = 1.0 - rng.random::<f64>();
    let angle_uniform = rng.random::<f64>();
    (-2.0 * radius_uniform.ln()).sqrt() * (std::f64::consts::TAU * angle_uniform).cos()
}

/// vLLM's random-dataset length: uniform over the integers in `[floor(R * L), L]` (at least 1:
/// a request of no tokens is not one the simulator can serve).
fn uniform_length(length: usize, range_ratio: f64, rng: &mut SmallRng) -> usize {
    let lowest = ((range_ratio * length as f64).floor() as usize).clamp(1, length.max(1));
    if lowest >= length {
        return length.max(1);
    }
    rng.random_range(lowest..=length)
}

/// Dense prompt ids in first-use order: group-prefix blocks are remembered (they recur), every
/// other block is new by construction, so it just takes the next id. How many ids a workload
/// takes is checked before generation starts (`session_shape`).
#[derive(Clone, Debug, Default)]
struct DenseIds {
    group_blocks: HashMap<u64, u32>,
    next: u32,
}

impl DenseIds {
    fn fresh(&mut self) -> u32 {
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        id
    }

    fn group_block(&mut self, raw: u64) -> u32 {
        if let Some(&id) = self.group_blocks.get(&raw) {
            return id;
        }
        let id = self.fresh();
        self.group_blocks.insert(raw, id);
        id
    }
}

/// First-turn arrival times, in order: the first at 0, then one gap per further session.
#[derive(Clone, Debug)]
enum ArrivalClock {
    /// Closed loop: no timestamps.
    None,
    /// All at 0 (an interval of 0 ms).
    Burst,
    /// Fixed gap, accumulated as the reference accumulates it.
    Fixed { gap_ms: f64, next_ms: Option<f64> },
    /// Exponential gaps of mean `mean_gap_ms`.
    Poisson {
        mean_gap_ms: f64,
        rng: Box<StdRng>,
        next_ms: Option<f64>,
    },
}

impl ArrivalClock {
    fn new(process: Option<ArrivalProcess>) -> Result<Self> {
        match process {
            None => Ok(Self::None),
            Some(ArrivalProcess::Poisson { rate, seed }) => {
                if !rate.is_finite() || rate <= 0.0 {
                    return Err(Error::usage(format!(
                        "request_rate must be a finite positive number, got {rate}"
                    )));
                }
                Ok(Self::Poisson {
                    mean_gap_ms: 1000.0 / rate,
                    rng: Box::new(StdRng::seed_from_u64(seed)),
                    next_ms: None,
                })
            }
            Some(ArrivalProcess::Interval { interval_ms }) => {
                if !interval_ms.is_finite() || interval_ms < 0.0 {
                    return Err(Error::usage(format!(
                        "arrival_interval_ms must be a finite non-negative number, got {interval_ms}"
                    )));
                }
                if interval_ms == 0.0 {
                    return Ok(Self::Burst);
                }
                // The reference turns the interval into a rate and the rate back into a gap;
                // doing the same keeps the times bit-identical (and rejects sub-denormal
                // intervals whose rate overflows, as it does).
                let rate = 1000.0 / interval_ms;
                if !rate.is_finite() || rate <= 0.0 {
                    return Err(Error::usage(format!(
                        "qps must be a finite positive number, got {rate}"
                    )));
                }
                Ok(Self::Fixed {
                    gap_ms: 1000.0 / rate,
                    next_ms: None,
                })
            }
        }
    }

    fn next_arrival_ms(&mut self) -> Option<f64> {
        match self {
            Self::None => None,
            Self::Burst => Some(0.0),
            Self::Fixed { gap_ms, next_ms } => {
                let t = next_ms.map_or(0.0, |previous| previous + *gap_ms);
                *next_ms = Some(t);
                Some(t)
            }
            Self::Poisson {
                mean_gap_ms,
                rng,
                next_ms,
            } => {
                let t = match *next_ms {
                    None => 0.0,
                    Some(previous) => previous + exponential_gap_ms(*mean_gap_ms, rng),
                };
                *next_ms = Some(t);
                Some(t)
            }
        }
    }
}

/// Inverse-CDF exponential sample; `1 - U` keeps the logarithm's argument in (0, 1].
fn exponential_gap_ms(mean_ms: f64, rng: &mut StdRng) -> f64 {
    if mean_ms == 0.0 {
        return 0.0;
    }
    let u = (1.0 - rng.random::<f64>()).clamp(f64::MIN_POSITIVE, 1.0);
    -mean_ms * u.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole workload, every session drawn from the generator.
    fn generate_all(spec: &SyntheticSpec) -> Result<Workload> {
        let mut sessions = generate(spec)?.synthetic.expect("a synthetic workload");
        Ok(Workload {
            sessions: std::iter::from_fn(|| sessions.next_session()).collect(),
            ..Workload::default()
        })
    }

    fn spec(arrival_process: Option<ArrivalProcess>) -> SyntheticSpec {
        SyntheticSpec {
            input_tokens: 100,
            output_tokens: 10,
            request_count: 8,
            arrival_process,
            turns_per_session: 1,
            shared_prefix_ratio: 0.0,
            num_prefix_groups: 0,
            inter_turn_delay_ms: 0.0,
            engine_block_size: 64,
            lengths: Default::default(),
        }
    }

    fn starts(w: &Workload) -> Vec<Option<f64>> {
        w.sessions.iter().map(|s| s.first_timestamp_ms).collect()
    }

    fn rounded(w: &Workload) -> Vec<f64> {
        w.sessions
            .iter()
            .map(|s| (s.first_timestamp_ms.unwrap() * 1e6).round() / 1e6)
            .collect()
    }

    fn ids(turn: &Turn) -> &[u32] {
        turn.prompt.ids().expect("expected hash ids")
    }

    fn usage_error(spec: &SyntheticSpec) -> String {
        let e = generate(spec).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        e.to_string()
    }

    #[test]
    fn poisson_arrivals_match_the_reference_vectors() {
        let w = generate_all(&spec(Some(ArrivalProcess::Poisson {
            rate: 10.0,
            seed: 42,
        })))
        .unwrap();
        assert_eq!(
            rounded(&w),
            [
                0.0, 74.772462, 153.019540, 254.207537, 306.278595, 309.773234, 363.380201,
                497.101835
            ]
        );
        let w = generate_all(&spec(Some(ArrivalProcess::Poisson {
            rate: 10.0,
            seed: 7,
        })))
        .unwrap();
        assert_eq!(
            rounded(&w)[..5],
            [0.0, 3.078644, 39.763623, 55.153613, 133.355209]
        );
        // The workload path draws arrivals from the same stream.
        let mut multi = spec(Some(ArrivalProcess::Poisson {
            rate: 10.0,
            seed: 42,
        }));
        multi.turns_per_session = 2;
        assert_eq!(
            rounded(&generate_all(&multi).unwrap())[..3],
            [0.0, 74.772462, 153.019540]
        );
    }

    #[test]
    fn interval_burst_and_closed_loop_arrivals() {
        let w = generate_all(&spec(Some(ArrivalProcess::Interval { interval_ms: 25.0 }))).unwrap();
        assert_eq!(
            rounded(&w),
            [0.0, 25.0, 50.0, 75.0, 100.0, 125.0, 150.0, 175.0]
        );
        let w = generate_all(&spec(Some(ArrivalProcess::Interval { interval_ms: 0.0 }))).unwrap();
        assert_eq!(rounded(&w), [0.0; 8]);
        let w = generate_all(&spec(None)).unwrap();
        assert_eq!(starts(&w), [None; 8]);
    }

    #[test]
    fn simple_path_prompts_share_nothing() {
        let mut s = spec(None);
        s.turns_per_session = 0; // silently one turn on the simple path, as in the reference
        s.shared_prefix_ratio = -0.5; // not positive: ignored, as in the reference
        let w = generate_all(&s).unwrap();
        assert_eq!(w.sessions.len(), 8);
        for (i, session) in w.sessions.iter().enumerate() {
            assert_eq!(session.turns.len(), 1);
            let turn = &session.turns[0];
            assert!(matches!(turn.prompt, Prompt::Unique { key } if key == i as u64));
            assert_eq!(
                (turn.input_length, turn.max_output_tokens, turn.delay_ms),
                (100, 10, 0.0)
            );
        }
    }

    /// Group of each session, recovered from which sessions share their first prompt id.
    fn group_partition(groups: usize, sessions: usize) -> Vec<usize> {
        let mut s = spec(None);
        s.request_count = sessions;
        s.num_prefix_groups = groups;
        s.shared_prefix_ratio = 1.0;
        let w = generate_all(&s).unwrap();
        let mut firsts: Vec<u32> = Vec::new();
        w.sessions
            .iter()
            .map(|session| {
                let first = ids(&session.turns[0])[0];
                firsts.iter().position(|&f| f == first).unwrap_or_else(|| {
                    firsts.push(first);
                    firsts.len() - 1
                })
            })
            .collect()
    }

    /// Relabels a group sequence by first appearance, to compare partitions.
    fn canonical(groups: &[usize]) -> Vec<usize> {
        let mut seen: Vec<usize> = Vec::new();
        groups
            .iter()
            .map(|g| {
                seen.iter().position(|s| s == g).unwrap_or_else(|| {
                    seen.push(*g);
                    seen.len() - 1
                })
            })
            .collect()
    }

    #[test]
    fn group_choices_match_the_reference_vectors() {
        let vectors: [(usize, [usize; 10]); 4] = [
            (2, [0, 1, 0, 1, 1, 1, 1, 0, 1, 0]),
            (3, [0, 1, 0, 1, 2, 1, 2, 1, 2, 0]),
            (4, [0, 2, 0, 2, 3, 2, 3, 1, 3, 0]),
            (8, [1, 4, 1, 4, 6, 5, 7, 3, 7, 0]),
        ];
        for (groups, expected) in vectors {
            let mut rng = StdRng::seed_from_u64(STRUCTURE_SEED);
            let drawn: Vec<usize> = (0..10).map(|_| rng.random_range(0..groups)).collect();
            assert_eq!(drawn, expected, "G={groups}");
            assert_eq!(
                group_partition(groups, 10),
                canonical(&expected),
                "G={groups}"
            );
        }
    }

    #[test]
    fn workload_path_prefixes_and_turns() {
        // 1 session, 2 turns, G=2, ratio 0.5, 512 tokens at block 64: 8 blocks, 4 shared.
        let mut s = spec(Some(ArrivalProcess::Interval { interval_ms: 10.0 }));
        s.request_count = 3;
        s.input_tokens = 512;
        s.turns_per_session = 2;
        s.num_prefix_groups = 2;
        s.shared_prefix_ratio = 0.5;
        s.inter_turn_delay_ms = 250.0;
        let w = generate_all(&s).unwrap();
        let t = |i: usize, k: usize| ids(&w.sessions[i].turns[k]).to_vec();
        for session in &w.sessions {
            assert_eq!(session.turns.len(), 2);
            assert_eq!(session.turns[0].delay_ms, 0.0);
            assert_eq!(session.turns[1].delay_ms, 250.0);
            for turn in &session.turns {
                assert_eq!(ids(turn).len(), 8);
                assert!(matches!(
                    &turn.prompt,
                    Prompt::HashIds(prompt) if prompt.block_size() == 64
                ));
                assert_eq!(turn.prompt.tokens(turn.input_length).len(), 512);
            }
        }
        // Groups of seed 42 with G=2: 0, 1, 0. Turns of a session share only the group prefix.
        assert_eq!(t(0, 0)[..4], t(0, 1)[..4]);
        assert_eq!(t(0, 0)[..4], t(2, 0)[..4]);
        assert_ne!(t(0, 0)[0], t(1, 0)[0]);
        assert_ne!(t(0, 0)[4..], t(0, 1)[4..]);
        let mut all: Vec<u32> = w
            .sessions
            .iter()
            .flat_map(|s| &s.turns)
            .flat_map(|t| ids(t)[4..].to_vec())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "non-prefix blocks are unique");

        // A ratio without groups (or groups without a ratio) shares nothing.
        let mut s = spec(None);
        s.input_tokens = 130; // 3 blocks of 64
        s.shared_prefix_ratio = 0.5;
        let w = generate_all(&s).unwrap();
        assert_eq!(ids(&w.sessions[0].turns[0]), &[0, 1, 2]);
        assert_eq!(ids(&w.sessions[1].turns[0]), &[3, 4, 5]);
        assert_eq!(starts(&w), [None; 8]);
    }

    #[test]
    fn validation_messages() {
        let mut s = spec(None);
        s.input_tokens = 0;
        assert_eq!(usage_error(&s), "input_tokens must be at least 1");
        let mut s = spec(None);
        s.output_tokens = 0;
        assert_eq!(usage_error(&s), "output_tokens must be at least 1");
        let mut s = spec(None);
        s.request_count = 0;
        assert_eq!(usage_error(&s), "request_count must be at least 1");
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let s = spec(Some(ArrivalProcess::Poisson { rate, seed: 1 }));
            assert_eq!(
                usage_error(&s),
                format!("request_rate must be a finite positive number, got {rate}")
            );
        }
        for interval_ms in [-1.0, f64::NAN, f64::INFINITY] {
            let s = spec(Some(ArrivalProcess::Interval { interval_ms }));
            assert_eq!(
                usage_error(&s),
                format!(
                    "arrival_interval_ms must be a finite non-negative number, got {interval_ms}"
                )
            );
        }
        let mut s = spec(None);
        s.turns_per_session = 2;
        s.inter_turn_delay_ms = -1.0;
        assert_eq!(
            usage_error(&s),
            "inter_turn_delay_ms must be a finite non-negative number"
        );
        let mut s = spec(None);
        s.inter_turn_delay_ms = f64::INFINITY;
        assert_eq!(
            usage_error(&s),
            "inter_turn_delay_ms must be a finite non-negative number"
        );
        let mut s = spec(None);
        s.shared_prefix_ratio = 5.0;
        assert_eq!(
            usage_error(&s),
            "shared_prefix_ratio must be between 0.0 and 1.0, got 5"
        );
        let mut s = spec(None);
        s.num_prefix_groups = 2;
        s.turns_per_session = 0;
        assert_eq!(usage_error(&s), "turns_per_session must be at least 1");
    }

    #[test]
    fn a_session_too_large_to_generate_is_a_usage_error_not_an_abort() {
        // Found by the argument fuzzer: one session of a billion turns asked for 88 GB at once.
        let mut s = spec(None);
        s.request_count = 1;
        s.turns_per_session = 1_000_000_000;
        assert_eq!(
            usage_error(&s),
            "turns_per_session 1000000000: more than the 1048576 turns one synthetic session can hold"
        );
        s.turns_per_session = MAX_TURNS_PER_SESSION;
        s.input_tokens = 65 * s.engine_block_size as usize;
        assert!(usage_error(&s).contains("more than the 67108864 it can hold"));
        s.turns_per_session = 1000;
        assert!(generate(&s).is_ok());
    }
}
