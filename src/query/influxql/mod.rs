//! InfluxQL on `/query`, for Grafana's built-in InfluxDB data source and InfluxDB 1.x clients.

pub mod ast;
mod lex;
pub mod parse;

pub use parse::parse;
