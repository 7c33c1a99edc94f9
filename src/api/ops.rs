//! The operations endpoints: `/health`, `/ready`, `/metrics`, and the status summary
//! (`/api/v1/status`, built by [`super::status`]).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;

use super::status::{StatusResponse, StatusSource};
use crate::http::{ApiError, ErrorBody};
use crate::store::Store;

/// `/ready` answers 503 when the store does not answer a ping within this time: a probe that
/// hangs is as bad as one that fails, and orchestrators time out probes after a few seconds.
const READY_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// What the operations endpoints read.
#[derive(Clone)]
pub struct OpsState {
    pub store: Arc<dyn Store>,
    pub metrics: PrometheusHandle,
    /// The counts `/api/v1/status` reports.
    pub status: Arc<dyn StatusSource>,
}

/// The operations routes, their state applied.
pub fn router(state: OpsState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(render_metrics))
        .route("/api/v1/status", get(get_status))
        .with_state(state)
}

/// Liveness: the process serves HTTP. Says nothing about the store (that is `/ready`).
#[utoipa::path(
    get,
    path = "/health",
    tag = "operations",
    responses((status = 200, description = "The process is running."))
)]
pub(crate) async fn health() -> impl IntoResponse {
    axum::Json(json!({ "status": "ok" }))
}

/// Readiness: the store answers a ping in time.
#[utoipa::path(
    get,
    path = "/ready",
    tag = "operations",
    responses(
        (status = 200, description = "The store answers its ping; ready for traffic."),
        (status = 503, description = "The store does not answer.", body = ErrorBody),
    )
)]
pub(crate) async fn ready(State(state): State<OpsState>) -> Result<impl IntoResponse, ApiError> {
    let store = state.store.name();
    match tokio::time::timeout(READY_PING_TIMEOUT, state.store.ping()).await {
        Ok(Ok(())) => Ok(axum::Json(json!({ "status": "ready", "store": store }))),
        Ok(Err(e)) => Err(ApiError::NotReady { store, reason: e.to_string() }),
        Err(_) => Err(ApiError::NotReady {
            store,
            reason: format!("no answer to ping within {READY_PING_TIMEOUT:?}"),
        }),
    }
}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text exposition format.", content_type = "text/plain", body = String))
)]
pub(crate) async fn render_metrics(State(state): State<OpsState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.render())
}

/// Server status: ingest, buffers, write-ahead log, store.
#[utoipa::path(
    get,
    path = "/api/v1/status",
    tag = "operations",
    responses((status = 200, description = "The server's state now.", body = StatusResponse))
)]
pub(crate) async fn get_status(State(state): State<OpsState>) -> axum::Json<StatusResponse> {
    axum::Json(super::status::status(state.store.as_ref(), state.status.as_ref()).await)
}
