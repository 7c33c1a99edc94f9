//! What bucketd's integration tests (`tests/it`) and benches share, so that neither includes
//! the other's files: the MongoDB stand-in ([`mongo_standin`]), the Python venvs it and the
//! real-client tests run in ([`venv`]), and the batch builders of the store tests ([`store`]).
//! A dev-dependency of bucketd only.

pub mod mongo_standin;
pub mod store;
pub mod venv;
