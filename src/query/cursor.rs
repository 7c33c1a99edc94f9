//! Opaque paging cursors: URL-safe base64 (no padding) of a small binary record.
//!
//! A readings cursor carries the whole query it continues (range and order), where to resume
//! (the last timestamp returned and how many readings at exactly that timestamp were already
//! returned) and a hash of the sensor key. Carrying the range means a follow-up request that
//! leaves `from`/`to` out does not re-evaluate the "now" defaults and drift.
//!
//! The cursor is not signed: a forged cursor can only select a different page of data the
//! client may read anyway.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::error::QueryError;
use crate::model::{MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, TimestampMs};
use crate::store::Order;

const READINGS_TAG: u8 = b'r';
const SENSORS_TAG: u8 = b's';
const VERSION: u8 = 1;
const READINGS_LEN: usize = 2 + 1 + 8 * 5;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadingsCursor {
    pub order: Order,
    pub from: TimestampMs,
    pub to: TimestampMs,
    /// Timestamp of the last reading returned so far.
    pub last_ts: TimestampMs,
    /// Readings at exactly `last_ts` already returned (in the store's stable tie order).
    pub skip: u64,
    pub sensor_hash: u64,
}

impl ReadingsCursor {
    pub fn encode(&self) -> String {
        let mut b = Vec::with_capacity(READINGS_LEN);
        b.extend([READINGS_TAG, VERSION, matches!(self.order, Order::Desc) as u8]);
        for v in [self.from, self.to, self.last_ts] {
            b.extend(v.to_be_bytes());
        }
        b.extend(self.skip.to_be_bytes());
        b.extend(self.sensor_hash.to_be_bytes());
        URL_SAFE_NO_PAD.encode(b)
    }

    pub fn decode(s: &str) -> Result<ReadingsCursor, QueryError> {
        let b = URL_SAFE_NO_PAD.decode(s).map_err(|_| QueryError::BadCursor("not a cursor"))?;
        if b.len() != READINGS_LEN || b[0] != READINGS_TAG || b[1] != VERSION {
            return Err(QueryError::BadCursor("not a readings cursor"));
        }
        let order = match b[2] {
            0 => Order::Asc,
            1 => Order::Desc,
            _ => return Err(QueryError::BadCursor("not a readings cursor")),
        };
        let word = |i: usize| -> [u8; 8] { b[3 + 8 * i..11 + 8 * i].try_into().expect("8 bytes") };
        let c = ReadingsCursor {
            order,
            from: i64::from_be_bytes(word(0)),
            to: i64::from_be_bytes(word(1)),
            last_ts: i64::from_be_bytes(word(2)),
            skip: u64::from_be_bytes(word(3)),
            sensor_hash: u64::from_be_bytes(word(4)),
        };
        // A cursor we issued always points inside its range, which lies within the supported
        // times, and past at least one reading.
        let supported = MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS + 1;
        if !supported.contains(&c.from)
            || !supported.contains(&c.to)
            || !(c.from..c.to).contains(&c.last_ts)
            || c.skip == 0
        {
            return Err(QueryError::BadCursor("not a readings cursor"));
        }
        Ok(c)
    }
}

/// Sensors are paged by key: the cursor is the last key returned.
pub fn encode_sensor_cursor(last_key: &str) -> String {
    let mut b = Vec::with_capacity(2 + last_key.len());
    b.extend([SENSORS_TAG, VERSION]);
    b.extend(last_key.as_bytes());
    URL_SAFE_NO_PAD.encode(b)
}

pub fn decode_sensor_cursor(s: &str) -> Result<String, QueryError> {
    let b = URL_SAFE_NO_PAD.decode(s).map_err(|_| QueryError::BadCursor("not a cursor"))?;
    match b.as_slice() {
        [SENSORS_TAG, VERSION, key @ ..] if !key.is_empty() => String::from_utf8(key.to_vec())
            .map_err(|_| QueryError::BadCursor("not a sensors cursor")),
        _ => Err(QueryError::BadCursor("not a sensors cursor")),
    }
}

/// FNV-1a: stable across builds and platforms (std's hasher is not), so a cursor survives a
/// server restart or upgrade. It only has to tell sensors apart, not resist an adversary.
pub fn sensor_hash(key: &str) -> u64 {
    key.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_cursor_round_trips_and_is_url_safe() {
        let c = ReadingsCursor {
            order: Order::Desc,
            from: -5,
            to: 1_700_000_000_000,
            last_ts: 42,
            skip: 3,
            sensor_hash: sensor_hash("temp,site=a"),
        };
        let s = c.encode();
        assert!(s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(ReadingsCursor::decode(&s).unwrap(), c);
    }

    #[test]
    fn garbage_and_foreign_cursors_are_refused() {
        assert!(ReadingsCursor::decode("").is_err());
        assert!(ReadingsCursor::decode("!!!").is_err());
        assert!(ReadingsCursor::decode(&URL_SAFE_NO_PAD.encode([0u8; READINGS_LEN])).is_err());
        assert!(ReadingsCursor::decode(&encode_sensor_cursor("abc")).is_err());
        assert!(decode_sensor_cursor(&encode_sensor_cursor("abc")).is_ok_and(|k| k == "abc"));
        let readings = ReadingsCursor {
            order: Order::Asc,
            from: 0,
            to: 10,
            last_ts: 5,
            skip: 1,
            sensor_hash: 1,
        };
        assert!(decode_sensor_cursor(&readings.encode()).is_err());
        // Past its own range: never issued.
        let outside = ReadingsCursor { last_ts: 10, ..readings.clone() };
        assert!(ReadingsCursor::decode(&outside.encode()).is_err());
        let unsupported = ReadingsCursor { to: i64::MAX, ..readings };
        assert!(ReadingsCursor::decode(&unsupported.encode()).is_err());
    }

    #[test]
    fn sensor_hash_is_fnv1a() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(sensor_hash(""), 0xcbf29ce484222325);
        assert_eq!(sensor_hash("a"), 0xaf63dc4c8601ec8c);
    }
}
