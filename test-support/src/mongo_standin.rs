//! Starts the MongoDB stand-in (`tests/mongo_standin/bridge.py`: mockupdb + mongomock) for a
//! test, or points the test at a real server when `BUCKETD_TEST_MONGODB_URI` is set.
//!
//! The stand-in's Python environment is a venv under `<target>/mongo-standin-venv`
//! ([`crate::venv`]). Without python3 the tests fail with a message saying what to install:
//! they are never skipped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Set to run the store tests against a real MongoDB (7.0+) instead of the stand-in.
pub const REAL_SERVER_ENV: &str = "BUCKETD_TEST_MONGODB_URI";
pub use crate::venv::PYTHON_ENV;

const START_TIMEOUT: Duration = Duration::from_secs(60);

fn standin_dir() -> PathBuf {
    // This crate sits beside the tests, in the repository it serves.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mongo_standin")
}

/// The stand-in venv's interpreter, creating the venv if needed.
fn venv_python() -> PathBuf {
    crate::venv::python(
        "mongo-standin",
        &standin_dir().join("requirements.txt"),
        &format!(
            "the MongoDB store tests need Python 3 with venv and pip to run their MongoDB \
             stand-in (mockupdb + mongomock): install python3 and python3-venv, or set \
             {PYTHON_ENV} to an interpreter, or set {REAL_SERVER_ENV} to a MongoDB 7.0+ URI \
             (the fault-injection tests still need Python)"
        ),
    )
}

#[derive(Clone, Copy, Debug, Default)]
pub struct StandInOptions {
    /// Enable the bridge's fault injection (sensor keys `fault:code:<N>:...`, `fault:hangup`).
    pub faults: bool,
    /// Report and enforce this maxBsonObjectSize instead of 16 MiB.
    pub max_bson: Option<usize>,
    /// Report and enforce this maxWriteBatchSize instead of 100,000.
    pub max_write_batch: Option<usize>,
    /// Every update command waits this many milliseconds: a store that is up but slow.
    pub update_delay_ms: Option<u64>,
}

/// A running stand-in; killed on drop. Its stdin stays open while we live: the bridge exits
/// by itself when it closes, so even an aborted test leaves no process behind.
pub struct StandIn {
    child: Child,
    _stdin: ChildStdin,
    pub uri: String,
}

impl StandIn {
    pub fn start(options: StandInOptions) -> StandIn {
        let python = venv_python();
        let mut cmd = Command::new(python);
        cmd.arg("-u").arg(standin_dir().join("bridge.py"));
        if options.faults {
            cmd.arg("--faults");
        }
        if let Some(n) = options.max_bson {
            cmd.arg("--max-bson").arg(n.to_string());
        }
        if let Some(n) = options.max_write_batch {
            cmd.arg("--max-write-batch").arg(n.to_string());
        }
        if let Some(ms) = options.update_delay_ms {
            cmd.arg("--update-delay-ms").arg(ms.to_string());
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the MongoDB stand-in");
        let stdin = child.stdin.take().expect("stand-in stdin");
        let stdout = child.stdout.take().expect("stand-in stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            // Keep draining so the bridge never blocks on a full pipe.
            for _ in lines {}
        });
        let port = match rx.recv_timeout(START_TIMEOUT) {
            Ok(Some(Ok(line))) => line
                .strip_prefix("PORT ")
                .and_then(|p| p.trim().parse::<u16>().ok())
                .unwrap_or_else(|| panic!("stand-in printed {line:?} instead of its port")),
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the MongoDB stand-in did not start within {START_TIMEOUT:?}: {other:?}")
            }
        };
        StandIn {
            child,
            _stdin: stdin,
            uri: format!(
                "mongodb://127.0.0.1:{port}/?directConnection=true&serverSelectionTimeoutMS=20000"
            ),
        }
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a test's buckets live: a fresh stand-in, or a fresh database on the real server
/// named by `BUCKETD_TEST_MONGODB_URI` (dropped again on drop).
pub struct MongoBackend {
    pub uri: String,
    pub database: String,
    standin: Option<StandIn>,
}

impl MongoBackend {
    /// A `MongoStore` on this backend's database; panics when it cannot connect within 60 s.
    pub async fn connect(
        &self,
        limits: bucketd::store::BucketLimits,
    ) -> bucketd::store::mongo::MongoStore {
        let connect =
            bucketd::store::mongo::MongoStore::connect(&self.uri, &self.database, limits, None);
        tokio::time::timeout(Duration::from_secs(60), connect)
            .await
            .unwrap_or_else(|_| panic!("connect to {}: no answer within 60 s", self.uri))
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.uri))
    }

    /// The real server if configured, else a stand-in with default options.
    pub fn start() -> MongoBackend {
        match std::env::var(REAL_SERVER_ENV) {
            Ok(uri) if !uri.is_empty() => {
                static NEXT: AtomicU32 = AtomicU32::new(0);
                let database = format!(
                    "bucketd_test_{}_{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                );
                MongoBackend { uri, database, standin: None }
            }
            _ => Self::standin(StandInOptions::default()),
        }
    }

    /// Always a stand-in: for tests that need its fault injection or limits.
    pub fn standin(options: StandInOptions) -> MongoBackend {
        let standin = StandIn::start(options);
        MongoBackend {
            uri: standin.uri.clone(),
            database: "bucketd_test".into(),
            standin: Some(standin),
        }
    }

    pub fn is_real_server(&self) -> bool {
        self.standin.is_none()
    }
}

impl Drop for MongoBackend {
    fn drop(&mut self) {
        if self.standin.is_some() {
            return;
        }
        // Drop the test database on a thread of its own: Drop cannot await, and the test's
        // runtime may be shutting down.
        let uri = self.uri.clone();
        let database = self.database.clone();
        let cleanup = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                let client = mongodb::Client::with_uri_str(&uri).await?;
                tokio::time::timeout(Duration::from_secs(20), client.database(&database).drop())
                    .await
                    .map_err(|_| std::io::Error::other("timed out"))??;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
            })
            .map_err(|e| std::io::Error::other(e.to_string()))
        });
        if let Ok(Err(e)) = cleanup.join() {
            eprintln!("could not drop test database {}: {e}", self.database);
        }
    }
}
