//! The readings accepted but not yet written to the store, as the query side asks for them.

use crate::buffer::Buffers;
use crate::model::{MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Reading, TimestampMs};
use crate::store::SensorInfo;

/// Where the query side finds readings accepted but not yet written to the store. A trait so
/// tests can stand in for [`Buffers`].
pub trait Unflushed: Send + Sync + 'static {
    /// Readings of `sensor` with `from <= ts < to`, ascending by timestamp, arrival order for
    /// equal timestamps.
    fn unflushed(&self, sensor: &str, from: TimestampMs, to: TimestampMs) -> Vec<Reading>;

    /// Sensors with unflushed readings, with their first and last unflushed timestamps.
    fn unflushed_sensors(&self) -> Vec<SensorInfo>;

    /// [`Unflushed::unflushed_sensors`] but those `known` holds: a statement that listed the
    /// store's series asks only for the ones not stored yet.
    fn unflushed_sensors_except(&self, known: &dyn Fn(&str) -> bool) -> Vec<SensorInfo> {
        let mut all = self.unflushed_sensors();
        all.retain(|s| !known(&s.key));
        all
    }

    /// Whether `sensor` has any unflushed reading. Only asked when a query found nothing.
    fn has_unflushed(&self, sensor: &str) -> bool {
        !self.unflushed(sensor, MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS + 1).is_empty()
    }
}

impl Unflushed for Buffers {
    fn unflushed(&self, sensor: &str, from: TimestampMs, to: TimestampMs) -> Vec<Reading> {
        Buffers::unflushed(self, sensor, from, to)
    }

    fn unflushed_sensors(&self) -> Vec<SensorInfo> {
        Buffers::unflushed_sensors(self)
    }

    fn unflushed_sensors_except(&self, known: &dyn Fn(&str) -> bool) -> Vec<SensorInfo> {
        Buffers::unflushed_sensors_except(self, known)
    }
}
