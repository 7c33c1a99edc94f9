//! `--verify`: wait until bucketd holds nothing in its buffers (every accepted reading is in
//! the store), then read every sensor back through `/api/v1/readings` and compare with what
//! was accepted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::body::Layout;
use crate::{Args, Stats};

/// Readings per query page: the API's largest.
const PAGE: usize = 100_000;

pub struct Report {
    pub ok: bool,
    pub text: String,
    pub json: serde_json::Value,
}

/// One bit per reading number.
struct Bits(Vec<u64>);

impl Bits {
    fn new(len: u64) -> Bits {
        Bits(vec![0; len.div_ceil(64) as usize])
    }
    fn set_range(&mut self, (n0, n1): (u64, u64)) {
        for n in n0..n1 {
            self.0[(n / 64) as usize] |= 1 << (n % 64);
        }
    }
    fn get(&self, n: u64) -> bool {
        self.0.get((n / 64) as usize).is_some_and(|w| w & (1 << (n % 64)) != 0)
    }
}

#[derive(Default)]
struct Tally {
    lost: AtomicU64,
    duplicated: AtomicU64,
    unexpected: AtomicU64,
    from_failed_requests: AtomicU64,
    wrong_value: AtomicU64,
    read: AtomicU64,
    first_problem: std::sync::Mutex<Option<String>>,
}

impl Tally {
    fn note(&self, what: String) {
        let mut first = self.first_problem.lock().unwrap();
        if first.is_none() {
            *first = Some(what);
        }
    }
}

pub async fn run(
    client: &reqwest::Client,
    base: &str,
    args: &Args,
    layout: &Arc<Layout>,
    stats: &Stats,
    load_end: Instant,
) -> anyhow::Result<Report> {
    let drained = wait_drained(client, base, args.drain_timeout).await?;
    let drained_ms = drained.map(|at| at.saturating_duration_since(load_end).as_millis() as u64);
    match drained_ms {
        Some(ms) => eprintln!("verify: buffers empty {ms} ms after the load ended"),
        None => eprintln!("verify: no bucketd_readings_buffered gauge; not waiting for a drain"),
    }

    let accepted_ranges = stats.accepted_ranges.lock().unwrap().clone();
    let failed_ranges = stats.failed_ranges.lock().unwrap().clone();
    let end = accepted_ranges.iter().chain(&failed_ranges).map(|r| r.1).max().unwrap_or(0);
    let mut accepted = Bits::new(end);
    let mut failed = Bits::new(end);
    accepted_ranges.iter().for_each(|&r| accepted.set_range(r));
    failed_ranges.iter().for_each(|&r| failed.set_range(r));
    let (accepted, failed) = (Arc::new(accepted), Arc::new(failed));

    let sensors = layout.sensors();
    let per_sensor = end.div_ceil(sensors); // readings numbers k = 0..per_sensor may exist
    let from = layout.start_ms();
    let to = layout.ts_ms(per_sensor.max(1));
    let tally = Arc::new(Tally::default());
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.verify_connections.max(1) {
        let (client, base, layout) = (client.clone(), base.to_owned(), layout.clone());
        let (tally, next, accepted, failed) =
            (tally.clone(), next.clone(), accepted.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let s = next.fetch_add(1, Ordering::Relaxed) as u64;
                if s >= sensors {
                    return Ok::<(), anyhow::Error>(());
                }
                let got = read_sensor(&client, &base, layout.key(s), from, to).await?;
                check_sensor(&layout, s, per_sensor, &got, &accepted, &failed, &tally);
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let ok = v(&tally.lost) == 0
        && v(&tally.duplicated) == 0
        && v(&tally.unexpected) == 0
        && v(&tally.wrong_value) == 0;
    let mut text = format!(
        "verify: {} sensors, {} readings read back in {secs:.1} s: lost {}, duplicated {}, \
         unexpected {}, wrong value {}, from failed requests {} => {}",
        sensors,
        v(&tally.read),
        v(&tally.lost),
        v(&tally.duplicated),
        v(&tally.unexpected),
        v(&tally.wrong_value),
        v(&tally.from_failed_requests),
        if ok { "OK" } else { "FAILED" },
    );
    if let Some(p) = tally.first_problem.lock().unwrap().as_ref() {
        text.push_str(&format!("\nverify: first problem: {p}"));
    }
    let json = serde_json::json!({
        "ok": ok,
        "drained_after_ms": drained_ms,
        "read": v(&tally.read),
        "lost": v(&tally.lost),
        "duplicated": v(&tally.duplicated),
        "unexpected": v(&tally.unexpected),
        "wrong_value": v(&tally.wrong_value),
        "from_failed_requests": v(&tally.from_failed_requests),
    });
    Ok(Report { ok, text, json })
}

/// Polls bucketd's `/metrics` until `bucketd_readings_buffered` and
/// `bucketd_wal_unsettled_readings` are 0. `None` when the server has no such gauge (not
/// bucketd).
async fn wait_drained(
    client: &reqwest::Client,
    base: &str,
    timeout: Duration,
) -> anyhow::Result<Option<Instant>> {
    let deadline = Instant::now() + timeout;
    loop {
        let resp = client.get(format!("{base}/metrics")).send().await?;
        if !resp.status().is_success() {
            return Ok(None);
        }
        let text = resp.text().await?;
        let gauge = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        let Some(buffered) = gauge("bucketd_readings_buffered") else {
            return Ok(None);
        };
        // With the write-ahead log, readings spilled there are not in the buffers yet: the
        // store has everything once the log has nothing unsettled either.
        let value = buffered + gauge("bucketd_wal_unsettled_readings").unwrap_or(0.0);
        if value == 0.0 {
            return Ok(Some(Instant::now()));
        }
        if Instant::now() >= deadline {
            bail!("{value} readings still not stored {timeout:?} after the load ended");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every reading of `key` in `[from, to)`: (timestamp ms, temperature).
async fn read_sensor(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    from: i64,
    to: i64,
) -> anyhow::Result<Vec<(i64, Option<f64>)>> {
    let url = format!("{base}/api/v1/readings");
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = reqwest::Url::parse(&url)?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("sensor", key)
                .append_pair("limit", &PAGE.to_string())
                .append_pair("format", "ndjson");
            match &cursor {
                Some(c) => q.append_pair("cursor", c),
                None => q.append_pair("from", &from.to_string()).append_pair("to", &to.to_string()),
            };
        }
        let req = client.get(url);
        let resp = req.send().await.with_context(|| format!("querying {key}"))?;
        let status = resp.status();
        if status.as_u16() == 404 {
            return Ok(out);
        }
        if !status.is_success() {
            bail!("querying {key}: {status}: {}", resp.text().await.unwrap_or_default());
        }
        let body = resp.bytes().await?;
        cursor = None;
        for line in body.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line)
                .with_context(|| format!("querying {key}: a line is not JSON"))?;
            if let Some(c) = v.get("next_cursor").and_then(|c| c.as_str()) {
                cursor = Some(c.to_owned());
                continue;
            }
            let t = v["t"].as_str().context("reading without \"t\"")?;
            let ts = chrono::DateTime::parse_from_rfc3339(t)
                .with_context(|| format!("bad timestamp {t:?}"))?
                .timestamp_millis();
            out.push((ts, v["fields"]["temperature"].as_f64()));
        }
        if cursor.is_none() {
            return Ok(out);
        }
    }
}

fn check_sensor(
    layout: &Layout,
    s: u64,
    per_sensor: u64,
    got: &[(i64, Option<f64>)],
    accepted: &Bits,
    failed: &Bits,
    tally: &Tally,
) {
    let sensors = layout.sensors();
    let mut seen = vec![0u32; per_sensor as usize];
    tally.read.fetch_add(got.len() as u64, Ordering::Relaxed);
    for &(ts, temp) in got {
        let off = ts - layout.start_ms();
        let k = off / layout.step_ms();
        if off < 0 || off % layout.step_ms() != 0 || k as u64 >= per_sensor {
            tally.unexpected.fetch_add(1, Ordering::Relaxed);
            tally.note(format!("{}: reading at {ts} was never sent", layout.key(s)));
            continue;
        }
        let k = k as u64;
        seen[k as usize] += 1;
        let expected = (1500 + (s * 7 + k) % 1500) as f64 / 100.0;
        if temp != Some(expected) {
            tally.wrong_value.fetch_add(1, Ordering::Relaxed);
            tally.note(format!("{}: at {ts} temperature {temp:?}, sent {expected}", layout.key(s)));
        }
    }
    for (k, &count) in seen.iter().enumerate() {
        let n = k as u64 * sensors + s;
        let was_accepted = accepted.get(n);
        if was_accepted && count == 0 {
            tally.lost.fetch_add(1, Ordering::Relaxed);
            tally.note(format!("{}: accepted reading {k} is missing", layout.key(s)));
        }
        if count > 1 {
            tally.duplicated.fetch_add(u64::from(count - 1), Ordering::Relaxed);
            tally.note(format!("{}: reading {k} is there {count} times", layout.key(s)));
        }
        if !was_accepted && count > 0 {
            if failed.get(n) {
                tally.from_failed_requests.fetch_add(1, Ordering::Relaxed);
            } else {
                tally.unexpected.fetch_add(1, Ordering::Relaxed);
                tally.note(format!("{}: reading {k} was never sent", layout.key(s)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_lost_duplicated_and_unexpected_readings() {
        // 2 sensors, readings 0..6 sent: sensor 1 has k = 0, 1, 2 (n = 1, 3, 5).
        let layout = Layout::new("env", "s", 2, 1_000, 10);
        let mut accepted = Bits::new(6);
        accepted.set_range((0, 4));
        let mut failed = Bits::new(6);
        failed.set_range((4, 6));
        let temp = |k: u64| Some((1500 + (7 + k) % 1500) as f64 / 100.0);
        let tally = Tally::default();
        // k = 0 twice, k = 1 missing, k = 2 (n = 5, failed request) present, one stray.
        let got = [(1_000, temp(0)), (1_000, temp(0)), (1_020, temp(2)), (1_005, None)];
        check_sensor(&layout, 1, 3, &got, &accepted, &failed, &tally);
        let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!(v(&tally.duplicated), 1);
        assert_eq!(v(&tally.lost), 1);
        assert_eq!(v(&tally.from_failed_requests), 1);
        assert_eq!(v(&tally.unexpected), 1);
        assert_eq!(v(&tally.wrong_value), 0);
        assert_eq!(v(&tally.read), 4);
    }
}
