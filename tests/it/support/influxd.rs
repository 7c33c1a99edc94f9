//! A real InfluxDB 1.x (`influxd`) as a child process on 127.0.0.1, everything it writes in a
//! temporary directory: the reference the InfluxQL oracle test compares bucketd with.
//!
//! `scripts/test.sh` installs it (Debian package `influxdb`); a test that needs it and cannot
//! find it fails, saying so, rather than passing without having compared anything.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long `influxd` may take to answer `/ping` after it was started.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// Start attempts: another process may take a port between picking it and influxd binding it.
const START_ATTEMPTS: usize = 5;

pub struct Influxd {
    /// The HTTP API, `http://127.0.0.1:<port>`.
    pub url: String,
    pub client: reqwest::Client,
    child: Child,
    dir: tempfile::TempDir,
}

impl Influxd {
    /// Starts `influxd` and waits until `GET /ping` answers 204.
    pub async fn start() -> Influxd {
        let binary = find_influxd().unwrap_or_else(|| {
            panic!(
                "influxd (InfluxDB 1.x) is not installed: this test compares bucketd with it. \
                 scripts/test.sh installs it (Debian package `influxdb`), or run \
                 `apt-get install influxdb`"
            )
        });
        let client = reqwest::Client::builder().no_gzip().build().unwrap();
        let mut last_failure = String::new();
        for _ in 0..START_ATTEMPTS {
            let dir = tempfile::tempdir().expect("temporary directory for influxd");
            let (rpc, http) = (free_port(), free_port());
            let config = write_config(dir.path(), rpc, http);
            let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
            let stdout = std::fs::File::create(dir.path().join("stdout.log")).unwrap();
            let child = Command::new(&binary)
                .arg("-config")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(stdout)
                .stderr(stderr)
                .spawn()
                .unwrap_or_else(|e| panic!("{} does not start: {e}", binary.display()));
            let mut server =
                Influxd { url: format!("http://{http}"), client: client.clone(), child, dir };
            match server.wait_ready().await {
                Ok(()) => return server,
                Err(Exit::PortTaken(log)) => last_failure = log,
                Err(Exit::Failed(why)) => panic!("{why}"),
            }
        }
        panic!("influxd did not start in {START_ATTEMPTS} attempts (ports taken?): {last_failure}")
    }

    /// Polls `/ping` until it answers 204; tells a port clash (try again) from other failures.
    async fn wait_ready(&mut self) -> Result<(), Exit> {
        let deadline = tokio::time::Instant::now() + START_DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("influxd's status") {
                let log = self.log();
                return Err(if log.contains("address already in use") {
                    Exit::PortTaken(log)
                } else {
                    Exit::Failed(format!("influxd exited ({status}) before it was ready:\n{log}"))
                });
            }
            let ping = self.client.get(format!("{}/ping", self.url)).send().await;
            if ping.is_ok_and(|r| r.status() == reqwest::StatusCode::NO_CONTENT) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Exit::Failed(format!(
                    "influxd did not answer GET /ping with 204 within {START_DEADLINE:?}:\n{}",
                    self.log()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What influxd wrote to stderr and stdout so far.
    pub fn log(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.path().join(name));
        format!(
            "--- influxd stderr ---\n{}\n--- influxd stdout ---\n{}",
            read("stderr.log").unwrap_or_default(),
            read("stdout.log").unwrap_or_default()
        )
    }

    /// `POST /query` with `q` (and `db` when given) as a form; panics unless 200 without any
    /// error in the body.
    pub async fn admin(&self, db: Option<&str>, q: &str) {
        let mut form = vec![("q", q)];
        if let Some(db) = db {
            form.push(("db", db));
        }
        let response = self
            .client
            .post(format!("{}/query", self.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string(&form).unwrap())
            .send()
            .await
            .expect("influxd answers");
        let status = response.status();
        let body = response.text().await.unwrap();
        assert!(
            status == reqwest::StatusCode::OK && !body.contains("\"error\""),
            "influxd refused {q:?}: {status} {body}"
        );
    }

    /// `POST /write?db=<db>&precision=<precision>` with `body` (line protocol); panics unless 204.
    pub async fn write(&self, db: &str, precision: &str, body: impl Into<reqwest::Body>) {
        let response = self
            .client
            .post(format!("{}/write?db={db}&precision={precision}", self.url))
            .body(body)
            .send()
            .await
            .expect("influxd answers");
        let status = response.status();
        assert_eq!(
            status,
            reqwest::StatusCode::NO_CONTENT,
            "influxd refused the write: {}",
            response.text().await.unwrap()
        );
    }
}

impl Drop for Influxd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

enum Exit {
    PortTaken(String),
    Failed(String),
}

/// `influxd` on the PATH, else where the Debian package puts it.
fn find_influxd() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("influxd"))
        .chain([PathBuf::from("/usr/bin/influxd")])
        .find(|candidate| candidate.is_file())
}

/// A port nobody listens on now (bound to port 0 and dropped): influxd may still lose it to
/// another process before it binds, which [`Influxd::start`] retries.
pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// The config file: everything under `dir`, both listeners on loopback, nothing that writes
/// or phones home in the background. Keys as `influxd config` prints them for 1.6; unknown
/// keys are ignored by influxd, so `reporting-disabled` (upstream's spelling) and
/// `reporting-enabled` (Debian's) are both given.
fn write_config(dir: &Path, rpc: SocketAddr, http: SocketAddr) -> PathBuf {
    let d = dir.display();
    let config = format!(
        r#"reporting-disabled = true
reporting-enabled = false
bind-address = "{rpc}"

[meta]
  dir = "{d}/meta"
  logging-enabled = false

[data]
  dir = "{d}/data"
  wal-dir = "{d}/wal"
  query-log-enabled = false

[http]
  bind-address = "{http}"
  log-enabled = false
  pprof-enabled = false

[monitor]
  store-enabled = false

[continuous_queries]
  enabled = false

[subscriber]
  enabled = false

[logging]
  level = "error"
  suppress-logo = true
"#
    );
    let path = dir.join("influxdb.conf");
    std::fs::write(&path, config).expect("influxd config written");
    path
}
