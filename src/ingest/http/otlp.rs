//! OpenTelemetry metrics over HTTP: `POST /v1/metrics`, OTLP's standard path, in protobuf or
//! JSON. What a data point becomes is [`crate::ingest::otlp`]'s.
//!
//! Answers as OTLP/HTTP specifies: 200 with an `ExportMetricsServiceResponse` in the request's
//! encoding, whose `partial_success` counts the points refused; errors with a `google.rpc.Status`
//! body in the request's encoding, and the status codes OTLP exporters retry on (503 with
//! `Retry-After`) when the buffers, the log or the memory share are full.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use prost::Message as _;
use serde::Serialize;

use super::body::{IDENTITY_OR_GZIP, read_body};
use super::readings::DbParam;
use super::schemas::Protobuf;
use super::state::{IngestState, now_ms, push};
use crate::http::ApiError;
use crate::http::error::list_errors;
use crate::ingest::metrics::{Protocol, count_rejected};
use crate::ingest::otlp::{self, Encoding};

const PROTOCOL: Protocol = Protocol::Otlp;
const PROTOBUF: &str = "application/x-protobuf";
const JSON: &str = "application/json";

/// `google.rpc.Status`, the body of an OTLP/HTTP error: `details` is never sent.
#[derive(Clone, PartialEq, prost::Message, Serialize, utoipa::ToSchema)]
pub struct OtlpStatus {
    /// The gRPC status code for the HTTP status.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What was wrong, for a person to read.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// An [`ApiError`] answered as OTLP/HTTP answers errors: same status, a `Status` body.
pub(crate) struct OtlpError {
    encoding: Encoding,
    error: ApiError,
}

impl<E: Into<ApiError>> From<(Encoding, E)> for OtlpError {
    fn from((encoding, error): (Encoding, E)) -> OtlpError {
        OtlpError { encoding, error: error.into() }
    }
}

/// gRPC's code for the HTTP statuses bucketd answers with.
fn grpc_code(status: StatusCode) -> i32 {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::UNSUPPORTED_MEDIA_TYPE => 3,
        StatusCode::REQUEST_TIMEOUT => 4,
        StatusCode::NOT_FOUND => 5,
        StatusCode::FORBIDDEN => 7,
        StatusCode::PAYLOAD_TOO_LARGE => 8,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::INSUFFICIENT_STORAGE => 14,
        StatusCode::UNAUTHORIZED => 16,
        _ => 13,
    }
}

impl IntoResponse for OtlpError {
    fn into_response(self) -> Response {
        let message = self.error.log_and_public_message();
        let status = OtlpStatus { code: grpc_code(self.error.status()), message };
        self.error.finish(encode(self.encoding, &status, |s| s.encode_to_vec()))
    }
}

/// `value` in `encoding`, with its content type.
fn encode<T: Serialize>(
    encoding: Encoding,
    value: &T,
    protobuf: impl Fn(&T) -> Vec<u8>,
) -> Response {
    let (content_type, body) = match encoding {
        Encoding::Protobuf => (PROTOBUF, protobuf(value)),
        Encoding::Json => (JSON, serde_json::to_vec(value).expect("a response serializes")),
    };
    ([(header::CONTENT_TYPE, HeaderValue::from_static(content_type))], body).into_response()
}

/// The body's encoding, from its content type.
fn encoding_of(headers: &HeaderMap) -> Result<Encoding, OtlpError> {
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    let essence =
        content_type.map(|t| t.split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    match essence.as_deref() {
        Some(PROTOBUF) => Ok(Encoding::Protobuf),
        Some(JSON) => Ok(Encoding::Json),
        _ => Err(OtlpError {
            encoding: Encoding::Json,
            error: ApiError::UnsupportedMediaType(format!(
                "unsupported Content-Type {content_type:?}; OTLP/HTTP sends {PROTOBUF} or {JSON}"
            )),
        }),
    }
}

#[utoipa::path(
    post,
    path = "/v1/metrics",
    tag = "ingest",
    params(
        ("db" = Option<String>, Query, description = "The database; `bucketd` when absent. One that does not exist gets 404."),
    ),
    request_body(description = "An OTLP `ExportMetricsServiceRequest`, protobuf or JSON; may be gzip-encoded.", content(
        (Protobuf = "application/x-protobuf"),
        (Object = "application/json"),
    )),
    responses(
        (status = 200, description = "Accepted; `partialSuccess` counts the data points refused, with why.", content(
            (Protobuf = "application/x-protobuf"),
            (Object = "application/json"),
        )),
        (status = 400, description = "Not an ExportMetricsServiceRequest.", content((Protobuf = "application/x-protobuf"), (OtlpStatus = "application/json"))),
        (status = 404, description = "The database does not exist.", content((Protobuf = "application/x-protobuf"), (OtlpStatus = "application/json"))),
        (status = 408, description = "The request, body included, took longer than `--request-timeout`.", body = crate::http::ErrorBody),
        (status = 413, description = "Body too large, or more data points than the buffers hold.", content((Protobuf = "application/x-protobuf"), (OtlpStatus = "application/json"))),
        (status = 415, description = "Neither protobuf nor JSON, or an encoding other than gzip.", content((Protobuf = "application/x-protobuf"), (OtlpStatus = "application/json"))),
        (status = 503, description = "Buffers, write-ahead log or memory budget full; retry after the `Retry-After` delay.", content((Protobuf = "application/x-protobuf"), (OtlpStatus = "application/json"))),
        (status = 507, description = "The write-ahead log's disk is full: not acknowledged.", content((Protobuf = "application/x-protobuf"), (OtlpStatus = "application/json"))),
        (status = 500, description = "The write-ahead log cannot be written; nothing was acknowledged.", content((Protobuf = "application/x-protobuf"), (OtlpStatus = "application/json"))),
    )
)]
pub(crate) async fn export_metrics(
    State(state): State<IngestState>,
    params: Result<Query<DbParam>, QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, OtlpError> {
    let encoding = encoding_of(&headers)?;
    let Query(params) = params.map_err(|e| (encoding, ApiError::BadRequest(e.body_text())))?;
    let limits = state.limits_in(params.db.as_deref()).map_err(|e| (encoding, e))?;
    let limit = state.http.max_body_bytes;
    let read = read_body(body, &headers, IDENTITY_OR_GZIP, limit, &state.memory, PROTOCOL)
        .await
        .map_err(|e| (encoding, e))?;
    // Held until the points are pushed, as a line-protocol body is.
    let (bytes, _held) = (read.bytes, read.held);
    let request = otlp::decode(&bytes, encoding).map_err(|e| (encoding, e))?;
    drop(bytes);
    let converted = otlp::convert(request, now_ms(), &limits);
    for r in &converted.rejected {
        count_rejected(PROTOCOL, r.error.reason(), 1);
    }
    push(&state.intake, converted.items, PROTOCOL, &state.http).await.map_err(|e| (encoding, e))?;
    let partial_success = (!converted.rejected.is_empty()).then(|| ExportMetricsPartialSuccess {
        rejected_data_points: converted.rejected.len() as i64,
        error_message: refused_message(&converted.rejected),
    });
    let response = ExportMetricsServiceResponse { partial_success };
    Ok(encode(encoding, &response, |r| r.encode_to_vec()))
}

fn refused_message(refused: &[otlp::Rejected]) -> String {
    let head = format!("{} data point(s) refused", refused.len());
    list_errors(head, refused, "", |r| format!("metric {:?}: {}", r.metric, r.error))
}
