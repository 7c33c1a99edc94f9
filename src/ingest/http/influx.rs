//! InfluxDB's endpoints: line protocol on `POST /write` (v1) and `POST /api/v2/write` (v2),
//! and `/ping`.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;

use super::body::{IDENTITY_OR_GZIP, read_body};
use super::state::{IngestState, now_ms, push};
use crate::http::error::{InfluxV2ErrorBody, list_errors};
use crate::http::{ApiError, ErrorBody, InfluxApi, InfluxError};
use crate::ingest::line_protocol::{self, LineError, Precision};
use crate::ingest::metrics::{Protocol, count_rejected};

// ---------------------------------------------------------------------------------------------
// InfluxDB line protocol: POST /write (v1), POST /api/v2/write (v2)
// ---------------------------------------------------------------------------------------------

/// v1 parameters. `rp` is accepted and ignored: a database has one retention policy.
/// `u`/`p` (v1 credentials) are read by [`crate::http::auth`].
#[derive(Debug, Default, Deserialize)]
pub(crate) struct V1Params {
    db: Option<String>,
    #[allow(dead_code)]
    rp: Option<String>,
    precision: Option<String>,
}

/// v2 parameters. `bucket` is the database; `org` is accepted and ignored.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct V2Params {
    #[allow(dead_code)]
    org: Option<String>,
    bucket: Option<String>,
    precision: Option<String>,
}

#[utoipa::path(
    post,
    path = "/write",
    tag = "ingest",
    params(
        ("db" = Option<String>, Query, description = "The database; `bucketd` when absent. One that does not exist gets 404, as in InfluxDB 1.x."),
        ("precision" = Option<String>, Query, pattern = "^(n|ns|u|us|ms|s|m|h)?$", example = "s", description = "Timestamp precision: n, ns, u, us, ms, s, m, h (default ns)."),
    ),
    request_body(description = "InfluxDB line protocol, one point per line; may be gzip-encoded.", content_type = "text/plain", content = String),
    responses(
        (status = 204, description = "Every line accepted."),
        (status = 400, description = "Some or all lines rejected, with 1-based line numbers.", body = ErrorBody),
        (status = 404, description = "The database does not exist: `database not found: \"name\"`.", body = ErrorBody),
        (status = 408, description = "The request, body included, took longer than `--request-timeout`.", body = ErrorBody),
        (status = 413, description = "Body too large.", body = ErrorBody),
        (status = 415, description = "A `Content-Encoding` other than gzip.", body = ErrorBody),
        (status = 503, description = "Buffers or write-ahead log full, or too many writes in progress; retry after the `Retry-After` delay.", body = ErrorBody),
        (status = 507, description = "The write-ahead log's disk is full: not acknowledged; writes are taken again, without a restart, once there is room (`Retry-After`).", body = ErrorBody),
        (status = 500, description = "The write-ahead log cannot be written; nothing was acknowledged.", body = ErrorBody),
    )
)]
pub(crate) async fn write_v1(
    State(state): State<IngestState>,
    params: Result<Query<V1Params>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, InfluxError> {
    let Query(params) = params.map_err(|e| InfluxError::v1(ApiError::BadRequest(e.body_text())))?;
    let precision = precision_param(InfluxApi::V1, params.precision.as_deref())?;
    write_line_protocol(&state, params.db.as_deref(), precision, &headers, body)
        .await
        .map_err(InfluxError::v1)
}

#[utoipa::path(
    post,
    path = "/api/v2/write",
    tag = "ingest",
    params(
        ("org" = Option<String>, Query, description = "Accepted for InfluxDB 2.x compatibility; ignored."),
        ("bucket" = Option<String>, Query, description = "The database; `bucketd` when absent. One that does not exist gets 404."),
        ("precision" = Option<String>, Query, pattern = "^(ns|us|ms|s)?$", example = "s", description = "Timestamp precision: ns, us, ms, s (default ns)."),
    ),
    request_body(description = "InfluxDB line protocol, one point per line; may be gzip-encoded.", content_type = "text/plain", content = String),
    responses(
        (status = 204, description = "Every line accepted."),
        (status = 400, description = "Some or all lines rejected, with 1-based line numbers.", body = InfluxV2ErrorBody),
        (status = 404, description = "The bucket (database) does not exist.", body = InfluxV2ErrorBody),
        (status = 408, description = "The request, body included, took longer than `--request-timeout`.", body = InfluxV2ErrorBody),
        (status = 413, description = "Body too large.", body = InfluxV2ErrorBody),
        (status = 415, description = "A `Content-Encoding` other than gzip.", body = InfluxV2ErrorBody),
        (status = 503, description = "Buffers or write-ahead log full, or too many writes in progress; retry after the `Retry-After` delay.", body = InfluxV2ErrorBody),
        (status = 507, description = "The write-ahead log's disk is full: not acknowledged; writes are taken again, without a restart, once there is room (`Retry-After`).", body = InfluxV2ErrorBody),
        (status = 500, description = "The write-ahead log cannot be written; nothing was acknowledged.", body = InfluxV2ErrorBody),
    )
)]
pub(crate) async fn write_v2(
    State(state): State<IngestState>,
    params: Result<Query<V2Params>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, InfluxError> {
    let Query(params) = params.map_err(|e| InfluxError::v2(ApiError::BadRequest(e.body_text())))?;
    let precision = precision_param(InfluxApi::V2, params.precision.as_deref())?;
    write_line_protocol(&state, params.bucket.as_deref(), precision, &headers, body)
        .await
        .map_err(InfluxError::v2)
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
    state: &IngestState,
    database: Option<&str>,
    precision: Precision,
    headers: &HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    // Before the body is read: a write to a database that does not exist costs nothing more.
    let limits = state.limits_in(database)?;
    let limit = state.http.max_body_bytes;
    let read =
        read_body(body, headers, IDENTITY_OR_GZIP, limit, &state.memory, Protocol::LpHttp).await?;
    // Held until the readings are pushed: the body and then its readings are its share.
    let (bytes, _held) = (read.bytes, read.held);
    // At most this many readings: one per line.
    let lines = memchr::memchr_iter(b'\n', &bytes).count() + 1;
    if state.intake.refuses_push_of(lines) {
        // Overloaded: refused before the parse, which is most of what a write costs.
        let lines = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count();
        count_rejected(Protocol::LpHttp, "buffers_full", lines);
        return Err(ApiError::BuffersFull { accepted: 0 });
    }
    let (good, bad) = line_protocol::parse_body_split(&bytes, precision, now_ms(), &limits);
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
    let head =
        format!("partial write: {} line(s) rejected, {accepted} reading(s) accepted", bad.len());
    list_errors(head, bad, "", LineError::to_string)
}

// ---------------------------------------------------------------------------------------------
// GET|HEAD /ping
// ---------------------------------------------------------------------------------------------

#[utoipa::path(
    get,
    path = "/ping",
    tag = "operations",
    responses((status = 204, description = "Alive (InfluxDB clients probe this before writing); also answers HEAD. Headers `X-Influxdb-Version` and `X-Influxdb-Build`."))
)]
pub(crate) async fn ping() -> impl IntoResponse {
    (StatusCode::NO_CONTENT, crate::http::influxdb_headers())
}

#[cfg(test)]
mod tests {
    use super::*;

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
