//! Floats of a chunk: a decimal form (an integer of hundredths, say) where that gives back the
//! same bits, else the bits XOR-ed with the previous value's (Gorilla-style, byte-granular).

use super::corrupt;
use crate::store::embedded::EmbeddedError;
use crate::wire::{Cursor, put_varint, unzigzag, varint_len, zigzag};

/// Powers of ten a float may be scaled by to become an integer: up to six decimals.
pub(super) const POW10: [f64; 7] = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6];
/// Integers up to 2^53 convert to and from f64 exactly.
const EXACT_INT: f64 = 9_007_199_254_740_992.0;
/// Float header bytes from here on mean "decimal": the low nibble is the number of decimals.
/// XOR headers never reach them (their two nibbles add up to at most 8).
pub(super) const DECIMAL_HEADER: u8 = 0xf0;

/// The previous value of a field scaled by `10^k`, as both encoder and decoder compute it
/// (0 when it is not a float in range, e.g. the field held an integer before).
fn scaled_prev(prev_bits: u64, k: usize) -> i64 {
    let p = (f64::from_bits(prev_bits) * POW10[k]).round();
    if p.is_finite() && p.abs() <= EXACT_INT { p as i64 } else { 0 }
}

/// `v` scaled by `10^k` to an integer, if that integer divided by `10^k` gives back exactly
/// `v`'s bits. `Err` once the scaled value is too large for this and more decimals.
pub(super) fn scaled(v: f64, k: usize) -> Result<Option<i64>, ()> {
    let s = (v * POW10[k]).round();
    // `v` is finite, so `s` is a number or an infinity, never NaN.
    if s.abs() > EXACT_INT {
        return Err(());
    }
    let s = s as i64;
    Ok((unscaled(s, k).to_bits() == v.to_bits()).then_some(s))
}

/// The float that `s` with `k` decimals stands for, as every decoder computes it.
pub(super) fn unscaled(s: i64, k: usize) -> f64 {
    s as f64 / POW10[k]
}

/// Sensor values usually have a fixed decimal resolution (21.37 °C), which XOR compresses
/// poorly; as an integer of hundredths its change from the previous value takes a byte or two.
/// The decimal form is used only when it decodes to exactly the same bits and is shorter.
///
/// `memo` is the decoder's [`ScaledMemo`] of this field, kept alike: the previous value's
/// number of decimals is tried first (a sensor's values keep their resolution), which spares
/// the search from zero decimals up, a multiplication and a `round` each, and the previous
/// value's scaling. Any number of decimals that gives back the same bits decodes alike.
pub(super) fn put_float(out: &mut Vec<u8>, v: f64, prev_bits: u64, memo: &mut ScaledMemo) {
    let x = v.to_bits() ^ prev_bits;
    let xor_len = if x == 0 { 1 } else { 9 - (x.leading_zeros() / 8 + x.trailing_zeros() / 8) };
    let exact = |k: usize| scaled(v, k);
    // Writes `s` with `k` decimals if that is shorter than the XOR form.
    let decimal = |out: &mut Vec<u8>, memo: &mut ScaledMemo, k: usize, s: i64| {
        let prev = match *memo {
            Some((memo_k, prev)) if memo_k == k => prev,
            _ => scaled_prev(prev_bits, k),
        };
        let delta = zigzag(s.wrapping_sub(prev));
        if 1 + varint_len(delta) >= xor_len as usize {
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
/// value with `k` decimals skips that multiplication and its `round`, a noticeable part of decoding.
pub(super) type ScaledMemo = Option<(usize, i64)>;
const SCALED_MEMO_LIMIT: u64 = 1 << 50;

pub(super) fn get_float(
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
    if k >= POW10.len() {
        return Err(corrupt("bad decimal float header"));
    }
    let prev = match *memo {
        Some((memo_k, s)) if memo_k == k => s,
        _ => scaled_prev(prev_bits, k),
    };
    let s = prev.wrapping_add(unzigzag(c.varint()?));
    *memo = (s.unsigned_abs() <= SCALED_MEMO_LIMIT).then_some((k, s));
    Ok(unscaled(s, k).to_bits())
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
