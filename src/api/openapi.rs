//! The OpenAPI 3 document served at `GET /api/v1/openapi.json`, generated from the handlers'
//! `#[utoipa::path]` annotations: the one document of every route.
//!
//! Every handler carries its own annotation, and every surface the schemas of the bodies it
//! writes or reads by hand (streamed pages, ingest bodies parsed without serde structs); this
//! module lists them.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::OpenApi;

use crate::http::{ErrorBody, InfluxApi};
use crate::ingest::http::schemas::{
    AcceptedBody, IngestBody, IngestFieldValue, IngestReading, IngestTs,
};
use crate::query::rollups::{PointJson, RollupRowJson, RollupsResponse, StatsJson};
use crate::query::schemas::{FieldValueJson, ReadingJson, ReadingsPage};
use crate::query::sensors::{SensorJson, SensorsResponse};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "bucketd",
        description = "Time-series ingestion for sensor data: JSON and InfluxDB line protocol in, ranges, rollups and sensor listings out. Times in responses are RFC 3339 UTC with millisecond precision."
    ),
    paths(
        crate::query::readings::get_readings,
        crate::query::rollups::get_rollups,
        crate::query::sensors::get_sensors,
        get_openapi,
        crate::ingest::http::readings::write_readings,
        crate::ingest::http::influx::write_v1,
        crate::ingest::http::influx::write_v2,
        crate::ingest::http::prometheus::remote_write,
        crate::ingest::http::otlp::export_metrics,
        crate::ingest::http::dead_letters::replay,
        crate::ingest::http::influx::ping,
        crate::query::influxql::query,
        super::ops::health,
        super::ops::ready,
        super::ops::render_metrics,
        super::ops::get_status,
    ),
    components(schemas(
        ErrorBody,
        ReadingsPage,
        ReadingJson,
        FieldValueJson,
        RollupsResponse,
        RollupRowJson,
        StatsJson,
        PointJson,
        SensorsResponse,
        SensorJson,
        IngestReading,
        IngestTs,
        IngestFieldValue,
        IngestBody,
        AcceptedBody,
        crate::http::error::InfluxV2ErrorBody,
        crate::ingest::http::otlp::OtlpStatus,
        crate::ingest::http::schemas::Protobuf,
        super::status::StatusResponse,
        super::status::StoreStatus,
        super::status::BufferedStatus,
        super::status::WalStatus,
        super::status::DeadLetterStatus,
        crate::ingest::http::dead_letters::ReplayBody,
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
        let refusal = |path: &str, description: &str| {
            let schema = match InfluxApi::of_route(path) {
                Some(InfluxApi::V2) => "InfluxV2ErrorBody",
                Some(InfluxApi::V1) | None => "ErrorBody",
            };
            let content = utoipa::openapi::ContentBuilder::new()
                .schema(Some(utoipa::openapi::Ref::from_schema_name(schema)))
                .build();
            utoipa::openapi::ResponseBuilder::new()
                .description(description)
                .content("application/json", content)
                .build()
        };
        let unauthorized = |path: &str| {
            refusal(
                path,
                "Missing, invalid or expired token (only when tokens are in force; operations \
                 routes only with `--auth-metrics`).",
            )
        };
        let forbidden = |path: &str| {
            refusal(
                path,
                "A valid token whose scopes (read, write, admin) do not cover the request.",
            )
        };
        for (path, item) in doc.paths.paths.iter_mut() {
            if crate::http::auth::ALWAYS_OPEN.contains(&path.as_str()) {
                continue;
            }
            let (unauthorized, forbidden) = (unauthorized(path), forbidden(path));
            let operations = [&mut item.get, &mut item.post, &mut item.head];
            for operation in operations.into_iter().flatten() {
                operation.security = Some(requirements.clone());
                let responses = &mut operation.responses.responses;
                responses.insert("401".into(), unauthorized.clone().into());
                responses.insert("403".into(), forbidden.clone().into());
            }
        }
    }
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
