//! A full write-ahead log pauses a raw TCP connection instead of dropping its lines: while
//! the store is down and the log is at `--wal-max-bytes`, the connection is not read (TCP
//! flow control holds the sender back); once the store is back it is read again and every
//! line lands once. It reads process-wide metrics, so it runs in a process of its own
//! ([`in_own_process`]).

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::in_own_process;
use crate::support::server::{
    FlakyStore, TestServer, assert_stored_exactly, identity, memory_store, within,
};

const T0_MS: i64 = 1_700_000_000_000;
const LINES: i64 = 6_000;
const WAL_MAX: f64 = 2.0 * 1024.0 * 1024.0;
/// Each reading carries this much text, so a few thousand lines fill the log.
const PAD: usize = 1000;

#[tokio::test]
async fn a_full_log_pauses_a_tcp_connection_and_nothing_is_lost() {
    if !in_own_process(module_path!(), "a_full_log_pauses_a_tcp_connection_and_nothing_is_lost") {
        return;
    }
    let flaky = FlakyStore::new(memory_store());
    flaky.set_down(true);
    let server = TestServer::start_with_tcp(
        flaky.clone(),
        &["--wal-max-bytes", "2MiB", "--max-buffered-readings", "100", "--flush-interval", "10ms"],
    )
    .await;
    // About 6 MB of lines, three times what the log holds.
    let pad = "x".repeat(PAD);
    let body: String = (0..LINES)
        .map(|i| format!("tcpfull,host=h v={i}i,pad=\"{pad}\" {}\n", (T0_MS + i) * 1_000_000))
        .collect();
    let addr = server.tcp.unwrap();
    let writer = tokio::spawn(async move {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(body.as_bytes()).await.unwrap();
        stream.shutdown().await.unwrap();
    });

    let accepted = r#"bucketd_readings_accepted_total{protocol="lp_tcp"}"#;
    within("the log to fill", 60, async {
        // Within one record (at most 100 readings) of the bound.
        while server.metric("bucketd_wal_bytes").await < WAL_MAX - 120.0 * PAD as f64 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Nothing can be stored or leave the log now, so the connection must stop being read:
    // however long we look, the server has taken only what the log holds, dropped nothing,
    // and the rest of the lines wait in the socket.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taken = server.metric(accepted).await;
    assert!(taken > 0.0 && taken < LINES as f64, "{taken} of {LINES} lines taken");
    assert!(server.metric("bucketd_wal_bytes").await <= WAL_MAX);
    assert_eq!(server.metric("bucketd_readings_rejected_total").await, 0.0);
    assert_eq!(server.metric("bucketd_readings_dropped_total").await, 0.0);
    assert_eq!(flaky.inner.reading_count(), 0);

    flaky.set_down(false);
    within("the writer to finish", 120, writer).await.unwrap();
    within("every line to be stored", 120, async {
        while flaky.inner.reading_count() < LINES as usize {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let report = server.shutdown().await;
    assert_eq!(report.unflushed, 0);
    let padded = format!("pad={pad:?}");
    let sent = (0..LINES).map(|i| {
        let (sensor, ts, v) = identity("tcpfull,host=h", T0_MS + i, &[("v", i as f64)]);
        (sensor, ts, format!("{v},{padded}"))
    });
    assert_stored_exactly(&*flaky, &sent.collect()).await;
}
