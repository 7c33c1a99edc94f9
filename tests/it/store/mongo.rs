//! The MongoDB store against the stand-in (mockupdb + mongomock, started per test), or
//! against a real MongoDB 7.0+ when `BUCKETD_TEST_MONGODB_URI` is set: the shared Store
//! suite, then what only MongoDB has (the document shape, indexes, the 16 MiB limit, command
//! splitting, write-error mapping).
//!
//! `cargo test --test it store::mongo`; the round-trip measurements are in
//! `benches/mongo_write_path.rs` (`loadtest/README.md`).

use std::sync::Arc;
use std::time::Duration;

use bson::{Bson, doc, oid::ObjectId};
use bucketd::model::{Batch, FieldValue, HOUR_MS, Reading};
use bucketd::store::mongo::{
    COLLECTION, MINUTE_STATS_BUCKET_VERSION, MongoConfig, MongoStore, document as d, hours,
};
use bucketd::store::{BucketLimits, Store, StoreError};
use futures::TryStreamExt;

use super::suite::{
    Capabilities, Fixture, T0, W, batches, expected_range, range, read, reading, series, write_ok,
};
use crate::support::mongo_standin::{MongoBackend, StandInOptions};

const CAPS: Capabilities = Capabilities {
    rejects_oversized_reading: true,
    retention_pass: true,
    rollup_retention_by_day: true,
};

pub(super) async fn connect(backend: &MongoBackend, limits: BucketLimits) -> MongoStore {
    MongoStore::connect(&backend.uri, &backend.database, limits, None)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", backend.uri))
}

/// Readings as an old bucketd stored them in `r`, with their byte estimate.
pub(super) fn encoded(readings: &[Reading]) -> (Vec<Bson>, u64) {
    let encoded: Vec<_> = readings.iter().map(d::encode_reading).collect();
    let bytes = encoded.iter().map(|e| e.size).sum();
    let docs = encoded
        .iter()
        .map(|e| Bson::Document(bson::from_slice(e.doc.as_bytes()).unwrap()))
        .collect();
    (docs, bytes)
}

/// The suite's stores keep hour statistics (a retention is configured): every case then
/// runs through that write path too. The retention is long, so that only the cases that run
/// a retention pass (which applies its own) ever see an expired hour.
async fn make_store(limits: BucketLimits) -> Fixture {
    let backend = MongoBackend::start();
    let mut config = MongoConfig::new(backend.uri.as_str(), backend.database.as_str());
    config.limits = limits;
    config.retention = Some(Duration::from_secs(1_000_000 * 86_400));
    let store = MongoStore::connect_with(config)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", backend.uri));
    Fixture::new(Arc::new(store), CAPS, backend)
}

super::suite::store_suite!(make_store);

async fn raw_buckets(store: &MongoStore, sensor: &str) -> Vec<bson::Document> {
    store
        .database()
        .collection::<bson::Document>(COLLECTION)
        .find(doc! {d::SENSOR: sensor})
        .sort(doc! {d::ID: 1})
        .await
        .expect("find buckets")
        .try_collect()
        .await
        .expect("read buckets")
}

#[tokio::test]
async fn bucket_document_has_the_documented_shape() {
    let backend = MongoBackend::start();
    let store = connect(&backend, BucketLimits::default()).await;
    let s = series("shape", "air", &[("site", "a.b"), ("$k", "v")]);
    let readings = vec![
        Reading {
            ts: T0 + 10,
            fields: smallvec::smallvec![
                ("a.b".into(), FieldValue::Float(1.5)),
                ("$n".into(), FieldValue::Int(4)),
                ("msg".into(), FieldValue::Str("hi".into())),
            ],
        },
        Reading {
            ts: T0 + 5,
            fields: smallvec::smallvec![
                ("a.b".into(), FieldValue::Float(-2.0)),
                ("u".into(), FieldValue::UInt(u64::MAX)),
            ],
        },
    ];
    write_ok(&store, &batches(&s, &readings)).await;
    let docs = raw_buckets(&store, "shape").await;
    assert_eq!(docs.len(), 1);
    let b = &docs[0];
    let mut keys: Vec<&str> = b.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "_id", "bytes", "end", "first", "last", "m", "ms", "n", "r", "s", "start", "stats",
            "tags", "v"
        ]
    );
    assert!(matches!(b.get(d::ID), Some(Bson::ObjectId(_))));
    assert_eq!(b.get_str(d::SENSOR).unwrap(), "shape");
    assert_eq!(b.get_str(d::MEASUREMENT).unwrap(), "air");
    assert_eq!(b.get(d::VERSION).and_then(d::number), Some(f64::from(MINUTE_STATS_BUCKET_VERSION)));
    assert_eq!(b.get_datetime(d::START).unwrap().timestamp_millis(), T0);
    assert_eq!(b.get_datetime(d::END).unwrap().timestamp_millis(), T0 + HOUR_MS);
    assert_eq!(b.get_datetime(d::FIRST).unwrap().timestamp_millis(), T0 + 5);
    assert_eq!(b.get_datetime(d::LAST).unwrap().timestamp_millis(), T0 + 10);
    assert_eq!(b.get(d::COUNT).and_then(d::number), Some(2.0));
    let expected_bytes: u64 = readings.iter().map(|r| d::encode_reading(r).size).sum();
    assert_eq!(b.get(d::BYTES).and_then(d::number), Some(expected_bytes as f64));
    assert_eq!(
        b.get_array(d::TAGS).unwrap(),
        &vec![
            Bson::Document(doc! {"k": "$k", "v": "v"}),
            Bson::Document(doc! {"k": "site", "v": "a.b"})
        ]
    );
    let stats = b.get_document(d::STATS).unwrap();
    let mut stat_keys: Vec<&str> = stats.keys().map(String::as_str).collect();
    stat_keys.sort();
    assert_eq!(stat_keys, vec!["%24n", "a%2Eb", "u"], "strings have no statistics");
    let ab = d::decode_stats(stats.get_document("a%2Eb").unwrap()).unwrap();
    assert_eq!((ab.count, ab.min, ab.max, ab.sum), (2, -2.0, 1.5, -0.5));
    assert_eq!((ab.first, ab.last), (Some((T0 + 5, -2.0)), Some((T0 + 10, 1.5))));
    // First and last are `{t: Date, v: double}`, time first (documents compare in key order).
    let ab = stats.get_document("a%2Eb").unwrap();
    for (key, t, v) in [(d::STAT_FIRST, T0 + 5, -2.0), (d::STAT_LAST, T0 + 10, 1.5)] {
        let point = ab.get_document(key).unwrap();
        assert_eq!(point.keys().collect::<Vec<_>>(), vec![d::POINT_TIME, d::POINT_VALUE]);
        assert_eq!(point.get_datetime(d::POINT_TIME).unwrap().timestamp_millis(), t);
        assert_eq!(point.get(d::POINT_VALUE), Some(&Bson::Double(v)));
    }
    let n = d::decode_stats(stats.get_document("%24n").unwrap()).unwrap();
    assert_eq!((n.first, n.last), (Some((T0 + 10, 4.0)), Some((T0 + 10, 4.0))));
    // Both readings are in the hour's first minute: its statistics are the hour's.
    let minutes = b.get_document(d::MINUTE_STATS).unwrap();
    let mut minute_keys: Vec<&str> = minutes.keys().map(String::as_str).collect();
    minute_keys.sort();
    assert_eq!(minute_keys, stat_keys);
    for key in stat_keys {
        let minute = minutes.get_document(key).unwrap();
        assert_eq!(minute.keys().collect::<Vec<_>>(), vec!["00"]);
        assert_eq!(
            d::decode_stats(minute.get_document("00").unwrap()).unwrap(),
            d::decode_stats(stats.get_document(key).unwrap()).unwrap()
        );
    }
    let u = stats.get_document("u").unwrap();
    assert_eq!(u.get(d::STAT_MAX).and_then(d::number), Some(u64::MAX as f64));
    let r = b.get_array(d::READINGS).unwrap();
    assert_eq!(r.len(), 2);
    let first = r[0].as_document().unwrap();
    assert_eq!(first.get_datetime(d::TIME).unwrap().timestamp_millis(), T0 + 10);
    let f = first.get_document(d::FIELDS).unwrap();
    assert_eq!(f.get("a%2Eb"), Some(&Bson::Double(1.5)));
    assert_eq!(f.get("%24n").and_then(d::number), Some(4.0));
    assert_eq!(f.get("msg"), Some(&Bson::String("hi".into())));
    let second = r[1].as_document().unwrap().get_document(d::FIELDS).unwrap();
    assert_eq!(
        second.get("u"),
        Some(&Bson::Double(u64::MAX as f64)),
        "u64 above i64::MAX is a double"
    );
}

/// Buckets the release before databases wrote (`tests/data/before-databases/`, dumped from
/// the stand-in) are the default database's: a server on them reads and lists them without a
/// `db`, adds to the same series, and another database sees none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_from_before_databases_are_the_default_databases() {
    use crate::support::server::TestServer;
    let backend = MongoBackend::start();
    let store = connect(&backend, BucketLimits::default()).await;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/before-databases/mongo-buckets.json");
    let dumped: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let docs: Vec<bson::Document> = dumped
        .into_iter()
        .map(|v| match Bson::try_from(v).expect("extended JSON") {
            Bson::Document(d) => d,
            other => panic!("not a document: {other:?}"),
        })
        .collect();
    assert_eq!(docs.len(), 3);
    store.database().collection::<bson::Document>(COLLECTION).insert_many(docs).await.unwrap();

    let server = TestServer::start(Arc::new(store), &["--flush-interval", "100ms"]).await;
    let query = |db: Option<&'static str>, q: &'static str| {
        let mut params = vec![("q", q), ("epoch", "ms")];
        params.extend(db.map(|db| ("db", db)));
        let url = reqwest::Url::parse_with_params(&server.url("/query"), params).unwrap();
        let client = server.client.clone();
        async move {
            let body: serde_json::Value =
                client.post(url).send().await.unwrap().json().await.unwrap();
            body["results"][0].clone()
        }
    };
    let count = "SELECT count(v) FROM upg WHERE time >= '2026-01-01T00:00:00Z' AND time < '2026-01-01T01:00:00Z'";
    assert_eq!(query(None, count).await["series"][0]["values"][0][1], 40);
    let listed: serde_json::Value =
        server.get("/api/v1/sensors?db=bucketd").await.json().await.unwrap();
    let keys: Vec<&str> =
        listed["sensors"].as_array().unwrap().iter().map(|s| s["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["boiler", "upg,sensor=a", "upg,sensor=b"]);
    // A new reading of an old series joins it.
    let response =
        server.post("/write?precision=ms", "text/plain", "upg,sensor=a v=99 1767225630000").await;
    assert_eq!(response.status().as_u16(), 204);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while query(None, count).await["series"][0]["values"][0][1] != 41 {
        assert!(std::time::Instant::now() < deadline, "the new reading never counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(query(None, "CREATE DATABASE other").await.get("error").is_none());
    assert!(query(Some("other"), count).await.get("series").is_none());
    assert!(query(Some("other"), "SHOW MEASUREMENTS").await.get("series").is_none());
    server.shutdown().await;
}

/// A database other than the default shows in its buckets (`db`, and the prefix of `s`);
/// buckets of the default database are shaped as before databases existed.
#[tokio::test]
async fn a_databases_buckets_name_it() {
    let backend = MongoBackend::start();
    let store = connect(&backend, BucketLimits::default()).await;
    let telegraf = bucketd::databases::Database::named("telegraf").unwrap();
    let key = telegraf.qualify("cpu,host=a");
    let r = |ts| Reading { ts, fields: smallvec::smallvec![("v".into(), FieldValue::Float(1.0))] };
    write_ok(&store, &batches(&series(&key, "cpu", &[("host", "a")]), &[r(T0)])).await;
    write_ok(&store, &batches(&series("cpu,host=a", "cpu", &[("host", "a")]), &[r(T0)])).await;
    let named = raw_buckets(&store, &key).await;
    assert_eq!(named.len(), 1);
    assert_eq!(named[0].get_str(d::DATABASE).unwrap(), "telegraf");
    let default = raw_buckets(&store, "cpu,host=a").await;
    assert_eq!(default.len(), 1);
    assert!(default[0].get(d::DATABASE).is_none(), "{:?}", default[0]);
}

#[tokio::test]
async fn indexes_are_created_idempotently_and_retention_is_a_ttl_index() {
    let backend = MongoBackend::start();
    let names = |store: MongoStore| async move {
        let mut names = store
            .database()
            .collection::<bson::Document>(COLLECTION)
            .list_index_names()
            .await
            .expect("list indexes");
        names.sort();
        names
    };
    let store = connect(&backend, BucketLimits::default()).await;
    assert_eq!(names(store).await, vec!["_id_", "m_s", "s_start", "tags"]);
    let again = MongoStore::connect(
        &backend.uri,
        &backend.database,
        BucketLimits::default(),
        Some(Duration::from_secs(86_400)),
    )
    .await
    .expect("second connect");
    assert_eq!(names(again).await, vec!["_id_", "end_ttl", "m_s", "s_start", "tags"]);
    let without = connect(&backend, BucketLimits::default()).await;
    assert_eq!(names(without).await, vec!["_id_", "m_s", "s_start", "tags"]);
}

/// A bucket that is larger than the store estimates (here: padded by hand, as a bucket
/// written under other caps or by another version could be) makes MongoDB refuse the update
/// with "too large"; the batch goes to a new bucket and nothing is lost.
#[tokio::test]
async fn a_bucket_mongodb_refuses_to_grow_spills_into_a_new_one() {
    let backend = MongoBackend::start();
    let store = connect(&backend, BucketLimits::default()).await;
    let buckets = store.database().collection::<bson::Document>(COLLECTION);
    let padded = ObjectId::new();
    buckets
        .insert_one(doc! {
            d::ID: padded, d::SENSOR: "padded", d::START: d::date(T0), d::VERSION: MINUTE_STATS_BUCKET_VERSION,
            d::COUNT: 0_i64, d::BYTES: 0_i64, d::READINGS: [],
            "pad": "p".repeat(16 * 1024 * 1024 - 40 * 1024),
        })
        .await
        .expect("insert padded bucket");
    let s = series("padded", "m", &[]);
    let readings: Vec<Reading> = (0..20)
        .map(|i| {
            reading(
                T0 + i,
                &[("msg", FieldValue::Str("m".repeat(4000))), ("v", FieldValue::Int(i))],
            )
        })
        .collect();
    let reports = write_ok(&store, &batches(&s, &readings)).await;
    assert_eq!(reports[0].buckets_created, 1);
    let docs = raw_buckets(&store, "padded").await;
    assert_eq!(docs.len(), 2);
    let untouched = docs.iter().find(|b| b.get_object_id(d::ID).unwrap() == padded).unwrap();
    assert!(
        untouched.get_array(d::READINGS).unwrap().is_empty(),
        "the refused update left no trace"
    );
    assert_eq!(
        read(&store, range("padded", T0, T0 + HOUR_MS)).await,
        expected_range(&readings, T0, T0 + HOUR_MS)
    );
}

#[tokio::test]
async fn write_errors_map_to_their_batches() {
    let backend = MongoBackend::standin(StandInOptions { faults: true, ..Default::default() });
    let store = connect(&backend, BucketLimits::default()).await;
    let one =
        |key: &str| batches(&series(key, "m", &[]), &[reading(T0, &[("v", FieldValue::Int(1))])]);
    let all: Vec<Batch> = [
        "ok-1",
        "fault:code:112:conflict",
        "ok-2",
        "fault:code:2:bad",
        "fault:code:17419:x",
        "ok-3",
    ]
    .iter()
    .flat_map(|k| one(k))
    .collect();
    let results = store.write(W, &all).await;
    assert!(results[0].is_ok() && results[2].is_ok() && results[5].is_ok(), "{results:?}");
    assert!(matches!(results[1], Err(StoreError::Unavailable(_))), "{:?}", results[1]);
    assert!(matches!(results[3], Err(StoreError::Rejected(_))), "{:?}", results[3]);
    // "Too large" for a single reading even in a new bucket: refused for good.
    assert!(matches!(results[4], Err(StoreError::Rejected(_))), "{:?}", results[4]);
    for key in ["ok-1", "ok-2", "ok-3"] {
        assert_eq!(read(&store, range(key, T0, T0 + 1)).await.len(), 1, "{key}");
    }
}

#[tokio::test]
async fn a_network_error_fails_every_batch_of_the_command_and_the_next_write_works() {
    let backend = MongoBackend::standin(StandInOptions { faults: true, ..Default::default() });
    let store = connect(&backend, BucketLimits::default()).await;
    let one =
        |key: &str| batches(&series(key, "m", &[]), &[reading(T0, &[("v", FieldValue::Int(1))])]);
    let all: Vec<Batch> = ["a", "fault:hangup", "b"].iter().flat_map(|k| one(k)).collect();
    let results = store.write(W, &all).await;
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(e @ StoreError::Unavailable(_)) if e.is_retriable())),
        "{results:?}"
    );
    write_ok(&store, &one("a")).await;
    assert_eq!(read(&store, range("a", T0, T0 + 1)).await.len(), 1);
}

/// Closing (the last step of a shutdown) ends the client: it answers nothing after it.
#[tokio::test]
async fn close_shuts_the_client_down() {
    let backend = MongoBackend::start();
    let store = connect(&backend, BucketLimits::default()).await;
    store.ping().await.expect("ping before the close");
    tokio::time::timeout(Duration::from_secs(60), store.close()).await.expect("closed within 60 s");
    assert!(store.ping().await.is_err(), "a closed store still answers a ping");
}

async fn refused_commands(backend: &MongoBackend) -> i64 {
    let client = mongodb::Client::with_uri_str(&backend.uri).await.expect("client");
    let reply =
        client.database("admin").run_command(doc! {"bridgeStats": 1}).await.expect("bridgeStats");
    reply.get("refusedCommands").and_then(d::number).expect("refusedCommands") as i64
}

/// Commands stay within the statement count and byte size the server's `hello` reports.
#[tokio::test]
async fn commands_are_split_within_the_servers_limits() {
    let backend = MongoBackend::standin(StandInOptions {
        max_bson: Some(1024 * 1024),
        max_write_batch: Some(10),
        ..Default::default()
    });
    let store = connect(&backend, BucketLimits::default()).await;
    let sensors: Vec<Batch> = (0..25)
        .flat_map(|i| {
            batches(
                &series(&format!("count-{i:02}"), "m", &[]),
                &[reading(T0, &[("v", FieldValue::Int(i))])],
            )
        })
        .collect();
    write_ok(&store, &sensors).await;
    assert_eq!(store.write_round_trips().commands, 3, "25 statements, at most 10 per command");

    let before = store.write_round_trips();
    let blob = "y".repeat(30 * 1024);
    let big: Vec<Batch> = (0..12)
        .flat_map(|i| {
            let readings: Vec<Reading> = (0..4)
                .map(|j| reading(T0 + j, &[("blob", FieldValue::Str(blob.clone()))]))
                .collect();
            batches(&series(&format!("bytes-{i}"), "m", &[]), &readings)
        })
        .collect();
    write_ok(&store, &big).await;
    let after = store.write_round_trips();
    // 12 statements of ~120 KiB: at most 8 per MiB, so at least 2 commands, none refused.
    assert_eq!(after.statements - before.statements, 12);
    assert!(after.commands - before.commands >= 2, "{before:?} -> {after:?}");
    assert_eq!(refused_commands(&backend).await, 0);
    for i in 0..12 {
        assert_eq!(read(&store, range(&format!("bytes-{i}"), T0, T0 + HOUR_MS)).await.len(), 4);
    }
}

/// At the server's default limits a flush is one `update` command with one statement per
/// (sensor, hour) batch, however many readings a batch holds: 100 sensors flushed three times at
/// 1, 10 and 60 readings a batch. (What `benches/mongo_write_path.rs` counts on the wire and
/// scales to 10,000 sensors.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_is_one_update_command_with_one_statement_per_batch() {
    const SENSORS: i64 = 100;
    const FLUSHES: i64 = 3;
    let backend = MongoBackend::standin(StandInOptions::default());
    let store = connect(&backend, BucketLimits::default()).await;
    for readings_per_batch in [1, 10, 60] {
        let hour = T0 + readings_per_batch * HOUR_MS;
        for flush in 0..FLUSHES {
            let start = hour + flush * readings_per_batch * 1000;
            let sensors: Vec<Batch> = (0..SENSORS)
                .flat_map(|i| {
                    let readings: Vec<Reading> = (0..readings_per_batch)
                        .map(|k| reading(start + k * 1000, &[("v", FieldValue::Int(i + k))]))
                        .collect();
                    batches(&series(&format!("flush-{i:03}"), "m", &[]), &readings)
                })
                .collect();
            assert_eq!(sensors.len(), SENSORS as usize, "one batch per sensor");
            let before = store.write_round_trips();
            write_ok(&store, &sensors).await;
            let after = store.write_round_trips();
            assert_eq!(
                (after.commands - before.commands, after.statements - before.statements),
                (1, SENSORS as u64),
                "flush {flush} of {readings_per_batch} reading(s) a batch"
            );
        }
    }
}

/// Schema 1 → 2: buckets a schema-1 bucketd wrote (`v: 1`, one `w` for every writer) are read
/// as they are; their marks answer `schema1_high_water` (for replaying a schema-1 log) and never
/// a writer's own; new writes go to schema-2 buckets and leave the old ones untouched.
#[tokio::test]
async fn schema1_buckets_are_read_and_their_mark_kept_apart() {
    let backend = MongoBackend::start();
    let store = connect(&backend, BucketLimits::default()).await;
    let s = series("old,sensor=a", "old", &[("sensor", "a")]);
    let old = [
        reading(T0 + 1, &[("v", FieldValue::Float(1.0))]),
        reading(T0 + 2, &[("v", FieldValue::Float(2.0))]),
    ];
    let (r, bytes) = encoded(&old);
    let v1 = doc! {
        d::SENSOR: &s.key(), d::VERSION: 1, d::START: d::date(T0), d::END: d::date(T0 + HOUR_MS),
        d::MEASUREMENT: "old", d::TAGS: [{"k": "sensor", "v": "a"}],
        d::COUNT: 2, d::BYTES: bytes as i64, d::FIRST: d::date(T0 + 1), d::LAST: d::date(T0 + 2),
        d::STATS: {"v": {"min": 1.0, "max": 2.0, "sum": 3.0, "n": 2}},
        d::HIGH_WATER: 500_i64, d::READINGS: r,
    };
    store.database().collection::<bson::Document>(COLLECTION).insert_one(v1).await.unwrap();

    let keys = vec![(s.key().to_owned(), T0)];
    assert_eq!(store.schema1_high_water(&keys).await.unwrap(), vec![500]);
    assert_eq!(store.high_water(W, &keys).await.unwrap(), vec![0], "not this writer's mark");

    let new: Vec<Reading> =
        (3..6).map(|i| reading(T0 + i, &[("v", FieldValue::Float(i as f64))])).collect();
    let batch = Batch::numbered(s.clone(), T0, new.clone(), vec![10, 11, 12]);
    write_ok(&store, &[batch]).await;
    assert_eq!(store.high_water(W, &keys).await.unwrap(), vec![12]);
    assert_eq!(
        store.schema1_high_water(&keys).await.unwrap(),
        vec![500],
        "schema 2 never writes it"
    );
    // By version, not by `_id`: the test's client and the server draw ObjectIds apart.
    let docs = raw_buckets(&store, s.key()).await;
    let count_of = |version: f64| -> Vec<Option<f64>> {
        docs.iter()
            .filter(|b| b.get(d::VERSION).and_then(d::number) == Some(version))
            .map(|b| b.get(d::COUNT).and_then(d::number))
            .collect()
    };
    assert_eq!(count_of(1.0), vec![Some(2.0)], "the schema-1 bucket is left as it was");
    assert_eq!(count_of(f64::from(MINUTE_STATS_BUCKET_VERSION)), vec![Some(3.0)], "a new bucket");

    let mut expected = old.to_vec();
    expected.extend(new);
    assert_eq!(read(&store, range(s.key(), T0, T0 + HOUR_MS)).await, expected);
    let rollup = store
        .rollups(bucketd::store::RollupQuery {
            sensor: s.key().to_owned(),
            from: T0,
            to: T0 + HOUR_MS,
            step_ms: HOUR_MS,
            fields: None,
        })
        .await
        .unwrap();
    assert_eq!((rollup[0].fields["v"].count, rollup[0].fields["v"].sum), (5, 15.0));
}

/// Schema 2 → 3: a bucket a schema-2 bucketd wrote (`v: 2`, statistics without first/last) is
/// read as it is; its writer's mark still counts (an hour written across the upgrade has this
/// writer's readings in both); new readings go to a schema-3 bucket, never into the old one
/// (whose first/last would then describe only part of it); an hour with an old bucket has no
/// first/last from statistics, while the readings path and schema-3-only hours have them.
#[tokio::test]
async fn schema2_buckets_are_read_and_their_statistics_lack_first_and_last() {
    let backend = MongoBackend::start();
    let store = connect(&backend, BucketLimits::default()).await;
    let s = series("two,sensor=a", "two", &[("sensor", "a")]);
    let old = [
        reading(T0 + 1_000, &[("v", FieldValue::Float(1.0))]),
        reading(T0 + 2_000, &[("v", FieldValue::Float(2.0))]),
    ];
    let (r, bytes) = encoded(&old);
    let v2 = doc! {
        d::SENSOR: &s.key(), d::VERSION: 2, d::START: d::date(T0), d::END: d::date(T0 + HOUR_MS),
        d::MEASUREMENT: "two", d::TAGS: [{"k": "sensor", "v": "a"}],
        d::COUNT: 2, d::BYTES: bytes as i64, d::FIRST: d::date(T0 + 1_000),
        d::LAST: d::date(T0 + 2_000),
        d::STATS: {"v": {"min": 1.0, "max": 2.0, "sum": 3.0, "n": 2}},
        d::HIGH_WATER: {W.to_string(): 700_i64}, d::READINGS: r,
    };
    store.database().collection::<bson::Document>(COLLECTION).insert_one(v2).await.unwrap();

    let keys = vec![(s.key().to_owned(), T0), (s.key().to_owned(), T0 + HOUR_MS)];
    assert_eq!(store.high_water(W, &keys).await.unwrap(), vec![700, 0], "the schema-2 mark");

    // Earlier, later and in between the old readings, and an hour of its own.
    let new = vec![
        reading(T0 + 500, &[("v", FieldValue::Float(0.5))]),
        reading(T0 + 3_000, &[("v", FieldValue::Float(3.0))]),
        reading(T0 + 1_500, &[("v", FieldValue::Float(1.5))]),
    ];
    let next = reading(T0 + HOUR_MS + 7, &[("v", FieldValue::Int(7))]);
    write_ok(
        &store,
        &[
            Batch::numbered(s.clone(), T0, new.clone(), vec![800, 801, 802]),
            Batch::numbered(s.clone(), T0 + HOUR_MS, vec![next.clone()], vec![803]),
        ],
    )
    .await;
    assert_eq!(store.high_water(W, &keys).await.unwrap(), vec![802, 803]);

    let docs = raw_buckets(&store, s.key()).await;
    let old_doc = docs.iter().find(|b| b.get(d::VERSION).and_then(d::number) == Some(2.0));
    let old_stats = old_doc.unwrap().get_document(d::STATS).unwrap().get_document("v").unwrap();
    assert_eq!(old_doc.unwrap().get(d::COUNT).and_then(d::number), Some(2.0), "left as it was");
    assert!(!old_stats.contains_key(d::STAT_FIRST) && !old_stats.contains_key(d::STAT_LAST));
    assert_eq!(docs.len(), 3, "one schema-2 bucket, a schema-3 bucket per hour");

    let rollup = |from: i64, to: i64, step_ms: i64| {
        let query = bucketd::store::RollupQuery {
            sensor: s.key().to_owned(),
            from,
            to,
            step_ms,
            fields: None,
        };
        let store = &store;
        async move { store.rollups(query).await.unwrap() }
    };
    let hours = rollup(T0, T0 + 2 * HOUR_MS, HOUR_MS).await;
    let v = &hours[0].fields["v"];
    assert_eq!((v.count, v.min, v.max, v.sum), (5, 0.5, 3.0, 8.0));
    assert_eq!((v.first, v.last), (None, None), "part of the hour is unknown");
    let v = &hours[1].fields["v"];
    assert_eq!((v.first, v.last), (Some((T0 + HOUR_MS + 7, 7.0)), Some((T0 + HOUR_MS + 7, 7.0))));
    // From the readings (a range that cuts the hour), the old ones count too.
    let from_readings = rollup(T0, T0 + HOUR_MS - 1, HOUR_MS).await;
    let v = &from_readings[0].fields["v"];
    assert_eq!((v.count, v.first, v.last), (5, Some((T0 + 500, 0.5)), Some((T0 + 3_000, 3.0))));
    let fine = rollup(T0, T0 + HOUR_MS, 1_000).await;
    assert_eq!(
        fine.iter().map(|r| (r.start, r.fields["v"].first)).collect::<Vec<_>>(),
        vec![
            (T0, Some((T0 + 500, 0.5))),
            (T0 + 1_000, Some((T0 + 1_000, 1.0))),
            (T0 + 2_000, Some((T0 + 2_000, 2.0))),
            (T0 + 3_000, Some((T0 + 3_000, 3.0))),
        ]
    );
}

/// The hour statistics collection is exactly once under the flusher's retry and the log's
/// replay: its statement is sent before the bucket's, so after a failure it may be ahead, and
/// the retried batch (which may have grown) adds only the readings above its mark.
#[tokio::test]
async fn hour_statistics_count_each_reading_once_across_retries() {
    let backend = MongoBackend::start();
    let mut config = MongoConfig::new(backend.uri.as_str(), backend.database.as_str());
    // Long enough for 2024's readings: the stand-in applies TTL indexes as it reads.
    config.retention = Some(Duration::from_secs(100 * 365 * 86_400));
    config.rollup_retention = Some(Duration::from_secs(200 * 365 * 86_400));
    let store = MongoStore::connect_with(config).await.expect("connect");
    let s = series("once", "m", &[("site", "a")]);
    let v = |i: i64| reading(T0 + HOUR_MS + i * 1000, &[("v", FieldValue::Float(i as f64))]);
    let batch = |range: std::ops::Range<i64>| {
        Batch::numbered(
            s.clone(),
            T0 + HOUR_MS,
            range.clone().map(v).collect(),
            // As bucketd numbers readings (nanoseconds of the wall clock): past 2^53, where
            // a float no longer holds every number.
            range.map(|i| 1_796_144_786_877_426_659 + i as u64).collect(),
        )
    };
    write_ok(&store, &[batch(0..10)]).await;
    // The buckets' write is lost after the statistics landed: the retry (or the replay) sends
    // everything above the buckets' mark (nothing), now with newer readings behind it.
    store
        .database()
        .collection::<bson::Document>(COLLECTION)
        .delete_many(doc! {d::SENSOR: "once"})
        .await
        .unwrap();
    assert_eq!(store.high_water(W, &[(s.key().to_owned(), T0 + HOUR_MS)]).await.unwrap(), vec![0]);
    write_ok(&store, &[batch(0..15)]).await;
    let q = bucketd::store::RollupQuery {
        sensor: s.key().to_owned(),
        from: T0,
        to: T0 + 3 * HOUR_MS,
        step_ms: HOUR_MS,
        fields: None,
    };
    // Before anything counts the hour again from its buckets.
    let rows = store.rollups(q.clone()).await.unwrap();
    assert_eq!(rows[0].fields["v"].count, 15, "the readings above the mark are counted");
    // And a replay of what is stored by now: statistics unchanged.
    write_ok(&store, &[batch(5..15)]).await;
    let rows = store.rollups(q).await.unwrap();
    let stats = &rows[0].fields["v"];
    assert_eq!((rows.len(), rows[0].start), (1, T0 + HOUR_MS));
    assert_eq!((stats.count, stats.sum, stats.min, stats.max), (15, 105.0, 0.0, 14.0));
    assert_eq!(
        (stats.first, stats.last),
        (Some((T0 + HOUR_MS, 0.0)), Some((T0 + HOUR_MS + 14_000, 14.0)))
    );

    // One document per sensor per day, its hours inside, with a TTL for --rollup-retention.
    let hours = store.database().collection::<bson::Document>(hours::COLLECTION);
    let day = hours.find_one(doc! {d::SENSOR: "once"}).await.unwrap().expect("the day's document");
    assert_eq!(day.get_str(d::ID).unwrap(), format!("once@{T0}"));
    let hour = day.get_document("h").unwrap().get_document("01").unwrap();
    assert_eq!(hour.get("n").and_then(d::number), Some(15.0));
    let names = hours.list_index_names().await.unwrap();
    assert!(names.iter().any(|n| n == hours::TTL_INDEX), "{names:?}");
}

/// A store opened afresh (a restart) learns from MongoDB how late its hours' readings go, and
/// keeps that: a point stored before the restart, later than the first batch written after
/// it, is written over when it comes again, not appended beside itself.
#[tokio::test]
async fn a_restarted_store_meets_points_stored_before_it_started() {
    let backend = MongoBackend::start();
    let s = series("restarted", "m", &[]);
    let at = |minute: i64, name: &str, v: f64| {
        reading(T0 + HOUR_MS + minute * 60_000, &[(name, FieldValue::Float(v))])
    };
    let before = connect(&backend, BucketLimits::default()).await;
    write_ok(&before, &batches(&s, &[at(10, "a", 1.0), at(20, "a", 2.0)])).await;
    before.close().await;

    let after = connect(&backend, BucketLimits::default()).await;
    // Earlier than what is stored: appended, and the hour's latest stored time is known.
    write_ok(&after, &batches(&s, &[at(5, "a", 0.5)])).await;
    // The point at minute 20 again, with another field.
    write_ok(&after, &batches(&s, &[at(20, "b", 3.0)])).await;
    let got = read(&after, range(s.key(), T0, T0 + 3 * HOUR_MS)).await;
    let times: Vec<i64> = got.iter().map(|r| (r.ts - T0 - HOUR_MS) / 60_000).collect();
    assert_eq!(times, [5, 10, 20], "each point once: {got:?}");
    let twenty = &got[2];
    assert_eq!(twenty.fields.len(), 2, "both fields in one reading: {twenty:?}");
}
