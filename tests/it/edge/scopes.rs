//! Scoped tokens from the outside: each endpoint family (writes, REST queries, `/query`,
//! status and metrics, the console's calls, administration) refuses a token without the
//! scope, in the route's own error shape and without a byte of data; expired and revoked
//! tokens are refused without a restart; and `bucketd token` (the real binary) prints a token
//! once and keeps it out of its files and the server's logs.

use std::path::Path;
use std::time::{Duration, Instant};

use bucketd::tokens::{Scope, create, revoke};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use crate::support::binary::Bucketd;
use crate::support::server::{TestServer, memory_store};

const PATIENCE: Duration = Duration::from_secs(60);

struct Tokens {
    reader: String,
    writer: String,
    admin: String,
    expired: String,
}

fn make_tokens(store: &Path) -> Tokens {
    let past = chrono::Utc::now() - chrono::Duration::seconds(1);
    Tokens {
        reader: create(store, "grafana", &[Scope::Read], None).unwrap(),
        writer: create(store, "sensors", &[Scope::Write], None).unwrap(),
        admin: create(store, "ops", &[Scope::Admin], None).unwrap(),
        expired: create(store, "last-year", &[Scope::Read, Scope::Write], Some(past)).unwrap(),
    }
}

async fn send(
    server: &TestServer,
    token: Option<&str>,
    (method, path, body): (Method, &str, &str),
) -> (StatusCode, String) {
    let mut r = server.client.request(method, server.url(path));
    if let Some(t) = token {
        r = r.header("authorization", format!("Token {t}"));
    }
    if !body.is_empty() {
        let kind = if body.starts_with('{') { "application/json" } else { "text/plain" };
        r = r.header("content-type", kind).body(body.to_owned());
    }
    if path.starts_with("/api/v1/write") {
        r = r.header("content-encoding", "snappy");
    }
    let response = r.send().await.unwrap();
    (response.status(), response.text().await.unwrap())
}

/// The error message of a refusal, whichever shape the route answers in.
fn message(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    v["error"].as_str().or(v["message"].as_str()).unwrap_or_default().to_owned()
}

/// Every protected family: the request, and the scope it needs.
fn families() -> Vec<((Method, &'static str, &'static str), Scope)> {
    use Method as M;
    vec![
        ((M::POST, "/api/v1/readings", r#"{"sensor":"s1","fields":{"v":1}}"#), Scope::Write),
        ((M::POST, "/write?db=bucketd", "m,sensor=s1 v=2"), Scope::Write),
        ((M::POST, "/api/v2/write?org=o&bucket=bucketd", "m,sensor=s1 v=3"), Scope::Write),
        // An empty remote-write request, snappy-compressed: one byte, its length 0.
        ((M::POST, "/api/v1/write?db=bucketd", "\0"), Scope::Write),
        ((M::POST, "/v1/metrics", r#"{"resourceMetrics": []}"#), Scope::Write),
        ((M::GET, "/api/v1/readings?sensor=s1", ""), Scope::Read),
        ((M::GET, "/api/v1/rollups?sensor=s1&step=1h", ""), Scope::Read),
        ((M::GET, "/api/v1/sensors", ""), Scope::Read),
        ((M::GET, "/api/v1/status", ""), Scope::Read),
        ((M::GET, "/query?q=SELECT%20*%20FROM%20m", ""), Scope::Read),
        ((M::GET, "/query?q=SHOW%20DATABASES", ""), Scope::Read),
        ((M::GET, "/query?q=SHOW%20MEASUREMENTS", ""), Scope::Read),
        ((M::POST, "/query?q=CREATE%20DATABASE%20telegraf", ""), Scope::Write),
        ((M::GET, "/metrics", ""), Scope::Read),
        ((M::GET, "/health", ""), Scope::Read),
        ((M::POST, "/api/v1/dead-letters/replay", ""), Scope::Admin),
    ]
}

#[tokio::test]
async fn each_family_refuses_a_token_without_its_scope_and_shows_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tokens.json");
    let t = make_tokens(&store);
    let server = TestServer::start(
        memory_store(),
        &["--token-store", store.to_str().unwrap(), "--auth-metrics"],
    )
    .await;
    // Something to be seen, or not.
    for (request, _) in &families()[..2] {
        let (status, body) = send(&server, Some(&t.writer), request.clone()).await;
        assert!(status.is_success(), "{status} {body}");
    }

    for (request, needs) in families() {
        let what = format!("{} {}", request.0, request.1);
        let allowed = |scope: Scope| scope == Scope::Admin || scope == needs;
        for (token, scope) in
            [(&t.reader, Scope::Read), (&t.writer, Scope::Write), (&t.admin, Scope::Admin)]
        {
            let (status, body) = send(&server, Some(token), request.clone()).await;
            if allowed(scope) {
                assert!(status.is_success(), "{what} with {scope:?}: {status} {body}");
                continue;
            }
            assert_eq!(status, StatusCode::FORBIDDEN, "{what} with {scope:?}: {body}");
            let m = message(&body);
            assert!(m.contains("forbidden") && m.contains("may not"), "{what}: {body}");
            assert!(!body.contains("s1") && !body.contains("\"m\""), "{what} shows data: {body}");
            if request.1.starts_with("/api/v2/") {
                let v: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["code"], "forbidden", "{what}: InfluxDB 2's shape");
            }
        }
        let (status, body) = send(&server, None, request.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what} without a token: {body}");
        let (status, body) = send(&server, Some(&t.expired), request.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what} expired: {body}");
        if !request.1.starts_with("/write") && !request.1.starts_with("/query") {
            assert!(message(&body).contains("expired"), "{what}: {body}");
        }
    }
    // A query that mixes a read with a create is refused whole to a writer.
    let mixed = (Method::POST, "/query?q=CREATE%20DATABASE%20a%3B%20SHOW%20DATABASES", "");
    assert_eq!(send(&server, Some(&t.writer), mixed).await.0, StatusCode::FORBIDDEN);
    server.shutdown().await;
}

#[tokio::test]
async fn created_and_revoked_tokens_take_effect_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tokens.json");
    // No store yet and no token flag: open.
    let server =
        TestServer::start(memory_store(), &["--token-store", store.to_str().unwrap()]).await;
    let sensors = (Method::GET, "/api/v1/sensors", "");
    assert_eq!(send(&server, None, sensors.clone()).await.0, StatusCode::OK);

    let reader = create(&store, "grafana", &[Scope::Read], None).unwrap();
    let wait_for = |token: Option<String>, want: StatusCode| {
        let (server, sensors) = (&server, sensors.clone());
        async move {
            let start = Instant::now();
            loop {
                let (status, _) = send(server, token.as_deref(), sensors.clone()).await;
                if status == want {
                    return;
                }
                assert!(start.elapsed() < PATIENCE, "never {want}; last {status}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    // The store now exists: authentication is on, and the new token works.
    wait_for(None, StatusCode::UNAUTHORIZED).await;
    assert_eq!(send(&server, Some(&reader), sensors.clone()).await.0, StatusCode::OK);

    revoke(&store, "grafana").unwrap();
    wait_for(Some(reader.clone()), StatusCode::UNAUTHORIZED).await;
    // Revoking the last token leaves authentication on.
    assert_eq!(send(&server, None, sensors).await.0, StatusCode::UNAUTHORIZED);
    server.shutdown().await;
}

fn bucketd_token(data_dir: &Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bucketd"))
        .arg("token")
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("bucketd runs");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// Every byte under `dir`, for looking for a secret in it.
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(all_bytes(&path));
        } else {
            out.extend(std::fs::read(&path).unwrap_or_default());
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_command_prints_a_token_once_and_no_file_or_log_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (ok, token, note) = bucketd_token(&data, &["create", "gateway", "--scope", "write,read"]);
    assert!(ok, "{note}");
    let token = token.trim().to_owned();
    assert!(token.starts_with("bkd_"), "{token}");
    assert!(note.contains("shown this once"), "{note}");
    let (ok, _, note) = bucketd_token(&data, &["create", "gateway", "--scope", "read"]);
    assert!(!ok && note.contains("exists already"), "{note}");
    let (ok, _, note) = bucketd_token(&data, &["create", "x"]);
    assert!(!ok && note.contains("--scope"), "a scope is required: {note}");
    let far = ["create", "x", "--scope", "read", "--expires-in", "100000000years"];
    let (ok, _, note) = bucketd_token(&data, &far);
    assert!(!ok && note.contains("--expires-in"), "{note}");
    let (ok, _, note) =
        bucketd_token(&data, &["create", "soon", "--scope", "read", "--expires-in", "1h"]);
    assert!(ok, "{note}");
    let (_, listed, _) = bucketd_token(&data, &["list"]);
    let year = chrono::Utc::now().format("%Y").to_string();
    assert!(listed.lines().any(|l| l.starts_with("soon") && l.contains(&year)), "{listed}");
    let scoped = ["create", "lab", "--scope", "read:lab,write:lab", "--scope", "read:tele"];
    let (ok, _, note) = bucketd_token(&data, &scoped);
    assert!(ok && note.contains("read:lab, write:lab, read:tele"), "{note}");
    let (ok, _, note) = bucketd_token(&data, &["create", "y", "--scope", "admin:lab"]);
    assert!(!ok && note.contains("admin is on every database"), "{note}");
    let (ok, _, note) = bucketd_token(&data, &["create", "y", "--scope", "read:a/b"]);
    assert!(!ok && note.contains("invalid database name"), "{note}");
    let (ok, listed, _) = bucketd_token(&data, &["list"]);
    assert!(ok && listed.contains("gateway") && listed.contains("read, write"), "{listed}");
    assert!(listed.lines().any(|l| l.starts_with("lab") && l.contains("write:lab")), "{listed}");
    assert!(!listed.contains(&token));

    // The server, logging everything it logs, takes the token, a wrong one, and the token
    // as InfluxDB 1.x's `p` parameter.
    let log = dir.path().join("server.log");
    let mut server = Bucketd::spawn_logged_at(&data, "100ms", &[], Some(&log), "debug");
    let client = reqwest::Client::new();
    server.wait_listening().await;
    let write = |auth: String, query: &str| {
        client
            .post(format!("{}/write?db=bucketd{query}", server.base))
            .header("authorization", auth)
            .body("m,sensor=a v=1")
            .send()
    };
    assert_eq!(write(format!("Token {token}"), "").await.unwrap().status(), 204);
    assert_eq!(write(format!("Token {token}x"), "").await.unwrap().status(), 401);
    let v1 = client
        .post(format!("{}/write?db=bucketd&u=me&p={token}", server.base))
        .body("m,sensor=a v=2")
        .send()
        .await
        .unwrap();
    assert_eq!(v1.status(), 204);
    let (ok, _, note) = bucketd_token(&data, &["revoke", "gateway"]);
    assert!(ok, "{note}");
    let start = Instant::now();
    while write(format!("Token {token}"), "").await.unwrap().status() != 401 {
        assert!(start.elapsed() < PATIENCE, "the revoked token still works");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(server.terminate().success());

    let logged = std::fs::read(&log).unwrap();
    assert!(!logged.is_empty());
    assert!(!contains(&logged, &token), "the token is in the server's log");
    assert!(!contains(&all_bytes(&data), &token), "the token is in a file of the data directory");
    let (_, listed, _) = bucketd_token(&data, &["list"]);
    assert!(!listed.contains("gateway"), "{listed}");
}

/// Tokens scoped to one database: each family refuses them on every other database (the
/// default one included) with a 403 that shows nothing of it, and whole-server routes refuse
/// them too; what they may read lists only their database; a database that does not exist
/// is refused the same way, so its absence is not shown either.
#[tokio::test]
async fn a_token_scoped_to_a_database_sees_and_touches_only_that_one() {
    use bucketd::tokens::ScopeSpec;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("tokens.json");
    let spec = |s: &str| -> ScopeSpec { s.parse().unwrap() };
    let admin = create(&store, "ops", &[Scope::Admin], None).unwrap();
    let writer = create(&store, "telegraf", &[spec("write:telegraf")], None).unwrap();
    let reader = create(&store, "dash", &[spec("read:sensors")], None).unwrap();
    let server = TestServer::start(
        memory_store(),
        &["--token-store", store.to_str().unwrap(), "--auth-metrics"],
    )
    .await;
    use Method as M;
    for db in ["telegraf", "sensors"] {
        let q = format!("/query?q=CREATE%20DATABASE%20{db}");
        assert_eq!(send(&server, Some(&admin), (M::POST, &q, "")).await.0, StatusCode::OK);
        let w = format!("/write?db={db}");
        let line = format!("secret_{db},host=h{db} v=1");
        assert_eq!(send(&server, Some(&admin), (M::POST, &w, &line)).await.0, 204);
    }
    let default_line = "secret_default,host=hdefault v=1";
    assert_eq!(send(&server, Some(&admin), (M::POST, "/write", default_line)).await.0, 204);

    let allowed: &[(&str, (M, &str, &str))] = &[
        (&writer, (M::POST, "/write?db=telegraf", "m,host=a v=1")),
        (&writer, (M::POST, "/api/v2/write?org=o&bucket=telegraf", "m,host=a v=2")),
        (&writer, (M::POST, "/api/v1/readings?db=telegraf", r#"{"sensor":"m","value":3}"#)),
        (&writer, (M::POST, "/query?db=telegraf&q=CREATE%20DATABASE%20telegraf", "")),
        (&reader, (M::GET, "/api/v1/sensors?db=sensors", "")),
        (
            &reader,
            (M::GET, "/api/v1/readings?db=sensors&sensor=secret_sensors,host%3Dhsensors", ""),
        ),
        (
            &reader,
            (
                M::GET,
                "/api/v1/rollups?db=sensors&sensor=secret_sensors,host%3Dhsensors&step=1h",
                "",
            ),
        ),
        (&reader, (M::GET, "/query?db=sensors&q=SELECT%20*%20FROM%20secret_sensors", "")),
        (&reader, (M::GET, "/query?q=SHOW%20MEASUREMENTS%20ON%20sensors", "")),
    ];
    for (token, request) in allowed {
        let (status, body) = send(&server, Some(token), request.clone()).await;
        assert!(status.is_success(), "{} {}: {status} {body}", request.0, request.1);
    }
    let refused: &[(&str, (M, &str, &str))] = &[
        (&writer, (M::POST, "/write?db=sensors", "m,host=a v=1")),
        (&writer, (M::POST, "/write", "m,host=a v=1")),
        (&writer, (M::POST, "/api/v2/write?org=o&bucket=sensors", "m,host=a v=2")),
        (&writer, (M::POST, "/api/v1/readings?db=sensors", r#"{"sensor":"m","value":3}"#)),
        (&writer, (M::POST, "/api/v1/readings", r#"{"sensor":"m","value":3}"#)),
        (&writer, (M::GET, "/api/v1/sensors?db=telegraf", "")),
        (&writer, (M::POST, "/query?q=CREATE%20DATABASE%20other", "")),
        (&writer, (M::GET, "/query?db=telegraf&q=SHOW%20MEASUREMENTS", "")),
        (&reader, (M::GET, "/api/v1/sensors?db=telegraf", "")),
        (&reader, (M::GET, "/api/v1/sensors", "")),
        (&reader, (M::GET, "/api/v1/sensors?db=nope", "")),
        (
            &reader,
            (M::GET, "/api/v1/readings?db=telegraf&sensor=secret_telegraf,host%3Dhtelegraf", ""),
        ),
        (&reader, (M::GET, "/api/v1/rollups?sensor=secret_default,host%3Dhdefault&step=1h", "")),
        (&reader, (M::GET, "/query?db=telegraf&q=SELECT%20*%20FROM%20secret_telegraf", "")),
        (&reader, (M::GET, "/query?q=SELECT%20*%20FROM%20secret_default", "")),
        (
            &reader,
            (M::GET, "/query?db=sensors&q=SELECT%20*%20FROM%20%22telegraf%22..secret_telegraf", ""),
        ),
        (&reader, (M::GET, "/query?q=SHOW%20MEASUREMENTS%20ON%20telegraf", "")),
        (&reader, (M::GET, "/query?db=nope&q=SHOW%20MEASUREMENTS", "")),
        (&reader, (M::POST, "/write?db=sensors", "m,host=a v=1")),
        (&reader, (M::GET, "/api/v1/status", "")),
        (&reader, (M::GET, "/metrics", "")),
        (&reader, (M::POST, "/api/v1/dead-letters/replay", "")),
    ];
    for (token, request) in refused {
        let what = format!("{} {}", request.0, request.1);
        let (status, body) = send(&server, Some(token), request.clone()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{what}: {body}");
        assert!(message(&body).contains("may not"), "{what}: {body}");
        for secret in ["secret_", "htelegraf", "hdefault", "not found"] {
            assert!(!body.contains(secret), "{what} shows {secret}: {body}");
        }
    }
    // What the reader lists is its database's only.
    let (_, body) = send(&server, Some(&reader), (M::GET, "/query?q=SHOW%20DATABASES", "")).await;
    let shown: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(shown["results"][0]["series"][0]["values"], serde_json::json!([["sensors"]]));
    let (_, body) = send(&server, Some(&reader), (M::GET, "/api/v1/sensors?db=sensors", "")).await;
    assert!(body.contains("secret_sensors") && !body.contains("secret_telegraf"), "{body}");
    server.shutdown().await;
}
