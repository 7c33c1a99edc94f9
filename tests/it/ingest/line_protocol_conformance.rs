//! Checks the line-protocol parser against the reference decoder's corpus in
//! `tests/data/line-protocol/` (see its README): every case's verdict, and for accepted inputs
//! every decoded point's measurement, tags, typed fields and timestamp.

use std::collections::BTreeMap;
use std::path::Path;

use bucketd::ingest::line_protocol::{Precision, parse_body};
use bucketd::ingest::validate::InputLimits;
use bucketd::model::series_key;
use bucketd::model::{FieldValue, Reading, SeriesMeta};
use serde_json::Value;

const CASES: usize = 243;
const BINARY_CASES: usize = 5;
/// What lines without a timestamp get.
const NOW_MS: i64 = 1_700_000_000_123;

/// The corpus is about syntax: limits wide enough that `validate` never decides a verdict
/// (one case has 255 tags, more than the default limit).
fn syntax_only_limits() -> InputLimits {
    InputLimits {
        max_sensor_key_bytes: usize::MAX,
        max_fields: usize::MAX,
        max_tags: usize::MAX,
        max_name_bytes: usize::MAX,
        max_tag_value_bytes: usize::MAX,
        max_string_value_bytes: usize::MAX,
        series: None,
        known: Default::default(),
        database: Default::default(),
    }
}

fn read_cases(name: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/line-protocol").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("case is JSON"))
        .collect()
}

fn base64_decode(s: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c).expect("base64 character") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

fn precision_of(case: &Value) -> Precision {
    match case.get("precision").and_then(Value::as_str) {
        None => Precision::Nanoseconds,
        Some(p) => Precision::from_v2(p).unwrap_or_else(|| panic!("unknown precision {p}")),
    }
}

/// The points a case expects: `points` when present, else the single point at top level.
fn expected_points(case: &Value) -> Vec<&Value> {
    match case.get("points") {
        Some(Value::Array(points)) => points.iter().collect(),
        _ => vec![case],
    }
}

fn expected_field(name: &str, spec: &Value) -> FieldValue {
    let value = &spec["value"];
    match spec["type"].as_str().unwrap() {
        "float" => FieldValue::Float(value.as_f64().unwrap()),
        "int" => FieldValue::Int(value.as_i64().unwrap()),
        "uint" => FieldValue::UInt(value.as_u64().unwrap()),
        "string" => FieldValue::Str(value.as_str().unwrap().to_owned()),
        "bool" => FieldValue::Bool(value.as_bool().unwrap()),
        other => panic!("field {name}: unknown type {other}"),
    }
}

/// Compares one decoded point with the corpus; returns a description of the first difference.
fn compare(
    expected: &Value,
    precision: Precision,
    series: &SeriesMeta,
    reading: &Reading,
) -> Result<(), String> {
    let measurement = expected["measurement"].as_str().unwrap();
    if series.measurement() != measurement {
        return Err(format!("measurement {:?}, expected {measurement:?}", series.measurement()));
    }
    let want_tags: BTreeMap<String, String> = expected["tags"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    let tags = series.tag_vec();
    let got_tags: BTreeMap<String, String> = tags.iter().cloned().collect();
    if got_tags != want_tags || got_tags.len() != tags.len() {
        return Err(format!("tags {tags:?}, expected {want_tags:?}"));
    }
    if !tags.windows(2).all(|w| w[0].0 < w[1].0) {
        return Err(format!("tags not sorted by key: {tags:?}"));
    }
    if series.key() != series_key(series.measurement(), &tags) {
        return Err(format!("series key {:?} is not the canonical one", series.key()));
    }
    let want_fields: BTreeMap<&str, FieldValue> = expected["fields"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_str(), expected_field(k, v)))
        .collect();
    let got_fields: BTreeMap<&str, FieldValue> =
        reading.fields.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    if got_fields != want_fields || got_fields.len() != reading.fields.len() {
        return Err(format!("fields {:?}, expected {want_fields:?}", reading.fields));
    }
    let want_ts = match expected.get("timestamp").and_then(|t| t.as_i64()) {
        None => NOW_MS,
        Some(_) if expected.get("timestamp_ns").is_some() => {
            expected["timestamp_ns"].as_i64().unwrap().div_euclid(1_000_000)
        }
        Some(ts) => precision.to_millis(ts).unwrap(),
    };
    if reading.ts != want_ts {
        return Err(format!("timestamp {} ms, expected {want_ts} ms", reading.ts));
    }
    Ok(())
}

/// Runs one case; returns whether the reference accepted it, or a failure description.
/// `shared` has parsed every earlier case: the parser's cache of known series must not change
/// any verdict or point, so the case is parsed with fresh limits and with `shared` (twice).
fn check(case: &Value, input: &[u8], shared: &InputLimits) -> Result<bool, String> {
    let want_ok = case["ok"].as_bool().expect("ok is a bool");
    let precision = precision_of(case);
    let results = parse_body(input, precision, NOW_MS, &syntax_only_limits());
    for pass in ["first", "second"] {
        let cached = parse_body(input, precision, NOW_MS, shared);
        if format!("{cached:?}") != format!("{results:?}") {
            return Err(format!(
                "{pass} parse with known series differs: {cached:?}, fresh: {results:?}"
            ));
        }
    }
    let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    if !want_ok {
        return if errors.is_empty() {
            Err("accepted, but the reference rejects it".into())
        } else {
            Ok(false)
        };
    }
    if let Some(e) = errors.first() {
        return Err(format!("rejected ({e}), but the reference accepts it"));
    }
    let expected = expected_points(case);
    if results.len() != expected.len() {
        return Err(format!("{} points, expected {}", results.len(), expected.len()));
    }
    for (i, (got, want)) in results.iter().zip(&expected).enumerate() {
        let (series, reading) = got.as_ref().unwrap();
        compare(want, precision, series, reading).map_err(|e| format!("point {i}: {e}"))?;
    }
    Ok(true)
}

#[test]
fn parser_agrees_with_the_reference_corpus() {
    let cases = read_cases("cases.jsonl");
    let binary = read_cases("cases_binary.jsonl");
    assert_eq!(cases.len(), CASES, "cases.jsonl should hold {CASES} cases");
    assert_eq!(binary.len(), BINARY_CASES, "cases_binary.jsonl should hold {BINARY_CASES} cases");

    let mut failures = Vec::new();
    let (mut accepted, mut rejected) = (0, 0);
    let shared = syntax_only_limits();
    let inputs = cases
        .iter()
        .map(|c| c["input"].as_str().expect("input").as_bytes().to_vec())
        .chain(binary.iter().map(|c| base64_decode(c["input_b64"].as_str().expect("input_b64"))));
    for (i, (case, input)) in cases.iter().chain(&binary).zip(inputs).enumerate() {
        match check(case, &input, &shared) {
            Ok(true) => accepted += 1,
            Ok(false) => rejected += 1,
            Err(why) => {
                failures.push(format!("case {i} {:?}: {why}", String::from_utf8_lossy(&input)))
            }
        }
    }
    assert!(binary.iter().all(|c| c["ok"] == false), "binary cases are all rejections");
    println!(
        "line-protocol conformance: checked {} cases ({CASES} text + {BINARY_CASES} binary): {accepted} accepted, {rejected} rejected, {} failed",
        accepted + rejected + failures.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree:\n{}",
        failures.len(),
        CASES + BINARY_CASES,
        failures.join("\n")
    );
    assert_eq!(accepted + rejected, CASES + BINARY_CASES);
    assert_eq!((accepted, rejected), (158, 85 + BINARY_CASES), "the README's verdict counts");
}
