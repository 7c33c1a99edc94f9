//! The one error of running a statement.

use crate::store::StoreError;

/// Why one statement failed; InfluxDB reports it in that statement's `error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecError(pub String);

impl ExecError {
    pub fn new(message: impl Into<String>) -> ExecError {
        ExecError(message.into())
    }
}

impl From<StoreError> for ExecError {
    fn from(e: StoreError) -> Self {
        // The store's own words say what failed: unavailable, or readings past --retention.
        ExecError(e.to_string())
    }
}

pub(crate) fn over_time(budget: std::time::Duration) -> ExecError {
    ExecError::new(format!(
        "the statement ran longer than its time budget of {} (--query-timeout): narrow the \
         time range, use a longer GROUP BY time interval, or name fewer series",
        humantime::format_duration(budget)
    ))
}
