//! InfluxQL's text: [`ast`], the statements; [`parse`](mod@parse) (with `lex`), the parser, whose errors
//! carry InfluxDB's "at line L, char C" positions.

pub mod ast;
mod lex;
pub mod parse;

pub use parse::parse;
