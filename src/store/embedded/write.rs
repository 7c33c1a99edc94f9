//! The write path: every batch of one `Store::write` call in one durable redb transaction.

use redb::{Database, ReadableTable, Table, WriteTransaction};

use super::chunks::{self, ChunkAt, WriteChunks};
use super::codec::{self, BucketHeader, SeriesRecord};
use super::{
    BUCKETS, EmbeddedError, MEASUREMENT_INDEX, META, META_NEXT_SERIES_ID, META_NEXT_WRITE, SERIES,
    TAG_INDEX, WRITER_MARKS,
};
use crate::model::{
    Batch, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Reading, ReadingView, Row, TimestampMs, WriterId,
    hour_start,
};
use crate::store::approx_reading_bytes;
use crate::store::{BucketLimits, StoreError, WriteReport};

struct Tables<'t> {
    meta: Table<'t, &'static str, u64>,
    series: Table<'t, &'static str, &'static [u8]>,
    tags: Table<'t, (&'static str, &'static str, &'static str), ()>,
    measurements: Table<'t, (&'static str, &'static str), ()>,
    buckets: Table<'t, (u64, i64, u32), &'static [u8]>,
    chunks: WriteChunks<'t>,
    marks: Table<'t, (&'static str, i64, u64), u64>,
    /// This transaction's number, which its new chunks are keyed by.
    write: u64,
}

impl<'t> Tables<'t> {
    fn open(txn: &'t WriteTransaction) -> Result<Self, EmbeddedError> {
        let mut meta = txn.open_table(META)?;
        let write = meta
            .get(META_NEXT_WRITE)?
            .map(|g| g.value())
            .ok_or_else(|| EmbeddedError::Corrupt("meta table lacks next_write".into()))?;
        meta.insert(META_NEXT_WRITE, write + 1)?;
        Ok(Tables {
            meta,
            series: txn.open_table(SERIES)?,
            tags: txn.open_table(TAG_INDEX)?,
            measurements: txn.open_table(MEASUREMENT_INDEX)?,
            buckets: txn.open_table(BUCKETS)?,
            chunks: chunks::open_write(txn)?,
            marks: txn.open_table(WRITER_MARKS)?,
            write,
        })
    }
}

/// How one `Store::write` call writes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Writing {
    pub writer: WriterId,
    pub limits: BucketLimits,
    /// The test hook of `EmbeddedStore::fail_next_batch_after`; `usize::MAX` when off.
    pub fail_after: usize,
}

/// Writes `batches`, returning one outcome per batch. A batch that breaks the `Batch`
/// invariant, or whose stored series or bucket turns out corrupt, fails alone; a redb error
/// (I/O, disk full) aborts the transaction and fails every batch that was to be written.
pub(super) fn write_batches(
    db: &Database,
    w: Writing,
    batches: &[Batch],
) -> Vec<Result<WriteReport, StoreError>> {
    let mut outcomes: Vec<Result<WriteReport, StoreError>> =
        batches.iter().map(|b| check_batch(b).map(|()| WriteReport::default())).collect();
    let todo: Vec<usize> =
        (0..batches.len()).filter(|&i| outcomes[i].is_ok() && !batches[i].is_empty()).collect();
    if todo.is_empty() {
        return outcomes;
    }
    match commit(db, w, batches, &todo) {
        Ok(results) => {
            for (i, r) in todo.into_iter().zip(results) {
                outcomes[i] = r;
            }
        }
        Err(e) => {
            let e = StoreError::from(e);
            for i in todo {
                outcomes[i] = Err(e.clone());
            }
        }
    }
    outcomes
}

fn check_batch(batch: &Batch) -> Result<(), StoreError> {
    if !(MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&batch.hour)
        || hour_start(batch.hour) != batch.hour
    {
        return Err(StoreError::Rejected(format!(
            "batch hour {} is not the start of an hour",
            batch.hour
        )));
    }
    // A batch's readings lie in its hour (`Batch` checks that when it is made).
    Ok(())
}

fn commit(
    db: &Database,
    w: Writing,
    batches: &[Batch],
    todo: &[usize],
) -> Result<Vec<Result<WriteReport, StoreError>>, EmbeddedError> {
    let mut txn = db.begin_write()?;
    // Durability stays redb's default (Immediate: fsync before commit returns).
    txn.set_quick_repair(true);
    let mut results = Vec::with_capacity(todo.len());
    let mut fail_after = Some(w.fail_after).filter(|&n| n != usize::MAX);
    {
        let mut t = Tables::open(&txn)?;
        for &i in todo {
            let batch = &batches[i];
            if let Some(landed) = fail_after.filter(|&n| batch.is_numbered() && n < batch.len()) {
                fail_after = None;
                let prefix = batch.prefix(landed);
                if !prefix.is_empty() && append_batch(&mut t, w.limits, &prefix)?.is_ok() {
                    record_mark(&mut t, w.writer, &prefix)?;
                }
                results.push(Err(StoreError::Unavailable(format!(
                    "embedded store: the test broke this batch off after {landed} readings"
                ))));
                continue;
            }
            let result = append_batch(&mut t, w.limits, batch)?;
            if result.is_ok() {
                record_mark(&mut t, w.writer, batch)?;
            }
            results.push(result);
        }
    }
    txn.commit()?;
    Ok(results)
}

/// In the batch's own transaction, so the mark and the readings land together.
fn record_mark(t: &mut Tables<'_>, writer: WriterId, batch: &Batch) -> Result<(), EmbeddedError> {
    let Some(last) = batch.last_seq() else { return Ok(()) };
    let key = (batch.series.key.as_str(), batch.hour, writer.0);
    // Marks almost always grow, so write first and put a higher old mark back (a refill of
    // older readings): one B-tree operation per batch instead of a lookup and a write.
    let old = t.marks.insert(key, last)?.map(|g| g.value());
    if let Some(old) = old
        && old > last
    {
        t.marks.insert(key, old)?;
    }
    Ok(())
}

/// Appends one batch. The outer error aborts the whole transaction; the inner one fails only
/// this batch and is returned before anything is modified.
fn append_batch(
    t: &mut Tables<'_>,
    limits: BucketLimits,
    batch: &Batch,
) -> Result<Result<WriteReport, StoreError>, EmbeddedError> {
    // Read in place: making a `Reading` of each row was a sixth of this write.
    let readings: Vec<Row<'_>> = batch.rows().views().collect();
    let first = readings.iter().map(Row::ts).min().expect("batch is not empty");
    let last = readings.iter().map(Row::ts).max().expect("batch is not empty");
    let key = batch.series.key.as_str();
    let hour = batch.hour;

    // Reads that can meet corrupt data come first, so that such a batch fails before it has
    // modified anything.
    let stored = match t.series.get(key)? {
        Some(g) => match SeriesRecord::decode(g.value()) {
            Ok(r) => Some(r),
            Err(e) => return Ok(Err(e.into())),
        },
        None => None,
    };
    let open_bucket = match &stored {
        Some(s) => {
            let mut range = t.buckets.range((s.id, hour, 0)..=(s.id, hour, u32::MAX))?;
            match range.next_back().transpose()? {
                Some((k, v)) => match BucketHeader::decode(v.value()) {
                    Ok(h) => Some((s.id, k.value().2, h)),
                    Err(e) => return Ok(Err(e.into())),
                },
                None => None,
            }
        }
        None => None,
    };
    // A bucket written before schema 3 has no first/last values: count its statistics again
    // from its readings (at most a bucket's worth, once), so that every bucket written to from
    // now on answers them.
    let open_bucket = match open_bucket {
        Some((id, seq, mut h)) if h.lacks_first_last() => {
            let mut readings = Vec::with_capacity(h.count as usize);
            for at in chunks::of_bucket(id, hour, seq, &h) {
                let Some(chunk) = t.chunks.get(at)? else { continue };
                if let Err(e) = codec::decode_chunk(chunk.value(), hour, &mut readings) {
                    return Ok(Err(e.into()));
                }
            }
            h.recount_stats(&readings);
            Some((seq, h))
        }
        Some((_, seq, h)) => Some((seq, h)),
        None => None,
    };

    let series_id = match stored {
        Some(mut s) => {
            if first < s.first || last > s.last {
                s.first = s.first.min(first);
                s.last = s.last.max(last);
                t.series.insert(key, s.encode().as_slice())?;
            }
            s.id
        }
        None => create_series(t, batch, first, last)?,
    };

    let mut report = WriteReport::default();
    let (mut seq, mut header) = match open_bucket {
        Some((seq, h)) => (seq, h),
        None => {
            report.buckets_created += 1;
            (0, BucketHeader::empty())
        }
    };
    // Readings fill buckets in the order written (as in the other stores), so the same writes
    // spill at the same points whatever the store.
    let mut start = 0;
    let mut pending_bytes = 0u64;
    for (i, r) in readings.iter().enumerate() {
        let size = approx_reading_bytes(r);
        let count = u64::from(header.count) + (i - start) as u64;
        let fits = count == 0
            || (count < u64::from(limits.max_readings)
                && header.bytes + pending_bytes + size <= u64::from(limits.max_bytes));
        if !fits {
            if i > start {
                let chunk = &readings[start..i];
                append_chunk(t, series_id, hour, seq, &mut header, chunk, pending_bytes)?;
            }
            seq += 1;
            header = BucketHeader::empty();
            report.buckets_created += 1;
            start = i;
            pending_bytes = 0;
        }
        pending_bytes += size;
    }
    append_chunk(t, series_id, hour, seq, &mut header, &readings[start..], pending_bytes)?;
    Ok(Ok(report))
}

fn create_series(
    t: &mut Tables<'_>,
    batch: &Batch,
    first: TimestampMs,
    last: TimestampMs,
) -> Result<u64, EmbeddedError> {
    let id = t
        .meta
        .get(META_NEXT_SERIES_ID)?
        .map(|g| g.value())
        .ok_or_else(|| EmbeddedError::Corrupt("meta table lacks next_series_id".into()))?;
    t.meta.insert(META_NEXT_SERIES_ID, id + 1)?;
    let s = &batch.series;
    let record =
        SeriesRecord { id, measurement: s.measurement.clone(), tags: s.tags.clone(), first, last };
    t.series.insert(s.key.as_str(), record.encode().as_slice())?;
    for (k, v) in &s.tags {
        t.tags.insert((k.as_str(), v.as_str(), s.key.as_str()), ())?;
    }
    t.measurements.insert((s.measurement.as_str(), s.key.as_str()), ())?;
    Ok(id)
}

/// A bucket's last chunk holding fewer readings than this takes the next write's readings
/// too (decoded, merged and encoded again) rather than the write making a chunk of its own.
/// A slow sensor's flush brings a handful of readings, and a chunk per flush cost more in its
/// key, its name dictionary and its B-tree entry than in its readings (ARCHITECTURE.md,
/// "The embedded store"). A fast sensor's writes are larger than this and are never re-encoded.
pub(super) const SMALL_CHUNK: u32 = 128;

fn append_chunk(
    t: &mut Tables<'_>,
    series_id: u64,
    hour: TimestampMs,
    seq: u32,
    header: &mut BucketHeader,
    readings: &[Row<'_>],
    bytes: u64,
) -> Result<(), EmbeddedError> {
    let sorted: Vec<Row<'_>> = if readings.is_sorted_by_key(Row::ts) {
        readings.to_vec()
    } else {
        // By timestamps read once: a row's is behind a pointer, and reading it in every
        // comparison was most of the write's sort. Stable: equal timestamps keep the order
        // they were written in.
        let mut keyed: Vec<(TimestampMs, Row<'_>)> =
            readings.iter().map(|r| (r.ts(), *r)).collect();
        keyed.sort_by_key(|&(ts, _)| ts);
        keyed.into_iter().map(|(_, r)| r).collect()
    };
    let (at, chunk) = match small_last_chunk(t, series_id, hour, seq, header)? {
        Some((at, mut joined)) => {
            // The chunk just read tells its size, also where an older header did not say.
            header.last_chunk = Some(joined.len() as u32);
            header.join_last(&sorted, bytes);
            // Few readings (the last chunk is small only for a slow sensor): made after all.
            joined.extend(sorted.iter().map(Row::to_reading));
            // Stable, as if both had come in one write; already in order in the usual case.
            if !joined.is_sorted_by_key(|r| r.ts) {
                joined.sort_by_key(|r| r.ts);
            }
            (at, codec::encode_chunk(hour, &joined))
        }
        None => {
            let at =
                ChunkAt { series: series_id, hour, seq, index: header.chunks(), write: t.write };
            header.append(&sorted, bytes, t.write);
            (at, codec::encode_chunk(hour, &sorted))
        }
    };
    // A joined chunk keeps its place: its write is in the header already.
    t.chunks.insert(at, chunk.as_slice())?;
    t.buckets.insert((series_id, hour, seq), header.encode().as_slice())?;
    Ok(())
}

/// The bucket's last chunk, where it is and decoded, when it holds fewer than [`SMALL_CHUNK`]
/// readings. One that does not decode is left as it is (its own reads report it) and the
/// write makes a new chunk, so that no write depends on it.
fn small_last_chunk(
    t: &Tables<'_>,
    series_id: u64,
    hour: TimestampMs,
    seq: u32,
    header: &BucketHeader,
) -> Result<Option<(ChunkAt, Vec<Reading>)>, EmbeddedError> {
    if header.last_chunk.is_some_and(|n| n >= SMALL_CHUNK) {
        return Ok(None);
    }
    let Some(at) = chunks::of_bucket(series_id, hour, seq, header).next_back() else {
        return Ok(None);
    };
    let Some(stored) = t.chunks.get(at)? else { return Ok(None) };
    let bytes = stored.value();
    match codec::chunk_summary(bytes, hour) {
        Ok(summary) if summary.count < SMALL_CHUNK => {}
        _ => return Ok(None),
    }
    let mut readings = Vec::with_capacity(SMALL_CHUNK as usize * 2);
    Ok(codec::decode_chunk(bytes, hour, &mut readings).ok().map(|_| (at, readings)))
}
