//! `GET /api/v1/sensors`: sensors by tag and measurement, paged by key.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{RawQuery, State};
use serde::Serialize;

use super::cursor::{decode_sensor_cursor, encode_sensor_cursor};
use super::encode::format_ts;
use super::error::QueryError;
use super::params::{Params, parse_limit};
use super::state::QueryState;
use crate::store::{SensorInfo, SensorQuery};

#[derive(Serialize, utoipa::ToSchema)]
pub struct SensorsResponse {
    /// Ordered by key.
    pub sensors: Vec<SensorJson>,
    /// Pass as `cursor` to get the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct SensorJson {
    pub key: String,
    pub measurement: String,
    pub tags: BTreeMap<String, String>,
    /// Earliest reading, stored or buffered, RFC 3339 UTC.
    pub first: String,
    /// Latest reading, stored or buffered, RFC 3339 UTC.
    pub last: String,
}

fn parse_tag(s: &str) -> Result<(String, String), QueryError> {
    match s.split_once(':') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(QueryError::BadParam { param: "tag", why: format!("{s:?} is not key:value") }),
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/sensors",
    tag = "query",
    params(
        ("db" = Option<String>, Query, example = "bucketd", description = "The database; `bucketd` when absent. One that does not exist gets 404."),
        ("tag" = Option<Vec<String>>, Query, explode = true, example = json!(["site:a"]), description = "`key:value`, split at the first colon; repeat for several tags (all must match)."),
        ("measurement" = Option<String>, Query, example = "temp", description = "Only sensors of this measurement."),
        ("prefix" = Option<String>, Query, example = "env,sensor=s1", description = "Only sensors whose key starts with this text (case-sensitive)."),
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 10_000, example = 10, description = "Sensors per page, 1 to 10000 (default 100); larger values are refused with 400."),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page."),
    ),
    responses(
        (status = 200, description = "One page of sensors, including sensors whose readings are all still buffered.", body = SensorsResponse),
        (status = 400, description = "Bad parameter or cursor.", body = crate::http::ErrorBody),
        (status = 404, description = "No such database.", body = crate::http::ErrorBody),
        (status = 503, description = "Store unavailable; retry.", body = crate::http::ErrorBody),
    )
)]
pub async fn get_sensors(
    State(state): State<QueryState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<SensorsResponse>, QueryError> {
    let p = Params::parse(raw.as_deref())?;
    let state = state.open(p.get("db")?)?;
    let tags = p.all("tag").map(parse_tag).collect::<Result<Vec<_>, _>>()?;
    let measurement = p.get("measurement")?.map(str::to_owned);
    let limit =
        parse_limit(p.get("limit")?, state.limits.default_sensors, state.limits.max_sensors)?;
    let cursor = p.get("cursor")?.map(decode_sensor_cursor).transpose()?;
    let prefix = p.get("prefix")?.filter(|p| !p.is_empty()).map(str::to_owned);
    // With a prefix, start just below it (unless the cursor is further on).
    let after = match (cursor, prefix.as_deref().map(before_prefix)) {
        (Some(c), Some(Some(b))) => Some(c.max(b)),
        (c, b) => c.or(b.flatten()),
    };
    let matches_prefix = |key: &str| prefix.as_deref().is_none_or(|p| key.starts_with(p));

    let buffered = state.unflushed.unflushed_sensors();
    let mut stored = Vec::new();
    let mut from = after.clone();
    // Pages of the store's key order until `limit + 1` matching keys, the first key past the
    // prefix's range, or the end. Without a prefix this is one request, as before.
    loop {
        let page = state
            .store
            .sensors(SensorQuery {
                database: Default::default(),
                tags: tags.clone(),
                measurement: measurement.clone(),
                after: from.clone(),
                limit: limit + 1,
            })
            .await?;
        let full = page.len() > limit;
        from = page.last().map(|s| s.key.clone());
        let mut past_prefix = false;
        for s in page {
            match &prefix {
                Some(p) if s.key.as_str() < p.as_str() => continue,
                Some(p) if !s.key.starts_with(p.as_str()) => {
                    past_prefix = true;
                    break;
                }
                _ => stored.push(s),
            }
        }
        if !full || past_prefix || stored.len() > limit || prefix.is_none() {
            break;
        }
    }
    // The store's first `limit + 1` keys plus every matching buffered key contain the first
    // `limit + 1` keys of the union, and any stored sensor among them was returned by the store,
    // so its first/last can be widened here.
    let mut merged: BTreeMap<String, SensorInfo> =
        stored.into_iter().map(|s| (s.key.clone(), s)).collect();
    for s in buffered {
        let matches = after.as_ref().is_none_or(|a| s.key > *a)
            && matches_prefix(&s.key)
            && measurement.as_ref().is_none_or(|m| *m == s.measurement)
            && tags.iter().all(|t| s.tags.contains(t));
        if !matches {
            continue;
        }
        merged
            .entry(s.key.clone())
            .and_modify(|m| {
                m.first = m.first.min(s.first);
                m.last = m.last.max(s.last);
            })
            .or_insert(s);
    }
    let more = merged.len() > limit;
    let sensors: Vec<SensorJson> = merged
        .into_values()
        .take(limit)
        .map(|s| SensorJson {
            key: s.key,
            measurement: s.measurement,
            tags: s.tags.into_iter().collect(),
            first: format_ts(s.first),
            last: format_ts(s.last),
        })
        .collect();
    let next_cursor =
        if more { sensors.last().map(|s| encode_sensor_cursor(&s.key)) } else { None };
    Ok(Json(SensorsResponse { sensors, next_cursor }))
}

/// A key just below every key that starts with `prefix`, as the exclusive `after` of a store
/// query: the prefix with its last character lowered by one and the greatest character
/// appended (so keys between that and `prefix` are only the improbable ones that hold
/// U+10FFFF; they are skipped). `None` when nothing is below (the prefix is all NULs).
fn before_prefix(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    let last = chars.pop()?;
    let lower = match last {
        '\0' => return Some(chars.into_iter().collect()).filter(|s: &String| !s.is_empty()),
        '\u{E000}' => '\u{D7FF}',
        c => char::from_u32(c as u32 - 1)?,
    };
    chars.push(lower);
    chars.push(char::MAX);
    Some(chars.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn before_prefix_is_below_every_match_and_above_what_sorts_before() {
        for (prefix, below) in [("env,s", "env,"), ("b", "a"), ("é", "e")] {
            let b = before_prefix(prefix).unwrap();
            assert!(b.as_str() < prefix, "{prefix}");
            assert!(b.as_str() > below, "{prefix}");
            assert!(b.as_str() < format!("{prefix}\0").as_str());
        }
        assert_eq!(before_prefix(""), None);
        assert_eq!(before_prefix("\0"), None);
        assert_eq!(before_prefix("a\0").unwrap(), "a");
        assert!(before_prefix("\u{E000}").unwrap().as_str() < "\u{E000}");
    }

    #[test]
    fn tags_split_at_the_first_colon() {
        assert_eq!(parse_tag("site:a:b").unwrap(), ("site".into(), "a:b".into()));
        assert_eq!(parse_tag("site:").unwrap(), ("site".into(), "".into()));
        assert!(parse_tag("site").is_err());
        assert!(parse_tag(":a").is_err());
    }
}
