//! The write-ahead log's record: encoding what one write accepted (what every acknowledged
//! write pays before its fsync) and decoding it again (what the refill and crash recovery pay).
//! The body is compare.sh's: 5,000 lines of 5,000 different sensors, two float fields, so that
//! every line brings a series the record has not named yet. Run: `cargo bench --bench wal`.

use std::hint::black_box;

use bucketd::ingest::line_protocol;
use bucketd::ingest::validate::InputLimits;
use bucketd::model::Item;
use bucketd::wal::Record;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const LINES: usize = 5_000;
const NOW: i64 = 1_700_000_000_000;

fn items() -> Vec<Item> {
    let mut body = String::new();
    for i in 0..LINES {
        body.push_str(&format!(
            "loadtest,sensor=s{i:05} temperature={}.{:02},humidity={}.{} {}000000\n",
            15 + i % 15,
            i % 100,
            30 + i % 60,
            i % 10,
            NOW + i as i64,
        ));
    }
    let parsed = line_protocol::parse_body(
        body.as_bytes(),
        line_protocol::Precision::Nanoseconds,
        NOW,
        &InputLimits::default(),
    );
    parsed.into_iter().map(|r| r.expect("the bench's lines are valid")).collect()
}

fn record(c: &mut Criterion) {
    let items = items();
    let record = Record::encode(&items).expect("encodes");
    println!("{LINES} readings: {} bytes a reading", record.encoded_len() / LINES);
    assert_eq!(record.decode().expect("decodes").len(), LINES);

    let mut group = c.benchmark_group("wal_record");
    group.throughput(Throughput::Elements(LINES as u64));
    group.bench_function("encode_5000_sensors", |b| b.iter(|| Record::encode(black_box(&items))));
    group.bench_function("decode_5000_sensors", |b| b.iter(|| black_box(&record).decode()));
    group.finish();
}

criterion_group!(benches, record);
criterion_main!(benches);
