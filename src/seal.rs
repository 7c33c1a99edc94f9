//! The seal task: every [`INTERVAL`] it runs one pass of [`Store::seal`] at the wall clock's
//! time, in bounded steps with a yield between them, as the retention task runs its passes.
//! A store with nothing to seal ends the task at its first step.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::{STORE_CHUNKS_SEALED, STORE_CHUNKS_UNSEALED};
use crate::store::Store;

/// How often a pass starts.
pub const INTERVAL: Duration = Duration::from_secs(30);

/// Chunks looked at per step: an embedded step moves at most this many in one write
/// transaction, a few milliseconds of a flush's wait.
pub const STEP_BUDGET: usize = 512;

/// Steps per pass at most; a pass that has more to do continues at the next interval.
const MAX_STEPS_PER_PASS: usize = 10_000;

/// Starts the task.
pub fn spawn(store: Arc<dyn Store>, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            if pass(&*store, chrono::Utc::now().timestamp_millis(), &stop).await.is_none() {
                return;
            }
        }
    })
}

/// One pass at `now`: steps until the store reports it done, the step limit, an error, or
/// `stop`. Returns the chunks moved, or `None` when the store has nothing to seal, ever.
pub async fn pass(store: &dyn Store, now: i64, stop: &CancellationToken) -> Option<u64> {
    let started = Instant::now();
    let mut moved = 0;
    for _ in 0..MAX_STEPS_PER_PASS {
        if stop.is_cancelled() {
            break;
        }
        match store.seal(now, STEP_BUDGET).await {
            Ok(None) => return None,
            Ok(Some(step)) => {
                ::metrics::counter!(STORE_CHUNKS_SEALED).increment(step.chunks);
                ::metrics::gauge!(STORE_CHUNKS_UNSEALED).set(step.left as f64);
                moved += step.chunks;
                if step.done {
                    break;
                }
            }
            Err(e) => {
                // Tried again at the next interval; each step commits whole.
                tracing::warn!(error = %e, "seal pass failed; retrying at the next interval");
                break;
            }
        }
        tokio::task::yield_now().await;
    }
    if moved > 0 {
        tracing::debug!(chunks = moved, seconds = started.elapsed().as_secs_f64(), "sealed");
    }
    Some(moved)
}
