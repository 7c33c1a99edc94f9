//! The server's edges: authentication, operational endpoints, slow and idle clients.

mod auth;
mod ops;
mod slowloris;
