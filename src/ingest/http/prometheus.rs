//! Prometheus remote write: `POST /api/v1/write`, where Prometheus and VictoriaMetrics take
//! it. What a series becomes is [`crate::ingest::prometheus`]'s.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};

use super::body::{Encoding, read_body};
use super::readings::DbParam;
use super::schemas::Protobuf;
use super::state::{IngestState, push};
use crate::http::ApiError;
use crate::http::error::list_errors;
use crate::ingest::metrics::{Protocol, count_rejected};
use crate::ingest::prometheus::{self, Rejected};

const PROTOCOL: Protocol = Protocol::PromRemoteWrite;

#[utoipa::path(
    post,
    path = "/api/v1/write",
    tag = "ingest",
    params(
        ("db" = Option<String>, Query, description = "The database; `bucketd` when absent. One that does not exist gets 404."),
    ),
    request_body(description = "Prometheus remote write 1.0: a `prometheus.WriteRequest` in protobuf, snappy-compressed (block format), with `Content-Encoding: snappy`.", content_type = "application/x-protobuf", content = Protobuf),
    responses(
        (status = 204, description = "Every sample accepted (stale markers, NaN and ±Inf samples are skipped)."),
        (status = 400, description = "Not a snappy-compressed WriteRequest, or some series refused (the others are kept).", body = crate::http::ErrorBody),
        (status = 404, description = "The database does not exist.", body = crate::http::ErrorBody),
        (status = 408, description = "The request, body included, took longer than `--request-timeout`.", body = crate::http::ErrorBody),
        (status = 413, description = "Body too large, compressed or not, or more samples than the buffers hold.", body = crate::http::ErrorBody),
        (status = 415, description = "Not snappy, or remote write 2.0.", body = crate::http::ErrorBody),
        (status = 503, description = "Buffers, write-ahead log or memory budget full; retry after the `Retry-After` delay.", body = crate::http::ErrorBody),
        (status = 507, description = "The write-ahead log's disk is full: not acknowledged.", body = crate::http::ErrorBody),
        (status = 500, description = "The write-ahead log cannot be written; nothing was acknowledged.", body = crate::http::ErrorBody),
    )
)]
pub(crate) async fn remote_write(
    State(state): State<IngestState>,
    params: Result<Query<DbParam>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let Query(params) = params.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let limits = state.limits_in(params.db.as_deref())?;
    refuse_version_2(&headers)?;
    let limit = state.http.max_body_bytes;
    let read =
        read_body(body, &headers, &[Encoding::Snappy], limit, &state.memory, PROTOCOL).await?;
    let (compressed, mut held) = (read.bytes, read.held);
    let size = prometheus::decompressed_len(&compressed, limit)?;
    // Held until the samples are pushed, as a line-protocol body is.
    state.memory.try_charge(&mut held, size)?;
    let request = prometheus::decode(&compressed, limit)?;
    drop(compressed);
    let samples: usize = request.timeseries.iter().map(|ts| ts.samples.len()).sum();
    if state.intake.refuses_push_of(samples) {
        count_rejected(PROTOCOL, "buffers_full", samples);
        return Err(ApiError::BuffersFull { accepted: 0 });
    }
    let converted = prometheus::convert(request, &limits);
    for r in &converted.rejected {
        count_rejected(PROTOCOL, r.error.reason(), r.samples);
    }
    let accepted = push(&state.intake, converted.items, PROTOCOL, &state.http).await?;
    // Only bad series answer 400: a batch Prometheus gets 400 for is dropped, and retrying it
    // would not make NaN storable.
    let refused: Vec<&Rejected> =
        converted.rejected.iter().filter(|r| r.error.reason() != "value").collect();
    if refused.is_empty() {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::BadRequest(refused_message(accepted, &refused)))
    }
}

/// Remote write 2.0 names its message in the content type; its body is not a `WriteRequest`.
fn refuse_version_2(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    match content_type.and_then(|t| t.split_once("proto=")) {
        Some((_, proto)) if proto.trim() != "prometheus.WriteRequest" => {
            Err(ApiError::UnsupportedMediaType(format!(
                "remote write message {:?} is not supported; bucketd takes remote write 1.0 \
                 (prometheus.WriteRequest: protobuf_message: prometheus.WriteRequest in \
                 Prometheus' remote_write)",
                proto.trim()
            )))
        }
        _ => Ok(()),
    }
}

fn refused_message(accepted: usize, refused: &[&Rejected]) -> String {
    let samples: usize = refused.iter().map(|r| r.samples).sum();
    let head =
        format!("partial write: {samples} sample(s) refused, {accepted} reading(s) accepted");
    list_errors(head, refused, " series", |r| {
        format!("series {} ({:?}): {}", r.series, r.name, r.error)
    })
}
