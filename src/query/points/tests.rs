//! Any interleaving of writes, repeated points, flushes and queries, on both stores, against
//! a model that holds one reading per point.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use proptest::prelude::*;

use super::super::kept::Kept;
use super::super::merge::merge;
use super::super::rollups::merged_rollups;
use super::super::state::QueryState;
use crate::buffer::{BufferConfig, Buffers, Outcome, TakeMode};
use crate::databases::Registry;
use crate::model::{FieldValue, HOUR_MS, Reading, SeriesMeta, TimestampMs, WriterId};
use crate::store::embedded::EmbeddedStore;
use crate::store::memory::MemoryStore;
use crate::store::{BucketLimits, FieldStats, Need, Order, RangeQuery, RollupQuery, Store};

/// A reading to push: of series "t" (else "s"), its time, its fields.
type Sent = (bool, TimestampMs, Vec<(&'static str, i64)>);

#[derive(Clone, Debug)]
enum Op {
    /// Readings of series "s" (or "t"), at times on a coarse grid so that points repeat.
    Push(Vec<Sent>),
    /// Takes up to this many readings and writes them.
    Flush(usize),
    /// Takes every buffer, and checks the queries while its write is in flight and after the
    /// store has it but before the buffers know.
    FlushWatched,
}

fn op() -> impl Strategy<Value = Op> {
    let field = (prop_oneof![Just("a"), Just("b"), Just("c")], -20i64..20);
    let reading = (
        any::<bool>(),
        (0i64..3 * 12).prop_map(|slot| slot * 5 * 60_000),
        proptest::collection::btree_map(field.0, field.1, 1..3)
            .prop_map(|m| m.into_iter().collect::<Vec<_>>()),
    );
    prop_oneof![
        3 => proptest::collection::vec(reading, 1..8).prop_map(Op::Push),
        1 => (1usize..20).prop_map(Op::Flush),
        1 => Just(Op::FlushWatched),
    ]
}

fn sorted(mut r: Reading) -> Reading {
    r.fields.sort_by(|a, b| a.0.cmp(&b.0));
    r
}

struct World {
    buffers: Arc<Buffers>,
    state: QueryState,
    /// Per series, its points: time → field → value, the later write winning.
    model: BTreeMap<&'static str, BTreeMap<TimestampMs, BTreeMap<&'static str, i64>>>,
}

impl World {
    fn new(store: Arc<dyn Store>) -> World {
        let buffers = Buffers::new(BufferConfig {
            max_buffered_bytes: usize::MAX,
            max_buffered_readings: usize::MAX,
            max_batch_readings: usize::MAX,
            flush_interval: Duration::from_secs(3600),
        });
        let state = QueryState::new(store, buffers.clone(), Arc::new(Registry::default()));
        World { buffers, state, model: BTreeMap::new() }
    }

    fn push(&mut self, readings: &[Sent]) {
        let items = readings
            .iter()
            .map(|(t, ts, fields)| {
                let key = if *t { "t" } else { "s" };
                let point = self.model.entry(key).or_default().entry(*ts).or_default();
                point.extend(fields.iter().cloned());
                let fields = fields.iter().map(|&(n, v)| (n.into(), FieldValue::Int(v))).collect();
                (SeriesMeta::untagged(key, "m").into(), Reading { ts: *ts, fields })
            })
            .collect();
        self.buffers.push(items).expect("unbounded buffers");
    }

    async fn flush(&self, most: usize, watched: bool) -> Result<(), TestCaseError> {
        let Some(taken) = self.buffers.take(TakeMode::All, most, usize::MAX) else {
            return Ok(());
        };
        if watched {
            self.check().await?;
        }
        let outcomes: Vec<Outcome> = self
            .state
            .store
            .write(WriterId(1), taken.batches())
            .await
            .into_iter()
            .map(|r| r.map(|_| Outcome::Written).expect("the store writes"))
            .collect();
        if watched {
            self.check().await?;
        }
        self.buffers.complete(taken, &outcomes);
        Ok(())
    }

    /// Readings and rollups, stored and unflushed merged, are the model's.
    async fn check(&self) -> Result<(), TestCaseError> {
        for key in ["s", "t"] {
            let points = self.model.get(key).cloned().unwrap_or_default();
            let want: Vec<Reading> = points
                .iter()
                .map(|(&ts, fields)| Reading {
                    ts,
                    fields: fields.iter().map(|(&n, &v)| (n.into(), FieldValue::Int(v))).collect(),
                })
                .collect();
            let (from, to) = (0, 3 * HOUR_MS);
            for order in [Order::Asc, Order::Desc] {
                let unflushed = self.state.unflushed.unflushed(key, from, to);
                let q = RangeQuery { sensor: key.into(), from, to, order, limit: None };
                let got: Vec<Reading> = merge(self.state.store.readings(q), unflushed, order)
                    .map(|r| sorted(r.expect("reads")))
                    .collect()
                    .await;
                let mut want = want.clone();
                if order == Order::Desc {
                    want.reverse();
                }
                prop_assert_eq!(got, want);
            }
            for step_ms in [HOUR_MS, 15 * 60_000] {
                let q = RollupQuery { sensor: key.into(), from, to, step_ms, fields: None };
                let got = merged_rollups(&self.state, &Kept::default(), q, Need::ALL)
                    .await
                    .expect("rolls up")
                    .into_rows();
                let mut model: BTreeMap<TimestampMs, BTreeMap<String, FieldStats>> =
                    BTreeMap::new();
                for r in &want {
                    for (name, v) in &r.fields {
                        let v = v.as_f64().expect("numbers");
                        let one = FieldStats::of(r.ts, v);
                        model
                            .entry(r.ts.div_euclid(step_ms) * step_ms)
                            .or_default()
                            .entry(name.to_string())
                            .and_modify(|s| s.merge(&one))
                            .or_insert(one);
                    }
                }
                let got: BTreeMap<_, _> =
                    got.into_iter().map(|row| (row.start, row.fields)).collect();
                prop_assert_eq!(got, model, "step {}", step_ms);
            }
        }
        Ok(())
    }
}

async fn run(store: Arc<dyn Store>, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut world = World::new(store);
    for op in ops {
        match op {
            Op::Push(readings) => world.push(readings),
            Op::Flush(most) => world.flush(*most, false).await?,
            Op::FlushWatched => world.flush(usize::MAX, true).await?,
        }
        world.check().await?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// However writes, points written again, flushes and queries interleave, each point reads
    /// back as one reading with the union of its fields, the later value winning, and every
    /// rollup counts it once, on either store.
    #[test]
    fn points_are_stored_once_however_writes_and_flushes_interleave(
        ops in proptest::collection::vec(op(), 1..16),
        max_readings in 2u32..6,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let limits = BucketLimits { max_readings, max_bytes: 1 << 20 };
        rt.block_on(run(Arc::new(MemoryStore::new(limits)), &ops))?;
        let dir = tempfile::tempdir().unwrap();
        let embedded = EmbeddedStore::open(dir.path(), limits).expect("opens");
        rt.block_on(run(Arc::new(embedded), &ops))?;
    }
}

/// Counts the store's `latest_of` calls.
struct CountsLatest {
    inner: MemoryStore,
    calls: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl Store for CountsLatest {
    fn name(&self) -> &'static str {
        "counts-latest"
    }
    async fn ping(&self) -> Result<(), crate::store::StoreError> {
        Ok(())
    }
    async fn write(
        &self,
        w: WriterId,
        batches: &[crate::model::Batch],
    ) -> Vec<Result<crate::store::WriteReport, crate::store::StoreError>> {
        self.inner.write(w, batches).await
    }
    async fn high_water(
        &self,
        w: WriterId,
        keys: &[(String, TimestampMs)],
    ) -> Result<Vec<crate::model::Seq>, crate::store::StoreError> {
        self.inner.high_water(w, keys).await
    }
    fn readings(
        &self,
        query: RangeQuery,
    ) -> futures::stream::BoxStream<'static, Result<Reading, crate::store::StoreError>> {
        self.inner.readings(query)
    }
    async fn rollups(
        &self,
        query: RollupQuery,
    ) -> Result<Vec<crate::store::RollupRow>, crate::store::StoreError> {
        self.inner.rollups(query).await
    }
    async fn latest_of(
        &self,
        sensors: Vec<String>,
        range: (TimestampMs, TimestampMs),
    ) -> Result<Vec<Option<Reading>>, crate::store::StoreError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.latest_of(sensors, range).await
    }
    async fn sensors(
        &self,
        query: crate::store::SensorQuery,
    ) -> Result<Vec<crate::store::SensorInfo>, crate::store::StoreError> {
        self.inner.sensors(query).await
    }
}

/// A rollup learns the store's latest time in range from its own steps' `last` times: with
/// unflushed readings, later ones or points written again, it asks the store nothing more,
/// and still counts each point once.
#[test]
fn a_rollup_with_unflushed_readings_asks_the_store_for_no_latest_time() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let store = Arc::new(CountsLatest {
            inner: MemoryStore::new(BucketLimits::default()),
            calls: Default::default(),
        });
        let mut world = World::new(store.clone());
        world.push(&[(false, 0, vec![("a", 1)]), (false, 60_000, vec![("a", 2)])]);
        world.flush(usize::MAX, false).await.unwrap();
        // One later reading, and one point written again with a new value.
        world.push(&[(false, 120_000, vec![("a", 4)]), (false, 60_000, vec![("a", 3)])]);
        world.check().await.unwrap();
        assert_eq!(store.calls.load(std::sync::atomic::Ordering::Relaxed), 0);
    });
}
