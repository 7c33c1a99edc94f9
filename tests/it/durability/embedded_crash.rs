//! The embedded store survives `kill -9` at any moment: a child process (this test binary,
//! re-executed in "writer mode") loops writing and prints every acknowledged write; the parent
//! SIGKILLs it at a random moment, reopens the store and checks that every acknowledged write
//! is there, that every write is all-or-nothing, and that nothing is duplicated.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bucketd::model::{Batch, FieldValue, Reading, SeriesMeta, hour_start};
use bucketd::store::embedded::EmbeddedStore;
use bucketd::store::{BucketLimits, Order, RangeQuery, Store};
use futures::StreamExt;

use crate::support::this_test_again;

/// The writer these writes are made as.
const W: bucketd::model::WriterId = bucketd::model::WriterId(1);

/// The test's function: the writer is this test binary, running just this test.
const TEST_FN: &str = "writer_killed_at_random_loses_nothing_acknowledged";
const DIR_ENV: &str = "BUCKETD_CRASH_WRITER_DIR";
const ROUND_ENV: &str = "BUCKETD_CRASH_WRITER_ROUND";
const ROUNDS: u64 = 5;
const SERIES: [&str; 2] = ["crash-a", "crash-b"];
/// Readings per series per write call.
const PER_WRITE: i64 = 25;
/// Spacing of readings: 10 s, so a write spans 250 s and hours (and their buckets) turn over
/// every ~15 writes.
const STEP_MS: i64 = 10_000;
/// Small caps so that spills happen all the time.
const LIMITS: BucketLimits = BucketLimits { max_readings: 40, max_bytes: 64 * 1024 };
/// Each round writes its own time range, far enough from the others never to touch it.
const ROUND_SPAN_MS: i64 = 1_000 * 3_600_000;

fn random_below(n: u64) -> u64 {
    RandomState::new().hash_one(Instant::now()) % n
}

fn write_readings(round: u64, w: i64) -> Vec<Reading> {
    let base = round as i64 * ROUND_SPAN_MS + w * PER_WRITE * STEP_MS;
    (0..PER_WRITE)
        .map(|j| Reading {
            ts: base + j * STEP_MS,
            fields: smallvec::smallvec![
                ("round".into(), FieldValue::UInt(round)),
                ("w".into(), FieldValue::Int(w)),
                ("j".into(), FieldValue::Int(j)),
                ("v".into(), FieldValue::Float(w as f64 * 0.5 + j as f64)),
            ],
        })
        .collect()
}

fn batches_for(round: u64, w: i64) -> Vec<Batch> {
    let mut out = Vec::new();
    for key in SERIES {
        let series = Arc::new(SeriesMeta::new(key, "crash", &[("kind", "crash")]));
        let mut by_hour: BTreeMap<i64, Vec<Reading>> = BTreeMap::new();
        for r in write_readings(round, w) {
            by_hour.entry(hour_start(r.ts)).or_default().push(r);
        }
        for (hour, readings) in by_hour {
            out.push(Batch::new(series.clone(), hour, readings));
        }
    }
    out
}

/// Writer mode: write forever, announcing each acknowledged write on stdout.
fn run_writer(dir: &Path, round: u64) -> ! {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = EmbeddedStore::open(dir, LIMITS).expect("writer opens the store");
        let mut stdout = std::io::stdout();
        for w in 0.. {
            for outcome in store.write(W, &batches_for(round, w)).await {
                outcome.expect("write succeeds");
            }
            writeln!(stdout, "COMMITTED {w}").unwrap();
            stdout.flush().unwrap();
        }
    });
    unreachable!("the writer loops until killed")
}

/// Runs one writer, kills it at a random moment after its first acknowledged write, and returns
/// the highest acknowledged write number.
fn kill_a_writer(dir: &Path, round: u64) -> i64 {
    let mut child = this_test_again(module_path!(), TEST_FN)
        .env(DIR_ENV, dir)
        .env(ROUND_ENV, round.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn writer");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut last = -1;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(w) = line.strip_prefix("COMMITTED ") {
                last = w.parse().expect("write number");
                let _ = tx.send(last);
            }
        }
        last
    });
    // Kill only once the writer is demonstrably writing, then at a random point of the next
    // ~1.5 s, which lands in the middle of a commit often enough.
    // A guard against a writer that hangs, not a bound on its speed.
    rx.recv_timeout(Duration::from_secs(120)).expect("writer acknowledged a first write");
    std::thread::sleep(Duration::from_millis(random_below(1500)));
    assert!(child.try_wait().unwrap().is_none(), "writer exited by itself");
    child.kill().expect("SIGKILL writer");
    child.wait().unwrap();
    reader.join().unwrap()
}

#[test]
fn writer_killed_at_random_loses_nothing_acknowledged() {
    if let Ok(dir) = std::env::var(DIR_ENV) {
        let round = std::env::var(ROUND_ENV).unwrap().parse().unwrap();
        run_writer(Path::new(&dir), round);
    }
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut acknowledged = Vec::new();
    for round in 0..ROUNDS {
        acknowledged.push(kill_a_writer(dir.path(), round));
        let store = EmbeddedStore::open(dir.path(), LIMITS).expect("store reopens after SIGKILL");
        for (r, &acked) in acknowledged.iter().enumerate() {
            rt.block_on(check_round(&store, r as u64, acked));
        }
        eprintln!(
            "round {round}: {} writes acknowledged before the kill",
            acknowledged[round as usize] + 1
        );
    }
}

/// Every write of `round` up to `acked` is present in full; at most one more write (committed
/// but killed before it could say so) is present, also in full; nothing appears twice.
async fn check_round(store: &EmbeddedStore, round: u64, acked: i64) {
    let mut per_series = Vec::new();
    for key in SERIES {
        let q = RangeQuery {
            sensor: key.into(),
            from: round as i64 * ROUND_SPAN_MS,
            to: (round as i64 + 1) * ROUND_SPAN_MS,
            order: Order::Asc,
            limit: None,
        };
        let got: Vec<Reading> = store.readings(q).map(|r| r.expect("reading")).collect().await;
        assert_eq!(got.len() as i64 % PER_WRITE, 0, "{key} round {round}: a partial write");
        let writes = got.len() as i64 / PER_WRITE;
        assert!(
            writes == acked + 1 || writes == acked + 2,
            "{key} round {round}: {writes} writes stored, {} acknowledged",
            acked + 1
        );
        let expected: Vec<Reading> = (0..writes).flat_map(|w| write_readings(round, w)).collect();
        assert!(got == expected, "{key} round {round}: stored readings differ from those written");
        per_series.push(writes);
    }
    // Both series are written by every write call, in one transaction.
    assert_eq!(
        per_series[0], per_series[1],
        "round {round}: a write committed for one series only"
    );
}
