//! The OpenAPI 3 document served at `GET /api/v1/openapi.json`, generated from the handlers'
//! `#[utoipa::path]` annotations.
//!
//! Every handler carries its own annotation, in the module that routes it; this module lists
//! them and holds the schemas of bodies that are written or read by hand (streamed pages,
//! ingest bodies parsed without serde structs).

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
        crate::ingest::http::write_readings,
        crate::ingest::http::write_v1,
        crate::ingest::http::write_v2,
        crate::ingest::http::ping,
        crate::ingest::http::influx_query,
        crate::http::health,
        crate::http::ready,
        crate::http::render_metrics,
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
        IngestTs,
        IngestBody,
        AcceptedBody,
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

/// One reading as `POST /api/v1/readings` takes it (parsed by `crate::ingest::json`, which
/// rejects unknown keys). Exactly one of `value` and `fields` is given.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct IngestReading {
    /// Sensor key. A line-protocol series key (`env,sensor=s1,site=w3`) names the same series
    /// as the line protocol point, and its tags are stored with it.
    pub sensor: String,
    /// RFC 3339 string or integer epoch milliseconds; absent or null: when the server
    /// received it.
    pub ts: Option<IngestTs>,
    /// A single numeric value, stored as field `value`.
    pub value: Option<f64>,
    /// Field values: numbers (stored as floats), booleans or strings.
    pub fields: Option<BTreeMap<String, FieldValueJson>>,
    pub tags: Option<BTreeMap<String, String>>,
}

/// A reading's timestamp.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum IngestTs {
    Rfc3339(String),
    EpochMillis(i64),
}

/// `202` from `POST /api/v1/readings`.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct AcceptedBody {
    pub accepted: u64,
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
