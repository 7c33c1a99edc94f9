//! Operational and compatibility endpoints through real sockets: /health, /ready, /metrics,
//! /ping, /query, unknown routes, and the binary's --help.

use std::io::Write;
use std::process::{Command, Stdio};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::server::{
    FlakyStore, HangingPingStore, TestServer, json_reading, memory_store,
};

#[tokio::test]
async fn health_and_ready() {
    let flaky = FlakyStore::new(memory_store());
    let server = TestServer::start(flaky.clone(), &[]).await;

    let health = server.get("/health").await;
    assert_eq!(health.status(), StatusCode::OK);

    let ready = server.get("/ready").await;
    assert_eq!(ready.status(), StatusCode::OK);
    assert_eq!(ready.json::<Value>().await.unwrap()["store"], "flaky");

    flaky.set_down(true);
    let ready = server.get("/ready").await;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = ready.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("test outage"), "{body}");
    // Liveness does not depend on the store.
    assert_eq!(server.get("/health").await.status(), StatusCode::OK);

    flaky.set_down(false);
    assert_eq!(server.get("/ready").await.status(), StatusCode::OK);
    server.shutdown().await;
}

#[tokio::test]
async fn ready_times_out_a_hanging_store() {
    let server =
        TestServer::start(std::sync::Arc::new(HangingPingStore(memory_store())), &[]).await;
    let start = std::time::Instant::now();
    let ready = server.get("/ready").await;
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
    server.shutdown().await;
}

#[tokio::test]
async fn ping_answers_like_influxdb() {
    let server = TestServer::start(memory_store(), &[]).await;
    for request in [server.client.get(server.url("/ping")), server.client.head(server.url("/ping"))]
    {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
        let version = response.headers()["x-influxdb-version"].to_str().unwrap();
        assert!(version.starts_with("1.8"), "{version}");
        assert_eq!(response.headers()["x-influxdb-build"], "OSS");
    }
    server.shutdown().await;
}

/// Telegraf's start-up `CREATE DATABASE` stays a no-op success on `/query` (now InfluxQL), in
/// every form Telegraf and the Influx clients send it; a request without `q` is a 400.
#[tokio::test]
async fn query_answers_create_database_as_telegraf_sends_it() {
    let server = TestServer::start(memory_store(), &[]).await;

    // As Telegraf sends it: form body.
    let response = server
        .post("/query", "application/x-www-form-urlencoded", "q=CREATE+DATABASE+%22telegraf%22")
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.json::<Value>().await.unwrap(), json!({"results": [{"statement_id": 0}]}));

    // In the URL, GET and POST.
    let response = server.get("/query?q=create%20database%20mydb").await;
    assert_eq!(response.status(), StatusCode::OK);
    let response =
        server.client.post(server.url("/query?q=CREATE%20DATABASE%20x")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    // Anything that writes is refused in its statement's error.
    let response = server.get("/query?q=DROP%20DATABASE%20x").await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert!(body["results"][0]["error"].as_str().unwrap().contains("read-only"), "{body}");

    let response = server.get("/query").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_routes_get_404_in_bucketd_format_and_a_bounded_label() {
    let server = TestServer::start(memory_store(), &[]).await;
    let response = server.get("/no/such/path/8f3a1c").await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert!(response.json::<Value>().await.unwrap()["error"].is_string());

    // Wrong method on a known route: 405, labelled by the route.
    let response = server.get("/write").await;
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);

    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(!metrics.contains("8f3a1c"), "raw URI leaked into metrics");
    assert!(
        metrics.contains(r#"bucketd_http_requests_total{route="unmatched",status="404"}"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"bucketd_http_requests_total{route="/write",status="405"}"#),
        "{metrics}"
    );
    server.shutdown().await;
}

/// `.ci/run` installs promtool (Debian package `prometheus`); without it this test fails rather
/// than pass without checking anything.
#[tokio::test]
async fn metrics_pass_promtool() {
    let server = TestServer::start(memory_store(), &[]).await;
    // Some traffic so that counters, gauges and histograms all have samples.
    server.get("/health").await;
    server.get("/nope").await;
    let body = json_reading("promtool-sensor", 1_700_000_000_000, json!({"v": 1.5}));
    server.post("/api/v1/readings", "application/json", body.to_string()).await;
    server.post("/write", "text/plain", "cpu,host=a usage=1 1700000000000000000\nbad line\n").await;

    let response = server.get("/metrics").await;
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    let text = response.text().await.unwrap();
    for name in [
        "bucketd_http_requests_total",
        "bucketd_http_request_duration_seconds_bucket",
        "bucketd_readings_accepted_total",
        "bucketd_readings_rejected_total",
        "bucketd_received_bytes_total",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    assert!(text.contains(r#"route="/api/v1/readings""#), "{text}");

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool not found on PATH: install it (Debian: apt-get install prometheus); \
             .ci/run installs it",
        );
    promtool.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n--- metrics ---\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    server.shutdown().await;
}

#[test]
fn help_lists_every_flag_with_its_default_and_env() {
    let out = Command::new(env!("CARGO_BIN_EXE_bucketd")).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let expected = [
        ("--http-addr", Some("127.0.0.1:8080")),
        ("--tcp-addr", None),
        ("--data-dir", Some("./bucketd-data")),
        ("--mongodb-uri", None),
        ("--mongodb-database", Some("bucketd")),
        ("--retention", None),
        ("--flush-interval", Some("60s")),
        ("--compact-after-quiet", Some("10s")),
        ("--bucket-max-readings", Some("1000")),
        ("--bucket-max-bytes", Some("128000")),
        ("--memory-budget", Some("512MiB")),
        ("--shutdown-timeout", Some("30s")),
        ("--max-body-bytes", Some("32MiB")),
        ("--request-timeout", Some("60s")),
        ("--max-concurrent-writes", Some("512")),
        ("--max-tcp-connections", Some("1000")),
        ("--tcp-idle-timeout", Some("5m")),
        ("--log-format", Some("text")),
    ];
    // clap prints each flag's section from its name to the next flag; check within it.
    for (flag, default) in expected {
        let start =
            help.find(&format!("{flag} ")).unwrap_or_else(|| panic!("{flag} missing:\n{help}"));
        let section = &help[start..];
        let end = section[2..].find("\n  -").map_or(section.len(), |i| i + 2);
        let section = &section[..end];
        let env =
            format!("BUCKETD_{}", flag.trim_start_matches("--").replace('-', "_").to_uppercase());
        assert!(section.contains(&format!("[env: {env}")), "{flag}: no env twin shown:\n{section}");
        if let Some(default) = default {
            assert!(
                section.contains(&format!("[default: {default}]")),
                "{flag}: no default:\n{section}"
            );
        }
    }
}

#[test]
fn bad_flags_are_refused_with_a_clear_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_bucketd"))
        .args(["--bucket-max-bytes", "20000000"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--bucket-max-bytes") && err.contains("16 MiB"), "{err}");
}

#[tokio::test]
async fn the_query_api_shares_the_readings_path_with_ingest() {
    let server = TestServer::start(memory_store(), &["--flush-interval", "1h"]).await;
    let t0 = 1_700_000_000_000i64;
    let body = json_reading("qshare", t0, json!({"v": 2.5}));
    let response = server.post("/api/v1/readings", "application/json", body.to_string()).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);

    // Still buffered (flush interval 1h): the query merges unflushed readings.
    let response = server
        .get(&format!("/api/v1/readings?sensor=qshare&from={t0}&to={}&format=ndjson", t0 + 1))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    assert!(text.contains("2.5"), "{text}");
    assert_eq!(server.get("/api/v1/openapi.json").await.status(), StatusCode::OK);

    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(r#"bucketd_http_requests_total{route="/api/v1/readings",status="200"}"#),
        "query routes are not counted:\n{metrics}"
    );
    server.shutdown().await;
}
