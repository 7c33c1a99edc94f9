//! The flusher task. STUB: the public surface; bodies land with the ingest issue.

use std::sync::Arc;
use std::time::Duration;

use crate::buffer::Buffers;
use crate::store::Store;

#[derive(Clone, Debug)]
pub struct FlushConfig {
    pub flush_interval: Duration,
    /// First retry delay after a retriable store failure; doubles up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    pub flushed: usize,
    /// Readings still unwritten when the deadline passed (logged as lost).
    pub unflushed: usize,
}

pub struct Flusher {
    _private: (),
}

impl Flusher {
    pub fn spawn(_buffers: Arc<Buffers>, _store: Arc<dyn Store>, _config: FlushConfig) -> Flusher {
        todo!()
    }

    /// Stops the periodic loop, then flushes everything buffered until empty or `deadline`.
    pub async fn shutdown(self, _deadline: Duration) -> ShutdownReport {
        todo!()
    }
}
