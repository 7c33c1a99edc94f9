//! Query parameters: any query string, through the parameter parsers and the real query
//! routes, never panics and never earns a 5xx; cursors that decode encode back to themselves.
#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use bucketd::buffer::{BufferConfig, Buffers};
use bucketd::http::ApiError;
use bucketd::model::{FieldValue, Reading, SeriesMeta};
use bucketd::query::cursor::{ReadingsCursor, decode_sensor_cursor, encode_sensor_cursor};
use bucketd::query::error::QueryError;
use bucketd::query::params::{Params, parse_limit, parse_step, parse_time};
use bucketd::query::{QueryState, router};
use bucketd::store::BucketLimits;
use bucketd::store::memory::MemoryStore;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt as _;

fn client_error<T>(r: Result<T, QueryError>) {
    if let Err(e) = r {
        let status = ApiError::from(e).status();
        assert!(status.is_client_error(), "a parameter error became {status}");
    }
}

fn app() -> &'static (tokio::runtime::Runtime, Router) {
    static APP: OnceLock<(tokio::runtime::Runtime, Router)> = OnceLock::new();
    APP.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let store = Arc::new(MemoryStore::new(BucketLimits::default()));
        let buffers = runtime.block_on(async {
            Buffers::new(BufferConfig {
                max_buffered_bytes: 1 << 20,
                max_buffered_readings: 1000,
                max_batch_readings: 1000,
                flush_interval: Duration::from_secs(3600),
            })
        });
        // One known sensor, so the routes get past "unknown sensor".
        let series = SeriesMeta::untagged("s1", "s1");
        let reading = Reading {
            ts: 1_700_000_000_000,
            fields: vec![("v".into(), FieldValue::Float(1.5))].into(),
        };
        buffers.push(vec![(series.into(), reading)]).unwrap();
        (runtime, router(QueryState::new(store, buffers, Default::default())))
    })
}

/// Keeps the query string's structure (`&`, `=`, `%`, `+`) and escapes what a URI cannot hold.
fn as_uri_query(data: &[u8]) -> String {
    let mut q = String::with_capacity(data.len() * 3);
    for &b in data {
        if b.is_ascii_alphanumeric() || b"-._~&=%+:,;!$'()*/@".contains(&b) {
            q.push(b as char);
        } else {
            q.push_str(&format!("%{b:02X}"));
        }
    }
    q
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    client_error(parse_time("from", text));
    client_error(parse_step(text));
    client_error(parse_limit(Some(text), 100, 10_000));
    match ReadingsCursor::decode(text) {
        Ok(c) => assert_eq!(ReadingsCursor::decode(&c.encode()).unwrap(), c),
        Err(e) => client_error::<()>(Err(e)),
    }
    match decode_sensor_cursor(text) {
        Ok(key) => assert_eq!(decode_sensor_cursor(&encode_sensor_cursor(&key)).unwrap(), key),
        Err(e) => client_error::<()>(Err(e)),
    }
    match Params::parse(Some(text)) {
        Ok(p) => {
            for name in ["sensor", "from", "to", "limit", "cursor", "step", "tag", "order"] {
                client_error(p.get(name));
                let _ = p.all(name).count();
            }
        }
        Err(e) => client_error::<()>(Err(e)),
    }

    let (runtime, app) = app();
    let query = as_uri_query(data);
    for path in ["/api/v1/readings", "/api/v1/rollups", "/api/v1/sensors"] {
        let Ok(request) = Request::get(format!("{path}?{query}")).body(Body::empty()) else {
            continue;
        };
        let response = runtime.block_on(app.clone().oneshot(request)).unwrap();
        assert!(
            !response.status().is_server_error(),
            "{path}?{query} answered {}",
            response.status()
        );
    }
});
