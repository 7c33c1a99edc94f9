//! The hour statistics collection (`hour_stats`), kept when `--retention` deletes buckets:
//! one document per sensor per day holding its hours, so whole-hour rollups still answer
//! once the buckets are gone (until `--rollup-retention`, a TTL index on the day's end).
//!
//! ```text
//! { _id: "<sensor key>@<day start ms>", s, day: Date, end: Date(day + 24 h), m, tags,
//!   h: { "07": { n, f: { <field>: {min, max, sum, n, first: {t, v}, last: {t, v}} },
//!                w: { <writer>: seq } } } }
//! ```
//!
//! # Exactly once, without a read
//! Each bucket statement (a run of one batch) gets one statistics statement, sent in the same
//! round **before** the bucket command; the bucket statement is sent only once its statistics
//! landed. So the statistics' per-writer mark `h.<hh>.w.<writer>` is never behind the bucket's
//! (`Store::high_water`), and every retry or replay re-sends readings that the statistics may
//! hold already. The statement's filter admits it only while the mark is below the run's first
//! sequence number (upsert); when the mark is at or past it, the upsert meets the existing
//! `_id` and fails with a duplicate key (11000). Only then is the mark read (one `find`), and
//! the readings above it are sent again with the filter `mark == what was read`. A run
//! without sequence numbers (tests) has no mark and is applied as it is.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::Ordering;

use bson::{Bson, Document, doc};
use futures::StreamExt;

use super::document as d;
use super::{Inner, error_from_code, error_from_driver};
use crate::model::{Batch, FieldName, HOUR_MS, Seq, TimestampMs, WriterId, hour_start};
use crate::store::{ExpireReport, FieldStats, Retention, StoreError};

/// The collection's name.
pub const COLLECTION: &str = "hour_stats";
pub const TTL_INDEX: &str = "end_ttl";
pub const DAY: &str = "day";
pub const HOURS: &str = "h";
const DAY_MS: i64 = 24 * HOUR_MS;
/// Statements per command; far below `maxWriteBatchSize`, and each is small (no readings).
const MAX_STATEMENTS: usize = 10_000;

fn day_of(hour: TimestampMs) -> TimestampMs {
    hour.div_euclid(DAY_MS) * DAY_MS
}

/// The hour's key within its day's document: "00" to "23".
pub(super) fn hour_key(hour: TimestampMs) -> String {
    format!("{:02}", (hour - day_of(hour)) / HOUR_MS)
}

/// `_id`: the day follows the last `@`, and holds none itself, so two sensors never share one.
pub fn doc_id(sensor: &str, hour: TimestampMs) -> String {
    format!("{sensor}@{}", day_of(hour))
}

fn mark_path(hour: TimestampMs, writer: WriterId) -> String {
    format!("{HOURS}.{}.{}.{}", hour_key(hour), d::HIGH_WATER, d::writer_mark(writer))
}

/// One run of a batch whose statistics are to be written.
pub(super) struct Run<'a> {
    pub batch: &'a Batch,
    pub readings: Range<usize>,
}

impl Run<'_> {
    fn seq(&self, i: usize) -> Option<Seq> {
        self.batch.seq(i)
    }
}

fn seq_i64(seq: Seq) -> i64 {
    // Sequence numbers stay below i64::MAX until the year 2262 (as in the buckets).
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// `{q, u, upsert}` for the readings of `run` numbered above `after` (all of them when
/// `None`); see the module documentation for the filter.
fn statement(run: &Run<'_>, writer: WriterId, after: Option<Seq>) -> Option<Document> {
    let batch = run.batch;
    let hh = hour_key(batch.hour);
    let mut stats: BTreeMap<FieldName, FieldStats> = BTreeMap::new();
    let mut count = 0i64;
    for i in run.readings.clone() {
        if after.is_some_and(|m| run.seq(i).is_some_and(|s| s <= m)) {
            continue;
        }
        let reading = batch.reading(i);
        count += 1;
        for (name, value) in reading.fields {
            if let Some(v) = value.as_f64() {
                let one = FieldStats::of(reading.ts, v);
                stats.entry(name).and_modify(|s| s.merge(&one)).or_insert(one);
            }
        }
    }
    if count == 0 {
        return None;
    }
    let prefix = format!("{HOURS}.{hh}");
    let mut inc = doc! {format!("{prefix}.{}", d::COUNT): count};
    let mut min = Document::new();
    let mut max = Document::new();
    for (name, s) in &stats {
        let key = format!("{prefix}.f.{}", d::encode_name(name));
        inc.insert(format!("{key}.{}", d::STAT_SUM), s.sum);
        inc.insert(format!("{key}.{}", d::STAT_COUNT), s.count as i64);
        min.insert(format!("{key}.{}", d::STAT_MIN), s.min);
        max.insert(format!("{key}.{}", d::STAT_MAX), s.max);
        if let (Some(first), Some(last)) = (s.first, s.last) {
            min.insert(format!("{key}.{}", d::STAT_FIRST), point(first));
            max.insert(format!("{key}.{}", d::STAT_LAST), point(last));
        }
    }
    let mut filter = doc! {d::ID: doc_id(batch.series.key(), batch.hour)};
    let last_seq = run.readings.clone().filter_map(|i| run.seq(i)).max();
    if let Some(last) = last_seq {
        let path = mark_path(batch.hour, writer);
        max.insert(path.clone(), seq_i64(last));
        match after {
            Some(m) => {
                filter.insert(path, seq_i64(m));
            }
            None => {
                let first = run.seq(run.readings.start).unwrap_or(last);
                filter.insert(
                    "$or",
                    vec![
                        Bson::Document(doc! {&path: {"$exists": false}}),
                        Bson::Document(doc! {&path: {"$lt": seq_i64(first)}}),
                    ],
                );
            }
        }
    }
    let day = day_of(batch.hour);
    let tags: Vec<Bson> = batch
        .series
        .tags()
        .map(|(k, v)| Bson::Document(doc! {d::TAG_KEY: k, d::TAG_VALUE: v}))
        .collect();
    let mut update = doc! {
        "$inc": inc,
        "$setOnInsert": {
            d::SENSOR: &batch.series.key(),
            DAY: d::date(day),
            d::END: d::date(day + DAY_MS),
            d::MEASUREMENT: &batch.series.measurement(),
            d::TAGS: tags,
        },
    };
    if !min.is_empty() {
        update.insert("$min", min);
    }
    update.insert("$max", max);
    Some(doc! {"q": filter, "u": update, "upsert": after.is_none()})
}

fn point((ts, v): (TimestampMs, f64)) -> Document {
    doc! {d::POINT_TIME: d::date(ts), d::POINT_VALUE: v}
}

/// Writes the statistics of every run; one outcome per run. A failed run's bucket statement
/// must not be sent (its batch is retried as a whole).
pub(super) async fn write(
    inner: &Inner,
    writer: WriterId,
    runs: &[Run<'_>],
) -> Vec<Result<(), StoreError>> {
    let mut outcomes: Vec<Result<(), StoreError>> = vec![Ok(()); runs.len()];
    let statements: Vec<(usize, Document)> = runs
        .iter()
        .enumerate()
        .filter_map(|(i, run)| statement(run, writer, None).map(|st| (i, st)))
        .collect();
    let mut seen = Vec::new();
    for command in statements.chunks(MAX_STATEMENTS) {
        let indexes: Vec<usize> = command.iter().map(|(i, _)| *i).collect();
        let docs: Vec<Document> = command.iter().map(|(_, st)| st.clone()).collect();
        match send(inner, docs).await {
            Err(e) => {
                for i in indexes {
                    outcomes[i] = Err(e.clone());
                }
            }
            Ok((errors, _)) => {
                for (k, code, msg) in errors {
                    let i = indexes[k];
                    if code == 11000 {
                        seen.push(i);
                    } else {
                        outcomes[i] = Err(error_from_code(code, &msg));
                    }
                }
            }
        }
    }
    // The rare path: a retry or replay of readings whose statistics (some of them) landed.
    for i in seen {
        outcomes[i] = rest_of(inner, writer, &runs[i]).await;
    }
    outcomes
}

/// Reads the run's mark and sends the statistics of its readings above it.
async fn rest_of(inner: &Inner, writer: WriterId, run: &Run<'_>) -> Result<(), StoreError> {
    let (batch, path) = (run.batch, mark_path(run.batch.hour, writer));
    let filter = doc! {d::ID: doc_id(batch.series.key(), batch.hour)};
    let action = inner.hours.find_one(filter).projection(doc! {&path: 1});
    let found = super::timed(inner.op_timeout, "find", action).await?.map_err(error_from_driver)?;
    // Exactly (`d::seq`): a mark read through a float skipped the statistics of readings above
    // the true mark and made the filter below match nothing.
    let mark =
        found.as_ref().and_then(|doc| lookup(doc, &path)).and_then(d::seq).ok_or_else(|| {
            StoreError::Unavailable(format!(
                "hour statistics of {} without a mark",
                batch.series.key()
            ))
        })?;
    let Some(st) = statement(run, writer, Some(mark)) else { return Ok(()) };
    let (errors, matched) = send(inner, vec![st]).await?;
    match errors.first() {
        Some((_, code, msg)) => Err(error_from_code(*code, msg)),
        // The mark moved since it was read: nothing was counted, and the batch is retried.
        None if matched == 0 => Err(StoreError::Unavailable(format!(
            "hour statistics of {} changed while they were written; retried",
            batch.series.key()
        ))),
        None => Ok(()),
    }
}

fn lookup<'d>(doc: &'d Document, path: &str) -> Option<&'d Bson> {
    let mut parts = path.split('.');
    let mut value = doc.get(parts.next()?)?;
    for part in parts {
        value = value.as_document()?.get(part)?;
    }
    Some(value)
}

/// Sends one unordered `update` command; returns its write errors (statement index, code,
/// message) and how many documents its statements matched or inserted.
async fn send(
    inner: &Inner,
    statements: Vec<Document>,
) -> Result<(Vec<(usize, i32, String)>, u64), StoreError> {
    let n = statements.len();
    let cmd = doc! {
        "update": COLLECTION,
        "updates": statements,
        "ordered": false,
        "maxTimeMS": i64::try_from(inner.op_timeout.as_millis()).unwrap_or(i64::MAX),
    };
    inner.counters.write_commands.fetch_add(1, Ordering::Relaxed);
    inner.counters.write_statements.fetch_add(n as u64, Ordering::Relaxed);
    let deadline = inner.op_timeout + super::CLIENT_TIMEOUT_MARGIN;
    let reply = super::timed(deadline, "update", inner.db.run_command(cmd))
        .await?
        .map_err(error_from_driver)?;
    if let Ok(wce) = reply.get_document("writeConcernError") {
        let code = wce.get("code").and_then(d::number).unwrap_or(0.0) as i32;
        return Err(StoreError::Unavailable(format!("write concern error {code}")));
    }
    let mut errors = Vec::new();
    if let Ok(list) = reply.get_array("writeErrors") {
        for e in list.iter().filter_map(Bson::as_document) {
            let index = e.get("index").and_then(d::number).unwrap_or(-1.0);
            if index >= 0.0 && (index as usize) < n {
                let code = e.get("code").and_then(d::number).unwrap_or(0.0) as i32;
                errors.push((index as usize, code, e.get_str("errmsg").unwrap_or("").to_owned()));
            }
        }
    }
    let matched = reply.get("n").and_then(d::number).map_or(0, |n| n as u64);
    Ok((errors, matched))
}

/// One hour's kept statistics: readings counted, and per numeric field.
pub(super) type Kept = (i64, BTreeMap<String, FieldStats>);

/// The kept statistics of `sensor`'s hours in `[from, to)` (hour-aligned), per hour.
pub(super) async fn read(
    inner: &Inner,
    sensor: &str,
    from: TimestampMs,
    to: TimestampMs,
) -> Result<BTreeMap<TimestampMs, Kept>, StoreError> {
    let filter = doc! {d::SENSOR: sensor, DAY: {"$gte": d::date(day_of(from)), "$lt": d::date(to)}};
    let action = inner.hours.find(filter).projection(doc! {DAY: 1, HOURS: 1});
    let mut cursor =
        super::timed(inner.op_timeout, "find", action).await?.map_err(error_from_driver)?;
    let mut out = BTreeMap::new();
    // Bounded by the range: one document per day.
    while let Some(doc) = super::timed(inner.op_timeout, "find", cursor.next()).await? {
        let doc = doc.map_err(error_from_driver)?;
        let day = doc
            .get_datetime(DAY)
            .map_err(|e| StoreError::Corrupt(format!("hour statistics without `day`: {e}")))?
            .timestamp_millis();
        let Ok(hours) = doc.get_document(HOURS) else { continue };
        for (hh, hour) in hours {
            let start = day
                + hh.parse::<i64>().map_err(|_| {
                    StoreError::Corrupt(format!("hour statistics with an hour key {hh:?}"))
                })? * HOUR_MS;
            if start < from || start >= to {
                continue;
            }
            let count = hour.as_document().and_then(|h| h.get(d::COUNT)).and_then(d::number);
            let (n, fields) = out.entry(start).or_insert_with(|| (0, BTreeMap::new()));
            *n = count.unwrap_or(0.0) as i64;
            let Some(f) = hour.as_document().and_then(|h| h.get_document("f").ok()) else {
                continue;
            };
            for (key, stats) in f {
                let stats = stats.as_document().ok_or_else(|| {
                    StoreError::Corrupt(format!("hour statistics of {key:?} are not a document"))
                })?;
                fields.insert(d::decode_name(key)?.into_owned(), d::decode_stats(stats)?);
            }
        }
    }
    Ok(out)
}

/// The end of the latest hour in `[from, to)` (cut at `cutoff`) that has lost readings:
/// its kept count is above what its buckets counted here (`v` 4 and 6) still hold, because
/// the retention deleted them. `None` when every such hour is whole.
pub(super) async fn expired_in(
    inner: &Inner,
    sensor: &str,
    from: TimestampMs,
    to: TimestampMs,
    cutoff: TimestampMs,
) -> Result<Option<TimestampMs>, StoreError> {
    let to = to.min(cutoff);
    if from >= to {
        return Ok(None);
    }
    let kept = read(inner, sensor, hour_start(from), to).await?;
    if kept.is_empty() {
        return Ok(None);
    }
    let hours: Vec<Bson> = kept.keys().map(|h| Bson::DateTime(d::date(*h))).collect();
    let filter = doc! {
        d::SENSOR: sensor,
        d::START: {"$in": hours},
        // Buckets whose readings this collection counts, from before minute statistics too.
        d::VERSION: {"$in": super::IN_HOUR_STATS.to_vec()},
    };
    let action = inner.buckets.find(filter).projection(doc! {d::START: 1, d::COUNT: 1});
    let mut cursor =
        super::timed(inner.op_timeout, "find", action).await?.map_err(error_from_driver)?;
    let mut held: BTreeMap<TimestampMs, i64> = BTreeMap::new();
    // Bounded by the buckets of the hours in range.
    while let Some(doc) = super::timed(inner.op_timeout, "find", cursor.next()).await? {
        let doc = doc.map_err(error_from_driver)?;
        let Ok(start) = doc.get_datetime(d::START) else { continue };
        let n = doc.get(d::COUNT).and_then(d::number).unwrap_or(0.0) as i64;
        *held.entry(start.timestamp_millis()).or_default() += n;
    }
    Ok(kept
        .iter()
        .filter(|(hour, (n, _))| *n > held.get(hour).copied().unwrap_or(0))
        .map(|(hour, _)| hour + HOUR_MS)
        .next_back())
}

/// One bounded step of the retention pass (`Store::expire`): deletes up to `budget` buckets
/// whose hour ended before the raw retention (their statistics are in this collection), then
/// up to `budget` day documents whose day ended before the rollup retention. The TTL indexes
/// do the same on their own, within a minute or so; the pass makes it prompt, visible in the
/// metrics, and testable. Without this collection it does nothing: deleting buckets would
/// lose their statistics, and only the configured TTL may do that.
///
/// `keys`: only the buckets of the series whose keys are in that range (one database's, at
/// its own retention), else every series' at the server's.
pub(super) async fn expire(
    inner: &Inner,
    now: TimestampMs,
    policy: Retention,
    budget: usize,
    keys: Option<&(String, String)>,
) -> Result<ExpireReport, StoreError> {
    let mut report = ExpireReport { done: true, ..ExpireReport::default() };
    if !inner.hour_stats {
        return Ok(report);
    }
    let budget = budget.max(1);
    if let Some(cut) = Retention::cutoff(now, policy.raw) {
        let mut filter = doc! {d::END: {"$lte": d::date(cut)}};
        match keys {
            Some((from, to)) => {
                filter.insert(d::SENSOR, doc! {"$gte": from, "$lt": to});
            }
            None => inner.expire_retention_ms.store(policy.raw_ms(), Ordering::Relaxed),
        }
        let action = inner
            .buckets
            .find(filter)
            .projection(doc! {d::SENSOR: 1, d::START: 1, d::COUNT: 1})
            .limit(budget as i64);
        let mut cursor =
            super::timed(inner.op_timeout, "find", action).await?.map_err(error_from_driver)?;
        let (mut ids, mut touched) = (Vec::new(), std::collections::BTreeSet::new());
        // Bounded by `limit`.
        while let Some(doc) = super::timed(inner.op_timeout, "find", cursor.next()).await? {
            let doc = doc.map_err(error_from_driver)?;
            report.readings_deleted += doc.get(d::COUNT).and_then(d::number).unwrap_or(0.0) as u64;
            if let (Ok(s), Ok(start)) = (doc.get_str(d::SENSOR), doc.get_datetime(d::START)) {
                touched.insert((s.to_owned(), *start));
            }
            ids.extend(doc.get(d::ID).cloned());
        }
        report.done &= ids.len() < budget;
        if !ids.is_empty() {
            let action = inner.buckets.delete_many(doc! {d::ID: {"$in": ids}});
            super::timed(inner.op_timeout, "delete", action).await?.map_err(error_from_driver)?;
        }
        for (s, start) in touched {
            let left = inner.buckets.count_documents(doc! {d::SENSOR: &s, d::START: start});
            let left =
                super::timed(inner.op_timeout, "count", left).await?.map_err(error_from_driver)?;
            report.hours_deleted += u64::from(left == 0);
        }
    }
    if let Some(cut) = Retention::cutoff(now, policy.rollups) {
        let filter = doc! {d::END: {"$lte": d::date(cut)}};
        let action = inner.hours.find(filter).projection(doc! {HOURS: 1}).limit(budget as i64);
        let mut cursor =
            super::timed(inner.op_timeout, "find", action).await?.map_err(error_from_driver)?;
        let mut ids = Vec::new();
        // Bounded by `limit`.
        while let Some(doc) = super::timed(inner.op_timeout, "find", cursor.next()).await? {
            let doc = doc.map_err(error_from_driver)?;
            report.stats_deleted += doc.get_document(HOURS).map_or(0, |h| h.len() as u64);
            ids.extend(doc.get(d::ID).cloned());
        }
        report.done &= ids.len() < budget;
        if !ids.is_empty() {
            let action = inner.hours.delete_many(doc! {d::ID: {"$in": ids}});
            super::timed(inner.op_timeout, "delete", action).await?.map_err(error_from_driver)?;
        }
    }
    Ok(report)
}
