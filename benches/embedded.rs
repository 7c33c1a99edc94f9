//! Embedded store speed: one flush of 1,000 batches × 10 or × 200 readings (one durable
//! commit), and a one-day range at 1 Hz (86,400 readings of 2 floats) read through
//! `Store::readings`.
//! Also prints the bytes on disk per reading of that day.
//!
//! Run: `cargo bench --bench embedded`

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bucketd::model::{Batch, FieldValue, HOUR_MS, Reading, Series, SeriesMeta};
use bucketd::store::embedded::EmbeddedStore;
use bucketd::store::{BucketLimits, Order, RangeQuery, Store};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;

/// The writer these writes are made as.
const W: bucketd::model::WriterId = bucketd::model::WriterId(1);

const DAY_START: i64 = 1_700_000_000_000 - 1_700_000_000_000 % (24 * HOUR_MS);
const DAY_READINGS: i64 = 86_400;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn series(key: &str) -> Arc<SeriesMeta> {
    Arc::new(SeriesMeta::new(key, "env", &[("site", "bench")]))
}

/// A plausible sensor: a slow temperature wave with 0.01 °C resolution and a humidity with
/// 0.1 % resolution.
fn env_reading(ts: i64) -> Reading {
    let t = (ts - DAY_START) as f64 / 1000.0;
    let temp = ((20.0 + 5.0 * (t / 7200.0).sin() + 0.3 * (t / 7.0).sin()) * 100.0).round() / 100.0;
    let hum = ((45.0 + 10.0 * (t / 5000.0).cos()) * 10.0).round() / 10.0;
    Reading {
        ts,
        fields: smallvec::smallvec![
            ("temperature".into(), FieldValue::Float(temp)),
            ("humidity".into(), FieldValue::Float(hum)),
        ],
    }
}

/// Writes one day at 1 Hz, one batch per `per_flush` readings (one chunk each), many batches
/// per write call to keep the set-up short.
fn write_day(rt: &tokio::runtime::Runtime, store: &EmbeddedStore, key: &str, per_flush: i64) {
    let s = series(key);
    let batches: Vec<Batch> = (0..DAY_READINGS / per_flush)
        .map(|i| {
            let start = DAY_START + i * per_flush * 1000;
            Batch::numbered(
                Series::from(s.clone()),
                start - start.rem_euclid(HOUR_MS),
                (0..per_flush).map(|j| env_reading(start + j * 1000)).collect(),
                vec![],
            )
        })
        .collect();
    rt.block_on(async {
        for chunk in batches.chunks(500) {
            for outcome in store.write(W, chunk).await {
                outcome.expect("write");
            }
        }
    });
}

async fn read_day(store: &EmbeddedStore, key: &str, order: Order) -> usize {
    let q = RangeQuery {
        sensor: key.into(),
        from: DAY_START,
        to: DAY_START + 24 * HOUR_MS,
        order,
        limit: None,
    };
    let all: Vec<Reading> = store.readings(q).map(|r| r.expect("reading")).collect().await;
    all.len()
}

fn file_size(store: &EmbeddedStore) -> u64 {
    std::fs::metadata(store.path()).unwrap().len()
}

fn bench_flush(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("embedded");
    group.sample_size(20).measurement_time(Duration::from_secs(10));
    // Slow sensors (10 s of 1 Hz, each flush joins the bucket's small last chunk) and fast
    // ones (2 s of 100 Hz: a chunk of its own, as flat out).
    for (per_batch, step_ms) in [(10i64, 1000i64), (200, 10)] {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path(), BucketLimits::default()).unwrap();
        let sensors: Vec<Arc<SeriesMeta>> =
            (0..1000).map(|i| series(&format!("sensor-{i:04}"))).collect();
        let mut round = 0i64;
        group.throughput(Throughput::Elements(1000 * per_batch as u64));
        group.bench_function(format!("flush_1000_batches_x{per_batch}"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = DAY_START + round * per_batch * step_ms;
                    round += 1;
                    let hour = start - start.rem_euclid(HOUR_MS);
                    let batches: Vec<Batch> = sensors
                        .iter()
                        .map(|s| {
                            Batch::numbered(
                                Series::from(s.clone()),
                                hour,
                                (0..per_batch)
                                    .map(|j| env_reading(start + j * step_ms))
                                    .filter(|r| r.ts - hour < HOUR_MS)
                                    .collect(),
                                vec![],
                            )
                        })
                        .collect();
                    let t = Instant::now();
                    let outcomes = rt.block_on(store.write(W, &batches));
                    total += t.elapsed();
                    assert!(outcomes.iter().all(Result::is_ok));
                }
                total
            })
        });
    }
    group.finish();
}

fn bench_read_day(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("embedded");
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(DAY_READINGS as u64));
    for per_flush in [10, 600] {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path(), BucketLimits::default()).unwrap();
        write_day(&rt, &store, "day", per_flush);
        report_size(&store, dir.path(), per_flush);
        assert_eq!(rt.block_on(read_day(&store, "day", Order::Asc)), DAY_READINGS as usize);
        group.bench_function(format!("read_day_1hz_2f_flush{per_flush}_asc"), |b| {
            b.iter(|| rt.block_on(read_day(&store, "day", Order::Asc)))
        });
        group.bench_function(format!("read_day_1hz_2f_flush{per_flush}_desc"), |b| {
            b.iter(|| rt.block_on(read_day(&store, "day", Order::Desc)))
        });
    }
    group.finish();
}

fn report_size(store: &EmbeddedStore, dir: &Path, per_flush: i64) {
    let size = file_size(store);
    eprintln!(
        "embedded: one day at 1 Hz, 2 floats, {per_flush} readings per flush: file {} ({:.1} bytes/reading) in {}",
        size,
        size as f64 / DAY_READINGS as f64,
        dir.display()
    );
}

criterion_group!(benches, bench_flush, bench_read_day);
criterion_main!(benches);
