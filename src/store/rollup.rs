//! What rollups ask and answer: a query, per-step statistics of numeric fields
//! ([`FieldStats`]) as rows or field by field, which of them a statement needs, and each
//! step's values for statistics that need them all.

use std::collections::BTreeMap;

use crate::model::TimestampMs;

/// Per-step statistics of one sensor's numeric fields over `from <= ts < to`. Steps are aligned
/// to multiples of `step_ms` since the epoch. `fields` of `None` means every numeric field.
#[derive(Clone, Debug, PartialEq)]
pub struct RollupQuery {
    pub sensor: String,
    pub from: TimestampMs,
    pub to: TimestampMs,
    pub step_ms: i64,
    pub fields: Option<Vec<String>>,
}

/// Statistics of one numeric field over a set of readings (a bucket, a step, or a single
/// reading).
///
/// `first` and `last` are the value with the smallest and the largest timestamp among the
/// counted values, with that timestamp (InfluxQL's `first()` / `last()`). Several values at the
/// same timestamp are ordered by value: `first` takes the smallest of them, `last` the largest
/// (equal values: the one already held stays). That is the order MongoDB gives the `{t, v}`
/// documents it `$min`s and `$max`es, and it does not depend on the order in which readings
/// or buckets are merged, so every store answers the same whatever the arrival order.
///
/// They are `None` only when (part of) the statistics come from a bucket written before
/// schema 3, which did not record them: then the readings are the only way to know, and a
/// caller that needs them must read those (see [`FieldStats::merge`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FieldStats {
    pub count: u64,
    pub min: f64,
    pub max: f64,
    pub sum: f64,
    pub first: Option<(TimestampMs, f64)>,
    pub last: Option<(TimestampMs, f64)>,
}

impl FieldStats {
    /// The statistics of one value at `ts`.
    pub fn of(ts: TimestampMs, v: f64) -> Self {
        FieldStats { count: 1, min: v, max: v, sum: v, first: Some((ts, v)), last: Some((ts, v)) }
    }

    /// Adds `other`'s values to these statistics.
    ///
    /// `first`/`last` of the result are `None` when either side's are: a side without them
    /// (a pre-schema-3 bucket) may hold a value earlier (later) than anything the other side
    /// knows, so taking the known side's would be a silently wrong answer, while `None`
    /// tells the caller to read the readings. (Bucket statistics carry no per-field time range
    /// that could prove the unknown side cannot win, so no finer rule is possible here.)
    pub fn merge(&mut self, other: &FieldStats) {
        self.count += other.count;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
        self.first = match (self.first, other.first) {
            (Some(a), Some(b)) => Some(if precedes(b, a) { b } else { a }),
            _ => None,
        };
        self.last = match (self.last, other.last) {
            (Some(a), Some(b)) => Some(if precedes(a, b) { b } else { a }),
            _ => None,
        };
    }

    /// Adds one value at `ts`: what merging [`FieldStats::of`] does, without making it.
    #[inline]
    pub fn push(&mut self, ts: TimestampMs, v: f64) {
        self.count += 1;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v;
        if let Some(first) = self.first
            && precedes((ts, v), first)
        {
            self.first = Some((ts, v));
        }
        if let Some(last) = self.last
            && precedes(last, (ts, v))
        {
            self.last = Some((ts, v));
        }
    }

    /// [`FieldStats::push_run`] keeping the count and what `need` names.
    #[inline]
    pub fn push_run_of(&mut self, ts: &[TimestampMs], values: &[f64], need: Need) {
        if need == Need::ALL {
            return self.push_run(ts, values);
        }
        self.count += values.len() as u64;
        if need.sum {
            self.sum = values.iter().fold(self.sum, |sum, v| sum + v);
        }
        if need.extremes {
            (self.min, self.max) = extremes(values, (self.min, self.max));
        }
        if need.edges {
            self.push_edges(ts, values);
        }
    }

    /// Adds values at ascending times (at least one), as [`FieldStats::push`] of each would:
    /// count, sum, minimum and maximum in one tight loop, first and last from the run's ends.
    pub fn push_run(&mut self, ts: &[TimestampMs], values: &[f64]) {
        debug_assert!(!ts.is_empty() && ts.len() == values.len());
        debug_assert!(ts.windows(2).all(|w| w[0] <= w[1]));
        self.sum = values.iter().fold(self.sum, |sum, v| sum + v);
        (self.min, self.max) = extremes(values, (self.min, self.max));
        self.count += values.len() as u64;
        self.push_edges(ts, values);
    }

    /// [`FieldStats::push_run_of`] of the values `scaled[i] / scale` (a decimal column's),
    /// each divided only where it is kept: the extremes and the edges are those of the
    /// integers, divided once (the division keeps their order), so they are the values' bit
    /// for bit. The sum is the integers' exact sum divided once, which rounds once where
    /// adding each value rounds at every step: it may differ from that in the last bits.
    pub fn push_scaled_run_of(
        &mut self,
        ts: &[TimestampMs],
        scaled: &[i64],
        scale: f64,
        need: Need,
    ) {
        debug_assert!(!ts.is_empty() && ts.len() == scaled.len());
        let value = |s: i64| s as f64 / scale;
        self.count += scaled.len() as u64;
        if need.sum {
            let total: i128 = scaled.iter().map(|&s| i128::from(s)).sum();
            self.sum += i128_to_f64(total) / scale;
        }
        if need.extremes {
            let (lo, hi) = int_extremes(scaled);
            (self.min, self.max) = extremes(&[value(lo), value(hi)], (self.min, self.max));
        }
        if need.edges {
            let (earliest, latest) = edge_runs(ts);
            let lowest = int_extremes(&scaled[..earliest]).0;
            let highest = int_extremes(&scaled[scaled.len() - latest..]).1;
            self.push_edge_values(ts, value(lowest), value(highest));
        }
    }

    #[inline]
    fn push_edges(&mut self, ts: &[TimestampMs], values: &[f64]) {
        let (earliest, latest) = edge_runs(ts);
        let lowest = values[..earliest].iter().copied().fold(f64::INFINITY, f64::min);
        let highest =
            values[values.len() - latest..].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        self.push_edge_values(ts, lowest, highest);
    }

    /// Of the values at the earliest of `ts`, the smallest (`lowest`) comes first; at the
    /// latest, the largest (`highest`) last.
    #[inline]
    fn push_edge_values(&mut self, ts: &[TimestampMs], lowest: f64, highest: f64) {
        let (t0, tn) = (ts[0], ts[ts.len() - 1]);
        self.first = self.first.map(|a| if precedes((t0, lowest), a) { (t0, lowest) } else { a });
        self.last = self.last.map(|a| if precedes(a, (tn, highest)) { (tn, highest) } else { a });
    }

    pub fn mean(&self) -> f64 {
        self.sum / self.count as f64
    }
}

/// The smallest and largest of `values` and `(min, max)`. Stored values are finite (writes
/// refuse NaN and infinities), so a plain comparison serves: kept in four lanes, the compiler
/// compares two values at a time, where `f64::min` and `max`, which step over NaN, kept the
/// loop to one value at a time, each waiting for the one before.
#[inline]
fn extremes(values: &[f64], (min, max): (f64, f64)) -> (f64, f64) {
    const LANES: usize = 4;
    let (mut lo, mut hi) = ([min; LANES], [max; LANES]);
    let mut quads = values.chunks_exact(LANES);
    for quad in &mut quads {
        for i in 0..LANES {
            lo[i] = if quad[i] < lo[i] { quad[i] } else { lo[i] };
            hi[i] = if quad[i] > hi[i] { quad[i] } else { hi[i] };
        }
    }
    let fold = |(min, max): (f64, f64), (l, h): (f64, f64)| {
        (if l < min { l } else { min }, if h > max { h } else { max })
    };
    let lanes = lo.into_iter().zip(hi).fold((min, max), fold);
    quads.remainder().iter().map(|&v| (v, v)).fold(lanes, fold)
}

/// The smallest and largest of `values` (at least one), in four lanes as [`extremes`] keeps
/// them: one pair of comparisons would wait for the one before.
#[inline]
fn int_extremes(values: &[i64]) -> (i64, i64) {
    const LANES: usize = 4;
    let (mut lo, mut hi) = ([i64::MAX; LANES], [i64::MIN; LANES]);
    let mut quads = values.chunks_exact(LANES);
    for quad in &mut quads {
        for i in 0..LANES {
            lo[i] = lo[i].min(quad[i]);
            hi[i] = hi[i].max(quad[i]);
        }
    }
    let lanes =
        lo.into_iter().zip(hi).fold((i64::MAX, i64::MIN), |(a, b), (l, h)| (a.min(l), b.max(h)));
    quads.remainder().iter().fold(lanes, |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// How many of the ascending `ts` (at least one) are at the earliest time, and how many at
/// the latest.
#[inline]
fn edge_runs(ts: &[TimestampMs]) -> (usize, usize) {
    let (t0, tn) = (ts[0], ts[ts.len() - 1]);
    let earliest = ts.iter().take_while(|&&t| t == t0).count();
    let latest = ts.iter().rev().take_while(|&&t| t == tn).count();
    (earliest, latest)
}

/// Whether `a` comes strictly before `b` in the order of [`FieldStats::first`] and
/// [`FieldStats::last`]: by timestamp, then by value.
fn precedes(a: (TimestampMs, f64), b: (TimestampMs, f64)) -> bool {
    a.0 < b.0 || (a.0 == b.0 && a.1 < b.1)
}

/// One step of a rollup; steps without readings are omitted.
#[derive(Clone, Debug, PartialEq)]
pub struct RollupRow {
    pub start: TimestampMs,
    pub fields: BTreeMap<String, FieldStats>,
}

/// What of a step's [`FieldStats`] a caller of [`Store::rollup_steps`] reads beside the count.
/// A store that folds readings may leave the others unkept: their values are then not the
/// step's. Statistics a store merely hands on (a bucket's, an hour's) stay whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub sum: bool,
    /// `min` and `max`.
    pub extremes: bool,
    /// `first` and `last`.
    pub edges: bool,
}

impl Need {
    pub const ALL: Need = Need { sum: true, extremes: true, edges: true };
    pub const COUNT: Need = Need { sum: false, extremes: false, edges: false };

    pub fn and(self, other: Need) -> Need {
        Need {
            sum: self.sum || other.sum,
            extremes: self.extremes || other.extremes,
            edges: self.edges || other.edges,
        }
    }
}

/// A sensor's numbers step by step: per numeric field, its steps ascending, each with its
/// values in no set order. What a statistic that needs every value but not their order (a
/// median) folds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepValues {
    pub fields: Vec<(String, Vec<StepOfValues>)>,
}

/// A step's start and its values.
pub type StepOfValues = (TimestampMs, Vec<f64>);

impl StepValues {
    /// How many values it holds.
    pub fn held(&self) -> usize {
        self.fields.iter().flat_map(|(_, steps)| steps).map(|(_, values)| values.len()).sum()
    }

    /// Adds `values`, all of step `start`, to field `name`'s.
    pub fn add(&mut self, name: &str, start: TimestampMs, values: &[f64]) {
        add_to_step(field_of(&mut self.fields, name), start, values);
    }

    /// Adds every value of `other`, step by step: taken whole where nothing is held yet.
    pub fn merge(&mut self, other: StepValues) {
        if self.fields.is_empty() {
            *self = other;
            return;
        }
        for (name, steps) in other.fields {
            let into = field_of(&mut self.fields, &name);
            for (start, values) in steps {
                add_to_step(into, start, &values);
            }
        }
    }

    /// Forgets step `start` of every field, to gather it again.
    pub fn clear_step(&mut self, start: TimestampMs) {
        clear_step(&mut self.fields, start);
    }
}

/// Adds `values` to step `start` of `steps` (ascending), made where it is missing.
pub fn add_to_step(steps: &mut Vec<StepOfValues>, start: TimestampMs, values: &[f64]) {
    add_to_step_with_room(steps, start, values, 0, &mut Vec::new());
}

/// [`add_to_step`], a step made here with room for `room` values (at least `values`), where
/// the caller knows more are coming, and made of one of `lists` (lists whose values are done
/// with) while there is one. How many values of room it made beyond `values`.
pub fn add_to_step_with_room(
    steps: &mut Vec<StepOfValues>,
    start: TimestampMs,
    values: &[f64],
    room: usize,
    lists: &mut Vec<Vec<f64>>,
) -> usize {
    let room = room.max(values.len());
    let mut made = || {
        let mut held = lists.pop().unwrap_or_default();
        held.clear();
        held.reserve(room);
        held.extend_from_slice(values);
        (start, held)
    };
    match steps.last_mut() {
        Some((last, held)) if *last == start => {
            held.extend_from_slice(values);
            return 0;
        }
        Some((last, _)) if *last < start => steps.push(made()),
        None => steps.push(made()),
        Some(_) => match steps.binary_search_by_key(&start, |(s, _)| *s) {
            Ok(i) => {
                steps[i].1.extend_from_slice(values);
                return 0;
            }
            Err(i) => steps.insert(i, made()),
        },
    }
    room - values.len()
}

/// A rollup field by field: each field's steps ascending, one entry a step, steps without a
/// value of the field left out. What a caller that folds each field into windows of its own
/// wants, without a map of fields for every step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RollupSteps {
    pub fields: Vec<(String, Vec<(TimestampMs, FieldStats)>)>,
}

impl RollupSteps {
    pub fn of_rows(rows: Vec<RollupRow>) -> Self {
        let mut steps = RollupSteps::default();
        for row in rows {
            for (name, stats) in row.fields {
                steps.field(&name).push((row.start, stats));
            }
        }
        steps
    }

    /// The rows of [`Store::rollups`], ascending by step.
    pub fn into_rows(self) -> Vec<RollupRow> {
        let mut rows: BTreeMap<TimestampMs, BTreeMap<String, FieldStats>> = BTreeMap::new();
        for (name, steps) in self.fields {
            for (start, stats) in steps {
                rows.entry(start).or_default().insert(name.clone(), stats);
            }
        }
        rows.into_iter().map(|(start, fields)| RollupRow { start, fields }).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.iter().all(|(_, steps)| steps.is_empty())
    }

    /// Adds `stats` to the step `start` of field `name`, wherever that step falls.
    pub fn merge(&mut self, name: &str, start: TimestampMs, stats: &FieldStats) {
        let steps = self.field(name);
        match steps.binary_search_by_key(&start, |(s, _)| *s) {
            Ok(i) => steps[i].1.merge(stats),
            Err(i) => steps.insert(i, (start, *stats)),
        }
    }

    fn field(&mut self, name: &str) -> &mut Vec<(TimestampMs, FieldStats)> {
        field_of(&mut self.fields, name)
    }

    /// Forgets step `start` of every field, to count it again.
    pub fn clear_step(&mut self, start: TimestampMs) {
        clear_step(&mut self.fields, start);
    }
}

/// Removes step `start` from every field's ascending steps.
fn clear_step<T>(fields: &mut [(String, Vec<(TimestampMs, T)>)], start: TimestampMs) {
    for (_, steps) in fields {
        if let Ok(i) = steps.binary_search_by_key(&start, |(s, _)| *s) {
            steps.remove(i);
        }
    }
}

/// The steps of field `name` among `fields`, made (empty) when it has none yet.
fn field_of<'f, T>(fields: &'f mut Vec<(String, Vec<T>)>, name: &str) -> &'f mut Vec<T> {
    let i = match fields.iter().position(|(n, _)| n == name) {
        Some(i) => i,
        None => {
            fields.push((name.to_owned(), Vec::new()));
            fields.len() - 1
        }
    };
    &mut fields[i].1
}

/// `x as f64`, rounded the same way: converting an i128 is a library call, which the compiler
/// also makes where the result is not used, and an i64 is one instruction; sums of a window's
/// or a run's integers nearly always fit one.
pub fn i128_to_f64(x: i128) -> f64 {
    #[cold]
    #[inline(never)]
    fn wide(x: i128) -> f64 {
        x as f64
    }
    match i64::try_from(x) {
        Ok(x) => x as f64,
        Err(_) => wide(x),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn steps_are_made_with_the_room_asked_and_say_what_it_was() {
        let mut steps: Vec<StepOfValues> = Vec::new();
        assert_eq!(add_to_step_with_room(&mut steps, 120, &[1.0, 2.0], 10, &mut Vec::new()), 8);
        assert!(steps[0].1.capacity() >= 10);
        // Added to a step that is there: no room made.
        assert_eq!(add_to_step_with_room(&mut steps, 120, &[3.0], 50, &mut Vec::new()), 0);
        // A step made before one that is there, and one with less room than its values.
        assert_eq!(add_to_step_with_room(&mut steps, 60, &[4.0], 3, &mut Vec::new()), 2);
        assert_eq!(add_to_step_with_room(&mut steps, 180, &[5.0, 6.0], 1, &mut Vec::new()), 0);
        assert_eq!(add_to_step_with_room(&mut steps, 60, &[7.0], 9, &mut Vec::new()), 0);
        let want: Vec<StepOfValues> =
            vec![(60, vec![4.0, 7.0]), (120, vec![1.0, 2.0, 3.0]), (180, vec![5.0, 6.0])];
        assert_eq!(steps, want);
        let mut merged = StepValues::default();
        merged.add("v", 120, &[1.0]);
        merged.merge(StepValues {
            fields: vec![("v".into(), want), ("w".into(), vec![(0, vec![8.0])])],
        });
        assert_eq!(merged.held(), 9);
        assert_eq!(merged.fields[0].1[1], (120, vec![1.0, 1.0, 2.0, 3.0]));
    }

    #[test]
    fn wide_integers_round_as_a_cast_does() {
        let edges = [
            0,
            -1,
            (1 << 53) + 1,
            -(1 << 53) - 3,
            i128::from(i64::MAX),
            i128::from(i64::MIN),
            i128::from(i64::MAX) + 1,
            i128::from(i64::MIN) - 1,
            i128::MAX,
            i128::MIN,
            (1 << 80) + (1 << 27) + 1,
        ];
        for x in edges {
            assert_eq!(i128_to_f64(x).to_bits(), (x as f64).to_bits(), "{x}");
        }
    }

    proptest! {
        #[test]
        fn extremes_in_lanes_are_those_of_one_by_one(
            values in prop::collection::vec(-1e6f64..1e6, 0..40),
            start in -1e6f64..1e6,
        ) {
            let want = values.iter().fold((start, start), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            prop_assert_eq!(extremes(&values, (start, start)), want);
            let open = (f64::INFINITY, f64::NEG_INFINITY);
            let want = values.iter().fold(open, |(lo, hi), &v| (lo.min(v), hi.max(v)));
            prop_assert_eq!(extremes(&values, open), want);
        }
    }
}
