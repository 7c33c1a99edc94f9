//! The memory bound, store outages and shutdown, through real sockets: 503 + Retry-After at the
//! bound (the buffers' with `--ack=buffered`, the log's with the WAL, where full buffers spill
//! into the log), the memory bound never exceeded, nothing lost across an outage or a
//! shutdown.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bucketd::config::Config;
use bucketd::model::HOUR_MS;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::server::{
    FlakyStore, Identity, TestServer, assert_stored_exactly, identity, json_reading, memory_store,
    wait_until, within,
};

const T0: i64 = 1_700_000_000_000;

fn array(sensor: &str, from: i64, n: usize) -> String {
    let items: Vec<Value> =
        (0..n).map(|i| json_reading(sensor, from + i as i64, json!({"v": i}))).collect();
    Value::Array(items).to_string()
}

/// The readings `array(sensor, from, n)` (and the line protocol with the same values) send.
fn identities(sensor: &str, from: i64, n: usize) -> impl Iterator<Item = Identity> {
    let sensor = sensor.to_owned();
    (0..n).map(move |i| identity(&sensor, from + i as i64, &[("v", i as f64)]))
}

#[tokio::test]
async fn full_buffers_answer_503_with_retry_after_and_recover() {
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    let server = TestServer::start(
        flaky.clone(),
        &["--ack", "buffered", "--max-buffered-readings", "100", "--flush-interval", "20ms"],
    )
    .await;

    let response = server.post("/api/v1/readings", "application/json", array("s", T0, 100)).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(server.buffers.buffered(), 100);

    let response =
        server.post("/api/v1/readings", "application/json", array("s", T0 + 100, 1)).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(response.json::<Value>().await.unwrap()["accepted"], 0);

    let response = server.post("/write", "text/plain", format!("s v=1 {}\n", T0 * 1_000_000)).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");

    let response = server
        .post(
            "/api/v1/readings",
            "application/x-ndjson",
            format!("{}\n", json_reading("s", T0, json!({"v": 1}))),
        )
        .await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.buffers.buffered(), 100);

    // A request that could never fit gets 413, not a 503 to retry forever.
    let response = server.post("/api/v1/readings", "application/json", array("s", T0, 101)).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);

    flaky.set_down(false);
    wait_until("the buffers drain", Duration::from_secs(10), || server.buffers.buffered() == 0)
        .await;
    let response =
        server.post("/api/v1/readings", "application/json", array("s", T0 + 200, 10)).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);

    server.shutdown().await;
    let accepted = identities("s", T0, 100).chain(identities("s", T0 + 200, 10)).collect();
    assert_stored_exactly(&*flaky, &accepted).await;
}

#[tokio::test]
async fn streamed_ndjson_reports_what_was_accepted_before_the_bound() {
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    let server =
        TestServer::start(flaky.clone(), &["--ack", "buffered", "--max-buffered-readings", "250"])
            .await;
    // 1,000 lines pushed in pieces of 250 (the bound): the first piece fits, the second not.
    let body: String =
        (0..1000).map(|i| format!("{}\n", json_reading("nd", T0 + i, json!({"v": i})))).collect();
    let response = server.post("/api/v1/readings", "application/x-ndjson", body).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(response.json::<Value>().await.unwrap()["accepted"], 250);
    flaky.set_down(false);
    server.shutdown().await;
    assert_stored_exactly(&*flaky, &identities("nd", T0, 250).collect()).await;
}

/// With the log and a store that is writing, only slowly, full buffers refuse at once
/// (503 + Retry-After) and before the body is parsed; nothing is spilled into the log.
#[tokio::test]
async fn with_the_wal_a_slow_store_makes_full_buffers_refuse_before_parsing() {
    let slow = FlakyStore::new(memory_store());
    slow.hold(true);
    let server = TestServer::start(
        slow.clone(),
        &["--max-buffered-readings", "100", "--flush-interval", "20ms"],
    )
    .await;
    let response = server.post("/api/v1/readings", "application/json", array("s", T0, 100)).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);

    // Not parsed at all: a malformed body is refused as "full", not as malformed.
    let response = server.post("/write", "text/plain", "this is not line protocol\n").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "1");
    let response =
        server.post("/api/v1/readings", "application/json", array("s", T0 + 100, 1)).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(server.buffers.spilled_from(), None, "nothing spilled into the log");

    slow.hold(false);
    wait_until("the buffers drain", Duration::from_secs(10), || server.buffers.buffered() == 0)
        .await;
    let later = T0 + 200;
    let response =
        server.post("/write", "text/plain", format!("s v=7 {}\n", later * 1_000_000)).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT, "room again: taken");
    server.shutdown().await;
    let mut expected: BTreeSet<Identity> = identities("s", T0, 100).collect();
    expected.insert(identity("s", later, &[("v", 7.0)]));
    assert_stored_exactly(&*slow, &expected).await;
}

#[tokio::test]
async fn the_bound_holds_under_concurrent_writers_and_nothing_accepted_is_lost() {
    bound_under_concurrent_writers(&["--ack", "buffered"]).await;
}

/// With the log, full buffers spill into it: the memory bound still holds, the 503s come from
/// the log's bound, and everything acknowledged lands once.
#[tokio::test]
async fn with_the_wal_full_buffers_spill_and_the_logs_bound_answers_503() {
    bound_under_concurrent_writers(&["--wal-max-bytes", "96KiB"]).await;
}

async fn bound_under_concurrent_writers(mode: &[&str]) {
    const BOUND: usize = 500;
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    let bound = BOUND.to_string();
    let mut args = vec!["--max-buffered-readings", bound.as_str(), "--flush-interval", "10ms"];
    args.extend_from_slice(mode);
    let server = Arc::new(TestServer::start(flaky.clone(), &args).await);

    let accepted: Arc<Mutex<BTreeSet<Identity>>> = Arc::default();
    let refused = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..8i64 {
        let (server, accepted, refused) = (server.clone(), accepted.clone(), refused.clone());
        let flaky = flaky.clone();
        writers.push(tokio::spawn(async move {
            for round in 0..40i64 {
                // Spread over hours and sensors so the flusher has many batches.
                let from = T0 + (w * 40 + round) * HOUR_MS / 7;
                let response = if round % 2 == 0 {
                    server
                        .post(
                            "/api/v1/readings",
                            "application/json",
                            array(&format!("w{w}"), from, 20),
                        )
                        .await
                } else {
                    let lp: String = (0..20)
                        .map(|i| format!("w{w} v={i} {}\n", (from + i) * 1_000_000))
                        .collect();
                    server.post("/write", "text/plain", lp).await
                };
                match response.status() {
                    StatusCode::ACCEPTED | StatusCode::NO_CONTENT => {
                        accepted.lock().unwrap().extend(identities(&format!("w{w}"), from, 20));
                    }
                    StatusCode::SERVICE_UNAVAILABLE => {
                        refused.fetch_add(20, Ordering::SeqCst);
                    }
                    other => panic!("unexpected status {other}"),
                }
                if round == 20 && w == 0 {
                    flaky.set_down(false);
                }
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    // The buffers' own high-water count: no overshoot can slip between two samples.
    let peak = server.buffers.peak();
    assert!(peak <= BOUND, "held {peak} > bound {BOUND}");
    assert!(refused.load(Ordering::SeqCst) > 0, "the bound was never reached; test proves nothing");
    let accepted = accepted.lock().unwrap().clone();

    let server = Arc::into_inner(server).expect("only the test holds the server now");
    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
    // Every accepted reading once; nothing of a refused request.
    assert_stored_exactly(&*flaky, &accepted).await;
}

#[tokio::test]
async fn a_store_outage_loses_nothing() {
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    let server = TestServer::start(flaky.clone(), &["--flush-interval", "10ms"]).await;
    let mut sent = 0;
    let mut acked = BTreeSet::new();
    for hour in 0..5 {
        for sensor in ["a", "b", "c"] {
            let response = server
                .post(
                    "/api/v1/readings",
                    "application/json",
                    array(sensor, T0 + hour * HOUR_MS, 40),
                )
                .await;
            assert_eq!(response.status(), StatusCode::ACCEPTED);
            acked.extend(identities(sensor, T0 + hour * HOUR_MS, 40));
            sent += 40;
        }
    }
    wait_until("a flush has failed", Duration::from_secs(10), || {
        flaky.failed_writes.load(Ordering::SeqCst) >= 1
    })
    .await;
    // The flusher now keeps asking the store what landed, with backoff, before retrying.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(flaky.inner.reading_count(), 0);
    assert_eq!(server.buffers.buffered(), sent);

    flaky.set_down(false);
    wait_until("everything is written", Duration::from_secs(30), || {
        flaky.inner.reading_count() == sent
    })
    .await;
    assert_eq!(server.buffers.buffered(), 0);
    server.shutdown().await;
    // Retries neither duplicated nor lost readings.
    assert_stored_exactly(&*flaky, &acked).await;
}

#[tokio::test]
async fn shutdown_with_full_buffers_writes_everything() {
    let store = memory_store();
    // Little is due before shutdown: an hour-long interval, a batch size never reached, a bound
    // whose pressure half is never reached. (A server quiet for 2 s writes everything, so how
    // much the flusher took before the shutdown depends on timing: counted, not assumed.)
    let server = TestServer::start(
        store.clone(),
        &[
            "--flush-interval",
            "1h",
            "--max-buffered-readings",
            "50000",
            "--bucket-max-readings",
            "100000",
        ],
    )
    .await;
    let body: String = (0..20_000)
        .map(|i| {
            format!("{}\n", json_reading(&format!("s{}", i % 97), T0 + i * 1000, json!({"v": i})))
        })
        .collect();
    let response = server.post("/api/v1/readings", "application/x-ndjson", body).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);

    let stored_before = store.reading_count();
    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
    assert_eq!(report.flushed, 20_000 - stored_before, "the shutdown wrote all the rest");
    let sent = (0..20_000)
        .map(|i| identity(&format!("s{}", i % 97), T0 + i * 1000, &[("v", i as f64)]))
        .collect();
    assert_stored_exactly(&*store, &sent).await;
}

#[tokio::test]
async fn with_ack_buffered_a_store_down_past_the_deadline_is_reported_as_loss() {
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    // A data directory of its own: a log left in the default one would be replayed.
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let buffered = ["--ack", "buffered", "--shutdown-timeout", "300ms", "--data-dir", data_dir];
    let config =
        Config::from_args([&["bucketd", "--http-addr", "127.0.0.1:0"][..], &buffered].concat())
            .unwrap();
    let server = bucketd::server::Server::bind(config.clone(), flaky.clone()).await.unwrap();
    let url = format!("http://{}/api/v1/readings", server.http_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(array("lost", T0, 10))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    stop.send(()).unwrap();
    let report = within("shutdown", 10, run).await.unwrap().unwrap();
    assert_eq!(report.unflushed, 10);

    // The binary's entry point, `server::run`, turns that into an error (a non-zero exit).
    // It binds port 0 too; its "bucketd listening" event says where (the test runtime has one
    // thread, so a thread-local subscriber sees the spawned task's events).
    let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
    let _subscriber = {
        use tracing_subscriber::layer::SubscriberExt;
        let layer = ListeningAddr(Mutex::new(Some(addr_tx)));
        tracing::subscriber::set_default(tracing_subscriber::registry().with(layer))
    };
    let config =
        Config::from_args([&["bucketd", "--http-addr", "127.0.0.1:0"][..], &buffered].concat())
            .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(bucketd::server::run(config, flaky.clone(), async move {
        let _ = stopped.await;
    }));
    let addr = within("the server to listen", 10, addr_rx).await.unwrap();
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/api/v1/readings"))
        .header("content-type", "application/json")
        .body(array("lost", T0, 5))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    stop.send(()).unwrap();
    let err = within("shutdown", 10, run).await.unwrap().unwrap_err();
    assert!(err.to_string().contains("5 readings could not be written"), "{err:#}");
}

/// With the write-ahead log (the default), readings the store did not take by the shutdown
/// deadline are not lost: the stop succeeds, and the next start replays them, once.
#[tokio::test]
async fn with_the_wal_a_store_down_past_the_deadline_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let wal = dir.path().join("wal");
    let dead = dir.path().join("dead-letters");
    let args = |addr: &str| {
        Config::from_args([
            "bucketd",
            "--http-addr",
            addr,
            "--shutdown-timeout",
            "300ms",
            "--flush-interval",
            "10ms",
            "--wal-dir",
            wal.to_str().unwrap(),
            "--dead-letter-dir",
            dead.to_str().unwrap(),
        ])
        .unwrap()
    };
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    let server = bucketd::server::Server::bind(args("127.0.0.1:0"), flaky.clone()).await.unwrap();
    let url = format!("http://{}/api/v1/readings", server.http_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    for sensor in ["kept-a", "kept-b"] {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .body(array(sensor, T0, 10))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::ACCEPTED);
    }
    stop.send(()).unwrap();
    let report = within("shutdown", 10, run).await.unwrap().unwrap();
    assert_eq!(report.unflushed, 20);
    assert!(report.kept_in_wal);
    assert_eq!(flaky.inner.reading_count(), 0);

    // Restart with the store back: the replay writes them; a further restart adds nothing.
    flaky.set_down(false);
    for round in 0..2 {
        let server =
            bucketd::server::Server::bind(args("127.0.0.1:0"), flaky.clone()).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        wait_until("the replayed readings are stored", Duration::from_secs(10), || {
            flaky.inner.reading_count() == 20
        })
        .await;
        stop.send(()).unwrap();
        let report = within("shutdown", 10, run).await.unwrap().unwrap();
        assert_eq!(report.unflushed, 0, "round {round}");
        // Replayed exactly once, in round 0 and again after round 1's restart.
        let kept = identities("kept-a", T0, 10).chain(identities("kept-b", T0, 10)).collect();
        assert_stored_exactly(&*flaky, &kept).await;
    }
    let left: Vec<_> = std::fs::read_dir(&wal)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "wal"))
        .collect();
    assert!(left.is_empty(), "settled segments are deleted: {left:?}");
}

/// Hands on the `http` address of the first "bucketd listening" event.
struct ListeningAddr(Mutex<Option<tokio::sync::oneshot::Sender<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for ListeningAddr {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        #[derive(Default)]
        struct Fields {
            message: String,
            http: Option<String>,
        }
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                match field.name() {
                    "message" => self.message = format!("{value:?}"),
                    "http" => self.http = Some(format!("{value:?}")),
                    _ => {}
                }
            }
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        if fields.message == "bucketd listening"
            && let Some(http) = fields.http
            && let Some(tx) = self.0.lock().unwrap().take()
        {
            let _ = tx.send(http);
        }
    }
}

/// A restart that finds a leftover log while the store is unreachable serves at once: writes
/// are acknowledged into the log meanwhile, and once the store is back the leftover readings
/// and the new ones all land, once each.
#[tokio::test]
async fn a_restart_with_a_leftover_log_and_the_store_down_serves_and_later_lands_all_once() {
    let dir = tempfile::tempdir().unwrap();
    let wal = dir.path().to_str().unwrap();
    let args = ["--wal-dir", wal, "--shutdown-timeout", "300ms", "--flush-interval", "10ms"];
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    let server = TestServer::start(flaky.clone(), &args).await;
    let response = server.post("/api/v1/readings", "application/json", array("left", T0, 10)).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let report = server.shutdown().await;
    assert!(report.kept_in_wal && report.unflushed == 10, "{report:?}");

    // The store is still down: the restart neither waits for it nor refuses writes.
    let server = TestServer::start(flaky.clone(), &args).await;
    for sensor in ["new-a", "new-b"] {
        let response =
            server.post("/api/v1/readings", "application/json", array(sensor, T0, 10)).await;
        assert_eq!(response.status(), StatusCode::ACCEPTED, "{sensor}");
    }
    assert_eq!(server.get("/ready").await.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(flaky.inner.reading_count(), 0);

    flaky.set_down(false);
    wait_until("everything is stored", Duration::from_secs(30), || {
        flaky.inner.reading_count() >= 30
    })
    .await;
    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
    let all: BTreeSet<Identity> =
        ["left", "new-a", "new-b"].iter().flat_map(|sensor| identities(sensor, T0, 10)).collect();
    assert_stored_exactly(&*flaky, &all).await;

    // Nothing is left to replay: a further start adds nothing.
    let server = TestServer::start(flaky.clone(), &args).await;
    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
    assert_stored_exactly(&*flaky, &all).await;
}

/// `--ack=buffered` replays a log an earlier `--ack=wal` run left before it serves anything:
/// a query sent while the store is still down (so the replay cannot finish) is answered only
/// after the replay, with every leftover reading.
#[tokio::test]
async fn ack_buffered_replays_a_leftover_log_before_serving() {
    let dir = tempfile::tempdir().unwrap();
    let wal = dir.path().to_str().unwrap();
    let common = ["--wal-dir", wal, "--shutdown-timeout", "300ms", "--flush-interval", "10ms"];
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    let server = TestServer::start(flaky.clone(), &common).await;
    let response = server.post("/api/v1/readings", "application/json", array("left", T0, 10)).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let report = server.shutdown().await;
    assert!(report.kept_in_wal && report.unflushed == 10, "{report:?}");

    let server =
        TestServer::start(flaky.clone(), &[&common[..], &["--ack", "buffered"]].concat()).await;
    let url = format!(
        "{}?sensor=left&from={T0}&to={}&format=ndjson",
        server.url("/api/v1/readings"),
        T0 + 100
    );
    let query = tokio::spawn(server.client.get(url).send());
    // The query waits while the replay cannot ask the store what it holds; once it can, the
    // replayed readings are in before anything is served.
    tokio::time::sleep(Duration::from_millis(200)).await;
    flaky.set_down(false);
    let response = within("the query", 60, query).await.unwrap().unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    // A reading stored between the query's two reads may show twice; none may be missing.
    let values: BTreeSet<i64> = text
        .lines()
        .filter(|l| !l.contains("next_cursor"))
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["fields"]["v"].as_f64().unwrap() as i64)
        .collect();
    assert_eq!(values, (0..10).collect(), "{text}");
    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
    assert_stored_exactly(&*flaky, &identities("left", T0, 10).collect()).await;
}
