//! A kill -9 during the embedded store's retention pass loses nothing that should stay: a
//! child process (this test binary, re-executed in "expirer mode") runs the pass in steps of
//! one bucket, announcing each committed step; the parent SIGKILLs it after a random number of
//! steps (so mid-transaction often enough), reopens the store and checks that the live hours'
//! readings are all there, that every hour's statistics are exact (none lost, none counted
//! twice), that an expired hour is either whole or refused, never partial, and that a pass run
//! afterwards finishes the job.

use std::hash::{BuildHasher, RandomState};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bucketd::model::{Batch, FieldValue, HOUR_MS, Reading, SeriesMeta, WriterId};
use bucketd::store::embedded::EmbeddedStore;
use bucketd::store::{
    BucketLimits, FieldStats, Order, RangeQuery, Retention, RollupQuery, Store, StoreError,
};
use futures::StreamExt;

use crate::support::this_test_again;

const TEST_FN: &str = "a_retention_pass_killed_at_random_loses_nothing_that_should_stay";
const DIR_ENV: &str = "BUCKETD_RETENTION_CRASH_DIR";
const ROUNDS: usize = 3;
const SENSORS: usize = 40;
const HOURS: i64 = 6;
const PER_HOUR: i64 = 30;
/// Three buckets per hour: a pass of one-bucket steps can stop inside an hour.
const LIMITS: BucketLimits = BucketLimits { max_readings: 10, max_bytes: 64 * 1024 };
/// 2024-01-01T00:00:00Z.
const T0: i64 = 1_704_067_200_000;
/// The pass runs at the end of the written hours with a 2 h retention: hours 0-3 expire.
const NOW: i64 = T0 + HOURS * HOUR_MS;
const LIVE_FROM: i64 = T0 + 4 * HOUR_MS;
const POLICY: Retention = Retention { raw: Some(Duration::from_secs(2 * 3600)), rollups: None };

fn random_below(n: u64) -> u64 {
    RandomState::new().hash_one(Instant::now()) % n
}

fn key(i: usize) -> String {
    format!("rc,sensor=s{i:03}")
}

fn readings_of(i: usize) -> Vec<Reading> {
    (0..HOURS * PER_HOUR)
        .map(|k| {
            // Out of order within each hour, so first/last are not simply the first written.
            let (h, j) = (k / PER_HOUR, (k * 7) % PER_HOUR);
            Reading {
                ts: T0 + h * HOUR_MS + j * 60_000 + i as i64,
                fields: smallvec::smallvec![
                    ("v".into(), FieldValue::Float(k as f64 * 0.25 - i as f64)),
                    ("n".into(), FieldValue::Int(k * 3 - 50)),
                ],
            }
        })
        .collect()
}

fn all_batches() -> Vec<Batch> {
    let mut out = Vec::new();
    for i in 0..SENSORS {
        let series = Arc::new(SeriesMeta::new(&key(i), "rc", &[("sensor", format!("s{i:03}"))]));
        let readings = readings_of(i);
        for h in 0..HOURS {
            let hour = T0 + h * HOUR_MS;
            let of_hour: Vec<Reading> = readings
                .iter()
                .filter(|r| r.ts >= hour && r.ts < hour + HOUR_MS)
                .cloned()
                .collect();
            out.push(Batch::new(series.clone(), hour, of_hour));
        }
    }
    out
}

fn open(dir: &Path) -> EmbeddedStore {
    EmbeddedStore::open(dir, LIMITS).expect("the store opens")
}

/// Expirer mode: run the pass in one-bucket steps, announcing each, then idle until killed.
fn run_expirer(dir: &Path) -> ! {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = open(dir);
        let mut stdout = std::io::stdout();
        loop {
            let step = store.expire(NOW, POLICY, 1).await.expect("retention step");
            writeln!(stdout, "STEP {}", u8::from(step.done)).unwrap();
            stdout.flush().unwrap();
        }
    })
}

/// Starts an expirer and kills it after `steps` announced steps (or once its pass is done).
fn kill_an_expirer(dir: &Path, steps: u64) {
    let mut child = this_test_again(module_path!(), TEST_FN)
        .env(DIR_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn expirer");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = 0;
    // Bounded by the pass: every step moves a bucket until it reports done.
    while seen < steps {
        let line = lines.next().expect("the expirer runs until killed").unwrap();
        seen += 1;
        if line == "STEP 1" {
            break;
        }
    }
    child.kill().expect("SIGKILL expirer");
    child.wait().unwrap();
}

async fn read_range(
    store: &EmbeddedStore,
    key: &str,
    from: i64,
    to: i64,
) -> Result<Vec<Reading>, StoreError> {
    let q = RangeQuery { sensor: key.into(), from, to, order: Order::Asc, limit: None };
    store.readings(q).collect::<Vec<_>>().await.into_iter().collect()
}

/// Statistics per hour and field of `readings`, as the store must report them.
fn expected_hours(readings: &[Reading]) -> Vec<(i64, String, FieldStats)> {
    let mut out: std::collections::BTreeMap<(i64, String), FieldStats> = Default::default();
    for r in readings {
        for (name, value) in &r.fields {
            let one = FieldStats::of(r.ts, value.as_f64().unwrap());
            out.entry((bucketd::model::hour_start(r.ts), name.to_string()))
                .and_modify(|s| s.merge(&one))
                .or_insert(one);
        }
    }
    out.into_iter().map(|((h, n), s)| (h, n, s)).collect()
}

/// What must hold at any point of a pass, and (`finished`) after it.
async fn check(store: &EmbeddedStore, finished: bool) {
    for i in 0..SENSORS {
        let (key, written) = (key(i), readings_of(i));
        let mut want = written.clone();
        want.sort_by_key(|r| r.ts);
        let live: Vec<Reading> = want.iter().filter(|r| r.ts >= LIVE_FROM).cloned().collect();
        assert_eq!(
            read_range(store, &key, LIVE_FROM, NOW).await.unwrap(),
            live,
            "{key}: live hours"
        );
        for h in 0..4 {
            let hour = T0 + h * HOUR_MS;
            match read_range(store, &key, hour, hour + HOUR_MS).await {
                Ok(got) => {
                    assert!(!finished, "{key} hour {h}: still readable after the pass");
                    let whole: Vec<Reading> = want
                        .iter()
                        .filter(|r| r.ts >= hour && r.ts < hour + HOUR_MS)
                        .cloned()
                        .collect();
                    assert_eq!(got, whole, "{key} hour {h}: partly deleted yet readable");
                }
                Err(StoreError::Expired { .. }) => {}
                Err(e) => panic!("{key} hour {h}: {e}"),
            }
        }
        let q =
            RollupQuery { sensor: key.clone(), from: T0, to: NOW, step_ms: HOUR_MS, fields: None };
        let got: Vec<(i64, String, FieldStats)> = store
            .rollups(q)
            .await
            .unwrap()
            .into_iter()
            .flat_map(|row| row.fields.into_iter().map(move |(n, s)| (row.start, n, s)))
            .collect();
        assert_eq!(got, expected_hours(&written), "{key}: hour statistics");
    }
}

#[test]
fn a_retention_pass_killed_at_random_loses_nothing_that_should_stay() {
    if let Ok(dir) = std::env::var(DIR_ENV) {
        run_expirer(Path::new(&dir));
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        rt.block_on(async {
            let store = open(dir.path());
            for outcome in store.write(WriterId(1), &all_batches()).await {
                outcome.expect("write");
            }
        });
        // 480 buckets expire; the kill lands anywhere in the first 400 steps.
        let steps = 1 + random_below(400);
        kill_an_expirer(dir.path(), steps);
        let store = open(dir.path());
        rt.block_on(check(&store, false));
        let mut rest = 0;
        rt.block_on(async {
            // Bounded: a step moves at least one of the 480 buckets until done.
            for _ in 0..2_000 {
                rest += 1;
                if store.expire(NOW, POLICY, 16).await.unwrap().done {
                    return;
                }
            }
            panic!("the pass did not finish");
        });
        rt.block_on(check(&store, true));
        eprintln!("round {round}: killed after {steps} steps, finished in {rest} more");
    }
}
