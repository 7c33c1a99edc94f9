//! The server's edges: authentication, operational endpoints, the web console (its assets and
//! API, and the page in a real browser), slow and idle clients, TLS, scoped tokens.

mod auth;
mod console;
mod console_browser;
mod ops;
mod scopes;
mod slowloris;
mod tls;
