//! The shared Store suite against the in-memory store.

mod store_suite;

use std::sync::Arc;

use bucketd::store::BucketLimits;
use bucketd::store::memory::MemoryStore;
use store_suite::{Capabilities, Fixture};

async fn make_store(limits: BucketLimits) -> Fixture {
    Fixture::new(Arc::new(MemoryStore::new(limits)), Capabilities::default(), ())
}

store_suite::store_suite!(make_store);
