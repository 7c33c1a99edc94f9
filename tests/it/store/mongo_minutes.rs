//! MongoDB's minute statistics: rollups of whole minutes read them instead of the readings
//! (counted on the stand-in), answer as the readings would with the unflushed readings merged
//! in, and buckets written before them are still answered from their readings.
//!
//! The counting cases always run on the stand-in (it counts what it returns and unwinds); the
//! others also run against a real server when `BUCKETD_TEST_MONGODB_URI` is set.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bson::{Document, doc};
use bucketd::model::{FieldValue, HOUR_MS, Reading};
use bucketd::store::memory::MemoryStore;
use bucketd::store::mongo::{COLLECTION, MINUTE_STATS_BUCKET_VERSION, document as d};
use bucketd::store::{BucketLimits, FieldStats, Store};
use futures::TryStreamExt;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::mongo::{connect, encoded};
use super::suite::{MINUTE, T0, batches, expected_rollups, reading, rollups, series, write_ok};
use crate::support::mongo_standin::{MongoBackend, StandInOptions};
use crate::support::query::{FakeUnflushed, app_with, get_json};

/// What the stand-in has returned through cursors, and how many readings it has unwound.
async fn counted(backend: &MongoBackend) -> (u64, u64) {
    let client = mongodb::Client::with_uri_str(&backend.uri).await.expect("client");
    let reply =
        client.database("admin").run_command(doc! {"bridgeStats": 1}).await.expect("bridgeStats");
    let returned = reply.get("cursorDocuments").and_then(d::number).expect("cursorDocuments");
    let unwound = reply
        .get_document("unwound")
        .ok()
        .and_then(|u| u.get(format!("${}", d::READINGS)))
        .and_then(d::number)
        .unwrap_or(0.0);
    (returned as u64, unwound as u64)
}

/// A sensor writing `per_minute` readings a minute for three hours, two numeric fields and a
/// string.
fn steady(per_minute: i64) -> Vec<Reading> {
    (0..180 * per_minute)
        .map(|i| {
            reading(
                T0 + i * MINUTE / per_minute,
                &[
                    ("a", FieldValue::Float((i % 17) as f64 * 0.25)),
                    ("b", FieldValue::Int(i % 5)),
                    ("note", FieldValue::Str("x".into())),
                ],
            )
        })
        .collect()
}

/// A Grafana panel over three hours ending at a "now" off the minute reads a document per
/// window and field, and the readings of the two partial minutes at its edges: the same
/// whether the sensor writes one reading a minute or ten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minute_windows_read_statistics_not_readings() {
    let backend = MongoBackend::standin(StandInOptions::default());
    let store = connect(&backend, BucketLimits::default()).await;
    let sensors = [("sparse", steady(1)), ("dense", steady(10))];
    for (name, readings) in &sensors {
        write_ok(&store, &batches(&series(name, "m", &[]), readings)).await;
    }
    let (from, to) = (T0 + 1_234, T0 + 3 * HOUR_MS - 4_321);
    let in_edges = |r: &&Reading| {
        (from..T0 + MINUTE).contains(&r.ts) || (T0 + 3 * HOUR_MS - MINUTE..to).contains(&r.ts)
    };
    for step in [MINUTE, 5 * MINUTE, 7 * MINUTE, HOUR_MS] {
        let windows = ((to - 1).div_euclid(step) - from.div_euclid(step) + 1) as u64;
        let mut read = Vec::new();
        for (name, readings) in &sensors {
            let before = counted(&backend).await;
            let rows = rollups(&store, name, from, to, step, None).await;
            let after = counted(&backend).await;
            assert_eq!(rows, expected_rollups(readings, from, to, step, None), "{name}, {step}");
            let (returned, unwound) = (after.0 - before.0, after.1 - before.1);
            // Two numeric fields: a document per window and field from the minutes (or, for
            // whole hours, per bucket), and per field from each edge's readings.
            assert!(returned <= 2 * (windows + 2), "{name}, step {step}: {returned} documents");
            assert_eq!(
                unwound,
                readings.iter().filter(in_edges).count() as u64,
                "{name}, step {step}: only the edges' readings are unwound"
            );
            read.push(returned);
        }
        // The sparse sensor has no reading in the first edge; otherwise they read alike.
        assert!(
            read[0] <= read[1] && read[1] <= read[0] + 2,
            "step {step}: ten times the readings, {read:?} documents"
        );
    }
}

/// A bucket written before minute statistics (here a schema-3 bucket, as the previous release
/// wrote it) shares its hour with a new one: whole-minute windows take the old bucket's
/// minutes from its readings and the new one's from its statistics.
#[tokio::test]
async fn buckets_without_minute_statistics_answer_from_their_readings() {
    let backend = MongoBackend::start();
    let store = connect(&backend, BucketLimits::default()).await;
    let s = series("old,sensor=a", "old", &[("sensor", "a")]);
    let value = |i: i64| FieldValue::Float(i as f64 * 0.5);
    let old: Vec<Reading> = (0..40).map(|i| reading(T0 + i * 45_000, &[("v", value(i))])).collect();
    let (r, bytes) = encoded(&old);
    let mut stats = FieldStats::of(old[0].ts, 0.0);
    for r in &old[1..] {
        stats.push(r.ts, r.fields[0].1.as_f64().unwrap());
    }
    let point = |(t, v): (i64, f64)| doc! {d::POINT_TIME: d::date(t), d::POINT_VALUE: v};
    let v3 = doc! {
        d::SENSOR: s.key(), d::VERSION: 3, d::START: d::date(T0), d::END: d::date(T0 + HOUR_MS),
        d::MEASUREMENT: "old", d::TAGS: [{"k": "sensor", "v": "a"}],
        d::COUNT: old.len() as i64, d::BYTES: bytes as i64,
        d::FIRST: d::date(old[0].ts), d::LAST: d::date(old[old.len() - 1].ts),
        d::STATS: {"v": {
            "min": stats.min, "max": stats.max, "sum": stats.sum, "n": stats.count as i64,
            "first": point(stats.first.unwrap()), "last": point(stats.last.unwrap()),
        }},
        d::READINGS: r,
    };
    let buckets = store.database().collection::<Document>(COLLECTION);
    buckets.insert_one(v3).await.unwrap();
    // The new bucketd writes the same hour, and the next, into buckets of its own.
    let new: Vec<Reading> =
        (0..60).map(|i| reading(T0 + 20 * MINUTE + i * 100_000 + 7, &[("v", value(-i))])).collect();
    write_ok(&store, &batches(&s, &new)).await;
    let docs: Vec<Document> =
        buckets.find(doc! {d::SENSOR: s.key()}).await.unwrap().try_collect().await.unwrap();
    let of_version = |v: f64| -> Vec<f64> {
        docs.iter()
            .filter(|b| b.get(d::VERSION).and_then(d::number) == Some(v))
            .filter_map(|b| b.get(d::COUNT).and_then(d::number))
            .collect()
    };
    assert_eq!(of_version(3.0), vec![old.len() as f64], "the old bucket is left as it was");
    assert_eq!(of_version(f64::from(MINUTE_STATS_BUCKET_VERSION)).iter().sum::<f64>(), 60.0);

    let all: Vec<Reading> = old.iter().chain(&new).cloned().collect();
    for (from, to, step) in [
        (T0, T0 + 2 * HOUR_MS, 10 * MINUTE),
        (T0 + 500, T0 + 2 * HOUR_MS - 500, 5 * MINUTE),
        (T0 + 500, T0 + 2 * HOUR_MS, HOUR_MS),
    ] {
        assert_eq!(
            rollups(&store, s.key(), from, to, step, None).await,
            expected_rollups(&all, from, to, step, None),
            "[{from}, {to}) by {step}"
        );
    }
}

/// Readings at random times, some stored in random flushes and some still unflushed, then a
/// rollup of whole-minute (or whole-hour) steps over a random range through the query API:
/// the same answer as a store that holds every reading and computes from them.
#[test]
fn whole_minute_rollups_equal_the_readings_with_unflushed_merged() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let backend = MongoBackend::start();
    let limits = BucketLimits { max_readings: 6, max_bytes: 1 << 20 };
    let store: Arc<dyn Store> = Arc::new(rt.block_on(connect(&backend, limits)));
    let next_sensor = AtomicU32::new(0);

    let point = (0..3 * HOUR_MS / 1_000, -8..8i32, 1..4u8);
    let case = (
        proptest::collection::vec(point, 1..40),
        1..6usize,
        0..10usize,
        prop::sample::select(vec![1, 2, 5, 7, 10, 30, 60, 120]),
        (0..90i64, 0..3i64, 0..90i64, 0..3i64),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(Config { cases: 32, ..Config::default() });
    let outcome = runner.run(&case, |(points, flushes, unflushed, minutes, edges, some_fields)| {
        let name = format!("prop-{}", next_sensor.fetch_add(1, Ordering::Relaxed));
        let s = series(&name, "m", &[]);
        let readings: Vec<Reading> = points
            .iter()
            .map(|&(sec, v, mask)| {
                let mut fields = Vec::new();
                if mask & 1 != 0 {
                    fields.push(("a", FieldValue::Float(f64::from(v) * 0.25)));
                }
                if mask & 2 != 0 {
                    fields.push(("b", FieldValue::Int(i64::from(v))));
                }
                // Seconds and a few milliseconds: equal times and minute edges both occur.
                reading(T0 + sec * 1_000 + i64::from(v.rem_euclid(3)), &fields)
            })
            .collect();
        let stored = readings.len() - unflushed.min(readings.len() - 1);
        let step = minutes * MINUTE;
        // Whole minutes, or a few milliseconds past them.
        let (a, a_ms, b, b_ms) = edges;
        let (from, to) = (T0 + a * MINUTE + a_ms * 777, T0 + 3 * HOUR_MS - b * MINUTE - b_ms * 333);
        let fields = if some_fields { "&fields=a" } else { "" };
        let uri = format!("/api/v1/rollups?sensor={name}&from={from}&to={to}&step={step}{fields}");

        let (got, want) = rt.block_on(async {
            let chunk = stored.div_ceil(flushes);
            for part in readings[..stored].chunks(chunk.max(1)) {
                write_ok(&*store, &batches(&s, part)).await;
            }
            let unflushed = Arc::new(FakeUnflushed::default());
            for r in &readings[stored..] {
                unflushed.push(&s, r.clone());
            }
            let mongo = app_with(Arc::new(MemoryStore::new(limits)), store.clone(), unflushed);
            let model = Arc::new(MemoryStore::new(limits));
            write_ok(&*model, &batches(&s, &readings)).await;
            let model = app_with(model.clone(), model, Arc::new(FakeUnflushed::default()));
            (get_json(&mongo.router, &uri).await, get_json(&model.router, &uri).await)
        });
        prop_assert_eq!(got, want, "{}", uri);
        Ok(())
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
