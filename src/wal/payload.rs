//! A record's payload in format version 2: the logged readings with each distinct series and
//! field name written once per record, and the readings as indexes into those and values.
//!
//! ```text
//! payload = series_count:v series* name_count:v name* reading*       (reading_count from the
//!                                                                     record header)
//! series  = 1 measurement:s tag_count:v (key:s value:s)*   key is series_key(measurement, tags)
//!         | 0 key:s measurement:s tag_count:v (key:s value:s)*        (a JSON sensor's key)
//! name    = s
//! reading = series:v ts_delta:z field_count:v field*       ts_delta from the previous reading
//!                                                           of the record (the first from 0)
//! field   = (name << 3 | kind):v value
//! value   = kind 0: f64 as 8 bytes LE | 1: i64 as z | 2: u64 as v | 3: false | 4: true | 5: s
//! s = len:v UTF-8 bytes    v = unsigned LEB128    z = zigzag, then v
//! ```
//!
//! Why not postcard of the items, as version 1: that wrote every reading's series (key,
//! measurement and tags) and field names in full, more bytes than the line itself, and the log
//! wrote more bytes a reading than the store did (docs/performance.md#log-records). A body's
//! lines are of
//! series it names once or a few times, and of the same few fields.

use std::collections::HashMap;

use crate::model::{FieldName, FieldValue, Fields, Item, Reading, Series, SeriesMeta, series_key};
use crate::wire::{Cursor, WireError, put_str, put_varint, zigzag};

/// Why a payload could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("a record holds at most {} readings", u32::MAX)]
    TooLarge,
    #[error("payload damaged: {0}")]
    Damaged(&'static str),
    #[error("payload damaged: {0}")]
    Wire(#[from] WireError),
}

const FLOAT: u64 = 0;
const INT: u64 = 1;
const UINT: u64 = 2;
const FALSE: u64 = 3;
const TRUE: u64 = 4;
const STR: u64 = 5;
const KIND_BITS: u32 = 3;

type Hasher = foldhash::fast::FixedState;

/// Appends the payload of `items` to `out`.
pub fn encode(items: &[Item], out: &mut Vec<u8>) -> Result<(), PayloadError> {
    u32::try_from(items.len()).map_err(|_| PayloadError::TooLarge)?;
    // The readings go to `body` while the dictionaries fill; both are then written in order.
    let mut body = Vec::with_capacity(items.len() * 32);
    let mut series: Vec<&Series> = Vec::new();
    // By identity: a parser's lines of one series share one `Series` (an interned one for
    // line protocol), so this never hashes a key. Two copies of one key are two entries.
    // Sized for a body of distinct series (a fleet's), so that it never rehashes.
    let mut series_index: HashMap<usize, u32, Hasher> =
        HashMap::with_capacity_and_hasher(items.len(), Hasher::default());
    let mut last_series: Option<(usize, u32)> = None;
    let mut names: Vec<&str> = Vec::new();
    let mut name_index: HashMap<&str, u32, Hasher> = HashMap::default();
    // The name index used for each field position by the previous reading: sensors send the
    // same fields in the same order, so this is usually right and costs a pointer compare.
    let mut last_names: smallvec::SmallVec<[u32; 8]> = smallvec::SmallVec::new();
    let mut prev_ts = 0i64;
    for (s, reading) in items {
        let meta: &SeriesMeta = s;
        let id = meta as *const SeriesMeta as usize;
        let si = match last_series {
            Some((last, i)) if last == id => i,
            _ => *series_index.entry(id).or_insert_with(|| {
                series.push(s);
                (series.len() - 1) as u32
            }),
        };
        last_series = Some((id, si));
        // Byte by byte into `body` (sized for the usual reading above), never a copy of a
        // part of unknown length: with a call to `memmove` per part, those calls were most of
        // the encoder's time (5,000 readings, three to five parts each, per record).
        put_varint(&mut body, u64::from(si));
        put_varint(&mut body, zigzag(reading.ts.wrapping_sub(prev_ts)));
        put_varint(&mut body, reading.fields.len() as u64);
        prev_ts = reading.ts;
        for (j, (name, value)) in reading.fields.iter().enumerate() {
            let name = name.as_str();
            let guess = last_names.get(j).copied().filter(|&n| {
                let known = names[n as usize];
                std::ptr::eq(known, name) || known == name
            });
            let ni = match guess {
                Some(n) => n,
                None => *name_index.entry(name).or_insert_with(|| {
                    names.push(name);
                    (names.len() - 1) as u32
                }),
            };
            match last_names.get_mut(j) {
                Some(slot) => *slot = ni,
                None => last_names.push(ni),
            }
            let tag = |kind: u64| (u64::from(ni) << KIND_BITS) | kind;
            match value {
                FieldValue::Float(v) => {
                    put_varint(&mut body, tag(FLOAT));
                    // Of a length known here: eight stores, not a call.
                    body.extend_from_slice(&v.to_le_bytes());
                }
                FieldValue::Int(v) => {
                    put_varint(&mut body, tag(INT));
                    put_varint(&mut body, zigzag(*v));
                }
                FieldValue::UInt(v) => {
                    put_varint(&mut body, tag(UINT));
                    put_varint(&mut body, *v);
                }
                FieldValue::Bool(v) => put_varint(&mut body, tag(if *v { TRUE } else { FALSE })),
                FieldValue::Str(v) => {
                    put_varint(&mut body, tag(STR));
                    put_str(&mut body, v);
                }
            }
        }
    }
    let dictionary: usize = series.iter().map(|m| 8 + m.key().len() + m.measurement().len()).sum();
    out.reserve(dictionary + names.iter().map(|n| n.len() + 2).sum::<usize>() + body.len());
    put_varint(out, series.len() as u64);
    for s in series {
        let meta: &SeriesMeta = s;
        // Interned series are line protocol's, whose key is made from the measurement and
        // tags, behind their database's prefix if any; others (JSON sensors) are checked, with
        // what `decode` rebuilds the key with. A prefixed key is written whole.
        let made = || meta.key() == meta.series_key();
        let qualified = crate::databases::is_qualified(meta.key());
        debug_assert!(
            !s.is_interned() || qualified || made(),
            "an interned series whose key is not made from its measurement and tags"
        );
        let derived = if s.is_interned() { !qualified } else { made() };
        if derived {
            out.push(1);
        } else {
            out.push(0);
            put_str(out, meta.key());
        }
        put_str(out, meta.measurement());
        put_varint(out, meta.tags().len() as u64);
        for (k, v) in meta.tags() {
            put_str(out, k);
            put_str(out, v);
        }
    }
    put_varint(out, names.len() as u64);
    for name in names {
        put_str(out, name);
    }
    out.extend_from_slice(&body);
    Ok(())
}

/// The `count` items of a payload `encode` wrote.
pub fn decode(payload: &[u8], count: u32) -> Result<Vec<Item>, PayloadError> {
    let mut r = Cursor::new(payload);
    let series_count = r.len()?;
    let mut series: Vec<Series> = Vec::with_capacity(series_count);
    for _ in 0..series_count {
        let derived = match r.u8()? {
            0 => false,
            1 => true,
            _ => return Err(PayloadError::Damaged("series flag")),
        };
        let key = if derived { None } else { Some(r.string()?) };
        let measurement = r.string()?;
        let tag_count = r.len()?;
        let mut tags = Vec::with_capacity(tag_count);
        for _ in 0..tag_count {
            tags.push((r.string()?, r.string()?));
        }
        let key = key.unwrap_or_else(|| series_key(&measurement, &tags));
        series.push(SeriesMeta::new(&key, &measurement, &tags).into());
    }
    let name_count = r.len()?;
    let mut names: Vec<FieldName> = Vec::with_capacity(name_count);
    for _ in 0..name_count {
        names.push(FieldName::interned(r.str()?));
    }
    // Each reading takes three bytes at least: damage cannot reserve more than that.
    let mut items = Vec::with_capacity((count as usize).min(payload.len() / 3));
    let mut ts = 0i64;
    for _ in 0..count {
        let s = usize::try_from(r.varint()?)
            .ok()
            .and_then(|i| series.get(i))
            .ok_or(PayloadError::Damaged("series index"))?
            .clone();
        ts = ts.wrapping_add(r.zigzag()?);
        let field_count = r.len()?;
        let mut fields = Fields::with_capacity(field_count);
        for _ in 0..field_count {
            let tag = r.varint()?;
            let name = usize::try_from(tag >> KIND_BITS)
                .ok()
                .and_then(|n| names.get(n))
                .ok_or(PayloadError::Damaged("name index"))?
                .clone();
            let value = match tag & ((1 << KIND_BITS) - 1) {
                FLOAT => FieldValue::Float(r.f64()?),
                INT => FieldValue::Int(r.zigzag()?),
                UINT => FieldValue::UInt(r.varint()?),
                FALSE => FieldValue::Bool(false),
                TRUE => FieldValue::Bool(true),
                STR => FieldValue::Str(r.string()?),
                _ => return Err(PayloadError::Damaged("field kind")),
            };
            fields.push((name, value));
        }
        items.push((s, Reading { ts, fields }));
    }
    r.finish()?;
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = FieldValue> {
        prop_oneof![
            any::<f64>().prop_map(FieldValue::Float),
            any::<i64>().prop_map(FieldValue::Int),
            any::<u64>().prop_map(FieldValue::UInt),
            any::<bool>().prop_map(FieldValue::Bool),
            ".{0,6}".prop_map(FieldValue::Str),
        ]
    }

    /// Line-protocol series (with characters the key escapes) and JSON sensors, whose key is
    /// not derived from their tags, in the default database or another, interned (as line
    /// protocol's are) or not.
    fn series() -> impl Strategy<Value = Series> {
        let text = "[a-c ,=\\\\é]{0,4}";
        (
            text,
            proptest::collection::btree_map("[a-c ,=]{1,3}", text, 0..3),
            proptest::option::of("[a-z:/]{1,8}"),
            proptest::option::of("[a-c]{1,3}"),
            any::<bool>(),
        )
            .prop_map(|(measurement, tags, json_key, database, interned)| {
                let tags: Vec<(String, String)> = tags.into_iter().collect();
                let line_protocol = json_key.is_none();
                let key = json_key.unwrap_or_else(|| series_key(&measurement, &tags));
                let key = match database {
                    Some(db) => crate::databases::Database::named(&db).unwrap().qualify(&key),
                    None => key,
                };
                let meta = SeriesMeta::new(&key, &measurement, &tags);
                if interned && line_protocol { Series::interned(meta) } else { Series::from(meta) }
            })
    }

    fn items() -> impl Strategy<Value = Vec<Item>> {
        (proptest::collection::vec(series(), 1..5), proptest::collection::vec("[a-d]{1,3}", 1..5))
            .prop_flat_map(|(series, names)| {
                let names: Vec<FieldName> = names.into_iter().map(FieldName::from).collect();
                let reading = (
                    0..series.len(),
                    any::<i64>(),
                    proptest::collection::vec((0..names.len(), value()), 0..5),
                );
                proptest::collection::vec(reading, 0..40).prop_map(move |readings| {
                    readings
                        .into_iter()
                        .map(|(s, ts, fields)| {
                            let fields =
                                fields.into_iter().map(|(n, v)| (names[n].clone(), v)).collect();
                            (series[s].clone(), Reading { ts, fields })
                        })
                        .collect()
                })
            })
    }

    /// An item with its values as text.
    type Comparable = (SeriesMeta, i64, Vec<(String, String)>);

    /// Floats compared by their bits: NaN is a value too.
    fn comparable(items: &[Item]) -> Vec<Comparable> {
        items
            .iter()
            .map(|(s, r)| {
                let fields = r
                    .fields
                    .iter()
                    .map(|(n, v)| {
                        let v = match v {
                            FieldValue::Float(f) => format!("f{:x}", f.to_bits()),
                            other => format!("{other:?}"),
                        };
                        (n.to_string(), v)
                    })
                    .collect();
                ((**s).clone(), r.ts, fields)
            })
            .collect()
    }

    proptest! {
        #[test]
        fn payloads_round_trip(items in items()) {
            let mut bytes = vec![7u8];
            encode(&items, &mut bytes).unwrap();
            let back = decode(&bytes[1..], items.len() as u32).unwrap();
            prop_assert_eq!(comparable(&back), comparable(&items));
        }

        #[test]
        fn a_cut_or_damaged_payload_fails_or_decodes_without_panicking(
            items in items(), cut in any::<prop::sample::Index>(), flip in any::<u8>()
        ) {
            let mut bytes = Vec::new();
            encode(&items, &mut bytes).unwrap();
            if !bytes.is_empty() {
                let at = cut.index(bytes.len());
                prop_assert!(decode(&bytes[..at], items.len() as u32).is_err());
                bytes[at] ^= flip;
                let _ = decode(&bytes, items.len() as u32);
            }
        }
    }

    #[test]
    fn a_line_protocol_series_is_written_once_a_record_without_its_key() {
        let meta = SeriesMeta::new("loadtest,sensor=s0001", "loadtest", &[("sensor", "s0001")]);
        let s = Series::from(meta.clone());
        let reading = |ts| Reading {
            ts,
            fields: smallvec::smallvec![
                ("temperature".into(), FieldValue::Float(15.0)),
                ("humidity".into(), FieldValue::Float(30.5)),
            ],
        };
        let items: Vec<Item> =
            (0..100).map(|i| (s.clone(), reading(1_700_000_000_000 + i))).collect();
        let mut bytes = Vec::new();
        encode(&items, &mut bytes).unwrap();
        assert!(!bytes.windows(meta.key().len()).any(|w| w == meta.key().as_bytes()));
        // Per reading: series 1, ts 1 (6 for the first), field count 1, two fields of 9.
        assert!(bytes.len() < 100 * 21 + 64, "{} bytes", bytes.len());
        let back = decode(&bytes, 100).unwrap();
        assert_eq!(*back[0].0, meta);
        assert_eq!(back[99].1, reading(1_700_000_000_099));
    }

    #[test]
    fn an_index_may_exceed_the_bytes_left() {
        // The last readings are shorter than their series' index.
        let items: Vec<Item> = (0..200)
            .map(|i| {
                let meta = SeriesMeta::untagged(&format!("k{i}"), "m");
                (Series::from(meta), Reading { ts: 0, fields: Fields::new() })
            })
            .collect();
        let mut bytes = Vec::new();
        encode(&items, &mut bytes).unwrap();
        assert_eq!(comparable(&decode(&bytes, 200).unwrap()), comparable(&items));
    }
}
