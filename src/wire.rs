//! The primitives of bucketd's own byte formats, the write-ahead log's records and the embedded
//! store's values: unsigned LEB128 varints, zigzag, length-prefixed UTF-8, and a bounds-checked
//! reader that turns every short or malformed value into a [`WireError`] instead of a panic.
//! Each format maps that error into its own (`PayloadError`, `EmbeddedError`), which says
//! what was being read.

/// Why a value could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("value cut short")]
    CutShort,
    #[error("varint overflows 64 bits")]
    VarintOverflow,
    #[error("length beyond the end of the value")]
    LengthPastEnd,
    #[error("text is not UTF-8")]
    NotUtf8,
    #[error("trailing bytes after the value")]
    Trailing,
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes [`put_varint`] writes for `v`.
pub fn varint_len(v: u64) -> usize {
    (64 - v.leading_zeros()).max(1).div_ceil(7) as usize
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// The next byte, not consumed.
    pub fn peek(&self) -> Result<u8, WireError> {
        self.buf.get(self.pos).copied().ok_or(WireError::CutShort)
    }

    pub fn u8(&mut self) -> Result<u8, WireError> {
        let b = self.peek()?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub fn varint(&mut self) -> Result<u64, WireError> {
        // Most varints (a chunk's timestamp deltas, shape codes and small value changes; a
        // record's indexes) are one byte: that case stays inline in the decoding loops.
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.long_varint()
    }

    fn long_varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            if shift == 63 && b > 1 {
                return Err(WireError::VarintOverflow);
            }
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(WireError::VarintOverflow)
    }

    pub fn zigzag(&mut self) -> Result<i64, WireError> {
        self.varint().map(unzigzag)
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let s = &self.buf[self.pos..end.ok_or(WireError::CutShort)?];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        Ok(self.bytes(N)?.try_into().expect("N bytes"))
    }

    /// A length or count, which can never exceed the bytes left (each element takes one at
    /// least): a damaged one so never turns into a huge allocation.
    pub fn len(&mut self) -> Result<usize, WireError> {
        let n = self.varint()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.buf.len() - self.pos)
            .ok_or(WireError::LengthPastEnd)
    }

    pub fn str(&mut self) -> Result<&'a str, WireError> {
        let n = self.len()?;
        std::str::from_utf8(self.bytes(n)?).map_err(|_| WireError::NotUtf8)
    }

    pub fn string(&mut self) -> Result<String, WireError> {
        self.str().map(str::to_owned)
    }

    pub fn f64(&mut self) -> Result<f64, WireError> {
        self.array().map(f64::from_le_bytes)
    }

    /// The bytes not read yet, left unread: a caller that reads some of them itself passes
    /// them by with [`Cursor::bytes`].
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    pub fn finish(&self) -> Result<(), WireError> {
        if self.is_empty() { Ok(()) } else { Err(WireError::Trailing) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn what_is_written_reads_back(v in any::<u64>(), z in any::<i64>(), s in ".{0,40}") {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            put_varint(&mut out, zigzag(z));
            put_str(&mut out, &s);
            let mut c = Cursor::new(&out);
            prop_assert_eq!(c.varint(), Ok(v));
            prop_assert_eq!(c.zigzag(), Ok(z));
            prop_assert_eq!(c.str(), Ok(s.as_str()));
            prop_assert_eq!(c.finish(), Ok(()));
        }

        #[test]
        fn any_bytes_give_values_or_errors_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let mut c = Cursor::new(&bytes);
            while !c.is_empty() {
                let read = match c.peek() {
                    Ok(b) if b % 3 == 0 => c.string().map(drop),
                    Ok(b) if b % 3 == 1 => c.f64().map(drop),
                    _ => c.varint().map(drop),
                };
                if read.is_err() {
                    break;
                }
            }
        }
    }

    #[test]
    fn damaged_values_say_what_is_wrong() {
        assert_eq!(Cursor::new(&[0x80]).varint(), Err(WireError::CutShort));
        assert_eq!(Cursor::new(&[0xff; 11]).varint(), Err(WireError::VarintOverflow));
        let mut ten = vec![0xff; 9];
        ten.push(0x02);
        assert_eq!(Cursor::new(&ten).varint(), Err(WireError::VarintOverflow), "bit 64 set");
        ten[9] = 0x01;
        assert_eq!(Cursor::new(&ten).varint(), Ok(u64::MAX));
        assert_eq!(Cursor::new(&[5, b'a']).str(), Err(WireError::LengthPastEnd));
        assert_eq!(Cursor::new(&[1, 0xff]).str(), Err(WireError::NotUtf8));
        assert_eq!(Cursor::new(&[1, 2]).bytes(3), Err(WireError::CutShort));
        let mut c = Cursor::new(&[1, 2]);
        c.u8().unwrap();
        assert_eq!(c.finish(), Err(WireError::Trailing));
    }
}
