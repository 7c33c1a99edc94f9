use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use proptest::prelude::*;
use redb::{ReadableDatabase, ReadableTableMetadata};

use super::chunks::{self, BY_SERIES, ChunkAt};
use super::codec::BucketHeader;
use super::*;
use crate::model::{FieldValue, HOUR_MS, MIN_TIMESTAMP_MS, SeriesMeta, TimestampMs, hour_start};
use crate::store::approx_reading_bytes;
use crate::store::{FieldStats, Order};

mod sealing;
mod step_values;
mod upgrade;

const BIG: BucketLimits = BucketLimits { max_readings: 1000, max_bytes: 1 << 20 };

fn meta(key: &str, measurement: &str, tags: &[(&str, &str)]) -> Arc<SeriesMeta> {
    Arc::new(SeriesMeta::new(key, measurement, tags))
}

fn reading(ts: TimestampMs, v: f64) -> Reading {
    Reading { ts, fields: smallvec::smallvec![("v".into(), FieldValue::Float(v))] }
}

/// Splits readings of one series into per-hour batches, keeping their order.
fn batches(series: &Arc<SeriesMeta>, readings: &[Reading]) -> Vec<Batch> {
    let mut by_hour: BTreeMap<TimestampMs, Vec<Reading>> = BTreeMap::new();
    for r in readings {
        by_hour.entry(hour_start(r.ts)).or_default().push(r.clone());
    }
    by_hour.into_iter().map(|(hour, readings)| Batch::new(series.clone(), hour, readings)).collect()
}

async fn write_ok(store: &EmbeddedStore, batches: &[Batch]) -> Vec<WriteReport> {
    store.write(WriterId(1), batches).await.into_iter().map(|r| r.expect("batch written")).collect()
}

fn range(sensor: &str, from: TimestampMs, to: TimestampMs) -> RangeQuery {
    RangeQuery { sensor: sensor.into(), from, to, order: Order::Asc, limit: None }
}

async fn collect(store: &EmbeddedStore, q: RangeQuery) -> Vec<Reading> {
    store.readings(q).map(|r| r.expect("reading")).collect().await
}

fn open(dir: &Path, limits: BucketLimits) -> EmbeddedStore {
    EmbeddedStore::open(dir, limits).expect("store opens")
}

/// Every bucket header of a series, as `(hour, seq, header)`.
fn headers(store: &EmbeddedStore, key: &str) -> Vec<(TimestampMs, u32, BucketHeader)> {
    let txn = store.db().begin_read().unwrap();
    let id = read::series_id_for_tests(&txn, key);
    let buckets = txn.open_table(BUCKETS).unwrap();
    buckets
        .range((id, i64::MIN, 0)..=(id, i64::MAX, u32::MAX))
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            let (_, hour, seq) = k.value();
            (hour, seq, BucketHeader::decode(v.value()).unwrap())
        })
        .collect()
}

/// What a range query must return: one reading per point (the readings of a timestamp folded
/// in the order written, the later value winning), sorted by time, filtered, reversed for
/// `Desc`, truncated to the limit.
fn model_range(written: &[Reading], q: &RangeQuery) -> Vec<Reading> {
    let mut v: Vec<Reading> = written.to_vec();
    crate::model::fold_points(&mut v);
    v.retain(|r| r.ts >= q.from && r.ts < q.to);
    v.sort_by_key(|r| r.ts);
    if q.order == Order::Desc {
        v.reverse();
    }
    v.truncate(q.limit.unwrap_or(usize::MAX));
    v
}

fn model_rollup(
    written: &[Reading],
    q: &RollupQuery,
) -> BTreeMap<TimestampMs, BTreeMap<String, FieldStats>> {
    let mut rows: BTreeMap<TimestampMs, BTreeMap<String, FieldStats>> = BTreeMap::new();
    let mut points = written.to_vec();
    crate::model::fold_points(&mut points);
    for r in points.iter().filter(|r| r.ts >= q.from && r.ts < q.to) {
        for (name, value) in &r.fields {
            let wanted = q.fields.as_ref().is_none_or(|f| f.iter().any(|w| name == w));
            if let (true, Some(v)) = (wanted, value.as_f64()) {
                rows.entry(r.ts.div_euclid(q.step_ms) * q.step_ms)
                    .or_default()
                    .entry(name.to_string())
                    .and_modify(|s| s.merge(&FieldStats::of(r.ts, v)))
                    .or_insert(FieldStats::of(r.ts, v));
            }
        }
    }
    rows
}

fn assert_rollups_match(
    got: &[RollupRow],
    want: &BTreeMap<TimestampMs, BTreeMap<String, FieldStats>>,
) {
    let starts: Vec<_> = got.iter().map(|r| r.start).collect();
    assert_eq!(starts, want.keys().copied().collect::<Vec<_>>());
    for row in got {
        let w = &want[&row.start];
        assert_eq!(row.fields.keys().collect::<Vec<_>>(), w.keys().collect::<Vec<_>>());
        for (name, s) in &row.fields {
            let e = &w[name];
            assert_eq!(
                (s.count, s.min, s.max, s.first, s.last),
                (e.count, e.min, e.max, e.first, e.last),
                "{name} at {}",
                row.start
            );
            assert!((s.sum - e.sum).abs() <= 1e-9 * e.sum.abs().max(1.0), "{name} sum");
        }
    }
}

#[tokio::test]
async fn range_respects_bounds_order_and_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    let s = meta("s1", "m", &[]);
    let written: Vec<Reading> = (0..10_000).map(|i| reading(i * 1000, i as f64)).collect();
    write_ok(&store, &batches(&s, &written)).await;

    for q in [
        range("s1", 0, 10_000_000),
        range("s1", 1500, 3_700_000),
        range("s1", 3_600_000, 7_200_000),
        RangeQuery { order: Order::Desc, ..range("s1", 1000, 7_300_000) },
        RangeQuery { limit: Some(3), ..range("s1", 3_599_500, 9_000_000) },
        RangeQuery { order: Order::Desc, limit: Some(1500), ..range("s1", 0, i64::MAX) },
        range("s1", 5000, 5000),
    ] {
        assert_eq!(collect(&store, q.clone()).await, model_range(&written, &q), "{q:?}");
    }
    assert!(collect(&store, range("nope", 0, i64::MAX)).await.is_empty());
    assert!(
        collect(&store, RangeQuery { limit: Some(0), ..range("s1", 0, i64::MAX) }).await.is_empty()
    );
    // A backwards range is empty, like every other range with nothing in it.
    assert!(collect(&store, range("s1", 10_000, 5_000)).await.is_empty());
}

#[tokio::test]
async fn repeated_timestamps_are_one_point_even_out_of_order_and_spilled() {
    let dir = tempfile::tempdir().unwrap();
    // Small caps so that the hour spans several buckets.
    let store = open(dir.path(), BucketLimits { max_readings: 3, max_bytes: 1 << 20 });
    let s = meta("s", "m", &[]);
    let mut written = Vec::new();
    let mut next = 0.0;
    // Three writes: in order, then late data reaching back into the same hour, with ties.
    for tss in [vec![10, 20, 20, 30], vec![20, 5, 20, 40, 30], vec![30, 30, 1]] {
        let rs: Vec<Reading> = tss
            .into_iter()
            .map(|ts| {
                next += 1.0;
                reading(ts, next)
            })
            .collect();
        write_ok(&store, &batches(&s, &rs)).await;
        written.extend(rs);
    }
    for order in [Order::Asc, Order::Desc] {
        for limit in [None, Some(4)] {
            let q = RangeQuery { order, limit, ..range("s", 0, 100) };
            let got = by_name(collect(&store, q.clone()).await);
            assert_eq!(got, by_name(model_range(&written, &q)), "{q:?}");
        }
    }
    // Six points: the buckets count each once.
    let hs = headers(&store, "s");
    assert_eq!(hs.iter().map(|(_, _, h)| h.count).sum::<u32>(), 6);
}

/// Readings with their fields sorted by name: a point written again keeps its fields' order
/// and adds new ones after them, which a model need not follow.
fn by_name(mut readings: Vec<Reading>) -> Vec<Reading> {
    for r in &mut readings {
        r.fields.sort_by(|a, b| a.0.cmp(&b.0));
    }
    readings
}

#[tokio::test]
async fn spills_at_count_cap_into_new_buckets_of_the_same_hour() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BucketLimits { max_readings: 4, max_bytes: 1 << 20 });
    let s = meta("s", "m", &[]);
    let first: Vec<Reading> = (0..6).map(|i| reading(i, 1.0)).collect();
    let reports = write_ok(&store, &batches(&s, &first)).await;
    assert_eq!(reports, vec![WriteReport { buckets_created: 2 }]);
    let second: Vec<Reading> = (6..8).map(|i| reading(i, 1.0)).collect();
    assert_eq!(write_ok(&store, &batches(&s, &second)).await, vec![WriteReport::default()]);
    let third: Vec<Reading> = (8..9).map(|i| reading(i, 1.0)).collect();
    assert_eq!(
        write_ok(&store, &batches(&s, &third)).await,
        vec![WriteReport { buckets_created: 1 }]
    );

    let hs = headers(&store, "s");
    let counts: Vec<(TimestampMs, u32, u32, u32)> =
        hs.iter().map(|(h, seq, b)| (*h, *seq, b.count, b.chunks())).collect();
    // The second write joined the second bucket's small chunk.
    assert_eq!(counts, vec![(0, 0, 4, 1), (0, 1, 4, 1), (0, 2, 1, 1)]);
    assert!(hs.iter().all(|(_, _, b)| b.sorted));
    assert_eq!(collect(&store, range("s", 0, HOUR_MS)).await.len(), 9);
}

#[tokio::test]
async fn spills_at_byte_cap_and_keeps_an_oversized_reading_alone() {
    let dir = tempfile::tempdir().unwrap();
    let one = approx_reading_bytes(&reading(0, 0.0));
    let store = open(dir.path(), BucketLimits { max_readings: 1000, max_bytes: 3 * one as u32 });
    let s = meta("s", "m", &[]);
    let huge = Reading {
        ts: 4,
        fields: smallvec::smallvec![("big".into(), FieldValue::Str("x".repeat(500)))],
    };
    let mut rs: Vec<Reading> = (0..4).map(|i| reading(i, 1.0)).collect();
    rs.push(huge.clone());
    rs.push(reading(5, 2.0));
    let reports = write_ok(&store, &batches(&s, &rs)).await;
    assert_eq!(reports, vec![WriteReport { buckets_created: 4 }]);
    let got: Vec<(u32, u64)> =
        headers(&store, "s").iter().map(|(_, _, b)| (b.count, b.bytes)).collect();
    let huge_size = approx_reading_bytes(&huge);
    assert!(huge_size > 3 * one);
    assert_eq!(got, vec![(3, 3 * one), (1, one), (1, huge_size), (1, one)]);
    assert_eq!(collect(&store, range("s", 0, HOUR_MS)).await, rs);
}

#[tokio::test]
async fn batches_of_one_write_see_each_other_and_a_bad_batch_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BucketLimits { max_readings: 5, max_bytes: 1 << 20 });
    let (a, b) = (meta("a", "m", &[]), meta("b", "m", &[]));
    let a1: Vec<Reading> = (0..4).map(|i| reading(i, 1.0)).collect();
    let a2: Vec<Reading> = (4..7).map(|i| reading(i, 2.0)).collect();
    // A batch's readings lie in its hour (`Batch` checks that when it is made), but the hour
    // may lie outside the supported years or, for an empty batch, not start an hour.
    let early = MIN_TIMESTAMP_MS - 1;
    let bad = Batch::new(b.clone(), hour_start(early), vec![reading(early, 0.0)]);
    let misaligned = Batch::new(b.clone(), 5, vec![]);
    let empty = Batch::new(b.clone(), 0, vec![]);
    let extreme = Batch::new(b.clone(), hour_start(i64::MAX), vec![reading(i64::MAX, 0.0)]);
    let out = store
        .write(
            WriterId(1),
            &[
                batches(&a, &a1).remove(0),
                bad,
                batches(&a, &a2).remove(0),
                misaligned,
                empty,
                extreme,
            ],
        )
        .await;
    assert_eq!(out[0].as_ref().ok(), Some(&WriteReport { buckets_created: 1 }));
    assert!(matches!(out[1], Err(StoreError::Rejected(_))), "{:?}", out[1]);
    // The second batch of `a` continues the bucket the first one opened, then spills.
    assert_eq!(out[2].as_ref().ok(), Some(&WriteReport { buckets_created: 1 }));
    assert!(matches!(out[3], Err(StoreError::Rejected(_))), "{:?}", out[3]);
    assert_eq!(out[4].as_ref().ok(), Some(&WriteReport::default()));
    assert!(matches!(out[5], Err(StoreError::Rejected(_))), "{:?}", out[5]);
    let all: Vec<Reading> = a1.iter().chain(&a2).cloned().collect();
    assert_eq!(collect(&store, range("a", 0, HOUR_MS)).await, all);
    assert!(collect(&store, range("b", i64::MIN, i64::MAX)).await.is_empty());
    let sensors = store.sensors(SensorQuery { limit: 10, ..Default::default() }).await.unwrap();
    assert_eq!(sensors.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), ["a"]);
}

/// The store writes a call's batches in the order of its tables, not the order given: the
/// outcomes, the readings of one series and hour, first and last, and marks must not show it.
#[tokio::test]
async fn batches_given_out_of_key_order_land_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    // Ids in the order first written: "c" gets the lowest, the reverse of the keys' order.
    let (a, b, c) = (meta("a", "m", &[]), meta("b", "m", &[]), meta("c", "m", &[]));
    write_ok(&store, &[Batch::new(c.clone(), 0, vec![reading(0, 0.0)])]).await;
    write_ok(&store, &[Batch::new(b.clone(), 0, vec![reading(0, 0.0)])]).await;
    let h = HOUR_MS;
    let numbered = |s: &Arc<SeriesMeta>, hour, ts: &[TimestampMs], seq: u64| {
        let seqs: Vec<u64> = (seq..seq + ts.len() as u64).collect();
        let readings = ts.iter().zip(&seqs).map(|(&t, &n)| reading(t, n as f64)).collect();
        Batch::numbered(s.clone(), hour, readings, seqs)
    };
    let given = [
        numbered(&c, h, &[h + 5, h + 1], 10),
        numbered(&a, h, &[h + 9], 1),
        numbered(&b, 0, &[7], 20),
        numbered(&c, 0, &[3], 30),
        // The same series and hour again: its reading at h + 1 is the same point.
        numbered(&c, h, &[h + 1, h + 2], 12),
        numbered(&a, 0, &[2], 2),
    ];
    let out = store.write(WriterId(1), &given).await;
    let created: Vec<u32> = out.iter().map(|r| r.as_ref().unwrap().buckets_created).collect();
    assert_eq!(created, [1, 1, 0, 0, 0, 1]);
    let ts = |v: Vec<Reading>| v.into_iter().map(|r| r.ts).collect::<Vec<_>>();
    assert_eq!(ts(collect(&store, range("c", 0, 2 * h)).await), [0, 3, h + 1, h + 2, h + 5]);
    // The second batch's h + 1 is written over the first's.
    let c_hour = collect(&store, range("c", h, 2 * h)).await;
    let seqs: Vec<f64> = c_hour.iter().map(|r| r.fields[0].1.as_f64().unwrap()).collect();
    assert_eq!(seqs, [12.0, 13.0, 10.0]);
    assert_eq!(ts(collect(&store, range("a", 0, 2 * h)).await), [2, h + 9]);
    let sensors = store.sensors(SensorQuery { limit: 10, ..Default::default() }).await.unwrap();
    let spans: Vec<_> = sensors.iter().map(|s| (s.key.as_str(), s.first, s.last)).collect();
    assert_eq!(spans, [("a", 2, h + 9), ("b", 0, 7), ("c", 0, h + 5)]);
    let keys: Vec<(String, TimestampMs)> =
        [("a", 0), ("a", h), ("b", 0), ("c", 0), ("c", h)].map(|(k, h)| (k.into(), h)).into();
    assert_eq!(store.high_water(WriterId(1), &keys).await.unwrap(), [2, 1, 20, 30, 13]);
}

#[tokio::test]
async fn a_corrupt_bucket_fails_only_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    let (a, b) = (meta("a", "m", &[]), meta("b", "m", &[]));
    write_ok(&store, &batches(&a, &[reading(1, 1.0)])).await;
    let id = read::series_id_for_tests(&store.db().begin_read().unwrap(), "a");
    let txn = store.db().begin_write().unwrap();
    txn.open_table(BUCKETS).unwrap().insert((id, 0, 0), [0xffu8, 0xff].as_slice()).unwrap();
    txn.commit().unwrap();

    let out = store
        .write(
            WriterId(1),
            &[batches(&a, &[reading(2, 2.0)]).remove(0), batches(&b, &[reading(2, 3.0)]).remove(0)],
        )
        .await;
    assert!(matches!(out[0], Err(StoreError::Corrupt(_))), "{:?}", out[0]);
    assert_eq!(out[1].as_ref().ok(), Some(&WriteReport { buckets_created: 1 }));
    assert_eq!(collect(&store, range("b", 0, 10)).await, vec![reading(2, 3.0)]);
    let got: Vec<_> = store.readings(range("a", 0, 10)).collect().await;
    assert!(matches!(got.as_slice(), [Err(StoreError::Corrupt(_))]), "{got:?}");
    // The failed batch left the series record as it was.
    let sensors = store.sensors(SensorQuery { limit: 10, ..Default::default() }).await.unwrap();
    assert_eq!((sensors[0].key.as_str(), sensors[0].last), ("a", 1));
}

#[tokio::test]
async fn hourly_rollups_come_from_bucket_stats_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BucketLimits { max_readings: 50, max_bytes: 1 << 20 });
    let s = meta("s", "m", &[]);
    // Three hours before and after the epoch, two numeric fields and a string, spilled buckets.
    let written: Vec<Reading> = (-3 * 3600..3 * 3600)
        .step_by(7)
        .map(|sec| Reading {
            ts: sec * 1000,
            fields: smallvec::smallvec![
                ("a".into(), FieldValue::Float((sec as f64 / 100.0).sin())),
                ("b".into(), FieldValue::Int(sec % 17)),
                ("s".into(), FieldValue::Str("x".into())),
            ],
        })
        .collect();
    write_ok(&store, &batches(&s, &written)).await;
    let queries = [
        RollupQuery {
            sensor: "s".into(),
            from: -3 * HOUR_MS,
            to: 3 * HOUR_MS,
            step_ms: HOUR_MS,
            fields: None,
        },
        RollupQuery {
            sensor: "s".into(),
            from: -3 * HOUR_MS,
            to: 2 * HOUR_MS,
            step_ms: 2 * HOUR_MS,
            fields: Some(vec!["b".into()]),
        },
        RollupQuery {
            sensor: "s".into(),
            from: -HOUR_MS,
            to: HOUR_MS,
            step_ms: 24 * HOUR_MS,
            fields: Some(vec!["a".into(), "zz".into()]),
        },
    ];
    for q in &queries {
        assert_rollups_match(&store.rollups(q.clone()).await.unwrap(), &model_rollup(&written, q));
    }

    // Remove every reading: whole-hour rollups must not change, finer ones now find nothing.
    let txn = store.db().begin_write().unwrap();
    txn.delete_table(chunks::CHUNKS).unwrap();
    txn.open_table(chunks::CHUNKS).unwrap();
    txn.commit().unwrap();
    for q in &queries {
        assert_rollups_match(&store.rollups(q.clone()).await.unwrap(), &model_rollup(&written, q));
    }
    let fine = RollupQuery { step_ms: 60_000, ..queries[0].clone() };
    assert!(store.rollups(fine).await.unwrap().is_empty());
}

#[tokio::test]
async fn fine_and_unaligned_rollups_scan_readings() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BucketLimits { max_readings: 100, max_bytes: 1 << 20 });
    let s = meta("s", "m", &[]);
    let written: Vec<Reading> =
        (0..2 * 3600).map(|sec| reading(sec * 1000 + 13, sec as f64)).collect();
    write_ok(&store, &batches(&s, &written)).await;
    for q in [
        RollupQuery { sensor: "s".into(), from: 0, to: 2 * HOUR_MS, step_ms: 60_000, fields: None },
        RollupQuery {
            sensor: "s".into(),
            from: 1_000,
            to: 2 * HOUR_MS - 5,
            step_ms: HOUR_MS,
            fields: None,
        },
        RollupQuery {
            sensor: "s".into(),
            from: -7,
            to: 7_000_000,
            step_ms: 7 * 60_000 + 3,
            fields: Some(vec!["v".into()]),
        },
    ] {
        assert_rollups_match(&store.rollups(q.clone()).await.unwrap(), &model_rollup(&written, &q));
    }
    let bad = RollupQuery { sensor: "s".into(), from: 0, to: 10, step_ms: 0, fields: None };
    assert!(matches!(store.rollups(bad).await, Err(StoreError::InvalidQuery(_))));
    let backwards = RollupQuery { sensor: "s".into(), from: 10, to: 0, step_ms: 1, fields: None };
    assert!(store.rollups(backwards).await.unwrap().is_empty());
    let unknown =
        RollupQuery { sensor: "x".into(), from: 0, to: HOUR_MS, step_ms: HOUR_MS, fields: None };
    assert!(store.rollups(unknown).await.unwrap().is_empty());
}

#[tokio::test]
async fn sensors_filter_by_tags_and_measurement_in_key_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    let specs = [
        ("cpu,host=a,region=eu", "cpu", vec![("host", "a"), ("region", "eu")], 10),
        ("cpu,host=b,region=us", "cpu", vec![("host", "b"), ("region", "us")], 20),
        ("cpu,host=c,region=eu", "cpu", vec![("host", "c"), ("region", "eu")], 30),
        ("mem,host=a,region=eu", "mem", vec![("host", "a"), ("region", "eu")], 40),
        ("probe-7", "probe-7", vec![], 50),
    ];
    // Written in reverse key order, with a second write extending first/last.
    for (key, m, tags, ts) in specs.iter().rev() {
        let s = meta(key, m, tags);
        write_ok(&store, &batches(&s, &[reading(*ts, 1.0), reading(*ts + 5, 1.0)])).await;
        write_ok(&store, &batches(&s, &[reading(*ts - 3, 1.0)])).await;
    }
    let keys = |v: Vec<SensorInfo>| v.into_iter().map(|s| s.key).collect::<Vec<_>>();
    let q = |tags: &[(&str, &str)], m: Option<&str>, after: Option<&str>, limit| SensorQuery {
        database: Default::default(),
        tags: tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        measurement: m.map(str::to_owned),
        after: after.map(str::to_owned),
        limit,
    };
    let all = store.sensors(q(&[], None, None, 100)).await.unwrap();
    assert_eq!(all.len(), 5);
    assert_eq!(all[0].key, "cpu,host=a,region=eu");
    assert_eq!((all[0].first, all[0].last), (7, 15));
    assert_eq!(
        all[0].tags,
        vec![("host".to_string(), "a".to_string()), ("region".into(), "eu".into())]
    );
    assert_eq!(all[4].measurement, "probe-7");

    assert_eq!(
        keys(store.sensors(q(&[("region", "eu")], None, None, 100)).await.unwrap()),
        ["cpu,host=a,region=eu", "cpu,host=c,region=eu", "mem,host=a,region=eu"]
    );
    assert_eq!(
        keys(store.sensors(q(&[("region", "eu"), ("host", "a")], None, None, 100)).await.unwrap()),
        ["cpu,host=a,region=eu", "mem,host=a,region=eu"]
    );
    assert_eq!(
        keys(
            store
                .sensors(q(&[("region", "eu")], Some("cpu"), Some("cpu,host=a,region=eu"), 100))
                .await
                .unwrap()
        ),
        ["cpu,host=c,region=eu"]
    );
    assert_eq!(
        keys(store.sensors(q(&[], Some("cpu"), None, 2)).await.unwrap()),
        ["cpu,host=a,region=eu", "cpu,host=b,region=us"]
    );
    assert_eq!(
        keys(store.sensors(q(&[], None, Some("cpu,host=c,region=eu"), 100)).await.unwrap()),
        ["mem,host=a,region=eu", "probe-7"]
    );
    assert!(store.sensors(q(&[("host", "zz")], None, None, 100)).await.unwrap().is_empty());
    assert!(store.sensors(q(&[], Some("disk"), None, 100)).await.unwrap().is_empty());
    assert!(store.sensors(q(&[], None, None, 0)).await.unwrap().is_empty());
}

#[tokio::test]
async fn data_survives_reopen_and_series_ids_continue() {
    let dir = tempfile::tempdir().unwrap();
    let a = meta("a", "m", &[("k", "v")]);
    let ra: Vec<Reading> = (0..100).map(|i| reading(i * 60_000, i as f64)).collect();
    {
        let store = open(dir.path(), BIG);
        assert_eq!(store.name(), "embedded");
        store.ping().await.unwrap();
        write_ok(&store, &batches(&a, &ra)).await;
    }
    let store = open(dir.path(), BIG);
    assert_eq!(collect(&store, range("a", i64::MIN, i64::MAX)).await, ra);
    let b = meta("b", "m", &[("k", "v")]);
    write_ok(&store, &batches(&b, &[reading(5, 5.0)])).await;
    write_ok(&store, &batches(&a, &[reading(6_000_000, 7.0)])).await;
    assert_eq!(collect(&store, range("b", i64::MIN, i64::MAX)).await, vec![reading(5, 5.0)]);
    assert_eq!(collect(&store, range("a", i64::MIN, i64::MAX)).await.len(), 101);
    let tagged = store
        .sensors(SensorQuery {
            tags: vec![("k".into(), "v".into())],
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(tagged.len(), 2);
}

#[tokio::test]
async fn compaction_gives_back_the_space_writes_left_and_keeps_every_reading() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    let series: Vec<_> = (0..2000).map(|i| meta(&format!("s{i:04}"), "m", &[])).collect();
    // Every write rewrites every sensor's header: pages freed in the middle of the file.
    for round in 0..8i64 {
        let writes: Vec<Batch> = series
            .iter()
            .flat_map(|s| batches(s, &[reading(round * 1000, round as f64)]))
            .collect();
        write_ok(&store, &writes).await;
    }
    let long = meta("long", "m", &[]);
    write_ok(&store, &batches(&long, &(0..50_000).map(|i| reading(i, 0.0)).collect::<Vec<_>>()))
        .await;
    let before: Vec<Vec<Reading>> = collect_all(&store, &series).await;

    // A query in progress (its reader waiting for the stream to be read) holds the store:
    // compaction waits for another quiet moment.
    let mut stream = store.readings(range("long", 0, i64::MAX));
    assert!(stream.next().await.is_some());
    assert_eq!(store.compact().await.unwrap(), Some(Compaction::Busy));
    drop(stream);

    let Some(Compaction::Done { before: was, after }) = compact_when_free(&store).await else {
        panic!("not compacted")
    };
    assert_eq!(after, std::fs::metadata(store.path()).unwrap().len());
    assert!(after < was, "{after} of {was} bytes");
    assert_eq!(collect_all(&store, &series).await, before);
    write_ok(&store, &batches(&series[0], &[reading(9000, 9.0)])).await;
    assert_eq!(collect(&store, range("s0000", 0, i64::MAX)).await.len(), 9);
}

/// `/ready` pings the store; a compaction holds it for as long as it moves pages.
#[tokio::test]
async fn a_ping_does_not_wait_for_a_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    // A thread holding the lock as a compaction does, until told to let go.
    let (let_go, until_told) = std::sync::mpsc::channel::<()>();
    let (held, is_held) = std::sync::mpsc::channel();
    let db = store.db.clone();
    let compaction = std::thread::spawn(move || {
        let _compacting = db.write().unwrap();
        held.send(()).unwrap();
        until_told.recv().ok();
    });
    is_held.recv().unwrap();
    // A guard against a hang (the ping waiting for the lock), not a performance bound.
    let ping = tokio::time::timeout(Duration::from_secs(60), store.ping()).await;
    assert!(matches!(ping, Ok(Ok(()))), "{ping:?}");
    drop(let_go);
    compaction.join().unwrap();
    store.ping().await.unwrap();
}

async fn collect_all(store: &EmbeddedStore, series: &[Arc<SeriesMeta>]) -> Vec<Vec<Reading>> {
    let mut all = Vec::new();
    for s in series {
        all.push(collect(store, range(s.key(), i64::MIN, i64::MAX)).await);
    }
    all
}

/// Compacts once the reader thread of a dropped stream has let go of the database.
async fn compact_when_free(store: &EmbeddedStore) -> Option<Compaction> {
    // A guard against a hang (a reader that never lets go), not a performance bound; polled
    // as `dropping_a_stream_stops_its_reader` waits for the same reader.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match store.compact().await.unwrap() {
            Some(Compaction::Busy) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Some(Compaction::Busy) => panic!("the dropped stream's reader still holds the store"),
            done => return done,
        }
    }
}

/// The schema version the file records.
#[test]
fn a_second_open_is_refused_while_the_first_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path(), BIG);
    match EmbeddedStore::open(dir.path(), BIG) {
        Err(EmbeddedError::Locked { path }) => assert_eq!(path, dir.path().join(DB_FILE_NAME)),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("second open succeeded"),
    }
    drop(first);
    open(dir.path(), BIG);
}

#[test]
fn open_creates_the_directory_and_refuses_newer_or_foreign_files() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("nested/data");
    drop(open(&dir, BIG));
    assert!(dir.join(DB_FILE_NAME).exists());

    let db = redb::Database::create(dir.join(DB_FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META)
        .unwrap()
        .insert(META_SCHEMA_VERSION, super::FILE_SCHEMA_VERSION + 1)
        .unwrap();
    txn.commit().unwrap();
    drop(db);
    match EmbeddedStore::open(&dir, BIG) {
        Err(e @ EmbeddedError::NewerSchema { found, .. }) => {
            assert_eq!(found, super::FILE_SCHEMA_VERSION + 1);
            assert!(e.to_string().contains("newer"), "{e}");
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("newer schema accepted"),
    }

    let foreign = root.path().join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    let db = redb::Database::create(foreign.join(DB_FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(TableDefinition::<u64, u64>::new("other")).unwrap().insert(1, 1).unwrap();
    txn.commit().unwrap();
    drop(db);
    assert!(matches!(EmbeddedStore::open(&foreign, BIG), Err(EmbeddedError::NotBucketd { .. })));

    let garbage = root.path().join("garbage");
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join(DB_FILE_NAME), vec![7u8; 10_000]).unwrap();
    assert!(EmbeddedStore::open(&garbage, BIG).is_err());

    let file = root.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    assert!(matches!(EmbeddedStore::open(&file, BIG), Err(EmbeddedError::CreateDir { .. })));
}

#[tokio::test]
async fn dropping_a_stream_stops_its_reader() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    let s = meta("s", "m", &[]);
    let written: Vec<Reading> = (0..50_000).map(|i| reading(i * 100, i as f64)).collect();
    write_ok(&store, &batches(&s, &written)).await;
    let mut stream = store.readings(range("s", 0, i64::MAX));
    let first: Vec<Reading> = (&mut stream).take(10).map(|r| r.unwrap()).collect().await;
    assert_eq!(first, written[..10]);
    drop(stream);
    drop(store);
    // The reader thread owns a handle on the database; the file can be opened again only
    // once that thread has noticed the dropped stream and let go.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match EmbeddedStore::open(dir.path(), BIG) {
            Ok(_) => break,
            Err(EmbeddedError::Locked { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("reader did not stop: {e}"),
        }
    }
}

/// A chunk that fails to decode (in the stream, not in the reader) ends the range with an
/// error, after every reading that comes before it in the query's order.
#[tokio::test]
async fn a_corrupt_chunk_ends_the_range_after_the_readings_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    let s = meta("s", "m", &[]);
    let written: Vec<Reading> = (0..180).map(|i| reading(i * 60_000, i as f64)).collect();
    write_ok(&store, &batches(&s, &written)).await;
    let (at, mut bytes) = bucket_chunks(&store, "s", HOUR_MS, 0).remove(0);
    // Its summary still reads; its last reading does not.
    bytes.pop();
    put_chunk(&store, at, &bytes);

    let mut desc_before = written[120..].to_vec();
    desc_before.reverse();
    for (order, before) in [(Order::Asc, written[..60].to_vec()), (Order::Desc, desc_before)] {
        let got: Vec<_> =
            store.readings(RangeQuery { order, ..range("s", 0, i64::MAX) }).collect().await;
        let (last, ok) = got.split_last().expect("an error at least");
        assert!(matches!(last, Err(StoreError::Corrupt(_))), "{order:?}: {last:?}");
        let ok: Vec<Reading> = ok.iter().map(|r| r.as_ref().expect("reading").clone()).collect();
        assert_eq!(ok, before, "{order:?}");
    }
}

/// The chunks a series' bucket `(hour, seq)` lists, where each is and its bytes.
fn bucket_chunks(
    store: &EmbeddedStore,
    key: &str,
    hour: TimestampMs,
    seq: u32,
) -> Vec<(ChunkAt, Vec<u8>)> {
    let txn = store.db().begin_read().unwrap();
    let id = read::series_id_for_tests(&txn, key);
    let header = txn.open_table(BUCKETS).unwrap().get((id, hour, seq)).unwrap().unwrap();
    let header = BucketHeader::decode(header.value()).unwrap();
    let stored = chunks::open_read(&txn).unwrap();
    chunks::of_bucket(id, hour, seq, &header.writes)
        .map(|at| (at, stored.get(at).unwrap().expect("a listed chunk is stored").value().to_vec()))
        .collect()
}

fn put_chunk(store: &EmbeddedStore, at: ChunkAt, bytes: &[u8]) {
    let txn = store.db().begin_write().unwrap();
    chunks::open_write(&txn).unwrap().insert(at, bytes).unwrap();
    txn.commit().unwrap();
}

/// The reading count of each chunk of a series' bucket `(hour, seq)`.
fn chunk_counts(store: &EmbeddedStore, key: &str, hour: TimestampMs, seq: u32) -> Vec<u32> {
    bucket_chunks(store, key, hour, seq)
        .iter()
        .map(|(_, bytes)| codec::chunk_summary(bytes, hour).unwrap().count)
        .collect()
}

#[tokio::test]
async fn a_slow_sensors_writes_join_its_last_chunk_until_it_is_no_longer_small() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    let s = meta("s", "m", &[]);
    let readings: Vec<Reading> = (0..601).map(|i| reading(i * 1000, i as f64)).collect();
    // One reading a write, then ten (a slow sensor's flushes), then one as large as several
    // chunks (it joins a small last chunk too: the rule looks at the chunk), then one.
    let sizes = [vec![1; 100], vec![10; 20], vec![300], vec![1]].concat();
    let mut expected: Vec<u32> = Vec::new();
    let mut at = 0;
    for n in sizes {
        write_ok(&store, &batches(&s, &readings[at..at + n])).await;
        at += n;
        match expected.last_mut() {
            Some(last) if *last < write::SMALL_CHUNK => *last += n as u32,
            _ => expected.push(n as u32),
        }
    }
    assert!(expected.len() >= 4, "{expected:?}");
    assert_eq!(chunk_counts(&store, "s", 0, 0), expected);
    let hs = headers(&store, "s");
    assert_eq!(
        (hs[0].2.count, hs[0].2.chunks(), hs[0].2.sorted),
        (601, expected.len() as u32, true)
    );
    assert_eq!(collect(&store, range("s", 0, HOUR_MS)).await, readings);
}

#[tokio::test]
async fn a_write_after_a_small_corrupt_chunk_makes_a_chunk_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path(), BIG);
    let s = meta("s", "m", &[]);
    write_ok(&store, &batches(&s, &[reading(1, 1.0), reading(2, 2.0)])).await;
    let (at, mut bytes) = bucket_chunks(&store, "s", 0, 0).remove(0);
    bytes.pop();
    put_chunk(&store, at, &bytes);
    write_ok(&store, &batches(&s, &[reading(3, 3.0)])).await;
    let places: Vec<ChunkAt> = bucket_chunks(&store, "s", 0, 0).into_iter().map(|c| c.0).collect();
    assert_eq!(places.len(), 2);
    assert_eq!(places[0], at, "the corrupt chunk stays where it was");
    assert!(places[1].write > at.write, "{places:?}");
    assert_eq!(chunk_counts(&store, "s", 0, 0), [2, 1]);
    assert_eq!(headers(&store, "s")[0].2.chunks(), 2);
}

fn field_value() -> impl Strategy<Value = FieldValue> {
    prop_oneof![
        (-1000i64..1000).prop_map(|v| FieldValue::Float(v as f64 / 8.0)),
        (-50i64..50).prop_map(FieldValue::Int),
        any::<bool>().prop_map(FieldValue::Bool),
    ]
}

fn arb_reading() -> impl Strategy<Value = Reading> {
    (
        // Three hours, with many timestamps shared.
        (-HOUR_MS..2 * HOUR_MS).prop_map(|t| t - t.rem_euclid(600_000) + (t % 3)),
        proptest::collection::btree_map(
            prop_oneof![Just("a"), Just("b"), Just("c")],
            field_value(),
            1..3,
        ),
    )
        .prop_map(|(ts, fields)| Reading {
            ts,
            fields: fields.into_iter().map(|(k, v)| (k.into(), v)).collect(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any sequence of writes, under any caps, reads back as the model says.
    #[test]
    fn store_matches_model(
        writes in proptest::collection::vec(proptest::collection::vec(arb_reading(), 1..40), 1..6),
        max_readings in 1u32..12,
        from in -2 * HOUR_MS..3 * HOUR_MS,
        len in 0i64..4 * HOUR_MS,
        desc in any::<bool>(),
        limit in proptest::option::of(0usize..30),
        seal_after in proptest::collection::vec(any::<bool>(), 6),
        seal_budget in 1usize..6,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let store = open(dir.path(), BucketLimits { max_readings, max_bytes: 1 << 20 });
            let s = meta("s", "m", &[]);
            let mut written = Vec::new();
            for (i, w) in writes.iter().enumerate() {
                let w = batches(&s, w);
                write_ok(&store, &w).await;
                // As the batch holds them: each reading's fields in the order the batch first
                // met their names.
                written.extend(w.iter().flat_map(Batch::readings));
                if seal_after[i] {
                    // Hours up to the second are over; the third is not.
                    seal_all(&store, 2 * HOUR_MS + seal::SEAL_AFTER_MS, seal_budget).await;
                }
            }
            for (from, to) in [(from, from + len), (i64::MIN, i64::MAX)] {
                let order = if desc { Order::Desc } else { Order::Asc };
                let q = RangeQuery { sensor: "s".into(), from, to, order, limit };
                let got = by_name(collect(&store, q.clone()).await);
                prop_assert_eq!(got, by_name(model_range(&written, &q)));
            }
            // Several series in one call: each as its stream would begin, an unknown one empty.
            let latest = store.latest_of(vec!["none".into(), "s".into()], (from, from + len));
            let q = RangeQuery {
                sensor: "s".into(),
                from,
                to: from + len,
                order: Order::Desc,
                limit: Some(1),
            };
            let want = collect(&store, q).await.into_iter().next();
            prop_assert_eq!(latest.await.unwrap(), vec![None, want]);
            for step_ms in [HOUR_MS, 2 * HOUR_MS, 600_000] {
                let q = RollupQuery {
                    sensor: "s".into(),
                    from: hour_start(from),
                    to: hour_start(from) + 3 * HOUR_MS,
                    step_ms,
                    fields: None,
                };
                let want = model_rollup(&written, &q);
                assert_rollups_match(&store.rollups(q.clone()).await.unwrap(), &want);
                let counts = store.rollup_steps(q.clone(), Need::COUNT).await.unwrap();
                prop_assert_eq!(step_counts(counts), counts_of(&want));
                let other = RollupQuery { sensor: "none".into(), ..q.clone() };
                let both = store.rollup_steps_of(vec![other, q.clone()], Need::ALL).await.unwrap();
                let alone = store.rollup_steps(q, Need::ALL).await.unwrap();
                prop_assert_eq!(both, vec![RollupSteps::default(), alone]);
            }
            for (_, _, h) in headers(&store, "s") {
                prop_assert!(h.count >= 1 && h.count <= max_readings);
            }
            Ok(())
        })?;
    }
}

/// Seals until the pass has looked at every chunk, `budget` chunks a step.
async fn seal_all(store: &EmbeddedStore, now: TimestampMs, budget: usize) -> SealReport {
    let mut total = SealReport::default();
    for _ in 0..10_000 {
        let step = store.seal(now, budget).await.unwrap().expect("the embedded store seals");
        total.buckets += step.buckets;
        total.chunks += step.chunks;
        total.left = step.left;
        if step.done {
            total.done = true;
            return total;
        }
    }
    panic!("the seal pass never ended")
}

/// `(field, step start, count)` of rollup steps.
fn step_counts(steps: RollupSteps) -> Vec<(String, TimestampMs, u64)> {
    let mut out: Vec<_> = steps
        .fields
        .into_iter()
        .flat_map(|(name, steps)| steps.into_iter().map(move |(t, s)| (name.clone(), t, s.count)))
        .collect();
    out.sort();
    out
}

fn counts_of(
    rows: &BTreeMap<TimestampMs, BTreeMap<String, FieldStats>>,
) -> Vec<(String, TimestampMs, u64)> {
    let mut out: Vec<_> = rows
        .iter()
        .flat_map(|(t, fields)| fields.iter().map(|(name, s)| (name.clone(), *t, s.count)))
        .collect();
    out.sort();
    out
}
