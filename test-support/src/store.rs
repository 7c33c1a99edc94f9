//! Building and writing batches the way the store tests do: a series from its key and tags,
//! a reading from its fields, readings grouped into one batch per hour, and a write that
//! insists every batch succeeded; a range read back whole.

use bucketd::model::{
    Batch, FieldValue, Reading, Series, SeriesMeta, TimestampMs, WriterId, hour_start,
};
use bucketd::store::{Order, RangeQuery, Store, WriteReport};
use futures::StreamExt;

/// The writer the suite writes as (a second one where a case says so).
pub const W: WriterId = WriterId(1);

pub fn series(key: &str, measurement: &str, tags: &[(&str, &str)]) -> Series {
    let mut tags: Vec<(String, String)> =
        tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    tags.sort();
    Series::shared(SeriesMeta::new(key, measurement, &tags))
}

pub fn reading(ts: TimestampMs, fields: &[(&str, FieldValue)]) -> Reading {
    Reading { ts, fields: fields.iter().map(|&(n, ref v)| (n.into(), v.clone())).collect() }
}

/// Groups readings into one batch per hour, keeping their order within each hour; hours in
/// the order they first appear.
pub fn batches(series: &Series, readings: &[Reading]) -> Vec<Batch> {
    let mut hours: Vec<(TimestampMs, Vec<Reading>)> = Vec::new();
    for r in readings {
        let hour = hour_start(r.ts);
        match hours.iter_mut().find(|(h, _)| *h == hour) {
            Some((_, rs)) => rs.push(r.clone()),
            None => hours.push((hour, vec![r.clone()])),
        }
    }
    hours.into_iter().map(|(hour, rs)| Batch::new(series.clone(), hour, rs)).collect()
}

/// Writes and insists that every batch succeeded.
pub async fn write_ok(store: &dyn Store, batches: &[Batch]) -> Vec<WriteReport> {
    let results = store.write(W, batches).await;
    assert_eq!(results.len(), batches.len(), "one result per batch");
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.unwrap_or_else(|e| panic!("batch {i} ({}) failed: {e}", batches[i].series.key()))
        })
        .collect()
}

pub fn range(sensor: &str, from: TimestampMs, to: TimestampMs) -> RangeQuery {
    RangeQuery { sensor: sensor.into(), from, to, order: Order::Asc, limit: None }
}

pub async fn read(store: &dyn Store, query: RangeQuery) -> Vec<Reading> {
    let mut stream = store.readings(query.clone());
    let mut out = Vec::new();
    while let Some(r) = stream.next().await {
        out.push(normalize(r.unwrap_or_else(|e| panic!("{query:?} failed: {e}"))));
    }
    out
}

/// A reading as every store hands it back: BSON has no unsigned integers, so a store may
/// return `UInt(5)` as `Int(5)` and `UInt(u64::MAX)` as `Float(2^64)`.
pub fn normalize_value(v: FieldValue) -> FieldValue {
    match v {
        FieldValue::UInt(u) => match i64::try_from(u) {
            Ok(i) => FieldValue::Int(i),
            Err(_) => FieldValue::Float(u as f64),
        },
        v => v,
    }
}

pub fn normalize(r: Reading) -> Reading {
    Reading {
        ts: r.ts,
        fields: r.fields.into_iter().map(|(n, v)| (n, normalize_value(v))).collect(),
    }
}

pub fn normalized(readings: &[Reading]) -> Vec<Reading> {
    readings.iter().cloned().map(normalize).collect()
}
