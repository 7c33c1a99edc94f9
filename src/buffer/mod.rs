//! Bounded per-(sensor, hour) in-memory buffers.
//! STUB: the public surface that ingest, query and flush build against; bodies land with the
//! ingest issue.

use std::sync::Arc;
use std::time::Duration;

use crate::model::{Reading, SeriesMeta, TimestampMs};
use crate::store::SensorInfo;

#[derive(Clone, Debug)]
pub struct BufferConfig {
    /// The memory bound: readings held in buffers plus readings being flushed.
    pub max_buffered_readings: usize,
    /// A buffer holding this many readings is due at once (and wakes the flusher).
    pub max_batch_readings: usize,
    /// A buffer whose oldest reading is this old is due.
    pub flush_interval: Duration,
}

/// Full-policy: the caller is told, nothing is dropped. HTTP turns this into 503 with
/// `Retry-After`; TCP waits for room instead (see [`Buffers::push_when_room`]).
#[derive(Debug, Clone, thiserror::Error)]
#[error("buffers are full: {buffered} readings buffered, limit {limit}")]
pub struct BufferFull {
    pub buffered: usize,
    pub limit: usize,
}

pub struct Buffers {
    _private: (),
}

impl Buffers {
    pub fn new(_config: BufferConfig) -> Arc<Buffers> {
        todo!()
    }

    /// Accepts every item or none: none when they would take the buffers past the bound.
    /// Returns how many readings were accepted.
    pub fn push(&self, _items: Vec<(SeriesMeta, Reading)>) -> Result<usize, BufferFull> {
        todo!()
    }

    /// Like `push`, but waits until there is room instead of failing. A batch larger than the
    /// whole bound is accepted once the buffers are empty, so this cannot wait forever.
    pub async fn push_when_room(&self, _items: Vec<(SeriesMeta, Reading)>) -> usize {
        todo!()
    }

    /// Readings currently held (buffered or being flushed).
    pub fn buffered(&self) -> usize {
        todo!()
    }

    /// Readings of `sensor` with `from <= ts < to` not yet confirmed written by the store,
    /// ascending by timestamp, in arrival order for equal timestamps.
    pub fn unflushed(&self, _sensor: &str, _from: TimestampMs, _to: TimestampMs) -> Vec<Reading> {
        todo!()
    }

    /// Sensors with unflushed readings, with the first and last unflushed timestamps.
    pub fn unflushed_sensors(&self) -> Vec<SensorInfo> {
        todo!()
    }
}
