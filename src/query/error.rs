//! The one error type of the query API, and its mapping into the API's error (whose
//! `status` is the one status table).

use axum::response::{IntoResponse, Response};

use crate::databases::RegistryError;
use crate::http::ApiError;
use crate::store::StoreError;

/// Why a query was not answered. Every variant but `Store` is the client's doing and maps to a
/// 4xx; `Store` maps to 503 when the store is unreachable (worth retrying) and to 500 otherwise.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("missing parameter `{0}`")]
    MissingParam(&'static str),
    #[error("parameter `{0}` given more than once")]
    DuplicateParam(String),
    #[error("query string is not valid URL encoding")]
    BadQueryString,
    #[error("bad `{param}`: {why}")]
    BadParam { param: &'static str, why: String },
    #[error("`from` ({from}) is after `to` ({to})")]
    FromAfterTo { from: String, to: String },
    #[error("bad cursor: {0}")]
    BadCursor(&'static str),
    #[error("too many steps: the range holds {steps} steps of this size, the limit is {max}")]
    TooManySteps { steps: u128, max: u64 },
    #[error("unknown sensor {0:?}")]
    UnknownSensor(String),
    #[error(transparent)]
    Database(#[from] RegistryError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Every variant but `Store` is the client's doing, and bad input never earns a 500; a store
/// that cannot be reached is worth a retry (503), anything else is ours (500).
impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::UnknownSensor(sensor) => ApiError::UnknownSensor(sensor),
            QueryError::Database(e) => ApiError::from(e),
            QueryError::Store(StoreError::Unavailable(detail)) => {
                ApiError::StoreUnavailable(detail)
            }
            // Our own validation should make the store's complaint impossible; if it happens
            // anyway it is still about the request.
            QueryError::Store(StoreError::InvalidQuery(why)) => ApiError::BadRequest(why),
            // Reads start again where the kept readings begin (`kept`), so this is a range
            // whose start retention passes kept moving while it was read: narrowing it helps.
            QueryError::Store(e @ StoreError::Expired { .. }) => {
                ApiError::BadRequest(e.to_string())
            }
            QueryError::Store(other) => ApiError::Internal(other.to_string()),
            client => ApiError::BadRequest(client.to_string()),
        }
    }
}

impl IntoResponse for QueryError {
    fn into_response(self) -> Response {
        ApiError::from(self).into_response()
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{StatusCode, header};

    use super::*;

    fn status_of(e: QueryError) -> StatusCode {
        ApiError::from(e).status()
    }

    #[test]
    fn client_errors_are_4xx_and_store_errors_split_by_kind() {
        assert_eq!(status_of(QueryError::BadCursor("garbage")), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(QueryError::UnknownSensor("x".into())), StatusCode::NOT_FOUND);
        assert_eq!(
            status_of(StoreError::Unavailable("down".into()).into()),
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            status_of(StoreError::Expired { before: 0, retention_ms: 86_400_000 }.into()),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            status_of(StoreError::Corrupt("bad".into()).into()),
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(
            status_of(StoreError::InvalidQuery("no".into()).into()),
            StatusCode::BAD_REQUEST
        );
    }

    async fn body(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn server_errors_do_not_leak_details() {
        let response = QueryError::Store(StoreError::Corrupt("secret path".into())).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body(response).await, serde_json::json!({"error": "internal error"}));
        let response = QueryError::Store(StoreError::Unavailable("host x".into())).into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        assert_eq!(body(response).await, serde_json::json!({"error": "store unavailable"}));
    }

    #[tokio::test]
    async fn client_errors_explain_themselves() {
        let response = QueryError::MissingParam("sensor").into_response();
        assert_eq!(
            body(response).await,
            serde_json::json!({"error": "missing parameter `sensor`"})
        );
    }
}
