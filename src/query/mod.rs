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
//! - [`state`]: `QueryState`, what every endpoint reads (the store, the unflushed readings
//!   (`Unflushed`), the limits, the database opened through `view`); this file only routes.
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
mod listed;
mod merge;
pub mod params;
mod points;
pub mod readings;
pub mod rollups;
pub mod schemas;
pub mod sensors;
mod source;
pub mod state;
mod unflushed;
mod view;

use axum::Router;
use axum::routing::get;

pub use error::QueryError;
pub use state::{QueryLimits, QueryState};
pub use unflushed::Unflushed;

/// The query routes, with their state applied, for the server's router to `.merge()`.
pub fn router(state: QueryState) -> Router {
    Router::new()
        .route("/api/v1/readings", get(readings::get_readings))
        .route("/api/v1/rollups", get(rollups::get_rollups))
        .route("/api/v1/sensors", get(sensors::get_sensors))
        .route("/query", get(influxql::query).post(influxql::query))
        .with_state(state)
}
