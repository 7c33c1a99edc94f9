//! The MongoDB store: hourly bucket documents in one collection, written by unordered bulk
//! upserts and queried by aggregation. Supports MongoDB 7.0 and later.
//!
//! - [`document`]: the bucket document's shape, name mapping and reading encoding.
//! - `write`: how a flush becomes `update` commands, spilling and retries.
//! - `query`: ranges, rollups and sensor listings.
//! - [`hours`]: the hour statistics collection written with `--retention`, which keeps each
//!   sensor-hour's statistics after the buckets' TTL deleted them, and the retention pass.
//!
//! Indexes (created idempotently by [`MongoStore::connect`]):
//! - `s_start` `{s: 1, start: 1}`: a sensor's buckets by hour, for writes' filters and ranges;
//! - `tags` `{"tags.k": 1, "tags.v": 1}`: sensors by tag (`$elemMatch` on both);
//! - `m_s` `{m: 1, s: 1}`: sensors by measurement;
//! - `end_ttl` `{end: 1}` with `expireAfterSeconds` only when a retention is configured: a
//!   bucket is deleted once its hour ended longer ago than the retention;
//! - on `hour_stats`: `s_day` `{s: 1, day: 1}`, and `end_ttl` with `--rollup-retention`.
//!
//! Every command is bounded by the store's operation timeout; a timeout is `Unavailable`.

pub mod document;
pub mod hours;
mod points;
mod query;
mod write;

pub use write::encode_batch;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bson::{Document, doc};
use futures::stream::BoxStream;
use mongodb::error::{ErrorKind, WriteFailure};
use mongodb::options::{ClientOptions, IndexOptions};
use mongodb::{Client, Collection, Database, IndexModel};

use crate::model::{Batch, Reading, Seq, TimestampMs, WriterId};
use crate::store::{
    BucketLimits, ExpireReport, Marks, RangeQuery, Retention, RollupQuery, RollupRow, SensorInfo,
    SensorQuery, Store, StoreError, WriteReport,
};

/// The collection holding every bucket.
pub const COLLECTION: &str = "buckets";

const TTL_INDEX: &str = "end_ttl";

/// How long a command may take before the store reports the server unavailable. Generous:
/// a flush of many sensors is one large command.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(30);

/// An `update` carries `maxTimeMS` = the operation timeout; the client waits this much longer
/// for the server's own verdict before it gives up on the reply.
const CLIENT_TIMEOUT_MARGIN: Duration = Duration::from_secs(2);

/// How long the driver looks for a usable server when the URI does not say.
const DEFAULT_SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct MongoConfig {
    pub uri: String,
    pub database: String,
    pub limits: BucketLimits,
    /// Delete buckets this long after their hour ended (a TTL index on `end`). `None` keeps
    /// everything and removes a TTL index an earlier configuration created. With a retention,
    /// every flush also writes the hour statistics collection ([`hours`]).
    pub retention: Option<Duration>,
    /// Delete hour statistics this long after their day ended (a TTL index on the `hour_stats`
    /// collection's `end`); `None`: forever.
    pub rollup_retention: Option<Duration>,
    pub op_timeout: Duration,
}

impl MongoConfig {
    pub fn new(uri: impl Into<String>, database: impl Into<String>) -> Self {
        MongoConfig {
            uri: uri.into(),
            database: database.into(),
            limits: BucketLimits::default(),
            retention: None,
            rollup_retention: None,
            op_timeout: DEFAULT_OP_TIMEOUT,
        }
    }
}

/// Commands and statements the store has sent for writes, for measuring round trips.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteRoundTrips {
    pub commands: u64,
    pub statements: u64,
}

#[derive(Default)]
struct Counters {
    write_commands: AtomicU64,
    write_statements: AtomicU64,
}

/// What the server's `hello` says about the size of one command.
#[derive(Clone, Copy, Debug)]
struct ServerLimits {
    max_statements: usize,
    max_command_bytes: usize,
}

struct Inner {
    db: Database,
    buckets: Collection<Document>,
    /// The hour statistics collection ([`hours`]), written when `hour_stats`.
    hours: Collection<Document>,
    hour_stats: bool,
    retention: Option<Duration>,
    /// The raw retention of the last `Store::expire` (0: none yet), named by
    /// `StoreError::Expired` in preference to the configured one.
    expire_retention_ms: AtomicU64,
    /// The raw retention of the last `Store::expire_keys` of each key range (one database's),
    /// for the series whose keys are in it.
    key_retentions: std::sync::RwLock<Vec<((String, String), Duration)>>,
    limits: BucketLimits,
    server: ServerLimits,
    op_timeout: Duration,
    counters: Counters,
    /// The latest reading time this process stored per series and hour.
    latest: points::Latest,
}

/// `v` of buckets whose readings' statistics are also in the hour statistics collection
/// (written while `--retention` is set), without minute statistics: a whole-hour rollup
/// takes those hours from the collection and only other buckets' statistics from the
/// buckets.
pub const HOUR_STATS_BUCKET_VERSION: i32 = 4;

/// `v` of buckets that keep minute statistics (`ms`, [`document`]) beside the hour's, written
/// without the hour statistics collection. Rollups of whole minutes read them instead of the
/// readings; buckets of earlier versions are answered from their readings.
pub const MINUTE_STATS_BUCKET_VERSION: i32 = 5;

/// `v` of buckets with minute statistics whose statistics are also in the hour statistics
/// collection: both of the above.
pub const MINUTE_AND_HOUR_STATS_BUCKET_VERSION: i32 = 6;

/// The versions of buckets with minute statistics.
const WITH_MINUTE_STATS: [i32; 2] =
    [MINUTE_STATS_BUCKET_VERSION, MINUTE_AND_HOUR_STATS_BUCKET_VERSION];

/// The versions of buckets whose statistics the hour statistics collection also holds.
const IN_HOUR_STATS: [i32; 2] = [HOUR_STATS_BUCKET_VERSION, MINUTE_AND_HOUR_STATS_BUCKET_VERSION];

impl Inner {
    /// `v` of the buckets this store writes: [`MINUTE_AND_HOUR_STATS_BUCKET_VERSION`] when it
    /// also writes the hour statistics, else [`MINUTE_STATS_BUCKET_VERSION`]. The write filter
    /// names it, so readings never join a bucket of another kind, whose statistics would then
    /// describe only part of it.
    fn bucket_version(&self) -> i32 {
        if self.hour_stats {
            MINUTE_AND_HOUR_STATS_BUCKET_VERSION
        } else {
            MINUTE_STATS_BUCKET_VERSION
        }
    }
}

#[derive(Clone)]
pub struct MongoStore {
    inner: Arc<Inner>,
}

impl MongoStore {
    /// Connects with the default operation timeout; see [`MongoStore::connect_with`].
    pub async fn connect(
        uri: &str,
        database: &str,
        limits: BucketLimits,
        retention: Option<Duration>,
    ) -> Result<Self, StoreError> {
        let mut config = MongoConfig::new(uri, database);
        config.limits = limits;
        config.retention = retention;
        Self::connect_with(config).await
    }

    /// Connects, waits until the server answers, reads its size limits and creates the
    /// indexes. Fails if the server cannot be reached within the operation timeout.
    pub async fn connect_with(config: MongoConfig) -> Result<Self, StoreError> {
        let limits = config.limits;
        if limits.max_readings == 0 || limits.max_bytes > BucketLimits::MAX_BYTES_CEILING {
            return Err(StoreError::Internal(format!(
                "bucket caps {limits:?} out of range: at least one reading, at most {} bytes",
                BucketLimits::MAX_BYTES_CEILING
            )));
        }
        let timeout = config.op_timeout;
        let mut options =
            timed(timeout, "parsing the MongoDB URI", ClientOptions::parse(&config.uri))
                .await?
                .map_err(|e| StoreError::Internal(format!("bad MongoDB URI: {e}")))?;
        options.app_name.get_or_insert_with(|| "bucketd".to_owned());
        options
            .server_selection_timeout
            .get_or_insert(DEFAULT_SERVER_SELECTION_TIMEOUT.min(timeout));
        let client = Client::with_options(options).map_err(error_from_driver)?;
        let db = client.database(&config.database);

        let hello =
            timed(timeout, "hello", client.database("admin").run_command(doc! {"hello": 1}))
                .await?
                .map_err(error_from_driver)?;
        let number = |key: &str| hello.get(key).and_then(document::number);
        let server = ServerLimits {
            max_statements: number("maxWriteBatchSize").unwrap_or(100_000.0) as usize,
            max_command_bytes: number("maxBsonObjectSize").unwrap_or(16_777_216.0) as usize,
        };

        // A server reporting a smaller document limit than MongoDB's 16 MiB keeps the same
        // headroom for a bucket's header and statistics as MAX_BYTES_CEILING does.
        let headroom = (16 * 1024 * 1024 - BucketLimits::MAX_BYTES_CEILING) as usize;
        let ceiling = server.max_command_bytes.saturating_sub(headroom).max(1);
        let mut limits = limits;
        limits.max_bytes = limits.max_bytes.min(u32::try_from(ceiling).unwrap_or(u32::MAX));

        let store = MongoStore {
            inner: Arc::new(Inner {
                buckets: db.collection(COLLECTION),
                hours: db.collection(hours::COLLECTION),
                hour_stats: config.retention.is_some(),
                retention: config.retention,
                expire_retention_ms: AtomicU64::new(0),
                key_retentions: Default::default(),
                db,
                limits,
                server,
                op_timeout: timeout,
                counters: Counters::default(),
                latest: points::Latest::default(),
            }),
        };
        store.create_indexes(config.retention).await?;
        if config.retention.is_some() {
            store.create_hour_indexes(config.rollup_retention).await?;
        }
        Ok(store)
    }

    async fn create_indexes(&self, retention: Option<Duration>) -> Result<(), StoreError> {
        let inner = &self.inner;
        let index = |keys: Document, name: &str| {
            IndexModel::builder()
                .keys(keys)
                .options(IndexOptions::builder().name(name.to_owned()).build())
                .build()
        };
        let models = vec![
            index(doc! {document::SENSOR: 1, document::START: 1}, "s_start"),
            index(doc! {"tags.k": 1, "tags.v": 1}, "tags"),
            index(doc! {document::MEASUREMENT: 1, document::SENSOR: 1}, "m_s"),
        ];
        timed(inner.op_timeout, "createIndexes", inner.buckets.create_indexes(models))
            .await?
            .map_err(error_from_driver)?;

        let names = timed(inner.op_timeout, "listIndexes", inner.buckets.list_index_names())
            .await?
            .map_err(error_from_driver)?;
        let has_ttl = names.iter().any(|n| n == TTL_INDEX);
        let Some(retention) = retention else {
            if has_ttl {
                self.drop_ttl_index().await?;
            }
            return Ok(());
        };
        let ttl = IndexModel::builder()
            .keys(doc! {document::END: 1})
            .options(
                IndexOptions::builder().name(TTL_INDEX.to_owned()).expire_after(retention).build(),
            )
            .build();
        match timed(inner.op_timeout, "createIndex", inner.buckets.create_index(ttl.clone()))
            .await?
        {
            Ok(_) => Ok(()),
            // IndexOptionsConflict / IndexKeySpecsConflict: an earlier run chose another
            // retention. Replace the index (collMod would keep it, but needs more privileges).
            Err(e) if matches!(command_code(&e), Some(85 | 86)) => {
                self.drop_ttl_index().await?;
                timed(inner.op_timeout, "createIndex", inner.buckets.create_index(ttl))
                    .await?
                    .map(|_| ())
                    .map_err(error_from_driver)
            }
            Err(e) => Err(error_from_driver(e)),
        }
    }

    /// `{s, day}` for rollups and the range check, and the rollup retention's TTL on `end`
    /// (replaced when an earlier run chose another).
    async fn create_hour_indexes(&self, keep: Option<Duration>) -> Result<(), StoreError> {
        let inner = &self.inner;
        let by_day = IndexModel::builder()
            .keys(doc! {document::SENSOR: 1, hours::DAY: 1})
            .options(IndexOptions::builder().name("s_day".to_owned()).build())
            .build();
        timed(inner.op_timeout, "createIndex", inner.hours.create_index(by_day))
            .await?
            .map_err(error_from_driver)?;
        let names = timed(inner.op_timeout, "listIndexes", inner.hours.list_index_names())
            .await?
            .map_err(error_from_driver)?;
        if names.iter().any(|n| n == hours::TTL_INDEX) {
            timed(inner.op_timeout, "dropIndexes", inner.hours.drop_index(hours::TTL_INDEX))
                .await?
                .map_err(error_from_driver)?;
        }
        let Some(keep) = keep else { return Ok(()) };
        let ttl = IndexModel::builder()
            .keys(doc! {document::END: 1})
            .options(
                IndexOptions::builder()
                    .name(hours::TTL_INDEX.to_owned())
                    .expire_after(keep)
                    .build(),
            )
            .build();
        timed(inner.op_timeout, "createIndex", inner.hours.create_index(ttl))
            .await?
            .map(|_| ())
            .map_err(error_from_driver)
    }

    async fn drop_ttl_index(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        timed(inner.op_timeout, "dropIndexes", inner.buckets.drop_index(TTL_INDEX))
            .await?
            .map_err(error_from_driver)
    }

    /// Write commands and update statements sent so far.
    pub fn write_round_trips(&self) -> WriteRoundTrips {
        WriteRoundTrips {
            commands: self.inner.counters.write_commands.load(Ordering::Relaxed),
            statements: self.inner.counters.write_statements.load(Ordering::Relaxed),
        }
    }

    /// The database the buckets live in (for administration and tests).
    pub fn database(&self) -> &Database {
        &self.inner.db
    }
}

#[async_trait]
impl Store for MongoStore {
    fn name(&self) -> &'static str {
        "mongodb"
    }

    fn write_overhead(&self) -> crate::store::WriteOverhead {
        write::WRITE_OVERHEAD
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let inner = &self.inner;
        timed(inner.op_timeout, "ping", inner.db.run_command(doc! {"ping": 1}))
            .await?
            .map(|_| ())
            .map_err(error_from_driver)
    }

    /// A client whose last handle is dropped while the runtime stops ends its server sessions
    /// from a task of its own, which then finds the connection pool gone and panics (the panic
    /// is the task's, but its backtrace lands in the log of a clean shutdown). Shut down here,
    /// it ends them first. Bounded, like every operation: the sessions die on the server anyway.
    async fn close(&self) {
        let inner = &self.inner;
        let shutdown = inner.db.client().clone().shutdown();
        if timed(inner.op_timeout, "closing the client", shutdown).await.is_err() {
            tracing::warn!(timeout = ?inner.op_timeout, "the MongoDB client did not close in time");
        }
    }

    async fn write(
        &self,
        writer: WriterId,
        batches: &[Batch],
    ) -> Vec<Result<WriteReport, StoreError>> {
        write::write(&self.inner, writer, batches).await
    }

    async fn high_water(
        &self,
        writer: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        query::high_water(&self.inner, Marks::Of(writer), keys).await
    }

    async fn schema1_high_water(
        &self,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        query::high_water(&self.inner, Marks::Schema1, keys).await
    }

    fn readings(&self, query: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>> {
        query::readings(self.inner.clone(), query)
    }

    async fn rollups(&self, query: RollupQuery) -> Result<Vec<RollupRow>, StoreError> {
        query::rollups(&self.inner, query).await
    }

    async fn sensors(&self, query: SensorQuery) -> Result<Vec<SensorInfo>, StoreError> {
        query::sensors(&self.inner, query).await
    }

    /// The buckets or hour statistics of the sensor: the readings may all be deleted.
    async fn sensor_exists(&self, sensor: &str) -> Result<bool, StoreError> {
        let inner = &self.inner;
        for coll in [&inner.buckets, &inner.hours] {
            let found =
                timed(inner.op_timeout, "find", coll.find_one(doc! {document::SENSOR: sensor}))
                    .await?
                    .map_err(error_from_driver)?;
            if found.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn expire(
        &self,
        now: TimestampMs,
        policy: Retention,
        budget: usize,
    ) -> Result<ExpireReport, StoreError> {
        hours::expire(&self.inner, now, policy, budget, None).await
    }

    /// Only with `--retention`: without it no hour statistics are written, and deleting a
    /// bucket would lose its readings' statistics.
    fn can_expire_keys(&self) -> bool {
        self.inner.hour_stats
    }

    async fn expire_keys(
        &self,
        now: TimestampMs,
        raw: Duration,
        keys: (String, String),
        budget: usize,
    ) -> Result<ExpireReport, StoreError> {
        {
            let mut known = self.inner.key_retentions.write().unwrap_or_else(|p| p.into_inner());
            known.retain(|(range, _)| *range != keys);
            known.push((keys.clone(), raw));
        }
        let policy = Retention { raw: Some(raw), rollups: None };
        hours::expire(&self.inner, now, policy, budget, Some(&keys)).await
    }
}

async fn timed<F: std::future::IntoFuture>(
    limit: Duration,
    what: &str,
    fut: F,
) -> Result<F::Output, StoreError> {
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| StoreError::Unavailable(format!("MongoDB {what} timed out after {limit:?}")))
}

/// Whether a MongoDB error code is worth retrying: the server is stepping down, shutting
/// down, unreachable, overloaded, or the credentials are (for now) wrong. Every other code is
/// about the write itself (a bad value, a validation rule, a document too large) and will
/// fail again. A code missing here means data is dropped on that error, so the list leans
/// towards retrying.
pub fn is_retriable(code: i32) -> bool {
    matches!(
        code,
        6       // HostUnreachable
        | 7     // HostNotFound
        | 13    // Unauthorized: privileges can be granted without restarting bucketd
        | 18    // AuthenticationFailed
        | 24    // LockTimeout
        | 46    // LockBusy
        | 50    // MaxTimeMSExpired
        | 63    // StaleShardVersion
        | 64    // WriteConcernFailed
        | 89    // NetworkTimeout
        | 91    // ShutdownInProgress
        | 112   // WriteConflict
        | 133   // FailedToSatisfyReadPreference
        | 134   // ReadConcernMajorityNotAvailableYet
        | 150   // StaleEpoch
        | 189   // PrimarySteppedDown
        | 202   // NetworkInterfaceExceededTimeLimit
        | 262   // ExceededTimeLimit
        | 279   // ClientDisconnect
        | 317   // ConnectionPoolExpired
        | 462   // IngressRequestRateLimitExceeded
        | 9001  // SocketException
        | 10107 // NotWritablePrimary
        | 11600 // InterruptedAtShutdown
        | 11601 // Interrupted
        | 11602 // InterruptedDueToReplStateChange
        | 13388 // StaleConfig
        | 13435 // NotPrimaryNoSecondaryOk
        | 13436 // NotPrimaryOrSecondary
    )
}

/// "The document would pass 16 MiB": BSONObjectTooLarge, and the update / upsert variants.
/// Matched on the message too, since servers word some paths without those codes.
fn is_too_large(code: i32, message: &str) -> bool {
    matches!(code, 10334 | 17419 | 17420) || message.contains("larger than")
}

fn error_from_code(code: i32, message: &str) -> StoreError {
    let text = format!("MongoDB error {code}: {message}");
    if is_retriable(code) { StoreError::Unavailable(text) } else { StoreError::Rejected(text) }
}

fn command_code(e: &mongodb::error::Error) -> Option<i32> {
    match e.kind.as_ref() {
        ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

fn error_from_driver(e: mongodb::error::Error) -> StoreError {
    match e.kind.as_ref() {
        ErrorKind::Command(c) => error_from_code(c.code, &c.message),
        ErrorKind::Write(WriteFailure::WriteError(w)) => error_from_code(w.code, &w.message),
        ErrorKind::InvalidArgument { .. } => StoreError::Internal(e.to_string()),
        ErrorKind::BsonDeserialization(_) => StoreError::Corrupt(e.to_string()),
        // Network, server selection, pool, DNS, authentication handshakes, write concern:
        // all may pass.
        _ => StoreError::Unavailable(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_map_to_retriable_or_permanent() {
        assert!(matches!(error_from_code(10107, "not primary"), StoreError::Unavailable(_)));
        assert!(matches!(error_from_code(112, "conflict"), StoreError::Unavailable(_)));
        assert!(matches!(error_from_code(2, "bad value"), StoreError::Rejected(_)));
        assert!(matches!(error_from_code(121, "validation"), StoreError::Rejected(_)));
        assert!(is_too_large(17419, ""));
        assert!(is_too_large(17420, ""));
        assert!(is_too_large(10334, ""));
        assert!(is_too_large(2, "Resulting document after update is larger than 16777216"));
        assert!(!is_too_large(2, "bad value"));
    }
}
