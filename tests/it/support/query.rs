//! Helpers for the query API tests: an in-process app over a `MemoryStore` and a fake source of
//! unflushed readings (with the OpenAPI document's route), and request helpers that go through the router with `oneshot`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};

use bucketd::model::{FieldValue, Reading, Series, SeriesMeta, TimestampMs};
use bucketd::query::{QueryLimits, QueryState, Unflushed, router};
use bucketd::store::memory::MemoryStore;
use bucketd::store::{BucketLimits, SensorInfo, Store};
use bucketd_test_support::store::{W, batches};
use bytes::Bytes;
use tower::ServiceExt;

/// Stands in for the buffers: readings per sensor in arrival order.
#[derive(Default)]
pub struct FakeUnflushed {
    series: Mutex<BTreeMap<String, (SeriesMeta, Vec<Reading>)>>,
}

impl FakeUnflushed {
    pub fn push(&self, series: &SeriesMeta, reading: Reading) {
        let mut map = self.series.lock().unwrap();
        map.entry(series.key().to_owned())
            .or_insert_with(|| (series.clone(), Vec::new()))
            .1
            .push(reading);
    }

    pub fn pending(&self, sensor: &str) -> usize {
        self.series.lock().unwrap().get(sensor).map_or(0, |(_, rs)| rs.len())
    }

    /// Removes and returns a sensor's readings: what a completed flush does to the buffers.
    pub fn take(&self, sensor: &str) -> Vec<Reading> {
        let mut map = self.series.lock().unwrap();
        map.get_mut(sensor).map(|(_, rs)| std::mem::take(rs)).unwrap_or_default()
    }
}

impl Unflushed for FakeUnflushed {
    fn unflushed(&self, sensor: &str, from: TimestampMs, to: TimestampMs) -> Vec<Reading> {
        let map = self.series.lock().unwrap();
        let mut out: Vec<Reading> = map
            .get(sensor)
            .map(|(_, rs)| rs.iter().filter(|r| r.ts >= from && r.ts < to).cloned().collect())
            .unwrap_or_default();
        // One reading per point, folded in arrival order, as the buffers promise.
        out.sort_by_key(|r| r.ts);
        bucketd::model::fold_points(&mut out);
        out
    }

    fn unflushed_sensors(&self) -> Vec<SensorInfo> {
        let map = self.series.lock().unwrap();
        map.values()
            .filter(|(_, rs)| !rs.is_empty())
            .map(|(s, rs)| SensorInfo {
                key: s.key().to_owned(),
                measurement: s.measurement().to_owned(),
                tags: s.tag_vec(),
                first: rs.iter().map(|r| r.ts).min().unwrap(),
                last: rs.iter().map(|r| r.ts).max().unwrap(),
            })
            .collect()
    }
}

pub struct App {
    pub store: Arc<MemoryStore>,
    pub unflushed: Arc<FakeUnflushed>,
    pub router: Router,
}

pub fn app(bucket_limits: BucketLimits) -> App {
    let store = Arc::new(MemoryStore::new(bucket_limits));
    let unflushed = Arc::new(FakeUnflushed::default());
    app_with(store.clone(), store, unflushed)
}

pub fn app_with(
    store: Arc<MemoryStore>,
    dyn_store: Arc<dyn Store>,
    unflushed: Arc<FakeUnflushed>,
) -> App {
    let state = QueryState {
        store: dyn_store,
        unflushed: unflushed.clone(),
        limits: QueryLimits::default(),
        databases: Default::default(),
        database: Default::default(),
        listings: Default::default(),
    };
    // The API's one OpenAPI document beside the query routes, as the server serves them.
    let router = router(state)
        .route("/api/v1/openapi.json", axum::routing::get(bucketd::api::openapi::get_openapi));
    App { store, unflushed, router }
}

pub fn series(key: &str, measurement: &str, tags: &[(&str, &str)]) -> SeriesMeta {
    SeriesMeta::new(key, measurement, tags)
}

pub fn reading(ts: TimestampMs, fields: Vec<(&str, FieldValue)>) -> Reading {
    Reading { ts, fields: fields.into_iter().map(|(k, v)| (k.into(), v)).collect() }
}

/// Writes readings through the Store trait, one batch per hour, in the order given.
pub async fn write(store: &MemoryStore, series: &SeriesMeta, readings: &[Reading]) {
    let series = Series::shared(series.clone());
    for result in store.write(W, &batches(&series, readings)).await {
        result.expect("memory store write");
    }
}

pub async fn get(router: &Router, uri: &str) -> (StatusCode, HeaderMap, Bytes) {
    let response =
        router.clone().oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("whole body");
    (status, headers, body)
}

pub async fn get_json(router: &Router, uri: &str) -> (StatusCode, serde_json::Value) {
    let (status, _, body) = get(router, uri).await;
    let value = serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!("{uri}: body is not JSON ({e}): {}", String::from_utf8_lossy(&body))
    });
    (status, value)
}

/// Percent-encodes a query-string value.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
