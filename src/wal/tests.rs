use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::buffer::{BufferConfig, BufferFull, Buffers};
use crate::model::{Batch, FieldValue, Item, Reading, SeriesMeta, SettledRun, WriterId};
use crate::store::memory::MemoryStore;
use crate::store::{BucketLimits, Store};
use crate::wal::identity::Identity;
use crate::wal::refill;
use crate::wal::segment::HEADER_BYTES;
use crate::wal::spare::SPARE_FILES;

/// What a push into the log can fail with, as `Buffers::push_or_spill` needs it.
#[derive(Debug)]
#[allow(dead_code)] // Read through `Debug` in failed assertions.
enum LogOrFull {
    Log(WalError),
    Full(BufferFull),
}

impl From<WalError> for LogOrFull {
    fn from(e: WalError) -> Self {
        LogOrFull::Log(e)
    }
}

impl From<BufferFull> for LogOrFull {
    fn from(e: BufferFull) -> Self {
        LogOrFull::Full(e)
    }
}

const IDENTITY: Identity = Identity { writer: WriterId(1), schema1_before: 0 };

fn item(sensor: usize, ts: i64) -> Item {
    (
        SeriesMeta::untagged(&format!("s{sensor}"), "m").into(),
        Reading { ts, fields: smallvec::smallvec![("v".into(), FieldValue::Float(ts as f64))] },
    )
}

fn config(dir: &Path, max_bytes: u64, segment_bytes: u64) -> WalConfig {
    WalConfig {
        dir: dir.to_owned(),
        sync_interval: Duration::from_millis(5),
        max_bytes,
        segment_bytes,
    }
}

fn segment_files(dir: &Path) -> Vec<Seq> {
    let mut out: Vec<Seq> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| segment::parse_file_name(&e.unwrap().path()))
        .collect();
    out.sort();
    out
}

fn append(wal: &Wal, items: &[Item], first: Seq) -> Ticket {
    wal.append(&Record::encode(items).unwrap(), first).unwrap()
}

#[tokio::test]
async fn appended_records_are_on_disk_once_synced() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, recovered) = Wal::open(config(dir.path(), 1 << 30, 1 << 20)).unwrap();
    assert!(recovered.is_empty());
    let t1 = append(&wal, &[item(1, 1), item(2, 2)], 100);
    let t2 = append(&wal, &[item(3, 3)], 102);
    wal.synced(t2).await.unwrap();
    wal.synced(t1).await.unwrap();
    let files = segment_files(dir.path());
    assert_eq!(files, vec![100]);
    let path = segment::path_in(dir.path(), 100);
    let len = std::fs::metadata(&path).unwrap().len();
    let read = segment::read_chunk(&path, 0, len, false, usize::MAX).unwrap();
    assert!(read.damage.is_none());
    assert_eq!(read.next_offset, len);
    let got: Vec<(Seq, usize)> =
        read.records.iter().map(|r| (r.first_seq, r.items.len())).collect();
    assert_eq!(got, vec![(100, 2), (102, 1)]);
    assert_eq!(wal.unsettled(), 3);
}

/// With no window (the default) and with one: either way the appends that arrive while a
/// sync is under way share the next one.
#[tokio::test]
async fn appends_made_while_the_writer_is_busy_share_one_fsync() {
    for window in [Duration::ZERO, Duration::from_millis(5)] {
        appends_made_while_the_writer_is_busy_share_one_fsync_with(window).await;
    }
}

async fn appends_made_while_the_writer_is_busy_share_one_fsync_with(window: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let config = WalConfig { sync_interval: window, ..config(dir.path(), 1 << 30, 1 << 30) };
    let (wal, _) = Wal::open(config).unwrap();
    let first = append(&wal, &[item(0, 0)], 1);
    wal.synced(first).await.unwrap();
    // The writer is held as if in a long fsync; 200 appends arrive meanwhile.
    let held = wal.shared.hold_writer.lock().unwrap();
    let tickets: Vec<Ticket> =
        (1..=200u64).map(|i| append(&wal, &[item(i as usize, i as i64)], i + 1)).collect();
    drop(held);
    for &t in &tickets {
        wal.synced(t).await.unwrap();
    }
    // One group, one write and fsync, for all of them: once the writer has stopped, the
    // group after the first is the last.
    assert!(tickets.iter().all(|&t| t == tickets[0]), "{tickets:?}");
    assert_eq!(tickets[0].0, first.0 + 1);
    wal.close();
    assert_eq!(wal.shared.synced.borrow().group, tickets[0].0);
    let path = segment::path_in(dir.path(), 1);
    let len = std::fs::metadata(&path).unwrap().len();
    let chunk = segment::read_chunk(&path, 0, len, false, usize::MAX).unwrap();
    assert_eq!(chunk.records.len(), 201);
}

/// A log in `dir` with segments of ~1 KiB and 20 synced records of 10 readings each (a few
/// hundred bytes a record), numbered from 1; returns it and the next number.
async fn twenty_synced_records(dir: &Path) -> (Arc<Wal>, Seq) {
    let (wal, _) = Wal::open(config(dir, 1 << 30, 1024)).unwrap();
    let mut seq = 1;
    let mut last = None;
    for _ in 0..20 {
        let items: Vec<_> = (0..10).map(|i| item(i, seq as i64)).collect();
        last = Some(append(&wal, &items, seq));
        seq += 10;
    }
    wal.synced(last.unwrap()).await.unwrap();
    (wal, seq)
}

#[tokio::test]
async fn settled_segments_are_deleted_or_kept_as_spares() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, seq) = twenty_synced_records(dir.path()).await;
    let before = segment_files(dir.path());
    assert!(before.len() >= 3, "{before:?}");
    let all: Vec<Seq> = (1..seq).collect();
    // Settling all but the newest segment's readings deletes the sealed ones.
    let newest = *before.last().unwrap();
    wal.settle(&all[..(newest - 1) as usize]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while segment_files(dir.path()).len() > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(segment_files(dir.path()), vec![newest]);
    assert_eq!(wal.segment_count(), 1);
    // Two of the deleted ones wait as spares, and count as bytes on disk.
    let (files, bytes) = log_files(dir.path());
    assert_eq!(files.iter().filter(|f| f.ends_with(".spare")).count(), SPARE_FILES, "{files:?}");
    assert_eq!(wal.used_bytes(), bytes);
    // The newest is deleted at close once settled, and the spares go too.
    wal.settle(&all[(newest - 1) as usize..]);
    assert_eq!(wal.unsettled(), 0);
    wal.close();
    assert_eq!(log_files(dir.path()), (vec![], 0));
}

/// The log directory's files but its lock, by name, and their total length.
fn log_files(dir: &Path) -> (Vec<String>, u64) {
    let mut names = Vec::new();
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name != LOCK_FILE {
            bytes += entry.metadata().unwrap().len();
            names.push(name);
        }
    }
    names.sort();
    (names, bytes)
}

/// Settled files are written over by later segments, and the log's byte count is what its
/// files take on disk. A crash replays exactly the readings of the segments still there (the
/// store would skip the settled ones among them): none of a reused file's earlier records,
/// wherever they lie after the new ones.
#[tokio::test]
async fn settled_files_are_written_over_and_a_crash_replays_only_what_is_unsettled() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(config(dir.path(), 1 << 30, 2048)).unwrap();
    let mut seq: Seq = 1;
    let mut settled_to: Seq = 1;
    let mut reused = std::collections::BTreeSet::new();
    for round in 0..12 {
        let mut last = None;
        // Records of one to ten readings: a reused file's earlier records seldom end where
        // the new ones do.
        for r in 0..7 {
            let n = 1 + (round * 7 + r) % 10;
            let items: Vec<_> = (0..n).map(|i| item(i, seq as i64 + i as i64)).collect();
            last = Some(append(&wal, &items, seq));
            seq += n as Seq;
        }
        wal.synced(last.unwrap()).await.unwrap();
        // All but the newest 25 readings are stored.
        let upto = seq - 25;
        wal.settle(&(settled_to..upto).collect::<Vec<_>>());
        settled_to = upto;
        // Caught up: its byte count is the files', and no segment but the newest is wholly
        // settled (the writer deletes or reuses those after the settle, on its own thread).
        let caught_up = || {
            let settled_segment = segment_files(dir.path()).get(1).is_some_and(|&f| f <= upto);
            wal.used_bytes() == log_files(dir.path()).1 && !settled_segment
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !caught_up() {
            assert!(Instant::now() < deadline, "the writer did not catch up");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (files, _) = log_files(dir.path());
        assert!(files.iter().filter(|f| f.ends_with(".spare")).count() <= SPARE_FILES);
        for first in segment_files(dir.path()) {
            if segment::is_reused(&segment::path_in(dir.path(), first)).unwrap() {
                reused.insert(first);
            }
        }
    }
    assert!(reused.len() >= 3, "segments written over settled files: {reused:?}");

    // A crash now: a copy of the directory as it is on disk.
    let copy = tempfile::tempdir().unwrap();
    for name in log_files(dir.path()).0 {
        std::fs::copy(dir.path().join(&name), copy.path().join(&name)).unwrap();
    }
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    let (replayed, _, buffers, stop, task) = replay(copy.path(), store);
    assert!(log_files(copy.path()).0.iter().all(|f| !f.ends_with(".spare")), "spares deleted");
    // Before the refill has run, no segment's readings are counted as unsettled yet: the
    // segments still to be read say that something is held.
    let segments = segment_files(copy.path()).len() as u64;
    assert_eq!((replayed.unsettled(), replayed.replaying_segments()), (0, segments));
    let deadline = Instant::now() + Duration::from_secs(60);
    while replayed.unsettled() < seq - segment_files(copy.path())[0]
        || buffers.spilled_from().is_some()
        || replayed.replaying_segments() > 0
    {
        assert!(Instant::now() < deadline, "the replay did not finish");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Every reading of the segments still there (the store here holds none of the settled
    // ones the replay would skip), and nothing else.
    let oldest = segment_files(copy.path())[0];
    assert!(oldest <= settled_to);
    let taken = buffers.take(crate::buffer::TakeMode::All, usize::MAX, usize::MAX).unwrap();
    let mut seqs: Vec<Seq> = taken.batches().iter().flat_map(|b| b.seqs()).collect();
    seqs.sort();
    assert_eq!(seqs, (oldest..seq).collect::<Vec<_>>());
    stop.cancel();
    task.await.unwrap();
    wal.close();
}

/// A segment this process writes over a settled file ends at its synced length, which the
/// refill reads up to: damage before it is reported, not taken for the earlier use's bytes.
#[tokio::test]
async fn damage_in_a_reused_segment_this_process_writes_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(config(dir.path(), 1 << 30, 2048)).unwrap();
    let mut seq: Seq = 1;
    let newest = loop {
        assert!(seq < 100_000, "no segment was written over a settled file");
        let items: Vec<_> = (0..5).map(|i| item(i, seq as i64 + i as i64)).collect();
        wal.synced(append(&wal, &items, seq)).await.unwrap();
        wal.settle(&(seq..seq + 5).collect::<Vec<_>>());
        seq += 5;
        let newest = *segment_files(dir.path()).last().unwrap();
        if segment::is_reused(&segment::path_in(dir.path(), newest)).unwrap() {
            break newest;
        }
    };
    let intact = wal.read_at(newest, 0, usize::MAX).unwrap();
    assert!(intact.damage.is_none() && !intact.ended && !intact.records.is_empty());
    // One bit of the first record's payload, changed in place.
    let path = segment::path_in(dir.path(), newest);
    let at = HEADER_BYTES + segment::RECORD_HEADER_BYTES;
    let byte = std::fs::read(&path).unwrap()[at] ^ 1;
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_at(&file, &[byte], at as u64).unwrap();
    let read = wal.read_at(newest, 0, usize::MAX).unwrap();
    assert!(read.records.is_empty() && !read.ended, "{read:?}");
    let damage = read.damage.expect("damage before the synced length is reported");
    assert!(damage.contains("checksum"), "{damage}");
    wal.close();
}

/// A spare is room the log already has: an append the bytes bound would refuse starts the next
/// segment over it instead, so a log whose store is down fills up to its bound.
#[tokio::test]
async fn a_full_log_writes_over_a_spare_before_refusing() {
    let dir = tempfile::tempdir().unwrap();
    let record_len = Record::encode(&[item(1, 1)]).unwrap().encoded_len() as u64;
    let segment_len = HEADER_BYTES as u64 + 2 * record_len;
    let limit = 2 * segment_len + HEADER_BYTES as u64 + record_len;
    let (wal, _) = Wal::open(config(dir.path(), limit, segment_len)).unwrap();
    let mut last = None;
    for seq in 1..=5 {
        last = Some(append(&wal, &[item(1, seq as i64)], seq));
    }
    wal.synced(last.unwrap()).await.unwrap();
    assert_eq!(segment_files(dir.path()), vec![1, 3, 5]);
    assert_eq!(wal.used_bytes(), limit);
    // The first segment settles and becomes a spare: the bytes stay counted.
    wal.settle(&[1, 2]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while segment_files(dir.path()) != vec![3, 5] {
        assert!(Instant::now() < deadline, "the settled segment was not set aside");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(wal.used_bytes(), limit);
    // Segment 5 has room for a record but the bound has not: 6 starts a segment over the spare.
    let t = append(&wal, &[item(1, 6)], 6);
    wal.synced(t).await.unwrap();
    assert_eq!(segment_files(dir.path()), vec![3, 5, 6]);
    assert_eq!(wal.used_bytes(), limit);
    assert_eq!(log_files(dir.path()).1, limit);
    // 7 fits in the file 6 was written over; after it, with no spare left, 8 is refused.
    let t = append(&wal, &[item(1, 7)], 7);
    wal.synced(t).await.unwrap();
    assert_eq!(log_files(dir.path()).1, limit);
    let refused = wal.append(&Record::encode(&[item(1, 8)]).unwrap(), 8).unwrap_err();
    assert!(matches!(refused, WalError::Full { .. }), "{refused:?}");
    wal.close();
}

/// A flush cycle settles each batch's first readings, their numbers read in place: a batch
/// whose readings span segments settles each segment its own share, a run cut short (a retry)
/// only its first readings, and numbers the log never had nothing.
#[tokio::test]
async fn batches_spanning_segments_settle_each_segment_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, seq) = twenty_synced_records(dir.path()).await;
    let starts = segment_files(dir.path());
    assert!(starts.len() >= 4, "{starts:?}");
    let batch = |seqs: Vec<Seq>| {
        let readings = seqs.iter().map(|&s| item(0, s as i64).1).collect();
        Batch::numbered(item(0, 0).0, 0, readings, seqs)
    };
    // Every odd number, and one past everything logged.
    let odd = batch((1..seq).step_by(2).chain([seq + 1000]).collect());
    wal.settle_all(&[SettledRun { batch: &odd, len: odd.len() }]);
    assert_eq!(wal.unsettled(), 100);
    // The even numbers up to 100, the rest of their batch not landed.
    let even = batch((2..seq).step_by(2).collect());
    wal.settle_all(&[SettledRun { batch: &even, len: 50 }]);
    assert_eq!(wal.unsettled(), 50);
    // Exactly the segments whose numbers all lie in 1..=100 are now settled, and go.
    let ends: Vec<Seq> = starts.iter().skip(1).copied().chain([seq]).collect();
    let gone: Vec<Seq> =
        starts.iter().zip(&ends).filter(|&(_, &end)| end <= 101).map(|(&s, _)| s).collect();
    assert!(!gone.is_empty() && gone.len() < starts.len(), "{starts:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while segment_files(dir.path()).len() > starts.len() - gone.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let kept: Vec<Seq> = starts.iter().copied().filter(|s| !gone.contains(s)).collect();
    assert_eq!(segment_files(dir.path()), kept);
    wal.close();
}

#[tokio::test]
async fn a_full_log_refuses_until_settling_makes_room() {
    let dir = tempfile::tempdir().unwrap();
    let record_len = Record::encode(&[item(1, 1)]).unwrap().encoded_len() as u64;
    let segment_len = HEADER_BYTES as u64 + 2 * record_len;
    let (wal, _) = Wal::open(config(dir.path(), 2 * segment_len, segment_len)).unwrap();
    let mut tickets = Vec::new();
    for seq in 1..=4 {
        tickets.push(append(&wal, &[item(1, seq as i64)], seq));
    }
    let refused = wal.append(&Record::encode(&[item(1, 5)]).unwrap(), 5).unwrap_err();
    assert!(matches!(refused, WalError::Full { .. }), "{refused:?}");
    for t in tickets {
        wal.synced(t).await.unwrap();
    }
    // Readings 1 and 2 fill the first segment; once stored it goes and makes room.
    wal.settle(&[1, 2]);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match wal.append(&Record::encode(&[item(1, 5)]).unwrap(), 5) {
            Ok(t) => {
                wal.synced(t).await.unwrap();
                break;
            }
            Err(WalError::Full { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("still refused: {e}"),
        }
    }
}

#[tokio::test]
async fn a_second_log_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_wal, _) = Wal::open(config(dir.path(), 1 << 20, 1 << 20)).unwrap();
    let Err(e) = Wal::open(config(dir.path(), 1 << 20, 1 << 20)) else { panic!("opened twice") };
    assert!(e.to_string().contains("already in use"), "{e}");
}

/// Reopens the log in `dir` and starts replaying what it holds into buffers of 100 readings
/// that are never due by age.
#[allow(clippy::type_complexity)]
fn replay(
    dir: &Path,
    store: Arc<MemoryStore>,
) -> (
    Arc<Wal>,
    Vec<Seq>,
    Arc<Buffers>,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let (wal, recovered) = Wal::open(config(dir, 1 << 20, 1 << 20)).unwrap();
    let buffers = Buffers::new(BufferConfig {
        max_buffered_bytes: usize::MAX,
        max_buffered_readings: 100,
        max_batch_readings: 100,
        flush_interval: Duration::from_secs(3600),
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let task = refill::spawn(
        wal.clone(),
        store,
        buffers.clone(),
        IDENTITY,
        None,
        &recovered,
        stop.clone(),
    );
    (wal, recovered, buffers, stop, task)
}

/// Readings of hours that ended longer than the retention ago are not brought back by the
/// replay, and settle like stored ones: the recovered segment still goes.
#[tokio::test]
async fn the_replay_skips_readings_older_than_the_retention() {
    let dir = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let this_hour = crate::model::hour_start(now);
    // Two readings of an hour that ended 2 h ago, one of the current hour.
    let old = this_hour - 3 * crate::model::HOUR_MS;
    let items = vec![item(0, old), item(0, old + 1), item(1, this_hour)];
    {
        let (wal, _) = Wal::open(config(dir.path(), 1 << 20, 1 << 20)).unwrap();
        let t = append(&wal, &items, 1000);
        wal.synced(t).await.unwrap();
    }
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    let (wal, recovered) = Wal::open(config(dir.path(), 1 << 20, 1 << 20)).unwrap();
    let buffers = Buffers::new(BufferConfig {
        max_buffered_bytes: usize::MAX,
        max_buffered_readings: 100,
        max_batch_readings: 100,
        flush_interval: Duration::from_secs(3600),
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let retention = Some(Duration::from_secs(3600));
    let task = refill::spawn(
        wal.clone(),
        store,
        buffers.clone(),
        IDENTITY,
        retention,
        &recovered,
        stop.clone(),
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while buffers.spilled_from().is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(buffers.spilled_from().is_none(), "the refill caught up");
    assert_eq!(buffers.buffered(), 1, "only the current hour's reading is back");
    assert_eq!(wal.unsettled(), 1, "the expired readings settled");
    assert!(buffers.unflushed("s0", i64::MIN, i64::MAX).is_empty());
    stop.cancel();
    task.await.unwrap();
}

/// What a crashed process left is replayed with its sequence numbers, minus what the store
/// already holds, while new pushes wait in the log behind it; the recovered segment goes once
/// all of it is stored.
#[tokio::test]
async fn the_refill_replays_what_the_store_lacks_before_newer_pushes() {
    let dir = tempfile::tempdir().unwrap();
    let items: Vec<_> = (0..10).map(|i| item(i % 2, i as i64)).collect();
    {
        let (wal, _) = Wal::open(config(dir.path(), 1 << 20, 1 << 20)).unwrap();
        let t = append(&wal, &items, 1000);
        wal.synced(t).await.unwrap();
        // Dropped without settling: as if the process died.
    }
    // The store already holds sensor s0's first two readings (seqs 1000 and 1002).
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    let s0 = items[0].0.clone();
    let stored =
        Batch::numbered(s0, 0, vec![items[0].1.clone(), items[2].1.clone()], vec![1000, 1002]);
    assert!(store.write(WriterId(1), &[stored]).await[0].is_ok());

    let (wal, recovered, buffers, stop, task) = replay(dir.path(), store);
    assert_eq!(recovered, vec![1000]);
    // A push right away is logged but waits behind the replay.
    let record = Record::encode(&[item(0, 50)]).unwrap();
    let (ticket, placement) = buffers
        .push_or_spill(vec![item(0, 50)], |first| {
            wal.append(&record, first).map_err(LogOrFull::from)
        })
        .unwrap();
    assert_eq!(placement, crate::buffer::Placement::Spilled);
    wal.synced(ticket).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while (buffers.spilled_from().is_some() || buffers.buffered() < 9) && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(buffers.spilled_from().is_none(), "the refill caught up");
    assert_eq!(buffers.buffered(), 9, "8 replayed (2 were stored) and the new one");
    let s0: Vec<i64> = buffers.unflushed("s0", 0, 100).iter().map(|r| r.ts).collect();
    assert_eq!(s0, vec![4, 6, 8, 50], "replayed first, then the newer push");
    assert_eq!(wal.unsettled(), 9);

    // Flushing them settles the recovered segment, which is then deleted.
    let taken = buffers.take(crate::buffer::TakeMode::All, 100, usize::MAX).unwrap();
    let mut seqs: Vec<Seq> = taken.batches().iter().flat_map(|b| b.seqs()).collect();
    seqs.sort();
    assert_eq!(seqs[..8], [1001, 1003, 1004, 1005, 1006, 1007, 1008, 1009]);
    assert!(seqs[8] > 1009);
    for b in taken.batches() {
        wal.settle(&b.seqs());
    }
    let outcomes = vec![crate::buffer::Outcome::Written; taken.batches().len()];
    buffers.complete(taken, &outcomes);
    let deadline = Instant::now() + Duration::from_secs(5);
    while segment_files(dir.path()).contains(&1000) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!segment_files(dir.path()).contains(&1000));
    stop.cancel();
    task.await.unwrap();
}

/// While the store fails, full buffers spill into the log instead of refusing; the refill
/// brings the readings in as room frees up, in order, and then pushes go straight to the
/// buffers again.
#[tokio::test]
async fn full_buffers_spill_into_the_log_and_come_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(config(dir.path(), 1 << 30, 4096)).unwrap();
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    let buffers = Buffers::new(BufferConfig {
        max_buffered_bytes: usize::MAX,
        max_buffered_readings: 10,
        max_batch_readings: 1000,
        flush_interval: Duration::from_secs(3600),
    });
    // A failing store: with a healthy one, full buffers refuse instead of spilling.
    buffers.set_store_failing(true);
    let stop = tokio_util::sync::CancellationToken::new();
    let task =
        refill::spawn(wal.clone(), store, buffers.clone(), IDENTITY, None, &[], stop.clone());
    let mut placements = Vec::new();
    for ts in 0..40 {
        let push = vec![item(0, ts)];
        let record = Record::encode(&push).unwrap();
        let (ticket, placement) = buffers
            .push_or_spill(push, |first| wal.append(&record, first).map_err(LogOrFull::from))
            .unwrap();
        wal.synced(ticket).await.unwrap();
        placements.push(placement);
    }
    use crate::buffer::Placement::{Buffered, Spilled};
    assert_eq!(placements[..10], [Buffered; 10]);
    assert_eq!(placements[10..], [Spilled; 30], "once spilled, everything waits in the log");
    assert_eq!(buffers.buffered(), 10);
    // Drain in rounds: each flush makes room, the refill fills it, oldest first.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.len() < 40 && Instant::now() < deadline {
        if let Some(taken) = buffers.take(crate::buffer::TakeMode::All, 1000, usize::MAX) {
            for b in taken.batches() {
                seen.extend(b.readings().map(|r| r.ts));
                wal.settle(&b.seqs());
            }
            let outcomes = vec![crate::buffer::Outcome::Written; taken.batches().len()];
            buffers.complete(taken, &outcomes);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(seen, (0..40).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(5);
    while buffers.spilled_from().is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(buffers.spilled_from().is_none(), "caught up: pushes go to the buffers again");
    let push = vec![item(0, 99)];
    let record = Record::encode(&push).unwrap();
    let (_, placement) = buffers
        .push_or_spill(push, |first| wal.append(&record, first).map_err(LogOrFull::from))
        .unwrap();
    assert_eq!(placement, Buffered);
    stop.cancel();
    task.await.unwrap();
}

/// A failed fsync poisons the log: the requests of that group and every later append fail
/// (they cannot be acknowledged), while what was synced before stays acknowledged.
#[tokio::test]
async fn a_failed_sync_fails_its_group_and_every_later_append() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(config(dir.path(), 1 << 20, 1 << 20)).unwrap();
    let before = append(&wal, &[item(1, 1)], 1);
    wal.synced(before).await.unwrap();
    wal.shared.fail_next_write.store(true, std::sync::atomic::Ordering::SeqCst);
    let doomed = append(&wal, &[item(1, 2)], 2);
    let err = wal.synced(doomed).await.unwrap_err();
    assert!(matches!(err, WalError::Failed(ref why) if why.contains("EIO")), "{err:?}");
    let refused = wal.append(&Record::encode(&[item(1, 3)]).unwrap(), 3).unwrap_err();
    assert!(matches!(refused, WalError::Failed(_)), "{refused:?}");
    // Synced before the failure: still reported as such.
    wal.synced(before).await.unwrap();
}

/// The replay asks only for its own writer's marks: another writer's newer mark on the same
/// (series, hour), even on the same buckets, says nothing about what this writer stored.
#[tokio::test]
async fn the_replay_ignores_other_writers_marks() {
    let dir = tempfile::tempdir().unwrap();
    let items: Vec<_> = (0..10).map(|i| item(0, i as i64)).collect();
    {
        let (wal, _) = Wal::open(config(dir.path(), 1 << 20, 1 << 20)).unwrap();
        let t = append(&wal, &items, 1000);
        wal.synced(t).await.unwrap();
    }
    // Another instance, whose numbers are far above ours, wrote the same sensor-hour.
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    let theirs = Batch::numbered(items[0].0.clone(), 0, vec![item(0, 500).1], vec![u64::MAX / 2]);
    assert!(store.write(WriterId(2), &[theirs]).await[0].is_ok());

    let (_wal, _, buffers, stop, task) = replay(dir.path(), store);
    let deadline = Instant::now() + Duration::from_secs(5);
    while buffers.spilled_from().is_some() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let replayed: Vec<i64> = buffers.unflushed("s0", 0, 1000).iter().map(|r| r.ts).collect();
    assert_eq!(replayed, (0..10).collect::<Vec<_>>(), "all ten replayed, none taken as stored");
    stop.cancel();
    task.await.unwrap();
}

/// However much the log holds, the refill inserts it in pieces that fit the room left, so the
/// memory bound holds throughout (the high-water gauge the buffers keep cannot miss a peak
/// between samples), and every reading reaches the store exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refill_keeps_the_memory_bound() {
    const BOUND: usize = 50;
    const READINGS: i64 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    {
        let (wal, _) = Wal::open(config(dir.path(), 1 << 30, 1 << 20)).unwrap();
        // Larger records than the bound, so a whole record does not fit either.
        for (r, chunk) in (0..READINGS).collect::<Vec<_>>().chunks(200).enumerate() {
            let items: Vec<Item> = chunk.iter().map(|&ts| item((ts % 7) as usize, ts)).collect();
            let t = append(&wal, &items, 1000 + r as u64 * 200);
            wal.synced(t).await.unwrap();
        }
    }
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    let (wal, recovered) = Wal::open(config(dir.path(), 1 << 30, 1 << 20)).unwrap();
    let buffers = Buffers::new(BufferConfig {
        max_buffered_bytes: usize::MAX,
        max_buffered_readings: BOUND,
        max_batch_readings: 20,
        flush_interval: Duration::from_millis(10),
    });
    let flusher = crate::flush::Flusher::spawn_settling(
        buffers.clone(),
        store.clone(),
        crate::flush::FlushConfig {
            writer: IDENTITY.writer,
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
            dead_letters: None,
            compact_after_quiet: None,
        },
        Some(wal.clone() as Arc<dyn crate::flush::Settle>),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let task = refill::spawn(
        wal.clone(),
        store.clone(),
        buffers.clone(),
        IDENTITY,
        None,
        &recovered,
        stop.clone(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while store.reading_count() < READINGS as usize && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(buffers.peak() <= BOUND, "peak {} > bound {BOUND}", buffers.peak());
    assert!(buffers.peak() > 0);
    let mut stored: Vec<i64> =
        (0..7).flat_map(|s| store.readings_of(&format!("s{s}"))).map(|r| r.ts).collect();
    stored.sort();
    assert_eq!(stored, (0..READINGS).collect::<Vec<_>>(), "each reading stored exactly once");
    stop.cancel();
    task.await.unwrap();
    flusher.shutdown(Duration::from_secs(5)).await;
}

/// A full disk is waited out: the group whose write ran out of space is undone (no torn half
/// record, no stray segment file), its waiters and later appends are refused meanwhile, and
/// once there is room the group is written and the log takes appends again.
#[tokio::test]
async fn a_full_disk_refuses_appends_and_the_log_resumes_once_there_is_room() {
    use std::sync::atomic::Ordering::SeqCst;
    // A large segment (the group appends to the synced one) and a tiny one (the group starts
    // a new segment file).
    for segment_bytes in [1 << 20, 1] {
        let dir = tempfile::tempdir().unwrap();
        let (wal, _) = Wal::open(config(dir.path(), 1 << 20, segment_bytes)).unwrap();
        let before = append(&wal, &[item(1, 1)], 1);
        wal.synced(before).await.unwrap();
        wal.shared.no_space_next_writes.store(u32::MAX, SeqCst);
        let waiting = append(&wal, &[item(1, 2), item(1, 3)], 2);
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&wal.shared.state).no_space.is_none() {
            assert!(Instant::now() < deadline, "the writer did not meet the full disk");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let refused = wal.append(&Record::encode(&[item(1, 9)]).unwrap(), 9).unwrap_err();
        assert!(
            matches!(refused, WalError::NoSpace(ref why) if why.contains("injected")),
            "{refused:?}"
        );
        let unconfirmed = wal.synced(waiting).await.unwrap_err();
        assert!(matches!(unconfirmed, WalError::NoSpace(_)), "{unconfirmed:?}");
        assert_eq!(segment_files(dir.path()), vec![1], "no segment file left by the attempt");
        wal.shared.no_space_next_writes.store(0, SeqCst);
        // Kept and written once there is room, in log order.
        let deadline_room = Instant::now() + Duration::from_secs(5);
        while wal.synced(waiting).await.is_err() {
            assert!(
                Instant::now() < deadline_room,
                "the group was not written once there was room"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(Instant::now() < deadline);
        let after = append(&wal, &[item(1, 4)], 4);
        wal.synced(after).await.unwrap();
        let mut got = Vec::new();
        for first in segment_files(dir.path()) {
            let path = segment::path_in(dir.path(), first);
            let len = std::fs::metadata(&path).unwrap().len();
            let read = segment::read_chunk(&path, 0, len, false, usize::MAX).unwrap();
            assert!(read.damage.is_none(), "segment {first}: {:?}", read.damage);
            got.extend(read.records.iter().map(|r| (r.first_seq, r.items.len())));
        }
        assert_eq!(got, vec![(1, 1), (2, 2), (4, 1)], "segment_bytes {segment_bytes}");
    }
}
