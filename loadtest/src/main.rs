//! Load generator for bucketd, and for the peers it is compared with (VictoriaMetrics,
//! InfluxDB), which take the same line-protocol bodies on `/write`.
//!
//! Reading number `n` (0, 1, 2, ...) belongs to sensor `n % sensors` and is that sensor's
//! `k = n / sensors`-th reading, at `start + k * step`. Workers claim `batch` consecutive numbers
//! at a time, so one body holds `batch` different sensors' readings (with 10,000 sensors and
//! 5,000-line bodies, every body touches 5,000 series), and every reading exists exactly once,
//! which is what `--verify` checks against the query API.
//!
//! Bounded by construction: it stops after `--duration` (default 10 s, at most 1 h) or
//! `--count` readings, whichever comes first, and only ever talks to a loopback address.

mod body;
mod verify;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use hdrhistogram::Histogram;
use tokio::io::AsyncWriteExt;

use body::{Extra, Layout, Protocol};

/// The longest run accepted, so a typo cannot leave a generator running for days.
const MAX_DURATION: Duration = Duration::from_secs(3600);

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Proto {
    /// JSON array bodies on `POST /api/v1/readings`.
    Json,
    /// Line protocol on `POST <path>` (default `/write`).
    LpHttp,
    /// Line protocol over raw TCP (no acknowledgement: "accepted" means written to the socket).
    LpTcp,
}

/// Sends sensor readings to bucketd (or an InfluxDB-compatible peer) and reports throughput,
/// latency and errors.
#[derive(Clone, Debug, Parser)]
#[command(name = "loadtest", version, about)]
struct Args {
    /// Wire format and transport.
    #[arg(long, value_enum, default_value_t = Proto::LpHttp)]
    protocol: Proto,

    /// Base URL of the HTTP API. Must be a loopback address.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,

    /// Path (and query) line protocol is POSTed to, e.g. `/write?db=loadtest` for InfluxDB.
    #[arg(long, default_value = "/write")]
    path: String,

    /// Address of the raw TCP line-protocol listener (for `--protocol lp-tcp`). Loopback only.
    #[arg(long, default_value = "127.0.0.1:8094")]
    tcp_addr: SocketAddr,

    /// Number of simulated sensors (series).
    #[arg(long, default_value_t = 10_000)]
    sensors: u64,

    /// Readings per second per sensor; 0 sends as fast as the server takes them.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,

    /// Readings (lines, JSON items) per request.
    #[arg(long, default_value_t = 5000)]
    batch: u64,

    /// Concurrent connections (one request in flight on each).
    #[arg(long, default_value_t = 4)]
    connections: usize,

    /// Stop sending after this long (at most 1h), e.g. `10s`, `2m`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,

    /// Stop after this many readings in all.
    #[arg(long)]
    count: Option<u64>,

    /// Measurement name; sensor `i` is the series `<measurement>,sensor=<prefix><i>`.
    #[arg(long, default_value = "env")]
    measurement: String,

    /// Prefix of the `sensor` tag values.
    #[arg(long, default_value = "s")]
    sensor_prefix: String,

    /// Timestamp of every sensor's first reading, epoch ms. Default: the start of the hour
    /// 24 hours ago (so a long run stays in the past, which every peer accepts).
    #[arg(long)]
    start_ms: Option<i64>,

    /// Float fields every reading carries beside temperature and humidity (`f0`, `f1`, ...).
    #[arg(long, default_value_t = 0)]
    extra_fields: u32,

    /// Length of a string field `note` every reading carries, 0 for none.
    #[arg(long, default_value_t = 0)]
    string_bytes: u32,

    /// The most steps (0.01 of temperature, 0.1 of humidity) a value jumps by at random from
    /// one reading to the next, beside the wave's step: 0 for a steady wave.
    #[arg(long, default_value_t = 0)]
    jitter: u32,

    /// Milliseconds between one sensor's consecutive readings.
    #[arg(long, default_value_t = 1000)]
    step_ms: i64,

    /// After the run: wait until bucketd reports nothing buffered (all durable in the store),
    /// then read every sensor back through `/api/v1/readings` and report lost or duplicated
    /// readings.
    #[arg(long)]
    verify: bool,

    /// Concurrent queries while verifying.
    #[arg(long, default_value_t = 4)]
    verify_connections: usize,

    /// Longest wait for bucketd's buffers to empty after the run.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    drain_timeout: Duration,

    /// Also write the summary as one JSON object to this file (for scripts).
    #[arg(long)]
    summary_json: Option<std::path::PathBuf>,

    /// Length of the slices the summary reports the accepted rate and the failed requests of,
    /// so that a stall in a sustained run shows (whole seconds).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    slice: Duration,

    /// A CA certificate (PEM) to trust, for an `https://` --url whose certificate it issued
    /// (the built-in roots are not used then).
    #[arg(long)]
    ca_cert: Option<std::path::PathBuf>,
}

/// What every worker adds to; read by the progress printer and the summary.
struct Stats {
    sent: AtomicU64,
    accepted: AtomicU64,
    requests: AtomicU64,
    failed_requests: AtomicU64,
    latency_us: Mutex<Histogram<u64>>,
    errors: Mutex<BTreeMap<String, u64>>,
    /// Reading-number ranges `[n0, n1)` of requests answered 2xx (for `--verify`).
    accepted_ranges: Mutex<Vec<(u64, u64)>>,
    /// Ranges of requests that failed: their readings may or may not have been taken.
    failed_ranges: Mutex<Vec<(u64, u64)>>,
    /// (accepted readings, failed requests) so far, at the end of every second of the run.
    per_second: Mutex<Vec<(u64, u64)>>,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            sent: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            failed_requests: AtomicU64::new(0),
            latency_us: Mutex::new(Histogram::new_with_bounds(1, 600_000_000, 3).expect("bounds")),
            errors: Mutex::new(BTreeMap::new()),
            accepted_ranges: Mutex::new(Vec::new()),
            failed_ranges: Mutex::new(Vec::new()),
            per_second: Mutex::new(Vec::new()),
        }
    }

    fn record(&self, range: (u64, u64), latency: Duration, outcome: Result<(), String>) {
        let n = range.1 - range.0;
        self.sent.fetch_add(n, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        let us = (latency.as_micros() as u64).clamp(1, 600_000_000);
        self.latency_us.lock().unwrap().record(us).expect("clamped into bounds");
        match outcome {
            Ok(()) => {
                self.accepted.fetch_add(n, Ordering::Relaxed);
                self.accepted_ranges.lock().unwrap().push(range);
            }
            Err(kind) => {
                self.failed_requests.fetch_add(1, Ordering::Relaxed);
                *self.errors.lock().unwrap().entry(kind).or_insert(0) += 1;
                self.failed_ranges.lock().unwrap().push(range);
            }
        }
    }
}

/// Hands out reading numbers: `batch` at a time, paced by `--rate`, until the count or the
/// deadline.
struct Schedule {
    next: AtomicU64,
    total: u64,
    batch: u64,
    /// Readings per second over all sensors; `None` = as fast as possible.
    per_second: Option<f64>,
    started: Instant,
    deadline: Instant,
}

impl Schedule {
    /// The next range to send, after waiting until it is due. `None` when done.
    async fn claim(&self) -> Option<(u64, u64)> {
        if Instant::now() >= self.deadline {
            return None;
        }
        let n0 = self.next.fetch_add(self.batch, Ordering::Relaxed);
        if n0 >= self.total {
            return None;
        }
        let n1 = (n0 + self.batch).min(self.total);
        if let Some(per_second) = self.per_second {
            // Due when its last reading is due, so a body never carries a reading early.
            let due = self.started + Duration::from_secs_f64((n1 - 1) as f64 / per_second);
            if due >= self.deadline {
                return None;
            }
            tokio::time::sleep_until(due.into()).await;
        }
        Some((n0, n1))
    }
}

fn ensure_loopback(host: &str) -> anyhow::Result<()> {
    let ok = host.eq_ignore_ascii_case("localhost")
        || host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !ok {
        bail!("refusing to send load to {host:?}: only loopback addresses (127.0.0.1, ::1)");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let url = reqwest::Url::parse(&args.url).context("--url")?;
    ensure_loopback(url.host_str().unwrap_or(""))?;
    if !args.tcp_addr.ip().is_loopback() {
        bail!("refusing to send load to {}: loopback only", args.tcp_addr);
    }
    if args.duration > MAX_DURATION {
        bail!("--duration is at most {}", humantime::format_duration(MAX_DURATION));
    }
    if args.sensors == 0 || args.batch == 0 || args.connections == 0 || args.step_ms <= 0 {
        bail!("--sensors, --batch, --connections and --step-ms must be positive");
    }
    if args.extra_fields > 1000 || args.string_bytes > 1 << 20 || args.jitter > 1000 {
        bail!("--extra-fields and --jitter are at most 1000, --string-bytes at most 1 MiB");
    }
    let base = args.url.trim_end_matches('/').to_owned();
    let start_ms = args.start_ms.unwrap_or_else(|| {
        let now = chrono::Utc::now().timestamp_millis() - 24 * 3_600_000;
        now - now.rem_euclid(3_600_000)
    });
    let extra =
        Extra { fields: args.extra_fields, string_bytes: args.string_bytes, jitter: args.jitter };
    let layout = Arc::new(Layout::with_extra(
        &args.measurement,
        &args.sensor_prefix,
        args.sensors,
        start_ms,
        args.step_ms,
        extra,
    ));
    let per_second = (args.rate > 0.0).then_some(args.rate * args.sensors as f64);
    let started = Instant::now();
    let schedule = Arc::new(Schedule {
        next: AtomicU64::new(0),
        total: args.count.unwrap_or(u64::MAX / 2),
        batch: args.batch,
        per_second,
        started,
        deadline: started + args.duration,
    });
    let stats = Arc::new(Stats::new());
    let mut client = reqwest::Client::builder().no_gzip().pool_max_idle_per_host(args.connections);
    if let Some(path) = &args.ca_cert {
        let pem = std::fs::read(path).with_context(|| format!("--ca-cert {}", path.display()))?;
        let ca =
            reqwest::Certificate::from_pem(&pem).context("--ca-cert is not a PEM certificate")?;
        client = client.tls_certs_only([ca]);
    }
    let client = client.build()?;

    eprintln!(
        "loadtest: {:?} to {}, {} sensors, {}, {} per request, {} connections, for {} or {} \
         readings; first timestamp {}",
        args.protocol,
        match args.protocol {
            Proto::LpTcp => args.tcp_addr.to_string(),
            Proto::Json => format!("{base}/api/v1/readings"),
            Proto::LpHttp => format!("{base}{}", args.path),
        },
        args.sensors,
        if args.rate > 0.0 {
            format!("{} readings/s each", args.rate)
        } else {
            "as fast as possible".into()
        },
        args.batch,
        args.connections,
        humantime::format_duration(args.duration),
        args.count.map_or("unlimited".into(), |c| c.to_string()),
        start_ms,
    );

    let mut workers = Vec::new();
    for _ in 0..args.connections {
        let (schedule, stats, layout) = (schedule.clone(), stats.clone(), layout.clone());
        let (client, args, base) = (client.clone(), args.clone(), base.clone());
        workers.push(tokio::spawn(async move {
            match args.protocol {
                Proto::Json | Proto::LpHttp => {
                    let (proto, url) = if args.protocol == Proto::Json {
                        (Protocol::Json, format!("{base}/api/v1/readings"))
                    } else {
                        (Protocol::LineProtocol, format!("{base}{}", args.path))
                    };
                    http_worker(&client, &url, proto, &schedule, &stats, &layout).await
                }
                Proto::LpTcp => tcp_worker(args.tcp_addr, &schedule, &stats, &layout).await,
            }
        }));
    }
    let progress = tokio::spawn(progress(stats.clone(), started));
    for w in workers {
        if let Err(e) = w.await? {
            eprintln!("worker stopped: {e:#}");
        }
    }
    let elapsed = started.elapsed();
    progress.abort();
    fill_missed_seconds(
        &mut stats.per_second.lock().unwrap(),
        elapsed,
        (stats.accepted.load(Ordering::Relaxed), stats.failed_requests.load(Ordering::Relaxed)),
    );

    let summary = summarize(&args, &stats, elapsed);
    println!("{}", summary.text);
    let mut json = summary.json;

    if args.verify {
        let report = verify::run(&client, &base, &args, &layout, &stats, started + elapsed).await?;
        println!("{}", report.text);
        // The landed rate: what was acknowledged, over the time until all of it was stored.
        if let Some(drained_ms) = report.json["drained_after_ms"].as_u64() {
            let secs = elapsed.as_secs_f64() + drained_ms as f64 / 1000.0;
            let landed = stats.accepted.load(Ordering::Relaxed) as f64 / secs;
            println!(
                "landed readings/s: {landed:.0} (all in the store {drained_ms} ms after the load)"
            );
            json["landed_per_s"] = serde_json::json!(landed);
        }
        json["verify"] = report.json;
        if let Some(path) = &args.summary_json {
            std::fs::write(path, serde_json::to_vec_pretty(&json)?)?;
        }
        if !report.ok {
            std::process::exit(2);
        }
    } else if let Some(path) = &args.summary_json {
        std::fs::write(path, serde_json::to_vec_pretty(&json)?)?;
    }
    Ok(())
}

async fn http_worker(
    client: &reqwest::Client,
    url: &str,
    proto: Protocol,
    schedule: &Schedule,
    stats: &Stats,
    layout: &Layout,
) -> anyhow::Result<()> {
    let content_type = match proto {
        Protocol::Json => "application/json",
        Protocol::LineProtocol => "text/plain; charset=utf-8",
    };
    let mut buf = Vec::new();
    while let Some(range) = schedule.claim().await {
        buf.clear();
        layout.write_body(proto, range, &mut buf);
        let body = std::mem::take(&mut buf);
        let t = Instant::now();
        let result = client.post(url).header("content-type", content_type).body(body).send().await;
        let outcome = match result {
            Ok(resp) => {
                let status = resp.status();
                // Drain the body so the connection is reused.
                let _ = resp.bytes().await;
                if status.is_success() { Ok(()) } else { Err(status.as_u16().to_string()) }
            }
            Err(e) if e.is_connect() => Err("connect".to_owned()),
            Err(e) if e.is_timeout() => Err("timeout".to_owned()),
            Err(_) => Err("transport".to_owned()),
        };
        stats.record(range, t.elapsed(), outcome);
    }
    Ok(())
}

async fn tcp_worker(
    addr: SocketAddr,
    schedule: &Schedule,
    stats: &Stats,
    layout: &Layout,
) -> anyhow::Result<()> {
    let mut conn = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    conn.set_nodelay(true)?;
    let mut buf = Vec::new();
    while let Some(range) = schedule.claim().await {
        buf.clear();
        layout.write_body(Protocol::LineProtocol, range, &mut buf);
        let t = Instant::now();
        let outcome = conn.write_all(&buf).await.map_err(|_| "tcp_write".to_owned());
        let broken = outcome.is_err();
        stats.record(range, t.elapsed(), outcome);
        if broken {
            bail!("TCP connection to {addr} broke");
        }
    }
    conn.shutdown().await?;
    Ok(())
}

/// One line per second: totals, the last second's accepted rate, errors, latency so far.
async fn progress(stats: Arc<Stats>, started: Instant) {
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    let mut last = 0u64;
    loop {
        tick.tick().await;
        let accepted = stats.accepted.load(Ordering::Relaxed);
        let failed = stats.failed_requests.load(Ordering::Relaxed);
        stats.per_second.lock().unwrap().push((accepted, failed));
        let (p50, p99) = {
            let h = stats.latency_us.lock().unwrap();
            (h.value_at_quantile(0.5), h.value_at_quantile(0.99))
        };
        eprintln!(
            "[{:>5.1}s] accepted {:>11} (+{:>9}/s)  requests {:>7}  failed {:>5}  p50 {:>8.2} ms  p99 {:>8.2} ms",
            started.elapsed().as_secs_f64(),
            accepted,
            accepted - last,
            stats.requests.load(Ordering::Relaxed),
            failed,
            p50 as f64 / 1000.0,
            p99 as f64 / 1000.0,
        );
        last = accepted;
    }
}

struct Summary {
    text: String,
    json: serde_json::Value,
}

fn summarize(args: &Args, stats: &Stats, elapsed: Duration) -> Summary {
    let secs = elapsed.as_secs_f64();
    let accepted = stats.accepted.load(Ordering::Relaxed);
    let sent = stats.sent.load(Ordering::Relaxed);
    let requests = stats.requests.load(Ordering::Relaxed);
    let h = stats.latency_us.lock().unwrap();
    let q = |p: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(p) as f64 / 1000.0 };
    let (p50, p99, p999, max) = (q(0.5), q(0.99), q(0.999), h.max() as f64 / 1000.0);
    let errors = stats.errors.lock().unwrap().clone();
    let rate = accepted as f64 / secs;
    let mut text = format!(
        "elapsed {secs:.2} s, {requests} requests, {sent} readings sent, {accepted} accepted\n\
         accepted readings/s: {rate:.0}\n\
         request latency ms: p50 {p50:.2}  p99 {p99:.2}  p999 {p999:.2}  max {max:.2}\n\
         errors by status:"
    );
    if errors.is_empty() {
        text.push_str(" none");
    }
    for (k, v) in &errors {
        text.push_str(&format!(" {k}={v}"));
    }
    let slices = slices(&stats.per_second.lock().unwrap(), args.slice);
    if !slices.is_empty() {
        text.push_str(&format!(
            "\naccepted readings/s per {} slice:",
            humantime::format_duration(args.slice)
        ));
        for s in &slices {
            text.push_str(&format!(" {:.0}", s.accepted_per_s));
            if s.failed_requests > 0 {
                text.push_str(&format!(" ({} failed)", s.failed_requests));
            }
        }
    }
    let json = serde_json::json!({
        "protocol": format!("{:?}", args.protocol),
        "sensors": args.sensors,
        "batch": args.batch,
        "connections": args.connections,
        "elapsed_s": secs,
        "requests": requests,
        "sent": sent,
        "accepted": accepted,
        "accepted_per_s": rate,
        "latency_ms": {"p50": p50, "p99": p99, "p999": p999, "max": max},
        "errors": errors,
        "slices": slices.iter().map(|s| serde_json::json!({
            "from_s": s.from_s,
            "accepted_per_s": s.accepted_per_s,
            "failed_requests": s.failed_requests,
        })).collect::<Vec<_>>(),
    });
    Summary { text, json }
}

struct Slice {
    from_s: u64,
    accepted_per_s: f64,
    failed_requests: u64,
}

/// The ticker shares its core with the load's workers, which flat out delay it past the load's
/// end, so it missed the last tick (a 20 s run then showed one 10 s slice): the totals at the
/// end stand for each whole second of `elapsed` it did not record.
fn fill_missed_seconds(per_second: &mut Vec<(u64, u64)>, elapsed: Duration, end: (u64, u64)) {
    let whole = elapsed.as_secs() as usize;
    if per_second.len() < whole {
        per_second.resize(whole, end);
    }
}

/// Whole slices of `slice` seconds from the per-second totals (a last, shorter one is left
/// out: its rate would mix the load's end into it).
fn slices(per_second: &[(u64, u64)], slice: Duration) -> Vec<Slice> {
    let n = slice.as_secs().max(1) as usize;
    let mut out = Vec::new();
    let mut before = (0, 0);
    for (i, chunk) in per_second.chunks_exact(n).enumerate() {
        let after = chunk[n - 1];
        out.push(Slice {
            from_s: (i * n) as u64,
            accepted_per_s: (after.0 - before.0) as f64 / n as f64,
            failed_requests: after.1 - before.1,
        });
        before = after;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missed_last_tick_still_completes_the_last_slice() {
        let mut totals: Vec<(u64, u64)> = (1..=19).map(|s| (s * 100, 0)).collect();
        fill_missed_seconds(&mut totals, Duration::from_millis(20_030), (2_000, 1));
        let got = slices(&totals, Duration::from_secs(10));
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].accepted_per_s, 100.0);
        assert_eq!(got[1].failed_requests, 1);
        fill_missed_seconds(&mut totals, Duration::from_millis(19_900), (9_999, 9));
        assert_eq!(totals[19], (2_000, 1), "nothing recorded is replaced");
        assert_eq!(totals.len(), 20);
    }

    #[test]
    fn slices_are_whole_and_show_a_stall() {
        // Per-second totals: 100/s for 4 s, nothing accepted for 4 s (40 requests failed),
        // then 50/s for 3 s.
        let mut totals = Vec::new();
        let (mut accepted, mut failed) = (0, 0);
        for s in 0..11 {
            match s {
                0..4 => accepted += 100,
                4..8 => failed += 10,
                _ => accepted += 50,
            }
            totals.push((accepted, failed));
        }
        let got = slices(&totals, Duration::from_secs(4));
        let rates: Vec<f64> = got.iter().map(|s| s.accepted_per_s).collect();
        assert_eq!(rates, vec![100.0, 0.0], "the last 3 s are not a whole slice");
        assert_eq!(got.iter().map(|s| s.failed_requests).collect::<Vec<_>>(), vec![0, 40]);
        assert_eq!(got[1].from_s, 4);
    }
}
