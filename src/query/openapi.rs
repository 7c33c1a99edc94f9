//! The OpenAPI 3 document served at `GET /api/v1/openapi.json`, generated from the handlers'
//! `#[utoipa::path]` annotations.
//!
//! The ingest and operational endpoints live in other modules; until their handlers carry their
//! own annotations they are described here by documentation-only items (`doc_*`), which are never
//! routed. Move each annotation onto the real handler and drop its `doc_*` item.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use super::error::ErrorBody;
use super::rollups::{RollupRowJson, RollupsResponse, StatsJson};
use super::sensors::{SensorJson, SensorsResponse};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "bucketd",
        description = "Time-series ingestion for sensor data: JSON and InfluxDB line protocol in, ranges, rollups and sensor listings out. Times in responses are RFC 3339 UTC with millisecond precision."
    ),
    paths(
        super::readings::get_readings,
        super::rollups::get_rollups,
        super::sensors::get_sensors,
        get_openapi,
        doc_post_readings,
        doc_write_v1,
        doc_write_v2,
        doc_ping,
        doc_health,
        doc_ready,
        doc_metrics,
    ),
    components(schemas(
        ErrorBody,
        ReadingsPage,
        ReadingJson,
        FieldValueJson,
        RollupsResponse,
        RollupRowJson,
        StatsJson,
        SensorsResponse,
        SensorJson,
        IngestReading,
        IngestBody,
    )),
    tags(
        (name = "query", description = "Reading data back."),
        (name = "ingest", description = "Writing readings."),
        (name = "operations", description = "Probes, metrics and this document."),
    )
)]
pub struct ApiDoc;

/// The JSON shape of `GET /api/v1/readings`. Documentation only: that body is streamed by hand.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ReadingsPage {
    pub sensor: String,
    pub readings: Vec<ReadingJson>,
    /// Pass as `cursor` to get the next page; `null` when no more readings follow.
    pub next_cursor: Option<String>,
}

#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ReadingJson {
    /// RFC 3339, UTC, millisecond precision, `Z` suffix.
    #[schema(example = "2024-05-01T12:00:00.000Z")]
    pub t: String,
    /// Field values as written: integers (i64/u64) as JSON integers, floats as numbers,
    /// booleans, strings.
    pub fields: BTreeMap<String, FieldValueJson>,
}

/// A field value. Integer fields (i64 and u64) are written as exact JSON integers, floats as
/// numbers; `number` covers both here because `oneOf` must match exactly one branch.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum FieldValueJson {
    Number(f64),
    Boolean(bool),
    String(String),
}

/// One reading as `POST /api/v1/readings` takes it. Owned by the ingest module: check against
/// its parser at integration.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct IngestReading {
    /// Sensor key.
    pub sensor: String,
    /// RFC 3339 or epoch milliseconds; default: the time the server received it.
    pub t: Option<String>,
    pub tags: Option<BTreeMap<String, String>>,
    pub fields: BTreeMap<String, FieldValueJson>,
}

/// `POST /api/v1/readings` with `application/json`: one reading or an array of them.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum IngestBody {
    One(IngestReading),
    Many(Vec<IngestReading>),
}

fn document() -> &'static str {
    static DOC: OnceLock<String> = OnceLock::new();
    DOC.get_or_init(|| ApiDoc::openapi().to_json().expect("the OpenAPI document serializes"))
}

#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "operations",
    responses((status = 200, description = "This OpenAPI 3 document.", content_type = "application/json", body = Object))
)]
pub async fn get_openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document())
}

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
        (status = 204, description = "Every reading accepted into the buffers."),
        (status = 400, description = "Some or all readings rejected; the body lists each rejected item by index.", body = ErrorBody),
        (status = 413, description = "Body too large.", body = ErrorBody),
        (status = 503, description = "Buffers full; retry after the `Retry-After` delay.", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn doc_post_readings() {}

#[utoipa::path(
    post,
    path = "/write",
    tag = "ingest",
    params(
        ("db" = Option<String>, Query, description = "Accepted for InfluxDB 1.x compatibility; ignored."),
        ("precision" = Option<String>, Query, description = "Timestamp precision: n, ns, u, us, ms, s, m, h (default ns)."),
    ),
    request_body(description = "InfluxDB line protocol, one point per line; may be gzip-encoded.", content_type = "text/plain", content = String),
    responses(
        (status = 204, description = "Every line accepted."),
        (status = 400, description = "Some or all lines rejected, with 1-based line numbers.", body = ErrorBody),
        (status = 413, description = "Body too large.", body = ErrorBody),
        (status = 503, description = "Buffers full; retry after the `Retry-After` delay.", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn doc_write_v1() {}

#[utoipa::path(
    post,
    path = "/api/v2/write",
    tag = "ingest",
    params(
        ("org" = Option<String>, Query, description = "Accepted for InfluxDB 2.x compatibility; ignored."),
        ("bucket" = Option<String>, Query, description = "Accepted for InfluxDB 2.x compatibility; ignored."),
        ("precision" = Option<String>, Query, description = "Timestamp precision: ns, us, ms, s (default ns)."),
    ),
    request_body(description = "InfluxDB line protocol, one point per line; may be gzip-encoded.", content_type = "text/plain", content = String),
    responses(
        (status = 204, description = "Every line accepted."),
        (status = 400, description = "Some or all lines rejected, with 1-based line numbers.", body = ErrorBody),
        (status = 413, description = "Body too large.", body = ErrorBody),
        (status = 503, description = "Buffers full; retry after the `Retry-After` delay.", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn doc_write_v2() {}

#[utoipa::path(
    get,
    path = "/ping",
    tag = "operations",
    responses((status = 204, description = "Alive (InfluxDB clients probe this before writing)."))
)]
#[allow(dead_code)]
fn doc_ping() {}

#[utoipa::path(
    get,
    path = "/health",
    tag = "operations",
    responses((status = 200, description = "The process is running."))
)]
#[allow(dead_code)]
fn doc_health() {}

#[utoipa::path(
    get,
    path = "/ready",
    tag = "operations",
    responses(
        (status = 200, description = "The store answers its ping; ready for traffic."),
        (status = 503, description = "The store does not answer.", body = ErrorBody),
    )
)]
#[allow(dead_code)]
fn doc_ready() {}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text exposition format.", content_type = "text/plain", body = String))
)]
#[allow(dead_code)]
fn doc_metrics() {}
