//! Series records (values of the `series` table).

use crate::model::TimestampMs;
use crate::store::embedded::EmbeddedError;
use crate::wire::{Cursor, put_str, put_varint, unzigzag, zigzag};

const SERIES_V1: u64 = 1;

/// Value of the `series` table, keyed by the sensor key.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesRecord {
    pub id: u64,
    pub measurement: String,
    pub tags: Vec<(String, String)>,
    pub first: TimestampMs,
    pub last: TimestampMs,
}

impl SeriesRecord {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.measurement.len());
        put_varint(&mut out, SERIES_V1);
        put_varint(&mut out, self.id);
        put_str(&mut out, &self.measurement);
        put_varint(&mut out, self.tags.len() as u64);
        for (k, v) in &self.tags {
            put_str(&mut out, k);
            put_str(&mut out, v);
        }
        put_varint(&mut out, zigzag(self.first));
        put_varint(&mut out, zigzag(self.last));
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EmbeddedError> {
        let mut c = Cursor::new(bytes);
        let version = c.varint()?;
        if version != SERIES_V1 {
            return Err(EmbeddedError::Corrupt(format!("unknown series record version {version}")));
        }
        let id = c.varint()?;
        let measurement = c.string()?;
        let n = c.len()?;
        let mut tags = Vec::with_capacity(n);
        for _ in 0..n {
            tags.push((c.string()?, c.string()?));
        }
        let first = unzigzag(c.varint()?);
        let last = unzigzag(c.varint()?);
        c.finish()?;
        Ok(SeriesRecord { id, measurement, tags, first, last })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_record_roundtrips() {
        let s = SeriesRecord {
            id: 300,
            measurement: "cpu".into(),
            tags: vec![("host".into(), "a".into()), ("region".into(), "eu".into())],
            first: -5,
            last: 1_700_000_000_000,
        };
        assert_eq!(SeriesRecord::decode(&s.encode()).unwrap(), s);
    }
}
