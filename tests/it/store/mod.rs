//! The stores: the shared suite ([`suite`]) on each of them, and what only one store has.

mod embedded;
mod memory;
mod mongo;
mod retention;
mod suite;
