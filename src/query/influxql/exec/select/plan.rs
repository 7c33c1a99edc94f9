//! A `SELECT` planned: its columns and calls ([`Plan`]), the measurements and series it reads,
//! its `GROUP BY time` windows in a zone, and the value arithmetic its columns do.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;

use super::transform::Transform;
use crate::model::{FieldValue, Reading, TimestampMs};
use crate::query::influxql::exec::agg::{Func, float};
use crate::query::influxql::exec::cond::{Condition, TimeRange, compile_regex};
use crate::query::influxql::exec::context::{Ctx, Series};
use crate::query::influxql::exec::error::ExecError;
use crate::query::influxql::syntax::ast::{
    BinaryOp, Dimension, Expr, Field, Fill, RefKind, Select,
};
use crate::store::{SensorInfo, StoreError};
use chrono_tz::Tz;

/// Rows (windows × groups) one statement may produce.
pub const MAX_ROWS: usize = 1_000_000;

pub(super) const NS_PER_MS: i64 = 1_000_000;

/// Where a projected column's value comes from.
#[derive(Clone, Debug)]
pub(super) enum ColExpr {
    Call(usize),
    Ref { name: String, kind: Option<RefKind> },
    Lit(Value),
    Binary(BinaryOp, Box<ColExpr>, Box<ColExpr>),
}

#[derive(Clone, Debug)]
pub(super) struct Call {
    pub(super) func: Func,
    /// `None`: every field (`mean(*)`).
    pub(super) field: Option<String>,
}

#[derive(Clone, Debug)]
pub(super) struct Column {
    /// The alias, or InfluxDB's default name.
    pub(super) name: String,
    pub(super) aliased: bool,
    pub(super) expr: ColExpr,
    pub(super) wildcard: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Raw,
    Aggregate,
    Distinct,
}

pub(super) struct Plan {
    pub(super) kind: Kind,
    pub(super) columns: Vec<Column>,
    pub(super) calls: Vec<Call>,
    /// One selector with fields or tags beside it (`max(v), host`): those come from the
    /// reading the selector picked.
    pub(super) aux: bool,
    /// A transformation of the one column's rows (`derivative(mean(x), 1s)`).
    pub(super) transform: Option<Transform>,
}

/// What every measurement of one statement shares.
pub(super) struct Statement<'a> {
    pub(super) plan: &'a Plan,
    pub(super) condition: Option<&'a Condition>,
    pub(super) range: TimeRange,
    pub(super) window: Option<Window>,
    pub(super) fill: Fill,
    /// `ORDER BY time DESC`.
    pub(super) descending: bool,
}

/// How many series a `SELECT *` reads the fields of beside those it selects.
pub(super) const WILDCARD_PROBED_SERIES: usize = 64;

/// One measurement's series, grouped by the `GROUP BY` tags.
pub(super) struct Measurement {
    pub(super) name: String,
    pub(super) tag_keys: BTreeSet<String>,
    pub(super) group_keys: Vec<String>,
    pub(super) groups: Vec<(Vec<String>, Vec<Arc<SensorInfo>>)>,
    /// For `SELECT *`: the fields of the measurement's series that are not read (their tags
    /// or SLIMIT leave them out), which InfluxDB lists too; of at most
    /// [`WILDCARD_PROBED_SERIES`] of them.
    pub(super) other_fields: BTreeSet<String>,
}

impl Measurement {
    pub(super) fn series(
        &self,
        group: &[String],
        columns: Vec<String>,
        values: Vec<Vec<Value>>,
    ) -> Series {
        Series {
            name: Some(self.name.clone()),
            tags: (!self.group_keys.is_empty())
                .then(|| self.group_keys.iter().cloned().zip(group.iter().cloned()).collect()),
            columns,
            values,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Window {
    pub(super) interval: i64,
    pub(super) offset: i64,
    /// `tz(…)`: windows of a day start at local midnight.
    pub(super) zone: Option<Tz>,
}

impl Window {
    pub(super) fn start(&self, ts: TimestampMs) -> TimestampMs {
        self.bounds(ts).0
    }

    /// The window holding `ts`, as InfluxDB computes it: aligned in local time, and where the
    /// zone's offset changes inside the window (daylight saving), the start moves by the
    /// change and the window is that much shorter or longer.
    pub(super) fn bounds(&self, ts: TimestampMs) -> (TimestampMs, TimestampMs) {
        let t = ts - self.offset;
        let zone = self.zone.map_or(0, |z| zone_offset_ms(z, t));
        let dt = (t + zone).rem_euclid(self.interval);
        let mut start = t - dt;
        let mut end = t + (self.interval - dt);
        if let Some(z) = self.zone {
            let change = zone - zone_offset_ms(z, start);
            if change != 0 && change.abs() < self.interval {
                start += change;
            }
            let end_zone = zone_offset_ms(z, end);
            let change = zone - end_zone;
            // Clocks going back add time to this window. Clocks going forward skip time, which
            // belongs to this window only when the switch lies before the shortened end: a
            // window ending on the switch itself keeps its end, or the next window would be
            // this one again.
            if change != 0
                && change.abs() < self.interval
                && (change > 0 || zone_offset_ms(z, end + change) == end_zone)
            {
                end += change;
            }
        }
        (start + self.offset, end + self.offset)
    }

    /// Every window start from the one holding `from` to the one holding `to - 1`, each later
    /// than the one before: a zone's rules can never make this repeat a window.
    pub(super) fn starts(
        &self,
        from: TimestampMs,
        to: TimestampMs,
    ) -> impl Iterator<Item = TimestampMs> + '_ {
        let mut next = Some(self.bounds(from));
        std::iter::from_fn(move || {
            let (start, end) = next?;
            // Without a zone every window is as long as the interval: the next one is
            // stepped to, not divided for.
            let following = match self.zone {
                None => (end, end.saturating_add(self.interval)),
                Some(_) => self.bounds(end),
            };
            next = (end < to && end > start)
                .then_some(following)
                .filter(|&(next_start, _)| next_start > start);
            Some(start)
        })
    }
}

/// The zone's offset from UTC at `ms`, in milliseconds.
pub(super) fn zone_offset_ms(zone: Tz, ms: TimestampMs) -> i64 {
    use chrono::{Offset, TimeZone};
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => {
            i64::from(zone.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc()) * 1_000
        }
        None => 0,
    }
}

/// `tz('…')`: `None` for UTC, whose times InfluxDB writes with `Z`.
pub(super) fn zone(tz: Option<&str>) -> Result<Option<Tz>, ExecError> {
    let Some(name) = tz else { return Ok(None) };
    let zone: Tz =
        name.parse().map_err(|_| ExecError::new(format!("unable to find time zone {name:?}")))?;
    Ok((zone != Tz::UTC && zone != Tz::Etc__UTC).then_some(zone))
}

pub(super) fn too_many_rows() -> ExecError {
    ExecError::new(format!(
        "the statement would answer more than {MAX_ROWS} rows: narrow the time range, use a \
         longer GROUP BY time interval or add LIMIT"
    ))
}

pub(super) fn too_many_points(limit: usize) -> ExecError {
    ExecError::new(format!(
        "the statement would hold more than {limit} readings at once: narrow the time range, \
         group fewer series, or aggregate with GROUP BY time"
    ))
}

pub(super) fn to_ms(ns: i64, what: &str) -> Result<i64, ExecError> {
    if ns % NS_PER_MS != 0 {
        return Err(ExecError::new(format!(
            "{what} must be a whole number of milliseconds: bucketd keeps millisecond timestamps"
        )));
    }
    Ok(ns / NS_PER_MS)
}

pub(super) fn tag_value<'a>(info: &'a SensorInfo, key: &str) -> &'a str {
    info.tags.iter().find(|(k, _)| k == key).map_or("", |(_, v)| v)
}

pub(super) fn group_keys(
    dims: &[Dimension],
    tag_keys: &BTreeSet<String>,
) -> Result<Vec<String>, ExecError> {
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

/// Hands `each` the readings of one series' `stream` (ascending, within the statement's range)
/// that meet the condition.
pub(super) async fn readings_of(
    ctx: &Ctx<'_>,
    st: &Statement<'_>,
    m: &Measurement,
    info: &SensorInfo,
    mut stream: BoxStream<'static, Result<Reading, StoreError>>,
    mut each: impl FnMut(&Reading) -> Result<(), ExecError>,
) -> Result<(), ExecError> {
    // A condition its tags already satisfy (`"sensor" = 's07'`) is not asked again per reading.
    let per_reading = st.condition.filter(|c| !c.series_matches(&info.tags, &m.tag_keys));
    let mut n = 0u32;
    while let Some(r) = stream.next().await {
        let r = r?;
        n = n.wrapping_add(1);
        if n.is_multiple_of(4096) {
            ctx.check_deadline()?;
        }
        if per_reading.is_some_and(|c| !c.matches(&info.tags, &m.tag_keys, &r)) {
            continue;
        }
        each(&r)?;
    }
    Ok(())
}

/// A transformation must be the statement's only field; it is planned as its argument (an
/// aggregate, or a raw field), and applied to the rows that argument gives.
pub(super) fn transform_of(
    fields: &[Field],
) -> Result<Option<(Transform, Field, String)>, ExecError> {
    let Some(pos) = fields
        .iter()
        .position(|f| matches!(&f.expr, Expr::Call { name, .. } if Transform::of(name)))
    else {
        return Ok(None);
    };
    let Expr::Call { name, args } = &fields[pos].expr else { return Ok(None) };
    if fields.len() > 1 {
        return Err(ExecError::new(format!("{name}() must be the only field of its statement")));
    }
    let unit = |a: Option<&Expr>| -> Result<Option<i64>, ExecError> {
        match a {
            None => Ok(None),
            Some(Expr::Duration(ns)) if *ns >= NS_PER_MS => Ok(Some(ns / NS_PER_MS)),
            Some(_) => {
                Err(ExecError::new(format!("{name}() takes a duration of 1ms or more as its unit")))
            }
        }
    };
    let t = match (name.as_str(), args.as_slice()) {
        ("derivative" | "non_negative_derivative", [_] | [_, _]) => Transform::Derivative {
            unit_ms: unit(args.get(1))?,
            non_negative: name.starts_with("non_negative"),
        },
        ("difference" | "non_negative_difference", [_]) => {
            Transform::Difference { non_negative: name.starts_with("non_negative") }
        }
        ("cumulative_sum", [_]) => Transform::CumulativeSum,
        ("elapsed", [_]) => Transform::Elapsed { unit_ns: 1 },
        ("elapsed", [_, Expr::Duration(ns)]) if *ns > 0 => Transform::Elapsed { unit_ns: *ns },
        ("moving_average", [_, Expr::Integer(n)]) if *n >= 2 && *n <= 10_000 => {
            Transform::MovingAverage(*n as usize)
        }
        ("moving_average", _) => {
            return Err(ExecError::new(
                "moving_average() takes a field and a window of 2 to 10000 points",
            ));
        }
        _ => return Err(ExecError::new(format!("wrong number of arguments to {name}()"))),
    };
    let name = fields[pos].alias.clone().unwrap_or_else(|| name.clone());
    Ok(Some((t, Field { expr: args[0].clone(), alias: fields[pos].alias.clone() }, name)))
}

pub(super) fn plan(s: &Select) -> Result<Plan, ExecError> {
    let transformed = transform_of(&s.fields)?;
    let inner;
    let fields = match &transformed {
        Some((_, field, _)) => {
            inner = [field.clone()];
            &inner[..]
        }
        None => &s.fields[..],
    };
    let mut calls = Vec::new();
    let mut columns = Vec::new();
    for f in fields {
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
    // Fields and tags beside one selector come from the reading it picked, as in InfluxDB.
    let aux = has_calls && has_refs;
    if aux
        && !(calls.len() == 1
            && matches!(calls[0].func, Func::Min | Func::Max | Func::First | Func::Last))
    {
        return Err(ExecError::new(
            "mixing aggregate and non-aggregate queries is not supported (fields and tags may \
             stand beside one min(), max(), first() or last() only)",
        ));
    }
    let distinct = calls.iter().any(|c: &Call| c.func == Func::Distinct);
    if distinct
        && (calls.len() > 1 || columns.len() > 1 || !matches!(columns[0].expr, ColExpr::Call(_)))
    {
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
    let transform = match transformed {
        Some((t, _, name)) => {
            if columns[0].wildcard || kind == Kind::Distinct {
                return Err(ExecError::new(
                    "a transformation takes one field or one aggregate of one field",
                ));
            }
            columns[0].name = name;
            Some(t)
        }
        None => None,
    };
    Ok(Plan { kind, columns, calls, aux, transform })
}

pub(super) fn mentions_ref(e: &ColExpr) -> bool {
    match e {
        ColExpr::Ref { .. } => true,
        ColExpr::Binary(_, l, r) => mentions_ref(l) || mentions_ref(r),
        _ => false,
    }
}

pub(super) const FUNCTIONS: &str = "mean, median, mode, count, sum, min, max, first, last, spread, stddev, \
     percentile and distinct, and the transformations derivative, non_negative_derivative, \
     difference, non_negative_difference, cumulative_sum, moving_average and elapsed";

pub(super) fn col_expr(
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
            if matches!(
                op,
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Mod
            ) =>
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

pub(super) fn call(name: &str, args: &[Expr], wildcard: &mut bool) -> Result<Call, ExecError> {
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
                _ => {
                    return Err(ExecError::new(
                        "expected a number as percentile's second argument",
                    ));
                }
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

pub(super) fn unsupported_function(name: &str) -> ExecError {
    ExecError::new(format!("unsupported function {name}(): bucketd answers {FUNCTIONS}"))
}

/// InfluxDB's column names: a field's name, a function's name, `a_b` for `a + b`.
pub(super) fn default_name(e: &Expr) -> String {
    fn names(e: &Expr, out: &mut Vec<String>) {
        match e {
            Expr::Ref { name, .. } => out.push(name.clone()),
            Expr::Call { name, args } => {
                if name == "count"
                    && matches!(args.first(), Some(Expr::Call { name, .. }) if name == "distinct")
                {
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
pub(super) fn dedupe(names: &mut [String]) {
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

pub(super) fn is_tag(name: &str, kind: Option<RefKind>, tag_keys: &BTreeSet<String>) -> bool {
    match kind {
        Some(RefKind::Tag) => true,
        Some(_) => false,
        None => tag_keys.contains(name),
    }
}

pub(super) fn refs_field(e: &ColExpr, tag_keys: &BTreeSet<String>) -> bool {
    match e {
        ColExpr::Ref { name, kind } => !is_tag(name, *kind, tag_keys),
        ColExpr::Binary(_, l, r) => refs_field(l, tag_keys) || refs_field(r, tag_keys),
        _ => false,
    }
}

/// `::float`, `::integer`, `::string`, `::boolean`: a value of another type is null.
pub(super) fn cast(v: &FieldValue, kind: RefKind) -> Value {
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
pub(super) fn arith(op: BinaryOp, l: &Value, r: &Value) -> Value {
    if let (Some(a), Some(b)) =
        (l.as_i64().filter(|_| l.is_i64()), r.as_i64().filter(|_| r.is_i64()))
    {
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

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    fn utc(s: &str) -> TimestampMs {
        chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    #[test]
    fn day_windows_in_a_zone_start_at_local_midnight_across_daylight_saving() {
        let w = Window { interval: DAY, offset: 0, zone: Some(Tz::Europe__Paris) };
        // 2024-03-31 has 23 hours in Paris: from 23:00Z the day before to 22:00Z.
        let (start, end) = w.bounds(utc("2024-03-31T12:00:00Z"));
        assert_eq!((start, end), (utc("2024-03-30T23:00:00Z"), utc("2024-03-31T22:00:00Z")));
        let starts: Vec<_> =
            w.starts(utc("2024-03-30T00:00:00Z"), utc("2024-04-02T00:00:00Z")).collect();
        assert_eq!(
            starts,
            [
                utc("2024-03-29T23:00:00Z"),
                utc("2024-03-30T23:00:00Z"),
                utc("2024-03-31T22:00:00Z"),
                utc("2024-04-01T22:00:00Z")
            ]
        );
        // 2024-10-27 has 25 hours: the windows still advance one local day at a time.
        let starts: Vec<_> =
            w.starts(utc("2024-10-26T12:00:00Z"), utc("2024-10-28T12:00:00Z")).collect();
        assert_eq!(
            starts,
            [utc("2024-10-25T22:00:00Z"), utc("2024-10-26T22:00:00Z"), utc("2024-10-27T23:00:00Z")]
        );
    }

    /// InfluxDB 1.6's answers: `SELECT count(temp) … GROUP BY time(2h|3h) tz('Europe/Paris')`
    /// over the night clocks went forward (2024-03-31, 01:00Z: 02:00 became 03:00 local).
    #[test]
    fn windows_across_clocks_going_forward_end_and_advance_as_influxdb_does() {
        let paris = Some(Tz::Europe__Paris);
        let w = Window { interval: 2 * 3_600_000, offset: 0, zone: paris };
        // The window ending on the switch keeps its end; it used to end where it began.
        let (start, end) = w.bounds(utc("2024-03-31T00:00:00Z"));
        assert_eq!((start, end), (utc("2024-03-30T23:00:00Z"), utc("2024-03-31T01:00:00Z")));
        let starts: Vec<_> =
            w.starts(utc("2024-03-31T00:00:00Z"), utc("2024-03-31T04:00:00Z")).collect();
        assert_eq!(
            starts,
            [utc("2024-03-30T23:00:00Z"), utc("2024-03-31T01:00:00Z"), utc("2024-03-31T02:00:00Z")]
        );
        let w = Window { interval: 3 * 3_600_000, offset: 0, zone: paris };
        let starts: Vec<_> =
            w.starts(utc("2024-03-30T23:00:00Z"), utc("2024-03-31T04:00:00Z")).collect();
        assert_eq!(starts, [utc("2024-03-30T23:00:00Z"), utc("2024-03-31T01:00:00Z")]);
    }

    /// Zones with every kind of switch (forward and back, both hemispheres, half an hour,
    /// a skipped day), window lengths dashboards ask for, across a year: the starts always
    /// advance, so no statement can loop on a window.
    #[test]
    fn window_starts_always_advance_across_a_year_of_switches() {
        let from = utc("2011-01-01T00:00:00Z");
        let to = utc("2012-01-01T00:00:00Z");
        let zones = [
            Tz::Europe__Paris,
            Tz::America__New_York,
            Tz::America__Santiago,
            Tz::Australia__Sydney,
            Tz::Australia__Lord_Howe,
            Tz::Pacific__Apia,
            Tz::Asia__Tehran,
            Tz::Africa__Casablanca,
            Tz::Pacific__Chatham,
        ];
        for zone in zones {
            for minutes in [30, 60, 90, 120, 180, 300, 1440] {
                let w = Window { interval: minutes * 60_000, offset: 0, zone: Some(zone) };
                let most = (to - from) / w.interval + 3;
                let mut last = i64::MIN;
                for (n, start) in w.starts(from, to).enumerate() {
                    assert!(start > last, "{zone} {minutes}m: {start} after {last}");
                    assert!((n as i64) < most, "{zone} {minutes}m: more windows than {most}");
                    last = start;
                }
            }
        }
    }

    #[test]
    fn utc_windows_are_epoch_multiples_plus_the_offset() {
        let w = Window { interval: 3_600_000, offset: 900_000, zone: None };
        assert_eq!(w.bounds(3_600_000), (900_000, 4_500_000));
        assert_eq!(w.starts(0, 3 * 3_600_000).count(), 4);
    }
}
