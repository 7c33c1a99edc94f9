//! Token authentication and scopes of the HTTP routes.
//!
//! Accepted credentials, first match wins: `Authorization: Token <t>`, `Authorization: Bearer
//! <t>`, `Authorization: Basic base64(<user>:<t>)` (what Telegraf's InfluxDB output sends when
//! a username and password are set), and InfluxDB v1's `?u=<user>&p=<t>` query parameters. The
//! user name is ignored: a token is the whole credential.
//!
//! The tokens and their comparison are `crate::tokens`'. A missing, unknown or expired token
//! gets 401; a token whose scopes do not cover the route gets 403, both in the route's own
//! error shape. `/query` needs any valid token here: its handler decides per statement (a
//! `SELECT` needs `read`, `CREATE DATABASE` `write`), from the [`Grant`] this layer leaves in
//! the request's extensions.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine as _;

use crate::http::ApiError;
use crate::tokens::{Grant, LiveTokens, Scope, Verdict};

/// What a request presented.
#[derive(Debug, PartialEq, Eq)]
pub enum Credential {
    Missing,
    /// An `Authorization` header this module cannot read (unknown scheme, bad base64).
    Malformed(&'static str),
    Token(Vec<u8>),
}

/// Finds the credential of a request: the `Authorization` header if there is one, else the
/// v1 `p` query parameter.
pub fn credential(headers: &HeaderMap, query: Option<&str>) -> Credential {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        return from_authorization(value.as_bytes());
    }
    match query_param(query, "p") {
        Some(p) => Credential::Token(p.into_bytes()),
        None => Credential::Missing,
    }
}

/// The first value of the parameter `name` in a URL's query string, decoded; `None` when it
/// is absent or the query string is not valid URL encoding.
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query?).ok()?;
    pairs.into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn from_authorization(value: &[u8]) -> Credential {
    let value = value.trim_ascii();
    let (scheme, rest) = match value.iter().position(|&b| b == b' ') {
        Some(i) => (&value[..i], value[i + 1..].trim_ascii()),
        None => (value, &b""[..]),
    };
    if scheme.eq_ignore_ascii_case(b"token") || scheme.eq_ignore_ascii_case(b"bearer") {
        return Credential::Token(rest.to_vec());
    }
    if scheme.eq_ignore_ascii_case(b"basic") {
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(rest) else {
            return Credential::Malformed("Basic credentials are not valid base64");
        };
        // user:password; the password is the token. A colon inside the token is kept.
        return match decoded.iter().position(|&b| b == b':') {
            Some(i) => Credential::Token(decoded[i + 1..].to_vec()),
            None => Credential::Malformed("Basic credentials lack the ':' before the token"),
        };
    }
    Credential::Malformed("unsupported Authorization scheme; use Token, Bearer or Basic")
}

/// Which routes need a token: every route but [`ALWAYS_OPEN`], and the operations routes
/// ([`OPERATIONS`]) unless `protect_operations` (`--auth-metrics`); none while no token is in
/// force (`crate::tokens`: no token flag and no token store).
#[derive(Clone)]
pub struct AuthPolicy {
    pub tokens: Arc<LiveTokens>,
    pub protect_operations: bool,
}

/// Open whatever the configuration: InfluxDB clients probe `/ping` without credentials before
/// they write, the OpenAPI document describes the API without holding any data, and the web
/// console's page and assets hold no data either (the page asks for a token before it shows
/// any).
pub const ALWAYS_OPEN: &[&str] =
    &["/ping", "/api/v1/openapi.json", "/", "/console/app.js", "/console/app.css"];

/// Probes and scrapes: open unless `--auth-metrics`, since orchestrators and Prometheus are
/// usually configured without secrets.
pub const OPERATIONS: &[&str] = &["/health", "/ready", "/metrics"];

/// The routes that write.
pub const WRITES: &[&str] = &["/write", "/api/v2/write", "/api/v1/write", "/v1/metrics"];

/// The routes that read or write one database's series, named by a parameter.
pub const DATABASE_ROUTES: &[&str] = &[
    "/write",
    "/api/v2/write",
    "/api/v1/write",
    "/api/v1/readings",
    "/api/v1/rollups",
    "/api/v1/sensors",
];

/// The routes that change how the server works rather than its data.
pub const ADMINISTRATION: &[&str] = &["/api/v1/dead-letters/replay"];

impl AuthPolicy {
    /// Whether a request to the route `path` (as matched) may go through without a token.
    pub fn is_open(&self, path: &str) -> bool {
        ALWAYS_OPEN.contains(&path) || (!self.protect_operations && OPERATIONS.contains(&path))
    }
}

/// The scope a request to `route` (as matched) needs; `None` for `/query`, whose handler
/// decides per statement.
pub fn scope_needed(method: &Method, route: &str) -> Option<Scope> {
    if route == "/query" {
        return None;
    }
    if ADMINISTRATION.contains(&route) {
        return Some(Scope::Admin);
    }
    let writes = WRITES.contains(&route) || (route == "/api/v1/readings" && method == Method::POST);
    Some(if writes { Scope::Write } else { Scope::Read })
}

/// The refusal of a valid token whose scopes do not cover `needed` on `database` (`None`: a
/// route about the whole server, which needs the scope on every database).
pub fn out_of_scope(grant: &Grant, needed: Scope, database: Option<&str>) -> ApiError {
    let verb = match needed {
        Scope::Read => "read",
        Scope::Write => "write",
        Scope::Admin => "administer",
    };
    let what = match database {
        Some(db) => format!("database {db:?}"),
        None => "every database".to_owned(),
    };
    ApiError::Forbidden(format!(
        "token {:?} may not {verb} {what} (its scopes: {})",
        grant.name,
        grant.access.names()
    ))
}

/// The database a request to a database's route names (`bucket` on `/api/v2/write`, `db`
/// elsewhere; the default when absent); `None` for the routes about the whole server.
fn database_of(route: &str, query: Option<&str>) -> Option<String> {
    let param = match route {
        "/api/v2/write" => "bucket",
        r if DATABASE_ROUTES.contains(&r) => "db",
        _ => return None,
    };
    let named = query_param(query, param).filter(|v| !v.is_empty());
    Some(named.unwrap_or_else(|| crate::databases::DEFAULT.to_owned()))
}

/// Middleware: lets the request through only with a valid token whose scopes cover the
/// route, and leaves its [`Grant`] in the request's extensions.
pub async fn require_token(
    State(policy): State<Arc<AuthPolicy>>,
    mut request: Request,
    next: Next,
) -> Response {
    let tokens = policy.tokens.current();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| request.uri().path(), MatchedPath::as_str);
    if !tokens.is_on() || policy.is_open(route) {
        return next.run(request).await;
    }
    let needed = scope_needed(request.method(), route);
    let found = credential(request.headers(), request.uri().query());
    let refusal = match found {
        Credential::Token(t) => match tokens.verify(&t) {
            Verdict::Granted(grant) => {
                if let Some(needed) = needed {
                    let database = database_of(route, request.uri().query());
                    let allowed = match database.as_deref() {
                        Some(db) => grant.access.allow(needed, db),
                        None => grant.access.allow_everywhere(needed),
                    };
                    if !allowed {
                        let refusal = out_of_scope(&grant, needed, database.as_deref());
                        return refusal.into_response_for(request.uri().path());
                    }
                }
                request.extensions_mut().insert(grant);
                return next.run(request).await;
            }
            Verdict::Expired(name) => format!("token {name:?} has expired"),
            Verdict::Unknown => "invalid token".to_owned(),
        },
        Credential::Missing => "missing credentials: send `Authorization: Token <token>` (or \
                                Bearer, Basic user:token, or InfluxDB v1 u/p parameters)"
            .to_owned(),
        Credential::Malformed(why) => why.to_owned(),
    };
    ApiError::Unauthorized(refusal).into_response_for(request.uri().path())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with_auth(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn every_credential_form_is_read() {
        let t = |s: &str| Credential::Token(s.as_bytes().to_vec());
        assert_eq!(credential(&with_auth("Token abc"), None), t("abc"));
        assert_eq!(credential(&with_auth("bearer  abc "), None), t("abc"));
        let basic = base64::engine::general_purpose::STANDARD.encode("telegraf:a:b");
        assert_eq!(credential(&with_auth(&format!("Basic {basic}")), None), t("a:b"));
        assert_eq!(credential(&HeaderMap::new(), Some("db=x&u=me&p=s%20t")), t("s t"));
        // The header wins over the parameters.
        assert_eq!(credential(&with_auth("Token h"), Some("p=q")), t("h"));
        assert_eq!(credential(&HeaderMap::new(), Some("db=x")), Credential::Missing);
        assert_eq!(credential(&HeaderMap::new(), None), Credential::Missing);
        assert!(matches!(credential(&with_auth("Digest x"), None), Credential::Malformed(_)));
        assert!(matches!(credential(&with_auth("Basic !!!"), None), Credential::Malformed(_)));
        let no_colon = base64::engine::general_purpose::STANDARD.encode("justuser");
        assert!(matches!(
            credential(&with_auth(&format!("Basic {no_colon}")), None),
            Credential::Malformed(_)
        ));
    }
}
