//! Schemas of the ingest bodies that are parsed without serde structs, for the OpenAPI
//! document only.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

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
    pub fields: Option<BTreeMap<String, IngestFieldValue>>,
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

/// A field value as written: numbers (stored as floats), booleans or strings.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum IngestFieldValue {
    Number(f64),
    Boolean(bool),
    String(String),
}

/// A protobuf message (Prometheus remote write, OTLP), as the bytes on the wire.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
#[allow(dead_code)]
pub struct Protobuf(Vec<u8>);
