//! What the flusher hands the store: one series' readings of one hour ([`Batch`]), with the
//! log's sequence numbers that say when they are settled.

use super::reading::Reading;
use super::rows::Rows;
use super::seq::Seq;
use super::series::Series;
use super::time::{TimestampMs, hour_start};

/// What ingest hands on: a reading and its series.
pub type Item = (Series, Reading);

/// Ascending sequence numbers read by index: a slice of them, or a batch's first readings
/// ([`SettledRun`]), whose numbers are read in place rather than collected (a flush cycle
/// settles a quarter of a million readings).
pub trait SeqRun {
    fn len(&self) -> usize;
    fn seq_at(&self, i: usize) -> Seq;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SeqRun for &[Seq] {
    fn len(&self) -> usize {
        <[Seq]>::len(self)
    }

    fn seq_at(&self, i: usize) -> Seq {
        self[i]
    }
}

/// The first `len` readings of a numbered batch.
#[derive(Clone, Copy)]
pub struct SettledRun<'a> {
    pub batch: &'a Batch,
    pub len: usize,
}

impl SeqRun for SettledRun<'_> {
    fn len(&self) -> usize {
        self.len
    }

    fn seq_at(&self, i: usize) -> Seq {
        debug_assert!(self.batch.numbered && i < self.len);
        self.batch.rows.seq(i)
    }
}

/// Who wrote a reading: one per bucketd process lineage, created on its first start and kept
/// beside its write-ahead log (`wal::identity`), so a restart on the same directory is the same
/// writer. Sequence numbers of different writers are not comparable, so the stores keep one
/// high-water mark per (series, hour, writer): see docs/design/ingest.md, "Exactly once".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WriterId(pub u64);

impl std::fmt::Display for WriterId {
    /// Sixteen lowercase hex digits: a valid, fixed-width MongoDB field name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::str::FromStr for WriterId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u64::from_str_radix(s, 16).map(WriterId)
    }
}

/// Readings of one series within one hour, handed to a [`crate::store::Store`] as one unit:
/// the rows a buffer held, moved as they are (a store makes the readings from them as it writes
/// the batch). Every reading lies in `hour` (the constructors check it). A batch is
/// **numbered** when each reading carries its sequence number, strictly increasing (the
/// flusher's batches), or not (tests and tools: the store records no high-water mark for it).
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub series: Series,
    pub hour: TimestampMs,
    rows: Rows,
    numbered: bool,
}

impl Batch {
    /// A batch without sequence numbers.
    ///
    /// # Panics
    /// If a reading lies outside `hour`.
    pub fn new(series: impl Into<Series>, hour: TimestampMs, readings: Vec<Reading>) -> Batch {
        Batch::numbered(series, hour, readings, Vec::new())
    }

    /// A batch whose reading `i` has sequence number `seqs[i]`; `seqs` empty: without.
    ///
    /// # Panics
    /// If a reading lies outside `hour`, or `seqs` is neither empty nor one per reading.
    pub fn numbered(
        series: impl Into<Series>,
        hour: TimestampMs,
        readings: Vec<Reading>,
        seqs: Vec<Seq>,
    ) -> Batch {
        assert!(seqs.is_empty() || seqs.len() == readings.len(), "one sequence number each");
        let numbered = !seqs.is_empty();
        let mut rows = Rows::default();
        for (i, r) in readings.into_iter().enumerate() {
            assert_eq!(hour_start(r.ts), hour, "a batch's readings lie in its hour");
            rows.push(r, seqs.get(i).copied().unwrap_or(0));
        }
        Batch { series: series.into(), hour, rows, numbered }
    }

    /// A numbered batch of rows a buffer of `hour` held.
    pub fn of_rows(series: Series, hour: TimestampMs, rows: Rows) -> Batch {
        debug_assert!(rows.timestamps().all(|ts| hour_start(ts) == hour));
        Batch { series, hour, rows, numbered: true }
    }

    pub fn rows(&self) -> &Rows {
        &self.rows
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Reading `i`, made now (its fields in the order the buffer first met their names).
    pub fn reading(&self, i: usize) -> Reading {
        self.rows.reading(i)
    }

    /// Every reading in order, each made when the iterator reaches it.
    pub fn readings(&self) -> impl ExactSizeIterator<Item = Reading> + '_ {
        self.rows.readings()
    }

    pub fn ts(&self, i: usize) -> TimestampMs {
        self.rows.ts(i)
    }

    /// The sequence number of reading `i`, if the batch is numbered.
    pub fn seq(&self, i: usize) -> Option<Seq> {
        self.numbered.then(|| self.rows.seq(i))
    }

    pub fn is_numbered(&self) -> bool {
        self.numbered
    }

    /// Every reading's sequence number in order; empty when the batch is not numbered.
    pub fn seqs(&self) -> Vec<Seq> {
        if self.numbered { self.rows.seqs().collect() } else { Vec::new() }
    }

    /// The sequence number of the batch's newest reading, if it is numbered.
    pub fn last_seq(&self) -> Option<Seq> {
        self.len().checked_sub(1).and_then(|i| self.seq(i))
    }

    /// Whether two readings of this batch share a timestamp: one pass when the timestamps
    /// rise, as a sensor's do.
    pub fn repeats_a_point(&self) -> bool {
        let mut ts = self.rows.timestamps();
        let Some(mut prev) = ts.next() else { return false };
        for t in ts {
            if t <= prev {
                return self.repeats_a_point_unordered();
            }
            prev = t;
        }
        false
    }

    /// [`Batch::repeats_a_point`] for a batch whose timestamps do not rise (readings that came
    /// out of order): by sorting a copy of them, which costs less than hashing each.
    fn repeats_a_point_unordered(&self) -> bool {
        let mut all: Vec<TimestampMs> = self.rows.timestamps().collect();
        all.sort_unstable();
        all.windows(2).any(|w| w[0] == w[1])
    }

    /// This batch with the readings of each timestamp folded into one
    /// ([`super::reading::fold_points`]), where the first of them was and with its sequence
    /// number. Its last sequence number may so be lower than this batch's: a store records
    /// this batch's own [`Batch::last_seq`] as its mark.
    pub fn points(&self) -> Batch {
        let mut readings: Vec<Reading> = self.readings().collect();
        let mut seqs: Vec<Seq> = self.seqs();
        if self.numbered {
            let mut first: std::collections::HashMap<TimestampMs, Seq> =
                std::collections::HashMap::new();
            for (r, s) in readings.iter().zip(&seqs) {
                first.entry(r.ts).or_insert(*s);
            }
            super::reading::fold_points(&mut readings);
            seqs = readings.iter().map(|r| first[&r.ts]).collect();
        } else {
            super::reading::fold_points(&mut readings);
        }
        Batch::numbered(self.series.clone(), self.hour, readings, seqs)
    }

    /// The first `k` readings (all of them if fewer), numbered as this batch is.
    pub fn prefix(&self, k: usize) -> Batch {
        let mut rows = self.rows.clone();
        let front = if k < rows.len() { rows.split_front(k) } else { rows };
        Batch { series: self.series.clone(), hour: self.hour, rows: front, numbered: self.numbered }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FieldValue, HOUR_MS, SeriesMeta};
    fn meta() -> SeriesMeta {
        SeriesMeta::untagged("s", "m")
    }

    fn at(ts: TimestampMs) -> Reading {
        Reading { ts, fields: smallvec::smallvec![("v".into(), FieldValue::Int(ts))] }
    }

    #[test]
    #[should_panic(expected = "a batch's readings lie in its hour")]
    fn a_batch_refuses_a_reading_outside_its_hour() {
        Batch::new(meta(), 0, vec![at(1), at(HOUR_MS)]);
    }

    #[test]
    fn a_batch_gives_back_its_readings_and_numbers() {
        let plain = Batch::new(meta(), -HOUR_MS, vec![at(-5), at(-HOUR_MS)]);
        assert_eq!(plain.readings().collect::<Vec<_>>(), vec![at(-5), at(-HOUR_MS)]);
        assert_eq!((plain.last_seq(), plain.seq(0), plain.seqs()), (None, None, vec![]));
        let numbered = Batch::numbered(meta(), 0, vec![at(1), at(2), at(3)], vec![7, 8, 10]);
        assert_eq!(numbered.last_seq(), Some(10));
        assert_eq!(numbered.seqs(), vec![7, 8, 10]);
        let front = numbered.prefix(2);
        assert_eq!((front.len(), front.last_seq(), front.reading(1)), (2, Some(8), at(2)));
        assert_eq!(numbered.prefix(9), numbered);
        assert_ne!(front, numbered);
    }
}
