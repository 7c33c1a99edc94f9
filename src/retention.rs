//! The retention task: every `interval` it runs one pass of [`Store::expire`] at the wall
//! clock's time, in bounded steps with a yield between them, so that flushes and queries
//! interleave with a long pass (each embedded step is one short write transaction).
//!
//! Retention is judged against the wall clock, not the newest reading: a sensor that stops
//! sending still ages out, and one sending timestamps in the future does not delete others.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::databases::Registry;
use crate::metrics::{
    RETENTION_HOURS_DELETED, RETENTION_PASS_DURATION, RETENTION_READINGS_DELETED,
    RETENTION_STATS_DELETED,
};
use crate::model::TimestampMs;
use crate::store::{ExpireReport, Retention, Store};

/// Buckets (and series visited) per step: one step of the embedded store deletes about this
/// many buckets' chunks in one transaction, a few milliseconds of a flush's wait.
pub const STEP_BUDGET: usize = 256;

/// Steps per pass at most; a pass that has more to do continues at the next interval (a
/// first pass over years of data should not hold the disk for hours on end).
const MAX_STEPS_PER_PASS: usize = 100_000;

/// Starts the task; `None` when nothing is ever deleted (no retention configured, and no
/// database may have one of its own). Each pass covers every series at the server's
/// retention, if any, then each database with a shorter one of its own (`databases`) at that.
/// A pass with nothing to do touches neither the store nor the metrics.
pub fn spawn(
    store: Arc<dyn Store>,
    policy: Retention,
    databases: Arc<Registry>,
    interval: Duration,
    stop: CancellationToken,
) -> Option<JoinHandle<()>> {
    if policy.raw.is_none() && policy.rollups.is_none() && !databases.allows_own_retentions() {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let now = wall_clock_ms();
            if policy.raw.is_some() || policy.rollups.is_some() {
                pass(&*store, now, policy, &stop).await;
            }
            for (db, raw) in databases.own_retentions() {
                let Some(keys) = db.key_range() else { continue };
                run(&*store, now, Scope::Keys { raw, keys }, &stop).await;
            }
        }
    }))
}

fn wall_clock_ms() -> TimestampMs {
    chrono::Utc::now().timestamp_millis()
}

/// What a pass works through.
enum Scope {
    /// Every series, at the server's retention.
    All(Retention),
    /// The series whose keys are in `keys` (one database's), at its own raw retention.
    Keys { raw: Duration, keys: (String, String) },
}

/// One pass at `now`: steps until the store reports it done, the step limit, an error, or
/// `stop`. Returns what it deleted.
pub async fn pass(
    store: &dyn Store,
    now: TimestampMs,
    policy: Retention,
    stop: &CancellationToken,
) -> ExpireReport {
    run(store, now, Scope::All(policy), stop).await
}

async fn run(
    store: &dyn Store,
    now: TimestampMs,
    scope: Scope,
    stop: &CancellationToken,
) -> ExpireReport {
    let started = Instant::now();
    let mut total = ExpireReport::default();
    for _ in 0..MAX_STEPS_PER_PASS {
        if stop.is_cancelled() {
            break;
        }
        let step = match &scope {
            Scope::All(policy) => store.expire(now, *policy, STEP_BUDGET).await,
            Scope::Keys { raw, keys } => {
                store.expire_keys(now, *raw, keys.clone(), STEP_BUDGET).await
            }
        };
        match step {
            Ok(step) => {
                ::metrics::counter!(RETENTION_HOURS_DELETED).increment(step.hours_deleted);
                ::metrics::counter!(RETENTION_READINGS_DELETED).increment(step.readings_deleted);
                ::metrics::counter!(RETENTION_STATS_DELETED).increment(step.stats_deleted);
                total.hours_deleted += step.hours_deleted;
                total.readings_deleted += step.readings_deleted;
                total.stats_deleted += step.stats_deleted;
                if step.done {
                    total.done = true;
                    break;
                }
            }
            Err(e) => {
                // Retried at the next interval; nothing is half done (each step commits whole).
                tracing::warn!(error = %e, "retention pass failed; retrying at the next interval");
                break;
            }
        }
        // Lets flushes and queries waiting for the runtime (or the store) go first.
        tokio::task::yield_now().await;
    }
    ::metrics::histogram!(RETENTION_PASS_DURATION).record(started.elapsed().as_secs_f64());
    if total.hours_deleted + total.stats_deleted > 0 {
        tracing::info!(
            hours = total.hours_deleted,
            readings = total.readings_deleted,
            hour_stats = total.stats_deleted,
            seconds = started.elapsed().as_secs_f64(),
            "retention pass deleted expired data"
        );
    }
    total
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::databases::RetentionBounds;
    use crate::model::{Batch, FieldValue, HOUR_MS, Reading, SeriesMeta, WriterId};
    use crate::store::BucketLimits;
    use crate::store::memory::MemoryStore;

    #[tokio::test]
    async fn the_task_deletes_hours_past_retention_and_stops_on_request() {
        let store = Arc::new(MemoryStore::new(BucketLimits::default()));
        let now = wall_clock_ms();
        let old = crate::model::hour_start(now) - 3 * HOUR_MS;
        let meta = Arc::new(SeriesMeta::untagged("s", "s"));
        let readings = (0..5)
            .map(|i| Reading {
                ts: old + i,
                fields: smallvec::smallvec![("v".into(), FieldValue::Float(1.0))],
            })
            .collect();
        let batch = Batch::new(meta.clone(), old, readings);
        assert!(store.write(WriterId(1), &[batch]).await[0].is_ok());
        let fresh = Batch::new(
            meta,
            crate::model::hour_start(now),
            vec![Reading { ts: crate::model::hour_start(now), fields: Default::default() }],
        );
        assert!(store.write(WriterId(1), &[fresh]).await[0].is_ok());

        let policy = Retention { raw: Some(Duration::from_secs(3600)), rollups: None };
        let stop = CancellationToken::new();
        let bounds = RetentionBounds { server: policy.raw, per_database: true };
        let databases = Arc::new(Registry::in_memory(bounds));
        let task = spawn(store.clone(), policy, databases, Duration::from_secs(3600), stop.clone())
            .expect("a retention is configured");
        // The first pass runs at once; waited for by its effect, within a bound.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while store.reading_count() != 1 {
            assert!(tokio::time::Instant::now() < deadline, "the pass did not run");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        stop.cancel();
        task.await.expect("the task ends when stopped");
        let databases = Arc::new(Registry::default());
        assert!(
            spawn(store, Retention::default(), databases, Duration::from_secs(1), stop).is_none()
        );
    }
}
