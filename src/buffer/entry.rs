//! A sensor's entry in the buffer table: its key and its hour buffers.

use std::sync::{Arc, OnceLock};

use tokio::time::Instant;

use super::span::Span;
use crate::model::{Batch, Rows, Series, TimestampMs};

/// What the budget counts for each hour buffer after a sensor's first.
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
        self.0.key()
    }
}

/// A sensor's buffers; its `SeriesMeta` is the map key (`SensorKey`).
pub(super) struct SensorBuffers {
    pub(super) hours: Hours,
}

impl SensorBuffers {
    /// The hour buffers' own allocation: none while the one buffer is inline in the entry.
    pub(super) fn heap_bytes(&self) -> usize {
        self.hours.heap_bytes()
    }
}

/// A sensor's hour buffers, sorted by hour, no duplicates.
///
/// The first lives in the entry: the flusher's scan then reads a sensor's current hour from
/// the table's slab, in memory order, instead of chasing one allocation per sensor. The
/// others, which a sensor holds while it crosses into a new hour (or when readings come out
/// of order), share one allocation of exactly their number: a fleet crossing into a new hour
/// at once costs one more buffer a sensor until the old hours are written, where a vector
/// with the first inline moves both to the heap.
#[derive(Default)]
pub(super) struct Hours {
    first: Option<HourBuffer>,
    /// Never an empty slice, and `None` while `first` is.
    later: Option<Box<[HourBuffer]>>,
}

impl Hours {
    pub(super) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.later.as_ref().map_or(0, |l| l.len())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &HourBuffer> {
        self.first.iter().chain(self.later.iter().flat_map(|l| l.iter()))
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut HourBuffer> {
        self.first.iter_mut().chain(self.later.iter_mut().flat_map(|l| l.iter_mut()))
    }

    pub(super) fn last(&self) -> Option<&HourBuffer> {
        self.later.as_ref().and_then(|l| l.last()).or(self.first.as_ref())
    }

    /// Where `hour`'s buffer is (`Ok`), or where it would be inserted (`Err`).
    pub(super) fn search(&self, hour: TimestampMs) -> Result<usize, usize> {
        match self.iter().position(|hb| hb.hour >= hour) {
            Some(i) if self[i].hour == hour => Ok(i),
            Some(i) => Err(i),
            None => Err(self.len()),
        }
    }

    /// Inserts at `i`, which keeps the hours sorted (`search`'s `Err`).
    pub(super) fn insert(&mut self, i: usize, hb: HourBuffer) {
        if self.first.is_none() {
            self.first = Some(hb);
        } else if self.later.is_none() && i == 1 {
            // A sensor crossing into a new hour: no vector on the way.
            self.later = Some(Box::new([hb]));
        } else {
            let mut all = std::mem::take(self).into_vec();
            all.insert(i, hb);
            *self = Hours::of_sorted(all);
        }
    }

    /// Calls `keep` once on each buffer, in order. Moves nothing unless one goes: every take
    /// asks this of every sensor.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&HourBuffer) -> bool) {
        let kept: smallvec::SmallVec<[bool; 4]> = self.iter().map(&mut keep).collect();
        if kept.iter().all(|&k| k) {
            return;
        }
        let mut all = std::mem::take(self).into_vec();
        let mut kept = kept.into_iter();
        all.retain(|_| kept.next().unwrap_or(false));
        *self = Hours::of_sorted(all);
    }

    /// The later buffers' allocation.
    pub(super) fn heap_bytes(&self) -> usize {
        self.later.as_ref().map_or(0, |l| l.len() * HOUR_BYTES)
    }

    fn into_vec(self) -> Vec<HourBuffer> {
        let mut all: Vec<HourBuffer> = self.first.into_iter().collect();
        all.extend(self.later.into_iter().flat_map(|l| l.into_vec()));
        all
    }

    fn of_sorted(mut all: Vec<HourBuffer>) -> Hours {
        // Collected from `drain`, the later buffers' vector has exactly their number.
        let later: Vec<HourBuffer> = all.drain(1.min(all.len())..).collect();
        Hours { first: all.pop(), later: (!later.is_empty()).then(|| later.into_boxed_slice()) }
    }
}

impl std::ops::Index<usize> for Hours {
    type Output = HourBuffer;

    fn index(&self, i: usize) -> &HourBuffer {
        match i {
            0 => self.first.as_ref(),
            i => self.later.as_ref().and_then(|l| l.get(i - 1)),
        }
        .expect("hour buffer index in range")
    }
}

impl std::ops::IndexMut<usize> for Hours {
    fn index_mut(&mut self, i: usize) -> &mut HourBuffer {
        match i {
            0 => self.first.as_mut(),
            i => self.later.as_mut().and_then(|l| l.get_mut(i - 1)),
        }
        .expect("hour buffer index in range")
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
