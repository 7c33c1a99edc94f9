//! JSON readings: any bytes parse without panicking; every reading that comes out is valid;
//! NDJSON gives the same results however the body is cut into chunks, and each of its lines
//! gives what that line parsed alone as a document gives.
#![no_main]

use bucketd::ingest::json::{NdjsonDecoder, Parsed, parse_document};
use bucketd::ingest::validate::{InputLimits, validate};
use libfuzzer_sys::fuzz_target;

const NOW_MS: i64 = 1_700_000_000_000;
/// Small, so that the over-long line paths are reached.
const MAX_LINE: usize = 512;

fn check_valid(parsed: &Parsed, limits: &InputLimits) {
    for (series, reading) in parsed.iter().flatten() {
        if let Err(e) = validate(series, reading, limits) {
            panic!("parser returned an invalid reading ({e}): {series:?} {reading:?}");
        }
    }
}

fn ndjson(chunks: &[&[u8]], limits: &InputLimits) -> Parsed {
    let mut decoder = NdjsonDecoder::new(MAX_LINE);
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(decoder.feed(chunk, NOW_MS, limits));
    }
    out.extend(decoder.finish(NOW_MS, limits));
    out
}

fuzz_target!(|input: &[u8]| {
    // The first byte chooses the chunk size; the rest is the body.
    let Some((&cut, body)) = input.split_first() else { return };
    let limits = InputLimits::default();

    let document = parse_document(body, NOW_MS, &limits);
    check_valid(&document, &limits);

    let whole = ndjson(&[body], &limits);
    check_valid(&whole, &limits);
    let size = usize::from(cut).max(1);
    let chunks: Vec<&[u8]> = body.chunks(size).collect();
    assert_eq!(ndjson(&chunks, &limits), whole, "chunks of {size} changed the result");

    // Each short line holding an object parses alone exactly as NDJSON parsed it.
    for (index, line) in body.split(|&b| b == b'\n').enumerate() {
        let first = line.iter().find(|b| !b.is_ascii_whitespace());
        if first != Some(&b'{') || line.len() > MAX_LINE {
            continue;
        }
        let mut alone = parse_document(line, NOW_MS, &limits);
        assert_eq!(alone.len(), 1);
        if let Err(e) = &mut alone[0] {
            e.index = index;
        }
        let from_ndjson = whole.iter().find(|r| match r {
            Ok(_) => false,
            Err(e) => e.index == index,
        });
        match (&alone[0], from_ndjson) {
            (Err(a), Some(Err(b))) => assert_eq!(a, b, "line {index}"),
            (Ok(_), None) => {}
            (a, b) => panic!("line {index}: alone {a:?}, in NDJSON {b:?}"),
        }
    }
});
