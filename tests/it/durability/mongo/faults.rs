//! The whole server on MongoDB (the stand-in, or the server named by BUCKETD_TEST_MONGODB_URI)
//! behind the fault proxy:
//! - a flush whose update was applied but whose reply was lost is not written again: no reading
//!   twice, statistics not doubled;
//! - MongoDB gone for 30 s under a steady load: writes keep being acknowledged (into the
//!   write-ahead log), `/ready` says 503, the metrics show the backlog, and once MongoDB is back
//!   every acknowledged reading lands exactly once;
//! - with another writer in the same buckets, a lost reply or an outage of this one still lands
//!   each of its readings once: its check reads its own high-water mark, not the other's (the
//!   lost reply also with two real bucketd processes);
//! - every `update` command carries `maxTimeMS` = the operation timeout, so a command the
//!   client gave up on cannot land after the flusher asked what landed;
//! - the memory bound holds while the log is refilled after an outage.
//!
//! The tests read process-wide metrics, so each runs in a process of its own
//! ([`in_own_process`]), and they run one at a time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bucketd::model::{Batch, FieldValue, HOUR_MS, Reading, Series, SeriesMeta, WriterId};
use bucketd::store::mongo::{MongoConfig, MongoStore};
use bucketd::store::{Order, RangeQuery, RollupQuery, Store};
use futures::TryStreamExt;
use reqwest::StatusCode;

use crate::support::binary::Bucketd;
use crate::support::in_own_process;
use crate::support::mongo_standin::MongoBackend;
use crate::support::proxy::FaultProxy;
use crate::support::server::{TestServer, within};

const T0_MS: i64 = 1_700_002_800_000; // an hour boundary: 2023-11-14T23:00:00Z

/// MongoDB behind a fault proxy, bucketd on it through the proxy, and a store that reads
/// around the proxy.
struct Setup {
    proxy: FaultProxy,
    server: TestServer,
    direct: Arc<MongoStore>,
    _backend: MongoBackend,
}

/// Held by each test while it runs: one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs the test `function` alone: one at a time, in a process of its own (the metrics are
/// process-wide). `None` once it has run and passed in that process; `Some` in it: go on.
async fn alone(function: &str) -> Option<tokio::sync::MutexGuard<'static, ()>> {
    let one = ONE_AT_A_TIME.lock().await;
    in_own_process(module_path!(), function).then_some(one)
}

async fn setup(flush_interval: &str) -> Setup {
    setup_with(&["--flush-interval", flush_interval]).await
}

async fn setup_with(args: &[&str]) -> Setup {
    let backend = MongoBackend::start();
    let proxy = FaultProxy::in_front_of(&backend.uri);
    let mut config = MongoConfig::new(
        proxy.uri_with(&[("serverSelectionTimeoutMS", "2000"), ("connectTimeoutMS", "2000")]),
        backend.database.clone(),
    );
    config.op_timeout = Duration::from_secs(5);
    let through_proxy =
        Arc::new(within("connect", 60, MongoStore::connect_with(config)).await.expect("connect"));
    let mut direct = MongoConfig::new(backend.uri.clone(), backend.database.clone());
    // The checks read around the proxy with the test's own guard (`stored`): the stand-in on
    // a busy machine can take longer than the server's default per-operation timeout.
    direct.op_timeout = Duration::from_secs(120);
    let direct = Arc::new(MongoStore::connect_with(direct).await.unwrap());
    let server = TestServer::start(through_proxy, args).await;
    Setup { proxy, server, direct, _backend: backend }
}

/// Every stored reading of `sensor` in the test's hours, read around the proxy.
async fn stored(store: &dyn Store, sensor: &str) -> Vec<Reading> {
    let query = RangeQuery {
        sensor: sensor.into(),
        from: T0_MS,
        to: T0_MS + 2 * HOUR_MS,
        order: Order::Asc,
        limit: None,
    };
    within("range read", 120, store.readings(query).try_collect()).await.expect("store read")
}

fn int_field(r: &Reading, name: &str) -> i64 {
    match r.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v) {
        Some(FieldValue::Int(v)) => *v,
        Some(FieldValue::Float(v)) => *v as i64,
        other => panic!("field {name} is {other:?}"),
    }
}

async fn wait_for(what: &str, secs: u64, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out after {secs} s waiting until {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_update_reply_is_not_written_twice() {
    let Some(_alone) = alone("a_lost_update_reply_is_not_written_twice").await else { return };
    let Setup { proxy, server, direct, _backend } = setup("50ms").await;
    // Counted from here: connecting and starting may have counted already.
    let landed_before = server.metric("bucketd_readings_landed_despite_error_total").await;

    proxy.drop_reply_after_apply(1);
    let body: String = (0..10)
        .flat_map(|s| (0..30).map(move |i| (s, i)))
        .map(|(s, i)| format!("lost,sensor=s{s} v={i}i {}\n", T0_MS + i))
        .collect();
    let response = server.post("/write?precision=ms", "text/plain", body).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    wait_for("everything is flushed", 60, async || {
        server.metric("bucketd_readings_buffered").await == 0.0
    })
    .await;
    assert_eq!(proxy.dropped_replies(), 1, "the fault fired");
    assert!(
        server.metric("bucketd_readings_landed_despite_error_total").await > landed_before,
        "the flusher found the landed write through the high-water mark"
    );

    // Each reading exactly once, and statistics not doubled.
    assert_exactly(&direct, "lost", 10, &(0..30).collect::<Vec<_>>()).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30_second_outage_loses_nothing_and_everything_lands_once() {
    let Some(_alone) = alone("a_30_second_outage_loses_nothing_and_everything_lands_once").await
    else {
        return;
    };
    const SENSORS: i64 = 10;
    const OUTAGE: Duration = Duration::from_secs(30);
    let Setup { proxy, server, direct, _backend } = setup("200ms").await;
    let server = Arc::new(server);

    // Steady load: every 100 ms one reading per sensor, acknowledged or counted as refused.
    let acked: Arc<Mutex<Vec<i64>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (server, acked, stop) = (server.clone(), acked.clone(), stop.clone());
        tokio::spawn(async move {
            let mut k = 0i64;
            let mut refused = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let body: String = (0..SENSORS)
                    .map(|s| format!("outage,sensor=s{s} v={k}i {}\n", T0_MS + k * 100))
                    .collect();
                let response = server.post("/write?precision=ms", "text/plain", body).await;
                match response.status() {
                    StatusCode::NO_CONTENT => acked.lock().unwrap().push(k),
                    StatusCode::SERVICE_UNAVAILABLE => refused += 1,
                    other => panic!("unexpected status {other}"),
                }
                k += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            refused
        })
    };

    wait_for("the load runs", 60, async || acked.lock().unwrap().len() > 10).await;
    proxy.set_down(true);
    let outage_started = Instant::now();
    // Every connection to MongoDB is closed now: nothing acknowledged from here on can be
    // stored until the outage ends, except the one request that may be in flight.
    let before = acked.lock().unwrap().len();

    wait_for("/ready reports the store down", 20, async || {
        server.get("/ready").await.status() == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    wait_for("the backlog shows in the metrics", 20, async || {
        server.metric("bucketd_wal_unsettled_readings").await >= 50.0
            && server.metric("bucketd_readings_buffered").await >= 50.0
            && server.metric("bucketd_wal_bytes").await > 0.0
    })
    .await;
    let remaining = OUTAGE.saturating_sub(outage_started.elapsed());
    tokio::time::sleep(remaining).await;
    // However slow the machine, writes are still acknowledged after 30 s without MongoDB
    // (far past the driver's timeouts).
    let late = acked.lock().unwrap().len();
    wait_for("a write is acknowledged after 30 s of outage", 60, async || {
        acked.lock().unwrap().len() > late
    })
    .await;
    assert_eq!(server.get("/ready").await.status(), StatusCode::SERVICE_UNAVAILABLE);
    let during = acked.lock().unwrap().len() - before;
    let backlog = server.metric("bucketd_wal_unsettled_readings").await;
    let unstorable = (during - 1) * SENSORS as usize;
    assert!(backlog >= unstorable as f64, "backlog {backlog} < {unstorable} acknowledged");

    proxy.set_down(false);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let refused = writer.await.unwrap();
    assert_eq!(refused, 0, "nothing refused: the log and the buffers had room");
    wait_for("the backlog drains", 120, async || {
        server.metric("bucketd_readings_buffered").await == 0.0
            && server.metric("bucketd_wal_unsettled_readings").await == 0.0
    })
    .await;
    wait_for("/ready recovers", 20, async || server.get("/ready").await.status() == StatusCode::OK)
        .await;

    let acked = acked.lock().unwrap().clone();
    for s in 0..SENSORS {
        let sensor = format!("outage,sensor=s{s}");
        let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
        for r in stored(&*direct, &sensor).await {
            *counts.entry(int_field(&r, "v")).or_default() += 1;
        }
        let twice: Vec<_> = counts.iter().filter(|(_, c)| **c > 1).collect();
        assert!(twice.is_empty(), "{sensor}: stored more than once: {twice:?}");
        let lost: Vec<_> = acked.iter().filter(|k| !counts.contains_key(k)).collect();
        assert!(lost.is_empty(), "{sensor}: {} acknowledged readings lost", lost.len());
    }
    let server = Arc::into_inner(server).expect("only the test holds the server");
    server.shutdown().await;
}

/// Another bucketd writing the same sensor-hours, into the same buckets, straight to MongoDB.
/// Its sequence numbers are far above this server's, as another process's may be: they are
/// not comparable across writers.
struct OtherWriter {
    store: Arc<MongoStore>,
    next: u64,
}

impl OtherWriter {
    const ID: WriterId = WriterId(0x0be7);

    fn new(store: Arc<MongoStore>) -> OtherWriter {
        OtherWriter { store, next: 5_000_000_000_000_000_000 }
    }

    /// Writes value `v` at `T0_MS + v` for every sensor `prefix,sensor=s<i>` and `v` in `values`.
    async fn write(&mut self, prefix: &str, sensors: i64, values: std::ops::Range<i64>) {
        let batches: Vec<Batch> = (0..sensors)
            .map(|s| {
                let readings: Vec<Reading> = values
                    .clone()
                    .map(|v| Reading {
                        ts: T0_MS + v,
                        fields: smallvec::smallvec![("v".into(), FieldValue::Int(v))],
                    })
                    .collect();
                let seqs = (self.next..self.next + readings.len() as u64).collect();
                self.next += readings.len() as u64;
                let key = format!("{prefix},sensor=s{s}");
                let series = SeriesMeta::new(&key, prefix, &[("sensor", format!("s{s}"))]);
                Batch::numbered(Series::from(series), T0_MS, readings, seqs)
            })
            .collect();
        for outcome in within("other writer", 60, self.store.write(Self::ID, &batches)).await {
            outcome.expect("the other writer's batch lands");
        }
    }
}

/// Each sensor holds exactly `expected` values of `v`, once each, and statistics to match.
async fn assert_exactly(direct: &MongoStore, prefix: &str, sensors: i64, expected: &[i64]) {
    for s in 0..sensors {
        let sensor = format!("{prefix},sensor=s{s}");
        let mut values: Vec<i64> =
            stored(direct, &sensor).await.iter().map(|r| int_field(r, "v")).collect();
        values.sort();
        assert_eq!(values, expected, "{sensor}: every reading of both writers exactly once");
        let rollup = direct
            .rollups(RollupQuery {
                sensor: sensor.clone(),
                from: T0_MS,
                to: T0_MS + HOUR_MS,
                step_ms: HOUR_MS,
                fields: None,
            })
            .await
            .unwrap();
        let stats = rollup[0].fields["v"];
        let sum: i64 = expected.iter().sum();
        assert_eq!((stats.count, stats.sum), (expected.len() as u64, sum as f64), "{sensor}");
    }
}

/// A lost update reply for this server while another writer writes the same buckets: the
/// flusher's check asks for this writer's mark only, finds its write landed, and writes
/// nothing twice; the other writer's readings and statistics are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_while_another_writer_writes_the_same_buckets() {
    let Some(_alone) = alone("a_lost_reply_while_another_writer_writes_the_same_buckets").await
    else {
        return;
    };
    const SENSORS: i64 = 5;
    let Setup { proxy, server, direct, _backend } = setup("50ms").await;
    let mut other = OtherWriter::new(direct.clone());
    other.write("shared", SENSORS, 1000..1020).await;
    let landed_before = server.metric("bucketd_readings_landed_despite_error_total").await;

    proxy.drop_reply_after_apply(1);
    let body: String = (0..SENSORS)
        .flat_map(|s| (0..30).map(move |v| format!("shared,sensor=s{s} v={v}i {}\n", T0_MS + v)))
        .collect();
    let response = server.post("/write?precision=ms", "text/plain", body).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    wait_for("this server's flush settles", 60, async || {
        server.metric("bucketd_readings_buffered").await == 0.0
    })
    .await;
    assert_eq!(proxy.dropped_replies(), 1, "the fault fired");
    assert!(server.metric("bucketd_readings_landed_despite_error_total").await > landed_before);
    other.write("shared", SENSORS, 2000..2020).await;

    let expected: Vec<i64> = (0..30).chain(1000..1020).chain(2000..2020).collect();
    assert_exactly(&direct, "shared", SENSORS, &expected).await;
    server.shutdown().await;
}

/// This server cannot reach MongoDB while another writer lands newer readings in the same
/// buckets. When MongoDB is back, the flusher's check must not take the other writer's (higher)
/// mark for its own, or it would release its own unwritten readings as stored: they land, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_writers_newer_marks_do_not_cover_this_writers_unwritten_readings() {
    let Some(_alone) =
        alone("another_writers_newer_marks_do_not_cover_this_writers_unwritten_readings").await
    else {
        return;
    };
    const SENSORS: i64 = 5;
    let Setup { proxy, server, direct, _backend } = setup("50ms").await;
    let mut other = OtherWriter::new(direct.clone());

    // The metrics are the process's: earlier tests of this binary counted errors too.
    let errors_before = server.metric("bucketd_store_errors_total").await;
    proxy.set_down(true);
    let body: String = (0..SENSORS)
        .flat_map(|s| (0..30).map(move |v| format!("cover,sensor=s{s} v={v}i {}\n", T0_MS + v)))
        .collect();
    let response = server.post("/write?precision=ms", "text/plain", body).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT, "acknowledged into the log");
    wait_for("this server's flush has failed", 60, async || {
        server.metric("bucketd_store_errors_total").await > errors_before
    })
    .await;
    other.write("cover", SENSORS, 1000..1020).await;
    proxy.set_down(false);
    wait_for("this server's backlog lands", 120, async || {
        server.metric("bucketd_readings_buffered").await == 0.0
            && server.metric("bucketd_wal_unsettled_readings").await == 0.0
    })
    .await;

    let expected: Vec<i64> = (0..30).chain(1000..1020).collect();
    assert_exactly(&direct, "cover", SENSORS, &expected).await;
    server.shutdown().await;
}

/// The memory bound is a guarantee, the log's refill included: with 500 readings of room and
/// MongoDB down, 5,000 readings are acknowledged into the log; when it returns, the refill
/// brings them back in pieces that fit the room left, so the buffers' own peak (which no
/// sampling can miss) stays within the bound, and every reading lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_bound_holds_while_the_log_is_refilled() {
    let Some(_alone) = alone("the_memory_bound_holds_while_the_log_is_refilled").await else {
        return;
    };
    const BOUND: usize = 500;
    const SENSORS: i64 = 5;
    const PER_SENSOR: i64 = 1_000;
    let bound = BOUND.to_string();
    let Setup { proxy, server, direct, _backend } =
        setup_with(&["--flush-interval", "50ms", "--max-buffered-readings", &bound]).await;
    // The metrics are the process's: earlier tests of this binary counted errors too.
    let errors_before = server.metric("bucketd_store_errors_total").await;
    proxy.set_down(true);
    // 200 lines a request: one request larger than the whole bound would be refused (413).
    // Full buffers spill into the log only once the flusher has met the outage (before that
    // they refuse, 503), so the first request waits for it.
    for part in 0..PER_SENSOR / 40 {
        if part == 1 {
            wait_for("the flusher has met the outage", 60, async || {
                server.metric("bucketd_store_errors_total").await > errors_before
            })
            .await;
        }
        let body: String = (0..SENSORS)
            .flat_map(|s| (part * 40..(part + 1) * 40).map(move |v| (s, v)))
            .map(|(s, v)| format!("refill,sensor=s{s} v={v}i {}\n", T0_MS + v))
            .collect();
        let response = server.post("/write?precision=ms", "text/plain", body).await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT, "acknowledged into the log");
    }
    let logged = server.metric("bucketd_wal_unsettled_readings").await;
    assert_eq!(logged, (SENSORS * PER_SENSOR) as f64, "everything waits in the log");
    proxy.set_down(false);
    wait_for("the log is refilled and stored", 240, async || {
        server.metric("bucketd_readings_buffered").await == 0.0
            && server.metric("bucketd_wal_unsettled_readings").await == 0.0
    })
    .await;
    let peak = server.buffers.peak();
    let gauge = server.metric("bucketd_buffered_readings_peak").await;
    eprintln!("peak of readings held: {peak} (gauge {gauge}), bound {BOUND}");
    assert!(peak <= BOUND, "peak {peak} > bound {BOUND}");
    assert!(peak > BOUND / 2, "the refill filled the buffers: the test exercised the bound");
    assert_eq!(gauge, peak as f64, "the gauge is the buffers' own peak");
    let expected: Vec<i64> = (0..PER_SENSOR).collect();
    assert_exactly(&direct, "refill", SENSORS, &expected).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_commands_carry_max_time_ms() {
    let Some(_alone) = alone("update_commands_carry_max_time_ms").await else { return };
    let Setup { proxy: _proxy, server, direct: _, _backend: backend } = setup("50ms").await;
    if backend.is_real_server() {
        eprintln!("skipped: only the stand-in reports the commands it received");
        return;
    }
    let body: String = (0..10).map(|s| format!("mt,sensor=s{s} v={s}i {}\n", T0_MS + s)).collect();
    let response = server.post("/write?precision=ms", "text/plain", body).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    wait_for("everything is flushed", 60, async || server.buffers.buffered() == 0).await;
    server.shutdown().await;

    let client = mongodb::Client::with_uri_str(&backend.uri).await.expect("client");
    let stats = client
        .database("admin")
        .run_command(mongodb::bson::doc! {"bridgeStats": 1})
        .await
        .expect("bridgeStats");
    let by_value = stats.get_document("updateMaxTimeMS").expect("updateMaxTimeMS").clone();
    // setup() sets the operation timeout to 5 s.
    let values: Vec<&str> = by_value.keys().map(String::as_str).collect();
    assert_eq!(values, ["5000"], "maxTimeMS of the update commands, by value: {by_value}");
}

/// The same through two real bucketd processes on one MongoDB: the first reaches it through
/// the proxy, which drops the reply to its first update after MongoDB applied it, while the
/// second writes the same sensor-hours (the same buckets) directly, before and meanwhile.
/// The first cuts each sensor's 30 readings into buckets of about 10, so the lost update carried
/// only the first of them; the second's newer readings land in between, with higher numbers. Its check
/// must find exactly those by its own mark (a shared mark would have covered all 30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_a_lost_reply_for_one_while_the_other_writes_the_same_buckets() {
    const SENSORS: i64 = 5;
    let backend = MongoBackend::start();
    let proxy = FaultProxy::in_front_of(&backend.uri);
    let db = backend.database.clone();
    let through_proxy =
        proxy.uri_with(&[("serverSelectionTimeoutMS", "2000"), ("connectTimeoutMS", "2000")]);
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let mut a = Bucketd::spawn_args(
        dir_a.path(),
        "2s",
        &[
            "--mongodb-uri",
            &through_proxy,
            "--mongodb-database",
            &db,
            // About ten readings a bucket (by size: a count cap would make the buffer due
            // at once).
            "--bucket-max-bytes",
            "400",
        ],
    );
    let mut b = Bucketd::spawn_args(
        dir_b.path(),
        "50ms",
        &["--mongodb-uri", &backend.uri, "--mongodb-database", &db],
    );
    a.wait_ready(&client).await;
    b.wait_ready(&client).await;
    let body = |values: std::ops::Range<i64>| -> String {
        (0..SENSORS)
            .flat_map(|s| values.clone().map(move |v| (s, v)))
            .map(|(s, v)| format!("pair,sensor=s{s} v={v}i {}\n", T0_MS + v))
            .collect()
    };
    let write = async |server: &Bucketd, values: std::ops::Range<i64>| {
        let url = format!("{}/write?precision=ms", server.base);
        let response = client.post(url).body(body(values)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    };

    write(&b, 1000..1020).await;
    b.wait_settled(&client, 60).await;
    proxy.drop_reply_after_apply(1);
    write(&a, 0..30).await;
    // Numbered after the first's, and stored before its flush (2 s) is due.
    write(&b, 2000..2020).await;
    b.wait_settled(&client, 60).await;
    a.wait_settled(&client, 120).await;
    assert_eq!(proxy.dropped_replies(), 1, "the fault fired");
    let landed = "bucketd_readings_landed_despite_error_total";
    assert!(a.metric(&client, landed).await.unwrap_or(0.0) >= 1.0);

    let direct = MongoConfig::new(backend.uri.clone(), db.clone());
    let direct = MongoStore::connect_with(direct).await.unwrap();
    let expected: Vec<i64> = (0..30).chain(1000..1020).chain(2000..2020).collect();
    assert_exactly(&direct, "pair", SENSORS, &expected).await;
    assert!(a.terminate().success() && b.terminate().success());
}
