//! Slow and idle HTTP clients, and the connection limit, through raw sockets.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::server::{TestServer, memory_store, within};

/// Reads until the peer closes (or resets); returns what it sent before.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return all,
            Ok(n) => all.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends one keep-alive `GET /health` and reads its whole response.
async fn health_on(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: test\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\"ok\"") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the response: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(got).unwrap()
}

/// The server's timers count whole milliseconds since it accepted the connection, so a close
/// may come up to 1 ms before a timeout measured from the client's clock.
const MS: Duration = Duration::from_millis(1);

/// Whether the peer has closed (or reset) the connection, without waiting.
fn closed(stream: &TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match stream.try_read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // an error status before the close
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

#[tokio::test]
async fn half_a_header_then_silence_is_disconnected() {
    let timeout = Duration::from_millis(300);
    let server = TestServer::start(memory_store(), &["--http-header-timeout", "300ms"]).await;
    let mut stream = TcpStream::connect(server.http).await.unwrap();
    // Before the first byte: the server's header clock cannot start earlier.
    let start = Instant::now();
    stream.write_all(b"POST /write HTTP/1.1\r\nHost: test\r\nContent-Le").await.unwrap();
    // Without a header timeout the connection would never close (the idle timeout does not
    // apply while a header is being read): `within` fails the test then.
    let got = within("the stalled header's disconnect", 30, read_until_closed(&mut stream)).await;
    let took = start.elapsed();
    assert!(took >= timeout - MS, "closed after {took:?}, before the header timeout");
    // No request was ever handled, so nothing was answered but (at most) an error status.
    assert!(!String::from_utf8_lossy(&got).contains("204"), "{got:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_header_dripped_byte_by_byte_is_disconnected() {
    let timeout = Duration::from_millis(400);
    let server = TestServer::start(memory_store(), &["--http-header-timeout", "400ms"]).await;
    let mut stream = TcpStream::connect(server.http).await.unwrap();
    // A header that takes 200 × 50 ms = 10 s to drip and never ends: if each byte restarted
    // the header clock, the connection would still be open when the drip ends.
    let mut header = b"GET /health HTTP/1.1\r\nHost: test\r\nX-Padding: ".to_vec();
    header.resize(200, b'a');
    let start = Instant::now();
    let mut sent = 0;
    for byte in &header {
        if stream.write_all(&[*byte]).await.is_err() || closed(&stream) {
            break;
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = start.elapsed();
    assert!(sent < header.len(), "the whole dripped header was read: {took:?}");
    assert!(took >= timeout - MS, "closed after {took:?}, before the header timeout");
    server.shutdown().await;
}

#[tokio::test]
async fn keep_alive_outlives_the_header_timeout() {
    // The idle timeout stays at its default (60 s): only the header timeout could cut.
    let server = TestServer::start(memory_store(), &["--http-header-timeout", "200ms"]).await;
    let mut stream = TcpStream::connect(server.http).await.unwrap();
    assert!(health_on(&mut stream).await.starts_with("HTTP/1.1 200"));
    // Idle for longer than the header timeout: the connection is still usable.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!closed(&stream), "an idle keep-alive connection was cut by the header timeout");
    assert!(health_on(&mut stream).await.starts_with("HTTP/1.1 200"));
    server.shutdown().await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(1500);
    let server = TestServer::start(
        memory_store(),
        &["--http-header-timeout", "200ms", "--http-idle-timeout", "1500ms"],
    )
    .await;
    let mut stream = TcpStream::connect(server.http).await.unwrap();
    assert!(health_on(&mut stream).await.starts_with("HTTP/1.1 200"));
    // Before the request: the server's idle clock starts once its response is sent.
    let start = Instant::now();
    assert!(health_on(&mut stream).await.starts_with("HTTP/1.1 200"));
    // The idle timeout, not the header timeout; and without one `within` fails the test (the
    // default is 60 s).
    within("the idle disconnect", 30, read_until_closed(&mut stream)).await;
    let took = start.elapsed();
    assert!(took >= idle - MS, "closed after {took:?}, before the idle timeout");

    // A connection that never sends anything is idle, not a slow header.
    let start = Instant::now();
    let mut silent = TcpStream::connect(server.http).await.unwrap();
    within("the silent disconnect", 30, read_until_closed(&mut silent)).await;
    let took = start.elapsed();
    assert!(took >= idle - MS, "closed after {took:?}, before the idle timeout");
    server.shutdown().await;
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_at_once() {
    let server = TestServer::start(memory_store(), &["--max-http-connections", "2"]).await;
    let mut first = TcpStream::connect(server.http).await.unwrap();
    let mut second = TcpStream::connect(server.http).await.unwrap();
    // Both are served (so both hold a slot) before the third arrives.
    health_on(&mut first).await;
    health_on(&mut second).await;
    let mut third = TcpStream::connect(server.http).await.unwrap();
    let got = within("the third connection's close", 5, read_until_closed(&mut third)).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    // The first two still work; closing one frees its slot.
    health_on(&mut first).await;
    drop(second);
    let mut fourth = None;
    for _ in 0..50 {
        let mut s = TcpStream::connect(server.http).await.unwrap();
        let request = b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n";
        if s.write_all(request).await.is_ok() {
            let mut buf = [0u8; 64];
            if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await
                && n > 0
            {
                fourth = Some(String::from_utf8_lossy(&buf[..n]).into_owned());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(fourth.expect("a slot came free").starts_with("HTTP/1.1 200"));
    drop(first);
    server.shutdown().await;
}

#[tokio::test]
async fn a_slow_body_after_a_prompt_header_is_not_cut() {
    // The header timeout is for headers: a body that trickles in is bound by the request
    // timeout instead.
    let server = TestServer::start(
        memory_store(),
        &["--http-header-timeout", "200ms", "--http-idle-timeout", "300ms"],
    )
    .await;
    let first = futures::stream::once(async { Ok::<_, std::io::Error>(b"m v=1\n".to_vec()) });
    let rest = futures::stream::once(async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        Ok::<_, std::io::Error>(b"m v=2\n".to_vec())
    });
    let body = reqwest::Body::wrap_stream(futures::StreamExt::chain(first, rest));
    let response =
        within("the slow write", 10, server.client.post(server.url("/write")).body(body).send())
            .await
            .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::NO_CONTENT);
    assert_eq!(server.buffers.buffered(), 2);
    server.shutdown().await;
}

#[tokio::test]
async fn http2_without_tls_is_still_served() {
    let server = TestServer::start(memory_store(), &[]).await;
    let client = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let response = client.get(server.url("/health")).send().await.unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    server.shutdown().await;
}
