//! The whole server on the MongoDB store, end to end through real sockets: JSON, line protocol
//! over HTTP and TCP in, then ranges, rollups and sensors out of the stand-in (or of the real
//! server named by BUCKETD_TEST_MONGODB_URI).

use std::sync::Arc;
use std::time::Duration;

use bucketd::model::Reading;
use bucketd::model::{FieldValue, HOUR_MS};
use bucketd::store::{BucketLimits, Store};
use bucketd::store::{Order, RangeQuery};
use futures::TryStreamExt;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::support::mongo_standin::MongoBackend;
use crate::support::server::{TestServer, within};

const T0_MS: i64 = 1_700_002_800_000; // an hour boundary: 2023-11-14T23:00:00Z

/// Every stored reading of `sensor` in the test's day. (The stand-in cannot represent dates
/// before year 1, so the tests' usual whole-range helper does not apply.)
async fn stored(store: &dyn Store, sensor: &str) -> Vec<Reading> {
    let query = RangeQuery {
        sensor: sensor.into(),
        from: T0_MS - 24 * HOUR_MS,
        to: T0_MS + 24 * HOUR_MS,
        order: Order::Asc,
        limit: None,
    };
    within("range read", 60, store.readings(query).try_collect()).await.expect("store read")
}

async fn json_of(response: reqwest::Response) -> Value {
    assert!(response.status().is_success(), "status {}", response.status());
    response.json().await.expect("JSON body")
}

#[tokio::test]
async fn every_protocol_lands_in_mongodb_and_reads_back() {
    let backend = MongoBackend::start();
    // Small caps so the test crosses spilled buckets.
    let store: Arc<dyn Store> =
        Arc::new(backend.connect(BucketLimits { max_readings: 50, max_bytes: 128_000 }).await);
    let server = TestServer::start_with_tcp(
        store.clone(),
        &["--flush-interval", "50ms", "--bucket-max-readings", "50"],
    )
    .await;

    // JSON: 120 readings over two hours of one sensor, with names MongoDB cannot take as-is.
    let body: Vec<Value> = (0..120)
        .map(|i| {
            json!({
                "sensor": "greenhouse",
                "ts": T0_MS + i * 60_000,
                "fields": {"temp": 20.0 + i as f64, "a.b": 1.0, "$x": "y"},
                "tags": {"site": "north"},
            })
        })
        .collect();
    let r = server.post("/api/v1/readings", "application/json", json!(body).to_string()).await;
    assert_eq!(json_of(r).await["accepted"], 120);

    // Line protocol over HTTP, and the same series over TCP.
    let lp: String =
        (0..30).map(|i| format!("env,site=w3 temp={i}.5,n={i}i {}\n", T0_MS + i * 1000)).collect();
    let r = server.post("/write?precision=ms", "text/plain", lp).await;
    assert_eq!(r.status(), 204);
    let mut tcp = tokio::net::TcpStream::connect(server.tcp.expect("tcp listener")).await.unwrap();
    let lp_tcp: String = (30..60)
        .map(|i| format!("env,site=w3 temp={i}.5,n={i}i {}\n", (T0_MS + i * 1000) * 1_000_000))
        .collect();
    tcp.write_all(lp_tcp.as_bytes()).await.unwrap();
    tcp.shutdown().await.unwrap();

    // Everything reaches MongoDB within a few flush intervals.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let json_n = stored(store.as_ref(), "greenhouse").await.len();
        let lp_n = stored(store.as_ref(), "env,site=w3").await.len();
        if json_n == 120 && lp_n == 60 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "stored {json_n}/120 and {lp_n}/60");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let greenhouse = stored(store.as_ref(), "greenhouse").await;
    assert!(greenhouse[0].fields.contains(&("a.b".into(), FieldValue::Float(1.0))));
    assert!(greenhouse[0].fields.contains(&("$x".into(), FieldValue::Str("y".into()))));

    // The query API over MongoDB: a descending page across spilled buckets and an hour boundary.
    let page = json_of(
        server
            .get(&format!(
                "/api/v1/readings?sensor=greenhouse&from={T0_MS}&to={}&order=desc&limit=70",
                T0_MS + 2 * HOUR_MS
            ))
            .await,
    )
    .await;
    let readings = page["readings"].as_array().unwrap();
    assert_eq!(readings.len(), 70);
    assert_eq!(readings[0]["fields"]["temp"], 139.0);
    assert_eq!(readings[69]["fields"]["temp"], 70.0);
    assert_eq!(readings[0]["fields"]["a.b"], 1.0);
    assert!(page["next_cursor"].is_string());

    // Hourly rollups come from bucket stats: hour 0 holds i = 0..60, hour 1 i = 60..120.
    let rollups = json_of(
        server
            .get(&format!(
                "/api/v1/rollups?sensor=greenhouse&from={T0_MS}&to={}&step=1h&fields=temp",
                T0_MS + 2 * HOUR_MS
            ))
            .await,
    )
    .await;
    let rows = rollups["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["fields"]["temp"]["count"], 60);
    assert_eq!(rows[0]["fields"]["temp"]["min"], 20.0);
    assert_eq!(rows[1]["fields"]["temp"]["max"], 139.0);
    assert_eq!(rows[1]["fields"]["temp"]["sum"], (80..140).sum::<i64>() as f64);

    // Sensors by tag, with first and last seen.
    let sensors = json_of(server.get("/api/v1/sensors?tag=site:w3").await).await;
    let list = sensors["sensors"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["key"], "env,site=w3");
    assert_eq!(list[0]["measurement"], "env");

    assert_eq!(server.get("/ready").await.status(), 200);
    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
}
