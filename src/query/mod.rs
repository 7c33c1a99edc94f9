//! Range, rollup and sensor queries over HTTP, for dashboards. Every endpoint merges the
//! readings still in the buffers with what the store holds, so a reading is visible as soon as
//! its write was acknowledged.
//!
//! # Consistency during a flush
//! The buffers' unflushed readings and the store are read one after the other, not atomically:
//! the buffers first, then the store. If a flush confirms a batch between the two reads, that
//! batch's readings are counted twice by this request; none is ever missed (a reading not in
//! the buffers' snapshot was either confirmed before it, so the store read that follows has
//! it, or arrived later). The window is one store round trip and closes with the next request.
//!
//! # Layout
//! - [`readings`]: `GET /api/v1/readings` (JSON / NDJSON / CSV, streamed, cursor paging).
//! - [`rollups`]: `GET /api/v1/rollups`.
//! - [`sensors`]: `GET /api/v1/sensors`.
//! - [`schemas`]: the hand-streamed bodies' shapes, for the OpenAPI document.
//! - [`error`]: `QueryError` and its mapping into the API's error; [`params`], [`cursor`]:
//!   shared parsing; [`encode`]: the timestamp, number, JSON-string and CSV writers;
//!   `source`: a readings page's rows, written from the store's columns; `merge`: the same
//!   merge over readings, for InfluxQL; `kept`: ranges that reach back past `--retention`,
//!   read from where the readings are kept.

pub mod cursor;
pub mod encode;
pub mod error;
pub mod influxql;
mod kept;
mod merge;
pub mod params;
pub mod readings;
pub mod rollups;
pub mod schemas;
pub mod sensors;
mod source;
mod view;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

pub use error::QueryError;

use crate::buffer::Buffers;
use crate::databases::{Database, Registry, RegistryError};
use crate::model::{HOUR_MS, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Reading, TimestampMs};
use crate::store::{SensorInfo, Store, StoreError};

/// Where the query side finds readings accepted but not yet written to the store. A trait so
/// tests can stand in for [`Buffers`].
pub trait Unflushed: Send + Sync + 'static {
    /// Readings of `sensor` with `from <= ts < to`, ascending by timestamp, arrival order for
    /// equal timestamps.
    fn unflushed(&self, sensor: &str, from: TimestampMs, to: TimestampMs) -> Vec<Reading>;

    /// Sensors with unflushed readings, with their first and last unflushed timestamps.
    fn unflushed_sensors(&self) -> Vec<SensorInfo>;

    /// Whether `sensor` has any unflushed reading. Only asked when a query found nothing.
    fn has_unflushed(&self, sensor: &str) -> bool {
        !self.unflushed(sensor, MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS + 1).is_empty()
    }
}

impl Unflushed for Buffers {
    fn unflushed(&self, sensor: &str, from: TimestampMs, to: TimestampMs) -> Vec<Reading> {
        Buffers::unflushed(self, sensor, from, to)
    }

    fn unflushed_sensors(&self) -> Vec<SensorInfo> {
        Buffers::unflushed_sensors(self)
    }
}

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
        })
    }
}

/// The query routes, with their state applied, for the server's router to `.merge()`.
pub fn router(state: QueryState) -> Router {
    Router::new()
        .route("/api/v1/readings", get(readings::get_readings))
        .route("/api/v1/rollups", get(rollups::get_rollups))
        .route("/api/v1/sensors", get(sensors::get_sensors))
        .route("/query", get(influxql::query).post(influxql::query))
        .with_state(state)
}

fn now_ms() -> TimestampMs {
    chrono::Utc::now().timestamp_millis()
}

/// A sensor is known if it has any reading, buffered or stored. Asked only when a query came
/// back empty, so a known sensor with data in range costs nothing extra.
async fn sensor_known(state: &QueryState, sensor: &str) -> Result<bool, StoreError> {
    if state.unflushed.has_unflushed(sensor) {
        return Ok(true);
    }
    state.store.sensor_exists(sensor).await
}
