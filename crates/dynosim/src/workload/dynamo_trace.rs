//! The `dynamo` trace reader: request traces (`dynamo.request.trace.v1`) recorded by Dynamo's
//! frontend, in one or more `.jsonl` or gzip-compressed (`.gz`) shards.
//!
//! Each `request_end` record carries the request's arrival, duration, output length and the
//! chained hashes of its prompt blocks (`replay`). Records of all shards are pooled, then
//! lowered like the reference does:
//! - **standard** (no record has `agent_context`): one single-turn request per record, at its
//!   arrival time relative to the earliest;
//! - **agentic** (every record has `agent_context`): requests of a session wait for their
//!   predecessor, child sessions hang off their parent (through the explicit Claude tool span
//!   when there is one, else by time), and each dependent request keeps its recorded gap after
//!   the last dependency ended. Mixing both kinds is an error.
//!
//! The block size is the one embedded in the records; all records must agree on it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use super::agentic::{AgenticBuilder, NodeDependency, NodeRow};
use super::lines::{describe_json_error, TraceLines};
use super::{
    GraphTiming, HashIdArena, HashIdInterner, Session, SessionId, Trigger, Turn, Workload,
};
use crate::error::{Error, Result};

/// The only record schema the reader knows.
pub const REQUEST_TRACE_SCHEMA: &str = "dynamo.request.trace.v1";

/// A loaded Dynamo request trace: the workload and the block size it was recorded with.
#[derive(Debug)]
pub struct DynamoTrace {
    pub workload: Workload,
    pub block_size: u32,
    /// Whether the trace was agentic (requests with dependencies).
    pub agentic: bool,
}

/// Reads the shards. `expected_block_size` is `--trace-block-size` when given: it must equal
/// the embedded block size.
pub fn read_dynamo(paths: &[PathBuf], expected_block_size: Option<u32>) -> Result<DynamoTrace> {
    if paths.is_empty() {
        return Err(Error::usage(
            "--trace-format=dynamo requires at least one trace file",
        ));
    }
    let mut loaded = Loaded::default();
    for path in paths {
        load_shard(path, &mut loaded)?;
    }
    if loaded.requests.is_empty() {
        return Err(Error::usage(format!(
            "no request_end records with replay fields found (in {})",
            shown_paths(paths)
        )));
    }
    let with_context = loaded
        .requests
        .iter()
        .filter(|r| r.context.is_some())
        .count();
    let agentic = if with_context == 0 {
        false
    } else if with_context == loaded.requests.len() {
        true
    } else {
        let first_without = loaded
            .requests
            .iter()
            .find(|r| r.context.is_none())
            .expect("mixed");
        let first_with = loaded
            .requests
            .iter()
            .find(|r| r.context.is_some())
            .expect("mixed");
        return Err(Error::usage(format!(
            "Dynamo request trace cannot mix requests with and without agent_context ({} has none, {} has one)",
            first_without.location, first_with.location
        )));
    };
    let block_size = loaded.requests[0].block_size;
    if let Some(other) = loaded.requests.iter().find(|r| r.block_size != block_size) {
        return Err(Error::usage(format!(
            "mixed replay trace_block_size values are not supported: {block_size} and {} ({} has {block_size}, {} has {})",
            other.block_size, loaded.requests[0].location, other.location, other.block_size
        )));
    }
    if let Some(expected) = expected_block_size {
        if expected as usize != block_size {
            return Err(Error::usage(format!(
                "trace_block_size {expected} does not match embedded Dynamo request trace block size {block_size} (--trace-block-size; omit it to use the embedded size)"
            )));
        }
    }
    let block_size = u32::try_from(block_size).map_err(|_| {
        Error::usage(format!(
            "embedded trace_block_size {block_size} is too large (in {})",
            loaded.requests[0].location
        ))
    })?;
    loaded.requests.sort_by(|a, b| {
        (a.start_ms, a.end_ms, &a.request_id).cmp(&(b.start_ms, b.end_ms, &b.request_id))
    });
    let workload = if agentic {
        lower_agentic(loaded, block_size, &shown_paths(paths))?
    } else {
        lower_standard(loaded.requests, block_size)?
    };
    Ok(DynamoTrace {
        workload,
        block_size,
        agentic,
    })
}

fn shown_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `PATH:LINE` of a record; the path is shared by every record of a shard.
#[derive(Clone, Debug)]
struct Location {
    path: Rc<str>,
    line: usize,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}:{}", self.path, self.line)
    }
}

#[derive(Default)]
struct Loaded {
    requests: Vec<RequestEntry>,
    tools: Vec<ToolEntry>,
    /// request_id -> location of its record, for duplicates.
    seen: HashMap<String, Location>,
}

struct RequestEntry {
    location: Location,
    request_id: String,
    start_ms: i64,
    end_ms: i64,
    context: Option<AgentContext>,
    output_tokens: u64,
    block_size: usize,
    input_length: usize,
    hashes: Vec<u64>,
}

struct ToolEntry {
    location: Location,
    session_id: String,
    tool_call_id: String,
    claude: Option<ClaudeTool>,
}

#[derive(Deserialize)]
struct Record {
    schema: Schema,
    event_type: String,
    event_time_unix_ms: u64,
    #[serde(default)]
    agent_context: Option<AgentContext>,
    #[serde(default)]
    request: Option<RequestMetrics>,
    #[serde(default)]
    tool: Option<ToolMetrics>,
}

#[derive(Deserialize, PartialEq, Eq)]
enum Schema {
    #[serde(rename = "dynamo.request.trace.v1")]
    RequestV1,
}

#[derive(Clone, Deserialize)]
struct AgentContext {
    session_id: String,
    #[serde(default)]
    parent_session_id: Option<String>,
}

/// The request metrics of a record. Only `request_id`, `request_received_ms`, `output_tokens`,
/// `total_time_ms` and `replay` are used; the others are type-checked like the reference does.
#[derive(Deserialize)]
#[allow(dead_code)]
struct RequestMetrics {
    request_id: String,
    #[serde(default)]
    x_request_id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    request_received_ms: Option<u64>,
    #[serde(default)]
    prefill_wait_time_ms: Option<f64>,
    #[serde(default)]
    prefill_time_ms: Option<f64>,
    #[serde(default)]
    ttft_ms: Option<f64>,
    #[serde(default)]
    total_time_ms: Option<f64>,
    #[serde(default)]
    avg_itl_ms: Option<f64>,
    #[serde(default)]
    kv_hit_rate: Option<f64>,
    #[serde(default)]
    kv_transfer_estimated_latency_ms: Option<f64>,
    #[serde(default)]
    queue_depth: Option<u64>,
    #[serde(default)]
    worker: Option<WorkerInfo>,
    #[serde(default)]
    replay: Option<ReplayMetrics>,
    #[serde(default)]
    finish_reason_metadata: Option<FinishReason>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct WorkerInfo {
    #[serde(default)]
    prefill_worker_id: Option<u64>,
    #[serde(default)]
    prefill_dp_rank: Option<u32>,
    #[serde(default)]
    decode_worker_id: Option<u64>,
    #[serde(default)]
    decode_dp_rank: Option<u32>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct FinishReason {
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    backend_finish_reason: Option<String>,
    #[serde(default)]
    stop_reason: Option<IgnoredAny>,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolCall {
    choice_index: u32,
    tool_call_index: u32,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
struct ReplayMetrics {
    trace_block_size: usize,
    input_length: usize,
    input_sequence_hashes: Vec<u64>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolMetrics {
    tool_call_id: String,
    tool_class: String,
    #[serde(default)]
    claude: Option<ClaudeTool>,
    #[serde(default)]
    started_at_unix_ms: Option<u64>,
    #[serde(default)]
    ended_at_unix_ms: Option<u64>,
    #[serde(default)]
    duration_ms: Option<f64>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    output_bytes: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    error_type: Option<String>,
}

#[derive(Clone, Deserialize)]
struct ClaudeTool {
    source_request_id: String,
    #[serde(default)]
    consumer_request_id: Option<String>,
    #[serde(default)]
    child_session_id: Option<String>,
    execution_mode: String,
}

/// Where a line's record is, if it has one: envelopes (`{"event":{...}}`) hold it in `event`,
/// and lines that are not objects or are request payloads have none, as in the reference.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RecordAt {
    Skip,
    Top,
    Event,
}

fn record_at(line: &Value) -> RecordAt {
    let Value::Object(map) = line else {
        return RecordAt::Skip;
    };
    let top_type = match map.get("event_type") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return RecordAt::Skip,
    };
    match map.get("event") {
        None | Some(Value::Null) => {
            if top_type == Some("request_payload") {
                RecordAt::Skip
            } else {
                RecordAt::Top
            }
        }
        Some(Value::Object(event)) => match event.get("event_type") {
            Some(Value::String(s)) if s == "request_payload" => RecordAt::Skip,
            None | Some(Value::Null) | Some(Value::String(_)) => RecordAt::Event,
            Some(_) => RecordAt::Skip,
        },
        Some(_) => RecordAt::Skip,
    }
}

#[derive(Deserialize)]
struct Wrapped {
    event: Record,
}

fn load_shard(path: &Path, loaded: &mut Loaded) -> Result<()> {
    let shown = path.display().to_string();
    let path_rc: Rc<str> = Rc::from(shown.as_str());
    let gzip = path.extension().and_then(|e| e.to_str()) == Some("gz");
    let mut lines = TraceLines::open(path, gzip)
        .map_err(|e| Error::usage(format!("failed to open {shown}: {e}")))?;
    loop {
        let (line_no, text) = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => return Ok(()),
            Err(failure) => {
                return Err(Error::usage(format!(
                    "failed to read {shown}:{}: {}",
                    failure.line_no, failure.reason
                )))
            }
        };
        let location = Location {
            path: path_rc.clone(),
            line: line_no,
        };
        // Fast path: a plain record (no envelope key, no escapes that could spell one) parses
        // straight into its fields. Anything else, including every error, takes the general
        // path, which classifies the line exactly like the reference.
        let plain = text.trim_start().starts_with('{')
            && !text.contains("\"event\"")
            && !text.contains("\\u");
        let fast = if plain {
            serde_json::from_str::<Record>(text).ok()
        } else {
            None
        };
        let record = match fast {
            Some(record) => record,
            None => {
                let value: Value = serde_json::from_str(text).map_err(|e| {
                    Error::usage(format!(
                        "failed to parse {location}: {}",
                        describe_json_error::<Value>(text, &e)
                    ))
                })?;
                let parsed = match record_at(&value) {
                    RecordAt::Skip => continue,
                    RecordAt::Top => serde_json::from_str::<Record>(text),
                    RecordAt::Event => serde_json::from_str::<Wrapped>(text).map(|w| w.event),
                };
                parsed.map_err(|e| {
                    let event = match (record_at(&value), &value) {
                        (RecordAt::Event, Value::Object(map)) => map.get("event").cloned(),
                        _ => None,
                    };
                    let detail = match event {
                        Some(event) => describe_json_error::<Record>(&event.to_string(), &e),
                        None => describe_json_error::<Record>(text, &e),
                    };
                    Error::usage(format!(
                        "failed to parse {location}: {detail} (a {REQUEST_TRACE_SCHEMA} record needs schema, event_type and event_time_unix_ms)"
                    ))
                })?
            }
        };
        // Deserialising `schema` already refused every other version; v1 is all there is.
        let Schema::RequestV1 = record.schema;
        match record.event_type.as_str() {
            "request_payload" | "tool_start" => {}
            "request_end" => {
                let entry = request_entry(record, location.clone())
                    .map_err(|reason| Error::usage(format!("invalid request_end at {location}: {reason}")))?;
                if let Some(first) = loaded.seen.get(&entry.request_id) {
                    return Err(Error::usage(format!(
                        "duplicate request_id {} at {location} (first at {first})",
                        entry.request_id
                    )));
                }
                loaded.seen.insert(entry.request_id.clone(), location);
                loaded.requests.push(entry);
            }
            "tool_end" | "tool_error" => {
                if let Some(tool) = tool_entry(record, location) {
                    loaded.tools.push(tool);
                }
            }
            other => {
                return Err(Error::usage(format!(
                    "request trace schema only supports request_end/tool_* and request_payload events, got {other} at {location}"
                )))
            }
        }
    }
}

/// Validates a `request_end` record in the reference's order; the error is the reason.
fn request_entry(record: Record, location: Location) -> std::result::Result<RequestEntry, String> {
    let request = record
        .request
        .ok_or("request_end record is missing request payload (field request)")?;
    let replay = request
        .replay
        .ok_or("request payload is missing replay metrics (field request.replay)")?;
    if replay.trace_block_size == 0 {
        return Err("request replay trace_block_size must be greater than 0 (field request.replay.trace_block_size)".into());
    }
    let expected = replay.input_length.div_ceil(replay.trace_block_size);
    if replay.input_sequence_hashes.len() != expected {
        return Err(format!(
            "input_length {} with trace_block_size {} requires exactly {expected} replay hashes, got {} (field request.replay.input_sequence_hashes)",
            replay.input_length,
            replay.trace_block_size,
            replay.input_sequence_hashes.len()
        ));
    }
    let Some(received_ms) = request.request_received_ms else {
        return Err(
            "request trace is missing request_received_ms (field request.request_received_ms)"
                .into(),
        );
    };
    let Some(output_tokens) = request.output_tokens else {
        return Err("request trace is missing output_tokens (field request.output_tokens)".into());
    };
    let total_ms = match request.total_time_ms {
        Some(total) => total.max(0.0).round() as u64,
        None => record.event_time_unix_ms.saturating_sub(received_ms),
    };
    let end_ms = received_ms.saturating_add(total_ms);
    Ok(RequestEntry {
        location,
        request_id: request.request_id,
        start_ms: saturating_i64(received_ms),
        end_ms: saturating_i64(end_ms),
        context: record.agent_context,
        output_tokens,
        block_size: replay.trace_block_size,
        input_length: replay.input_length,
        hashes: replay.input_sequence_hashes,
    })
}

/// A finished tool span of an agent session; dropped (like the reference) without a session,
/// tool metadata, or a consistent interval.
fn tool_entry(record: Record, location: Location) -> Option<ToolEntry> {
    let context = record.agent_context?;
    let tool = record.tool?;
    let end_ms = saturating_i64(tool.ended_at_unix_ms.unwrap_or(record.event_time_unix_ms));
    let start_ms = tool
        .started_at_unix_ms
        .map(saturating_i64)
        .or_else(|| {
            tool.duration_ms
                .map(|d| end_ms.saturating_sub(d.max(0.0).round() as i64))
        })
        .unwrap_or(end_ms);
    if end_ms < start_ms {
        return None;
    }
    Some(ToolEntry {
        location,
        session_id: context.session_id,
        tool_call_id: tool.tool_call_id,
        claude: tool.claude,
    })
}

fn saturating_i64(value: u64) -> i64 {
    value.min(i64::MAX as u64) as i64
}

/// Standard traces: one single-turn session per request, in (start, end, id) order.
fn lower_standard(requests: Vec<RequestEntry>, block_size: u32) -> Result<Workload> {
    let start = requests.iter().map(|r| r.start_ms).min().unwrap_or(0);
    let mut interner = HashIdInterner::default();
    let mut arena = HashIdArena::default();
    let mut sessions = Vec::with_capacity(requests.len());
    for (index, request) in requests.into_iter().enumerate() {
        let id = SessionId::Request(index as u64 + 1);
        if request.input_length == 0 {
            return Err(Error::usage(format!(
                "session {id} turn 0 must have a positive input_length (request {} at {}: replay.input_length is 0)",
                request.request_id, request.location
            )));
        }
        let ids = intern_all(&mut interner, request.hashes, &request.location)?;
        let output = usize::try_from(request.output_tokens).map_err(|_| {
            Error::usage(format!(
                "output length does not fit in usize (at {})",
                request.location
            ))
        })?;
        sessions.push(Session {
            id,
            first_timestamp_ms: Some((request.start_ms - start) as f64),
            turns: smallvec::smallvec![Turn {
                input_length: request.input_length,
                max_output_tokens: output,
                delay_ms: 0.0,
                prompt: arena.push(ids, block_size),
                priority: 0,
                strict_priority: 0,
                policy_class: None,
            }],
        });
    }
    arena.share(&mut sessions);
    Ok(Workload {
        sessions,
        ..Workload::default()
    })
}

fn intern_all(
    interner: &mut HashIdInterner,
    hashes: Vec<u64>,
    location: &Location,
) -> Result<Vec<u32>> {
    hashes
        .into_iter()
        .map(|raw| {
            interner.intern(raw).ok_or_else(|| {
                Error::usage(format!(
                    "trace contains more unique hash IDs than u32 can represent (at {location})"
                ))
            })
        })
        .collect()
}

/// Agentic traces: the dependency graph of sessions and child sessions (see the module doc).
fn lower_agentic(loaded: Loaded, block_size: u32, shown: &str) -> Result<Workload> {
    let requests = loaded.requests;
    let start = requests.iter().map(|r| r.start_ms).min().unwrap_or(0);
    let index_of: HashMap<&str, usize> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| (r.request_id.as_str(), i))
        .collect();
    let session_of = |i: usize| {
        requests[i]
            .context
            .as_ref()
            .expect("agentic")
            .session_id
            .as_str()
    };

    // Sessions in order of their first request; each session's requests in (start, end, id)
    // order (the global order already is).
    let mut session_index: HashMap<&str, usize> = HashMap::new();
    let mut sessions: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut parents: Vec<Option<&str>> = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        let context = request.context.as_ref().expect("agentic");
        let s = *session_index
            .entry(context.session_id.as_str())
            .or_insert_with(|| {
                sessions.push((context.session_id.as_str(), Vec::new()));
                parents.push(None);
                sessions.len() - 1
            });
        sessions[s].1.push(i);
        if let Some(parent) = context.parent_session_id.as_deref() {
            match parents[s] {
                Some(existing) if existing != parent => {
                    return Err(Error::usage(format!(
                        "session {} has conflicting parent_session_id values: {existing} and {parent} (at {})",
                        context.session_id, request.location
                    )))
                }
                Some(_) => {}
                None => parents[s] = Some(parent),
            }
        }
    }

    // Explicit Claude tool spans, keyed by the child session they spawn.
    let mut tool_by_child: HashMap<&str, &ToolEntry> = HashMap::new();
    for tool in &loaded.tools {
        let Some(claude) = tool.claude.as_ref() else {
            continue;
        };
        if !matches!(claude.execution_mode.as_str(), "blocking" | "background") {
            return Err(Error::usage(format!(
                "tool {} has unsupported execution_mode {} (at {}; expected blocking or background)",
                tool.tool_call_id, claude.execution_mode, tool.location
            )));
        }
        for id in [
            Some(claude.source_request_id.as_str()),
            claude.consumer_request_id.as_deref(),
        ]
        .into_iter()
        .flatten()
        {
            let Some(&i) = index_of.get(id) else {
                return Err(Error::usage(format!(
                    "tool {} references unknown request_id {id} (at {})",
                    tool.tool_call_id, tool.location
                )));
            };
            if session_of(i) != tool.session_id {
                return Err(Error::usage(format!(
                    "tool {} request {id} belongs to a different session (at {}: the request is in session {}, the tool in {})",
                    tool.tool_call_id, tool.location, session_of(i), tool.session_id
                )));
            }
        }
        let Some(child) = claude.child_session_id.as_deref() else {
            continue;
        };
        if !session_index.contains_key(child) {
            continue;
        }
        if tool_by_child.insert(child, tool).is_some() {
            return Err(Error::usage(format!(
                "multiple tool events reference child session {child} (at {})",
                tool.location
            )));
        }
    }

    let mut wait_for: Vec<Vec<usize>> = vec![Vec::new(); requests.len()];
    let push_unique = |list: &mut Vec<usize>, i: usize| {
        if !list.contains(&i) {
            list.push(i);
        }
    };
    for (_, members) in &sessions {
        for pair in members.windows(2) {
            push_unique(&mut wait_for[pair[1]], pair[0]);
        }
    }
    for (s, (session_id, children)) in sessions.iter().enumerate() {
        let Some(parent_id) = parents[s] else {
            continue;
        };
        let Some(&parent) = session_index.get(parent_id) else {
            continue;
        };
        let parent_members = &sessions[parent].1;
        let first_child = children[0];
        let last_child = *children
            .iter()
            .max_by(|&&a, &&b| {
                (
                    requests[a].end_ms,
                    requests[a].start_ms,
                    &requests[a].request_id,
                )
                    .cmp(&(
                        requests[b].end_ms,
                        requests[b].start_ms,
                        &requests[b].request_id,
                    ))
            })
            .expect("sessions are not empty");
        if let Some(tool) = tool_by_child.get(session_id) {
            let claude = tool
                .claude
                .as_ref()
                .expect("explicit tools have Claude metadata");
            let spawn = index_of[claude.source_request_id.as_str()];
            if !parent_members.contains(&spawn) {
                return Err(Error::usage(format!(
                    "tool {} source request {} is not in parent session {parent_id} (at {})",
                    tool.tool_call_id, claude.source_request_id, tool.location
                )));
            }
            push_unique(&mut wait_for[first_child], spawn);
            if let Some(consumer) = claude.consumer_request_id.as_deref() {
                let join = index_of[consumer];
                if !parent_members.contains(&join) {
                    return Err(Error::usage(format!(
                        "tool {} consumer request {consumer} is not in parent session {parent_id} (at {})",
                        tool.tool_call_id, tool.location
                    )));
                }
                push_unique(&mut wait_for[join], last_child);
            }
            continue;
        }
        let child_start = requests[first_child].start_ms;
        let child_end = requests[last_child].end_ms;
        // The latest parent request started by the child's start (last in order on ties),
        // and the first parent request starting once the child has ended.
        let mut spawn: Option<usize> = None;
        for &p in parent_members {
            if requests[p].start_ms <= child_start
                && spawn.is_none_or(|q| requests[p].start_ms >= requests[q].start_ms)
            {
                spawn = Some(p);
            }
        }
        if let Some(spawn) = spawn {
            push_unique(&mut wait_for[first_child], spawn);
        }
        let mut join: Option<usize> = None;
        for &p in parent_members {
            if requests[p].start_ms >= child_end
                && join.is_none_or(|q| requests[p].start_ms < requests[q].start_ms)
            {
                join = Some(p);
            }
        }
        if let Some(join) = join {
            push_unique(&mut wait_for[join], last_child);
        }
    }

    let mut builder = AgenticBuilder::new(
        &format!("the agentic lowering of {shown}"),
        block_size,
        GraphTiming::Timestamps,
    );
    let ends: Vec<i64> = requests.iter().map(|r| r.end_ms).collect();
    let ids: Vec<String> = requests.iter().map(|r| r.request_id.clone()).collect();
    for (i, request) in requests.into_iter().enumerate() {
        let dependency_delay_ms = wait_for[i]
            .iter()
            .map(|&d| ends[d])
            .max()
            .map_or(0.0, |dep_end| {
                request.start_ms.saturating_sub(dep_end).max(0) as f64
            });
        let context = request.context.expect("agentic");
        let dependencies = wait_for[i]
            .iter()
            .map(|&d| NodeDependency {
                request_id: ids[d].clone(),
                trigger: Trigger::Completion,
                delay_ms: dependency_delay_ms,
            })
            .collect();
        let output = usize::try_from(request.output_tokens).map_err(|_| {
            Error::usage(format!(
                "output length does not fit in usize (at {})",
                request.location
            ))
        })?;
        builder.push(
            i + 1,
            NodeRow {
                request_id: request.request_id,
                session_id: Some(context.session_id),
                input_length: Some(request.input_length),
                output_length: Some(output),
                output_token_count: None,
                hash_ids: Some(request.hashes),
                timestamp_ms: Some((request.start_ms - start) as f64),
                dependency_delay_ms,
                priority: 0,
                strict_priority: 0,
                policy_class: None,
                dependencies,
            },
        )?;
    }
    let workload = builder.finish().map_err(|e| {
        if e.message().starts_with("cycle detected") {
            Error::usage(format!(
                "agentic request dependencies contain a cycle ({})",
                e.message()
            ))
        } else {
            e
        }
    })?;
    Ok(workload)
}

#[cfg(test)]
mod tests {
    use super::super::lines::testing::{mutate, TempTrace};
    use super::super::Dependency;
    use super::*;

    fn rec(id: &str, start: u64, total: u64, hashes: &str, context: &str) -> String {
        format!(
            "{{\"schema\":\"dynamo.request.trace.v1\",\"event_type\":\"request_end\",\"event_time_unix_ms\":{},{context}\"request\":{{\"request_id\":\"{id}\",\"output_tokens\":2,\"request_received_ms\":{start},\"total_time_ms\":{total},\"replay\":{{\"trace_block_size\":4,\"input_length\":7,\"input_sequence_hashes\":{hashes}}}}}}}\n",
            start + total
        )
    }

    fn load(files: &[(&str, &[u8])], expected: Option<u32>) -> Result<DynamoTrace> {
        let temps: Vec<TempTrace> = files
            .iter()
            .map(|(suffix, b)| TempTrace::new(suffix, b))
            .collect();
        let paths: Vec<PathBuf> = temps.iter().map(|t| t.0.clone()).collect();
        read_dynamo(&paths, expected)
    }

    fn gz(text: &str) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn standard_shards_pool_sort_and_share_hashes() {
        let a = format!(
            "[1,2]\n{{\"event_type\":\"request_payload\"}}\n{}",
            rec("r2", 1500, 10, "[11,33]", "")
        );
        let b = format!(
            "{{\"timestamp\":1,\"event\":{}}}",
            rec("r1", 1000, 10, "[11,22]", "").trim()
        );
        let t = load(&[(".jsonl", a.as_bytes()), (".jsonl.gz", &gz(&b))], None).unwrap();
        assert!(!t.agentic);
        assert_eq!(t.block_size, 4);
        let w = t.workload;
        assert_eq!(
            w.sessions
                .iter()
                .map(|s| s.id.to_string())
                .collect::<Vec<_>>(),
            ["request_1", "request_2"]
        );
        assert_eq!(w.sessions[0].first_timestamp_ms, Some(0.0));
        assert_eq!(w.sessions[1].first_timestamp_ms, Some(500.0));
        let ids = |s: usize| format!("{:?}", w.sessions[s].turns[0].prompt);
        assert!(
            ids(0).contains("ids: [0, 1]") && ids(1).contains("ids: [0, 2]"),
            "{} {}",
            ids(0),
            ids(1)
        );
    }

    #[test]
    fn block_size_is_embedded_and_checked() {
        let a = rec("r1", 1000, 10, "[1,2]", "");
        let e = load(&[(".jsonl", a.as_bytes())], Some(8))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(
                "trace_block_size 8 does not match embedded Dynamo request trace block size 4"
            ),
            "{e}"
        );
        let b = a
            .replace(
                "\"trace_block_size\":4,\"input_length\":7",
                "\"trace_block_size\":8,\"input_length\":7",
            )
            .replace("r1", "r2")
            .replace("[1,2]", "[1]");
        let e = load(&[(".jsonl", a.as_bytes()), (".jsonl", b.as_bytes())], None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("mixed replay trace_block_size values are not supported: 4 and 8"),
            "{e}"
        );
    }

    #[test]
    fn agentic_traces_lower_to_a_graph() {
        let text = format!(
            "{}{}{}",
            rec(
                "p1",
                100,
                10,
                "[1,2]",
                "\"agent_context\":{\"session_id\":\"p\"},"
            ),
            rec(
                "c1",
                120,
                10,
                "[1,3]",
                "\"agent_context\":{\"session_id\":\"c\",\"parent_session_id\":\"p\"},"
            ),
            rec(
                "p2",
                200,
                10,
                "[1,4]",
                "\"agent_context\":{\"session_id\":\"p\"},"
            ),
        );
        let t = load(&[(".jsonl", text.as_bytes())], None).unwrap();
        assert!(t.agentic);
        let graph = t.workload.graph.as_ref().unwrap();
        // c1 waits for p1 (spawned 10 ms after it ended); p2 waits for p1 and for c1 (70 ms
        // after the later of them ended).
        assert_eq!(
            graph.dependencies(1),
            &[Dependency {
                source: 0,
                trigger: Trigger::Completion,
                delay_ms: 10.0
            }]
        );
        assert_eq!(
            graph
                .dependencies(2)
                .iter()
                .map(|d| d.source)
                .collect::<Vec<_>>(),
            [0, 1]
        );
        assert!(graph.dependencies(2).iter().all(|d| d.delay_ms == 70.0));
    }

    #[test]
    fn errors_name_file_and_line() {
        let good = rec("r1", 1000, 10, "[1,2]", "");
        let cases: Vec<(String, &str)> = vec![
            (good.replace("request.trace.v1", "request.trace.v9"), "failed to parse "),
            (good.replace("request_end", "request_start"), "request trace schema only supports request_end/tool_* and request_payload events, got request_start at "),
            (good.replace("[1,2]", "[1]"), "invalid request_end at "),
            (good.replace("\"request_received_ms\":1000,", ""), "invalid request_end at "),
            (format!("{good}{good}"), "duplicate request_id r1 at "),
            ("{\"event_type\":\"request_payload\"}\n".into(), "no request_end records with replay fields found"),
            (format!("{good}{}", rec("r2", 1, 1, "[1,2]", "\"agent_context\":{\"session_id\":\"s\"},")), "Dynamo request trace cannot mix requests with and without agent_context"),
        ];
        for (text, start) in cases {
            let file = TempTrace::new(".jsonl", text.as_bytes());
            let e = read_dynamo(std::slice::from_ref(&file.0), None)
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(start), "{e:?} should start with {start:?}");
            assert!(e.contains(&file.shown()), "{e}");
        }
        let plain_gz = TempTrace::new(".jsonl", &gz(&good));
        let e = read_dynamo(std::slice::from_ref(&plain_gz.0), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("failed to read {}:1", plain_gz.shown())),
            "{e}"
        );
    }

    fn fixture(name: &str) -> Option<PathBuf> {
        crate::shared_file(&format!("traces/fixtures/{name}"))
    }

    #[test]
    fn fixtures_load() {
        if let Some(path) = fixture("dynamo-standard.jsonl") {
            let t = read_dynamo(&[path], None).unwrap();
            assert_eq!(
                (t.agentic, t.workload.sessions.len(), t.block_size),
                (false, 2, 4)
            );
        }
        if let Some(path) = fixture("dynamo-agentic.jsonl") {
            let t = read_dynamo(&[path], None).unwrap();
            assert_eq!((t.agentic, t.workload.sessions.len()), (true, 4));
            let g = t.workload.graph.unwrap();
            let delays: Vec<f64> = (0..4)
                .flat_map(|i| {
                    g.dependencies(i)
                        .iter()
                        .map(|d| d.delay_ms)
                        .collect::<Vec<_>>()
                })
                .collect();
            // The consumer waits for its session predecessor and for the last child request.
            assert_eq!(delays, [10.0, 20.0, 40.0, 40.0]);
        }
    }

    mod never_panics {
        use super::*;
        use proptest::prelude::*;

        fn check(bytes: &[u8], suffix: &str) {
            let file = TempTrace::new(suffix, bytes);
            if let Err(e) = read_dynamo(std::slice::from_ref(&file.0), None) {
                assert!(e.to_string().contains(&file.shown()), "{e}");
            }
        }

        fn valid() -> String {
            format!(
                "{}{}{{\"schema\":\"dynamo.request.trace.v1\",\"event_type\":\"tool_end\",\"event_time_unix_ms\":9,\"agent_context\":{{\"session_id\":\"p\"}},\"tool\":{{\"tool_call_id\":\"t\",\"tool_class\":\"a\",\"claude\":{{\"source_request_id\":\"a\",\"child_session_id\":\"c\",\"execution_mode\":\"blocking\"}}}}}}\n",
                rec("a", 100, 10, "[1,2]", "\"agent_context\":{\"session_id\":\"p\"},"),
                rec("b", 120, 10, "[1,3]", "\"agent_context\":{\"session_id\":\"c\",\"parent_session_id\":\"p\"},"),
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]
            #[test]
            fn on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300), gzip in any::<bool>()) {
                check(&bytes, if gzip { ".gz" } else { ".jsonl" });
            }

            #[test]
            fn on_mutated_valid_rows(op in any::<u8>(), at in any::<usize>(), byte in any::<u8>(), gzip in any::<bool>()) {
                let bytes = mutate(&valid(), op, at, byte);
                if gzip {
                    check(&gz(&String::from_utf8_lossy(&bytes)), ".jsonl.gz");
                } else {
                    check(&bytes, ".jsonl");
                }
            }
        }
    }
}
