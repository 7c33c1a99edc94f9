//! The HTTP accept loop: hyper connections serving the router, with the limits `axum::serve`
//! does not offer.
//!
//! - Open connections are bounded by a semaphore; one over the limit is accepted and closed at
//!   once (as on the TCP listener).
//! - Header timeout (slowloris): once the first byte of a request arrives, its whole header must
//!   arrive within `header_timeout`, or the connection is closed.
//! - Idle timeout: a connection with no request in progress that sends nothing for
//!   `idle_timeout` is closed. hyper's own `header_read_timeout` cannot do both: it starts when
//!   hyper begins waiting for a request, so it would close idle keep-alive connections after the
//!   short header timeout (and clients such as Telegraf reuse theirs every flush interval).
//!
//! Request bodies and responses are not bound here: write requests have `--request-timeout`.
//!
//! With TLS, a connection's handshake runs on its own task within the handshake timeout
//! (`crate::tls`); the header and idle clocks start once it is done.
//!
//! Graceful shutdown: on `shutdown` the loop stops accepting, idle connections close, busy ones
//! finish their request first; [`serve`] returns when every connection has closed.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use crate::listener::{Accepted, accept_within_limit};
use crate::metrics::HTTP_CONNECTIONS;
use crate::tls::{Listener, Tls};

#[derive(Clone, Copy, Debug)]
pub struct ServeConfig {
    /// Open connections; one more is accepted and closed at once.
    pub max_connections: usize,
    /// From a request's first byte to the end of its header.
    pub header_timeout: Duration,
    /// Silence allowed while no request is in progress.
    pub idle_timeout: Duration,
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown`, then waits for
/// open connections to close.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    config: ServeConfig,
    tls: Option<Arc<Tls>>,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let tracker = TaskTracker::new();
    while let Some(Accepted { stream, peer, permit }) =
        accept_within_limit(&listener, &permits, &shutdown, HTTP_CONNECTIONS, "HTTP").await
    {
        metrics::counter!(HTTP_CONNECTIONS, "result" => "accepted").increment(1);
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        tracker.spawn(async move {
            match tls {
                None => serve_connection(stream, peer, app, config, shutdown).await,
                Some(tls) => {
                    if let Some(stream) = tls.accept(stream, Listener::Http, &shutdown).await {
                        serve_connection(stream, peer, app, config, shutdown).await;
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    tracker.close();
    tracker.wait().await;
}

async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    app: Router,
    config: ServeConfig,
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched { inner: stream, activity: activity.clone() });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            // Created here and moved into the future and then the body, so a request dropped
            // halfway (client gone, HTTP/2 reset) still ends.
            let guard = activity.begin_request();
            let app = app.clone();
            async move {
                let response = app.oneshot(request.map(Body::new)).await?;
                Ok::<_, std::convert::Infallible>(
                    response.map(|inner| GuardedBody { inner, _guard: guard }),
                )
            }
        })
    };
    let builder = Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    let watchdog = watchdog(&activity, config);
    tokio::pin!(watchdog);
    let mut draining = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
                }
                return;
            }
            _ = shutdown.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            reason = &mut watchdog => {
                metrics::counter!(HTTP_CONNECTIONS, "result" => reason).increment(1);
                tracing::debug!(%peer, reason, "HTTP connection closed");
                // Dropping the connection closes the socket.
                return;
            }
        }
    }
}

/// Resolves with a reason when the connection has broken a timeout.
async fn watchdog(activity: &Activity, config: ServeConfig) -> &'static str {
    let header_ms = millis(config.header_timeout);
    let idle_ms = millis(config.idle_timeout);
    loop {
        let now = activity.now_ms();
        // Requests in progress are bound elsewhere; look again after an idle period.
        let (deadline, reason) = if activity.in_flight.load(Ordering::Acquire) > 0 {
            (now + idle_ms, None)
        } else {
            match activity.head_started.load(Ordering::Acquire) {
                NOT_STARTED => (
                    activity.last.load(Ordering::Acquire).saturating_add(idle_ms),
                    Some("idle_timeout"),
                ),
                started => (started.saturating_add(header_ms), Some("header_timeout")),
            }
        };
        if let Some(reason) = reason
            && now >= deadline
        {
            return reason;
        }
        let at = activity.base + Duration::from_millis(deadline);
        // A header starting wakes the watchdog: its deadline may come before the idle one.
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = activity.head_began.notified() => {}
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX / 2)
}

const NOT_STARTED: u64 = u64::MAX;

/// What the watchdog knows of a connection, in milliseconds since it was accepted.
struct Activity {
    base: Instant,
    /// Last byte read or written, or last response finished.
    last: AtomicU64,
    /// First byte of the request header being read; [`NOT_STARTED`] between requests.
    head_started: AtomicU64,
    in_flight: AtomicUsize,
    head_began: Notify,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            base: Instant::now(),
            last: AtomicU64::new(0),
            head_started: AtomicU64::new(NOT_STARTED),
            in_flight: AtomicUsize::new(0),
            head_began: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        millis(self.base.elapsed())
    }

    fn read(&self, n: usize) {
        if n == 0 {
            return;
        }
        let now = self.now_ms();
        self.last.store(now, Ordering::Release);
        if self.in_flight.load(Ordering::Acquire) == 0
            && self
                .head_started
                .compare_exchange(NOT_STARTED, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.head_began.notify_one();
        }
    }

    fn wrote(&self, n: usize) {
        if n > 0 {
            self.last.store(self.now_ms(), Ordering::Release);
        }
    }

    fn begin_request(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_started.store(NOT_STARTED, Ordering::Release);
        RequestGuard(self.clone())
    }
}

/// A request in progress: from its header parsed to its response body dropped.
struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.last.store(self.0.now_ms(), Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The response body, holding its request's guard until hyper has sent it (or given up).
struct GuardedBody {
    inner: Body,
    _guard: RequestGuard,
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The connection, reporting every read and write to the watchdog.
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            self.activity.read(buf.filled().len() - before);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.activity.wrote(n);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            self.activity.wrote(n);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn watchdog_tells_idle_from_a_stalled_header() {
        let config = ServeConfig {
            max_connections: 1,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        };
        // Idle from the start: closed after the idle timeout, not the header timeout.
        let activity = Arc::new(Activity::new());
        let start = Instant::now();
        assert_eq!(watchdog(&activity, config).await, "idle_timeout");
        assert_eq!(start.elapsed(), Duration::from_secs(60));

        // A header begins 30 s in: closed 10 s later.
        let activity = Arc::new(Activity::new());
        let start = Instant::now();
        let begin = {
            let activity = activity.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(30)).await;
                activity.read(5);
                std::future::pending::<()>().await;
            }
        };
        let reason = tokio::select! {
            r = watchdog(&activity, config) => r,
            _ = begin => unreachable!(),
        };
        assert_eq!(reason, "header_timeout");
        assert_eq!(start.elapsed(), Duration::from_secs(40));

        // A request in progress is never cut; once it ends, the idle clock starts again.
        let activity = Arc::new(Activity::new());
        activity.read(5);
        let guard = activity.begin_request();
        let start = Instant::now();
        let end_later = async move {
            tokio::time::sleep(Duration::from_secs(300)).await;
            drop(guard);
            std::future::pending::<()>().await;
        };
        let reason = tokio::select! {
            r = watchdog(&activity, config) => r,
            _ = end_later => unreachable!(),
        };
        assert_eq!(reason, "idle_timeout");
        assert!(start.elapsed() >= Duration::from_secs(360), "{:?}", start.elapsed());
        assert!(start.elapsed() < Duration::from_secs(421), "{:?}", start.elapsed());
    }
}
