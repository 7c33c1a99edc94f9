//! Metric names, their help texts, and the Prometheus recorder. Every metric bucketd emits is
//! named here so that the `/metrics` page and the list in docs/operations.md cannot drift apart.
//!
//! Labels are always drawn from small fixed sets (protocol, reason, route, status, kind):
//! never a sensor id, which would make cardinality grow with the fleet.

pub const READINGS_ACCEPTED: &str = "bucketd_readings_accepted_total"; // {protocol}
pub const READINGS_REJECTED: &str = "bucketd_readings_rejected_total"; // {protocol, reason}
pub const RECEIVED_BYTES: &str = "bucketd_received_bytes_total"; // {protocol}
pub const READINGS_BUFFERED: &str = "bucketd_readings_buffered"; // gauge
pub const READINGS_BUFFERED_PEAK: &str = "bucketd_buffered_readings_peak"; // gauge
pub const BUFFERED_BYTES: &str = "bucketd_buffered_bytes"; // gauge
pub const FLUSHES: &str = "bucketd_flushes_total"; // {result}
pub const FLUSH_DURATION: &str = "bucketd_flush_duration_seconds"; // histogram
pub const FLUSH_READINGS: &str = "bucketd_flush_readings"; // histogram, readings per flush
pub const STORE_ERRORS: &str = "bucketd_store_errors_total"; // {kind}
pub const BUCKETS_CREATED: &str = "bucketd_buckets_created_total";
pub const READINGS_DROPPED: &str = "bucketd_readings_dropped_total"; // {reason}
pub const DEAD_LETTER_READINGS: &str = "bucketd_dead_letter_readings_total";
pub const DEAD_LETTER_BYTES: &str = "bucketd_dead_letter_bytes"; // gauge
pub const HTTP_REQUESTS: &str = "bucketd_http_requests_total"; // {route, status}
pub const HTTP_REQUEST_DURATION: &str = "bucketd_http_request_duration_seconds"; // {route}
pub const TCP_CONNECTIONS: &str = "bucketd_tcp_connections_total"; // {result}
pub const TCP_CONNECTIONS_OPEN: &str = "bucketd_tcp_connections_open";
pub const HTTP_CONNECTIONS: &str = "bucketd_http_connections_total"; // {result}
pub const TLS_HANDSHAKES: &str = "bucketd_tls_handshakes_total"; // {listener, result}
pub const TLS_RELOADS: &str = "bucketd_tls_reloads_total"; // {result}
pub const SERIES_TRACKED: &str = "bucketd_series"; // gauge
pub const MQTT_CONNECTED: &str = "bucketd_mqtt_connected"; // gauge
pub const MQTT_CONNECTIONS: &str = "bucketd_mqtt_connections_total"; // {result}
pub const READINGS_LANDED_DESPITE_ERROR: &str = "bucketd_readings_landed_despite_error_total";
pub const WAL_BYTES: &str = "bucketd_wal_bytes"; // gauge
pub const WAL_SEGMENTS: &str = "bucketd_wal_segments"; // gauge
pub const WAL_REPLAYING: &str = "bucketd_wal_replaying_segments"; // gauge
pub const WAL_SYNCS: &str = "bucketd_wal_syncs_total";
pub const WAL_SYNC_DURATION: &str = "bucketd_wal_sync_duration_seconds"; // histogram
pub const WAL_UNSETTLED: &str = "bucketd_wal_unsettled_readings"; // gauge
pub const WAL_REPLAYED: &str = "bucketd_wal_replayed_readings_total"; // {result}
pub const RETENTION_HOURS_DELETED: &str = "bucketd_retention_hours_deleted_total";
pub const RETENTION_READINGS_DELETED: &str = "bucketd_retention_readings_deleted_total";
pub const RETENTION_STATS_DELETED: &str = "bucketd_retention_hour_stats_deleted_total";
pub const RETENTION_PASS_DURATION: &str = "bucketd_retention_pass_seconds"; // histogram
pub const STORE_COMPACTIONS: &str = "bucketd_store_compactions_total"; // {result}
pub const STORE_FILE_BYTES: &str = "bucketd_store_file_bytes"; // gauge
pub const STORE_CHUNKS_SEALED: &str = "bucketd_store_chunks_sealed_total";
pub const STORE_CHUNKS_UNSEALED: &str = "bucketd_store_chunks_unsealed"; // gauge

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

/// Bucket bounds for every `*_seconds` histogram: from sub-millisecond request handling up to a
/// minute-long flush of a slow store.
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Bucket bounds for readings per flush: one straggler up to a full buffer drain.
const FLUSH_READINGS_BUCKETS: &[f64] =
    &[1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0, 1_000_000.0];

/// How often histogram samples are folded into their buckets. `install_recorder` leaves this to
/// the caller; a plain thread keeps it independent of whichever Tokio runtime installed it.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static INSTALL: Mutex<()> = Mutex::new(());

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("cannot install the Prometheus recorder: {0}")]
    Install(#[from] BuildError),
    #[error("cannot start the metrics upkeep thread: {0}")]
    Upkeep(std::io::Error),
}

/// Installs the Prometheus recorder as the process's global `metrics` recorder, once: later
/// calls (several servers in one test process) return the same handle. Fails only when some
/// other recorder was installed first, or no thread can be started.
pub fn install() -> Result<PrometheusHandle, MetricsError> {
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    // The mutex makes "check, install, publish" atomic; the recorder can be set only once.
    let _guard = INSTALL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(handle) = HANDLE.get() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(FLUSH_READINGS.into()), FLUSH_READINGS_BUCKETS)?
        .install_recorder()?;
    describe();
    let _ = HANDLE.set(handle.clone());
    let upkeep = handle.clone();
    std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_INTERVAL);
                upkeep.run_upkeep();
            }
        })
        .map_err(MetricsError::Upkeep)?;
    Ok(handle)
}

/// Help texts and units for the `/metrics` page; what each label means is stated here.
fn describe() {
    describe_counter!(
        READINGS_ACCEPTED,
        Unit::Count,
        "Readings accepted into the buffers, by protocol (json, ndjson, lp_http, lp_tcp, \
         prometheus, otlp, mqtt, dead_letters)."
    );
    describe_counter!(
        READINGS_REJECTED,
        Unit::Count,
        "Readings or lines refused at ingest, by protocol and reason (syntax, sensor, fields, \
         name, value, timestamp, line_too_long, too_large, buffers_full, too_many_readings, shutdown)."
    );
    describe_counter!(
        RECEIVED_BYTES,
        Unit::Bytes,
        "Body bytes received by ingest endpoints as sent on the wire (before decompression), by \
         protocol."
    );
    describe_gauge!(
        READINGS_BUFFERED,
        Unit::Count,
        "Readings held in memory: buffered or being flushed."
    );
    describe_gauge!(
        READINGS_BUFFERED_PEAK,
        Unit::Count,
        "Most readings ever held in memory at once since start."
    );
    describe_gauge!(
        BUFFERED_BYTES,
        Unit::Bytes,
        "Bytes the buffers hold, buffered or being flushed, as the memory budget counts them."
    );
    describe_counter!(FLUSHES, Unit::Count, "Store writes by the flusher, by result.");
    describe_histogram!(FLUSH_DURATION, Unit::Seconds, "Duration of one flusher store write.");
    describe_histogram!(
        FLUSH_READINGS,
        Unit::Count,
        "Readings written by one flusher store write."
    );
    describe_counter!(STORE_ERRORS, Unit::Count, "Store operation failures, by kind.");
    describe_counter!(
        BUCKETS_CREATED,
        Unit::Count,
        "Buckets created: each hour's first bucket and every spill into a new bucket of the same hour."
    );
    describe_counter!(
        READINGS_DROPPED,
        Unit::Count,
        "Accepted readings that never reached the store, by reason."
    );
    describe_counter!(
        DEAD_LETTER_READINGS,
        Unit::Count,
        "Readings the store refused for good, kept in the dead-letter directory."
    );
    describe_gauge!(
        DEAD_LETTER_BYTES,
        Unit::Bytes,
        "Bytes the dead-letter directory's files take (until replayed)."
    );
    describe_counter!(
        HTTP_REQUESTS,
        Unit::Count,
        "HTTP requests by matched route (\"unmatched\" when none) and status code."
    );
    describe_histogram!(
        HTTP_REQUEST_DURATION,
        Unit::Seconds,
        "HTTP request duration until the response head, by matched route."
    );
    describe_counter!(
        TCP_CONNECTIONS,
        Unit::Count,
        "Raw TCP line-protocol connections, by result (accepted, rejected: over the limit)."
    );
    describe_gauge!(TCP_CONNECTIONS_OPEN, Unit::Count, "Raw TCP line-protocol connections open.");
    describe_counter!(
        HTTP_CONNECTIONS,
        Unit::Count,
        "HTTP connections accepted, rejected (over the limit), and closed for a header_timeout \
         or idle_timeout."
    );
    describe_counter!(
        TLS_HANDSHAKES,
        Unit::Count,
        "TLS handshakes, by listener (http, tcp) and result (ok, failed, timeout)."
    );
    describe_counter!(
        TLS_RELOADS,
        Unit::Count,
        "Changes of the TLS files, by result (loaded, failed: the configuration before stays)."
    );
    describe_counter!(
        READINGS_LANDED_DESPITE_ERROR,
        Unit::Count,
        "Readings of store writes that reported a failure yet had landed (a lost reply, a \
         timeout, a batch that landed in part); found by the store's high-water mark and not \
         written again."
    );
    describe_gauge!(
        WAL_BYTES,
        Unit::Bytes,
        "Bytes of write-ahead log on disk or queued for it, settled files kept for reuse included \
         (bounded by --wal-max-bytes)."
    );
    describe_gauge!(WAL_SEGMENTS, Unit::Count, "Write-ahead log segment files.");
    describe_gauge!(
        WAL_REPLAYING,
        Unit::Count,
        "Write-ahead log segments left by an earlier process that are not yet read back whole: \
         their readings are not yet counted as unsettled."
    );
    describe_counter!(WAL_SYNCS, Unit::Count, "Group commits (fsyncs) of the write-ahead log.");
    describe_histogram!(
        WAL_SYNC_DURATION,
        Unit::Seconds,
        "Duration of one write-ahead log group commit: write and fsync."
    );
    describe_gauge!(
        WAL_UNSETTLED,
        Unit::Count,
        "Readings in the write-ahead log not yet stored: the backlog a restart would replay."
    );
    describe_counter!(
        WAL_REPLAYED,
        Unit::Count,
        "Readings read back from the write-ahead log at start-up: requeued (not yet stored), \
         skipped (already stored) or expired (of hours past --retention, not brought back)."
    );
    describe_counter!(
        RETENTION_HOURS_DELETED,
        Unit::Count,
        "(series, hour)s whose raw readings the retention pass deleted (their hour statistics \
         are kept until --rollup-retention)."
    );
    describe_counter!(
        RETENTION_READINGS_DELETED,
        Unit::Count,
        "Raw readings the retention pass deleted (--retention)."
    );
    describe_counter!(
        RETENTION_STATS_DELETED,
        Unit::Count,
        "(series, hour)s whose hour statistics the retention pass deleted (--rollup-retention)."
    );
    describe_histogram!(
        RETENTION_PASS_DURATION,
        Unit::Seconds,
        "Duration of one retention pass, all of its bounded steps."
    );
    describe_counter!(
        STORE_COMPACTIONS,
        Unit::Count,
        "Compactions of the embedded store's file once writes went quiet, by result (done, \
         busy: a query held the store, failed)."
    );
    describe_gauge!(
        STORE_FILE_BYTES,
        Unit::Bytes,
        "Size of the embedded store's file after its last compaction."
    );
    describe_counter!(
        STORE_CHUNKS_SEALED,
        Unit::Count,
        "Chunks of hours that are over which the seal pass moved next to their series' other \
         hours (embedded store)."
    );
    describe_gauge!(
        STORE_CHUNKS_UNSEALED,
        Unit::Count,
        "Chunks still in write order after the last seal step: hours not yet over, and those \
         the pass has yet to reach (embedded store)."
    );
    describe_gauge!(
        SERIES_TRACKED,
        Unit::Count,
        "Distinct series this process has accepted readings for (bounded by --max-series)."
    );
    describe_counter!(
        MQTT_CONNECTIONS,
        Unit::Count,
        "Connections of the MQTT subscription to its broker, by result (connected, refused: \
         the broker said no, as to a wrong password; failed: no answer, a network or TLS error)."
    );
    describe_gauge!(
        MQTT_CONNECTED,
        Unit::Count,
        "1 while the MQTT subscription (--mqtt-url) is connected to its broker and subscribed, \
         else 0."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_is_idempotent_and_renders_described_metrics() {
        let a = install().unwrap();
        let b = install().unwrap();
        metrics::counter!(TCP_CONNECTIONS, "result" => "accepted").increment(1);
        metrics::histogram!(HTTP_REQUEST_DURATION, "route" => "/unit-test").record(0.003);
        // Other tests in this binary move the shared gauges between the two renders, so compare
        // only the series this test owns: both handles must show the same recorder.
        let owned = |text: &str| -> Vec<String> {
            text.lines().filter(|l| l.contains("/unit-test")).map(str::to_owned).collect()
        };
        let text = b.render();
        assert!(!owned(&text).is_empty(), "{text}");
        assert_eq!(owned(&text), owned(&a.render()));
        assert!(text.contains("# HELP bucketd_tcp_connections_total"), "{text}");
        assert!(text.contains("# TYPE bucketd_http_request_duration_seconds histogram"), "{text}");
        assert!(
            text.contains(
                "bucketd_http_request_duration_seconds_bucket{route=\"/unit-test\",le=\"0.005\"} 1"
            ),
            "{text}"
        );
    }
}
