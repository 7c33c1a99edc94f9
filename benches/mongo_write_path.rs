//! Counts, not timings, of what the MongoDB store sends, on the stand-in
//! (`tests/mongo_standin/bridge.py`, started here as the tests start it). Measurements, not
//! tests: they print what `loadtest/README.md` and the README quote, and check only that the
//! counts are what those say. Five of them:
//!
//! - `flush_intervals`: update statements and update commands (round trips) per flush,
//!   against one-document-per-reading `insert`s of the same readings, for several flush
//!   intervals. A counting TCP proxy sits between the driver and the stand-in and reads every
//!   OP_MSG the client sends;
//! - `running_flusher`: the running flusher at the default flags, paced in real time (150 s);
//! - `fleet`: the running flusher under 200,000 sensors at 1 reading/s, the memory budget
//!   pressed, for ten minutes (`FLEET_SENSORS`, `FLEET_SECONDS` choose another);
//! - `large_flush`: round trips of one flush of 10,000 sensors × 10 readings (minutes);
//! - `day_range`: round trips of reading back one day of one sensor at 1 Hz (a minute).
//!
//! `cargo bench --bench mongo_write_path` runs `flush_intervals`, `hour_stats` and
//! `running_flusher`; name measurements to choose, e.g.
//! `cargo bench --bench mongo_write_path -- large_flush day_range`. `large_flush` uses the
//! MongoDB server named by `BUCKETD_TEST_MONGODB_URI` when set. Under `cargo test` (which runs
//! bench targets without `--bench`) nothing runs.
//!
//! About `flush_intervals`:
//! The load modelled is N sensors at 1 reading/s each, every sensor flushed once per flush
//! interval (so a flush of interval F holds N batches of F readings). The stand-in scans its
//! collection per statement, so N is kept small here; per-reading and per-flush counts do not
//! depend on N while one flush's statements fit one command (checked below against the
//! command limits with the measured statement size). `loadtest/README.md` scales them to
//! 10,000 sensors.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bson::{Document, RawDocument, doc};
use std::time::{Duration, Instant};

use bucketd::buffer::Buffers;
use bucketd::flush::Flusher;
use bucketd::model::{Batch, FieldValue, HOUR_MS, Item, Reading};
use bucketd::store::mongo::{MongoConfig, MongoStore};
use bucketd::store::{BucketLimits, Store};
// The integration tests' stand-in launcher and batch builders: how the venv is built and the
// bridge started must stay the same for both. The bench connects through its counting
// proxies, not with the stand-in's `connect` helper.
use bucketd_test_support::mongo_standin::{MongoBackend, StandInOptions};
use bucketd_test_support::store::{self as suite, W};
use common::{reading, series};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SENSORS: usize = 100;
const FLUSHES: usize = 3;
const OP_MSG: i32 = 2013;
/// MongoDB's maxWriteBatchSize and maxBsonObjectSize (the stand-in reports the same).
const MAX_WRITE_BATCH: u64 = 100_000;
const MAX_BSON: u64 = 16 * 1024 * 1024;

#[derive(Default)]
struct Counts {
    update_commands: AtomicU64,
    update_statements: AtomicU64,
    update_bytes: AtomicU64,
    insert_commands: AtomicU64,
    insert_documents: AtomicU64,
}

impl Counts {
    fn take(&self) -> [u64; 5] {
        [
            self.update_commands.swap(0, Ordering::SeqCst),
            self.update_statements.swap(0, Ordering::SeqCst),
            self.update_bytes.swap(0, Ordering::SeqCst),
            self.insert_commands.swap(0, Ordering::SeqCst),
            self.insert_documents.swap(0, Ordering::SeqCst),
        ]
    }

    /// Counts one client message: its command (the first key of the body) and the statements
    /// it carries, embedded in the body or as a document sequence. Returns an `update`'s
    /// statements.
    fn message(&self, msg: &[u8]) -> Option<u64> {
        let op = i32::from_le_bytes(msg[12..16].try_into().unwrap());
        if op != OP_MSG {
            return None;
        }
        let mut at = 20; // header (16) + flagBits (4)
        let mut command = String::new();
        let mut items = 0u64;
        while at < msg.len() {
            let kind = msg[at];
            at += 1;
            let size = i32::from_le_bytes(msg[at..at + 4].try_into().unwrap()) as usize;
            if kind == 0 {
                let body = RawDocument::from_bytes(&msg[at..at + size]).unwrap();
                let first = body.iter().next().unwrap().unwrap().0;
                command = first.to_owned();
                for list in ["updates", "documents"] {
                    if let Ok(a) = body.get_array(list) {
                        items += a.into_iter().count() as u64;
                    }
                }
            } else {
                // Document sequence: size, identifier cstring, documents.
                let end = at + size;
                let mut p = at + 4;
                while msg[p] != 0 {
                    p += 1;
                }
                p += 1;
                while p < end {
                    let n = i32::from_le_bytes(msg[p..p + 4].try_into().unwrap()) as usize;
                    items += 1;
                    p += n;
                }
            }
            at += size;
            // A trailing checksum (flag bit 0) is not a section.
            if msg.len() - at == 4 && u32::from_le_bytes(msg[16..20].try_into().unwrap()) & 1 == 1 {
                break;
            }
        }
        match command.as_str() {
            "update" => {
                self.update_commands.fetch_add(1, Ordering::SeqCst);
                self.update_statements.fetch_add(items, Ordering::SeqCst);
                self.update_bytes.fetch_add(msg.len() as u64, Ordering::SeqCst);
                return Some(items);
            }
            "insert" => {
                self.insert_commands.fetch_add(1, Ordering::SeqCst);
                self.insert_documents.fetch_add(items, Ordering::SeqCst);
            }
            _ => {}
        }
        None
    }
}

/// Forwards every connection to `upstream`, counting what clients send. With `acknowledge`,
/// the proxy answers `update` commands itself, as if every statement matched, instead of
/// forwarding them: for loads whose statements the stand-in cannot apply in real time.
async fn proxy(listener: TcpListener, upstream: String, counts: Arc<Counts>, acknowledge: bool) {
    loop {
        let Ok((client, _)) = listener.accept().await else { return };
        let upstream = upstream.clone();
        let counts = counts.clone();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(&upstream).await else { return };
            let (mut cr, cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            // The driver waits for each reply before its next request on a connection, so the
            // two writers never interleave within a message.
            let cw = Arc::new(tokio::sync::Mutex::new(cw));
            let client_writer = cw.clone();
            let up = async move {
                loop {
                    let mut header = [0u8; 4];
                    if cr.read_exact(&mut header).await.is_err() {
                        return;
                    }
                    let len = i32::from_le_bytes(header) as usize;
                    let mut msg = vec![0u8; len];
                    msg[..4].copy_from_slice(&header);
                    if cr.read_exact(&mut msg[4..]).await.is_err() {
                        return;
                    }
                    let counted = counts.message(&msg);
                    let sent = match counted {
                        Some(statements) if acknowledge => {
                            let reply = acknowledgement(&msg, statements);
                            client_writer.lock().await.write_all(&reply).await
                        }
                        _ => sw.write_all(&msg).await,
                    };
                    if sent.is_err() {
                        return;
                    }
                }
            };
            let down = async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if cw.lock().await.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            };
            tokio::join!(up, down);
        });
    }
}

/// MongoDB's reply to an `update` command `request` whose `statements` all matched.
fn acknowledgement(request: &[u8], statements: u64) -> Vec<u8> {
    let body = bson::to_vec(&doc! {
        "n": statements as i64, "nModified": statements as i64, "ok": 1.0
    })
    .unwrap();
    let request_id = &request[4..8];
    let mut reply = Vec::with_capacity(21 + body.len());
    reply.extend_from_slice(&((21 + body.len()) as i32).to_le_bytes());
    reply.extend_from_slice(&0i32.to_le_bytes()); // requestID
    reply.extend_from_slice(request_id); // responseTo
    reply.extend_from_slice(&OP_MSG.to_le_bytes());
    reply.extend_from_slice(&0u32.to_le_bytes()); // flagBits
    reply.push(0); // a body section
    reply.extend_from_slice(&body);
    reply
}

struct Row {
    interval_s: i64,
    readings: u64,
    counts: [u64; 5],
}

/// The stand-in behind a counting proxy: (the backend, kept alive; the counts; the proxy's URI).
/// With `acknowledge`, the proxy answers updates itself ([`proxy`]).
async fn counted_standin(acknowledge: bool) -> (MongoBackend, Arc<Counts>, String) {
    let backend = MongoBackend::standin(StandInOptions::default());
    let upstream = backend.uri.split("//").nth(1).unwrap().split('/').next().unwrap().to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let counts = Arc::new(Counts::default());
    tokio::spawn(proxy(listener, upstream, counts.clone(), acknowledge));
    (backend, counts, format!("mongodb://127.0.0.1:{port}/?directConnection=true"))
}

/// The buffers and their flusher at `config`, writing through the counting proxy at `uri`
/// into `database`; the counts start once the store has made its indexes.
async fn running(
    uri: &str,
    database: &str,
    config: &bucketd::config::Config,
    counts: &Counts,
) -> (Arc<Buffers>, Flusher) {
    let store = MongoStore::connect(uri, database, config.bucket_limits(), None)
        .await
        .expect("connect through the counting proxy");
    counts.take();
    let buffers = Buffers::new(config.buffer_config());
    let flusher = Flusher::spawn(buffers.clone(), Arc::new(store), config.flush_config(W, None));
    (buffers, flusher)
}

/// The running flusher at the default flags, paced in real time: sensors at 1 reading/s, one
/// push a second (a client posting every second). A 1 Hz sensor's buffer is written when its
/// oldest reading nears `--flush-interval` (60 s), so a statement carries about sixty
/// readings: about 16,700 update statements per million readings (at 1 s it was one per
/// reading). The ratio is per sensor, so a few hundred sensors show it (the stand-in scans its
/// collection per statement and could not take 10,000 sensors' statements in real time); the
/// memory budget is far from pressed at this load.
async fn running_flusher() {
    const PACED_SENSORS: usize = 200;
    // Ends halfway between two rounds of 60 s flushes, so no write is in flight when counted.
    const SECONDS: i64 = 150;
    let (_backend, counts, uri) = counted_standin(false).await;
    let config = bucketd::config::Config::from_args(["bucketd"]).unwrap();
    let (buffers, flusher) = running(&uri, "paced", &config, &counts).await;
    let hour = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS;
    let start = tokio::time::Instant::now();
    for second in 0..SECONDS {
        let items: Vec<Item> =
            (0..PACED_SENSORS).map(|i| (series(i), reading(hour + second * 1000, i))).collect();
        buffers.push(items).unwrap();
        tokio::time::sleep_until(start + Duration::from_secs(second as u64 + 1)).await;
    }
    // Before the shutdown drain, which writes whatever is left however short.
    let written = (PACED_SENSORS as u64) * SECONDS as u64 - buffers.buffered() as u64;
    let [commands, statements, ..] = counts.take();
    flusher.shutdown(Duration::from_secs(60)).await;
    let per_million = statements * 1_000_000 / written.max(1);
    println!(
        "\nrunning flusher, defaults, {PACED_SENSORS} sensors x 1 reading/s for {SECONDS} s: \
         {written} readings written in {statements} update statements and {commands} commands: \
         {per_million} statements and {} commands per million readings",
        commands * 1_000_000 / written.max(1)
    );
    assert!(written >= (PACED_SENSORS as u64) * 100, "the 60 s flushes happened: {written}");
    // About 16,700 when the pushes keep to the second; a slow machine only makes the
    // statements longer. At 10 s (the previous default) it was 100,000, at 1 s 1,000,000.
    assert!(per_million <= 21_000, "{per_million} update statements per million readings");
}

/// The sensor fleet at the default flags: `FLEET_SENSORS` sensors (default 200,000) at 1
/// reading/s for `FLEET_SECONDS` (default 600), pushed in bodies of 5,000 readings as the
/// parser pushes a body. `--memory-budget` is scaled by sensors / 200,000 (the default at
/// 200,000), so a smaller fleet presses the budget as the full one does and its buffers are
/// taken as early. Counts every statement and command, the final drain's included, against
/// every reading. A fleet of more than `ACKNOWLEDGED_ABOVE` sensors sends more statements a
/// second than the stand-in can apply, so the proxy acknowledges its updates itself.
async fn fleet() {
    const FULL_FLEET: usize = 200_000;
    const ACKNOWLEDGED_ABOVE: usize = 5_000;
    const BODY: usize = 5_000;
    let env = |name: &str, default: usize| {
        std::env::var(name).map_or(default, |v| v.parse().expect("a number of sensors or seconds"))
    };
    let sensors = env("FLEET_SENSORS", FULL_FLEET).max(1);
    let seconds = env("FLEET_SECONDS", 600).max(1);
    let acknowledged = sensors > ACKNOWLEDGED_ABOVE;
    let (_backend, counts, uri) = counted_standin(acknowledged).await;
    let defaults = bucketd::config::Config::from_args(["bucketd"]).unwrap();
    let budget = (defaults.memory_budget as u128 * sensors as u128 / FULL_FLEET as u128) as usize;
    let config =
        bucketd::config::Config::from_args(["bucketd", "--memory-budget", &budget.to_string()])
            .unwrap();
    let (buffers, flusher) = running(&uri, "fleet", &config, &counts).await;
    let all: Vec<_> = (0..sensors).map(series).collect();
    println!(
        "{sensors} sensors x 1 reading/s for {seconds} s, --memory-budget {budget} bytes, \
         updates {}",
        if acknowledged { "acknowledged by the proxy" } else { "applied by the stand-in" }
    );
    println!(
        "| minute | readings written | update statements | update commands | statements / M | commands / M |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    let hour = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS;
    let start = tokio::time::Instant::now();
    let (mut pushed, mut refused, mut late) = (0u64, 0u64, Duration::ZERO);
    let (mut total_statements, mut total_commands, mut settled_before) = (0u64, 0u64, 0u64);
    let mut row = |minute: String, settled: u64, counts: [u64; 5]| {
        let [commands, statements, ..] = counts;
        let written = settled - settled_before;
        settled_before = settled;
        total_statements += statements;
        total_commands += commands;
        let per_million = |n: u64| n * 1_000_000 / written.max(1);
        println!(
            "| {minute} | {written} | {statements} | {commands} | {} | {} |",
            per_million(statements),
            per_million(commands)
        );
    };
    for second in 0..seconds {
        let ts = hour + second as i64 * 1000;
        for body in (0..sensors).step_by(BODY) {
            let items: Vec<Item> = (body..(body + BODY).min(sensors))
                .map(|i| (all[i].clone(), reading(ts, i)))
                .collect();
            let n = items.len() as u64;
            match buffers.push(items) {
                Ok(_) => pushed += n,
                Err(_) => refused += n,
            }
        }
        let due = start + Duration::from_secs(second as u64 + 1);
        late = late.max(tokio::time::Instant::now().saturating_duration_since(due));
        tokio::time::sleep_until(due).await;
        if (second + 1) % 60 == 0 {
            row(
                format!("{}", (second + 1) / 60),
                pushed - buffers.buffered() as u64,
                counts.take(),
            );
        }
    }
    let drain = Instant::now();
    flusher.shutdown(Duration::from_secs(600)).await;
    let left = buffers.buffered() as u64;
    row(format!("drain ({:.1} s)", drain.elapsed().as_secs_f64()), pushed - left, counts.take());
    let written = pushed - left;
    println!(
        "\nfleet, {sensors} sensors x 1 reading/s for {seconds} s: {written} readings written \
         ({refused} refused, {left} left) in {total_statements} update statements and \
         {total_commands} commands: {} statements and {} commands per million readings; \
         pushes at most {late:?} behind the clock",
        total_statements * 1_000_000 / written.max(1),
        total_commands * 1_000_000 / written.max(1),
    );
    assert_eq!((refused, left), (0, 0), "every reading accepted and written");
    // A second behind would be a slower fleet than the one named.
    assert!(late < Duration::from_secs(1), "the pushes kept to the clock: {late:?} behind");
}

/// Update statements and round trips per flush, for flush intervals of 1, 10 and 60 s.
async fn flush_intervals() {
    let (_backend, counts, uri) = counted_standin(false).await;

    let mut rows = Vec::new();
    for (round, interval_s) in [1i64, 10, 60].into_iter().enumerate() {
        let database = format!("counts_{round}");
        let store = MongoStore::connect(&uri, &database, BucketLimits::default(), None)
            .await
            .expect("connect through the counting proxy");
        let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
        let per_reading = client.database(&database).collection::<Document>("per_reading");
        counts.take(); // connect-time commands (index creation) are not a write's
        let hour = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS;
        let mut readings = 0u64;
        for flush in 0..FLUSHES {
            let start = hour + flush as i64 * interval_s * 1000;
            let batches: Vec<Batch> = (0..SENSORS)
                .map(|i| {
                    Batch::numbered(
                        series(i),
                        hour,
                        (0..interval_s).map(|k| reading(start + k * 1000, i)).collect(),
                        vec![],
                    )
                })
                .collect();
            readings += batches.iter().map(|b| b.len() as u64).sum::<u64>();
            for outcome in store.write(W, &batches).await {
                outcome.expect("write");
            }
            // The same readings as one document each, in one insert per flush.
            let docs: Vec<Document> = batches
                .iter()
                .flat_map(|b| {
                    b.readings().map(|r| {
                        doc! {
                            "s": b.series.key(),
                            "t": bson::DateTime::from_millis(r.ts),
                            "f": {"temperature": r.fields[0].1.as_f64(), "humidity": r.fields[1].1.as_f64()},
                        }
                    })
                })
                .collect();
            per_reading.insert_many(docs).await.unwrap();
        }
        rows.push(Row { interval_s, readings, counts: counts.take() });
    }

    println!(
        "\n{SENSORS} sensors x 1 reading/s, {FLUSHES} flushes per interval, counted on the wire:"
    );
    println!(
        "| flush interval | readings | update cmds | statements | bytes/statement | insert cmds | insert docs | update cmds per flush at 10,000 sensors |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let [uc, us, ub, ic, id] = r.counts;
        // At 10,000 sensors a flush is packed into commands of at most maxWriteBatchSize
        // statements and maxBsonObjectSize bytes.
        let per_statement = ub / us.max(1);
        let at_10k =
            10_000u64.div_ceil(MAX_WRITE_BATCH).max((10_000 * per_statement).div_ceil(MAX_BSON));
        println!(
            "| {} s | {} | {uc} | {us} | {per_statement} | {ic} | {id} | {at_10k} |",
            r.interval_s, r.readings,
        );
        // One statement per (sensor, hour) batch, one command per flush while a flush's
        // statements fit in one command; one document per reading for the inserts.
        assert_eq!(us, (SENSORS * FLUSHES) as u64, "statements at {} s", r.interval_s);
        assert_eq!(uc, FLUSHES as u64, "update commands at {} s", r.interval_s);
        assert_eq!(id, r.readings, "insert documents at {} s", r.interval_s);
    }
}

/// Update statements and commands per flush without and with the hour statistics collection
/// (written while `--retention` is set), 10 s flushes; then a retry of flushes whose buckets
/// were lost after their statistics landed (the one path that reads before writing).
async fn hour_stats() {
    let (_backend, counts, uri) = counted_standin(false).await;
    let hour = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS;
    let flush = |f: usize, seq0: u64| -> Vec<Batch> {
        let start = hour + f as i64 * 10_000;
        (0..SENSORS)
            .map(|i| {
                Batch::numbered(
                    series(i),
                    hour,
                    (0..10).map(|k| reading(start + k * 1000, i)).collect(),
                    (0..10).map(|k| seq0 + (f * 10 + k) as u64).collect(),
                )
            })
            .collect()
    };
    println!(
        "\n{SENSORS} sensors x 10 readings per flush, {FLUSHES} flushes, counted on the wire:"
    );
    println!(
        "| hour statistics | update cmds per flush | statements per flush | statements per batch |"
    );
    println!("|---|---:|---:|---:|");
    for (label, retention) in
        [("without (no --retention)", None), ("with (--retention 30d)", Some(30))]
    {
        let mut config = MongoConfig::new(uri.as_str(), format!("hours_{}", retention.is_some()));
        config.retention = retention.map(|d: u64| Duration::from_secs(d * 86_400));
        let store = MongoStore::connect_with(config).await.expect("connect through the proxy");
        counts.take(); // connect-time commands (index creation) are not a write's
        for f in 0..FLUSHES {
            for outcome in store.write(W, &flush(f, 1_000)).await {
                outcome.expect("write");
            }
        }
        let [uc, us, ..] = counts.take();
        let per_flush = (uc as f64 / FLUSHES as f64, us as f64 / FLUSHES as f64);
        println!(
            "| {label} | {} | {} | {} |",
            per_flush.0,
            per_flush.1,
            per_flush.1 / SENSORS as f64
        );
        let k = if retention.is_some() { 2 } else { 1 };
        assert_eq!(uc, (k * FLUSHES) as u64, "{label}: commands");
        assert_eq!(us, (k * SENSORS * FLUSHES) as u64, "{label}: statements");
        if retention.is_some() {
            // The flushes again, as a replay sends them when the buckets were lost after their
            // statistics landed: each statistics statement is refused (duplicate key), its
            // mark read (one `find` per batch, not an update, not counted here), nothing
            // counted twice.
            store
                .database()
                .collection::<Document>(bucketd::store::mongo::COLLECTION)
                .delete_many(doc! {})
                .await
                .unwrap();
            counts.take();
            for f in 0..FLUSHES {
                for outcome in store.write(W, &flush(f, 1_000)).await {
                    outcome.expect("write");
                }
            }
            let [uc, us, ..] = counts.take();
            let q = bucketd::store::RollupQuery {
                sensor: series(0).key().to_owned(),
                from: hour,
                to: hour + HOUR_MS,
                step_ms: HOUR_MS,
                fields: None,
            };
            let rows = store.rollups(q).await.expect("rollups");
            let n = rows[0].fields.values().next().expect("a field").count;
            assert_eq!(n, (FLUSHES * 10) as u64, "hour statistics counted once");
            println!(
                "| {label}, replayed | {} | {} | {} |",
                uc as f64 / FLUSHES as f64,
                us as f64 / FLUSHES as f64,
                us as f64 / (FLUSHES * SENSORS) as f64
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Round trips of one large flush and of one day's range

/// 2024-01-01T00:00:00Z: an hour boundary.
const T0_MS: i64 = 1_704_067_200_000;

/// Round trips of one flush of 10,000 sensors x 10 readings with the default caps. Counts,
/// not timings: the stand-in is far slower than MongoDB.
async fn large_flush() {
    let backend = MongoBackend::start();
    let mut config = MongoConfig::new(&backend.uri, &backend.database);
    // One command of 10,000 statements takes the stand-in minutes.
    config.op_timeout = Duration::from_secs(1800);
    let store = MongoStore::connect_with(config).await.expect("connect");
    let flush = |offset: i64| -> Vec<Batch> {
        (0..10_000)
            .flat_map(|i| {
                let readings: Vec<Reading> = (0..10)
                    .map(|j| {
                        suite::reading(
                            T0_MS + offset + j * 1000,
                            &[
                                ("temp", FieldValue::Float(20.0 + j as f64 * 0.5)),
                                ("hum", FieldValue::Int(40 + j)),
                            ],
                        )
                    })
                    .collect();
                suite::batches(
                    &suite::series(&format!("sensor-{i:05}"), "env", &[("site", "a")]),
                    &readings,
                )
            })
            .collect()
    };
    let mut before = store.write_round_trips();
    // The first flush of an hour creates every bucket; the second appends to them.
    for (name, offset) in [("first flush", 0), ("second flush", 60_000)] {
        let started = Instant::now();
        let reports = suite::write_ok(&store, &flush(offset)).await;
        let after = store.write_round_trips();
        println!(
            "{name}, 10,000 sensors x 10 readings: {} update command(s), {} statements, \
             {} buckets created, {:?} against {}",
            after.commands - before.commands,
            after.statements - before.statements,
            reports.iter().map(|r| r.buckets_created).sum::<u32>(),
            started.elapsed(),
            if backend.is_real_server() { "a real server" } else { "the stand-in" }
        );
        assert_eq!(after.statements - before.statements, 10_000);
        before = after;
    }
}

/// Commands the stand-in received, by name (what `bridgeStats` reports).
async fn commands_received(backend: &MongoBackend) -> bson::Document {
    let client = mongodb::Client::with_uri_str(&backend.uri).await.expect("client");
    let reply =
        client.database("admin").run_command(doc! {"bridgeStats": 1}).await.expect("bridgeStats");
    reply.get_document("commands").cloned().unwrap_or_default()
}

fn count(commands: &bson::Document, name: &str) -> i64 {
    commands.get(name).and_then(bucketd::store::mongo::document::number).unwrap_or(0.0) as i64
}

/// Round trips of reading back one day of one sensor at 1 Hz (86,400 readings): the query the
/// README's latency figure is about. Counted by the stand-in, so it needs the stand-in.
async fn day_range() {
    let backend = MongoBackend::standin(StandInOptions::default());
    let mut config = MongoConfig::new(&backend.uri, &backend.database);
    config.op_timeout = Duration::from_secs(600);
    let store = MongoStore::connect_with(config).await.expect("connect");
    let day: Vec<Reading> = (0..86_400)
        .map(|s| {
            suite::reading(
                T0_MS + s * 1000,
                &[("temp", FieldValue::Float(20.0 + (s % 100) as f64))],
            )
        })
        .collect();
    let day_series = suite::series("day", "env", &[]);
    for hour in day.chunks(3600) {
        suite::write_ok(&store, &suite::batches(&day_series, hour)).await;
    }
    let before = commands_received(&backend).await;
    let started = Instant::now();
    let got = suite::read(&store, suite::range("day", T0_MS, T0_MS + 24 * HOUR_MS)).await;
    let elapsed = started.elapsed();
    let after = commands_received(&backend).await;
    assert_eq!(got.len(), 86_400);
    let aggregates = count(&after, "aggregate") - count(&before, "aggregate");
    let get_mores = count(&after, "getMore") - count(&before, "getMore");
    println!(
        "86,400-reading range: {aggregates} aggregate + {get_mores} getMore = {} round trips \
         ({elapsed:?} against the stand-in, which says nothing of MongoDB's speed)",
        aggregates + get_mores
    );
    assert_eq!(aggregates, 1);
}

// ---------------------------------------------------------------------------------------------

/// Each measurement, whether it runs when none is named, and whether it needs a multi-threaded
/// runtime.
const MEASUREMENTS: [(&str, bool, bool); 6] = [
    ("flush_intervals", true, true),
    ("hour_stats", true, true),
    ("running_flusher", true, true),
    ("fleet", false, true),
    ("large_flush", false, false),
    ("day_range", false, false),
];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo test --all-targets` runs bench targets too, without `--bench`: nothing to do.
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let named: Vec<&str> =
        args.iter().filter(|a| !a.starts_with("--")).map(String::as_str).collect();
    if let Some(unknown) = named.iter().find(|n| !MEASUREMENTS.iter().any(|(m, ..)| m == *n)) {
        let known: Vec<&str> = MEASUREMENTS.iter().map(|(m, ..)| *m).collect();
        panic!("no measurement {unknown:?}; there are {known:?}");
    }
    for (name, by_default, multi_thread) in MEASUREMENTS {
        if !(named.contains(&name) || named.is_empty() && by_default) {
            continue;
        }
        println!("\n== {name}");
        let runtime = if multi_thread {
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()
        } else {
            tokio::runtime::Builder::new_current_thread().enable_all().build()
        }
        .expect("a Tokio runtime");
        runtime.block_on(async {
            match name {
                "flush_intervals" => flush_intervals().await,
                "hour_stats" => hour_stats().await,
                "running_flusher" => running_flusher().await,
                "fleet" => fleet().await,
                "large_flush" => large_flush().await,
                "day_range" => day_range().await,
                _ => unreachable!(),
            }
        });
    }
}
