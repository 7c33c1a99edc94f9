//! The retention pass: raw readings of hours past `--retention` are deleted (their buckets
//! and chunks), their statistics merged into `hour_stats`; hour statistics (and the writer
//! marks) past `--rollup-retention` are deleted too.
//!
//! Each call is one write transaction of bounded work (`budget` buckets and series visited),
//! so a flush waits at most for one such step, and resumes after the last series it finished
//! (`cursor`). Moving a bucket's statistics and deleting its readings happen in the same
//! transaction, so a crash anywhere leaves every bucket either whole or moved, never lost or
//! counted twice; an hour half moved is consistent too (rollups merge `hour_stats` with the
//! buckets left, range queries already refuse it).

use std::collections::BTreeMap;

use redb::{Database, ReadableTable, Table};

use super::chunks::{self, WriteChunks};
use super::codec::{BucketHeader, SeriesRecord};
use super::{
    BUCKETS, EmbeddedError, HOUR_STATS, META, META_RAW_RETENTION_MS, SERIES, WRITER_MARKS,
};
use crate::model::{MIN_TIMESTAMP_MS, TimestampMs};
use crate::store::{ExpireReport, Retention};

/// One step of the pass; see the module documentation. `cursor`: the series key the previous
/// step finished with (`None`: start from the first series); set to where the next step
/// resumes, or `None` once the pass is done. `keys`: only the series whose keys are in that
/// range (one database's, at its own retention), else every series at the server's.
pub(super) fn step(
    db: &Database,
    now: TimestampMs,
    policy: Retention,
    budget: usize,
    cursor: &mut Option<String>,
    keys: Option<&(String, String)>,
) -> Result<ExpireReport, EmbeddedError> {
    let rollup_cut = Retention::cutoff(now, policy.rollups);
    // Without a raw retention, statistics past the rollup retention still take their hour's
    // readings with them (config refuses that combination; this keeps the store sane anyway).
    let Some(raw_cut) = Retention::cutoff(now, policy.raw).or(rollup_cut) else {
        *cursor = None;
        return Ok(ExpireReport { done: true, ..ExpireReport::default() });
    };
    let budget = budget.max(1);
    let mut report = ExpireReport::default();
    let txn = db.begin_write()?;
    {
        if policy.raw.is_some() && keys.is_none() {
            let mut meta = txn.open_table(META)?;
            // Read back by the error that names the retention, also after a restart.
            if meta.get(META_RAW_RETENTION_MS)?.map(|g| g.value()) != Some(policy.raw_ms()) {
                meta.insert(META_RAW_RETENTION_MS, policy.raw_ms())?;
            }
        }
        let series = txn.open_table(SERIES)?;
        let mut buckets = txn.open_table(BUCKETS)?;
        let mut chunks = chunks::open_write(&txn)?;
        let mut stats = txn.open_table(HOUR_STATS)?;
        let mut marks = txn.open_table(WRITER_MARKS)?;

        // The series of this step, read first: the loop below mutates other tables.
        let mut todo: Vec<(String, u64)> = Vec::new();
        use std::ops::Bound;
        let lower = match (cursor.as_deref(), keys) {
            (Some(after), _) => Bound::Excluded(after),
            (None, Some((from, _))) => Bound::Included(from.as_str()),
            (None, None) => Bound::Unbounded,
        };
        let upper = keys.map_or(Bound::Unbounded, |(_, to)| Bound::Excluded(to.as_str()));
        for entry in series.range::<&str>((lower, upper))?.take(budget + 1) {
            let (key, value) = entry?;
            todo.push((key.value().to_owned(), SeriesRecord::decode(value.value())?.id));
        }
        let more_series = todo.len() > budget;
        todo.truncate(budget);

        let mut work = 0usize;
        let mut finished: Option<String> = None;
        let mut stopped = false;
        for (key, id) in &todo {
            work += 1;
            let left = budget.saturating_sub(work);
            let doomed: Vec<(i64, u32)> = buckets
                .range((*id, MIN_TIMESTAMP_MS, 0)..(*id, raw_cut, 0))?
                .take(left.max(1))
                .map(|e| e.map(|(k, _)| (k.value().1, k.value().2)))
                .collect::<Result<_, _>>()?;
            for &(hour, seq) in &doomed {
                move_bucket(&mut buckets, &mut chunks, &mut stats, *id, hour, seq, &mut report)?;
            }
            work += doomed.len();
            if doomed.len() >= left.max(1) {
                // Possibly more of this series: the next step starts with it again.
                stopped = true;
                break;
            }
            if let Some(cut) = rollup_cut {
                let gone =
                    stats.extract_from_if((*id, MIN_TIMESTAMP_MS)..(*id, cut), |_, _| true)?;
                for entry in gone {
                    entry?;
                    report.stats_deleted += 1;
                }
                // Marks go with the statistics, not the readings: a late duplicate of an
                // expired hour must still be recognised as stored, or its statistics would
                // count twice.
                marks.retain_in(
                    (key.as_str(), MIN_TIMESTAMP_MS, 0)..(key.as_str(), cut, 0),
                    |_, _| false,
                )?;
            }
            finished = Some(key.clone());
        }
        report.done = !stopped && !more_series;
        *cursor = if report.done { None } else { finished.or_else(|| cursor.clone()) };
    }
    super::commit(db, txn)?;
    Ok(report)
}

/// Deletes one bucket's chunks and header, merging its statistics into its hour's.
fn move_bucket(
    buckets: &mut Table<'_, (u64, i64, u32), &'static [u8]>,
    chunks: &mut WriteChunks<'_>,
    stats: &mut Table<'_, (u64, i64), &'static [u8]>,
    id: u64,
    hour: i64,
    seq: u32,
    report: &mut ExpireReport,
) -> Result<(), EmbeddedError> {
    let header = match buckets.remove((id, hour, seq))? {
        Some(g) => BucketHeader::decode(g.value())?,
        None => return Ok(()),
    };
    for at in chunks::of_bucket(id, hour, seq, &header.writes) {
        chunks.remove(at)?;
    }
    report.readings_deleted += u64::from(header.count);
    let kept = match stats.get((id, hour))? {
        Some(g) => Some(BucketHeader::decode(g.value())?),
        None => None,
    };
    let merged = match kept {
        Some(mut kept) => {
            merge_header(&mut kept, &header);
            kept
        }
        None => {
            report.hours_deleted += 1;
            BucketHeader { writes: Vec::new(), last_chunk: None, sorted: true, ..header }
        }
    };
    stats.insert((id, hour), merged.encode().as_slice())?;
    Ok(())
}

/// Adds `b`'s counts and statistics to `a` (an hour's kept statistics).
fn merge_header(a: &mut BucketHeader, b: &BucketHeader) {
    a.count += b.count;
    a.bytes += b.bytes;
    a.min_ts = a.min_ts.min(b.min_ts);
    a.max_ts = a.max_ts.max(b.max_ts);
    let mut stats: BTreeMap<String, _> = std::mem::take(&mut a.stats);
    for (name, s) in &b.stats {
        match stats.get_mut(name) {
            Some(acc) => acc.merge(s),
            None => {
                stats.insert(name.clone(), *s);
            }
        }
    }
    a.stats = stats;
}
