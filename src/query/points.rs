//! Unflushed readings that may be points the store holds already: a re-sent or redelivered
//! reading, one that came late, or one whose flush lands while the query reads. A point is
//! stored once, but a step's statistics cannot take a value out again; so each step that holds
//! such a reading is gathered anew from its readings, stored and unflushed merged one per
//! point ([`merge`]). When every unflushed reading is later than the store's latest in range,
//! the usual case, their values are simply added.

use std::sync::Arc;

use futures::StreamExt;

use super::merge::merge;
use crate::model::{Reading, TimestampMs};
use crate::store::{Order, RangeQuery, Store, StoreError};

/// A fold over steps of one series that unflushed readings are added to.
pub trait Steps {
    /// Forgets step `start`, to gather it again.
    fn clear_step(&mut self, start: TimestampMs);
    /// Adds the values of `readings` (ascending) to their steps.
    fn add(&mut self, readings: &[Reading]);
    /// The time of the latest value the stored steps hold, before any is added (`Some(None)`:
    /// they hold none), where their statistics tell it; `None` has the store asked instead.
    /// Only the values these steps count can be counted twice, so their own latest suffices.
    fn stored_latest(&self) -> Option<Option<TimestampMs>> {
        None
    }
}

/// Readings gathered again are added in pieces of this many, not held whole.
const PIECE: usize = 4096;

/// The start of the step of `step_ms` that holds `ts`, as the stores' rollups align steps.
fn step_of(ts: TimestampMs, step_ms: i64) -> TimestampMs {
    ts.div_euclid(step_ms) * step_ms
}

/// The time of the store's latest reading of `sensor` in `[from, to)`, from where the readings
/// are kept when the range reaches past the retention.
pub async fn stored_latest(
    store: &dyn Store,
    sensor: &str,
    (from, to): (TimestampMs, TimestampMs),
) -> Result<Option<TimestampMs>, StoreError> {
    let latest = match store.latest_of(vec![sensor.to_owned()], (from, to)).await {
        Err(StoreError::Expired { before, .. }) if before > from => {
            store.latest_of(vec![sensor.to_owned()], (before, to)).await?
        }
        other => other?,
    };
    Ok(latest.into_iter().next().flatten().map(|r| r.ts))
}

/// Whether any of `unflushed` (ascending) may be a point the store holds, its latest stored
/// time in range being `latest`.
pub fn may_meet(unflushed: &[Reading], latest: Option<TimestampMs>) -> bool {
    matches!((unflushed.first(), latest), (Some(u), Some(l)) if u.ts <= l)
}

/// Whether any series' unflushed readings may be stored points: `latest` holds each series'
/// latest stored reading in range, `unflushed` its unflushed readings, in the same order.
pub fn any_may_meet<'u>(
    latest: &[Option<Reading>],
    unflushed: impl IntoIterator<Item = &'u Vec<Reading>>,
) -> bool {
    latest.iter().zip(unflushed).any(|(l, u)| may_meet(u, l.as_ref().map(|r| r.ts)))
}

/// Adds `unflushed` (ascending, one per timestamp, taken from the buffers before the store
/// was read) to `steps`, steps of `step_ms` over `range`.
pub async fn add_unflushed(
    store: &Arc<dyn Store>,
    sensor: &str,
    unflushed: Vec<Reading>,
    (from, to): (TimestampMs, TimestampMs),
    step_ms: i64,
    steps: &mut impl Steps,
) -> Result<(), StoreError> {
    if unflushed.is_empty() {
        return Ok(());
    }
    let latest = match steps.stored_latest() {
        Some(latest) => latest,
        None => stored_latest(&**store, sensor, (from, to)).await?,
    };
    let Some(latest) = latest.filter(|_| may_meet(&unflushed, latest)) else {
        steps.add(&unflushed);
        return Ok(());
    };
    let mut again: Vec<TimestampMs> =
        unflushed.iter().take_while(|r| r.ts <= latest).map(|r| step_of(r.ts, step_ms)).collect();
    again.dedup();
    let mut rest = unflushed.into_iter().peekable();
    let mut before = Vec::new();
    for start in again {
        before.clear();
        while let Some(r) = rest.next_if(|r| step_of(r.ts, step_ms) < start) {
            before.push(r);
        }
        steps.add(&before);
        let mut of_step = Vec::new();
        while let Some(r) = rest.next_if(|r| step_of(r.ts, step_ms) == start) {
            of_step.push(r);
        }
        let span = (start.max(from), start.saturating_add(step_ms).min(to));
        gather(store, sensor, span, start, of_step, steps).await?;
    }
    steps.add(&rest.collect::<Vec<_>>());
    Ok(())
}

/// Gathers step `start` again: the readings of `sensor` in `span`, stored and unflushed, one
/// per point.
async fn gather(
    store: &Arc<dyn Store>,
    sensor: &str,
    (from, to): (TimestampMs, TimestampMs),
    start: TimestampMs,
    unflushed: Vec<Reading>,
    steps: &mut impl Steps,
) -> Result<(), StoreError> {
    let query = RangeQuery { sensor: sensor.to_owned(), from, to, order: Order::Asc, limit: None };
    let mut stored = store.readings(query).peekable();
    match std::pin::Pin::new(&mut stored).peek().await {
        // Its readings are deleted: none of them can be an unflushed reading's point.
        Some(Err(StoreError::Expired { .. })) => {
            steps.add(&unflushed);
            return Ok(());
        }
        _ => steps.clear_step(start),
    }
    let mut points = merge(stored.boxed(), unflushed, Order::Asc);
    let mut piece = Vec::with_capacity(PIECE);
    while let Some(r) = points.next().await {
        piece.push(r?);
        if piece.len() == PIECE {
            steps.add(&piece);
            piece.clear();
        }
    }
    steps.add(&piece);
    Ok(())
}

#[cfg(test)]
mod tests;
