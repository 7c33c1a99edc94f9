//! HTTP write endpoints: bucketd's JSON/NDJSON API and InfluxDB's `/write`, `/api/v2/write`,
//! `/ping` and `/query` (the last only as far as Telegraf needs at start-up).
//!
//! | request | success | failures |
//! |---|---|---|
//! | `POST /api/v1/readings` (JSON: one reading or an array) | 202 `{"accepted": n}` | 400 `{"error", "accepted", "rejected": [{"index", "error"}] (first 100), "rejected_count"}` with the valid items accepted; 400 malformed/empty; 413 over `--max-body-bytes` (also decompressed) or more readings than `--max-buffered-readings`; 415 content type/encoding; 503 + `Retry-After: 1` buffers full (nothing accepted) |
//! | `POST /api/v1/readings` (`application/x-ndjson`, streamed) | 202 `{"accepted": n}` | as JSON, but pushed every 10,000 lines: a 503 body's `accepted` counts pieces already taken, which stay accepted; only each line is bound by `--max-body-bytes` |
//! | `POST /write` (v1), `POST /api/v2/write` (v2), gzip accepted | 204 | 400 partial write (good lines kept; v1 `{"error"}`, v2 `{"code": "invalid", "message"}` naming the first 100 bad lines, 1-based); 400 bad precision; 413; 503 + `Retry-After` (nothing accepted) |
//! | `GET`, `HEAD` `/ping` | 204, `X-Influxdb-Version`, `X-Influxdb-Build: OSS` | |
//! | `GET`, `POST` `/query` | 200 `{"results": [{"statement_id": 0}]}` for `CREATE DATABASE` | 400 for anything else |
//!
//! Write routes share one concurrency limit (`--max-concurrent-writes`, over it: 503 +
//! `Retry-After`) and a timeout (`--request-timeout`, 408); those two answer in bucketd's
//! `{"error"}` shape on every route.
//!
//! Bodies read whole (JSON documents, line protocol) are bound by `max_body_bytes` before and
//! after gzip decompression. NDJSON is streamed: chunks go through the decoder as they arrive
//! and accepted readings are pushed every [`NDJSON_PUSH_READINGS`], so a body of any size
//! needs memory for one chunk, one line and one push batch.

use std::collections::HashMap;
use std::io::{Read, Write};

use axum::body::Body;
use axum::error_handling::HandleErrorLayer;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{BoxError, Json, Router};
use bytes::Bytes;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;

use crate::http::error::{InfluxV2ErrorBody, MAX_LISTED_ERRORS, RejectedItem, RejectedItems};
use crate::http::{ApiError, AppState, HttpLimits, InfluxApi, InfluxError};
use crate::ingest::intake::{Intake, IntakeError};
use crate::ingest::json::{self, ItemError, NdjsonDecoder};
use crate::ingest::line_protocol::{self, LineError, Precision};
use crate::metrics::{READINGS_ACCEPTED, READINGS_REJECTED, RECEIVED_BYTES};
use crate::model::{Item, TimestampMs};
use crate::query::ErrorBody;
use crate::query::openapi::{AcceptedBody, IngestBody};

/// Readings a streamed NDJSON request accumulates before pushing them into the buffers: large
/// enough to amortise the push, small enough to bound one request's extra memory.
pub const NDJSON_PUSH_READINGS: usize = 10_000;

/// Compressed bytes handed to the streaming gzip decoder at a time. Deflate expands at most
/// ~1032:1, so one slice yields at most about 1 MiB however hostile the input.
const GZIP_STREAM_SLICE: usize = 1024;

/// What `/ping` reports as the InfluxDB version: clients (Telegraf, influx CLI) read it to pick
/// the v1 API; the suffix says who is really answering.
pub const INFLUXDB_VERSION: &str = "1.8.10-bucketd";

/// Protocol labels of the ingest metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Json,
    Ndjson,
    LpHttp,
    LpTcp,
}

impl Protocol {
    pub fn label(self) -> &'static str {
        match self {
            Protocol::Json => "json",
            Protocol::Ndjson => "ndjson",
            Protocol::LpHttp => "lp_http",
            Protocol::LpTcp => "lp_tcp",
        }
    }
}

pub(crate) fn count_received(protocol: Protocol, bytes: usize) {
    metrics::counter!(RECEIVED_BYTES, "protocol" => protocol.label()).increment(bytes as u64);
}

pub(crate) fn count_accepted(protocol: Protocol, n: usize) {
    if n > 0 {
        metrics::counter!(READINGS_ACCEPTED, "protocol" => protocol.label()).increment(n as u64);
    }
}

pub(crate) fn count_rejected(protocol: Protocol, reason: &'static str, n: usize) {
    if n > 0 {
        metrics::counter!(READINGS_REJECTED, "protocol" => protocol.label(), "reason" => reason)
            .increment(n as u64);
    }
}

/// The write routes, with their own concurrency limit and timeout; `/ping` and `/query` are
/// cheap and stay outside both.
pub fn router(limits: &HttpLimits) -> Router<AppState> {
    let timeout = limits.request_timeout;
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
        .layer(GlobalConcurrencyLimitLayer::new(limits.max_concurrent_writes))
        .timeout(timeout);

    Router::new()
        .route("/api/v1/readings", post(write_readings))
        .route("/write", post(write_v1))
        .route("/api/v2/write", post(write_v2))
        .route_layer(guard)
        .route("/ping", get(ping))
        .route("/query", get(influx_query).post(influx_query))
}

fn now_ms() -> TimestampMs {
    chrono::Utc::now().timestamp_millis()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Encoding {
    Identity,
    Gzip,
}

fn content_encoding(headers: &HeaderMap) -> Result<Encoding, ApiError> {
    let Some(value) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(Encoding::Identity);
    };
    match value.to_str().map(|v| v.trim().to_ascii_lowercase()) {
        Ok(v) if v.is_empty() || v == "identity" => Ok(Encoding::Identity),
        Ok(v) if v == "gzip" || v == "x-gzip" => Ok(Encoding::Gzip),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "unsupported Content-Encoding {value:?}; use gzip or none"
        ))),
    }
}

/// Reads a body whole, refusing to hold more than `limit` bytes before or after decompression.
async fn read_body(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
    protocol: Protocol,
) -> Result<Vec<u8>, ApiError> {
    let encoding = content_encoding(headers)?;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    // Trust the declared length only up to the limit, so a lie costs at most the limit.
    let mut raw = Vec::with_capacity(declared.unwrap_or(0).min(limit as u64) as usize);
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::BadRequest(format!("reading the body: {e}")))?;
        count_received(protocol, chunk.len());
        if raw.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        raw.extend_from_slice(&chunk);
    }
    match encoding {
        Encoding::Identity => Ok(raw),
        Encoding::Gzip => gunzip_limited(&raw, limit),
    }
}

/// Decompresses gzip (concatenated members too, as Go's reader does) into at most `limit`
/// bytes. The output buffer grows by doubling but is capped at `limit`, so a gzip bomb costs
/// no more than the limit before it is refused with 413.
pub fn gunzip_limited(data: &[u8], limit: usize) -> Result<Vec<u8>, ApiError> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let mut decoder = flate2::read::MultiGzDecoder::new(data);
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ApiError::BadRequest(format!("invalid gzip body: {e}"))),
        };
        if out.len() + n > limit {
            return Err(ApiError::PayloadTooLarge { limit });
        }
        if out.capacity() - out.len() < n {
            let target = (out.capacity() * 2).max(64 * 1024).min(limit).max(out.len() + n);
            out.reserve_exact(target - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// Splits per-item results into the valid readings and the errors, keeping order.
fn partition<E>(results: Vec<Result<Item, E>>) -> (Vec<Item>, Vec<E>) {
    let mut good = Vec::with_capacity(results.len());
    let mut bad = Vec::new();
    for r in results {
        match r {
            Ok(item) => good.push(item),
            Err(e) => bad.push(e),
        }
    }
    (good, bad)
}

/// Accepts all-or-nothing (returning once the readings are as durable as `--ack` promises)
/// and counts the outcome. More readings than the buffers' whole bound could never be taken,
/// so that is 413 rather than a 503 the client would retry forever.
async fn push(
    intake: &Intake,
    items: Vec<Item>,
    protocol: Protocol,
    limits: &HttpLimits,
) -> Result<usize, ApiError> {
    if items.is_empty() {
        return Ok(0);
    }
    let n = items.len();
    if n > limits.max_buffered_readings {
        count_rejected(protocol, "too_many_readings", n);
        return Err(ApiError::TooManyReadings { count: n, limit: limits.max_buffered_readings });
    }
    match intake.accept(items).await {
        Ok(accepted) => {
            count_accepted(protocol, accepted);
            Ok(accepted)
        }
        Err(IntakeError::BuffersFull(_)) => {
            count_rejected(protocol, "buffers_full", n);
            Err(ApiError::BuffersFull { accepted: 0 })
        }
        Err(IntakeError::Wal(crate::wal::WalError::Full { .. })) => {
            count_rejected(protocol, "wal_full", n);
            Err(ApiError::WalFull { accepted: 0 })
        }
        Err(IntakeError::Wal(crate::wal::WalError::NoSpace(_))) => {
            count_rejected(protocol, "disk_full", n);
            Err(ApiError::DiskFull { accepted: 0 })
        }
        Err(IntakeError::Wal(e)) => {
            count_rejected(protocol, "wal_failed", n);
            Err(ApiError::WalFailed(e.to_string()))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// POST /api/v1/readings
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JsonBody {
    /// One reading or an array of them, read whole.
    Document,
    /// One reading per line, streamed.
    Ndjson,
}

fn json_body_kind(headers: &HeaderMap) -> Result<JsonBody, ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(JsonBody::Document);
    };
    let mime = value.to_str().unwrap_or("").split(';').next().unwrap_or("").trim();
    let mime = mime.to_ascii_lowercase();
    match mime.as_str() {
        "application/json" => Ok(JsonBody::Document),
        "application/x-ndjson"
        | "application/ndjson"
        | "application/jsonl"
        | "application/x-jsonlines" => Ok(JsonBody::Ndjson),
        _ if mime.ends_with("+json") => Ok(JsonBody::Document),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "unsupported Content-Type {mime:?}; use application/json or application/x-ndjson"
        ))),
    }
}

/// Tally of one JSON request: what was accepted, and the first rejected items.
struct JsonTally {
    protocol: Protocol,
    pending: Vec<Item>,
    accepted: usize,
    rejected: Vec<RejectedItem>,
    rejected_count: usize,
}

impl JsonTally {
    fn new(protocol: Protocol) -> Self {
        JsonTally {
            protocol,
            pending: Vec::new(),
            accepted: 0,
            rejected: Vec::new(),
            rejected_count: 0,
        }
    }

    fn add(&mut self, parsed: json::Parsed) {
        for item in parsed {
            match item {
                Ok(reading) => self.pending.push(reading),
                Err(e) => self.reject(&e),
            }
        }
    }

    fn reject(&mut self, e: &ItemError) {
        count_rejected(self.protocol, e.reason, 1);
        self.rejected_count += 1;
        if self.rejected.len() < MAX_LISTED_ERRORS {
            self.rejected.push(e.into());
        }
    }

    /// Pushes what is pending, in pieces of at most `piece` readings. Each piece is
    /// all-or-nothing; pieces pushed before a failure stay accepted.
    async fn push_pending(&mut self, state: &AppState, piece: usize) -> Result<(), ApiError> {
        let mut items = std::mem::take(&mut self.pending);
        while !items.is_empty() {
            let rest = items.split_off(items.len().min(piece.max(1)));
            match push(&state.intake, items, self.protocol, &state.http).await {
                Ok(n) => self.accepted += n,
                Err(ApiError::BuffersFull { .. }) => {
                    count_rejected(self.protocol, "buffers_full", rest.len());
                    return Err(ApiError::BuffersFull { accepted: self.accepted });
                }
                Err(ApiError::WalFull { .. }) => {
                    count_rejected(self.protocol, "wal_full", rest.len());
                    return Err(ApiError::WalFull { accepted: self.accepted });
                }
                Err(ApiError::DiskFull { .. }) => {
                    count_rejected(self.protocol, "disk_full", rest.len());
                    return Err(ApiError::DiskFull { accepted: self.accepted });
                }
                Err(e) => return Err(e),
            }
            items = rest;
        }
        Ok(())
    }

    fn into_response(self) -> Result<Response, ApiError> {
        if self.rejected_count > 0 {
            return Err(ApiError::InvalidItems(Box::new(RejectedItems {
                accepted: self.accepted,
                rejected: self.rejected,
                rejected_count: self.rejected_count,
            })));
        }
        Ok((StatusCode::ACCEPTED, Json(json!({ "accepted": self.accepted }))).into_response())
    }
}

/// `POST /api/v1/readings`: 202 `{"accepted": n}`; 400 listing rejected items (the valid ones
/// are accepted); 503 when the buffers are full.
#[utoipa::path(
    post,
    path = "/api/v1/readings",
    tag = "ingest",
    request_body(
        description = "One reading, an array of readings (`application/json`), or one reading per line (`application/x-ndjson`). Bodies may be gzip-encoded.",
        content(
            (IngestBody = "application/json"),
            (String = "application/x-ndjson"),
        )
    ),
    responses(
        (status = 202, description = "Every reading accepted: in the fsync'd write-ahead log (or, with `--ack=buffered`, in memory). `{\"accepted\": N}`.", body = AcceptedBody),
        (status = 400, description = "Some or all readings rejected; the body lists each rejected item by index.", body = ErrorBody),
        (status = 408, description = "The request, body included, took longer than `--request-timeout`.", body = ErrorBody),
        (status = 413, description = "Body too large, or more readings than the buffers can ever hold.", body = ErrorBody),
        (status = 415, description = "Content type other than JSON or NDJSON, or an encoding other than gzip.", body = ErrorBody),
        (status = 503, description = "Buffers or write-ahead log full, or too many writes in progress; retry after the `Retry-After` delay.", body = ErrorBody),
        (status = 507, description = "The write-ahead log's disk is full: not acknowledged; writes are taken again, without a restart, once there is room (`Retry-After`).", body = ErrorBody),
        (status = 500, description = "The write-ahead log cannot be written; nothing was acknowledged.", body = ErrorBody),
    )
)]
pub(crate) async fn write_readings(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    match json_body_kind(&headers)? {
        JsonBody::Document => {
            let bytes =
                read_body(body, &headers, state.http.max_body_bytes, Protocol::Json).await?;
            if bytes.iter().all(u8::is_ascii_whitespace) {
                return Err(ApiError::BadRequest(
                    "empty body: send one JSON reading, an array of them, or NDJSON".into(),
                ));
            }
            let mut tally = JsonTally::new(Protocol::Json);
            tally.add(json::parse_document(&bytes, now_ms(), &state.limits));
            drop(bytes);
            tally.push_pending(&state, usize::MAX).await?;
            tally.into_response()
        }
        JsonBody::Ndjson => {
            let encoding = content_encoding(&headers)?;
            stream_ndjson(&state, body, encoding).await
        }
    }
}

/// Decompresses a gzip stream piecewise, handing each bounded piece of output on.
struct GzipStream {
    decoder: flate2::write::MultiGzDecoder<Vec<u8>>,
}

impl GzipStream {
    fn new() -> Self {
        GzipStream { decoder: flate2::write::MultiGzDecoder::new(Vec::new()) }
    }

    fn feed(
        &mut self,
        compressed: &[u8],
        mut sink: impl FnMut(&[u8]) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        for slice in compressed.chunks(GZIP_STREAM_SLICE) {
            self.decoder.write_all(slice).map_err(gzip_error)?;
            let out = std::mem::take(self.decoder.get_mut());
            sink(&out)?;
        }
        Ok(())
    }

    fn finish(
        mut self,
        mut sink: impl FnMut(&[u8]) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        self.decoder.try_finish().map_err(gzip_error)?;
        let out = std::mem::take(self.decoder.get_mut());
        sink(&out)
    }
}

fn gzip_error(e: std::io::Error) -> ApiError {
    ApiError::BadRequest(format!("invalid gzip body: {e}"))
}

async fn stream_ndjson(
    state: &AppState,
    body: Body,
    encoding: Encoding,
) -> Result<Response, ApiError> {
    let now = now_ms();
    let limits = &*state.limits;
    let mut decoder = NdjsonDecoder::new(state.http.max_body_bytes);
    let mut gzip = (encoding == Encoding::Gzip).then(GzipStream::new);
    let mut tally = JsonTally::new(Protocol::Ndjson);
    let mut stream = body.into_data_stream();
    let push_every = NDJSON_PUSH_READINGS.min(state.http.max_buffered_readings);

    // Readings already pushed stay accepted whatever happens later in the stream, so every
    // failure from here on reports how many there were.
    let mid_stream = |accepted: usize, e: ApiError| match e {
        ApiError::BadRequest(msg) => ApiError::BadRequest(format!(
            "{msg} ({accepted} readings from earlier lines were accepted)"
        )),
        other => other,
    };

    while let Some(chunk) = stream.next().await {
        let chunk: Bytes = chunk.map_err(|e| {
            mid_stream(tally.accepted, ApiError::BadRequest(format!("reading the body: {e}")))
        })?;
        count_received(Protocol::Ndjson, chunk.len());
        match gzip.as_mut() {
            None => tally.add(decoder.feed(&chunk, now, limits)),
            Some(gz) => gz
                .feed(&chunk, |plain| {
                    tally.add(decoder.feed(plain, now, limits));
                    Ok(())
                })
                .map_err(|e| mid_stream(tally.accepted, e))?,
        }
        if tally.pending.len() >= push_every {
            tally.push_pending(state, push_every).await?;
        }
    }
    if let Some(gz) = gzip {
        gz.finish(|plain| {
            tally.add(decoder.feed(plain, now, limits));
            Ok(())
        })
        .map_err(|e| mid_stream(tally.accepted, e))?;
    }
    tally.add(decoder.finish(now, limits));
    tally.push_pending(state, push_every).await?;
    tally.into_response()
}

// ---------------------------------------------------------------------------------------------
// InfluxDB line protocol: POST /write (v1), POST /api/v2/write (v2)
// ---------------------------------------------------------------------------------------------

/// v1 parameters. `db` and `rp` are accepted and ignored: bucketd has one namespace, and
/// Telegraf always sends them. `u`/`p` (v1 credentials) are read by [`crate::http::auth`].
#[derive(Debug, Default, Deserialize)]
pub(crate) struct V1Params {
    #[allow(dead_code)]
    db: Option<String>,
    #[allow(dead_code)]
    rp: Option<String>,
    precision: Option<String>,
}

/// v2 parameters. `org`/`bucket` are accepted and ignored, as `db`/`rp` are for v1.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct V2Params {
    #[allow(dead_code)]
    org: Option<String>,
    #[allow(dead_code)]
    bucket: Option<String>,
    precision: Option<String>,
}

#[utoipa::path(
    post,
    path = "/write",
    tag = "ingest",
    params(
        ("db" = Option<String>, Query, description = "Accepted for InfluxDB 1.x compatibility; ignored."),
        ("precision" = Option<String>, Query, pattern = "^(n|ns|u|us|ms|s|m|h)?$", example = "s", description = "Timestamp precision: n, ns, u, us, ms, s, m, h (default ns)."),
    ),
    request_body(description = "InfluxDB line protocol, one point per line; may be gzip-encoded.", content_type = "text/plain", content = String),
    responses(
        (status = 204, description = "Every line accepted."),
        (status = 400, description = "Some or all lines rejected, with 1-based line numbers.", body = ErrorBody),
        (status = 408, description = "The request, body included, took longer than `--request-timeout`.", body = ErrorBody),
        (status = 413, description = "Body too large.", body = ErrorBody),
        (status = 415, description = "A `Content-Encoding` other than gzip.", body = ErrorBody),
        (status = 503, description = "Buffers or write-ahead log full, or too many writes in progress; retry after the `Retry-After` delay.", body = ErrorBody),
        (status = 507, description = "The write-ahead log's disk is full: not acknowledged; writes are taken again, without a restart, once there is room (`Retry-After`).", body = ErrorBody),
        (status = 500, description = "The write-ahead log cannot be written; nothing was acknowledged.", body = ErrorBody),
    )
)]
pub(crate) async fn write_v1(
    State(state): State<AppState>,
    params: Result<Query<V1Params>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, InfluxError> {
    let Query(params) = params.map_err(|e| InfluxError::v1(ApiError::BadRequest(e.body_text())))?;
    let precision = precision_param(InfluxApi::V1, params.precision.as_deref())?;
    write_line_protocol(&state, precision, &headers, body).await.map_err(InfluxError::v1)
}

#[utoipa::path(
    post,
    path = "/api/v2/write",
    tag = "ingest",
    params(
        ("org" = Option<String>, Query, description = "Accepted for InfluxDB 2.x compatibility; ignored."),
        ("bucket" = Option<String>, Query, description = "Accepted for InfluxDB 2.x compatibility; ignored."),
        ("precision" = Option<String>, Query, pattern = "^(ns|us|ms|s)?$", example = "s", description = "Timestamp precision: ns, us, ms, s (default ns)."),
    ),
    request_body(description = "InfluxDB line protocol, one point per line; may be gzip-encoded.", content_type = "text/plain", content = String),
    responses(
        (status = 204, description = "Every line accepted."),
        (status = 400, description = "Some or all lines rejected, with 1-based line numbers.", body = InfluxV2ErrorBody),
        (status = 408, description = "The request, body included, took longer than `--request-timeout`.", body = InfluxV2ErrorBody),
        (status = 413, description = "Body too large.", body = InfluxV2ErrorBody),
        (status = 415, description = "A `Content-Encoding` other than gzip.", body = InfluxV2ErrorBody),
        (status = 503, description = "Buffers or write-ahead log full, or too many writes in progress; retry after the `Retry-After` delay.", body = InfluxV2ErrorBody),
        (status = 507, description = "The write-ahead log's disk is full: not acknowledged; writes are taken again, without a restart, once there is room (`Retry-After`).", body = InfluxV2ErrorBody),
        (status = 500, description = "The write-ahead log cannot be written; nothing was acknowledged.", body = InfluxV2ErrorBody),
    )
)]
pub(crate) async fn write_v2(
    State(state): State<AppState>,
    params: Result<Query<V2Params>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, InfluxError> {
    let Query(params) = params.map_err(|e| InfluxError::v2(ApiError::BadRequest(e.body_text())))?;
    let precision = precision_param(InfluxApi::V2, params.precision.as_deref())?;
    write_line_protocol(&state, precision, &headers, body).await.map_err(InfluxError::v2)
}

/// The `precision` parameter in the spellings each InfluxDB API accepts; absent or empty is ns.
fn precision_param(api: InfluxApi, given: Option<&str>) -> Result<Precision, InfluxError> {
    let (parse, allowed): (fn(&str) -> Option<Precision>, &str) = match api {
        InfluxApi::V1 => (Precision::from_v1, "n, ns, u, us, ms, s, m, h"),
        InfluxApi::V2 => (Precision::from_v2, "ns, us, ms, s"),
    };
    match given {
        None | Some("") => Ok(Precision::Nanoseconds),
        Some(p) => parse(p).ok_or_else(|| InfluxError {
            api,
            error: ApiError::BadRequest(format!("invalid precision {p:?}; use one of {allowed}")),
        }),
    }
}

/// 204 when every line was accepted; 400 naming the rejected lines (the others are kept, as
/// InfluxDB does partial writes); 503 with nothing accepted when the buffers are full.
async fn write_line_protocol(
    state: &AppState,
    precision: Precision,
    headers: &HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let bytes = read_body(body, headers, state.http.max_body_bytes, Protocol::LpHttp).await?;
    if state.intake.refuses_every_push() {
        // Overloaded: refused before the parse, which is most of what a write costs.
        let lines = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
        count_rejected(Protocol::LpHttp, "buffers_full", lines);
        return Err(ApiError::BuffersFull { accepted: 0 });
    }
    let (good, bad) =
        partition(line_protocol::parse_body(&bytes, precision, now_ms(), &state.limits));
    drop(bytes);
    for e in &bad {
        count_rejected(Protocol::LpHttp, e.reason, 1);
    }
    let accepted = push(&state.intake, good, Protocol::LpHttp, &state.http).await?;
    if bad.is_empty() {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::BadRequest(partial_write_message(accepted, &bad)))
    }
}

fn partial_write_message(accepted: usize, bad: &[LineError]) -> String {
    let mut message =
        format!("partial write: {} line(s) rejected, {accepted} reading(s) accepted", bad.len());
    for e in bad.iter().take(MAX_LISTED_ERRORS) {
        message.push_str("; ");
        message.push_str(&e.to_string());
    }
    if bad.len() > MAX_LISTED_ERRORS {
        message.push_str(&format!("; and {} more", bad.len() - MAX_LISTED_ERRORS));
    }
    message
}

// ---------------------------------------------------------------------------------------------
// GET|HEAD /ping, GET|POST /query
// ---------------------------------------------------------------------------------------------

#[utoipa::path(
    get,
    path = "/ping",
    tag = "operations",
    responses((status = 204, description = "Alive (InfluxDB clients probe this before writing); also answers HEAD. Headers `X-Influxdb-Version` and `X-Influxdb-Build`."))
)]
pub(crate) async fn ping() -> impl IntoResponse {
    (
        StatusCode::NO_CONTENT,
        [
            ("x-influxdb-version", HeaderValue::from_static(INFLUXDB_VERSION)),
            ("x-influxdb-build", HeaderValue::from_static("OSS")),
        ],
    )
}

/// The form body Telegraf sends to `/query`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub(crate) struct QueryParams {
    q: Option<String>,
}

/// InfluxQL is not bucketd's query language; only `CREATE DATABASE` is answered (as a no-op
/// success) because Telegraf's InfluxDB output sends it at start-up and stops if it fails.
/// `q` may come in the URL or, as Telegraf sends it, in a form body.
#[utoipa::path(
    method(get, post),
    path = "/query",
    tag = "ingest",
    params(("q" = String, Query, example = "CREATE DATABASE telegraf", description = "InfluxQL; only `CREATE DATABASE ...` is answered. With POST it may also come as a form body.")),
    responses(
        (status = 200, description = "`CREATE DATABASE` acknowledged as InfluxDB does: `{\"results\":[{\"statement_id\":0}]}`."),
        (status = 400, description = "Any other statement: bucketd's query API is under /api/v1.", body = ErrorBody),
    )
)]
pub(crate) async fn influx_query(
    url: Result<Query<HashMap<String, String>>, QueryRejection>,
    form: Result<Form<QueryParams>, FormRejection>,
) -> Result<Response, InfluxError> {
    let q = url
        .ok()
        .and_then(|Query(mut params)| params.remove("q"))
        .or_else(|| form.ok().and_then(|Form(params)| params.q))
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| {
            InfluxError::v1(ApiError::BadRequest("missing required parameter \"q\"".into()))
        })?;
    let statements: Vec<&str> = q.split(';').map(str::trim).filter(|s| !s.is_empty()).collect();
    if !statements.iter().all(|s| is_create_database(s)) {
        return Err(InfluxError::v1(ApiError::BadRequest(
            "bucketd does not run InfluxQL: only CREATE DATABASE is accepted here (as a no-op); \
             read data with GET /api/v1/readings"
                .into(),
        )));
    }
    let results: Vec<_> = (0..statements.len()).map(|i| json!({ "statement_id": i })).collect();
    Ok(Json(json!({ "results": results })).into_response())
}

fn is_create_database(statement: &str) -> bool {
    let mut words = statement.split_whitespace();
    matches!(
        (words.next(), words.next(), words.next()),
        (Some(a), Some(b), Some(_)) if a.eq_ignore_ascii_case("create") && b.eq_ignore_ascii_case("database")
    )
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn gunzip_within_the_limit() {
        let plain = b"m,host=a v=1 1\nm,host=b v=2 2\n".repeat(100);
        assert_eq!(gunzip_limited(&gzip(&plain), plain.len()).unwrap(), plain);
        assert!(matches!(
            gunzip_limited(&gzip(&plain), plain.len() - 1),
            Err(ApiError::PayloadTooLarge { .. })
        ));
        assert!(matches!(gunzip_limited(b"not gzip at all", 1000), Err(ApiError::BadRequest(_))));
        assert_eq!(gunzip_limited(b"", 10).unwrap(), b"");
    }

    #[test]
    fn gunzip_reads_concatenated_members() {
        let mut both = gzip(b"a v=1\n");
        both.extend(gzip(b"b v=2\n"));
        assert_eq!(gunzip_limited(&both, 100).unwrap(), b"a v=1\nb v=2\n");
    }

    #[test]
    fn gunzip_never_holds_more_than_the_limit() {
        // 64 MiB of zeros compress to ~64 KiB; with a 1 MiB limit the output must stop there.
        let bomb = gzip(&vec![0u8; 64 << 20]);
        assert!(bomb.len() < 1 << 20);
        let limit = 1 << 20;
        // Capacity is what was allocated; check it through a success just under the limit.
        let ok = gunzip_limited(&gzip(&vec![7u8; limit]), limit).unwrap();
        assert!(ok.capacity() <= limit, "capacity {} > limit {limit}", ok.capacity());
        assert!(matches!(gunzip_limited(&bomb, limit), Err(ApiError::PayloadTooLarge { .. })));
    }

    #[test]
    fn streaming_gzip_yields_bounded_pieces() {
        let plain = b"{\"sensor\":\"s\",\"v\":1}\n".repeat(10_000);
        let compressed = gzip(&plain);
        let mut gz = GzipStream::new();
        let mut out = Vec::new();
        let mut largest = 0;
        for piece in compressed.chunks(7_000) {
            gz.feed(piece, |p| {
                largest = largest.max(p.len());
                out.extend_from_slice(p);
                Ok(())
            })
            .unwrap();
        }
        gz.finish(|p| {
            out.extend_from_slice(p);
            Ok(())
        })
        .unwrap();
        assert_eq!(out, plain);
        assert!(largest <= GZIP_STREAM_SLICE * 1100, "piece of {largest} bytes");
    }

    #[test]
    fn content_types_and_encodings() {
        let mut h = HeaderMap::new();
        assert_eq!(json_body_kind(&h).unwrap(), JsonBody::Document);
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json; charset=utf-8"));
        assert_eq!(json_body_kind(&h).unwrap(), JsonBody::Document);
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
        assert_eq!(json_body_kind(&h).unwrap(), JsonBody::Ndjson);
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv"));
        assert!(matches!(json_body_kind(&h), Err(ApiError::UnsupportedMediaType(_))));

        assert_eq!(content_encoding(&h).unwrap(), Encoding::Identity);
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("GZIP"));
        assert_eq!(content_encoding(&h).unwrap(), Encoding::Gzip);
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
        assert!(matches!(content_encoding(&h), Err(ApiError::UnsupportedMediaType(_))));
    }

    #[test]
    fn create_database_is_recognised() {
        assert!(is_create_database("CREATE DATABASE \"telegraf\""));
        assert!(is_create_database("create   database x"));
        assert!(!is_create_database("CREATE DATABASE"));
        assert!(!is_create_database("SELECT * FROM cpu"));
        assert!(!is_create_database("DROP DATABASE x"));
    }

    #[test]
    fn partial_write_lists_at_most_the_limit() {
        let bad: Vec<LineError> = (1..=150)
            .map(|line| LineError {
                line,
                message: "expected field".into(),
                input: "junk".into(),
                reason: "syntax",
            })
            .collect();
        let m = partial_write_message(3, &bad);
        assert!(
            m.starts_with("partial write: 150 line(s) rejected, 3 reading(s) accepted; line 1:")
        );
        assert!(m.contains("line 100:"));
        assert!(!m.contains("line 101:"));
        assert!(m.ends_with("and 50 more"));
    }
}
