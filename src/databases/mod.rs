//! Databases: namespaces whose series never mix. `cpu,host=a` written to `telegraf` and to
//! `sensors` are two series, each read only through its own database.
//!
//! Below the edges a database is part of the series key, so that the buffers, the log, the
//! flusher and the stores keep treating a key as one opaque string:
//! - the default database's keys are the series keys as they are, which is how data written
//!   before databases existed is the default database's without being rewritten;
//! - every other database's keys are the series key behind `\x1f<name>\x1f`. No series key
//!   starts with a control character (a line-protocol measurement cannot hold one, and a JSON
//!   sensor key starting with the mark is refused), so no key of one database can be taken
//!   for another's.
//!
//! The edges qualify what clients name ([`Database::qualify`]) and strip what they hand back
//! ([`Database::local`]). [`registry`] keeps which databases exist.

mod database;
pub mod registry;

pub use database::{BadName, DEFAULT, Database, MARK, MAX_NAME, go_duration, is_qualified, split};
pub use registry::{Registry, RegistryError, RetentionBounds};
