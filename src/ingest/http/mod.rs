//! HTTP write endpoints: bucketd's JSON/NDJSON API and InfluxDB's `/write`, `/api/v2/write`,
//! and `/ping`. (`/query`, InfluxQL, is the query module's.)
//!
//! | request | success | failures |
//! |---|---|---|
//! | `POST /api/v1/readings` (JSON: one reading or an array) | 202 `{"accepted": n}` | 400 `{"error", "accepted", "rejected": [{"index", "error"}] (first 100), "rejected_count"}` with the valid items accepted; 400 malformed/empty; 413 over `--max-body-bytes` (also decompressed) or more readings than `--max-buffered-readings`; 415 content type/encoding; 503 + `Retry-After: 1` buffers full (nothing accepted) |
//! | `POST /api/v1/readings` (`application/x-ndjson`, streamed) | 202 `{"accepted": n}` | as JSON, but pushed every 10,000 lines: a 503 body's `accepted` counts pieces already taken, which stay accepted; only each line is bound by `--max-body-bytes` |
//! | `POST /write` (v1), `POST /api/v2/write` (v2), gzip accepted | 204 | 400 partial write (good lines kept; v1 `{"error"}`, v2 `{"code": "invalid", "message"}` naming the first 100 bad lines, 1-based); 400 bad precision; 413; 503 + `Retry-After` (nothing accepted) |
//! | `POST /api/v1/write` (Prometheus remote write 1.0, snappy) | 204 | 400 unreadable body or partial write (series refused; NaN/±Inf samples are skipped, not refused); 413; 415 not snappy or remote write 2.0; 503 + `Retry-After` (nothing accepted) |
//! | `POST /v1/metrics` (OTLP, protobuf or JSON, gzip accepted) | 200 `ExportMetricsServiceResponse` (`partial_success` counts refused points) | 400 unreadable body; 413; 415; 503 + `Retry-After` (nothing accepted); errors carry a `google.rpc.Status` |
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
//! - [`prometheus`]: Prometheus remote write.
//! - [`otlp`]: OpenTelemetry metrics over HTTP.
//! - [`dead_letters`]: `POST /api/v1/dead-letters/replay`, what the store refused written back.
//! - `body`: reading bodies, gzip.
//! - `state`: what every write endpoint shares: `IngestState`, `HttpLimits`, and the push that
//!   accepts or refuses a request's readings.
//! - [`schemas`]: the ingest bodies' shapes, for the OpenAPI document.

mod body;
pub mod dead_letters;
pub mod influx;
pub mod otlp;
pub mod prometheus;
pub mod readings;
pub mod schemas;
mod state;

use axum::error_handling::HandleErrorLayer;
use axum::http::Uri;
use axum::routing::{get, post};
use axum::{BoxError, Router};
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;

pub use body::gunzip_limited;
pub use state::{HttpLimits, IngestState, NDJSON_PUSH_READINGS};

use crate::http::ApiError;

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
        .route("/api/v1/write", post(prometheus::remote_write))
        .route("/v1/metrics", post(otlp::export_metrics))
        .route("/api/v1/dead-letters/replay", post(dead_letters::replay))
        .route_layer(guard)
        .route("/ping", get(influx::ping))
        .with_state(state)
}
