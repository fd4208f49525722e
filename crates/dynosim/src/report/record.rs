//! Per-request records (`--report-jsonl`, frontend.md §3.8).

use serde::Serialize;

/// Where per-request records go as a run settles them, in record order (arrival time, then
/// request id). The caller owns it (the CLI writes each record to the JSONL file); the
/// simulator only hands records over, so the core stays free of I/O.
pub trait RecordSink: Send {
    fn accept(&mut self, record: RequestRecord);
}

impl RecordSink for Vec<RequestRecord> {
    fn accept(&mut self, record: RequestRecord) {
        self.push(record);
    }
}

/// How a request ended.
#[derive(Clone, Copy, Debug, Eq, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalStatus {
    Completed,
    Rejected,
    Canceled,
    Failed,
}

/// One per-request record (`--report-jsonl`), 28 keys in the reference's order.
///
/// The reference's `uuid` is a random UUIDv4. Ours is derived from the request index so runs are
/// reproducible: `00000000-0000-4000-8000-` followed by the index as 12 lowercase hex digits
/// (more digits only beyond 2^48 requests). Sorting these strings sorts by index.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestRecord {
    pub session_id: Option<String>,
    pub turn_index: Option<usize>,
    pub uuid: String,
    pub arrival_time_ms: f64,
    pub first_admit_ms: Option<f64>,
    pub terminal_time_ms: f64,
    pub first_token_ms: Option<f64>,
    pub last_token_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub ttst_ms: Option<f64>,
    pub e2e_latency_ms: Option<f64>,
    /// The request's mean time per output token (the reference's per-request `itl_ms`).
    pub itl_ms: Option<f64>,
    pub input_length: usize,
    /// Output tokens the workload asked for.
    pub requested_output_length: usize,
    /// Output tokens actually emitted.
    pub output_length: usize,
    pub reused_input_tokens: usize,
    pub prefill_worker_idx: Option<usize>,
    pub decode_worker_idx: Option<usize>,
    pub prefill_admit_ms: Option<f64>,
    pub source_held_ms: Option<f64>,
    pub destination_reserved_ms: Option<f64>,
    pub destination_activated_ms: Option<f64>,
    pub decode_admit_ms: Option<f64>,
    pub source_released_ms: Option<f64>,
    pub decode_reused_input_tokens: Option<usize>,
    pub prefill_route_overlap_tokens: Option<usize>,
    pub decode_route_overlap_tokens: Option<usize>,
    pub terminal_status: TerminalStatus,
}

impl RequestRecord {
    /// The deterministic uuid string of request `index` (see the type's documentation).
    pub fn uuid_for_index(index: usize) -> String {
        format!("00000000-0000-4000-8000-{index:012x}")
    }

    /// The record as one compact JSON object (no trailing newline), keys in the reference's
    /// order, floats as serde_json writes them (`0.0`, `178.79843000000005`), `null` for None.
    pub fn to_json_line(&self) -> String {
        // Serializing plain numbers, strings and options into a String cannot fail.
        serde_json::to_string(self).expect("a request record always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A completed row of a reference `--report-jsonl` (mooncake_tiny, 2 workers).
    const REFERENCE_LINE: &str = r#"{"session_id":null,"turn_index":null,"uuid":"16f1a8d9-8832-4ef9-983a-8d5de83ad558","arrival_time_ms":0.0,"first_admit_ms":0.0,"terminal_time_ms":2747.972932000003,"first_token_ms":351.043689,"last_token_ms":2747.972932000003,"ttft_ms":351.043689,"ttst_ms":176.02468799999997,"e2e_latency_ms":2747.972932000003,"itl_ms":7.609299184126993,"input_length":2287,"requested_output_length":316,"output_length":316,"reused_input_tokens":512,"prefill_worker_idx":null,"decode_worker_idx":1,"prefill_admit_ms":null,"source_held_ms":null,"destination_reserved_ms":null,"destination_activated_ms":null,"decode_admit_ms":null,"source_released_ms":null,"decode_reused_input_tokens":null,"prefill_route_overlap_tokens":null,"decode_route_overlap_tokens":null,"terminal_status":"completed"}"#;

    #[test]
    fn json_line_matches_reference_layout() {
        let record = RequestRecord {
            session_id: None,
            turn_index: None,
            uuid: "16f1a8d9-8832-4ef9-983a-8d5de83ad558".to_string(),
            arrival_time_ms: 0.0,
            first_admit_ms: Some(0.0),
            terminal_time_ms: 2747.972932000003,
            first_token_ms: Some(351.043689),
            last_token_ms: Some(2747.972932000003),
            ttft_ms: Some(351.043689),
            ttst_ms: Some(176.02468799999997),
            e2e_latency_ms: Some(2747.972932000003),
            itl_ms: Some(7.609299184126993),
            input_length: 2287,
            requested_output_length: 316,
            output_length: 316,
            reused_input_tokens: 512,
            prefill_worker_idx: None,
            decode_worker_idx: Some(1),
            prefill_admit_ms: None,
            source_held_ms: None,
            destination_reserved_ms: None,
            destination_activated_ms: None,
            decode_admit_ms: None,
            source_released_ms: None,
            decode_reused_input_tokens: None,
            prefill_route_overlap_tokens: None,
            decode_route_overlap_tokens: None,
            terminal_status: TerminalStatus::Completed,
        };
        assert_eq!(record.to_json_line(), REFERENCE_LINE);
        let parsed: serde_json::Value = serde_json::from_str(REFERENCE_LINE).unwrap();
        assert_eq!(parsed.as_object().unwrap().len(), 28);
    }

    #[test]
    fn uuid_strings_sort_by_index() {
        assert_eq!(
            RequestRecord::uuid_for_index(0),
            "00000000-0000-4000-8000-000000000000"
        );
        assert_eq!(
            RequestRecord::uuid_for_index(255),
            "00000000-0000-4000-8000-0000000000ff"
        );
        assert!(RequestRecord::uuid_for_index(9) < RequestRecord::uuid_for_index(10));
    }
}
