use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use metrics_util::debugging::DebuggingRecorder;
use proptest::prelude::*;
use tokio::time::{Instant, sleep};

use super::fake_store::FakeStore;
use super::*;
use crate::buffer::tests::{MetricReader, batch_seqs, item, seqs};
use crate::buffer::{BufferConfig, Buffers};
use crate::model::{HOUR_MS, TimestampMs};

fn setup(
    bound: usize,
    batch: usize,
    interval: Duration,
    store: FakeStore,
) -> (Arc<Buffers>, Arc<FakeStore>, Flusher) {
    setup_compacting(bound, batch, interval, store, None)
}

fn setup_compacting(
    bound: usize,
    batch: usize,
    interval: Duration,
    store: FakeStore,
    compact_after_quiet: Option<Duration>,
) -> (Arc<Buffers>, Arc<FakeStore>, Flusher) {
    let buffers = Buffers::new(BufferConfig {
        max_buffered_bytes: usize::MAX,
        max_buffered_readings: bound,
        max_batch_readings: batch,
        flush_interval: interval,
    });
    let store = Arc::new(store);
    let flusher = Flusher::spawn(
        buffers.clone(),
        store.clone(),
        FlushConfig {
            writer: WriterId(1),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            dead_letters: None,
            compact_after_quiet,
        },
    );
    (buffers, store, flusher)
}

/// Polls `cond` every virtual millisecond for at most `max`.
async fn wait_until(max: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + max;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        sleep(Duration::from_millis(1)).await;
    }
    cond()
}

/// Written sequence numbers per (sensor, hour), in the order the store received them.
fn written_by_buffer(store: &FakeStore) -> BTreeMap<(String, TimestampMs), Vec<i64>> {
    let mut out: BTreeMap<(String, TimestampMs), Vec<i64>> = BTreeMap::new();
    for batch in store.written() {
        out.entry((batch.series.key().to_owned(), batch.hour))
            .or_default()
            .extend(batch_seqs(&batch));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_full_buffer_is_written_within_a_tick_not_at_the_interval() {
    let (buffers, store, _flusher) = setup(1000, 10, Duration::from_secs(3600), FakeStore::new());
    // Let the flusher reach its wait (the longest tick, 250 ms).
    sleep(Duration::from_millis(5)).await;
    buffers.push((0..9).map(|i| item("a", i, i)).collect()).unwrap();
    assert!(!wait_until(Duration::from_secs(1), || store.written_readings() > 0).await);

    let start = Instant::now();
    buffers.push(vec![item("a", 9, 9)]).unwrap();
    assert!(wait_until(Duration::from_secs(10), || store.written_readings() == 10).await);
    assert!(start.elapsed() <= buffers.tick(), "taken at the next tick, not after the hour");
    assert!(wait_until(Duration::from_secs(1), || buffers.buffered() == 0).await);
}

#[tokio::test(start_paused = true)]
async fn a_merge_that_fills_a_buffer_wakes_the_flusher_before_the_tick() {
    let (buffers, store, _flusher) =
        setup(1_000_000, 10, Duration::from_secs(3600), FakeStore::new());
    sleep(Duration::from_millis(5)).await;
    // A push large enough to be merged at once, one sensor of it reaching the batch size.
    let start = Instant::now();
    let mut items: Vec<_> = (0..crate::buffer::STAGE_READINGS as i64)
        .map(|i| item(&format!("s{}", i % 10_000 + 1), i, i))
        .collect();
    items.extend((0..10).map(|i| item("a", i, i)));
    buffers.push(items).unwrap();
    assert!(wait_until(Duration::from_secs(10), || store.written_readings() >= 10).await);
    // The flusher's ticks count from its start, 5 ms before `start`, so its next tick comes
    // less than a tick after `start`: "before a tick" would not tell the wake from the tick.
    assert!(start.elapsed() < buffers.tick() / 2, "woken by the merge, not the tick");
}

#[tokio::test(start_paused = true)]
async fn an_old_buffer_is_flushed_within_the_interval_and_not_long_before() {
    let (buffers, store, _flusher) = setup(1000, 1000, Duration::from_secs(1), FakeStore::new());
    buffers.push((0..5).map(|i| item("a", i, i)).collect()).unwrap();
    // Another sensor keeps writing, so the server is never quiet: only age makes `a` due.
    let mut others = 5;
    for _ in 0..18 {
        sleep(Duration::from_millis(50)).await;
        buffers.push(vec![item("b", others, others)]).unwrap();
        others += 1;
    }
    assert!(store.written().iter().all(|b| b.series.key() != "a"), "not at 900 ms");
    // Due a tick (25 ms) before 1 s, found by the next tick.
    for _ in 0..2 {
        sleep(Duration::from_millis(50)).await;
        buffers.push(vec![item("b", others, others)]).unwrap();
        others += 1;
    }
    let a: Vec<_> = store.written().into_iter().filter(|b| b.series.key() == "a").collect();
    assert_eq!(a.len(), 1, "one batch");
    assert_eq!(batch_seqs(&a[0]), vec![0, 1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn the_store_is_compacted_once_per_quiet_spell_after_writes() {
    let quiet = Duration::from_secs(10);
    let (buffers, store, _flusher) =
        setup_compacting(1000, 1000, Duration::from_millis(100), FakeStore::new(), Some(quiet));
    // Nothing written yet: nothing to compact.
    sleep(Duration::from_secs(30)).await;
    assert!(store.compactions().is_empty());

    // Readings held for a long time (a failing store) are not quiet.
    store.fail_forever(true);
    buffers.push((0..5).map(|i| item("a", i, i)).collect()).unwrap();
    sleep(Duration::from_secs(30)).await;
    assert!(store.compactions().is_empty(), "asked while readings were buffered");

    store.fail_forever(false);
    assert!(wait_until(Duration::from_secs(10), || buffers.buffered() == 0).await);
    let written = *store.calls().last().unwrap();
    assert!(wait_until(Duration::from_secs(30), || !store.compactions().is_empty()).await);
    let first = store.compactions()[0];
    assert!(first >= written + quiet, "{:?} after the last write", first - written);
    assert!(first <= written + quiet + Duration::from_secs(1));
    sleep(Duration::from_secs(60)).await;
    assert_eq!(store.compactions().len(), 1, "again without writes in between");

    buffers.push(vec![item("a", 5, 5)]).unwrap();
    assert!(wait_until(Duration::from_secs(30), || store.compactions().len() == 2).await);
}

#[tokio::test(start_paused = true)]
async fn a_quiet_server_is_flushed_at_once() {
    let (buffers, store, _flusher) = setup(1000, 1000, Duration::from_secs(3600), FakeStore::new());
    buffers.push((0..5).map(|i| item("a", i, i)).collect()).unwrap();
    // Quiet after a fifth of the interval, at most 2 s; the tick is 250 ms.
    assert!(!wait_until(Duration::from_millis(1900), || store.written_readings() > 0).await);
    assert!(wait_until(Duration::from_millis(400), || store.written_readings() == 5).await);
    assert_eq!(buffers.buffered(), 0);
    assert_eq!(store.calls().len(), 1, "one write call for the cycle");
}

#[tokio::test(start_paused = true)]
async fn a_failing_store_recovers_without_loss_duplicates_or_reordering() {
    // Latency, so that newer readings arrive while the failing write is in flight.
    let store = FakeStore::with_latency(Duration::from_millis(20));
    store.fail_next_calls(3);
    let (buffers, store, _flusher) = setup(10_000, 1000, Duration::from_millis(50), store);
    let mut expected: BTreeMap<(String, TimestampMs), Vec<i64>> = BTreeMap::new();
    let mut seq = 0;
    let mut push_round = |buffers: &Buffers| {
        let mut items = Vec::new();
        for k in 0..4 {
            for hour in 0..2 {
                let key = format!("s{k}");
                for j in 0..5 {
                    items.push(item(&key, hour * HOUR_MS + j, seq));
                    expected.entry((key.clone(), hour * HOUR_MS)).or_default().push(seq);
                    seq += 1;
                }
            }
        }
        buffers.push(items).unwrap();
    };
    push_round(&buffers);
    assert!(wait_until(Duration::from_secs(1), || store.in_write() == 1).await);
    // Newer readings of the same buffers arrive while the first (failing) write is in flight.
    push_round(&buffers);
    assert!(wait_until(Duration::from_secs(10), || buffers.buffered() == 0).await);

    assert_eq!(written_by_buffer(&store), expected);
    let calls = store.calls();
    assert!(calls.len() >= 4);
    let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps[0] >= Duration::from_millis(100), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(200), "{gaps:?}");
    assert!(gaps[2] >= Duration::from_millis(400), "{gaps:?}");
    assert!(gaps[2] < Duration::from_millis(500), "retried promptly after backoff: {gaps:?}");
    assert_eq!(store.calls().len(), 4, "the retry carries the newer readings too");
}

#[tokio::test(start_paused = true)]
async fn backoff_resets_after_a_successful_cycle() {
    let store = FakeStore::new();
    store.fail_next_calls(2);
    let (buffers, store, _flusher) = setup(10_000, 1, Duration::from_secs(3600), store);
    buffers.push(vec![item("a", 0, 0)]).unwrap();
    assert!(wait_until(Duration::from_secs(10), || buffers.buffered() == 0).await);
    store.fail_next_calls(1);
    buffers.push(vec![item("a", 1, 1)]).unwrap();
    assert!(wait_until(Duration::from_secs(10), || buffers.buffered() == 0).await);
    let calls = store.calls();
    assert_eq!(calls.len(), 5);
    let retry_gap = calls[4] - calls[3];
    assert!(retry_gap >= Duration::from_millis(100) && retry_gap < Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn a_permanent_rejection_drops_only_that_batch_and_counts_it() {
    let recorder = DebuggingRecorder::new();
    let m = MetricReader::new(&recorder);
    // The current-thread runtime runs the flusher task on this thread, so it records here.
    let _guard = ::metrics::set_default_local_recorder(&recorder);

    let store = FakeStore::new();
    store.reject_sensor("bad");
    let (buffers, store, _flusher) = setup(1000, 1000, Duration::from_millis(100), store);
    let mut items: Vec<_> = (0..10).map(|i| item("good", i, i)).collect();
    items.extend((10..15).map(|i| item("bad", i, i)));
    buffers.push(items).unwrap();
    assert!(wait_until(Duration::from_secs(5), || buffers.buffered() == 0).await);

    let written = store.written();
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].series.key(), "good");
    assert_eq!(batch_seqs(&written[0]), (0..10).collect::<Vec<_>>());
    assert_eq!(m.get(READINGS_DROPPED, &[("reason", "rejected")]), 5.0);
    assert_eq!(m.get(STORE_ERRORS, &[("kind", "rejected")]), 1.0);
    assert_eq!(m.get(FLUSHES, &[("result", "rejected")]), 1.0);
    assert_eq!(m.get(FLUSHES, &[("result", "ok")]), 1.0);
    assert_eq!(m.get(FLUSHES, &[("result", "retry")]), 0.0);
    assert_eq!(m.get(BUCKETS_CREATED, &[]), 1.0);
    assert_eq!(m.get(FLUSH_READINGS, &[]), 1.0, "one histogram sample per write call");
    assert_eq!(m.get(crate::metrics::READINGS_BUFFERED, &[]), 0.0);
    assert!(buffers.unflushed("bad", 0, 100).is_empty());
}

fn setup_with_dead_letters(
    store: FakeStore,
    dead_letters: Arc<DeadLetters>,
) -> (Arc<Buffers>, Arc<FakeStore>, Flusher) {
    let buffers = Buffers::new(BufferConfig {
        max_buffered_bytes: usize::MAX,
        max_buffered_readings: 1000,
        max_batch_readings: 1000,
        flush_interval: Duration::from_millis(100),
    });
    let store = Arc::new(store);
    let config = FlushConfig {
        writer: WriterId(1),
        min_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        dead_letters: Some(dead_letters),
        compact_after_quiet: None,
    };
    let flusher = Flusher::spawn(buffers.clone(), store.clone(), config);
    (buffers, store, flusher)
}

#[tokio::test(start_paused = true)]
async fn a_permanent_rejection_keeps_the_batch_as_dead_letters_with_the_reason() {
    let recorder = DebuggingRecorder::new();
    let m = MetricReader::new(&recorder);
    let _guard = ::metrics::set_default_local_recorder(&recorder);
    let dir = tempfile::tempdir().unwrap();
    let dead_letters = Arc::new(DeadLetters::open(dir.path().to_owned(), 1 << 20).unwrap());

    let store = FakeStore::new();
    store.reject_sensor("bad");
    let (buffers, store, _flusher) = setup_with_dead_letters(store, dead_letters.clone());
    let mut items: Vec<_> = (0..10).map(|i| item("good", i, i)).collect();
    items.extend((10..15).map(|i| item("bad", i, i)));
    buffers.push(items).unwrap();
    assert!(wait_until(Duration::from_secs(5), || buffers.buffered() == 0).await);

    assert_eq!(store.written().len(), 1);
    let files = dead_letters.files().unwrap();
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let blocks: Vec<_> = dead_letter::blocks(&text, 0).collect();
    assert_eq!(blocks.len(), 1, "{text}");
    assert_eq!(blocks[0].lines.lines().count(), 5, "{text}");
    assert!(text.starts_with("# rejected ") && text.contains("by fake: "), "{text}");
    assert_eq!(dead_letters.counts().readings_total, 5);
    assert_eq!(m.get(DEAD_LETTER_READINGS, &[]), 5.0);
    assert_eq!(m.get(READINGS_DROPPED, &[("reason", "rejected")]), 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_refused_batch_with_no_room_for_its_dead_letters_is_kept_for_retry() {
    let dir = tempfile::tempdir().unwrap();
    // Room for nothing: every block is refused.
    let dead_letters = Arc::new(DeadLetters::open(dir.path().to_owned(), 10).unwrap());
    let store = FakeStore::new();
    store.reject_sensor("bad");
    let (buffers, store, _flusher) = setup_with_dead_letters(store, dead_letters.clone());
    buffers.push((0..5).map(|i| item("bad", i, i)).collect()).unwrap();
    // The store is asked again and again (with backoff), and the readings stay.
    assert!(wait_until(Duration::from_secs(5), || store.calls().len() >= 3).await);
    assert_eq!(buffers.buffered(), 5);
    assert!(dead_letters.files().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn shutdown_flushes_everything_even_when_not_due() {
    let (buffers, store, flusher) =
        setup(100_000, 100_000, Duration::from_secs(3600), FakeStore::new());
    for k in 0..5 {
        buffers.push((0..100).map(|i| item(&format!("s{k}"), i, i)).collect()).unwrap();
    }
    // Less than a tick: five pushes at one instant and then none make a quiet server after
    // a tick (`Buffers::quiet_after`), which would write everything before the shutdown.
    sleep(buffers.tick() / 2).await;
    assert_eq!(store.written_readings(), 0, "nothing is due yet");
    let report = flusher.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report, ShutdownReport { flushed: 500, unflushed: 0, kept_in_wal: false });
    assert_eq!(store.written_readings(), 500);
    assert_eq!(buffers.buffered(), 0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_more_than_one_write_call() {
    let (buffers, store, flusher) =
        setup(1_000_000, 1_000_000, Duration::from_secs(3600), FakeStore::new());
    let n = MAX_READINGS_PER_WRITE + 10;
    buffers.push((0..n as i64).map(|i| item("a", i % HOUR_MS, i)).collect()).unwrap();
    let report = flusher.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report, ShutdownReport { flushed: n, unflushed: 0, kept_in_wal: false });
    assert_eq!(store.calls().len(), 2);
    let batches = store.written();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0].len(), MAX_READINGS_PER_WRITE);
    assert_eq!(
        batch_seqs(&batches[1]),
        (MAX_READINGS_PER_WRITE as i64..n as i64).collect::<Vec<_>>()
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_with_a_dead_store_returns_at_the_deadline_with_the_count() {
    let store = FakeStore::new();
    store.fail_forever(true);
    let (buffers, store, flusher) = setup(1000, 1000, Duration::from_millis(100), store);
    buffers.push((0..50).map(|i| item("a", i, i)).collect()).unwrap();
    sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    let report = flusher.shutdown(Duration::from_secs(2)).await;
    assert_eq!(report, ShutdownReport { flushed: 0, unflushed: 50, kept_in_wal: false });
    let took = start.elapsed();
    assert!(took >= Duration::from_secs(2) && took < Duration::from_millis(2100), "{took:?}");
    // One write, then the flusher keeps asking whether it landed (it must not write again
    // before it knows).
    assert_eq!(store.calls().len(), 1);
    assert!(store.high_water_calls() >= 3, "kept asking during the drain");
    assert_eq!(buffers.unflushed("a", 0, 100).len(), 50, "still visible, nothing released");
}

#[tokio::test(start_paused = true)]
async fn shutdown_during_a_hung_write_reports_the_in_flight_readings() {
    let (buffers, store, flusher) = setup(
        1000,
        10,
        Duration::from_secs(3600),
        FakeStore::with_latency(Duration::from_secs(60)),
    );
    buffers.push((0..10).map(|i| item("a", i, i)).collect()).unwrap();
    buffers.push((0..3).map(|i| item("b", i, i)).collect()).unwrap();
    assert!(wait_until(Duration::from_secs(1), || store.in_write() == 1).await);
    let report = flusher.shutdown(Duration::from_secs(1)).await;
    assert_eq!(report, ShutdownReport { flushed: 0, unflushed: 13, kept_in_wal: false });
}

/// A store whose writes block gets a thread of its own, which cannot be aborted: at the
/// deadline its write in flight finishes (and is counted), and nothing after it starts.
#[tokio::test(start_paused = true)]
async fn a_flusher_on_its_own_thread_stops_after_the_write_in_flight_at_the_deadline() {
    let (buffers, store, flusher) =
        setup(1000, 10, Duration::from_secs(3600), FakeStore::blocking_at_a_gate());
    // A full buffer is due at once.
    buffers.push((0..10).map(|i| item("a", i, i)).collect()).unwrap();
    store.wait_for_a_write_at_the_gate();
    buffers.push((0..3).map(|i| item("b", i, i)).collect()).unwrap();
    let opener = async {
        // Later on the paused clock than the deadline, which has passed by then.
        sleep(Duration::from_millis(1)).await;
        store.open_gate();
    };
    let (report, ()) = tokio::join!(flusher.shutdown(Duration::ZERO), opener);
    assert_eq!(report, ShutdownReport { flushed: 10, unflushed: 3, kept_in_wal: false });
    assert_eq!(store.calls().len(), 1, "no write after the deadline");
    assert_eq!(buffers.unflushed("b", 0, 100).len(), 3);
}

#[tokio::test]
async fn a_flusher_on_its_own_thread_drains_everything_within_the_deadline() {
    let (buffers, store, flusher) =
        setup(1000, 10, Duration::from_secs(3600), FakeStore::blocking_at_a_gate());
    store.open_gate();
    buffers.push((0..10).map(|i| item("a", i, i)).collect()).unwrap();
    buffers.push((0..3).map(|i| item("b", i, i)).collect()).unwrap();
    let report = flusher.shutdown(Duration::from_secs(60)).await;
    assert_eq!(report, ShutdownReport { flushed: 13, unflushed: 0, kept_in_wal: false });
    assert_eq!(store.written_readings(), 13);
}

#[test]
fn a_flusher_on_its_own_thread_ends_with_the_runtime_that_started_it() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (_buffers, store, flusher) = runtime.block_on(async {
        setup(1000, 10, Duration::from_secs(3600), FakeStore::blocking_at_a_gate())
    });
    store.open_gate();
    drop(flusher);
    assert!(Arc::strong_count(&store) > 1, "a dropped handle leaves the flusher running");
    drop(runtime);
    // The thread returns, dropping its store. (The bound only keeps a failure from hanging.)
    let bound = std::time::Instant::now() + Duration::from_secs(60);
    while Arc::strong_count(&store) > 1 {
        assert!(std::time::Instant::now() < bound, "the flusher thread outlived its runtime");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[tokio::test(start_paused = true)]
async fn unflushed_includes_readings_whose_write_is_in_flight() {
    let (buffers, store, _flusher) =
        setup(1000, 10, Duration::from_secs(3600), FakeStore::with_latency(Duration::from_secs(1)));
    buffers.push((0..10).map(|i| item("a", i, i)).collect()).unwrap();
    assert!(wait_until(Duration::from_secs(1), || store.in_write() == 1).await);
    buffers.push(vec![item("a", 3, 10)]).unwrap();
    assert_eq!(store.written_readings(), 0);
    assert_eq!(buffers.buffered(), 11);
    // The buffered reading at 3 came after the one in flight: one point, the later winning.
    assert_eq!(seqs(&buffers.unflushed("a", 0, 100)), vec![0, 1, 2, 10, 4, 5, 6, 7, 8, 9]);
    assert_eq!(buffers.unflushed_sensors().len(), 1);

    assert!(wait_until(Duration::from_secs(2), || store.written_readings() == 10).await);
    assert_eq!(seqs(&buffers.unflushed("a", 0, 100)), vec![10]);
    assert_eq!(buffers.buffered(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_down_store_fills_the_bound_then_pushes_fail_until_it_recovers() {
    let store = FakeStore::new();
    store.fail_forever(true);
    let (buffers, store, _flusher) = setup(100, 1000, Duration::from_millis(50), store);
    for round in 0..10 {
        buffers.push((0..10).map(|i| item("a", i, round * 10 + i)).collect()).unwrap();
        sleep(Duration::from_millis(30)).await;
    }
    assert_eq!(buffers.buffered(), 100);
    assert!(buffers.push(vec![item("a", 0, 100)]).is_err());
    sleep(Duration::from_secs(5)).await;
    assert_eq!(buffers.buffered(), 100, "retriable failures never drop readings");

    store.fail_forever(false);
    assert!(wait_until(Duration::from_secs(5), || buffers.buffered() == 0).await);
    assert_eq!(
        store.written().iter().flat_map(batch_seqs).collect::<Vec<_>>(),
        (0..100).collect::<Vec<_>>()
    );
    assert!(buffers.push(vec![item("a", 0, 100)]).is_ok());
}

#[derive(Debug, Clone)]
struct Push {
    sensor: u8,
    hour: i64,
    count: usize,
    gap_ms: u64,
}

fn push_strategy() -> impl Strategy<Value = Push> {
    (0u8..4, 0i64..3, 1usize..40, 0u64..150).prop_map(|(sensor, hour, count, gap_ms)| Push {
        sensor,
        hour,
        count,
        gap_ms,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Random pushes against a store failing at random: every pushed reading is written
    /// exactly once, in arrival order per buffer, and the memory count returns to 0.
    #[test]
    fn every_reading_is_written_exactly_once(
        pushes in prop::collection::vec(push_strategy(), 1..30),
        failures in prop::collection::vec(prop::bool::weighted(0.3), 0..200),
        failing_calls in 0usize..4,
        bound in 20usize..200,
        batch in 1usize..30,
        latency_ms in 0u64..30,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let store = Arc::new(FakeStore::with_latency(Duration::from_millis(latency_ms)));
            store.fail_next_calls(failing_calls);
            store.script_batches(failures);
            let buffers = Buffers::new(BufferConfig {
                max_buffered_bytes: usize::MAX,
                max_buffered_readings: bound,
                max_batch_readings: batch,
                flush_interval: Duration::from_millis(100),
            });
            let flusher = Flusher::spawn(buffers.clone(), store.clone(), FlushConfig {
                writer: WriterId(1),
                min_backoff: Duration::from_millis(1),
                max_backoff: Duration::from_millis(50),
                dead_letters: None,
                compact_after_quiet: None,
            });
            let mut expected: BTreeMap<(String, TimestampMs), Vec<i64>> = BTreeMap::new();
            let mut seq = 0i64;
            for p in pushes {
                let key = format!("s{}", p.sensor);
                let items: Vec<_> = (0..p.count)
                    .map(|j| {
                        let it = item(&key, p.hour * HOUR_MS + (j as i64 * 7919) % HOUR_MS, seq);
                        expected.entry((key.clone(), p.hour * HOUR_MS)).or_default().push(seq);
                        seq += 1;
                        it
                    })
                    .collect();
                prop_assert_eq!(buffers.push_when_room(items).await, p.count);
                prop_assert!(buffers.buffered() <= bound.max(p.count));
                sleep(Duration::from_millis(p.gap_ms)).await;
            }
            let report = flusher.shutdown(Duration::from_secs(3600)).await;
            prop_assert_eq!(report.unflushed, 0);
            prop_assert_eq!(buffers.buffered(), 0);
            prop_assert_eq!(written_by_buffer(&store), expected);
            Ok(())
        })?;
    }
}

#[test]
fn backoff_doubles_to_the_cap_and_resets() {
    let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
    let got: Vec<u128> = (0..5).map(|_| b.next().as_millis()).collect();
    assert_eq!(got, vec![100, 200, 350, 350, 350]);
    b.reset();
    assert_eq!(b.next(), Duration::from_millis(100));
}

#[test]
fn log_limiter_allows_one_line_per_period_and_carries_the_rest() {
    let mut l = LogLimiter::default();
    let t0 = Instant::now();
    assert_eq!(l.allow(t0, 2, 20), Some((0, 0)));
    assert_eq!(l.allow(t0 + Duration::from_millis(500), 3, 30), None);
    assert_eq!(l.allow(t0 + Duration::from_millis(900), 1, 10), None);
    assert_eq!(l.allow(t0 + Duration::from_millis(1000), 5, 50), Some((4, 40)));
}

/// A write that landed but reported a failure (a lost reply) is not written again: the
/// high-water mark shows it landed, and its readings are released as written.
#[tokio::test(start_paused = true)]
async fn a_lost_reply_is_not_written_twice() {
    let store = FakeStore::new();
    store.land_then_fail_next_calls(1);
    let (buffers, store, flusher) = setup(1000, 1000, Duration::from_millis(100), store);
    buffers.push((0..20).map(|i| item("a", i, i)).collect()).unwrap();
    buffers.push((0..5).map(|i| item("b", i, i)).collect()).unwrap();
    assert!(wait_until(Duration::from_secs(5), || buffers.buffered() == 0).await);
    let written = written_by_buffer(&store);
    assert_eq!(written[&("a".to_string(), 0)], (0..20).collect::<Vec<_>>(), "exactly once");
    assert_eq!(written[&("b".to_string(), 0)], (0..5).collect::<Vec<_>>());
    assert_eq!(store.calls().len(), 1, "nothing was written again");
    assert!(store.high_water_calls() >= 1);
    let report = flusher.shutdown(Duration::from_secs(1)).await;
    assert_eq!(report.unflushed, 0);
}

/// While the store cannot say what landed, the batch stays in flight: not written again, still
/// visible to queries, and newer readings of its hour wait behind it.
#[tokio::test(start_paused = true)]
async fn an_unanswered_high_water_question_holds_the_batch() {
    let store = FakeStore::new();
    store.land_then_fail_next_calls(1);
    store.marks_unavailable(true);
    let (buffers, store, flusher) = setup(1000, 1000, Duration::from_millis(100), store);
    buffers.push((0..10).map(|i| item("a", i, i)).collect()).unwrap();
    sleep(Duration::from_secs(3)).await;
    buffers.push((10..15).map(|i| item("a", i, i)).collect()).unwrap();
    sleep(Duration::from_secs(3)).await;
    assert_eq!(store.calls().len(), 1, "no write while the outcome is unknown");
    assert!(store.high_water_calls() >= 3);
    assert_eq!(buffers.unflushed("a", 0, 100).len(), 15);
    store.marks_unavailable(false);
    assert!(wait_until(Duration::from_secs(20), || buffers.buffered() == 0).await);
    assert_eq!(written_by_buffer(&store)[&("a".to_string(), 0)], (0..15).collect::<Vec<_>>());
    flusher.shutdown(Duration::from_secs(1)).await;
}

/// A batch that landed in part (a prefix, as `Store::write` promises) is retried from where
/// it stopped.
#[tokio::test]
async fn a_partly_landed_batch_is_retried_from_its_high_water_mark() {
    let buffers = Buffers::new(BufferConfig {
        max_buffered_bytes: usize::MAX,
        max_buffered_readings: 100,
        max_batch_readings: 100,
        flush_interval: Duration::ZERO,
    });
    buffers.push((0..10).map(|i| item("a", i, i)).collect()).unwrap();
    let taken = buffers.take(TakeMode::All, 100, usize::MAX).unwrap();
    let seqs_taken = taken.batches()[0].seqs();
    assert_eq!(seqs_taken.len(), 10);
    assert!(seqs_taken.windows(2).all(|w| w[0] < w[1]), "increasing: {seqs_taken:?}");
    let released = buffers.complete(taken, &[Outcome::Retry { landed: 4 }]);
    assert_eq!(released.written, 4);
    assert_eq!(released.retried, 6);
    assert_eq!(buffers.buffered(), 6);
    let again = buffers.take(TakeMode::All, 100, usize::MAX).unwrap();
    assert_eq!(batch_seqs(&again.batches()[0]), (4..10).collect::<Vec<_>>());
    assert_eq!(again.batches()[0].seqs(), seqs_taken[4..]);
    buffers.complete(again, &[Outcome::Written]);
    assert_eq!(buffers.buffered(), 0);
}
