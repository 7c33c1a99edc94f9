//! The flusher task: moves due buffers into the store, retries retriable failures with
//! exponential backoff, drops permanently rejected batches (counted and logged), and drains
//! everything on shutdown.
//!
//! # Cycle
//! The task wakes every tick ([`Buffers::tick`]: a fortieth of the flush interval, 10 to
//! 250 ms), or early when a push filled a buffer to the batch size or found the buffers under
//! memory pressure. Each cycle takes the due buffers (`Buffers::take`: full, within a tick of
//! the flush interval, larger than average under pressure, or all of them once no push came
//! for a while), at most [`MAX_READINGS_PER_WRITE`] readings, and writes them with ONE
//! `Store::write` call; another cycle follows at once while more is due.
//!
//! # Where it runs
//! A task on the server's runtime, or, for a store whose writes block their thread (the
//! embedded store: `Store::writes_block`), a thread of its own with a runtime for its timers.
//!
//! # Failures
//! A retriable error may hide a write that landed (a timeout, a lost reply) or half landed (a
//! batch spanning buckets). Before such a batch goes back, the flusher asks the store for its
//! (series, hour) high-water mark and releases the readings up to it, so a retry never
//! duplicates readings or doubles statistics; the question is repeated with backoff until the
//! store answers (the cycle stays in flight meanwhile, so nothing newer of those hours is
//! written around it). The rest goes back at the head of its buffer (so order is kept) and the
//! next cycle waits `min_backoff`, doubling per consecutive failing cycle up to `max_backoff`;
//! a cycle without retriable failures resets it. Readings are never dropped for a retriable
//! error: while the store is down the buffers fill to their bound, and then pushes spill into
//! the write-ahead log until its bound (or, with `--ack=buffered`, are refused), which is the
//! intended backpressure. A permanent error takes that batch only out of the buffers, into the
//! dead-letter directory ([`dead_letter`]); a batch that cannot be kept there is retried.

pub mod dead_letter;
#[cfg(test)]
mod fake_store;
#[cfg(test)]
mod tests;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::buffer::{Buffers, Outcome, TakeMode, Taken};
use crate::metrics::{
    BUCKETS_CREATED, DEAD_LETTER_READINGS, FLUSH_DURATION, FLUSH_READINGS, FLUSHES,
    READINGS_DROPPED, STORE_COMPACTIONS, STORE_ERRORS, STORE_FILE_BYTES,
};
use crate::model::{SettledRun, WriterId};
use crate::store::{Compaction, Marks, Store, StoreError, high_water_until_answered};
use dead_letter::DeadLetters;

/// Told which readings have left the buffers for good: stored, or dropped as rejected. The
/// write-ahead log deletes a segment once every reading in it has been settled. Called once per
/// flush cycle, with each numbered batch's settled first readings.
pub trait Settle: Send + Sync {
    fn settle(&self, runs: &[SettledRun<'_>]);
}

/// Readings per `Store::write` call at most: bounds the memory a write holds twice (the batch
/// and its encoding; the MongoDB store splits its commands by size itself). 250,000 rather
/// than 100,000: each call ends in one commit (the embedded store's fsync), and a commit
/// writes each B-tree page its batches dirtied once, however many sensors share it, so the
/// final drain of a flat-out load takes far less time.
pub const MAX_READINGS_PER_WRITE: usize = 250_000;

/// How often a flusher that always finds something due gives freed memory back (see
/// `alloc::release_freed`).
const RELEASE_WHILE_BUSY: Duration = Duration::from_secs(1);

/// At most one log line per kind of failure per this period; the rest are counted into it.
const LOG_EVERY: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct FlushConfig {
    /// Whose high-water marks the writes raise and the after-failure check reads.
    pub writer: WriterId,
    /// First retry delay after a retriable store failure; doubles up to `max_backoff`.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// Where batches the store refuses for good go. `None` drops them (counted and logged):
    /// tests and tools only; the server always keeps them.
    pub dead_letters: Option<Arc<DeadLetters>>,
    /// How long the buffers stay empty after writes before the store is asked to give back
    /// the file space it no longer uses (`Store::compact`); `None`: never.
    pub compact_after_quiet: Option<Duration>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Readings confirmed written after `shutdown` was called (including a write that was in
    /// flight at the time).
    pub flushed: usize,
    /// Readings still unwritten when the deadline passed. Includes the readings of a write
    /// abandoned at the deadline, which the store may have completed.
    pub unflushed: usize,
    /// Whether the unwritten readings are safe in the write-ahead log (written at the next
    /// start) rather than lost. Set by the server, which knows the ack mode.
    pub kept_in_wal: bool,
}

/// Handle to the flusher. Dropping it leaves the flusher running until the runtime that
/// started it shuts down; call [`Flusher::shutdown`] to drain.
pub struct Flusher {
    stop: CancellationToken,
    /// Cancelled when the drain's deadline has passed: a flusher on its own thread cannot be
    /// aborted, so it stops after the write in flight.
    abandon: CancellationToken,
    task: Running,
    buffers: Arc<Buffers>,
    written: Arc<AtomicUsize>,
    errors: Arc<AtomicU64>,
}

impl Flusher {
    pub fn spawn(buffers: Arc<Buffers>, store: Arc<dyn Store>, config: FlushConfig) -> Flusher {
        Flusher::spawn_settling(buffers, store, config, None)
    }

    /// Like `spawn`, telling `settle` about every reading stored or dropped.
    pub fn spawn_settling(
        buffers: Arc<Buffers>,
        store: Arc<dyn Store>,
        config: FlushConfig,
        settle: Option<Arc<dyn Settle>>,
    ) -> Flusher {
        let stop = CancellationToken::new();
        let abandon = CancellationToken::new();
        let written = Arc::new(AtomicUsize::new(0));
        let errors = Arc::new(AtomicU64::new(0));
        let worker = Worker {
            buffers: buffers.clone(),
            store,
            writer: config.writer,
            tick: buffers.tick(),
            backoff: Backoff::new(config.min_backoff, config.max_backoff),
            written: written.clone(),
            errors: errors.clone(),
            settle,
            dead_letters: config.dead_letters,
            rejected_log: LogLimiter::default(),
            dead_letter_log: LogLimiter::default(),
            retry_log: LogLimiter::default(),
            check_log: LogLimiter::default(),
            quiet: Quiet { after: config.compact_after_quiet, wrote: false, since: None },
        };
        let blocks = worker.store.writes_block();
        let run = worker.run(stop.clone(), abandon.clone());
        let task = if blocks {
            // A task's life ends with its runtime; the thread's too: this task, dropped when
            // the runtime shuts down, stops it after its write in flight.
            let guards = (stop.clone().drop_guard(), abandon.clone().drop_guard());
            tokio::spawn(async move {
                let _guards = guards;
                std::future::pending::<()>().await
            });
            Running::on_own_thread(run)
        } else {
            Running::Task(tokio::spawn(run))
        };
        Flusher { stop, abandon, task, buffers, written, errors }
    }

    /// Store write failures since start (what `bucketd_store_errors_total` counts for
    /// writes), shared with the flusher task: read it while the task runs.
    pub fn errors(&self) -> Arc<AtomicU64> {
        self.errors.clone()
    }

    /// Stops the periodic loop, then flushes everything buffered until empty or `deadline`.
    /// Ingest should be stopped first: readings pushed during the drain are flushed too, but
    /// only while the deadline allows.
    pub async fn shutdown(self, deadline: Duration) -> ShutdownReport {
        let Flusher { stop, abandon, task, buffers, written, errors: _ } = self;
        let before = written.load(Ordering::Acquire);
        stop.cancel();
        match task {
            Running::Task(mut task) => match tokio::time::timeout(deadline, &mut task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "flusher task failed"),
                Err(_) => {
                    // Dropping an in-flight write is safe: its readings are still counted as
                    // held (and so reported below), nothing was released.
                    task.abort();
                    let _ = task.await;
                }
            },
            Running::Thread(mut done) => {
                let finished = match tokio::time::timeout(deadline, &mut done).await {
                    Ok(finished) => finished,
                    Err(_) => {
                        // As an aborted task's: the write in flight finishes, nothing after it
                        // starts, and what it has not released is reported unflushed.
                        abandon.cancel();
                        done.await
                    }
                };
                if finished.is_err() {
                    tracing::error!("flusher thread failed");
                }
            }
        }
        ShutdownReport {
            flushed: written.load(Ordering::Acquire) - before,
            unflushed: buffers.buffered(),
            kept_in_wal: false,
        }
    }
}

/// Where the worker runs.
enum Running {
    Task(JoinHandle<()>),
    /// A store whose writes block (`Store::writes_block`) gets a thread of its own, with a
    /// runtime for the worker's timers; the receiver resolves when the worker has returned
    /// (an error if it panicked). Not a runtime worker blocked in place: that handed the
    /// runtime to another thread at every write, and the allocator kept partly used memory
    /// for each thread (docs/design/stores.md, "The embedded store (redb)").
    Thread(tokio::sync::oneshot::Receiver<()>),
}

impl Running {
    fn on_own_thread(run: impl Future<Output = ()> + Send + 'static) -> Running {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime with only a timer builds");
        let (done, finished) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("flusher".into())
            .spawn(move || {
                runtime.block_on(run);
                let _ = done.send(());
            })
            .expect("cannot start the flusher thread");
        Running::Thread(finished)
    }
}

struct Worker {
    buffers: Arc<Buffers>,
    store: Arc<dyn Store>,
    writer: WriterId,
    tick: Duration,
    backoff: Backoff,
    written: Arc<AtomicUsize>,
    errors: Arc<AtomicU64>,
    settle: Option<Arc<dyn Settle>>,
    dead_letters: Option<Arc<DeadLetters>>,
    rejected_log: LogLimiter,
    /// Failures to keep refused batches in the dead-letter directory.
    dead_letter_log: LogLimiter,
    retry_log: LogLimiter,
    check_log: LogLimiter,
    quiet: Quiet,
}

/// When the store is next asked to compact: once after writes, when the buffers have been
/// empty for `after`. A compaction holds the store, so it waits for a lull, not a period.
struct Quiet {
    after: Option<Duration>,
    /// Written since the last compaction.
    wrote: bool,
    /// Since when the buffers have been empty, while `wrote`.
    since: Option<Instant>,
}

impl Quiet {
    fn wrote(&mut self) {
        self.wrote = true;
        self.since = None;
    }

    /// Whether to compact now, given whether the buffers hold anything.
    fn due(&mut self, empty: bool, now: Instant) -> bool {
        let Some(after) = self.after.filter(|_| self.wrote && empty) else {
            self.since = None;
            return false;
        };
        now.duration_since(*self.since.get_or_insert(now)) >= after
    }
}

impl Worker {
    /// Bytes per `Store::write` call at most, its rows and what the store holds beside them
    /// (`Store::write_overhead`): an eighth of the buffers' bound, so that large strings, wide
    /// readings or many small batches cannot make one write most of the budget.
    fn max_write_bytes(&self) -> usize {
        (self.buffers.bound_bytes() / 8).max(1)
    }

    /// The next write's batches, at most `MAX_READINGS_PER_WRITE` readings and
    /// `max_write_bytes`.
    fn take(&self, mode: TakeMode) -> Option<Taken> {
        let overhead = self.store.write_overhead();
        self.buffers.take_costed(mode, MAX_READINGS_PER_WRITE, self.max_write_bytes(), overhead)
    }

    async fn run(mut self, stop: CancellationToken, abandon: CancellationToken) {
        // Periodic phase. A write in progress is never cancelled by `stop`: it finishes and
        // its outcome is settled before the drain starts.
        let mut released = Instant::now();
        while !stop.is_cancelled() {
            match self.take(TakeMode::Due) {
                Some(taken) => {
                    self.quiet.wrote();
                    let delay = self.write(taken).await;
                    // A store that stays busy never finds nothing due: give back what the
                    // cycles freed every so often too, or it stays resident until they end.
                    if released.elapsed() >= RELEASE_WHILE_BUSY {
                        crate::alloc::release_freed();
                        released = Instant::now();
                    }
                    if let Some(delay) = delay {
                        tokio::select! {
                            _ = stop.cancelled() => {}
                            _ = tokio::time::sleep(delay) => {}
                        }
                    }
                }
                None => {
                    // Nothing due: what the last writes freed can go back to the OS now
                    // rather than when this thread next allocates.
                    crate::alloc::release_freed();
                    if self.quiet.due(self.buffers.buffered() == 0, Instant::now()) {
                        self.compact().await;
                        continue;
                    }
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = tokio::time::sleep(self.tick) => {}
                        _ = self.buffers.due_notified() => {}
                    }
                }
            }
        }
        // Drain: everything, due or not, until empty; `shutdown` enforces the deadline.
        while !abandon.is_cancelled()
            && let Some(taken) = self.take(TakeMode::All)
        {
            if let Some(delay) = self.write(taken).await {
                tokio::select! {
                    _ = abandon.cancelled() => {}
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }

    async fn compact(&mut self) {
        let started = Instant::now();
        let result = self.store.compact().await;
        let seconds = started.elapsed().as_secs_f64();
        let outcome = match result {
            Ok(None) => {
                // Nothing of its own to compact, now or later.
                self.quiet.after = None;
                return;
            }
            Ok(Some(Compaction::Busy)) => {
                // Try again after another quiet period.
                self.quiet.since = None;
                "busy"
            }
            Ok(Some(Compaction::Done { before, after })) => {
                self.quiet.wrote = false;
                ::metrics::gauge!(STORE_FILE_BYTES).set(after as f64);
                tracing::info!(before, after, seconds, "store file compacted");
                "done"
            }
            Err(e) => {
                self.quiet.wrote = false;
                tracing::warn!(error = %e, seconds, "store compaction failed");
                "failed"
            }
        };
        ::metrics::counter!(STORE_COMPACTIONS, "result" => outcome).increment(1);
        crate::alloc::release_freed();
    }

    /// Writes one cycle and settles it. Returns the backoff to wait when a retriable failure
    /// occurred.
    async fn write(&mut self, taken: Taken) -> Option<Duration> {
        let started = std::time::Instant::now();
        let results =
            AssertUnwindSafe(self.store.write(self.writer, taken.batches())).catch_unwind().await;
        ::metrics::histogram!(FLUSH_DURATION).record(started.elapsed().as_secs_f64());
        ::metrics::histogram!(FLUSH_READINGS).record(taken.readings() as f64);

        let batches = taken.batches();
        let results = match results {
            Ok(results) => {
                if results.len() != batches.len() {
                    tracing::error!(
                        store = self.store.name(),
                        outcomes = results.len(),
                        batches = batches.len(),
                        "store returned the wrong number of outcomes; batches without one are retried"
                    );
                }
                results
            }
            Err(_) => {
                tracing::error!(store = self.store.name(), "store write panicked; retrying");
                Vec::new()
            }
        };
        let missing = Err(StoreError::Internal("store returned no outcome for this batch".into()));

        let mut outcomes = Vec::with_capacity(batches.len());
        let (mut ok, mut retried, mut rejected) = (0u64, 0u64, 0u64);
        let (mut spilled, mut dropped_readings) = (0u64, 0u64);
        let mut first_retry: Option<String> = None;
        let mut refused: Vec<(usize, String)> = Vec::new();
        for (i, batch) in batches.iter().enumerate() {
            match results.get(i).unwrap_or(&missing) {
                Ok(report) => {
                    ok += 1;
                    spilled += u64::from(report.buckets_created);
                    outcomes.push(Outcome::Written);
                }
                Err(e) if e.is_retriable() => {
                    // Before the error is counted: whoever sees the count (a client, a test)
                    // must find full buffers already spilling rather than refusing.
                    self.buffers.set_store_failing(true);
                    retried += 1;
                    ::metrics::counter!(STORE_ERRORS, "kind" => e.kind()).increment(1);
                    self.errors.fetch_add(1, Ordering::Relaxed);
                    first_retry.get_or_insert_with(|| e.to_string());
                    outcomes.push(Outcome::Retry { landed: 0 });
                }
                Err(e) => {
                    rejected += 1;
                    dropped_readings += batch.len() as u64;
                    ::metrics::counter!(STORE_ERRORS, "kind" => e.kind()).increment(1);
                    self.errors.fetch_add(1, Ordering::Relaxed);
                    refused.push((i, e.to_string()));
                    outcomes.push(Outcome::Drop);
                }
            }
        }
        let mut dead_lettered = false;
        if let Some(dead_letters) = &self.dead_letters
            && !refused.is_empty()
        {
            let blocks: Vec<(&crate::model::Batch, &str)> =
                refused.iter().map(|(i, reason)| (&batches[*i], reason.as_str())).collect();
            match dead_letters.write(self.store.name(), &blocks) {
                Ok(()) => {
                    ::metrics::counter!(DEAD_LETTER_READINGS).increment(dropped_readings);
                    dropped_readings = 0;
                    dead_lettered = true;
                }
                Err(e) => {
                    // Not kept, not dropped: the batches wait in the buffers (and the log)
                    // like a store outage's, until there is room for them.
                    for (i, _) in &refused {
                        outcomes[*i] = Outcome::Retry { landed: 0 };
                    }
                    retried += rejected;
                    rejected = 0;
                    dropped_readings = 0;
                    let readings: usize = refused.iter().map(|(i, _)| batches[*i].len()).sum();
                    if let Some(suppressed) =
                        self.dead_letter_log.allow(Instant::now(), refused.len() as u64, readings)
                    {
                        tracing::error!(
                            error = %e,
                            readings,
                            suppressed_batches = suppressed.0,
                            "cannot keep batches the store refused; they are kept for retry"
                        );
                    }
                    first_retry.get_or_insert_with(|| e.to_string());
                }
            }
        }
        ::metrics::counter!(FLUSHES, "result" => "ok").increment(ok);
        ::metrics::counter!(FLUSHES, "result" => "retry").increment(retried);
        ::metrics::counter!(FLUSHES, "result" => "rejected").increment(rejected);
        // Every bucket a write created, an hour's first bucket included: the store does not
        // say whether the hour already had one.
        ::metrics::counter!(BUCKETS_CREATED).increment(spilled);
        ::metrics::counter!(READINGS_DROPPED, "reason" => "rejected").increment(dropped_readings);

        if retried > 0 {
            self.count_landed(batches, &mut outcomes).await;
        } else {
            self.buffers.set_store_failing(false);
        }
        if let Some(settle) = &self.settle {
            let settled: Vec<SettledRun<'_>> = batches
                .iter()
                .zip(&outcomes)
                .filter(|(batch, _)| batch.is_numbered())
                .map(|(batch, outcome)| {
                    let len = match *outcome {
                        Outcome::Retry { landed } => landed.min(batch.len()),
                        _ => batch.len(),
                    };
                    SettledRun { batch, len }
                })
                .filter(|run| run.len > 0)
                .collect();
            settle.settle(&settled);
        }
        // The first refusal stands for the cycle's (none when they were all kept for retry),
        // named before `complete` takes the batches.
        let first_rejected = refused
            .first()
            .filter(|_| rejected > 0)
            .map(|(i, reason)| (batches[*i].series.key().to_owned(), reason));
        let released = self.buffers.complete(taken, &outcomes);
        self.written.fetch_add(released.written, Ordering::AcqRel);

        let now = Instant::now();
        if let Some((sensor, reason)) = first_rejected
            && let Some(suppressed) = self.rejected_log.allow(now, rejected, released.dropped)
        {
            let message = if dead_lettered {
                "store rejected batches permanently; their readings are in the dead-letter \
                 directory (replay: POST /api/v1/dead-letters/replay)"
            } else {
                "store rejected batches permanently; their readings are dropped"
            };
            tracing::error!(
                batches = rejected,
                readings = released.dropped,
                first_sensor = %sensor,
                reason = %reason,
                suppressed_batches = suppressed.0,
                suppressed_readings = suppressed.1,
                "{message}"
            );
        }
        if retried == 0 {
            self.backoff.reset();
            return None;
        }
        let delay = self.backoff.next();
        if let Some(error) = first_retry
            && let Some(suppressed) = self.retry_log.allow(now, retried, released.retried)
        {
            tracing::warn!(
                batches = retried,
                readings = released.retried,
                error = %error,
                retry_in_ms = delay.as_millis() as u64,
                suppressed_batches = suppressed.0,
                suppressed_readings = suppressed.1,
                "store write failed; batches kept for retry"
            );
        }
        Some(delay)
    }
}

impl Worker {
    /// Sets `landed` of every retried outcome from the store's high-water marks, asking until
    /// the store answers: putting back a batch that did land would store it twice.
    async fn count_landed(&mut self, batches: &[crate::model::Batch], outcomes: &mut [Outcome]) {
        let unclear: Vec<usize> = (0..batches.len())
            .filter(|&i| matches!(outcomes[i], Outcome::Retry { .. }) && batches[i].is_numbered())
            .collect();
        if unclear.is_empty() {
            return;
        }
        let keys: Vec<(String, i64)> = unclear
            .iter()
            .map(|&i| (batches[i].series.key().to_owned(), batches[i].hour))
            .collect();
        let (store, backoff, check_log) = (&self.store, &mut self.backoff, &mut self.check_log);
        let marks = high_water_until_answered(
            &**store,
            Marks::Of(self.writer),
            &keys,
            || backoff.next(),
            |e| {
                ::metrics::counter!(STORE_ERRORS, "kind" => e.kind()).increment(1);
                if let Some(suppressed) = check_log.allow(Instant::now(), unclear.len() as u64, 0) {
                    tracing::warn!(
                        batches = unclear.len(),
                        error = %e,
                        suppressed_checks = suppressed.0,
                        "cannot tell yet whether a failed write landed; asking the store again"
                    );
                }
            },
        )
        .await;
        let mut landed_total = 0u64;
        for (&i, mark) in unclear.iter().zip(marks) {
            let landed = batches[i].seqs().partition_point(|&s| s <= mark);
            landed_total += landed as u64;
            outcomes[i] = Outcome::Retry { landed };
        }
        if landed_total > 0 {
            ::metrics::counter!(crate::metrics::READINGS_LANDED_DESPITE_ERROR)
                .increment(landed_total);
            tracing::info!(
                readings = landed_total,
                "a failed write had landed (in part); those readings are not written again"
            );
        }
    }
}

/// Exponential backoff: `min`, doubling per call up to `max`, back to `min` on reset.
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Backoff {
        // A zero minimum would retry a dead store in a busy loop.
        let min = min.max(Duration::from_millis(1));
        let max = max.max(min);
        Backoff { min, max, next: min }
    }

    pub(crate) fn next(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        delay
    }

    fn reset(&mut self) {
        self.next = self.min;
    }
}

/// At most one line per [`LOG_EVERY`]; what it holds back is reported with the next line.
#[derive(Default)]
struct LogLimiter {
    last: Option<Instant>,
    suppressed_batches: u64,
    suppressed_readings: usize,
}

impl LogLimiter {
    /// `Some(suppressed (batches, readings) since the last line)` when a line may be logged.
    fn allow(&mut self, now: Instant, batches: u64, readings: usize) -> Option<(u64, usize)> {
        if self.last.is_some_and(|last| now.saturating_duration_since(last) < LOG_EVERY) {
            self.suppressed_batches += batches;
            self.suppressed_readings += readings;
            return None;
        }
        self.last = Some(now);
        Some((
            std::mem::take(&mut self.suppressed_batches),
            std::mem::take(&mut self.suppressed_readings),
        ))
    }
}
