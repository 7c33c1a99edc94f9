//! The bucket document: its key names, how user-chosen names become BSON keys, and how
//! readings are encoded, sized and decoded.
//!
//! One document per sensor per hour (more when a bucket spills):
//!
//! ```text
//! { _id: ObjectId, s: <sensor key>, v: <bucket version, int32>, start: Date, end: Date,
//!   m: <measurement>, tags: [{k, v}, ...],
//!   db: <database>,    (absent for the default database; `s` starts with `\x1f<db>\x1f`)
//!   n: <readings, int>, bytes: <approximate BSON bytes of r, int>,
//!   first: Date, last: Date,
//!   stats: { <field>: {min: double, max: double, sum: double, n: int,
//!                      first: {t: Date, v: double}, last: {t: Date, v: double}} },
//!                      (first/last: schema 3 on; `$min`/`$max` of `{t, v}` documents order
//!                      them by time, then value)
//!   ms: { <field>: { <minute of the hour, "00".."59">: {min, max, sum, n, first, last} } },
//!                      (`v` 5 and 6 on: the statistics of each minute, as `stats` has them)
//!   w: { <writer id, 16 hex digits>: <highest write sequence number of its readings that
//!        this writer wrote, int64>, ... },        (schema 1: one int64 for every writer)
//!   r: [ {t: Date, f: { <field>: value }}, ... ] }
//! ```
//!
//! `v` names what a bucket holds: 1 to 3 are the schemas of `store::SCHEMA_VERSION`; 4 is
//! schema 3 with its statistics also in the hour statistics collection; 5 adds `ms`; 6 is both
//! (see the `*_BUCKET_VERSION` constants of the store).
//!
//! Field names come from users and appear as keys under `stats`, `ms` and `r.f`, so they go through
//! [`encode_name`]. Tag keys and values, the sensor key and the measurement are stored as
//! values and need no mapping.

use std::borrow::Cow;

use bson::{Bson, DateTime, Document, RawDocumentBuf};

use crate::model::{FieldName, FieldValue, Fields, Reading, Seq, TimestampMs, WriterId};
use crate::store::{FieldStats, StoreError};

pub const ID: &str = "_id";
pub const SENSOR: &str = "s";
pub const VERSION: &str = "v";
pub const START: &str = "start";
pub const END: &str = "end";
pub const MEASUREMENT: &str = "m";
pub const DATABASE: &str = "db";
pub const TAGS: &str = "tags";
pub const TAG_KEY: &str = "k";
pub const TAG_VALUE: &str = "v";
pub const COUNT: &str = "n";
pub const BYTES: &str = "bytes";
pub const FIRST: &str = "first";
pub const LAST: &str = "last";
pub const STATS: &str = "stats";
/// Per field, per minute of the hour, the statistics of that minute's readings (`v` 5 on).
pub const MINUTE_STATS: &str = "ms";
pub const READINGS: &str = "r";
/// Per writer, the highest write sequence number among the bucket's readings
/// (`Store::high_water`). Schema 1 kept one number here for every writer.
pub const HIGH_WATER: &str = "w";

/// The update path of `writer`'s mark: a writer id is 16 hex digits, a safe key.
pub fn writer_mark(writer: WriterId) -> String {
    format!("{HIGH_WATER}.{writer}")
}
pub const TIME: &str = "t";
pub const FIELDS: &str = "f";
pub const STAT_MIN: &str = "min";
pub const STAT_MAX: &str = "max";
pub const STAT_SUM: &str = "sum";
pub const STAT_COUNT: &str = "n";
/// `{t, v}`: the value with the earliest time (ties: the smallest value). Schema 3 on.
pub const STAT_FIRST: &str = "first";
/// `{t, v}`: the value with the latest time (ties: the largest value). Schema 3 on.
pub const STAT_LAST: &str = "last";
/// The time of a `first`/`last` point: a Date as stored, a number of milliseconds as the
/// readings rollup groups it.
pub const POINT_TIME: &str = "t";
pub const POINT_VALUE: &str = "v";

/// `{t: Date, v: double}`, the shape of `stats.<field>.first/last`. The key order matters:
/// MongoDB compares documents field by field, so `$min`/`$max` order these by time first.
pub fn point((ts, v): (TimestampMs, f64)) -> RawDocumentBuf {
    let mut doc = RawDocumentBuf::new();
    doc.append(POINT_TIME, date(ts));
    doc.append(POINT_VALUE, v);
    doc
}

/// The key of a minute of the hour under `ms.<field>`: two digits, so that a path never reads
/// as an array index and the keys sort in time order.
pub fn minute_key(minute: i64) -> &'static str {
    const KEYS: [&str; 60] = [
        "00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14",
        "15", "16", "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29",
        "30", "31", "32", "33", "34", "35", "36", "37", "38", "39", "40", "41", "42", "43", "44",
        "45", "46", "47", "48", "49", "50", "51", "52", "53", "54", "55", "56", "57", "58", "59",
    ];
    debug_assert!((0..60).contains(&minute), "minute {minute} of an hour");
    KEYS[minute.clamp(0, 59) as usize]
}

/// What one element of the `r` array adds to a bucket besides the reading document itself:
/// the element type byte and its key, the array index as a decimal C string. Seven digits
/// cover any bucket the caps allow, so the estimate never undercounts.
pub const ARRAY_ELEMENT_OVERHEAD: u64 = 1 + 7 + 1;

/// Maps a field name to a BSON key that cannot change the meaning of an update path: `%`
/// becomes `%25`, every `.` becomes `%2E` (a dot would address a sub-document, so `a.sum`
/// could land inside the statistics of a field `a`), and every `$` becomes `%24` (update
/// operators and aggregation treat `$`-prefixed keys as operators, and `$` path segments as
/// positional operators; escaping all of them keeps the rule simple). Reversed by
/// [`decode_name`].
pub fn encode_name(name: &str) -> Cow<'_, str> {
    if !name.contains(['%', '.', '$']) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '.' => out.push_str("%2E"),
            '$' => out.push_str("%24"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Reverses [`encode_name`]. A key that `encode_name` cannot have produced is corrupt data.
pub fn decode_name(key: &str) -> Result<Cow<'_, str>, StoreError> {
    if !key.contains('%') {
        return Ok(Cow::Borrowed(key));
    }
    let mut out = String::with_capacity(key.len());
    let mut rest = key;
    while let Some(pos) = rest.find('%') {
        out.push_str(&rest[..pos]);
        let escape = rest.get(pos..pos + 3).unwrap_or("");
        out.push(match escape {
            "%25" => '%',
            "%2E" => '.',
            "%24" => '$',
            _ => return Err(StoreError::Corrupt(format!("bad escape in field key {key:?}"))),
        });
        rest = &rest[pos + 3..];
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

pub fn date(ts: TimestampMs) -> DateTime {
    DateTime::from_millis(ts)
}

/// The value as stored. BSON has no unsigned 64-bit integer: a `UInt` that fits an int64 is
/// stored as one (and reads back as `Int`), a larger one as a double (and reads back as
/// `Float`, rounded to 53 bits of precision).
pub fn encode_value(value: &FieldValue) -> bson::RawBson {
    match value {
        FieldValue::Float(v) => (*v).into(),
        FieldValue::Int(v) => (*v).into(),
        FieldValue::UInt(v) => match i64::try_from(*v) {
            Ok(v) => v.into(),
            Err(_) => (*v as f64).into(),
        },
        FieldValue::Bool(v) => (*v).into(),
        FieldValue::Str(v) => v.as_str().into(),
    }
}

pub fn decode_value(value: &Bson) -> Option<FieldValue> {
    Some(match value {
        Bson::Double(v) => FieldValue::Float(*v),
        Bson::Int32(v) => FieldValue::Int(i64::from(*v)),
        Bson::Int64(v) => FieldValue::Int(*v),
        Bson::Boolean(v) => FieldValue::Bool(*v),
        Bson::String(v) => FieldValue::Str(v.clone()),
        _ => return None,
    })
}

/// A reading as the element of `r` it becomes, with the bytes it adds to the bucket.
pub struct EncodedReading {
    pub doc: RawDocumentBuf,
    pub size: u64,
}

pub fn encode_reading(reading: &Reading) -> EncodedReading {
    let mut fields = RawDocumentBuf::new();
    for (name, value) in &reading.fields {
        fields.append(encode_name(name), encode_value(value));
    }
    let mut doc = RawDocumentBuf::new();
    doc.append(TIME, date(reading.ts));
    doc.append(FIELDS, fields);
    let size = doc.as_bytes().len() as u64 + ARRAY_ELEMENT_OVERHEAD;
    EncodedReading { doc, size }
}

/// Decodes `{t, f}`, the shape of an element of `r` and of a row of the readings query.
pub fn decode_reading(doc: &Document) -> Result<Reading, StoreError> {
    let ts = doc
        .get_datetime(TIME)
        .map_err(|e| StoreError::Corrupt(format!("reading without a date `t`: {e}")))?
        .timestamp_millis();
    let fields_doc = doc
        .get_document(FIELDS)
        .map_err(|e| StoreError::Corrupt(format!("reading without fields `f`: {e}")))?;
    let mut fields = Fields::with_capacity(fields_doc.len());
    for (key, value) in fields_doc {
        let value = decode_value(value).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "field {key:?} has unsupported type {:?}",
                value.element_type()
            ))
        })?;
        fields.push((FieldName::from(&*decode_name(key)?), value));
    }
    Ok(Reading { ts, fields })
}

/// A writer's mark (a sequence number) as stored: an integer read exactly, since sequence
/// numbers pass 2^53, where [`number`] would hand back another one. `None`: not an integer, or
/// negative.
pub fn seq(value: &Bson) -> Option<Seq> {
    match value {
        Bson::Int64(v) => Seq::try_from(*v).ok(),
        Bson::Int32(v) => Seq::try_from(*v).ok(),
        _ => None,
    }
}

/// Any BSON number as f64: the server may hand back int32, int64 or double for the same
/// statistic depending on how it was accumulated.
pub fn number(value: &Bson) -> Option<f64> {
    match value {
        Bson::Double(v) => Some(*v),
        Bson::Int32(v) => Some(f64::from(*v)),
        Bson::Int64(v) => Some(*v as f64),
        _ => None,
    }
}

/// Decodes `{min, max, sum, n, first, last}` as stored under `stats.<field>` (or as produced by
/// the rollup aggregation). `first`/`last` are missing from buckets before schema 3: `None`.
pub fn decode_stats(doc: &Document) -> Result<FieldStats, StoreError> {
    let get = |key: &str| {
        doc.get(key).and_then(number).ok_or_else(|| {
            StoreError::Corrupt(format!("statistic `{key}` missing or not a number"))
        })
    };
    Ok(FieldStats {
        count: get(STAT_COUNT)? as u64,
        min: get(STAT_MIN)?,
        max: get(STAT_MAX)?,
        sum: get(STAT_SUM)?,
        first: decode_point(doc, STAT_FIRST)?,
        last: decode_point(doc, STAT_LAST)?,
    })
}

fn decode_point(doc: &Document, key: &str) -> Result<Option<(TimestampMs, f64)>, StoreError> {
    let point = match doc.get(key) {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Document(point)) => point,
        Some(other) => {
            return Err(StoreError::Corrupt(format!(
                "statistic `{key}` is a {:?}, not a document",
                other.element_type()
            )));
        }
    };
    let ts = match point.get(POINT_TIME) {
        Some(Bson::DateTime(t)) => Some(t.timestamp_millis()),
        Some(Bson::Int64(t)) => Some(*t),
        Some(Bson::Int32(t)) => Some(i64::from(*t)),
        Some(Bson::Double(t)) if t.fract() == 0.0 => Some(*t as i64),
        _ => None,
    };
    match (ts, point.get(POINT_VALUE).and_then(number)) {
        (Some(ts), Some(v)) => Ok(Some((ts, v))),
        _ => Err(StoreError::Corrupt(format!("statistic `{key}` is not a {{t, v}} point"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_past_2_pow_53_are_read_exactly() {
        let mark: Seq = 1_796_144_786_877_426_668;
        assert_eq!(seq(&Bson::Int64(mark as i64)), Some(mark));
        assert_eq!(seq(&Bson::Int32(7)), Some(7));
        assert_eq!(seq(&Bson::Int64(-1)), None);
        assert_eq!(seq(&Bson::Double(7.0)), None);
    }

    #[test]
    fn names_that_would_break_update_paths_are_mapped() {
        assert_eq!(encode_name("temp"), "temp");
        assert_eq!(encode_name("a.b"), "a%2Eb");
        assert_eq!(encode_name("a.sum"), "a%2Esum");
        assert_eq!(encode_name("$inc"), "%24inc");
        assert_eq!(encode_name("a$b"), "a%24b");
        assert_eq!(encode_name("100%"), "100%25");
        assert_eq!(encode_name("%2E"), "%252E");
        assert_eq!(encode_name("$.%"), "%24%2E%25");
    }

    #[test]
    fn mapping_round_trips() {
        for name in
            ["temp", "a.b", "$x", "$$", "a$b", "%", "%2E", "%24x", "..", "é.ü", "$.%.$", "t", "f"]
        {
            let key = encode_name(name);
            assert!(!key.contains(['.', '$']), "{name} -> {key}");
            assert_eq!(decode_name(&key).unwrap(), name);
        }
    }

    #[test]
    fn keys_no_encoder_produces_are_corrupt() {
        assert!(decode_name("a%2").is_err());
        assert!(decode_name("a%41").is_err());
        assert!(decode_name("%").is_err());
    }

    #[test]
    fn reading_round_trips_and_its_size_is_its_encoding() {
        let reading = Reading {
            ts: -1_500,
            fields: smallvec::smallvec![
                ("a.b".into(), FieldValue::Float(1.5)),
                ("$n".into(), FieldValue::Int(-3)),
                ("big".into(), FieldValue::UInt(u64::MAX)),
                ("small".into(), FieldValue::UInt(7)),
                ("ok".into(), FieldValue::Bool(true)),
                ("msg".into(), FieldValue::Str("hello".into())),
            ],
        };
        let encoded = encode_reading(&reading);
        assert_eq!(encoded.size, encoded.doc.as_bytes().len() as u64 + ARRAY_ELEMENT_OVERHEAD);
        let decoded = decode_reading(&encoded.doc.to_document().unwrap()).unwrap();
        assert_eq!(decoded.ts, reading.ts);
        assert_eq!(
            decoded.fields.to_vec(),
            vec![
                ("a.b".into(), FieldValue::Float(1.5)),
                ("$n".into(), FieldValue::Int(-3)),
                ("big".into(), FieldValue::Float(u64::MAX as f64)),
                ("small".into(), FieldValue::Int(7)),
                ("ok".into(), FieldValue::Bool(true)),
                ("msg".into(), FieldValue::Str("hello".into())),
            ]
        );
    }
}
