//! Chunks of readings (values of the `chunks` table): the format the module doc describes.

use std::collections::HashMap;

use super::corrupt;
use crate::model::{FieldName, FieldValue, Fields, Reading, ReadingView, TimestampMs, ValueRef};
use crate::store::embedded::EmbeddedError;
use crate::wire::{Cursor, put_str, put_varint, unzigzag, zigzag};

const CHUNK_V1: u64 = 1;

const T_FLOAT: u8 = 0;
const T_INT: u8 = 1;
const T_UINT: u8 = 2;
const T_BOOL: u8 = 3;
const T_STR: u8 = 4;

/// What a chunk's first bytes say, readable without decoding the readings, so that a range scan
/// can skip chunks outside the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSummary {
    pub count: u32,
    pub first: TimestampMs,
    pub last: TimestampMs,
}

fn type_of(v: ValueRef<'_>) -> u8 {
    match v {
        ValueRef::Float(_) => T_FLOAT,
        ValueRef::Int(_) => T_INT,
        ValueRef::UInt(_) => T_UINT,
        ValueRef::Bool(_) => T_BOOL,
        ValueRef::Str(_) => T_STR,
    }
}

/// Encodes readings that all lie in `hour` and are sorted by timestamp: [`Reading`]s, or a
/// buffer's rows read in place (the same bytes for the same readings).
pub fn encode_chunk<R: ReadingView>(hour: TimestampMs, readings: &[R]) -> Vec<u8> {
    debug_assert!(readings.windows(2).all(|w| w[0].ts() <= w[1].ts()));
    debug_assert!(readings.iter().all(|r| r.ts() >= hour && r.ts() - hour < crate::model::HOUR_MS));
    let (first, last) = match (readings.first(), readings.last()) {
        (Some(f), Some(l)) => (f.ts(), l.ts()),
        _ => (hour, hour),
    };

    // The dictionary comes first in the value but is only known after a pass over the fields.
    let mut names: Vec<&str> = Vec::new();
    let mut index: HashMap<&str, u32> = HashMap::new();
    let mut body = Vec::with_capacity(readings.len() * 20);
    let mut prev_ts = first;
    let mut prev_shape: Vec<(u32, u8)> = Vec::new();
    let mut shape: Vec<(u32, u8)> = Vec::new();
    let mut prev_bits: Vec<u64> = Vec::new();
    let mut memos: Vec<ScaledMemo> = Vec::new();
    // The previous reading, whose shape is `prev_shape`.
    let mut prev: Option<&R> = None;
    for r in readings {
        let ts = r.ts();
        put_varint(&mut body, (ts - prev_ts) as u64);
        prev_ts = ts;

        let same = prev.is_some_and(|p| {
            r.same_shape(p).unwrap_or_else(|| {
                let mut n = 0;
                let alike = r.fields().all(|(name, value)| {
                    let at = prev_shape.get(n);
                    n += 1;
                    at.is_some_and(|&(i, t)| names[i as usize] == name && type_of(value) == t)
                });
                alike && n == prev_shape.len()
            })
        });
        prev = Some(r);
        if same {
            body.push(0);
        } else {
            shape.clear();
            for (name, value) in r.fields() {
                let i = *index.entry(name).or_insert_with(|| {
                    names.push(name);
                    prev_bits.push(0);
                    memos.push(None);
                    (names.len() - 1) as u32
                });
                shape.push((i, type_of(value)));
            }
            put_varint(&mut body, shape.len() as u64 + 1);
            for &(i, t) in &shape {
                put_varint(&mut body, u64::from(i));
                body.push(t);
            }
            std::mem::swap(&mut shape, &mut prev_shape);
        }

        for ((_, value), &(i, _)) in r.fields().zip(&prev_shape) {
            let prev = &mut prev_bits[i as usize];
            match value {
                ValueRef::Float(f) => {
                    put_float(&mut body, f, *prev, &mut memos[i as usize]);
                    *prev = f.to_bits();
                }
                ValueRef::Int(v) => {
                    put_varint(&mut body, zigzag((v as u64).wrapping_sub(*prev) as i64));
                    *prev = v as u64;
                    memos[i as usize] = None;
                }
                ValueRef::UInt(v) => {
                    put_varint(&mut body, zigzag(v.wrapping_sub(*prev) as i64));
                    *prev = v;
                    memos[i as usize] = None;
                }
                ValueRef::Bool(b) => body.push(u8::from(b)),
                ValueRef::Str(s) => put_str(&mut body, s),
            }
        }
    }

    let mut out =
        Vec::with_capacity(body.len() + 16 + names.iter().map(|n| n.len() + 2).sum::<usize>());
    put_varint(&mut out, CHUNK_V1);
    put_varint(&mut out, readings.len() as u64);
    put_varint(&mut out, (first - hour) as u64);
    put_varint(&mut out, (last - hour) as u64);
    put_varint(&mut out, names.len() as u64);
    for n in &names {
        put_str(&mut out, n);
    }
    out.extend_from_slice(&body);
    out
}

/// Powers of ten a float may be scaled by to become an integer: up to six decimals.
const POW10: [f64; 7] = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6];
/// Integers up to 2^53 convert to and from f64 exactly.
const EXACT_INT: f64 = 9_007_199_254_740_992.0;
/// Float header bytes from here on mean "decimal": the low nibble is the number of decimals.
/// XOR headers never reach them (their two nibbles add up to at most 8).
const DECIMAL_HEADER: u8 = 0xf0;

/// The previous value of a field scaled by `10^k`, as both encoder and decoder compute it
/// (0 when it is not a float in range, e.g. the field held an integer before).
fn scaled_prev(prev_bits: u64, k: usize) -> i64 {
    let p = (f64::from_bits(prev_bits) * POW10[k]).round();
    if p.is_finite() && p.abs() <= EXACT_INT { p as i64 } else { 0 }
}

/// Sensor values usually have a fixed decimal resolution (21.37 °C), which XOR compresses
/// poorly; as an integer of hundredths its change from the previous value takes a byte or two.
/// The decimal form is used only when it decodes to exactly the same bits and is shorter.
///
/// `memo` is the decoder's [`ScaledMemo`] of this field, kept alike: the previous value's
/// number of decimals is tried first (a sensor's values keep their resolution), which spares
/// the search from zero decimals up, a multiplication and a `round` each, and the previous
/// value's scaling. Any number of decimals that gives back the same bits decodes alike.
fn put_float(out: &mut Vec<u8>, v: f64, prev_bits: u64, memo: &mut ScaledMemo) {
    let x = v.to_bits() ^ prev_bits;
    let xor_len = if x == 0 { 1 } else { 9 - (x.leading_zeros() / 8 + x.trailing_zeros() / 8) };
    // The scaled value of `v` with `k` decimals, if it gives back `v` exactly.
    // `Err` once the scaled value is too large for this and more decimals.
    let exact = |k: usize| -> Result<Option<i64>, ()> {
        let s = (v * POW10[k]).round();
        // `v` is finite, so `s` is a number or an infinity, never NaN.
        if s.abs() > EXACT_INT {
            return Err(());
        }
        let s = s as i64;
        Ok(((s as f64 / POW10[k]).to_bits() == v.to_bits()).then_some(s))
    };
    // Writes `s` with `k` decimals if that is shorter than the XOR form.
    let decimal = |out: &mut Vec<u8>, memo: &mut ScaledMemo, k: usize, s: i64| {
        let prev = match *memo {
            Some((memo_k, prev)) if memo_k == k => prev,
            _ => scaled_prev(prev_bits, k),
        };
        let delta = zigzag(s.wrapping_sub(prev));
        let varint_len = (64 - delta.leading_zeros()).max(1).div_ceil(7);
        if 1 + varint_len >= xor_len {
            return false;
        }
        out.push(DECIMAL_HEADER | k as u8);
        put_varint(out, delta);
        *memo = (s.unsigned_abs() <= SCALED_MEMO_LIMIT).then_some((k, s));
        true
    };
    let last_k = memo.map(|(k, _)| k);
    if let Some(k) = last_k
        && let Ok(Some(s)) = exact(k)
        && decimal(out, memo, k, s)
    {
        return;
    }
    for k in 0..POW10.len() {
        match exact(k) {
            Err(()) => break,
            Ok(None) => continue,
            Ok(Some(s)) if decimal(out, memo, k, s) => return,
            Ok(Some(_)) => break,
        }
    }
    *memo = None;
    put_xor(out, x);
}

/// The decoder's memory of a field's last decimal float: `(k, s)` when it was `s / 10^k` with
/// `|s| <= SCALED_MEMO_LIMIT`. For such values `scaled_prev(bits, k) == s` (the two roundings
/// between `s` and `s / 10^k * 10^k` are off by at most `|s| * 2^-52 <= 1/4`), so the next
/// value with `k` decimals skips that multiplication and its `round`, a tenth of decoding.
type ScaledMemo = Option<(usize, i64)>;
const SCALED_MEMO_LIMIT: u64 = 1 << 50;

fn get_float(
    c: &mut Cursor<'_>,
    prev_bits: u64,
    memo: &mut ScaledMemo,
) -> Result<u64, EmbeddedError> {
    let h = c.peek()?;
    if h & 0xf0 != DECIMAL_HEADER {
        *memo = None;
        return Ok(prev_bits ^ get_xor(c)?);
    }
    c.u8()?;
    let k = usize::from(h & 0x0f);
    let scale = *POW10.get(k).ok_or_else(|| corrupt("bad decimal float header"))?;
    let prev = match *memo {
        Some((memo_k, s)) if memo_k == k => s,
        _ => scaled_prev(prev_bits, k),
    };
    let s = prev.wrapping_add(unzigzag(c.varint()?));
    *memo = (s.unsigned_abs() <= SCALED_MEMO_LIMIT).then_some((k, s));
    Ok((s as f64 / scale).to_bits())
}

fn put_xor(out: &mut Vec<u8>, x: u64) {
    if x == 0 {
        out.push(0x80);
        return;
    }
    let lz = x.leading_zeros() / 8;
    let tz = x.trailing_zeros() / 8;
    out.push(((lz << 4) | tz) as u8);
    let be = x.to_be_bytes();
    out.extend_from_slice(&be[lz as usize..(8 - tz) as usize]);
}

fn get_xor(c: &mut Cursor<'_>) -> Result<u64, EmbeddedError> {
    let h = c.u8()?;
    let (lz, tz) = (usize::from(h >> 4), usize::from(h & 0x0f));
    if lz + tz > 8 {
        return Err(corrupt("bad float header"));
    }
    let mut be = [0u8; 8];
    be[lz..8 - tz].copy_from_slice(c.bytes(8 - lz - tz)?);
    Ok(u64::from_be_bytes(be))
}

fn chunk_prefix(c: &mut Cursor<'_>, hour: TimestampMs) -> Result<ChunkSummary, EmbeddedError> {
    let version = c.varint()?;
    if version != CHUNK_V1 {
        return Err(EmbeddedError::Corrupt(format!("unknown chunk encoding version {version}")));
    }
    let count = u32::try_from(c.varint()?).map_err(|_| corrupt("chunk count too large"))?;
    let first_off = c.varint()?;
    let last_off = c.varint()?;
    if first_off > last_off || last_off >= crate::model::HOUR_MS as u64 {
        return Err(corrupt("chunk timestamps outside its hour"));
    }
    Ok(ChunkSummary { count, first: hour + first_off as i64, last: hour + last_off as i64 })
}

/// Reads only the chunk's summary.
pub fn chunk_summary(bytes: &[u8], hour: TimestampMs) -> Result<ChunkSummary, EmbeddedError> {
    chunk_prefix(&mut Cursor::new(bytes), hour)
}

/// Decodes every reading of a chunk, in stored order, appending them to `out`.
pub fn decode_chunk(
    bytes: &[u8],
    hour: TimestampMs,
    out: &mut Vec<Reading>,
) -> Result<ChunkSummary, EmbeddedError> {
    let mut c = Cursor::new(bytes);
    let summary = chunk_prefix(&mut c, hour)?;
    let n_names = c.len()?;
    let mut names = Vec::with_capacity(n_names);
    for _ in 0..n_names {
        names.push(FieldName::from(c.string()?));
    }
    let mut prev_bits = vec![0u64; n_names];
    let mut memos: Vec<ScaledMemo> = vec![None; n_names];
    let mut shape: Vec<(usize, u8)> = Vec::new();
    let mut have_shape = false;
    let mut ts = summary.first;
    // Every reading takes at least two bytes, so a corrupt count cannot force a huge reserve.
    out.reserve((summary.count as usize).min(c.remaining() / 2));

    for _ in 0..summary.count {
        let delta = c.varint()?;
        ts = i64::try_from(delta)
            .ok()
            .and_then(|d| ts.checked_add(d))
            .filter(|&t| t <= summary.last)
            .ok_or_else(|| corrupt("chunk timestamp beyond its last"))?;
        let code = c.varint()?;
        if code != 0 {
            // Each field of a shape takes at least two bytes: a corrupt count fails here rather
            // than looping for long.
            if code - 1 > (c.remaining() / 2) as u64 {
                return Err(corrupt("shape longer than the chunk"));
            }
            have_shape = true;
            shape.clear();
            for _ in 0..code - 1 {
                let i = c.varint()? as usize;
                if i >= n_names {
                    return Err(corrupt("field name index out of range"));
                }
                shape.push((i, c.u8()?));
            }
        } else if !have_shape {
            return Err(corrupt("first reading of a chunk repeats a shape"));
        }
        let mut fields = Fields::with_capacity(shape.len());
        for &(i, t) in &shape {
            let prev = &mut prev_bits[i];
            let value = match t {
                T_FLOAT => {
                    *prev = get_float(&mut c, *prev, &mut memos[i])?;
                    FieldValue::Float(f64::from_bits(*prev))
                }
                T_INT => {
                    *prev = prev.wrapping_add(unzigzag(c.varint()?) as u64);
                    memos[i] = None;
                    FieldValue::Int(*prev as i64)
                }
                T_UINT => {
                    *prev = prev.wrapping_add(unzigzag(c.varint()?) as u64);
                    memos[i] = None;
                    FieldValue::UInt(*prev)
                }
                T_BOOL => FieldValue::Bool(c.u8()? != 0),
                T_STR => FieldValue::Str(c.string()?),
                _ => return Err(corrupt("unknown field type")),
            };
            fields.push((names[i].clone(), value));
        }
        out.push(Reading { ts, fields });
    }
    if ts != summary.last {
        return Err(corrupt("chunk's last timestamp does not match its summary"));
    }
    c.finish()?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::HOUR_MS;

    fn roundtrip(hour: i64, readings: &[Reading]) -> Vec<Reading> {
        let refs: Vec<&Reading> = readings.iter().collect();
        let bytes = encode_chunk(hour, &refs);
        let mut out = Vec::new();
        let summary = decode_chunk(&bytes, hour, &mut out).expect("decodes");
        assert_eq!(summary, chunk_summary(&bytes, hour).unwrap());
        assert_eq!(summary.count as usize, readings.len());
        // PartialEq equates 0.0 and -0.0; the encoding must keep every bit.
        for (a, b) in readings.iter().zip(&out) {
            for ((_, x), (_, y)) in a.fields.iter().zip(&b.fields) {
                if let (FieldValue::Float(x), FieldValue::Float(y)) = (x, y) {
                    assert_eq!(x.to_bits(), y.to_bits(), "{x} came back as {y}");
                }
            }
        }
        out
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
        // ts delta (2) + shape (1) + decimal header and one-byte delta (2) per reading.
        assert!(encode_chunk(0, &refs).len() <= 100 * 5 + 20);
    }

    /// What the decoder's memo of the last decimal float relies on.
    #[test]
    fn scaled_prev_of_a_decoded_decimal_is_its_integer() {
        let limit = SCALED_MEMO_LIMIT as i64;
        let mut seed = 0x853c_49e6_748f_ea9b_u64;
        let mut samples: Vec<i64> = vec![0, 1, -1, limit, -limit, limit - 1, 1 << 49, 999_999];
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // Every magnitude up to the limit, not only the large ones.
            samples.push(
                (seed >> (seed % 60 + 4)) as i64 % (limit + 1) * if seed & 1 == 0 { 1 } else { -1 },
            );
        }
        for s in samples {
            for (k, scale) in POW10.iter().enumerate() {
                let bits = (s as f64 / scale).to_bits();
                assert_eq!(scaled_prev(bits, k), s, "s = {s}, k = {k}");
            }
        }
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
        // ts delta (2 bytes) + shape (1) + unchanged float (1) per reading, plus the header.
        assert!(bytes.len() < 100 * 4 + 40, "{} bytes", bytes.len());
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
    }
}

/// Encoding density and decode speed for one day at 1 Hz. Not a test of speed; run with
/// `cargo test --release --lib measure_chunk_encoding -- --ignored --nocapture`.
#[cfg(test)]
mod measure {
    use super::*;
    use crate::model::hour_start;
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
            for per_chunk in [10usize, 600, 1000] {
                let chunks: Vec<(i64, Vec<u8>)> = readings
                    .chunks(per_chunk)
                    .flat_map(|c| {
                        // Chunks never cross an hour.
                        let mut parts: Vec<Vec<&Reading>> = Vec::new();
                        for r in c {
                            match parts.last_mut() {
                                Some(p) if hour_start(p[0].ts) == hour_start(r.ts) => p.push(r),
                                _ => parts.push(vec![r]),
                            }
                        }
                        parts
                    })
                    .map(|p| {
                        let hour = hour_start(p[0].ts);
                        (hour, encode_chunk(hour, &p))
                    })
                    .collect();
                let bytes: usize = chunks.iter().map(|(_, c)| c.len()).sum();
                let t = Instant::now();
                let mut out = Vec::with_capacity(readings.len());
                for (hour, c) in &chunks {
                    decode_chunk(c, *hour, &mut out).unwrap();
                }
                let decode = t.elapsed();
                assert_eq!(out, readings);
                eprintln!(
                    "{fields} float field(s){}, {per_chunk:>4} readings/chunk: {:.2} bytes/reading, decode {:.1} ms/day ({:.0} ns/reading)",
                    if noisy { " full precision" } else { ", 0.01 resolution" },
                    bytes as f64 / readings.len() as f64,
                    decode.as_secs_f64() * 1e3,
                    decode.as_nanos() as f64 / readings.len() as f64,
                );
            }
        }
    }
}
