//! `GET /api/v1/status`: a small summary of the server's state for the console (and anyone
//! else): ingest so far, buffered readings against their bound, the write-ahead log's backlog,
//! store readiness and flush errors.
//!
//! The numbers come from the objects that own them, through [`StatusSource`], which the server
//! implements (this module cannot import the buffers, the log or the flusher: they are below
//! `server`, not below `api`), never from the Prometheus text.

use std::time::Duration;

use serde::Serialize;

use crate::store::Store;

/// How long the status waits for the store's ping before it says "not ready": the console
/// refreshes every 2 s.
const STATUS_PING_TIMEOUT: Duration = Duration::from_secs(1);

/// The counts the server keeps, read at one moment (each on its own: not one snapshot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusCounts {
    pub readings_accepted_total: u64,
    pub buffered_readings: u64,
    pub buffered_bytes: u64,
    pub buffered_bound_bytes: u64,
    /// Sensors with buffered readings.
    pub buffered_sensors: u64,
    /// `None` when no write-ahead log is open (`--ack=buffered`).
    pub wal: Option<WalCounts>,
    pub flush_errors_total: u64,
    pub dead_letters: DeadLetterStatus,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalCounts {
    pub unsettled_readings: u64,
    pub replaying_segments: u64,
    pub bytes: u64,
    pub max_bytes: u64,
}

/// Where the status reads its counts: implemented by the server over its buffers, log,
/// intake and flusher.
pub trait StatusSource: Send + Sync + 'static {
    fn counts(&self) -> StatusCounts;
}

/// A source that knows nothing: every count zero, no log.
pub struct NoStatus;

impl StatusSource for NoStatus {
    fn counts(&self) -> StatusCounts {
        StatusCounts::default()
    }
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct StatusResponse {
    pub store: StoreStatus,
    /// Readings accepted since the server started (all protocols).
    #[schema(example = 120_000)]
    pub readings_accepted_total: u64,
    pub buffered: BufferedStatus,
    /// `null` when no write-ahead log is open (`--ack=buffered`).
    pub wal: Option<WalStatus>,
    /// Failed store writes since start (each retried or, if rejected, dropped and counted).
    pub flush_errors_total: u64,
    /// Sensors holding buffered (not yet stored) readings.
    pub series: u64,
    pub dead_letters: DeadLetterStatus,
}

/// Readings the store refused for good, kept on disk until replayed
/// (`POST /api/v1/dead-letters/replay`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct DeadLetterStatus {
    /// Files waiting for a replay.
    pub files: u64,
    /// Bytes they take (bound: `--dead-letter-max-bytes`).
    pub bytes: u64,
    /// Readings kept there since the server started.
    pub readings_total: u64,
    /// The store's reason for the latest refusal since start; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_reason: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct StoreStatus {
    /// `mongodb`, `embedded` or `memory`.
    #[schema(example = "embedded")]
    pub name: String,
    /// Whether the store answered a ping within a second.
    pub ready: bool,
    /// Why it is not ready; absent when ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct BufferedStatus {
    /// Readings held in memory: buffered or being written.
    pub readings: u64,
    /// What they hold, in bytes, as the memory budget counts it.
    pub bytes: u64,
    /// The buffers' bound in bytes: their share of `--memory-budget`.
    pub bound_bytes: u64,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct WalStatus {
    /// Logged readings the store has not confirmed yet.
    pub unsettled_readings: u64,
    /// Segments an earlier process left that are not yet read back whole: their readings are
    /// not counted in `unsettled_readings` until read.
    pub replaying_segments: u64,
    /// Bytes the log's segments take on disk.
    pub bytes: u64,
    /// The bound, `--wal-max-bytes`.
    pub max_bytes: u64,
}

/// The server's state now: the store's readiness (its ping, bounded in time) and `source`'s
/// counts.
pub(crate) async fn status(store: &dyn Store, source: &dyn StatusSource) -> StatusResponse {
    let (ready, reason) = match tokio::time::timeout(STATUS_PING_TIMEOUT, store.ping()).await {
        Ok(Ok(())) => (true, None),
        Ok(Err(e)) => (false, Some(e.to_string())),
        Err(_) => (false, Some(format!("no answer to ping within {STATUS_PING_TIMEOUT:?}"))),
    };
    let c = source.counts();
    StatusResponse {
        store: StoreStatus { name: store.name().to_owned(), ready, reason },
        readings_accepted_total: c.readings_accepted_total,
        buffered: BufferedStatus {
            readings: c.buffered_readings,
            bytes: c.buffered_bytes,
            bound_bytes: c.buffered_bound_bytes,
        },
        wal: c.wal.map(|w| WalStatus {
            unsettled_readings: w.unsettled_readings,
            replaying_segments: w.replaying_segments,
            bytes: w.bytes,
            max_bytes: w.max_bytes,
        }),
        flush_errors_total: c.flush_errors_total,
        series: c.buffered_sensors,
        dead_letters: c.dead_letters,
    }
}
