//! TLS on both listeners, through real clients: curl, Python's `influxdb-client` (in a venv the
//! test builds, tests/tls_clients/requirements.txt) and `openssl s_client` on the raw TCP
//! listener; handshakes that must fail (an untrusted certificate, plain text on a TLS port, a
//! client that never finishes, a client without a certificate under mutual TLS) each refused
//! while other connections go on; and certificates replaced under a running server.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::ca::Ca;
use crate::support::in_own_process;
use crate::support::server::{TestServer, memory_store, metric_sum};

/// How long a test waits for a state before it fails.
const PATIENCE: Duration = Duration::from_secs(60);

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// curl's exit code, body and HTTP status (0 when there was no answer).
struct Curled {
    code: i32,
    body: String,
    status: u16,
}

async fn curl(args: &[&str]) -> Curled {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("curl runs (Debian package curl)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    Curled {
        code: out.status.code().unwrap_or(-1),
        body: body.to_owned(),
        status: status.trim().parse().unwrap_or(0),
    }
}

/// `https://localhost:<port><path>`: the name the server certificates are issued for.
fn https(server: &TestServer, path: &str) -> String {
    format!("https://localhost:{}{}", server.http.port(), path)
}

fn now_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as i64
}

/// Sensor to its last `v`, read through `/query` with curl and `auth` (curl's TLS and token
/// arguments).
async fn last_values(server: &TestServer, auth: &[&str]) -> Vec<(String, f64)> {
    let url =
        https(server, "/query?db=bucketd&q=SELECT%20last(v)%20FROM%20tls%20GROUP%20BY%20sensor");
    let mut args = auth.to_vec();
    args.push(&url);
    let got = curl(&args).await;
    assert_eq!((got.code, got.status), (0, 200), "{}", got.body);
    let v: Value = serde_json::from_str(&got.body).unwrap();
    let mut out = Vec::new();
    for series in v["results"][0]["series"].as_array().into_iter().flatten() {
        let sensor = series["tags"]["sensor"].as_str().unwrap().to_owned();
        out.push((sensor, series["values"][0][1].as_f64().unwrap()));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Waits until `/query` shows every sensor of `want`.
async fn wait_for_sensors(server: &TestServer, auth: &[&str], want: &[(&str, f64)]) {
    let want: Vec<(String, f64)> = want.iter().map(|(s, v)| (s.to_string(), *v)).collect();
    let start = Instant::now();
    loop {
        let got = last_values(server, auth).await;
        if want.iter().all(|w| got.contains(w)) {
            return;
        }
        assert!(start.elapsed() < PATIENCE, "sensors {want:?} never showed; last {got:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metric(server: &TestServer, auth: &[&str], name: &str, labels: &str) -> f64 {
    let url = https(server, "/metrics");
    let mut args = auth.to_vec();
    args.push(&url);
    let got = curl(&args).await;
    assert_eq!(got.status, 200, "{}", got.body);
    let wanted: String = got
        .body
        .lines()
        .filter(|l| l.starts_with(name) && labels.split(',').all(|kv| l.contains(kv)))
        .map(|l| format!("{l}\n"))
        .collect();
    metric_sum(&wanted, name)
}

/// Sends `lines` to the TCP listener with `openssl s_client`, bounded; its exit status.
async fn s_client(addr: std::net::SocketAddr, extra: &[&str], lines: &str) -> bool {
    let mut child = tokio::process::Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string(), "-servername", "localhost"])
        .args(["-verify_return_error", "-quiet", "-no_ign_eof"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("openssl runs");
    let mut stdin = child.stdin.take().unwrap();
    // A refused handshake may close the pipe before everything is written.
    let _ = stdin.write_all(lines.as_bytes()).await;
    drop(stdin);
    tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("openssl s_client ended")
        .unwrap()
        .success()
}

/// Writes and checks one reading with Python's influxdb-client over HTTPS.
fn influxdb_client(url: &str, ca: &Path, token: &str, client_cert: Option<(&Path, &Path)>) {
    let python = crate::support::venv::python(
        "tls-clients",
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls_clients/requirements.txt"),
        "the TLS tests need Python 3 with venv and pip for InfluxDB's Python client: install \
         python3 and python3-venv",
    );
    let script = r#"
import sys
from influxdb_client import InfluxDBClient
from influxdb_client.client.write_api import SYNCHRONOUS
url, ca, token, ns = sys.argv[1:5]
certs = {"cert_file": sys.argv[5], "cert_key_file": sys.argv[6]} if len(sys.argv) > 6 else {}
with InfluxDBClient(url=url, token=token, org="o", ssl_ca_cert=ca, timeout=20000, **certs) as c:
    c.write_api(write_options=SYNCHRONOUS).write(bucket="bucketd", record="tls,sensor=python v=2 " + ns)
"#;
    let mut cmd = std::process::Command::new(python);
    cmd.args(["-c", script, url, s(ca), token, &now_ns().to_string()]);
    if let Some((cert, key)) = client_cert {
        cmd.args([s(cert), s(key)]);
    }
    let out = cmd.output().expect("python runs");
    assert!(
        out.status.success(),
        "influxdb-client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn start(ca: &Ca, extra: &[&str]) -> TestServer {
    let (cert, key) = ca.issue(&["localhost", "127.0.0.1"], "server");
    let mut args = vec!["--tls-cert", s(&cert), "--tls-key", s(&key)];
    args.extend_from_slice(extra);
    TestServer::start_with_tcp(memory_store(), &args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_write_and_read_over_tls() {
    // The handshake counts are the process's: exact only where no other test handshakes.
    if !in_own_process(module_path!(), "real_clients_write_and_read_over_tls") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let server = start(&ca, &[]).await;
    let trust = ["--cacert", s(&ca.cert)];

    let line = format!("tls,sensor=curl v=1 {}", now_ns());
    let url = https(&server, "/write?db=bucketd");
    let mut args = trust.to_vec();
    args.extend(["--data-binary", &line, &url]);
    let wrote = curl(&args).await;
    assert_eq!((wrote.code, wrote.status), (0, 204), "{}", wrote.body);

    let base = https(&server, "");
    let ca_path = ca.cert.clone();
    tokio::task::spawn_blocking(move || influxdb_client(&base, &ca_path, "unused", None))
        .await
        .unwrap();

    let lines = format!("tls,sensor=openssl v=3 {}\n", now_ns());
    let tcp = server.tcp.unwrap();
    assert!(s_client(tcp, &["-CAfile", s(&ca.cert)], &lines).await);

    wait_for_sensors(&server, &trust, &[("curl", 1.0), ("python", 2.0), ("openssl", 3.0)]).await;
    assert_eq!(
        metric(&server, &trust, "bucketd_tls_handshakes_total", "result=\"failed\"").await,
        0.0
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_handshakes_leave_other_connections_alone() {
    // The handshake counts are the process's: exact only where no other test handshakes.
    if !in_own_process(module_path!(), "refused_handshakes_leave_other_connections_alone") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ca, other) = (Ca::new(dir.path(), "ca"), Ca::new(dir.path(), "other"));
    let server = start(&ca, &["--tls-handshake-timeout", "1s"]).await;
    let trust = ["--cacert", s(&ca.cert)];
    let mut open = Connection::open(&server, &ca).await;
    assert_eq!(open.get("/health").await, 200);

    // A client that does not trust the server's certificate gives up; curl says why.
    let refused = curl(&["--cacert", s(&other.cert), &https(&server, "/health")]).await;
    assert_eq!(refused.code, 60, "curl: certificate problem expected, got {}", refused.body);

    // Plain text on the TLS port: no HTTP answer, and the connection is closed.
    let mut plain = TcpStream::connect(server.http).await.unwrap();
    plain.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(PATIENCE, plain.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "a plain-text client is closed");
    assert!(!answer.starts_with(b"HTTP/"), "{:?}", String::from_utf8_lossy(&answer));

    // A client that connects and never says hello, on both listeners: closed after the
    // handshake timeout, while the open connection and new ones are served.
    for addr in [server.http, server.tcp.unwrap()] {
        let mut silent = TcpStream::connect(addr).await.unwrap();
        assert_eq!(open.get("/health").await, 200);
        let ok = curl(&[trust[0], trust[1], &https(&server, "/health")]).await;
        assert_eq!(ok.status, 200);
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(PATIENCE, silent.read(&mut byte)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
    }
    assert_eq!(open.get("/health").await, 200);

    let count =
        |labels: &'static str| metric(&server, &trust, "bucketd_tls_handshakes_total", labels);
    assert_eq!(count("result=\"timeout\"").await, 2.0);
    assert!(count("result=\"failed\"").await >= 2.0, "the untrusted and the plain-text clients");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_authenticates_the_tcp_listener() {
    // The handshake counts are the process's: exact only where no other test handshakes.
    if !in_own_process(module_path!(), "mutual_tls_authenticates_the_tcp_listener") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ca, other) = (Ca::new(dir.path(), "ca"), Ca::new(dir.path(), "other"));
    let (client, client_key) = ca.issue(&["sensor-gateway"], "client");
    let (stranger, stranger_key) = other.issue(&["stranger"], "stranger");
    // With client certificates and a token, the TCP listener needs no consent to run.
    let server = start(&ca, &["--tls-client-ca", s(&ca.cert), "--auth-token", "t0ken"]).await;
    let tcp = server.tcp.unwrap();
    let cafile = ["-CAfile", s(&ca.cert)];

    // No certificate, or one the CA did not issue: refused before a line is read.
    let no_cert = format!("tls,sensor=anonymous v=9 {}\n", now_ns());
    s_client(tcp, &cafile, &no_cert).await;
    let mut strange = cafile.to_vec();
    strange.extend(["-cert", s(&stranger), "-key", s(&stranger_key)]);
    s_client(tcp, &strange, &format!("tls,sensor=stranger v=8 {}\n", now_ns())).await;

    let mut known = cafile.to_vec();
    known.extend(["-cert", s(&client), "-key", s(&client_key)]);
    let lines = format!("tls,sensor=gateway v=4 {}\n", now_ns());
    assert!(s_client(tcp, &known, &lines).await);

    // HTTP asks for the certificate too, and the token beside it.
    let auth = [
        "--cacert",
        s(&ca.cert),
        "--cert",
        s(&client),
        "--key",
        s(&client_key),
        "-H",
        "Authorization: Token t0ken",
    ];
    let base = https(&server, "");
    let (ca_path, c, k) = (ca.cert.clone(), client.clone(), client_key.clone());
    tokio::task::spawn_blocking(move || influxdb_client(&base, &ca_path, "t0ken", Some((&c, &k))))
        .await
        .unwrap();
    wait_for_sensors(&server, &auth, &[("gateway", 4.0), ("python", 2.0)]).await;
    let sensors: Vec<String> =
        last_values(&server, &auth).await.into_iter().map(|(s, _)| s).collect();
    assert_eq!(sensors, ["gateway", "python"], "nothing from the clients without a certificate");

    let bare = curl(&["--cacert", s(&ca.cert), &https(&server, "/health")]).await;
    assert_ne!(bare.code, 0, "HTTPS without a client certificate is refused: {}", bare.body);
    assert_eq!(bare.status, 0);
    let failed = metric(
        &server,
        &auth,
        "bucketd_tls_handshakes_total",
        "listener=\"tcp\",result=\"failed\"",
    );
    assert_eq!(failed.await, 2.0);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_reload_without_dropping_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (Ca::new(dir.path(), "old"), Ca::new(dir.path(), "new"));
    let server = start(&old, &["--tls-reload-interval", "50ms"]).await;
    let mut open = Connection::open(&server, &old).await;
    assert_eq!(open.get("/health").await, 200);
    let trusts_new = ["--cacert", s(&new.cert)];
    let health = https(&server, "/health");
    assert_eq!(curl(&[trusts_new[0], trusts_new[1], &health]).await.code, 60);

    // Renewed in place, the key first (a moment of a key that is not the certificate's, as
    // a renewal that copies two files makes): new handshakes get the new certificate.
    let (cert, key) = new.issue(&["localhost"], "renewed");
    std::fs::copy(&key, dir.path().join("server-key.pem")).unwrap();
    std::fs::copy(&cert, dir.path().join("server.pem")).unwrap();
    let start = Instant::now();
    while curl(&[trusts_new[0], trusts_new[1], &health]).await.status != 200 {
        assert!(start.elapsed() < PATIENCE, "the renewed certificate was never served");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The connection from before goes on, with the certificate it began with.
    assert_eq!(open.get("/health").await, 200);

    // A file that does not load leaves the renewed configuration in use.
    let failed = || metric(&server, &trusts_new, "bucketd_tls_reloads_total", "result=\"failed\"");
    let before = failed().await;
    std::fs::write(dir.path().join("server.pem"), "half written").unwrap();
    let start = Instant::now();
    while failed().await <= before {
        assert!(start.elapsed() < PATIENCE, "the broken file was never noticed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(curl(&[trusts_new[0], trusts_new[1], &health]).await.status, 200);
    assert!(
        metric(&server, &trusts_new, "bucketd_tls_reloads_total", "result=\"loaded\"").await >= 1.0
    );
    server.shutdown().await;
}

/// One HTTPS connection kept open (HTTP/1.1 keep-alive), for requests before and after a
/// change.
struct Connection {
    stream: tokio_rustls::client::TlsStream<TcpStream>,
}

impl Connection {
    async fn open(server: &TestServer, ca: &Ca) -> Connection {
        let pem = std::fs::read(&ca.cert).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        use rustls_pki_types::pem::PemObject;
        for cert in rustls_pki_types::CertificateDer::pem_slice_iter(&pem) {
            roots.add(cert.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = TcpStream::connect(server.http).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let stream =
            tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap();
        Connection { stream }
    }

    /// The status of a GET of `path` on this connection.
    async fn get(&mut self, path: &str) -> u16 {
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
        self.stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        // The head byte by byte, then exactly its Content-Length, so the next request starts
        // on a clean connection.
        while !head.ends_with(b"\r\n\r\n") {
            let n = tokio::time::timeout(PATIENCE, self.stream.read(&mut byte)).await.unwrap();
            assert_eq!(n.unwrap(), 1, "connection closed; read so far {head:?}");
            head.push(byte[0]);
        }
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let length = text
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse::<usize>().unwrap())
            .expect("a Content-Length");
        let mut body = vec![0u8; length];
        self.stream.read_exact(&mut body).await.unwrap();
        let status = String::from_utf8_lossy(&head[9..12]).into_owned();
        status.parse().unwrap()
    }
}
