//! What queries read of the buffers: a sensor's unflushed readings, and the sensors only the
//! buffers know yet.

use std::sync::Arc;

use super::Buffers;
use super::entry::Cycle;
use super::span::Span;
use crate::model::{HOUR_MS, Reading, TimestampMs, fold_points};
use crate::store::SensorInfo;

impl Buffers {
    /// Readings of `sensor` with `from <= ts < to` not yet confirmed written by the store,
    /// ascending by timestamp, one per timestamp: readings of one point are folded in arrival
    /// order (`Reading::overlay`), as the store folds them. Includes readings whose write is in
    /// flight.
    ///
    /// Merging with the store: call this BEFORE reading the store. Then no reading is missed
    /// (a reading not in this snapshot was either confirmed earlier, so the store has it, or
    /// arrived later). A reading whose write lands between this call and the store read is
    /// read from both, and the merge makes one point of the two.
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
        fold_points(&mut out);
        out
    }

    /// Sensors with unflushed readings, with the first and last unflushed timestamps. Ordered
    /// by key.
    pub fn unflushed_sensors(&self) -> Vec<SensorInfo> {
        self.unflushed_sensors_except(&|_| false)
    }

    /// [`Buffers::unflushed_sensors`] but those `known` holds (asked first, so that a known one
    /// costs no copy). Ordered by key.
    pub fn unflushed_sensors_except(&self, known: &dyn Fn(&str) -> bool) -> Vec<SensorInfo> {
        self.merge();
        let mut out: Vec<SensorInfo> = Vec::new();
        self.map.for_each(|key, sensor| {
            if known(key.0.key()) {
                return;
            }
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
}
