//! The server's edges: authentication, operational endpoints, the web console, slow and idle
//! clients.

mod auth;
mod console;
mod ops;
mod slowloris;
