//! The stage: numbered pushes waiting to be merged into the per-sensor buffers (module doc of
//! `buffer`, "Staging"; docs/design/ingest.md, "Buffers and the flusher", says why).

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::entry::{HourBuffer, SensorBuffers, SensorKey};
use super::span::{self, Span};
use super::{Buffers, ENTRY_BYTES};
use crate::model::{Packed, Rows, Seq, Series, TimestampMs, hour_start};

/// A push that leaves this many readings staged merges the stage (see `Buffers::merge`). A
/// merge pays each sensor's cache misses (its map slot, its buffer, its tail) once for all of
/// its staged readings, so a larger stage merges more readings a sensor at once; this size
/// landed more than half of it, flat out (docs/performance.md#the-stages-size). Packed, that
/// many take about 3 MiB.
pub(crate) const STAGE_READINGS: usize = 65_536;

/// Bounded by the memory bound: a push's bytes are reserved before they are staged, and a
/// push that finds twice `STAGE_READINGS` staged waits for a merge (`merge_if_large`).
#[derive(Default)]
pub(super) struct Stage {
    pub pushes: Vec<Staged>,
    /// Of the pushes that arrived (not of the log's refill): see `Buffers::quiet_after`.
    pub gaps: Gaps,
}

/// When the last push arrived (a quiet server is written at once: `Buffers::take`), and the
/// longest gap between two pushes, over the current window of `GAP_WINDOW` and the one
/// before it (so over the last 5-10 s).
#[derive(Default)]
pub(super) struct Gaps {
    last: Option<Instant>,
    window_start: Option<Instant>,
    current: Option<Duration>,
    previous: Option<Duration>,
}

const GAP_WINDOW: Duration = Duration::from_secs(5);

impl Gaps {
    fn push(&mut self, now: Instant) {
        let start = *self.window_start.get_or_insert(now);
        let since = now.saturating_duration_since(start);
        if since >= GAP_WINDOW {
            self.previous = if since >= 2 * GAP_WINDOW { None } else { self.current };
            self.current = None;
            self.window_start = Some(now);
        }
        if let Some(last) = self.last.replace(now) {
            let gap = now.saturating_duration_since(last);
            self.current = Some(self.current.map_or(gap, |c| c.max(gap)));
        }
    }

    /// When the last push arrived; `None` before the first.
    pub(super) fn last(&self) -> Option<Instant> {
        self.last
    }

    pub(super) fn longest(&self) -> Option<Duration> {
        self.current.max(self.previous)
    }
}

/// One push, numbered, waiting in the stage: its readings packed before the order mutex was
/// taken, not regrouped.
pub(super) struct Staged {
    readings: Packed,
    /// What was reserved for it: the merge replaces this by what its rows grew by.
    bytes: usize,
    seqs: Seqs,
    /// When the push arrived (a flush interval earlier for readings the log kept).
    arrived: Instant,
}

/// The sequence numbers of a staged push's readings.
pub(super) enum Seqs {
    /// Reading `i` has `first + i` (a push).
    From(Seq),
    /// Reading `i` has `seqs[i]` (the log's refill).
    Each(Vec<Seq>),
}

impl Seqs {
    fn of(&self, i: usize) -> Seq {
        match self {
            Seqs::From(first) => first + i as Seq,
            Seqs::Each(seqs) => seqs[i],
        }
    }
}

impl Buffers {
    /// Puts a reserved, numbered push in the stage. `overdue`: the readings waited elsewhere
    /// already (the log), so their buffers are due at once. Runs under the order mutex: cheap,
    /// no map.
    pub(super) fn stage(&self, readings: Packed, bytes: usize, seqs: Seqs, overdue: bool) {
        let now = Instant::now();
        let arrived =
            if overdue { now.checked_sub(self.config.flush_interval).unwrap_or(now) } else { now };
        let n = readings.len();
        let mut stage = self.stage.lock().unwrap_or_else(|e| e.into_inner());
        if !overdue {
            stage.gaps.push(now);
        }
        stage.pushes.push(Staged { readings, bytes, seqs, arrived });
        self.staged.fetch_add(n, Ordering::Relaxed);
        drop(stage);
        if overdue || self.under_pressure() {
            self.due.notify_one();
        }
    }

    /// Merges the stage once it holds `STAGE_READINGS`; if another merge is running, leaves
    /// it to that one's successor unless the stage has grown to twice that.
    pub(super) fn merge_if_large(&self) {
        let staged = self.staged.load(Ordering::Relaxed);
        if staged < STAGE_READINGS {
            return;
        }
        match self.merging.try_lock() {
            Ok(guard) => self.merge_locked(guard),
            Err(_) if staged >= 2 * STAGE_READINGS => self.merge(),
            Err(_) => {}
        }
    }

    /// Moves everything staged so far into the buffers.
    pub(super) fn merge(&self) {
        self.merge_locked(self.merging.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// One map operation per sensor of the stage, however many pushes staged readings of it:
    /// the sensor's entry and buffer tails are fetched from memory once per merge, not once
    /// per reading (with thousands of sensors each is a cache miss).
    fn merge_locked(&self, _merging: std::sync::MutexGuard<'_, ()>) {
        let mut pushes =
            std::mem::take(&mut self.stage.lock().unwrap_or_else(|e| e.into_inner()).pushes);
        let n: usize = pushes.iter().map(|p| p.readings.len()).sum();
        if n == 0 {
            return;
        }
        self.staged.fetch_sub(n, Ordering::Relaxed);
        // Each staged reading's sensor, numbered by first appearance.
        let mut sensor_of: Vec<u32> = Vec::with_capacity(n);
        let mut sensors = 0usize;
        {
            // Sized for one sensor per reading (a fleet of slow sensors): growing it rehashed
            // every merge.
            let mut ids: std::collections::HashMap<&str, u32, span::BuildHasher> =
                std::collections::HashMap::with_capacity_and_hasher(
                    n,
                    span::BuildHasher::default(),
                );
            let mut last: Option<(&Series, u32)> = None;
            let all =
                pushes.iter().flat_map(|p| (0..p.readings.len()).map(|i| p.readings.series(i)));
            for meta in all {
                let id = match last {
                    // A body's consecutive lines are often one sensor's.
                    Some((m, id)) if Series::ptr_eq(m, meta) => id,
                    _ => *ids.entry(meta.key()).or_insert_with(|| {
                        sensors += 1;
                        (sensors - 1) as u32
                    }),
                };
                last = Some((meta, id));
                sensor_of.push(id);
            }
        }
        // A counting sort by sensor, stable: each sensor's readings stay in stage order,
        // which is sequence order.
        let mut starts = vec![0u32; sensors + 1];
        for &id in &sensor_of {
            starts[id as usize + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut order: Vec<(u32, u32)> = vec![(0, 0); n];
        {
            let mut next = starts.clone();
            let flat = pushes
                .iter()
                .enumerate()
                .flat_map(|(p, push)| (0..push.readings.len() as u32).map(move |i| (p as u32, i)));
            for (&id, at) in sensor_of.iter().zip(flat) {
                order[next[id as usize] as usize] = at;
                next[id as usize] += 1;
            }
        }
        let batch = self.due_length();
        let mut wake = false;
        let reserved: usize = pushes.iter().map(|p| p.bytes).sum();
        let (mut grown, mut shrunk) = (0usize, reserved);
        for run in starts.windows(2).map(|w| &order[w[0] as usize..w[1] as usize]) {
            let (p0, i0) = run[0];
            let meta = pushes[p0 as usize].readings.series(i0 as usize);
            let mut entry = match self.map.get_mut(meta.key()) {
                Some(entry) => entry,
                None => {
                    grown += ENTRY_BYTES;
                    self.entries.fetch_add(1, Ordering::Relaxed);
                    self.map.get_or_insert_with(SensorKey(meta.clone()), || SensorBuffers {
                        hours: Default::default(),
                    })
                }
            };
            let hours_before = entry.heap_bytes();
            let hours = &mut entry.hours;
            // Lengths before and after the sensor's readings, not after every reading: the
            // wake is one check per sensor and merge.
            let before: smallvec::SmallVec<[(TimestampMs, usize); 2]> =
                hours.iter().map(|hb| (hb.hour, hb.readings.len())).collect();
            // The rows' words before and after the sensor's readings, like the lengths: what
            // they grew by (blocks, relayouts) counts once per sensor and merge.
            let words_before: usize = hours.iter().map(|hb| hb.readings.word_bytes()).sum();
            let mut strs = 0usize;
            for &(p, i) in run {
                let push = &mut pushes[p as usize];
                let ts = push.readings.ts(i as usize);
                let hour = hour_start(ts);
                let h = match hours.search(hour) {
                    Ok(h) => h,
                    Err(h) => {
                        hours.insert(
                            h,
                            HourBuffer {
                                hour,
                                readings: Rows::default(),
                                span: Span::EMPTY,
                                since: push.arrived,
                                in_flight: None,
                            },
                        );
                        h
                    }
                };
                let hb = &mut hours[h];
                if hb.readings.is_empty() {
                    hb.since = push.arrived;
                }
                hb.span.include(ts);
                strs +=
                    push.readings.append_to(i as usize, &mut hb.readings, push.seqs.of(i as usize));
            }
            // A relayout may leave less slack than the rows had: count either way.
            let words_after: usize = hours.iter().map(|hb| hb.readings.word_bytes()).sum();
            grown += words_after.saturating_sub(words_before) + strs;
            shrunk += words_before.saturating_sub(words_after);
            wake |= hours.iter().any(|hb| {
                let was = before.iter().find(|b| b.0 == hb.hour).map_or(0, |b| b.1);
                was < batch && hb.readings.len() >= batch
            });
            grown += entry.heap_bytes() - hours_before;
        }
        self.rebalance(grown, shrunk);
        if wake {
            self.due.notify_one();
        }
    }
}
