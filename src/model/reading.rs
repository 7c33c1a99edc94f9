//! One reading, and the view the stores' encoders take of a reading wherever it is held.

use super::time::TimestampMs;
use super::value::{Fields, ValueRef};

/// One reading as the stores' encoders see it: a timestamp and its fields in order, borrowed
/// from wherever the reading is held. The embedded store writes a flushed buffer's rows through
/// it, without making a [`Reading`] of each row, which was a large part of its write.
pub trait ReadingView {
    fn ts(&self) -> TimestampMs;
    fn fields(&self) -> impl Iterator<Item = (&str, ValueRef<'_>)>;

    /// Whether this reading has the fields of `prev`, with the same types and in the same
    /// order, when that is cheaper to tell than by comparing their names; `None` otherwise.
    fn same_shape(&self, _prev: &Self) -> Option<bool> {
        None
    }
}

impl ReadingView for Reading {
    fn ts(&self) -> TimestampMs {
        self.ts
    }

    fn fields(&self) -> impl Iterator<Item = (&str, ValueRef<'_>)> {
        self.fields.iter().map(|(name, value)| (name.as_str(), value.as_ref()))
    }
}

impl<R: ReadingView> ReadingView for &R {
    fn ts(&self) -> TimestampMs {
        (**self).ts()
    }

    fn fields(&self) -> impl Iterator<Item = (&str, ValueRef<'_>)> {
        (**self).fields()
    }

    fn same_shape(&self, prev: &Self) -> Option<bool> {
        (**self).same_shape(*prev)
    }
}

/// One timestamped set of field values of one series. Field names are unique within a reading
/// and kept in the order they arrived.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Reading {
    pub ts: TimestampMs,
    pub fields: Fields,
}
