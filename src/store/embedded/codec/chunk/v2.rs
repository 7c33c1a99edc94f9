//! Chunks of version 2, the one written: columns, timestamps as deltas of deltas, decimal
//! floats as scaled integers.

use std::collections::HashMap;

use super::format::{
    CHUNK_V2, ChunkSummary, MAX_CHUNK_READINGS, T_BOOL, T_FLOAT, T_INT, T_STR, T_UINT, type_of,
};
use crate::model::{Columns, FieldName, FieldValue, ReadingView, TimestampMs, ValueRef};
use crate::store::embedded::EmbeddedError;
use crate::store::embedded::codec::corrupt;
use crate::store::embedded::codec::float::{
    DECIMAL_HEADER, POW10, ScaledMemo, get_float, put_float, scaled, unscaled,
};
use crate::wire::{Cursor, put_str, put_varint, unzigzag, varint_len, zigzag};

/// A float column's mode byte when its values are written one by one, each decimal or XOR-ed
/// (as in version 1). `DECIMAL_HEADER | k` says that every value has `k` decimals, each a
/// varint delta of the scaled integers; `DECIMAL_RUNS | k` the same deltas in runs
/// ([`put_runs`]), for a value that holds still or moves by a fixed step.
const FLOATS_EACH: u8 = 0;
const DECIMAL_RUNS: u8 = 0xe0;

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
/// deltas of the scaled integers (a sensor's slow change: a byte a value), one by one or in
/// runs, whichever is shorter; else each value as version 1 writes it, with its own header
/// byte.
fn put_floats(out: &mut Vec<u8>, values: &[f64]) {
    if values.is_empty() {
        return;
    }
    if let Some((k, scaled)) = decimal_column(values) {
        let deltas = || {
            let mut prev = 0i64;
            scaled.iter().map(move |&s| zigzag(s.wrapping_sub(std::mem::replace(&mut prev, s))))
        };
        // Both forms' lengths from one pass: a run of `n` equal deltas is `n` varints.
        let (mut one_by_one, mut in_runs) = (0, 0);
        for_runs(deltas(), |(zz, n)| {
            one_by_one += n as usize * varint_len(zz);
            in_runs += run_len((zz, n));
        });
        if in_runs < one_by_one {
            out.push(DECIMAL_RUNS | k as u8);
            put_runs(out, deltas());
        } else {
            out.push(DECIMAL_HEADER | k as u8);
            deltas().for_each(|zz| put_varint(out, zz));
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

/// Hands `each` the runs of equal numbers in `zz`, as (number, how many).
fn for_runs(zz: impl Iterator<Item = u64>, mut each: impl FnMut((u64, u64))) {
    let mut run: Option<(u64, u64)> = None;
    for z in zz {
        match &mut run {
            Some((r, n)) if *r == z => *n += 1,
            _ => {
                if let Some(r) = run.replace((z, 1)) {
                    each(r);
                }
            }
        }
    }
    if let Some(r) = run {
        each(r);
    }
}

/// Bytes [`put_runs`] writes for one run.
fn run_len((zz, n): (u64, u64)) -> usize {
    if n == 1 { varint_len(zz << 1) } else { varint_len(zz << 1 | 1) + varint_len(n - 2) }
}

/// Zigzag-coded numbers in runs: a token `zz << 1` is one number, `zz << 1 | 1` is followed by
/// a varint `n`, for `n + 2` of that same number. Read back by [`get_run`].
fn put_runs(out: &mut Vec<u8>, zz: impl Iterator<Item = u64>) {
    for_runs(zz, |(zz, n)| {
        if n == 1 {
            put_varint(out, zz << 1);
        } else {
            put_varint(out, zz << 1 | 1);
            put_varint(out, n - 2);
        }
    });
}

/// One run of [`put_runs`]: the number, unzigzagged, and how many times it repeats, at most
/// `left`.
#[inline]
fn get_run(c: &mut Cursor<'_>, left: usize) -> Result<(i64, usize), EmbeddedError> {
    let token = c.varint()?;
    let n = if token & 1 == 0 { 1 } else { c.varint()?.saturating_add(2) };
    if n > left as u64 {
        return Err(corrupt("chunk column longer than its readings"));
    }
    Ok((unzigzag(token >> 1), n as usize))
}

/// Timestamps after the first as deltas of their deltas, zigzag-coded, in runs
/// ([`put_runs`]). A sensor reporting on a fixed period costs a few bytes a chunk; jitter of up
/// to ±31 ms a byte a reading.
fn put_timestamps(out: &mut Vec<u8>, ts: impl Iterator<Item = TimestampMs>) {
    let mut ts = ts;
    let Some(mut prev_ts) = ts.next() else { return };
    let mut prev_delta = 0i64;
    put_runs(
        out,
        ts.map(|t| {
            let delta = t - prev_ts;
            let zz = zigzag(delta - prev_delta);
            (prev_ts, prev_delta) = (t, delta);
            zz
        }),
    );
}

/// Encodes readings that all lie in `hour` and are sorted by timestamp: [`Reading`](crate::model::Reading)s, or a
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

/// What a version-2 chunk holds before its timestamps: its columns, its shapes, and each
/// reading's shape (empty when there is one shape).
struct Layout<'a> {
    names: Vec<&'a str>,
    types: Vec<u8>,
    shapes: Vec<Vec<usize>>,
    shape_ids: Vec<usize>,
}

fn get_layout<'a>(c: &mut Cursor<'a>, count: usize) -> Result<Layout<'a>, EmbeddedError> {
    let n_columns = c.len()?;
    let mut names = Vec::with_capacity(n_columns);
    let mut types = Vec::with_capacity(n_columns);
    for _ in 0..n_columns {
        names.push(c.str()?);
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
    Ok(Layout { names, types, shapes, shape_ids })
}

/// Only the timestamps of a version-2 chunk, into `ts`: its field columns are not read.
pub(super) fn timestamps_v2(
    c: &mut Cursor<'_>,
    summary: ChunkSummary,
    ts: &mut Vec<TimestampMs>,
) -> Result<(), EmbeddedError> {
    get_layout(c, summary.count as usize)?;
    fill_timestamps(c, summary, ts)
}

pub(super) fn decode_v2(
    c: &mut Cursor<'_>,
    summary: ChunkSummary,
) -> Result<Columns, EmbeddedError> {
    let count = summary.count as usize;
    let Layout { names, types, shapes, shape_ids } = get_layout(c, count)?;
    let (n_columns, n_shapes) = (names.len(), shapes.len());
    // Interned: every reading made from a chunk copies its names, and a counted name made
    // each copy and each drop an atomic operation.
    let names: Vec<FieldName> = names.into_iter().map(FieldName::interned).collect();
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
pub(in crate::store::embedded::codec) fn fill_timestamps(
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
        let (change, n) = get_run(c, count - ts.len())?;
        if change == 0 {
            // A fixed period, the common run: checked once at its end, not per reading.
            let end = i64::try_from(n)
                .ok()
                .and_then(|n| prev_delta.checked_mul(n))
                .and_then(|span| prev_ts.checked_add(span))
                .filter(|&t| t <= summary.last)
                .ok_or_else(|| corrupt("chunk timestamp beyond its last"))?;
            // Added up rather than `start + k * delta`: without a 64-bit vector multiply, the
            // product took several instructions a timestamp. None passes `end`, checked above.
            let (mut t, delta) = (prev_ts, prev_delta);
            ts.extend((0..n).map(|_| {
                t += delta;
                t
            }));
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

/// A float column's `n` values (its mode byte first) into `out[..n]`; `out` grows to hold
/// them, and is not cleared first where it holds more. The decimal forms write into the slice
/// where [`get_floats`] hands each value on: a push's length kept in memory across the run
/// decoder's calls was the longer part of a value's decode.
pub(in crate::store::embedded::codec) fn get_floats_into(
    c: &mut Cursor<'_>,
    n: usize,
    out: &mut Vec<f64>,
) -> Result<(), EmbeddedError> {
    let Some((mode, k)) = decimal_mode(c)? else {
        out.clear();
        out.reserve(n);
        return get_floats(c, n, |v| out.push(v));
    };
    if out.len() < n {
        out.resize(n, 0.0);
    }
    get_decimals(c, mode, &mut out[..n], |s| unscaled(s, k))
}

/// A float column's `n` values as integers of `10^-k` (its mode byte first) into `out[..n]`
/// (grown to hold them), and the power of ten that divides them: `None`, with nothing read,
/// when the column is not in a decimal form.
pub(in crate::store::embedded::codec) fn get_scaled_into(
    c: &mut Cursor<'_>,
    n: usize,
    out: &mut Vec<i64>,
) -> Result<Option<f64>, EmbeddedError> {
    let Some((mode, k)) = decimal_mode(c)? else { return Ok(None) };
    if out.len() < n {
        out.resize(n, 0);
    }
    get_decimals(c, mode, &mut out[..n], |s| s)?;
    Ok(Some(POW10[k]))
}

/// The mode of the float column at `c` and its number of decimals, read, when it is one of
/// the decimal forms; `None`, with nothing read, otherwise.
fn decimal_mode(c: &mut Cursor<'_>) -> Result<Option<(u8, usize)>, EmbeddedError> {
    let mode = c.peek()?;
    let k = usize::from(mode & 0x0f);
    if mode == FLOATS_EACH
        || k >= POW10.len()
        || !matches!(mode & 0xf0, DECIMAL_HEADER | DECIMAL_RUNS)
    {
        return Ok(None);
    }
    c.u8()?;
    Ok(Some((mode, k)))
}

/// A decimal float column's integers after its mode byte, each made into `out`'s values by
/// `make`, one a slot. Most changes are a byte, a value each: those are read straight from
/// the bytes, the others through the cursor.
fn get_decimals<T>(
    c: &mut Cursor<'_>,
    mode: u8,
    out: &mut [T],
    make: impl Fn(i64) -> T,
) -> Result<(), EmbeddedError> {
    let runs = mode & 0xf0 == DECIMAL_RUNS;
    // A byte that is a whole change of one value: a one-byte varint, and in runs, a token
    // for one value (its low bit clear).
    let single = if runs { 0x81 } else { 0x80 };
    let (n, mut at, mut s) = (out.len(), 0, 0i64);
    while at < n {
        let rest = c.rest();
        let mut used = 0;
        while at < n {
            let Some(&b) = rest.get(used).filter(|&&b| b & single == 0) else { break };
            let change = if runs { b >> 1 } else { b };
            s = s.wrapping_add(unzigzag(u64::from(change)));
            out[at] = make(s);
            (at, used) = (at + 1, used + 1);
        }
        c.bytes(used)?;
        if at == n {
            break;
        }
        let (change, run) = if runs { get_run(c, n - at)? } else { (unzigzag(c.varint()?), 1) };
        for v in &mut out[at..at + run] {
            s = s.wrapping_add(change);
            *v = make(s);
        }
        at += run;
    }
    Ok(())
}

/// A float column's `n` values (its mode byte first), each handed to `each`.
pub(in crate::store::embedded::codec) fn get_floats(
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
        return Ok(());
    }
    let k = usize::from(mode & 0x0f);
    if k >= POW10.len() {
        return Err(corrupt("bad float column mode"));
    }
    let mut s = 0i64;
    match mode & 0xf0 {
        DECIMAL_HEADER => {
            for _ in 0..n {
                s = s.wrapping_add(unzigzag(c.varint()?));
                each(unscaled(s, k));
            }
        }
        DECIMAL_RUNS => {
            let mut left = n;
            while left > 0 {
                let (delta, run) = get_run(c, left)?;
                for _ in 0..run {
                    s = s.wrapping_add(delta);
                    each(unscaled(s, k));
                }
                left -= run;
            }
        }
        _ => return Err(corrupt("bad float column mode")),
    }
    Ok(())
}

/// An integer column's `n` values, as their unsigned bits, each handed to `each`.
pub(in crate::store::embedded::codec) fn get_integers(
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

/// The fewest bytes a column of `n` values of type `t` takes, checked before anything is
/// allocated for them: a byte a value, a bool an eighth, a float column one byte (its mode;
/// in runs, a run of values takes a byte or two).
pub(in crate::store::embedded::codec) fn least_bytes(t: u8, n: usize) -> usize {
    match t {
        T_BOOL => n.div_ceil(8),
        T_FLOAT => n.min(1),
        _ => n,
    }
}

/// A column's `n` values.
fn get_column(c: &mut Cursor<'_>, t: u8, n: usize) -> Result<Vec<FieldValue>, EmbeddedError> {
    if least_bytes(t, n) > c.remaining() {
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
