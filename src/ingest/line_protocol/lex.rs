//! Bytes to tokens: which bytes each part of a line may hold, where an entry ends, and the
//! scanning of one token.

use crate::model::series_key;

// ---- byte classes -------------------------------------------------------------------------

// The series section's classes (measurement, tags) and escapes are the series key's rules,
// which JSON shares: they come from `series_key`, so both read a key alike.

/// Bytes allowed in a measurement.
pub(super) const MEASUREMENT: u8 = 1 << 0;
/// Bytes allowed in tag keys and field keys.
pub(super) const KEY: u8 = 1 << 1;
/// Bytes allowed in tag values.
pub(super) const TAG_VALUE: u8 = 1 << 2;
/// Bytes allowed in an unquoted field value: anything but `,`, space, `\r` and `\n`.
pub(super) const FIELD_VALUE: u8 = 1 << 3;
/// Bytes allowed in a comment: anything but control characters.
const COMMENT: u8 = 1 << 4;
/// Bytes a backslash escapes in a measurement.
pub(super) const ESC_MEASUREMENT: u8 = 1 << 5;
/// Bytes a backslash escapes in tag keys, tag values and field keys.
pub(super) const ESC_KEY: u8 = 1 << 6;
/// Bytes a backslash escapes in a string field value.
pub(super) const ESC_STRING: u8 = 1 << 7;

const fn byte_classes() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let control = b < 0x20 || b == 0x7f;
        let mut c = 0;
        if series_key::in_measurement(b) {
            c |= MEASUREMENT;
        }
        if series_key::in_key(b) {
            c |= KEY;
        }
        if series_key::in_tag_value(b) {
            c |= TAG_VALUE;
        }
        if !(b == b',' || b == b' ' || b == b'\r' || b == b'\n') {
            c |= FIELD_VALUE;
        }
        if !control {
            c |= COMMENT;
        }
        if series_key::escaped_in_measurement(b) {
            c |= ESC_MEASUREMENT;
        }
        if series_key::escaped_in_key(b) {
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
pub(super) fn is(b: u8, class: u8) -> bool {
    CLASS[b as usize] & class != 0
}

// ---- framing --------------------------------------------------------------------------------

/// Where one entry ends: `len` bytes of content, then a `\n` when `terminated`.
pub(super) struct Frame {
    pub(super) len: usize,
    pub(super) terminated: bool,
    /// The content may hold newlines (inside a quoted string).
    pub(super) multiline: bool,
}

/// Finds the end of the first entry in `buf`: the first newline that is not inside a string
/// field value. Both `parse_body` and `complete_line_len` use this, so a TCP stream framed line
/// by line parses exactly like the same bytes sent as one body.
pub(super) fn frame(buf: &[u8]) -> Frame {
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

pub(super) enum Kind {
    Blank,
    Comment,
    BadComment(usize),
    /// An entry whose measurement starts at this offset.
    Entry(usize),
}

/// Blank and comment lines, as the reference skips them: leading spaces, then nothing (or a
/// lone `\r`), or `#` and printable bytes up to an optional final `\r`.
pub(super) fn classify(line: &[u8]) -> Kind {
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

// ---- tokens ---------------------------------------------------------------------------------

/// Scans a token of bytes in `class` from `*p`. A backslash followed by a byte in `escapes`
/// takes that byte into the token even when it is outside `class`; any other backslash is an
/// ordinary byte. Returns the token's start and whether it holds an escape.
#[inline]
pub(super) fn scan(s: &[u8], p: &mut usize, class: u8, escapes: u8) -> (usize, bool) {
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
pub(super) fn unescape(raw: &[u8], escapes: u8) -> Vec<u8> {
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
pub(super) fn utf8<'a>(
    s: &'a [u8],
    text: Option<&'a str>,
    start: usize,
    end: usize,
) -> Option<&'a str> {
    match text {
        Some(text) => text.get(start..end),
        None => std::str::from_utf8(&s[start..end]).ok(),
    }
}

#[inline]
pub(super) fn skip_spaces(s: &[u8], p: &mut usize) {
    while s.get(*p) == Some(&b' ') {
        *p += 1;
    }
}

/// End of line where the reference accepts one: the end, or a `\r` that ends the line.
#[inline]
pub(super) fn at_eol(s: &[u8], p: usize) -> bool {
    p == s.len() || (s[p] == b'\r' && p + 1 == s.len())
}
