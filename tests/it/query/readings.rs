//! `GET /api/v1/readings` through the query router, in process: paging, formats, merging of
//! unflushed readings, streaming, and store failures.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use bucketd::model::{Batch, FieldValue, HOUR_MS, Reading, SeriesMeta, WriterId};
use bucketd::store::memory::MemoryStore;
use bucketd::store::{
    BucketLimits, RangeQuery, RollupQuery, RollupRow, SensorInfo, SensorQuery, Store, StoreError,
    WriteReport,
};
use chrono::DateTime;
use futures::stream::{self, BoxStream, StreamExt};
use http_body_util::BodyExt;
use tower::ServiceExt;

use crate::support::query::{
    App, FakeUnflushed, app, app_with, enc, get, get_json, reading, series, write,
};

const BASE: i64 = 1_699_999_200_000; // 2023-11-14T22:00:00Z, an hour boundary
const AGAIN_TS: i64 = BASE + HOUR_MS + 7;

fn small_buckets() -> BucketLimits {
    BucketLimits { max_readings: 7, max_bytes: 1 << 20 }
}

fn id_reading(ts: i64, id: i64) -> Reading {
    reading(ts, vec![("id", FieldValue::Int(id)), ("v", FieldValue::Float(id as f64 * 0.5))])
}

/// A sensor with readings across three hours in spilled buckets, one point written 25 times
/// into the store and 3 more times into the buffers, points both stored and unflushed, and
/// unflushed readings interleaved elsewhere. Returns the app, each returned id's time, and the
/// ids in the order an ascending query must return them: one per point, its last write's.
async fn fixture() -> (App, SeriesMeta, HashMap<i64, i64>, Vec<i64>) {
    let app = app(small_buckets());
    let s = series("temp,site=a", "temp", &[("site", "a")]);
    let mut stored = Vec::new();
    for i in 0..60 {
        stored.push(id_reading(BASE + i * 180_000, i));
    }
    for i in 0..25 {
        stored.push(id_reading(AGAIN_TS, 100 + i));
    }
    // Exactly on an hour boundary, written in two calls.
    stored.push(id_reading(BASE + 2 * HOUR_MS, 200));
    write(&app.store, &s, &stored[..stored.len() - 1]).await;
    write(&app.store, &s, &stored[stored.len() - 1..]).await;
    assert!(app.store.bucket_count(s.key(), BASE + HOUR_MS) > 1, "the fixture spills buckets");

    let unflushed = vec![
        id_reading(BASE, 1000),          // the first stored point, written again
        id_reading(BASE + 90_000, 1001), // between two stored readings
        id_reading(AGAIN_TS, 1002),      // the point written 25 times, three more
        id_reading(AGAIN_TS, 1003),
        id_reading(BASE + 2 * HOUR_MS, 1004),
        id_reading(AGAIN_TS, 1005),
        id_reading(BASE + 3 * HOUR_MS - 1, 1006), // the last millisecond of the range
    ];
    for r in &unflushed {
        app.unflushed.push(&s, r.clone());
    }
    // The buffers' readings came after the store's: theirs win.
    let mut points: Vec<Reading> = stored.iter().chain(&unflushed).cloned().collect();
    bucketd::model::fold_points(&mut points);
    points.sort_by_key(|r| r.ts);
    // 60 stored times, the repeated one, and two times only the buffers hold.
    assert_eq!(points.len(), 60 + 1 + 2);
    let ts_of = points.iter().map(|r| (field_id(r), r.ts)).collect();
    (app, s, ts_of, points.iter().map(field_id).collect())
}

fn field_id(r: &Reading) -> i64 {
    match r.fields[0] {
        (_, FieldValue::Int(id)) => id,
        _ => unreachable!(),
    }
}

fn parse_t(t: &str) -> i64 {
    assert!(t.ends_with('Z') && t.len() == 24, "{t} is RFC 3339 with millis and Z");
    DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis()
}

/// One page: the ids and times it holds and its next cursor.
async fn fetch_page(app: &App, uri: &str, format: &str) -> (Vec<(i64, i64)>, Option<String>) {
    let (status, headers, body) = get(&app.router, uri).await;
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(status, StatusCode::OK, "{uri}: {text}");
    match format {
        "json" => {
            assert_eq!(headers["content-type"], "application/json");
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let rows = v["readings"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| (r["fields"]["id"].as_i64().unwrap(), parse_t(r["t"].as_str().unwrap())))
                .collect();
            (rows, v["next_cursor"].as_str().map(str::to_owned))
        }
        "ndjson" => {
            assert_eq!(headers["content-type"], "application/x-ndjson");
            assert!(text.is_empty() || text.ends_with('\n'));
            let mut lines: Vec<serde_json::Value> =
                text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
            let cursor = match lines.last() {
                Some(last) if last.get("next_cursor").is_some() => {
                    let c = last["next_cursor"].as_str().unwrap().to_owned();
                    lines.pop();
                    Some(c)
                }
                _ => None,
            };
            let rows = lines
                .iter()
                .map(|r| (r["fields"]["id"].as_i64().unwrap(), parse_t(r["t"].as_str().unwrap())))
                .collect();
            (rows, cursor)
        }
        "csv" => {
            assert_eq!(headers["content-type"], "text/csv; charset=utf-8");
            let mut reader = csv::Reader::from_reader(text.as_bytes());
            let header = reader.headers().unwrap().clone();
            let rows: Vec<(i64, i64)> = reader
                .records()
                .map(|rec| {
                    let rec = rec.unwrap();
                    (rec[1].parse().unwrap(), parse_t(&rec[0]))
                })
                .collect();
            if !rows.is_empty() {
                assert_eq!(header.iter().collect::<Vec<_>>(), ["t", "id", "v"]);
            }
            let cursor = headers.get("x-next-cursor").map(|h| h.to_str().unwrap().to_owned());
            (rows, cursor)
        }
        _ => unreachable!(),
    }
}

/// Follows cursors from the first page to the last, checking every page's size.
async fn page_all(app: &App, base_uri: &str, limit: usize, format: &str) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let uri = match &cursor {
            Some(c) => format!("{base_uri}&limit={limit}&format={format}&cursor={c}"),
            None => format!("{base_uri}&limit={limit}&format={format}"),
        };
        let (rows, next) = fetch_page(app, &uri, format).await;
        pages += 1;
        assert!(rows.len() <= limit);
        ids.extend(rows.iter().map(|r| r.0));
        match next {
            Some(c) => {
                assert_eq!(rows.len(), limit, "only a full page has a cursor");
                cursor = Some(c);
            }
            None => break,
        }
        assert!(pages < 10_000, "paging does not terminate");
    }
    ids
}

#[tokio::test]
async fn paging_covers_the_whole_range_in_both_orders_without_gaps_or_duplicates() {
    let (app, s, ts_of, asc) = fixture().await;
    let range = format!(
        "/api/v1/readings?sensor={}&from={BASE}&to={}",
        enc(s.key()),
        enc("2023-11-15T01:00:00Z")
    );
    for limit in [1, 3, 7, 10, 1000] {
        for format in ["json", "ndjson", "csv"] {
            let got = page_all(&app, &format!("{range}&order=asc"), limit, format).await;
            assert_eq!(got, asc, "asc, limit {limit}, {format}");
            let got = page_all(&app, &format!("{range}&order=desc"), limit, format).await;
            let desc: Vec<i64> = asc.iter().rev().copied().collect();
            assert_eq!(got, desc, "desc, limit {limit}, {format}");
        }
    }
    // Times come back as written.
    let (rows, _) = fetch_page(&app, &format!("{range}&limit=1000&format=json"), "json").await;
    assert!(rows.iter().all(|(id, t)| ts_of[id] == *t));
}

#[tokio::test]
async fn a_flush_between_pages_neither_repeats_nor_skips_a_point() {
    for order in ["asc", "desc"] {
        let (app, s, _, asc) = fixture().await;
        let want: Vec<i64> = if order == "asc" { asc } else { asc.into_iter().rev().collect() };
        let base = format!(
            "/api/v1/readings?sensor={}&from={BASE}&to={}&order={order}&limit=4",
            enc(s.key()),
            BASE + 3 * HOUR_MS
        );
        let mut ids = Vec::new();
        let mut cursor: Option<String> = None;
        let mut page = 0;
        loop {
            let uri = match &cursor {
                Some(c) => format!("{base}&cursor={c}"),
                None => base.clone(),
            };
            let (rows, next) = fetch_page(&app, &uri, "json").await;
            ids.extend(rows.iter().map(|r| r.0));
            page += 1;
            // Once the pages are near the point written many times, the buffers flush into
            // the store.
            if ids.contains(&19) && app.unflushed.pending(s.key()) > 0 {
                let flushed = app.unflushed.take(s.key());
                write(&app.store, &s, &flushed).await;
            }
            match next {
                Some(c) => cursor = Some(c),
                None => break,
            }
            assert!(page < 1000);
        }
        assert_eq!(ids, want, "{order}");
    }
}

#[tokio::test]
async fn json_keeps_value_types_and_formats_times() {
    let app = app(BucketLimits::default());
    let s = series("dev1", "dev1", &[]);
    write(
        &app.store,
        &s,
        &[reading(
            BASE + 1,
            vec![
                ("f", FieldValue::Float(21.5)),
                ("whole", FieldValue::Float(2.0)),
                ("i", FieldValue::Int(-7)),
                ("big", FieldValue::UInt(u64::MAX)),
                ("ok", FieldValue::Bool(false)),
                ("msg", FieldValue::Str("a, \"b\"\nc".into())),
            ],
        )],
    )
    .await;
    let (status, v) = get_json(
        &app.router,
        &format!("/api/v1/readings?sensor=dev1&from={BASE}&to={}", BASE + HOUR_MS),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        v,
        serde_json::json!({
            "sensor": "dev1",
            "readings": [{
                "t": "2023-11-14T22:00:00.001Z",
                "fields": {"f": 21.5, "whole": 2.0, "i": -7, "big": u64::MAX, "ok": false, "msg": "a, \"b\"\nc"}
            }],
            "next_cursor": null
        })
    );
    // u64::MAX survives as an integer, not through f64.
    let (_, _, body) = get(
        &app.router,
        &format!("/api/v1/readings?sensor=dev1&from={BASE}&to={}", BASE + HOUR_MS),
    )
    .await;
    assert!(String::from_utf8_lossy(&body).contains("\"big\":18446744073709551615"));
}

#[tokio::test]
async fn csv_columns_are_the_union_of_fields_and_values_are_escaped() {
    let app = app(BucketLimits::default());
    let s = series("dev1", "dev1", &[]);
    write(
        &app.store,
        &s,
        &[
            reading(
                BASE,
                vec![("a", FieldValue::Int(1)), ("msg", FieldValue::Str("x,\"y\"".into()))],
            ),
            reading(BASE + 1, vec![("b", FieldValue::Bool(true))]),
            reading(
                BASE + 2,
                vec![("msg", FieldValue::Str("two\nlines".into())), ("a", FieldValue::Float(0.25))],
            ),
        ],
    )
    .await;
    let (status, _, body) = get(
        &app.router,
        &format!("/api/v1/readings?sensor=dev1&from={BASE}&to={}&format=csv", BASE + HOUR_MS),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut reader = csv::Reader::from_reader(&body[..]);
    assert_eq!(reader.headers().unwrap().iter().collect::<Vec<_>>(), ["t", "a", "msg", "b"]);
    let rows: Vec<Vec<String>> =
        reader.records().map(|r| r.unwrap().iter().map(str::to_owned).collect()).collect();
    assert_eq!(
        rows,
        [
            ["2023-11-14T22:00:00.000Z", "1", "x,\"y\"", ""],
            ["2023-11-14T22:00:00.001Z", "", "", "true"],
            ["2023-11-14T22:00:00.002Z", "0.25", "two\nlines", ""],
        ]
    );
}

#[tokio::test]
async fn ndjson_ends_with_a_cursor_line_only_when_more_follow() {
    let app = app(BucketLimits::default());
    let s = series("dev1", "dev1", &[]);
    write(&app.store, &s, &(0..3).map(|i| id_reading(BASE + i, i)).collect::<Vec<_>>()).await;
    let uri =
        format!("/api/v1/readings?sensor=dev1&from={BASE}&to={}&format=ndjson", BASE + HOUR_MS);
    let (_, _, body) = get(&app.router, &format!("{uri}&limit=2")).await;
    let lines: Vec<serde_json::Value> = std::str::from_utf8(&body)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["t"], "2023-11-14T22:00:00.000Z");
    assert!(lines[2]["next_cursor"].is_string());
    let (_, _, body) = get(&app.router, &format!("{uri}&limit=3")).await;
    assert_eq!(std::str::from_utf8(&body).unwrap().lines().count(), 3);
    assert!(!std::str::from_utf8(&body).unwrap().contains("next_cursor"));
}

#[tokio::test]
async fn the_range_is_half_open_and_times_parse_either_way() {
    let app = app(BucketLimits::default());
    let s = series("dev1", "dev1", &[]);
    write(&app.store, &s, &[id_reading(BASE, 1), id_reading(BASE + 1000, 2)]).await;
    let ids = |v: serde_json::Value| -> Vec<i64> {
        v["readings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["fields"]["id"].as_i64().unwrap())
            .collect()
    };
    let (_, v) = get_json(
        &app.router,
        &format!("/api/v1/readings?sensor=dev1&from={BASE}&to={}", BASE + 1000),
    )
    .await;
    assert_eq!(ids(v), [1]);
    let (_, v) = get_json(
        &app.router,
        &format!(
            "/api/v1/readings?sensor=dev1&from={}&to={}",
            enc("2023-11-14T23:00:00.001+01:00"),
            enc("2023-11-14T22:00:01.001Z")
        ),
    )
    .await;
    assert_eq!(ids(v), [2]);
}

#[tokio::test]
async fn defaults_cover_the_last_hour() {
    let app = app(BucketLimits::default());
    let s = series("dev1", "dev1", &[]);
    let now = chrono::Utc::now().timestamp_millis();
    write(&app.store, &s, &[id_reading(now - 2 * HOUR_MS, 1), id_reading(now - HOUR_MS / 2, 2)])
        .await;
    let (status, v) = get_json(&app.router, "/api/v1/readings?sensor=dev1").await;
    assert_eq!(status, StatusCode::OK);
    let readings = v["readings"].as_array().unwrap();
    assert_eq!(readings.len(), 1);
    assert_eq!(readings[0]["fields"]["id"], 2);
}

#[tokio::test]
async fn unflushed_readings_alone_make_a_sensor_known() {
    let app = app(BucketLimits::default());
    let s = series("fresh", "fresh", &[]);
    app.unflushed.push(&s, id_reading(BASE + 5, 2));
    app.unflushed.push(&s, id_reading(BASE + 1, 1));
    let (status, v) = get_json(
        &app.router,
        &format!("/api/v1/readings?sensor=fresh&from={BASE}&to={}&order=desc", BASE + 10),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<i64> = v["readings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["fields"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [2, 1]);
    // A known sensor's empty range is an empty page, not a 404.
    let (status, v) =
        get_json(&app.router, &format!("/api/v1/readings?sensor=fresh&from=0&to={BASE}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["readings"], serde_json::json!([]));
    let (status, v) = get_json(&app.router, "/api/v1/readings?sensor=nobody&from=0&to=10").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(v["error"].as_str().unwrap().contains("nobody"));
}

#[tokio::test]
async fn cursors_are_bound_to_their_sensor_order_and_range() {
    let (app, s, _, _) = fixture().await;
    let other = series("other", "other", &[]);
    write(&app.store, &other, &[id_reading(BASE, 1)]).await;
    let base = format!(
        "/api/v1/readings?sensor={}&from={BASE}&to={}&limit=2",
        enc(s.key()),
        BASE + 3 * HOUR_MS
    );
    let (_, v) = get_json(&app.router, &base).await;
    let c = v["next_cursor"].as_str().unwrap().to_owned();
    // The cursor alone (no from/to/order) continues the same query.
    let (status, v2) = get_json(
        &app.router,
        &format!("/api/v1/readings?sensor={}&limit=2&cursor={c}", enc(s.key())),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, v3) = get_json(&app.router, &format!("{base}&cursor={c}")).await;
    assert_eq!(v2, v3);
    for bad in [
        format!("/api/v1/readings?sensor=other&cursor={c}"),
        format!("{base}&order=desc&cursor={c}"),
        format!("/api/v1/readings?sensor={}&from={}&cursor={c}", enc(s.key()), BASE + 1),
        format!("{base}&cursor=not-a-cursor"),
        format!("{base}&cursor={}", &c[..c.len() - 2]),
    ] {
        let (status, v) = get_json(&app.router, &bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(v["error"].as_str().unwrap().starts_with("bad cursor"), "{bad}: {v}");
    }
}

#[tokio::test]
async fn store_down_is_503_with_a_json_body() {
    let (app, s, _, _) = fixture().await;
    app.store.set_unavailable(true);
    for format in ["json", "ndjson", "csv"] {
        let (status, headers, body) = get(
            &app.router,
            &format!(
                "/api/v1/readings?sensor={}&from={BASE}&to={}&format={format}",
                enc(s.key()),
                BASE + HOUR_MS
            ),
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers["retry-after"], "1");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v, serde_json::json!({"error": "store unavailable"}));
    }
}

/// A store whose readings stream yields `ready` readings, then whatever `tail` says.
struct ScriptedStore {
    ready: usize,
    tail: Tail,
}

#[derive(Clone, Copy)]
enum Tail {
    /// Never yields again: a store still working on the rest.
    Stall,
    /// Fails: a store that went away mid-stream.
    Fail,
    /// Ends: every reading was delivered.
    End,
}

#[async_trait]
impl Store for ScriptedStore {
    fn name(&self) -> &'static str {
        "scripted"
    }
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
    async fn write(
        &self,
        _writer: WriterId,
        batches: &[Batch],
    ) -> Vec<Result<WriteReport, StoreError>> {
        batches.iter().map(|_| Err(StoreError::Rejected("read-only".into()))).collect()
    }
    async fn high_water(
        &self,
        _writer: WriterId,
        keys: &[(String, i64)],
    ) -> Result<Vec<u64>, StoreError> {
        Ok(vec![0; keys.len()])
    }
    fn readings(&self, q: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>> {
        let head = stream::iter((0..self.ready as i64).map(move |i| Ok(id_reading(q.from + i, i))));
        match self.tail {
            Tail::Stall => head.chain(stream::pending()).boxed(),
            Tail::Fail => head
                .chain(stream::once(async { Err(StoreError::Unavailable("gone".into())) }))
                .boxed(),
            Tail::End => head.boxed(),
        }
    }
    async fn rollups(&self, _: RollupQuery) -> Result<Vec<RollupRow>, StoreError> {
        Ok(Vec::new())
    }
    async fn sensors(&self, _: SensorQuery) -> Result<Vec<SensorInfo>, StoreError> {
        Ok(Vec::new())
    }
}

fn scripted_app(ready: usize, tail: Tail) -> App {
    let store = Arc::new(MemoryStore::new(BucketLimits::default()));
    app_with(store, Arc::new(ScriptedStore { ready, tail }), Arc::new(FakeUnflushed::default()))
}

/// The handler does not collect the page: with a store that stalls after 10 readings, the
/// headers and the first readings still reach the client, and the body stays open.
#[tokio::test]
async fn responses_stream_before_the_store_finishes() {
    for format in ["json", "ndjson"] {
        let app = scripted_app(10, Tail::Stall);
        let uri = format!(
            "/api/v1/readings?sensor=s&from={BASE}&to={}&limit=100000&format={format}",
            BASE + HOUR_MS
        );
        let response = tokio::time::timeout(
            Duration::from_secs(10),
            app.router.clone().oneshot(Request::get(uri).body(Body::empty()).unwrap()),
        )
        .await
        .expect("headers arrive while the store is still streaming")
        .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let mut received = Vec::new();
        while String::from_utf8_lossy(&received).matches("\"t\":").count() < 10 {
            let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
                .await
                .expect("the first readings arrive while the store is still streaming")
                .unwrap()
                .unwrap();
            received.extend(frame.into_data().unwrap());
        }
        let text = String::from_utf8(received).unwrap();
        if format == "json" {
            assert!(
                text.starts_with(
                    "{\"sensor\":\"s\",\"readings\":[{\"t\":\"2023-11-14T22:00:00.000Z\""
                ),
                "{text}"
            );
        } else {
            assert_eq!(text.lines().count(), 10);
        }
        // Nothing more is ready, and the body has not ended.
        assert!(tokio::time::timeout(Duration::from_millis(200), body.frame()).await.is_err());
    }
}

/// A large page goes out in several bounded chunks rather than one body-sized buffer.
#[tokio::test]
async fn a_full_page_is_sent_in_bounded_chunks() {
    let app = scripted_app(100_000, Tail::End);
    let uri = format!("/api/v1/readings?sensor=s&from={BASE}&to={}&limit=100000", BASE + HOUR_MS);
    let response =
        app.router.clone().oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
    let mut body = response.into_body();
    let mut chunks = 0;
    let mut total = Vec::new();
    while let Some(frame) = body.frame().await {
        let data = frame.unwrap().into_data().unwrap();
        assert!(data.len() <= 64 * 1024 + 1024, "chunk of {} bytes", data.len());
        total.extend(data);
        chunks += 1;
    }
    let v: serde_json::Value = serde_json::from_slice(&total).unwrap();
    assert_eq!(v["readings"].as_array().unwrap().len(), 100_000);
    assert!(chunks > 10, "{chunks} chunks for {} bytes", total.len());
}

#[tokio::test]
async fn a_store_failure_mid_stream_breaks_the_body_off() {
    let app = scripted_app(5, Tail::Fail);
    let uri = format!("/api/v1/readings?sensor=s&from={BASE}&to={}", BASE + HOUR_MS);
    let response =
        app.router.clone().oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(axum::body::to_bytes(response.into_body(), usize::MAX).await.is_err());
    // Failing before the first reading is still a clean 503.
    let app = scripted_app(0, Tail::Fail);
    let (status, v) = get_json(
        &app.router,
        &format!("/api/v1/readings?sensor=s&from={BASE}&to={}", BASE + HOUR_MS),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["error"], "store unavailable");
}

#[tokio::test]
async fn the_largest_page_is_accepted_and_one_more_is_refused() {
    let app = app(BucketLimits::default());
    let s = series("big", "big", &[]);
    let readings: Vec<Reading> = (0..100_001).map(|i| id_reading(BASE + i, i)).collect();
    write(&app.store, &s, &readings).await;
    let range = format!("/api/v1/readings?sensor=big&from={BASE}&to={}", BASE + HOUR_MS);
    let (status, v) = get_json(&app.router, &format!("{range}&limit=100000")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["readings"].as_array().unwrap().len(), 100_000);
    let (status, v) = get_json(
        &app.router,
        &format!("{range}&limit=100000&cursor={}", v["next_cursor"].as_str().unwrap()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["readings"][0]["fields"]["id"], 100_000);
    assert_eq!(v["next_cursor"], serde_json::Value::Null);
    let (status, _) = get_json(&app.router, &format!("{range}&limit=100001")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // The default page is 1,000.
    let (_, v) = get_json(&app.router, &range).await;
    assert_eq!(v["readings"].as_array().unwrap().len(), 1000);
}
