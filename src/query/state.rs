//! What the query endpoints read ([`QueryState`]: the store, the unflushed readings, the
//! limits, the database opened) and the helpers every endpoint shares.

use std::sync::Arc;

use super::listed::Listings;
use super::unflushed::Unflushed;
use super::view;
use crate::buffer::Buffers;
use crate::databases::{Database, Registry, RegistryError};
use crate::model::{HOUR_MS, TimestampMs};
use crate::store::{Store, StoreError};

/// Page sizes and ranges. Over-limit requests are refused with 400, never clamped.
#[derive(Clone, Debug)]
pub struct QueryLimits {
    /// Readings per page when `limit` is absent.
    pub default_readings: usize,
    /// Largest `limit` for readings: bounds one response, and the page CSV collects.
    pub max_readings: usize,
    pub default_sensors: usize,
    pub max_sensors: usize,
    /// Most steps one rollup may span: bounds the rows a rollup builds in memory.
    pub max_rollup_steps: u64,
    /// Length of the range when `from` is absent.
    pub default_range_ms: i64,
    /// How long one InfluxQL statement may run (`--query-timeout`); past it the statement
    /// fails with its own error and the others of the request still run.
    pub statement_time: std::time::Duration,
    /// Most (function, field, window) accumulators one InfluxQL statement may hold: bounds
    /// its memory the way `max_held` bounds the readings it keeps.
    pub max_cells: usize,
    /// Most readings one InfluxQL statement may keep at once: a raw select's rows, and the
    /// values of `median`, `percentile`, `mode` and `distinct` not yet answered.
    pub max_held: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            default_readings: 1_000,
            max_readings: 100_000,
            default_sensors: 100,
            max_sensors: 10_000,
            max_rollup_steps: 10_000,
            default_range_ms: HOUR_MS,
            statement_time: std::time::Duration::from_secs(30),
            max_cells: 2_000_000,
            max_held: 1_000_000,
        }
    }
}

/// What the query endpoints read. The router holds it over every database; a handler
/// [`QueryState::open`]s the database its request names before it reads anything.
#[derive(Clone)]
pub struct QueryState {
    pub store: Arc<dyn Store>,
    pub unflushed: Arc<dyn Unflushed>,
    pub limits: QueryLimits,
    pub databases: Arc<Registry>,
    /// The database read: the default one until [`QueryState::open`] names another.
    pub database: Database,
    /// Series listings kept across statements, shared by every database's state.
    pub listings: Arc<Listings>,
}

impl QueryState {
    pub fn new(
        store: Arc<dyn Store>,
        buffers: Arc<Buffers>,
        databases: Arc<Registry>,
    ) -> QueryState {
        QueryState {
            store,
            unflushed: buffers,
            limits: QueryLimits::default(),
            databases,
            database: Database::default(),
            listings: Arc::default(),
        }
    }

    /// The same state seen from the database called `name` (the default one when `None`):
    /// its series only, under the keys its clients wrote.
    pub fn open(&self, name: Option<&str>) -> Result<QueryState, RegistryError> {
        let db = self.databases.get(name)?;
        Ok(QueryState {
            store: Arc::new(view::StoreView {
                inner: self.store.clone(),
                db: db.clone(),
                retention_ms: self.databases.retention_of(db.name()).map(|d| d.as_millis() as u64),
            }),
            unflushed: Arc::new(view::UnflushedView {
                inner: self.unflushed.clone(),
                db: db.clone(),
            }),
            limits: self.limits.clone(),
            databases: self.databases.clone(),
            database: db,
            listings: self.listings.clone(),
        })
    }
}

pub(super) fn now_ms() -> TimestampMs {
    chrono::Utc::now().timestamp_millis()
}

/// A sensor is known if it has any reading, buffered or stored. Asked only when a query came
/// back empty, so a known sensor with data in range costs nothing extra.
pub(super) async fn sensor_known(state: &QueryState, sensor: &str) -> Result<bool, StoreError> {
    if state.unflushed.has_unflushed(sensor) {
        return Ok(true);
    }
    state.store.sensor_exists(sensor).await
}
