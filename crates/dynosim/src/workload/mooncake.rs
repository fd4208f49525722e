//! The `mooncake` JSONL trace reader.
//!
//! One JSON object per line, each one request (a turn). Rows sharing a `session_id` form a
//! session in file order; rows without one are single-turn sessions named `request_<line>`.
//! The file is streamed line by line and each row is parsed into a short-lived struct, so memory
//! grows with the hash ids kept (interned to `u32`), not with the file size.
//!
//! Error messages start with the reference's words (users grep for them) and then add what the
//! reference leaves out: the file, and for JSON errors the column, the field and serde's reason.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;

use super::lines::{describe_json_error, format_hint, TraceLines, U32Count};
use super::{HashIdArena, HashIdInterner, Session, SessionId, Turn, Turns, Workload};
use crate::error::{Error, Result};

/// Reads a Mooncake JSONL trace. `trace_block_size` is the number of tokens each hash id stands for.
pub fn read_mooncake(path: &Path, trace_block_size: u32) -> Result<Workload> {
    if trace_block_size == 0 {
        return Err(Error::usage("trace_block_size must be greater than 0"));
    }
    let shown = path.display().to_string();
    let mut lines = TraceLines::open(path, false)
        .map_err(|e| Error::usage(format!("failed to open trace file {shown}: {e}")))?;
    let mut builder = Builder::new(&shown, trace_block_size);
    // The hash-id buffer of the previous row, reused by the next one.
    let mut spare_hash_ids = None;
    loop {
        let next = lines.next_line().map_err(|failure| {
            Error::usage(format!(
                "failed to read line {} from {shown}: {}",
                failure.line_no, failure.reason
            ))
        })?;
        let Some((line_no, text)) = next else {
            break;
        };
        let mut row = match usual_row::scan(text, spare_hash_ids.take()) {
            Some(row) => row,
            None => serde_json::from_str::<Row>(text).map_err(|e| {
                Error::usage(format!(
                    "failed to parse line {line_no} from {shown} as JSON: {}{}",
                    describe_json_error::<Row>(text, &e),
                    format_hint(line_no, text)
                ))
            })?,
        };
        builder.push(line_no, &mut row)?;
        spare_hash_ids = row.hash_ids.take();
    }
    builder.finish()
}

/// One trace row. Every field is optional at the serde level so that a missing required field
/// gets the reference's own message instead of serde's. Field types are strict (a string
/// `priority` or a float `input_length` is a parse error), duplicates and name+alias pairs are
/// rejected by serde, and unknown fields are ignored. The field order matters: like any serde
/// struct, a row may also be written as a JSON array of the fields in this order (the reference
/// accepts `[null,"s",5,1,null,[1],0]`, so this reader does too).
#[derive(Deserialize)]
#[serde(expecting = "a JSON object (one trace row)")]
struct Row {
    /// Only type-checked: the simulator generates its own output tokens, so the id that keys
    /// authored output tokens is not needed.
    #[serde(default)]
    #[allow(dead_code)]
    request_id: Option<StringShape>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default, alias = "input_tokens")]
    input_length: Option<usize>,
    #[serde(default, alias = "output_tokens")]
    output_length: Option<usize>,
    /// Only the length is kept (validated against `output_length`).
    #[serde(default)]
    output_token_ids: Option<U32Count>,
    #[serde(default)]
    hash_ids: Option<Vec<u64>>,
    #[serde(default, alias = "created_time")]
    timestamp: Option<f64>,
    #[serde(default, alias = "delay_ms")]
    delay: Option<f64>,
    #[serde(default)]
    priority: Option<i32>,
    #[serde(default)]
    strict_priority: Option<u32>,
    #[serde(default)]
    policy_class: Option<String>,
}

/// A JSON string whose value is not needed.
#[derive(Clone, Copy)]
struct StringShape;

impl<'de> Deserialize<'de> for StringShape {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StringVisitor;
        impl<'de> Visitor<'de> for StringVisitor {
            type Value = StringShape;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<StringShape, E> {
                Ok(StringShape)
            }
        }
        deserializer.deserialize_str(StringVisitor)
    }
}

/// Folds rows into sessions, applying the reference's per-row checks in its order.
///
/// What it keeps per row is the turn (inline in its session when the session has one) and the
/// row's hash ids in the shared arena; what it needs only while reading is kept per session
/// that needs it (named sessions, sessions with more than one timestamped row).
struct Builder<'p> {
    path: &'p str,
    trace_block_size: u32,
    interner: HashIdInterner,
    /// The current row's interned ids (a buffer reused across rows).
    interned: Vec<u32>,
    arena: HashIdArena,
    sessions: Vec<Session>,
    /// Sessions named by a `session_id` field.
    named_sessions: HashMap<String, usize>,
    /// The line that created each named session, as (session index, line), in session order:
    /// with the automatic sessions' own lines, every session's first line is known, and
    /// sessions are created in line order.
    named_first_lines: Vec<(usize, usize)>,
    /// The last timestamp of a session's rows (the base of inferred delays), where it is not
    /// its first row's: set by a later timestamped row.
    later_timestamps_ms: HashMap<usize, f64>,
    /// Policy classes as written, one allocation per distinct class.
    policy_classes: HashSet<Arc<str>>,
    /// The zero-length turn that is reported first: lowest (session, turn), plus its line.
    /// The reference checks prompt lengths after the whole file has parsed, in session order.
    first_empty_prompt: Option<(usize, usize, usize, EmptyPromptCause)>,
}

#[derive(Clone, Copy)]
enum EmptyPromptCause {
    NoHashIds,
    ZeroInputLength,
}

impl<'p> Builder<'p> {
    fn new(path: &'p str, trace_block_size: u32) -> Self {
        Self {
            path,
            trace_block_size,
            interner: HashIdInterner::default(),
            interned: Vec::new(),
            arena: HashIdArena::default(),
            sessions: Vec::new(),
            named_sessions: HashMap::new(),
            named_first_lines: Vec::new(),
            later_timestamps_ms: HashMap::new(),
            policy_classes: HashSet::new(),
            first_empty_prompt: None,
        }
    }

    /// Folds `row` in. Its strings are taken; its hash ids are only read, so that the caller
    /// can reuse their buffer.
    fn push(&mut self, line_no: usize, row: &mut Row) -> Result<()> {
        let path = self.path;
        let Some(raw_hash_ids) = row.hash_ids.as_deref() else {
            return Err(Error::usage(format!(
                "trace line {line_no} is missing hash_ids (in {path}; every row needs a hash_ids array)"
            )));
        };
        let capacity = raw_hash_ids
            .len()
            .checked_mul(self.trace_block_size as usize)
            .ok_or_else(|| {
                Error::usage(format!(
                    "trace line {line_no} synthesized capacity overflow (in {path})"
                ))
            })?;
        // Mooncake's input_length counts the whole prompt, which may exceed the hashed part;
        // only the hashed part can be synthesised, so longer prompts are cut to it.
        let input_length = row.input_length.unwrap_or(capacity).min(capacity);
        let Some(output_length) = row.output_length else {
            return Err(Error::usage(format!(
                "trace line {line_no} is missing output_length (in {path}; also accepted as output_tokens)"
            )));
        };
        if let Some(U32Count(count)) = row.output_token_ids {
            if count != output_length {
                return Err(Error::usage(format!(
                    "trace line {line_no} output_length {output_length} does not match output_token_ids length {count} (in {path})"
                )));
            }
        }

        let session_idx = match row.session_id.take() {
            Some(id) => self.named_session(line_no, id, row.timestamp),
            None => self.auto_session(line_no, row.timestamp),
        };
        let turn_idx = self.sessions[session_idx].turns.len();
        let delay_ms = self.delay_for(line_no, session_idx, turn_idx, row.timestamp, row.delay)?;

        if input_length == 0 {
            let cause = if raw_hash_ids.is_empty() {
                EmptyPromptCause::NoHashIds
            } else {
                EmptyPromptCause::ZeroInputLength
            };
            let earlier = matches!(self.first_empty_prompt, Some((s, t, _, _)) if (s, t) <= (session_idx, turn_idx));
            if !earlier {
                self.first_empty_prompt = Some((session_idx, turn_idx, line_no, cause));
            }
        }

        self.interned.clear();
        for &raw in raw_hash_ids {
            let id = self.interner.intern(raw).ok_or_else(|| {
                Error::usage(format!(
                    "trace contains more unique hash IDs than u32 can represent (at line {line_no} of {path})"
                ))
            })?;
            self.interned.push(id);
        }
        let prompt = self
            .arena
            .push(self.interned.iter().copied(), self.trace_block_size);
        let policy_class = row
            .policy_class
            .take()
            .map(|class| self.policy_class(class));

        self.sessions[session_idx].turns.push(Turn {
            input_length,
            max_output_tokens: output_length,
            delay_ms,
            prompt,
            priority: row.priority.unwrap_or(0),
            strict_priority: row.strict_priority.unwrap_or(0),
            policy_class,
        });
        if let (Some(timestamp), true) = (row.timestamp, turn_idx > 0) {
            self.later_timestamps_ms.insert(session_idx, timestamp);
        }
        Ok(())
    }

    /// The shared spelling of a policy class.
    fn policy_class(&mut self, class: String) -> Arc<str> {
        if let Some(known) = self.policy_classes.get(class.as_str()) {
            return Arc::clone(known);
        }
        let class: Arc<str> = class.into();
        self.policy_classes.insert(Arc::clone(&class));
        class
    }

    /// The session a row with `session_id: id` belongs to, created if new. An explicit id equal
    /// to an earlier line's automatic id joins that session (a reference quirk kept on purpose).
    fn named_session(&mut self, line_no: usize, id: String, timestamp_ms: Option<f64>) -> usize {
        if let Some(line) = auto_session_line(&id) {
            if let Some(idx) = self.auto_session_of_line(line) {
                return idx;
            }
        }
        if let Some(&idx) = self.named_sessions.get(&id) {
            return idx;
        }
        let idx = self.new_session(SessionId::from(id.as_str()), timestamp_ms);
        self.named_sessions.insert(id, idx);
        self.named_first_lines.push((idx, line_no));
        idx
    }

    /// The session a row without `session_id` on `line` created, if one did.
    fn auto_session_of_line(&self, line: usize) -> Option<usize> {
        let first_line = |idx: usize| match &self.sessions[idx].id {
            SessionId::Request(line) => *line as usize,
            SessionId::Named(_) => {
                let pos = self
                    .named_first_lines
                    .binary_search_by_key(&idx, |&(i, _)| i)
                    .expect("every named session has its first line");
                self.named_first_lines[pos].1
            }
        };
        // Sessions are created in line order, so their first lines increase.
        let (mut low, mut high) = (0, self.sessions.len());
        while low < high {
            let mid = low + (high - low) / 2;
            if first_line(mid) < line {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        (low < self.sessions.len() && self.sessions[low].id == SessionId::Request(line as u64))
            .then_some(low)
    }

    /// The session of a row without `session_id` on line `line_no`: `request_<line_no>`, unless
    /// an earlier row named a session exactly that.
    fn auto_session(&mut self, line_no: usize, timestamp_ms: Option<f64>) -> usize {
        if !self.named_sessions.is_empty() {
            if let Some(&idx) = self.named_sessions.get(&format!("request_{line_no}")) {
                return idx;
            }
        }
        self.new_session(SessionId::Request(line_no as u64), timestamp_ms)
    }

    /// Appends a session whose first row has `timestamp_ms`.
    fn new_session(&mut self, id: SessionId, timestamp_ms: Option<f64>) -> usize {
        self.sessions.push(Session {
            id,
            first_timestamp_ms: timestamp_ms,
            turns: Turns::new(),
        });
        self.sessions.len() - 1
    }

    /// The last timestamp seen on the rows of session `idx` so far.
    fn last_timestamp_ms(&self, idx: usize) -> Option<f64> {
        self.later_timestamps_ms
            .get(&idx)
            .copied()
            .or(self.sessions[idx].first_timestamp_ms)
    }

    /// The delay after the previous turn: explicit `delay`, else the timestamp gap to the
    /// session's previous timestamped row, else 0. The first turn may only say `delay: 0`.
    fn delay_for(
        &self,
        line_no: usize,
        session_idx: usize,
        turn_idx: usize,
        timestamp_ms: Option<f64>,
        explicit_delay_ms: Option<f64>,
    ) -> Result<f64> {
        let path = self.path;
        let session = &self.sessions[session_idx].id;
        if turn_idx == 0 {
            let delay = explicit_delay_ms.unwrap_or(0.0);
            if delay != 0.0 {
                return Err(Error::usage(format!(
                    "trace line {line_no} sets delay on the first turn of session {session} (in {path}; delay {delay} would have no previous turn to follow)"
                )));
            }
            return Ok(0.0);
        }
        let (delay, source) = match (explicit_delay_ms, timestamp_ms) {
            (Some(delay), _) => (delay, String::from("its delay field")),
            (None, Some(timestamp)) => {
                let Some(previous) = self.last_timestamp_ms(session_idx) else {
                    return Err(Error::usage(format!(
                        "trace line {line_no} for session {session} cannot infer delay without a previous timestamp (in {path}; give this row a delay, or the session's earlier rows timestamps)"
                    )));
                };
                (
                    timestamp - previous,
                    format!(
                        "timestamp {timestamp} minus the session's previous timestamp {previous}"
                    ),
                )
            }
            (None, None) => (0.0, String::new()),
        };
        if !delay.is_finite() || delay < 0.0 {
            return Err(Error::usage(format!(
                "trace line {line_no} has invalid delay {delay} (in {path}; from {source}; delays must be finite and non-negative)"
            )));
        }
        Ok(delay)
    }

    fn finish(mut self) -> Result<Workload> {
        let path = self.path;
        if self.sessions.is_empty() {
            return Err(Error::usage(format!(
                "trace file {path} did not contain any requests"
            )));
        }
        if let Some((session_idx, turn_idx, line_no, cause)) = self.first_empty_prompt {
            let why = match cause {
                EmptyPromptCause::NoHashIds => {
                    "hash_ids is empty, so no prompt tokens can be synthesised"
                }
                EmptyPromptCause::ZeroInputLength => "input_length is 0",
            };
            return Err(Error::usage(format!(
                "session {} turn {turn_idx} must have a positive input_length (line {line_no} of {path}: {why})",
                self.sessions[session_idx].id
            )));
        }
        // What only reading needed goes before the arena is shared (the peak is at the end).
        drop(self.interner);
        drop(self.named_sessions);
        drop(self.later_timestamps_ms);
        self.arena.share(&mut self.sessions);
        Ok(Workload {
            sessions: self.sessions,
            ..Workload::default()
        })
    }
}

/// The line `L` if `id` is exactly the automatic id `request_<L>` of some line (canonical
/// decimal, no sign or leading zero).
fn auto_session_line(id: &str) -> Option<usize> {
    let digits = id.strip_prefix("request_")?;
    if digits.is_empty() || digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Rows of the usual shape, read without serde.
///
/// Almost every row of a real trace is an object of a few known fields with non-negative
/// integers, arrays of them and plain strings as values, and serde's general machinery costs
/// far more per byte on those than the scan needs. A row is taken here only if serde would
/// read it to exactly the same [`Row`]; a row that is not of that shape (another field, a
/// duplicate, `null`, a sign, a fraction or exponent, a leading zero, a number out of the
/// field's range, an escape or control character in a string, anything after the object) is
/// left to serde, which then gives its own result or its own error, so no result and no
/// message depends on which of the two read a row.
mod usual_row {
    use super::{Row, StringShape, U32Count};

    /// The row in `text` if it has the usual shape, with its hash ids read into `buffer` (a
    /// spare buffer to reuse, if any).
    pub(super) fn scan(text: &str, buffer: Option<Vec<u64>>) -> Option<Row> {
        let mut hash_ids = buffer.unwrap_or_default();
        hash_ids.clear();
        let mut row = Cursor { text, at: 0 }.row(&mut hash_ids)?;
        if row.hash_ids.is_some() {
            row.hash_ids = Some(hash_ids);
        }
        Some(row)
    }

    /// A position in one line; every method returns `None` as soon as the line leaves the
    /// usual shape.
    struct Cursor<'t> {
        text: &'t str,
        at: usize,
    }

    impl<'t> Cursor<'t> {
        fn row(&mut self, hash_ids: &mut Vec<u64>) -> Option<Row> {
            let mut row = Row {
                request_id: None,
                session_id: None,
                input_length: None,
                output_length: None,
                output_token_ids: None,
                hash_ids: None,
                timestamp: None,
                delay: None,
                priority: None,
                strict_priority: None,
                policy_class: None,
            };
            // One bit per field, shared by a name and its alias: serde rejects a field given twice.
            let mut seen = 0u16;
            self.skip_whitespace();
            self.expect(b'{')?;
            self.skip_whitespace();
            if self.peek() == Some(b'}') {
                self.at += 1;
            } else {
                loop {
                    let key = self.plain_string()?;
                    self.skip_whitespace();
                    self.expect(b':')?;
                    self.skip_whitespace();
                    let bit = match key {
                        "hash_ids" => {
                            self.integers(|id| {
                                hash_ids.push(id);
                                Some(())
                            })?;
                            // The ids themselves are in `hash_ids`; `scan` puts them here.
                            row.hash_ids = Some(Vec::new());
                            1 << 0
                        }
                        "timestamp" | "created_time" => {
                            row.timestamp = Some(self.integer()? as f64);
                            1 << 1
                        }
                        "input_length" | "input_tokens" => {
                            row.input_length = Some(usize::try_from(self.integer()?).ok()?);
                            1 << 2
                        }
                        "output_length" | "output_tokens" => {
                            row.output_length = Some(usize::try_from(self.integer()?).ok()?);
                            1 << 3
                        }
                        "session_id" => {
                            row.session_id = Some(self.plain_string()?.to_owned());
                            1 << 4
                        }
                        "delay" | "delay_ms" => {
                            row.delay = Some(self.integer()? as f64);
                            1 << 5
                        }
                        "request_id" => {
                            self.plain_string()?;
                            row.request_id = Some(StringShape);
                            1 << 6
                        }
                        "output_token_ids" => {
                            let mut count = 0;
                            self.integers(|id| {
                                u32::try_from(id).ok()?;
                                count += 1;
                                Some(())
                            })?;
                            row.output_token_ids = Some(U32Count(count));
                            1 << 7
                        }
                        "priority" => {
                            row.priority = Some(i32::try_from(self.integer()?).ok()?);
                            1 << 8
                        }
                        "strict_priority" => {
                            row.strict_priority = Some(u32::try_from(self.integer()?).ok()?);
                            1 << 9
                        }
                        "policy_class" => {
                            row.policy_class = Some(self.plain_string()?.to_owned());
                            1 << 10
                        }
                        _ => return None,
                    };
                    if seen & bit != 0 {
                        return None;
                    }
                    seen |= bit;
                    self.skip_whitespace();
                    match self.next()? {
                        b',' => self.skip_whitespace(),
                        b'}' => break,
                        _ => return None,
                    }
                }
            }
            self.skip_whitespace();
            (self.at == self.text.len()).then_some(row)
        }

        fn peek(&self) -> Option<u8> {
            self.text.as_bytes().get(self.at).copied()
        }

        fn next(&mut self) -> Option<u8> {
            let byte = self.peek()?;
            self.at += 1;
            Some(byte)
        }

        fn expect(&mut self, byte: u8) -> Option<()> {
            (self.next()? == byte).then_some(())
        }

        /// Skips JSON's whitespace (exactly the four bytes serde skips).
        fn skip_whitespace(&mut self) {
            self.at = whitespace_end(self.text.as_bytes(), self.at);
        }

        /// A string without escapes or control characters (which serde reads as written).
        fn plain_string(&mut self) -> Option<&'t str> {
            self.expect(b'"')?;
            let start = self.at;
            loop {
                match self.next()? {
                    b'"' => break,
                    b'\\' | 0..=0x1f => return None,
                    _ => {}
                }
            }
            // Both ends are ASCII quotes, so they are character boundaries.
            self.text.get(start..self.at - 1)
        }

        /// A non-negative integer as serde reads it into a `u64`: digits without a leading zero,
        /// and not followed by a fraction or exponent (the caller's check of the next byte
        /// rejects those, and digits after a leading zero).
        fn integer(&mut self) -> Option<u64> {
            let (value, end) = integer_at(self.text.as_bytes(), self.at)?;
            self.at = end;
            Some(value)
        }

        /// An array of non-negative integers, each handed to `each`. The position is kept in a
        /// local while the elements are read: this is the loop that reads every hash id.
        fn integers(&mut self, mut each: impl FnMut(u64) -> Option<()>) -> Option<()> {
            let bytes = self.text.as_bytes();
            if bytes.get(self.at) != Some(&b'[') {
                return None;
            }
            let mut at = whitespace_end(bytes, self.at + 1);
            if bytes.get(at) == Some(&b']') {
                self.at = at + 1;
                return Some(());
            }
            loop {
                let (value, end) = integer_at(bytes, at)?;
                each(value)?;
                at = whitespace_end(bytes, end);
                match bytes.get(at) {
                    Some(b',') => at = whitespace_end(bytes, at + 1),
                    Some(b']') => {
                        self.at = at + 1;
                        return Some(());
                    }
                    _ => return None,
                }
            }
        }
    }

    /// The position of the first byte at or after `at` that is not JSON whitespace.
    #[inline(always)]
    fn whitespace_end(bytes: &[u8], mut at: usize) -> usize {
        while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            at += 1;
        }
        at
    }

    /// The integer [`Cursor::integer`] reads at `at`, and the position after its digits.
    #[inline(always)]
    fn integer_at(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
        let first = bytes.get(at)?.wrapping_sub(b'0');
        if first > 9 {
            return None;
        }
        let mut value = u64::from(first);
        let mut at = at + 1;
        if value == 0 {
            return Some((0, at));
        }
        // Nineteen digits always fit in a u64, so only a twentieth needs overflow checks.
        let unchecked_end = bytes.len().min(at + 18);
        for &byte in &bytes[at..unchecked_end] {
            let digit = byte.wrapping_sub(b'0');
            if digit > 9 {
                return Some((value, at));
            }
            value = value * 10 + u64::from(digit);
            at += 1;
        }
        while let Some(&byte) = bytes.get(at) {
            let digit = byte.wrapping_sub(b'0');
            if digit > 9 {
                break;
            }
            value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
            at += 1;
        }
        Some((value, at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A uniquely named file under the system temp dir, removed on drop.
    struct TempTrace(PathBuf);

    impl TempTrace {
        fn new(bytes: &[u8]) -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = std::env::temp_dir()
                .join(format!("dynosim-mooncake-{}-{n}.jsonl", std::process::id()));
            std::fs::write(&path, bytes).unwrap();
            Self(path)
        }
    }

    impl Drop for TempTrace {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn load(text: &str) -> Result<Workload> {
        load_bytes(text.as_bytes(), 512)
    }

    fn load_bytes(bytes: &[u8], block: u32) -> Result<Workload> {
        let file = TempTrace::new(bytes);
        read_mooncake(&file.0, block)
    }

    fn err(text: &str) -> String {
        let error = load(text).expect_err("trace should be rejected");
        assert_eq!(error.exit_code(), 2, "{error}");
        error.to_string()
    }

    fn assert_starts(message: &str, start: &str) {
        assert!(
            message.starts_with(start),
            "message {message:?} should start with {start:?}"
        );
    }

    fn ids(turn: &Turn) -> &[u32] {
        turn.prompt.ids().expect("trace prompts are hash ids")
    }

    #[test]
    fn plain_rows_become_single_turn_sessions() {
        let w = load(
            "{\"timestamp\":5,\"input_length\":600,\"output_length\":3,\"hash_ids\":[7,8]}\n\
             {\"timestamp\":9,\"input_length\":10,\"output_length\":0,\"hash_ids\":[8]}\n",
        )
        .unwrap();
        assert_eq!(w.sessions.len(), 2);
        let (a, b) = (&w.sessions[0], &w.sessions[1]);
        assert_eq!(
            (a.id.to_string(), a.first_timestamp_ms),
            ("request_1".to_string(), Some(5.0))
        );
        assert_eq!(
            (b.id.to_string(), b.first_timestamp_ms),
            ("request_2".to_string(), Some(9.0))
        );
        assert_eq!(a.turns[0].input_length, 600);
        assert_eq!(a.turns[0].max_output_tokens, 3);
        assert_eq!(b.turns[0].max_output_tokens, 0);
        assert_eq!(ids(&a.turns[0]), &[0, 1]);
        assert_eq!(ids(&b.turns[0]), &[1]);
        assert!(matches!(
            &a.turns[0].prompt,
            crate::workload::Prompt::HashIds(prompt) if prompt.block_size() == 512
        ));
        assert_eq!((a.turns[0].priority, a.turns[0].strict_priority), (0, 0));
        assert_eq!(a.turns[0].policy_class, None);
        assert_eq!(a.turns[0].prompt.tokens(600).len(), 600);
    }

    #[test]
    fn aliases_are_accepted() {
        let w = load(
            "{\"session_id\":\"s\",\"input_tokens\":4,\"output_tokens\":2,\"created_time\":12.5,\"hash_ids\":[1]}\n\
             {\"session_id\":\"s\",\"input_tokens\":8,\"output_tokens\":1,\"delay_ms\":3.5,\"hash_ids\":[1,2]}\n",
        )
        .unwrap();
        let s = &w.sessions[0];
        assert_eq!(s.first_timestamp_ms, Some(12.5));
        assert_eq!(
            (s.turns[0].input_length, s.turns[0].max_output_tokens),
            (4, 2)
        );
        assert_eq!(
            (s.turns[1].input_length, s.turns[1].max_output_tokens),
            (8, 1)
        );
        assert_eq!(s.turns[1].delay_ms, 3.5);
    }

    #[test]
    fn input_length_is_clamped_to_the_hashed_capacity() {
        let w = load("{\"input_length\":1000,\"output_length\":1,\"hash_ids\":[1]}\n").unwrap();
        assert_eq!(w.sessions[0].turns[0].input_length, 512);
        // Absent input_length means the whole capacity.
        let w = load("{\"output_length\":1,\"hash_ids\":[1,2,3]}").unwrap();
        assert_eq!(w.sessions[0].turns[0].input_length, 1536);
        // The block size scales the capacity; surplus ids are kept (and interned) anyway.
        let w = load_bytes(
            b"{\"input_length\":250,\"output_length\":1,\"hash_ids\":[1,2,3,4]}",
            100,
        )
        .unwrap();
        assert_eq!(w.sessions[0].turns[0].input_length, 250);
        assert_eq!(ids(&w.sessions[0].turns[0]).len(), 4);
    }

    #[test]
    fn hash_ids_are_interned_by_full_64_bit_value() {
        let w = load(
            "{\"output_length\":1,\"hash_ids\":[4294967297,1]}\n{\"output_length\":1,\"hash_ids\":[1,18446744073709551615,4294967297]}",
        )
        .unwrap();
        assert_eq!(ids(&w.sessions[0].turns[0]), &[0, 1]);
        assert_eq!(ids(&w.sessions[1].turns[0]), &[1, 2, 0]);
    }

    #[test]
    fn sessions_group_rows_in_file_order_with_delays() {
        let w = load(
            "{\"session_id\":\"a\",\"timestamp\":100,\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"session_id\":\"b\",\"output_length\":1,\"hash_ids\":[2]}\n\
             {\"session_id\":\"a\",\"timestamp\":130,\"output_length\":1,\"hash_ids\":[1,3]}\n\
             {\"session_id\":\"a\",\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"session_id\":\"a\",\"timestamp\":175.5,\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"session_id\":\"a\",\"timestamp\":50,\"delay\":7,\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"session_id\":\"b\",\"delay\":2,\"output_length\":1,\"hash_ids\":[2]}\n\
             {\"session_id\":\"\",\"delay\":0,\"output_length\":1,\"hash_ids\":[2]}\n",
        )
        .unwrap();
        let names: Vec<String> = w.sessions.iter().map(|s| s.id.to_string()).collect();
        assert_eq!(names, ["a", "b", ""]);
        let delays = |s: &Session| s.turns.iter().map(|t| t.delay_ms).collect::<Vec<_>>();
        // Timestamp gaps use the session's last timestamped row; rows without one add no delay
        // and do not move the base; an explicit delay wins over the timestamp.
        assert_eq!(delays(&w.sessions[0]), [0.0, 30.0, 0.0, 45.5, 7.0]);
        assert_eq!(w.sessions[0].first_timestamp_ms, Some(100.0));
        assert_eq!(delays(&w.sessions[1]), [0.0, 2.0]);
        assert_eq!(w.sessions[1].first_timestamp_ms, None);
        assert_eq!(delays(&w.sessions[2]), [0.0]);
    }

    #[test]
    fn explicit_request_1_merges_with_the_auto_session_of_line_1() {
        let w = load(
            "{\"timestamp\":0,\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"timestamp\":4,\"output_length\":1,\"hash_ids\":[2]}\n\
             {\"session_id\":\"request_1\",\"timestamp\":10,\"output_length\":1,\"hash_ids\":[3]}\n",
        )
        .unwrap();
        assert_eq!(w.sessions.len(), 2);
        assert_eq!(w.sessions[0].id, "request_1");
        assert_eq!(w.sessions[0].turns.len(), 2);
        assert_eq!(w.sessions[0].turns[1].delay_ms, 10.0);
        // An explicit id first, then the auto id of a later line merges into it.
        let w = load(
            "{\"session_id\":\"request_2\",\"timestamp\":1,\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"timestamp\":3,\"output_length\":1,\"hash_ids\":[1]}\n",
        )
        .unwrap();
        assert_eq!(w.sessions.len(), 1);
        assert_eq!(w.sessions[0].turns[1].delay_ms, 2.0);
        // Only the exact spelling merges; a line that was blank or named has no automatic id.
        let w = load(
            "{\"output_length\":1,\"hash_ids\":[1]}\n\n{\"session_id\":\"x\",\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"session_id\":\"request_01\",\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"session_id\":\"request_2\",\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"session_id\":\"request_3\",\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"session_id\":\"request_1\",\"output_length\":1,\"hash_ids\":[1]}\n\
             {\"session_id\":\"request_2\",\"output_length\":1,\"hash_ids\":[1]}\n",
        )
        .unwrap();
        let names: Vec<String> = w.sessions.iter().map(|s| s.id.to_string()).collect();
        let shape: Vec<(&str, usize)> = names
            .iter()
            .zip(&w.sessions)
            .map(|(name, s)| (name.as_str(), s.turns.len()))
            .collect();
        assert_eq!(
            shape,
            [
                ("request_1", 2),
                ("x", 1),
                ("request_01", 1),
                ("request_2", 2),
                ("request_3", 1)
            ]
        );
    }

    #[test]
    fn blank_lines_are_skipped_but_counted_and_crlf_works() {
        let w = load("\n  \t\r\n{\"output_length\":1,\"hash_ids\":[1]}\r\n\r\n{\"output_length\":2,\"hash_ids\":[1]}").unwrap();
        let names: Vec<String> = w.sessions.iter().map(|s| s.id.to_string()).collect();
        assert_eq!(names, ["request_3", "request_5"]);
        let message = err("\n\n{\"hash_ids\":[1]}\n");
        assert_starts(&message, "trace line 3 is missing output_length");
    }

    #[test]
    fn positional_array_rows_are_accepted_like_the_reference() {
        let w = load("[null,\"s\",5,1,null,[1],0]").unwrap();
        let s = &w.sessions[0];
        assert_eq!(
            (s.id.to_string(), s.first_timestamp_ms),
            ("s".to_string(), Some(0.0))
        );
        assert_eq!(
            (s.turns[0].input_length, s.turns[0].max_output_tokens),
            (5, 1)
        );
    }

    #[test]
    fn router_hints_are_parsed() {
        let w = load("{\"output_length\":1,\"hash_ids\":[1],\"priority\":-3,\"strict_priority\":7,\"policy_class\":\"gold\",\"routing_constraints\":5,\"extra\":{\"x\":[1]}}").unwrap();
        let t = &w.sessions[0].turns[0];
        assert_eq!(
            (t.priority, t.strict_priority, t.policy_class.as_deref()),
            (-3, 7, Some("gold"))
        );
    }

    #[test]
    fn authored_output_tokens_are_checked_for_length_only() {
        let w = load("{\"request_id\":\"r\",\"output_length\":3,\"output_token_ids\":[5,6,7],\"hash_ids\":[1]}").unwrap();
        assert_eq!(w.sessions[0].turns[0].max_output_tokens, 3);
        assert_starts(
            &err("{\"output_length\":3,\"output_token_ids\":[5,6],\"hash_ids\":[1]}"),
            "trace line 1 output_length 3 does not match output_token_ids length 2",
        );
        assert_starts(
            &err("{\"output_length\":1,\"output_token_ids\":[-1],\"hash_ids\":[1]}"),
            "failed to parse line 1 from ",
        );
    }

    #[test]
    fn missing_required_fields() {
        assert_starts(
            &err("{\"output_length\":1}"),
            "trace line 1 is missing hash_ids",
        );
        assert_starts(
            &err("{\"output_length\":1,\"hash_ids\":null}"),
            "trace line 1 is missing hash_ids",
        );
        assert_starts(
            &err("{\"hash_ids\":[1],\"output_length\":null}"),
            "trace line 1 is missing output_length",
        );
        // hash_ids is checked first.
        assert_starts(&err("{}"), "trace line 1 is missing hash_ids");
    }

    #[test]
    fn json_errors_keep_the_reference_prefix_and_add_details() {
        let file = TempTrace::new(b"{\"output_length\":1,\"hash_ids\":[1]}\n{\"output_length\":1,\"hash_ids\":[1],\"priority\":\"high\"}\n");
        let message = read_mooncake(&file.0, 512).unwrap_err().to_string();
        let prefix = format!("failed to parse line 2 from {} as JSON: ", file.0.display());
        assert_starts(&message, &prefix);
        let detail = &message[prefix.len()..];
        assert_eq!(
            detail,
            "invalid type: string \"high\", expected i32 at column 51 (field priority)"
        );

        for (line, field) in [
            (
                "{\"output_length\":1.5,\"hash_ids\":[1]}",
                Some("output_length"),
            ),
            (
                "{\"output_length\":-1,\"hash_ids\":[1]}",
                Some("output_length"),
            ),
            ("{\"output_length\":1,\"hash_ids\":[-1]}", Some("hash_ids")),
            ("{\"output_length\":1,\"hash_ids\":[1.5]}", Some("hash_ids")),
            (
                "{\"output_length\":1,\"hash_ids\":[18446744073709551616]}",
                Some("hash_ids"),
            ),
            (
                "{\"output_length\":1,\"hash_ids\":[1],\"session_id\":5}",
                Some("session_id"),
            ),
            (
                "{\"output_length\":1,\"hash_ids\":[1],\"request_id\":5}",
                Some("request_id"),
            ),
            (
                "{\"output_length\":1,\"hash_ids\":[1],\"timestamp\":\"0\"}",
                Some("timestamp"),
            ),
            (
                "{\"output_length\":1,\"hash_ids\":[1],\"created_time\":\"0\"}",
                Some("created_time"),
            ),
            (
                "{\"output_length\":1,\"hash_ids\":[1],\"priority\":1.5}",
                Some("priority"),
            ),
            (
                "{\"output_length\":1,\"hash_ids\":[1],\"strict_priority\":-1}",
                Some("strict_priority"),
            ),
            (
                "{\"output_length\":1,\"hash_ids\":[1],\"policy_class\":3}",
                Some("policy_class"),
            ),
            (
                "{\"output_length\":1,\"hash_ids\":[1],\"timestamp\":NaN}",
                None,
            ),
            (
                "{\"output_length\":1,\"output_length\":1,\"hash_ids\":[1]}",
                None,
            ),
            (
                "{\"output_length\":1,\"output_tokens\":1,\"hash_ids\":[1]}",
                None,
            ),
            (
                "{\"input_length\":1,\"input_tokens\":1,\"output_length\":1,\"hash_ids\":[1]}",
                None,
            ),
            (
                "{\"delay\":0,\"delay_ms\":0,\"output_length\":1,\"hash_ids\":[1]}",
                None,
            ),
            ("{\"output_length\":1,\"hash_ids\":[1]} x", None),
            (
                "{\"output_length\":1,\"hash_ids\":[1]}{\"output_length\":1,\"hash_ids\":[1]}",
                None,
            ),
            ("{\"output_length\":1,", None),
        ] {
            let message = err(line);
            assert_starts(&message, "failed to parse line 1 from ");
            assert!(message.contains(" as JSON: "), "{message}");
            if let Some(field) = field {
                assert!(
                    message.ends_with(&format!("(field {field})")),
                    "{line}: {message}"
                );
            }
        }
        assert!(
            err("{\"output_length\":1,\"output_tokens\":1,\"hash_ids\":[1]}")
                .contains("duplicate field `output_length`")
        );
        assert!(err("5").contains("expected a JSON object (one trace row)"));
        for (line, kind) in [
            ("[1,2,3]", "an array"),
            ("[1]", "an array"),
            ("\"x\"", "a string"),
        ] {
            assert!(
                err(line).ends_with(&format!(
                    "expected a JSON object (one trace row), got {kind}"
                )),
                "{line}: {}",
                err(line)
            );
        }
        let bom = err("\u{feff}{\"output_length\":1,\"hash_ids\":[1]}");
        assert_starts(&bom, "failed to read line 1 from ");
        assert!(
            bom.ends_with(
                "starts with a UTF-8 byte order mark (BOM); save it as UTF-8 without a BOM"
            ),
            "{bom}"
        );
    }

    #[test]
    fn zero_length_prompts_are_rejected_after_parsing() {
        assert_starts(
            &err("{\"output_length\":1,\"hash_ids\":[]}"),
            "session request_1 turn 0 must have a positive input_length",
        );
        assert_starts(
            &err("{\"input_length\":0,\"output_length\":1,\"hash_ids\":[1]}"),
            "session request_1 turn 0 must have a positive input_length",
        );
        // A later parse error wins: the reference validates prompts once the file has loaded.
        assert_starts(
            &err(
                "{\"output_length\":1,\"hash_ids\":[]}\n{\"output_length\":\"x\",\"hash_ids\":[1]}",
            ),
            "failed to parse line 2 from ",
        );
        // Reported in session order, then turn order (reference: `session s turn 1`).
        assert_starts(
            &err(
                "{\"session_id\":\"s\",\"timestamp\":0,\"output_length\":1,\"hash_ids\":[1]}\n\
                  {\"session_id\":\"t\",\"output_length\":1,\"hash_ids\":[]}\n\
                  {\"session_id\":\"s\",\"delay\":1,\"output_length\":1,\"hash_ids\":[]}\n",
            ),
            "session s turn 1 must have a positive input_length",
        );
    }

    #[test]
    fn delay_errors() {
        assert_starts(
            &err("{\"session_id\":\"s\",\"delay\":5,\"output_length\":1,\"hash_ids\":[1]}"),
            "trace line 1 sets delay on the first turn of session s",
        );
        assert_starts(
            &err("{\"delay\":-5,\"output_length\":1,\"hash_ids\":[1]}"),
            "trace line 1 sets delay on the first turn of session request_1",
        );
        // delay 0 (and -0) on a first turn is fine.
        load("{\"delay\":0,\"output_length\":1,\"hash_ids\":[1]}\n{\"delay\":-0.0,\"output_length\":1,\"hash_ids\":[1]}").unwrap();
        assert_starts(
            &err("{\"session_id\":\"s\",\"output_length\":1,\"hash_ids\":[1]}\n{\"session_id\":\"s\",\"delay\":-5,\"output_length\":1,\"hash_ids\":[1]}"),
            "trace line 2 has invalid delay -5",
        );
        assert_starts(
            &err("{\"session_id\":\"s\",\"timestamp\":10,\"output_length\":1,\"hash_ids\":[1]}\n\n{\"session_id\":\"s\",\"timestamp\":4.5,\"output_length\":1,\"hash_ids\":[1]}"),
            "trace line 3 has invalid delay -5.5",
        );
        assert_starts(
            &err("{\"session_id\":\"s\",\"timestamp\":-1.7e308,\"output_length\":1,\"hash_ids\":[1]}\n{\"session_id\":\"s\",\"timestamp\":1.7e308,\"output_length\":1,\"hash_ids\":[1]}"),
            "trace line 2 has invalid delay inf",
        );
        assert_starts(
            &err("{\"session_id\":\"s\",\"output_length\":1,\"hash_ids\":[1]}\n{\"session_id\":\"s\",\"timestamp\":3,\"output_length\":1,\"hash_ids\":[1]}"),
            "trace line 2 for session s cannot infer delay without a previous timestamp",
        );
    }

    #[test]
    fn file_level_errors() {
        let message = load_bytes(b"", 512).unwrap_err().to_string();
        assert!(
            message.starts_with("trace file ")
                && message.ends_with(" did not contain any requests"),
            "{message}"
        );
        let message = load_bytes(b"\n \n\r\n", 512).unwrap_err().to_string();
        assert!(
            message.ends_with(" did not contain any requests"),
            "{message}"
        );

        let missing = std::env::temp_dir().join("dynosim-definitely-missing.jsonl");
        let message = read_mooncake(&missing, 512).unwrap_err().to_string();
        assert_starts(
            &message,
            &format!("failed to open trace file {}: ", missing.display()),
        );

        let message = read_mooncake(&std::env::temp_dir(), 512)
            .unwrap_err()
            .to_string();
        assert_starts(&message, "failed to read line 1 from ");

        let message = load_bytes(
            b"{\"output_length\":1,\"hash_ids\":[1]}\n{\"x\":\"\xff\"}\n",
            512,
        )
        .unwrap_err()
        .to_string();
        assert_starts(&message, "failed to read line 2 from ");

        // gzip magic bytes are not valid UTF-8
        let message = load_bytes(&[0x1f, 0x8b, 0x08, 0x00, b'\n'], 512)
            .unwrap_err()
            .to_string();
        assert_starts(&message, "failed to read line 1 from ");

        let message = load_bytes(b"{\"output_length\":1,\"hash_ids\":[1]}", 0)
            .unwrap_err()
            .to_string();
        assert_eq!(message, "trace_block_size must be greater than 0");
    }

    /// The Mooncake FAST'25 conversation trace, if the shared traces are present.
    fn conversation_trace() -> Option<PathBuf> {
        crate::shared_file("traces/conversation_trace.jsonl")
    }

    #[test]
    fn conversation_trace_loads() {
        let Some(path) = conversation_trace() else {
            return;
        };
        let start = std::time::Instant::now();
        let w = read_mooncake(&path, 512).unwrap();
        eprintln!("conversation_trace.jsonl loaded in {:?}", start.elapsed());
        assert_eq!(w.sessions.len(), 12_031);
        assert!(w
            .sessions
            .iter()
            .all(|s| s.turns.len() == 1 && s.first_timestamp_ms.is_some()));
        assert_eq!(w.sessions[0].first_timestamp_ms, Some(0.0));
        assert_eq!(
            w.sessions.last().unwrap().first_timestamp_ms,
            Some(3_536_999.0)
        );
        let turns = w.sessions.iter().map(|s| &s.turns[0]);
        let total_ids: usize = turns.clone().map(|t| ids(t).len()).sum();
        let max_id = turns
            .clone()
            .flat_map(|t| ids(t).iter().copied())
            .max()
            .unwrap();
        assert_eq!(max_id, 182_789); // the public ids are already dense and first-seen ordered
        assert!(total_ids > 280_000, "{total_ids}");
        assert_eq!(turns.clone().map(|t| t.input_length).min(), Some(891));
        assert_eq!(turns.clone().map(|t| t.input_length).max(), Some(126_195));
    }

    #[test]
    fn shared_mooncake_traces_and_fixtures_load() {
        for (name, sessions, turns) in [
            ("synthetic_trace.jsonl", 3_993, 3_993),
            ("fixtures/mooncake.jsonl", 2, 2),
            ("fixtures/mooncake_tiny.jsonl", 16, 16),
            ("fixtures/mooncake-delta.jsonl", 1, 2),
        ] {
            let Some(path) = crate::shared_file(&format!("traces/{name}")) else {
                continue;
            };
            let w = read_mooncake(&path, 512).unwrap();
            assert_eq!(w.sessions.len(), sessions, "{name}");
            assert_eq!(
                w.sessions.iter().map(|s| s.turns.len()).sum::<usize>(),
                turns,
                "{name}"
            );
            if name.ends_with("mooncake-delta.jsonl") {
                // The explicit delay (5) wins over the timestamp gap (10).
                assert_eq!(w.sessions[0].turns[1].delay_ms, 5.0);
            }
        }
    }

    /// A row's fields in comparable form (floats by their bits).
    #[allow(clippy::type_complexity)]
    fn row_fields(
        row: &Row,
    ) -> (
        bool,
        Option<String>,
        Option<usize>,
        Option<usize>,
        Option<usize>,
        Option<Vec<u64>>,
        Option<u64>,
        Option<u64>,
        Option<i32>,
        Option<u32>,
        Option<String>,
    ) {
        (
            row.request_id.is_some(),
            row.session_id.clone(),
            row.input_length,
            row.output_length,
            row.output_token_ids.as_ref().map(|count| count.0),
            row.hash_ids.clone(),
            row.timestamp.map(f64::to_bits),
            row.delay.map(f64::to_bits),
            row.priority,
            row.strict_priority,
            row.policy_class.clone(),
        )
    }

    /// `bytes` with `edits` applied (each an index, a byte and an operation: overwrite,
    /// remove or insert), checked with [`scanned_as_serde_reads`] when still UTF-8.
    fn scanned_as_serde_reads_after(
        mut bytes: Vec<u8>,
        edits: &[(proptest::sample::Index, u8, u8)],
    ) {
        for &(at, byte, op) in edits {
            if bytes.is_empty() {
                break;
            }
            let i = at.index(bytes.len());
            match op {
                0 => bytes[i] = byte,
                1 => {
                    bytes.remove(i);
                }
                _ => bytes.insert(i, byte),
            }
        }
        if let Ok(line) = std::str::from_utf8(&bytes) {
            scanned_as_serde_reads(line);
        }
    }

    /// Whether the scan takes `line`; where it does, serde must read the same row from it.
    fn scanned_as_serde_reads(line: &str) -> bool {
        let Some(scanned) = usual_row::scan(line, Some(vec![9, 9])) else {
            return false;
        };
        let parsed: Row = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("the scan took {line:?}, serde rejects it: {e}"));
        assert_eq!(row_fields(&scanned), row_fields(&parsed), "{line:?}");
        true
    }

    #[test]
    fn usual_rows_are_scanned_and_read_as_serde_reads_them() {
        for line in [
            "{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, \"hash_ids\": [0, 1, 2, 13]}",
            "{\"timestamp\":0,\"input_length\":600,\"output_length\":3,\"hash_ids\":[1,2]}",
            " \t{ \"hash_ids\" : [ ] , \"output_tokens\" :0 }\r ",
            "{}",
            "{ }",
            "{\"session_id\":\"s \u{e9}\u{1F600}\",\"delay_ms\":5,\"output_tokens\":2,\"output_token_ids\":[1,4294967295],\"hash_ids\":[3]}",
            "{\"request_id\":\"r\",\"created_time\":18446744073709551615,\"input_tokens\":3,\"output_length\":0,\"hash_ids\":[18446744073709551615],\"priority\":2147483647,\"strict_priority\":4294967295,\"policy_class\":\"\"}",
            "{\"delay\":9007199254740993,\"output_length\":1,\"hash_ids\":[0]}",
        ] {
            assert!(scanned_as_serde_reads(line), "{line:?} should be scanned");
        }
        for line in [
            "{\"output_length\":null,\"hash_ids\":[1]}",
            "{\"output_length\":-1,\"hash_ids\":[1]}",
            "{\"output_length\":-0,\"hash_ids\":[1]}",
            "{\"output_length\":1.5,\"hash_ids\":[1]}",
            "{\"output_length\":1e3,\"hash_ids\":[1]}",
            "{\"output_length\":1E3,\"hash_ids\":[1]}",
            "{\"output_length\":01,\"hash_ids\":[1]}",
            "{\"output_length\":1,\"hash_ids\":[00]}",
            "{\"output_length\":1,\"hash_ids\":[18446744073709551616]}",
            "{\"output_length\":1,\"hash_ids\":[1,]}",
            "{\"output_length\":1,\"hash_ids\":[1 2]}",
            "{\"output_length\":1,\"hash_ids\":[1],}",
            "{\"output_length\":1,\"hash_ids\":[1]} x",
            "{\"output_length\":1,\"hash_ids\":[1]}{}",
            "{\"output_length\":1,\"hash_ids\":[1]",
            "{\"output_length\":1,\"output_tokens\":1,\"hash_ids\":[1]}",
            "{\"hash_ids\":[1],\"hash_ids\":[1],\"output_length\":1}",
            "{\"output_length\":1,\"hash_ids\":[1],\"extra\":1}",
            "{\"output_length\":1,\"hash\\u005fids\":[1]}",
            "{\"output_length\":1,\"hash_ids\":[1],\"session_id\":\"a\\\"b\"}",
            "{\"output_length\":1,\"hash_ids\":[1],\"session_id\":\"a\tb\"}",
            "{\"output_length\":1,\"hash_ids\":[1],\"session_id\":5}",
            "{\"output_length\":1,\"hash_ids\":[1],\"priority\":2147483648}",
            "{\"output_length\":1,\"hash_ids\":[1],\"strict_priority\":4294967296}",
            "{\"output_length\":1,\"output_token_ids\":[4294967296],\"hash_ids\":[1]}",
            "{\"output_length\":1,\"hash_ids\":[1],\"timestamp\":1.0}",
            "{\"output_length\":1,\"hash_ids\":[1],\"timestamp\":18446744073709551616}",
            "{\"output_length\":1\u{a0},\"hash_ids\":[1]}",
            "{\"output_length\":1\u{c},\"hash_ids\":[1]}",
            "[null,\"s\",5,1,null,[1],0]",
            "\u{feff}{}",
            "",
            "{",
        ] {
            assert!(
                !scanned_as_serde_reads(line),
                "{line:?} should be left to serde"
            );
        }
    }

    mod never_panics {
        use super::*;
        use proptest::prelude::*;

        const VALID: &[&str] = &[
            "{\"timestamp\":0,\"input_length\":600,\"output_length\":3,\"hash_ids\":[1,2]}",
            "{\"session_id\":\"s\",\"timestamp\":5,\"output_length\":1,\"hash_ids\":[1]}",
            "{\"session_id\":\"s\",\"delay_ms\":5,\"output_tokens\":2,\"output_token_ids\":[1,2],\"hash_ids\":[3]}",
            "{\"request_id\":\"r\",\"created_time\":1,\"input_tokens\":3,\"output_length\":0,\"hash_ids\":[9],\"priority\":1,\"strict_priority\":2,\"policy_class\":\"p\"}",
        ];

        /// Field names (the row's own, aliases, and others) for generated rows.
        const FIELDS: &[&str] = &[
            "hash_ids",
            "timestamp",
            "created_time",
            "input_length",
            "input_tokens",
            "output_length",
            "output_tokens",
            "session_id",
            "delay",
            "delay_ms",
            "request_id",
            "output_token_ids",
            "priority",
            "strict_priority",
            "policy_class",
            "other",
        ];
        /// Values of every shape the scan takes or leaves to serde.
        const VALUES: &[&str] = &[
            "0",
            "7",
            "01",
            "-1",
            "-0",
            "1.5",
            "1e3",
            "2147483647",
            "2147483648",
            "4294967295",
            "4294967296",
            "18446744073709551615",
            "18446744073709551616",
            "null",
            "true",
            "\"s\"",
            "\"\"",
            "\"a\\\"b\"",
            "\"\u{e9}\"",
            "[]",
            "[ ]",
            "[1,2]",
            "[ 0 , 3 ]",
            "[1,]",
            "[01]",
            "[-1]",
            "[1.0]",
            "[4294967296]",
            "{}",
            "[\"x\"]",
        ];
        const SPACES: &[&str] = &["", " ", "\t", "\r\n", "  "];

        proptest! {
            #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

            #[test]
            fn on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300), block in 0u32..1024) {
                let _ = load_bytes(&bytes, block);
            }

            #[test]
            fn on_mutated_valid_rows(
                picks in proptest::collection::vec(0..VALID.len(), 1..6),
                edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..8),
                block in 1u32..1024,
            ) {
                let mut bytes: Vec<u8> = picks.iter().flat_map(|&i| format!("{}\n", VALID[i]).into_bytes()).collect();
                for (at, byte, op) in edits {
                    if bytes.is_empty() { break; }
                    let i = at.index(bytes.len());
                    match op {
                        0 => bytes[i] = byte,
                        1 => { bytes.remove(i); }
                        _ => bytes.insert(i, byte),
                    }
                }
                if let Ok(w) = load_bytes(&bytes, block) {
                    for turn in w.sessions.iter().flat_map(|s| &s.turns) {
                        prop_assert!(turn.input_length >= 1);
                        prop_assert!(turn.delay_ms.is_finite() && turn.delay_ms >= 0.0);
                        prop_assert_eq!(turn.prompt.tokens(turn.input_length).len(), turn.input_length);
                    }
                }
            }

            #[test]
            fn scanned_rows_read_as_serde_reads_them(
                parts in proptest::collection::vec((0..FIELDS.len(), 0..VALUES.len(), 0..SPACES.len(), 0..SPACES.len()), 0..8),
                edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..3),
            ) {
                let mut line = String::from("{");
                for (i, &(field, value, before, after)) in parts.iter().enumerate() {
                    if i > 0 {
                        line.push(',');
                    }
                    line.push_str(&format!("{}\"{}\"{}:{}{}", SPACES[before], FIELDS[field], SPACES[after], SPACES[before], VALUES[value]));
                }
                line.push('}');
                scanned_as_serde_reads_after(line.into_bytes(), &edits);
            }

            #[test]
            fn mutated_valid_rows_scan_as_serde_reads_them(
                pick in 0..VALID.len(),
                edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..4),
            ) {
                scanned_as_serde_reads_after(VALID[pick].as_bytes().to_vec(), &edits);
            }
        }
    }
}
