//! A fault-injecting TCP proxy between the MongoDB driver and a MongoDB server (the stand-in or
//! a real one), for tests of what bucketd does when the network fails:
//!
//! - an outage: [`FaultProxy::set_down`] closes every proxied connection and stops listening,
//!   so new connections are refused, then listens again on the same port;
//! - a lost reply: [`FaultProxy::drop_reply_after_apply`] lets the next `update` commands
//!   reach the server, discards the server's reply and closes the client's connection, so the
//!   write is applied but the client sees a network error.
//!
//! It reads whole wire-protocol messages in both directions (16-byte header: messageLength,
//! requestID, responseTo, opCode, little endian) and looks inside only uncompressed OP_MSG
//! requests; everything else is relayed untouched. Plain TCP only: TLS would hide the messages.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc as tokio_mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const OP_MSG: i32 = 2013;
const HEADER_LEN: usize = 16;
/// OP_MSG flagBits: a CRC-32C follows the sections.
const CHECKSUM_PRESENT: u32 = 1;
/// OP_MSG flagBits: the sender expects no reply (an unacknowledged write).
const MORE_TO_COME: u32 = 1 << 1;
/// Larger than any server's maxMessageSizeBytes (48,000,000): a longer length is a framing
/// error, and the connection is closed rather than relayed out of step.
const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// How long `start` and `set_down` wait for the proxy thread to act.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);

/// A running proxy; stopped on drop, with every connection it relays closed.
///
/// It runs on a thread of its own with its own single-threaded Tokio runtime, not on the
/// test's runtime, because:
/// - `set_down` returns only once the proxy has acted (connections closed, listener dropped
///   or bound again), so a test can assert right after it. Blocking on that from a test on a
///   current-thread runtime would deadlock if the proxy's tasks needed that same thread;
/// - `Drop` can stop and join everything synchronously: no proxy task outlives the test, and
///   no runtime is dropped inside an async context (which panics);
/// - it works the same under either `#[tokio::test]` flavor, or with no runtime at all.
pub struct FaultProxy {
    addr: SocketAddr,
    /// `uri` with its host replaced by `addr`, split at the query for `uri_with`.
    uri_base: String,
    uri_options: Vec<(String, String)>,
    faults: Arc<Faults>,
    control: Option<tokio_mpsc::UnboundedSender<Control>>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Faults {
    /// `update` commands whose reply is still to be dropped.
    armed: AtomicU64,
    dropped: AtomicU64,
}

impl Faults {
    fn take_armed(&self) -> bool {
        self.armed.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    }
}

enum Control {
    SetDown(bool, mpsc::SyncSender<io::Result<()>>),
}

impl FaultProxy {
    /// Starts a proxy in front of the one server `uri` names (`mongodb://[user:pass@]host
    /// [:port][/db][?options]`). `uri()` is `uri` pointed at the proxy, with
    /// `directConnection=true` so that the driver never goes round the proxy to hosts the
    /// server advertises.
    pub fn in_front_of(uri: &str) -> FaultProxy {
        let rest = uri.strip_prefix("mongodb://").unwrap_or_else(|| {
            panic!("the fault proxy needs a mongodb:// URI naming one server, not {uri:?}")
        });
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (credentials, host) = match authority.rsplit_once('@') {
            Some((c, h)) => (format!("{c}@"), h),
            None => (String::new(), authority),
        };
        assert!(
            !host.contains(','),
            "the fault proxy can stand in front of one server only, and {uri:?} names several: \
             point it at one (the primary) with directConnection=true"
        );
        let has_port = match host.rsplit_once(':') {
            Some((h, _)) => !h.starts_with('[') || h.ends_with(']'),
            None => false,
        };
        let upstream = if has_port { host.to_owned() } else { format!("{host}:27017") };
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let path = if path.is_empty() { "/" } else { path };
        let options = query
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect();
        Self::launch(upstream, format!("mongodb://{credentials}"), path.to_owned(), options)
    }

    fn launch(
        upstream: String,
        scheme_and_credentials: String,
        path: String,
        mut uri_options: Vec<(String, String)>,
    ) -> FaultProxy {
        let faults = Arc::new(Faults::default());
        let (control, control_rx) = tokio_mpsc::unbounded_channel();
        let (ready, ready_rx) = mpsc::sync_channel(1);
        let thread_faults = faults.clone();
        let thread = std::thread::Builder::new()
            .name("fault-proxy".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("build the fault proxy's runtime");
                rt.block_on(async move {
                    let listener = match bind("127.0.0.1:0".parse().unwrap()) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready.send(listener.local_addr());
                    run(listener, upstream, thread_faults, control_rx).await;
                });
                // Dropping the runtime here, off any async context, aborts whatever is left.
            })
            .expect("start the fault proxy's thread");
        let addr = match ready_rx.recv_timeout(CONTROL_TIMEOUT) {
            Ok(Ok(addr)) => addr,
            other => panic!("the fault proxy did not start: {other:?}"),
        };
        uri_options.retain(|(k, _)| !k.eq_ignore_ascii_case("directConnection"));
        uri_options.push(("directConnection".into(), "true".into()));
        FaultProxy {
            addr,
            uri_base: format!("{scheme_and_credentials}{addr}{path}"),
            uri_options,
            faults,
            control: Some(control),
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URI to give the driver: the server's, pointed at the proxy.
    pub fn uri(&self) -> String {
        self.uri_with(&[])
    }

    /// `uri()` with `options` set, replacing options of the same name (case-insensitive, as
    /// the driver reads them), e.g. `[("serverSelectionTimeoutMS", "1000")]`.
    pub fn uri_with(&self, options: &[(&str, &str)]) -> String {
        let mut all: Vec<(&str, &str)> = self
            .uri_options
            .iter()
            .filter(|(k, _)| !options.iter().any(|(o, _)| o.eq_ignore_ascii_case(k)))
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        all.extend_from_slice(options);
        let query: Vec<String> = all.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{}?{}", self.uri_base, query.join("&"))
    }

    /// `true`: closes every relayed connection (client and server side) and stops listening,
    /// so connecting to `addr()` is refused. `false`: listens on `addr()` again. Returns once
    /// done; repeating the current state does nothing. Panics if the port cannot be bound
    /// again (another process took it while the proxy was down).
    pub fn set_down(&self, down: bool) {
        let (ack, ack_rx) = mpsc::sync_channel(1);
        self.control
            .as_ref()
            .expect("proxy running")
            .send(Control::SetDown(down, ack))
            .expect("the fault proxy's thread is gone");
        match ack_rx.recv_timeout(CONTROL_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("fault proxy: set_down({down}) on {}: {e}", self.addr),
            Err(e) => panic!("fault proxy: set_down({down}) got no answer: {e}"),
        }
    }

    /// Drops the reply to each of the next `n` acknowledged `update` commands, on whichever
    /// connections they come: the command reaches the server, its reply is read (so the write
    /// has been applied) and discarded, and the client's connection is closed. Replaces any
    /// count still armed; 0 disarms.
    pub fn drop_reply_after_apply(&self, n: u64) {
        self.faults.armed.store(n, Ordering::SeqCst);
    }

    /// Replies dropped so far by `drop_reply_after_apply`.
    pub fn dropped_replies(&self) -> u64 {
        self.faults.dropped.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // Closing the control channel ends the proxy's main task; the thread then drops its
        // runtime, which aborts the accept loop and every relay and closes their sockets.
        drop(self.control.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A listener on `addr` with SO_REUSEADDR, so that the port can be bound again after
/// `set_down(true)` although its old connections linger in TIME_WAIT.
fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// While up: an accept loop and the relays it started, all stopped by one token.
struct Up {
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Up {
    fn start(listener: TcpListener, upstream: Arc<str>, faults: Arc<Faults>) -> Up {
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(accept_loop(listener, upstream, faults, stop.clone(), tasks.clone()));
        Up { stop, tasks }
    }

    /// Returns once the listener is closed and every relayed connection with it.
    async fn stop(self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

async fn run(
    listener: TcpListener,
    upstream: String,
    faults: Arc<Faults>,
    mut control: tokio_mpsc::UnboundedReceiver<Control>,
) {
    let upstream: Arc<str> = upstream.into();
    let addr = listener.local_addr().expect("listener address");
    let mut up = Some(Up::start(listener, upstream.clone(), faults.clone()));
    while let Some(Control::SetDown(down, ack)) = control.recv().await {
        let result = match (down, up.take()) {
            (true, Some(running)) => {
                running.stop().await;
                Ok(())
            }
            (false, None) => bind(addr).map(|listener| {
                up = Some(Up::start(listener, upstream.clone(), faults.clone()));
            }),
            (_, running) => {
                up = running;
                Ok(())
            }
        };
        let _ = ack.send(result);
    }
    if let Some(running) = up {
        running.stop().await;
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: Arc<str>,
    faults: Arc<Faults>,
    stop: CancellationToken,
    tasks: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((client, _)) => {
                tasks.spawn(relay(client, upstream.clone(), faults.clone(), stop.clone()));
            }
            // Out of file descriptors and the like: try again rather than spin.
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Relays one client connection until either side closes it, a reply is dropped, or `stop`.
/// Both directions run at once, whole messages at a time: a server may send several replies
/// to one request (moreToCome, as in the streaming hello that monitors a real server).
async fn relay(
    mut client: TcpStream,
    upstream: Arc<str>,
    faults: Arc<Faults>,
    stop: CancellationToken,
) {
    let server = tokio::select! {
        biased;
        _ = stop.cancelled() => return,
        server = TcpStream::connect(&*upstream) => server,
    };
    // Refusing the client is what a dead upstream looks like to it.
    let Ok(mut server) = server else { return };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    // The requestID of an update whose reply is to be dropped. Set before the request is
    // forwarded, so it is always in place when the reply comes.
    let drop_reply_to = Mutex::new(None);
    // Whichever ends first ends the connection: returning drops both sockets, closing them.
    tokio::select! {
        biased;
        _ = stop.cancelled() => {}
        _ = forward_requests(&mut client_read, &mut server_write, &faults, &drop_reply_to) => {}
        _ = forward_replies(&mut server_read, &mut client_write, &faults, &drop_reply_to) => {}
    }
}

async fn forward_requests(
    client: &mut (impl AsyncRead + Unpin),
    server: &mut (impl AsyncWrite + Unpin),
    faults: &Faults,
    drop_reply_to: &Mutex<Option<i32>>,
) -> io::Result<()> {
    loop {
        let msg = read_message(client).await?;
        if is_acknowledged_update(&msg) && faults.take_armed() {
            *drop_reply_to.lock().unwrap() = Some(header_field(&msg, 4));
        }
        server.write_all(&msg).await?;
    }
}

/// Returns `Ok` after dropping a reply, so that the connection is closed.
async fn forward_replies(
    server: &mut (impl AsyncRead + Unpin),
    client: &mut (impl AsyncWrite + Unpin),
    faults: &Faults,
    drop_reply_to: &Mutex<Option<i32>>,
) -> io::Result<()> {
    loop {
        let msg = read_message(server).await?;
        if *drop_reply_to.lock().unwrap() == Some(header_field(&msg, 8)) {
            faults.dropped.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        client.write_all(&msg).await?;
    }
}

/// Reads one whole message: header and body.
async fn read_message(from: &mut (impl AsyncRead + Unpin)) -> io::Result<Vec<u8>> {
    let mut header = [0u8; HEADER_LEN];
    from.read_exact(&mut header).await?;
    let len = i32::from_le_bytes(header[..4].try_into().unwrap());
    let len = usize::try_from(len).unwrap_or(0);
    if !(HEADER_LEN..=MAX_MESSAGE).contains(&len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message length {len} out of range"),
        ));
    }
    let mut msg = vec![0u8; len];
    msg[..HEADER_LEN].copy_from_slice(&header);
    from.read_exact(&mut msg[HEADER_LEN..]).await?;
    Ok(msg)
}

/// The int32 at `offset` of a message's header (4: requestID, 8: responseTo, 12: opCode).
fn header_field(msg: &[u8], offset: usize) -> i32 {
    i32::from_le_bytes(msg[offset..offset + 4].try_into().unwrap())
}

fn is_acknowledged_update(msg: &[u8]) -> bool {
    command_name(msg) == Some("update") && op_msg_flags(msg).is_some_and(|f| f & MORE_TO_COME == 0)
}

fn op_msg_flags(msg: &[u8]) -> Option<u32> {
    if msg.len() < HEADER_LEN + 4 || header_field(msg, 12) != OP_MSG {
        return None;
    }
    Some(u32::from_le_bytes(msg[HEADER_LEN..HEADER_LEN + 4].try_into().unwrap()))
}

/// The command an uncompressed OP_MSG carries: the name of the first element of its body,
/// the one kind-0 section (kind-1 sections, document sequences, may come before or after).
/// `None` for other messages and for malformed ones.
pub fn command_name(msg: &[u8]) -> Option<&str> {
    let flags = op_msg_flags(msg)?;
    let end = if flags & CHECKSUM_PRESENT != 0 { msg.len().checked_sub(4)? } else { msg.len() };
    let mut at = HEADER_LEN + 4;
    while at < end {
        let kind = msg[at];
        at += 1;
        // Both kinds start with their int32 size, which counts itself.
        let size = i32::from_le_bytes(msg.get(at..at + 4)?.try_into().unwrap());
        let size = usize::try_from(size).ok().filter(|&s| s >= 5)?;
        let section = msg.get(at..at.checked_add(size)?).filter(|_| at + size <= end)?;
        match kind {
            0 => {
                // int32 size, then elements: type byte (0 ends the document), cstring name.
                if section[4] == 0 {
                    return None;
                }
                let name = &section[5..];
                let nul = name.iter().position(|&b| b == 0)?;
                return std::str::from_utf8(&name[..nul]).ok();
            }
            1 => at += size,
            _ => return None,
        }
    }
    None
}
