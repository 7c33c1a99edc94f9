//! InfluxDB line protocol, read the way the Go reference decoder (influxdata/line-protocol
//! v2.1.0) reads it: that is what Telegraf, InfluxDB 1.x/2.x and their client libraries agree on,
//! and `tests/it/ingest/line_protocol_conformance.rs` pins it against that decoder's corpus.
//!
//! # Rules
//! - `measurement[,tag=value...] field=value[,field=value...] [timestamp]`, one entry per line.
//!   Lines that are blank (spaces and an optional `\r`) or start with `#` (after spaces) are
//!   skipped; a comment holding a control character is an error, as in the reference.
//! - Outside string fields a backslash escapes only `,`, `=` and space (in the measurement only
//!   `,` and space); every other backslash is literal. In string fields only `\"` and `\\` are
//!   escapes, and a raw newline is part of the string.
//! - Field values: `"string"`, booleans exactly `t T true True TRUE f F false False FALSE`, `1i`
//!   signed, `1u` unsigned, anything else numeric is a float. NaN and infinities are rejected.
//! - Tags and fields must be non-empty; a repeated tag key is an error.
//! - The timestamp is an optional signed 64-bit integer in the write's [`Precision`].
//! - Every token must be valid UTF-8; a line that breaks this is rejected alone.
//!
//! # Where bucketd differs from the reference, on purpose
//! - Readings are stored in milliseconds: finer timestamps are floored (toward negative
//!   infinity, so -1 ns is -1 ms) and coarser ones multiplied, so `precision=s` accepts times
//!   beyond the year 2262 that the reference (which converts to ns) refuses; the store's range
//!   (years 0000 to 9999) is enforced by [`crate::ingest::validate::validate`] afterwards.
//! - A field key repeated within one line keeps its first position and its last value, as
//!   InfluxDB's storage does (the reference decoder hands both on).
//! - Hexadecimal floats (`0x1p3`), which Go's `ParseFloat` happens to accept, are rejected.
//! - Entries are framed before they are parsed (see [`complete_line_len`]): after a syntax error
//!   the rest of the entry is skipped up to the newline that a quote-aware scan finds. The
//!   reference resumes at the first newline after the error instead, so for a malformed line
//!   followed by a quoted newline the next entry may start elsewhere; both reject the bad line.
//! - A line without a timestamp gets `now_ms` as given, not truncated to the precision.

mod build;
mod entry;
mod lex;
#[cfg(test)]
mod tests;

use self::build::build;
use self::entry::{Bad, Scratch, parse_entry};
use self::lex::{Kind, classify, frame};
use crate::ingest::validate::InputLimits;
use crate::model::{Item, TimestampMs};

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
    /// v1 `/write` spellings: n, ns, u, us, ms, s, m, h (absent means ns). An empty value is
    /// taken as absent, as InfluxDB 1.x does.
    pub fn from_v1(s: &str) -> Option<Precision> {
        Some(match s {
            "" | "n" | "ns" => Precision::Nanoseconds,
            "u" | "us" => Precision::Microseconds,
            "ms" => Precision::Milliseconds,
            "s" => Precision::Seconds,
            "m" => Precision::Minutes,
            "h" => Precision::Hours,
            _ => return None,
        })
    }

    /// v2 `/api/v2/write` spellings: ns, us, ms, s (absent or empty means ns).
    pub fn from_v2(s: &str) -> Option<Precision> {
        Some(match s {
            "" | "ns" => Precision::Nanoseconds,
            "us" => Precision::Microseconds,
            "ms" => Precision::Milliseconds,
            "s" => Precision::Seconds,
            _ => return None,
        })
    }

    /// Converts a timestamp in this precision to milliseconds, truncating toward negative
    /// infinity; `None` on overflow.
    pub fn to_millis(self, ts: i64) -> Option<TimestampMs> {
        match self {
            Precision::Nanoseconds => Some(ts.div_euclid(1_000_000)),
            Precision::Microseconds => Some(ts.div_euclid(1_000)),
            Precision::Milliseconds => Some(ts),
            Precision::Seconds => ts.checked_mul(1_000),
            Precision::Minutes => ts.checked_mul(60_000),
            Precision::Hours => ts.checked_mul(3_600_000),
        }
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

/// How many bytes of a bad line an error echoes back.
const ECHO_BYTES: usize = 100;

/// Parses and validates a whole body. Every line yields one result, so one bad line never
/// hides the good ones. Lines without a timestamp get `now_ms`.
pub fn parse_body(
    body: &[u8],
    precision: Precision,
    now_ms: TimestampMs,
    limits: &InputLimits,
) -> Vec<Result<Item, LineError>> {
    // Sizing the output once avoids repeated moves of a vector of large elements.
    let mut out = Vec::with_capacity(lines_in(body));
    parse_lines(body, precision, now_ms, limits, |result| out.push(result));
    out
}

/// As [`parse_body`], the good lines' items apart from the bad lines' errors, each in line
/// order: what a write pushes and what it reports. Made apart from the start, so a body's
/// items are not moved from one vector into another (two 100-byte copies a line).
pub fn parse_body_split(
    body: &[u8],
    precision: Precision,
    now_ms: TimestampMs,
    limits: &InputLimits,
) -> (Vec<Item>, Vec<LineError>) {
    let (mut items, mut errors) = (Vec::with_capacity(lines_in(body)), Vec::new());
    parse_lines(body, precision, now_ms, limits, |result| match result {
        Ok(item) => items.push(item),
        Err(e) => errors.push(e),
    });
    (items, errors)
}

/// At least the number of lines of `body`.
fn lines_in(body: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', body).count() + 1
}

/// Parses `body`, handing each line's result to `each` in line order.
fn parse_lines(
    body: &[u8],
    precision: Precision,
    now_ms: TimestampMs,
    limits: &InputLimits,
    mut each: impl FnMut(Result<Item, LineError>),
) {
    let mut scratch = Scratch::default();
    // One pass over the whole body, so tokens need not be validated one by one.
    let body_text = std::str::from_utf8(body).ok();
    let mut pos = 0;
    let mut line_no = 1;
    while pos < body.len() {
        let frame = frame(&body[pos..]);
        let line = &body[pos..pos + frame.len];
        scratch.text = body_text.and_then(|t| t.get(pos..pos + frame.len));
        let this_line = line_no;
        line_no += 1;
        if frame.multiline {
            line_no += memchr::memchr_iter(b'\n', line).count();
        }
        pos += frame.len + usize::from(frame.terminated);

        let result = match classify(line) {
            Kind::Blank | Kind::Comment => continue,
            Kind::BadComment(at) => Err(Bad::syntax(at, "invalid character in comment line")),
            Kind::Entry(start) => {
                parse_entry(line, start, &mut scratch, &limits.known, limits.database.prefix())
                    .and_then(|()| build(line, &mut scratch, precision, now_ms, limits))
            }
        };
        each(result.map_err(|bad| bad.into_line_error(this_line, line)));
    }
}

/// Length of the first complete line in `buf` including its `\n`, or `None` when `buf` holds
/// no complete line yet. Knows that a quoted string field may contain a newline, so a TCP
/// reader can frame lines that arrive split across reads.
///
/// A blank or comment line is a complete line too (parsing it yields nothing). An unterminated
/// string keeps the line open until its closing quote arrives, so callers must bound how much
/// they buffer.
pub fn complete_line_len(buf: &[u8]) -> Option<usize> {
    let f = frame(buf);
    f.terminated.then_some(f.len + 1)
}
