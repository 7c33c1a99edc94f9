//! The writer thread: writes each pending group and fsyncs it, waits for room on a full disk,
//! and deletes or keeps as spares the segments the flusher has settled.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::segment::{self, HEADER_BYTES};
use super::spare::{Doomed, deletable};
use super::state::{Shared, Start, lock};
use crate::metrics::{WAL_SYNC_DURATION, WAL_SYNCS};
use crate::model::Seq;

/// How often the idle writer thread looks for segments to delete.
pub(super) const IDLE_CHECK: Duration = Duration::from_millis(500);

/// First and longest wait before writing a group again on a full disk: short enough that
/// writes resume within a second of space being freed.
pub(super) const NO_SPACE_RETRY_MIN: Duration = Duration::from_millis(50);

pub(super) const NO_SPACE_RETRY_MAX: Duration = Duration::from_secs(1);

/// The writer thread: group commits and segment deletion.
pub(super) struct Writer {
    pub(super) shared: Arc<Shared>,
    /// The segment file being appended to, and its length.
    pub(super) file: Option<(Seq, File)>,
    pub(super) file_len: u64,
    /// Segment lengths made durable by the group being written.
    pub(super) synced: Vec<(Seq, u64)>,
    pub(super) last_sync: Option<Instant>,
}

impl Writer {
    pub(super) fn new(shared: Arc<Shared>) -> Writer {
        Writer { shared, file: None, file_len: 0, synced: Vec::new(), last_sync: None }
    }

    pub(super) fn run(mut self) {
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
    pub(super) fn write_until_room(
        &mut self,
        bytes: &[u8],
        starts: &[Start],
    ) -> Result<(), String> {
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
    pub(super) fn undo(
        &mut self,
        before: Option<Seq>,
        len: u64,
        starts: &[Start],
    ) -> Result<(), String> {
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
    pub(super) fn write(&mut self, bytes: &[u8], starts: &[Start]) -> Result<(), WriteError> {
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

    pub(super) fn append(&mut self, bytes: &[u8]) -> Result<(), WriteError> {
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

    pub(super) fn delete(&mut self, doomed: Vec<Doomed>) {
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

/// Why a group could not be written.
pub(super) enum WriteError {
    /// The disk is full and nothing of the attempt was synced: it can be undone and retried.
    NoSpace(String),
    /// Anything else: the log cannot be trusted any more.
    Failed(String),
}

impl WriteError {
    /// A failed `write` or file creation: out of space (or quota) is retriable.
    pub(super) fn io(what: String, e: std::io::Error) -> WriteError {
        use std::io::ErrorKind::{QuotaExceeded, StorageFull};
        match e.kind() {
            StorageFull | QuotaExceeded => WriteError::NoSpace(format!("{what}: {e}")),
            _ => WriteError::Failed(format!("{what}: {e}")),
        }
    }
}

/// A failed fsync is never retried, whatever its error (ENOSPC included): the kernel may have
/// dropped the pages it could not write.
pub(super) fn fsync_error(path: &Path, e: &std::io::Error) -> WriteError {
    WriteError::Failed(format!("fsync {}: {e}", path.display()))
}

/// Makes a file's creation or removal durable.
pub(super) fn sync_dir(dir: &Path) -> Result<(), String> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("fsync directory {}: {e}", dir.display()))
}
