//! Prompts to token ids and block identities, and the generated text.
//!
//! Prompts are tokenized with OpenAI's `cl100k_base` vocabulary, which the `tiktoken-rs`
//! crate ships (nothing is downloaded). Chat messages are rendered through one fixed template
//! first. Each block of `block_size` token ids (the last one possibly partial) is named by a
//! hash of its ids chained with its parent block's hash, and each distinct hash gets a dense
//! `u32` id in first-seen order: exactly the hash ids a Mooncake trace carries, so equal
//! prefixes (a shared system prompt, the earlier turns of a chat) name equal blocks and hit
//! the simulated prefix cache as a trace's shared hash ids do.
//!
//! INTERFACE
//! - [`Tokenizer`]: `encode` (text to ids), `count`.
//! - [`render_chat`]: the fixed chat template.
//! - [`BlockNamer`]: token ids to hash ids (bounded memory: past a cap it forgets old blocks,
//!   which then count as new, like an eviction).
//! - [`filler_token`]: the text of generated token `i` (one token each, deterministic).

use std::collections::HashMap;

use tiktoken_rs::CoreBPE;

/// The vocabulary's name, as `/v1/models` and the docs give it.
pub const VOCABULARY: &str = "cl100k_base";

/// A tokenizer built from the vocabulary the crate ships.
pub struct Tokenizer {
    bpe: CoreBPE,
}

impl Tokenizer {
    pub fn new() -> Result<Self, String> {
        tiktoken_rs::cl100k_base()
            .map(|bpe| Self { bpe })
            .map_err(|err| format!("cannot build the {VOCABULARY} tokenizer: {err}"))
    }

    /// Token ids of `text` (special-token names are plain text here).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }
}

/// Mergeable tokens of the vocabulary (ids 0 to this, exclusive; special tokens come after).
const MERGEABLE_TOKENS: u32 = 100_256;

/// The name tiktoken (Python) caches the vocabulary file under: the SHA-1 of the address it
/// would download it from. A directory holding the file under this name, given as
/// `TIKTOKEN_CACHE_DIR`, lets tiktoken (and AIPerf's `--tokenizer cl100k_base`) load it
/// without a download; tiktoken checks the file's SHA-256 against the published one.
pub const TIKTOKEN_CACHE_NAME: &str = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4";

impl Tokenizer {
    /// Writes the vocabulary in tiktoken's file format (each token's bytes in base64 and its
    /// id, one per line, by id), rebuilt from the shipped vocabulary: the very file tiktoken
    /// downloads, byte for byte.
    pub fn write_vocabulary(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        use base64::Engine as _;
        let mut text = String::with_capacity(2 << 20);
        for id in 0..MERGEABLE_TOKENS {
            let bytes = self
                .bpe
                ._decode_native_and_split(vec![id])
                .next()
                .unwrap_or_default();
            text.push_str(&base64::engine::general_purpose::STANDARD.encode(bytes));
            text.push(' ');
            text.push_str(&id.to_string());
            text.push('\n');
        }
        out.write_all(text.as_bytes())
    }
}

/// One chat message as the template sees it.
pub struct ChatTurn<'a> {
    pub role: &'a str,
    pub content: &'a str,
}

/// Renders chat messages through a fixed template: each message as `<|role|>` and its
/// content on lines of their own, then the assistant's header the answer follows.
pub fn render_chat(messages: &[ChatTurn<'_>]) -> String {
    let mut text = String::new();
    for message in messages {
        text.push_str("<|");
        text.push_str(message.role);
        text.push_str("|>\n");
        text.push_str(message.content);
        text.push('\n');
    }
    text.push_str("<|assistant|>\n");
    text
}

/// Words of one token each (with their leading space) that stay one token each when
/// concatenated: the generated text, in this order, over and over.
const FILLER: [&str; 8] = [
    " the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog",
];

/// The text of generated token `index`.
pub fn filler_token(index: usize) -> &'static str {
    FILLER[index % FILLER.len()]
}

/// Distinct blocks remembered before the namer starts over.
const MAX_NAMED_BLOCKS: usize = 1 << 20;

/// Names blocks of token ids with dense hash ids (see the module doc).
pub struct BlockNamer {
    block_size: usize,
    ids: HashMap<u64, u32>,
    next_id: u32,
}

impl BlockNamer {
    pub fn new(block_size: usize) -> Self {
        Self {
            block_size: block_size.max(1),
            ids: HashMap::new(),
            next_id: 0,
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The hash ids of `tokens`' blocks: `tokens.len().div_ceil(block_size)` of them.
    pub fn name(&mut self, tokens: &[u32]) -> Vec<u32> {
        if self.ids.len() >= MAX_NAMED_BLOCKS {
            // Forget every block; ids keep counting up, so none is reused for another block.
            self.ids.clear();
        }
        let mut parent = 0xcbf2_9ce4_8422_2325_u64;
        let mut names = Vec::with_capacity(tokens.len().div_ceil(self.block_size));
        for block in tokens.chunks(self.block_size) {
            parent = chain_hash(parent, block);
            let next_id = &mut self.next_id;
            let id = *self.ids.entry(parent).or_insert_with(|| {
                let id = *next_id;
                *next_id = next_id.wrapping_add(1);
                id
            });
            names.push(id);
        }
        names
    }
}

/// FNV-1a over the parent's hash, the block's length and its ids (the length keeps a partial
/// block apart from a full one that starts with the same ids).
fn chain_hash(parent: u64, block: &[u32]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = parent;
    let mut feed = |bytes: &[u8]| {
        for &byte in bytes {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    feed(&(block.len() as u64).to_le_bytes());
    for id in block {
        feed(&id.to_le_bytes());
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filler_tokens_stay_one_token_each_when_joined() {
        let tokenizer = Tokenizer::new().expect("the vocabulary ships with the crate");
        let text: String = (0..40).map(filler_token).collect();
        assert_eq!(tokenizer.encode(&text).len(), 40);
        for index in 0..FILLER.len() {
            assert_eq!(tokenizer.encode(filler_token(index)).len(), 1);
        }
    }

    #[test]
    fn the_exported_vocabulary_has_every_token_once_by_id() {
        let tokenizer = Tokenizer::new().unwrap();
        let mut file = Vec::new();
        tokenizer.write_vocabulary(&mut file).unwrap();
        let text = String::from_utf8(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), MERGEABLE_TOKENS as usize);
        assert_eq!(lines[0], "IQ== 0");
        // " the" is token 279 of cl100k_base.
        assert_eq!(lines[279], "IHRoZQ== 279");
    }

    #[test]
    fn shared_prefixes_share_block_ids_and_differences_do_not() {
        let mut namer = BlockNamer::new(4);
        let a = namer.name(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let b = namer.name(&[1, 2, 3, 4, 5, 6, 7, 0, 9, 10]);
        let c = namer.name(&[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(a.len(), 3);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        // Same ids through a block's end: same id; a partial block is its own.
        assert_eq!(&a[..2], &c[..]);
        assert_ne!(a[2], b[2]);
    }
}
