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

use redb::{
    AccessGuard, ReadOnlyTable, ReadTransaction, ReadableTable, StorageError, Table,
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
