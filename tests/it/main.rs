//! bucketd's integration tests, one binary, by behaviour:
//!
//! - [`ingest`]: writing data in: JSON, line protocol over HTTP and TCP, gzip, limits, the
//!   memory bound and backpressure, and every protocol end to end on MongoDB;
//! - [`query`]: reading it out through the query router: readings, rollups, sensors, OpenAPI;
//! - [`store`]: the shared Store suite on every store, and what only MongoDB has;
//! - [`durability`]: nothing acknowledged is lost or stored twice: SIGTERM and kill -9 of the
//!   real binary, crash loops, a full disk, a full log, schema upgrades, MongoDB faults;
//! - [`edge`]: the server's edges: authentication, operational endpoints, slow clients;
//! - [`docs`]: what the docs say of the binary holds (the configuration page's flags).
//!
//! [`support`] holds the shared helpers (the MongoDB stand-in and the venvs come from the
//! dev-only `bucketd-test-support` crate, which the benches use too). Run one area with `cargo test --test it ingest::`, one
//! test with `cargo test --test it -- --exact <module path>::<name>`.
//!
//! Test data lives beside this directory (`tests/data/`, `tests/mongo_standin/`) and is found
//! through `CARGO_MANIFEST_DIR`.

mod docs;
mod durability;
mod edge;
mod ingest;
mod query;
mod store;
mod support;
