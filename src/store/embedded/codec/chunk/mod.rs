//! Chunks of readings (values of the chunk tables), in the formats the codec's module doc
//! describes. Each version decodes in its own file; this one reads the version and the
//! summary every version starts with, and hands the rest to that version.

mod format;
mod v1;
mod v2;

pub use self::format::ChunkSummary;
use self::format::MAX_CHUNK_READINGS;
pub(super) use self::format::{CHUNK_V2, T_BOOL, T_FLOAT, T_INT, T_STR, T_UINT};
#[cfg(test)]
pub(in crate::store::embedded) use self::v1::encode::encode_v1;
pub(super) use self::v1::{CHUNK_V1, decode_v1};
pub use self::v2::encode_chunk;
use self::v2::{decode_v2, timestamps_v2};
pub(super) use self::v2::{
    fill_timestamps, get_floats, get_floats_into, get_integers, get_scaled_into, least_bytes,
};
use super::corrupt;
use crate::model::{Columns, Reading, TimestampMs};
use crate::store::embedded::EmbeddedError;
use crate::wire::Cursor;

pub(super) fn chunk_prefix(
    c: &mut Cursor<'_>,
    hour: TimestampMs,
) -> Result<(u64, ChunkSummary), EmbeddedError> {
    let version = c.varint()?;
    if version != CHUNK_V1 && version != CHUNK_V2 {
        return Err(EmbeddedError::Corrupt(format!("unknown chunk encoding version {version}")));
    }
    let count = u32::try_from(c.varint()?).map_err(|_| corrupt("chunk count too large"))?;
    // Version 1 bounds its count by its bytes (two a reading at least), and older files may
    // hold larger chunks than the bound now allows.
    if version == CHUNK_V2 && count > MAX_CHUNK_READINGS {
        return Err(corrupt("chunk count too large"));
    }
    let first_off = c.varint()?;
    let last_off = c.varint()?;
    if first_off > last_off || last_off >= crate::model::HOUR_MS as u64 {
        return Err(corrupt("chunk timestamps outside its hour"));
    }
    Ok((
        version,
        ChunkSummary { count, first: hour + first_off as i64, last: hour + last_off as i64 },
    ))
}

/// Reads only the chunk's summary.
pub fn chunk_summary(bytes: &[u8], hour: TimestampMs) -> Result<ChunkSummary, EmbeddedError> {
    chunk_prefix(&mut Cursor::new(bytes), hour).map(|(_, summary)| summary)
}

/// Only a chunk's timestamps, ascending, into `ts` (cleared first): where a write looks for
/// the points it meets, no field is decoded (version 2).
pub fn chunk_timestamps(
    bytes: &[u8],
    hour: TimestampMs,
    ts: &mut Vec<TimestampMs>,
) -> Result<ChunkSummary, EmbeddedError> {
    let mut c = Cursor::new(bytes);
    let (version, summary) = chunk_prefix(&mut c, hour)?;
    if version == CHUNK_V1 {
        let mut readings = Vec::new();
        decode_v1(&mut c, summary, &mut readings)?;
        ts.clear();
        ts.extend(readings.iter().map(|r| r.ts));
    } else {
        timestamps_v2(&mut c, summary, ts)?;
    }
    Ok(summary)
}

/// Decodes every reading of a chunk, in stored order, appending them to `out`.
pub fn decode_chunk(
    bytes: &[u8],
    hour: TimestampMs,
    out: &mut Vec<Reading>,
) -> Result<ChunkSummary, EmbeddedError> {
    match decode_chunk_columns(bytes, hour)? {
        (summary, Decoded::Columns(columns)) => {
            out.extend(columns.into_readings());
            Ok(summary)
        }
        (summary, Decoded::Readings(readings)) => {
            out.extend(readings);
            Ok(summary)
        }
    }
}

/// A chunk's readings as its format holds them.
pub enum Decoded {
    /// Version 2: in columns.
    Columns(Columns),
    /// Version 1, row by row: ascending.
    Readings(Vec<Reading>),
}

/// Decodes a chunk without making a `Reading` of each of its readings where the format allows.
pub fn decode_chunk_columns(
    bytes: &[u8],
    hour: TimestampMs,
) -> Result<(ChunkSummary, Decoded), EmbeddedError> {
    let mut c = Cursor::new(bytes);
    let (version, summary) = chunk_prefix(&mut c, hour)?;
    if version == CHUNK_V1 {
        let mut out = Vec::new();
        decode_v1(&mut c, summary, &mut out)?;
        Ok((summary, Decoded::Readings(out)))
    } else {
        Ok((summary, Decoded::Columns(decode_v2(&mut c, summary)?)))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::{FieldValue, HOUR_MS};
    use crate::wire::put_varint;

    /// Encodes with this version and with version 1 (what older files hold); both must decode
    /// to the readings, bit for bit.
    fn roundtrip(hour: i64, readings: &[Reading]) -> Vec<Reading> {
        let refs: Vec<&Reading> = readings.iter().collect();
        let v1 = super::super::encode_v1(hour, &refs);
        let mut outs = Vec::new();
        for bytes in [encode_chunk(hour, &refs), v1] {
            let mut out = Vec::new();
            let summary = decode_chunk(&bytes, hour, &mut out).expect("decodes");
            assert_eq!(summary, chunk_summary(&bytes, hour).unwrap());
            assert_eq!(summary.count as usize, readings.len());
            let mut ts = vec![-1];
            assert_eq!(chunk_timestamps(&bytes, hour, &mut ts).expect("decodes"), summary);
            assert_eq!(ts, out.iter().map(|r| r.ts).collect::<Vec<_>>());
            // PartialEq equates 0.0 and -0.0; the encoding must keep every bit.
            for (a, b) in readings.iter().zip(&out) {
                for ((_, x), (_, y)) in a.fields.iter().zip(&b.fields) {
                    if let (FieldValue::Float(x), FieldValue::Float(y)) = (x, y) {
                        assert_eq!(x.to_bits(), y.to_bits(), "{x} came back as {y}");
                    }
                }
            }
            outs.push(out);
        }
        let v1 = outs.pop().expect("two");
        let v2 = outs.pop().expect("two");
        assert_eq!(v1, v2);
        v2
    }

    fn r(ts: i64, fields: Vec<(&str, FieldValue)>) -> Reading {
        Reading { ts, fields: fields.into_iter().map(|(n, v)| (n.into(), v)).collect() }
    }

    #[test]
    fn chunk_roundtrips_mixed_shapes_and_types() {
        let hour = 5 * HOUR_MS;
        let readings = vec![
            r(hour, vec![("t", FieldValue::Float(21.5)), ("h", FieldValue::Float(40.0))]),
            r(hour, vec![("t", FieldValue::Float(21.5)), ("h", FieldValue::Float(40.25))]),
            r(hour + 7, vec![("n", FieldValue::Int(-3)), ("s", FieldValue::Str("ok é".into()))]),
            r(hour + 9, vec![("n", FieldValue::Int(i64::MAX)), ("b", FieldValue::Bool(true))]),
            r(hour + 9, vec![("n", FieldValue::Int(i64::MIN)), ("b", FieldValue::Bool(false))]),
            r(hour + 10, vec![("t", FieldValue::UInt(u64::MAX))]),
            r(hour + 11, vec![("t", FieldValue::Float(-0.0))]),
            r(hour + HOUR_MS - 1, vec![("t", FieldValue::Float(f64::MIN_POSITIVE))]),
        ];
        assert_eq!(roundtrip(hour, &readings), readings);
    }

    #[test]
    fn decimal_floats_take_a_couple_of_bytes_and_keep_their_bits() {
        let values = [21.37, 21.41, 21.4, -0.0, 0.0, 1013.25, 0.000123, 1e300, 0.1 + 0.2, 5e-324];
        let readings: Vec<Reading> = values
            .iter()
            .enumerate()
            .map(|(i, v)| r(i as i64, vec![("t", FieldValue::Float(*v))]))
            .collect();
        let back = roundtrip(0, &readings);
        for (a, b) in readings.iter().zip(&back) {
            match (&a.fields[0].1, &b.fields[0].1) {
                (FieldValue::Float(x), FieldValue::Float(y)) => {
                    assert_eq!(x.to_bits(), y.to_bits())
                }
                other => panic!("{other:?}"),
            }
        }
        let steady: Vec<Reading> = (0..100)
            .map(|i| r(i * 1000, vec![("t", FieldValue::Float(20.0 + (i % 7) as f64 * 0.01))]))
            .collect();
        let refs: Vec<&Reading> = steady.iter().collect();
        // A one-byte delta per reading; the regular timestamps and the one shape take a few
        // bytes per chunk. Version 1 spent five bytes a reading.
        assert!(encode_chunk(0, &refs).len() <= 100 + 20);
    }

    #[test]
    fn floats_switching_between_decimals_xor_and_integers_roundtrip() {
        let values = [
            FieldValue::Float(21.37),
            FieldValue::Float(21.4),
            FieldValue::Float(21.4),
            FieldValue::Float(0.1 + 0.2),
            FieldValue::Float(21.41),
            FieldValue::Int(7),
            FieldValue::Float(21.42),
            FieldValue::Float(1e300),
            FieldValue::Float(1013.25),
            FieldValue::Str("x".into()),
            FieldValue::Float(1013.5),
            FieldValue::Float(1013.125),
            FieldValue::Float(-0.0),
            FieldValue::Float(1013.0),
        ];
        let readings: Vec<Reading> =
            values.iter().enumerate().map(|(i, v)| r(i as i64, vec![("v", v.clone())])).collect();
        assert_eq!(roundtrip(0, &readings), readings);
    }

    #[test]
    fn chunk_roundtrips_readings_without_fields() {
        let readings =
            vec![r(1, vec![]), r(2, vec![]), r(3, vec![("a", FieldValue::Int(1))]), r(4, vec![])];
        assert_eq!(roundtrip(0, &readings), readings);
    }

    #[test]
    fn chunk_roundtrips_before_1970() {
        let hour = -7 * HOUR_MS;
        let readings = vec![r(hour + 1, vec![("v", FieldValue::Int(1))])];
        assert_eq!(roundtrip(hour, &readings), readings);
    }

    #[test]
    fn repeated_shape_and_steady_value_cost_few_bytes() {
        let hour = 0;
        let readings: Vec<Reading> =
            (0..100).map(|i| r(i * 1000, vec![("temperature", FieldValue::Float(20.0))])).collect();
        let refs: Vec<&Reading> = readings.iter().collect();
        let bytes = encode_chunk(hour, &refs);
        // An unchanged value (1 byte) per reading, plus the header.
        assert!(bytes.len() < 100 + 40, "{} bytes", bytes.len());
    }

    /// The fleet's shape: two fields of fixed resolution, one reading a second, a minute per
    /// chunk.
    #[test]
    fn a_sensors_minute_takes_about_two_bytes_a_reading() {
        let hour = 3 * HOUR_MS;
        let readings: Vec<Reading> = (0..60)
            .map(|k| {
                r(
                    hour + 17 + k * 1000,
                    vec![
                        ("temperature", FieldValue::Float(f64::from(1500 + k as i32) / 100.0)),
                        ("humidity", FieldValue::Float(f64::from(300 + 3 * k as i32) / 10.0)),
                    ],
                )
            })
            .collect();
        assert_eq!(roundtrip(hour, &readings), readings);
        let refs: Vec<&Reading> = readings.iter().collect();
        let bytes = encode_chunk(hour, &refs);
        // A one-byte delta a field and reading (v1: 7.4 bytes a reading); the names, the first
        // values and the timestamps: 45 bytes a chunk.
        assert!(bytes.len() <= 60 * 2 + 45, "{} bytes", bytes.len());
    }

    /// A value that holds still or moves by a fixed step, as a counter or a slow ramp does,
    /// costs a few bytes a run of equal changes, not a byte a reading; a value that does not
    /// keeps its byte a reading.
    #[test]
    fn floats_moving_by_fixed_steps_take_a_few_bytes_a_run() {
        let hour = 5 * HOUR_MS;
        let ramp: Vec<Reading> = (0..360)
            .map(|k| {
                // Wraps like the load test's temperature, twice in the chunk.
                let centi = 1500 + (7 + k) % 150;
                r(
                    hour + k * 10_000,
                    vec![("t", FieldValue::Float(f64::from(centi as i32) / 100.0))],
                )
            })
            .collect();
        assert_eq!(roundtrip(hour, &ramp), ramp);
        let refs: Vec<&Reading> = ramp.iter().collect();
        let bytes = encode_chunk(hour, &refs);
        assert!(bytes.len() < 40, "{} bytes", bytes.len());
        let noisy: Vec<Reading> = (0..360)
            .map(|k| {
                r(
                    hour + k * 10_000,
                    vec![("t", FieldValue::Float(f64::from((k * 37 % 11) as i32) / 10.0))],
                )
            })
            .collect();
        assert_eq!(roundtrip(hour, &noisy), noisy);
        let refs: Vec<&Reading> = noisy.iter().collect();
        assert!(encode_chunk(hour, &refs).len() >= 360, "one by one, a byte each");
    }

    #[test]
    fn timestamps_in_runs_jitter_and_duplicates_roundtrip() {
        let hour = 11 * HOUR_MS;
        let mut offsets: Vec<i64> = (0..50).map(|i| i * 1000).collect();
        // Jitter, a gap, equal timestamps, then ever longer periods (a run of equal changes).
        offsets.extend([50_003, 50_998, 52_001, 90_000, 90_000, 90_000, 90_001]);
        offsets.extend((1..30).map(|i| 90_001 + i * (i + 1) / 2 * 7));
        offsets.push(HOUR_MS - 1);
        let readings: Vec<Reading> =
            offsets.iter().map(|&o| r(hour + o, vec![("v", FieldValue::Int(o))])).collect();
        assert_eq!(roundtrip(hour, &readings), readings);
        let regular: Vec<Reading> = (0..1000)
            .map(|i| r(hour + i * 250, vec![("b", FieldValue::Bool(i % 3 == 0))]))
            .collect();
        assert_eq!(roundtrip(hour, &regular), regular);
        let refs: Vec<&Reading> = regular.iter().collect();
        // 1,000 regular timestamps in one run, 1,000 bools in 125 bytes.
        assert!(encode_chunk(hour, &refs).len() < 125 + 20);
    }

    #[test]
    fn a_count_beyond_the_bound_is_corrupt_before_anything_is_allocated() {
        let mut bytes = Vec::new();
        for v in [CHUNK_V2, u64::from(MAX_CHUNK_READINGS) + 1, 0, 0, 0, 1, 0, 1] {
            put_varint(&mut bytes, v);
        }
        put_varint(&mut bytes, u64::from(MAX_CHUNK_READINGS) - 1);
        assert!(matches!(chunk_summary(&bytes, 0), Err(EmbeddedError::Corrupt(_))));
        // At the bound, these bytes would be a million readings without fields: a run of equal
        // timestamps, all at the hour's start.
        let mut at_bound = Vec::new();
        for v in [CHUNK_V2, u64::from(MAX_CHUNK_READINGS), 0, 0, 0, 1, 0, 1] {
            put_varint(&mut at_bound, v);
        }
        put_varint(&mut at_bound, u64::from(MAX_CHUNK_READINGS) - 3);
        let mut out = Vec::new();
        decode_chunk(&at_bound, 0, &mut out).expect("decodes");
        assert_eq!(out.len(), MAX_CHUNK_READINGS as usize);
        assert!(out.iter().all(|r| r.ts == 0 && r.fields.is_empty()));
    }

    #[test]
    fn corrupt_chunks_are_errors_not_panics() {
        let hour = 0;
        let readings = [
            r(5, vec![("a", FieldValue::Str("hello".into())), ("b", FieldValue::Float(1.5))]),
            r(6, vec![("a", FieldValue::Str("x".into())), ("b", FieldValue::Float(2.5))]),
        ];
        let refs: Vec<&Reading> = readings.iter().collect();
        let bytes = encode_chunk(hour, &refs);
        for cut in 0..bytes.len() {
            let mut out = Vec::new();
            assert!(decode_chunk(&bytes[..cut], hour, &mut out).is_err(), "cut at {cut}");
            // Its fields (the last 11 bytes) are not read; a cut before them is found.
            let timestamps = chunk_timestamps(&bytes[..cut], hour, &mut Vec::new());
            assert_eq!(timestamps.is_err(), cut < bytes.len() - 11, "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_chunk(&longer, hour, &mut Vec::new()).is_err());
        let mut wrong_version = bytes;
        wrong_version[0] = 9;
        assert!(matches!(
            decode_chunk(&wrong_version, hour, &mut Vec::new()),
            Err(EmbeddedError::Corrupt(_))
        ));
    }

    fn value() -> impl Strategy<Value = FieldValue> {
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(FieldValue::Float),
            (-10_000_000i64..10_000_000, 0..8usize)
                .prop_map(|(i, k)| FieldValue::Float(i as f64 / 10f64.powi(k as i32))),
            (-3i64..3).prop_map(|i| FieldValue::Float(i as f64 * 1e300)),
            Just(FieldValue::Float(-0.0)),
            any::<i64>().prop_map(FieldValue::Int),
            any::<u64>().prop_map(FieldValue::UInt),
            any::<bool>().prop_map(FieldValue::Bool),
            ".{0,12}".prop_map(FieldValue::Str),
        ]
    }

    fn reading_strategy() -> impl Strategy<Value = (i64, Vec<(String, FieldValue)>)> {
        (
            0..HOUR_MS,
            proptest::collection::btree_map("[a-d]{1,2}", value(), 0..5)
                .prop_map(|m| m.into_iter().collect::<Vec<_>>()),
        )
    }

    proptest! {
        #[test]
        fn any_sorted_chunk_roundtrips(
            hour_index in -1000i64..1000,
            raw in proptest::collection::vec(reading_strategy(), 0..60),
        ) {
            let hour = hour_index * HOUR_MS;
            let mut readings: Vec<Reading> =
                raw.into_iter().map(|(off, fields)| Reading {
                    ts: hour + off,
                    fields: fields.into_iter().map(|(n, v): (String, _)| (n.into(), v)).collect(),
                }).collect();
            readings.sort_by_key(|r| r.ts);
            prop_assert_eq!(roundtrip(hour, &readings), readings);
        }

        /// Floats that move by a few steps, in runs or not, with any number of decimals (a
        /// column may be written in runs or one by one): every value comes back bit for bit.
        #[test]
        fn floats_in_steps_roundtrip(
            start in -1_000_000i64..1_000_000,
            k in 0..8i32,
            steps in proptest::collection::vec(
                (prop_oneof![Just(0i64), Just(1), Just(-3), Just(250)], 1..40usize),
                0..12,
            ),
        ) {
            let hour = 2 * HOUR_MS;
            let mut v = start;
            let mut readings = Vec::new();
            for (step, n) in steps {
                for _ in 0..n {
                    v += step;
                    let ts = hour + readings.len() as i64;
                    readings.push(r(ts, vec![("v", FieldValue::Float(v as f64 / 10f64.powi(k)))]));
                }
            }
            prop_assert_eq!(roundtrip(hour, &readings), readings);
        }
    }
}

/// Encoding density and decode speed for one day at 1 Hz. Not a test of speed; run with
/// `cargo test --release --lib measure_chunk_encoding -- --ignored --nocapture`.
#[cfg(test)]
mod measure {
    use super::*;
    use crate::model::{FieldValue, hour_start};
    use std::time::Instant;

    fn day(fields: usize, noisy: bool) -> Vec<Reading> {
        (0..86_400i64)
            .map(|s| {
                let t = s as f64;
                let fields = (0..fields)
                    .map(|f| {
                        let wave =
                            20.0 + 5.0 * (t / 7200.0 + f as f64).sin() + 0.3 * (t / 7.0).sin();
                        // Sensor-like values have a fixed resolution; `noisy` keeps full precision.
                        let v = if noisy { wave } else { (wave * 100.0).round() / 100.0 };
                        (format!("field_{f}").into(), FieldValue::Float(v))
                    })
                    .collect();
                Reading { ts: 1_699_920_000_000 + s * 1000, fields }
            })
            .collect()
    }

    #[test]
    #[ignore]
    fn measure_chunk_encoding() {
        for (fields, noisy) in [(1, false), (2, false), (3, false), (2, true)] {
            let readings = day(fields, noisy);
            for per_chunk in [10usize, 60, 600, 1000] {
                // Chunks never cross an hour.
                let mut parts: Vec<Vec<&Reading>> = Vec::new();
                for c in readings.chunks(per_chunk) {
                    let start = parts.len();
                    for r in c {
                        let fresh = parts.len() == start;
                        match parts.last_mut() {
                            Some(p) if !fresh && hour_start(p[0].ts) == hour_start(r.ts) => {
                                p.push(r)
                            }
                            _ => parts.push(vec![r]),
                        }
                    }
                }
                type Encoder = fn(i64, &[&Reading]) -> Vec<u8>;
                let encoders: [(&str, Encoder); 2] = [
                    ("v2", |h, p| encode_chunk(h, p)),
                    ("v1", |h, p| super::super::encode_v1(h, p)),
                ];
                for (version, encode) in encoders {
                    let t = Instant::now();
                    let chunks: Vec<(i64, Vec<u8>)> = parts
                        .iter()
                        .map(|p| {
                            let hour = hour_start(p[0].ts);
                            (hour, encode(hour, p))
                        })
                        .collect();
                    let encoded = t.elapsed();
                    let bytes: usize = chunks.iter().map(|(_, c)| c.len()).sum();
                    let t = Instant::now();
                    let mut out = Vec::with_capacity(readings.len());
                    for (hour, c) in &chunks {
                        decode_chunk(c, *hour, &mut out).unwrap();
                    }
                    let decode = t.elapsed();
                    assert_eq!(out, readings);
                    eprintln!(
                        "{version}: {fields} float field(s){}, {per_chunk:>4} readings/chunk: {:.2} bytes/reading, encode {:.0} ns/reading, decode {:.0} ns/reading",
                        if noisy { " full precision" } else { ", 0.01 resolution" },
                        bytes as f64 / readings.len() as f64,
                        encoded.as_nanos() as f64 / readings.len() as f64,
                        decode.as_nanos() as f64 / readings.len() as f64,
                    );
                }
            }
        }
    }
}
