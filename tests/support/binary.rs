//! The real `bucketd` binary as a child process, for tests that signal or kill it.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub struct Bucketd {
    pub child: Child,
    pub base: String,
}

impl Bucketd {
    pub fn spawn(data_dir: &std::path::Path) -> Bucketd {
        // Nothing is due before the signal: the final flush must do the work.
        Self::spawn_with(data_dir, "1h")
    }

    pub fn spawn_with(data_dir: &std::path::Path, flush_interval: &str) -> Bucketd {
        Self::spawn_args(data_dir, flush_interval, &[])
    }

    pub fn spawn_args(data_dir: &std::path::Path, flush_interval: &str, args: &[&str]) -> Bucketd {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_bucketd"))
            .args(["--http-addr", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--flush-interval", flush_interval])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("bucketd starts");
        Bucketd { child, base: format!("http://127.0.0.1:{port}") }
    }

    pub async fn wait_ready(&mut self, client: &reqwest::Client) {
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

    pub fn terminate(mut self) -> std::process::ExitStatus {
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
