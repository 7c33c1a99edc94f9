//! The MQTT connection and the loop that stores what arrives and acknowledges it.
//!
//! Two tasks. The connection task polls rumqttc's event loop, which reads the socket, sends
//! what the client asked (subscriptions, acknowledgements) and keeps the connection alive; it
//! hands each message on through a bounded channel once the message has its share of the
//! requests' memory. The store task takes what has arrived in one push, waits until it is
//! accepted, and only then hands the messages' acknowledgements back to the connection task,
//! in the order they came, as MQTT requires.
//!
//! Only the connection task talks to the client, and it never waits on the store task without
//! also taking acknowledgements: rumqttc sends requests only once it has handed out every
//! packet it has read, so a store task that waited on the client while the connection task
//! waited on the store task would hang both (a broker resending a session's backlog sends
//! thousands of messages at once). Acknowledgements waiting to be sent are bounded by the
//! messages the broker has in flight to bucketd.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnectionError, Event, EventLoop, MqttOptions, Packet, Publish, QoS,
    SubscribeFilter, SubscribeReasonCode, TlsConfiguration, Transport,
};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::payload::{self, BadMessage};
use super::{MqttConfig, Sink};
use crate::ingest::intake::IntakeError;
use crate::ingest::memory::Charge;
use crate::ingest::metrics::{Protocol, count_accepted, count_received, count_rejected};
use crate::metrics::{MQTT_CONNECTED, MQTT_CONNECTIONS};
use crate::model::{Item, TimestampMs};
use crate::wal::WalError;

const PROTOCOL: Protocol = Protocol::Mqtt;
/// Messages received and not yet taken by the store task; each also holds its memory share.
const CHANNEL_MESSAGES: usize = 256;
/// Requests (acknowledgements, subscriptions) the client queues until the event loop sends
/// them; acknowledgements beyond wait in the connection task.
const REQUEST_CAPACITY: usize = 4 * CHANNEL_MESSAGES;
/// Backoff between connection attempts, and between retries of a push that found bucketd full.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const PUSH_RETRY_MAX: Duration = Duration::from_secs(1);
/// MQTT's largest packet: a remaining length of at most 268,435,455 bytes, and its header.
const MQTT_MAX_PACKET: usize = 268_435_455 + 5;
/// How long a message may wait for its memory share before the wait is logged.
const MEMORY_WAIT: Duration = Duration::from_secs(5);

/// A message and the memory share it holds until it is stored.
struct Message {
    publish: Publish,
    /// The connection it came on (see [`Connection::generation`]).
    generation: u64,
    _held: Charge,
}

/// The acknowledgement of a message stored: the connection it came on, and what the
/// acknowledgement needs of it (not its payload).
type Ack = (u64, Publish);

/// Why the subscription could not start.
#[derive(Debug, thiserror::Error)]
pub enum MqttError {
    #[error("cannot read the MQTT CA file {path}: {why}")]
    Ca { path: String, why: String },
    #[error("the MQTT TLS configuration: {0}")]
    Tls(String),
}

/// Connects and subscribes, and stores what arrives until `stop`; the task ends once what was
/// stored is acknowledged and the connection closed.
pub fn spawn(
    config: MqttConfig,
    sink: Sink,
    stop: CancellationToken,
) -> Result<JoinHandle<()>, MqttError> {
    let options = options(&config)?;
    let (client, events) = AsyncClient::new(options, REQUEST_CAPACITY);
    let (tx, rx) = mpsc::channel(CHANNEL_MESSAGES);
    let (ack_tx, ack_rx) = mpsc::channel(CHANNEL_MESSAGES);
    let sink = Arc::new(sink);
    let done = CancellationToken::new();
    let connection = Connection {
        events,
        client,
        topics: config.topics.clone(),
        tx: Some(tx),
        acks: ack_rx,
        pending: VecDeque::new(),
        generation: 0,
        max_message_bytes: config.max_message_bytes,
        sink: sink.clone(),
    };
    let connection = tokio::spawn(connection.run(done.clone()));
    Ok(tokio::spawn(async move {
        store_loop(&config, rx, ack_tx, &sink, &stop).await;
        done.cancel();
        let _ = connection.await;
    }))
}

fn options(config: &MqttConfig) -> Result<MqttOptions, MqttError> {
    let broker = &config.broker;
    let mut options = MqttOptions::new(&config.client_id, &broker.host, broker.port);
    options
        .set_clean_session(false)
        .set_manual_acks(true)
        .set_keep_alive(config.keep_alive)
        // The protocol's own bound. A smaller one would close the connection on a larger
        // message, which the broker then sends again, forever; the store task refuses it
        // instead.
        .set_max_packet_size(MQTT_MAX_PACKET, 64 * 1024);
    if let Some((user, password)) = &broker.credentials {
        options.set_credentials(user, password);
    }
    if broker.tls {
        options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(Arc::new(
            tls_config(config)?,
        ))));
    }
    Ok(options)
}

fn tls_config(config: &MqttConfig) -> Result<rustls::ClientConfig, MqttError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    match &config.ca {
        Some(path) => {
            let ca = |why: String| MqttError::Ca { path: path.display().to_string(), why };
            for cert in CertificateDer::pem_file_iter(path).map_err(|e| ca(e.to_string()))? {
                roots.add(cert.map_err(|e| ca(e.to_string()))?).map_err(|e| ca(e.to_string()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| MqttError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The connection task's state.
struct Connection {
    events: EventLoop,
    client: AsyncClient,
    topics: Vec<String>,
    /// To the store task; `None` once it has stopped.
    tx: Option<mpsc::Sender<Message>>,
    /// From the store task: the acknowledgements of what it stored, in order.
    acks: mpsc::Receiver<Vec<Ack>>,
    /// Acknowledgements the client has no room for yet.
    pending: VecDeque<Publish>,
    /// Counts connections. An acknowledgement goes only on the connection its message came
    /// on: after a reconnect the broker sends unacknowledged messages again, and may give a
    /// packet id an old acknowledgement names to a message bucketd has not stored.
    generation: u64,
    /// Larger messages take no memory share: they are refused as they are taken.
    max_message_bytes: usize,
    sink: Arc<Sink>,
}

impl Connection {
    /// Polls the event loop until `done`: subscribes on every connection, hands messages on,
    /// sends acknowledgements, and reconnects with backoff.
    async fn run(mut self, done: CancellationToken) {
        let mut backoff = BACKOFF_FIRST;
        loop {
            self.send_acks();
            let event = tokio::select! {
                _ = done.cancelled() => {
                    let _ = tokio::time::timeout(Duration::from_secs(5), self.finish()).await;
                    return;
                }
                Some(acks) = self.acks.recv() => {
                    take(&mut self.pending, self.generation, acks);
                    continue;
                }
                event = self.events.poll() => event,
            };
            match event {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                    backoff = BACKOFF_FIRST;
                    self.generation += 1;
                    self.pending.clear();
                    metrics::counter!(MQTT_CONNECTIONS, "result" => "connected").increment(1);
                    tracing::info!(session_present = ack.session_present, "MQTT: connected");
                    let filters = self
                        .topics
                        .iter()
                        .map(|t| SubscribeFilter::new(t.clone(), QoS::AtLeastOnce));
                    if let Err(e) = self.client.try_subscribe_many(filters) {
                        tracing::error!(error = %e, "MQTT: cannot subscribe");
                    }
                }
                Ok(Event::Incoming(Packet::SubAck(ack))) => {
                    let refused =
                        ack.return_codes.iter().any(|c| matches!(c, SubscribeReasonCode::Failure));
                    if refused {
                        tracing::error!(topics = ?self.topics, "MQTT: the broker refused a subscription");
                    } else {
                        metrics::gauge!(MQTT_CONNECTED).set(1.0);
                        tracing::info!(topics = ?self.topics, "MQTT: subscribed");
                    }
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => {
                    count_received(PROTOCOL, publish.payload.len());
                    self.hand_on(publish).await;
                }
                Ok(_) => {}
                Err(e) => {
                    metrics::gauge!(MQTT_CONNECTED).set(0.0);
                    log_connection_error(&e, backoff);
                    tokio::select! {
                        _ = done.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }

    /// Gives the client every acknowledgement it has room for, in order.
    fn send_acks(&mut self) {
        while let Some(publish) = self.pending.front() {
            if self.client.try_ack(publish).is_err() {
                return;
            }
            self.pending.pop_front();
        }
    }

    /// Waits for the message's memory share, then for room in the channel, taking
    /// acknowledgements meanwhile.
    async fn hand_on(&mut self, publish: Publish) {
        let Connection { tx, acks, pending, sink, generation, max_message_bytes, .. } = self;
        let generation = *generation;
        let mut held = Charge::default();
        while publish.payload.len() <= *max_message_bytes {
            tokio::select! {
                charged = sink.memory.charge_up_to(&mut held, publish.payload.len(), MEMORY_WAIT) => {
                    if charged.is_ok() {
                        break;
                    }
                    tracing::warn!("MQTT: waiting for memory before reading more messages");
                }
                Some(more) = acks.recv() => take(pending, generation, more),
            }
        }
        let Some(sender) = tx.as_ref() else { return };
        let message = Message { publish, generation, _held: held };
        let taken = loop {
            tokio::select! {
                permit = sender.reserve() => break permit.map(|permit| permit.send(message)),
                Some(more) = acks.recv() => take(pending, generation, more),
            }
        };
        if taken.is_err() {
            // The store task has stopped: what comes now is acknowledged by no one and comes
            // again after a restart.
            *tx = None;
        }
    }

    /// Sends the store task's last acknowledgements, then the disconnect, and polls until
    /// they are out.
    async fn finish(&mut self) {
        while let Some(more) = self.acks.recv().await {
            take(&mut self.pending, self.generation, more);
        }
        while !self.pending.is_empty() {
            self.send_acks();
            if self.events.poll().await.is_err() {
                return;
            }
        }
        let _ = self.client.try_disconnect();
        loop {
            match self.events.poll().await {
                Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect)) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }
}

/// Queues the acknowledgements of messages that came on this connection, `generation`.
fn take(pending: &mut VecDeque<Publish>, generation: u64, acks: Vec<Ack>) {
    pending.extend(acks.into_iter().filter(|(g, _)| *g == generation).map(|(_, ack)| ack));
}

fn log_connection_error(e: &ConnectionError, retry_in: Duration) {
    let result = match e {
        ConnectionError::ConnectionRefused(_) => "refused",
        _ => "failed",
    };
    metrics::counter!(MQTT_CONNECTIONS, "result" => result).increment(1);
    tracing::warn!(error = %e, ?retry_in, "MQTT: connection lost or refused; reconnecting");
}

/// Takes what has arrived, stores it and hands back its acknowledgements, until `stop` or
/// the channel closes.
async fn store_loop(
    config: &MqttConfig,
    mut rx: mpsc::Receiver<Message>,
    acks: mpsc::Sender<Vec<Ack>>,
    sink: &Sink,
    stop: &CancellationToken,
) {
    let mut bad_logged = BadLog::default();
    let mut clock = ArrivalClock::default();
    loop {
        let first = tokio::select! {
            _ = stop.cancelled() => return,
            message = rx.recv() => match message {
                Some(m) => m,
                None => return,
            },
        };
        let mut messages = vec![first];
        let mut items: Vec<Item> = Vec::new();
        let mut add = |message: &Message, items: &mut Vec<Item>| {
            let size = message.publish.payload.len();
            if size > config.max_message_bytes {
                count_rejected(PROTOCOL, "too_large", 1);
                let message_ = format!(
                    "the message is {size} bytes, more than the limit of {} (--max-body-bytes)",
                    config.max_message_bytes
                );
                bad_logged.log(
                    &message.publish.topic,
                    &BadMessage { message: message_, reason: "too_large" },
                );
                return;
            }
            let decoded = payload::decode(
                &message.publish.topic,
                &message.publish.payload,
                config.payload,
                config.template.as_ref(),
                clock.next(),
                &sink.limits,
            );
            for bad in &decoded.bad {
                count_rejected(PROTOCOL, bad.reason, 1);
                bad_logged.log(&message.publish.topic, bad);
            }
            items.extend(decoded.items);
        };
        add(&messages[0], &mut items);
        while items.len() < sink.max_push_readings {
            let Ok(message) = rx.try_recv() else { break };
            add(&message, &mut items);
            messages.push(message);
        }
        if !push(sink, items, stop).await {
            return;
        }
        // What an acknowledgement needs, without the payload; the memory shares go now.
        let stored = messages
            .into_iter()
            .map(|m| {
                let mut ack = Publish::new("", m.publish.qos, Vec::new());
                ack.pkid = m.publish.pkid;
                (m.generation, ack)
            })
            .collect();
        if acks.send(stored).await.is_err() {
            return;
        }
    }
}

/// Pushes `items`, in pieces the buffers can take, each waiting out a full log or buffers;
/// `false` if they cannot all be taken (the log failed, or `stop` came first): nothing of them
/// is acknowledged then.
async fn push(sink: &Sink, mut items: Vec<Item>, stop: &CancellationToken) -> bool {
    while !items.is_empty() {
        let rest = items.split_off(items.len().min(sink.max_push_readings.max(1)));
        if !push_piece(sink, items, stop).await {
            return false;
        }
        items = rest;
    }
    true
}

async fn push_piece(sink: &Sink, items: Vec<Item>, stop: &CancellationToken) -> bool {
    let n = items.len();
    let mut retry = BACKOFF_FIRST;
    loop {
        // A refused push takes its readings with it: keep a copy for the retry.
        let attempt = if sink.intake.refuses_push_of(n) {
            Err(None)
        } else {
            sink.intake.accept(items.clone()).await.map_err(Some)
        };
        match attempt {
            Ok(accepted) => {
                count_accepted(PROTOCOL, accepted);
                return true;
            }
            Err(None | Some(IntakeError::BuffersFull(_)))
            | Err(Some(IntakeError::Wal(WalError::Full { .. } | WalError::NoSpace(_)))) => {
                tracing::debug!("MQTT: bucketd is full; waiting before taking more messages");
                tokio::select! {
                    _ = stop.cancelled() => return false,
                    _ = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(PUSH_RETRY_MAX);
            }
            Err(Some(e)) => {
                count_rejected(PROTOCOL, e.reason(), n);
                tracing::error!(error = %e, "MQTT: the log refuses writes; the subscription stops");
                return false;
            }
        }
    }
}

/// Logs bad messages at most once a second, saying how many were not logged.
#[derive(Default)]
struct BadLog {
    last: Option<std::time::Instant>,
    unlogged: u64,
}

impl BadLog {
    fn log(&mut self, topic: &str, bad: &BadMessage) {
        let now = std::time::Instant::now();
        if self.last.is_some_and(|last| now.duration_since(last) < Duration::from_secs(1)) {
            self.unlogged += 1;
            return;
        }
        tracing::warn!(topic, error = %bad, also_refused = self.unlogged, "MQTT: message refused");
        self.last = Some(now);
        self.unlogged = 0;
    }
}

/// The time a message without its own takes: its arrival, but at least a millisecond after the
/// previous message's. A point is a series and a millisecond, so two plain numbers of one
/// topic arriving within a millisecond (a broker sending a backlog) stay two readings.
#[derive(Default)]
struct ArrivalClock {
    last: TimestampMs,
}

impl ArrivalClock {
    fn next(&mut self) -> TimestampMs {
        self.last = chrono::Utc::now().timestamp_millis().max(self.last + 1);
        self.last
    }
}
