//! Time as bucketd keeps it: milliseconds since the epoch, and the hours buckets are cut on.

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

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn hour_start_floors_negative_times() {
        assert_eq!(hour_start(0), 0);
        assert_eq!(hour_start(HOUR_MS - 1), 0);
        assert_eq!(hour_start(-1), -HOUR_MS);
    }
}
