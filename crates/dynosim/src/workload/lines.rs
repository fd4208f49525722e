//! Line-by-line reading shared by the JSONL trace readers, and the wording of their JSON errors.
//!
//! A file is streamed through one reused buffer, so memory does not grow with the file. Line
//! numbers are 1-based physical lines: blank lines are skipped but counted, as in the reference.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::de::DeserializeOwned;

/// The longest line a trace may hold: far above any real row (a 1M-token prompt's hash ids take
/// well under 10 MiB of JSON), low enough that `/dev/zero` or a corrupt file without line breaks
/// fails fast instead of growing one buffer until memory runs out.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// The lines of one trace file.
pub(super) struct TraceLines {
    reader: Box<dyn BufRead>,
    buf: Vec<u8>,
    line_no: usize,
    gzip: bool,
}

/// Why a line could not be read: the line number and the I/O or UTF-8 reason.
pub(super) struct ReadFailure {
    pub line_no: usize,
    pub reason: String,
}

impl TraceLines {
    /// Opens `path`, through a multi-member gzip decoder when `gzip` is set.
    pub(super) fn open(path: &Path, gzip: bool) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let reader: Box<dyn Read> = if gzip {
            Box::new(flate2::read::MultiGzDecoder::new(file))
        } else {
            Box::new(file)
        };
        Ok(Self {
            reader: Box::new(BufReader::with_capacity(1 << 16, reader)),
            buf: Vec::new(),
            line_no: 0,
            gzip,
        })
    }

    /// The next non-blank line (without its line ending) and its number, or `None` at the end.
    pub(super) fn next_line(&mut self) -> Result<Option<(usize, &str)>, ReadFailure> {
        let len = loop {
            self.buf.clear();
            self.line_no += 1;
            let line_no = self.line_no;
            let read = (&mut self.reader)
                .take(MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| ReadFailure {
                    line_no,
                    reason: e.to_string(),
                })?;
            if read == 0 {
                return Ok(None);
            }
            if self.buf.len() > MAX_LINE_BYTES && self.buf.last() != Some(&b'\n') {
                return Err(ReadFailure {
                    line_no,
                    reason: format!(
                        "the line is longer than {} MiB without a line break; a trace is one \
                         JSON object per line",
                        MAX_LINE_BYTES >> 20
                    ),
                });
            }
            if line_no == 1 && !self.gzip && self.buf.starts_with(&[0x1f, 0x8b]) {
                return Err(ReadFailure {
                    line_no,
                    reason: "the file is gzip-compressed; this trace format reads plain JSONL \
                             (decompress it first; only --trace-format dynamo reads .gz shards)"
                        .to_string(),
                });
            }
            if line_no == 1 && self.buf.starts_with("\u{feff}".as_bytes()) {
                return Err(ReadFailure {
                    line_no,
                    reason: "the file starts with a UTF-8 byte order mark (BOM); save it as \
                             UTF-8 without a BOM"
                        .to_string(),
                });
            }
            let text = std::str::from_utf8(&self.buf).map_err(|e| ReadFailure {
                line_no,
                reason: format!("stream did not contain valid UTF-8 ({e})"),
            })?;
            if !text.trim().is_empty() {
                break strip_line_ending(text).len();
            }
        };
        let text = std::str::from_utf8(&self.buf[..len]).expect("checked while reading");
        Ok(Some((self.line_no, text)))
    }
}

/// Drops the `\n` (and a `\r` before it) the way `BufRead::lines` does.
pub(super) fn strip_line_ending(text: &str) -> &str {
    match text.strip_suffix('\n') {
        Some(rest) => rest.strip_suffix('\r').unwrap_or(rest),
        None => text,
    }
}

/// What to add to a parse failure when the file's first line is not JSON at all (a CSV header,
/// a table): which formats a trace may be in. Empty otherwise.
pub(super) fn format_hint(line_no: usize, line: &str) -> &'static str {
    let start = line.trim_start();
    if line_no == 1
        && !start.starts_with(['{', '['])
        && serde_json::from_str::<serde::de::IgnoredAny>(line).is_err()
    {
        "; a trace is JSON Lines, one JSON object per line, in one of the trace formats \
         mooncake (the default: timestamp, input_length, output_length, hash_ids), \
         mooncake-delta, agentic_mooncake, applied_compute_agentic or dynamo (see \
         --trace-format); CSV and other tabular files are not read"
    } else {
        ""
    }
}

/// serde's reason for rejecting `line` as a `T`, with the column instead of "line 1 column C"
/// (the trace line is named already) and, for a wrongly typed value, the top-level field that
/// holds it.
pub(super) fn describe_json_error<T: DeserializeOwned>(
    line: &str,
    error: &serde_json::Error,
) -> String {
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(line) {
        let kind = match value {
            serde_json::Value::Object(_) => None,
            serde_json::Value::Array(_) => Some("an array"),
            serde_json::Value::String(_) => Some("a string"),
            serde_json::Value::Number(_) => Some("a number"),
            serde_json::Value::Bool(_) => Some("a boolean"),
            serde_json::Value::Null => Some("null"),
        };
        if let Some(kind) = kind {
            return format!("expected a JSON object (one trace row), got {kind}");
        }
    }
    let full = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    let reason = full.strip_suffix(&suffix).unwrap_or(&full);
    let mut text = if error.column() > 0 {
        format!("{reason} at column {}", error.column())
    } else {
        reason.to_string()
    };
    if error.is_data()
        && !reason.starts_with("duplicate field")
        && !reason.starts_with("missing field")
    {
        if let Some(field) = offending_field::<T>(line) {
            text.push_str(&format!(" (field {field})"));
        }
    }
    text
}

/// The first top-level field (in line order) that `T` rejects on its own. Only called on the
/// error path: each field is tried alone, so a missing required field does not hide it.
fn offending_field<T: DeserializeOwned>(line: &str) -> Option<String> {
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(line).ok()?;
    map.into_iter()
        .find(|(name, value)| {
            let mut alone = serde_json::Map::new();
            alone.insert(name.clone(), value.clone());
            match serde_json::from_value::<T>(serde_json::Value::Object(alone)) {
                Ok(_) => false,
                Err(e) => !e.to_string().starts_with("missing field"),
            }
        })
        .map(|(name, _)| name)
}

/// The length of a JSON array of u32 token ids, each element type-checked but not stored.
pub(super) struct U32Count(pub usize);

impl<'de> serde::Deserialize<'de> for U32Count {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl<'de> serde::de::Visitor<'de> for CountVisitor {
            type Value = U32Count;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of u32 token ids")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<U32Count, A::Error> {
                let mut count = 0;
                while seq.next_element::<u32>()?.is_some() {
                    count += 1;
                }
                Ok(U32Count(count))
            }
        }
        deserializer.deserialize_seq(CountVisitor)
    }
}

/// Temporary trace files for the readers' tests.
#[cfg(test)]
pub(super) mod testing {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A uniquely named file under the system temp dir, removed on drop.
    pub struct TempTrace(pub PathBuf);

    impl TempTrace {
        pub fn new(suffix: &str, bytes: &[u8]) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir()
                .join(format!("dynosim-trace-{}-{n}{suffix}", std::process::id()));
            std::fs::write(&path, bytes).unwrap();
            Self(path)
        }

        pub fn shown(&self) -> String {
            self.0.display().to_string()
        }
    }

    impl Drop for TempTrace {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    /// Byte-level mutations of a valid trace for the no-panic properties: flip, insert or
    /// delete one byte, or cut the text.
    pub fn mutate(text: &str, op: u8, at: usize, byte: u8) -> Vec<u8> {
        let mut bytes = text.as_bytes().to_vec();
        if bytes.is_empty() {
            return bytes;
        }
        let at = at % bytes.len();
        match op % 4 {
            0 => bytes[at] = byte,
            1 => bytes.insert(at, byte),
            2 => {
                bytes.remove(at);
            }
            _ => bytes.truncate(at),
        }
        bytes
    }
}
