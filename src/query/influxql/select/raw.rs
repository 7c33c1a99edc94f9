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
    // Per measurement, per group, per series (in key order): its readings.
    let mut scanned: Vec<Vec<Vec<Rows>>> = Vec::new();
    for m in measurements {
        let mut groups = Vec::new();
        for (_, members) in &m.groups {
            let mut series = Vec::new();
            for info in members {
                let mut rows = Vec::new();
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
    let mut from_wildcard = Vec::new();
    for c in &st.plan.columns {
        from_wildcard.resize(columns.len(), false);
        if c.wildcard {
            let mut names: Vec<(String, RefKind)> =
                fields_seen.iter().map(|f| (f.clone(), RefKind::Field)).collect();
            names.extend(tags.iter().map(|k| ((*k).clone(), RefKind::Tag)));
            names.sort_by(|a, b| a.0.cmp(&b.0));
            for (n, kind) in names {
                columns.push((n.clone(), ColExpr::Ref { name: n, kind: Some(kind) }));
            }
            from_wildcard.resize(columns.len(), true);
        } else {
            columns.push((c.name.clone(), c.expr.clone()));
        }
    }
    from_wildcard.resize(columns.len(), false);
    let mut names: Vec<String> = columns.iter().map(|(n, _)| n.clone()).collect();
    dedupe(&mut names);
    let header: Vec<String> = std::iter::once("time".to_owned()).chain(names).collect();

    let mut out = Vec::new();
    for (m, groups) in measurements.iter().zip(scanned) {
        let is_field: Vec<bool> = columns.iter().map(|(_, e)| refs_field(e, &m.tag_keys)).collect();
        // Tags named among the columns (not through `*`), by their place in a row.
        let named_tags: Vec<usize> = columns
            .iter()
            .zip(&is_field)
            .enumerate()
            .filter(|(i, ((_, e), field))| {
                !**field && !from_wildcard[*i] && matches!(e, ColExpr::Ref { .. })
            })
            .map(|(i, _)| i + 1)
            .collect();
        for ((group, _), series) in m.groups.iter().zip(groups) {
            // A reading without any selected field is not a row, as in InfluxDB.
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
                            any_field.then_some(row)
                        })
                        .collect()
                })
                .collect();
            let values = influx_merge(rows, st.descending, &named_tags);
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

/// Merges the rows of several series (each ascending, `[time, …]`, the series in key order)
/// into one ascending list, rows of equal times in the order InfluxDB's sorted merge gives
/// them: a binary heap (Go's `container/heap`) of the series ordered by time, then by the tags
/// named among the columns (at `named_tags` in a row), taken from in key order; or for `ORDER
/// BY time DESC` (`descending`) ordered by both descending, taken from the last series, and
/// returned reversed.
fn influx_merge(
    mut series: Vec<Vec<Vec<Value>>>,
    descending: bool,
    named_tags: &[usize],
) -> Vec<Vec<Value>> {
    let time = |row: &Vec<Value>| row.first().and_then(Value::as_i64).unwrap_or(0);
    fn tag(row: &[Value], i: usize) -> &str {
        row.get(i).and_then(Value::as_str).unwrap_or("")
    }
    let order = |a: &Vec<Value>, b: &Vec<Value>| {
        named_tags
            .iter()
            .fold(time(a).cmp(&time(b)), |o, &i| o.then_with(|| tag(a, i).cmp(tag(b, i))))
    };
    if descending {
        series.reverse();
    }
    struct Item {
        head: Vec<Value>,
        rest: std::vec::IntoIter<Vec<Value>>,
    }
    let mut heap: Vec<Item> = series
        .into_iter()
        .filter_map(|mut rows| {
            if descending {
                rows.reverse();
            }
            let mut rest = rows.into_iter();
            Some(Item { head: rest.next()?, rest })
        })
        .collect();
    let less = |h: &[Item], i: usize, j: usize| {
        let o = order(&h[i].head, &h[j].head);
        if descending { o.is_gt() } else { o.is_lt() }
    };
    let down = |h: &mut Vec<Item>, i0: usize, n: usize| {
        let mut i = i0;
        loop {
            let j1 = 2 * i + 1;
            if j1 >= n {
                break;
            }
            let mut j = j1;
            if j1 + 1 < n && less(h, j1 + 1, j1) {
                j = j1 + 1;
            }
            if !less(h, j, i) {
                break;
            }
            h.swap(i, j);
            i = j;
        }
    };
    let up = |h: &mut Vec<Item>, mut j: usize| {
        while j > 0 {
            let i = (j - 1) / 2;
            if !less(h, j, i) {
                break;
            }
            h.swap(i, j);
            j = i;
        }
    };
    let n = heap.len();
    for i in (0..n / 2).rev() {
        down(&mut heap, i, n);
    }
    let mut out = Vec::new();
    while !heap.is_empty() {
        let last = heap.len() - 1;
        heap.swap(0, last);
        down(&mut heap, 0, last);
        let Some(mut item) = heap.pop() else { break };
        match item.rest.next() {
            Some(next) => {
                out.push(std::mem::replace(&mut item.head, next));
                heap.push(item);
                let at = heap.len() - 1;
                up(&mut heap, at);
            }
            None => out.push(item.head),
        }
    }
    if descending {
        out.reverse();
    }
    out
}
