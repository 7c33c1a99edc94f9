//! Parser throughput: a line-protocol body of 5,000 lines and a JSON array of 1,000 readings,
//! parsed and validated into owned series and readings (what the write endpoints do before
//! buffering). Run: `cargo bench --bench parse`.

use std::hint::black_box;

use bucketd::ingest::validate::InputLimits;
use bucketd::ingest::{json, line_protocol};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const NOW: i64 = 1_700_000_000_000;
const LP_LINES: usize = 5_000;
const JSON_READINGS: usize = 1_000;

/// Telegraf-like lines: three tags, four fields of mixed types, a nanosecond timestamp.
fn line_protocol_body() -> Vec<u8> {
    let mut body = String::new();
    for i in 0..LP_LINES {
        body.push_str(&format!(
            "env,host=gw{},sensor=s{},site=w{} temp={:.2},hum={:.1},count={}i,status=\"ok\" {}\n",
            i % 4,
            i % 50,
            i % 5,
            15.0 + (i % 100) as f64 * 0.13,
            40.0 + (i % 37) as f64,
            i,
            1_700_000_000_000_000_000i64 + i as i64 * 1_000_000_000,
        ));
    }
    body.into_bytes()
}

fn json_body() -> Vec<u8> {
    let items: Vec<String> = (0..JSON_READINGS)
        .map(|i| {
            format!(
                r#"{{"sensor":"env,sensor=s{},site=w{}","ts":{},"fields":{{"temp":{:.2},"hum":{:.1},"ok":true}}}}"#,
                i % 50,
                i % 5,
                NOW + i as i64 * 1_000,
                15.0 + (i % 100) as f64 * 0.13,
                40.0 + (i % 37) as f64,
            )
        })
        .collect();
    format!("[{}]", items.join(",")).into_bytes()
}

fn parse(c: &mut Criterion) {
    let limits = InputLimits::default();
    let lp = line_protocol_body();
    let js = json_body();
    println!(
        "line protocol: {} bytes, {LP_LINES} lines ({} bytes/line); json: {} bytes, {JSON_READINGS} readings ({} bytes/reading)",
        lp.len(),
        lp.len() / LP_LINES,
        js.len(),
        js.len() / JSON_READINGS
    );
    assert!(
        line_protocol::parse_body(&lp, Default::default(), NOW, &limits).iter().all(Result::is_ok)
    );
    assert!(json::parse_document(&js, NOW, &limits).iter().all(Result::is_ok));

    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Bytes(lp.len() as u64));
    group.bench_function("line_protocol_5000_lines", |b| {
        b.iter(|| {
            line_protocol::parse_body(
                black_box(&lp),
                line_protocol::Precision::Nanoseconds,
                NOW,
                &limits,
            )
        })
    });
    group.throughput(Throughput::Bytes(js.len() as u64));
    group.bench_function("json_array_1000_readings", |b| {
        b.iter(|| json::parse_document(black_box(&js), NOW, &limits))
    });
    group.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
