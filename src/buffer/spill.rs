//! Pushes that may spill to the log: when the buffers are full and the store is failing, or
//! until the refill has brought in what an earlier process logged; and the log's replay.

use std::sync::atomic::Ordering;

use super::stage::Seqs;
use super::{BufferFull, Buffers, Placement, wall_clock_nanos};
use crate::model::{Item, Packed, Seq};

impl Buffers {
    /// For a caller with a durable log (`--ack=wal`): `log` runs under the order mutex with the
    /// first sequence number of the push (item `i` gets `first + i`); then the readings go into
    /// the buffers if they have room and nothing is spilled, else they stay in the log only, to
    /// be brought in later by [`Buffers::push_recovered`] (the refill), in order. When `log`
    /// fails nothing is kept. Keep `log` short: every push waits for it.
    ///
    /// Full-policy, by the store's state (docs/design/ingest.md, "Overload"):
    /// - the store is writing (its last write had no retriable failure) but slower than ingest:
    ///   refuse at once with [`BufferFull`], nothing logged. Spilling would only move the
    ///   backlog into the log, to be read back at a higher cost than the direct path.
    /// - the store is failing ([`Buffers::set_store_failing`]): spill to the log, which rides
    ///   out the outage; the log's own bound then refuses. Once spilled, every push is logged
    ///   only until the refill has caught up, whatever the store's state.
    pub fn push_or_spill<T, E: From<BufferFull>>(
        &self,
        items: Vec<Item>,
        log: impl FnOnce(Seq) -> Result<T, E>,
    ) -> Result<(T, Placement), E> {
        let n = items.len();
        // Packed outside the mutex, which every push waits for; wasted only if this push
        // spills (then the log alone keeps it).
        let readings = Packed::new(items);
        let bytes = readings.estimated_bytes();
        // One hold of the mutex from the decision to the insert: a push deciding to buffer must
        // not overtake one that spills.
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        let buffered = order.spilled_from.is_none()
            && match self.reserve(n, bytes, false) {
                Ok(()) => true,
                Err(full) if !self.store_failing.load(Ordering::Acquire) => return Err(full.into()),
                Err(_) => false,
            };
        let first = order.next.max(wall_clock_nanos());
        let logged = match log(first) {
            Ok(logged) => logged,
            Err(e) => {
                drop(order);
                if buffered {
                    self.release(n, bytes);
                }
                return Err(e);
            }
        };
        order.next = first + n as Seq;
        if buffered {
            self.stage(readings, bytes, Seqs::From(first), false);
            drop(order);
            self.merge_if_large();
            return Ok((logged, Placement::Buffered));
        }
        order.spilled_from.get_or_insert(first);
        Ok((logged, Placement::Spilled))
    }

    /// Whether a push of up to `n` readings would be refused: they do not fit in the room left
    /// and, where `spill` allows spilling, the store is writing and nothing is spilled (so full
    /// buffers refuse rather than spill). Lets a caller refuse before parsing: under sustained
    /// overload the buffers hover at the bound, and a body parsed only to be refused by the
    /// push cost as much as one accepted.
    pub fn refuses_push_of(&self, n: usize, spill: bool) -> bool {
        let held = self.held.load(Ordering::Acquire);
        // The bytes of the smallest readings there are: a head and one field.
        let least = n.max(1).saturating_mul(2 * size_of::<u64>());
        let fits = held.saturating_add(n.max(1)) <= self.config.max_buffered_readings
            && self.held_bytes.load(Ordering::Acquire).saturating_add(least)
                <= self.config.max_buffered_bytes;
        if fits {
            return false;
        }
        !spill
            || (!self.store_failing.load(Ordering::Acquire)
                && self.order.lock().unwrap_or_else(|e| e.into_inner()).spilled_from.is_none())
    }

    /// Told by the flusher after every write: whether it met a retriable failure. Decides what
    /// full buffers do in [`Buffers::push_or_spill`].
    pub(crate) fn set_store_failing(&self, failing: bool) {
        self.store_failing.store(failing, Ordering::Release);
    }

    /// From now on pushes go to the log only, as after a spill: at start-up, so that the
    /// refill replays what an earlier process left before anything newer enters the buffers.
    pub fn start_spill(&self, from: Seq) {
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        order.next = order.next.max(from);
        order.spilled_from.get_or_insert(from);
    }

    /// Where the spilled readings start, if any are.
    pub fn spilled_from(&self) -> Option<Seq> {
        self.order.lock().unwrap_or_else(|e| e.into_inner()).spilled_from
    }

    /// Ends the spill when `caught_up(next sequence number)` says the refill has brought in
    /// everything logged before it; checked under the order mutex, so no push is logged
    /// in between. Returns whether pushes now go to the buffers again.
    pub fn end_spill_if(&self, caught_up: impl FnOnce(Seq) -> bool) -> bool {
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        if order.spilled_from.is_none() || caught_up(order.next) {
            order.spilled_from = None;
            return true;
        }
        false
    }

    /// Re-inserts readings recovered from the write-ahead log with the sequence numbers they
    /// were logged with (`seqs[i]` for `items[i]`, increasing per series and hour), in order, in
    /// pieces that each fit the room left: the memory bound holds throughout, however much the
    /// log holds. Later pushes are numbered above every recovered number.
    pub async fn push_recovered(&self, mut items: Vec<Item>, mut seqs: Vec<Seq>) {
        assert_eq!(items.len(), seqs.len(), "one sequence number per recovered reading");
        while !items.is_empty() {
            let (n, bytes) = self.wait_and_reserve_some(&items).await;
            let (piece, piece_seqs) = if n == items.len() {
                (std::mem::take(&mut items), std::mem::take(&mut seqs))
            } else {
                (items.drain(..n).collect(), seqs.drain(..n).collect::<Vec<Seq>>())
            };
            let piece = Packed::new(piece);
            let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(&max) = piece_seqs.iter().max() {
                order.next = order.next.max(max + 1);
            }
            self.stage(piece, bytes, Seqs::Each(piece_seqs), true);
            drop(order);
            self.merge_if_large();
        }
    }

    /// Waits for room for at least the first of `items`, then reserves as many of the first
    /// as fit: how many, and their bytes.
    async fn wait_and_reserve_some(&self, items: &[Item]) -> (usize, usize) {
        let costs: Vec<usize> = items.iter().map(|(_, r)| Packed::estimated_bytes_of(r)).collect();
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let room_readings =
                self.config.max_buffered_readings.saturating_sub(self.held.load(Ordering::Acquire));
            let room_bytes = self
                .config
                .max_buffered_bytes
                .saturating_sub(self.held_bytes.load(Ordering::Acquire));
            let (mut k, mut bytes) = (0, 0);
            while k < costs.len().min(room_readings) && bytes + costs[k] <= room_bytes {
                bytes += costs[k];
                k += 1;
            }
            // A reading larger than the whole bound gets in once nothing else is held.
            let alone = k == 0 && self.held_bytes.load(Ordering::Acquire) == 0;
            if alone {
                (k, bytes) = (1, costs[0]);
            }
            if k > 0 && self.reserve(k, bytes, alone).is_ok() {
                return (k, bytes);
            }
            notified.await;
        }
    }
}
