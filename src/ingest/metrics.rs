//! The ingest metrics, labelled by protocol (never by sensor), shared by the HTTP and TCP
//! listeners.

use crate::metrics::{READINGS_ACCEPTED, READINGS_REJECTED, RECEIVED_BYTES};

/// Protocol labels of the ingest metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Json,
    Ndjson,
    LpHttp,
    LpTcp,
    /// Dead letters written back (`POST /api/v1/dead-letters/replay`).
    DeadLetters,
    /// Prometheus remote write.
    PromRemoteWrite,
    /// OpenTelemetry metrics over HTTP.
    Otlp,
    /// Messages of the MQTT subscription.
    Mqtt,
}

impl Protocol {
    pub fn label(self) -> &'static str {
        match self {
            Protocol::Json => "json",
            Protocol::Ndjson => "ndjson",
            Protocol::LpHttp => "lp_http",
            Protocol::LpTcp => "lp_tcp",
            Protocol::DeadLetters => "dead_letters",
            Protocol::PromRemoteWrite => "prometheus",
            Protocol::Otlp => "otlp",
            Protocol::Mqtt => "mqtt",
        }
    }
}

pub fn count_received(protocol: Protocol, bytes: usize) {
    metrics::counter!(RECEIVED_BYTES, "protocol" => protocol.label()).increment(bytes as u64);
}

pub fn count_accepted(protocol: Protocol, n: usize) {
    if n > 0 {
        metrics::counter!(READINGS_ACCEPTED, "protocol" => protocol.label()).increment(n as u64);
    }
}

pub fn count_rejected(protocol: Protocol, reason: &'static str, n: usize) {
    if n > 0 {
        metrics::counter!(READINGS_REJECTED, "protocol" => protocol.label(), "reason" => reason)
            .increment(n as u64);
    }
}
