//! Query-string parsing shared by the endpoints: times, limits, steps.
//!
//! Parameters are read from the raw query string rather than through axum's `Query` extractor so
//! that every bad parameter comes back as our own 400 JSON body, and so that `tag` may repeat.

use chrono::{DateTime, SecondsFormat};

use super::error::QueryError;
use crate::model::{MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, TimestampMs};

/// The decoded `name=value` pairs of a query string, in order.
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    pub fn parse(raw: Option<&str>) -> Result<Params, QueryError> {
        let pairs = match raw {
            Some(raw) => serde_urlencoded::from_str::<Vec<(String, String)>>(raw)
                .map_err(|_| QueryError::BadQueryString)?,
            None => Vec::new(),
        };
        Ok(Params { pairs })
    }

    /// A single-valued parameter; an empty value counts as absent, which is what dashboards
    /// send for an unset variable.
    pub fn get(&self, name: &str) -> Result<Option<&str>, QueryError> {
        let mut found = None;
        for (k, v) in &self.pairs {
            if k == name {
                if found.is_some() {
                    return Err(QueryError::DuplicateParam(name.to_owned()));
                }
                found = Some(v.as_str());
            }
        }
        Ok(found.filter(|v| !v.is_empty()))
    }

    pub fn required(&self, name: &'static str) -> Result<&str, QueryError> {
        self.get(name)?.ok_or(QueryError::MissingParam(name))
    }

    /// Every non-empty value of a repeatable parameter.
    pub fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.pairs.iter().filter(move |(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.as_str())
    }
}

/// Parses a time given as RFC 3339 or as integer milliseconds since the epoch (what Grafana's
/// `${__from}` expands to). Sub-millisecond digits are truncated toward negative infinity, as at
/// ingest. Accepts `[MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS + 1]` so that an exclusive `to` can reach
/// past the last representable reading.
pub fn parse_time(param: &'static str, s: &str) -> Result<TimestampMs, QueryError> {
    let bad = |why: String| QueryError::BadParam { param, why };
    let ms = if let Ok(ms) = s.parse::<i64>() {
        ms
    } else {
        DateTime::parse_from_rfc3339(s)
            .map_err(|e| bad(format!("{s:?} is neither RFC 3339 nor epoch milliseconds ({e})")))?
            .timestamp_millis()
    };
    if !(MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS + 1).contains(&ms) {
        return Err(bad(format!("{s:?} is outside the supported years 0000 to 9999")));
    }
    Ok(ms)
}

/// Resolves an optional `from`/`to` pair into `[from, to)`. Defaults: `to` is now, `from` is
/// `to - default_range_ms`. `from == to` is a valid, empty range.
pub fn resolve_range(
    from: Option<TimestampMs>,
    to: Option<TimestampMs>,
    now: TimestampMs,
    default_range_ms: i64,
) -> Result<(TimestampMs, TimestampMs), QueryError> {
    let to = to.unwrap_or(now);
    let from = from.unwrap_or_else(|| to.saturating_sub(default_range_ms).max(MIN_TIMESTAMP_MS));
    if from > to {
        return Err(QueryError::FromAfterTo { from: format_ts(from), to: format_ts(to) });
    }
    Ok((from, to))
}

/// Parses `limit`: absent means `default`; `0`, garbage and anything over `max` are refused
/// (never silently clamped, so a client never mistakes a short page for the end).
pub fn parse_limit(s: Option<&str>, default: usize, max: usize) -> Result<usize, QueryError> {
    let Some(s) = s else { return Ok(default) };
    match s.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(QueryError::BadParam {
            param: "limit",
            why: format!("{s:?} is not a whole number from 1 to {max}"),
        }),
    }
}

pub const MIN_STEP_MS: i64 = 1000;

/// Parses a rollup step such as `30s`, `15m`, `1h`, `1d` or a sum like `1h30m`. Units are
/// ms, s, m, h, d (days are 24 h: steps are counted in UTC since the epoch, with no calendar).
/// A bare number is milliseconds, so Grafana's `${__interval_ms}` works as is.
pub fn parse_step(s: &str) -> Result<i64, QueryError> {
    let bad = |why: &str| QueryError::BadParam { param: "step", why: format!("{s:?}: {why}") };
    let mut total: i64 = 0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad("empty"));
    }
    if rest.bytes().all(|b| b.is_ascii_digit()) {
        total = rest.parse().map_err(|_| bad("too large"))?;
        rest = "";
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad("expected a number, e.g. 15m or 1h"));
        }
        let n: i64 = rest[..digits].parse().map_err(|_| bad("number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit_ms = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "" => return Err(bad("missing unit (ms, s, m, h or d)")),
            _ => return Err(bad("unknown unit; use ms, s, m, h or d")),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit_ms)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| bad("too large"))?;
    }
    if total < MIN_STEP_MS {
        return Err(bad("the smallest step is 1s"));
    }
    Ok(total)
}

/// RFC 3339, UTC, millisecond precision, `Z` suffix: the one time format of every response.
pub fn format_ts(ts: TimestampMs) -> String {
    let mut out = Vec::with_capacity(24);
    write_ts(&mut out, ts);
    String::from_utf8(out).expect("timestamps are ASCII")
}

/// Appends [`format_ts`]`(ts)` to `buf`.
pub fn write_ts(buf: &mut Vec<u8>, ts: TimestampMs) {
    TsWriter::new().write(buf, ts);
}

const MS_PER_DAY: i64 = 86_400_000;

/// Writes timestamps as [`format_ts`] does, straight into a buffer. A range query formats one
/// per reading, and chrono's formatter plus a `String` each time was a quarter of its CPU
/// time; for the accepted years 0000 to 9999 the shape is fixed, so it is filled in directly.
/// The date of the last day seen is kept: a range's readings mostly share their day.
pub struct TsWriter {
    day: i64,
    date: [u8; 11],
}

impl TsWriter {
    pub fn new() -> TsWriter {
        // No timestamp of the accepted range is on this day.
        TsWriter { day: i64::MIN, date: [0; 11] }
    }

    pub fn write(&mut self, buf: &mut Vec<u8>, ts: TimestampMs) {
        if !(MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&ts) {
            // Only a range bound can get here (`to` may be one past the last representable
            // reading): chrono's own rendering, `+10000-...` and the like, is kept for those.
            buf.extend_from_slice(format_ts_chrono(ts).as_bytes());
            return;
        }
        let day = ts.div_euclid(MS_PER_DAY);
        if day != self.day {
            self.day = day;
            self.date = civil_date(day);
        }
        let ms = ts.rem_euclid(MS_PER_DAY) as u32;
        let secs = ms / 1000;
        let mut out = *b"0000-00-00T00:00:00.000Z";
        out[..11].copy_from_slice(&self.date);
        put_two_digits(&mut out, 11, secs / 3600);
        put_two_digits(&mut out, 14, secs / 60 % 60);
        put_two_digits(&mut out, 17, secs % 60);
        out[20] = b'0' + (ms % 1000 / 100) as u8;
        put_two_digits(&mut out, 21, ms % 100);
        buf.extend_from_slice(&out);
    }
}

impl Default for TsWriter {
    fn default() -> Self {
        TsWriter::new()
    }
}

/// `YYYY-MM-DDT` of a day since the epoch, for days of the years 0000 to 9999.
fn civil_date(day: i64) -> [u8; 11] {
    const DAYS_PER_ERA: u32 = 146_097;
    // Howard Hinnant's `civil_from_days`, counting from 0000-03-01 so that the leap day ends
    // its year. One extra 400-year era keeps every accepted day non-negative, so all of it
    // runs on u32 (year 0000 is day -719,528; year 9999 ends before day 2,932,897).
    let z = (day + 719_468 + i64::from(DAYS_PER_ERA)) as u32;
    let era = z / DAYS_PER_ERA;
    let doe = z - era * DAYS_PER_ERA;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day_of_month = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u32::from(month <= 2) - 400;
    let mut out = *b"0000-00-00T";
    put_two_digits(&mut out, 0, year / 100);
    put_two_digits(&mut out, 2, year % 100);
    put_two_digits(&mut out, 5, month);
    put_two_digits(&mut out, 8, day_of_month);
    out
}

fn put_two_digits(out: &mut [u8], at: usize, v: u32) {
    out[at] = b'0' + (v / 10) as u8;
    out[at + 1] = b'0' + (v % 10) as u8;
}

fn format_ts_chrono(ts: TimestampMs) -> String {
    match DateTime::from_timestamp_millis(ts) {
        Some(t) => t.to_rfc3339_opts(SecondsFormat::Millis, true),
        // Unreachable for validated readings; a number is still better than a panic.
        None => ts.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_rfc3339_or_epoch_ms() {
        assert_eq!(parse_time("from", "0").unwrap(), 0);
        assert_eq!(parse_time("from", "-1500").unwrap(), -1500);
        assert_eq!(parse_time("from", "1970-01-01T00:00:01.5Z").unwrap(), 1500);
        assert_eq!(parse_time("from", "1970-01-01T01:00:00+01:00").unwrap(), 0);
        // Sub-millisecond digits truncate toward negative infinity.
        assert_eq!(parse_time("from", "1969-12-31T23:59:59.9995Z").unwrap(), -1);
        assert!(parse_time("from", "yesterday").is_err());
        assert!(parse_time("from", "1.5").is_err());
        assert!(parse_time("to", &(MAX_TIMESTAMP_MS + 2).to_string()).is_err());
        assert_eq!(
            parse_time("to", &(MAX_TIMESTAMP_MS + 1).to_string()).unwrap(),
            MAX_TIMESTAMP_MS + 1
        );
    }

    #[test]
    fn range_defaults_and_order() {
        assert_eq!(
            resolve_range(None, None, 10_000_000, 3_600_000).unwrap(),
            (6_400_000, 10_000_000)
        );
        assert_eq!(resolve_range(Some(5), None, 100, 3_600_000).unwrap(), (5, 100));
        assert_eq!(
            resolve_range(None, Some(7_200_000), 0, 3_600_000).unwrap(),
            (3_600_000, 7_200_000)
        );
        assert_eq!(resolve_range(Some(5), Some(5), 0, 1).unwrap(), (5, 5));
        assert!(matches!(
            resolve_range(Some(6), Some(5), 0, 1),
            Err(QueryError::FromAfterTo { .. })
        ));
        assert_eq!(
            resolve_range(None, Some(MIN_TIMESTAMP_MS), 0, 3_600_000).unwrap(),
            (MIN_TIMESTAMP_MS, MIN_TIMESTAMP_MS)
        );
    }

    #[test]
    fn limits_refuse_rather_than_clamp() {
        assert_eq!(parse_limit(None, 1000, 100_000).unwrap(), 1000);
        assert_eq!(parse_limit(Some("100000"), 1000, 100_000).unwrap(), 100_000);
        assert!(parse_limit(Some("100001"), 1000, 100_000).is_err());
        assert!(parse_limit(Some("0"), 1000, 100_000).is_err());
        assert!(parse_limit(Some("-1"), 1000, 100_000).is_err());
        assert!(parse_limit(Some("ten"), 1000, 100_000).is_err());
    }

    #[test]
    fn steps() {
        assert_eq!(parse_step("30s").unwrap(), 30_000);
        assert_eq!(parse_step("15m").unwrap(), 900_000);
        assert_eq!(parse_step("1h").unwrap(), 3_600_000);
        assert_eq!(parse_step("1d").unwrap(), 86_400_000);
        assert_eq!(parse_step("1h30m").unwrap(), 5_400_000);
        assert_eq!(parse_step("60000").unwrap(), 60_000);
        assert_eq!(parse_step("1500ms").unwrap(), 1500);
        for bad in
            ["", "0s", "500", "999ms", "h", "1x", "1.5h", "-1h", "99999999999999999999d", "1m5"]
        {
            assert!(parse_step(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn params_reject_duplicates_and_treat_empty_as_absent() {
        let p = Params::parse(Some("a=1&a=2&b=&tag=x:1&tag=y:2&c=%20x")).unwrap();
        assert!(matches!(p.get("a"), Err(QueryError::DuplicateParam(_))));
        assert_eq!(p.get("b").unwrap(), None);
        assert_eq!(p.get("c").unwrap(), Some(" x"));
        assert_eq!(p.all("tag").collect::<Vec<_>>(), ["x:1", "y:2"]);
        assert!(matches!(p.required("zz"), Err(QueryError::MissingParam("zz"))));
    }

    #[test]
    fn timestamps_format_with_millis_and_z() {
        assert_eq!(format_ts(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_ts(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_ts(MIN_TIMESTAMP_MS), "0000-01-01T00:00:00.000Z");
        assert_eq!(format_ts(MAX_TIMESTAMP_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(format_ts(MAX_TIMESTAMP_MS + 1), "+10000-01-01T00:00:00.000Z");
    }

    /// `write_ts` must render exactly what chrono does, the formatter it replaced.
    fn assert_same_as_chrono(ts: TimestampMs) {
        let mut fast = Vec::new();
        write_ts(&mut fast, ts);
        assert_eq!(String::from_utf8(fast).unwrap(), format_ts_chrono(ts), "ts = {ts}");
    }

    #[test]
    fn timestamps_format_as_chrono_does_at_the_edges() {
        const DAY: i64 = 86_400_000;
        let edges = [
            MIN_TIMESTAMP_MS,
            MAX_TIMESTAMP_MS,
            0,
            -1,
            1,
            999,
            1000,
            -999,
            -1000,
            -1001,
            DAY - 1,
            DAY,
            -DAY,
            -DAY - 1,
            -DAY + 1,
            951_782_400_000,     // 2000-02-29
            -2_203_891_200_000,  // 1900-03-01, after a century without a leap day
            4_107_542_400_000,   // 2100-03-01
            -62_162_035_200_000, // 0000-03-01
            -62_162_121_600_000, // 0000-02-29: year 0 is a leap year
            -62_135_596_800_000, // 0001-01-01
            253_402_214_400_000, // 9999-12-31
        ];
        for ts in edges {
            for d in [-DAY, -1001, -1, 0, 1, 999, DAY] {
                let ts = ts + d;
                if (MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&ts) {
                    assert_same_as_chrono(ts);
                }
            }
        }
        // Outside the accepted years chrono renders them, or a bare number where it cannot.
        for ts in [MIN_TIMESTAMP_MS - 1, MAX_TIMESTAMP_MS + 1, i64::MIN, i64::MAX] {
            assert_same_as_chrono(ts);
        }
    }

    #[test]
    fn timestamps_format_as_chrono_does_on_every_day() {
        // Every day from 0000-01-01 to 9999-12-31, each at a pseudo-random time of day.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut day_start = MIN_TIMESTAMP_MS;
        while day_start <= MAX_TIMESTAMP_MS {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            assert_same_as_chrono(day_start + (seed >> 33) as i64 % 86_400_000);
            day_start += 86_400_000;
        }
    }

    #[test]
    fn one_writer_formats_a_sequence_as_chrono_does() {
        // Mostly within a day, sometimes jumping across days and back, as a page never does.
        let mut w = TsWriter::new();
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut ts = 1_700_000_000_000i64;
        let mut out = Vec::new();
        for _ in 0..200_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ts = match seed % 100 {
                0 => (seed >> 8) as i64 % (MAX_TIMESTAMP_MS - MIN_TIMESTAMP_MS) + MIN_TIMESTAMP_MS,
                1 => ts - 86_400_000,
                _ => (ts + (seed >> 40) as i64 % 5_000).min(MAX_TIMESTAMP_MS),
            };
            out.clear();
            w.write(&mut out, ts);
            assert_eq!(std::str::from_utf8(&out).unwrap(), format_ts_chrono(ts), "ts = {ts}");
        }
    }

    proptest::proptest! {
        #[test]
        fn timestamps_format_as_chrono_does(ts in MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS) {
            assert_same_as_chrono(ts);
        }

        #[test]
        fn timestamps_near_the_epoch_format_as_chrono_does(ts in -10_000_000_000_000i64..10_000_000_000_000) {
            assert_same_as_chrono(ts);
        }
    }
}
