//! A point stored once on MongoDB: a reading whose series already has a reading at its time in
//! that hour is written over that reading (`Reading::overlay`), in its bucket, rather than
//! appended beside it.
//!
//! The usual write meets no stored point: each reading is later than the latest one of its
//! hour. That is told without a read by [`Latest`], the latest time stored per series and
//! hour that this process knows of (its own writes, and what it read), and by one aggregation
//! per write for the series and hours it does not know yet (after a start, and at each new
//! hour). Only a batch that reaches back to or before that latest time has its hour's buckets
//! read whole, and only one that meets a stored point takes the slow path, [`Overlay`]:
//!
//! 1. each bucket holding a met point is replaced, with its statistics counted again from its
//!    readings, by an update filtered on the bucket's count and size as read, so that a bucket
//!    another write changed meanwhile is not overwritten (the batch fails and is retried);
//! 2. the batch's other readings are appended as usual, without a mark;
//! 3. with `--retention`, the hour's statistics document is counted again from the hour's
//!    buckets (only when it counts exactly the readings they hold);
//! 4. the batch's mark is raised last, so that a failure anywhere leaves it unmarked and its
//!    retry or replay writes it again: writing a point over itself changes nothing.
//!
//! Several bucketd processes writing one series see only their own writes in [`Latest`] until
//! an hour they have not written: a point one process stored may be appended again by another
//! within that hour.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use bson::oid::ObjectId;
use bson::{Bson, Document, doc};
use futures::TryStreamExt;

use super::document as d;
use super::query::{documents, open};
use super::{IN_HOUR_STATS, Inner, WITH_MINUTE_STATS, error_from_driver, hours, timed};
use crate::model::{Batch, FieldName, MINUTE_MS, Reading, Seq, TimestampMs, WriterId};
use crate::store::{FieldStats, StoreError};

/// Series [`Latest`] holds at most; past it, it starts again empty (each forgotten hour costs
/// one lookup in the next write that reaches it).
const LATEST_SERIES: usize = 1 << 20;

/// Sensors per lookup aggregation.
const LOOKUP_KEYS: usize = 1000;

/// The latest reading time stored per series, as this process wrote or read it, for the two
/// latest hours it wrote of each: a flush at an hour's turn has both.
#[derive(Default)]
pub(super) struct Latest {
    map: Mutex<HashMap<String, [Option<HourLatest>; 2]>>,
}

/// An hour's start and the latest time stored in it.
type HourLatest = (TimestampMs, TimestampMs);

impl Latest {
    fn get(&self, key: &str, hour: TimestampMs) -> Option<TimestampMs> {
        let map = self.map.lock().expect("latest-time map poisoned");
        map.get(key)?.iter().flatten().find(|(h, _)| *h == hour).map(|&(_, last)| last)
    }

    /// Notes that readings up to `last` of `key`'s `hour` are stored.
    pub(super) fn note(&self, key: &str, hour: TimestampMs, last: TimestampMs) {
        let mut map = self.map.lock().expect("latest-time map poisoned");
        let hours = match map.get_mut(key) {
            Some(hours) => hours,
            None => {
                if map.len() >= LATEST_SERIES {
                    map.clear();
                }
                map.entry(key.to_owned()).or_default()
            }
        };
        if let Some((_, at)) = hours.iter_mut().flatten().find(|(h, _)| *h == hour) {
            *at = (*at).max(last);
            return;
        }
        // The slot of the older hour (or an empty one) takes a newer hour; an older one is
        // not kept.
        let oldest = if hours[0].map(|(h, _)| h) <= hours[1].map(|(h, _)| h) { 0 } else { 1 };
        if hours[oldest].is_none_or(|(h, _)| h < hour) {
            hours[oldest] = Some((hour, last));
        }
    }
}

/// How one batch is written.
pub(super) enum Plan<'b> {
    /// It meets no stored point: appended as usual. Its readings of one time are folded
    /// already.
    Append(Cow<'b, Batch>),
    /// It meets some.
    Overlay(Overlay),
}

/// A batch some of whose readings are points stored in its hour.
pub(super) struct Overlay {
    /// The buckets that hold met points, with their readings as they become.
    changed: Vec<Changed>,
    /// The batch's other readings, without sequence numbers.
    pub fresh: Batch,
    /// The batch's last sequence number, its mark once all of it is stored.
    last_seq: Option<Seq>,
}

struct Changed {
    id: ObjectId,
    version: i32,
    count: i64,
    bytes: i64,
    readings: Vec<Reading>,
}

/// The earliest reading time of a batch.
fn first_ts(batch: &Batch) -> TimestampMs {
    batch.rows().timestamps().min().unwrap_or(TimestampMs::MAX)
}

fn folded(batch: &Batch) -> Cow<'_, Batch> {
    if batch.repeats_a_point() { Cow::Owned(batch.points()) } else { Cow::Borrowed(batch) }
}

/// Plans each batch's write: one outcome per batch, an error failing only its batch.
pub(super) async fn plan<'b>(
    inner: &Inner,
    batches: &'b [Batch],
) -> Vec<Result<Plan<'b>, StoreError>> {
    // Batches that may reach back to a stored point, by index.
    let mut unknown: Vec<usize> = Vec::new();
    let mut plans: Vec<Option<Result<Plan<'b>, StoreError>>> = batches
        .iter()
        .enumerate()
        .map(|(i, b)| match inner.latest.get(b.series.key(), b.hour) {
            Some(last) if last < first_ts(b) => Some(Ok(Plan::Append(folded(b)))),
            _ => {
                unknown.push(i);
                None
            }
        })
        .collect();
    if !unknown.is_empty() {
        match stored_latest(inner, batches, &unknown).await {
            Ok(latest) => {
                for (&i, last) in unknown.iter().zip(latest) {
                    let b = &batches[i];
                    // Kept, not only the batch's own latest once written: a point stored
                    // before this process started may be later than all of this batch.
                    if let Some(last) = last {
                        inner.latest.note(b.series.key(), b.hour, last);
                    }
                    plans[i] = Some(match last {
                        Some(last) if last >= first_ts(b) => overlay(inner, b, last).await,
                        _ => Ok(Plan::Append(folded(b))),
                    });
                }
            }
            Err(e) => {
                for &i in &unknown {
                    plans[i] = Some(Err(e.clone()));
                }
            }
        }
    }
    plans.into_iter().map(|p| p.expect("every batch planned")).collect()
}

/// The latest stored reading time of each batch's series and hour (`None`: no bucket).
async fn stored_latest(
    inner: &Inner,
    batches: &[Batch],
    which: &[usize],
) -> Result<Vec<Option<TimestampMs>>, StoreError> {
    let mut by_hour: std::collections::BTreeMap<TimestampMs, Vec<usize>> = Default::default();
    for (slot, &i) in which.iter().enumerate() {
        by_hour.entry(batches[i].hour).or_default().push(slot);
    }
    let mut out = vec![None; which.len()];
    for (hour, slots) in by_hour {
        for part in slots.chunks(LOOKUP_KEYS) {
            let sensors: Vec<&str> = part.iter().map(|&s| batches[which[s]].series.key()).collect();
            let pipeline = vec![
                doc! {"$match": {d::SENSOR: {"$in": &sensors}, d::START: d::date(hour)}},
                doc! {"$group": {
                    d::ID: format!("${}", d::SENSOR),
                    "last": {"$max": format!("${}", d::LAST)},
                }},
            ];
            let action = inner.buckets.aggregate(pipeline);
            let found: Vec<Document> =
                documents(open(inner.op_timeout, "aggregate", action).await?, inner.op_timeout)
                    .try_collect()
                    .await?;
            let found: HashMap<&str, TimestampMs> = found
                .iter()
                .filter_map(|doc| {
                    Some((
                        doc.get_str(d::ID).ok()?,
                        doc.get_datetime("last").ok()?.timestamp_millis(),
                    ))
                })
                .collect();
            for &s in part {
                out[s] = found.get(batches[which[s]].series.key()).copied();
            }
        }
    }
    Ok(out)
}

/// Whether a bucket of the batch's hour holds a reading at any of `times` (ascending, not
/// empty): only the timestamps of the buckets whose span holds one of them are read.
async fn meets_a_point(
    inner: &Inner,
    batch: &Batch,
    times: &[TimestampMs],
) -> Result<bool, StoreError> {
    let (lo, hi) = (times[0], times[times.len() - 1]);
    let filter = doc! {
        d::SENSOR: batch.series.key(), d::START: d::date(batch.hour),
        d::FIRST: {"$lte": d::date(hi)}, d::LAST: {"$gte": d::date(lo)},
    };
    let action =
        inner.buckets.find(filter).projection(doc! {format!("{}.{}", d::READINGS, d::TIME): 1});
    let docs: Vec<Document> =
        documents(open(inner.op_timeout, "find", action).await?, inner.op_timeout)
            .try_collect()
            .await?;
    Ok(docs.iter().any(|doc| {
        doc.get_array(d::READINGS).is_ok_and(|r| {
            r.iter().any(|r| match r {
                Bson::Document(r) => r
                    .get_datetime(d::TIME)
                    .is_ok_and(|t| times.binary_search(&t.timestamp_millis()).is_ok()),
                _ => false,
            })
        })
    }))
}

/// Tells which of the batch's readings meet stored points, `latest` being the latest time its
/// hour holds: the hour's buckets are read whole only when one is met. Readings that merely
/// came out of order (concurrent clients) are appended as usual.
async fn overlay<'b>(
    inner: &Inner,
    batch: &'b Batch,
    latest: TimestampMs,
) -> Result<Plan<'b>, StoreError> {
    let mut times: Vec<TimestampMs> =
        batch.rows().timestamps().filter(|&ts| ts <= latest).collect();
    times.sort_unstable();
    times.dedup();
    if times.is_empty() || !meets_a_point(inner, batch, &times).await? {
        return Ok(Plan::Append(folded(batch)));
    }
    let filter = doc! {d::SENSOR: batch.series.key(), d::START: d::date(batch.hour)};
    let action = inner.buckets.find(filter);
    let docs: Vec<Document> =
        documents(open(inner.op_timeout, "find", action).await?, inner.op_timeout)
            .try_collect()
            .await?;
    let mut buckets: Vec<Changed> = Vec::with_capacity(docs.len());
    let mut at: HashMap<TimestampMs, (usize, usize)> = HashMap::new();
    for doc in &docs {
        let corrupt = |what: &str| StoreError::Corrupt(format!("bucket without {what}"));
        let mut readings = Vec::new();
        for r in doc.get_array(d::READINGS).map_err(|_| corrupt("readings"))? {
            let Bson::Document(r) = r else { return Err(corrupt("a reading document")) };
            readings.push(d::decode_reading(r)?);
        }
        for (j, r) in readings.iter().enumerate() {
            at.entry(r.ts).or_insert((buckets.len(), j));
        }
        buckets.push(Changed {
            id: doc.get_object_id(d::ID).map_err(|_| corrupt("an _id"))?,
            version: doc.get_i32(d::VERSION).unwrap_or(1),
            count: doc.get(d::COUNT).and_then(d::number).ok_or_else(|| corrupt("a count"))? as i64,
            bytes: doc.get(d::BYTES).and_then(d::number).ok_or_else(|| corrupt("a size"))? as i64,
            readings,
        });
    }
    let batch = folded(batch);
    let mut met = vec![false; buckets.len()];
    let mut fresh = Vec::new();
    for reading in batch.readings() {
        match at.get(&reading.ts) {
            Some(&(b, j)) => {
                buckets[b].readings[j].overlay(&reading);
                met[b] = true;
            }
            None => fresh.push(reading),
        }
    }
    let changed = buckets.into_iter().zip(met).filter_map(|(b, met)| met.then_some(b)).collect();
    Ok(Plan::Overlay(Overlay {
        changed,
        fresh: Batch::new(batch.series.clone(), batch.hour, fresh),
        last_seq: batch.last_seq(),
    }))
}

/// `{min, max, sum, n, first, last}` of `s`, as a bucket's statistics hold them.
fn stats_doc(s: &FieldStats) -> Document {
    let mut doc = doc! {
        d::STAT_MIN: s.min, d::STAT_MAX: s.max, d::STAT_SUM: s.sum, d::STAT_COUNT: s.count as i64,
    };
    if let (Some(first), Some(last)) = (s.first, s.last) {
        doc.insert(d::STAT_FIRST, doc! {d::POINT_TIME: d::date(first.0), d::POINT_VALUE: first.1});
        doc.insert(d::STAT_LAST, doc! {d::POINT_TIME: d::date(last.0), d::POINT_VALUE: last.1});
    }
    doc
}

/// Statistics of each numeric field of a bucket's readings: the hour's, and each minute's.
struct Counted {
    fields: Vec<(FieldName, FieldStats)>,
    minutes: HashMap<FieldName, Vec<(i64, FieldStats)>>,
}

/// Counts the statistics of `readings`, of the hour starting at `hour`.
fn count_stats(readings: &[Reading], hour: TimestampMs) -> Counted {
    let mut fields: Vec<(FieldName, FieldStats)> = Vec::new();
    let mut minutes: HashMap<FieldName, Vec<(i64, FieldStats)>> = HashMap::new();
    for r in readings {
        let minute = (r.ts - hour).div_euclid(MINUTE_MS);
        for (name, value) in &r.fields {
            let Some(v) = value.as_f64() else { continue };
            let one = FieldStats::of(r.ts, v);
            match fields.iter_mut().find(|(n, _)| n == name) {
                Some((_, s)) => s.merge(&one),
                None => fields.push((name.clone(), one)),
            }
            let of_field = minutes.entry(name.clone()).or_default();
            match of_field.iter_mut().find(|(m, _)| *m == minute) {
                Some((_, s)) => s.merge(&one),
                None => of_field.push((minute, one)),
            }
        }
    }
    Counted { fields, minutes }
}

/// Step 1: replaces each changed bucket. `Unavailable` when one changed since it was read.
pub(super) async fn replace_buckets(
    inner: &Inner,
    batch: &Overlay,
    hour: TimestampMs,
) -> Result<(), StoreError> {
    for b in &batch.changed {
        let encoded: Vec<d::EncodedReading> = b.readings.iter().map(d::encode_reading).collect();
        let bytes: i64 = encoded.iter().map(|e| e.size as i64).sum();
        let readings: Vec<Bson> = encoded
            .into_iter()
            .map(|e| Bson::Document(Document::try_from(e.doc).expect("a document just encoded")))
            .collect();
        let Counted { fields, minutes } = count_stats(&b.readings, hour);
        let mut stats = Document::new();
        for (name, s) in &fields {
            stats.insert(d::encode_name(name).into_owned(), stats_doc(s));
        }
        let mut set = doc! {d::READINGS: readings, d::BYTES: bytes, d::STATS: stats};
        if WITH_MINUTE_STATS.contains(&b.version) {
            let mut ms = Document::new();
            for (name, of_field) in &minutes {
                let mut per_minute = Document::new();
                for (minute, s) in of_field {
                    per_minute.insert(d::minute_key(*minute), stats_doc(s));
                }
                ms.insert(d::encode_name(name).into_owned(), per_minute);
            }
            set.insert(d::MINUTE_STATS, ms);
        }
        let filter = doc! {d::ID: b.id, d::COUNT: b.count, d::BYTES: b.bytes};
        let done =
            timed(inner.op_timeout, "update", inner.buckets.update_one(filter, doc! {"$set": set}))
                .await?
                .map_err(error_from_driver)?;
        if done.matched_count == 0 {
            return Err(StoreError::Unavailable(
                "a bucket changed while a point in it was written again; retried".into(),
            ));
        }
    }
    Ok(())
}

/// Steps 3 and 4, once the batch's other readings are stored.
pub(super) async fn finish(
    inner: &Inner,
    writer: WriterId,
    series: &str,
    hour: TimestampMs,
    batch: &Overlay,
) -> Result<(), StoreError> {
    if inner.hour_stats {
        recount_hour(inner, writer, series, hour, batch.last_seq).await?;
    }
    if let Some(seq) = batch.last_seq {
        let mark = d::writer_mark(writer);
        let filter = doc! {d::SENSOR: series, d::START: d::date(hour), d::VERSION: {"$gte": 2}};
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        timed(
            inner.op_timeout,
            "update",
            inner.buckets.update_one(filter, doc! {"$max": {mark: seq}}),
        )
        .await?
        .map_err(error_from_driver)?;
    }
    Ok(())
}

/// Counts the hour's statistics document again from the hour's buckets. Every reading whose
/// statistics landed is in them by now: a write whose statistics landed but not its buckets
/// is retried in the batch being finished, ahead of its newer readings. An hour the retention
/// reaches may have lost buckets its statistics keep: it is counted again only when it counts
/// exactly the readings its buckets hold.
async fn recount_hour(
    inner: &Inner,
    writer: WriterId,
    series: &str,
    hour: TimestampMs,
    last_seq: Option<Seq>,
) -> Result<(), StoreError> {
    let filter = doc! {
        d::SENSOR: series, d::START: d::date(hour), d::VERSION: {"$in": IN_HOUR_STATS.to_vec()},
    };
    let action = inner.buckets.find(filter).projection(doc! {d::COUNT: 1, d::STATS: 1});
    let docs: Vec<Document> =
        documents(open(inner.op_timeout, "find", action).await?, inner.op_timeout)
            .try_collect()
            .await?;
    let mut count = 0i64;
    let mut fields: Vec<(String, FieldStats)> = Vec::new();
    for doc in &docs {
        count += doc.get(d::COUNT).and_then(d::number).unwrap_or(0.0) as i64;
        let Ok(stats) = doc.get_document(d::STATS) else { continue };
        for (key, s) in stats {
            let Bson::Document(s) = s else { continue };
            let s = d::decode_stats(s)?;
            match fields.iter_mut().find(|(n, _)| n == key) {
                Some((_, have)) => have.merge(&s),
                None => fields.push((key.clone(), s)),
            }
        }
    }
    let prefix = format!("{}.{}", hours::HOURS, hours::hour_key(hour));
    let id = hours::doc_id(series, hour);
    let kept = timed(inner.op_timeout, "find", inner.hours.find_one(doc! {d::ID: &id}))
        .await?
        .map_err(error_from_driver)?;
    let kept_count = kept
        .as_ref()
        .and_then(|k| k.get_document(hours::HOURS).ok())
        .and_then(|h| h.get_document(hours::hour_key(hour)).ok())
        .and_then(|h| h.get(d::COUNT).and_then(d::number))
        .map(|n| n as i64);
    let expiring = super::query::retention_of(inner, series)
        .is_some_and(|(_, cutoff)| hour + crate::model::HOUR_MS <= cutoff);
    if kept_count.is_none() || (expiring && kept_count != Some(count)) {
        return Ok(());
    }
    let mut f = Document::new();
    for (key, s) in &fields {
        f.insert(key.clone(), stats_doc(s));
    }
    let mut update =
        doc! {"$set": {format!("{prefix}.f"): f, format!("{prefix}.{}", d::COUNT): count}};
    if let Some(seq) = last_seq {
        let mark = format!("{prefix}.{}.{}", d::HIGH_WATER, d::writer_mark(writer));
        update.insert("$max", doc! {mark: i64::try_from(seq).unwrap_or(i64::MAX)});
    }
    let filter = doc! {d::ID: &id, format!("{prefix}.{}", d::COUNT): kept_count};
    timed(inner.op_timeout, "update", inner.hours.update_one(filter, update))
        .await?
        .map_err(error_from_driver)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_keeps_the_two_latest_hours_of_each_series() {
        let latest = Latest::default();
        latest.note("a", 0, 5);
        latest.note("a", 0, 3);
        latest.note("a", 3_600_000, 3_600_001);
        assert_eq!(latest.get("a", 0), Some(5));
        assert_eq!(latest.get("a", 3_600_000), Some(3_600_001));
        // A newer hour takes the older one's place; an older one is not kept.
        latest.note("a", 7_200_000, 7_200_009);
        assert_eq!((latest.get("a", 0), latest.get("a", 7_200_000)), (None, Some(7_200_009)));
        latest.note("a", 0, 9);
        assert_eq!(latest.get("a", 0), None);
        assert_eq!(latest.get("b", 0), None);
    }
}
