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
use crate::http::InfluxApi;

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
        crate::http::error::InfluxV2ErrorBody,
    )),
    tags(
        (name = "query", description = "Reading data back."),
        (name = "ingest", description = "Writing readings."),
        (name = "operations", description = "Probes, metrics and this document."),
    ),
    modifiers(&AuthDoc)
)]
pub struct ApiDoc;

/// Documents token authentication: the accepted credential forms, and on every route that can
/// require a token, the 401 and an optional security requirement (auth is off unless tokens
/// are configured; the operations routes need one only with `--auth-metrics`).
struct AuthDoc;

impl utoipa::Modify for AuthDoc {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            ApiKey, ApiKeyValue, Http, HttpAuthScheme, SecurityRequirement, SecurityScheme,
        };
        let components = doc.components.get_or_insert_with(Default::default);
        let mut token = ApiKeyValue::new("Authorization");
        token.description = Some("`Authorization: Token <token>` (InfluxDB 2.x style).".into());
        let mut p = ApiKeyValue::new("p");
        p.description = Some("InfluxDB 1.x: the token as `p` (`u` is ignored).".into());
        let mut basic = Http::new(HttpAuthScheme::Basic);
        basic.description = Some("Any user name; the password is the token.".into());
        let schemes = [
            ("token", SecurityScheme::ApiKey(ApiKey::Header(token))),
            ("bearer", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer))),
            ("basic", SecurityScheme::Http(basic)),
            ("influx_v1", SecurityScheme::ApiKey(ApiKey::Query(p))),
        ];
        let requirements: Vec<SecurityRequirement> = std::iter::once(Default::default())
            .chain(schemes.iter().map(|(name, _)| SecurityRequirement::new(*name, [""; 0])))
            .collect();
        components.add_security_schemes_from_iter(schemes);

        // The body in the route's own error shape, as `auth::require_token` sends it.
        let unauthorized = |path: &str| {
            let schema = match InfluxApi::of_route(path) {
                Some(InfluxApi::V2) => "InfluxV2ErrorBody",
                Some(InfluxApi::V1) | None => "ErrorBody",
            };
            let content = utoipa::openapi::ContentBuilder::new()
                .schema(Some(utoipa::openapi::Ref::from_schema_name(schema)))
                .build();
            utoipa::openapi::ResponseBuilder::new()
                .description(
                    "Missing or invalid token (only when tokens are configured; operations \
                     routes only with `--auth-metrics`).",
                )
                .content("application/json", content)
                .build()
        };
        for (path, item) in doc.paths.paths.iter_mut() {
            if crate::http::auth::ALWAYS_OPEN.contains(&path.as_str()) {
                continue;
            }
            let unauthorized = unauthorized(path);
            let operations = [&mut item.get, &mut item.post, &mut item.head];
            for operation in operations.into_iter().flatten() {
                operation.security = Some(requirements.clone());
                operation.responses.responses.insert("401".into(), unauthorized.clone().into());
            }
        }
    }
}

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
