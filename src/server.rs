//! Wires configuration, store, buffers, flusher and listeners together, and runs them until a
//! shutdown signal.
//!
//! Shutdown order: stop accepting (HTTP graceful shutdown; the TCP accept loop ends and open
//! connections stop after their current read; the MQTT subscription acknowledges what it
//! stored and disconnects), wait up to `shutdown_timeout` for requests and
//! connections in progress, then drain the buffers into the store with another
//! `shutdown_timeout` (the refill bringing in readings spilled to the log shares that
//! deadline), and close the write-ahead log. So a stop takes at most twice
//! `shutdown_timeout`. Readings the store did not take by the deadline stay in the log and are
//! replayed at the next start; with `--ack=buffered` they are lost and [`run`] fails, naming
//! how many.
//!
//! Start-up order: bind, load (or create) the writer identity kept beside the log, open the
//! log, start the flusher, start the refill (with segments an
//! earlier process left, every push goes to the log only until the refill has replayed them),
//! serve. Start-up never waits for the store: replayed readings reach the buffers as the
//! store answers what it already holds.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context as _;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::status::{DeadLetterStatus, StatusCounts, StatusSource, WalCounts};
use crate::api::{OpsState, Surfaces};
use crate::buffer::Buffers;
use crate::config::Config;
use crate::databases::{Registry, RetentionBounds};
use crate::flush::dead_letter::DeadLetters;
use crate::flush::{Flusher, Settle, ShutdownReport};
use crate::http::auth::AuthPolicy;
use crate::http::serve::ServeConfig;
use crate::ingest::http::{HttpLimits, IngestState, NDJSON_PUSH_READINGS};
use crate::ingest::intake::{AckMode, Intake};
use crate::ingest::memory::RequestMemory;
use crate::ingest::mqtt;
use crate::ingest::tcp::{self, TCP_MAX_LINE_BYTES, TCP_MAX_PUSH_READINGS, TcpConfig};
use crate::model::Seq;
use crate::query::QueryState;
use crate::store::Store;
use crate::store::embedded::EmbeddedStore;
use crate::store::mongo::{MongoConfig, MongoStore};
use crate::tls::Tls;
use crate::tokens::LiveTokens;
use crate::wal::identity::{self, Identity};
use crate::wal::{Wal, refill};

/// Opens the store the configuration selects: MongoDB when `--mongodb-uri` is given, else the
/// embedded store in `--data-dir`. The one place that decides.
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let limits = config.bucket_limits();
    if let Some(uri) = &config.mongodb_uri {
        let mut mongo = MongoConfig::new(uri.as_str(), config.mongodb_database.as_str());
        mongo.limits = limits;
        mongo.retention = config.retention;
        mongo.rollup_retention = config.rollup_retention;
        let store = MongoStore::connect_with(mongo).await.with_context(|| {
            format!("cannot use MongoDB database {:?}", config.mongodb_database)
        })?;
        return Ok(Arc::new(store));
    }
    let dir = config.data_dir.clone();
    // Opening may replay redb's recovery after a crash: blocking file I/O.
    let cache = config.store_cache;
    let store =
        tokio::task::spawn_blocking(move || EmbeddedStore::open_with_cache(&dir, limits, cache))
            .await
            .context("embedded store open task failed")?
            .with_context(|| {
                format!("cannot open the embedded store in {}", config.data_dir.display())
            })?;
    Ok(Arc::new(store))
}

/// Loads the writer identity kept in the log's directory, creating it on the first start; in
/// every ack mode, since the stores' marks are per writer (docs/design/ingest.md, "Exactly once").
async fn open_identity(config: &Config) -> anyhow::Result<Identity> {
    let dir = config.wal_config().dir;
    let accept_moved = config.accept_moved_wal_dir;
    Ok(tokio::task::spawn_blocking(move || identity::load_or_create(&dir, accept_moved))
        .await
        .context("writer identity task failed")??)
}

/// Opens the write-ahead log: always with `--ack=wal`; with `--ack=buffered` only to replay
/// segments an earlier `--ack=wal` run left.
async fn open_wal(config: &Config) -> anyhow::Result<(Option<Arc<Wal>>, Vec<Seq>)> {
    let wal_config = config.wal_config();
    let dir = wal_config.dir.clone();
    if config.ack == AckMode::Buffered {
        if !crate::wal::has_segments(&dir) {
            return Ok((None, Vec::new()));
        }
        tracing::info!(dir = %dir.display(), "--ack=buffered: replaying the write-ahead log an earlier run left");
    }
    let (wal, recovered) = tokio::task::spawn_blocking(move || Wal::open(wal_config))
        .await
        .context("write-ahead log open task failed")??;
    if !recovered.is_empty() {
        tracing::info!(dir = %dir.display(), segments = recovered.len(), "write-ahead log holds segments of an earlier run");
    }
    Ok((Some(wal), recovered))
}

/// Binds, serves and shuts down: what the binary runs. Fails on a bind error or when readings
/// were lost at shutdown.
pub async fn run(
    config: Config,
    store: Arc<dyn Store>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let server = Server::bind(config, store).await?;
    tracing::info!(http = %server.http_addr(), tcp = ?server.tcp_addr(), tls = server.serves_tls(), "bucketd listening");
    let report = server.run(shutdown).await?;
    if report.unflushed > 0 && !report.kept_in_wal {
        anyhow::bail!(
            "{} readings could not be written before the shutdown deadline and are lost",
            report.unflushed
        );
    }
    Ok(())
}

/// Resolves on ctrl-c or (on Unix) SIGTERM: the binary's shutdown trigger.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("ctrl-c received, shutting down"),
        _ = terminate => tracing::info!("SIGTERM received, shutting down"),
    }
}

/// What `/api/v1/status` reports, read from the objects that own it.
struct ServerStatus {
    intake: Arc<Intake>,
    buffers: Arc<Buffers>,
    wal: Option<Arc<Wal>>,
    flush_errors: Arc<AtomicU64>,
    dead_letters: Arc<DeadLetters>,
}

impl StatusSource for ServerStatus {
    fn counts(&self) -> StatusCounts {
        StatusCounts {
            readings_accepted_total: self.intake.accepted_total(),
            buffered_readings: self.buffers.buffered() as u64,
            buffered_bytes: self.buffers.buffered_bytes() as u64,
            buffered_bound_bytes: self.buffers.bound_bytes() as u64,
            buffered_sensors: self.buffers.sensors() as u64,
            wal: self.wal.as_ref().map(|w| WalCounts {
                unsettled_readings: w.unsettled(),
                replaying_segments: w.replaying_segments(),
                bytes: w.used_bytes(),
                max_bytes: w.max_bytes(),
            }),
            flush_errors_total: self.flush_errors.load(Ordering::Relaxed),
            dead_letters: {
                let c = self.dead_letters.counts();
                DeadLetterStatus {
                    files: c.files,
                    bytes: c.bytes,
                    readings_total: c.readings_total,
                    last_reason: c.last_reason,
                }
            },
        }
    }
}

/// The database registry's file in the data directory.
pub const REGISTRY_FILE: &str = "databases.json";

/// A server whose listeners are bound (so their addresses are known, port 0 included) but that
/// serves nothing until [`Server::run`].
pub struct Server {
    config: Config,
    store: Arc<dyn Store>,
    buffers: Arc<Buffers>,
    metrics: PrometheusHandle,
    http: TcpListener,
    http_addr: SocketAddr,
    tcp: Option<(TcpListener, SocketAddr)>,
    auth: Arc<AuthPolicy>,
    tls: Option<Arc<Tls>>,
    /// Open with `--ack=wal`, and with `--ack=buffered` when an earlier run left segments.
    wal: Option<Arc<Wal>>,
    /// Segments an earlier process left, to replay.
    recovered: Vec<Seq>,
    identity: Identity,
    dead_letters: Arc<DeadLetters>,
    databases: Arc<Registry>,
}

impl Server {
    pub async fn bind(config: Config, store: Arc<dyn Store>) -> anyhow::Result<Server> {
        // Before binding: a refused configuration should not hold ports.
        let tokens = config.auth_tokens()?.into_iter().map(|t| t.0.into_bytes()).collect();
        let tokens = LiveTokens::load(tokens, config.token_store_path())?;
        if !tokens.current().is_on() && config.auth_metrics {
            anyhow::bail!("--auth-metrics needs --auth-token, --auth-token-file or a token store");
        }
        let auth = Arc::new(AuthPolicy { tokens, protect_operations: config.auth_metrics });
        config.retention_policy().map_err(|why| anyhow::anyhow!(why))?;
        let tls = config.tls_settings().map(Tls::load).transpose()?;
        let metrics = crate::metrics::install()?;
        let http = TcpListener::bind(&config.http_addr)
            .await
            .with_context(|| format!("cannot listen for HTTP on {}", config.http_addr))?;
        let http_addr = http.local_addr()?;
        let tcp = match &config.tcp_addr {
            None => None,
            Some(addr) => {
                let listener = TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen for TCP line protocol on {addr}"))?;
                let bound = listener.local_addr()?;
                Some((listener, bound))
            }
        };
        let buffers = Buffers::new(config.buffer_config());
        let identity = open_identity(&config).await?;
        let (wal, recovered) = open_wal(&config).await?;
        let dead_letters = Arc::new(config.dead_letters()?);
        let bounds =
            RetentionBounds { server: config.retention, per_database: store.can_expire_keys() };
        let databases = Arc::new(Registry::open(config.data_dir.join(REGISTRY_FILE), bounds)?);
        Ok(Server {
            config,
            store,
            buffers,
            metrics,
            http,
            http_addr,
            tcp,
            auth,
            tls,
            wal,
            recovered,
            identity,
            dead_letters,
            databases,
        })
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// Whether the listeners speak TLS (--tls-cert).
    pub fn serves_tls(&self) -> bool {
        self.tls.is_some()
    }

    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_ref().map(|(_, addr)| *addr)
    }

    /// The buffers readings are pushed into, for tests that watch the memory bound.
    pub fn buffers(&self) -> Arc<Buffers> {
        self.buffers.clone()
    }

    /// Serves until `shutdown` resolves, then shuts down in order (see the module doc) and
    /// reports what the final flush did.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<ShutdownReport> {
        let Server {
            config,
            store,
            buffers,
            metrics,
            http,
            http_addr: _,
            tcp,
            auth,
            tls,
            wal,
            recovered,
            identity,
            dead_letters,
            databases,
        } = self;
        tracing::info!(store = store.name(), ack = ?config.ack, writer = %identity.writer, "starting");
        let closing = store.clone();
        let settle = wal.clone().map(|w| w as Arc<dyn Settle>);
        let flusher = Flusher::spawn_settling(
            buffers.clone(),
            store.clone(),
            config.flush_config(identity.writer, Some(dead_letters.clone())),
            settle,
        );
        let stop = CancellationToken::new();
        let retention = crate::retention::spawn(
            store.clone(),
            config.retention_policy().map_err(|why| anyhow::anyhow!(why))?,
            databases.clone(),
            config.retention_interval,
            stop.clone(),
        );
        let seal = crate::seal::spawn(store.clone(), stop.clone());
        // Before anything is served: with segments to replay, pushes go to the log only until
        // the refill has caught up (docs/design/ingest.md, "The write-ahead log").
        let refill_stop = CancellationToken::new();
        let refill = wal.clone().map(|wal| {
            let stop = refill_stop.clone();
            let retention = config.retention;
            refill::spawn(
                wal,
                store.clone(),
                buffers.clone(),
                identity,
                retention,
                &recovered,
                stop,
            )
        });
        if config.ack == AckMode::Buffered && !recovered.is_empty() {
            // Without a log to spill into, pushes must wait until the replay is in.
            tracing::info!("--ack=buffered: waiting for the earlier run's log to be replayed");
            refill::caught_up(&buffers).await;
        }
        let acked_wal = if config.ack == AckMode::Wal { wal.clone() } else { None };
        let intake = Arc::new(Intake::new(buffers.clone(), acked_wal));
        let limits = Arc::new(config.input_limits());

        let request_memory = RequestMemory::new(config.request_budget());
        let app = crate::api::router(Surfaces {
            ingest: IngestState {
                intake: intake.clone(),
                limits: limits.clone(),
                http: HttpLimits {
                    max_body_bytes: config.body_limit(),
                    request_timeout: config.request_timeout,
                    max_concurrent_writes: config.max_concurrent_writes,
                    max_buffered_readings: config.max_buffered_readings.unwrap_or(usize::MAX),
                },
                memory: request_memory.clone(),
                dead_letters: Some(dead_letters.clone()),
                databases: databases.clone(),
            },
            query: {
                let mut query = QueryState::new(store.clone(), buffers.clone(), databases.clone());
                query.limits.statement_time = config.query_timeout;
                query
            },
            ops: OpsState {
                store,
                metrics,
                status: Arc::new(ServerStatus {
                    intake: intake.clone(),
                    buffers: buffers.clone(),
                    wal: wal.clone(),
                    flush_errors: flusher.errors(),
                    dead_letters: dead_letters.clone(),
                }),
            },
            auth: auth.clone(),
        });
        let serve_config = ServeConfig {
            max_connections: config.max_http_connections,
            header_timeout: config.http_header_timeout,
            idle_timeout: config.http_idle_timeout,
        };
        if let Some(tls) = &tls {
            tokio::spawn(tls.clone().watch(stop.clone()));
        }
        tokio::spawn(auth.tokens.clone().watch(stop.clone()));

        let mut http_task = tokio::spawn(crate::http::serve::serve(
            http,
            app,
            serve_config,
            tls.clone(),
            stop.clone(),
        ));
        let tcp_task = tcp.map(|(listener, _)| {
            let config = TcpConfig {
                max_connections: config.max_tcp_connections,
                max_connections_per_ip: config.max_tcp_connections_per_ip,
                // Half a body, so that a connection's longest line and one read beside it
                // fit the requests' share as a body does.
                max_line_bytes: TCP_MAX_LINE_BYTES.min(config.body_limit() / 2),
                idle_timeout: config.tcp_idle_timeout,
                max_push_readings: TCP_MAX_PUSH_READINGS
                    .min(config.max_buffered_readings.unwrap_or(usize::MAX)),
                memory: request_memory.clone(),
            };
            tokio::spawn(tcp::serve(
                listener,
                intake.clone(),
                limits.clone(),
                config,
                tls.clone(),
                stop.clone(),
            ))
        });

        let mqtt_task = match config.mqtt_config(identity.writer) {
            None => None,
            Some(mqtt) => {
                let database = databases
                    .get(config.mqtt_database.as_deref())
                    .map_err(|e| anyhow::anyhow!("--mqtt-database: {e}"))?;
                let sink = mqtt::Sink {
                    intake: intake.clone(),
                    limits: limits.in_database(database),
                    memory: request_memory.clone(),
                    max_push_readings: NDJSON_PUSH_READINGS
                        .min(config.max_buffered_readings.unwrap_or(usize::MAX)),
                };
                tracing::info!(broker = ?mqtt.broker, topics = ?mqtt.topics, client_id = mqtt.client_id, "MQTT: subscribing");
                Some(mqtt::spawn(mqtt, sink, stop.clone())?)
            }
        };

        // An HTTP server that ends by itself has failed; still drain what was accepted.
        let mut failure = None;
        tokio::select! {
            _ = shutdown => tracing::info!("shutdown: no longer accepting"),
            ended = &mut http_task => {
                failure = Some(match ended {
                    Ok(()) => anyhow::anyhow!("HTTP server stopped unexpectedly"),
                    Err(e) => anyhow::Error::new(e).context("HTTP server task failed"),
                });
            }
        }
        stop.cancel();

        let listeners = async {
            if failure.is_none() {
                let _ = (&mut http_task).await;
            }
            if let Some(task) = tcp_task {
                let _ = task.await;
            }
            if let Some(task) = mqtt_task {
                let _ = task.await;
            }
        };
        if tokio::time::timeout(config.shutdown_timeout, listeners).await.is_err() {
            // Requests still running may yet push; what they push after the final flush is lost,
            // so this is logged as the warning it is.
            tracing::warn!(
                timeout = ?config.shutdown_timeout,
                "requests or connections still open after the shutdown timeout; flushing anyway"
            );
            http_task.abort();
        }

        if let Some(task) = retention {
            // Stops between two steps; each step commits whole.
            let _ = task.await;
        }
        let _ = seal.await;

        // The final flush shares one deadline with the refill: spilled readings are brought in
        // and written while the deadline allows; what is left stays in the log.
        let deadline = tokio::time::Instant::now() + config.shutdown_timeout;
        let _ = tokio::time::timeout_at(deadline, refill::caught_up(&buffers)).await;
        refill_stop.cancel();
        if let Some(task) = refill {
            let _ = task.await;
        }
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let mut report = flusher.shutdown(remaining).await;
        if let Some(wal) = wal {
            // Joins the writer thread after its last sync.
            let closed = tokio::task::spawn_blocking(move || wal.close()).await;
            if let Err(e) = closed {
                tracing::error!(error = %e, "closing the write-ahead log failed");
            }
        }
        closing.close().await;
        report.kept_in_wal = config.ack == AckMode::Wal;
        if report.unflushed > 0 && report.kept_in_wal {
            tracing::warn!(
                flushed = report.flushed,
                unflushed = report.unflushed,
                "final flush incomplete; the rest stays in the write-ahead log for the next start"
            );
        } else if report.unflushed > 0 {
            tracing::error!(
                flushed = report.flushed,
                lost = report.unflushed,
                "final flush incomplete; with --ack=buffered these readings are lost"
            );
        } else {
            tracing::info!(flushed = report.flushed, "final flush complete");
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }
}
