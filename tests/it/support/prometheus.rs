//! A real Prometheus as a child process on 127.0.0.1, its data in a temporary directory: the
//! client of the remote-write test, which scrapes a target and remote-writes what it scraped.
//!
//! `scripts/test.sh` installs it (Debian package `prometheus`); a test that needs it and cannot
//! find it fails, saying so.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::influxd::free_port;

/// How long Prometheus may take to answer `/-/ready` after it was started.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// Start attempts: another process may take the port between picking it and binding it.
const START_ATTEMPTS: usize = 5;

pub struct Prometheus {
    /// The HTTP API, `http://127.0.0.1:<port>`.
    pub url: String,
    pub client: reqwest::Client,
    child: Child,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus with `config` (YAML) and waits until `GET /-/ready` answers 200.
    pub async fn start(config: &str) -> Prometheus {
        let binary = find("prometheus").unwrap_or_else(|| {
            panic!(
                "prometheus is not installed: this test checks remote write with it. \
                 scripts/test.sh installs it (Debian package `prometheus`)"
            )
        });
        let client = reqwest::Client::new();
        let mut last_failure = String::new();
        for _ in 0..START_ATTEMPTS {
            let dir = tempfile::tempdir().expect("temporary directory for prometheus");
            let listen = free_port();
            let config_path = dir.path().join("prometheus.yml");
            std::fs::write(&config_path, config).unwrap();
            let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
            let child = Command::new(&binary)
                .arg(format!("--config.file={}", config_path.display()))
                .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
                .arg(format!("--web.listen-address={listen}"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("{} does not start: {e}", binary.display()));
            let mut server =
                Prometheus { url: format!("http://{listen}"), client: client.clone(), child, dir };
            match server.wait_ready(listen).await {
                Ok(()) => return server,
                Err(log) if log.contains("address already in use") => last_failure = log,
                Err(log) => panic!("prometheus did not become ready:\n{log}"),
            }
        }
        panic!("prometheus did not start in {START_ATTEMPTS} attempts: {last_failure}")
    }

    async fn wait_ready(&mut self, listen: SocketAddr) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("prometheus' status") {
                return Err(format!("exited ({status}):\n{}", self.log()));
            }
            let ready = self.client.get(format!("http://{listen}/-/ready")).send().await;
            if ready.is_ok_and(|r| r.status() == reqwest::StatusCode::OK) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("not ready within {START_DEADLINE:?}:\n{}", self.log()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What Prometheus logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// Every sample Prometheus holds of the series `selector` picks, within the last `range`
    /// (a PromQL duration): each series' labels and its `(timestamp ms, value)`s.
    pub async fn samples(
        &self,
        selector: &str,
        range: &str,
    ) -> Vec<(serde_json::Value, Vec<(i64, f64)>)> {
        let body: serde_json::Value = self
            .client
            .get(format!(
                "{}/api/v1/query?{}",
                self.url,
                serde_urlencoded::to_string([("query", format!("{selector}[{range}]"))]).unwrap()
            ))
            .send()
            .await
            .expect("prometheus answers")
            .json()
            .await
            .expect("a JSON answer");
        assert_eq!(body["status"], "success", "{body}");
        body["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|series| {
                let values = series["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| {
                        let ms = (v[0].as_f64().unwrap() * 1000.0).round() as i64;
                        (ms, v[1].as_str().unwrap().parse::<f64>().unwrap())
                    })
                    .collect();
                (series["metric"].clone(), values)
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name` on the PATH, else where Debian puts it.
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .chain([PathBuf::from("/usr/bin").join(name)])
        .find(|candidate| candidate.is_file())
}
