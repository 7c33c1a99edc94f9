//! Starts the MongoDB stand-in (`tests/mongo_standin/bridge.py`: mockupdb + mongomock) for a
//! test, or points the test at a real server when `BUCKETD_TEST_MONGODB_URI` is set.
//!
//! The stand-in's Python environment is a venv under `<target>/mongo-standin-venv`, created
//! on first use (pip install -r requirements.txt) under a file lock so that tests running in
//! parallel (and in processes of their own) build it once. Without python3 the tests fail with a message saying what to
//! install: they are never skipped.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Set to run the store tests against a real MongoDB (7.0+) instead of the stand-in.
pub const REAL_SERVER_ENV: &str = "BUCKETD_TEST_MONGODB_URI";
/// Set to choose the Python interpreter that builds the stand-in's venv (default `python3`).
pub const PYTHON_ENV: &str = "BUCKETD_TEST_PYTHON";

const VENV_TIMEOUT: Duration = Duration::from_secs(600);
const START_TIMEOUT: Duration = Duration::from_secs(60);

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn standin_dir() -> PathBuf {
    manifest_dir().join("tests/mongo_standin")
}

fn target_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp, for integration tests only.
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR has a parent")
        .to_path_buf()
}

/// Runs `cmd` to completion within `limit`, returning its combined output; panics with that
/// output on failure or timeout.
fn run_bounded(mut cmd: Command, what: &str, limit: Duration) {
    let log_path = target_dir().join(format!("mongo-standin-{}.log", std::process::id()));
    let log = File::create(&log_path).expect("create stand-in setup log");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone log handle"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: could not start {cmd:?}: {e}"));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for setup step") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: timed out after {limit:?}; output in {}", log_path.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut output = String::new();
    let _ = File::open(&log_path).and_then(|mut f| f.read_to_string(&mut output));
    let _ = fs::remove_file(&log_path);
    assert!(status.success(), "{what} failed ({status}):\n{output}");
}

/// The stand-in venv's interpreter, creating the venv if needed.
fn venv_python() -> PathBuf {
    let python = std::env::var(PYTHON_ENV).unwrap_or_else(|_| "python3".to_owned());
    let requirements_path = standin_dir().join("requirements.txt");
    let requirements = fs::read_to_string(&requirements_path).expect("read requirements.txt");
    let venv = target_dir().join("mongo-standin-venv");
    let ready = venv.join("bucketd-ready");
    let venv_python = venv.join("bin/python");

    let lock =
        File::create(target_dir().join("mongo-standin-venv.lock")).expect("create venv lock");
    lock.lock().expect("lock the stand-in venv");
    if fs::read_to_string(&ready).ok().as_deref() != Some(requirements.as_str()) {
        if Command::new(&python).arg("--version").output().is_err() {
            panic!(
                "the MongoDB store tests need Python 3 with venv and pip to run their MongoDB \
                 stand-in (mockupdb + mongomock): install python3 and python3-venv, or set \
                 {PYTHON_ENV} to an interpreter, or set {REAL_SERVER_ENV} to a MongoDB 7.0+ URI \
                 (the fault-injection tests still need Python)"
            );
        }
        let _ = fs::remove_dir_all(&venv);
        let mut create = Command::new(&python);
        create.args(["-m", "venv"]).arg(&venv);
        run_bounded(create, "creating the stand-in venv", VENV_TIMEOUT);
        let mut install = Command::new(&venv_python);
        install.args(["-m", "pip", "install", "--disable-pip-version-check", "-q", "-r"]);
        install.arg(&requirements_path);
        run_bounded(install, "installing the stand-in's requirements", VENV_TIMEOUT);
        fs::write(&ready, &requirements).expect("mark the venv ready");
    }
    drop(lock);
    venv_python
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
