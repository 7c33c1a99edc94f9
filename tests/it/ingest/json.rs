//! `POST /api/v1/readings` through a real socket: JSON documents, NDJSON (streamed, gzip),
//! partial acceptance, and every kind of bad input.

use std::io::Write;

use bucketd::model::FieldValue;
use flate2::Compression;
use flate2::write::GzEncoder;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::server::{TestServer, json_reading, memory_store, stored};

const T0: i64 = 1_700_000_000_000;

async fn post_json(server: &TestServer, body: &Value) -> (StatusCode, Value) {
    let response = server.post("/api/v1/readings", "application/json", body.to_string()).await;
    let status = response.status();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn one_reading_and_an_array_are_accepted_and_stored() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &[]).await;

    let (status, body) = post_json(&server, &json_reading("s1", T0, json!({"temp": 21.5}))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body, json!({"accepted": 1}));

    let array: Vec<Value> =
        (1..=3).map(|i| json_reading("s1", T0 + i, json!({"temp": i, "ok": true}))).collect();
    let (status, body) = post_json(&server, &Value::Array(array)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body, json!({"accepted": 3}));

    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
    let readings = stored(&*store, "s1").await;
    assert_eq!(readings.len(), 4);
    assert_eq!(readings[0].ts, T0);
    assert_eq!(readings[0].fields.to_vec(), vec![("temp".into(), FieldValue::Float(21.5))]);
    assert_eq!(readings[3].ts, T0 + 3);
}

#[tokio::test]
async fn partially_invalid_array_keeps_the_valid_items_and_lists_the_rest() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &[]).await;
    let many_fields: serde_json::Map<String, Value> =
        (0..300).map(|i| (format!("f{i}"), json!(i))).collect();
    let items = vec![
        json_reading("good", T0, json!({"v": 1})), // 0 ok
        json_reading("", T0, json!({"v": 1})),     // 1 empty sensor
        json_reading(&"k".repeat(2000), T0, json!({"v": 1})), // 2 sensor too long
        json_reading("good", T0 + 1, json!({"": 1})), // 3 empty field name
        json_reading("good", T0 + 2, Value::Object(many_fields)), // 4 too many fields
        json_reading("good", 300_000_000_000_000, json!({"v": 1})), // 5 year > 9999
        json_reading("good", T0 + 3, json!({"a.b": 1, "$c": 2})), // 6 ok: mapped by Mongo
        json_reading("good", T0 + 4, json!({})),   // 7 no fields
        json!("not an object"),                    // 8 wrong type
    ];
    let (status, body) = post_json(&server, &Value::Array(items)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["accepted"], 2, "{body}");
    assert_eq!(body["rejected_count"], 7, "{body}");
    let indexes: Vec<u64> =
        body["rejected"].as_array().unwrap().iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert_eq!(indexes, [1, 2, 3, 4, 5, 7, 8]);
    for r in body["rejected"].as_array().unwrap() {
        assert!(!r["error"].as_str().unwrap().is_empty());
    }

    server.shutdown().await;
    let readings = stored(&*store, "good").await;
    assert_eq!(readings.len(), 2);
    let names: Vec<&str> = readings[1].fields.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"a.b") && names.contains(&"$c"), "{names:?}");
}

#[tokio::test]
async fn at_most_a_hundred_rejections_are_listed() {
    let server = TestServer::start(memory_store(), &[]).await;
    let items: Vec<Value> = (0..250).map(|_| json_reading("", T0, json!({"v": 1}))).collect();
    let (status, body) = post_json(&server, &Value::Array(items)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["accepted"], 0);
    assert_eq!(body["rejected_count"], 250);
    assert_eq!(body["rejected"].as_array().unwrap().len(), 100);
    server.shutdown().await;
}

#[tokio::test]
async fn malformed_json_and_non_finite_numbers_come_back_in_bucketds_format() {
    let server = TestServer::start(memory_store(), &[]).await;
    for bad in [
        "{\"sensor\": \"s\", \"ts\": 1, \"fields\": {\"v\": 1}", // truncated
        "{\"sensor\": \"s\", \"ts\": 1, \"fields\": {\"v\": NaN}}", // NaN is not JSON
        "{\"sensor\": \"s\", \"ts\": 1, \"fields\": {\"v\": Infinity}}",
        "{\"sensor\": \"s\", \"ts\": 1, \"fields\": {\"v\": 1e999}}", // overflows to inf
        "",
        "[1, 2",
    ] {
        let response = server.post("/api/v1/readings", "application/json", bad).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
        let body: Value = response.json().await.expect("error body is JSON");
        assert!(body["error"].is_string(), "{bad}: {body}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn unsupported_content_type_and_encoding_get_415() {
    let server = TestServer::start(memory_store(), &[]).await;
    let response = server.post("/api/v1/readings", "text/csv", "a,b\n").await;
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let response = server
        .client
        .post(server.url("/api/v1/readings"))
        .header("content-type", "application/json")
        .header("content-encoding", "br")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    server.shutdown().await;
}

#[tokio::test]
async fn json_document_over_the_body_limit_gets_413() {
    let server = TestServer::start(memory_store(), &["--max-body-bytes", "4KiB"]).await;
    let items: Vec<Value> = (0..200).map(|i| json_reading("s", T0 + i, json!({"v": i}))).collect();
    let (status, body) = post_json(&server, &Value::Array(items)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");

    // Same without a Content-Length: the streamed check catches it too.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..10).map(|_| Ok(vec![b' '; 1024])).collect();
    let response = server
        .client
        .post(server.url("/api/v1/readings"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    server.shutdown().await;
}

fn ndjson(sensor: &str, n: usize) -> String {
    let mut out = String::new();
    for i in 0..n {
        out.push_str(&json_reading(sensor, T0 + i as i64, json!({"v": i})).to_string());
        out.push('\n');
    }
    out
}

#[tokio::test]
async fn ndjson_with_bad_lines_keeps_the_good_ones() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &[]).await;
    let body = format!(
        "{}\nthis is not json\n\n{}\n{}",
        json_reading("n", T0, json!({"v": 1})),
        json_reading("n", T0 + 1, json!({"v": f64::MAX})),
        // Last line without a newline still counts.
        json_reading("n", T0 + 2, json!({"v": 3})),
    );
    let response = server.post("/api/v1/readings", "application/x-ndjson", body).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["accepted"], 3, "{body}");
    assert_eq!(body["rejected_count"], 1, "{body}");
    // Line indexes are 0-based and count blank lines.
    assert_eq!(body["rejected"][0]["index"], 1, "{body}");
    server.shutdown().await;
    assert_eq!(stored(&*store, "n").await.len(), 3);
}

#[tokio::test]
async fn ndjson_is_streamed_past_the_body_limit() {
    let store = memory_store();
    // The body is ~40x the limit: accepted only because NDJSON is never held whole.
    let server = TestServer::start(store.clone(), &["--max-body-bytes", "64KiB"]).await;
    let n = 50_000;
    let body = ndjson("big", n);
    assert!(body.len() > 40 * 64 * 1024);
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        body.as_bytes().chunks(8 * 1024).map(|c| Ok(c.to_vec())).collect();
    let response = server
        .client
        .post(server.url("/api/v1/readings"))
        .header("content-type", "application/x-ndjson")
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({"accepted": n}));
    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
    assert_eq!(stored(&*store, "big").await.len(), n);
}

#[tokio::test]
async fn gzip_ndjson_and_gzip_json_are_accepted() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &[]).await;
    let gzip = |data: &[u8]| {
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    };
    let response = server
        .client
        .post(server.url("/api/v1/readings"))
        .header("content-type", "application/x-ndjson")
        .header("content-encoding", "gzip")
        .body(gzip(ndjson("gz", 5000).as_bytes()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    assert_eq!(response.json::<Value>().await.unwrap()["accepted"], 5000);

    let doc = json_reading("gz", T0 + 10_000, json!({"v": 1})).to_string();
    let response = server
        .client
        .post(server.url("/api/v1/readings"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(gzip(doc.as_bytes()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);

    let response = server
        .client
        .post(server.url("/api/v1/readings"))
        .header("content-type", "application/x-ndjson")
        .header("content-encoding", "gzip")
        .body("definitely not gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    server.shutdown().await;
    assert_eq!(stored(&*store, "gz").await.len(), 5001);
}
