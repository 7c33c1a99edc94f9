//! The real `bucketd` binary as a child process, for tests that signal or kill it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;

/// A bucketd child process. It binds port 0 and the test learns the address from its
/// "bucketd listening" log line (JSON logs on stdout), so no port is ever picked by the test,
/// released and bound again by the child, racing other tests for it.
pub struct Bucketd {
    pub child: Child,
    /// `http://<address>`: set by [`Bucketd::wait_ready`].
    pub base: String,
    listening: mpsc::Receiver<String>,
}

impl Bucketd {
    pub fn spawn(data_dir: &std::path::Path) -> Bucketd {
        // Nothing is due before the signal: the final flush must do the work.
        Self::spawn_with(data_dir, "1h")
    }

    pub fn spawn_with(data_dir: &std::path::Path, flush_interval: &str) -> Bucketd {
        Self::spawn_args(data_dir, flush_interval, &[])
    }

    pub fn spawn_args(data_dir: &std::path::Path, flush_interval: &str, args: &[&str]) -> Bucketd {
        Self::spawn_logged(data_dir, flush_interval, args, None)
    }

    /// Like `spawn_args`, also appending every log line (JSON) to `log` when given.
    pub fn spawn_logged(
        data_dir: &std::path::Path,
        flush_interval: &str,
        args: &[&str],
        log: Option<&std::path::Path>,
    ) -> Bucketd {
        Self::spawn_logged_at(data_dir, flush_interval, args, log, "info")
    }

    /// Like `spawn_logged`, with `RUST_LOG` set to `level`.
    pub fn spawn_logged_at(
        data_dir: &std::path::Path,
        flush_interval: &str,
        args: &[&str],
        log: Option<&std::path::Path>,
        level: &str,
    ) -> Bucketd {
        let mut log = log.map(|path| {
            std::fs::OpenOptions::new().create(true).append(true).open(path).expect("log file")
        });
        let mut child = Command::new(env!("CARGO_BIN_EXE_bucketd"))
            .args(["--http-addr", "127.0.0.1:0", "--log-format", "json"])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--flush-interval", flush_interval])
            .args(args)
            .env("RUST_LOG", level)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("bucketd starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, listening) = mpsc::channel();
        // Reads the log to its end, so the child never blocks on a full pipe; passes on
        // warnings and errors.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(file) = &mut log {
                    let _ = writeln!(file, "{line}");
                }
                let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                    eprintln!("bucketd: {line}");
                    continue;
                };
                let fields = &event["fields"];
                if fields["message"] == "bucketd listening"
                    && let Some(http) = fields["http"].as_str()
                {
                    let _ = tx.send(http.to_owned());
                } else if !matches!(event["level"].as_str(), Some("INFO" | "DEBUG" | "TRACE")) {
                    eprintln!("bucketd: {line}");
                }
            }
        });
        Bucketd { child, base: String::new(), listening }
    }

    /// Waits until bucketd has said where it listens and `/ready` answers 200.
    pub async fn wait_ready(&mut self, client: &reqwest::Client) {
        self.wait_listening().await;
        // A guard against a hang, not a performance bound.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("bucketd exited before it was ready: {status}");
            }
            if let Ok(r) = client.get(format!("{}/ready", self.base)).send().await
                && r.status() == StatusCode::OK
            {
                return;
            }
            assert!(Instant::now() < deadline, "bucketd not ready within 60 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the process listens (ready or not: its store may be down).
    pub async fn wait_listening(&mut self) {
        // A guard against a hang, not a performance bound.
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.base.is_empty() {
            match self.listening.try_recv() {
                Ok(http) => self.base = format!("http://{http}"),
                Err(mpsc::TryRecvError::Empty) => {}
                Err(mpsc::TryRecvError::Disconnected) => {
                    let status = self.child.wait().unwrap();
                    panic!("bucketd exited before it listened: {status}");
                }
            }
            assert!(Instant::now() < deadline, "bucketd did not listen within 60 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The most resident memory the process has had (`VmHWM`), in KiB, read from `/proc`.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the process is alive");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status")
    }

    /// An unlabelled metric of this process, by its exact name; `None` when it cannot be read.
    pub async fn metric(&self, client: &reqwest::Client, name: &str) -> Option<f64> {
        let url = format!("{}/metrics", self.base);
        let text = client.get(url).send().await.ok()?.text().await.ok()?;
        text.lines()
            .find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// What this process still holds: readings buffered, readings unsettled in its log, and
    /// segments of an earlier process's log not yet read back (whose readings are not counted
    /// as unsettled until then); `None` where a metric cannot be read.
    pub async fn held(&self, client: &reqwest::Client) -> Held {
        Held {
            buffered: self.metric(client, "bucketd_readings_buffered").await,
            unsettled: self.metric(client, "bucketd_wal_unsettled_readings").await,
            replaying: self.metric(client, "bucketd_wal_replaying_segments").await,
        }
    }

    /// Waits until everything this process took is in the store: it holds nothing. `secs`
    /// guards against a hang, and its failure says what was still held.
    pub async fn wait_settled(&self, client: &reqwest::Client, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let held = self.held(client).await;
            if held.is_nothing() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} not settled within {secs} s: {held:?}",
                self.base
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn terminate(mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("bucketd did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Times a page answered 503 ("store unavailable; retry") is asked again: on a loaded machine
/// the MongoDB stand-in can take longer than the store's operation timeout over a whole
/// sensor's readings.
const PAGE_RETRIES: usize = 4;

/// Every reading of `sensor` in `[from, to)` that the server at `base` returns, following
/// cursors, as NDJSON objects (`t`, `fields`); empty for an unknown sensor.
pub async fn all_readings(
    client: &reqwest::Client,
    base: &str,
    sensor: &str,
    (from, to): (i64, i64),
) -> Vec<serde_json::Value> {
    let (from, to) = (from.to_string(), to.to_string());
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut query = vec![
            ("sensor", sensor),
            ("from", from.as_str()),
            ("to", to.as_str()),
            ("limit", "100000"),
            ("format", "ndjson"),
        ];
        if let Some(c) = &cursor {
            query.push(("cursor", c.as_str()));
        }
        let url =
            reqwest::Url::parse_with_params(&format!("{base}/api/v1/readings"), &query).unwrap();
        let mut response = client.get(url.clone()).send().await.unwrap();
        for _ in 0..PAGE_RETRIES {
            if response.status() != StatusCode::SERVICE_UNAVAILABLE {
                break;
            }
            response = client.get(url.clone()).send().await.unwrap();
        }
        if response.status() == StatusCode::NOT_FOUND {
            return out;
        }
        assert_eq!(response.status(), StatusCode::OK);
        cursor = None;
        for line in response.text().await.unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            match v.get("next_cursor").and_then(|c| c.as_str()) {
                Some(c) => cursor = Some(c.to_owned()),
                None => out.push(v),
            }
        }
        if cursor.is_none() {
            return out;
        }
    }
}

impl Drop for Bucketd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a process still holds ([`Bucketd::held`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Held {
    pub buffered: Option<f64>,
    pub unsettled: Option<f64>,
    pub replaying: Option<f64>,
}

impl Held {
    /// Everything it took is in the store.
    pub fn is_nothing(&self) -> bool {
        [self.buffered, self.unsettled, self.replaying] == [Some(0.0); 3]
    }
}
