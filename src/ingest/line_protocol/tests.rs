use std::borrow::Cow;
use std::sync::Arc;

use proptest::prelude::*;

use super::entry::echo;
use super::*;
use crate::ingest::validate::SeriesLimit;
use crate::model::series_key::{parse_series_key, series_key};
use crate::model::{FieldValue, Series};

const NOW: i64 = 1_700_000_000_000;

fn parse(body: &str) -> Vec<Result<Item, LineError>> {
    parse_body(body.as_bytes(), Precision::Nanoseconds, NOW, &InputLimits::default())
}

fn one(body: &str) -> Item {
    let mut r = parse(body);
    assert_eq!(r.len(), 1, "{r:?}");
    r.remove(0).unwrap_or_else(|e| panic!("{body:?}: {e}"))
}

fn err(body: &str) -> LineError {
    let mut r = parse(body);
    assert_eq!(r.len(), 1, "{r:?}");
    r.remove(0).expect_err(body)
}

fn strings(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn precision_spellings() {
    for (s, p) in [
        ("n", Precision::Nanoseconds),
        ("ns", Precision::Nanoseconds),
        ("u", Precision::Microseconds),
        ("us", Precision::Microseconds),
        ("ms", Precision::Milliseconds),
        ("s", Precision::Seconds),
        ("m", Precision::Minutes),
        ("h", Precision::Hours),
    ] {
        assert_eq!(Precision::from_v1(s), Some(p), "{s}");
    }
    assert_eq!(Precision::from_v1("x"), None);
    assert_eq!(Precision::from_v1("NS"), None);
    for (s, p) in [
        ("ns", Precision::Nanoseconds),
        ("us", Precision::Microseconds),
        ("ms", Precision::Milliseconds),
        ("s", Precision::Seconds),
    ] {
        assert_eq!(Precision::from_v2(s), Some(p), "{s}");
    }
    for s in ["n", "u", "m", "h", "x"] {
        assert_eq!(Precision::from_v2(s), None, "{s}");
    }
}

#[test]
fn to_millis_floors_and_detects_overflow() {
    assert_eq!(Precision::Nanoseconds.to_millis(1_999_999), Some(1));
    assert_eq!(Precision::Nanoseconds.to_millis(-1), Some(-1));
    assert_eq!(Precision::Nanoseconds.to_millis(-1_000_000), Some(-1));
    assert_eq!(Precision::Nanoseconds.to_millis(-1_000_001), Some(-2));
    assert_eq!(Precision::Microseconds.to_millis(-1), Some(-1));
    assert_eq!(Precision::Microseconds.to_millis(2_500), Some(2));
    assert_eq!(Precision::Milliseconds.to_millis(-7), Some(-7));
    assert_eq!(Precision::Seconds.to_millis(-2), Some(-2_000));
    assert_eq!(Precision::Minutes.to_millis(2), Some(120_000));
    assert_eq!(Precision::Hours.to_millis(-1), Some(-3_600_000));
    assert_eq!(Precision::Seconds.to_millis(i64::MAX / 999), None);
    assert_eq!(Precision::Hours.to_millis(i64::MIN / 1_000), None);
}

#[test]
fn parses_a_point() {
    let (s, r) =
        one("env,site=w3,sensor=s1 temp=21.5,n=3i,u=4u,ok=T,msg=\"hi\" 1700000000123456789");
    assert_eq!(s.measurement(), "env");
    assert_eq!(s.tag_vec(), strings(&[("sensor", "s1"), ("site", "w3")]));
    assert_eq!(s.key(), "env,sensor=s1,site=w3");
    assert_eq!(r.ts, 1_700_000_000_123);
    assert_eq!(
        r.fields.to_vec(),
        vec![
            ("temp".into(), FieldValue::Float(21.5)),
            ("n".into(), FieldValue::Int(3)),
            ("u".into(), FieldValue::UInt(4)),
            ("ok".into(), FieldValue::Bool(true)),
            ("msg".into(), FieldValue::Str("hi".into())),
        ]
    );
}

#[test]
fn lines_comments_blanks_and_crlf() {
    let body = "# header\r\n\r\n  \na v=1 1000000\r\n   # indented comment\nb v=2\r\n\nc v=3";
    let r = parse(body);
    let got: Vec<_> = r.iter().map(|x| x.as_ref().unwrap().0.measurement().to_owned()).collect();
    assert_eq!(got, ["a", "b", "c"]);
    assert_eq!(r[0].as_ref().unwrap().1.ts, 1);
    assert_eq!(r[1].as_ref().unwrap().1.ts, NOW);
    assert!(parse("").is_empty());
    assert!(parse("\n\n# only comments\n").is_empty());
}

#[test]
fn precision_applies_to_timestamps() {
    let limits = InputLimits::default();
    let r = parse_body(b"m v=1 -1\nm v=1 1500", Precision::Seconds, NOW, &limits);
    assert_eq!(r[0].as_ref().unwrap().1.ts, -1_000);
    assert_eq!(r[1].as_ref().unwrap().1.ts, 1_500_000);
    let r = parse_body(b"m v=1 -1", Precision::Microseconds, NOW, &limits);
    assert_eq!(r[0].as_ref().unwrap().1.ts, -1);
}

#[test]
fn errors_name_the_line_and_echo_it() {
    let body = "ok v=1\nbad v=\nok v=2\n\"multi v=\"a\nb\"\nlast v=x";
    let r = parse(body);
    assert_eq!(r.len(), 5);
    assert!(r[0].is_ok() && r[2].is_ok() && r[3].is_ok());
    let e = r[1].as_ref().unwrap_err();
    assert_eq!((e.line, e.input.as_str(), e.reason), (2, "bad v=", "syntax"));
    assert!(e.message.contains("column 7"), "{}", e.message);
    // The string's newline moves the following line numbers on, as a text editor counts.
    let e = r[4].as_ref().unwrap_err();
    assert_eq!((e.line, e.input.as_str()), (6, "last v=x"));

    let long = format!("m,{} v=", "t=x".repeat(100));
    let e = err(&long);
    assert_eq!(e.input.len(), ECHO_BYTES);
    assert!(long.starts_with(&e.input));
    let wide = format!("a{}", "é".repeat(60));
    assert_eq!(echo(wide.as_bytes()), format!("a{}", "é".repeat(49)), "cut on a char boundary");
    assert_eq!(echo(b"a\xffb\r"), "a\u{fffd}b");
    // A final CR ends the line; one in the middle is an error.
    assert_eq!(one("m v=1\r").1.fields.len(), 1);
    assert_eq!(err("m v=1\rx").line, 1);
}

#[test]
fn reasons() {
    assert_eq!(err("m v=1 9223372036854775808").reason, "timestamp");
    assert_eq!(err("m v=1 1x").reason, "syntax");
    assert_eq!(err("m v=9223372036854775808i").reason, "value");
    assert_eq!(err("m v=-1u").reason, "syntax");
    assert_eq!(err("m v=1e400").reason, "value");
    assert_eq!(err("m v=-inf").reason, "syntax");
    assert_eq!(err("m v=-nan").reason, "syntax");
    assert_eq!(err("m,a=1,a=2 v=1").reason, "syntax");
    // Limits and the store's range come from `validate`.
    let r =
        parse_body(b"m v=1 -62167219200001", Precision::Milliseconds, NOW, &InputLimits::default());
    assert_eq!(r[0].as_ref().unwrap_err().reason, "timestamp", "before the year 0000");
    let tags: String = (0..65).map(|i| format!(",t{i}=x")).collect();
    assert_eq!(err(&format!("m{tags} v=1")).reason, "fields");
    assert_eq!(err(&format!("m {}=1", "f".repeat(300))).reason, "name");
    let r = parse_body(b"m v=1 3000000000000", Precision::Hours, NOW, &InputLimits::default());
    assert_eq!(r[0].as_ref().unwrap_err().reason, "timestamp");
}

#[test]
fn precision_overflow_is_a_timestamp_error() {
    let r =
        parse_body(b"m v=1 9223372036854775807", Precision::Seconds, NOW, &InputLimits::default());
    let e = r[0].as_ref().unwrap_err();
    assert_eq!(e.reason, "timestamp");
    assert!(e.message.contains("overflows"), "{}", e.message);
}

#[test]
fn invalid_utf8_rejects_only_its_line() {
    let r = parse_body(
        b"a v=1\nb\xff v=1\nc s=\"\xc3\"\nd v=1",
        Precision::Nanoseconds,
        NOW,
        &InputLimits::default(),
    );
    assert_eq!(r.len(), 4);
    assert!(r[0].is_ok() && r[3].is_ok());
    assert_eq!(r[1].as_ref().unwrap_err().line, 2);
    assert!(r[1].as_ref().unwrap_err().message.contains("UTF-8"));
    assert_eq!(r[2].as_ref().unwrap_err().line, 3);
}

#[test]
fn repeated_field_keeps_first_place_and_last_value() {
    let (_, r) = one("m a=1,b=2,a=\"x\"");
    assert_eq!(
        r.fields.to_vec(),
        vec![("a".into(), FieldValue::Str("x".into())), ("b".into(), FieldValue::Float(2.0))]
    );
}

/// The same with more fields than are scanned: the repeated key is found by its index.
#[test]
fn repeated_field_of_a_wide_line_keeps_first_place_and_last_value() {
    let fields: Vec<String> = (0..40).map(|i| format!("f{i}={i}")).collect();
    let (_, r) = one(&format!("m {},f3=-1,f39=\"x\",f40=40", fields.join(",")));
    assert_eq!(r.fields.len(), 41);
    assert_eq!(r.fields[3], ("f3".into(), FieldValue::Float(-1.0)));
    assert_eq!(r.fields[39], ("f39".into(), FieldValue::Str("x".into())));
    assert_eq!(r.fields[40], ("f40".into(), FieldValue::Float(40.0)));
    assert_eq!(r.fields[20], ("f20".into(), FieldValue::Float(20.0)));
}

#[test]
fn series_key_is_canonical_whatever_the_tag_order() {
    let (a, _) = one("w\\ x\\,y,z=1,b\\ k=v\\=\\,w v=1");
    let (b, _) = one("w\\ x\\,y,b\\ k=v\\=\\,w,z=1 v=1");
    assert_eq!(a, b);
    assert_eq!(a.measurement(), "w x,y");
    assert_eq!(a.tag_vec(), strings(&[("b k", "v=,w"), ("z", "1")]));
    assert_eq!(a.key(), "w\\ x\\,y,b\\ k=v\\=\\,w,z=1");
    // Literal backslashes stay literal and the key still parses back.
    let (c, _) = one("m\\=x,t=a\\\\\\ b v=1");
    assert_eq!((c.measurement(), c.tags().next().unwrap().1), ("m\\=x", "a\\\\ b"));
    assert_eq!(c.key(), c.series_key());
    let back = parse_series_key(c.key()).unwrap();
    assert_eq!(back.measurement, c.measurement());
    assert_eq!(back.tags, vec![(Cow::from("t"), Cow::from("a\\\\ b"))]);
}

#[test]
fn known_series_are_shared_and_still_checked() {
    let limits = InputLimits {
        max_fields: 2,
        series: Some(Arc::new(SeriesLimit::new(1))),
        ..InputLimits::default()
    };
    let body = b"m,b=2,a=1 v=1 1\nm,a=1,b=2 v=2 2\nm,b=2,a=1 v=3 3";
    let first = parse_body(body, Precision::Nanoseconds, NOW, &limits);
    let again = parse_body(body, Precision::Nanoseconds, NOW, &limits);
    let series: Vec<&Series> = first.iter().chain(&again).map(|r| &r.as_ref().unwrap().0).collect();
    assert_eq!(series[0].key(), "m,a=1,b=2");
    assert_eq!(series[0].tag_vec(), strings(&[("a", "1"), ("b", "2")]));
    // Lines 1 and 3 are written alike, line 2 is the same series written otherwise: all
    // three share the one interned series, across bodies too.
    assert!(series.iter().all(|s| s.is_interned() && Series::ptr_eq(s, series[0])));
    assert_eq!(limits.known.len(), 2, "two texts");
    // The body's readings share one name object.
    let name = |r: &Result<Item, LineError>| r.as_ref().unwrap().1.fields[0].0.as_ptr();
    assert!(first.iter().all(|r| name(r) == name(&first[0])));

    // A known series does not excuse its reading, and an unknown one still needs a slot.
    let bad = parse_body(b"m,b=2,a=1 v=1,w=2,x=3 4", Precision::Nanoseconds, NOW, &limits);
    assert_eq!(bad[0].as_ref().unwrap_err().reason, "fields");
    let new = parse_body(b"m,a=9 v=1 4", Precision::Nanoseconds, NOW, &limits);
    assert_eq!(new[0].as_ref().unwrap_err().reason, "cardinality");
    assert_eq!(limits.known.len(), 2, "refused series are not remembered");
}

#[test]
fn known_series_with_escaped_spaces_parse_like_new_ones() {
    let body: &[u8] = b"m\\ x,t=a\\ b v=1 1\nm\\ x,t=a\\ b v=2 2\nm\\ x,t=a\\ b v\n\
        m\\ x,t=a\\\\ b v=1\nm\\ x,t=a\\ b\nm\\ x,t=a\\ b  v=3 3";
    let limits = wide_limits();
    let whole = parse_body(body, Precision::Nanoseconds, NOW, &limits);
    assert_eq!(whole, parse_framed(body));
    assert_eq!(whole[0].as_ref().unwrap().0.key(), "m\\ x,t=a\\ b");
    assert!(Series::ptr_eq(&whole[0].as_ref().unwrap().0, &whole[5].as_ref().unwrap().0));
    assert_eq!(whole.iter().filter(|r| r.is_err()).count(), 2, "{whole:?}");
}

#[test]
fn a_bad_comment_is_an_error() {
    let e = err("# tab\there");
    assert_eq!(e.reason, "syntax");
    assert!(e.message.contains("comment"));
    assert!(parse("# fine \"quoted\n\r\n").is_empty());
}

#[test]
fn framing_respects_quotes_only_in_field_values() {
    assert_eq!(complete_line_len(b""), None);
    assert_eq!(complete_line_len(b"m v=1"), None);
    assert_eq!(complete_line_len(b"m v=1\nm v=2\n"), Some(6));
    assert_eq!(complete_line_len(b"\n"), Some(1));
    assert_eq!(complete_line_len(b"m s=\"a\nb\"\nnext"), Some(10));
    assert_eq!(complete_line_len(b"m s=\"a\nb"), None);
    assert_eq!(complete_line_len(b"m s=\"a\\\"\nb\" 1\n"), Some(14));
    assert_eq!(complete_line_len(b"m s=\"a\\\\\"\nb\"\n"), Some(10));
    assert_eq!(complete_line_len(b"m a=1,s=\"\n\",b=2\n"), Some(16));
    // Quotes in measurement, tag and field-key position are literal.
    assert_eq!(complete_line_len(b"\"m,t=\"x v=1\n\""), Some(12));
    assert_eq!(complete_line_len(b"m \"=1\nx"), Some(6));
    assert_eq!(complete_line_len(b"# \"comment\nx"), Some(11));
    // After the fields nothing can open a string.
    assert_eq!(complete_line_len(b"m v=1 \"\n"), Some(8));
    assert_eq!(complete_line_len(b"m v=x\"\n"), Some(7));
}

// ---- properties ------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Point {
    measurement: String,
    tags: Vec<(String, String)>,
    fields: Vec<(String, FieldValue)>,
    ts: Option<i64>,
}

/// Text for a name: no control characters (they have no escape), no trailing backslash
/// (it would escape the separator after it).
fn name() -> impl Strategy<Value = String> {
    "[a-z0-9 ,=\\\\\"#é_.-]{1,8}".prop_filter("no trailing backslash", |s| !s.ends_with('\\'))
}

fn field_value() -> impl Strategy<Value = FieldValue> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(FieldValue::Float),
        any::<i64>().prop_map(FieldValue::Int),
        any::<u64>().prop_map(FieldValue::UInt),
        any::<bool>().prop_map(FieldValue::Bool),
        "[a-z \"\\\\\n\r\t,=é]{0,10}".prop_map(FieldValue::Str),
    ]
}

fn point() -> impl Strategy<Value = Point> {
    (
        name().prop_filter("not a comment", |m| !m.starts_with('#')),
        proptest::collection::btree_map(name(), "[a-z0-9 ,=\\\\\"\t\u{1}]{1,6}", 0..4),
        proptest::collection::btree_map(name(), field_value(), 1..5),
        proptest::option::of(any::<i64>()),
    )
        .prop_filter("tag values may not end in a backslash", |(_, tags, _, _)| {
            tags.values().all(|v| !v.ends_with('\\'))
        })
        .prop_map(|(measurement, tags, fields, ts)| Point {
            measurement,
            tags: tags.into_iter().collect(),
            fields: fields.into_iter().collect(),
            ts,
        })
}

fn escape(out: &mut String, s: &str, escapes: &[char]) {
    for c in s.chars() {
        if escapes.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// A small independent encoder.
fn encode(p: &Point, bool_spelling: usize) -> String {
    let mut line = String::new();
    escape(&mut line, &p.measurement, &[',', ' ']);
    for (k, v) in p.tags.iter().rev() {
        line.push(',');
        escape(&mut line, k, &[',', '=', ' ']);
        line.push('=');
        escape(&mut line, v, &[',', '=', ' ']);
    }
    line.push(' ');
    for (i, (k, v)) in p.fields.iter().enumerate() {
        if i > 0 {
            line.push(',');
        }
        escape(&mut line, k, &[',', '=', ' ']);
        line.push('=');
        match v {
            FieldValue::Float(f) => line.push_str(&format!("{f:?}")),
            FieldValue::Int(i) => line.push_str(&format!("{i}i")),
            FieldValue::UInt(u) => line.push_str(&format!("{u}u")),
            FieldValue::Bool(b) => {
                let t = ["t", "T", "true", "True", "TRUE"];
                let f = ["f", "F", "false", "False", "FALSE"];
                line.push_str(if *b { t[bool_spelling % 5] } else { f[bool_spelling % 5] });
            }
            FieldValue::Str(s) => {
                line.push('"');
                escape(&mut line, s, &['"', '\\']);
                line.push('"');
            }
        }
    }
    if let Some(ts) = p.ts {
        line.push_str(&format!(" {ts}"));
    }
    line
}

fn wide_limits() -> InputLimits {
    InputLimits { max_tags: 1000, max_fields: 1000, ..InputLimits::default() }
}

/// Parses `body` by framing it with `complete_line_len` and parsing each frame alone, with
/// line numbers shifted back to the body's.
fn parse_framed(body: &[u8]) -> Vec<Result<Item, LineError>> {
    let mut out = Vec::new();
    let mut rest = body;
    let mut line = 1;
    while !rest.is_empty() {
        let len = complete_line_len(rest).unwrap_or(rest.len());
        let (frame, tail) = rest.split_at(len);
        for mut r in parse_body(frame, Precision::Nanoseconds, NOW, &wide_limits()) {
            if let Err(e) = &mut r {
                e.line += line - 1;
            }
            out.push(r);
        }
        line += memchr::memchr_iter(b'\n', frame).count();
        rest = tail;
    }
    out
}

/// Bytes that exercise the grammar rather than random noise.
fn lp_bytes() -> impl Strategy<Value = Vec<u8>> {
    let pieces: &[&[u8]] = &[
        b"m",
        b"a",
        b"v",
        b"=",
        b",",
        b" ",
        b"\"",
        b"\\",
        b"\n",
        b"\r",
        b"#",
        b"1",
        b"-",
        b".",
        b"i",
        b"u",
        b"t",
        b"e",
        b"\t",
        b"\xc3\xa9",
        b"\xff",
        b"m,t=x v=1",
        b" 123",
    ];
    proptest::collection::vec(proptest::sample::select(pieces), 0..40).prop_map(|p| p.concat())
}

proptest! {
    #[test]
    fn encoded_points_parse_back(
        points in proptest::collection::vec(point(), 1..6),
        crlf in any::<bool>(),
        spelling in 0usize..5,
    ) {
        let sep = if crlf { "\r\n" } else { "\n" };
        let body: String = points.iter().map(|p| encode(p, spelling)).collect::<Vec<_>>().join(sep);
        let parsed = parse_body(body.as_bytes(), Precision::Nanoseconds, NOW, &wide_limits());
        prop_assert_eq!(parsed.len(), points.len(), "{:?}", body);
        for (p, r) in points.iter().zip(&parsed) {
            let (series, reading) = r.as_ref().map_err(|e| TestCaseError::fail(format!("{e} in {body:?}")))?;
            prop_assert_eq!(&series.measurement(), &p.measurement);
            prop_assert_eq!(&series.tag_vec(), &p.tags);
            prop_assert_eq!(&series.key(), &series_key(&p.measurement, &p.tags));
            prop_assert_eq!(reading.fields.len(), p.fields.len());
            for ((gk, gv), (wk, wv)) in reading.fields.iter().zip(&p.fields) {
                prop_assert_eq!(gk, wk);
                match (gv, wv) {
                    (FieldValue::Float(g), FieldValue::Float(w)) => prop_assert_eq!(g.to_bits(), w.to_bits()),
                    _ => prop_assert_eq!(gv, wv),
                }
            }
            prop_assert_eq!(reading.ts, p.ts.map_or(NOW, |ts| ts.div_euclid(1_000_000)));
        }
        prop_assert_eq!(parse_framed(body.as_bytes()), parsed);
    }

    #[test]
    fn coarse_precisions_floor_to_millis(ms in -62_000_000_000_000i64..253_000_000_000_000, sub in 0i64..1_000_000) {
        let cases = [
            (Precision::Microseconds, ms * 1_000 + sub % 1_000, ms),
            (Precision::Milliseconds, ms, ms),
            (Precision::Seconds, ms.div_euclid(1_000), ms.div_euclid(1_000) * 1_000),
            (Precision::Minutes, ms.div_euclid(60_000), ms.div_euclid(60_000) * 60_000),
            (Precision::Hours, ms.div_euclid(3_600_000), ms.div_euclid(3_600_000) * 3_600_000),
        ];
        for (precision, raw, want) in cases {
            let body = format!("m v=1 {raw}");
            let r = parse_body(body.as_bytes(), precision, NOW, &InputLimits::default());
            prop_assert_eq!(r[0].as_ref().unwrap().1.ts, want, "{:?} {}", precision, raw);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_frame_consistently(body in lp_bytes()) {
        let whole = parse_body(&body, Precision::Nanoseconds, NOW, &wide_limits());
        prop_assert_eq!(parse_framed(&body), whole.clone());
        for r in &whole {
            if let Err(e) = r {
                prop_assert!(e.line >= 1 && e.input.len() <= ECHO_BYTES);
            }
        }
    }

    #[test]
    fn a_known_series_parses_like_a_new_one(body in lp_bytes()) {
        // Twice: each series of the first copy is known when its line comes again, while
        // `parse_framed` parses every line with a cold cache.
        let mut twice = body.clone();
        twice.push(b'\n');
        twice.extend_from_slice(&body);
        let whole = parse_body(&twice, Precision::Nanoseconds, NOW, &wide_limits());
        prop_assert_eq!(whole, parse_framed(&twice));
    }

    #[test]
    fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_body(&body, Precision::Nanoseconds, NOW, &InputLimits::default());
        let _ = complete_line_len(&body);
    }

    #[test]
    fn framing_is_the_same_at_every_split(
        points in proptest::collection::vec(point(), 1..3),
        noise in lp_bytes(),
    ) {
        let mut body = points.iter().map(|p| encode(p, 0)).collect::<Vec<_>>().join("\n").into_bytes();
        body.push(b'\n');
        body.extend_from_slice(&noise);
        let first = complete_line_len(&body);
        for k in 0..=body.len() {
            let want = first.filter(|&n| n <= k);
            prop_assert_eq!(complete_line_len(&body[..k]), want, "split at {}", k);
        }
    }
}

proptest! {
    /// What a write pushes and reports is exactly what the per-line parse says, in line order.
    #[test]
    fn the_split_parse_is_the_per_line_parse_apart(
        lines in proptest::collection::vec(
            prop_oneof![
                "m,s=[a-c] v=[0-9]{1,3}(i|\\.5)? [0-9]{1,4}",
                "m [a-z=,\" ]{0,8}",
                Just(String::new()),
                Just("# a comment".to_string()),
            ],
            0..20,
        )
    ) {
        let body = lines.join("\n");
        let limits = InputLimits::default();
        let (items, errors) = parse_body_split(body.as_bytes(), Precision::Seconds, NOW, &limits);
        let (mut want_items, mut want_errors) = (Vec::new(), Vec::new());
        for r in parse_body(body.as_bytes(), Precision::Seconds, NOW, &limits) {
            match r {
                Ok(item) => want_items.push(item),
                Err(e) => want_errors.push(e),
            }
        }
        prop_assert_eq!(items, want_items);
        prop_assert_eq!(errors, want_errors);
    }
}
