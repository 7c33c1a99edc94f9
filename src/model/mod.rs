//! The data every layer shares: readings, series, and the batches the flusher hands the store.
//! What ingest accepts (limits, validation) is its own policy, in `ingest::validate`.

mod batch;
mod columns;
mod packed;
mod reading;
mod rows;
mod seq;
mod series;
pub mod series_key;
mod time;
mod value;

pub use batch::{Batch, Item, SeqRun, SettledRun, WriterId};
pub use columns::{Columns, ColumnsReader, Mismatch};
pub use packed::Packed;
pub use reading::{Reading, ReadingView, fold_points};
pub use rows::{Row, Rows};
pub use seq::Seq;
pub use series::{Series, SeriesMeta};
pub use series_key::{escaped_in_key, escaped_in_measurement, series_key};
pub use time::{HOUR_MS, MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, MINUTE_MS, TimestampMs, hour_start};
pub use value::{FieldName, FieldNames, FieldValue, Fields, ValueRef};
