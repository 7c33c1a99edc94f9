//! MQTT through a real Mosquitto broker and the real binary: messages published while bucketd
//! was down are stored once it is back, a `kill -9` in the middle of a burst loses nothing
//! the broker was told was delivered, and a message the broker delivers again is stored once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::support::binary::Bucketd;
use crate::support::ca::Ca;
use crate::support::in_own_process;
use crate::support::mosquitto::Mosquitto;
use crate::support::server::{
    FlakyStore, Identity, TestServer, assert_stored_exactly, identity, memory_store, metric_sum,
};

/// A guard against a hang, not a performance bound.
const PATIENCE: Duration = Duration::from_secs(120);
const T0_MS: i64 = 1_700_000_000_000;

fn spawn(data: &Path, broker: &Mosquitto, topic: &str, client_id: &str) -> Bucketd {
    spawn_at(data, &broker.url(), topic, client_id, &["--max-body-bytes", "4096"])
}

fn spawn_at(data: &Path, url: &str, topic: &str, client_id: &str, more: &[&str]) -> Bucketd {
    let mut args = vec![
        "--mqtt-url",
        url,
        "--mqtt-topic",
        topic,
        "--mqtt-client-id",
        client_id,
        "--mqtt-topic-template",
        "plant/{room}/{field}",
    ];
    args.extend_from_slice(more);
    Bucketd::spawn_args(data, "100ms", &args)
}

async fn metric(bucketd: &Bucketd, client: &reqwest::Client, name: &str) -> f64 {
    let text = client.get(format!("{}/metrics", bucketd.base)).send().await.unwrap();
    metric_sum(&text.text().await.unwrap(), name)
}

/// Waits until bucketd is subscribed.
async fn wait_subscribed(bucketd: &mut Bucketd, client: &reqwest::Client, broker: &Mosquitto) {
    bucketd.wait_ready(client).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while metric(bucketd, client, "bucketd_mqtt_connected").await != 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "not subscribed:\n{}", broker.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every reading of `sensor` with field `field`, by value, with how many times it is stored;
/// nothing while bucketd does not know the sensor yet.
async fn stored(
    bucketd: &Bucketd,
    client: &reqwest::Client,
    sensor: &str,
    field: &str,
) -> BTreeMap<i64, usize> {
    let query = [("sensor", sensor), ("from", "0"), ("to", "4000000000000"), ("limit", "100000")];
    let url =
        format!("{}/api/v1/readings?{}", bucketd.base, serde_urlencoded::to_string(query).unwrap());
    let response = client.get(url).send().await.unwrap();
    let mut values = BTreeMap::new();
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return values;
    }
    let body: serde_json::Value = response.json().await.unwrap();
    for r in body["readings"].as_array().unwrap_or_else(|| panic!("{body}")) {
        *values.entry(r["fields"][field].as_f64().unwrap() as i64).or_default() += 1;
    }
    values
}

/// Waits until `sensor` holds every value of `expected`, and returns what it holds.
async fn wait_stored(
    bucketd: &Bucketd,
    client: &reqwest::Client,
    sensor: &str,
    field: &str,
    expected: impl Iterator<Item = i64> + Clone,
) -> BTreeMap<i64, usize> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let got = stored(bucketd, client, sensor, field).await;
        if expected.clone().all(|v| got.contains_key(&v)) {
            return got;
        }
        let missing: Vec<i64> =
            expected.clone().filter(|v| !got.contains_key(v)).take(20).collect();
        assert!(tokio::time::Instant::now() < deadline, "{sensor}: still missing {missing:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kills bucketd (-9) once it has accepted at least `at_least` MQTT readings, and returns
/// how many it had.
async fn kill_once_taken(bucketd: &mut Bucketd, client: &reqwest::Client, at_least: f64) -> f64 {
    let accepted = r#"bucketd_readings_accepted_total{protocol="mqtt"}"#;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let taken = loop {
        let taken = metric(bucketd, client, accepted).await;
        if taken >= at_least {
            break taken;
        }
        assert!(tokio::time::Instant::now() < deadline, "bucketd took too little of the burst");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    bucketd.child.kill().unwrap();
    bucketd.child.wait().unwrap();
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_published_while_bucketd_was_down_are_stored() {
    let broker = Mosquitto::start().await;
    let data = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut bucketd = spawn(data.path(), &broker, "plant/#", "it-away");
    wait_subscribed(&mut bucketd, &client, &broker).await;
    // The session exists at the broker: what is published now waits for it.
    assert!(bucketd.terminate().success());

    let mut messages: Vec<(String, String)> =
        (0..50).map(|i| ("plant/kitchen/temperature".to_owned(), format!("{i}"))).collect();
    messages.extend((0..50).map(|i| {
        ("plant/lines".to_owned(), format!("lp,src=away v={i} {}", (T0_MS + i) * 1_000_000))
    }));
    messages
        .push(("plant/json".into(), format!(r#"{{"sensor": "js", "ts": {T0_MS}, "value": 7}}"#)));
    // Bad ones among them: not line protocol, a number the template cannot name, and a message
    // far over --max-body-bytes (which must not close the connection: the broker would send it
    // again on the next, forever).
    messages.insert(10, ("plant/lines".into(), "this is not line protocol".into()));
    messages.insert(20, ("plant/too/many/levels".into(), "3".into()));
    messages.insert(30, ("plant/lines".into(), format!("big v=1 {}", "9".repeat(100_000))));
    broker.publish("publisher-away", &messages, Duration::ZERO).await;

    let mut bucketd = spawn(data.path(), &broker, "plant/#", "it-away");
    bucketd.wait_ready(&client).await;
    wait_stored(&bucketd, &client, "mqtt,room=kitchen", "temperature", 0..50).await;
    wait_stored(&bucketd, &client, "lp,src=away", "v", 0..50).await;
    wait_stored(&bucketd, &client, "js", "value", 7..8).await;
    // Counted from the store alone: a range read while a write lands may see it twice.
    bucketd.wait_settled(&client, PATIENCE.as_secs()).await;
    for (what, sensor, field, n) in [
        ("numbers", "mqtt,room=kitchen", "temperature", 50),
        ("lines", "lp,src=away", "v", 50),
        ("json", "js", "value", 1),
    ] {
        let got = stored(&bucketd, &client, sensor, field).await;
        assert_eq!(got.len(), n, "{what}: {got:?}");
        assert!(got.values().all(|&times| times == 1), "{what} stored twice: {got:?}");
    }
    let accepted =
        metric(&bucketd, &client, r#"bucketd_readings_accepted_total{protocol="mqtt"}"#).await;
    assert_eq!(accepted, 101.0);
    let refused = r#"bucketd_readings_rejected_total{protocol="mqtt",reason="syntax"}"#;
    assert_eq!(metric(&bucketd, &client, refused).await, 2.0);
    let too_large = r#"bucketd_readings_rejected_total{protocol="mqtt",reason="too_large"}"#;
    assert_eq!(metric(&bucketd, &client, too_large).await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_burst_loses_nothing_the_broker_delivered() {
    const N: i64 = 5_000;
    let broker = Mosquitto::start().await;
    let data = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut bucketd = spawn(data.path(), &broker, "burst/#", "it-burst");
    wait_subscribed(&mut bucketd, &client, &broker).await;

    let messages: Vec<(String, String)> = (0..N)
        .map(|i| {
            (format!("burst/{}", i % 7), format!("burst,src=k v={i} {}", (T0_MS + i) * 1_000_000))
        })
        .collect();
    // Paced, so that bucketd acknowledges as it goes and a kill lands between acknowledgements.
    let publish = broker.publish("publisher-burst", &messages, Duration::from_micros(500));
    // Once bucketd has taken part of the burst, and more is on its way.
    let kill = kill_once_taken(&mut bucketd, &client, (N / 3) as f64);
    let ((), taken) = tokio::join!(publish, kill);
    assert!(taken < N as f64, "the kill came after bucketd had taken the whole burst");

    let mut bucketd = spawn(data.path(), &broker, "burst/#", "it-burst");
    bucketd.wait_ready(&client).await;
    let got = wait_stored(&bucketd, &client, "burst,src=k", "v", 0..N).await;
    assert_eq!(got.len(), N as usize);
}

/// The broker sends again, flagged as a duplicate, every message whose acknowledgement it did
/// not get: after a kill -9, those bucketd had already logged. Each is stored once, the hour
/// statistics count it once, and the broker's log shows that it was sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_message_is_stored_once() {
    const N: i64 = 2_000;
    let broker = Mosquitto::start().await;
    let data = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let messages: Vec<(String, String)> = (0..N)
        .map(|i| ("again/x".to_owned(), format!("again,src=r v={i} {}", (T0_MS + i) * 1_000_000)))
        .collect();
    let redelivered =
        || broker.log().lines().any(|l| l.contains("Sending PUBLISH to it-again (d1"));
    let mut kills = 0;
    while !redelivered() {
        assert!(kills < 5, "no redelivery after {kills} kills:\n{}", broker.log());
        let mut bucketd = spawn(data.path(), &broker, "again/#", "it-again");
        wait_subscribed(&mut bucketd, &client, &broker).await;
        // Kill once bucketd has taken some of the burst, while the broker still sends.
        let publish = broker.publish("publisher-again", &messages, Duration::from_micros(500));
        let kill = kill_once_taken(&mut bucketd, &client, (N / 4) as f64);
        tokio::join!(publish, kill);
        kills += 1;
        // The session's messages, the unacknowledged ones flagged, go to the next start.
        let mut bucketd = spawn(data.path(), &broker, "again/#", "it-again");
        wait_subscribed(&mut bucketd, &client, &broker).await;
        wait_stored(&bucketd, &client, "again,src=r", "v", 0..N).await;
        assert!(bucketd.terminate().success());
    }
    let mut bucketd = spawn(data.path(), &broker, "again/#", "it-again");
    bucketd.wait_ready(&client).await;
    bucketd.wait_settled(&client, PATIENCE.as_secs()).await;
    let got = stored(&bucketd, &client, "again,src=r", "v").await;
    assert_eq!(got.len(), N as usize);
    let twice: Vec<_> = got.iter().filter(|&(_, &times)| times > 1).take(5).collect();
    assert!(twice.is_empty(), "stored more than once: {twice:?}");
    let (from, to) = ((T0_MS - 3_600_000).to_string(), (T0_MS + 3_600_000).to_string());
    let query = [("sensor", "again,src=r"), ("from", &from), ("to", &to), ("step", "1h")];
    let url =
        format!("{}/api/v1/rollups?{}", bucketd.base, serde_urlencoded::to_string(query).unwrap());
    let body: serde_json::Value = client.get(url).send().await.unwrap().json().await.unwrap();
    let counted: u64 = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["fields"]["v"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, N as u64, "the hour statistics count each message once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subscription_comes_back_after_the_broker_restarts() {
    let mut broker = Mosquitto::start().await;
    let data = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut bucketd = spawn(data.path(), &broker, "plant/#", "it-restart");
    wait_subscribed(&mut bucketd, &client, &broker).await;
    let one = vec![("plant/hall/temperature".to_owned(), "1".to_owned())];
    broker.publish("publisher-restart", &one, Duration::ZERO).await;
    wait_stored(&bucketd, &client, "mqtt,room=hall", "temperature", 1..2).await;

    // The broker forgets the session (no persistence): bucketd must subscribe again.
    broker.restart().await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while metric(&bucketd, &client, "bucketd_mqtt_connected").await != 0.0 {
        assert!(tokio::time::Instant::now() < deadline, "the lost connection went unnoticed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_subscribed(&mut bucketd, &client, &broker).await;
    let two = vec![("plant/hall/temperature".to_owned(), "2".to_owned())];
    broker.publish("publisher-restart", &two, Duration::ZERO).await;
    wait_stored(&bucketd, &client, "mqtt,room=hall", "temperature", 1..3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_a_password_log_in_and_a_wrong_password_does_not() {
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new(certs.path(), "mqtt-ca");
    let (cert, key) = ca.issue(&["127.0.0.1", "localhost"], "broker");
    let plain = crate::support::influxd::free_port().port();
    let broker = Mosquitto::start_with(|dir, _| {
        let passwords = dir.join("passwd");
        let made = std::process::Command::new("mosquitto_passwd")
            .args(["-b", "-c"])
            .arg(&passwords)
            .args(["sensor", "s3cr:t"])
            .status()
            .expect("mosquitto_passwd runs");
        assert!(made.success());
        format!(
            "certfile {}\nkeyfile {}\nallow_anonymous false\npassword_file {}\n\
             listener {plain} 127.0.0.1\nallow_anonymous true\n",
            cert.display(),
            key.display(),
            passwords.display()
        )
    })
    .await;
    let ca_file = ca.cert.to_str().unwrap();
    let client = reqwest::Client::new();

    let data = tempfile::tempdir().unwrap();
    let url = format!("mqtts://sensor:s3cr%3At@127.0.0.1:{}", broker.addr.port());
    let mut bucketd = spawn_at(data.path(), &url, "plant/#", "it-tls", &["--mqtt-ca", ca_file]);
    wait_subscribed(&mut bucketd, &client, &broker).await;
    let message = vec![("plant/vault/temperature".to_owned(), "4.5".to_owned())];
    broker.publish_to(plain, "publisher-tls", &message, Duration::ZERO).await;
    let got = wait_stored(&bucketd, &client, "mqtt,room=vault", "temperature", 4..5).await;
    assert_eq!(got.len(), 1);

    let other = tempfile::tempdir().unwrap();
    let wrong = format!("mqtts://sensor:nope@127.0.0.1:{}", broker.addr.port());
    let mut refused =
        spawn_at(other.path(), &wrong, "plant/#", "it-wrong", &["--mqtt-ca", ca_file]);
    refused.wait_ready(&client).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let refusals = r#"bucketd_mqtt_connections_total{result="refused"}"#;
    while metric(&refused, &client, refusals).await < 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "no refusal:\n{}", broker.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(metric(&refused, &client, "bucketd_mqtt_connected").await, 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_buffers_pause_the_subscription_and_drop_nothing() {
    // The metrics registry is the process's.
    if !in_own_process(module_path!(), "full_buffers_pause_the_subscription_and_drop_nothing") {
        return;
    }
    const N: i64 = 1_000;
    let broker = Mosquitto::start().await;
    let slow = FlakyStore::new(memory_store());
    slow.hold(true);
    let url = broker.url();
    let server = TestServer::start(
        slow.clone(),
        &[
            "--max-buffered-readings",
            "100",
            "--flush-interval",
            "20ms",
            "--mqtt-url",
            &url,
            "--mqtt-topic",
            "full/#",
            "--mqtt-client-id",
            "it-full",
        ],
    )
    .await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while server.metric("bucketd_mqtt_connected").await != 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "not subscribed:\n{}", broker.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let messages: Vec<(String, String)> = (0..N)
        .map(|i| ("full/a".to_owned(), format!("full,src=m v={i} {}", (T0_MS + i) * 1_000_000)))
        .collect();
    broker.publish("publisher-full", &messages, Duration::ZERO).await;

    // The buffers fill while the store holds every write: they never take more than their
    // bound of 100, and the rest waits at the broker.
    let accepted = r#"bucketd_readings_accepted_total{protocol="mqtt"}"#;
    while server.metric(accepted).await < 1.0 {
        assert!(tokio::time::Instant::now() < deadline, "nothing was taken");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(server.metric(accepted).await <= 100.0, "more accepted than the buffers hold");
    slow.hold(false);

    let expected: BTreeSet<Identity> =
        (0..N).map(|i| identity("full,src=m", T0_MS + i, &[("v", i as f64)])).collect();
    while server.metric(accepted).await < N as f64 {
        assert!(tokio::time::Instant::now() < deadline, "the subscription did not resume");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(!metrics.contains(r#"protocol="mqtt",reason"#), "refused readings: {metrics}");
    server.shutdown().await;
    assert_stored_exactly(&*slow.inner, &expected).await;
}
