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
//!   (years 0000 to 9999) is enforced by [`crate::model::validate`] afterwards.
//! - A field key repeated within one line keeps its first position and its last value, as
//!   InfluxDB's storage does (the reference decoder hands both on).
//! - Hexadecimal floats (`0x1p3`), which Go's `ParseFloat` happens to accept, are rejected.
//! - Entries are framed before they are parsed (see [`complete_line_len`]): after a syntax error
//!   the rest of the entry is skipped up to the newline that a quote-aware scan finds. The
//!   reference resumes at the first newline after the error instead, so for a malformed line
//!   followed by a quoted newline the next entry may start elsewhere; both reject the bad line.
//! - A line without a timestamp gets `now_ms` as given, not truncated to the precision.

use std::borrow::Cow;
use std::sync::Arc;

use crate::model::{
    self, FieldNames, FieldValue, InputLimits, Item, KnownSeries, Reading, SeriesMeta, TimestampMs,
};

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
    let mut out = Vec::with_capacity(memchr::memchr_iter(b'\n', body).count() + 1);
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
            Kind::Entry(start) => parse_entry(line, start, &mut scratch, &limits.known)
                .and_then(|()| build(line, &mut scratch, precision, now_ms, limits)),
        };
        out.push(result.map_err(|bad| bad.into_line_error(this_line, line)));
    }
    out
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

/// The series key of a measurement and its tags (sorted by key): the line-protocol text of
/// that part of a line, e.g. `env,sensor=s1,site=w3`. Escapes `,` and space in the measurement
/// and `,`, `=` and space in tag keys and values, so parsing the key gives the series back.
pub fn series_key(measurement: &str, sorted_tags: &[(String, String)]) -> String {
    let len =
        measurement.len() + sorted_tags.iter().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>();
    let mut key = String::with_capacity(len);
    escape_into(&mut key, measurement, ESC_MEASUREMENT);
    for (k, v) in sorted_tags {
        key.push(',');
        escape_into(&mut key, k, ESC_KEY);
        key.push('=');
        escape_into(&mut key, v, ESC_KEY);
    }
    key
}

/// Splits a series key (`measurement[,tag=value...]`, as [`series_key`] writes it) into its
/// unescaped measurement and tags, in the order written. `None` when `key` is not exactly that.
pub(crate) fn parse_series_key(key: &str) -> Option<ParsedSeries<'_>> {
    let s = key.as_bytes();
    let mut p = 0;
    let (m_start, esc) = scan(s, &mut p, MEASUREMENT, ESC_MEASUREMENT);
    if p == m_start {
        return None;
    }
    let measurement = token(s, Some(key), m_start, p, esc, ESC_MEASUREMENT).ok()?;
    let mut tags = Vec::new();
    while p < s.len() {
        if s[p] != b',' {
            return None;
        }
        p += 1;
        let (k0, kesc) = scan(s, &mut p, KEY, ESC_KEY);
        if p == k0 || s.get(p) != Some(&b'=') {
            return None;
        }
        let k = token(s, Some(key), k0, p, kesc, ESC_KEY).ok()?;
        p += 1;
        let (v0, vesc) = scan(s, &mut p, TAG_VALUE, ESC_KEY);
        if p == v0 {
            return None;
        }
        let v = token(s, Some(key), v0, p, vesc, ESC_KEY).ok()?;
        if tags.iter().any(|(seen, _): &(Cow<str>, Cow<str>)| *seen == k) {
            return None;
        }
        tags.push((k, v));
    }
    Some(ParsedSeries { measurement, tags })
}

/// The measurement of a string that may or may not be a series key: its text up to the first
/// unescaped `,`, with the measurement escapes (`\,` and `\ `) undone. Spaces are kept.
pub(crate) fn measurement_prefix(key: &str) -> Cow<'_, str> {
    let s = key.as_bytes();
    let mut i = 0;
    let mut escaped = false;
    while i < s.len() {
        match s[i] {
            b'\\' if i + 1 < s.len() && is(s[i + 1], ESC_MEASUREMENT) => {
                escaped = true;
                i += 2;
            }
            b',' => break,
            _ => i += 1,
        }
    }
    if escaped {
        // Unescaping removes only ASCII backslashes, so the result stays valid UTF-8.
        Cow::Owned(String::from_utf8(unescape(&s[..i], ESC_MEASUREMENT)).unwrap_or_default())
    } else {
        Cow::Borrowed(&key[..i])
    }
}

/// A series key taken apart by [`parse_series_key`].
pub(crate) struct ParsedSeries<'a> {
    pub measurement: Cow<'a, str>,
    pub tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

// ---- byte classes -------------------------------------------------------------------------

/// Bytes allowed in a measurement: anything but `,`, space and control characters.
const MEASUREMENT: u8 = 1 << 0;
/// Bytes allowed in tag keys and field keys: anything but `,`, `=`, space and control characters.
const KEY: u8 = 1 << 1;
/// Bytes allowed in tag values: anything but `,`, `=`, space, `\r` and `\n` (the reference
/// allows other control characters here, unlike in keys).
const TAG_VALUE: u8 = 1 << 2;
/// Bytes allowed in an unquoted field value: anything but `,`, space, `\r` and `\n`.
const FIELD_VALUE: u8 = 1 << 3;
/// Bytes allowed in a comment: anything but control characters.
const COMMENT: u8 = 1 << 4;
/// Bytes a backslash escapes in a measurement.
const ESC_MEASUREMENT: u8 = 1 << 5;
/// Bytes a backslash escapes in tag keys, tag values and field keys.
const ESC_KEY: u8 = 1 << 6;
/// Bytes a backslash escapes in a string field value.
const ESC_STRING: u8 = 1 << 7;

const fn byte_classes() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let control = b < 0x20 || b == 0x7f;
        let mut c = 0;
        if !(control || b == b',' || b == b' ') {
            c |= MEASUREMENT;
        }
        if !(control || b == b',' || b == b'=' || b == b' ') {
            c |= KEY;
        }
        if !(b == b',' || b == b'=' || b == b' ' || b == b'\r' || b == b'\n') {
            c |= TAG_VALUE;
        }
        if !(b == b',' || b == b' ' || b == b'\r' || b == b'\n') {
            c |= FIELD_VALUE;
        }
        if !control {
            c |= COMMENT;
        }
        if b == b',' || b == b' ' {
            c |= ESC_MEASUREMENT;
        }
        if b == b',' || b == b'=' || b == b' ' {
            c |= ESC_KEY;
        }
        if b == b'\\' || b == b'"' {
            c |= ESC_STRING;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static CLASS: [u8; 256] = byte_classes();

#[inline]
fn is(b: u8, class: u8) -> bool {
    CLASS[b as usize] & class != 0
}

// ---- framing --------------------------------------------------------------------------------

/// Where one entry ends: `len` bytes of content, then a `\n` when `terminated`.
struct Frame {
    len: usize,
    terminated: bool,
    /// The content may hold newlines (inside a quoted string).
    multiline: bool,
}

/// Finds the end of the first entry in `buf`: the first newline that is not inside a string
/// field value. Both `parse_body` and `complete_line_len` use this, so a TCP stream framed line
/// by line parses exactly like the same bytes sent as one body.
fn frame(buf: &[u8]) -> Frame {
    let first_nl = memchr::memchr(b'\n', buf);
    let line = &buf[..first_nl.unwrap_or(buf.len())];
    // A string can only start at a quote: without one, the first newline ends the entry.
    if memchr::memchr(b'"', line).is_none() {
        return Frame { len: line.len(), terminated: first_nl.is_some(), multiline: false };
    }
    match quoted_entry_end(buf) {
        Some(end) => Frame { len: end, terminated: true, multiline: true },
        None => Frame { len: buf.len(), terminated: false, multiline: true },
    }
}

/// The index of the newline that ends the first entry, scanning the entry's structure just far
/// enough to know where a `"` opens a string (only in field-value position: elsewhere it is an
/// ordinary byte). Malformed input ends at the next newline from where it goes wrong.
fn quoted_entry_end(s: &[u8]) -> Option<usize> {
    let rest_of_line = |i: usize| memchr::memchr(b'\n', &s[i..]).map(|n| i + n);
    let mut i = 0;
    while s.get(i) == Some(&b' ') {
        i += 1;
    }
    if s.get(i) == Some(&b'#') {
        return rest_of_line(i);
    }
    // Measurement and tags: up to the first unescaped space. Both escape a space the same way,
    // so one scan serves both.
    loop {
        match *s.get(i)? {
            b'\n' => return Some(i),
            b' ' => break,
            b'\\' if s.get(i + 1).is_some_and(|&b| is(b, ESC_KEY)) => i += 2,
            _ => i += 1,
        }
    }
    while s.get(i) == Some(&b' ') {
        i += 1;
    }
    loop {
        // Field key.
        let key_start = i;
        loop {
            let b = *s.get(i)?;
            if b == b'\\' && s.get(i + 1).is_some_and(|&n| is(n, ESC_KEY)) {
                i += 2;
            } else if b == b'=' && i > key_start {
                i += 1;
                break;
            } else if is(b, KEY) || b == b'\\' {
                i += 1;
            } else {
                return rest_of_line(i);
            }
        }
        // Field value.
        match *s.get(i)? {
            b'"' => {
                i += 1;
                loop {
                    match *s.get(i)? {
                        b'"' => break,
                        b'\\' if s.get(i + 1).is_some_and(|&n| is(n, ESC_STRING)) => i += 2,
                        _ => i += 1,
                    }
                }
                i += 1;
            }
            b't' | b'T' | b'f' | b'F' | b'-' | b'.' | b'0'..=b'9' => {
                while s.get(i).is_some_and(|&b| is(b, FIELD_VALUE)) {
                    i += 1;
                }
            }
            _ => return rest_of_line(i),
        }
        if *s.get(i)? != b',' {
            // Timestamp, end of line, or garbage: no string can follow.
            return rest_of_line(i);
        }
        i += 1;
    }
}

enum Kind {
    Blank,
    Comment,
    BadComment(usize),
    /// An entry whose measurement starts at this offset.
    Entry(usize),
}

/// Blank and comment lines, as the reference skips them: leading spaces, then nothing (or a
/// lone `\r`), or `#` and printable bytes up to an optional final `\r`.
fn classify(line: &[u8]) -> Kind {
    let start = line.iter().position(|&b| b != b' ').unwrap_or(line.len());
    let rest = &line[start..];
    match rest.first() {
        None => Kind::Blank,
        Some(b'\r') if rest.len() == 1 => Kind::Blank,
        Some(b'#') => {
            let body = rest.strip_suffix(b"\r").unwrap_or(rest);
            match body.iter().position(|&b| !is(b, COMMENT)) {
                None => Kind::Comment,
                Some(at) => Kind::BadComment(start + at),
            }
        }
        Some(_) => Kind::Entry(start),
    }
}

// ---- parsing --------------------------------------------------------------------------------

/// A field value before it is made owned.
enum Value<'a> {
    Float(f64),
    Int(i64),
    UInt(u64),
    Bool(bool),
    Str(Cow<'a, str>),
}

/// What one entry parsed to, borrowing from the body. Reused from line to line so that a body
/// costs no allocations beyond the owned output and escaped tokens.
#[derive(Default)]
struct Scratch<'a> {
    measurement: Cow<'a, str>,
    /// Where the measurement and tags end (exclusive), for the series key.
    series: (usize, usize),
    /// The series, when its text was known: then `measurement` and `tags` are not filled.
    known: Option<Arc<SeriesMeta>>,
    /// The line as text, when the body is valid UTF-8 (checked once for the whole body).
    text: Option<&'a str>,
    tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    fields: Vec<(Cow<'a, str>, Value<'a>)>,
    ts: Option<i64>,
    /// Outlives the lines: the body's readings share their field names.
    names: FieldNames,
}

/// Why a line was rejected, before it is tied to a line number.
struct Bad {
    /// Byte offset in the line, for the message.
    at: Option<usize>,
    message: String,
    reason: &'static str,
}

impl Bad {
    fn syntax(at: usize, message: impl Into<String>) -> Bad {
        Bad { at: Some(at), message: message.into(), reason: "syntax" }
    }

    fn into_line_error(self, line_no: usize, line: &[u8]) -> LineError {
        let message = match self.at {
            Some(at) => format!("{} (column {})", self.message, at + 1),
            None => self.message,
        };
        LineError { line: line_no, message, input: echo(line), reason: self.reason }
    }
}

/// The start of a line for an error message, without converting all of a long line.
fn echo(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let cut = &line[..line.len().min(ECHO_BYTES)];
    let text = match std::str::from_utf8(cut) {
        Ok(text) => Cow::Borrowed(text),
        // The cut split a character: drop its first bytes.
        Err(e) if e.error_len().is_none() => {
            Cow::Borrowed(std::str::from_utf8(&cut[..e.valid_up_to()]).unwrap_or_default())
        }
        Err(_) => String::from_utf8_lossy(cut),
    };
    model::truncate_for_echo(&text, ECHO_BYTES).to_owned()
}

/// Describes a byte for an error message.
fn show(b: Option<&u8>) -> String {
    match b {
        None => "end of line".to_owned(),
        Some(&b) if b.is_ascii() => format!("{:?}", b as char),
        Some(&b) => format!("byte 0x{b:02x}"),
    }
}

/// Scans a token of bytes in `class` from `*p`. A backslash followed by a byte in `escapes`
/// takes that byte into the token even when it is outside `class`; any other backslash is an
/// ordinary byte. Returns the token's start and whether it holds an escape.
#[inline]
fn scan(s: &[u8], p: &mut usize, class: u8, escapes: u8) -> (usize, bool) {
    let start = *p;
    let mut i = start;
    let mut escaped = false;
    while i < s.len() {
        let b = s[i];
        if b == b'\\' {
            if i + 1 < s.len() && is(s[i + 1], escapes) {
                escaped = true;
                i += 2;
            } else {
                i += 1;
            }
        } else if is(b, class) {
            i += 1;
        } else {
            break;
        }
    }
    *p = i;
    (start, escaped)
}

/// Removes the escaping backslashes from a token.
fn unescape(raw: &[u8], escapes: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && i + 1 < raw.len() && is(raw[i + 1], escapes) {
            i += 1;
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

/// `s[start..end]` as text. `text` is all of `s` as text when `s` is valid UTF-8: then slicing
/// it (a check of two char boundaries) replaces validating the bytes again, and a slice that is
/// not on char boundaries is not valid UTF-8 on its own either.
#[inline]
fn utf8<'a>(s: &'a [u8], text: Option<&'a str>, start: usize, end: usize) -> Option<&'a str> {
    match text {
        Some(text) => text.get(start..end),
        None => std::str::from_utf8(&s[start..end]).ok(),
    }
}

/// The text of a scanned token: borrowed unless it holds an escape. Rejects invalid UTF-8.
fn token<'a>(
    s: &'a [u8],
    text: Option<&'a str>,
    start: usize,
    end: usize,
    escaped: bool,
    escapes: u8,
) -> Result<Cow<'a, str>, Bad> {
    let text = if escaped {
        String::from_utf8(unescape(&s[start..end], escapes)).map(Cow::Owned).map_err(|_| ())
    } else {
        utf8(s, text, start, end).map(Cow::Borrowed).ok_or(())
    };
    text.map_err(|()| Bad::syntax(start, "invalid UTF-8"))
}

#[inline]
fn skip_spaces(s: &[u8], p: &mut usize) {
    while s.get(*p) == Some(&b' ') {
        *p += 1;
    }
}

/// End of line where the reference accepts one: the end, or a `\r` that ends the line.
#[inline]
fn at_eol(s: &[u8], p: usize) -> bool {
    p == s.len() || (s[p] == b'\r' && p + 1 == s.len())
}

/// After a measurement or tag value: a comma must be followed by a tag.
fn tag_comma(s: &[u8], p: &mut usize) -> Result<(), Bad> {
    if s.get(*p) != Some(&b',') {
        return Ok(());
    }
    *p += 1;
    match s.get(*p) {
        None | Some(b' ' | b'\r' | b'\n') => {
            Err(Bad::syntax(*p, format!("expected tag key after comma, found {}", show(s.get(*p)))))
        }
        Some(_) => Ok(()),
    }
}

/// Where a series section starting at `start` would end: at the first space that no backslash
/// escapes. (Space is escapable in measurements, tag keys and tag values alike, and a backslash
/// never is, so a backslash before a space always escapes it.)
fn series_end(s: &[u8], start: usize) -> usize {
    let mut from = start;
    while let Some(i) = memchr::memchr(b' ', &s[from..]).map(|i| from + i) {
        if i == start || s[i - 1] != b'\\' {
            return i;
        }
        from = i + 1;
    }
    s.len()
}

/// Parses one entry (its line without the final `\n`) from `start` into `out`.
fn parse_entry<'a>(
    s: &'a [u8],
    start: usize,
    out: &mut Scratch<'a>,
    known: &KnownSeries,
) -> Result<(), Bad> {
    out.tags.clear();
    out.fields.clear();
    out.ts = None;
    out.known = None;

    // A known series text came from a line that parsed and validated, and the same bytes
    // followed by the same space scan the same way again: skip tokenizing them.
    let end = series_end(s, start);
    if end < s.len()
        && let Some(series) = known.get(&s[start..end])
    {
        out.known = Some(series);
        out.series = (start, end);
        return parse_fields(s, end, out);
    }
    let mut p = start;
    let (m0, esc) = scan(s, &mut p, MEASUREMENT, ESC_MEASUREMENT);
    if p == m0 {
        return Err(Bad::syntax(
            p,
            format!("invalid character {} at start of measurement", show(s.get(p))),
        ));
    }
    out.measurement = token(s, out.text, m0, p, esc, ESC_MEASUREMENT)?;
    tag_comma(s, &mut p)?;

    loop {
        match s.get(p) {
            Some(b' ') => break,
            None if !out.tags.is_empty() => break,
            None => {
                return Err(Bad::syntax(
                    p,
                    "expected tags or fields after the measurement, found end of line",
                ));
            }
            Some(_) => {}
        }
        let (k0, kesc) = scan(s, &mut p, KEY, ESC_KEY);
        if p == k0 {
            return Err(Bad::syntax(
                p,
                format!("expected tag key or fields, found {}", show(s.get(p))),
            ));
        }
        if s.get(p) != Some(&b'=') {
            return Err(Bad::syntax(
                p,
                format!("expected '=' after tag key, found {}", show(s.get(p))),
            ));
        }
        let key = token(s, out.text, k0, p, kesc, ESC_KEY)?;
        p += 1;
        let (v0, vesc) = scan(s, &mut p, TAG_VALUE, ESC_KEY);
        if p == v0 {
            return Err(Bad::syntax(
                p,
                format!("expected a value for tag {key:?}, found {}", show(s.get(p))),
            ));
        }
        let value = token(s, out.text, v0, p, vesc, ESC_KEY)?;
        out.tags.push((key, value));
        tag_comma(s, &mut p)?;
    }
    out.series = (start, p);
    parse_fields(s, p, out)
}

/// The field set and timestamp, from the space after the series section.
fn parse_fields<'a>(s: &'a [u8], mut p: usize, out: &mut Scratch<'a>) -> Result<(), Bad> {
    skip_spaces(s, &mut p);
    loop {
        let (k0, kesc) = scan(s, &mut p, KEY, ESC_KEY);
        if p == k0 {
            return Err(Bad::syntax(p, format!("expected a field key, found {}", show(s.get(p)))));
        }
        if s.get(p) != Some(&b'=') {
            return Err(Bad::syntax(
                p,
                format!("expected '=' after field key, found {}", show(s.get(p))),
            ));
        }
        let key = token(s, out.text, k0, p, kesc, ESC_KEY)?;
        p += 1;
        let value = field_value(s, out.text, &mut p, &key)?;
        push_field(&mut out.fields, key, value);
        match s.get(p) {
            None => return Ok(()),
            Some(b',') => {
                p += 1;
                continue;
            }
            Some(b' ' | b'\r' | b'\n') => {}
            other => {
                return Err(Bad::syntax(
                    p,
                    format!("unexpected {} after field value", show(other)),
                ));
            }
        }
        skip_spaces(s, &mut p);
        if at_eol(s, p) {
            return Ok(());
        }
        break;
    }

    let t0 = p;
    while s.get(p).is_some_and(|b| *b == b'-' || b.is_ascii_digit()) {
        p += 1;
    }
    let digits_end = p;
    if s.get(p).is_some_and(|b| !matches!(b, b' ' | b'\r' | b'\n')) {
        let end = memchr::memchr(b'\r', &s[p..]).map_or(s.len(), |n| p + n);
        let shown = String::from_utf8_lossy(&s[t0..end]);
        return Err(Bad::syntax(t0, format!("invalid timestamp {shown:?}")));
    }
    skip_spaces(s, &mut p);
    if !at_eol(s, p) {
        return Err(Bad::syntax(p, "unexpected text after timestamp"));
    }
    // The timestamp bytes are ASCII by construction.
    let text = utf8(s, out.text, t0, digits_end).unwrap_or_default();
    out.ts = Some(text.parse::<i64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => Bad {
            at: Some(t0),
            message: format!("timestamp {text} does not fit in 64 bits"),
            reason: "timestamp",
        },
        _ => Bad::syntax(t0, format!("invalid timestamp {text:?}")),
    })?);
    Ok(())
}

/// Parses the field value at `*p` (just after `=`).
fn field_value<'a>(
    s: &'a [u8],
    text: Option<&'a str>,
    p: &mut usize,
    key: &str,
) -> Result<Value<'a>, Bad> {
    let v0 = *p;
    match s.get(v0) {
        None => {
            Err(Bad::syntax(v0, format!("expected a value for field {key:?}, found end of line")))
        }
        Some(b'"') => {
            let mut i = v0 + 1;
            let mut escaped = false;
            loop {
                match memchr::memchr2(b'"', b'\\', &s[i..]) {
                    None => {
                        return Err(Bad::syntax(
                            v0,
                            format!("string value of field {key:?} has no closing quote"),
                        ));
                    }
                    Some(n) if s[i + n] == b'"' => {
                        i += n;
                        break;
                    }
                    Some(n) => {
                        i += n;
                        if s.get(i + 1).is_some_and(|&b| is(b, ESC_STRING)) {
                            escaped = true;
                            i += 2;
                        } else {
                            i += 1;
                        }
                    }
                }
            }
            let text = token(s, text, v0 + 1, i, escaped, ESC_STRING)?;
            *p = i + 1;
            Ok(Value::Str(text))
        }
        Some(b't' | b'T' | b'f' | b'F') => {
            let raw = unquoted(s, p);
            match raw {
                b"t" | b"T" | b"true" | b"True" | b"TRUE" => Ok(Value::Bool(true)),
                b"f" | b"F" | b"false" | b"False" | b"FALSE" => Ok(Value::Bool(false)),
                _ => Err(bad_value(v0, key, "boolean", raw)),
            }
        }
        Some(b'-' | b'.' | b'0'..=b'9') => {
            let raw = unquoted(s, p);
            // Numeric syntax is ASCII: anything else fails to parse below.
            let text = utf8(s, text, v0, *p).unwrap_or("\u{fffd}");
            if let Some(int) = text.strip_suffix('i') {
                int.parse::<i64>()
                    .map(Value::Int)
                    .map_err(|e| int_error(v0, key, "integer", raw, e))
            } else if let Some(uint) = text.strip_suffix('u') {
                uint.parse::<u64>()
                    .map(Value::UInt)
                    .map_err(|e| int_error(v0, key, "unsigned integer", raw, e))
            } else {
                match text.parse::<f64>() {
                    Ok(f) if f.is_finite() => Ok(Value::Float(f)),
                    // Rust reads "-inf" and "-nan" too; the reference refuses every non-finite.
                    Ok(_)
                        if text
                            .bytes()
                            .any(|b| b.is_ascii_alphabetic() && b != b'e' && b != b'E') =>
                    {
                        Err(bad_value(v0, key, "float", raw))
                    }
                    Ok(_) => Err(Bad {
                        at: Some(v0),
                        message: format!(
                            "value of field {key:?} is out of range for a 64-bit float"
                        ),
                        reason: "value",
                    }),
                    Err(_) => Err(bad_value(v0, key, "float", raw)),
                }
            }
        }
        Some(_) => Err(Bad::syntax(
            v0,
            format!(
                "value of field {key:?} has no recognised type (expected a number, boolean or \"string\")"
            ),
        )),
    }
}

fn unquoted<'a>(s: &'a [u8], p: &mut usize) -> &'a [u8] {
    let start = *p;
    while s.get(*p).is_some_and(|&b| is(b, FIELD_VALUE)) {
        *p += 1;
    }
    &s[start..*p]
}

fn bad_value(at: usize, key: &str, kind: &str, raw: &[u8]) -> Bad {
    let shown = String::from_utf8_lossy(&raw[..raw.len().min(40)]);
    Bad::syntax(at, format!("value of field {key:?} is not a valid {kind}: {shown:?}"))
}

fn int_error(at: usize, key: &str, kind: &str, raw: &[u8], e: std::num::ParseIntError) -> Bad {
    match e.kind() {
        std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => Bad {
            at: Some(at),
            message: format!("value of field {key:?} is out of range for a 64-bit {kind}"),
            reason: "value",
        },
        _ => bad_value(at, key, kind, raw),
    }
}

/// Adds a field; a repeated key keeps its first position and takes the new value.
fn push_field<'a>(
    fields: &mut Vec<(Cow<'a, str>, Value<'a>)>,
    key: Cow<'a, str>,
    value: Value<'a>,
) {
    match fields.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => fields.push((key, value)),
    }
}

/// Turns a parsed entry into the owned series and reading, and validates them.
fn build(
    line: &[u8],
    e: &mut Scratch<'_>,
    precision: Precision,
    now_ms: TimestampMs,
    limits: &InputLimits,
) -> Result<Item, Bad> {
    let text = &line[e.series.0..e.series.1];
    let (series, known) = match e.known.take() {
        Some(series) => (series, true),
        None => (Arc::new(new_series(line, e)?), false),
    };
    let ts = match e.ts {
        None => now_ms,
        Some(ts) => precision.to_millis(ts).ok_or_else(|| Bad {
            at: None,
            message: format!("timestamp {ts} in {precision:?} overflows milliseconds"),
            reason: "timestamp",
        })?,
    };
    let fields = e
        .fields
        .drain(..)
        .map(|(k, v)| {
            let v = match v {
                Value::Float(f) => FieldValue::Float(f),
                Value::Int(i) => FieldValue::Int(i),
                Value::UInt(u) => FieldValue::UInt(u),
                Value::Bool(b) => FieldValue::Bool(b),
                Value::Str(s) => FieldValue::Str(s.into_owned()),
            };
            (e.names.get(&k), v)
        })
        .collect();
    let reading = Reading { ts, fields };
    let checked = if known {
        model::validate_reading(&reading, limits)
    } else {
        model::validate(&series, &reading, limits)
            .and_then(|()| model::admit_series(&series, limits))
            .map(|()| limits.known.insert(text, &series))
    };
    checked.map_err(|invalid| Bad {
        at: None,
        message: invalid.to_string(),
        reason: invalid.reason(),
    })?;
    Ok((series, reading))
}

/// The series of a parsed entry, with its tags sorted and its key canonical.
fn new_series(line: &[u8], e: &mut Scratch<'_>) -> Result<SeriesMeta, Bad> {
    let presorted = e.tags.windows(2).all(|w| w[0].0 < w[1].0);
    if !presorted {
        e.tags.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        if let Some(w) = e.tags.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(Bad {
                at: None,
                message: format!("tag key {:?} appears more than once", w[0].0),
                reason: "syntax",
            });
        }
    }
    let tags: Vec<(String, String)> =
        e.tags.iter().map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned())).collect();
    // Text that parsed and re-encodes to itself: with the tags already in order, the written
    // series text is the series key, and copying it is cheaper than re-encoding.
    let key = match std::str::from_utf8(&line[e.series.0..e.series.1]) {
        Ok(raw) if presorted => raw.to_owned(),
        _ => series_key(&e.measurement, &tags),
    };
    Ok(SeriesMeta { key, measurement: e.measurement.as_ref().to_owned(), tags })
}

fn escape_into(out: &mut String, text: &str, escapes: u8) {
    for c in text.chars() {
        if c.is_ascii() && is(c as u8, escapes) {
            out.push('\\');
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_700_000_000_000;

    fn parse(body: &str) -> Vec<Result<Item, LineError>> {
        parse_body(body.as_bytes(), Precision::Nanoseconds, NOW, &InputLimits::default())
    }

    fn one(body: &str) -> Item {
        let mut r = parse(body);
        assert_eq!(r.len(), 1, "{r:?}");
        r.remove(0).unwrap_or_else(|e| panic!("{body:?}: {e}"))
    }

    fn err(body: &str) -> LineError {
        let mut r = parse(body);
        assert_eq!(r.len(), 1, "{r:?}");
        r.remove(0).expect_err(body)
    }

    fn strings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn precision_spellings() {
        for (s, p) in [
            ("n", Precision::Nanoseconds),
            ("ns", Precision::Nanoseconds),
            ("u", Precision::Microseconds),
            ("us", Precision::Microseconds),
            ("ms", Precision::Milliseconds),
            ("s", Precision::Seconds),
            ("m", Precision::Minutes),
            ("h", Precision::Hours),
        ] {
            assert_eq!(Precision::from_v1(s), Some(p), "{s}");
        }
        assert_eq!(Precision::from_v1("x"), None);
        assert_eq!(Precision::from_v1("NS"), None);
        for (s, p) in [
            ("ns", Precision::Nanoseconds),
            ("us", Precision::Microseconds),
            ("ms", Precision::Milliseconds),
            ("s", Precision::Seconds),
        ] {
            assert_eq!(Precision::from_v2(s), Some(p), "{s}");
        }
        for s in ["n", "u", "m", "h", "x"] {
            assert_eq!(Precision::from_v2(s), None, "{s}");
        }
    }

    #[test]
    fn to_millis_floors_and_detects_overflow() {
        assert_eq!(Precision::Nanoseconds.to_millis(1_999_999), Some(1));
        assert_eq!(Precision::Nanoseconds.to_millis(-1), Some(-1));
        assert_eq!(Precision::Nanoseconds.to_millis(-1_000_000), Some(-1));
        assert_eq!(Precision::Nanoseconds.to_millis(-1_000_001), Some(-2));
        assert_eq!(Precision::Microseconds.to_millis(-1), Some(-1));
        assert_eq!(Precision::Microseconds.to_millis(2_500), Some(2));
        assert_eq!(Precision::Milliseconds.to_millis(-7), Some(-7));
        assert_eq!(Precision::Seconds.to_millis(-2), Some(-2_000));
        assert_eq!(Precision::Minutes.to_millis(2), Some(120_000));
        assert_eq!(Precision::Hours.to_millis(-1), Some(-3_600_000));
        assert_eq!(Precision::Seconds.to_millis(i64::MAX / 999), None);
        assert_eq!(Precision::Hours.to_millis(i64::MIN / 1_000), None);
    }

    #[test]
    fn parses_a_point() {
        let (s, r) =
            one("env,site=w3,sensor=s1 temp=21.5,n=3i,u=4u,ok=T,msg=\"hi\" 1700000000123456789");
        assert_eq!(s.measurement, "env");
        assert_eq!(s.tags, strings(&[("sensor", "s1"), ("site", "w3")]));
        assert_eq!(s.key, "env,sensor=s1,site=w3");
        assert_eq!(r.ts, 1_700_000_000_123);
        assert_eq!(
            r.fields.to_vec(),
            vec![
                ("temp".into(), FieldValue::Float(21.5)),
                ("n".into(), FieldValue::Int(3)),
                ("u".into(), FieldValue::UInt(4)),
                ("ok".into(), FieldValue::Bool(true)),
                ("msg".into(), FieldValue::Str("hi".into())),
            ]
        );
    }

    #[test]
    fn lines_comments_blanks_and_crlf() {
        let body = "# header\r\n\r\n  \na v=1 1000000\r\n   # indented comment\nb v=2\r\n\nc v=3";
        let r = parse(body);
        let got: Vec<_> = r.iter().map(|x| x.as_ref().unwrap().0.measurement.clone()).collect();
        assert_eq!(got, ["a", "b", "c"]);
        assert_eq!(r[0].as_ref().unwrap().1.ts, 1);
        assert_eq!(r[1].as_ref().unwrap().1.ts, NOW);
        assert!(parse("").is_empty());
        assert!(parse("\n\n# only comments\n").is_empty());
    }

    #[test]
    fn precision_applies_to_timestamps() {
        let limits = InputLimits::default();
        let r = parse_body(b"m v=1 -1\nm v=1 1500", Precision::Seconds, NOW, &limits);
        assert_eq!(r[0].as_ref().unwrap().1.ts, -1_000);
        assert_eq!(r[1].as_ref().unwrap().1.ts, 1_500_000);
        let r = parse_body(b"m v=1 -1", Precision::Microseconds, NOW, &limits);
        assert_eq!(r[0].as_ref().unwrap().1.ts, -1);
    }

    #[test]
    fn errors_name_the_line_and_echo_it() {
        let body = "ok v=1\nbad v=\nok v=2\n\"multi v=\"a\nb\"\nlast v=x";
        let r = parse(body);
        assert_eq!(r.len(), 5);
        assert!(r[0].is_ok() && r[2].is_ok() && r[3].is_ok());
        let e = r[1].as_ref().unwrap_err();
        assert_eq!((e.line, e.input.as_str(), e.reason), (2, "bad v=", "syntax"));
        assert!(e.message.contains("column 7"), "{}", e.message);
        // The string's newline moves the following line numbers on, as a text editor counts.
        let e = r[4].as_ref().unwrap_err();
        assert_eq!((e.line, e.input.as_str()), (6, "last v=x"));

        let long = format!("m,{} v=", "t=x".repeat(100));
        let e = err(&long);
        assert_eq!(e.input.len(), ECHO_BYTES);
        assert!(long.starts_with(&e.input));
        let wide = format!("a{}", "é".repeat(60));
        assert_eq!(echo(wide.as_bytes()), format!("a{}", "é".repeat(49)), "cut on a char boundary");
        assert_eq!(echo(b"a\xffb\r"), "a\u{fffd}b");
        // A final CR ends the line; one in the middle is an error.
        assert_eq!(one("m v=1\r").1.fields.len(), 1);
        assert_eq!(err("m v=1\rx").line, 1);
    }

    #[test]
    fn reasons() {
        assert_eq!(err("m v=1 9223372036854775808").reason, "timestamp");
        assert_eq!(err("m v=1 1x").reason, "syntax");
        assert_eq!(err("m v=9223372036854775808i").reason, "value");
        assert_eq!(err("m v=-1u").reason, "syntax");
        assert_eq!(err("m v=1e400").reason, "value");
        assert_eq!(err("m v=-inf").reason, "syntax");
        assert_eq!(err("m v=-nan").reason, "syntax");
        assert_eq!(err("m,a=1,a=2 v=1").reason, "syntax");
        // Limits and the store's range come from `validate`.
        let r = parse_body(
            b"m v=1 -62167219200001",
            Precision::Milliseconds,
            NOW,
            &InputLimits::default(),
        );
        assert_eq!(r[0].as_ref().unwrap_err().reason, "timestamp", "before the year 0000");
        let tags: String = (0..65).map(|i| format!(",t{i}=x")).collect();
        assert_eq!(err(&format!("m{tags} v=1")).reason, "fields");
        assert_eq!(err(&format!("m {}=1", "f".repeat(300))).reason, "name");
        let r = parse_body(b"m v=1 3000000000000", Precision::Hours, NOW, &InputLimits::default());
        assert_eq!(r[0].as_ref().unwrap_err().reason, "timestamp");
    }

    #[test]
    fn precision_overflow_is_a_timestamp_error() {
        let r = parse_body(
            b"m v=1 9223372036854775807",
            Precision::Seconds,
            NOW,
            &InputLimits::default(),
        );
        let e = r[0].as_ref().unwrap_err();
        assert_eq!(e.reason, "timestamp");
        assert!(e.message.contains("overflows"), "{}", e.message);
    }

    #[test]
    fn invalid_utf8_rejects_only_its_line() {
        let r = parse_body(
            b"a v=1\nb\xff v=1\nc s=\"\xc3\"\nd v=1",
            Precision::Nanoseconds,
            NOW,
            &InputLimits::default(),
        );
        assert_eq!(r.len(), 4);
        assert!(r[0].is_ok() && r[3].is_ok());
        assert_eq!(r[1].as_ref().unwrap_err().line, 2);
        assert!(r[1].as_ref().unwrap_err().message.contains("UTF-8"));
        assert_eq!(r[2].as_ref().unwrap_err().line, 3);
    }

    #[test]
    fn repeated_field_keeps_first_place_and_last_value() {
        let (_, r) = one("m a=1,b=2,a=\"x\"");
        assert_eq!(
            r.fields.to_vec(),
            vec![("a".into(), FieldValue::Str("x".into())), ("b".into(), FieldValue::Float(2.0))]
        );
    }

    #[test]
    fn series_key_is_canonical_whatever_the_tag_order() {
        let (a, _) = one("w\\ x\\,y,z=1,b\\ k=v\\=\\,w v=1");
        let (b, _) = one("w\\ x\\,y,b\\ k=v\\=\\,w,z=1 v=1");
        assert_eq!(a, b);
        assert_eq!(a.measurement, "w x,y");
        assert_eq!(a.tags, strings(&[("b k", "v=,w"), ("z", "1")]));
        assert_eq!(a.key, "w\\ x\\,y,b\\ k=v\\=\\,w,z=1");
        // Literal backslashes stay literal and the key still parses back.
        let (c, _) = one("m\\=x,t=a\\\\\\ b v=1");
        assert_eq!((c.measurement.as_str(), c.tags[0].1.as_str()), ("m\\=x", "a\\\\ b"));
        assert_eq!(c.key, series_key(&c.measurement, &c.tags));
        let back = parse_series_key(&c.key).unwrap();
        assert_eq!(back.measurement, c.measurement);
        assert_eq!(back.tags, vec![(Cow::from("t"), Cow::from("a\\\\ b"))]);
    }

    #[test]
    fn series_key_helpers() {
        assert_eq!(series_key("env", &[]), "env");
        assert_eq!(
            series_key("a b,c=d", &strings(&[("k,=", "v =,")])),
            "a\\ b\\,c=d,k\\,\\==v\\ \\=\\,"
        );
        let p = parse_series_key("env,sensor=s1,site=w3").unwrap();
        assert_eq!(p.measurement, "env");
        assert_eq!(p.tags.len(), 2);
        for not_a_key in ["", "a b", "a,", "a,b", "a,b=", "a,=c", "a,b=c,b=d", "a,b=c d"] {
            assert!(parse_series_key(not_a_key).is_none(), "{not_a_key:?}");
        }
        assert_eq!(measurement_prefix("living room,x"), "living room");
        assert_eq!(measurement_prefix("a\\,b\\ c,d=e"), "a,b c");
        assert_eq!(measurement_prefix("plain"), "plain");
    }

    #[test]
    fn known_series_are_shared_and_still_checked() {
        let limits = InputLimits {
            max_fields: 2,
            series: Some(Arc::new(model::SeriesLimit::new(1))),
            ..InputLimits::default()
        };
        let body = b"m,b=2,a=1 v=1 1\nm,a=1,b=2 v=2 2\nm,b=2,a=1 v=3 3";
        let first = parse_body(body, Precision::Nanoseconds, NOW, &limits);
        let again = parse_body(body, Precision::Nanoseconds, NOW, &limits);
        let series: Vec<&Arc<SeriesMeta>> =
            first.iter().chain(&again).map(|r| &r.as_ref().unwrap().0).collect();
        assert_eq!(series[0].key, "m,a=1,b=2");
        assert_eq!(series[0].tags, strings(&[("a", "1"), ("b", "2")]));
        // Lines 1 and 3 are written alike and share one `SeriesMeta`, across bodies too;
        // line 2 is the same series written otherwise.
        assert!(Arc::ptr_eq(series[0], series[2]) && Arc::ptr_eq(series[0], series[5]));
        assert_eq!(series[1], series[0]);
        assert_eq!(limits.known.len(), 2);
        // The body's readings share one name object.
        let name = |r: &Result<Item, LineError>| r.as_ref().unwrap().1.fields[0].0.as_ptr();
        assert!(first.iter().all(|r| name(r) == name(&first[0])));

        // A known series does not excuse its reading, and an unknown one still needs a slot.
        let bad = parse_body(b"m,b=2,a=1 v=1,w=2,x=3 4", Precision::Nanoseconds, NOW, &limits);
        assert_eq!(bad[0].as_ref().unwrap_err().reason, "fields");
        let new = parse_body(b"m,a=9 v=1 4", Precision::Nanoseconds, NOW, &limits);
        assert_eq!(new[0].as_ref().unwrap_err().reason, "cardinality");
        assert_eq!(limits.known.len(), 2, "refused series are not remembered");
    }

    #[test]
    fn known_series_with_escaped_spaces_parse_like_new_ones() {
        let body: &[u8] = b"m\\ x,t=a\\ b v=1 1\nm\\ x,t=a\\ b v=2 2\nm\\ x,t=a\\ b v\n\
            m\\ x,t=a\\\\ b v=1\nm\\ x,t=a\\ b\nm\\ x,t=a\\ b  v=3 3";
        let limits = wide_limits();
        let whole = parse_body(body, Precision::Nanoseconds, NOW, &limits);
        assert_eq!(whole, parse_framed(body));
        assert_eq!(whole[0].as_ref().unwrap().0.key, "m\\ x,t=a\\ b");
        assert!(Arc::ptr_eq(&whole[0].as_ref().unwrap().0, &whole[5].as_ref().unwrap().0));
        assert_eq!(whole.iter().filter(|r| r.is_err()).count(), 2, "{whole:?}");
    }

    #[test]
    fn known_series_forget_everything_when_full() {
        let known = model::KnownSeries::new(2);
        let series =
            Arc::new(SeriesMeta { key: "m".into(), measurement: "m".into(), tags: vec![] });
        known.insert(b"a", &series);
        known.insert(b"b", &series);
        assert_eq!(known.len(), 2);
        known.insert(b"c", &series);
        assert_eq!(known.len(), 1);
        assert!(known.get(b"a").is_none() && known.get(b"c").is_some());
    }

    #[test]
    fn a_bad_comment_is_an_error() {
        let e = err("# tab\there");
        assert_eq!(e.reason, "syntax");
        assert!(e.message.contains("comment"));
        assert!(parse("# fine \"quoted\n\r\n").is_empty());
    }

    #[test]
    fn framing_respects_quotes_only_in_field_values() {
        assert_eq!(complete_line_len(b""), None);
        assert_eq!(complete_line_len(b"m v=1"), None);
        assert_eq!(complete_line_len(b"m v=1\nm v=2\n"), Some(6));
        assert_eq!(complete_line_len(b"\n"), Some(1));
        assert_eq!(complete_line_len(b"m s=\"a\nb\"\nnext"), Some(10));
        assert_eq!(complete_line_len(b"m s=\"a\nb"), None);
        assert_eq!(complete_line_len(b"m s=\"a\\\"\nb\" 1\n"), Some(14));
        assert_eq!(complete_line_len(b"m s=\"a\\\\\"\nb\"\n"), Some(10));
        assert_eq!(complete_line_len(b"m a=1,s=\"\n\",b=2\n"), Some(16));
        // Quotes in measurement, tag and field-key position are literal.
        assert_eq!(complete_line_len(b"\"m,t=\"x v=1\n\""), Some(12));
        assert_eq!(complete_line_len(b"m \"=1\nx"), Some(6));
        assert_eq!(complete_line_len(b"# \"comment\nx"), Some(11));
        // After the fields nothing can open a string.
        assert_eq!(complete_line_len(b"m v=1 \"\n"), Some(8));
        assert_eq!(complete_line_len(b"m v=x\"\n"), Some(7));
    }

    // ---- properties ------------------------------------------------------------------------

    #[derive(Clone, Debug)]
    struct Point {
        measurement: String,
        tags: Vec<(String, String)>,
        fields: Vec<(String, FieldValue)>,
        ts: Option<i64>,
    }

    /// Text for a name: no control characters (they have no escape), no trailing backslash
    /// (it would escape the separator after it).
    fn name() -> impl Strategy<Value = String> {
        "[a-z0-9 ,=\\\\\"#é_.-]{1,8}".prop_filter("no trailing backslash", |s| !s.ends_with('\\'))
    }

    fn field_value() -> impl Strategy<Value = FieldValue> {
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(FieldValue::Float),
            any::<i64>().prop_map(FieldValue::Int),
            any::<u64>().prop_map(FieldValue::UInt),
            any::<bool>().prop_map(FieldValue::Bool),
            "[a-z \"\\\\\n\r\t,=é]{0,10}".prop_map(FieldValue::Str),
        ]
    }

    fn point() -> impl Strategy<Value = Point> {
        (
            name().prop_filter("not a comment", |m| !m.starts_with('#')),
            proptest::collection::btree_map(name(), "[a-z0-9 ,=\\\\\"\t\u{1}]{1,6}", 0..4),
            proptest::collection::btree_map(name(), field_value(), 1..5),
            proptest::option::of(any::<i64>()),
        )
            .prop_filter("tag values may not end in a backslash", |(_, tags, _, _)| {
                tags.values().all(|v| !v.ends_with('\\'))
            })
            .prop_map(|(measurement, tags, fields, ts)| Point {
                measurement,
                tags: tags.into_iter().collect(),
                fields: fields.into_iter().collect(),
                ts,
            })
    }

    fn escape(out: &mut String, s: &str, escapes: &[char]) {
        for c in s.chars() {
            if escapes.contains(&c) {
                out.push('\\');
            }
            out.push(c);
        }
    }

    /// A small independent encoder.
    fn encode(p: &Point, bool_spelling: usize) -> String {
        let mut line = String::new();
        escape(&mut line, &p.measurement, &[',', ' ']);
        for (k, v) in p.tags.iter().rev() {
            line.push(',');
            escape(&mut line, k, &[',', '=', ' ']);
            line.push('=');
            escape(&mut line, v, &[',', '=', ' ']);
        }
        line.push(' ');
        for (i, (k, v)) in p.fields.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            escape(&mut line, k, &[',', '=', ' ']);
            line.push('=');
            match v {
                FieldValue::Float(f) => line.push_str(&format!("{f:?}")),
                FieldValue::Int(i) => line.push_str(&format!("{i}i")),
                FieldValue::UInt(u) => line.push_str(&format!("{u}u")),
                FieldValue::Bool(b) => {
                    let t = ["t", "T", "true", "True", "TRUE"];
                    let f = ["f", "F", "false", "False", "FALSE"];
                    line.push_str(if *b { t[bool_spelling % 5] } else { f[bool_spelling % 5] });
                }
                FieldValue::Str(s) => {
                    line.push('"');
                    escape(&mut line, s, &['"', '\\']);
                    line.push('"');
                }
            }
        }
        if let Some(ts) = p.ts {
            line.push_str(&format!(" {ts}"));
        }
        line
    }

    fn wide_limits() -> InputLimits {
        InputLimits { max_tags: 1000, max_fields: 1000, ..InputLimits::default() }
    }

    /// Parses `body` by framing it with `complete_line_len` and parsing each frame alone, with
    /// line numbers shifted back to the body's.
    fn parse_framed(body: &[u8]) -> Vec<Result<Item, LineError>> {
        let mut out = Vec::new();
        let mut rest = body;
        let mut line = 1;
        while !rest.is_empty() {
            let len = complete_line_len(rest).unwrap_or(rest.len());
            let (frame, tail) = rest.split_at(len);
            for mut r in parse_body(frame, Precision::Nanoseconds, NOW, &wide_limits()) {
                if let Err(e) = &mut r {
                    e.line += line - 1;
                }
                out.push(r);
            }
            line += memchr::memchr_iter(b'\n', frame).count();
            rest = tail;
        }
        out
    }

    /// Bytes that exercise the grammar rather than random noise.
    fn lp_bytes() -> impl Strategy<Value = Vec<u8>> {
        let pieces: &[&[u8]] = &[
            b"m",
            b"a",
            b"v",
            b"=",
            b",",
            b" ",
            b"\"",
            b"\\",
            b"\n",
            b"\r",
            b"#",
            b"1",
            b"-",
            b".",
            b"i",
            b"u",
            b"t",
            b"e",
            b"\t",
            b"\xc3\xa9",
            b"\xff",
            b"m,t=x v=1",
            b" 123",
        ];
        proptest::collection::vec(proptest::sample::select(pieces), 0..40).prop_map(|p| p.concat())
    }

    proptest! {
        #[test]
        fn encoded_points_parse_back(
            points in proptest::collection::vec(point(), 1..6),
            crlf in any::<bool>(),
            spelling in 0usize..5,
        ) {
            let sep = if crlf { "\r\n" } else { "\n" };
            let body: String = points.iter().map(|p| encode(p, spelling)).collect::<Vec<_>>().join(sep);
            let parsed = parse_body(body.as_bytes(), Precision::Nanoseconds, NOW, &wide_limits());
            prop_assert_eq!(parsed.len(), points.len(), "{:?}", body);
            for (p, r) in points.iter().zip(&parsed) {
                let (series, reading) = r.as_ref().map_err(|e| TestCaseError::fail(format!("{e} in {body:?}")))?;
                prop_assert_eq!(&series.measurement, &p.measurement);
                prop_assert_eq!(&series.tags, &p.tags);
                prop_assert_eq!(&series.key, &series_key(&p.measurement, &p.tags));
                prop_assert_eq!(reading.fields.len(), p.fields.len());
                for ((gk, gv), (wk, wv)) in reading.fields.iter().zip(&p.fields) {
                    prop_assert_eq!(gk, wk);
                    match (gv, wv) {
                        (FieldValue::Float(g), FieldValue::Float(w)) => prop_assert_eq!(g.to_bits(), w.to_bits()),
                        _ => prop_assert_eq!(gv, wv),
                    }
                }
                prop_assert_eq!(reading.ts, p.ts.map_or(NOW, |ts| ts.div_euclid(1_000_000)));
            }
            prop_assert_eq!(parse_framed(body.as_bytes()), parsed);
        }

        #[test]
        fn coarse_precisions_floor_to_millis(ms in -62_000_000_000_000i64..253_000_000_000_000, sub in 0i64..1_000_000) {
            let cases = [
                (Precision::Microseconds, ms * 1_000 + sub % 1_000, ms),
                (Precision::Milliseconds, ms, ms),
                (Precision::Seconds, ms.div_euclid(1_000), ms.div_euclid(1_000) * 1_000),
                (Precision::Minutes, ms.div_euclid(60_000), ms.div_euclid(60_000) * 60_000),
                (Precision::Hours, ms.div_euclid(3_600_000), ms.div_euclid(3_600_000) * 3_600_000),
            ];
            for (precision, raw, want) in cases {
                let body = format!("m v=1 {raw}");
                let r = parse_body(body.as_bytes(), precision, NOW, &InputLimits::default());
                prop_assert_eq!(r[0].as_ref().unwrap().1.ts, want, "{:?} {}", precision, raw);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic_and_frame_consistently(body in lp_bytes()) {
            let whole = parse_body(&body, Precision::Nanoseconds, NOW, &wide_limits());
            prop_assert_eq!(parse_framed(&body), whole.clone());
            for r in &whole {
                if let Err(e) = r {
                    prop_assert!(e.line >= 1 && e.input.len() <= ECHO_BYTES);
                }
            }
        }

        #[test]
        fn a_known_series_parses_like_a_new_one(body in lp_bytes()) {
            // Twice: each series of the first copy is known when its line comes again, while
            // `parse_framed` parses every line with a cold cache.
            let mut twice = body.clone();
            twice.push(b'\n');
            twice.extend_from_slice(&body);
            let whole = parse_body(&twice, Precision::Nanoseconds, NOW, &wide_limits());
            prop_assert_eq!(whole, parse_framed(&twice));
        }

        #[test]
        fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_body(&body, Precision::Nanoseconds, NOW, &InputLimits::default());
            let _ = complete_line_len(&body);
        }

        #[test]
        fn framing_is_the_same_at_every_split(
            points in proptest::collection::vec(point(), 1..3),
            noise in lp_bytes(),
        ) {
            let mut body = points.iter().map(|p| encode(p, 0)).collect::<Vec<_>>().join("\n").into_bytes();
            body.push(b'\n');
            body.extend_from_slice(&noise);
            let first = complete_line_len(&body);
            for k in 0..=body.len() {
                let want = first.filter(|&n| n <= k);
                prop_assert_eq!(complete_line_len(&body[..k]), want, "split at {}", k);
            }
        }
    }
}
