//! Gzip ingest: decompressing a gzip-encoded line-protocol body of 5,000 lines as the write
//! endpoints do (`gunzip_limited`, bounded by `--max-body-bytes`). Telegraf gzips its bodies by
//! default, so this is on the hot path of every such write. Run: `cargo bench --bench gzip`.

use std::hint::black_box;
use std::io::Write as _;

use bucketd::ingest::http::gunzip_limited;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flate2::Compression;
use flate2::write::GzEncoder;

const LINES: usize = 5_000;
const LIMIT: usize = 64 << 20;

/// The load test's lines: one tag, two fixed-decimal fields, a nanosecond timestamp.
fn body() -> Vec<u8> {
    let mut body = String::new();
    for i in 0..LINES {
        body.push_str(&format!(
            "env,sensor=s{:05} temperature={:.2},humidity={:.1} {}\n",
            i % 10_000,
            15.0 + (i % 1500) as f64 * 0.01,
            30.0 + (i % 600) as f64 * 0.1,
            1_700_000_000_000_000_000i64 + i as i64 * 1_000_000_000,
        ));
    }
    body.into_bytes()
}

fn gzip(c: &mut Criterion) {
    let plain = body();
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(&plain).unwrap();
    let compressed = encoder.finish().unwrap();
    println!("{} bytes, gzip-encoded {} bytes", plain.len(), compressed.len());
    assert_eq!(gunzip_limited(&compressed, LIMIT).unwrap(), plain);

    let mut group = c.benchmark_group("gzip");
    group.throughput(Throughput::Bytes(plain.len() as u64));
    group.bench_function("gunzip_5000_lines", |b| {
        b.iter(|| gunzip_limited(black_box(&compressed), LIMIT).unwrap())
    });
    group.finish();
}

criterion_group!(benches, gzip);
criterion_main!(benches);
