//! One database's view of the store and of the unflushed readings: sensor keys go in as the
//! client wrote them and are qualified with the database's prefix on the way down, and the
//! sensors listed are the database's only, with the prefix stripped on the way up. Everything
//! above (the REST endpoints, InfluxQL) reads through a view and never sees another
//! database's series.

use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};

use super::unflushed::Unflushed;
use crate::databases::Database;
use crate::model::{Batch, Reading, Seq, TimestampMs, WriterId};
use crate::store::{
    Compaction, ExpireReport, Need, RangeQuery, Retention, RollupQuery, RollupRow, RollupSteps,
    Run, SealReport, SensorInfo, SensorQuery, StepValues, Store, StoreError, WriteOverhead,
    WriteReport,
};

/// The store as one database sees it.
pub(super) struct StoreView {
    pub(super) inner: Arc<dyn Store>,
    pub(super) db: Database,
    /// How long the database keeps readings, for the errors that name it.
    pub(super) retention_ms: Option<u64>,
}

/// The unflushed readings as one database sees them.
pub(super) struct UnflushedView {
    pub(super) inner: Arc<dyn Unflushed>,
    pub(super) db: Database,
}

impl StoreView {
    fn range(&self, mut query: RangeQuery) -> RangeQuery {
        query.sensor = self.db.qualify(&query.sensor);
        query
    }

    fn rollup(&self, mut query: RollupQuery) -> RollupQuery {
        query.sensor = self.db.qualify(&query.sensor);
        query
    }

    /// `result`, its `Expired` naming the database's retention rather than the server's.
    fn own<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        own_retention(self.retention_ms, result)
    }
}

fn own_retention<T>(keep: Option<u64>, result: Result<T, StoreError>) -> Result<T, StoreError> {
    match (result, keep) {
        (Err(StoreError::Expired { before, .. }), Some(retention_ms)) => {
            Err(StoreError::Expired { before, retention_ms })
        }
        (other, _) => other,
    }
}

/// `info` with the key its database's clients know.
fn local(db: &Database, mut info: SensorInfo) -> SensorInfo {
    let key = db.local(&info.key);
    if key.len() != info.key.len() {
        info.key = key.to_owned();
    }
    info
}

#[async_trait]
impl Store for StoreView {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    fn writes_block(&self) -> bool {
        self.inner.writes_block()
    }

    fn can_expire_keys(&self) -> bool {
        self.inner.can_expire_keys()
    }

    fn write_overhead(&self) -> WriteOverhead {
        self.inner.write_overhead()
    }

    /// Writes go through the flusher with keys already qualified, never through a view.
    async fn write(
        &self,
        writer: WriterId,
        batches: &[Batch],
    ) -> Vec<Result<WriteReport, StoreError>> {
        self.inner.write(writer, batches).await
    }

    async fn high_water(
        &self,
        writer: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        self.inner.high_water(writer, keys).await
    }

    fn readings(&self, query: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>> {
        let keep = self.retention_ms;
        self.inner.readings(self.range(query)).map(move |r| own_retention(keep, r)).boxed()
    }

    fn runs(&self, query: RangeQuery) -> BoxStream<'static, Result<Run, StoreError>> {
        let keep = self.retention_ms;
        self.inner.runs(self.range(query)).map(move |r| own_retention(keep, r)).boxed()
    }

    async fn rollups(&self, query: RollupQuery) -> Result<Vec<RollupRow>, StoreError> {
        self.own(self.inner.rollups(self.rollup(query)).await)
    }

    async fn rollup_steps(
        &self,
        query: RollupQuery,
        need: Need,
    ) -> Result<RollupSteps, StoreError> {
        self.own(self.inner.rollup_steps(self.rollup(query), need).await)
    }

    async fn rollup_steps_of(
        &self,
        queries: Vec<RollupQuery>,
        need: Need,
    ) -> Result<Vec<RollupSteps>, StoreError> {
        let queries = queries.into_iter().map(|q| self.rollup(q)).collect();
        self.own(self.inner.rollup_steps_of(queries, need).await)
    }

    async fn latest_of(
        &self,
        sensors: Vec<String>,
        range: (TimestampMs, TimestampMs),
    ) -> Result<Vec<Option<Reading>>, StoreError> {
        let sensors = sensors.iter().map(|s| self.db.qualify(s)).collect();
        self.own(self.inner.latest_of(sensors, range).await)
    }

    async fn step_values(
        &self,
        query: RollupQuery,
        most: usize,
    ) -> Result<Option<StepValues>, StoreError> {
        self.own(self.inner.step_values(self.rollup(query), most).await)
    }

    async fn step_values_of(
        &self,
        queries: Vec<RollupQuery>,
        most: usize,
        lists: Vec<Vec<f64>>,
    ) -> Result<Option<StepValues>, StoreError> {
        let queries = queries.into_iter().map(|q| self.rollup(q)).collect();
        self.own(self.inner.step_values_of(queries, most, lists).await)
    }

    fn series_generation(&self) -> Option<u64> {
        self.inner.series_generation()
    }

    async fn sensors(&self, mut query: SensorQuery) -> Result<Vec<SensorInfo>, StoreError> {
        query.after = query.after.map(|a| self.db.qualify(&a));
        query.database = self.db.clone();
        let found = self.inner.sensors(query).await?;
        Ok(found.into_iter().map(|info| local(&self.db, info)).collect())
    }

    async fn expire(
        &self,
        now: TimestampMs,
        policy: Retention,
        budget: usize,
    ) -> Result<ExpireReport, StoreError> {
        self.inner.expire(now, policy, budget).await
    }

    async fn seal(
        &self,
        now: TimestampMs,
        budget: usize,
    ) -> Result<Option<SealReport>, StoreError> {
        self.inner.seal(now, budget).await
    }

    async fn compact(&self) -> Result<Option<Compaction>, StoreError> {
        self.inner.compact().await
    }

    async fn sensor_exists(&self, sensor: &str) -> Result<bool, StoreError> {
        self.inner.sensor_exists(&self.db.qualify(sensor)).await
    }
}

impl Unflushed for UnflushedView {
    fn unflushed(&self, sensor: &str, from: TimestampMs, to: TimestampMs) -> Vec<Reading> {
        self.inner.unflushed(&self.db.qualify(sensor), from, to)
    }

    fn unflushed_sensors(&self) -> Vec<SensorInfo> {
        self.unflushed_sensors_except(&|_| false)
    }

    fn unflushed_sensors_except(&self, known: &dyn Fn(&str) -> bool) -> Vec<SensorInfo> {
        let known = |stored: &str| !self.db.holds(stored) || known(self.db.local(stored));
        let all = self.inner.unflushed_sensors_except(&known);
        all.into_iter().map(|info| local(&self.db, info)).collect()
    }

    fn has_unflushed(&self, sensor: &str) -> bool {
        self.inner.has_unflushed(&self.db.qualify(sensor))
    }
}
