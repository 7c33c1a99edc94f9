//! The whole server on MongoDB (the stand-in, or the server named by BUCKETD_TEST_MONGODB_URI)
//! behind the fault proxy:
//! - a flush whose update was applied but whose reply was lost is not written again: no reading
//!   twice, statistics not doubled;
//! - MongoDB gone for 30 s under a steady load: writes keep being acknowledged (into the
//!   write-ahead log), `/ready` says 503, the metrics show the backlog, and once MongoDB is back
//!   every acknowledged reading lands exactly once;
//! - every `update` command carries `maxTimeMS` = the operation timeout, so a command the
//!   client gave up on cannot land after the flusher asked what landed.
//!
//! The tests read process-wide metrics, so they run one at a time.

#[path = "support/mongo_standin.rs"]
mod mongo_standin;
#[path = "support/proxy.rs"]
mod proxy;
#[path = "support/server.rs"]
mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bucketd::model::{FieldValue, HOUR_MS, Reading};
use bucketd::store::mongo::{MongoConfig, MongoStore};
use bucketd::store::{Order, RangeQuery, RollupQuery, Store};
use futures::TryStreamExt;
use mongo_standin::MongoBackend;
use proxy::FaultProxy;
use reqwest::StatusCode;
use support::{TestServer, within};

const T0_MS: i64 = 1_700_002_800_000; // an hour boundary: 2023-11-14T23:00:00Z

/// MongoDB behind a fault proxy, bucketd on it through the proxy, and a store that reads
/// around the proxy.
struct Setup {
    proxy: FaultProxy,
    server: TestServer,
    direct: Arc<MongoStore>,
    _backend: MongoBackend,
}

/// Held by each test: the metrics are process-wide.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn setup(flush_interval: &str) -> Setup {
    let backend = MongoBackend::start();
    let proxy = FaultProxy::in_front_of(&backend.uri);
    let mut config = MongoConfig::new(
        proxy.uri_with(&[("serverSelectionTimeoutMS", "2000"), ("connectTimeoutMS", "2000")]),
        backend.database.clone(),
    );
    config.op_timeout = Duration::from_secs(5);
    let through_proxy =
        Arc::new(within("connect", 60, MongoStore::connect_with(config)).await.expect("connect"));
    let direct = MongoConfig::new(backend.uri.clone(), backend.database.clone());
    let direct = Arc::new(MongoStore::connect_with(direct).await.unwrap());
    let server = TestServer::start(through_proxy, &["--flush-interval", flush_interval]).await;
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

async fn metric(server: &TestServer, name: &str) -> f64 {
    let text = server.get("/metrics").await.text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
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
    let _one = ONE_AT_A_TIME.lock().await;
    let Setup { proxy, server, direct, _backend } = setup("50ms").await;

    proxy.drop_reply_after_apply(1);
    let body: String = (0..10)
        .flat_map(|s| (0..30).map(move |i| (s, i)))
        .map(|(s, i)| format!("lost,sensor=s{s} v={i}i {}\n", T0_MS + i))
        .collect();
    let response = server.post("/write?precision=ms", "text/plain", body).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    wait_for("everything is flushed", 60, async || {
        metric(&server, "bucketd_readings_buffered").await == 0.0
    })
    .await;
    assert_eq!(proxy.dropped_replies(), 1, "the fault fired");
    assert!(
        metric(&server, "bucketd_readings_landed_despite_error_total").await >= 1.0,
        "the flusher found the landed write through the high-water mark"
    );

    for s in 0..10 {
        let sensor = format!("lost,sensor=s{s}");
        let readings = stored(&*direct, &sensor).await;
        let values: Vec<i64> = readings.iter().map(|r| int_field(r, "v")).collect();
        assert_eq!(values, (0..30).collect::<Vec<_>>(), "{sensor}: each reading exactly once");
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
        assert_eq!((stats.count, stats.sum), (30, 435.0), "{sensor}: statistics not doubled");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30_second_outage_loses_nothing_and_everything_lands_once() {
    let _one = ONE_AT_A_TIME.lock().await;
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
        metric(&server, "bucketd_wal_unsettled_readings").await >= 50.0
            && metric(&server, "bucketd_readings_buffered").await >= 50.0
            && metric(&server, "bucketd_wal_bytes").await > 0.0
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
    let backlog = metric(&server, "bucketd_wal_unsettled_readings").await;
    let unstorable = (during - 1) * SENSORS as usize;
    assert!(backlog >= unstorable as f64, "backlog {backlog} < {unstorable} acknowledged");

    proxy.set_down(false);
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let refused = writer.await.unwrap();
    assert_eq!(refused, 0, "nothing refused: the log and the buffers had room");
    wait_for("the backlog drains", 120, async || {
        metric(&server, "bucketd_readings_buffered").await == 0.0
            && metric(&server, "bucketd_wal_unsettled_readings").await == 0.0
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_commands_carry_max_time_ms() {
    let _one = ONE_AT_A_TIME.lock().await;
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
