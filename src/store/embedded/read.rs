//! The read paths: streamed ranges, rollups and sensor lookups.

use std::collections::BTreeMap;
use std::future::Future;
use std::ops::{Bound, ControlFlow};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures::stream::{BoxStream, Stream, StreamExt};
use redb::{AccessGuard, Database, ReadOnlyTable, ReadTransaction, ReadableDatabase, StorageError};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::chunks::{self, ChunkAt, ReadChunks};
use super::codec::{
    self, BucketHeader, ChunkSummary, Decoded, HeaderView, NumberSink, ScanScratch, SeriesRecord,
};
use super::windows::{StepSink, Windows};
use super::{
    BUCKETS, EmbeddedError, HOUR_STATS, MEASUREMENT_INDEX, META, META_RAW_RETENTION_MS, SERIES,
    TAG_INDEX,
};
use crate::model::{HOUR_MS, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Reading, TimestampMs, hour_start};
use crate::store::{
    FieldStats, Need, Order, RangeQuery, RollupQuery, RollupRow, RollupSteps, Run, SensorInfo,
    SensorQuery, StepValues, StoreError,
};

/// The most steps a rollup's first field's list is made for at once; past them it grows.
const EXPECT_STEPS: usize = 1 << 14;

/// Readings per message from a range reader to its stream (counted by chunk summaries).
const SEND_BATCH: usize = 512;
/// Messages a range reader may have in flight. Full-policy: the reader thread waits
/// (`blocking_send`) until the consumer catches up, so a range holds at most about
/// `(STREAM_CHANNEL_MESSAGES + 2) * SEND_BATCH` readings in memory, still encoded, plus the one
/// chunk being emitted and one hour of one series when that hour was written out of order (see
/// [`visit_hour`]).
const STREAM_CHANNEL_MESSAGES: usize = 4;

/// What a range reader sends its stream.
enum Piece {
    /// A chunk of an hour written in timestamp order, overlapping the range, still encoded. The
    /// stream decodes it on the consumer's thread, so that the readings are allocated and freed
    /// by the same thread: mimalloc frees another thread's allocations through a slower atomic
    /// path, and with three allocations per reading that was a noticeable part of a large range
    /// query.
    Chunk { hour: TimestampMs, bytes: Vec<u8> },
    /// Readings of an hour written out of order: in range, sorted, in query order.
    Readings(Vec<Reading>),
}

type Msg = Result<Vec<Piece>, StoreError>;

type Buckets = ReadOnlyTable<(u64, i64, u32), &'static [u8]>;

/// The tables a read reads, opened once a transaction: opening a table looks it up in the
/// transaction's tree of tables, which a statement over many series paid again for every
/// series and table.
struct Tables<'t> {
    txn: &'t ReadTransaction,
    series: ReadOnlyTable<&'static str, &'static [u8]>,
    hour_stats: ReadOnlyTable<(u64, i64), &'static [u8]>,
    buckets: Buckets,
    chunks: ReadChunks,
}

impl<'t> Tables<'t> {
    fn open(txn: &'t ReadTransaction) -> Result<Self, EmbeddedError> {
        Ok(Tables {
            txn,
            series: txn.open_table(SERIES)?,
            hour_stats: txn.open_table(HOUR_STATS)?,
            buckets: txn.open_table(BUCKETS)?,
            chunks: chunks::open_read(txn)?,
        })
    }

    fn series_record(&self, key: &str) -> Result<Option<SeriesRecord>, EmbeddedError> {
        let guard = self.series.get(key)?;
        guard.map(|g| SeriesRecord::decode(g.value())).transpose()
    }

    /// `Err(Expired)` when `[from, to)` of series `id` touches an hour whose readings the
    /// retention pass deleted: an answer without them would look complete.
    fn check_live(&self, id: u64, from: TimestampMs, to: TimestampMs) -> Result<(), EmbeddedError> {
        let from = from.max(MIN_TIMESTAMP_MS);
        let to = to.min(MAX_TIMESTAMP_MS + 1);
        if from >= to {
            return Ok(());
        }
        let stats = &self.hour_stats;
        let Some(entry) = stats.range((id, hour_start(from))..(id, to))?.next_back() else {
            return Ok(());
        };
        let before = entry?.0.value().1 + HOUR_MS;
        let meta = self.txn.open_table(META)?;
        let retention_ms = meta.get(META_RAW_RETENTION_MS)?.map_or(0, |g| g.value());
        Err(EmbeddedError::Expired { before, retention_ms })
    }
}

/// Streams a range from a blocking reader thread that starts on the first poll and stops as soon
/// as the stream is dropped or has returned `limit` readings (the reader's next send fails).
pub(super) fn stream(
    db: super::Shared,
    query: RangeQuery,
) -> BoxStream<'static, Result<Reading, StoreError>> {
    let order = query.order;
    runs(db, query)
        .flat_map(move |run| match run {
            Ok(run) => {
                futures::stream::iter(run.into_readings(order).into_iter().map(Ok)).left_stream()
            }
            Err(e) => futures::stream::once(std::future::ready(Err(e))).right_stream(),
        })
        .boxed()
}

/// [`stream`]'s readings in runs: a chunk's readings stay in their columns.
pub(super) fn runs(
    db: super::Shared,
    query: RangeQuery,
) -> BoxStream<'static, Result<Run, StoreError>> {
    RangeStream::Start(db, query).boxed()
}

enum RangeStream {
    Start(super::Shared, RangeQuery),
    Running(Box<Running>),
    Done,
}

struct Running {
    rx: mpsc::Receiver<Msg>,
    reader: JoinHandle<()>,
    from: TimestampMs,
    to: TimestampMs,
    order: Order,
    /// Readings the query may still return.
    left: usize,
    pieces: std::vec::IntoIter<Piece>,
}

impl Running {
    /// A piece's readings within the range, in the query's order, at most `left` of them.
    fn run_of(&mut self, piece: Piece) -> Result<Run, EmbeddedError> {
        let mut run = run_in(piece, (self.from, self.to), self.order)?;
        run.keep_first(self.left, self.order);
        self.left -= run.len();
        Ok(run)
    }
}

/// A piece's readings within `from..to`, in `order`.
fn run_in(
    piece: Piece,
    (from, to): (TimestampMs, TimestampMs),
    order: Order,
) -> Result<Run, EmbeddedError> {
    Ok(match piece {
        Piece::Chunk { hour, bytes } => match codec::decode_chunk_columns(&bytes, hour)?.1 {
            Decoded::Columns(mut c) => {
                // Only the first and last chunks of a range can hold readings outside it.
                c.keep(from, to);
                Run::Columns(c)
            }
            Decoded::Readings(mut readings) => {
                readings.retain(|r| r.ts >= from && r.ts < to);
                if order == Order::Desc {
                    readings.reverse();
                }
                Run::Readings(readings)
            }
        },
        Piece::Readings(readings) => Run::Readings(readings),
    })
}

impl Stream for RangeStream {
    type Item = Result<Run, StoreError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let r = match this {
                RangeStream::Done => return Poll::Ready(None),
                RangeStream::Start(db, query) => {
                    let left = query.limit.unwrap_or(usize::MAX);
                    if left == 0 {
                        *this = RangeStream::Done;
                        continue;
                    }
                    let (db, query) = (db.clone(), query.clone());
                    let (tx, rx) = mpsc::channel(STREAM_CHANNEL_MESSAGES);
                    let (from, to, order) = (query.from, query.to, query.order);
                    let reader = tokio::task::spawn_blocking(move || {
                        produce(&super::read(&db), &query, &tx);
                        // The pool thread may now wait a long while: what this range freed
                        // goes back first.
                        crate::alloc::release_freed();
                    });
                    *this = RangeStream::Running(Box::new(Running {
                        rx,
                        reader,
                        from,
                        to,
                        order,
                        left,
                        pieces: Vec::new().into_iter(),
                    }));
                    continue;
                }
                RangeStream::Running(r) => r,
            };
            if r.left == 0 {
                // Dropping the receiver stops the reader at its next send.
                *this = RangeStream::Done;
                continue;
            }
            if let Some(piece) = r.pieces.next() {
                match r.run_of(piece) {
                    Ok(run) if run.is_empty() => continue,
                    Ok(run) => return Poll::Ready(Some(Ok(run))),
                    Err(e) => {
                        *this = RangeStream::Done;
                        return Poll::Ready(Some(Err(e.into())));
                    }
                }
            }
            match ready!(r.rx.poll_recv(cx)) {
                Some(Ok(pieces)) => r.pieces = pieces.into_iter(),
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                // The reader has returned or panicked; a panic must not look like the end of data.
                None => {
                    let joined = ready!(Pin::new(&mut r.reader).poll(cx));
                    *this = RangeStream::Done;
                    if let Err(e) = joined {
                        let e = StoreError::Internal(format!("range reader failed: {e}"));
                        return Poll::Ready(Some(Err(e)));
                    }
                }
            }
        }
    }
}

/// The reader's side: batches the pieces of a range scan into messages.
struct PieceSender<'a> {
    tx: &'a mpsc::Sender<Msg>,
    from: TimestampMs,
    to: TimestampMs,
    limit: usize,
    batch: Vec<Piece>,
    /// Readings in `batch`, counting whole chunks.
    batched: usize,
    /// Readings sent or batched that are certainly in range: once that reaches the limit, the
    /// stream has all it will return. Chunks at the range's edges count for nothing.
    certain: usize,
    receiver_gone: bool,
}

impl PieceSender<'_> {
    fn added(&mut self, readings: usize, certain: usize) -> ControlFlow<()> {
        self.batched += readings;
        self.certain += certain;
        let done = self.certain >= self.limit;
        if self.batched >= SEND_BATCH || done {
            self.batched = 0;
            if self.tx.blocking_send(Ok(std::mem::take(&mut self.batch))).is_err() {
                self.receiver_gone = true;
                return ControlFlow::Break(());
            }
        }
        if done { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    }
}

impl Visit for PieceSender<'_> {
    fn chunk(
        &mut self,
        hour: TimestampMs,
        bytes: &[u8],
        summary: ChunkSummary,
    ) -> Result<ControlFlow<()>, EmbeddedError> {
        let count = summary.count as usize;
        let whole = summary.first >= self.from && summary.last < self.to;
        self.batch.push(Piece::Chunk { hour, bytes: bytes.to_vec() });
        Ok(self.added(count, if whole { count } else { 0 }))
    }

    fn reading(&mut self, r: Reading) -> ControlFlow<()> {
        match self.batch.last_mut() {
            Some(Piece::Readings(readings)) => readings.push(r),
            _ => self.batch.push(Piece::Readings(vec![r])),
        }
        self.added(1, 1)
    }
}

fn produce(db: &Database, query: &RangeQuery, tx: &mpsc::Sender<Msg>) {
    let mut sender = PieceSender {
        tx,
        from: query.from,
        to: query.to,
        limit: query.limit.unwrap_or(usize::MAX),
        batch: Vec::new(),
        batched: 0,
        certain: 0,
        receiver_gone: false,
    };
    let result = (|| {
        if sender.limit == 0 {
            return Ok(());
        }
        let txn = db.begin_read()?;
        let tables = Tables::open(&txn)?;
        let Some(series) = tables.series_record(&query.sensor)? else {
            return Ok(());
        };
        tables.check_live(series.id, query.from, query.to)?;
        // Whether the scan stopped early makes no difference here.
        let _: ControlFlow<()> = visit_range(
            &tables.buckets,
            &tables.chunks,
            series.id,
            query.from,
            query.to,
            query.order,
            &mut sender,
        )?;
        Ok::<(), EmbeddedError>(())
    })();
    if sender.receiver_gone {
        return;
    }
    // Whatever was read before an error is delivered first, then the error ends the stream.
    if !sender.batch.is_empty() && tx.blocking_send(Ok(sender.batch)).is_err() {
        return;
    }
    if let Err(e) = result {
        let _ = tx.blocking_send(Err(e.into()));
    }
}

/// [`Store::latest_of`](crate::store::Store::latest_of) in one read transaction.
pub(super) fn latest_of(
    db: &Database,
    sensors: &[String],
    (from, to): (TimestampMs, TimestampMs),
) -> Result<Vec<Option<Reading>>, EmbeddedError> {
    let txn = db.begin_read()?;
    let t = Tables::open(&txn)?;
    let mut out = Vec::with_capacity(sensors.len());
    for sensor in sensors {
        let Some(series) = t.series_record(sensor)? else {
            out.push(None);
            continue;
        };
        t.check_live(series.id, from, to)?;
        let mut latest = Latest { range: (from, to), found: None };
        let _: ControlFlow<()> =
            visit_range(&t.buckets, &t.chunks, series.id, from, to, Order::Desc, &mut latest)?;
        out.push(latest.found);
    }
    Ok(out)
}

/// Stops a descending scan at its first reading in range, as a stream of it with a limit of
/// one would.
struct Latest {
    range: (TimestampMs, TimestampMs),
    found: Option<Reading>,
}

impl Visit for Latest {
    fn chunk(
        &mut self,
        hour: TimestampMs,
        bytes: &[u8],
        _: ChunkSummary,
    ) -> Result<ControlFlow<()>, EmbeddedError> {
        let piece = Piece::Chunk { hour, bytes: bytes.to_vec() };
        let mut run = run_in(piece, self.range, Order::Desc)?;
        run.keep_first(1, Order::Desc);
        self.found = run.into_readings(Order::Desc).into_iter().next();
        Ok(if self.found.is_some() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    }

    fn reading(&mut self, r: Reading) -> ControlFlow<()> {
        self.found = Some(r);
        ControlFlow::Break(())
    }
}

/// What a range scan hands over: whole chunks of the hours written in timestamp order, single
/// readings (already in range and sorted) of the others; both in the scan's order.
trait Visit {
    /// A chunk overlapping the range; its readings are ascending and may extend past the range.
    fn chunk(
        &mut self,
        hour: TimestampMs,
        bytes: &[u8],
        summary: ChunkSummary,
    ) -> Result<ControlFlow<()>, EmbeddedError>;

    fn reading(&mut self, r: Reading) -> ControlFlow<()>;
}

/// Hands `v` the readings of series `series_id` in `from <= ts < to`, in `order`, until it
/// breaks. Equal timestamps come in the order written (reversed for `Desc`).
fn visit_range(
    buckets: &Buckets,
    chunks: &ReadChunks,
    series_id: u64,
    from: TimestampMs,
    to: TimestampMs,
    order: Order,
    v: &mut dyn Visit,
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
    let mut ascending = chunks::Ascending::new(chunks, series_id, hi.1);
    let mut chunks = match order {
        Order::Asc => HourChunks::Ascending(&mut ascending),
        Order::Desc => HourChunks::LookedUp(chunks),
    };
    loop {
        let next = match order {
            Order::Asc => range.next(),
            Order::Desc => range.next_back(),
        };
        let Some(entry) = next.transpose()? else { break };
        let (_, hour, seq) = entry.0.value();
        if hour != group_hour && !group.is_empty() {
            let flow =
                visit_hour(&mut chunks, series_id, group_hour, &mut group, from, to, order, v)?;
            if flow.is_break() {
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
    visit_hour(&mut chunks, series_id, group_hour, &mut group, from, to, order, v)
}

/// Where a range's chunks come from: read forward, a series' sealed chunks from one range of
/// the table ([`chunks::Ascending`]); backward, each looked up.
enum HourChunks<'a, 'c> {
    Ascending(&'a mut chunks::Ascending<'c>),
    LookedUp(&'c ReadChunks),
}

impl HourChunks<'_, '_> {
    fn get(&mut self, at: ChunkAt) -> Result<Option<AccessGuard<'_, &'static [u8]>>, StorageError> {
        match self {
            HourChunks::Ascending(ascending) => ascending.get(at),
            HourChunks::LookedUp(chunks) => chunks.get(at),
        }
    }

    /// Buckets were passed over: see [`chunks::Ascending::jump`].
    fn jump(&mut self) {
        if let HourChunks::Ascending(ascending) = self {
            ascending.jump();
        }
    }
}

/// Emits one hour of one series. When every bucket of the hour was written in timestamp order
/// (the common case) its chunks are handed over one at a time; otherwise the hour's readings in
/// range are collected and stably sorted, which bounds memory by one hour of one series.
#[allow(clippy::too_many_arguments)]
fn visit_hour(
    chunks: &mut HourChunks<'_, '_>,
    series_id: u64,
    hour: TimestampMs,
    group: &mut Vec<(u32, BucketHeader)>,
    from: TimestampMs,
    to: TimestampMs,
    order: Order,
    v: &mut dyn Visit,
) -> Result<ControlFlow<()>, EmbeddedError> {
    group.sort_by_key(|(seq, _)| *seq);
    let held = group.len();
    group.retain(|(_, h)| h.count > 0 && h.max_ts >= from && h.min_ts < to);
    if group.len() < held {
        chunks.jump();
    }
    let in_order = group.iter().all(|(_, h)| h.sorted)
        && group.windows(2).all(|w| w[1].1.min_ts >= w[0].1.max_ts);
    if in_order {
        let places =
            group.iter().flat_map(|(seq, h)| chunks::of_bucket(series_id, hour, *seq, &h.writes));
        let places: Vec<_> = match order {
            Order::Asc => places.collect(),
            Order::Desc => places.rev().collect(),
        };
        for at in places {
            let Some(value) = chunks.get(at)? else { continue };
            let bytes = value.value();
            let summary = codec::chunk_summary(bytes, hour)?;
            if summary.last < from || summary.first >= to {
                continue;
            }
            let flow = v.chunk(hour, bytes, summary)?;
            if flow.is_break() {
                return Ok(flow);
            }
        }
        return Ok(ControlFlow::Continue(()));
    }

    let in_range = |r: &Reading| r.ts >= from && r.ts < to;
    let mut decoded = Vec::new();
    let mut all = Vec::new();
    for (seq, header) in group.iter() {
        for at in chunks::of_bucket(series_id, hour, *seq, &header.writes) {
            let Some(value) = chunks.get(at)? else { continue };
            decoded.clear();
            codec::decode_chunk(value.value(), hour, &mut decoded)?;
            all.extend(decoded.drain(..).filter(in_range));
        }
    }
    // Stable, so equal timestamps keep bucket, chunk and in-chunk order: the order written.
    all.sort_by_key(|r| r.ts);
    Ok(match order {
        Order::Asc => emit(all.into_iter(), &mut |r| v.reading(r)),
        Order::Desc => emit(all.into_iter().rev(), &mut |r| v.reading(r)),
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
    let t = Tables::open(&txn)?;
    let Some(series) = t.series_record(&q.sensor)? else {
        return Ok(Vec::new());
    };
    if from_stats(q) {
        return hour_rows(&t, series.id, q);
    }
    t.check_live(series.id, q.from, q.to)?;
    Ok(fold_steps(&t, series.id, q, Need::ALL)?.into_rows())
}

/// [`rollups`] field by field, keeping what `need` names.
pub(super) fn rollup_steps(
    db: &Database,
    q: &RollupQuery,
    need: Need,
) -> Result<RollupSteps, EmbeddedError> {
    rollup_steps_in(&Tables::open(&db.begin_read()?)?, q, need)
}

/// [`Store::rollup_steps_of`](crate::store::Store::rollup_steps_of) in one read transaction.
pub(super) fn rollup_steps_of(
    db: &Database,
    queries: &[RollupQuery],
    need: Need,
) -> Result<Vec<RollupSteps>, EmbeddedError> {
    let txn = db.begin_read()?;
    let t = Tables::open(&txn)?;
    queries.iter().map(|q| rollup_steps_in(&t, q, need)).collect()
}

fn rollup_steps_in(
    t: &Tables<'_>,
    q: &RollupQuery,
    need: Need,
) -> Result<RollupSteps, EmbeddedError> {
    let Some(series) = t.series_record(&q.sensor)? else {
        return Ok(RollupSteps::default());
    };
    if from_stats(q) {
        return Ok(RollupSteps::of_rows(hour_rows(t, series.id, q)?));
    }
    t.check_live(series.id, q.from, q.to)?;
    fold_steps(t, series.id, q, need)
}

/// Whole-hour steps over whole hours: the buckets' and the kept hours' statistics answer.
fn from_stats(q: &RollupQuery) -> bool {
    q.step_ms % HOUR_MS == 0 && q.from % HOUR_MS == 0 && q.to % HOUR_MS == 0
}

fn hour_rows(
    t: &Tables<'_>,
    series_id: u64,
    q: &RollupQuery,
) -> Result<Vec<RollupRow>, EmbeddedError> {
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

    if q.from < q.to {
        // Hours whose readings were deleted answer from the statistics they left.
        for entry in t.hour_stats.range((series_id, q.from)..(series_id, q.to))? {
            let (key, value) = entry?;
            let start = step_of(key.value().1);
            for (name, s) in &BucketHeader::decode(value.value())?.stats {
                if wanted(name) {
                    add(start, name, s);
                }
            }
        }
        for entry in t.buckets.range((series_id, q.from, 0)..(series_id, q.to, 0))? {
            let (key, value) = entry?;
            let start = step_of(key.value().1);
            for (name, s) in &BucketHeader::decode(value.value())?.stats {
                if wanted(name) {
                    add(start, name, s);
                }
            }
        }
    }
    // A step whose readings carry none of the wanted numeric fields has nothing to report.
    Ok(rows
        .into_iter()
        .filter(|(_, fields)| !fields.is_empty())
        .map(|(start, fields)| RollupRow { start, fields })
        .collect())
}

/// A rollup's steps folded from every bucket in range, in any order (statistics merge in any
/// order): a bucket within one step from its header, the others from their chunks' numbers.
fn fold_steps(
    t: &Tables<'_>,
    series_id: u64,
    q: &RollupQuery,
    need: Need,
) -> Result<RollupSteps, EmbeddedError> {
    let (from, to) = (q.from.max(MIN_TIMESTAMP_MS), q.to.min(MAX_TIMESTAMP_MS + 1));
    let mut windows =
        Windows::new(q.step_ms, q.fields.as_deref(), need).expecting(from, to, EXPECT_STEPS);
    let whole = |w: &mut Windows<'_>, header: &HeaderView<'_>| w.whole_bucket(header, from, to);
    // Never told to stop, it reads the whole range.
    let _: ControlFlow<()> = scan_chunks(t, series_id, (from, to), &mut windows, whole, |_| false)?;
    Ok(windows.finish())
}

/// [`Store::step_values`](crate::store::Store::step_values) of the series' chunks; `None` as
/// soon as they hold more than `most`.
pub(super) fn step_values(
    db: &Database,
    q: &RollupQuery,
    most: usize,
) -> Result<Option<StepValues>, EmbeddedError> {
    step_values_in(&Tables::open(&db.begin_read()?)?, q, most)
}

/// The most room [`step_values_of`] makes ahead in its steps, in values.
const MOST_SPARE: usize = 1 << 22;

/// [`Store::step_values_of`](crate::store::Store::step_values_of) in one read transaction,
/// every series into the same steps.
pub(super) fn step_values_of(
    db: &Database,
    queries: &[RollupQuery],
    most: usize,
    lists: Vec<Vec<f64>>,
) -> Result<Option<StepValues>, EmbeddedError> {
    let Some(first) = queries.first() else { return Ok(Some(StepValues::default())) };
    let txn = db.begin_read()?;
    let t = Tables::open(&txn)?;
    // Room is made ahead for no more than the values a call may hold, and for no more than
    // a bounded number when that is unbounded.
    let spare = most.min(MOST_SPARE);
    let mut sink = StepSink::new(first.step_ms, first.fields.as_deref())
        .shared(queries.len(), spare)
        .reusing(lists);
    for q in queries {
        debug_assert!(q.step_ms == first.step_ms && q.fields == first.fields);
        if !step_values_into(&t, q, most, &mut sink)? {
            return Ok(None);
        }
    }
    Ok(Some(sink.finish()))
}

fn step_values_in(
    t: &Tables<'_>,
    q: &RollupQuery,
    most: usize,
) -> Result<Option<StepValues>, EmbeddedError> {
    let mut sink = StepSink::new(q.step_ms, q.fields.as_deref());
    Ok(step_values_into(t, q, most, &mut sink)?.then(|| sink.finish()))
}

/// Adds `q`'s step values to `sink`; `false` as soon as it holds more than `most`.
fn step_values_into(
    t: &Tables<'_>,
    q: &RollupQuery,
    most: usize,
    sink: &mut StepSink<'_>,
) -> Result<bool, EmbeddedError> {
    let Some(series) = t.series_record(&q.sensor)? else { return Ok(true) };
    t.check_live(series.id, q.from, q.to)?;
    let (from, to) = (q.from.max(MIN_TIMESTAMP_MS), q.to.min(MAX_TIMESTAMP_MS + 1));
    let over = |sink: &StepSink<'_>| sink.held > most;
    let flow = scan_chunks(t, series.id, (from, to), sink, |_, _| Ok(false), over)?;
    Ok(flow.is_continue())
}

/// Hands `sink` the numbers in `from..to` of every bucket of series `series_id` there, chunk by
/// chunk, but those `whole` takes from their header; breaks as soon as `enough` says so after a
/// chunk.
fn scan_chunks<S: NumberSink>(
    t: &Tables<'_>,
    series_id: u64,
    (from, to): (TimestampMs, TimestampMs),
    sink: &mut S,
    mut whole: impl FnMut(&mut S, &HeaderView<'_>) -> Result<bool, EmbeddedError>,
    enough: impl Fn(&S) -> bool,
) -> Result<ControlFlow<()>, EmbeddedError> {
    if from >= to {
        return Ok(ControlFlow::Continue(()));
    }
    let mut scratch = ScanScratch::default();
    let lo = (series_id, hour_start(from), 0u32);
    let hi = (series_id, hour_start(to - 1), u32::MAX);
    let mut ascending = chunks::Ascending::new(&t.chunks, series_id, hi.1);
    for entry in t.buckets.range(lo..=hi)? {
        let (key, value) = entry?;
        let (_, hour, seq) = key.value();
        let header = HeaderView::decode(value.value())?;
        if header.count == 0 || header.max_ts < from || header.min_ts >= to {
            ascending.jump();
            continue;
        }
        if whole(sink, &header)? {
            ascending.jump();
            continue;
        }
        for at in chunks::of_bucket(series_id, hour, seq, &header.writes) {
            let Some(value) = ascending.get(at)? else { continue };
            codec::scan_numbers(value.value(), hour, from, to, &mut scratch, sink)?;
            if enough(sink) {
                return Ok(ControlFlow::Break(()));
            }
        }
    }
    Ok(ControlFlow::Continue(()))
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
        let matches = q.database.holds(key)
            && q.measurement.as_ref().is_none_or(|m| *m == record.measurement)
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
        // A database other than the default holds one range of keys: only that is read.
        let range = q.database.key_range();
        let lower = match (after, &range) {
            (Some(a), Some((from, _))) if a < from.as_str() => Bound::Included(from.as_str()),
            (Some(a), _) => Bound::Excluded(a),
            (None, Some((from, _))) => Bound::Included(from.as_str()),
            (None, None) => Bound::Unbounded,
        };
        let upper = range.as_ref().map_or(Bound::Unbounded, |(_, to)| Bound::Excluded(to.as_str()));
        for entry in series.range::<&str>((lower, upper))? {
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
    Tables::open(txn).unwrap().series_record(key).unwrap().expect("series exists").id
}
