//! The seal pass: the chunks of buckets whose hour is over move from the table keyed by write
//! into the one keyed by series ([`chunks`] says why), a bucket's chunks joined into one where
//! they are in time order.
//!
//! Each call looks at a bounded number of chunks, in write order from where the previous call
//! stopped (`cursor`), and seals the buckets they belong to whose hour ended at least
//! [`SEAL_AFTER_MS`] ago, in one write transaction (none when there is nothing to seal). A
//! chunk of an hour not yet over stays and is looked at again in the next pass. Moving a
//! chunk and rewriting its bucket's header happen in one transaction, so a crash leaves every
//! bucket either sealed or as it was.
//!
//! A write into a sealed bucket appends a chunk keyed by write as before; the bucket is sealed
//! again once the pass next meets it.

use std::collections::BTreeSet;
use std::ops::Bound;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, Table};

use super::chunks::{self, BY_SERIES, ChunkAt, Key, WriteChunks};
use super::codec::{self, BucketHeader};
use super::{BUCKETS, EmbeddedError};
use crate::model::{HOUR_MS, Reading, TimestampMs};
use crate::store::SealReport;

/// How long after its hour ends a bucket is sealed: late readings of the hour (a flush
/// interval's, a slow sensor's) go on landing in the table keyed by write, which takes them
/// cheaply, rather than rewriting a sealed chunk.
pub const SEAL_AFTER_MS: TimestampMs = 10 * 60 * 1000;

/// One step of the pass; see the module documentation. `budget`: chunks looked at. `cursor`:
/// the last chunk the previous step looked at (`None`: start from the first); set to where
/// the next step resumes, or `None` once the pass has looked at every chunk.
pub(super) fn step(
    db: &Database,
    now: TimestampMs,
    budget: usize,
    cursor: &mut Option<Key>,
) -> Result<SealReport, EmbeddedError> {
    let budget = budget.max(1);
    let mut report = SealReport::default();
    // Looked at in a read transaction, which writes do not wait for: mostly the chunks are
    // of hours not yet over, and a step that seals nothing writes nothing.
    let (looked, more, left) = {
        let txn = db.begin_read()?;
        let by_write = txn.open_table(chunks::CHUNKS)?;
        let lower = cursor.map_or(Bound::Unbounded, Bound::Excluded);
        let mut looked: Vec<Key> = Vec::with_capacity(budget + 1);
        for entry in by_write.range::<Key>((lower, Bound::Unbounded))?.take(budget + 1) {
            looked.push(entry?.0.value());
        }
        let more = looked.len() > budget;
        looked.truncate(budget);
        (looked, more, by_write.len()?)
    };
    *cursor = if more { looked.last().copied() } else { None };
    report.done = !more;
    report.left = left;
    // A bucket's chunks are sealed together, when the first of them is met.
    let due: BTreeSet<(u64, TimestampMs, u32)> = looked
        .iter()
        .filter(|&&(_, _, hour, ..)| hour.saturating_add(HOUR_MS + SEAL_AFTER_MS) <= now)
        .map(|&(_, series, hour, seq, _)| (series, hour, seq))
        .collect();
    if due.is_empty() {
        return Ok(report);
    }
    let txn = db.begin_write()?;
    {
        let mut buckets = txn.open_table(BUCKETS)?;
        let mut chunks = chunks::open_write(&txn)?;
        for (series, hour, seq) in due {
            // The header is read again here: a write may have come since the look.
            seal_bucket(&mut buckets, &mut chunks, series, hour, seq, &mut report)?;
        }
        report.left = chunks.by_write.len()?;
    }
    super::commit(db, txn)?;
    Ok(report)
}

/// Moves bucket `(series, hour, seq)`'s chunks keyed by write to the table keyed by series:
/// joined into one chunk when they follow each other in time and all decode, else each as
/// it is.
fn seal_bucket(
    buckets: &mut Table<'_, (u64, i64, u32), &'static [u8]>,
    chunks: &mut WriteChunks<'_>,
    series: u64,
    hour: TimestampMs,
    seq: u32,
    report: &mut SealReport,
) -> Result<(), EmbeddedError> {
    let mut header = match buckets.get((series, hour, seq))? {
        Some(g) => BucketHeader::decode(g.value())?,
        // A chunk without its bucket is left to the reads that skip it.
        None => return Ok(()),
    };
    if header.writes.iter().all(|&w| w == BY_SERIES) {
        return Ok(());
    }
    let mut stored: Vec<(ChunkAt, Vec<u8>)> = Vec::with_capacity(header.writes.len());
    for at in chunks::of_bucket(series, hour, seq, &header.writes) {
        if let Some(g) = chunks.get(at)? {
            stored.push((at, g.value().to_vec()));
        }
    }
    let joined = if header.sorted && stored.len() > 1 && stored.len() == header.writes.len() {
        join(&stored, hour).filter(|readings| readings.len() == header.count as usize)
    } else {
        None
    };
    for (at, _) in &stored {
        chunks.remove(*at)?;
    }
    match joined {
        Some(readings) => {
            let at = ChunkAt { series, hour, seq, index: 0, write: BY_SERIES };
            chunks.insert(at, codec::encode_chunk(hour, &readings).as_slice())?;
            header.writes = vec![BY_SERIES];
            header.last_chunk = Some(header.count);
            report.chunks += stored.len() as u64;
        }
        None => {
            for (at, bytes) in &stored {
                chunks.insert(ChunkAt { write: BY_SERIES, ..*at }, bytes)?;
                report.chunks += u64::from(!at.is_by_series());
            }
            header.writes.fill(BY_SERIES);
        }
    }
    buckets.insert((series, hour, seq), header.encode().as_slice())?;
    report.buckets += 1;
    Ok(())
}

/// The readings of a sorted bucket's chunks in chunk order, which is time order; `None` when
/// one does not decode (it is then moved as it is, for its reads to report).
fn join(stored: &[(ChunkAt, Vec<u8>)], hour: TimestampMs) -> Option<Vec<Reading>> {
    let mut readings = Vec::new();
    for (_, bytes) in stored {
        codec::decode_chunk(bytes, hour, &mut readings).ok()?;
    }
    Some(readings)
}
