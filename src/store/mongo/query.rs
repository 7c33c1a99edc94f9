//! Queries over buckets: readings of a range (one aggregation, streamed), rollups (from
//! bucket statistics when the step is whole hours, else grouped in the database), and
//! sensors by tag and measurement.

use std::collections::BTreeMap;
use std::sync::Arc;

use bson::{Bson, Document, doc};
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use mongodb::Cursor;

use super::document::{self as d};
use super::{Inner, error_from_driver, hours, timed};
use crate::model::{
    HOUR_MS, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, MINUTE_MS, Reading, Seq, TimestampMs, hour_start,
};
use crate::store::{
    FieldStats, Marks, Order, RangeQuery, Retention, RollupQuery, RollupRow, SensorInfo,
    SensorQuery, StoreError,
};

/// Documents per cursor batch: enough to amortize round trips, few enough that a range is
/// streamed rather than held (a reading is typically a few hundred bytes).
const CURSOR_BATCH: u32 = 1000;

/// Unwound readings per cursor batch. A reading is small (a date and a few values, well under
/// 100 bytes of BSON typically), so 10,000 of them make a reply of about a megabyte: a 1 Hz day
/// (86,400 readings) is 9 round trips instead of 87, and still far below the 16 MiB reply cap.
const READINGS_CURSOR_BATCH: u32 = 10_000;

/// Sensors per high-water query: keeps the `$in` list and its reply small.
const HIGH_WATER_KEYS: usize = 1000;

/// `Store::high_water` and `schema1_high_water`: per hour asked about, the highest mark of
/// each sensor's buckets (`w.<writer>` of schema 2 and later, or the one `w` of schema-1
/// buckets), with one aggregation per hour and up to [`HIGH_WATER_KEYS`] sensors (index
/// `{s, start}`).
pub(super) async fn high_water(
    inner: &Inner,
    marks: Marks,
    keys: &[(String, TimestampMs)],
) -> Result<Vec<Seq>, StoreError> {
    let (mark, version) = match marks {
        // Per-writer marks are in the buckets of schema 2 and every later one: an hour written
        // across an upgrade has some of a writer's readings in each.
        Marks::Of(writer) => (d::writer_mark(writer), Bson::from(doc! {"$gte": 2})),
        Marks::Schema1 => (d::HIGH_WATER.to_owned(), Bson::Int32(1)),
    };
    let mut by_hour: BTreeMap<TimestampMs, Vec<usize>> = BTreeMap::new();
    for (i, (_, hour)) in keys.iter().enumerate() {
        by_hour.entry(*hour).or_default().push(i);
    }
    let mut marks = vec![0; keys.len()];
    for (hour, indices) in by_hour {
        for part in indices.chunks(HIGH_WATER_KEYS) {
            let sensors: Vec<&str> = part.iter().map(|&i| keys[i].0.as_str()).collect();
            let pipeline = vec![
                // A schema-1 mark is only ever in schema-1 buckets, and per-writer marks
                // never are.
                doc! {"$match": {d::SENSOR: {"$in": &sensors}, d::START: d::date(hour), d::VERSION: version.clone()}},
                doc! {"$group": {d::ID: format!("${}", d::SENSOR), "w": {"$max": format!("${mark}")}}},
            ];
            let action = inner.buckets.aggregate(pipeline).batch_size(CURSOR_BATCH);
            let found: Vec<Document> =
                documents(open(inner.op_timeout, "aggregate", action).await?, inner.op_timeout)
                    .try_collect()
                    .await?;
            let found: BTreeMap<&str, Seq> = found
                .iter()
                .filter_map(|doc| {
                    let sensor = doc.get_str(d::ID).ok()?;
                    // Buckets written without sequence numbers have no `w`, so the group's
                    // is null: 0.
                    let w = doc.get("w").and_then(d::seq).unwrap_or(0);
                    Some((sensor, w))
                })
                .collect();
            for &i in part {
                marks[i] = found.get(keys[i].0.as_str()).copied().unwrap_or(0);
            }
        }
    }
    Ok(marks)
}

/// The range a bucket can hold, so that hour arithmetic on user-supplied bounds cannot
/// overflow.
fn clamp(from: i64, to: i64) -> (i64, i64) {
    (from.max(MIN_TIMESTAMP_MS), to.min(MAX_TIMESTAMP_MS + 1))
}

/// Buckets of `sensor` that may hold readings in `[from, to)`.
fn buckets_overlapping(sensor: &str, from: i64, to: i64) -> Document {
    doc! {
        d::SENSOR: sensor,
        d::START: {"$gte": d::date(hour_start(from)), "$lt": d::date(to)},
    }
}

pub(super) fn readings(
    inner: Arc<Inner>,
    query: RangeQuery,
) -> BoxStream<'static, Result<Reading, StoreError>> {
    let (from, to) = clamp(query.from, query.to);
    if from >= to || query.limit == Some(0) {
        return stream::empty().boxed();
    }
    let dir = match query.order {
        Order::Asc => 1,
        Order::Desc => -1,
    };
    let time = format!("{}.{}", d::READINGS, d::TIME);
    let mut pipeline = vec![
        doc! {"$match": buckets_overlapping(&query.sensor, from, to)},
        doc! {"$project": {d::READINGS: 1}},
        doc! {"$unwind": {"path": format!("${}", d::READINGS), "includeArrayIndex": "i"}},
        doc! {"$match": {&time: {"$gte": d::date(from), "$lt": d::date(to)}}},
        // Equal timestamps keep a stable order: by bucket, then position in the bucket
        // (the order readings were pushed). Descending is the exact reverse.
        doc! {"$sort": {&time: dir, d::ID: dir, "i": dir}},
    ];
    if let Some(limit) = query.limit {
        pipeline.push(doc! {"$limit": i64::try_from(limit).unwrap_or(i64::MAX)});
    }
    pipeline.push(doc! {"$project": {
        d::ID: 0,
        d::TIME: format!("${time}"),
        d::FIELDS: format!("${}.{}", d::READINGS, d::FIELDS),
    }});

    let timeout = inner.op_timeout;
    let readings = async move {
        check_live(&inner, &query.sensor, from, to).await?;
        // allowDiskUse: a long range without a limit sorts more than mongod keeps in memory.
        let action = inner
            .buckets
            .aggregate(pipeline)
            .batch_size(READINGS_CURSOR_BATCH)
            .allow_disk_use(true);
        let docs = documents(open(timeout, "aggregate", action).await?, timeout);
        Ok::<_, StoreError>(docs.map(|doc| doc.and_then(|doc| d::decode_reading(&doc))))
    };
    stream::once(readings).try_flatten().boxed()
}

/// Runs `action` (a find or an aggregate) within `timeout`; stream the cursor with
/// [`documents`].
pub(super) async fn open<A>(
    timeout: std::time::Duration,
    what: &str,
    action: A,
) -> Result<Cursor<Document>, StoreError>
where
    A: std::future::IntoFuture<Output = mongodb::error::Result<Cursor<Document>>>,
{
    timed(timeout, what, action).await?.map_err(error_from_driver)
}

/// A cursor as a stream whose every fetch is bounded by `timeout`; it ends after an error.
pub(super) fn documents(
    cursor: Cursor<Document>,
    timeout: std::time::Duration,
) -> impl futures::Stream<Item = Result<Document, StoreError>> + Send + 'static {
    stream::unfold(Some(cursor), move |cursor| async move {
        let mut cursor = cursor?;
        match timed(timeout, "getMore", cursor.try_next()).await {
            Ok(Ok(Some(doc))) => Some((Ok(doc), Some(cursor))),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => Some((Err(error_from_driver(e)), None)),
            Err(e) => Some((Err(e), None)),
        }
    })
}

pub(super) async fn rollups(
    inner: &Inner,
    query: RollupQuery,
) -> Result<Vec<RollupRow>, StoreError> {
    if query.step_ms <= 0 {
        return Err(StoreError::InvalidQuery(format!(
            "step must be positive, got {} ms",
            query.step_ms
        )));
    }
    let (from, to) = clamp(query.from, query.to);
    if from >= to {
        return Ok(Vec::new());
    }
    let parts = Parts::of(from, to, query.step_ms);
    // Minute statistics and readings are in the buckets, which the retention deletes.
    if let Some((lo, hi)) = parts.in_buckets() {
        check_live(inner, &query.sensor, lo, hi).await?;
    }
    let mut steps = match parts.hours {
        Some((a, b)) if inner.hour_stats => with_kept_hours(inner, &query, a, b).await?,
        Some((a, b)) => from_bucket_stats(inner, &query, a, b, None).await?,
        None => Steps::new(),
    };
    if !parts.minutes.is_empty() {
        for (start, fields) in from_minute_stats(inner, &query, &parts.minutes).await? {
            for (name, stats) in fields {
                add(&mut steps, start, name, stats);
            }
        }
    }
    // The readings of the edges, and of the minutes in buckets without minute statistics.
    let selections: Vec<Selection> = (parts.readings.iter())
        .map(|&(from, to)| Selection { from, to, older_only: false })
        .chain(parts.minutes.iter().map(|&(from, to)| Selection { from, to, older_only: true }))
        .collect();
    if !selections.is_empty() {
        for (start, fields) in from_readings(inner, &query, &selections).await? {
            for (name, stats) in fields {
                add(&mut steps, start, name, stats);
            }
        }
    }
    Ok(steps
        .into_iter()
        .filter(|(_, fields)| !fields.is_empty())
        .map(|(start, fields)| RollupRow { start, fields })
        .collect())
}

/// Where each part of a rollup's range is answered from: whole hours from hour statistics
/// when the step is whole hours, whole minutes from the buckets' minute statistics when the
/// step is whole minutes, and the rest (a range's edges, or every reading when the step is
/// finer than a minute) from the readings. Every part lies within one step of the epoch's grid,
/// or covers whole steps, since its bounds are multiples of a unit the step is a multiple of.
#[derive(Debug, PartialEq)]
struct Parts {
    hours: Option<(i64, i64)>,
    minutes: Vec<(i64, i64)>,
    readings: Vec<(i64, i64)>,
}

impl Parts {
    fn of(from: i64, to: i64, step: i64) -> Parts {
        let ceil = |t: i64, unit: i64| {
            t.div_euclid(unit) * unit + unit * i64::from(t.rem_euclid(unit) != 0)
        };
        let floor = |t: i64, unit: i64| t.div_euclid(unit) * unit;
        let nonempty = |ranges: [(i64, i64); 2]| -> Vec<(i64, i64)> {
            ranges.into_iter().filter(|(a, b)| a < b).collect()
        };
        let (a, b) = (ceil(from, MINUTE_MS), floor(to, MINUTE_MS));
        if step % MINUTE_MS != 0 || a >= b {
            return Parts { hours: None, minutes: Vec::new(), readings: vec![(from, to)] };
        }
        let readings = nonempty([(from, a), (b, to)]);
        let (ha, hb) = (ceil(a, HOUR_MS), floor(b, HOUR_MS));
        if step % HOUR_MS != 0 || ha >= hb {
            return Parts { hours: None, minutes: vec![(a, b)], readings };
        }
        Parts { hours: Some((ha, hb)), minutes: nonempty([(a, ha), (hb, b)]), readings }
    }

    /// The span of the parts read from the buckets, if any.
    fn in_buckets(&self) -> Option<(i64, i64)> {
        let ranges = self.minutes.iter().chain(&self.readings);
        let lo = ranges.clone().map(|r| r.0).min()?;
        let hi = ranges.map(|r| r.1).max()?;
        Some((lo, hi))
    }
}

type Steps = BTreeMap<i64, BTreeMap<String, FieldStats>>;

fn add(steps: &mut Steps, start: i64, field: String, stats: FieldStats) {
    steps.entry(start).or_default().entry(field).and_modify(|s| s.merge(&stats)).or_insert(stats);
}

/// `Err(Expired)` when `[from, to)` reaches before the retention into hours whose statistics
/// are kept: their buckets are deleted (or about to be, by the TTL monitor), so an answer
/// from them would be missing readings.
async fn check_live(inner: &Inner, sensor: &str, from: i64, to: i64) -> Result<(), StoreError> {
    let Some((keep, cutoff)) = retention_of(inner, sensor) else { return Ok(()) };
    if from >= cutoff {
        return Ok(());
    }
    match hours::expired_in(inner, sensor, from, to, cutoff).await? {
        None => Ok(()),
        Some(before) => Err(StoreError::Expired {
            before,
            retention_ms: Retention { raw: Some(keep), rollups: None }.raw_ms(),
        }),
    }
}

/// The retention of `sensor`'s readings with the hour statistics collection, and the time
/// before which its buckets are deleted (or about to be, by the TTL monitor); `None` without.
pub(super) fn retention_of(inner: &Inner, sensor: &str) -> Option<(std::time::Duration, i64)> {
    let configured = inner.retention.filter(|_| inner.hour_stats)?;
    // The retention the last pass applied to this series' database, else to every series,
    // else the configured one (the TTL's).
    let own = inner
        .key_retentions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|((from, to), _)| from.as_str() <= sensor && sensor < to.as_str())
        .map(|(_, keep)| *keep);
    let last = inner.expire_retention_ms.load(std::sync::atomic::Ordering::Relaxed);
    let keep = match own {
        Some(keep) => keep,
        None if last > 0 => std::time::Duration::from_millis(last),
        None => configured,
    };
    let now = chrono::Utc::now().timestamp_millis();
    Retention::cutoff(now, Some(keep)).map(|cutoff| (keep, cutoff))
}

/// Whole-hour steps with the hour statistics collection: the kept statistics (of every
/// reading written since the collection is, deleted buckets included) merged with those of
/// buckets whose statistics it does not hold (their `v` is not in `IN_HOUR_STATS`).
async fn with_kept_hours(
    inner: &Inner,
    query: &RollupQuery,
    from: i64,
    to: i64,
) -> Result<Steps, StoreError> {
    // Buckets of older kinds (written without this collection); the others' statistics are
    // all in the collection.
    let older = doc! {"$nin": super::IN_HOUR_STATS.to_vec()};
    let mut steps = from_bucket_stats(inner, query, from, to, Some(older)).await?;
    for (hour, (_, fields)) in hours::read(inner, &query.sensor, from, to).await? {
        for (name, stats) in fields {
            if query.fields.as_ref().is_none_or(|f| f.contains(&name)) {
                add(&mut steps, hour.div_euclid(query.step_ms) * query.step_ms, name, stats);
            }
        }
    }
    Ok(steps)
}

/// Whole-hour steps: merge the statistics of every bucket (spilled ones included) of each
/// step, fetching no readings.
async fn from_bucket_stats(
    inner: &Inner,
    query: &RollupQuery,
    from: i64,
    to: i64,
    version: Option<Document>,
) -> Result<Steps, StoreError> {
    let mut filter = doc! {
        d::SENSOR: &query.sensor,
        d::START: {"$gte": d::date(from), "$lt": d::date(to)},
    };
    if let Some(version) = version {
        filter.insert(d::VERSION, version);
    }
    let projection = stats_projection(d::STATS, query.fields.as_deref());
    let action = inner.buckets.find(filter).projection(projection).batch_size(CURSOR_BATCH);
    let cursor = open(inner.op_timeout, "find", action).await?;
    let mut docs = std::pin::pin!(documents(cursor, inner.op_timeout));
    let mut steps = Steps::new();
    while let Some(doc) = docs.next().await {
        let doc = doc?;
        let start = doc
            .get_datetime(d::START)
            .map_err(|e| StoreError::Corrupt(format!("bucket without `start`: {e}")))?
            .timestamp_millis();
        let step = start.div_euclid(query.step_ms) * query.step_ms;
        let Ok(stats) = doc.get_document(d::STATS) else { continue };
        for (key, value) in stats {
            let name = d::decode_name(key)?.into_owned();
            if query.fields.as_ref().is_some_and(|f| !f.contains(&name)) {
                continue;
            }
            let value = value.as_document().ok_or_else(|| {
                StoreError::Corrupt(format!("stats of {name:?} is not a document"))
            })?;
            add(&mut steps, step, name, d::decode_stats(value)?);
        }
    }
    Ok(steps)
}

/// A bucket's `start` and its statistics under `key` (`stats` or `ms`): of every field, or of
/// the `fields` named.
fn stats_projection(key: &str, fields: Option<&[String]>) -> Document {
    let mut projection = doc! {d::ID: 0, d::START: 1};
    match fields {
        None => {
            projection.insert(key, 1);
        }
        Some(fields) => {
            for f in fields {
                projection.insert(format!("{key}.{}", d::encode_name(f)), 1);
            }
        }
    }
    projection
}

/// The start of the step of `ms` (an expression of milliseconds since the epoch), also for
/// dates before 1970 (`$mod` keeps the sign).
fn step_start(ms: Bson, step: i64) -> Document {
    doc! {"$subtract": [&ms, {"$mod": [{"$add": [{"$mod": [&ms, step]}, step]}, step]}]}
}

/// `{$or: [...]}` of `each` range, or the one range alone.
fn any_of(ranges: impl Iterator<Item = Document>) -> Document {
    let mut all: Vec<Document> = ranges.collect();
    if all.len() == 1 {
        all.remove(0)
    } else {
        doc! {"$or": all}
    }
}

/// The minutes `[from, to)` of each range (whole minutes) from the minute statistics of the
/// buckets that keep them, grouped into steps in the database: what comes back is a document
/// per step and field, however many readings the minutes hold.
async fn from_minute_stats(
    inner: &Inner,
    query: &RollupQuery,
    ranges: &[(i64, i64)],
) -> Result<Steps, StoreError> {
    let buckets = any_of(ranges.iter().map(|&(a, b)| {
        doc! {d::START: {"$gte": d::date(hour_start(a)), "$lt": d::date(b)}}
    }));
    let mut filter =
        doc! {d::SENSOR: &query.sensor, d::VERSION: {"$in": super::WITH_MINUTE_STATS.to_vec()}};
    filter.extend(buckets);
    let projection = stats_projection(d::MINUTE_STATS, query.fields.as_deref());
    let ms = doc! {"$add": [
        {"$subtract": [format!("${}", d::START), d::date(0)]},
        {"$multiply": [{"$toLong": "$m.k"}, MINUTE_MS]},
    ]};
    let minutes = any_of(ranges.iter().map(|&(a, b)| doc! {"ms": {"$gte": a, "$lt": b}}));
    let stat = |name: &str| format!("$s.{name}");
    let pipeline = vec![
        doc! {"$match": filter},
        doc! {"$project": projection},
        doc! {"$project": {d::START: 1, "f": {"$objectToArray": format!("${}", d::MINUTE_STATS)}}},
        doc! {"$unwind": "$f"},
        doc! {"$project": {d::START: 1, "k": "$f.k", "m": {"$objectToArray": "$f.v"}}},
        doc! {"$unwind": "$m"},
        doc! {"$project": {"k": 1, "ms": ms, "s": "$m.v"}},
        doc! {"$match": minutes},
        doc! {"$group": {
            d::ID: {"st": step_start(Bson::from("$ms"), query.step_ms), "k": "$k"},
            d::STAT_MIN: {"$min": stat(d::STAT_MIN)},
            d::STAT_MAX: {"$max": stat(d::STAT_MAX)},
            d::STAT_SUM: {"$sum": stat(d::STAT_SUM)},
            d::STAT_COUNT: {"$sum": stat(d::STAT_COUNT)},
            d::STAT_FIRST: {"$min": stat(d::STAT_FIRST)},
            d::STAT_LAST: {"$max": stat(d::STAT_LAST)},
        }},
    ];
    grouped(inner, pipeline).await
}

/// Readings `[from, to)` of a rollup, of every bucket or only of those without minute
/// statistics.
struct Selection {
    from: i64,
    to: i64,
    older_only: bool,
}

/// Groups the numeric values of the readings of the selections into steps in the database.
/// Each bucket's readings are filtered before they are unwound, so the server makes a document
/// of only the readings selected.
async fn from_readings(
    inner: &Inner,
    query: &RollupQuery,
    selections: &[Selection],
) -> Result<Steps, StoreError> {
    let with_minutes = || Bson::from(super::WITH_MINUTE_STATS.to_vec());
    let mut buckets = doc! {d::SENSOR: &query.sensor};
    buckets.extend(any_of(selections.iter().map(|s| {
        let mut hours =
            doc! {d::START: {"$gte": d::date(hour_start(s.from)), "$lt": d::date(s.to)}};
        if s.older_only {
            hours.insert(d::VERSION, doc! {"$nin": with_minutes()});
        }
        hours
    })));
    let time = format!("$$x.{}", d::TIME);
    let selected: Vec<Document> = selections
        .iter()
        .map(|s| {
            let mut all =
                vec![doc! {"$gte": [&time, d::date(s.from)]}, doc! {"$lt": [&time, d::date(s.to)]}];
            if s.older_only {
                all.push(doc! {"$not": [{"$in": [format!("${}", d::VERSION), with_minutes()]}]});
            }
            doc! {"$and": all}
        })
        .collect();
    let reading = format!("${}", d::READINGS);
    // Milliseconds since the epoch: a date minus the epoch date (no $toLong on dates needed).
    let ms = doc! {"$subtract": [format!("{reading}.{}", d::TIME), d::date(0)]};
    let mut numeric = doc! {"kv.v": {"$type": "number"}};
    if let Some(fields) = &query.fields {
        let keys: Vec<Bson> =
            fields.iter().map(|f| Bson::String(d::encode_name(f).into_owned())).collect();
        numeric.insert("kv.k", doc! {"$in": keys});
    }
    let pipeline = vec![
        doc! {"$match": buckets},
        doc! {"$project": {d::ID: 0, d::READINGS: {
            "$filter": {"input": &reading, "as": "x", "cond": {"$or": selected}},
        }}},
        doc! {"$unwind": &reading},
        doc! {"$project": {
            "ms": ms,
            d::POINT_TIME: format!("{reading}.{}", d::TIME),
            "kv": {"$objectToArray": format!("{reading}.{}", d::FIELDS)},
        }},
        doc! {"$unwind": "$kv"},
        doc! {"$match": numeric},
        doc! {"$group": {
            d::ID: {"st": step_start(Bson::from("$ms"), query.step_ms), "k": "$kv.k"},
            d::STAT_MIN: {"$min": "$kv.v"},
            d::STAT_MAX: {"$max": "$kv.v"},
            d::STAT_SUM: {"$sum": "$kv.v"},
            d::STAT_COUNT: {"$sum": 1},
            // As `$min`/`$max` of the bucket statistics: by time, then value.
            d::STAT_FIRST: {"$min": {d::POINT_TIME: format!("${}", d::POINT_TIME), d::POINT_VALUE: "$kv.v"}},
            d::STAT_LAST: {"$max": {d::POINT_TIME: format!("${}", d::POINT_TIME), d::POINT_VALUE: "$kv.v"}},
        }},
    ];
    grouped(inner, pipeline).await
}

/// Runs a pipeline that ends in a `$group` by `{st: <step start>, k: <field key>}` of
/// statistics, and collects its groups as steps.
async fn grouped(inner: &Inner, pipeline: Vec<Document>) -> Result<Steps, StoreError> {
    let action = inner.buckets.aggregate(pipeline).batch_size(CURSOR_BATCH).allow_disk_use(true);
    let cursor = open(inner.op_timeout, "aggregate", action).await?;
    let mut docs = std::pin::pin!(documents(cursor, inner.op_timeout));
    let mut steps = Steps::new();
    while let Some(doc) = docs.next().await {
        let doc = doc?;
        let id = doc
            .get_document(d::ID)
            .map_err(|e| StoreError::Internal(format!("rollup group without key: {e}")))?;
        let start = id
            .get("st")
            .and_then(d::number)
            .ok_or_else(|| StoreError::Internal("rollup group without step".into()))?
            as i64;
        let key = id
            .get_str("k")
            .map_err(|e| StoreError::Internal(format!("rollup group without field: {e}")))?;
        add(&mut steps, start, d::decode_name(key)?.into_owned(), d::decode_stats(&doc)?);
    }
    Ok(steps)
}

pub(super) async fn sensors(
    inner: &Inner,
    query: SensorQuery,
) -> Result<Vec<SensorInfo>, StoreError> {
    if query.limit == 0 {
        return Ok(Vec::new());
    }
    let mut filter = Document::new();
    if !query.tags.is_empty() {
        let all: Vec<Document> = query
            .tags
            .iter()
            .map(|(k, v)| doc! {d::TAGS: {"$elemMatch": {d::TAG_KEY: k, d::TAG_VALUE: v}}})
            .collect();
        filter.insert("$and", all);
    }
    if let Some(m) = &query.measurement {
        filter.insert(d::MEASUREMENT, m);
    }
    // One database's keys: a range of them, or (the default database) every key without a
    // database's prefix.
    let mut key = match query.database.key_range() {
        Some((from, to)) => doc! {"$gte": from, "$lt": to},
        None => doc! {"$not": bson::Regex {
            pattern: format!("^{}", crate::databases::MARK),
            options: String::new(),
        }},
    };
    if let Some(after) = &query.after {
        key.insert("$gt", after);
    }
    filter.insert(d::SENSOR, key);
    let pipeline = vec![
        doc! {"$match": filter},
        doc! {"$group": {
            d::ID: format!("${}", d::SENSOR),
            d::MEASUREMENT: {"$first": format!("${}", d::MEASUREMENT)},
            d::TAGS: {"$first": format!("${}", d::TAGS)},
            d::FIRST: {"$min": format!("${}", d::FIRST)},
            d::LAST: {"$max": format!("${}", d::LAST)},
        }},
        doc! {"$sort": {d::ID: 1}},
        doc! {"$limit": i64::try_from(query.limit).unwrap_or(i64::MAX)},
    ];
    let action = inner.buckets.aggregate(pipeline).batch_size(CURSOR_BATCH).allow_disk_use(true);
    let cursor = open(inner.op_timeout, "aggregate", action).await?;
    let docs: Vec<Document> = documents(cursor, inner.op_timeout).try_collect().await?;
    docs.iter().map(sensor_info).collect()
}

fn sensor_info(doc: &Document) -> Result<SensorInfo, StoreError> {
    let corrupt = |what: &str, e: bson::document::ValueAccessError| {
        StoreError::Corrupt(format!("sensor summary without {what}: {e}"))
    };
    let mut tags = Vec::new();
    for tag in doc.get_array(d::TAGS).map_err(|e| corrupt("tags", e))? {
        let tag =
            tag.as_document().ok_or_else(|| StoreError::Corrupt("tag is not a document".into()))?;
        tags.push((
            tag.get_str(d::TAG_KEY).map_err(|e| corrupt("tag key", e))?.to_owned(),
            tag.get_str(d::TAG_VALUE).map_err(|e| corrupt("tag value", e))?.to_owned(),
        ));
    }
    Ok(SensorInfo {
        key: doc.get_str(d::ID).map_err(|e| corrupt("key", e))?.to_owned(),
        measurement: doc.get_str(d::MEASUREMENT).map_err(|e| corrupt("measurement", e))?.to_owned(),
        tags,
        first: doc.get_datetime(d::FIRST).map_err(|e| corrupt("first", e))?.timestamp_millis(),
        last: doc.get_datetime(d::LAST).map_err(|e| corrupt("last", e))?.timestamp_millis(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_704_067_200_000; // an hour boundary
    const M: i64 = MINUTE_MS;

    #[test]
    fn a_range_splits_into_hours_minutes_and_edges() {
        let parts = |from, to, step| Parts::of(T0 + from, T0 + to, step);
        let at = |ranges: &[(i64, i64)]| -> Vec<(i64, i64)> {
            ranges.iter().map(|&(a, b)| (T0 + a, T0 + b)).collect()
        };
        // Grafana's range: a "now" off the minute, whole-minute windows.
        let p = parts(-3 * HOUR_MS + 1_234, 5 * M + 500, 5 * M);
        assert_eq!(p.hours, None);
        assert_eq!(p.minutes, at(&[(-3 * HOUR_MS + M, 5 * M)]));
        assert_eq!(
            p.readings,
            at(&[(-3 * HOUR_MS + 1_234, -3 * HOUR_MS + M), (5 * M, 5 * M + 500)])
        );
        // Whole-hour windows: the whole hours from hour statistics, minutes either side.
        let p = parts(-3 * HOUR_MS + 1_234, 5 * M + 500, HOUR_MS);
        assert_eq!(p.hours, Some((T0 - 2 * HOUR_MS, T0)));
        assert_eq!(p.minutes, at(&[(-3 * HOUR_MS + M, -2 * HOUR_MS), (0, 5 * M)]));
        assert_eq!(p.readings.len(), 2);
        // Aligned: no edges.
        let p = parts(0, 2 * HOUR_MS, 2 * HOUR_MS);
        assert_eq!(
            (p.hours, p.minutes.len(), p.readings.len()),
            (Some((T0, T0 + 2 * HOUR_MS)), 0, 0)
        );
        let p = parts(0, 30 * M, 10 * M);
        assert_eq!((p.minutes, p.readings.len()), (at(&[(0, 30 * M)]), 0));
        // Finer than a minute, or no whole minute inside: every reading.
        for (from, to, step) in
            [(0, HOUR_MS, 30_000), (1, 90_000, M), (1, 59_999, M), (100, 59_000, HOUR_MS)]
        {
            let p = parts(from, to, step);
            assert_eq!((p.hours, p.minutes.len()), (None, 0), "{from} {to} {step}");
            assert_eq!(p.readings, at(&[(from, to)]));
        }
        // Before 1970 too.
        let p = Parts::of(-HOUR_MS - 1, 1, M);
        assert_eq!(p.minutes, vec![(-HOUR_MS, 0)]);
        assert_eq!(p.readings, vec![(-HOUR_MS - 1, -HOUR_MS), (0, 1)]);
        assert_eq!(p.in_buckets(), Some((-HOUR_MS - 1, 1)));
    }
}
