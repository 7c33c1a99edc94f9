//! A real Mosquitto broker as a child process on 127.0.0.1, and a publisher: the other end of
//! the MQTT tests.
//!
//! `scripts/test.sh` installs it (Debian package `mosquitto`); a test that needs it and cannot
//! find it fails, saying so.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rumqttc::{AsyncClient, Event, MqttOptions, Outgoing, Packet, QoS};

use super::influxd::free_port;

/// How long Mosquitto may take to accept connections after it was started.
const START_DEADLINE: Duration = Duration::from_secs(30);
/// Start attempts: another process may take the port between picking it and binding it.
const START_ATTEMPTS: usize = 5;

pub struct Mosquitto {
    pub addr: SocketAddr,
    binary: PathBuf,
    child: Child,
    dir: tempfile::TempDir,
}

impl Mosquitto {
    /// Starts a broker that takes anonymous clients on a free port of 127.0.0.1.
    pub async fn start() -> Mosquitto {
        Self::start_with(|_, _| String::new()).await
    }

    /// Starts a broker whose configuration is the listener on a free port of 127.0.0.1, then
    /// what `config` returns, given the broker's directory and port (settings of the listener,
    /// other listeners). Without it, the listener takes anonymous clients.
    pub async fn start_with(config: impl Fn(&Path, u16) -> String) -> Mosquitto {
        let binary = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "mosquitto is not installed: the MQTT tests need a broker. scripts/test.sh \
                     installs it (Debian package `mosquitto`)"
                )
            });
        let mut last_failure = String::new();
        for _ in 0..START_ATTEMPTS {
            let dir = tempfile::tempdir().expect("temporary directory for mosquitto");
            let addr = free_port();
            let extra = config(dir.path(), addr.port());
            let anonymous = if extra.is_empty() { "allow_anonymous true\n" } else { "" };
            // Queues sized for the bursts the tests send to a subscriber that is away.
            std::fs::write(
                dir.path().join("mosquitto.conf"),
                format!(
                    "per_listener_settings true\npersistence false\n\
                     max_queued_messages 100000\nmax_inflight_messages 20\n\
                     listener {} {}\n{anonymous}{extra}",
                    addr.port(),
                    addr.ip()
                ),
            )
            .unwrap();
            let child = spawn(&binary, dir.path());
            let mut broker = Mosquitto { addr, binary: binary.clone(), child, dir };
            match broker.wait_listening().await {
                Ok(()) => return broker,
                Err(log) => last_failure = log,
            }
        }
        panic!("mosquitto did not start in {START_ATTEMPTS} attempts: {last_failure}")
    }

    /// Stops the broker (its sessions go with it) and starts it again on the same port.
    pub async fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(&self.binary, self.dir.path());
        if let Err(log) = self.wait_listening().await {
            panic!("mosquitto did not start again: {log}");
        }
    }

    async fn wait_listening(&mut self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("exited ({status}):\n{}", self.log()));
            }
            if tokio::net::TcpStream::connect(self.addr).await.is_ok() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("not listening within {START_DEADLINE:?}:\n{}", self.log()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self) -> String {
        format!("mqtt://{}", self.addr)
    }

    /// What the broker logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }

    /// Publishes each `(topic, payload)` with QoS 1, `pace` apart, and returns once the broker
    /// has acknowledged every one.
    pub async fn publish(&self, client_id: &str, messages: &[(String, String)], pace: Duration) {
        self.publish_to(self.addr.port(), client_id, messages, pace).await
    }

    /// [`Mosquitto::publish`] to the anonymous plain listener on `port`.
    pub async fn publish_to(
        &self,
        port: u16,
        client_id: &str,
        messages: &[(String, String)],
        pace: Duration,
    ) {
        let mut options = MqttOptions::new(client_id, self.addr.ip().to_string(), port);
        options
            .set_keep_alive(Duration::from_secs(30))
            .set_inflight(100)
            .set_max_packet_size(1 << 20, 1 << 20);
        let (client, mut events) = AsyncClient::new(options, messages.len().max(1));
        let n = messages.len();
        let acked = tokio::spawn(async move {
            let mut acked = 0;
            while acked < n {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => acked += 1,
                    Ok(_) => {}
                    Err(e) => return Err(format!("{acked} of {n} publishes acknowledged: {e}")),
                }
            }
            Ok(events)
        });
        for (topic, payload) in messages {
            client.publish(topic, QoS::AtLeastOnce, false, payload.clone()).await.unwrap();
            if !pace.is_zero() {
                tokio::time::sleep(pace).await;
            }
        }
        let mut events = tokio::time::timeout(Duration::from_secs(120), acked)
            .await
            .expect("the broker acknowledges within 120 s")
            .unwrap()
            .unwrap_or_else(|e| panic!("publishing to mosquitto: {e}\n{}", self.log()));
        client.disconnect().await.unwrap();
        while !matches!(events.poll().await, Ok(Event::Outgoing(Outgoing::Disconnect)) | Err(_)) {}
    }
}

fn spawn(binary: &Path, dir: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("mosquitto.log"))
        .unwrap();
    Command::new(binary)
        .arg("-c")
        .arg(dir.join("mosquitto.conf"))
        .arg("-v")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", binary.display()))
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
