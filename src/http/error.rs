//! The one place where a failure becomes an HTTP status and body.
//!
//! Each domain maps its own error into [`ApiError`] with a `From` impl beside that error;
//! [`ApiError::status`] is the one status table. Handlers return [`ApiError`] (bucketd's own `{"error": ...}` bodies) or, on the
//! InfluxDB-compatible endpoints, [`InfluxError`], which keeps the same status and only changes
//! the body to the shape InfluxDB clients expect. Client errors (4xx) are expected and not
//! logged as faults; server errors are logged once, here, and answered with a generic body.

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::json;

use crate::databases::RegistryError;

/// How many rejected items or lines an error body lists; the count is always complete.
pub const MAX_LISTED_ERRORS: usize = 100;

/// `message`, then `; ` and each of the first [`MAX_LISTED_ERRORS`] of `items` as `describe`
/// writes it, then how many more there were: `; and N more` and `unit` (e.g. ` series`).
pub fn list_errors<T>(
    mut message: String,
    items: &[T],
    unit: &str,
    describe: impl Fn(&T) -> String,
) -> String {
    for item in items.iter().take(MAX_LISTED_ERRORS) {
        message.push_str("; ");
        message.push_str(&describe(item));
    }
    if items.len() > MAX_LISTED_ERRORS {
        message.push_str(&format!("; and {} more{unit}", items.len() - MAX_LISTED_ERRORS));
    }
    message
}

/// Seconds a client should wait after a 503 before retrying: buffers drain at flush speed, so
/// a second is long enough for room to appear and short enough not to stall a healthy client.
const RETRY_AFTER_SECS: u64 = 1;

/// The challenge of a 401. Bearer rather than Basic: a Basic challenge makes browsers prompt
/// for a password, and every client bucketd serves sends its token unprompted.
const AUTH_CHALLENGE: &str = "Bearer realm=\"bucketd\"";

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is wrong as a whole (bad parameter, unreadable body, unparsable lines).
    #[error("{0}")]
    BadRequest(String),
    /// Some items of a JSON write were invalid; the valid ones were accepted.
    #[error("{} of the submitted readings were rejected", .0.rejected_count)]
    InvalidItems(Box<RejectedItems>),
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// No valid token on a route that requires one; the message says what was wrong.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// A valid token whose scopes do not cover the request; the message names the token and
    /// its scopes.
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("request body is larger than the limit of {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// One request read whole carries more readings than the buffers can ever hold.
    #[error("request carries {count} readings, more than the {limit} the server buffers at once")]
    TooManyReadings { count: usize, limit: usize },
    /// The buffers are at their bound. `accepted` readings of this request (streamed NDJSON
    /// only; otherwise 0) were taken before the bound was hit and stay accepted.
    #[error("buffers are full; retry in {RETRY_AFTER_SECS} s")]
    BuffersFull { accepted: usize },
    /// The write-ahead log is at `--wal-max-bytes`; `accepted` as for `BuffersFull`.
    #[error("the write-ahead log is full (the store is behind); retry in {RETRY_AFTER_SECS} s")]
    WalFull { accepted: usize },
    /// The write-ahead log's disk is full (ENOSPC): this piece is not acknowledged, and writes
    /// are taken again, without a restart, once there is room. `accepted` as for `BuffersFull`.
    #[error(
        "no space left on device: the write-ahead log's disk is full, so this write was not \
         acknowledged; retry once space is freed on the server's disk"
    )]
    DiskFull { accepted: usize },
    /// The write-ahead log cannot be written; the detail is logged, not sent.
    #[error(
        "the write-ahead log cannot be written; readings were not accepted, and writes are \
         refused until bucketd is restarted"
    )]
    WalFailed(String),
    #[error("too many write requests in progress; retry in {RETRY_AFTER_SECS} s")]
    Overloaded,
    /// The write requests being read and parsed hold their whole share of `--memory-budget`.
    #[error(
        "write requests in progress hold their share of --memory-budget; retry in \
         {RETRY_AFTER_SECS} s"
    )]
    MemoryBudget { accepted: usize },
    #[error("request did not complete within {0:?}")]
    Timeout(Duration),
    #[error("store {store} is not ready: {reason}")]
    NotReady { store: &'static str, reason: String },
    #[error("no such endpoint")]
    NotFound,
    /// The request would run beside another that must run alone.
    #[error("{0}")]
    Conflict(String),
    #[error("unknown sensor {0:?}")]
    UnknownSensor(String),
    /// In InfluxDB 1.x's words, which clients (Telegraf among them) look for.
    #[error("database not found: {0:?}")]
    UnknownDatabase(String),
    /// The store cannot be reached; the request may succeed later.
    #[error("store unavailable")]
    StoreUnavailable(String),
    /// A bug or an environment problem; the detail is logged, not sent.
    #[error("internal error")]
    Internal(String),
}

/// A database a request names: one that does not exist is InfluxDB 1.x's 404.
impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        match e {
            RegistryError::NotFound(name) => ApiError::UnknownDatabase(name),
            RegistryError::BadName(_) | RegistryError::TooMany | RegistryError::Retention(_) => {
                ApiError::BadRequest(e.to_string())
            }
            e @ (RegistryError::Read { .. }
            | RegistryError::Write { .. }
            | RegistryError::Invalid { .. }) => ApiError::Internal(e.to_string()),
        }
    }
}

/// bucketd's error body on its own routes (and InfluxDB 1.x's, which has the same shape).
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What was wrong, for a person to read.
    pub error: String,
}

/// What a 400 for a partially invalid JSON write says.
#[derive(Debug, Serialize)]
pub struct RejectedItems {
    pub accepted: usize,
    /// The first [`MAX_LISTED_ERRORS`] rejected items.
    pub rejected: Vec<RejectedItem>,
    pub rejected_count: usize,
}

#[derive(Debug, Serialize)]
pub struct RejectedItem {
    pub index: usize,
    pub error: String,
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) | ApiError::InvalidItems(_) => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::PayloadTooLarge { .. } | ApiError::TooManyReadings { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ApiError::BuffersFull { .. }
            | ApiError::WalFull { .. }
            | ApiError::Overloaded
            | ApiError::MemoryBudget { .. }
            | ApiError::NotReady { .. }
            | ApiError::StoreUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::DiskFull { .. } => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::NotFound | ApiError::UnknownSensor(_) | ApiError::UnknownDatabase(_) => {
                StatusCode::NOT_FOUND
            }
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Internal(_) | ApiError::WalFailed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Logs what deserves a log line and returns the message that is safe to send.
    pub(crate) fn log_and_public_message(&self) -> String {
        match self {
            ApiError::Internal(detail) | ApiError::WalFailed(detail) => {
                tracing::error!(error = %detail, "request failed");
            }
            ApiError::NotReady { .. } => tracing::warn!(error = %self, "readiness check failed"),
            ApiError::StoreUnavailable(detail) => {
                tracing::warn!(error = %detail, "store unavailable for a request");
            }
            // The log's writer reports the full disk once; every refusal would flood the log.
            ApiError::DiskFull { .. } => tracing::debug!(error = %self, "request refused"),
            // Expected conditions: the client is told, the operator sees them in metrics.
            _ => tracing::debug!(status = %self.status(), error = %self, "request refused"),
        }
        self.to_string()
    }

    pub(crate) fn finish(&self, body: Response) -> Response {
        let mut response = body;
        *response.status_mut() = self.status();
        // A full disk is temporary too: the log takes writes again once there is room.
        if matches!(
            response.status(),
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::INSUFFICIENT_STORAGE
        ) {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
        }
        if response.status() == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(AUTH_CHALLENGE));
        }
        response
    }
}

impl ApiError {
    /// The same refusal, saying that `accepted` readings of the request were taken before it
    /// (a streamed write pushes in pieces, and the pieces before a refusal stay accepted).
    pub fn with_accepted(self, accepted: usize) -> ApiError {
        match self {
            ApiError::BuffersFull { .. } => ApiError::BuffersFull { accepted },
            ApiError::WalFull { .. } => ApiError::WalFull { accepted },
            ApiError::DiskFull { .. } => ApiError::DiskFull { accepted },
            ApiError::MemoryBudget { .. } => ApiError::MemoryBudget { accepted },
            other => other,
        }
    }

    /// The response for a request to `path`, in that route's own error shape: InfluxDB's on
    /// the endpoints that imitate it ([`InfluxApi::of_route`]), bucketd's elsewhere. For the
    /// layers that refuse a request before its handler (auth, timeout, load shedding).
    pub fn into_response_for(self, path: &str) -> Response {
        match InfluxApi::of_route(path) {
            Some(api) => InfluxError { api, error: self }.into_response(),
            None => self.into_response(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let message = self.log_and_public_message();
        let body = match &self {
            ApiError::InvalidItems(items) => Json(json!({
                "error": message,
                "accepted": items.accepted,
                "rejected": items.rejected,
                "rejected_count": items.rejected_count,
            })),
            ApiError::BuffersFull { accepted }
            | ApiError::WalFull { accepted }
            | ApiError::DiskFull { accepted }
            | ApiError::MemoryBudget { accepted } => {
                Json(json!({ "error": message, "accepted": accepted }))
            }
            _ => Json(json!({ "error": message })),
        };
        self.finish(body.into_response())
    }
}

/// Which InfluxDB API an endpoint imitates, which decides the error body's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InfluxApi {
    /// `/write`, `/query`: `{"error": "..."}`.
    V1,
    /// `/api/v2/write`: `{"code": "...", "message": "..."}`.
    V2,
}

impl InfluxApi {
    /// The API the route at `path` imitates, so its error shape; `None` for bucketd's own
    /// routes. The one list of them, for handlers, middleware and the OpenAPI document alike.
    pub fn of_route(path: &str) -> Option<InfluxApi> {
        match path {
            "/write" | "/query" => Some(InfluxApi::V1),
            "/api/v2/write" => Some(InfluxApi::V2),
            _ => None,
        }
    }
}

/// An [`ApiError`] answered in InfluxDB's body shape, same status.
#[derive(Debug)]
pub struct InfluxError {
    pub api: InfluxApi,
    pub error: ApiError,
}

impl InfluxError {
    pub fn v1(error: ApiError) -> Self {
        InfluxError { api: InfluxApi::V1, error }
    }
    pub fn v2(error: ApiError) -> Self {
        InfluxError { api: InfluxApi::V2, error }
    }
}

/// The error body of `/api/v2/write`, InfluxDB 2.x's shape. A struct rather than a `json!` so
/// that the OpenAPI document describes exactly what is sent.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct InfluxV2ErrorBody {
    /// InfluxDB's error code for the status, e.g. `invalid`, `unavailable`.
    pub code: &'static str,
    /// What was wrong, for a person to read.
    pub message: String,
}

/// InfluxDB v2's error codes for the statuses bucketd returns.
fn v2_code(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "invalid",
        StatusCode::PAYLOAD_TOO_LARGE => "request too large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported media type",
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::INSUFFICIENT_STORAGE => "unavailable",
        StatusCode::NOT_FOUND => "not found",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::REQUEST_TIMEOUT => "request timeout",
        _ => "internal error",
    }
}

impl IntoResponse for InfluxError {
    fn into_response(self) -> Response {
        let mut message = self.error.log_and_public_message();
        if self.api == InfluxApi::V1 && matches!(self.error, ApiError::Unauthorized(_)) {
            // InfluxDB 1.x's exact words; clients match on them.
            message = "authorization failed".into();
        }
        let body = match self.api {
            InfluxApi::V1 => Json(json!({ "error": message })).into_response(),
            InfluxApi::V2 => {
                let code = v2_code(self.error.status());
                Json(InfluxV2ErrorBody { code, message }).into_response()
            }
        };
        self.error.finish(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn parts(r: Response) -> (StatusCode, Option<String>, serde_json::Value) {
        let status = r.status();
        let retry = r.headers().get(header::RETRY_AFTER).map(|v| v.to_str().unwrap().to_owned());
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
        (status, retry, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn statuses_and_bodies() {
        let (s, retry, body) = parts(ApiError::BuffersFull { accepted: 7 }.into_response()).await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(body["accepted"], 7);

        let (s, retry, body) = parts(ApiError::PayloadTooLarge { limit: 10 }.into_response()).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(retry, None);
        assert_eq!(body["error"], "request body is larger than the limit of 10 bytes");

        let items = RejectedItems {
            accepted: 2,
            rejected: vec![RejectedItem { index: 1, error: "bad".into() }],
            rejected_count: 1,
        };
        let (s, _, body) = parts(ApiError::InvalidItems(Box::new(items)).into_response()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert_eq!(body["accepted"], 2);
        assert_eq!(body["rejected"][0]["index"], 1);
        assert_eq!(body["rejected"][0]["error"], "bad");
        assert_eq!(body["rejected_count"], 1);

        let (s, retry, body) = parts(ApiError::WalFull { accepted: 3 }.into_response()).await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(body["accepted"], 3);
    }

    #[test]
    fn with_accepted_counts_only_on_refusals_that_carry_it() {
        let accepted = |e: ApiError| match e.with_accepted(5) {
            ApiError::BuffersFull { accepted }
            | ApiError::WalFull { accepted }
            | ApiError::DiskFull { accepted }
            | ApiError::MemoryBudget { accepted } => Some(accepted),
            _ => None,
        };
        assert_eq!(accepted(ApiError::BuffersFull { accepted: 0 }), Some(5));
        assert_eq!(accepted(ApiError::WalFull { accepted: 0 }), Some(5));
        assert_eq!(accepted(ApiError::DiskFull { accepted: 0 }), Some(5));
        assert_eq!(accepted(ApiError::MemoryBudget { accepted: 0 }), Some(5));
        assert_eq!(accepted(ApiError::Overloaded), None);
        assert!(matches!(ApiError::WalFailed("x".into()).with_accepted(5), ApiError::WalFailed(_)));
    }

    #[tokio::test]
    async fn internal_errors_hide_their_detail() {
        let (s, _, body) =
            parts(ApiError::Internal("disk on fire at /var/x".into()).into_response()).await;
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body, json!({ "error": "internal error" }));
        let (s, retry, body) =
            parts(ApiError::WalFailed("fsync /var/x/wal/1.wal: EIO".into()).into_response()).await;
        assert_eq!(s, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(retry, None);
        assert_eq!(
            body["error"],
            "the write-ahead log cannot be written; readings were not accepted, and writes are \
             refused until bucketd is restarted"
        );
    }

    #[tokio::test]
    async fn a_full_disk_is_507_with_retry_after_and_names_the_cause() {
        let (s, retry, body) = parts(ApiError::DiskFull { accepted: 4 }.into_response()).await;
        assert_eq!(s, StatusCode::INSUFFICIENT_STORAGE);
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(body["accepted"], 4);
        assert!(body["error"].as_str().unwrap().starts_with("no space left on device"), "{body}");
        let (s, _, body) =
            parts(InfluxError::v2(ApiError::DiskFull { accepted: 0 }).into_response()).await;
        assert_eq!(s, StatusCode::INSUFFICIENT_STORAGE);
        assert_eq!(body["code"], "unavailable");
    }

    #[tokio::test]
    async fn influx_shapes_keep_the_status() {
        let (s, _, body) =
            parts(InfluxError::v1(ApiError::BadRequest("nope".into())).into_response()).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert_eq!(body, json!({ "error": "nope" }));

        let (s, retry, body) =
            parts(InfluxError::v2(ApiError::BuffersFull { accepted: 0 }).into_response()).await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(body["code"], "unavailable");

        let (s, _, body) =
            parts(InfluxError::v2(ApiError::PayloadTooLarge { limit: 1 }).into_response()).await;
        assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(body["code"], "request too large");
    }

    #[tokio::test]
    async fn unauthorized_in_every_shape() {
        let e = || ApiError::Unauthorized("invalid token".into());
        let challenge = |r: &Response| r.headers()[header::WWW_AUTHENTICATE].clone();
        let r = e().into_response();
        assert_eq!(challenge(&r), AUTH_CHALLENGE);
        let (s, _, body) = parts(r).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        assert_eq!(body, json!({ "error": "unauthorized: invalid token" }));

        let r = InfluxError::v1(e()).into_response();
        assert_eq!(challenge(&r), AUTH_CHALLENGE);
        let (s, _, body) = parts(r).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        assert_eq!(body, json!({ "error": "authorization failed" }));

        let (s, _, body) = parts(InfluxError::v2(e()).into_response()).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED);
        assert_eq!(
            body,
            json!({ "code": "unauthorized", "message": "unauthorized: invalid token" })
        );
    }
}
