//! Token authentication through real sockets: every accepted form, 401 in every body shape on
//! every protected route, and the routes that stay open.

use base64::Engine as _;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::server::{TestServer, memory_store};

const TOKEN: &str = "s3cret-token";

/// Every protected route, with a request that succeeds (2xx) when authenticated.
fn protected() -> Vec<(Method, &'static str, &'static str, &'static str)> {
    vec![
        (
            Method::POST,
            "/api/v1/readings",
            "application/json",
            r#"{"sensor":"s1","fields":{"v":1}}"#,
        ),
        (Method::POST, "/write?db=bucketd", "text/plain", "m,sensor=s1 v=1"),
        (Method::POST, "/api/v2/write?org=o&bucket=bucketd", "text/plain", "m,sensor=s1 v=2"),
        (Method::POST, "/query", "application/x-www-form-urlencoded", "q=CREATE+DATABASE+x"),
        // An empty remote-write request, snappy-compressed: one byte, its length 0.
        (Method::POST, "/api/v1/write?db=bucketd", "application/x-protobuf", "\0"),
        (Method::POST, "/v1/metrics", "application/json", r#"{"resourceMetrics": []}"#),
        (Method::GET, "/api/v1/readings?sensor=s1", "", ""),
        (Method::GET, "/api/v1/rollups?sensor=s1&step=1h", "", ""),
        (Method::GET, "/api/v1/sensors", "", ""),
        (Method::GET, "/api/v1/status", "", ""),
    ]
}

fn request(server: &TestServer, route: &(Method, &str, &str, &str)) -> reqwest::RequestBuilder {
    request_with(server, route, "")
}

/// `extra`: more query parameters, e.g. `u=a&p=b`.
fn request_with(
    server: &TestServer,
    (method, path, content_type, body): &(Method, &str, &str, &str),
    extra: &str,
) -> reqwest::RequestBuilder {
    let mut url = server.url(path);
    if !extra.is_empty() {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(extra);
    }
    let mut r = server.client.request(method.clone(), url);
    if !content_type.is_empty() {
        r = r.header("content-type", *content_type).body(body.to_string());
    }
    if path.starts_with("/api/v1/write") {
        r = r.header("content-encoding", "snappy");
    }
    r
}

async fn status_and_body(r: reqwest::RequestBuilder) -> (StatusCode, Option<String>, Value) {
    let response = r.send().await.unwrap();
    let status = response.status();
    let challenge =
        response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned());
    let bytes = response.bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, challenge, body)
}

#[tokio::test]
async fn every_credential_form_is_accepted_on_every_protected_route() {
    let server =
        TestServer::start(memory_store(), &["--auth-token", "other", "--auth-token", TOKEN]).await;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("telegraf:{TOKEN}"));
    for route in protected() {
        let forms: Vec<(&str, reqwest::RequestBuilder)> = vec![
            ("Token", request(&server, &route).header("authorization", format!("Token {TOKEN}"))),
            ("Bearer", request(&server, &route).header("authorization", format!("Bearer {TOKEN}"))),
            ("Basic", request(&server, &route).header("authorization", format!("Basic {basic}"))),
            ("u/p", request_with(&server, &route, &format!("u=telegraf&p={TOKEN}"))),
        ];
        for (form, r) in forms {
            let (status, _, body) = status_and_body(r).await;
            assert!(status.is_success(), "{form} on {} {}: {status} {body}", route.0, route.1);
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn missing_or_wrong_tokens_get_401_in_the_route_shape() {
    let server = TestServer::start(memory_store(), &["--auth-token", TOKEN]).await;
    let wrong = base64::engine::general_purpose::STANDARD.encode("u:nope");
    for route in protected() {
        let attempts: Vec<(&str, reqwest::RequestBuilder)> = vec![
            ("none", request(&server, &route)),
            ("wrong", request(&server, &route).header("authorization", "Token nope")),
            ("prefix", request(&server, &route).header("authorization", "Token s3cret")),
            ("empty", request(&server, &route).header("authorization", "Bearer ")),
            ("basic", request(&server, &route).header("authorization", format!("Basic {wrong}"))),
            ("scheme", request(&server, &route).header("authorization", format!("Digest {TOKEN}"))),
            ("p", request_with(&server, &route, "u=x&p=nope")),
        ];
        for (what, r) in attempts {
            let (status, challenge, body) = status_and_body(r).await;
            let at = format!("{what} on {} {}", route.0, route.1);
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{at}: {body}");
            assert_eq!(challenge.as_deref(), Some("Bearer realm=\"bucketd\""), "{at}");
            let path = route.1.split('?').next().unwrap();
            match path {
                "/write" | "/query" => {
                    assert_eq!(body, json!({ "error": "authorization failed" }), "{at}")
                }
                "/api/v2/write" => {
                    assert_eq!(body["code"], "unauthorized", "{at}");
                    assert!(body["message"].as_str().unwrap().starts_with("unauthorized"), "{at}");
                }
                _ => {
                    let message = body["error"].as_str().unwrap();
                    assert!(message.starts_with("unauthorized: "), "{at}: {message}");
                }
            }
        }
    }
    // Nothing of the refused writes reached the buffers.
    assert_eq!(server.buffers.buffered(), 0);
    let (_, _, body) = status_and_body(request(&server, &protected()[0])).await;
    assert!(body["error"].as_str().unwrap().contains("missing credentials"), "{body}");
    let (_, _, body) =
        status_and_body(request(&server, &protected()[0]).header("authorization", "Token nope"))
            .await;
    assert_eq!(body["error"], "unauthorized: invalid token");
    server.shutdown().await;
}

#[tokio::test]
async fn ping_openapi_and_operations_stay_open() {
    let server = TestServer::start(memory_store(), &["--auth-token", TOKEN]).await;
    assert_eq!(server.get("/ping").await.status(), StatusCode::NO_CONTENT);
    let head = server.client.head(server.url("/ping")).send().await.unwrap();
    assert_eq!(head.status(), StatusCode::NO_CONTENT);
    for path in ["/health", "/ready", "/metrics", "/api/v1/openapi.json"] {
        assert_eq!(server.get(path).await.status(), StatusCode::OK, "{path}");
    }
    // The document says which routes take a token, and how.
    let doc: Value = server.get("/api/v1/openapi.json").await.json().await.unwrap();
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    for scheme in ["token", "bearer", "basic", "influx_v1"] {
        assert!(schemes.contains_key(scheme), "{scheme}");
    }
    assert!(doc["paths"]["/write"]["post"]["responses"]["401"].is_object());
    assert!(doc["paths"]["/api/v1/readings"]["get"]["responses"]["401"].is_object());
    assert!(doc["paths"]["/api/v1/readings"]["get"]["security"].is_array());
    assert!(doc["paths"]["/ping"]["get"]["responses"]["401"].is_null());
    assert!(doc["paths"]["/ping"]["get"]["security"].is_null());
    // Unknown paths are 404 whether or not a token is sent.
    assert_eq!(server.get("/nope").await.status(), StatusCode::NOT_FOUND);
    server.shutdown().await;
}

#[tokio::test]
async fn auth_metrics_protects_operations_but_not_ping() {
    let server =
        TestServer::start(memory_store(), &["--auth-token", TOKEN, "--auth-metrics"]).await;
    for path in ["/health", "/ready", "/metrics"] {
        assert_eq!(server.get(path).await.status(), StatusCode::UNAUTHORIZED, "{path}");
        let ok = server.client.get(server.url(path)).bearer_auth(TOKEN).send().await.unwrap();
        assert_eq!(ok.status(), StatusCode::OK, "{path}");
    }
    assert_eq!(server.get("/ping").await.status(), StatusCode::NO_CONTENT);
    server.shutdown().await;
}

#[tokio::test]
async fn without_tokens_everything_is_open() {
    let server = TestServer::start(memory_store(), &[]).await;
    for route in protected() {
        let (status, _, body) = status_and_body(request(&server, &route)).await;
        assert!(status.is_success(), "{} {}: {status} {body}", route.0, route.1);
    }
    server.shutdown().await;
}

#[tokio::test]
async fn tcp_listener_with_tokens_needs_consent() {
    let config = bucketd::config::Config::from_args([
        "bucketd",
        "--http-addr",
        "127.0.0.1:0",
        "--tcp-addr",
        "127.0.0.1:0",
        "--auth-token",
        TOKEN,
    ])
    .unwrap();
    let err = bucketd::server::Server::bind(config, memory_store()).await.err().unwrap();
    assert!(err.to_string().contains("--tcp-allow-unauthenticated"), "{err}");

    // Protecting the operations routes without a token would be a silent no-op: refused.
    let config = bucketd::config::Config::from_args([
        "bucketd",
        "--http-addr",
        "127.0.0.1:0",
        "--auth-metrics",
    ])
    .unwrap();
    let err = bucketd::server::Server::bind(config, memory_store()).await.err().unwrap();
    assert!(err.to_string().contains("--auth-metrics needs"), "{err}");

    let server = TestServer::start_with_tcp(
        memory_store(),
        &["--auth-token", TOKEN, "--tcp-allow-unauthenticated"],
    )
    .await;
    assert!(server.tcp.is_some());
    server.shutdown().await;
}
