//! Hand-written binary encodings of what the embedded store keeps in redb values: chunks of
//! readings, bucket headers and series records.
//!
//! Hand-written rather than serde + postcard because the chunk format exploits what sensor data
//! looks like (see `benches/embedded.rs` and docs/performance.md for the measurement): a chunk is
//! stored column by column. Field names are stored once per chunk; timestamps are deltas of
//! their deltas in runs (a fixed period costs a few bytes a chunk); each field is one column of
//! its values; floats with a fixed number of decimals are varint deltas of scaled integers
//! (a sensor's slow change: a byte a value), other floats are XOR-ed with the previous value
//! (Gorilla-style, byte-granular), and integers are delta-coded.
//!
//! Every value starts with a version number so that a later bucketd can read or migrate it.
//!
//! # Chunk (value of the chunk tables), version 2 (file schema 6)
//! ```text
//! varint  version = 2
//! varint  count                      number of readings (at most 2^20)
//! varint  first_off, last_off        first and last ts minus the bucket's hour
//! varint  n_columns, then n_columns × (varint len, UTF-8 name, u8 type)
//!         a column is one field name with one type (a name whose type changes has two)
//! varint  n_shapes, then n_shapes × (varint n, n × varint column)
//!         a shape is a reading's fields in its order; 0 shapes exactly when count is 0
//! if n_shapes > 1: count × varint shape index of each reading (else every reading has shape 0)
//! timestamps after the first: tokens until count − 1 are read; each delta minus the
//!         previous delta (the first: minus 0), zigzag-coded as zz; token zz << 1 is one,
//!         zz << 1 | 1 is followed by varint n for n + 2 equal ones
//! each column in order, its values for the readings whose shape holds it, in reading order:
//!   Float (0): u8 mode; 0xf0 | k: every value has k ≤ 6 decimals, then per value the zigzag
//!              varint of (value × 10^k − previous × 10^k), the first from 0;
//!              0: per value a float as version 1 writes it (below), the first against 0
//!   Int (1), UInt (2): zigzag varint of the wrapping difference from the previous (first: 0)
//!   Bool (3): bits, least significant first, ⌈values / 8⌉ bytes
//!   Str (4): per value varint len, UTF-8 bytes
//! ```
//! A decimal column is used only when every value decodes to the same bits.
//!
//! # Chunk, version 1 (file schemas 1 to 5; still decoded)
//! ```text
//! varint  version = 1
//! varint  count                      number of readings
//! varint  first_off, last_off        first and last ts minus the bucket's hour
//! varint  n_names, then n_names × (varint len, UTF-8 bytes)   field name dictionary
//! count × reading:
//!   varint  ts delta from the previous reading (the first: from first_off, i.e. 0)
//!   varint  shape: 0 = same names and types as the previous reading,
//!           else n_fields + 1, then n_fields × (varint name index, u8 type)
//!   values in shape order:
//!     Float (0): either u8 0xf0 | k, then zigzag varint of (value × 10^k − previous value
//!                of that name × 10^k), both rounded to integers (k ≤ 6 decimals; used only
//!                when it decodes to the same bits and is shorter), or
//!                u8 (leading zero bytes << 4 | trailing zero bytes) of bits XOR previous
//!                bits of that name, then the bytes between, big-endian
//!     Int (1), UInt (2): zigzag varint of the wrapping difference from the previous
//!                integer of that name
//!     Bool (3): u8 0/1
//!     Str (4): varint len, UTF-8 bytes
//! ```
//! Readings in a chunk are sorted by timestamp (a stable sort of the order written), so the
//! deltas are never negative.

mod chunk;
mod float;
mod header;
mod scan;
mod series;

#[cfg(test)]
pub(super) use self::chunk::encode_v1;
pub use self::chunk::{
    ChunkSummary, Decoded, chunk_summary, chunk_timestamps, decode_chunk, decode_chunk_columns,
    encode_chunk,
};
pub use self::header::{BucketHeader, HeaderView};
pub use self::scan::{NumberSink, ScanScratch, scan_numbers};
pub use self::series::SeriesRecord;
use crate::store::embedded::EmbeddedError;

fn corrupt(what: &str) -> EmbeddedError {
    EmbeddedError::Corrupt(what.to_owned())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::model::{FieldValue, HOUR_MS, Reading, ReadingView, Row, Rows};
    use crate::store::approx_reading_bytes;

    /// Any value a field may hold; `scan`'s tests use it too.
    pub(super) fn value() -> impl Strategy<Value = FieldValue> {
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(FieldValue::Float),
            (0..4000i32).prop_map(|c| FieldValue::Float(f64::from(c) / 100.0)),
            any::<i64>().prop_map(FieldValue::Int),
            any::<u64>().prop_map(FieldValue::UInt),
            any::<bool>().prop_map(FieldValue::Bool),
            "[a-z]{0,3}".prop_map(FieldValue::Str),
        ]
    }

    /// Readings of one hour in the order written: fields that come and go, change type and
    /// order; equal timestamps; out of order.
    fn written() -> impl Strategy<Value = Vec<Reading>> {
        let fields = proptest::collection::btree_map("[a-e]", value(), 0..5)
            .prop_map(|m| m.into_iter().collect::<Vec<_>>())
            .prop_shuffle();
        proptest::collection::vec((0..40i64, fields), 1..150).prop_map(|rows| {
            rows.into_iter()
                .map(|(ts, fields)| Reading {
                    ts: 7 * HOUR_MS + ts,
                    fields: fields.into_iter().map(|(n, v)| (n.into(), v)).collect(),
                })
                .collect()
        })
    }

    proptest! {
        /// The embedded store writes a batch's rows as they are held; it used to make a
        /// `Reading` of each first. The chunk, the header and the bucket sizes must not differ.
        #[test]
        fn rows_store_what_the_readings_made_of_them_stored(readings in written()) {
            let hour = 7 * HOUR_MS;
            let mut rows = Rows::default();
            for (i, r) in readings.into_iter().enumerate() {
                rows.push(r, i as u64);
            }
            let mut views: Vec<Row<'_>> = rows.views().collect();
            let mut made: Vec<Reading> = rows.readings().collect();
            prop_assert_eq!(views.iter().map(Row::to_reading).collect::<Vec<_>>(), made.clone());
            for (v, m) in views.iter().zip(&made) {
                prop_assert_eq!(approx_reading_bytes(v), approx_reading_bytes(m));
            }
            views.sort_by_key(Row::ts);
            made.sort_by_key(|r| r.ts);
            prop_assert_eq!(encode_chunk(hour, &views), encode_chunk(hour, &made));
            let (mut from_rows, mut from_made) = (BucketHeader::empty(), BucketHeader::empty());
            let half = views.len() / 2;
            let bytes = |r: &[Reading]| r.iter().map(approx_reading_bytes).sum::<u64>();
            from_rows.append(&views[..half], bytes(&made[..half]), 1);
            from_rows.join_last(&views[half..], bytes(&made[half..]));
            from_made.append(&made[..half], bytes(&made[..half]), 1);
            from_made.join_last(&made[half..], bytes(&made[half..]));
            prop_assert_eq!(from_rows.encode(), from_made.encode());
        }


        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_chunk(&bytes, 0, &mut Vec::new());
            let _ = BucketHeader::decode(&bytes);
            let _ = SeriesRecord::decode(&bytes);
        }
    }
}
