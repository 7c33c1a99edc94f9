//! One series' consecutive readings in columns, as the embedded store's chunks hold them: what a
//! range query writes its page from. Making a [`Reading`] of each (a vector of fields, a copy
//! of every name), passing it along and dropping it after the page wrote it was a large part of
//! a range query's work (docs/performance.md#range-pages-without-a-reading-per-row); a page
//! reads the values where the chunk's decoder put them.

use super::reading::Reading;
use super::time::TimestampMs;
use super::value::{FieldName, FieldValue, Fields};

/// Readings ascending by time. Each reading has a shape: the columns of its fields, in the
/// order the reading had them. A column holds the values of the readings that have its field,
/// in reading order. Only the readings `lo..hi` are the run's ([`Columns::keep`] narrows them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Columns {
    ts: Vec<TimestampMs>,
    names: Vec<FieldName>,
    shapes: Vec<Vec<usize>>,
    /// Per reading, its shape; empty when there is only one.
    shape_of: Vec<usize>,
    values: Vec<Vec<FieldValue>>,
    lo: usize,
    hi: usize,
}

/// Why [`Columns::new`] refused its parts: they do not describe readings.
#[derive(Debug, PartialEq, Eq)]
pub struct Mismatch(pub &'static str);

impl Columns {
    /// Checks that the parts fit together: shapes name existing columns, each reading has a
    /// shape, each column holds exactly one value per reading whose shape names it, and the
    /// timestamps do not fall.
    pub fn new(
        ts: Vec<TimestampMs>,
        names: Vec<FieldName>,
        shapes: Vec<Vec<usize>>,
        shape_of: Vec<usize>,
        values: Vec<Vec<FieldValue>>,
    ) -> Result<Columns, Mismatch> {
        if values.len() != names.len() {
            return Err(Mismatch("a column without its name or values"));
        }
        if shapes.iter().flatten().any(|&c| c >= names.len()) {
            return Err(Mismatch("a shape names a column that does not exist"));
        }
        if ts.windows(2).any(|w| w[1] < w[0]) {
            return Err(Mismatch("timestamps fall"));
        }
        let mut counts = vec![0usize; names.len()];
        if shape_of.is_empty() {
            match shapes.len() {
                0 if ts.is_empty() => {}
                1 => shapes[0].iter().for_each(|&c| counts[c] += ts.len()),
                _ => return Err(Mismatch("readings without their shapes")),
            }
        } else {
            if shape_of.len() != ts.len() {
                return Err(Mismatch("readings without their shapes"));
            }
            for &s in &shape_of {
                let shape = shapes.get(s).ok_or(Mismatch("a reading's shape does not exist"))?;
                shape.iter().for_each(|&c| counts[c] += 1);
            }
        }
        if counts.iter().zip(&values).any(|(&n, v)| n != v.len()) {
            return Err(Mismatch("a column's length is not its readings'"));
        }
        let hi = ts.len();
        Ok(Columns { ts, names, shapes, shape_of, values, lo: 0, hi })
    }

    /// Readings of the run.
    pub fn len(&self) -> usize {
        self.hi - self.lo
    }

    pub fn is_empty(&self) -> bool {
        self.lo == self.hi
    }

    /// The run's timestamps, ascending.
    pub fn timestamps(&self) -> &[TimestampMs] {
        &self.ts[self.lo..self.hi]
    }

    pub fn names(&self) -> &[FieldName] {
        &self.names
    }

    /// Keeps only the readings with `from <= ts < to`.
    pub fn keep(&mut self, from: TimestampMs, to: TimestampMs) {
        let kept = &self.ts[self.lo..self.hi];
        let (start, end) = (kept.partition_point(|&t| t < from), kept.partition_point(|&t| t < to));
        let lo = self.lo;
        self.lo = lo + start;
        self.hi = lo + end.max(start);
    }

    /// Keeps at most the first `n` readings in ascending order, or the last `n` if `desc`.
    pub fn keep_first(&mut self, n: usize, desc: bool) {
        if self.len() > n {
            if desc {
                self.lo = self.hi - n;
            } else {
                self.hi = self.lo + n;
            }
        }
    }

    fn shape_of(&self, row: usize) -> usize {
        shape_at(&self.shape_of, row)
    }

    /// Per column, how many of its values belong to readings before `row`.
    fn values_before(&self, row: usize) -> Vec<usize> {
        let mut at = vec![0; self.names.len()];
        if self.shape_of.is_empty() {
            if let Some(shape) = self.shapes.first() {
                shape.iter().for_each(|&c| at[c] = row);
            }
        } else {
            for &s in &self.shape_of[..row] {
                self.shapes[s].iter().for_each(|&c| at[c] += 1);
            }
        }
        at
    }

    /// The readings in columns, as a chunk holds them: columns in order of first appearance,
    /// one shape per distinct field order. `readings` must be ascending.
    #[cfg(test)]
    pub(crate) fn from_readings(readings: &[Reading]) -> Columns {
        let (mut names, mut values, mut shapes) =
            (Vec::new(), Vec::<Vec<FieldValue>>::new(), Vec::new());
        let mut shape_of = Vec::new();
        for r in readings {
            let mut shape = Vec::new();
            for (name, value) in &r.fields {
                let c = names.iter().position(|n| n == name).unwrap_or_else(|| {
                    names.push(name.clone());
                    values.push(Vec::new());
                    names.len() - 1
                });
                values[c].push(value.clone());
                shape.push(c);
            }
            let s = shapes.iter().position(|s| *s == shape).unwrap_or_else(|| {
                shapes.push(shape);
                shapes.len() - 1
            });
            shape_of.push(s);
        }
        if shapes.len() == 1 {
            shape_of.clear();
        }
        let ts = readings.iter().map(|r| r.ts).collect();
        Columns::new(ts, names, shapes, shape_of, values).expect("readings make columns")
    }

    /// The run's readings, ascending, their values moved out of the columns.
    pub fn into_readings(self) -> impl Iterator<Item = Reading> {
        let before = self.values_before(self.lo);
        let mut values: Vec<_> = self
            .values
            .into_iter()
            .zip(before)
            .map(|(column, before)| column.into_iter().skip(before))
            .collect();
        let Columns { ts, names, shapes, shape_of, lo, hi, .. } = self;
        (lo..hi).map(move |row| {
            let shape = &shapes[shape_at(&shape_of, row)];
            let fields = shape
                .iter()
                .map(|&c| (names[c].clone(), values[c].next().expect("`new` counted the values")))
                .collect();
            Reading { ts: ts[row], fields }
        })
    }
}

impl Columns {
    /// Column `c`'s values of the run's readings, each with its reading's time, ascending:
    /// what a fold over one field reads, without a reading made of each row.
    pub fn column(&self, c: usize) -> ColumnValues<'_> {
        let first = if self.shape_of.is_empty() {
            self.lo
        } else {
            self.shape_of[..self.lo].iter().filter(|&&s| self.shapes[s].contains(&c)).count()
        };
        let every = self.shape_of.is_empty() && self.shapes.first().is_some_and(|s| s.contains(&c));
        ColumnValues {
            cols: self,
            c,
            row: self.lo,
            every,
            values: self.values.get(c).map_or(&[][..], |v| &v[first.min(v.len())..]).iter(),
        }
    }
}

/// [`Columns::column`]'s rows.
pub struct ColumnValues<'a> {
    cols: &'a Columns,
    c: usize,
    row: usize,
    /// One shape that holds the column: every row has a value.
    every: bool,
    values: std::slice::Iter<'a, FieldValue>,
}

impl<'a> Iterator for ColumnValues<'a> {
    type Item = (TimestampMs, &'a FieldValue);

    fn next(&mut self) -> Option<Self::Item> {
        let cols = self.cols;
        while self.row < cols.hi {
            let row = self.row;
            self.row += 1;
            if self.every
                || (!cols.shape_of.is_empty() && cols.shapes[cols.shape_of[row]].contains(&self.c))
            {
                return Some((cols.ts[row], self.values.next()?));
            }
        }
        None
    }
}

/// Row `row`'s shape, from a run's `shape_of`: none listed means every row has shape 0.
fn shape_at(shape_of: &[usize], row: usize) -> usize {
    shape_of.get(row).copied().unwrap_or(0)
}

/// Reads a run's readings one at a time, ascending or descending, without making a `Reading`
/// of each unless asked to ([`ColumnsReader::next_reading`]).
#[derive(Debug)]
pub struct ColumnsReader {
    cols: Columns,
    desc: bool,
    /// Ascending: the next row to read. Descending: one past it.
    row: usize,
    /// Per column, ascending: one past the current row's value; descending: at it.
    at: Vec<usize>,
    /// The current reading's shape.
    shape: usize,
}

impl ColumnsReader {
    pub fn new(cols: Columns, desc: bool) -> ColumnsReader {
        let row = if desc { cols.hi } else { cols.lo };
        let at = cols.values_before(row);
        ColumnsReader { cols, desc, row, at, shape: 0 }
    }

    /// The timestamp of the next reading, if any is left.
    pub fn peek_ts(&self) -> Option<TimestampMs> {
        if self.desc {
            (self.row > self.cols.lo).then(|| self.cols.ts[self.row - 1])
        } else {
            (self.row < self.cols.hi).then(|| self.cols.ts[self.row])
        }
    }

    /// Moves to the next reading and returns its timestamp; its fields are then
    /// [`ColumnsReader::shape`] and [`ColumnsReader::value`]'s.
    pub fn advance(&mut self) -> Option<TimestampMs> {
        let row = if self.desc {
            if self.row == self.cols.lo {
                return None;
            }
            self.row -= 1;
            self.row
        } else {
            if self.row == self.cols.hi {
                return None;
            }
            self.row += 1;
            self.row - 1
        };
        self.shape = self.cols.shape_of(row);
        for &c in &self.cols.shapes[self.shape] {
            if self.desc {
                self.at[c] -= 1;
            } else {
                self.at[c] += 1;
            }
        }
        Some(self.cols.ts[row])
    }

    /// The columns of the current reading's fields, in the reading's order.
    pub fn shape(&self) -> &[usize] {
        &self.cols.shapes[self.shape]
    }

    /// The value in column `col` of the reading [`ColumnsReader::advance`] moved to; `col`
    /// must be in that reading's shape.
    pub fn value(&self, col: usize) -> &FieldValue {
        let at = if self.desc { self.at[col] } else { self.at[col] - 1 };
        &self.cols.values[col][at]
    }

    pub fn names(&self) -> &[FieldName] {
        self.cols.names()
    }

    pub fn next_reading(&mut self) -> Option<Reading> {
        let ts = self.advance()?;
        let fields: Fields = self
            .shape()
            .iter()
            .map(|&c| (self.cols.names[c].clone(), self.value(c).clone()))
            .collect();
        Some(Reading { ts, fields })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> FieldName {
        FieldName::from(s)
    }

    /// Two columns `a` and `b`; readings 10 (a), 20 (a, b), 20 (b), 30 (b, a).
    fn sample() -> Columns {
        Columns::new(
            vec![10, 20, 20, 30],
            vec![name("a"), name("b")],
            vec![vec![0], vec![0, 1], vec![1], vec![1, 0]],
            vec![0, 1, 2, 3],
            vec![
                vec![FieldValue::Int(1), FieldValue::Int(2), FieldValue::Int(4)],
                vec![FieldValue::Float(2.5), FieldValue::Str("x".into()), FieldValue::Bool(true)],
            ],
        )
        .unwrap()
    }

    fn reading(ts: TimestampMs, fields: &[(&str, FieldValue)]) -> Reading {
        Reading { ts, fields: fields.iter().map(|(n, v)| (name(n), v.clone())).collect() }
    }

    /// A column's rows are the readings' values of its field, for any kept part of the run,
    /// with one shape or several.
    #[test]
    fn a_column_is_its_fields_values_in_the_kept_readings() {
        let one_shape = Columns::new(
            vec![1, 2, 2, 5],
            vec![name("a"), name("b")],
            vec![vec![1, 0]],
            Vec::new(),
            vec![(0..4).map(FieldValue::Int).collect(), (10..14).map(FieldValue::Int).collect()],
        )
        .unwrap();
        for run in [sample(), one_shape] {
            for (from, to) in [(0, 100), (20, 31), (11, 20), (20, 21), (30, 30), (2, 3)] {
                let mut kept = run.clone();
                kept.keep(from, to);
                let readings: Vec<Reading> = kept.clone().into_readings().collect();
                for (c, n) in kept.names().iter().enumerate() {
                    let want: Vec<(TimestampMs, FieldValue)> = readings
                        .iter()
                        .filter_map(|r| {
                            Some((r.ts, r.fields.iter().find(|(f, _)| f == n)?.1.clone()))
                        })
                        .collect();
                    let got: Vec<(TimestampMs, FieldValue)> =
                        kept.column(c).map(|(t, v)| (t, v.clone())).collect();
                    assert_eq!(got, want, "column {n:?} of {from}..{to}");
                }
            }
        }
    }

    fn all(cols: Columns, desc: bool) -> Vec<Reading> {
        let mut r = ColumnsReader::new(cols, desc);
        std::iter::from_fn(|| r.next_reading()).collect()
    }

    fn expected() -> Vec<Reading> {
        vec![
            reading(10, &[("a", FieldValue::Int(1))]),
            reading(20, &[("a", FieldValue::Int(2)), ("b", FieldValue::Float(2.5))]),
            reading(20, &[("b", FieldValue::Str("x".into()))]),
            reading(30, &[("b", FieldValue::Bool(true)), ("a", FieldValue::Int(4))]),
        ]
    }

    #[test]
    fn readings_come_back_in_either_order_with_their_own_fields() {
        assert_eq!(sample().into_readings().collect::<Vec<_>>(), expected());
        let mut desc = expected();
        desc.reverse();
        assert_eq!(all(sample(), true), desc);
    }

    #[test]
    fn keep_narrows_to_a_range_and_a_count_from_either_end() {
        let mut c = sample();
        c.keep(15, 30);
        assert_eq!(c.len(), 2);
        assert_eq!(all(c.clone(), false), expected()[1..3]);
        assert_eq!(all(c.clone(), true), vec![expected()[2].clone(), expected()[1].clone()]);
        c.keep_first(1, true);
        assert_eq!(all(c, false), expected()[2..3]);

        let mut c = sample();
        c.keep_first(3, false);
        c.keep(20, 100);
        assert_eq!(all(c, true), vec![expected()[2].clone(), expected()[1].clone()]);

        let mut c = sample();
        c.keep(20, 31);
        assert_eq!(c.into_readings().collect::<Vec<_>>(), expected()[1..]);

        let mut c = sample();
        c.keep(31, 40);
        assert!(c.is_empty());
        assert_eq!(ColumnsReader::new(c, true).peek_ts(), None);
    }

    #[test]
    fn peek_shows_the_next_timestamp_without_moving() {
        let mut r = ColumnsReader::new(sample(), true);
        assert_eq!(r.peek_ts(), Some(30));
        assert_eq!(r.peek_ts(), Some(30));
        assert_eq!(r.advance(), Some(30));
        assert_eq!(r.shape(), [1, 0]);
        assert_eq!(r.value(0), &FieldValue::Int(4));
        assert_eq!(r.peek_ts(), Some(20));
    }

    #[test]
    fn one_shape_needs_no_shape_per_reading() {
        let c = Columns::new(
            vec![1, 2],
            vec![name("v")],
            vec![vec![0]],
            vec![],
            vec![vec![FieldValue::UInt(7), FieldValue::UInt(8)]],
        )
        .unwrap();
        let mut tail = c.clone();
        tail.keep(2, 3);
        assert_eq!(all(tail, false), vec![reading(2, &[("v", FieldValue::UInt(8))])]);
        assert_eq!(all(c, true).len(), 2);
    }

    #[test]
    fn readings_make_the_columns_they_come_back_from() {
        let c = Columns::from_readings(&expected());
        assert_eq!(c, sample());
        let one =
            [reading(1, &[("v", FieldValue::UInt(7))]), reading(2, &[("v", FieldValue::UInt(8))])];
        assert_eq!(Columns::from_readings(&one).into_readings().collect::<Vec<_>>(), one);
    }

    #[test]
    fn parts_that_do_not_fit_are_refused() {
        let v = |n: i64| vec![FieldValue::Int(n)];
        let bad = [
            Columns::new(vec![1], vec![name("a")], vec![vec![1]], vec![], vec![v(1)]),
            Columns::new(vec![1], vec![name("a")], vec![vec![0]], vec![], vec![vec![]]),
            Columns::new(
                vec![2, 1],
                vec![name("a")],
                vec![vec![0]],
                vec![],
                vec![[v(1), v(2)].concat()],
            ),
            Columns::new(vec![1], vec![name("a")], vec![vec![0]], vec![3], vec![v(1)]),
            Columns::new(vec![1, 2], vec![name("a")], vec![vec![0], vec![]], vec![], vec![v(1)]),
            Columns::new(vec![1], vec![], vec![vec![]], vec![], vec![v(1)]),
        ];
        for b in bad {
            assert!(b.is_err(), "{b:?}");
        }
    }
}
