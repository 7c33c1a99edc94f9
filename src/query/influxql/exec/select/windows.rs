//! One call's accumulators over one field of a group, by window start.

use std::collections::BTreeMap;

use crate::model::TimestampMs;
use crate::query::influxql::exec::agg::Acc;

/// A group's windows of one call and field. A group of one series answered from the store's
/// rollups (`GROUP BY` every tag) gets its windows at once and in order, and keeps them as
/// they came: building a map of them moved every accumulator once more, for nothing. Anything
/// that adds windows one by one turns them into a map first.
pub(super) enum Windows {
    Sorted(Vec<(TimestampMs, Acc)>),
    Map(BTreeMap<TimestampMs, Acc>),
}

impl Default for Windows {
    fn default() -> Self {
        Windows::Map(BTreeMap::new())
    }
}

impl Windows {
    /// `windows` must be in ascending order of start, each start once.
    pub(super) fn sorted(windows: Vec<(TimestampMs, Acc)>) -> Windows {
        debug_assert!(windows.windows(2).all(|w| w[0].0 < w[1].0));
        Windows::Sorted(windows)
    }

    /// The windows as a map, for adding to them.
    pub(super) fn map(&mut self) -> &mut BTreeMap<TimestampMs, Acc> {
        if let Windows::Sorted(sorted) = self {
            *self = Windows::Map(std::mem::take(sorted).into_iter().collect());
        }
        match self {
            Windows::Map(map) => map,
            Windows::Sorted(_) => unreachable!("made a map above"),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        match self {
            Windows::Sorted(v) => v.is_empty(),
            Windows::Map(m) => m.is_empty(),
        }
    }

    /// The window starts, ascending.
    pub(super) fn starts(&self) -> Box<dyn Iterator<Item = TimestampMs> + '_> {
        match self {
            Windows::Sorted(v) => Box::new(v.iter().map(|(start, _)| *start)),
            Windows::Map(m) => Box::new(m.keys().copied()),
        }
    }

    /// Each window's start and accumulator, ascending.
    pub(super) fn iter_mut(&mut self) -> Box<dyn Iterator<Item = (TimestampMs, &mut Acc)> + '_> {
        match self {
            Windows::Sorted(v) => Box::new(v.iter_mut().map(|(start, acc)| (*start, acc))),
            Windows::Map(m) => Box::new(m.iter_mut().map(|(start, acc)| (*start, acc))),
        }
    }

    /// The accumulators of the windows that start at `first` or later, ascending.
    pub(super) fn since(&mut self, first: TimestampMs) -> Box<dyn Iterator<Item = &mut Acc> + '_> {
        match self {
            Windows::Sorted(v) => {
                let at = v.partition_point(|(start, _)| *start < first);
                Box::new(v[at..].iter_mut().map(|(_, acc)| acc))
            }
            Windows::Map(m) => Box::new(m.range_mut(first..).map(|(_, acc)| acc)),
        }
    }

    pub(super) fn get(&self, start: TimestampMs) -> Option<&Acc> {
        match self {
            Windows::Sorted(v) => {
                v.binary_search_by_key(&start, |(s, _)| *s).ok().map(|at| &v[at].1)
            }
            Windows::Map(m) => m.get(&start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::influxql::exec::agg::Func;

    #[test]
    fn sorted_windows_answer_as_the_map_made_of_them() {
        let made = |starts: &[TimestampMs]| -> Vec<(TimestampMs, Acc)> {
            starts.iter().map(|s| (*s, Acc::new(Func::Count))).collect()
        };
        let starts = [0, 60_000, 180_000];
        let mut sorted = Windows::sorted(made(&starts));
        let mut map = Windows::Map(made(&starts).into_iter().collect());
        for w in [&mut sorted, &mut map] {
            assert!(!w.is_empty());
            assert_eq!(w.starts().collect::<Vec<_>>(), starts);
            assert_eq!(w.iter_mut().map(|(s, _)| s).collect::<Vec<_>>(), starts);
            assert!(w.get(60_000).is_some());
            assert_eq!(w.since(60_000).count(), 2);
            assert_eq!(w.since(60_001).count(), 1);
            assert!(w.get(120_000).is_none());
        }
        sorted.map().insert(120_000, Acc::new(Func::Count));
        assert!(matches!(sorted, Windows::Map(_)));
        assert_eq!(sorted.starts().collect::<Vec<_>>(), [0, 60_000, 120_000, 180_000]);
        assert!(Windows::default().is_empty());
    }
}
