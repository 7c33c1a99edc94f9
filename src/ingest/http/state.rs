//! What every write endpoint shares: its state and limits, and the push that accepts or
//! refuses a request's readings and counts the outcome.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::databases::Registry;
use crate::flush::dead_letter::DeadLetters;
use crate::http::ApiError;
use crate::ingest::intake::Intake;
use crate::ingest::memory::RequestMemory;
use crate::ingest::metrics::{Protocol, count_accepted, count_rejected};
use crate::ingest::validate::InputLimits;
use crate::model::{Item, TimestampMs};

/// Readings a streamed NDJSON request accumulates before pushing them into the buffers: large
/// enough to amortise the push, small enough to bound one request's extra memory.
pub const NDJSON_PUSH_READINGS: usize = 10_000;

/// What the write endpoints use. Cheap to clone: one per request.
#[derive(Clone)]
pub struct IngestState {
    /// Where readings go: the write-ahead log and the buffers.
    pub intake: Arc<Intake>,
    pub limits: Arc<InputLimits>,
    pub http: HttpLimits,
    /// The share of the memory budget that bodies being read and parsed hold.
    pub memory: RequestMemory,
    /// Where the flusher keeps what the store refused; `None`: nothing to replay.
    pub dead_letters: Option<Arc<DeadLetters>>,
    /// The databases a write may name.
    pub databases: Arc<Registry>,
}

impl IngestState {
    /// The limits of a write to the database called `name` (the default one when `None`);
    /// a database that does not exist is refused, as InfluxDB 1.x refuses it.
    pub(super) fn limits_in(&self, name: Option<&str>) -> Result<Cow<'_, InputLimits>, ApiError> {
        let db = self.databases.get(name)?;
        Ok(if db.is_default() {
            Cow::Borrowed(&*self.limits)
        } else {
            Cow::Owned(self.limits.in_database(db))
        })
    }
}

/// Limits of the HTTP write endpoints.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    /// Largest body read whole, also after decompression; NDJSON lines are each bound by it.
    pub max_body_bytes: usize,
    /// A write request that takes longer gets 408.
    pub request_timeout: Duration,
    /// Write requests handled at once; more get 503.
    pub max_concurrent_writes: usize,
    /// The buffers' bound: a request read whole with more readings can never fit (413), and
    /// streamed NDJSON pushes in pieces no larger than it.
    pub max_buffered_readings: usize,
}

pub(super) fn now_ms() -> TimestampMs {
    chrono::Utc::now().timestamp_millis()
}

/// A refused push: the API's error, and the reason its readings were counted rejected under.
pub(super) struct Refused {
    pub(super) error: ApiError,
    pub(super) reason: &'static str,
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> Self {
        r.error
    }
}

/// Accepts all-or-nothing (returning once the readings are as durable as `--ack` promises)
/// and counts the outcome. More readings than the buffers' whole bound could never be taken,
/// so that is 413 rather than a 503 the client would retry forever.
pub(super) async fn push(
    intake: &Intake,
    items: Vec<Item>,
    protocol: Protocol,
    limits: &HttpLimits,
) -> Result<usize, Refused> {
    if items.is_empty() {
        return Ok(0);
    }
    let n = items.len();
    let refused = |error: ApiError, reason: &'static str| {
        count_rejected(protocol, reason, n);
        Refused { error, reason }
    };
    if n > limits.max_buffered_readings {
        let error = ApiError::TooManyReadings { count: n, limit: limits.max_buffered_readings };
        return Err(refused(error, "too_many_readings"));
    }
    match intake.accept(items).await {
        Ok(accepted) => {
            count_accepted(protocol, accepted);
            Ok(accepted)
        }
        Err(e) => {
            let reason = e.reason();
            Err(refused(e.into(), reason))
        }
    }
}
