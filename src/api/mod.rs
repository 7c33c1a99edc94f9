//! The whole HTTP API, and the only module that knows all of it: each surface's routes with
//! their own state (ingest, query, operations), token auth and request metrics over them, the
//! fallback for unknown paths, the one OpenAPI document ([`openapi`]), the server status
//! ([`status`]) and the web console ([`console`]).

pub mod console;
pub mod openapi;
pub mod ops;
pub mod status;

use std::sync::Arc;

use axum::Router;
use axum::middleware;
use axum::routing::get;

use crate::http::auth::{self, AuthPolicy};
use crate::ingest::http::IngestState;
use crate::query::QueryState;

pub use ops::OpsState;

/// Every surface's state.
pub struct Surfaces {
    pub ingest: IngestState,
    pub query: QueryState,
    pub ops: OpsState,
    /// Which routes need which token; none while no token is in force.
    pub auth: Arc<AuthPolicy>,
}

/// Every route. The surfaces are merged before the layers, so that every route is counted and
/// guarded; axum merges the query GET on `/api/v1/readings` with the ingest POST on that path.
pub fn router(surfaces: Surfaces) -> Router {
    let mut app = Router::new()
        .merge(crate::ingest::http::router(surfaces.ingest))
        .merge(crate::query::router(surfaces.query))
        .merge(ops::router(surfaces.ops))
        .route("/api/v1/openapi.json", get(openapi::get_openapi))
        .merge(console::router());
    // Both `route_layer`s come after every merge. Auth is inside the metrics layer, so 401s are
    // counted; as a `route_layer` an unknown path is 404 with or without a token.
    app = app.route_layer(middleware::from_fn_with_state(surfaces.auth, auth::require_token));
    app.route_layer(middleware::from_fn(crate::http::track_http_metrics))
        .fallback(crate::http::not_found)
}
