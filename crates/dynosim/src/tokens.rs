//! Token sequences stored as runs, and the identities of their blocks.
//!
//! A trace prompt is `input_length` tokens where each trace `hash_id` stands for up to
//! `trace_block_size` copies of one token. Storing one integer per token would cost gigabytes on
//! the public traces, so a sequence is kept run-length encoded. A run is either copies of one
//! token or, for [`generated_token`]s, the tokens one request generated at consecutive indices
//! (a request's output is one run, however long). Every token has at most one successor a run
//! may continue with (itself, or the same request's next generated token), and a run always
//! continues when the next token is that successor, so the encoding is canonical: equal token
//! sequences have equal runs, however they were pushed (one token at a time or in runs).
//!
//! **Block identity.** A block of a paged KV cache is identified by every token up to its end:
//! two blocks are interchangeable exactly when the sequences through them are equal. The prefix
//! through a block's end is, canonically, the full runs before the run holding its last token,
//! then that run's first token, then how far into the run the block ends. So each run gets a *base*
//! hash (of all runs before it, and its first token), computed once when the run is pushed, and
//! block `i` is identified by `(base of the run holding its last token, i)`: the index fixes where
//! the block ends (in a run of generated tokens, also which token it ends with). So a block ending
//! in generated tokens costs no more to name than any other. Consecutive blocks ending in the same run share a base, which lets caches and
//! routers keep a run of blocks as one entry ([`BlockRun`]) instead of one per block; where a
//! single 64-bit key per block is wanted, [`block_key`] combines the pair.
//!
//! Token-id spaces never overlap: interned trace ids are below 2^32, request-unique prompt
//! content and generated tokens carry a tag in the top bits (see [`unique_prompt_token`] and
//! [`generated_token`]).

/// One run of `len` tokens from `token` on: `len` copies of `token`, or, when `token` is a
/// [`generated_token`], the `len` tokens its request generated from that index on
/// (`token`, `token + 1`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub token: u64,
    pub len: u32,
}

/// A token sequence as canonical runs, with prefix sums for random access by position.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenSeq {
    runs: Vec<Run>,
    /// `ends[i]` = number of tokens up to and including run `i`.
    ends: Vec<usize>,
    /// `bases[i]` = hash of runs `0..i` and the token of run `i` (a function of `runs`).
    bases: Vec<u64>,
}

/// `count` consecutive blocks that end in the same token run: they share `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRun {
    pub base: u64,
    pub count: u32,
}

const TAG_UNIQUE_PROMPT: u64 = 1 << 62;
const TAG_GENERATED: u64 = 2 << 62;

/// The token of a prompt whose content no other request shares (synthetic simple path): request
/// `key` is `input_tokens` copies of this token. Block identities keep its blocks distinct.
pub fn unique_prompt_token(key: u64) -> u64 {
    TAG_UNIQUE_PROMPT | (key & (TAG_UNIQUE_PROMPT - 1))
}

/// The `index`-th token generated for request `request`: unique per request and position, as the
/// random output tokens of the reference are for all practical purposes.
pub fn generated_token(request: u64, index: u64) -> u64 {
    TAG_GENERATED | ((request & 0x3FFF_FFFF) << 32) | (index & INDEX_MASK)
}

/// The index bits of a generated token.
const INDEX_MASK: u64 = 0xFFFF_FFFF;

/// Whether `token` continues a run of `len` tokens from `first` (see [`Run`]): it is a copy of
/// `first`, or, in a run of generated tokens, the same request's next one. (Equal upper halves
/// mean the same tag and request; a run of generated tokens never passes the last index.)
#[inline(always)]
fn continues(first: u64, len: u64, token: u64) -> bool {
    if is_generated(first) {
        token == first.wrapping_add(len) && token >> 32 == first >> 32
    } else {
        token == first
    }
}

#[inline(always)]
fn is_generated(token: u64) -> bool {
    token >> 62 == TAG_GENERATED >> 62
}

/// Splits the generated tokens `generated_token(request, first..first + count)` into runs that
/// do not pass the last index (where indices wrap), calling `push(token, len)` for each.
#[inline(always)]
fn generated_runs(request: u64, first: u64, count: u64, mut push: impl FnMut(u64, u64)) {
    let mut index = first & INDEX_MASK;
    let mut left = count;
    while left > 0 {
        let take = left.min((INDEX_MASK + 1) - index);
        push(generated_token(request, index), take);
        index = (index + take) & INDEX_MASK;
        left -= take;
    }
}

/// A block (or page) size in tokens, with its shift when it is a power of two, as block and
/// page sizes are in practice: block counts are taken per running request and token (a
/// decoding SGLang request at page size 1 several times a token), where a division costs tens
/// of cycles and a shift one. A holder that counts often keeps one; [`full_blocks`] makes one
/// for a single count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSize {
    tokens: usize,
    shift: Option<u32>,
}

impl BlockSize {
    /// `tokens` must be positive.
    pub fn new(tokens: usize) -> Self {
        debug_assert!(tokens > 0, "block size must be positive");
        Self {
            tokens,
            shift: tokens.is_power_of_two().then(|| tokens.trailing_zeros()),
        }
    }

    /// The size in tokens.
    #[inline(always)]
    pub fn tokens(self) -> usize {
        self.tokens
    }

    /// Full blocks in `tokens` (`tokens / size`).
    #[inline(always)]
    pub fn full(self, tokens: usize) -> usize {
        match self.shift {
            Some(shift) => tokens >> shift,
            None => tokens / self.tokens,
        }
    }

    /// `tokens` rounded up to a whole block.
    #[inline(always)]
    pub fn round_up(self, tokens: usize) -> usize {
        self.full(tokens + (self.tokens - 1)) * self.tokens
    }
}

/// The full blocks of `block_size` tokens in `tokens`: [`BlockSize::full`] without keeping a
/// [`BlockSize`] (the size is tested where the shift is taken).
#[inline(always)]
pub fn full_blocks(tokens: usize, block_size: usize) -> usize {
    if block_size.is_power_of_two() {
        tokens >> block_size.trailing_zeros()
    } else {
        tokens / block_size
    }
}

/// One 64-bit key for block `index` whose last token lies in the run of `base`.
///
/// Bases are already strong hashes (`mix`), so a step of the golden-ratio Weyl sequence per
/// index is enough to keep every key of a run distinct and spread in its upper bits (which the
/// pools' and the router's tables index by); it costs one multiply and two adds where a full
/// mix cost two more multiplies, and prompts name every one of their blocks this way.
#[inline]
pub fn block_key(base: u64, index: usize) -> u64 {
    base.wrapping_add(SEED)
        .wrapping_add((index as u64).wrapping_mul(SEED))
}

impl TokenSeq {
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty sequence with room for `runs` runs (a prompt's are known before it is built).
    pub fn with_capacity(runs: usize) -> Self {
        Self {
            runs: Vec::with_capacity(runs),
            ends: Vec::with_capacity(runs),
            bases: Vec::with_capacity(runs),
        }
    }

    pub fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn runs(&self) -> &[Run] {
        &self.runs
    }

    /// Appends the run of `len` tokens from `token` (see [`Run`]: copies of it, or generated
    /// tokens from it on, which must not pass the last index), merging with the last run when
    /// it continues that run.
    pub fn push_run(&mut self, token: u64, len: u32) {
        if len == 0 {
            return;
        }
        debug_assert!(
            !is_generated(token) || (token & INDEX_MASK) + u64::from(len) <= INDEX_MASK + 1,
            "a run of generated tokens passes the last index"
        );
        let total = self.len() + len as usize;
        match self.runs.last_mut() {
            Some(last) if continues(last.token, u64::from(last.len), token) => {
                last.len += len;
                *self.ends.last_mut().expect("ends parallels runs") = total;
            }
            last => {
                // The previous run is complete now: fold it (base and length) into the chain.
                let before = last.map_or(SEED, |last| {
                    mix(
                        *self.bases.last().expect("bases parallel runs"),
                        u64::from(last.len),
                    )
                });
                self.runs.push(Run { token, len });
                self.ends.push(total);
                self.bases.push(mix(before, token));
            }
        }
    }

    pub fn push(&mut self, token: u64) {
        self.push_run(token, 1);
    }

    /// Appends the generated tokens `generated_token(request, first..first + count)`, exactly as
    /// `count` calls of [`TokenSeq::push`] would, in O(1) (they continue one run).
    #[inline]
    pub fn push_generated(&mut self, request: u64, first: u64, count: usize) {
        // A decoding request's next tokens continue its own run of generated tokens (short of the
        // last index, where `generated_runs` would cut them): that run just gets longer. This is
        // what `push_run` does for them, without its call and its checks for a new run.
        let token = generated_token(request, first);
        if let (Some(last), Some(end)) = (self.runs.last_mut(), self.ends.last_mut()) {
            if continues(last.token, u64::from(last.len), token)
                && (first & INDEX_MASK) + count as u64 <= INDEX_MASK + 1
            {
                last.len += u32::try_from(count).expect("a run's length fits u32");
                *end += count;
                return;
            }
        }
        self.push_generated_runs(request, first, count);
    }

    /// [`TokenSeq::push_generated`] in general: kept out of line so that the common case
    /// above stays small enough to be inlined into the decode loops.
    #[inline(never)]
    fn push_generated_runs(&mut self, request: u64, first: u64, count: usize) {
        generated_runs(request, first, count as u64, |token, len| {
            self.push_run(token, u32::try_from(len).expect("a run's length fits u32"));
        });
    }

    /// The hash chain at the end of this sequence, to be extended token by token.
    pub fn tail(&self) -> ChainTail {
        ChainTail {
            last: self
                .runs
                .last()
                .map(|run| (run.token, *self.bases.last().expect("bases parallel runs"))),
            last_len: self.runs.last().map_or(0, |run| u64::from(run.len)),
            len: self.len(),
        }
    }

    /// Appends every token of `other`.
    pub fn extend_from(&mut self, other: &TokenSeq) {
        for run in &other.runs {
            self.push_run(run.token, run.len);
        }
    }

    /// Index of the run holding token position `pos` (`pos < len`).
    fn run_at(&self, pos: usize) -> usize {
        // Growing sequences are mostly read at their end: try the last run first.
        let runs = self.ends.len();
        if runs >= 2 && pos >= self.ends[runs - 2] && pos < self.ends[runs - 1] {
            return runs - 1;
        }
        self.ends.partition_point(|&end| end <= pos)
    }

    /// The full blocks of `block_size` tokens of this sequence.
    pub fn blocks(&self, block_size: usize) -> Blocks<'_> {
        assert!(block_size > 0, "block size must be positive");
        Blocks {
            seq: self,
            block_size,
            start: 0,
            end: full_blocks(self.len(), block_size),
        }
    }

    /// Extends `hashes` (the keys of this sequence's first `hashes.len()` full blocks of
    /// `block_size` tokens, see [`block_key`]) with the keys of every further full block.
    pub fn extend_block_hashes(&self, block_size: usize, hashes: &mut Vec<u64>) {
        let blocks = self.blocks(block_size);
        if hashes.len() >= blocks.len() {
            return;
        }
        let mut index = hashes.len();
        hashes.reserve(blocks.len() - index);
        for run in blocks.range(index, blocks.len()).runs() {
            let first = index;
            index += run.count as usize;
            hashes.extend((first..index).map(|i| block_key(run.base, i)));
        }
    }

    /// The [`block_key`] of every full block.
    pub fn block_keys(&self, block_size: usize) -> Vec<u64> {
        let mut keys = Vec::new();
        self.extend_block_hashes(block_size, &mut keys);
        keys
    }

    /// The identities of every full block, run-length encoded.
    pub fn block_hashes(&self, block_size: usize) -> BlockHashes {
        let blocks = self.blocks(block_size);
        // Blocks ending in one token run share a base: at most one block run per token run.
        let mut runs = Vec::with_capacity(self.runs.len().min(blocks.len()));
        runs.extend(blocks.runs());
        BlockHashes {
            runs,
            len: blocks.len(),
        }
    }
}

/// The hash chain at the end of a token sequence, extended one token at a time without storing
/// tokens: enough to name the blocks a growing sequence fills, as [`TokenSeq`] would after the
/// same pushes, at no cost per token beyond the hashing (none within a run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainTail {
    /// First token and base of the last run.
    last: Option<(u64, u64)>,
    /// Length of the last run.
    last_len: u64,
    len: usize,
}

impl ChainTail {
    /// Tokens in the sequence so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one token (continuing the last run when it can, as [`TokenSeq::push`]).
    pub fn push(&mut self, token: u64) {
        self.push_run(token, 1);
    }

    /// Appends the run of `len` tokens from `token`, as [`TokenSeq::push_run`].
    #[inline(always)]
    fn push_run(&mut self, token: u64, len: u64) {
        match self.last {
            Some((first, _)) if continues(first, self.last_len, token) => self.last_len += len,
            last => {
                let before = last.map_or(SEED, |(_, base)| mix(base, self.last_len));
                self.last = Some((token, mix(before, token)));
                self.last_len = len;
            }
        }
        self.len += len as usize;
    }

    /// Appends the generated tokens `generated_token(request, first..first + count)`, exactly
    /// as `count` calls of [`ChainTail::push`] would: they continue one run, so this costs at
    /// most one hash whatever `count`.
    #[inline]
    pub fn push_generated(&mut self, request: u64, first: u64, count: usize) {
        generated_runs(request, first, count as u64, |token, len| {
            self.push_run(token, len);
        });
    }

    /// The base of the run holding the last token (`None` when empty).
    pub fn last_base(&self) -> Option<u64> {
        self.last.map(|(_, base)| base)
    }
}

/// A range of the full blocks of a [`TokenSeq`] (block indices `start..end`), read in place.
#[derive(Clone, Copy, Debug)]
pub struct Blocks<'a> {
    seq: &'a TokenSeq,
    block_size: usize,
    start: usize,
    end: usize,
}

impl<'a> Blocks<'a> {
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Index (in the whole sequence) of the first block of the range.
    pub fn start(&self) -> usize {
        self.start
    }

    /// The blocks `from..to` of this range (relative indices).
    pub fn range(&self, from: usize, to: usize) -> Blocks<'a> {
        assert!(from <= to && to <= self.len(), "block range out of bounds");
        Blocks {
            start: self.start + from,
            end: self.start + to,
            ..*self
        }
    }

    /// The blocks after the first `from` of this range.
    pub fn skip(&self, from: usize) -> Blocks<'a> {
        self.range(from.min(self.len()), self.len())
    }

    /// Base of the run holding the last token of the block at relative index `i`.
    pub fn base(&self, i: usize) -> u64 {
        debug_assert!(i < self.len());
        let end = (self.start + i + 1) * self.block_size;
        self.seq.bases[self.seq.run_at(end - 1)]
    }

    /// The base every block of the range shares when all of them end in the sequence's last
    /// token run (as a decoding request's newly filled blocks do); `None` otherwise or when the
    /// range is empty. Equal to `base(0)` then, found without searching the runs.
    #[inline]
    pub fn base_if_in_last_run(&self) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        let ends = &self.seq.ends;
        let last_run_start = if ends.len() >= 2 {
            ends[ends.len() - 2]
        } else {
            0
        };
        // The range's first block ends at or after the last run's first token, so every block
        // of the range ends inside that run.
        if (self.start + 1) * self.block_size > last_run_start {
            self.seq.bases.last().copied()
        } else {
            None
        }
    }

    /// The [`block_key`] of the block at relative index `i`.
    pub fn key(&self, i: usize) -> u64 {
        block_key(self.base(i), self.start + i)
    }

    /// The range as maximal runs of blocks sharing a base, in order.
    pub fn runs(&self) -> BlockRunIter<'a> {
        let run = if self.is_empty() {
            0
        } else {
            self.seq.run_at((self.start + 1) * self.block_size - 1)
        };
        BlockRunIter {
            seq: self.seq,
            block_size: self.block_size,
            next: self.start,
            end: self.end,
            run,
        }
    }
}

/// Iterator over the [`BlockRun`]s of a [`Blocks`] range.
#[derive(Clone, Debug)]
pub struct BlockRunIter<'a> {
    seq: &'a TokenSeq,
    block_size: usize,
    /// Next block index to yield.
    next: usize,
    end: usize,
    /// A run index at or before the run holding the next block's last token.
    run: usize,
}

impl Iterator for BlockRunIter<'_> {
    type Item = BlockRun;

    fn next(&mut self) -> Option<BlockRun> {
        if self.next >= self.end {
            return None;
        }
        let last_token = (self.next + 1) * self.block_size - 1;
        while self.seq.ends[self.run] <= last_token {
            self.run += 1;
        }
        let blocks_through_run = full_blocks(self.seq.ends[self.run], self.block_size);
        let upto = blocks_through_run.min(self.end);
        let count = upto - self.next;
        self.next = upto;
        Some(BlockRun {
            base: self.seq.bases[self.run],
            count: u32::try_from(count).expect("a run's blocks fit u32"),
        })
    }
}

/// The identities of a sequence's leading full blocks, as runs of blocks sharing a base; block
/// `i` is identified by its run's base and `i`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockHashes {
    runs: Vec<BlockRun>,
    len: usize,
}

impl BlockHashes {
    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn runs(&self) -> &[BlockRun] {
        &self.runs
    }

    /// The [`block_key`] of every block, in order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        let mut index = 0;
        self.runs.iter().flat_map(move |run| {
            let first = index;
            index += run.count as usize;
            (first..index).map(move |i| block_key(run.base, i))
        })
    }
}

const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// A strong 64-bit mix (SplitMix64 finaliser) of `a` and `b`.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a
        .wrapping_add(b.wrapping_mul(0xD6E8_FEB8_6659_FD93))
        .wrapping_add(SEED);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(tokens: &[u64]) -> TokenSeq {
        let mut s = TokenSeq::new();
        for &t in tokens {
            s.push(t);
        }
        s
    }

    #[test]
    fn chain_tail_names_blocks_as_the_pushed_sequence_does() {
        // Prompts ending in a run (which a pushed token may extend), generated tokens, repeats.
        let prompts: [&[u64]; 4] = [&[], &[5, 5, 5], &[1, 2, 2, 3], &[generated_token(9, 0)]];
        let tails: [&[u64]; 3] = [
            &[3, 3, 4, 5, 5, 5, 5, 6],
            &[generated_token(9, 0), generated_token(9, 1), 7, 7],
            &[8; 20],
        ];
        for prompt in prompts {
            for tail_tokens in tails {
                let mut full = seq(prompt);
                let mut tail = full.tail();
                assert_eq!(tail.len(), prompt.len());
                for &token in tail_tokens {
                    full.push(token);
                    tail.push(token);
                    assert_eq!(tail.len(), full.len());
                    // The block ending at the last token is named by the tail's base.
                    let blocks = full.blocks(1);
                    assert_eq!(Some(blocks.base(blocks.len() - 1)), tail.last_base());
                    assert_eq!(full.tail(), tail);
                }
            }
        }
    }

    #[test]
    fn only_blocks_ending_in_the_last_run_get_its_base_directly() {
        let ones = seq(&[1, 1, 2, 2, 2]);
        let blocks = ones.blocks(1);
        assert_eq!(
            blocks.range(2, 5).base_if_in_last_run(),
            Some(blocks.base(2))
        );
        assert_eq!(
            blocks.range(4, 5).base_if_in_last_run(),
            Some(blocks.base(4))
        );
        // Block 1 ends in the run of 1s.
        assert_eq!(blocks.range(1, 5).base_if_in_last_run(), None);
        assert_eq!(blocks.range(5, 5).base_if_in_last_run(), None);
        // Blocks of two tokens: block 1 (tokens 2 and 3) ends in the run of 2s, block 0 not.
        let pairs = seq(&[1, 1, 2, 2, 2, 2]);
        let blocks = pairs.blocks(2);
        assert_eq!(
            blocks.range(1, 3).base_if_in_last_run(),
            Some(blocks.base(1))
        );
        assert_eq!(blocks.range(0, 3).base_if_in_last_run(), None);
        // A one-run sequence: every block.
        let single = seq(&[4, 4, 4]);
        assert_eq!(
            single.blocks(1).base_if_in_last_run(),
            Some(single.blocks(1).base(0))
        );
    }

    #[test]
    fn generated_tokens_of_a_request_are_one_run() {
        let mut s = seq(&[1, 1, generated_token(3, 5)]);
        s.push_generated(3, 6, 10);
        s.push(generated_token(3, 16));
        s.push_generated(4, 17, 2);
        assert_eq!(
            s.runs(),
            [
                Run { token: 1, len: 2 },
                Run {
                    token: generated_token(3, 5),
                    len: 12
                },
                Run {
                    token: generated_token(4, 17),
                    len: 2
                },
            ]
        );
        // A repeated generated token starts a new run; so does the index after the last.
        let mut t = seq(&[generated_token(3, 5), generated_token(3, 5)]);
        assert_eq!(t.runs().len(), 2);
        t.push_generated(8, u64::from(u32::MAX) - 1, 4);
        assert_eq!(t.runs().len(), 4);
        assert_eq!(t.runs()[3].token, generated_token(8, 0));
        let mut one_by_one = seq(&[generated_token(3, 5), generated_token(3, 5)]);
        for index in u64::from(u32::MAX) - 1..u64::from(u32::MAX) + 3 {
            one_by_one.push(generated_token(8, index));
        }
        assert_eq!(t, one_by_one);
        let mut tail = seq(&[generated_token(3, 5), generated_token(3, 5)]).tail();
        tail.push_generated(8, u64::from(u32::MAX) - 1, 4);
        assert_eq!(tail, t.tail());
    }

    #[test]
    fn pushing_generated_tokens_at_once_equals_pushing_them_one_by_one() {
        // Prompts ending in the first generated token (its run is extended), in another
        // request's generated token, in a trace token, and empty.
        let prompts: [&[u64]; 4] = [
            &[1, 2, generated_token(7, 3)],
            &[generated_token(6, 3), generated_token(6, 4)],
            &[4, 4, 4],
            &[],
        ];
        for prompt in prompts {
            for (first, count) in [(3, 0), (3, 1), (3, 2), (3, 17), (0, 64)] {
                let mut one_by_one = seq(prompt).tail();
                for index in first..first + count as u64 {
                    one_by_one.push(generated_token(7, index));
                }
                let mut at_once = seq(prompt).tail();
                at_once.push_generated(7, first, count);
                assert_eq!(at_once, one_by_one, "{prompt:?} {first} {count}");
                // Split in two calls, as blocks are hashed one at a time.
                let mut split = seq(prompt).tail();
                split.push_generated(7, first, count / 2);
                split.push_generated(7, first + (count / 2) as u64, count - count / 2);
                assert_eq!(split, one_by_one);
                // The same tokens pushed into a sequence.
                let mut pushed = seq(prompt);
                pushed.push_generated(7, first, count);
                assert_eq!(pushed.tail(), one_by_one);
            }
        }
    }

    fn keys(s: &TokenSeq, block_size: usize) -> Vec<u64> {
        s.block_keys(block_size)
    }

    #[test]
    fn runs_are_canonical() {
        let mut a = TokenSeq::new();
        a.push_run(7, 512);
        a.push_run(7, 512);
        let mut b = TokenSeq::new();
        b.push_run(7, 1024);
        assert_eq!(a, b);
        assert_eq!(a.runs().len(), 1);
    }

    #[test]
    fn equal_prefixes_hash_equal_and_positions_differ() {
        let mut a = TokenSeq::new();
        a.push_run(1, 600);
        let mut b = TokenSeq::new();
        b.push_run(1, 700);
        let ha = keys(&a, 64);
        let hb = keys(&b, 64);
        assert_eq!(ha.len(), 9);
        assert_eq!(hb.len(), 10);
        assert_eq!(ha[..], hb[..9]);
        // A repeated block of the same token is still a different block at another position.
        assert_ne!(ha[0], ha[1]);
        // ...though both end in the same run, so they share a base and form one block run.
        assert_eq!(a.block_hashes(64).runs().len(), 1);
    }

    #[test]
    fn order_matters() {
        let mut a = TokenSeq::new();
        a.push_run(1, 64);
        a.push_run(2, 64);
        let mut b = TokenSeq::new();
        b.push_run(2, 64);
        b.push_run(1, 64);
        assert_ne!(keys(&a, 64)[0], keys(&b, 64)[0]);
        assert_ne!(keys(&a, 64)[1], keys(&b, 64)[1]);
    }

    #[test]
    fn incremental_equals_batch() {
        let mut s = seq(&[1, 2, 3, 4, 5]);
        let mut inc = Vec::new();
        s.extend_block_hashes(2, &mut inc);
        s.push(6);
        s.push(6);
        s.extend_block_hashes(2, &mut inc);
        assert_eq!(inc, keys(&s, 2));
        assert_eq!(inc.len(), 3);
        let all: Vec<u64> = s.block_hashes(2).keys().collect();
        assert_eq!(inc, all);
    }

    #[test]
    fn run_boundaries_inside_blocks_hash_by_content() {
        // Same tokens built from differently sized pushes hash the same.
        let mut a = TokenSeq::new();
        a.push_run(3, 10);
        a.push_run(4, 30);
        let mut b = TokenSeq::new();
        for _ in 0..10 {
            b.push(3);
        }
        b.push_run(4, 5);
        b.push_run(4, 25);
        assert_eq!(keys(&a, 8), keys(&b, 8));
        assert_eq!(a.block_hashes(8), b.block_hashes(8));
    }

    /// Brute force: block `i` of `a` equals block `i` of `b` exactly when their token prefixes
    /// through the block's end are equal, for every block size and many random sequences.
    #[test]
    fn block_identity_is_prefix_equality() {
        let mut state = 0x1234_5678_u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        // Sequences of pieces: copies of a trace token, or a request's generated tokens from some
        // index on (of two requests, from nearby indices, so that pieces continue, repeat and
        // overlap each other's tokens); half of them extend a prefix of an earlier one.
        let mut sequences: Vec<Vec<u64>> = Vec::new();
        let mut built: Vec<TokenSeq> = Vec::new();
        for n in 0..80 {
            let mut tokens: Vec<u64> = Vec::new();
            if n % 2 == 1 {
                let earlier = &sequences[next(n as u64) as usize];
                tokens.extend(&earlier[..next(earlier.len() as u64 + 1) as usize]);
            }
            // The same tokens pushed piece by piece (the prefix token by token).
            let mut by_pieces = seq(&tokens);
            for _ in 0..next(7) {
                let len = next(5) + 1;
                if next(2) == 0 {
                    let token = next(3);
                    tokens.extend((0..len).map(|_| token));
                    by_pieces.push_run(token, len as u32);
                } else {
                    let (request, first) = (next(2) + 1, next(4));
                    tokens.extend((first..first + len).map(|i| generated_token(request, i)));
                    by_pieces.push_generated(request, first, len as usize);
                }
            }
            assert_eq!(by_pieces, seq(&tokens), "{tokens:?}");
            sequences.push(tokens);
            built.push(by_pieces);
        }
        for block_size in [1, 2, 3, 5] {
            let all: Vec<(Vec<u64>, TokenSeq)> = sequences
                .iter()
                .cloned()
                .zip(built.iter().cloned())
                .collect();
            for (ta, sa) in &all {
                let ka = keys(sa, block_size);
                let ba = sa.blocks(block_size);
                assert_eq!(ka.len(), ta.len() / block_size);
                let from_runs: Vec<u64> = sa.block_hashes(block_size).keys().collect();
                assert_eq!(from_runs, ka);
                for (i, &key) in ka.iter().enumerate() {
                    assert_eq!(ba.key(i), key);
                    assert_eq!(ba.range(i, ka.len()).key(0), key);
                }
                for (tb, sb) in &all {
                    let kb = keys(sb, block_size);
                    let bb = sb.blocks(block_size);
                    for i in 0..ka.len().min(kb.len()) {
                        let end = (i + 1) * block_size;
                        let same = ta[..end] == tb[..end];
                        assert_eq!(ka[i] == kb[i], same);
                        assert_eq!(ba.base(i) == bb.base(i), same);
                    }
                }
            }
        }
    }

    #[test]
    fn block_runs_cover_ranges() {
        let mut s = TokenSeq::new();
        s.push_run(1, 10);
        s.push_run(2, 3);
        s.push_run(3, 20);
        let blocks = s.blocks(4);
        assert_eq!(blocks.len(), 8);
        let counts: Vec<u32> = blocks.runs().map(|r| r.count).collect();
        // Ends 4, 8 in run 0; 12 in run 1 (tokens 10..13); 16..32 in run 2.
        assert_eq!(counts, [2, 1, 5]);
        let sub: Vec<u32> = blocks.range(1, 4).runs().map(|r| r.count).collect();
        assert_eq!(sub, [1, 1, 1]);
        assert!(blocks.range(3, 3).runs().next().is_none());
        assert_eq!(blocks.skip(5).start(), 5);
    }

    #[test]
    fn block_keys_are_distinct_and_spread_in_their_upper_bits() {
        // 512 runs of real bases (one token each after a shared prefix), 2048 blocks each:
        // every key distinct, and the top 16 bits (a table of 65,536 buckets) evenly used.
        let mut keys = std::collections::HashSet::new();
        let mut buckets = vec![0u32; 1 << 16];
        for token in 0..512u64 {
            let mut seq = TokenSeq::new();
            seq.push_run(7, 100);
            seq.push_run(1000 + token, 10);
            let base = seq.blocks(1).runs().last().expect("a run").base;
            for index in 0..2048 {
                let key = block_key(base, index);
                assert!(
                    keys.insert(key),
                    "key of block {index} of run {token} repeats"
                );
                buckets[(key >> 48) as usize] += 1;
            }
        }
        // 16 keys a bucket on average; a fair hash almost never puts 48 in one.
        let fullest = *buckets.iter().max().expect("buckets");
        assert!(fullest < 48, "a bucket holds {fullest} keys");
    }
}
