//! Prometheus remote write: any bytes, as the protobuf a snappy body holds and as a body
//! itself, decode without panicking, and every reading that comes out is valid.
#![no_main]

use bucketd::ingest::prometheus::{convert, decode};
use bucketd::ingest::validate::{InputLimits, validate};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let limits = InputLimits::default();
    let compressed = snap::raw::Encoder::new().compress_vec(data).expect("snappy compresses");
    for body in [compressed.as_slice(), data] {
        let Ok(request) = decode(body, LIMIT) else { continue };
        let samples: usize = request.timeseries.iter().map(|ts| ts.samples.len()).sum();
        let out = convert(request, &limits);
        let refused: usize = out.rejected.iter().map(|r| r.samples).sum();
        assert!(out.items.len() + refused <= samples, "more readings than samples");
        for (series, reading) in &out.items {
            if let Err(e) = validate(series, reading, &limits) {
                panic!("an invalid reading came out ({e}): {series:?} {reading:?}");
            }
        }
    }
});
