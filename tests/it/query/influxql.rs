//! InfluxQL on `/query`, through the query router: what the oracle comparison with InfluxDB
//! cannot show (bucketd's own answers, hour statistics against readings, unflushed readings,
//! the request and error shapes).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use bucketd::model::{Batch, FieldValue, HOUR_MS, Reading, Seq, TimestampMs, WriterId};
use bucketd::store::memory::MemoryStore;
use bucketd::store::{
    BucketLimits, RangeQuery, RollupQuery, RollupRow, SensorInfo, SensorQuery, Store, StoreError,
    WriteReport,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::query::{
    App, FakeUnflushed, app, app_with, enc, get, get_json, reading, series, write,
};

const BASE: i64 = 1_709_251_200_000; // 2024-03-01T00:00:00Z

/// Three sites of `temp` over six hours, one reading a minute, integer and float fields; site
/// `c` starts in the third hour.
async fn fixture(app: &App) {
    for (site, start_hour, offset) in [("a", 0, 0.0), ("b", 0, 10.0), ("c", 2, -5.0)] {
        let s = series(&format!("temp,site={site}"), "temp", &[("site", site)]);
        let readings: Vec<Reading> = (start_hour * 60..6 * 60)
            .map(|i| {
                reading(
                    BASE + i * 60_000,
                    vec![
                        // Quarters: sums are exact whatever the order of addition.
                        ("v", FieldValue::Float(offset + (i % 13) as f64 * 0.25)),
                        ("n", FieldValue::Int(i % 7)),
                    ],
                )
            })
            .collect();
        write(&app.store, &s, &readings).await;
    }
}

async fn q(app: &App, query: &str) -> (StatusCode, Value) {
    get_json(&app.router, &format!("/query?db=bucketd&epoch=ms&q={}", enc(query))).await
}

fn range(from_h: i64, to_h: i64) -> String {
    format!("time >= {}ms AND time < {}ms", BASE + from_h * HOUR_MS, BASE + to_h * HOUR_MS)
}

#[tokio::test]
async fn whole_hour_groups_from_statistics_equal_those_from_readings() {
    let app = app(BucketLimits::default());
    fixture(&app).await;
    let fields = "mean(v), count(v), sum(v), min(v), max(v), spread(v), sum(n), max(n)";
    for group in ["time(1h)", "time(1h), site", "time(2h), *", "time(10m), site", "time(7m)"] {
        let stats = format!("SELECT {fields} FROM temp WHERE {} GROUP BY {group}", range(0, 6));
        // A field condition that holds for every reading forces the readings path.
        let readings = format!(
            "SELECT {fields} FROM temp WHERE {} AND v > -1000 GROUP BY {group}",
            range(0, 6)
        );
        let (s1, a) = q(&app, &stats).await;
        let (s2, b) = q(&app, &readings).await;
        assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
        assert!(a["results"][0]["series"].as_array().is_some_and(|s| !s.is_empty()), "{a}");
        assert_eq!(a, b, "{group}");
    }
}

/// Counts the readings the store streams out, to show that hour groups read statistics.
struct Counting {
    inner: Arc<MemoryStore>,
    readings: Arc<AtomicUsize>,
}

#[async_trait]
impl Store for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }
    async fn write(&self, w: WriterId, b: &[Batch]) -> Vec<Result<WriteReport, StoreError>> {
        self.inner.write(w, b).await
    }
    async fn high_water(
        &self,
        w: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        self.inner.high_water(w, keys).await
    }
    fn readings(&self, query: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>> {
        let counter = self.readings.clone();
        self.inner
            .readings(query)
            .inspect(move |_| {
                counter.fetch_add(1, Ordering::Relaxed);
            })
            .boxed()
    }
    async fn rollups(&self, query: RollupQuery) -> Result<Vec<RollupRow>, StoreError> {
        self.inner.rollups(query).await
    }
    async fn sensors(&self, query: SensorQuery) -> Result<Vec<SensorInfo>, StoreError> {
        self.inner.sensors(query).await
    }
}

#[tokio::test]
async fn hour_groups_read_one_reading_per_series_not_every_reading() {
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    let readings = Arc::new(AtomicUsize::new(0));
    let counting = Arc::new(Counting { inner: store.clone(), readings: readings.clone() });
    let app = app_with(store, counting, Arc::new(FakeUnflushed::default()));
    fixture(&app).await;
    let (status, body) = q(
        &app,
        &format!("SELECT mean(v), max(n) FROM temp WHERE {} GROUP BY time(1h), site", range(0, 6)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["results"][0]["series"].as_array().unwrap().len(), 3);
    // Each series' latest reading tells its field types; the rest comes from statistics.
    assert_eq!(readings.load(Ordering::Relaxed), 3);
    readings.store(0, Ordering::Relaxed);
    q(&app, &format!("SELECT median(v) FROM temp WHERE {} GROUP BY time(1h)", range(0, 6))).await;
    // A median reads every reading, and each series' latest for its field types.
    let every = 2 * 6 * 60 + 4 * 60;
    assert_eq!(readings.load(Ordering::Relaxed), every + 3, "median reads every reading");
}

#[tokio::test]
async fn unflushed_readings_are_answered_on_both_paths() {
    let app = app(BucketLimits::default());
    fixture(&app).await;
    let s = series("temp,site=a", "temp", &[("site", "a")]);
    app.unflushed.push(&s, reading(BASE + 6 * HOUR_MS + 5, vec![("v", FieldValue::Float(100.0))]));
    for extra in ["", " AND v > -1000"] {
        let (_, body) = q(
            &app,
            &format!(
                "SELECT max(v), count(v) FROM temp WHERE site = 'a'{extra} AND {} GROUP BY time(1h)",
                range(6, 7)
            ),
        )
        .await;
        assert_eq!(
            body["results"][0]["series"][0]["values"],
            json!([[BASE + 6 * HOUR_MS, 100, 1]]),
            "{extra}"
        );
        // A median's values come from the store's step values, or reading by reading.
        let (_, body) = q(
            &app,
            &format!(
                "SELECT median(v) FROM temp WHERE site = 'a'{extra} AND {} GROUP BY time(1h)",
                range(6, 7)
            ),
        )
        .await;
        assert_eq!(
            body["results"][0]["series"][0]["values"],
            json!([[BASE + 6 * HOUR_MS, 100]]),
            "{extra}"
        );
    }
    // Every site together: a group's step values must answer as the readings do, the
    // unflushed one among them.
    let median = |extra: &str| {
        format!("SELECT median(v) FROM temp WHERE {}{extra} GROUP BY time(30m)", range(5, 7))
    };
    let (_, by_steps) = q(&app, &median("")).await;
    let (_, by_readings) = q(&app, &median(" AND v > -1000")).await;
    assert!(by_steps["results"][0]["series"][0]["values"].as_array().is_some_and(|v| v.len() == 4));
    assert_eq!(by_steps, by_readings);
    // So must the statistics of the sites' steps, read for every site at once.
    for by in ["", ", site"] {
        let stats = |extra: &str| {
            format!(
                "SELECT mean(v), max(v), count(v), last(v) FROM temp WHERE {}{extra} \
                 GROUP BY time(30m){by}",
                range(5, 7)
            )
        };
        let (_, by_steps) = q(&app, &stats("")).await;
        let (_, by_readings) = q(&app, &stats(" AND v > -1000")).await;
        let series = by_steps["results"][0]["series"].as_array().unwrap();
        assert_eq!(series.len(), if by.is_empty() { 1 } else { 3 }, "{by_steps}");
        assert!(by_steps.to_string().contains("100"), "the unflushed reading: {by_steps}");
        assert_eq!(by_steps, by_readings, "{by}");
    }
    let (_, body) = q(&app, "SHOW TAG VALUES FROM temp WITH KEY = \"site\"").await;
    assert_eq!(
        body["results"][0]["series"][0]["values"],
        json!([["site", "a"], ["site", "b"], ["site", "c"]])
    );
}

#[tokio::test]
async fn statements_answer_in_order_and_fail_one_by_one() {
    let app = app(BucketLimits::default());
    fixture(&app).await;
    let (status, body) = q(
        &app,
        "CREATE DATABASE telegraf; DROP MEASUREMENT temp; SELECT last(n) FROM temp WHERE site = 'b'; SHOW DATABASES",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert_eq!(results[0], json!({"statement_id": 0}));
    assert_eq!(results[1]["statement_id"], 1);
    assert!(results[1]["error"].as_str().unwrap().contains("read-only"), "{}", results[1]);
    let last = BASE + (6 * 60 - 1) * 60_000;
    assert_eq!(
        results[2]["series"],
        json!([{"name": "temp", "columns": ["time", "last"], "values": [[last, (6 * 60 - 1) % 7]]}])
    );
    assert_eq!(results[3]["series"][0]["values"], json!([["bucketd"], ["telegraf"]]));
}

#[tokio::test]
async fn requests_and_errors_have_influxdbs_shapes() {
    let app = app(BucketLimits::default());
    fixture(&app).await;
    let (status, body) = get_json(&app.router, "/query?db=bucketd").await;
    assert_eq!(
        (status, body),
        (StatusCode::BAD_REQUEST, json!({"error": "missing required parameter \"q\""}))
    );

    let (status, body) = q(&app, "SELECT mean(v) FROM temp WHERE\n  site = ").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = body["error"].as_str().unwrap();
    assert!(
        message.starts_with("error parsing query: ") && message.contains("at line 2, char"),
        "{message}"
    );

    let (status, body) =
        get_json(&app.router, &format!("/query?epoch=fortnight&q={}", enc("SHOW DATABASES"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Without epoch, RFC 3339 strings; with it, integers in its unit.
    let select = format!("SELECT first(v) FROM temp WHERE site = 'a' AND {}", range(0, 1));
    let (_, body) = get_json(&app.router, &format!("/query?q={}", enc(&select))).await;
    assert_eq!(body["results"][0]["series"][0]["values"][0][0], "2024-03-01T00:00:00Z");
    let (_, body) = get_json(&app.router, &format!("/query?epoch=s&q={}", enc(&select))).await;
    assert_eq!(body["results"][0]["series"][0]["values"][0][0], BASE / 1000);

    // POST with a form body, as Grafana and Telegraf send it.
    let request = Request::post("/query?db=bucketd&epoch=ms")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Body::from(format!("q={}", enc("SHOW MEASUREMENTS"))))
        .unwrap();
    let response = app.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-influxdb-build"], "OSS");
    let body: Value =
        serde_json::from_slice(&axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap())
            .unwrap();
    assert_eq!(body["results"][0]["series"][0]["values"], json!([["temp"]]));

    // chunked: one line per statement.
    let (status, _, bytes) = get(
        &app.router,
        &format!("/query?chunked=true&q={}", enc("SHOW DATABASES; SHOW MEASUREMENTS")),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let lines: Vec<Value> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["results"][0]["statement_id"], 1);

    // What bucketd cannot answer says so, per statement.
    for (statement, says) in [
        ("SELECT integral(v) FROM temp WHERE time > 0", "unsupported function integral()"),
        ("SELECT derivative(v), mean(v) FROM temp", "only field"),
        ("SELECT mean(v) INTO other FROM temp", "read-only"),
        ("SELECT mean(v) FROM temp GROUP BY time(1h)", "lower bound"),
        ("SELECT v FROM temp tz('Mars/Olympus_Mons')", "unable to find time zone"),
        ("SELECT v, mean(v) FROM temp", "mixing aggregate"),
        ("SHOW USERS", "not supported"),
    ] {
        let (status, body) = q(&app, statement).await;
        assert_eq!(status, StatusCode::OK, "{statement}");
        let error =
            body["results"][0]["error"].as_str().unwrap_or_else(|| panic!("{statement}: {body}"));
        assert!(error.contains(says), "{statement}: {error}");
    }
}

#[tokio::test]
async fn metadata_statements_list_what_was_written() {
    let app = app(BucketLimits::default());
    fixture(&app).await;
    let s = series("power,site=a,phase=1", "power", &[("phase", "1"), ("site", "a")]);
    write(
        &app.store,
        &s,
        &[reading(BASE, vec![("on", FieldValue::Bool(true)), ("w", FieldValue::Int(3))])],
    )
    .await;
    let cases = [
        (
            "SHOW MEASUREMENTS",
            json!([{"name": "measurements", "columns": ["name"], "values": [["power"], ["temp"]]}]),
        ),
        (
            "SHOW MEASUREMENTS WITH MEASUREMENT =~ /^te/",
            json!([{"name": "measurements", "columns": ["name"], "values": [["temp"]]}]),
        ),
        (
            "SHOW MEASUREMENTS WHERE phase = '1'",
            json!([{"name": "measurements", "columns": ["name"], "values": [["power"]]}]),
        ),
        (
            "SHOW TAG KEYS FROM power",
            json!([{"name": "power", "columns": ["tagKey"], "values": [["phase"], ["site"]]}]),
        ),
        (
            "SHOW FIELD KEYS FROM power",
            json!([{"name": "power", "columns": ["fieldKey", "fieldType"], "values": [["on", "boolean"], ["w", "integer"]]}]),
        ),
        (
            "SHOW SERIES WHERE site = 'a'",
            json!([{"columns": ["key"], "values": [["power,phase=1,site=a"], ["temp,site=a"]]}]),
        ),
        (
            "SHOW TAG VALUES WITH KEY IN (\"phase\", \"site\") WHERE site != 'b' LIMIT 2",
            json!([
                {"name": "power", "columns": ["key", "value"], "values": [["phase", "1"], ["site", "a"]]},
                {"name": "temp", "columns": ["key", "value"], "values": [["site", "a"], ["site", "c"]]},
            ]),
        ),
    ];
    for (statement, expected) in cases {
        let (status, body) = q(&app, statement).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body["results"][0]["series"], expected, "{statement}");
    }
}

/// The same comparison on MongoDB (the stand-in, or the server BUCKETD_TEST_MONGODB_URI
/// names): hour groups from its bucket statistics (`$group` over the buckets' `stats`) equal
/// those computed from its readings, through the whole server.
#[tokio::test]
async fn hour_groups_from_mongodb_statistics_equal_those_from_readings() {
    use bucketd::store::{Order, RangeQuery};
    use futures::TryStreamExt;

    use crate::support::mongo_standin::MongoBackend;
    use crate::support::server::{TestServer, within};

    let backend = MongoBackend::start();
    // Small buckets, so that an hour spans several and their statistics are merged.
    let store: Arc<dyn Store> =
        Arc::new(backend.connect(BucketLimits { max_readings: 25, max_bytes: 128_000 }).await);
    let server = TestServer::start(store.clone(), &["--flush-interval", "50ms"]).await;
    let mut lp = String::new();
    for (site, offset) in [("a", 0.0), ("b", 10.0)] {
        for i in 0..3 * 60 {
            let v = offset + (i % 13) as f64 * 0.25;
            lp.push_str(&format!("temp,site={site} v={v},n={}i {}\n", i % 7, BASE + i * 60_000));
        }
    }
    let r = server.post("/write?precision=ms", "text/plain", lp).await;
    assert_eq!(r.status(), 204);
    // Wait until the store holds every reading: the statistics path reads only the store.
    for site in ["a", "b"] {
        let query = RangeQuery {
            sensor: format!("temp,site={site}"),
            from: BASE,
            to: BASE + 3 * HOUR_MS,
            order: Order::Asc,
            limit: None,
        };
        within("flush", 120, async {
            loop {
                let n = store
                    .readings(query.clone())
                    .try_collect::<Vec<_>>()
                    .await
                    .map_or(0, |r| r.len());
                if n == 3 * 60 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        })
        .await;
    }
    let fields = "mean(v), count(v), sum(v), min(v), max(v), spread(v), first(v), last(n)";
    let ask = |q: String| {
        let url = format!("/query?epoch=ms&q={}", enc(&q));
        let server = &server;
        async move { server.get(&url).await.json::<Value>().await.expect("JSON") }
    };
    for group in ["time(1h)", "time(1h), site", "time(10m), site"] {
        let stats =
            ask(format!("SELECT {fields} FROM temp WHERE {} GROUP BY {group}", range(0, 3))).await;
        let readings = ask(format!(
            "SELECT {fields} FROM temp WHERE {} AND v > -1000 GROUP BY {group}",
            range(0, 3)
        ))
        .await;
        assert!(stats["results"][0]["series"].as_array().is_some_and(|s| !s.is_empty()), "{stats}");
        assert_eq!(stats, readings, "{group}");
    }
    let hourly =
        ask(format!("SELECT count(v) FROM temp WHERE {} GROUP BY time(1h)", range(0, 3))).await;
    assert_eq!(
        hourly["results"][0]["series"][0]["values"],
        json!([[BASE, 120], [BASE + HOUR_MS, 120], [BASE + 2 * HOUR_MS, 120]])
    );
    server.shutdown().await;
}

/// With `--retention`, hour groups still answer over hours whose readings are deleted (from
/// the kept hour statistics); what needs those readings answers from the readings kept, as
/// InfluxDB does, with a warning saying where they begin.
#[tokio::test]
async fn hour_groups_outlive_the_readings_retention_deletes() {
    use bucketd::store::Retention;

    let app = app(BucketLimits::default());
    fixture(&app).await;
    let hours = format!(
        "SELECT mean(v), count(v), max(n), first(v) FROM temp WHERE {} GROUP BY time(1h), site",
        range(0, 6)
    );
    let (_, before) = q(&app, &hours).await;
    let now = BASE + 6 * HOUR_MS + HOUR_MS / 2;
    let policy = Retention { raw: Some(std::time::Duration::from_secs(3 * 3600)), rollups: None };
    loop {
        let report = app.store.expire(now, policy, 100).await.expect("retention pass");
        if report.done {
            break;
        }
    }
    let (status, after) = q(&app, &hours).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(after, before, "hour statistics answer for the deleted hours too, with no warning");

    let rfc3339 = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string()
    };
    for statement in [
        "SELECT v FROM temp WHERE {range}",
        "SELECT mean(v) FROM temp WHERE {range} GROUP BY time(10m)",
        "SELECT median(v) FROM temp WHERE {range} GROUP BY time(1h)",
    ] {
        let (status, body) = q(&app, &statement.replace("{range}", &range(0, 6))).await;
        assert_eq!(status, StatusCode::OK);
        let result = &body["results"][0];
        assert_eq!(result["messages"][0]["level"], "warning", "{statement}: {body}");
        let text = result["messages"][0]["text"].as_str().unwrap();
        assert!(text.contains("deleted by the retention of 3h"), "{statement}: {text}");
        let kept = (1..6)
            .find(|&h| text.contains(&rfc3339(BASE + h * HOUR_MS)))
            .unwrap_or_else(|| panic!("{statement}: the warning names an hour: {text}"));
        // Exactly what the same statement answers over the hours kept, after empty windows
        // for the deleted ones.
        let (_, only_kept) = q(&app, &statement.replace("{range}", &range(kept, 6))).await;
        assert!(only_kept["results"][0]["messages"].is_null(), "{statement}: {only_kept}");
        let rows = result["series"][0]["values"].as_array().unwrap();
        let cut = rows.iter().position(|r| r[0].as_i64() >= Some(BASE + kept * HOUR_MS));
        let (deleted, kept_rows) = rows.split_at(cut.unwrap_or(rows.len()));
        assert!(deleted.iter().all(|r| r[1].is_null()), "{statement}: {deleted:?}");
        assert_eq!(kept_rows, only_kept["results"][0]["series"][0]["values"].as_array().unwrap());
        assert!(!kept_rows.is_empty(), "{statement}");
    }
    // Field types are probed from what is kept, with no warning: the answer is not cut.
    let (_, body) = q(&app, "SHOW FIELD KEYS FROM temp").await;
    let result = &body["results"][0];
    assert!(result["error"].is_null() && result["messages"].is_null(), "{body}");
    assert_eq!(result["series"][0]["values"], json!([["n", "integer"], ["v", "float"]]));
    // The live hours still read their readings.
    let (_, body) = q(&app, &format!("SELECT count(v) FROM temp WHERE {}", range(5, 6))).await;
    assert_eq!(body["results"][0]["series"][0]["values"][0][1], 3 * 60);
}

/// Streams the store's readings, then never ends: a statement reading it can only stop at its
/// time budget.
struct Stalling(Arc<MemoryStore>);

#[async_trait]
impl Store for Stalling {
    fn name(&self) -> &'static str {
        "stalling"
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.0.ping().await
    }
    async fn write(&self, w: WriterId, b: &[Batch]) -> Vec<Result<WriteReport, StoreError>> {
        self.0.write(w, b).await
    }
    async fn high_water(
        &self,
        w: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        self.0.high_water(w, keys).await
    }
    fn readings(&self, query: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>> {
        self.0.readings(query).chain(futures::stream::pending()).boxed()
    }
    async fn rollups(&self, query: RollupQuery) -> Result<Vec<RollupRow>, StoreError> {
        self.0.rollups(query).await
    }
    async fn sensors(&self, query: SensorQuery) -> Result<Vec<SensorInfo>, StoreError> {
        self.0.sensors(query).await
    }
}

#[tokio::test]
async fn a_statement_past_its_time_budget_fails_alone_and_the_next_one_runs() {
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    let unflushed = Arc::new(FakeUnflushed::default());
    let state = bucketd::query::QueryState {
        store: Arc::new(Stalling(store.clone())),
        unflushed: unflushed.clone(),
        limits: bucketd::query::QueryLimits {
            statement_time: std::time::Duration::from_millis(200),
            ..Default::default()
        },
        databases: Default::default(),
        database: Default::default(),
        listings: Default::default(),
    };
    let app = App { store, unflushed, router: bucketd::query::router(state) };
    fixture(&app).await;
    let stalls =
        format!("SELECT mean(v) FROM temp WHERE {} AND v > -1000 GROUP BY time(1h)", range(0, 6));
    // Bounded here too, so that a missing budget fails the test instead of hanging it.
    let both = format!("{stalls}; SHOW MEASUREMENTS");
    let asked = q(&app, &both);
    let (status, body) = tokio::time::timeout(std::time::Duration::from_secs(60), asked)
        .await
        .expect("the statement's budget ended it");
    assert_eq!(status, StatusCode::OK, "{body}");
    let error = body["results"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("time budget of 200ms (--query-timeout)"), "{body}");
    assert_eq!(body["results"][1]["series"][0]["values"], json!([["temp"]]), "{body}");
}

/// A median, stddev or percentile holds its values until its window is answered: a group is
/// read in slices of whole windows, so a statement whose values outnumber the limit answers
/// as long as each window fits it, and equals the answer read in one pass. Site `d` writes
/// every 5 s in the fifth hour, so a slice grown over the sparse hours has to be read again
/// in fewer windows when it reaches the dense one. Under the smaller limit the first series
/// alone is too many; under the larger one it fits, and the group is sliced because its
/// first series say the others will not.
#[tokio::test]
async fn kept_values_are_bounded_per_window_not_per_statement() {
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    let unflushed = Arc::new(FakeUnflushed::default());
    let with = |max_held| bucketd::query::QueryState {
        store: store.clone(),
        unflushed: unflushed.clone(),
        limits: bucketd::query::QueryLimits { max_held, ..Default::default() },
        databases: Default::default(),
        database: Default::default(),
        listings: Default::default(),
    };
    let whole = App {
        store: store.clone(),
        unflushed: unflushed.clone(),
        router: bucketd::query::router(with(1_000_000)),
    };
    let small = App {
        store: store.clone(),
        unflushed: unflushed.clone(),
        router: bucketd::query::router(with(200)),
    };
    let medium = App {
        store: store.clone(),
        unflushed: unflushed.clone(),
        router: bucketd::query::router(with(400)),
    };
    fixture(&whole).await;
    let d = series("temp,site=d", "temp", &[("site", "d")]);
    let dense: Vec<Reading> = (0..720)
        .map(|i| {
            reading(BASE + 4 * HOUR_MS + i * 5_000, vec![("v", FieldValue::Float((i % 9) as f64))])
        })
        .collect();
    write(&store, &d, &dense).await;

    for tail in [
        "GROUP BY time(5m)",
        "GROUP BY time(5m), site",
        "GROUP BY time(5m, 2m) fill(linear)",
        "GROUP BY time(5m) fill(previous) ORDER BY time DESC",
    ] {
        let statement =
            format!("SELECT median(v), stddev(v) FROM temp WHERE {} {tail}", range(0, 6));
        let (s1, a) = q(&whole, &statement).await;
        let (s2, b) = q(&small, &statement).await;
        let (s3, c) = q(&medium, &statement).await;
        assert_eq!((s1, s2, s3), (StatusCode::OK, StatusCode::OK, StatusCode::OK), "{tail}");
        assert!(a["results"][0]["series"].as_array().is_some_and(|s| !s.is_empty()), "{a}");
        assert_eq!(a, b, "{tail}");
        assert_eq!(a, c, "{tail}");
    }
    // Medians alone come from the store's step values, read a slice's series at a time when
    // sliced, and with an unflushed reading among them answer as the readings do.
    let a = series("temp,site=a", "temp", &[("site", "a")]);
    unflushed.push(&a, reading(BASE + 4 * HOUR_MS + 7, vec![("v", FieldValue::Float(100.0))]));
    let median = |extra: &str| {
        format!("SELECT median(v) FROM temp WHERE {}{extra} GROUP BY time(5m)", range(0, 6))
    };
    let (_, by_readings) = q(&whole, &median(" AND v > -1000")).await;
    assert!(by_readings["results"][0]["series"].as_array().is_some_and(|s| !s.is_empty()));
    assert_eq!(q(&whole, &median("")).await.1, by_readings);
    assert_eq!(q(&small, &median("")).await.1, by_readings);
    assert_eq!(q(&medium, &median("")).await.1, by_readings);
    let statement =
        format!("SELECT percentile(v, 90) FROM temp WHERE {} GROUP BY time(5m)", range(0, 6));
    assert_eq!(q(&whole, &statement).await, q(&small, &statement).await);
    // A single window past the limit is refused, with the limit named.
    let statement = format!("SELECT median(v) FROM temp WHERE {} GROUP BY time(1h)", range(0, 6));
    let (status, body) = q(&small, &statement).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let error = body["results"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("more than 200 readings at once"), "{body}");
}

#[tokio::test]
async fn a_statement_past_its_window_budget_fails_with_a_clear_error() {
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    let unflushed = Arc::new(FakeUnflushed::default());
    let state = bucketd::query::QueryState {
        store: store.clone(),
        unflushed: unflushed.clone(),
        limits: bucketd::query::QueryLimits { max_cells: 100, ..Default::default() },
        databases: Default::default(),
        database: Default::default(),
        listings: Default::default(),
    };
    let app = App { store, unflushed, router: bucketd::query::router(state) };
    fixture(&app).await;
    // Six hours of one reading a minute per site: 360 windows a site at one minute.
    let (status, body) =
        q(&app, &format!("SELECT mean(v) FROM temp WHERE {} GROUP BY time(1m)", range(0, 6))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let error = body["results"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("more than 100 windows of its functions"), "{body}");
    // Hours fit, from the statistics and from the readings alike.
    for condition in ["", " AND v > -1000"] {
        let statement = format!(
            "SELECT mean(v) FROM temp WHERE {}{condition} GROUP BY time(1h), site",
            range(0, 6)
        );
        let (status, body) = q(&app, &statement).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body["results"][0]["series"].as_array().is_some_and(|s| s.len() == 3), "{body}");
    }
}

/// The series listing a statement made is kept for the next ones (on a store that tells when
/// its series change), and a series stored after it, with nothing of it left unflushed, is
/// listed by the next statement all the same.
#[tokio::test]
async fn a_series_stored_after_a_statement_is_listed_by_the_next() {
    async fn store_one(store: &dyn Store, host: &str, ts: TimestampMs) {
        let meta = series(&format!("cpu,host={host}"), "cpu", &[("host", host)]);
        let s = bucketd::model::Series::shared(meta);
        let one = [reading(ts, vec![("v", FieldValue::Float(1.0))])];
        for result in
            store.write(WriterId(1), &bucketd_test_support::store::batches(&s, &one)).await
        {
            result.expect("embedded store write");
        }
    }
    async fn hosts(router: &axum::Router) -> Vec<String> {
        let q =
            r#"SELECT count("v") FROM "cpu" WHERE "host" = 'b' OR "host" = 'a' GROUP BY "host""#;
        let (status, body) = get_json(router, &format!("/query?q={}", enc(q))).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let series = body["results"][0]["series"].as_array().cloned().unwrap_or_default();
        series.iter().map(|s| s["tags"]["host"].as_str().unwrap().to_owned()).collect()
    }
    async fn shown(router: &axum::Router) -> Value {
        let (_, body) = get_json(router, &format!("/query?q={}", enc("SHOW SERIES"))).await;
        body["results"][0]["series"][0]["values"].clone()
    }
    let dir = tempfile::tempdir().unwrap();
    let embedded =
        bucketd::store::embedded::EmbeddedStore::open(dir.path(), BucketLimits::default())
            .expect("open the embedded store");
    let embedded: Arc<dyn Store> = Arc::new(embedded);
    let unflushed = Arc::new(FakeUnflushed::default());
    let memory = Arc::new(MemoryStore::new(BucketLimits::default()));
    let app = app_with(memory, embedded.clone(), unflushed);
    store_one(&*embedded, "a", 1_000).await;
    assert_eq!(hosts(&app.router).await, ["a"]);
    assert_eq!(shown(&app.router).await, json!([["cpu,host=a"]]));
    // Asked again, with no series created: the same answer from the listing kept.
    assert_eq!(hosts(&app.router).await, ["a"]);
    store_one(&*embedded, "b", 2_000).await;
    assert_eq!(hosts(&app.router).await, ["a", "b"]);
    assert_eq!(shown(&app.router).await, json!([["cpu,host=a"], ["cpu,host=b"]]));
    // Readings of a known series only.
    store_one(&*embedded, "a", 3_000).await;
    assert_eq!(hosts(&app.router).await, ["a", "b"]);
}
