//! The write sequence number every reading gets at ingest.

/// A reading's write sequence number: assigned at ingest, increasing in the order readings
/// enter the buffers (and the write-ahead log). The stores record the highest one they hold per
/// (series, hour), which is what makes a retried flush and a WAL replay land exactly once; see
/// docs/design/ingest.md, "Exactly once".
pub type Seq = u64;
