//! JSON readings. STUB: the public surface; bodies land with the ingest issue.

use crate::model::{InputLimits, Reading, SeriesMeta, TimestampMs};

/// One rejected item: its 0-based index in the request (array position or NDJSON line), why,
/// and the metric reason label ("syntax" or an `InvalidReading::reason()`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("item {index}: {message}")]
pub struct ItemError {
    pub index: usize,
    pub message: String,
    pub reason: &'static str,
}

pub type Parsed = Vec<Result<(SeriesMeta, Reading), ItemError>>;

/// Parses a body that is one JSON reading or an array of them.
pub fn parse_document(_body: &[u8], _now_ms: TimestampMs, _limits: &InputLimits) -> Parsed {
    todo!()
}

/// Incremental NDJSON: feed chunks as they arrive; complete lines are parsed at once, so a
/// large body is never held whole. Item indexes are 0-based line numbers (blank lines count).
pub struct NdjsonDecoder {
    _private: (),
}

impl NdjsonDecoder {
    pub fn new(_max_line_bytes: usize) -> Self {
        todo!()
    }
    pub fn feed(&mut self, _chunk: &[u8], _now_ms: TimestampMs, _limits: &InputLimits) -> Parsed {
        todo!()
    }
    /// Parses a last line that had no trailing newline.
    pub fn finish(self, _now_ms: TimestampMs, _limits: &InputLimits) -> Parsed {
        todo!()
    }
}
