//! Databases from the outside: the same series written to two databases over every write
//! endpoint stays two series on every read endpoint, unflushed and stored alike; a database
//! that does not exist is answered as InfluxDB 1.x answers it; `CREATE DATABASE` makes one
//! that outlives a restart.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::binary::Bucketd;
use crate::support::server::{TestServer, memory_store};

async fn influxql(server: &TestServer, db: Option<&str>, q: &str) -> Value {
    let mut params = vec![("q", q), ("epoch", "ms")];
    params.extend(db.map(|db| ("db", db)));
    let url = reqwest::Url::parse_with_params(&server.url("/query"), params).unwrap();
    let response = server.client.post(url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    body["results"][0].clone()
}

async fn get_json(server: &TestServer, path: &str) -> (StatusCode, Value) {
    let response = server.get(path).await;
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The values of `v` a database answers for `cpu,host=a`, over InfluxQL and the REST range API,
/// and its sensor list.
async fn seen(server: &TestServer, db: &str) -> (Value, Value, Value) {
    let select = influxql(server, Some(db), "SELECT v FROM cpu WHERE host = 'a'").await;
    let number = |v: &Value| Value::from(v.as_f64().expect("a number"));
    let values: Vec<Value> = select["series"][0]["values"]
        .as_array()
        .map(|rows| rows.iter().map(|r| number(&r[1])).collect())
        .unwrap_or_default();
    let (status, readings) = get_json(
        server,
        &format!("/api/v1/readings?db={db}&sensor=cpu,host%3Da&from=0&to=10000000"),
    )
    .await;
    let rest: Vec<Value> = if status == StatusCode::NOT_FOUND {
        Vec::new()
    } else {
        assert_eq!(status, StatusCode::OK, "{readings}");
        readings["readings"].as_array().unwrap().iter().map(|r| number(&r["fields"]["v"])).collect()
    };
    let (status, sensors) = get_json(server, &format!("/api/v1/sensors?db={db}")).await;
    assert_eq!(status, StatusCode::OK);
    let keys: Vec<Value> =
        sensors["sensors"].as_array().unwrap().iter().map(|s| s["key"].clone()).collect();
    (Value::from(values), Value::from(rest), Value::from(keys))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_series_in_two_databases_stays_two_series() {
    let store = memory_store();
    let data = tempfile::tempdir().unwrap();
    let args = ["--flush-interval", "1h", "--data-dir", data.path().to_str().unwrap()];
    let mut server = TestServer::start(store.clone(), &args).await;
    for db in ["telegraf", "sensors"] {
        let created = influxql(&server, None, &format!("CREATE DATABASE {db}")).await;
        assert!(created.get("error").is_none(), "{created}");
    }
    let writes = [
        ("/write?db=telegraf&precision=ms", "text/plain", "cpu,host=a v=1 1000".to_owned()),
        (
            "/api/v2/write?org=o&bucket=sensors&precision=ms",
            "text/plain",
            "cpu,host=a v=2 2000".into(),
        ),
        (
            "/api/v1/readings?db=sensors",
            "application/json",
            json!({"sensor": "cpu,host=a", "ts": 3000, "fields": {"v": 3}}).to_string(),
        ),
        ("/write?precision=ms", "text/plain", "cpu,host=a v=4 4000".into()),
        ("/write?db=bucketd&precision=ms", "text/plain", "cpu,host=a v=5 5000".into()),
    ];
    for (path, kind, body) in writes {
        let response = server.post(path, kind, body).await;
        assert!(response.status().is_success(), "{path}: {}", response.status());
    }
    let expected = [
        ("telegraf", json!([1.0]), json!(["cpu,host=a"])),
        ("sensors", json!([2.0, 3.0]), json!(["cpu,host=a"])),
        ("bucketd", json!([4.0, 5.0]), json!(["cpu,host=a"])),
    ];
    // Unflushed first; then from the store, by a server that starts on it with empty buffers.
    for phase in ["unflushed", "stored"] {
        if phase == "stored" {
            server.shutdown().await;
            server = TestServer::start(store.clone(), &args).await;
            assert_eq!(server.buffers.buffered(), 0);
        }
        for (db, values, keys) in &expected {
            let (answered, rest, sensors) = seen(&server, db).await;
            assert_eq!(&answered, values, "{phase} {db}: InfluxQL");
            assert_eq!(&rest, values, "{phase} {db}: REST");
            assert_eq!(&sensors, keys, "{phase} {db}: sensors");
            let shown = influxql(&server, Some(db), "SHOW SERIES").await;
            assert_eq!(shown["series"][0]["values"], json!([["cpu,host=a"]]), "{phase} {db}");
        }
    }
    // A statement may name its database, as InfluxDB allows.
    let named = influxql(&server, None, r#"SELECT v FROM "telegraf"."autogen"."cpu""#).await;
    assert_eq!(named["series"][0]["values"], json!([[1000, 1]]));
    let on = influxql(&server, None, "SHOW MEASUREMENTS ON sensors").await;
    assert_eq!(on["series"][0]["values"], json!([["cpu"]]));
    let names = influxql(&server, None, "SHOW DATABASES").await;
    assert_eq!(names["series"][0]["values"], json!([["bucketd"], ["sensors"], ["telegraf"]]));
    server.shutdown().await;
}

#[tokio::test]
async fn a_database_that_does_not_exist_is_answered_as_influxdb_1x_does() {
    let server = TestServer::start(memory_store(), &[]).await;
    let v1 = server.post("/write?db=nope", "text/plain", "m v=1").await;
    assert_eq!(v1.status(), StatusCode::NOT_FOUND);
    assert_eq!(v1.json::<Value>().await.unwrap(), json!({"error": "database not found: \"nope\""}));
    let v2 = server.post("/api/v2/write?org=o&bucket=nope", "text/plain", "m v=1").await;
    assert_eq!(v2.status(), StatusCode::NOT_FOUND);
    assert_eq!(v2.json::<Value>().await.unwrap()["code"], "not found");
    let body = json!({"sensor": "m", "value": 1}).to_string();
    let js = server.post("/api/v1/readings?db=nope", "application/json", body).await;
    assert_eq!(js.status(), StatusCode::NOT_FOUND);
    for path in [
        "/api/v1/readings?db=nope&sensor=m",
        "/api/v1/rollups?db=nope&sensor=m&step=1h",
        "/api/v1/sensors?db=nope",
    ] {
        let (status, body) = get_json(&server, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(body["error"], "database not found: \"nope\"", "{path}");
    }
    // InfluxDB 1.6: a select fails, SHOW statements find nothing.
    let select = influxql(&server, Some("nope"), "SELECT * FROM m").await;
    assert_eq!(select["error"], "database not found: nope");
    let show = influxql(&server, Some("nope"), "SHOW MEASUREMENTS").await;
    assert_eq!(show, json!({"statement_id": 0}));
    let bad = influxql(&server, None, "CREATE DATABASE \"a/b\"").await;
    assert!(bad["error"].as_str().unwrap().contains("invalid database name"), "{bad}");
    let (_, sensors) = get_json(&server, "/api/v1/sensors").await;
    assert_eq!(sensors["sensors"], json!([]), "nothing was written anywhere");
    server.shutdown().await;
}

/// The registry is on disk: a created database, and what was written to it, are there after
/// a restart of the real binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_databases_and_their_data_outlive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let mut server = Bucketd::spawn_args(dir.path(), "100ms", &[]);
    server.wait_ready(&client).await;
    let post = |path: String, body: &'static str| {
        let client = client.clone();
        async move { client.post(path).body(body).send().await.unwrap().status() }
    };
    let create = format!("{}/query?q=CREATE%20DATABASE%20telegraf", server.base);
    assert_eq!(post(create, "").await, StatusCode::OK);
    let write = format!("{}/write?db=telegraf&precision=ms", server.base);
    assert_eq!(post(write, "cpu,host=a v=7 1000").await, StatusCode::NO_CONTENT);
    assert!(server.terminate().success());

    let mut again = Bucketd::spawn_args(dir.path(), "100ms", &[]);
    again.wait_ready(&client).await;
    let url = format!("{}/query?db=telegraf&epoch=ms&q=SELECT%20v%20FROM%20cpu", again.base);
    let body: Value = client.get(url).send().await.unwrap().json().await.unwrap();
    assert_eq!(body["results"][0]["series"][0]["values"], json!([[1000, 7]]));
    let url = format!("{}/query?q=SELECT%20v%20FROM%20cpu", again.base);
    let body: Value = client.get(url).send().await.unwrap().json().await.unwrap();
    assert!(body["results"][0].get("series").is_none(), "the default database: {body}");
    assert!(again.terminate().success());
}

/// A database may keep readings less long than the server (`CREATE DATABASE … WITH
/// DURATION`), never longer; the retention pass then deletes its old hours and no other
/// database's, and its queries answer what is kept, with InfluxDB's warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_with_a_shorter_retention_loses_its_old_readings_only() {
    let server = TestServer::start(
        memory_store(),
        &["--retention", "24h", "--retention-interval", "100ms", "--flush-interval", "100ms"],
    )
    .await;
    let longer = influxql(&server, None, "CREATE DATABASE long WITH DURATION 48h").await;
    assert!(longer["error"].as_str().unwrap().contains("at most as long"), "{longer}");
    let forever = influxql(&server, None, "CREATE DATABASE always WITH DURATION INF").await;
    assert!(forever["error"].as_str().unwrap().contains("forever"), "{forever}");
    let created = influxql(&server, None, "CREATE DATABASE short WITH DURATION 1h").await;
    assert!(created.get("error").is_none(), "{created}");
    let conflict = influxql(&server, None, "CREATE DATABASE short WITH DURATION 2h").await;
    assert!(conflict["error"].as_str().unwrap().contains("conflicts"), "{conflict}");
    // As InfluxDB 1.6 shows them: the duration, and the shard group it would pick.
    for (db, shown) in [("short", "1h0m0s"), ("bucketd", "24h0m0s")] {
        let rps = influxql(&server, Some(db), "SHOW RETENTION POLICIES").await;
        let row = &rps["series"][0]["values"][0];
        assert_eq!((&row[1], &row[2]), (&json!(shown), &json!("1h0m0s")), "{db}: {rps}");
    }
    let missing = influxql(&server, None, "SHOW RETENTION POLICIES ON nope").await;
    assert_eq!(missing["error"], "database not found: nope");

    let old = chrono::Utc::now().timestamp_millis() - 3 * 3_600_000;
    let body: String = (0..10).map(|i| format!("m,s=a v={i} {}\n", old + i * 1000)).collect();
    for path in ["/write?db=short&precision=ms", "/write?precision=ms"] {
        let response = server.post(path, "text/plain", body.clone()).await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT, "{path}");
    }
    let select = "SELECT v FROM m WHERE time > now() - 4h";
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let answer = loop {
        let answer = influxql(&server, Some("short"), select).await;
        if answer.get("series").is_none() {
            break answer;
        }
        assert!(tokio::time::Instant::now() < deadline, "short's old readings stay: {answer}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let warning = answer["messages"][0]["text"].as_str().unwrap_or_default();
    assert!(warning.contains("deleted by the retention of 1h"), "{answer}");
    let kept = influxql(&server, None, select).await;
    assert_eq!(kept["series"][0]["values"].as_array().unwrap().len(), 10, "{kept}");
    // The hour statistics stay, for whole-hour windows.
    let hour = old - old.rem_euclid(3_600_000);
    let hourly = format!(
        "SELECT count(v) FROM m WHERE time >= {hour}ms AND time < {}ms GROUP BY time(1h)",
        hour + 3_600_000
    );
    let counted = influxql(&server, Some("short"), &hourly).await;
    let total: i64 = counted["series"][0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[1].as_i64().unwrap())
        .sum();
    assert_eq!(total, 10, "{counted}");
    server.shutdown().await;
}

/// On a server that keeps readings forever, a database may still keep them less long where
/// the store can delete one database's readings alone (the embedded and memory stores); the
/// default database keeps them forever.
#[tokio::test]
async fn a_server_that_keeps_everything_lets_a_database_keep_less() {
    let server = TestServer::start(memory_store(), &[]).await;
    let created = influxql(&server, None, "CREATE DATABASE week WITH DURATION 168h").await;
    assert!(created.get("error").is_none(), "{created}");
    for (db, shown, group) in [("week", "168h0m0s", "24h0m0s"), ("bucketd", "0s", "168h0m0s")] {
        let rps = influxql(&server, Some(db), "SHOW RETENTION POLICIES").await;
        let row = &rps["series"][0]["values"][0];
        assert_eq!((&row[1], &row[2]), (&json!(shown), &json!(group)), "{db}: {rps}");
    }
    server.shutdown().await;
}
