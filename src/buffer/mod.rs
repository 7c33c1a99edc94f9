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
//! `held_bytes` (kept by `budget`) counts, in bytes, what the buffers hold: the rows of every
//! buffer ([`Rows::heap_bytes`](crate::model::Rows::heap_bytes)), the rows taken by the flusher
//! whose write has not returned (and
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
//! The flusher moves a due buffer's readings into a [`Batch`](crate::model::Batch) of the current cycle and leaves a
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

mod budget;
mod entry;
mod read;
mod span;
mod spill;
mod stage;
mod table;
mod take;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::metrics::{BUFFERED_BYTES, READINGS_BUFFERED, READINGS_BUFFERED_PEAK};
use crate::model::{Item, Packed, Seq};
use entry::{SensorBuffers, SensorKey};
#[cfg(test)]
pub(crate) use stage::STAGE_READINGS;
use stage::{Seqs, Stage};
use table::Table;
pub(crate) use take::{Outcome, TakeMode, Taken};

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

/// What the budget counts for a sensor's map entry (with its first hour buffer, inline, and
/// its place in the map's index), for the hour buffers once they outgrow the entry
/// ([`SensorBuffers::heap_bytes`]), and for each batch in flight, beside rows.
const ENTRY_BYTES: usize = size_of::<Option<(SensorKey, SensorBuffers)>>() + table::INDEX_BYTES;

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

    /// Resolves when the flusher next releases readings.
    pub async fn room_freed(&self) {
        self.room.notified().await
    }

    /// The most readings ever held at once (see `peak`).
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Acquire)
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
}

#[cfg(test)]
pub(crate) mod tests;

/// Where sequence numbers start: see the module doc.
fn wall_clock_nanos() -> Seq {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
