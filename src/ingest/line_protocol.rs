//! InfluxDB line protocol. STUB: the public surface; bodies land with the ingest issue.

use crate::model::{InputLimits, Reading, SeriesMeta, TimestampMs};

/// Timestamp precision of a write (`precision=` query parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    Nanoseconds,
    Microseconds,
    Milliseconds,
    Seconds,
    Minutes,
    Hours,
}

impl Precision {
    /// v1 `/write` spellings: n, ns, u, us, ms, s, m, h (absent means ns).
    pub fn from_v1(_s: &str) -> Option<Precision> {
        todo!()
    }
    /// v2 `/api/v2/write` spellings: ns, us, ms, s.
    pub fn from_v2(_s: &str) -> Option<Precision> {
        todo!()
    }
    /// Converts a timestamp in this precision to milliseconds, truncating toward negative
    /// infinity; `None` on overflow.
    pub fn to_millis(self, _ts: i64) -> Option<TimestampMs> {
        todo!()
    }
}

/// One rejected line: 1-based line number, why, and the line echoed (truncated).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message} (input: {input:?})")]
pub struct LineError {
    pub line: usize,
    pub message: String,
    pub input: String,
    /// Label for the rejected-readings metric: "syntax" or an `InvalidReading::reason()`.
    pub reason: &'static str,
}

/// Parses and validates a whole body. Every line yields one result, so one bad line never
/// hides the good ones. Lines without a timestamp get `now_ms`.
pub fn parse_body(
    _body: &[u8],
    _precision: Precision,
    _now_ms: TimestampMs,
    _limits: &InputLimits,
) -> Vec<Result<(SeriesMeta, Reading), LineError>> {
    todo!()
}

/// Length of the first complete line in `buf` including its `\n`, or `None` when `buf` holds
/// no complete line yet. Knows that a quoted string field may contain a newline, so a TCP
/// reader can frame lines that arrive split across reads.
pub fn complete_line_len(_buf: &[u8]) -> Option<usize> {
    todo!()
}
