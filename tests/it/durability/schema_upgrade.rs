//! Upgrading from schema 1, and the writer identity, on the real binary.
//!
//! `tests/data/schema1/` is a data directory a schema-1 bucketd (one high-water mark per
//! (series, hour) for every writer) left behind; see its README for how it was made. Readings
//! `v = 0..19` of sensors `upg,sensor=a` and `upg,sensor=b` are stored AND still in a log
//! segment (a replay must skip them); `v = 20..39` were acknowledged and are only in the log
//! (a replay must store them).

#![cfg(unix)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

use reqwest::StatusCode;

use crate::support::binary::Bucketd;

/// 2026-01-01T00:00:00Z, the fixture's hour.
const H: i64 = 1_767_225_600_000;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_name() != "README.md" {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// How often each value of `v` is stored for `sensor`.
async fn values(client: &reqwest::Client, base: &str, sensor: &str) -> BTreeMap<i64, usize> {
    let url = reqwest::Url::parse_with_params(
        &format!("{base}/api/v1/readings"),
        [
            ("sensor", sensor),
            ("from", &H.to_string()),
            ("to", &(H + 3_600_000).to_string()),
            ("limit", "10000"),
        ],
    )
    .unwrap();
    let response = client.get(url).send().await.unwrap();
    if response.status() == StatusCode::NOT_FOUND {
        return BTreeMap::new();
    }
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value = response.json().await.unwrap();
    let mut out = BTreeMap::new();
    for r in body["readings"].as_array().expect("readings") {
        *out.entry(r["fields"]["v"].as_f64().expect("v") as i64).or_insert(0) += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema1_data_directory_and_log_are_upgraded_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/schema1"), &data);
    assert!(!data.join("wal/WRITER").exists(), "the fixture predates writer identities");
    let client = reqwest::Client::new();

    let mut server = Bucketd::spawn_args(&data, "100ms", &[]);
    server.wait_ready(&client).await;
    // The schema-1 log replayed and stored.
    server.wait_settled(&client, 60).await;
    let once: BTreeMap<i64, usize> = (0..40).map(|v| (v, 1)).collect();
    for sensor in ["upg,sensor=a", "upg,sensor=b"] {
        assert_eq!(
            values(&client, &server.base, sensor).await,
            once,
            "{sensor}: the stored half skipped by its schema-1 mark, the logged half stored"
        );
    }
    assert!(server.terminate().success());

    let identity = std::fs::read_to_string(data.join("wal/WRITER")).unwrap();
    let before: u64 = identity
        .lines()
        .find_map(|l| l.strip_prefix("schema1_before="))
        .expect("schema1_before recorded")
        .parse()
        .unwrap();
    assert!(before > 0, "the leftover log was recognised as schema 1's");

    // The next start is the same writer, and nothing is written again.
    let mut again = Bucketd::spawn_args(&data, "100ms", &[]);
    again.wait_ready(&client).await;
    assert_eq!(std::fs::read_to_string(data.join("wal/WRITER")).unwrap(), identity);
    for sensor in ["upg,sensor=a", "upg,sensor=b"] {
        assert_eq!(values(&client, &again.base, sensor).await, once, "{sensor}");
    }
    assert!(again.terminate().success());
}

/// A copied data directory would make two processes one writer, each taking the other's
/// stored readings for its own: refused at start, with what to do instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_data_directory_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let (original, copy) = (dir.path().join("a"), dir.path().join("b"));
    let client = reqwest::Client::new();
    let mut server = Bucketd::spawn_args(&original, "100ms", &[]);
    server.wait_ready(&client).await;
    assert!(server.terminate().success());
    copy_dir(&original, &copy);

    let output = Command::new(env!("CARGO_BIN_EXE_bucketd"))
        .args(["--http-addr", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(&copy)
        .stdin(Stdio::null())
        .output()
        .expect("bucketd runs");
    assert!(!output.status.success(), "a copy must not start");
    // Logged (to standard output, like every log line) as the reason for exiting.
    let log = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    assert!(log.contains("looks copied"), "the error says why: {log}");
    assert!(log.contains("--accept-moved-wal-dir"), "and what to do: {log}");

    // Told it was moved, not copied (the original is gone), it starts as the same writer.
    std::fs::remove_dir_all(&original).unwrap();
    let mut moved = Bucketd::spawn_args(&copy, "100ms", &["--accept-moved-wal-dir"]);
    moved.wait_ready(&client).await;
    assert!(moved.terminate().success());
    let mut plain = Bucketd::spawn_args(&copy, "100ms", &[]);
    plain.wait_ready(&client).await;
    assert!(plain.terminate().success(), "the new place is recorded");
}

/// Data written before databases existed (`tests/data/before-databases/`, stored and only
/// logged) is the default database's after the upgrade, under the same keys and exactly once,
/// and no other database sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_from_before_databases_is_the_default_databases() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/before-databases");
    copy_dir(&fixture, &data);
    let client = reqwest::Client::new();
    let mut server = Bucketd::spawn_args(&data, "100ms", &["--accept-moved-wal-dir"]);
    server.wait_ready(&client).await;
    server.wait_settled(&client, 60).await;
    let once: BTreeMap<i64, usize> = (0..40).map(|v| (v, 1)).collect();
    for sensor in ["upg,sensor=a", "upg,sensor=b"] {
        assert_eq!(values(&client, &server.base, sensor).await, once, "{sensor}");
    }
    let query = |q: &str, db: Option<&str>| {
        let mut params = vec![("q", q.to_owned())];
        params.extend(db.map(|db| ("db", db.to_owned())));
        let url =
            reqwest::Url::parse_with_params(&format!("{}/query", server.base), params).unwrap();
        let client = client.clone();
        async move {
            let body: serde_json::Value =
                client.post(url).send().await.unwrap().json().await.unwrap();
            body["results"][0].clone()
        }
    };
    let count = "SELECT count(v) FROM upg";
    for db in [None, Some("bucketd")] {
        assert_eq!(query(count, db).await["series"][0]["values"][0][1], 80, "{db:?}");
    }
    let names = query("SHOW DATABASES", None).await;
    assert_eq!(names["series"][0]["values"], serde_json::json!([["bucketd"]]));
    assert!(query("CREATE DATABASE other", None).await.get("error").is_none());
    assert!(query(count, Some("other")).await.get("series").is_none(), "another database");
    assert!(server.terminate().success());
}
