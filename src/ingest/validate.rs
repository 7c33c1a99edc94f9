//! Ingest policy: the bounds a reading must keep, the checks both parsers run before anything
//! reaches a buffer, the cardinality limit, and the cache of series already admitted.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::databases::Database;
use crate::model::{FieldValue, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Reading, Series, SeriesMeta};

/// Readings with up to this many fields look for a repeated name by a scan.
const LINEAR_FIELDS: usize = 16;

/// Bounds on what one reading may carry. They exist so that one client cannot blow up memory,
/// a bucket document, or metric cardinality; the defaults are generous for sensor data.
#[derive(Clone, Debug)]
pub struct InputLimits {
    pub max_sensor_key_bytes: usize,
    pub max_fields: usize,
    pub max_tags: usize,
    pub max_name_bytes: usize,
    pub max_tag_value_bytes: usize,
    pub max_string_value_bytes: usize,
    /// The series (cardinality) bound; `None`: unbounded. Shared by every listener.
    pub series: Option<Arc<SeriesLimit>>,
    /// Series already validated and admitted, by their line-protocol text. Shared by every
    /// listener, like `series`.
    pub known: Arc<KnownSeries>,
    /// Where the readings go: their series keys are this database's.
    pub database: Database,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_sensor_key_bytes: 1024,
            max_fields: 256,
            max_tags: 64,
            max_name_bytes: 256,
            max_tag_value_bytes: 256,
            // Large enough for a status message or a small blob, small enough that a bucket
            // still holds many readings under the default size cap.
            max_string_value_bytes: 64 * 1024,
            series: None,
            known: Default::default(),
            database: Database::default(),
        }
    }
}

impl InputLimits {
    /// The same limits for readings that go to `database`.
    pub fn in_database(&self, database: Database) -> InputLimits {
        InputLimits { database, ..self.clone() }
    }
}

/// Series that passed [`validate_series`] and [`admit_series`], interned by the text that
/// identifies them in a line (measurement and tags exactly as written, escapes included), so
/// that a line of a known sensor costs one lookup instead of building, checking and later
/// dropping a `SeriesMeta`: the same text always parses to the same series under the same
/// limits, and a known key is always admitted again.
///
/// Every line of every connection reads this map, on every core: it is a lock-free map
/// (`papaya`), whose reads write nothing shared, and it hands out [`Series::interned`] series,
/// whose copies count no references. (A sharded map's read lock and an `Arc`'s count were
/// atomic writes per line to cache lines the other core had just written: much of the
/// parser's time on two cores.)
///
/// One map holds both kinds of entry, so that a series costs one entry and no copy of its text
/// in the usual case, where a line writes its tags sorted and its text is its key:
/// - each interned series under its key, borrowed from the series ([`Text::Key`]); these are
///   what keeps one interned series per key, and stay for the life of the process, at most
///   `capacity` of them (the cardinality limit, `--max-series`, which never admits more keys
///   than that either);
/// - every other text of a known series, copied ([`Text::Other`]): tags in another order,
///   other escapes, and series past `capacity`, which are shared, not interned. Full-policy:
///   at `capacity` such texts, inserting one forgets all of them (a forgotten text is only
///   parsed and checked again on its next line).
pub struct KnownSeries {
    capacity: usize,
    texts: papaya::HashMap<Text, Series, foldhash::fast::RandomState>,
    /// Held while a series is inserted, so that a key is interned once.
    counts: Mutex<TextCounts>,
}

#[derive(Default)]
struct TextCounts {
    interned: usize,
    other: usize,
}

/// A key of [`KnownSeries`]: looked up by the bytes of a line's series text.
enum Text {
    Key(&'static str),
    Other(Box<[u8]>),
}

impl Text {
    fn bytes(&self) -> &[u8] {
        match self {
            Text::Key(key) => key.as_bytes(),
            Text::Other(text) => text,
        }
    }
}

impl std::hash::Hash for Text {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // As `[u8]` hashes: `Borrow<[u8]>` requires equal hashes.
        self.bytes().hash(state)
    }
}

impl PartialEq for Text {
    fn eq(&self, other: &Text) -> bool {
        self.bytes() == other.bytes()
    }
}

impl Eq for Text {}

impl std::borrow::Borrow<[u8]> for Text {
    fn borrow(&self) -> &[u8] {
        self.bytes()
    }
}

impl std::fmt::Debug for KnownSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KnownSeries({} of {})", self.len(), self.capacity)
    }
}

impl KnownSeries {
    pub const DEFAULT_CAPACITY: usize = 100_000;

    pub fn new(capacity: usize) -> KnownSeries {
        KnownSeries {
            capacity: capacity.max(1),
            texts: papaya::HashMap::with_hasher(Default::default()),
            counts: Default::default(),
        }
    }

    pub fn get(&self, text: &[u8]) -> Option<Series> {
        self.texts.pin().get(text).cloned()
    }

    /// Remembers `text` as `meta`'s, and returns the series to hand on: the key's interned
    /// one (interning it now if there is room).
    pub fn insert(&self, text: &[u8], meta: SeriesMeta) -> Series {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let texts = self.texts.pin();
        // A text equal to a key parses to that key's series, so this finds it if known.
        let series = match texts.get(meta.key().as_bytes()) {
            Some(series) => series.clone(),
            None if counts.interned < self.capacity => {
                let series = Series::interned(meta);
                let key = series.interned_key().expect("interned");
                texts.insert(Text::Key(key), series.clone());
                counts.interned += 1;
                series
            }
            None => Series::shared(meta),
        };
        if !series.is_interned() || text != series.key().as_bytes() {
            if counts.other >= self.capacity {
                texts.retain(|text, _| matches!(text, Text::Key(_)));
                counts.other = 0;
            }
            if texts.insert(Text::Other(text.into()), series.clone()).is_none() {
                counts.other += 1;
            }
        }
        series
    }

    /// Texts remembered, keys included.
    pub fn len(&self) -> usize {
        self.texts.pin().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for KnownSeries {
    fn default() -> Self {
        KnownSeries::new(KnownSeries::DEFAULT_CAPACITY)
    }
}

/// Why a reading was refused before it reached a buffer. The `reason()` string is the metric
/// label for rejected readings, so it must stay a small fixed set.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidReading {
    #[error("sensor key is empty")]
    EmptySensor,
    /// The mark that starts a database's keys.
    #[error("sensor key starts with the control character U+001F")]
    ReservedSensor,
    #[error("the point names no measurement")]
    NoMeasurement,
    #[error("sensor key is {len} bytes, more than the limit of {max}")]
    SensorTooLong { len: usize, max: usize },
    #[error("reading has no fields")]
    NoFields,
    #[error("reading has {count} fields, more than the limit of {max}")]
    TooManyFields { count: usize, max: usize },
    #[error("reading has {count} tags, more than the limit of {max}")]
    TooManyTags { count: usize, max: usize },
    #[error("field or tag name {name:?} is invalid: {why}")]
    BadName { name: String, why: &'static str },
    #[error("tag {name:?} appears more than once")]
    DuplicateTag { name: String },
    #[error("field {name:?} appears more than once")]
    DuplicateField { name: String },
    #[error("value of {name:?} is too long ({len} bytes, limit {max})")]
    ValueTooLong { name: String, len: usize, max: usize },
    #[error("field {name:?} is not a finite number")]
    NotFinite { name: String },
    #[error("timestamp {ts} ms is outside the supported range (years 0000 to 9999)")]
    TimestampOutOfRange { ts: i64 },
    #[error(
        "new series refused: this server already accepts {max} distinct series (--max-series); \
         readings of known series are still accepted"
    )]
    TooManySeries { max: usize },
}

impl InvalidReading {
    pub fn reason(&self) -> &'static str {
        match self {
            InvalidReading::EmptySensor
            | InvalidReading::ReservedSensor
            | InvalidReading::NoMeasurement
            | InvalidReading::SensorTooLong { .. } => "sensor",
            InvalidReading::NoFields
            | InvalidReading::TooManyFields { .. }
            | InvalidReading::TooManyTags { .. }
            | InvalidReading::DuplicateField { .. } => "fields",
            InvalidReading::BadName { .. } | InvalidReading::DuplicateTag { .. } => "name",
            InvalidReading::ValueTooLong { .. } | InvalidReading::NotFinite { .. } => "value",
            InvalidReading::TimestampOutOfRange { .. } => "timestamp",
            InvalidReading::TooManySeries { .. } => "cardinality",
        }
    }
}

fn check_name(name: &str, limits: &InputLimits) -> Result<(), InvalidReading> {
    let why = if name.is_empty() {
        "empty"
    } else if name.len() > limits.max_name_bytes {
        "too long"
    } else if name.contains('\0') {
        // MongoDB's BSON keys are C strings: a NUL would silently truncate the name.
        "contains a NUL byte"
    } else {
        return Ok(());
    };
    Err(InvalidReading::BadName { name: truncate_for_echo(name, 64).to_owned(), why })
}

/// A bounded set of the series (sensor keys) this process has accepted readings for: the
/// cardinality limit. Full-policy: a key not in the set is refused once the set holds `max`
/// keys; known keys are always admitted. It holds 64-bit hashes (keyed per process, so clients
/// cannot aim collisions), about 16 bytes a series, and never shrinks: the count is per process
/// since start, so a restart resets it, and a store (MongoDB) may hold more series than this.
pub struct SeriesLimit {
    max: usize,
    /// Every JSON item's key goes through here (line protocol only on a [`KnownSeries`]
    /// miss), so the hasher is foldhash (randomly seeded per process, like the buffer map's)
    /// rather than SipHash, for the same per-reading reason the buffer map dropped SipHash (see
    /// `buffer::group`).
    hasher: foldhash::fast::RandomState,
    seen: dashmap::DashSet<u64, foldhash::fast::RandomState>,
    /// Slots taken, including ones being inserted; never above `max`.
    count: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for SeriesLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SeriesLimit({} of {})", self.len(), self.max)
    }
}

impl SeriesLimit {
    pub fn new(max: usize) -> SeriesLimit {
        SeriesLimit {
            max,
            hasher: Default::default(),
            seen: dashmap::DashSet::with_hasher(Default::default()),
            count: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Series admitted so far.
    pub fn len(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::Relaxed).min(self.max)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Admits `key` if it is known or there is room. Never admits more than `max` keys, even
    /// under concurrent calls: a slot is taken before the insert and given back if it was not
    /// needed.
    pub fn admit(&self, key: &str) -> bool {
        use std::hash::BuildHasher as _;
        use std::sync::atomic::Ordering;
        let hash = self.hasher.hash_one(key);
        if self.seen.contains(&hash) {
            return true;
        }
        if self.count.fetch_add(1, Ordering::AcqRel) >= self.max {
            self.count.fetch_sub(1, Ordering::AcqRel);
            // Another caller may have inserted this very key meanwhile.
            return self.seen.contains(&hash);
        }
        if !self.seen.insert(hash) {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
        metrics::gauge!(crate::metrics::SERIES_TRACKED).set(self.len() as f64);
        true
    }
}

/// Admits the reading's series under `limits.series`, the cardinality bound. Called by the
/// parsers after [`validate`], so that invalid readings take no slot.
pub fn admit_series(series: &SeriesMeta, limits: &InputLimits) -> Result<(), InvalidReading> {
    match &limits.series {
        Some(bound) if !bound.admit(series.key()) => {
            Err(InvalidReading::TooManySeries { max: bound.max() })
        }
        _ => Ok(()),
    }
}

/// Checks everything a store relies on: limits, names, finite floats, timestamp range.
/// Names containing `.` or starting with `$` are valid here: the MongoDB store maps them
/// reversibly, so users of Telegraf-style dotted names lose nothing.
pub fn validate(
    series: &SeriesMeta,
    reading: &Reading,
    limits: &InputLimits,
) -> Result<(), InvalidReading> {
    validate_series(series, limits)?;
    validate_reading(reading, limits)
}

/// The series half of [`validate`].
pub fn validate_series(series: &SeriesMeta, limits: &InputLimits) -> Result<(), InvalidReading> {
    // The limit is on the key the client wrote, whatever its database's name adds.
    let key = limits.database.local(series.key());
    if key.is_empty() {
        return Err(InvalidReading::EmptySensor);
    }
    if key.len() > limits.max_sensor_key_bytes {
        return Err(InvalidReading::SensorTooLong {
            len: key.len(),
            max: limits.max_sensor_key_bytes,
        });
    }
    if series.tags().len() > limits.max_tags {
        return Err(InvalidReading::TooManyTags {
            count: series.tags().len(),
            max: limits.max_tags,
        });
    }
    for (k, v) in series.tags() {
        check_name(k, limits)?;
        if v.len() > limits.max_tag_value_bytes {
            return Err(InvalidReading::ValueTooLong {
                name: k.to_owned(),
                len: v.len(),
                max: limits.max_tag_value_bytes,
            });
        }
    }
    Ok(())
}

/// The reading half of [`validate`].
pub fn validate_reading(reading: &Reading, limits: &InputLimits) -> Result<(), InvalidReading> {
    if reading.fields.is_empty() {
        return Err(InvalidReading::NoFields);
    }
    if reading.fields.len() > limits.max_fields {
        return Err(InvalidReading::TooManyFields {
            count: reading.fields.len(),
            max: limits.max_fields,
        });
    }
    if !(MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&reading.ts) {
        return Err(InvalidReading::TimestampOutOfRange { ts: reading.ts });
    }
    // A reading of many fields is checked for a repeated name with a set: a scan of the
    // names before each made 256-field readings quadratic.
    let mut seen = (reading.fields.len() > LINEAR_FIELDS).then(|| {
        HashSet::with_capacity_and_hasher(
            reading.fields.len(),
            foldhash::fast::RandomState::default(),
        )
    });
    for (i, (name, value)) in reading.fields.iter().enumerate() {
        check_name(name, limits)?;
        let repeated = match &mut seen {
            Some(seen) => !seen.insert(name.as_str()),
            None => reading.fields[..i].iter().any(|(n, _)| n == name),
        };
        if repeated {
            return Err(InvalidReading::DuplicateField { name: name.to_string() });
        }
        match value {
            FieldValue::Float(f) if !f.is_finite() => {
                return Err(InvalidReading::NotFinite { name: name.to_string() });
            }
            FieldValue::Str(s) if s.len() > limits.max_string_value_bytes => {
                return Err(InvalidReading::ValueTooLong {
                    name: name.to_string(),
                    len: s.len(),
                    max: limits.max_string_value_bytes,
                });
            }
            _ => {}
        }
    }
    Ok(())
}

/// Cuts `s` to at most `max` bytes on a character boundary, for echoing user input in errors.
pub fn truncate_for_echo(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Fields;

    fn series(key: &str) -> SeriesMeta {
        SeriesMeta::untagged(key, key)
    }

    /// A repeated name is refused however many fields the reading has: narrow readings are
    /// scanned, wide ones checked with a set.
    #[test]
    fn a_repeated_field_name_is_refused_in_narrow_and_wide_readings() {
        for width in [2, 16, 17, 255] {
            let mut fields: Fields = (0..width)
                .map(|i| (format!("f{i}").as_str().into(), FieldValue::Float(0.5)))
                .collect();
            let reading = Reading { ts: 1_700_000_000_000, fields: fields.clone() };
            assert_eq!(validate_reading(&reading, &InputLimits::default()), Ok(()), "{width}");
            fields.push(("f1".into(), FieldValue::Int(1)));
            let reading = Reading { ts: 1_700_000_000_000, fields };
            assert_eq!(
                validate_reading(&reading, &InputLimits::default()),
                Err(InvalidReading::DuplicateField { name: "f1".into() }),
                "{width}"
            );
        }
    }

    #[test]
    fn series_limit_refuses_only_new_keys_past_the_bound() {
        let limit = SeriesLimit::new(2);
        assert!(limit.admit("a") && limit.admit("b") && limit.admit("a"));
        assert!(!limit.admit("c"));
        assert!(limit.admit("b"), "known keys stay admitted at the bound");
        assert_eq!(limit.len(), 2);

        let limits = InputLimits { series: Some(Arc::new(limit)), ..InputLimits::default() };
        assert_eq!(admit_series(&series("a"), &limits), Ok(()));
        let refused = admit_series(&series("d"), &limits).unwrap_err();
        assert_eq!(refused.reason(), "cardinality");
        assert!(refused.to_string().contains("--max-series"), "{refused}");
        assert_eq!(admit_series(&series("d"), &InputLimits::default()), Ok(()));
    }

    #[test]
    fn series_limit_holds_under_concurrent_admission() {
        let limit = Arc::new(SeriesLimit::new(100));
        let admitted: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|t| {
                    let limit = limit.clone();
                    // Overlapping key ranges: threads race on the same new keys too.
                    scope.spawn(move || {
                        (0..200).filter(|i| limit.admit(&format!("k{}", i + t * 50))).count()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(limit.len(), 100);
        assert_eq!(limit.seen.len(), 100);
        assert!(admitted >= 100);
    }

    fn reading(fields: Vec<(&str, FieldValue)>) -> Reading {
        Reading { ts: 0, fields: fields.into_iter().map(|(n, v)| (n.into(), v)).collect() }
    }

    #[test]
    fn validate_rejects_each_kind() {
        let l = InputLimits::default();
        let ok = reading(vec![("v", FieldValue::Float(1.0))]);
        assert!(validate(&series("s"), &ok, &l).is_ok());
        assert_eq!(validate(&series(""), &ok, &l), Err(InvalidReading::EmptySensor));
        assert!(matches!(
            validate(&series(&"x".repeat(2000)), &ok, &l),
            Err(InvalidReading::SensorTooLong { .. })
        ));
        assert_eq!(validate(&series("s"), &reading(vec![]), &l), Err(InvalidReading::NoFields));
        assert!(matches!(
            validate(&series("s"), &reading(vec![("v", FieldValue::Float(f64::NAN))]), &l),
            Err(InvalidReading::NotFinite { .. })
        ));
        assert!(matches!(
            validate(&series("s"), &reading(vec![("", FieldValue::Int(1))]), &l),
            Err(InvalidReading::BadName { .. })
        ));
        assert!(matches!(
            validate(
                &series("s"),
                &reading(vec![("a", FieldValue::Int(1)), ("a", FieldValue::Int(2))]),
                &l
            ),
            Err(InvalidReading::DuplicateField { .. })
        ));
        let mut late = ok.clone();
        late.ts = MAX_TIMESTAMP_MS + 1;
        assert!(matches!(
            validate(&series("s"), &late, &l),
            Err(InvalidReading::TimestampOutOfRange { .. })
        ));
        let many: Fields = (0..300).map(|i| (format!("f{i}").into(), FieldValue::Int(i))).collect();
        assert!(matches!(
            validate(&series("s"), &Reading { ts: 0, fields: many }, &l),
            Err(InvalidReading::TooManyFields { .. })
        ));
    }

    #[test]
    fn known_series_keep_each_key_interned_and_forget_other_texts_when_full() {
        let known = KnownSeries::new(2);
        let meta = |key: &str| SeriesMeta::untagged(key, "m");
        let m = known.insert(b"m", meta("m"));
        assert!(m.is_interned());
        assert_eq!(known.len(), 1, "a text that is its key is the key's entry");
        // Another text of the same key (tags in another order) gets the same series.
        assert!(Series::ptr_eq(&known.insert(b"m2", meta("m")), &m));
        assert!(Series::ptr_eq(&known.get(b"m2").unwrap(), &m));
        assert_eq!(known.len(), 2);
        let n = known.insert(b"n", meta("n"));
        assert!(n.is_interned() && !Series::ptr_eq(&n, &m));
        assert!(Series::ptr_eq(&known.insert(b"n2", meta("n")), &n));
        assert_eq!(known.len(), 4);
        // A third other text forgets the two before it, never a key.
        assert!(Series::ptr_eq(&known.insert(b"n3", meta("n")), &n));
        assert!(known.get(b"m2").is_none() && known.get(b"n2").is_none());
        assert!(
            known.get(b"m").is_some() && known.get(b"n").is_some() && known.get(b"n3").is_some()
        );
        // Two keys are interned: a third is shared, found by its text while remembered.
        let o = known.insert(b"o", meta("o"));
        assert!(!o.is_interned());
        assert_eq!(*o, meta("o"));
        assert!(Series::ptr_eq(&known.insert(b"o", meta("o")), &o));
        assert!(Series::ptr_eq(&known.insert(b"m", meta("m")), &m));
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate_for_echo("héllo", 2), "h");
        assert_eq!(truncate_for_echo("abc", 10), "abc");
    }
}
