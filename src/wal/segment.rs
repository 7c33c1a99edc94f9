//! The segment file format.
//!
//! ```text
//! segment = header record*
//! header  = "BKTDWAL\0" version:u32le flags:u32le                           (16 bytes)
//! record  = len:u32le crc:u32le first_seq:u64le count:u32le payload[len]
//! ```
//!
//! `payload` holds the logged `Vec<Item>`, item `i` with sequence number `first_seq + i`: in
//! versions 2 and 3 as `payload.rs` describes (each series and field name once a record), in
//! version 1 (still read, never written) as their postcard encoding. `crc` is the CRC-32 (IEEE,
//! `crc32fast`) of `payload ‖ first_seq ‖ count`, in that order, so the payload's part can be
//! computed before the sequence number is known (outside the order mutex). A record that is cut
//! short or fails its checksum ends what can be read of a segment: after a crash that is the
//! torn tail of the last group commit, which was never acknowledged.
//!
//! # Reused files (version 3)
//! A settled segment's file may be renamed and written again as a newer segment
//! (`Writer::delete` in the parent module): overwriting blocks a file already has makes each
//! `fdatasync` cheaper than extending a file, which must also commit the file system's journal.
//! Such a file has [`REUSED`] set in its header, and past its last record lie the bytes of its
//! earlier use. Two rules keep those from being read: a record numbered below the segment's
//! name (its first sequence number) ends the segment, since every earlier use held only lower
//! numbers; and in a reused file a record that fails its checksum or is cut short ends it
//! quietly, as the earlier use's bytes seldom start where the last record ends. The second rule
//! applies only where the earlier use's bytes can lie inside what is read: a segment this
//! process writes is read up to its synced length, where its records end (`read_chunk`'s
//! `exact`), so damage there is damage. Version 3 exists
//! so that an older bucketd refuses such a log rather than replay the earlier use's records.
//!
//! File names are the segment's first sequence number, zero-padded to 20 digits, plus
//! `.wal`, so that name order is log order.

use std::path::{Path, PathBuf};

use super::payload::{self, PayloadError};
use crate::model::{Item, Seq};

const MAGIC: &[u8; 8] = b"BKTDWAL\0";
/// What new segments are written in. A process appends only to segments it created, so an
/// older process's segments keep their version until they are deleted.
const VERSION: u32 = 3;
/// Read, for a log an older bucketd left; never written. (Version 2, also still read, is
/// version 3 without reused files.)
const POSTCARD_VERSION: u32 = 1;
/// Header flag: the file held an earlier segment, whose bytes may follow the last record.
const REUSED: u32 = 1;
pub(super) const HEADER_BYTES: usize = 16;
pub(super) const RECORD_HEADER_BYTES: usize = 20;
const EXTENSION: &str = "wal";

/// A new segment's header; `reused` when the file held an earlier segment.
pub(super) fn header(reused: bool) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    let flags = if reused { REUSED } else { 0 };
    h[12..16].copy_from_slice(&flags.to_le_bytes());
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
    pub fn encode(items: &[Item]) -> Result<Record, PayloadError> {
        let mut bytes = vec![0u8; RECORD_HEADER_BYTES];
        payload::encode(items, &mut bytes)?;
        let payload = &bytes[RECORD_HEADER_BYTES..];
        let len = u32::try_from(payload.len()).map_err(|_| PayloadError::TooLarge)?;
        let count = u32::try_from(items.len()).map_err(|_| PayloadError::TooLarge)?;
        let mut crc = crc32fast::Hasher::new();
        crc.update(payload);
        bytes[..4].copy_from_slice(&len.to_le_bytes());
        Ok(Record { bytes, crc, count })
    }

    /// The readings again, for a caller whose push failed after it gave them up.
    pub fn decode(&self) -> Result<Vec<Item>, PayloadError> {
        payload::decode(&self.bytes[RECORD_HEADER_BYTES..], self.count)
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

/// What a segment's header says, when this bucketd reads its version.
#[derive(Clone, Copy)]
struct Header {
    version: u32,
    reused: bool,
}

fn check_header(path: &Path, data: &[u8]) -> Result<Header, String> {
    if data.len() < HEADER_BYTES || &data[..8] != MAGIC {
        return Err(format!("{} is not a bucketd WAL segment", path.display()));
    }
    let version = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
    if !(POSTCARD_VERSION..=VERSION).contains(&version) {
        return Err(format!(
            "{} has WAL format version {version}; this bucketd reads versions \
             {POSTCARD_VERSION} to {VERSION}",
            path.display()
        ));
    }
    // Flags were reserved (and zero) before version 3.
    let flags = u32::from_le_bytes(data[12..16].try_into().expect("4 bytes"));
    Ok(Header { version, reused: version == VERSION && flags & REUSED != 0 })
}

/// Whether the segment file at `path` was written over a settled one (its header's flag).
#[cfg(test)]
pub(super) fn is_reused(path: &Path) -> Result<bool, String> {
    use std::io::Read;
    let mut header = [0u8; HEADER_BYTES];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .map_err(|e| format!("read {}: {e}", path.display()))?;
    Ok(check_header(path, &header)?.reused)
}

/// Why parsing stopped before the end of the data.
enum Stop {
    /// Damage: a record cut short, failing its checksum, or not decoding.
    Damage(String),
    /// A record numbered below the segment's first number: an earlier use's, in a reused file.
    Earlier,
}

/// Parses records from `data[at..]` until the end, damage, a record numbered below `first`
/// (the segment's name), or `max_readings` readings (at least one record). Returns them, where
/// parsing stopped, and why if it stopped early. A record cut short at the very end of `data`
/// is not damage when `data` is a prefix of the file: callers that read a prefix treat it as
/// "not yet".
fn parse_records(
    data: &[u8],
    mut at: usize,
    max_readings: usize,
    version: u32,
    first: Seq,
) -> (Vec<Logged>, usize, Option<Stop>) {
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
        if first_seq < first {
            return (records, at, Some(Stop::Earlier));
        }
        let items: Result<Vec<Item>, String> = if version == POSTCARD_VERSION {
            postcard::from_bytes(payload).map_err(|e| e.to_string())
        } else {
            payload::decode(payload, count).map_err(|e| e.to_string())
        };
        let items = match items {
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
    (records, at, damage.map(Stop::Damage))
}

/// Records read from a segment at an offset, for the refill.
#[derive(Debug, Default)]
pub(super) struct Chunk {
    pub records: Vec<Logged>,
    /// Where the next read starts.
    pub next_offset: u64,
    /// Nothing more will ever be read from this segment.
    pub done: bool,
    /// Why reading stopped early in a segment that will not grow, or, in one this process
    /// writes, inside what was synced.
    pub damage: Option<String>,
    /// The segment's records end here: what follows is its file's earlier use.
    pub ended: bool,
}

/// Bytes read per refill step at least; a larger record is read whole.
const CHUNK_READ_BYTES: u64 = 8 << 20;

/// Reads the intact records in `[offset, limit)` of the segment file at `path`, up to about
/// `max_readings` readings. `limit` is what is known to be on disk (synced); `exact` when it
/// is also where the segment's records end (a segment this process writes: its synced length),
/// so that nothing of a reused file's earlier use lies before it and damage there is real. A
/// file shorter than its header is a segment created just before a crash, before its header
/// was written: nothing was acknowledged from it, and nothing is read. `path` must be a
/// segment's name.
pub(super) fn read_chunk(
    path: &Path,
    offset: u64,
    limit: u64,
    exact: bool,
    max_readings: usize,
) -> Result<Chunk, String> {
    use std::io::{Read, Seek, SeekFrom};
    let offset = offset.max(HEADER_BYTES as u64);
    if offset >= limit {
        return Ok(Chunk { next_offset: offset, ..Chunk::default() });
    }
    let first = parse_file_name(path)
        .ok_or_else(|| format!("{} is not named as a WAL segment", path.display()))?;
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // Every step, not only the first: the version says how to decode.
    let mut header = [0u8; HEADER_BYTES];
    file.read_exact(&mut header).map_err(|e| format!("read {}: {e}", path.display()))?;
    let header = check_header(path, &header)?;
    file.seek(SeekFrom::Start(offset)).map_err(|e| format!("seek {}: {e}", path.display()))?;
    let mut want = (limit - offset).min(CHUNK_READ_BYTES);
    loop {
        let mut data = vec![0u8; want as usize];
        file.read_exact(&mut data).map_err(|e| format!("read {}: {e}", path.display()))?;
        let (records, end, stop) = parse_records(&data, 0, max_readings, header.version, first);
        let whole = want == limit - offset;
        let damage = match stop {
            Some(Stop::Earlier) => {
                let next_offset = offset + end as u64;
                return Ok(Chunk { records, next_offset, ended: true, ..Chunk::default() });
            }
            Some(Stop::Damage(why)) => Some(why),
            None => None,
        };
        if records.is_empty() && damage.is_some() && !whole {
            // A record larger than what was read: read up to the limit.
            want = limit - offset;
            file.seek(SeekFrom::Start(offset))
                .map_err(|e| format!("seek {}: {e}", path.display()))?;
            continue;
        }
        // Damage inside what is known to be durable is real, unless the file held an earlier
        // segment whose bytes may follow the last record (only where `limit` is the file's
        // length, not the segment's); a record cut by our own read size is not.
        let next_offset = offset + end as u64;
        if whole && damage.is_some() && header.reused && !exact {
            return Ok(Chunk { records, next_offset, ended: true, ..Chunk::default() });
        }
        let damage = if whole { damage } else { None };
        return Ok(Chunk { records, next_offset, damage, ..Chunk::default() });
    }
}

pub(super) fn path_in(dir: &Path, first_seq: Seq) -> PathBuf {
    dir.join(file_name(first_seq))
}

const SPARE_EXTENSION: &str = "spare";

/// A settled segment's file waiting to be written over: not a segment, never read.
pub(super) fn spare_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id}.{SPARE_EXTENSION}"))
}

pub(super) fn is_spare(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == SPARE_EXTENSION)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FieldValue, Reading, SeriesMeta};

    fn items(n: usize) -> Vec<Item> {
        (0..n)
            .map(|i| {
                (
                    SeriesMeta::new(&format!("m,s={i}"), "m", &[("s", i.to_string())]).into(),
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

    /// A segment's bytes, and where each record ends.
    fn segment(records: &[(Seq, Vec<Item>)]) -> (Vec<u8>, Vec<usize>) {
        segment_with(header(false), records)
    }

    fn segment_with(
        header: [u8; HEADER_BYTES],
        records: &[(Seq, Vec<Item>)],
    ) -> (Vec<u8>, Vec<usize>) {
        let mut data = header.to_vec();
        let mut ends = Vec::new();
        for (seq, items) in records {
            Record::encode(items).unwrap().finish_into(*seq, &mut data);
            ends.push(data.len());
        }
        (data, ends)
    }

    /// What replay reads of a segment file holding `data`: `read_chunk` from the start, chunk
    /// after chunk of at most `max_readings` readings, as the refill calls it.
    struct Replayed {
        records: Vec<Logged>,
        /// Where reading stopped.
        end: u64,
        damage: Option<String>,
        /// Stopped where a reused file's earlier bytes begin.
        ended: bool,
    }

    fn replay(dir: &Path, data: &[u8], max_readings: usize) -> Result<Replayed, String> {
        replay_named(dir, 1, data, max_readings)
    }

    /// `replay` of a segment named by its first sequence number `first`.
    fn replay_named(
        dir: &Path,
        first: Seq,
        data: &[u8],
        max_readings: usize,
    ) -> Result<Replayed, String> {
        let path = path_in(dir, first);
        std::fs::write(&path, data).unwrap();
        let limit = data.len() as u64;
        let mut out = Replayed { records: Vec::new(), end: 0, damage: None, ended: false };
        loop {
            let chunk = read_chunk(&path, out.end, limit, false, max_readings)?;
            let progressed = chunk.next_offset > out.end.max(HEADER_BYTES as u64);
            out.records.extend(chunk.records);
            out.end = chunk.next_offset;
            if chunk.damage.is_some() || chunk.ended || !progressed || out.end >= limit {
                out.damage = chunk.damage;
                out.ended = chunk.ended;
                std::fs::remove_file(&path).unwrap();
                return Ok(out);
            }
        }
    }

    fn seqs(records: &[Logged]) -> Vec<(Seq, usize)> {
        records.iter().map(|r| (r.first_seq, r.items.len())).collect()
    }

    #[test]
    fn records_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let (data, _) =
            segment(&[(10, items(3)), (13, items(1)), (14, Vec::new()), (14, items(2))]);
        for max_readings in [usize::MAX, 1, 2] {
            let read = replay(dir.path(), &data, max_readings).unwrap();
            assert!(read.damage.is_none(), "{:?}", read.damage);
            assert_eq!(read.end, data.len() as u64);
            assert_eq!(seqs(&read.records), vec![(10, 3), (13, 1), (14, 0), (14, 2)]);
            assert_eq!(read.records[0].items, items(3));
            assert_eq!(read.records[3].items, items(2));
        }
    }

    #[test]
    fn a_torn_tail_at_any_byte_ends_the_segment_at_the_last_intact_record() {
        let dir = tempfile::tempdir().unwrap();
        let (whole, ends) = segment(&[(1, items(2)), (3, items(1)), (4, items(3))]);
        for cut in 0..=whole.len() {
            let read = replay(dir.path(), &whole[..cut], usize::MAX).unwrap();
            // A segment cut inside its header: created, never written to.
            let intact = ends.iter().filter(|&&end| end <= cut).count();
            assert_eq!(read.records.len(), intact, "cut at {cut}");
            let last_end = if intact == 0 { HEADER_BYTES } else { ends[intact - 1] };
            if cut >= HEADER_BYTES {
                assert_eq!(read.end, last_end as u64, "cut at {cut}");
            }
            let at_boundary = cut <= HEADER_BYTES || ends.contains(&cut);
            assert_eq!(read.damage.is_some(), !at_boundary, "cut at {cut}: {:?}", read.damage);
        }
    }

    #[test]
    fn a_flipped_bit_anywhere_in_a_record_ends_the_segment_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let (data, ends) = segment(&[(1, items(2)), (3, items(1)), (4, items(2))]);
        for at in HEADER_BYTES..data.len() {
            for bit in 0..8 {
                let mut damaged = data.clone();
                damaged[at] ^= 1 << bit;
                let read = replay(dir.path(), &damaged, usize::MAX).unwrap();
                let before = ends.iter().filter(|&&end| end <= at).count();
                assert_eq!(read.records.len(), before, "bit {bit} of byte {at}");
                assert!(read.damage.is_some(), "bit {bit} of byte {at}");
            }
        }
        // The sequence number is covered by the checksum.
        let mut damaged = data.clone();
        damaged[HEADER_BYTES + 9] ^= 1;
        let damage = replay(dir.path(), &damaged, usize::MAX).unwrap().damage.unwrap();
        assert!(damage.contains("checksum"), "{damage}");
    }

    /// A reused file: a newer segment written over an older one's bytes. Whether the older
    /// bytes after the last new record start on a record boundary (they then hold intact
    /// records, numbered lower) or not (they are then garbage as a record), the segment ends
    /// at its last record without damage; torn new records end it there too.
    #[test]
    fn a_reused_file_ends_at_its_last_record_whatever_follows() {
        let dir = tempfile::tempdir().unwrap();
        let (old, old_ends) = segment(&(0..6).map(|i| (1 + 10 * i, items(3))).collect::<Vec<_>>());
        // The same sizes as the old records: the old bytes go on at a record boundary.
        let aligned: Vec<(Seq, Vec<Item>)> = (0..2).map(|i| (100 + 10 * i, items(3))).collect();
        // One reading fewer each: the old bytes go on in the middle of a record.
        let misaligned: Vec<(Seq, Vec<Item>)> = (0..2).map(|i| (100 + 10 * i, items(2))).collect();
        for (case, new) in [("aligned", aligned), ("misaligned", misaligned)] {
            let (fresh, ends) = segment_with(header(true), &new);
            let mut data = old.clone();
            data[..fresh.len()].copy_from_slice(&fresh);
            assert_eq!(old_ends.contains(&fresh.len()), case == "aligned");
            for max_readings in [usize::MAX, 1] {
                let read = replay_named(dir.path(), 100, &data, max_readings).unwrap();
                assert!(read.damage.is_none(), "{case}: {:?}", read.damage);
                assert!(read.ended, "{case}");
                assert_eq!(seqs(&read.records), vec![(100, new[0].1.len()), (110, new[1].1.len())]);
                assert_eq!(read.end, fresh.len() as u64, "{case}");
            }
            // The second new record torn: the segment ends after the first, quietly.
            let mut torn = data.clone();
            torn[ends[1] - 1] ^= 1;
            let read = replay_named(dir.path(), 100, &torn, usize::MAX).unwrap();
            assert_eq!(seqs(&read.records), vec![(100, new[0].1.len())], "{case}");
            assert!(read.damage.is_none() && read.ended, "{case}");
        }
        // Without the flag (a file that was never reused) garbage after the records is damage,
        // but lower-numbered intact records still end the segment.
        let (fresh, _) = segment(&[(100, items(2))]);
        let mut data = old.clone();
        data[..fresh.len()].copy_from_slice(&fresh);
        let read = replay_named(dir.path(), 100, &data, usize::MAX).unwrap();
        assert_eq!(seqs(&read.records), vec![(100, 2)]);
        assert!(read.damage.is_some() && !read.ended);
        let (fresh, _) = segment(&[(100, items(3))]);
        data[..fresh.len()].copy_from_slice(&fresh);
        let read = replay_named(dir.path(), 100, &data, usize::MAX).unwrap();
        assert_eq!(seqs(&read.records), vec![(100, 3)]);
        assert!(read.damage.is_none() && read.ended);
    }

    /// In a reused file that this process writes, the synced length is where the segment's
    /// records end, so nothing of the earlier use lies before it: damage there is reported,
    /// not taken for the earlier use's bytes.
    #[test]
    fn damage_before_the_synced_length_of_a_reused_file_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (old, _) = segment(&(0..6).map(|i| (1 + 10 * i, items(3))).collect::<Vec<_>>());
        let (fresh, ends) = segment_with(header(true), &[(100, items(2)), (110, items(2))]);
        let mut data = old.clone();
        data[..fresh.len()].copy_from_slice(&fresh);
        data[ends[1] - 1] ^= 1;
        let path = path_in(dir.path(), 100);
        std::fs::write(&path, &data).unwrap();
        let synced = fresh.len() as u64;
        let chunk = read_chunk(&path, 0, synced, true, usize::MAX).unwrap();
        assert_eq!(seqs(&chunk.records), vec![(100, 2)]);
        assert_eq!(chunk.next_offset, ends[0] as u64);
        assert!(!chunk.ended);
        let damage = chunk.damage.expect("damage inside the synced length is reported");
        assert!(damage.contains("checksum"), "{damage}");
        // Read up to the file's length (a recovered segment), the same bytes end it quietly.
        let chunk = read_chunk(&path, 0, data.len() as u64, false, usize::MAX).unwrap();
        assert_eq!(seqs(&chunk.records), vec![(100, 2)]);
        assert!(chunk.ended && chunk.damage.is_none());
    }

    /// Segments the previous release wrote (version 2, no flags) are read as before.
    #[test]
    fn a_version_2_segment_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let (mut data, _) = segment(&[(5, items(3)), (8, items(2))]);
        data[8..12].copy_from_slice(&2u32.to_le_bytes());
        let read = replay(dir.path(), &data, usize::MAX).unwrap();
        assert!(read.damage.is_none() && !read.ended);
        assert_eq!(seqs(&read.records), vec![(5, 3), (8, 2)]);
    }

    #[test]
    fn a_record_larger_than_a_read_step_is_read_whole_or_found_torn() {
        let dir = tempfile::tempdir().unwrap();
        let mut big = items(1);
        big[0].1.fields[2].1 = FieldValue::Str("x".repeat(CHUNK_READ_BYTES as usize + 4096));
        let (data, ends) = segment(&[(1, items(2)), (3, big.clone()), (4, items(1))]);
        assert!(ends[1] - ends[0] > CHUNK_READ_BYTES as usize);
        for max_readings in [usize::MAX, 1] {
            let read = replay(dir.path(), &data, max_readings).unwrap();
            assert!(read.damage.is_none(), "{:?}", read.damage);
            assert_eq!(seqs(&read.records), vec![(1, 2), (3, 1), (4, 1)]);
            assert_eq!(read.records[1].items, big);
        }
        let read = replay(dir.path(), &data[..ends[1] - 1], usize::MAX).unwrap();
        assert_eq!(seqs(&read.records), vec![(1, 2)]);
        assert!(read.damage.is_some());
    }

    #[test]
    fn a_segment_an_older_bucketd_wrote_in_postcard_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut data = header(false).to_vec();
        data[8..12].copy_from_slice(&POSTCARD_VERSION.to_le_bytes());
        for (first_seq, items) in [(5u64, items(3)), (8, items(2))] {
            let payload = postcard::to_stdvec(&items).unwrap();
            let count = items.len() as u32;
            let mut crc = crc32fast::Hasher::new();
            crc.update(&payload);
            crc.update(&first_seq.to_le_bytes());
            crc.update(&count.to_le_bytes());
            data.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            data.extend_from_slice(&crc.finalize().to_le_bytes());
            data.extend_from_slice(&first_seq.to_le_bytes());
            data.extend_from_slice(&count.to_le_bytes());
            data.extend_from_slice(&payload);
        }
        // In steps of one record too: every step reads the version from the header.
        for max_readings in [usize::MAX, 1] {
            let read = replay(dir.path(), &data, max_readings).unwrap();
            assert!(read.damage.is_none(), "{:?}", read.damage);
            assert_eq!(seqs(&read.records), vec![(5, 3), (8, 2)]);
            assert_eq!(read.records[1].items, items(2));
        }
    }

    #[test]
    fn a_bad_header_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (data, _) = segment(&[(1, items(1))]);
        let err = replay(dir.path(), b"hello world, not a wal", usize::MAX).err().unwrap();
        assert!(err.contains("not a bucketd WAL segment"), "{err}");
        // Magic and version; the reserved bytes are not checked.
        for at in 0..12 {
            let mut damaged = data.clone();
            damaged[at] ^= 0x10;
            assert!(replay(dir.path(), &damaged, usize::MAX).is_err(), "byte {at}");
        }
        let mut newer = data.clone();
        newer[8] = 9;
        let err = replay(dir.path(), &newer, usize::MAX).err().unwrap();
        assert!(err.contains("version 9"), "{err}");
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
