//! The embedded file's size under a steady load, with and without `--retention`: does the
//! space of deleted hours get reused, so that the file stops growing once the retention is
//! reached?
//!
//! The store is driven directly with a simulated clock: every simulated minute, one flush
//! (one batch per sensor, as the flusher writes) and one retention pass at that minute
//! (`Store::expire`, as the server's task runs it, in steps of `retention::STEP_BUDGET`). The
//! server judges retention against the wall clock; here the clock is the data's, so that
//! hours age out in seconds instead of hours. Prints the file size every simulated half hour.
//!
//! Run (a debug build, a few minutes): `cargo test --bench retention_space -- --bench`, or
//! `cargo bench --bench retention_space` (release). Without `--bench` it does nothing, since
//! `cargo test --all-targets` runs bench targets too.
//! Options through the environment: `SENSORS` (default 500), `HOURS` (default 10),
//! `RETENTION_HOURS` (default 2).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bucketd::model::{Batch, FieldValue, HOUR_MS, Reading, SeriesMeta, WriterId};
use bucketd::store::embedded::EmbeddedStore;
use bucketd::store::{BucketLimits, Retention, Store};

const W: WriterId = WriterId(1);
/// 2024-01-01T00:00:00Z.
const T0: i64 = 1_704_067_200_000;
const MINUTE: i64 = 60_000;
/// A reading every 10 s per sensor.
const EVERY_MS: i64 = 10_000;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn reading(ts: i64, sensor: usize) -> Reading {
    let t = ts as f64 / 1000.0 + sensor as f64 * 17.0;
    Reading {
        ts,
        fields: smallvec::smallvec![
            (
                "temperature".into(),
                FieldValue::Float(((20.0 + 5.0 * (t / 7200.0).sin()) * 100.0).round() / 100.0)
            ),
            (
                "humidity".into(),
                FieldValue::Float(((45.0 + 10.0 * (t / 5000.0).cos()) * 10.0).round() / 10.0)
            ),
        ],
    }
}

fn size(store: &EmbeddedStore) -> u64 {
    std::fs::metadata(store.path()).expect("file").len()
}

/// One run; returns the samples (simulated hours, readings written, file bytes).
fn run(sensors: usize, hours: i64, retention: Option<Duration>) -> Vec<(f64, u64, u64)> {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(dir.path(), BucketLimits::default()).unwrap();
    let series: Vec<Arc<SeriesMeta>> = (0..sensors)
        .map(|i| {
            Arc::new(SeriesMeta::new(
                &format!("env,sensor=s{i:05}"),
                "env",
                &[("sensor", format!("s{i:05}"))],
            ))
        })
        .collect();
    let policy = Retention { raw: retention, rollups: None };
    let (mut written, mut samples) = (0u64, Vec::new());
    let started = Instant::now();
    rt.block_on(async {
        for minute in 0..hours * 60 {
            let from = T0 + minute * MINUTE;
            let hour = from - from.rem_euclid(HOUR_MS);
            let batches: Vec<Batch> = series
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let readings: Vec<Reading> =
                        (0..MINUTE / EVERY_MS).map(|k| reading(from + k * EVERY_MS, i)).collect();
                    Batch::new(s.clone(), hour, readings)
                })
                .collect();
            written += batches.iter().map(|b| b.len() as u64).sum::<u64>();
            for outcome in store.write(W, &batches).await {
                outcome.expect("write");
            }
            let now = from + MINUTE;
            if retention.is_some() {
                // Bounded: a pass at one minute has at most every sensor's expired hour.
                for _ in 0..100_000 {
                    let step = store
                        .expire(now, policy, bucketd::retention::STEP_BUDGET)
                        .await
                        .expect("expire");
                    if step.done {
                        break;
                    }
                }
            }
            if (minute + 1) % 30 == 0 {
                samples.push(((minute + 1) as f64 / 60.0, written, size(&store)));
            }
        }
    });
    eprintln!("  ({:.0} s)", started.elapsed().as_secs_f64());
    samples
}

fn main() {
    // `cargo test --all-targets` runs bench targets too, without `--bench`: nothing to do.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let sensors = env("SENSORS", 500) as usize;
    let hours = env("HOURS", 10) as i64;
    let keep = env("RETENTION_HOURS", 2);
    println!(
        "{sensors} sensors, a reading (2 floats) every 10 s each, one flush per simulated minute"
    );
    let with = run(sensors, hours, Some(Duration::from_secs(keep * 3600)));
    let without = run(sensors, hours, None);
    println!(
        "| simulated hours | readings written | file, --retention {keep}h | file, no retention |"
    );
    println!("|---|---|---|---|");
    for (w, wo) in with.iter().zip(&without) {
        println!(
            "| {:.1} | {} | {:.1} MiB | {:.1} MiB |",
            w.0,
            w.1,
            w.2 as f64 / 1048576.0,
            wo.2 as f64 / 1048576.0
        );
    }
}
