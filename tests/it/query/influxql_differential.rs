//! Differential InfluxQL: statements nobody picked by hand, sent to bucketd and to InfluxDB 1.6
//! on the same data, their answers compared as the oracle test compares them.
//!
//! A grammar of the forms Grafana and Chronograf send (aggregates and selectors, window
//! transformations, windows with and without offsets, tag groups, fills, `ORDER BY time DESC`,
//! `LIMIT`/`SLIMIT`, `tz()`, raw selects and `SHOW`) draws [`STATEMENTS`] statements for each of
//! [`SEEDS`]. The data ([`data`]) has gaps, series that write at equal timestamps, and a field
//! only some series have.
//!
//! Run: `cargo test --test it influxql_differential`. The statements that differ, with both
//! answers, are written to `target/tmp/influxql_differential_report.txt`.
//! `BUCKETD_INFLUXQL_DIFFERENTIAL_SHOW=1` prints every statement with its verdict.

use std::fmt::Write as _;

use super::influxql_oracle::{DB, Query, Subject, compare_bodies, send, wait_for_all_points};
use crate::support::influxd::Influxd;

/// 2024-03-01T00:00:00Z.
const START: i64 = 1_709_251_200_000;
const MINUTE: i64 = 60_000;
const HOUR: i64 = 3_600_000;
/// Hours of data.
const HOURS: i64 = 12;
const SEEDS: [u64; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
const STATEMENTS: usize = 400;
/// The share of each seed's statements whose answers must agree (or differ by one of
/// InfluxDB's bugs, [`influxdb_bug`]).
const AGREEMENT: f64 = 0.99;

/// `env,site=a|b,room=r1|r2`: `temp` (float) and `n` (integer) in every series, `hum` (float)
/// only on site `a`; the four series write once a minute at the same times, with gaps (`b,r2`
/// writes nothing in hours 3 and 4; `a,r2` starts at hour 2). `pwr,host=h1|h2`: `w` (integer)
/// about every five minutes at irregular milliseconds. Values repeat often, so equal values at
/// equal times (ties) are common.
fn data() -> String {
    let mut out = String::new();
    let series = [("a", "r1"), ("a", "r2"), ("b", "r1"), ("b", "r2")];
    for k in 0..HOURS * 60 {
        let t = START + k * MINUTE;
        let hour = k / 60;
        for (i, (site, room)) in series.iter().enumerate() {
            let i = i as i64;
            if (i == 3 && (3..5).contains(&hour)) || (i == 1 && hour < 2) {
                continue;
            }
            let temp = ((k * 7 + i * 3) % 11) as f64 * 0.5 - 2.0;
            let n = (k * 3 + i) % 17 - 5;
            write!(out, "env,room={room},site={site} temp={temp:?},n={n}i").unwrap();
            if *site == "a" {
                write!(out, ",hum={:?}", (k % 5) as f64 * 1.5 + 40.0).unwrap();
            }
            writeln!(out, " {t}").unwrap();
        }
    }
    for (i, host) in ["h1", "h2"].iter().enumerate() {
        let mut t = START + 1_234 * (i as i64 + 1);
        let mut k = 0i64;
        while t < START + HOURS * HOUR {
            writeln!(out, "pwr,host={host} w={}i {t}", (k * 13 + i as i64 * 5) % 29).unwrap();
            t += 5 * MINUTE - 7_777 + (k % 7) * 3_001;
            k += 1;
        }
    }
    out
}

/// A 64-bit LCG: the same statements for a seed on every machine.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 =
            self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One measurement's fields and tags as the grammar uses them.
struct Measurement {
    name: &'static str,
    fields: &'static [&'static str],
    tags: &'static [(&'static str, &'static [&'static str])],
}

const MEASUREMENTS: [Measurement; 2] = [
    Measurement {
        name: "env",
        fields: &["temp", "n", "hum"],
        tags: &[("site", &["a", "b"]), ("room", &["r1", "r2"])],
    },
    Measurement { name: "pwr", fields: &["w"], tags: &[("host", &["h1", "h2"])] },
];

const WINDOWS: [(&str, i64); 8] = [
    ("1m", MINUTE),
    ("5m", 5 * MINUTE),
    ("7m", 7 * MINUTE),
    ("10m", 10 * MINUTE),
    ("15m", 15 * MINUTE),
    ("30m", 30 * MINUTE),
    ("1h", HOUR),
    ("2h", 2 * HOUR),
];

const AGGREGATES: [&str; 11] =
    ["mean", "max", "min", "count", "sum", "first", "last", "median", "spread", "stddev", "mode"];

/// One statement of the grammar.
fn statement(rng: &mut Rng) -> String {
    let m = rng.pick(&MEASUREMENTS);
    match rng.below(100) {
        0..=49 => aggregate(rng, m),
        50..=64 => transformation(rng, m),
        65..=84 => raw(rng, m),
        _ => show(rng, m),
    }
}

/// `time >= … AND time < …` (or `<=`, as Grafana writes it), within or around the data: whole
/// hours, whole minutes, or any millisecond, `max_len` long at most.
fn time_range(rng: &mut Rng, max_len: i64) -> String {
    let grain = *rng.pick(&[HOUR, MINUTE, 1]);
    let from = START - HOUR + (rng.below(((HOURS + 1) * HOUR / grain) as u64) as i64) * grain;
    let len = (1 + rng.below((max_len / grain) as u64) as i64) * grain;
    let upper = if rng.chance(50) { "<=" } else { "<" };
    format!("time >= {from}ms AND time {upper} {}ms", from + len)
}

/// Nothing, or a condition on tags as dashboards' template variables write them.
fn tag_condition(rng: &mut Rng, m: &Measurement) -> String {
    let (key, values) = rng.pick(m.tags);
    let value = rng.pick(values);
    match rng.below(10) {
        0..=3 => String::new(),
        4..=6 => format!(" AND \"{key}\" = '{value}'"),
        7 => format!(" AND \"{key}\" != '{value}'"),
        8 => format!(" AND \"{key}\" =~ /^({})$/", values.join("|")),
        _ => {
            let (key2, values2) = rng.pick(m.tags);
            format!(" AND (\"{key}\" = '{value}' OR \"{key2}\" = '{}')", rng.pick(values2))
        }
    }
}

fn call(rng: &mut Rng, m: &Measurement) -> String {
    let field = rng.pick(m.fields);
    match rng.below(14) {
        0 => format!("percentile(\"{field}\", {})", rng.pick(&[10, 50, 90, 100])),
        1 => format!("count(distinct(\"{field}\"))"),
        2 => format!("mean(\"{field}\") * 2"),
        _ => format!("{}(\"{field}\")", rng.pick(&AGGREGATES)),
    }
}

/// `GROUP BY time(…)[, tags]` and what may follow it.
fn grouping(rng: &mut Rng, m: &Measurement, tags_allowed: bool) -> (String, bool) {
    let (w, w_ms) = *rng.pick(&WINDOWS);
    let mut group = if rng.chance(15) {
        let offset = rng.below((w_ms / MINUTE) as u64).max(1);
        format!(" GROUP BY time({w}, {offset}m)")
    } else {
        format!(" GROUP BY time({w})")
    };
    let mut by_tags = false;
    if tags_allowed && rng.chance(40) {
        by_tags = true;
        match rng.below(3) {
            0 => group.push_str(", *"),
            1 => write!(group, ", \"{}\"", m.tags[0].0).unwrap(),
            _ => {
                for (key, _) in m.tags {
                    write!(group, ", \"{key}\"").unwrap();
                }
            }
        }
    }
    (group, by_tags)
}

fn tail(rng: &mut Rng, by_tags: bool, fills: bool) -> String {
    let mut out = String::new();
    if fills && rng.chance(60) {
        let fill = rng.pick(&["null", "none", "0", "previous", "linear", "-1"]);
        write!(out, " fill({fill})").unwrap();
    }
    if rng.chance(20) {
        out.push_str(" ORDER BY time DESC");
    }
    if rng.chance(20) {
        write!(out, " LIMIT {}", 1 + rng.below(5)).unwrap();
        if rng.chance(30) {
            write!(out, " OFFSET {}", rng.below(3)).unwrap();
        }
    }
    if by_tags && rng.chance(25) {
        write!(out, " SLIMIT {}", 1 + rng.below(3)).unwrap();
        if rng.chance(30) {
            write!(out, " SOFFSET {}", rng.below(2)).unwrap();
        }
    }
    if rng.chance(15) {
        let zone = rng.pick(&["Europe/Paris", "Asia/Kolkata", "America/New_York", "UTC"]);
        write!(out, " tz('{zone}')").unwrap();
    }
    out
}

fn aggregate(rng: &mut Rng, m: &Measurement) -> String {
    let mut calls = vec![call(rng, m)];
    if rng.chance(25) {
        calls.push(call(rng, m));
    }
    let range = time_range(rng, 8 * HOUR);
    let cond = tag_condition(rng, m);
    let (group, by_tags) = grouping(rng, m, true);
    let tail = tail(rng, by_tags, true);
    format!("SELECT {} FROM \"{}\" WHERE {range}{cond}{group}{tail}", calls.join(", "), m.name)
}

fn transformation(rng: &mut Rng, m: &Measurement) -> String {
    let field = rng.pick(m.fields);
    let inner = format!("{}(\"{field}\")", rng.pick(&["mean", "max", "sum", "last", "count"]));
    let outer = match rng.below(6) {
        0 => format!("derivative({inner})"),
        1 => format!("derivative({inner}, 1m)"),
        2 => format!("non_negative_derivative({inner}, 1s)"),
        3 => format!("difference({inner})"),
        4 => format!("moving_average({inner}, {})", 2 + rng.below(3)),
        _ => format!("cumulative_sum({inner})"),
    };
    let range = time_range(rng, 6 * HOUR);
    let cond = tag_condition(rng, m);
    let (group, by_tags) = grouping(rng, m, true);
    let fills = rng.chance(30);
    let tail = tail(rng, by_tags, fills);
    format!("SELECT {outer} FROM \"{}\" WHERE {range}{cond}{group}{tail}", m.name)
}

fn raw(rng: &mut Rng, m: &Measurement) -> String {
    let columns = match rng.below(4) {
        0 => "*".to_owned(),
        1 => m.fields.iter().map(|f| format!("\"{f}\"")).collect::<Vec<_>>().join(", "),
        2 => format!("\"{}\", \"{}\"", rng.pick(m.fields), m.tags[0].0),
        _ => format!("\"{}\"", rng.pick(m.fields)),
    };
    let range = time_range(rng, HOUR);
    let cond = tag_condition(rng, m);
    let by_tags = rng.chance(25);
    let group = if by_tags { " GROUP BY *" } else { "" };
    let tail = tail(rng, by_tags, false);
    format!("SELECT {columns} FROM \"{}\" WHERE {range}{cond}{group}{tail}", m.name)
}

fn show(rng: &mut Rng, m: &Measurement) -> String {
    let (key, _) = rng.pick(m.tags);
    match rng.below(6) {
        0 => "SHOW MEASUREMENTS".to_owned(),
        1 => format!("SHOW TAG KEYS FROM \"{}\"", m.name),
        2 => format!("SHOW TAG VALUES FROM \"{}\" WITH KEY = \"{key}\"", m.name),
        3 => format!("SHOW FIELD KEYS FROM \"{}\"", m.name),
        4 => format!("SHOW SERIES FROM \"{}\"", m.name),
        _ => "SHOW TAG VALUES WITH KEY IN (\"site\", \"host\")".to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influxql_differential_agrees_with_influxdb() {
    let data = data();
    let reference = Influxd::start().await;
    reference.admin(None, &format!("CREATE DATABASE {DB}")).await;
    reference.write(DB, "ms", data.clone()).await;
    wait_for_all_points(&reference, &data).await;
    let subject = Subject::start(&data).await;
    let show_all = std::env::var_os("BUCKETD_INFLUXQL_DIFFERENTIAL_SHOW").is_some();

    let mut report = String::new();
    let mut summary = Vec::new();
    for seed in SEEDS {
        let mut rng = Rng(seed);
        let (mut agreed, mut excused) = (0, 0);
        for i in 0..STATEMENTS {
            let query = Query::new(&statement(&mut rng));
            let expected = send(&reference.client, &reference.url, &query).await;
            let got = send(&subject.client, &subject.url, &query).await;
            let mut diffs = Vec::new();
            if expected.status != got.status {
                diffs
                    .push(format!("HTTP status: expected {}, got {}", expected.status, got.status));
            }
            compare_bodies(&expected.body, &got.body, false, &mut diffs);
            if show_all {
                eprintln!(
                    "{} seed {seed} #{i}: {}",
                    if diffs.is_empty() { "ok  " } else { "DIFF" },
                    query.text
                );
            }
            if diffs.is_empty() {
                agreed += 1;
                continue;
            }
            if let Some(bug) = influxdb_bug(&reference, &query, &expected.body).await {
                excused += 1;
                writeln!(report, "\n== seed {seed} #{i} (excused: {bug}): {}", query.text).unwrap();
                continue;
            }
            writeln!(report, "\n== seed {seed} #{i}: {}", query.text).unwrap();
            for d in diffs.iter().take(8) {
                writeln!(report, "   {d}").unwrap();
            }
            writeln!(report, "   InfluxDB: {}", clip(&expected.body)).unwrap();
            writeln!(report, "   {}: {}", subject.name, clip(&got.body)).unwrap();
        }
        summary.push((seed, agreed, excused));
    }
    let file =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("influxql_differential_report.txt");
    let lines: Vec<String> = summary
        .iter()
        .map(|(seed, agreed, excused)| {
            format!(
                "seed {seed}: {agreed} of {STATEMENTS} statements agree with InfluxDB, {excused} \
                 more differ by InfluxDB's bugs"
            )
        })
        .collect();
    std::fs::write(&file, format!("{}\n{report}", lines.join("\n"))).ok();
    eprintln!("{} (differences in {})", lines.join("; "), file.display());
    for (seed, agreed, excused) in summary {
        let agreed = agreed + excused;
        assert!(
            agreed as f64 >= AGREEMENT * STATEMENTS as f64,
            "seed {seed}: only {agreed} of {STATEMENTS} statements agree, below {AGREEMENT}; see {}",
            file.display()
        );
    }
}

/// The InfluxDB 1.6 bug its own answers show for a statement, if any. Each is a wrong answer
/// whatever bucketd says, so the difference is not counted against bucketd:
/// - the same series twice in one result (seen with `percentile()` beside another call under
///   `GROUP BY` tags);
/// - more rows in a series than `LIMIT` allows (seen with `percentile()`);
/// - no series under `LIMIT`, where the same statement without it has some (`percentile()`
///   loses every row to the limit);
/// - no series for a `percentile()` whose first window has too few values for its rank, where
///   the same statement with a `count()` beside it answers percentiles in other windows (one
///   empty window at the start ends InfluxDB's whole answer; one later does not).
async fn influxdb_bug(
    reference: &Influxd,
    query: &Query,
    answer: &serde_json::Value,
) -> Option<&'static str> {
    let series = |body: &serde_json::Value| -> Vec<serde_json::Value> {
        body["results"][0]["series"].as_array().cloned().unwrap_or_default()
    };
    let found = series(answer);
    let keys: Vec<String> = found.iter().map(|s| format!("{}{}", s["name"], s["tags"])).collect();
    if keys.iter().enumerate().any(|(i, k)| keys[..i].contains(k)) {
        return Some("a series answered twice");
    }
    let text = &query.text;
    if found.is_empty()
        && let Some(beside) = with_count_beside_percentile(text)
    {
        let answer = send(&reference.client, &reference.url, &Query::new(&beside)).await;
        let percentiles = series(&answer.body).iter().any(|s| {
            let at = s["columns"].as_array().and_then(|c| c.iter().position(|c| c == "percentile"));
            let rows = s["values"].as_array().cloned().unwrap_or_default();
            at.is_some_and(|at| rows.iter().any(|r| !r[at].is_null()))
        });
        if percentiles {
            return Some("a percentile() whose first window has no value empties the answer");
        }
    }
    let at = text.find(" LIMIT ")?;
    let limit: usize = text[at + 7..].split(' ').next()?.parse().ok()?;
    if found.iter().any(|s| s["values"].as_array().is_some_and(|v| v.len() > limit)) {
        return Some("more rows than LIMIT");
    }
    if found.is_empty() {
        let rest = text[at + 7..].split(' ').skip(1).collect::<Vec<_>>();
        let rest = match rest.first() {
            Some(&"OFFSET") => &rest[2..],
            _ => &rest[..],
        };
        let unlimited = Query::new(&format!("{} {}", &text[..at], rest.join(" ")));
        let without = send(&reference.client, &reference.url, &unlimited).await;
        if !series(&without.body).is_empty() {
            return Some("every row lost to LIMIT");
        }
    }
    None
}

/// The statement with `count(f)` beside its first `percentile(f, p)`: InfluxDB then answers
/// the percentiles it left out alone.
fn with_count_beside_percentile(text: &str) -> Option<String> {
    let at = text.find("percentile(\"")?;
    let field_at = at + "percentile(\"".len();
    let field = &text[field_at..field_at + text[field_at..].find('"')?];
    let end = field_at + text[field_at..].find(')')? + 1;
    Some(format!("{}, count(\"{field}\"){}", &text[..end], &text[end..]))
}

fn clip(body: &serde_json::Value) -> String {
    let text = body.to_string();
    match text.char_indices().nth(600) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The generator is deterministic and draws every kind of statement.
#[test]
fn influxql_differential_statements_are_fixed_by_the_seed() {
    let draw = |seed| {
        let mut rng = Rng(seed);
        (0..STATEMENTS).map(|_| statement(&mut rng)).collect::<Vec<_>>()
    };
    assert_eq!(draw(1), draw(1));
    let all = draw(1);
    for needle in ["GROUP BY time(", "derivative(", "SHOW ", "ORDER BY time DESC", "tz(", "SLIMIT"]
    {
        assert!(all.iter().any(|s| s.contains(needle)), "no statement with {needle}");
    }
    assert!(all.iter().any(|s| s.starts_with("SELECT *")), "no SELECT *");
}
