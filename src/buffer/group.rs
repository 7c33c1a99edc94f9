//! Grouping a pushed batch by (sensor key, hour) before it touches the shared map, so that a
//! body of thousands of lines from a handful of sensors costs a handful of map operations.

use std::collections::HashMap;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::model::{Item, Reading, SeriesMeta, TimestampMs, hour_start};

/// The hasher of the per-push group index and of the buffer map. Keys are client-chosen sensor
/// keys, so it is seeded randomly per process (foldhash's `RandomState`) as SipHash's is; it is
/// several times cheaper than SipHash on short keys, and every reading of a body with many
/// distinct sensors hashes its key twice (here and in the map).
pub(super) type BuildHasher = foldhash::fast::RandomState;

/// Up to this many distinct groups, a linear scan over the groups seen so far beats hashing the
/// key: comparing an `i64` hour and then a short key is cheaper than SipHash over the key.
const LINEAR_GROUPS: usize = 8;

/// First and last timestamp of a set of readings; `EMPTY` is the identity of `merge`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub first: TimestampMs,
    pub last: TimestampMs,
}

impl Span {
    pub const EMPTY: Span = Span { first: TimestampMs::MAX, last: TimestampMs::MIN };

    pub fn include(&mut self, ts: TimestampMs) {
        self.first = self.first.min(ts);
        self.last = self.last.max(ts);
    }

    pub fn merge(&mut self, other: Span) {
        self.first = self.first.min(other.first);
        self.last = self.last.max(other.last);
    }

    pub fn is_empty(&self) -> bool {
        self.first > self.last
    }

    /// Whether any timestamp of the span lies in `from <= ts < to`.
    pub fn overlaps(&self, from: TimestampMs, to: TimestampMs) -> bool {
        !self.is_empty() && self.first < to && self.last >= from
    }
}

/// The readings of one push that share a (sensor key, hour), in arrival order.
pub(super) struct Group {
    /// The first `SeriesMeta` seen for the key in this push; the others are dropped.
    pub meta: Arc<SeriesMeta>,
    pub hour: TimestampMs,
    /// Inline for one reading: a body of many sensors with one reading each (Telegraf's
    /// usual shape) then allocates nothing per group.
    pub readings: SmallVec<[Reading; 1]>,
    /// Position in the push of each of `readings`: what its sequence number is derived from
    /// once the push is given its place in the order.
    pub positions: SmallVec<[u32; 1]>,
    pub span: Span,
}

/// Splits `items` into groups by (key, hour), keeping arrival order inside each group and
/// ordering groups by first appearance. Allocates one `Vec` per group of two readings or more,
/// none per reading.
pub(super) fn group(items: Vec<Item>) -> Vec<Group> {
    // Pass 1 borrows the keys from `items` to give each item a group id; pass 2 moves the
    // readings. Two passes keep the borrow of the keys apart from the move of the items.
    let mut ids: Vec<u32> = Vec::with_capacity(items.len());
    let mut sizes: Vec<usize> = Vec::new();
    {
        let mut seen: Vec<(&str, TimestampMs)> = Vec::new();
        let mut index: HashMap<(&str, TimestampMs), u32, BuildHasher> = HashMap::default();
        let mut last: Option<(&str, TimestampMs, u32)> = None;
        for (meta, reading) in &items {
            let key = meta.key.as_str();
            let hour = hour_start(reading.ts);
            let id = match last {
                // Consecutive readings of one series are the common case in both formats.
                Some((k, h, id)) if h == hour && k == key => id,
                _ => {
                    let found = if seen.len() <= LINEAR_GROUPS {
                        seen.iter().position(|&(k, h)| h == hour && k == key).map(|i| i as u32)
                    } else {
                        if index.is_empty() {
                            // Many groups so far means many more to come (a body of distinct
                            // sensors): size for the worst case once instead of rehashing.
                            index.reserve(items.len());
                            index.extend(seen.iter().enumerate().map(|(i, &kh)| (kh, i as u32)));
                        }
                        index.get(&(key, hour)).copied()
                    };
                    found.unwrap_or_else(|| {
                        let id = seen.len() as u32;
                        seen.push((key, hour));
                        if !index.is_empty() {
                            index.insert((key, hour), id);
                        }
                        sizes.push(0);
                        id
                    })
                }
            };
            last = Some((key, hour, id));
            sizes[id as usize] += 1;
            ids.push(id);
        }
    }

    let mut slots: Vec<Option<Group>> = std::iter::repeat_with(|| None).take(sizes.len()).collect();
    for (position, ((meta, reading), id)) in items.into_iter().zip(ids).enumerate() {
        let group = slots[id as usize].get_or_insert_with(|| Group {
            meta,
            hour: hour_start(reading.ts),
            readings: SmallVec::with_capacity(sizes[id as usize]),
            positions: SmallVec::with_capacity(sizes[id as usize]),
            span: Span::EMPTY,
        });
        group.span.include(reading.ts);
        group.readings.push(reading);
        group.positions.push(position as u32);
    }
    slots.into_iter().map(|group| group.expect("every group has at least one reading")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FieldValue, HOUR_MS};

    fn item(key: &str, ts: TimestampMs, seq: i64) -> Item {
        (
            Arc::new(SeriesMeta { key: key.into(), measurement: key.into(), tags: vec![] }),
            Reading { ts, fields: smallvec::smallvec![("seq".into(), FieldValue::Int(seq))] },
        )
    }

    fn seqs(g: &Group) -> Vec<i64> {
        g.readings
            .iter()
            .map(|r| match r.fields[0].1 {
                FieldValue::Int(v) => v,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn interleaved_sensors_form_one_group_per_sensor_and_hour() {
        // 5,000 readings from 10 interleaved sensors, more than LINEAR_GROUPS so the hash
        // index is exercised too.
        let items: Vec<_> =
            (0..5000).map(|i| item(&format!("s{}", i % 10), i64::from(i), i64::from(i))).collect();
        let groups = group(items);
        assert_eq!(groups.len(), 10);
        for (g_idx, g) in groups.iter().enumerate() {
            assert_eq!(g.meta.key, format!("s{g_idx}"));
            assert_eq!(g.readings.len(), 500);
            let s = seqs(g);
            assert!(s.windows(2).all(|w| w[0] < w[1]), "arrival order kept");
            assert!(s.iter().all(|v| v % 10 == g_idx as i64));
            assert_eq!(g.span, Span { first: g_idx as i64, last: 4990 + g_idx as i64 });
        }
    }

    #[test]
    fn hours_split_groups_and_late_readings_find_their_hour() {
        let items = vec![
            item("a", 2 * HOUR_MS + 5, 0),
            item("a", HOUR_MS + 1, 1), // late: the previous hour
            item("b", 2 * HOUR_MS, 2),
            item("a", 2 * HOUR_MS + 9, 3),
            item("a", -1, 4), // before the epoch: hour -1
        ];
        let groups = group(items);
        let got: Vec<(String, TimestampMs, Vec<i64>)> =
            groups.iter().map(|g| (g.meta.key.clone(), g.hour, seqs(g))).collect();
        assert_eq!(
            got,
            vec![
                ("a".into(), 2 * HOUR_MS, vec![0, 3]),
                ("a".into(), HOUR_MS, vec![1]),
                ("b".into(), 2 * HOUR_MS, vec![2]),
                ("a".into(), -HOUR_MS, vec![4]),
            ]
        );
        for g in &groups {
            assert!(g.readings.iter().all(|r| hour_start(r.ts) == g.hour));
        }
    }

    #[test]
    fn many_groups_past_the_linear_limit_stay_correct() {
        let items: Vec<_> = (0..200).map(|i| item(&format!("s{}", i % 37), 0, i)).collect();
        let groups = group(items);
        assert_eq!(groups.len(), 37);
        assert_eq!(groups.iter().map(|g| g.readings.len()).sum::<usize>(), 200);
        assert_eq!(seqs(&groups[36]), vec![36, 73, 110, 147, 184]);
    }

    #[test]
    fn span_overlap_is_half_open() {
        let s = Span { first: 10, last: 20 };
        assert!(s.overlaps(20, 21));
        assert!(!s.overlaps(21, 30));
        assert!(s.overlaps(0, 11));
        assert!(!s.overlaps(0, 10));
        assert!(!Span::EMPTY.overlaps(i64::MIN, i64::MAX));
    }
}
