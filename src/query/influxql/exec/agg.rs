//! InfluxQL's aggregate and selector functions, one accumulator per (function, field, window).
//!
//! Types follow InfluxDB: `count` is an integer; `sum`, `min`, `max`, `spread`, `first`,
//! `last` and `percentile` keep an integer field's integers; `mean`, `median` and `stddev` are
//! floats. Non-numeric values count in `count`, `first`, `last` and `distinct` only.

use std::collections::BTreeMap;

use serde_json::Value;

use super::go_order;
use crate::model::{FieldValue, TimestampMs};
use crate::store::{FieldStats, Need, i128_to_f64};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Func {
    Mean,
    Median,
    Count,
    Sum,
    Min,
    Max,
    First,
    Last,
    Spread,
    Stddev,
    Percentile(f64),
    Distinct,
    /// `count(distinct(x))`.
    CountDistinct,
    /// The most frequent value.
    Mode,
}

impl Func {
    /// The function of a call with `n` arguments, or why it is refused.
    pub fn of(name: &str) -> Option<Func> {
        Some(match name {
            "mean" => Func::Mean,
            "median" => Func::Median,
            "count" => Func::Count,
            "sum" => Func::Sum,
            "min" => Func::Min,
            "max" => Func::Max,
            "first" => Func::First,
            "last" => Func::Last,
            "spread" => Func::Spread,
            "stddev" => Func::Stddev,
            "distinct" => Func::Distinct,
            "mode" => Func::Mode,
            _ => return None,
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Func::Mean => "mean",
            Func::Median => "median",
            Func::Count | Func::CountDistinct => "count",
            Func::Sum => "sum",
            Func::Min => "min",
            Func::Max => "max",
            Func::First => "first",
            Func::Last => "last",
            Func::Spread => "spread",
            Func::Stddev => "stddev",
            Func::Percentile(_) => "percentile",
            Func::Distinct => "distinct",
            Func::Mode => "mode",
        }
    }

    /// Selectors pick one reading; alone in a statement without `GROUP BY time`, the row takes
    /// that reading's time.
    pub fn is_selector(&self) -> bool {
        matches!(self, Func::Min | Func::Max | Func::First | Func::Last | Func::Percentile(_))
    }

    /// Answerable from the stores' rollups (count, min, max, sum, first and last per step).
    /// What of a step's statistics the function reads, when [`Func::from_rollups`].
    pub fn needs(&self) -> Need {
        let none = Need::COUNT;
        match self {
            Func::Mean | Func::Sum => Need { sum: true, ..none },
            Func::Min | Func::Max | Func::Spread => Need { extremes: true, ..none },
            Func::First | Func::Last => Need { edges: true, ..none },
            Func::Count => none,
            _ => Need::ALL,
        }
    }

    pub fn from_rollups(&self) -> bool {
        matches!(
            self,
            Func::Mean
                | Func::Count
                | Func::Sum
                | Func::Min
                | Func::Max
                | Func::Spread
                | Func::First
                | Func::Last
        )
    }

    /// Which values the function takes: `count`, `first`, `last` and `distinct` any,
    /// `min`/`max` numbers and booleans, the others numbers only.
    pub fn accepts(&self, v: &FieldValue) -> bool {
        let any_value = matches!(
            self,
            Func::Count
                | Func::First
                | Func::Last
                | Func::Distinct
                | Func::CountDistinct
                | Func::Mode
        );
        match v {
            FieldValue::Float(_) | FieldValue::Int(_) | FieldValue::UInt(_) => true,
            FieldValue::Bool(_) => any_value || matches!(self, Func::Min | Func::Max),
            FieldValue::Str(_) => any_value,
        }
    }
}

/// A number as InfluxDB keeps it: integer fields stay integers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(i64),
    Float(f64),
}

impl Num {
    pub fn of(v: &FieldValue) -> Option<Num> {
        match *v {
            FieldValue::Float(f) => Some(Num::Float(f)),
            FieldValue::Int(i) => Some(Num::Int(i)),
            FieldValue::UInt(u) => Some(i64::try_from(u).map_or(Num::Float(u as f64), Num::Int)),
            FieldValue::Bool(_) | FieldValue::Str(_) => None,
        }
    }

    pub fn f(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    fn json(self) -> Value {
        match self {
            Num::Int(i) => Value::from(i),
            Num::Float(f) => float(f),
        }
    }

    fn lt(self, other: Num) -> bool {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a < b,
            _ => self.f() < other.f(),
        }
    }
}

/// JSON has no NaN or infinity; InfluxDB leaves such values out as null.
pub fn float(f: f64) -> Value {
    // Not `map_or`: its `Value::Null`, made before it is known to be needed, was dropped by
    // a call for every number.
    match serde_json::Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None => Value::Null,
    }
}

pub fn field_json(v: &FieldValue) -> Value {
    match v {
        FieldValue::Bool(b) => Value::Bool(*b),
        FieldValue::Str(s) => Value::String(s.clone()),
        other => Num::of(other).map_or(Value::Null, Num::json),
    }
}

/// One function's state over one field in one window.
#[derive(Clone, Debug)]
pub enum Acc {
    Count(u64),
    /// Sum and mean: integer sums stay exact while every value is an integer.
    Sum {
        int: i128,
        float: f64,
        n: u64,
        all_int: bool,
    },
    /// Min and max: numbers, or booleans (`false` < `true`).
    Extreme {
        best: Option<(FieldValue, TimestampMs)>,
        max: bool,
    },
    Edge {
        best: Option<(FieldValue, TimestampMs)>,
        last: bool,
    },
    Spread {
        min: Num,
        max: Num,
        seen: bool,
    },
    /// Percentile keeps the values, as numbers of their field's type, with their times.
    Values(Vec<(Num, TimestampMs)>),
    /// Median and stddev keep the values as floats (what they compute with), a third of the
    /// memory of [`Acc::Values`] to hold, grow and select from.
    Floats(Vec<f64>),
    /// Each value with the time it first appeared: InfluxDB lists them in that order.
    Distinct(Vec<(FieldValue, TimestampMs)>),
    /// Every value with its time and series; counted when the window is finished.
    Mode(Vec<ModePoint>),
    /// A window of kept values answered as soon as it was complete (see [`Acc::seal`]).
    Answered(Option<(Value, Option<TimestampMs>)>),
}

impl Acc {
    pub fn new(func: Func) -> Acc {
        match func {
            Func::Count => Acc::Count(0),
            Func::Sum | Func::Mean => Acc::Sum { int: 0, float: 0.0, n: 0, all_int: true },
            Func::Min | Func::Max => Acc::Extreme { best: None, max: func == Func::Max },
            Func::First | Func::Last => Acc::Edge { best: None, last: func == Func::Last },
            Func::Spread => Acc::Spread { min: Num::Int(0), max: Num::Int(0), seen: false },
            Func::Median | Func::Stddev => Acc::Floats(Vec::new()),
            Func::Percentile(_) => Acc::Values(Vec::new()),
            Func::Distinct | Func::CountDistinct => Acc::Distinct(Vec::new()),
            Func::Mode => Acc::Mode(Vec::new()),
        }
    }

    /// Adds one value (the caller checked [`Func::accepts`]). Returns whether a selector now
    /// holds this value, so the caller can keep the reading it came from.
    pub fn push(&mut self, ts: TimestampMs, v: &FieldValue) -> bool {
        self.push_from(0, ts, v)
    }

    /// [`Acc::push`] of a value from the `series`-th series of its group (in key order), which
    /// `mode()` needs to meet the values in InfluxDB's order ([`arrange_modes`]).
    pub fn push_from(&mut self, series: u32, ts: TimestampMs, v: &FieldValue) -> bool {
        let num = Num::of(v);
        match self {
            Acc::Count(n) => *n += 1,
            Acc::Sum { int, float, n, all_int } => {
                let Some(num) = num else { return false };
                *n += 1;
                *float += num.f();
                match num {
                    Num::Int(i) => *int += i128::from(i),
                    Num::Float(_) => *all_int = false,
                }
            }
            Acc::Extreme { best, max } => {
                let better = match best {
                    None => true,
                    Some((b, bt)) => match order(b, v) {
                        Some(std::cmp::Ordering::Less) => *max,
                        Some(std::cmp::Ordering::Greater) => !*max,
                        // Equal values: the earlier reading, as InfluxDB picks.
                        Some(std::cmp::Ordering::Equal) => ts < *bt,
                        None => false,
                    },
                };
                if better {
                    *best = Some((v.clone(), ts));
                }
                return better;
            }
            Acc::Edge { best, last } => {
                let better =
                    best.as_ref().is_none_or(|(b, bt)| edge_better(*last, (b, *bt), (v, ts)));
                if better {
                    *best = Some((v.clone(), ts));
                }
                return better;
            }
            Acc::Spread { min, max, seen } => {
                let Some(num) = num else { return false };
                if !*seen || num.lt(*min) {
                    *min = num;
                }
                if !*seen || max.lt(num) {
                    *max = num;
                }
                *seen = true;
            }
            Acc::Floats(vs) => {
                if let Some(num) = num {
                    vs.push(num.f());
                }
            }
            Acc::Values(vs) => {
                if let Some(num) = num {
                    vs.push((num, ts));
                }
            }
            Acc::Mode(vs) => vs.push(ModePoint { value: v.clone(), ts, series }),
            Acc::Distinct(vs) => match vs.iter_mut().find(|(x, _)| x == v) {
                Some((_, first)) => *first = (*first).min(ts),
                None => vs.push((v.clone(), ts)),
            },
            // Slices are whole windows: none is read again once it is answered.
            Acc::Answered(_) => debug_assert!(false, "a value for a window already answered"),
        }
        false
    }

    /// Adds one hour's (or step's) statistics: only for functions where [`Func::from_rollups`].
    pub fn push_stats(&mut self, s: &FieldStats, integer: bool, start: TimestampMs) {
        let num = |f: f64| {
            if integer && f.fract() == 0.0 && f.abs() < 9.0e15 {
                Num::Int(f as i64)
            } else {
                Num::Float(f)
            }
        };
        match self {
            Acc::Count(n) => *n += s.count,
            Acc::Sum { int, float, n, all_int } => {
                *n += s.count;
                *float += s.sum;
                match num(s.sum) {
                    Num::Int(i) => *int += i128::from(i),
                    Num::Float(_) => *all_int = false,
                }
            }
            Acc::Extreme { best, max } => {
                let v = match num(if *max { s.max } else { s.min }) {
                    Num::Int(i) => FieldValue::Int(i),
                    Num::Float(f) => FieldValue::Float(f),
                };
                let better = best.as_ref().is_none_or(|(b, _)| {
                    order(b, &v)
                        == Some(if *max {
                            std::cmp::Ordering::Less
                        } else {
                            std::cmp::Ordering::Greater
                        })
                });
                if better {
                    *best = Some((v, start));
                }
            }
            Acc::Spread { min, max, seen } => {
                let (lo, hi) = (num(s.min), num(s.max));
                if !*seen || lo.lt(*min) {
                    *min = lo;
                }
                if !*seen || max.lt(hi) {
                    *max = hi;
                }
                *seen = true;
            }
            Acc::Edge { best, last } => {
                let Some((t, f)) = (if *last { s.last } else { s.first }) else { return };
                let v = match num(f) {
                    Num::Int(i) => FieldValue::Int(i),
                    Num::Float(f) => FieldValue::Float(f),
                };
                let better =
                    best.as_ref().is_none_or(|(b, bt)| edge_better(*last, (b, *bt), (&v, t)));
                if better {
                    *best = Some((v, t));
                }
            }
            Acc::Values(_)
            | Acc::Floats(_)
            | Acc::Distinct(_)
            | Acc::Mode(_)
            | Acc::Answered(_) => {}
        }
    }

    /// The function's value, and the time of the reading a selector picked. `None` when the
    /// window had nothing this function counts.
    pub fn finish(&mut self, func: Func) -> Option<(Value, Option<TimestampMs>)> {
        match self {
            Acc::Count(n) => Some((Value::from(*n), None)),
            Acc::Sum { n: 0, .. } => None,
            Acc::Sum { int, float: sum, n, all_int } => Some((
                match func {
                    Func::Mean => float_mean(*all_int, *int, *sum, *n),
                    _ if *all_int => i64::try_from(*int).map_or_else(|_| float(*sum), Value::from),
                    _ => float(*sum),
                },
                None,
            )),
            Acc::Extreme { best, .. } => best.as_ref().map(|(v, t)| (field_json(v), Some(*t))),
            Acc::Edge { best, .. } => best.as_ref().map(|(v, t)| (field_json(v), Some(*t))),
            Acc::Spread { seen: false, .. } => None,
            Acc::Spread { min, max, .. } => Some((
                match (*min, *max) {
                    (Num::Int(a), Num::Int(b)) => b.checked_sub(a).map_or(Value::Null, Value::from),
                    (a, b) => float(b.f() - a.f()),
                },
                None,
            )),
            Acc::Values(vs) if vs.is_empty() => None,
            Acc::Values(vs) => percentile(func, vs),
            Acc::Floats(vs) if vs.is_empty() => None,
            Acc::Floats(vs) => floats(func, vs),
            Acc::Mode(vs) => mode(vs).map(|v| (field_json(&v), None)),
            Acc::Distinct(vs) if func == Func::CountDistinct => Some((Value::from(vs.len()), None)),
            Acc::Distinct(vs) if vs.is_empty() => None,
            // Each distinct value becomes its own row; the caller asks `distinct_values`.
            Acc::Distinct(_) => Some((Value::Null, None)),
            Acc::Answered(cell) => cell.clone(),
        }
    }

    /// Answers a window of kept values (`median`, `percentile`, `stddev`) whose values have
    /// all been pushed, and lets the values go (a list of floats into `lists`, emptied); the
    /// number let go.
    pub fn seal(&mut self, func: Func, lists: &mut Vec<Vec<f64>>) -> usize {
        let held = match self {
            Acc::Values(vs) => vs.len(),
            Acc::Floats(vs) => vs.len(),
            _ => return 0,
        };
        let cell = self.finish(func);
        lists.extend(std::mem::replace(self, Acc::Answered(cell)).into_list());
        held
    }

    /// The list of a window that keeps floats (`median`, `stddev`), emptied, to fill again.
    pub fn into_list(self) -> Option<Vec<f64>> {
        match self {
            Acc::Floats(mut vs) => {
                vs.clear();
                Some(vs)
            }
            _ => None,
        }
    }

    pub fn distinct_values(&self) -> Vec<Value> {
        match self {
            Acc::Distinct(vs) => {
                let mut by_time: Vec<&(FieldValue, TimestampMs)> = vs.iter().collect();
                by_time.sort_by_key(|(_, t)| *t);
                by_time.into_iter().map(|(v, _)| field_json(v)).collect()
            }
            _ => Vec::new(),
        }
    }
}

/// One value `mode()` counts, with the series it came from.
#[derive(Clone, Debug)]
pub struct ModePoint {
    value: FieldValue,
    ts: TimestampMs,
    series: u32,
}

/// Puts each window's `mode()` values (`windows`: one group's, for one call and field) in the
/// order InfluxDB 1.6's reducer meets them, since among equally frequent values its pick
/// depends on that order. It reads them from a sorted merge of the group's series: a heap (Go's
/// `container/heap`) of the series ordered by the time of their next value and nothing else,
/// over the whole range, so values at one time come in an order the heap's history decides.
/// With `ORDER BY time DESC` the series start from the last and times run backwards.
pub fn arrange_modes(windows: &mut BTreeMap<TimestampMs, Acc>, descending: bool) {
    // Per series, its values as (time, window, place in the window).
    let mut by_series: BTreeMap<u32, Vec<(TimestampMs, TimestampMs, usize)>> = BTreeMap::new();
    for (start, acc) in windows.iter() {
        let Acc::Mode(points) = acc else { return };
        for (k, p) in points.iter().enumerate() {
            by_series.entry(p.series).or_default().push((p.ts, *start, k));
        }
    }
    let series: Vec<Vec<(TimestampMs, TimestampMs, usize)>> = by_series
        .into_values()
        .map(|mut values| {
            values.sort_by_key(|v| v.0);
            values
        })
        .collect();
    let merged = go_order::sorted_merge(series, descending, |a, b| a.0.cmp(&b.0));
    let place: BTreeMap<(TimestampMs, usize), usize> =
        merged.into_iter().enumerate().map(|(at, (_, start, k))| ((start, k), at)).collect();
    for (start, acc) in windows.iter_mut() {
        if let Acc::Mode(points) = acc {
            let mut placed: Vec<(usize, ModePoint)> = std::mem::take(points)
                .into_iter()
                .enumerate()
                .map(|(k, p)| (place.get(&(*start, k)).copied().unwrap_or(usize::MAX), p))
                .collect();
            placed.sort_by_key(|(at, _)| *at);
            *points = placed.into_iter().map(|(_, p)| p).collect();
        }
    }
}

/// The most frequent value, as InfluxDB 1.6 picks it from values in the order its reducer met
/// them ([`arrange_modes`]): sorted by value with Go's `sort.Sort` (not stable), runs counted,
/// and of two runs equally long the later one wins unless it starts after the time of the
/// earlier one's last value.
fn mode(points: &mut [ModePoint]) -> Option<FieldValue> {
    use std::cmp::Ordering;
    let rank = |v: &FieldValue| match v {
        FieldValue::Bool(_) => 0,
        FieldValue::Float(_) | FieldValue::Int(_) | FieldValue::UInt(_) => 1,
        FieldValue::Str(_) => 2,
    };
    let by_value = |a: &FieldValue, b: &FieldValue| match (a, b) {
        (FieldValue::Str(x), FieldValue::Str(y)) => x.cmp(y),
        _ => order(a, b).unwrap_or_else(|| rank(a).cmp(&rank(b))),
    };
    // Go's `Less` for booleans is `!a`, true even between two `false`s.
    let less = |a: &ModePoint, b: &ModePoint| match (&a.value, &b.value) {
        (FieldValue::Bool(x), FieldValue::Bool(_)) => !x,
        (x, y) => by_value(x, y) == Ordering::Less,
    };
    go_order::sort(points, &less);
    let (first, rest) = points.split_first()?;
    let (mut most, mut most_freq, mut most_time) = (&first.value, 1usize, first.ts);
    let (mut current, mut freq, mut current_time) = (&first.value, 1usize, first.ts);
    for p in rest {
        if by_value(&p.value, current) != Ordering::Equal {
            (current, freq, current_time) = (&p.value, 1, p.ts);
            continue;
        }
        freq += 1;
        if most_freq > freq || (most_freq == freq && current_time > most_time) {
            continue;
        }
        (most, most_freq, most_time) = (&p.value, freq, p.ts);
    }
    Some(most.clone())
}

/// Whether `new` replaces `held` as the first (or `last`) value: it is earlier (later), or at
/// the same time larger, as InfluxDB picks among series that wrote at the same time.
fn edge_better(
    last: bool,
    (held, held_ts): (&FieldValue, TimestampMs),
    (new, ts): (&FieldValue, TimestampMs),
) -> bool {
    if ts != held_ts {
        return (ts > held_ts) == last;
    }
    match (held, new) {
        (FieldValue::Str(a), FieldValue::Str(b)) => b > a,
        _ => order(held, new) == Some(std::cmp::Ordering::Less),
    }
}

/// Numbers by value, booleans `false` < `true`; anything else does not compare.
fn order(a: &FieldValue, b: &FieldValue) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (FieldValue::Bool(a), FieldValue::Bool(b)) => Some(a.cmp(b)),
        _ => match (Num::of(a)?, Num::of(b)?) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(&b)),
            (a, b) => a.f().partial_cmp(&b.f()),
        },
    }
}

fn float_mean(all_int: bool, int: i128, float_sum: f64, n: u64) -> Value {
    // An integer sum is exact; dividing it once keeps the mean as exact as InfluxDB's.
    let sum = if all_int { i128_to_f64(int) } else { float_sum };
    float(sum / n as f64)
}

/// The nearest-rank percentile of a window's values, with the picked value's time.
fn percentile(func: Func, vs: &mut [(Num, TimestampMs)]) -> Option<(Value, Option<TimestampMs>)> {
    let Func::Percentile(p) = func else { return None };
    vs.sort_by(|a, b| a.0.f().total_cmp(&b.0.f()).then(a.1.cmp(&b.1)));
    let i = (vs.len() as f64 * p / 100.0 + 0.5).floor() as i64 - 1;
    let (v, t) = *vs.get(usize::try_from(i).ok()?)?;
    Some((v.json(), Some(t)))
}

/// Median and stddev of a window's values (at least one).
fn floats(func: Func, vs: &mut Vec<f64>) -> Option<(Value, Option<TimestampMs>)> {
    match func {
        Func::Median => {
            // The middle values the sorted values would have, selected rather than sorted:
            // values equal in this order have the same bits, so either gives the same answer.
            // Selected as integers that order as `f64::total_cmp` orders the floats, since
            // comparing is most of what a selection does; the values stay in their vector.
            let mut keys: Vec<i64> = std::mem::take(vs).into_iter().map(total_order).collect();
            let n = keys.len();
            let (below, mid, _) = keys.select_nth_unstable(n / 2);
            let b = from_total_order(*mid);
            let v = if n % 2 == 1 {
                b
            } else {
                let a = from_total_order(*below.iter().max().expect("n >= 2"));
                a + (b - a) / 2.0
            };
            *vs = keys.into_iter().map(from_total_order).collect();
            Some((float(v), None))
        }
        Func::Stddev => {
            if vs.len() < 2 {
                return Some((Value::Null, None));
            }
            let n = vs.len() as f64;
            let mean = vs.iter().sum::<f64>() / n;
            let var = vs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
            Some((float(var.sqrt()), None))
        }
        _ => None,
    }
}

/// An integer for `v` that orders as [`f64::total_cmp`] orders the floats: the bits, with
/// those after the sign flipped for a negative number (whose larger magnitudes are smaller).
fn total_order(v: f64) -> i64 {
    let bits = v.to_bits() as i64;
    bits ^ (((bits >> 63) as u64) >> 1) as i64
}

/// The float of a [`total_order`] integer (the same flips undo themselves).
fn from_total_order(key: i64) -> f64 {
    f64::from_bits((key ^ (((key >> 63) as u64) >> 1) as i64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(func: Func, vs: &[FieldValue]) -> Option<Value> {
        let mut acc = Acc::new(func);
        for (i, v) in vs.iter().enumerate() {
            acc.push(i as i64, v);
        }
        acc.finish(func).map(|(v, _)| v)
    }

    #[test]
    fn integer_fields_stay_integers_where_influxdb_keeps_them() {
        let ints = [FieldValue::Int(4), FieldValue::Int(-1), FieldValue::Int(9)];
        assert_eq!(run(Func::Sum, &ints), Some(Value::from(12)));
        assert_eq!(run(Func::Max, &ints), Some(Value::from(9)));
        assert_eq!(run(Func::Spread, &ints), Some(Value::from(10)));
        assert_eq!(run(Func::Mean, &ints), Some(float(4.0)));
        assert_eq!(run(Func::Median, &ints), Some(float(4.0)));
        assert_eq!(run(Func::Count, &[FieldValue::Str("x".into())]), Some(Value::from(1)));
        assert_eq!(run(Func::Sum, &[FieldValue::Str("x".into())]), None);
    }

    #[test]
    fn percentile_picks_the_nearest_rank() {
        let vs: Vec<FieldValue> = (1..=10).map(|i| FieldValue::Float(i as f64)).collect();
        assert_eq!(run(Func::Percentile(90.0), &vs), Some(float(9.0)));
        assert_eq!(run(Func::Percentile(50.0), &vs), Some(float(5.0)));
        assert_eq!(run(Func::Percentile(0.0), &vs), None);
        assert_eq!(run(Func::Median, &vs), Some(float(5.5)));
    }

    use proptest::strategy::Strategy;

    proptest::proptest! {
        /// The median is selected, not sorted: it must be the sorted values' middle, bit for
        /// bit, with repeated values, negative zeros and integers among the floats.
        #[test]
        fn median_is_the_sorted_middle(
            vs in proptest::collection::vec(
                proptest::prop_oneof![
                    (-4i64..4).prop_map(|v| FieldValue::Float(v as f64 * 0.5)),
                    proptest::num::f64::NORMAL.prop_map(FieldValue::Float),
                    proptest::strategy::Just(FieldValue::Float(-0.0)),
                    (-3i64..3).prop_map(FieldValue::Int),
                ],
                1..60,
            )
        ) {
            let mut sorted: Vec<f64> = vs.iter().filter_map(FieldValue::as_f64).collect();
            sorted.sort_by(f64::total_cmp);
            let n = sorted.len();
            let want = if n % 2 == 1 {
                sorted[n / 2]
            } else {
                let (a, b) = (sorted[n / 2 - 1], sorted[n / 2]);
                a + (b - a) / 2.0
            };
            proptest::prop_assert_eq!(run(Func::Median, &vs), Some(float(want)));
        }
    }

    proptest::proptest! {
        /// Any two floats (NaNs, infinities, zeros of both signs) compare as their integers
        /// do, and each comes back bit for bit.
        #[test]
        fn total_order_integers_order_as_the_floats(a in proptest::num::f64::ANY, b in proptest::num::f64::ANY) {
            proptest::prop_assert_eq!(total_order(a).cmp(&total_order(b)), a.total_cmp(&b));
            proptest::prop_assert_eq!(from_total_order(total_order(a)).to_bits(), a.to_bits());
        }
    }

    #[test]
    fn mode_breaks_ties_as_influxdb_does() {
        let i = FieldValue::Int;
        let points = |vs: &[(i64, i64)]| -> Vec<ModePoint> {
            vs.iter().map(|&(v, ts)| ModePoint { value: i(v), ts, series: 0 }).collect()
        };
        // 0 and 1 twice each: 1 starts (t=2) before the last 0 (t=3), so 1 wins.
        assert_eq!(mode(&mut points(&[(0, 1), (1, 2), (0, 3), (1, 4)])), Some(i(1)));
        // 1 starts after the last 0: 0 keeps it.
        assert_eq!(mode(&mut points(&[(0, 1), (0, 2), (1, 3), (1, 4)])), Some(i(0)));
        assert_eq!(mode(&mut points(&[(7, 1), (3, 2), (3, 3)])), Some(i(3)));
        // The order the values come in decides between equal runs: the same values read in
        // the other order.
        assert_eq!(mode(&mut points(&[(1, 4), (0, 3), (1, 2), (0, 1)])), Some(i(0)));
    }

    #[test]
    fn first_and_last_are_by_time_not_arrival() {
        let mut acc = Acc::new(Func::First);
        acc.push(20, &FieldValue::Bool(true));
        acc.push(10, &FieldValue::Bool(false));
        assert_eq!(acc.finish(Func::First), Some((Value::Bool(false), Some(10))));
    }

    /// Values at the same time (series that wrote together): InfluxDB's first and last both
    /// take the largest, whatever the order they come in.
    #[test]
    fn first_and_last_take_the_largest_of_equal_times() {
        for func in [Func::First, Func::Last] {
            for values in [[1.5, 4.0, -2.0], [4.0, -2.0, 1.5]] {
                let mut acc = Acc::new(func);
                for v in values {
                    acc.push(10, &FieldValue::Float(v));
                }
                assert_eq!(acc.finish(func), Some((Value::from(4.0), Some(10))), "{func:?}");
            }
            let mut acc = Acc::new(func);
            acc.push(10, &FieldValue::Str("b".into()));
            acc.push(10, &FieldValue::Str("a".into()));
            assert_eq!(acc.finish(func), Some((Value::from("b"), Some(10))));
        }
    }
}
