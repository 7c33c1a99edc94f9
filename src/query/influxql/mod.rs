//! InfluxQL on `GET`/`POST /query`, for Grafana's built-in InfluxDB data source and other
//! InfluxDB 1.x clients.
//!
//! - [`syntax`]: the statements ([`syntax::ast`]) and the parser, whose errors carry InfluxDB's
//!   "at line L, char C" positions.
//! - [`exec`]: runs statements. Its `context` is what a statement runs with (`Ctx`: series
//!   lists, readings, times as `epoch` and `tz` write them); `show` answers the metadata
//!   statements, `select` answers `SELECT`, `cond` holds `WHERE` (time bounds, tag and field
//!   conditions) and `agg` the aggregate functions and selectors.
//! - This file: the HTTP handler, which parses, checks each statement's scope and database,
//!   and writes InfluxDB's JSON or CSV.
//!
//! The model: a line's measurement and tags are InfluxQL's measurement and tags, a JSON
//! reading's sensor is its measurement; fields are fields. A statement reads one database:
//! the one it names (`ON db`, `"db".."m"`), else the request's `db`, else the default; `rp` is
//! accepted and ignored (a database's one retention policy is `autogen`).

pub mod exec;
pub mod syntax;

pub use syntax::parse;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use self::exec::{Ctx, Epoch, ExecError, Series};
use self::syntax::ast::{Source, Statement};
use super::kept::Kept;
use super::state::QueryState;
use crate::databases::RegistryError;
use crate::http::auth::out_of_scope;
use crate::http::{ApiError, InfluxError, influxdb_headers};
use crate::tokens::{Grant, Scope};

/// Statements one request may carry: each is answered in memory before the response is sent.
pub const MAX_STATEMENTS: usize = 100;

/// A guess at a value's bytes in the JSON answer (a millisecond time or a float, a comma), to
/// size the answer once; at most [`MAX_PRESIZE`] is reserved ahead, past it the answer grows.
const BYTES_PER_VALUE: usize = 16;
const MAX_PRESIZE: usize = 256 << 20;

#[derive(Serialize)]
struct StatementResult {
    statement_id: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    series: Vec<Series>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// InfluxDB's `[{"level", "text"}]`: here, that `--retention` cut the range.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    messages: Vec<Message>,
}

/// The body of an answer: `{"results": [...]}`.
#[derive(Serialize)]
struct Results<'a> {
    results: &'a [StatementResult],
}

#[derive(Serialize)]
struct Message {
    level: &'static str,
    text: String,
}

/// The request's parameters: from the URL, and for a form-encoded POST from the body too (the
/// body's `q` wins, as InfluxDB's does).
#[derive(Default)]
struct Params {
    q: Option<String>,
    db: Option<String>,
    epoch: Option<String>,
    pretty: bool,
    chunked: bool,
}

impl Params {
    fn read(raw: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Params {
        let mut p = Params::default();
        let mut take = |pairs: Vec<(String, String)>| {
            for (k, v) in pairs {
                match k.as_str() {
                    "q" => p.q = Some(v),
                    "db" => p.db = Some(v),
                    "epoch" => p.epoch = Some(v),
                    "pretty" => p.pretty = v == "true",
                    "chunked" => p.chunked = v == "true",
                    _ => {}
                }
            }
        };
        take(serde_urlencoded::from_str(raw.unwrap_or("")).unwrap_or_default());
        let form = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if form {
            take(serde_urlencoded::from_bytes(body).unwrap_or_default());
        }
        p
    }
}

/// A 200 with its JSON body and InfluxDB's headers.
fn ok_response(body: Vec<u8>) -> Response {
    let mut r = ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body)
        .into_response();
    r.headers_mut().extend(influxdb_headers());
    r
}

/// A request-level refusal (no `q`, a bad `epoch`, a query that does not parse): a 400 with
/// InfluxDB's `{"error": …}`, through the API's one status table.
fn refused(message: String) -> Response {
    refused_with(ApiError::BadRequest(message))
}

fn refused_with(error: ApiError) -> Response {
    let mut r = InfluxError::v1(error).into_response();
    r.headers_mut().extend(influxdb_headers());
    r
}

/// The database a statement reads: the one it names (`ON db`, `FROM "db".."m"`), else the
/// request's `db`, else the default. `None` for a statement that reads no database's series
/// (`SHOW DATABASES`, `CREATE DATABASE`, what is refused anyway).
fn database_of<'a>(
    statement: &'a Statement,
    requested: Option<&'a str>,
) -> Result<Option<&'a str>, ExecError> {
    let (named, sources): (Option<&String>, &[Source]) = match statement {
        Statement::Select(s) => (None, &s.from),
        Statement::ShowTagKeys { database, from, .. }
        | Statement::ShowTagValues { database, from, .. }
        | Statement::ShowFieldKeys { database, from, .. }
        | Statement::ShowSeries { database, from, .. } => (database.as_ref(), from),
        Statement::ShowMeasurements { database, .. }
        | Statement::ShowRetentionPolicies { database } => (database.as_ref(), &[]),
        Statement::ShowDatabases
        | Statement::CreateDatabase { .. }
        | Statement::Write { .. }
        | Statement::Unsupported { .. } => return Ok(None),
    };
    let mut named = named.map(String::as_str);
    for source in sources {
        let (Source::Measurement { database, .. } | Source::Regex { database, .. }) = source;
        match (named, database.as_deref()) {
            (Some(a), Some(b)) if a != b => {
                return Err(ExecError::new(format!(
                    "one statement reads one database: it names {a:?} and {b:?}"
                )));
            }
            (None, b) => named = b,
            _ => {}
        }
    }
    Ok(Some(named.or(requested).unwrap_or(crate::databases::DEFAULT)))
}

/// The state `statement` runs on: `state` opened on the database it reads (`read`, from
/// [`database_of`]). `None` when it answers nothing: a `SHOW` of a database that does not
/// exist, as in InfluxDB 1.x, where a select and `SHOW RETENTION POLICIES` fail.
fn open_for(
    state: &QueryState,
    statement: &Statement,
    read: Option<&str>,
) -> Result<Option<QueryState>, ExecError> {
    let Some(name) = read else { return Ok(Some(state.clone())) };
    match state.open(Some(name)) {
        Ok(opened) => Ok(Some(opened)),
        Err(RegistryError::NotFound(name)) => match statement {
            Statement::Select(_) | Statement::ShowRetentionPolicies { .. } => {
                Err(ExecError(format!("database not found: {name}")))
            }
            _ => Ok(None),
        },
        Err(e) => Err(ExecError(e.to_string())),
    }
}

/// The scope a statement needs: `CREATE DATABASE` is what writers such as Telegraf send
/// before they write; everything else reads.
fn scope_of(statement: &Statement) -> Scope {
    match statement {
        Statement::CreateDatabase { .. } => Scope::Write,
        _ => Scope::Read,
    }
}

/// `GET`/`POST /query`: each statement answered in order with its `statement_id`; a statement
/// that fails carries its own `error` and the others still run (HTTP 200), as in InfluxDB. A
/// query that does not parse is a 400 with InfluxDB's `error parsing query: … at line L, char
/// C`. With `chunked=true`, each statement's result is its own JSON line.
#[utoipa::path(
    method(get, post),
    path = "/query",
    tag = "query",
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "Optional: `q` (and the other parameters) as a form, as InfluxDB clients send them with POST."),
    params(
        ("q" = String, Query, example = "SELECT mean(\"value\") FROM \"temp\" WHERE time > now() - 1h GROUP BY time(5m)", description = "InfluxQL: SELECT and SHOW statements separated by `;`. With POST it may come in a form body. `CREATE DATABASE name [WITH DURATION d]` creates a database; statements that would write or delete are refused."),
        ("db" = Option<String>, Query, description = "The database statements read, unless they name one (`ON db`, `FROM \"db\"..\"m\"`); `bucketd` when absent."),
        ("rp" = Option<String>, Query, description = "Accepted and ignored: the one retention policy is `autogen`."),
        ("epoch" = Option<String>, Query, description = "Times as integers in `ns`, `u`, `ms`, `s`, `m` or `h`; RFC 3339 strings without it."),
        ("pretty" = Option<bool>, Query, description = "Indented JSON."),
        ("chunked" = Option<bool>, Query, description = "One JSON object per statement, each on its own line."),
    ),
    responses(
        (status = 200, description = "InfluxDB 1.x results: `{\"results\": [{\"statement_id\": 0, \"series\": [{\"name\", \"tags\", \"columns\", \"values\"}]}]}`; a failed statement has `error` instead of `series`."),
        (status = 400, description = "Missing `q`, a query that does not parse, or a bad `epoch`: `{\"error\": \"...\"}`."),
    )
)]
pub async fn query(
    State(state): State<QueryState>,
    grant: Option<Extension<Grant>>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let p = Params::read(raw.as_deref(), &headers, &body);
    let Some(q) = p.q.filter(|q| !q.trim().is_empty()) else {
        return refused("missing required parameter \"q\"".into());
    };
    let epoch = match Epoch::parse(p.epoch.as_deref()) {
        Ok(e) => e,
        Err(message) => return refused(message),
    };
    let parsed = match parse::parse(&q) {
        Ok(parsed) => parsed,
        Err(e) => return refused(e.to_string()),
    };
    if parsed.statements.len() > MAX_STATEMENTS {
        return refused(format!("more than {MAX_STATEMENTS} statements in one query"));
    }
    let databases: Vec<_> =
        parsed.statements.iter().map(|s| database_of(s, p.db.as_deref())).collect();
    // Authentication let any valid token through; every statement must be in its scopes, or
    // none runs (as InfluxDB 1.x refuses a query it cannot authorize whole).
    if let Some(Extension(grant)) = &grant {
        for (statement, read) in parsed.statements.iter().zip(&databases) {
            let needed = scope_of(statement);
            // A statement that reads no database's series needs the scope on some database;
            // `SHOW DATABASES` then lists only those the token may read.
            let database = match statement {
                Statement::CreateDatabase { name, .. } => Some(name.as_str()),
                _ => read.as_ref().ok().copied().flatten(),
            };
            let allowed = match database {
                Some(db) => grant.access.allow(needed, db),
                None => grant.access.allow_somewhere(needed),
            };
            if !allowed {
                return refused_with(out_of_scope(grant, needed, database));
            }
        }
    }
    let now_ns = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX);
    let mut results = Vec::with_capacity(parsed.statements.len());
    for (statement_id, (statement, read)) in parsed.statements.iter().zip(databases).enumerate() {
        let deadline = std::time::Instant::now() + state.limits.statement_time;
        let opened = read.and_then(|read| open_for(&state, statement, read));
        let kept = Arc::<Kept>::default();
        let (series, error) = match opened {
            Ok(None) => (Vec::new(), None),
            Ok(Some(opened)) => {
                let grant = grant.as_ref().map(|Extension(g)| g);
                let ctx =
                    Ctx { state: &opened, now_ns, epoch, deadline, kept: kept.clone(), grant };
                match exec::run(&ctx, statement).await {
                    Ok(series) => (series, None),
                    Err(e) => (Vec::new(), Some(e.0)),
                }
            }
            Err(e) => (Vec::new(), Some(e.0)),
        };
        let messages =
            kept.message().map(|text| Message { level: "warning", text }).into_iter().collect();
        results.push(StatementResult { statement_id, series, error, messages });
    }
    // Written straight from the results: going through a `serde_json::Value` first copied
    // every row once more.
    let body = if p.chunked {
        let mut out = Vec::new();
        for r in &results {
            serde_json::to_writer(&mut out, &Results { results: std::slice::from_ref(r) })
                .unwrap_or_default();
            out.push(b'\n');
        }
        out
    } else if p.pretty {
        serde_json::to_vec_pretty(&Results { results: &results }).unwrap_or_default()
    } else {
        // Sized once for the rows rather than grown (and copied) by doubling.
        let values: usize =
            results.iter().flat_map(|r| &r.series).map(|s| s.values.len() * s.columns.len()).sum();
        let mut out = Vec::with_capacity(values.saturating_mul(BYTES_PER_VALUE).min(MAX_PRESIZE));
        serde_json::to_writer(&mut out, &Results { results: &results }).unwrap_or_default();
        out
    };
    ok_response(body)
}
