//! JSON readings: one object, an array of them, or NDJSON (one object per line).
//!
//! ```json
//! {"sensor": "env,sensor=s1,site=w3", "ts": "2024-05-01T12:00:00Z", "fields": {"temp": 21.5, "ok": true}}
//! {"sensor": "boiler", "ts": 1714564800000, "value": 71.2, "tags": {"room": "cellar"}}
//! ```
//!
//! - `sensor` (required): the sensor key, kept as sent as [`SeriesMeta::key`].
//! - `ts`: an RFC 3339 string or integer epoch milliseconds; absent or `null` means the time of
//!   arrival. Sub-millisecond digits of a string are floored.
//! - exactly one of `value` (a number, stored as field `"value"`) or `fields` (an object of
//!   numbers, booleans and strings, kept in the order sent).
//! - `tags`: an object of strings.
//!
//! Every JSON number becomes [`FieldValue::Float`]: serializers do not keep an integer/float
//! distinction (`1.0` often goes out as `1`), so guessing one from the text would split a series
//! across types. Numbers are read from their text with Rust's correctly rounded parser, and one
//! that overflows a 64-bit float (`1e400`) is rejected, as are NaN and Infinity, which are not
//! JSON at all.
//!
//! Unknown keys are rejected rather than ignored, so a typo such as `"feilds"` cannot silently
//! drop data.
//!
//! # Series
//! The measurement is the sensor key's text before its first unescaped `,` (line-protocol
//! escapes `\,` and `\ ` undone), or the whole key when that is empty. When the whole key
//! parses as a line-protocol series key (`measurement,tag=value,...`), its tags are the
//! reading's tags too, so the reading lands in the same series, with the same tags, as a
//! line-protocol point with that key. Tags from the `tags` object are merged in; a tag that
//! the key and the object both give with different values is an error, because either choice
//! would silently contradict what the client sent.
//!
//! # Errors
//! Each reading yields its own result, so one bad reading never hides the good ones. A body
//! that is not JSON at all (or whose array is malformed) yields a single error with index 0 and
//! reason "syntax": there is no way to tell where its readings begin.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::validate::{self, InputLimits};
use crate::model::series_key::{self, ParsedSeries};
use crate::model::{FieldName, FieldValue, Fields, Item, Reading, Series, SeriesMeta, TimestampMs};

/// One rejected item: its 0-based index in the request (array position or NDJSON line), why,
/// and the metric reason label ("syntax" or an `InvalidReading::reason()`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("item {index}: {message}")]
pub struct ItemError {
    pub index: usize,
    pub message: String,
    pub reason: &'static str,
}

pub type Parsed = Vec<Result<Item, ItemError>>;

/// Parses a body that is one JSON reading or an array of them.
pub fn parse_document(body: &[u8], now_ms: TimestampMs, limits: &InputLimits) -> Parsed {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'[') => {}
        Some(b'{') => return vec![parse_item(body, 0, now_ms, limits, Positions::Keep)],
        _ => {
            return vec![Err(ItemError {
                index: 0,
                message: "expected a JSON object or an array of objects".to_owned(),
                reason: "syntax",
            })];
        }
    }
    // Splitting the array into raw items first checks only the JSON syntax, so a reading that
    // is valid JSON but a bad reading (say a number that overflows) fails alone.
    let items: Vec<&RawValue> = match serde_json::from_slice(body) {
        Ok(items) => items,
        Err(e) => {
            return vec![Err(ItemError {
                index: 0,
                message: describe_malformed(&e, body),
                reason: "syntax",
            })];
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, raw)| parse_item(raw.get().as_bytes(), i, now_ms, limits, Positions::Strip))
        .collect()
}

/// Incremental NDJSON: feed chunks as they arrive; complete lines are parsed at once, so a
/// large body is never held whole. Item indexes are 0-based line numbers (blank lines count).
///
/// Memory is bounded by `max_line_bytes` (a line's bytes before its `\n`, a `\r` included): a
/// longer line is rejected with an error as soon as it passes the limit, and its remaining
/// bytes are dropped unread up to the next newline.
pub struct NdjsonDecoder {
    max_line_bytes: usize,
    /// The start of the current line, carried between chunks; never longer than the limit.
    partial: Vec<u8>,
    /// Index of the current line.
    index: usize,
    /// The current line passed the limit: its error is out, drop bytes up to the next `\n`.
    discarding: bool,
}

impl NdjsonDecoder {
    pub fn new(max_line_bytes: usize) -> Self {
        NdjsonDecoder { max_line_bytes, partial: Vec::new(), index: 0, discarding: false }
    }

    /// Bytes of the current line carried to the next chunk.
    pub fn partial_len(&self) -> usize {
        self.partial.len()
    }

    pub fn feed(&mut self, chunk: &[u8], now_ms: TimestampMs, limits: &InputLimits) -> Parsed {
        let mut out = Vec::new();
        let mut rest = chunk;
        while let Some(nl) = memchr::memchr(b'\n', rest) {
            let piece = &rest[..nl];
            rest = &rest[nl + 1..];
            if self.discarding {
                self.discarding = false;
            } else if self.partial.len() + piece.len() > self.max_line_bytes {
                out.push(Err(self.too_long()));
                self.partial.clear();
            } else if self.partial.is_empty() {
                self.parse_line(piece, now_ms, limits, &mut out);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(piece);
                self.parse_line(&line, now_ms, limits, &mut out);
                line.clear();
                self.partial = line;
            }
            self.index += 1;
        }
        if !self.discarding && !rest.is_empty() {
            if self.partial.len() + rest.len() > self.max_line_bytes {
                out.push(Err(self.too_long()));
                self.partial.clear();
                self.discarding = true;
            } else {
                self.partial.extend_from_slice(rest);
            }
        }
        out
    }

    /// Parses a last line that had no trailing newline.
    pub fn finish(self, now_ms: TimestampMs, limits: &InputLimits) -> Parsed {
        let mut out = Vec::new();
        if !self.discarding {
            self.parse_line(&self.partial, now_ms, limits, &mut out);
        }
        out
    }

    fn parse_line(&self, line: &[u8], now_ms: TimestampMs, limits: &InputLimits, out: &mut Parsed) {
        // A `\r` of a `\r\n` is JSON whitespace, so it needs no handling of its own.
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        out.push(parse_item(line, self.index, now_ms, limits, Positions::Keep));
    }

    fn too_long(&self) -> ItemError {
        ItemError {
            index: self.index,
            message: format!("line is longer than the limit of {} bytes", self.max_line_bytes),
            reason: "syntax",
        }
    }
}

// ---- one reading ------------------------------------------------------------------------------

/// A reading as sent. Values are kept as raw JSON text so that every check happens here, with a
/// precise message and reason, instead of failing inside serde.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireReading<'a> {
    #[serde(borrow)]
    sensor: Text<'a>,
    #[serde(default, borrow)]
    ts: Option<&'a RawValue>,
    #[serde(default, borrow)]
    value: Option<&'a RawValue>,
    #[serde(default, borrow)]
    fields: Option<Entries<'a, &'a RawValue>>,
    #[serde(default, borrow)]
    tags: Option<Entries<'a, Text<'a>>>,
}

/// A JSON string, borrowed from the input unless it holds escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

/// A JSON object's entries in the order sent; repeated keys are kept for the checks to see.
struct Entries<'a, V>(Vec<(Cow<'a, str>, V)>);

impl<'de: 'a, 'a, V: Deserialize<'de>> Deserialize<'de> for Entries<'a, V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Vis<'a, V>(PhantomData<(&'a (), V)>);
        impl<'de: 'a, 'a, V: Deserialize<'de>> Visitor<'de> for Vis<'a, V> {
            type Value = Entries<'a, V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(4));
                while let Some(Text(key)) = map.next_key::<Text<'a>>()? {
                    entries.push((key, map.next_value::<V>()?));
                }
                Ok(Entries(entries))
            }
        }
        d.deserialize_map(Vis(PhantomData))
    }
}

/// Whether serde's "at line L column C" suffix means anything to the client: not for an item
/// cut out of an array, where it counts from the item's start.
#[derive(Clone, Copy, PartialEq)]
enum Positions {
    Keep,
    Strip,
}

fn bad(index: usize, message: impl Into<String>, reason: &'static str) -> ItemError {
    ItemError { index, message: message.into(), reason }
}

fn parse_item(
    text: &[u8],
    index: usize,
    now_ms: TimestampMs,
    limits: &InputLimits,
    positions: Positions,
) -> Result<Item, ItemError> {
    // serde would also read a struct from an array, positionally; a reading is an object.
    if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(bad(index, "expected a JSON object (a reading)", "syntax"));
    }
    let wire: WireReading = serde_json::from_slice(text).map_err(|e| {
        let message = match positions {
            Positions::Keep => describe_malformed(&e, text),
            Positions::Strip => strip_position(&e),
        };
        bad(index, message, "syntax")
    })?;

    let ts = match wire.ts {
        None => now_ms,
        Some(raw) => timestamp(raw).map_err(|m| bad(index, m, "timestamp"))?,
    };

    let fields = match (wire.value, wire.fields) {
        (Some(raw), None) => smallvec::smallvec![("value".into(), number("value", raw, index)?)],
        (None, Some(Entries(entries))) => entries
            .into_iter()
            .map(|(name, raw)| {
                let value = field_value(&name, raw, index)?;
                Ok((FieldName::from(&*name), value))
            })
            .collect::<Result<Fields, ItemError>>()?,
        (Some(_), Some(_)) => {
            return Err(bad(
                index,
                "a reading has either \"value\" or \"fields\", not both",
                "fields",
            ));
        }
        (None, None) => {
            return Err(bad(index, "a reading needs \"value\" or \"fields\"", "fields"));
        }
    };

    let sensor = wire.sensor.0;
    if crate::databases::is_qualified(&sensor) {
        let invalid = validate::InvalidReading::ReservedSensor;
        return Err(bad(index, invalid.to_string(), invalid.reason()));
    }
    let (measurement, mut tags) = match series_key::parse_series_key(&sensor) {
        Some(ParsedSeries { measurement, tags }) => (measurement, tags),
        None => match series_key::measurement_prefix(&sensor) {
            // A key that starts with a comma has no measurement part: use the whole key.
            prefix if prefix.is_empty() => (sensor.clone(), Vec::new()),
            prefix => (prefix, Vec::new()),
        },
    };
    if let Some(Entries(extra)) = wire.tags {
        tags.extend(extra.into_iter().map(|(k, Text(v))| (k, v)));
    }
    // The sensor key's tag comes first among equal keys, for the message below.
    series_key::sort_tags(&mut tags);
    tags.dedup_by(|later, earlier| later == earlier);
    if let Some([first, second]) = series_key::repeated_key(&tags) {
        return Err(bad(
            index,
            format!("tag {:?} is given twice, as {:?} and as {:?}", first.0, first.1, second.1),
            "syntax",
        ));
    }
    let series = SeriesMeta::new(&limits.database.qualified(&sensor), &measurement, &tags);
    let reading = Reading { ts, fields };
    validate::validate(&series, &reading, limits)
        .and_then(|()| validate::admit_series(&series, limits))
        .map_err(|invalid| bad(index, invalid.to_string(), invalid.reason()))?;
    Ok((Series::shared(series), reading))
}

/// `ts`: an RFC 3339 string or integer epoch milliseconds.
fn timestamp(raw: &RawValue) -> Result<TimestampMs, String> {
    let text = raw.get();
    const WHAT: &str = "\"ts\" must be an RFC 3339 string or integer epoch milliseconds";
    match text.as_bytes().first() {
        Some(b'"') => {
            let Text(s) = serde_json::from_str(text).map_err(|e| e.to_string())?;
            chrono::DateTime::parse_from_rfc3339(&s)
                .map(|t| t.timestamp_millis())
                .map_err(|e| format!("\"ts\" {s:?} is not an RFC 3339 timestamp: {e}"))
        }
        Some(b'-' | b'0'..=b'9') => {
            if text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
                return Err(format!("{WHAT}, not {text}"));
            }
            text.parse::<i64>().map_err(|_| format!("\"ts\" {text} is out of range"))
        }
        _ => Err(format!("{WHAT}, not {text}")),
    }
}

/// A JSON number as a finite f64.
fn number(name: &str, raw: &RawValue, index: usize) -> Result<FieldValue, ItemError> {
    let text = raw.get();
    if !matches!(text.as_bytes().first(), Some(b'-' | b'0'..=b'9')) {
        return Err(bad(
            index,
            format!("{name:?} must be a number, not {}", shorten(text)),
            "syntax",
        ));
    }
    // JSON's number grammar is a subset of Rust's float syntax; overflow comes back infinite.
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(FieldValue::Float(v)),
        _ => {
            Err(bad(index, format!("{name:?} is out of range for a 64-bit float: {text}"), "value"))
        }
    }
}

/// A field of the `fields` object: a number, a boolean or a string.
fn field_value(name: &str, raw: &RawValue, index: usize) -> Result<FieldValue, ItemError> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<Text>(text)
            .map(|Text(s)| FieldValue::Str(s.into_owned()))
            .map_err(|e| bad(index, strip_position(&e), "syntax")),
        Some(b't') if text == "true" => Ok(FieldValue::Bool(true)),
        Some(b'f') if text == "false" => Ok(FieldValue::Bool(false)),
        Some(b'-' | b'0'..=b'9') => number(name, raw, index),
        _ => Err(bad(
            index,
            format!("field {name:?} must be a number, boolean or string, not {}", shorten(text)),
            "syntax",
        )),
    }
}

fn shorten(text: &str) -> &str {
    validate::truncate_for_echo(text, 40)
}

/// serde_json's message without its position.
fn strip_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    message.strip_suffix(&suffix).map(str::to_owned).unwrap_or(message)
}

/// serde_json's message, plus a hint when the culprit is a NaN or an infinity, which
/// JavaScript's `JSON.stringify` and Python's `json.dumps` let through and JSON does not allow.
fn describe_malformed(e: &serde_json::Error, body: &[u8]) -> String {
    let message = e.to_string();
    if !e.is_syntax() || e.line() == 0 {
        return message;
    }
    let line_start =
        body.split(|&b| b == b'\n').take(e.line() - 1).map(|l| l.len() + 1).sum::<usize>();
    // The column points at or just after the offending byte.
    let at = (line_start + e.column()).saturating_sub(2).min(body.len());
    let near = &body[at..body.len().min(at + 12)];
    let non_finite = [&b"NaN"[..], b"Infinity", b"-Infinity", b"-NaN"]
        .iter()
        .any(|word| near.windows(word.len()).any(|w| w == *word));
    if non_finite {
        format!("{message} (NaN and Infinity are not valid JSON numbers)")
    } else {
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::line_protocol::{Precision, parse_body};
    use proptest::prelude::*;

    const NOW: i64 = 1_700_000_000_000;

    fn doc(body: &str) -> Parsed {
        parse_document(body.as_bytes(), NOW, &InputLimits::default())
    }

    fn one(body: &str) -> Item {
        let mut r = doc(body);
        assert_eq!(r.len(), 1, "{r:?}");
        r.remove(0).unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    fn err(body: &str) -> ItemError {
        let mut r = doc(body);
        assert_eq!(r.len(), 1, "{r:?}");
        r.remove(0).expect_err(body)
    }

    #[test]
    fn value_and_fields() {
        let (s, r) = one(r#"{"sensor": "boiler", "value": 71}"#);
        assert_eq!(*s, SeriesMeta::untagged("boiler", "boiler"));
        assert_eq!(
            r,
            Reading {
                ts: NOW,
                fields: smallvec::smallvec![("value".into(), FieldValue::Float(71.0))]
            }
        );

        let (_, r) = one(
            r#"{"fields": {"t": -1.5e2, "ok": false, "msg": "a\"b", "n": 3}, "sensor": "s", "ts": 5}"#,
        );
        assert_eq!(r.ts, 5);
        assert_eq!(
            r.fields.to_vec(),
            vec![
                ("t".into(), FieldValue::Float(-150.0)),
                ("ok".into(), FieldValue::Bool(false)),
                ("msg".into(), FieldValue::Str("a\"b".into())),
                ("n".into(), FieldValue::Float(3.0)),
            ]
        );
    }

    #[test]
    fn arrays_give_one_result_per_item() {
        assert!(doc("[]").is_empty());
        assert!(doc(" [ ] ").is_empty());
        let r = doc(
            r#"[{"sensor":"a","value":1}, {"sensor":"b","value":1e400}, 7, {"sensor":"c","feilds":{}}, {"sensor":"d","value":2}]"#,
        );
        assert_eq!(r.len(), 5);
        assert!(r[0].is_ok() && r[4].is_ok());
        let e = r[1].as_ref().unwrap_err();
        assert_eq!((e.index, e.reason), (1, "value"));
        assert_eq!(r[2].as_ref().unwrap_err().index, 2);
        let e = r[3].as_ref().unwrap_err();
        assert_eq!((e.index, e.reason), (3, "syntax"));
        assert!(e.message.contains("unknown field `feilds`"), "{}", e.message);
        assert!(!e.message.contains("column"), "positions inside an item mislead: {}", e.message);
    }

    #[test]
    fn malformed_json_is_one_syntax_error() {
        for body in
            ["", "   ", "{", "[{\"sensor\":\"a\",\"value\":1},", "[1,]", "\"str\"", "3", "{} x"]
        {
            let r = doc(body);
            assert_eq!(r.len(), 1, "{body:?}");
            let e = r[0].as_ref().unwrap_err();
            assert_eq!((e.index, e.reason), (0, "syntax"), "{body:?}");
        }
        let e = err("[{\"sensor\": \"a\", \"value\": 1}] trailing");
        assert!(e.message.contains("trailing"), "{}", e.message);
    }

    #[test]
    fn nan_and_infinity_get_a_clear_message() {
        for body in [
            r#"{"sensor":"a","value":NaN}"#,
            r#"[{"sensor":"a","value":Infinity}]"#,
            "[\n{\"sensor\":\"a\",\n\"value\": -Infinity}]",
        ] {
            let e = err(body);
            assert_eq!(e.reason, "syntax");
            assert!(e.message.contains("NaN and Infinity are not valid JSON"), "{}", e.message);
        }
        assert!(!err("{\"sensor\":\"a\",\"value\":x}").message.contains("NaN"));
        let e = err(r#"{"sensor":"a","fields":{"x":-1e309}}"#);
        assert_eq!(e.reason, "value");
        assert!(e.message.contains("out of range"), "{}", e.message);
    }

    #[test]
    fn value_or_fields_exactly_once() {
        assert_eq!(err(r#"{"sensor":"a"}"#).reason, "fields");
        assert_eq!(err(r#"{"sensor":"a","value":null}"#).reason, "fields");
        assert_eq!(err(r#"{"sensor":"a","value":1,"fields":{"b":2}}"#).reason, "fields");
        assert_eq!(err(r#"{"sensor":"a","fields":{}}"#).reason, "fields");
        assert_eq!(err(r#"{"sensor":"a","value":"1"}"#).reason, "syntax");
        assert_eq!(err(r#"{"sensor":"a","value":true}"#).reason, "syntax");
        assert_eq!(err(r#"{"sensor":"a","fields":{"b":null}}"#).reason, "syntax");
        assert_eq!(err(r#"{"sensor":"a","fields":{"b":[1]}}"#).reason, "syntax");
        assert_eq!(err(r#"{"sensor":"a","fields":{"b":1,"b":2}}"#).reason, "fields");
        assert_eq!(err(r#"{"value":1}"#).reason, "syntax");
        assert_eq!(err(r#"{"sensor":5,"value":1}"#).reason, "syntax");
        assert_eq!(err(r#"{"sensor":"","value":1}"#).reason, "sensor");
        assert_eq!(err(r#"{"sensor":"a","sensor":"b","value":1}"#).reason, "syntax");
    }

    #[test]
    fn timestamps() {
        let ts = |t: &str| doc(&format!(r#"{{"sensor":"a","value":1,"ts":{t}}}"#)).remove(0);
        assert_eq!(ts("null").unwrap().1.ts, NOW);
        assert_eq!(ts("-5").unwrap().1.ts, -5);
        assert_eq!(ts(r#""1970-01-01T00:00:01.5Z""#).unwrap().1.ts, 1_500);
        assert_eq!(ts(r#""1970-01-01T01:00:00+01:00""#).unwrap().1.ts, 0);
        assert_eq!(ts(r#""1969-12-31T23:59:59.9999Z""#).unwrap().1.ts, -1, "floored");
        for bad in [
            "9223372036854775808",
            "100000000000000000000",
            "1.5",
            "1e3",
            r#""yesterday""#,
            "true",
            "253402300800000",
            r#""0000-01-01T00:00:00+01:00""#,
        ] {
            let e = ts(bad).unwrap_err();
            assert_eq!(e.reason, "timestamp", "{bad}: {}", e.message);
        }
    }

    #[test]
    fn a_series_key_sensor_lands_in_the_line_protocol_series() {
        let (from_json, _) = one(r#"{"sensor":"env,sensor=s1,site=w3","value":1}"#);
        let lp = parse_body(
            b"env,site=w3,sensor=s1 value=1",
            Precision::Nanoseconds,
            NOW,
            &InputLimits::default(),
        );
        let (from_lp, _) = lp[0].as_ref().unwrap();
        assert_eq!(&from_json, from_lp);

        let (s, _) =
            one(r#"{"sensor":"c\\,pu\\ x,host=a","value":1,"tags":{"zone":"z","host":"a"}}"#);
        assert_eq!(s.key(), "c\\,pu\\ x,host=a");
        assert_eq!(s.measurement(), "c,pu x");
        assert_eq!(s.tag_vec(), vec![("host".into(), "a".into()), ("zone".into(), "z".into())]);

        let e = err(r#"{"sensor":"env,site=w3","value":1,"tags":{"site":"w4"}}"#);
        assert!(e.message.contains("w3") && e.message.contains("w4"), "{}", e.message);

        // Not a series key: the measurement is the text before the first comma.
        let (s, _) = one(r#"{"sensor":"living room,2nd floor","value":1,"tags":{"b":"x"}}"#);
        assert_eq!(s.measurement(), "living room");
        assert_eq!(s.tag_vec(), vec![("b".into(), "x".into())]);
        assert_eq!(err(r#"{"sensor":"a","value":1,"tags":{"b":1}}"#).reason, "syntax");
        assert_eq!(one(r#"{"sensor":",x","value":1}"#).0.measurement(), ",x");
    }

    #[test]
    fn validation_applies() {
        let limits = InputLimits { max_sensor_key_bytes: 4, ..InputLimits::default() };
        let r = parse_document(br#"{"sensor":"toolong","value":1}"#, NOW, &limits);
        assert_eq!(r[0].as_ref().unwrap_err().reason, "sensor");
    }

    #[test]
    fn ndjson_lines() {
        let limits = InputLimits::default();
        let mut d = NdjsonDecoder::new(64);
        let mut out =
            d.feed(b"{\"sensor\":\"a\",\"value\":1}\r\n\n  \r\n{\"sensor\":\"b\",", NOW, &limits);
        assert_eq!(out.len(), 1);
        out.extend(d.feed(b"\"value\":2}\n[1]\n{\"sensor\":\"", NOW, &limits));
        out.extend(d.feed(&[b'x'; 100], NOW, &limits));
        out.extend(d.feed(b"\"}\n{\"sensor\":\"c\",\"value\":3}", NOW, &limits));
        out.extend(d.finish(NOW, &limits));
        let idx: Vec<_> = out
            .iter()
            .map(|r| match r {
                Ok((s, _)) => (s.key().to_owned(), usize::MAX),
                Err(e) => (e.message.clone(), e.index),
            })
            .collect();
        assert_eq!(idx[0].0, "a");
        assert_eq!(idx[1].0, "b");
        assert_eq!(idx[2].1, 4, "blank lines count: {idx:?}");
        assert_eq!(idx[3], ("line is longer than the limit of 64 bytes".to_owned(), 5));
        assert_eq!(idx[4].0, "c");
        assert_eq!(out.len(), 5);
    }

    #[test]
    fn ndjson_does_not_buffer_a_monster_line() {
        let limits = InputLimits::default();
        let mut d = NdjsonDecoder::new(16);
        let out = d.feed(b"{\"sensor\":", NOW, &limits);
        assert!(out.is_empty());
        let out = d.feed(b"\"aaaaaaaa\"", NOW, &limits);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].as_ref().unwrap_err().index, 0);
        for _ in 0..100 {
            assert!(d.feed(&[b' '; 1000], NOW, &limits).is_empty());
            assert!(d.partial.capacity() <= 1000, "kept {} bytes", d.partial.capacity());
        }
        let out = d.feed(b"}\n{\"sensor\":\"b\"", NOW, &limits);
        assert!(out.is_empty());
        assert_eq!(d.partial, b"{\"sensor\":\"b\"");
        assert!(d.finish(NOW, &limits)[0].as_ref().unwrap_err().index == 1);
    }

    fn ndjson_line() -> impl Strategy<Value = String> {
        prop_oneof![
            (0i64..10, -1e6f64..1e6)
                .prop_map(|(s, v)| format!(r#"{{"sensor":"s{s}","value":{v}}}"#)),
            Just(String::new()),
            Just("  \r".to_owned()),
            Just(r#"{"sensor":"a","fields":{"x":"a long string value here"}}"#.to_owned()),
            Just("{not json".to_owned()),
            Just(r#"{"sensor":"a","value":1e999}"#.to_owned()),
        ]
    }

    proptest! {
        #[test]
        fn ndjson_chunking_does_not_matter(
            lines in proptest::collection::vec(ndjson_line(), 0..12),
            crlf in any::<bool>(),
            trailing_newline in any::<bool>(),
            cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..8),
        ) {
            let limits = InputLimits::default();
            let mut body = lines.join(if crlf { "\r\n" } else { "\n" }).into_bytes();
            if trailing_newline {
                body.push(b'\n');
            }
            let max = 48;
            let run = |chunks: &[&[u8]]| {
                let mut d = NdjsonDecoder::new(max);
                let mut out = Vec::new();
                for c in chunks {
                    out.extend(d.feed(c, NOW, &limits));
                }
                out.extend(d.finish(NOW, &limits));
                out
            };
            let whole = run(&[&body]);
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            prop_assert_eq!(&run(&bytes), &whole);
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(body.len() + 1)).collect();
            points.sort();
            let mut chunks = Vec::new();
            let mut last = 0;
            for p in points {
                chunks.push(&body[last..p]);
                last = p;
            }
            chunks.push(&body[last..]);
            prop_assert_eq!(&run(&chunks), &whole);
            // Each non-blank line gives one result, in order.
            let expected = lines.iter().filter(|l| !l.trim().is_empty()).count();
            prop_assert_eq!(whole.len(), expected);
        }

        #[test]
        fn documents_never_panic(body in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = parse_document(&body, NOW, &InputLimits::default());
        }
    }
}
