//! Metric names, their help texts, and the Prometheus recorder. Every metric bucketd emits is
//! named here so that the `/metrics` page and the README's list cannot drift apart.
//!
//! Labels are always drawn from small fixed sets (protocol, reason, route, status, kind):
//! never a sensor id, which would make cardinality grow with the fleet.

pub const READINGS_ACCEPTED: &str = "bucketd_readings_accepted_total"; // {protocol}
pub const READINGS_REJECTED: &str = "bucketd_readings_rejected_total"; // {protocol, reason}
pub const RECEIVED_BYTES: &str = "bucketd_received_bytes_total"; // {protocol}
pub const READINGS_BUFFERED: &str = "bucketd_readings_buffered"; // gauge
pub const FLUSHES: &str = "bucketd_flushes_total"; // {result}
pub const FLUSH_DURATION: &str = "bucketd_flush_duration_seconds"; // histogram
pub const FLUSH_READINGS: &str = "bucketd_flush_readings"; // histogram, readings per flush
pub const STORE_ERRORS: &str = "bucketd_store_errors_total"; // {kind}
pub const BUCKETS_SPILLED: &str = "bucketd_buckets_spilled_total";
pub const READINGS_DROPPED: &str = "bucketd_readings_dropped_total"; // {reason}
pub const HTTP_REQUESTS: &str = "bucketd_http_requests_total"; // {route, status}
pub const HTTP_REQUEST_DURATION: &str = "bucketd_http_request_duration_seconds"; // {route}
pub const TCP_CONNECTIONS: &str = "bucketd_tcp_connections_total";
pub const TCP_CONNECTIONS_OPEN: &str = "bucketd_tcp_connections_open";
