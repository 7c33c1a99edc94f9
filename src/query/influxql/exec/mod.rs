//! Running statements: [`context`] holds what a statement runs with (the request's state,
//! its deadline, how times are written) and the series it reads; [`select`] and [`show`]
//! answer their statements, [`cond`] holds `WHERE`, and [`agg`] the aggregate functions.

pub mod agg;
pub mod cond;
pub mod context;
pub mod error;
pub(crate) mod go_order;
pub mod select;
pub mod show;

pub use context::{Ctx, Epoch, Series};
pub use error::ExecError;

use crate::query::influxql::syntax::ast::Statement;
use error::over_time;

/// Runs one statement within its time budget: past it, at its next await or its next
/// [`Ctx::check_deadline`], whichever comes first, it fails with an error of its own.
pub async fn run(ctx: &Ctx<'_>, statement: &Statement) -> Result<Vec<Series>, ExecError> {
    let left = ctx.deadline.saturating_duration_since(std::time::Instant::now());
    tokio::time::timeout(left, run_unbounded(ctx, statement))
        .await
        .unwrap_or_else(|_| Err(over_time(ctx.state.limits.statement_time)))
}

async fn run_unbounded(ctx: &Ctx<'_>, statement: &Statement) -> Result<Vec<Series>, ExecError> {
    match statement {
        Statement::Select(s) => select::select(ctx, s).await,
        Statement::CreateDatabase { name, duration_ns } => {
            // Whole milliseconds, as bucketd keeps time; INF (0) stays 0.
            let retention = duration_ns
                .map(|ns| std::time::Duration::from_millis((ns.max(0) / 1_000_000) as u64));
            ctx.state.databases.create(name, retention).map_err(|e| ExecError(e.to_string()))?;
            Ok(Vec::new())
        }
        Statement::Write { what } => Err(ExecError::new(format!(
            "{what} is not supported: bucketd's /query is read-only (readings are written \
             with /write; retention is set with --retention)"
        ))),
        Statement::Unsupported { what } => {
            Err(ExecError::new(format!("{what} is not supported by bucketd")))
        }
        other => show::show(ctx, other).await,
    }
}
