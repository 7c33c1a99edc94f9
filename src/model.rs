//! The data every layer shares: readings, series, and the batches the flusher hands the store.
//! What ingest accepts (limits, validation) is its own policy, in `ingest::validate`.

use std::sync::Arc;

mod columns;
mod packed;
mod rows;
pub use columns::{Columns, ColumnsReader, Mismatch};
pub use packed::Packed;
pub use rows::{Row, Rows};

/// Milliseconds since the Unix epoch, UTC. Readings are stored at millisecond precision:
/// finer timestamps (line protocol's ns/us) are truncated toward negative infinity.
pub type TimestampMs = i64;

pub const HOUR_MS: i64 = 3_600_000;
pub const MINUTE_MS: i64 = 60_000;

/// Start of the hour that `ts` falls in. Uses euclidean division so that pre-1970 readings land
/// in the hour that contains them rather than the one after.
pub fn hour_start(ts: TimestampMs) -> TimestampMs {
    ts.div_euclid(HOUR_MS) * HOUR_MS
}

/// Earliest and latest timestamps bucketd accepts: the range a BSON date and chrono can both
/// represent as a calendar date (years 0000 to 9999), so every stored reading round-trips
/// through RFC 3339 output.
pub const MIN_TIMESTAMP_MS: TimestampMs = -62_167_219_200_000; // 0000-01-01T00:00:00Z
pub const MAX_TIMESTAMP_MS: TimestampMs = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z

/// A field's value as ingest received it. Floats are always finite: NaN and infinities are
/// rejected at ingest because neither JSON nor MongoDB's `$min`/`$max` handle them sensibly.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum FieldValue {
    Float(f64),
    Int(i64),
    UInt(u64),
    Bool(bool),
    Str(String),
}

impl FieldValue {
    /// The value as it enters min/max/sum statistics; only numbers have statistics.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            FieldValue::Float(v) => Some(v),
            FieldValue::Int(v) => Some(v as f64),
            FieldValue::UInt(v) => Some(v as f64),
            FieldValue::Bool(_) | FieldValue::Str(_) => None,
        }
    }
}

/// A field's value where it is held, its string borrowed: what a store encodes from, whether
/// the reading is a [`Reading`] or a row of a buffer's [`Rows`] (no reading is made for it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ValueRef<'a> {
    Float(f64),
    Int(i64),
    UInt(u64),
    Bool(bool),
    Str(&'a str),
}

impl ValueRef<'_> {
    /// As [`FieldValue::as_f64`].
    pub fn as_f64(self) -> Option<f64> {
        match self {
            ValueRef::Float(v) => Some(v),
            ValueRef::Int(v) => Some(v as f64),
            ValueRef::UInt(v) => Some(v as f64),
            ValueRef::Bool(_) | ValueRef::Str(_) => None,
        }
    }
}

impl FieldValue {
    pub fn as_ref(&self) -> ValueRef<'_> {
        match *self {
            FieldValue::Float(v) => ValueRef::Float(v),
            FieldValue::Int(v) => ValueRef::Int(v),
            FieldValue::UInt(v) => ValueRef::UInt(v),
            FieldValue::Bool(v) => ValueRef::Bool(v),
            FieldValue::Str(ref s) => ValueRef::Str(s),
        }
    }
}

impl From<ValueRef<'_>> for FieldValue {
    fn from(value: ValueRef<'_>) -> Self {
        match value {
            ValueRef::Float(v) => FieldValue::Float(v),
            ValueRef::Int(v) => FieldValue::Int(v),
            ValueRef::UInt(v) => FieldValue::UInt(v),
            ValueRef::Bool(v) => FieldValue::Bool(v),
            ValueRef::Str(s) => FieldValue::Str(s.to_owned()),
        }
    }
}

/// One reading as the stores' encoders see it: a timestamp and its fields in order, borrowed
/// from wherever the reading is held. The embedded store writes a flushed buffer's rows through
/// it, without making a [`Reading`] of each row, which was a large part of its write.
pub trait ReadingView {
    fn ts(&self) -> TimestampMs;
    fn fields(&self) -> impl Iterator<Item = (&str, ValueRef<'_>)>;

    /// Whether this reading has the fields of `prev`, with the same types and in the same
    /// order, when that is cheaper to tell than by comparing their names; `None` otherwise.
    fn same_shape(&self, _prev: &Self) -> Option<bool> {
        None
    }
}

impl ReadingView for Reading {
    fn ts(&self) -> TimestampMs {
        self.ts
    }

    fn fields(&self) -> impl Iterator<Item = (&str, ValueRef<'_>)> {
        self.fields.iter().map(|(name, value)| (name.as_str(), value.as_ref()))
    }
}

impl<R: ReadingView> ReadingView for &R {
    fn ts(&self) -> TimestampMs {
        (**self).ts()
    }

    fn fields(&self) -> impl Iterator<Item = (&str, ValueRef<'_>)> {
        (**self).fields()
    }

    fn same_shape(&self, prev: &Self) -> Option<bool> {
        (**self).same_shape(*prev)
    }
}

/// A field's name. Shared because a series sends the same few names in every reading: a parser
/// allocates each name once per body (a chunk's decoder interns it) and every reading holds a
/// reference (one pointer) instead of its own copy. Serialized as a plain string.
///
/// An [`interned`](FieldName::interned) name is never freed, and its copies count no
/// references: a reading's names are copied by the parser, dropped by the merge into the
/// buffers, copied again for the store and dropped after the write, and with a shared counter
/// each of those was an atomic write to one cache line that every core contends for (the same
/// few names are in every reading).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct FieldName(arcstr::ArcStr);

impl FieldName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The process's one `FieldName` for `name`, while fewer than `INTERNED` names are known
    /// (beyond that, a fresh one). Equal names that are one allocation compare by pointer
    /// (`ArcStr`'s `PartialEq` checks identity first): the buffers compare every pushed field's
    /// name with their column's, and with names interned that compare reads neither string,
    /// one cache miss less per field of a reading pushed to a buffer not in cache.
    pub fn interned(name: &str) -> FieldName {
        /// Bounds the table: names are client-chosen. 64 Ki names of a few dozen bytes.
        const INTERNED: usize = 1 << 16;
        static NAMES: std::sync::LazyLock<
            std::sync::Mutex<std::collections::HashSet<FieldName, foldhash::fast::RandomState>>,
        > = std::sync::LazyLock::new(Default::default);
        let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = names.get(name) {
            return known.clone();
        }
        let new = FieldName::from(name);
        if names.len() < INTERNED {
            // Bounded with the table, which keeps its names for the life of the process anyway.
            new.0.leak();
            names.insert(new.clone());
        }
        new
    }
}

impl std::ops::Deref for FieldName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for FieldName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for FieldName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for FieldName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for FieldName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for FieldName {
    fn from(s: &str) -> Self {
        FieldName(s.into())
    }
}

impl From<String> for FieldName {
    fn from(s: String) -> Self {
        FieldName(s.into())
    }
}

impl PartialEq<str> for FieldName {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for FieldName {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for FieldName {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

/// Hands out one shared [`FieldName`] per distinct name among the last few seen, so that a
/// parser or decoder allocates a name once per body or chunk rather than once per reading.
/// Bounded: it remembers the last `NAMES` names in a list it scans, and up to `MORE` older
/// ones in a set, emptied when full (a forgotten name is only looked up again).
#[derive(Default)]
pub struct FieldNames {
    recent: std::collections::VecDeque<FieldName>,
    /// Names pushed out of `recent`: readings of many fields (a scan of every name known made
    /// each of their fields cost a comparison with every other).
    more: std::collections::HashSet<FieldName, foldhash::fast::RandomState>,
}

impl FieldNames {
    /// Sensors rarely send more fields than this; beyond it a linear scan stops paying off.
    const NAMES: usize = 32;
    const MORE: usize = 4096;

    pub fn get(&mut self, name: &str) -> FieldName {
        if !self.more.is_empty()
            && let Some(found) = self.more.get(name)
        {
            return found.clone();
        }
        if let Some(found) = self.recent.iter().find(|n| n.as_str() == name) {
            return found.clone();
        }
        if self.recent.len() == Self::NAMES
            && let Some(old) = self.recent.pop_front()
        {
            if self.more.len() == Self::MORE {
                self.more.clear();
            }
            self.more.insert(old);
        }
        let new = FieldName::interned(name);
        self.recent.push_back(new.clone());
        new
    }
}

/// A reading's fields. Sensors mostly send one or two, which then live inside the `Reading`
/// (in the buffers' vectors) rather than in an allocation of their own.
pub type Fields = smallvec::SmallVec<[(FieldName, FieldValue); 2]>;

/// One timestamped set of field values of one series. Field names are unique within a reading
/// and kept in the order they arrived.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reading {
    pub ts: TimestampMs,
    pub fields: Fields,
}

/// What identifies a series and what is stored beside it. [`key`](SeriesMeta::key) is the sensor
/// key: for line protocol the series key (measurement plus tags sorted by key, in line-protocol
/// escaping); for JSON the `sensor` string as sent. [`tags`](SeriesMeta::tags) are sorted by
/// key.
///
/// One string holds the key, the measurement and every tag key and value, one after the other,
/// with where each ends: two allocations a series instead of one per string. Every admitted
/// series is held for the life of the process, so with a million sensors each allocation saved
/// is a million.
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(from = "SeriesFields", into = "SeriesFields")]
pub struct SeriesMeta {
    text: Box<str>,
    /// Where the key, the measurement, and each tag's key and value end in `text`.
    ends: smallvec::SmallVec<[u32; 6]>,
}

/// [`SeriesMeta`] as separate strings: how the log and the dead letters have always written it.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename = "SeriesMeta")]
struct SeriesFields {
    key: String,
    measurement: String,
    tags: Vec<(String, String)>,
}

impl From<SeriesFields> for SeriesMeta {
    fn from(f: SeriesFields) -> SeriesMeta {
        SeriesMeta::new(&f.key, &f.measurement, &f.tags)
    }
}

impl From<SeriesMeta> for SeriesFields {
    fn from(m: SeriesMeta) -> SeriesFields {
        SeriesFields { key: m.key().into(), measurement: m.measurement().into(), tags: m.tag_vec() }
    }
}

impl SeriesMeta {
    /// `tags` must be sorted by key (what every parser hands on).
    pub fn new<K: AsRef<str>, V: AsRef<str>>(
        key: &str,
        measurement: &str,
        tags: &[(K, V)],
    ) -> SeriesMeta {
        let parts = || {
            [key, measurement]
                .into_iter()
                .chain(tags.iter().flat_map(|(k, v)| [k.as_ref(), v.as_ref()]))
        };
        let mut text = String::with_capacity(parts().map(str::len).sum());
        let mut ends = smallvec::SmallVec::with_capacity(2 + 2 * tags.len());
        for part in parts() {
            text.push_str(part);
            // Parts are bounded far below this by the input limits.
            ends.push(u32::try_from(text.len()).expect("a series' text is under 4 GiB"));
        }
        SeriesMeta { text: text.into_boxed_str(), ends }
    }

    /// A series without tags.
    pub fn untagged(key: &str, measurement: &str) -> SeriesMeta {
        SeriesMeta::new::<&str, &str>(key, measurement, &[])
    }

    fn part(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }

    pub fn key(&self) -> &str {
        self.part(0)
    }

    pub fn measurement(&self) -> &str {
        self.part(1)
    }

    /// `(key, value)`, sorted by key.
    pub fn tags(
        &self,
    ) -> impl ExactSizeIterator<Item = (&str, &str)> + DoubleEndedIterator + Clone + '_ {
        (0..(self.ends.len() - 2) / 2).map(|i| (self.part(2 + 2 * i), self.part(3 + 2 * i)))
    }

    pub fn tag_vec(&self) -> Vec<(String, String)> {
        self.tags().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    }

    /// The line-protocol series key of its measurement and tags (which is its key for a series
    /// that line protocol wrote).
    pub fn series_key(&self) -> String {
        series_key_of(self.measurement(), self.tags())
    }
}

impl std::fmt::Debug for SeriesMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeriesMeta")
            .field("key", &self.key())
            .field("measurement", &self.measurement())
            .field("tags", &self.tags().collect::<Vec<_>>())
            .finish()
    }
}

// ---- series keys: line protocol's text of a measurement and its tags, which ingest builds
// and parses (`ingest::series_key`) and InfluxQL's `SHOW SERIES` prints.

/// Bytes a backslash escapes in a measurement.
pub const fn escaped_in_measurement(b: u8) -> bool {
    b == b',' || b == b' '
}

/// Bytes a backslash escapes in tag keys, tag values (and field keys).
pub const fn escaped_in_key(b: u8) -> bool {
    b == b',' || b == b'=' || b == b' '
}

/// The series key of a measurement and its tags (sorted by key): the line-protocol text of
/// that part of a line, e.g. `env,sensor=s1,site=w3`. Escapes `,` and space in the measurement
/// and `,`, `=` and space in tag keys and values, so parsing the key gives the series back.
pub fn series_key<K: AsRef<str>, V: AsRef<str>>(
    measurement: &str,
    sorted_tags: &[(K, V)],
) -> String {
    series_key_of(measurement, sorted_tags.iter().map(|(k, v)| (k.as_ref(), v.as_ref())))
}

fn series_key_of<'a>(
    measurement: &str,
    sorted_tags: impl Iterator<Item = (&'a str, &'a str)> + Clone,
) -> String {
    let len =
        measurement.len() + sorted_tags.clone().map(|(k, v)| k.len() + v.len() + 2).sum::<usize>();
    let mut key = String::with_capacity(len);
    escape_into(&mut key, measurement, escaped_in_measurement);
    for (k, v) in sorted_tags {
        key.push(',');
        escape_into(&mut key, k, escaped_in_key);
        key.push('=');
        escape_into(&mut key, v, escaped_in_key);
    }
    key
}

fn escape_into(out: &mut String, text: &str, escaped: impl Fn(u8) -> bool) {
    for c in text.chars() {
        if c.is_ascii() && escaped(c as u8) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// A series as readings carry it: one pointer, so that the thousands of readings of one sensor
/// that pass through the buffers cost one `SeriesMeta`, not one each.
///
/// A series the line-protocol parser admitted is **interned** ([`Series::interned`]): made
/// once per key for the life of the process and never freed, so copying and dropping it touch
/// no reference count, and two interned series are the same series exactly when they are the
/// same pointer. With two cores parsing and merging, a shared count was an atomic write per
/// line to a cache line the other core had just written, much of the parser's time. The
/// interned series are bounded by the cardinality limit that admitted them (see
/// [`KnownSeries`](crate::ingest::validate::KnownSeries)). Every other series (JSON items, the
/// log's replay, tests) is [`Series::shared`]: reference-counted and freed with its last reading.
#[derive(Clone)]
pub struct Series(SeriesRepr);

#[derive(Clone)]
enum SeriesRepr {
    Interned(&'static SeriesMeta),
    Shared(Arc<SeriesMeta>),
}

impl Series {
    pub fn shared(meta: SeriesMeta) -> Series {
        Series(SeriesRepr::Shared(Arc::new(meta)))
    }

    /// Leaks `meta`: the caller bounds how many it interns and interns each key once.
    pub fn interned(meta: SeriesMeta) -> Series {
        Series(SeriesRepr::Interned(Box::leak(Box::new(meta))))
    }

    pub fn is_interned(&self) -> bool {
        matches!(self.0, SeriesRepr::Interned(_))
    }

    /// An interned series' key, which lives as long as the process.
    pub fn interned_key(&self) -> Option<&'static str> {
        match self.0 {
            SeriesRepr::Interned(meta) => Some(meta.key()),
            SeriesRepr::Shared(_) => None,
        }
    }

    /// Whether both are the one object (then they are the same series; the converse holds
    /// only for interned series).
    pub fn ptr_eq(a: &Series, b: &Series) -> bool {
        std::ptr::eq::<SeriesMeta>(&**a, &**b)
    }
}

impl std::ops::Deref for Series {
    type Target = SeriesMeta;
    fn deref(&self) -> &SeriesMeta {
        match &self.0 {
            SeriesRepr::Interned(meta) => meta,
            SeriesRepr::Shared(meta) => meta,
        }
    }
}

impl From<SeriesMeta> for Series {
    fn from(meta: SeriesMeta) -> Series {
        Series::shared(meta)
    }
}

impl From<Arc<SeriesMeta>> for Series {
    fn from(meta: Arc<SeriesMeta>) -> Series {
        Series(SeriesRepr::Shared(meta))
    }
}

impl PartialEq for Series {
    fn eq(&self, other: &Series) -> bool {
        Series::ptr_eq(self, other) || **self == **other
    }
}

impl Eq for Series {}

impl std::fmt::Debug for Series {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// As the `SeriesMeta` it points to (the log's records): a decoded series is shared.
impl serde::Serialize for Series {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for Series {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Series, D::Error> {
        SeriesMeta::deserialize(d).map(Series::shared)
    }
}

/// What ingest hands on: a reading and its series.
pub type Item = (Series, Reading);

/// A reading's write sequence number: assigned at ingest, increasing in the order readings
/// enter the buffers (and the write-ahead log). The stores record the highest one they hold per
/// (series, hour), which is what makes a retried flush and a WAL replay land exactly once; see
/// docs/design/ingest.md, "Exactly once".
pub type Seq = u64;

/// Ascending sequence numbers read by index: a slice of them, or a batch's first readings
/// ([`SettledRun`]), whose numbers are read in place rather than collected (a flush cycle
/// settles a quarter of a million readings).
pub trait SeqRun {
    fn len(&self) -> usize;
    fn seq_at(&self, i: usize) -> Seq;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SeqRun for &[Seq] {
    fn len(&self) -> usize {
        <[Seq]>::len(self)
    }

    fn seq_at(&self, i: usize) -> Seq {
        self[i]
    }
}

/// The first `len` readings of a numbered batch.
#[derive(Clone, Copy)]
pub struct SettledRun<'a> {
    pub batch: &'a Batch,
    pub len: usize,
}

impl SeqRun for SettledRun<'_> {
    fn len(&self) -> usize {
        self.len
    }

    fn seq_at(&self, i: usize) -> Seq {
        debug_assert!(self.batch.numbered && i < self.len);
        self.batch.rows.seq(i)
    }
}

/// Who wrote a reading: one per bucketd process lineage, created on its first start and kept
/// beside its write-ahead log (`wal::identity`), so a restart on the same directory is the same
/// writer. Sequence numbers of different writers are not comparable, so the stores keep one
/// high-water mark per (series, hour, writer): see docs/design/ingest.md, "Exactly once".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WriterId(pub u64);

impl std::fmt::Display for WriterId {
    /// Sixteen lowercase hex digits: a valid, fixed-width MongoDB field name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::str::FromStr for WriterId {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u64::from_str_radix(s, 16).map(WriterId)
    }
}

/// Readings of one series within one hour, handed to a [`crate::store::Store`] as one unit:
/// the rows a buffer held, moved as they are (a store makes the readings from them as it writes
/// the batch). Every reading lies in `hour` (the constructors check it). A batch is
/// **numbered** when each reading carries its sequence number, strictly increasing (the
/// flusher's batches), or not (tests and tools: the store records no high-water mark for it).
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub series: Series,
    pub hour: TimestampMs,
    rows: Rows,
    numbered: bool,
}

impl Batch {
    /// A batch without sequence numbers.
    ///
    /// # Panics
    /// If a reading lies outside `hour`.
    pub fn new(series: impl Into<Series>, hour: TimestampMs, readings: Vec<Reading>) -> Batch {
        Batch::numbered(series, hour, readings, Vec::new())
    }

    /// A batch whose reading `i` has sequence number `seqs[i]`; `seqs` empty: without.
    ///
    /// # Panics
    /// If a reading lies outside `hour`, or `seqs` is neither empty nor one per reading.
    pub fn numbered(
        series: impl Into<Series>,
        hour: TimestampMs,
        readings: Vec<Reading>,
        seqs: Vec<Seq>,
    ) -> Batch {
        assert!(seqs.is_empty() || seqs.len() == readings.len(), "one sequence number each");
        let numbered = !seqs.is_empty();
        let mut rows = Rows::default();
        for (i, r) in readings.into_iter().enumerate() {
            assert_eq!(hour_start(r.ts), hour, "a batch's readings lie in its hour");
            rows.push(r, seqs.get(i).copied().unwrap_or(0));
        }
        Batch { series: series.into(), hour, rows, numbered }
    }

    /// A numbered batch of rows a buffer of `hour` held.
    pub fn of_rows(series: Series, hour: TimestampMs, rows: Rows) -> Batch {
        debug_assert!(rows.timestamps().all(|ts| hour_start(ts) == hour));
        Batch { series, hour, rows, numbered: true }
    }

    pub fn rows(&self) -> &Rows {
        &self.rows
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Reading `i`, made now (its fields in the order the buffer first met their names).
    pub fn reading(&self, i: usize) -> Reading {
        self.rows.reading(i)
    }

    /// Every reading in order, each made when the iterator reaches it.
    pub fn readings(&self) -> impl ExactSizeIterator<Item = Reading> + '_ {
        self.rows.readings()
    }

    pub fn ts(&self, i: usize) -> TimestampMs {
        self.rows.ts(i)
    }

    /// The sequence number of reading `i`, if the batch is numbered.
    pub fn seq(&self, i: usize) -> Option<Seq> {
        self.numbered.then(|| self.rows.seq(i))
    }

    pub fn is_numbered(&self) -> bool {
        self.numbered
    }

    /// Every reading's sequence number in order; empty when the batch is not numbered.
    pub fn seqs(&self) -> Vec<Seq> {
        if self.numbered { self.rows.seqs().collect() } else { Vec::new() }
    }

    /// The sequence number of the batch's newest reading, if it is numbered.
    pub fn last_seq(&self) -> Option<Seq> {
        self.len().checked_sub(1).and_then(|i| self.seq(i))
    }

    /// The first `k` readings (all of them if fewer), numbered as this batch is.
    pub fn prefix(&self, k: usize) -> Batch {
        let mut rows = self.rows.clone();
        let front = if k < rows.len() { rows.split_front(k) } else { rows };
        Batch { series: self.series.clone(), hour: self.hour, rows: front, numbered: self.numbered }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hour_start_floors_negative_times() {
        assert_eq!(hour_start(0), 0);
        assert_eq!(hour_start(HOUR_MS - 1), 0);
        assert_eq!(hour_start(-1), -HOUR_MS);
    }

    fn meta() -> SeriesMeta {
        SeriesMeta::untagged("s", "m")
    }

    #[test]
    fn a_series_gives_back_its_key_measurement_and_tags_and_writes_as_separate_strings() {
        let tags = [("site", "w 3"), ("zone", "")];
        let s = SeriesMeta::new("env,site=w\\ 3,zone=", "env", &tags);
        assert_eq!(s.key(), "env,site=w\\ 3,zone=");
        assert_eq!(s.measurement(), "env");
        assert_eq!(s.tags().collect::<Vec<_>>(), tags);
        assert_eq!(s.tags().len(), 2);
        assert_eq!(s.series_key(), s.key());
        let bare = SeriesMeta::untagged("", "");
        assert_eq!((bare.key(), bare.measurement(), bare.tags().len()), ("", "", 0));

        // The log's older records and the dead letters hold the three strings, in this order.
        #[derive(serde::Serialize)]
        struct Before<'a> {
            key: &'a str,
            measurement: &'a str,
            tags: Vec<(&'a str, &'a str)>,
        }
        let before = Before { key: s.key(), measurement: "env", tags: tags.to_vec() };
        let bytes = postcard::to_stdvec(&before).unwrap();
        assert_eq!(postcard::to_stdvec(&s).unwrap(), bytes);
        assert_eq!(postcard::from_bytes::<SeriesMeta>(&bytes).unwrap(), s);
        assert_eq!(
            format!("{s:?}"),
            r#"SeriesMeta { key: "env,site=w\\ 3,zone=", measurement: "env", tags: [("site", "w 3"), ("zone", "")] }"#
        );
    }

    fn at(ts: TimestampMs) -> Reading {
        Reading { ts, fields: smallvec::smallvec![("v".into(), FieldValue::Int(ts))] }
    }

    #[test]
    #[should_panic(expected = "a batch's readings lie in its hour")]
    fn a_batch_refuses_a_reading_outside_its_hour() {
        Batch::new(meta(), 0, vec![at(1), at(HOUR_MS)]);
    }

    #[test]
    fn a_batch_gives_back_its_readings_and_numbers() {
        let plain = Batch::new(meta(), -HOUR_MS, vec![at(-5), at(-HOUR_MS)]);
        assert_eq!(plain.readings().collect::<Vec<_>>(), vec![at(-5), at(-HOUR_MS)]);
        assert_eq!((plain.last_seq(), plain.seq(0), plain.seqs()), (None, None, vec![]));
        let numbered = Batch::numbered(meta(), 0, vec![at(1), at(2), at(3)], vec![7, 8, 10]);
        assert_eq!(numbered.last_seq(), Some(10));
        assert_eq!(numbered.seqs(), vec![7, 8, 10]);
        let front = numbered.prefix(2);
        assert_eq!((front.len(), front.last_seq(), front.reading(1)), (2, Some(8), at(2)));
        assert_eq!(numbered.prefix(9), numbered);
        assert_ne!(front, numbered);
    }

    #[test]
    fn field_names_are_shared_and_bounded() {
        let mut names = FieldNames::default();
        let a = names.get("temp");
        assert!(
            arcstr::ArcStr::ptr_eq(&a.0, &names.get("temp").0),
            "a repeated name is the same object"
        );
        assert_eq!(a, "temp");
        for i in 0..FieldNames::NAMES {
            names.get(&format!("f{i}"));
        }
        assert_eq!(names.recent.len(), FieldNames::NAMES);
        assert!(!names.recent.iter().any(|n| n == "temp"), "the oldest name left the list");
        assert!(names.more.contains("temp"), "for the set of older names");
        assert!(arcstr::ArcStr::ptr_eq(&a.0, &names.get("temp").0), "where it is found");
        for i in 0..FieldNames::MORE + FieldNames::NAMES {
            names.get(&format!("g{i}"));
        }
        assert!(names.more.len() <= FieldNames::MORE && !names.more.contains("temp"), "bounded");
        assert!(
            arcstr::ArcStr::ptr_eq(&a.0, &names.get("temp").0),
            "a forgotten name is found again in the process's table: one object per name"
        );
        assert!(
            arcstr::ArcStr::is_static(&a.0),
            "an interned name counts no references: copying and dropping it writes nothing"
        );
        assert!(!arcstr::ArcStr::is_static(&FieldName::from("temp").0), "only interned ones");
    }
}
