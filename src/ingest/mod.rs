pub mod json;
pub mod line_protocol;
