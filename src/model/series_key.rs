//! The series key: the line-protocol text of a measurement and its tags sorted by key, e.g.
//! `env,sensor=s1,site=w3`, so that one series has one key however its tags were written.
//! Line protocol builds it for each new series; JSON takes a sensor key apart with it, so a
//! JSON reading keyed that way lands in the same series as the line-protocol point.
//!
//! The byte rules below are line protocol's own for that part of a line. Its lexer builds its
//! byte table from them, so the key and the parser cannot drift apart.
//!
//! Ingest builds and parses keys, the log rebuilds them, and InfluxQL's `SHOW SERIES` prints
//! them: they live here, below all three.

use std::borrow::Cow;

const fn is_control(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

/// Bytes allowed in a measurement: anything but `,`, space and control characters.
pub const fn in_measurement(b: u8) -> bool {
    !(is_control(b) || b == b',' || b == b' ')
}

/// Bytes allowed in tag keys (and in line protocol's field keys): anything but `,`, `=`, space
/// and control characters.
pub const fn in_key(b: u8) -> bool {
    !(is_control(b) || b == b',' || b == b'=' || b == b' ')
}

/// Bytes allowed in tag values: anything but `,`, `=`, space, `\r` and `\n` (the reference
/// decoder allows other control characters here, unlike in keys).
pub const fn in_tag_value(b: u8) -> bool {
    !(b == b',' || b == b'=' || b == b' ' || b == b'\r' || b == b'\n')
}

/// Sorts tags by key. Stable, so among tags with the same key the one given first stays first:
/// JSON names both values in its conflict message in the order the client gave them.
pub fn sort_tags<K: Ord, V>(tags: &mut [(K, V)]) {
    tags.sort_by(|a, b| a.0.cmp(&b.0));
}

/// The first two neighbours of sorted tags that share a key: a series has each tag key once.
pub fn repeated_key<K: Eq, V>(sorted: &[(K, V)]) -> Option<[&(K, V); 2]> {
    sorted.windows(2).find(|w| w[0].0 == w[1].0).map(|w| [&w[0], &w[1]])
}

/// A series key taken apart by [`parse_series_key`].
pub struct ParsedSeries<'a> {
    pub measurement: Cow<'a, str>,
    pub tags: Vec<(Cow<'a, str>, Cow<'a, str>)>,
}

/// Splits a series key (`measurement[,tag=value...]`, as [`series_key`] writes it) into its
/// unescaped measurement and tags, in the order written. `None` when `key` is not exactly that.
pub fn parse_series_key(key: &str) -> Option<ParsedSeries<'_>> {
    let mut p = 0;
    let measurement = token(key, &mut p, in_measurement, escaped_in_measurement)?;
    let s = key.as_bytes();
    let mut tags = Vec::new();
    while p < s.len() {
        if s[p] != b',' {
            return None;
        }
        p += 1;
        let k = token(key, &mut p, in_key, escaped_in_key)?;
        if s.get(p) != Some(&b'=') {
            return None;
        }
        p += 1;
        let v = token(key, &mut p, in_tag_value, escaped_in_key)?;
        if tags.iter().any(|(seen, _): &(Cow<str>, Cow<str>)| *seen == k) {
            return None;
        }
        tags.push((k, v));
    }
    Some(ParsedSeries { measurement, tags })
}

/// The measurement of a string that may or may not be a series key: its text up to the first
/// unescaped `,`, with the measurement escapes (`\,` and `\ `) undone. Spaces are kept.
pub fn measurement_prefix(key: &str) -> Cow<'_, str> {
    let s = key.as_bytes();
    let mut i = 0;
    let mut escaped = false;
    while i < s.len() {
        match s[i] {
            b'\\' if i + 1 < s.len() && escaped_in_measurement(s[i + 1]) => {
                escaped = true;
                i += 2;
            }
            b',' => break,
            _ => i += 1,
        }
    }
    if escaped {
        // Unescaping removes only ASCII backslashes, so the result stays valid UTF-8.
        Cow::Owned(String::from_utf8(unescape(&s[..i], escaped_in_measurement)).unwrap_or_default())
    } else {
        Cow::Borrowed(&key[..i])
    }
}

/// The non-empty token at `*p` of bytes that are `allowed` or escaped, unescaped; `*p` moves
/// past it. A backslash before a byte it does not escape is an ordinary byte.
fn token<'a>(
    key: &'a str,
    p: &mut usize,
    allowed: impl Fn(u8) -> bool,
    escapes: impl Fn(u8) -> bool + Copy,
) -> Option<Cow<'a, str>> {
    let s = key.as_bytes();
    let start = *p;
    let mut i = start;
    let mut escaped = false;
    while i < s.len() {
        let b = s[i];
        if b == b'\\' {
            if i + 1 < s.len() && escapes(s[i + 1]) {
                escaped = true;
                i += 2;
            } else {
                i += 1;
            }
        } else if allowed(b) {
            i += 1;
        } else {
            break;
        }
    }
    *p = i;
    if i == start {
        return None;
    }
    if escaped {
        String::from_utf8(unescape(&s[start..i], escapes)).ok().map(Cow::Owned)
    } else {
        key.get(start..i).map(Cow::Borrowed)
    }
}

/// Removes the escaping backslashes from a token.
fn unescape(raw: &[u8], escapes: impl Fn(u8) -> bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'\\' && i + 1 < raw.len() && escapes(raw[i + 1]) {
            i += 1;
        }
        out.push(raw[i]);
        i += 1;
    }
    out
}

/// Bytes a backslash escapes in a measurement.
pub const fn escaped_in_measurement(b: u8) -> bool {
    b == b',' || b == b' '
}

/// Bytes a backslash escapes in tag keys, tag values (and field keys).
pub const fn escaped_in_key(b: u8) -> bool {
    b == b',' || b == b'=' || b == b' '
}

/// The series key of a measurement and its tags (sorted by key): the line-protocol text of
/// that part of a line, e.g. `env,sensor=s1,site=w3`. Escapes `,` and space in the measurement
/// and `,`, `=` and space in tag keys and values, so parsing the key gives the series back.
pub fn series_key<K: AsRef<str>, V: AsRef<str>>(
    measurement: &str,
    sorted_tags: &[(K, V)],
) -> String {
    series_key_of(measurement, sorted_tags.iter().map(|(k, v)| (k.as_ref(), v.as_ref())))
}

pub(super) fn series_key_of<'a>(
    measurement: &str,
    sorted_tags: impl Iterator<Item = (&'a str, &'a str)> + Clone,
) -> String {
    let len =
        measurement.len() + sorted_tags.clone().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>();
    let mut key = String::with_capacity(len);
    escape_into(&mut key, measurement, escaped_in_measurement);
    for (k, v) in sorted_tags {
        key.push(',');
        escape_into(&mut key, k, escaped_in_key);
        key.push('=');
        escape_into(&mut key, v, escaped_in_key);
    }
    key
}

fn escape_into(out: &mut String, text: &str, escaped: impl Fn(u8) -> bool) {
    for c in text.chars() {
        if c.is_ascii() && escaped(c as u8) {
            out.push('\\');
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn series_key_helpers() {
        assert_eq!(series_key::<&str, &str>("env", &[]), "env");
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
    fn sorted_tags_keep_the_order_given_among_equal_keys() {
        let mut tags = vec![("b", 1), ("a", 2), ("b", 0), ("c", 3)];
        sort_tags(&mut tags);
        assert_eq!(tags, [("a", 2), ("b", 1), ("b", 0), ("c", 3)]);
        assert_eq!(repeated_key(&tags), Some([&("b", 1), &("b", 0)]));
        assert_eq!(repeated_key(&tags[..2]), None);
    }
}
