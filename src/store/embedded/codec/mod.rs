//! Hand-written binary encodings of what the embedded store keeps in redb values: chunks of
//! readings, bucket headers and series records.
//!
//! Hand-written rather than serde + postcard because the chunk format exploits what sensor data
//! looks like (see `benches/embedded.rs` and the README for the measurement): timestamps are
//! varint deltas from the previous reading, field names are stored once per chunk in a
//! dictionary, a reading with the same field list as the previous one spends one byte on it,
//! floats with a fixed number of decimals are stored as varint deltas of scaled integers and
//! other floats XOR-ed with the previous value of the same field (Gorilla-style,
//! byte-granular), and integers are delta-coded. See the README for bytes per reading.
//!
//! Every value starts with a version number so that a later bucketd can read or migrate it.
//!
//! # Chunk (value of the `chunks` table), version 1
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
mod header;
mod series;

pub use self::chunk::{ChunkSummary, chunk_summary, decode_chunk, encode_chunk};
pub use self::header::BucketHeader;
pub use self::series::SeriesRecord;
use crate::store::embedded::EmbeddedError;

fn corrupt(what: &str) -> EmbeddedError {
    EmbeddedError::Corrupt(what.to_owned())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn decoding_garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_chunk(&bytes, 0, &mut Vec::new());
            let _ = BucketHeader::decode(&bytes);
            let _ = SeriesRecord::decode(&bytes);
        }
    }
}
