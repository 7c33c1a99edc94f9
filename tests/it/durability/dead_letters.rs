//! Readings the store refuses for good are kept in the dead-letter directory, shown in the
//! status and metrics, and written back by one request once the cause is fixed.

use std::time::Duration;

use bucketd::model::FieldValue;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::server::{FlakyStore, TestServer, memory_store, stored, wait_until};

/// Generous: the flusher writes within its 100 ms interval, and this waits only for that.
const STATE_WITHIN: Duration = Duration::from_secs(60);

async fn status(server: &TestServer) -> Value {
    server.get("/api/v1/status").await.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_readings_are_kept_shown_and_written_back_by_a_replay() {
    let store = FlakyStore::new(memory_store());
    store.refuse(&["env,sensor=bad", "boiler"]);
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().to_str().unwrap();
    let server =
        TestServer::start(store.clone(), &["--flush-interval", "100ms", "--dead-letter-dir", dead])
            .await;

    let lp = "env,sensor=good v=1 1700000000000\n\
              env,sensor=bad v=1.5,n=-2i,u=3u,ok=true,s=\"a \\\"q\\\" \\\\\nb\" 1700000000001\n\
              env,sensor=bad v=2.5 1700000000002\n";
    let r = server.post("/write?precision=ms", "text/plain", lp).await;
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let json =
        r#"{"sensor": "boiler", "ts": 1700000000003, "value": 71.25, "tags": {"room": "cellar"}}"#;
    let r = server.post("/api/v1/readings", "application/json", json).await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);

    // Kept, and shown.
    let (b, s) = (server.buffers.clone(), store.clone());
    wait_until("the refused readings left the buffers", STATE_WITHIN, move || {
        b.buffered() == 0 && !s.inner.readings_of("env,sensor=good").is_empty()
    })
    .await;
    let st = status(&server).await;
    let dl = &st["dead_letters"];
    assert_eq!(dl["readings_total"], 3, "{st}");
    assert_eq!(dl["files"], 1, "{st}");
    assert!(dl["bytes"].as_u64().unwrap() > 0, "{st}");
    assert_eq!(dl["last_reason"], "store rejected the write: test: this sensor is refused", "{st}");
    assert_eq!(server.metric("bucketd_dead_letter_readings_total").await, 3.0);
    assert_eq!(server.metric("bucketd_readings_dropped_total").await, 0.0);
    assert!(stored(&*store.inner, "env,sensor=bad").await.is_empty());

    // The cause fixed, one request writes them back, under their own series and types.
    store.refuse(&[]);
    let r = server.post("/api/v1/dead-letters/replay", "application/json", "").await;
    assert_eq!(r.status(), StatusCode::OK);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"replayed": 3, "files": 1}));
    let s = store.clone();
    wait_until("the replayed readings are stored", STATE_WITHIN, move || {
        !s.inner.readings_of("boiler").is_empty()
            && !s.inner.readings_of("env,sensor=bad").is_empty()
    })
    .await;
    let (b, s) = (server.buffers.clone(), store.clone());
    wait_until("every replayed reading is stored", STATE_WITHIN, move || {
        b.buffered() == 0 && s.inner.reading_count() == 4
    })
    .await;
    let bad = stored(&*store.inner, "env,sensor=bad").await;
    assert_eq!(bad.len(), 2);
    assert_eq!(bad[0].ts, 1_700_000_000_001);
    let fields: Vec<(String, FieldValue)> =
        bad[0].fields.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    assert_eq!(
        fields,
        [
            ("v".to_owned(), FieldValue::Float(1.5)),
            ("n".to_owned(), FieldValue::Int(-2)),
            ("u".to_owned(), FieldValue::UInt(3)),
            ("ok".to_owned(), FieldValue::Bool(true)),
            ("s".to_owned(), FieldValue::Str("a \"q\" \\\nb".into())),
        ]
    );
    let boiler = stored(&*store.inner, "boiler").await;
    assert_eq!(boiler.len(), 1, "the JSON sensor key is kept");
    assert_eq!(boiler[0].fields[0].1, FieldValue::Float(71.25));
    let st = status(&server).await;
    assert_eq!(
        (st["dead_letters"]["files"].as_u64(), st["dead_letters"]["bytes"].as_u64()),
        (Some(0), Some(0)),
        "{st}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // Nothing left: a second replay writes nothing.
    let r = server.post("/api/v1/dead-letters/replay", "application/json", "").await;
    assert_eq!(r.json::<Value>().await.unwrap(), serde_json::json!({"replayed": 0, "files": 0}));
    server.shutdown().await;
}
