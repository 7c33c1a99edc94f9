//! Bucket headers (values of the `buckets` table): counts, time range and field statistics.

use std::collections::BTreeMap;

use super::primitives::{Cursor, corrupt, put_str, put_varint, unzigzag, zigzag};
use crate::model::{Reading, TimestampMs};
use crate::store::embedded::EmbeddedError;
use crate::store::{FieldStats, approx_reading_bytes};

/// Version of the bucket header encoding: its own number, so that a schema change elsewhere in
/// the file (schema 2 added per-writer marks) leaves every stored header readable.
const HEADER_VERSION: u64 = 1;

/// The header of one bucket (value of the `buckets` table). Rewritten on every append to the
/// bucket; its size grows with the number of distinct numeric fields, never with readings.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketHeader {
    pub count: u32,
    /// Sum of [`approx_reading_bytes`] over the bucket's readings: what the size cap counts.
    pub bytes: u64,
    pub min_ts: TimestampMs,
    pub max_ts: TimestampMs,
    /// Every chunk starts at or after the previous chunk's last timestamp, so reading the chunks
    /// in key order yields the bucket's readings in timestamp order.
    pub sorted: bool,
    pub chunks: u32,
    pub stats: BTreeMap<String, FieldStats>,
}

impl BucketHeader {
    pub fn empty() -> Self {
        BucketHeader {
            count: 0,
            bytes: 0,
            min_ts: TimestampMs::MAX,
            max_ts: TimestampMs::MIN,
            sorted: true,
            chunks: 0,
            stats: BTreeMap::new(),
        }
    }

    /// Accounts for a chunk of sorted readings appended to this bucket.
    pub fn append(&mut self, readings: &[&Reading]) {
        let (Some(first), Some(last)) = (readings.first(), readings.last()) else {
            return;
        };
        self.sorted &= self.count == 0 || first.ts >= self.max_ts;
        self.min_ts = self.min_ts.min(first.ts);
        self.max_ts = self.max_ts.max(last.ts);
        self.count += readings.len() as u32;
        self.chunks += 1;
        for r in readings {
            self.bytes += approx_reading_bytes(r);
            for (name, value) in &r.fields {
                if let Some(v) = value.as_f64() {
                    match self.stats.get_mut(name.as_str()) {
                        Some(s) => s.merge(&FieldStats::of(v)),
                        None => {
                            self.stats.insert(name.to_string(), FieldStats::of(v));
                        }
                    }
                }
            }
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.stats.len() * 40);
        put_varint(&mut out, HEADER_VERSION);
        put_varint(&mut out, u64::from(self.count));
        put_varint(&mut out, self.bytes);
        put_varint(&mut out, zigzag(self.min_ts));
        put_varint(&mut out, zigzag(self.max_ts));
        out.push(u8::from(self.sorted));
        put_varint(&mut out, u64::from(self.chunks));
        put_varint(&mut out, self.stats.len() as u64);
        for (name, s) in &self.stats {
            put_str(&mut out, name);
            put_varint(&mut out, s.count);
            out.extend_from_slice(&s.min.to_le_bytes());
            out.extend_from_slice(&s.max.to_le_bytes());
            out.extend_from_slice(&s.sum.to_le_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EmbeddedError> {
        let mut c = Cursor::new(bytes);
        let version = c.varint()?;
        if version != HEADER_VERSION {
            return Err(EmbeddedError::Corrupt(format!("unknown bucket header version {version}")));
        }
        let count = u32::try_from(c.varint()?).map_err(|_| corrupt("bucket count too large"))?;
        let bytes_ = c.varint()?;
        let min_ts = unzigzag(c.varint()?);
        let max_ts = unzigzag(c.varint()?);
        let sorted = c.u8()? != 0;
        let chunks = u32::try_from(c.varint()?).map_err(|_| corrupt("chunk count too large"))?;
        let n = c.len()?;
        let mut stats = BTreeMap::new();
        for _ in 0..n {
            let name = c.string()?;
            let count = c.varint()?;
            let (min, max, sum) = (c.f64()?, c.f64()?, c.f64()?);
            stats.insert(name, FieldStats { count, min, max, sum });
        }
        c.finish()?;
        Ok(BucketHeader { count, bytes: bytes_, min_ts, max_ts, sorted, chunks, stats })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FieldValue;

    fn r(ts: i64, fields: Vec<(&str, FieldValue)>) -> Reading {
        Reading { ts, fields: fields.into_iter().map(|(n, v)| (n.into(), v)).collect() }
    }
    #[test]
    fn header_tracks_stats_order_and_roundtrips() {
        let a = r(10, vec![("v", FieldValue::Float(2.0)), ("s", FieldValue::Str("x".into()))]);
        let b = r(20, vec![("v", FieldValue::Int(-4)), ("w", FieldValue::UInt(7))]);
        let c = r(15, vec![("v", FieldValue::Bool(true))]);
        let mut h = BucketHeader::empty();
        h.append(&[&a, &b]);
        assert!(h.sorted);
        h.append(&[&c]);
        assert!(!h.sorted, "a chunk starting before the bucket's last reading unsorts it");
        assert_eq!((h.count, h.chunks, h.min_ts, h.max_ts), (3, 2, 10, 20));
        assert_eq!(
            h.bytes,
            approx_reading_bytes(&a) + approx_reading_bytes(&b) + approx_reading_bytes(&c)
        );
        assert_eq!(h.stats["v"], FieldStats { count: 2, min: -4.0, max: 2.0, sum: -2.0 });
        assert_eq!(h.stats["w"], FieldStats::of(7.0));
        assert!(!h.stats.contains_key("s"));
        assert_eq!(BucketHeader::decode(&h.encode()).unwrap(), h);
        assert!(BucketHeader::decode(&h.encode()[..5]).is_err());
    }
}
