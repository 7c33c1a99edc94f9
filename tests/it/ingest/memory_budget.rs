//! The memory budget holds the process's resident memory, read from `/proc`, not a gauge,
//! whatever it is sent: 4 KiB strings, 256-field readings, many series. Each
//! test drives a real `bucketd` process, with its MongoDB gone (or, once, slow), until the state it needs (the
//! buffers at their budget, the log full, every write refused with 503 and Retry-After), waits
//! for the flusher to retry what it holds, reads the peak, and checks that every acknowledged
//! reading is in the log.
//!
//! The debug binary parses slowly, so these run with a small budget and log; the default
//! flags' figures, measured on the release binary, are in docs/performance.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use crate::support::binary::Bucketd;
use crate::support::mongo_standin::{StandIn, StandInOptions};

/// The budget the tests give, and the log's bound.
const BUDGET: &str = "32MiB";
const WAL: &str = "32MiB";
/// Peak RSS allowed: the budget, the log's pending group, the store client, the series index
/// (up to 240,000 series here) and a debug binary's own size. Counted in readings, the buffers
/// of each of these shapes held over a gigabyte at the old default bound (3,000,000 readings).
const CEILING_KIB: u64 = 384 << 10;

/// What the writers saw.
#[derive(Default)]
struct Tally {
    acked: AtomicU64,
    refused: AtomicU64,
}

/// `writers` clients post the bodies `body(writer, k)` makes (with `k` the writer's count of
/// acknowledged bodies, so a refused body is sent again) until each has had `refusals`
/// answers of 503 with Retry-After. Any other answer fails the test. Returns what they saw.
async fn write_until(
    base: &str,
    writers: usize,
    refusals: u64,
    body: fn(usize, u64) -> (String, u64),
) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (tally, url) = (tally.clone(), format!("{base}/write"));
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let (mut k, mut refused) = (0u64, 0u64);
            while refused < refusals {
                let (text, readings) = body(w, k);
                let r = client.post(&url).body(text).send().await.expect("bucketd answers");
                match r.status() {
                    StatusCode::NO_CONTENT => {
                        tally.acked.fetch_add(readings, Ordering::Relaxed);
                        k += 1;
                    }
                    StatusCode::SERVICE_UNAVAILABLE => {
                        assert!(r.headers().contains_key("retry-after"), "503 without Retry-After");
                        tally.refused.fetch_add(1, Ordering::Relaxed);
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    other => panic!("unexpected {other}: {}", r.text().await.unwrap_or_default()),
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    tally
}

fn assert_under_ceiling(b: &Bucketd, what: &str) {
    let peak = b.peak_rss_kib();
    eprintln!("{what}: peak RSS {} MiB", peak / 1024);
    assert!(
        peak <= CEILING_KIB,
        "{what}: peak RSS {} MiB, over {} MiB",
        peak / 1024,
        CEILING_KIB >> 10
    );
}

/// An hour ago, in nanoseconds, plus `i` milliseconds.
fn ts(i: u64) -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    (now.as_millis() as u64 - 3_600_000 + i) * 1_000_000
}

/// `bucketd_store_errors_total`, every kind.
async fn store_errors(b: &Bucketd, client: &reqwest::Client) -> f64 {
    let text =
        client.get(format!("{}/metrics", b.base)).send().await.unwrap().text().await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("bucketd_store_errors_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sends `body` bodies at a bucketd whose MongoDB went away once it was ready, until every
/// write is refused; then checks the peak RSS and that the log holds every acknowledged reading.
async fn store_down_until_refused(what: &str, body: fn(usize, u64) -> (String, u64)) {
    let standin = StandIn::start(StandInOptions::default());
    let uri = standin.uri.replace("serverSelectionTimeoutMS=20000", "serverSelectionTimeoutMS=500");
    let dir = tempfile::tempdir().unwrap();
    let args = ["--mongodb-uri", &uri, "--memory-budget", BUDGET, "--wal-max-bytes", WAL];
    let mut b = Bucketd::spawn_args(dir.path(), "60s", &args);
    let client = reqwest::Client::new();
    b.wait_ready(&client).await;
    drop(standin);
    let tally = write_until(&b.base, 2, 20, body).await;
    assert!(tally.refused.load(Ordering::Relaxed) >= 40);
    let share = f64::from(24 << 20);
    let held = b.metric(&client, "bucketd_buffered_bytes").await.unwrap();
    assert!(held >= share / 2.0, "{what}: the buffers filled: {held} bytes of {share}");
    // The flusher keeps retrying what it holds (each attempt used to copy it again): wait for
    // two more failures.
    let before = store_errors(&b, &client).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while store_errors(&b, &client).await < before + 2.0 {
        assert!(Instant::now() < deadline, "{what}: the flusher did not try again within 120 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_under_ceiling(&b, what);
    let acked = tally.acked.load(Ordering::Relaxed) as f64;
    assert!(acked > 0.0, "{what}: something was acknowledged");
    let held = b.held(&client).await;
    assert_eq!(held.unsettled, Some(acked), "{what}: every acknowledged reading is in the log");
    assert!(held.buffered.unwrap() <= acked);
}

/// Sends 4 KiB strings at a bucketd whose MongoDB is up but slow (every update command waits
/// 200 ms), until every write is refused; checks the peak RSS, then that everything
/// acknowledged is stored and nothing was refused by the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_kib_strings_stay_within_the_budget_with_a_slow_store() {
    let what = "4 KiB strings, slow store";
    let standin =
        StandIn::start(StandInOptions { update_delay_ms: Some(200), ..Default::default() });
    let dir = tempfile::tempdir().unwrap();
    let args = ["--mongodb-uri", &standin.uri, "--memory-budget", BUDGET, "--wal-max-bytes", WAL];
    let mut b = Bucketd::spawn_args(dir.path(), "60s", &args);
    let client = reqwest::Client::new();
    b.wait_ready(&client).await;
    let tally = write_until(&b.base, 2, 20, strings_body).await;
    let share = f64::from(24 << 20);
    let held = b.metric(&client, "bucketd_buffered_bytes").await.unwrap();
    assert!(held >= share / 2.0, "{what}: the buffers filled: {held} bytes of {share}");
    assert_under_ceiling(&b, what);
    assert!(tally.acked.load(Ordering::Relaxed) > 0, "{what}: something was acknowledged");
    b.wait_settled(&client, 600).await;
    let refused = b.metric(&client, "bucketd_dead_letter_readings_total").await.unwrap_or(0.0);
    assert_eq!(refused, 0.0, "{what}: the store refused nothing");
    assert_under_ceiling(&b, what);
}

/// 100 readings of 20 sensors, each with a 4,000-byte string.
fn strings_body(w: usize, k: u64) -> (String, u64) {
    let text = "x".repeat(4000);
    let lines: Vec<String> = (0..100u64)
        .map(|i| format!("s,sensor=w{w}s{} v={k},txt=\"{text}\" {}", i % 20, ts(k * 100 + i)))
        .collect();
    (lines.join("\n"), 100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_kib_strings_stay_within_the_budget_with_the_store_down() {
    store_down_until_refused("4 KiB strings", strings_body).await;
}

/// 20 readings of 256 fields each, a sensor each.
fn wide_body(w: usize, k: u64) -> (String, u64) {
    let fields: Vec<String> = (0..256).map(|f| format!("f{f}={k}.5")).collect();
    let fields = fields.join(",");
    let lines: Vec<String> =
        (0..20u64).map(|i| format!("w,sensor=w{w}s{i} {fields} {}", ts(k))).collect();
    (lines.join("\n"), 20)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readings_of_256_fields_stay_within_the_budget_with_the_store_down() {
    store_down_until_refused("256-field readings", wide_body).await;
}

/// 2,000 readings of 2,000 sensors, new ones in each of a writer's first 60 bodies: 240,000
/// series in all. (The series index is outside the budget, bounded by `--max-series`.)
fn series_body(w: usize, k: u64) -> (String, u64) {
    let lines: Vec<String> =
        (0..2000u64).map(|i| format!("m,sensor=w{w}b{}s{i} v=1 {}", k % 60, ts(k))).collect();
    (lines.join("\n"), 2000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_series_stay_within_the_budget_with_the_store_down() {
    store_down_until_refused("240,000 series", series_body).await;
}
