//! What every version of the chunk format shares: the version numbers, the column types,
//! the bound on readings a chunk, and a chunk's summary.

use crate::model::{TimestampMs, ValueRef};

pub(in crate::store::embedded::codec) const CHUNK_V2: u64 = 2;

/// The most readings a chunk may hold: a chunk never holds more than one bucket's readings.
/// A damaged count beyond it is refused before the decoder allocates for it (a version-2
/// chunk's readings can take less than a byte each).
pub(super) const MAX_CHUNK_READINGS: u32 = crate::store::BucketLimits::MAX_READINGS_CEILING;

pub(in crate::store::embedded::codec) const T_FLOAT: u8 = 0;

pub(in crate::store::embedded::codec) const T_INT: u8 = 1;

pub(in crate::store::embedded::codec) const T_UINT: u8 = 2;

pub(in crate::store::embedded::codec) const T_BOOL: u8 = 3;

pub(in crate::store::embedded::codec) const T_STR: u8 = 4;

/// What a chunk's first bytes say, readable without decoding the readings, so that a range scan
/// can skip chunks outside the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSummary {
    pub count: u32,
    pub first: TimestampMs,
    pub last: TimestampMs,
}

pub(super) fn type_of(v: ValueRef<'_>) -> u8 {
    match v {
        ValueRef::Float(_) => T_FLOAT,
        ValueRef::Int(_) => T_INT,
        ValueRef::UInt(_) => T_UINT,
        ValueRef::Bool(_) => T_BOOL,
        ValueRef::Str(_) => T_STR,
    }
}
