//! A parsed entry made owned: the series (tags sorted, key canonical) and the reading,
//! validated against the input limits.

use super::Precision;
use super::entry::{Bad, Scratch, Value};
use crate::ingest::validate::{self, InputLimits};
use crate::model::series_key::{self, series_key};
use crate::model::{FieldValue, Item, Reading, Series, SeriesMeta, TimestampMs};

/// Turns a parsed entry into the owned series and reading, and validates them.
pub(super) fn build(
    line: &[u8],
    e: &mut Scratch<'_>,
    precision: Precision,
    now_ms: TimestampMs,
    limits: &InputLimits,
) -> Result<Item, Bad> {
    let series = match e.known.take() {
        Some(series) => Found::Known(series),
        None => Found::New(new_series(line, e, limits)?),
    };
    let ts = match e.ts {
        None => now_ms,
        Some(ts) => precision.to_millis(ts).ok_or_else(|| Bad {
            at: None,
            message: format!("timestamp {ts} in {precision:?} overflows milliseconds"),
            reason: "timestamp",
        })?,
    };
    let fields = e
        .fields
        .drain(..)
        .map(|(k, v)| {
            let v = match v {
                Value::Float(f) => FieldValue::Float(f),
                Value::Int(i) => FieldValue::Int(i),
                Value::UInt(u) => FieldValue::UInt(u),
                Value::Bool(b) => FieldValue::Bool(b),
                Value::Str(s) => FieldValue::Str(s.into_owned()),
            };
            (e.names.get(&k), v)
        })
        .collect();
    let reading = Reading { ts, fields };
    let series = match series {
        Found::Known(series) => validate::validate_reading(&reading, limits).map(|()| series),
        Found::New(meta) => validate::validate(&meta, &reading, limits)
            .and_then(|()| validate::admit_series(&meta, limits))
            .map(|()| limits.known.insert(e.known_text(limits.database.prefix(), line), meta)),
    };
    let series = series.map_err(|invalid| Bad {
        at: None,
        message: invalid.to_string(),
        reason: invalid.reason(),
    })?;
    Ok((series, reading))
}

/// A line's series: known by its text, or built from its tokens (checked before it is known).
enum Found {
    Known(Series),
    New(SeriesMeta),
}

/// The series of a parsed entry, with its tags sorted and its key canonical.
fn new_series(line: &[u8], e: &mut Scratch<'_>, limits: &InputLimits) -> Result<SeriesMeta, Bad> {
    let presorted = e.tags.windows(2).all(|w| w[0].0 < w[1].0);
    if !presorted {
        series_key::sort_tags(&mut e.tags);
        if let Some([first, _]) = series_key::repeated_key(&e.tags) {
            return Err(Bad {
                at: None,
                message: format!("tag key {:?} appears more than once", first.0),
                reason: "syntax",
            });
        }
    }
    // Text that parsed and re-encodes to itself: with the tags already in order, the written
    // series text is the series key, and copying it is cheaper than re-encoding.
    let made;
    let key = match std::str::from_utf8(&line[e.series.0..e.series.1]) {
        Ok(raw) if presorted => raw,
        _ => {
            made = series_key(&e.measurement, &e.tags);
            &made
        }
    };
    Ok(SeriesMeta::new(&limits.database.qualified(key), &e.measurement, &e.tags))
}
