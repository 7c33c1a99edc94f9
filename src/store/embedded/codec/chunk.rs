//! Chunks of readings (values of the chunk tables): the format the module doc describes.

use std::collections::HashMap;

use super::chunk_v1::{CHUNK_V1, decode_v1};
use super::corrupt;
use super::float::{DECIMAL_HEADER, POW10, ScaledMemo, get_float, put_float, scaled, unscaled};
use crate::model::{Columns, FieldName, FieldValue, Reading, ReadingView, TimestampMs, ValueRef};
use crate::store::embedded::EmbeddedError;
use crate::wire::{Cursor, put_str, put_varint, unzigzag, zigzag};

pub(super) const CHUNK_V2: u64 = 2;

/// The most readings a chunk may hold: a chunk never holds more than one bucket's readings.
/// A damaged count beyond it is refused before the decoder allocates for it (a version-2
/// chunk's readings can take less than a byte each).
const MAX_CHUNK_READINGS: u32 = crate::store::BucketLimits::MAX_READINGS_CEILING;

pub(super) const T_FLOAT: u8 = 0;
pub(super) const T_INT: u8 = 1;
pub(super) const T_UINT: u8 = 2;
pub(super) const T_BOOL: u8 = 3;
pub(super) const T_STR: u8 = 4;

/// A float column's mode byte when its values are written one by one, each decimal or XOR-ed
/// (as in version 1). `DECIMAL_HEADER | k` says that every value has `k` decimals.
const FLOATS_EACH: u8 = 0;

/// What a chunk's first bytes say, readable without decoding the readings, so that a range scan
/// can skip chunks outside the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSummary {
    pub count: u32,
    pub first: TimestampMs,
    pub last: TimestampMs,
}

pub(super) fn type_of(v: ValueRef<'_>) -> u8 {
    match v {
        ValueRef::Float(_) => T_FLOAT,
        ValueRef::Int(_) => T_INT,
        ValueRef::UInt(_) => T_UINT,
        ValueRef::Bool(_) => T_BOOL,
        ValueRef::Str(_) => T_STR,
    }
}

/// The values of one column (one field name with one type), in reading order. Floats are
/// gathered and written at the end, because a float column's form depends on all of them;
/// the others are written as they come.
enum Column {
    Float(Vec<f64>),
    /// Signed or unsigned: the column's type says which; both are wrapping deltas.
    Int {
        out: Vec<u8>,
        prev: u64,
    },
    Bool {
        bits: Vec<u8>,
        n: usize,
    },
    Str(Vec<u8>),
}

impl Column {
    fn new(t: u8) -> Column {
        match t {
            T_FLOAT => Column::Float(Vec::new()),
            T_BOOL => Column::Bool { bits: Vec::new(), n: 0 },
            T_STR => Column::Str(Vec::new()),
            _ => Column::Int { out: Vec::new(), prev: 0 },
        }
    }

    fn push(&mut self, v: ValueRef<'_>) {
        match (self, v) {
            (Column::Float(values), ValueRef::Float(f)) => values.push(f),
            (Column::Int { out, prev }, ValueRef::Int(i)) => put_delta(out, prev, i as u64),
            (Column::Int { out, prev }, ValueRef::UInt(u)) => put_delta(out, prev, u),
            (Column::Bool { bits, n }, ValueRef::Bool(b)) => {
                if *n % 8 == 0 {
                    bits.push(0);
                }
                if b {
                    *bits.last_mut().expect("pushed above") |= 1 << (*n % 8);
                }
                *n += 1;
            }
            (Column::Str(out), ValueRef::Str(s)) => put_str(out, s),
            _ => unreachable!("a column holds values of its own type"),
        }
    }

    fn write(self, out: &mut Vec<u8>) {
        match self {
            Column::Float(values) => put_floats(out, &values),
            Column::Int { out: bytes, .. } | Column::Str(bytes) => out.extend_from_slice(&bytes),
            Column::Bool { bits, .. } => out.extend_from_slice(&bits),
        }
    }
}

/// Integers as zigzag varints of their wrapping difference from the previous one.
fn put_delta(out: &mut Vec<u8>, prev: &mut u64, v: u64) {
    put_varint(out, zigzag(v.wrapping_sub(*prev) as i64));
    *prev = v;
}

/// The fewest decimals `k` with which every value of a column is exact, and the values scaled.
fn decimal_column(values: &[f64]) -> Option<(usize, Vec<i64>)> {
    let mut k = 0;
    let mut out = Vec::with_capacity(values.len());
    let mut i = 0;
    while let Some(&v) = values.get(i) {
        match scaled(v, k) {
            Ok(Some(s)) => {
                out.push(s);
                i += 1;
            }
            // More decimals: start the column again (at most six times).
            Ok(None) if k + 1 < POW10.len() => {
                k += 1;
                out.clear();
                i = 0;
            }
            _ => return None,
        }
    }
    Some((k, out))
}

/// A float column: when every value has at most six decimals, one mode byte and the varint
/// deltas of the scaled integers (a sensor's slow change: a byte a value); else each value as
/// version 1 writes it, with its own header byte.
fn put_floats(out: &mut Vec<u8>, values: &[f64]) {
    if values.is_empty() {
        return;
    }
    if let Some((k, scaled)) = decimal_column(values) {
        out.push(DECIMAL_HEADER | k as u8);
        let mut prev = 0i64;
        for s in scaled {
            put_varint(out, zigzag(s.wrapping_sub(prev)));
            prev = s;
        }
        return;
    }
    out.push(FLOATS_EACH);
    let mut prev_bits = 0u64;
    let mut memo: ScaledMemo = None;
    for &v in values {
        put_float(out, v, prev_bits, &mut memo);
        prev_bits = v.to_bits();
    }
}

/// Timestamps after the first as deltas of their deltas, zigzag-coded, in runs: a token
/// `zz << 1` is one delta, `zz << 1 | 1` is followed by a varint `n`, for `n + 2` deltas of that
/// same change. A sensor reporting on a fixed period costs a few bytes a chunk; jitter of up to
/// ±31 ms a byte a reading.
fn put_timestamps(out: &mut Vec<u8>, ts: impl Iterator<Item = TimestampMs>) {
    fn put_run(out: &mut Vec<u8>, (zz, n): (u64, u64)) {
        if n == 1 {
            put_varint(out, zz << 1);
        } else {
            put_varint(out, zz << 1 | 1);
            put_varint(out, n - 2);
        }
    }
    let mut ts = ts;
    let Some(mut prev_ts) = ts.next() else { return };
    let mut prev_delta = 0i64;
    let mut run: Option<(u64, u64)> = None;
    for t in ts {
        let delta = t - prev_ts;
        let zz = zigzag(delta - prev_delta);
        (prev_ts, prev_delta) = (t, delta);
        match &mut run {
            Some((z, n)) if *z == zz => *n += 1,
            _ => {
                if let Some(r) = run.replace((zz, 1)) {
                    put_run(out, r);
                }
            }
        }
    }
    if let Some(r) = run {
        put_run(out, r);
    }
}

/// Encodes readings that all lie in `hour` and are sorted by timestamp: [`Reading`]s, or a
/// buffer's rows read in place (the same bytes for the same readings).
pub fn encode_chunk<R: ReadingView>(hour: TimestampMs, readings: &[R]) -> Vec<u8> {
    debug_assert!(readings.windows(2).all(|w| w[0].ts() <= w[1].ts()));
    debug_assert!(readings.iter().all(|r| r.ts() >= hour && r.ts() - hour < crate::model::HOUR_MS));
    debug_assert!(readings.len() <= MAX_CHUNK_READINGS as usize);
    let (first, last) = match (readings.first(), readings.last()) {
        (Some(f), Some(l)) => (f.ts(), l.ts()),
        _ => (hour, hour),
    };

    let mut columns: Vec<(&str, u8)> = Vec::new();
    let mut column_of: HashMap<(&str, u8), u32> = HashMap::new();
    let mut values: Vec<Column> = Vec::new();
    let mut shapes: Vec<Vec<u32>> = Vec::new();
    let mut shape_of: HashMap<Vec<u32>, u32> = HashMap::new();
    let mut shape_ids: Vec<u32> = Vec::with_capacity(readings.len());
    let mut shape = Vec::new();
    // The previous reading, whose shape is `shapes[current]`.
    let mut prev: Option<&R> = None;
    let mut current = 0u32;
    for r in readings {
        let same = prev.is_some_and(|p| {
            r.same_shape(p).unwrap_or_else(|| {
                let known = &shapes[current as usize];
                let mut n = 0;
                let alike = r.fields().all(|(name, value)| {
                    let at = known.get(n);
                    n += 1;
                    at.is_some_and(|&c| columns[c as usize] == (name, type_of(value)))
                });
                alike && n == known.len()
            })
        });
        prev = Some(r);
        if !same {
            shape.clear();
            for (name, value) in r.fields() {
                let key = (name, type_of(value));
                shape.push(*column_of.entry(key).or_insert_with(|| {
                    columns.push(key);
                    values.push(Column::new(key.1));
                    (columns.len() - 1) as u32
                }));
            }
            current = match shape_of.get(&shape) {
                Some(&id) => id,
                None => {
                    shapes.push(shape.clone());
                    shape_of.insert(shape.clone(), (shapes.len() - 1) as u32);
                    (shapes.len() - 1) as u32
                }
            };
        }
        shape_ids.push(current);
        for ((_, value), &c) in r.fields().zip(&shapes[current as usize]) {
            values[c as usize].push(value);
        }
    }

    let mut out = Vec::with_capacity(32 + readings.len() * 4);
    put_varint(&mut out, CHUNK_V2);
    put_varint(&mut out, readings.len() as u64);
    put_varint(&mut out, (first - hour) as u64);
    put_varint(&mut out, (last - hour) as u64);
    put_varint(&mut out, columns.len() as u64);
    for (name, t) in &columns {
        put_str(&mut out, name);
        out.push(*t);
    }
    put_varint(&mut out, shapes.len() as u64);
    for shape in &shapes {
        put_varint(&mut out, shape.len() as u64);
        for &c in shape {
            put_varint(&mut out, u64::from(c));
        }
    }
    if shapes.len() > 1 {
        for &id in &shape_ids {
            put_varint(&mut out, u64::from(id));
        }
    }
    put_timestamps(&mut out, readings.iter().map(R::ts));
    for column in values {
        column.write(&mut out);
    }
    out
}

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

fn decode_v2(c: &mut Cursor<'_>, summary: ChunkSummary) -> Result<Columns, EmbeddedError> {
    let count = summary.count as usize;
    let n_columns = c.len()?;
    let mut names = Vec::with_capacity(n_columns);
    let mut types = Vec::with_capacity(n_columns);
    for _ in 0..n_columns {
        // Interned: every reading made from a chunk copies its names, and a counted name made
        // each copy and each drop an atomic operation.
        names.push(FieldName::interned(c.str()?));
        let t = c.u8()?;
        if t > T_STR {
            return Err(corrupt("unknown field type"));
        }
        types.push(t);
    }
    let n_shapes = c.len()?;
    if (n_shapes == 0) != (count == 0) {
        return Err(corrupt("a chunk's readings have no shape"));
    }
    let mut shapes = Vec::with_capacity(n_shapes);
    for _ in 0..n_shapes {
        let n = c.len()?;
        let mut shape = Vec::with_capacity(n);
        for _ in 0..n {
            let i = usize::try_from(c.varint()?).unwrap_or(usize::MAX);
            if i >= n_columns {
                return Err(corrupt("field column out of range"));
            }
            shape.push(i);
        }
        shapes.push(shape);
    }
    let mut shape_ids = Vec::new();
    if n_shapes > 1 {
        if count > c.remaining() {
            return Err(corrupt("chunk shorter than its readings' shapes"));
        }
        shape_ids.reserve(count);
        for _ in 0..count {
            let id = usize::try_from(c.varint()?).unwrap_or(usize::MAX);
            if id >= n_shapes {
                return Err(corrupt("reading shape out of range"));
            }
            shape_ids.push(id);
        }
    }
    let ts = get_timestamps(c, summary)?;

    // How many values each column holds, so that each is read to its end before the next.
    let mut of_shape = vec![0usize; n_shapes];
    if n_shapes == 1 {
        of_shape[0] = count;
    }
    for &id in &shape_ids {
        of_shape[id] += 1;
    }
    let mut lengths = vec![0usize; n_columns];
    for (shape, n) in shapes.iter().zip(&of_shape) {
        for &col in shape {
            lengths[col] += n;
        }
    }
    let mut values = Vec::with_capacity(n_columns);
    for (&t, &n) in types.iter().zip(&lengths) {
        values.push(get_column(c, t, n)?);
    }
    c.finish()?;
    Columns::new(ts, names, shapes, shape_ids, values).map_err(|m| corrupt(m.0))
}

/// Every reading's timestamp, checked to rise within the summary's first and last.
fn get_timestamps(
    c: &mut Cursor<'_>,
    summary: ChunkSummary,
) -> Result<Vec<TimestampMs>, EmbeddedError> {
    let mut ts = Vec::new();
    fill_timestamps(c, summary, &mut ts)?;
    Ok(ts)
}

/// [`get_timestamps`] into `ts`, which is cleared first.
pub(super) fn fill_timestamps(
    c: &mut Cursor<'_>,
    summary: ChunkSummary,
    ts: &mut Vec<TimestampMs>,
) -> Result<(), EmbeddedError> {
    let count = summary.count as usize;
    ts.clear();
    ts.reserve(count);
    if count == 0 {
        return Ok(());
    }
    ts.push(summary.first);
    let (mut prev_ts, mut prev_delta) = (summary.first, 0i64);
    while ts.len() < count {
        let token = c.varint()?;
        let n = if token & 1 == 0 { 1 } else { c.varint()?.saturating_add(2) };
        if n > (count - ts.len()) as u64 {
            return Err(corrupt("chunk has more timestamps than readings"));
        }
        let change = unzigzag(token >> 1);
        if change == 0 {
            // A fixed period, the common run: checked once at its end, not per reading.
            let end = i64::try_from(n)
                .ok()
                .and_then(|n| prev_delta.checked_mul(n))
                .and_then(|span| prev_ts.checked_add(span))
                .filter(|&t| t <= summary.last)
                .ok_or_else(|| corrupt("chunk timestamp beyond its last"))?;
            let (start, delta) = (prev_ts, prev_delta);
            ts.extend((1..=n as i64).map(|k| start + k * delta));
            prev_ts = end;
            continue;
        }
        for _ in 0..n {
            prev_delta = prev_delta
                .checked_add(change)
                .filter(|&d| d >= 0)
                .ok_or_else(|| corrupt("chunk timestamps out of order"))?;
            prev_ts = prev_ts
                .checked_add(prev_delta)
                .filter(|&t| t <= summary.last)
                .ok_or_else(|| corrupt("chunk timestamp beyond its last"))?;
            ts.push(prev_ts);
        }
    }
    if prev_ts != summary.last {
        return Err(corrupt("chunk's last timestamp does not match its summary"));
    }
    Ok(())
}

/// A float column's `n` values (its mode byte first), each handed to `each`.
pub(super) fn get_floats(
    c: &mut Cursor<'_>,
    n: usize,
    mut each: impl FnMut(f64),
) -> Result<(), EmbeddedError> {
    let mode = c.u8()?;
    if mode == FLOATS_EACH {
        let (mut prev_bits, mut memo) = (0u64, None);
        for _ in 0..n {
            prev_bits = get_float(c, prev_bits, &mut memo)?;
            each(f64::from_bits(prev_bits));
        }
    } else {
        let k = usize::from(mode & 0x0f);
        if mode & 0xf0 != DECIMAL_HEADER || k >= POW10.len() {
            return Err(corrupt("bad float column mode"));
        }
        let mut s = 0i64;
        for _ in 0..n {
            s = s.wrapping_add(unzigzag(c.varint()?));
            each(unscaled(s, k));
        }
    }
    Ok(())
}

/// An integer column's `n` values, as their unsigned bits, each handed to `each`.
pub(super) fn get_integers(
    c: &mut Cursor<'_>,
    n: usize,
    mut each: impl FnMut(u64),
) -> Result<(), EmbeddedError> {
    let mut prev = 0u64;
    for _ in 0..n {
        prev = prev.wrapping_add(unzigzag(c.varint()?) as u64);
        each(prev);
    }
    Ok(())
}

/// A column's `n` values.
fn get_column(c: &mut Cursor<'_>, t: u8, n: usize) -> Result<Vec<FieldValue>, EmbeddedError> {
    // Every value takes a byte at least, a bool an eighth.
    let least = if t == T_BOOL { n.div_ceil(8) } else { n };
    if least > c.remaining() {
        return Err(corrupt("chunk shorter than its columns"));
    }
    let mut values = Vec::with_capacity(n);
    match t {
        T_FLOAT if n > 0 => get_floats(c, n, |v| values.push(FieldValue::Float(v)))?,
        T_FLOAT => {}
        T_INT | T_UINT => get_integers(c, n, |prev| {
            values.push(if t == T_INT {
                FieldValue::Int(prev as i64)
            } else {
                FieldValue::UInt(prev)
            })
        })?,
        T_BOOL => {
            let bits = c.bytes(n.div_ceil(8))?;
            values.extend((0..n).map(|i| FieldValue::Bool(bits[i / 8] >> (i % 8) & 1 != 0)));
        }
        _ => {
            for _ in 0..n {
                values.push(FieldValue::Str(c.string()?));
            }
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::HOUR_MS;

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
