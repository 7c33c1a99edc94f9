//! A gzip bomb gets 413 without the server allocating more than about the body limit. Alone in
//! its test binary because it measures the process's peak heap through a counting allocator.

#[path = "support/server.rs"]
mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use flate2::Compression;
use flate2::write::GzEncoder;
use reqwest::StatusCode;
use support::{TestServer, memory_store};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const LIMIT: usize = 1 << 20;

#[tokio::test]
async fn gzip_bomb_is_refused_within_the_limit() {
    let server = TestServer::start(memory_store(), &["--max-body-bytes", "1MiB"]).await;

    // 256 MiB of zeros as 256 concatenated gzip members of 1 MiB each (~1 KiB compressed each):
    // valid gzip that decompressors must read through member after member.
    let mut member = GzEncoder::new(Vec::new(), Compression::best());
    member.write_all(&vec![0u8; 1 << 20]).unwrap();
    let member = member.finish().unwrap();
    let bomb: Vec<u8> = member.iter().copied().cycle().take(member.len() * 256).collect();
    assert!(bomb.len() < LIMIT, "compressed bomb must pass the wire-size check");

    for path in ["/write", "/api/v2/write", "/api/v1/readings"] {
        let request = server
            .client
            .post(server.url(path))
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(bomb.clone());
        let baseline = CURRENT.load(Ordering::Relaxed);
        PEAK.store(baseline, Ordering::Relaxed);
        let response = request.send().await.unwrap();
        let peak = PEAK.load(Ordering::Relaxed) - baseline;
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        // Body (< 1 MiB) + decompressed output (<= 1 MiB) + the client's copy and HTTP
        // machinery. Decompressing the whole bomb would need 256 MiB.
        assert!(peak < 8 * LIMIT, "{path}: peak heap grew by {peak} bytes during the request");
    }
    server.shutdown().await;
}
