//! The time span of a set of readings, and the hasher of the buffer map.

use crate::model::TimestampMs;

/// The hasher of the buffer map and of a merge's sensor index. Keys are client-chosen sensor
/// keys, so it is seeded randomly per process (foldhash's `RandomState`) as SipHash's is; it is
/// much cheaper than SipHash on short keys, and every staged reading of a body with many
/// distinct sensors hashes its key in the merge.
pub(super) type BuildHasher = foldhash::fast::RandomState;

/// First and last timestamp of a set of readings; `EMPTY` is the identity of `merge`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span {
    pub first: TimestampMs,
    pub last: TimestampMs,
}

impl Span {
    pub const EMPTY: Span = Span { first: TimestampMs::MAX, last: TimestampMs::MIN };

    pub fn of(timestamps: impl IntoIterator<Item = TimestampMs>) -> Span {
        let mut span = Span::EMPTY;
        for ts in timestamps {
            span.include(ts);
        }
        span
    }

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

#[cfg(test)]
mod tests {
    use super::*;

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
