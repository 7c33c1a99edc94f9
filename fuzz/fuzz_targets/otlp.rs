//! OpenTelemetry metrics: any bytes, as protobuf and as JSON, decode without panicking, and
//! every reading that comes out is valid.
#![no_main]

use bucketd::ingest::otlp::{Encoding, convert, decode};
use bucketd::ingest::validate::{InputLimits, validate};
use libfuzzer_sys::fuzz_target;

const NOW_MS: i64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    let limits = InputLimits::default();
    for encoding in [Encoding::Protobuf, Encoding::Json] {
        let Ok(request) = decode(data, encoding) else { continue };
        for (series, reading) in convert(request, NOW_MS, &limits).items {
            if let Err(e) = validate(&series, &reading, &limits) {
                panic!("an invalid reading came out ({e}): {series:?} {reading:?}");
            }
        }
    }
});
