//! `SELECT`: raw readings, or aggregates per time window and tag group.
//!
//! Whole-hour windows of `mean`, `count`, `sum`, `min`, `max` and `spread` over numeric fields,
//! with at most tag conditions, are answered from the stores' hour statistics
//! ([`Store::rollups`](crate::store::Store::rollups)) without reading the readings; everything
//! else streams the readings of each series once and folds them into accumulators, so memory
//! grows with windows and groups, not readings (raw selects, `median`, `percentile` and
//! `distinct` keep their values, bounded by [`MAX_POINTS`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures::StreamExt;
use serde_json::Value;

use super::agg::{Acc, Func, field_json, float};
use super::ast::{BinaryOp, Dimension, Expr, Fill, RefKind, Select};
use super::cond::{self, Condition, TimeRange, compile_regex};
use super::exec::{Ctx, ExecError, FieldKind, Series};
use crate::model::{FieldValue, HOUR_MS, Reading, TimestampMs};
use crate::store::{Order, SensorInfo};

/// Readings a raw select (or a value-keeping aggregate) may hold at once.
pub const MAX_POINTS: usize = 1_000_000;
/// Rows (windows × groups) one statement may produce.
pub const MAX_ROWS: usize = 1_000_000;

const NS_PER_MS: i64 = 1_000_000;

/// Where a projected column's value comes from.
#[derive(Clone, Debug)]
enum ColExpr {
    Call(usize),
    Ref { name: String, kind: Option<RefKind> },
    Lit(Value),
    Binary(BinaryOp, Box<ColExpr>, Box<ColExpr>),
}

#[derive(Clone, Debug)]
struct Call {
    func: Func,
    /// `None`: every field (`mean(*)`).
    field: Option<String>,
}

#[derive(Clone, Debug)]
struct Column {
    /// The alias, or InfluxDB's default name.
    name: String,
    aliased: bool,
    expr: ColExpr,
    wildcard: bool,
}

enum Kind {
    Raw,
    Aggregate,
    Distinct,
}

struct Plan {
    kind: Kind,
    columns: Vec<Column>,
    calls: Vec<Call>,
}

pub async fn select(ctx: &Ctx<'_>, s: &Select) -> Result<Vec<Series>, ExecError> {
    if s.into.is_some() {
        return Err(ExecError::new(
            "SELECT INTO writes data: bucketd's /query is read-only (write with /write)",
        ));
    }
    if let Some(tz) = &s.tz
        && !matches!(tz.as_str(), "UTC" | "Etc/UTC" | "utc")
    {
        return Err(ExecError::new(format!(
            "tz('{tz}') is not supported: bucketd groups and answers in UTC only"
        )));
    }
    let plan = plan(s)?;
    let (mut range, rest) = cond::split_time(s.condition.as_ref(), ctx.now_ns)?;
    let condition = rest.map(Condition::new).transpose()?;
    let window = match s.group_by.time {
        None => None,
        Some(_) if matches!(plan.kind, Kind::Raw) => {
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
            Some(Window { interval, offset: to_ms(t.offset_ns, "GROUP BY time offset")?.rem_euclid(interval) })
        }
    };
    if range.is_empty() {
        return Ok(Vec::new());
    }

    let mut out = Vec::new();
    let mut rows = 0usize;
    for (measurement, all) in ctx.series_of(&s.from).await? {
        let tag_keys: BTreeSet<String> =
            all.iter().flat_map(|s| s.tags.iter().map(|(k, _)| k.clone())).collect();
        let group_keys = group_keys(&s.group_by.tags, &tag_keys)?;
        let mut groups: BTreeMap<Vec<String>, Vec<&SensorInfo>> = BTreeMap::new();
        for info in &all {
            if condition.as_ref().is_some_and(|c| !c.series_may_match(&info.tags, &tag_keys)) {
                continue;
            }
            let key = group_keys.iter().map(|k| tag_value(info, k).to_owned()).collect();
            groups.entry(key).or_default().push(info);
        }
        let m = Measurement {
            name: &measurement,
            tag_keys: &tag_keys,
            group_keys: &group_keys,
            condition: condition.as_ref(),
            range,
        };
        let found = match plan.kind {
            Kind::Raw => raw(ctx, &plan, &m, &groups).await?,
            Kind::Aggregate | Kind::Distinct => {
                aggregate(ctx, &plan, &m, &groups, window, s.fill).await?
            }
        };
        for mut series in found {
            if s.descending {
                series.values.reverse();
            }
            let skip = s.offset.unwrap_or(0) as usize;
            let take = s.limit.map_or(usize::MAX, |l| l as usize);
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
    }
    let soffset = s.soffset.unwrap_or(0) as usize;
    let slimit = s.slimit.map_or(usize::MAX, |l| l as usize);
    Ok(out.into_iter().skip(soffset).take(slimit).collect())
}

fn too_many_rows() -> ExecError {
    ExecError::new(format!(
        "the statement would answer more than {MAX_ROWS} rows: narrow the time range, use a \
         longer GROUP BY time interval or add LIMIT"
    ))
}

#[derive(Clone, Copy, Debug)]
struct Window {
    interval: i64,
    offset: i64,
}

impl Window {
    fn start(&self, ts: TimestampMs) -> TimestampMs {
        (ts - self.offset).div_euclid(self.interval) * self.interval + self.offset
    }
}

struct Measurement<'a> {
    name: &'a str,
    tag_keys: &'a BTreeSet<String>,
    group_keys: &'a [String],
    condition: Option<&'a Condition>,
    range: TimeRange,
}

impl Measurement<'_> {
    fn series(&self, group: &[String], columns: Vec<String>, values: Vec<Vec<Value>>) -> Series {
        Series {
            name: Some(self.name.to_owned()),
            tags: (!self.group_keys.is_empty()).then(|| {
                self.group_keys.iter().cloned().zip(group.iter().cloned()).collect()
            }),
            columns,
            values,
        }
    }
}

fn to_ms(ns: i64, what: &str) -> Result<i64, ExecError> {
    if ns % NS_PER_MS != 0 {
        return Err(ExecError::new(format!(
            "{what} must be a whole number of milliseconds: bucketd keeps millisecond timestamps"
        )));
    }
    Ok(ns / NS_PER_MS)
}

fn tag_value<'a>(info: &'a SensorInfo, key: &str) -> &'a str {
    info.tags.iter().find(|(k, _)| k == key).map_or("", |(_, v)| v)
}

fn group_keys(dims: &[Dimension], tag_keys: &BTreeSet<String>) -> Result<Vec<String>, ExecError> {
    let mut keys = BTreeSet::new();
    for d in dims {
        match d {
            Dimension::Tag(k) => {
                keys.insert(k.clone());
            }
            Dimension::Wildcard => keys.extend(tag_keys.iter().cloned()),
            Dimension::Regex(p) => {
                let re = compile_regex(p)?;
                keys.extend(tag_keys.iter().filter(|k| re.is_match(k)).cloned());
            }
        }
    }
    Ok(keys.into_iter().collect())
}

fn plan(s: &Select) -> Result<Plan, ExecError> {
    let mut calls = Vec::new();
    let mut columns = Vec::new();
    for f in &s.fields {
        let mut wildcard = false;
        let expr = col_expr(&f.expr, &mut calls, &mut wildcard)?;
        let name = match &f.alias {
            Some(a) => a.clone(),
            None => default_name(&f.expr),
        };
        columns.push(Column { name, aliased: f.alias.is_some(), expr, wildcard });
    }
    let has_calls = !calls.is_empty();
    let has_refs = columns.iter().any(|c| mentions_ref(&c.expr));
    if has_calls && has_refs {
        return Err(ExecError::new("mixing aggregate and non-aggregate queries is not supported"));
    }
    let distinct = calls.iter().any(|c: &Call| c.func == Func::Distinct);
    if distinct && (calls.len() > 1 || columns.len() > 1 || !matches!(columns[0].expr, ColExpr::Call(_))) {
        return Err(ExecError::new(
            "distinct() cannot be combined with other functions or fields, nor used in arithmetic",
        ));
    }
    if !has_calls && !has_refs {
        return Err(ExecError::new("a SELECT needs at least one field or function"));
    }
    let kind = if distinct {
        Kind::Distinct
    } else if has_calls {
        Kind::Aggregate
    } else {
        Kind::Raw
    };
    Ok(Plan { kind, columns, calls })
}

fn mentions_ref(e: &ColExpr) -> bool {
    match e {
        ColExpr::Ref { .. } => true,
        ColExpr::Binary(_, l, r) => mentions_ref(l) || mentions_ref(r),
        _ => false,
    }
}

const FUNCTIONS: &str =
    "mean, median, count, sum, min, max, first, last, spread, stddev, percentile and distinct";

fn col_expr(
    e: &Expr,
    calls: &mut Vec<Call>,
    wildcard: &mut bool,
) -> Result<ColExpr, ExecError> {
    Ok(match e {
        Expr::Paren(i) => col_expr(i, calls, wildcard)?,
        Expr::Integer(i) => ColExpr::Lit(Value::from(*i)),
        Expr::Number(f) => ColExpr::Lit(float(*f)),
        Expr::String(s) => ColExpr::Lit(Value::String(s.clone())),
        Expr::Bool(b) => ColExpr::Lit(Value::Bool(*b)),
        Expr::Ref { name, kind } => {
            if name.eq_ignore_ascii_case("time") {
                return Err(ExecError::new("time is always the first column: select fields"));
            }
            ColExpr::Ref { name: name.clone(), kind: *kind }
        }
        Expr::Wildcard { .. } => {
            *wildcard = true;
            ColExpr::Ref { name: "*".into(), kind: None }
        }
        Expr::Binary { op, lhs, rhs }
            if matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Mod) =>
        {
            let l = col_expr(lhs, calls, wildcard)?;
            let r = col_expr(rhs, calls, wildcard)?;
            if *wildcard {
                return Err(ExecError::new("* cannot be used in arithmetic"));
            }
            ColExpr::Binary(*op, Box::new(l), Box::new(r))
        }
        Expr::Call { name, args } => {
            let call = call(name, args, wildcard)?;
            calls.push(call);
            ColExpr::Call(calls.len() - 1)
        }
        other => {
            return Err(ExecError::new(format!("unsupported expression in SELECT: {other:?}")));
        }
    })
}

fn call(name: &str, args: &[Expr], wildcard: &mut bool) -> Result<Call, ExecError> {
    let field_arg = |a: &Expr, wildcard: &mut bool| -> Result<Option<String>, ExecError> {
        match a {
            Expr::Ref { name, .. } => Ok(Some(name.clone())),
            Expr::Wildcard { .. } => {
                *wildcard = true;
                Ok(None)
            }
            Expr::Paren(i) => Ok(match &**i {
                Expr::Ref { name, .. } => Some(name.clone()),
                _ => return Err(ExecError::new(format!("expected a field argument in {name}()"))),
            }),
            _ => Err(ExecError::new(format!(
                "expected a field argument in {name}(): bucketd does not nest functions \
                 other than count(distinct(…))"
            ))),
        }
    };
    match (name, args) {
        ("percentile", [f, n]) => {
            let p = match n {
                Expr::Integer(i) => *i as f64,
                Expr::Number(f) => *f,
                _ => return Err(ExecError::new("expected a number as percentile's second argument")),
            };
            Ok(Call { func: Func::Percentile(p), field: field_arg(f, wildcard)? })
        }
        ("percentile", _) => Err(ExecError::new("percentile() takes a field and a number")),
        ("count", [Expr::Call { name: inner, args: inner_args }]) if inner == "distinct" => {
            match inner_args.as_slice() {
                [f] => Ok(Call { func: Func::CountDistinct, field: field_arg(f, wildcard)? }),
                _ => Err(ExecError::new("distinct() takes one field")),
            }
        }
        (_, [f]) => match Func::of(name) {
            Some(func) => Ok(Call { func, field: field_arg(f, wildcard)? }),
            None => Err(unsupported_function(name)),
        },
        _ if Func::of(name).is_some() => Err(ExecError::new(format!("{name}() takes one field"))),
        _ => Err(unsupported_function(name)),
    }
}

fn unsupported_function(name: &str) -> ExecError {
    ExecError::new(format!("unsupported function {name}(): bucketd answers {FUNCTIONS}"))
}

/// InfluxDB's column names: a field's name, a function's name, `a_b` for `a + b`.
fn default_name(e: &Expr) -> String {
    fn names(e: &Expr, out: &mut Vec<String>) {
        match e {
            Expr::Ref { name, .. } => out.push(name.clone()),
            Expr::Call { name, args } => {
                if name == "count" && matches!(args.first(), Some(Expr::Call { name, .. }) if name == "distinct") {
                    out.push("count".into());
                } else {
                    out.push(name.clone());
                }
            }
            Expr::Paren(i) => names(i, out),
            Expr::Binary { lhs, rhs, .. } => {
                names(lhs, out);
                names(rhs, out);
            }
            Expr::Wildcard { .. } => out.push("*".into()),
            _ => {}
        }
    }
    let mut out = Vec::new();
    names(e, &mut out);
    out.join("_")
}

/// Adds `_1`, `_2`, … to repeated names, as InfluxDB does.
fn dedupe(names: &mut [String]) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for n in names.iter_mut() {
        let count = seen.entry(n.clone()).or_insert(0);
        if *count > 0 {
            let renamed = format!("{n}_{count}");
            *count += 1;
            *n = renamed;
        } else {
            *count = 1;
        }
    }
}

async fn readings_of(
    ctx: &Ctx<'_>,
    info: &SensorInfo,
    range: TimeRange,
    mut each: impl FnMut(&Reading) -> Result<(), ExecError>,
) -> Result<(), ExecError> {
    let mut stream = ctx.readings(&info.key, range.from, range.to, Order::Asc);
    while let Some(r) = stream.next().await {
        each(&r?)?;
    }
    Ok(())
}

fn too_many_points() -> ExecError {
    ExecError::new(format!(
        "the statement would hold more than {MAX_POINTS} readings at once: narrow the time \
         range or aggregate with GROUP BY time"
    ))
}

/// A group's readings, each with its series.
type RawRows<'a> = Vec<(Reading, &'a SensorInfo)>;

async fn raw(
    ctx: &Ctx<'_>,
    plan: &Plan,
    m: &Measurement<'_>,
    groups: &BTreeMap<Vec<String>, Vec<&SensorInfo>>,
) -> Result<Vec<Series>, ExecError> {
    let mut points = 0usize;
    let mut collected: Vec<(&Vec<String>, RawRows)> = Vec::new();
    let mut fields_seen: BTreeSet<String> = BTreeSet::new();
    for (group, members) in groups {
        let mut rows = Vec::new();
        for info in members {
            readings_of(ctx, info, m.range, |r| {
                if m.condition.is_some_and(|c| !c.matches(&info.tags, m.tag_keys, r)) {
                    return Ok(());
                }
                points += 1;
                if points > MAX_POINTS {
                    return Err(too_many_points());
                }
                fields_seen.extend(r.fields.iter().map(|(k, _)| k.to_string()));
                rows.push((r.clone(), *info));
                Ok(())
            })
            .await?;
        }
        // Series in key order, then a stable sort: ties keep the series order.
        rows.sort_by_key(|(r, _)| r.ts);
        collected.push((group, rows));
    }
    // Expand `*` into the fields seen and the tags not grouped by, sorted together.
    let mut columns: Vec<(String, ColExpr, bool)> = Vec::new();
    for c in &plan.columns {
        if c.wildcard {
            let mut names: Vec<(String, bool)> = fields_seen.iter().map(|f| (f.clone(), true)).collect();
            names.extend(
                m.tag_keys.iter().filter(|k| !m.group_keys.contains(k)).map(|k| (k.clone(), false)),
            );
            names.sort();
            for (n, is_field) in names {
                let kind = if is_field { RefKind::Field } else { RefKind::Tag };
                columns.push((n.clone(), ColExpr::Ref { name: n, kind: Some(kind) }, is_field));
            }
        } else {
            let is_field = refs_field(&c.expr, m.tag_keys);
            columns.push((c.name.clone(), c.expr.clone(), is_field));
        }
    }
    let mut names: Vec<String> = columns.iter().map(|(n, _, _)| n.clone()).collect();
    dedupe(&mut names);
    let header: Vec<String> = std::iter::once("time".to_owned()).chain(names).collect();
    let mut out = Vec::new();
    for (group, rows) in collected {
        let mut values = Vec::new();
        for (r, info) in rows {
            let mut row = vec![ctx.time(r.ts)];
            let mut any_field = false;
            for (_, e, is_field) in &columns {
                let v = raw_value(e, &r, info, m.tag_keys);
                any_field |= *is_field && !v.is_null();
                row.push(v);
            }
            if any_field {
                values.push(row);
            }
        }
        if !values.is_empty() {
            out.push(m.series(group, header.clone(), values));
        }
    }
    Ok(out)
}

fn is_tag(name: &str, kind: Option<RefKind>, tag_keys: &BTreeSet<String>) -> bool {
    match kind {
        Some(RefKind::Tag) => true,
        Some(_) => false,
        None => tag_keys.contains(name),
    }
}

fn refs_field(e: &ColExpr, tag_keys: &BTreeSet<String>) -> bool {
    match e {
        ColExpr::Ref { name, kind } => !is_tag(name, *kind, tag_keys),
        ColExpr::Binary(_, l, r) => refs_field(l, tag_keys) || refs_field(r, tag_keys),
        _ => false,
    }
}

fn raw_value(e: &ColExpr, r: &Reading, info: &SensorInfo, tag_keys: &BTreeSet<String>) -> Value {
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
            arith(*op, &raw_value(l, r, info, tag_keys), &raw_value(rr, r, info, tag_keys))
        }
        ColExpr::Call(_) => Value::Null,
    }
}

/// `::float`, `::integer`, `::string`, `::boolean`: a value of another type is null.
fn cast(v: &FieldValue, kind: RefKind) -> Value {
    match (kind, v) {
        (RefKind::Float, FieldValue::Float(f)) => float(*f),
        (RefKind::Float, FieldValue::Int(i)) => float(*i as f64),
        (RefKind::Float, FieldValue::UInt(u)) => float(*u as f64),
        (RefKind::Integer, FieldValue::Int(i)) => Value::from(*i),
        (RefKind::Integer, FieldValue::UInt(u)) => Value::from(*u),
        (RefKind::Integer, FieldValue::Float(f)) => Value::from(*f as i64),
        (RefKind::String, FieldValue::Str(s)) => Value::String(s.clone()),
        (RefKind::Boolean, FieldValue::Bool(b)) => Value::Bool(*b),
        _ => Value::Null,
    }
}

/// Arithmetic on column values: integers stay integers except in division, and anything with
/// a null is null.
fn arith(op: BinaryOp, l: &Value, r: &Value) -> Value {
    if let (Some(a), Some(b)) = (l.as_i64().filter(|_| l.is_i64()), r.as_i64().filter(|_| r.is_i64())) {
        let v = match op {
            BinaryOp::Add => a.checked_add(b),
            BinaryOp::Sub => a.checked_sub(b),
            BinaryOp::Mul => a.checked_mul(b),
            BinaryOp::Mod => a.checked_rem(b),
            BinaryOp::Div => return float(if b == 0 { 0.0 } else { a as f64 / b as f64 }),
            _ => None,
        };
        return v.map_or(Value::Null, Value::from);
    }
    match (l.as_f64(), r.as_f64()) {
        (Some(a), Some(b)) => float(match op {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div if b == 0.0 => 0.0,
            BinaryOp::Div => a / b,
            BinaryOp::Mod => a % b,
            _ => return Value::Null,
        }),
        _ => Value::Null,
    }
}

/// A column's value in one window, with the time of the reading a selector picked; `None`
/// before fill when nothing was there.
type Cell = Option<(Value, Option<TimestampMs>)>;

/// Accumulators of one group: per call, per field, per window start.
type Accs = Vec<BTreeMap<String, BTreeMap<TimestampMs, Acc>>>;

async fn aggregate(
    ctx: &Ctx<'_>,
    plan: &Plan,
    m: &Measurement<'_>,
    groups: &BTreeMap<Vec<String>, Vec<&SensorInfo>>,
    window: Option<Window>,
    fill: Fill,
) -> Result<Vec<Series>, ExecError> {
    // Without GROUP BY time, one window starting at the lower bound (or the epoch, as InfluxDB).
    let single = if m.range.has_lower { m.range.from } else { 0 };
    let window_of = |ts: TimestampMs| window.map_or(single, |w| w.start(ts));
    let from_stats = window.is_some_and(|w| w.interval % HOUR_MS == 0 && w.offset == 0)
        && plan.calls.iter().all(|c| c.func.from_stats())
        && m.condition.is_none_or(|c| c.only_tags(m.tag_keys));

    let mut held = 0usize;
    let mut per_group: Vec<(&Vec<String>, Accs)> = Vec::new();
    let mut fields_seen: Vec<BTreeSet<String>> = vec![BTreeSet::new(); plan.calls.len()];
    for (group, members) in groups {
        let mut accs: Accs = vec![BTreeMap::new(); plan.calls.len()];
        for info in members {
            let kinds = if from_stats { ctx.field_kinds(info, m.range).await? } else { None };
            match (window, kinds) {
                (Some(w), Some(kinds)) if numeric_only(plan, &kinds) => {
                    let rows = ctx.rollups(&info.key, m.range, w.interval).await?;
                    for (start, fields) in rows {
                        for (i, call) in plan.calls.iter().enumerate() {
                            for (name, stats) in &fields {
                                if call.field.as_ref().is_some_and(|f| f != name) {
                                    continue;
                                }
                                let integer = kinds.get(name.as_str()) == Some(&FieldKind::Integer);
                                fields_seen[i].insert(name.clone());
                                accs[i]
                                    .entry(name.clone())
                                    .or_default()
                                    .entry(start)
                                    .or_insert_with(|| Acc::new(call.func))
                                    .push_stats(stats, integer, start);
                            }
                        }
                    }
                }
                _ => {
                    readings_of(ctx, info, m.range, |r| {
                        if m.condition.is_some_and(|c| !c.matches(&info.tags, m.tag_keys, r)) {
                            return Ok(());
                        }
                        let w = window_of(r.ts);
                        for (i, call) in plan.calls.iter().enumerate() {
                            for (name, v) in &r.fields {
                                if call.field.as_ref().is_some_and(|f| f.as_str() != name.as_str()) {
                                    continue;
                                }
                                if !fields_seen[i].contains(name.as_str()) {
                                    fields_seen[i].insert(name.to_string());
                                }
                                let acc = accs[i]
                                    .entry(name.to_string())
                                    .or_default()
                                    .entry(w)
                                    .or_insert_with(|| Acc::new(call.func));
                                if matches!(acc, Acc::Values(_) | Acc::Distinct(_)) {
                                    held += 1;
                                    if held > MAX_POINTS {
                                        return Err(too_many_points());
                                    }
                                }
                                acc.push(r.ts, v);
                            }
                        }
                        Ok(())
                    })
                    .await?;
                }
            }
        }
        per_group.push((group, accs));
    }

    // The output columns: a wildcard call becomes one column per field it saw.
    struct OutCol {
        name: String,
        expr: ColExpr,
        /// For wildcard calls: the field this column reads.
        field: Option<String>,
    }
    let mut cols = Vec::new();
    for c in &plan.columns {
        match (&c.expr, c.wildcard) {
            (ColExpr::Call(i), true) => {
                for f in &fields_seen[*i] {
                    let name = if c.aliased { format!("{}_{f}", c.name) } else { format!("{}_{f}", plan.calls[*i].func.name()) };
                    cols.push(OutCol { name, expr: c.expr.clone(), field: Some(f.clone()) });
                }
            }
            _ => cols.push(OutCol { name: c.name.clone(), expr: c.expr.clone(), field: None }),
        }
    }
    let mut names: Vec<String> = cols.iter().map(|c| c.name.clone()).collect();
    dedupe(&mut names);
    let header: Vec<String> = std::iter::once("time".to_owned()).chain(names).collect();
    let lone_selector =
        window.is_none() && plan.calls.len() == 1 && plan.calls[0].func.is_selector();

    let mut out = Vec::new();
    let mut total_rows = 0usize;
    for (group, mut accs) in per_group {
        let windows: BTreeSet<TimestampMs> =
            accs.iter().flat_map(|f| f.values().flat_map(|w| w.keys().copied())).collect();
        if windows.is_empty() {
            continue;
        }
        let starts: Vec<TimestampMs> = match (window, fill) {
            (Some(w), f) if f != Fill::None => {
                let first = w.start(m.range.from);
                let last = w.start(m.range.to - 1);
                let n = (last - first) / w.interval + 1;
                total_rows += usize::try_from(n).unwrap_or(usize::MAX);
                if total_rows > MAX_ROWS {
                    return Err(too_many_rows());
                }
                (0..n).map(|k| first + k * w.interval).collect()
            }
            _ => windows.iter().copied().collect(),
        };
        // Each column's call value per window, before fill.
        let mut table: Vec<Vec<Cell>> = Vec::new();
        for c in &cols {
            let call_values: Vec<Cell> = starts
                .iter()
                .map(|start| column_value(&c.expr, c.field.as_deref(), plan, &mut accs, *start))
                .collect();
            table.push(call_values);
        }
        if matches!(plan.kind, Kind::Distinct) {
            let mut values = Vec::new();
            let (i, field) = match &cols[0].expr {
                ColExpr::Call(i) => (*i, cols[0].field.clone().or_else(|| plan.calls[*i].field.clone())),
                _ => unreachable!("distinct is a lone call"),
            };
            for start in &starts {
                let Some(field) = &field else { continue };
                if let Some(acc) = accs[i].get(field).and_then(|w| w.get(start)) {
                    for v in acc.distinct_values() {
                        values.push(vec![ctx.time(*start), v]);
                    }
                }
            }
            if !values.is_empty() {
                out.push(m.series(group, header.clone(), values));
            }
            continue;
        }
        fill_columns(&mut table, &starts, fill, plan, &cols.iter().map(|c| c.expr.clone()).collect::<Vec<_>>());
        let mut values = Vec::new();
        for (k, start) in starts.iter().enumerate() {
            if fill == Fill::None && table.iter().all(|col| col[k].is_none()) {
                continue;
            }
            let mut time = *start;
            if lone_selector && let Some((_, Some(t))) = &table[0][k] {
                time = *t;
            }
            let mut row = vec![ctx.time(time)];
            row.extend(table.iter().map(|col| col[k].as_ref().map_or(Value::Null, |(v, _)| v.clone())));
            values.push(row);
        }
        if !values.is_empty() {
            out.push(m.series(group, header.clone(), values));
        }
    }
    Ok(out)
}

/// Whether every field the calls read is numeric in this series (bucket statistics cover
/// numbers only); a field the probe did not see is not known to be.
fn numeric_only(plan: &Plan, kinds: &HashMap<String, FieldKind>) -> bool {
    let numeric = |k: &FieldKind| matches!(k, FieldKind::Float | FieldKind::Integer);
    plan.calls.iter().all(|c| match &c.field {
        Some(f) => kinds.get(f.as_str()).is_some_and(numeric),
        None => kinds.values().all(numeric),
    })
}

/// One column's value in one window: its calls' values combined by its arithmetic. `None`
/// when a call had nothing in the window (so fill applies).
fn column_value(
    e: &ColExpr,
    field: Option<&str>,
    plan: &Plan,
    accs: &mut Accs,
    start: TimestampMs,
) -> Cell {
    match e {
        ColExpr::Call(i) => {
            let call = &plan.calls[*i];
            let name = call.field.as_deref().or(field)?;
            match accs[*i].get_mut(name).and_then(|w| w.get_mut(&start)) {
                Some(acc) => acc.finish(call.func),
                None => None,
            }
        }
        ColExpr::Lit(v) => Some((v.clone(), None)),
        ColExpr::Binary(op, l, r) => {
            let l = column_value(l, field, plan, accs, start);
            let r = column_value(r, field, plan, accs, start);
            match (l, r) {
                (Some((l, _)), Some((r, _))) => Some((arith(*op, &l, &r), None)),
                _ => None,
            }
        }
        ColExpr::Ref { .. } => None,
    }
}

/// Applies `fill(…)` to the windows a column had no value in. `count` answers 0 for an empty
/// window under `fill(null)`, as InfluxDB does.
fn fill_columns(
    table: &mut [Vec<Cell>],
    starts: &[TimestampMs],
    fill: Fill,
    plan: &Plan,
    exprs: &[ColExpr],
) {
    for (col, expr) in table.iter_mut().zip(exprs) {
        let is_count = matches!(expr, ColExpr::Call(i) if matches!(plan.calls[*i].func, Func::Count | Func::CountDistinct));
        match fill {
            Fill::None => {}
            Fill::Null => {
                if is_count {
                    for v in col.iter_mut().filter(|v| v.is_none()) {
                        *v = Some((Value::from(0), None));
                    }
                }
            }
            Fill::Number(n) => {
                let value = if n.fract() == 0.0 && n.abs() < 9.0e15 { Value::from(n as i64) } else { float(n) };
                for v in col.iter_mut().filter(|v| v.is_none()) {
                    *v = Some((value.clone(), None));
                }
            }
            Fill::Previous => {
                let mut prev: Option<Value> = None;
                for v in col.iter_mut() {
                    match v {
                        Some((value, _)) if !value.is_null() => prev = Some(value.clone()),
                        _ => {
                            if let Some(p) = &prev {
                                *v = Some((p.clone(), None));
                            }
                        }
                    }
                }
            }
            Fill::Linear => {
                let known: Vec<(usize, f64)> = col
                    .iter()
                    .enumerate()
                    .filter_map(|(k, v)| v.as_ref().and_then(|(v, _)| v.as_f64()).map(|f| (k, f)))
                    .collect();
                let all_int = col.iter().flatten().all(|(v, _)| v.is_i64() || v.is_null());
                for pair in known.windows(2) {
                    let ((a, va), (b, vb)) = (pair[0], pair[1]);
                    for k in a + 1..b {
                        let frac = (starts[k] - starts[a]) as f64 / (starts[b] - starts[a]) as f64;
                        let v = va + (vb - va) * frac;
                        col[k] = Some((if all_int { Value::from(v as i64) } else { float(v) }, None));
                    }
                }
            }
        }
    }
}
