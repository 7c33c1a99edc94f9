//! Raw line protocol over TCP through real sockets: framing across writes, bad and over-long
//! lines, the connection limit, backpressure without loss, shutdown.

use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeSet;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::server::{
    FlakyStore, Identity, TestServer, assert_stored_exactly, identity, memory_store, stored,
    wait_until, within,
};

const T0_NS: i64 = 1_700_000_000_000_000_000;

fn lines(measurement: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("{measurement},host=h v={i}i {}\n", T0_NS + i as i64 * 1_000_000))
        .collect()
}

/// The readings `lines(measurement, n)` sends.
fn sent(measurement: &str, n: usize) -> impl Iterator<Item = Identity> {
    let sensor = format!("{measurement},host=h");
    (0..n).map(move |i| identity(&sensor, T0_NS / 1_000_000 + i as i64, &[("v", i as f64)]))
}

/// Writes `data` in small, unevenly sized pieces with pauses, so lines straddle reads.
async fn write_in_pieces(stream: &mut TcpStream, data: &[u8]) {
    let sizes = [1usize, 7, 13, 2, 64, 5, 300];
    let mut at = 0;
    let mut k = 0;
    while at < data.len() {
        let end = (at + sizes[k % sizes.len()]).min(data.len());
        stream.write_all(&data[at..end]).await.unwrap();
        stream.flush().await.unwrap();
        if k % 5 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        at = end;
        k += 1;
    }
}

#[tokio::test]
async fn lines_split_across_writes_from_many_connections() {
    let store = memory_store();
    let server = TestServer::start_with_tcp(store.clone(), &["--flush-interval", "20ms"]).await;
    let addr = server.tcp.unwrap();
    let mut clients = Vec::new();
    for c in 0..10 {
        clients.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            // A string field with an escaped quote and an embedded newline, split mid-way.
            let special = format!(
                "c{c},host=h msg=\"a \\\"quoted\\\"\nsecond line\" {}\n",
                T0_NS - 2_000_000
            );
            write_in_pieces(&mut stream, special.as_bytes()).await;
            write_in_pieces(&mut stream, lines(&format!("c{c}"), 300).as_bytes()).await;
            // The last line has no newline: the connection's end terminates it.
            stream
                .write_all(format!("c{c},host=h v=-1i {}", T0_NS - 1_000_000).as_bytes())
                .await
                .unwrap();
            stream.shutdown().await.unwrap();
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    wait_until("all lines are written", Duration::from_secs(20), || {
        store.reading_count() == 10 * 302
    })
    .await;
    server.shutdown().await;
    let mut expected = BTreeSet::new();
    for c in 0..10 {
        let sensor = format!("c{c},host=h");
        expected.extend(sent(&format!("c{c}"), 300));
        expected.insert(identity(&sensor, T0_NS / 1_000_000 - 1, &[("v", -1.0)]));
        let msg = format!("msg={:?}", "a \"quoted\"\nsecond line");
        expected.insert((sensor, T0_NS / 1_000_000 - 2, msg));
    }
    assert_stored_exactly(&*store, &expected).await;
    let c0 = stored(&*store, "c0,host=h").await;
    let msg =
        c0.iter().find_map(|r| r.fields.iter().find(|(n, _)| n == "msg").map(|(_, v)| v.clone()));
    assert_eq!(msg, Some(bucketd::model::FieldValue::Str("a \"quoted\"\nsecond line".into())));
}

#[tokio::test]
async fn bad_and_over_long_lines_do_not_close_the_connection() {
    let store = memory_store();
    let server = TestServer::start_with_tcp(store.clone(), &[]).await;
    let mut stream = TcpStream::connect(server.tcp.unwrap()).await.unwrap();
    stream
        .write_all(format!("good v=1 {T0_NS}\nthis is not line protocol\n").as_bytes())
        .await
        .unwrap();
    stream.write_all(b"bad v=NaN\n").await.unwrap();
    // Longer than the 1 MiB line limit, sent in pieces.
    let long = vec![b'x'; (1 << 20) + 4096];
    for piece in long.chunks(100_000) {
        stream.write_all(piece).await.unwrap();
    }
    stream.write_all(b" v=1\n").await.unwrap();
    stream.write_all(format!("good v=2 {}\n", T0_NS + 1_000_000).as_bytes()).await.unwrap();
    wait_until("both good lines are buffered or written", Duration::from_secs(10), || {
        store.reading_count() + server.buffers.buffered() == 2
    })
    .await;
    // Still open: more lines get through on the same connection.
    stream.write_all(format!("good v=3 {}\n", T0_NS + 2_000_000).as_bytes()).await.unwrap();
    stream.shutdown().await.unwrap();
    wait_until("the third line arrives", Duration::from_secs(10), || {
        store.reading_count() + server.buffers.buffered() == 3
    })
    .await;

    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(
            r#"bucketd_readings_rejected_total{protocol="lp_tcp",reason="line_too_long"}"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"bucketd_readings_rejected_total{protocol="lp_tcp",reason="syntax"}"#),
        "{metrics}"
    );
    server.shutdown().await;
    let good = (1..=3).map(|v| identity("good", T0_NS / 1_000_000 + v - 1, &[("v", v as f64)]));
    assert_stored_exactly(&*store, &good.collect()).await;
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_at_once() {
    let store = memory_store();
    let server = TestServer::start_with_tcp(store.clone(), &["--max-tcp-connections", "2"]).await;
    let addr = server.tcp.unwrap();
    let mut held = Vec::new();
    for i in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("held{i} v=1 {T0_NS}\n").as_bytes()).await.unwrap();
        held.push(s);
    }
    // Both lines arriving proves both connections were accepted and are being served.
    wait_until("the held connections are served", Duration::from_secs(10), || {
        store.reading_count() + server.buffers.buffered() == 2
    })
    .await;

    let mut extra = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let read = within("the extra connection to be closed", 5, extra.read(&mut buf)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "extra connection was served: {read:?}");

    // A freed slot is usable again: the server notices the close in its own time, so until
    // then a new connection is closed unread; one is served once its line arrives.
    drop(held.pop());
    let again = within("a connection to be served after one was closed", 30, async {
        loop {
            let mut s = TcpStream::connect(addr).await.unwrap();
            // A refused connection may already be reset: then the write fails.
            let _ = s.write_all(format!("again v=1 {T0_NS}\n").as_bytes()).await;
            loop {
                if store.reading_count() + server.buffers.buffered() == 3 {
                    return s;
                }
                let mut buf = [0u8; 1];
                match s.try_read(&mut buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    // Closed (or reset) unread: over the limit still.
                    Ok(0) | Err(_) => break,
                    Ok(_) => panic!("the TCP listener never answers"),
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    })
    .await;
    drop(again);
    drop(held);
    server.shutdown().await;
    assert_eq!(stored(&*store, "again").await.len(), 1, "the served connection's line, once");
}

/// With `--ack=buffered` there is no log to spill into, so full buffers can only stop the
/// listener reading the socket (TCP flow control holds the sender) or drop lines. The buffers'
/// own peak shows nothing was held past the bound, and the final check that every line is
/// stored exactly once shows nothing was dropped: together, that reading stopped. (With the log
/// on, lines spill into it instead; a full log pausing the socket is
/// `durability::tcp_full_log`.)
#[tokio::test]
async fn full_buffers_stop_reading_and_nothing_is_dropped() {
    const BOUND: usize = 200;
    const LINES: usize = 30_000;
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    let bound = BOUND.to_string();
    let args = ["--max-buffered-readings", &bound, "--flush-interval", "10ms", "--ack", "buffered"];
    let server = Arc::new(TestServer::start_with_tcp(flaky.clone(), &args).await);

    let addr = server.tcp.unwrap();
    let writer = tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(lines("bp", LINES).as_bytes()).await.unwrap();
        stream.shutdown().await.unwrap();
    });
    wait_until("the buffers fill", Duration::from_secs(10), || server.buffers.buffered() == BOUND)
        .await;
    assert_eq!(flaky.inner.reading_count(), 0, "the store is down");

    flaky.set_down(false);
    within("the writer to finish", 30, writer).await.unwrap();
    wait_until("every line is written", Duration::from_secs(60), || {
        flaky.inner.reading_count() == LINES
    })
    .await;
    let peak = server.buffers.peak();
    assert!(peak <= BOUND, "held {peak} > bound {BOUND}");
    let server = Arc::into_inner(server).unwrap();
    server.shutdown().await;
    assert_stored_exactly(&*flaky, &sent("bp", LINES).collect()).await;
}

/// Posts `body` to `/write` until the answer has status `want` and contains `says`, for at
/// most a minute: the state is reached by connections the test does not observe directly.
async fn write_until_answered(server: &TestServer, body: &str, want: u16, says: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = server.post("/write", "text/plain", body.to_owned()).await;
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        if status == want && text.contains(says) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "still {status} {text}, want {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn lines_waiting_for_room_hold_the_requests_share_of_the_memory_budget() {
    // The requests' share is 8 MiB: about 32 connections' 64 KiB reads, charged four times.
    const CONNECTIONS: usize = 40;
    const LINES: usize = 2_000;
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    let args = [
        "--memory-budget",
        "32MiB",
        "--max-buffered-readings",
        "200",
        "--ack",
        "buffered",
        "--flush-interval",
        "10ms",
    ];
    let server = TestServer::start_with_tcp(flaky.clone(), &args).await;
    let addr = server.tcp.unwrap();
    let mut writers = Vec::new();
    for c in 0..CONNECTIONS {
        writers.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(lines(&format!("m{c}"), LINES).as_bytes()).await.unwrap();
            stream.shutdown().await.unwrap();
        }));
    }
    // About 100 KB: more than what the waiting connections leave of the share. (Until they
    // hold it, the full buffers refuse it.)
    write_until_answered(&server, &lines("probe", 2_000), 503, "--memory-budget").await;

    flaky.set_down(false);
    for writer in writers {
        within("a writer to finish", 60, writer).await.unwrap();
    }
    write_until_answered(&server, &lines("http", 100), 204, "").await;
    wait_until("every line is stored", Duration::from_secs(60), || {
        flaky.inner.reading_count() == CONNECTIONS * LINES + 100
    })
    .await;
    server.shutdown().await;
    let mut want: BTreeSet<Identity> =
        (0..CONNECTIONS).flat_map(|c| sent(&format!("m{c}"), LINES).collect::<Vec<_>>()).collect();
    want.extend(sent("http", 100));
    assert_stored_exactly(&*flaky, &want).await;
}

#[tokio::test]
async fn shutdown_closes_connections_and_keeps_what_was_read() {
    let store = memory_store();
    let server = TestServer::start_with_tcp(store.clone(), &["--flush-interval", "1h"]).await;
    let mut stream = TcpStream::connect(server.tcp.unwrap()).await.unwrap();
    stream.write_all(lines("sd", 500).as_bytes()).await.unwrap();
    wait_until("the lines are buffered", Duration::from_secs(10), || {
        server.buffers.buffered() == 500
    })
    .await;
    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
    assert_stored_exactly(&*store, &sent("sd", 500).collect()).await;
    let mut buf = [0u8; 1];
    let read = within("the connection to close", 5, stream.read(&mut buf)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
}

#[tokio::test]
async fn connections_over_the_per_ip_limit_are_closed_and_other_ips_still_served() {
    let store = memory_store();
    let server =
        TestServer::start_with_tcp(store.clone(), &["--max-tcp-connections-per-ip", "2"]).await;
    let port = server.tcp.unwrap().port();
    let from = |ip: &str| {
        let ip: std::net::IpAddr = ip.parse().unwrap();
        async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind((ip, 0).into()).unwrap();
            socket.connect(([127, 0, 0, 1], port).into()).await.unwrap()
        }
    };
    let mut held = Vec::new();
    for i in 0..2 {
        let mut s = from("127.0.0.1").await;
        s.write_all(format!("held{i} v=1 {T0_NS}\n").as_bytes()).await.unwrap();
        held.push(s);
    }
    wait_until("the held connections are served", Duration::from_secs(10), || {
        store.reading_count() + server.buffers.buffered() == 2
    })
    .await;

    // A third from the same IP is closed at once...
    let mut extra = from("127.0.0.1").await;
    let mut buf = [0u8; 16];
    let read = within("the extra connection to be closed", 5, extra.read(&mut buf)).await;
    assert!(matches!(read, Ok(0) | Err(_)), "extra connection was served: {read:?}");

    // ...while another IP is served.
    let mut other = from("127.0.0.2").await;
    other.write_all(format!("other v=1 {T0_NS}\n").as_bytes()).await.unwrap();
    wait_until("the other IP's line arrives", Duration::from_secs(10), || {
        store.reading_count() + server.buffers.buffered() == 3
    })
    .await;
    drop(other);
    drop(held);
    server.shutdown().await;
}
