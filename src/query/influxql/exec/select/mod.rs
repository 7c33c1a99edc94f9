//! `SELECT`: raw readings, or aggregates per time window and tag group.
//!
//! `GROUP BY time` windows of `mean`, `count`, `sum`, `min`, `max`, `spread`, `first` and
//! `last` over numeric fields, with at most tag conditions, are the stores' rollups
//! ([`Store::rollups`](crate::store::Store::rollups)): whole hours from the hour statistics
//! without reading the readings, finer windows computed by the store (MongoDB: `$unwind` +
//! `$group` in the database). Everything else streams the readings of each series once and
//! folds them into accumulators, so memory grows with windows and groups, not readings (raw
//! selects, `median`, `percentile`, `mode` and `distinct` keep their values, bounded by
//! [`QueryLimits::max_held`](crate::query::state::QueryLimits::max_held)).
//!
//! Every measurement is scanned before any is answered: a wildcard's columns are the union
//! over all of them, as in InfluxDB.

mod aggregate;
mod fill;
mod plan;
mod raw;
mod rows;
mod transform;
mod windows;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use self::plan::{
    Kind, MAX_ROWS, Measurement, NS_PER_MS, Statement, WILDCARD_PROBED_SERIES, Window, group_keys,
    tag_value, to_ms, too_many_rows, zone,
};
use self::transform::Transform;
use super::cond::{self, Condition};
use super::context::{Ctx, Epoch, Series};
use super::error::ExecError;
use crate::query::influxql::syntax::ast::Select;
use crate::store::SensorInfo;

pub async fn select(ctx: &Ctx<'_>, s: &Select) -> Result<Vec<Series>, ExecError> {
    if s.into.is_some() {
        return Err(ExecError::new(
            "SELECT INTO writes data: bucketd's /query is read-only (write with /write)",
        ));
    }
    let zone = zone(s.tz.as_deref())?;
    let plan = plan::plan(s)?;
    let (mut range, rest) = cond::split_time(s.condition.as_ref(), ctx.now_ns)?;
    let condition = rest.map(Condition::new).transpose()?;
    let window = match s.group_by.time {
        None => None,
        Some(_) if plan.kind == Kind::Raw => {
            return Err(ExecError::new("GROUP BY requires at least one aggregate function"));
        }
        Some(t) => {
            let interval = to_ms(t.interval_ns, "GROUP BY time interval")?;
            if interval <= 0 {
                return Err(ExecError::new("GROUP BY time interval must be positive"));
            }
            if !range.has_lower {
                return Err(ExecError::new(
                    "aggregate functions with GROUP BY time require a WHERE time clause with a \
                     lower bound",
                ));
            }
            if !range.has_upper {
                range.to = range.to.min(ctx.now_ns.div_euclid(NS_PER_MS) + 1);
            }
            let offset = to_ms(t.offset_ns, "GROUP BY time offset")?.rem_euclid(interval);
            Some(Window { interval, offset, zone })
        }
    };
    if range.is_empty() {
        return Ok(Vec::new());
    }
    // A transformation of windows that compares a window with those before it starts one
    // window early (late, in descending order), as InfluxDB's does, so that the first window of
    // the range has a row; only the rows of the range asked are answered.
    let asked = range;
    if let (Some(t), Some(w)) = (plan.transform, window)
        && t.reaches_back()
    {
        if s.descending {
            range.to = range.to.saturating_add(w.interval);
        } else {
            range.from = range.from.saturating_sub(w.interval);
        }
    }
    let transform = plan.transform.map(|t| match (t, window) {
        // Per window, unless a unit is named.
        (Transform::Derivative { unit_ms: None, non_negative }, Some(w)) => {
            Transform::Derivative { unit_ms: Some(w.interval), non_negative }
        }
        _ => t,
    });

    // `SELECT *` lists the fields of series it leaves out too. bucketd keeps no field schema:
    // each is probed, so only the first few are kept for it.
    let probe_left_out = plan.kind == Kind::Raw && plan.columns.iter().any(|c| c.wildcard);
    let keep_left_out = |left_out: &mut Vec<Arc<SensorInfo>>, info: &Arc<SensorInfo>| {
        if probe_left_out && left_out.len() < WILDCARD_PROBED_SERIES {
            left_out.push(info.clone());
        }
    };
    let mut measurements = Vec::new();
    let mut left_outs = Vec::new();
    for (name, all) in ctx.series_of(&s.from).await? {
        // Cloned once each, not once a series.
        let mut tag_keys: BTreeSet<String> = BTreeSet::new();
        for (k, _) in all.iter().flat_map(|s| &s.tags) {
            if !tag_keys.contains(k) {
                tag_keys.insert(k.clone());
            }
        }
        let group_keys = group_keys(&s.group_by.tags, &tag_keys)?;
        let mut groups: BTreeMap<Vec<String>, Vec<Arc<SensorInfo>>> = BTreeMap::new();
        let mut left_out = Vec::new();
        for info in all {
            if condition.as_ref().is_some_and(|c| !c.series_may_match(&info.tags, &tag_keys)) {
                keep_left_out(&mut left_out, &info);
                continue;
            }
            let key = group_keys.iter().map(|k| tag_value(&info, k).to_owned()).collect();
            groups.entry(key).or_default().push(info);
        }
        measurements.push(Measurement {
            name,
            tag_keys,
            group_keys,
            groups: groups.into_iter().collect(),
            other_fields: BTreeSet::new(),
        });
        left_outs.push(left_out);
    }
    // LIMIT 0 and SLIMIT 0 mean no limit, as in InfluxDB.
    let limit = |l: Option<u64>| l.filter(|l| *l > 0).map_or(usize::MAX, |l| l as usize);
    // SLIMIT and SOFFSET pick series in ascending order, whatever the order of the answer,
    // and count series without data in range, as InfluxDB's do.
    let first = s.soffset.unwrap_or(0) as usize;
    let series = first..first.saturating_add(limit(s.slimit));
    let mut at = 0;
    for (m, left_out) in measurements.iter_mut().zip(&mut left_outs) {
        m.groups.retain(|(_, members)| {
            at += 1;
            let keep = series.contains(&(at - 1));
            if !keep {
                for info in members {
                    keep_left_out(left_out, info);
                }
            }
            keep
        });
    }
    for (m, left_out) in measurements.iter_mut().zip(&left_outs) {
        for info in left_out {
            m.other_fields.extend(super::show::probe_fields(ctx, info).await?.into_keys());
        }
    }
    let statement = Statement {
        plan: &plan,
        condition: condition.as_ref(),
        range,
        window,
        fill: s.fill,
        descending: s.descending,
    };
    let found = match plan.kind {
        Kind::Raw => raw::run(ctx, &statement, &measurements).await?,
        Kind::Aggregate | Kind::Distinct => aggregate::run(ctx, &statement, &measurements).await?,
    };

    let first_window = window.map(|w| w.start(asked.from));
    let found = found.into_iter().filter_map(|mut series| {
        // Transformations run in the order rows are answered, as InfluxDB runs them.
        if s.descending {
            series.values.reverse();
        }
        if let Some(t) = transform {
            series.values = transform::apply(t, std::mem::take(&mut series.values));
            if let Some(first) = first_window {
                series.values.retain(|row| {
                    row.first().and_then(Value::as_i64).is_some_and(|t| t >= first && t < asked.to)
                });
            }
        }
        // Times are kept in milliseconds until here, where `epoch` decides how they are
        // written (as they are, in milliseconds).
        if ctx.epoch != Epoch::Ms {
            for row in &mut series.values {
                if let Some(ms) = row.first().and_then(Value::as_i64) {
                    row[0] = ctx.time_in(ms, zone);
                }
            }
        }
        (!series.values.is_empty()).then_some(series)
    });

    let mut out = Vec::new();
    let mut rows = 0usize;
    for mut series in found {
        let skip = s.offset.unwrap_or(0) as usize;
        let take = limit(s.limit);
        if skip > 0 || take < series.values.len() {
            series.values = series.values.into_iter().skip(skip).take(take).collect();
        }
        rows += series.values.len();
        if rows > MAX_ROWS {
            return Err(too_many_rows());
        }
        if !series.values.is_empty() {
            out.push(series);
        }
    }
    if s.descending {
        out.reverse();
    }
    Ok(out)
}
