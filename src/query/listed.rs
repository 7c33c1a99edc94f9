//! Series listings used again across statements. Every InfluxQL statement names its series
//! by measurement and finds the ones its condition keeps among all of them, so a dashboard's
//! one-sensor panel listed every series of the measurement each time. A store that can tell
//! when its set of series changes ([`Store::series_generation`]) has its listings kept here,
//! by database and measurement, and used while that number stays the same. Only what a
//! listing of series is made of is relied on (keys, measurements, tags): the spans
//! (`first`, `last`) of a kept listing are those it had when it was made.
//!
//! [`Store::series_generation`]: crate::store::Store::series_generation

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::store::SensorInfo;

/// Bytes of listings kept at most. Full: every kept listing is dropped before a new one is
/// kept; a listing larger than this alone is not kept.
pub const MAX_BYTES: usize = 16 << 20;

/// A series' share besides its strings: the `SensorInfo`, its tag pairs' strings and vector.
const PER_SERIES: usize = 128;
const PER_TAG: usize = 48;

/// Listings by (database, measurement or every measurement).
#[derive(Default)]
pub struct Listings {
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    by: HashMap<(String, Option<String>), Listing>,
    bytes: usize,
}

struct Listing {
    generation: u64,
    series: Arc<[Arc<SensorInfo>]>,
    bytes: usize,
}

/// The bytes [`Listings`] counts for `s`.
pub fn bytes_of(s: &SensorInfo) -> usize {
    PER_SERIES
        + s.key.len()
        + s.measurement.len()
        + s.tags.iter().map(|(k, v)| PER_TAG + k.len() + v.len()).sum::<usize>()
}

impl Listings {
    /// The listing kept for `database` and `measurement`, if it was made under `generation`.
    pub fn get(
        &self,
        database: &str,
        measurement: Option<&str>,
        generation: u64,
    ) -> Option<Arc<[Arc<SensorInfo>]>> {
        let kept = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let key = (database.to_owned(), measurement.map(str::to_owned));
        kept.by.get(&key).filter(|l| l.generation == generation).map(|l| l.series.clone())
    }

    /// Keeps `series`, listed whole under `generation` (read before the listing began), and
    /// `bytes` of them by [`bytes_of`].
    pub fn put(
        &self,
        database: &str,
        measurement: Option<String>,
        generation: u64,
        series: Vec<Arc<SensorInfo>>,
        bytes: usize,
    ) {
        if bytes > MAX_BYTES {
            return;
        }
        let mut kept = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let key = (database.to_owned(), measurement);
        if let Some(old) = kept.by.remove(&key) {
            kept.bytes -= old.bytes;
        }
        if kept.bytes + bytes > MAX_BYTES {
            kept.by.clear();
            kept.bytes = 0;
        }
        kept.bytes += bytes;
        kept.by.insert(key, Listing { generation, series: series.into(), bytes });
    }

    /// Bytes kept now, for tests.
    pub fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(key: &str) -> Arc<SensorInfo> {
        Arc::new(SensorInfo {
            key: key.to_owned(),
            measurement: "m".into(),
            tags: vec![("sensor".into(), key.into())],
            first: 0,
            last: 0,
        })
    }

    #[test]
    fn a_listing_is_used_under_its_generation_only() {
        let l = Listings::default();
        let series = vec![info("m,sensor=a"), info("m,sensor=b")];
        let bytes = series.iter().map(|s| bytes_of(s)).sum();
        l.put("db", Some("m".into()), 3, series.clone(), bytes);
        assert_eq!(l.get("db", Some("m"), 3).as_deref(), Some(&series[..]));
        assert!(l.get("db", Some("m"), 4).is_none());
        assert!(l.get("other", Some("m"), 3).is_none());
        assert!(l.get("db", None, 3).is_none());
        // Kept again under a newer generation: one listing counted.
        l.put("db", Some("m".into()), 4, series, bytes);
        assert_eq!(l.bytes(), bytes);
    }

    #[test]
    fn listings_stay_within_their_bytes() {
        let l = Listings::default();
        let one = info("m,sensor=a");
        let each = bytes_of(&one);
        let per_listing = MAX_BYTES / 3 / each;
        for m in 0..10 {
            let series = vec![one.clone(); per_listing];
            l.put("db", Some(format!("m{m}")), 1, series, per_listing * each);
            assert!(l.bytes() <= MAX_BYTES);
        }
        assert!(l.get("db", Some("m9"), 1).is_some());
        // Larger than the bound alone: not kept.
        let huge = MAX_BYTES / each + 1;
        l.put("db", Some("huge".into()), 1, vec![one; huge], huge * each);
        assert!(l.get("db", Some("huge"), 1).is_none());
        assert!(l.bytes() <= MAX_BYTES);
    }
}
