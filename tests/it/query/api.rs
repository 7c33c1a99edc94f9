//! Rollups, sensors, parameter errors and the OpenAPI document, through the query router.

use std::collections::BTreeMap;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use bucketd::model::{FieldValue, HOUR_MS, Reading};
use bucketd::store::BucketLimits;
use chrono::DateTime;
use tower::ServiceExt;

use crate::support::query::{App, app, enc, get, get_json, reading, series, write};

const BASE: i64 = 1_699_999_200_000; // 2023-11-14T22:00:00Z, an hour boundary

fn parse_t(t: &str) -> i64 {
    DateTime::parse_from_rfc3339(t).unwrap().timestamp_millis()
}

fn sample(i: i64) -> Reading {
    reading(
        BASE + i * 100_000,
        vec![
            // Halves: sums are exact in f64 whatever the order of addition.
            ("v", FieldValue::Float((i % 17) as f64 * 0.5 - 3.0)),
            ("n", FieldValue::Int(i)),
            ("label", FieldValue::Str(format!("r{i}"))),
            ("on", FieldValue::Bool(i % 2 == 0)),
        ],
    )
}

/// (count, min, max, sum) per step start and field, computed directly from the readings.
type Expected = BTreeMap<i64, BTreeMap<String, (u64, f64, f64, f64)>>;

fn expected(
    readings: &[Reading],
    from: i64,
    to: i64,
    step: i64,
    only: Option<&[&str]>,
) -> Expected {
    let mut out: Expected = BTreeMap::new();
    for r in readings.iter().filter(|r| r.ts >= from && r.ts < to) {
        for (name, value) in &r.fields {
            let Some(v) = value.as_f64() else { continue };
            if only.is_some_and(|o| !o.contains(&name.as_str())) {
                continue;
            }
            let e = out
                .entry(r.ts.div_euclid(step) * step)
                .or_default()
                .entry(name.to_string())
                .or_insert((0, f64::INFINITY, f64::NEG_INFINITY, 0.0));
            e.0 += 1;
            e.1 = e.1.min(v);
            e.2 = e.2.max(v);
            e.3 += v;
        }
    }
    out
}

/// A rollups answer as step start → field → what `of` reads from that field's statistics.
fn by_step<T>(
    v: &serde_json::Value,
    of: impl Fn(&serde_json::Value) -> T,
) -> BTreeMap<i64, BTreeMap<String, T>> {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let fields = row["fields"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(name, s)| (name.clone(), of(s)))
                .collect();
            (parse_t(row["t"].as_str().unwrap()), fields)
        })
        .collect()
}

fn actual(v: &serde_json::Value) -> Expected {
    by_step(v, |s| {
        let count = s["count"].as_u64().unwrap();
        let sum = s["sum"].as_f64().unwrap();
        assert_eq!(s["mean"].as_f64().unwrap(), sum / count as f64);
        (count, s["min"].as_f64().unwrap(), s["max"].as_f64().unwrap(), sum)
    })
}

/// Each field's (first, last) as (time, value) per step, computed directly from the readings:
/// earliest and latest time; at one time, the smallest value first and the largest last.
type Points = BTreeMap<i64, BTreeMap<String, ((i64, f64), (i64, f64))>>;

fn expected_points(readings: &[Reading], from: i64, to: i64, step: i64) -> Points {
    let mut out: Points = BTreeMap::new();
    for r in readings.iter().filter(|r| r.ts >= from && r.ts < to) {
        for (name, value) in &r.fields {
            let Some(v) = value.as_f64() else { continue };
            let p = (r.ts, v);
            out.entry(r.ts.div_euclid(step) * step)
                .or_default()
                .entry(name.to_string())
                .and_modify(|(first, last)| {
                    if p.0 < first.0 || (p.0 == first.0 && p.1 < first.1) {
                        *first = p;
                    }
                    if p.0 > last.0 || (p.0 == last.0 && p.1 > last.1) {
                        *last = p;
                    }
                })
                .or_insert((p, p));
        }
    }
    out
}

fn actual_points(v: &serde_json::Value) -> Points {
    let point = |p: &serde_json::Value| {
        let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["t", "value"], "{p}");
        (parse_t(p["t"].as_str().unwrap()), p["value"].as_f64().unwrap())
    };
    by_step(v, |s| (point(&s["first"]), point(&s["last"])))
}

/// 108 stored readings over three hours in buckets of 5, plus unflushed readings.
async fn rollup_fixture() -> (App, Vec<Reading>) {
    let app = app(BucketLimits { max_readings: 5, max_bytes: 1 << 20 });
    let s = series("rs", "rs", &[]);
    let stored: Vec<Reading> = (0..108).map(sample).collect();
    write(&app.store, &s, &stored).await;
    assert!(app.store.bucket_count("rs", BASE) > 1);
    let mut all = stored;
    for i in [40, 41, 77, 107] {
        let mut r = sample(i);
        r.ts += 1;
        app.unflushed.push(&s, r.clone());
        all.push(r);
    }
    (app, all)
}

#[tokio::test]
async fn rollups_agree_with_stats_computed_here() {
    let (app, all) = rollup_fixture().await;
    let cases: [(i64, i64, &str, i64); 5] = [
        (BASE, BASE + 3 * HOUR_MS, "1h", HOUR_MS), // from bucket stats
        (BASE, BASE + 3 * HOUR_MS, "15m", 15 * 60_000), // from readings
        (BASE + 600_000, BASE + 2 * HOUR_MS + 300_000, "1h", HOUR_MS), // unaligned range
        (BASE, BASE + 3 * HOUR_MS, "1d", 86_400_000),
        (BASE, BASE + 3 * HOUR_MS, "2h", 2 * HOUR_MS),
    ];
    for (from, to, step, step_ms) in cases {
        let (status, v) = get_json(
            &app.router,
            &format!("/api/v1/rollups?sensor=rs&from={from}&to={to}&step={step}"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{step}: {v}");
        assert_eq!(v["sensor"], "rs");
        assert_eq!(v["step_ms"], step_ms);
        let want = expected(&all, from, to, step_ms, None);
        assert!(!want.is_empty());
        assert_eq!(actual(&v), want, "step {step} from {from} to {to}");
        assert_eq!(
            actual_points(&v),
            expected_points(&all, from, to, step_ms),
            "first/last, step {step} from {from} to {to}"
        );
    }
    // The default step is one hour; `fields` keeps only the named ones.
    let (_, v) = get_json(
        &app.router,
        &format!(
            "/api/v1/rollups?sensor=rs&from={BASE}&to={}&fields=v,missing",
            BASE + 3 * HOUR_MS
        ),
    )
    .await;
    assert_eq!(v["step_ms"], HOUR_MS);
    assert_eq!(actual(&v), expected(&all, BASE, BASE + 3 * HOUR_MS, HOUR_MS, Some(&["v"])));
}

/// After the retention deleted an hour's readings: whole-hour rollups still answer it from its
/// statistics (merged with unflushed readings as before); what needs its readings answers from
/// the readings kept and says where they begin.
#[tokio::test]
async fn expired_hours_answer_whole_hour_rollups_and_the_kept_readings() {
    use bucketd::store::{Retention, Store};
    let (app, all) = rollup_fixture().await;
    let policy = Retention { raw: Some(std::time::Duration::from_secs(3600)), rollups: None };
    let report = app.store.expire(BASE + 2 * HOUR_MS, policy, 100).await.unwrap();
    assert_eq!(report.hours_deleted, 1, "{report:?}");
    let to = BASE + 3 * HOUR_MS;
    let kept = BASE + HOUR_MS;
    let (status, v) =
        get_json(&app.router, &format!("/api/v1/rollups?sensor=rs&from={BASE}&to={to}&step=1h"))
            .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(actual(&v), expected(&all, BASE, to, HOUR_MS, None));
    assert_eq!(actual_points(&v), expected_points(&all, BASE, to, HOUR_MS));
    assert!(v.get("kept_from").is_none(), "{v}");

    let kept_from =
        DateTime::from_timestamp_millis(kept).unwrap().format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
    let (status, v) =
        get_json(&app.router, &format!("/api/v1/rollups?sensor=rs&from={BASE}&to={to}&step=15m"))
            .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["kept_from"], kept_from.as_str(), "{v}");
    assert_eq!(actual(&v), expected(&all, kept, to, 15 * 60_000, None));

    let (status, v) =
        get_json(&app.router, &format!("/api/v1/readings?sensor=rs&from={BASE}&to={to}")).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["kept_from"], kept_from.as_str(), "{v}");
    let (_, live) =
        get_json(&app.router, &format!("/api/v1/readings?sensor=rs&from={kept}&to={to}")).await;
    assert_eq!(v["readings"], live["readings"]);
    assert!(!live["readings"].as_array().unwrap().is_empty());
    assert!(live.get("kept_from").is_none(), "{live}");

    // Every format carries the header; a range wholly in the deleted hour is empty.
    for format in ["ndjson", "csv"] {
        let (status, headers, body) = get(
            &app.router,
            &format!("/api/v1/readings?sensor=rs&from={BASE}&to={}&format={format}", BASE + 60_000),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers["x-kept-from"], kept_from.as_str(), "{format}");
        let rows = String::from_utf8_lossy(&body).lines().count();
        assert_eq!(rows, usize::from(format == "csv"), "{format}: only a CSV header: {body:?}");
    }
}

#[tokio::test]
async fn rollups_of_unknown_and_empty() {
    let (app, _) = rollup_fixture().await;
    let (status, v) = get_json(&app.router, "/api/v1/rollups?sensor=nobody").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");
    let (status, v) = get_json(&app.router, "/api/v1/rollups?sensor=rs&from=0&to=3600000").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["rows"], serde_json::json!([]));
    app.store.set_unavailable(true);
    let (status, v) = get_json(&app.router, "/api/v1/rollups?sensor=rs").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["error"], "store unavailable");
}

/// Found by the OpenAPI fuzz run: an overflowing sum was written as `null` where the document
/// promised a number. `null` stays (JSON has no infinity); the document now says so.
#[tokio::test]
async fn rollups_whose_sum_overflows_give_null_as_documented() {
    let app = app(BucketLimits { max_readings: 5, max_bytes: 1 << 20 });
    let s = series("huge", "huge", &[]);
    let huge: Vec<Reading> =
        (0..2).map(|i| reading(BASE + i, vec![("v", FieldValue::Float(1.7e308))])).collect();
    write(&app.store, &s, &huge).await;
    app.unflushed.push(&s, reading(BASE + 2, vec![("v", FieldValue::Float(1.7e308))]));
    // From bucket statistics (whole hours) and from the readings.
    for (step, to) in [("1h", BASE + HOUR_MS), ("1s", BASE + 1000)] {
        let (status, v) = get_json(
            &app.router,
            &format!("/api/v1/rollups?sensor=huge&from={BASE}&to={to}&step={step}"),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{v}");
        let stats = &v["rows"][0]["fields"]["v"];
        assert_eq!(stats["count"], 3, "{v}");
        assert_eq!(stats["max"], 1.7e308, "{v}");
        assert!(stats["sum"].is_null() && stats["mean"].is_null(), "{v}");
    }

    let (_, _, body) = get(&app.router, "/api/v1/openapi.json").await;
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let props = &doc["components"]["schemas"]["StatsJson"]["properties"];
    for name in ["sum", "mean"] {
        let types = props[name]["type"].as_array().unwrap_or_else(|| panic!("{name}: {props}"));
        assert!(types.contains(&"null".into()) && types.contains(&"number".into()), "{props}");
    }
    // First and last are optional: absent, never null, when unknown.
    let required = &doc["components"]["schemas"]["StatsJson"]["required"];
    for name in ["first", "last"] {
        assert!(props.get(name).is_some(), "{props}");
        assert!(!required.as_array().unwrap().contains(&name.into()), "{required}");
    }
    let point = &doc["components"]["schemas"]["PointJson"];
    assert_eq!(point["required"], serde_json::json!(["t", "value"]), "{point}");
}

async fn sensor_fixture() -> App {
    let app = app(BucketLimits::default());
    let a1 = series("a1", "temp", &[("floor", "1"), ("site", "a")]);
    let a2 = series("a2", "temp", &[("floor", "2"), ("site", "a")]);
    let b1 = series("b1", "hum", &[("site", "b")]);
    let c1 = series("c1", "temp", &[("site", "a")]);
    write(&app.store, &a1, &[reading(BASE + 10, vec![("v", FieldValue::Int(1))])]).await;
    write(&app.store, &a1, &[reading(BASE + 20, vec![("v", FieldValue::Int(1))])]).await;
    write(&app.store, &a2, &[reading(BASE, vec![("v", FieldValue::Int(1))])]).await;
    write(&app.store, &b1, &[reading(BASE, vec![("v", FieldValue::Int(1))])]).await;
    // a1 has newer and older readings still buffered; c1 exists only in the buffers.
    app.unflushed.push(&a1, reading(BASE + HOUR_MS, vec![("v", FieldValue::Int(1))]));
    app.unflushed.push(&a1, reading(BASE + 5, vec![("v", FieldValue::Int(1))]));
    app.unflushed.push(&c1, reading(BASE + 7, vec![("v", FieldValue::Int(1))]));
    app
}

fn keys(v: &serde_json::Value) -> Vec<String> {
    v["sensors"].as_array().unwrap().iter().map(|s| s["key"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn sensors_merge_buffers_and_filter_by_tag_and_measurement() {
    let app = sensor_fixture().await;
    let (status, v) = get_json(&app.router, "/api/v1/sensors").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(keys(&v), ["a1", "a2", "b1", "c1"]);
    assert_eq!(
        v["sensors"][0],
        serde_json::json!({
            "key": "a1",
            "measurement": "temp",
            "tags": {"floor": "1", "site": "a"},
            "first": "2023-11-14T22:00:00.005Z",
            "last": "2023-11-14T23:00:00.000Z",
        })
    );
    assert_eq!(v["sensors"][3]["first"], "2023-11-14T22:00:00.007Z");
    assert_eq!(v["next_cursor"], serde_json::Value::Null);

    for (query, want) in [
        ("tag=site:a", &["a1", "a2", "c1"][..]),
        ("tag=site:a&tag=floor:2", &["a2"]),
        ("measurement=hum", &["b1"]),
        ("measurement=temp&tag=site:b", &[]),
        ("tag=site:a&measurement=temp&tag=floor:1", &["a1"]),
    ] {
        let (status, v) = get_json(&app.router, &format!("/api/v1/sensors?{query}")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(keys(&v), want, "{query}");
    }
}

/// `prefix` keeps the keys that start with it, stored and buffered alike, pages through them
/// with the cursor, and combines with the tag filter.
#[tokio::test]
async fn sensors_search_by_key_prefix() {
    let app = sensor_fixture().await;
    // Keys around the prefix's range: below it, equal to it, inside it, just past it.
    for key in ["a0", "a", "a10", "a1\u{10FFFF}", "aa", "a1x", "a2x", "b"] {
        let s = series(key, "temp", &[("site", "z")]);
        write(&app.store, &s, &[reading(BASE, vec![("v", FieldValue::Int(1))])]).await;
    }
    // Buffered only: merged like the stored ones.
    app.unflushed.push(
        &series("a1b", "temp", &[("site", "z")]),
        reading(BASE, vec![("v", FieldValue::Int(1))]),
    );
    for (query, want) in [
        ("prefix=a1", &["a1", "a10", "a1b", "a1x", "a1\u{10FFFF}"][..]),
        ("prefix=a", &["a", "a0", "a1", "a10", "a1b", "a1x", "a1\u{10FFFF}", "a2", "a2x", "aa"]),
        ("prefix=b1", &["b1"]),
        ("prefix=a1&tag=site:z", &["a10", "a1b", "a1x", "a1\u{10FFFF}"]),
        ("prefix=a1&tag=site:a", &["a1"]),
        ("prefix=zz", &[]),
        (
            "prefix=",
            &[
                "a",
                "a0",
                "a1",
                "a10",
                "a1b",
                "a1x",
                "a1\u{10FFFF}",
                "a2",
                "a2x",
                "aa",
                "b",
                "b1",
                "c1",
            ],
        ),
    ] {
        for limit in [1, 2, 100] {
            let mut got = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut uri = format!("/api/v1/sensors?{}&limit={limit}", enc_query(query));
                if let Some(c) = &cursor {
                    uri.push_str(&format!("&cursor={c}"));
                }
                let (status, v) = get_json(&app.router, &uri).await;
                assert_eq!(status, StatusCode::OK, "{uri}: {v}");
                let page = keys(&v);
                assert!(page.len() <= limit, "{uri}");
                got.extend(page);
                match v["next_cursor"].as_str() {
                    Some(c) => cursor = Some(c.to_owned()),
                    None => break,
                }
                assert!(got.len() < 100);
            }
            assert_eq!(got, want, "{query} limit {limit}");
        }
    }
}

/// Percent-encodes the values of `k=v&k=v` (the test keys hold U+10FFFF).
fn enc_query(q: &str) -> String {
    q.split('&')
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => format!("{k}={}", enc(v)),
            None => kv.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[tokio::test]
async fn sensors_page_by_key() {
    let app = sensor_fixture().await;
    for (filter, limit, want) in [
        ("", 1, vec!["a1", "a2", "b1", "c1"]),
        ("", 2, vec!["a1", "a2", "b1", "c1"]),
        ("", 3, vec!["a1", "a2", "b1", "c1"]),
        ("tag=site:a&", 1, vec!["a1", "a2", "c1"]),
        ("tag=site:a&", 2, vec!["a1", "a2", "c1"]),
    ] {
        let mut got = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let uri = match &cursor {
                Some(c) => format!("/api/v1/sensors?{filter}limit={limit}&cursor={c}"),
                None => format!("/api/v1/sensors?{filter}limit={limit}"),
            };
            let (status, v) = get_json(&app.router, &uri).await;
            assert_eq!(status, StatusCode::OK, "{uri}: {v}");
            let page = keys(&v);
            assert!(page.len() <= limit);
            got.extend(page);
            match v["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
            assert!(got.len() < 100);
        }
        assert_eq!(got, want, "{filter} limit {limit}");
    }
    app.store.set_unavailable(true);
    let (status, _) = get_json(&app.router, "/api/v1/sensors").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn every_bad_parameter_is_a_400_with_a_json_message() {
    let app = sensor_fixture().await;
    let readings_cursor = {
        let (_, v) = get_json(
            &app.router,
            &format!("/api/v1/readings?sensor=a1&from={BASE}&to={}&limit=1", BASE + HOUR_MS),
        )
        .await;
        v["next_cursor"].as_str().unwrap().to_owned()
    };
    let sensors_cursor = {
        let (_, v) = get_json(&app.router, "/api/v1/sensors?limit=1").await;
        v["next_cursor"].as_str().unwrap().to_owned()
    };
    let bad = [
        "/api/v1/readings".to_owned(),
        "/api/v1/readings?sensor=".to_owned(),
        "/api/v1/readings?sensor=a1&sensor=a2".to_owned(),
        "/api/v1/readings?sensor=a1&from=yesterday".to_owned(),
        "/api/v1/readings?sensor=a1&to=12.5".to_owned(),
        "/api/v1/readings?sensor=a1&from=99999999999999999".to_owned(),
        format!("/api/v1/readings?sensor=a1&from={}", enc("2024-13-01T00:00:00Z")),
        "/api/v1/readings?sensor=a1&from=2000&to=1000".to_owned(),
        "/api/v1/readings?sensor=a1&format=xml".to_owned(),
        "/api/v1/readings?sensor=a1&order=up".to_owned(),
        "/api/v1/readings?sensor=a1&limit=0".to_owned(),
        "/api/v1/readings?sensor=a1&limit=-5".to_owned(),
        "/api/v1/readings?sensor=a1&limit=many".to_owned(),
        "/api/v1/readings?sensor=a1&limit=100001".to_owned(),
        "/api/v1/readings?sensor=a1&cursor=garbage".to_owned(),
        format!("/api/v1/readings?sensor=a1&cursor={sensors_cursor}"),
        "/api/v1/rollups".to_owned(),
        "/api/v1/rollups?sensor=a1&step=0s".to_owned(),
        "/api/v1/rollups?sensor=a1&step=500ms".to_owned(),
        "/api/v1/rollups?sensor=a1&step=fast".to_owned(),
        "/api/v1/rollups?sensor=a1&step=1s&from=0&to=86400000".to_owned(),
        "/api/v1/rollups?sensor=a1&from=5&to=4".to_owned(),
        "/api/v1/rollups?sensor=a1&to=never".to_owned(),
        "/api/v1/sensors?tag=site".to_owned(),
        "/api/v1/sensors?limit=10001".to_owned(),
        "/api/v1/sensors?limit=0".to_owned(),
        "/api/v1/sensors?cursor=%21%21".to_owned(),
        format!("/api/v1/sensors?cursor={readings_cursor}"),
    ];
    for uri in bad {
        let (status, headers, body) = get(&app.router, &uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}: {}", String::from_utf8_lossy(&body));
        assert_eq!(headers["content-type"], "application/json", "{uri}");
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{uri}: {v}");
    }
    // The largest allowed values pass.
    for uri in [
        "/api/v1/rollups?sensor=a1&step=1s&from=0&to=10000000".to_owned(),
        "/api/v1/sensors?limit=10000".to_owned(),
    ] {
        let (status, _, body) = get(&app.router, &uri).await;
        assert_eq!(status, StatusCode::OK, "{uri}: {}", String::from_utf8_lossy(&body));
    }
}

#[tokio::test]
async fn unknown_sensors_are_404() {
    let app = sensor_fixture().await;
    for uri in ["/api/v1/readings?sensor=zz", "/api/v1/rollups?sensor=zz"] {
        let (status, v) = get_json(&app.router, uri).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
        assert_eq!(v["error"], "unknown sensor \"zz\"");
    }
}

#[tokio::test]
async fn the_openapi_document_lists_every_endpoint() {
    let app = sensor_fixture().await;
    let (status, headers, body) = get(&app.router, "/api/v1/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/json");
    if let Ok(path) = std::env::var("BUCKETD_OPENAPI_OUT") {
        std::fs::write(path, &body).unwrap();
    }
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for (path, methods) in [
        ("/api/v1/readings", &["get", "post"][..]),
        ("/api/v1/rollups", &["get"]),
        ("/api/v1/sensors", &["get"]),
        ("/api/v1/openapi.json", &["get"]),
        ("/write", &["post"]),
        ("/api/v2/write", &["post"]),
        ("/ping", &["get"]),
        ("/query", &["get", "post"]),
        ("/health", &["get"]),
        ("/ready", &["get"]),
        ("/metrics", &["get"]),
        ("/api/v1/status", &["get"]),
    ] {
        for m in methods {
            assert!(paths.get(path).and_then(|p| p.get(*m)).is_some(), "{m} {path} missing");
        }
    }
    let readings_params: Vec<&str> = paths["/api/v1/readings"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        readings_params,
        ["db", "sensor", "from", "to", "order", "limit", "cursor", "format"]
    );
    // A refused token is answered in the route's own error shape, and documented so.
    let schema_401 = |path: &str, method: &str| {
        paths[path][method]["responses"]["401"]["content"]["application/json"]["schema"]["$ref"]
            .clone()
    };
    assert_eq!(schema_401("/api/v2/write", "post"), "#/components/schemas/InfluxV2ErrorBody");
    assert_eq!(schema_401("/write", "post"), "#/components/schemas/ErrorBody");
    assert_eq!(schema_401("/api/v1/rollups", "get"), "#/components/schemas/ErrorBody");
    // Every schema reference resolves.
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    for r in text.split("\"$ref\":\"").skip(1) {
        let target = &r[..r.find('"').unwrap()];
        let name = target.strip_prefix("#/components/schemas/").unwrap();
        assert!(schemas.contains_key(name), "dangling reference {target}");
    }
}

/// The server's router merges this one beside its own `POST /api/v1/readings`.
#[tokio::test]
async fn the_router_merges_beside_the_ingest_route() {
    let app = sensor_fixture().await;
    let merged: Router = app
        .router
        .clone()
        .merge(Router::new().route("/api/v1/readings", post(|| async { StatusCode::NO_CONTENT })));
    let post = merged
        .clone()
        .oneshot(Request::post("/api/v1/readings").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::NO_CONTENT);
    let get = merged
        .oneshot(
            Request::get(format!("/api/v1/readings?sensor=a1&from={BASE}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(get.status(), StatusCode::OK);
}
