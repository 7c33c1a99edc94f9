//! Query-string parsing shared by the endpoints: times, limits, steps.
//!
//! Parameters are read from the raw query string rather than through axum's `Query` extractor so
//! that every bad parameter comes back as our own 400 JSON body, and so that `tag` may repeat.

use chrono::DateTime;

use super::encode::format_ts;
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
}
