//! The HTTP edge kit: what every HTTP surface shares and nothing of the application. The one
//! status table ([`error`]), InfluxDB's error shapes, token auth ([`auth`]), the connection
//! loop ([`serve`]) and per-route request metrics. `crate::api` assembles the surfaces with it.

pub mod auth;
pub mod error;
pub mod serve;

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use error::{ApiError, ErrorBody, InfluxApi, InfluxError};

/// What ``/ping` and `/query`` reports as the InfluxDB version: clients (Telegraf, influx CLI) read it to pick
/// the v1 API; the suffix says who is really answering.
pub const INFLUXDB_VERSION: &str = "1.8.10-bucketd";

/// The headers InfluxDB puts on `/ping` and `/query` answers; clients read the version.
pub fn influxdb_headers() -> [(axum::http::HeaderName, axum::http::HeaderValue); 2] {
    use axum::http::{HeaderName, HeaderValue};
    [
        (HeaderName::from_static("x-influxdb-version"), HeaderValue::from_static(INFLUXDB_VERSION)),
        (HeaderName::from_static("x-influxdb-build"), HeaderValue::from_static("OSS")),
    ]
}

/// Route label for requests that matched no route, so unknown paths cannot create series.
const UNMATCHED_ROUTE: &str = "unmatched";

/// Counts the request and its duration by matched route and status; never by raw URI. For
/// `route_layer`: only then has routing happened, so `MatchedPath` is known and the route
/// label stays bounded.
pub async fn track_http_metrics(request: Request, next: Next) -> Response {
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

/// The fallback for unknown paths: counted under one label, since `route_layer` does not see
/// them.
pub async fn not_found() -> Response {
    let start = Instant::now();
    let response = ApiError::NotFound.into_response();
    record_http(UNMATCHED_ROUTE.to_owned(), response.status(), start);
    response
}
