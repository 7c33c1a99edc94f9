//! OpenTelemetry metrics over HTTP: the OpenTelemetry Python SDK's OTLP/HTTP exporter writes
//! a counter, a gauge and a histogram, which read back as the documented readings; OTLP/JSON
//! and bodies that are not OTLP answer as OTLP/HTTP specifies.

use std::path::Path;

use bucketd::model::Reading;
use serde_json::json;

use crate::support::server::{TestServer, memory_store, stored, within};

fn fields(reading: &Reading) -> Vec<(String, String)> {
    reading.fields.iter().map(|(k, v)| (k.as_str().to_owned(), format!("{v:?}"))).collect()
}

fn expected(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_exports_readings() {
    let python = crate::support::venv::python(
        "otlp-client",
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_client/requirements.txt"),
        "the OTLP test needs Python 3 with venv and pip for the OpenTelemetry SDK: install \
         python3 and python3-venv",
    );
    let store = memory_store();
    let server = TestServer::start(store.clone(), &[]).await;
    let before = chrono::Utc::now().timestamp_millis();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_client/export.py");
    let endpoint = server.url("/v1/metrics");
    for compression in ["none", "gzip"] {
        let service = format!("sensor-{compression}");
        let out = within("the exporter", 120, async {
            tokio::process::Command::new(&python)
                .arg(&script)
                .args([endpoint.as_str(), compression, service.as_str()])
                .output()
                .await
                .unwrap()
        })
        .await;
        assert!(
            out.status.success(),
            "the exporter ({compression}) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let after = chrono::Utc::now().timestamp_millis();
    // Acknowledged means in the log; the shutdown's flush puts it in the store.
    server.shutdown().await;

    let one = |key: String| {
        let store = store.clone();
        async move {
            let readings = stored(&*store, &key).await;
            assert_eq!(readings.len(), 1, "{key}: {readings:?}");
            let r = readings.into_iter().next().unwrap();
            assert!(
                (before..=after).contains(&r.ts),
                "{key} at {}, not in {before}..={after}",
                r.ts
            );
            fields(&r)
        }
    };
    for compression in ["none", "gzip"] {
        let service = format!("service.name=sensor-{compression}");
        let reads = one(format!("sensor.reads,room=kitchen,{service}")).await;
        assert_eq!(reads, expected(&[("value", "Int(7)")]));
        let temperature = one(format!("sensor.temperature,room=kitchen,{service}")).await;
        assert_eq!(temperature, expected(&[("value", "Float(21.5)")]));
        // The SDK's default bounds: 0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000,
        // 7500, 10000.
        let le = |bound: &str, n: &str| (format!("le_{bound}"), format!("Int({n})"));
        let mut histogram = expected(&[
            ("count", "Int(3)"),
            ("sum", "Float(715.0)"),
            ("min", "Float(3.0)"),
            ("max", "Float(700.0)"),
        ]);
        histogram.extend(
            [("0", "0"), ("5", "1"), ("10", "1"), ("25", "2"), ("50", "2"), ("75", "2")]
                .into_iter()
                .chain([("100", "2"), ("250", "2"), ("500", "2"), ("750", "3"), ("1000", "3")])
                .chain([("2500", "3"), ("5000", "3"), ("7500", "3"), ("10000", "3"), ("+Inf", "3")])
                .map(|(b, n)| le(b, n)),
        );
        assert_eq!(one(format!("sensor.latency,room=hall,{service}")).await, histogram);
    }
}

#[tokio::test]
async fn json_partial_success_and_errors_answer_as_otlp_http_specifies() {
    let store = memory_store();
    let server = TestServer::start(store.clone(), &[]).await;
    let body = json!({"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "plant.flow", "gauge": {"dataPoints": [
            {"asDouble": 2.5, "timeUnixNano": "1700000000000000000",
             "attributes": [{"key": "pump", "value": {"stringValue": "p1"}}]}]}},
        {"name": "", "gauge": {"dataPoints": [{"asDouble": 1, "timeUnixNano": "1700000000000000000"}]}}
    ]}]}]});
    let r = server.post("/v1/metrics", "application/json", body.to_string()).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let answer: serde_json::Value = r.json().await.unwrap();
    assert_eq!(answer["partialSuccess"]["rejectedDataPoints"], 1, "{answer}");
    assert!(
        answer["partialSuccess"]["errorMessage"].as_str().unwrap().contains("names no measurement"),
        "{answer}"
    );

    let r = server.post("/v1/metrics", "text/plain", "x").await;
    assert_eq!(r.status(), 415);
    let r = server.post("/v1/metrics", "application/json", "{\"resourceMetrics\": 1}").await;
    assert_eq!(r.status(), 400);
    let status: serde_json::Value = r.json().await.unwrap();
    assert_eq!(status["code"], 3, "{status}");
    let r = server.post("/v1/metrics", "application/x-protobuf", vec![0xffu8; 9]).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["content-type"], "application/x-protobuf");
    let r = server.post("/v1/metrics?db=nowhere", "application/x-protobuf", vec![]).await;
    assert_eq!(r.status(), 404);

    server.shutdown().await;
    let readings = stored(&*store, "plant.flow,pump=p1").await;
    assert_eq!(readings.len(), 1);
    assert_eq!(
        (readings[0].ts, fields(&readings[0])),
        (1_700_000_000_000, expected(&[("value", "Float(2.5)")]))
    );
}
