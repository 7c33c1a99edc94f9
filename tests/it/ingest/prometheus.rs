//! Prometheus remote write with a real Prometheus: it scrapes a target the test serves and
//! remote-writes what it scraped to bucketd, which must then hold what Prometheus holds,
//! sample for sample.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bucketd::ingest::prometheus::{Label, Sample, TimeSeries, WriteRequest};
use bucketd::model::FieldValue;
use bucketd::store::Store;
use prost::Message as _;

use crate::support::prometheus::Prometheus;
use crate::support::server::{TestServer, memory_store, stored};

/// Samples of each series Prometheus must hold before the comparison.
const SCRAPES: usize = 5;
/// How long Prometheus may take to scrape them and bucketd to hold what it sent.
const DEADLINE: Duration = Duration::from_secs(120);

/// A scrape target whose values change at every scrape, with a NaN sample beside them.
async fn serve_target() -> std::net::SocketAddr {
    let scrapes = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let n = scrapes.fetch_add(1, Ordering::Relaxed) as f64;
            async move {
                format!(
                    "# TYPE sensor_temperature gauge\n\
                     sensor_temperature{{room=\"kitchen\"}} {}\n\
                     sensor_temperature{{room=\"hall\"}} {}\n\
                     # TYPE sensor_quantile gauge\n\
                     sensor_quantile NaN\n",
                    20.0 + n * 0.25,
                    -n / 3.0,
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The series key bucketd files a Prometheus series under: the metric name as measurement,
/// the other labels as tags.
fn series_key(labels: &serde_json::Value) -> String {
    let labels = labels.as_object().unwrap();
    let mut key = labels["__name__"].as_str().unwrap().to_owned();
    for (name, value) in labels.iter().filter(|(name, _)| *name != "__name__") {
        key.push_str(&format!(",{name}={}", value.as_str().unwrap()));
    }
    key
}

/// What `store` holds of `key`, up to `until` (ms): `(timestamp, value)`.
async fn held(store: &dyn Store, key: &str, until: i64) -> Vec<(i64, f64)> {
    stored(store, key)
        .await
        .into_iter()
        .filter(|r| r.ts <= until)
        .map(|r| {
            assert_eq!(r.fields.len(), 1, "{key}: {r:?}");
            assert_eq!(r.fields[0].0.as_str(), "value");
            let FieldValue::Float(v) = r.fields[0].1 else { panic!("{key}: {r:?}") };
            (r.ts, v)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucketd_holds_what_prometheus_scraped_sample_for_sample() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &["--flush-interval", "20ms"]).await;
    let target = serve_target().await;
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1h\n\
         scrape_configs:\n  - job_name: sensors\n    static_configs:\n      - targets: ['{target}']\n\
         remote_write:\n  - url: {}\n    queue_config:\n      batch_send_deadline: 200ms\n      \
         min_backoff: 50ms\n      max_backoff: 500ms\n",
        server.url("/api/v1/write")
    );
    let prometheus = Prometheus::start(&config).await;

    // Prometheus' own samples of the target's series, once it holds enough of each.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let expected: BTreeMap<String, Vec<(i64, f64)>> = loop {
        let samples = prometheus.samples("{job=\"sensors\"}", "1h").await;
        let kitchen = samples.iter().find(|(labels, _)| labels["room"] == "kitchen");
        if kitchen.is_some_and(|(_, values)| values.len() >= SCRAPES) {
            break samples
                .iter()
                .map(|(labels, values)| (series_key(labels), values.clone()))
                .collect();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Prometheus scraped too little:\n{}",
            prometheus.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let until = expected.values().flatten().map(|&(ts, _)| ts).max().unwrap();
    let temperature = format!("sensor_temperature,instance={target},job=sensors,room=kitchen");
    assert!(expected.contains_key(&temperature), "{:?}", expected.keys());
    assert!(expected.contains_key(&format!("up,instance={target},job=sensors")));

    // bucketd holds exactly those samples, once Prometheus has sent them; NaN is not stored.
    let mut finite = expected.clone();
    let nan_key = format!("sensor_quantile,instance={target},job=sensors");
    assert!(finite.remove(&nan_key).is_some_and(|v| v.iter().all(|(_, v)| v.is_nan())));
    loop {
        let mut got = BTreeMap::new();
        for key in finite.keys() {
            got.insert(key.clone(), held(&*store, key, until).await);
        }
        if got == finite {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "bucketd does not hold what Prometheus holds:\nPrometheus: {finite:#?}\nbucketd: {got:#?}\n{}",
            prometheus.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(held(&*store, &nan_key, i64::MAX).await.is_empty());
    let metrics = server.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(r#"bucketd_readings_accepted_total{protocol="prometheus"}"#),
        "{metrics}"
    );
    assert!(
        metrics
            .contains(r#"bucketd_readings_rejected_total{protocol="prometheus",reason="value"}"#),
        "{metrics}"
    );
    drop(prometheus);
    server.shutdown().await;
}

fn snappy(series: Vec<TimeSeries>) -> Vec<u8> {
    let request = WriteRequest { timeseries: series };
    snap::raw::Encoder::new().compress_vec(&request.encode_to_vec()).unwrap()
}

fn series(labels: &[(&str, &str)], samples: &[(f64, i64)]) -> TimeSeries {
    TimeSeries {
        labels: labels
            .iter()
            .map(|(name, value)| Label { name: name.to_string(), value: value.to_string() })
            .collect(),
        samples: samples.iter().map(|&(value, timestamp)| Sample { value, timestamp }).collect(),
        histograms: vec![],
    }
}

#[tokio::test]
async fn refusals_say_why_and_keep_the_good_series() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &["--max-body-bytes", "2000"]).await;
    let post = |body: Vec<u8>, content_type: &'static str, encoding: Option<&'static str>| {
        let mut r = server
            .client
            .post(server.url("/api/v1/write"))
            .header("content-type", content_type)
            .body(body);
        if let Some(encoding) = encoding {
            r = r.header("content-encoding", encoding);
        }
        async move {
            let response = r.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    const PROTOBUF: &str = "application/x-protobuf";

    let body = snappy(vec![
        series(&[("job", "nameless")], &[(1.0, 1_000)]),
        series(&[("__name__", "kept")], &[(2.0, 1_000)]),
    ]);
    let (status, text) = post(body, PROTOBUF, Some("snappy")).await;
    assert_eq!(status, 400, "{text}");
    assert!(
        text.contains("partial write: 1 sample(s) refused, 1 reading(s) accepted; series 0"),
        "{text}"
    );
    let (status, text) = post(snappy(vec![]), PROTOBUF, None).await;
    assert_eq!((status, text.contains("snappy")), (415, true), "{text}");
    let v2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request";
    let (status, text) = post(snappy(vec![]), v2, Some("snappy")).await;
    assert_eq!((status, text.contains("remote write 1.0")), (415, true), "{text}");
    let big = (0..200).map(|i| series(&[("__name__", "big")], &[(1.0, i)])).collect();
    let (status, text) = post(snappy(big), PROTOBUF, Some("snappy")).await;
    assert_eq!(status, 413, "{text}");
    let (status, text) = post(b"junk".to_vec(), PROTOBUF, Some("snappy")).await;
    assert_eq!((status, text.contains("snappy")), (400, true), "{text}");

    server.shutdown().await;
    assert_eq!(held(&*store, "kept", i64::MAX).await, [(1_000, 2.0)]);
}
