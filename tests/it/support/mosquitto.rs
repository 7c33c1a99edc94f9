//! A real Mosquitto broker as a child process on 127.0.0.1, and a publisher: the other end of
//! the MQTT tests.
//!
//! `scripts/test.sh` installs it (Debian package `mosquitto`); a test that needs it and cannot
//! find it fails, saying so.

use std::net::SocketAddr;
use std::path::PathBuf;
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
    child: Child,
    dir: tempfile::TempDir,
}

impl Mosquitto {
    /// Starts a broker that takes anonymous clients on a free port of 127.0.0.1.
    pub async fn start() -> Mosquitto {
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
            let config = dir.path().join("mosquitto.conf");
            // Queues sized for the bursts the tests send to a subscriber that is away.
            std::fs::write(
                &config,
                format!(
                    "listener {} {}\nallow_anonymous true\npersistence false\n\
                     max_queued_messages 100000\nmax_inflight_messages 20\n",
                    addr.port(),
                    addr.ip()
                ),
            )
            .unwrap();
            let log = std::fs::File::create(dir.path().join("mosquitto.log")).unwrap();
            let child = Command::new(&binary)
                .arg("-c")
                .arg(&config)
                .arg("-v")
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("{} does not start: {e}", binary.display()));
            let mut broker = Mosquitto { addr, child, dir };
            let deadline = tokio::time::Instant::now() + START_DEADLINE;
            loop {
                if let Some(status) = broker.child.try_wait().unwrap() {
                    last_failure = format!("exited ({status}):\n{}", broker.log());
                    break;
                }
                if tokio::net::TcpStream::connect(addr).await.is_ok() {
                    return broker;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "mosquitto did not listen:\n{}",
                    broker.log()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("mosquitto did not start in {START_ATTEMPTS} attempts: {last_failure}")
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
        let mut options = MqttOptions::new(client_id, self.addr.ip().to_string(), self.addr.port());
        options.set_keep_alive(Duration::from_secs(30)).set_inflight(100);
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

impl Drop for Mosquitto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
