//! The `agentic_mooncake` trace reader: requests with explicit dependencies on other requests.
//!
//! Two dialects, told apart by the first non-blank line:
//! - **version 1** (the row format of ai-dynamo 1.4.2): Mooncake rows plus a required
//!   `request_id`, `wait_for` (ids that must reach a terminal state first), and `delay` /
//!   `tool_wait_ms` (waited after the last of them). Roots are released at their timestamp.
//! - **version 2** (`{"schema":"dynamo.agentic_mooncake","version":2,...}` header line, from
//!   later Dynamo releases; 1.4.2 cannot read it): rows carry `not_before_ms` and typed
//!   `dependencies`, each with its own trigger (`dispatch` or `completion`) and `delay_ms`.
//!
//! Every request becomes a one-turn session; the dependencies become a [`DependencyGraph`].
//! Dependencies may name requests later in the file, so ids are resolved when the file ends;
//! unknown ids, self-dependencies and cycles are usage errors naming the request and file.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::lines::{describe_json_error, TraceLines, U32Count};
use super::{
    Dependency, DependencyGraph, GraphTiming, HashIdArena, HashIdInterner, Session, SessionId,
    Trigger, Turn, Workload,
};
use crate::error::{Error, Result};

/// The schema name of the version 2 header line.
pub const AGENTIC_SCHEMA: &str = "dynamo.agentic_mooncake";

/// Reads an agentic Mooncake trace. `trace_block_size` is the `--trace-block-size` (default 512)
/// for version 1; a version 2 file declares its own block size, which `expected_block_size`
/// (the flag, when given) must match.
pub fn read_agentic(
    path: &Path,
    trace_block_size: u32,
    expected_block_size: Option<u32>,
) -> Result<Workload> {
    if trace_block_size == 0 {
        return Err(Error::usage("trace_block_size must be greater than 0"));
    }
    let shown = path.display().to_string();
    let mut lines = TraceLines::open(path, false)
        .map_err(|e| Error::usage(format!("failed to open trace file {shown}: {e}")))?;
    let read_error = |failure: super::lines::ReadFailure| {
        Error::usage(format!(
            "failed to read line {} from {shown}: {}",
            failure.line_no, failure.reason
        ))
    };
    let mut builder: Option<AgenticBuilder> = None;
    while let Some((line_no, text)) = lines.next_line().map_err(read_error)? {
        let builder = match builder.as_mut() {
            Some(builder) => builder,
            None => {
                let (first, consumed) =
                    first_line(&shown, line_no, text, trace_block_size, expected_block_size)?;
                let builder = builder.insert(first);
                if consumed {
                    continue;
                }
                builder
            }
        };
        match builder.timing {
            GraphTiming::Timestamps => {
                let row: RowV1 = serde_json::from_str(text).map_err(|e| {
                    Error::usage(format!(
                        "failed to parse line {line_no} from {shown} as agentic Mooncake JSON: {}",
                        describe_json_error::<RowV1>(text, &e)
                    ))
                })?;
                builder.push(line_no, row.into_node())?;
            }
            GraphTiming::NotBefore => {
                let row: RowV2 = serde_json::from_str(text).map_err(|e| {
                    Error::usage(format!(
                        "failed to parse line {line_no} from {shown} as agentic Mooncake version 2 JSON: {}",
                        describe_json_error::<RowV2>(text, &e)
                    ))
                })?;
                builder.push(
                    line_no,
                    row.into_node()?.map_err(|m| {
                        Error::usage(format!("trace line {line_no} {m} (in {shown})"))
                    })?,
                )?;
            }
        }
    }
    match builder {
        Some(builder) if !builder.sessions.is_empty() => builder.finish(),
        _ => Err(Error::usage(format!(
            "agentic trace file {shown} did not contain any requests"
        ))),
    }
}

/// The builder for the file, from its first non-blank line: a version 2 header (consumed), or
/// the first version 1 row (not consumed).
fn first_line(
    shown: &str,
    line_no: usize,
    text: &str,
    trace_block_size: u32,
    expected_block_size: Option<u32>,
) -> Result<(AgenticBuilder, bool)> {
    let Ok(probe) = serde_json::from_str::<SchemaProbe>(text) else {
        return Ok((
            AgenticBuilder::new(shown, trace_block_size, GraphTiming::Timestamps),
            false,
        ));
    };
    if probe.schema.as_deref() != Some(AGENTIC_SCHEMA) {
        return Ok((
            AgenticBuilder::new(shown, trace_block_size, GraphTiming::Timestamps),
            false,
        ));
    }
    let header: HeaderV2 = serde_json::from_str(text).map_err(|e| {
        Error::usage(format!(
            "failed to parse line {line_no} from {shown} as an agentic Mooncake header: {}",
            describe_json_error::<HeaderV2>(text, &e)
        ))
    })?;
    if header.version != 2 {
        return Err(Error::usage(format!(
            "agentic trace header on line {line_no} of {shown} has unsupported version {} (dynosim reads version 2 headers and headerless version 1 rows)",
            header.version
        )));
    }
    if header.block_size == 0 {
        return Err(Error::usage(format!(
            "agentic trace header on line {line_no} of {shown}: block_size must be greater than 0"
        )));
    }
    let block_size = u32::try_from(header.block_size).map_err(|_| {
        Error::usage(format!(
            "agentic trace header on line {line_no} of {shown}: block_size {} is too large",
            header.block_size
        ))
    })?;
    if let Some(scope) = header.hash_id_scope.as_deref() {
        if scope != "local" {
            return Err(Error::usage(format!(
                "agentic trace header on line {line_no} of {shown}: hash_id_scope {scope:?} is not supported (only \"local\")"
            )));
        }
    }
    if let Some(expected) = expected_block_size {
        if expected != block_size {
            return Err(Error::usage(format!(
                "trace_block_size {expected} does not match embedded agentic trace block size {block_size} (header on line {line_no} of {shown})"
            )));
        }
    }
    Ok((
        AgenticBuilder::new(shown, block_size, GraphTiming::NotBefore),
        true,
    ))
}

#[derive(Deserialize)]
struct SchemaProbe {
    #[serde(default)]
    schema: Option<String>,
}

/// The version 2 header line. `source` is provenance only.
#[derive(Deserialize)]
#[allow(dead_code)]
struct HeaderV2 {
    schema: String,
    version: u64,
    block_size: u64,
    #[serde(default)]
    hash_id_scope: Option<String>,
    #[serde(default)]
    source: Option<IgnoredAny>,
}

/// A version 1 row (1.4.2's 17 fields). Metadata fields are type-checked like the reference
/// does, then dropped.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object (one agentic trace row)")]
#[allow(dead_code)]
struct RowV1 {
    request_id: String,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default, alias = "input_tokens")]
    input_length: Option<usize>,
    #[serde(default, alias = "output_tokens")]
    output_length: Option<usize>,
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
    #[serde(default)]
    request_kind: Option<String>,
    #[serde(default)]
    wait_for: Vec<String>,
    #[serde(default)]
    branches: Vec<String>,
    #[serde(default)]
    prefix_reset: Option<bool>,
    #[serde(default)]
    tool_wait_ms: Option<f64>,
    #[serde(default)]
    tool_events: Vec<ToolEvent>,
}

/// A tool call recorded on a version 1 row: metadata only, but strictly typed.
#[derive(Deserialize)]
#[allow(dead_code)]
struct ToolEvent {
    tool_call_id: String,
    tool_class: String,
    started_at_unix_ms: u64,
    ended_at_unix_ms: u64,
    duration_ms: f64,
    status: String,
    #[serde(default)]
    output_bytes: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    error_type: Option<String>,
}

impl RowV1 {
    fn into_node(self) -> NodeRow {
        let dependency_delay_ms = self.delay.unwrap_or(0.0) + self.tool_wait_ms.unwrap_or(0.0);
        let dependencies = self
            .wait_for
            .into_iter()
            .map(|request_id| NodeDependency {
                request_id,
                trigger: Trigger::Completion,
                delay_ms: dependency_delay_ms,
            })
            .collect();
        NodeRow {
            request_id: self.request_id,
            session_id: self.session_id,
            input_length: self.input_length,
            output_length: self.output_length,
            output_token_count: self.output_token_ids.map(|c| c.0),
            hash_ids: self.hash_ids,
            timestamp_ms: self.timestamp,
            dependency_delay_ms,
            priority: self.priority.unwrap_or(0),
            strict_priority: self.strict_priority.unwrap_or(0),
            policy_class: self.policy_class,
            dependencies,
        }
    }
}

/// A version 2 row.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object (one agentic trace row)")]
#[allow(dead_code)]
struct RowV2 {
    request_id: String,
    #[serde(default)]
    play_id: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default, alias = "input_tokens")]
    input_length: Option<usize>,
    #[serde(default, alias = "output_tokens")]
    output_length: Option<usize>,
    #[serde(default)]
    output_token_ids: Option<U32Count>,
    #[serde(default)]
    hash_ids: Option<Vec<u64>>,
    #[serde(default)]
    not_before_ms: Option<f64>,
    #[serde(default)]
    priority: Option<i32>,
    #[serde(default)]
    strict_priority: Option<u32>,
    #[serde(default)]
    policy_class: Option<String>,
    #[serde(default)]
    dependencies: Vec<DependencyV2>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct DependencyV2 {
    request_id: String,
    trigger: TriggerV2,
    #[serde(default)]
    delay_ms: f64,
    #[serde(default)]
    relation: Option<RelationV2>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum TriggerV2 {
    Dispatch,
    Completion,
}

/// Why the edge exists; it does not change scheduling.
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RelationV2 {
    Sequence,
    Spawn,
    Join,
}

impl RowV2 {
    /// The node, or the reason (after "trace line N") its timing is invalid.
    fn into_node(self) -> Result<std::result::Result<NodeRow, String>> {
        let not_before_ms = self.not_before_ms.unwrap_or(0.0);
        if !not_before_ms.is_finite() || not_before_ms < 0.0 {
            return Ok(Err(format!(
                "has invalid not_before_ms {not_before_ms} (must be finite and non-negative)"
            )));
        }
        let mut dependencies = Vec::with_capacity(self.dependencies.len());
        for (index, dependency) in self.dependencies.into_iter().enumerate() {
            if !dependency.delay_ms.is_finite() || dependency.delay_ms < 0.0 {
                return Ok(Err(format!(
                    "has invalid dependencies[{index}].delay_ms {} (must be finite and non-negative)",
                    dependency.delay_ms
                )));
            }
            dependencies.push(NodeDependency {
                request_id: dependency.request_id,
                trigger: match dependency.trigger {
                    TriggerV2::Dispatch => Trigger::Dispatch,
                    TriggerV2::Completion => Trigger::Completion,
                },
                delay_ms: dependency.delay_ms,
            });
        }
        Ok(Ok(NodeRow {
            request_id: self.request_id,
            session_id: self.session_id,
            input_length: self.input_length,
            output_length: self.output_length,
            output_token_count: self.output_token_ids.map(|c| c.0),
            hash_ids: self.hash_ids,
            timestamp_ms: Some(not_before_ms),
            dependency_delay_ms: 0.0,
            priority: self.priority.unwrap_or(0),
            strict_priority: self.strict_priority.unwrap_or(0),
            policy_class: self.policy_class,
            dependencies,
        }))
    }
}

/// One request of an agentic trace, whatever dialect (or the Dynamo agentic lowering) it
/// came from.
pub(super) struct NodeRow {
    pub request_id: String,
    pub session_id: Option<String>,
    pub input_length: Option<usize>,
    pub output_length: Option<usize>,
    pub output_token_count: Option<usize>,
    pub hash_ids: Option<Vec<u64>>,
    /// Version 1: the timestamp; version 2: `not_before_ms`.
    pub timestamp_ms: Option<f64>,
    /// Version 1: `delay + tool_wait_ms`, validated as a whole.
    pub dependency_delay_ms: f64,
    pub priority: i32,
    pub strict_priority: u32,
    pub policy_class: Option<String>,
    pub dependencies: Vec<NodeDependency>,
}

pub(super) struct NodeDependency {
    pub request_id: String,
    pub trigger: Trigger,
    pub delay_ms: f64,
}

const UNDEFINED: u32 = u32::MAX;

/// Folds rows into one-turn sessions and a dependency graph over them.
pub(super) struct AgenticBuilder {
    path: String,
    trace_block_size: u32,
    timing: GraphTiming,
    interner: HashIdInterner,
    arena: HashIdArena,
    sessions: Vec<Session>,
    /// Every request id seen, as a row's own id or as a dependency: id -> slot.
    slots: HashMap<Box<str>, u32>,
    /// Per slot: its id, and the row (session index) that defines it, if any yet.
    slot_names: Vec<Box<str>>,
    slot_rows: Vec<u32>,
    /// Per row: its slot and line.
    row_slots: Vec<u32>,
    row_lines: Vec<usize>,
    /// Dependencies with their source still as a slot.
    offsets: Vec<u32>,
    edges: Vec<Dependency>,
    floor_ms: Vec<Option<f64>>,
}

impl AgenticBuilder {
    pub(super) fn new(path: &str, trace_block_size: u32, timing: GraphTiming) -> Self {
        Self {
            path: path.to_string(),
            trace_block_size,
            timing,
            interner: HashIdInterner::default(),
            arena: HashIdArena::default(),
            sessions: Vec::new(),
            slots: HashMap::new(),
            slot_names: Vec::new(),
            slot_rows: Vec::new(),
            row_slots: Vec::new(),
            row_lines: Vec::new(),
            offsets: vec![0],
            edges: Vec::new(),
            floor_ms: Vec::new(),
        }
    }

    fn slot(&mut self, id: &str) -> Result<u32> {
        if let Some(&slot) = self.slots.get(id) {
            return Ok(slot);
        }
        let slot = u32::try_from(self.slot_names.len())
            .ok()
            .filter(|&s| s != UNDEFINED)
            .ok_or_else(|| {
                Error::usage(format!(
                    "agentic trace {} has too many request ids",
                    self.path
                ))
            })?;
        self.slots.insert(id.into(), slot);
        self.slot_names.push(id.into());
        self.slot_rows.push(UNDEFINED);
        Ok(slot)
    }

    /// Adds the row of line `line_no`, with the reference's per-row checks in its order.
    pub(super) fn push(&mut self, line_no: usize, row: NodeRow) -> Result<()> {
        let path = self.path.clone();
        let request_id = row.request_id;
        if request_id.trim().is_empty() {
            return Err(Error::usage(format!(
                "trace line {line_no} has empty request_id (in {path})"
            )));
        }
        let slot = self.slot(&request_id)?;
        if self.slot_rows[slot as usize] != UNDEFINED {
            let first = self.row_lines[self.slot_rows[slot as usize] as usize];
            return Err(Error::usage(format!(
                "trace line {line_no} duplicates request_id {request_id} (in {path}; first on line {first})"
            )));
        }
        let Some(raw_hash_ids) = row.hash_ids else {
            return Err(Error::usage(format!(
                "trace line {line_no} is missing hash_ids (in {path}; every row needs a hash_ids array)"
            )));
        };
        let block = self.trace_block_size as usize;
        let capacity = raw_hash_ids.len().checked_mul(block).ok_or_else(|| {
            Error::usage(format!(
                "trace line {line_no} synthesized capacity overflow (in {path})"
            ))
        })?;
        let input_length = match row.input_length {
            Some(length) if length > capacity => {
                return Err(Error::usage(format!(
                    "trace line {line_no} has input_length {length} but only {capacity} tokens can be synthesized from {} hash_ids at trace_block_size {block} (in {path})",
                    raw_hash_ids.len()
                )))
            }
            Some(length) => length,
            None => capacity,
        };
        let Some(output_length) = row.output_length else {
            return Err(Error::usage(format!(
                "trace line {line_no} is missing output_length (in {path}; also accepted as output_tokens)"
            )));
        };
        if let Some(count) = row.output_token_count {
            if count != output_length {
                return Err(Error::usage(format!(
                    "trace line {line_no} output_length {output_length} does not match output_token_ids length {count} (in {path})"
                )));
            }
        }
        let delay = row.dependency_delay_ms;
        if !delay.is_finite() || delay < 0.0 {
            return Err(Error::usage(format!(
                "trace line {line_no} has invalid dependency delay {delay} (in {path}; delay + tool_wait_ms must be finite and non-negative)"
            )));
        }
        if let Some(ts) = row.timestamp_ms {
            if !ts.is_finite() || ts < 0.0 {
                return Err(Error::usage(format!(
                    "trace line {line_no} has invalid timestamp {ts} (in {path}; timestamps must be finite and non-negative)"
                )));
            }
        }
        if input_length == 0 {
            // The reference would send an empty prompt; no engine admits one meaningfully.
            return Err(Error::usage(format!(
                "trace line {line_no} (request {request_id}) must have a positive input_length (in {path})"
            )));
        }
        let mut ids = Vec::with_capacity(raw_hash_ids.len());
        for raw in raw_hash_ids {
            ids.push(self.interner.intern(raw).ok_or_else(|| {
                Error::usage(format!(
                    "trace contains more unique hash IDs than u32 can represent (at line {line_no} of {path})"
                ))
            })?);
        }
        let is_root = row.dependencies.is_empty();
        for dependency in row.dependencies {
            let source = self.slot(&dependency.request_id)?;
            self.edges.push(Dependency {
                source,
                trigger: dependency.trigger,
                delay_ms: dependency.delay_ms,
            });
        }
        let edge_count = u32::try_from(self.edges.len())
            .map_err(|_| Error::usage(format!("agentic trace {path} has too many dependencies")))?;
        self.offsets.push(edge_count);

        let index = self.sessions.len() as u32;
        self.slot_rows[slot as usize] = index;
        self.row_slots.push(slot);
        self.row_lines.push(line_no);
        let (first_timestamp_ms, floor) = match self.timing {
            // Every timestamp counts for the shift; only roots are released by theirs.
            GraphTiming::Timestamps => (
                row.timestamp_ms,
                if is_root { row.timestamp_ms } else { None },
            ),
            GraphTiming::NotBefore => (None, row.timestamp_ms),
        };
        self.floor_ms.push(floor);
        self.sessions.push(Session {
            id: row
                .session_id
                .map_or(SessionId::Request(line_no as u64), SessionId::from),
            first_timestamp_ms,
            turns: smallvec::smallvec![Turn {
                input_length,
                max_output_tokens: output_length,
                delay_ms: 0.0,
                prompt: self.arena.push(ids, self.trace_block_size),
                priority: row.priority,
                strict_priority: row.strict_priority,
                policy_class: row.policy_class.map(Arc::from),
            }],
        });
        Ok(())
    }

    /// Resolves dependency ids to requests and checks the graph: unknown ids and
    /// self-dependencies in file order, then cycles by depth-first search in file order.
    pub(super) fn finish(mut self) -> Result<Workload> {
        let path = &self.path;
        for row in 0..self.sessions.len() {
            let own_slot = self.row_slots[row];
            let own = &self.slot_names[own_slot as usize];
            for edge in &mut self.edges[self.offsets[row] as usize..self.offsets[row + 1] as usize]
            {
                let source_row = self.slot_rows[edge.source as usize];
                if source_row == UNDEFINED {
                    return Err(Error::usage(format!(
                        "request {own} waits for unknown request_id {} (line {} of {path})",
                        self.slot_names[edge.source as usize], self.row_lines[row]
                    )));
                }
                if edge.source == own_slot {
                    return Err(Error::usage(format!(
                        "request {own} cannot wait for itself (line {} of {path})",
                        self.row_lines[row]
                    )));
                }
                edge.source = source_row;
            }
        }
        let graph = DependencyGraph {
            offsets: self.offsets,
            edges: self.edges,
            floor_ms: self.floor_ms,
            timing: self.timing,
        };
        if let Some(row) = first_cycle(&graph) {
            return Err(Error::usage(format!(
                "cycle detected at request {} (line {} of {path})",
                self.slot_names[self.row_slots[row] as usize], self.row_lines[row]
            )));
        }
        self.arena.share(&mut self.sessions);
        Ok(Workload {
            sessions: self.sessions,
            prompts: super::PromptMode::Full,
            graph: Some(graph),
            synthetic: None,
        })
    }
}

/// The request at which a depth-first search (roots in file order, dependencies in written
/// order) first re-enters a request it is still inside, if the graph has a cycle. Iterative,
/// so that a long chain cannot overflow the stack.
pub(super) fn first_cycle(graph: &DependencyGraph) -> Option<usize> {
    const NEW: u8 = 0;
    const ACTIVE: u8 = 1;
    const DONE: u8 = 2;
    let mut marks = vec![NEW; graph.len()];
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for start in 0..graph.len() {
        if marks[start] != NEW {
            continue;
        }
        marks[start] = ACTIVE;
        stack.push((start, 0));
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let deps = graph.dependencies(node);
            if *next < deps.len() {
                let dep = deps[*next].source as usize;
                *next += 1;
                match marks[dep] {
                    DONE => {}
                    ACTIVE => return Some(dep),
                    _ => {
                        marks[dep] = ACTIVE;
                        stack.push((dep, 0));
                    }
                }
            } else {
                marks[node] = DONE;
                stack.pop();
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::lines::testing::{mutate, TempTrace};
    use super::*;

    fn load(text: &str) -> Result<Workload> {
        let file = TempTrace::new(".jsonl", text.as_bytes());
        read_agentic(&file.0, 512, None)
    }

    fn err(text: &str) -> String {
        let error = load(text).expect_err("trace should be rejected");
        assert_eq!(error.exit_code(), 2, "{error}");
        error.to_string()
    }

    fn assert_starts(message: &str, start: &str) {
        assert!(
            message.starts_with(start),
            "{message:?} should start with {start:?}"
        );
    }

    #[test]
    fn version_1_rows_become_a_graph() {
        let w = load(
            "{\"request_id\":\"b\",\"wait_for\":[\"a\"],\"delay\":10,\"tool_wait_ms\":-4,\"timestamp\":3,\"hash_ids\":[1,2],\"input_length\":600,\"output_length\":2}\n\
             \n\
             {\"request_id\":\"a\",\"session_id\":\"s\",\"timestamp\":1000,\"hash_ids\":[1],\"output_tokens\":1,\"tool_events\":[{\"tool_call_id\":\"t\",\"tool_class\":\"c\",\"started_at_unix_ms\":1,\"ended_at_unix_ms\":2,\"duration_ms\":1.0,\"status\":\"ok\"}]}\n",
        )
        .unwrap();
        let graph = w.graph.as_ref().unwrap();
        assert_eq!(graph.timing, GraphTiming::Timestamps);
        assert_eq!(w.sessions.len(), 2);
        assert_eq!(w.sessions[0].id, "request_1");
        assert_eq!(w.sessions[1].id, "s");
        // Every timestamp counts for the shift; only roots keep theirs as a floor.
        assert_eq!(w.sessions[0].first_timestamp_ms, Some(3.0));
        assert_eq!(graph.floor_ms, vec![None, Some(1000.0)]);
        assert_eq!(
            graph.dependencies(0),
            &[Dependency {
                source: 1,
                trigger: Trigger::Completion,
                delay_ms: 6.0
            }]
        );
        assert!(graph.dependencies(1).is_empty());
        assert_eq!(w.sessions[1].turns[0].input_length, 512);
        assert_eq!(w.sessions[0].turns[0].input_length, 600);
    }

    #[test]
    fn version_1_errors_name_line_and_file() {
        assert_starts(
            &err("{\"hash_ids\":[1],\"output_length\":1}"),
            "failed to parse line 1 from ",
        );
        assert!(err("{\"hash_ids\":[1],\"output_length\":1}")
            .contains("as agentic Mooncake JSON: missing field `request_id`"));
        assert_starts(
            &err("{\"request_id\":\" \",\"hash_ids\":[1],\"output_length\":1}"),
            "trace line 1 has empty request_id",
        );
        assert_starts(
            &err("{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1}\n{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1}"),
            "trace line 2 duplicates request_id a",
        );
        assert_starts(
            &err("{\"request_id\":\"a\",\"hash_ids\":[1],\"input_length\":513,\"output_length\":1}"),
            "trace line 1 has input_length 513 but only 512 tokens can be synthesized from 1 hash_ids at trace_block_size 512",
        );
        assert_starts(
            &err("{\"request_id\":\"a\",\"output_length\":1}"),
            "trace line 1 is missing hash_ids",
        );
        assert_starts(
            &err("{\"request_id\":\"a\",\"hash_ids\":[1]}"),
            "trace line 1 is missing output_length",
        );
        assert_starts(
            &err("{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1,\"delay\":-1}"),
            "trace line 1 has invalid dependency delay -1",
        );
        assert_starts(
            &err("{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1,\"timestamp\":-1}"),
            "trace line 1 has invalid timestamp -1",
        );
        assert_starts(
            &err(
                "{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1,\"wait_for\":[\"x\"]}",
            ),
            "request a waits for unknown request_id x (line 1 of ",
        );
        assert_starts(
            &err(
                "{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1,\"wait_for\":[\"a\"]}",
            ),
            "request a cannot wait for itself",
        );
        assert_starts(
            &err("{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1,\"wait_for\":[\"b\"]}\n{\"request_id\":\"b\",\"hash_ids\":[1],\"output_length\":1,\"wait_for\":[\"a\"]}"),
            "cycle detected at request a (line 1 of ",
        );
        assert_starts(&err("\n\n"), "agentic trace file ");
        let strict_tool = err("{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1,\"tool_events\":[{\"tool_call_id\":\"t\"}]}");
        assert!(
            strict_tool.contains("(field tool_events)") || strict_tool.contains("missing field"),
            "{strict_tool}"
        );
    }

    #[test]
    fn long_dependency_chains_do_not_overflow_the_stack() {
        let mut text = String::from(
            "{\"request_id\":\"r0\",\"hash_ids\":[1],\"output_length\":1,\"timestamp\":0}\n",
        );
        for i in 1..200_000 {
            text.push_str(&format!(
                "{{\"request_id\":\"r{i}\",\"hash_ids\":[1],\"output_length\":1,\"wait_for\":[\"r{}\"]}}\n",
                i - 1
            ));
        }
        let w = load(&text).unwrap();
        assert_eq!(w.sessions.len(), 200_000);
    }

    fn fixture() -> Option<std::path::PathBuf> {
        crate::shared_file("traces/fixtures/agentic-mooncake.jsonl")
    }

    #[test]
    fn version_2_fixture_loads_with_typed_dependencies() {
        let Some(path) = fixture() else { return };
        let w = read_agentic(&path, 512, None).unwrap();
        let graph = w.graph.as_ref().unwrap();
        assert_eq!(graph.timing, GraphTiming::NotBefore);
        assert_eq!(
            w.sessions
                .iter()
                .map(|s| s.id.to_string())
                .collect::<Vec<_>>(),
            ["root", "child", "root"]
        );
        assert_eq!(graph.floor_ms, vec![Some(0.0); 3]);
        assert!(matches!(
            &w.sessions[0].turns[0].prompt,
            crate::workload::Prompt::HashIds(prompt) if prompt.block_size() == 4
        ));
        assert_eq!(
            graph.dependencies(1),
            &[Dependency {
                source: 0,
                trigger: Trigger::Dispatch,
                delay_ms: 5.0
            }]
        );
        assert_eq!(
            graph.dependencies(2),
            &[
                Dependency {
                    source: 0,
                    trigger: Trigger::Completion,
                    delay_ms: 1.0
                },
                Dependency {
                    source: 1,
                    trigger: Trigger::Completion,
                    delay_ms: 1.0
                }
            ]
        );
        let mismatch = read_agentic(&path, 16, Some(16)).unwrap_err().to_string();
        assert_starts(
            &mismatch,
            "trace_block_size 16 does not match embedded agentic trace block size 4",
        );
    }

    #[test]
    fn version_2_rows_are_validated() {
        let header = "{\"schema\":\"dynamo.agentic_mooncake\",\"version\":2,\"block_size\":4}\n";
        let e = err(&format!("{header}{{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1,\"dependencies\":[{{\"request_id\":\"a\",\"trigger\":\"later\"}}]}}"));
        assert!(
            e.starts_with("failed to parse line 2 from ") && e.contains("(field dependencies)"),
            "{e}"
        );
        let e = err(&format!("{header}{{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1,\"not_before_ms\":-3}}"));
        assert_starts(&e, "trace line 2 has invalid not_before_ms -3");
        let e = err(&format!("{header}{{\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1,\"dependencies\":[{{\"request_id\":\"b\",\"trigger\":\"completion\"}}]}}"));
        assert_starts(&e, "request a waits for unknown request_id b");
        let e = err("{\"schema\":\"dynamo.agentic_mooncake\",\"version\":3,\"block_size\":4}\n");
        assert!(e.contains("unsupported version 3"), "{e}");
    }

    mod never_panics {
        use super::*;
        use proptest::prelude::*;

        const VALID: &str = "{\"request_id\":\"a\",\"timestamp\":5,\"hash_ids\":[1,2],\"input_length\":700,\"output_length\":3}\n\
            {\"request_id\":\"b\",\"wait_for\":[\"a\"],\"delay\":4,\"tool_wait_ms\":1,\"hash_ids\":[1,3],\"output_length\":2,\"tool_events\":[]}\n";
        const VALID_V2: &str = "{\"schema\":\"dynamo.agentic_mooncake\",\"version\":2,\"block_size\":4}\n\
            {\"request_id\":\"a\",\"hash_ids\":[1],\"output_length\":1,\"not_before_ms\":0,\"dependencies\":[]}\n\
            {\"request_id\":\"b\",\"hash_ids\":[2],\"output_length\":1,\"dependencies\":[{\"request_id\":\"a\",\"trigger\":\"dispatch\",\"delay_ms\":2}]}\n";

        fn check(bytes: &[u8]) {
            let file = TempTrace::new(".jsonl", bytes);
            if let Err(e) = read_agentic(&file.0, 4, None) {
                assert!(e.to_string().contains(&file.shown()), "{e}");
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]
            #[test]
            fn on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
                check(&bytes);
            }

            #[test]
            fn on_mutated_valid_rows(v2 in any::<bool>(), op in any::<u8>(), at in any::<usize>(), byte in any::<u8>()) {
                check(&mutate(if v2 { VALID_V2 } else { VALID }, op, at, byte));
            }
        }
    }
}
