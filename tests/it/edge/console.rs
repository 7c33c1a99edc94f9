//! The web console through real sockets: the page and its assets (types, headers, weight),
//! served without a token while the data needs one, and `/api/v1/status` following the
//! server's state.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::server::{FlakyStore, TestServer, json_reading, memory_store};

const TOKEN: &str = "console-token";

/// The page, its script and its style sheet, with the type each must be served with.
const ASSETS: [(&str, &str); 3] =
    [("/", "text/html"), ("/console/app.js", "text/javascript"), ("/console/app.css", "text/css")];

#[tokio::test]
async fn the_page_and_its_assets_are_served_with_their_types_and_a_strict_policy() {
    let server = TestServer::start(memory_store(), &[]).await;
    let mut total = 0;
    for (path, content_type) in ASSETS {
        let r = server.get(path).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        let h = r.headers().clone();
        let ct = h["content-type"].to_str().unwrap();
        assert!(ct.starts_with(content_type), "{path}: {ct}");
        assert_eq!(h["cache-control"], "no-cache", "{path}");
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("default-src 'self'"), "{path}: {csp}");
        assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
        let body = r.bytes().await.unwrap();
        total += body.len();
        if path == "/" {
            let html = std::str::from_utf8(&body).unwrap();
            assert!(html.starts_with("<!doctype html>"), "{html}");
            assert!(html.contains(r#"<script src="/console/app.js""#));
            // No inline script (the policy would block it), nothing from another host.
            assert_eq!(html.matches("<script").count(), 1, "{html}");
            assert!(!html.contains("http://") && !html.contains("https://"), "{html}");
            for id in ["sensor-list", "chart", "token-dialog", "data-table", "csv-link"] {
                assert!(html.contains(&format!("id=\"{id}\"")), "#{id} missing");
            }
        } else {
            let text = std::str::from_utf8(&body).unwrap();
            assert!(!text.contains("https://") && !text.contains("//cdn"), "{path}");
        }
    }
    assert!(total < 200 * 1024, "the console weighs {total} bytes");
    assert_eq!(
        total,
        bucketd::api::console::INDEX_HTML.len()
            + bucketd::api::console::APP_JS.len()
            + bucketd::api::console::APP_CSS.len()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_page_loads_without_a_token_but_the_status_needs_one() {
    let server = TestServer::start(memory_store(), &["--auth-token", TOKEN]).await;
    for (path, _) in ASSETS {
        assert_eq!(server.get(path).await.status(), StatusCode::OK, "{path}");
    }
    let refused = server.get("/api/v1/status").await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    for path in ["/api/v1/sensors", "/api/v1/readings?sensor=s"] {
        assert_eq!(server.get(path).await.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    let ok = server
        .client
        .get(server.url("/api/v1/status"))
        .header("authorization", format!("Token {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    server.shutdown().await;
}

async fn status(server: &TestServer) -> Value {
    let r = server.get("/api/v1/status").await;
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.unwrap()
}

/// Polls the status until `cond` holds (a state, not a time); fails after a generous deadline.
async fn status_until(server: &TestServer, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let s = status(server).await;
        if cond(&s) {
            return s;
        }
        assert!(tokio::time::Instant::now() < deadline, "never {what}: {s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_status_follows_writes_flushes_and_store_failures() {
    let flaky = FlakyStore::new(memory_store());
    let server = TestServer::start(
        flaky.clone(),
        &["--max-buffered-readings", "1000", "--flush-interval", "1h"],
    )
    .await;
    let before = status(&server).await;
    assert_eq!(before["store"], json!({"name": "flaky", "ready": true}));
    assert_eq!(before["readings_accepted_total"], 0);
    assert_eq!(before["buffered"]["readings"], 0);
    assert_eq!(before["buffered"]["bytes"], 0);
    assert_eq!(before["buffered"]["bound_bytes"], 384 << 20, "three quarters of the default");
    assert_eq!(before["wal"]["unsettled_readings"], 0);
    assert_eq!(before["flush_errors_total"], 0);

    // With the store down, the write is logged and buffered and its flush fails.
    flaky.set_down(true);
    let body = json!([
        json_reading("s1", 1_700_000_000_000, json!({"v": 1.0})),
        json_reading("s1", 1_700_000_000_001, json!({"v": 2.0})),
        json_reading("s2", 1_700_000_000_000, json!({"v": 3.0})),
    ]);
    let r = server.post("/api/v1/readings", "application/json", body.to_string()).await;
    assert!(r.status().is_success(), "{}", r.status());
    let s = status(&server).await;
    assert_eq!(s["readings_accepted_total"], 3, "{s}");
    assert_eq!(s["buffered"]["readings"], 3, "{s}");
    assert_eq!(s["wal"]["unsettled_readings"], 3, "{s}");
    assert!(s["wal"]["bytes"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["series"], 2, "{s}");
    assert_eq!(s["store"]["ready"], false, "{s}");
    assert!(s["store"]["reason"].as_str().unwrap().contains("test outage"), "{s}");
    // No more writes come in, so the flusher writes what it holds (and fails).
    status_until(&server, "a flush error is counted", |s| {
        s["flush_errors_total"].as_u64().unwrap() > 0
    })
    .await;

    // The store back: the readings land and the log settles them.
    flaky.set_down(false);
    let s = status_until(&server, "the buffers and the log are empty", |s| {
        s["buffered"]["readings"] == 0 && s["wal"]["unsettled_readings"] == 0
    })
    .await;
    assert_eq!(s["store"]["ready"], true, "{s}");
    assert_eq!(s["readings_accepted_total"], 3, "{s}");
    server.shutdown().await;
}

#[tokio::test]
async fn without_a_log_the_status_says_so() {
    let server = TestServer::start(memory_store(), &["--ack", "buffered"]).await;
    let s = status(&server).await;
    assert_eq!(s["wal"], Value::Null, "{s}");
    assert_eq!(s["store"]["name"], "memory", "{s}");
    server.shutdown().await;
}
