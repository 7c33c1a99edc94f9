//! An in-memory `Store` for tests and as the reference behaviour of the Store suite: the same
//! hourly buckets, caps and statistics as the real stores, kept in a `BTreeMap` behind a mutex.
//! Nothing here survives a restart, so the binary never selects it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};

use super::{
    BucketLimits, ExpireReport, FieldStats, Order, RangeQuery, Retention, RollupQuery, RollupRow,
    SensorInfo, SensorQuery, Store, StoreError, WriteReport, approx_reading_bytes,
};
use crate::model::{Batch, HOUR_MS, Reading, Seq, TimestampMs, WriterId};

struct Bucket {
    readings: Vec<Reading>,
    bytes: u64,
    stats: BTreeMap<String, FieldStats>,
}

impl Bucket {
    fn new() -> Self {
        Bucket { readings: Vec::new(), bytes: 0, stats: BTreeMap::new() }
    }

    fn push(&mut self, reading: Reading, size: u64) {
        for (name, value) in &reading.fields {
            if let Some(v) = value.as_f64() {
                self.stats
                    .entry(name.to_string())
                    .and_modify(|s| s.merge(&FieldStats::of(reading.ts, v)))
                    .or_insert_with(|| FieldStats::of(reading.ts, v));
            }
        }
        self.bytes += size;
        self.readings.push(reading);
    }

    /// Writes `later` over the reading at `at` (the same point), and counts the bucket again.
    fn overlay(&mut self, at: usize, later: &Reading) {
        self.readings[at].overlay(later);
        let readings = std::mem::take(&mut self.readings);
        *self = Bucket::new();
        for r in readings {
            let size = approx_reading_bytes(&r);
            self.push(r, size);
        }
    }
}

struct Series {
    measurement: String,
    tags: Vec<(String, String)>,
    /// Keyed by (hour start, spill sequence within the hour).
    buckets: BTreeMap<(TimestampMs, u32), Bucket>,
    /// Highest sequence number stored per hour and writer.
    marks: BTreeMap<(TimestampMs, WriterId), Seq>,
    /// Hours whose readings `--retention` deleted: their merged statistics, kept until
    /// `--rollup-retention`.
    expired: BTreeMap<TimestampMs, BTreeMap<String, FieldStats>>,
    /// Earliest and latest reading time ever stored, as the embedded series record keeps them
    /// (they outlive expired readings).
    span: Option<(TimestampMs, TimestampMs)>,
}

impl Series {
    /// `Err` when `[from, to)` touches an hour whose readings were deleted.
    fn check_live(
        &self,
        from: TimestampMs,
        to: TimestampMs,
        retention_ms: u64,
    ) -> Result<(), StoreError> {
        let from = crate::model::hour_start(from.max(crate::model::MIN_TIMESTAMP_MS));
        match self.expired.range(from..to.max(from)).next_back() {
            Some((hour, _)) => Err(StoreError::Expired { before: hour + HOUR_MS, retention_ms }),
            None => Ok(()),
        }
    }
}

pub struct MemoryStore {
    limits: BucketLimits,
    series: Mutex<BTreeMap<String, Series>>,
    unavailable: AtomicBool,
    /// `usize::MAX`, or: the next batch with sequence numbers lands this many readings, then fails.
    fail_after: AtomicUsize,
    /// The raw retention of the last expire pass, for the error that names it.
    retention_ms: AtomicU64,
}

impl MemoryStore {
    pub fn new(limits: BucketLimits) -> Self {
        MemoryStore {
            limits,
            series: Mutex::new(BTreeMap::new()),
            unavailable: AtomicBool::new(false),
            fail_after: AtomicUsize::new(usize::MAX),
            retention_ms: AtomicU64::new(0),
        }
    }

    /// The next batch with sequence numbers stores its first `landed` readings (and their mark),
    /// then fails as `Unavailable`: a write that broke off part-way, as a MongoDB batch cut into
    /// several statements can.
    pub fn fail_next_batch_after(&self, landed: usize) {
        self.fail_after.store(landed, Ordering::SeqCst);
    }

    /// Makes every call fail with `StoreError::Unavailable` until switched back: the tests'
    /// stand-in for an outage.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.unavailable.store(unavailable, Ordering::SeqCst);
    }

    fn check_available(&self) -> Result<(), StoreError> {
        if self.unavailable.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("memory store switched off by the test".into()))
        } else {
            Ok(())
        }
    }

    /// Total readings stored, across all series.
    pub fn reading_count(&self) -> usize {
        let series = self.series.lock().expect("memory store mutex poisoned");
        series.values().flat_map(|s| s.buckets.values()).map(|b| b.readings.len()).sum()
    }

    /// Every stored reading of `sensor`, ascending by time.
    pub fn readings_of(&self, sensor: &str) -> Vec<Reading> {
        self.collect_range(
            sensor,
            crate::model::MIN_TIMESTAMP_MS,
            crate::model::MAX_TIMESTAMP_MS + 1,
        )
    }

    /// Number of buckets of `sensor` in the hour starting at `hour`.
    pub fn bucket_count(&self, sensor: &str, hour: TimestampMs) -> usize {
        let series = self.series.lock().expect("memory store mutex poisoned");
        series.get(sensor).map_or(0, |s| s.buckets.range((hour, 0)..=(hour, u32::MAX)).count())
    }

    fn write_batch(
        &self,
        series: &mut BTreeMap<String, Series>,
        writer: WriterId,
        batch: &Batch,
    ) -> Result<WriteReport, StoreError> {
        if batch.is_numbered() {
            let landed = self.fail_after.swap(usize::MAX, Ordering::SeqCst);
            if landed < batch.len() {
                let prefix = batch.prefix(landed);
                self.write_batch(series, writer, &prefix)?;
                return Err(StoreError::Unavailable(format!(
                    "memory store: the test broke this batch off after {landed} readings"
                )));
            }
        }
        Ok(self.write_whole(series, writer, batch))
    }

    fn write_whole(
        &self,
        series: &mut BTreeMap<String, Series>,
        writer: WriterId,
        batch: &Batch,
    ) -> WriteReport {
        let entry = series.entry(batch.series.key().to_owned()).or_insert_with(|| Series {
            measurement: batch.series.measurement().to_owned(),
            tags: batch.series.tag_vec(),
            buckets: BTreeMap::new(),
            marks: BTreeMap::new(),
            expired: BTreeMap::new(),
            span: None,
        });
        // Only a reading at or before the latest stored can meet a stored point.
        let stored_last = entry.span.map_or(TimestampMs::MIN, |(_, last)| last);
        for ts in batch.rows().timestamps() {
            let (f, l) = entry.span.get_or_insert((ts, ts));
            (*f, *l) = ((*f).min(ts), (*l).max(ts));
        }
        if let Some(last) = batch.last_seq() {
            let mark = entry.marks.entry((batch.hour, writer)).or_default();
            *mark = (*mark).max(last);
        }
        let points;
        let batch = if batch.repeats_a_point() {
            points = batch.points();
            &points
        } else {
            batch
        };
        let mut report = WriteReport::default();
        let mut seq = entry
            .buckets
            .range((batch.hour, 0)..=(batch.hour, u32::MAX))
            .next_back()
            .map(|((_, seq), _)| *seq);
        for reading in batch.readings() {
            if reading.ts <= stored_last {
                let hour = entry.buckets.range_mut((batch.hour, 0)..=(batch.hour, u32::MAX));
                let found = hour.into_iter().find_map(|(_, b)| {
                    let at = b.readings.iter().position(|r| r.ts == reading.ts)?;
                    Some((b, at))
                });
                if let Some((bucket, at)) = found {
                    bucket.overlay(at, &reading);
                    continue;
                }
            }
            let size = approx_reading_bytes(&reading);
            let fits = seq.is_some_and(|s| {
                let b = &entry.buckets[&(batch.hour, s)];
                // An empty bucket takes any one reading, so an oversized reading still lands.
                (b.readings.len() as u64) < u64::from(self.limits.max_readings)
                    && (b.readings.is_empty() || b.bytes + size <= u64::from(self.limits.max_bytes))
            });
            if !fits {
                let next = seq.map_or(0, |s| s + 1);
                entry.buckets.insert((batch.hour, next), Bucket::new());
                report.buckets_created += 1;
                seq = Some(next);
            }
            let key = (batch.hour, seq.expect("a bucket was just ensured"));
            entry.buckets.get_mut(&key).expect("bucket exists").push(reading.clone(), size);
        }
        report
    }

    /// Readings of the query's range in ascending order, ties in write order; `Err` when the
    /// range touches an hour whose readings were deleted.
    fn live_range(
        &self,
        sensor: &str,
        from: TimestampMs,
        to: TimestampMs,
    ) -> Result<Vec<Reading>, StoreError> {
        let retention_ms = self.retention_ms.load(Ordering::SeqCst);
        let series = self.series.lock().expect("memory store mutex poisoned");
        if let Some(s) = series.get(sensor) {
            s.check_live(from, to, retention_ms)?;
        }
        drop(series);
        Ok(self.collect_range(sensor, from, to))
    }

    /// Readings of the query's range in ascending order, ties in write order.
    fn collect_range(&self, sensor: &str, from: TimestampMs, to: TimestampMs) -> Vec<Reading> {
        let series = self.series.lock().expect("memory store mutex poisoned");
        let Some(s) = series.get(sensor) else { return Vec::new() };
        let first_hour = crate::model::hour_start(from);
        let mut out: Vec<Reading> = s
            .buckets
            .range((first_hour, 0)..)
            .take_while(|((hour, _), _)| *hour < to)
            .flat_map(|(_, b)| b.readings.iter())
            .filter(|r| r.ts >= from && r.ts < to)
            .cloned()
            .collect();
        // Stable: equal timestamps keep bucket order, then push order.
        out.sort_by_key(|r| r.ts);
        out
    }
}

fn wanted(fields: &Option<Vec<String>>, name: &str) -> bool {
    fields.as_ref().is_none_or(|f| f.iter().any(|n| n == name))
}

fn merge_into(row: &mut BTreeMap<String, FieldStats>, name: &str, stats: &FieldStats) {
    match row.get_mut(name) {
        Some(s) => s.merge(stats),
        None => {
            row.insert(name.to_owned(), *stats);
        }
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.check_available()
    }

    async fn write(
        &self,
        writer: WriterId,
        batches: &[Batch],
    ) -> Vec<Result<WriteReport, StoreError>> {
        if let Err(e) = self.check_available() {
            return batches.iter().map(|_| Err(e.clone())).collect();
        }
        let mut series = self.series.lock().expect("memory store mutex poisoned");
        batches.iter().map(|b| self.write_batch(&mut series, writer, b)).collect()
    }

    async fn high_water(
        &self,
        writer: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        self.check_available()?;
        let series = self.series.lock().expect("memory store mutex poisoned");
        Ok(keys
            .iter()
            .map(|(key, hour)| {
                series.get(key).and_then(|s| s.marks.get(&(*hour, writer))).copied().unwrap_or(0)
            })
            .collect())
    }

    fn readings(&self, query: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>> {
        if let Err(e) = self.check_available() {
            return stream::once(async move { Err(e) }).boxed();
        }
        let mut readings = match self.live_range(&query.sensor, query.from, query.to) {
            Ok(readings) => readings,
            Err(e) => return stream::once(async move { Err(e) }).boxed(),
        };
        if query.order == Order::Desc {
            readings.reverse();
        }
        readings.truncate(query.limit.unwrap_or(usize::MAX));
        stream::iter(readings.into_iter().map(Ok)).boxed()
    }

    async fn rollups(&self, query: RollupQuery) -> Result<Vec<RollupRow>, StoreError> {
        self.check_available()?;
        if query.step_ms <= 0 {
            return Err(StoreError::InvalidQuery("step must be positive".into()));
        }
        let mut rows: BTreeMap<TimestampMs, BTreeMap<String, FieldStats>> = BTreeMap::new();
        let from_stats = query.step_ms % HOUR_MS == 0
            && query.from.rem_euclid(HOUR_MS) == 0
            && query.to.rem_euclid(HOUR_MS) == 0;
        if from_stats {
            let series = self.series.lock().expect("memory store mutex poisoned");
            if let Some(s) = series.get(&query.sensor) {
                // Deleted hours answer from the statistics they left behind.
                for (hour, stats) in s.expired.range(query.from..query.to.max(query.from)) {
                    let row =
                        rows.entry(hour.div_euclid(query.step_ms) * query.step_ms).or_default();
                    for (name, stats) in stats {
                        if wanted(&query.fields, name) {
                            merge_into(row, name, stats);
                        }
                    }
                }
                for ((hour, _), bucket) in s.buckets.range((query.from, 0)..) {
                    if *hour >= query.to {
                        break;
                    }
                    let row =
                        rows.entry(hour.div_euclid(query.step_ms) * query.step_ms).or_default();
                    for (name, stats) in &bucket.stats {
                        if wanted(&query.fields, name) {
                            merge_into(row, name, stats);
                        }
                    }
                }
            }
        } else {
            for reading in self.live_range(&query.sensor, query.from, query.to)? {
                let row =
                    rows.entry(reading.ts.div_euclid(query.step_ms) * query.step_ms).or_default();
                for (name, value) in &reading.fields {
                    if let Some(v) = value.as_f64().filter(|_| wanted(&query.fields, name)) {
                        merge_into(row, name, &FieldStats::of(reading.ts, v));
                    }
                }
            }
        }
        Ok(rows
            .into_iter()
            .filter(|(_, fields)| !fields.is_empty())
            .map(|(start, fields)| RollupRow { start, fields })
            .collect())
    }

    async fn sensors(&self, query: SensorQuery) -> Result<Vec<SensorInfo>, StoreError> {
        self.check_available()?;
        let series = self.series.lock().expect("memory store mutex poisoned");
        let lower = match &query.after {
            Some(after) => std::ops::Bound::Excluded(after.clone()),
            None => std::ops::Bound::Unbounded,
        };
        Ok(series
            .range((lower, std::ops::Bound::Unbounded))
            .filter(|(key, _)| query.database.holds(key))
            .filter(|(_, s)| query.measurement.as_ref().is_none_or(|m| *m == s.measurement))
            .filter(|(_, s)| query.tags.iter().all(|t| s.tags.contains(t)))
            .filter_map(|(key, s)| {
                let (first, last) = s.span?;
                Some(SensorInfo {
                    key: key.clone(),
                    measurement: s.measurement.clone(),
                    tags: s.tags.clone(),
                    first,
                    last,
                })
            })
            .take(query.limit)
            .collect())
    }

    async fn sensor_exists(&self, sensor: &str) -> Result<bool, StoreError> {
        self.check_available()?;
        let series = self.series.lock().expect("memory store mutex poisoned");
        Ok(series.get(sensor).is_some_and(|s| s.span.is_some()))
    }

    /// All at once, ignoring `budget`: the memory store only backs tests.
    async fn expire(
        &self,
        now: TimestampMs,
        policy: Retention,
        _budget: usize,
    ) -> Result<ExpireReport, StoreError> {
        self.expire_matching(now, policy, None)
    }

    fn can_expire_keys(&self) -> bool {
        true
    }

    async fn expire_keys(
        &self,
        now: TimestampMs,
        raw: std::time::Duration,
        keys: (String, String),
        _budget: usize,
    ) -> Result<ExpireReport, StoreError> {
        self.expire_matching(now, Retention { raw: Some(raw), rollups: None }, Some(&keys))
    }
}

impl MemoryStore {
    /// [`Store::expire`] of every series, or (`keys`) of those whose keys are in the range.
    fn expire_matching(
        &self,
        now: TimestampMs,
        policy: Retention,
        keys: Option<&(String, String)>,
    ) -> Result<ExpireReport, StoreError> {
        self.check_available()?;
        let mut report = ExpireReport { done: true, ..ExpireReport::default() };
        let raw = Retention::cutoff(now, policy.raw);
        let rollups = Retention::cutoff(now, policy.rollups);
        if policy.raw.is_some() && keys.is_none() {
            self.retention_ms.store(policy.raw_ms(), Ordering::SeqCst);
        }
        let mut series = self.series.lock().expect("memory store mutex poisoned");
        let within = |key: &String| keys.is_none_or(|(from, to)| from <= key && key < to);
        for (_, s) in series.iter_mut().filter(|(key, _)| within(key)) {
            if let Some(cutoff) = raw {
                let doomed: Vec<(TimestampMs, u32)> =
                    s.buckets.range(..(cutoff, 0)).map(|(k, _)| *k).collect();
                for key in doomed {
                    let bucket = s.buckets.remove(&key).expect("listed above");
                    report.readings_deleted += bucket.readings.len() as u64;
                    let kept = s.expired.entry(key.0).or_insert_with(|| {
                        report.hours_deleted += 1;
                        BTreeMap::new()
                    });
                    for (name, stats) in &bucket.stats {
                        merge_into(kept, name, stats);
                    }
                }
            }
            if let Some(cutoff) = rollups {
                // Marks go with the statistics, not the readings: a late duplicate of an
                // expired hour must still be recognised, or its statistics would count twice.
                let before = s.expired.len() + s.buckets.len();
                s.expired.retain(|hour, _| *hour >= cutoff);
                s.buckets.retain(|(hour, _), _| *hour >= cutoff);
                s.marks.retain(|(hour, _), _| *hour >= cutoff);
                report.stats_deleted += (before - s.expired.len() - s.buckets.len()) as u64;
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FieldValue, SeriesMeta};

    fn batch(key: &str, hour: i64, ts: impl IntoIterator<Item = i64>) -> Batch {
        Batch::numbered(
            crate::model::Series::from(SeriesMeta::new(key, key, &[("site", "a")])),
            hour,
            ts.into_iter()
                .map(|t| Reading {
                    ts: t,
                    fields: smallvec::smallvec![("v".into(), FieldValue::Float(t as f64))],
                })
                .collect(),
            vec![],
        )
    }

    #[tokio::test]
    async fn spills_at_the_count_cap_and_keeps_every_reading() {
        let store = MemoryStore::new(BucketLimits { max_readings: 10, max_bytes: 1 << 20 });
        let out = store.write(WriterId(1), &[batch("s", 0, 0..25)]).await;
        assert_eq!(out[0].as_ref().unwrap().buckets_created, 3);
        assert_eq!(store.bucket_count("s", 0), 3);
        assert_eq!(store.reading_count(), 25);
        let stats = store
            .rollups(RollupQuery {
                sensor: "s".into(),
                from: 0,
                to: HOUR_MS,
                step_ms: HOUR_MS,
                fields: None,
            })
            .await
            .unwrap();
        assert_eq!(
            stats[0].fields["v"],
            FieldStats {
                count: 25,
                min: 0.0,
                max: 24.0,
                sum: 300.0,
                first: Some((0, 0.0)),
                last: Some((24, 24.0))
            }
        );
    }

    #[tokio::test]
    async fn an_oversized_reading_lands_alone() {
        let store = MemoryStore::new(BucketLimits { max_readings: 10, max_bytes: 10 });
        store.write(WriterId(1), &[batch("s", 0, 0..3)]).await;
        assert_eq!(store.bucket_count("s", 0), 3);
    }

    #[tokio::test]
    async fn unavailable_fails_every_batch_then_recovers() {
        let store = MemoryStore::new(BucketLimits::default());
        store.set_unavailable(true);
        let out = store.write(WriterId(1), &[batch("a", 0, 0..1), batch("b", 0, 0..1)]).await;
        assert!(out.iter().all(|r| r.as_ref().is_err_and(|e| e.is_retriable())));
        store.set_unavailable(false);
        assert!(store.write(WriterId(1), &[batch("a", 0, 0..1)]).await[0].is_ok());
        assert_eq!(store.reading_count(), 1);
    }
}
