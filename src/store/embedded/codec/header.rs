//! Bucket headers (values of the `buckets` table): counts, time range and field statistics.

use std::collections::BTreeMap;

use smallvec::SmallVec;

use super::corrupt;
use crate::model::{ReadingView, TimestampMs};
use crate::store::embedded::EmbeddedError;
use crate::store::{FieldStats, approx_reading_bytes};
use crate::wire::{Cursor, put_str, put_varint, unzigzag, zigzag};

/// Version of the bucket header encoding: its own number, so that a schema change elsewhere in
/// the file (schema 2 added per-writer marks) leaves every stored header readable.
///
/// 1 (schemas 1 and 2): per field `count, min, max, sum`. Still decoded, with `first` and
/// `last` `None`.
/// 2 (schema 3 and 4): each field's stats are followed by its first and last value with their
/// times. Still decoded, its chunks in the table keyed by series.
/// 3 (schema 5): the chunk count is followed by each chunk's write number (`chunks` module)
/// and the number of readings in the last chunk.
const HEADER_VERSION: u64 = 3;
/// The version schemas 1 and 2 wrote.
const HEADER_VERSION_1: u64 = 1;
/// The version schemas 3 and 4 wrote.
const HEADER_VERSION_2: u64 = 2;

/// More than a bucket can have (see `decode`).
const MAX_CHUNKS: u32 = 1 << 20;

/// Bits of a field's flags byte (header version 2): which of `first` / `last` follow.
const HAS_FIRST: u8 = 1;
const HAS_LAST: u8 = 2;

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
    /// in chunk order yields the bucket's readings in timestamp order.
    pub sorted: bool,
    /// Per chunk, in chunk order: the write that made it, which is where it is stored
    /// (`chunks::ChunkAt`). A chunk joined by a later write keeps its place.
    pub writes: Vec<u64>,
    /// Readings in the last chunk, which tells a write whether to join it without reading it
    /// (`write::SMALL_CHUNK`). `None` when not known: a header of an earlier version, until a
    /// write appends a chunk.
    pub last_chunk: Option<u32>,
    pub stats: BTreeMap<String, FieldStats>,
}

impl BucketHeader {
    /// Whether some field's statistics lack `first`/`last`: the header was written before
    /// schema 3 (version 1) and the bucket's readings have not been recounted since.
    pub fn lacks_first_last(&self) -> bool {
        self.stats.values().any(|s| s.first.is_none() || s.last.is_none())
    }

    /// Recomputes the per-field statistics from all of the bucket's `readings` (a header
    /// written before schema 3 gains `first`/`last`); counts and the time range stay.
    pub fn recount_stats<R: ReadingView>(&mut self, readings: impl IntoIterator<Item = R>) {
        self.stats.clear();
        for r in readings {
            self.add_stats(&r);
        }
    }

    fn add_stats(&mut self, r: &impl ReadingView) {
        let ts = r.ts();
        for (name, value) in r.fields() {
            if let Some(v) = value.as_f64() {
                let one = FieldStats::of(ts, v);
                match self.stats.get_mut(name) {
                    Some(s) => s.merge(&one),
                    None => {
                        self.stats.insert(name.to_string(), one);
                    }
                }
            }
        }
    }

    pub fn empty() -> Self {
        BucketHeader {
            count: 0,
            bytes: 0,
            min_ts: TimestampMs::MAX,
            max_ts: TimestampMs::MIN,
            sorted: true,
            writes: Vec::new(),
            last_chunk: None,
            stats: BTreeMap::new(),
        }
    }

    /// How many chunks the bucket has.
    pub fn chunks(&self) -> u32 {
        self.writes.len() as u32
    }

    /// Accounts for a chunk of sorted readings appended to this bucket by write `write`.
    /// `bytes` is their [`approx_reading_bytes`], summed: the writer has counted them for the
    /// size cap.
    pub fn append<R: ReadingView>(&mut self, readings: &[R], bytes: u64, write: u64) {
        if !readings.is_empty() {
            // A new last chunk, empty until `join_last` counts the readings into it.
            self.writes.push(write);
            self.last_chunk = Some(0);
            self.join_last(readings, bytes);
        }
    }

    /// Accounts for sorted readings joined into the bucket's last chunk. `sorted` still
    /// compares them with all of the bucket's earlier readings: the chunk is sorted again
    /// when joined, but the chunks before it may end after its new first reading.
    pub fn join_last<R: ReadingView>(&mut self, readings: &[R], bytes: u64) {
        debug_assert_eq!(bytes, readings.iter().map(approx_reading_bytes).sum::<u64>());
        let (Some(first), Some(last)) = (readings.first(), readings.last()) else {
            return;
        };
        self.sorted &= self.count == 0 || first.ts() >= self.max_ts;
        self.min_ts = self.min_ts.min(first.ts());
        self.max_ts = self.max_ts.max(last.ts());
        self.count += readings.len() as u32;
        self.bytes += bytes;
        if let Some(last) = &mut self.last_chunk {
            *last += readings.len() as u32;
        }
        for r in readings {
            self.add_stats(r);
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        self.encode_as(HEADER_VERSION)
    }

    /// The encoding of header version 1 (schemas 1 and 2), as those versions wrote it: the
    /// statistics without first/last. For tests of reading old files.
    #[cfg(test)]
    pub fn encode_version_1(&self) -> Vec<u8> {
        self.encode_as(HEADER_VERSION_1)
    }

    /// The encoding of header version 2 (schemas 3 and 4): no chunk writes. For tests of
    /// reading old files.
    #[cfg(test)]
    pub fn encode_version_2(&self) -> Vec<u8> {
        self.encode_as(HEADER_VERSION_2)
    }

    fn encode_as(&self, version: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(32 + self.stats.len() * 64);
        put_varint(&mut out, version);
        put_varint(&mut out, u64::from(self.count));
        put_varint(&mut out, self.bytes);
        put_varint(&mut out, zigzag(self.min_ts));
        put_varint(&mut out, zigzag(self.max_ts));
        out.push(u8::from(self.sorted));
        put_varint(&mut out, u64::from(self.chunks()));
        if version >= HEADER_VERSION {
            // Increasing, but for a joined chunk: deltas of a byte or two.
            let mut prev = 0u64;
            for &w in &self.writes {
                put_varint(&mut out, zigzag(w.wrapping_sub(prev) as i64));
                prev = w;
            }
            // 0: not known.
            put_varint(&mut out, self.last_chunk.map_or(0, |n| u64::from(n) + 1));
        }
        put_varint(&mut out, self.stats.len() as u64);
        for (name, s) in &self.stats {
            put_str(&mut out, name);
            put_varint(&mut out, s.count);
            out.extend_from_slice(&s.min.to_le_bytes());
            out.extend_from_slice(&s.max.to_le_bytes());
            out.extend_from_slice(&s.sum.to_le_bytes());
            if version == HEADER_VERSION_1 {
                continue;
            }
            // Times relative to the bucket's first reading: a varint of a few bytes.
            let flags = if s.first.is_some() { HAS_FIRST } else { 0 }
                | if s.last.is_some() { HAS_LAST } else { 0 };
            out.push(flags);
            for (ts, v) in [s.first, s.last].into_iter().flatten() {
                put_varint(&mut out, zigzag(ts.wrapping_sub(self.min_ts)));
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, EmbeddedError> {
        let view = HeaderView::decode(bytes)?;
        let mut stats = BTreeMap::new();
        view.each_stat(|name, s| {
            stats.insert(name.to_owned(), s);
        })?;
        let HeaderView { count, bytes, min_ts, max_ts, sorted, writes, last_chunk, .. } = view;
        let writes = writes.into_vec();
        Ok(BucketHeader { count, bytes, min_ts, max_ts, sorted, writes, last_chunk, stats })
    }
}

/// A header decoded up to its statistics, which stay encoded until [`HeaderView::each_stat`]
/// reads them: a scan of many buckets that reads their chunks needs neither the statistics
/// nor an allocation for them.
pub struct HeaderView<'b> {
    pub count: u32,
    pub bytes: u64,
    pub min_ts: TimestampMs,
    pub max_ts: TimestampMs,
    pub sorted: bool,
    /// As [`BucketHeader::writes`].
    pub writes: SmallVec<[u64; 4]>,
    pub last_chunk: Option<u32>,
    version: u64,
    stats: &'b [u8],
}

impl<'b> HeaderView<'b> {
    pub fn decode(bytes: &'b [u8]) -> Result<Self, EmbeddedError> {
        let mut c = Cursor::new(bytes);
        let version = c.varint()?;
        if !(HEADER_VERSION_1..=HEADER_VERSION).contains(&version) {
            return Err(EmbeddedError::Corrupt(format!("unknown bucket header version {version}")));
        }
        let count = u32::try_from(c.varint()?).map_err(|_| corrupt("bucket count too large"))?;
        let bytes_ = c.varint()?;
        let min_ts = unzigzag(c.varint()?);
        let max_ts = unzigzag(c.varint()?);
        let sorted = c.u8()? != 0;
        let chunks = u32::try_from(c.varint()?).map_err(|_| corrupt("chunk count too large"))?;
        // Each chunk holds a reading at least, and a bucket fewer than `MAX_CHUNKS` (its
        // readings fit in MongoDB's 16 MiB and count more than 16 bytes each): a larger count
        // is damage, not an allocation to make.
        if chunks > count || chunks > MAX_CHUNKS {
            return Err(corrupt("chunk count beyond the bucket's readings"));
        }
        let mut last_chunk = None;
        let writes = if version >= HEADER_VERSION {
            let mut prev = 0u64;
            let mut writes = SmallVec::with_capacity(chunks as usize);
            for _ in 0..chunks {
                prev = prev.wrapping_add(unzigzag(c.varint()?) as u64);
                writes.push(prev);
            }
            last_chunk = match c.varint()? {
                0 => None,
                n => Some(u32::try_from(n - 1).map_err(|_| corrupt("last chunk too large"))?),
            };
            writes
        } else {
            smallvec::smallvec![crate::store::embedded::chunks::BY_SERIES; chunks as usize]
        };
        let stats = c.bytes(c.remaining())?;
        Ok(HeaderView {
            count,
            bytes: bytes_,
            min_ts,
            max_ts,
            sorted,
            writes,
            last_chunk,
            version,
            stats,
        })
    }

    /// Hands `each` every field's statistics, in the header's (name) order.
    pub fn each_stat(&self, mut each: impl FnMut(&str, FieldStats)) -> Result<(), EmbeddedError> {
        let mut c = Cursor::new(self.stats);
        let n = c.len()?;
        for _ in 0..n {
            let name = c.str()?;
            let count = c.varint()?;
            let (min, max, sum) = (c.f64()?, c.f64()?, c.f64()?);
            let (mut first, mut last) = (None, None);
            if self.version >= HEADER_VERSION_2 {
                let flags = c.u8()?;
                if flags & !(HAS_FIRST | HAS_LAST) != 0 {
                    return Err(corrupt("unknown field statistics flags"));
                }
                let mut point = || -> Result<_, EmbeddedError> {
                    Ok((self.min_ts.wrapping_add(unzigzag(c.varint()?)), c.f64()?))
                };
                if flags & HAS_FIRST != 0 {
                    first = Some(point()?);
                }
                if flags & HAS_LAST != 0 {
                    last = Some(point()?);
                }
            }
            each(name, FieldStats { count, min, max, sum, first, last });
        }
        c.finish()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FieldValue, Reading};
    use crate::store::embedded::chunks::BY_SERIES;

    fn bytes(readings: &[&Reading]) -> u64 {
        readings.iter().map(approx_reading_bytes).sum()
    }

    fn r(ts: i64, fields: Vec<(&str, FieldValue)>) -> Reading {
        Reading { ts, fields: fields.into_iter().map(|(n, v)| (n.into(), v)).collect() }
    }
    #[test]
    fn header_tracks_stats_order_and_roundtrips() {
        let a = r(10, vec![("v", FieldValue::Float(2.0)), ("s", FieldValue::Str("x".into()))]);
        let b = r(20, vec![("v", FieldValue::Int(-4)), ("w", FieldValue::UInt(7))]);
        let c = r(15, vec![("v", FieldValue::Bool(true))]);
        let mut h = BucketHeader::empty();
        h.append(&[&a, &b], bytes(&[&a, &b]), 7);
        assert!(h.sorted);
        h.append(&[&c], bytes(&[&c]), 300);
        assert!(!h.sorted, "a chunk starting before the bucket's last reading unsorts it");
        assert_eq!((h.count, h.chunks(), h.min_ts, h.max_ts), (3, 2, 10, 20));
        assert_eq!(h.writes, [7, 300]);
        assert_eq!(
            h.bytes,
            approx_reading_bytes(&a) + approx_reading_bytes(&b) + approx_reading_bytes(&c)
        );
        assert_eq!(
            h.stats["v"],
            FieldStats {
                count: 2,
                min: -4.0,
                max: 2.0,
                sum: -2.0,
                first: Some((10, 2.0)),
                last: Some((20, -4.0))
            }
        );
        assert_eq!(h.stats["w"], FieldStats::of(20, 7.0));
        assert!(!h.stats.contains_key("s"));
        assert_eq!(BucketHeader::decode(&h.encode()).unwrap(), h);
        assert!(BucketHeader::decode(&h.encode()[..5]).is_err());
    }

    #[test]
    fn a_version_1_header_decodes_without_first_and_last() {
        let a = r(-7_000, vec![("v", FieldValue::Float(2.5)), ("n", FieldValue::Int(3))]);
        let b = r(-9_000, vec![("v", FieldValue::Float(-1.0))]);
        let mut h = BucketHeader::empty();
        h.append(&[&b, &a], bytes(&[&b, &a]), BY_SERIES);
        assert!(!h.lacks_first_last());
        let old = BucketHeader::decode(&h.encode_version_1()).unwrap();
        assert!(old.lacks_first_last());
        assert_eq!((old.count, old.bytes, old.min_ts, old.max_ts), (2, h.bytes, -9_000, -7_000));
        for (name, s) in &old.stats {
            let new = &h.stats[name];
            assert_eq!((s.count, s.min, s.max, s.sum), (new.count, new.min, new.max, new.sum));
            assert_eq!((s.first, s.last), (None, None));
        }
        // Re-encoded, it is a header of this version that still says "unknown".
        assert_eq!(BucketHeader::decode(&old.encode()).unwrap(), old);
        // Counted again from its readings, it knows them (not its last chunk's size, which
        // only a write tells).
        let mut upgraded = old.clone();
        upgraded.recount_stats([&b, &a]);
        assert_eq!(upgraded, BucketHeader { last_chunk: None, ..h.clone() });
        assert_eq!(h.stats["v"].first, Some((-9_000, -1.0)));
        assert_eq!(h.stats["v"].last, Some((-7_000, 2.5)));
    }

    #[test]
    fn chunk_writes_roundtrip_and_older_headers_have_theirs_keyed_by_series() {
        let one = r(5, vec![("v", FieldValue::Float(1.0))]);
        let mut h = BucketHeader::empty();
        for write in [BY_SERIES, BY_SERIES, 9, 1 << 40, u64::MAX] {
            h.append(&[&one], bytes(&[&one]), write);
        }
        assert_eq!(h.last_chunk, Some(1));
        h.join_last(&[&one, &one], bytes(&[&one, &one]));
        assert_eq!(h.last_chunk, Some(3));
        assert_eq!(BucketHeader::decode(&h.encode()).unwrap(), h);
        let old = BucketHeader::decode(&h.encode_version_2()).unwrap();
        assert_eq!((old.writes.as_slice(), old.last_chunk), (&[BY_SERIES; 5][..], None));
        let unknown = BucketHeader { last_chunk: None, ..h.clone() };
        assert_eq!(BucketHeader::decode(&unknown.encode()).unwrap(), unknown);
        assert_eq!(old.stats, h.stats);
    }

    #[test]
    fn a_chunk_count_beyond_the_readings_is_corrupt() {
        let one = r(5, vec![("v", FieldValue::Float(1.0))]);
        for version in [HEADER_VERSION_1, HEADER_VERSION_2, HEADER_VERSION] {
            let mut h = BucketHeader::empty();
            h.append(&[&one], bytes(&[&one]), 3);
            h.writes.push(4);
            let err = BucketHeader::decode(&h.encode_as(version)).unwrap_err();
            assert!(err.to_string().contains("chunk count"), "version {version}: {err}");
        }
    }

    #[test]
    fn unknown_versions_and_flags_are_corrupt() {
        let mut h = BucketHeader::empty();
        let one = r(5, vec![("v", FieldValue::Float(1.0))]);
        h.append(&[&one], bytes(&[&one]), 1);
        let mut bytes = h.encode();
        bytes[0] = 4;
        assert!(BucketHeader::decode(&bytes).is_err());
        let mut bytes = h.encode();
        // The flags byte follows count, min, max and sum of the one field.
        let flags = bytes.len() - 2 * 9 - 1;
        assert_eq!(bytes[flags], HAS_FIRST | HAS_LAST);
        bytes[flags] = 4;
        assert!(BucketHeader::decode(&bytes).is_err());
    }
}
