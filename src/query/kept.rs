//! Ranges that reach back past `--retention`: answered with what is kept, as InfluxDB and
//! VictoriaMetrics answer them, and said so beside the answer.
//!
//! A store refuses a read of readings whose hours the retention deleted
//! ([`StoreError::Expired`], naming where the kept readings begin). The readers here ask
//! again from there and note it in a [`Kept`], which the endpoint turns into a header, a
//! field or an InfluxQL warning. Whole-hour rollups never see the error: the store answers
//! them from the hour statistics it keeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use futures::stream::{self, BoxStream, StreamExt};

use crate::model::TimestampMs;
use crate::store::{Need, RangeQuery, RollupQuery, RollupSteps, StepValues, Store, StoreError};

/// Tries of one read: the whole range, the part after the deleted hours, and once more if a
/// retention pass deleted another hour in between.
const TRIES: usize = 3;

/// Where the readings a request read begin, when the retention cut its range short.
#[derive(Debug)]
pub struct Kept {
    /// The latest start noted; `i64::MIN` while nothing was cut.
    from: AtomicI64,
    retention_ms: AtomicU64,
}

impl Default for Kept {
    fn default() -> Self {
        Kept { from: AtomicI64::new(i64::MIN), retention_ms: AtomicU64::new(0) }
    }
}

impl Kept {
    fn note(&self, from: TimestampMs, retention_ms: u64) {
        self.retention_ms.store(retention_ms, Ordering::Relaxed);
        self.from.fetch_max(from, Ordering::Relaxed);
    }

    /// Where the kept readings begin, if the retention cut a range short.
    pub fn from(&self) -> Option<TimestampMs> {
        Some(self.from.load(Ordering::Relaxed)).filter(|&t| t != i64::MIN)
    }

    /// The store's own words for the cut (its `Expired` error), for a warning.
    pub fn message(&self) -> Option<String> {
        self.from().map(|before| {
            let retention_ms = self.retention_ms.load(Ordering::Relaxed);
            format!(
                "{}; the answer holds the readings kept",
                StoreError::Expired { before, retention_ms }
            )
        })
    }

    /// [`Store::readings`] of `query`, from where the readings are kept.
    pub fn readings(
        self: &Arc<Self>,
        store: Arc<dyn Store>,
        query: RangeQuery,
    ) -> BoxStream<'static, Result<crate::model::Reading, StoreError>> {
        self.stream(query, move |q| store.readings(q))
    }

    /// [`Store::runs`] of `query`, from where the readings are kept.
    pub fn runs(
        self: &Arc<Self>,
        store: Arc<dyn Store>,
        query: RangeQuery,
    ) -> BoxStream<'static, Result<crate::store::Run, StoreError>> {
        self.stream(query, move |q| store.runs(q))
    }

    /// A store stream of `query` whose first item, if the retention cut the range, is asked
    /// again from where the readings are kept (stores check the range before they read).
    fn stream<T: Send + 'static>(
        self: &Arc<Self>,
        query: RangeQuery,
        open: impl Fn(RangeQuery) -> BoxStream<'static, Result<T, StoreError>> + Send + 'static,
    ) -> BoxStream<'static, Result<T, StoreError>> {
        let kept = self.clone();
        stream::once(async move {
            let mut query = query;
            let mut items = open(query.clone());
            for _ in 0..TRIES {
                match items.next().await {
                    Some(Err(StoreError::Expired { before, retention_ms }))
                        if before > query.from =>
                    {
                        kept.note(before, retention_ms);
                        if before >= query.to {
                            return stream::empty().boxed();
                        }
                        query.from = before;
                        items = open(query.clone());
                    }
                    first => return stream::iter(first).chain(items).boxed(),
                }
            }
            items
        })
        .flatten()
        .boxed()
    }

    /// [`Store::rollup_steps`] of `query`, from where the readings are kept when its steps
    /// need them.
    pub async fn rollups(
        &self,
        store: &dyn Store,
        query: RollupQuery,
        need: Need,
    ) -> Result<RollupSteps, StoreError> {
        self.asked_where_kept(query, RollupSteps::default(), |q| store.rollup_steps(q, need)).await
    }

    /// [`Store::step_values`] of `query`, from where the readings are kept.
    pub async fn step_values(
        &self,
        store: &dyn Store,
        query: RollupQuery,
        most: usize,
    ) -> Result<Option<StepValues>, StoreError> {
        let none_kept = Some(StepValues::default());
        self.asked_where_kept(query, none_kept, |q| store.step_values(q, most)).await
    }

    /// `ask`'s answer to `query`, asked again from where the readings are kept while it says
    /// they were deleted; `none_kept` when none of the range is.
    async fn asked_where_kept<T, F>(
        &self,
        mut query: RollupQuery,
        none_kept: T,
        ask: impl Fn(RollupQuery) -> F,
    ) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, StoreError>>,
    {
        for _ in 0..TRIES {
            match ask(query.clone()).await {
                Err(StoreError::Expired { before, retention_ms }) if before > query.from => {
                    self.note(before, retention_ms);
                    if before >= query.to {
                        return Ok(none_kept);
                    }
                    query.from = before;
                }
                answer => return answer,
            }
        }
        ask(query).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Batch, FieldValue, HOUR_MS, Reading, SeriesMeta, WriterId};
    use crate::store::memory::MemoryStore;
    use crate::store::{BucketLimits, Order, Retention};

    const T0: TimestampMs = 1_704_067_200_000;

    /// One reading a minute into each of three hours, the first hour's deleted.
    async fn store_with_first_hour_deleted() -> Arc<MemoryStore> {
        let store = Arc::new(MemoryStore::new(BucketLimits::default()));
        let meta = Arc::new(SeriesMeta::untagged("s", "s"));
        for hour in 0..3 {
            let start = T0 + hour * HOUR_MS;
            let r = Reading {
                ts: start + 60_000,
                fields: smallvec::smallvec![("v".into(), FieldValue::Float(hour as f64))],
            };
            let batch = Batch::new(meta.clone(), start, vec![r]);
            assert!(store.write(WriterId(1), &[batch]).await[0].is_ok());
        }
        let policy = Retention { raw: Some(std::time::Duration::from_secs(3600)), rollups: None };
        store.expire(T0 + 2 * HOUR_MS, policy, 100).await.expect("retention pass");
        store
    }

    fn range(from: TimestampMs, to: TimestampMs) -> RangeQuery {
        RangeQuery { sensor: "s".into(), from, to, order: Order::Asc, limit: None }
    }

    #[tokio::test]
    async fn a_range_past_the_retention_reads_from_the_kept_hours_and_says_so() {
        let store = store_with_first_hour_deleted().await;
        let kept = Arc::new(Kept::default());
        let all: Vec<Reading> = kept
            .readings(store.clone(), range(T0, T0 + 3 * HOUR_MS))
            .map(|r| r.unwrap())
            .collect()
            .await;
        assert_eq!(
            all.iter().map(|r| r.ts).collect::<Vec<_>>(),
            [T0 + HOUR_MS + 60_000, T0 + 2 * HOUR_MS + 60_000]
        );
        assert_eq!(kept.from(), Some(T0 + HOUR_MS));
        let message = kept.message().unwrap();
        assert!(message.contains("deleted by the retention of 1h"), "{message}");
    }

    #[tokio::test]
    async fn a_range_wholly_past_the_retention_is_empty_and_a_kept_one_is_not_noted() {
        let store = store_with_first_hour_deleted().await;
        let kept = Arc::new(Kept::default());
        let none: Vec<_> = kept.runs(store.clone(), range(T0, T0 + HOUR_MS / 2)).collect().await;
        assert!(none.is_empty());
        assert_eq!(kept.from(), Some(T0 + HOUR_MS));

        let kept = Arc::new(Kept::default());
        let later = RollupQuery {
            sensor: "s".into(),
            from: T0 + HOUR_MS,
            to: T0 + 3 * HOUR_MS,
            step_ms: 600_000,
            fields: None,
        };
        assert_eq!(kept.rollups(&*store, later, Need::ALL).await.unwrap().into_rows().len(), 2);
        assert_eq!((kept.from(), kept.message()), (None, None));
    }

    #[tokio::test]
    async fn finer_rollups_past_the_retention_answer_the_kept_steps() {
        let store = store_with_first_hour_deleted().await;
        let kept = Kept::default();
        let fine = RollupQuery {
            sensor: "s".into(),
            from: T0,
            to: T0 + 3 * HOUR_MS,
            step_ms: 600_000,
            fields: None,
        };
        let rows = kept.rollups(&*store, fine, Need::ALL).await.unwrap().into_rows();
        assert_eq!(
            rows.iter().map(|r| r.start).collect::<Vec<_>>(),
            [T0 + HOUR_MS, T0 + 2 * HOUR_MS]
        );
        assert_eq!(kept.from(), Some(T0 + HOUR_MS));
    }
}
