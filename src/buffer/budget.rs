//! The memory bound's accounting (module doc of `buffer`, "The memory bound"): reserving a
//! push's readings and bytes before it is staged, waiting for room, and releasing what the
//! flusher confirmed.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::{BufferFull, Buffers};
use crate::metrics::{BUFFERED_BYTES, READINGS_BUFFERED, READINGS_BUFFERED_PEAK};

impl Buffers {
    /// Accounts for `n` readings just reserved, `held` now being `now`.
    pub(super) fn grew(&self, n: usize, now: usize) {
        ::metrics::gauge!(READINGS_BUFFERED).increment(n as f64);
        let before = self.peak.fetch_max(now, Ordering::AcqRel);
        if now > before {
            // Rare (only while the peak grows); the lock keeps a racing smaller `set` from
            // being the last word.
            let _publish = self.peak_publish.lock().unwrap_or_else(|e| e.into_inner());
            ::metrics::gauge!(READINGS_BUFFERED_PEAK).set(self.peak() as f64);
        }
    }

    pub(super) async fn wait_and_reserve(&self, n: usize, bytes: usize) {
        if n == 0 {
            return;
        }
        loop {
            // Register interest before checking, so a release between the check and the await
            // still wakes us.
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.reserve(n, bytes, true).is_ok() {
                return;
            }
            notified.await;
        }
    }

    pub(super) fn release(&self, n: usize, bytes: usize) {
        if n > 0 {
            self.held.fetch_sub(n, Ordering::AcqRel);
            ::metrics::gauge!(READINGS_BUFFERED).decrement(n as f64);
        }
        if bytes > 0 {
            self.held_bytes.fetch_sub(bytes, Ordering::AcqRel);
            ::metrics::gauge!(BUFFERED_BYTES).decrement(bytes as f64);
        }
        if n > 0 || bytes > 0 {
            self.room.notify_waiters();
        }
    }

    /// Counts what the buffers now hold beyond (or short of) what was reserved: `grown` bytes
    /// more, `shrunk` bytes less. Past the bound is allowed here: it is memory already in use.
    pub(super) fn rebalance(&self, grown: usize, shrunk: usize) {
        if grown > shrunk {
            let d = grown - shrunk;
            self.held_bytes.fetch_add(d, Ordering::AcqRel);
            ::metrics::gauge!(BUFFERED_BYTES).increment(d as f64);
        } else if shrunk > grown {
            self.release(0, shrunk - grown);
        }
    }

    /// Whether the flusher writes the larger buffers before they are due: from half of either
    /// bound on, so that the bound is reached only when the store cannot keep up (the other
    /// half is room for what arrives while the early writes run).
    pub(super) fn under_pressure(&self) -> bool {
        self.held_bytes.load(Ordering::Relaxed) >= self.config.max_buffered_bytes / 2
            || self.held.load(Ordering::Relaxed) >= (self.config.max_buffered_readings / 2).max(1)
    }

    /// Reserves room for `n` readings of `bytes`, all or nothing. With `oversize`, a push
    /// larger than the whole bound is let in when nothing is held.
    pub(super) fn reserve(&self, n: usize, bytes: usize, oversize: bool) -> Result<(), BufferFull> {
        if n == 0 {
            return Ok(());
        }
        let empty = self.held.load(Ordering::Acquire) == 0;
        bounded_add(&self.held_bytes, bytes, self.config.max_buffered_bytes, oversize && empty)
            .map_err(|buffered| BufferFull {
                buffered,
                limit: self.config.max_buffered_bytes,
                unit: "bytes",
            })?;
        match bounded_add(&self.held, n, self.config.max_buffered_readings, oversize && empty) {
            Ok(now) => {
                self.grew(n, now);
                ::metrics::gauge!(BUFFERED_BYTES).increment(bytes as f64);
                Ok(())
            }
            Err(buffered) => {
                self.held_bytes.fetch_sub(bytes, Ordering::AcqRel);
                Err(BufferFull {
                    buffered,
                    limit: self.config.max_buffered_readings,
                    unit: "readings",
                })
            }
        }
    }
}

/// Adds `n` to `held` if the sum stays within `limit` (or `always`); returns the new sum, or
/// what `held` was when it did not fit.
pub(super) fn bounded_add(
    held: &AtomicUsize,
    n: usize,
    limit: usize,
    always: bool,
) -> Result<usize, usize> {
    let mut cur = held.load(Ordering::Acquire);
    loop {
        let fits = cur.checked_add(n).is_some_and(|t| t <= limit) || (always && cur == 0);
        if !fits {
            return Err(cur);
        }
        match held.compare_exchange_weak(cur, cur + n, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(cur + n),
            Err(actual) => cur = actual,
        }
    }
}
