//! One series' readings of one hour as typed slots: a timestamp, a sequence number, and per
//! field a kind and 64 value bits for each reading. A reading of up to ten fields so costs 16
//! bytes plus 8 per field (a `Reading` in a vector costs about 120), which is what lets the
//! buffers wait for a longer flush interval within the same memory. The buffers append to
//! them, and a flushed buffer's rows are moved, as they are, into the [`Batch`](super::Batch)
//! the store writes, which makes the batch's readings only when it writes that batch.
//!
//! A field's column holds one slot per reading; readings that lack the field have an absent
//! slot, and a field may change its type from one reading to the next (the kind is per slot).
//! Readings come back with their fields in column order, the order in which the buffer first
//! met each name: a reading that sent its fields in another order returns them reordered, the
//! same names and values.

use super::{FieldName, FieldValue, Fields, Reading, Seq, TimestampMs};

/// The readings, row after row, in blocks of `BLOCK_ROWS` rows, so that appending a reading
/// writes one place in memory (a buffer per sensor is thousands of buffers, each append a
/// likely cache miss; one vector per column made it six). A row is `[head, seq, more kinds..,
/// bits..]`: the head holds the timestamp as a 32-bit offset from `base` (a buffer holds one
/// hour) and the kinds of the first `HEAD_KINDS` fields, 3 bits each; the kinds of further
/// fields fill `MORE_KINDS` to a word; then one word of value bits per field.
#[derive(Clone, Default)]
pub struct Rows {
    /// The start of the hour of the first reading pushed; timestamps are stored from it.
    base: TimestampMs,
    /// Inline while few: every push compares its names with these, and a vector of its own
    /// was one more cache miss per sensor per merge (the buffer itself is already in cache
    /// from the map lookup that found it).
    names: smallvec::SmallVec<[FieldName; 4]>,
    /// The rows after the full blocks, fewer than `BLOCK_ROWS`; never given room for more.
    /// Not empty while any row is held.
    tail: Vec<u64>,
    /// Boxed, as most buffers have neither full blocks nor strings, and every sensor's first
    /// hour buffer lives in the map's table: with a million sensors each inline byte is a MB.
    more: Option<Box<More>>,
}

#[derive(Clone, Default)]
struct More {
    /// Blocks of exactly `BLOCK_ROWS` rows, oldest first.
    full: Vec<Box<[u64]>>,
    /// String values, by index from their rows.
    strs: Vec<String>,
}

/// The rows of the `full` blocks and then of `tail`, `stride` words each.
fn rows_of<'a>(
    full: &'a [Box<[u64]>],
    tail: &'a [u64],
    stride: usize,
) -> impl Iterator<Item = &'a [u64]> {
    full.iter()
        .map(|b| &b[..])
        .chain(std::iter::once(tail))
        .flat_map(move |w| w.chunks_exact(stride))
}

/// Rows per block. A buffer that outgrows one block is given another instead of being copied
/// into a larger vector: growing one vector by a quarter copied each row about four times
/// over its life, and those copies (`realloc`, the reads and writes of memory long out of
/// cache) were a fifth of the merge. A block of two-field rows is 2 KiB; at most one block
/// per buffer is partly empty.
const BLOCK_ROWS: usize = 64;

const ABSENT: u8 = 0;
const FLOAT: u8 = 1;
const INT: u8 = 2;
const UINT: u8 = 3;
const BOOL: u8 = 4;
const STR: u8 = 5;

const KIND_BITS: usize = 3;
const KIND_MASK: u64 = 0b111;
const HEAD_KINDS: usize = 10;
const MORE_KINDS: usize = 21;

/// Words of kinds beyond the head's.
fn kind_words(fields: usize) -> usize {
    fields.saturating_sub(HEAD_KINDS).div_ceil(MORE_KINDS)
}

fn stride(fields: usize) -> usize {
    2 + kind_words(fields) + fields
}

/// Where the kind of column `c` lives in a row: (word, shift).
fn kind_slot(c: usize) -> (usize, usize) {
    if c < HEAD_KINDS {
        (0, 32 + c * KIND_BITS)
    } else {
        (2 + (c - HEAD_KINDS) / MORE_KINDS, (c - HEAD_KINDS) % MORE_KINDS * KIND_BITS)
    }
}

fn kind_of(row: &[u64], c: usize) -> u8 {
    let (word, shift) = kind_slot(c);
    ((row[word] >> shift) & KIND_MASK) as u8
}

impl Rows {
    fn stride(&self) -> usize {
        stride(self.names.len())
    }

    pub fn len(&self) -> usize {
        self.full().len() * BLOCK_ROWS + self.tail.len() / self.stride()
    }

    pub fn is_empty(&self) -> bool {
        self.tail.is_empty()
    }

    fn full(&self) -> &[Box<[u64]>] {
        self.more.as_ref().map_or(&[], |m| &m.full)
    }

    fn strs(&self) -> &[String] {
        self.more.as_ref().map_or(&[], |m| &m.strs)
    }

    fn more_mut(&mut self) -> &mut More {
        self.more.get_or_insert_with(Default::default)
    }

    fn row(&self, row: usize) -> &[u64] {
        let stride = self.stride();
        let (block, i) = (row / BLOCK_ROWS, row % BLOCK_ROWS);
        let words = self.full().get(block).map_or(&self.tail[..], |b| &b[..]);
        &words[i * stride..(i + 1) * stride]
    }

    /// Every row, in order.
    fn rows(&self) -> impl Iterator<Item = &[u64]> {
        rows_of(self.full(), &self.tail, self.stride())
    }

    /// A new last row, zeroed (every field absent).
    fn append_row(&mut self) -> &mut [u64] {
        let row = self.stride();
        let block = BLOCK_ROWS * row;
        if self.tail.len() == block {
            let full = std::mem::replace(&mut self.tail, Vec::with_capacity(block));
            self.more_mut().full.push(full.into_boxed_slice());
        }
        let at = self.tail.len();
        if at + row > self.tail.capacity() {
            // A quarter more (at least two rows) up to a block, not twice: doubling left a
            // third of the rows' memory unused on average, and a slow sensor's ten rows sat in
            // room for sixteen. The first row alone: a sensor that sends once per flush
            // interval holds one (a million of them, 96 MB). Never past a block, so that a
            // full tail becomes a block without being copied.
            let grow = if at == 0 && self.full().is_empty() { row } else { (at / 4).max(2 * row) };
            self.tail.reserve_exact(grow.min(block - at));
        }
        self.tail.resize(at + row, 0);
        &mut self.tail[at..]
    }

    pub fn ts(&self, row: usize) -> TimestampMs {
        self.ts_of(self.row(row)[0])
    }

    fn ts_of(&self, head: u64) -> TimestampMs {
        self.base + TimestampMs::from(head as u32 as i32)
    }

    /// Every timestamp held, in row order.
    pub fn timestamps(&self) -> impl Iterator<Item = TimestampMs> + '_ {
        self.rows().map(|row| self.ts_of(row[0]))
    }

    /// The sequence number of the reading in `row`.
    pub fn seq(&self, row: usize) -> Seq {
        self.row(row)[1]
    }

    /// Every sequence number held, in row order.
    pub fn seqs(&self) -> impl Iterator<Item = Seq> + '_ {
        self.rows().map(|row| row[1])
    }

    /// The column of `name`, added (every held row gets it absent) when new.
    fn column(&mut self, j: usize, name: &FieldName) -> usize {
        // Sensors send the same fields in the same order: the j-th field is column j.
        if self.names.get(j).is_some_and(|n| n == name) {
            return j;
        }
        if let Some(c) = self.names.iter().position(|n| n == name) {
            return c;
        }
        let fields = self.names.len();
        let (kw_old, kw_new) = (kind_words(fields), kind_words(fields + 1));
        let old_stride = self.stride();
        let old_full = self.more.as_mut().map(|m| std::mem::take(&mut m.full)).unwrap_or_default();
        let old_tail = std::mem::take(&mut self.tail);
        self.names.push(name.clone());
        for row in rows_of(&old_full, &old_tail, old_stride) {
            let new = self.append_row();
            new[..2 + kw_old].copy_from_slice(&row[..2 + kw_old]);
            new[2 + kw_new..2 + kw_new + fields].copy_from_slice(&row[2 + kw_old..]);
        }
        fields
    }

    /// Appends one reading. A field named twice in one reading keeps its last value (ingest
    /// refuses such readings).
    pub fn push(&mut self, reading: Reading, seq: Seq) {
        let cols: smallvec::SmallVec<[usize; 8]> =
            reading.fields.iter().enumerate().map(|(j, (name, _))| self.column(j, name)).collect();
        let kw = kind_words(self.names.len());
        if self.is_empty() {
            self.base = crate::model::hour_start(reading.ts);
        }
        // Within an hour buffer the offset is under an hour; the check costs nothing beside
        // the cache miss of the append.
        let offset = i32::try_from(reading.ts - self.base).expect("a buffer holds one hour");
        // Read only when a string comes: the count lives behind `more`, which a buffer with
        // full blocks has, and reading it for every push was a cache miss per sensor per
        // merge (two fifths of this function's time, flat out).
        let first_str = if reading.fields.iter().any(|(_, v)| matches!(v, FieldValue::Str(_))) {
            self.strs().len()
        } else {
            0
        };
        let mut strs: smallvec::SmallVec<[String; 1]> = smallvec::SmallVec::new();
        let row = self.append_row();
        row[0] = u64::from(offset as u32);
        row[1] = seq;
        for (c, (_, value)) in cols.into_iter().zip(reading.fields) {
            let (kind, bits) = match value {
                FieldValue::Float(v) => (FLOAT, v.to_bits()),
                FieldValue::Int(v) => (INT, v as u64),
                FieldValue::UInt(v) => (UINT, v),
                FieldValue::Bool(v) => (BOOL, u64::from(v)),
                FieldValue::Str(s) => {
                    strs.push(s);
                    (STR, (first_str + strs.len() - 1) as u64)
                }
            };
            let (word, shift) = kind_slot(c);
            row[word] = (row[word] & !(KIND_MASK << shift)) | (u64::from(kind) << shift);
            row[2 + kw + c] = bits;
        }
        if !strs.is_empty() {
            self.more_mut().strs.extend(strs);
        }
    }

    /// The reading in `row`, its fields in column order.
    pub fn reading(&self, row: usize) -> Reading {
        self.reading_of(self.row(row))
    }

    fn reading_of(&self, words: &[u64]) -> Reading {
        let kw = kind_words(self.names.len());
        let fields: Fields = self
            .names
            .iter()
            .enumerate()
            .filter_map(|(c, name)| {
                let kind = kind_of(words, c);
                let bits = words[2 + kw + c];
                let value = match kind {
                    ABSENT => return None,
                    FLOAT => FieldValue::Float(f64::from_bits(bits)),
                    INT => FieldValue::Int(bits as i64),
                    UINT => FieldValue::UInt(bits),
                    BOOL => FieldValue::Bool(bits != 0),
                    _ => FieldValue::Str(self.strs()[bits as usize].clone()),
                };
                Some((name.clone(), value))
            })
            .collect();
        Reading { ts: self.ts_of(words[0]), fields }
    }

    /// Every reading, in order, each made when the iterator reaches it.
    pub fn readings(&self) -> impl ExactSizeIterator<Item = Reading> + '_ {
        (0..self.len()).map(|row| self.reading(row))
    }

    /// Moves the first `k` readings out, in order. Copies the rows: a buffer is split only
    /// when a flush cycle's room ends inside it, once per cycle.
    pub fn split_front(&mut self, k: usize) -> Rows {
        let old = std::mem::take(self);
        // Strings stay where they are indexed; both halves keep the list.
        let empty = || Rows {
            base: old.base,
            names: old.names.clone(),
            tail: Vec::new(),
            more: old
                .more
                .as_ref()
                .filter(|m| !m.strs.is_empty())
                .map(|m| Box::new(More { full: Vec::new(), strs: m.strs.clone() })),
        };
        let (mut front, mut rest) = (empty(), empty());
        for (i, row) in old.rows().enumerate() {
            let half = if i < k { &mut front } else { &mut rest };
            half.append_row().copy_from_slice(row);
        }
        *self = rest;
        front
    }

    /// Puts the readings of `other` from row `from` on (with their sequence numbers) before the
    /// ones held.
    pub fn prepend(&mut self, other: &Rows, from: usize) {
        let mut front = Rows::default();
        for row in other.rows().skip(from) {
            front.push(other.reading_of(row), row[1]);
        }
        for row in self.rows() {
            front.push(self.reading_of(row), row[1]);
        }
        *self = front;
    }
}

/// Equal when they hold the same readings with the same sequence numbers, however laid out.
impl PartialEq for Rows {
    fn eq(&self, other: &Rows) -> bool {
        self.len() == other.len()
            && self.seqs().eq(other.seqs())
            && self.readings().eq(other.readings())
    }
}

impl std::fmt::Debug for Rows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.readings().zip(self.seqs())).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = FieldValue> {
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(FieldValue::Float),
            any::<i64>().prop_map(FieldValue::Int),
            any::<u64>().prop_map(FieldValue::UInt),
            any::<bool>().prop_map(FieldValue::Bool),
            "[a-z]{0,4}".prop_map(FieldValue::Str),
        ]
    }

    /// Readings whose fields come and go, change type and order, from a few names or (so
    /// that kinds spill past the row's head and past a second word) from many; up to three
    /// blocks of them.
    fn readings() -> impl Strategy<Value = Vec<Reading>> {
        let names = prop_oneof![Just(4usize), Just(40usize)];
        let fields = names
            .prop_flat_map(|n| proptest::collection::btree_map(0..n, value(), 1..n.min(36)))
            .prop_map(|m| m.into_iter().collect::<Vec<_>>())
            .prop_shuffle();
        proptest::collection::vec((any::<i16>(), fields), 0..3 * BLOCK_ROWS).prop_map(|rows| {
            rows.into_iter()
                .map(|(ts, fields)| Reading {
                    ts: i64::from(ts),
                    fields: fields
                        .into_iter()
                        .map(|(name, value)| (FieldName::from(format!("f{name}")), value))
                        .collect(),
                })
                .collect()
        })
    }

    /// A reading's fields as a set: the order within a reading is not kept.
    fn sorted(r: &Reading) -> (TimestampMs, Vec<(String, FieldValue)>) {
        let mut fields: Vec<_> = r.fields.iter().map(|(n, v)| (n.to_string(), v.clone())).collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        (r.ts, fields)
    }

    /// Every reading and its sequence number, in order.
    fn into_readings(rows: Rows) -> (Vec<Reading>, Vec<Seq>) {
        (rows.readings().collect(), rows.seqs().collect())
    }

    fn filled(readings: &[Reading]) -> Rows {
        filled_from(readings, 0)
    }

    /// Reading `i` gets sequence number `(first + i) * 3`.
    fn filled_from(readings: &[Reading], first: usize) -> Rows {
        let mut c = Rows::default();
        for (i, r) in readings.iter().enumerate() {
            c.push(r.clone(), (first + i) as Seq * 3);
        }
        c
    }

    proptest! {
        #[test]
        fn columns_give_back_what_was_pushed(readings in readings(), k in 0..3 * BLOCK_ROWS) {
            let c = filled(&readings);
            prop_assert_eq!(c.len(), readings.len());
            let (back, seqs) = into_readings(filled(&readings));
            prop_assert_eq!(
                back.iter().map(sorted).collect::<Vec<_>>(),
                readings.iter().map(sorted).collect::<Vec<_>>()
            );
            prop_assert_eq!(seqs, (0..readings.len()).map(|i| i as Seq * 3).collect::<Vec<_>>());

            let k = k.min(readings.len());
            let mut rest = filled(&readings);
            let front = rest.split_front(k);
            let (f, fs) = into_readings(front);
            let mut joined = f.clone();
            joined.extend(into_readings(rest).0);
            prop_assert_eq!(
                joined.iter().map(sorted).collect::<Vec<_>>(),
                readings.iter().map(sorted).collect::<Vec<_>>()
            );
            prop_assert_eq!(fs.len(), k);

            // What a failed write puts back: the batch's rows from `j` on, before the rows
            // the buffer took in meanwhile.
            let j = k / 2;
            let batch = filled_from(&readings[..k], 0);
            let mut buffer = filled_from(&readings[k..], k);
            buffer.prepend(&batch, j);
            prop_assert_eq!(
                buffer.readings().map(|r| sorted(&r)).collect::<Vec<_>>(),
                readings[j..].iter().map(sorted).collect::<Vec<_>>()
            );
            prop_assert_eq!(
                buffer.seqs().collect::<Vec<_>>(),
                (j..readings.len()).map(|i| i as Seq * 3).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn fields_in_the_usual_order_come_back_in_that_order() {
        let r = |ts, a: f64| Reading {
            ts,
            fields: smallvec::smallvec![
                ("temperature".into(), FieldValue::Float(a)),
                ("humidity".into(), FieldValue::Int(ts)),
            ],
        };
        let mut c = Rows::default();
        c.push(r(1, 1.5), 10);
        c.push(r(2, 2.5), 11);
        assert_eq!(c.reading(0), r(1, 1.5));
        assert_eq!(c.reading(1), r(2, 2.5));
    }

    #[test]
    fn a_buffer_costs_its_sensor_little_in_the_map() {
        // Every sensor's first hour buffer lives in the map's table (see `more`).
        assert!(std::mem::size_of::<Rows>() <= 80, "{}", std::mem::size_of::<Rows>());
    }

    #[test]
    fn a_field_that_appears_after_full_blocks_widens_every_block() {
        let r = |ts: i64, names: &[&str]| Reading {
            ts,
            fields: names.iter().map(|&n| (n.into(), FieldValue::Int(ts))).collect(),
        };
        let mut readings: Vec<Reading> = (0..150).map(|ts| r(ts, &["a"])).collect();
        readings.push(r(150, &["b", "a"]));
        readings.extend((151..200).map(|ts| r(ts, &["a"])));
        let mut c = Rows::default();
        for (i, reading) in readings.iter().enumerate() {
            c.push(reading.clone(), i as Seq);
        }
        assert_eq!(c.full().len(), 3);
        assert_eq!(c.reading(149), r(149, &["a"]));
        assert_eq!(c.reading(150), r(150, &["a", "b"]));
        assert_eq!(c.ts(199), 199);
        for k in [0, BLOCK_ROWS, 2 * BLOCK_ROWS + 1, 200] {
            let mut rest = Rows::default();
            for (i, reading) in readings.iter().enumerate() {
                rest.push(reading.clone(), i as Seq);
            }
            let front = rest.split_front(k);
            assert_eq!((front.len(), rest.len()), (k, 200 - k));
            let (mut back, mut seqs) = into_readings(front);
            let (more, more_seqs) = into_readings(rest);
            back.extend(more);
            seqs.extend(more_seqs);
            assert_eq!(seqs, (0..200).collect::<Vec<Seq>>());
            assert_eq!(back[150], r(150, &["a", "b"]));
            assert_eq!(back[199], r(199, &["a"]));
        }
    }
}
