//! Push throughput of `Buffers` on its own (no flusher, no store): 5,000-reading pushes, as one
//! line-protocol body would produce, from 1 or 2 threads into the same sensors. Only the push
//! calls are timed; building the input and dropping the filled buffers are not.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bucketd::buffer::{BufferConfig, Buffers};
use bucketd::model::{FieldValue, Item, Reading, SeriesMeta};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const PER_PUSH: usize = 5_000;
/// Pushes per thread into one `Buffers` before it is dropped (untimed) and replaced.
const PUSHES_PER_ROUND: u64 = 20;

fn body(sensors: usize, thread: usize, round: u64) -> Vec<Item> {
    (0..PER_PUSH)
        .map(|i| {
            let host = format!("h{}", i % sensors);
            let meta = SeriesMeta::new(
                &format!("cpu,host={host},region=eu-west"),
                "cpu",
                &[("host", host.as_str()), ("region", "eu-west")],
            );
            let ts = 1_700_000_000_000 + (round as i64) * 10_000 + (i / sensors) as i64;
            let reading = Reading {
                ts,
                fields: smallvec::smallvec![
                    ("usage".into(), FieldValue::Float(i as f64 * 0.5)),
                    ("idle".into(), FieldValue::Float(thread as f64)),
                ],
            };
            (meta.into(), reading)
        })
        .collect()
}

/// Times `iters` pushes per thread, `threads` threads at once; returns the slowest thread's
/// total, so the throughput is what the threads achieved together.
fn run(iters: u64, threads: usize, sensors: usize) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = PUSHES_PER_ROUND.min(iters - done);
        let buffers = Buffers::new(BufferConfig {
            max_buffered_bytes: usize::MAX,
            max_buffered_readings: usize::MAX / 2,
            max_batch_readings: usize::MAX,
            flush_interval: Duration::from_secs(3600),
        });
        let barrier = Arc::new(Barrier::new(threads));
        let elapsed = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (buffers, barrier) = (&buffers, barrier.clone());
                    s.spawn(move || {
                        // Built on the pushing thread, as the parser would: the push frees the
                        // duplicate series metadata, and cross-thread frees would add allocator
                        // contention that ingest does not have.
                        let pushes: Vec<_> = (0..n).map(|r| body(sensors, t, r)).collect();
                        barrier.wait();
                        let start = Instant::now();
                        for items in pushes {
                            std::hint::black_box(buffers.push(items).unwrap());
                        }
                        start.elapsed()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).max().unwrap()
        });
        total += elapsed;
        done += n;
        drop(buffers);
    }
    total
}

fn bench_push(c: &mut Criterion) {
    let mut group = c.benchmark_group("push");
    for (threads, sensors) in [(1, 10), (2, 10), (2, 1000), (1, 10_000)] {
        group.throughput(Throughput::Elements((threads * PER_PUSH) as u64));
        group.bench_function(format!("{threads}_threads_{sensors}_sensors"), |b| {
            b.iter_custom(|iters| run(iters, threads, sensors))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_push);
criterion_main!(benches);
