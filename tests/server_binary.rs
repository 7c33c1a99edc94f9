//! The real binary with its default (embedded) store: SIGTERM flushes and exits 0, and what was
//! accepted is there after a restart on the same data directory.

#![cfg(unix)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Bucketd {
    child: Child,
    base: String,
}

impl Bucketd {
    fn spawn(data_dir: &std::path::Path) -> Bucketd {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_bucketd"))
            .args(["--http-addr", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(data_dir)
            // Nothing is due before the signal: the final flush must do the work.
            .args(["--flush-interval", "1h"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("bucketd starts");
        Bucketd { child, base: format!("http://127.0.0.1:{port}") }
    }

    async fn wait_ready(&mut self, client: &reqwest::Client) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("bucketd exited before it was ready: {status}");
            }
            if let Ok(r) = client.get(format!("{}/ready", self.base)).send().await
                && r.status() == StatusCode::OK
            {
                return;
            }
            assert!(Instant::now() < deadline, "bucketd not ready within 20 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("bucketd did not exit within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Bucketd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn sigterm_flushes_everything_and_a_restart_finds_it() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let t0 = 1_700_000_000_000i64;

    let mut first = Bucketd::spawn(dir.path());
    first.wait_ready(&client).await;
    let body: String = (0..500)
        .map(|i| format!("{}\n", json!({"sensor": "bin", "ts": t0 + i, "fields": {"v": i}})))
        .collect();
    let response = client
        .post(format!("{}/api/v1/readings", first.base))
        .header("content-type", "application/x-ndjson")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let status = first.terminate();
    assert!(status.success(), "bucketd exited with {status} after SIGTERM");

    let mut second = Bucketd::spawn(dir.path());
    second.wait_ready(&client).await;
    let response = client
        .get(format!(
            "{}/api/v1/readings?sensor=bin&from={t0}&to={}&limit=1000&format=ndjson",
            second.base,
            t0 + 1000
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = response.text().await.unwrap();
    let readings = text.lines().filter(|l| !l.contains("next_cursor")).count();
    assert_eq!(readings, 500, "{text}");
    second.terminate();
}
