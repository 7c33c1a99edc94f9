//! A sensor's entry in the buffer table: its key and its hour buffers.

use std::sync::{Arc, OnceLock};

use tokio::time::Instant;

use super::span::Span;
use crate::model::{Batch, Rows, Series, TimestampMs};

/// What the budget counts for each hour buffer once a sensor's hour buffers outgrow its entry.
pub(super) const HOUR_BYTES: usize = size_of::<HourBuffer>();

/// A table key that is the sensor's `Series`, looked up by its key string (`Borrow<str>`): a
/// sensor's key string is kept once, not copied into the table per entry.
///
/// The key is the first `Series` pushed for this key since the entry was created. For line
/// protocol the key determines the tags, so later readings carry identical metadata; for JSON
/// a client could send other tags under the same `sensor` and those are ignored until the
/// sensor's buffers empty and the entry is recreated.
#[derive(Clone)]
pub(super) struct SensorKey(pub(super) Series);

impl std::borrow::Borrow<str> for SensorKey {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

/// A sensor's buffers; its `SeriesMeta` is the map key (`SensorKey`).
pub(super) struct SensorBuffers {
    /// Sorted by hour, no duplicates.
    /// The first inline: the flusher's scan then reads a sensor's current hour from the
    /// table's slab, in memory order, instead of chasing one allocation per sensor.
    pub(super) hours: smallvec::SmallVec<[HourBuffer; 1]>,
}

impl SensorBuffers {
    /// The hour buffers' own allocation: none while the one buffer is inline in the entry.
    pub(super) fn heap_bytes(&self) -> usize {
        if self.hours.spilled() { self.hours.capacity() * HOUR_BYTES } else { 0 }
    }
}

pub(super) struct HourBuffer {
    pub(super) hour: TimestampMs,
    /// Arrival order, with one increasing sequence number per reading.
    pub(super) readings: Rows,
    /// Of `readings`; `Span::EMPTY` when there are none.
    pub(super) span: Span,
    /// When the oldest of `readings` arrived; while `readings` is empty, when it was emptied
    /// (taken whole), which is what decides when an idle buffer is dropped.
    pub(super) since: Instant,
    /// Readings taken by the flusher whose write has not returned; older than `readings`.
    /// Boxed: a buffer is idle most of the time, and every sensor's first hour buffer lives
    /// in the map's table, so its size is paid per sensor (200,000 in a fleet).
    pub(super) in_flight: Option<Box<InFlight>>,
}

pub(super) struct InFlight {
    pub(super) cycle: Arc<Cycle>,
    pub(super) index: usize,
    pub(super) span: Span,
    pub(super) since: Instant,
}

/// The batches of one flush cycle, set once the take scan has finished.
pub(super) type Cycle = OnceLock<Vec<Batch>>;
