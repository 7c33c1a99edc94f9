//! A group's rows: one per window, each column a call's cell or arithmetic between cells (and,
//! beside a lone selector, the fields and tags of the reading it picked).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use super::fill::Cell;
use super::plan::{ColExpr, Plan, Statement, arith};
use super::windows::Windows;
use crate::model::{Reading, TimestampMs};
use crate::query::influxql::syntax::ast::Fill;
use crate::store::SensorInfo;

/// A group's cells per (call, field), over its windows. A statement has few of them, so they
/// are found by a scan that makes nothing.
pub(super) type Columns = Vec<((usize, String), Vec<Cell>)>;

pub(super) fn column_of<'c>(cells: &'c Columns, call: usize, field: &str) -> Option<&'c Vec<Cell>> {
    cells.iter().find(|((i, f), _)| *i == call && f == field).map(|(_, c)| c)
}

/// An output column: a wildcard call becomes one per field it saw.
pub(super) struct OutCol {
    pub(super) name: String,
    pub(super) expr: ColExpr,
    pub(super) field: Option<String>,
}

/// The reading a lone selector picked in each window, with its series.
pub(super) type Picked = BTreeMap<TimestampMs, (Reading, Arc<SensorInfo>)>;

/// The rows of a group's windows `starts`, each `cells` index one of them: a row is the
/// window's start (the picked reading's time under a `lone_selector`) and the columns `cols`.
/// A window with no cell is left out where nothing fills it.
pub(super) fn rows(
    st: &Statement<'_>,
    cols: &[OutCol],
    cells: &Columns,
    starts: &[TimestampMs],
    lone_selector: bool,
    picked: &Picked,
    tag_keys: &BTreeSet<String>,
) -> Vec<Vec<Value>> {
    let plan = st.plan;
    // The cells of each column that is a call alone (most dashboards' columns), found once a
    // group rather than once a row.
    let alone: Vec<Option<&Vec<Cell>>> = cols
        .iter()
        .map(|c| match c.expr {
            ColExpr::Call(i) => {
                field_of(plan, i, c.field.as_deref()).and_then(|name| column_of(cells, i, name))
            }
            _ => None,
        })
        .collect();
    let skip_empty = st.window.is_none() || st.fill == Fill::None;
    let mut values = Vec::with_capacity(starts.len());
    for (k, start) in starts.iter().enumerate() {
        if skip_empty && cells.iter().all(|(_, c)| c[k].is_none()) {
            continue;
        }
        let mut time = *start;
        if lone_selector && let Some(Some((_, Some(t)))) = cells.first().map(|(_, c)| &c[k]) {
            time = *t;
        }
        let aux = picked.get(start);
        let mut row = Vec::with_capacity(cols.len() + 1);
        row.push(Value::from(time));
        for (c, alone) in cols.iter().zip(&alone) {
            row.push(match alone {
                Some(cells) => cell_value(&cells[k]),
                None => eval(&c.expr, c.field.as_deref(), plan, cells, k, aux, tag_keys),
            });
        }
        values.push(row);
    }
    values
}

/// The field call `i` reads: its own, or the column's under a wildcard.
fn field_of<'a>(plan: &'a Plan, i: usize, column_field: Option<&'a str>) -> Option<&'a str> {
    plan.calls[i].field.as_deref().or(column_field)
}

/// A cell's value, null where the window has none. Not `map_or(Value::Null, …)`: its null,
/// made before it is known to be needed, was dropped by a call for every value.
fn cell_value(cell: &Cell) -> Value {
    match cell {
        Some((v, _)) => v.clone(),
        None => Value::Null,
    }
}

pub(super) fn calls_of(e: &ColExpr) -> Vec<usize> {
    match e {
        ColExpr::Call(i) => vec![*i],
        ColExpr::Binary(_, l, r) => {
            let mut v = calls_of(l);
            v.extend(calls_of(r));
            v
        }
        _ => Vec::new(),
    }
}

fn eval(
    e: &ColExpr,
    field: Option<&str>,
    plan: &Plan,
    cells: &Columns,
    k: usize,
    aux: Option<&(Reading, Arc<SensorInfo>)>,
    tag_keys: &BTreeSet<String>,
) -> Value {
    match e {
        ColExpr::Call(i) => {
            let Some(name) = field_of(plan, *i, field) else { return Value::Null };
            match column_of(cells, *i, name) {
                Some(c) => cell_value(&c[k]),
                None => Value::Null,
            }
        }
        ColExpr::Lit(v) => v.clone(),
        ColExpr::Binary(op, l, r) => arith(
            *op,
            &eval(l, field, plan, cells, k, aux, tag_keys),
            &eval(r, field, plan, cells, k, aux, tag_keys),
        ),
        ColExpr::Ref { .. } => {
            aux.map_or(Value::Null, |(r, info)| super::raw::value(e, r, info, tag_keys))
        }
    }
}

/// `distinct(x)`: one row per distinct value per window, in the order they first appeared.
pub(super) fn distinct_rows(
    plan: &Plan,
    cols: &[OutCol],
    accs: &[BTreeMap<String, Windows>],
    starts: &[TimestampMs],
) -> Vec<Vec<Value>> {
    let ColExpr::Call(i) = cols[0].expr else { return Vec::new() };
    let Some(field) = field_of(plan, i, cols[0].field.as_deref()) else {
        return Vec::new();
    };
    let mut rows = Vec::new();
    for start in starts {
        if let Some(acc) = accs[i].get(field).and_then(|w| w.get(*start)) {
            for v in acc.distinct_values() {
                rows.push(vec![Value::from(*start), v]);
            }
        }
    }
    rows
}
