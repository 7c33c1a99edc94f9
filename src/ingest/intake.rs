//! Where parsed readings enter the server: the write-ahead log (unless `--ack=buffered`) and the
//! buffers, in one order. What "accepted" means is decided here and nowhere else.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::buffer::{BufferFull, Buffers};
use crate::http::ApiError;
use crate::model::Item;
use crate::wal::{Record, Wal, WalError};

/// How long a TCP connection waits before asking a full log for room again.
const WAL_ROOM_POLL: Duration = Duration::from_millis(50);

/// What a 2xx promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AckMode {
    /// The readings are in the write-ahead log, fsync'd (group commit): they survive a crash
    /// of bucketd or of the machine.
    Wal,
    /// The readings are in memory: a crash loses what was not yet flushed to the store
    /// (up to about one flush interval, plus everything while the store is down).
    Buffered,
}

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error(transparent)]
    BuffersFull(#[from] BufferFull),
    #[error(transparent)]
    Wal(#[from] WalError),
}

impl IntakeError {
    /// The reason label the refused readings are counted under.
    pub fn reason(&self) -> &'static str {
        match self {
            IntakeError::BuffersFull(_) => "buffers_full",
            IntakeError::Wal(WalError::Full { .. }) => "wal_full",
            IntakeError::Wal(WalError::NoSpace(_)) => "disk_full",
            IntakeError::Wal(_) => "wal_failed",
        }
    }
}

/// Nothing of the refused request was accepted; a streamed write says how much of it was
/// (`ApiError::with_accepted`).
impl From<IntakeError> for ApiError {
    fn from(e: IntakeError) -> Self {
        match e {
            IntakeError::BuffersFull(_) => ApiError::BuffersFull { accepted: 0 },
            IntakeError::Wal(WalError::Full { .. }) => ApiError::WalFull { accepted: 0 },
            IntakeError::Wal(WalError::NoSpace(_)) => ApiError::DiskFull { accepted: 0 },
            IntakeError::Wal(e) => ApiError::WalFailed(e.to_string()),
        }
    }
}

pub struct Intake {
    buffers: Arc<Buffers>,
    /// `None` with `--ack=buffered`.
    wal: Option<Arc<Wal>>,
    /// Readings accepted since start (what `bucketd_readings_accepted_total` counts, kept
    /// here too so that the server can say it without reading its metrics back).
    accepted: AtomicU64,
}

impl Intake {
    pub fn new(buffers: Arc<Buffers>, wal: Option<Arc<Wal>>) -> Intake {
        Intake { buffers, wal, accepted: AtomicU64::new(0) }
    }

    /// Readings accepted since start.
    pub fn accepted_total(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    fn count(&self, n: usize) -> usize {
        self.accepted.fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    pub fn ack_mode(&self) -> AckMode {
        if self.wal.is_some() { AckMode::Wal } else { AckMode::Buffered }
    }

    /// Whether [`Intake::accept`] would refuse a push of up to `n` readings now (no room for
    /// them, nothing to spill into): an overloaded server so refuses a request before the cost
    /// of parsing it.
    pub fn refuses_push_of(&self, n: usize) -> bool {
        self.buffers.refuses_push_of(n, self.wal.is_some())
    }

    /// Accepts all of `items` or none, and returns once they are as durable as the ack mode
    /// promises. Refuses at once (the caller answers 503) when the buffers are full and the
    /// store is writing (it is only slower than ingest), or when the log is full. While the
    /// store is failing, full buffers spill into the log instead and the refill brings the
    /// readings in as the store drains them (`Buffers::push_or_spill`).
    pub async fn accept(&self, items: Vec<Item>) -> Result<usize, IntakeError> {
        let n = items.len();
        if n == 0 {
            return Ok(0);
        }
        let Some(wal) = &self.wal else {
            self.buffers.push(items)?;
            return Ok(self.count(n));
        };
        let record = Record::encode(&items).map_err(|e| WalError::Encode(e.to_string()))?;
        let (ticket, _) = self
            .buffers
            .push_or_spill(items, |first| wal.append(&record, first).map_err(IntakeError::from))?;
        wal.synced(ticket).await?;
        Ok(self.count(n))
    }

    /// For raw TCP, which has no acknowledgement: waits for room (in the log, or with
    /// `--ack=buffered` in the buffers) instead of refusing (flow control: the connection is not
    /// read meanwhile; a full disk is waited out the same way), and does not wait for the
    /// fsync. Fails only when the log has failed or closed.
    pub async fn accept_when_room(&self, items: Vec<Item>) -> Result<usize, WalError> {
        let n = items.len();
        let Some(wal) = &self.wal else {
            let pushed = self.buffers.push_when_room(items).await;
            return Ok(self.count(pushed));
        };
        if n == 0 {
            return Ok(0);
        }
        let record = Record::encode(&items).map_err(|e| WalError::Encode(e.to_string()))?;
        let limit = wal.max_bytes();
        if record.encoded_len() as u64 > limit {
            return Err(WalError::Full { used: wal.used_bytes(), limit });
        }
        let mut items = items;
        loop {
            while !wal.has_room(record.encoded_len() as u64) {
                tokio::time::sleep(WAL_ROOM_POLL).await;
            }
            let pushed = self.buffers.push_or_spill(items, |first| {
                wal.append(&record, first).map_err(IntakeError::from)
            });
            match pushed {
                Ok(_) => return Ok(self.count(n)),
                // Another writer took the room first: the record still holds the readings.
                Err(IntakeError::Wal(WalError::Full { .. })) => {}
                Err(IntakeError::BuffersFull(_)) => {
                    // Released room wakes this early; the timeout covers a release between
                    // the refusal and the wait.
                    let _ = tokio::time::timeout(WAL_ROOM_POLL, self.buffers.room_freed()).await;
                }
                Err(IntakeError::Wal(WalError::NoSpace(_))) => {
                    tokio::time::sleep(WAL_ROOM_POLL).await;
                }
                Err(IntakeError::Wal(e)) => return Err(e),
            }
            items = record.decode().map_err(|e| WalError::Encode(e.to_string()))?;
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    #[test]
    fn each_refusal_has_its_status_and_its_reason() {
        let cases = [
            (
                IntakeError::BuffersFull(BufferFull { buffered: 1, limit: 1, unit: "bytes" }),
                StatusCode::SERVICE_UNAVAILABLE,
                "buffers_full",
            ),
            (
                IntakeError::Wal(WalError::Full { used: 2, limit: 1 }),
                StatusCode::SERVICE_UNAVAILABLE,
                "wal_full",
            ),
            (
                IntakeError::Wal(WalError::NoSpace("ENOSPC".into())),
                StatusCode::INSUFFICIENT_STORAGE,
                "disk_full",
            ),
            (
                IntakeError::Wal(WalError::Failed("EIO".into())),
                StatusCode::INTERNAL_SERVER_ERROR,
                "wal_failed",
            ),
        ];
        for (e, status, reason) in cases {
            assert_eq!(e.reason(), reason);
            assert_eq!(ApiError::from(e).status(), status, "{reason}");
        }
    }
}
