//! Writing data in, through real sockets unless said otherwise.

mod backpressure;
mod gzip_bomb;
mod json;
mod limits;
mod line_protocol;
mod line_protocol_conformance;
mod memory_budget;
mod mongo;
mod mqtt;
mod otlp;
mod prometheus;
mod tcp;
