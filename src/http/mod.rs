//! The HTTP edge: router assembly, shared state, request metrics, and the operational endpoints
//! (`/health`, `/ready`, `/metrics`). Ingest handlers live in [`crate::ingest::http`]; every
//! error becomes a status in [`error`].

pub mod auth;
pub mod error;
pub mod serve;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;

pub use error::{ApiError, InfluxApi, InfluxError};

use crate::buffer::Buffers;
use crate::ingest::validate::InputLimits;
use crate::query::ErrorBody;
use crate::store::Store;

/// `/ready` answers 503 when the store does not answer a ping within this time: a probe that
/// hangs is as bad as one that fails, and orchestrators time out probes after a few seconds.
const READY_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// Route label for requests that matched no route, so unknown paths cannot create series.
const UNMATCHED_ROUTE: &str = "unmatched";

/// What every handler may use. Cheap to clone: one per request.
#[derive(Clone)]
pub struct AppState {
    pub buffers: Arc<Buffers>,
    /// Where ingest hands readings: the write-ahead log and the buffers.
    pub intake: Arc<crate::ingest::intake::Intake>,
    pub store: Arc<dyn Store>,
    pub limits: Arc<InputLimits>,
    pub http: HttpLimits,
    pub metrics: PrometheusHandle,
    /// `None`: no tokens configured, every route is open.
    pub auth: Option<Arc<auth::AuthPolicy>>,
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

/// The whole HTTP API.
pub fn router(state: AppState) -> Router {
    let query = crate::query::router(crate::query::QueryState::new(
        state.store.clone(),
        state.buffers.clone(),
    ));
    routes(state, query)
}

/// Every route. `query` (the query API, its own state applied) is merged before the metrics
/// layer so that its routes are counted too; axum merges its GET on `/api/v1/readings` with the
/// ingest POST on the same path.
fn routes(state: AppState, query: Router) -> Router {
    let ops = Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/metrics", get(render_metrics));

    let auth = state.auth.clone();
    let mut app = Router::new()
        .merge(crate::ingest::http::router(&state.http))
        .merge(ops)
        .with_state(state)
        .merge(query);
    // Both `route_layer`s come after every merge. Auth is inside the metrics layer, so 401s are
    // counted; as a `route_layer` an unknown path is 404 with or without a token.
    if let Some(policy) = auth {
        app = app.route_layer(middleware::from_fn_with_state(policy, auth::require_token));
    }
    app
        // `route_layer`, not `layer`: only then has routing happened, so `MatchedPath` is known
        // and the route label stays bounded.
        .route_layer(middleware::from_fn(track_http_metrics))
        .fallback(not_found)
}

/// Counts the request and its duration by matched route and status; never by raw URI.
async fn track_http_metrics(request: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED_ROUTE.to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    record_http(route, response.status(), start);
    response
}

fn record_http(route: String, status: StatusCode, start: Instant) {
    metrics::histogram!(crate::metrics::HTTP_REQUEST_DURATION, "route" => route.clone())
        .record(start.elapsed().as_secs_f64());
    metrics::counter!(
        crate::metrics::HTTP_REQUESTS,
        "route" => route,
        "status" => status.as_u16().to_string()
    )
    .increment(1);
}

/// Unknown paths: counted under one label, since `route_layer` does not see them.
async fn not_found() -> Response {
    let start = Instant::now();
    let response = ApiError::NotFound.into_response();
    record_http(UNMATCHED_ROUTE.to_owned(), response.status(), start);
    response
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
pub(crate) async fn ready(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
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
pub(crate) async fn render_metrics(State(state): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.render())
}
