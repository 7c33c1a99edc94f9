//! The stores: the shared suite ([`suite`]) on each of them, and what only one store has.

mod embedded;
mod memory;
mod mongo;
mod mongo_minutes;
mod retention;
mod suite;
