//! Raw selects: the readings themselves, their fields, tags and arithmetic on them.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::plan::{
    ColExpr, Measurement, Statement, arith, cast, dedupe, is_tag, readings_of, refs_field,
    too_many_points,
};
use crate::model::Reading;
use crate::query::influxql::exec::agg::field_json;
use crate::query::influxql::exec::context::{Ctx, Series};
use crate::query::influxql::exec::error::ExecError;
use crate::query::influxql::exec::go_order::sorted_merge;
use crate::query::influxql::syntax::ast::RefKind;
use crate::store::{Order, SensorInfo};

/// A group's readings, each with its series.
type Rows = Vec<(Reading, Arc<SensorInfo>)>;

pub(super) async fn run(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    measurements: &[Measurement],
) -> Result<Vec<Series>, ExecError> {
    let mut points = 0usize;
    let mut fields_seen: BTreeSet<String> = BTreeSet::new();
    // Per measurement, per group, per series (in key order): its readings.
    let mut scanned: Vec<Vec<Vec<Rows>>> = Vec::new();
    for m in measurements {
        let mut groups = Vec::new();
        for (_, members) in &m.groups {
            let mut series = Vec::new();
            for info in members {
                let mut rows = Vec::new();
                let stream = ctx.readings(&info.key, st.range.from, st.range.to, Order::Asc);
                readings_of(ctx, st, m, info, stream, |r| {
                    points += 1;
                    if points > ctx.state.limits.max_held {
                        return Err(too_many_points(ctx.state.limits.max_held));
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
                series.push(rows);
            }
            groups.push(series);
        }
        scanned.push(groups);
    }

    // `*` is every field seen (or that series left out have) and every tag not grouped by, in
    // every measurement, sorted together.
    for m in measurements {
        fields_seen.extend(m.other_fields.iter().cloned());
    }
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

    let aux = aux_refs(&columns);
    let width = columns.len() + 1;
    let mut out = Vec::new();
    for (m, groups) in measurements.iter().zip(scanned) {
        let is_field: Vec<bool> = columns.iter().map(|(_, e)| refs_field(e, &m.tag_keys)).collect();
        for ((group, _), series) in m.groups.iter().zip(groups) {
            // A reading without any selected field is not a row, as in InfluxDB. Each row
            // carries its merge key after its columns, cut off once the merge is done.
            let rows: Vec<Vec<Vec<Value>>> = series
                .into_iter()
                .map(|rows| {
                    rows.into_iter()
                        .filter_map(|(r, info)| {
                            let mut row = vec![Value::from(r.ts)];
                            let mut any_field = false;
                            for ((_, e), field) in columns.iter().zip(&is_field) {
                                let v = value(e, &r, &info, &m.tag_keys);
                                any_field |= *field && !v.is_null();
                                row.push(v);
                            }
                            for e in &aux {
                                match value(e, &r, &info, &m.tag_keys) {
                                    s @ Value::String(_) => row.push(s),
                                    _ => break,
                                }
                            }
                            any_field.then_some(row)
                        })
                        .collect()
                })
                .collect();
            let values = influx_merge(rows, st.descending, width);
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

/// The fields and tags a raw select reads, by name, once each: the order InfluxDB compares
/// them in when rows share a time.
fn aux_refs(columns: &[(String, ColExpr)]) -> Vec<ColExpr> {
    fn walk<'a>(e: &'a ColExpr, out: &mut Vec<(&'a String, Option<RefKind>)>) {
        match e {
            ColExpr::Ref { name, kind } => out.push((name, *kind)),
            ColExpr::Binary(_, l, r) => {
                walk(l, out);
                walk(r, out);
            }
            ColExpr::Call(_) | ColExpr::Lit(_) => {}
        }
    }
    let mut out = Vec::new();
    for (_, e) in columns {
        walk(e, &mut out);
    }
    out.sort_by(|a, b| a.0.cmp(b.0));
    out.dedup_by(|a, b| a.0 == b.0);
    out.into_iter().map(|(name, kind)| ColExpr::Ref { name: name.clone(), kind }).collect()
}

/// Merges the rows of several series (each ascending, `[time, …]`, the series in key order)
/// into one ascending list, rows of equal times in the order InfluxDB's sorted merge gives
/// them. Each row is `width` columns followed by its merge key: the string values of the
/// fields and tags it reads ([`aux_refs`]), up to the first that is not a string. The merge is
/// [`sorted_merge`] by time, then by the keys compared as far as both go; for `ORDER BY time
/// DESC` (`descending`) its output is reversed. The keys are cut off.
fn influx_merge(series: Vec<Vec<Vec<Value>>>, descending: bool, width: usize) -> Vec<Vec<Value>> {
    let time = |row: &Vec<Value>| row.first().and_then(Value::as_i64).unwrap_or(0);
    let order = |a: &Vec<Value>, b: &Vec<Value>| {
        let keys = a.iter().skip(width).zip(b.iter().skip(width));
        keys.fold(time(a).cmp(&time(b)), |o, (x, y)| {
            o.then_with(|| x.as_str().unwrap_or("").cmp(y.as_str().unwrap_or("")))
        })
    };
    let mut out = sorted_merge(series, descending, order);
    if descending {
        out.reverse();
    }
    for row in &mut out {
        row.truncate(width);
    }
    out
}
