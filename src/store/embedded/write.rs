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
    /// Whether this transaction created a series.
    new_series: bool,
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
            new_series: false,
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

/// What [`write_batches`] did.
pub(super) struct Written {
    /// One per batch.
    pub outcomes: Vec<Result<WriteReport, StoreError>>,
    /// Whether it committed a series that did not exist before.
    pub new_series: bool,
}

/// Writes `batches`, with one outcome per batch. A batch that breaks the `Batch` invariant,
/// or whose stored series or bucket turns out corrupt, fails alone; a redb error (I/O, disk
/// full) aborts the transaction and fails every batch that was to be written.
pub(super) fn write_batches(db: &Database, w: Writing, batches: &[Batch]) -> Written {
    let mut outcomes: Vec<Result<WriteReport, StoreError>> =
        batches.iter().map(|b| check_batch(b).map(|()| WriteReport::default())).collect();
    let todo: Vec<usize> =
        (0..batches.len()).filter(|&i| outcomes[i].is_ok() && !batches[i].is_empty()).collect();
    if todo.is_empty() {
        return Written { outcomes, new_series: false };
    }
    let mut new_series = false;
    match commit(db, w, batches, &todo) {
        Ok((results, created)) => {
            new_series = created;
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
    Written { outcomes, new_series }
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
) -> Result<(Vec<Result<WriteReport, StoreError>>, bool), EmbeddedError> {
    let mut txn = db.begin_write()?;
    // Durability stays redb's default (Immediate: fsync before commit returns).
    txn.set_quick_repair(true);
    let cut = cut_batch(w.fail_after, batches, todo);
    let mut results: Vec<Result<WriteReport, StoreError>> =
        vec![Ok(WriteReport::default()); todo.len()];
    let new_series;
    {
        let mut t = Tables::open(&txn)?;
        let mut items: Vec<Item<'_>> = todo
            .iter()
            .enumerate()
            .filter_map(|(slot, &i)| {
                let batch = match &cut {
                    Some(c) if c.slot == slot => &c.prefix,
                    _ => &batches[i],
                };
                (!batch.is_empty()).then(|| Item::new(slot, batch))
            })
            .collect();
        write_items(&mut t, w, &mut items)?;
        for item in items {
            if let Some(outcome) = item.outcome {
                results[item.slot] = outcome;
            }
        }
        new_series = t.new_series;
    }
    if let Some(c) = cut {
        results[c.slot] = Err(StoreError::Unavailable(format!(
            "embedded store: the test broke this batch off after {} readings",
            c.landed
        )));
    }
    super::commit(db, txn)?;
    Ok((results, new_series))
}

/// The batch the test hook (`EmbeddedStore::fail_next_batch_after`) breaks off: the first
/// numbered one longer than `landed`, of which only the first `landed` readings are written.
struct Cut {
    slot: usize,
    landed: usize,
    prefix: Batch,
}

fn cut_batch(fail_after: usize, batches: &[Batch], todo: &[usize]) -> Option<Cut> {
    let landed = Some(fail_after).filter(|&n| n != usize::MAX)?;
    todo.iter().enumerate().find_map(|(slot, &i)| {
        let batch = &batches[i];
        (batch.is_numbered() && landed < batch.len()).then(|| Cut {
            slot,
            landed,
            prefix: batch.prefix(landed),
        })
    })
}

/// One batch of the write, and what the write learned of it.
struct Item<'b> {
    /// Its place in the results.
    slot: usize,
    batch: &'b Batch,
    first: TimestampMs,
    last: TimestampMs,
    /// Its timestamps sorted, when they do not rise as written (readings that came out of
    /// order); `None` when they rise, and then it repeats no point.
    sorted: Option<Vec<TimestampMs>>,
    /// Its series' id, once found or created.
    series_id: Option<u64>,
    /// On one batch of each series: its record as stored before this write, or as this write
    /// created it.
    record: Option<SeriesRecord>,
    /// The latest reading time of its series stored before this write (`MIN` for a new
    /// series): only a reading at or before it can meet a stored point.
    stored_last: TimestampMs,
    /// `None` until the batch was written or failed alone.
    outcome: Option<Result<WriteReport, StoreError>>,
}

impl<'b> Item<'b> {
    fn new(slot: usize, batch: &'b Batch) -> Self {
        let (mut first, mut last, mut rising) = (TimestampMs::MAX, TimestampMs::MIN, true);
        for ts in batch.rows().views().map(|r| r.ts()) {
            rising &= ts > last;
            (first, last) = (first.min(ts), last.max(ts));
        }
        // Sorted once for both questions a write may ask: does the batch repeat a point, and
        // which of its times may meet a stored one.
        let sorted = (!rising).then(|| {
            let mut ts: Vec<TimestampMs> = batch.rows().timestamps().collect();
            ts.sort_unstable();
            ts
        });
        Item {
            slot,
            batch,
            first,
            last,
            sorted,
            series_id: None,
            record: None,
            stored_last: TimestampMs::MIN,
            outcome: None,
        }
    }

    fn key(&self) -> (&str, TimestampMs) {
        (self.batch.series.key(), self.batch.hour)
    }

    fn written(&self) -> bool {
        matches!(self.outcome, Some(Ok(_)))
    }

    /// Whether two of its readings share a timestamp.
    fn repeats_a_point(&self) -> bool {
        self.sorted.as_ref().is_some_and(|ts| ts.windows(2).any(|w| w[0] == w[1]))
    }

    /// Its timestamps at or before `t`, ascending (a time repeated within the batch repeated).
    fn times_up_to(&self, t: TimestampMs) -> std::borrow::Cow<'_, [TimestampMs]> {
        match &self.sorted {
            Some(ts) => ts[..ts.partition_point(|&ts| ts <= t)].into(),
            None => self.batch.rows().timestamps().take_while(|&ts| ts <= t).collect(),
        }
    }
}

/// Writes the batches in three passes, each in the order of the tables it changes: series
/// and marks are keyed by the sensor key, buckets and chunks by the series id. A write of
/// thousands of slow sensors changes a few bytes in each of thousands of B-tree leaves; in
/// the tables' order, each leaf is read, changed and written out once, where the take's
/// order made every batch fetch (and the cache write back) leaves of its own.
/// Stable sorts keep the batches of one series and hour in the order taken.
fn write_items(
    t: &mut Tables<'_>,
    w: Writing,
    items: &mut [Item<'_>],
) -> Result<(), EmbeddedError> {
    items.sort_by(|a, b| a.key().cmp(&b.key()));
    for group in items.chunk_by_mut(|a, b| a.batch.series.key() == b.batch.series.key()) {
        find_series(t, group)?;
    }
    items.sort_by_key(|item| (item.series_id, item.batch.hour));
    // The latest time of the series written so far, this write's batches of it included.
    let mut latest: Option<(u64, TimestampMs)> = None;
    for item in items.iter_mut() {
        if let (None, Some(id)) = (&item.outcome, item.series_id) {
            let stored_last = match latest {
                Some((series, last)) if series == id => last,
                _ => item.stored_last,
            };
            let outcome = if item.first <= stored_last {
                write_points(t, w.limits, item, id, &item.times_up_to(stored_last))?
            } else if item.repeats_a_point() {
                append_batch(t, w.limits, &item.batch.points(), id)?
            } else {
                append_batch(t, w.limits, item.batch, id)?
            };
            if outcome.is_ok() {
                latest = Some((id, stored_last.max(item.last)));
            }
            item.outcome = Some(outcome);
        }
    }
    items.sort_by(|a, b| a.key().cmp(&b.key()));
    for group in items.chunk_by(|a, b| a.batch.series.key() == b.batch.series.key()) {
        // The first pass widened the record to every batch; a failed one must not.
        if group.iter().any(|item| matches!(item.outcome, Some(Err(_))))
            && let Some(record) = widened(group, Item::written)
        {
            put_series(t, group[0].batch.series.key(), &record)?;
        }
        for item in group.iter().filter(|item| item.written()) {
            record_mark(t, w.writer, item.batch)?;
        }
    }
    Ok(())
}

/// Reads the series record of a group of batches (one sensor's), creating the series when it
/// is new, and widens its first and last to the group's batches: one lookup and at most one
/// rewrite per series, however many of its batches the write holds. A record that does not
/// decode fails the group before anything of it is written.
fn find_series(t: &mut Tables<'_>, group: &mut [Item<'_>]) -> Result<(), EmbeddedError> {
    let key = group[0].batch.series.key();
    let stored = t.series.get(key)?.map(|g| SeriesRecord::decode(g.value()));
    let (record, stored_last) = match stored {
        Some(Ok(record)) => {
            let last = record.last;
            (record, last)
        }
        Some(Err(e)) => {
            let e = StoreError::from(e);
            for item in group.iter_mut() {
                item.outcome = Some(Err(e.clone()));
            }
            return Ok(());
        }
        // Created with its first batch's span: nothing of it is stored yet.
        None => {
            (create_series(t, group[0].batch, group[0].first, group[0].last)?, TimestampMs::MIN)
        }
    };
    let stored = (record.first, record.last);
    for item in group.iter_mut() {
        item.series_id = Some(record.id);
        item.stored_last = stored_last;
    }
    group[0].record = Some(record);
    match widened(group, |_| true) {
        Some(record) if (record.first, record.last) != stored => put_series(t, key, &record),
        _ => Ok(()),
    }
}

/// The span of the group's series record before this write, widened to its batches that
/// `count`.
fn widened<'b>(group: &[Item<'b>], count: impl Fn(&Item<'b>) -> bool) -> Option<SeriesRecord> {
    let stored = group.iter().find_map(|item| item.record.as_ref())?;
    let counted = || group.iter().filter(|item| count(item));
    let first = counted().map(|item| item.first).fold(stored.first, TimestampMs::min);
    let last = counted().map(|item| item.last).fold(stored.last, TimestampMs::max);
    Some(SeriesRecord { first, last, ..stored.clone() })
}

fn put_series(t: &mut Tables<'_>, key: &str, record: &SeriesRecord) -> Result<(), EmbeddedError> {
    t.series.insert(key, record.encode().as_slice())?;
    Ok(())
}

fn record_mark(t: &mut Tables<'_>, writer: WriterId, batch: &Batch) -> Result<(), EmbeddedError> {
    let Some(last) = batch.last_seq() else { return Ok(()) };
    let key = (batch.series.key(), batch.hour, writer.0);
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

/// Writes a batch some of whose readings may be points already stored in its hour (those at
/// `times`, ascending: its readings at or before its series' latest stored time, from the
/// series record or an earlier batch of this write): each such point becomes one reading,
/// the stored one with the batch's fields written over it (`Reading::overlay`), and the hour's
/// buckets are written again from their readings, so that their statistics count each point
/// once. A batch that meets no stored point is appended as it is (folded if it repeats one):
/// readings that merely came out of order (concurrent clients) only have the chunks their
/// times fall in looked at. A met point (a re-sent or redelivered write) reads the hour whole:
/// at most its buckets' caps.
fn write_points(
    t: &mut Tables<'_>,
    limits: BucketLimits,
    item: &Item<'_>,
    series_id: u64,
    times: &[TimestampMs],
) -> Result<Result<WriteReport, StoreError>, EmbeddedError> {
    let batch = item.batch;
    let mut buckets: Vec<(u32, BucketHeader)> = Vec::new();
    for entry in t.buckets.range((series_id, batch.hour, 0)..=(series_id, batch.hour, u32::MAX))? {
        let (k, v) = entry?;
        match BucketHeader::decode(v.value()) {
            Ok(h) => buckets.push((k.value().2, h)),
            Err(e) => return Ok(Err(e.into())),
        }
    }
    let met = match meets_a_point(t, series_id, batch.hour, &buckets, times)? {
        Ok(met) => met,
        Err(e) => return Ok(Err(e)),
    };
    if !met {
        return if item.repeats_a_point() {
            append_batch(t, limits, &batch.points(), series_id)
        } else {
            append_batch(t, limits, batch, series_id)
        };
    }
    let mut stored: Vec<Reading> = Vec::new();
    for (seq, h) in &buckets {
        for at in chunks::of_bucket(series_id, batch.hour, *seq, &h.writes) {
            let Some(chunk) = t.chunks.get(at)? else { continue };
            if let Err(e) = codec::decode_chunk(chunk.value(), batch.hour, &mut stored) {
                return Ok(Err(e.into()));
            }
        }
    }
    let at: std::collections::HashMap<TimestampMs, usize> =
        stored.iter().enumerate().map(|(i, r)| (r.ts, i)).collect();
    for reading in batch.readings() {
        match at.get(&reading.ts) {
            Some(&i) => stored[i].overlay(&reading),
            None => stored.push(reading),
        }
    }
    crate::model::fold_points(&mut stored);
    for (seq, h) in &buckets {
        t.buckets.remove((series_id, batch.hour, *seq))?;
        for at in chunks::of_bucket(series_id, batch.hour, *seq, &h.writes) {
            t.chunks.remove(at)?;
        }
    }
    let rewritten = Batch::new(batch.series.clone(), batch.hour, stored);
    // The hour's buckets are made anew; only those beyond the old ones are new.
    Ok(append_batch(t, limits, &rewritten, series_id)?.map(|report| WriteReport {
        buckets_created: report.buckets_created.saturating_sub(buckets.len() as u32),
    }))
}

/// Whether the hour's buckets hold a reading at any of `times` (ascending, repeats allowed):
/// only the timestamps of the chunks whose span holds one of them are decoded. The inner error
/// is a bucket's own.
fn meets_a_point(
    t: &Tables<'_>,
    series_id: u64,
    hour: TimestampMs,
    buckets: &[(u32, BucketHeader)],
    times: &[TimestampMs],
) -> Result<Result<bool, StoreError>, EmbeddedError> {
    let within = |lo: TimestampMs, hi: TimestampMs| {
        let i = times.partition_point(|&ts| ts < lo);
        times.get(i).is_some_and(|&ts| ts <= hi)
    };
    let mut stored = Vec::new();
    for (seq, h) in buckets.iter().filter(|(_, h)| within(h.min_ts, h.max_ts)) {
        for at in chunks::of_bucket(series_id, hour, *seq, &h.writes) {
            let Some(chunk) = t.chunks.get(at)? else { continue };
            let bytes = chunk.value();
            match codec::chunk_summary(bytes, hour) {
                Ok(summary) if !within(summary.first, summary.last) => continue,
                Ok(_) => {}
                Err(e) => return Ok(Err(e.into())),
            }
            if let Err(e) = codec::chunk_timestamps(bytes, hour, &mut stored) {
                return Ok(Err(e.into()));
            }
            if stored.iter().any(|ts| times.binary_search(ts).is_ok()) {
                return Ok(Ok(true));
            }
        }
    }
    Ok(Ok(false))
}

/// Appends one batch's readings to its series' buckets. The outer error aborts the whole
/// transaction; the inner one fails only this batch and is returned before anything is
/// modified.
fn append_batch(
    t: &mut Tables<'_>,
    limits: BucketLimits,
    batch: &Batch,
    series_id: u64,
) -> Result<Result<WriteReport, StoreError>, EmbeddedError> {
    // Read in place: making a `Reading` of each row was a large part of this write.
    let readings: Vec<Row<'_>> = batch.rows().views().collect();
    let hour = batch.hour;

    // Reads that can meet corrupt data come first, so that such a batch fails before it has
    // modified anything.
    let open_bucket = {
        let mut range = t.buckets.range((series_id, hour, 0)..=(series_id, hour, u32::MAX))?;
        match range.next_back().transpose()? {
            Some((k, v)) => match BucketHeader::decode(v.value()) {
                Ok(h) => Some((series_id, k.value().2, h)),
                Err(e) => return Ok(Err(e.into())),
            },
            None => None,
        }
    };
    // A bucket written before schema 3 has no first/last values: count its statistics again
    // from its readings (at most a bucket's worth, once), so that every bucket written to from
    // now on answers them.
    let open_bucket = match open_bucket {
        Some((id, seq, mut h)) if h.lacks_first_last() => {
            let mut readings = Vec::with_capacity(h.count as usize);
            for at in chunks::of_bucket(id, hour, seq, &h.writes) {
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
) -> Result<SeriesRecord, EmbeddedError> {
    let id = t
        .meta
        .get(META_NEXT_SERIES_ID)?
        .map(|g| g.value())
        .ok_or_else(|| EmbeddedError::Corrupt("meta table lacks next_series_id".into()))?;
    t.meta.insert(META_NEXT_SERIES_ID, id + 1)?;
    t.new_series = true;
    let s = &batch.series;
    let record = SeriesRecord {
        id,
        measurement: s.measurement().to_owned(),
        tags: s.tag_vec(),
        first,
        last,
    };
    t.series.insert(s.key(), record.encode().as_slice())?;
    for (k, v) in s.tags() {
        t.tags.insert((k, v, s.key()), ())?;
    }
    t.measurements.insert((s.measurement(), s.key()), ())?;
    Ok(record)
}

/// A bucket's last chunk holding fewer readings than this takes the next write's readings
/// too (decoded, merged and encoded again) rather than the write making a chunk of its own.
/// A slow sensor's flush brings a handful of readings, and a chunk per flush cost more in its
/// key, its name dictionary and its B-tree entry than in its readings (docs/design/stores.md,
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
    let Some(at) = chunks::of_bucket(series_id, hour, seq, &header.writes).next_back() else {
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
