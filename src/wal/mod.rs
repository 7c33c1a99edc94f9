//! The write-ahead log: what makes a 2xx mean "on local disk" before the readings reach the
//! store.
//!
//! # Flow
//! Ingest encodes the accepted readings into a [`Record`] (outside any lock), then, under the
//! buffers' order mutex ([`crate::buffer::Buffers::push_or_spill`]), [`Wal::append`] gives the
//! record its first sequence number and copies it into the pending group, and the readings go
//! into the buffers, or, when those are full, stay in the log only until [`refill`] brings
//! them in. The request then awaits [`Wal::synced`]: one writer thread writes the pending
//! group and fsyncs it (`fdatasync`), one group at a time (and at most once per
//! `sync_interval` where that is set), so every request that arrived during the previous
//! fsync shares the next (group commit). A reading may reach the store before its record is
//! synced; that is harmless (see "Exactly once" in docs/design/ingest.md).
//!
//! # Segments
//! The log is a directory of segment files ([`segment`]), each named by its first sequence
//! number. Appends go to the newest; once it passes `segment_bytes` the next append starts
//! another. The flusher reports every reading stored or dropped ([`Wal::settle`]); a segment
//! that is no longer appended to and whose readings are all settled is deleted by the writer
//! thread, or, up to [`SPARE_FILES`] of them, renamed to a spare that a later segment is
//! written over: on ext4 and its kind an `fdatasync` of blocks a file already has skips the
//! journal commit that one extending the file needs, so a sync takes less time. A spare serves only this process (its sequence numbers are all
//! below the ones still to come, which is what tells a reused file's earlier bytes apart; see
//! [`segment`]); leftover spares are deleted at start and at close. `max_bytes` bounds the
//! whole directory, spares and the earlier length of reused files included: an append that
//! would pass it fails with [`WalError::Full`] (HTTP 503) until deletions make room.
//!
//! # Start-up
//! [`Wal::open`] finds the segments a previous process left; [`refill`] reads them back into
//! the buffers, skipping what the store already holds (its high-water marks), while new
//! writes wait in the log behind them; they are deleted like any other segment once settled.
//!
//! # Failure
//! A full disk is not a failure: a `write` (or a segment's creation) that fails with ENOSPC
//! or EDQUOT has not been synced, so the writer cuts the file back to its last synced length,
//! removes a segment file it created in that attempt, and writes the same group again once
//! there is room (retrying with backoff, deleting settled segments meanwhile). While it waits,
//! new appends are refused at once ([`WalError::NoSpace`], HTTP 507) and keep nothing, and the
//! requests already waiting for a sync get the same answer at once rather than hang: theirs is
//! the one case where a refused reading may still be logged and stored later (as after any
//! failure once a reading is in the buffers). The group is kept, not dropped, because the log
//! must stay in sequence order for the refill and settling.
//!
//! Any other failed write, and every failed fsync, poisons the log: the data may not be on
//! disk, and after a failed fsync Linux may have dropped the dirty pages, so retrying cannot
//! be trusted (an fsync that reports ENOSPC included). Every waiting and later append fails
//! ([`WalError::Failed`], HTTP 500) until a restart; the process keeps flushing what it holds,
//! and a restart replays what is on disk.

pub mod identity;
mod payload;
pub mod refill;
mod segment;
#[cfg(test)]
mod tests;

pub use segment::Record;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::metrics::{WAL_BYTES, WAL_SEGMENTS, WAL_SYNC_DURATION, WAL_SYNCS, WAL_UNSETTLED};
use crate::model::{Seq, SeqRun, SettledRun};
use segment::HEADER_BYTES;

/// Settled segment files kept for reuse, at most: enough for the writer to start the next
/// segment or two over one while the flusher settles the one after.
const SPARE_FILES: usize = 2;

/// How often the idle writer thread looks for segments to delete.
const IDLE_CHECK: Duration = Duration::from_millis(500);

/// First and longest wait before writing a group again on a full disk: short enough that
/// writes resume within a second of space being freed.
const NO_SPACE_RETRY_MIN: Duration = Duration::from_millis(50);
const NO_SPACE_RETRY_MAX: Duration = Duration::from_secs(1);

const LOCK_FILE: &str = "LOCK";

#[derive(Clone, Debug)]
pub struct WalConfig {
    pub dir: PathBuf,
    /// Group commit window: at most one fsync per this interval. Zero syncs as soon as the
    /// previous fsync finished.
    pub sync_interval: Duration,
    /// Bound on the log's bytes (on disk plus queued): appends past it fail with `Full`.
    pub max_bytes: u64,
    /// A segment past this size is closed and a new one started.
    pub segment_bytes: u64,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum WalError {
    #[error(
        "the write-ahead log is full: {used} of {limit} bytes (--wal-max-bytes) hold readings \
         not yet stored"
    )]
    Full { used: u64, limit: u64 },
    /// The log's disk is full; the writer retries and appends are refused until it has room.
    #[error("no space left on the write-ahead log's disk: {0}")]
    NoSpace(String),
    #[error(
        "the write-ahead log failed and accepts no more writes until bucketd is restarted: {0}"
    )]
    Failed(String),
    #[error("the write-ahead log is closed")]
    Closed,
    #[error("write-ahead log in {}: {why}", dir.display())]
    Open { dir: PathBuf, why: String },
    #[error("cannot encode readings for the write-ahead log: {0}")]
    Encode(String),
}

/// Returned by [`Wal::append`]; [`Wal::synced`] waits until its group is on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

pub struct Wal {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Held for the life of the log: a second process on the same directory would interleave
    /// segments and delete the other's.
    _lock: File,
}

struct Shared {
    config: WalConfig,
    state: Mutex<State>,
    /// Wakes the writer thread: pending bytes, deletable segments, closing.
    work: Condvar,
    synced: watch::Sender<Synced>,
    /// Makes the next group commit fail as a failed fsync would.
    #[cfg(test)]
    fail_next_write: std::sync::atomic::AtomicBool,
    /// Makes the next group commit's writes fail with ENOSPC this many times.
    #[cfg(test)]
    no_space_next_writes: std::sync::atomic::AtomicU32,
    /// While a test holds it, the writer thread takes no pending group: appends made
    /// meanwhile queue up as they would behind a slow fsync.
    #[cfg(test)]
    hold_writer: Mutex<()>,
}

#[derive(Clone, Debug, Default)]
struct Synced {
    /// Every group up to this one is on disk.
    group: u64,
    failed: Option<String>,
    /// The disk is full: groups after `group` are not confirmed while this is set.
    no_space: Option<String>,
}

struct State {
    /// Records appended but not yet handed to the writer.
    pending: Vec<u8>,
    /// Where in `pending` new segments start.
    pending_starts: Vec<Start>,
    /// The group number `pending` will be synced as.
    next_group: u64,
    /// Bytes of the log's files, written or pending: segments (a reused file's earlier length
    /// included until written over) and spares.
    used: u64,
    segments: BTreeMap<Seq, Segment>,
    /// Settled segment files renamed for reuse; the last is used next.
    spares: Vec<Spare>,
    next_spare: u64,
    /// The segment appends go to; `None` until the first append of this process.
    active: Option<Seq>,
    /// The segment the writer last wrote to: segments before it are completely on disk.
    writing: Option<Seq>,
    failed: Option<String>,
    /// Set while the writer waits for room on a full disk: appends are refused meanwhile.
    no_space: Option<String>,
    closing: bool,
}

struct Segment {
    /// Bytes written or pending.
    bytes: u64,
    /// The length of the file it was written over (0 for a new file): counted in `used` from
    /// the start, and its file is at least this long until deleted.
    reused: u64,
    /// Bytes on disk and fsync'd: what the refill may read.
    synced: u64,
    /// One past the last sequence number it holds.
    end: Seq,
    /// Readings in it not yet stored or dropped.
    unsettled: u64,
    /// No more appends (or, for a recovered segment, its replay has finished).
    sealed: bool,
    /// Left by an earlier process; nothing is written to it.
    recovered: bool,
}

impl Segment {
    /// The length of its file once what is pending is written.
    fn file_bytes(&self) -> u64 {
        self.bytes.max(self.reused)
    }
}

/// A settled segment's file, renamed to [`segment::spare_path`] to be written over.
#[derive(Clone, Copy, Debug)]
struct Spare {
    id: u64,
    bytes: u64,
}

/// Where in a group a new segment starts.
#[derive(Clone, Copy, Debug)]
struct Start {
    offset: usize,
    first: Seq,
    /// The spare its file is to be: renamed, and written over.
    spare: Option<u64>,
}

/// What the writer thread does with a file the log no longer needs.
#[derive(Debug)]
enum Doomed {
    Delete(Seq),
    /// Rename the segment's file to this spare.
    Keep(Seq, u64),
    /// A spare not needed any more (closing).
    DeleteSpare(u64),
}

/// Where the next record goes, and what it costs in bytes.
struct Place {
    new_segment: bool,
    /// Bytes it adds to its segment (a new segment's header included).
    needed: u64,
    /// A new segment's file's earlier length, when it is a spare written over.
    reused: u64,
    /// How much the log's files grow: a reused file only past its earlier length, which
    /// `used` counts already.
    grows: u64,
    /// The spare a new segment is written over.
    spare: Option<Spare>,
}

fn place(st: &State, config: &WalConfig, len: u64) -> Place {
    let active = st.active.map(|a| &st.segments[&a]);
    let spare = st.spares.last().copied();
    let plan = |new_segment: bool| {
        let needed = len + if new_segment { HEADER_BYTES as u64 } else { 0 };
        let (from, reused) = match (new_segment, active) {
            (false, Some(s)) => (s.bytes, s.reused),
            _ => (0, spare.map_or(0, |s| s.bytes)),
        };
        let grows = (from + needed).max(reused) - from.max(reused);
        Place { new_segment, needed, reused, grows, spare: spare.filter(|_| new_segment) }
    };
    let full = active
        .is_none_or(|s| s.bytes + len > config.segment_bytes && s.bytes > HEADER_BYTES as u64);
    let place = plan(full);
    if st.used + place.grows > config.max_bytes && !full && spare.is_some() {
        // A spare is room the log already holds: start the next segment over it early rather
        // than refuse while it sits unused (with the store down nothing settles).
        return plan(true);
    }
    place
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves consistent counters (every update is one
    // statement), so carrying on is safer than refusing every write.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `dir` holds segment files (an earlier `--ack=wal` run's log); false when it does
/// not exist.
pub fn has_segments(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| {
        entries.any(|e| e.is_ok_and(|e| segment::parse_file_name(&e.path()).is_some()))
    })
}

impl Wal {
    /// Opens (creating) the log directory and starts the writer thread. Returns the first
    /// sequence numbers of the segments an earlier process left, oldest first: pass them to
    /// [`refill::spawn`] before accepting writes.
    pub fn open(config: WalConfig) -> Result<(Arc<Wal>, Vec<Seq>), WalError> {
        let dir = config.dir.clone();
        let open_err = |why: String| WalError::Open { dir: dir.clone(), why };
        std::fs::create_dir_all(&dir).map_err(|e| open_err(format!("cannot create: {e}")))?;
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))
            .map_err(|e| open_err(format!("cannot open {LOCK_FILE}: {e}")))?;
        lock_file.try_lock().map_err(|_| {
            open_err(
                "already in use by another bucketd process (or another log in this one)".into(),
            )
        })?;

        let mut segments = BTreeMap::new();
        let mut used = 0;
        let mut stale_spares = false;
        let entries = std::fs::read_dir(&dir).map_err(|e| open_err(format!("cannot list: {e}")))?;
        for entry in entries {
            let entry = entry.map_err(|e| open_err(format!("cannot list: {e}")))?;
            let path = entry.path();
            if segment::is_spare(&path) {
                // An earlier process's: its numbers need not be below this one's.
                std::fs::remove_file(&path)
                    .map_err(|e| open_err(format!("cannot delete {}: {e}", path.display())))?;
                stale_spares = true;
                continue;
            }
            let Some(first) = segment::parse_file_name(&path) else { continue };
            let bytes = entry.metadata().map_err(|e| open_err(format!("{e}")))?.len();
            used += bytes;
            segments.insert(
                first,
                Segment {
                    bytes,
                    reused: 0,
                    synced: bytes,
                    end: first,
                    unsettled: 0,
                    sealed: false,
                    recovered: true,
                },
            );
        }
        if stale_spares {
            sync_dir(&dir).map_err(open_err)?;
        }
        let recovered: Vec<Seq> = segments.keys().copied().collect();
        let (synced, _) = watch::channel(Synced::default());
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(State {
                pending: Vec::new(),
                pending_starts: Vec::new(),
                next_group: 1,
                used,
                segments,
                spares: Vec::new(),
                next_spare: 0,
                active: None,
                writing: None,
                failed: None,
                no_space: None,
                closing: false,
            }),
            work: Condvar::new(),
            synced,
            #[cfg(test)]
            fail_next_write: std::sync::atomic::AtomicBool::new(false),
            #[cfg(test)]
            no_space_next_writes: std::sync::atomic::AtomicU32::new(0),
            #[cfg(test)]
            hold_writer: Mutex::new(()),
        });
        shared.publish_gauges(&lock(&shared.state));
        let thread_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("wal-writer".into())
            .spawn(move || Writer::new(thread_shared).run())
            .map_err(|e| open_err(format!("cannot start the writer thread: {e}")))?;
        let wal = Wal { shared, writer: Mutex::new(Some(writer)), _lock: lock_file };
        Ok((Arc::new(wal), recovered))
    }

    pub fn dir(&self) -> &Path {
        &self.shared.config.dir
    }

    pub fn max_bytes(&self) -> u64 {
        self.shared.config.max_bytes
    }

    /// Queues `record` with first sequence number `first_seq` for the next group commit.
    /// Call under the buffers' order mutex (`Buffers::push_or_spill`), so that log order is
    /// sequence order.
    pub fn append(&self, record: &Record, first_seq: Seq) -> Result<Ticket, WalError> {
        let shared = &self.shared;
        let mut st = lock(&shared.state);
        if let Some(why) = &st.failed {
            return Err(WalError::Failed(why.clone()));
        }
        if st.closing {
            return Err(WalError::Closed);
        }
        if let Some(why) = &st.no_space {
            return Err(WalError::NoSpace(why.clone()));
        }
        let limit = shared.config.max_bytes;
        let Place { new_segment, needed, reused, grows, spare } =
            place(&st, &shared.config, record.encoded_len() as u64);
        if st.used + grows > limit {
            return Err(WalError::Full { used: st.used, limit });
        }
        if new_segment {
            if let Some(active) = st.active {
                st.segments.get_mut(&active).expect("active segment is listed").sealed = true;
            }
            st.spares.pop();
            let segment = Segment {
                bytes: 0,
                reused,
                synced: 0,
                end: first_seq,
                unsettled: 0,
                sealed: false,
                recovered: false,
            };
            st.segments.insert(first_seq, segment);
            st.active = Some(first_seq);
            let offset = st.pending.len();
            st.pending_starts.push(Start { offset, first: first_seq, spare: spare.map(|s| s.id) });
        }
        record.finish_into(first_seq, &mut st.pending);
        st.used += grows;
        let active = st.active.expect("a segment was ensured");
        let segment = st.segments.get_mut(&active).expect("active segment is listed");
        segment.bytes += needed;
        segment.end = first_seq + u64::from(record.count());
        segment.unsettled += u64::from(record.count());
        let ticket = Ticket(st.next_group);
        shared.publish_gauges(&st);
        drop(st);
        shared.work.notify_one();
        Ok(ticket)
    }

    /// Whether a record of `len` bytes would fit in the log now (what `append` checks).
    pub fn has_room(&self, len: u64) -> bool {
        let st = lock(&self.shared.state);
        st.used + place(&st, &self.shared.config, len).grows <= self.shared.config.max_bytes
    }

    /// Waits until the group holding `ticket`'s record is on disk.
    pub async fn synced(&self, ticket: Ticket) -> Result<(), WalError> {
        let mut rx = self.shared.synced.subscribe();
        let synced = rx
            .wait_for(|s| s.group >= ticket.0 || s.failed.is_some() || s.no_space.is_some())
            .await
            .map_err(|_| WalError::Closed)?;
        match (&synced.failed, &synced.no_space) {
            _ if synced.group >= ticket.0 => Ok(()),
            (Some(why), _) => Err(WalError::Failed(why.clone())),
            // Not acknowledged; the writer still writes the group once there is room.
            (None, Some(why)) => Err(WalError::NoSpace(why.clone())),
            (None, None) => Err(WalError::Closed),
        }
    }

    /// Marks readings as stored or dropped for good (`seqs` ascending).
    pub fn settle(&self, seqs: &[Seq]) {
        self.settle_all(&[seqs]);
    }

    /// `settle` for many runs (each ascending) under one lock: a flush cycle's batches. A run
    /// is counted a segment at a time: by its first number's segment, and a binary search for
    /// where the run leaves it only when its last number is past that segment's end.
    pub fn settle_all<R: SeqRun>(&self, runs: &[R]) {
        let mut st = lock(&self.shared.state);
        let mut deletable = false;
        for run in runs {
            let n = run.len();
            // The first index in `from..n` whose number fails `below` (numbers ascend).
            let end_of = |from: usize, below: &dyn Fn(Seq) -> bool| {
                if n == 0 || below(run.seq_at(n - 1)) {
                    return n;
                }
                let (mut lo, mut hi) = (from, n - 1);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if below(run.seq_at(mid)) { lo = mid + 1 } else { hi = mid }
                }
                lo
            };
            let mut at = 0;
            while at < n {
                let seq = run.seq_at(at);
                let found = st.segments.range_mut(..=seq).next_back().filter(|(_, s)| seq < s.end);
                let Some((_, segment)) = found else {
                    // Not logged: written while the log only replayed (--ack=buffered).
                    at = end_of(at, &|s| s <= seq);
                    continue;
                };
                let end = segment.end;
                let next = end_of(at, &|s| s < end);
                segment.unsettled = segment.unsettled.saturating_sub((next - at) as u64);
                deletable |= segment.sealed && segment.unsettled == 0;
                at = next;
            }
        }
        self.shared.publish_gauges(&st);
        drop(st);
        if deletable {
            self.shared.work.notify_one();
        }
    }

    /// Replay bookkeeping: `n` readings of recovered segment `first` go back into the
    /// buffers, and its sequence numbers end before `end`.
    pub(in crate::wal) fn recovered_requeued(&self, first: Seq, end: Seq, n: u64) {
        let mut st = lock(&self.shared.state);
        if let Some(segment) = st.segments.get_mut(&first) {
            segment.end = segment.end.max(end);
            segment.unsettled += n;
        }
        self.shared.publish_gauges(&st);
    }

    /// Replay of recovered segment `first` has finished: it can go once settled.
    pub(in crate::wal) fn recovered_done(&self, first: Seq) {
        let mut st = lock(&self.shared.state);
        if let Some(segment) = st.segments.get_mut(&first) {
            segment.sealed = true;
        }
        drop(st);
        self.shared.work.notify_one();
    }

    /// Refill: the segment holding `seq` (or the first one after it).
    pub(in crate::wal) fn segment_for(&self, seq: Seq) -> Option<Seq> {
        let st = lock(&self.shared.state);
        let at_or_before = st.segments.range(..=seq).next_back().map(|(&first, _)| first);
        at_or_before.or_else(|| st.segments.range(seq..).next().map(|(&first, _)| first))
    }

    /// Refill: the segment after `first`.
    pub(in crate::wal) fn segment_after(&self, first: Seq) -> Option<Seq> {
        let st = lock(&self.shared.state);
        st.segments.range(first + 1..).next().map(|(&first, _)| first)
    }

    /// Refill: the intact records of segment `first` that start at byte `offset` (at most
    /// about `max_readings` readings, at least one record), within its synced length.
    pub(in crate::wal) fn read_at(
        &self,
        first: Seq,
        offset: u64,
        max_readings: usize,
    ) -> Result<segment::Chunk, WalError> {
        let (synced, bytes, final_size, recovered) = {
            let st = lock(&self.shared.state);
            match st.segments.get(&first) {
                Some(s) => (s.synced, s.bytes, s.sealed || s.recovered, s.recovered),
                // Deleted: everything in it was settled.
                None => return Ok(segment::Chunk { done: true, ..segment::Chunk::default() }),
            }
        };
        let path = segment::path_in(self.dir(), first);
        // A segment this process writes ends at its synced length; a recovered one's length is
        // its file's, which a reused file's earlier use may extend.
        let mut chunk = segment::read_chunk(&path, offset, synced, !recovered, max_readings)
            .map_err(|why| WalError::Open { dir: self.dir().to_owned(), why })?;
        // Done once nothing more can be appended and all of it has been read.
        chunk.done =
            final_size && (chunk.damage.is_some() || chunk.ended || chunk.next_offset >= bytes);
        Ok(chunk)
    }

    /// Whether segment `first` was left by an earlier process.
    pub(in crate::wal) fn is_recovered(&self, first: Seq) -> bool {
        lock(&self.shared.state).segments.get(&first).is_some_and(|s| s.recovered)
    }

    /// Readings in the log not yet stored or dropped.
    pub fn unsettled(&self) -> u64 {
        lock(&self.shared.state).segments.values().map(|s| s.unsettled).sum()
    }

    /// Bytes of the log, on disk and queued.
    pub fn used_bytes(&self) -> u64 {
        lock(&self.shared.state).used
    }

    /// Segment files currently kept.
    pub fn segment_count(&self) -> usize {
        lock(&self.shared.state).segments.len()
    }

    /// Writes and syncs what is queued, deletes what is settled (the newest segment too, if
    /// all of it is), and stops the writer. Appends fail from here on.
    pub fn close(&self) {
        lock(&self.shared.state).closing = true;
        self.shared.work.notify_one();
        let handle = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(handle) = handle
            && handle.join().is_err()
        {
            tracing::error!("the write-ahead log writer thread panicked");
        }
    }
}

impl crate::flush::Settle for Wal {
    fn settle(&self, runs: &[SettledRun<'_>]) {
        self.settle_all(runs);
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    fn publish_gauges(&self, st: &State) {
        ::metrics::gauge!(WAL_BYTES).set(st.used as f64);
        ::metrics::gauge!(WAL_SEGMENTS).set(st.segments.len() as f64);
        let unsettled: u64 = st.segments.values().map(|s| s.unsettled).sum();
        ::metrics::gauge!(WAL_UNSETTLED).set(unsettled as f64);
    }

    fn fail(&self, why: String) {
        tracing::error!(error = %why, dir = %self.config.dir.display(), "write-ahead log failed; writes are refused until restart");
        lock(&self.state).failed = Some(why.clone());
        self.synced.send_modify(|s| s.failed = Some(why));
    }
}

/// The writer thread: group commits and segment deletion.
struct Writer {
    shared: Arc<Shared>,
    /// The segment file being appended to, and its length.
    file: Option<(Seq, File)>,
    file_len: u64,
    /// Segment lengths made durable by the group being written.
    synced: Vec<(Seq, u64)>,
    last_sync: Option<Instant>,
}

impl Writer {
    fn new(shared: Arc<Shared>) -> Writer {
        Writer { shared, file: None, file_len: 0, synced: Vec::new(), last_sync: None }
    }

    fn run(mut self) {
        let shared = self.shared.clone();
        loop {
            let mut st = lock(&shared.state);
            while st.pending.is_empty() && !st.closing {
                let doomed = deletable(&mut st);
                if !doomed.is_empty() {
                    drop(st);
                    self.delete(doomed);
                    st = lock(&shared.state);
                    continue;
                }
                st = shared.work.wait_timeout(st, IDLE_CHECK).unwrap_or_else(|e| e.into_inner()).0;
            }
            if st.pending.is_empty() {
                // Closing with nothing queued.
                let doomed = deletable(&mut st);
                drop(st);
                self.delete(doomed);
                return;
            }
            // Group commit: let requests gather until the interval since the last sync ends.
            if let Some(last) = self.last_sync {
                let due = last + shared.config.sync_interval;
                let now = Instant::now();
                if due > now && !st.closing {
                    drop(st);
                    std::thread::sleep(due - now);
                    st = lock(&shared.state);
                }
            }
            #[cfg(test)]
            {
                drop(st);
                drop(shared.hold_writer.lock().unwrap_or_else(|e| e.into_inner()));
                st = lock(&shared.state);
            }
            let bytes = std::mem::take(&mut st.pending);
            let starts = std::mem::take(&mut st.pending_starts);
            let group = st.next_group;
            st.next_group += 1;
            drop(st);

            let started = Instant::now();
            self.last_sync = Some(started);
            if let Err(e) = self.write_until_room(&bytes, &starts) {
                shared.fail(e);
                return;
            }
            ::metrics::counter!(WAL_SYNCS).increment(1);
            ::metrics::histogram!(WAL_SYNC_DURATION).record(started.elapsed().as_secs_f64());
            let mut st = lock(&shared.state);
            st.writing = self.file.as_ref().map(|(seq, _)| *seq);
            for (first, len) in self.synced.drain(..) {
                if let Some(segment) = st.segments.get_mut(&first) {
                    segment.synced = segment.synced.max(len);
                }
            }
            let doomed = deletable(&mut st);
            drop(st);
            shared.synced.send_modify(|s| s.group = group);
            self.delete(doomed);
        }
    }

    /// Writes and syncs one group. On a full disk it undoes the attempt, refuses appends, and
    /// tries again (deleting settled segments meanwhile) until the group is written; fails on
    /// any other error, or when the log closes while the disk is still full.
    fn write_until_room(&mut self, bytes: &[u8], starts: &[Start]) -> Result<(), String> {
        let shared = self.shared.clone();
        let mut backoff = NO_SPACE_RETRY_MIN;
        let mut full_since: Option<Instant> = None;
        loop {
            let before = self.file.as_ref().map(|(seq, _)| *seq);
            let before_len = self.file_len;
            let why = match self.write(bytes, starts) {
                Ok(()) => break,
                Err(WriteError::Failed(why)) => return Err(why),
                Err(WriteError::NoSpace(why)) => why,
            };
            self.undo(before, before_len, starts)?;
            if full_since.is_none() {
                full_since = Some(Instant::now());
                tracing::warn!(error = %why, dir = %shared.config.dir.display(), "the write-ahead log's disk is full; writes are refused (507) until there is room");
            }
            let mut st = lock(&shared.state);
            st.no_space = Some(why.clone());
            shared.synced.send_modify(|s| s.no_space = Some(why.clone()));
            if st.closing {
                return Err(format!("closed while the disk was full: {why}"));
            }
            let doomed = deletable(&mut st);
            if doomed.is_empty() {
                drop(shared.work.wait_timeout(st, backoff).unwrap_or_else(|e| e.into_inner()));
                backoff = (backoff * 2).min(NO_SPACE_RETRY_MAX);
            } else {
                drop(st);
                self.delete(doomed);
            }
        }
        if let Some(since) = full_since {
            lock(&shared.state).no_space = None;
            // Cleared with the group's own confirmation, which follows at once: its waiters
            // were answered already, and later tickets wait for their own groups.
            shared.synced.send_modify(|s| s.no_space = None);
            tracing::info!(after = ?since.elapsed(), "the write-ahead log's disk has room again; writes are accepted");
        }
        Ok(())
    }

    /// Undoes a group's attempt that ran out of space: nothing of it was synced (an fsync
    /// error never gets here), so the segment files it created go and the file it appended to
    /// is cut back to `len`, its length after the previous group.
    fn undo(&mut self, before: Option<Seq>, len: u64, starts: &[Start]) -> Result<(), String> {
        let dir = self.shared.config.dir.clone();
        self.synced.clear();
        self.file = None;
        let mut removed = false;
        // A spare renamed in the attempt goes too, and the retry starts a new file: `used`
        // overcounts its earlier length until the segment is deleted, which errs on the safe
        // side.
        for start in starts {
            let path = segment::path_in(&dir, start.first);
            match std::fs::remove_file(&path) {
                Ok(()) => removed = true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot remove {}: {e}", path.display())),
            }
        }
        if removed {
            sync_dir(&dir)?;
        }
        if let Some(seq) = before {
            let path = segment::path_in(&dir, seq);
            let file = OpenOptions::new()
                .append(true)
                .open(&path)
                .and_then(|f| f.set_len(len).map(|()| f))
                .map_err(|e| format!("cannot cut {} back to {len} bytes: {e}", path.display()))?;
            self.file = Some((seq, file));
        }
        self.file_len = len;
        Ok(())
    }

    /// Writes one group, starting new segment files where `starts` says, and syncs it.
    fn write(&mut self, bytes: &[u8], starts: &[Start]) -> Result<(), WriteError> {
        #[cfg(test)]
        if self.shared.fail_next_write.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(WriteError::Failed("injected: fsync failed (EIO)".into()));
        }
        let dir = self.shared.config.dir.clone();
        let mut at = 0;
        for &Start { offset, first, spare } in starts {
            self.append(&bytes[at..offset])?;
            if let Some((seq, file)) = &self.file {
                let path = segment::path_in(&dir, *seq);
                file.sync_data().map_err(|e| fsync_error(&path, &e))?;
                self.synced.push((*seq, self.file_len));
            }
            let path = segment::path_in(&dir, first);
            let reused = spare.is_some_and(|id| {
                let spare = segment::spare_path(&dir, id);
                std::fs::rename(&spare, &path)
                    .inspect_err(|e| tracing::warn!(path = %spare.display(), error = %e, "cannot reuse a settled WAL segment; starting a new file"))
                    .is_ok()
            });
            // Written from its start, not appended: a reused file is written over.
            let mut file = OpenOptions::new()
                .create_new(!reused)
                .write(true)
                .open(&path)
                .map_err(|e| WriteError::io(format!("cannot create {}", path.display()), e))?;
            file.write_all(&segment::header(reused))
                .map_err(|e| WriteError::io(format!("write {}", path.display()), e))?;
            sync_dir(&dir).map_err(WriteError::Failed)?;
            self.file = Some((first, file));
            self.file_len = HEADER_BYTES as u64;
            at = offset;
        }
        self.append(&bytes[at..])?;
        if let Some((seq, file)) = &self.file {
            let path = segment::path_in(&dir, *seq);
            file.sync_data().map_err(|e| fsync_error(&path, &e))?;
            self.synced.push((*seq, self.file_len));
        }
        Ok(())
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), WriteError> {
        if bytes.is_empty() {
            return Ok(());
        }
        let Some((seq, file)) = &mut self.file else {
            return Err(WriteError::Failed("bytes queued before any segment was started".into()));
        };
        let path = || segment::path_in(&self.shared.config.dir, *seq);
        #[cfg(test)]
        if self
            .shared
            .no_space_next_writes
            .fetch_update(
                std::sync::atomic::Ordering::SeqCst,
                std::sync::atomic::Ordering::SeqCst,
                |n| n.checked_sub(1),
            )
            .is_ok()
        {
            // Half of it lands, as when the disk fills in the middle of a write.
            file.write_all(&bytes[..bytes.len() / 2]).expect("test write");
            let e = std::io::Error::from(std::io::ErrorKind::StorageFull);
            return Err(WriteError::io(format!("write {} (injected)", path().display()), e));
        }
        file.write_all(bytes)
            .map_err(|e| WriteError::io(format!("write {}", path().display()), e))?;
        self.file_len += bytes.len() as u64;
        Ok(())
    }

    fn delete(&mut self, doomed: Vec<Doomed>) {
        if doomed.is_empty() {
            return;
        }
        let dir = &self.shared.config.dir;
        let remove = |path: PathBuf| {
            let result = std::fs::remove_file(&path);
            (path, result)
        };
        for d in &doomed {
            if let Doomed::Delete(first) | Doomed::Keep(first, _) = *d
                && self.file.as_ref().is_some_and(|(seq, _)| *seq == first)
            {
                self.file = None;
            }
            let (path, result) = match *d {
                Doomed::Delete(first) => remove(segment::path_in(dir, first)),
                Doomed::DeleteSpare(id) => remove(segment::spare_path(dir, id)),
                Doomed::Keep(first, id) => {
                    let path = segment::path_in(dir, first);
                    let result = std::fs::rename(&path, segment::spare_path(dir, id));
                    (path, result)
                }
            };
            if let Err(e) = result
                && e.kind() != std::io::ErrorKind::NotFound
            {
                // A segment left behind is replayed (and skipped as stored) at the next start;
                // a spare that is missing is replaced by a new file when its turn comes; one
                // left behind is deleted at the next start.
                tracing::warn!(path = %path.display(), error = %e, "cannot delete or rename a settled WAL file");
            }
        }
        if let Err(e) = sync_dir(dir) {
            tracing::warn!(error = %e, "cannot fsync the WAL directory after deleting segments");
        }
        tracing::debug!(segments = doomed.len(), "deleted settled WAL segments");
    }
}

/// Removes from `st` the segments that can be deleted and returns them: sealed, settled, and
/// completely on disk (older than the one being written, or everything when closing). When
/// closing, a settled newest segment is sealed first. Up to [`SPARE_FILES`] of this
/// process's are kept as spares instead; when closing, spares go too.
fn deletable(st: &mut State) -> Vec<Doomed> {
    let closing = st.closing && st.pending.is_empty();
    if closing
        && let Some(active) = st.active
        && let Some(segment) = st.segments.get_mut(&active)
        && segment.unsettled == 0
    {
        segment.sealed = true;
    }
    let writing = st.writing;
    let doomed: Vec<Seq> = st
        .segments
        .iter()
        .filter(|&(&first, s)| {
            s.sealed
                && s.unsettled == 0
                && (s.recovered || closing || writing.is_some_and(|w| first < w))
        })
        .map(|(&first, _)| first)
        .collect();
    let mut out = Vec::with_capacity(doomed.len());
    for first in doomed {
        if st.active == Some(first) {
            st.active = None;
        }
        let Some(segment) = st.segments.remove(&first) else { continue };
        let bytes = segment.file_bytes();
        if !closing && !segment.recovered && st.spares.len() < SPARE_FILES {
            let id = st.next_spare;
            st.next_spare += 1;
            // Used last in, first out: the file written most recently is the likeliest to
            // still have its pages cached, so that writing over part of a page reads nothing.
            st.spares.push(Spare { id, bytes });
            out.push(Doomed::Keep(first, id));
        } else {
            st.used = st.used.saturating_sub(bytes);
            out.push(Doomed::Delete(first));
        }
    }
    if closing {
        for spare in std::mem::take(&mut st.spares) {
            st.used = st.used.saturating_sub(spare.bytes);
            out.push(Doomed::DeleteSpare(spare.id));
        }
    }
    if !out.is_empty() {
        ::metrics::gauge!(WAL_BYTES).set(st.used as f64);
        ::metrics::gauge!(WAL_SEGMENTS).set(st.segments.len() as f64);
    }
    out
}

/// Why a group could not be written.
enum WriteError {
    /// The disk is full and nothing of the attempt was synced: it can be undone and retried.
    NoSpace(String),
    /// Anything else: the log cannot be trusted any more.
    Failed(String),
}

impl WriteError {
    /// A failed `write` or file creation: out of space (or quota) is retriable.
    fn io(what: String, e: std::io::Error) -> WriteError {
        use std::io::ErrorKind::{QuotaExceeded, StorageFull};
        match e.kind() {
            StorageFull | QuotaExceeded => WriteError::NoSpace(format!("{what}: {e}")),
            _ => WriteError::Failed(format!("{what}: {e}")),
        }
    }
}

/// A failed fsync is never retried, whatever its error (ENOSPC included): the kernel may have
/// dropped the pages it could not write.
fn fsync_error(path: &Path, e: &std::io::Error) -> WriteError {
    WriteError::Failed(format!("fsync {}: {e}", path.display()))
}

/// Makes a file's creation or removal durable.
fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("fsync directory {}: {e}", dir.display()))
}
