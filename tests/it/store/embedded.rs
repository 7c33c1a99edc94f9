//! The embedded store against the shared Store suite ([`super::suite`]), each case on a fresh
//! store in a temporary directory. `cargo test --test it store::embedded`.

use std::sync::Arc;

use bucketd::store::BucketLimits;
use bucketd::store::embedded::EmbeddedStore;

use super::suite::{Capabilities, Fixture};

/// redb has no per-document limit: an oversized reading is stored like any other.
const CAPS: Capabilities = Capabilities {
    rejects_oversized_reading: false,
    retention_pass: true,
    rollup_retention_by_day: false,
};

async fn make_store(limits: BucketLimits) -> Fixture {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().to_owned();
    let store = tokio::task::spawn_blocking(move || EmbeddedStore::open(&path, limits))
        .await
        .expect("open task")
        .expect("embedded store opens");
    let store = Arc::new(store);
    let hook = store.clone();
    Fixture::new(store, CAPS, dir).with_break_off(move |n| hook.fail_next_batch_after(n))
}

super::suite::store_suite!(make_store);
