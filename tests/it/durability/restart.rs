//! The real binary with its default (embedded) store: SIGTERM flushes and exits 0, and what was
//! accepted is there after a restart on the same data directory; after kill -9 in the middle
//! of writes the store opens again and every acknowledged reading is there (the write-ahead
//! log; `durability::crash_loop` repeats this at random moments).

#![cfg(unix)]

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

use crate::support::binary::Bucketd;

#[tokio::test]
async fn sigterm_flushes_everything_and_a_restart_finds_it() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let t0 = 1_700_000_000_000i64;

    let mut first = Bucketd::spawn(dir.path());
    first.wait_ready(&client).await;
    let body: String = (0..500)
        .map(|i| format!("{}\n", json!({"sensor": "bin", "ts": t0 + i, "fields": {"v": i}})))
        .collect();
    let response = client
        .post(format!("{}/api/v1/readings", first.base))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let status = first.terminate();
    assert!(status.success(), "bucketd exited with {status} after SIGTERM");

    let mut second = Bucketd::spawn(dir.path());
    second.wait_ready(&client).await;
    let response = client
        .get(format!(
            "{}/api/v1/readings?sensor=bin&from={t0}&to={}&limit=1000&format=ndjson",
            second.base,
            t0 + 1000
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    // Reading i was sent at t0 + i with v = i: in time order, the values are each sent one
    // exactly once and nothing else.
    let values: Vec<i64> = text
        .lines()
        .filter(|l| !l.contains("next_cursor"))
        .map(|l| {
            let v = serde_json::from_str::<serde_json::Value>(l).unwrap()["fields"]["v"].clone();
            let v = v.as_f64().unwrap_or_else(|| panic!("numeric field v in {l}"));
            assert_eq!(v.fract(), 0.0, "{l}");
            v as i64
        })
        .collect();
    assert_eq!(values, (0..500).collect::<Vec<_>>(), "{text}");
    second.terminate();
}

#[tokio::test]
async fn kill_9_during_writes_loses_no_acknowledged_reading() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let t0 = 1_700_000_000_000i64;

    let mut first = Bucketd::spawn_with(dir.path(), "50ms");
    first.wait_ready(&client).await;
    // Write one reading per request for a while, remembering when each was acknowledged.
    let started = Instant::now();
    let mut acked: Vec<(i64, Instant)> = Vec::new();
    let mut i = 0i64;
    while started.elapsed() < Duration::from_millis(2500) {
        let response = client
            .post(format!("{}/api/v1/readings", first.base))
            .json(&json!({"sensor": "k9", "ts": t0 + i, "value": i}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::ACCEPTED);
        acked.push((t0 + i, Instant::now()));
        i += 1;
    }
    // Keep writing from another task so the kill lands in the middle of requests and flushes.
    let base = first.base.clone();
    let writer = tokio::spawn(async move {
        let client = reqwest::Client::new();
        for j in i..i + 100_000 {
            let sent = client
                .post(format!("{base}/api/v1/readings"))
                .json(&json!({"sensor": "k9", "ts": t0 + j, "value": j}))
                .send()
                .await;
            // Only a 202 is an acknowledgement; the kill shows as a failed request, never
            // as a status.
            match sent {
                Ok(r) if r.status() == StatusCode::ACCEPTED => {}
                Ok(r) => panic!("reading {j} answered {}", r.status()),
                Err(_) => return j,
            }
        }
        i + 100_000
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.child.kill().unwrap(); // SIGKILL
    first.child.wait().unwrap();
    let sent_up_to = writer.await.unwrap();

    let mut second = Bucketd::spawn_with(dir.path(), "50ms");
    second.wait_ready(&client).await;
    // Read once the replayed log is in the store: a range read while a write lands may see
    // the reading twice (buffers, then store), which says nothing about what is stored.
    second.wait_settled(&client, 120).await;
    let text = client
        .get(format!(
            "{}/api/v1/readings?sensor=k9&from={t0}&to={}&limit=100000&format=ndjson",
            second.base,
            t0 + sent_up_to + 1
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let stored: Vec<i64> = text
        .lines()
        .filter(|l| !l.contains("next_cursor"))
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["fields"]["value"]
                .as_f64()
                .unwrap() as i64
        })
        .collect();
    let mut unique = stored.clone();
    unique.dedup();
    assert_eq!(unique.len(), stored.len(), "a reading was stored twice");
    assert!(stored.windows(2).all(|w| w[0] < w[1]), "readings out of order");
    // The request that failed at the kill (number `sent_up_to`) may have been logged before it:
    // it may be there or not; nothing after it was sent.
    assert!(stored.iter().all(|v| *v <= sent_up_to), "a reading nobody sent");
    // Every acknowledged reading is in the write-ahead log, so all of them survived: the ones
    // before the background writer, and the background writer's up to the failed request.
    let missing: Vec<i64> = acked
        .iter()
        .map(|(ts, _)| ts - t0)
        .chain(i..sent_up_to)
        .filter(|v| stored.binary_search(v).is_err())
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged readings lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    second.terminate();
}

/// A process that has taken nothing (a fresh directory, or a log with nothing to replay) says
/// so: the gauges that tell an operator, or a test, that everything is stored are published
/// as 0 from the start rather than missing until the first write.
#[tokio::test]
async fn an_idle_process_reports_nothing_held() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut server = Bucketd::spawn(dir.path());
    server.wait_ready(&client).await;
    let held = server.held(&client).await;
    assert!(held.is_nothing(), "{held:?}");
    assert!(server.terminate().success());
}

/// Once writes stop, the store's file is compacted (`--compact-after-quiet`), and what was
/// written is read back from the compacted file, before and after a restart.
#[tokio::test]
async fn a_quiet_server_compacts_its_store_and_keeps_every_reading() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let t0 = 1_700_000_000_000i64;
    let mut server = Bucketd::spawn_args(dir.path(), "50ms", &["--compact-after-quiet", "300ms"]);
    server.wait_ready(&client).await;
    for round in 0..4 {
        let body: String = (0..2000)
            .map(|s| format!("quiet,sensor=s{s} v={round} {}\n", (t0 + round) * 1_000_000))
            .collect();
        let response =
            client.post(format!("{}/write", server.base)).body(body).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
    // Compacted after the last write: everything is stored, and the file is the size the
    // last compaction left. A guard against a hang, not a performance bound.
    let file = dir.path().join("bucketd.redb");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let compacted = server.metric(&client, "bucketd_store_file_bytes").await;
        let held = server.held(&client).await;
        if held.is_nothing() && compacted == Some(std::fs::metadata(&file).unwrap().len() as f64) {
            break;
        }
        assert!(Instant::now() < deadline, "not compacted within 120 s: {compacted:?}, {held:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let read = |base: String| {
        let client = client.clone();
        async move {
            let url = format!(
                "{base}/api/v1/readings?sensor=quiet%2Csensor%3Ds1999&from={t0}&to={}&format=ndjson",
                t0 + 10
            );
            let text = client.get(url).send().await.unwrap().text().await.unwrap();
            text.lines().filter(|l| l.contains("\"v\"")).count()
        }
    };
    assert_eq!(read(server.base.clone()).await, 4);
    assert!(server.terminate().success());
    let mut again = Bucketd::spawn(dir.path());
    again.wait_ready(&client).await;
    assert_eq!(read(again.base.clone()).await, 4);
    assert!(again.terminate().success());
}

/// Hours that are over are sealed by the server's own task: no chunk is left in write
/// order, and every reading reads back as it was written.
#[tokio::test]
async fn the_server_seals_hours_that_are_over_and_reads_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let t0 = 1_700_000_000_000i64;
    let mut first = Bucketd::spawn_with(dir.path(), "50ms");
    first.wait_ready(&client).await;
    // Three hours of ten sensors, in several writes each, so that hours have several chunks.
    for part in 0..6i64 {
        let body: String = (0..10)
            .flat_map(|s| {
                (0..200i64).map(move |i| {
                    let ts = t0 + part * 1_800_000 + i * 9_000;
                    format!("sealed,sensor=s{s} v={i} {}\n", ts * 1_000_000)
                })
            })
            .collect();
        let response =
            client.post(format!("{}/write", first.base)).body(body).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
    let read = |base: String| {
        let client = client.clone();
        async move {
            let to = t0 + 4 * 3_600_000;
            let url = format!(
                "{base}/api/v1/readings?sensor=sealed%2Csensor%3Ds3&from={t0}&to={to}\
                 &format=ndjson&limit=5000"
            );
            client.get(url).send().await.unwrap().text().await.unwrap()
        }
    };
    first.wait_settled(&client, 120).await;
    let written = read(first.base.clone()).await;
    assert_eq!(written.lines().filter(|l| l.contains("\"v\"")).count(), 1200);
    let (sealed, unsealed) = ("bucketd_store_chunks_sealed_total", "bucketd_store_chunks_unsealed");
    let sealed_before = first.metric(&client, sealed).await;
    assert!(first.terminate().success());

    // Everything is stored before this process starts: once one of its steps says no chunk is
    // left in write order, every hour is sealed. The task runs at start and every 30 s; the
    // deadline guards against a hang, it is not a performance bound.
    let mut second = Bucketd::spawn(dir.path());
    second.wait_ready(&client).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match second.metric(&client, unsealed).await {
            Some(0.0) => break,
            left => assert!(Instant::now() < deadline, "not sealed within 120 s: {left:?} left"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sealed_after = second.metric(&client, sealed).await;
    let moved: f64 = sealed_before.unwrap_or(0.0) + sealed_after.unwrap_or(0.0);
    assert!(moved >= 30.0, "every sensor-hour's chunks moved: {moved}");
    assert_eq!(read(second.base.clone()).await, written);
    assert!(second.terminate().success());
}
