//! A series: what identifies it and what is stored beside it ([`SeriesMeta`]), and how
//! readings carry it ([`Series`]).

use std::sync::Arc;

use super::series_key::series_key_of;

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

#[cfg(test)]
mod tests {
    use super::*;
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
}
