//! Entry syntax: one framed line to a borrowed measurement, tags, fields and timestamp.

use std::borrow::Cow;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use super::lex::{
    ESC_KEY, ESC_MEASUREMENT, ESC_STRING, FIELD_VALUE, KEY, MEASUREMENT, TAG_VALUE, at_eol, is,
    scan, skip_spaces, unescape, utf8,
};
use super::{ECHO_BYTES, LineError};
use crate::ingest::validate::{self, KnownSeries};
use crate::model::{FieldNames, Series};

/// A field value before it is made owned.
pub(super) enum Value<'a> {
    Float(f64),
    Int(i64),
    UInt(u64),
    Bool(bool),
    Str(Cow<'a, str>),
}

/// What one entry parsed to, borrowing from the body. Reused from line to line so that a body
/// costs no allocations beyond the owned output and escaped tokens.
#[derive(Default)]
pub(super) struct Scratch<'a> {
    pub(super) measurement: Cow<'a, str>,
    /// Where the measurement and tags end (exclusive), for the series key.
    pub(super) series: (usize, usize),
    /// The series, when its text was known: then `measurement` and `tags` are not filled.
    pub(super) known: Option<Series>,
    /// The line as text, when the body is valid UTF-8 (checked once for the whole body).
    pub(super) text: Option<&'a str>,
    pub(super) tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    pub(super) fields: Vec<(Cow<'a, str>, Value<'a>)>,
    /// Each field key's place in `fields`, once a line has more than `LINEAR_FIELDS`: a
    /// repeated key is looked up here, not in every field before it.
    field_index: HashMap<Cow<'a, str>, usize, foldhash::fast::RandomState>,
    pub(super) ts: Option<i64>,
    /// Outlives the lines: the body's readings share their field names.
    pub(super) names: FieldNames,
    /// A series text behind its database's prefix, as [`KnownSeries`] knows it; only written
    /// for a database other than the default.
    pub(super) known_text: Vec<u8>,
}

impl Scratch<'_> {
    /// The series text of `line` as [`KnownSeries`] knows it: behind `prefix`.
    pub(super) fn known_text<'t>(&'t mut self, prefix: &str, line: &'t [u8]) -> &'t [u8] {
        let text = &line[self.series.0..self.series.1];
        if prefix.is_empty() {
            return text;
        }
        self.known_text.clear();
        self.known_text.extend_from_slice(prefix.as_bytes());
        self.known_text.extend_from_slice(text);
        &self.known_text
    }
}

/// Why a line was rejected, before it is tied to a line number.
pub(super) struct Bad {
    /// Byte offset in the line, for the message.
    pub(super) at: Option<usize>,
    pub(super) message: String,
    pub(super) reason: &'static str,
}

impl Bad {
    pub(super) fn syntax(at: usize, message: impl Into<String>) -> Bad {
        Bad { at: Some(at), message: message.into(), reason: "syntax" }
    }

    pub(super) fn into_line_error(self, line_no: usize, line: &[u8]) -> LineError {
        let message = match self.at {
            Some(at) => format!("{} (column {})", self.message, at + 1),
            None => self.message,
        };
        LineError { line: line_no, message, input: echo(line), reason: self.reason }
    }
}

/// The start of a line for an error message, without converting all of a long line.
pub(super) fn echo(line: &[u8]) -> String {
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
    validate::truncate_for_echo(&text, ECHO_BYTES).to_owned()
}

/// Describes a byte for an error message.
fn show(b: Option<&u8>) -> String {
    match b {
        None => "end of line".to_owned(),
        Some(&b) if b.is_ascii() => format!("{:?}", b as char),
        Some(&b) => format!("byte 0x{b:02x}"),
    }
}

/// The text of a scanned token: borrowed unless it holds an escape. Rejects invalid UTF-8.
pub(super) fn token<'a>(
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
pub(super) fn parse_entry<'a>(
    s: &'a [u8],
    start: usize,
    out: &mut Scratch<'a>,
    known: &KnownSeries,
    prefix: &str,
) -> Result<(), Bad> {
    out.tags.clear();
    out.fields.clear();
    out.field_index.clear();
    out.ts = None;
    out.known = None;

    // A known series text came from a line that parsed and validated, and the same bytes
    // followed by the same space scan the same way again: skip tokenizing them.
    let end = series_end(s, start);
    out.series = (start, end);
    if end < s.len()
        && let Some(series) = known.get(out.known_text(prefix, s))
    {
        out.known = Some(series);
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
        push_field(out, key, value);
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

/// Lines with up to this many fields look for a repeated key among the fields before it;
/// wider ones in `Scratch::field_index` (a scan made 256-field lines quadratic).
const LINEAR_FIELDS: usize = 16;

/// Adds a field; a repeated key keeps its first position and takes the new value.
fn push_field<'a>(out: &mut Scratch<'a>, key: Cow<'a, str>, value: Value<'a>) {
    let fields = &mut out.fields;
    if fields.len() < LINEAR_FIELDS {
        match fields.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => fields.push((key, value)),
        }
        return;
    }
    let index = &mut out.field_index;
    if index.is_empty() {
        index.extend(fields.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)));
    }
    match index.entry(key) {
        Entry::Occupied(at) => fields[*at.get()].1 = value,
        Entry::Vacant(at) => {
            fields.push((at.key().clone(), value));
            at.insert(fields.len() - 1);
        }
    }
}
