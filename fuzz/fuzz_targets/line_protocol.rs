//! Line protocol: any bytes parse without panicking; every reading that comes out is valid, and
//! re-encoded as line protocol it parses back to the same series and reading.
#![no_main]

use bucketd::ingest::line_protocol::{Precision, complete_line_len, parse_body};
use bucketd::ingest::validate::{InputLimits, validate};
use bucketd::model::FieldValue;
use libfuzzer_sys::fuzz_target;

const NOW_MS: i64 = 1_700_000_000_000;

fn escape(out: &mut String, s: &str, escapes: &[char]) {
    for c in s.chars() {
        if escapes.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = InputLimits::default();
    let _ = complete_line_len(data);
    for precision in [Precision::Nanoseconds, Precision::Seconds] {
        for (series, reading) in parse_body(data, precision, NOW_MS, &limits).into_iter().flatten()
        {
            if let Err(e) = validate(&series, &reading, &limits) {
                panic!("parser returned an invalid reading ({e}): {series:?} {reading:?}");
            }
            // The series key is the line-protocol text of measurement and tags.
            let mut line = series.key().to_owned();
            line.push(' ');
            for (i, (name, value)) in reading.fields.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                escape(&mut line, name, &[',', '=', ' ']);
                line.push('=');
                match value {
                    FieldValue::Float(f) => line.push_str(&format!("{f:?}")),
                    FieldValue::Int(v) => line.push_str(&format!("{v}i")),
                    FieldValue::UInt(v) => line.push_str(&format!("{v}u")),
                    FieldValue::Bool(b) => line.push_str(if *b { "true" } else { "false" }),
                    FieldValue::Str(s) => {
                        line.push('"');
                        escape(&mut line, s, &['"', '\\']);
                        line.push('"');
                    }
                }
            }
            line.push_str(&format!(" {}", reading.ts));
            let again = parse_body(line.as_bytes(), Precision::Milliseconds, NOW_MS, &limits);
            match again.as_slice() {
                [Ok((s, r))] => {
                    assert_eq!(s, &series, "series changed through {line:?}");
                    assert_eq!(r, &reading, "reading changed through {line:?}");
                }
                other => panic!("re-encoded {line:?} did not parse back: {other:?}"),
            }
        }
    }
});
