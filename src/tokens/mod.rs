//! Tokens with a name, scopes and an optional expiry, kept on disk only as hashes.
//!
//! The token store is a JSON file (`--token-store`, `<data-dir>/tokens.json` by default) that
//! `bucketd token create|list|revoke` ([`cli`]) edit and a running server reads again once a
//! second ([`LiveTokens::watch`]): a token created or revoked takes effect without a restart.
//! A token is 32 random bytes (`bkd_` and 43 characters of base64url), printed once when it
//! is made; the file keeps its SHA-256, which is enough for a secret that cannot be guessed
//! (a slow password hash protects guessable passwords, not random keys).
//!
//! The tokens of `--auth-token` and `--auth-token-file` stand beside the store's, with every
//! scope and no expiry. Authentication is on while there is any token from the flags or the
//! store file exists (even with every token revoked, so that revoking the last one does not
//! open the server).

pub mod cli;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};
use tokio_util::sync::CancellationToken;

/// How often a running server reads the store again.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// Longest token name.
const MAX_NAME: usize = 64;

const FORMAT_VERSION: u32 = 1;

/// What a token may do. `admin` may do everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Queries: ranges, rollups, InfluxQL, the sensor list, status and (with
    /// `--auth-metrics`) health and metrics.
    Read,
    /// Writes: JSON, line protocol (`/write`, `/api/v2/write`), and `CREATE DATABASE`.
    Write,
    /// Everything.
    Admin,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }
}

/// A scope on every database (`read`), or on one (`read:telegraf`). `admin` is always on every
/// database.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ScopeSpec {
    pub scope: Scope,
    pub database: Option<String>,
}

impl From<Scope> for ScopeSpec {
    fn from(scope: Scope) -> ScopeSpec {
        ScopeSpec { scope, database: None }
    }
}

impl std::fmt::Display for ScopeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.database {
            None => f.write_str(self.scope.name()),
            Some(db) => write!(f, "{}:{db}", self.scope.name()),
        }
    }
}

impl std::str::FromStr for ScopeSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<ScopeSpec, String> {
        let (scope, database) = match s.split_once(':') {
            Some((scope, db)) => (scope, Some(db)),
            None => (s, None),
        };
        let scope = match scope {
            "read" => Scope::Read,
            "write" => Scope::Write,
            "admin" => Scope::Admin,
            other => {
                return Err(format!(
                    "unknown scope {other:?}: use read, write or admin, or read:DB, write:DB"
                ));
            }
        };
        let database = match database {
            None => None,
            Some(_) if scope == Scope::Admin => {
                return Err("admin is on every database: give it without a database".into());
            }
            Some(db) => Some(
                crate::databases::Database::named(db).map_err(|e| e.to_string())?.name().to_owned(),
            ),
        };
        Ok(ScopeSpec { scope, database })
    }
}

impl Serialize for ScopeSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ScopeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ScopeSpec, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// What a token may do: scopes on every database, and scopes on named ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    everywhere: Scopes,
    /// By database name, each once.
    databases: Vec<(String, Scopes)>,
}

impl Access {
    /// Everything: the tokens of `--auth-token`.
    pub fn all() -> Access {
        Access { everywhere: Scopes::ALL, databases: Vec::new() }
    }

    pub fn of(specs: &[ScopeSpec]) -> Access {
        let mut access = Access::default();
        for spec in specs {
            let bit = Scopes::bit(spec.scope);
            match &spec.database {
                None => access.everywhere.0 |= bit,
                Some(db) => match access.databases.iter_mut().find(|(d, _)| d == db) {
                    Some((_, scopes)) => scopes.0 |= bit,
                    None => access.databases.push((db.clone(), Scopes(bit))),
                },
            }
        }
        access
    }

    /// Whether `scope` is allowed on the database `database`.
    pub fn allow(&self, scope: Scope, database: &str) -> bool {
        self.everywhere.allow(scope)
            || self.databases.iter().any(|(d, s)| d == database && s.allow(scope))
    }

    /// Whether `scope` is allowed on every database: what the routes that are about the whole
    /// server (status, metrics) need.
    pub fn allow_everywhere(&self, scope: Scope) -> bool {
        self.everywhere.allow(scope)
    }

    /// Whether `scope` is allowed on some database.
    pub fn allow_somewhere(&self, scope: Scope) -> bool {
        self.everywhere.allow(scope) || self.databases.iter().any(|(_, s)| s.allow(scope))
    }

    /// The scopes by name, for messages: `read, write:telegraf`.
    pub fn names(&self) -> String {
        let mut names: Vec<String> = Vec::new();
        if self.everywhere.0 != 0 {
            names.push(self.everywhere.names());
        }
        for (db, scopes) in &self.databases {
            for scope in [Scope::Read, Scope::Write] {
                if scopes.0 & Scopes::bit(scope) != 0 {
                    names.push(format!("{}:{db}", scope.name()));
                }
            }
        }
        if names.is_empty() { "none".into() } else { names.join(", ") }
    }
}

/// A set of scopes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Scopes(u8);

impl Scopes {
    const ALL: Scopes = Scopes(0b111);

    fn bit(scope: Scope) -> u8 {
        match scope {
            Scope::Read => 1,
            Scope::Write => 2,
            Scope::Admin => 4,
        }
    }

    /// Whether these scopes allow what `scope` allows.
    fn allow(self, scope: Scope) -> bool {
        self.0 & (Scopes::bit(scope) | Scopes::bit(Scope::Admin)) != 0
    }

    /// The scopes by name, for messages: `read, write`.
    fn names(self) -> String {
        let all = [Scope::Read, Scope::Write, Scope::Admin];
        let names: Vec<&str> =
            all.iter().filter(|s| self.0 & Scopes::bit(**s) != 0).map(|s| s.name()).collect();
        if names.is_empty() { "none".into() } else { names.join(", ") }
    }
}

/// The token a request presented, once verified: handlers that decide per statement read it
/// from the request's extensions.
#[derive(Clone, Debug)]
pub struct Grant {
    pub name: Arc<str>,
    pub access: Arc<Access>,
}

/// One token of the store file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoredToken {
    pub name: String,
    /// SHA-256 of the token, hex.
    pub sha256: String,
    pub scopes: Vec<ScopeSpec>,
    pub created: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<DateTime<Utc>>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct StoreFile {
    version: u32,
    tokens: Vec<StoredToken>,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the token store {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write the token store {}: {source}", path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("the token store {} is not valid: {detail}", path.display())]
    Invalid { path: PathBuf, detail: String },
    #[error("invalid token name {0:?}: use 1 to {MAX_NAME} letters, digits, '.', '_' or '-'")]
    BadName(String),
    #[error("a token named {0:?} exists already: revoke it first, or pick another name")]
    Exists(String),
    #[error("no token is named {0:?}")]
    Unknown(String),
    #[error("a token needs at least one scope (read, write, admin)")]
    NoScope,
    #[error(
        "--expires-in reaches past what a date holds: leave it out for a token that never expires"
    )]
    FarExpiry,
    #[error("cannot draw random bytes for a token: {0}")]
    Random(String),
}

fn sha256_hex(token: &[u8]) -> String {
    Sha256::digest(token).iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A new random token.
fn new_token() -> Result<String, TokenError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| TokenError::Random(e.to_string()))?;
    Ok(format!("bkd_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)))
}

/// The bytes of the store file at `path`, or `None` when there is none.
fn read_bytes(path: &Path) -> Result<Option<Vec<u8>>, TokenError> {
    crate::files::read_if_exists(path)
        .map_err(|source| TokenError::Read { path: path.to_owned(), source })
}

/// The store file at `path`, or `None` when there is none.
fn read_store(path: &Path) -> Result<Option<StoreFile>, TokenError> {
    read_bytes(path)?.map(|bytes| parse_store(path, &bytes)).transpose()
}

fn parse_store(path: &Path, bytes: &[u8]) -> Result<StoreFile, TokenError> {
    let invalid = |detail: String| TokenError::Invalid { path: path.to_owned(), detail };
    let file: StoreFile = serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    if file.version != FORMAT_VERSION {
        return Err(invalid(format!(
            "version {} (this bucketd reads {FORMAT_VERSION})",
            file.version
        )));
    }
    for t in &file.tokens {
        if parse_hex(&t.sha256).is_none() {
            return Err(invalid(format!("token {:?} has no valid sha256", t.name)));
        }
    }
    Ok(file)
}

/// Writes `file` whole to `path`: a new file renamed over the old, readable by the owner only.
fn write_store(path: &Path, file: &StoreFile) -> Result<(), TokenError> {
    let mut text = serde_json::to_vec_pretty(file).expect("the token store serializes");
    text.push(b'\n');
    crate::files::replace(path, &text, true)
        .map_err(|source| TokenError::Write { path: path.to_owned(), source })
}

/// Runs `edit` on the store under an exclusive lock (a `.lock` file beside it), so that two
/// commands at once do not lose each other's change; writes what it leaves.
fn edit_store<T>(
    path: &Path,
    edit: impl FnOnce(&mut StoreFile) -> Result<T, TokenError>,
) -> Result<T, TokenError> {
    let failed = |source| TokenError::Write { path: path.to_owned(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let lock = std::fs::File::create(path.with_extension("json.lock")).map_err(failed)?;
    lock.lock().map_err(failed)?;
    let mut file =
        read_store(path)?.unwrap_or(StoreFile { version: FORMAT_VERSION, tokens: vec![] });
    let out = edit(&mut file)?;
    write_store(path, &file)?;
    Ok(out)
}

fn check_name(name: &str) -> Result<(), TokenError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok { Ok(()) } else { Err(TokenError::BadName(name.to_owned())) }
}

/// Makes a token named `name` and stores its hash; returns the token, which exists nowhere
/// else.
pub fn create(
    path: &Path,
    name: &str,
    scopes: &[impl Clone + Into<ScopeSpec>],
    expires: Option<DateTime<Utc>>,
) -> Result<String, TokenError> {
    check_name(name)?;
    if scopes.is_empty() {
        return Err(TokenError::NoScope);
    }
    let token = new_token()?;
    let mut scopes: Vec<ScopeSpec> = scopes.iter().cloned().map(Into::into).collect();
    scopes.sort();
    scopes.dedup();
    edit_store(path, |file| {
        if file.tokens.iter().any(|t| t.name == name) {
            return Err(TokenError::Exists(name.to_owned()));
        }
        file.tokens.push(StoredToken {
            name: name.to_owned(),
            sha256: sha256_hex(token.as_bytes()),
            scopes,
            created: Utc::now(),
            expires,
        });
        Ok(())
    })?;
    Ok(token)
}

/// The stored tokens, in the order they were made.
pub fn list(path: &Path) -> Result<Vec<StoredToken>, TokenError> {
    Ok(read_store(path)?.map(|f| f.tokens).unwrap_or_default())
}

/// Removes the token named `name`.
pub fn revoke(path: &Path, name: &str) -> Result<(), TokenError> {
    edit_store(path, |file| {
        let before = file.tokens.len();
        file.tokens.retain(|t| t.name != name);
        if file.tokens.len() == before {
            return Err(TokenError::Unknown(name.to_owned()));
        }
        Ok(())
    })
}

struct Entry {
    digest: [u8; 32],
    grant: Grant,
    expires: Option<DateTime<Utc>>,
}

/// What a presented token is.
#[derive(Debug)]
pub enum Verdict {
    Granted(Grant),
    /// A stored token past its expiry: named, so the refusal can say which.
    Expired(Arc<str>),
    Unknown,
}

/// The tokens a server accepts at one moment: the flags' and the store's.
pub struct TokenSet {
    entries: Vec<Entry>,
    /// Authentication is on: a token from the flags, or a store file (even empty).
    on: bool,
}

impl TokenSet {
    fn new(flag_tokens: &[Vec<u8>], store: Option<&StoreFile>) -> TokenSet {
        let mut entries: Vec<Entry> = flag_tokens
            .iter()
            .map(|t| Entry {
                digest: Sha256::digest(t).into(),
                grant: Grant { name: "--auth-token".into(), access: Arc::new(Access::all()) },
                expires: None,
            })
            .collect();
        for t in store.map(|s| s.tokens.as_slice()).unwrap_or_default() {
            let Some(digest) = parse_hex(&t.sha256) else { continue };
            entries.push(Entry {
                digest,
                grant: Grant {
                    name: t.name.as_str().into(),
                    access: Arc::new(Access::of(&t.scopes)),
                },
                expires: t.expires,
            });
        }
        TokenSet { entries, on: !flag_tokens.is_empty() || store.is_some() }
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    /// What `candidate` is. Every token is compared, whichever matches, in constant time.
    pub fn verify(&self, candidate: &[u8]) -> Verdict {
        let digest: [u8; 32] = Sha256::digest(candidate).into();
        let mut found = u32::MAX;
        for (i, e) in self.entries.iter().enumerate() {
            found.conditional_assign(&(i as u32), e.digest.ct_eq(&digest));
        }
        let Some(e) = self.entries.get(found as usize) else { return Verdict::Unknown };
        match e.expires {
            Some(at) if at <= Utc::now() => Verdict::Expired(e.grant.name.clone()),
            _ => Verdict::Granted(e.grant.clone()),
        }
    }
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenSet({} tokens, on: {})", self.entries.len(), self.on)
    }
}

/// The tokens in force, read again from the store while the server runs.
pub struct LiveTokens {
    flag_tokens: Vec<Vec<u8>>,
    store: PathBuf,
    current: RwLock<Arc<TokenSet>>,
    /// The store file's bytes as last read (`None`: no file).
    last: std::sync::Mutex<Option<Vec<u8>>>,
}

impl LiveTokens {
    /// The flags' tokens and the store at `store`, read now; at start-up, so that a store
    /// that does not parse stops the server.
    pub fn load(flag_tokens: Vec<Vec<u8>>, store: PathBuf) -> Result<Arc<LiveTokens>, TokenError> {
        let live = LiveTokens {
            current: RwLock::new(Arc::new(TokenSet::new(&flag_tokens, None))),
            flag_tokens,
            store,
            last: std::sync::Mutex::new(None),
        };
        live.reload()?;
        Ok(Arc::new(live))
    }

    pub fn current(&self) -> Arc<TokenSet> {
        self.current.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the store again; a change that parses replaces the tokens in force.
    fn reload(&self) -> Result<bool, TokenError> {
        let bytes = read_bytes(&self.store)?;
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if *last == bytes {
            return Ok(false);
        }
        let file = bytes.as_deref().map(|b| parse_store(&self.store, b)).transpose()?;
        let set = TokenSet::new(&self.flag_tokens, file.as_ref());
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(set);
        *last = bytes;
        Ok(true)
    }

    /// Reads the store every [`RELOAD_INTERVAL`] until `shutdown`.
    pub async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RELOAD_INTERVAL) => {}
            }
            let live = self.clone();
            match tokio::task::spawn_blocking(move || live.reload()).await {
                Ok(Ok(true)) => {
                    let set = self.current();
                    tracing::info!(tokens = set.entries.len(), on = set.on, "token store changed");
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "token store changed but does not load: the tokens before stay in force");
                }
                Err(e) => tracing::error!(error = %e, "token reload task failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_stored_as_hashes_and_verified_by_scope() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let writer = create(&path, "sensors", &[Scope::Write], None).unwrap();
        let reader = create(&path, "grafana", &[Scope::Read, Scope::Read], None).unwrap();
        let past = Utc::now() - chrono::Duration::seconds(1);
        let old = create(&path, "old", &[Scope::Admin], Some(past)).unwrap();
        assert!(writer.starts_with("bkd_") && writer.len() == 47, "{writer}");
        let text = std::fs::read_to_string(&path).unwrap();
        for token in [&writer, &reader, &old] {
            assert!(!text.contains(token.as_str()), "a token in plain text on disk");
            assert!(text.contains(&sha256_hex(token.as_bytes())));
        }

        let live = LiveTokens::load(vec![b"flag".to_vec()], path.clone()).unwrap();
        let set = live.current();
        let granted = |t: &str| match set.verify(t.as_bytes()) {
            Verdict::Granted(g) => (g.name.to_string(), g.access),
            other => panic!("{other:?}"),
        };
        let (name, scopes) = granted(&writer);
        assert_eq!(name, "sensors");
        assert!(scopes.allow(Scope::Write, "db") && !scopes.allow(Scope::Read, "db"));
        let (_, scopes) = granted(&reader);
        assert_eq!(scopes.names(), "read");
        assert!(granted("flag").1.allow_everywhere(Scope::Admin));
        assert!(matches!(set.verify(old.as_bytes()), Verdict::Expired(n) if &*n == "old"));
        assert!(matches!(set.verify(b"bkd_nope"), Verdict::Unknown));

        assert!(matches!(
            create(&path, "sensors", &[Scope::Read], None),
            Err(TokenError::Exists(_))
        ));
        assert!(matches!(create(&path, "a b", &[Scope::Read], None), Err(TokenError::BadName(_))));
        assert!(matches!(create(&path, "x", &[] as &[Scope], None), Err(TokenError::NoScope)));

        revoke(&path, "sensors").unwrap();
        assert!(matches!(revoke(&path, "sensors"), Err(TokenError::Unknown(_))));
        assert!(live.reload().unwrap());
        assert!(matches!(live.current().verify(writer.as_bytes()), Verdict::Unknown));
        assert_eq!(
            list(&path).unwrap().iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["grafana", "old"]
        );
    }

    #[test]
    fn the_store_turns_auth_on_even_when_empty_and_a_bad_one_is_kept_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        let live = LiveTokens::load(Vec::new(), path.clone()).unwrap();
        assert!(!live.current().is_on());
        let t = create(&path, "only", &[Scope::Read], None).unwrap();
        assert!(live.reload().unwrap());
        assert!(live.current().is_on());
        revoke(&path, "only").unwrap();
        assert!(live.reload().unwrap());
        assert!(live.current().is_on(), "revoking the last token does not open the server");
        assert!(matches!(live.current().verify(t.as_bytes()), Verdict::Unknown));

        std::fs::write(&path, "{not json").unwrap();
        assert!(matches!(live.reload(), Err(TokenError::Invalid { .. })));
        assert!(live.current().is_on());
        assert!(LiveTokens::load(Vec::new(), path).is_err());
    }
}
