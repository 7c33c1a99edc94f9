//! Version 1 of the chunk encoding (see the module doc), which bucketd wrote up to file schema
//! 5. Still decoded: nothing is rewritten at an upgrade.

use super::format::{ChunkSummary, T_BOOL, T_FLOAT, T_INT, T_STR, T_UINT};
use crate::model::{FieldName, FieldValue, Fields, Reading};
use crate::store::embedded::EmbeddedError;
use crate::store::embedded::codec::corrupt;
use crate::store::embedded::codec::float::{ScaledMemo, get_float};
use crate::wire::{Cursor, unzigzag};

pub(in crate::store::embedded::codec) const CHUNK_V1: u64 = 1;

/// Decodes the readings of a version-1 chunk after its prefix, in stored order, appending them
/// to `out`.
pub(in crate::store::embedded::codec) fn decode_v1(
    c: &mut Cursor<'_>,
    summary: ChunkSummary,
    out: &mut Vec<Reading>,
) -> Result<(), EmbeddedError> {
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
                    *prev = get_float(c, *prev, &mut memos[i])?;
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
    Ok(())
}

#[cfg(test)]
pub(in crate::store::embedded) mod encode {
    use std::collections::HashMap;

    use super::CHUNK_V1;
    use crate::model::{ReadingView, TimestampMs, ValueRef};
    use crate::store::embedded::codec::chunk::format::type_of;
    use crate::store::embedded::codec::float::{ScaledMemo, put_float};
    use crate::wire::{put_str, put_varint, zigzag};

    /// The version-1 encoder, as schemas 1 to 5 wrote chunks: kept so that tests can make what
    /// older files hold.
    pub(in crate::store::embedded) fn encode_v1<R: ReadingView>(
        hour: TimestampMs,
        readings: &[R],
    ) -> Vec<u8> {
        debug_assert!(readings.windows(2).all(|w| w[0].ts() <= w[1].ts()));
        debug_assert!(
            readings.iter().all(|r| r.ts() >= hour && r.ts() - hour < crate::model::HOUR_MS)
        );
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
}
