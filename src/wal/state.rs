//! What the appending side and the writer thread share: the log's state under one mutex
//! (pending bytes, segments, spares, failures), the sync watch, and where the next record goes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use super::segment::HEADER_BYTES;
use crate::metrics::{WAL_BYTES, WAL_REPLAYING, WAL_SEGMENTS, WAL_UNSETTLED};
use crate::model::Seq;

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

pub(super) struct Shared {
    pub(super) config: WalConfig,
    pub(super) state: Mutex<State>,
    /// Wakes the writer thread: pending bytes, deletable segments, closing.
    pub(super) work: Condvar,
    pub(super) synced: watch::Sender<Synced>,
    /// Makes the next group commit fail as a failed fsync would.
    #[cfg(test)]
    pub(super) fail_next_write: std::sync::atomic::AtomicBool,
    /// Makes the next group commit's writes fail with ENOSPC this many times.
    #[cfg(test)]
    pub(super) no_space_next_writes: std::sync::atomic::AtomicU32,
    /// While a test holds it, the writer thread takes no pending group: appends made
    /// meanwhile queue up as they would behind a slow fsync.
    #[cfg(test)]
    pub(super) hold_writer: Mutex<()>,
}

#[derive(Clone, Debug, Default)]
pub(super) struct Synced {
    /// Every group up to this one is on disk.
    pub(super) group: u64,
    pub(super) failed: Option<String>,
    /// The disk is full: groups after `group` are not confirmed while this is set.
    pub(super) no_space: Option<String>,
}

pub(super) struct State {
    /// Records appended but not yet handed to the writer.
    pub(super) pending: Vec<u8>,
    /// Where in `pending` new segments start.
    pub(super) pending_starts: Vec<Start>,
    /// The group number `pending` will be synced as.
    pub(super) next_group: u64,
    /// Bytes of the log's files, written or pending: segments (a reused file's earlier length
    /// included until written over) and spares.
    pub(super) used: u64,
    pub(super) segments: BTreeMap<Seq, Segment>,
    /// Settled segment files renamed for reuse; the last is used next.
    pub(super) spares: Vec<Spare>,
    pub(super) next_spare: u64,
    /// The segment appends go to; `None` until the first append of this process.
    pub(super) active: Option<Seq>,
    /// The segment the writer last wrote to: segments before it are completely on disk.
    pub(super) writing: Option<Seq>,
    pub(super) failed: Option<String>,
    /// Set while the writer waits for room on a full disk: appends are refused meanwhile.
    pub(super) no_space: Option<String>,
    pub(super) closing: bool,
}

pub(super) struct Segment {
    /// Bytes written or pending.
    pub(super) bytes: u64,
    /// The length of the file it was written over (0 for a new file): counted in `used` from
    /// the start, and its file is at least this long until deleted.
    pub(super) reused: u64,
    /// Bytes on disk and fsync'd: what the refill may read.
    pub(super) synced: u64,
    /// One past the last sequence number it holds.
    pub(super) end: Seq,
    /// Readings in it not yet stored or dropped.
    pub(super) unsettled: u64,
    /// No more appends (or, for a recovered segment, its replay has finished).
    pub(super) sealed: bool,
    /// Left by an earlier process; nothing is written to it.
    pub(super) recovered: bool,
}

impl State {
    /// Segments an earlier process left whose replay has not finished.
    pub(super) fn replaying_segments(&self) -> usize {
        self.segments.values().filter(|s| s.recovered && !s.sealed).count()
    }
}

impl Segment {
    /// The length of its file once what is pending is written.
    pub(super) fn file_bytes(&self) -> u64 {
        self.bytes.max(self.reused)
    }
}

/// A settled segment's file, renamed to [`segment::spare_path`](super::segment::spare_path) to be written over.
#[derive(Clone, Copy, Debug)]
pub(super) struct Spare {
    pub(super) id: u64,
    pub(super) bytes: u64,
}

/// Where in a group a new segment starts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Start {
    pub(super) offset: usize,
    pub(super) first: Seq,
    /// The spare its file is to be: renamed, and written over.
    pub(super) spare: Option<u64>,
}

/// Where the next record goes, and what it costs in bytes.
pub(super) struct Place {
    pub(super) new_segment: bool,
    /// Bytes it adds to its segment (a new segment's header included).
    pub(super) needed: u64,
    /// A new segment's file's earlier length, when it is a spare written over.
    pub(super) reused: u64,
    /// How much the log's files grow: a reused file only past its earlier length, which
    /// `used` counts already.
    pub(super) grows: u64,
    /// The spare a new segment is written over.
    pub(super) spare: Option<Spare>,
}

pub(super) fn place(st: &State, config: &WalConfig, len: u64) -> Place {
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

pub(super) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic while holding the lock leaves consistent counters (every update is one
    // statement), so carrying on is safer than refusing every write.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(super) fn publish_gauges(&self, st: &State) {
        ::metrics::gauge!(WAL_BYTES).set(st.used as f64);
        ::metrics::gauge!(WAL_SEGMENTS).set(st.segments.len() as f64);
        let unsettled: u64 = st.segments.values().map(|s| s.unsettled).sum();
        ::metrics::gauge!(WAL_UNSETTLED).set(unsettled as f64);
        ::metrics::gauge!(WAL_REPLAYING).set(st.replaying_segments() as f64);
    }

    pub(super) fn fail(&self, why: String) {
        tracing::error!(error = %why, dir = %self.config.dir.display(), "write-ahead log failed; writes are refused until restart");
        lock(&self.state).failed = Some(why.clone());
        self.synced.send_modify(|s| s.failed = Some(why));
    }
}
