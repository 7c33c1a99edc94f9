//! InfluxDB line protocol over HTTP (`/write`, `/api/v2/write`) through a real socket: plain and
//! gzip bodies, precisions, partial writes, limits.

use std::io::Write;

use bucketd::model::FieldValue;
use flate2::Compression;
use flate2::write::GzEncoder;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::server::{TestServer, memory_store, stored};

const T0_NS: i64 = 1_700_000_000_000_000_000;
const T0_MS: i64 = 1_700_000_000_000;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

#[tokio::test]
async fn v1_and_v2_writes_are_stored() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &[]).await;

    let body = format!("cpu,host=a usage=1.5,count=3i,up=true,msg=\"hi\" {T0_NS}\n");
    let response = server.post("/write?db=bucketd&rp=autogen&u=x&p=y", "text/plain", body).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);

    let body = format!("cpu,host=a usage=2 {}\n", T0_MS + 1);
    let response =
        server.post("/api/v2/write?org=o&bucket=bucketd&precision=ms", "text/plain", body).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);

    let body = format!("cpu,host=a usage=3 {}\n", T0_MS / 1000 + 1);
    let response = server.post("/write?db=bucketd&precision=s", "text/plain", body).await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);

    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
    let readings = stored(&*store, "cpu,host=a").await;
    let ts: Vec<i64> = readings.iter().map(|r| r.ts).collect();
    assert_eq!(ts, [T0_MS, T0_MS + 1, T0_MS + 1000]);
    assert_eq!(
        readings[0].fields.to_vec(),
        vec![
            ("usage".into(), FieldValue::Float(1.5)),
            ("count".into(), FieldValue::Int(3)),
            ("up".into(), FieldValue::Bool(true)),
            ("msg".into(), FieldValue::Str("hi".into())),
        ]
    );
}

#[tokio::test]
async fn gzip_bodies_are_decompressed() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &[]).await;
    let body: String =
        (0..2000).map(|i| format!("mem,host=b used={i}i {}\n", T0_NS + i * 1_000_000)).collect();
    let response = server
        .client
        .post(server.url("/api/v2/write?bucket=bucketd"))
        .header("content-encoding", "gzip")
        .body(gzip(body.as_bytes()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);

    let response = server
        .client
        .post(server.url("/write"))
        .header("content-encoding", "gzip")
        .body("not gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.json::<Value>().await.unwrap()["error"].is_string());

    server.shutdown().await;
    assert_eq!(stored(&*store, "mem,host=b").await.len(), 2000);
}

#[tokio::test]
async fn partial_writes_keep_good_lines_and_report_bad_ones_per_api() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &[]).await;
    let body = format!(
        "ok v=1 {t1}\nbroken line\nok v=2 {t2}\nok v=NaN {t3}\nok =1 {t3}\nok v=3 99999999999999999\n",
        t1 = T0_NS,
        t2 = T0_NS + 1_000_000,
        t3 = T0_NS + 2_000_000,
    );

    let response = server.post("/write?db=bucketd", "text/plain", body.clone()).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let v1: Value = response.json().await.unwrap();
    let message = v1["error"].as_str().expect("v1 shape: {\"error\": ...}");
    assert!(message.contains("partial write"), "{message}");
    assert!(message.contains("line 2:"), "{message}");
    assert!(message.contains("line 4:"), "{message}");
    assert!(message.contains("line 5:"), "{message}");
    assert!(!message.contains("line 1:") && !message.contains("line 3:"), "{message}");

    let response = server.post("/api/v2/write?bucket=bucketd", "text/plain", body).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let v2: Value = response.json().await.unwrap();
    assert_eq!(v2["code"], "invalid");
    assert!(v2["message"].as_str().unwrap().contains("line 2:"), "{v2}");

    server.shutdown().await;
    // Lines 1, 3 and 6 (in 1973: ns precision); the second write's are the same points.
    assert_eq!(stored(&*store, "ok").await.len(), 3);
}

#[tokio::test]
async fn bad_precision_is_refused() {
    let server = TestServer::start(memory_store(), &[]).await;
    let response = server.post("/write?precision=fortnight", "text/plain", "m v=1\n").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(
        response.json::<Value>().await.unwrap()["error"].as_str().unwrap().contains("precision")
    );
    // `m` and `h` are v1-only.
    let response = server.post("/api/v2/write?precision=m", "text/plain", "m v=1\n").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(response.json::<Value>().await.unwrap()["code"], "invalid");
    server.shutdown().await;
}

#[tokio::test]
async fn bodies_over_the_limit_get_413_before_and_after_decompression() {
    let server = TestServer::start(memory_store(), &["--max-body-bytes", "16KiB"]).await;
    let big: String = (0..2000).map(|i| format!("m v={i}i\n")).collect();
    assert!(big.len() > 16 * 1024);

    let response = server.post("/write", "text/plain", big.clone()).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(response.json::<Value>().await.unwrap()["error"].is_string());

    // Small on the wire, too big once decompressed.
    let compressed = gzip(big.as_bytes());
    assert!(compressed.len() < 16 * 1024);
    let response = server
        .client
        .post(server.url("/api/v2/write"))
        .header("content-encoding", "gzip")
        .body(compressed)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(response.json::<Value>().await.unwrap()["code"], "request too large");
    server.shutdown().await;
}

#[tokio::test]
async fn an_empty_body_writes_nothing() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &[]).await;
    let response = server.post("/write", "text/plain", "").await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    server.shutdown().await;
    assert_eq!(store.reading_count(), 0);
}
