//! One series' readings of one hour as typed slots: a timestamp, a sequence number, and per
//! field a kind and 64 value bits for each reading. A reading so costs 8 bytes plus 8 per field
//! while the buffer's readings share their kinds (a `Reading` in a vector costs far more, with its fields' own allocation),
//! which is what lets the buffers wait for a longer flush interval within the same memory. The
//! buffers append to them, and a flushed buffer's rows are moved, as they are, into the
//! [`Batch`](super::Batch) the store writes, which reads them in place ([`Row`]) or makes the
//! batch's readings only when it writes that batch.
//!
//! A field's column holds one slot per reading; readings that lack the field have an absent
//! slot, and a field may change its type from one reading to the next (the kind is per slot).
//! Readings come back with their fields in column order, the order in which the buffer first
//! met each name: a reading that sent its fields in another order returns them reordered, the
//! same names and values.

use super::reading::{Reading, ReadingView};
use super::seq::Seq;
use super::time::TimestampMs;
use super::value::{FieldName, FieldValue, Fields, ValueRef};

/// The readings, row after row, in blocks of `BLOCK_ROWS` rows, so that appending a reading
/// writes one place in memory (a buffer per sensor is thousands of buffers, each append a
/// likely cache miss; one vector per column made it six). A row is `[head, kinds.., seq,
/// bits..]`:
/// - the head holds the timestamp as an offset from the hour's start (22 bits) and the
///   sequence number as an offset from `seq_base` (42 bits);
/// - the kinds of its fields, 3 bits each, only once the buffer's rows differ in them: until
///   then every row has the kinds in `shared` (a sensor sends the same fields of the same types
///   every time);
/// - the sequence number in a word of its own, only if one did not fit in the head (a reading
///   more than 2^42 numbers after the buffer's first: never in practice, but possible);
/// - one word of value bits per field.
///
/// Two fields so cost 24 bytes a reading, a third less than with a word each for the sequence
/// number and the kinds: what the buffers hold is most of the server's memory when flat out.
#[derive(Clone, Default)]
pub struct Rows {
    /// The start of the hour of the first reading pushed; timestamps are stored from it.
    base: TimestampMs,
    /// The kinds of every column while all rows share them (3 bits each), and the layout flags.
    shared: u32,
    /// Rows held. Counted here (in what was padding) rather than from the full blocks: those
    /// are behind `more`, and a merge reads every buffer's length before and after it appends,
    /// which cost a cache miss per sensor per merge.
    len: u32,
    /// The sequence number the heads count from: the first pushed.
    seq_base: Seq,
    /// Inline while few: every push compares its names with these, and a vector of its own
    /// was one more cache miss per sensor per merge (the buffer itself is already in cache
    /// from the map lookup that found it). Three, not four: half of what `seq_base` adds.
    names: smallvec::SmallVec<[FieldName; 3]>,
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
/// cache) were a large part of the merge's time (docs/performance.md#row-blocks). A block of
/// two-field rows is 1.5 KiB; at most one block per buffer is partly empty.
const BLOCK_ROWS: usize = 64;

const ABSENT: u8 = 0;
const FLOAT: u8 = 1;
const INT: u8 = 2;
const UINT: u8 = 3;
const BOOL: u8 = 4;
pub(super) const STR: u8 = 5;

const KIND_BITS: usize = 3;
const KIND_MASK: u64 = 0b111;
/// Kinds per word of a row's own kinds.
const WORD_KINDS: usize = 21;
/// Columns whose kinds `shared` can hold beside its flags.
const SHARED_KINDS: usize = 10;
/// `shared`'s flags: the rows carry their own kinds; their sequence numbers have a word.
const OWN_KINDS: u32 = 1 << 30;
const WIDE_SEQ: u32 = 1 << 31;

const TS_BITS: u32 = 22;
const TS_MASK: u64 = (1 << TS_BITS) - 1;
/// Sequence offsets that fit in the head.
const SEQ_SPAN: u64 = 1 << (64 - TS_BITS);

/// Where a row's words are, for a count of columns and the two flags.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Layout {
    fields: usize,
    own_kinds: bool,
    wide_seq: bool,
}

impl Layout {
    fn kind_words(self) -> usize {
        if self.own_kinds { self.fields.div_ceil(WORD_KINDS) } else { 0 }
    }

    /// The index of the sequence number's word, when it has one.
    fn seq_word(self) -> usize {
        1 + self.kind_words()
    }

    /// The index of the first value word.
    fn values(self) -> usize {
        self.seq_word() + usize::from(self.wide_seq)
    }

    fn stride(self) -> usize {
        self.values() + self.fields
    }

    /// Writes a zeroed row's timestamp offset, its sequence number (counted from `seq_base`
    /// in the head unless wide) and, when the rows carry their own, its kinds.
    fn put_head(self, row: &mut [u64], offset: u64, seq: Seq, seq_base: Seq, kinds: &[u8]) {
        row[0] = offset;
        if self.wide_seq {
            row[self.seq_word()] = seq;
        } else {
            row[0] |= (seq - seq_base) << TS_BITS;
        }
        if self.own_kinds {
            for (c, &kind) in kinds.iter().enumerate() {
                let (word, shift) = own_kind_slot(c);
                row[word] |= u64::from(kind) << shift;
            }
        }
    }
}

/// Where the kind of column `c` lives in a row that carries its own kinds: (word, shift).
fn own_kind_slot(c: usize) -> (usize, usize) {
    (1 + c / WORD_KINDS, c % WORD_KINDS * KIND_BITS)
}

/// A reading's kinds by column.
type Kinds = smallvec::SmallVec<[u8; 8]>;

/// `kinds` packed as `shared` holds them, if they fit.
fn pack_shared(kinds: &[u8]) -> Option<u32> {
    (kinds.len() <= SHARED_KINDS).then(|| {
        kinds.iter().enumerate().fold(0, |acc, (c, &k)| acc | u32::from(k) << (c * KIND_BITS))
    })
}

/// What a string value costs [`Rows::heap_bytes`]: its capacity and its `String`. The one
/// formula for it, so that what the buffers count as strings arrive and as rows leave matches.
pub(crate) fn string_bytes(s: &String) -> usize {
    s.capacity() + size_of::<String>()
}

/// A value's kind as rows hold it.
pub(super) fn kind_of(value: &FieldValue) -> u8 {
    match value {
        FieldValue::Float(_) => FLOAT,
        FieldValue::Int(_) => INT,
        FieldValue::UInt(_) => UINT,
        FieldValue::Bool(_) => BOOL,
        FieldValue::Str(_) => STR,
    }
}

/// A value's slot as [`Rows::push_slots`] takes it: its bits, or for a string its index in
/// `strs`, where it is moved.
pub(super) fn slot_of(value: FieldValue, strs: &mut Vec<String>) -> u64 {
    match value {
        FieldValue::Float(v) => v.to_bits(),
        FieldValue::Int(v) => v as u64,
        FieldValue::UInt(v) => v,
        FieldValue::Bool(v) => u64::from(v),
        FieldValue::Str(s) => {
            strs.push(s);
            (strs.len() - 1) as u64
        }
    }
}

impl Rows {
    fn layout(&self) -> Layout {
        Layout {
            fields: self.names.len(),
            own_kinds: self.shared & OWN_KINDS != 0,
            wide_seq: self.shared & WIDE_SEQ != 0,
        }
    }

    fn stride(&self) -> usize {
        self.layout().stride()
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Fields a row has room for: every field any of these rows has.
    pub fn fields(&self) -> usize {
        self.names.len()
    }

    /// What these rows hold on the heap as the buffers' memory budget counts it: their words,
    /// their names once more than fit inline, and their strings (each string's capacity and
    /// its `String`). Not the small bookkeeping around them (`More`'s vectors). Exact for the
    /// budget's purpose: the same rows always count the same, so what the buffers add and
    /// later release matches.
    pub fn heap_bytes(&self) -> usize {
        self.word_bytes() + self.strs().iter().map(string_bytes).sum::<usize>()
    }

    /// The words' and names' share of [`Rows::heap_bytes`], read without leaving this struct:
    /// the merge reads it before and after every reading it appends, so that a push's cost
    /// (the rows it adds, a relayout, a new block) is counted as it happens.
    pub fn word_bytes(&self) -> usize {
        let stride = self.stride();
        let full_rows = self.len() - self.tail.len() / stride;
        let names =
            if self.names.spilled() { self.names.capacity() * size_of::<FieldName>() } else { 0 };
        (full_rows * stride + self.tail.capacity()) * size_of::<u64>() + names
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
            // A quarter more (at least two rows) up to a block, not twice: doubling leaves up
            // to half of the rows' memory unused, and a slow sensor's ten rows sat in room for
            // sixteen. The first row alone: a sensor that sends once per flush interval holds
            // one, and a fleet may have a million such sensors. Never past a block, so that a
            // full tail becomes a block without being copied.
            let grow = if at == 0 && self.full().is_empty() { row } else { (at / 4).max(2 * row) };
            self.tail.reserve_exact(grow.min(block - at));
        }
        self.tail.resize(at + row, 0);
        self.len = self.len.checked_add(1).expect("a buffer holds under 4 Gi rows");
        &mut self.tail[at..]
    }

    pub fn ts(&self, row: usize) -> TimestampMs {
        self.ts_of(self.row(row))
    }

    fn ts_of(&self, words: &[u64]) -> TimestampMs {
        self.base + (words[0] & TS_MASK) as TimestampMs
    }

    /// Every timestamp held, in row order.
    pub fn timestamps(&self) -> impl Iterator<Item = TimestampMs> + '_ {
        self.rows().map(|row| self.ts_of(row))
    }

    /// The sequence number of the reading in `row`.
    pub fn seq(&self, row: usize) -> Seq {
        self.seq_of(self.layout(), self.row(row))
    }

    fn seq_of(&self, layout: Layout, words: &[u64]) -> Seq {
        if layout.wide_seq {
            words[layout.seq_word()]
        } else {
            self.seq_base + (words[0] >> TS_BITS)
        }
    }

    /// Every sequence number held, in row order.
    pub fn seqs(&self) -> impl Iterator<Item = Seq> + '_ {
        let layout = self.layout();
        self.rows().map(move |row| self.seq_of(layout, row))
    }

    fn kind_of(&self, layout: Layout, words: &[u64], c: usize) -> u8 {
        let kinds = if layout.own_kinds {
            let (word, shift) = own_kind_slot(c);
            words[word] >> shift
        } else {
            u64::from(self.shared) >> (c * KIND_BITS)
        };
        (kinds & KIND_MASK) as u8
    }

    /// Lays every held row out anew as `to` says, from `from` (the columns beyond the old
    /// ones absent). The names are already `to`'s; the kinds in `shared` are still the old
    /// rows' (only its flags change here).
    fn relayout(&mut self, from: Layout, to: Layout) {
        debug_assert!(to.fields >= from.fields && to.fields == self.names.len());
        debug_assert!(to.own_kinds || to.fields <= SHARED_KINDS);
        let old_full = self.more.as_mut().map(|m| std::mem::take(&mut m.full)).unwrap_or_default();
        let old_tail = std::mem::take(&mut self.tail);
        self.len = 0;
        let flags =
            if to.own_kinds { OWN_KINDS } else { 0 } | if to.wide_seq { WIDE_SEQ } else { 0 };
        self.shared = (self.shared & !(OWN_KINDS | WIDE_SEQ)) | flags;
        let seq_base = self.seq_base;
        for row in rows_of(&old_full, &old_tail, from.stride()) {
            let seq = self.seq_of(from, row);
            // Only rows that carry their own kinds are given them (`put_head`).
            let kinds: Kinds = if to.own_kinds {
                (0..from.fields).map(|c| self.kind_of(from, row, c)).collect()
            } else {
                Kinds::new()
            };
            let new = self.append_row();
            to.put_head(new, row[0] & TS_MASK, seq, seq_base, &kinds);
            new[to.values()..to.values() + from.fields].copy_from_slice(&row[from.values()..]);
        }
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
        let from = self.layout();
        let to = Layout {
            fields: from.fields + 1,
            own_kinds: from.own_kinds || from.fields + 1 > SHARED_KINDS,
            ..from
        };
        self.names.push(name.clone());
        self.relayout(from, to);
        from.fields
    }

    /// Appends one reading. A field named twice in one reading keeps its last value (ingest
    /// refuses such readings).
    pub fn push(&mut self, reading: Reading, seq: Seq) {
        let mut names: smallvec::SmallVec<[FieldName; 4]> = smallvec::SmallVec::new();
        let mut kinds = Kinds::new();
        let mut bits: smallvec::SmallVec<[u64; 4]> = smallvec::SmallVec::new();
        let mut strs = Vec::new();
        for (name, value) in reading.fields {
            names.push(name);
            kinds.push(kind_of(&value));
            bits.push(slot_of(value, &mut strs));
        }
        self.push_slots(reading.ts, seq, &names, &kinds, &bits, |i| {
            std::mem::take(&mut strs[i as usize])
        });
    }

    /// Appends one reading given as slots: field `j` is named `names[j]`, of kind `kinds[j]`
    /// ([`kind_of`]), with slot `bits[j]` ([`slot_of`]): its value bits, or for a string the
    /// index `take_str` is called with for the string itself.
    pub(super) fn push_slots(
        &mut self,
        ts: TimestampMs,
        seq: Seq,
        names: &[FieldName],
        field_kinds: &[u8],
        bits: &[u64],
        mut take_str: impl FnMut(u64) -> String,
    ) {
        debug_assert!(names.len() == field_kinds.len() && names.len() == bits.len());
        let cols: smallvec::SmallVec<[usize; 8]> =
            names.iter().enumerate().map(|(j, name)| self.column(j, name)).collect();
        let mut kinds: Kinds = smallvec::smallvec![ABSENT; self.names.len()];
        for (&c, &kind) in cols.iter().zip(field_kinds) {
            kinds[c] = kind;
        }
        let packed = pack_shared(&kinds);
        if self.is_empty() {
            self.base = crate::model::hour_start(ts);
            self.seq_base = seq;
            self.shared = packed.unwrap_or(OWN_KINDS);
        } else {
            let from = self.layout();
            let to = Layout {
                own_kinds: from.own_kinds || packed != Some(self.shared & !(OWN_KINDS | WIDE_SEQ)),
                // Wraps when `seq` is below the base: that takes a word too.
                wide_seq: from.wide_seq || seq.wrapping_sub(self.seq_base) >= SEQ_SPAN,
                ..from
            };
            if to != from {
                self.relayout(from, to);
            }
        }
        let layout = self.layout();
        let offset = ts - self.base;
        assert!((0..crate::model::HOUR_MS).contains(&offset), "a buffer holds one hour");
        // Read only when a string comes: the count lives behind `more`, which a buffer with
        // full blocks has, and reading it for every push was a cache miss per sensor per
        // merge (much of this function's time, flat out).
        let first_str = if field_kinds.contains(&STR) { self.strs().len() } else { 0 };
        let mut strs: smallvec::SmallVec<[String; 1]> = smallvec::SmallVec::new();
        let seq_base = self.seq_base;
        let row = self.append_row();
        layout.put_head(row, offset as u64, seq, seq_base, &kinds);
        for ((&c, &kind), &bits) in cols.iter().zip(field_kinds).zip(bits) {
            row[layout.values() + c] = if kind == STR {
                strs.push(take_str(bits));
                (first_str + strs.len() - 1) as u64
            } else {
                bits
            };
        }
        if !strs.is_empty() {
            self.more_mut().strs.extend(strs);
        }
    }

    /// The reading in `row`, its fields in column order.
    pub fn reading(&self, row: usize) -> Reading {
        self.reading_of(self.row(row))
    }

    fn value_of(&self, kind: u8, bits: u64) -> Option<ValueRef<'_>> {
        Some(match kind {
            ABSENT => return None,
            FLOAT => ValueRef::Float(f64::from_bits(bits)),
            INT => ValueRef::Int(bits as i64),
            UINT => ValueRef::UInt(bits),
            BOOL => ValueRef::Bool(bits != 0),
            _ => ValueRef::Str(&self.strs()[bits as usize]),
        })
    }

    fn reading_of(&self, words: &[u64]) -> Reading {
        Row { rows: self, words, layout: self.layout() }.to_reading()
    }

    /// Every row, in order, as a reading seen in place.
    pub fn views(&self) -> impl ExactSizeIterator<Item = Row<'_>> + '_ {
        let layout = self.layout();
        let mut rows = self.rows();
        (0..self.len()).map(move |_| {
            let words = rows.next().expect("len counts the rows");
            Row { rows: self, words, layout }
        })
    }

    /// Every reading, in order, each made when the iterator reaches it.
    pub fn readings(&self) -> impl ExactSizeIterator<Item = Reading> + '_ {
        (0..self.len()).map(|row| self.reading(row))
    }

    /// Moves the first `k` readings out, in order. Copies the rows: a buffer is split only
    /// when a flush cycle's room ends inside it, once per cycle. Each half keeps only its own
    /// strings (moved, not copied), so a split never holds a string twice.
    pub fn split_front(&mut self, k: usize) -> Rows {
        let mut old = std::mem::take(self);
        let mut strs = old.more.as_mut().map(|m| std::mem::take(&mut m.strs)).unwrap_or_default();
        // Both halves keep the layout, so that the rows are copied as they are.
        let empty =
            || Rows { names: old.names.clone(), tail: Vec::new(), len: 0, more: None, ..old };
        let (mut front, mut rest) = (empty(), empty());
        let layout = old.layout();
        let mut words: Vec<u64> = Vec::new();
        for (i, row) in old.rows().enumerate() {
            let half = if i < k { &mut front } else { &mut rest };
            if strs.is_empty() {
                half.append_row().copy_from_slice(row);
                continue;
            }
            words.clear();
            words.extend_from_slice(row);
            for c in 0..layout.fields {
                if old.kind_of(layout, row, c) == STR {
                    let slot = &mut words[layout.values() + c];
                    let held = &mut half.more_mut().strs;
                    held.push(std::mem::take(&mut strs[*slot as usize]));
                    *slot = (held.len() - 1) as u64;
                }
            }
            half.append_row().copy_from_slice(&words);
        }
        *self = rest;
        front
    }

    /// Puts the readings of `other` from row `from` on (with their sequence numbers) before the
    /// ones held.
    pub fn prepend(&mut self, other: &Rows, from: usize) {
        let mut front = Rows::default();
        for i in from..other.len() {
            front.push(other.reading(i), other.seq(i));
        }
        for i in 0..self.len() {
            front.push(self.reading(i), self.seq(i));
        }
        *self = front;
    }
}

/// One row of a [`Rows`], read where it is held: its fields in column order, as
/// [`Rows::reading`] would make them.
#[derive(Clone, Copy)]
pub struct Row<'a> {
    rows: &'a Rows,
    words: &'a [u64],
    /// The rows' layout, read once for all of them.
    layout: Layout,
}

impl Row<'_> {
    pub fn to_reading(&self) -> Reading {
        let fields: Fields =
            self.named().map(|(name, value)| (name.clone(), FieldValue::from(value))).collect();
        Reading { ts: self.ts(), fields }
    }

    fn named(&self) -> impl Iterator<Item = (&FieldName, ValueRef<'_>)> {
        let values = &self.words[self.layout.values()..];
        self.rows.names.iter().zip(values).enumerate().filter_map(move |(c, (name, &bits))| {
            let kind = self.rows.kind_of(self.layout, self.words, c);
            self.rows.value_of(kind, bits).map(|v| (name, v))
        })
    }
}

impl ReadingView for Row<'_> {
    fn ts(&self) -> TimestampMs {
        self.rows.ts_of(self.words)
    }

    fn fields(&self) -> impl Iterator<Item = (&str, ValueRef<'_>)> {
        self.named().map(|(name, value)| (name.as_str(), value))
    }

    /// Rows that share their kinds have the same shape; others compare their kind words.
    fn same_shape(&self, prev: &Self) -> Option<bool> {
        debug_assert!(std::ptr::eq(self.rows, prev.rows), "rows of one buffer");
        let kinds = |r: &Self| &r.words[1..1 + r.layout.kind_words()];
        Some(kinds(self) == kinds(prev))
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
pub(super) mod tests {
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
    /// that there are more than `shared` holds, and more than a word of kinds) from many; up
    /// to three blocks of them.
    pub(in crate::model) fn readings() -> impl Strategy<Value = Vec<Reading>> {
        let names = prop_oneof![Just(4usize), Just(40usize)];
        let fields = names
            .prop_flat_map(|n| proptest::collection::btree_map(0..n, value(), 1..n.min(36)))
            .prop_map(|m| m.into_iter().collect::<Vec<_>>())
            .prop_shuffle();
        proptest::collection::vec((any::<u16>(), fields), 0..3 * BLOCK_ROWS).prop_map(|rows| {
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
    pub(in crate::model) fn sorted(r: &Reading) -> (TimestampMs, Vec<(String, FieldValue)>) {
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

    /// Readings that all have the same fields of the same types (their rows share the kinds),
    /// but maybe for one that differs, somewhere.
    fn alike() -> impl Strategy<Value = Vec<Reading>> {
        let one = |ts: i64, v: f64, s: bool| Reading {
            ts,
            fields: if s {
                smallvec::smallvec![("t".into(), FieldValue::Str(format!("{v}")))]
            } else {
                smallvec::smallvec![
                    ("t".into(), FieldValue::Float(v)),
                    ("h".into(), FieldValue::Int(ts)),
                ]
            },
        };
        (proptest::collection::vec(any::<f64>(), 0..3 * BLOCK_ROWS), any::<Option<usize>>())
            .prop_map(move |(values, odd)| {
                let odd = odd.map(|i| i % values.len().max(1));
                let at = |i: usize, v: f64| one(i as i64 * 7, v, odd == Some(i));
                values.into_iter().enumerate().map(|(i, v)| at(i, v)).collect()
            })
    }

    /// Sequence numbers as a buffer gets them (increasing, small steps), with steps too far
    /// for a row's head and, though no buffer gets them, ones that go back.
    fn seqs(n: usize) -> impl Strategy<Value = Vec<Seq>> {
        let step = prop_oneof![
            8 => 1..1000u64,
            1 => Just(SEQ_SPAN),
            1 => any::<u64>(),
        ];
        proptest::collection::vec(step, n).prop_map(|steps| {
            steps
                .iter()
                .scan(0u64, |s, &d| {
                    *s = s.wrapping_add(d);
                    Some(*s)
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn any_sequence_numbers_come_back(
            (readings, seqs) in alike().prop_flat_map(|r| { let n = r.len(); (Just(r), seqs(n)) }),
            k in 0..3 * BLOCK_ROWS,
        ) {
            let fill = |from: usize, to: usize| {
                let mut rows = Rows::default();
                for i in from..to {
                    rows.push(readings[i].clone(), seqs[i]);
                }
                rows
            };
            let rows = fill(0, readings.len());
            prop_assert_eq!(rows.readings().collect::<Vec<_>>(), readings.clone());
            prop_assert_eq!(rows.seqs().collect::<Vec<_>>(), seqs.clone());
            let k = k.min(readings.len());
            let mut rest = rows.clone();
            let front = rest.split_front(k);
            prop_assert_eq!(front.seqs().chain(rest.seqs()).collect::<Vec<_>>(), seqs.clone());
            prop_assert_eq!(
                front.readings().chain(rest.readings()).collect::<Vec<_>>(),
                readings.clone()
            );
            // Each half holds its own strings only.
            let strings = |r: &Rows| r.strs().iter().map(String::len).sum::<usize>();
            prop_assert_eq!(strings(&front) + strings(&rest), strings(&rows));
            let mut back = fill(k, readings.len());
            back.prepend(&fill(0, k), k / 2);
            prop_assert_eq!(back.seqs().collect::<Vec<_>>(), seqs[k / 2..].to_vec());
            prop_assert_eq!(back.readings().collect::<Vec<_>>(), readings[k / 2..].to_vec());
        }

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
        // Every sensor's first hour buffer lives in the map's table (see `more`). The sequence
        // base added 8 bytes here (a name less inline took back 8 of 16); it saves 8 a row.
        assert!(std::mem::size_of::<Rows>() <= 88, "{}", std::mem::size_of::<Rows>());
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
