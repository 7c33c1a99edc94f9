//! Primitive writers (varints, zigzag, strings) and a bounds-checked reader that turns every
//! short or malformed value into an error instead of a panic.

use crate::store::embedded::EmbeddedError;

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(super) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

pub(super) fn corrupt(what: &str) -> EmbeddedError {
    EmbeddedError::Corrupt(what.to_owned())
}

pub(super) struct Cursor<'a> {
    pub(super) buf: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    pub(super) fn u8(&mut self) -> Result<u8, EmbeddedError> {
        let b = *self.buf.get(self.pos).ok_or_else(|| corrupt("truncated value"))?;
        self.pos += 1;
        Ok(b)
    }

    #[inline]
    pub(super) fn varint(&mut self) -> Result<u64, EmbeddedError> {
        // Most varints of a chunk (timestamp deltas, shape codes, small value changes) are one
        // byte: that case stays inline in the decoding loop.
        if let Some(&b) = self.buf.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.long_varint()
    }

    pub(super) fn long_varint(&mut self) -> Result<u64, EmbeddedError> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            if shift == 63 && b > 1 {
                return Err(corrupt("varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
            shift += 7;
            if shift > 63 {
                return Err(corrupt("varint longer than 10 bytes"));
            }
        }
    }

    pub(super) fn bytes(&mut self, n: usize) -> Result<&'a [u8], EmbeddedError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| corrupt("truncated value"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub(super) fn len(&mut self) -> Result<usize, EmbeddedError> {
        let n = self.varint()?;
        // A length can never exceed what is left; checking here keeps a corrupt length from
        // turning into a huge allocation.
        if n > (self.buf.len() - self.pos) as u64 {
            return Err(corrupt("length beyond end of value"));
        }
        Ok(n as usize)
    }

    pub(super) fn string(&mut self) -> Result<String, EmbeddedError> {
        let n = self.len()?;
        let b = self.bytes(n)?;
        String::from_utf8(b.to_vec()).map_err(|_| corrupt("string is not UTF-8"))
    }

    pub(super) fn f64(&mut self) -> Result<f64, EmbeddedError> {
        let b = self.bytes(8)?;
        Ok(f64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    pub(super) fn finish(&self) -> Result<(), EmbeddedError> {
        if self.pos == self.buf.len() { Ok(()) } else { Err(corrupt("trailing bytes after value")) }
    }
}
