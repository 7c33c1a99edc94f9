//! A chunk's numbers, column by column, without making a value or a reading of each: what
//! statistics over windows need, and all a scan of many readings should pay for.

use super::chunk::{
    CHUNK_V2, ChunkSummary, T_BOOL, T_FLOAT, T_INT, T_STR, T_UINT, chunk_prefix, decode_v1,
    fill_timestamps, get_floats, get_floats_into, get_integers, get_scaled_into, least_bytes,
};
use super::corrupt;
use crate::model::{Reading, TimestampMs};
use crate::store::embedded::EmbeddedError;
use crate::wire::Cursor;

/// Where [`scan_numbers`] hands a chunk's numbers.
pub trait NumberSink {
    /// The sink's slot for a numeric field of this name, or `None` to pass its values by.
    fn slot(&mut self, name: &str) -> Option<usize>;

    /// Values of one field at ascending times, all within the scan's range. Integers come as
    /// the floats [`crate::model::FieldValue::as_f64`] makes of them.
    fn values(&mut self, slot: usize, ts: &[TimestampMs], values: &[f64]);

    /// Whether the sink counts values without reading them: it is then handed zeros in
    /// their place, and the column is not decoded.
    fn counts_only(&self) -> bool {
        false
    }

    /// Whether the sink takes a float column of decimals as its integers ([`NumberSink::scaled`])
    /// rather than as floats: a sink that keeps no value of each (statistics) then divides once
    /// for what it keeps, where making the floats divides once a value.
    fn takes_scaled(&self) -> bool {
        false
    }

    /// Values of one field as [`NumberSink::values`] has them, each `scaled[i] / scale` (the
    /// float the column decodes to, bit for bit); only for a sink that [`NumberSink::takes_scaled`].
    fn scaled(&mut self, slot: usize, ts: &[TimestampMs], scaled: &[i64], scale: f64) {
        let values: Vec<f64> = scaled.iter().map(|&s| s as f64 / scale).collect();
        self.values(slot, ts, &values);
    }
}

/// Buffers a scan reuses from chunk to chunk.
#[derive(Default)]
pub struct ScanScratch {
    ts: Vec<TimestampMs>,
    column_ts: Vec<TimestampMs>,
    values: Vec<f64>,
    scaled: Vec<i64>,
    zeros: Vec<f64>,
    slots: Vec<Option<usize>>,
    types: Vec<u8>,
    shapes: Vec<Vec<usize>>,
    shape_ids: Vec<usize>,
    readings: Vec<Reading>,
}

/// Hands `sink` the numeric values of a chunk whose times are in `from..to`, field by field.
/// A column no slot wants is stepped over, and none after the last wanted one is read.
pub fn scan_numbers(
    bytes: &[u8],
    hour: TimestampMs,
    from: TimestampMs,
    to: TimestampMs,
    scratch: &mut ScanScratch,
    sink: &mut dyn NumberSink,
) -> Result<ChunkSummary, EmbeddedError> {
    let mut c = Cursor::new(bytes);
    let (version, summary) = chunk_prefix(&mut c, hour)?;
    if version != CHUNK_V2 {
        scratch.readings.clear();
        decode_v1(&mut c, summary, &mut scratch.readings)?;
        for r in scratch.readings.iter().filter(|r| r.ts >= from && r.ts < to) {
            for (name, value) in &r.fields {
                if let Some(v) = value.as_f64()
                    && let Some(slot) = sink.slot(name)
                {
                    sink.values(slot, &[r.ts], &[v]);
                }
            }
        }
        return Ok(summary);
    }
    let count = summary.count as usize;
    let n_columns = c.len()?;
    let ScanScratch {
        ts, column_ts, values, scaled, zeros, slots, types, shapes, shape_ids, ..
    } = scratch;
    slots.clear();
    types.clear();
    for _ in 0..n_columns {
        let name = c.str()?;
        let t = c.u8()?;
        if t > T_STR {
            return Err(corrupt("unknown field type"));
        }
        types.push(t);
        slots.push(if matches!(t, T_FLOAT | T_INT | T_UINT) { sink.slot(name) } else { None });
    }
    let Some(last_wanted) = slots.iter().rposition(Option::is_some) else {
        return Ok(summary);
    };
    let n_shapes = c.len()?;
    if (n_shapes == 0) != (count == 0) {
        return Err(corrupt("a chunk's readings have no shape"));
    }
    shapes.resize_with(n_shapes, Vec::new);
    for shape in shapes.iter_mut().take(n_shapes) {
        shape.clear();
        for _ in 0..c.len()? {
            let i = usize::try_from(c.varint()?).unwrap_or(usize::MAX);
            if i >= n_columns {
                return Err(corrupt("field column out of range"));
            }
            shape.push(i);
        }
    }
    shape_ids.clear();
    if n_shapes > 1 {
        if count > c.remaining() {
            return Err(corrupt("chunk shorter than its readings' shapes"));
        }
        for _ in 0..count {
            let id = usize::try_from(c.varint()?).unwrap_or(usize::MAX);
            if id >= n_shapes {
                return Err(corrupt("reading shape out of range"));
            }
            shape_ids.push(id);
        }
    }
    fill_timestamps(&mut c, summary, ts)?;
    let lo = ts.partition_point(|&t| t < from);
    let hi = ts.partition_point(|&t| t < to);
    for col in 0..=last_wanted {
        let (t, slot) = (types[col], slots[col]);
        let has = |shape: usize| shapes[shape].contains(&col);
        if n_shapes == 1 {
            // Every reading holds every column of the one shape (or none).
            let n = if has(0) { count } else { 0 };
            match slot {
                Some(slot) if n > 0 => {
                    let bufs = (&mut *values, &mut *scaled, &mut *zeros);
                    let more = col < last_wanted;
                    to_sink(&mut c, (t, n), more, (&ts[..], lo, hi), bufs, (slot, &mut *sink))?;
                }
                _ => skip_column(&mut c, t, n)?,
            }
            continue;
        }
        column_ts.clear();
        column_ts
            .extend(shape_ids.iter().zip(ts.iter()).filter(|(s, _)| has(**s)).map(|(_, t)| *t));
        let n = column_ts.len();
        match slot {
            Some(slot) if n > 0 => {
                let lo = column_ts.partition_point(|&t| t < from);
                let hi = column_ts.partition_point(|&t| t < to);
                let bufs = (&mut *values, &mut *scaled, &mut *zeros);
                let more = col < last_wanted;
                to_sink(&mut c, (t, n), more, (&column_ts[..], lo, hi), bufs, (slot, &mut *sink))?;
            }
            _ => skip_column(&mut c, t, n)?,
        }
    }
    Ok(summary)
}

/// Hands `sink`'s `slot` a numeric column's `n` values (of type `t`) at `ts[lo..hi]`: as
/// integers of a decimal scale where the column has them and the sink takes them, else as
/// floats (zeros for a sink that only counts).
fn to_sink(
    c: &mut Cursor<'_>,
    (t, n): (u8, usize),
    more: bool,
    (ts, lo, hi): (&[TimestampMs], usize, usize),
    (values, scaled, zeros): (&mut Vec<f64>, &mut Vec<i64>, &mut Vec<f64>),
    (slot, sink): (usize, &mut dyn NumberSink),
) -> Result<(), EmbeddedError> {
    let counts_only = sink.counts_only();
    // Checked before anything is grown for the values, whichever way they are decoded.
    if !counts_only && least_bytes(t, n) > c.remaining() {
        return Err(corrupt("chunk shorter than its columns"));
    }
    if t == T_FLOAT
        && !counts_only
        && sink.takes_scaled()
        && let Some(scale) = get_scaled_into(c, n, scaled)?
    {
        sink.scaled(slot, &ts[lo..hi], &scaled[lo..hi], scale);
        return Ok(());
    }
    let values = numbers(c, (t, n), counts_only, more, values, zeros)?;
    sink.values(slot, &ts[lo..hi], &values[lo..hi]);
    Ok(())
}

/// A numeric column's `n` values (of type `t`) as floats in `out`, or, when `counts_only`, as
/// many zeros from `zeros`, the column stepped over if `more` columns are read after it.
fn numbers<'a>(
    c: &mut Cursor<'_>,
    (t, n): (u8, usize),
    counts_only: bool,
    more: bool,
    out: &'a mut Vec<f64>,
    zeros: &'a mut Vec<f64>,
) -> Result<&'a [f64], EmbeddedError> {
    if !counts_only {
        get_numbers(c, t, n, out)?;
        return Ok(&out[..n]);
    }
    if more {
        skip_column(c, t, n)?;
    }
    if zeros.len() < n {
        zeros.resize(n, 0.0);
    }
    Ok(&zeros[..n])
}

/// A numeric column's `n` values as floats, into `out[..n]`.
fn get_numbers(
    c: &mut Cursor<'_>,
    t: u8,
    n: usize,
    out: &mut Vec<f64>,
) -> Result<(), EmbeddedError> {
    if t == T_FLOAT {
        get_floats_into(c, n, out)
    } else {
        out.clear();
        out.reserve(n);
        get_integers(c, n, |bits| {
            out.push(if t == T_INT { bits as i64 as f64 } else { bits as f64 })
        })
    }
}

/// Steps over a column of `n` values of type `t`.
fn skip_column(c: &mut Cursor<'_>, t: u8, n: usize) -> Result<(), EmbeddedError> {
    if n == 0 {
        return Ok(());
    }
    match t {
        T_FLOAT => get_floats(c, n, |_| {})?,
        T_INT | T_UINT => get_integers(c, n, |_| {})?,
        T_BOOL => {
            c.bytes(n.div_ceil(8))?;
        }
        _ => {
            for _ in 0..n {
                let len = c.len()?;
                c.bytes(len)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::{FieldValue, HOUR_MS};
    use crate::store::embedded::codec::tests::value;
    use crate::store::embedded::codec::{decode_chunk, encode_chunk, encode_v1};

    /// Collects what a scan hands over, by field name.
    #[derive(Default)]
    struct Collect {
        names: Vec<String>,
        got: Vec<(String, TimestampMs, u64)>,
        only: Option<&'static str>,
        counts: bool,
        /// Takes decimal columns as their integers.
        scaled: bool,
        /// How many values came as integers.
        integers: usize,
    }

    impl NumberSink for Collect {
        fn slot(&mut self, name: &str) -> Option<usize> {
            if self.only.is_some_and(|o| o != name) {
                return None;
            }
            Some(self.names.iter().position(|n| n == name).unwrap_or_else(|| {
                self.names.push(name.to_owned());
                self.names.len() - 1
            }))
        }

        fn values(&mut self, slot: usize, ts: &[TimestampMs], values: &[f64]) {
            assert_eq!(ts.len(), values.len());
            assert!(ts.windows(2).all(|w| w[0] <= w[1]), "times ascend");
            for (t, v) in ts.iter().zip(values) {
                self.got.push((self.names[slot].clone(), *t, v.to_bits()));
            }
        }

        fn counts_only(&self) -> bool {
            self.counts
        }

        fn takes_scaled(&self) -> bool {
            self.scaled
        }

        fn scaled(&mut self, slot: usize, ts: &[TimestampMs], scaled: &[i64], scale: f64) {
            assert!(self.scaled, "integers only for a sink that takes them");
            self.integers += scaled.len();
            let values: Vec<f64> = scaled.iter().map(|&s| s as f64 / scale).collect();
            self.values(slot, ts, &values);
        }
    }

    fn readings() -> impl Strategy<Value = Vec<Reading>> {
        let fields = proptest::collection::btree_map("[a-d]", value(), 0..4)
            .prop_map(|m| m.into_iter().collect::<Vec<_>>())
            .prop_shuffle();
        proptest::collection::vec((0..60i64, fields), 1..120).prop_map(|rows| {
            let mut rs: Vec<Reading> = rows
                .into_iter()
                .map(|(ts, fields)| Reading {
                    ts: 3 * HOUR_MS + ts,
                    fields: fields.into_iter().map(|(n, v)| (n.into(), v)).collect(),
                })
                .collect();
            rs.sort_by_key(|r| r.ts);
            rs
        })
    }

    /// What the scan must hand over: the decoded readings' numbers in range, sorted (a name
    /// whose type changed has a column of each type).
    fn expected(
        bytes: &[u8],
        from: TimestampMs,
        to: TimestampMs,
        only: Option<&str>,
    ) -> Vec<(String, TimestampMs, u64)> {
        let mut decoded = Vec::new();
        decode_chunk(bytes, 3 * HOUR_MS, &mut decoded).unwrap();
        let mut want: Vec<(String, TimestampMs, u64)> = decoded
            .iter()
            .filter(|r| r.ts >= from && r.ts < to)
            .flat_map(|r| {
                r.fields.iter().filter_map(move |(n, v)| {
                    v.as_f64().map(|f| (n.to_string(), r.ts, f.to_bits()))
                })
            })
            .filter(|(n, ..)| only.is_none_or(|o| o == n))
            .collect();
        want.sort();
        want
    }

    proptest! {
        #[test]
        fn a_scan_hands_over_the_numbers_decoding_gives(
            rs in readings(),
            from in 0..70i64,
            len in 0..70i64,
            only in prop_oneof![Just(None), Just(Some("a")), Just(Some("c"))],
            v1 in any::<bool>(),
            counts in any::<bool>(),
            scaled in any::<bool>(),
        ) {
            let hour = 3 * HOUR_MS;
            let bytes = if v1 { encode_v1(hour, &rs) } else { encode_chunk(hour, &rs) };
            let (from, to) = (hour + from, hour + from + len);
            let mut sink = Collect { only, counts, scaled, ..Collect::default() };
            scan_numbers(&bytes, hour, from, to, &mut ScanScratch::default(), &mut sink).unwrap();
            let mut want = expected(&bytes, from, to, only);
            if counts {
                // Only which values, not what they are.
                let names_times = |v: &mut Vec<(String, TimestampMs, u64)>| {
                    v.iter_mut().for_each(|x| x.2 = 0);
                    v.sort();
                };
                names_times(&mut sink.got);
                names_times(&mut want);
            }
            let mut got = sink.got;
            got.sort();
            prop_assert_eq!(got, want);
        }

        /// A column of decimals (in runs of equal changes or one by one) comes to a sink that
        /// takes integers as integers that divide to the decoded floats, bit for bit.
        #[test]
        fn decimal_columns_come_as_integers_of_the_same_values(
            changes in proptest::collection::vec(
                prop_oneof![Just(0i64), Just(1), Just(-3), -500i64..500],
                1..150,
            ),
            times in proptest::collection::vec(0..3600i64, 150),
            decimals in 0u32..5,
            (from, len) in (0..3600i64, 0..3700i64),
        ) {
            let hour = 3 * HOUR_MS;
            let mut times = times[..changes.len()].to_vec();
            times.sort_unstable();
            let mut s = 1234i64;
            let rs: Vec<Reading> = changes
                .iter()
                .zip(&times)
                .map(|(d, t)| {
                    s += d;
                    let v = s as f64 / 10f64.powi(decimals as i32);
                    Reading { ts: hour + t, fields: vec![("a".into(), FieldValue::Float(v))].into() }
                })
                .collect();
            let bytes = encode_chunk(hour, &rs);
            let (from, to) = (hour + from, hour + from + len);
            let mut sink = Collect { scaled: true, ..Collect::default() };
            scan_numbers(&bytes, hour, from, to, &mut ScanScratch::default(), &mut sink).unwrap();
            prop_assert_eq!(sink.integers, sink.got.len(), "every value came as an integer");
            let mut got = sink.got;
            got.sort();
            prop_assert_eq!(got, expected(&bytes, from, to, None));
        }

        #[test]
        fn scanning_garbage_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            scaled in any::<bool>(),
        ) {
            let mut sink = Collect { scaled, ..Collect::default() };
            let _ = scan_numbers(&bytes, 0, 0, HOUR_MS, &mut ScanScratch::default(), &mut sink);
        }
    }
}
