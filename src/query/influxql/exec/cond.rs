//! `WHERE`: the time bounds taken out of the condition, and what is left evaluated against a
//! series' tags and a reading's fields.
//!
//! InfluxQL decides whether a name is a tag or a field by the measurement's schema; bucketd
//! has no schema, so a name is a tag when any series of the measurement has a tag of that name
//! (`::tag` and `::field` override). A tag a series lacks compares as the empty string, as in
//! InfluxDB; a field a reading lacks makes every comparison false.

use std::collections::{BTreeSet, HashMap};

use regex::Regex;

use super::error::ExecError;
use crate::model::{FieldValue, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Reading, TimestampMs};
use crate::query::influxql::syntax::ast::{BinaryOp, Expr, RefKind};

const NS_PER_MS: i64 = 1_000_000;

/// The time bounds of a statement, in bucketd's milliseconds: `from <= ts < to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeRange {
    pub from: TimestampMs,
    /// The lower bound as written, in nanoseconds (`time > X` is `X + 1`): InfluxDB reports it
    /// as the time of an aggregate without `GROUP BY time`.
    pub lower_ns: i64,
    pub to: TimestampMs,
    pub has_lower: bool,
    pub has_upper: bool,
}

impl TimeRange {
    fn unbounded() -> TimeRange {
        TimeRange {
            from: MIN_TIMESTAMP_MS,
            lower_ns: i64::MIN,
            to: MAX_TIMESTAMP_MS + 1,
            has_lower: false,
            has_upper: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.from >= self.to
    }
}

/// Splits `condition` into its time bounds and the rest. Time comparisons must be joined to the
/// rest with `AND` (InfluxDB refuses `OR time …` too).
pub fn split_time(
    condition: Option<&Expr>,
    now_ns: i64,
) -> Result<(TimeRange, Option<Expr>), ExecError> {
    let mut range = TimeRange::unbounded();
    let rest = match condition {
        Some(c) => take_time(c, now_ns, &mut range)?,
        None => None,
    };
    Ok((range, rest))
}

fn take_time(e: &Expr, now_ns: i64, range: &mut TimeRange) -> Result<Option<Expr>, ExecError> {
    match e {
        Expr::Paren(inner) => take_time(inner, now_ns, range),
        Expr::Binary { op: BinaryOp::And, lhs, rhs } => {
            let l = take_time(lhs, now_ns, range)?;
            let r = take_time(rhs, now_ns, range)?;
            Ok(match (l, r) {
                (Some(l), Some(r)) => {
                    Some(Expr::Binary { op: BinaryOp::And, lhs: Box::new(l), rhs: Box::new(r) })
                }
                (l, r) => l.or(r),
            })
        }
        Expr::Binary { op, lhs, rhs } if is_time(lhs) || is_time(rhs) => {
            let (op, other) = if is_time(lhs) { (*op, rhs) } else { (flip(*op)?, lhs) };
            let ns = time_value(other, now_ns)?;
            bound(range, op, ns)?;
            Ok(None)
        }
        _ if mentions_time(e) => Err(ExecError::new(
            "invalid time condition: compare time with =, <, <=, > or >= and join the bounds \
             to the rest of the condition with AND",
        )),
        _ => Ok(Some(e.clone())),
    }
}

fn is_time(e: &Expr) -> bool {
    matches!(e, Expr::Ref { name, .. } if name.eq_ignore_ascii_case("time"))
}

fn mentions_time(e: &Expr) -> bool {
    match e {
        Expr::Ref { .. } => is_time(e),
        Expr::Paren(i) => mentions_time(i),
        Expr::Binary { lhs, rhs, .. } => mentions_time(lhs) || mentions_time(rhs),
        Expr::Call { args, .. } => args.iter().any(mentions_time),
        _ => false,
    }
}

/// `5 < time` is `time > 5`.
fn flip(op: BinaryOp) -> Result<BinaryOp, ExecError> {
    Ok(match op {
        BinaryOp::Lt => BinaryOp::Gt,
        BinaryOp::LtEq => BinaryOp::GtEq,
        BinaryOp::Gt => BinaryOp::Lt,
        BinaryOp::GtEq => BinaryOp::LtEq,
        BinaryOp::Eq => BinaryOp::Eq,
        _ => return Err(ExecError::new("invalid time comparison operator")),
    })
}

fn bound(range: &mut TimeRange, op: BinaryOp, ns: i64) -> Result<(), ExecError> {
    // Readings are whole milliseconds: `ts_ms * 1e6 >= ns` is `ts_ms >= ceil(ns / 1e6)`.
    let ceil = |ns: i64| ns.div_euclid(NS_PER_MS) + i64::from(ns.rem_euclid(NS_PER_MS) != 0);
    let floor = |ns: i64| ns.div_euclid(NS_PER_MS);
    fn lower(range: &mut TimeRange, from: i64, ns: i64) {
        range.from = range.from.max(from);
        range.lower_ns = range.lower_ns.max(ns);
        range.has_lower = true;
    }
    match op {
        BinaryOp::GtEq => lower(range, ceil(ns), ns),
        BinaryOp::Gt => lower(range, floor(ns) + 1, ns.saturating_add(1)),
        BinaryOp::Eq => {
            if ns.rem_euclid(NS_PER_MS) != 0 {
                // No reading can be at a fraction of a millisecond.
                range.to = range.from;
            }
            lower(range, ceil(ns), ns);
            range.to = range.to.min(floor(ns) + 1);
            range.has_upper = true;
        }
        BinaryOp::Lt => {
            range.to = range.to.min(ceil(ns));
            range.has_upper = true;
        }
        BinaryOp::LtEq => {
            range.to = range.to.min(floor(ns) + 1);
            range.has_upper = true;
        }
        _ => return Err(ExecError::new("invalid time comparison operator: use =, <, <=, > or >=")),
    }
    range.from = range.from.clamp(MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS + 1);
    range.to = range.to.clamp(MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS + 1);
    Ok(())
}

/// A time expression's value in nanoseconds: integers are nanoseconds, durations count from the
/// epoch (`1700000000000ms`), strings are RFC 3339 (or `YYYY-MM-DD[ HH:MM:SS[.f]]`, UTC), and
/// `now()` plus or minus durations.
pub fn time_value(e: &Expr, now_ns: i64) -> Result<i64, ExecError> {
    let overflow = || ExecError::new("time value out of range");
    match e {
        Expr::Paren(i) => time_value(i, now_ns),
        Expr::Integer(n) | Expr::Duration(n) => Ok(*n),
        Expr::Number(f) if f.is_finite() && f.abs() < 9.2e18 => Ok(*f as i64),
        Expr::String(s) => parse_time_string(s)
            .ok_or_else(|| ExecError::new(format!("invalid time string {s:?}: expected RFC 3339"))),
        Expr::Call { name, args } if name == "now" && args.is_empty() => Ok(now_ns),
        Expr::Binary { op: op @ (BinaryOp::Add | BinaryOp::Sub), lhs, rhs } => {
            let l = time_value(lhs, now_ns)?;
            let r = time_value(rhs, now_ns)?;
            if *op == BinaryOp::Add { l.checked_add(r) } else { l.checked_sub(r) }
                .ok_or_else(overflow)
        }
        _ => Err(ExecError::new(
            "invalid time value: use an integer (ns), a duration such as 1700000000000ms, \
             an RFC 3339 string or now() - 1h",
        )),
    }
}

fn parse_time_string(s: &str) -> Option<i64> {
    use chrono::{DateTime, NaiveDate, NaiveDateTime};
    let dt = if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        t.naive_utc()
    } else if let Ok(t) = NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f") {
        t
    } else {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?.and_hms_opt(0, 0, 0)?
    };
    dt.and_utc().timestamp_nanos_opt()
}

/// A value met while evaluating a condition.
#[derive(Clone, Debug, PartialEq)]
enum Val<'a> {
    Str(&'a str),
    Owned(String),
    Float(f64),
    Int(i64),
    Bool(bool),
    Null,
}

impl Val<'_> {
    fn num(&self) -> Option<f64> {
        match *self {
            Val::Float(f) => Some(f),
            Val::Int(i) => Some(i as f64),
            _ => None,
        }
    }

    fn str(&self) -> Option<&str> {
        match self {
            Val::Str(s) => Some(s),
            Val::Owned(s) => Some(s),
            _ => None,
        }
    }
}

/// A `WHERE` condition without its time bounds, with its regexes compiled once.
pub struct Condition {
    expr: Expr,
    regexes: HashMap<String, Regex>,
}

impl Condition {
    pub fn new(expr: Expr) -> Result<Condition, ExecError> {
        let mut regexes = HashMap::new();
        collect_regexes(&expr, &mut regexes)?;
        check(&expr)?;
        Ok(Condition { expr, regexes })
    }

    /// Whether a series matches when every name is a tag, as in the metadata statements.
    pub fn series_matches_tags(&self, tags: &[(String, String)]) -> bool {
        let keys: BTreeSet<String> = self.names().into_iter().collect();
        self.eval(&self.expr, &Env { tags, tag_keys: &keys, reading: None }) == Some(true)
    }

    fn names(&self) -> Vec<String> {
        fn walk(e: &Expr, out: &mut Vec<String>) {
            match e {
                Expr::Ref { name, .. } => out.push(name.clone()),
                Expr::Paren(i) => walk(i, out),
                Expr::Binary { lhs, rhs, .. } => {
                    walk(lhs, out);
                    walk(rhs, out);
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        walk(&self.expr, &mut out);
        out
    }

    /// Whether a series can have matching readings: `None` when that depends on its fields.
    pub fn series_may_match(&self, tags: &[(String, String)], tag_keys: &BTreeSet<String>) -> bool {
        let env = Env { tags, tag_keys, reading: None };
        self.eval(&self.expr, &env) != Some(false)
    }

    /// Whether every reading of a series matches, whatever its fields hold: true already
    /// with the fields unknown.
    pub fn series_matches(&self, tags: &[(String, String)], tag_keys: &BTreeSet<String>) -> bool {
        let env = Env { tags, tag_keys, reading: None };
        self.eval(&self.expr, &env) == Some(true)
    }

    pub fn matches(
        &self,
        tags: &[(String, String)],
        tag_keys: &BTreeSet<String>,
        reading: &Reading,
    ) -> bool {
        let env = Env { tags, tag_keys, reading: Some(reading) };
        self.eval(&self.expr, &env) == Some(true)
    }

    /// Whether the condition mentions anything but tags: a field condition rules out answers
    /// from bucket statistics.
    pub fn only_tags(&self, tag_keys: &BTreeSet<String>) -> bool {
        fn walk(e: &Expr, keys: &BTreeSet<String>) -> bool {
            match e {
                Expr::Ref { name, kind } => match kind {
                    Some(RefKind::Tag) => true,
                    Some(_) => false,
                    None => keys.contains(name),
                },
                Expr::Paren(i) => walk(i, keys),
                Expr::Binary { lhs, rhs, .. } => walk(lhs, keys) && walk(rhs, keys),
                Expr::Call { .. } | Expr::Wildcard { .. } => false,
                _ => true,
            }
        }
        walk(&self.expr, tag_keys)
    }

    /// Three-valued: `None` is "unknown" (a field, while only the series is known).
    fn eval(&self, e: &Expr, env: &Env) -> Option<bool> {
        match e {
            Expr::Paren(i) => self.eval(i, env),
            Expr::Bool(b) => Some(*b),
            Expr::Binary { op: BinaryOp::And, lhs, rhs } => {
                match (self.eval(lhs, env), self.eval(rhs, env)) {
                    (Some(false), _) | (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                }
            }
            Expr::Binary { op: BinaryOp::Or, lhs, rhs } => {
                match (self.eval(lhs, env), self.eval(rhs, env)) {
                    (Some(true), _) | (_, Some(true)) => Some(true),
                    (Some(false), Some(false)) => Some(false),
                    _ => None,
                }
            }
            Expr::Binary { op: op @ (BinaryOp::EqRegex | BinaryOp::NotEqRegex), lhs, rhs } => {
                let Expr::Regex(pattern) = &**rhs else { return Some(false) };
                let re = &self.regexes[pattern];
                let v = env.value(lhs, true)?;
                let hit = v.str().is_some_and(|s| re.is_match(s));
                match v {
                    Val::Null => Some(false),
                    _ => Some(hit == (*op == BinaryOp::EqRegex)),
                }
            }
            Expr::Binary { op, lhs, rhs } if is_comparison(*op) => {
                let stringy = matches!(**lhs, Expr::String(_)) || matches!(**rhs, Expr::String(_));
                let l = env.value(lhs, stringy)?;
                let r = env.value(rhs, stringy)?;
                Some(compare(*op, &l, &r))
            }
            // A bare field or tag reference is true when it is a true boolean.
            Expr::Ref { .. } => Some(env.value(e, false)? == Val::Bool(true)),
            _ => Some(false),
        }
    }
}

fn is_comparison(op: BinaryOp) -> bool {
    matches!(
        op,
        BinaryOp::Eq
            | BinaryOp::NotEq
            | BinaryOp::Lt
            | BinaryOp::LtEq
            | BinaryOp::Gt
            | BinaryOp::GtEq
    )
}

fn compare(op: BinaryOp, l: &Val, r: &Val) -> bool {
    use std::cmp::Ordering;
    let ord: Option<Ordering> = match (l, r) {
        (Val::Null, _) | (_, Val::Null) => return false,
        (Val::Bool(a), Val::Bool(b)) => Some(a.cmp(b)),
        (Val::Int(a), Val::Int(b)) => Some(a.cmp(b)),
        _ => match (l.str(), r.str()) {
            (Some(a), Some(b)) => Some(a.cmp(b)),
            (None, None) => match (l.num(), r.num()) {
                (Some(a), Some(b)) => a.partial_cmp(&b),
                _ => None,
            },
            _ => None,
        },
    };
    let Some(ord) = ord else { return false };
    match op {
        BinaryOp::Eq => ord == Ordering::Equal,
        BinaryOp::NotEq => ord != Ordering::Equal,
        BinaryOp::Lt => ord == Ordering::Less,
        BinaryOp::LtEq => ord != Ordering::Greater,
        BinaryOp::Gt => ord == Ordering::Greater,
        BinaryOp::GtEq => ord != Ordering::Less,
        _ => false,
    }
}

struct Env<'a> {
    tags: &'a [(String, String)],
    tag_keys: &'a BTreeSet<String>,
    reading: Option<&'a Reading>,
}

impl<'a> Env<'a> {
    /// `None`: unknown (a field while only the series is known).
    fn value(&self, e: &'a Expr, stringy: bool) -> Option<Val<'a>> {
        match e {
            Expr::Paren(i) => self.value(i, stringy),
            Expr::String(s) => Some(Val::Str(s)),
            Expr::Integer(i) => Some(Val::Int(*i)),
            Expr::Number(f) => Some(Val::Float(*f)),
            Expr::Bool(b) => Some(Val::Bool(*b)),
            Expr::Duration(d) => Some(Val::Int(*d)),
            Expr::Ref { name, kind } => {
                let tag = match kind {
                    Some(RefKind::Tag) => true,
                    None => self.tag_keys.contains(name),
                    Some(_) => false,
                };
                if tag {
                    let v = self.tags.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v);
                    return Some(Val::Str(v));
                }
                let reading = self.reading?;
                Some(match reading.fields.iter().find(|(k, _)| k.as_str() == name) {
                    None if stringy && kind.is_none() => Val::Str(""),
                    None => Val::Null,
                    Some((_, v)) => match v {
                        FieldValue::Float(f) => Val::Float(*f),
                        FieldValue::Int(i) => Val::Int(*i),
                        FieldValue::UInt(u) => match i64::try_from(*u) {
                            Ok(i) => Val::Int(i),
                            Err(_) => Val::Float(*u as f64),
                        },
                        FieldValue::Bool(b) => Val::Bool(*b),
                        FieldValue::Str(s) => Val::Str(s),
                    },
                })
            }
            Expr::Binary { op, lhs, rhs } => {
                let l = self.value(lhs, false)?;
                let r = self.value(rhs, false)?;
                Some(arith(*op, &l, &r))
            }
            _ => Some(Val::Null),
        }
    }
}

fn arith<'a>(op: BinaryOp, l: &Val, r: &Val) -> Val<'a> {
    if let (Val::Int(a), Val::Int(b)) = (l, r) {
        let v = match op {
            BinaryOp::Add => a.checked_add(*b),
            BinaryOp::Sub => a.checked_sub(*b),
            BinaryOp::Mul => a.checked_mul(*b),
            BinaryOp::Mod => a.checked_rem(*b),
            BinaryOp::BitAnd => Some(a & b),
            BinaryOp::BitOr => Some(a | b),
            BinaryOp::BitXor => Some(a ^ b),
            BinaryOp::Div => {
                return if *b == 0 { Val::Float(0.0) } else { Val::Float(*a as f64 / *b as f64) };
            }
            _ => None,
        };
        return v.map_or(Val::Null, Val::Int);
    }
    match (l.num(), r.num()) {
        (Some(a), Some(b)) => match op {
            BinaryOp::Add => Val::Float(a + b),
            BinaryOp::Sub => Val::Float(a - b),
            BinaryOp::Mul => Val::Float(a * b),
            BinaryOp::Div => Val::Float(if b == 0.0 { 0.0 } else { a / b }),
            BinaryOp::Mod => Val::Float(a % b),
            _ => Val::Null,
        },
        _ => match (op, l.str(), r.str()) {
            (BinaryOp::Add, Some(a), Some(b)) => Val::Owned(format!("{a}{b}")),
            _ => Val::Null,
        },
    }
}

fn collect_regexes(e: &Expr, out: &mut HashMap<String, Regex>) -> Result<(), ExecError> {
    match e {
        Expr::Regex(p) if !out.contains_key(p) => {
            out.insert(p.clone(), compile_regex(p)?);
        }
        Expr::Paren(i) => collect_regexes(i, out)?,
        Expr::Binary { lhs, rhs, .. } => {
            collect_regexes(lhs, out)?;
            collect_regexes(rhs, out)?;
        }
        Expr::Call { args, .. } => {
            for a in args {
                collect_regexes(a, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Refuses what a condition cannot hold: aggregates, and regexes outside `=~`/`!~`.
fn check(e: &Expr) -> Result<(), ExecError> {
    match e {
        Expr::Call { name, .. } => {
            Err(ExecError::new(format!("invalid condition: function {name}() in WHERE")))
        }
        Expr::Wildcard { .. } => Err(ExecError::new("invalid condition: * in WHERE")),
        Expr::Paren(i) => check(i),
        Expr::Binary { op, lhs, rhs } => {
            let regex_ok = matches!(op, BinaryOp::EqRegex | BinaryOp::NotEqRegex);
            if regex_ok && !matches!(**rhs, Expr::Regex(_)) {
                return Err(ExecError::new(
                    "invalid condition: =~ and !~ need a /regex/ on the right",
                ));
            }
            if !regex_ok && (matches!(**lhs, Expr::Regex(_)) || matches!(**rhs, Expr::Regex(_))) {
                return Err(ExecError::new("invalid condition: a /regex/ needs =~ or !~"));
            }
            check(lhs)?;
            if !regex_ok { check(rhs) } else { Ok(()) }
        }
        _ => Ok(()),
    }
}

/// Compiles an InfluxQL (Go RE2) regex; the `regex` crate accepts RE2's syntax. Bounded so a
/// hostile pattern cannot take the server's memory.
pub fn compile_regex(pattern: &str) -> Result<Regex, ExecError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| ExecError::new(format!("invalid regex /{pattern}/: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str) -> Box<Expr> {
        Box::new(Expr::Ref { name: name.into(), kind: None })
    }

    fn bin(op: BinaryOp, lhs: Box<Expr>, rhs: Expr) -> Expr {
        Expr::Binary { op, lhs, rhs: Box::new(rhs) }
    }

    #[test]
    fn time_bounds_become_a_millisecond_range() {
        let c = bin(
            BinaryOp::And,
            Box::new(bin(BinaryOp::GtEq, r("time"), Expr::Duration(1_500 * NS_PER_MS))),
            bin(BinaryOp::Lt, r("time"), Expr::Integer(2_000 * NS_PER_MS + 1)),
        );
        let (range, rest) = split_time(Some(&c), 0).unwrap();
        assert_eq!((range.from, range.to, rest), (1_500, 2_001, None));
        let gt = bin(BinaryOp::Gt, r("time"), Expr::Integer(1_500 * NS_PER_MS + 10));
        assert_eq!(split_time(Some(&gt), 0).unwrap().0.from, 1_501);
        let le = bin(BinaryOp::LtEq, r("time"), Expr::Integer(1_500 * NS_PER_MS));
        assert_eq!(split_time(Some(&le), 0).unwrap().0.to, 1_501);
    }

    #[test]
    fn now_minus_a_duration_and_strings_are_times() {
        let e = bin(
            BinaryOp::Sub,
            Box::new(Expr::Call { name: "now".into(), args: vec![] }),
            Expr::Duration(5),
        );
        assert_eq!(time_value(&e, 100).unwrap(), 95);
        let s = Expr::String("2024-03-01T00:00:00Z".into());
        assert_eq!(time_value(&s, 0).unwrap(), 1_709_251_200_000_000_000);
        assert_eq!(
            time_value(&Expr::String("2024-03-01".into()), 0).unwrap(),
            1_709_251_200_000_000_000
        );
    }

    #[test]
    fn time_inside_or_is_refused() {
        let c = bin(
            BinaryOp::Or,
            Box::new(bin(BinaryOp::Gt, r("time"), Expr::Integer(0))),
            bin(BinaryOp::Eq, r("host"), Expr::String("a".into())),
        );
        assert!(split_time(Some(&c), 0).is_err());
    }

    #[test]
    fn missing_tags_are_empty_and_missing_fields_are_false() {
        let keys: BTreeSet<String> = ["host".to_string()].into();
        let tags = vec![("host".to_string(), "a".to_string())];
        let reading =
            Reading { ts: 0, fields: smallvec::smallvec![("v".into(), FieldValue::Int(3))] };
        let cond = |e: Expr| Condition::new(e).unwrap();
        assert!(
            cond(bin(BinaryOp::Eq, r("region"), Expr::String("".into())))
                .matches(&tags, &keys, &reading)
        );
        assert!(cond(bin(BinaryOp::Gt, r("v"), Expr::Number(2.5))).matches(&tags, &keys, &reading));
        assert!(
            !cond(bin(BinaryOp::NotEq, r("w"), Expr::Integer(1))).matches(&tags, &keys, &reading)
        );
        let re = cond(bin(BinaryOp::EqRegex, r("host"), Expr::Regex("^a$".into())));
        assert!(re.series_may_match(&tags, &keys));
        let field = cond(bin(BinaryOp::Gt, r("v"), Expr::Integer(5)));
        assert!(field.series_may_match(&tags, &keys), "unknown until the reading is seen");
        assert!(!field.matches(&tags, &keys, &reading));
        let keys_and_field = cond(bin(
            BinaryOp::And,
            Box::new(bin(BinaryOp::Eq, r("host"), Expr::String("b".into()))),
            bin(BinaryOp::Gt, r("v"), Expr::Integer(5)),
        ));
        assert!(!keys_and_field.series_may_match(&tags, &keys));
    }
}
