//! The embedded store: hourly buckets in a single redb file under `--data-dir`, used when no
//! MongoDB URI is given.
//!
//! # On-disk layout (schema version [`FILE_SCHEMA_VERSION`])
//! One file, `<data-dir>/bucketd.redb`, with these tables (integers in keys are redb's fixed-width
//! little-endian encodings, compared numerically; values are the hand-written encodings of
//! [`codec`], each starting with its own version number):
//!
//! | table               | key                                   | value                       |
//! |---------------------|---------------------------------------|-----------------------------|
//! | `meta`              | `&str` name                           | `u64`                       |
//! | `series`            | `&str` sensor key                     | series record: id, measurement, tags, first, last |
//! | `tag_index`         | `(tag key, tag value, sensor key)`    | `()`                        |
//! | `measurement_index` | `(measurement, sensor key)`           | `()`                        |
//! | `buckets`           | `(series id u64, hour i64, seq u32)`  | bucket header: count, approximate bytes, min/max ts, sorted flag, each chunk's write number (schema 5), per-field `{count,min,max,sum,first,last}` (first/last: a value with its time; schema 3) |
//! | `chunks_by_write`   | `(write u64, series id, hour, seq, chunk u32)` | schema 5: readings of that bucket: one flush's, or several small flushes' joined (`write::SMALL_CHUNK`); column by column from schema 6 |
//! | `chunks`            | `(series id, hour, seq, chunk u32)`   | chunks keyed by series (write number 0 in their header): those the seal pass moved once their hour was over ([`seal`]), and those schemas 1 to 4 wrote |
//! | `writer_marks`      | `(sensor key, hour i64, writer u64)`  | `u64`: highest write sequence number that writer stored for that hour (`Store::high_water`) |
//! | `high_water`        | `(sensor key, hour i64)`              | `u64`: schema 1's one mark per hour, whoever wrote (`Store::schema1_high_water`); no longer written |
//! | `hour_stats`        | `(series id u64, hour i64)`           | schema 4: merged statistics (a bucket header, no chunks) of an hour whose readings the retention pass deleted ([`expire`]) |
//!
//! `meta` holds `schema_version` (written when the file is created; a file from a newer
//! bucketd is refused at open; an older file is upgraded in place at open: schema 1 → 2
//! creates `writer_marks`, schema 2 → 3 changes nothing stored, see below, 3 → 4 creates
//! `hour_stats`, 4 → 5 creates `chunks_by_write` and `next_write`, 5 → 6 changes nothing
//! stored, see below), `next_series_id`,
//! `next_write` (the number of the next write transaction, from 1) and, once a retention pass
//! ran, `raw_retention_ms`.
//!
//! Schema 3 added each numeric field's first and last value (with its time) to the bucket
//! header (header encoding version 2). Headers of schemas 1 and 2 (version 1) are still
//! decoded, their statistics with `first`/`last` `None`; the first write into such a bucket
//! counts its statistics again from its chunks and writes a version-2 header, so a bucket
//! that is written to again answers first/last. The version is bumped because a schema-2
//! bucketd cannot decode version-2 headers: it refuses the file at open rather than failing
//! on reads.
//!
//! A flush never rewrites a bucket's readings beyond its last small chunk: it appends one
//! chunk per bucket it touches (or joins the last one while that holds fewer than
//! `write::SMALL_CHUNK` readings) and rewrites only the bucket's header (whose size depends on
//! the number of numeric fields and chunks, not of readings) and the series record. Chunks are
//! keyed by the write that made them first ([`chunks`] says why), so a flush's new chunks
//! land together at the end of their table; series ids keep one series' buckets contiguous,
//! so a range query is one B-tree scan of the headers and a lookup per chunk they list.
//!
//! Schema 5 changed the chunk key. Its header (encoding version 3) lists the write of each
//! chunk; a header of an earlier encoding has all its chunks in the old `chunks` table, and a
//! write into such a bucket appends its new chunks to `chunks_by_write`, so one bucket may
//! have chunks in both (write 0 for the old ones). Nothing is moved at the upgrade; the seal
//! pass later moves chunks of hours that are over into `chunks`, which needs no schema change.
//!
//! Schema 6 writes chunks column by column (chunk encoding version 2, [`codec`]): a reading of
//! two fields of fixed resolution at a fixed period takes a fraction of what version 1 took
//! (docs/performance.md#chunks-column-by-column; the `measure_chunk_encoding` test in
//! [`codec`] prints the bytes a reading). Version-1
//! chunks are still decoded, and a bucket may hold both; the first write that joins a small
//! old chunk rewrites it in the new encoding. The schema number is bumped so that a schema-5
//! bucketd, which cannot decode version 2, refuses the file at open.
//!
//! # Durability
//! All batches of one [`Store::write`] call are committed in ONE redb write transaction with
//! redb's default durability, [`redb::Durability::Immediate`]: the commit returns only after
//! fsync, so a write reported successful survives a crash or power loss (to the extent the disk
//! honours fsync), and a write interrupted by a crash leaves no trace. Commits also use redb's
//! quick-repair mode (two-phase commit that saves the allocator state), so reopening after a
//! crash does not have to walk the whole file; it adds an fsync per commit, within the noise
//! of a flush (`benches/embedded.rs`). Every commit is followed by an empty one ([`commit`]
//! says why), which leaves the reads after it as fast as before any write.
//! `tests/it/durability/embedded_crash.rs` SIGKILLs a writer mid-flight and checks that every
//! acknowledged write survives, whole.
//!
//! # Series metadata
//! A series' measurement and tags are recorded when its first batch is written and indexed
//! then; later batches under the same key with other tags do not change them (for line
//! protocol the key contains measurement and tags, so they cannot differ).
//!
//! # Threads
//! redb is synchronous. Writes run on the calling thread, which is the flusher's own thread
//! (`Store::writes_block`); every other call runs on Tokio's blocking pool (`spawn_blocking`).
//! A range query's reader thread holds one read transaction (a consistent snapshot) for the
//! life of the stream; redb cannot reuse pages freed after that snapshot until the stream
//! ends, so the HTTP layer's request timeout also bounds how much the file can grow behind a
//! slow client.

mod chunks;
mod codec;
mod expire;
mod read;
mod seal;
mod windows;
mod write;

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use async_trait::async_trait;
use futures::stream::BoxStream;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use crate::model::{Batch, Reading, Seq, TimestampMs, WriterId};
use crate::store::{
    BucketLimits, Compaction, ExpireReport, Need, RangeQuery, Retention, RollupQuery, RollupRow,
    RollupSteps, Run, SealReport, SensorInfo, SensorQuery, StepValues, Store, StoreError,
    WriteReport,
};

/// Version of the file's layout, in `meta`'s `schema_version`: the buckets' schema
/// (`store::SCHEMA_VERSION`, 3) plus what only this store has. 4: `hour_stats` holds the
/// statistics of hours whose readings `--retention` deleted; a schema-3 bucketd would answer
/// rollups over those hours as empty, so it must refuse the file. 5: chunks are keyed by write
/// (`chunks`); a schema-4 bucketd cannot find them. 6: chunks are written column by column
/// (chunk encoding 2), which a schema-5 bucketd cannot decode. 7: a float column may hold its
/// values' changes in runs, which a schema-6 bucketd cannot decode.
pub(crate) const FILE_SCHEMA_VERSION: u64 = 7;

/// Free space on the store's disk below which the seal pass waits. Sealing only rearranges
/// what is stored, but it writes new pages before it frees the old ones, and redb latches a
/// failed write until the file is reopened, reads included: on a nearly full disk (after a
/// restart with a little room freed, say) a seal step must not be what fills it.
const SEAL_MIN_FREE_BYTES: u64 = 64 << 20;

/// Bytes free to unprivileged writers on the filesystem holding `path`; `None` when that
/// cannot be told (sealing then goes ahead).
fn free_bytes(path: &Path) -> Option<u64> {
    let fs = rustix::fs::statvfs(path).ok()?;
    Some(fs.f_bavail.saturating_mul(fs.f_frsize))
}

/// Name of the database file inside the data directory.
pub const DB_FILE_NAME: &str = "bucketd.redb";

/// redb's page cache unless `--store-cache` says otherwise. redb's default is 1 GiB; a flush
/// touches each sensor's pages once per interval, so a small cache leaves memory to the
/// ingest buffers at no cost to ingest (docs/performance.md), while a dashboard that reads
/// many days again gains from one that holds them. Misses are `pread`s from the OS page cache.
pub const DEFAULT_CACHE_BYTES: usize = 8 * 1024 * 1024;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const SERIES: TableDefinition<&str, &[u8]> = TableDefinition::new("series");
const TAG_INDEX: TableDefinition<(&str, &str, &str), ()> = TableDefinition::new("tag_index");
const MEASUREMENT_INDEX: TableDefinition<(&str, &str), ()> =
    TableDefinition::new("measurement_index");
const BUCKETS: TableDefinition<(u64, i64, u32), &[u8]> = TableDefinition::new("buckets");
/// Schema 1's marks: one per (series, hour) for every writer. Read, never written, by schema 2.
const SCHEMA1_MARKS: TableDefinition<(&str, i64), u64> = TableDefinition::new("high_water");
/// Schema 2's marks: one per (series, hour, writer).
const WRITER_MARKS: TableDefinition<(&str, i64, u64), u64> = TableDefinition::new("writer_marks");
/// Schema 4: per (series id, hour) whose readings were deleted by the retention pass, the
/// merged statistics of its buckets (a bucket header's encoding, no chunks).
const HOUR_STATS: TableDefinition<(u64, i64), &[u8]> = TableDefinition::new("hour_stats");

const META_SCHEMA_VERSION: &str = "schema_version";
const META_NEXT_SERIES_ID: &str = "next_series_id";
/// The number the next write transaction gives its chunks (`chunks::ChunkAt::write`).
const META_NEXT_WRITE: &str = "next_write";
/// The raw retention (ms) of the last retention pass, named by `StoreError::Expired`.
const META_RAW_RETENTION_MS: &str = "raw_retention_ms";

/// Why the embedded store failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error("cannot create data directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "database {} is already open in another bucketd process (or another store in this one)",
        path.display()
    )]
    Locked { path: PathBuf },
    #[error(
        "database {} has schema version {found}, newer than the {supported} this bucketd \
         understands; run a newer bucketd or choose another --data-dir",
        path.display()
    )]
    NewerSchema { path: PathBuf, found: u64, supported: u64 },
    #[error("{} is not a bucketd database: {why}", path.display())]
    NotBucketd { path: PathBuf, why: &'static str },
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error("redb: {0}")]
    Db(#[from] redb::Error),
    #[error("blocking task failed: {0}")]
    Task(String),
    #[error("readings before {before} ms are deleted by the retention")]
    Expired { before: TimestampMs, retention_ms: u64 },
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for EmbeddedError {
            fn from(e: $t) -> Self {
                EmbeddedError::Db(e.into())
            }
        }
    )*};
}
from_redb!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::DatabaseError
);

impl From<crate::wire::WireError> for EmbeddedError {
    fn from(e: crate::wire::WireError) -> Self {
        EmbeddedError::Corrupt(e.to_string())
    }
}

impl From<EmbeddedError> for StoreError {
    fn from(e: EmbeddedError) -> Self {
        match e {
            EmbeddedError::Corrupt(_) | EmbeddedError::Db(redb::Error::Corrupted(_)) => {
                StoreError::Corrupt(e.to_string())
            }
            EmbeddedError::Locked { .. } => StoreError::Unavailable(e.to_string()),
            EmbeddedError::Expired { before, retention_ms } => {
                StoreError::Expired { before, retention_ms }
            }
            // redb latches a failed write (ENOSPC included) until the file is reopened. Still
            // retried: acknowledged readings stay in the write-ahead log meanwhile.
            EmbeddedError::Db(redb::Error::PreviousIo) => StoreError::Internal(format!(
                "the embedded store refuses every write since a disk write failed (a full \
                 disk?); restart bucketd once the disk has room: {e}"
            )),
            _ => StoreError::Internal(e.to_string()),
        }
    }
}

/// The database, behind a lock that only compaction takes for writing: redb compacts through
/// `&mut Database`. Every other use holds the read side while it begins and runs its
/// transaction, so a compaction never waits for a query: it is skipped while one runs.
type Shared = Arc<RwLock<Database>>;

fn read(db: &RwLock<Database>) -> RwLockReadGuard<'_, Database> {
    db.read().unwrap_or_else(PoisonError::into_inner)
}

/// Buckets on local disk in one redb file. Cheap to share: clone the `Arc` it lives in.
pub struct EmbeddedStore {
    db: Shared,
    limits: BucketLimits,
    path: PathBuf,
    /// `usize::MAX`, or: the next write's first batch with sequence numbers commits this many
    /// readings and is reported failed (see [`EmbeddedStore::fail_next_batch_after`]).
    fail_after: std::sync::atomic::AtomicUsize,
    /// Where the retention pass resumes (see `expire::step`).
    expire_cursor: Arc<std::sync::Mutex<Option<String>>>,
    /// [`Store::expire_keys`]' cursors, by the range's lower key.
    key_cursors: Arc<std::sync::Mutex<std::collections::HashMap<String, Option<String>>>>,
    seal_cursor: Arc<std::sync::Mutex<Option<chunks::Key>>>,
    /// [`Store::series_generation`]: raised after each commit that created a series (none is
    /// ever removed).
    series_generation: std::sync::atomic::AtomicU64,
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir`. Blocks: after a crash redb recovers the
    /// file here, so call it from `spawn_blocking` when on the async runtime.
    pub fn open(dir: &Path, limits: BucketLimits) -> Result<Self, EmbeddedError> {
        Self::open_with_cache(dir, limits, DEFAULT_CACHE_BYTES)
    }

    /// [`EmbeddedStore::open`] with a page cache of `cache_bytes`.
    pub fn open_with_cache(
        dir: &Path,
        limits: BucketLimits,
        cache_bytes: usize,
    ) -> Result<Self, EmbeddedError> {
        std::fs::create_dir_all(dir)
            .map_err(|source| EmbeddedError::CreateDir { path: dir.to_owned(), source })?;
        let path = dir.join(DB_FILE_NAME);
        let db = redb::Builder::new().set_cache_size(cache_bytes).create(&path).map_err(
            |e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => {
                    EmbeddedError::Locked { path: path.clone() }
                }
                e => e.into(),
            },
        )?;
        init_schema(&db, &path)?;
        Ok(EmbeddedStore {
            db: Arc::new(RwLock::new(db)),
            limits,
            path,
            fail_after: std::sync::atomic::AtomicUsize::new(usize::MAX),
            expire_cursor: Arc::default(),
            key_cursors: Arc::default(),
            seal_cursor: Arc::default(),
            series_generation: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// For tests of the retry path: the next write's first batch with sequence numbers commits
    /// only its first `landed` readings (with their mark) and is reported `Unavailable`, as if
    /// the reply to a partly applied write were lost. A real redb commit is all or nothing; this
    /// is the failure the flusher must survive on stores that cut a batch into statements.
    #[doc(hidden)]
    pub fn fail_next_batch_after(&self, landed: usize) {
        self.fail_after.store(landed, std::sync::atomic::Ordering::SeqCst);
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn db(&self) -> RwLockReadGuard<'_, Database> {
        read(&self.db)
    }

    fn file_len(&self) -> Result<u64, StoreError> {
        std::fs::metadata(&self.path)
            .map(|m| m.len())
            .map_err(|e| StoreError::Internal(format!("{}: {e}", self.path.display())))
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Database) -> Result<T, EmbeddedError> + Send + 'static,
    {
        let db = self.db.clone();
        match tokio::task::spawn_blocking(move || f(&read(&db))).await {
            Ok(r) => r.map_err(StoreError::from),
            Err(e) => Err(StoreError::Internal(format!("embedded store task failed: {e}"))),
        }
    }
}

fn positive_step(query: &RollupQuery) -> Result<(), StoreError> {
    if query.step_ms <= 0 {
        return Err(StoreError::InvalidQuery(format!(
            "rollup step must be positive, got {} ms",
            query.step_ms
        )));
    }
    Ok(())
}

/// Commits `txn`, then an empty durable transaction, so that reads after it do not pay for what
/// redb's commit leaves behind.
///
/// After a durable commit that frees pages, redb commits its free-page bookkeeping in a commit
/// of its own that leaves those pages in its write buffer and marks the buffer as holding
/// committed pages. Until the next durable commit clears the mark, every read that misses the
/// page cache first tries to write buffered pages out, taking each of the buffer's lock stripes
/// in turn, also once none is left: the larger part of a scan over more days than the cache
/// holds (docs/performance.md). The empty commit writes those pages out and clears the mark,
/// and its own bookkeeping has nothing to free. It uses quick repair, so the file's last commit
/// always does, also after a seal or retention pass.
pub(super) fn commit(db: &Database, txn: WriteTransaction) -> Result<(), EmbeddedError> {
    txn.commit()?;
    let settle = db.begin_write().map_err(redb::Error::from).and_then(|mut empty| {
        empty.set_quick_repair(true);
        empty.commit().map_err(redb::Error::from)
    });
    if let Err(e) = settle {
        // What `txn` wrote is durable; a disk that fails shows again at the next write.
        tracing::warn!(error = %e, "the embedded store's empty commit after a write failed");
    }
    Ok(())
}

/// Records the schema version in a new file, refuses a file from a newer bucketd, and creates
/// every table so that read transactions never meet a missing one.
fn init_schema(db: &Database, path: &Path) -> Result<(), EmbeddedError> {
    let txn = db.begin_write()?;
    {
        let has_tables = txn.list_tables()?.next().is_some();
        let mut meta = txn.open_table(META)?;
        let version = meta.get(META_SCHEMA_VERSION)?.map(|g| g.value());
        match version {
            Some(found) if found > FILE_SCHEMA_VERSION => {
                return Err(EmbeddedError::NewerSchema {
                    path: path.to_owned(),
                    found,
                    supported: FILE_SCHEMA_VERSION,
                });
            }
            Some(0) => {
                return Err(EmbeddedError::NotBucketd {
                    path: path.to_owned(),
                    why: "schema version 0",
                });
            }
            Some(found) if found < FILE_SCHEMA_VERSION => {
                // Schema 1 → 2 adds `writer_marks` (opened below) and nothing else; 2 → 3
                // only writes headers of a newer encoding, which old ones still decode as;
                // 3 → 4 adds `hour_stats` (opened below), empty until a retention pass;
                // 4 → 5 adds `chunks_by_write` (opened below) and its write numbers; 5 → 6
                // and 6 → 7 only write chunks of a newer encoding, which old ones still
                // decode beside.
                meta.insert(META_SCHEMA_VERSION, FILE_SCHEMA_VERSION)?;
                if meta.get(META_NEXT_WRITE)?.is_none() {
                    meta.insert(META_NEXT_WRITE, chunks::BY_SERIES + 1)?;
                }
                tracing::info!(path = %path.display(), from = found, to = FILE_SCHEMA_VERSION, "upgraded the embedded store's schema");
            }
            Some(_) => {}
            None if has_tables => {
                return Err(EmbeddedError::NotBucketd {
                    path: path.to_owned(),
                    why: "it has tables but no schema version",
                });
            }
            None => {
                meta.insert(META_SCHEMA_VERSION, FILE_SCHEMA_VERSION)?;
                meta.insert(META_NEXT_SERIES_ID, 1)?;
                meta.insert(META_NEXT_WRITE, chunks::BY_SERIES + 1)?;
            }
        }
        txn.open_table(SERIES)?;
        txn.open_table(TAG_INDEX)?;
        txn.open_table(MEASUREMENT_INDEX)?;
        txn.open_table(BUCKETS)?;
        txn.open_table(chunks::CHUNKS)?;
        txn.open_table(chunks::CHUNKS_BY_SERIES)?;
        txn.open_table(SCHEMA1_MARKS)?;
        txn.open_table(WRITER_MARKS)?;
        txn.open_table(HOUR_STATS)?;
    }
    commit(db, txn)
}

#[async_trait]
impl Store for EmbeddedStore {
    fn name(&self) -> &'static str {
        "embedded"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        if matches!(self.db.try_read(), Err(std::sync::TryLockError::WouldBlock)) {
            // Compacting: the file is in use and well, and `/ready` must not wait for it.
            return Ok(());
        }
        self.blocking(|db| {
            db.begin_read()?;
            // Reads can go on from the cache after a failed disk write (a full disk) has made
            // redb refuse every write; only a write transaction shows it. `try_` does not wait
            // for a flush in progress (which shows it as well).
            match db.try_begin_write() {
                Ok(txn) => txn.abort()?,
                Err(redb::TransactionError::WouldBlock) => {}
                Err(e) => return Err(e.into()),
            }
            Ok(())
        })
        .await
    }

    async fn write(
        &self,
        writer: WriterId,
        batches: &[Batch],
    ) -> Vec<Result<WriteReport, StoreError>> {
        if batches.is_empty() {
            return Vec::new();
        }
        let fail_after = self.fail_after.swap(usize::MAX, std::sync::atomic::Ordering::SeqCst);
        let w = write::Writing { writer, limits: self.limits, fail_after };
        // On the calling thread, the flusher's own (`writes_block`), with the borrowed
        // batches: copying them for `spawn_blocking` was a large part of the server's CPU
        // under a 10,000-sensor load and held each flushed reading twice in memory
        // (docs/performance.md#embedded-writes-on-a-thread-of-their-own).
        let run = std::panic::AssertUnwindSafe(|| write::write_batches(&self.db(), w, batches));
        let written = std::panic::catch_unwind(run).unwrap_or_else(|_| {
            let e = StoreError::Internal("embedded write panicked".into());
            // Whether it committed a series is not known: listings are asked again.
            write::Written { outcomes: vec![Err(e); batches.len()], new_series: true }
        });
        if written.new_series {
            self.series_generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        written.outcomes
    }

    fn series_generation(&self) -> Option<u64> {
        Some(self.series_generation.load(std::sync::atomic::Ordering::SeqCst))
    }

    fn writes_block(&self) -> bool {
        true
    }

    async fn high_water(
        &self,
        writer: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        let keys = keys.to_vec();
        self.blocking(move |db| {
            let txn = db.begin_read()?;
            let table = txn.open_table(WRITER_MARKS)?;
            keys.iter()
                .map(|(key, hour)| {
                    Ok(table.get((key.as_str(), *hour, writer.0))?.map_or(0, |g| g.value()))
                })
                .collect()
        })
        .await
    }

    async fn schema1_high_water(
        &self,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        let keys = keys.to_vec();
        self.blocking(move |db| {
            let txn = db.begin_read()?;
            let table = txn.open_table(SCHEMA1_MARKS)?;
            keys.iter()
                .map(|(key, hour)| Ok(table.get((key.as_str(), *hour))?.map_or(0, |g| g.value())))
                .collect()
        })
        .await
    }

    fn readings(&self, query: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>> {
        read::stream(self.db.clone(), query)
    }

    fn runs(&self, query: RangeQuery) -> BoxStream<'static, Result<Run, StoreError>> {
        read::runs(self.db.clone(), query)
    }

    async fn rollups(&self, query: RollupQuery) -> Result<Vec<RollupRow>, StoreError> {
        positive_step(&query)?;
        self.blocking(move |db| read::rollups(db, &query)).await
    }

    async fn rollup_steps(
        &self,
        query: RollupQuery,
        need: Need,
    ) -> Result<RollupSteps, StoreError> {
        positive_step(&query)?;
        self.blocking(move |db| read::rollup_steps(db, &query, need)).await
    }

    async fn rollup_steps_of(
        &self,
        queries: Vec<RollupQuery>,
        need: Need,
    ) -> Result<Vec<RollupSteps>, StoreError> {
        queries.iter().try_for_each(positive_step)?;
        self.blocking(move |db| read::rollup_steps_of(db, &queries, need)).await
    }

    async fn latest_of(
        &self,
        sensors: Vec<String>,
        range: (TimestampMs, TimestampMs),
    ) -> Result<Vec<Option<Reading>>, StoreError> {
        self.blocking(move |db| read::latest_of(db, &sensors, range)).await
    }

    async fn step_values(
        &self,
        query: RollupQuery,
        most: usize,
    ) -> Result<Option<StepValues>, StoreError> {
        positive_step(&query)?;
        self.blocking(move |db| read::step_values(db, &query, most)).await
    }

    async fn step_values_of(
        &self,
        queries: Vec<RollupQuery>,
        most: usize,
        lists: Vec<Vec<f64>>,
    ) -> Result<Option<StepValues>, StoreError> {
        queries.iter().try_for_each(positive_step)?;
        self.blocking(move |db| read::step_values_of(db, &queries, most, lists)).await
    }

    async fn sensors(&self, query: SensorQuery) -> Result<Vec<SensorInfo>, StoreError> {
        self.blocking(move |db| read::sensors(db, &query)).await
    }

    /// redb grows its file by doubling it while it is under 4 GiB, and then a region at a
    /// time, and shrinks it only when the trailing half is free; pages freed in the middle are
    /// reused but not returned. Compaction moves the used pages down and truncates the file.
    /// It holds the database for its whole run, which is why the flusher asks only when quiet.
    async fn compact(&self) -> Result<Option<Compaction>, StoreError> {
        let Ok(mut db) = self.db.try_write() else { return Ok(Some(Compaction::Busy)) };
        let before = self.file_len()?;
        match db.compact() {
            Ok(_) => {}
            Err(redb::CompactionError::TransactionInProgress) => return Ok(Some(Compaction::Busy)),
            Err(e) => return Err(EmbeddedError::Db(e.into()).into()),
        }
        Ok(Some(Compaction::Done { before, after: self.file_len()? }))
    }

    /// The series record outlives readings deleted by the retention, so it is the answer
    /// (and cheaper than reading one reading).
    async fn sensor_exists(&self, sensor: &str) -> Result<bool, StoreError> {
        let sensor = sensor.to_owned();
        self.blocking(move |db| {
            let txn = db.begin_read()?;
            Ok(txn.open_table(SERIES)?.get(sensor.as_str())?.is_some())
        })
        .await
    }

    async fn expire(
        &self,
        now: TimestampMs,
        policy: Retention,
        budget: usize,
    ) -> Result<ExpireReport, StoreError> {
        let cursor = self.expire_cursor.clone();
        self.blocking(move |db| {
            let mut cursor = cursor.lock().unwrap_or_else(|p| p.into_inner());
            expire::step(db, now, policy, budget, &mut cursor, None)
        })
        .await
    }

    fn can_expire_keys(&self) -> bool {
        true
    }

    async fn expire_keys(
        &self,
        now: TimestampMs,
        raw: std::time::Duration,
        keys: (String, String),
        budget: usize,
    ) -> Result<ExpireReport, StoreError> {
        let cursors = self.key_cursors.clone();
        self.blocking(move |db| {
            let mut cursors = cursors.lock().unwrap_or_else(|p| p.into_inner());
            let cursor = cursors.entry(keys.0.clone()).or_default();
            let policy = Retention { raw: Some(raw), rollups: None };
            expire::step(db, now, policy, budget, cursor, Some(&keys))
        })
        .await
    }

    async fn seal(
        &self,
        now: TimestampMs,
        budget: usize,
    ) -> Result<Option<SealReport>, StoreError> {
        if let Some(free) = free_bytes(&self.path).filter(|&free| free < SEAL_MIN_FREE_BYTES) {
            return Err(StoreError::Unavailable(format!(
                "sealing waits for room: {free} bytes free on the store's disk, under the {} \
                 MiB it leaves to writes",
                SEAL_MIN_FREE_BYTES >> 20
            )));
        }
        let cursor = self.seal_cursor.clone();
        self.blocking(move |db| {
            let mut cursor = cursor.lock().unwrap_or_else(|p| p.into_inner());
            seal::step(db, now, budget, &mut cursor).map(Some)
        })
        .await
    }
}

#[cfg(test)]
mod tests;
