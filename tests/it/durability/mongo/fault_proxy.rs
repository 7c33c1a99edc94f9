//! The fault proxy (`support::proxy`) between the official driver and the MongoDB
//! stand-in, or the real server named by `BUCKETD_TEST_MONGODB_URI`: a dropped update reply is
//! a network error for the client although the write was applied, once; an outage makes the
//! server vanish and come back at the same address with its data.

use std::future::IntoFuture;
use std::io;
use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::error::ErrorKind;
use mongodb::{Client, Collection, Database};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::support::mongo_standin::MongoBackend;
use crate::support::proxy::{self, FaultProxy};

const COLLECTION: &str = "proxied";
/// Bounds every wait: far more than any step needs, so running into it means a hang.
const WAIT: Duration = Duration::from_secs(30);
/// serverSelectionTimeoutMS for the outage test.
const SELECTION_TIMEOUT: Duration = Duration::from_secs(1);

async fn bounded<T>(what: &str, step: impl IntoFuture<Output = T>) -> T {
    tokio::time::timeout(WAIT, step)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {WAIT:?}"))
}

async fn ping(db: &Database) -> mongodb::error::Result<Document> {
    bounded("ping", db.run_command(doc! { "ping": 1 })).await
}

/// An upsert that counts how many times it was applied.
fn count_up(id: &str) -> Document {
    doc! {
        "update": COLLECTION,
        "updates": [{ "q": { "_id": id }, "u": { "$inc": { "n": 1 } }, "upsert": true }],
    }
}

async fn all_documents(coll: &Collection<Document>) -> Vec<Document> {
    bounded("find", async { coll.find(doc! {}).await?.try_collect().await }).await.expect("find")
}

#[tokio::test]
async fn dropped_update_reply_is_a_network_error_but_applied_once() {
    let backend = MongoBackend::start();
    let proxy = FaultProxy::in_front_of(&backend.uri);
    let proxied = Client::with_uri_str(proxy.uri()).await.expect("client through the proxy");
    let direct = Client::with_uri_str(&backend.uri).await.expect("direct client");
    let db = proxied.database(&backend.database);
    let coll = direct.database(&backend.database).collection::<Document>(COLLECTION);
    // Connect first: what the driver sends on a new connection must not use up the fault.
    ping(&db).await.expect("ping through the proxy");

    proxy.drop_reply_after_apply(1);
    let err = bounded("update with its reply dropped", db.run_command(count_up("k")))
        .await
        .expect_err("the update's reply was dropped");
    assert!(matches!(*err.kind, ErrorKind::Io(_)), "expected a network error, got {err:?}");
    assert_eq!(proxy.dropped_replies(), 1);
    assert_eq!(all_documents(&coll).await, vec![doc! { "_id": "k", "n": 1 }], "applied once");

    let reply = bounded("next update", db.run_command(count_up("k")))
        .await
        .expect("the next update goes through");
    assert_eq!(reply.get("nModified").and_then(Bson::as_i32), Some(1), "{reply:?}");
    assert_eq!(proxy.dropped_replies(), 1);
    assert_eq!(all_documents(&coll).await, vec![doc! { "_id": "k", "n": 2 }]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_refuses_connections_then_the_server_comes_back_at_the_same_address() {
    let backend = MongoBackend::start();
    let proxy = FaultProxy::in_front_of(&backend.uri);
    let selection_ms = SELECTION_TIMEOUT.as_millis().to_string();
    let uri = proxy.uri_with(&[
        ("serverSelectionTimeoutMS", &selection_ms),
        ("connectTimeoutMS", &selection_ms),
        // The driver's minimum: it notices the server is back soon after.
        ("heartbeatFrequencyMS", "500"),
    ]);
    let client = Client::with_uri_str(&uri).await.expect("client through the proxy");
    let db = client.database(&backend.database);
    let coll = db.collection::<Document>(COLLECTION);
    bounded("insert", coll.insert_one(doc! { "_id": "kept", "v": 1 }))
        .await
        .expect("insert before the outage");
    let mut relayed = TcpStream::connect(proxy.addr()).await.expect("connect to the proxy");
    ping(&db).await.expect("ping before the outage");

    proxy.set_down(true);
    let mut byte = [0u8; 1];
    match bounded("relayed connection closing", relayed.read(&mut byte)).await {
        Ok(0) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        other => panic!("the outage left a relayed connection open: {other:?}"),
    }
    let refused = TcpStream::connect(proxy.addr()).await;
    assert_eq!(
        refused.as_ref().map_err(io::Error::kind).err(),
        Some(io::ErrorKind::ConnectionRefused),
        "connecting during the outage: {refused:?}"
    );
    // The first ping may meet a pooled connection that the outage closed; then the driver
    // finds no server. Both fail, the second by the selection timeout (plus slack for a
    // loaded machine).
    let err = ping(&db).await.expect_err("ping during the outage");
    assert!(
        matches!(
            *err.kind,
            ErrorKind::Io(_)
                | ErrorKind::ConnectionPoolCleared { .. }
                | ErrorKind::ServerSelection { .. }
        ),
        "first ping during the outage: {err:?}"
    );
    let started = Instant::now();
    let err = ping(&db).await.expect_err("second ping during the outage");
    let took = started.elapsed();
    assert!(matches!(*err.kind, ErrorKind::ServerSelection { .. }), "second ping: {err:?}");
    assert!(took < SELECTION_TIMEOUT * 5, "server selection gave up only after {took:?}");

    proxy.set_down(false);
    TcpStream::connect(proxy.addr()).await.expect("the proxy listens again at the same address");
    let deadline = Instant::now() + WAIT;
    while let Err(e) = ping(&db).await {
        assert!(
            Instant::now() < deadline,
            "no ping succeeded within {WAIT:?} after the outage: {e:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(all_documents(&coll).await, vec![doc! { "_id": "kept", "v": 1 }], "data kept");
}

/// The parser finds the command in a body that follows a document sequence and precedes a
/// checksum, and gives up on anything else without panicking.
#[test]
fn command_name_reads_the_body_section_only() {
    let body = bson::to_vec(&doc! { "update": COLLECTION, "$db": "d" }).unwrap();
    let statement = bson::to_vec(&doc! { "q": {}, "u": { "$set": { "x": 1 } } }).unwrap();
    let identifier = b"updates\0";
    let mut sections = vec![1u8];
    sections.extend_from_slice(&((4 + identifier.len() + statement.len()) as i32).to_le_bytes());
    sections.extend_from_slice(identifier);
    sections.extend_from_slice(&statement);
    sections.push(0);
    sections.extend_from_slice(&body);
    let message = |op_code: i32, flags: u32, sections: &[u8], checksum: bool| {
        let len = 16 + 4 + sections.len() + if checksum { 4 } else { 0 };
        let mut msg = Vec::new();
        for field in [len as i32, 7, 0, op_code] {
            msg.extend_from_slice(&field.to_le_bytes());
        }
        msg.extend_from_slice(&flags.to_le_bytes());
        msg.extend_from_slice(sections);
        if checksum {
            msg.extend_from_slice(&[0xAB; 4]);
        }
        msg
    };

    assert_eq!(proxy::command_name(&message(2013, 0, &sections, false)), Some("update"));
    assert_eq!(proxy::command_name(&message(2013, 1, &sections, true)), Some("update"));
    // OP_COMPRESSED and the legacy OP_QUERY are relayed without a look inside.
    assert_eq!(proxy::command_name(&message(2012, 0, &sections, false)), None);
    assert_eq!(proxy::command_name(&message(2004, 0, &sections, false)), None);
    let whole = message(2013, 0, &sections, false);
    for cut in 0..whole.len() {
        assert_eq!(proxy::command_name(&whole[..cut]), None, "cut at {cut}");
    }
}
