//! One (sensor, hour) buffer's readings as typed slots: a timestamp, a sequence number, and per
//! field a kind and 64 value bits for each reading. A buffered reading of up to ten fields so
//! costs 16 bytes plus 8 per field (a `Reading` in a vector costs about 120), which is what
//! lets buffers wait for a longer flush interval within the same memory.
//!
//! A field's column holds one slot per reading; readings that lack the field have an absent
//! slot, and a field may change its type from one reading to the next (the kind is per slot).
//! Readings come back with their fields in column order, the order in which the buffer first
//! met each name: a reading that sent its fields in another order returns them reordered, the
//! same names and values.

use super::span::Span;
use crate::model::{FieldName, FieldValue, Fields, Reading, Seq, TimestampMs};

/// The readings, row after row in one vector, so that appending a reading writes one place in
/// memory (a buffer per sensor is thousands of buffers, each append a likely cache miss; one
/// vector per column made it six). A row is `[head, seq, more kinds.., bits..]`: the head
/// holds the timestamp as a 32-bit offset from `base` (a buffer holds one hour) and the kinds
/// of the first `HEAD_KINDS` fields, 3 bits each; the kinds of further fields fill
/// `MORE_KINDS` to a word; then one word of value bits per field.
#[derive(Default)]
pub(super) struct Columns {
    /// The start of the hour of the first reading pushed; timestamps are stored from it.
    base: TimestampMs,
    /// Inline while few: every push compares its names with these, and a vector of its own
    /// was one more cache miss per sensor per merge (the buffer itself is already in cache
    /// from the map lookup that found it).
    names: smallvec::SmallVec<[FieldName; 4]>,
    words: Vec<u64>,
    strs: Vec<String>,
}

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

impl Columns {
    fn stride(&self) -> usize {
        stride(self.names.len())
    }

    pub fn len(&self) -> usize {
        self.words.len() / self.stride()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    fn row(&self, row: usize) -> &[u64] {
        let stride = self.stride();
        &self.words[row * stride..(row + 1) * stride]
    }

    pub fn ts(&self, row: usize) -> TimestampMs {
        self.ts_of(self.words[row * self.stride()])
    }

    fn ts_of(&self, head: u64) -> TimestampMs {
        self.base + TimestampMs::from(head as u32 as i32)
    }

    fn seq(&self, row: usize) -> Seq {
        self.words[row * self.stride() + 1]
    }

    /// First and last timestamp held.
    pub fn span(&self) -> Span {
        let mut span = Span::EMPTY;
        for row in self.words.chunks_exact(self.stride()) {
            span.include(self.ts_of(row[0]));
        }
        span
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
        let (old, new) = (self.stride(), stride(self.names.len() + 1));
        if !self.words.is_empty() {
            let (kw_old, kw_new) = (kind_words(self.names.len()), kind_words(self.names.len() + 1));
            let mut words = Vec::with_capacity(self.words.len() / old * new);
            for row in self.words.chunks_exact(old) {
                words.extend_from_slice(&row[..2 + kw_old]);
                words.extend(std::iter::repeat_n(0, kw_new - kw_old));
                words.extend_from_slice(&row[2 + kw_old..]);
                words.push(0);
            }
            self.words = words;
        }
        self.names.push(name.clone());
        self.names.len() - 1
    }

    /// Appends one reading. A field named twice in one reading keeps its last value (ingest
    /// refuses such readings).
    pub fn push(&mut self, reading: Reading, seq: Seq) {
        let cols: smallvec::SmallVec<[usize; 8]> =
            reading.fields.iter().enumerate().map(|(j, (name, _))| self.column(j, name)).collect();
        let fields = self.names.len();
        let kw = kind_words(fields);
        if self.words.is_empty() {
            self.base = crate::model::hour_start(reading.ts);
        }
        // Within an hour buffer the offset is under an hour; the check costs nothing beside
        // the cache miss of the append.
        let offset = i32::try_from(reading.ts - self.base).expect("a buffer holds one hour");
        let at = self.words.len();
        let need = at + stride(fields);
        if need > self.words.capacity() {
            // A quarter more (at least two rows), not twice: doubling left a third of the rows'
            // memory unused on average, and a slow sensor's ten rows sat in room for sixteen.
            // The extra copies are of rows already in cache. The first row alone: a sensor
            // that sends once per flush interval holds one (a million of them, 96 MB).
            let row = stride(fields);
            self.words.reserve_exact(if at == 0 { row } else { (at / 4).max(2 * row) });
        }
        self.words.resize(need, 0);
        let row = &mut self.words[at..];
        row[0] = u64::from(offset as u32);
        row[1] = seq;
        for (c, (_, value)) in cols.into_iter().zip(reading.fields) {
            let (kind, bits) = match value {
                FieldValue::Float(v) => (FLOAT, v.to_bits()),
                FieldValue::Int(v) => (INT, v as u64),
                FieldValue::UInt(v) => (UINT, v),
                FieldValue::Bool(v) => (BOOL, u64::from(v)),
                FieldValue::Str(s) => {
                    self.strs.push(s);
                    (STR, (self.strs.len() - 1) as u64)
                }
            };
            let (word, shift) = kind_slot(c);
            row[word] = (row[word] & !(KIND_MASK << shift)) | (u64::from(kind) << shift);
            row[2 + kw + c] = bits;
        }
    }

    /// The reading in `row`, its fields in column order.
    pub fn reading(&self, row: usize) -> Reading {
        let words = self.row(row);
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
                    _ => FieldValue::Str(self.strs[bits as usize].clone()),
                };
                Some((name.clone(), value))
            })
            .collect();
        Reading { ts: self.ts_of(words[0]), fields }
    }

    /// Every reading and its sequence number, in order.
    pub fn into_readings(self) -> (Vec<Reading>, Vec<Seq>) {
        let n = self.len();
        ((0..n).map(|row| self.reading(row)).collect(), (0..n).map(|row| self.seq(row)).collect())
    }

    /// Moves the first `k` readings out, in order.
    pub fn split_front(&mut self, k: usize) -> Columns {
        let rest = self.words.split_off(k * self.stride());
        // Strings stay where they are indexed; both halves keep the list.
        Columns {
            base: self.base,
            names: self.names.clone(),
            words: std::mem::replace(&mut self.words, rest),
            strs: self.strs.clone(),
        }
    }

    /// Puts `readings` (with their sequence numbers) before the ones held.
    pub fn prepend(&mut self, readings: &[Reading], seqs: &[Seq]) {
        debug_assert_eq!(readings.len(), seqs.len());
        let mut front = Columns::default();
        for (reading, &seq) in readings.iter().zip(seqs) {
            front.push(reading.clone(), seq);
        }
        for row in 0..self.len() {
            front.push(self.reading(row), self.seq(row));
        }
        *self = front;
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
    /// that kinds spill past the row's head and past a second word) from many.
    fn readings() -> impl Strategy<Value = Vec<Reading>> {
        let names = prop_oneof![Just(4usize), Just(40usize)];
        let fields = names
            .prop_flat_map(|n| proptest::collection::btree_map(0..n, value(), 1..n.min(36)))
            .prop_map(|m| m.into_iter().collect::<Vec<_>>())
            .prop_shuffle();
        proptest::collection::vec((any::<i16>(), fields), 0..40).prop_map(|rows| {
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

    fn filled(readings: &[Reading]) -> Columns {
        let mut c = Columns::default();
        for (i, r) in readings.iter().enumerate() {
            c.push(r.clone(), i as Seq * 3);
        }
        c
    }

    proptest! {
        #[test]
        fn columns_give_back_what_was_pushed(readings in readings(), k in 0usize..40) {
            let c = filled(&readings);
            prop_assert_eq!(c.len(), readings.len());
            let (back, seqs) = filled(&readings).into_readings();
            prop_assert_eq!(
                back.iter().map(sorted).collect::<Vec<_>>(),
                readings.iter().map(sorted).collect::<Vec<_>>()
            );
            prop_assert_eq!(seqs, (0..readings.len()).map(|i| i as Seq * 3).collect::<Vec<_>>());

            let k = k.min(readings.len());
            let mut rest = filled(&readings);
            let front = rest.split_front(k);
            let (f, fs) = front.into_readings();
            let mut joined = f.clone();
            joined.extend(rest.into_readings().0);
            prop_assert_eq!(
                joined.iter().map(sorted).collect::<Vec<_>>(),
                readings.iter().map(sorted).collect::<Vec<_>>()
            );
            prop_assert_eq!(fs.len(), k);

            let mut tail = filled(&readings[k..]);
            let seqs: Vec<Seq> = (0..k).map(|i| i as Seq * 3).collect();
            tail.prepend(&readings[..k], &seqs);
            prop_assert_eq!(
                tail.into_readings().0.iter().map(sorted).collect::<Vec<_>>(),
                readings.iter().map(sorted).collect::<Vec<_>>()
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
        let mut c = Columns::default();
        c.push(r(1, 1.5), 10);
        c.push(r(2, 2.5), 11);
        assert_eq!(c.reading(0), r(1, 1.5));
        assert_eq!(c.reading(1), r(2, 2.5));
    }
}
