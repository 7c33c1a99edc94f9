use super::super::ast::*;
use super::parse;

fn one(q: &str) -> Statement {
    let mut query = parse(q).unwrap_or_else(|e| panic!("{q:?}: {e}"));
    assert_eq!(query.statements.len(), 1, "{q:?}");
    query.statements.remove(0)
}

fn select(q: &str) -> Select {
    match one(q) {
        Statement::Select(s) => *s,
        other => panic!("{q:?} is not a SELECT: {other:?}"),
    }
}

fn field(q: &str) -> Expr {
    select(q).fields.remove(0).expr
}

fn err(q: &str) -> ParseError {
    match parse(q) {
        Ok(query) => panic!("{q:?} parsed: {query:?}"),
        Err(e) => e,
    }
}

/// The error's message, line and char.
fn err_at(q: &str) -> (String, usize, usize) {
    let e = err(q);
    (e.message, e.line, e.char)
}

fn r(name: &str) -> Expr {
    Expr::Ref { name: name.to_string(), kind: None }
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Call { name: name.to_string(), args }
}

fn bin(op: BinaryOp, lhs: Expr, rhs: Expr) -> Expr {
    Expr::Binary { op, lhs: Box::new(lhs), rhs: Box::new(rhs) }
}

fn paren(e: Expr) -> Expr {
    Expr::Paren(Box::new(e))
}

fn m(name: &str) -> Source {
    Source::Measurement { database: None, retention_policy: None, name: name.to_string() }
}

fn s(v: &str) -> String {
    v.to_string()
}

const SEC: i64 = 1_000_000_000;

#[test]
fn grafana_time_series_query() {
    let q = r#"SELECT mean("value") FROM "cpu" WHERE ("host" =~ /^server1$/) AND time >= 1700000000000ms and time <= 1700003600000ms GROUP BY time(10s), "host" fill(null)"#;
    let sel = select(q);
    assert_eq!(sel.fields, vec![Field { expr: call("mean", vec![r("value")]), alias: None }]);
    assert_eq!(sel.from, vec![m("cpu")]);
    let host = paren(bin(BinaryOp::EqRegex, r("host"), Expr::Regex(s("^server1$"))));
    let ge = bin(BinaryOp::GtEq, r("time"), Expr::Duration(1_700_000_000_000 * 1_000_000));
    let le = bin(BinaryOp::LtEq, r("time"), Expr::Duration(1_700_003_600_000 * 1_000_000));
    assert_eq!(sel.condition, Some(bin(BinaryOp::And, bin(BinaryOp::And, host, ge), le)));
    assert_eq!(sel.group_by.time, Some(TimeGroup { interval_ns: 10 * SEC, offset_ns: 0 }));
    assert_eq!(sel.group_by.tags, vec![Dimension::Tag(s("host"))]);
    assert_eq!(sel.fill, Fill::Null);
    assert!(!sel.descending);
    assert_eq!(
        (sel.limit, sel.offset, sel.slimit, sel.soffset, sel.tz),
        (None, None, None, None, None)
    );
}

#[test]
fn arithmetic_on_aggregates_with_alias() {
    let sel = select(r#"SELECT mean("usage_idle") * 9 / 5 + 32 AS "f" FROM "autogen"."cpu""#);
    let mean = call("mean", vec![r("usage_idle")]);
    let expr = bin(
        BinaryOp::Add,
        bin(BinaryOp::Div, bin(BinaryOp::Mul, mean, Expr::Integer(9)), Expr::Integer(5)),
        Expr::Integer(32),
    );
    assert_eq!(sel.fields, vec![Field { expr, alias: Some(s("f")) }]);
    assert_eq!(
        sel.from,
        vec![Source::Measurement {
            database: None,
            retention_policy: Some(s("autogen")),
            name: s("cpu")
        }]
    );
}

#[test]
fn unsubstituted_variable_is_an_error_at_its_position() {
    let (msg, line, char) =
        err_at(r#"SELECT mean("usage_idle") * 9 / 5 + 32 AS "f" FROM "autogen"."cpu" WHERE $x"#);
    assert_eq!(msg, "found $x, expected identifier, string, number, bool");
    assert_eq!((line, char), (1, 74));
}

#[test]
fn relative_time_order_and_limit() {
    let sel =
        select(r#"SELECT "value" FROM "cpu" WHERE time > now() - 1h ORDER BY time DESC LIMIT 10"#);
    assert_eq!(
        sel.condition,
        Some(bin(
            BinaryOp::Gt,
            r("time"),
            bin(BinaryOp::Sub, call("now", vec![]), Expr::Duration(3600 * SEC))
        ))
    );
    assert!(sel.descending);
    assert_eq!(sel.limit, Some(10));
    assert!(!select("SELECT v FROM m ORDER BY time ASC").descending);
    assert!(!select("SELECT v FROM m ORDER BY time").descending);
    assert!(select("SELECT v FROM m ORDER BY \"time\" desc").descending);
    assert!(select("SELECT v FROM m ORDER BY DESC").descending);
}

#[test]
fn order_by_anything_but_time_is_refused() {
    let (msg, line, char) = err_at("SELECT v FROM m ORDER BY host");
    assert_eq!((msg.as_str(), line, char), ("only ORDER BY time supported at this time", 1, 26));
    assert_eq!(err_at("SELECT v FROM m ORDER BY time, host").2, 30);
}

#[test]
fn nested_calls_regex_source_and_group_by_wildcard() {
    let sel = select(r#"SELECT percentile("v", 95), count(distinct("v")) FROM /cpu.*/ GROUP BY *"#);
    assert_eq!(sel.fields[0].expr, call("percentile", vec![r("v"), Expr::Integer(95)]));
    assert_eq!(sel.fields[1].expr, call("count", vec![call("distinct", vec![r("v")])]));
    assert_eq!(
        sel.from,
        vec![Source::Regex { database: None, retention_policy: None, pattern: s("cpu.*") }]
    );
    assert_eq!(sel.group_by, GroupBy { time: None, tags: vec![Dimension::Wildcard] });
}

#[test]
fn distinct_forms() {
    assert_eq!(field("SELECT DISTINCT x FROM m"), call("distinct", vec![r("x")]));
    assert_eq!(field("SELECT DISTINCT(\"x\") FROM m"), call("distinct", vec![r("x")]));
    assert_eq!(
        field("SELECT COUNT(DISTINCT x) FROM m"),
        call("count", vec![call("distinct", vec![r("x")])])
    );
}

#[test]
fn string_time_bound_and_tz() {
    let sel = select("SELECT * FROM cpu WHERE time > '2024-01-01T00:00:00Z' tz('Europe/Paris')");
    assert_eq!(sel.fields[0].expr, Expr::Wildcard { kind: None });
    assert_eq!(
        sel.condition,
        Some(bin(BinaryOp::Gt, r("time"), Expr::String(s("2024-01-01T00:00:00Z"))))
    );
    assert_eq!(sel.tz, Some(s("Europe/Paris")));
}

#[test]
fn time_offset_fill_and_series_limits() {
    let sel = select(
        r#"SELECT last("v") FROM m GROUP BY time(1h, -15m) fill(previous) SLIMIT 2 SOFFSET 1"#,
    );
    assert_eq!(
        sel.group_by.time,
        Some(TimeGroup { interval_ns: 3600 * SEC, offset_ns: -900 * SEC })
    );
    assert_eq!(sel.fill, Fill::Previous);
    assert_eq!((sel.slimit, sel.soffset), (Some(2), Some(1)));
    let sel = select("SELECT last(v) FROM m GROUP BY time(1h,15m)");
    assert_eq!(
        sel.group_by.time,
        Some(TimeGroup { interval_ns: 3600 * SEC, offset_ns: 900 * SEC })
    );
}

#[test]
fn every_clause_in_order() {
    let sel = select(
        "select max(v) from m where a = 1 group by host, time(1m), /^r/ fill(linear) \
         order by time desc limit 5 offset 6 slimit 7 soffset 8 tz('UTC')",
    );
    assert_eq!(sel.group_by.time.map(|t| t.interval_ns), Some(60 * SEC));
    assert_eq!(sel.group_by.tags, vec![Dimension::Tag(s("host")), Dimension::Regex(s("^r"))]);
    assert_eq!(sel.fill, Fill::Linear);
    assert!(sel.descending);
    assert_eq!(
        (sel.limit, sel.offset, sel.slimit, sel.soffset),
        (Some(5), Some(6), Some(7), Some(8))
    );
    assert_eq!(sel.tz, Some(s("UTC")));
}

#[test]
fn fill_options() {
    let fill = |f: &str| select(&format!("SELECT mean(v) FROM m GROUP BY time(1m) fill({f})")).fill;
    assert_eq!(fill("null"), Fill::Null);
    assert_eq!(fill("NONE"), Fill::None);
    assert_eq!(fill("previous"), Fill::Previous);
    assert_eq!(fill("linear"), Fill::Linear);
    assert_eq!(fill("0"), Fill::Number(0.0));
    assert_eq!(fill("-1"), Fill::Number(-1.0));
    assert_eq!(fill("2.5"), Fill::Number(2.5));
    assert_eq!(select("SELECT v FROM m fill(none)").fill, Fill::None);
    assert_eq!(
        err_at("SELECT v FROM m fill(sideways)").0,
        "found sideways, expected null, none, previous, linear, number"
    );
}

#[test]
fn sources() {
    let from = |q: &str| select(q).from;
    assert_eq!(
        from(r#"SELECT v FROM "db"."rp"."m""#),
        vec![Source::Measurement {
            database: Some(s("db")),
            retention_policy: Some(s("rp")),
            name: s("m")
        }]
    );
    assert_eq!(
        from(r#"SELECT v FROM "db".."m""#),
        vec![Source::Measurement { database: Some(s("db")), retention_policy: None, name: s("m") }]
    );
    assert_eq!(
        from(r#"SELECT v FROM db.rp./c\/d/, other"#),
        vec![
            Source::Regex {
                database: Some(s("db")),
                retention_policy: Some(s("rp")),
                pattern: s("c/d")
            },
            m("other"),
        ]
    );
    assert_eq!(
        err_at("SELECT v FROM (SELECT v FROM m)"),
        (s("subqueries are not supported"), 1, 15)
    );
    assert_eq!(err_at("SELECT v FROM a.b.c.d").0, "found ., expected ;");
}

#[test]
fn select_into_is_kept_as_written() {
    let sel = select(r#"SELECT mean(v) INTO "db"."rp".:MEASUREMENT FROM /.*/ GROUP BY *"#);
    assert_eq!(sel.into, Some(s(r#""db"."rp".:MEASUREMENT"#)));
}

#[test]
fn precedence() {
    use BinaryOp::*;
    let (a, b, c) = (r("a"), r("b"), r("c"));
    assert_eq!(
        field("SELECT a + b * c FROM m"),
        bin(Add, a.clone(), bin(Mul, b.clone(), c.clone()))
    );
    assert_eq!(
        field("SELECT a - b - c FROM m"),
        bin(Sub, bin(Sub, a.clone(), b.clone()), c.clone())
    );
    assert_eq!(
        field("SELECT a * (b + c) FROM m"),
        bin(Mul, a.clone(), paren(bin(Add, b.clone(), c.clone())))
    );
    assert_eq!(
        field("SELECT a | b & c FROM m"),
        bin(BitOr, a.clone(), bin(BitAnd, b.clone(), c.clone()))
    );
    assert_eq!(
        field("SELECT a ^ b % c FROM m"),
        bin(BitXor, a.clone(), bin(Mod, b.clone(), c.clone()))
    );
    let cond = select("SELECT v FROM m WHERE a = 1 OR b = 2 AND c <> 3").condition.unwrap();
    assert_eq!(
        cond,
        bin(
            Or,
            bin(Eq, a.clone(), Expr::Integer(1)),
            bin(And, bin(Eq, b.clone(), Expr::Integer(2)), bin(NotEq, c.clone(), Expr::Integer(3)))
        )
    );
    let cond = select("SELECT v FROM m WHERE a + 1 >= b * 2 and c !~ /x/").condition.unwrap();
    assert_eq!(
        cond,
        bin(
            And,
            bin(GtEq, bin(Add, a, Expr::Integer(1)), bin(Mul, b, Expr::Integer(2))),
            bin(NotEqRegex, c, Expr::Regex(s("x")))
        )
    );
    let ops =
        select("SELECT v FROM m WHERE a < 1 AND a <= 2 AND a > 3 AND a != 4").condition.unwrap();
    let Expr::Binary { lhs, .. } = ops else { panic!() };
    let Expr::Binary { lhs, rhs, .. } = *lhs else { panic!() };
    assert!(matches!(*rhs, Expr::Binary { op: Gt, .. }));
    assert!(matches!(*lhs, Expr::Binary { op: And, .. }));
}

#[test]
fn unary_minus() {
    use BinaryOp::*;
    assert_eq!(field("SELECT -5 FROM m"), Expr::Integer(-5));
    assert_eq!(field("SELECT - 5 FROM m"), Expr::Integer(-5));
    assert_eq!(field("SELECT -1.5 FROM m"), Expr::Number(-1.5));
    assert_eq!(field("SELECT -1h FROM m"), Expr::Duration(-3600 * SEC));
    assert_eq!(field("SELECT -9223372036854775808 FROM m"), Expr::Integer(i64::MIN));
    assert_eq!(field("SELECT -v FROM m"), bin(Mul, Expr::Integer(-1), r("v")));
    assert_eq!(field("SELECT -(v) FROM m"), bin(Mul, Expr::Integer(-1), paren(r("v"))));
    assert_eq!(field("SELECT 2 -1 FROM m"), bin(Sub, Expr::Integer(2), Expr::Integer(1)));
    assert_eq!(field("SELECT a*-2 FROM m"), bin(Mul, r("a"), Expr::Integer(-2)));
}

#[test]
fn literals_and_casts() {
    assert_eq!(field("SELECT true FROM m"), Expr::Bool(true));
    assert_eq!(field("SELECT FALSE FROM m"), Expr::Bool(false));
    assert_eq!(field("SELECT .5 FROM m"), Expr::Number(0.5));
    assert_eq!(field("SELECT 12.25 FROM m"), Expr::Number(12.25));
    assert_eq!(field("SELECT 9223372036854775807 FROM m"), Expr::Integer(i64::MAX));
    assert_eq!(
        field(r#"SELECT "v"::field FROM m"#),
        Expr::Ref { name: s("v"), kind: Some(RefKind::Field) }
    );
    assert_eq!(
        field("SELECT host::TAG FROM m"),
        Expr::Ref { name: s("host"), kind: Some(RefKind::Tag) }
    );
    for (k, kind) in [
        ("float", RefKind::Float),
        ("integer", RefKind::Integer),
        ("string", RefKind::String),
        ("boolean", RefKind::Boolean),
    ] {
        assert_eq!(
            field(&format!("SELECT v::{k} FROM m")),
            Expr::Ref { name: s("v"), kind: Some(kind) }
        );
    }
    assert_eq!(field("SELECT *::field FROM m"), Expr::Wildcard { kind: Some(RefKind::Field) });
    assert_eq!(field("SELECT *::tag FROM m"), Expr::Wildcard { kind: Some(RefKind::Tag) });
    assert_eq!(field("SELECT MEAN(*) FROM m"), call("mean", vec![Expr::Wildcard { kind: None }]));
    assert_eq!(
        err_at("SELECT v::blob FROM m").0,
        "found blob, expected float, integer, string, boolean, field, tag"
    );
}

#[test]
fn durations_of_every_unit() {
    let d = |lit: &str| match field(&format!("SELECT {lit} FROM m")) {
        Expr::Duration(ns) => ns,
        other => panic!("{lit}: {other:?}"),
    };
    assert_eq!(d("7ns"), 7);
    assert_eq!(d("7u"), 7_000);
    assert_eq!(d("7µ"), 7_000);
    assert_eq!(d("7ms"), 7_000_000);
    assert_eq!(d("7s"), 7 * SEC);
    assert_eq!(d("7m"), 420 * SEC);
    assert_eq!(d("7h"), 7 * 3600 * SEC);
    assert_eq!(d("7d"), 7 * 86400 * SEC);
    assert_eq!(d("7w"), 7 * 7 * 86400 * SEC);
    assert_eq!(d("1h30m"), 5400 * SEC);
    assert_eq!(d("9223372036854775807ns"), i64::MAX);
    assert_eq!(err_at("SELECT 3y FROM m"), (s("unable to parse duration 3y"), 1, 8));
    assert_eq!(err_at("SELECT 1ms2 FROM m").0, "unable to parse duration 1ms2");
}

#[test]
fn overflow_is_an_error_not_a_panic() {
    assert_eq!(
        err_at("SELECT 9223372036854775808 FROM m"),
        (s("unable to parse integer 9223372036854775808"), 1, 8)
    );
    assert_eq!(err_at("SELECT v FROM m WHERE time > 9223372036854775808ns").2, 30);
    assert_eq!(err("SELECT 99999999999999999999999999999999999999999999w FROM m").char, 8);
    assert_eq!(err("SELECT 15251w FROM m").message, "unable to parse duration 15251w");
    assert_eq!(err("SELECT v FROM m LIMIT 99999999999999999999").char, 23);
    assert!(parse(&format!("SELECT {}.5 FROM m", "9".repeat(400))).is_err());
    assert_eq!(field("SELECT -9223372036854775808ns FROM m"), Expr::Duration(i64::MIN));
}

#[test]
fn escapes_and_unicode() {
    assert_eq!(field(r#"SELECT "a \"q\" \\ b" FROM m"#), r(r#"a "q" \ b"#));
    assert_eq!(field(r"SELECT 'it\'s\n\\' FROM m"), Expr::String(s("it's\n\\")));
    assert_eq!(field(r#"SELECT "température °C" FROM "mesure_é""#), r("température °C"));
    let cond = select(r"SELECT v FROM m WHERE p =~ /a\/b\.c\d/").condition.unwrap();
    assert_eq!(cond, bin(BinaryOp::EqRegex, r("p"), Expr::Regex(s(r"a/b\.c\d"))));
    let cond = select(r"SELECT v FROM m WHERE p =~ /C:\\/").condition.unwrap();
    assert_eq!(cond, bin(BinaryOp::EqRegex, r("p"), Expr::Regex(s(r"C:\\"))));
    assert_eq!(err_at(r"SELECT 'a\q' FROM m"), (s(r"bad escape \q"), 1, 10));
}

#[test]
fn keywords_are_case_insensitive_and_names_keep_case() {
    let sel = select(r#"sElEcT Value FROM Cpu wHeRe Host = 'a' GROUP by "Host""#);
    assert_eq!(sel.fields[0].expr, r("Value"));
    assert_eq!(sel.from, vec![m("Cpu")]);
    assert_eq!(sel.group_by.tags, vec![Dimension::Tag(s("Host"))]);
    assert_eq!(field("SELECT MEAN(v) FROM m"), call("mean", vec![r("v")]));
    assert_eq!(field(r#"SELECT "select" FROM m"#), r("select"));
}

#[test]
fn multiple_statements_and_empty_ones() {
    let q = parse("SHOW DATABASES;; SELECT v FROM m ;").unwrap();
    assert_eq!(q.statements.len(), 2);
    assert_eq!(q.statements[0], Statement::ShowDatabases);
    assert!(matches!(q.statements[1], Statement::Select(_)));
    let (msg, line, char) = err_at("");
    assert_eq!(
        msg,
        "found EOF, expected SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL"
    );
    assert_eq!((line, char), (1, 1));
    assert_eq!(err_at(" ; ;\n").1, 2);
    assert_eq!(err_at("SHOW DATABASES SHOW DATABASES"), (s("found SHOW, expected ;"), 1, 16));
}

#[test]
fn comments() {
    let q = "-- the dashboard's query\nSELECT /* the mean */ mean(v) -- trailing\nFROM m /* multi\nline */";
    assert_eq!(select(q).from, vec![m("m")]);
    assert_eq!(field("SELECT a--b\n FROM m"), r("a"));
    assert_eq!(err_at("SELECT v FROM m /* open"), (s("unterminated comment"), 1, 17));
}

#[test]
fn error_positions() {
    assert_eq!(
        err_at("SELECT FROM m"),
        (s("found FROM, expected identifier, string, number, bool"), 1, 8)
    );
    assert_eq!(err_at("SELECT v"), (s("found EOF, expected FROM"), 1, 9));
    assert_eq!(
        err_at("SELECT v\nFROM m\nWHERE a = = 1"),
        (s("found =, expected identifier, string, number, bool"), 3, 11)
    );
    assert_eq!(err_at("SELECT v\n  FROM"), (s("found EOF, expected identifier"), 2, 7));
    assert_eq!(err_at("SELECT v\nFROM m WHERE x =~ 'a'"), (s("found a, expected regex"), 2, 19));
    assert_eq!(err_at("SELECT 'é' + # FROM m").2, 14);
    assert_eq!(err_at("SELECT 'abc\nFROM m"), (s("unterminated string"), 1, 8));
    assert_eq!(err_at("SELECT \"abc FROM m"), (s("unterminated quoted identifier"), 1, 8));
    assert_eq!(err_at("SELECT v FROM m WHERE a =~ /abc"), (s("unterminated regex"), 1, 28));
    assert_eq!(err_at("SELECT mean(v FROM m"), (s("found FROM, expected )"), 1, 15));
    assert_eq!(err_at("SELECT v FROM m LIMIT -1"), (s("found -, expected integer"), 1, 23));
    assert_eq!(err_at("SELECT v FROM m GROUP BY time(0s)").2, 31);
    assert_eq!(
        err_at("SELECT v FROM m GROUP BY time(1m), time(1h)"),
        (s("multiple time dimensions"), 1, 36)
    );
    assert_eq!(
        err_at("FOO"),
        (
            s(
                "found FOO, expected SELECT, DELETE, SHOW, CREATE, DROP, EXPLAIN, GRANT, REVOKE, ALTER, SET, KILL"
            ),
            1,
            1
        )
    );
    assert_eq!(err_at("SELECT v FROM m tz(Europe)"), (s("found Europe, expected string"), 1, 20));
}

#[test]
fn nesting_is_bounded() {
    let ok = format!("SELECT {}v{} FROM m", "(".repeat(90), ")".repeat(90));
    assert!(parse(&ok).is_ok());
    let deep = format!("SELECT {}v{} FROM m", "(".repeat(200), ")".repeat(200));
    assert_eq!(err(&deep).message, "expression nested too deeply");
    let calls = format!("SELECT {}v{} FROM m", "f(".repeat(200), ")".repeat(200));
    assert_eq!(err(&calls).message, "expression nested too deeply");
    let minus = format!("SELECT {}v FROM m", "- ".repeat(200));
    assert_eq!(err(&minus).message, "expression nested too deeply");
    let chain = format!("SELECT v FROM m WHERE {}", vec!["a = 1"; 2000].join(" OR "));
    assert_eq!(err(&chain).message, "expression nested too deeply");
    let chain = format!("SELECT v FROM m WHERE {}", vec!["a = 1"; 200].join(" OR "));
    assert!(parse(&chain).is_ok());
    // Unbalanced openers fail early, without building anything.
    assert!(parse(&"(".repeat(100_000)).is_err());
    assert!(parse(&format!("SELECT {}", "(".repeat(100_000))).is_err());
}

#[test]
fn grafana_show_queries() {
    assert_eq!(
        one(r#"SHOW TAG VALUES WITH KEY = "host""#),
        Statement::ShowTagValues {
            database: None,
            from: vec![],
            key: KeyMatch::Eq(s("host")),
            condition: None,
            limit: None,
            offset: None
        }
    );
    assert_eq!(
        one(r#"SHOW TAG VALUES FROM "cpu" WITH KEY = "host" WHERE "region" =~ /^us$/"#),
        Statement::ShowTagValues {
            database: None,
            from: vec![m("cpu")],
            key: KeyMatch::Eq(s("host")),
            condition: Some(bin(BinaryOp::EqRegex, r("region"), Expr::Regex(s("^us$")))),
            limit: None,
            offset: None
        }
    );
    assert_eq!(
        one("SHOW MEASUREMENTS WITH MEASUREMENT =~ /cpu/ LIMIT 100"),
        Statement::ShowMeasurements {
            database: None,
            with: Some(NameMatch::Regex(s("cpu"))),
            condition: None,
            limit: Some(100),
            offset: None
        }
    );
    assert_eq!(
        one(r#"SHOW RETENTION POLICIES on "telegraf""#),
        Statement::ShowRetentionPolicies { database: Some(s("telegraf")) }
    );
    assert_eq!(one("SHOW RETENTION POLICIES"), Statement::ShowRetentionPolicies { database: None });
    assert_eq!(
        one(r#"SHOW FIELD KEYS FROM "autogen"."cpu""#),
        Statement::ShowFieldKeys {
            database: None,
            from: vec![Source::Measurement {
                database: None,
                retention_policy: Some(s("autogen")),
                name: s("cpu")
            }],
            limit: None,
            offset: None
        }
    );
    assert_eq!(
        one(r#"SHOW TAG KEYS FROM "cpu""#),
        Statement::ShowTagKeys {
            database: None,
            from: vec![m("cpu")],
            condition: None,
            limit: None,
            offset: None
        }
    );
    assert_eq!(one("show databases"), Statement::ShowDatabases);
}

#[test]
fn show_statements_with_every_clause() {
    assert_eq!(
        one("SHOW MEASUREMENTS ON db WITH MEASUREMENT = cpu WHERE host = 'a' LIMIT 1 OFFSET 2"),
        Statement::ShowMeasurements {
            database: Some(s("db")),
            with: Some(NameMatch::Eq(s("cpu"))),
            condition: Some(bin(BinaryOp::Eq, r("host"), Expr::String(s("a")))),
            limit: Some(1),
            offset: Some(2)
        }
    );
    assert_eq!(
        one("SHOW TAG KEYS ON db FROM m WHERE a = 'b' LIMIT 3 OFFSET 4"),
        Statement::ShowTagKeys {
            database: Some(s("db")),
            from: vec![m("m")],
            condition: Some(bin(BinaryOp::Eq, r("a"), Expr::String(s("b")))),
            limit: Some(3),
            offset: Some(4)
        }
    );
    let key = |q: &str| match one(q) {
        Statement::ShowTagValues { key, .. } => key,
        other => panic!("{other:?}"),
    };
    assert_eq!(key("SHOW TAG VALUES WITH KEY != host"), KeyMatch::NotEq(s("host")));
    assert_eq!(key("SHOW TAG VALUES WITH KEY =~ /h.*/"), KeyMatch::Regex(s("h.*")));
    assert_eq!(key("SHOW TAG VALUES WITH KEY !~ /h/"), KeyMatch::NotRegex(s("h")));
    assert_eq!(
        key(r#"SHOW TAG VALUES WITH KEY IN ("a", "b")"#),
        KeyMatch::In(vec![s("a"), s("b")])
    );
    assert_eq!(
        one("SHOW TAG VALUES ON db FROM m WITH KEY = k WHERE x = 'y' LIMIT 5 OFFSET 6"),
        Statement::ShowTagValues {
            database: Some(s("db")),
            from: vec![m("m")],
            key: KeyMatch::Eq(s("k")),
            condition: Some(bin(BinaryOp::Eq, r("x"), Expr::String(s("y")))),
            limit: Some(5),
            offset: Some(6)
        }
    );
    assert_eq!(
        one("SHOW SERIES ON db FROM m, /n/ WHERE a = 'b' LIMIT 7 OFFSET 8"),
        Statement::ShowSeries {
            database: Some(s("db")),
            from: vec![
                m("m"),
                Source::Regex { database: None, retention_policy: None, pattern: s("n") }
            ],
            condition: Some(bin(BinaryOp::Eq, r("a"), Expr::String(s("b")))),
            limit: Some(7),
            offset: Some(8)
        }
    );
    assert_eq!(
        one("SHOW FIELD KEYS ON db LIMIT 1 OFFSET 1"),
        Statement::ShowFieldKeys {
            database: Some(s("db")),
            from: vec![],
            limit: Some(1),
            offset: Some(1)
        }
    );
    assert_eq!(err_at("SHOW TAG VALUES FROM m"), (s("found EOF, expected WITH"), 1, 23));
    assert_eq!(
        err_at("SHOW TAG VALUES WITH KEY > a"),
        (s("found >, expected =, !=, =~, !~, IN"), 1, 26)
    );
    assert_eq!(err_at("SHOW FOO").0, format!("found FOO, expected {}", super::show::EXPECT_SHOW));
}

#[test]
fn unsupported_show_and_explain() {
    let what = |q: &str| match one(q) {
        Statement::Unsupported { what } => what,
        other => panic!("{q:?}: {other:?}"),
    };
    assert_eq!(what("SHOW USERS"), "SHOW USERS");
    assert_eq!(what("SHOW GRANTS FOR bob"), "SHOW GRANTS");
    assert_eq!(what("SHOW CONTINUOUS QUERIES"), "SHOW CONTINUOUS QUERIES");
    assert_eq!(what("SHOW SHARDS"), "SHOW SHARDS");
    assert_eq!(what("SHOW SHARD GROUPS"), "SHOW SHARD GROUPS");
    assert_eq!(what("SHOW STATS FOR 'indexes'"), "SHOW STATS");
    assert_eq!(what("SHOW DIAGNOSTICS"), "SHOW DIAGNOSTICS");
    assert_eq!(what("SHOW SUBSCRIPTIONS"), "SHOW SUBSCRIPTIONS");
    assert_eq!(what("SHOW QUERIES"), "SHOW QUERIES");
    assert_eq!(what("SHOW SERIES CARDINALITY ON db FROM m"), "SHOW SERIES CARDINALITY");
    assert_eq!(what("SHOW SERIES EXACT CARDINALITY"), "SHOW SERIES EXACT CARDINALITY");
    assert_eq!(what("SHOW MEASUREMENT CARDINALITY"), "SHOW MEASUREMENT CARDINALITY");
    assert_eq!(
        what("SHOW MEASUREMENT EXACT CARDINALITY ON db"),
        "SHOW MEASUREMENT EXACT CARDINALITY"
    );
    assert_eq!(what("SHOW TAG KEY CARDINALITY"), "SHOW TAG KEY CARDINALITY");
    assert_eq!(what("SHOW FIELD KEY CARDINALITY"), "SHOW FIELD KEY CARDINALITY");
    assert_eq!(
        what("SHOW TAG VALUES CARDINALITY WITH KEY = \"host\""),
        "SHOW TAG VALUES CARDINALITY"
    );
    assert_eq!(
        what("SHOW TAG VALUES EXACT CARDINALITY WITH KEY =~ /'/"),
        "SHOW TAG VALUES EXACT CARDINALITY"
    );
    assert_eq!(what("EXPLAIN SELECT v FROM m"), "EXPLAIN");
    assert_eq!(what("EXPLAIN ANALYZE SELECT v FROM m"), "EXPLAIN");
}

#[test]
fn writes_are_recognised() {
    let what = |q: &str| match one(q) {
        Statement::Write { what } => what,
        other => panic!("{q:?}: {other:?}"),
    };
    assert_eq!(what("DROP DATABASE db"), "DROP DATABASE");
    assert_eq!(what("DROP MEASUREMENT cpu"), "DROP MEASUREMENT");
    assert_eq!(what("DROP SERIES FROM cpu WHERE host =~ /a'b/"), "DROP SERIES");
    assert_eq!(what("DROP SHARD 1"), "DROP SHARD");
    assert_eq!(what("DROP RETENTION POLICY rp ON db"), "DROP RETENTION POLICY");
    assert_eq!(what("DROP CONTINUOUS QUERY cq ON db"), "DROP CONTINUOUS QUERY");
    assert_eq!(what("DROP USER bob"), "DROP USER");
    assert_eq!(what("DROP SUBSCRIPTION s ON db.rp"), "DROP SUBSCRIPTION");
    assert_eq!(what("DELETE FROM /c'/ WHERE time < now()"), "DELETE");
    assert_eq!(
        what("ALTER RETENTION POLICY rp ON db DURATION 1d DEFAULT"),
        "ALTER RETENTION POLICY"
    );
    assert_eq!(
        what("CREATE RETENTION POLICY rp ON db DURATION 1d REPLICATION 1"),
        "CREATE RETENTION POLICY"
    );
    assert_eq!(
        what(
            "CREATE CONTINUOUS QUERY cq ON db BEGIN SELECT mean(v) INTO x FROM m GROUP BY time(1h) END"
        ),
        "CREATE CONTINUOUS QUERY"
    );
    assert_eq!(what("CREATE USER bob WITH PASSWORD 'x' WITH ALL PRIVILEGES"), "CREATE USER");
    assert_eq!(
        what("CREATE SUBSCRIPTION s ON db.rp DESTINATIONS ALL 'udp://h:1'"),
        "CREATE SUBSCRIPTION"
    );
    assert_eq!(what("GRANT ALL TO bob"), "GRANT");
    assert_eq!(what("REVOKE READ ON db FROM bob"), "REVOKE");
    assert_eq!(what("SET PASSWORD FOR bob = 'x'"), "SET PASSWORD");
    assert_eq!(what("KILL QUERY 36"), "KILL QUERY");
    let create = |name: &str, duration_ns| Statement::CreateDatabase { name: s(name), duration_ns };
    assert_eq!(one("CREATE DATABASE \"telegraf\""), create("telegraf", None));
    assert_eq!(
        one("create database t WITH DURATION 1d REPLICATION 1 NAME rp"),
        create("t", Some(86_400_000_000_000))
    );
    assert_eq!(one("CREATE DATABASE t WITH DURATION INF"), create("t", Some(0)));
    assert_eq!(one("CREATE DATABASE t WITH NAME rp"), create("t", None));
    assert!(parse("CREATE DATABASE t WITH DURATION soon").is_err());
    assert_eq!(
        err_at("DROP TABLE x"),
        (
            s(
                "found TABLE, expected DATABASE, MEASUREMENT, SERIES, SHARD, RETENTION, CONTINUOUS, USER, SUBSCRIPTION"
            ),
            1,
            6
        )
    );
    assert_eq!(err_at("DROP RETENTION x"), (s("found x, expected POLICY"), 1, 16));
    let q = parse("CREATE DATABASE a; SELECT v FROM m").unwrap();
    assert_eq!(q.statements.len(), 2);
}

#[test]
fn reserved_words_need_quotes() {
    assert_eq!(err_at("SELECT v FROM select"), (s("found SELECT, expected identifier"), 1, 15));
    assert_eq!(err_at("SELECT v AS from FROM m").0, "found FROM, expected identifier");
    assert_eq!(select(r#"SELECT v AS "from" FROM m"#).fields[0].alias, Some(s("from")));
}

#[test]
fn fuzz_seeds_parse() {
    for seed in [
        include_str!("../../../../fuzz/seeds/influxql/grafana_graph"),
        include_str!("../../../../fuzz/seeds/influxql/grafana_show"),
        include_str!("../../../../fuzz/seeds/influxql/select_clauses"),
        include_str!("../../../../fuzz/seeds/influxql/other_statements"),
    ] {
        parse(seed).unwrap_or_else(|e| panic!("{seed:?}: {e}"));
    }
}

/// The deepest inputs the bounds allow parse, compare and drop within 1 MiB of stack in a debug
/// build (debug frames are far larger than optimised ones), half of a tokio worker's 2 MiB.
#[test]
fn deepest_inputs_fit_a_small_stack() {
    let inputs = [
        format!("SELECT {}v{} FROM m", "(".repeat(100), ")".repeat(100)),
        format!("SELECT {}v{} FROM m", "a * (".repeat(99), ")".repeat(99)),
        format!("SELECT {}v{} FROM m", "f(".repeat(100), ")".repeat(100)),
        format!("SELECT {}v FROM m", "- ".repeat(100)),
        format!("SELECT v FROM m WHERE {}", vec!["a = 1"; 250].join(" OR ")),
        format!("SELECT {}v FROM m", "(- ".repeat(300)),
    ];
    let worker = std::thread::Builder::new().stack_size(1024 * 1024).spawn(move || {
        for q in &inputs {
            let first = parse(q);
            assert_eq!(first, parse(q));
            drop(first.clone());
        }
    });
    worker.unwrap().join().unwrap();
}
