//! A gzip bomb gets 413 without the server allocating more than about the body limit. It
//! measures the process's peak heap through a counting allocator, so it runs in a process of its
//! own ([`in_own_process`]); the allocator counts only there.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

use flate2::Compression;
use flate2::write::GzEncoder;
use reqwest::StatusCode;

use crate::support::in_own_process;
use crate::support::server::{TestServer, memory_store};

/// The system allocator, counting the bytes allocated while [`COUNTING`] is on: the allocator
/// of the whole test binary, idle (one load a call) except in this test's own process.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
/// Bytes allocated less bytes freed since counting began: negative when blocks from before
/// are freed, which is why only differences of it mean anything.
static CURRENT: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

// A global allocator is unsafe by its trait: the one place the tests allow it.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() && COUNTING.load(Ordering::Relaxed) {
            let size = layout.size() as isize;
            let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        if COUNTING.load(Ordering::Relaxed) {
            CURRENT.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const LIMIT: usize = 1 << 20;

#[tokio::test]
async fn gzip_bomb_is_refused_within_the_limit() {
    if !in_own_process(module_path!(), "gzip_bomb_is_refused_within_the_limit") {
        return;
    }
    COUNTING.store(true, Ordering::Relaxed);
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
        assert!(
            peak < 8 * LIMIT as isize,
            "{path}: peak heap grew by {peak} bytes during the request"
        );
    }
    server.shutdown().await;
}
