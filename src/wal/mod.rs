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
//! thread, or, up to `spare::SPARE_FILES` of them, renamed to a spare that a later segment is
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
mod spare;
mod state;
#[cfg(test)]
mod tests;
mod writer;

pub use segment::Record;
pub use state::WalConfig;

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::model::{Seq, SeqRun, SettledRun};
use state::{Place, Segment, Shared, Start, State, Synced, lock, place};
use writer::{Writer, sync_dir};

const LOCK_FILE: &str = "LOCK";

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
        self.shared.publish_gauges(&st);
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

    /// Segments an earlier process left that are not yet read back whole: their readings are
    /// not counted in [`Wal::unsettled`] until read.
    pub fn replaying_segments(&self) -> u64 {
        lock(&self.shared.state).replaying_segments() as u64
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
