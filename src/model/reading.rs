//! One reading, and the view the stores' encoders take of a reading wherever it is held.

use super::time::TimestampMs;
use super::value::{Fields, ValueRef};

/// One reading as the stores' encoders see it: a timestamp and its fields in order, borrowed
/// from wherever the reading is held. The embedded store writes a flushed buffer's rows through
/// it, without making a [`Reading`] of each row, which was a large part of its write.
pub trait ReadingView {
    fn ts(&self) -> TimestampMs;
    fn fields(&self) -> impl Iterator<Item = (&str, ValueRef<'_>)>;

    /// Whether this reading has the fields of `prev`, with the same types and in the same
    /// order, when that is cheaper to tell than by comparing their names; `None` otherwise.
    fn same_shape(&self, _prev: &Self) -> Option<bool> {
        None
    }
}

impl ReadingView for Reading {
    fn ts(&self) -> TimestampMs {
        self.ts
    }

    fn fields(&self) -> impl Iterator<Item = (&str, ValueRef<'_>)> {
        self.fields.iter().map(|(name, value)| (name.as_str(), value.as_ref()))
    }
}

impl<R: ReadingView> ReadingView for &R {
    fn ts(&self) -> TimestampMs {
        (**self).ts()
    }

    fn fields(&self) -> impl Iterator<Item = (&str, ValueRef<'_>)> {
        (**self).fields()
    }

    fn same_shape(&self, prev: &Self) -> Option<bool> {
        (**self).same_shape(*prev)
    }
}

/// One timestamped set of field values of one series. Field names are unique within a reading
/// and kept in the order they arrived.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reading {
    pub ts: TimestampMs,
    pub fields: Fields,
}

impl Reading {
    /// Writes `later` over this reading of the same point (series and timestamp), as InfluxDB
    /// does: the union of the fields, `later`'s value where both have one. Fields keep this
    /// reading's order, `later`'s new ones after them.
    pub fn overlay(&mut self, later: &Reading) {
        debug_assert_eq!(self.ts, later.ts, "one point is one timestamp");
        for (name, value) in &later.fields {
            match self.fields.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => *v = value.clone(),
                None => self.fields.push((name.clone(), value.clone())),
            }
        }
    }
}

/// Folds readings of one series that share a timestamp into one each ([`Reading::overlay`],
/// later over earlier), keeping each point where its first reading was. `readings` are in
/// the order they were written, or sorted by time with a stable sort. Nothing is copied when
/// no timestamp repeats, nor when they are sorted.
pub fn fold_points(readings: &mut Vec<Reading>) {
    if readings.windows(2).all(|w| w[0].ts <= w[1].ts) {
        readings.dedup_by(|later, kept| {
            let same = later.ts == kept.ts;
            if same {
                kept.overlay(later);
            }
            same
        });
        return;
    }
    let mut first_of: std::collections::HashMap<TimestampMs, usize> =
        std::collections::HashMap::with_capacity(readings.len());
    let mut kept: Vec<Reading> = Vec::with_capacity(readings.len());
    for r in readings.drain(..) {
        match first_of.get(&r.ts) {
            Some(&at) => kept[at].overlay(&r),
            None => {
                first_of.insert(r.ts, kept.len());
                kept.push(r);
            }
        }
    }
    *readings = kept;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FieldValue;

    fn r(ts: TimestampMs, fields: &[(&str, f64)]) -> Reading {
        Reading {
            ts,
            fields: fields.iter().map(|&(n, v)| (n.into(), FieldValue::Float(v))).collect(),
        }
    }

    #[test]
    fn overlay_is_the_union_with_the_later_value_winning() {
        let mut a = r(5, &[("x", 1.0), ("y", 2.0)]);
        a.overlay(&r(5, &[("y", 3.0), ("z", 4.0)]));
        assert_eq!(a, r(5, &[("x", 1.0), ("y", 3.0), ("z", 4.0)]));
    }

    #[test]
    fn fold_points_keeps_each_point_where_it_first_came() {
        let mut v = vec![
            r(7, &[("x", 1.0)]),
            r(3, &[("x", 2.0)]),
            r(7, &[("y", 3.0)]),
            r(7, &[("x", 4.0)]),
        ];
        fold_points(&mut v);
        assert_eq!(v, vec![r(7, &[("x", 4.0), ("y", 3.0)]), r(3, &[("x", 2.0)])]);
        let mut sorted = vec![r(1, &[("x", 1.0)]), r(2, &[("x", 1.0)])];
        fold_points(&mut sorted);
        assert_eq!(sorted.len(), 2);
        let mut ties = vec![r(1, &[("x", 1.0)]), r(1, &[("y", 2.0)]), r(2, &[("x", 3.0)])];
        fold_points(&mut ties);
        assert_eq!(ties, vec![r(1, &[("x", 1.0), ("y", 2.0)]), r(2, &[("x", 3.0)])]);
    }
}
