//! MQTT: bucketd subscribes to a broker (`--mqtt-url`) and stores what is published on its
//! topics, with the promise of the HTTP writes: a message is acknowledged (PUBACK) only once
//! its readings are as durable as `--ack` says, so a crash loses nothing the broker believes
//! delivered; the broker delivers it again.
//!
//! - QoS 1 subscriptions in a persistent session (`clean_session` off) under a client id that
//!   survives restarts (`--mqtt-client-id`, by default `bucketd-<writer id>`): messages
//!   published while bucketd is down wait at the broker.
//! - Payloads ([`payload`]): line protocol, bucketd's JSON readings, or a plain number named by
//!   its topic through `--mqtt-topic-template`.
//! - Full-policy: messages wait for their share of the requests' memory before they are
//!   taken from the connection, and a full log or buffers are waited out, retried with backoff,
//!   before anything is acknowledged. Nothing is dropped: the broker holds what is not acked.
//! - A bad message (or line) is counted and logged, acknowledged, and never stops the
//!   subscription. A lost connection is retried with backoff.
//!
//! # Layout
//! - [`payload`]: what a message becomes.
//! - `session`: the connection, and the loop that stores and acknowledges.

pub mod payload;
mod session;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use payload::{PayloadFormat, TopicTemplate};
pub use session::spawn;

use crate::ingest::intake::Intake;
use crate::ingest::memory::RequestMemory;
use crate::ingest::validate::InputLimits;

/// Where and how to subscribe (the `--mqtt-*` flags).
#[derive(Clone, Debug)]
pub struct MqttConfig {
    pub broker: Broker,
    /// Topic filters, wildcards allowed.
    pub topics: Vec<String>,
    pub client_id: String,
    pub payload: PayloadFormat,
    pub template: Option<TopicTemplate>,
    /// PEM certificates to trust for `mqtts://`; the system's roots when `None`.
    pub ca: Option<PathBuf>,
    /// The largest message taken; the broker is told, and larger ones close the connection.
    pub max_message_bytes: usize,
    pub keep_alive: Duration,
}

/// A broker's address from `--mqtt-url`: `mqtt://[user[:password]@]host[:port]`, or `mqtts://`
/// for TLS.
#[derive(Clone, PartialEq, Eq)]
pub struct Broker {
    pub host: String,
    pub port: u16,
    pub tls: bool,
    pub credentials: Option<(String, String)>,
}

impl std::fmt::Debug for Broker {
    // The password stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let user = self.credentials.as_ref().map(|(user, _)| user.as_str());
        let scheme = if self.tls { "mqtts" } else { "mqtt" };
        write!(
            f,
            "{scheme}://{}{}:{}",
            user.map(|u| format!("{u}@")).unwrap_or_default(),
            self.host,
            self.port
        )
    }
}

impl std::str::FromStr for Broker {
    type Err = String;

    fn from_str(s: &str) -> Result<Broker, String> {
        let url = url::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
        let (tls, default_port) = match url.scheme() {
            "mqtt" | "tcp" => (false, 1883),
            "mqtts" | "ssl" => (true, 8883),
            other => return Err(format!("scheme {other:?}: use mqtt:// or mqtts://")),
        };
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or("the URL names no host")?;
        if !url.path().trim_matches('/').is_empty() || url.query().is_some() {
            return Err("the URL is a broker's address: no path or query".into());
        }
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| "the user or password is not UTF-8".to_owned())
        };
        let credentials = match url.username() {
            "" => None,
            user => Some((decode(user)?, decode(url.password().unwrap_or(""))?)),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
        Ok(Broker { host, port: url.port().unwrap_or(default_port), tls, credentials })
    }
}

/// What the subscription hands its readings to.
pub struct Sink {
    pub intake: Arc<Intake>,
    /// The input limits, in the database the readings go to.
    pub limits: InputLimits,
    pub memory: RequestMemory,
    /// The most readings pushed at once (the buffers' bound).
    pub max_push_readings: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_urls() {
        let b: Broker = "mqtts://sensor%40plant:p%3Ass@broker.example:8884".parse().unwrap();
        assert_eq!(
            b,
            Broker {
                host: "broker.example".into(),
                port: 8884,
                tls: true,
                credentials: Some(("sensor@plant".into(), "p:ss".into())),
            }
        );
        assert_eq!(format!("{b:?}"), "mqtts://sensor@plant@broker.example:8884");
        let b: Broker = "mqtt://127.0.0.1".parse().unwrap();
        assert_eq!((b.port, b.tls, b.credentials), (1883, false, None));
        for bad in ["http://h", "mqtt://h/topic", "mqtt://h?client_id=x", "h:1883"] {
            assert!(bad.parse::<Broker>().is_err(), "{bad}");
        }
    }
}
