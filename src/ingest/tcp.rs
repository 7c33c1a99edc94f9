//! Raw line protocol over TCP: newline-delimited lines, no responses (as Telegraf's
//! `socket_writer` and InfluxDB's TCP listeners speak it).
//!
//! Full-policy: block. When the buffers, the write-ahead log or the requests' share of the
//! memory budget are full a connection stops reading its socket until there is room, so TCP
//! flow control slows the sender; nothing is dropped. (A connection that waits for memory
//! longer than its idle timeout is closed; TCP acknowledges nothing, and it held no share.) There is no acknowledgement, so lines are logged but their fsync is not awaited. Bad lines are
//! counted and logged (at most one log line per connection per second) and never close the
//! connection. Connections are bounded in total (a semaphore) and per remote IP: one over either
//! limit is accepted and closed at once, so the client sees a prompt reset rather than a hanging
//! connect.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::ingest::intake::Intake;
use crate::ingest::line_protocol::{self, Precision};
use crate::ingest::memory::{Charge, RequestMemory};
use crate::ingest::metrics::{Protocol, count_accepted, count_received, count_rejected};
use crate::ingest::validate::InputLimits;
use crate::listener::{Accepted, accept_within_limit};
use crate::metrics::{TCP_CONNECTIONS, TCP_CONNECTIONS_OPEN};
use crate::model::Item;
use crate::tls::{Listener, Tls};

/// Bytes asked of the socket per read; also roughly the most lines parsed in one chunk.
const READ_CHUNK: usize = 64 * 1024;

/// Bad-line logs per connection are limited to one per this interval.
const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// Longest raw TCP line: far beyond any sensor line, small enough that a client that never
/// sends a newline costs little.
pub const TCP_MAX_LINE_BYTES: usize = 1 << 20;

/// Most readings a TCP connection pushes at once (one read's worth of short lines).
pub const TCP_MAX_PUSH_READINGS: usize = 1000;

#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Open connections; one more is accepted and closed at once.
    pub max_connections: usize,
    /// Open connections from one IP address; one more from it is accepted and closed at once,
    /// so one client cannot take every slot of `max_connections`.
    pub max_connections_per_ip: usize,
    /// Longest line kept; a longer one is skipped up to its newline and counted.
    pub max_line_bytes: usize,
    /// A connection that sends nothing for this long is closed.
    pub idle_timeout: Duration,
    /// Most readings pushed at once. At most the buffers' bound, so that waiting for room
    /// never lets one push take the buffers past it.
    pub max_push_readings: usize,
    /// The requests' share of the memory budget: what a connection has read and not yet
    /// pushed is charged to it.
    pub memory: RequestMemory,
}

/// Accepts connections (over TLS when `tls` is given) until `shutdown` fires, then waits for
/// open connections to stop (each finishes its current read and push, then closes).
pub async fn serve(
    listener: TcpListener,
    intake: Arc<Intake>,
    limits: Arc<InputLimits>,
    config: TcpConfig,
    tls: Option<Arc<Tls>>,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let per_ip = PerIp::new(config.max_connections_per_ip);
    let tracker = TaskTracker::new();
    while let Some(Accepted { stream, peer, permit }) =
        accept_within_limit(&listener, &permits, &shutdown, TCP_CONNECTIONS, "TCP").await
    {
        let Some(ip_slot) = per_ip.acquire(peer.ip()) else {
            metrics::counter!(TCP_CONNECTIONS, "result" => "rejected_per_ip").increment(1);
            tracing::debug!(%peer, limit = config.max_connections_per_ip, "TCP connection over the per-IP limit, closed");
            drop(stream);
            continue;
        };
        metrics::counter!(TCP_CONNECTIONS, "result" => "accepted").increment(1);
        let _ = stream.set_nodelay(true);
        let mut sink = LineProtocolSink::new(intake.clone(), limits.clone(), peer);
        let config = config.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        tracker.spawn(async move {
            let _open = OpenConnection::new();
            let end = match tls {
                None => read_lines(stream, &mut sink, &config, &shutdown).await,
                Some(tls) => match tls.accept(stream, Listener::Tcp, &shutdown).await {
                    Some(stream) => read_lines(stream, &mut sink, &config, &shutdown).await,
                    None => ConnectionEnd::Handshake,
                },
            };
            tracing::debug!(%peer, ?end, lines = sink.lines_seen, "TCP connection closed");
            drop(ip_slot);
            drop(permit);
        });
    }
    drop(listener);
    tracker.close();
    tracker.wait().await;
}

/// Open connections per remote IP. Entries exist only while an IP has a connection open, so the
/// map is bounded by the total connection limit. A plain mutex: held for one map operation,
/// never across an `.await`.
#[derive(Clone)]
struct PerIp {
    limit: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerIp {
    fn new(limit: usize) -> PerIp {
        PerIp { limit, open: Arc::new(Mutex::new(HashMap::new())) }
    }

    /// A slot for one more connection from `ip`, or `None` when it is at the limit.
    fn acquire(&self, ip: IpAddr) -> Option<IpSlot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(IpSlot { ip, owner: self.clone() })
    }
}

/// One open connection's share of its IP's count; released on drop.
struct IpSlot {
    ip: IpAddr,
    owner: PerIp,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self.owner.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Keeps the open-connections gauge right however the connection task ends.
struct OpenConnection;

impl OpenConnection {
    fn new() -> Self {
        metrics::gauge!(TCP_CONNECTIONS_OPEN).increment(1.0);
        OpenConnection
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        metrics::gauge!(TCP_CONNECTIONS_OPEN).decrement(1.0);
    }
}

/// Why a connection's loop ended.
#[derive(Debug)]
pub enum ConnectionEnd {
    Eof,
    Idle,
    Shutdown,
    ReadError(std::io::Error),
    /// The requests' share of the memory budget had no room for what was read within the
    /// idle timeout.
    MemoryBudget,
    /// The TLS handshake failed or timed out (counted by `crate::tls`).
    Handshake,
}

/// Where framed lines go: the production sink parses line protocol and pushes into the
/// buffers; tests put a fake here to exercise framing, timeouts and shutdown alone.
pub(crate) trait LineSink {
    /// Length of the first complete line in `buf`, with its newline; `None` if there is none.
    fn complete_line_len(&self, buf: &[u8]) -> Option<usize>;
    /// Parses a run of complete lines (the last may lack its newline at end of stream),
    /// counting and logging bad ones; returns the valid readings.
    fn parse(&mut self, lines: &[u8]) -> Vec<Item>;
    /// Hands readings on, waiting for room as long as it takes.
    fn push(&self, items: Vec<Item>) -> impl Future<Output = usize> + Send;
    /// A line longer than the limit was skipped.
    fn line_too_long(&mut self);
    /// Readings parsed but not pushed because shutdown came while waiting for room.
    fn dropped_at_shutdown(&mut self, n: usize);
}

/// The connection loop: read, frame complete lines, parse them as one chunk, push (waiting for
/// room), repeat. Every wait is raced against `shutdown`; the buffer never holds more than one
/// read plus one line of the limit.
pub(crate) async fn read_lines<R, S>(
    mut reader: R,
    sink: &mut S,
    config: &TcpConfig,
    shutdown: &CancellationToken,
) -> ConnectionEnd
where
    R: AsyncRead + Unpin,
    S: LineSink,
{
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    // The complete lines being parsed and pushed, charged to the memory budget until their
    // readings are pushed. Only they are: a connection waiting for its charge then holds none,
    // so waiters never hold the share from each other (a partial line is bounded by the line
    // limit instead).
    let mut charge = Charge::default();
    // True while discarding the rest of an over-long line, up to its newline.
    let mut skipping = false;
    loop {
        // `limit`: the buffer's spare capacity may be larger than asked, and one read must not
        // bring in more than READ_CHUNK, or a line could grow far past the limit unchecked.
        buf.reserve(READ_CHUNK);
        let mut room = (&mut buf).limit(READ_CHUNK);
        let read = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return ConnectionEnd::Shutdown,
            read = tokio::time::timeout(config.idle_timeout, reader.read_buf(&mut room)) => read,
        };
        let n = match read {
            Err(_elapsed) => return ConnectionEnd::Idle,
            Ok(Err(e)) => return ConnectionEnd::ReadError(e),
            Ok(Ok(n)) => n,
        };
        count_received(Protocol::LpTcp, n);
        let eof = n == 0;

        if skipping {
            // No quoting state is known inside a skipped line, so its first newline ends it.
            match memchr::memchr(b'\n', &buf) {
                Some(i) => {
                    buf.advance(i + 1);
                    skipping = false;
                }
                None => {
                    buf.clear();
                    if eof {
                        return ConnectionEnd::Eof;
                    }
                    continue;
                }
            }
        }

        // Deliver the complete lines, stepping over any that is longer than the limit.
        loop {
            let mut end = 0;
            let mut over_long = None;
            while let Some(len) = sink.complete_line_len(&buf[end..]) {
                if len > config.max_line_bytes {
                    over_long = Some(len);
                    break;
                }
                end += len;
            }
            if eof && over_long.is_none() && end < buf.len() {
                // A last line without its newline is still a line.
                let tail = buf.len() - end;
                if tail > config.max_line_bytes {
                    over_long = Some(tail);
                } else {
                    end = buf.len();
                }
            }
            if end > 0 {
                let chunk = buf.split_to(end);
                let charged = tokio::select! {
                    biased;
                    _ = shutdown.cancelled() => return ConnectionEnd::Shutdown,
                    charged = config.memory.charge_up_to(&mut charge, chunk.len(), config.idle_timeout) => charged,
                };
                if charged.is_err() {
                    return ConnectionEnd::MemoryBudget;
                }
                let items = sink.parse(&chunk);
                drop(chunk);
                let pushed = push_all(sink, items, config, shutdown).await;
                charge.release();
                if let Err(end) = pushed {
                    return end;
                }
            }
            match over_long {
                Some(len) => {
                    buf.advance(len);
                    sink.line_too_long();
                }
                None => break,
            }
        }
        if eof {
            return ConnectionEnd::Eof;
        }
        if buf.len() > config.max_line_bytes {
            sink.line_too_long();
            buf.clear();
            skipping = true;
        }
    }
}

/// Pushes in pieces of at most `max_push_readings`, each raced against shutdown.
async fn push_all<S: LineSink>(
    sink: &mut S,
    mut items: Vec<Item>,
    config: &TcpConfig,
    shutdown: &CancellationToken,
) -> Result<(), ConnectionEnd> {
    while !items.is_empty() {
        let rest = items.split_off(items.len().min(config.max_push_readings.max(1)));
        let waiting = items.len() + rest.len();
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {
                sink.dropped_at_shutdown(waiting);
                return Err(ConnectionEnd::Shutdown);
            }
            _ = sink.push(items) => {}
        }
        items = rest;
    }
    Ok(())
}

/// Parses line protocol (nanosecond timestamps, as the TCP listeners of InfluxDB take them)
/// and pushes into the buffers.
struct LineProtocolSink {
    intake: Arc<Intake>,
    limits: Arc<InputLimits>,
    peer: SocketAddr,
    /// Lines seen so far, to give logged errors a line number within the connection.
    lines_seen: usize,
    last_log: Option<Instant>,
    suppressed: usize,
}

impl LineProtocolSink {
    fn new(intake: Arc<Intake>, limits: Arc<InputLimits>, peer: SocketAddr) -> Self {
        LineProtocolSink { intake, limits, peer, lines_seen: 0, last_log: None, suppressed: 0 }
    }

    /// Logs at most once per [`LOG_INTERVAL`]; says how many were left out in between.
    fn log_bad_line(&mut self, what: &dyn std::fmt::Display) {
        let now = Instant::now();
        if self.last_log.is_some_and(|t| now.duration_since(t) < LOG_INTERVAL) {
            self.suppressed += 1;
            return;
        }
        tracing::warn!(
            peer = %self.peer,
            suppressed = self.suppressed,
            "bad line on TCP line-protocol connection: {what}"
        );
        self.last_log = Some(now);
        self.suppressed = 0;
    }
}

impl LineSink for LineProtocolSink {
    fn complete_line_len(&self, buf: &[u8]) -> Option<usize> {
        line_protocol::complete_line_len(buf)
    }

    fn parse(&mut self, lines: &[u8]) -> Vec<Item> {
        let now = chrono::Utc::now().timestamp_millis();
        let results = line_protocol::parse_body(lines, Precision::Nanoseconds, now, &self.limits);
        let first_line = self.lines_seen;
        self.lines_seen += memchr::memchr_iter(b'\n', lines).count();
        let mut good = Vec::with_capacity(results.len());
        for r in results {
            match r {
                Ok(item) => good.push(item),
                Err(mut e) => {
                    count_rejected(Protocol::LpTcp, e.reason, 1);
                    e.line += first_line;
                    self.log_bad_line(&e);
                }
            }
        }
        good
    }

    async fn push(&self, items: Vec<Item>) -> usize {
        let count = items.len();
        match self.intake.accept_when_room(items).await {
            Ok(n) => {
                count_accepted(Protocol::LpTcp, n);
                n
            }
            Err(e) => {
                count_rejected(Protocol::LpTcp, "wal_failed", count);
                tracing::error!(peer = %self.peer, readings = count, error = %e, "TCP readings not accepted");
                0
            }
        }
    }

    fn line_too_long(&mut self) {
        count_rejected(Protocol::LpTcp, "line_too_long", 1);
        self.log_bad_line(&"line longer than the limit, skipped");
    }

    fn dropped_at_shutdown(&mut self, n: usize) {
        count_rejected(Protocol::LpTcp, "shutdown", n);
        tracing::warn!(peer = %self.peer, readings = n, "shutdown while waiting for buffer room; readings not accepted");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::io::AsyncWriteExt;
    use tokio::sync::Notify;

    use super::*;
    use crate::model::{FieldValue, Reading, SeriesMeta};

    /// Frames on plain newlines and records every line it is handed; `push` waits for `gate`
    /// when one is set, standing in for full buffers.
    #[derive(Default)]
    struct FakeSink {
        lines: Vec<String>,
        chunks: usize,
        pushed: Arc<Mutex<usize>>,
        too_long: usize,
        dropped: usize,
        gate: Option<Arc<Notify>>,
    }

    impl LineSink for FakeSink {
        fn complete_line_len(&self, buf: &[u8]) -> Option<usize> {
            memchr::memchr(b'\n', buf).map(|i| i + 1)
        }

        fn parse(&mut self, lines: &[u8]) -> Vec<Item> {
            self.chunks += 1;
            let text = std::str::from_utf8(lines).unwrap();
            let mut items = Vec::new();
            for line in text.split_terminator('\n') {
                self.lines.push(line.to_owned());
                let series = SeriesMeta::untagged(line, line);
                items.push((
                    series.into(),
                    Reading {
                        ts: 0,
                        fields: smallvec::smallvec![("v".into(), FieldValue::Int(1))],
                    },
                ));
            }
            items
        }

        async fn push(&self, items: Vec<Item>) -> usize {
            if let Some(gate) = &self.gate {
                gate.notified().await;
            }
            *self.pushed.lock().unwrap() += items.len();
            items.len()
        }

        fn line_too_long(&mut self) {
            self.too_long += 1;
        }

        fn dropped_at_shutdown(&mut self, n: usize) {
            self.dropped += n;
        }
    }

    #[test]
    fn per_ip_slots_are_counted_and_released() {
        let per_ip = PerIp::new(2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = per_ip.acquire(a).unwrap();
        let a2 = per_ip.acquire(a).unwrap();
        assert!(per_ip.acquire(a).is_none());
        let b1 = per_ip.acquire(b).unwrap();
        drop(a1);
        let a3 = per_ip.acquire(a).unwrap();
        drop((a2, a3, b1));
        // Released IPs leave no entry behind.
        assert!(per_ip.open.lock().unwrap().is_empty());
    }

    fn config() -> TcpConfig {
        TcpConfig {
            max_connections: 10,
            max_connections_per_ip: 10,
            max_line_bytes: 100,
            idle_timeout: Duration::from_secs(300),
            max_push_readings: 1000,
            memory: RequestMemory::new(1 << 20),
        }
    }

    #[tokio::test]
    async fn lines_split_across_writes_are_reassembled() {
        let (mut client, server) = tokio::io::duplex(16);
        let token = CancellationToken::new();
        let writer = tokio::spawn(async move {
            for piece in ["cpu v=1\ncp", "u v=2", "\nmem v=", "3\nlast v=4"] {
                client.write_all(piece.as_bytes()).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut sink = FakeSink::default();
        let end = read_lines(server, &mut sink, &config(), &token).await;
        writer.await.unwrap();
        assert!(matches!(end, ConnectionEnd::Eof), "{end:?}");
        assert_eq!(sink.lines, ["cpu v=1", "cpu v=2", "mem v=3", "last v=4"]);
        assert_eq!(*sink.pushed.lock().unwrap(), 4);
    }

    #[tokio::test]
    async fn an_over_long_line_is_skipped_and_the_rest_kept() {
        let (mut client, server) = tokio::io::duplex(1024);
        let token = CancellationToken::new();
        let long = "x".repeat(250);
        let input = format!("a v=1\n{long}\nb v=2\n");
        let writer = tokio::spawn(async move {
            for piece in input.as_bytes().chunks(40) {
                client.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut sink = FakeSink::default();
        read_lines(server, &mut sink, &config(), &token).await;
        writer.await.unwrap();
        assert_eq!(sink.lines, ["a v=1", "b v=2"]);
        assert_eq!(sink.too_long, 1);
    }

    #[tokio::test]
    async fn an_over_long_line_arriving_whole_is_skipped_too() {
        // One read brings the whole line with its newline, and the stream ends on another
        // over-long line without a newline.
        let long = "y".repeat(150);
        let input = format!("a v=1\n{long}\nb v=2\n{long}");
        let mut sink = FakeSink::default();
        read_lines(input.as_bytes(), &mut sink, &config(), &CancellationToken::new()).await;
        assert_eq!(sink.lines, ["a v=1", "b v=2"]);
        assert_eq!(sink.too_long, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_time_out() {
        let (_client, server) = tokio::io::duplex(64);
        let token = CancellationToken::new();
        let start = tokio::time::Instant::now();
        let end = read_lines(server, &mut FakeSink::default(), &config(), &token).await;
        assert!(matches!(end, ConnectionEnd::Idle), "{end:?}");
        assert!(start.elapsed() >= Duration::from_secs(300));
    }

    #[tokio::test]
    async fn shutdown_stops_a_connection_waiting_for_data() {
        let (_client, server) = tokio::io::duplex(64);
        let token = CancellationToken::new();
        let cancel = token.clone();
        tokio::spawn(async move { cancel.cancel() });
        let end = read_lines(server, &mut FakeSink::default(), &config(), &token).await;
        assert!(matches!(end, ConnectionEnd::Shutdown), "{end:?}");
    }

    #[tokio::test]
    async fn a_full_sink_stops_reading_and_shutdown_reports_the_unpushed() {
        // The duplex pipe holds 64 bytes: while `push` waits, the writer must block too.
        let (mut client, server) = tokio::io::duplex(64);
        let token = CancellationToken::new();
        let gate = Arc::new(Notify::new());
        let mut sink = FakeSink { gate: Some(gate.clone()), ..FakeSink::default() };
        let pushed = sink.pushed.clone();
        let reader = {
            let token = token.clone();
            let config = config();
            tokio::spawn(async move {
                let end = read_lines(server, &mut sink, &config, &token).await;
                (end, sink)
            })
        };
        client.write_all(b"a v=1\n").await.unwrap();
        // Let the reader take that line alone and block pushing it.
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Far more than the pipe holds: this write cannot complete while the sink is blocked.
        let big = "b v=2\n".repeat(1000);
        let blocked =
            tokio::time::timeout(Duration::from_millis(200), client.write_all(big.as_bytes()))
                .await;
        assert!(blocked.is_err(), "writer was not held back by the full sink");
        assert_eq!(*pushed.lock().unwrap(), 0);

        token.cancel();
        let (end, sink) = reader.await.unwrap();
        assert!(matches!(end, ConnectionEnd::Shutdown), "{end:?}");
        assert_eq!(sink.dropped, 1);
        assert_eq!(*pushed.lock().unwrap(), 0);
    }

    #[tokio::test]
    async fn room_appearing_resumes_reading() {
        let (mut client, server) = tokio::io::duplex(64);
        let token = CancellationToken::new();
        let gate = Arc::new(Notify::new());
        let mut sink = FakeSink { gate: Some(gate.clone()), ..FakeSink::default() };
        let pushed = sink.pushed.clone();
        let reader = tokio::spawn(async move {
            let config = config();
            read_lines(server, &mut sink, &config, &token).await;
            sink
        });
        let writer = tokio::spawn(async move {
            client.write_all("c v=3\n".repeat(100).as_bytes()).await.unwrap();
        });
        // Open the gate for every push until the reader is done.
        while !reader.is_finished() {
            gate.notify_one();
            tokio::task::yield_now().await;
        }
        writer.await.unwrap();
        let sink = reader.await.unwrap();
        assert_eq!(sink.lines.len(), 100);
        assert_eq!(*pushed.lock().unwrap(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_memory_waits_then_gives_up_at_its_idle_timeout() {
        let config = TcpConfig {
            idle_timeout: Duration::from_secs(10),
            memory: RequestMemory::new(4096),
            ..config()
        };
        let mut hog = Charge::default();
        config.memory.try_charge(&mut hog, 1024).unwrap();
        let (mut client, server) = tokio::io::duplex(4096);
        client.write_all(b"a v=1\nb v=2\n").await.unwrap();
        let mut sink = FakeSink::default();
        let end = read_lines(server, &mut sink, &config, &CancellationToken::new()).await;
        assert!(matches!(end, ConnectionEnd::MemoryBudget), "{end:?}");
        assert!(sink.lines.is_empty(), "nothing parsed without its share");
        drop(hog);
        assert_eq!(config.memory.free_kib(), 4, "the closed connection holds nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_reads_on_once_memory_is_freed_and_releases_it() {
        let config = TcpConfig { memory: RequestMemory::new(4096), ..config() };
        let mut hog = Charge::default();
        config.memory.try_charge(&mut hog, 1024).unwrap();
        let (mut client, server) = tokio::io::duplex(4096);
        client.write_all(b"a v=1\nb v=2\nc v=").await.unwrap();
        let reader = {
            let config = config.clone();
            tokio::spawn(async move {
                let mut sink = FakeSink::default();
                let end = read_lines(server, &mut sink, &config, &CancellationToken::new()).await;
                (end, sink)
            })
        };
        tokio::task::yield_now().await;
        drop(hog);
        client.write_all(b"3\n").await.unwrap();
        drop(client);
        let (end, sink) = reader.await.unwrap();
        assert!(matches!(end, ConnectionEnd::Eof), "{end:?}");
        assert_eq!(sink.lines, vec!["a v=1", "b v=2", "c v=3"]);
        assert_eq!(config.memory.free_kib(), 4);
    }
}
