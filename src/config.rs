//! Command-line flags and their environment twins. Every flag can also be set through the
//! `BUCKETD_*` variable named in `--help`; a flag on the command line wins over the variable.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, ValueEnum};

use crate::buffer::BufferConfig;
use crate::flush::FlushConfig;
use crate::flush::dead_letter::{DeadLetterError, DeadLetters};
pub use crate::ingest::intake::AckMode;
use crate::ingest::mqtt::{Broker, MqttConfig, PayloadFormat, TopicTemplate};
use crate::ingest::validate::{InputLimits, KnownSeries, SeriesLimit};
use crate::model::WriterId;
use crate::store::{BucketLimits, Retention};
use crate::wal::WalConfig;

/// First and longest retry delay after a retriable store failure. Not flags: the first is short
/// so that a blip costs little latency, the last short enough that a recovered MongoDB is used
/// again within seconds.
const FLUSH_MIN_BACKOFF: Duration = Duration::from_millis(100);
const FLUSH_MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The smallest `--store-cache`: a few B-tree paths of pages, below which every read misses.
const MIN_STORE_CACHE: usize = 1 << 20;

/// What bucketd does instead of serving.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum Command {
    /// Makes, lists and revokes tokens in the token store; a running server takes the change
    /// within a second.
    Token(crate::tokens::cli::TokenArgs),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// bucketd: ingests sensor readings (JSON, InfluxDB line protocol) into hourly buckets.
#[derive(Clone, Debug, Parser)]
#[command(name = "bucketd", version, about)]
pub struct Config {
    /// Without a command, bucketd runs the server.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Address of the HTTP API (ingest, queries, /metrics, /health, /ready).
    #[arg(long, env = "BUCKETD_HTTP_ADDR", default_value = "127.0.0.1:8080")]
    pub http_addr: String,

    /// Address of the raw line-protocol TCP listener (newline-delimited, as InfluxDB's
    /// Graphite/UDP-style listeners and Telegraf's socket_writer send it). Off unless given.
    #[arg(long, env = "BUCKETD_TCP_ADDR")]
    pub tcp_addr: Option<String>,

    /// Directory of the embedded store (used when --mongodb-uri is not given), and of the
    /// list of databases and the token store with either store.
    #[arg(long, env = "BUCKETD_DATA_DIR", default_value = "./bucketd-data")]
    pub data_dir: PathBuf,

    /// The embedded store's page cache. Reads of pages outside it go to the file (and the
    /// OS's page cache); dashboards that read the same days again are faster with a cache
    /// that holds them (docs/performance.md). Counted in RSS beside --memory-budget.
    /// Accepts suffixes: `64MiB`, `1GiB`.
    #[arg(long, env = "BUCKETD_STORE_CACHE", default_value = "8MiB", value_parser = parse_store_cache)]
    pub store_cache: usize,

    /// MongoDB connection string; when set, MongoDB is the store instead of the embedded one.
    #[arg(long, env = "BUCKETD_MONGODB_URI", hide_env_values = true)]
    pub mongodb_uri: Option<String>,

    /// MongoDB database that holds the bucket collections.
    #[arg(long, env = "BUCKETD_MONGODB_DATABASE", default_value = "bucketd")]
    pub mongodb_database: String,

    /// How long raw readings are kept, e.g. `30d`: an hour's readings are deleted once the
    /// hour ended longer ago (MongoDB: a TTL index on the bucket's end; embedded: a background
    /// pass). Their hour statistics stay (see `--rollup-retention`). Kept forever when not given.
    #[arg(long, env = "BUCKETD_RETENTION", value_parser = parse_positive_duration)]
    pub retention: Option<Duration>,

    /// How long the hour statistics (count, min, max, sum, first, last per numeric field) of
    /// hours whose readings `--retention` deleted are kept, e.g. `400d`; at least
    /// `--retention`. Kept forever when not given.
    #[arg(long, env = "BUCKETD_ROLLUP_RETENTION", value_parser = parse_positive_duration)]
    pub rollup_retention: Option<Duration>,

    /// How often the embedded store's retention pass runs (each pass works in small
    /// transactions, so ingest and queries do not stall).
    #[arg(long, env = "BUCKETD_RETENTION_INTERVAL", default_value = "1m", value_parser = parse_positive_duration, hide = true)]
    pub retention_interval: Duration,

    /// The longest a reading waits in memory before it is written to the store, e.g. `250ms`,
    /// `10s`. Buffers are written sooner when they hold a bucket's worth of readings, when
    /// memory runs short, or when no write came in for a while; waiting longer makes fewer,
    /// larger store writes (the log keeps the readings safe and queries see them meanwhile).
    #[arg(long, env = "BUCKETD_FLUSH_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub flush_interval: Duration,

    /// Once no reading has been buffered for this long after writes, the embedded store gives
    /// the file space it no longer uses back to the file system (redb grows its file ahead of
    /// need). Writes wait in the buffers and queries wait while it runs. `0` never compacts.
    #[arg(long, env = "BUCKETD_COMPACT_AFTER_QUIET", default_value = "10s", value_parser = parse_duration)]
    pub compact_after_quiet: Duration,

    /// A bucket document holds at most this many readings (1 to 1,048,576); a buffer this
    /// full is flushed at once.
    #[arg(
        long,
        env = "BUCKETD_BUCKET_MAX_READINGS",
        default_value_t = 1000,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(BucketLimits::MAX_READINGS_CEILING))
    )]
    pub bucket_max_readings: u32,

    /// A bucket document's readings take at most this many (approximate BSON) bytes.
    #[arg(
        long,
        env = "BUCKETD_BUCKET_MAX_BYTES",
        default_value_t = 128_000,
        value_parser = parse_bucket_max_bytes
    )]
    pub bucket_max_bytes: u32,

    /// The memory budget, in bytes: what the buffers hold (readings waiting to be written and
    /// being written) and what write requests being parsed hold. Three quarters go to the
    /// buffers, one quarter to request bodies, NDJSON pieces and TCP connections' chunks of
    /// lines being parsed and pushed, with their parsed readings. Past it, HTTP writes
    /// get 503 with Retry-After and TCP connections stop being read; nothing acknowledged is
    /// dropped. From half of the buffers' share on, the larger buffers are written early. A
    /// body is charged four times its size, so bodies over a sixteenth of the budget get 413
    /// whatever `--max-body-bytes` says. The process's RSS is this plus the store's cache, the
    /// series index and the runtime (docs/performance.md). Accepts suffixes: `512MiB`, `2GiB`.
    #[arg(long, env = "BUCKETD_MEMORY_BUDGET", default_value = "512MiB", value_parser = parse_byte_size)]
    pub memory_budget: usize,

    /// An optional second bound on the buffers, in readings held (buffered or being written).
    #[arg(long, env = "BUCKETD_MAX_BUFFERED_READINGS", value_parser = parse_positive_usize, hide = true)]
    pub max_buffered_readings: Option<usize>,

    /// What a 2xx on a write means. `wal`: the readings are in the write-ahead log, fsync'd
    /// (they survive kill -9 and power loss). `buffered`: they are in memory only (lower
    /// latency; a crash loses what was not yet flushed: about one flush interval, more while
    /// the store is down).
    #[arg(long, env = "BUCKETD_ACK", value_enum, default_value_t = AckMode::Wal)]
    pub ack: AckMode,

    /// Directory of the write-ahead log. Default: `<data-dir>/wal` (also with MongoDB).
    #[arg(long, env = "BUCKETD_WAL_DIR")]
    pub wal_dir: Option<PathBuf>,

    /// Directory where readings the store refuses for good are kept, in line protocol with the
    /// store's reason, until `POST /api/v1/dead-letters/replay` writes them back. Default:
    /// `<data-dir>/dead-letters` (also with MongoDB).
    #[arg(long, env = "BUCKETD_DEAD_LETTER_DIR")]
    pub dead_letter_dir: Option<PathBuf>,

    /// Bound on the dead-letter directory's size. Refused batches that do not fit stay in the
    /// buffers (and the log) for retry, as while the store is down. Accepts suffixes.
    #[arg(long, env = "BUCKETD_DEAD_LETTER_MAX_BYTES", default_value = "1GiB", value_parser = parse_byte_size)]
    pub dead_letter_max_bytes: usize,

    /// The write-ahead log directory was moved or restored, not copied: keep the writer
    /// identity it carries and record its new place. Without it, a directory whose identity was
    /// created elsewhere is refused, since two instances sharing one identity lose data.
    #[arg(long, env = "BUCKETD_ACCEPT_MOVED_WAL_DIR")]
    pub accept_moved_wal_dir: bool,

    /// Group commit window of the write-ahead log: at most one fsync per interval, shared by
    /// every write that arrived meanwhile. `0s`, the default, syncs as soon as the previous
    /// sync finished: one fsync at a time, and every write that arrived during it shares the
    /// next, so the fsync's own duration paces the log. A window only lengthens each
    /// acknowledgement's wait, and a connection waits for its acknowledgement before it sends
    /// again: with a few busy connections the CPU idles meanwhile (docs/performance.md). A
    /// window still bounds the rate where every fsync is costly: `2ms` allows at most 500 a
    /// second.
    #[arg(long, env = "BUCKETD_WAL_SYNC_INTERVAL", default_value = "0s", value_parser = parse_duration)]
    pub wal_sync_interval: Duration,

    /// Bound on the write-ahead log's size on disk. Readings leave it once stored; while the
    /// store is down it grows, and past this bound writes get 503. Accepts suffixes.
    #[arg(long, env = "BUCKETD_WAL_MAX_BYTES", default_value = "1GiB", value_parser = parse_byte_size)]
    pub wal_max_bytes: usize,

    /// Where the log starts a new segment, instead of a sixteenth of `--wal-max-bytes` (within
    /// 1-64 MiB); at most half the bound. Hidden: for tests that need many segments, and so
    /// settled files written over, from little data.
    #[arg(long, env = "BUCKETD_WAL_SEGMENT_BYTES", value_parser = parse_byte_size, hide = true)]
    pub wal_segment_bytes: Option<usize>,

    /// On SIGTERM/ctrl-c: how long open requests and connections may take to finish, and then
    /// how long the final flush may take.
    #[arg(long, env = "BUCKETD_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// Largest HTTP body read whole (JSON documents, line-protocol writes), measured after
    /// gzip decompression too; larger bodies get 413. Accepts suffixes: `512KiB`, `32MiB`, `1GB`.
    /// NDJSON is streamed and not bound by this, only each of its lines is.
    #[arg(
        long,
        env = "BUCKETD_MAX_BODY_BYTES",
        default_value = "32MiB",
        value_parser = parse_byte_size
    )]
    pub max_body_bytes: usize,

    /// A write request that takes longer than this (including reading its body) gets 408.
    #[arg(long, env = "BUCKETD_REQUEST_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// How long one InfluxQL statement on `/query` may run; past it the statement fails with
    /// an error of its own (the request's other statements still run), so no statement can
    /// keep the server busy.
    #[arg(long, env = "BUCKETD_QUERY_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub query_timeout: Duration,

    /// Write requests handled at once; more are refused with 503 and Retry-After.
    #[arg(
        long,
        env = "BUCKETD_MAX_CONCURRENT_WRITES",
        default_value_t = 512,
        value_parser = parse_positive_usize
    )]
    pub max_concurrent_writes: usize,

    /// Open raw TCP connections; a connection over the limit is accepted and closed at once.
    #[arg(
        long,
        env = "BUCKETD_MAX_TCP_CONNECTIONS",
        default_value_t = 1000,
        value_parser = parse_positive_usize
    )]
    pub max_tcp_connections: usize,

    /// A raw TCP connection that sends nothing for this long is closed.
    #[arg(long, env = "BUCKETD_TCP_IDLE_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
    pub tcp_idle_timeout: Duration,

    /// Open HTTP connections; one more is accepted and closed at once.
    #[arg(
        long,
        env = "BUCKETD_MAX_HTTP_CONNECTIONS",
        default_value_t = 10_000,
        value_parser = parse_positive_usize
    )]
    pub max_http_connections: usize,

    /// An HTTP client must send a request's whole header within this time of its first byte,
    /// or the connection is closed (slowloris).
    #[arg(long, env = "BUCKETD_HTTP_HEADER_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    pub http_header_timeout: Duration,

    /// An HTTP connection with no request in progress that sends nothing for this long is
    /// closed (keep-alive idle).
    #[arg(long, env = "BUCKETD_HTTP_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_positive_duration)]
    pub http_idle_timeout: Duration,

    /// Open raw TCP connections from one IP address; one more from it is accepted and closed
    /// at once.
    #[arg(
        long,
        env = "BUCKETD_MAX_TCP_CONNECTIONS_PER_IP",
        default_value_t = 100,
        value_parser = parse_positive_usize
    )]
    pub max_tcp_connections_per_ip: usize,

    /// Distinct series (sensor keys) this process accepts readings for; a reading of a new
    /// series past it is rejected (reason `cardinality`). Counted per process since start.
    #[arg(
        long,
        env = "BUCKETD_MAX_SERIES",
        default_value_t = 1_000_000,
        value_parser = parse_positive_usize
    )]
    pub max_series: usize,

    /// A token required on the ingest and query routes (repeatable; the environment variable
    /// takes a comma-separated list). Authentication is off when no token is configured.
    #[arg(
        long = "auth-token",
        env = "BUCKETD_AUTH_TOKEN",
        value_delimiter = ',',
        hide_env_values = true,
        value_parser = parse_token
    )]
    pub auth_token: Vec<Secret>,

    /// A file of tokens, one per line; blank lines and lines starting with `#` are skipped.
    /// Adds to --auth-token.
    #[arg(long, env = "BUCKETD_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,

    /// The token store: tokens made by `bucketd token create`, kept as hashes with their
    /// scopes, read again while the server runs. Authentication is on while it exists.
    /// Default: `<data-dir>/tokens.json`.
    #[arg(long, env = "BUCKETD_TOKEN_STORE")]
    pub token_store: Option<PathBuf>,

    /// Require a token on /health, /ready and /metrics too (open by default).
    #[arg(long, env = "BUCKETD_AUTH_METRICS")]
    pub auth_metrics: bool,

    /// Allow the raw TCP listener (which has no authentication) while tokens are configured.
    /// Without it, --tcp-addr with tokens refuses to start.
    #[arg(long, env = "BUCKETD_TCP_ALLOW_UNAUTHENTICATED")]
    pub tcp_allow_unauthenticated: bool,

    /// Serve TLS on the HTTP and raw TCP listeners with this certificate chain (PEM, leaf
    /// first). Needs --tls-key. Both files are read again when they change (see
    /// --tls-reload-interval): new connections use the new ones, open connections go on.
    #[arg(long, env = "BUCKETD_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "BUCKETD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// CA certificates (PEM) for mutual TLS: every client must present a certificate one of
    /// them issued. The raw TCP listener is then authenticated, and runs beside auth tokens
    /// without --tcp-allow-unauthenticated.
    #[arg(long, env = "BUCKETD_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// The lowest TLS version a client may use.
    #[arg(long, env = "BUCKETD_TLS_MIN_VERSION", value_enum, default_value = "1.2")]
    pub tls_min_version: crate::tls::MinVersion,

    /// A TLS handshake must be done within this time of the connection's accept, or the
    /// connection is closed.
    #[arg(long, env = "BUCKETD_TLS_HANDSHAKE_TIMEOUT", default_value = "10s", value_parser = parse_positive_duration)]
    pub tls_handshake_timeout: Duration,

    /// How often the TLS files are compared with the ones in use.
    #[arg(long, env = "BUCKETD_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_positive_duration)]
    pub tls_reload_interval: Duration,

    /// MQTT broker to subscribe to: mqtt://[user[:password]@]host[:port], or mqtts:// for TLS
    /// (percent-encode special characters of the user and password). Off unless given.
    #[arg(long, env = "BUCKETD_MQTT_URL", value_parser = parse_broker)]
    pub mqtt_url: Option<Broker>,

    /// Topic filter of the MQTT subscription, QoS 1, wildcards allowed (`sensors/#`); repeat
    /// the flag (or separate with commas in the variable) for more.
    #[arg(long = "mqtt-topic", env = "BUCKETD_MQTT_TOPICS", value_delimiter = ',')]
    pub mqtt_topics: Vec<String>,

    /// Client id of bucketd's persistent MQTT session; default `bucketd-<writer id>`, which
    /// stays the same across restarts with the same --wal-dir.
    #[arg(long, env = "BUCKETD_MQTT_CLIENT_ID")]
    pub mqtt_client_id: Option<String>,

    /// How MQTT payloads are read: line protocol (`line`), bucketd's JSON readings (`json`), a
    /// plain number named by its topic (`number`), or `auto`: JSON when it starts with `{` or
    /// `[`, a number when it is one, else line protocol.
    #[arg(long, env = "BUCKETD_MQTT_PAYLOAD", value_enum, default_value = "auto")]
    pub mqtt_payload: PayloadFormat,

    /// Names a plain number from its topic: `/`-separated levels of literal text, `+` (any),
    /// `{measurement}`, `{field}`, or `{tag}` (that level is the tag's value). Example:
    /// `{site}/{room}/{field}` stores `21.5` on `home/kitchen/temperature` as
    /// `mqtt,room=kitchen,site=home temperature=21.5`.
    #[arg(long, env = "BUCKETD_MQTT_TOPIC_TEMPLATE")]
    pub mqtt_topic_template: Option<TopicTemplate>,

    /// The database MQTT readings go to; the default database when not given.
    #[arg(long, env = "BUCKETD_MQTT_DATABASE")]
    pub mqtt_database: Option<String>,

    /// PEM certificates to trust for an mqtts:// broker, instead of the system's roots.
    #[arg(long, env = "BUCKETD_MQTT_CA")]
    pub mqtt_ca: Option<PathBuf>,

    /// Log output format. The level comes from RUST_LOG (default `info`).
    #[arg(long, env = "BUCKETD_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Config {
    /// Parses flags from `args` (the first item is the program name), ignoring nothing: this is
    /// what tests use to build a configuration exactly as the binary would.
    pub fn from_args<I, T>(args: I) -> Result<Config, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let config = Config::try_parse_from(args)?;
        let conflict = |why: String| {
            clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, format!("{why}\n"))
        };
        config.retention_policy().map_err(conflict)?;
        config.check_mqtt().map_err(conflict)?;
        Ok(config)
    }

    fn check_mqtt(&self) -> Result<(), String> {
        let needs_url = [
            (!self.mqtt_topics.is_empty(), "--mqtt-topic"),
            (self.mqtt_client_id.is_some(), "--mqtt-client-id"),
            (self.mqtt_topic_template.is_some(), "--mqtt-topic-template"),
            (self.mqtt_database.is_some(), "--mqtt-database"),
            (self.mqtt_ca.is_some(), "--mqtt-ca"),
        ];
        match &self.mqtt_url {
            None => match needs_url.iter().find(|(given, _)| *given) {
                Some((_, flag)) => Err(format!("{flag} needs --mqtt-url")),
                None => Ok(()),
            },
            Some(_) if self.mqtt_topics.is_empty() => {
                Err("--mqtt-url needs at least one --mqtt-topic to subscribe to".into())
            }
            Some(_)
                if self.mqtt_payload == PayloadFormat::Number
                    && self.mqtt_topic_template.is_none() =>
            {
                Err("--mqtt-payload number needs --mqtt-topic-template to name what it stores"
                    .into())
            }
            Some(_) => Ok(()),
        }
    }

    /// The MQTT subscription, if `--mqtt-url` asks for one; `writer` names the default client.
    pub fn mqtt_config(&self, writer: WriterId) -> Option<MqttConfig> {
        Some(MqttConfig {
            broker: self.mqtt_url.clone()?,
            topics: self.mqtt_topics.clone(),
            client_id: self.mqtt_client_id.clone().unwrap_or_else(|| format!("bucketd-{writer}")),
            payload: self.mqtt_payload,
            template: self.mqtt_topic_template.clone(),
            ca: self.mqtt_ca.clone(),
            max_message_bytes: self.body_limit(),
            keep_alive: Duration::from_secs(30),
        })
    }

    /// The retention of raw readings and of hour statistics; `Err` when the statistics would
    /// go before the readings they summarise.
    pub fn retention_policy(&self) -> Result<Retention, String> {
        match (self.retention, self.rollup_retention) {
            (None, Some(_)) => Err("--rollup-retention needs --retention: readings are kept \
                                    forever, and their statistics cannot go before them"
                .into()),
            (Some(raw), Some(rollups)) if rollups < raw => Err(format!(
                "--rollup-retention ({}) must be at least --retention ({})",
                humantime::format_duration(rollups),
                humantime::format_duration(raw)
            )),
            (raw, rollups) => Ok(Retention { raw, rollups }),
        }
    }

    pub fn bucket_limits(&self) -> BucketLimits {
        BucketLimits { max_readings: self.bucket_max_readings, max_bytes: self.bucket_max_bytes }
    }

    /// The buffers' share of `--memory-budget`.
    pub fn buffer_budget(&self) -> usize {
        self.memory_budget - self.request_budget()
    }

    /// The share of `--memory-budget` that write requests being read and parsed may hold.
    pub fn request_budget(&self) -> usize {
        self.memory_budget / 4
    }

    /// The largest body read whole: `--max-body-bytes`, but no more than one request may ever
    /// be charged (four times its body) from the requests' share of the budget, so that a
    /// body too large for it gets 413 rather than a 503 its client would retry forever.
    pub fn body_limit(&self) -> usize {
        self.max_body_bytes.min(self.request_budget() / 4).max(1)
    }

    pub fn buffer_config(&self) -> BufferConfig {
        BufferConfig {
            max_buffered_bytes: self.buffer_budget(),
            max_buffered_readings: self.max_buffered_readings.unwrap_or(usize::MAX),
            // A buffer that already fills a bucket gains nothing by waiting.
            max_batch_readings: self.bucket_max_readings as usize,
            flush_interval: self.flush_interval,
        }
    }

    pub fn wal_config(&self) -> WalConfig {
        let max_bytes = self.wal_max_bytes as u64;
        WalConfig {
            dir: self.wal_dir.clone().unwrap_or_else(|| self.data_dir.join("wal")),
            sync_interval: self.wal_sync_interval,
            max_bytes,
            // Small enough that settled readings free disk soon, large enough that a busy log
            // does not churn files: a sixteenth of the bound, within [1 MiB, 64 MiB], and at
            // most half the bound: only a segment no longer appended to is ever deleted, so a
            // log of one segment would stay full for good once it filled.
            segment_bytes: self
                .wal_segment_bytes
                .map_or((max_bytes / 16).clamp(1 << 20, 64 << 20), |b| b as u64)
                .min(max_bytes / 2),
        }
    }

    /// `writer`: this process's identity (`wal::identity`), which the flusher writes under;
    /// `dead_letters`: where it keeps what the store refuses.
    pub fn flush_config(
        &self,
        writer: WriterId,
        dead_letters: Option<Arc<DeadLetters>>,
    ) -> FlushConfig {
        FlushConfig {
            writer,
            min_backoff: FLUSH_MIN_BACKOFF,
            max_backoff: FLUSH_MAX_BACKOFF,
            dead_letters,
            compact_after_quiet: Some(self.compact_after_quiet).filter(|d| !d.is_zero()),
        }
    }

    /// Opens the dead-letter directory (`--dead-letter-dir`, bounded by
    /// `--dead-letter-max-bytes`).
    pub fn dead_letters(&self) -> Result<DeadLetters, DeadLetterError> {
        let dir =
            self.dead_letter_dir.clone().unwrap_or_else(|| self.data_dir.join("dead-letters"));
        DeadLetters::open(dir, self.dead_letter_max_bytes as u64)
    }

    /// The input limits, with a fresh series bound: call once per server, since the bound
    /// counts the series of everything that shares it.
    pub fn input_limits(&self) -> InputLimits {
        InputLimits {
            series: Some(Arc::new(SeriesLimit::new(self.max_series))),
            // Room for every series the cardinality bound admits: a cache smaller than the
            // fleet forgets everything each time it fills, and every line then pays the full
            // parse, validation and admission (a fleet larger than the cache spent much of its
            // time there).
            known: Arc::new(KnownSeries::new(self.max_series)),
            ..InputLimits::default()
        }
    }

    /// The listeners' TLS, when --tls-cert is given.
    pub fn tls_settings(&self) -> Option<crate::tls::TlsSettings> {
        Some(crate::tls::TlsSettings {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.tls_client_ca.clone(),
            min_version: self.tls_min_version,
            handshake_timeout: self.tls_handshake_timeout,
            reload_interval: self.tls_reload_interval,
        })
    }

    /// Where the token store is (`--token-store`, else under `--data-dir`).
    pub fn token_store_path(&self) -> PathBuf {
        self.token_store.clone().unwrap_or_else(|| self.data_dir.join("tokens.json"))
    }

    /// Every configured token: the flags' and the token file's. Reads the file; at start-up.
    pub fn auth_tokens(&self) -> anyhow::Result<Vec<Secret>> {
        let mut tokens = self.auth_token.clone();
        if let Some(path) = &self.auth_token_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the token file {}", path.display()))?;
            let before = tokens.len();
            tokens.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(|l| Secret(l.to_owned())),
            );
            if tokens.len() == before {
                // Asking for a file means asking for auth: an empty one must not turn it off.
                anyhow::bail!("the token file {} holds no token", path.display());
            }
        }
        let clients_verified = self.tls_client_ca.is_some();
        if (!tokens.is_empty() || self.token_store_path().exists())
            && self.tcp_addr.is_some()
            && !self.tcp_allow_unauthenticated
            && !clients_verified
        {
            anyhow::bail!(
                "--tcp-addr serves line protocol without authentication, but auth tokens are \
                 configured: drop --tcp-addr, require client certificates with --tls-client-ca, \
                 or pass --tcp-allow-unauthenticated to run it anyway (e.g. on a private network)"
            );
        }
        Ok(tokens)
    }
}

/// A secret from the configuration; `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl AsRef<[u8]> for Secret {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

fn parse_token(s: &str) -> Result<Secret, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("a token cannot be empty".into());
    }
    Ok(Secret(t.to_owned()))
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be more than 0".into()),
        d => Ok(d),
    }
}

/// Humane durations: `250ms`, `1s`, `2m`, `1h 30m`, `30d`.
fn parse_broker(s: &str) -> Result<Broker, String> {
    s.parse()
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 250ms, 1s, 2m, 30d)"))
}

fn parse_positive_usize(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_store_cache(s: &str) -> Result<usize, String> {
    let bytes = parse_byte_size(s)?;
    if bytes < MIN_STORE_CACHE {
        return Err(format!("at least 1MiB, got {bytes} bytes"));
    }
    Ok(bytes)
}

fn parse_bucket_max_bytes(s: &str) -> Result<u32, String> {
    let n = parse_byte_size(s)?;
    let ceiling = BucketLimits::MAX_BYTES_CEILING as usize;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    if n > ceiling {
        return Err(format!(
            "{n} is more than {ceiling}, the largest bucket that still fits MongoDB's 16 MiB \
             document limit with room for its header and statistics"
        ));
    }
    Ok(n as u32)
}

/// A byte count, optionally with a unit: `B`, `KB`/`MB`/`GB` (powers of 1000) or
/// `KiB`/`MiB`/`GiB` (powers of 1024); case-insensitive, `k`/`m`/`g` alone mean the binary units.
pub fn parse_byte_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '_').unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let digits: String = digits.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() {
        return Err(format!("{s:?} is not a byte size (examples: 1048576, 512KiB, 32MiB)"));
    }
    let n: u64 = digits.parse().map_err(|e| format!("{s:?}: {e}"))?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "mb" => 1000 * 1000,
        "gb" => 1000 * 1000 * 1000,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        other => return Err(format!("unknown unit {other:?} (use B, KiB, MiB, GiB, KB, MB, GB)")),
    };
    n.checked_mul(multiplier)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &[&str]) -> Result<Config, clap::Error> {
        let mut args = vec!["bucketd"];
        args.extend_from_slice(extra);
        Config::from_args(args)
    }

    /// Only a segment no longer appended to is deleted, so a log must hold at least two:
    /// with one, a small `--wal-max-bytes` that filled stayed full after everything was stored.
    #[test]
    fn a_log_always_has_room_for_two_segments() {
        for max in ["64KiB", "96KiB", "1MiB", "2MiB", "16MiB", "1GiB", "8GiB"] {
            let w = parse(&["--wal-max-bytes", max]).unwrap().wal_config();
            assert!(w.segment_bytes * 2 <= w.max_bytes, "{max}: {} segment bytes", w.segment_bytes);
        }
        assert_eq!(parse(&[]).unwrap().wal_config().segment_bytes, 64 << 20);
        // The hidden test flag too.
        let w = parse(&["--wal-segment-bytes", "64KiB"]).unwrap().wal_config();
        assert_eq!(w.segment_bytes, 64 << 10);
        let w = parse(&["--wal-segment-bytes", "4MiB", "--wal-max-bytes", "2MiB"]).unwrap();
        assert_eq!(w.wal_config().segment_bytes, 1 << 20);
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.http_addr, "127.0.0.1:8080");
        assert_eq!(c.tcp_addr, None);
        assert_eq!(c.data_dir, PathBuf::from("./bucketd-data"));
        assert_eq!(c.mongodb_database, "bucketd");
        assert_eq!(c.retention, None);
        assert_eq!(c.flush_interval, Duration::from_secs(60));
        assert_eq!(c.compact_after_quiet, Duration::from_secs(10));
        assert_eq!(c.bucket_limits(), BucketLimits { max_readings: 1000, max_bytes: 128_000 });
        assert_eq!(c.max_buffered_readings, None);
        assert_eq!(c.memory_budget, 512 << 20);
        assert_eq!(c.store_cache, crate::store::embedded::DEFAULT_CACHE_BYTES);
        assert_eq!((c.buffer_budget(), c.request_budget()), (384 << 20, 128 << 20));
        assert_eq!(c.wal_sync_interval, Duration::ZERO);
        assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
        assert_eq!(c.max_body_bytes, 32 << 20);
        assert_eq!(c.body_limit(), 32 << 20, "the default budget takes a largest body");
        assert_eq!(c.request_timeout, Duration::from_secs(60));
        assert_eq!(c.tcp_idle_timeout, Duration::from_secs(300));
        assert_eq!(c.log_format, LogFormat::Text);
        assert_eq!(c.max_http_connections, 10_000);
        assert_eq!(c.http_header_timeout, Duration::from_secs(10));
        assert_eq!(c.http_idle_timeout, Duration::from_secs(60));
        assert_eq!(c.max_tcp_connections_per_ip, 100);
        assert_eq!(c.max_series, 1_000_000);
        assert!(c.auth_token.is_empty() && c.auth_token_file.is_none());
        assert!(!c.auth_metrics && !c.tcp_allow_unauthenticated);
        assert!(c.auth_tokens().unwrap().is_empty());
    }

    #[test]
    fn tokens_come_from_flags_and_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(&file, "# ops team\n\n  t3  \nt4\n").unwrap();
        let file = file.to_str().unwrap();
        let c = parse(&["--auth-token", "t1", "--auth-token", "t2", "--auth-token-file", file])
            .unwrap();
        let tokens: Vec<String> = c.auth_tokens().unwrap().into_iter().map(|s| s.0).collect();
        assert_eq!(tokens, ["t1", "t2", "t3", "t4"]);
        assert_eq!(format!("{:?}", c.auth_token), "[Secret(..), Secret(..)]");
        assert!(parse(&["--auth-token", " "]).is_err());

        let empty = dir.path().join("empty");
        std::fs::write(&empty, "# nothing\n").unwrap();
        let c = parse(&["--auth-token-file", empty.to_str().unwrap()]).unwrap();
        assert!(c.auth_tokens().unwrap_err().to_string().contains("holds no token"));
        let c = parse(&["--auth-token-file", "/nonexistent/tokens"]).unwrap();
        assert!(c.auth_tokens().is_err());
    }

    #[test]
    fn tcp_without_auth_needs_consent() {
        let c = parse(&["--auth-token", "t", "--tcp-addr", "127.0.0.1:0"]).unwrap();
        let err = c.auth_tokens().unwrap_err().to_string();
        assert!(err.contains("--tcp-allow-unauthenticated"), "{err}");
        let c = parse(&[
            "--auth-token",
            "t",
            "--tcp-addr",
            "127.0.0.1:0",
            "--tcp-allow-unauthenticated",
        ])
        .unwrap();
        assert_eq!(c.auth_tokens().unwrap().len(), 1);
        assert!(parse(&["--http-header-timeout", "0s"]).is_err());
        // Client certificates authenticate the TCP listener.
        let c = parse(&[
            "--auth-token",
            "t",
            "--tcp-addr",
            "127.0.0.1:0",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--tls-client-ca",
            "ca.pem",
        ])
        .unwrap();
        assert_eq!(c.auth_tokens().unwrap().len(), 1);
    }

    #[test]
    fn tls_flags_come_together() {
        assert!(parse(&[]).unwrap().tls_settings().is_none());
        assert!(parse(&["--tls-cert", "c.pem"]).is_err(), "a certificate needs its key");
        assert!(parse(&["--tls-key", "k.pem"]).is_err());
        assert!(parse(&["--tls-client-ca", "ca.pem"]).is_err(), "mutual TLS needs TLS");
        assert!(parse(&["--tls-min-version", "1.1"]).is_err());
        let c = parse(&["--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-min-version", "1.3"])
            .unwrap();
        let tls = c.tls_settings().unwrap();
        assert_eq!((tls.cert.to_str(), tls.key.to_str()), (Some("c.pem"), Some("k.pem")));
        assert_eq!(tls.min_version, crate::tls::MinVersion::Tls13);
        assert_eq!(tls.handshake_timeout, Duration::from_secs(10));
        assert!(tls.client_ca.is_none());
    }

    #[test]
    fn humane_durations_parse() {
        let c = parse(&["--flush-interval", "250ms", "--retention", "30d"]).unwrap();
        assert_eq!(c.flush_interval, Duration::from_millis(250));
        assert_eq!(c.retention, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse(&["--flush-interval", "soon"]).is_err());
    }

    #[test]
    fn rollup_retention_is_at_least_the_retention() {
        let c = parse(&["--retention", "30d", "--rollup-retention", "400d"]).unwrap();
        let policy = c.retention_policy().unwrap();
        assert_eq!(policy.rollups, Some(Duration::from_secs(400 * 86_400)));
        assert_eq!(parse(&[]).unwrap().retention_policy().unwrap(), Retention::default());
        let e = parse(&["--retention", "30d", "--rollup-retention", "7d"]).unwrap_err();
        assert!(e.to_string().contains("must be at least --retention (30days)"), "{e}");
        let e = parse(&["--rollup-retention", "7d"]).unwrap_err();
        assert!(e.to_string().contains("needs --retention"), "{e}");
        assert!(parse(&["--retention", "0s"]).is_err());
    }

    #[test]
    fn a_store_cache_below_a_mebibyte_is_refused() {
        assert_eq!(parse(&["--store-cache", "1GiB"]).unwrap().store_cache, 1 << 30);
        let err = parse(&["--store-cache", "100KiB"]).unwrap_err().to_string();
        assert!(err.contains("at least 1MiB"), "{err}");
    }

    #[test]
    fn bucket_max_bytes_is_capped_with_a_clear_error() {
        let ceiling = BucketLimits::MAX_BYTES_CEILING.to_string();
        assert_eq!(parse(&["--bucket-max-bytes", &ceiling]).unwrap().bucket_max_bytes, 16_252_928);
        let err = parse(&["--bucket-max-bytes", "16MiB"]).unwrap_err().to_string();
        assert!(err.contains("16 MiB document limit"), "{err}");
        assert!(parse(&["--bucket-max-bytes", "0"]).is_err());
        assert!(parse(&["--bucket-max-readings", "0"]).is_err());
        assert!(parse(&["--max-buffered-readings", "0"]).is_err());
    }

    #[test]
    fn bucket_max_readings_is_capped() {
        let most = parse(&["--bucket-max-readings", "1048576"]).unwrap();
        assert_eq!(most.bucket_max_readings, BucketLimits::MAX_READINGS_CEILING);
        let err = parse(&["--bucket-max-readings", "1048577"]).unwrap_err().to_string();
        assert!(err.contains("1..=1048576"), "{err}");
    }

    #[test]
    fn byte_sizes_take_units() {
        assert_eq!(parse_byte_size("1024"), Ok(1024));
        assert_eq!(parse_byte_size("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_byte_size("32mib"), Ok(32 << 20));
        assert_eq!(parse_byte_size("2MB"), Ok(2_000_000));
        assert_eq!(parse_byte_size("1_000"), Ok(1000));
        assert!(parse_byte_size("MiB").is_err());
        assert!(parse_byte_size("12 parsecs").is_err());
        assert!(parse_byte_size("99999999999999999999GiB").is_err());
    }

    #[test]
    fn environment_twins_are_read() {
        // Every flag must have a BUCKETD_* twin; clap records it on the argument.
        let cmd = <Config as clap::CommandFactory>::command();
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            let env = arg.get_env().unwrap_or_else(|| panic!("--{id} has no env twin"));
            let expected = format!("BUCKETD_{}", id.to_ascii_uppercase());
            assert_eq!(env.to_str(), Some(expected.as_str()));
        }
    }

    #[test]
    fn mqtt_flags_are_checked_together() {
        let message = |args: &[&str]| parse(args).unwrap_err().to_string();
        assert!(message(&["--mqtt-topic", "a/#"]).contains("--mqtt-topic needs --mqtt-url"));
        let url = ["--mqtt-url", "mqtt://127.0.0.1"];
        assert!(message(&url).contains("at least one --mqtt-topic"));
        let number = [&url[..], &["--mqtt-topic", "a/#", "--mqtt-payload", "number"]].concat();
        assert!(message(&number).contains("needs --mqtt-topic-template"));
        assert!(message(&["--mqtt-url", "http://h", "--mqtt-topic", "a"]).contains("mqtt://"));

        let c = parse(&[&url[..], &["--mqtt-topic", "a/#,b/+/c"]].concat()).unwrap();
        let mqtt = c.mqtt_config(WriterId(0xab)).unwrap();
        assert_eq!(mqtt.topics, ["a/#", "b/+/c"]);
        assert_eq!(mqtt.client_id, "bucketd-00000000000000ab");
        assert_eq!(mqtt.payload, PayloadFormat::Auto);
        assert!(parse(&[]).unwrap().mqtt_config(WriterId(1)).is_none());
    }
}
