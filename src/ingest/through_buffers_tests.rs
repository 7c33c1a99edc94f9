//! What the buffers hand the flusher is exactly what the parsers produced: per (series, hour)
//! the same readings in arrival order (fields as a set: a reading comes back with its fields
//! in the order its buffer first met each name), for arbitrary line protocol and JSON with
//! fields that come and go, change type, equal timestamps and several hours per request.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;

use super::validate::InputLimits;
use super::{json, line_protocol};
use crate::buffer::{BufferConfig, Buffers, TakeMode};
use crate::model::{FieldValue, HOUR_MS, Item, Reading, TimestampMs};

#[derive(Clone, Debug)]
enum Value {
    Float(f64),
    Int(i64),
    Bool(bool),
    Str(String),
}

#[derive(Clone, Debug)]
struct Line {
    sensor: u8,
    hour: u8,
    ms: u16,
    fields: Vec<(u8, Value)>,
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-1000i32..1000).prop_map(|v| Value::Float(f64::from(v) / 8.0)),
        any::<i32>().prop_map(|v| Value::Int(i64::from(v))),
        any::<bool>().prop_map(Value::Bool),
        "[a-z]{0,3}".prop_map(Value::Str),
    ]
}

fn line() -> impl Strategy<Value = Line> {
    let fields = proptest::collection::btree_map(0u8..4, value(), 1..4)
        .prop_map(|m| m.into_iter().collect::<Vec<_>>())
        .prop_shuffle();
    // Few distinct timestamps, so equal ones are common.
    (0u8..3, 0u8..3, 0u16..4, fields).prop_map(|(sensor, hour, ms, fields)| Line {
        sensor,
        hour,
        ms,
        fields,
    })
}

const T0: i64 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS;

fn ts(l: &Line) -> i64 {
    T0 + i64::from(l.hour) * HOUR_MS + i64::from(l.ms)
}

fn lp(lines: &[Line]) -> String {
    let mut body = String::new();
    for l in lines {
        let fields: Vec<String> = l
            .fields
            .iter()
            .map(|(f, v)| match v {
                Value::Float(x) => format!("f{f}={x:?}"),
                Value::Int(x) => format!("f{f}={x}i"),
                Value::Bool(x) => format!("f{f}={x}"),
                Value::Str(x) => format!("f{f}=\"{x}\""),
            })
            .collect();
        body.push_str(&format!("m,sensor=s{} {} {}\n", l.sensor, fields.join(","), ts(l)));
    }
    body
}

fn json_body(lines: &[Line]) -> String {
    let items: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| {
            let fields: serde_json::Map<String, serde_json::Value> = l
                .fields
                .iter()
                .map(|(f, v)| {
                    let v = match v {
                        Value::Float(x) => serde_json::json!(x),
                        Value::Int(x) => serde_json::json!(x),
                        Value::Bool(x) => serde_json::json!(x),
                        Value::Str(x) => serde_json::json!(x),
                    };
                    (format!("f{f}"), v)
                })
                .collect();
            serde_json::json!({"sensor": format!("s{}", l.sensor), "ts": ts(l), "fields": fields})
        })
        .collect();
    serde_json::Value::Array(items).to_string()
}

type Key = (String, TimestampMs);
type Row = (TimestampMs, Vec<(String, FieldValue)>);

fn row(r: &Reading) -> Row {
    let mut fields: Vec<_> = r.fields.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    (r.ts, fields)
}

/// Per (series, hour), the readings in the order given.
fn by_buffer<'a>(items: impl Iterator<Item = (&'a str, Reading)>) -> BTreeMap<Key, Vec<Row>> {
    let mut out: BTreeMap<Key, Vec<Row>> = BTreeMap::new();
    for (key, r) in items {
        out.entry((key.to_owned(), crate::model::hour_start(r.ts))).or_default().push(row(&r));
    }
    out
}

fn through_buffers(requests: Vec<Vec<Item>>) -> BTreeMap<Key, Vec<Row>> {
    let b = Buffers::new(BufferConfig {
        max_buffered_bytes: usize::MAX,
        max_buffered_readings: 1_000_000,
        max_batch_readings: 1_000_000,
        flush_interval: Duration::from_secs(3600),
    });
    for items in requests {
        b.push(items).unwrap();
    }
    let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).expect("something buffered");
    let out = by_buffer(
        taken.batches().iter().flat_map(|batch| batch.readings().map(|r| (batch.series.key(), r))),
    );
    for batch in taken.batches() {
        assert!(batch.seqs().windows(2).all(|w| w[0] < w[1]), "sequence numbers increase");
    }
    out
}

proptest! {
    #[test]
    fn line_protocol_and_json(requests in proptest::collection::vec(
        proptest::collection::vec(line(), 1..30), 1..4
    )) {
        let limits = InputLimits::default();
        for json_format in [false, true] {
            let parsed: Vec<Vec<Item>> = requests
                .iter()
                .map(|lines| {
                    let results = if json_format {
                        json::parse_document(json_body(lines).as_bytes(), 0, &limits)
                            .into_iter()
                            .map(|r| r.map_err(|e| e.to_string()))
                            .collect::<Vec<_>>()
                    } else {
                        line_protocol::parse_body(
                            lp(lines).as_bytes(),
                            line_protocol::Precision::Milliseconds,
                            0,
                            &limits,
                        )
                        .into_iter()
                        .map(|r| r.map_err(|e| e.to_string()))
                        .collect()
                    };
                    results.into_iter().map(|r| r.expect("valid by construction")).collect()
                })
                .collect();
            let expected =
                by_buffer(parsed.iter().flatten().map(|(s, r)| (s.key(), r.clone())));
            prop_assert_eq!(through_buffers(parsed), expected, "json: {}", json_format);
        }
    }
}
