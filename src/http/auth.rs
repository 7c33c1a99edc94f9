//! Token authentication of the ingest and query routes.
//!
//! Accepted credentials, first match wins: `Authorization: Token <t>`, `Authorization: Bearer
//! <t>`, `Authorization: Basic base64(<user>:<t>)` (what Telegraf's InfluxDB output sends when
//! a username and password are set), and InfluxDB v1's `?u=<user>&p=<t>` query parameters. The
//! user name is ignored: a token is the whole credential.
//!
//! Comparison is constant-time: both sides are hashed (SHA-256) so their lengths cannot leak,
//! and the candidate is compared with every configured token without stopping at a match.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use subtle::{Choice, ConstantTimeEq};

use crate::http::ApiError;

/// The configured tokens, kept only as digests.
#[derive(Clone, Default)]
pub struct AuthTokens {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for AuthTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AuthTokens({} configured)", self.digests.len())
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl AuthTokens {
    pub fn new<I, T>(tokens: I) -> AuthTokens
    where
        I: IntoIterator<Item = T>,
        T: AsRef<[u8]>,
    {
        AuthTokens { digests: tokens.into_iter().map(|t| digest(t.as_ref())).collect() }
    }

    /// No tokens: authentication is off.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Whether `candidate` is one of the tokens. Every token is compared, whatever matches.
    pub fn verify(&self, candidate: &[u8]) -> bool {
        let candidate = digest(candidate);
        let mut found = Choice::from(0);
        for known in &self.digests {
            found |= known.ct_eq(&candidate);
        }
        found.into()
    }
}

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
    let Some(query) = query else {
        return Credential::Missing;
    };
    let Ok(pairs) = serde_urlencoded::from_str::<Vec<(String, String)>>(query) else {
        return Credential::Missing;
    };
    match pairs.into_iter().find(|(k, _)| k == "p") {
        Some((_, p)) => Credential::Token(p.into_bytes()),
        None => Credential::Missing,
    }
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
/// ([`OPERATIONS`]) unless `protect_operations` (`--auth-metrics`).
#[derive(Clone, Debug)]
pub struct AuthPolicy {
    pub tokens: Arc<AuthTokens>,
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

impl AuthPolicy {
    /// Whether a request to the route `path` (as matched) may go through without a token.
    pub fn is_open(&self, path: &str) -> bool {
        ALWAYS_OPEN.contains(&path) || (!self.protect_operations && OPERATIONS.contains(&path))
    }
}

/// Middleware: lets the request through only with a valid token. Installed only when tokens
/// are configured.
pub async fn require_token(
    State(policy): State<Arc<AuthPolicy>>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| request.uri().path(), MatchedPath::as_str);
    if policy.is_open(route) {
        return next.run(request).await;
    }
    let tokens = &policy.tokens;
    let found = credential(request.headers(), request.uri().query());
    let refusal = match found {
        Credential::Token(t) if tokens.verify(&t) => return next.run(request).await,
        Credential::Token(_) => "invalid token".to_owned(),
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
    fn verify_matches_only_configured_tokens() {
        let tokens = AuthTokens::new(["alpha", "beta-longer-token"]);
        assert!(tokens.verify(b"alpha"));
        assert!(tokens.verify(b"beta-longer-token"));
        assert!(!tokens.verify(b"alph"));
        assert!(!tokens.verify(b"alphaa"));
        assert!(!tokens.verify(b""));
        assert!(!AuthTokens::default().verify(b"alpha"));
        assert_eq!(format!("{tokens:?}"), "AuthTokens(2 configured)");
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
