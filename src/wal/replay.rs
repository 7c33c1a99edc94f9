//! Start-up replay: the segments an earlier process left go back into the buffers, minus what
//! the store already holds.
//!
//! Per chunk of records, the store is asked for the high-water mark of every (series, hour)
//! the chunk touches; a reading at or below its mark is stored already (the store holds a
//! prefix of each series-hour in sequence order, see `Store::write`) and is skipped, the rest
//! is re-inserted with its original sequence number. The flusher runs meanwhile, so a WAL
//! larger than the buffers' bound replays as fast as the store takes it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Wal, WalError, segment};
use crate::buffer::Buffers;
use crate::metrics::WAL_REPLAYED;
use crate::model::{Reading, Seq, SeriesMeta, TimestampMs, hour_start};
use crate::store::Store;

/// Readings re-inserted per high-water query at most.
const CHUNK_READINGS: usize = 50_000;

const MIN_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    pub segments: usize,
    pub records: usize,
    /// Readings put back into the buffers.
    pub requeued: u64,
    /// Readings the store already held.
    pub skipped: u64,
    /// Segments whose end could not be read (a torn tail, normally only the last).
    pub damaged: Vec<String>,
}

/// Replays the segments `recovered` (from [`Wal::open`]) into `buffers`. Waits, retrying, for
/// the store to answer its high-water marks; fails only on a segment that is not a readable
/// WAL segment at all.
pub async fn replay(
    wal: &Wal,
    recovered: &[Seq],
    store: &dyn Store,
    buffers: &Buffers,
) -> Result<ReplayReport, WalError> {
    let mut report = ReplayReport::default();
    let started = Instant::now();
    for (index, &first) in recovered.iter().enumerate() {
        let path = segment::path_in(wal.dir(), first);
        let open_err = |why: String| WalError::Open { dir: wal.dir().to_owned(), why };
        let data = tokio::fs::read(&path)
            .await
            .map_err(|e| open_err(format!("cannot read {}: {e}", path.display())))?;
        let read_path = path.clone();
        let read = tokio::task::spawn_blocking(move || segment::read(&read_path, &data))
            .await
            .map_err(|e| open_err(format!("reading {} failed: {e}", path.display())))?
            .map_err(open_err)?;
        if let Some(damage) = &read.damage {
            let last = index + 1 == recovered.len();
            if last {
                tracing::warn!(segment = %path.display(), %damage, intact_bytes = read.valid_bytes, "WAL ends in a torn record (a crash during a group commit; it was never acknowledged)");
            } else {
                tracing::error!(segment = %path.display(), %damage, intact_bytes = read.valid_bytes, "WAL segment damaged: readings after this point in it are lost");
            }
            report.damaged.push(format!("{}: {damage}", path.display()));
        }
        let end = read.records.last().map_or(first, |r| r.first_seq + r.items.len() as u64);
        report.segments += 1;
        report.records += read.records.len();

        let mut chunk: Vec<(Seq, (SeriesMeta, Reading))> = Vec::new();
        for record in read.records {
            for (i, item) in record.items.into_iter().enumerate() {
                chunk.push((record.first_seq + i as u64, item));
            }
            if chunk.len() >= CHUNK_READINGS {
                requeue(wal, first, end, std::mem::take(&mut chunk), store, buffers, &mut report)
                    .await;
            }
        }
        requeue(wal, first, end, chunk, store, buffers, &mut report).await;
        wal.recovered_done(first);
        tracing::info!(
            segment = %path.display(),
            done = index + 1,
            of = recovered.len(),
            requeued = report.requeued,
            skipped = report.skipped,
            "replayed WAL segment"
        );
    }
    if !recovered.is_empty() {
        tracing::info!(
            segments = report.segments,
            requeued = report.requeued,
            skipped_as_stored = report.skipped,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "WAL replay finished"
        );
    }
    Ok(report)
}

async fn requeue(
    wal: &Wal,
    segment: Seq,
    end: Seq,
    chunk: Vec<(Seq, (SeriesMeta, Reading))>,
    store: &dyn Store,
    buffers: &Buffers,
    report: &mut ReplayReport,
) {
    if chunk.is_empty() {
        return;
    }
    let mut index: HashMap<(&str, TimestampMs), usize> = HashMap::new();
    let mut keys: Vec<(String, TimestampMs)> = Vec::new();
    let slots: Vec<usize> = chunk
        .iter()
        .map(|(_, (meta, reading))| {
            let key = (meta.key.as_str(), hour_start(reading.ts));
            *index.entry(key).or_insert_with(|| {
                keys.push((key.0.to_owned(), key.1));
                keys.len() - 1
            })
        })
        .collect();
    drop(index);
    let marks = high_water_until_answered(store, &keys).await;

    let mut items = Vec::with_capacity(chunk.len());
    let mut seqs = Vec::with_capacity(chunk.len());
    let mut skipped = 0u64;
    for ((seq, item), slot) in chunk.into_iter().zip(slots) {
        if seq <= marks[slot] {
            skipped += 1;
        } else {
            seqs.push(seq);
            items.push(item);
        }
    }
    let requeued = items.len() as u64;
    // Counted before the push: the flusher may settle them at once.
    wal.recovered_requeued(segment, end, requeued);
    buffers.push_recovered(items, seqs).await;
    report.requeued += requeued;
    report.skipped += skipped;
    ::metrics::counter!(WAL_REPLAYED, "result" => "requeued").increment(requeued);
    ::metrics::counter!(WAL_REPLAYED, "result" => "skipped").increment(skipped);
}

async fn high_water_until_answered(store: &dyn Store, keys: &[(String, TimestampMs)]) -> Vec<Seq> {
    let mut delay = MIN_RETRY;
    let mut last_log: Option<Instant> = None;
    loop {
        match store.high_water(keys).await {
            Ok(marks) if marks.len() == keys.len() => return marks,
            Ok(marks) => tracing::error!(
                marks = marks.len(),
                keys = keys.len(),
                "store returned the wrong number of high-water marks"
            ),
            Err(e) => {
                if last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    last_log = Some(Instant::now());
                    tracing::warn!(store = store.name(), error = %e, "WAL replay waits for the store to say what it already holds");
                }
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RETRY);
    }
}
