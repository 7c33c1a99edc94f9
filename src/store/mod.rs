//! The `Store` trait that ingest and query use, and its implementations:
//! `mongo` (production), `embedded` (local disk, the default) and `memory` (tests only).
//!
//! Every store keeps the same logical layout: per series, hourly buckets holding the readings
//! plus running per-field statistics; a bucket that reaches its count or size cap spills into a
//! new bucket for the same hour. Rollups with whole-hour steps come from those statistics.

pub mod embedded;
pub mod memory;
pub mod mongo;
mod rollup;

pub use rollup::{
    FieldStats, Need, RollupQuery, RollupRow, RollupSteps, StepOfValues, StepValues, add_to_step,
    add_to_step_with_room, i128_to_f64,
};

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::model::{
    Batch, Columns, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Reading, ReadingView, Seq, TimestampMs,
    ValueRef, WriterId,
};

/// Version of the on-disk / in-database bucket layout, written into every bucket so that a
/// later bucketd can read (or migrate) what an earlier one wrote.
///
/// 2: high-water marks are kept per writer (`Store::high_water`). Data of schema 1 is read as it
/// is; its single mark per (series, hour) is still asked for when a schema-1 log is replayed
/// (`Store::schema1_high_water`).
///
/// 3: bucket statistics keep each numeric field's first and last value with its time
/// ([`FieldStats::first`], [`FieldStats::last`]). Buckets of schema 1 and 2 are read as they
/// are, their statistics without first/last (`None`); new readings never go into them
/// (MongoDB: the write filter names the version; embedded: see `store::embedded`), so every
/// schema-3 bucket's first/last cover all of its readings.
pub const SCHEMA_VERSION: i32 = 3;

/// Caps that close a bucket. A bucket never holds more than `max_readings` readings, and the
/// approximate encoded size of its readings never exceeds `max_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BucketLimits {
    pub max_readings: u32,
    pub max_bytes: u32,
}

impl BucketLimits {
    /// The highest size cap accepted: 16 MiB less room for the bucket's own header fields and
    /// statistics, so that a full bucket is still a legal MongoDB document.
    pub const MAX_BYTES_CEILING: u32 = 16 * 1024 * 1024 - 512 * 1024;

    /// The highest count cap accepted. A MongoDB bucket of more readings would pass 16 MiB
    /// anyway (16 BSON bytes a reading at the least); the embedded store's chunk decoder refuses
    /// a larger count as damage before it allocates for it.
    pub const MAX_READINGS_CEILING: u32 = 1 << 20;
}

impl Default for BucketLimits {
    fn default() -> Self {
        // Mirrors MongoDB's own time-series buckets (1,000 measurements / 125 KB); see
        // "Buckets and their caps" in docs/configuration.md for the measurement behind them.
        BucketLimits { max_readings: 1000, max_bytes: 125 * 1024 }
    }
}

/// Approximate encoded size of a reading: what [`BucketLimits::max_bytes`] counts in the stores
/// that do not write BSON (embedded, memory). Close to BSON's size for the same reading, so
/// their buckets spill about where MongoDB's would.
pub fn approx_reading_bytes(reading: &impl ReadingView) -> u64 {
    let fields: usize = reading
        .fields()
        .map(|(name, value)| {
            2 + name.len()
                + match value {
                    ValueRef::Float(_) | ValueRef::Int(_) | ValueRef::UInt(_) => 8,
                    ValueRef::Bool(_) => 1,
                    ValueRef::Str(s) => 5 + s.len(),
                }
        })
        .sum();
    // Array index key, reading document header, the timestamp element, the fields document.
    (8 + 5 + 11 + 8 + fields) as u64
}

/// What a store's write holds in memory beside the rows it is given, while it runs: the
/// readings made from the rows, their encoding, and the statements and commands that carry
/// them. The flusher caps a write at its rows plus this estimate, so that a write of wide
/// readings, or of many sensors with a reading each, is no larger in memory than a write of
/// a few long buffers of plain readings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOverhead {
    /// Per batch (one sensor's hour): its statement's filter, tags and bookkeeping.
    pub per_batch: usize,
    /// Per field a batch's readings have: the statement's statistics for it.
    pub per_batch_field: usize,
    /// Per reading: the reading made from its row and its encoding's framing.
    pub per_reading: usize,
    /// Per value (a reading's field): its name and value, in each copy the write makes.
    pub per_value: usize,
    /// Per field and minute a batch's readings touch: statistics kept per minute. A batch
    /// touches at most one minute per reading, and at most [`WriteOverhead::MINUTES`].
    pub per_field_minute: usize,
}

impl WriteOverhead {
    /// The minutes of a batch's hour.
    pub const MINUTES: usize = 60;

    /// The overhead of one batch of `readings` readings of `fields` fields each.
    pub fn of(&self, readings: usize, fields: usize) -> usize {
        let minutes = readings.min(Self::MINUTES);
        self.per_batch
            + fields * (self.per_batch_field + minutes * self.per_field_minute)
            + readings * self.per_reading_of(fields)
    }

    /// The overhead of one more reading of `fields` fields, minutes aside.
    pub fn per_reading_of(&self, fields: usize) -> usize {
        self.per_reading + fields * self.per_value
    }

    /// How many readings of `fields` fields, each also holding `each` bytes of its own, fit
    /// `room` bytes with the batch's overhead: the largest `k` with
    /// `k * each + of(k, fields) <= room`.
    pub fn fit(&self, room: usize, each: usize, fields: usize) -> usize {
        let Some(room) = room.checked_sub(self.of(0, fields)) else { return 0 };
        let per_reading = each + self.per_reading_of(fields);
        let per_minute = fields * self.per_field_minute;
        // Up to MINUTES readings, each may open a minute of its own; past them, none does.
        let first = Self::MINUTES * (per_reading + per_minute);
        if room < first {
            room / (per_reading + per_minute).max(1)
        } else {
            Self::MINUTES + (room - first) / per_reading.max(1)
        }
    }
}

/// What a successful batch write did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Buckets this batch created because every existing bucket of its hour was full
    /// (or none existed yet).
    pub buckets_created: u32,
}

/// A store failure. `is_retriable` decides whether the flusher keeps a batch for another try.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or timed out; the same write may succeed later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store refused this write for a reason that retrying will not change.
    #[error("store rejected the write: {0}")]
    Rejected(String),
    /// The query itself is wrong (unknown cursor, impossible range, ...).
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    /// Data on disk or in the database does not have the expected shape.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// Anything else: a bug or an environment problem (disk full, permissions).
    #[error("store error: {0}")]
    Internal(String),
    /// The query needs raw readings of hours that the retention (`--retention`, or the
    /// database's own) deleted. Only their hour statistics remain, which whole-hour rollups
    /// still answer from.
    #[error(
        "readings before {} are deleted by the retention of {}; rollups of whole hours remain",
        rfc3339(*.before),
        humantime::format_duration(std::time::Duration::from_millis(*.retention_ms))
    )]
    Expired {
        /// The end of the latest deleted hour the query touched.
        before: TimestampMs,
        /// The raw retention the deleting pass ran with.
        retention_ms: u64,
    },
}

impl StoreError {
    pub fn is_retriable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Internal(_))
    }

    /// Fixed label for the `bucketd_store_errors_total{kind}` metric.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Rejected(_) => "rejected",
            StoreError::InvalidQuery(_) => "invalid_query",
            StoreError::Corrupt(_) => "corrupt",
            StoreError::Internal(_) => "internal",
            StoreError::Expired { .. } => "expired",
        }
    }
}

/// How long data is kept. Hours are the unit: an hour's readings go once the hour **ended**
/// longer than `raw` ago, its statistics once it ended longer than `rollups` ago. Judged
/// against the wall clock the caller passes (`Store::expire`'s `now`), not the newest data, so a
/// sensor that stops sending still ages out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Raw readings; `None`: forever.
    pub raw: Option<std::time::Duration>,
    /// Hour statistics (at least `raw`); `None`: forever.
    pub rollups: Option<std::time::Duration>,
}

impl Retention {
    /// Hours starting before this have ended at least `keep` before `now`: `None` when kept
    /// forever.
    pub fn cutoff(now: TimestampMs, keep: Option<std::time::Duration>) -> Option<TimestampMs> {
        let keep = i64::try_from(keep?.as_millis()).unwrap_or(i64::MAX);
        Some(crate::model::hour_start(now.saturating_sub(keep).max(MIN_TIMESTAMP_MS)))
    }

    pub fn raw_ms(&self) -> u64 {
        self.raw.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// What one [`Store::expire`] call deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpireReport {
    /// (series, hour)s whose raw readings were deleted (their statistics kept).
    pub hours_deleted: u64,
    /// Raw readings deleted.
    pub readings_deleted: u64,
    /// (series, hour)s whose statistics were deleted by the rollup retention.
    pub stats_deleted: u64,
    /// Nothing left to expire at this `now`: the caller's pass is over. `false`: the call
    /// stopped at its budget, call again (after yielding to writes and queries).
    pub done: bool,
}

/// What one [`Store::seal`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SealReport {
    /// Buckets sealed.
    pub buckets: u64,
    /// Chunks moved (or joined) into the series' order.
    pub chunks: u64,
    /// Chunks left in write order: of hours not yet over, and those the pass has not yet
    /// reached.
    pub left: u64,
    /// The pass has looked at every chunk; `false`: call again (after yielding).
    pub done: bool,
}

/// What one [`Store::compact`] call did to the store's files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compaction {
    /// The files' size before and after, in bytes (equal when nothing could be given back).
    Done { before: u64, after: u64 },
    /// A query held the store; the caller tries again at its next quiet moment.
    Busy,
}

/// An RFC 3339 time for error messages (UTC, milliseconds).
fn rfc3339(ts: TimestampMs) -> String {
    chrono::DateTime::from_timestamp_millis(ts).map_or_else(
        || format!("{ts} ms"),
        |d| d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

/// Which high-water marks to ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marks {
    /// This writer's own.
    Of(WriterId),
    /// The one mark per (series, hour) a schema-1 bucketd kept for every writer.
    Schema1,
}

/// Asks `store` for the high-water marks of `keys` until it answers with one per key: the
/// flusher and the write-ahead log's refill cannot go on without them. Sleeps `delay()`
/// between attempts and hands every failure to `failed` (for rate-limited logging).
pub async fn high_water_until_answered(
    store: &dyn Store,
    marks: Marks,
    keys: &[(String, TimestampMs)],
    mut delay: impl FnMut() -> std::time::Duration,
    mut failed: impl FnMut(&StoreError),
) -> Vec<Seq> {
    loop {
        let answer = match marks {
            Marks::Of(writer) => store.high_water(writer, keys).await,
            Marks::Schema1 => store.schema1_high_water(keys).await,
        };
        match answer {
            Ok(marks) if marks.len() == keys.len() => return marks,
            Ok(marks) => failed(&StoreError::Internal(format!(
                "store returned {} high-water marks for {} keys",
                marks.len(),
                keys.len()
            ))),
            Err(e) => failed(&e),
        }
        tokio::time::sleep(delay()).await;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Order {
    #[default]
    Asc,
    Desc,
}

/// Readings of one sensor with `from <= ts < to`, in `order`; at most `limit` of them.
/// Readings with equal timestamps come in a stable order (storage order: the same for every
/// query until another reading with that timestamp is written), and descending is the exact
/// reverse of ascending, so a caller can resume after "the k-th reading at time t" without gaps
/// or duplicates.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeQuery {
    pub sensor: String,
    pub from: TimestampMs,
    pub to: TimestampMs,
    pub order: Order,
    pub limit: Option<usize>,
}

/// Consecutive readings of a range, as [`Store::runs`] hands them over.
#[derive(Debug)]
pub enum Run {
    /// In the query's order.
    Readings(Vec<Reading>),
    /// In columns, ascending: the query's order reads them from the back when descending.
    Columns(Columns),
}

impl Run {
    pub fn len(&self) -> usize {
        match self {
            Run::Readings(r) => r.len(),
            Run::Columns(c) => c.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The readings, in the query's order.
    pub fn into_readings(self, order: Order) -> Vec<Reading> {
        match self {
            Run::Readings(r) => r,
            Run::Columns(c) => {
                let mut readings: Vec<_> = c.into_readings().collect();
                if order == Order::Desc {
                    readings.reverse();
                }
                readings
            }
        }
    }

    /// Keeps the first `n` readings in the query's order.
    pub fn keep_first(&mut self, n: usize, order: Order) {
        match self {
            Run::Readings(r) => r.truncate(n),
            Run::Columns(c) => c.keep_first(n, order == Order::Desc),
        }
    }
}

/// How many readings [`Store::runs`]' default gathers into one run at most.
const RUN_READINGS: usize = 1024;

/// Readings gathered into runs of what the stream has ready (at most [`RUN_READINGS`]); the
/// runs end at the readings' first error, after the readings before it.
fn runs_of(
    readings: BoxStream<'static, Result<Reading, StoreError>>,
) -> BoxStream<'static, Result<Run, StoreError>> {
    use futures::StreamExt;
    readings
        .ready_chunks(RUN_READINGS)
        .flat_map(|batch| {
            let mut readings = Vec::with_capacity(batch.len());
            let mut failed = None;
            for r in batch {
                match r {
                    Ok(r) => readings.push(r),
                    Err(e) => {
                        failed = Some(Err(e));
                        break;
                    }
                }
            }
            let run = (!readings.is_empty()).then_some(Ok(Run::Readings(readings)));
            futures::stream::iter(run.into_iter().chain(failed))
        })
        .scan(false, |failed, item| {
            let end = std::mem::replace(failed, item.is_err());
            std::future::ready((!end).then_some(item))
        })
        .boxed()
}

/// Sensors whose tags include every `(k, v)` in `tags` and, if given, whose measurement is
/// `measurement`; ordered by key, starting after `after`, at most `limit`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SensorQuery {
    /// Only this database's sensors (keys as stored, prefix included).
    pub database: crate::databases::Database,
    pub tags: Vec<(String, String)>,
    pub measurement: Option<String>,
    pub after: Option<String>,
    pub limit: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SensorInfo {
    pub key: String,
    pub measurement: String,
    pub tags: Vec<(String, String)>,
    pub first: TimestampMs,
    pub last: TimestampMs,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Short name for logs and `/ready` ("mongodb", "embedded", "memory").
    fn name(&self) -> &'static str;

    /// Cheap liveness check of the backing store, used by `/ready`.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Ends the store's connections and background work, once nothing will use it again: the
    /// last step of a shutdown.
    async fn close(&self) {}

    /// Whether `write` does its work on the calling thread, blocking it until done (redb is
    /// synchronous). The flusher gives such a store a thread of its own rather than block a
    /// runtime worker: see `flush::Flusher::spawn_settling`.
    fn writes_block(&self) -> bool {
        false
    }

    /// What [`Store::write`] holds beside its batches' rows; see [`WriteOverhead`]. None by
    /// default: the store works from the rows as they are.
    fn write_overhead(&self) -> WriteOverhead {
        WriteOverhead::default()
    }

    /// Writes every batch, spilling into new buckets as the caps require. Returns one outcome
    /// per batch, in the same order; a failed batch never affects the other batches.
    ///
    /// A batch is applied in order: when it fails, what it left behind is a prefix of its
    /// readings (possibly empty, possibly all of it, when the failure hid a success), and
    /// `writer`'s high-water mark of its (series, hour) is the last sequence number of that
    /// prefix. Each bucket update records the batch's sequence numbers with it, atomically, under
    /// `writer` only: other writers' marks are untouched.
    async fn write(
        &self,
        writer: WriterId,
        batches: &[Batch],
    ) -> Vec<Result<WriteReport, StoreError>>;

    /// For each (series key, hour start): the highest sequence number of a reading `writer`
    /// stored for it (0 when none is). Every reading of that writer, series and hour with a
    /// number up to the mark is stored, none above it (see `write`); what other writers
    /// stored says nothing about it. The flusher asks after an unclear failure, and the
    /// write-ahead log's replay before re-inserting.
    async fn high_water(
        &self,
        writer: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError>;

    /// The marks a schema-1 bucketd recorded: one per (series, hour), whichever process wrote
    /// (0 where it recorded none). Asked only when replaying a log a schema-1 process left.
    async fn schema1_high_water(
        &self,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        Ok(vec![0; keys.len()])
    }

    /// Streams the readings of a range without holding the whole range in memory.
    fn readings(&self, query: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>>;

    /// The same readings as [`Store::readings`], in runs: a store that holds readings in
    /// columns hands them over so, and a page is written from them without making a `Reading`
    /// of each. The default gathers what [`Store::readings`] has ready.
    fn runs(&self, query: RangeQuery) -> BoxStream<'static, Result<Run, StoreError>> {
        runs_of(self.readings(query))
    }

    async fn rollups(&self, query: RollupQuery) -> Result<Vec<RollupRow>, StoreError>;

    /// [`Store::rollups`] field by field, keeping at least what `need` names. The default
    /// regroups the rows; a store that folds steps per field hands them over as they are.
    async fn rollup_steps(
        &self,
        query: RollupQuery,
        need: Need,
    ) -> Result<RollupSteps, StoreError> {
        let _ = need;
        Ok(RollupSteps::of_rows(self.rollups(query).await?))
    }

    /// [`Store::rollup_steps`] of several series, in the order asked. The default asks for
    /// each in turn; a store that runs its reads on other threads reads them all in one go.
    async fn rollup_steps_of(
        &self,
        queries: Vec<RollupQuery>,
        need: Need,
    ) -> Result<Vec<RollupSteps>, StoreError> {
        let mut out = Vec::with_capacity(queries.len());
        for query in queries {
            out.push(self.rollup_steps(query, need).await?);
        }
        Ok(out)
    }

    /// The latest reading in `from..to` of each of `sensors`, in the order asked: what
    /// [`Store::readings`] gives first in descending order. The default asks for each in turn.
    async fn latest_of(
        &self,
        sensors: Vec<String>,
        (from, to): (TimestampMs, TimestampMs),
    ) -> Result<Vec<Option<Reading>>, StoreError> {
        use futures::StreamExt;
        let mut out = Vec::with_capacity(sensors.len());
        for sensor in sensors {
            let query = RangeQuery { sensor, from, to, order: Order::Desc, limit: Some(1) };
            out.push(self.readings(query).next().await.transpose()?);
        }
        Ok(out)
    }

    /// The values of the numeric fields of `query` (the wanted ones), step by step; `None` as
    /// soon as there are more than `most`. The default reads the readings.
    async fn step_values(
        &self,
        query: RollupQuery,
        most: usize,
    ) -> Result<Option<StepValues>, StoreError> {
        use futures::StreamExt;
        let step = query.step_ms;
        let wanted = |name: &str| query.fields.as_ref().is_none_or(|f| f.iter().any(|w| w == name));
        let mut readings = self.readings(RangeQuery {
            sensor: query.sensor.clone(),
            from: query.from,
            to: query.to,
            order: Order::Asc,
            limit: None,
        });
        let (mut out, mut held) = (StepValues::default(), 0usize);
        while let Some(r) = readings.next().await.transpose()? {
            let start = r.ts.div_euclid(step) * step;
            for (name, value) in &r.fields {
                if let Some(v) = value.as_f64()
                    && wanted(name)
                {
                    held += 1;
                    if held > most {
                        return Ok(None);
                    }
                    out.add(name, start, &[v]);
                }
            }
        }
        Ok(Some(out))
    }

    /// [`Store::step_values`] of several series together, of one step and the same fields:
    /// each step holds the values of every series, in no set order (what a median over them
    /// all reads). `None` as soon as they hold more than `most`. The default asks for each in
    /// turn; a store that runs its reads on other threads reads them all in one go, into the
    /// same steps. `lists` are lists of values the caller is done with, which a store may
    /// fill again rather than allocate new ones (the default lets them go).
    async fn step_values_of(
        &self,
        queries: Vec<RollupQuery>,
        most: usize,
        lists: Vec<Vec<f64>>,
    ) -> Result<Option<StepValues>, StoreError> {
        drop(lists);
        let mut out = StepValues::default();
        for query in queries {
            let Some(values) = self.step_values(query, most - out.held()).await? else {
                return Ok(None);
            };
            out.merge(values);
        }
        Ok(Some(out))
    }

    async fn sensors(&self, query: SensorQuery) -> Result<Vec<SensorInfo>, StoreError>;

    /// A number that changes whenever a series is created or removed, so that a listing of
    /// [`Store::sensors`] (keys, measurements and tags, not spans) answered under one value may
    /// be used again while it stays. It changes once the store holds the new series, before the
    /// write that created it returns. `None`, the default: the store cannot tell (other
    /// processes write it too), and every listing is asked for.
    fn series_generation(&self) -> Option<u64> {
        None
    }

    /// Deletes, in one bounded step of at most about `budget` buckets, raw readings of hours
    /// past `policy.raw` (keeping their hour statistics for [`Store::rollups`]) and hour
    /// statistics past `policy.rollups`. The default does nothing: a store that expires by
    /// other means (MongoDB's TTL indexes) has no pass to run.
    ///
    /// Afterwards, a range (or a finer-than-hour rollup) touching a deleted hour fails with
    /// [`StoreError::Expired`] instead of answering without those readings.
    async fn expire(
        &self,
        now: TimestampMs,
        policy: Retention,
        budget: usize,
    ) -> Result<ExpireReport, StoreError> {
        let _ = (now, policy, budget);
        Ok(ExpireReport { done: true, ..ExpireReport::default() })
    }

    /// Whether [`Store::expire_keys`] deletes anything here: a store that keeps the hour
    /// statistics of the readings it deletes, and can delete one database's alone.
    fn can_expire_keys(&self) -> bool {
        false
    }

    /// [`Store::expire`] of raw readings only, for the series whose stored keys `k` are in
    /// `keys.0 <= k < keys.1` (one database's, `Database::key_range`), at a retention `raw`
    /// shorter than the server's: one bounded step from where the last call for the same
    /// range stopped. Their hour statistics stay, for [`Store::expire`] to delete in time.
    /// The default does nothing: a store without a retention pass of its own.
    async fn expire_keys(
        &self,
        now: TimestampMs,
        raw: std::time::Duration,
        keys: (String, String),
        budget: usize,
    ) -> Result<ExpireReport, StoreError> {
        let _ = (now, raw, keys, budget);
        Ok(ExpireReport { done: true, ..ExpireReport::default() })
    }

    /// Lays out the readings of hours that are over the way reads want them (the embedded
    /// store: a series' hours side by side), a bounded step at a time from where the last
    /// call stopped. `None`: the store has no such layout to keep (the default).
    async fn seal(
        &self,
        now: TimestampMs,
        budget: usize,
    ) -> Result<Option<SealReport>, StoreError> {
        let _ = (now, budget);
        Ok(None)
    }

    /// Gives the file space the store no longer uses back to the file system. The flusher
    /// calls it once the buffers have stayed empty for a while after writes, on its own
    /// thread when `writes_block`, as it calls `write`: it may take as long as moving the
    /// used pages that sit past the free ones. `None`: the store has no files of its own to
    /// compact (the default; MongoDB manages its own).
    async fn compact(&self) -> Result<Option<Compaction>, StoreError> {
        Ok(None)
    }

    /// Whether any reading of `sensor` is stored; lets the query API tell an unknown sensor
    /// (404) from an empty range (200). The default reads at most one reading over all time;
    /// a store with a cheaper lookup may override it.
    async fn sensor_exists(&self, sensor: &str) -> Result<bool, StoreError> {
        use futures::StreamExt;
        let mut readings = self.readings(RangeQuery {
            sensor: sensor.to_owned(),
            from: MIN_TIMESTAMP_MS,
            to: MAX_TIMESTAMP_MS + 1,
            order: Order::Asc,
            limit: Some(1),
        });
        Ok(readings.next().await.transpose()?.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of_all(points: &[(TimestampMs, f64)]) -> FieldStats {
        let mut s = FieldStats::of(points[0].0, points[0].1);
        for &(ts, v) in &points[1..] {
            s.merge(&FieldStats::of(ts, v));
        }
        s
    }

    proptest::proptest! {
        /// A run folded at once equals its values pushed one by one after what came before,
        /// ties at equal times included.
        #[test]
        fn a_run_folds_as_its_values_pushed_one_by_one(
            before in proptest::collection::vec((0..6i64, -3..4i32), 1..4),
            mut run in proptest::collection::vec((0..6i64, -3..4i32), 1..12),
        ) {
            run.sort_by_key(|p| p.0);
            let points = |p: &[(i64, i32)]| -> Vec<(TimestampMs, f64)> {
                p.iter().map(|&(t, v)| (t, f64::from(v) / 4.0)).collect()
            };
            let (before, run) = (points(&before), points(&run));
            let mut one_by_one = of_all(&before);
            for &(t, v) in &run {
                one_by_one.push(t, v);
            }
            let mut at_once = of_all(&before);
            let (ts, values): (Vec<_>, Vec<_>) = run.iter().copied().unzip();
            at_once.push_run(&ts, &values);
            proptest::prop_assert_eq!(at_once, one_by_one);
            let all: Vec<_> = before.iter().chain(&run).copied().collect();
            proptest::prop_assert_eq!(one_by_one, of_all(&all));
            // Keeping less keeps what it names as the whole fold does.
            for need in [Need::COUNT, Need { sum: true, ..Need::COUNT },
                Need { extremes: true, ..Need::COUNT }, Need { edges: true, ..Need::COUNT }]
            {
                let mut part = of_all(&before);
                part.push_run_of(&ts, &values, need);
                proptest::prop_assert_eq!(part.count, at_once.count);
                if need.sum {
                    proptest::prop_assert_eq!(part.sum, at_once.sum);
                }
                if need.extremes {
                    proptest::prop_assert_eq!((part.min, part.max), (at_once.min, at_once.max));
                }
                if need.edges {
                    proptest::prop_assert_eq!((part.first, part.last), (at_once.first, at_once.last));
                }
            }
        }

        /// `fit` is the most readings whose rows and overhead fit the room.
        #[test]
        fn fit_is_the_most_readings_that_fit(
            costs in proptest::array::uniform5(0..2_000usize),
            room in 0..400_000usize,
            each in 0..500usize,
            fields in 0..8usize,
        ) {
            let overhead = WriteOverhead {
                per_batch: costs[0],
                per_batch_field: costs[1],
                per_reading: costs[2],
                per_value: costs[3],
                per_field_minute: costs[4],
            };
            let bytes = |k: usize| k * each + overhead.of(k, fields);
            let k = overhead.fit(room, each, fields);
            if k > 0 {
                proptest::prop_assert!(bytes(k) <= room, "{k} readings: {} > {room}", bytes(k));
            }
            // Bounded where the costs are zero: what matters is that one more does not fit.
            if bytes(k + 1) > bytes(k) {
                proptest::prop_assert!(bytes(k + 1) > room, "{} fit, {k} taken", k + 1);
            }
        }
    }

    #[tokio::test]
    async fn runs_of_readings_end_at_the_first_error() {
        use futures::StreamExt;
        let r = |ts| Ok(Reading { ts, fields: Default::default() });
        // The error comes in the second run's worth, readings after it in a third.
        let mut items: Vec<_> = (0..RUN_READINGS as i64 + 6).map(r).collect();
        items.push(Err(StoreError::Unavailable("down".into())));
        items.extend((0..2000).map(r));
        let got: Vec<_> = runs_of(futures::stream::iter(items).boxed()).collect().await;
        let lens: Vec<_> = got.iter().map(|run| run.as_ref().map(Run::len).ok()).collect();
        assert_eq!(lens, [Some(RUN_READINGS), Some(6), None]);
        let Ok(Run::Readings(second)) = &got[1] else { panic!("{:?}", got[1]) };
        assert_eq!(second[0].ts, RUN_READINGS as i64);
    }

    #[test]
    fn merge_keeps_the_earliest_first_and_the_latest_last() {
        let mut a = FieldStats::of(20, 1.0);
        a.merge(&FieldStats::of(10, 5.0));
        a.merge(&FieldStats::of(30, -2.0));
        assert_eq!(
            a,
            FieldStats {
                count: 3,
                min: -2.0,
                max: 5.0,
                sum: 4.0,
                first: Some((10, 5.0)),
                last: Some((30, -2.0)),
            }
        );
        let mut b = FieldStats::of(-5, 7.0);
        b.merge(&FieldStats::of(25, 0.5));
        a.merge(&b);
        assert_eq!((a.count, a.first, a.last), (5, Some((-5, 7.0)), Some((30, -2.0))));
    }

    #[test]
    fn ties_in_time_are_ordered_by_value_whatever_the_merge_order() {
        let points = [(10, 3.0), (10, -1.0), (10, 8.0), (5, 2.0), (20, 4.0), (20, 9.0), (20, 1.0)];
        let want = of_all(&points);
        assert_eq!((want.first, want.last), (Some((5, 2.0)), Some((20, 9.0))));
        let ties = of_all(&points[..3]);
        assert_eq!((ties.first, ties.last), (Some((10, -1.0)), Some((10, 8.0))));
        // Every rotation, and merged as two halves the other way round: the same answer.
        for k in 0..points.len() {
            let mut rotated = points.to_vec();
            rotated.rotate_left(k);
            assert_eq!(of_all(&rotated), want, "rotation {k}");
            let (left, right) = rotated.split_at(k.max(1));
            let mut halves = if right.is_empty() { of_all(left) } else { of_all(right) };
            if !right.is_empty() {
                halves.merge(&of_all(left));
            }
            assert_eq!((halves.first, halves.last), (want.first, want.last), "halves {k}");
        }
    }

    #[test]
    fn unknown_first_or_last_makes_the_merge_unknown() {
        let old = FieldStats { first: None, last: None, ..FieldStats::of(50, 1.0) };
        let mut known = FieldStats::of(10, 2.0);
        known.merge(&old);
        assert_eq!((known.count, known.min, known.max, known.sum), (2, 1.0, 2.0, 3.0));
        assert_eq!((known.first, known.last), (None, None));
        let mut from_old = old;
        from_old.merge(&FieldStats::of(10, 2.0));
        assert_eq!(from_old, known);
        // Merging more known values never brings them back.
        known.merge(&FieldStats::of(0, 0.0));
        assert_eq!((known.first, known.last), (None, None));
    }
}
