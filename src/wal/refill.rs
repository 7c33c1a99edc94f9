//! The refill: brings readings that are in the log but not in the buffers into the buffers, in
//! log order. Two things leave readings there: an earlier process (its segments, found at
//! start-up) and a spill (the buffers were full, so `Buffers::push_or_spill` logged a push
//! without inserting it). In both cases every push goes to the log only until the refill has
//! caught up, which keeps each (series, hour) buffer in sequence order.
//!
//! Per chunk of records, the store is asked for this writer's high-water mark of every
//! (series, hour) the chunk touches; a reading at or below its mark is stored already (the store
//! holds a prefix of each writer's series-hour in sequence order, see `Store::write`) and is
//! skipped, the rest is inserted with its original sequence number, in pieces that fit the room
//! the flusher leaves. So start-up never waits for the store: writes are acknowledged into the
//! log meanwhile. Readings a schema-1 bucketd logged (below `Identity::schema1_before`) are also
//! judged against the one mark schema 1 kept per (series, hour), which is where that process
//! recorded them.
//!
//! Readings of hours that ended longer than `--retention` ago are not brought back: the
//! retention pass deleted (or would delete) them, and inserting them would only make it
//! write them and delete them again. They are settled like stored readings.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::identity::Identity;
use super::{Wal, segment};
use crate::buffer::Buffers;
use crate::flush::Backoff;
use crate::metrics::WAL_REPLAYED;
use crate::model::{Item, Seq, TimestampMs, hour_start};
use crate::store::{Marks, Retention, Store, high_water_until_answered};

/// Readings inserted per high-water question at most.
const CHUNK_READINGS: usize = 50_000;

/// How often an idle refill looks for a spill, and a busy one for newly synced records.
const POLL: Duration = Duration::from_millis(10);

const MIN_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Starts the refill. With `recovered` segments (from [`Wal::open`]) it first makes every push
/// log-only and replays them; call it before any push.
pub fn spawn(
    wal: Arc<Wal>,
    store: Arc<dyn Store>,
    buffers: Arc<Buffers>,
    identity: Identity,
    retention: Option<Duration>,
    recovered: &[Seq],
    stop: CancellationToken,
) -> JoinHandle<()> {
    if let Some(&first) = recovered.first() {
        buffers.start_spill(first);
        tracing::info!(
            segments = recovered.len(),
            "replaying the write-ahead log an earlier run left; writes are accepted meanwhile"
        );
    }
    let refill = Refill { wal, store, buffers, identity, retention, log_at: None };
    tokio::spawn(async move {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = refill.run() => {}
        }
    })
}

/// Resolves once nothing is spilled: every logged reading is in the buffers (or stored).
pub async fn caught_up(buffers: &Buffers) {
    while buffers.spilled_from().is_some() {
        tokio::time::sleep(POLL).await;
    }
}

struct Refill {
    wal: Arc<Wal>,
    store: Arc<dyn Store>,
    buffers: Arc<Buffers>,
    identity: Identity,
    /// `--retention`: older hours are skipped.
    retention: Option<Duration>,
    log_at: Option<Instant>,
}

/// Where the refill reads next.
struct Cursor {
    segment: Seq,
    offset: u64,
    /// Everything logged before this sequence number is in the buffers (or stored).
    through: Seq,
    /// Where damage was last reported: a segment still written to is read again at the same
    /// place until it is sealed, and the damage is reported once.
    reported: Option<(Seq, u64)>,
}

impl Refill {
    async fn run(mut self) {
        let mut cursor: Option<Cursor> = None;
        let mut requeued = 0u64;
        let mut skipped = 0u64;
        loop {
            let Some(from) = self.buffers.spilled_from() else {
                if requeued + skipped > 0 {
                    tracing::info!(
                        requeued,
                        skipped_as_stored = skipped,
                        "caught up with the write-ahead log"
                    );
                    (requeued, skipped) = (0, 0);
                }
                cursor = None;
                tokio::time::sleep(POLL).await;
                continue;
            };
            let c = match &mut cursor {
                Some(c) => c,
                None => match self.wal.segment_for(from) {
                    Some(segment) => {
                        cursor.insert(Cursor { segment, offset: 0, through: from, reported: None })
                    }
                    None => {
                        // Nothing logged at all: nothing to catch up with.
                        self.buffers.end_spill_if(|_| true);
                        continue;
                    }
                },
            };
            let (wal, segment, offset) = (self.wal.clone(), c.segment, c.offset);
            let chunk =
                tokio::task::spawn_blocking(move || wal.read_at(segment, offset, CHUNK_READINGS))
                    .await;
            let chunk = match chunk {
                Ok(Ok(chunk)) => chunk,
                Ok(Err(e)) => {
                    // Unreadable (a foreign or newer file): log loudly, move on, keep serving.
                    tracing::error!(error = %e, "cannot read a write-ahead log segment; skipping it");
                    segment::Chunk { done: true, ..segment::Chunk::default() }
                }
                Err(e) => {
                    tracing::error!(error = %e, "write-ahead log read task failed");
                    tokio::time::sleep(MAX_RETRY).await;
                    continue;
                }
            };
            let recovered = self.wal.is_recovered(c.segment);
            if let Some(damage) = &chunk.damage
                && c.reported.replace((c.segment, chunk.next_offset))
                    != Some((c.segment, chunk.next_offset))
            {
                if recovered {
                    tracing::warn!(segment = c.segment, %damage, "write-ahead log segment ends early (a torn record from a crash is the unacknowledged last group)");
                } else {
                    // Bytes this process wrote and synced do not read back: the disk lost
                    // acknowledged readings, which the buffers do not hold (they spilled).
                    tracing::error!(segment = c.segment, %damage, "write-ahead log damaged before its synced length: spilled readings after this point cannot be read back and are lost");
                }
            }
            c.offset = chunk.next_offset;
            let mut items = Vec::new();
            for record in chunk.records {
                let end = record.first_seq + record.items.len() as u64;
                // Records before the spill began are in the buffers already.
                if record.first_seq < c.through && !recovered {
                    continue;
                }
                c.through = c.through.max(end);
                items.extend(
                    record
                        .items
                        .into_iter()
                        .enumerate()
                        .map(|(i, item)| (record.first_seq + i as u64, item)),
                );
            }
            let progressed = !items.is_empty();
            if progressed {
                let (r, s) = self.requeue(c.segment, recovered, c.through, items).await;
                requeued += r;
                skipped += s;
            }
            if chunk.done {
                if recovered {
                    self.wal.recovered_done(c.segment);
                }
                if let Some(next) = self.wal.segment_after(c.segment) {
                    c.segment = next;
                    c.offset = 0;
                    continue;
                }
            }
            if !progressed {
                let through = c.through;
                if self.buffers.end_spill_if(|next| next <= through) {
                    cursor = None;
                } else {
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }

    /// Inserts what the store does not hold yet. Returns (inserted, skipped).
    async fn requeue(
        &mut self,
        segment: Seq,
        recovered: bool,
        end: Seq,
        chunk: Vec<(Seq, Item)>,
    ) -> (u64, u64) {
        let mut index: HashMap<(&str, TimestampMs), usize> = HashMap::new();
        let mut keys: Vec<(String, TimestampMs)> = Vec::new();
        let slots: Vec<usize> = chunk
            .iter()
            .map(|(_, (meta, reading))| {
                let key = (meta.key(), hour_start(reading.ts));
                *index.entry(key).or_insert_with(|| {
                    keys.push((key.0.to_owned(), key.1));
                    keys.len() - 1
                })
            })
            .collect();
        drop(index);
        let marks = self.marks(Marks::Of(self.identity.writer), &keys).await;
        let schema1_before = self.identity.schema1_before;
        let schema1 = if chunk.iter().any(|(seq, _)| *seq < schema1_before) {
            self.marks(Marks::Schema1, &keys).await
        } else {
            Vec::new()
        };

        // Judged at the wall clock, as the retention pass judges (`crate::retention`).
        let now = chrono::Utc::now().timestamp_millis();
        let expired_before = Retention::cutoff(now, self.retention).unwrap_or(TimestampMs::MIN);
        let mut items = Vec::with_capacity(chunk.len());
        let mut seqs = Vec::with_capacity(chunk.len());
        let mut stored = Vec::new();
        let mut expired = 0u64;
        for ((seq, item), slot) in chunk.into_iter().zip(slots) {
            let mark =
                if seq < schema1_before { marks[slot].max(schema1[slot]) } else { marks[slot] };
            if hour_start(item.1.ts) < expired_before {
                expired += 1;
                stored.push(seq);
            } else if seq <= mark {
                stored.push(seq);
            } else {
                seqs.push(seq);
                items.push(item);
            }
        }
        let (inserted, skipped) = (items.len() as u64, stored.len() as u64 - expired);
        if recovered {
            // Counted now, before the insert: the flusher may settle them at once.
            self.wal.recovered_requeued(segment, end, inserted);
        } else if !stored.is_empty() {
            // Logged (and counted) by this process, yet stored: nothing left to wait for.
            self.wal.settle(&stored);
        }
        self.buffers.push_recovered(items, seqs).await;
        ::metrics::counter!(WAL_REPLAYED, "result" => "requeued").increment(inserted);
        ::metrics::counter!(WAL_REPLAYED, "result" => "skipped").increment(skipped);
        ::metrics::counter!(WAL_REPLAYED, "result" => "expired").increment(expired);
        (inserted, skipped)
    }

    /// The marks of `keys`, asking until the store answers.
    async fn marks(&mut self, marks: Marks, keys: &[(String, TimestampMs)]) -> Vec<Seq> {
        let mut backoff = Backoff::new(MIN_RETRY, MAX_RETRY);
        let (store, log_at) = (&*self.store, &mut self.log_at);
        high_water_until_answered(
            store,
            marks,
            keys,
            || backoff.next(),
            |e| {
                if log_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    *log_at = Some(Instant::now());
                    tracing::warn!(store = store.name(), error = %e, "the write-ahead log refill waits for the store to say what it already holds");
                }
            },
        )
        .await
    }
}
