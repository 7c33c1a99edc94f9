//! HTTP write endpoints: bucketd's JSON/NDJSON API and InfluxDB's `/write`, `/api/v2/write`,
//! and `/ping`. (`/query`, InfluxQL, is the query module's.)
//!
//! | request | success | failures |
//! |---|---|---|
//! | `POST /api/v1/readings` (JSON: one reading or an array) | 202 `{"accepted": n}` | 400 `{"error", "accepted", "rejected": [{"index", "error"}] (first 100), "rejected_count"}` with the valid items accepted; 400 malformed/empty; 413 over `--max-body-bytes` (also decompressed) or more readings than `--max-buffered-readings`; 415 content type/encoding; 503 + `Retry-After: 1` buffers full (nothing accepted) |
//! | `POST /api/v1/readings` (`application/x-ndjson`, streamed) | 202 `{"accepted": n}` | as JSON, but pushed every 10,000 lines: a 503 body's `accepted` counts pieces already taken, which stay accepted; only each line is bound by `--max-body-bytes` |
//! | `POST /write` (v1), `POST /api/v2/write` (v2), gzip accepted | 204 | 400 partial write (good lines kept; v1 `{"error"}`, v2 `{"code": "invalid", "message"}` naming the first 100 bad lines, 1-based); 400 bad precision; 413; 503 + `Retry-After` (nothing accepted) |
//! | `GET`, `HEAD` `/ping` | 204, `X-Influxdb-Version`, `X-Influxdb-Build: OSS` | |
//!
//! Write routes share one concurrency limit (`--max-concurrent-writes`, over it: 503 +
//! `Retry-After`) and a timeout (`--request-timeout`, 408); those two answer in bucketd's
//! `{"error"}` shape on every route.
//!
//! Bodies read whole (JSON documents, line protocol) are bound by `max_body_bytes` before and
//! after gzip decompression. NDJSON is streamed: chunks go through the decoder as they arrive
//! and accepted readings are pushed every [`NDJSON_PUSH_READINGS`], so a body of any size
//! needs memory for one chunk, one line and one push batch.
//!
//! # Layout
//! - [`readings`]: bucketd's JSON/NDJSON endpoint.
//! - [`influx`]: InfluxDB's write endpoints and `/ping`.
//! - [`dead_letters`]: `POST /api/v1/dead-letters/replay`, what the store refused written back.
//! - `body`: reading bodies, gzip.
//! - [`schemas`]: the ingest bodies' shapes, for the OpenAPI document.

mod body;
pub mod dead_letters;
pub mod influx;
pub mod readings;
pub mod schemas;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::http::Uri;
use axum::routing::{get, post};
use axum::{BoxError, Router};
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;

pub use body::gunzip_limited;

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
    fn limits_in(&self, name: Option<&str>) -> Result<Cow<'_, InputLimits>, ApiError> {
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

/// The write routes, with their own concurrency limit and timeout; `/ping` is cheap and stays
/// outside both.
pub fn router(state: IngestState) -> Router {
    let timeout = state.http.request_timeout;
    let guard = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(move |uri: Uri, err: BoxError| async move {
            let error = if err.is::<tower::timeout::error::Elapsed>() {
                ApiError::Timeout(timeout)
            } else if err.is::<tower::load_shed::error::Overloaded>() {
                ApiError::Overloaded
            } else {
                ApiError::Internal(format!("write middleware: {err}"))
            };
            // In the route's own error shape, so that an InfluxDB client reads these as it
            // reads every other error of its endpoint.
            error.into_response_for(uri.path())
        }))
        // Shed rather than queue: a queued write holds its body in memory while it waits.
        .load_shed()
        // Global: one semaphore shared by every write route (a plain ConcurrencyLimitLayer
        // would give each route its own).
        .layer(GlobalConcurrencyLimitLayer::new(state.http.max_concurrent_writes))
        .timeout(timeout);

    Router::new()
        .route("/api/v1/readings", post(readings::write_readings))
        .route("/write", post(influx::write_v1))
        .route("/api/v2/write", post(influx::write_v2))
        .route("/api/v1/dead-letters/replay", post(dead_letters::replay))
        .route_layer(guard)
        .route("/ping", get(influx::ping))
        .with_state(state)
}

fn now_ms() -> TimestampMs {
    chrono::Utc::now().timestamp_millis()
}

/// A refused push: the API's error, and the reason its readings were counted rejected under.
struct Refused {
    error: ApiError,
    reason: &'static str,
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> Self {
        r.error
    }
}

/// Accepts all-or-nothing (returning once the readings are as durable as `--ack` promises)
/// and counts the outcome. More readings than the buffers' whole bound could never be taken,
/// so that is 413 rather than a 503 the client would retry forever.
async fn push(
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
