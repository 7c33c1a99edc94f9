//! BSON encoding of what a MongoDB flush sends: the upsert statements of one cycle, built by
//! `bucketd::store::mongo::encode_batch` exactly as the write path builds them (no server).
//!
//! Two shapes: a full bucket (one batch of 1,000 readings, what a busy sensor flushes), and a
//! cycle of the 10,000-sensor × 1 reading/s load at a 1 s flush interval (10,000 batches of one reading each, one statement per batch).
//!
//! Run: `cargo bench --bench bson`

mod common;

use bucketd::model::{Batch, HOUR_MS};
use bucketd::store::BucketLimits;
use bucketd::store::mongo::encode_batch;
use common::{reading, series};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// The writer these writes are made as.
const W: bucketd::model::WriterId = bucketd::model::WriterId(1);

const HOUR: i64 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS;
/// MongoDB's maxBsonObjectSize less the write path's command overhead.
const STATEMENT_BUDGET: u64 = 16 * 1024 * 1024 - 256;

fn bench_encode(c: &mut Criterion) {
    let limits = BucketLimits::default();
    let mut group = c.benchmark_group("bson");

    let full = Batch::numbered(
        series(0),
        HOUR,
        (0..1000).map(|i| reading(HOUR + i as i64 * 1000, i)).collect(),
        vec![],
    );
    let bytes: usize =
        encode_batch(&full, W, limits, STATEMENT_BUDGET).iter().map(|d| d.as_bytes().len()).sum();
    eprintln!("bson: a 1,000-reading batch encodes to {bytes} bytes of statements");
    group.throughput(Throughput::Elements(1000));
    group.bench_function("bucket_batch_1000_readings", |b| {
        b.iter(|| encode_batch(std::hint::black_box(&full), W, limits, STATEMENT_BUDGET))
    });

    let cycle: Vec<Batch> =
        (0..10_000).map(|i| Batch::new(series(i), HOUR, vec![reading(HOUR, i)])).collect();
    group.throughput(Throughput::Elements(cycle.len() as u64));
    group.bench_function("cycle_10000_sensors_x1", |b| {
        b.iter(|| {
            cycle
                .iter()
                .map(|batch| {
                    encode_batch(std::hint::black_box(batch), W, limits, STATEMENT_BUDGET).len()
                })
                .sum::<usize>()
        })
    });
    group.finish();
}

criterion_group!(benches, bench_encode);
criterion_main!(benches);
