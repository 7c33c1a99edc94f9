//! A point is stored once across kill -9: writers send each point twice in one request (its
//! fields on two lines, as Telegraf splits them) and again in their next request with a newer
//! value, while bucketd is killed at random and restarted. At the end each point is one
//! reading holding every field written, each field the value of the writer's newest request
//! that was acknowledged (or of a later one that landed without its answer), and the hour
//! statistics count each point once.

#![cfg(unix)]

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;

use super::crash_loop::Lcg;
use crate::support::binary::{Bucketd, all_readings};
use crate::support::mongo_standin::MongoBackend;

const SENSORS: i64 = 10;
const WRITERS: i64 = 3;
const NEW_PER_REQUEST: i64 = 25;
/// 5 s before an hour's end, so that the points straddle two hours.
const T0_MS: i64 = 1_700_002_795_000;
/// Milliseconds between points.
const STEP_MS: i64 = 20;

fn ts_of(n: i64) -> i64 {
    T0_MS + STEP_MS * n
}

/// Point `n`: sensor `n % SENSORS` at `ts_of(n)`.
fn line(n: i64, fields: &str) -> String {
    format!("pts,sensor=s{} {fields} {}\n", n % SENSORS, ts_of(n))
}

/// What was sent and acknowledged of each point: per writer, its newest request number.
#[derive(Default)]
struct Ledger {
    sent: HashMap<i64, HashMap<i64, i64>>,
    acked: HashMap<i64, HashMap<i64, i64>>,
}

impl Ledger {
    fn note(book: &mut HashMap<i64, HashMap<i64, i64>>, points: &[i64], writer: i64, k: i64) {
        for &n in points {
            let newest = book.entry(n).or_default().entry(writer).or_insert(k);
            *newest = (*newest).max(k);
        }
    }
}

/// One writer: request `k` sends `NEW_PER_REQUEST` new points, each as two lines, and sends
/// again the new points of its previous request, with `k` as their newer value.
async fn writer(
    client: reqwest::Client,
    url: String,
    w: i64,
    next: Arc<AtomicI64>,
    ledger: Arc<Mutex<Ledger>>,
    mut k: i64,
    pause: Duration,
) -> i64 {
    let field = format!("k{w}");
    let mut previous: Vec<i64> = Vec::new();
    loop {
        k += 1;
        let first = next.fetch_add(NEW_PER_REQUEST, Ordering::SeqCst);
        let fresh: Vec<i64> = (first..first + NEW_PER_REQUEST).collect();
        let mut body = String::new();
        for &n in &fresh {
            body.push_str(&line(n, &format!("v={n}i")));
            body.push_str(&line(n, &format!("{field}={k}i")));
        }
        for &n in &previous {
            body.push_str(&line(n, &format!("v={n}i,{field}={k}i")));
        }
        let points: Vec<i64> = fresh.iter().chain(&previous).copied().collect();
        Ledger::note(&mut ledger.lock().unwrap().sent, &points, w, k);
        match client.post(&url).body(body).send().await {
            Ok(r) if r.status() == StatusCode::NO_CONTENT => {
                Ledger::note(&mut ledger.lock().unwrap().acked, &points, w, k);
                previous = fresh;
                tokio::time::sleep(pause).await;
            }
            Ok(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(r) => panic!("unexpected status {}", r.status()),
            // The kill: this request may or may not have been logged.
            Err(_) => return k,
        }
    }
}

async fn points_crash_loop(data_dir: &Path, args: &[&str], rounds: usize, pause: Duration) {
    let mut rng = Lcg::seeded("points crash loop");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let next = Arc::new(AtomicI64::new(0));
    // Request numbers keep rising across rounds.
    let mut ks = vec![0i64; WRITERS as usize];
    for round in 0..rounds {
        let mut server = Bucketd::spawn_args(data_dir, "100ms", args);
        server.wait_ready(&client).await;
        let url = format!("{}/write?precision=ms", server.base);
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let task = writer(
                    client.clone(),
                    url.clone(),
                    w,
                    next.clone(),
                    ledger.clone(),
                    ks[w as usize],
                    pause,
                );
                tokio::spawn(task)
            })
            .collect();
        let delay = rng.next_in(100, 1500);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        server.child.kill().unwrap(); // SIGKILL
        server.child.wait().unwrap();
        for (w, task) in writers.into_iter().enumerate() {
            ks[w] = tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("writer stops")
                .unwrap();
        }
        eprintln!("round {round}: killed after {delay} ms");
    }
    // A clean stop writes what the last replay put back; the next start reads the store.
    let mut last = Bucketd::spawn_args(data_dir, "100ms", args);
    last.wait_ready(&client).await;
    assert!(last.terminate().success(), "clean stop");
    let mut reader = Bucketd::spawn_args(data_dir, "1h", args);
    reader.wait_ready(&client).await;
    let stored = read_points(&client, &reader.base).await;
    let hours = hour_counts(&client, &reader.base).await;
    reader.terminate();

    let ledger = ledger.lock().unwrap();
    check(&ledger, &stored);
    // The statistics count each point once, whatever was written twice or replayed.
    let mut by_hour: BTreeMap<i64, u64> = BTreeMap::new();
    for &ts in stored.keys() {
        *by_hour.entry(ts.div_euclid(3_600_000) * 3_600_000).or_default() += 1;
    }
    assert_eq!(hours, by_hour, "hour statistics' counts of v");
    assert!(by_hour.len() == 2, "the points straddle two hours: {by_hour:?}");
}

/// Each point sent is stored at most once and each acknowledged one exactly once, with
/// `v = n` and each writer's field between its newest acknowledged and newest sent value.
fn check(ledger: &Ledger, stored: &BTreeMap<i64, (usize, serde_json::Value)>) {
    assert!(!ledger.acked.is_empty(), "nothing was acknowledged");
    for (&n, acked) in &ledger.acked {
        let Some((count, fields)) = stored.get(&ts_of(n)) else {
            panic!("acknowledged point {n} lost");
        };
        assert_eq!(*count, 1, "point {n} stored {count} times");
        assert_eq!(fields["v"].as_i64(), Some(n), "point {n}: {fields}");
        for (&w, &k) in acked {
            let got = fields[format!("k{w}")].as_i64().unwrap_or(-1);
            let sent = ledger.sent[&n][&w];
            assert!(
                (k..=sent).contains(&got),
                "point {n}: writer {w}'s value {got}, acknowledged {k}, sent up to {sent}"
            );
        }
    }
    for (&ts, (count, fields)) in stored {
        let n = (ts - T0_MS) / STEP_MS;
        assert_eq!(*count, 1, "point {n} stored {count} times");
        let sent = ledger.sent.get(&n).unwrap_or_else(|| panic!("point {n} never sent"));
        for name in fields.as_object().unwrap().keys() {
            let known = name == "v"
                || name
                    .strip_prefix('k')
                    .and_then(|w| w.parse::<i64>().ok())
                    .is_some_and(|w| sent.contains_key(&w));
            assert!(known, "point {n} has field {name} never sent");
        }
    }
    eprintln!("{} points acknowledged, {} stored", ledger.acked.len(), stored.len());
}

/// Every stored point by time, with how many readings it has and the last one's fields.
async fn read_points(
    client: &reqwest::Client,
    base: &str,
) -> BTreeMap<i64, (usize, serde_json::Value)> {
    let mut out: BTreeMap<i64, (usize, serde_json::Value)> = BTreeMap::new();
    for s in 0..SENSORS {
        let sensor = format!("pts,sensor=s{s}");
        for v in all_readings(client, base, &sensor, (T0_MS, T0_MS + 3_600_000)).await {
            let entry = out.entry(timestamp(&v["t"])).or_insert((0, serde_json::Value::Null));
            entry.0 += 1;
            entry.1 = v["fields"].clone();
        }
    }
    out
}

fn timestamp(t: &serde_json::Value) -> i64 {
    match t {
        serde_json::Value::Number(n) => n.as_i64().expect("milliseconds"),
        serde_json::Value::String(s) => {
            chrono::DateTime::parse_from_rfc3339(s).expect("RFC 3339").timestamp_millis()
        }
        other => panic!("timestamp {other}"),
    }
}

/// Per hour, the count of field `v` in the hour statistics, over every sensor.
async fn hour_counts(client: &reqwest::Client, base: &str) -> BTreeMap<i64, u64> {
    let mut out = BTreeMap::new();
    for s in 0..SENSORS {
        let sensor = format!("pts,sensor=s{s}");
        let from = (T0_MS - T0_MS.rem_euclid(3_600_000)).to_string();
        let to = (T0_MS - T0_MS.rem_euclid(3_600_000) + 2 * 3_600_000).to_string();
        let query = [("sensor", sensor.as_str()), ("from", &from), ("to", &to), ("step", "1h")];
        let url =
            reqwest::Url::parse_with_params(&format!("{base}/api/v1/rollups"), &query).unwrap();
        let response = client.get(url).send().await.unwrap();
        if response.status() == StatusCode::NOT_FOUND {
            continue;
        }
        assert_eq!(response.status(), StatusCode::OK);
        let body: serde_json::Value = response.json().await.unwrap();
        for row in body["rows"].as_array().unwrap() {
            let t = timestamp(&row["t"]);
            *out.entry(t).or_default() += row["fields"]["v"]["count"].as_u64().unwrap();
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn points_written_again_are_stored_once_across_kill_9_embedded() {
    let dir = tempfile::tempdir().unwrap();
    tokio::time::timeout(
        Duration::from_secs(240),
        points_crash_loop(dir.path(), &[], 5, Duration::ZERO),
    )
    .await
    .expect("crash loop finished within 240 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn points_written_again_are_stored_once_across_kill_9_mongodb() {
    let mongo = MongoBackend::start();
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--mongodb-uri",
        mongo.uri.as_str(),
        "--mongodb-database",
        mongo.database.as_str(),
        "--retention",
        "100000d",
    ];
    tokio::time::timeout(
        Duration::from_secs(300),
        points_crash_loop(dir.path(), &args, 3, Duration::from_millis(50)),
    )
    .await
    .expect("crash loop finished within 300 s");
}
