//! Starts the whole server on 127.0.0.1:0 with a chosen store, and the stores tests need.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bucketd::buffer::Buffers;
use bucketd::config::Config;
use bucketd::flush::ShutdownReport;
use bucketd::model::{Batch, FieldValue, Reading, Seq, TimestampMs, WriterId};
use bucketd::server::Server;
use bucketd::store::memory::MemoryStore;
use bucketd::store::{
    BucketLimits, Order, RangeQuery, RollupQuery, RollupRow, SensorInfo, SensorQuery, Store,
    StoreError, WriteReport,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct TestServer {
    pub http: SocketAddr,
    pub tcp: Option<SocketAddr>,
    pub buffers: Arc<Buffers>,
    pub client: reqwest::Client,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<ShutdownReport>>,
    /// The write-ahead log's directory, unless the test chose one.
    _wal_dir: Option<tempfile::TempDir>,
    /// The dead-letter directory, unless the test chose one.
    _dead_letter_dir: Option<tempfile::TempDir>,
    /// The data directory (the database registry's), unless the test chose one.
    _data_dir: Option<tempfile::TempDir>,
}

impl TestServer {
    /// Starts a server with the in-memory store, HTTP only, and `args` added to the flags.
    pub async fn start(store: Arc<dyn Store>, args: &[&str]) -> TestServer {
        Self::start_inner(store, args, false).await
    }

    /// Same, with the raw TCP listener on too.
    pub async fn start_with_tcp(store: Arc<dyn Store>, args: &[&str]) -> TestServer {
        Self::start_inner(store, args, true).await
    }

    async fn start_inner(store: Arc<dyn Store>, args: &[&str], tcp: bool) -> TestServer {
        let mut all = vec!["bucketd", "--http-addr", "127.0.0.1:0"];
        if tcp {
            all.extend(["--tcp-addr", "127.0.0.1:0"]);
        }
        all.extend_from_slice(args);
        // Every server gets its own log directory (the default is under --data-dir, which
        // tests with other stores leave at the shared default).
        let wal_dir = (!args.contains(&"--wal-dir")).then(|| tempfile::tempdir().unwrap());
        let wal_path = wal_dir.as_ref().map(|d| d.path().to_str().unwrap().to_owned());
        if let Some(path) = &wal_path {
            all.extend(["--wal-dir", path.as_str()]);
        }
        // The same for the dead-letter directory (`<data-dir>/dead-letters` by default).
        let dead_dir = (!args.contains(&"--dead-letter-dir")).then(|| tempfile::tempdir().unwrap());
        let dead_path = dead_dir.as_ref().map(|d| d.path().to_str().unwrap().to_owned());
        if let Some(path) = &dead_path {
            all.extend(["--dead-letter-dir", path.as_str()]);
        }
        // And the data directory, where the database registry is kept.
        let data_dir = (!args.contains(&"--data-dir")).then(|| tempfile::tempdir().unwrap());
        let data_path = data_dir.as_ref().map(|d| d.path().to_str().unwrap().to_owned());
        if let Some(path) = &data_path {
            all.extend(["--data-dir", path.as_str()]);
        }
        let config = Config::from_args(all).expect("test flags parse");
        let server = Server::bind(config, store).await.expect("server binds");
        let http = server.http_addr();
        let tcp = server.tcp_addr();
        let buffers = server.buffers();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::builder()
            // Tests decide compression themselves.
            .no_gzip()
            .build()
            .unwrap();
        TestServer {
            http,
            tcp,
            buffers,
            client,
            stop,
            task,
            _wal_dir: wal_dir,
            _dead_letter_dir: dead_dir,
            _data_dir: data_dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.http, path)
    }

    pub async fn post(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request sent")
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.expect("request sent")
    }

    /// The sum of a metric's samples, every label set included.
    pub async fn metric(&self, name: &str) -> f64 {
        metric_sum(&self.get("/metrics").await.text().await.unwrap(), name)
    }

    /// Signals shutdown and waits for the server to finish its final flush.
    pub async fn shutdown(self) -> ShutdownReport {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("server stopped within 60 s")
            .expect("server task did not panic")
            .expect("server run succeeded")
    }
}

pub fn memory_store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new(BucketLimits::default()))
}

/// Waits until `cond` holds, polling; panics with `what` after `timeout`.
pub async fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !cond() {
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting until {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every stored reading of `sensor`, oldest first.
pub async fn stored(store: &dyn Store, sensor: &str) -> Vec<Reading> {
    let query = RangeQuery {
        sensor: sensor.into(),
        from: bucketd::model::MIN_TIMESTAMP_MS,
        to: bucketd::model::MAX_TIMESTAMP_MS,
        order: Order::Asc,
        limit: None,
    };
    store.readings(query).map(|r| r.expect("store read")).collect().await
}

/// What tells one reading from another in "exactly once" checks: sensor key, timestamp (ms)
/// and fields as text (numbers as `f64`, so a JSON integer and a line-protocol float of the
/// same value compare equal). Comparing these as multisets, unlike comparing totals, catches a
/// lost reading that a duplicate makes up for.
pub type Identity = (String, i64, String);

pub fn identity(sensor: &str, ts_ms: i64, fields: &[(&str, f64)]) -> Identity {
    let text: Vec<String> = fields.iter().map(|(name, v)| format!("{name}={v}")).collect();
    (sensor.to_owned(), ts_ms, text.join(","))
}

fn identity_of(sensor: &str, reading: &Reading) -> Identity {
    let text: Vec<String> = reading
        .fields
        .iter()
        .map(|(name, value)| match (value.as_f64(), value) {
            (Some(v), _) => format!("{}={v}", name.as_str()),
            (None, FieldValue::Str(s)) => format!("{}={s:?}", name.as_str()),
            (None, other) => format!("{}={other:?}", name.as_str()),
        })
        .collect();
    (sensor.to_owned(), reading.ts, text.join(","))
}

/// Every reading of every sensor in `store`, with how many times each is stored.
pub async fn stored_identities(store: &dyn Store) -> BTreeMap<Identity, usize> {
    let mut out = BTreeMap::new();
    let mut after = None;
    loop {
        let query = SensorQuery {
            database: Default::default(),
            tags: Vec::new(),
            measurement: None,
            after,
            limit: 1000,
        };
        let sensors = store.sensors(query).await.expect("store lists sensors");
        let Some(last) = sensors.last() else { break };
        after = Some(last.key.clone());
        for sensor in &sensors {
            for reading in stored(store, &sensor.key).await {
                *out.entry(identity_of(&sensor.key, &reading)).or_insert(0) += 1;
            }
        }
    }
    out
}

/// Every reading of `expected` is stored exactly once and nothing else is stored.
pub async fn assert_stored_exactly(store: &dyn Store, expected: &BTreeSet<Identity>) {
    assert_stored_once(store, expected, &BTreeSet::new()).await;
}

/// Every reading of `acked` is stored exactly once; readings of `maybe` (sent, never
/// acknowledged) at most once; nothing else.
pub async fn assert_stored_once(
    store: &dyn Store,
    acked: &BTreeSet<Identity>,
    maybe: &BTreeSet<Identity>,
) {
    let stored = stored_identities(store).await;
    let twice: Vec<_> = stored.iter().filter(|(_, n)| **n > 1).take(5).collect();
    let missing: Vec<_> = acked.iter().filter(|i| !stored.contains_key(*i)).collect();
    let extra: Vec<_> =
        stored.keys().filter(|i| !acked.contains(*i) && !maybe.contains(*i)).collect();
    assert!(
        twice.is_empty() && missing.is_empty() && extra.is_empty(),
        "{} readings stored more than once (e.g. {twice:?}), {} acknowledged ones missing \
         (e.g. {:?}), {} stored that were never sent or were refused (e.g. {:?})",
        stored.values().filter(|n| **n > 1).count(),
        missing.len(),
        &missing[..missing.len().min(5)],
        extra.len(),
        &extra[..extra.len().min(5)],
    );
}

/// The sum of the samples of metric `name` in Prometheus text: the name exactly, with or
/// without labels (so `bucketd_readings_buffered` is not also `..._buffered_peak`).
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with([' ', '{'])))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One JSON reading as bucketd's JSON API takes it.
pub fn json_reading(sensor: &str, ts_ms: i64, fields: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "sensor": sensor, "ts": ts_ms, "fields": fields })
}

/// A store that fails writes and pings while switched off, and counts what it refused:
/// what a MongoDB outage looks like to the flusher.
pub struct FlakyStore {
    pub inner: Arc<MemoryStore>,
    down: AtomicBool,
    pub failed_writes: AtomicUsize,
    /// While true, writes wait: a store that is writing, only slowly.
    hold: tokio::sync::watch::Sender<bool>,
    /// Sensor keys whose batches are refused for good (`StoreError::Rejected`).
    refuse: std::sync::Mutex<BTreeSet<String>>,
}

impl FlakyStore {
    pub fn new(inner: Arc<MemoryStore>) -> Arc<FlakyStore> {
        Arc::new(FlakyStore {
            inner,
            down: AtomicBool::new(false),
            failed_writes: AtomicUsize::new(0),
            hold: tokio::sync::watch::Sender::new(false),
            refuse: Default::default(),
        })
    }

    /// Refuses every batch of these sensors for good from now on (an empty list: none).
    pub fn refuse(&self, sensors: &[&str]) {
        *self.refuse.lock().unwrap() = sensors.iter().map(|s| (*s).to_owned()).collect();
    }

    /// While on, every write waits (without failing) until it is switched off.
    pub fn hold(&self, on: bool) {
        self.hold.send_replace(on);
    }

    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("test outage".into()))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl Store for FlakyStore {
    fn name(&self) -> &'static str {
        "flaky"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.check()
    }

    async fn write(
        &self,
        writer: WriterId,
        batches: &[Batch],
    ) -> Vec<Result<WriteReport, StoreError>> {
        if let Err(e) = self.check() {
            self.failed_writes.fetch_add(1, Ordering::SeqCst);
            return batches.iter().map(|_| Err(e.clone())).collect();
        }
        let _ = self.hold.subscribe().wait_for(|held| !held).await;
        let refused = self.refuse.lock().unwrap().clone();
        if refused.is_empty() {
            return self.inner.write(writer, batches).await;
        }
        let mut outcomes = Vec::with_capacity(batches.len());
        for batch in batches {
            if refused.iter().any(|r| r == batch.series.key()) {
                outcomes.push(Err(StoreError::Rejected("test: this sensor is refused".into())));
            } else {
                outcomes.extend(self.inner.write(writer, std::slice::from_ref(batch)).await);
            }
        }
        outcomes
    }

    async fn high_water(
        &self,
        writer: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        self.check()?;
        self.inner.high_water(writer, keys).await
    }

    fn readings(&self, query: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>> {
        self.inner.readings(query)
    }

    async fn rollups(&self, query: RollupQuery) -> Result<Vec<RollupRow>, StoreError> {
        self.inner.rollups(query).await
    }

    async fn sensors(&self, query: SensorQuery) -> Result<Vec<SensorInfo>, StoreError> {
        self.inner.sensors(query).await
    }
}

/// A store whose ping never answers, for `/ready`'s timeout.
pub struct HangingPingStore(pub Arc<MemoryStore>);

#[async_trait]
impl Store for HangingPingStore {
    fn name(&self) -> &'static str {
        "hanging"
    }
    async fn ping(&self) -> Result<(), StoreError> {
        std::future::pending().await
    }
    async fn write(
        &self,
        writer: WriterId,
        batches: &[Batch],
    ) -> Vec<Result<WriteReport, StoreError>> {
        self.0.write(writer, batches).await
    }
    async fn high_water(
        &self,
        writer: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        self.0.high_water(writer, keys).await
    }
    fn readings(&self, query: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>> {
        self.0.readings(query)
    }
    async fn rollups(&self, query: RollupQuery) -> Result<Vec<RollupRow>, StoreError> {
        self.0.rollups(query).await
    }
    async fn sensors(&self, query: SensorQuery) -> Result<Vec<SensorInfo>, StoreError> {
        self.0.sensors(query).await
    }
}

/// Runs `f` with a deadline so a hung server fails the test instead of the CI job.
pub async fn within<T>(what: &str, secs: u64, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {secs} s"))
}
