//! `GET /api/v1/rollups`: per-step statistics of a sensor's numeric fields.
//!
//! The store decides how to compute them (whole-hour steps over hour-aligned ranges come from
//! bucket statistics, anything else from the readings); readings not yet flushed are merged in
//! here. Row and field sets are bounded by the step limit and the fields per reading, so the
//! response is built whole rather than streamed.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{RawQuery, State};
use serde::Serialize;

use super::encode::format_ts;
use super::error::QueryError;
use super::kept::Kept;
use super::params::{Params, parse_step, parse_time, resolve_range};
use super::points;
use super::state::{QueryState, now_ms, sensor_known};
use crate::model::{Reading, TimestampMs};
use crate::store::{FieldStats, Need, RollupQuery, RollupSteps, StoreError};

#[derive(Serialize, utoipa::ToSchema)]
pub struct RollupsResponse {
    pub sensor: String,
    pub step_ms: i64,
    /// Steps with at least one numeric value, ascending; empty steps are omitted.
    pub rows: Vec<RollupRowJson>,
    /// Present when `--retention` deleted the readings of the range's start and its steps
    /// needed them: where the readings these rows were computed from begin (RFC 3339 UTC).
    /// Whole-hour steps are answered from the kept hour statistics and never set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub kept_from: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct RollupRowJson {
    /// Start of the step (a multiple of the step since the epoch), RFC 3339 UTC.
    pub t: String,
    pub fields: BTreeMap<String, StatsJson>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct StatsJson {
    pub count: u64,
    pub min: f64,
    pub max: f64,
    /// `null` only if the sum overflows f64 (values near ±1.8e308).
    pub sum: Option<f64>,
    /// `null` when `sum` is.
    pub mean: Option<f64>,
    /// The value with the earliest time in the step (of values at that same time, the
    /// smallest). Absent only when the step includes whole hours stored by a bucketd older than
    /// schema 3, which did not record it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub first: Option<PointJson>,
    /// The value with the latest time in the step (of values at that same time, the largest).
    /// Absent when `first` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub last: Option<PointJson>,
}

/// One value of a field with its time.
#[derive(Serialize, utoipa::ToSchema)]
pub struct PointJson {
    /// RFC 3339 UTC, milliseconds.
    pub t: String,
    pub value: f64,
}

impl From<&FieldStats> for StatsJson {
    fn from(s: &FieldStats) -> Self {
        // JSON has no infinity; serde_json would write `null` for it anyway, and an `Option`
        // makes the schema say so.
        let finite = |v: f64| v.is_finite().then_some(v);
        StatsJson {
            count: s.count,
            min: s.min,
            max: s.max,
            sum: finite(s.sum),
            mean: finite(s.mean()),
            first: s.first.map(|(t, value)| PointJson { t: format_ts(t), value }),
            last: s.last.map(|(t, value)| PointJson { t: format_ts(t), value }),
        }
    }
}

#[utoipa::path(
    get,
    path = "/api/v1/rollups",
    tag = "query",
    params(
        ("db" = Option<String>, Query, example = "bucketd", description = "The database; `bucketd` when absent. One that does not exist gets 404."),
        ("sensor" = String, Query, example = "temp,site=a", description = "Sensor key."),
        ("from" = Option<String>, Query, description = "Start, inclusive: RFC 3339 or epoch milliseconds. Default: `to` minus one hour."),
        ("to" = Option<String>, Query, description = "End, exclusive: RFC 3339 or epoch milliseconds. Default: now."),
        ("step" = Option<String>, Query, example = "5m", description = "Step length: a number and a unit ms, s, m, h or d, a sum such as `1h30m`, or a bare number of milliseconds (Grafana's `${__interval_ms}`). Default `1h`, minimum `1s`; the range may span at most 10000 steps. Steps are aligned to multiples of the step since the epoch (UTC), so the first row may start before `from` (it only counts readings from `from` on)."),
        ("fields" = Option<String>, Query, example = "value", description = "Comma-separated field names; default every numeric field."),
    ),
    responses(
        (status = 200, description = "Statistics per step and numeric field.", body = RollupsResponse),
        (status = 400, description = "Bad parameter.", body = crate::http::ErrorBody),
        (status = 404, description = "No data of this sensor at all, or no such database.", body = crate::http::ErrorBody),
        (status = 503, description = "Store unavailable; retry.", body = crate::http::ErrorBody),
    )
)]
pub async fn get_rollups(
    State(state): State<QueryState>,
    RawQuery(raw): RawQuery,
) -> Result<Json<RollupsResponse>, QueryError> {
    let p = Params::parse(raw.as_deref())?;
    let state = state.open(p.get("db")?)?;
    let sensor = p.required("sensor")?.to_owned();
    let from = p.get("from")?.map(|s| parse_time("from", s)).transpose()?;
    let to = p.get("to")?.map(|s| parse_time("to", s)).transpose()?;
    let step_ms = parse_step(p.get("step")?.unwrap_or("1h"))?;
    let fields: Option<Vec<String>> = p
        .get("fields")?
        .map(|s| s.split(',').map(str::trim).filter(|f| !f.is_empty()).map(str::to_owned).collect())
        .filter(|f: &Vec<String>| !f.is_empty());
    let (from, to) = resolve_range(from, to, now_ms(), state.limits.default_range_ms)?;

    let first_step = from.div_euclid(step_ms) * step_ms;
    let steps = if to > from {
        (i128::from(to) - i128::from(first_step) + i128::from(step_ms) - 1) / i128::from(step_ms)
    } else {
        0
    };
    if steps > i128::from(state.limits.max_rollup_steps) {
        return Err(QueryError::TooManySteps {
            steps: steps as u128,
            max: state.limits.max_rollup_steps,
        });
    }

    let kept = Kept::default();
    let query = RollupQuery { sensor: sensor.clone(), from, to, step_ms, fields };
    let merged = merged_rollups(&state, &kept, query, Need::ALL).await?;
    if merged.is_empty() && !sensor_known(&state, &sensor).await? {
        return Err(QueryError::UnknownSensor(sensor));
    }
    Ok(Json(RollupsResponse {
        sensor,
        step_ms,
        kept_from: kept.from().map(format_ts),
        rows: merged
            .into_rows()
            .into_iter()
            .map(|row| RollupRowJson {
                t: format_ts(row.start),
                fields: row.fields.iter().map(|(k, s)| (k.clone(), s.into())).collect(),
            })
            .collect(),
    }))
}

/// The store's rollup steps, field by field, with the unflushed readings of `[from, to)`
/// merged in; `fields` of `None` is every numeric field. Steps that need readings `--retention`
/// deleted are answered from the kept ones, noted in `kept`. Shared with InfluxQL's time
/// groupings.
pub async fn merged_rollups(
    state: &QueryState,
    kept: &Kept,
    query: RollupQuery,
    need: Need,
) -> Result<RollupSteps, StoreError> {
    // Buffers before the store, as for readings: missing is then impossible, and a reading
    // read from both is one point (`points`).
    let unflushed = state.unflushed.unflushed(&query.sensor, query.from, query.to);
    let (sensor, range) = (query.sensor.clone(), (query.from, query.to));
    let (step_ms, fields) = (query.step_ms, query.fields.clone());
    let mut merged = kept.rollups(&*state.store, query, need).await?;
    let mut steps = StatsSteps { steps: &mut merged, step_ms, fields: fields.as_deref() };
    points::add_unflushed(&state.store, &sensor, unflushed, range, step_ms, &mut steps).await?;
    Ok(merged)
}

/// Rollup steps that unflushed readings are added to.
struct StatsSteps<'a> {
    steps: &'a mut RollupSteps,
    step_ms: i64,
    fields: Option<&'a [String]>,
}

impl points::Steps for StatsSteps<'_> {
    fn clear_step(&mut self, start: TimestampMs) {
        self.steps.clear_step(start);
    }

    fn add(&mut self, readings: &[Reading]) {
        merge_unflushed(self.steps, readings, self.step_ms, self.fields);
    }

    /// From the steps' `last` times: no store call where every step read has one.
    fn stored_latest(&self) -> Option<Option<TimestampMs>> {
        let mut latest = None;
        for (_, steps) in &self.steps.fields {
            for (_, stats) in steps.iter().filter(|(_, stats)| stats.count > 0) {
                let (ts, _) = stats.last?;
                latest = latest.max(Some(ts));
            }
        }
        Some(latest)
    }
}

/// Merges the `unflushed` readings' values of `fields` (all numeric ones when `None`) into
/// `merged`, step by step of `step_ms`.
pub fn merge_unflushed(
    merged: &mut RollupSteps,
    unflushed: &[Reading],
    step_ms: i64,
    fields: Option<&[String]>,
) {
    each_step_value(unflushed, step_ms, fields, |name, start, ts, v| {
        merged.merge(name, start, &FieldStats::of(ts, v));
    });
}

/// Hands `each` every numeric value of `fields` (all numeric ones when `None`) of `readings`,
/// with the start of its step of `step_ms` and its time.
pub fn each_step_value(
    readings: &[Reading],
    step_ms: i64,
    fields: Option<&[String]>,
    mut each: impl FnMut(&str, TimestampMs, TimestampMs, f64),
) {
    for reading in readings {
        let start = reading.ts.div_euclid(step_ms) * step_ms;
        for (name, value) in &reading.fields {
            if let Some(v) = value.as_f64()
                && fields.is_none_or(|f| f.iter().any(|w| name == w))
            {
                each(name, start, reading.ts, v);
            }
        }
    }
}
