//! Points from protocols that name a point's measurement, tags and fields apart (Prometheus
//! remote write, OpenTelemetry): made into the series and reading line protocol would make of
//! the same point, under the same limits.

use crate::ingest::validate::{self, InputLimits, InvalidReading};
use crate::model::series_key::{self, series_key};
use crate::model::{Item, Reading, Series, SeriesMeta};

/// What a request of such a protocol became: its readings, what was refused (`R` says what of
/// the request and why), and what was skipped as holding nothing to store.
#[derive(Debug)]
pub struct Converted<R> {
    pub items: Vec<Item>,
    pub rejected: Vec<R>,
    pub skipped: usize,
}

impl<R> Default for Converted<R> {
    fn default() -> Self {
        Converted { items: Vec::new(), rejected: Vec::new(), skipped: 0 }
    }
}

/// The series of `measurement` with `tags` (in any order), in `limits`' database: checked and
/// admitted as a new line-protocol series is, or the known one. A tag with an empty value is
/// absent, as in Prometheus (line protocol cannot write one).
pub fn series(
    measurement: &str,
    mut tags: Vec<(String, String)>,
    limits: &InputLimits,
) -> Result<Series, InvalidReading> {
    if measurement.is_empty() {
        return Err(InvalidReading::NoMeasurement);
    }
    tags.retain(|(_, value)| !value.is_empty());
    series_key::sort_tags(&mut tags);
    if let Some([first, _]) = series_key::repeated_key(&tags) {
        return Err(InvalidReading::DuplicateTag { name: first.0.clone() });
    }
    let key = series_key(measurement, &tags);
    let key = limits.database.qualified(&key);
    if let Some(series) = limits.known.get(key.as_bytes()) {
        return Ok(series);
    }
    let meta = SeriesMeta::new(&key, measurement, &tags);
    validate::validate_series(&meta, limits)?;
    validate::admit_series(&meta, limits)?;
    Ok(limits.known.insert(key.as_bytes(), meta))
}

/// `reading` if it keeps the limits a reading of line protocol keeps.
pub fn reading(reading: Reading, limits: &InputLimits) -> Result<Reading, InvalidReading> {
    validate::validate_reading(&reading, limits).map(|()| reading)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::databases::Database;
    use crate::ingest::line_protocol::{self, Precision};
    use crate::model::FieldValue;

    fn tags(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_point_lands_in_the_series_line_protocol_gives_it() {
        for limits in [
            InputLimits::default(),
            InputLimits::default().in_database(Database::named("plant").unwrap()),
        ] {
            let made = series(
                "cpu load",
                tags(&[("zone", "a b"), ("empty", ""), ("host", "h,1")]),
                &limits,
            )
            .unwrap();
            let line = b"cpu\\ load,host=h\\,1,zone=a\\ b v=1 1000000";
            let (good, bad) =
                line_protocol::parse_body_split(line, Precision::Nanoseconds, 0, &limits);
            assert!(bad.is_empty(), "{bad:?}");
            let (parsed, _) = &good[0];
            assert_eq!(made.key(), parsed.key());
            assert_eq!(made.tags().collect::<Vec<_>>(), parsed.tags().collect::<Vec<_>>());
            assert_eq!(made.measurement(), "cpu load");
        }
    }

    #[test]
    fn a_point_keeps_the_limits() {
        let limits = InputLimits { max_tags: 1, ..Default::default() };
        let err = series("m", tags(&[("a", "1"), ("b", "2")]), &limits).unwrap_err();
        assert_eq!(err.reason(), "fields");
        let err = series("m", tags(&[("a", "1"), ("a", "2")]), &limits).unwrap_err();
        assert_eq!(err, InvalidReading::DuplicateTag { name: "a".into() });
        assert_eq!(series("", vec![], &limits).unwrap_err(), InvalidReading::NoMeasurement);
        let nan = Reading { ts: 0, fields: vec![("v".into(), FieldValue::Float(f64::NAN))].into() };
        assert_eq!(reading(nan, &limits).unwrap_err().reason(), "value");
    }
}
