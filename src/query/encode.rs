//! The writers of the query responses: timestamps, JSON numbers and strings, CSV fields.
//! Timestamps come out as chrono formats them and JSON as serde_json writes it (the tests hold
//! them to that), but straight into the output buffer: chrono and serde_json's float formatting
//! were a large part of a range query's CPU time.

use chrono::{DateTime, SecondsFormat};

use crate::model::{FieldValue, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Reading, TimestampMs};

// ---- timestamps -----------------------------------------------------------------------------

/// RFC 3339, UTC, millisecond precision, `Z` suffix: the one time format of every response.
pub fn format_ts(ts: TimestampMs) -> String {
    let mut out = Vec::with_capacity(24);
    write_ts(&mut out, ts);
    String::from_utf8(out).expect("timestamps are ASCII")
}

/// Appends [`format_ts`]`(ts)` to `buf`.
pub fn write_ts(buf: &mut Vec<u8>, ts: TimestampMs) {
    TsWriter::new().write(buf, ts);
}

const MS_PER_DAY: i64 = 86_400_000;

/// Writes timestamps as [`format_ts`] does, straight into a buffer. A range query formats one
/// per reading, and chrono's formatter plus a `String` each time was a large part of its CPU
/// time; for the accepted years 0000 to 9999 the shape is fixed, so it is filled in directly.
/// The date of the last day seen is kept: a range's readings mostly share their day.
pub struct TsWriter {
    day: i64,
    date: [u8; 11],
}

impl TsWriter {
    pub fn new() -> TsWriter {
        // No timestamp of the accepted range is on this day.
        TsWriter { day: i64::MIN, date: [0; 11] }
    }

    pub fn write(&mut self, buf: &mut Vec<u8>, ts: TimestampMs) {
        if !(MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&ts) {
            // Only a range bound can get here (`to` may be one past the last representable
            // reading): chrono's own rendering, `+10000-...` and the like, is kept for those.
            buf.extend_from_slice(format_ts_chrono(ts).as_bytes());
            return;
        }
        let day = ts.div_euclid(MS_PER_DAY);
        if day != self.day {
            self.day = day;
            self.date = civil_date(day);
        }
        let ms = ts.rem_euclid(MS_PER_DAY) as u32;
        let secs = ms / 1000;
        let mut out = *b"0000-00-00T00:00:00.000Z";
        out[..11].copy_from_slice(&self.date);
        put_two_digits(&mut out, 11, secs / 3600);
        put_two_digits(&mut out, 14, secs / 60 % 60);
        put_two_digits(&mut out, 17, secs % 60);
        out[20] = b'0' + (ms % 1000 / 100) as u8;
        put_two_digits(&mut out, 21, ms % 100);
        buf.extend_from_slice(&out);
    }
}

impl Default for TsWriter {
    fn default() -> Self {
        TsWriter::new()
    }
}

/// `YYYY-MM-DDT` of a day since the epoch, for days of the years 0000 to 9999.
fn civil_date(day: i64) -> [u8; 11] {
    const DAYS_PER_ERA: u32 = 146_097;
    // Howard Hinnant's `civil_from_days`, counting from 0000-03-01 so that the leap day ends
    // its year. One extra 400-year era keeps every accepted day non-negative, so all of it
    // runs on u32 (year 0000 is day -719,528; year 9999 ends before day 2,932,897).
    let z = (day + 719_468 + i64::from(DAYS_PER_ERA)) as u32;
    let era = z / DAYS_PER_ERA;
    let doe = z - era * DAYS_PER_ERA;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day_of_month = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u32::from(month <= 2) - 400;
    let mut out = *b"0000-00-00T";
    put_two_digits(&mut out, 0, year / 100);
    put_two_digits(&mut out, 2, year % 100);
    put_two_digits(&mut out, 5, month);
    put_two_digits(&mut out, 8, day_of_month);
    out
}

fn put_two_digits(out: &mut [u8], at: usize, v: u32) {
    out[at] = b'0' + (v / 10) as u8;
    out[at + 1] = b'0' + (v % 10) as u8;
}

fn format_ts_chrono(ts: TimestampMs) -> String {
    match DateTime::from_timestamp_millis(ts) {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::Millis, true),
        // Unreachable for validated readings; a number is still better than a panic.
        None => ts.to_string(),
    }
}

// ---- JSON -----------------------------------------------------------------------------------

/// Integers stay integers (u64 and i64 exactly, never through f64); floats use the shortest
/// representation that round-trips. Every number is written as serde_json writes it.
pub(super) fn write_json_value(buf: &mut Vec<u8>, v: &FieldValue) {
    match v {
        FieldValue::Float(f) => write_json_f64(buf, *f),
        FieldValue::Int(i) => serde_json::to_writer(&mut *buf, i).expect("writing to a Vec"),
        FieldValue::UInt(u) => serde_json::to_writer(&mut *buf, u).expect("writing to a Vec"),
        FieldValue::Bool(b) => buf.extend_from_slice(if *b { b"true" } else { b"false" }),
        FieldValue::Str(s) => write_json_str(buf, s),
    }
}

/// `{"t": "...", "fields": {...}}`, the shape of one reading in JSON and NDJSON.
pub(super) fn write_json_row(buf: &mut Vec<u8>, ts: &mut TsWriter, r: &Reading) {
    write_json_object(buf, ts, r.ts, r.fields.len(), |buf, i| {
        let (name, value) = &r.fields[i];
        write_json_key(buf, name);
        write_json_value(buf, value);
    });
}

/// [`write_json_row`]'s object for a reading at `t` with `n` fields, `field(buf, i)` writing
/// the `i`th as `"name":value`: for callers that hold the fields elsewhere than in a `Reading`.
pub(super) fn write_json_object(
    buf: &mut Vec<u8>,
    ts: &mut TsWriter,
    t: TimestampMs,
    n: usize,
    mut field: impl FnMut(&mut Vec<u8>, usize),
) {
    buf.extend_from_slice(b"{\"t\":\"");
    ts.write(buf, t);
    buf.extend_from_slice(b"\",\"fields\":{");
    for i in 0..n {
        if i > 0 {
            buf.push(b',');
        }
        field(buf, i);
    }
    buf.extend_from_slice(b"}}");
}

/// An object key and its colon: `"name":`.
pub(super) fn write_json_key(buf: &mut Vec<u8>, name: &str) {
    write_json_str(buf, name);
    buf.push(b':');
}

/// A JSON string, as serde_json writes it. Field names are written once per reading and almost
/// never need escaping, so they skip serde_json's byte-by-byte escaping loop and writer calls.
pub(super) fn write_json_str(buf: &mut Vec<u8>, s: &str) {
    if needs_json_escape(s.as_bytes()) {
        serde_json::to_writer(&mut *buf, s).expect("writing to a Vec");
    } else {
        buf.reserve(s.len() + 2);
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
    }
}

/// Whether `s` holds a byte serde_json escapes: a control character, `"` or `\`. Eight bytes
/// at a time (SWAR); each test below is exact, so there are no false positives.
fn needs_json_escape(s: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Nonzero iff some byte of `w` is below `n` (for n <= 0x80).
    let any_below = |w: u64, n: u8| w.wrapping_sub(ONES * u64::from(n)) & !w & HIGH;
    let any_equal = |w: u64, b: u8| any_below(w ^ (ONES * u64::from(b)), 1);
    let bad = |w: u64| (any_below(w, 0x20) | any_equal(w, b'"') | any_equal(w, b'\\')) != 0;
    let word = |at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    if s.len() < 8 {
        // Padded with a byte that never needs escaping.
        let mut padded = [b'a'; 8];
        padded[..s.len()].copy_from_slice(s);
        return bad(u64::from_le_bytes(padded));
    }
    // Whole words, then the last eight bytes (overlapping the previous word if need be).
    (0..s.len() / 8).any(|i| bad(word(i * 8))) || bad(word(s.len() - 8))
}

/// A float, byte for byte as serde_json writes it (its shortest round-trip form), with a fast
/// path for the fixed-resolution values sensors send (21.37, 1013.25, 40.0), where the general
/// shortest-digits search was a noticeable part of a range query's CPU time.
fn write_json_f64(buf: &mut Vec<u8>, v: f64) {
    match short_decimal(v) {
        Some((s, k)) => write_fixed_point(buf, s, k),
        None => serde_json::to_writer(&mut *buf, &v).expect("writing to a Vec"),
    }
}

/// `10^k` for the decimals [`short_decimal`] tries.
const POW10: [f64; 7] = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6];

/// `(s, k)` such that `s / 10^k`, written with exactly `k` decimals, is the shortest decimal
/// that reads back as `v`; `None` when that is not easily known (the caller falls back to the
/// general algorithm).
///
/// Why it is the shortest: let `k` be the smallest number of decimals for which some integer
/// `s` has `s / 10^k` (correctly rounded) equal to `v`. With `|s| < 2^51`, `ulp(v) < 10^-k`,
/// so no other `k`-decimal number lies within `v`'s rounding interval: the candidate is unique,
/// and any representation with fewer digits would have fewer decimals, contradicting the
/// minimality of `k`. The candidate, if it exists, is `round(v * 10^k)`: the product is off
/// by less than 0.5 at this magnitude. `1e-5 <= |v| < 2^51` is the range serde_json writes
/// without an exponent (it uses one from 1e16 on). `-0.0` never matches (`0 / 1` is `+0.0`).
///
/// The search starts at six decimals, with one division instead of one per decimal tried:
/// `s / 10^k` and `10s / 10^(k+1)` are the same rational number, so they round to the same
/// float, and a candidate with `k < 6` decimals is, times `10^(6-k)`, the unique one with six.
/// Six decimals' candidate with its trailing zeros taken off is then the shortest (which
/// [`write_fixed_point`] does), and if six have none, no fewer have one. Only where six
/// decimals pass `2^51` (`|v|` above about 2.25e9) are fewer decimals tried one by one.
fn short_decimal(v: f64) -> Option<(i64, usize)> {
    // NaN fails this too.
    let plain_notation = v.abs() >= 1e-5 || v.to_bits() == 0;
    if !plain_notation {
        return None;
    }
    const MOST: usize = POW10.len() - 1;
    if let Some(found) = candidate(v, MOST) {
        return found.map(|s| (s, MOST));
    }
    for k in 0..MOST {
        match candidate(v, k) {
            Some(Some(s)) => return Some((s, k)),
            Some(None) => {}
            None => return None,
        }
    }
    None
}

/// `Some(Some(s))` if `s / 10^k` reads back as `v`, `Some(None)` if no `k`-decimal number
/// does, `None` if `v * 10^k` is too large to tell (`2^51` or more).
fn candidate(v: f64, k: usize) -> Option<Option<i64>> {
    const LIMIT: f64 = (1u64 << 51) as f64;
    let scale = POW10[k];
    let x = v * scale;
    if x.abs() >= LIMIT {
        return None;
    }
    // `round` without the libm call: `x - trunc(x)` is exact below 2^51.
    let t = x as i64;
    let frac = x - t as f64;
    let s = t + i64::from(frac >= 0.5) - i64::from(frac <= -0.5);
    Some(((s as f64 / scale).to_bits() == v.to_bits()).then_some(s))
}

/// `"00"` to `"99"`: two digits a division.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// `s / 10^k` without the trailing zeros of its `k` decimals, keeping one (`40.0`).
fn write_fixed_point(buf: &mut Vec<u8>, s: i64, k: usize) {
    let mut u = s.unsigned_abs();
    let mut decimals = k;
    // Sensors' values have a decimal or two: most of six decimals' zeros go in one step.
    if decimals > 4 && u.is_multiple_of(10_000) {
        u /= 10_000;
        decimals -= 4;
    }
    while decimals > 1 && u.is_multiple_of(10) {
        u /= 10;
        decimals -= 1;
    }
    // Up to 16 integer digits (|s| < 2^51), a point, up to 6 decimals, a sign.
    let mut out = [b'0'; 24];
    let mut at = out.len();
    if decimals == 0 {
        // The `0` of `.0` is already there.
        at -= 1;
    }
    while decimals >= 2 {
        put_pair(&mut out, &mut at, u % 100);
        u /= 100;
        decimals -= 2;
    }
    if decimals == 1 {
        at -= 1;
        out[at] = b'0' + (u % 10) as u8;
        u /= 10;
    }
    at -= 1;
    out[at] = b'.';
    while u >= 100 {
        put_pair(&mut out, &mut at, u % 100);
        u /= 100;
    }
    if u >= 10 {
        put_pair(&mut out, &mut at, u);
    } else {
        at -= 1;
        out[at] = b'0' + u as u8;
    }
    if s < 0 {
        at -= 1;
        out[at] = b'-';
    }
    buf.extend_from_slice(&out[at..]);
}

/// Writes the two digits of `pair` (below 100) before `at`.
fn put_pair(out: &mut [u8; 24], at: &mut usize, pair: u64) {
    let i = pair as usize * 2;
    *at -= 2;
    out[*at..*at + 2].copy_from_slice(&DIGIT_PAIRS[i..i + 2]);
}

// ---- CSV ------------------------------------------------------------------------------------

/// RFC 4180: a field holding a comma, quote or line break is quoted, with quotes doubled.
pub(super) fn write_csv_field(buf: &mut Vec<u8>, field: &[u8]) {
    if !field.iter().any(|b| matches!(b, b',' | b'"' | b'\r' | b'\n')) {
        buf.extend(field);
        return;
    }
    buf.push(b'"');
    for &b in field {
        if b == b'"' {
            buf.push(b'"');
        }
        buf.push(b);
    }
    buf.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_rows_keep_types() {
        let mut buf = Vec::new();
        write_json_row(
            &mut buf,
            &mut TsWriter::new(),
            &Reading {
                ts: 1500,
                fields: smallvec::smallvec![
                    ("f".into(), FieldValue::Float(1.0)),
                    ("i".into(), FieldValue::Int(i64::MIN)),
                    ("u".into(), FieldValue::UInt(u64::MAX)),
                    ("b".into(), FieldValue::Bool(true)),
                    ("s".into(), FieldValue::Str("a\"b\n".into())),
                ],
            },
        );
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            r#"{"t":"1970-01-01T00:00:01.500Z","fields":{"f":1.0,"i":-9223372036854775808,"u":18446744073709551615,"b":true,"s":"a\"b\n"}}"#
        );
    }

    #[test]
    fn timestamps_format_with_millis_and_z() {
        assert_eq!(format_ts(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ts(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_ts(MIN_TIMESTAMP_MS), "0000-01-01T00:00:00.000Z");
        assert_eq!(format_ts(MAX_TIMESTAMP_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(format_ts(MAX_TIMESTAMP_MS + 1), "+10000-01-01T00:00:00.000Z");
    }

    /// `write_ts` must render exactly what chrono does, the formatter it replaced.
    fn assert_same_as_chrono(ts: TimestampMs) {
        let mut fast = Vec::new();
        write_ts(&mut fast, ts);
        assert_eq!(String::from_utf8(fast).unwrap(), format_ts_chrono(ts), "ts = {ts}");
    }

    #[test]
    fn timestamps_format_as_chrono_does_at_the_edges() {
        const DAY: i64 = 86_400_000;
        let edges = [
            MIN_TIMESTAMP_MS,
            MAX_TIMESTAMP_MS,
            0,
            -1,
            1,
            999,
            1000,
            -999,
            -1000,
            -1001,
            DAY - 1,
            DAY,
            -DAY,
            -DAY - 1,
            -DAY + 1,
            951_782_400_000,     // 2000-02-29
            -2_203_891_200_000,  // 1900-03-01, after a century without a leap day
            4_107_542_400_000,   // 2100-03-01
            -62_162_035_200_000, // 0000-03-01
            -62_162_121_600_000, // 0000-02-29: year 0 is a leap year
            -62_135_596_800_000, // 0001-01-01
            253_402_214_400_000, // 9999-12-31
        ];
        for ts in edges {
            for d in [-DAY, -1001, -1, 0, 1, 999, DAY] {
                let ts = ts + d;
                if (MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&ts) {
                    assert_same_as_chrono(ts);
                }
            }
        }
        // Outside the accepted years chrono renders them, or a bare number where it cannot.
        for ts in [MIN_TIMESTAMP_MS - 1, MAX_TIMESTAMP_MS + 1, i64::MIN, i64::MAX] {
            assert_same_as_chrono(ts);
        }
    }

    #[test]
    fn timestamps_format_as_chrono_does_on_every_day() {
        // Every day from 0000-01-01 to 9999-12-31, each at a pseudo-random time of day.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut day_start = MIN_TIMESTAMP_MS;
        while day_start <= MAX_TIMESTAMP_MS {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            assert_same_as_chrono(day_start + (seed >> 33) as i64 % 86_400_000);
            day_start += 86_400_000;
        }
    }

    #[test]
    fn one_writer_formats_a_sequence_as_chrono_does() {
        // Mostly within a day, sometimes jumping across days and back, as a page never does.
        let mut w = TsWriter::new();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut ts = 1_700_000_000_000i64;
        let mut out = Vec::new();
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ts = match seed % 100 {
                0 => (seed >> 8) as i64 % (MAX_TIMESTAMP_MS - MIN_TIMESTAMP_MS) + MIN_TIMESTAMP_MS,
                1 => ts - 86_400_000,
                _ => (ts + (seed >> 40) as i64 % 5_000).min(MAX_TIMESTAMP_MS),
            };
            out.clear();
            w.write(&mut out, ts);
            assert_eq!(std::str::from_utf8(&out).unwrap(), format_ts_chrono(ts), "ts = {ts}");
        }
    }

    proptest::proptest! {
        #[test]
        fn timestamps_format_as_chrono_does(ts in MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS) {
            assert_same_as_chrono(ts);
        }

        #[test]
        fn timestamps_near_the_epoch_format_as_chrono_does(ts in -10_000_000_000_000i64..10_000_000_000_000) {
            assert_same_as_chrono(ts);
        }
    }

    /// The float writer must produce what serde_json, the writer it replaced, produces.
    fn assert_float_as_serde(v: f64) {
        let mut fast = Vec::new();
        write_json_f64(&mut fast, v);
        assert_eq!(
            String::from_utf8(fast).unwrap(),
            serde_json::to_string(&v).unwrap(),
            "{v:e} ({:#x})",
            v.to_bits()
        );
    }

    #[test]
    fn floats_are_written_as_serde_json_writes_them() {
        let mut specials = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            0.1,
            0.1 + 0.2,
            21.37,
            -21.37,
            1013.25,
            0.000123,
            1e-5,
            -1e-5,
            9.99999e-6,
            1.5e-5,
            1e-6,
            0.000001,
            1e15,
            1e16,
            1e17,
            1e22,
            123456789012345.6,
            f64::MIN_POSITIVE,
            5e-324,
            f64::MAX,
            f64::MIN,
            f64::EPSILON,
            (1u64 << 51) as f64,
            (1u64 << 51) as f64 - 1.0,
            (1u64 << 51) as f64 / 1e6,
            (1u64 << 53) as f64,
            2251799813685247.5,
            0.3,
            2.675,
            1.005,
            4.35,
            100.0,
            100000.0,
        ];
        for e in -30..=30 {
            let p = 10f64.powi(e);
            specials.extend([
                p,
                -p,
                f64::from_bits(p.to_bits() + 1),
                f64::from_bits(p.to_bits() - 1),
            ]);
        }
        for v in specials {
            assert_float_as_serde(v);
        }
        // Fixed-resolution values of every magnitude, and their neighbours.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..300_000 {
            let r = next();
            let digits = 1 + r % 17;
            let s = (next() % 10u64.pow(digits as u32)) as f64;
            let k = (r >> 8) % 9;
            let v = s / 10f64.powi(k as i32) * if r & (1 << 20) == 0 { 1.0 } else { -1.0 };
            assert_float_as_serde(v);
            assert_float_as_serde(f64::from_bits(v.to_bits().wrapping_add(1)));
            assert_float_as_serde(f64::from_bits(v.to_bits().wrapping_sub(1)));
            let any = f64::from_bits(next());
            if any.is_finite() {
                assert_float_as_serde(any);
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_float_is_written_as_serde_json_writes_it(v in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO) {
            assert_float_as_serde(v);
        }

        #[test]
        fn decimals_are_written_as_serde_json_writes_them(s in -10_000_000_000i64..10_000_000_000, k in 0..8i32) {
            assert_float_as_serde(s as f64 / 10f64.powi(k));
        }

        #[test]
        fn strings_are_written_as_serde_json_writes_them(s in "\\PC*|[\\x00-\\x7f]*") {
            let mut fast = Vec::new();
            write_json_str(&mut fast, &s);
            proptest::prop_assert_eq!(String::from_utf8(fast).unwrap(), serde_json::to_string(&s).unwrap());
        }
    }

    #[test]
    fn every_escaped_byte_is_found_at_every_position() {
        for len in 0..20 {
            let plain = vec![b'x'; len];
            assert!(!needs_json_escape(&plain));
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut s = plain.clone();
                    s[at] = b;
                    let want = b < 0x20 || b == b'"' || b == b'\\';
                    assert_eq!(needs_json_escape(&s), want, "byte {b:#x} at {at} of {len}");
                }
            }
        }
    }

    #[test]
    fn integers_are_written_as_before() {
        for (v, want) in [
            (FieldValue::Int(i64::MIN), "-9223372036854775808"),
            (FieldValue::Int(-1), "-1"),
            (FieldValue::Int(0), "0"),
            (FieldValue::UInt(u64::MAX), "18446744073709551615"),
            (FieldValue::Str("a\u{7f}\u{1f}\"\\é".into()), "\"a\u{7f}\\u001f\\\"\\\\é\""),
        ] {
            let mut buf = Vec::new();
            write_json_value(&mut buf, &v);
            assert_eq!(String::from_utf8(buf).unwrap(), want);
        }
    }

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        let mut buf = Vec::new();
        for f in ["plain", "a,b", "say \"hi\"", "two\nlines", ""] {
            write_csv_field(&mut buf, f.as_bytes());
            buf.push(b'|');
        }
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "plain|\"a,b\"|\"say \"\"hi\"\"\"|\"two\nlines\"||"
        );
    }
}
