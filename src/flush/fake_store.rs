//! A scriptable `Store` for flusher tests: records what it was given, fails on request.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use tokio::time::Instant;

use crate::model::{Batch, Reading, Seq, TimestampMs, WriterId};
use crate::store::{
    Compaction, RangeQuery, RollupQuery, RollupRow, SensorInfo, SensorQuery, Store, StoreError,
    WriteReport,
};

#[derive(Default)]
pub(crate) struct FakeStore {
    state: Mutex<State>,
    latency: Duration,
    /// Set: the store's writes block their thread (`Store::writes_block`), each until the
    /// gate is opened.
    gate: Option<Gate>,
}

#[derive(Default)]
struct Gate {
    /// (writes entered, open)
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    written: Vec<Batch>,
    /// Every batch of the next this-many write calls fails with `Unavailable`.
    fail_calls: usize,
    fail_forever: bool,
    /// Batches of this sensor are rejected permanently.
    reject_sensor: Option<String>,
    /// One entry per batch, consumed in order: `true` fails that batch with `Unavailable`.
    batch_script: VecDeque<bool>,
    /// Every batch of the next this-many write calls is applied, then reported `Unavailable`
    /// (a reply lost after the write landed).
    land_then_fail_calls: usize,
    /// `high_water` fails while this is set.
    marks_unavailable: bool,
    /// Highest sequence number written per (key, hour).
    marks: std::collections::HashMap<(String, TimestampMs, WriterId), Seq>,
    /// Start time of every write call.
    calls: Vec<Instant>,
    high_water_calls: usize,
    in_write: usize,
    /// When each `compact` call came.
    compactions: Vec<Instant>,
}

impl FakeStore {
    pub fn new() -> FakeStore {
        FakeStore::default()
    }

    pub fn with_latency(latency: Duration) -> FakeStore {
        FakeStore { latency, ..FakeStore::default() }
    }

    /// A store whose writes block their thread, each until `open_gate`.
    pub fn blocking_at_a_gate() -> FakeStore {
        FakeStore { gate: Some(Gate::default()), ..FakeStore::default() }
    }

    /// Blocks until a write has entered the gate.
    pub fn wait_for_a_write_at_the_gate(&self) {
        let gate = self.gate.as_ref().expect("a store with a gate");
        let entered = gate.state.lock().unwrap();
        drop(gate.changed.wait_while(entered, |(entered, _)| *entered == 0).unwrap());
    }

    pub fn open_gate(&self) {
        let gate = self.gate.as_ref().expect("a store with a gate");
        gate.state.lock().unwrap().1 = true;
        gate.changed.notify_all();
    }

    pub fn fail_next_calls(&self, n: usize) {
        self.state.lock().unwrap().fail_calls = n;
    }

    pub fn fail_forever(&self, on: bool) {
        self.state.lock().unwrap().fail_forever = on;
    }

    pub fn land_then_fail_next_calls(&self, n: usize) {
        self.state.lock().unwrap().land_then_fail_calls = n;
    }

    pub fn marks_unavailable(&self, on: bool) {
        self.state.lock().unwrap().marks_unavailable = on;
    }

    pub fn reject_sensor(&self, key: &str) {
        self.state.lock().unwrap().reject_sensor = Some(key.to_string());
    }

    pub fn script_batches(&self, fail: impl IntoIterator<Item = bool>) {
        self.state.lock().unwrap().batch_script.extend(fail);
    }

    pub fn written(&self) -> Vec<Batch> {
        self.state.lock().unwrap().written.clone()
    }

    pub fn written_readings(&self) -> usize {
        self.state.lock().unwrap().written.iter().map(Batch::len).sum()
    }

    pub fn calls(&self) -> Vec<Instant> {
        self.state.lock().unwrap().calls.clone()
    }

    pub fn compactions(&self) -> Vec<Instant> {
        self.state.lock().unwrap().compactions.clone()
    }

    pub fn high_water_calls(&self) -> usize {
        self.state.lock().unwrap().high_water_calls
    }

    pub fn in_write(&self) -> usize {
        self.state.lock().unwrap().in_write
    }
}

#[async_trait]
impl Store for FakeStore {
    fn name(&self) -> &'static str {
        "fake"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn writes_block(&self) -> bool {
        self.gate.is_some()
    }

    async fn write(
        &self,
        writer: WriterId,
        batches: &[Batch],
    ) -> Vec<Result<WriteReport, StoreError>> {
        {
            let mut s = self.state.lock().unwrap();
            s.calls.push(Instant::now());
            s.in_write += 1;
        }
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        if let Some(gate) = &self.gate {
            let mut state = gate.state.lock().unwrap();
            state.0 += 1;
            gate.changed.notify_all();
            drop(gate.changed.wait_while(state, |(_, open)| !*open).unwrap());
        }
        let mut s = self.state.lock().unwrap();
        s.in_write -= 1;
        let whole_call_fails = s.fail_forever || s.fail_calls > 0;
        s.fail_calls = s.fail_calls.saturating_sub(1);
        let reply_lost = !whole_call_fails && s.land_then_fail_calls > 0;
        s.land_then_fail_calls = s.land_then_fail_calls.saturating_sub(1);
        let mut out = Vec::with_capacity(batches.len());
        for batch in batches {
            let scripted = s.batch_script.pop_front().unwrap_or(false);
            if whole_call_fails || scripted {
                out.push(Err(StoreError::Unavailable("fake outage".into())));
            } else if s.reject_sensor.as_deref() == Some(batch.series.key()) {
                out.push(Err(StoreError::Rejected("fake rejection".into())));
            } else {
                s.written.push(batch.clone());
                if let Some(last) = batch.last_seq() {
                    let mark = s
                        .marks
                        .entry((batch.series.key().to_owned(), batch.hour, writer))
                        .or_default();
                    *mark = (*mark).max(last);
                }
                out.push(if reply_lost {
                    Err(StoreError::Unavailable("fake lost reply".into()))
                } else {
                    Ok(WriteReport { buckets_created: 1 })
                });
            }
        }
        out
    }

    async fn high_water(
        &self,
        writer: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<Seq>, StoreError> {
        let mut s = self.state.lock().unwrap();
        s.high_water_calls += 1;
        if s.marks_unavailable || s.fail_forever {
            return Err(StoreError::Unavailable("fake outage".into()));
        }
        Ok(keys
            .iter()
            .map(|(key, hour)| s.marks.get(&(key.clone(), *hour, writer)).copied().unwrap_or(0))
            .collect())
    }

    fn readings(&self, _query: RangeQuery) -> BoxStream<'static, Result<Reading, StoreError>> {
        Box::pin(futures::stream::empty())
    }

    async fn compact(&self) -> Result<Option<Compaction>, StoreError> {
        self.state.lock().unwrap().compactions.push(Instant::now());
        Ok(Some(Compaction::Done { before: 2, after: 1 }))
    }

    async fn rollups(&self, _query: RollupQuery) -> Result<Vec<RollupRow>, StoreError> {
        Ok(Vec::new())
    }

    async fn sensors(&self, _query: SensorQuery) -> Result<Vec<SensorInfo>, StoreError> {
        Ok(Vec::new())
    }
}
