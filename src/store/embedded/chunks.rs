//! Where a bucket's chunks are stored: keyed by the write (commit) that made them, so that a
//! flush appends at the end of the table.
//!
//! A flat-out flush writes one chunk for each of thousands of sensors. Keyed by series first
//! (schemas 1 to 4), those chunks went into thousands of places across the table: each commit
//! read and rewrote a leaf page per sensor, and the commit's checksums and page writes covered
//! all of them. Keyed by write first, one commit's chunks fill new pages at the table's end.
//! The bucket header lists the write of each of its chunks (header version 3), which is what
//! finds them again.
//!
//! Keyed by write, a series' hours lie apart: a dashboard reading a month of one series
//! would look up each hour's chunk on a page of its own. Once an hour is over, the seal pass
//! ([`super::seal`]) moves its chunks into the table keyed by series, where that series' hours
//! lie side by side and a month's are read from a few pages in a row. Chunks written before
//! schema 5 are there too. A chunk there has write number [`BY_SERIES`], which no commit uses.

use std::cmp::Ordering;

use redb::{
    AccessGuard, Range, ReadOnlyTable, ReadTransaction, ReadableTable, StorageError, Table,
    TableDefinition, TableError, WriteTransaction,
};

use crate::model::TimestampMs;

/// Key: `(write, series id, hour, bucket seq, chunk index)`.
pub(super) const CHUNKS: TableDefinition<(u64, u64, i64, u32, u32), &[u8]> =
    TableDefinition::new("chunks_by_write");
/// `(series id, hour, bucket seq, chunk index)`: the chunks the seal pass moved, and those
/// schemas 1 to 4 wrote. A write that joins a small last chunk here rewrites it in place.
pub(super) const CHUNKS_BY_SERIES: TableDefinition<(u64, i64, u32, u32), &[u8]> =
    TableDefinition::new("chunks");

/// The write number of a chunk in [`CHUNKS_BY_SERIES`]. Commits count from 1.
pub(super) const BY_SERIES: u64 = 0;

pub(super) type Key = (u64, u64, i64, u32, u32);
type SeriesKey = (u64, i64, u32, u32);

/// One chunk's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ChunkAt {
    pub series: u64,
    pub hour: TimestampMs,
    pub seq: u32,
    pub index: u32,
    pub write: u64,
}

impl ChunkAt {
    fn key(&self) -> Key {
        (self.write, self.series, self.hour, self.seq, self.index)
    }

    fn series_key(&self) -> SeriesKey {
        (self.series, self.hour, self.seq, self.index)
    }

    pub fn is_by_series(&self) -> bool {
        self.write == BY_SERIES
    }
}

/// The places of the chunks of bucket `(series, hour, seq)`, in chunk order, from its header's
/// `writes`.
pub(super) fn of_bucket(
    series: u64,
    hour: TimestampMs,
    seq: u32,
    writes: &[u64],
) -> impl DoubleEndedIterator<Item = ChunkAt> + '_ {
    writes.iter().enumerate().map(move |(index, &write)| ChunkAt {
        series,
        hour,
        seq,
        index: index as u32,
        write,
    })
}

/// Both chunk tables, of a read or a write transaction.
pub(super) struct Chunks<L, N> {
    pub by_series: L,
    pub by_write: N,
}

pub(super) type ReadChunks =
    Chunks<ReadOnlyTable<SeriesKey, &'static [u8]>, ReadOnlyTable<Key, &'static [u8]>>;
pub(super) type WriteChunks<'t> =
    Chunks<Table<'t, SeriesKey, &'static [u8]>, Table<'t, Key, &'static [u8]>>;

pub(super) fn open_read(txn: &ReadTransaction) -> Result<ReadChunks, TableError> {
    Ok(Chunks { by_series: txn.open_table(CHUNKS_BY_SERIES)?, by_write: txn.open_table(CHUNKS)? })
}

pub(super) fn open_write(txn: &WriteTransaction) -> Result<WriteChunks<'_>, TableError> {
    Ok(Chunks { by_series: txn.open_table(CHUNKS_BY_SERIES)?, by_write: txn.open_table(CHUNKS)? })
}

impl<L, N> Chunks<L, N>
where
    L: ReadableTable<SeriesKey, &'static [u8]>,
    N: ReadableTable<Key, &'static [u8]>,
{
    /// The chunk at `at`; `None` when it is not stored (the caller skips it, as a scan of the
    /// series-keyed table skipped a chunk its header counted but the table lacked).
    pub fn get(&self, at: ChunkAt) -> Result<Option<AccessGuard<'_, &'static [u8]>>, StorageError> {
        if at.is_by_series() {
            self.by_series.get(at.series_key())
        } else {
            self.by_write.get(at.key())
        }
    }
}

/// A series' chunks asked for in ascending order, up to an hour: what a scan of its buckets
/// forward reads. A sealed chunk comes from a range over the series-keyed table, which steps
/// from leaf to leaf, where a lookup per chunk went down from the table's root each time;
/// a chunk keyed by write is looked up.
pub(super) struct Ascending<'c> {
    chunks: &'c ReadChunks,
    series: u64,
    last_hour: TimestampMs,
    range: Option<Range<'static, SeriesKey, &'static [u8]>>,
    /// An entry the range gave that no chunk asked for yet.
    ahead: Option<(SeriesKey, Guard)>,
}

type Guard = AccessGuard<'static, &'static [u8]>;

impl<'c> Ascending<'c> {
    pub fn new(chunks: &'c ReadChunks, series: u64, last_hour: TimestampMs) -> Self {
        Ascending { chunks, series, last_hour, range: None, ahead: None }
    }

    /// The next chunk asked for may lie far ahead (buckets were passed over): a range from
    /// where it is would read every page in between, so it starts again there.
    pub fn jump(&mut self) {
        (self.range, self.ahead) = (None, None);
    }

    /// The chunk at `at`, which must come after every chunk asked for before (since the
    /// last [`jump`](Self::jump)); `None` when it is not stored, as [`Chunks::get`] says.
    pub fn get(&mut self, at: ChunkAt) -> Result<Option<Guard>, StorageError> {
        if !at.is_by_series() {
            return self.chunks.by_write.get(at.key());
        }
        debug_assert_eq!(at.series, self.series);
        let want = at.series_key();
        // Without a range, nothing is ahead either (`new`, `jump`).
        let range = match &mut self.range {
            Some(range) => range,
            None => {
                let end = (self.series, self.last_hour, u32::MAX, u32::MAX);
                self.range.insert(self.chunks.by_series.range(want..=end)?)
            }
        };
        loop {
            if let Some((key, _)) = &self.ahead {
                match key.cmp(&want) {
                    // A chunk no one asked for, of a bucket passed over.
                    Ordering::Less => self.ahead = None,
                    Ordering::Equal => return Ok(self.ahead.take().map(|(_, value)| value)),
                    Ordering::Greater => return Ok(None),
                }
            }
            match range.next() {
                Some(entry) => {
                    let (key, value) = entry?;
                    self.ahead = Some((key.value(), value));
                }
                None => return Ok(None),
            }
        }
    }
}

impl WriteChunks<'_> {
    pub fn insert(&mut self, at: ChunkAt, bytes: &[u8]) -> Result<(), StorageError> {
        if at.is_by_series() {
            self.by_series.insert(at.series_key(), bytes)?;
        } else {
            self.by_write.insert(at.key(), bytes)?;
        }
        Ok(())
    }

    pub fn remove(&mut self, at: ChunkAt) -> Result<(), StorageError> {
        if at.is_by_series() {
            self.by_series.remove(at.series_key())?;
        } else {
            self.by_write.remove(at.key())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use redb::{Database, ReadableDatabase};

    use super::*;

    fn at(hour: TimestampMs, index: u32, write: u64) -> ChunkAt {
        ChunkAt { series: 7, hour, seq: 0, index, write }
    }

    /// Sealed chunks of hours 0 to 5 but 2, one keyed by write in hour 3, and a sealed chunk
    /// of another series beside them.
    fn stored(db: &Database) {
        let txn = db.begin_write().unwrap();
        {
            let mut chunks = open_write(&txn).unwrap();
            for hour in [0, 1, 3, 4, 5] {
                for index in 0..2 {
                    chunks.insert(at(hour, index, BY_SERIES), &[hour as u8, index as u8]).unwrap();
                }
            }
            chunks.insert(at(3, 2, 9), b"w").unwrap();
            let other = ChunkAt { series: 8, ..at(0, 0, BY_SERIES) };
            chunks.insert(other, b"x").unwrap();
        }
        txn.commit().unwrap();
    }

    #[test]
    fn ascending_reads_what_lookups_read_with_and_without_jumps() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("t.redb")).unwrap();
        stored(&db);
        let txn = db.begin_read().unwrap();
        let chunks = open_read(&txn).unwrap();
        let asked = [
            at(0, 1, BY_SERIES),
            at(1, 0, BY_SERIES),
            at(2, 0, BY_SERIES),
            at(3, 0, BY_SERIES),
            at(3, 2, 9),
            at(3, 3, 10),
            at(4, 1, BY_SERIES),
            at(5, 0, BY_SERIES),
        ];
        let looked_up = |a: ChunkAt| chunks.get(a).unwrap().map(|v| v.value().to_vec());
        // Every way of jumping before some of the chunks asked for.
        for jumps in 0u32..1 << asked.len() {
            let mut ascending = Ascending::new(&chunks, 7, 5);
            for (i, &a) in asked.iter().enumerate() {
                if jumps & 1 << i != 0 {
                    ascending.jump();
                }
                let got = ascending.get(a).unwrap().map(|v| v.value().to_vec());
                assert_eq!(got, looked_up(a), "{a:?} with jumps {jumps:#b}");
            }
        }
    }
}
