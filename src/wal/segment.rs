//! The segment file format.
//!
//! ```text
//! segment = header record*
//! header  = "BKTDWAL\0" version:u32le reserved:u32le                        (16 bytes)
//! record  = len:u32le crc:u32le first_seq:u64le count:u32le payload[len]
//! ```
//!
//! `payload` is the postcard encoding of the logged `Vec<Item>`; item `i`
//! has sequence number `first_seq + i`. `crc` is the CRC-32 (IEEE, `crc32fast`) of
//! `payload ‖ first_seq ‖ count`, in that order, so the payload's part can be computed before
//! the sequence number is known (outside the order mutex). A record that is cut short or fails
//! its checksum ends what can be read of a segment: after a crash that is the torn tail of the
//! last group commit, which was never acknowledged.
//!
//! File names are the segment's first sequence number, zero-padded to 20 digits, plus
//! `.wal`, so that name order is log order.

use std::path::{Path, PathBuf};

use crate::model::{Item, Seq};

const MAGIC: &[u8; 8] = b"BKTDWAL\0";
const VERSION: u32 = 1;
pub(super) const HEADER_BYTES: usize = 16;
pub(super) const RECORD_HEADER_BYTES: usize = 20;
const EXTENSION: &str = "wal";

pub(super) fn header() -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

pub(super) fn file_name(first_seq: Seq) -> String {
    format!("{first_seq:020}.{EXTENSION}")
}

/// The first sequence number a segment file's name stands for; `None` for other files.
pub(super) fn parse_file_name(path: &Path) -> Option<Seq> {
    if path.extension()? != EXTENSION {
        return None;
    }
    let stem = path.file_stem()?.to_str()?;
    (stem.len() == 20).then(|| stem.parse().ok()).flatten()
}

/// A record encoded except for its sequence number, which the order mutex assigns.
pub struct Record {
    bytes: Vec<u8>,
    crc: crc32fast::Hasher,
    count: u32,
}

impl Record {
    pub fn encode(items: &[Item]) -> Result<Record, postcard::Error> {
        let mut bytes = vec![0u8; RECORD_HEADER_BYTES];
        bytes = postcard::to_extend(items, bytes)?;
        let payload = &bytes[RECORD_HEADER_BYTES..];
        let len = u32::try_from(payload.len()).map_err(|_| postcard::Error::SerializeBufferFull)?;
        let count = u32::try_from(items.len()).map_err(|_| postcard::Error::SerializeBufferFull)?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(payload);
        bytes[..4].copy_from_slice(&len.to_le_bytes());
        Ok(Record { bytes, crc, count })
    }

    /// The readings again, for a caller whose push failed after it gave them up.
    pub fn decode(&self) -> Result<Vec<Item>, postcard::Error> {
        postcard::from_bytes(&self.bytes[RECORD_HEADER_BYTES..])
    }

    pub fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// Completes the record with its first sequence number and appends it to `out`.
    pub(super) fn finish_into(&self, first_seq: Seq, out: &mut Vec<u8>) {
        let mut crc = self.crc.clone();
        crc.update(&first_seq.to_le_bytes());
        crc.update(&self.count.to_le_bytes());
        let start = out.len();
        out.extend_from_slice(&self.bytes);
        out[start + 4..start + 8].copy_from_slice(&crc.finalize().to_le_bytes());
        out[start + 8..start + 16].copy_from_slice(&first_seq.to_le_bytes());
        out[start + 16..start + 20].copy_from_slice(&self.count.to_le_bytes());
    }
}

/// One record read back.
#[derive(Debug)]
pub(super) struct Logged {
    pub first_seq: Seq,
    pub items: Vec<Item>,
}

/// What reading a whole segment found.
#[cfg(test)]
#[derive(Debug)]
pub(super) struct SegmentRead {
    pub records: Vec<Logged>,
    /// Bytes of valid records (header included).
    pub valid_bytes: usize,
    /// Why reading stopped before the end of the file, if it did.
    pub damage: Option<String>,
}

/// Reads every intact record of a segment file's contents.
#[cfg(test)]
pub(super) fn read(path: &Path, data: &[u8]) -> Result<SegmentRead, String> {
    // An empty file is a segment created just before a crash, before its header was written:
    // nothing was acknowledged from it.
    if data.is_empty() {
        return Ok(SegmentRead { records: Vec::new(), valid_bytes: 0, damage: None });
    }
    check_header(path, data)?;
    let (records, valid_bytes, damage) = parse_records(data, HEADER_BYTES, usize::MAX);
    Ok(SegmentRead { records, valid_bytes, damage })
}

fn check_header(path: &Path, data: &[u8]) -> Result<(), String> {
    if data.len() < HEADER_BYTES || &data[..8] != MAGIC {
        return Err(format!("{} is not a bucketd WAL segment", path.display()));
    }
    let version = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!(
            "{} has WAL format version {version}; this bucketd reads version {VERSION}",
            path.display()
        ));
    }
    Ok(())
}

/// Parses records from `data[at..]` until the end, damage, or `max_readings` readings (at
/// least one record). Returns them, where parsing stopped, and the damage if any. A record
/// cut short at the very end of `data` is not damage when `data` is a prefix of the file:
/// callers that read a prefix treat it as "not yet".
fn parse_records(
    data: &[u8],
    mut at: usize,
    max_readings: usize,
) -> (Vec<Logged>, usize, Option<String>) {
    let mut records = Vec::new();
    let mut readings = 0usize;
    let damage = loop {
        if at == data.len() || (readings >= max_readings && !records.is_empty()) {
            break None;
        }
        let Some(head) = data.get(at..at + RECORD_HEADER_BYTES) else {
            break Some(format!("record header cut short at byte {at}"));
        };
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        let first_seq = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        let count = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes"));
        let body_at = at + RECORD_HEADER_BYTES;
        let Some(payload) = data.get(body_at..body_at.saturating_add(len)) else {
            break Some(format!("record at byte {at} cut short"));
        };
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(payload);
        hasher.update(&first_seq.to_le_bytes());
        hasher.update(&count.to_le_bytes());
        if hasher.finalize() != crc {
            break Some(format!("record at byte {at} fails its checksum"));
        }
        let items: Vec<Item> = match postcard::from_bytes(payload) {
            Ok(items) => items,
            Err(e) => break Some(format!("record at byte {at} does not decode: {e}")),
        };
        if items.len() != count as usize {
            break Some(format!("record at byte {at} holds {} items, not {count}", items.len()));
        }
        readings += items.len();
        records.push(Logged { first_seq, items });
        at = body_at + len;
    };
    (records, at, damage)
}

/// Records read from a segment at an offset, for the refill.
#[derive(Debug, Default)]
pub(super) struct Chunk {
    pub records: Vec<Logged>,
    /// Where the next read starts.
    pub next_offset: u64,
    /// Nothing more will ever be read from this segment.
    pub done: bool,
    /// Why reading stopped early in a segment that will not grow.
    pub damage: Option<String>,
}

/// Bytes read per refill step at least; a larger record is read whole.
const CHUNK_READ_BYTES: u64 = 8 << 20;

/// Reads the intact records in `[offset, limit)` of the segment file at `path`, up to about
/// `max_readings` readings. `limit` is what is known to be on disk (synced).
pub(super) fn read_chunk(
    path: &Path,
    offset: u64,
    limit: u64,
    max_readings: usize,
) -> Result<Chunk, String> {
    use std::io::{Read, Seek, SeekFrom};
    let offset = offset.max(HEADER_BYTES as u64);
    if offset >= limit {
        return Ok(Chunk { next_offset: offset, ..Chunk::default() });
    }
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if offset == HEADER_BYTES as u64 {
        let mut header = [0u8; HEADER_BYTES];
        file.read_exact(&mut header).map_err(|e| format!("read {}: {e}", path.display()))?;
        check_header(path, &header)?;
    }
    file.seek(SeekFrom::Start(offset)).map_err(|e| format!("seek {}: {e}", path.display()))?;
    let mut want = (limit - offset).min(CHUNK_READ_BYTES);
    loop {
        let mut data = vec![0u8; want as usize];
        file.read_exact(&mut data).map_err(|e| format!("read {}: {e}", path.display()))?;
        let (records, end, damage) = parse_records(&data, 0, max_readings);
        let whole = want == limit - offset;
        if records.is_empty() && damage.is_some() && !whole {
            // A record larger than what was read: read up to the limit.
            want = limit - offset;
            file.seek(SeekFrom::Start(offset))
                .map_err(|e| format!("seek {}: {e}", path.display()))?;
            continue;
        }
        // Damage inside what is known to be durable is real; a record cut by our own read
        // size is not.
        let damage = if whole { damage } else { None };
        return Ok(Chunk { records, next_offset: offset + end as u64, done: false, damage });
    }
}

pub(super) fn path_in(dir: &Path, first_seq: Seq) -> PathBuf {
    dir.join(file_name(first_seq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FieldValue, Reading, SeriesMeta};

    fn items(n: usize) -> Vec<Item> {
        (0..n)
            .map(|i| {
                (
                    SeriesMeta {
                        key: format!("m,s={i}"),
                        measurement: "m".into(),
                        tags: vec![("s".into(), i.to_string())],
                    }
                    .into(),
                    Reading {
                        ts: i as i64,
                        fields: smallvec::smallvec![
                            ("f".into(), FieldValue::Float(i as f64 / 3.0)),
                            ("u".into(), FieldValue::UInt(u64::MAX)),
                            ("s".into(), FieldValue::Str("x\ny".into())),
                            ("b".into(), FieldValue::Bool(true)),
                            ("i".into(), FieldValue::Int(-7)),
                        ],
                    },
                )
            })
            .collect()
    }

    fn segment(records: &[(Seq, Vec<Item>)]) -> Vec<u8> {
        let mut data = header().to_vec();
        for (seq, items) in records {
            Record::encode(items).unwrap().finish_into(*seq, &mut data);
        }
        data
    }

    #[test]
    fn records_round_trip() {
        let data = segment(&[(10, items(3)), (13, items(1)), (14, Vec::new())]);
        let read = read(Path::new("x.wal"), &data).unwrap();
        assert!(read.damage.is_none());
        assert_eq!(read.valid_bytes, data.len());
        let got: Vec<(Seq, usize)> =
            read.records.iter().map(|r| (r.first_seq, r.items.len())).collect();
        assert_eq!(got, vec![(10, 3), (13, 1), (14, 0)]);
        assert_eq!(read.records[0].items, items(3));
    }

    #[test]
    fn a_torn_tail_ends_the_segment_at_the_last_intact_record() {
        let whole = segment(&[(1, items(2)), (3, items(2))]);
        let first_end = segment(&[(1, items(2))]).len();
        for cut in first_end..whole.len() {
            let read = read(Path::new("x.wal"), &whole[..cut]).unwrap();
            assert_eq!(read.records.len(), 1, "cut at {cut}");
            assert_eq!(read.valid_bytes, first_end);
            assert_eq!(read.damage.is_some(), cut > first_end, "cut at {cut}");
        }
    }

    #[test]
    fn a_flipped_bit_fails_the_checksum() {
        let mut data = segment(&[(1, items(2)), (3, items(2))]);
        let last = data.len() - 3;
        data[last] ^= 0x20;
        let read = read(Path::new("x.wal"), &data).unwrap();
        assert_eq!(read.records.len(), 1);
        assert!(read.damage.unwrap().contains("checksum"));
        // The sequence number is covered too.
        let mut data = segment(&[(1, items(1))]);
        data[HEADER_BYTES + 9] ^= 1;
        assert!(read_damage(&data).contains("checksum"));
    }

    fn read_damage(data: &[u8]) -> String {
        read(Path::new("x.wal"), data).unwrap().damage.unwrap_or_default()
    }

    #[test]
    fn foreign_files_are_refused_and_empty_ones_are_empty() {
        assert!(read(Path::new("x.wal"), b"hello world, not a wal").is_err());
        assert!(read(Path::new("x.wal"), b"").unwrap().records.is_empty());
        let mut newer = header();
        newer[8] = 9;
        assert!(read(Path::new("x.wal"), &newer).unwrap_err().contains("version 9"));
    }

    #[test]
    fn file_names_sort_in_log_order() {
        assert_eq!(parse_file_name(Path::new(&file_name(42))), Some(42));
        assert_eq!(parse_file_name(Path::new(&file_name(u64::MAX))), Some(u64::MAX));
        assert!(file_name(9) < file_name(10));
        assert_eq!(parse_file_name(Path::new("42.wal")), None);
        assert_eq!(parse_file_name(Path::new("00000000000000000042.tmp")), None);
    }
}
