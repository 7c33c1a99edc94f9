//! The write routes' request timeout and concurrency limit, through real sockets.

use std::time::Duration;

use futures::StreamExt;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::server::{TestServer, memory_store, within};

/// A body that sends one line, then stalls until `go` resolves, then sends another.
fn stalling_body(go: impl std::future::Future<Output = ()> + Send + 'static) -> reqwest::Body {
    let first = futures::stream::once(async { Ok::<_, std::io::Error>(b"m v=1\n".to_vec()) });
    let rest = futures::stream::once(async move {
        go.await;
        Ok::<_, std::io::Error>(b"m v=2\n".to_vec())
    });
    reqwest::Body::wrap_stream(first.chain(rest))
}

#[tokio::test]
async fn a_write_that_takes_too_long_gets_408() {
    let server = TestServer::start(memory_store(), &["--request-timeout", "300ms"]).await;
    // The body never ends: only the request timeout can answer.
    let body = stalling_body(std::future::pending());
    let response = within(
        "the timed-out request",
        30,
        server.client.post(server.url("/write")).body(body).send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    assert!(response.json::<Value>().await.unwrap()["error"].is_string());
    server.shutdown().await;
}

/// Found by the OpenAPI fuzz run's review: the timeout and load shedding answered every write
/// route in bucketd's own shape, where `/api/v2/write` documents (and InfluxDB 2.x clients
/// read) `{"code", "message"}`.
#[tokio::test]
async fn a_v2_write_that_takes_too_long_gets_408_in_the_v2_shape() {
    let server = TestServer::start(memory_store(), &["--request-timeout", "300ms"]).await;
    // The body never ends: only the request timeout can answer.
    let body = stalling_body(std::future::pending());
    let response = within(
        "the timed-out request",
        30,
        server.client.post(server.url("/api/v2/write")).body(body).send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::REQUEST_TIMEOUT);
    let body = response.json::<Value>().await.unwrap();
    assert_eq!(body["code"], "request timeout", "{body}");
    assert!(body["message"].as_str().unwrap().contains("did not complete"), "{body}");
    server.shutdown().await;
}

#[tokio::test]
async fn writes_over_the_concurrency_limit_are_shed_with_503() {
    let server = TestServer::start(
        memory_store(),
        &["--max-concurrent-writes", "1", "--request-timeout", "60s"],
    )
    .await;
    // The first write holds the only slot while its body stalls, until the test lets it go.
    let (go, stalled) = tokio::sync::oneshot::channel::<()>();
    let body = stalling_body(async move {
        let _ = stalled.await;
    });
    let slow = tokio::spawn(server.client.post(server.url("/write")).body(body).send());

    // Until the slow write holds the slot, a probe takes it itself and gets its ordinary
    // answer (400: "{}" is not a reading); once the slot is held, it is shed.
    let response = within("a write to be shed", 30, async {
        loop {
            let response = server.post("/api/v1/readings", "application/json", "{}").await;
            match response.status() {
                StatusCode::SERVICE_UNAVAILABLE => break response,
                StatusCode::BAD_REQUEST => tokio::time::sleep(Duration::from_millis(10)).await,
                other => panic!("unexpected status {other}"),
            }
        }
    })
    .await;
    assert_eq!(response.headers()["retry-after"], "1");
    // Cheap routes are outside the limit.
    assert_eq!(server.get("/ping").await.status(), StatusCode::NO_CONTENT);
    assert_eq!(server.get("/health").await.status(), StatusCode::OK);

    // Still shed while the slot is held.
    let response = server.post("/write", "text/plain", "m v=4\n").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);

    go.send(()).unwrap();
    let slow = within("the slow write", 30, slow).await.unwrap().unwrap();
    assert_eq!(slow.status(), StatusCode::NO_CONTENT);
    // The slot is free again.
    let response = server.post("/write", "text/plain", "m v=3\n").await;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    server.shutdown().await;
}

#[tokio::test]
async fn new_series_past_the_cardinality_limit_are_refused_per_item() {
    let server = TestServer::start(memory_store(), &["--max-series", "2"]).await;
    let body = serde_json::json!([
        {"sensor": "s1", "fields": {"v": 1}},
        {"sensor": "s2", "fields": {"v": 2}},
        {"sensor": "s3", "fields": {"v": 3}},
        {"sensor": "s1", "fields": {"v": 4}},
    ]);
    let response = server.post("/api/v1/readings", "application/json", body.to_string()).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["accepted"], 3, "{body}");
    assert_eq!(body["rejected_count"], 1, "{body}");
    assert_eq!(body["rejected"][0]["index"], 2, "{body}");
    let message = body["rejected"][0]["error"].as_str().unwrap();
    assert!(message.contains("new series refused") && message.contains("--max-series"), "{body}");

    // Line protocol: known series pass, a new one is a rejected line of a partial write.
    let response = server.post("/write", "text/plain", "s2 v=5\ns4 v=6\ns1 v=7\n").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let message = response.json::<Value>().await.unwrap()["error"].as_str().unwrap().to_owned();
    assert!(message.starts_with("partial write: 1 line(s) rejected, 2 reading(s)"), "{message}");
    assert!(message.contains("line 2") && message.contains("new series refused"), "{message}");
    assert_eq!(server.buffers.buffered(), 5);

    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(metrics.contains("reason=\"cardinality\""), "{metrics}");
    server.shutdown().await;
}
