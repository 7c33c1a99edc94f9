//! MQTT messages: any topic and payload, in every payload format, decode without panicking,
//! and every reading that comes out is valid.
#![no_main]

use bucketd::ingest::mqtt::payload::{PayloadFormat, TopicTemplate, decode};
use bucketd::ingest::validate::{InputLimits, validate};
use libfuzzer_sys::fuzz_target;

const NOW_MS: i64 = 1_700_000_000_000;

fuzz_target!(|data: &[u8]| {
    // The topic is the text before the first NUL (a topic never holds one), the payload after.
    let (topic, payload) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&b"site/room/temperature"[..], data),
    };
    let Ok(topic) = std::str::from_utf8(topic) else { return };
    let limits = InputLimits::default();
    let template: TopicTemplate = "{site}/+/{field}".parse().expect("a valid template");
    for format in [PayloadFormat::Auto, PayloadFormat::Line, PayloadFormat::Json, PayloadFormat::Number] {
        let decoded = decode(topic, payload, format, Some(&template), NOW_MS, &limits);
        for (series, reading) in &decoded.items {
            if let Err(e) = validate(series, reading, &limits) {
                panic!("an invalid reading came out ({e}): {series:?} {reading:?}");
            }
        }
    }
    // A template made of the topic itself parses or is refused, never panics.
    let _ = topic.parse::<TopicTemplate>();
});
