//! Reading data out, through the query router in process.

mod api;
mod databases;
mod influxql;
mod influxql_differential;
mod influxql_oracle;
mod readings;
