//! The write-ahead log's promise, tested on the real binary: write with acknowledgements,
//! kill -9 bucketd at a random moment (during writes, flushes, or the previous restart's
//! replay), restart, repeat; at the end every acknowledged reading is in the store exactly
//! once, and nothing is stored twice or invented. Once on the embedded store and once on
//! MongoDB (the stand-in, or the server named by BUCKETD_TEST_MONGODB_URI).

#![cfg(unix)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;

use crate::support::binary::{Bucketd, all_readings};
use crate::support::mongo_standin::MongoBackend;

const SENSORS: i64 = 20;
const WRITERS: usize = 4;
const LINES_PER_REQUEST: i64 = 50;
const T0_MS: i64 = 1_700_000_000_000;

/// Reading `n` is sensor `n % SENSORS` at `T0_MS + n` with value `n`: unique, and
/// recognisable when read back.
fn body(first: i64) -> String {
    (first..first + LINES_PER_REQUEST)
        .map(|n| format!("crash,sensor=s{} v={n}i {}\n", n % SENSORS, T0_MS + n))
        .collect()
}

/// A small deterministic generator: the seed is printed, so a failing run can be repeated.
pub(super) struct Lcg(u64);

impl Lcg {
    /// Seeded from `CRASH_SEED`, or from the clock and pid; the seed is printed.
    pub(super) fn seeded(what: &str) -> Lcg {
        let seed =
            std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
                let now =
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
                now.as_nanos() as u64 ^ u64::from(std::process::id())
            });
        eprintln!("{what} seed {seed} (set CRASH_SEED to repeat)");
        Lcg(seed)
    }

    pub(super) fn next_in(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        lo + (self.0 >> 33) % (hi - lo)
    }
}

#[derive(Default)]
struct Ledger {
    acked: BTreeSet<i64>,
    sent: BTreeSet<i64>,
}

/// `pause` between a writer's requests keeps the volume within what the MongoDB stand-in (far
/// slower than MongoDB) reads back in time.
async fn crash_loop(data_dir: &Path, args: &[&str], rounds: usize, pause: Duration) {
    let mut rng = Lcg::seeded("crash loop");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let next = Arc::new(AtomicI64::new(0));

    for round in 0..rounds {
        let mut server = Bucketd::spawn_args(data_dir, "100ms", args);
        server.wait_ready(&client).await;
        let url = format!("{}/write?precision=ms", server.base);
        let mut writers = Vec::new();
        for _ in 0..WRITERS {
            let (client, url, ledger, next) =
                (client.clone(), url.clone(), ledger.clone(), next.clone());
            writers.push(tokio::spawn(async move {
                loop {
                    let first = next.fetch_add(LINES_PER_REQUEST, Ordering::SeqCst);
                    ledger.lock().unwrap().sent.extend(first..first + LINES_PER_REQUEST);
                    match client.post(&url).body(body(first)).send().await {
                        Ok(r) if r.status() == StatusCode::NO_CONTENT => {
                            ledger.lock().unwrap().acked.extend(first..first + LINES_PER_REQUEST);
                            tokio::time::sleep(pause).await;
                        }
                        // Full buffers while the store keeps writing: refused whole, nothing
                        // logged. Back off as Telegraf does, and send the next lines.
                        Ok(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Ok(r) => panic!("unexpected status {}", r.status()),
                        // The kill: this request may or may not have been logged.
                        Err(_) => return,
                    }
                }
            }));
        }
        let delay = rng.next_in(50, 1500);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        server.child.kill().unwrap(); // SIGKILL
        server.child.wait().unwrap();
        for w in writers {
            tokio::time::timeout(Duration::from_secs(20), w).await.expect("writer stops").unwrap();
        }
        let acked = ledger.lock().unwrap().acked.len();
        eprintln!("round {round}: killed after {delay} ms; {acked} readings acknowledged so far");
    }

    // A clean stop writes what the last replay put back; the next start reads the store.
    let mut last = Bucketd::spawn_args(data_dir, "100ms", args);
    last.wait_ready(&client).await;
    assert!(last.terminate().success(), "clean stop");
    let mut reader = Bucketd::spawn_args(data_dir, "1h", args);
    reader.wait_ready(&client).await;
    let stored = read_all(&client, &reader.base).await;
    reader.terminate();

    check_exactly_once(&ledger.lock().unwrap(), &stored);
}

/// Every acknowledged reading stored exactly once; nothing stored twice or never sent.
fn check_exactly_once(ledger: &Ledger, stored: &BTreeMap<i64, usize>) {
    assert!(ledger.acked.len() as i64 >= LINES_PER_REQUEST, "nothing was acknowledged");
    let mut missing = Vec::new();
    for n in &ledger.acked {
        match stored.get(n) {
            Some(1) => {}
            Some(k) => panic!("reading {n} stored {k} times"),
            None => missing.push(*n),
        }
    }
    assert!(
        missing.is_empty(),
        "{} acknowledged readings lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    for (n, count) in stored {
        assert_eq!(*count, 1, "reading {n} stored {count} times");
        assert!(ledger.sent.contains(n), "reading {n} was never sent");
    }
    eprintln!(
        "{} acknowledged, {} stored (unacknowledged ones may land or not)",
        ledger.acked.len(),
        stored.len()
    );
}

/// Two instances on one MongoDB, as "Scaling out" in docs/operations.md allows: both write the same
/// sensor-hours (so the same buckets), the first holding its readings longer than the second
/// flushes, and each round one of them, chosen at random, is killed -9 at a random moment and
/// restarted on its own directories. Each must judge its log only against its own high-water
/// marks: with one mark per (series, hour) for every writer, the second's newer marks covered
/// the first's unwritten readings and its replay dropped them as stored.
async fn two_writer_crash_loop(mongo: &[&str], rounds: usize, pause: Duration) {
    let mut rng = Lcg::seeded("two-writer crash loop");
    let client = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let next = Arc::new(AtomicI64::new(0));
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    // The first holds readings for 2 s; the second lands its newer ones within 100 ms.
    let intervals = ["2s", "100ms"];
    let mut servers: [Option<Bucketd>; 2] = [None, None];
    let mut kills = [0usize; 2];

    for round in 0..rounds {
        for (i, slot) in servers.iter_mut().enumerate() {
            if slot.is_none() {
                let mut server = Bucketd::spawn_args(dirs[i].path(), intervals[i], mongo);
                server.wait_ready(&client).await;
                *slot = Some(server);
            }
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writers = Vec::new();
        for server in servers.iter().flatten() {
            for _ in 0..2 {
                let url = format!("{}/write?precision=ms", server.base);
                let (client, ledger, next, stop) =
                    (client.clone(), ledger.clone(), next.clone(), stop.clone());
                writers.push(tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let first = next.fetch_add(LINES_PER_REQUEST, Ordering::SeqCst);
                        ledger.lock().unwrap().sent.extend(first..first + LINES_PER_REQUEST);
                        match client.post(&url).body(body(first)).send().await {
                            Ok(r) if r.status() == StatusCode::NO_CONTENT => {
                                let mut ledger = ledger.lock().unwrap();
                                ledger.acked.extend(first..first + LINES_PER_REQUEST);
                            }
                            // Full buffers while the store keeps writing: refused whole, nothing
                            // logged. Back off as Telegraf does, and send the next lines.
                            Ok(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => {
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Ok(r) => panic!("unexpected status {}", r.status()),
                            // The kill: this request may or may not have been logged.
                            Err(_) => return,
                        }
                        tokio::time::sleep(pause).await;
                    }
                }));
            }
        }
        let victim = rng.next_in(0, 2) as usize;
        let delay = rng.next_in(50, 1500);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        let mut killed = servers[victim].take().expect("both run at the start of a round");
        killed.child.kill().unwrap(); // SIGKILL
        killed.child.wait().unwrap();
        kills[victim] += 1;
        stop.store(true, Ordering::SeqCst);
        for w in writers {
            tokio::time::timeout(Duration::from_secs(60), w).await.expect("writer stops").unwrap();
        }
        let acked = ledger.lock().unwrap().acked.len();
        eprintln!(
            "round {round}: instance {victim} killed after {delay} ms; {acked} readings acknowledged so far"
        );
    }
    eprintln!("kills per instance: {kills:?}");

    // A clean stop of both writes everything; a reader on a fresh directory reads the store.
    for (i, slot) in servers.iter_mut().enumerate() {
        let server = match slot.take() {
            Some(server) => server,
            None => {
                let mut s = Bucketd::spawn_args(dirs[i].path(), intervals[i], mongo);
                s.wait_ready(&client).await;
                s
            }
        };
        server.wait_settled(&client, 180).await;
        assert!(server.terminate().success(), "clean stop of instance {i}");
    }
    let reader_dir = tempfile::tempdir().unwrap();
    let mut reader = Bucketd::spawn_args(reader_dir.path(), "1h", mongo);
    reader.wait_ready(&client).await;
    let stored = read_all(&client, &reader.base).await;
    reader.terminate();
    check_exactly_once(&ledger.lock().unwrap(), &stored);
}

/// Every stored reading, by number, with how often it is stored.
async fn read_all(client: &reqwest::Client, base: &str) -> BTreeMap<i64, usize> {
    let mut out = BTreeMap::new();
    for s in 0..SENSORS {
        let sensor = format!("crash,sensor=s{s}");
        for v in all_readings(client, base, &sensor, (T0_MS, T0_MS + 100_000_000)).await {
            let n = v["fields"]["v"].as_i64().expect("integer field v");
            *out.entry(n).or_insert(0) += 1;
        }
    }
    out
}

/// Segments of 64 KiB: each round fills a few dozen, and the settled ones are written over by
/// later ones, so kills land in reused files too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_readings_survive_kill_9_exactly_once_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--wal-segment-bytes", "64KiB"];
    tokio::time::timeout(
        Duration::from_secs(240),
        crash_loop(dir.path(), &args, 6, Duration::ZERO),
    )
    .await
    .expect("crash loop finished within 240 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_readings_survive_kill_9_exactly_once_mongodb() {
    let mongo = MongoBackend::start();
    let dir = tempfile::tempdir().unwrap();
    let args = ["--mongodb-uri", mongo.uri.as_str(), "--mongodb-database", mongo.database.as_str()];
    tokio::time::timeout(
        Duration::from_secs(240),
        crash_loop(dir.path(), &args, 3, Duration::from_millis(50)),
    )
    .await
    .expect("crash loop finished within 240 s");
}

/// The same with buffers far smaller than the load: they are full most of the time, so
/// writes are refused (503) around acknowledged ones, and every restart replays a log whose
/// readings fill the buffers many times over while new writes are logged behind the replay:
/// the refill, its memory bound and its hand-over back to the buffers are under test too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_readings_survive_kill_9_exactly_once_while_spilling() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--max-buffered-readings", "300"];
    tokio::time::timeout(
        Duration::from_secs(240),
        crash_loop(dir.path(), &args, 5, Duration::ZERO),
    )
    .await
    .expect("crash loop finished within 240 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_killed_at_random_lose_and_duplicate_nothing_mongodb() {
    let mongo = MongoBackend::start();
    let args = ["--mongodb-uri", mongo.uri.as_str(), "--mongodb-database", mongo.database.as_str()];
    tokio::time::timeout(
        Duration::from_secs(420),
        two_writer_crash_loop(&args, 4, Duration::from_millis(50)),
    )
    .await
    .expect("two-writer crash loop finished within 420 s");
}
