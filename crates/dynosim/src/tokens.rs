//! Token sequences stored as runs, and their chained block hashes.
//!
//! A trace prompt is `input_length` tokens where each trace `hash_id` stands for up to
//! `trace_block_size` copies of one token. Storing one integer per token would cost gigabytes on
//! the public traces, so a sequence is kept run-length encoded: adjacent equal tokens always merge,
//! which makes the encoding canonical (equal token sequences have equal runs). Block hashes are
//! computed from the runs, so two blocks hash alike exactly when their tokens and everything
//! before them are alike (the chained, position-aware identity a paged KV cache uses).
//!
//! Token-id spaces never overlap: interned trace ids are below 2^32, request-unique prompt
//! content and generated tokens carry a tag in the top bits (see [`unique_prompt_token`] and
//! [`generated_token`]).

/// One run of `len` copies of `token`.
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
}

const TAG_UNIQUE_PROMPT: u64 = 1 << 62;
const TAG_GENERATED: u64 = 2 << 62;

/// The token of a prompt whose content no other request shares (synthetic simple path): request
/// `key` is `input_tokens` copies of this token. Chained hashing keeps its blocks distinct.
pub fn unique_prompt_token(key: u64) -> u64 {
    TAG_UNIQUE_PROMPT | (key & (TAG_UNIQUE_PROMPT - 1))
}

/// The `index`-th token generated for request `request`: unique per request and position, as the
/// random output tokens of the reference are for all practical purposes.
pub fn generated_token(request: u64, index: u64) -> u64 {
    TAG_GENERATED | ((request & 0x3FFF_FFFF) << 32) | (index & 0xFFFF_FFFF)
}

impl TokenSeq {
    pub fn new() -> Self {
        Self::default()
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

    /// Appends `len` copies of `token`, merging with the last run when the token repeats.
    pub fn push_run(&mut self, token: u64, len: u32) {
        if len == 0 {
            return;
        }
        let total = self.len() + len as usize;
        match self.runs.last_mut() {
            Some(last) if last.token == token => {
                last.len += len;
                *self.ends.last_mut().expect("ends parallels runs") = total;
            }
            _ => {
                self.runs.push(Run { token, len });
                self.ends.push(total);
            }
        }
    }

    pub fn push(&mut self, token: u64) {
        self.push_run(token, 1);
    }

    /// Appends every token of `other`.
    pub fn extend_from(&mut self, other: &TokenSeq) {
        for run in &other.runs {
            self.push_run(run.token, run.len);
        }
    }

    /// Index of the run holding token position `pos` (`pos < len`).
    fn run_at(&self, pos: usize) -> usize {
        self.ends.partition_point(|&end| end <= pos)
    }

    /// Extends `hashes` (the chained hashes of this sequence's first `hashes.len()` full blocks of
    /// `block_size` tokens) with the hashes of every further full block.
    pub fn extend_block_hashes(&self, block_size: usize, hashes: &mut Vec<u64>) {
        assert!(block_size > 0, "block size must be positive");
        let full_blocks = self.len() / block_size;
        if hashes.len() >= full_blocks {
            return;
        }
        let mut block = hashes.len();
        let mut parent = hashes.last().copied().unwrap_or(SEED);
        let mut run = self.run_at(block * block_size);
        while block < full_blocks {
            let start = block * block_size;
            let end = start + block_size;
            let mut h = parent;
            let mut pos = start;
            while pos < end {
                let run_end = self.ends[run];
                let take_end = run_end.min(end);
                h = mix(mix(h, self.runs[run].token), (take_end - pos) as u64);
                pos = take_end;
                if take_end == run_end {
                    run += 1;
                }
            }
            hashes.push(h);
            parent = h;
            block += 1;
        }
    }

    /// The chained hashes of every full block.
    pub fn block_hashes(&self, block_size: usize) -> Vec<u64> {
        let mut hashes = Vec::with_capacity(self.len() / block_size.max(1));
        self.extend_block_hashes(block_size, &mut hashes);
        hashes
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
        let ha = a.block_hashes(64);
        let hb = b.block_hashes(64);
        assert_eq!(ha.len(), 9);
        assert_eq!(hb.len(), 10);
        assert_eq!(ha[..], hb[..9]);
        // A repeated block of the same token is still a different block at another position.
        assert_ne!(ha[0], ha[1]);
    }

    #[test]
    fn order_matters() {
        let mut a = TokenSeq::new();
        a.push_run(1, 64);
        a.push_run(2, 64);
        let mut b = TokenSeq::new();
        b.push_run(2, 64);
        b.push_run(1, 64);
        assert_ne!(a.block_hashes(64)[0], b.block_hashes(64)[0]);
    }

    #[test]
    fn incremental_equals_batch() {
        let mut s = seq(&[1, 2, 3, 4, 5]);
        let mut inc = Vec::new();
        s.extend_block_hashes(2, &mut inc);
        s.push(6);
        s.push(6);
        s.extend_block_hashes(2, &mut inc);
        assert_eq!(inc, s.block_hashes(2));
        assert_eq!(inc.len(), 3);
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
        assert_eq!(a.block_hashes(8), b.block_hashes(8));
    }
}
