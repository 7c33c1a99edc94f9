//! Wire formats and the listeners that speak them. Parsers ([`json`], [`line_protocol`], both
//! keying series by [`model::series_key`](mod@crate::model::series_key)) turn bytes into readings
//! that [`validate`] admits;
//! [`http`] and [`tcp`] move bytes in and hand readings to [`intake`], counted by [`metrics`].

pub mod http;
pub mod intake;
pub mod json;
pub mod line_protocol;
pub mod memory;
pub mod metrics;
pub mod mqtt;
pub mod otlp;
pub mod point;
pub mod prometheus;
pub mod tcp;
pub mod validate;

#[cfg(test)]
mod through_buffers_tests;
