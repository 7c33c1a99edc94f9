//! Ingest policy: the bounds a reading must keep, the checks both parsers run before anything
//! reaches a buffer, the cardinality limit, and the cache of series already admitted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::model::{FieldValue, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, Reading, Series, SeriesMeta};

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
        }
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
/// atomic writes per line to cache lines the other core had just written: half of the parser's
/// time on two cores.)
///
/// Full-policy: bounded to `capacity` texts; inserting into a full cache forgets every text
/// (a forgotten series is only built and checked again on its next line). Entries are never
/// removed otherwise, so a sensor that stopped sending keeps its entry until the next reset.
/// The interned series themselves are kept for the life of the process, one per key and at
/// most `capacity` of them (the cardinality limit, `--max-series`, which never admits more
/// keys than that either); past that a series is shared, not interned.
pub struct KnownSeries {
    capacity: usize,
    texts: papaya::HashMap<Box<[u8]>, Series, foldhash::fast::RandomState>,
    interned: Mutex<HashMap<&'static str, Series, foldhash::fast::RandomState>>,
}

impl std::fmt::Debug for KnownSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KnownSeries({} of {})", self.len(), self.capacity)
    }
}

impl KnownSeries {
    /// About 200 bytes an entry for a typical sensor: 20 MB at most.
    pub const DEFAULT_CAPACITY: usize = 100_000;

    pub fn new(capacity: usize) -> KnownSeries {
        KnownSeries {
            capacity: capacity.max(1),
            texts: papaya::HashMap::with_hasher(Default::default()),
            interned: Default::default(),
        }
    }

    pub fn get(&self, text: &[u8]) -> Option<Series> {
        self.texts.pin().get(text).cloned()
    }

    /// Remembers `text` as `meta`'s, and returns the series to hand on: the key's interned
    /// one (interning it now if there is room).
    pub fn insert(&self, text: &[u8], meta: SeriesMeta) -> Series {
        let series = {
            let mut interned = self.interned.lock().unwrap_or_else(|e| e.into_inner());
            match interned.get(meta.key.as_str()) {
                Some(series) => series.clone(),
                None if interned.len() < self.capacity => {
                    let series = Series::interned(meta);
                    let key = series.interned_key().expect("interned");
                    interned.insert(key, series.clone());
                    series
                }
                None => Series::shared(meta),
            }
        };
        let texts = self.texts.pin();
        if texts.len() >= self.capacity {
            texts.clear();
        }
        texts.insert(text.into(), series.clone());
        series
    }

    /// Texts remembered.
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
            InvalidReading::EmptySensor | InvalidReading::SensorTooLong { .. } => "sensor",
            InvalidReading::NoFields
            | InvalidReading::TooManyFields { .. }
            | InvalidReading::TooManyTags { .. }
            | InvalidReading::DuplicateField { .. } => "fields",
            InvalidReading::BadName { .. } => "name",
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
        Some(bound) if !bound.admit(&series.key) => {
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
    if series.key.is_empty() {
        return Err(InvalidReading::EmptySensor);
    }
    if series.key.len() > limits.max_sensor_key_bytes {
        return Err(InvalidReading::SensorTooLong {
            len: series.key.len(),
            max: limits.max_sensor_key_bytes,
        });
    }
    if series.tags.len() > limits.max_tags {
        return Err(InvalidReading::TooManyTags { count: series.tags.len(), max: limits.max_tags });
    }
    for (k, v) in &series.tags {
        check_name(k, limits)?;
        if v.len() > limits.max_tag_value_bytes {
            return Err(InvalidReading::ValueTooLong {
                name: k.clone(),
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
    for (i, (name, value)) in reading.fields.iter().enumerate() {
        check_name(name, limits)?;
        if reading.fields[..i].iter().any(|(n, _)| n == name) {
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
        SeriesMeta { key: key.into(), measurement: key.into(), tags: vec![] }
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
    fn known_series_forget_every_text_when_full_but_keep_each_key_interned() {
        let known = KnownSeries::new(2);
        let meta =
            |key: &str| SeriesMeta { key: key.into(), measurement: "m".into(), tags: vec![] };
        let m = known.insert(b"m", meta("m"));
        assert!(m.is_interned());
        // Another text of the same key (tags in another order) gets the same series.
        assert!(Series::ptr_eq(&known.insert(b"m2", meta("m")), &m));
        assert_eq!(known.len(), 2);
        let n = known.insert(b"n", meta("n"));
        assert_eq!(known.len(), 1);
        assert!(known.get(b"m").is_none() && known.get(b"n").is_some());
        assert!(n.is_interned() && !Series::ptr_eq(&n, &m));
        // Two keys are interned: a third is shared, and each insert of it a new one.
        let o = known.insert(b"o", meta("o"));
        assert!(!o.is_interned());
        assert_eq!(*o, meta("o"));
        assert!(Series::ptr_eq(&known.insert(b"m", meta("m")), &m));
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate_for_echo("héllo", 2), "h");
        assert_eq!(truncate_for_echo("abc", 10), "abc");
    }
}
