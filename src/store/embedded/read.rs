//! The read paths: streamed ranges, rollups and sensor lookups.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use futures::StreamExt;
use futures::future::Either;
use futures::stream::{self, BoxStream};
use redb::{Database, ReadOnlyTable, ReadTransaction, ReadableDatabase};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::codec::{self, BucketHeader, SeriesRecord};
use super::{BUCKETS, CHUNKS, EmbeddedError, MEASUREMENT_INDEX, SERIES, TAG_INDEX};
use crate::model::{HOUR_MS, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Reading, TimestampMs, hour_start};
use crate::store::{
    FieldStats, Order, RangeQuery, RollupQuery, RollupRow, SensorInfo, SensorQuery, StoreError,
};

/// Readings per message from a range reader to its stream.
const SEND_BATCH: usize = 512;
/// Messages a range reader may have in flight. Full-policy: the reader thread waits
/// (`blocking_send`) until the consumer catches up, so a range holds at most about
/// `(STREAM_CHANNEL_MESSAGES + 2) * SEND_BATCH` decoded readings in memory, plus one hour of one
/// series when that hour was written out of order (see [`visit_hour`]).
const STREAM_CHANNEL_MESSAGES: usize = 4;

type Msg = Result<Vec<Reading>, StoreError>;

type Buckets = ReadOnlyTable<(u64, i64, u32), &'static [u8]>;
type Chunks = ReadOnlyTable<(u64, i64, u32, u32), &'static [u8]>;

fn series_record(txn: &ReadTransaction, key: &str) -> Result<Option<SeriesRecord>, EmbeddedError> {
    let series = txn.open_table(SERIES)?;
    let guard = series.get(key)?;
    guard.map(|g| SeriesRecord::decode(g.value())).transpose()
}

/// Streams a range from a blocking reader thread that starts on the first poll and stops as soon
/// as the stream is dropped (its next send fails).
pub(super) fn stream(
    db: Arc<Database>,
    query: RangeQuery,
) -> BoxStream<'static, Result<Reading, StoreError>> {
    enum State {
        Start(Arc<Database>, RangeQuery),
        Running(mpsc::Receiver<Msg>, JoinHandle<()>),
        Done,
    }
    stream::unfold(State::Start(db, query), |state| async move {
        let (mut rx, handle) = match state {
            State::Start(db, query) => {
                let (tx, rx) = mpsc::channel(STREAM_CHANNEL_MESSAGES);
                let handle = tokio::task::spawn_blocking(move || produce(&db, &query, &tx));
                (rx, handle)
            }
            State::Running(rx, handle) => (rx, handle),
            State::Done => return None,
        };
        match rx.recv().await {
            Some(msg) => Some((msg, State::Running(rx, handle))),
            // The reader has returned or panicked; a panic must not look like the end of data.
            None => match handle.await {
                Ok(()) => None,
                Err(e) => {
                    let e = StoreError::Internal(format!("range reader failed: {e}"));
                    Some((Err(e), State::Done))
                }
            },
        }
    })
    .flat_map(|msg| match msg {
        Ok(readings) => Either::Left(stream::iter(readings.into_iter().map(Ok))),
        Err(e) => Either::Right(stream::iter([Err(e)])),
    })
    .boxed()
}

fn produce(db: &Database, query: &RangeQuery, tx: &mpsc::Sender<Msg>) {
    let limit = query.limit.unwrap_or(usize::MAX);
    let mut batch = Vec::with_capacity(SEND_BATCH);
    let mut emitted = 0usize;
    let mut receiver_gone = false;
    let result = (|| {
        if limit == 0 {
            return Ok(());
        }
        let txn = db.begin_read()?;
        let Some(series) = series_record(&txn, &query.sensor)? else {
            return Ok(());
        };
        let (buckets, chunks) = (txn.open_table(BUCKETS)?, txn.open_table(CHUNKS)?);
        // Whether the callback stopped the scan early makes no difference here.
        let _: ControlFlow<()> = visit_range(
            &buckets,
            &chunks,
            series.id,
            query.from,
            query.to,
            query.order,
            &mut |r| {
                batch.push(r);
                emitted += 1;
                if batch.len() == SEND_BATCH || emitted == limit {
                    let full = std::mem::replace(&mut batch, Vec::with_capacity(SEND_BATCH));
                    if tx.blocking_send(Ok(full)).is_err() {
                        receiver_gone = true;
                        return ControlFlow::Break(());
                    }
                }
                if emitted == limit { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
            },
        )?;
        Ok::<(), EmbeddedError>(())
    })();
    if receiver_gone {
        return;
    }
    // Whatever was read before an error is delivered first, then the error ends the stream.
    if !batch.is_empty() && tx.blocking_send(Ok(batch)).is_err() {
        return;
    }
    if let Err(e) = result {
        let _ = tx.blocking_send(Err(e.into()));
    }
}

/// Calls `f` with every reading of series `series_id` in `from <= ts < to`, in `order`, until
/// `f` breaks. Equal timestamps come in the order written (reversed for `Desc`).
fn visit_range(
    buckets: &Buckets,
    chunks: &Chunks,
    series_id: u64,
    from: TimestampMs,
    to: TimestampMs,
    order: Order,
    f: &mut dyn FnMut(Reading) -> ControlFlow<()>,
) -> Result<ControlFlow<()>, EmbeddedError> {
    // Nothing is stored outside the accepted timestamps; clamping keeps hour arithmetic on
    // i64::MIN/MAX bounds from overflowing.
    let from = from.max(MIN_TIMESTAMP_MS);
    let to = to.min(MAX_TIMESTAMP_MS + 1);
    if from >= to {
        return Ok(ControlFlow::Continue(()));
    }
    let lo = (series_id, hour_start(from), 0u32);
    let hi = (series_id, hour_start(to - 1), u32::MAX);
    let mut range = buckets.range(lo..=hi)?;
    let mut group: Vec<(u32, BucketHeader)> = Vec::new();
    let mut group_hour = 0;
    loop {
        let next = match order {
            Order::Asc => range.next(),
            Order::Desc => range.next_back(),
        };
        let Some(entry) = next.transpose()? else { break };
        let (_, hour, seq) = entry.0.value();
        if hour != group_hour && !group.is_empty() {
            if visit_hour(chunks, series_id, group_hour, &mut group, from, to, order, f)?.is_break()
            {
                return Ok(ControlFlow::Break(()));
            }
            group.clear();
        }
        group_hour = hour;
        group.push((seq, BucketHeader::decode(entry.1.value())?));
    }
    if group.is_empty() {
        return Ok(ControlFlow::Continue(()));
    }
    visit_hour(chunks, series_id, group_hour, &mut group, from, to, order, f)
}

/// Emits one hour of one series. When every bucket of the hour was written in timestamp order
/// (the common case) the chunks are decoded and emitted one at a time; otherwise the hour's
/// readings in range are collected and stably sorted, which bounds memory by one hour of one
/// series.
#[allow(clippy::too_many_arguments)]
fn visit_hour(
    chunks: &Chunks,
    series_id: u64,
    hour: TimestampMs,
    group: &mut Vec<(u32, BucketHeader)>,
    from: TimestampMs,
    to: TimestampMs,
    order: Order,
    f: &mut dyn FnMut(Reading) -> ControlFlow<()>,
) -> Result<ControlFlow<()>, EmbeddedError> {
    group.sort_by_key(|(seq, _)| *seq);
    group.retain(|(_, h)| h.count > 0 && h.max_ts >= from && h.min_ts < to);
    let in_order = group.iter().all(|(_, h)| h.sorted)
        && group.windows(2).all(|w| w[1].1.min_ts >= w[0].1.max_ts);
    let in_range = |r: &Reading| r.ts >= from && r.ts < to;
    let mut decoded = Vec::new();

    if in_order {
        let seqs: Vec<u32> = match order {
            Order::Asc => group.iter().map(|(s, _)| *s).collect(),
            Order::Desc => group.iter().rev().map(|(s, _)| *s).collect(),
        };
        for seq in seqs {
            let mut range =
                chunks.range((series_id, hour, seq, 0)..=(series_id, hour, seq, u32::MAX))?;
            loop {
                let next = match order {
                    Order::Asc => range.next(),
                    Order::Desc => range.next_back(),
                };
                let Some((_, value)) = next.transpose()? else { break };
                let bytes = value.value();
                let summary = codec::chunk_summary(bytes, hour)?;
                if summary.last < from || summary.first >= to {
                    continue;
                }
                decoded.clear();
                codec::decode_chunk(bytes, hour, &mut decoded)?;
                let flow = match order {
                    Order::Asc => emit(decoded.drain(..).filter(in_range), f),
                    Order::Desc => emit(decoded.drain(..).rev().filter(in_range), f),
                };
                if flow.is_break() {
                    return Ok(flow);
                }
            }
        }
        return Ok(ControlFlow::Continue(()));
    }

    let mut all = Vec::new();
    for (seq, _) in group.iter() {
        for entry in chunks.range((series_id, hour, *seq, 0)..=(series_id, hour, *seq, u32::MAX))? {
            let (_, value) = entry?;
            decoded.clear();
            codec::decode_chunk(value.value(), hour, &mut decoded)?;
            all.extend(decoded.drain(..).filter(in_range));
        }
    }
    // Stable, so equal timestamps keep bucket, chunk and in-chunk order: the order written.
    all.sort_by_key(|r| r.ts);
    Ok(match order {
        Order::Asc => emit(all.into_iter(), f),
        Order::Desc => emit(all.into_iter().rev(), f),
    })
}

fn emit(
    readings: impl Iterator<Item = Reading>,
    f: &mut dyn FnMut(Reading) -> ControlFlow<()>,
) -> ControlFlow<()> {
    for r in readings {
        f(r)?;
    }
    ControlFlow::Continue(())
}

/// Rollups. Whole-hour steps over an hour-aligned range merge the bucket headers' statistics
/// (spilled buckets of one hour included) without touching a reading; anything finer scans
/// the readings.
pub(super) fn rollups(db: &Database, q: &RollupQuery) -> Result<Vec<RollupRow>, EmbeddedError> {
    let txn = db.begin_read()?;
    let Some(series) = series_record(&txn, &q.sensor)? else {
        return Ok(Vec::new());
    };
    let wanted = |name: &str| q.fields.as_ref().is_none_or(|f| f.iter().any(|w| w == name));
    let step_of = |ts: TimestampMs| ts.div_euclid(q.step_ms) * q.step_ms;
    let mut rows: BTreeMap<TimestampMs, BTreeMap<String, FieldStats>> = BTreeMap::new();
    let mut add = |start: TimestampMs, name: &str, s: &FieldStats| {
        let fields = rows.entry(start).or_default();
        match fields.get_mut(name) {
            Some(acc) => acc.merge(s),
            None => {
                fields.insert(name.to_owned(), *s);
            }
        }
    };

    let from_stats = q.step_ms % HOUR_MS == 0 && q.from % HOUR_MS == 0 && q.to % HOUR_MS == 0;
    if from_stats {
        if q.from < q.to {
            let buckets = txn.open_table(BUCKETS)?;
            for entry in buckets.range((series.id, q.from, 0)..(series.id, q.to, 0))? {
                let (key, value) = entry?;
                let start = step_of(key.value().1);
                for (name, s) in &BucketHeader::decode(value.value())?.stats {
                    if wanted(name) {
                        add(start, name, s);
                    }
                }
            }
        }
    } else {
        let (buckets, chunks) = (txn.open_table(BUCKETS)?, txn.open_table(CHUNKS)?);
        let _: ControlFlow<()> =
            visit_range(&buckets, &chunks, series.id, q.from, q.to, Order::Asc, &mut |r| {
                let start = step_of(r.ts);
                for (name, value) in &r.fields {
                    if let Some(v) = value.as_f64().filter(|_| wanted(name)) {
                        add(start, name, &FieldStats::of(v));
                    }
                }
                ControlFlow::Continue(())
            })?;
    }
    // A step whose readings carry none of the wanted numeric fields has nothing to report.
    Ok(rows
        .into_iter()
        .filter(|(_, fields)| !fields.is_empty())
        .map(|(start, fields)| RollupRow { start, fields })
        .collect())
}

/// Sensors matching every tag and the measurement, by key. Candidates come from the tag index of
/// the first tag, else the measurement index, else the series table, all in key order, so the
/// scan stops as soon as `limit` sensors matched.
pub(super) fn sensors(db: &Database, q: &SensorQuery) -> Result<Vec<SensorInfo>, EmbeddedError> {
    let mut out = Vec::new();
    if q.limit == 0 {
        return Ok(out);
    }
    let txn = db.begin_read()?;
    let series = txn.open_table(SERIES)?;
    let after = q.after.as_deref();
    let mut consider = |key: &str, record: SeriesRecord| {
        let matches = q.measurement.as_ref().is_none_or(|m| *m == record.measurement)
            && q.tags.iter().all(|t| record.tags.contains(t));
        if matches {
            out.push(SensorInfo {
                key: key.to_owned(),
                measurement: record.measurement,
                tags: record.tags,
                first: record.first,
                last: record.last,
            });
        }
        out.len() < q.limit
    };
    let lookup = |key: &str| -> Result<SeriesRecord, EmbeddedError> {
        let g = series.get(key)?.ok_or_else(|| {
            EmbeddedError::Corrupt(format!("index names sensor {key:?} that does not exist"))
        })?;
        SeriesRecord::decode(g.value())
    };

    if let Some((k, v)) = q.tags.first() {
        let (k, v) = (k.as_str(), v.as_str());
        let lower = match after {
            Some(a) => Bound::Excluded((k, v, a)),
            None => Bound::Included((k, v, "")),
        };
        let index = txn.open_table(TAG_INDEX)?;
        for entry in index.range::<(&str, &str, &str)>((lower, Bound::Unbounded))? {
            let (guard, _) = entry?;
            let (ik, iv, key) = guard.value();
            if ik != k || iv != v || !consider(key, lookup(key)?) {
                break;
            }
        }
    } else if let Some(m) = q.measurement.as_deref() {
        let lower = match after {
            Some(a) => Bound::Excluded((m, a)),
            None => Bound::Included((m, "")),
        };
        let index = txn.open_table(MEASUREMENT_INDEX)?;
        for entry in index.range::<(&str, &str)>((lower, Bound::Unbounded))? {
            let (guard, _) = entry?;
            let (im, key) = guard.value();
            if im != m || !consider(key, lookup(key)?) {
                break;
            }
        }
    } else {
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        for entry in series.range::<&str>((lower, Bound::Unbounded))? {
            let (key, value) = entry?;
            if !consider(key.value(), SeriesRecord::decode(value.value())?) {
                break;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
pub(super) fn series_id_for_tests(txn: &ReadTransaction, key: &str) -> u64 {
    series_record(txn, key).unwrap().expect("series exists").id
}
