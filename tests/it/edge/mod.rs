//! The server's edges: authentication, operational endpoints, slow and idle clients, and the
//! web console in a real browser.

mod auth;
mod console_browser;
mod ops;
mod slowloris;
