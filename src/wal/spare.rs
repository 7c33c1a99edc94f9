//! Settled segments: which are deleted, and which are kept as spares that a later segment is
//! written over (the module doc of the log says why).

use super::state::{Spare, State};
use crate::metrics::{WAL_BYTES, WAL_SEGMENTS};
use crate::model::Seq;

/// Settled segment files kept for reuse, at most: enough for the writer to start the next
/// segment or two over one while the flusher settles the one after.
pub(super) const SPARE_FILES: usize = 2;

/// What the writer thread does with a file the log no longer needs.
#[derive(Debug)]
pub(super) enum Doomed {
    Delete(Seq),
    /// Rename the segment's file to this spare.
    Keep(Seq, u64),
    /// A spare not needed any more (closing).
    DeleteSpare(u64),
}

/// Removes from `st` the segments that can be deleted and returns them: sealed, settled, and
/// completely on disk (older than the one being written, or everything when closing). When
/// closing, a settled newest segment is sealed first. Up to [`SPARE_FILES`] of this
/// process's are kept as spares instead; when closing, spares go too.
pub(super) fn deletable(st: &mut State) -> Vec<Doomed> {
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
