//! The shared Store suite against the in-memory store.

mod store_suite;

use std::sync::Arc;

use bucketd::store::BucketLimits;
use bucketd::store::memory::MemoryStore;
use store_suite::{Capabilities, Fixture};

async fn make_store(limits: BucketLimits) -> Fixture {
    let store = Arc::new(MemoryStore::new(limits));
    let hook = store.clone();
    Fixture::new(store, Capabilities::default(), ())
        .with_break_off(move |n| hook.fail_next_batch_after(n))
}

store_suite::store_suite!(make_store);
