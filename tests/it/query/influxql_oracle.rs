//! InfluxQL oracle: bucketd's `/query` against a real InfluxDB 1.6 (`influxd`, a child process;
//! `scripts/test.sh` installs it) on the same data.
//!
//! Both servers get `influxql/data.lp` (two days of millisecond line protocol, made by
//! `influxql/gen_data.py`); then every query of `influxql/queries.txt` goes to both with the
//! same parameters and the JSON answers are compared structurally ([`compare_bodies`]). Every
//! difference of every query is collected and the test fails once, listing them all.
//!
//! Run: `cargo test --test it influxql_oracle`.
//!
//! `BUCKETD_INFLUXQL_ORACLE_FILTER=<text>` sends only the queries containing `<text>` (or, if
//! it is a number, the query on that line of `queries.txt`). The full report of a failed run is
//! also written to `target/tmp/influxql_oracle_report.txt`.
//!
//! `BUCKETD_INFLUXQL_ORACLE_SUBJECT=influxd` puts a second influxd where bucketd would be:
//! the harness checking itself (every query must then match).
//!
//! `SHOW DATABASES` and `SHOW RETENTION POLICIES` differ by design (bucketd lists its default
//! database `bucketd` where InfluxDB lists `_internal`), so they are not in `queries.txt`:
//! [`influxql_oracle_show_databases_and_rps`] checks the shape of bucketd's answers and that
//! the database written to is listed.

use std::any::Any;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bucketd::store::BucketLimits;
use bucketd::store::embedded::EmbeddedStore;
use serde_json::Value;

use crate::support::influxd::Influxd;
use crate::support::server::{TestServer, wait_until};

const DATA: &str = include_str!("influxql/data.lp");
const QUERIES: &str = include_str!("influxql/queries.txt");
/// The database both servers are written to and queried in.
pub(super) const DB: &str = "oracle";
/// Set to `influxd` to compare InfluxDB with itself (see the module documentation).
const SUBJECT_ENV: &str = "BUCKETD_INFLUXQL_ORACLE_SUBJECT";
/// Set to a line number or a piece of query text to send only the matching queries.
const FILTER_ENV: &str = "BUCKETD_INFLUXQL_ORACLE_FILTER";
/// Floats are equal when within this much of each other, relative to the larger (absolute
/// below 1): sums in another order differ in the last bits.
const FLOAT_TOLERANCE: f64 = 1e-9;
/// How much of each body a report shows.
const BODY_SHOWN: usize = 2000;
/// How many differences a report lists per query.
const DIFFS_SHOWN: usize = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influxql_oracle_matches_influxdb() {
    let reference = Influxd::start().await;
    reference.admin(None, &format!("CREATE DATABASE {DB}")).await;
    reference.write(DB, "ms", DATA).await;
    wait_for_all_points(&reference, DATA).await;

    let subject = Subject::start(DATA).await;
    let mut queries = parse_queries(QUERIES);
    assert!(queries.len() > 100, "queries.txt parsed to only {} queries", queries.len());
    if let Ok(filter) = std::env::var(FILTER_ENV) {
        queries.retain(|q| q.text.contains(&filter) || filter == q.line.to_string());
        assert!(!queries.is_empty(), "{FILTER_ENV}={filter:?} matches no query");
    }

    let mut report = String::new();
    let mut failed = Vec::new();
    for query in &queries {
        let expected = send(&reference.client, &reference.url, query).await;
        let got = send(&subject.client, &subject.url, query).await;
        let mut diffs = Vec::new();
        match query.expect {
            Expect::Same => {
                if expected.status != got.status {
                    diffs.push(format!(
                        "HTTP status: expected {}, got {}",
                        expected.status, got.status
                    ));
                }
                compare_bodies(&expected.body, &got.body, query.sorted, &mut diffs);
            }
            Expect::Refused if !refused(&got) => {
                diffs.push(format!("expected a refusal (expect=refused), got {}", got.status));
            }
            Expect::Differs if got.status >= 500 => {
                diffs.push(format!("expected an answer (expect=differs), got {}", got.status));
            }
            Expect::Refused | Expect::Differs => {}
        }
        if !diffs.is_empty() {
            failed.push(query.line.to_string());
            write_report(&mut report, query, &expected, &got, &diffs, subject.name);
        }
    }
    if failed.is_empty() {
        return;
    }
    let report = format!(
        "{} of {} InfluxQL queries answered differently by {} than by InfluxDB; their lines in \
         tests/it/query/influxql/queries.txt: {}\n{report}",
        failed.len(),
        queries.len(),
        subject.name,
        failed.join(" ")
    );
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("influxql_oracle_report.txt");
    let saved = match std::fs::write(&file, &report) {
        Ok(()) => format!("(also in {})", file.display()),
        Err(e) => format!("({} not written: {e})", file.display()),
    };
    panic!("{report}\n{saved}");
}

/// `SHOW DATABASES` and `SHOW RETENTION POLICIES` (Grafana sends both): bucketd's answers have
/// InfluxDB's shape, though not its content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influxql_oracle_show_databases_and_rps() {
    let subject = Subject::start(DATA).await;
    let query = Query::new;
    let databases = send(&subject.client, &subject.url, &query("SHOW DATABASES")).await;
    let series = only_series(&databases, "SHOW DATABASES");
    assert_eq!(series["name"], "databases", "{}", databases.body);
    assert_eq!(series["columns"], serde_json::json!(["name"]), "{}", databases.body);
    let names = series["values"].as_array().expect("values");
    assert!(
        names.iter().any(|row| row[0] == subject.database),
        "SHOW DATABASES lists {:?}: {}",
        subject.database,
        databases.body
    );

    for q in [
        "SHOW RETENTION POLICIES".to_owned(),
        format!("SHOW RETENTION POLICIES ON \"{}\"", subject.database),
    ] {
        let answer = send(&subject.client, &subject.url, &query(&q)).await;
        let series = only_series(&answer, &q);
        assert_eq!(
            series["columns"],
            serde_json::json!(["name", "duration", "shardGroupDuration", "replicaN", "default"]),
            "{q}: {}",
            answer.body
        );
        let rows = series["values"].as_array().expect("values");
        assert!(
            !rows.is_empty() && rows.iter().all(|r| r.as_array().is_some_and(|r| r.len() == 5)),
            "{q}: one or more policies of five columns: {}",
            answer.body
        );
        assert!(
            rows.iter().filter(|r| r[4] == true).count() == 1,
            "{q}: exactly one default policy: {}",
            answer.body
        );
    }
}

/// The server the reference is compared with: bucketd (on the embedded store) unless
/// [`SUBJECT_ENV`] asks for a second influxd.
pub(super) struct Subject {
    pub(super) name: &'static str,
    pub(super) url: String,
    pub(super) client: reqwest::Client,
    /// The database its SHOW DATABASES lists.
    database: &'static str,
    _keep: Box<dyn Any + Send>,
}

impl Subject {
    /// Starts the subject and writes `data` (millisecond line protocol) to it, in [`DB`] for a
    /// second influxd; returns once all of it is stored.
    pub(super) async fn start(data: &str) -> Subject {
        match std::env::var(SUBJECT_ENV).as_deref() {
            Ok("influxd") => {
                let influxd = Influxd::start().await;
                influxd.admin(None, &format!("CREATE DATABASE {DB}")).await;
                influxd.write(DB, "ms", data.to_owned()).await;
                wait_for_all_points(&influxd, data).await;
                Subject {
                    name: "the second influxd",
                    url: influxd.url.clone(),
                    client: influxd.client.clone(),
                    database: DB,
                    _keep: Box::new(influxd),
                }
            }
            Ok(other) if !other.is_empty() => panic!("{SUBJECT_ENV}={other:?}: only `influxd`"),
            _ => {
                let dir = tempfile::tempdir().expect("temporary directory");
                let path = dir.path().to_owned();
                let store = tokio::task::spawn_blocking(move || {
                    EmbeddedStore::open(&path, BucketLimits::default())
                })
                .await
                .expect("open task")
                .expect("embedded store opens");
                let server = TestServer::start(Arc::new(store), &[]).await;
                let create = format!("/query?q=CREATE%20DATABASE%20{DB}");
                let created = server.post(&create, "text/plain", "").await;
                assert_eq!(created.status(), reqwest::StatusCode::OK);
                let response = server
                    .post(&format!("/write?db={DB}&precision=ms"), "text/plain", data.to_owned())
                    .await;
                let status = response.status();
                assert_eq!(
                    status,
                    reqwest::StatusCode::NO_CONTENT,
                    "bucketd refused the data: {}",
                    response.text().await.unwrap()
                );
                // Writes are visible as soon as they are acknowledged, but while a flush is
                // landing, a reading can be seen both in the buffers and in the store (see
                // `Buffers::unflushed`). InfluxDB's answers are compared with settled data:
                // every reading written, none buffered or in flight.
                let buffers = server.buffers.clone();
                wait_until("data.lp written to the store", Duration::from_secs(120), || {
                    buffers.buffered() == 0
                })
                .await;
                Subject {
                    name: "bucketd",
                    url: server.url(""),
                    client: server.client.clone(),
                    database: DB,
                    _keep: Box::new((server, dir)),
                }
            }
        }
    }
}

/// Waits until influxd counts every field value of `data` (the state, not a delay).
pub(super) async fn wait_for_all_points(influxd: &Influxd, data: &str) {
    let expected: u64 = data
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.split(' ').nth(1).expect("a field set").split(',').count() as u64)
        .sum();
    let query = Query::new("SELECT count(*) FROM /.*/");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let answer = send(&influxd.client, &influxd.url, &query).await;
        let counted: u64 = answer.body["results"][0]["series"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["values"].as_array().into_iter().flatten())
            .flat_map(|row| row.as_array().into_iter().flatten().skip(1))
            .filter_map(Value::as_u64)
            .sum();
        if counted == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "influxd counts {counted} of the {expected} field values written: {}",
            answer.body
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One query of `queries.txt` and how to send it.
#[derive(Debug, Clone)]
pub(super) struct Query {
    /// 1-based line in queries.txt.
    line: usize,
    pub(super) text: String,
    /// The `epoch` parameter; `None`: absent (times as RFC3339 strings).
    epoch: Option<String>,
    /// Compare series and rows regardless of their order.
    sorted: bool,
    /// `POST` with `q` in a form body (as Grafana can send it) instead of `GET`.
    post: bool,
    /// The `rp` parameter (Grafana sends it when a policy other than the default is picked).
    rp: Option<String>,
    expect: Expect,
}

impl Query {
    /// `text` as a GET with `epoch=ms`, its answer to be InfluxDB's.
    pub(super) fn new(text: &str) -> Query {
        Query {
            line: 0,
            text: text.to_owned(),
            epoch: Some("ms".into()),
            sorted: false,
            post: false,
            rp: None,
            expect: Expect::Same,
        }
    }
}

/// What bucketd's answer is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// InfluxDB's answer.
    Same,
    /// A form bucketd does not answer: it must refuse it with an error (400, or an error in
    /// every statement), whatever InfluxDB answers.
    Refused,
    /// An InfluxDB quirk bucketd does not copy: any answer but a 5xx.
    Differs,
}

/// `queries.txt`: one query per line; blocks separated by blank lines; `#` starts a comment.
/// A comment made only of `key=value` directives applies them to every following query of its
/// block: `epoch=ms|s|ns|…` (default `ms`; `epoch=` sends none: RFC3339 times),
/// `compare=sorted`, `method=post|get`, `rp=<policy>` (`rp=` sends none, the default),
/// `expect=same|refused|differs` (see [`Expect`]).
fn parse_queries(text: &str) -> Vec<Query> {
    let mut out = Vec::new();
    let default = Query {
        line: 0,
        text: String::new(),
        epoch: Some("ms".into()),
        sorted: false,
        post: false,
        rp: None,
        expect: Expect::Same,
    };
    let mut block = default.clone();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            block = default.clone();
        } else if let Some(comment) = line.strip_prefix('#') {
            if let Some(directives) = directives(comment) {
                for (key, value) in directives {
                    match (key, value) {
                        ("epoch", "") => block.epoch = None,
                        ("epoch", unit) => block.epoch = Some(unit.to_owned()),
                        ("compare", "sorted") => block.sorted = true,
                        ("compare", "ordered") => block.sorted = false,
                        ("method", "post") => block.post = true,
                        ("method", "get") => block.post = false,
                        ("rp", "") => block.rp = None,
                        ("rp", rp) => block.rp = Some(rp.to_owned()),
                        ("expect", "same") => block.expect = Expect::Same,
                        ("expect", "refused") => block.expect = Expect::Refused,
                        ("expect", "differs") => block.expect = Expect::Differs,
                        _ => panic!("queries.txt:{}: unknown directive {key}={value}", i + 1),
                    }
                }
            }
        } else {
            out.push(Query { line: i + 1, text: line.to_owned(), ..block.clone() });
        }
    }
    out
}

/// The directives of a comment, if it is made of nothing else.
fn directives(comment: &str) -> Option<Vec<(&str, &str)>> {
    const KEYS: [&str; 5] = ["epoch", "compare", "method", "rp", "expect"];
    let words: Vec<&str> = comment.split_whitespace().collect();
    if words.is_empty() {
        return None;
    }
    words.iter().map(|w| w.split_once('=').filter(|(k, _)| KEYS.contains(k))).collect()
}

/// A 400 with an error, or a 200 whose every statement failed.
fn refused(answer: &Answer) -> bool {
    let body = &answer.body;
    match answer.status {
        400 => body["error"].is_string(),
        200 => body["results"]
            .as_array()
            .is_some_and(|r| !r.is_empty() && r.iter().all(|s| s["error"].is_string())),
        _ => false,
    }
}

pub(super) struct Answer {
    pub(super) status: u16,
    /// The JSON body; a body that is not JSON as a string.
    pub(super) body: Value,
}

pub(super) async fn send(client: &reqwest::Client, base: &str, query: &Query) -> Answer {
    let mut params = vec![("db", DB)];
    if let Some(epoch) = &query.epoch {
        params.push(("epoch", epoch));
    }
    if let Some(rp) = &query.rp {
        params.push(("rp", rp));
    }
    let request = if query.post {
        let url = format!("{base}/query?{}", encode(&params));
        client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(encode(&[("q", query.text.as_str())]))
    } else {
        params.push(("q", &query.text));
        client.get(format!("{base}/query?{}", encode(&params)))
    };
    let response = tokio::time::timeout(Duration::from_secs(60), request.send())
        .await
        .unwrap_or_else(|_| panic!("no answer within 60 s to {:?}", query.text))
        .unwrap_or_else(|e| panic!("{:?} not sent: {e}", query.text));
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Answer { status, body }
}

fn encode(pairs: &[(&str, &str)]) -> String {
    serde_urlencoded::to_string(pairs).expect("parameters encode")
}

fn only_series<'a>(answer: &'a Answer, q: &str) -> &'a Value {
    let series = answer.body["results"][0]["series"].as_array();
    match series.map(Vec::as_slice) {
        Some([one]) => one,
        _ => panic!("{q}: expected one series, got {} {}", answer.status, answer.body),
    }
}

/// Compares InfluxDB's answer (`expected`) with the subject's (`got`), adding each difference
/// to `diffs`: both refused the query (error messages may differ), or statement ids, errors
/// and series (name, tags, columns, rows) agree, an absent `series` being an empty one.
pub(super) fn compare_bodies(expected: &Value, got: &Value, sorted: bool, diffs: &mut Vec<String>) {
    let (Some(e), Some(g)) = (expected.as_object(), got.as_object()) else {
        if expected != got {
            diffs.push("body: not both JSON objects".into());
        }
        return;
    };
    match (e.get("error"), g.get("error")) {
        (Some(_), Some(_)) => return,
        (Some(m), None) => {
            diffs.push(format!("expected a request error ({m}), got none"));
            return;
        }
        (None, Some(m)) => {
            diffs.push(format!("expected no request error, got {m}"));
            return;
        }
        (None, None) => {}
    }
    let results = |v: &serde_json::Map<String, Value>| {
        v.get("results").and_then(Value::as_array).cloned().unwrap_or_default()
    };
    let (er, gr) = (results(e), results(g));
    if er.len() != gr.len() {
        diffs.push(format!("results: expected {} statements, got {}", er.len(), gr.len()));
    }
    for (i, (e, g)) in er.iter().zip(&gr).enumerate() {
        compare_result(&format!("results[{i}]"), e, g, sorted, diffs);
    }
}

fn compare_result(path: &str, e: &Value, g: &Value, sorted: bool, diffs: &mut Vec<String>) {
    if e.get("statement_id") != g.get("statement_id") {
        diffs.push(format!(
            "{path}.statement_id: expected {}, got {}",
            show(e.get("statement_id")),
            show(g.get("statement_id"))
        ));
    }
    match (e.get("error"), g.get("error")) {
        (Some(_), Some(_)) => return,
        (Some(m), None) => {
            diffs.push(format!("{path}: expected error {m}, got none"));
            return;
        }
        (None, Some(m)) => {
            diffs.push(format!("{path}: expected no error, got {m}"));
            return;
        }
        (None, None) => {}
    }
    let series = |v: &Value| {
        let mut s = v.get("series").and_then(Value::as_array).cloned().unwrap_or_default();
        if sorted {
            for one in &mut s {
                if let Some(rows) = one.get_mut("values").and_then(Value::as_array_mut) {
                    rows.sort_by_key(|r| r.to_string());
                }
            }
            s.sort_by_key(|one| (one["name"].to_string(), tags_of(one).to_string()));
        }
        s
    };
    let (es, gs) = (series(e), series(g));
    if es.len() != gs.len() {
        let ids = |s: &[Value]| {
            s.iter().map(|x| format!("{}{}", x["name"], tags_of(x))).collect::<Vec<_>>().join(" ")
        };
        diffs.push(format!(
            "{path}.series: expected {} series [{}], got {} [{}]",
            es.len(),
            ids(&es),
            gs.len(),
            ids(&gs)
        ));
    }
    for (i, (e, g)) in es.iter().zip(&gs).enumerate() {
        let path = format!("{path}.series[{i}]");
        if e.get("name") != g.get("name") {
            diffs.push(format!(
                "{path}.name: expected {}, got {}",
                show(e.get("name")),
                show(g.get("name"))
            ));
        }
        if tags_of(e) != tags_of(g) {
            diffs.push(format!("{path}.tags: expected {}, got {}", tags_of(e), tags_of(g)));
        }
        if e.get("columns") != g.get("columns") {
            diffs.push(format!(
                "{path}.columns: expected {}, got {}",
                show(e.get("columns")),
                show(g.get("columns"))
            ));
            continue;
        }
        let rows =
            |v: &Value| v.get("values").and_then(Value::as_array).cloned().unwrap_or_default();
        let (er, gr) = (rows(e), rows(g));
        if er.len() != gr.len() {
            diffs.push(format!("{path}.values: expected {} rows, got {}", er.len(), gr.len()));
        }
        for (r, (erow, grow)) in er.iter().zip(&gr).enumerate() {
            let cells = |v: &Value| v.as_array().cloned().unwrap_or_default();
            let (ec, gc) = (cells(erow), cells(grow));
            if ec.len() != gc.len() {
                diffs.push(format!("{path}.values[{r}]: expected {erow}, got {grow}"));
                continue;
            }
            for (c, (ev, gv)) in ec.iter().zip(&gc).enumerate() {
                if let Err(why) = same_value(ev, gv) {
                    diffs.push(format!("{path}.values[{r}][{c}]: {why}"));
                }
            }
        }
    }
}

/// Tags, absent ones as `{}`.
fn tags_of(series: &Value) -> Value {
    series.get("tags").cloned().unwrap_or_else(|| Value::Object(Default::default()))
}

fn show(v: Option<&Value>) -> String {
    v.map_or_else(|| "(absent)".to_owned(), Value::to_string)
}

/// One cell: numbers within [`FLOAT_TOLERANCE`], and an integer (a JSON number without a
/// fraction, as InfluxDB writes integers and whole floats) only where the other is one too.
fn same_value(e: &Value, g: &Value) -> Result<(), String> {
    let (Value::Number(en), Value::Number(gn)) = (e, g) else {
        return if e == g { Ok(()) } else { Err(format!("expected {e}, got {g}")) };
    };
    let integer = |n: &serde_json::Number| n.is_i64() || n.is_u64();
    if integer(en) && integer(gn) {
        return if en == gn { Ok(()) } else { Err(format!("expected {e}, got {g}")) };
    }
    let (x, y) = (en.as_f64().unwrap(), gn.as_f64().unwrap());
    let close = x == y || (x - y).abs() <= FLOAT_TOLERANCE * x.abs().max(y.abs()).max(1.0);
    match (close, integer(en), integer(gn)) {
        (false, _, _) => Err(format!("expected {e}, got {g}")),
        (true, true, false) => Err(format!("expected the integer {e}, got the float {g}")),
        (true, false, true) => Err(format!("expected the float {e}, got the integer {g}")),
        (true, _, _) => Ok(()),
    }
}

fn write_report(
    report: &mut String,
    query: &Query,
    expected: &Answer,
    got: &Answer,
    diffs: &[String],
    subject: &str,
) {
    let epoch = query.epoch.as_deref().map_or("none (RFC3339)".to_owned(), str::to_owned);
    let method = if query.post { "POST" } else { "GET" };
    let _ = writeln!(
        report,
        "\n=== queries.txt:{} ({method}, epoch={epoch}{}{})\n    {}",
        query.line,
        if query.sorted { ", compare=sorted" } else { "" },
        query.rp.as_ref().map_or(String::new(), |rp| format!(", rp={rp}")),
        query.text
    );
    for diff in diffs.iter().take(DIFFS_SHOWN) {
        let _ = writeln!(report, "  - {diff}");
    }
    if diffs.len() > DIFFS_SHOWN {
        let _ = writeln!(report, "  - ... and {} more differences", diffs.len() - DIFFS_SHOWN);
    }
    let _ = writeln!(report, "  InfluxDB ({}): {}", expected.status, clip(&expected.body));
    let _ = writeln!(report, "  {subject} ({}): {}", got.status, clip(&got.body));
}

fn clip(body: &Value) -> String {
    let text = match body {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match text.char_indices().nth(BODY_SHOWN) {
        Some((at, _)) => format!("{}… ({} bytes)", &text[..at], text.len()),
        None => text,
    }
}

/// The comparison itself: equal answers pass, and each kind of difference is reported.
#[test]
fn influxql_oracle_comparison_finds_differences() {
    let body = |v: &str| -> Value { serde_json::from_str(v).unwrap() };
    let diffs = |e: &str, g: &str, sorted: bool| {
        let mut d = Vec::new();
        compare_bodies(&body(e), &body(g), sorted, &mut d);
        d
    };
    let base = r#"{"results":[{"statement_id":0,"series":[{"name":"cpu","tags":{"host":"a"},
        "columns":["time","mean","count"],"values":[[1,1.5,3],[2,null,0]]}]}]}"#;
    assert_eq!(diffs(base, base, false), Vec::<String>::new());
    // Floats within the tolerance, absent series as empty, absent tags as {}.
    let close = base.replace("1.5", "1.5000000000001");
    assert_eq!(diffs(base, &close, false), Vec::<String>::new());
    assert!(
        diffs(
            r#"{"results":[{"statement_id":0}]}"#,
            r#"{"results":[{"statement_id":0,"series":[]}]}"#,
            false
        )
        .is_empty()
    );
    assert!(diffs(
        r#"{"results":[{"statement_id":0,"series":[{"name":"m","columns":["a"],"values":[[1]]}]}]}"#,
        r#"{"results":[{"statement_id":0,"series":[{"name":"m","tags":{},"columns":["a"],"values":[[1]]}]}]}"#,
        false
    )
    .is_empty());
    // Both refused, different messages: equal.
    assert!(diffs(r#"{"error":"a"}"#, r#"{"error":"b"}"#, false).is_empty());
    assert!(
        diffs(
            r#"{"results":[{"statement_id":0,"error":"x"}]}"#,
            r#"{"results":[{"statement_id":0,"error":"y"}]}"#,
            false
        )
        .is_empty()
    );

    let one = |e: &str, g: &str| {
        let d = diffs(e, g, false);
        assert_eq!(d.len(), 1, "{e} vs {g}: {d:?}");
        d.into_iter().next().unwrap()
    };
    assert!(one(base, &base.replace("1.5", "1.6")).contains("values[0][1]: expected 1.5, got 1.6"));
    assert!(
        one(base, &base.replace("[1,1.5,3]", "[1,1.5,3.0]"))
            .contains("expected the integer 3, got the float 3.0")
    );
    assert!(one(base, &base.replace("null,0", "0,0")).contains("expected null, got 0"));
    assert!(one(base, &base.replace("\"count\"", "\"count_1\"")).contains("columns"));
    assert!(one(base, &base.replace("\"a\"}", "\"b\"}")).contains("tags"));
    assert!(one(base, &base.replace("\"cpu\"", "\"mem\"")).contains("name"));
    assert!(one(base, &base.replace(",[2,null,0]", "")).contains("expected 2 rows, got 1"));
    assert!(one(base, r#"{"error":"nope"}"#).contains("request error"));
    assert!(
        one(base, &base.replace("\"series\"", "\"error\":\"x\",\"series\"")).contains("got \"x\"")
    );
    assert!(
        one(base, &base.replace("\"statement_id\":0", "\"statement_id\":1"))
            .contains("statement_id")
    );
    assert!(one(base, r#"{"results":[{"statement_id":0}]}"#).contains("expected 1 series"));

    // compare=sorted: the same rows and series in another order are equal.
    let two = r#"{"results":[{"statement_id":0,"series":[
        {"name":"a","columns":["k"],"values":[["x"],["y"]]},{"name":"b","columns":["k"],"values":[["z"]]}]}]}"#;
    let swapped = r#"{"results":[{"statement_id":0,"series":[
        {"name":"b","columns":["k"],"values":[["z"]]},{"name":"a","columns":["k"],"values":[["y"],["x"]]}]}]}"#;
    assert!(diffs(two, swapped, true).is_empty());
    assert!(!diffs(two, swapped, false).is_empty());
}

#[test]
fn influxql_oracle_queries_file_parses() {
    let queries = parse_queries(
        "# a comment\nSELECT 1\n# epoch= compare=sorted\nSHOW SERIES\n# method=post\nSHOW X\n\nSELECT 2\n",
    );
    let got: Vec<_> = queries
        .iter()
        .map(|q| (q.line, q.text.as_str(), q.epoch.as_deref(), q.sorted, q.post))
        .collect();
    assert_eq!(
        got,
        [
            (2, "SELECT 1", Some("ms"), false, false),
            (4, "SHOW SERIES", None, true, false),
            (6, "SHOW X", None, true, true),
            (8, "SELECT 2", Some("ms"), false, false),
        ]
    );
    // The real file parses (unknown directives panic).
    assert!(!parse_queries(QUERIES).is_empty());
}
