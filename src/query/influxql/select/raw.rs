//! Raw selects: the readings themselves, their fields, tags and arithmetic on them.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::{
    ColExpr, Measurement, Statement, arith, cast, dedupe, is_tag, readings_of, refs_field,
    too_many_points,
};
use crate::model::Reading;
use crate::query::influxql::agg::field_json;
use crate::query::influxql::ast::RefKind;
use crate::query::influxql::exec::{Ctx, ExecError, Series};
use crate::store::SensorInfo;

/// A group's readings, each with its series.
type Rows = Vec<(Reading, Arc<SensorInfo>)>;

pub(super) async fn run(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    measurements: &[Measurement],
) -> Result<Vec<Series>, ExecError> {
    let mut points = 0usize;
    let mut fields_seen: BTreeSet<String> = BTreeSet::new();
    let mut scanned: Vec<Vec<Rows>> = Vec::new();
    for m in measurements {
        let mut groups = Vec::new();
        for (_, members) in &m.groups {
            let mut rows = Vec::new();
            for info in members {
                readings_of(ctx, st, m, info, |r| {
                    points += 1;
                    if points > super::MAX_POINTS {
                        return Err(too_many_points());
                    }
                    for (k, _) in &r.fields {
                        if !fields_seen.contains(k.as_str()) {
                            fields_seen.insert(k.to_string());
                        }
                    }
                    rows.push((r.clone(), info.clone()));
                    Ok(())
                })
                .await?;
            }
            // Series in key order, then a stable sort: ties keep the series order.
            rows.sort_by_key(|(r, _)| r.ts);
            groups.push(rows);
        }
        scanned.push(groups);
    }

    // `*` is every field seen and every tag not grouped by, in every measurement, sorted
    // together.
    let tags: BTreeSet<&String> = measurements
        .iter()
        .flat_map(|m| m.tag_keys.iter().filter(|k| !m.group_keys.contains(k)))
        .collect();
    let mut columns: Vec<(String, ColExpr)> = Vec::new();
    for c in &st.plan.columns {
        if c.wildcard {
            let mut names: Vec<(String, RefKind)> =
                fields_seen.iter().map(|f| (f.clone(), RefKind::Field)).collect();
            names.extend(tags.iter().map(|k| ((*k).clone(), RefKind::Tag)));
            names.sort_by(|a, b| a.0.cmp(&b.0));
            for (n, kind) in names {
                columns.push((n.clone(), ColExpr::Ref { name: n, kind: Some(kind) }));
            }
        } else {
            columns.push((c.name.clone(), c.expr.clone()));
        }
    }
    let mut names: Vec<String> = columns.iter().map(|(n, _)| n.clone()).collect();
    dedupe(&mut names);
    let header: Vec<String> = std::iter::once("time".to_owned()).chain(names).collect();

    let mut out = Vec::new();
    for (m, groups) in measurements.iter().zip(scanned) {
        let is_field: Vec<bool> = columns.iter().map(|(_, e)| refs_field(e, &m.tag_keys)).collect();
        for ((group, _), rows) in m.groups.iter().zip(groups) {
            let mut values = Vec::new();
            for (r, info) in rows {
                let mut row = vec![Value::from(r.ts)];
                let mut any_field = false;
                for ((_, e), field) in columns.iter().zip(&is_field) {
                    let v = value(e, &r, &info, &m.tag_keys);
                    any_field |= *field && !v.is_null();
                    row.push(v);
                }
                // A reading without any selected field is not a row, as in InfluxDB.
                if any_field {
                    values.push(row);
                }
            }
            if !values.is_empty() {
                out.push(m.series(group, header.clone(), values));
            }
        }
    }
    Ok(out)
}

/// A raw column's value for one reading of one series.
pub(super) fn value(
    e: &ColExpr,
    r: &Reading,
    info: &SensorInfo,
    tag_keys: &BTreeSet<String>,
) -> Value {
    match e {
        ColExpr::Ref { name, kind } => {
            if is_tag(name, *kind, tag_keys) {
                return info
                    .tags
                    .iter()
                    .find(|(k, _)| k == name)
                    .map_or(Value::Null, |(_, v)| Value::String(v.clone()));
            }
            let v = r.fields.iter().find(|(k, _)| k.as_str() == name).map(|(_, v)| v);
            match (v, kind) {
                (None, _) => Value::Null,
                (Some(v), None | Some(RefKind::Field)) => field_json(v),
                (Some(v), Some(k)) => cast(v, *k),
            }
        }
        ColExpr::Lit(v) => v.clone(),
        ColExpr::Binary(op, l, rr) => {
            arith(*op, &value(l, r, info, tag_keys), &value(rr, r, info, tag_keys))
        }
        ColExpr::Call(_) => Value::Null,
    }
}
