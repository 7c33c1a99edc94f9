//! A real full disk under the real binary: `--wal-dir` or `--data-dir` on a tmpfs of a few
//! MiB, filled by acknowledged writes. Writes are refused with a status and a message that name
//! the cause, reads keep working, bucketd takes writes again once space is freed (or says that
//! it needs a restart, and after one does), and every acknowledged reading is stored exactly
//! once.
//!
//! Mounting needs root. Elsewhere the tests say loudly that they were skipped (on stderr,
//! past the test harness's capture); with `CI=true` a failed mount fails them instead, since
//! CI runs as root.

#![cfg(target_os = "linux")]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use crate::support::binary::{Bucketd, all_readings};

const SENSORS: i64 = 20;
const WRITERS: usize = 4;
const LINES_PER_REQUEST: i64 = 200;
const T0_MS: i64 = 1_700_000_000_000;
const TMPFS_SIZE: &str = "4m";
const BALLAST_BYTES: usize = 1 << 20;

/// Serializes the tests of this file: each fills a disk flat out, and two at once on a small
/// machine would only slow both.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Says something past libtest's output capture (which only takes `print!`/`eprint!`).
fn loud(message: &str) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// A tmpfs mounted on a fresh directory, unmounted when dropped (also on a panic).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` (after saying so loudly) where mounting is not allowed, unless `CI=true`.
    fn mount(test: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_SIZE}"), "tmpfs"])
            .arg(dir.path())
            .output();
        let why = match out {
            Ok(out) if out.status.success() => return Some(Tmpfs { dir }),
            Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            Err(e) => format!("cannot run mount: {e}"),
        };
        let message = format!("SKIPPED {test}: cannot mount a tmpfs (needs root): {why}");
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{message} (CI=true: CI runs as root, so this is a failure)");
        }
        loud(&format!("\n*** {message} ***\n"));
        None
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let path = self.dir.path();
        let ok = Command::new("umount").arg(path).status().is_ok_and(|s| s.success());
        // Busy (a child not yet reaped): detach it so the directory can still go.
        if !ok && !Command::new("umount").arg("-l").arg(path).status().is_ok_and(|s| s.success()) {
            loud(&format!("cannot unmount the test tmpfs at {}", path.display()));
        }
    }
}

/// Reading `n` is sensor `n % SENSORS` at `T0_MS + n` with value `n`: its identity.
fn body(first: i64) -> String {
    (first..first + LINES_PER_REQUEST)
        .map(|n| format!("disk,sensor=s{} v={n}i {}\n", n % SENSORS, T0_MS + n))
        .collect()
}

#[derive(Default)]
struct Ledger {
    acked: BTreeSet<i64>,
    sent: BTreeSet<i64>,
    /// Refusals by status and body.
    refusals: BTreeMap<(u16, String), usize>,
}

/// Writers posting line protocol flat out until stopped, recording every answer.
struct Load {
    ledger: Arc<Mutex<Ledger>>,
    acked: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(client: &reqwest::Client, base: &str, next: &Arc<AtomicI64>) -> Load {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let (acked, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let url = format!("{base}/write?precision=ms");
        let writers = (0..WRITERS)
            .map(|_| {
                let (client, url, next) = (client.clone(), url.clone(), next.clone());
                let (ledger, acked, refused, stop) =
                    (ledger.clone(), acked.clone(), refused.clone(), stop.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let first = next.fetch_add(LINES_PER_REQUEST, Ordering::SeqCst);
                        ledger.lock().unwrap().sent.extend(first..first + LINES_PER_REQUEST);
                        let r = match client.post(&url).body(body(first)).send().await {
                            Ok(r) => r,
                            // The server going away (a failed test tearing it down) ends the
                            // writer; before that, the ledger's checks report it.
                            Err(e) => {
                                let refusal = (0, format!("no answer: {e}"));
                                *ledger.lock().unwrap().refusals.entry(refusal).or_default() += 1;
                                break;
                            }
                        };
                        let status = r.status();
                        if status == StatusCode::NO_CONTENT {
                            ledger.lock().unwrap().acked.extend(first..first + LINES_PER_REQUEST);
                            acked.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        let text = r.text().await.unwrap_or_default();
                        *ledger
                            .lock()
                            .unwrap()
                            .refusals
                            .entry((status.as_u16(), text))
                            .or_default() += 1;
                        refused.fetch_add(1, Ordering::SeqCst);
                        // A refused client backs off, as Retry-After asks (shorter, to keep
                        // the test quick).
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            })
            .collect();
        Load { ledger, acked, refused, stop, writers }
    }

    async fn stop(self) -> Ledger {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.writers {
            tokio::time::timeout(Duration::from_secs(90), w).await.expect("writer stops").unwrap();
        }
        Arc::into_inner(self.ledger).unwrap().into_inner().unwrap()
    }
}

/// How long a wait may see no progress before it gives up.
const STALLED: Duration = Duration::from_secs(60);

/// Polls `check` every 50 ms until it holds. Gives up, naming `what`, only once `progress`
/// (a measure of the work the state waits for: bytes on the disk, acknowledged requests,
/// readings still to replay) has not changed for [`STALLED`]: on a busy machine the disk
/// fills more slowly, and a fixed deadline failed there although nothing was stuck. Every
/// measure passed is bounded (the disk is small, the log holds so much), so a wait whose
/// state never comes still ends.
async fn wait_for<F, Fut>(what: &str, mut progress: impl FnMut() -> u64, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut seen = progress();
    let mut moved = Instant::now();
    while !check().await {
        let now = progress();
        if now != seen {
            (seen, moved) = (now, Instant::now());
        }
        assert!(moved.elapsed() < STALLED, "no progress for {STALLED:?} and not yet: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Bytes allocated to the files under `dir`: what the server has written to its disk.
fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => allocated_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

async fn get(client: &reqwest::Client, url: &str) -> (StatusCode, String) {
    let r = client.get(url).send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

/// Every stored reading of the test's sensors, by number, with how often it is stored;
/// panics on a reading stored under the wrong sensor or time.
async fn read_all(client: &reqwest::Client, base: &str) -> BTreeMap<i64, usize> {
    let mut out = BTreeMap::new();
    for s in 0..SENSORS {
        let sensor = format!("disk,sensor=s{s}");
        for v in all_readings(client, base, &sensor, (T0_MS, T0_MS + 1_000_000_000)).await {
            let n = v["fields"]["v"].as_i64().expect("integer field v");
            assert_eq!(n % SENSORS, s, "reading {n} stored under sensor s{s}");
            let t = v["t"].as_str().expect("time t");
            let ts = rfc3339_ms(t).unwrap_or_else(|| panic!("time {t:?} of reading {n}"));
            assert_eq!(ts, T0_MS + n, "reading {n} stored at the wrong time ({t})");
            *out.entry(n).or_insert(0) += 1;
        }
    }
    out
}

/// `2023-11-14T22:13:20.123Z` → epoch milliseconds (only that shape: what bucketd writes).
fn rfc3339_ms(t: &str) -> Option<i64> {
    let (date, time) = t.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut h = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (h.next()??, h.next()??, h.next()??);
    let ms: i64 = format!("{frac:0<3}")[..3].parse().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + ms)
}

/// `Bucketd::spawn_args`, with the server's log (stdout) kept in `log` to be shown at the end.
fn spawn(data_dir: &Path, args: &[&str], log: &Path) -> Bucketd {
    Bucketd::spawn_logged(data_dir, "100ms", args, Some(log))
}

/// The server's warnings and errors, each distinct message once with its count.
fn log_summary(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let level = event["level"].as_str().unwrap_or_default();
        if level == "WARN" || level == "ERROR" {
            // Without the timestamp, so that repeats count as one.
            let message = format!("{level} {}", event["fields"]);
            *counts.entry(message.chars().take(400).collect()).or_default() += 1;
        }
    }
    counts.iter().map(|(m, n)| format!("  {n} x {m}\n")).collect()
}

/// Shows the server's warnings and errors when the scenario ends, also on a failure.
struct ShowLog {
    name: String,
    path: PathBuf,
}

impl Drop for ShowLog {
    fn drop(&mut self) {
        loud(&format!(
            "{}: server log, warnings and errors:\n{}",
            self.name,
            log_summary(&self.path)
        ));
    }
}

fn ballast(dir: &Path) -> PathBuf {
    let path = dir.join("ballast");
    std::fs::write(&path, vec![0x5a; BALLAST_BYTES]).unwrap();
    path
}

fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |a, b| a + b)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Restart {
    Never,
    Always,
    /// When the store's file meets the full disk before the log does. If the log meets it
    /// first, it takes no more writes, so the store has nothing new to grow its file for and
    /// may never meet it: then writes are taken again once space is freed, as for a full log
    /// disk. Which comes first is a race between two files on one disk.
    IfTheStoreMetItFirst,
}

/// What a scenario must find.
struct Expect {
    /// Every refusal on the full disk: its status and how its message starts.
    refusal: (StatusCode, &'static str),
    /// Writes are taken again once space is freed, without a restart.
    writes_recover: bool,
    /// Whether `/ready` asks for a restart once space is freed (the embedded store's file could
    /// not be written).
    restart_needed: Restart,
    /// `--ack=buffered`: no log; a restart loses what was acknowledged but not stored, at most
    /// this many readings (`--max-buffered-readings`), and the SIGTERM exits 1 saying so.
    buffered_may_lose: Option<usize>,
}

/// Fills the disk under load, checks reads while it is full, frees the ballast, waits for
/// writes to be taken again and/or for `/ready` to ask for a restart, stops (SIGTERM),
/// restarts, and compares what is stored with what was acknowledged, reading by reading.
async fn fill_free_and_check(
    name: &str,
    data_dir: &Path,
    ballast: PathBuf,
    args: &[&str],
    expect: Expect,
) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(90)).build().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let log = ShowLog { name: name.to_owned(), path: logs.path().join("bucketd.log") };
    let log = &log.path;
    let mut server = spawn(data_dir, args, log);
    server.wait_ready(&client).await;
    let base = server.base.clone();
    let next = Arc::new(AtomicI64::new(0));
    let load = Load::start(&client, &base, &next);
    // Filling the disk: bytes on it and requests acknowledged, both bounded by its size.
    let disk = ballast.parent().expect("the ballast lies on the small disk").to_owned();
    let filling = {
        let (acked, disk) = (load.acked.clone(), disk.clone());
        move || allocated_bytes(&disk) + acked.load(Ordering::SeqCst) as u64
    };

    // Full: the writers are being refused, and where the store's file filled, `/ready` says
    // so (with `--ack=buffered` the buffers also refuse while a flush merely lags).
    if expect.restart_needed == Restart::Always {
        wait_for(&format!("{name}: /ready asks for a restart"), filling.clone(), || {
            let (client, base) = (client.clone(), base.clone());
            async move {
                let (status, body) = get(&client, &format!("{base}/ready")).await;
                status == StatusCode::SERVICE_UNAVAILABLE && body.contains("restart bucketd")
            }
        })
        .await;
    }
    let refused = load.refused.clone();
    let refused_before = refused.load(Ordering::SeqCst);
    wait_for(&format!("{name}: writes refused on a full disk"), filling.clone(), || {
        let refused = refused.clone();
        async move { refused.load(Ordering::SeqCst) >= refused_before + 20 }
    })
    .await;
    let acked_when_full = load.acked.load(Ordering::SeqCst);
    assert!(acked_when_full > 0, "{name}: nothing was acknowledged before the disk filled");

    // Reads while full: the sensor list, a range query, /metrics, /ready.
    let (status, sensors) = get(&client, &format!("{base}/api/v1/sensors")).await;
    loud(&format!("{name}: while full: GET /api/v1/sensors -> {status}"));
    assert_eq!(status, StatusCode::OK, "{name}: sensors while full: {sensors}");
    let (status, readings) = get(
        &client,
        &format!(
            "{base}/api/v1/readings?sensor=disk,sensor=s1&from={T0_MS}&to={}&limit=5",
            T0_MS + 1_000_000_000
        ),
    )
    .await;
    loud(&format!(
        "{name}: while full: GET /api/v1/readings -> {status}: {}",
        &readings[..readings.len().min(200)]
    ));
    assert_eq!(status, StatusCode::OK, "{name}: readings while full: {readings}");
    let (ready, ready_body) = get(&client, &format!("{base}/ready")).await;
    loud(&format!("{name}: while full: /ready -> {ready}: {ready_body}"));
    let (_, metrics) = get(&client, &format!("{base}/metrics")).await;
    let disk_full_rejected = metric(
        &metrics,
        "bucketd_readings_rejected_total{protocol=\"lp_http\",reason=\"disk_full\"}",
    );
    let store_errors = metric(&metrics, "bucketd_store_errors_total");
    loud(&format!(
        "{name}: while full: readings rejected as disk_full {disk_full_rejected}, store errors {store_errors}"
    ));

    // Free space: writes are taken again without a restart, or /ready says one is needed.
    std::fs::remove_file(&ballast).unwrap();
    let acked_at_free = load.acked.load(Ordering::SeqCst);
    if expect.writes_recover {
        let acked = load.acked.clone();
        wait_for(&format!("{name}: writes taken again"), filling.clone(), || {
            let acked = acked.clone();
            async move { acked.load(Ordering::SeqCst) > acked_at_free }
        })
        .await;
    }
    // Decided once space is freed: the store's file cannot newly fail after that.
    let restart_needed = match expect.restart_needed {
        Restart::Never => false,
        Restart::Always => true,
        Restart::IfTheStoreMetItFirst => {
            let (status, body) = get(&client, &format!("{base}/ready")).await;
            let failed = status == StatusCode::SERVICE_UNAVAILABLE && body.contains("restart");
            loud(&format!(
                "{name}: the store's file met the full disk (before the log did): {failed}"
            ));
            failed
        }
    };
    if restart_needed {
        wait_for(&format!("{name}: /ready asks for a restart"), filling.clone(), || {
            let (client, base) = (client.clone(), base.clone());
            async move {
                let (status, body) = get(&client, &format!("{base}/ready")).await;
                status == StatusCode::SERVICE_UNAVAILABLE && body.contains("restart bucketd")
            }
        })
        .await;
    }
    let (ready_after, ready_after_body) = get(&client, &format!("{base}/ready")).await;
    loud(&format!("{name}: after freeing: /ready -> {ready_after}: {ready_after_body}"));
    if !restart_needed {
        assert_eq!(ready_after, StatusCode::OK, "{name}: {ready_after_body}");
    }
    let ledger = load.stop().await;
    for ((status, body), n) in &ledger.refusals {
        loud(&format!("{name}: refused {n} x {status}: {body}"));
        assert_eq!(*status, expect.refusal.0.as_u16(), "{name}: {body}");
        let message = serde_json::from_str::<serde_json::Value>(body).unwrap()["error"].clone();
        let message = message.as_str().unwrap_or_default();
        assert!(message.starts_with(expect.refusal.1), "{name}: {body}");
    }
    loud(&format!(
        "{name}: acknowledged requests: {acked_when_full} when full, {acked_at_free} when \
         freed, {} at the end",
        ledger.acked.len() as i64 / LINES_PER_REQUEST
    ));

    let status = server.terminate();
    loud(&format!("{name}: SIGTERM -> {status}"));
    // With the log, what the store did not take stays in it (exit 0); without, it is lost (1).
    assert_eq!(status.success(), expect.buffered_may_lose.is_none(), "{name}: {status}");
    let mut reader = spawn(data_dir, args, log);
    reader.wait_ready(&client).await;
    // The restart replays the log: wait until it is all stored and its segments are gone
    // (spilled readings are not visible to queries until then).
    let reader_base = reader.base.clone();
    let logged = expect.buffered_may_lose.is_none();
    // Replaying: the store's file grows and the log's segments go.
    let replaying = {
        let dirs = [data_dir.to_owned(), disk.clone()];
        move || dirs.iter().map(|d| allocated_bytes(d)).sum()
    };
    wait_for("the replay stores what the log holds", replaying, || {
        let (client, base) = (client.clone(), reader_base.clone());
        async move {
            let (_, m) = get(&client, &format!("{base}/metrics")).await;
            !logged
                || m.contains("bucketd_wal_segments ")
                    && metric(&m, "bucketd_wal_segments ") == 0.0
                    && metric(&m, "bucketd_wal_unsettled_readings ") == 0.0
        }
    })
    .await;
    let stored = read_all(&client, &reader.base).await;
    reader.terminate();
    // Sealing leaves a nearly full store disk alone: a page write that fails latches redb,
    // reads included, until the file is reopened. Both servers' logs are in `log`.
    let met_full = std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains("seal pass failed") && l.contains("No space left"));
    assert!(!met_full, "{name}: a seal pass met the full disk");

    let mut lost = Vec::new();
    let mut duplicated = Vec::new();
    for n in &ledger.acked {
        match stored.get(n) {
            Some(1) => {}
            Some(_) => duplicated.push(*n),
            None => lost.push(*n),
        }
    }
    let invented: Vec<i64> = stored.keys().filter(|n| !ledger.sent.contains(n)).copied().collect();
    let unacked_stored = stored.keys().filter(|n| !ledger.acked.contains(n)).count();
    let doubled_unacked =
        stored.iter().filter(|(n, c)| **c > 1 && !ledger.acked.contains(n)).count();
    loud(&format!(
        "{name}: {} readings acknowledged, {} lost, {} duplicated; {} stored, of them {unacked_stored} not acknowledged ({doubled_unacked} twice), {} invented",
        ledger.acked.len(),
        lost.len(),
        duplicated.len(),
        stored.len(),
        invented.len()
    ));
    assert!(
        lost.len() <= expect.buffered_may_lose.unwrap_or(0),
        "{name}: {} acknowledged readings lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        duplicated.is_empty(),
        "{name}: {} acknowledged readings stored twice, e.g. {:?}",
        duplicated.len(),
        &duplicated[..duplicated.len().min(5)]
    );
    assert!(
        invented.is_empty(),
        "{name}: readings never sent were stored: {:?}",
        &invented[..invented.len().min(5)]
    );
    assert_eq!(doubled_unacked, 0, "{name}: a reading was stored twice");
}

/// The log's directory alone is on the small disk (the store on a large one), and its
/// segments are larger than the disk (the default `--wal-max-bytes`): the log fills it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_disk_refuses_writes_with_507_and_recovers_when_space_is_freed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(tmpfs) = Tmpfs::mount("a_full_log_disk_refuses_writes") else { return };
    let data = tempfile::tempdir().unwrap();
    let wal_dir = tmpfs.path().join("wal");
    let ballast = ballast(tmpfs.path());
    let expect = Expect {
        refusal: (StatusCode::INSUFFICIENT_STORAGE, "no space left on device"),
        writes_recover: true,
        restart_needed: Restart::Never,
        buffered_may_lose: None,
    };
    let args = ["--wal-dir", wal_dir.to_str().unwrap(), "--shutdown-timeout", "10s"];
    fill_free_and_check("log disk", data.path(), ballast, &args, expect).await;
}

/// The store's file and the log share the small disk; the log's segments are small, so
/// settled ones go and the store grows until the disk is full. When the store's file meets it
/// first, redb refuses every write until it is reopened: the log takes writes again once space
/// is freed, `/ready` asks for a restart, and the restart stores everything from the log. When
/// the log meets it first (a race: see `Restart::IfTheStoreMetItFirst`), this is the full log
/// disk again. Either way nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_disk_keeps_every_acknowledged_reading_in_the_log() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(tmpfs) = Tmpfs::mount("a_full_store_disk_keeps_every_acknowledged_reading") else {
        return;
    };
    let data = tmpfs.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let ballast = ballast(tmpfs.path());
    let expect = Expect {
        refusal: (StatusCode::INSUFFICIENT_STORAGE, "no space left on device"),
        writes_recover: true,
        restart_needed: Restart::IfTheStoreMetItFirst,
        buffered_may_lose: None,
    };
    let args = ["--wal-max-bytes", "16MiB", "--shutdown-timeout", "5s"];
    fill_free_and_check("store disk", &data, ballast, &args, expect).await;
}

/// `--ack=buffered` has no log: the store's full disk stops the flushes, the buffers fill and
/// answer 503; the restart `/ready` asks for loses what was acknowledged but not stored
/// (bounded by `--max-buffered-readings`), and says so by exiting 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_disk_with_ack_buffered_fills_the_buffers_and_a_restart_loses_them() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(tmpfs) = Tmpfs::mount("a_full_store_disk_with_ack_buffered") else { return };
    let data = tmpfs.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let ballast = ballast(tmpfs.path());
    const MAX_BUFFERED: usize = 20_000;
    let expect = Expect {
        refusal: (StatusCode::SERVICE_UNAVAILABLE, "buffers are full"),
        writes_recover: false,
        restart_needed: Restart::Always,
        buffered_may_lose: Some(MAX_BUFFERED),
    };
    let max = MAX_BUFFERED.to_string();
    let args = ["--ack", "buffered", "--max-buffered-readings", &max, "--shutdown-timeout", "2s"];
    fill_free_and_check("buffered", &data, ballast, &args, expect).await;
}
