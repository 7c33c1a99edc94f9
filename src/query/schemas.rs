//! Schemas of the query bodies that are streamed by hand, for the OpenAPI document only.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

/// The JSON shape of `GET /api/v1/readings`. Documentation only: that body is streamed by hand.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct ReadingsPage {
    pub sensor: String,
    /// Present when `--retention` deleted the readings of the range's start: where the
    /// readings kept begin (RFC 3339 UTC), also in the `X-Kept-From` header of every format.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub kept_from: Option<String>,
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
