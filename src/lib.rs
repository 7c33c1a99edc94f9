//! bucketd: a time-series ingestion server that lands sensor readings in hourly bucket
//! documents, in MongoDB or in an embedded store on local disk.
//!
//! # Layout
//! - [`model`]: readings, series and batches, the data every layer shares.
//! - [`databases`]: namespaces whose series never mix, as prefixes of the stored series key,
//!   and the registry of those that exist.
//! - [`ingest`]: the wire formats (line protocol, JSON) and the listeners that speak them
//!   (HTTP write endpoints, raw TCP). Parses, validates (the input limits and the series
//!   limit are ingest policy), and hands readings to the buffers.
//! - [`buffer`]: bounded per-(sensor, hour) in-memory buffers; owns the memory bound and its
//!   full-policy (reject with 503 over HTTP, stop reading over TCP).
//! - [`wal`]: the write-ahead log: group-committed segments that make a 2xx durable before
//!   the store has the readings, replayed at start-up.
//! - [`flush`]: the flusher task that moves due buffers into the store, retries failures with
//!   backoff and drains everything on shutdown.
//! - [`store`]: the `Store` trait and its MongoDB, embedded and in-memory implementations.
//! - [`retention`]: the background pass that deletes data past `--retention` and
//!   `--rollup-retention` through `Store::expire`.
//! - [`query`]: range, rollup and sensor queries over HTTP, merging unflushed readings.
//! - [`api`]: the whole HTTP API: router assembly, the operations endpoints and the one
//!   OpenAPI document.
//! - [`http`]: the HTTP edge kit, which knows nothing of the application: `ApiError` and the
//!   one status table, InfluxDB's error shapes, token auth, the connection loop, route metrics.
//! - [`listener`]: the accept loop both listeners share, with its connection limit.
//! - [`tls`]: TLS for both listeners: certificates loaded, reloaded when their files change,
//!   and handshakes bounded in time.
//! - [`tokens`]: tokens with scopes and expiry, stored as hashes, read again while the server
//!   runs, and the `bucketd token` commands.
//! - [`metrics`]: metric names and the Prometheus recorder.
//! - [`alloc`]: the allocator's upkeep: freed memory given back when a thread goes idle.
//! - [`wire`]: varints, zigzag, strings and a bounds-checked reader: the primitives of the
//!   log's records and the embedded store's values.
//! - [`files`]: small files replaced whole (token store, database registry).
//! - [`config`]: command-line flags and their environment twins.
//! - [`server`]: wires everything together and runs until a shutdown signal.

pub mod alloc;
pub mod api;
pub mod buffer;
pub mod config;
pub mod databases;
pub mod files;
pub mod flush;
pub mod http;
pub mod ingest;
pub mod listener;
pub mod metrics;
pub mod model;
pub mod query;
pub mod retention;
pub mod seal;
pub mod server;
pub mod store;
pub mod tls;
pub mod tokens;
pub mod wal;
pub mod wire;
