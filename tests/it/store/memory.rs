//! The shared Store suite against the in-memory store.

use std::sync::Arc;

use bucketd::store::BucketLimits;
use bucketd::store::memory::MemoryStore;

use super::suite::{Capabilities, Fixture};

async fn make_store(limits: BucketLimits) -> Fixture {
    let store = Arc::new(MemoryStore::new(limits));
    let hook = store.clone();
    Fixture::new(
        store,
        Capabilities {
            rejects_oversized_reading: false,
            retention_pass: true,
            rollup_retention_by_day: false,
        },
        (),
    )
    .with_break_off(move |n| hook.fail_next_batch_after(n))
}

super::suite::store_suite!(make_store);
