//! The flusher's side: when buffers are due, taking them as batches, and releasing what the
//! store confirmed.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use super::entry::{Cycle, InFlight, SensorKey};
use super::span::Span;
use super::stage::Gaps;
use super::{Buffers, ENTRY_BYTES};
use crate::model::{Batch, Rows, Series, TimestampMs};
use crate::store::WriteOverhead;

/// The flusher's tick is kept within these (see [`Buffers::tick`]).
const MIN_TICK: Duration = Duration::from_millis(10);

const MAX_TICK: Duration = Duration::from_millis(250);

/// See [`Buffers::quiet_after`].
const QUIET_AT_MOST: Duration = Duration::from_secs(2);

const BATCH_BYTES: usize = size_of::<Batch>() + size_of::<InFlight>();

/// See [`Buffers::due_length`].
const WARM_SHARE: usize = 16;

const WARM_BATCH_DIVISOR: usize = 8;

impl Buffers {
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
    pub(super) fn due_length(&self) -> usize {
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

/// Which buffers `Buffers::take` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TakeMode {
    /// Buffers at their due length (see [`Buffers::due_length`]); whose oldest reading is
    /// within a tick of `flush_interval`; of an hour older than their sensor's newest; and
    /// every buffer once no push came for `quiet_after`.
    Due,
    /// Every buffer with readings (shutdown drain).
    All,
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
