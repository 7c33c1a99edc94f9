//! The accept loop both listeners share (HTTP in `http::serve`, raw line protocol in
//! `ingest::tcp`): accept until shutdown, survive accept errors, and hold every connection to a
//! total limit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Pause after a failed accept: the usual cause is running out of file descriptors, and
/// retrying at once would spin until one is freed.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A connection within the limit; it holds its slot until `permit` is dropped.
pub struct Accepted {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    pub permit: OwnedSemaphorePermit,
}

/// The next connection that fits within `permits`, or `None` once `shutdown` fires.
/// Full-policy: a connection over the limit is accepted and closed at once (the client sees
/// the close instead of waiting in the kernel's backlog), counted as
/// `counter{result="rejected"}`. `what` names the listener in logs.
pub async fn accept_within_limit(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    shutdown: &CancellationToken,
    counter: &'static str,
    what: &'static str,
) -> Option<Accepted> {
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return None,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "{what} accept failed");
                tokio::select! {
                    _ = shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                }
            }
        };
        match permits.clone().try_acquire_owned() {
            Ok(permit) => return Some(Accepted { stream, peer, permit }),
            Err(_) => {
                metrics::counter!(counter, "result" => "rejected").increment(1);
                tracing::debug!(%peer, "{what} connection over the limit, closed");
                drop(stream);
            }
        }
    }
}
