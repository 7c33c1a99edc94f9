//! Bounded per-(sensor, hour) in-memory buffers.
//!
//! # Layout
//! One entry per sensor key in the sensor table ([`table`]) holds the sensor's `Series` (one
//! pointer) and its hour buffers (sorted by hour, the first inline: usually one hour is live
//! per sensor; [`entry::Hours`]). Keying the table by sensor rather than by (sensor, hour)
//! lets the hot path look an entry up by `&str` without allocating a key, and lets
//! [`Buffers::unflushed`] answer with one lookup.
//!
//! A buffer the flusher takes whole stays while empty until a take finds it idle for a flush
//! interval, or finds that its sensor has moved on to a newer hour (then it, and an entry left
//! without hours, are dropped), so a steady sensor keeps its entry instead of removing and
//! re-creating it (and cloning its key) every cycle.
//!
//! # The memory bound
//! `held_bytes` counts, in bytes, what the buffers hold: the rows of every buffer
//! ([`Rows::heap_bytes`]), the rows taken by the flusher whose write has not returned (and
//! those put back after a retriable failure), a fixed share per sensor entry, the hour buffers
//! that outgrew their entry, a share per batch in flight, and the estimate of pushes staged
//! but not yet merged. A push reserves its estimate ([`Packed::estimated_bytes`]) with one
//! compare-exchange before it touches the map;
//! the merge replaces the estimate by what the rows really grew by; the flusher releases a
//! batch's bytes only when the store confirmed it written or rejected it for good. Every change
//! is measured on the same rows it is later released from, so what is added and released
//! matches exactly whatever the store does. `held` counts the same readings (the gauge, and an
//! optional cap in readings).
//!
//! # Visibility of in-flight readings
//! The flusher moves a due buffer's readings into a [`Batch`] of the current cycle and leaves a
//! marker (cycle, index) in the hour buffer, so queries still see those readings until the write
//! returns. The cycle's batches are published through a `OnceLock` when the take scan ends; a
//! query that meets a marker of a cycle still being assembled waits for that (short, await-free)
//! scan after dropping its map guard, so the wait can never deadlock with the scan.
//!
//! # Order
//! Every push is given consecutive write sequence numbers ([`Seq`]) and staged under one
//! mutex (`order`), together with the caller's log step (the write-ahead log's append), so
//! that within each (sensor, hour) buffer sequence numbers increase in arrival order and a
//! reading logged earlier is never flushed after one logged later. The flusher takes at most
//! one batch per (sensor, hour) at a time and puts a failed batch back at the head, so what
//! the store holds of a (sensor, hour) is always every reading up to some sequence number: the
//! high-water mark the stores record and the flusher and WAL replay trust (docs/design/ingest.md,
//! "Exactly once"). Packing and encoding happen before the mutex; under it only a vector
//! append to the stage and a `memcpy` into the log run.
//!
//! # Staging
//! The stage holds numbered pushes not yet in the map. It is merged, one merger at a time and
//! in stage order, when it holds `STAGE_READINGS`, at every take and before every read of the
//! map, so readers never miss a staged reading. A merge touches each sensor's entry once for
//! all its staged readings (docs/design/ingest.md, "Buffers and the flusher", says why).
//!
//! Sequence numbers start at the wall clock in nanoseconds and then count up, so they keep
//! increasing across restarts (the stores' marks of an earlier process stay below them) as
//! long as the clock does not step back further than the previous process ran ahead of it.
//!
//! # Locks
//! Every function that takes a table guard is synchronous, so no guard can live across an
//! `.await` (the guards hold `std` lock guards, which are not `Send` either, so a spawned
//! future that held one would not compile).

mod entry;
mod span;
mod stage;
mod table;

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::metrics::{BUFFERED_BYTES, READINGS_BUFFERED, READINGS_BUFFERED_PEAK};
use crate::model::{Batch, HOUR_MS, Item, Packed, Reading, Rows, Seq, Series, TimestampMs};
use crate::store::{SensorInfo, WriteOverhead};
use entry::{Cycle, InFlight, SensorBuffers, SensorKey};
use span::Span;
#[cfg(test)]
pub(crate) use stage::STAGE_READINGS;
use stage::{Gaps, Seqs, Stage};
use table::Table;

#[derive(Clone, Debug)]
pub struct BufferConfig {
    /// The memory bound, in bytes: what the buffers hold plus what is being flushed (module
    /// doc).
    pub max_buffered_bytes: usize,
    /// An optional second bound, in readings (`usize::MAX`: none).
    pub max_buffered_readings: usize,
    /// A buffer holding this many readings is due at once (and wakes the flusher).
    pub max_batch_readings: usize,
    /// A buffer whose oldest reading is this old is due.
    pub flush_interval: Duration,
}

/// The flusher's tick is kept within these (see [`Buffers::tick`]).
const MIN_TICK: Duration = Duration::from_millis(10);
const MAX_TICK: Duration = Duration::from_millis(250);
/// See [`Buffers::quiet_after`].
const QUIET_AT_MOST: Duration = Duration::from_secs(2);

/// What the budget counts for a sensor's map entry (with its first hour buffer, inline, and
/// its place in the map's index), for the hour buffers once they outgrow the entry
/// ([`SensorBuffers::heap_bytes`]), and for each batch in flight, beside rows.
const ENTRY_BYTES: usize = size_of::<Option<(SensorKey, SensorBuffers)>>() + table::INDEX_BYTES;
const BATCH_BYTES: usize = size_of::<Batch>() + size_of::<InFlight>();

/// See [`Buffers::due_length`].
const WARM_SHARE: usize = 16;
const WARM_BATCH_DIVISOR: usize = 8;

/// Full-policy: the caller is told, nothing is dropped. HTTP turns this into 503 with
/// `Retry-After`; TCP waits for room instead (see [`Buffers::push_when_room`]).
#[derive(Debug, Clone, thiserror::Error)]
#[error("buffers are full: {buffered} {unit} held, limit {limit}")]
pub struct BufferFull {
    pub buffered: usize,
    pub limit: usize,
    /// What `buffered` and `limit` count: `bytes` or `readings`.
    pub unit: &'static str,
}

/// The per-(sensor, hour) buffers and their memory bound.
///
/// Full-policy: [`Buffers::push`] refuses the whole push with [`BufferFull`] (nothing is
/// dropped silently); [`Buffers::push_when_room`] waits for the flusher to release room;
/// [`Buffers::push_or_spill`] leaves the push in the caller's log.
pub struct Buffers {
    config: BufferConfig,
    map: Table<SensorKey, SensorBuffers>,
    /// Bytes buffered or in flight; see the module doc.
    held_bytes: AtomicUsize,
    /// Map entries: the sensors with buffers.
    entries: AtomicUsize,
    /// Readings buffered or in flight.
    held: AtomicUsize,
    /// The most `held` has ever been: kept here, at the one place `held` grows, so that no
    /// overshoot of the bound can slip between two samples of the gauge.
    peak: AtomicUsize,
    peak_publish: Mutex<()>,
    /// Woken (all waiters) whenever the flusher releases readings.
    room: Notify,
    /// Woken (one permit) when a push makes a buffer reach `max_batch_readings`, or finds the
    /// buffers under memory pressure.
    due: Notify,
    /// Whether the flusher's last write met a retriable failure (see `push_or_spill`).
    store_failing: AtomicBool,
    /// The next sequence number and the spill state; held while a push is logged and
    /// staged (module doc).
    order: Mutex<Order>,
    /// Numbered pushes not yet merged into `map`, in sequence order (module doc, "Staging").
    stage: Mutex<Stage>,
    /// Readings in `stage`: read without its lock to decide when to merge.
    staged: AtomicUsize,
    /// Held while one merger moves what it took from `stage` into `map`, so that merges land
    /// in the order they were taken and a (sensor, hour) buffer stays in sequence order.
    merging: Mutex<()>,
}

struct Order {
    next: Seq,
    /// While set, readings from this sequence number on are in the write-ahead log but not in
    /// the buffers, and every push is logged only, so that the refill can bring them in in
    /// sequence order (see [`Buffers::push_or_spill`]).
    spilled_from: Option<Seq>,
}

/// Where [`Buffers::push_or_spill`] put a push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Buffered,
    /// In the log only; the refill inserts it when there is room.
    Spilled,
}

/// Readings taken by the flusher for one `Store::write` call; hand it back to
/// [`Buffers::complete`] with one outcome per batch.
pub(crate) struct Taken {
    cycle: Arc<Cycle>,
    readings: usize,
}

impl Taken {
    pub(crate) fn batches(&self) -> &[Batch] {
        self.cycle.get().expect("a taken cycle is published before it is handed out")
    }

    pub(crate) fn readings(&self) -> usize {
        self.readings
    }
}

/// What became of one batch of a [`Taken`] cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The store confirmed it: release it.
    Written,
    /// A retriable failure after which the store holds the first `landed` readings: release
    /// those, put the rest back ahead of newer readings of its buffer.
    Retry { landed: usize },
    /// Permanently rejected: release it (the caller counts it as dropped).
    Drop,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Released {
    pub written: usize,
    pub dropped: usize,
    pub retried: usize,
}

/// Which buffers [`Buffers::take`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TakeMode {
    /// Buffers at their due length (see [`Buffers::due_length`]); whose oldest reading is
    /// within a tick of `flush_interval`; of an hour older than their sensor's newest; and
    /// every buffer once no push came for `quiet_after`.
    Due,
    /// Every buffer with readings (shutdown drain).
    All,
}

impl Buffers {
    pub fn new(config: BufferConfig) -> Arc<Buffers> {
        let config = BufferConfig {
            max_buffered_bytes: config.max_buffered_bytes.max(1),
            max_buffered_readings: config.max_buffered_readings.max(1),
            max_batch_readings: config.max_batch_readings.max(1),
            ..config
        };
        // Published from the start: a scrape of an idle process (one whose log had nothing to
        // replay, say) reads 0 rather than finding the gauges missing.
        ::metrics::gauge!(READINGS_BUFFERED).set(0.0);
        ::metrics::gauge!(READINGS_BUFFERED_PEAK).set(0.0);
        ::metrics::gauge!(BUFFERED_BYTES).set(0.0);
        Arc::new(Buffers {
            config,
            map: Table::new(span::BuildHasher::default()),
            held_bytes: AtomicUsize::new(0),
            entries: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            peak_publish: Mutex::new(()),
            room: Notify::new(),
            due: Notify::new(),
            store_failing: Default::default(),
            order: Mutex::new(Order { next: 0, spilled_from: None }),
            stage: Mutex::default(),
            staged: AtomicUsize::new(0),
            merging: Mutex::new(()),
        })
    }

    /// Accepts every item or none: none when they would take the buffers past the bound.
    /// Returns how many readings were accepted.
    ///
    /// A sensor's `SeriesMeta` is interned per buffer entry: the first one pushed for a key is
    /// kept, and the tags/measurement of later items with the same key are ignored (identical
    /// by construction for line protocol; JSON clients sending other tags under one `sensor`
    /// get the first ones until the sensor's buffers empty).
    pub fn push(&self, items: Vec<Item>) -> Result<usize, BufferFull> {
        let n = items.len();
        let readings = Packed::new(items);
        self.reserve(n, readings.estimated_bytes(), false)?;
        self.number_and_insert(readings);
        Ok(n)
    }

    /// Like `push`, but waits until there is room instead of failing. A batch larger than the
    /// whole bound is accepted once the buffers are empty, so this cannot wait forever.
    pub async fn push_when_room(&self, items: Vec<Item>) -> usize {
        let n = items.len();
        let readings = Packed::new(items);
        self.wait_and_reserve(n, readings.estimated_bytes()).await;
        self.number_and_insert(readings);
        n
    }

    /// For a caller with a durable log (`--ack=wal`): `log` runs under the order mutex with the
    /// first sequence number of the push (item `i` gets `first + i`); then the readings go into
    /// the buffers if they have room and nothing is spilled, else they stay in the log only, to
    /// be brought in later by [`Buffers::push_recovered`] (the refill), in order. When `log`
    /// fails nothing is kept. Keep `log` short: every push waits for it.
    ///
    /// Full-policy, by the store's state (docs/design/ingest.md, "Overload"):
    /// - the store is writing (its last write had no retriable failure) but slower than ingest:
    ///   refuse at once with [`BufferFull`], nothing logged. Spilling would only move the
    ///   backlog into the log, to be read back at a higher cost than the direct path.
    /// - the store is failing ([`Buffers::set_store_failing`]): spill to the log, which rides
    ///   out the outage; the log's own bound then refuses. Once spilled, every push is logged
    ///   only until the refill has caught up, whatever the store's state.
    pub fn push_or_spill<T, E: From<BufferFull>>(
        &self,
        items: Vec<Item>,
        log: impl FnOnce(Seq) -> Result<T, E>,
    ) -> Result<(T, Placement), E> {
        let n = items.len();
        // Packed outside the mutex, which every push waits for; wasted only if this push
        // spills (then the log alone keeps it).
        let readings = Packed::new(items);
        let bytes = readings.estimated_bytes();
        // One hold of the mutex from the decision to the insert: a push deciding to buffer must
        // not overtake one that spills.
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        let buffered = order.spilled_from.is_none()
            && match self.reserve(n, bytes, false) {
                Ok(()) => true,
                Err(full) if !self.store_failing.load(Ordering::Acquire) => return Err(full.into()),
                Err(_) => false,
            };
        let first = order.next.max(wall_clock_nanos());
        let logged = match log(first) {
            Ok(logged) => logged,
            Err(e) => {
                drop(order);
                if buffered {
                    self.release(n, bytes);
                }
                return Err(e);
            }
        };
        order.next = first + n as Seq;
        if buffered {
            self.stage(readings, bytes, Seqs::From(first), false);
            drop(order);
            self.merge_if_large();
            return Ok((logged, Placement::Buffered));
        }
        order.spilled_from.get_or_insert(first);
        Ok((logged, Placement::Spilled))
    }

    /// Whether a push of up to `n` readings would be refused: they do not fit in the room left
    /// and, where `spill` allows spilling, the store is writing and nothing is spilled (so full
    /// buffers refuse rather than spill). Lets a caller refuse before parsing: under sustained
    /// overload the buffers hover at the bound, and a body parsed only to be refused by the
    /// push cost as much as one accepted.
    pub fn refuses_push_of(&self, n: usize, spill: bool) -> bool {
        let held = self.held.load(Ordering::Acquire);
        // The bytes of the smallest readings there are: a head and one field.
        let least = n.max(1).saturating_mul(2 * size_of::<u64>());
        let fits = held.saturating_add(n.max(1)) <= self.config.max_buffered_readings
            && self.held_bytes.load(Ordering::Acquire).saturating_add(least)
                <= self.config.max_buffered_bytes;
        if fits {
            return false;
        }
        !spill
            || (!self.store_failing.load(Ordering::Acquire)
                && self.order.lock().unwrap_or_else(|e| e.into_inner()).spilled_from.is_none())
    }

    /// Resolves when the flusher next releases readings.
    pub async fn room_freed(&self) {
        self.room.notified().await
    }

    /// Told by the flusher after every write: whether it met a retriable failure. Decides what
    /// full buffers do in [`Buffers::push_or_spill`].
    pub(crate) fn set_store_failing(&self, failing: bool) {
        self.store_failing.store(failing, Ordering::Release);
    }

    /// From now on pushes go to the log only, as after a spill: at start-up, so that the
    /// refill replays what an earlier process left before anything newer enters the buffers.
    pub fn start_spill(&self, from: Seq) {
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        order.next = order.next.max(from);
        order.spilled_from.get_or_insert(from);
    }

    /// Where the spilled readings start, if any are.
    pub fn spilled_from(&self) -> Option<Seq> {
        self.order.lock().unwrap_or_else(|e| e.into_inner()).spilled_from
    }

    /// Ends the spill when `caught_up(next sequence number)` says the refill has brought in
    /// everything logged before it; checked under the order mutex, so no push is logged
    /// in between. Returns whether pushes now go to the buffers again.
    pub fn end_spill_if(&self, caught_up: impl FnOnce(Seq) -> bool) -> bool {
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        if order.spilled_from.is_none() || caught_up(order.next) {
            order.spilled_from = None;
            return true;
        }
        false
    }

    /// Re-inserts readings recovered from the write-ahead log with the sequence numbers they
    /// were logged with (`seqs[i]` for `items[i]`, increasing per series and hour), in order, in
    /// pieces that each fit the room left: the memory bound holds throughout, however much the
    /// log holds. Later pushes are numbered above every recovered number.
    pub async fn push_recovered(&self, mut items: Vec<Item>, mut seqs: Vec<Seq>) {
        assert_eq!(items.len(), seqs.len(), "one sequence number per recovered reading");
        while !items.is_empty() {
            let (n, bytes) = self.wait_and_reserve_some(&items).await;
            let (piece, piece_seqs) = if n == items.len() {
                (std::mem::take(&mut items), std::mem::take(&mut seqs))
            } else {
                (items.drain(..n).collect(), seqs.drain(..n).collect::<Vec<Seq>>())
            };
            let piece = Packed::new(piece);
            let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(&max) = piece_seqs.iter().max() {
                order.next = order.next.max(max + 1);
            }
            self.stage(piece, bytes, Seqs::Each(piece_seqs), true);
            drop(order);
            self.merge_if_large();
        }
    }

    /// Waits for room for at least the first of `items`, then reserves as many of the first
    /// as fit: how many, and their bytes.
    async fn wait_and_reserve_some(&self, items: &[Item]) -> (usize, usize) {
        let costs: Vec<usize> = items.iter().map(|(_, r)| Packed::estimated_bytes_of(r)).collect();
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let room_readings =
                self.config.max_buffered_readings.saturating_sub(self.held.load(Ordering::Acquire));
            let room_bytes = self
                .config
                .max_buffered_bytes
                .saturating_sub(self.held_bytes.load(Ordering::Acquire));
            let (mut k, mut bytes) = (0, 0);
            while k < costs.len().min(room_readings) && bytes + costs[k] <= room_bytes {
                bytes += costs[k];
                k += 1;
            }
            // A reading larger than the whole bound gets in once nothing else is held.
            let alone = k == 0 && self.held_bytes.load(Ordering::Acquire) == 0;
            if alone {
                (k, bytes) = (1, costs[0]);
            }
            if k > 0 && self.reserve(k, bytes, alone).is_ok() {
                return (k, bytes);
            }
            notified.await;
        }
    }

    /// Accounts for `n` readings just reserved, `held` now being `now`.
    fn grew(&self, n: usize, now: usize) {
        ::metrics::gauge!(READINGS_BUFFERED).increment(n as f64);
        let before = self.peak.fetch_max(now, Ordering::AcqRel);
        if now > before {
            // Rare (only while the peak grows); the lock keeps a racing smaller `set` from
            // being the last word.
            let _publish = self.peak_publish.lock().unwrap_or_else(|e| e.into_inner());
            ::metrics::gauge!(READINGS_BUFFERED_PEAK).set(self.peak() as f64);
        }
    }

    /// The most readings ever held at once (see `peak`).
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }

    async fn wait_and_reserve(&self, n: usize, bytes: usize) {
        if n == 0 {
            return;
        }
        loop {
            // Register interest before checking, so a release between the check and the await
            // still wakes us.
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.reserve(n, bytes, true).is_ok() {
                return;
            }
            notified.await;
        }
    }

    /// Numbers reserved `readings` and stages them, under the order mutex.
    fn number_and_insert(&self, readings: Packed) {
        let n = readings.len();
        let bytes = readings.estimated_bytes();
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        // Spills happen only through `push_or_spill`, whose callers never mix in this path.
        debug_assert!(order.spilled_from.is_none(), "an unlogged push while readings are spilled");
        let first = order.next.max(wall_clock_nanos());
        order.next = first + n as Seq;
        self.stage(readings, bytes, Seqs::From(first), false);
        drop(order);
        self.merge_if_large();
    }

    fn release(&self, n: usize, bytes: usize) {
        if n > 0 {
            self.held.fetch_sub(n, Ordering::AcqRel);
            ::metrics::gauge!(READINGS_BUFFERED).decrement(n as f64);
        }
        if bytes > 0 {
            self.held_bytes.fetch_sub(bytes, Ordering::AcqRel);
            ::metrics::gauge!(BUFFERED_BYTES).decrement(bytes as f64);
        }
        if n > 0 || bytes > 0 {
            self.room.notify_waiters();
        }
    }

    /// Counts what the buffers now hold beyond (or short of) what was reserved: `grown` bytes
    /// more, `shrunk` bytes less. Past the bound is allowed here: it is memory already in use.
    fn rebalance(&self, grown: usize, shrunk: usize) {
        if grown > shrunk {
            let d = grown - shrunk;
            self.held_bytes.fetch_add(d, Ordering::AcqRel);
            ::metrics::gauge!(BUFFERED_BYTES).increment(d as f64);
        } else if shrunk > grown {
            self.release(0, shrunk - grown);
        }
    }

    /// Readings currently held (buffered or being flushed).
    pub fn buffered(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Bytes currently held, as the budget counts them (module doc).
    pub fn buffered_bytes(&self) -> usize {
        self.held_bytes.load(Ordering::Acquire)
    }

    /// The memory bound in bytes: the buffers' share of `--memory-budget`.
    pub fn bound_bytes(&self) -> usize {
        self.config.max_buffered_bytes
    }

    /// Sensors with buffers now (merging the stage first, as a query does); a sensor whose
    /// readings were all written keeps its entry until the flusher drops it.
    pub fn sensors(&self) -> usize {
        self.merge();
        self.entries.load(Ordering::Relaxed)
    }

    /// Readings of `sensor` with `from <= ts < to` not yet confirmed written by the store,
    /// ascending by timestamp, in arrival order for equal timestamps. Includes readings whose
    /// write is in flight.
    ///
    /// Merging with the store: call this BEFORE reading the store. Then no reading is missed
    /// (a reading not in this snapshot was either confirmed earlier, so the store has it, or
    /// arrived later). A reading whose write lands between this call and the store read is
    /// seen twice; the window is one store write long.
    pub fn unflushed(&self, sensor: &str, from: TimestampMs, to: TimestampMs) -> Vec<Reading> {
        if from >= to {
            return Vec::new();
        }
        self.merge();
        let in_range = |r: &&Reading| r.ts >= from && r.ts < to;
        let mut in_flight: Vec<(Arc<Cycle>, usize)> = Vec::new();
        let mut buffered: Vec<Reading> = Vec::new();
        {
            let Some(entry) = self.map.get(sensor) else {
                return Vec::new();
            };
            // Past the hours that end at or before `from`; saturating, as `from` may be
            // `i64::MIN`.
            let hours = entry.hours.iter().skip_while(|h| h.hour.saturating_add(HOUR_MS) <= from);
            for hb in hours.take_while(|h| h.hour < to) {
                if let Some(f) = &hb.in_flight
                    && f.span.overlaps(from, to)
                {
                    in_flight.push((f.cycle.clone(), f.index));
                }
                if hb.span.overlaps(from, to) {
                    let rows = 0..hb.readings.len();
                    buffered.extend(
                        rows.filter(|&row| (from..to).contains(&hb.readings.ts(row)))
                            .map(|row| hb.readings.reading(row)),
                    );
                }
            }
        }
        // Guard dropped: `wait` may block for the rest of a take scan, which needs the map.
        let mut out = Vec::with_capacity(buffered.len());
        for (cycle, index) in in_flight {
            out.extend(cycle.wait()[index].readings().filter(|r| in_range(&r)));
        }
        // In-flight readings of an hour arrived before its buffered ones, and equal timestamps
        // share an hour, so a stable sort of this concatenation keeps arrival order for ties.
        out.append(&mut buffered);
        out.sort_by_key(|r| r.ts);
        out
    }

    /// Sensors with unflushed readings, with the first and last unflushed timestamps.
    /// Ordered by key.
    pub fn unflushed_sensors(&self) -> Vec<SensorInfo> {
        self.merge();
        let mut out: Vec<SensorInfo> = Vec::new();
        self.map.for_each(|key, sensor| {
            let mut span = Span::EMPTY;
            for hb in sensor.hours.iter() {
                span.merge(hb.span);
                if let Some(f) = &hb.in_flight {
                    span.merge(f.span);
                }
            }
            let meta = &key.0;
            if !span.is_empty() {
                out.push(SensorInfo {
                    key: meta.key().to_owned(),
                    measurement: meta.measurement().to_owned(),
                    tags: meta.tag_vec(),
                    first: span.first,
                    last: span.last,
                });
            }
        });
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// Waits until a push made a buffer reach the batch size (a stored permit counts).
    pub(crate) async fn due_notified(&self) {
        self.due.notified().await
    }

    /// How often the flusher looks for due buffers: a fortieth of the flush interval, between
    /// 10 ms and 250 ms. A buffer is taken when its oldest reading is within one tick of the
    /// interval, so the interval bounds the wait rather than being its minimum.
    pub(crate) fn tick(&self) -> Duration {
        (self.config.flush_interval / 40).clamp(MIN_TICK, MAX_TICK)
    }

    /// A server that received nothing for this long writes everything it holds: the wait
    /// exists to gather more readings per statement, and none are coming.
    ///
    /// At most a fifth of the interval and at most 2 s: longer than the gap between the
    /// pushes of clients that send every second, so that such a steady load is never taken
    /// for a quiet one. Shorter when the pushes of the last 5-10 s came closer together:
    /// twice the longest gap between them (at least a tick). A pause twice as long as any in
    /// the load so far means the load stopped, and its readings need not wait the full 2 s
    /// to be written (a flat-out load pushes far more often than that).
    fn quiet_after(&self, gaps: &Gaps) -> Duration {
        let at_most = (self.config.flush_interval / 5).clamp(self.tick(), QUIET_AT_MOST);
        match gaps.longest() {
            Some(gap) => (gap * 2).clamp(self.tick(), at_most),
            None => at_most,
        }
    }

    /// How many readings make a buffer due by size. A full bucket's worth, while the buffers
    /// hold little. Once they hold a sixteenth of the bound, an eighth of that: such a buffer
    /// already fills a chunk worth its write, and a fast sensor's waiting for a whole bucket
    /// is memory held for no fewer writes (a flat-out load filled every buffer at once). A slow sensor never gets there within its
    /// flush interval, so the fleet's buffers still wait for their age. Under pressure,
    /// the average sensor's length, if shorter.
    fn due_length(&self) -> usize {
        let batch = self.config.max_batch_readings;
        let bytes = self.held_bytes.load(Ordering::Relaxed);
        let warm = bytes >= self.config.max_buffered_bytes / WARM_SHARE
            || self.held.load(Ordering::Relaxed)
                >= (self.config.max_buffered_readings / WARM_SHARE).max(1);
        let len = if warm { (batch / WARM_BATCH_DIVISOR).max(1) } else { batch };
        if self.under_pressure() {
            let average =
                self.held.load(Ordering::Relaxed) / self.entries.load(Ordering::Relaxed).max(1);
            len.min(average.max(1))
        } else {
            len
        }
    }

    /// Whether the flusher writes the larger buffers before they are due: from half of either
    /// bound on, so that the bound is reached only when the store cannot keep up (the other
    /// half is room for what arrives while the early writes run).
    fn under_pressure(&self) -> bool {
        self.held_bytes.load(Ordering::Relaxed) >= self.config.max_buffered_bytes / 2
            || self.held.load(Ordering::Relaxed) >= (self.config.max_buffered_readings / 2).max(1)
    }

    /// Reserves room for `n` readings of `bytes`, all or nothing. With `oversize`, a push
    /// larger than the whole bound is let in when nothing is held.
    fn reserve(&self, n: usize, bytes: usize, oversize: bool) -> Result<(), BufferFull> {
        if n == 0 {
            return Ok(());
        }
        let empty = self.held.load(Ordering::Acquire) == 0;
        bounded_add(&self.held_bytes, bytes, self.config.max_buffered_bytes, oversize && empty)
            .map_err(|buffered| BufferFull {
                buffered,
                limit: self.config.max_buffered_bytes,
                unit: "bytes",
            })?;
        match bounded_add(&self.held, n, self.config.max_buffered_readings, oversize && empty) {
            Ok(now) => {
                self.grew(n, now);
                ::metrics::gauge!(BUFFERED_BYTES).increment(bytes as f64);
                Ok(())
            }
            Err(buffered) => {
                self.held_bytes.fetch_sub(bytes, Ordering::AcqRel);
                Err(BufferFull {
                    buffered,
                    limit: self.config.max_buffered_readings,
                    unit: "readings",
                })
            }
        }
    }

    /// [`Buffers::take_costed`] for a store that holds nothing beside the rows.
    #[cfg(test)]
    pub(crate) fn take(
        &self,
        mode: TakeMode,
        max_readings: usize,
        max_bytes: usize,
    ) -> Option<Taken> {
        self.take_costed(mode, max_readings, max_bytes, WriteOverhead::default())
    }

    /// Takes the buffers `mode` selects, oldest readings first, at most `max_readings` in all
    /// and at most about `max_bytes`, counting each buffer's rows and what the store's write
    /// will hold beside them (`overhead`). A buffer that would not fit is split (at least one
    /// reading is taken). `None` when nothing is to be taken. Await-free: see the module doc
    /// on why the scan must not be interrupted between the first marker and publishing.
    pub(crate) fn take_costed(
        &self,
        mode: TakeMode,
        max_readings: usize,
        max_bytes: usize,
        overhead: WriteOverhead,
    ) -> Option<Taken> {
        self.merge();
        let now = Instant::now();
        let interval = self.config.flush_interval;
        let old_enough = interval.saturating_sub(self.tick());
        let quiet = {
            let gaps = &self.stage.lock().unwrap_or_else(|e| e.into_inner()).gaps;
            gaps.last()
                .is_none_or(|last| now.saturating_duration_since(last) >= self.quiet_after(gaps))
        };
        let due_length = self.due_length();
        let pressing = self.under_pressure();
        let mode = if quiet { TakeMode::All } else { mode };
        let cycle: Arc<Cycle> = Arc::new(OnceLock::new());
        // Publishes on drop, so even an unwinding scan never leaves a query waiting forever.
        let mut publish = Publish { cycle: &cycle, taken: Vec::new() };
        let mut total = 0usize;
        let mut total_bytes = 0usize;
        // Bytes the scan frees (idle buffers dropped, rows split) and adds (split rows,
        // batches in flight), settled with the count at its end.
        let (mut grown, mut shrunk) = (0usize, 0usize);
        let mut idle: Vec<SensorKey> = Vec::new();
        // Two passes: the buffers due by age (or all of them) first, then those due by size or
        // pressure. Each scan walks the map in the same order, so with one pass the cycle's cap,
        // filled by buffers due by pressure early in that order, kept old buffers late in it
        // waiting without end: their readings pinned the write-ahead log's oldest segments.
        'scan: for aged_pass in [true, false] {
            let mut stopped = false;
            self.map.for_each_mut(|key, sensor| {
                // Buffers taken whole stay for a flush interval, so a sensor that keeps sending
                // keeps its map entry; one that received nothing since is dropped, and so is
                // an hour the sensor has moved on from.
                if aged_pass {
                    let before = sensor.heap_bytes();
                    let newest = sensor.hours.last().map(|hb| hb.hour);
                    sensor.hours.retain(|hb| {
                        let keep = !hb.readings.is_empty()
                            || hb.in_flight.is_some()
                            || (Some(hb.hour) == newest
                                && now.saturating_duration_since(hb.since) < interval);
                        if !keep {
                            shrunk += hb.readings.heap_bytes();
                        }
                        keep
                    });
                    shrunk += before - sensor.heap_bytes();
                    if sensor.hours.is_empty() {
                        idle.push(key.clone());
                        return ControlFlow::Continue(());
                    }
                }
                let hours = sensor.hours.len();
                for (i, hb) in sensor.hours.iter_mut().enumerate() {
                    let len = hb.readings.len();
                    // An hour with a write in flight keeps its newer readings back, so that a
                    // store never sees them before the older ones. (With one flusher this does
                    // not occur: every cycle completes before the next take.)
                    if len == 0 || hb.in_flight.is_some() {
                        continue;
                    }
                    // An hour the sensor has moved on from is due: its readings are all
                    // there, and a fleet crossing into a new hour holds two buffers a sensor
                    // until the old ones are written.
                    let due = if aged_pass {
                        mode == TakeMode::All
                            || i + 1 < hours
                            || now.saturating_duration_since(hb.since) >= old_enough
                    } else {
                        len >= due_length
                    };
                    if !due {
                        continue;
                    }
                    if total >= max_readings || total_bytes >= max_bytes {
                        stopped = true;
                        return ControlFlow::Break(());
                    }
                    let fields = hb.readings.fields();
                    let fit = overhead.fit(
                        max_bytes - total_bytes,
                        hb.readings.heap_bytes() / len,
                        fields,
                    );
                    if fit == 0 && total > 0 {
                        stopped = true;
                        return ControlFlow::Break(());
                    }
                    let k = len.min(max_readings - total).min(fit.max(1));
                    total_bytes += overhead.of(k, fields);
                    let since = hb.since;
                    let (taken, span) = if k == len {
                        hb.since = now;
                        total_bytes += hb.readings.heap_bytes();
                        (
                            std::mem::take(&mut hb.readings),
                            std::mem::replace(&mut hb.span, Span::EMPTY),
                        )
                    } else {
                        shrunk += hb.readings.heap_bytes();
                        let taken = hb.readings.split_front(k);
                        let taken_bytes = taken.heap_bytes();
                        grown += taken_bytes + hb.readings.heap_bytes();
                        total_bytes += taken_bytes;
                        hb.span = Span::of(hb.readings.timestamps());
                        let span = Span::of(taken.timestamps());
                        (taken, span)
                    };
                    grown += BATCH_BYTES;
                    hb.in_flight = Some(Box::new(InFlight {
                        cycle: cycle.clone(),
                        index: publish.taken.len(),
                        span,
                        since,
                    }));
                    publish.taken.push((key.0.clone(), hb.hour, taken));
                    total += k;
                }
                ControlFlow::Continue(())
            });
            if stopped {
                break 'scan;
            }
        }
        let took = !publish.taken.is_empty();
        // After the scan: the shards are no longer locked while the rows become readings.
        drop(publish);
        for key in idle {
            // Re-checked under the shard lock: a push may have refilled it meanwhile.
            if let Some((_, sensor)) = self.map.remove_if(key.0.key(), |s| s.hours.is_empty()) {
                shrunk += ENTRY_BYTES + sensor.heap_bytes();
                self.entries.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.rebalance(grown, shrunk);
        if !took && mode == TakeMode::Due && pressing {
            // Under pressure nothing was as long as the average sensor's: its readings are
            // spread over several hours (every sensor crossed into a new one). Writing nothing
            // would leave the buffers full, refusing every write until the oldest are due by
            // age, so write what there is.
            return self.take_costed(TakeMode::All, max_readings, max_bytes, overhead);
        }
        took.then_some(Taken { cycle, readings: total })
    }

    /// Settles a taken cycle: `outcomes[i]` is what became of `taken.batches()[i]`.
    /// Written, landed and dropped readings leave the bound; retried ones go back to the head
    /// of their buffer. Marker removal and put-back happen under the entry's guard, so a query
    /// sees each reading exactly once meanwhile.
    pub(crate) fn complete(&self, taken: Taken, outcomes: &[Outcome]) -> Released {
        let batches = taken.batches();
        assert_eq!(outcomes.len(), batches.len(), "one outcome per batch");
        let mut released = Released::default();
        let (mut grown, mut shrunk) = (0usize, 0usize);
        for (index, (batch, &outcome)) in batches.iter().zip(outcomes).enumerate() {
            let n = batch.len();
            // The batch's rows and share go whatever became of it; what is put back is counted
            // again as its buffer grows.
            shrunk += batch.rows().heap_bytes() + BATCH_BYTES;
            let landed = match outcome {
                Outcome::Written => n,
                Outcome::Drop => 0,
                Outcome::Retry { landed } => landed.min(n),
            };
            match outcome {
                Outcome::Written => released.written += n,
                Outcome::Drop => released.dropped += n,
                Outcome::Retry { .. } => {
                    released.written += landed;
                    released.retried += n - landed;
                }
            }
            let Some(mut entry) = self.map.get_mut(batch.series.key()) else {
                debug_assert!(false, "in-flight marker kept the entry alive");
                continue;
            };
            let hours = &mut entry.hours;
            let Ok(i) = hours.search(batch.hour) else {
                debug_assert!(false, "in-flight marker kept the hour alive");
                continue;
            };
            let hb = &mut hours[i];
            let Some(f) =
                hb.in_flight.take_if(|f| Arc::ptr_eq(&f.cycle, &taken.cycle) && f.index == index)
            else {
                debug_assert!(false, "marker belongs to this cycle");
                continue;
            };
            if matches!(outcome, Outcome::Retry { .. }) && landed < n {
                // Copied because the cycle's batches stay shared until every marker is
                // gone; this costs one copy per failed attempt, which backoff spaces out.
                hb.since = if hb.readings.is_empty() { f.since } else { hb.since.min(f.since) };
                shrunk += hb.readings.heap_bytes();
                hb.readings.prepend(batch.rows(), landed);
                grown += hb.readings.heap_bytes();
                hb.span.merge(if landed == 0 {
                    f.span
                } else {
                    Span::of(hb.readings.timestamps())
                });
            }
            // An emptied buffer stays until a take finds it idle for a flush interval.
        }
        self.release(released.written + released.dropped, 0);
        self.rebalance(grown, shrunk);
        released
    }
}

struct Publish<'a> {
    cycle: &'a Cycle,
    /// What the scan took: each becomes its batch on publishing.
    taken: Vec<(Series, TimestampMs, Rows)>,
}

impl Drop for Publish<'_> {
    fn drop(&mut self) {
        if !self.taken.is_empty() {
            let batches =
                self.taken.drain(..).map(|(series, hour, rows)| Batch::of_rows(series, hour, rows));
            let _ = self.cycle.set(batches.collect());
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;

/// Adds `n` to `held` if the sum stays within `limit` (or `always`); returns the new sum, or
/// what `held` was when it did not fit.
fn bounded_add(held: &AtomicUsize, n: usize, limit: usize, always: bool) -> Result<usize, usize> {
    let mut cur = held.load(Ordering::Acquire);
    loop {
        let fits = cur.checked_add(n).is_some_and(|t| t <= limit) || (always && cur == 0);
        if !fits {
            return Err(cur);
        }
        match held.compare_exchange_weak(cur, cur + n, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(cur + n),
            Err(actual) => cur = actual,
        }
    }
}

/// Where sequence numbers start: see the module doc.
fn wall_clock_nanos() -> Seq {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
