//! Wire formats and the listeners that speak them. Parsers ([`json`], [`line_protocol`]) turn
//! bytes into validated readings; [`http`] and [`tcp`] move bytes in and readings on to the
//! buffers.

pub mod http;
pub mod intake;
pub mod json;
pub mod line_protocol;
pub mod metrics;
pub mod series_key;
pub mod tcp;
pub mod validate;

#[cfg(test)]
mod through_buffers_tests;
