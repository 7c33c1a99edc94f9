use std::time::Duration;

use futures::FutureExt;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use tokio::time::Instant;

use super::entry::HOUR_BYTES;
use super::span::Span;
use super::take::Released;
use super::*;
use crate::model::{
    Batch, FieldValue, HOUR_MS, Item, Reading, Rows, Series, SeriesMeta, TimestampMs, hour_start,
};
use crate::store::WriteOverhead;

/// A reading of series `key` at `ts`, tagged with a unique `seq` so tests can follow it.
pub(crate) fn item(key: &str, ts: TimestampMs, seq: i64) -> Item {
    (
        SeriesMeta::new(key, "m", &[("host", key)]).into(),
        Reading { ts, fields: smallvec::smallvec![("seq".into(), FieldValue::Int(seq))] },
    )
}

pub(crate) fn seq(r: &Reading) -> i64 {
    match r.fields[0].1 {
        FieldValue::Int(v) => v,
        ref other => panic!("not a test reading: {other:?}"),
    }
}

pub(crate) fn seqs(readings: &[Reading]) -> Vec<i64> {
    readings.iter().map(seq).collect()
}

/// The markers (`seq`) of a batch's readings.
pub(crate) fn batch_seqs(batch: &Batch) -> Vec<i64> {
    batch.readings().map(|r| seq(&r)).collect()
}

/// Reads a debugging recorder. Its snapshots drain what they report (counters and gauges are
/// swapped to 0, histograms cleared), so the deltas are accumulated here. Gauges are only ever
/// incremented and decremented, so the sum of deltas is their value.
pub(crate) struct MetricReader {
    snap: Snapshotter,
    totals: std::cell::RefCell<std::collections::HashMap<MetricKey, f64>>,
}

/// Name and sorted labels.
type MetricKey = (String, Vec<(String, String)>);

impl MetricReader {
    pub(crate) fn new(recorder: &DebuggingRecorder) -> MetricReader {
        MetricReader { snap: recorder.snapshotter(), totals: Default::default() }
    }

    /// A counter's or gauge's value, or a histogram's sample count; 0 when never touched.
    pub(crate) fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut totals = self.totals.borrow_mut();
        for (ck, _, _, value) in self.snap.snapshot().into_vec() {
            let mut key_labels: Vec<(String, String)> =
                ck.key().labels().map(|l| (l.key().to_string(), l.value().to_string())).collect();
            key_labels.sort();
            let delta = match value {
                DebugValue::Counter(c) => c as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(h) => h.len() as f64,
            };
            *totals.entry((ck.key().name().to_string(), key_labels)).or_default() += delta;
        }
        let mut want: Vec<(String, String)> =
            labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        want.sort();
        totals.get(&(name.to_string(), want)).copied().unwrap_or(0.0)
    }
}

fn config(max: usize, batch: usize) -> BufferConfig {
    BufferConfig {
        max_buffered_bytes: usize::MAX,
        max_buffered_readings: max,
        max_batch_readings: batch,
        flush_interval: Duration::from_secs(1),
    }
}

fn settle_all(b: &Buffers, outcome: Outcome) -> Released {
    let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).expect("something to take");
    let outcomes = vec![outcome; taken.batches().len()];
    b.complete(taken, &outcomes)
}

#[test]
fn push_is_all_or_nothing_at_the_bound() {
    let b = Buffers::new(config(10, 100));
    assert_eq!(b.push((0..6).map(|i| item("a", i, i)).collect()).unwrap(), 6);
    let err = b.push((0..5).map(|i| item("b", i, i)).collect()).unwrap_err();
    assert_eq!((err.buffered, err.limit), (6, 10));
    assert_eq!(b.buffered(), 6);
    assert!(b.unflushed("b", i64::MIN, i64::MAX).is_empty(), "nothing of the refused push");
    assert_eq!(b.push((0..4).map(|i| item("b", i, i)).collect()).unwrap(), 4);
    assert_eq!(b.buffered(), 10);
    assert!(b.push(vec![item("c", 0, 0)]).is_err());
    assert_eq!(b.push(vec![]).unwrap(), 0);
}

/// What a caller asks before parsing a body agrees with what the push would do.
#[test]
fn a_push_that_would_not_fit_is_refused_before_it_is_parsed() {
    let b = Buffers::new(config(10, 100));
    assert!(!b.refuses_push_of(10, false) && b.refuses_push_of(11, false));
    b.push((0..8).map(|i| item("a", i, i)).collect()).unwrap();
    assert!(!b.refuses_push_of(2, false), "room for two");
    assert!(b.refuses_push_of(3, false));
    assert!(b.push((0..3).map(|i| item("b", i, i)).collect()).is_err(), "as the push would");
    // A store that fails lets full buffers spill into the log: nothing is refused up front.
    b.set_store_failing(true);
    assert!(b.refuses_push_of(3, false) && !b.refuses_push_of(3, true));
}

#[test]
fn push_refuses_a_batch_larger_than_the_bound_even_when_empty() {
    let b = Buffers::new(config(10, 100));
    let err = b.push((0..11).map(|i| item("a", i, i)).collect()).unwrap_err();
    assert_eq!((err.buffered, err.limit), (0, 10));
    assert_eq!(b.buffered(), 0);
}

#[tokio::test]
async fn push_when_room_accepts_an_oversized_batch_once_empty() {
    let b = Buffers::new(config(10, 100));
    assert_eq!(b.push_when_room((0..25).map(|i| item("a", i, i)).collect()).await, 25);
    assert_eq!(b.buffered(), 25);
    assert!(b.push(vec![item("a", 0, 99)]).is_err(), "over the bound until flushed");
    assert_eq!(settle_all(&b, Outcome::Written).written, 25);
    assert_eq!(b.buffered(), 0);
}

#[tokio::test]
async fn push_when_room_waits_until_a_flush_frees_room() {
    let b = Buffers::new(config(10, 100));
    b.push((0..8).map(|i| item("a", i, i)).collect()).unwrap();
    let waiter = {
        let b = b.clone();
        tokio::spawn(
            async move { b.push_when_room((0..5).map(|i| item("b", i, i)).collect()).await },
        )
    };
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiter.is_finished(), "no room for 5 while 8 of 10 are held");
    assert_eq!(b.buffered(), 8);

    // A retry frees nothing, so the waiter keeps waiting.
    settle_all(&b, Outcome::Retry { landed: 0 });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!waiter.is_finished());

    settle_all(&b, Outcome::Written);
    assert_eq!(waiter.await.unwrap(), 5);
    assert_eq!(b.buffered(), 5);
    assert_eq!(seqs(&b.unflushed("b", i64::MIN, i64::MAX)), vec![0, 1, 2, 3, 4]);
}

#[test]
fn take_groups_by_sensor_and_hour_and_interns_series() {
    let b = Buffers::new(config(1000, 1000));
    let mut items = Vec::new();
    for i in 0..60 {
        let key = ["a", "b", "c"][i % 3];
        let ts = if i % 2 == 0 { HOUR_MS + i as i64 } else { 2 * HOUR_MS + i as i64 };
        items.push(item(key, ts, i as i64));
    }
    b.push(items).unwrap();
    // A late reading for an earlier hour, after newer ones.
    b.push(vec![item("a", 5, 100)]).unwrap();

    let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).unwrap();
    let mut got: Vec<(String, TimestampMs, Vec<i64>)> = taken
        .batches()
        .iter()
        .map(|batch| (batch.series.key().to_owned(), batch.hour, batch_seqs(batch)))
        .collect();
    got.sort();
    let expect = |key: usize, parity: usize| -> Vec<i64> {
        (0..60).filter(|i| i % 3 == key && i % 2 == parity).map(|i| i as i64).collect()
    };
    assert_eq!(
        got,
        vec![
            ("a".into(), 0, vec![100]),
            ("a".into(), HOUR_MS, expect(0, 0)),
            ("a".into(), 2 * HOUR_MS, expect(0, 1)),
            ("b".into(), HOUR_MS, expect(1, 0)),
            ("b".into(), 2 * HOUR_MS, expect(1, 1)),
            ("c".into(), HOUR_MS, expect(2, 0)),
            ("c".into(), 2 * HOUR_MS, expect(2, 1)),
        ]
    );
    for batch in taken.batches() {
        assert!(batch.readings().all(|r| hour_start(r.ts) == batch.hour));
        let same_series: Vec<_> =
            taken.batches().iter().filter(|o| o.series.key() == batch.series.key()).collect();
        assert!(
            same_series.iter().all(|o| Series::ptr_eq(&o.series, &batch.series)),
            "one per key"
        );
    }
    assert_eq!(taken.readings(), 61);
    let n = taken.batches().len();
    assert_eq!(b.complete(taken, &vec![Outcome::Written; n]).written, 61);
    assert_eq!(b.buffered(), 0);
    assert!(b.unflushed_sensors().is_empty());
    assert_eq!(b.map.len(), 3, "settled entries stay warm for a flush interval");
}

#[test]
fn merges_keep_each_sensor_and_hour_in_sequence_order_across_pushes() {
    // Pushes large enough that pushing merges the stage on its own (more than
    // `STAGE_READINGS`), 1,000 sensors interleaved over two hours, and one sensor whose
    // readings arrive as separate `SeriesMeta` objects (as JSON's do).
    let b = Buffers::new(config(1_000_000, 1_000_000));
    let per_push = 40_000;
    assert!(2 * per_push > super::STAGE_READINGS);
    let mut seq = 0i64;
    let mut s7_points = std::collections::HashSet::new();
    for _ in 0..3 {
        let items = (0..per_push)
            .map(|i| {
                seq += 1;
                let ts = if (seq / 1000) % 3 == 0 { 1 } else { HOUR_MS + seq };
                if i % 1000 == 7 {
                    s7_points.insert(ts);
                }
                item(&format!("s{}", i % 1000), ts, seq)
            })
            .collect();
        b.push(items).unwrap();
    }
    assert_eq!(b.unflushed("s7", i64::MIN, i64::MAX).len(), s7_points.len());
    let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).unwrap();
    assert_eq!(taken.readings(), 3 * per_push);
    let mut seen = std::collections::HashSet::new();
    for batch in taken.batches() {
        assert!(seen.insert((batch.series.key().to_owned(), batch.hour)), "one batch per hour");
        let s = batch_seqs(batch);
        assert!(s.windows(2).all(|w| w[0] < w[1]), "{} {}: {s:?}", batch.series.key(), batch.hour);
        assert!(batch.seqs().windows(2).all(|w| w[0] < w[1]));
        assert!(batch.readings().all(|r| hour_start(r.ts) == batch.hour));
    }
    assert_eq!(seen.len(), 2000);
}

#[tokio::test(start_paused = true)]
async fn a_buffer_taken_whole_stays_until_idle_for_an_interval() {
    let b = Buffers::new(config(1000, 1000));
    b.push((0..5).map(|i| item("a", i, i)).collect()).unwrap();
    let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).unwrap();
    b.push(vec![item("a", 10, 10)]).unwrap();
    assert_eq!(seqs(&b.unflushed("a", 0, HOUR_MS)), vec![0, 1, 2, 3, 4, 10], "in flight first");
    b.complete(taken, &[Outcome::Written]);
    for i in 11..15 {
        b.push(vec![item("a", i, i)]).unwrap();
    }
    assert_eq!(seqs(&b.unflushed("a", 0, HOUR_MS)), vec![10, 11, 12, 13, 14]);

    tokio::time::advance(Duration::from_secs(1)).await;
    let taken = b.take(TakeMode::Due, usize::MAX, usize::MAX).unwrap();
    b.complete(taken, &[Outcome::Written]);
    assert!(b.map.get("a").is_some(), "emptied, not yet idle");
    assert!(b.unflushed_sensors().is_empty(), "an empty buffer is not an unflushed sensor");

    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none());
    assert!(b.map.get("a").is_some(), "idle for less than the interval");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none());
    assert!(b.map.is_empty(), "idle for the interval: dropped");

    b.push(vec![item("a", 20, 20)]).unwrap();
    assert_eq!(seqs(&b.unflushed("a", 0, HOUR_MS)), vec![20], "re-created on demand");
}

#[tokio::test(start_paused = true)]
async fn a_buffer_is_due_by_size_at_once_and_by_age_within_a_tick_of_the_interval() {
    let b = Buffers::new(config(1000, 10));
    let tick = b.tick();
    assert_eq!(tick, Duration::from_millis(25), "a fortieth of the 1 s interval");
    b.push((0..9).map(|i| item("a", i, i)).collect()).unwrap();
    assert!(b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none(), "neither full nor old");
    assert!(b.due_notified().now_or_never().is_none(), "no early wake-up below the size");

    b.push(vec![item("a", 9, 9)]).unwrap();
    let taken = b.take(TakeMode::Due, usize::MAX, usize::MAX).expect("due by size");
    assert_eq!(batch_seqs(&taken.batches()[0]), (0..10).collect::<Vec<_>>());
    b.complete(taken, &[Outcome::Written]);

    // Pushes keep coming (every 50 ms, under the 200 ms quiet period), so only age decides.
    let b = Buffers::new(config(1000, 1000));
    b.push(vec![item("b", 0, 0)]).unwrap();
    let mut waited = Duration::ZERO;
    while waited + Duration::from_millis(50) < Duration::from_secs(1) - tick {
        tokio::time::advance(Duration::from_millis(50)).await;
        waited += Duration::from_millis(50);
        b.push(vec![item("c", 0, 0)]).unwrap();
        assert!(
            b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none(),
            "b is not due at {waited:?}"
        );
    }
    tokio::time::advance(Duration::from_secs(1) - tick - waited).await;
    b.push(vec![item("c", 0, 0)]).unwrap();
    let taken =
        b.take(TakeMode::Due, usize::MAX, usize::MAX).expect("b is due a tick before the interval");
    assert_eq!(taken.batches().len(), 1, "c is younger");
    assert_eq!(taken.batches()[0].series.key(), "b");
    b.complete(taken, &[Outcome::Written]);
    assert!(b.take(TakeMode::All, usize::MAX, usize::MAX).is_some(), "All ignores age");
}

#[tokio::test(start_paused = true)]
async fn a_quiet_server_writes_everything_it_holds() {
    let b = Buffers::new(config(1000, 1000));
    b.push(vec![item("a", 0, 0), item("b", 0, 1)]).unwrap();
    tokio::time::advance(Duration::from_millis(199)).await;
    assert!(b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none(), "a push came 199 ms ago");
    tokio::time::advance(Duration::from_millis(1)).await;
    let taken =
        b.take(TakeMode::Due, usize::MAX, usize::MAX).expect("quiet for a fifth of the interval");
    assert_eq!(taken.readings(), 2);
    b.complete(taken, &[Outcome::Written, Outcome::Written]);
}

#[tokio::test(start_paused = true)]
async fn a_load_that_stops_is_quiet_after_twice_its_longest_gap() {
    let b = Buffers::new(config(1000, 1000));
    // Pushes 10 ms apart, the longest gap 30 ms: quiet after 60 ms of silence.
    for gap in [10, 10, 30, 10] {
        b.push(vec![item("a", gap, gap)]).unwrap();
        tokio::time::advance(Duration::from_millis(gap as u64)).await;
    }
    b.push(vec![item("a", 99, 99)]).unwrap();
    tokio::time::advance(Duration::from_millis(59)).await;
    assert!(b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none(), "59 ms: not yet");
    tokio::time::advance(Duration::from_millis(1)).await;
    let taken = b.take(TakeMode::Due, usize::MAX, usize::MAX).expect("60 ms of silence: quiet");
    assert_eq!(taken.readings(), 5);
    b.complete(taken, &[Outcome::Written]);

    // Pushes a second apart never look quiet in between (quiet after 2 s at most).
    let b = Buffers::new(BufferConfig {
        flush_interval: Duration::from_secs(10),
        ..config(1000, 1000)
    });
    for i in 0..4 {
        b.push(vec![item("a", i, i)]).unwrap();
        tokio::time::advance(Duration::from_millis(190)).await;
        assert!(
            b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none(),
            "a steady load at push {i}"
        );
        tokio::time::advance(Duration::from_millis(810)).await;
    }
}

#[test]
fn under_memory_pressure_the_longer_buffers_are_due() {
    let b = Buffers::new(config(100, 1000));
    b.push((0..40).map(|i| item("a", i, i)).collect()).unwrap();
    b.push(vec![item("b", 0, 40)]).unwrap();
    assert!(b.due_notified().now_or_never().is_none(), "41 of 100: no pressure yet");
    assert!(b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none());
    b.push((0..9).map(|i| item("c", i, 41 + i)).collect()).unwrap();
    assert!(b.due_notified().now_or_never().is_some(), "half the bound held wakes the flusher");
    let taken = b.take(TakeMode::Due, usize::MAX, usize::MAX).expect("50 of 100 held");
    let keys: Vec<&str> = taken.batches().iter().map(|t| t.series.key()).collect();
    assert_eq!(keys, vec!["a"], "only a holds at least the average (50 / 3 sensors)");
    b.complete(taken, &[Outcome::Written]);
}

#[tokio::test(start_paused = true)]
async fn once_the_buffers_hold_a_sixteenth_of_the_bound_an_eighth_of_a_batch_is_due() {
    let b = Buffers::new(config(320, 128));
    b.push((0..16).map(|i| item("a", i, i)).collect()).unwrap();
    b.push((0..3).map(|i| item("b", i, 16 + i)).collect()).unwrap();
    assert!(b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none(), "19 of 320 held");
    b.push(vec![item("b", 3, 19)]).unwrap();
    let taken = b.take(TakeMode::Due, usize::MAX, usize::MAX).expect("20 held: a holds 16");
    let keys: Vec<&str> = taken.batches().iter().map(|t| t.series.key()).collect();
    assert_eq!(keys, vec!["a"], "b holds 4");
    b.complete(taken, &[Outcome::Written]);
    b.push((0..12).map(|i| item("b", 4 + i, 20 + i)).collect()).unwrap();
    assert!(b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none(), "16 held: b waits");
}

#[test]
fn unflushed_is_ascending_one_reading_per_point_and_half_open() {
    let b = Buffers::new(config(1000, 1000));
    b.push(vec![
        item("a", 30, 0),
        item("a", 10, 1),
        item("a", 20, 2),
        item("a", HOUR_MS + 1, 3),
        item("a", 20, 4),
        item("b", 20, 5),
    ])
    .unwrap();
    b.push(vec![item("a", 10, 6), item("a", -5, 7)]).unwrap();
    // Readings of one timestamp are one point, the later value winning.
    assert_eq!(seqs(&b.unflushed("a", i64::MIN, i64::MAX)), vec![7, 6, 4, 0, 3]);
    assert_eq!(seqs(&b.unflushed("a", 10, 30)), vec![6, 4]);
    assert_eq!(seqs(&b.unflushed("a", 30, HOUR_MS + 2)), vec![0, 3]);
    assert!(b.unflushed("a", 31, HOUR_MS).is_empty());
    assert!(b.unflushed("a", 10, 10).is_empty());
    assert!(b.unflushed("zzz", i64::MIN, i64::MAX).is_empty());
}

#[test]
fn in_flight_readings_stay_visible_until_written_and_precede_newer_ones() {
    let b = Buffers::new(config(1000, 1000));
    b.push(vec![item("a", 10, 0), item("a", 20, 1)]).unwrap();
    let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).unwrap();
    b.push(vec![item("a", 10, 2), item("a", 5, 3)]).unwrap();
    // The buffered reading at 10 came after the one in flight: it wins.
    assert_eq!(seqs(&b.unflushed("a", 0, 100)), vec![3, 2, 1]);
    assert_eq!(b.buffered(), 4);
    let info = b.unflushed_sensors();
    assert_eq!(info.len(), 1);
    assert_eq!((info[0].first, info[0].last), (5, 20));
    assert_eq!(info[0].tags, vec![("host".to_string(), "a".to_string())]);
    assert!(
        b.take(TakeMode::All, usize::MAX, usize::MAX).is_none(),
        "hour with a write in flight waits"
    );

    b.complete(taken, &[Outcome::Written]);
    assert_eq!(seqs(&b.unflushed("a", 0, 100)), vec![3, 2]);
    assert_eq!(b.buffered(), 2);
    let info = b.unflushed_sensors();
    assert_eq!((info[0].first, info[0].last), (5, 10));
}

#[test]
fn a_retried_batch_goes_back_ahead_of_newer_readings() {
    let b = Buffers::new(config(1000, 1000));
    b.push(vec![item("a", 1, 0), item("a", 2, 1), item("b", 1, 2)]).unwrap();
    let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).unwrap();
    b.push(vec![item("a", 0, 3)]).unwrap();
    let outcomes: Vec<Outcome> = taken
        .batches()
        .iter()
        .map(|batch| {
            if batch.series.key() == "a" { Outcome::Retry { landed: 0 } } else { Outcome::Written }
        })
        .collect();
    let released = b.complete(taken, &outcomes);
    assert_eq!(released, Released { written: 1, dropped: 0, retried: 2 });
    assert_eq!(b.buffered(), 3);

    let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).unwrap();
    assert_eq!(taken.batches().len(), 1);
    assert_eq!(batch_seqs(&taken.batches()[0]), vec![0, 1, 3], "arrival order, not ts order");
    assert_eq!(b.complete(taken, &[Outcome::Drop]).dropped, 3);
    assert_eq!(b.buffered(), 0);
    assert!(b.unflushed_sensors().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_retried_batch_keeps_its_age() {
    let b = Buffers::new(config(1000, 1000));
    b.push(vec![item("a", 1, 0)]).unwrap();
    tokio::time::advance(Duration::from_secs(1)).await;
    let taken = b.take(TakeMode::Due, usize::MAX, usize::MAX).unwrap();
    b.push(vec![item("a", 2, 1)]).unwrap();
    b.complete(taken, &[Outcome::Retry { landed: 0 }]);
    let again = b
        .take(TakeMode::Due, usize::MAX, usize::MAX)
        .expect("still due: its oldest reading is old");
    assert_eq!(batch_seqs(&again.batches()[0]), vec![0, 1]);
}

#[test]
fn take_caps_the_readings_per_cycle_splitting_a_buffer_in_order() {
    let b = Buffers::new(config(1000, 1000));
    b.push((0..10).map(|i| item("a", i, i)).collect()).unwrap();
    let first = b.take(TakeMode::All, 4, usize::MAX).unwrap();
    assert_eq!(batch_seqs(&first.batches()[0]), vec![0, 1, 2, 3]);
    assert_eq!(seqs(&b.unflushed("a", 0, 100)), (0..10).collect::<Vec<_>>());
    b.complete(first, &[Outcome::Written]);
    let second = b.take(TakeMode::All, 4, usize::MAX).unwrap();
    assert_eq!(batch_seqs(&second.batches()[0]), vec![4, 5, 6, 7]);
    assert_eq!(b.unflushed_sensors()[0].first, 4);
    b.complete(second, &[Outcome::Written]);
    let third = b.take(TakeMode::All, 4, usize::MAX).unwrap();
    assert_eq!(batch_seqs(&third.batches()[0]), vec![8, 9]);
    b.complete(third, &[Outcome::Written]);
    assert_eq!(b.buffered(), 0);
}

#[test]
fn take_stops_at_the_cap_across_buffers() {
    let b = Buffers::new(config(1000, 1000));
    for key in ["a", "b", "c"] {
        b.push((0..3).map(|i| item(key, i, i)).collect()).unwrap();
    }
    let first = b.take(TakeMode::All, 6, usize::MAX).unwrap();
    assert_eq!(first.readings(), 6);
    assert_eq!(first.batches().len(), 2);
    let rest = b.take(TakeMode::All, 6, usize::MAX).unwrap();
    assert_eq!(rest.readings(), 3);
}

/// What the store holds beside the rows counts towards the write's bytes: a buffer that would
/// not fit is split, and a buffer whose batch would not fit waits for the next write.
#[test]
fn take_counts_the_stores_overhead_towards_the_bytes() {
    let b = Buffers::new(config(1000, 1000));
    b.push((0..10).map(|i| item("a", i, i)).collect()).unwrap();
    b.push((0..3).map(|i| item("b", i, i)).collect()).unwrap();
    let overhead = WriteOverhead {
        per_batch: 10_000,
        per_batch_field: 0,
        per_reading: 0,
        per_value: 1_000,
        per_field_minute: 0,
    };
    // Room for one batch and four readings of one field (each 1,000 plus its rows' share).
    let max_bytes = 10_000 + 4_500;
    let mut taken_of: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
    let mut writes = 0;
    while let Some(taken) = b.take_costed(TakeMode::All, usize::MAX, max_bytes, overhead) {
        writes += 1;
        assert_eq!(taken.batches().len(), 1, "a second batch never fits beside the first");
        let batch = &taken.batches()[0];
        assert!(batch.len() <= 4, "{} readings do not fit", batch.len());
        taken_of.entry(batch.series.key().to_owned()).or_default().extend(batch_seqs(batch));
        b.complete(taken, &[Outcome::Written]);
    }
    assert_eq!(writes, 4, "a in three writes (4, 4, 2), b in one");
    assert_eq!(taken_of["a"], (0..10).collect::<Vec<_>>());
    assert_eq!(taken_of["b"], vec![0, 1, 2]);
    assert_eq!(b.buffered(), 0);
}

#[test]
fn the_gauge_follows_reservations_and_releases() {
    let recorder = DebuggingRecorder::new();
    let m = MetricReader::new(&recorder);
    ::metrics::with_local_recorder(&recorder, || {
        let b = Buffers::new(config(100, 100));
        b.push((0..7).map(|i| item("a", i, i)).collect()).unwrap();
        b.push((0..3).map(|i| item("b", i, i)).collect()).unwrap();
        assert!(b.push((0..95).map(|i| item("b", i, i)).collect()).is_err());
        assert_eq!(m.get(READINGS_BUFFERED, &[]), 10.0);
        let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).unwrap();
        let outcomes: Vec<Outcome> = taken
            .batches()
            .iter()
            .map(|batch| {
                if batch.series.key() == "a" {
                    Outcome::Written
                } else {
                    Outcome::Retry { landed: 0 }
                }
            })
            .collect();
        b.complete(taken, &outcomes);
        assert_eq!(m.get(READINGS_BUFFERED, &[]), 3.0);
    });
}

#[test]
fn concurrent_pushes_never_exceed_the_bound_and_lose_nothing() {
    let b = Buffers::new(config(5000, 100));
    // Each reading's seq field is unique: (thread, push, index).
    let id = |t: i64, i: i64, j: i64| t * 10_000 + i * 10 + j;
    let accepted: Vec<(String, i64, i64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let b = &b;
                s.spawn(move || {
                    let mut ok = Vec::new();
                    for i in 0..200 {
                        // Each at a time of its own: readings of one time would be one point.
                        let items: Vec<_> = (0..10)
                            .map(|j| item(&format!("s{}", j % 3), id(t, i, j), id(t, i, j)))
                            .collect();
                        let sent: Vec<_> =
                            items.iter().map(|(m, r)| (m.key().to_owned(), r.ts, seq(r))).collect();
                        if let Ok(n) = b.push(items) {
                            assert_eq!(n, 10, "a push is all or nothing");
                            ok.extend(sent);
                        }
                        assert!(b.buffered() <= 5000);
                    }
                    ok
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(accepted.len(), 5000, "exactly the bound's worth of 10-reading pushes fit");
    assert_eq!(b.buffered(), 5000);
    assert_eq!(b.peak(), 5000, "the high-water count, which no sample can miss, never passed it");
    // Every accepted reading is buffered once, and nothing of a refused push.
    let mut buffered: Vec<(String, i64, i64)> = ["s0", "s1", "s2"]
        .iter()
        .flat_map(|k| {
            b.unflushed(k, 0, HOUR_MS).into_iter().map(|r| (k.to_string(), r.ts, seq(&r)))
        })
        .collect();
    buffered.sort();
    let mut accepted = accepted;
    accepted.sort();
    assert_eq!(buffered, accepted);
}

#[test]
fn full_buffers_refuse_while_the_store_writes_and_spill_while_it_fails() {
    let b = Buffers::new(config(10, 1000));
    let logged = std::cell::Cell::new(0usize);
    let log = |_first: Seq| -> Result<(), BufferFull> {
        logged.set(logged.get() + 1);
        Ok(())
    };
    let (_, placement) = b.push_or_spill((0..10).map(|i| item("a", i, i)).collect(), log).unwrap();
    assert_eq!(placement, Placement::Buffered);
    let refused = b.push_or_spill(vec![item("a", 10, 10)], log).unwrap_err();
    assert_eq!((refused.buffered, refused.limit), (10, 10));
    assert_eq!(logged.get(), 1, "a refused push is not logged");
    assert_eq!(b.spilled_from(), None);

    b.set_store_failing(true);
    let (_, placement) = b.push_or_spill(vec![item("a", 10, 10)], log).unwrap();
    assert_eq!(placement, Placement::Spilled, "a failing store: the log rides it out");
    b.set_store_failing(false);
    let (_, placement) = b.push_or_spill(vec![item("a", 11, 11)], log).unwrap();
    assert_eq!(placement, Placement::Spilled, "once spilled, logged until the refill caught up");
    assert_eq!(logged.get(), 3);
}

#[test]
fn under_pressure_something_is_always_due_even_when_sensors_span_two_hours() {
    let b = Buffers::new(config(100, 1000));
    // No hour buffer is as long as the average sensor's readings (25), though the buffers
    // hold half the bound: the hour "a" moved on from is due.
    b.push((0..20).map(|i| item("a", i, i)).collect()).unwrap();
    b.push((0..20).map(|i| item("a", HOUR_MS + i, 20 + i)).collect()).unwrap();
    b.push((0..10).map(|i| item("b", HOUR_MS + i, 40 + i)).collect()).unwrap();
    let taken =
        b.take(TakeMode::Due, usize::MAX, usize::MAX).expect("pressure always writes something");
    let batches: Vec<_> = taken.batches().iter().map(|b| (b.series.key(), b.hour)).collect();
    assert_eq!(batches, [("a", 0)]);
    let outcomes = vec![Outcome::Written; taken.batches().len()];
    b.complete(taken, &outcomes);
    // Under pressure, with nothing as long as the average sensor's (readings in flight count
    // in the average but cannot be taken): every buffer there is.
    let b = Buffers::new(config(60, 1000));
    b.push((0..20).map(|i| item("a", i, i)).collect()).unwrap();
    let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).unwrap();
    b.push((0..6).map(|i| item("a", 20 + i, 20 + i)).collect()).unwrap();
    b.push((0..6).map(|i| item("b", 20 + i, 40 + i)).collect()).unwrap();
    let again = b.take(TakeMode::Due, usize::MAX, usize::MAX).expect("pressure always writes");
    assert_eq!(again.readings(), 6, "the buffer without a write in flight");
    b.complete(again, &[Outcome::Written]);
    let outcomes = vec![Outcome::Written; taken.batches().len()];
    b.complete(taken, &outcomes);
    assert_eq!(b.buffered(), 6);
}

/// A reading of `key` at `ts` with a string field of `len` bytes beside the marker.
fn item_with_text(key: &str, ts: TimestampMs, seq: i64, len: usize) -> Item {
    let (series, mut reading) = item(key, ts, seq);
    reading.fields.push(("text".into(), FieldValue::Str("x".repeat(len))));
    (series, reading)
}

/// Every way bytes enter and leave the count (merges, relayouts, splits, retries with part
/// landed, drops, idle buffers and entries dropped) adds and releases the same amounts: once
/// everything is written and idle, the count is back at zero.
#[tokio::test(start_paused = true)]
async fn the_byte_count_returns_to_zero_whatever_became_of_the_readings() {
    let b = Buffers::new(config(usize::MAX, 1000));
    for round in 0..3i64 {
        let mut items: Vec<Item> = (0..40).map(|i| item("a", round * 100 + i, i)).collect();
        // Strings, and a field that appears late (every row is laid out anew).
        items.extend((0..10).map(|i| item_with_text("b", round * 100 + i, i, 100 + i as usize)));
        // A sensor in two hours at once: its hour buffers leave the entry for their own
        // allocation, and return to it once one is written and dropped.
        items.push(item("a", HOUR_MS + round, 41));
        items.push((item("c", HOUR_MS + round, 0).0, {
            let mut r = item("c", HOUR_MS + round, 0).1;
            r.fields.push((format!("late{round}").as_str().into(), FieldValue::Float(1.0)));
            r
        }));
        b.push(items).unwrap();
        assert!(b.buffered_bytes() > 0);
        // Split buffers (a cap inside one), a retry with part landed, then a drop.
        let taken = b.take(TakeMode::All, 25, usize::MAX).unwrap();
        let n = taken.batches().len();
        b.complete(taken, &vec![Outcome::Retry { landed: 10 }; n]);
        let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).unwrap();
        let n = taken.batches().len();
        let mut outcomes = vec![Outcome::Written; n];
        outcomes[0] = Outcome::Drop;
        b.complete(taken, &outcomes);
        assert_eq!(b.buffered(), 0);
        assert!(b.buffered_bytes() > 0, "the entries and emptied buffers are still there");
    }
    // Idle for an interval: the emptied buffers and then the entries go.
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(b.take(TakeMode::All, usize::MAX, usize::MAX).is_none());
    assert_eq!(b.sensors(), 0);
    assert_eq!(b.buffered_bytes(), 0);
}

#[test]
fn the_byte_bound_refuses_what_would_not_fit_and_counts_strings() {
    let b = Buffers::new(BufferConfig { max_buffered_bytes: 64 << 10, ..config(usize::MAX, 1000) });
    // 4 KiB strings: fifteen fit in 64 KiB with their rows, not twenty.
    let big = |n: i64| (0..n).map(|i| item_with_text("s", i, i, 4096)).collect::<Vec<_>>();
    assert!(matches!(b.push(big(20)), Err(BufferFull { unit: "bytes", .. })));
    assert_eq!(b.buffered_bytes(), 0, "a refused push leaves nothing counted");
    b.push(big(15)).unwrap();
    b.merge();
    let held = b.buffered_bytes();
    assert!((15 * 4096..=64 << 10).contains(&held), "{held}");
    assert!(b.push(big(1)).is_err(), "full");
    assert!(b.refuses_push_of(4096, false), "not even the smallest readings fit");
    let taken = b.take(TakeMode::All, usize::MAX, usize::MAX).unwrap();
    b.complete(taken, &[Outcome::Written]);
    assert!(
        b.buffered_bytes() < 1024,
        "only the entry and its emptied buffer: {}",
        b.buffered_bytes()
    );
    b.push(big(1)).unwrap();
}

#[test]
fn take_stops_at_its_byte_cap() {
    let b = Buffers::new(config(usize::MAX, 1000));
    let items: Vec<Item> =
        (0..10).map(|s| item_with_text(&format!("s{s}"), 0, s, 10_000)).collect();
    b.push(items).unwrap();
    let taken = b.take(TakeMode::All, usize::MAX, 25_000).unwrap();
    assert_eq!(taken.batches().len(), 2, "buffers are taken while they fit in 25,000 bytes");
    b.complete(taken, &[Outcome::Written; 2]);
}

/// A cycle's cap, filled by buffers due by pressure, never keeps a buffer due by age waiting:
/// its readings pin the log's oldest segment.
#[tokio::test(start_paused = true)]
async fn buffers_due_by_age_are_taken_before_those_due_by_pressure() {
    let b = Buffers::new(config(100, 1000));
    b.push(vec![item("old", 0, 0)]).unwrap();
    tokio::time::advance(Duration::from_millis(990)).await;
    // 60 more held of a bound of 100: pressure, and every new sensor is longer than average.
    for s in 0..3 {
        let items = (0..20).map(|i| item(&format!("p{s}"), i, i)).collect();
        b.push(items).unwrap();
    }
    let taken = b.take(TakeMode::Due, 20, usize::MAX).expect("due");
    let keys: Vec<&str> = taken.batches().iter().map(|b| b.series.key()).collect();
    assert_eq!(keys[0], "old", "{keys:?}");
    let n = taken.batches().len();
    b.complete(taken, &vec![Outcome::Written; n]);
}

/// A sensor's first hour buffer lives in its map entry and is counted once, with the entry:
/// with a million slow sensors, counting it twice put the buffers under pressure with one
/// reading each.
#[test]
fn a_new_sensor_counts_its_entry_and_its_rows() {
    let b = Buffers::new(config(usize::MAX, 1000));
    let two_floats = |i: usize| -> Item {
        let key = format!("m,sensor=s{i}");
        let fields = smallvec::smallvec![
            ("a".into(), FieldValue::Float(1.0)),
            ("b".into(), FieldValue::Float(2.0)),
        ];
        (SeriesMeta::untagged(&key, "m").into(), Reading { ts: 5, fields })
    };
    b.push((0..100).map(two_floats).collect()).unwrap();
    b.merge();
    // A head word and a word per field.
    assert_eq!(b.buffered_bytes(), 100 * (ENTRY_BYTES + 3 * size_of::<u64>()));
    b.push(vec![item("m,sensor=s0", HOUR_MS, 0)]).unwrap();
    b.merge();
    let spilled = b.buffered_bytes() - 100 * (ENTRY_BYTES + 3 * size_of::<u64>());
    // Its rows are two words.
    assert_eq!(spilled, HOUR_BYTES + 2 * size_of::<u64>(), "a second hour costs one buffer");
}

#[test]
fn hours_stay_sorted_and_the_first_stays_in_the_entry() {
    use super::entry::{HourBuffer, Hours};
    let hb = |hour| HourBuffer {
        hour,
        readings: Rows::default(),
        span: Span::EMPTY,
        since: Instant::now(),
        in_flight: None,
    };
    let insert = |hours: &mut Hours, hour| match hours.search(hour) {
        Err(i) => hours.insert(i, hb(hour)),
        Ok(_) => panic!("{hour} is there"),
    };
    let hours_of = |hours: &Hours| hours.iter().map(|h| h.hour).collect::<Vec<_>>();
    assert!(size_of::<Hours>() <= HOUR_BYTES + 16, "{}", size_of::<Hours>());
    let mut hours = Hours::default();
    assert!(hours.is_empty());
    insert(&mut hours, 2 * HOUR_MS);
    assert_eq!(hours.heap_bytes(), 0);
    for hour in [4, 1, 3] {
        insert(&mut hours, hour * HOUR_MS);
    }
    assert_eq!(hours_of(&hours), [1, 2, 3, 4].map(|h| h * HOUR_MS));
    assert_eq!((hours.len(), hours.heap_bytes()), (4, 3 * HOUR_BYTES));
    assert_eq!(hours.search(3 * HOUR_MS), Ok(2));
    assert_eq!(hours.search(5 * HOUR_MS), Err(4));
    hours[3].since = Instant::now();
    assert_eq!(hours.last().map(|h| h.hour), Some(4 * HOUR_MS));

    hours.retain(|h| h.hour != HOUR_MS && h.hour != 3 * HOUR_MS);
    assert_eq!(hours_of(&hours), [2 * HOUR_MS, 4 * HOUR_MS]);
    assert_eq!(hours.heap_bytes(), HOUR_BYTES);
    hours.retain(|h| h.hour == 4 * HOUR_MS);
    assert_eq!((hours_of(&hours), hours.heap_bytes()), (vec![4 * HOUR_MS], 0));
    hours.retain(|_| false);
    assert!(hours.is_empty() && hours.iter().next().is_none());
}

/// A sensor that moves into a new hour has its old hour written at the next take and then
/// dropped, so a fleet crossing an hour holds two buffers a sensor only until then.
#[tokio::test(start_paused = true)]
async fn an_hour_the_sensor_moved_on_from_is_written_and_dropped() {
    let b = Buffers::new(BufferConfig {
        flush_interval: Duration::from_secs(60),
        ..config(usize::MAX, 1000)
    });
    b.push(vec![item("s", HOUR_MS - 2, 0), item("s", HOUR_MS - 1, 1)]).unwrap();
    b.merge();
    let one_hour = b.buffered_bytes();
    // A pause shorter than the quiet time: the load is steady, not stopped.
    let steady = || b.push(vec![item("other", HOUR_MS, 9)]).unwrap();
    steady();
    assert!(b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none(), "nothing is due yet");
    b.push(vec![item("s", HOUR_MS, 2)]).unwrap();
    let taken = b.take(TakeMode::Due, usize::MAX, usize::MAX).expect("the old hour is due");
    assert_eq!(taken.batches().len(), 1);
    assert_eq!((taken.batches()[0].series.key(), taken.batches()[0].hour), ("s", 0));
    b.complete(taken, &[Outcome::Written]);
    steady();
    assert!(b.take(TakeMode::Due, usize::MAX, usize::MAX).is_none(), "the new hour waits");
    // The emptied old hour is gone and the new one is back inside the entry.
    let entry = b.map.get("s").unwrap();
    assert_eq!(entry.hours.iter().map(|h| h.hour).collect::<Vec<_>>(), [HOUR_MS]);
    assert_eq!(entry.heap_bytes(), 0);
    drop(entry);
    assert!(b.buffered_bytes() < one_hour + ENTRY_BYTES + 64, "{}", b.buffered_bytes());
}

#[test]
fn unflushed_sensors_leave_out_the_known_ones() {
    let b = Buffers::new(config(1000, 1000));
    b.push(vec![item("a", 10, 0), item("b", 20, 1), item("c", 30, 2)]).unwrap();
    let keys =
        |infos: Vec<crate::store::SensorInfo>| infos.into_iter().map(|i| i.key).collect::<Vec<_>>();
    assert_eq!(keys(b.unflushed_sensors()), ["a", "b", "c"]);
    assert_eq!(keys(b.unflushed_sensors_except(&|k| k == "b")), ["a", "c"]);
    assert!(b.unflushed_sensors_except(&|_| true).is_empty());
}
