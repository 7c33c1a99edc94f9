//! `bucketd token create|list|revoke`: the token store edited from the command line. A running
//! server that reads the same store takes the change within a second.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;

use super::{Access, ScopeSpec, TokenError};

#[derive(Clone, Debug, clap::Args)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,

    /// The server's data directory: the store is `<data-dir>/tokens.json` unless
    /// --token-store names it.
    #[arg(long, env = "BUCKETD_DATA_DIR", default_value = "./bucketd-data", global = true)]
    pub data_dir: PathBuf,

    /// The token store the server reads (its --token-store).
    #[arg(long, env = "BUCKETD_TOKEN_STORE", global = true)]
    pub token_store: Option<PathBuf>,
}

#[derive(Clone, Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Makes a token and prints it, once: the store keeps only its hash.
    Create {
        /// A name to list and revoke it by: letters, digits, '.', '_', '-'.
        name: String,
        /// What it may do: read, write or admin on every database, or read:DB, write:DB on one
        /// (comma-separated or repeated; admin may do everything).
        #[arg(long, value_delimiter = ',', required = true)]
        scope: Vec<ScopeSpec>,
        /// It stops working this long from now (`90d`, `12h`); never without it.
        #[arg(long, value_parser = humantime::parse_duration)]
        expires_in: Option<Duration>,
    },
    /// Lists the tokens: name, scopes, when made, when they expire.
    List,
    /// Removes a token: requests with it are refused from the server's next read of the
    /// store, within a second.
    Revoke { name: String },
}

impl TokenArgs {
    pub fn store(&self) -> PathBuf {
        self.token_store.clone().unwrap_or_else(|| self.data_dir.join("tokens.json"))
    }
}

/// Runs the command: results to `out`, notes for the person to `err`.
pub fn run(args: &TokenArgs, out: &mut impl Write, err: &mut impl Write) -> Result<(), TokenError> {
    let path = args.store();
    match &args.command {
        TokenCommand::Create { name, scope, expires_in } => {
            let expires = expires_in
                .map(|d| {
                    chrono::Duration::from_std(d)
                        .ok()
                        .and_then(|d| Utc::now().checked_add_signed(d))
                        .ok_or(TokenError::FarExpiry)
                })
                .transpose()?;
            let token = super::create(&path, name, scope, expires)?;
            let _ = writeln!(out, "{token}");
            let until = expires
                .map_or("never expires".to_owned(), |t| format!("expires {}", t.to_rfc3339()));
            let _ = writeln!(
                err,
                "token {name:?} created in {} (scopes: {}; {until}). It is shown this once: \
                 the store keeps only its hash.",
                path.display(),
                Access::of(scope).names()
            );
        }
        TokenCommand::List => {
            let tokens = super::list(&path)?;
            if tokens.is_empty() {
                let _ = writeln!(err, "no tokens in {}", path.display());
            }
            let _ = writeln!(out, "{:<24} {:<18} {:<26} EXPIRES", "NAME", "SCOPES", "CREATED");
            let now = Utc::now();
            for t in tokens {
                let expires = match t.expires {
                    None => "never".to_owned(),
                    Some(at) if at <= now => format!("{} (expired)", at.to_rfc3339()),
                    Some(at) => at.to_rfc3339(),
                };
                let scopes = Access::of(&t.scopes).names();
                let created = t.created.to_rfc3339();
                let _ = writeln!(out, "{:<24} {scopes:<18} {created:<26} {expires}", t.name);
            }
        }
        TokenCommand::Revoke { name } => {
            super::revoke(&path, name)?;
            let _ = writeln!(err, "token {name:?} revoked in {}", path.display());
        }
    }
    Ok(())
}
